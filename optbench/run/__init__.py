"""`optbench run`'s side of a study: the driver (`driver.py`: `run_study` catches up, prepares,
hands jobs to an executor, records each result file as its job ends), the locks that keep one
driver per study (`locks.py`), the live table and log lines (`progress.py`) and the rich
console they print through (`console.py`). The executors (optbench/executors) run the jobs;
the trainer (optbench/train) is what a job runs.
"""
