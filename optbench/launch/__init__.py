"""Executors that run a study's pending trials: a local process pool (local.py), SLURM job
arrays (slurm.py)."""
