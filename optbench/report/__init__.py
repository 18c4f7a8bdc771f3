"""The report of a study's finished trials, drawn and written from the decision engine's numbers
(decision/): `writer.py` (`write_report`: summary.json, trials.csv, the figures and index.html
of one study; `sections.py`: the page's sections, each with its figures, tables and notes)
from
- what is shown: `figures.py` (each figure from a trials frame, the public API), matplotlib's
  drawing of precomputed data: `drawing.py` (what every figure shares: grid, legend, colours),
  `drawing_samples.py` (EDF, scatter), `drawing_cells.py` (length, optimizer, stem),
  `drawing_curves.py` (training curves, tunability, looks); `claims_page.py` (the claims in
  words), `ranking_page.py` (a declared ranking's table and line), `tunability_page.py` (the
  tunability table as the page shows it), `summary_lines.py` (summary.json for the terminal:
  its table and evidence lines; an earlier report's read back), `page.py` (index.html),
  `trials_file.py` (trials.csv and trials.parquet);
- and `compare.py` (two reports, trial by trial), `synthetic.py` (trials of known
  distributions, for tests and benchmarks).
"""
