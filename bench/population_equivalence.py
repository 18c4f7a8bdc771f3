"""Benchmark: does a population member (train/population.py) end where its solo trial ends, in
distribution, on short trainings with augmentation and label smoothing? Not a test.

In float32 a member's numbers leave its solo trial's within a few dozen steps (the batched
kernels round in another order, and training amplifies it; docs/population.md), so over a whole
training the two are compared as distributions, against the seed noise. The design is the mini's
shortest schedule (studies/mini/mini_length.yaml: digits at 16 px, the paper preset with
translate 2, label smoothing 0.1, pycls EMA and precise BN, 4 epochs, batch 64 at ref_batch
2048), ViT_P and ViT_C, with AdamW and SGD, (lr, wd) pairs drawn at random from
studies/mini/mini_edf.yaml's boxes ([good/8, good x 4]), both read from the files. Each cell's
pairs are grouped by 4 in plan order (plan/trials.py's `populations`, as `executor.population:
4` groups them), each group at a training seed of its own; per pair it trains

- the member: the group as one population (run_population), seed s;
- the solo trial: the same config alone (run_trial), seed s;
- the seed twin: the same config alone at seed s + SEED_TWIN, the seed noise.

It prints one JSON line: per panel (model, optimizer) and over all pairs, the member - solo
differences of the final error (points) and the twin - solo differences, each with its mean,
95% t-interval, SD, root mean square, how many are not 0 and the largest; the interval of the
member - solo mean over the populations' means (pairs of a population share their seed); and
their comparison (`equivalence`). `--csv FILE` writes the pairs.

    PYTHONPATH=. nice -n 10 python bench/population_equivalence.py [--pairs 12] [--csv F]
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml
from scipy import stats

from optbench.host import cpu_name

ROOT = Path(__file__).resolve().parents[1]
MINI = ROOT / "studies" / "mini"
MODELS = ("vit_p_w64_16px", "vit_c_w64_16px")
OPTIMIZERS = ("adamw", "sgd")
EPOCHS = 4  # mini_length.yaml's shortest schedule
POPULATION = 4
SEED_TWIN = 500  # the seed twin's offset: no group's seed is another's twin below 500 groups
FIRST_SEED = 1000
# a pair's row: its config, its population, the three trainings' statuses and final errors
ROW = ("model", "optimizer", "lr", "wd", "population", "seed", "statuses", "member", "solo", "twin")


def design(pairs: int, sampler_seed: int, models=MODELS, optimizers=OPTIMIZERS) -> dict:
    """The study (a spec's dict) whose trials are compared: mini_length's data, batch and
    recipe at its shortest schedule, `pairs` random (lr, wd) pairs per cell from mini_edf's
    boxes, one seed (each population gets its own, `groups`)."""
    length = yaml.safe_load((MINI / "mini_length.yaml").read_text())
    edf = yaml.safe_load((MINI / "mini_edf.yaml").read_text())
    assert EPOCHS in length["epochs"], "the mini's 4-epoch schedule"
    return {
        "name": "population_equivalence",
        "dataset": length["dataset"],
        "models": list(models),
        "optimizers": list(optimizers),
        "epochs": EPOCHS,
        "batch_size": length["batch_size"],
        "ref_batch": length["ref_batch"],
        "search": {
            "n_samples": pairs,
            "sampler": "random",
            "seed": sampler_seed,
            "good_values": {m: edf["search"]["good_values"][m] for m in models},
            "good_range": edf["search"]["good_range"],
        },
        "seeds": [0],
        "recipe": length["recipe"],
    }


def groups(study: dict, folder: Path) -> list[list]:
    """The study's trial configs in populations of POPULATION (one cell each, plan order),
    group g at seed FIRST_SEED + g."""
    from optbench.plan.trials import plan, populations
    from optbench.spec.schema import parse_spec

    spec = parse_spec({**study, "output": str(folder)})
    return [
        [t.config.model_copy(update={"seed": FIRST_SEED + g}) for t in group]
        for g, group in enumerate(populations(plan(spec), POPULATION))
    ]


def train(study: dict, folder: Path, written=None) -> list[dict]:
    """Each pair's final errors as a population member, a solo trial and a seed twin;
    `written(row)` is called with each pair's as it ends."""
    from optbench.train.population import run_population
    from optbench.train.run_trial import run_trial

    rows: list[dict] = []
    for g, cfgs in enumerate(groups(study, folder)):
        members = run_population(cfgs, [folder / f"g{g}" / f"m{k}" for k in range(len(cfgs))])
        for k, (cfg, member) in enumerate(zip(cfgs, members, strict=True)):
            solo = run_trial(cfg, folder / f"g{g}" / f"s{k}")
            twin_cfg = cfg.model_copy(update={"seed": cfg.seed + SEED_TWIN})
            twin = run_trial(twin_cfg, folder / f"g{g}" / f"t{k}")
            errors = (member.final_error, solo.final_error, twin.final_error)
            statuses = "/".join(r.status for r in (member, solo, twin))
            values = (cfg.model, cfg.optimizer, cfg.lr, cfg.wd, g, cfg.seed, statuses, *errors)
            rows.append(dict(zip(ROW, values, strict=True)))
            if written:
                written(rows[-1])
    return rows


def described(d: np.ndarray) -> dict:
    """Differences (points): their mean with its 95% t-interval, SD, root mean square, how
    many are not 0, the largest in size."""
    d = np.asarray(d, dtype=float)
    n = d.size
    half = stats.t.ppf(0.975, n - 1) * d.std(ddof=1) / np.sqrt(n) if n > 1 else float("nan")
    return {
        "n": n,
        "mean": round(float(d.mean()), 3),
        "ci95": [round(float(d.mean() - half), 3), round(float(d.mean() + half), 3)],
        "sd": round(float(d.std(ddof=1)), 3) if n > 1 else None,
        "rms": round(float(np.sqrt(np.mean(d**2))), 3),
        "nonzero": int(np.count_nonzero(np.abs(d) > 1e-9)),
        "max_abs": round(float(np.abs(d).max()), 3),
    }


def equivalence(member_minus_solo, twin_minus_solo, population=None) -> dict:
    """The member - solo differences against the seed noise (twin - solo, the same pairs).
    sigma: one trial's seed SD (the twins' root mean square difference / sqrt 2). The member -
    solo mean and its interval in sigmas, and in the twins' standard errors (their root mean
    square / sqrt n: how far a mean of n twin differences strays from 0). The ratio of the two
    root mean squares (1: a member is as far from its solo trial as another seed's trial is)
    and `farther_p`, the F test's chance of a ratio this large were a member as far as a twin
    (one-sided). The signed-rank test's p of the nonzero member - solo differences (median 0).
    `population`: each pair's population, for the mean's interval over the populations' means
    as well (a population's pairs share their seed)."""
    d, s = np.asarray(member_minus_solo, float), np.asarray(twin_minus_solo, float)
    sigma = float(np.sqrt(np.mean(s**2) / 2))
    twin_se = float(np.sqrt(np.mean(s**2) / d.size))
    pop, twin = described(d), described(s)
    f = float(np.mean(d**2) / np.mean(s**2))
    nonzero = d[np.abs(d) > 1e-9]
    out = {
        "member_minus_solo": pop,
        "twin_minus_solo": twin,
        "seed_sd": round(sigma, 3),
        "mean_in_seed_sd": round(pop["mean"] / sigma, 3),
        "ci95_in_seed_sd": [round(c / sigma, 3) for c in pop["ci95"]],
        "mean_in_twin_se": round(float(d.mean()) / twin_se, 3),
        "rms_ratio": round(float(np.sqrt(f)), 3),
        "farther_p": round(float(stats.f.sf(f, d.size, s.size)), 4),
        "signed_rank_p": round(float(stats.wilcoxon(nonzero).pvalue), 4) if nonzero.size else 1.0,
    }
    if population is not None and len(set(population)) > 1:
        means = [d[np.asarray(population) == g].mean() for g in sorted(set(population))]
        out["ci95_over_populations"] = described(means)["ci95"]
    return out


def summary(rows: list[dict]) -> dict:
    def compared(rs: list[dict]) -> dict:
        d = [r["member"] - r["solo"] for r in rs]
        s = [r["twin"] - r["solo"] for r in rs]
        return equivalence(d, s, [r["population"] for r in rs])

    panels = {}
    for r in rows:
        panels.setdefault(f"{r['model']}/{r['optimizer']}", []).append(r)
    return {"all": compared(rows), "panels": {k: compared(v) for k, v in panels.items()}}


def main() -> None:
    import torch

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pairs", type=int, default=12, help="(lr, wd) pairs per cell")
    p.add_argument("--sampler-seed", type=int, default=0)
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--optimizers", default=",".join(OPTIMIZERS))
    p.add_argument("--csv", type=Path, help="write the pairs' errors here")
    p.add_argument("--threads", type=int, default=1, help="torch's threads (a local worker's)")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    study = design(
        args.pairs, args.sampler_seed, args.models.split(","), args.optimizers.split(",")
    )
    load_before = os.getloadavg()
    t0, wall0 = os.times(), time.perf_counter()
    with contextlib.ExitStack() as stack:
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        written = None
        if args.csv:  # each pair as it ends: a run stopped early keeps what it trained
            out = stack.enter_context(args.csv.open("w", newline=""))
            writer = csv.DictWriter(out, fieldnames=ROW)
            writer.writeheader()

            def written(row: dict) -> None:
                writer.writerow(row)
                out.flush()

        rows = train(study, folder, written)
    t1 = os.times()
    print(
        json.dumps(
            {
                "bench": "population_equivalence",
                "cpu": cpu_name(),
                "cpu_capability": torch.backends.cpu.get_cpu_capability(),
                "torch": torch.__version__,
                "design": {
                    "models": study["models"],
                    "optimizers": study["optimizers"],
                    "epochs": EPOCHS,
                    "pairs_per_cell": args.pairs,
                    "population": POPULATION,
                    "sampler_seed": args.sampler_seed,
                },
                "threads": args.threads,
                "statuses": sorted({r["statuses"] for r in rows}),
                "load_before": [round(v, 2) for v in load_before],
                "load_after": [round(v, 2) for v in os.getloadavg()],
                "wall_s": round(time.perf_counter() - wall0, 1),
                "user_sys_s": round(t1.user + t1.system - t0.user - t0.system, 1),
                **summary(rows),
            }
        )
    )


if __name__ == "__main__":
    main()
