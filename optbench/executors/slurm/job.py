"""What a SLURM job runs: `TrialBatch`, its trials (or populations) one after another, and
`JOB_STEP_CODE`, the job step's Python that holds SIGUSR2 back until submitit can handle it
(package docstring).
"""

from __future__ import annotations

import importlib
import signal
import time
from collections.abc import Sequence

import submitit

from optbench.executors.protocol import import_study_code
from optbench.host import freeze_at_exit
from optbench.trial.jobs import Job

# What a job step's Python runs (`python -u -S -c JOB_STEP_CODE -u -m submitit.core._submit
# <folder>`: submitit appends its own arguments, the last is the job folder). -S: nothing runs
# before the block, not even site-packages' .pth files, which take a good part of a second.
JOB_STEP_CODE = (
    "import signal; signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR2}); "
    "import site, sys; site.main(); "
    "from submitit.core.submission import process_job; process_job(sys.argv[-1])"
)


class TrialBatch:
    """What a SLURM job runs: its trials (or populations, train/population.py: one process,
    never DDP) one after another, in every task of the job (the DDP ranks of one trial;
    optbench.train.distributed reads SLURM's variables).

    Picklable plain data. Stops: the trial catches SIGUSR2 and SIGTERM, checkpoints at the current
    step and delivers the signal again to submitit's handler. On SIGUSR2 (SLURM's warning before
    the time limit) that handler calls `checkpoint` and requeues this job, or, once the job has
    used its requeues, ends it (the driver reads that as "ran out of time"). On SIGTERM (SLURM
    itself requeues, preempts or cancels the job) it only logs, and the trial raises
    `TrialInterrupted`: exit, SLURM does the rest. After a requeue the same batch runs again;
    trials resume from their checkpoints, and those that already wrote their result return it
    untouched."""

    def __init__(self, jobs: Sequence[Job]):
        self.jobs = list(jobs)

    def __call__(self) -> list[str]:
        # JOB_STEP_CODE held SIGUSR2 back until submitit's handler was in place: a signal that
        # came meanwhile is delivered now, and that handler requeues the job.
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGUSR2})
        from optbench.trial import timing

        timing.process_started()  # the job step's start, recorded with its first trial
        freeze_at_exit()
        t0 = time.perf_counter()
        for name in timing.JOB_IMPORTS:  # the trainer's, as --measure times them
            importlib.import_module(name)
        import torch

        from optbench.host import training_device
        from optbench.train.distributed import env_int
        from optbench.train.run_trial import run_job
        from optbench.train.signals import TrialInterrupted

        timing.imports_took(time.perf_counter() - t0)
        # the study's own modules: one this job's environment cannot import fails the job,
        # its line in each trial's error.log (docs/extending.md: what a cluster's workers need)
        import_study_code(self.jobs)
        # task/none and some clusters do not bind CPUs: keep torch within the task's share.
        torch.set_num_threads(env_int("SLURM_CPUS_PER_TASK", 1, minimum=1))
        device = training_device()
        statuses = []
        for job in self.jobs:
            try:  # a solo trial may span the job's tasks (DDP); a population is one process
                results = run_job(job, device, distributed=True)
            except TrialInterrupted as stop:  # checkpoint written; SLURM ends or requeues us
                raise SystemExit(128 + stop.signum) from None
            statuses += [r.status for r in results]
        return statuses

    def checkpoint(self, *args, **kwargs) -> submitit.helpers.DelayedSubmission:
        """submitit's hook before it requeues the job: run the same trials again."""
        return submitit.helpers.DelayedSubmission(TrialBatch(self.jobs))
