"""The study schema: what a study YAML may say, validated before anything is written.

A study is explicit data: its grid (models x optimizers x epochs), its (lr, wd) search, its
seeds, where its results and database go and where its trials run (SLURM settings). What each
trial trains with (the recipe, the dataset) is recipe.py's; its `decide:` block is decide.py's; the caps on numbers are caps.py's;
the strict YAML reader is yamlio.py's. Every key is documented in docs/study.md and every
default lives in those modules, once. `load_spec` turns a YAML file into a `StudySpec` or
raises `SpecError` with a message that names the file and the offending field. The schema is
pure data: whether the named models and dataset exist on this install and machine is checked
by `optbench.run.preflight.check_spec`, where a command needs them.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Annotated, Literal

from pydantic import (
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    ValidationError,
    field_validator,
    model_validator,
)

from optbench.errors import SpecError, format_errors
from optbench.spec.caps import (
    CAP_REASONS,
    MAX_BATCH,
    MAX_EPOCHS,
    MAX_NAME,
    MAX_POPULATION,
    MAX_STALL_TIMEOUT_S,
    MAX_TRIALS,
    SEED_BOUND,
    check_cap,
)
from optbench.spec.catalogue import is_image_dataset
from optbench.spec.comparisons import MAX_COMPARISONS, Comparison, check_comparisons
from optbench.spec.decide import Decide, check_decidable, read_kinds
from optbench.spec.identity import DATASET_IDENTITY, RECIPE_IDENTITY, cell_fields
from optbench.spec.optimizers import population_refusal, validated_with_imports
from optbench.spec.recipe import (
    Optimizer,
    Recipe,
    StrictModel,
    StudyDataset,
    fill_ref_batch,
    plain_path,
)
from optbench.spec.tracking import Tracking, check_installed
from optbench.spec.yamlio import dump_yaml, read_study_yaml
from optbench.user_code import MAX_MODULES, check_module_names


def _check_range(value: tuple[float, float], what: str) -> tuple[float, float]:
    low, high = value
    if not (low > 0 and high > 0):
        raise ValueError(f"{what} bounds must be > 0 (log-uniform), got [{low}, {high}]")
    if low >= high:
        raise ValueError(f"{what} low {low} must be < high {high}")
    return value


class Range(StrictModel):
    """Explicit log-uniform bounds for lr (normalized to ref_batch) and weight decay."""

    lr: tuple[StrictFloat, StrictFloat]
    wd: tuple[StrictFloat, StrictFloat]

    @field_validator("lr", "wd")
    @classmethod
    def _positive_increasing(cls, v: tuple[float, float], info) -> tuple[float, float]:
        return _check_range(v, info.field_name)


class GoodValue(StrictModel):
    """A model's good (lr, wd) for one optimizer, as in the paper's Table 4."""

    lr: StrictFloat = Field(gt=0)
    wd: StrictFloat = Field(gt=0)


class Search(StrictModel):
    """How (lr, wd) pairs are drawn: n_samples log-uniform draws per (model, optimizer)."""

    n_samples: StrictInt = Field(ge=1)
    sampler: Literal["random", "qmc", "good"] = "random"
    seed: StrictInt = Field(default=0, ge=0, lt=SEED_BOUND)
    ranges: dict[Optimizer, Range] = Field(default_factory=dict)
    good_values: dict[str, dict[Optimizer, GoodValue]] = Field(default_factory=dict)
    good_range: tuple[StrictFloat, StrictFloat] = (0.125, 4.0)
    # each (lr, wd) sample trains with its own training seeds (plan.sampling.sample_seed), so a
    # claim's bootstrap over samples also resamples the seed's effect (docs/sequential.md);
    # None: true where `decide`'s claims add samples (claim a, a declared comparison of kind a
    # or best-error), else false (StudySpec.seed_per_sample)
    seed_per_sample: StrictBool | None = None

    @field_validator("n_samples")
    @classmethod
    def _n_samples(cls, v: int) -> int:
        return check_cap(v, MAX_TRIALS, "trials")

    @model_validator(mode="after")
    def _qmc_power_of_two(self) -> Search:
        n = self.n_samples
        if self.sampler == "qmc" and n & (n - 1):
            raise ValueError(f"n_samples {n}: Sobol (qmc) sampling needs a power of 2")
        return self

    @field_validator("good_range")
    @classmethod
    def _good_range(cls, v: tuple[float, float]) -> tuple[float, float]:
        return _check_range(v, "good_range")

    def bounds(self, model: str, optimizer: str) -> Range:
        """The log-uniform box for one (model, optimizer): good values win over ranges."""
        good = self.good_values.get(model, {}).get(optimizer)
        if good is not None:
            lo, hi = self.good_range
            return Range(lr=(good.lr * lo, good.lr * hi), wd=(good.wd * lo, good.wd * hi))
        return self.ranges[optimizer]


class SlurmSettings(StrictModel):
    """How trials are submitted to SLURM (executor.kind "slurm"). One trial's resources are one
    job's (or one job-array element's): `nodes` x `tasks_per_node` processes train it with DDP."""

    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    time_min: StrictInt = Field(default=60, ge=1, description="job time limit in minutes")
    nodes: StrictInt = Field(default=1, ge=1)
    gpus_per_node: StrictInt = Field(default=0, ge=0)
    tasks_per_node: StrictInt | None = Field(
        default=None, ge=1, description="DDP processes per node; default one per GPU (at least 1)"
    )
    cpus_per_task: StrictInt = Field(default=1, ge=1)
    mem_gb: StrictFloat | None = Field(default=None, gt=0, description="memory per node")
    constraint: str | None = None
    array_parallelism: StrictInt = Field(default=64, ge=1)
    setup: list[str] = Field(default_factory=list, description="shell lines run before the trial")
    sbatch: dict[str, str | StrictInt | StrictBool] = Field(
        default_factory=dict, description="extra sbatch flags, e.g. {mail-type: END}"
    )
    # auto: as many as the cost plan says pay their job's start (plan/costs.py: trials_per_job)
    trials_per_job: Annotated[StrictInt, Field(ge=1)] | Literal["auto"] = "auto"
    signal_delay_s: StrictInt = Field(default=120, ge=10)
    max_requeues: StrictInt = Field(default=3, ge=0)
    poll_s: StrictFloat = Field(default=10.0, ge=2.0)
    folder: Path | None = Field(
        default=None, description="job files and logs; default <study folder>/slurm (shared FS)"
    )

    @field_validator("signal_delay_s")
    @classmethod
    def _time_to_train(cls, delay: int, info) -> int:
        # SLURM sends the signal up to 60 s earlier than asked (sbatch(1), --signal); a job also
        # needs a minute to start and make progress, or it is requeued over and over for nothing.
        limit_s = info.data.get("time_min", 60) * 60
        if limit_s - delay - 60 < 60:
            fix = f"raise time_min to at least {-(-(delay + 120) // 60)}"
            if limit_s - 120 >= 10:
                fix = f"lower signal_delay_s to at most {limit_s - 120} or {fix}"
            raise ValueError(
                f"{delay} s before the end of time_min ({limit_s // 60} min) leaves no time to "
                f"train (SLURM may signal 60 s early, and a job needs a minute to start): {fix}"
            )
        return delay

    @property
    def tasks(self) -> int:
        return self.tasks_per_node or max(1, self.gpus_per_node)


class ExecutorSettings(StrictModel):
    """Where trials run. `local` runs a pool of worker processes on this machine, `debug` runs
    them one by one in the driver, `slurm` submits them as SLURM job arrays (see `slurm`)."""

    kind: Literal["local", "debug", "slurm"] = "local"
    workers: StrictInt | Literal["auto"] = "auto"
    retries: StrictInt = Field(default=2, ge=0)
    # trials of one cell and seed trained together in one process (train/population.py); an
    # execution setting: not part of the cell id (docs/population.md)
    population: StrictInt = Field(default=1, ge=1, le=MAX_POPULATION)
    # a running trial without a new metrics line for this long is ended by the driver and
    # recorded as failed ("stalled", docs/faults.md); null: never (a stall is only shown)
    stall_timeout_s: StrictFloat | None = Field(default=None, gt=0)
    slurm: SlurmSettings = SlurmSettings()
    # the cluster profile laid under the study (profiles.py), recorded by the loader
    profile: str | None = Field(default=None, description="the --profile file applied")

    @model_validator(mode="after")
    def _population_batches(self) -> ExecutorSettings:
        if self.population > 1 and self.kind == "slurm" and self.slurm.nodes * self.slurm.tasks > 1:
            raise ValueError(
                f"population {self.population} trains in one process: it cannot use DDP "
                f"(slurm nodes x tasks_per_node is {self.slurm.nodes * self.slurm.tasks}); "
                "set population 1 or one task"
            )
        return self

    @field_validator("stall_timeout_s")
    @classmethod
    def _stall_timeout(cls, v: float | None) -> float | None:
        return v if v is None else check_cap(v, MAX_STALL_TIMEOUT_S, "stall_timeout_s", " s")

    @field_validator("workers")
    @classmethod
    def _workers(cls, v: int | str) -> int | str:
        if isinstance(v, int) and v < 1:
            raise ValueError("workers must be >= 1 or 'auto'")
        return v


class StudySpec(StrictModel):
    """One study: a grid of cells (model x optimizer x epochs), n (lr, wd) samples in each."""

    name: str
    # modules of the user's own that register models or optimizers, imported wherever the study
    # is read or trained (optbench/user_code.py; docs/study.md): part of the cell id when given
    imports: list[str] = Field(default_factory=list, max_length=MAX_MODULES)
    dataset: StudyDataset
    models: list[str] = Field(min_length=1)
    optimizers: list[Optimizer] = Field(min_length=1)
    epochs: list[StrictInt] = Field(min_length=1)
    batch_size: StrictInt = Field(ge=1)
    ref_batch: StrictInt = Field(ge=1)  # default: the recipe preset's (PRESET_REF_BATCH)
    search: Search
    seeds: list[StrictInt] = Field(default=[0], min_length=1)
    recipe: Recipe = Recipe()
    output: Path = Path("results")
    storage: str | None = None
    executor: ExecutorSettings = ExecutorSettings()
    # an execution setting, as executor: not part of the cell id (optbench/trackers/backends.py)
    tracking: Tracking = Tracking()
    # when to stop adding samples or seeds: not part of the cell id (a stopped study's trials
    # are those of the same study without it), but deciding claims that add (lr, wd) samples
    # turns the default of search.seed_per_sample on (seed_per_sample below)
    decide: Decide | None = None
    # comparisons of two cells the study declares, named in decide.claims (spec/comparisons.py)
    comparisons: list[Comparison] = Field(default_factory=list, max_length=MAX_COMPARISONS)

    @model_validator(mode="before")
    @classmethod
    def _ref_batch_from_preset(cls, data):
        return fill_ref_batch(data)

    @model_validator(mode="wrap")
    @classmethod
    def _own_optimizers_with_imports(cls, data, validate):
        # an optimizer name timm's table lacks is one a module of `imports:` registers, where
        # the study names any (spec/optimizers.py; run/preflight.py checks it once imported)
        return validated_with_imports(data, validate)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        check_cap(len(v), MAX_NAME, "name", " characters")
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", v):
            raise ValueError(
                "name may use letters, digits, '_', '.', '-' and must not start with one of the last three"
            )
        return v

    @field_validator("imports")
    @classmethod
    def _imports(cls, v: list[str]) -> list[str]:
        return check_module_names(v)

    @field_validator("batch_size")
    @classmethod
    def _batch_size(cls, v: int) -> int:
        return check_cap(v, MAX_BATCH, "batch_size")

    @field_validator("seeds")
    @classmethod
    def _seeds(cls, v: list[int]) -> list[int]:
        bad = [s for s in v if not 0 <= s < SEED_BOUND]
        if bad:
            raise ValueError(f"seeds must be 0 .. 2**63 - 1 (torch takes 64 bits), got {bad[:3]}")
        return v

    @field_validator("output")
    @classmethod
    def _output(cls, v: Path) -> Path:
        return plain_path(v)

    @field_validator("storage")
    @classmethod
    def _storage(cls, v: str | None) -> str | None:
        if v is None:
            return None
        from optbench.spec.storage_form import check_storage_url  # SQLAlchemy: only for a URL given

        return check_storage_url(v)

    @field_validator("tracking")
    @classmethod
    def _tracker_installed(cls, v: Tracking) -> Tracking:
        check_installed(v.kind)
        return v

    @field_validator("epochs", mode="before")
    @classmethod
    def _epochs_list(cls, v):
        if isinstance(v, int) and not isinstance(v, bool):
            return [v]
        if not isinstance(v, list):  # else pydantic says only "should be a valid list"
            raise ValueError(
                f"should be an int or a list of ints, e.g. 50 or [50, 100] (got {v!r})"
            )
        return v

    @field_validator("epochs")
    @classmethod
    def _epochs_positive(cls, v: list[int]) -> list[int]:
        if any(e < 1 for e in v):
            raise ValueError("every epochs value must be >= 1")
        for e in v:
            check_cap(e, MAX_EPOCHS, "epochs")
        return v

    @field_validator("models", "optimizers", "epochs", "seeds")
    @classmethod
    def _unique(cls, v: list) -> list:
        if len(set(v)) != len(v):
            raise ValueError(f"duplicate entries in {v}")
        return v

    @model_validator(mode="after")
    def _population_batches(self) -> StudySpec:
        if self.executor.population > 1 and self.recipe.compile:
            raise ValueError(
                f"executor.population {self.executor.population}: a population does not run "
                "torch.compile (recipe.compile); set recipe.compile false or population 1"
            )
        if self.executor.population > 1 and self.search.seed_per_sample:  # as written
            raise ValueError(
                f"executor.population {self.executor.population}: a population's members share "
                "one training seed, and search.seed_per_sample gives every sample its own; set "
                "one of them off (population 1 or seed_per_sample false)"
            )
        return self

    @model_validator(mode="after")
    def _population_optimizers(self) -> StudySpec:
        for name in self.optimizers if self.executor.population > 1 else ():
            refusal = population_refusal(name, self.recipe.optimizer_args.get(name, {}))
            if refusal:
                raise ValueError(
                    f"executor.population {self.executor.population}: {refusal}; set population 1"
                )
        return self

    @model_validator(mode="after")
    def _not_too_many_trials(self) -> StudySpec:
        n_samples = 1 if self.search.sampler == "good" else self.search.n_samples
        grid = len(self.models) * len(self.optimizers) * len(self.epochs)
        total = grid * n_samples * len(self.seeds)
        if total > MAX_TRIALS:
            raise ValueError(
                f"models x optimizers x epochs x n_samples x seeds = {total} trials is above "
                f"the cap of {MAX_TRIALS} ({CAP_REASONS['trials']})"
            )
        return self

    @model_validator(mode="after")
    def _decidable(self) -> StudySpec:
        cells = [(c.model, c.optimizer, c.epochs) for c in self.cells()]
        search = self.search
        check_comparisons(
            self.comparisons, cells, len(self.seeds), search.n_samples, search.sampler
        )
        if self.decide is not None:
            read_kinds(self.decide, self.comparisons)
            sizes = (len(self.seeds), search.n_samples, search.sampler, self.seed_per_sample)
            check_decidable(self.decide, cells, *sizes)
        return self

    @model_validator(mode="after")
    def _search_covers_grid(self) -> StudySpec:
        # good_values of models the study does not train are unused (a study file may keep the
        # good values of its whole family while `--set models=[...]` picks some of them);
        # checks.check_spec still refuses a name that is no model at all.
        missing = [
            o
            for o in self.optimizers
            if o not in self.search.ranges
            and any(o not in self.search.good_values.get(m, {}) for m in self.models)
        ]
        if missing:  # one (lr, wd) box per optimizer: no optimizer's box fits another's
            o = missing[0]
            raise ValueError(
                f"search: no range for optimizer {o!r}, its own (lr, wd) box; give search.ranges.{o} "
                f"({{lr: [low, high], wd: [low, high]}}) or search.good_values.<model>.{o} for "
                "every model"
            )
        if self.search.sampler == "good":
            no_good = [
                f"{m}/{o}"
                for m in self.models
                for o in self.optimizers
                if o not in self.search.good_values.get(m, {})
            ]
            if no_good or self.search.n_samples != 1:
                raise ValueError(
                    "search.sampler 'good' trains each model at its good value: it needs "
                    f"n_samples 1 and search.good_values for every model/optimizer (missing: {no_good})"
                )
        return self

    # --- derived, never stored ------------------------------------------------------------

    @property
    def seed_per_sample(self) -> bool:
        """Whether each (lr, wd) sample trains with seeds of its own: search.seed_per_sample as
        written, else (null, the default) where `decide`'s claims add (lr, wd) samples: claim
        (a) or declared comparisons of kind a or best-error, whose intervals then cover the
        training seed's effect too (docs/sequential.md), and a population (whose members share
        one seed) does not forbid it. Claims that add seeds ((b)-(d), declared d and
        length-stability) replicate over seeds already and need the same seeds in every
        sample. False, it keeps the cell ids of earlier optbench's default: a study that
        recorded trials under them keeps them (store/migrations.py)."""
        if self.search.seed_per_sample is not None:
            return self.search.seed_per_sample
        resamples_samples = self.decide is not None and self.decide.unit == "samples"
        return resamples_samples and self.executor.population == 1

    @property
    def study_dir(self) -> Path:
        return self.output / self.name

    @property
    def storage_url(self) -> str:
        return self.storage or f"sqlite:///{(self.study_dir / 'study.db').resolve()}"

    def cells(self) -> list[Cell]:
        return [
            Cell(model=m, optimizer=o, epochs=e)
            for m in self.models
            for o in self.optimizers
            for e in self.epochs
        ]

    def cell_config(self, cell: Cell) -> dict:
        """Everything that gives one cell's results their meaning. Its hash names the cell, so
        editing any of it makes new cells instead of mixing with old results."""
        bounds = self.search.bounds(cell.model, cell.optimizer)
        folder = is_image_dataset(self.dataset.name)
        recipe = self.recipe.for_optimizer(cell.optimizer)  # its own optimizer_args only
        config = {
            "model": cell.model,
            "optimizer": cell.optimizer,
            "epochs": cell.epochs,
            "dataset": cell_fields(DATASET_IDENTITY, dict(self.dataset), folder),
            "batch_size": self.batch_size,
            "ref_batch": self.ref_batch,
            "recipe": cell_fields(RECIPE_IDENTITY, recipe.model_dump(mode="json"), folder),
            "sampler": self.search.sampler,
            "search_seed": self.search.seed,
            "lr_bounds": list(bounds.lr),
            "wd_bounds": list(bounds.wd),
        } | ({"seed_per_sample": True} if self.seed_per_sample else {})
        # which code builds a name is part of what it means; a study without imports keeps the
        # ids it had before the key existed
        return config | ({"imports": list(self.imports)} if self.imports else {})

    def cell_id(self, cell: Cell) -> str:
        blob = json.dumps(self.cell_config(cell), sort_keys=True).encode()
        digest = hashlib.sha256(blob).hexdigest()[:8]
        return f"{cell.model}-{cell.optimizer}-e{cell.epochs}-{digest}"


class Cell(StrictModel):
    """One (model, optimizer, epochs) point of a study's grid (its names checked by the study)."""

    model: str
    optimizer: str
    epochs: StrictInt


def parse_spec(data: dict, source: Path | str = "<spec>") -> StudySpec:
    """Validate a mapping (as read from YAML) into a StudySpec, or raise SpecError naming
    `source` and the field. Whether its models, dataset and data exist is `checks.check_spec`'s."""
    if not isinstance(data, dict):
        raise SpecError(f"{source}: a study must be a YAML mapping, got {type(data).__name__}")
    try:
        return StudySpec.model_validate(data)
    except ValidationError as err:
        raise SpecError(format_errors(source, err, schema=StudySpec)) from None


def load_spec(path: Path | str) -> StudySpec:
    """Read and validate a study YAML. Reads only; writes nothing."""
    return parse_spec(read_study_yaml(path), path)


def dump_spec(spec: StudySpec) -> str:
    """The spec as YAML, with every default spelled out (saved beside the results)."""
    return dump_yaml(spec.model_dump(mode="json"), sort_keys=False)
