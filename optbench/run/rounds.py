"""Sample until decided: the rounds of a study with a `decide:` block (docs/sequential.md).

A round trains every cell up to its target size: the (lr, wd) samples of claim (a), or the
seeds of claims (b)-(d), at the design's next look (`decide.looks`). When a round's trials are
all recorded, a *look* computes each named claim's panel (claims_table at the look's boundary,
report/sequential.py) on the first n_k units of its cells, and the store records it
(`Store.record_look`) before anything else runs; the row's verdict is the look's outcome
(claims.py). The study's alpha is split evenly over the panels its named claims can read in
its grid (`design`, counted before any data). A panel whose look decides (holds, opposite,
equivalent) or that reached the last look (undecided) is done: its cells stop there. A cell
grows while some undecided panel reads it; a cell no named claim reads stays at the first look.

The recorded looks are the state: which trials a study asks for now (`asked`) is a function of
the spec and its looks, so a driver killed anywhere resumes at the same look. A look is taken
once, on exactly the first n_k units (a cell that grew further for another panel does not
change it), and never again: a look already recorded is read, not recomputed. Its record
carries the design's fingerprint; a study whose `decide:` changed after a look is refused
(`DesignChanged`), since boundaries hold only for looks fixed before the data.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass

import pandas as pd

from optbench.errors import SpecError
from optbench.plan.trials import Trial, plan
from optbench.report import frames, sequential
from optbench.report.claims import claims_table, panel_key, panels
from optbench.report.summary import Options
from optbench.spec.roles import families
from optbench.spec.schema import Decide, StudySpec
from optbench.store.database import Store

METRIC = "final_error"  # what a look reads: the trial's error at its last epoch


class DesignChanged(SpecError):
    """The study's `decide:` block differs from the one its recorded looks were taken under."""


@dataclass(frozen=True)
class Look:
    """One panel's look, as the store records it."""

    panel: str  # claim and panel, e.g. "a adamw 20ep vit_c_w64_16px vs vit_p_w64_16px"
    claim: str
    k: int  # the look's index in decide.looks (0-based)
    n: int  # samples or seeds per cell it read
    n_max: int
    unit: str
    estimate: float
    se: float
    boundary: float  # the z boundary c_k; the interval is estimate +- critical(c_k) se
    low: float
    high: float
    outcome: str  # sequential.OUTCOMES: holds, opposite, equivalent, ..., continue, undecided
    cells: tuple[tuple[str, str, int], ...]  # (model, optimizer, epochs) it read
    design: str  # the design's fingerprint
    spending: str = "pocock"  # the design's, for the report's words
    margin: float | None = None
    note: str | None = None  # why it decides nothing: degenerate data, a mixed chain (claims.py)
    alpha: float = sequential.ALPHA  # the study's, split evenly over its `panels`
    panels: int = 1

    @property
    def done(self) -> bool:
        return self.outcome != "continue"

    def record(self) -> dict:
        out = asdict(self)
        out["cells"] = [list(c) for c in self.cells]
        return out

    @classmethod
    def from_record(cls, data: dict) -> Look:
        return cls(**{**data, "cells": tuple(tuple(c) for c in data["cells"])})


def design(spec: StudySpec) -> sequential.Design:
    """The study's design: its alpha split over the panels its named claims can read in its
    grid (claims.panels, counted before any data; docs/sequential.md)."""
    decide = spec.decide
    cells = [(c.model, c.optimizer, c.epochs) for c in spec.cells()]
    count = sum(p.claim in decide.claims for p in panels(cells))
    looks = tuple(decide.looks)
    return sequential.Design(looks, decide.spending, decide.alpha, decide.margin, max(1, count))


def fingerprint(decide: Decide) -> str:
    """What a recorded look depends on: the claims, the looks, alpha's spending, the margin."""
    blob = json.dumps(decide.model_dump(mode="json"), sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:12]


class Rounds:
    """Where a sequential study stands: its looks so far and each cell's target size."""

    def __init__(self, spec: StudySpec, looks: Iterable[Look]):
        assert spec.decide is not None
        self.spec, self.decide = spec, spec.decide
        self.design = design(spec)
        self.fingerprint = fingerprint(spec.decide)
        self.looks: dict[str, list[Look]] = {}
        for look in sorted(looks, key=lambda x: (x.panel, x.k)):
            if look.design != self.fingerprint:
                raise DesignChanged(
                    f"{spec.name}: its looks were recorded under another decide: block (the "
                    "boundaries hold only for looks fixed before the data); restore it, or "
                    "give the study a new name or output to start again"
                )
            self.looks.setdefault(look.panel, []).append(look)

    # --- what the study asks for now -----------------------------------------------------------

    def _panel_size(self, panel: list[Look]) -> int:
        """A panel's cells' size now: where its last look stopped it, else the next look's."""
        last = panel[-1]
        return last.n if last.done else self.decide.looks[last.k + 1]

    def targets(self) -> dict[tuple[str, str, int], int]:
        """Each cell's size now (samples or seeds): the first look's, grown to the largest
        size an undecided panel that reads it has reached (module docstring)."""
        first = self.decide.looks[0]
        out = {(c.model, c.optimizer, c.epochs): first for c in self.spec.cells()}
        for panel in self.looks.values():
            for cell in panel[-1].cells:
                out[cell] = max(out[cell], self._panel_size(panel))
        return out

    def most(self) -> dict[tuple[str, str, int], int]:
        """Each cell's largest possible size: the last look's for the models a named claim
        reads (spec/roles.py: a ViT_P / ViT_C pair, a stem ablation's chain), the first look's
        for the others (they never grow)."""
        claims, looks = set(self.decide.claims), self.decide.looks
        read: set[str] = set()
        for fam in families(self.spec.models):
            if fam.p and fam.c and claims & {"a", "b", "c"}:
                read |= {fam.p, fam.c}
            if "d" in claims and fam.p and fam.stems:
                read |= {fam.p, *fam.stems}
        return {
            (c.model, c.optimizer, c.epochs): looks[-1] if c.model in read else looks[0]
            for c in self.spec.cells()
        }

    def within(self, trials: list[Trial], sizes: dict[tuple[str, str, int], int]) -> list[Trial]:
        """The trials of each cell's first `sizes[cell]` samples (claim a) or seeds (b-d)."""
        if self.decide.unit == "samples":
            return [t for t in trials if t.sample < sizes[_cell(t)]]
        return [t for t in trials if self.spec.seeds.index(t.seed) < sizes[_cell(t)]]

    def asked(self, trials: list[Trial]) -> list[Trial]:
        """The trials of the full plan that the study asks for now: each cell's first target
        samples (claim a) or the trials of its first target seeds (claims b-d)."""
        return self.within(trials, self.targets())

    @property
    def finished(self) -> bool:
        """Whether every named claim's every panel is done (and one look was taken at all)."""
        return bool(self.looks) and all(p[-1].done for p in self.looks.values())

    def next_k(self) -> int:
        """The look that the present round ends with (0 before any look)."""
        open_panels = [p for p in self.looks.values() if not p[-1].done]
        if not self.looks:
            return 0
        return min(p[-1].k + 1 for p in open_panels) if open_panels else len(self.decide.looks)

    # --- the look ----------------------------------------------------------------------------------

    def look(self, frame: pd.DataFrame) -> list[Look]:
        """The looks due now, from the study's trials frame (store.frame of `asked`): look k of
        every panel still open once every trial it reads up to n_k has a result. Returns the
        new looks (the caller records them); [] when none is due."""
        k = self.next_k()
        if k >= len(self.decide.looks):
            return []
        n = self.decide.looks[k]
        prefix = _prefix(frame, self.decide.unit, n, self.spec.seeds)
        if not _complete(prefix, self.decide.unit, n, self._reading(k)):
            return []
        c = self.design.boundaries()[k]
        last = k == len(self.decide.looks) - 1
        results = frames.with_errors(prefix, METRIC)
        rows = claims_table(results, Options(), self.spec.name, c, self.decide.margin, last)
        new = []
        for _, row in rows[rows["claim"].isin(self.decide.claims)].iterrows():
            key = panel_key(row)
            panel = self.looks.get(key, [])
            if panel and (panel[-1].done or panel[-1].k >= k):
                continue  # done already, or this look is recorded
            new.append(
                Look(
                    panel=key,
                    claim=row["claim"],
                    k=k,
                    n=n,
                    n_max=self.decide.looks[-1],
                    unit=self.decide.unit,
                    estimate=float(row["estimate"]),
                    se=float(row["se"]),
                    boundary=float(c),
                    low=float(row["low"]),
                    high=float(row["high"]),
                    outcome=row["verdict"],  # the look's outcome (claims.py)
                    cells=tuple(tuple(cell) for cell in row["cells"]),
                    design=self.fingerprint,
                    spending=self.decide.spending,
                    margin=self.decide.margin,
                    note=row["note"],
                    alpha=self.decide.alpha,
                    panels=self.design.panels,
                )
            )
        return new

    def _reading(self, k: int) -> set[tuple[str, str, int]]:
        """The cells look k reads: every cell at the first look (which panels exist is known
        only from data), then the cells of the panels still open."""
        if k == 0:
            return {(c.model, c.optimizer, c.epochs) for c in self.spec.cells()}
        return {cell for p in self.looks.values() if not p[-1].done for cell in p[-1].cells}

    def add(self, looks: list[Look]) -> None:
        for look in looks:
            self.looks.setdefault(look.panel, []).append(look)

    def round_of(self, trial: Trial) -> int:
        """The round that first asks for `trial`: the first look whose size covers it (how
        population jobs are grouped: within a round, never across, plan.jobs)."""
        index = trial.sample if self.decide.unit == "samples" else self.spec.seeds.index(trial.seed)
        return next(k for k, n in enumerate(self.decide.looks) if index < n)


def _signed(x: float) -> str:
    return f"{x:+.3g}"


def look_line(look: Look) -> str:
    """One line per look, as the driver records it."""
    what = {"continue": "not decided yet, continues"}.get(look.outcome, look.outcome)
    if look.note:  # why it decides nothing (degenerate data, a mixed chain)
        what += f" ({look.note})"
    return (
        f"look {look.k + 1} ({look.n} of at most {look.n_max} {look.unit}): ({look.claim}) "
        f"{look.panel.split(' ', 1)[1]}: {_signed(look.estimate)} "
        f"[{_signed(look.low)}, {_signed(look.high)}]: {what}"
    )


def decision_lines(rounds: Rounds, waiting: bool) -> list[str]:
    """Where each named claim's panel stands: its decision and why it stopped, or its last look
    and the next one with what is left of the study's size; `waiting`: after a run that could
    not take the next look (trials without a result), which says so."""
    looks = rounds.decide.looks
    lines = []
    for key, panel in sorted(rounds.looks.items()):
        last, where = panel[-1], f"({panel[-1].claim}) {key.split(' ', 1)[1]}"
        here = f"{_signed(last.estimate)} [{_signed(last.low)}, {_signed(last.high)}]"
        here += f" ({last.note})" if last.note else ""  # why it decides nothing
        if last.outcome != "continue":
            reason = "undecided at the maximum" if last.outcome == "undecided" else last.outcome
            lines.append(
                f"{where}: {reason} after {last.n} of at most {last.n_max} {last.unit}: {here}"
            )
            continue
        nxt = looks[last.k + 1]
        line = (
            f"{where}: look {last.k + 1} of {len(looks)} at {last.n} {last.unit}: {here}, not "
            f"decided; next look at {nxt}, at most {last.n_max - last.n} more {last.unit} per cell"
        )
        if waiting:
            line += (
                " (it waits for trials without a result; failed ones are retried by the next run)"
            )
        lines.append(line)
    if not rounds.looks:
        first = f"the first look, at {looks[0]} {rounds.decide.unit} per cell"
        lines.append(
            f"{first}, waits for trials without a result (failed ones are retried by the next run)"
            if waiting
            else f"{first}, comes once they are trained (looks at {', '.join(map(str, looks))})"
        )
    return lines


def size_lines(
    spec: StudySpec, trials: list[Trial], trial_hours: dict, earlier: list[dict]
) -> list[str]:
    """What a sequential study may cost (`optbench run --dry-run`): its trials and device-hours
    if every claim is decided at the first look, if every look is taken, and, where an earlier
    report estimated the named claims (`earlier`: its summary.json claims rows), the expected
    size if the effects are as estimated (report/sequential.stop_probabilities). `trial_hours`:
    device-hours of one trial per cell, None where unknown."""
    rounds, unit, looks = Rounds(spec, []), spec.decide.unit, spec.decide.looks
    # trials per unit of a cell: seeds per sample, or samples per seed
    per_unit = len(spec.seeds) if unit == "samples" else spec.search.n_samples
    first, most = rounds.asked(trials), rounds.within(trials, rounds.most())
    expected = {_cell(t): float(looks[0]) for t in trials}
    found = False
    for row in earlier:
        if row.get("claim") not in spec.decide.claims or not row.get("se") or not row.get("n_now"):
            continue
        z_full = row["estimate"] / row["se"] * (looks[-1] / row["n_now"]) ** 0.5
        stops = sequential.stop_probabilities(rounds.design, z_full)
        size = float(sum(p * n for p, n in zip(stops, looks, strict=True)))
        for cell in row.get("cells") or []:
            cell = tuple(cell)
            if cell in expected:
                expected[cell] = max(expected[cell], size)
                found = True

    def hours(counts: dict) -> str:
        if any(trial_hours.get(cell) is None for cell in counts):
            return ""
        return f", {sum(n * trial_hours[cell] for cell, n in counts.items()):.3g} device-hours"

    def per_cell(chosen: list[Trial]) -> dict:
        counts: dict = {}
        for t in chosen:
            counts[_cell(t)] = counts.get(_cell(t), 0) + 1
        return counts

    lines = [
        f"decide: from {len(first)} trials{hours(per_cell(first))} (every claim decided at the "
        f"first look, {looks[0]} {unit} per cell) to {len(most)}{hours(per_cell(most))} "
        f"(every look taken, {looks[-1]} {unit} per cell a named claim reads); alpha "
        f"{rounds.design.alpha:g} for the study, {rounds.design.panel_alpha:.3g} for each of its "
        f"{rounds.design.panels} panels"
    ]
    if found:
        counts = {cell: n * per_unit for cell, n in expected.items()}
        lines.append(
            f"decide: about {sum(counts.values()):.0f} trials{hours(counts)} expected if the "
            "effects are as the earlier report estimated them"
        )
    else:
        lines.append(
            "decide: the expected size needs an estimate of the effects: an earlier report "
            "of this study (optbench report) gives one"
        )
    return lines


def asked_trials(spec: StudySpec, store: Store) -> list[Trial]:
    """The trials the study asks for now (`optbench status`, `report`, the Python API): the
    whole plan, or a sequential study's rounds so far (Rounds.asked). Reads only."""
    trials = plan(spec)
    if spec.decide is None:
        return trials
    return Rounds(spec, map(Look.from_record, store.looks())).asked(trials)


def _cell(t: Trial) -> tuple[str, str, int]:
    return (t.cell.model, t.cell.optimizer, t.cell.epochs)


def _prefix(frame: pd.DataFrame, unit: str, n: int, seeds: list[int]) -> pd.DataFrame:
    """Each cell's first n samples (or the trials of the first n seeds)."""
    if unit == "samples":
        return frame[frame["sample"] < n]
    return frame[frame["seed"].isin(seeds[:n])]


def _complete(prefix: pd.DataFrame, unit: str, n: int, cells: set[tuple[str, str, int]]) -> bool:
    """Whether each of `cells` holds its n units in the prefix, every trial with a result
    (finished or diverged): a look never reads a round still running or with a failure left."""
    column = "sample" if unit == "samples" else "seed"
    for cell, group in prefix.groupby(frames.CELL_KEYS):
        if tuple(cell) in cells and not (
            group[column].nunique() == n and group["status"].isin(frames.RESULT_STATUSES).all()
        ):
            return False
    present = {tuple(cell) for cell, _ in prefix.groupby(frames.CELL_KEYS)}
    return cells <= present
