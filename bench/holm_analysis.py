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

- `simulated`: the same families on normal units (sequential.simulate_family, 200,000 seeded
  studies each, the quickstart's looks, Pocock), with the se known (the theorem's setting) and
  estimated (the rule as a look applies it).

`python bench/holm_analysis.py [REPLICATES_FOLDER]` (default docs/reference/replicates).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from sequential_analysis import (
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
from optbench.report import sequential
from optbench.run.rounds import Rounds
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


def replay_family(panels: list[tuple[dict, object]], design: sequential.Design, holm: bool):
    """One study of len(panels) panels, each (looks_of's answer, its study's key), decided look
    by look (no margin); returns each panel's (outcome, size) at its stop."""
    stops: dict[int, tuple[str, int]] = {}
    last = len(design.looks) - 1
    for k, n in enumerate(design.looks):

        def take(level, k=k, n=n):
            c = design.boundaries(level if holm else design.panel_alpha)[k]
            found = {}
            for i, (looks, key) in enumerate(panels):
                if i not in stops:
                    estimate, se, df, _ = looks[key, n]
                    low, high = sequential.repeated_interval(estimate, se, c, df)
                    found[i] = sequential.outcome(low, high, None, k == last)
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
                row[f"{rule}_{se}_se"] = {
                    "wrong": round(found.wrong, 4),
                    "wrong_mc_se": round(found.wrong_se, 4),
                    "decided": round(found.rejected, 3),
                    "mean_size": round(found.units, 2),
                }
        out[name] = row
    return out


def analyse(folder: Path) -> dict:
    out: dict = {"bench": "holm", "simulated": simulated(), "references": {}}
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
