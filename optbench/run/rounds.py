"""Sample until decided: the rounds of a study with a `decide:` block (docs/sequential.md).

A round trains every cell up to its target size: the (lr, wd) samples of claim (a), or the
seeds of claims (b)-(d), at the design's next look (`decide.looks`). When a round's trials are
all recorded, a *look* computes each named claim's panel (claims_table at the look's boundary,
decision/sequential.py) on the first n_k units of its cells, and the store records it
(`Store.record_look`) before anything else runs; the row's verdict is the look's outcome
(claims.py). The study's alpha is shared by the panels its named claims can read in its grid
and the declared comparisons it names (`design`, counted before any data): alpha / m each at
first, a panel's alpha passed on to the panels still open once it rejects its zero null
(Holm's step-down, decision/sequential.py; `Rounds.look` takes each look at its level). A panel
whose look decides (holds, opposite, equivalent), learned nothing (a non-binding futility stop,
decision/sequential.py) or reached the last look (undecided) is done: its cells stop there. A cell
grows while some undecided panel reads it; a cell no named claim reads stays at the first look.

The recorded looks are the state: which trials a study asks for now (`asked`) is a function of
the spec and its looks, so a driver killed anywhere resumes at the same look. A look is taken
once, on exactly the first n_k units (a cell that grew further for another panel does not
change it), and never again: a look already recorded is read, not recomputed. Its record
carries the design's fingerprint and a digest of the trials its round read (`read`: the keys
of the first n_k units of the cells it waited for, which name each cell's configuration); a
study whose `decide:` changed after a look is refused (`DesignChanged`), and so is one whose
cells, seeds or samples changed under a look (`CellsChanged`): boundaries hold only for looks
fixed before the data, and a look's data is fixed once it is taken. `Rounds.of` is the one
reader of the store's looks: every record is checked field by field and against the design
(`DamagedLooks` for one that is not what a driver wrote) before anything runs or is written.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable

import numpy as np
import pandas as pd
from scipy import stats

from optbench.decision import frames, sequential
from optbench.decision.claims import claims_table
from optbench.decision.looks import Look, inconsistent, record_key, signed
from optbench.decision.looks import look_line as look_line  # the driver's name for it
from optbench.decision.summary import Options
from optbench.errors import SpecError
from optbench.plan.trials import Trial, plan
from optbench.run.expected_size import expected_size
from optbench.spec.calibrations import calibration_words
from optbench.spec.catalogue import CATALOGUE
from optbench.spec.claim_kinds import cells_read, comparison_key, panels, side_words
from optbench.spec.comparisons import RANK, Comparison
from optbench.spec.schema import StudySpec
from optbench.store.database import DamagedLooks, Store
from optbench.store.migrations import looks_under_stable_keys

METRIC = "final_error"  # what a look reads: the trial's error at its last epoch


class DesignChanged(SpecError):
    """The study's `decide:` block differs from the one its recorded looks were taken under."""


class CellsChanged(SpecError):
    """The study's cells, seeds or samples differ from the trials its recorded looks read."""


START_AFRESH = "restore it, or give the study a new name or output to start its looks afresh"


def design(spec: StudySpec) -> sequential.Design:
    """The study's design: its alpha shared by the panels its named claims can read in its
    grid (claims.panels, counted before any data; Holm's step-down, docs/sequential.md)."""
    decide = spec.decide
    cells = [(c.model, c.optimizer, c.epochs) for c in spec.cells()]
    # a ranking counts as its pairs (docs/sequential.md)
    count = len(panels(cells, decide.paper_claims))
    count += sum(len(c.panels()) for c in declared(spec))
    looks = tuple(decide.looks)
    return sequential.Design(looks, decide.spending, decide.alpha, decide.margin, max(1, count))


def declared(spec: StudySpec) -> list[Comparison]:
    """The declared comparisons (spec/comparisons.py) that the study's `decide:` names."""
    return [c for c in spec.comparisons if c.name in spec.decide.claims]


def fingerprint(spec: StudySpec) -> str:
    """What a recorded look depends on: the claims, the looks, alpha's spending, the margin,
    and each named declared comparison (none named: the fingerprint of earlier optbench)."""
    what = spec.decide.model_dump(mode="json")
    if declared(spec):
        # each as declared (Comparison's dump has no "k: null"): as an earlier optbench's
        # (`calibration` is not the design: accepting an uncalibrated one keeps its looks)
        named = [c.model_dump(mode="json", exclude={"calibration"}) for c in declared(spec)]
        what = {"decide": what, "comparisons": named}
    blob = json.dumps(what, sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:12]


class Rounds:
    """Where a sequential study stands: its looks so far and each cell's target size.
    `trials`: the study's plan (plan.plan(spec), made here when not given)."""

    def __init__(self, spec: StudySpec, looks: Iterable[Look], trials: list[Trial] | None = None):
        assert spec.decide is not None
        self.spec, self.decide = spec, spec.decide
        self.design = design(spec)
        self.fingerprint = fingerprint(spec)
        self._trials = trials
        self._first_look_checked = False  # look()'s retake of look 0
        self.looks: dict[str, list[Look]] = {}
        for look in sorted(looks, key=lambda x: (x.panel, x.k)):
            if look.design != self.fingerprint:
                raise DesignChanged(
                    f"{spec.name}: its looks were recorded under another decide: block (the "
                    f"boundaries hold only for looks fixed before the data); {START_AFRESH}"
                )
            self.looks.setdefault(look.panel, []).append(look)
        self._check_read()

    @classmethod
    def of(cls, spec: StudySpec, store: Store, trials: list[Trial] | None = None) -> Rounds:
        """The study's rounds from the looks its store recorded: the one reader of them.
        DamagedLooks (one line, exit 2) for a record that is not what a driver wrote: not a
        look's fields and types, or not one of this design's looks."""
        looks = []
        for key, record in looks_under_stable_keys(store.look_records()):
            try:
                look = Look.from_record(record)
                if key != record_key(look):
                    raise ValueError(f"the record is look {look.k} of panel {look.panel!r}")
            except ValueError as err:
                raise DamagedLooks(store.damaged_looks(f"{key}: {err}")) from None
            looks.append(look)
        ours = fingerprint(spec)  # another design's looks: DesignChanged, below
        for why in inconsistent(spec.decide, [look for look in looks if look.design == ours]):
            raise DamagedLooks(store.damaged_looks(why))
        return cls(spec, looks, trials)

    @property
    def trials(self) -> list[Trial]:
        if self._trials is None:
            self._trials = plan(self.spec)
        return self._trials

    def reads(self, k: int, cells: set[tuple[str, str, int]]) -> str:
        """The digest of the trials a look at decide.looks[k] units of `cells` reads: the
        sorted keys of their first n_k units (a key names its cell's configuration, its
        sample and its seed)."""
        sizes = {cell: self.decide.looks[k] for cell in cells}
        keys = sorted(
            t.key for t in self.trials if _cell(t) in sizes and self._index(t) < sizes[_cell(t)]
        )
        return hashlib.sha256("\n".join(keys).encode()).hexdigest()[:16]

    def _check_read(self) -> None:
        """CellsChanged unless every recorded look would read the same trials in this spec:
        a key that names the cells (models, optimizers, epochs, the recipe, the search) or
        adds units (seeds, samples) changed after a look would mix new data under an old
        decision. A record without `read` (an older optbench's) is checked by its cells."""
        planned = {(c.model, c.optimizer, c.epochs) for c in self.spec.cells()}
        digests: dict[int, str] = {}
        for look in (look for panel in self.looks.values() for look in panel):
            if look.read is None:
                same = set(look.cells) <= planned
            else:
                if look.k not in digests:
                    digests[look.k] = self.reads(look.k, self._reading(look.k))
                same = digests[look.k] == look.read
            if not same:
                raise CellsChanged(
                    f"{self.spec.name}: look {look.k + 1} of ({look.claim}) {look.words} "
                    "read other trials than this study now plans (a key that names its cells or "
                    "adds samples or seeds changed after the look: models, optimizers, epochs, "
                    f"seeds, search, recipe, dataset); {START_AFRESH}"
                )

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
        looks = self.decide.looks
        return {
            cell: looks[-1] if claims else looks[0]
            for cell, claims in claims_reading(self.spec).items()
        }

    def within(self, trials: list[Trial], sizes: dict[tuple[str, str, int], int]) -> list[Trial]:
        """The trials of each cell's first `sizes[cell]` samples (claim a) or seeds (b-d)."""
        return [t for t in trials if self._index(t) < sizes[_cell(t)]]

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
        every panel still open once every trial it reads up to n_k has a result, each at its
        level (Holm's step-down, sequential.step_down, from the panels `rejected` so far).
        Returns the new looks (the caller records them); [] when none is due."""
        if self.looks and not self._first_look_checked:
            # A driver killed between two panels' records of the first look leaves a panel
            # unrecorded, and only the data say which panels exist: take look 0 again, once
            # per reader, for the panels it lacks (recorded ones are skipped, not retaken).
            self._first_look_checked = True
            missed = self._due(0, frame)
            if missed:
                return missed
        k = self.next_k()
        if k >= len(self.decide.looks):
            return []
        return self._due(k, frame)

    def _due(self, k: int, frame: pd.DataFrame) -> list[Look]:
        """Look k of the panels not recorded there, or [] while its round lacks results."""
        n = self.decide.looks[k]
        prefix = _prefix(frame, self.decide.unit, n, self.spec.seeds)
        if not _complete(prefix, self.decide.unit, n, self._reading(k)):
            return []
        results = frames.with_errors(prefix, METRIC)
        found = sequential.step_down(
            lambda level: {x.panel: x for x in self._looks_at(k, n, results, level)},
            self.design,
            len(self.rejected(by=k)),
        )
        return list(found.values())

    def rejected(self, by: int) -> set[str]:
        """The panels whose recorded looks rejected their zero null (sequential.REJECTS) at look
        `by` or before: what an open panel's level at look `by` counts (sequential.Design.level)."""
        return {
            key
            for key, panel in self.looks.items()
            if panel[-1].outcome in sequential.REJECTS and panel[-1].k <= by
        }

    def _looks_at(self, k: int, n: int, results: pd.DataFrame, level: float) -> list[Look]:
        """Look k (n units per cell) of every panel not yet done or recorded there, its
        interval at boundary c_k of `level`."""
        c = self.design.boundaries(level)[k]
        read = self.reads(k, self._reading(k))
        last = k == len(self.decide.looks) - 1
        rows = claims_table(
            results,
            Options(),
            self.spec.name,
            c,
            self.decide.margin,
            last,
            declared(self.spec),
            CATALOGUE[self.spec.dataset.name].classes,  # the near-chance check (claims.py)
        )
        best_of = {comparison.name: comparison.k for comparison in declared(self.spec)}
        new = []
        for _, row in rows[rows["claim"].isin(self.decide.claims)].iterrows():
            key = comparison_key(row["claim"], row["cells"])
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
                    read=read,
                    note=row["note"],
                    alpha=self.decide.alpha,
                    panels=self.design.panels,
                    kind=None if row["kind"] == row["claim"] else row["kind"],
                    best_of=best_of.get(row["claim"]),
                    level=level,
                )
            )
        return new

    def _reading(self, k: int) -> set[tuple[str, str, int]]:
        """The cells look k reads: every cell at the first look (which panels exist is known
        only from data), then the cells of the panels that look k - 1 left open."""
        if k == 0:
            return {(c.model, c.optimizer, c.epochs) for c in self.spec.cells()}
        return {
            cell
            for p in self.looks.values()
            if len(p) >= k and p[k - 1].outcome == "continue"
            for cell in p[k - 1].cells
        }

    def _index(self, trial: Trial) -> int:
        """The trial's unit: its sample (claim a) or its seed's place in `seeds` (b-d)."""
        if self.decide.unit == "samples":
            return trial.sample
        return self.spec.seeds.index(trial.seed)

    def add(self, looks: list[Look]) -> None:
        for look in looks:
            self.looks.setdefault(look.panel, []).append(look)

    def round_of(self, trial: Trial) -> int:
        """The round that first asks for `trial`: the first look whose size covers it (how
        population jobs are grouped: within a round, never across, plan.jobs)."""
        index = self._index(trial)
        return next(k for k, n in enumerate(self.decide.looks) if index < n)


def decision_lines(rounds: Rounds, waiting: str | None) -> list[str]:
    """Where each named claim's panel stands: its decision and why it stopped, or its last look
    and the next one with what is left of the study's size; `waiting`: after a run that could
    not take the next look, what the look waits for (the driver's `_waiting_for`)."""
    looks = rounds.decide.looks
    lines = []
    # in the order of the panels' words (their claim first), as the page lists them
    for panel in sorted(rounds.looks.values(), key=lambda p: f"{p[-1].claim} {p[-1].words}"):
        last, where = panel[-1], f"({panel[-1].claim}) {panel[-1].words}"
        here = f"{signed(last.estimate)} [{signed(last.low)}, {signed(last.high)}]"
        here += f" ({last.note})" if last.note else ""  # why it decides nothing
        if last.outcome != "continue":
            reason = "undecided at the maximum" if last.outcome == "undecided" else last.outcome
            line = f"{where}: {reason} after {last.n} of at most {last.n_max} {last.unit}: {here}"
            calibration = calibration_words(rounds.spec, last.claim, last.cells)
            lines.append(f"{line}; {calibration}" if calibration else line)
            continue
        nxt = looks[last.k + 1]
        line = (
            f"{where}: look {last.k + 1} of {len(looks)} at {last.n} {last.unit}: {here}, not "
            f"decided; next look at {nxt}, at most {last.n_max - last.n} more {last.unit} per cell"
        )
        if waiting:
            line += f" (it waits for {waiting})"
        lines.append(line)
    if not rounds.looks:
        first = f"the first look, at {looks[0]} {rounds.decide.unit} per cell"
        lines.append(
            f"{first}, waits for {waiting}"
            if waiting
            else f"{first}, comes once they are trained (looks at {', '.join(map(str, looks))})"
        )
    return lines


def claims_reading(spec: StudySpec) -> dict[tuple[str, str, int], set[str]]:
    """The named claims that read each cell (their panels' cells, spec/claim_kinds.py); a
    cell none reads never grows."""
    out = cells_read([(c.model, c.optimizer, c.epochs) for c in spec.cells()], spec.decide.claims)
    for comparison in declared(spec):
        for panel in comparison.panels():
            for cell in panel.cells:
                out[cell].add(comparison.name)
    return out


# The effect `--dry-run` plans for without an earlier report: one that the fixed-size study of
# the design's largest size shows with this probability (the usual power of a planned study).
PLANNED_POWER = 0.9


def planned_size(spec: StudySpec, panels: int = 1) -> float:
    """The expected size (samples or seeds per cell) of a cell that `panels` named claims read,
    if each one's effect is the planned one (PLANNED_POWER at a panel's share of alpha), with
    the se estimated at each look as the looks read it (decision/sequential.stop_probabilities):
    the cell grows until its last panel stops, the panels taken as independent, each at its
    share before any rejection (Holm's recycling left out: an estimate on the high side)."""
    looks, study = spec.decide.looks, design(spec)
    z = float(stats.norm.isf(study.panel_alpha / 2) + stats.norm.ppf(PLANNED_POWER))
    by_look = np.cumsum(sequential.stop_probabilities(study, z)) ** panels
    return float(np.dot(np.diff(np.concatenate([[0.0], by_look])), looks))


def size_lines(
    spec: StudySpec,
    trials: list[Trial],
    trial_hours: dict,
    earlier: list[dict],
    trial_pf: dict | None = None,
) -> list[str]:
    """What a sequential study may cost (`optbench run --dry-run`): its design; its trials,
    device-hours and compute if every claim is decided at the first look, if every look is
    taken, and as expected: where an earlier report estimated the named claims (`earlier`: its
    summary.json claims rows), if the effects are as estimated, else if each is the planned
    effect (`planned_size`); and the same against the fixed design, the same study without
    `decide:` (every cell at the last look's size). `trial_hours`: device-hours of one trial
    per cell, None where unknown; `trial_pf`: its petaFLOPs (multiply-adds with backward)."""
    rounds, unit, looks = Rounds(spec, []), spec.decide.unit, spec.decide.looks
    # trials per unit of a cell: seeds per sample, or samples per seed
    per_unit = len(spec.seeds) if unit == "samples" else spec.search.n_samples
    first, most = rounds.asked(trials), rounds.within(trials, rounds.most())
    reading = claims_reading(spec)
    expected = {_cell(t): float(looks[0]) for t in trials}
    found = False
    for row in earlier:
        if row.get("claim") not in spec.decide.claims or not row.get("se") or not row.get("n_now"):
            continue
        size = expected_size(rounds.design, row)  # calibrated on the earlier study's law
        for cell in row.get("cells") or []:
            cell = tuple(cell)
            if cell in expected:
                expected[cell] = max(expected[cell], size)
                found = True
    if not found:  # the planned effect in every panel a named claim reads
        sizes = {m: planned_size(spec, m) for m in {len(c) for c in reading.values() if c}}
        for cell in expected:
            if reading.get(cell):
                expected[cell] = sizes[len(reading[cell])]

    def cost(counts: dict) -> str:
        parts = []
        if all(trial_hours.get(cell) is not None for cell in counts):
            parts.append(
                f"{sum(n * trial_hours[cell] for cell, n in counts.items()):.3g} device-hours"
            )
        if trial_pf and all(trial_pf.get(cell) is not None for cell in counts):
            parts.append(f"{sum(n * trial_pf[cell] for cell, n in counts.items()):.3g} PF")
        return "".join(f", {part}" for part in parts)

    def per_cell(chosen: list[Trial]) -> dict:
        counts: dict = {}
        for t in chosen:
            counts[_cell(t)] = counts.get(_cell(t), 0) + 1
        return counts

    decide = spec.decide
    spending = {"pocock": "Pocock", "obrien-fleming": "O'Brien-Fleming"}[decide.spending]
    margin = "" if decide.margin is None else f", margin {decide.margin:g}"
    claims = ", ".join(f"({c})" for c in decide.claims)
    # every panel shares the alpha, a declared comparison's as the paper's claims' (Holm)
    named = sum(len(c.panels()) for c in declared(spec))
    of_them = f", {named} of them declared" if named else ""
    shared = f"{rounds.design.panel_alpha:.3g} for each of its {rounds.design.panels} panels"
    shared += of_them
    if rounds.design.panels > 1:
        shared += " at first, passed on as panels are decided (Holm)"
    lines = [
        f"decide: {claims} looked at after {', '.join(map(str, looks))} {unit} per cell "
        f"({spending}, alpha {decide.alpha:g} for the study, {shared}{margin}; "
        "docs/sequential.md)",
        # each declared comparison: its kind, sides and statistic (it has no paper's words)
        *(_declared_line(spec, c) for c in declared(spec)),
        f"decide: from {len(first)} trials{cost(per_cell(first))} (every claim decided at the "
        f"first look, {looks[0]} {unit} per cell) to {len(most)}{cost(per_cell(most))} "
        f"(every look taken, {looks[-1]} {unit} per cell a named claim reads)",
    ]
    counts = {cell: n * per_unit for cell, n in expected.items()}
    why = (
        "if the effects are as the earlier report estimated them"
        if found
        else f"if each effect is one a fixed study of {looks[-1]} {unit} shows {PLANNED_POWER:.0%} "
        "of the time (an earlier report's estimate replaces it: optbench report)"
    )
    lines.append(f"decide: about {sum(counts.values()):.0f} trials{cost(counts)} expected {why}")
    fixed = per_cell(plan(spec))
    line = (
        f"decide: against {sum(fixed.values())} trials{cost(fixed)} for the fixed design, the "
        f"same study without decide: ({looks[-1]} {unit} per cell)"
    )
    if unit == "seeds":  # the paper's fixed design: one seed, which no seed claim reads
        one = {cell: spec.search.n_samples for cell in fixed}
        none_of = claims if declared(spec) else "(b)-(d)"  # a study's own: named as decided
        line += (
            f"; one seed per cell, which decides none of {none_of}: {sum(one.values())}{cost(one)}"
        )
    lines.append(line)
    return lines


def _declared_line(spec: StudySpec, comparison: Comparison) -> str:
    """The dry run's line of a declared comparison: its kind, sides and statistic (a best-error
    one's calibration too, spec/calibrations.py); a ranking's cells, the kind of its pairs and
    how many."""
    panels = comparison.panels()
    if comparison.kind != RANK:
        (panel,) = panels
        line = f"decide: ({comparison.name}) {comparison.kind}, {panel.words}: {panel.statistic}"
        calibration = calibration_words(spec, comparison.name, panel.cells)
        return f"{line}; {calibration}" if calibration else line
    cells = ", ".join(side_words(side.cell) for side in comparison.cells)
    # each pair's statistic in general terms: the kind's own words name ViT_C and ViT_P
    kind, k = panels[0].kind, panels[0].best_of
    statistic = kind.declared_statistic.format(better="x", other="y", k=k)
    return (
        f"decide: ({comparison.name}) rank of {len(comparison.cells)} cells by "
        f"{comparison.by} ({len(panels)} pairs, each a panel; for cells x, y: {statistic}): "
        f"{cells}"
    )


def asked_trials(spec: StudySpec, store: Store) -> list[Trial]:
    """The trials the study asks for now (`optbench status`, `report`, the Python API): the
    whole plan, or a sequential study's rounds so far (Rounds.asked). Reads only."""
    trials = plan(spec)
    if spec.decide is None:
        return trials
    return Rounds.of(spec, store, trials).asked(trials)


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
