"""bench/step_parts.py's reading of torch's sync debug mode (used on CUDA only, so tested here on
the warnings it reads): each sync counted at the line that made it, the busiest lines first."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import step_parts  # noqa: E402

SYNC = "called a synchronizing CUDA operation"  # c10/cuda/CUDAFunctions.cpp's TORCH_WARN


def caught(message: str, filename: str, lineno: int) -> warnings.WarningMessage:
    return warnings.WarningMessage(message, UserWarning, filename, lineno)


def test_syncs_are_counted_at_their_lines_busiest_first():
    steps, epochs = 30, 3
    records = (
        [caught(SYNC, "/x/optbench/data/augment.py", 127) for _ in range(steps)]
        + [caught(SYNC, "/x/optbench/train/epoch.py", 197) for _ in range(epochs)]
        + [caught("TypedStorage is deprecated", "/x/torch/storage.py", 1)]  # not a sync
    )
    assert step_parts.sync_sites(records) == {"augment.py:127": steps, "epoch.py:197": epochs}


def test_the_evaluation_is_timed_at_each_chunking_and_says_whether_their_errors_agree(
    tmp_path, monkeypatch
):
    import torch

    from optbench.data.datasets import load_dataset

    cfg = step_parts.study_config("quickstart", "vit_p_w64_16px")
    stepper, compute, _ = step_parts.stepper_for(cfg, "cpu", None, tmp_path)
    real, seen, counted = step_parts.count_errors, [], []

    def counting(logits_of, batches, augment, compute):
        seen.append(batches.local_batch)
        counted.append(real(logits_of, batches, augment, compute))
        return counted[-1]

    monkeypatch.setattr(step_parts, "count_errors", counting)
    found = step_parts.evaluation_rates(stepper, compute, trial_img_s=1000.0, repeats=1)
    assert (
        seen == [cfg.batch_size] * 2 + [4 * cfg.batch_size] * 2
    )  # an untimed pass, a timed one (repeats=1)
    assert found["images"] == len(load_dataset(cfg.dataset).val_y)
    assert found["passes_per_epoch"] == 2  # the raw weights and the EMA (the recipe keeps one)
    rates, shares = found["img_s"], found["share_of_epoch"]
    assert set(rates) == set(shares) == {"1", "4"} and min(rates.values()) > 0
    # what the untimed passes counted, whichever way a CPU's kernels round at each chunking
    assert found["counts_equal"] == torch.equal(counted[0], counted[2])

    # a chunking that counts other errors is said
    monkeypatch.setattr(
        step_parts,
        "count_errors",
        lambda logits_of, batches, augment, compute: torch.tensor([[batches.local_batch, 0, 1]]),
    )
    assert not step_parts.evaluation_rates(stepper, compute, 1000.0, repeats=1)["counts_equal"]
    # the class folders' loaders evaluate in their own batches: not measured
    monkeypatch.setattr(stepper.parts, "batches", object())
    assert step_parts.evaluation_rates(stepper, compute, 1000.0) is None
