"""A corpus of bad inputs: study files, storage URLs, `optbench run` and `optbench train` flags.
Every one must give exit code 2, exactly one line on stderr naming the field or path, and write
nothing anywhere (the whole folder tree is compared before and after; storage URLs and output
folders of the cases point inside it)."""

from __future__ import annotations

import copy
import importlib.util
import os
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch
import yaml
from cli_inprocess import ONE_MODEL_STUDY, run_cli, train_args

DELETE = object()
GOOD = {**copy.deepcopy(ONE_MODEL_STUDY), "output": "results"}


@dataclass
class Case:
    """One bad input: `study` changes the good study (dotted key -> value, DELETE removes it) or
    replaces its bytes (`raw`); `args` is the command line (STUDY stands for the study file,
    TMP for the test's folder); `needle` must appear in the error line."""

    id: str
    needle: str
    args: tuple[str, ...] = ("run", "STUDY")
    study: dict = field(default_factory=dict)
    raw: bytes | None = None
    skip: str | None = None
    env: dict[str, str] = field(default_factory=dict)  # environment variables set for the command


def _study(**changes) -> dict:
    return changes


# the good study trained with Lion, in its own (lr, wd) box
LION_BOX = {"lr": [1e-4, 1e-3], "wd": [0.1, 1.0]}
LION_STUDY = {"optimizers": ["lion"], "search.ranges.lion": LION_BOX}

train = train_args  # `optbench train` of a tiny trial, some flags changed


NO_CUDA = None if not torch.cuda.is_available() else "this machine has CUDA"
MYSQL = "MySQLdb is installed" if importlib.util.find_spec("MySQLdb") else None

CASES = [
    # --- the study file itself
    Case("binary file", "not a text file", raw=b"\x89PNG\r\n\x1a\n\x00\xff\xfe" * 20),
    Case("empty file", "must be a YAML mapping", raw=b""),
    Case("a YAML list", "must be a YAML mapping", raw=b"- name: tiny\n"),
    Case("a YAML scalar", "must be a YAML mapping", raw=b"just words\n"),
    Case("broken YAML", "not valid YAML", raw=b"name: [tiny\n"),
    Case("tab indentation", "not valid YAML", raw=b"name: tiny\ndataset:\n\tname: digits\n"),
    Case("NUL character", "not valid YAML", raw=b"name: tiny\x00\n"),
    Case("duplicate key", "duplicate key 'epochs'", raw=b"epochs: 1\nepochs: 2\n"),
    Case(
        "duplicate nested key",
        "duplicate key 'n_samples' (line 4",
        raw=b"name: tiny\nsearch:\n  n_samples: 2\n  n_samples: 3\n",
    ),
    Case(
        "YAML alias bomb",
        "aliases expand it beyond",
        raw=b"a: &a [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\n"
        + b"".join(
            f"{n}: &{n} [{', '.join(['*' + p] * 10)}]\n".encode()
            for p, n in zip("abcdefgh", "bcdefghi", strict=True)
        ),
    ),
    Case("huge file", "larger than", raw=b"# " + b"x" * (1 << 20) + b"\n"),
    Case("missing study file", "no such study file", args=("run", "TMP/nowhere.yaml")),
    Case("a folder as study", "no such study file", args=("run", "TMP/adir")),
    # --- keys and values
    Case("unknown key", "epochz: unknown key", study=_study(epochz=3)),
    Case(
        "unknown recipe key", "recipe.warmup_epoch: unknown key", study={"recipe.warmup_epoch": 1}
    ),
    Case("missing required key", "models", study={"models": DELETE}),
    Case(  # one line, the useful one: not "search.n_samples: Field required" before it
        "misspelt required key",
        "search.n_sample: unknown key; did you mean search.n_samples?",
        study={"search.n_samples": DELETE, "search.n_sample": 2},
    ),
    Case(
        "misspelt top-level required key",
        "batch_sise: unknown key; did you mean batch_size?",
        study={"batch_size": DELETE, "batch_sise": 64},
    ),
    Case("300-char name", "300 characters is above the cap of 100", study=_study(name="n" * 300)),
    Case("name with a slash", "name", study=_study(name="a/b")),
    Case("name starting with a dot", "name", study=_study(name=".hidden")),
    Case("empty name", "name", study=_study(name="")),
    Case("batch_size a word", "batch_size", study=_study(batch_size="big")),
    Case("batch_size 0", "batch_size", study=_study(batch_size=0)),
    Case("batch_size above the cap", "above the cap of 65536", study=_study(batch_size=100_000)),
    Case("batch larger than the data", "1437 training images", study=_study(batch_size=5000)),
    Case("batch_size inf", "batch_size", study=_study(batch_size=float("inf"))),
    Case("ref_batch 0", "ref_batch", study=_study(ref_batch=0)),
    Case("epochs 0", "epochs", study=_study(epochs=0)),
    Case("epochs negative", "epochs", study=_study(epochs=-3)),
    Case("epochs duplicated", "duplicate entries", study=_study(epochs=[1, 1])),
    Case("no models", "models", study=_study(models=[])),
    Case("unknown model", "no_such_model", study=_study(models=["no_such_model"])),
    Case(
        "model name in another case",  # the suggestion ignores case, and says it is only that
        "did you mean vit_c_w64_16px? (only the case differs",
        study=_study(models=["ViT_C_w64_16px"]),
    ),
    Case(
        "unknown optimizer",
        "optimizers.0: unknown optimizer",
        study=_study(optimizers=["loin"]),
    ),
    # --- imports: module names only, each importable (tests/test_user_imports.py: its own code)
    Case(
        "imports a file path",
        "'lab/models.py' is not a module name",
        study=_study(imports=["lab/models.py"]),
    ),
    Case("imports a URL", "never a file path or URL", study=_study(imports=["https://x.org/m.py"])),
    Case(
        "imports a relative name",
        "'.models' is not a module name",
        study=_study(imports=[".models"]),
    ),
    Case(
        "imports not a list", "imports: Input should be a valid list", study=_study(imports="lab")
    ),
    Case(
        "imports a missing module",
        "imports: cannot import module 'no_such_lab_module': ModuleNotFoundError",
        study=_study(imports=["no_such_lab_module"]),
    ),
    Case(
        "--import a file path",
        "--import: 'lab/models.py' is not a module name",
        args=("models", "--import", "lab/models.py"),
    ),
    Case(
        "--import a missing module",
        "--import: cannot import module 'no_such_lab_module'",
        args=train_args("--import", "no_such_lab_module"),
    ),
    Case("no optimizers", "optimizers", study=_study(optimizers=[])),
    Case("n_samples 0", "n_samples", study={"search.n_samples": 0}),
    Case(
        "n_samples a billion",
        "above the cap of 10000",
        study={"search.n_samples": 1_000_000_000},
    ),
    Case(
        "too many trials in all",
        "= 12000 trials is above the cap",
        study={"search.n_samples": 6000, "seeds": [0, 1]},
    ),
    Case(
        "qmc needs a power of 2",
        "power of 2",
        study={"search.n_samples": 3, "search.sampler": "qmc"},
    ),
    Case("unknown sampler", "search.sampler", study={"search.sampler": "bogus"}),
    Case("lr bound inf", "finite", study={"search.ranges.adamw.lr": [float("inf"), 1.0]}),
    Case("lr bound nan", "finite", study={"search.ranges.adamw.lr": [1e-3, float("nan")]}),
    Case("wd bound 0", "must be > 0", study={"search.ranges.adamw.wd": [0.0, 0.1]}),
    Case("lr low above high", "must be < high", study={"search.ranges.adamw.lr": [1e-2, 1e-3]}),
    Case("lr one bound", "search.ranges.adamw.lr", study={"search.ranges.adamw.lr": [1e-3]}),
    Case("no range for the optimizer", "no range for", study={"search.ranges": {}}),
    Case(
        "unknown optimizer, did you mean",
        "did you mean lion?",
        study={"optimizers": ["adamw", "loin"]},
    ),
    Case(
        "no box for a timm optimizer",
        "no range for optimizer 'lion'",
        study=_study(optimizers=["adamw", "lion"]),
    ),
    Case(
        "a range of no optimizer",
        "did you mean lion?",
        study={"search.ranges.loin": LION_STUDY["search.ranges.lion"]},
    ),
    Case("a CUDA-only optimizer", "not supported", study={"optimizers": ["bnbadam"]}),
    Case(
        "optimizer argument misspelt",
        "did you mean betas?",
        study={"recipe.optimizer_args": {"lion": {"beta": [0.9, 0.99]}}},
    ),
    Case(
        "optimizer argument mistyped",
        "a list of 2 numbers",
        study={"recipe.optimizer_args": {"lion": {"betas": 0.9}}},
    ),
    Case(
        "optimizer arguments of adamw",
        "recipe.betas",
        study={"recipe.optimizer_args": {"adamw": {"amsgrad": True}}},
    ),
    Case(  # the argument named, not only timm's words (issue 68)
        "optimizer argument out of range",
        "study.yaml: recipe.optimizer_args.lion.betas: timm's lion refuses [2.0, 0.99]",
        study={**LION_STUDY, "recipe.optimizer_args": {"lion": {"betas": [2.0, 0.99]}}},
    ),
    Case(
        "optimizer argument out of range beside a good one",
        "recipe.optimizer_args.lion.betas: timm's lion refuses [1.5, 0.99]",
        study={
            **LION_STUDY,
            "recipe.optimizer_args": {"lion": {"betas": [1.5, 0.99], "caution": True}},
        },
    ),
    Case(
        "optimizer argument not finite",
        "recipe.optimizer_args: lion.betas: [nan, 0.99] is not finite",
        study={**LION_STUDY, "recipe.optimizer_args": {"lion": {"betas": [float("nan"), 0.99]}}},
    ),
    Case(
        "a population of an optimizer it does not implement",
        "population trains adamw, sgd and lion only (train/population_optim.py), not 'muon'",
        study={"optimizers": ["muon"], "search.ranges.muon": LION_BOX, "executor.population": 2},
    ),
    Case(
        "a population of Lion with caution",
        "recipe.optimizer_args.lion.caution True: a population implements",
        study={
            **LION_STUDY,
            "recipe.optimizer_args": {"lion": {"caution": True}},
            "executor.population": 2,
        },
    ),
    Case("train: unknown optimizer", "did you mean lion?", args=train(optimizer="loin")),
    Case(  # the dotted form, as a study's --set: once an "unknown key" for every optimizer
        "train --set optimizer_args.lion.betas",
        "timm's lion refuses [2.0, 0.99]",
        args=train("--set", "optimizer_args.lion.betas=[2.0, 0.99]", optimizer="lion"),
    ),
    Case("good_range inf", "finite", study={"search.good_range": [float("inf"), 4.0]}),
    Case("search seed negative", "search.seed", study={"search.seed": -1}),
    Case("search seed beyond 64 bits", "search.seed", study={"search.seed": 2**64}),
    Case("seed beyond 64 bits", "seeds", study=_study(seeds=[2**64])),
    Case("seed negative", "seeds", study=_study(seeds=[-1])),
    Case("seeds duplicated", "duplicate entries", study=_study(seeds=[0, 0])),
    Case("no seeds", "seeds", study=_study(seeds=[])),
    Case("unknown dataset", "unknown dataset 'mnist'", study={"dataset.name": "mnist"}),
    Case("img_size 10000", "above the cap of 1024", study={"dataset.img_size": 10000}),
    Case("img_size 2", "img_size", study={"dataset.img_size": 2}),
    Case(
        "img_size the patches cannot tile",
        "dataset.img_size: 18 is not a multiple of vit_p_w64_16px's patch size 4",
        study={"dataset.img_size": 18},
    ),
    Case("a root for digits", "takes no root", study={"dataset.root": "TMP/adir"}),
    Case(
        "cifar10 without its files",
        "cifar-10-batches-py",
        study={"dataset": {"name": "cifar10", "root": "TMP/adir"}},
    ),
    Case("NUL in dataset.root", "NUL", study={"dataset.root": "a\x00b"}),
    Case("warmup inf", "finite", study={"recipe.warmup_epochs": float("inf")}),
    Case("mixup nan", "finite", study={"recipe.mixup_alpha": float("nan")}),
    Case("diverge_loss inf", "finite", study={"recipe.diverge_loss": float("inf")}),
    Case("label smoothing 1.5", "label_smoothing", study={"recipe.label_smoothing": 1.5}),
    Case("unknown preset", "recipe.preset", study={"recipe.preset": "bogus"}),
    Case("EMA reported without EMA", "needs ema", study={"recipe.ema": False}),
    Case("warmup as long as the schedule", "warmup_epochs", study={"recipe.warmup_epochs": 5}),
    Case("unknown schedule", "recipe.schedule", study={"recipe.schedule": "linear"}),
    Case(
        "pycls schedule per iteration",
        "schedule_step must be 'epoch'",
        study={"recipe.schedule": "pycls", "recipe.schedule_step": "iteration"},
    ),
    Case("unknown ema_rule", "recipe.ema_rule", study={"recipe.ema_rule": "swa"}),
    Case("ema_horizon 2", "recipe.ema_horizon", study={"recipe.ema_horizon": 2}),
    Case(
        "ema_period 0",
        "recipe.ema_period",
        study={"recipe.ema_rule": "pycls", "recipe.ema_period": 0},
    ),
    Case(
        "ema_alpha of another rule",
        "ema_alpha is read only by ema_rule 'pycls'",
        study={"recipe.ema_alpha": 1e-5},
    ),
    Case(
        "ema_decay 1", "recipe.ema_decay", study={"recipe.ema_rule": "decay", "recipe.ema_decay": 1}
    ),
    Case("unknown weight_init", "recipe.weight_init", study={"recipe.weight_init": "xavier"}),
    Case(
        "precise_bn_images -1", "recipe.precise_bn_images", study={"recipe.precise_bn_images": -1}
    ),
    Case("lighting_std inf", "finite", study={"recipe.lighting_std": float("inf")}),
    Case("lighting_std -0.1", "recipe.lighting_std", study={"recipe.lighting_std": -0.1}),
    Case("unknown auto_augment", "auto_augment 'bogus'", study={"recipe.auto_augment": "bogus"}),
    Case(
        "autoaugment_policy without autoaugment",
        "autoaugment_policy 'cifar10' is read only",
        study={"recipe.autoaugment_policy": "cifar10"},
    ),
    Case("randaugment_m 31", "recipe.randaugment_m", study={"recipe.randaugment_m": 31}),
    Case(
        "randaugment_n a million",
        "above the cap of 16",
        study={"recipe.auto_augment": "randaugment", "recipe.randaugment_n": 10**6},
    ),
    Case(
        "timm RandAugment of a million ops",
        "above the cap of 16",
        study={"recipe.auto_augment": "rand-m9-n1000000"},
    ),
    Case("translate 100000", "above the cap of 64", study={"recipe.translate": 100_000}),
    Case("betas above 1", "betas must be in [0, 1)", study={"recipe.betas": [1.5, 0.999]}),
    Case("betas one value", "recipe.betas", study={"recipe.betas": [0.9]}),
    Case("eps 0", "recipe.eps", study={"recipe.eps": 0}),
    Case("drop_path 1", "recipe.drop_path", study={"recipe.drop_path": 1.0}),
    Case("repeated_aug 0", "recipe.repeated_aug", study={"recipe.repeated_aug": 0}),
    Case("augment_group 0", "recipe.augment_group", study={"recipe.augment_group": 0}),
    Case("momentum 1", "recipe.momentum", study={"recipe.momentum": 1.0}),
    Case("warmup_ref_epochs 0", "recipe.warmup_ref_epochs", study={"recipe.warmup_ref_epochs": 0}),
    Case("report raw_last", "recipe.report", study={"recipe.report": "raw_last"}),
    Case("workers 0", "workers", study={"executor": {"workers": 0}}),
    Case("workers -1", "workers", study={"executor": {"workers": -1}}),
    Case("workers beyond the cores", "between 1 and", study={"executor": {"workers": 1000}}),
    Case("unknown executor", "executor.kind", study={"executor": {"kind": "cloud"}}),
    Case("retries -1", "retries", study={"executor": {"retries": -1}}),
    Case("slurm memory inf", "finite", study={"executor": {"slurm": {"mem_gb": float("inf")}}}),
    # a switch where a number is meant (YAML 1.1 reads yes and on as true): not 1 (issue 32)
    *(
        Case(
            f"stall_timeout_s {word}",
            "executor.stall_timeout_s: Input should be a valid number (got True)",
            raw=yaml.safe_dump(GOOD).encode() + f"executor:\n  stall_timeout_s: {word}\n".encode(),
        )
        for word in ("true", "yes", "on")
    ),
    Case("population true", "executor.population", study={"executor": {"population": True}}),
    Case(
        "seed_per_sample a word",
        "search.seed_per_sample: Input should be a valid boolean",
        study={"search.seed_per_sample": "x"},
    ),
    Case(
        "seed_per_sample with a population",
        "search.seed_per_sample gives every sample its own",
        study={"search.seed_per_sample": True, "executor": {"population": 2}},
    ),
    Case(
        "seed_per_sample adding seeds",
        "adding seeds needs the same seeds in every sample",
        study={
            "search.seed_per_sample": True,
            "seeds": [0, 1, 2, 3],
            "decide": {"claims": ["b"], "looks": [3, 4]},
        },
    ),
    *[
        Case(f"tracking {what}", needle, study={"tracking": block})
        for what, needle, block in [
            ("kind unknown", "tracking.kind", {"kind": "neptune"}),
            ("uri for wandb", "uri is MLflow's", {"kind": "wandb", "uri": "x"}),
            ("mode for mlflow", "W&B's", {"kind": "mlflow", "mode": "online"}),
            ("uri scheme", "tracking.uri", {"kind": "mlflow", "uri": "s3://b"}),
            ("project name", "tracking.project", {"kind": "wandb", "project": "a b"}),
        ]
    ],
    Case("epochs true", "should be an int or a list of ints", study=_study(epochs=True)),
    Case("n_samples a string", "search.n_samples", study={"search.n_samples": "2"}),
    Case("ema 1", "recipe.ema: Input should be a valid boolean", study={"recipe.ema": 1}),
    # --- where results go
    Case("output naming a file", "afile is a file", study=_study(output="TMP/afile")),
    Case("output beneath a file", "afile is a file", study=_study(output="TMP/afile/results")),
    Case("NUL in output", "NUL", study=_study(output="res\x00ults")),
    Case("storage not a URL", "not a storage URL", study=_study(storage="not a url")),
    Case("storage in memory", "in-memory", study=_study(storage="sqlite://")),
    # every spelling of a SQLite database that keeps nothing (issue 43, item 2: the URI one trained
    # and said "recorded"; `status` then showed 0 done)
    *[
        Case(f"storage in memory: {url}", "in-memory", study=_study(storage=url))
        for url in (
            "sqlite:///:memory:",
            "sqlite+pysqlite:///:memory:",
            "sqlite:///:memory:?cache=shared",
            "sqlite:///file:x?mode=memory&cache=shared&uri=true",
            "sqlite:///file::memory:?cache=shared&uri=true",
            "sqlite:///file:TMP/x.db?vfs=memdb&uri=true",
            "sqlite:///TMP/x.db?mode=memory&uri=true",
            "sqlite:///file:x?MODE=Memory&uri=TRUE",
        )
    ],
    # a URI filename names its file in SQLite's words, not the path optbench checks and reads
    Case(
        "storage a SQLite URI filename",
        "uri=true",
        study=_study(storage="sqlite:///file:TMP/x.db?uri=true&mode=rwc"),
    ),
    Case("storage bad port", "not a storage URL", study=_study(storage="postgresql://u@h:port/db")),
    Case("storage unknown kind", "unknown kind of database", study=_study(storage="nosuch://x/y")),
    Case("storage journal without a path", "journal://", study=_study(storage="journal://")),
    Case(
        "storage beneath a file",
        "afile is a file",
        study=_study(storage="sqlite:///TMP/afile/study.db"),
    ),
    Case(
        "journal beneath a file",
        "afile is a file",
        study=_study(storage="journal:///TMP/afile/journal.log"),
    ),
    Case("storage a folder", "is a folder", study=_study(storage="sqlite:///TMP/adir")),
    # a missing folder outside the study folder is a typo or an unmounted file system
    Case(
        "storage in a missing folder",
        "/nowhere does not exist",
        study=_study(storage="sqlite:///TMP/nowhere/study.db"),
    ),
    Case(
        "journal in a missing folder",
        "/nowhere does not exist",
        study=_study(storage="journal:///TMP/nowhere/journal.log"),
    ),
    # /proc and /sys take no new file, even from root, to whom they look writable
    Case(
        "storage in /proc",
        "/proc is on a file system",
        study=_study(storage="sqlite:////proc/s.db"),
    ),
    Case(
        "journal in /proc", "/proc is on a file system", study=_study(storage="journal:///proc/x")
    ),
    Case("journal in /sys", "/sys is on a file system", study=_study(storage="journal:///sys/x/j")),
    Case("output in /proc", "/proc is on a file system", study=_study(output="/proc/results")),
    Case(
        "storage a binary file",
        "not an SQLite database",
        study=_study(storage="sqlite:///TMP/afile"),
    ),
    Case(
        "journal a binary file",
        "not an optuna journal",
        study=_study(storage="journal:///TMP/afile"),
    ),
    Case(
        "storage driver missing",
        "not installed",
        study=_study(storage="mysql://u@localhost/db"),
        skip=MYSQL,
    ),
    # --- dry runs stop on what would exhaust the machine too
    Case(
        "dry run, img_size 10000",
        "cap of 1024",
        ("run", "STUDY", "--dry-run"),
        {"dataset.img_size": 10000},
    ),
    Case(
        "dry run, a billion samples",
        "cap of 10000",
        ("run", "STUDY", "--dry-run"),
        {"search.n_samples": 10**9},
    ),
    Case(
        "dry run, batch > data",
        "training images",
        ("run", "STUDY", "--dry-run"),
        {"batch_size": 5000},
    ),
    # --- optbench run's flags
    Case("--workers 0", "--workers", ("run", "STUDY", "--workers", "0")),
    Case("--workers -1", "--workers", ("run", "STUDY", "--workers", "-1")),
    Case("--workers 1000", "between 1 and", ("run", "STUDY", "--workers", "1000")),
    Case("--executor cloud", "--executor", ("run", "STUDY", "--executor", "cloud")),
    # --- flags that click refuses: one line naming the flag, not typer's usage box
    Case(
        "--workers abc",
        "'--workers': Input should be a valid integer",
        ("run", "STUDY", "--workers", "abc"),
    ),
    Case("an unknown flag", "No such option: --bogus", ("run", "STUDY", "--bogus")),
    Case("run without a study", "Missing argument 'study'", ("run",)),
    Case(
        "a flag without its value",
        "'--workers' requires an argument",
        ("run", "STUDY", "--workers"),
    ),
    Case("an unknown command", "No such command 'rnu'", ("rnu", "STUDY")),
    Case(
        "status --set without a value", "'--set' requires an argument", ("status", "STUDY", "--set")
    ),
    Case("report --format jpg", "--format: 'jpg'", ("report", "STUDY", "--format", "jpg")),
    Case("report --metric foo", "--metric: 'foo'", ("report", "STUDY", "--metric", "foo")),
    Case("report --band dashed", "--band: 'dashed'", ("report", "STUDY", "--band", "dashed")),
    # --- optbench report's flags
    Case(
        "report --out a file",
        "--out: TMP/afile is a file",
        ("report", "STUDY", "--out", "TMP/afile"),
    ),
    Case(
        "report --out beneath a file",
        "afile is a file",
        ("report", "STUDY", "--out", "TMP/afile/r"),
    ),
    Case(
        "report into a study's file",
        "afile is a file",
        ("report", "STUDY", "--out", "TMP"),
        study=_study(name="afile"),
    ),
    # --- optbench train's flags
    Case("train --lr inf", "lr", train(lr="inf")),
    Case("train --lr nan", "lr", train(lr="nan")),
    Case("train --lr -1", "lr", train(lr="-1")),
    Case("train --wd inf", "wd", train(wd="inf")),
    Case("train --epochs 0", "epochs", train(epochs="0")),
    Case("train --warmup-epochs inf", "finite", train(warmup_epochs="inf")),
    Case("train --out a file", "afile is a file", train(out="TMP/afile")),
    Case("train --out beneath a file", "afile is a file", train(out="TMP/afile/out")),
    Case("train --threads -1", "--threads", train("--threads", "-1")),
    Case("train --threads 0", "--threads", train("--threads", "0")),
    Case("train --threads 1000", "--threads", train("--threads", "1000")),
    Case("train --device bogus", "--device", train("--device", "bogus")),
    Case("train --device cuda", "no CUDA device", train("--device", "cuda"), skip=NO_CUDA),
    Case("train --device cuda:99", "--device", train("--device", "cuda:99")),
    Case("train --seed 2**64", "seed", train("--seed", str(2**64))),
    Case("train --seed -1", "seed", train("--seed", "-1")),
    Case("train --batch-size > data", "1437 training images", train("--batch-size", "5000")),
    Case("train --img-size 10000", "cap of 1024", train(img_size="10000")),
    Case("train --img-size 18", "--img-size: 18 is not a multiple", train(img_size="18")),
    Case("train --ref-batch 0", "ref_batch", train("--ref-batch", "0")),
    Case("train --optimizer adahessian", "--optimizer", train(optimizer="adahessian")),
    Case("train unknown model", "unknown model", train()[:1] + ("nope",) + train()[2:]),
    Case(
        "train model in another case",
        "did you mean vit_c_w64_16px? (only the case differs",
        train()[:1] + ("ViT_C_w64_16px",) + train()[2:],
    ),
    Case("train --lr abc", "'--lr': Input should be a valid number", train(lr="abc")),
    Case("train --epochs 1.5", "'--epochs'", train(epochs="1.5")),
    Case("train without --out", "Missing option '--out'", train()[:-2]),
    Case("train --dataset mnist", "unknown dataset", train(dataset="mnist")),
    Case("train --data-root for digits", "takes no root", train("--data-root", "TMP/adir")),
    Case("train --set broken YAML", "--set warmup_epochs", train("--set", "warmup_epochs=[1")),
    Case("train --set unknown key", "unknown key", train("--set", "warmup_epoch=1")),
    Case("train --set inf", "finite", train("--set", "min_lr=.inf")),
    Case("train --set without =", "KEY=VALUE", train("--set", "warmup_epochs")),
    Case("train --recipe bogus", "preset", train("--recipe", "bogus")),
    Case("train --set weight_init", "weight_init", train("--set", "weight_init=xavier")),
    Case("train --set betas", "betas must be in [0, 1)", train("--set", "betas=[1.5,0.9]")),
    Case("train --set translate", "above the cap of 64", train("--set", "translate=100000")),
    Case("train --set ema_rule", "ema_rule", train("--set", "ema_rule=swa")),
    Case("train --set schedule", "schedule", train("--set", "schedule=linear")),
    # --- optbench train's environment: a process group's variables (issue 32)
    *(
        Case(f"train {' '.join(f'{k}={v}' for k, v in env.items())}", needle, train(), env=env)
        for env, needle in [
            ({"WORLD_SIZE": "abc", "RANK": "0"}, "environment variable WORLD_SIZE='abc'"),
            ({"WORLD_SIZE": "0", "RANK": "0"}, "environment variable WORLD_SIZE='0'"),
            ({"WORLD_SIZE": "2", "RANK": "-1"}, "environment variable RANK='-1'"),
            ({"WORLD_SIZE": "2", "RANK": "2"}, "RANK=2: not below WORLD_SIZE=2"),
            ({"WORLD_SIZE": "2", "RANK": "0", "LOCAL_RANK": "x"}, "LOCAL_RANK='x'"),
            ({"WORLD_SIZE": "2", "RANK": "0", "MASTER_PORT": "http"}, "MASTER_PORT='http'"),
            ({"WORLD_SIZE": "2", "RANK": "0", "MASTER_PORT": "99999"}, "at most 65535"),
            ({"SLURM_STEP_NUM_TASKS": "two"}, "SLURM_STEP_NUM_TASKS='two'"),
            ({"SLURM_STEP_NUM_TASKS": "2", "SLURM_PROCID": "first"}, "SLURM_PROCID='first'"),
            (
                {"SLURM_STEP_NUM_TASKS": "2", "SLURM_PROCID": "0", "SLURM_JOB_ID": "x"},
                "SLURM_JOB_ID",
            ),
        ]
    ),
]


def _set(data: dict, dotted: str, value) -> None:
    *parents, last = dotted.split(".")
    node = data
    for p in parents:
        node = node.setdefault(p, {})
    if value is DELETE:
        del node[last]
    else:
        node[last] = value


def _in_tmp(value, tmp: Path):
    if isinstance(value, str):
        return value.replace("TMP", str(tmp))
    if isinstance(value, dict):
        return {k: _in_tmp(v, tmp) for k, v in value.items()}
    return value


def _tree(root: Path) -> dict:
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            out[str(p.relative_to(root))] = (
                ("link", os.readlink(p))
                if p.is_symlink()
                else None
                if p.is_dir()
                else (p.stat().st_mtime_ns, p.read_bytes())
            )
    return out


def test_the_corpus_is_large_and_its_ids_unique():
    assert len(CASES) >= 60 and len({c.id for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_exits_2_with_one_line_and_writes_nothing(case, tmp_path, monkeypatch, capsys):
    if case.skip:
        pytest.skip(case.skip)
    (tmp_path / "afile").write_bytes(b"\x00 a file, not a folder \xff" * 8)
    (tmp_path / "adir").mkdir()
    study = tmp_path / "study.yaml"
    if case.raw is not None:
        study.write_bytes(case.raw)
    else:
        data = copy.deepcopy(GOOD)
        for key, value in case.study.items():
            _set(data, key, _in_tmp(value, tmp_path))
        study.write_text(yaml.safe_dump(data, allow_unicode=True))
    args = [_in_tmp(a, tmp_path).replace("STUDY", str(study)) for a in case.args]
    for name, value in case.env.items():
        monkeypatch.setenv(name, value)
    before = _tree(tmp_path)
    code, _, err = run_cli(args, tmp_path, monkeypatch, capsys)
    lines = err.strip().splitlines()
    assert code == 2, err
    assert len(lines) == 1, err
    assert lines[0].startswith("error: ") and _in_tmp(case.needle, tmp_path) in lines[0], lines[0]
    assert _tree(tmp_path) == before


def test_the_good_study_of_the_corpus_is_good(tmp_path, monkeypatch, capsys):
    # Each case differs from this one study in one place: it must pass, or the corpus proves
    # nothing.
    (tmp_path / "study.yaml").write_text(yaml.safe_dump(GOOD))
    code, out, err = run_cli(["run", "study.yaml", "--dry-run"], tmp_path, monkeypatch, capsys)
    assert code == 0, err
    assert not (tmp_path / "results").exists()


def test_help_still_shows_and_a_bare_command_shows_it_too(tmp_path, monkeypatch, capsys):
    code, out, err = run_cli(["run", "--help"], tmp_path, monkeypatch, capsys)
    assert code == 0 and "Usage: optbench run" in out and "--dry-run" in out, err
    code, out, err = run_cli([], tmp_path, monkeypatch, capsys)  # click's exit 2, with the help
    assert code == 2 and "Usage: optbench" in out + err and "error" not in err, err


@pytest.mark.parametrize("storage", ["sqlite:///TMP/elsewhere/study.db", "journal:///TMP/j/x.log"])
def test_a_dry_run_and_status_write_nothing_anywhere(storage, tmp_path, monkeypatch, capsys):
    data = copy.deepcopy(GOOD)
    data["storage"] = _in_tmp(storage, tmp_path / "outside")
    (tmp_path / "study.yaml").write_text(yaml.safe_dump(data))
    (tmp_path / "outside").mkdir()
    for command in (["run", "study.yaml", "--dry-run"], ["status", "study.yaml"]):
        code, _, err = run_cli(command, tmp_path, monkeypatch, capsys)
        assert code == 0, err
    assert list((tmp_path / "outside").iterdir()) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["outside", "study.yaml"]
