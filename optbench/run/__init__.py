"""`optbench run`'s side of a study. The executors (optbench/executors) run the jobs; the
trainer (optbench/train) is what a job runs.

- `preflight.py`: what a study needs from this install and machine, checked before a command
  writes anything (models, datasets and their files, devices, storage), and `run`'s first notes.
- `measuring.py`: `--dry-run --measure`, each training configuration timed on this machine.
- `driver.py`: `run_study`, its phases in order under the study's lock: catch up, prepare,
  submit, follow (and a sequential study's looks between rounds).
- `catch_up.py`: record what ended while no driver followed, before anything runs.
- `attempts.py`: whose a result file is (the one rule), recording an attempt's end, which
  failed attempts are retried.
- `following.py`: hand the jobs to the executor and record each trial as its job ends; end a
  stalled trial.
- `stop_signals.py`: SIGINT, SIGTERM and SIGHUP stop a run as Ctrl-C does.
- `messages.py`: what the driver tells the user beside the table (failed trials, a look that
  waits, a model's multiply-adds).
- `rounds.py`: a sequential study's rounds and looks (a `decide:` block);
  `expected_size.py`: `--dry-run`'s expected size of a panel from an earlier report's
  estimate, by the function of it that the earlier study's law maps onto the size.
- `locks.py`: one driver per study, and none while an earlier driver's workers write.
- `progress.py`: the live table and log lines; `console.py`: the rich console they print
  through (strings shown as text, never markup).
"""
