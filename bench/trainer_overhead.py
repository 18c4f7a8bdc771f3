"""optbench's training loop against a minimal plain PyTorch loop doing the same work.

Both train the same model on the same device-resident data with the same batch, threads,
optimizer (AdamW, foreach), label-smoothed cross-entropy and a per-step lr: optbench through
`run_trial` (its own images/s counts training steps only, not evaluation), the plain loop with
nothing else. Augmentation and EMA are off on both sides (they are recipe work, not loop
overhead); a second optbench figure with the default recipe's EMA on is printed for reference.
Runs alternate, and each side's figure is its fastest epoch over all `--repeats` runs (timeit's
rule: noise only ever slows an epoch down; on a shared VM whole runs vary by +-5%, more than the
overhead). The median epoch is printed too. `--clock cpu` (the default)
times both sides with this process's CPU time instead of wall time (optbench's loop is made to
read that clock too), which a machine shared with other jobs does not inflate; with one thread
the two agree on an idle machine. The last line is JSON; `ratio` = optbench images/s / plain
images/s (target >= 0.97).

    PYTHONPATH=. python bench/trainer_overhead.py [--threads 1] [--epochs 8] [--repeats 3] [--clock wall]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import tempfile
import time
from pathlib import Path

import timm
import torch
from torch import nn

from optbench import models  # noqa: F401  (registers the quickstart models)
from optbench.data.datasets import load_dataset
from optbench.spec.recipe import Dataset, Recipe
from optbench.train import epoch as epoch_module
from optbench.train.run_trial import run_trial
from optbench.trial.config import TrainConfig
from optbench.trial.results import read_metrics

MODEL, BATCH = "vit_c_w64_16px", 128


def config(epochs: int, ema: bool) -> TrainConfig:
    recipe = Recipe(
        ema=ema,
        report="ema_final" if ema else "raw_final",
        translate=0,
        hflip=False,
        warmup_epochs=1,
    )
    return TrainConfig(
        model=MODEL,
        dataset=Dataset(name="digits", img_size=16),
        optimizer="adamw",
        lr=1e-2,
        wd=0.05,
        epochs=epochs,
        batch_size=BATCH,
        ref_batch=2048,  # the lr as measured before basic stopped scaling (bench/RESULTS.md)
        recipe=recipe,
    )


def optbench_epochs(cfg: TrainConfig) -> list[float]:
    """images/s of each training epoch of `run_trial` (from its metrics.jsonl)."""
    with tempfile.TemporaryDirectory() as out:
        result = run_trial(cfg, Path(out), handle_signals=False)
        assert result.status == "finished", result.message
        return [line["images_per_s"] for line in read_metrics(Path(out))]


class CpuClock:
    """Stands in for the `time` module of optbench's train/epoch.py: perf_counter reads CPU time."""

    perf_counter = staticmethod(time.process_time)


def plain_epochs(cfg: TrainConfig, clock) -> list[float]:
    """The smallest loop that trains the same thing: no schedule object, no EMA, no checks."""
    data = load_dataset(cfg.dataset)
    torch.manual_seed(0)
    model = timm.create_model(MODEL, num_classes=10, in_chans=1, img_size=16)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr_used, weight_decay=cfg.wd, foreach=True)
    criterion = nn.CrossEntropyLoss(label_smoothing=0.1)
    mean, std = data.mean[0] * 255, data.std[0] * 255
    steps_per_epoch = data.num_train // BATCH
    total = cfg.epochs * steps_per_epoch
    per_epoch = []
    for epoch in range(cfg.epochs):
        model.train()
        t0 = clock()
        order = torch.randperm(data.num_train)
        for b in range(steps_per_epoch):
            step = epoch * steps_per_epoch + b
            for group in opt.param_groups:
                group["lr"] = cfg.lr_used * (1 - step / total)
            idx = order[b * BATCH : (b + 1) * BATCH]
            x = (data.train_x[idx].float() - mean) / std
            loss = criterion(model(x), data.train_y[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        per_epoch.append(steps_per_epoch * BATCH / (clock() - t0))
    return per_epoch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--clock", choices=["cpu", "wall"], default="cpu")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    if args.clock == "cpu":
        epoch_module.time = CpuClock  # the clock run_epoch times its epochs with
    cfg, cfg_ema = config(args.epochs, ema=False), config(args.epochs, ema=True)
    plain, ours, ours_ema = [], [], []  # images/s of every epoch of every run
    for _ in range(args.repeats):
        plain += plain_epochs(cfg, clock)
        ours += optbench_epochs(cfg)
        ours_ema += optbench_epochs(cfg_ema)
    line = {
        "bench": "trainer_overhead",
        "machine": f"{platform.node()} {platform.processor() or platform.machine()}",
        "device": "cpu",
        "threads": args.threads,
        "clock": args.clock,
        "model": MODEL,
        "batch": BATCH,
        "epochs": args.epochs,
        "repeats": args.repeats,
        "plain_images_per_s": round(max(plain), 1),
        "optbench_images_per_s": round(max(ours), 1),
        "optbench_with_ema_images_per_s": round(max(ours_ema), 1),
        "median_epoch_images_per_s": {
            "plain": round(statistics.median(plain), 1),
            "optbench": round(statistics.median(ours), 1),
            "optbench_with_ema": round(statistics.median(ours_ema), 1),
        },
        "ratio": round(max(ours) / max(plain), 4),
        "ratio_with_ema": round(max(ours_ema) / max(plain), 4),
        "target": 0.97,
    }
    print(json.dumps(line))


if __name__ == "__main__":
    main()
