"""The paper's four optimizability claims, tested on a study's trials: one row per claim and
panel with an estimate, its 95% interval and a verdict (report/claims_page.py puts them into
words).

Xiao et al. (2021) claim that, compared with ViT_P (patchify stem), ViT_C (conv stem):
  (a) has a steeper lr/wd EDF (Figs 4-5),
  (b) is closer to its asymptote at short schedules (Fig 2),
  (c) loses less when SGD replaces AdamW (Fig 3),
and (d) that error grows as the stem's patchify layer grows, S1 -> S4 -> P (Table 3).

Each claim is a kind of spec/claim_kinds.py (its unit, smallest look, the cells it reads, its
words); models take their roles from their zoo names (spec/roles.py): `vit_p_<x>` and
`vit_c_<x>` are a pair, `vit_s<k>_<x>` the stem ablation with a k-th patchify size of the same
family `<x>`. A comparison a study declares on two cells of its own (spec/comparisons.py) is
a row of its kind's statistic under its own name (`claim`; `kind` says which). Here are the
statistics: the EDF kind's below (`_Claims.edf`), the seed kinds'
per-seed contrasts in `SEED_CONTRASTS`.

Definitions (each statistic is defined here once; "error" is the trial's `options.metric`):
- cell: the trials of one (model, optimizer, epochs); a sample is one (lr, wd) pair of it, a
  seed one training seed.
- cell error E(m, opt, ep), for (b)-(d): the cell's error as frames.py defines it (the lowest
  mean over seeds among the cell's samples, a diverged seed counted as DIVERGED_ERROR), here
  over the seeds every cell of the claim has.
- (a) panel (opt, ep) with at least MIN_EDF_SAMPLES samples of both models: A_C - A_P, where
  A = area under the cell's dtop-1 EDF on [0, AUC_MAX_POINTS] divided by AUC_MAX_POINTS
  (summary.json's auc_10: the mean over the cell's trials, every sample and seed, of
  max(0, 1 - dtop1 / 10); a diverged trial adds 0). Positive: ViT_C's EDF is steeper.
- (b) optimizer opt with the same two or more schedule lengths for both models, shortest s and
  longest l: [E(P, s) - E(P, l)] - [E(C, s) - E(C, l)]. Positive: ViT_C is closer to its
  asymptote (the longest schedule) at the shortest schedule.
- (c) each schedule length ep with both optimizers for both models:
  G(m, ep) = E(m, sgd, ep) - E(m, adamw, ep); the statistic is the mean over those lengths of
  G(P, ep) - G(C, ep). Positive: ViT_C's SGD - AdamW gap is smaller.
- (d) panel (opt, ep) with ViT_P and at least one stem ablation of its family, ordered S1, S2,
  ..., P: the smallest step E(next) - E(previous) along that order. Positive: error grows at
  every step. Its verdict reads every step's interval (sequential.direction, the one chain rule
  of the fixed-size verdict and of a look): "holds" when every one lies above 0, "opposite"
  only when every one lies below 0 (error falls at every step); a chain with a step shown down
  and another up is neither, and its `note` names them ("mixed: error falls at S1 -> S2 but
  grows at S2 -> P"); `steps` lists each step's estimate and interval.
- best-error, a declared comparison of two cells (kind of no paper's claim): best_k(other) -
  best_k(better), best_k the expected best error after k random (lr, wd) samples of the cell
  (tunability.expected_best, Dodge et al. 2019) over its sample errors (a sample's error: its
  seeds' mean, a diverged trial counted as tunability.DIVERGED_ERROR), k the comparison's.
  Positive: the side expected to do better reaches a lower error in k samples. Its interval
  and evidence are (a)'s, on the same resampled (lr, wd) samples, paired or not as (a)'s.
- length-stability, a declared comparison of two sides, each a model and optimizer with a short
  and a long schedule: (b)'s contrast with the other side in P's place and the side expected
  to do better in C's (the same function, `SEED_CONTRASTS`).

Intervals of (a): BCa bootstrap (stats.interval: scipy.stats.bootstrap, N_BOOT resamples, 95%),
the percentile interval of the same resamples where BCa degenerates (the row's `interval` says
which), seeded per claim and panel, resampling the panel's (lr, wd) samples, each carrying all
its seeds, as the design drew them (the row's `design`): "paired" where both models trained the
same (lr, wd) at every sample (one box for both, as in the quickstart), so sample i of both is
resampled together and the errors' correlation across models at the same pair is kept;
"unpaired" where their boxes differ (a box per model around its good value, as in the mini's EDF
study), each model's samples resampled on its own (there sample i is only the same relative
position in two boxes, and resampling it together covered too rarely on replicate studies,
bench/RESULTS.md).
Intervals of (b)-(d), the seed claims: every cell is reduced to one vector of per-seed errors
(its sample with the lowest mean over the seeds that every cell has; under `sampler: good` its
only sample), seed s of every cell gives one value of the claim's contrast, and the interval is
Student's t on those k values (stats.t_interval): a bootstrap of 2 or 3 seeds has 3 or 10
distinct means, and on real replicate studies its 2-seed intervals were a fifth of Welch's
width and covered in 22 of 30 (bench/RESULTS.md, replicates). (d)'s contrast
is a chain of steps: each step gets its t interval; the row shows the smallest step's estimate
and [smallest low, smallest high]. Below MIN_SEEDS seeds a seed claim gets no interval and no
power: the verdict is "not tested" and the evidence says how many seeds it needs.
Verdict: "holds" when the interval lies above 0 (for (d): every step's), "opposite" when it
lies below 0 (for (d): every step's), "not shown" otherwise; "not tested" (at a look: "nothing
learned", a stop) where the cells learned nothing (one has no finished trial, every result
diverged: its error is a placeholder; or every one's best finished error is near chance,
summary.near_chance with the `classes` given) or the contrast carries no information (sequential.no_information: se 0, every
resample gives one value; at a look, an se below a share of the margin), the row's `note`
saying which. (a) also states the whole curve:
`curve_verdict` reads the simultaneous 95% band (bootstrap of the maximum deviation,
stats.sup_band) of D(x) = F_C(x) - F_P(x) on [0, AUC_MAX_POINTS]: "holds" when the band lies
above 0 somewhere and below 0 nowhere (ViT_C's EDF is above ViT_P's somewhere and below it
nowhere, at once for every x), "opposite" the mirror, "crossing" both, "not shown" neither.

At a look of a sequential study (`claims_table(..., boundary=c)`, decision/sequential.py) each
row's interval is instead the repeated confidence interval of that look at c's nominal level
with Student's t (sequential.critical, the "significance level approach"): (a) estimate +-
t_{n-1}(c) se, n the samples per cell (se: the standard deviation of the same bootstrap
replicates; with z instead of t these intervals covered 17 of 20 replicate studies of the
quickstart's design, with t 20 of 20: docs/sequential.md), (b)-(d) each step's t interval; the
row's verdict is the look's outcome (sequential.outcome, with the design's margin); a look
computes neither the power nor the curve verdict (decision/looks.py: a look's record and the
rows at a study's last looks).

Evidence (`advice`): how many units of what the row resamples ((a): (lr, wd) samples per cell,
each with the study's seeds; (b)-(d): seeds) a study would need so that its 95% interval shows
the claim with probability POWER_TARGET if the effect is as estimated, up to MAX_SAMPLES samples
or MAX_SEEDS seeds: bootstrap power for (a) (stats.power), a normal model of the per-seed
contrasts for (b)-(d) (stats.seed_power).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pandas as pd

from optbench.decision import frames, sequential, stats, tunability
from optbench.decision.edf import AUC_MAX_POINTS
from optbench.decision.summary import MAX_SAMPLES, Options, advice_line, chance_error, near_chance
from optbench.spec.claim_kinds import KINDS, MIN_SEEDS, Panel, panels
from optbench.spec.comparisons import Comparison, declared_words
from optbench.spec.roles import role_name

MAX_SEEDS = 32
CURVE_STEPS = 200  # D(x) of claim (a)'s curve statement on this many steps of [0, 10]

COLUMNS = [
    "claim",  # its name: a-d, or a declared comparison's (spec/comparisons.py)
    "kind",  # its kind (spec/claim_kinds.py): the name, for (a)-(d)
    "paper",
    "study",
    "optimizer",
    "epochs",
    "models",
    "statistic",
    "best_of",  # a best-error comparison's k (its measure's words); None for every other kind
    "estimate",
    "low",
    "high",
    "verdict",
    "note",
    "trials",
    "diverged",
    "cells",
    "interval",
    "curve_verdict",
    "unit",
    "design",
    "se",
    "n_now",
    "power_now",
    "n_needed",
    "advice",
    "steps",
]


def verdict(lows, highs) -> str:
    """The fixed-size verdict of a claim's step intervals (one step, or every step of a chain):
    "holds" or "opposite" as sequential.direction (the same rule as a look's), else "not
    shown"."""
    shown = sequential.direction(lows, highs)
    return shown if shown in ("holds", "opposite") else "not shown"


NOT_TESTED = "not tested"


def curve_verdict(low: np.ndarray, high: np.ndarray) -> str:
    """Claim (a) as a statement about whole curves, from a simultaneous band [low, high] of
    F_C - F_P (module docstring)."""
    above, below = bool((low > 0).any()), bool((high < 0).any())
    if above and below:
        return "crossing"
    return "holds" if above else "opposite" if below else "not shown"


def _auc(trials: np.ndarray) -> np.ndarray:
    """auc_10 over the last axis of an error array (+inf = diverged)."""
    with np.errstate(invalid="ignore"):
        dtop = trials - trials.min(axis=-1, keepdims=True)
    dtop = np.where(np.isfinite(trials.min(axis=-1, keepdims=True)), dtop, np.inf)
    return np.clip(1.0 - dtop / AUC_MAX_POINTS, 0.0, 1.0).mean(axis=-1)


# --- the claims ----------------------------------------------------------------------------------


class _Claims:
    """Builds the table's rows for one study's results (with `error`, +inf for diverged)."""

    def __init__(
        self,
        results: pd.DataFrame,
        options: Options,
        study: str,
        boundary: float | None,
        margin: float | None = None,
        last: bool = False,
        classes: int | None = None,
    ) -> None:
        self.results = results
        self.options = options
        self.study = study
        self.boundary = boundary  # a sequential look's z boundary (module docstring), or None
        self.margin, self.last = margin, last  # the look's, for its outcome
        self.classes = classes  # the dataset's, for the near-chance check; None: unknown
        self.rows: list[dict] = []
        self._cells: dict[tuple[str, str, int], pd.DataFrame] = {}

    def cell(self, model: str, optimizer: str, epochs: int) -> pd.DataFrame:
        """The results of one cell, selected once per table (a panel reads its cells several
        times; the selection was a fifth of a look's time). Read, never changed."""
        key = (model, optimizer, epochs)
        if key not in self._cells:
            r = self.results
            keep = (r["model"] == model) & (r["optimizer"] == optimizer) & (r["epochs"] == epochs)
            self._cells[key] = r[keep]
        return self._cells[key]

    def seed_errors(self, cells: list[tuple[str, str, int]]) -> tuple[int, list[np.ndarray]]:
        """The seeds that every cell has (k) and, per cell, the errors of those seeds (k,) at
        the cell's sample with the lowest mean over them (module docstring); a diverged seed is
        DIVERGED_ERROR. No vectors when a cell has no result; k = 0 and empty vectors when a
        cell has no sample with all the seeds the cells share."""
        wides = [frames.seed_frame(self.cell(*cell), frames.DIVERGED_ERROR) for cell in cells]
        seeds = sorted(set.intersection(*(set(w.columns) for w in wides)))
        matrices = [wide[seeds].dropna().to_numpy(float) for wide in wides]
        if any(m.size == 0 for m in matrices):  # a cell without a sample of all those seeds
            # with results in every cell (search.seed_per_sample: each sample its own seeds),
            # a row that says why it is not tested
            return 0, [np.empty(0) for _ in wides] if all(len(w) for w in wides) else []
        return len(seeds), [m[np.argmin(m.mean(axis=1))] for m in matrices]

    def learned_nothing(self, cells, relative: bool) -> str | None:
        """Why the cells carry nothing to decide from: one of them has no finished trial (every
        result diverged: its error is a placeholder, not a measurement), or they are near chance
        (a best finished error within NEAR_CHANCE_POINTS of guessing's among the dataset's
        `classes`, summary.near_chance). Which cells near chance void a comparison depends on its
        statistic: one that reads each cell against its own best (`relative`: the EDF of dtop-1,
        claim (a)'s kind) is voided by any of them, since a cell that never learned has errors
        all close to its own best and so the steepest EDF, the opposite of what it means; one
        that reads errors themselves is voided only when every cell is near chance, as one cell
        at chance beside one that learned is a measured difference (one trains, the other does
        not). None if the cells learned something."""
        best = {}
        for model, optimizer, epochs in cells:
            cell = self.cell(model, optimizer, epochs)
            finished = cell["status"] == "finished"
            where = f"{model} {optimizer} {epochs} ep"
            if not finished.any():
                return f"{where} has no finished trial ({len(cell)} diverged): no decision from it"
            best[where] = float(cell.loc[finished, "error"].min())
        at_chance = [where for where, error in best.items() if near_chance(error, self.classes)]
        if not at_chance:  # also where the classes are unknown (no check)
            return None
        guessing = f"guessing {chance_error(self.classes):.3g}% with {self.classes} classes"
        if len(at_chance) == len(best):
            errors = list(best.values())
            return (
                f"every cell is near chance (best errors {min(errors):.3g}% to "
                f"{max(errors):.3g}%, {guessing}): nothing learned, no decision"
            )
        if relative:
            return (
                f"{at_chance[0]} is near chance (best error {best[at_chance[0]]:.3g}%, "
                f"{guessing}): its dtop-1 reads nothing learned as steep, no decision from it"
            )
        return None

    def decide(self, row: dict, lows, highs, ses, steps: list[str] | None = None) -> dict:
        """The row's verdict from its step intervals (one step, or a chain's every step) and
        why it decides nothing where it does not (`note`): a cell that learned nothing
        (`learned_nothing`), intervals that carry no information (sequential.no_information),
        a chain shown both ways. At a look the verdict is the look's outcome
        (sequential.look_outcome, the rule its reader checks too), else the fixed-size verdict
        ("not tested" where nothing was learned); both read sequential.direction."""
        lows, highs, ses = (np.atleast_1d(np.asarray(x, float)) for x in (lows, highs, ses))
        nothing = self.learned_nothing(row["cells"], KINDS[row["kind"]].reads == "edf")
        margin = self.margin if self.boundary is not None else None
        if nothing is None:
            nothing = sequential.no_information(lows, ses, margin)
        mixed = None
        if nothing is None and steps and sequential.direction(lows, highs) == "mixed":
            shown = [
                f"{'falls' if h < 0 else 'grows'} at {step} ([{lo:+.3g}, {h:+.3g}])"
                for step, lo, h in zip(steps, lows, highs, strict=True)
                if lo > 0 or h < 0
            ]
            mixed = "mixed: error " + " but ".join(shown)
        if self.boundary is not None:
            found, note = sequential.look_outcome(
                lows, highs, ses, self.margin, self.last, nothing, mixed
            )
            return {"verdict": found, "note": note}
        found = NOT_TESTED if nothing is not None else verdict(lows, highs)
        return {"verdict": found, "note": nothing or mixed}

    def row(self, panel: Panel) -> dict:
        """What every row of one claim and panel says besides its statistics."""
        subset = pd.concat([self.cell(*c) for c in panel.cells])
        models = panel.models
        if panel.declared:
            paper = declared_words(panel)
        else:
            paper = panel.kind.paper.format(chain=" -> ".join(map(role_name, models)))
        return {
            "claim": panel.claim,
            "kind": panel.kind.name,
            "paper": paper,
            "study": self.study,
            "optimizer": panel.optimizer,
            "epochs": panel.epochs,
            "models": panel.model_words,
            "statistic": panel.statistic,
            "best_of": panel.best_of,
            "trials": int(len(subset)),
            "diverged": int((subset["status"] == "diverged").sum()),
            "cells": [[m, o, int(e)] for m, o, e in panel.cells],
            "steps": None,
            "note": None,
        }

    def advice(self, decided: dict, power_of, shown: bool, n: int, unit: str) -> tuple:
        """A row's power now, the size that would likely show it and its advice line: for a
        fixed-size verdict from `power_of()` (its bootstrap power, `advice_line`; `shown`: the
        verdict showed the claim or its opposite), a verdict with nothing tested its note, a
        look's row none (the looks say what comes next)."""
        if self.boundary is not None:
            return None, None, None
        if decided["verdict"] == NOT_TESTED:
            return None, None, decided["note"]
        power = power_of()
        most = MAX_SAMPLES if unit == "samples" else MAX_SEEDS
        now = power.power[0] if power.power else None
        return now, power.needed, advice_line(power, shown, n, unit, most)

    def add_samples(self, panel: Panel, statistic, sizes, curve) -> None:
        """A samples kind's row (claim (a), a best-error comparison): the statistic of
        resampled (lr, wd) samples (`sizes`: (n,) paired, (n, n) unpaired), its BCa interval,
        verdict and bootstrap power; at a look, its repeated confidence interval (module
        docstring)."""
        n = sizes[0]
        seed = self.options.rng_seed("claims", panel.kind.name, panel.optimizer, panel.epochs)
        found = stats.interval(statistic, sizes, n_boot=self.options.n_boot, seed=seed)
        low, high = found.low, found.high
        method = found.method
        if self.boundary is not None:  # Student's t at the boundary's level: a noisy se
            df = min(sizes) - 1
            low, high = sequential.repeated_interval(found.estimate, found.se, self.boundary, df)
            method = "t"
        row = self.row(panel)
        decided = self.decide(row, low, high, found.se)
        power_now, n_needed, advice = self.advice(
            decided,
            lambda: stats.power(statistic, sizes, MAX_SAMPLES, seed=seed),
            found.low > 0 or found.high < 0,
            n,
            "samples",
        )
        self.rows.append(
            row
            | decided
            | {
                "estimate": found.estimate,
                "low": low,
                "high": high,
                "interval": method,
                "curve_verdict": curve,
                "unit": "samples",
                "design": "paired" if len(sizes) == 1 else "unpaired",
                "se": found.se,
                "n_now": n,
                "power_now": power_now,
                "n_needed": n_needed,
                "advice": advice,
            }
        )

    def add_seeds(self, panel: Panel, contrasts, k: int) -> None:
        """One seed claim's row from its per-seed contrasts (steps, k): per step a t interval;
        the smallest step's estimate and [smallest low, smallest high]; no interval and no
        power below MIN_SEEDS seeds (module docstring)."""
        row = self.row(panel) | {
            "curve_verdict": None,
            "unit": "seeds",
            "design": "paired",  # seed s of every cell gives one contrast
            "n_now": k,
        }
        if k < MIN_SEEDS:
            estimate = float(np.min(np.mean(contrasts, axis=-1))) if k else float("nan")
            advice = f"too few seeds ({k}): needs at least {MIN_SEEDS} for an interval"
            if k == 0:  # e.g. search.seed_per_sample: each cell's best sample has its own seeds
                advice = (
                    "its cells share no seeds at one sample (search.seed_per_sample gives each "
                    "sample its own): a seed claim compares the same seeds"
                )
            self.rows.append(
                row
                | {"estimate": estimate, "low": np.nan, "high": np.nan, "verdict": NOT_TESTED}
                | {"interval": None, "se": np.nan, "power_now": None, "n_needed": None}
                | {"advice": advice}
            )
            return
        # a look's interval: estimate +- sequential.critical(c, k - 1) se, as claim (a)'s
        critical = None if self.boundary is None else sequential.critical(self.boundary, k - 1)
        steps = [stats.t_interval(step, critical=critical) for step in np.atleast_2d(contrasts)]
        smallest = min(steps, key=lambda i: i.estimate)
        low, high = min(i.low for i in steps), min(i.high for i in steps)
        names = None
        if panel.kind.chain:
            chain = list(map(role_name, panel.models))
            names = [f"{a} -> {b}" for a, b in zip(chain, chain[1:], strict=False)]
            row["steps"] = [
                {"step": name, "estimate": i.estimate, "low": i.low, "high": i.high, "se": i.se}
                for name, i in zip(names, steps, strict=True)
            ]
        decided = self.decide(
            row, [i.low for i in steps], [i.high for i in steps], [i.se for i in steps], names
        )
        seed = self.options.rng_seed("claims", panel.claim, panel.optimizer, panel.epochs)
        power_now, n_needed, advice = self.advice(
            decided,
            lambda: stats.seed_power(contrasts, MAX_SEEDS, seed=seed),
            decided["verdict"] != "not shown",
            k,
            "seeds",
        )
        self.rows.append(
            row
            | decided
            | {
                "estimate": smallest.estimate,
                "low": low,
                "high": high,
                "interval": "t",
                "se": smallest.se,
                "power_now": power_now,
                "n_needed": n_needed,
                "advice": advice,
            }
        )

    def shared_samples(self, panel: Panel, diverged_as: float):
        """The (samples x seeds) errors of a two-cell samples panel's cells (P then C for (a):
        the other side, then the one expected to do better) at the samples both have, the
        resampling `sizes` ((n,) paired, (n, n) unpaired: module docstring) and whether
        paired; None with fewer samples than the kind's smallest look."""
        (ids_p, m_p), (ids_c, m_c) = (
            frames.sample_matrix(self.cell(*c), diverged_as) for c in panel.cells
        )
        shared = np.intersect1d(ids_p, ids_c)
        if shared.size < panel.kind.smallest_look:
            return None
        m_p, m_c = m_p[np.isin(ids_p, shared)], m_c[np.isin(ids_c, shared)]
        paired = frames.same_pairs([self.cell(*c) for c in panel.cells], shared)
        sizes = (shared.size,) if paired else (shared.size, shared.size)
        return m_p, m_c, sizes, paired

    def edf(self, panel: Panel) -> None:
        found = self.shared_samples(panel, np.inf)
        if found is None:
            return
        m_p, m_c, sizes, paired = found

        def area_diff(idx_p, idx_c=None, m_p=m_p, m_c=m_c):
            idx_c = idx_p if idx_c is None else idx_c  # paired: one index for both
            return _auc(frames.pooled(m_c, idx_c)) - _auc(frames.pooled(m_p, idx_p))

        curve = None
        if self.boundary is None:
            curve = self.curve(m_p, m_c, panel.optimizer, panel.epochs, paired)
        self.add_samples(panel, area_diff, sizes, curve)

    def best(self, panel: Panel) -> None:
        """A best-error comparison's row: best_k(other) - best_k(better), best_k the expected
        best error of k (lr, wd) samples (tunability.expected_best) over each side's sample
        errors, resampled as (a)'s samples are (module docstring)."""
        found = self.shared_samples(panel, tunability.DIVERGED_ERROR)
        if found is None:
            return
        m_other, m_better, sizes, _ = found
        # a sample's error as tunability.sample_errors reads it: its seeds' mean, diverged 100
        e_other, e_better = (
            np.minimum(m, tunability.DIVERGED_ERROR).mean(axis=1) for m in (m_other, m_better)
        )
        ks = [panel.best_of]

        def best_diff(idx_other, idx_better=None):
            idx_better = idx_other if idx_better is None else idx_better  # paired: one index
            best = tunability.expected_best
            return best(e_other[idx_other], ks)[..., 0] - best(e_better[idx_better], ks)[..., 0]

        self.add_samples(panel, best_diff, sizes, None)

    def curve(self, m_p: np.ndarray, m_c: np.ndarray, optimizer, epochs, paired: bool) -> str:
        """Claim (a)'s curve verdict: the simultaneous band of F_C - F_P on [0, 10], the (lr,
        wd) samples resampled as the area's interval resamples them (together where paired)."""
        xs = np.linspace(0.0, AUC_MAX_POINTS, CURVE_STEPS + 1)
        rng = np.random.default_rng(self.options.rng_seed("claims-a-curve", optimizer, epochs))
        n = m_p.shape[0]

        def picks():
            return np.vstack([np.arange(n), rng.integers(0, n, (self.options.n_boot, n))])

        def edf_of(matrix, picked):
            return stats.edf_rows(stats.dtop1_rows(frames.pooled(matrix, picked)), xs)

        picks_c = picks()
        picks_p = picks_c if paired else picks()
        diffs = edf_of(m_c, picks_c) - edf_of(m_p, picks_p)
        return curve_verdict(*stats.sup_band(diffs[0], diffs[1:]))

    def seeds(self, panel: Panel) -> None:
        """A seed claim's row from its kind's per-seed contrast (SEED_CONTRASTS)."""
        k, v = self.seed_errors(list(panel.cells))
        if v:
            self.add_seeds(panel, SEED_CONTRASTS[panel.kind.name](panel, v), k)


def _length_contrast(panel: Panel, v: list[np.ndarray]) -> np.ndarray:
    """(b): [P_s - P_l] - [C_s - C_l], the cells read as P short, P long, C short, C long; a
    length-stability comparison's as other short, other long, better short, better long."""
    return (v[0] - v[1]) - (v[2] - v[3])


def _optimizer_contrast(panel: Panel, v: list[np.ndarray]) -> np.ndarray:
    """(c): the mean over lengths of gap(P) - gap(C), gap = E(sgd) - E(adamw)."""
    e = dict(zip(panel.cells, v, strict=True))
    p, c = panel.models[1], panel.models[0]
    lengths = sorted({ep for _, _, ep in panel.cells})
    return np.mean(
        [
            (e[(p, "sgd", n)] - e[(p, "adamw", n)]) - (e[(c, "sgd", n)] - e[(c, "adamw", n)])
            for n in lengths
        ],
        axis=0,
    )


def _chain_contrast(panel: Panel, v: list[np.ndarray]) -> np.ndarray:
    """(d): each step E(next) - E(previous) along the stem order, (steps, k)."""
    return np.diff(np.stack(v), axis=0)


# The statistic of each kind whose `reads` is "seeds" (spec/claim_kinds.py): the per-seed
# contrasts (k,) or, for a chain, (steps, k), from the per-seed errors of its cells in order.
SEED_CONTRASTS = {
    "b": _length_contrast,
    "c": _optimizer_contrast,
    "d": _chain_contrast,
    "length-stability": _length_contrast,  # claim (b)'s on two declared sides
}

# Each kind's reader (spec/claim_kinds.py's `reads`): the row of one panel from the results
READERS = {"edf": _Claims.edf, "best": _Claims.best, "seeds": _Claims.seeds}


def claims_table(
    results: pd.DataFrame,
    options: Options | None = None,
    study: str = "",
    boundary: float | None = None,
    margin: float | None = None,
    last: bool = False,
    comparisons: Iterable[Comparison] = (),
    classes: int | None = None,
) -> pd.DataFrame:
    """Every claim the results can test, one row per claim and panel (COLUMNS), then each of the
    study's declared `comparisons` whose two cells have results. `results` are
    `frames.with_errors(trials, options.metric)`: finished and diverged trials with `error`.
    With `boundary`, a sequential look's z boundary, the intervals are that look's repeated
    confidence intervals, each verdict is the look's outcome (with the design's `margin`;
    `last`: the design's last look) and neither power nor curve verdict is computed (module
    docstring). `classes`: the dataset's number of classes (spec/catalogue.py), for the
    near-chance check; None where unknown (no check)."""
    claims = _Claims(results, options or Options(), study, boundary, margin, last, classes)
    present = results[frames.CELL_KEYS].drop_duplicates().itertuples(index=False)
    present = [(m, o, int(e)) for m, o, e in present]
    declared = [p for c in comparisons for p in c.panels()]
    for panel in panels(present) + [p for p in declared if set(p.cells) <= set(present)]:
        READERS[panel.kind.reads](claims, panel)
    table = pd.DataFrame(claims.rows, columns=COLUMNS)
    # pandas makes a row's None NaN beside another row's text; a look stores the note as text or
    # None, and its reader refuses NaN (decision/looks.py)
    table["note"] = table["note"].astype(object).where(table["note"].notna(), None)
    return table
