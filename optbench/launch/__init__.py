"""The SLURM executor (slurm.py); the other executors and their protocol are in optbench.executors."""
