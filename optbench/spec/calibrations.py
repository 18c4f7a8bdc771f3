"""The calibrations of best-error comparisons: the wrong-decision rate of the rule that decides
one, measured on exact nulls built from trained replicates of one design (bench/RESULTS.md),
each keyed by what makes a study's design that design (`Design`). `CALIBRATIONS` is the one
table; `calibration_of` finds a declared comparison's panel's entry, `uncalibrated` names the
best-error comparisons of a study that none covers (run/preflight.py refuses them unless they
say `calibration: none`), `calibration_words` is what the page, claims.md and `optbench
status` print beside such a panel's decision.

What must match, and why (docs/sequential.md, "best-error"): the best-error statistic is on the
error's own scale, so whatever moves a side's error level or its spread between trainings moves
its null distribution: each side's training (the cell's whole configuration: model, optimizer,
epochs, dataset, recipe, batch, (lr, wd) box, sampler and whether each sample trains its own
seed, `training_digest`), the seeds per sample, k, and the rule (its looks, spending, alpha and
margin; none for a comparison decided once at the study's full size). The search seed is left
out: it draws other (lr, wd) pairs from the same box, as the replicates did. The number of
panels the study decides is left out too: Holm's step-down tests each panel at a level of at
most alpha, and a lower level only raises the boundaries, so the rate measured deciding the
comparison alone at alpha bounds it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass

from optbench.spec.claim_kinds import CellKey
from optbench.spec.comparisons import Comparison
from optbench.spec.schema import Cell, StudySpec

KIND = "best-error"  # the kind whose decisions need a calibration
ACCEPT = "none"  # a comparison's `calibration: none`: decided without one, and said so
BENCH = "bench/RESULTS.md, replicates-best-error"
HOW_TO_CALIBRATE = (
    "train replicates of this design and measure the rule on their exact nulls "
    "(bench/replicates.py, analyse-best-error; docs/sequential.md, best-error), then add the "
    "measurement to optbench/spec/calibrations.py"
)


@dataclass(frozen=True)
class Design:
    """What makes two studies' best-error comparisons the same design (module docstring)."""

    trainings: frozenset[str]  # each side's training_digest
    seeds: int  # training seeds per (lr, wd) sample
    k: int  # the samples whose expected best it compares
    n_samples: int  # (lr, wd) samples per cell: the last look of a sequential one
    looks: tuple[int, ...] = ()  # () where it is decided once, at n_samples
    spending: str | None = None
    alpha: float | None = None
    margin: float | None = None


@dataclass(frozen=True)
class Calibration:
    """One measurement: the share of `nulls` exact null studies of `design` that the rule
    decided (every decision on a null is wrong), with its Monte Carlo standard error."""

    design: Design
    what: str  # the design and its nulls in words
    nulls: int
    wrong: float
    mc_se: float
    source: str = BENCH

    @property
    def within_alpha(self) -> bool:
        """Whether the rate is what the rule states: at most alpha plus two Monte Carlo errors."""
        alpha = self.design.alpha or 0.05  # decided once at full size: a 95% interval
        return self.wrong <= alpha + 2 * self.mc_se


def training_digest(spec: StudySpec, cell: CellKey) -> str:
    """What one side trains: the cell's configuration (StudySpec.cell_config, which names the
    cell) without the search seed, hashed."""
    model, optimizer, epochs = cell
    config = spec.cell_config(Cell(model=model, optimizer=optimizer, epochs=epochs))
    config.pop("search_seed")
    return hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:12]


def design_of(spec: StudySpec, comparison: Comparison, cells: Iterable[CellKey]) -> Design:
    """The design of `comparison`'s panel on `cells` in `spec` (a ranking's pair, or its two
    sides): sequential where `decide:` names it."""
    trainings = frozenset(training_digest(spec, tuple(cell)) for cell in cells)
    n = spec.search.n_samples
    base = Design(trainings, len(spec.seeds), comparison.k, n)
    decide = spec.decide
    if decide is None or comparison.name not in decide.claims:
        return base
    return Design(
        trainings, len(spec.seeds), comparison.k, n, tuple(decide.looks), decide.spending,
        decide.alpha, decide.margin,
    )  # fmt: skip


def calibration_of(
    spec: StudySpec, comparison: Comparison, cells: Iterable[CellKey]
) -> Calibration | None:
    """The measurement of this panel's design, or None where no trained nulls measured it."""
    design = design_of(spec, comparison, cells)
    return next((c for c in CALIBRATIONS if c.design == design), None)


def uncalibrated(spec: StudySpec) -> list[tuple[int, Comparison, str]]:
    """(index, comparison, why) for each best-error comparison (a ranking by it too) that no
    calibration within alpha covers and that does not accept that (`calibration: none`)."""
    out = []
    for i, comparison in enumerate(spec.comparisons):
        if comparison.pair_kind != KIND or comparison.calibration == ACCEPT:
            continue
        found = [calibration_of(spec, comparison, p.cells) for p in comparison.panels()]
        if any(c is None for c in found):
            out.append((i, comparison, "no trained nulls of its design measure its rule"))
        elif bad := [c for c in found if not c.within_alpha]:
            out.append((i, comparison, f"{_rate(bad[0])}, above its alpha"))
    return out


def calibration_words(spec: StudySpec, claim: str, cells: Iterable[Iterable]) -> str | None:
    """What to print beside a best-error panel's decision (`claim`: its comparison's name,
    `cells`: the cells it reads); None for a panel of any other kind."""
    comparison = next((c for c in spec.comparisons if c.name == claim), None)
    if comparison is None or comparison.pair_kind != KIND:
        return None
    found = calibration_of(spec, comparison, [(m, o, int(e)) for m, o, e in cells])
    if found is None:
        return "not calibrated for this design: no trained nulls measure its rule"
    # the nulls are drawn from a few replicates' trainings: their Monte Carlo se understates
    return f"{_rate(found)} ({found.source}; the +- a lower bound, the nulls share trainings)"


def _rate(calibration: Calibration) -> str:
    return (
        f"its rule decided {calibration.nulls} trained nulls of this design wrongly in "
        f"{100 * calibration.wrong:.1f}% +- {100 * calibration.mc_se:.1f}%"
    )


# --- the table ----------------------------------------------------------------------------------
# The quickstart's design (studies/quickstart.yaml, bench/replicates.py's SHARED): ViT_P and
# ViT_C, AdamW, 20 epochs on digits, seeds: [0], best of k = 4, decided alone at looks
# 6-24, alpha 0.05, no margin. The nulls (bench/RESULTS.md, "best-error on the same replicates",
# 2026-12-04): with a seed per sample, 400 studies each side drawn from its own half of the 20
# replicates; with one seed per study (seed_per_sample false), 200 swapped studies (a replicate
# of a model against another of the same model).
# Its sides' training_digest, with search.seed_per_sample true and false (tests/
# test_best_error_calibration.py checks that the quickstart with such a comparison is covered).
QUICKSTART_SEED_PER_SAMPLE = frozenset({"6be2bcc34e5b", "f84c84f27874"})
QUICKSTART_ONE_SEED = frozenset({"9349cb6f4e8d", "5ec03ffb4c67"})
QUICKSTART_LOOKS = (6, 8, 10, 12, 16, 24)


def _quickstart(trainings: frozenset[str], spending: str) -> Design:
    return Design(trainings, 1, 4, 24, QUICKSTART_LOOKS, spending, 0.05, None)


CALIBRATIONS: tuple[Calibration, ...] = (
    Calibration(
        _quickstart(QUICKSTART_SEED_PER_SAMPLE, "pocock"),
        "the quickstart's design, a seed per sample, Pocock",
        400, 0.022, 0.007,
    ),
    Calibration(
        _quickstart(QUICKSTART_SEED_PER_SAMPLE, "obrien-fleming"),
        "the quickstart's design, a seed per sample, O'Brien-Fleming",
        400, 0.025, 0.008,
    ),
    Calibration(
        _quickstart(QUICKSTART_ONE_SEED, "pocock"),
        "the quickstart's design, one seed per study, Pocock",
        200, 0.050, 0.015,
    ),
    Calibration(
        _quickstart(QUICKSTART_ONE_SEED, "obrien-fleming"),
        "the quickstart's design, one seed per study, O'Brien-Fleming",
        200, 0.065, 0.017,
    ),
)  # fmt: skip
