"""The paper's four optimizability claims, tested on a study's trials: one row per claim and
panel with an estimate, its 95% bootstrap interval and a verdict (the report's "claims" table).

Xiao et al. (2021) claim that, compared with ViT_P (patchify stem), ViT_C (conv stem):
  (a) has a steeper lr/wd EDF (Figs 4-5),
  (b) is closer to its asymptote at short schedules (Fig 2),
  (c) loses less when SGD replaces AdamW (Fig 3),
and (d) that error grows as the stem's patchify layer grows, S1 -> S4 -> P (Table 3).

Models take their roles from their zoo names: `vit_p_<x>` and `vit_c_<x>` are a pair,
`vit_s<k>_<x>` the stem ablation with a k-th patchify size of the same family `<x>`.

Definitions (each statistic is defined here once; "error" is the trial's `options.metric`):
- cell: the trials of one (model, optimizer, epochs); a sample is one (lr, wd) pair of it, a
  seed one training seed.
- cell error E(m, opt, ep), for (b)-(d): the cell's error as tables.py defines it (the lowest
  mean over seeds among the cell's samples, a diverged seed counted as DIVERGED_ERROR), here
  over the samples with every seed recorded; the bootstrap recomputes it from resampled seeds.
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
  every step. Its verdict is "opposite" only when the interval of the largest step lies below
  0 (error falls at every step): the smallest of several noisy steps is biased low, so its own
  interval below 0 would not show a reversed order.

Intervals: percentile bootstrap (N_BOOT resamples, 2.5-97.5 percentiles), seeded per claim and
panel. (a) resamples the (lr, wd) samples, each carrying all its seeds, with the same sample
indices for both models (sample i is the same point of the unit square in both boxes, a paired
design); (b)-(d) resample each cell's seeds on its own (a sample keeps its seed-th trial).
(b)-(d) are tested only where every cell has MIN_SEEDS or more seeds.
Verdict: "holds" when the interval lies above 0, "opposite" when it lies below 0, "not shown"
otherwise.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from optbench.analysis import tables
from optbench.analysis.edf import AUC_MAX_POINTS
from optbench.analysis.page import Section
from optbench.analysis.stats import LEVEL, dtop1_rows
from optbench.analysis.summary import Options

MIN_EDF_SAMPLES = 4
MIN_SEEDS = 2  # (b)-(d) bootstrap seeds: one seed would give an interval of width 0
_ROLE = re.compile(r"^vit_(p|c|s(\d+))_(.+)$")

PAPER = {
    "a": "ViT_C's lr/wd EDF is steeper than ViT_P's (Figs 4-5)",
    "b": "ViT_C is closer to its asymptote at short schedules (Fig 2)",
    "c": "ViT_C's SGD - AdamW gap is smaller (Fig 3)",
    "d": "error grows with the stem's patchify size, {chain} (Table 3)",  # the stems that ran
}
STATISTIC = {
    "a": "auc_10(C) - auc_10(P) (EDF area, 0-1)",
    "b": "[E(P,short) - E(P,long)] - [E(C,short) - E(C,long)] (points)",
    "c": "mean over lengths of gap(P) - gap(C), gap = E(sgd) - E(adamw) (points)",
    "d": "min step of E along the stem order (points)",
}
COLUMNS = [
    "claim",
    "paper",
    "study",
    "optimizer",
    "epochs",
    "models",
    "statistic",
    "estimate",
    "low",
    "high",
    "verdict",
    "trials",
    "diverged",
]


@dataclass(frozen=True)
class Family:
    """The ViT_P / ViT_C pair and stem ablations sharing one zoo suffix."""

    p: str | None
    c: str | None
    stems: tuple[str, ...]  # S1, S2, ... in patchify-size order

    @property
    def stem_order(self) -> tuple[str, ...]:
        return (*self.stems, self.p) if self.p else ()


def families(models: list[str]) -> list[Family]:
    """The model families named in `models`, by zoo name (module docstring)."""
    found: dict[str, dict[str, str]] = {}
    for model in models:
        match = _ROLE.match(model)
        if match:
            role = "p" if match[1] == "p" else "c" if match[1] == "c" else f"s{int(match[2]):04d}"
            found.setdefault(match[3], {})[role] = model
    return [
        Family(
            roles.get("p"),
            roles.get("c"),
            tuple(roles[k] for k in sorted(r for r in roles if r.startswith("s"))),
        )
        for roles in found.values()
    ]


def _role_name(model: str) -> str:
    """A zoo model's short name in the paper's notation: P, C or S<k>."""
    match = _ROLE.match(model)
    return model if match is None else match.group(1).upper()


def verdict(low: float, high: float, against_high: float | None = None) -> str:
    """Holds when the interval [low, high] lies above 0; opposite when it (or the interval of
    the statistic that tests the reverse, whose upper end is `against_high`) lies below 0."""
    if low > 0:
        return "holds"
    return "opposite" if (high if against_high is None else against_high) < 0 else "not shown"


def _interval(replicates: np.ndarray) -> tuple[float, float]:
    tail = 100.0 * (1.0 - LEVEL) / 2.0
    low, high = np.percentile(replicates, [tail, 100.0 - tail])
    return float(low), float(high)


# --- data: a cell as a (samples x seeds) array -------------------------------------------------


def _cell_matrix(results: pd.DataFrame, diverged_as: float) -> tuple[np.ndarray, np.ndarray]:
    """(sample ids, samples x seeds errors) of one cell; incomplete samples are dropped.
    Diverged trials (error +inf) become `diverged_as`."""
    errors = results["error"].where(np.isfinite(results["error"]), diverged_as)
    wide = errors.groupby([results["sample"], results["seed"]]).first().unstack("seed")
    wide = wide.dropna()
    return wide.index.to_numpy(), wide.to_numpy(float)


def _cell_error_boot(matrix: np.ndarray, n_boot: int, rng: np.random.Generator) -> np.ndarray:
    """(1 + n_boot,) cell errors E: the data's, then one per resample of the seeds."""
    n_seeds = matrix.shape[1]
    picks = np.vstack([np.arange(n_seeds), rng.integers(0, n_seeds, size=(n_boot, n_seeds))])
    means = matrix[:, picks].mean(axis=2)  # samples x (1 + n_boot)
    return means.min(axis=0)


def _auc_rows(trials: np.ndarray) -> np.ndarray:
    """auc_10 of each row of a (B, n) error array (+inf = diverged)."""
    dtop = dtop1_rows(trials)
    return np.clip(1.0 - dtop / AUC_MAX_POINTS, 0.0, 1.0).mean(axis=1)


# --- the claims ----------------------------------------------------------------------------------


class _Claims:
    """Builds the table's rows for one study's results (with `error`, +inf for diverged)."""

    def __init__(self, results: pd.DataFrame, options: Options, study: str) -> None:
        self.results = results
        self.options = options
        self.study = study
        self.rows: list[dict] = []

    def cell(self, model: str, optimizer: str, epochs: int) -> pd.DataFrame:
        r = self.results
        return r[(r["model"] == model) & (r["optimizer"] == optimizer) & (r["epochs"] == epochs)]

    def epochs_of(self, model: str, optimizer: str) -> set[int]:
        r = self.results
        return set(r.loc[(r["model"] == model) & (r["optimizer"] == optimizer), "epochs"])

    def boot_errors(self, cells: list[tuple[str, str, int]], *key: object) -> dict | None:
        """{cell: (1 + n_boot,) cell errors}, or None when a cell has no complete sample or
        fewer than MIN_SEEDS seeds."""
        rng = np.random.default_rng(self.options.rng_seed("claims", *key))
        out = {}
        for cell in cells:
            _, matrix = _cell_matrix(self.cell(*cell), tables.DIVERGED_ERROR)
            if matrix.size == 0 or matrix.shape[1] < MIN_SEEDS:
                return None
            out[cell] = _cell_error_boot(matrix, self.options.n_boot, rng)
        return out

    def add(
        self, claim: str, optimizer, epochs, models, values: np.ndarray, cells, against=None
    ) -> None:
        """One row: values[0] is the estimate, values[1:] the bootstrap replicates. `against`
        (same layout) is the statistic whose interval below 0 makes the verdict "opposite"
        (default: `values` itself)."""
        low, high = _interval(values[1:])
        against_high = high if against is None else _interval(against[1:])[1]
        subset = pd.concat([self.cell(*c) for c in cells])
        self.rows.append(
            {
                "claim": claim,
                "paper": PAPER[claim].format(chain=" -> ".join(map(_role_name, models))),
                "study": self.study,
                "optimizer": optimizer,
                "epochs": epochs,
                "models": " vs ".join(models) if claim != "d" else " < ".join(models),
                "statistic": STATISTIC[claim],
                "estimate": float(values[0]),
                "low": float(low),
                "high": float(high),
                "verdict": verdict(low, high, against_high),
                "trials": int(len(subset)),
                "diverged": int((subset["status"] == "diverged").sum()),
            }
        )

    def edf(self, fam: Family) -> None:
        for optimizer in sorted(set(self.results["optimizer"])):
            for epochs in sorted(
                self.epochs_of(fam.p, optimizer) & self.epochs_of(fam.c, optimizer)
            ):
                cells = [(fam.p, optimizer, epochs), (fam.c, optimizer, epochs)]
                (ids_p, m_p), (ids_c, m_c) = (_cell_matrix(self.cell(*c), np.inf) for c in cells)
                shared = np.intersect1d(ids_p, ids_c)
                if shared.size < MIN_EDF_SAMPLES:
                    continue
                m_p, m_c = m_p[np.isin(ids_p, shared)], m_c[np.isin(ids_c, shared)]
                rng = np.random.default_rng(self.options.rng_seed("claims-a", optimizer, epochs))
                picks = np.vstack(
                    [
                        np.arange(shared.size),
                        rng.integers(0, shared.size, (self.options.n_boot, shared.size)),
                    ]
                )
                auc_p = _auc_rows(m_p[picks].reshape(len(picks), -1))
                auc_c = _auc_rows(m_c[picks].reshape(len(picks), -1))
                self.add("a", optimizer, epochs, (fam.c, fam.p), auc_c - auc_p, cells)

    def length(self, fam: Family) -> None:
        for optimizer in sorted(set(self.results["optimizer"])):
            lengths = sorted(self.epochs_of(fam.p, optimizer) & self.epochs_of(fam.c, optimizer))
            if len(lengths) < 2:
                continue
            short, long = lengths[0], lengths[-1]
            cells = [(m, optimizer, e) for m in (fam.p, fam.c) for e in (short, long)]
            e = self.boot_errors(cells, "b", optimizer)
            if e is None:
                continue
            gap_p = e[(fam.p, optimizer, short)] - e[(fam.p, optimizer, long)]
            gap_c = e[(fam.c, optimizer, short)] - e[(fam.c, optimizer, long)]
            self.add("b", optimizer, f"{short} vs {long}", (fam.c, fam.p), gap_p - gap_c, cells)

    def optimizer(self, fam: Family) -> None:
        both = [self.epochs_of(m, o) for m in (fam.p, fam.c) for o in ("adamw", "sgd")]
        lengths = sorted(set.intersection(*both))
        if not lengths:
            return
        cells = [(m, o, e) for m in (fam.p, fam.c) for o in ("adamw", "sgd") for e in lengths]
        e = self.boot_errors(cells, "c")
        if e is None:
            return
        diffs = [
            (e[(fam.p, "sgd", n)] - e[(fam.p, "adamw", n)])
            - (e[(fam.c, "sgd", n)] - e[(fam.c, "adamw", n)])
            for n in lengths
        ]
        epochs = ", ".join(map(str, lengths))
        self.add("c", "sgd - adamw", epochs, (fam.c, fam.p), np.mean(diffs, axis=0), cells)

    def stem(self, fam: Family) -> None:
        order = fam.stem_order
        if len(order) < 2:
            return
        for optimizer in sorted(set(self.results["optimizer"])):
            lengths = set.intersection(*(self.epochs_of(m, optimizer) for m in order))
            for epochs in sorted(lengths):
                cells = [(m, optimizer, epochs) for m in order]
                e = self.boot_errors(cells, "d", optimizer, epochs)
                if e is None:
                    continue
                steps = np.diff(np.vstack([e[c] for c in cells]), axis=0)
                self.add("d", optimizer, epochs, order, steps.min(axis=0), cells, steps.max(axis=0))


def claims_table(
    results: pd.DataFrame, options: Options | None = None, study: str = ""
) -> pd.DataFrame:
    """Every claim the results can test, one row per claim and panel (COLUMNS). `results` are
    `tables.with_errors(trials, options.metric)`: finished and diverged trials with `error`."""
    claims = _Claims(results, options or Options(), study)
    for fam in families(list(dict.fromkeys(results["model"]))):
        if fam.p and fam.c:
            claims.edf(fam)
            claims.length(fam)
            claims.optimizer(fam)
        claims.stem(fam)
    order = {k: i for i, k in enumerate(PAPER)}
    rows = sorted(claims.rows, key=lambda r: order[r["claim"]])
    return pd.DataFrame(rows, columns=COLUMNS)


def _here(row) -> str:
    return f"{row.estimate:+.3g} [{row.low:+.3g}, {row.high:+.3g}]"


def section_table(table: pd.DataFrame) -> pd.DataFrame:
    """The page's view: claim | paper | here (estimate, 95% interval) | verdict."""
    return pd.DataFrame(
        {
            "claim": table["claim"],
            "paper": table["paper"],
            "panel": [f"{r.optimizer}, {r.epochs} ep" for r in table.itertuples()],
            "models": table["models"],
            "statistic (unit)": table["statistic"],
            "here (estimate, 95% interval)": [_here(r) for r in table.itertuples()],
            "verdict": table["verdict"],
            "trials (diverged)": [f"{r.trials} ({r.diverged})" for r in table.itertuples()],
        }
    )


def markdown(table: pd.DataFrame) -> str:
    """The claims table as Markdown, for docs and the README."""
    lines = [
        "| claim | paper | study | panel | models | here (estimate, 95% interval) | verdict |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in table.itertuples():
        lines.append(
            f"| ({r.claim}) | {r.paper} | {r.study} | {r.optimizer}, {r.epochs} ep | "
            f"{r.models} | {_here(r)} | {r.verdict} |"
        )
    return "\n".join(lines) + "\n"


# the report section whose figure each claim reads
CLAIM_SECTION = {"a": "edf", "b": "length", "c": "optimizer", "d": "stem"}


def sections(table: pd.DataFrame, options: Options, drawn: set[str] | None = None) -> list[Section]:
    """The report page's "claims" section from `claims_table`'s rows (computed once per report:
    the page and summary.json show the same bootstrap), or nothing when the study tests no
    claim; with `drawn` (the report's sections), only the claims whose section is drawn."""
    if drawn is not None:
        table = table[table["claim"].map(CLAIM_SECTION).isin(drawn)]
    if table.empty:
        return []
    section = Section(
        "claims",
        "The paper's claims",
        "Each claim's statistic on this study, its 95% bootstrap interval "
        f"({options.n_boot} resamples) and verdict: holds when the interval lies on the "
        "claim's side of 0, opposite when on the other, otherwise not shown. Definitions: "
        "optbench/analysis/claims.py. Cell errors here are means over seeds, a diverged "
        f"trial counted as {tables.DIVERGED_ERROR:g}%.",
    )
    section.tables.append(("Claims", section_table(table)))
    return [section]


def main(argv: list[str] | None = None) -> int:
    """`python -m optbench.analysis.claims OUT.md REPORT_DIR...`: the claims of several reports
    (each folder's trials.csv) in one Markdown table."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) < 2:
        print("usage: python -m optbench.analysis.claims OUT.md REPORT_DIR...", file=sys.stderr)
        return 2
    out, folders = Path(args[0]), [Path(a) for a in args[1:]]
    parts = []
    for folder in folders:
        trials = pd.read_csv(folder / "trials.csv")
        study = str(trials["study"].iloc[0]) if len(trials) else folder.name
        parts.append(claims_table(tables.with_errors(trials), Options(), study))
    table = pd.concat(parts, ignore_index=True)
    out.write_text(markdown(table))
    print(out.read_text(), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
