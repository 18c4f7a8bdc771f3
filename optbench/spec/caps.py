"""The caps: numbers a study (or `optbench train`) may not exceed, each with its reason.

A number above one would exhaust the machine (memory, disk, hours of planning) before a single
trial trains; docs/faults.md gives each cap's reason, and so does the error (`check_cap`). The
schema modules (recipe.py, schema.py) and the YAML reader (yamlio.py) apply them.
"""

from __future__ import annotations

MAX_TRIALS = 10_000  # 50x the paper's largest study (192 trials per optimizer)
MAX_IMG_SIZE = 1024  # CIFAR held in memory at 1024 px: 60,000 x 3 MB = 190 GB
MAX_BATCH = 65_536  # the largest batches of the large-batch literature; 32x the paper's 2048
MAX_NAME = 100
MAX_POPULATION = 256  # members stacked in one process's memory (train/population.py)
MAX_TRANSLATE = 64  # zero padding: each batch is copied at (img_size + 2 x translate) squared
MAX_AUGMENT_OPS = 16  # RandAugment operations per image (torchvision's and timm's default: 2)
MAX_STUDY_BYTES = 1 << 20  # a study file is a few KB
MAX_YAML_NODES = 100_000  # a study has a few hundred; aliases could make billions
MAX_YAML_DEPTH = 64  # a study nests 4 levels; deeper would exhaust Python's stack
MAX_EPOCHS = 10_000  # 25x the paper's longest schedule (400 epochs)
MAX_STALL_TIMEOUT_S = 7 * 86_400  # a week: longer than SLURM's usual longest job time limits
SEED_BOUND = 2**63  # torch.manual_seed takes 64 bits; seeds are 0 .. 2**63 - 1

CAP_REASONS = {
    "trials": "each is planned and given a database row before anything runs (split the study)",
    "img_size": "small datasets are held whole in memory at this size; memory grows with its square",
    "batch_size": "one optimizer step holds the whole batch and its activations",
    "name": "it names the study's folder, and file systems cap a name at 255 bytes",
    "translate": "each batch is padded by it on every side: memory grows with its square",
    "augment_ops": "each operation runs on every image of every step (the usual is 2)",
    "epochs": "a schedule this long never ends (the paper's longest is 400)",
    "stall_timeout_s": "a trial is never waited on for longer (a week; null turns the timeout off)",
}


def check_cap(value: float, cap: float, what: str, unit: str = "") -> int:
    """`value` if it is at most `cap`, else a ValueError (for a pydantic validator) that gives
    the cap and its reason (CAP_REASONS[what])."""
    if value > cap:
        raise ValueError(f"{value}{unit} is above the cap of {cap} ({CAP_REASONS[what]})")
    return value
