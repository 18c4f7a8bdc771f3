"""The trial plan: every trial a study asks for, each with its training config, its folder and its
key. A pure function of the spec: the same YAML gives the same plan on any machine, and planning
reads and writes nothing (the store attaches what the database knows, see store.StoredTrial).

A study's grid is its cells (model x optimizer x epochs); each cell trains the (lr, wd) pairs
drawn for it (sampling.py) once per seed (with search.seed_per_sample each sample's own seeds,
sampling.sample_seed). With executor.population K > 1 the trials of a cell
and seed (which differ only in (lr, wd)) are grouped K by K in plan order (`populations`), each
group one job (`jobs`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from optbench.plan.sampling import sample_seed, study_pairs
from optbench.spec.schema import Cell, StudySpec
from optbench.trial.config import Execution, TrainConfig, make_train_config
from optbench.trial.jobs import Job, PopulationJob, TrialJob


@dataclass(frozen=True)
class Trial:
    """One (sample, seed) of one cell.

    `key`, "<cell id>/s<sample>-seed<seed>", names the trial everywhere: in the database, in
    SLURM's job records, and as its folder `out_dir` = <study folder>/trials/<key>.
    """

    cell: Cell
    cell_id: str
    sample: int
    seed: int
    lr: float
    wd: float
    key: str
    config: TrainConfig
    out_dir: Path
    execution: Execution = Execution()  # how the study runs it (not part of config or key)
    study_dir: Path | None = None  # the study folder: no link below it is followed (safefs)

    @property
    def job(self) -> TrialJob:
        """What an executor runs for this trial."""
        return TrialJob(self.key, self.config, self.out_dir, self.execution, self.study_dir)


def plan(spec: StudySpec) -> list[Trial]:
    """Every trial of `spec`, cell by cell in the spec's order, then by sample and seed."""
    trials = []
    tracking = spec.tracking.resolved(spec.study_dir)
    execution = Execution(
        pipeline=spec.dataset.pipeline, profile=spec.executor.profile, tracking=tracking
    )
    for cell in spec.cells():
        cell_id = spec.cell_id(cell)
        for sample, (lr, wd) in enumerate(study_pairs(spec.search, cell.model, cell.optimizer)):
            for study_seed in spec.seeds:
                seed = sample_seed(study_seed, sample) if spec.seed_per_sample else study_seed
                key = f"{cell_id}/s{sample:03d}-seed{seed}"
                config = _train_config(spec, cell, lr, wd, seed)
                out_dir = spec.study_dir / "trials" / key
                trials.append(
                    Trial(
                        cell,
                        cell_id,
                        sample,
                        seed,
                        lr,
                        wd,
                        key,
                        config,
                        out_dir,
                        execution,
                        spec.study_dir,
                    )
                )
    return trials


def _train_config(spec: StudySpec, cell: Cell, lr: float, wd: float, seed: int) -> TrainConfig:
    return make_train_config(
        f"study {spec.name}, epochs {cell.epochs}",  # e.g. a warmup as long as this schedule
        model=cell.model,
        dataset=spec.dataset.data,
        optimizer=cell.optimizer,
        lr=lr,
        wd=wd,
        epochs=cell.epochs,
        batch_size=spec.batch_size,
        ref_batch=spec.ref_batch,
        seed=seed,
        recipe=spec.recipe.for_optimizer(cell.optimizer),  # its own optimizer_args only
        imports=tuple(spec.imports),
    )


def populations(
    trials: list[Trial], size: int, round_of: Callable[[Trial], int] | None = None
) -> list[list[Trial]]:
    """`trials` grouped in plan order, up to `size` per group: trials whose configs are equal
    but for (lr, wd) (one cell, one seed), never others; in a sequential study also of one round
    (`round_of`, rounds.Rounds.round_of), so a round never retrains the last one's trials. The
    groups are a function of the plan (and the design) alone, not of which trials are done, so
    an interrupted population is the same group when the study runs again."""
    classes: dict[tuple, list[Trial]] = {}
    for trial in trials:
        group = (trial.config.population_key(), round_of(trial) if round_of else 0)
        classes.setdefault(group, []).append(trial)
    return [
        members[i : i + size] for members in classes.values() for i in range(0, len(members), size)
    ]


def jobs(
    trials: list[Trial],
    pending: Mapping[str, int],
    population: int,
    round_of: Callable[[Trial], int] | None = None,
) -> list[Job]:
    """The jobs that run the `pending` trials (key -> the store's attempt each one runs, which
    its result records): one per trial, or with `population` > 1 one per group of
    `populations` holding a pending trial (the group's other members are done: the population
    trains them frozen and leaves their results untouched)."""

    def job(t: Trial) -> TrialJob:
        return replace(t.job, attempt=pending[t.key]) if t.key in pending else t.job

    if population == 1:
        return [job(t) for t in trials if t.key in pending]
    out: list[Job] = []
    for group in populations(trials, population, round_of):
        if any(t.key in pending for t in group):
            out.append(job(group[0]) if len(group) == 1 else PopulationJob(tuple(map(job, group))))
    return out
