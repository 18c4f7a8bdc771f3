"""The contract between the driver and the workers, which both sides import: what a trial is
and how it is run (`config.py`: `TrainConfig`, `Execution`, `TrialResult`), the job that hands
it to a worker (`jobs.py`: `TrialJob`, `PopulationJob`), and the result files a worker hands
back (`results.py`: result.json, metrics.jsonl, error.log, read as untrusted input), and where
a trial's seconds went (`timing.py`: result.json's `timing`, the clock that times its parts).

Plain data: nothing here imports torch or torchvision (tests/test_imports.py), so the driver,
the store and the report read it without loading the trainer.
"""
