"""The report of a study's finished trials: `writer.py` (`write_report`: summary.json,
trials.csv, the figures and index.html of one study; `sections.py`: the page's sections, each
with its figures, tables and notes) from
- the numbers: `edf.py` (EDF math of one cell), `stats.py` (bootstrap and friends), `frames.py`
  (the tables, as frames, computed from the trials frame: panels, cell errors, stability, peak),
  `summary.py` (summary.json), `claims.py` (the paper's claims, tested: each kind's statistic), `looks.py` (a
  sequential study's look records, their lines, the claims at their last looks),
  `sequential.py` (the sequential rule: spending, boundaries, outcomes), `stop_estimates.py`
  (the estimates at a panel's stop: stagewise-ordering median-unbiased estimate and interval,
  Whitehead's bias-adjusted mean), `tunability.py` (the
  expected best error after k (lr, wd) samples);
- what is shown: `figures.py` (each figure from a trials frame, the public API), matplotlib's
  drawing of precomputed data: `drawing.py` (what every figure shares: grid, legend, colours),
  `drawing_samples.py` (EDF, scatter), `drawing_cells.py` (length, optimizer, stem),
  `drawing_curves.py` (training curves, tunability, looks); `claims_page.py` (the claims in
  words), `ranking.py` (a declared ranking's order from its pairs: places, ties, its table and
  line), `page.py` (index.html), `trials_file.py` (trials.csv and trials.parquet);
- and `compare.py` (two reports, trial by trial), `synthetic.py` (trials of known
  distributions, for tests and benchmarks).
"""
