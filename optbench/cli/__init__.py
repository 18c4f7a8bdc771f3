"""The `optbench` command line: `app.py` (the app, `main`, and how errors end it),
`study_commands.py` (run, status, cancel, and how every command reads a study),
`train_commands.py` (train, models), `optimizer_commands.py` (optimizers),
`report_commands.py` (report, compare),
`data_commands.py` (data pack) and `terminal_tables.py` (the tables run --dry-run and status
print). Thin wrappers: each parses flags and calls the library.
"""

from optbench.cli.app import app, main  # noqa: F401  (the console script is optbench.cli:main)
