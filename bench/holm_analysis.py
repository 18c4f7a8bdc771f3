"""Holm's step-down over a study's panels (decision/sequential.py, issue 67 item 5) on trained data:
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
  ViT_C and ViT_P from one half of the replicates (c#1, p#1) and from the other half (c#2,
  p#2), each a study of the seed-per-pair design (seed_per_sample_studies, "paired"), ranked
  by EDF area: c#1 - c#2 and p#1 - p#2 are exact nulls (copies of one cell: "#"), the four
  ViT_C - ViT_P pairs the real effect.
  Each pair's looks as a look reads them, the six decided by Holm's step-down within the
  ranking and by Bonferroni (alpha / 6 each): the share with a wrong ordering (a null pair
  decided, or ViT_P shown better), the pairs decided (holds, opposite or equivalent: the
  bench's margin of 0.1 EDF area lets a null pair stop), and the mean samples a cell trained
  (until its last pair stopped). `ranking_designs`: four distinct cells, the quickstart's
  ViT_C and ViT_P (c20, p20) beside the mini's (c8, p8: its seed-per-pair trainings cut to 24
  samples), a wrong ordering one against the sign of the pair's mean estimate at 24.
- `rank4` (`python holm_analysis.py rank4 [REPLICATES_FOLDER]`, its own JSON line): rankings
  of four distinct cells with looks past 24 (8, 16, 24, 32, 40: trials_a_40.csv ends at 40),
  ranked by best error (k = BEST_OF_DEFAULT, no margin) and by EDF area (margin 0.1): ViT_C
  and ViT_P at 8 epochs (c8, p8: trials_seed_per_pair_64.csv's first 40 samples, trained as
  the mini ships, a seed per pair) and at 4 epochs (c4, p4: trials_a_40.csv, trained with one
  seed per study and redrawn per sample, so each of its 20 seeds serves 2 of a cell's 40
  samples: a mixed design, not the seed-per-pair one), each cell drawn on its own (per-model
  boxes). `designs`: 200 rankings of c8, p8, c4, p4; `nulls_c` / `nulls_p`: one model's 8-
  and 4-epoch cells, each twice from disjoint halves of the replicates (c8#1, c8#2, c4#1,
  c4#2: two exact nulls, four effects; a 4-epoch seed serves 4 samples of a copy);
  `global_null_<cell>` (best error only): four copies of one cell from disjoint quarters (six
  exact nulls; a 4-epoch seed serves 8 samples of a copy, harder than the design). Per rule
  (`ranking`): wrong orderings with their Monte-Carlo se (the rankings share trainings: read
  it as a lower bound), pairs decided, the share fully ordered, each cell's mean samples and
  their sum against the fixed design's 4 x 40.
- `rank4-seed-per-pair` (`python holm_analysis.py rank4-seed-per-pair [REPLICATES_FOLDER
  [QUICKSTART_CSV]]`, its own JSON line): `rank4`'s figures on four distinct cells that were
  all trained with a seed per pair, at the quickstart's looks (6-24): its ViT_C and ViT_P at
  20 epochs (c20, p20: trials_quickstart_24.csv, or QUICKSTART_CSV, one box for both, drawn
  paired) and the mini's at 8 (c8, p8: trials_seed_per_pair_64.csv's first 24 samples, each
  drawn on its own), ranked by best error and by EDF area; `designs`, `nulls_c` / `nulls_p`
  (c20#1, c20#2, c8#1, c8#2 from disjoint halves; the p's) and, by both, `global_null_<cell>`
  for each of the four cells (four copies from disjoint quarters), SEED_PER_PAIR_RANKINGS
  rankings each; `quickstart_replicates`: how many replicates the quickstart's csv held.
- `simulated_ranking`: rankings of four cells on normal units (`RANKING_MEANS`), Holm within
  the ranking against Bonferroni over its six pairs, 200,000 seeded studies each.
- `simulated`: the same families on normal units (sequential.simulate_family, 200,000 seeded
  studies each, the quickstart's looks, Pocock), with the se known (the theorem's setting) and
  estimated (the rule as a look applies it).

`python bench/holm_analysis.py [rank4 | rank4-seed-per-pair] [REPLICATES_FOLDER]` (default
docs/reference/replicates).
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

from optbench.decision import claims, frames, sequential
from optbench.decision import ranking as ranking_order
from optbench.decision.summary import Options
from optbench.plan.trials import plan
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
                    found[i], _ = sequential.look_outcome(low, high, se, design.margin, k == last)
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


def replicate_parts(trials: pd.DataFrame, parts: int, count: int, kind: str, seed: int) -> list:
    """`count` seed_per_sample_studies of `kind` from each of `parts` disjoint sets of the
    replicates (a fixed permutation, split in order), the i-th set's with seed `seed` + i: the
    copies of a cell that a null ranking sets against each other never share a training."""
    reps = np.array(sorted(set(trials["replicate"])))
    sets = np.array_split(np.random.default_rng(5).permutation(reps), parts)
    return [
        seed_per_sample_studies(trials[trials["replicate"].isin(part)], count, kind, seed + i)
        for i, part in enumerate(sets)
    ]


def ranking_nulls(trials: pd.DataFrame, count: int) -> dict:
    """`count` rankings of c#1, p#1, c#2, p#2 (module docstring, `ranking`), each pair of
    sides from its own half of the replicates."""
    made = replicate_parts(trials, 2, count, "paired", 0)
    return {
        j: pd.concat(
            [_labelled(studies[j], f"c#{i + 1}", f"p#{i + 1}") for i, studies in enumerate(made)]
        )
        for j in range(count)
    }


def ranking_designs(parts: list[tuple[pd.DataFrame, str, str]], count: int) -> dict:
    """`count` rankings of the distinct cells of `parts` (module docstring): each part (its
    trials, seed_per_sample_studies' kind, the tag its ViT_C and ViT_P cells are labelled
    with: "c" + tag, "p" + tag) gives its two cells from one of its studies, drawn with seed
    the part's index."""
    made = [
        seed_per_sample_studies(trials, count, kind, seed)
        for seed, (trials, kind, _) in enumerate(parts)
    ]
    return {
        j: pd.concat(
            [
                _labelled(studies[j], f"c{tag}", f"p{tag}")
                for studies, (_, _, tag) in zip(made, parts, strict=True)
            ]
        )
        for j in range(count)
    }


def null_copies(parts: list[tuple[pd.DataFrame, str]], model: str, copies: int, count: int):
    """`count` rankings of `copies` copies of `model`'s cell from each part ((its trials, its
    tag)), copy i from the i-th of `copies` disjoint sets of the part's replicates
    (`replicate_parts`, each model's samples drawn on their own): labelled "<c|p><tag>#<i>",
    so the pairs of one part's copies are exact nulls and the others the parts' effect."""
    letter = "c" if model == MODELS[1] else "p"
    made = [
        (replicate_parts(trials, copies, count, "unpaired", 10 * k), tag)
        for k, (trials, tag) in enumerate(parts)
    ]
    return {
        j: pd.concat(
            [
                studies[j][studies[j]["model"] == model].assign(model=f"{letter}{tag}#{i + 1}")
                for sets, tag in made
                for i, studies in enumerate(sets)
            ]
        )
        for j in range(count)
    }


def _labelled(study: pd.DataFrame, c: str, p: str) -> pd.DataFrame:
    """A study's ViT_C and ViT_P relabelled as a ranking's cells (no zoo name: no paper panel)."""
    return study.assign(model=study["model"].map({MODELS[1]: c, MODELS[0]: p}))


def _same_cell(a: str, b: str) -> bool:
    """Whether two of a ranking's labels are copies of one cell ("c8#1", "c8#2"): an exact null."""
    return a.split("#")[0] == b.split("#")[0]


def ranking(studies: dict, looks: tuple, by: str = "a") -> dict:
    """Holm within a ranking of the studies' four cells against Bonferroni (module
    docstring). A wrong ordering: a decision on a pair of copies of one cell (`_same_cell`);
    on every other pair, one against the sign of its estimand (the mean estimate over the
    rankings at the last look). Per rule: the share with a wrong ordering, the pairs decided,
    the share whose order is fully decided (every cell's place, decision/ranking.py's
    `places` of the pairs' outcomes), each cell's mean samples (it trains until its last pair
    stops, as the rounds train it) and their sum (the fixed design's: 4 x the last look)."""
    first = next(iter(studies.values()))
    cells = [
        {"model": m, "optimizer": "adamw", "epochs": int(e)}
        for m, e in first[["model", "epochs"]].drop_duplicates().itertuples(index=False)
    ]
    cells.sort(key=lambda c: c["model"])  # ViT_C's cells first
    order = Comparison.model_validate({"name": "order", "kind": "rank", "by": by, "cells": cells})
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
        if _same_cell(better[0], other[0]):
            wrong_if.append(set(sequential.REJECTS))
        else:  # the direction the estimand does not take
            wrong_if.append(set(sequential.REJECTS) - shows_first if estimand > 0 else shows_first)
    # by EDF area the margin of the bench's EDF designs (a pair may stop as "equivalent");
    # by best error none (no trained nulls chose one)
    margin = MARGIN_A if by == "a" else None
    design = sequential.Design(looks, "pocock", margin=margin, panels=len(panels))
    out = {"rankings": len(studies), "looks": list(looks), "by": by, "margin": margin}
    out["estimands"] = estimands
    for name, holm in (("holm", True), ("bonferroni", False)):
        wrong, decided, ordered = [], [], []
        sizes: dict[str, list[int]] = {cell["model"]: [] for cell in cells}
        for j in studies:
            stops = replay_family([(per_pair[p.key], j) for p in panels], design, holm)
            wrong.append(any(o in bad for (o, _), bad in zip(stops, wrong_if, strict=True)))
            decided.append(sum(o in sequential.DECIDED for o, _ in stops))
            ordered.append(fully_ordered(panels, stops))
            for model, trained in cell_samples(panels, stops).items():
                sizes[model].append(trained)
        share = float(np.mean(wrong))
        out[name] = {
            "wrong": round(share, 4),
            "wrong_mc_se": _mc_se(share, len(studies)),
            "pairs_decided": round(float(np.mean(decided)), 3),
            "fully_ordered": round(float(np.mean(ordered)), 3),
            "mean_cell_samples": round(float(np.mean(list(sizes.values()))), 2),
            "cell_samples": round(float(np.sum(np.mean(list(sizes.values()), axis=1))), 1),
            "per_cell": {m: round(float(np.mean(s)), 2) for m, s in sizes.items()},
        }
    out["fixed_cell_samples"] = len(cells) * looks[-1]
    return out


def cell_samples(panels: list, stops: list[tuple[str, int]]) -> dict[str, int]:
    """Each cell's samples when its ranking ends: the size at which the last of its pairs
    stopped (the rounds grow a cell while an open pair reads it, run/rounds.py)."""
    out: dict[str, int] = {}
    for panel, (_, n) in zip(panels, stops, strict=True):
        for model in panel.models:
            out[model] = max(out.get(model, 0), n)
    return out


def fully_ordered(panels: list, stops: list[tuple[str, int]]) -> bool:
    """Whether the pairs' outcomes at their stops decide every cell's place
    (decision/ranking.py's `places` of the pairs' rows, implied pairs included, as the page
    reads them)."""
    table = pd.DataFrame(  # the estimate orders the listing only, not the places
        [
            {"claim": p.claim, "kind": p.kind_name, "cells": p.cells, "verdict": o, "estimate": 0}
            for p, (o, _) in zip(panels, stops, strict=True)
        ]
    )
    return all(p.places[0] == p.places[1] for p in ranking_order.places(table))


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
        out["ranking_nulls"] = ranking(ranking_nulls(quick, RANKINGS), looks)
        mini = _largest(folder, "seed_per_pair")
        if mini is not None:
            cut = mini[mini["sample"] < looks[-1]]
            both = ranking_designs([(quick, "paired", "20"), (cut, "unpaired", "8")], RANKINGS)
            out["ranking_designs"] = ranking(both, looks)
    shipped = _largest(folder, "seed_per_pair")
    if shipped is not None:
        looks = (8, 16, 24, 32, 40, 48, 56, 64)
        sets = []
        for studies in (by_replicate(shipped), swapped_nulls(shipped, MODELS, NULL_SHIFTS)):
            sets.append((studies, looks_of(studies, "a", "samples", list(looks))))
        out["mini_edf_seed_per_pair"] = families(sets[0], sets[1], looks)
    return out


RANK4_LOOKS = (8, 16, 24, 32, 40)  # trials_a_40.csv's 4-epoch cells end at 40 samples
QUICKSTART_LOOKS = (6, 8, 10, 12, 16, 24)  # the quickstart's looks (studies/quickstart.yaml)
# rankings of each kind in `rank4-seed-per-pair`: 14 kinds of 6 looks at about 0.2 CPU seconds
# a look on the 2-core VM (a ranking's six pairs), so 50 each is some 17 CPU minutes
SEED_PER_PAIR_RANKINGS = 50


def four_cells(
    parts: list[tuple[pd.DataFrame, str, str]],
    looks: tuple[int, ...],
    designs: int,
    nulls: dict[str, int],
    global_nulls: dict[str, dict[str, int]],
) -> dict:
    """Rankings of the four distinct cells of two `parts` (ranking_designs' (trials, kind,
    tag)) and their nulls, replayed at `looks` (module docstring, `rank4`): per ranking
    statistic `by` of `nulls` (by -> rankings of each null kind), `designs` rankings of the
    four cells, each model's two copies of both parts' cells (`nulls_<c|p>`) and, for the
    tags `global_nulls[by]` names (tag -> rankings), four copies of that part's cell
    (`global_null_<c|p><tag>`)."""
    distinct = ranking_designs(parts, designs)
    out: dict = {}
    for by, count in nulls.items():
        row = {"designs": ranking(distinct, looks, by)}
        for model in (MODELS[1], MODELS[0]):
            letter = "c" if model == MODELS[1] else "p"
            both = null_copies([(trials, tag) for trials, _, tag in parts], model, 2, count)
            row[f"nulls_{letter}"] = ranking(both, looks, by)
            for trials, _, tag in parts:
                if tag in global_nulls.get(by, {}):  # all six pairs exact nulls
                    alike = null_copies([(trials, tag)], model, 4, global_nulls[by][tag])
                    row[f"global_null_{letter}{tag}"] = ranking(alike, looks, by)
        out[by] = row
    return out


def analyse_rank4(folder: Path) -> dict:
    """Rankings of four distinct cells trained past 24 samples (module docstring, `rank4`)."""
    shipped, short = _largest(folder, "seed_per_pair"), _largest(folder, "a")
    eight = shipped[shipped["sample"] < RANK4_LOOKS[-1]]
    parts = [(eight, "unpaired", "8"), (short, "unpaired", "4")]
    nulls = {"best-error": RANKINGS, "a": RANKINGS // 2}
    global_nulls = {"best-error": {"8": RANKINGS, "4": RANKINGS // 2}}
    return {"bench": "holm-rank4"} | four_cells(parts, RANK4_LOOKS, RANKINGS, nulls, global_nulls)


def analyse_rank4_seed_per_pair(folder: Path, quickstart: Path | None = None) -> dict:
    """Rankings of four distinct cells all trained with a seed per pair, at the quickstart's
    looks (module docstring, `rank4-seed-per-pair`); `quickstart`: the quickstart replicates'
    csv (default the folder's trials_quickstart_24.csv)."""
    quick = pd.read_csv(quickstart) if quickstart else _largest(folder, "quickstart")
    shipped = _largest(folder, "seed_per_pair")
    eight = shipped[shipped["sample"] < QUICKSTART_LOOKS[-1]]
    parts = [(quick, "paired", "20"), (eight, "unpaired", "8")]
    count = SEED_PER_PAIR_RANKINGS
    every = {"20": count, "8": count}
    nulls = {"best-error": count, "a": count}
    out = {
        "bench": "holm-rank4-seed-per-pair",
        "quickstart_replicates": int(quick["replicate"].nunique()),
    }
    return out | four_cells(
        parts, QUICKSTART_LOOKS, count, nulls, {"best-error": every, "a": every}
    )


COMMANDS = {"rank4": analyse_rank4, "rank4-seed-per-pair": analyse_rank4_seed_per_pair}

if __name__ == "__main__":
    command = COMMANDS.get(sys.argv[1]) if sys.argv[1:] else None
    args = [Path(a) for a in sys.argv[2 if command else 1 :]]
    folder = args[0] if args else ROOT / "docs" / "reference" / "replicates"
    print(json.dumps(command(folder, *args[1:]) if command else analyse(folder)))
