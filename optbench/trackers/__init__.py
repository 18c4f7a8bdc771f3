"""Where a trial's epoch lines go besides metrics.jsonl, the source of truth, as the study's
`tracking:` block (spec/tracking.py) sets it: the MLflow and W&B runs (`backends.py`), a trial's
tracker run fed off the training thread (`trial_run.py`: `TrialTracker`) and completed by the
driver after an outage (`repair.py`), TensorBoard event files (`tensorboard.py`), and the one
place a trial gets its sinks (`sinks.py`: `epoch_sinks`).
"""
