"""The tensor policy's work per batch (issue 66): a fixed number of aten operations whatever
the batch size, counted with torch.profiler on the CPU (`tensor_policy.aten_ops`); a per-sample
loop is caught; the host's arithmetic is Pillow's to the last bit."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from optbench.data import tensor_ops
from optbench.data import tensor_policy as tp

POLICIES = ("pycls_v0", "rand-m9-mstd0.5-inc1")
MAX_OPS = 300  # issue 66: at most 300 operations per batch, the same at batch 8 and 256


def ops_per_batch(name: str, batch: int, size: int = 8) -> tuple[int, int]:
    """(ops called, with their sub-ops) of one policy call on a uint8 batch, after a first call
    (which makes the per-shape constants). The count does not depend on the image size (32 px,
    CIFAR's, gives the same: bench/tensor_policy.py); 8 px keeps the test fast."""
    policy = tp.tensor_policy(name, size)
    x = torch.randint(0, 256, (batch, 3, size, size), dtype=torch.uint8)
    g = torch.Generator().manual_seed(0)
    policy(x, g)
    return tp.aten_ops(lambda: policy(x, g))


def fixed_per_batch(name: str, large: int = 256) -> list[str]:
    """What is wrong with the policy's ops per batch: more than MAX_OPS at batch 8 or `large`,
    or more at `large` than at 8 (a per-sample or per-value loop); empty when nothing is."""
    counts = {batch: ops_per_batch(name, batch) for batch in (8, large)}
    wrong = [f"{calls} ops at batch {b}" for b, (calls, _) in counts.items() if calls > MAX_OPS]
    (calls_8, nested_8), (calls_large, nested_large) = counts[8], counts[large]
    # inside an op, torch may take another path by size (a zero fill, an index copy: measured
    # up to 7 sub-ops more at 256); a loop over the images adds hundreds
    if calls_large != calls_8 or nested_large > nested_8 + 16:
        wrong.append(f"ops grow with the batch: {counts}")
    return wrong


@pytest.mark.parametrize("name", POLICIES)
def test_the_policy_issues_a_fixed_number_of_ops_per_batch(name):
    assert fixed_per_batch(name) == []


def test_a_per_sample_loop_is_caught(monkeypatch):
    blend = tensor_ops._blend

    def per_sample(img, factor, flags, *args):
        return torch.cat(
            [
                blend(img[i : i + 1], factor[i : i + 1], flags[:, i : i + 1], *args)
                for i in range(len(img))
            ]
        )

    monkeypatch.setattr(tensor_ops, "_blend", per_sample)
    planted = fixed_per_batch("rand-m9-mstd0.5-inc1", large=48)  # 256 is slow to profile
    assert any("grow with the batch" in line for line in planted), planted
    assert any("at batch 48" in line for line in planted), planted


def test_rotation_matrices_are_pillows_to_the_bit():
    """Image.rotate's coefficients, round(math.cos(angle), 15) and so on in Python, made for the
    whole batch in numpy (`_round15` reproduces Python's round exactly)."""
    rng = np.random.default_rng(0)
    degrees = np.concatenate(
        [rng.uniform(-30, 30, 20_000), np.linspace(-30, 30, 6_001), [0.0, -0.0, 90.0, 180.0]]
    )
    got = tensor_ops._rotation(degrees, 37, 53)
    cx, cy = 53 / 2.0, 37 / 2.0
    for deg, row in zip(degrees.tolist(), got.tolist(), strict=True):
        angle = -math.radians(deg % 360.0)
        a, b = round(math.cos(angle), 15), round(math.sin(angle), 15)
        d, e = round(-math.sin(angle), 15), a
        want = [a, b, a * -cx + b * -cy + 0.0 + cx, d, e, d * -cx + e * -cy + 0.0 + cy]
        assert row == want, deg
    values = np.concatenate([rng.uniform(-1, 1, 50_000), np.cos(np.radians(degrees))])
    assert tensor_ops._round15(values).tolist() == [round(v, 15) for v in values.tolist()]


def test_the_warp_in_chunks_gives_the_same_images(monkeypatch):
    """Large images are warped a few at a time (WARP_VALUES): the same pixels as in one go."""
    policy = tp.tensor_policy("rand-m9-mstd0.5-inc1", 16)
    x = torch.randint(0, 256, (20, 3, 16, 16), dtype=torch.uint8)
    whole, draws = policy(x, torch.Generator().manual_seed(2), return_draws=True)
    assert (draws.resample >= 0).sum() > 5  # affine ops drawn
    monkeypatch.setitem(tensor_ops.WARP_VALUES, "cpu", 3 * 16 * 3 * 16 * 16)  # 3 images a chunk
    chunked, _ = policy(x, torch.Generator().manual_seed(2))
    assert torch.equal(chunked, whole)
