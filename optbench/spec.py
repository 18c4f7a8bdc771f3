"""The study schema: what a study YAML may say, validated before anything is written.

A study is explicit data. Every key is documented in docs/study.md and
every default lives here, in one place. `load_spec` turns a YAML file into a `StudySpec` or
raises `SpecError` with a message that names the file and the offending field. The YAML is
read strictly (a key given twice is an error), and numbers that would exhaust the machine are
capped (MAX_*; docs/faults.md says why). The schema is pure data: whether the named models
and dataset exist on this install and machine is checked by `optbench.checks.check_spec`,
where a command needs them.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from optbench.errors import SpecError, format_errors

Optimizer = Literal["adamw", "sgd"]
OPTIMIZERS: tuple[str, ...] = ("adamw", "sgd")

# Caps on numbers that would exhaust the machine (memory, disk, hours of planning) before a
# single trial trains; docs/faults.md gives each one's reason, and so does the error.
MAX_TRIALS = 10_000  # 50x the paper's largest study (192 trials per optimizer)
MAX_IMG_SIZE = 1024  # CIFAR held in memory at 1024 px: 60,000 x 3 MB = 190 GB
MAX_BATCH = 65_536  # the largest batches of the large-batch literature; 32x the paper's 2048
MAX_NAME = 100
MAX_TRANSLATE = 64  # zero padding: each batch is copied at (img_size + 2 x translate) squared
MAX_AUGMENT_OPS = 16  # RandAugment operations per image (torchvision's and timm's default: 2)
SEED_BOUND = 2**63  # torch.manual_seed takes 64 bits; seeds are 0 .. 2**63 - 1
MAX_STUDY_BYTES = 1 << 20  # a study file is a few KB


CAP_REASONS = {
    "trials": "each is planned and given a database row before anything runs (split the study)",
    "img_size": "small datasets are held whole in memory at this size; memory grows with its square",
    "batch_size": "one optimizer step holds the whole batch and its activations",
    "name": "it names the study's folder, and file systems cap a name at 255 bytes",
    "translate": "each batch is padded by it on every side: memory grows with its square",
    "augment_ops": "each operation runs on every image of every step (the usual is 2)",
}


def _cap(value: int, cap: int, what: str, unit: str = "") -> int:
    if value > cap:
        raise ValueError(f"{value}{unit} is above the cap of {cap} ({CAP_REASONS[what]})")
    return value


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


def _check_range(value: tuple[float, float], what: str) -> tuple[float, float]:
    low, high = value
    if not (low > 0 and high > 0):
        raise ValueError(f"{what} bounds must be > 0 (log-uniform), got [{low}, {high}]")
    if low >= high:
        raise ValueError(f"{what} low {low} must be < high {high}")
    return value


class Range(_Strict):
    """Explicit log-uniform bounds for lr (normalized to ref_batch) and weight decay."""

    lr: tuple[float, float]
    wd: tuple[float, float]

    @field_validator("lr", "wd")
    @classmethod
    def _positive_increasing(cls, v: tuple[float, float], info) -> tuple[float, float]:
        return _check_range(v, info.field_name)


class GoodValue(_Strict):
    """A model's good (lr, wd) for one optimizer, as in the paper's Table 4."""

    lr: float = Field(gt=0)
    wd: float = Field(gt=0)


class Search(_Strict):
    """How (lr, wd) pairs are drawn: n_samples log-uniform draws per (model, optimizer)."""

    n_samples: int = Field(ge=1)
    sampler: Literal["random", "qmc", "good"] = "random"
    seed: int = Field(default=0, ge=0, lt=SEED_BOUND)
    ranges: dict[Optimizer, Range] = Field(default_factory=dict)
    good_values: dict[str, dict[Optimizer, GoodValue]] = Field(default_factory=dict)
    good_range: tuple[float, float] = (0.125, 4.0)

    @field_validator("n_samples")
    @classmethod
    def _n_samples(cls, v: int) -> int:
        return _cap(v, MAX_TRIALS, "trials")

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


class Dataset(_Strict):
    """Which data to train on. `root` is required for on-disk datasets, unused for digits."""

    name: str
    root: Path | None = None
    img_size: int | None = Field(default=None, ge=4)

    @field_validator("img_size")
    @classmethod
    def _img_size(cls, v: int | None) -> int | None:
        return None if v is None else _cap(v, MAX_IMG_SIZE, "img_size")

    @field_validator("root")
    @classmethod
    def _root(cls, v: Path | None) -> Path | None:
        return _plain_path(v)


def _plain_path(v: Path | None) -> Path | None:
    if v is not None and "\0" in str(v):
        raise ValueError("a path cannot contain a NUL character")
    return v


def _check_storage_url(url: str) -> str:
    """A storage URL that optuna can open, checked for its form only (no file is touched):
    journal:///path, or an SQLAlchemy URL of a known database kind (not SQLite in memory)."""
    example = "e.g. sqlite:///path/study.db, postgresql://user@host/db or journal:///path/file.log"
    if "\0" in url:
        raise ValueError("a storage URL cannot contain a NUL character")
    if url.startswith("journal://"):
        path = url.removeprefix("journal://")
        if not path or path.endswith("/"):
            raise ValueError(f"journal:// needs a file path ({example})")
        return url
    import sqlalchemy  # here: reading a study without a storage URL needs no sqlalchemy

    try:
        parsed = sqlalchemy.engine.make_url(url)
        parsed.get_dialect()  # the kind of database is one SQLAlchemy knows (loads no driver)
    except sqlalchemy.exc.NoSuchModuleError:
        raise ValueError(f"unknown kind of database {url.split(':')[0]!r} ({example})") from None
    except (sqlalchemy.exc.ArgumentError, ValueError):
        raise ValueError(f"not a storage URL ({example})") from None
    if parsed.get_backend_name() == "sqlite" and parsed.database in (None, "", ":memory:"):
        raise ValueError(f"an in-memory SQLite database keeps nothing; name a file ({example})")
    return url


# Named recipes. A study picks one with `recipe.preset` and may override any key; every key's
# meaning, and the source of every preset value, is in docs/recipes.md. "basic" is the fast
# quickstart recipe (the field defaults below).
RecipePreset = Literal["basic", "paper", "deit"]
RECIPE_PRESETS: dict[str, dict] = {
    "basic": {},
    # Xiao et al. 2021 as its code ran it: pycls, branch `vitconfigs`, configs/vitconv_baselines/vit
    "paper": {
        "schedule": "pycls",
        "schedule_step": "epoch",
        "warmup_epochs": 5.0,
        "warmup_ref_epochs": None,
        "warmup_factor": 0.1,
        "min_lr": 0.005,
        "nesterov": True,
        "label_smoothing": 0.1,
        "ema": True,
        "ema_rule": "pycls",
        "ema_period": 32,
        "ema_alpha": 1e-5,
        "precise_bn_images": 8192,
        "auto_augment": "pycls_v0",
        "lighting_std": 0.1,
        "mixup_alpha": 0.8,
        "cutmix_alpha": 1.0,
        "random_erasing": 0.0,
        "repeated_aug": 1,
        "drop_path": 0.0,
        "wd_exclude": [],
    },
    # DHVT's official code (Lu et al. 2022; DeiT's main.py), its CIFAR run; its lr is normalized
    # to batch 512 (see PRESET_REF_BATCH).
    "deit": {
        "schedule": "deit",
        "schedule_step": "epoch",
        "warmup_epochs": 5.0,
        "warmup_ref_epochs": None,
        "warmup_factor": 0.001,
        "min_lr": 0.01,
        "nesterov": True,  # DeiT's --opt sgd is timm's Nesterov SGD
        "label_smoothing": 0.1,
        "ema": True,
        "ema_rule": "decay",
        "ema_decay": 0.99996,
        "report": "raw_final",
        "normalize": "imagenet",
        "auto_augment": "rand-m9-mstd0.5-inc1",
        "mixup_alpha": 0.8,
        "cutmix_alpha": 1.0,
        "random_erasing": 0.25,
        "repeated_aug": 3,
        "drop_path": 0.1,
        "wd_exclude": ["*cls_token", "*pos_embed"],
    },
}


# With the basic preset and no warmup of the study's own, the default warmup_epochs is the full
# warmup from this schedule length on (see Recipe._fill_from_preset).
BASIC_WARMUP_REF_EPOCHS = 50

# The batch size each preset's lr is normalized to: a study's (or `optbench train`'s) `ref_batch`
# when it gives none. Xiao et al. normalize to 2048; DeiT's code scales lr by batch / 512.
PRESET_REF_BATCH: dict[str, int] = {"basic": 2048, "paper": 2048, "deit": 512}

# The parameters each EMA rule reads, with their defaults (filled in when the rule is chosen). A
# rule's parameters are null under the other rules, so a resolved recipe shows only what is used.
EMA_RULE_PARAMS: dict[str, dict[str, float]] = {
    "horizon": {"ema_horizon": 0.078},
    "pycls": {"ema_period": 32, "ema_alpha": 1e-5},
    "decay": {"ema_decay": 0.99996},
}

# Auto-augment policies (train/augment.py): torchvision's by name, pycls's "pycls_v0", and timm's
# AutoAugment and RandAugment config strings ("v0", "original-mstd0.5", "rand-m9-mstd0.5-inc1").
TORCHVISION_POLICIES = ("autoaugment", "randaugment")
TIMM_POLICY = re.compile(
    r"(v0|v0r|original|originalr|3a)(-mstd\d+(\.\d+)?)?"
    r"|rand(-(m|n|mmax|inc)\d+|-(p|mstd)\d+(\.\d+)?)*"
)


def fill_ref_batch(data):
    """Before-validator for models with `ref_batch` and `recipe`: a missing ref_batch comes from
    the recipe's preset (PRESET_REF_BATCH)."""
    if isinstance(data, dict) and data.get("ref_batch") is None:
        recipe = data.get("recipe")
        preset = (
            recipe.get("preset") if isinstance(recipe, dict) else getattr(recipe, "preset", None)
        )
        data = {**data, "ref_batch": PRESET_REF_BATCH.get(preset or "basic", 2048)}
    return data


class Recipe(_Strict):
    """The training recipe shared by every trial of a study: a named preset plus overrides.

    The preset fills every key the study does not give; the resolved recipe (preset name and
    every key) is what gets stored and hashed into the cell id.
    """

    preset: RecipePreset = "basic"
    # schedule (train/optim.py); min_lr and warmup_factor are fractions of the peak lr
    schedule: Literal["cosine", "pycls", "deit"] = "cosine"
    schedule_step: Literal["iteration", "epoch"] = "iteration"
    warmup_epochs: float = Field(default=5.0, ge=0)
    warmup_ref_epochs: int | None = Field(default=None, ge=1)
    warmup_factor: float = Field(default=0.0, ge=0, le=1)
    min_lr: float = Field(default=0.0, ge=0, le=1)
    # optimizer
    momentum: float = Field(default=0.9, ge=0, lt=1)
    nesterov: bool = False
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = Field(default=1e-8, gt=0)
    wd_exclude: tuple[str, ...] = ()
    # loss, weights average (train/ema.py), BN statistics and what is reported
    label_smoothing: float = Field(default=0.1, ge=0, lt=1)
    ema: bool = True
    ema_rule: Literal["horizon", "pycls", "decay"] = "horizon"
    ema_horizon: float | None = Field(default=None, gt=0, le=1)
    ema_period: int | None = Field(default=None, ge=1)
    ema_alpha: float | None = Field(default=None, gt=0)
    ema_decay: float | None = Field(default=None, ge=0, lt=1)
    precise_bn_images: int = Field(default=0, ge=0)
    report: Literal["ema_final", "ema_best", "raw_final", "raw_best"] = "ema_final"
    diverge_loss: float = Field(default=1e4, gt=0)
    # augmentation (train/augment.py)
    normalize: Literal["dataset", "imagenet"] = "dataset"
    hflip: bool = True
    translate: int = Field(default=4, ge=0)
    auto_augment: str = "none"
    autoaugment_policy: Literal["imagenet", "cifar10", "svhn"] = "imagenet"
    randaugment_n: int = Field(default=2, ge=1)
    randaugment_m: int = Field(default=9, ge=0, le=30)
    augment_group: int = Field(default=8, ge=1)
    lighting_std: float = Field(default=0.0, ge=0)
    mixup_alpha: float = Field(default=0.0, ge=0)
    cutmix_alpha: float = Field(default=0.0, ge=0)
    random_erasing: float = Field(default=0.0, ge=0, le=1)
    repeated_aug: int = Field(default=1, ge=1)
    # model
    drop_path: float = Field(default=0.0, ge=0, lt=1)
    weight_init: Literal["reference", "timm"] = "reference"
    # speed (each is off or harmless on CPU)
    amp: bool = True
    channels_last: bool = True
    compile: bool = False

    @model_validator(mode="before")
    @classmethod
    def _fill_from_preset(cls, data):
        if not isinstance(data, dict):
            return data
        given = data
        preset = given.get("preset", "basic")
        # an unknown preset name is reported by the Literal check
        data = {**RECIPE_PRESETS.get(preset, {}), **given}
        # basic's default warmup fits any cosine schedule: 5 epochs from 50 epochs on, shortened
        # in proportion below (0.1 at 1 epoch); a warmup the study gives is kept as given.
        if (
            preset == "basic"
            and data.get("schedule", "cosine") == "cosine"
            and not {"warmup_epochs", "warmup_ref_epochs"} & set(given)
        ):
            data["warmup_ref_epochs"] = BASIC_WARMUP_REF_EPOCHS
        # The chosen EMA rule's parameters get their defaults; the preset's parameters of
        # another rule are dropped (the study's own are kept, and reported if misplaced).
        rule = data.get("ema_rule", "horizon")
        for other, params in EMA_RULE_PARAMS.items():
            for key, default in params.items():
                if other == rule and data.get(key) is None:
                    data[key] = default
                elif other != rule and key not in given:
                    data.pop(key, None)
        # pycls's and DeiT's schedules set the lr once per epoch
        if data.get("schedule") in ("pycls", "deit") and "schedule_step" not in given:
            data["schedule_step"] = "epoch"
        return data

    @field_validator("translate")
    @classmethod
    def _translate(cls, v: int) -> int:
        return _cap(v, MAX_TRANSLATE, "translate", " pixels")

    @field_validator("randaugment_n")
    @classmethod
    def _randaugment_n(cls, v: int) -> int:
        return _cap(v, MAX_AUGMENT_OPS, "augment_ops", " operations per image")

    @field_validator("betas")
    @classmethod
    def _betas(cls, v: tuple[float, float]) -> tuple[float, float]:
        if not all(0 <= b < 1 for b in v):  # AdamW's running averages' decay rates
            raise ValueError(f"each of betas must be in [0, 1), got {list(v)}")
        return v

    @model_validator(mode="after")
    def _consistent(self) -> Recipe:
        if self.report.startswith("ema") and not self.ema:
            raise ValueError(f"report {self.report!r} needs ema: true (or report raw_final)")
        for rule, params in EMA_RULE_PARAMS.items():
            for key in params:
                if rule != self.ema_rule and getattr(self, key) is not None:
                    raise ValueError(f"{key} is read only by ema_rule {rule!r}; remove it")
        if self.schedule != "cosine" and self.schedule_step != "epoch":
            raise ValueError(
                f"schedule {self.schedule!r} sets the lr once per epoch: schedule_step must be 'epoch'"
            )
        named = ("none", "pycls_v0", *TORCHVISION_POLICIES)
        if self.auto_augment not in named and not TIMM_POLICY.fullmatch(self.auto_augment):
            raise ValueError(
                f"auto_augment {self.auto_augment!r} is not one of {list(named)} nor a timm "
                "AutoAugment or RandAugment config string such as 'v0' or 'rand-m9-mstd0.5-inc1'"
            )
        timm_ops = re.search(r"^rand.*-n(\d+)", self.auto_augment)  # timm's RandAugment: -nN
        if timm_ops:
            _cap(int(timm_ops.group(1)), MAX_AUGMENT_OPS, "augment_ops", " operations per image")
        if self.autoaugment_policy != "imagenet" and self.auto_augment != "autoaugment":
            raise ValueError(
                f"autoaugment_policy {self.autoaugment_policy!r} is read only by auto_augment "
                f"'autoaugment' (torchvision's), not {self.auto_augment!r}"
            )
        return self

    def warmup_for(self, epochs: int) -> float:
        """Warmup epochs for a schedule of `epochs`: the full warmup_epochs for schedules of at
        least warmup_ref_epochs, shortened in proportion below that."""
        if self.warmup_ref_epochs is None or epochs >= self.warmup_ref_epochs:
            return self.warmup_epochs
        return self.warmup_epochs * epochs / self.warmup_ref_epochs


class SlurmSettings(_Strict):
    """How trials are submitted to SLURM (executor.kind "slurm"). One trial's resources are one
    job's (or one job-array element's): `nodes` x `tasks_per_node` processes train it with DDP."""

    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    time_min: int = Field(default=60, ge=1, description="job time limit in minutes")
    nodes: int = Field(default=1, ge=1)
    gpus_per_node: int = Field(default=0, ge=0)
    tasks_per_node: int | None = Field(
        default=None, ge=1, description="DDP processes per node; default one per GPU (at least 1)"
    )
    cpus_per_task: int = Field(default=1, ge=1)
    mem_gb: float | None = Field(default=None, gt=0, description="memory per node")
    constraint: str | None = None
    array_parallelism: int = Field(default=64, ge=1)
    setup: list[str] = Field(default_factory=list, description="shell lines run before the trial")
    sbatch: dict[str, str | int | bool] = Field(
        default_factory=dict, description="extra sbatch flags, e.g. {mail-type: END}"
    )
    trials_per_job: int = Field(default=1, ge=1)
    signal_delay_s: int = Field(default=120, ge=10)
    max_requeues: int = Field(default=3, ge=0)
    poll_s: float = Field(default=10.0, ge=2.0)
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


class ExecutorSettings(_Strict):
    """Where trials run. `local` runs a pool of worker processes on this machine, `debug` runs
    them one by one in the driver, `slurm` submits them as SLURM job arrays (see `slurm`)."""

    kind: Literal["local", "debug", "slurm"] = "local"
    workers: int | Literal["auto"] = "auto"
    retries: int = Field(default=2, ge=0)
    slurm: SlurmSettings = SlurmSettings()

    @field_validator("workers")
    @classmethod
    def _workers(cls, v: int | str) -> int | str:
        if isinstance(v, int) and v < 1:
            raise ValueError("workers must be >= 1 or 'auto'")
        return v


class StudySpec(_Strict):
    """One study: a grid of cells (model x optimizer x epochs), n (lr, wd) samples in each."""

    name: str
    dataset: Dataset
    models: list[str] = Field(min_length=1)
    optimizers: list[Optimizer] = Field(min_length=1)
    epochs: list[int] = Field(min_length=1)
    batch_size: int = Field(ge=1)
    ref_batch: int = Field(ge=1)  # default: the recipe preset's (PRESET_REF_BATCH)
    search: Search
    seeds: list[int] = Field(default=[0], min_length=1)
    recipe: Recipe = Recipe()
    output: Path = Path("results")
    storage: str | None = None
    executor: ExecutorSettings = ExecutorSettings()

    @model_validator(mode="before")
    @classmethod
    def _ref_batch_from_preset(cls, data):
        return fill_ref_batch(data)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        _cap(len(v), MAX_NAME, "name", " characters")
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", v):
            raise ValueError(
                "name may use letters, digits, '_', '.', '-' and must not start with one of the last three"
            )
        return v

    @field_validator("batch_size")
    @classmethod
    def _batch_size(cls, v: int) -> int:
        return _cap(v, MAX_BATCH, "batch_size")

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
        return _plain_path(v)

    @field_validator("storage")
    @classmethod
    def _storage(cls, v: str | None) -> str | None:
        return None if v is None else _check_storage_url(v)

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
        return v

    @field_validator("models", "optimizers", "epochs", "seeds")
    @classmethod
    def _unique(cls, v: list) -> list:
        if len(set(v)) != len(v):
            raise ValueError(f"duplicate entries in {v}")
        return v

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
    def _search_covers_grid(self) -> StudySpec:
        for model in self.search.good_values:
            if model not in self.models:
                raise ValueError(f"search.good_values names model {model!r} that is not in models")
        missing = [
            f"{m}/{o}"
            for m in self.models
            for o in self.optimizers
            if o not in self.search.good_values.get(m, {}) and o not in self.search.ranges
        ]
        if missing:
            raise ValueError(
                f"search: no range for {missing}; give search.ranges.<optimizer> or "
                "search.good_values.<model>.<optimizer>"
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
        return {
            "model": cell.model,
            "optimizer": cell.optimizer,
            "epochs": cell.epochs,
            "dataset": {"name": self.dataset.name, "img_size": self.dataset.img_size},
            "batch_size": self.batch_size,
            "ref_batch": self.ref_batch,
            "recipe": self.recipe.model_dump(mode="json"),
            "sampler": self.search.sampler,
            "search_seed": self.search.seed,
            "lr_bounds": list(bounds.lr),
            "wd_bounds": list(bounds.wd),
        }

    def cell_id(self, cell: Cell) -> str:
        blob = json.dumps(self.cell_config(cell), sort_keys=True).encode()
        digest = hashlib.sha256(blob).hexdigest()[:8]
        return f"{cell.model}-{cell.optimizer}-e{cell.epochs}-{digest}"


class Cell(_Strict):
    """One (model, optimizer, epochs) point of a study's grid."""

    model: str
    optimizer: Optimizer
    epochs: int


def parse_spec(data: dict, source: Path | str = "<spec>") -> StudySpec:
    """Validate a mapping (as read from YAML) into a StudySpec, or raise SpecError naming
    `source` and the field. Whether its models, dataset and data exist is `checks.check_spec`'s."""
    if not isinstance(data, dict):
        raise SpecError(f"{source}: a study must be a YAML mapping, got {type(data).__name__}")
    try:
        return StudySpec.model_validate(data)
    except ValidationError as err:
        raise SpecError(format_errors(source, err, schema=StudySpec)) from None


MAX_YAML_NODES = 100_000  # a study has a few hundred; aliases could make billions


class StrictLoader(yaml.SafeLoader):
    """YAML's safe loader, stricter: a key given twice is an error (not "the last one wins"),
    and a document whose aliases (*name) expand it beyond MAX_YAML_NODES is refused before it
    is built (a few lines of nested aliases expand to billions of entries)."""

    def construct_document(self, node):
        sizes: dict[int, int] = {}

        def expanded(n) -> int:  # memoized on the node: linear in the lines, not the expansion
            if id(n) not in sizes:
                sizes[id(n)] = 1  # a cycle counts once
                if isinstance(n, yaml.MappingNode):
                    children = [c for pair in n.value for c in pair]
                else:
                    children = n.value if isinstance(n, yaml.SequenceNode) else []
                sizes[id(n)] = 1 + sum(expanded(c) for c in children)
            return sizes[id(n)]

        if expanded(node) > MAX_YAML_NODES:
            raise yaml.MarkedYAMLError(
                problem=f"its aliases expand it beyond {MAX_YAML_NODES} entries",
                problem_mark=node.start_mark,
            )
        return super().construct_document(node)

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if isinstance(key, (list, dict)):
                continue  # unhashable: the schema reports it
            if key in seen:
                raise yaml.MarkedYAMLError(
                    problem=f"duplicate key {key!r}", problem_mark=key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep)


def _yaml_problem(err: yaml.YAMLError) -> str:
    """One line: what is wrong and where ("line 3, column 5")."""
    mark = getattr(err, "problem_mark", None)
    where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
    problem = getattr(err, "problem", None) or str(err).splitlines()[0]
    return f"{problem}{where}"


def read_yaml(text: str, source: Path | str):
    """Parse YAML with StrictLoader; SpecError naming `source`, the problem and its line."""
    try:
        return yaml.load(text, Loader=StrictLoader)  # a SafeLoader: builds plain data only
    except yaml.YAMLError as err:
        raise SpecError(f"{source}: not valid YAML: {_yaml_problem(err)}") from None


def read_study_yaml(path: Path | str):
    """The content of a study YAML file (at most MAX_STUDY_BYTES of UTF-8), not validated yet."""
    path = Path(path)
    if not path.is_file():
        raise SpecError(f"{path}: no such study file")
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_STUDY_BYTES + 1)
    except OSError as err:
        raise SpecError(f"{path}: cannot read the study file ({err.strerror})") from None
    if len(raw) > MAX_STUDY_BYTES:
        raise SpecError(f"{path}: larger than {MAX_STUDY_BYTES} bytes, not a study file")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise SpecError(f"{path}: not a text file (a study file is UTF-8 YAML)") from None
    return read_yaml(text, path)


def load_spec(path: Path | str) -> StudySpec:
    """Read and validate a study YAML. Reads only; writes nothing."""
    return parse_spec(read_study_yaml(path), path)


def dump_spec(spec: StudySpec) -> str:
    """The spec as YAML, with every default spelled out (saved beside the results)."""
    return yaml.safe_dump(spec.model_dump(mode="json"), sort_keys=False)
