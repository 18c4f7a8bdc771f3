"""Pin what a refactor must not change: the weights digest and final error of a handful of short
trainings on the bundled digits, run through the worker's entry point (`run_job`), one thread.
Not a test: a digest repeats only on the same CPU model, library versions and thread count
(docs/faults.md), so the numbers are compared run against run on one machine, before and after
a change (issue 42's moves: bench/RESULTS.md).

The configurations cover each recipe preset (basic, paper, deit), both input pipelines (pil,
tensor) on the digits in memory and as a class folder of PNG files, that folder packed into
WebDataset shards, and a population of 2 (executor.population). Each trains 1 or 2 epochs.

    PYTHONPATH=. python bench/digests.py [--out FILE.json] [--against bench/digests.json]

Prints one JSON object: name -> {status, digest, final_error}, and the versions it ran with;
`--against` adds how many equal those of an earlier run's file (bench/digests.json: before the
moves of issue 42, on the 2-core VM).
"""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from sklearn.datasets import load_digits

from optbench.data.pack import pack_folder
from optbench.spec.recipe import Dataset, Recipe
from optbench.train.run_trial import run_job
from optbench.trial.config import Execution, TrainConfig
from optbench.trial.jobs import PopulationJob, TrialJob

DIGITS = Dataset(name="digits", img_size=16)


def digits_folder(root: Path) -> Path:
    """The first 200 digits as a class folder of 8x8 grayscale PNGs, 160 train / 40 val."""
    digits = load_digits()
    for i, (image, label) in enumerate(zip(digits.images[:200], digits.target[:200], strict=True)):
        split = "train" if i < 160 else "val"
        (root / split / str(label)).mkdir(parents=True, exist_ok=True)
        pixels = (image * 255 / 16).astype(np.uint8)
        Image.fromarray(pixels, "L").convert("RGB").save(root / split / str(label) / f"{i}.png")
    return root


def config(preset: str, dataset: Dataset = DIGITS, **fields) -> TrainConfig:
    base = dict(
        model="vit_p_w64_16px",
        dataset=dataset,
        optimizer="adamw",
        lr=3e-3,
        wd=0.05,
        epochs=1,
        batch_size=64,
        ref_batch=128,
        recipe=Recipe(preset=preset, hflip=False),
    )
    return TrainConfig(**{**base, **fields})


def jobs(scratch: Path) -> list[TrialJob | PopulationJob]:
    """The configurations above, each job keyed by its name, in its own folder under `scratch`."""
    folder = digits_folder(scratch / "folder")
    pack_folder(folder, scratch / "shards", per_shard=50)
    on_folder = Dataset(name="imagefolder", root=folder, img_size=16)
    on_shards = Dataset(name="imagefolder", root=scratch / "shards", img_size=16, layout="wds")
    basic = Recipe(preset="basic", warmup_epochs=0, hflip=False)
    solo = {
        "basic": (config("basic", epochs=2, recipe=basic), "pil"),
        "paper-pil": (config("paper"), "pil"),
        "paper-tensor": (config("paper"), "tensor"),
        "deit-pil": (config("deit", model="dhvt_w64_16px", optimizer="sgd", lr=0.05), "pil"),
        "deit-tensor": (config("deit", model="dhvt_w64_16px", optimizer="sgd", lr=0.05), "tensor"),
        "folder-paper-pil": (config("paper", on_folder, batch_size=16), "pil"),
        "folder-paper-tensor": (config("paper", on_folder, batch_size=16), "tensor"),
        "shards-basic-pil": (config("basic", on_shards, batch_size=16, recipe=basic), "pil"),
        "shards-basic-tensor": (config("basic", on_shards, batch_size=16, recipe=basic), "tensor"),
    }
    out: list[TrialJob | PopulationJob] = [
        TrialJob(name, cfg, scratch / name, Execution(pipeline=pipeline))
        for name, (cfg, pipeline) in solo.items()
    ]
    members = [
        config("basic", model="vit_c_w64_16px", epochs=2, lr=lr, wd=wd, recipe=basic)
        for lr, wd in ((3e-3, 0.05), (1e-3, 0.1))
    ]
    population = Execution(pipeline="pil", population=2)
    out.append(
        PopulationJob(
            tuple(
                TrialJob(f"population-2/{k}", cfg, scratch / f"population-2-{k}", population)
                for k, cfg in enumerate(members)
            )
        )
    )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="also write the JSON here")
    parser.add_argument("--against", type=Path, help="an earlier run's JSON to compare with")
    args = parser.parse_args()
    torch.set_num_threads(1)
    digests: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for job in jobs(Path(tmp)):
            for key, result in zip(job.keys, run_job(job, "cpu"), strict=True):
                digests[key] = {
                    "status": result.status,
                    "digest": result.digest,
                    "final_error": result.final_error,
                }
    report = {
        "digests": digests,
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "cpu": platform.processor() or platform.machine(),
    }
    if args.against:
        before = json.loads(args.against.read_text())["digests"]
        report["equal"] = f"{sum(before.get(k) == v for k, v in digests.items())} of {len(before)}"
    text = json.dumps(report, indent=1, sort_keys=True)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
