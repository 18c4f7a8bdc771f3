"""The decision engine: what a study's trials show, as numbers and verdicts, which the driver
(run/rounds.py: a sequential study's looks) and the report (report/: pages, figures, tables)
both read; nothing here draws or writes a page. In the order the numbers flow:
`edf.py` (EDF math of one cell), `frames.py` (the tables, as frames, computed from the trials
frame: panels, cell errors, stability, peak), `stats.py` (bootstrap and friends),
`tunability.py` (the expected best error after k (lr, wd) samples), `summary.py` (summary.json's
numbers: per cell, between models, the evidence), `sequential.py` (the sequential rule:
spending, boundaries, outcomes), `stop_estimates.py` (the estimates at a panel's stop that
account for its stopping), `claims.py` (the paper's claims, tested: each kind's
statistic), `looks.py` (a sequential study's look records, their lines, the claims at their
last looks), `ranking.py` (a declared ranking's places and ties from its pairs).
"""
