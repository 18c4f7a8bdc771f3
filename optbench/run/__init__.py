"""`optbench run`'s side of a study. The executors (optbench/executors) run the jobs; the
trainer (optbench/train) is what a job runs.

- `driver.py`: `run_study` catches up, prepares, hands jobs to an executor, records each
  result file as its job ends.
- `rounds.py`: a sequential study's rounds and looks (a `decide:` block).
- `locks.py`: one driver per study, and none while an earlier driver's workers write.
- `progress.py`: the live table and log lines; `console.py`: the rich console they print
  through (strings shown as text, never markup).
"""
