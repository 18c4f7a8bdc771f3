"""Run trials as SLURM jobs through submitit: job arrays, live follow, reattach, honest states.

One file per concept: `client.py` (SLURM's commands: sacct, squeue, sinfo, scancel, and what their
answers mean), `job.py` (what a job runs, `TrialBatch`), `journal.py` (jobs.jsonl: what was
submitted, and adopting the jobs of an interrupted submission), `ends.py` (how a job ended, in
words), `executor.py` (`SlurmExecutor`, the Executor protocol on SLURM), `study.py` (a study's
jobs for `optbench status` and `optbench cancel`), `legacy.py` (old module paths a queued
job's pickle may name).

Submission is journaled in `<folder>/jobs.jsonl`, which only the driver writes and which outlives
it. Before each sbatch the driver appends the submission's intent (a token and the trials of
each array element); the jobs carry `optbench:<token>` in their --comment; after sbatch it
appends one line per trial (trial key -> SLURM job id, config hash, log path). A driver killed
between the two leaves an intent without job lines: the next `optbench run` (and `status`,
`cancel`) finds that submission's jobs in squeue by their comment and adopts them. So a later
run reattaches to every job that is still queued or running instead of submitting it twice.
Arrays are split so that no index reaches the cluster's MaxArraySize.

Job states come from one `sacct` call for all jobs, at most every `poll_s` seconds, and from
`squeue` where sacct cannot tell. sacct *failing* (accounting down) is not sacct *not knowing*
a job: the states then come from squeue, which lists queued, running and recently ended jobs; a
job it no longer lists has ended (how, only sacct can say: state "ENDED"); when neither answers,
every job may still run ("UNREACHABLE"). A job is declared vanished only when both answer
without it for VANISH_S. While SLURM does not answer, the executor says so once per NOTE_EVERY_S
and keeps following; no trial whose job may still run is reported ended, so none is resubmitted.

A job that ends without the trial's result file is reported "lost" with its SLURM state and log
path (a time limit is named as such, with the limit and the requeues used); the driver records
it as a failed trial and retries it. Jobs that ended while no driver followed them are settled
by the next run before it plans (`settle_ended`), so their failures are retried in that run.

Preemption and time limits: the job's callable (`TrialBatch`) implements submitit's checkpoint
protocol, so on SIGUSR2 submitit requeues the job (at most `max_requeues` times for time
limits); a requeued job runs the same trials again, each resuming from its checkpoint. SLURM
may send SIGUSR2 at any moment, also while the job's Python still starts, imports and unpickles
the job, before submitit's handler exists, when the signal's default action would kill the job
with nothing saved or requeued. So the job step's Python (JOB_STEP_CODE) blocks SIGUSR2 first
thing, before site-packages are even set up, and `TrialBatch` unblocks it once submitit's
handler is in place: a signal that came meanwhile is delivered then, and requeues the job. What
remains unguarded is the interpreter's own start (tens of milliseconds).

A job queued before optbench's modules moved still runs after the move: importing this package
installs the table of old module paths (`legacy.py`), which unpickling a job reaches first.
"""

from optbench.executors.slurm.legacy import install

install()
