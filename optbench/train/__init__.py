"""The trainer: what a job runs, one trial or a population of trials, start to finish. Outside
this package only the entry points that run it import it (tests/test_imports.py); what it shares
with the driver is the contract in optbench/trial.

- `run_trial.py`: `run_trial`, one trial start to finish, and what `optbench train` checks
  first; `run_job`, a job's trials in this process.
- `population.py`: `run_population`, K trials trained together (`PopulationStepper`), with
  `population_optim.py`, its per-member AdamW, SGD and Lion.
- `stepper.py`: what the loop trains (the `Stepper` protocol, `SoloStepper`); `parts.py`: what
  a program's members share (batches, model, augmentation, loss).
- `loop.py`: the training loop (epochs, the divergence rule, records, the one crash path);
  `epoch.py`: one epoch; `evaluation.py`: every member's errors.
- `optim.py`: optimizer, weight-decay groups, lr schedule; `ema.py`: the weights' moving
  average; `precise_bn.py`: precise BatchNorm statistics.
- `state.py`: a trial's position and its save and restore; `checkpoint.py`: the checkpoint
  file, written atomically, read safely.
- `compute.py`: the device and its settings (bf16, channels_last, compile, fused kernels);
  `distributed.py`: DDP's process group; `signals.py`: how a running trial is asked to stop.
- `measure.py`: a short timed run of one configuration, for `--measure`.
"""
