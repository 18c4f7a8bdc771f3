"""What one trial trains with, as data: the recipe (`Recipe`, its named presets and the lr's
reference batch of each), the dataset settings (`Dataset`) and the optimizer names.

A study (schema.py) shares one recipe and one dataset among its trials; `optbench train` builds
them from flags; a trial's `TrainConfig` (trial/config.py) carries them to the trainer, which
imports them from here, not the study schema. Every recipe key's meaning, and the source of
every preset value, is in docs/recipes.md. Pure data: nothing here imports torch.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    field_validator,
    model_serializer,
    model_validator,
)

from optbench.spec.caps import MAX_AUGMENT_OPS, MAX_IMG_SIZE, MAX_TRANSLATE, check_cap
from optbench.spec.catalogue import CATALOGUE, Layout
from optbench.spec.optimizers import check_optimizer, check_optimizer_args

# An optimizer's name: any of timm's registry (spec/optimizers.py); adamw and sgd are the paper's.
Optimizer = Annotated[str, AfterValidator(check_optimizer)]


class StrictModel(BaseModel):
    """The base of every settings model: unknown keys, non-finite numbers and edits are errors.

    Its numbers and switches are pydantic's StrictInt, StrictFloat and StrictBool: the default
    (lax) types read `true` (YAML's yes and on too) as 1, "5" as 5 and 1 as true, so
    `stall_timeout_s: yes` would be a timeout of one second. A StrictFloat takes an int.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


def plain_path(v: Path | None) -> Path | None:
    """A path validator: a NUL character (which no file system allows) is an error."""
    if v is not None and "\0" in str(v):
        raise ValueError("a path cannot contain a NUL character")
    return v


class Dataset(StrictModel):
    """Which data to train on. `root` is required for on-disk datasets, unused for digits;
    `layout` says how an image dataset lies under it (catalogue.LAYOUTS): like `root`, where
    the data is, never part of a cell id."""

    name: str
    root: Path | None = None
    img_size: StrictInt | None = Field(default=None, ge=4)
    layout: Layout = "folders"

    @model_validator(mode="after")
    def _layout_fits(self) -> Dataset:
        kind = CATALOGUE.get(self.name)  # an unknown name is checks.check_spec's to refuse
        if kind is not None and self.layout not in kind.layouts:
            raise ValueError(
                f"layout {self.layout!r}: {self.name} is read only as {list(kind.layouts)}"
            )
        return self

    @field_validator("img_size")
    @classmethod
    def _img_size(cls, v: int | None) -> int | None:
        return None if v is None else check_cap(v, MAX_IMG_SIZE, "img_size")

    @field_validator("root")
    @classmethod
    def _root(cls, v: Path | None) -> Path | None:
        return plain_path(v)


Pipeline = Literal["auto", "pil", "tensor"]


class StudyDataset(Dataset):
    """A study's `dataset:`: the data (a `Dataset`, what its trials train on) and how it is fed,
    `pipeline` (an execution setting: not part of a cell id nor of a trial's config; result.json
    records the resolved one under `execution`). auto: tensor on CUDA, pil otherwise
    (docs/datasets.md)."""

    pipeline: Pipeline = "auto"

    @property
    def data(self) -> Dataset:
        """The dataset alone, as a trial's config holds it."""
        return Dataset(name=self.name, root=self.root, img_size=self.img_size, layout=self.layout)


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
        "interpolation": "bilinear",  # pycls: cv2.resize INTER_LINEAR on float32, no antialias
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
        "interpolation": "bicubic",  # DHVT: timm's bicubic RandomResizedCrop, Resize(bicubic)
    },
}


# With the basic preset and no warmup of the study's own, the default warmup_epochs is the full
# warmup from this schedule length on (see Recipe._fill_from_preset).
BASIC_WARMUP_REF_EPOCHS = 50

# The batch size each preset's lr is normalized to: a study's (or `optbench train`'s) `ref_batch`
# when it gives none. Xiao et al. normalize to 2048; DeiT's code scales lr by batch / 512. `basic`
# (None) does not scale: its ref_batch is the study's own batch, so the lr a study declares is
# the lr it trains at, as optuna, W&B and timm's --lr mean it. Only a preset whose lr ranges come
# from a paper (Table 4's good values are at batch 2048) has a reason to normalize.
PRESET_REF_BATCH: dict[str, int | None] = {"basic": None, "paper": 2048, "deit": 512}

# The parameters each EMA rule reads, with their defaults (filled in when the rule is chosen). A
# rule's parameters are null under the other rules, so a resolved recipe shows only what is used.
EMA_RULE_PARAMS: dict[str, dict[str, float]] = {
    "horizon": {"ema_horizon": 0.078},
    "pycls": {"ema_period": 32, "ema_alpha": 1e-5},
    "decay": {"ema_decay": 0.99996},
}

# Auto-augment policies (data/augment.py): torchvision's by name, pycls's "pycls_v0", and timm's
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
        ref_batch = PRESET_REF_BATCH.get(preset or "basic", 2048)
        if ref_batch is None:  # basic: the batch itself (a bad batch_size is its own error)
            batch = data.get("batch_size")
            ref_batch = batch if type(batch) is int and batch >= 1 else 2048
        data = {**data, "ref_batch": ref_batch}
    return data


class Recipe(StrictModel):
    """The training recipe shared by every trial of a study: a named preset plus overrides.

    The preset fills every key the study does not give; the resolved recipe (preset name and
    every key) is what gets stored and hashed into the cell id.
    """

    preset: RecipePreset = "basic"
    # schedule (train/optim.py); min_lr and warmup_factor are fractions of the peak lr
    schedule: Literal["cosine", "pycls", "deit"] = "cosine"
    schedule_step: Literal["iteration", "epoch"] = "iteration"
    warmup_epochs: StrictFloat = Field(default=5.0, ge=0)
    warmup_ref_epochs: StrictInt | None = Field(default=None, ge=1)
    warmup_factor: StrictFloat = Field(default=0.0, ge=0, le=1)
    min_lr: StrictFloat = Field(default=0.0, ge=0, le=1)
    # optimizer
    momentum: StrictFloat = Field(default=0.9, ge=0, lt=1)
    nesterov: StrictBool = False
    betas: tuple[StrictFloat, StrictFloat] = (0.9, 0.999)
    eps: StrictFloat = Field(default=1e-8, gt=0)
    # every other optimizer's own arguments, by its name (spec/optimizers.py checks them)
    optimizer_args: dict[str, dict[str, Any]] = Field(default_factory=dict)
    wd_exclude: tuple[str, ...] = ()
    # loss, weights average (train/ema.py), BN statistics and what is reported
    label_smoothing: StrictFloat = Field(default=0.1, ge=0, lt=1)
    ema: StrictBool = True
    ema_rule: Literal["horizon", "pycls", "decay"] = "horizon"
    ema_horizon: StrictFloat | None = Field(default=None, gt=0, le=1)
    ema_period: StrictInt | None = Field(default=None, ge=1)
    ema_alpha: StrictFloat | None = Field(default=None, gt=0)
    ema_decay: StrictFloat | None = Field(default=None, ge=0, lt=1)
    precise_bn_images: StrictInt = Field(default=0, ge=0)
    report: Literal["ema_final", "ema_best", "raw_final", "raw_best"] = "ema_final"
    diverge_loss: StrictFloat = Field(default=1e4, gt=0)
    # augmentation (data/augment.py)
    normalize: Literal["dataset", "imagenet"] = "dataset"
    hflip: StrictBool = True
    translate: StrictInt = Field(default=4, ge=0)
    auto_augment: str = "none"
    autoaugment_policy: Literal["imagenet", "cifar10", "svhn"] = "imagenet"
    randaugment_n: StrictInt = Field(default=2, ge=1)
    randaugment_m: StrictInt = Field(default=9, ge=0, le=30)
    augment_group: StrictInt = Field(default=8, ge=1)
    lighting_std: StrictFloat = Field(default=0.0, ge=0)
    mixup_alpha: StrictFloat = Field(default=0.0, ge=0)
    cutmix_alpha: StrictFloat = Field(default=0.0, ge=0)
    random_erasing: StrictFloat = Field(default=0.0, ge=0, le=1)
    repeated_aug: StrictInt = Field(default=1, ge=1)
    # model
    drop_path: StrictFloat = Field(default=0.0, ge=0, lt=1)
    # class-folder datasets: how the training crop and the evaluation resize resample
    interpolation: Literal["bilinear_antialias", "bilinear", "bicubic"] = "bilinear_antialias"
    weight_init: Literal["reference", "timm"] = "reference"
    # speed (each is off or harmless on CPU)
    amp: StrictBool = True
    channels_last: StrictBool = True
    compile: StrictBool = False

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

    @field_validator("optimizer_args")
    @classmethod
    def _optimizer_args(cls, v: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        for name, args in v.items():
            check_optimizer_args(name, args)
        return v

    @model_serializer(mode="wrap")
    def _no_args_no_key(self, dump):
        """A recipe without optimizer_args dumps as it did before the key existed, so the
        paper's optimizers' trials keep their configs, checkpoints and cell ids."""
        data = dump(self)
        if not self.optimizer_args:
            data.pop("optimizer_args", None)
        return data

    def __hash__(self) -> int:  # frozen, but optimizer_args is a dict: hashed as its JSON
        return hash(self.model_dump_json())

    def for_optimizer(self, name: str) -> Recipe:
        """This recipe as a trial of optimizer `name` trains with: its optimizer_args keep
        that optimizer's entry only."""
        own = {name: self.optimizer_args[name]} if name in self.optimizer_args else {}
        return self.model_copy(update={"optimizer_args": own})

    @field_validator("translate")
    @classmethod
    def _translate(cls, v: int) -> int:
        return check_cap(v, MAX_TRANSLATE, "translate", " pixels")

    @field_validator("randaugment_n")
    @classmethod
    def _randaugment_n(cls, v: int) -> int:
        return check_cap(v, MAX_AUGMENT_OPS, "augment_ops", " operations per image")

    @field_validator("betas")
    @classmethod
    def _betas(cls, v: tuple[float, float]) -> tuple[float, float]:
        if not all(0 <= b < 1 for b in v):  # AdamW's running averages' decay rates
            raise ValueError(f"each of betas must be in [0, 1), got {list(v)}")
        return v

    @model_validator(mode="after")
    def _consistent(self) -> Recipe:
        if self.reported_weights == "ema" and not self.ema:
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
            check_cap(
                int(timm_ops.group(1)), MAX_AUGMENT_OPS, "augment_ops", " operations per image"
            )
        if self.autoaugment_policy != "imagenet" and self.auto_augment != "autoaugment":
            raise ValueError(
                f"autoaugment_policy {self.autoaugment_policy!r} is read only by auto_augment "
                f"'autoaugment' (torchvision's), not {self.auto_augment!r}"
            )
        return self

    @property
    def reported_weights(self) -> Literal["ema", "raw"]:
        """Whose errors `report` names: the EMA's or the raw weights'."""
        return self.report.split("_")[0]  # type: ignore[return-value]

    @property
    def reported_epoch(self) -> Literal["final", "best"]:
        """Which of their errors `report` names: the last epoch's or the best epoch's."""
        return self.report.split("_")[1]  # type: ignore[return-value]

    def warmup_for(self, epochs: int) -> float:
        """Warmup epochs for a schedule of `epochs`: the full warmup_epochs for schedules of at
        least warmup_ref_epochs, shortened in proportion below that."""
        if self.warmup_ref_epochs is None or epochs >= self.warmup_ref_epochs:
            return self.warmup_epochs
        return self.warmup_epochs * epochs / self.warmup_ref_epochs
