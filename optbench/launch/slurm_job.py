"""What a SLURM job step runs: submitit's job runner, with SIGUSR2 held back until submitit's
handler for it is in place.

SLURM may send SIGUSR2 (time-limit warning, preemption) at any moment, also while Python is
still importing and unpickling the job, before submitit has installed its handler; the default
action would then kill the job with nothing saved and nothing requeued. Blocked, the signal waits;
`TrialBatch.__call__` unblocks it once submitit's handler is there, which requeues the job.
The SLURM executor starts the step as `python -u -m optbench.launch.slurm_job -u -m
submitit.core._submit <folder>` (submitit appends its own arguments; the last is the folder).
"""

import signal
import sys

if __name__ == "__main__":
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR2})
    from submitit.core.submission import process_job

    process_job(sys.argv[-1])
