"""Executors: where a study's trials run. `make_executor(spec)` builds the one the study's
`executor.kind` names; `jobs_executor(spec)` is the one that answers `optbench status` and
`cancel`; `threads_per_trial(spec)` asks the study's executor what one CPU trial gets, and
`at_once(spec, trials, on_gpus)` how many processes it runs at once (the cost plan's).

- `protocol.py`: what an executor is, the `Executor` protocol, the only thing the driver and
  the CLI know of it.
- `local.py`: "local" (a process pool on this machine) and "debug" (inline, in the driver).
- `slurm/`: "slurm" (job arrays through submitit).
"""

from __future__ import annotations

from collections.abc import Callable

from optbench.errors import UsageError
from optbench.executors.local import InlineExecutor, LocalExecutor, pool_size, split_cores
from optbench.executors.protocol import Executor
from optbench.host import cuda_device_count, usable_cores
from optbench.spec.schema import StudySpec


def make_executor(
    spec: StudySpec, *, workers: int | str | None = None, notify: Callable[[str], None] = print
) -> Executor:
    """The executor of `spec.executor.kind`; `workers` overrides executor.workers (local);
    `notify` prints a line for the user while jobs are followed (SLURM not answering). Builds
    no worker or job yet. Raises UsageError, before anything is written, where the kind is
    slurm and SLURM cannot be reached, or local with more workers than cores (or GPUs)."""
    kind = spec.executor.kind
    if kind == "debug":
        return InlineExecutor()
    if kind == "local":
        chosen = spec.executor.workers if workers is None else workers
        pool_size(chosen, usable_cores(), cuda_device_count())  # UsageError if too many
        return LocalExecutor(chosen, spec.study_dir)
    from optbench.executors.slurm.client import max_array_size

    max_array_size()  # fails with a usage error, without SLURM
    return _slurm_executor(spec, notify)


def threads_per_trial(spec: StudySpec) -> int:
    """The torch threads one of the study's CPU trials gets, as the executor of its
    `executor.kind` answers (Executor.threads_per_trial); reaches no cluster, starts nothing."""
    kind = spec.executor.kind
    if kind == "slurm":
        from optbench.executors.slurm.executor import SlurmExecutor

        return SlurmExecutor.threads_per_trial(spec.executor)
    executor = InlineExecutor if kind == "debug" else LocalExecutor
    return executor.threads_per_trial(spec.executor)


def at_once(spec: StudySpec, trials: int, on_gpus: bool) -> int:
    """How many processes the study's executor runs at once: on SLURM the jobs it runs at once
    (SlurmExecutor.slots: array_parallelism, or fewer where the partition holds fewer, by
    `sinfo`); a local run of `trials` trials, its workers (local.split_cores: executor.workers,
    or one per GPU where its trials train on GPUs (`on_gpus`), else one per usable core; no
    more than the trials; a setting a real run refuses, more workers than cores, counts as
    written); the debug executor, one (the driver)."""
    kind = spec.executor.kind
    if kind == "slurm":
        from optbench.executors.slurm.executor import SlurmExecutor

        return SlurmExecutor.slots(spec.executor.slurm)
    if kind != "local":
        return 1
    gpus = 0
    if on_gpus:
        gpus = cuda_device_count()
    try:
        return split_cores(trials, spec.executor.workers, usable_cores(), gpus)[0]
    except UsageError:
        return max(1, min(int(spec.executor.workers), trials))


def jobs_executor(spec: StudySpec) -> Executor:
    """The executor that tells of (`status`) and stops (`cancel`) a study's jobs while no driver
    follows them: SLURM's where the study has ever submitted there (whatever executor.kind says
    now), else one whose jobs died with their driver. Reaches no cluster, starts no worker."""
    from optbench.executors.slurm.journal import JOBS_FILE
    from optbench.executors.slurm.study import job_folder

    if (job_folder(spec) / JOBS_FILE).is_file():
        return _slurm_executor(spec, print)
    return InlineExecutor()


def _slurm_executor(spec: StudySpec, notify: Callable[[str], None]) -> Executor:
    from optbench.executors.slurm.executor import SlurmExecutor
    from optbench.executors.slurm.study import job_folder
    from optbench.plan.costs import trials_per_job

    settings = spec.executor.slurm.model_copy(update={"trials_per_job": trials_per_job(spec)})
    auto = spec.executor.slurm.trials_per_job == "auto"
    return SlurmExecutor(settings, job_folder(spec), spec.name, notify, fill_slots=auto)
