"""The sequential rule (optbench.decision.sequential) on real replicate studies: each replicate
was trained once to its largest size, and sampling keeps the first n pairs (seeds are added in
order), so look k of a sequential study is the replicate's prefix of n_k samples (seeds). For
each design this replays every replicate's looks exactly as the driver makes them (the report's
claims_table at the look's boundary) and stops at the first decision.

Definitions, per design:
- estimand at n: the mean over replicates of the fixed-size estimate at n (the statistic of (a)
  depends on n through each cell's best, so no single true value serves every size).
- decided: the share of replicates that stopped with holds, opposite or equivalent; wrong: the
  share whose decision contradicts the estimand at its stopping size (holds or opposite on the
  estimand's other side, or equivalent where |estimand| >= margin; for a null design any holds
  or opposite), with its Monte-Carlo standard error sqrt(p (1 - p) / R).
- coverage: the share of replicates whose repeated confidence interval at the stopping look
  covers the estimand at that size.
- used: the mean and 90th percentile of the samples (seeds) each replicate trained per cell.
- fixed designs: the share of replicates whose fixed-size 95% interval (the report's) shows the
  claim on the estimand's side at n, beside n (their cost).
"""

from __future__ import annotations

import math
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pandas as pd

from optbench.decision import claims, frames, sequential
from optbench.decision.summary import Options
from optbench.run import rounds
from optbench.spec.claim_kinds import KINDS
from optbench.spec.comparisons import Comparison
from optbench.spec.schema import load_spec

OPTIONS = Options()


def _claim_row(
    frame: pd.DataFrame, claim: str, boundary: float | None, comparisons: tuple = ()
) -> dict:
    """The claims table's row of `claim`: a claim of the paper, or the name of one of the
    declared `comparisons` (spec/comparisons.py), as a study's report or look computes it."""
    table = claims.claims_table(
        frames.with_errors(frame), OPTIONS, "replicate", boundary, comparisons=comparisons
    )
    rows = table[table["claim"] == claim]
    assert len(rows) == 1, rows
    return rows.iloc[0].to_dict()


def _prefix(frame: pd.DataFrame, unit: str, n: int) -> pd.DataFrame:
    """What look n of a replicate reads, as a driver's look reads it (rounds._prefix): its first
    n samples, or the trials of its first n seeds (a replicate's seeds in order)."""
    return rounds._prefix(frame, unit, n, sorted(set(frame["seed"])))


def looks_of(
    replicates: dict, claim: str, unit: str, sizes: list[int], comparisons: tuple = ()
) -> dict:
    """(estimate, se, df) of every replicate at every size: what each look reads (a look's
    interval is sequential.repeated_interval(estimate, se, c, df), so one pass serves every
    boundary)."""
    out = {}
    for r, frame in replicates.items():
        for n in sizes:
            row = _claim_row(_prefix(frame, unit, n), claim, 1.0, comparisons)
            df = n - 1  # Student's t at the look's level, as claims_table's looks (either unit)
            out[r, n] = (float(row["estimate"]), float(row["se"]), df, row["design"])
    return out


def _size(frame: pd.DataFrame, unit: str) -> int:
    return int(frame["sample"].max()) + 1 if unit == "samples" else frame["seed"].nunique()


def replay(looks: dict, r, design: sequential.Design) -> dict:
    """One replicate's sequential study: its looks until the first decision, or "continue" at
    the last look its replicate was trained for (`looks` has no later size)."""
    bounds = design.boundaries()
    for k, (n, c) in enumerate(zip(design.looks, bounds, strict=True)):
        estimate, se, df, _ = looks[r, n]
        low, high = sequential.repeated_interval(estimate, se, c, df)
        # the one rule a look is taken by (decision/claims.py), its "nothing learned" stop included
        found, _ = sequential.look_outcome(
            low, high, se, design.margin, last=k == len(design.looks) - 1
        )
        next_trained = k + 1 < len(design.looks) and (r, design.looks[k + 1]) in looks
        if found != "continue" or not next_trained:
            return {"outcome": found, "n": n, "estimate": estimate, "low": low, "high": high}
    raise AssertionError("the last look always decides or is undecided")


def _wrong(outcome: str, estimand: float, margin: float | None, null: bool) -> bool:
    if null:
        return outcome in ("holds", "opposite")
    if outcome == "holds":
        return estimand <= 0
    if outcome == "opposite":
        return estimand >= 0
    if outcome == "equivalent":
        return margin is None or abs(estimand) >= margin
    return False


def trained_looks(replicates: dict, unit: str, looks: tuple[int, ...]) -> list[int]:
    """The looks that the replicates were trained far enough for."""
    largest = max(_size(frame, unit) for frame in replicates.values())
    return [n for n in looks if n <= largest]


def evaluate(
    replicates: dict,
    claim: str,
    unit: str,
    design: sequential.Design,
    *,
    null: bool = False,
    looks: dict | None = None,
    pooled: float | None = None,
) -> dict:
    """The design's figures over the replicates (module docstring); `looks` is looks_of's
    answer when the caller already has it (designs that differ only in spending share it).
    With `pooled` (one value of the statistic for every size, e.g. over all the replicates'
    samples together), `against_pooled` gives the wrong share and the coverage against it as
    well, each with its Monte-Carlo error."""
    trained = trained_looks(replicates, unit, design.looks)
    if looks is None:
        looks = looks_of(replicates, claim, unit, trained)
    estimand = {n: float(np.mean([looks[r, n][0] for r in replicates])) for n in trained}
    runs = [replay(looks, r, design) for r in replicates]
    R = len(runs)
    outcomes = [run["outcome"] for run in runs]
    wrong = [_wrong(run["outcome"], estimand[run["n"]], design.margin, null) for run in runs]
    used = np.array([run["n"] for run in runs], dtype=float)
    decided = float(np.mean([o in sequential.DECIDED for o in outcomes]))
    share_wrong = float(np.mean(wrong))
    against_pooled = {}
    if pooled is not None:
        wrong_p = np.mean([_wrong(run["outcome"], pooled, design.margin, null) for run in runs])
        covered_p = np.mean([run["low"] <= pooled <= run["high"] for run in runs])
        against_pooled = {
            "against_pooled": {
                "pooled": round(pooled, 4),
                "wrong": round(float(wrong_p), 3),
                "wrong_mc_se": _mc_se(wrong_p, R),
                "coverage": round(float(covered_p), 3),
                "coverage_mc_se": _mc_se(covered_p, R),
            }
        }
    return {
        "design": asdict(design) | {"boundaries": [round(c, 3) for c in design.boundaries()]},
        "replicates": R,
        "pairing": sorted({looks[r, design.looks[0]][3] for r in replicates}),
        "estimand": {n: round(v, 4) for n, v in estimand.items()},
        "outcomes": {o: outcomes.count(o) for o in sequential.OUTCOMES if o in outcomes},
        "decided": round(decided, 3),
        "wrong": round(share_wrong, 3),
        "wrong_mc_se": _mc_se(share_wrong, R),
        "coverage": round(
            float(np.mean([run["low"] <= estimand[run["n"]] <= run["high"] for run in runs])),
            3,
        ),
        f"mean_{unit}": round(float(used.mean()), 2),
        f"p90_{unit}": float(np.percentile(used, 90, method="inverted_cdf")),
    } | against_pooled


def _mc_se(share: float, count: int) -> float:
    """The Monte-Carlo standard error of a share of `count` studies, sqrt(p (1 - p) / count)."""
    return round(math.sqrt(share * (1 - share) / count), 3)


def fixed_designs(replicates: dict, claim: str, unit: str, sizes: list[int]) -> dict:
    """The share of replicates whose fixed-size 95% interval (the report's) shows the claim
    on the side of the estimand at n, per n (its cost: n per cell)."""
    out = {}
    for n in sizes:
        rows = [_claim_row(_prefix(f, unit, n), claim, None) for f in replicates.values()]
        estimand = np.mean([row["estimate"] for row in rows])
        side = "holds" if estimand > 0 else "opposite"
        out[n] = {
            "estimand": round(float(estimand), 4),
            "shown": round(float(np.mean([row["verdict"] == side for row in rows])), 3),
            "coverage": round(
                float(np.mean([row["low"] <= estimand <= row["high"] for row in rows])), 3
            ),
        }
    return out


def by_replicate(trials: pd.DataFrame) -> dict:
    return {int(r): frame for r, frame in trials.groupby("replicate")}


def swapped_nulls(trials: pd.DataFrame, models: tuple[str, str], shifts: int) -> dict:
    """Exact nulls from real trainings: replicate r's cell of one model against replicate
    (r + shift) mod R's cell of the same model relabelled as the other, for shift 1..`shifts`
    (both the same model, so every estimand is 0 by symmetry; different sampler seeds, so
    unpaired). Each replicate's cell appears 2 x `shifts` times: the studies are not
    independent, so their share is read with that in mind."""
    p, c = models
    reps = sorted(set(trials["replicate"]))
    out = {}
    for model in models:
        cells = {r: trials[(trials["replicate"] == r) & (trials["model"] == model)] for r in reps}
        for shift in range(1, shifts + 1):
            for i, a in enumerate(reps):
                b = reps[(i + shift) % len(reps)]
                out[f"{model}:{a}-{b}"] = pd.concat(
                    [cells[a].assign(model=p), cells[b].assign(model=c)]
                )
    return out


def seed_per_sample_studies(trials: pd.DataFrame, count: int, kind: str, seed: int = 0) -> dict:
    """`count` studies of the search.seed_per_sample design made of real trainings: sample k of
    a study is sample k of a replicate drawn for it (each replicate has its own sampler and
    training seed, so the samples are independent draws of a pair and a seed, as that design
    draws them), each replicate at most ceil(n / R) times per model. `kind`:
    - "paired": both models' trials of the drawn replicate (one box, one seed per pair);
    - "unpaired": a replicate drawn for each model on its own (boxes of their own);
    - "null": one model against itself, each side from its own half of the replicates
      (estimand 0 by symmetry; a seed is used up to 2 n / R times per side, more than the
      design's once, so this null is harder than the design's own).
    The studies share trials, so they are not independent: their shares are read with that in
    mind. The report pools a sample's seeds, so the seed column is set to 0 here."""
    rng = np.random.default_rng(seed)
    index = trials.set_index(["replicate", "model", "sample"]).sort_index()
    reps = np.array(sorted(set(trials["replicate"])))
    n = int(trials["sample"].max()) + 1

    def draw(pool: np.ndarray) -> np.ndarray:
        repeats = -(-n // len(pool))
        return rng.permutation(np.concatenate([rng.permutation(pool)] * repeats)[:n])

    def cell(model: str, drawn: np.ndarray, label: str) -> pd.DataFrame:
        rows = index.loc[[(r, model, k) for k, r in enumerate(drawn)]].reset_index()
        return rows.assign(model=label, sample=np.arange(n), seed=0)

    p, c = MODELS
    out = {}
    for j in range(count):
        if kind == "paired":
            drawn = draw(reps)
            out[j] = pd.concat([cell(p, drawn, p), cell(c, drawn, c)])
        elif kind == "unpaired":
            out[j] = pd.concat([cell(p, draw(reps), p), cell(c, draw(reps), c)])
        else:
            model, halves = MODELS[j % 2], np.array_split(rng.permutation(reps), 2)
            out[j] = pd.concat([cell(model, draw(halves[0]), p), cell(model, draw(halves[1]), c)])
    return out


# --- the bench's designs (issue 45): what bench/RESULTS.md reports -------------------------------

MODELS = ("vit_p_w64_16px", "vit_c_w64_16px")  # ViT_P, ViT_C: bench/replicates.py's MODELS
NULL_SHIFTS = 5  # swapped nulls: 2 models x 20 replicates x 5 shifts = 200 studies
SEED_PER_SAMPLE_STUDIES = 400  # studies of the seed_per_sample design per kind
PER_MODEL_LOOKS = (8, 16, 24, 32, 40, 48)  # the mini's EDF design until its maximum was 64
NULL_LOOKS = (8, 16, 24, 32, 40)  # the 4-epoch null replicates were trained to 40
SEED_LOOKS = (3, 4, 6)  # claim (b) adding seeds (studies/mini/mini_length.yaml)
MARGIN_A = 0.1  # EDF area: "equivalent" inside +-0.1


def _designs(
    looks: tuple[int, ...], margin: float | None, panels: int = 1
) -> list[sequential.Design]:
    return [
        sequential.Design(looks, spending, margin=margin, panels=panels)
        for spending in sequential.SPENDING
    ]


def _largest(folder, stem: str) -> pd.DataFrame | None:
    """The largest stage of a design's replicates trained so far (trials_<stem>_<n>.csv)."""
    found = sorted(folder.glob(f"trials_{stem}_*.csv"), key=lambda p: int(p.stem.split("_")[-1]))
    return pd.read_csv(found[-1]) if found else None


def _seed_replicates(folder, seeds_per: int) -> dict:
    """Claim (b)'s replicates of `seeds_per` seeds each: trials_b.csv's seeds then
    trials_b_more.csv's, in order, cut into disjoint groups."""
    parts = [folder / "trials_b.csv", folder / "trials_b_more.csv"]
    found = [pd.read_csv(p) for p in parts if p.exists()]
    if not found:  # a folder of other designs' trials (e.g. train-per-model's alone)
        return {}
    trials = pd.concat(found)
    seeds = sorted(set(trials["seed"]))
    groups = {s: i // seeds_per for i, s in enumerate(seeds)}
    trials = trials.assign(replicate=trials["seed"].map(groups))
    full = len(seeds) // seeds_per
    return {r: f for r, f in trials.groupby("replicate") if r < full}


def _sequential(
    studies: dict,
    looks: tuple[int, ...],
    null: bool = False,
    claim: str = "a",
    panels: int = 1,
    comparisons: tuple = (),
    pooled: float | None = None,
) -> list[dict]:
    """Every spending's figures for one set of looks, alpha split over `panels` as a study
    deciding that many panels splits it; each look is computed once. `claim` is a paper's
    claim or the name of one of the declared `comparisons` (no margin: none is declared)."""
    kind = {c.name: c.kind for c in comparisons}.get(claim, claim)
    unit = KINDS[kind].unit
    margin = MARGIN_A if claim == "a" else None
    computed = looks_of(studies, claim, unit, trained_looks(studies, unit, looks), comparisons)
    return [
        evaluate(studies, claim, unit, d, null=null, looks=computed, pooled=pooled)
        for d in _designs(looks, margin, panels)
    ]


STUDIES = Path(__file__).resolve().parents[1] / "studies"


def shipped_design(study: str) -> sequential.Design:
    """A shipped study's design as it ships (its looks and its alpha split over its panels),
    read from the study file under studies/: "quickstart.yaml" (the shared box, paired) or
    "mini/mini_edf.yaml" (per-model boxes, the paper EDF studies' looks)."""
    return rounds.design(load_spec(STUDIES / study))


CHAIN_LOOKS = (3, 4, 6)  # claims (c) and (d) adding seeds (mini_length.yaml, mini_stem.yaml)
SEEDS_PANELS = {"c": 3, "d": 2}  # the panels over which those studies split alpha: (b) x 2 + (c)


def seeds_replicates(folder, claim: str) -> dict:
    """Claim (c)'s or (d)'s replicates (bench/replicates.py train-length, train-chain):
    trials_c.csv's or trials_d.csv's whole replicates of CHAIN_LOOKS[-1] seeds each."""
    path = folder / f"trials_{claim}.csv"
    if not path.exists():
        return {}
    trials = pd.read_csv(path)
    sizes = trials.groupby("replicate")["seed"].nunique()
    return {int(r): f for r, f in trials.groupby("replicate") if sizes[r] == CHAIN_LOOKS[-1]}


def _panel_rows(frame: pd.DataFrame, claim: str, boundary: float | None, last: bool = False):
    """The claim's row of each panel (its optimizer, or "sgd - adamw" for (c)), as a look
    (boundary) or a fixed-size report (None) reads them."""
    results = frames.with_errors(frame)
    table = claims.claims_table(results, OPTIONS, "replicate", boundary, None, last)
    return {row["optimizer"]: row for _, row in table[table["claim"] == claim].iterrows()}


def _intervals(row) -> dict:
    """{name: (estimate, low, high)}: a chain's steps, or the row's one interval."""
    steps = row.get("steps")
    if isinstance(steps, list) and steps:
        return {s["step"]: (s["estimate"], s["low"], s["high"]) for s in steps}
    return {"estimate": (row["estimate"], row["low"], row["high"])}


def seeds_evaluate(replicates: dict, design: sequential.Design, claim: str = "d") -> dict:
    """Claim (c)'s or (d)'s design replayed on its replicates, per panel: each replicate's
    looks (the report's claims_table at the look's boundary: one rule) until the first
    decision. wrong: a decision against the pooled estimate (over all the replicates' seeds;
    for a chain every pooled step: "holds" wrong unless every one is above 0, "opposite"
    unless every one is below); coverage: every interval at the stop (each step's, for a
    chain) covers its pooled value."""
    pooled = _panel_rows(pd.concat(replicates.values()), claim, None)
    bounds = design.boundaries()
    out = {}
    for panel, whole in pooled.items():
        truth = {name: est for name, (est, _, _) in _intervals(whole).items()}
        runs = []
        for frame in replicates.values():
            for k, (n, c) in enumerate(zip(design.looks, bounds, strict=True)):
                last = k == len(design.looks) - 1
                row = _panel_rows(_prefix(frame, "seeds", n), claim, c, last)[panel]
                if row["verdict"] != "continue":
                    break
            runs.append((row, n))
        outcomes = [row["verdict"] for row, _ in runs]
        wrong = [
            (o == "holds" and min(truth.values()) <= 0)
            or (o == "opposite" and max(truth.values()) >= 0)
            for o in outcomes
        ]
        covered = [
            all(low <= truth[name] <= high for name, (_, low, high) in _intervals(row).items())
            for row, _ in runs
        ]
        R = len(runs)
        share_wrong = float(np.mean(wrong))
        out[panel] = {
            "pooled": {name: round(v, 2) for name, v in truth.items()},
            "pooled_seeds": int(whole["n_now"]),
            "outcomes": {o: outcomes.count(o) for o in sorted(set(outcomes))},
            "decided": round(float(np.mean([o in sequential.DECIDED for o in outcomes])), 3),
            "wrong": round(share_wrong, 3),
            "wrong_mc_se": _mc_se(share_wrong, R),
            "coverage": round(float(np.mean(covered)), 3),
            "mean_seeds": round(float(np.mean([n for _, n in runs])), 2),
        }
    return {
        "design": asdict(design) | {"boundaries": [round(c, 3) for c in bounds]},
        "replicates": len(replicates),
        "panels": out,
    }


def analyse(folder) -> dict:
    """The JSON line of bench/RESULTS.md's sequential section, from what is trained so far:
    each design as trained (one training seed per study) and as search.seed_per_sample would
    train it (seed_per_sample_studies), the "_seed_per_sample" keys."""
    out: dict = {"bench": "replicates-sequential"}
    for name, design_looks, pairing in (
        ("shared", shipped_design("quickstart.yaml").looks, "paired"),
        ("per_model", PER_MODEL_LOOKS, "unpaired"),
    ):
        trials = _largest(folder, name)
        if trials is None:
            continue
        reps = by_replicate(trials)  # a design's looks beyond the trained size: "continue"
        out[name] = _sequential(reps, design_looks)
        out[f"{name}_fixed"] = fixed_designs(
            reps, "a", "samples", trained_looks(reps, "samples", (10, 24, 40, 48))
        )
        many = seed_per_sample_studies(trials, SEED_PER_SAMPLE_STUDIES, pairing)
        out[f"{name}_seed_per_sample"] = _sequential(many, design_looks)
    # the per-model design as the mini ships it, a seed per pair (train-per-model), its alpha
    # split as the mini's study splits it, with its looks and with the earlier maximum of 48
    # (why the maximum is 64); and exact nulls from those same trainings
    shipped = _largest(folder, "seed_per_pair")
    if shipped is not None:
        reps, nulls = by_replicate(shipped), swapped_nulls(shipped, MODELS, NULL_SHIFTS)
        mini = shipped_design("mini/mini_edf.yaml")
        for key, looks in (("", mini.looks), ("_to_48", PER_MODEL_LOOKS)):
            out[f"per_model_seed_per_pair{key}"] = _sequential(reps, looks, panels=mini.panels)
            out[f"null_seed_per_pair{key}"] = _sequential(
                nulls, looks, null=True, panels=mini.panels
            )
    null = _largest(folder, "a")  # the 4-epoch design of issue 31: estimand near 0
    if null is not None:
        out["null_4_epochs"] = _sequential(by_replicate(null), NULL_LOOKS, null=True)
        swapped = swapped_nulls(null, MODELS, NULL_SHIFTS)
        out["null_swapped"] = _sequential(swapped, NULL_LOOKS, null=True)
        many = seed_per_sample_studies(null, SEED_PER_SAMPLE_STUDIES, "null")
        out["null_seed_per_sample"] = _sequential(many, NULL_LOOKS, null=True)
    seeds = _seed_replicates(folder, SEED_LOOKS[-1])
    if seeds:
        out["seeds_b"] = _sequential(seeds, SEED_LOOKS, claim="b")
    for claim, key in (("c", "length_c"), ("d", "chain_d")):  # the mini's length and stem designs
        reps = seeds_replicates(folder, claim)
        if reps:
            design = sequential.Design(CHAIN_LOOKS, "pocock", panels=SEEDS_PANELS[claim])
            out[key] = seeds_evaluate(reps, design, claim)
    return out


# --- best-error, a declared comparison (spec/comparisons.py), on the same replicates ------------

BEST_ERROR = "best_error"  # the declared comparison's name: its row's `claim`


def best_error_comparison(trials: pd.DataFrame) -> Comparison:
    """ViT_P against ViT_C at the replicates' one optimizer and schedule, ViT_C expected to do
    better (as in claim (a)), k unset: the default a study gets (BEST_OF_DEFAULT). A positive
    estimate: ViT_C's expected best error of k (lr, wd) samples is the lower."""
    ((optimizer, epochs),) = (
        trials[["optimizer", "epochs"]].drop_duplicates().itertuples(index=False)
    )
    sides = [{"model": m, "optimizer": optimizer, "epochs": int(epochs)} for m in MODELS]
    return Comparison(name=BEST_ERROR, kind="best-error", sides=sides, expect="second")


def pooled_estimate(trials: pd.DataFrame, comparison: Comparison) -> float:
    """The comparison's estimate (the claims table's) over every replicate's samples together:
    each (replicate, sample) one sample, its seed set to 0 (the report pools a sample's seeds;
    each replicate has its own), so the expected best reads from 20 times a study's samples of
    the same box: close to the box's own value, which a decision on a shown effect must not
    contradict."""
    per_replicate = int(trials["sample"].max()) + 1
    renumbered = trials.assign(
        sample=trials["replicate"] * per_replicate + trials["sample"], seed=0
    )
    return float(_claim_row(renumbered, comparison.name, 1.0, (comparison,))["estimate"])


def analyse_best_error(folder) -> dict:
    """The JSON line of bench/RESULTS.md's best-error section: the comparison (best of
    BEST_OF_DEFAULT samples, ViT_C expected better) decided by the rule on each EDF design's
    replicates, with the looks (and, both given, each spending) that design's study decides
    claim (a) with, one panel: the quickstart's (shared box, paired) and the mini's EDF study's
    (per-model boxes, unpaired). Its shown effect is read against the pooled estimate
    (pooled_estimate) besides the estimand at each size; its exact nulls are (a)'s two kinds,
    from the same trainings: swapped_nulls (one training seed per study, 200 studies) and
    seed_per_sample_studies' "null" (a seed per pair, 400 studies), pooled value 0 by
    symmetry."""
    out: dict = {"bench": "replicates-best-error"}
    for name, design_looks in (
        ("shared", shipped_design("quickstart.yaml").looks),
        ("per_model", PER_MODEL_LOOKS),
    ):
        trials = _largest(folder, name)
        if trials is None:
            continue
        comparison = (best_error_comparison(trials),)
        common = {"claim": BEST_ERROR, "comparisons": comparison}
        pooled = pooled_estimate(trials, comparison[0])
        out[f"best_error_{name}"] = _sequential(
            by_replicate(trials), design_looks, pooled=pooled, **common
        )
        swapped = swapped_nulls(trials, MODELS, NULL_SHIFTS)
        out[f"best_error_{name}_null_swapped"] = _sequential(
            swapped, design_looks, null=True, pooled=0.0, **common
        )
        many = seed_per_sample_studies(trials, SEED_PER_SAMPLE_STUDIES, "null")
        out[f"best_error_{name}_null_seed_per_sample"] = _sequential(
            many, design_looks, null=True, pooled=0.0, **common
        )
    return out
