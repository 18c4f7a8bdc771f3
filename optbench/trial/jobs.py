"""A job: what the driver hands a worker, as plain picklable data (the local pool pipes it to
a worker process, SLURM pickles it into the job's folder). A `TrialJob` is everything a worker
needs to run one trial; a `PopulationJob`, several trials of one cell trained together in one
process (optbench/train/population.py), each reported under its own key. The worker's only
answer is each trial's result file (results.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from optbench.trial.config import Execution, TrainConfig


@dataclass(frozen=True)
class TrialJob:
    key: str  # the trial's stable id (plan.Trial.key)
    config: TrainConfig
    out_dir: Path
    execution: Execution = Execution()  # how to run it (the study's execution settings)
    study_dir: Path | None = None  # the study folder the plan put it in (None: none)
    attempt: int | None = None  # the store's attempt it runs (None: a trial of no study)

    @property
    def keys(self) -> tuple[str, ...]:
        return (self.key,)

    @property
    def root(self) -> Path:
        """The folder below which the worker follows no link (safefs): the study folder the
        plan gave, else (a trial of no study) `out_dir` itself."""
        return self.study_dir or self.out_dir


@dataclass(frozen=True)
class PopulationJob:
    """Trials that differ only in (lr, wd) (plan.populations), trained as one population:
    one job, one process; its events name each member's key. `key` is the first member's."""

    members: tuple[TrialJob, ...]

    @property
    def key(self) -> str:
        return self.members[0].key

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(m.key for m in self.members)

    @property
    def root(self) -> Path | None:
        """The members' common root (TrialJob.root: the study folder); None where they have
        none (folders outside a study's layout): each member's own folder is its root then."""
        roots = {m.root for m in self.members}
        return roots.pop() if len(roots) == 1 else None


Job = TrialJob | PopulationJob


def members_of(job: Job) -> tuple[TrialJob, ...]:
    """The trials of a job: a population's members, or the one trial."""
    return job.members if isinstance(job, PopulationJob) else (job,)
