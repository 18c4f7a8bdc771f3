"""What one trial is (`TrainConfig`), how it is run (`Execution`) and what it produced
(`TrialResult`): the contract between the driver, `optbench train`, the worker processes and
the result files."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictFloat,
    StrictInt,
    StringConstraints,
    ValidationError,
    field_validator,
    model_serializer,
    model_validator,
)

from optbench.errors import SpecError, format_errors
from optbench.provenance import COMMIT_PATTERN, FINGERPRINT_PATTERN
from optbench.spec.caps import MAX_EPOCHS, SEED_BOUND
from optbench.spec.optimizers import optimizer_fallback, validated_with_imports
from optbench.spec.recipe import Dataset, Optimizer, Pipeline, Recipe, fill_ref_batch
from optbench.spec.tracking import Tracking
from optbench.trial.timing import TrialTiming
from optbench.user_code import DIGEST_CHARS, MAX_MODULES, check_module_names

Status = Literal["finished", "diverged", "failed"]

# A result file is untrusted input to the driver: each field is checked by type and form, so a
# crafted one cannot smuggle a formula, a huge string or a NaN into the store and the tables.
MAX_MESSAGE = 2000  # characters of a failure's message kept (the traceback is in error.log)
# Numbers are StrictInt and StrictFloat, as in the study schema (recipe.StrictModel): a JSON
# "5.0" or true is not an error percentage or a count.
Digest = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]  # sha256, hex
Short = Annotated[str, StringConstraints(max_length=200)]
Commit = Annotated[str, StringConstraints(pattern=f"^{COMMIT_PATTERN}$")]
Fingerprint = Annotated[str, StringConstraints(pattern=f"^{FINGERPRINT_PATTERN}$")]


class TrainConfig(BaseModel):
    """One training run. `lr` is normalized to `ref_batch`; the optimizer gets `lr_used`."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    model: str
    dataset: Dataset
    optimizer: Optimizer
    lr: StrictFloat = Field(gt=0)
    wd: StrictFloat = Field(ge=0)
    epochs: StrictInt = Field(ge=1, le=MAX_EPOCHS)  # spec/caps.py: a longer schedule never ends
    batch_size: StrictInt = Field(ge=1)
    ref_batch: StrictInt = Field(ge=1)  # default: the recipe preset's (recipe.PRESET_REF_BATCH)
    seed: StrictInt = Field(default=0, ge=0, lt=SEED_BOUND)
    recipe: Recipe = Recipe()
    # what a hybrid optimizer does with the parameters it does not treat as matrices
    # (spec/optimizers.py: optimizer_fallback): derived from the optimizer, recorded in
    # result.json; None (and no key) for every other optimizer
    fallback: str | None = None
    # the study's own modules (its `imports:`, optbench/user_code.py): every process that trains
    # this config imports them before building its model and optimizer
    imports: tuple[str, ...] = ()

    @model_validator(mode="before")
    @classmethod
    def _ref_batch_from_preset(cls, data):
        return fill_ref_batch(data)

    @model_validator(mode="wrap")
    @classmethod
    def _own_optimizers_with_imports(cls, data, validate):
        # as a study's (spec/schema.py): an optimizer of its imports' is a name timm's table lacks
        return validated_with_imports(data, validate)

    @field_validator("imports")
    @classmethod
    def _imports(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(check_module_names(v))

    @model_validator(mode="after")
    def _fallback_of_optimizer(self) -> TrainConfig:
        args = self.recipe.optimizer_args.get(self.optimizer, {})
        object.__setattr__(self, "fallback", optimizer_fallback(self.optimizer, args))
        return self

    @model_serializer(mode="wrap")
    def _unset_later_keys_absent(self, dump):
        """A config without a fallback or imports dumps as it did before those keys existed: the
        paper's optimizers' result files, checkpoints and SLURM journal hashes stay as they were."""
        data = dump(self)
        if self.fallback is None:
            data.pop("fallback", None)
        if not self.imports:
            data.pop("imports", None)
        return data

    @model_validator(mode="after")
    def _warmup_fits(self) -> TrainConfig:
        # Only the cosine rule starts its cosine after warmup; pycls's and DeiT's rules take any
        # warmup (with warmup_epochs >= epochs the whole run warms up, as their code would).
        if self.recipe.schedule == "cosine" and self.recipe.warmup_for(self.epochs) >= self.epochs:
            raise ValueError(
                f"recipe.warmup_epochs {self.recipe.warmup_epochs} must be shorter than "
                f"the schedule ({self.epochs} epochs); or set recipe.warmup_ref_epochs to "
                "shorten warmup in proportion for short schedules"
            )
        return self

    def __setstate__(self, state: dict) -> None:
        """A config pickled before one of its fields existed (a SLURM job queued before an
        upgrade: executors/slurm/legacy.py) gets that field's default, as its JSON would."""
        values = state.setdefault("__dict__", {})
        for name, field in type(self).model_fields.items():
            if name not in values and not field.is_required():
                values[name] = field.get_default(call_default_factory=True)
        super().__setstate__(state)

    def population_key(self) -> str:
        """What the members of one population share (train/population.py): all but (lr, wd)."""
        return self.model_dump_json(exclude={"lr", "wd"})

    @property
    def lr_used(self) -> float:
        """Linear scaling rule: the lr the optimizer sees at this batch size."""
        return self.lr * self.batch_size / self.ref_batch


def make_train_config(what: str, **fields) -> TrainConfig:
    """The one place a TrainConfig is built from parts (TrainConfig's fields, by name):
    `optbench train`'s flags and each trial of a plan (plan/trials.py). A config that does not
    validate (a warmup as long as the schedule, a flag out of range) is a SpecError, one line per
    problem, "<what>: <field>: <why>"."""
    try:
        return TrainConfig(**fields)
    except ValidationError as err:
        raise SpecError(format_errors(what, err)) from None


class UserModule(BaseModel):
    """One module of the study's own code that trained a result (optbench/user_code.py): its
    version (None without one) and the digest of its source files."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    version: Short | None
    digest: Annotated[str, StringConstraints(pattern=f"^[0-9a-f]{{{DIGEST_CHARS}}}$")]

    @field_validator("version")
    @classmethod
    def _printable(cls, version: str | None) -> str | None:
        # `optbench compare` prints it: no escape sequence that would move or recolour the cursor
        if version is not None and not version.isprintable():
            raise ValueError("not printable text")
        return version


ModuleName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_.]{0,199}$")]
# A result's `user_code` (provenance.user_code; trials.csv's column of it, read by `optbench
# compare`): each module of the study's own code that trained it, by name; None where none did.
UserCode = Annotated[dict[ModuleName, UserModule], Field(min_length=1, max_length=MAX_MODULES)]


class Machine(BaseModel):
    """The machine a result's arithmetic ran on (optbench.provenance: `machine`): the CPU
    ("AuthenticAMD family 25 model 1 stepping 1"), its vector flags, torch's CPU capability
    ("AVX2") and on CUDA the GPU (name and compute capability) and driver; None: not known."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    cpu: Short | None = None
    cpu_flags: Short | None = None
    cpu_capability: Short | None = None
    gpu: Short | None = None
    gpu_driver: Short | None = None


class Provenance(BaseModel):
    """Which code made a result (optbench.provenance): optbench's version, the git commit of
    the checkout it ran from (None outside one) and the fingerprint of the training code (with
    the study's own modules folded in); `user_code`: each such module (None: the study imports
    none, and the key is left out); `machine`: the machine it ran on (None: a result written
    before it was recorded, and the key is left out)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    version: Short
    commit: Commit | None = None
    code_fingerprint: Fingerprint
    user_code: UserCode | None = None
    machine: Machine | None = None

    @model_serializer(mode="wrap")
    def _none_no_key(self, dump):
        data = dump(self)
        for key in ("user_code", "machine"):
            if getattr(self, key) is None:
                data.pop(key, None)
        return data


class Execution(BaseModel):
    """How a trial is run, beyond what it computes (floating-point order aside): never part of
    its config nor of its cell's id. A job asks for settings ("auto" allowed); result.json
    records the resolved ones (data/input_plan.py: `resolve_execution`), which the digest promise
    includes (docs/outputs.md). `population`: the number of trials trained together in the trial's
    process (population.py; the study's executor.population, or fewer for a cell's last
    group), 1 for a solo trial. `tracking`: the tracker run each trial writes (the study's
    `tracking:` resolved, optbench/spec/tracking.py; None: none)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    pipeline: Pipeline = "auto"  # the input pipeline (data/batches.py); auto: tensor on CUDA
    population: StrictInt = Field(default=1, ge=1)
    profile: str | None = Field(default=None, max_length=4096)  # the study's --profile file
    tracking: Tracking | None = None

    @model_serializer(mode="wrap")
    def _unset_no_key(self, dump):
        """A study without a profile or tracking writes the execution block it wrote before
        those keys existed."""
        data = dump(self)
        for key in ("profile", "tracking"):
            if getattr(self, key) is None:
                data.pop(key, None)
        return data


def mixed_pipelines_note(cell_id: str, counts: Mapping[str, int]) -> str | None:
    """One line for a cell whose results came through more than one input pipeline (`counts`:
    pipeline -> results), as `optbench run` and the report say it; None for one pipeline."""
    if len(counts) < 2:
        return None
    mix = ", ".join(f"{n} {p}" for p, n in sorted(counts.items()))
    return (
        f"{cell_id} mixes input pipelines ({mix}): same distributions, results within seed "
        "noise (docs/datasets.md)"
    )


class TrialResult(BaseModel):
    """The content of a trial's result.json. Errors are in percent.

    `final_error` and `best_error` are the top-1 errors of the model the recipe reports
    (`recipe.report`: by default the EMA weights; `final_error` is then the final EMA top-1
    error, the study's metric). The raw and EMA errors, top-1 and top-5, final and best-epoch,
    are kept under their own keys (None where not measured, e.g. EMA errors without EMA).
    """

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    status: Status
    final_error: StrictFloat | None = None
    best_error: StrictFloat | None = None
    epochs: StrictInt = Field(ge=1)
    epochs_run: StrictInt = Field(default=0, ge=0)
    diverged_epoch: StrictInt | None = Field(default=None, ge=1)
    wall_s: StrictFloat = Field(default=0.0, ge=0)
    images_per_s: StrictFloat | None = Field(default=None, ge=0)
    # fraction of the training time spent waiting for input (epoch.py: StepClock.waited_s), over the run
    input_wait: StrictFloat | None = Field(default=None, ge=0, le=1)
    digest: Digest | None = None
    message: str | None = None
    config: TrainConfig
    execution: Execution | None = None  # the resolved settings it ran with (None: failed early)
    reported: Literal["ema_final", "ema_best", "raw_final", "raw_best"] | None = None
    raw_final_error: StrictFloat | None = None
    raw_best_error: StrictFloat | None = None
    raw_final_top5_error: StrictFloat | None = None
    ema_final_error: StrictFloat | None = None
    ema_best_error: StrictFloat | None = None
    ema_final_top5_error: StrictFloat | None = None
    world_size: StrictInt = Field(default=1, ge=1, le=1_000_000)
    # what the digest depends on besides the config (train/compute.py: runtime_info)
    threads: StrictInt | None = Field(default=None, ge=1, le=1_000_000)
    device: Short | None = None
    versions: Annotated[dict[Short, Short], Field(max_length=20)] | None = None
    # which code made it (None in result files written before it was recorded)
    provenance: Provenance | None = None
    # who wrote it: the worker that trained the trial, or the driver for a job that ended
    # without a usable result (killed, lost, an invalid result file): retry policy reads it
    origin: Literal["worker", "driver"] = "worker"
    # the study's attempt it belongs to (store/database.py counts them): the driver records a result
    # file only on that attempt (None: trained outside a study, or written before attempts were)
    attempt: StrictInt | None = Field(default=None, ge=1, le=1_000_000)
    # where its wall_s went, part by part (trial/timing.py; None in files written before it was)
    timing: TrialTiming | None = None

    @field_validator("message")
    @classmethod
    def _message_capped(cls, v: str | None) -> str | None:
        return v if v is None or len(v) <= MAX_MESSAGE else v[: MAX_MESSAGE - 3] + "..."

    @model_validator(mode="after")
    def _a_result_has_its_numbers(self) -> TrialResult:
        # A result file is untrusted input to the driver: errors are percentages, and a
        # finished trial has its errors.
        for name, value in self:
            if name.endswith("_error") and value is not None and not 0 <= value <= 100:
                raise ValueError(f"{name} {value} is not a percentage")
        if self.status == "finished" and self.final_error is None:
            raise ValueError("a finished trial needs its final_error")
        if self.epochs_run > self.epochs or (self.diverged_epoch or 0) > self.epochs:
            raise ValueError(f"epochs_run or diverged_epoch beyond its {self.epochs} epochs")
        if self.epochs != self.config.epochs:
            raise ValueError(f"epochs {self.epochs}, but its config has {self.config.epochs}")
        return self
