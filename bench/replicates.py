"""Replicate bench: do the claims' intervals, verdicts and power advice hold on real replicate
studies? (issue 31; results in bench/RESULTS.md, raw trials in docs/reference/replicates/).

`python bench/replicates.py train OUT` trains the replicate studies (about an hour on 2 cores):
- claim (a): R studies of ViT_P vs ViT_C on digits, AdamW, 40 random (lr, wd) samples each
  (the mini's sample count) in the mini's boxes, one training seed per study; each replicate
  has a fresh sampler seed and a fresh training seed. The first 10 samples of each are exactly
  a 10-sample study with the same seeds (sampling keeps the first n pairs), so the same
  trainings give R replicates at the quickstart's size too. 4 epochs, not the mini's 8, so the
  whole bench fits an hour (stated in RESULTS.md).
- claim (b): ViT_P and ViT_C at their good values, AdamW, 4 and 16 epochs, 3 * R training
  seeds in one study; R disjoint groups of 3 seeds are R replicate 3-seed studies (and disjoint
  pairs, 2-seed studies), each seed trained in all four cells as a study would.
It writes OUT/trials_b.csv, OUT/trials_a_10.csv and OUT/trials_a_40.csv (one row per trial, with
its replicate).

`python bench/replicates.py train-sequential OUT` trains the replicates that calibrate the
sequential rule (issue 45), each design trained once to its largest size so that every look is a
prefix of it (sampling keeps the first n pairs; seeds are added in order):
- shared: the quickstart's training design (ViT_P vs ViT_C, AdamW, 20 epochs, batch 128, one
  (lr, wd) box for both models, so both train the same pairs), R studies of up to 40 samples, in
  stages of 10, 24 and 40 samples so the bench is usable part-way; OUT/trials_shared_<n>.csv.
- per_model: the mini's EDF design with AdamW (8 epochs, each model's box around its own good
  value), R studies of N_SAMPLES_PER_MODEL samples (the mini's maximum then);
  OUT/trials_per_model_48.csv.
- seeds: claim (b)'s design above, seeds 2060 on, so that with trials_b.csv's 60 seeds there are
  R replicates of up to SEEDS_MAX_B seeds; OUT/trials_b_more.csv.

`python bench/replicates.py train-per-model OUT` trains the per-model design as the mini ships it
(issue 53): studies/mini/mini_edf.yaml's AdamW panel with a training seed per (lr, wd) pair
(search.seed_per_sample), R replicates of N_SAMPLES_SEED_PER_PAIR samples, sampler seeds 7000 on;
every look of the sequential design is a prefix of a replicate, so replaying its looks on them
is the study run as designed, and replicate r's cell of one model against replicate r + shift's
of the same model is an exact null trained with a seed per pair.
OUT/trials_seed_per_pair_64.csv (trained to 48 samples first, then on to 64 with the same seeds:
48 decided 17 of 20, bench/RESULTS.md).

`python bench/replicates.py train-quickstart OUT` trains the quickstart's design as it ships
(issue 67 item 9): SHARED with a training seed per (lr, wd) pair, R replicates of 24 pairs (its
last look), sampler seeds 8000 on, no `decide:` so every look is a prefix of a replicate;
OUT/trials_quickstart_24.csv.

`python bench/replicates.py train-chain OUT` trains claim (d)'s replicates (issue 53): the mini's
stem design (studies/mini/mini_stem.yaml: S1, S2 and ViT_P at their good values, AdamW and SGD, 8
epochs) with SEEDS_PER_REPLICATE * R training seeds from 5000 on, in PARTS_SEEDS studies run one
after another so that a part-way run leaves whole replicates; replicate r is seeds
5000 + 6r .. 5005 + 6r, the mini's largest look. ViT_C, which (d)'s chain does not read, is not
trained. OUT/trials_d.csv.

`python bench/replicates.py train-length OUT` trains claim (c)'s replicates (issue 53): the mini's
length design (studies/mini/mini_length.yaml: ViT_P and ViT_C at their good values, AdamW and
SGD, 4, 8 and 16 epochs) with SEEDS_PER_REPLICATE * R training seeds from 6000 on, in PARTS_SEEDS
studies of whole replicates run one after another (replicate r: seeds 6000 + 6r .. 6005 + 6r,
the mini's largest look). OUT/trials_c.csv.

`python bench/replicates.py analyse DIR` reads those files and prints one JSON line: per claim
and study size, the share of replicate intervals covering the estimand, the share of
verdicts agreeing with the pooled verdict, and the gap between the mean predicted power and
the observed share of replicates where the claim holds. The estimand of a claim at a study
size is the mean of the statistic over replicate studies of that size (its expectation under
the design): the statistic's own value depends on the size (a cell's best error is a minimum
over its samples), so no single "true" value serves every size.

`python bench/replicates.py analyse-sequential DIR` reads what train-sequential wrote so far
(with trials_a_40.csv and trials_b.csv beside it) and prints one JSON line: per design and
spending, the share of replicates decided at each outcome, their mean size at the stop, and on
null replicates the share of wrong decisions; each EDF design also as search.seed_per_sample
trains it, studies made of the replicates' trainings with a seed per sample
(bench/sequential_analysis.py; docs/sequential.md).

`python bench/replicates.py analyse-best-error DIR` replays the rule on a declared best-error
comparison (ViT_C expected better at the best of 4 samples) on the same EDF designs' replicates
and their exact nulls, one JSON line (sequential_analysis.analyse_best_error).

`python bench/replicates.py analyse-quickstart DIR` replays the quickstart's rule on
train-quickstart's replicates (DIR/trials_quickstart_24.csv, part-way or whole; or DIR a csv of
the same columns, e.g. trials_shared_24.csv's one-seed replicates) and prints one
JSON line: each replicate's stop and estimates there, the figures over replicates with 95%
bootstrap intervals over replicates, and exact nulls of the same trainings
(bench/quickstart_replicates.py). `analyse-quickstart CSV STUDY` replays another shipped study's
rule instead, e.g. `docs/reference/replicates/trials_seed_per_pair_64.csv mini/mini_edf.yaml`:
the mini's EDF design on its seed-per-pair replicates.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import yaml

R = 20
N_SAMPLES_A = 40  # the mini's EDF study
N_SAMPLES_QUICK = 10  # the quickstart's
EPOCHS_A = 4
LENGTHS_B = [4, 16]
SEEDS_PER_REPLICATE_B = 3
MODELS = ["vit_p_w64_16px", "vit_c_w64_16px"]  # ViT_P, ViT_C (replicates_analysis.py reads them so)
GOOD = {  # studies/mini/mini_edf.yaml (from mini_calibrate)
    "vit_p_w64_16px": {"adamw": {"lr": 0.068, "wd": 0.028}},
    "vit_c_w64_16px": {"adamw": {"lr": 0.13, "wd": 0.023}},
}
RECIPE = {  # studies/mini/mini_edf.yaml's
    "preset": "paper",
    "warmup_epochs": 1,
    "ema_rule": "horizon",
    "precise_bn_images": 512,
    "auto_augment": "none",
    "mixup_alpha": 0.0,
    "cutmix_alpha": 0.0,
    "translate": 2,
    "hflip": False,
}
COLUMNS = ["model", "optimizer", "epochs", "sample", "seed", "lr", "wd", "status"]
COLUMNS += ["final_error", "best_error", "digest"]


def _base(name: str, results: Path) -> dict:
    return {
        "name": name,
        "dataset": {"name": "digits", "img_size": 16},
        "models": MODELS,
        "optimizers": ["adamw"],
        "batch_size": 64,
        "ref_batch": 2048,
        "recipe": RECIPE,
        "output": str(results),
    }


def study_a(replicate: int, results: Path, n_samples: int = N_SAMPLES_A) -> dict:
    spec = _base(f"replicate_a_r{replicate:02d}", results)
    spec["epochs"] = EPOCHS_A
    spec["search"] = {
        "n_samples": n_samples,
        "sampler": "random",
        "seed": 1000 + replicate,  # fresh sampler seed per replicate
        "good_values": GOOD,
        "good_range": [0.125, 4.0],
    }
    spec["seeds"] = [1000 + replicate]  # fresh training seed per replicate
    return spec


def study_b(results: Path) -> dict:
    spec = _base("replicate_b", results)
    spec["epochs"] = LENGTHS_B
    spec["search"] = {"n_samples": 1, "sampler": "good", "good_values": GOOD}
    spec["seeds"] = list(range(2000, 2000 + SEEDS_PER_REPLICATE_B * R))
    return spec


def _run(spec: dict, folder: Path) -> pd.DataFrame:
    from optbench import load_trials

    path = folder / f"{spec['name']}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    # this interpreter's optbench (PYTHONPATH may point at a frozen checkout while main moves on)
    command = [sys.executable, "-m", "optbench", "run", str(path), "--workers", "2"]
    subprocess.run(command, check=True)
    return load_trials(path)[COLUMNS]


def train(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    studies, results = out / "studies", out / "results"
    studies.mkdir(exist_ok=True)
    started = time.time()
    frame = _run(study_b(results), studies)
    frame["replicate"] = (frame["seed"] - 2000) // SEEDS_PER_REPLICATE_B
    frame.to_csv(out / "trials_b.csv", index=False)
    # Every replicate at the quickstart's size first, then grown to the mini's: a study's first
    # n pairs stay when it grows (n_samples is not in the cell id), so the 10-sample replicates
    # are the 40-sample ones' first 10 samples and the bench is usable half-way.
    for n_samples in (N_SAMPLES_QUICK, N_SAMPLES_A):
        parts = []
        for r in range(R):
            part = _run(study_a(r, results, n_samples), studies)
            part.insert(0, "replicate", r)
            parts.append(part)
            pd.concat(parts).to_csv(out / f"trials_a_{n_samples}.csv", index=False)
    print(
        json.dumps({"bench": "replicates-train", "replicates": R, "wall_s": time.time() - started})
    )


# --- the sequential rule's replicates (issue 45) ------------------------------------------------

N_STAGES_SHARED = (10, 24, 40)
EPOCHS_SHARED = 20
SHARED = {  # studies/quickstart.yaml's training design (tests/test_replicates.py keeps them equal)
    "dataset": {"name": "digits", "img_size": 16},
    "models": MODELS,
    "optimizers": ["adamw"],
    "epochs": EPOCHS_SHARED,
    "batch_size": 128,
    "ref_batch": 128,
    "ranges": {"adamw": {"lr": [2.0e-4, 2.0e-2], "wd": [3.0e-3, 0.5]}},
    "recipe": {"warmup_epochs": 2, "label_smoothing": 0.1, "hflip": False, "translate": 2},
}
EPOCHS_PER_MODEL = 8  # studies/mini/mini_edf.yaml's
SEEDS_MAX_B = 6  # claim (b)'s replicates with up to 6 seeds: 20 x 6 = 120 seeds in all
SEEDS_FIRST_MORE_B = 2000 + SEEDS_PER_REPLICATE_B * R  # after trials_b.csv's 60


def study_shared(replicate: int, results: Path, n_samples: int) -> dict:
    spec = {"name": f"replicate_shared_r{replicate:02d}", **SHARED, "output": str(results)}
    spec["search"] = {
        "n_samples": n_samples,
        "sampler": "random",
        "seed": 3000 + replicate,
        "ranges": spec.pop("ranges"),
    }
    spec["seeds"] = [3000 + replicate]
    return spec


N_SAMPLES_PER_MODEL = 48  # the one-seed replicates: the mini's largest look when trained
N_SAMPLES_SEED_PER_PAIR = 64  # studies/mini/mini_edf.yaml's largest look


def study_per_model(replicate: int, results: Path, n_samples: int = N_SAMPLES_PER_MODEL) -> dict:
    spec = study_a(replicate, results, n_samples)
    spec["name"] = f"replicate_per_model_r{replicate:02d}"
    spec["epochs"] = EPOCHS_PER_MODEL
    spec["search"]["seed"] = spec["seeds"][0] = 4000 + replicate
    return spec


def study_per_model_seed_per_pair(
    replicate: int, results: Path, n_samples: int = N_SAMPLES_SEED_PER_PAIR
) -> dict:
    """The mini's EDF design as it ships (studies/mini/mini_edf.yaml's AdamW panel): each
    (lr, wd) pair with a training seed of its own (search.seed_per_sample), a fresh sampler
    seed per replicate, 7000 on (no other replicate used them)."""
    spec = study_per_model(replicate, results, n_samples)
    spec["name"] = f"replicate_seed_per_pair_r{replicate:02d}"
    spec["search"]["seed"] = spec["seeds"][0] = 7000 + replicate
    spec["search"]["seed_per_sample"] = True
    return spec


N_SAMPLES_QUICKSTART = 24  # studies/quickstart.yaml's last look


def study_quickstart(replicate: int, results: Path, n_samples: int = N_SAMPLES_QUICKSTART) -> dict:
    """The quickstart's claim (a) design as it ships (issue 67 item 9): SHARED's training with a
    training seed per (lr, wd) pair (search.seed_per_sample), a fresh sampler seed per
    replicate, 8000 on (no other replicate used them); ViT_P and ViT_C only ((a) reads no other
    model). No `decide:`: every replicate trains to the last look, so each look is a prefix."""
    spec = study_shared(replicate, results, n_samples)
    spec["name"] = f"replicate_quickstart_r{replicate:02d}"
    spec["search"]["seed"] = spec["seeds"][0] = 8000 + replicate
    spec["search"]["seed_per_sample"] = True
    return spec


def study_b_more(results: Path) -> dict:
    spec = study_b(results)
    spec["name"] = "replicate_b_more"
    spec["seeds"] = list(range(SEEDS_FIRST_MORE_B, 2000 + SEEDS_MAX_B * R))
    return spec


def _replicates(out: Path, design: str, make, n_samples: int) -> None:
    """Replicates 0..R-1 of a design, OUT/trials_<design>_<n>.csv rewritten after each; the
    whole replicates an earlier run left in that csv are kept, not trained again (a run stopped
    part-way, or on another machine whose study storage is gone, goes on from its file)."""
    studies, results = out / "studies", out / "results"
    found = out / f"trials_{design}_{n_samples}.csv"
    parts = []
    if found.exists():
        earlier = pd.read_csv(found)
        rows = earlier.groupby("replicate").size()
        # replicates 0, 1, ... while whole (every model at every sample, as replicate 0 has)
        while len(parts) in rows.index and rows[len(parts)] == rows[0]:
            parts.append(earlier[earlier["replicate"] == len(parts)])
    for r in range(len(parts), R):
        part = _run(make(r, results, n_samples), studies)
        part.insert(0, "replicate", r)
        parts.append(part)
        pd.concat(parts).to_csv(found, index=False)


def train_sequential(out: Path) -> None:
    (out / "studies").mkdir(parents=True, exist_ok=True)
    started = time.time()
    for n_samples in N_STAGES_SHARED[:2]:
        _replicates(out, "shared", study_shared, n_samples)
    _replicates(out, "per_model", study_per_model, N_SAMPLES_PER_MODEL)
    _run(study_b_more(out / "results"), out / "studies").to_csv(
        out / "trials_b_more.csv", index=False
    )
    _replicates(out, "shared", study_shared, N_STAGES_SHARED[2])
    wall = time.time() - started
    print(json.dumps({"bench": "replicates-train-sequential", "replicates": R, "wall_s": wall}))


SEEDS_PER_REPLICATE = 6  # claims (c) and (d): mini_length's and mini_stem's looks end at 6
PARTS_SEEDS = 4
CHAIN_D = ["vit_s1_w64_16px", "vit_s2_w64_16px", "vit_p_w64_16px"]  # (d)'s order, S1 -> S2 -> P
GOOD_D = {  # studies/mini/mini_stem.yaml's: S1 and S2 take ViT_C's good values
    "vit_s1_w64_16px": {"adamw": {"lr": 0.13, "wd": 0.023}, "sgd": {"lr": 0.7, "wd": 3.7e-05}},
    "vit_s2_w64_16px": {"adamw": {"lr": 0.13, "wd": 0.023}, "sgd": {"lr": 0.7, "wd": 3.7e-05}},
    "vit_p_w64_16px": {"adamw": {"lr": 0.068, "wd": 0.028}, "sgd": {"lr": 1.8, "wd": 4.5e-06}},
}


def _seeds_study(claim: str, part: int, first_seed: int, results: Path, **grid) -> dict:
    """Part `part` of claim (c)'s or (d)'s replicate studies: one (lr, wd) pair per cell (the
    good values), PARTS_SEEDS parts of SEEDS_PER_REPLICATE * R / PARTS_SEEDS seeds each."""
    per_part = SEEDS_PER_REPLICATE * R // PARTS_SEEDS
    first = first_seed + part * per_part
    spec = _base(f"replicate_{claim}_p{part}", results)
    spec.update(optimizers=["adamw", "sgd"], **grid)
    spec["search"] = {"n_samples": 1, "sampler": "good", "good_values": GOOD_SEEDS[claim]}
    spec["seeds"] = list(range(first, first + per_part))
    return spec


def _train_seeds(out: Path, claim: str, bench: str) -> None:
    """Claim (c)'s or (d)'s parts one after another, OUT/trials_<claim>.csv rewritten after each
    (a part-way run leaves whole replicates; a rerun finds finished parts "nothing to run")."""
    (out / "studies").mkdir(parents=True, exist_ok=True)
    first_seed, grid = SEEDS_DESIGN[claim]
    started, parts = time.time(), []
    for part in range(PARTS_SEEDS):
        spec = _seeds_study(claim, part, first_seed, out / "results", **grid)
        frame = _run(spec, out / "studies")
        frame.insert(0, "replicate", (frame["seed"] - first_seed) // SEEDS_PER_REPLICATE)
        parts.append(frame)
        pd.concat(parts).to_csv(out / f"trials_{claim}.csv", index=False)
    wall = time.time() - started
    print(json.dumps({"bench": bench, "replicates": R, "wall_s": wall}))


# Claim (c)'s replicates: the mini's length design (studies/mini/mini_length.yaml) on ViT_P and
# ViT_C (DHVT: (c) does not read it), AdamW and SGD at 4, 8 and 16 epochs, seeds 6000 on. Not
# trials_b*.csv's AdamW cells: trained on 2026-12-02 by an earlier bench, their weights differ
# from today's (same 4-epoch errors, digests not), so every cell is trained here.
GOOD_C = {  # studies/mini/mini_length.yaml's
    "vit_p_w64_16px": {"adamw": {"lr": 0.068, "wd": 0.028}, "sgd": {"lr": 1.8, "wd": 4.5e-06}},
    "vit_c_w64_16px": {"adamw": {"lr": 0.13, "wd": 0.023}, "sgd": {"lr": 0.7, "wd": 3.7e-05}},
}
GOOD_SEEDS = {"c": GOOD_C, "d": GOOD_D}
SEEDS_DESIGN = {  # claim: (its first seed, its grid beside both optimizers)
    "c": (6000, {"epochs": [4, 8, 16]}),
    "d": (5000, {"models": CHAIN_D, "epochs": 8}),
}


def train_per_model(out: Path) -> None:
    """The per-model design trained as it ships, a seed per pair (issue 53): R replicates to
    its last look, every look a prefix (sampling keeps the first n pairs, each pair its seed);
    OUT/trials_seed_per_pair_64.csv, rewritten after each replicate."""
    (out / "studies").mkdir(parents=True, exist_ok=True)
    started = time.time()
    _replicates(out, "seed_per_pair", study_per_model_seed_per_pair, N_SAMPLES_SEED_PER_PAIR)
    wall = time.time() - started
    print(json.dumps({"bench": "replicates-train-per-model", "replicates": R, "wall_s": wall}))


def train_quickstart(out: Path) -> None:
    """The quickstart's design as it ships, a seed per pair, R replicates of 24 pairs;
    OUT/trials_quickstart_24.csv, rewritten after each replicate (a part-way run is usable)."""
    (out / "studies").mkdir(parents=True, exist_ok=True)
    started = time.time()
    _replicates(out, "quickstart", study_quickstart, N_SAMPLES_QUICKSTART)
    wall = time.time() - started
    print(json.dumps({"bench": "replicates-train-quickstart", "replicates": R, "wall_s": wall}))


def train_chain(out: Path) -> None:
    _train_seeds(out, "d", "replicates-train-chain")


def train_length(out: Path) -> None:
    _train_seeds(out, "c", "replicates-train-length")


def main(argv: list[str]) -> int:
    commands = ("train", "train-sequential", "train-per-model", "train-chain", "train-length")
    commands += ("train-quickstart",)
    commands += ("analyse",)
    commands += ("analyse-sequential", "analyse-best-error", "analyse-quickstart")
    # analyse-quickstart alone takes a third word: the shipped study whose rule it replays
    extra = len(argv) == 3 and argv[0] == "analyse-quickstart"
    if (len(argv) != 2 and not extra) or argv[0] not in commands:
        print(__doc__.split("\n\n")[0], file=sys.stderr)
        print(f"usage: python bench/replicates.py {'|'.join(commands)} DIR", file=sys.stderr)
        print("       python bench/replicates.py analyse-quickstart DIR STUDY", file=sys.stderr)
        return 2
    if argv[0] == "train":
        train(Path(argv[1]))
        return 0
    if argv[0] == "train-sequential":
        train_sequential(Path(argv[1]))
        return 0
    if argv[0] == "train-per-model":
        train_per_model(Path(argv[1]))
        return 0
    if argv[0] == "train-quickstart":
        train_quickstart(Path(argv[1]))
        return 0
    if argv[0] == "train-chain":
        train_chain(Path(argv[1]))
        return 0
    if argv[0] == "train-length":
        train_length(Path(argv[1]))
        return 0
    if argv[0] == "analyse-sequential":
        from sequential_analysis import analyse as analyse_sequential  # bench/

        print(json.dumps(analyse_sequential(Path(argv[1]))))
        return 0
    if argv[0] == "analyse-best-error":
        from sequential_analysis import analyse_best_error  # bench/

        print(json.dumps(analyse_best_error(Path(argv[1]))))
        return 0
    if argv[0] == "analyse-quickstart":
        import quickstart_replicates  # bench/

        found = quickstart_replicates.trials_file(Path(argv[1]))
        if not found.exists():
            print(
                f"{found}: no such file (bench/replicates.py train-quickstart writes it)",
                file=sys.stderr,
            )
            return 2
        study = argv[2] if extra else "quickstart.yaml"
        print(json.dumps(quickstart_replicates.analyse(Path(argv[1]), study)))
        return 0
    from replicates_analysis import analyse  # bench/replicates_analysis.py

    print(json.dumps(analyse(Path(argv[1]))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
