"""Holm's step-down over a study's panels (report/sequential.py, issue 67 item 5) on trained data:
one JSON line for bench/RESULTS.md.

- `references`: each committed reference of a sequential study (docs/reference/) replayed by
  the rounds as the driver takes them (run/rounds.py, on the reference's trials.csv, no
  training), each panel's stop against the one the reference recorded under Bonferroni: which
  references a redraw would change.
- `families`: studies of m = 2..4 panels made of the committed replicates
  (docs/reference/replicates/, bench/sequential_analysis.py builds the studies), some panels
  with the real effect (ViT_C against ViT_P) and some exact nulls (one model against itself),
  each panel's looks read as a look reads them (estimate, se, Student's t at its boundary),
  decided by Holm's step-down (sequential.step_down) and by Bonferroni (every panel at alpha /
  m): the family-wise error (any null rejected, or an effect decided against its sign) with
  its Monte-Carlo se, the mean number of panels decided and the mean size at which a panel
  stopped. Two designs: the quickstart's looks (6-24, a shared box) on 400 studies of each kind
  with a seed per pair, and the mini's EDF looks (8-64, per-model boxes) on its 20 replicates
  trained as it ships and the 200 exact nulls swapped from them. Family j uses null studies
  j*n_nulls.. and effect studies j*n_effects.. (mod their count): the studies share trainings,
  so the Monte-Carlo se is smaller than the truth.

- `ranking`: rankings of four cells (issue 69 item 1) made of the quickstart's replicates:
  ViT_C and ViT_P from one half of the replicates (c1, p1) and from the other half (c2, p2),
  each a study of the seed-per-pair design (seed_per_sample_studies, "paired"), ranked by
  EDF area: c1 - c2 and p1 - p2 are exact nulls, the four ViT_C - ViT_P pairs the real effect.
  Each pair's looks as a look reads them, the six decided by Holm's step-down within the
  ranking and by Bonferroni (alpha / 6 each): the share with a wrong ordering (a null pair
  decided, or ViT_P shown better), the pairs decided (holds, opposite or equivalent: the
  bench's margin of 0.1 EDF area lets a null pair stop), and the mean samples a cell trained
  (until its last pair stopped). `ranking_designs`: four distinct cells, the quickstart's
  ViT_C and ViT_P (20 epochs) beside the mini's (8 epochs, its seed-per-pair trainings cut to
  24 samples), a wrong ordering one against the sign of the pair's mean estimate at 24.
- `simulated_ranking`: rankings of four cells on normal units (`RANKING_MEANS`), Holm within
  the ranking against Bonferroni over its six pairs, 200,000 seeded studies each.
- `simulated`: the same families on normal units (sequential.simulate_family, 200,000 seeded
  studies each, the quickstart's looks, Pocock), with the se known (the theorem's setting) and
  estimated (the rule as a look applies it).

`python bench/holm_analysis.py [REPLICATES_FOLDER]` (default docs/reference/replicates).
"""

from __future__ import annotations

import itertools
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from sequential_analysis import (
    MARGIN_A,
    MODELS,
    NULL_SHIFTS,
    SEED_PER_SAMPLE_STUDIES,
    _largest,
    _mc_se,
    by_replicate,
    looks_of,
    seed_per_sample_studies,
    swapped_nulls,
)

from optbench.plan.trials import plan
from optbench.report import claims, frames, sequential
from optbench.report.summary import Options
from optbench.run.rounds import Rounds
from optbench.spec.claim_kinds import comparison_key
from optbench.spec.comparisons import Comparison
from optbench.spec.schema import load_spec

ROOT = Path(__file__).resolve().parents[1]
REFERENCES = {  # reference folder -> its study file
    "quickstart": "quickstart.yaml",
    "lion_claim_a": "lion_claim_a.yaml",
    "lion_vs_adamw": "lion_vs_adamw.yaml",
    "mini/mini_edf": "mini/mini_edf.yaml",
    "mini/mini_length": "mini/mini_length.yaml",
    "mini/mini_stem": "mini/mini_stem.yaml",
}
UNIT_KEYS = ["model", "optimizer", "epochs", "sample", "seed"]
OPTIONS = Options()
RANKINGS = 200  # rankings of four cells built from the quickstart's replicates


def replay_reference(folder: Path, study: Path) -> list[dict]:
    """The reference's panels as the rounds decide them now from its trials, beside the stop
    each recorded."""
    spec = load_spec(study)
    trials = pd.read_csv(folder / "trials.csv")
    recorded = json.loads((folder / "summary.json").read_text()).get("looks", [])
    rounds, planned = Rounds(spec, []), plan(spec)
    units = trials[UNIT_KEYS].astype({"epochs": int, "sample": int, "seed": int})
    while not rounds.finished:
        asked = {
            (t.cell.model, t.cell.optimizer, t.cell.epochs, t.sample, t.seed)
            for t in rounds.asked(planned)
        }
        looks = rounds.look(trials[[tuple(u) in asked for u in units.itertuples(index=False)]])
        if not looks:
            raise RuntimeError(f"{folder}: look {rounds.next_k() + 1} lacks trials")
        rounds.add(looks)
    out = []
    for key, panel in rounds.looks.items():
        then = [look for look in recorded if look["panel"] == key][-1]
        now = panel[-1]
        out.append(
            {
                "panel": key,
                "now": [now.outcome, now.n, round(now.level, 4)],
                "recorded": [then["outcome"], then["n"], round(then["alpha"] / then["panels"], 4)],
                "changed": [now.outcome, now.n] != [then["outcome"], then["n"]],
            }
        )
    return out


UNTRAINED = "untrained"  # a panel's stop where its looks end before it decides


def replay_family(panels: list[tuple[dict, object]], design: sequential.Design, holm: bool):
    """One study of len(panels) panels, each (looks_of's answer, its study's key), decided look
    by look (with the design's margin); returns each panel's (outcome, size) at its stop,
    `UNTRAINED` at the first look its answer lacks (a reference that stopped training it)."""
    stops: dict[int, tuple[str, int]] = {}
    last = len(design.looks) - 1
    for k, n in enumerate(design.looks):

        def take(level, k=k, n=n):
            c = design.boundaries(level if holm else design.panel_alpha)[k]
            found = {}
            for i, (looks, key) in enumerate(panels):
                if i not in stops and (key, n) not in looks:
                    found[i] = UNTRAINED  # a reference trained no further: a lower bound
                elif i not in stops:
                    estimate, se, df, _ = looks[key, n]
                    low, high = sequential.repeated_interval(estimate, se, c, df)
                    found[i] = sequential.outcome(low, high, design.margin, k == last)
            return found

        rejected = sum(outcome in sequential.REJECTS for outcome, _ in stops.values())
        for i, outcome in sequential.step_down(take, design, rejected, lambda x: x).items():
            if outcome != "continue":
                stops[i] = (outcome, n)
    return [stops[i] for i in range(len(panels))]


SHAPES = ((1, 1), (2, 1), (1, 2), (3, 1), (2, 2))  # (panels with the effect, exact nulls)


def families(
    effects: tuple[dict, dict], nulls: tuple[dict, dict], looks: tuple, shapes=SHAPES
) -> dict:
    """The family-wise figures over studies of (n_effects, n_nulls) panels for each of
    `shapes` (module docstring); `effects` and `nulls`: (studies, looks_of's answer)."""
    (effect_studies, effect_looks), (null_studies, null_looks) = effects, nulls
    effect_keys, null_keys = list(effect_studies), list(null_studies)
    out = {}
    for n_effects, n_nulls in shapes:
        m = n_effects + n_nulls
        design = sequential.Design(looks, "pocock", panels=m)
        count = len(null_keys) // n_nulls
        row = {}
        for name, holm in (("holm", True), ("bonferroni", False)):
            wrong, decided, sizes = [], [], []
            for j in range(count):
                chosen = [
                    (effect_looks, effect_keys[(j * n_effects + i) % len(effect_keys)])
                    for i in range(n_effects)
                ] + [(null_looks, null_keys[j * n_nulls + i]) for i in range(n_nulls)]
                stops = replay_family(chosen, design, holm)
                wrong.append(
                    any(o in sequential.REJECTS for o, _ in stops[n_effects:])
                    or any(o.startswith("opposite") for o, _ in stops[:n_effects])
                )
                decided.append(sum(o in sequential.REJECTS for o, _ in stops))
                sizes.extend(n for _, n in stops)
            share = float(np.mean(wrong))
            row[name] = {
                "wrong": round(share, 4),
                "wrong_mc_se": _mc_se(share, count),
                "decided": round(float(np.mean(decided)), 3),
                "mean_size": round(float(np.mean(sizes)), 2),
            }
        out[f"{n_effects}+{n_nulls}"] = {"studies": count} | row
    return out


SIMULATED_FAMILIES = {  # name -> each panel's effect in units' standard deviations
    "global null, m=2": [0.0, 0.0],
    "1 effect + 1 null": [1.0, 0.0],
    "2 effects + 1 null": [1.0, 1.0, 0.0],
    "1 effect + 2 nulls": [1.0, 0.0, 0.0],
    "3 effects + 1 null": [1.0, 1.0, 1.0, 0.0],
    "3 moderate effects": [0.4, 0.4, 0.4],
    "4 moderate effects": [0.4, 0.4, 0.4, 0.4],
}


def _figures(found: sequential.SimulatedFamily) -> dict:
    """A simulated family's figures: its wrong share and Monte-Carlo se, the panels decided
    (holds or opposite), a panel's and a cell's mean size at its stop."""
    return {
        "wrong": round(found.wrong, 4),
        "wrong_mc_se": round(found.wrong_se, 4),
        "decided": round(found.rejected, 3),
        "mean_size": round(found.units, 2),
        "mean_cell_samples": round(found.cell_units, 2),
    }


def simulated(paths: int = 200_000) -> dict:
    """Holm against Bonferroni on normal units (module docstring)."""
    out = {}
    for name, effects in SIMULATED_FAMILIES.items():
        design = sequential.Design((6, 8, 10, 12, 16, 24), "pocock", panels=len(effects))
        row = {}
        for se in ("known", "estimated"):
            for rule, recycle in (("holm", True), ("bonferroni", False)):
                found = sequential.simulate_family(
                    design, effects, paths, seed=1, known_se=se == "known", recycle=recycle
                )
                row[f"{rule}_{se}_se"] = _figures(found)
        out[name] = row
    return out


def ranking_nulls(trials: pd.DataFrame, count: int) -> dict:
    """`count` rankings of c1, p1, c2, p2 (module docstring, `ranking`), each pair of sides
    from its own half of the replicates."""
    reps = np.array(sorted(set(trials["replicate"])))
    halves = np.array_split(np.random.default_rng(5).permutation(reps), 2)
    made = [
        seed_per_sample_studies(trials[trials["replicate"].isin(half)], count, "paired", seed)
        for seed, half in enumerate(halves)
    ]
    return {
        j: pd.concat(
            [_labelled(studies[j], f"c{i + 1}", f"p{i + 1}") for i, studies in enumerate(made)]
        )
        for j in range(count)
    }


def ranking_designs(quick: pd.DataFrame, mini: pd.DataFrame, count: int) -> dict:
    """`count` rankings of four distinct cells (module docstring, `ranking_designs`): the
    quickstart's ViT_C and ViT_P at 20 epochs (a shared box, paired) and the mini's at 8
    (boxes of their own), each design's pair from one of its seed-per-pair studies."""
    made = [
        seed_per_sample_studies(quick, count, "paired", 0),
        seed_per_sample_studies(
            mini[mini["sample"] < quick["sample"].max() + 1], count, "unpaired", 1
        ),
    ]
    return {
        j: pd.concat(
            [
                _labelled(studies[j], f"c{ep}", f"p{ep}")
                for studies, ep in zip(made, (20, 8), strict=True)
            ]
        )
        for j in range(count)
    }


def _labelled(study: pd.DataFrame, c: str, p: str) -> pd.DataFrame:
    """A study's ViT_C and ViT_P relabelled as a ranking's cells (no zoo name: no paper panel)."""
    return study.assign(model=study["model"].map({MODELS[1]: c, MODELS[0]: p}))


def ranking(studies: dict, looks: tuple, nulls: bool) -> dict:
    """Holm within a ranking of the studies' four cells against Bonferroni (module
    docstring). A wrong ordering: with `nulls`, a decision on a pair of one model (c1 - c2,
    p1 - p2); on every other pair, one against the sign of its estimand (the mean estimate
    over the rankings at the last look)."""
    first = next(iter(studies.values()))
    cells = [
        {"model": m, "optimizer": "adamw", "epochs": int(e)}
        for m, e in first[["model", "epochs"]].drop_duplicates().itertuples(index=False)
    ]
    cells.sort(key=lambda c: c["model"])  # ViT_C's cells first
    order = Comparison(name="order", kind="rank", by="a", cells=cells)
    panels = order.panels()
    per_pair: dict[str, dict] = {panel.key: {} for panel in panels}
    for j, frame in studies.items():
        for n in looks:
            table = claims.claims_table(
                frames.with_errors(frame[frame["sample"] < n]),
                OPTIONS,
                "ranking",
                1.0,
                comparisons=(order,),
            )
            for row in table[table["claim"] == "order"].itertuples():
                key = comparison_key(row.claim, row.cells)
                per_pair[key][j, n] = (float(row.estimate), float(row.se), n - 1, row.design)
    shows_first = {"holds", sequential.HOLDS_NEGLIGIBLE}
    wrong_if, estimands = [], {}
    for panel in panels:
        (better,), (other,) = panel.sides
        estimand = float(np.mean([per_pair[panel.key][j, looks[-1]][0] for j in studies]))
        estimands[f"{better[0]}-{other[0]}"] = round(estimand, 4)
        if nulls and better[0][0] == other[0][0]:
            wrong_if.append(set(sequential.REJECTS))
        else:  # the direction the estimand does not take
            wrong_if.append(set(sequential.REJECTS) - shows_first if estimand > 0 else shows_first)
    # the margin of the bench's EDF designs: a pair may stop as "equivalent"
    design = sequential.Design(looks, "pocock", margin=MARGIN_A, panels=len(panels))
    out = {"rankings": len(studies), "looks": list(looks), "margin": MARGIN_A}
    out["estimands"] = estimands
    for name, holm in (("holm", True), ("bonferroni", False)):
        wrong, decided, sizes = [], [], []
        for j in studies:
            stops = replay_family([(per_pair[p.key], j) for p in panels], design, holm)
            wrong.append(any(o in bad for (o, _), bad in zip(stops, wrong_if, strict=True)))
            decided.append(sum(o in sequential.DECIDED for o, _ in stops))
            for cell in cells:  # a cell trains until its last pair stops
                reading = [
                    n for p, (_, n) in zip(panels, stops, strict=True) if cell["model"] in p.models
                ]
                sizes.append(max(reading))
        share = float(np.mean(wrong))
        out[name] = {
            "wrong": round(share, 4),
            "wrong_mc_se": _mc_se(share, len(studies)),
            "pairs_decided": round(float(np.mean(decided)), 3),
            "mean_cell_samples": round(float(np.mean(sizes)), 2),
        }
    return out


RANKING_MEANS = {  # four cells' means in units' standard deviations (a pair's unit: sqrt 2)
    "null": [0.0, 0.0, 0.0, 0.0],
    "two ties": [0.8, 0.8, 0.0, 0.0],
    "one apart": [1.0, 0.0, 0.0, 0.0],
    "steps of 1": [3.0, 2.0, 1.0, 0.0],
    "steps of 1.5": [4.5, 3.0, 1.5, 0.0],
}


def simulated_ranking(paths: int = 200_000) -> dict:
    """Rankings of four cells on normal units (sequential.simulate_family with a ranking's
    contrasts, paired by sample), quickstart's looks: Holm within the ranking against its
    six pairs at alpha / 6 each, the se estimated."""
    pairs = list(itertools.combinations(range(4), 2))
    contrasts = np.zeros((len(pairs), 4))
    for row, (i, j) in enumerate(pairs):
        contrasts[row, i], contrasts[row, j] = 1, -1
    design = sequential.Design((6, 8, 10, 12, 16, 24), "pocock", panels=len(pairs))
    out = {}
    for name, means in RANKING_MEANS.items():
        row = {}
        for rule, recycle in (("holm", True), ("bonferroni", False)):
            found = sequential.simulate_family(
                design, means, paths, seed=2, recycle=recycle, contrasts=contrasts
            )
            row[rule] = _figures(found)
        out[name] = row
    return out


def analyse(folder: Path) -> dict:
    out: dict = {"bench": "holm", "simulated": simulated(), "simulated_ranking": {}}
    out["simulated_ranking"] = simulated_ranking()
    out["references"] = {}
    for ref, study in REFERENCES.items():
        out["references"][ref] = replay_reference(
            ROOT / "docs" / "reference" / ref, ROOT / "studies" / study
        )
    quick = _largest(folder, "shared")
    if quick is not None:
        looks = (6, 8, 10, 12, 16, 24)
        sets = []
        for kind, seed in (("paired", 0), ("null", 1)):
            studies = seed_per_sample_studies(quick, SEED_PER_SAMPLE_STUDIES, kind, seed)
            sets.append((studies, looks_of(studies, "a", "samples", list(looks))))
        out["quickstart_seed_per_pair"] = families(sets[0], sets[1], looks)
        out["ranking_nulls"] = ranking(ranking_nulls(quick, RANKINGS), looks, nulls=True)
        mini = _largest(folder, "seed_per_pair")
        if mini is not None:
            both = ranking_designs(quick, mini, RANKINGS)
            out["ranking_designs"] = ranking(both, looks, nulls=False)
    shipped = _largest(folder, "seed_per_pair")
    if shipped is not None:
        looks = (8, 16, 24, 32, 40, 48, 56, 64)
        sets = []
        for studies in (by_replicate(shipped), swapped_nulls(shipped, MODELS, NULL_SHIFTS)):
            sets.append((studies, looks_of(studies, "a", "samples", list(looks))))
        out["mini_edf_seed_per_pair"] = families(sets[0], sets[1], looks)
    return out


if __name__ == "__main__":
    folder = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "docs" / "reference" / "replicates"
    print(json.dumps(analyse(folder)))
