"""Batched on-device augmentation."""

from __future__ import annotations

import numpy as np
import torch

from optbench.spec import Recipe
from optbench.train.augment import BatchAugment, random_crop_flip, random_erasing


def images(n: int = 16, c: int = 3, size: int = 12) -> torch.Tensor:
    return torch.randint(0, 256, (n, c, size, size), generator=torch.Generator().manual_seed(0)).to(
        torch.uint8
    )


def windows(img: torch.Tensor, pad: int) -> torch.Tensor:
    """Every HxW window of the zero-padded image: (C, 2p+1, 2p+1, H, W)."""
    h, w = img.shape[-2:]
    padded = torch.nn.functional.pad(img, (pad, pad, pad, pad))
    return padded.unfold(1, h, 1).unfold(2, w, 1)


def is_window(out: torch.Tensor, img: torch.Tensor, pad: int) -> bool:
    return bool((windows(img, pad) == out[:, None, None]).flatten(3).all(-1).all(0).any())


def test_crop_takes_a_window_of_the_zero_padded_image():
    torch.manual_seed(0)
    x = images()
    out = random_crop_flip(x, 3, hflip=False)
    assert out.shape == x.shape and out.dtype == torch.uint8
    assert all(is_window(out[i], x[i], 3) for i in range(len(x)))
    assert not torch.equal(out, x)
    assert torch.equal(random_crop_flip(x, 0, hflip=False), x)


def test_flip_mirrors_about_half_of_the_batch():
    torch.manual_seed(0)
    x = images(n=400)
    out = random_crop_flip(x, 0, hflip=True)
    flipped = (out == x.flip(-1)).flatten(1).all(1)
    kept = (out == x).flatten(1).all(1)
    assert (flipped | kept).all() and 150 < flipped.sum() < 250
    both = random_crop_flip(x[:20], 2, hflip=True)
    for i in range(20):
        assert is_window(both[i], x[i], 2) or is_window(both[i].flip(-1), x[i], 2)


def test_random_erasing_fills_one_rectangle_with_noise():
    torch.manual_seed(0)
    x = torch.zeros(64, 3, 16, 16)
    assert torch.equal(random_erasing(x, 0.0), x)
    out = random_erasing(x, 1.0)
    changed = out != 0
    assert changed.any(1).flatten(1).any(1).float().mean() > 0.9  # nearly every image erased
    for mask in changed.any(1):  # per image, over channels: the erased pixels form one rectangle
        rows, cols = mask.any(1).nonzero(), mask.any(0).nonzero()
        if len(rows):
            box = mask[rows.min() : rows.max() + 1, cols.min() : cols.max() + 1]
            assert box.all() and mask.sum() == box.numel()
            assert 0.02 * 256 * 0.5 <= box.numel() <= 256 / 3 * 1.5


def test_mixup_cutmix_gives_soft_targets_and_normalized_inputs():
    recipe = Recipe(preset="paper", auto_augment="none", translate=0, hflip=False)
    aug = BatchAugment(
        recipe, num_classes=10, mean=(0.5,) * 3, std=(0.25,) * 3, device=torch.device("cpu")
    )
    assert aug.soft_targets
    x, y = images(), torch.arange(16) % 10
    torch.manual_seed(0)
    out, target = aug(x, y)
    assert out.dtype == torch.float32 and target.shape == (16, 10)
    assert torch.allclose(target.sum(1), torch.ones(16))
    assert (target > 0).sum(1).min() >= 2  # mixed with another image's label, plus smoothing
    plain = BatchAugment(
        Recipe(translate=0, hflip=False),
        num_classes=10,
        mean=(0.5,) * 3,
        std=(0.25,) * 3,
        device=torch.device("cpu"),
    )
    xn, yn = plain(x, y)
    assert torch.equal(yn, y) and torch.allclose(xn, (x.float() / 255 - 0.5) / 0.25, atol=1e-5)


def test_policy_groups_are_deterministic_given_the_seed():
    recipe = Recipe(preset="deit", augment_group=4)
    aug = BatchAugment(
        recipe, num_classes=10, mean=(0.5,) * 3, std=(0.25,) * 3, device=torch.device("cpu")
    )
    x, y = images(), torch.arange(16) % 10
    runs = []
    for _ in range(2):
        torch.manual_seed(7)
        np.random.seed(7)
        runs.append(aug(x, y))
    assert torch.equal(runs[0][0], runs[1][0]) and torch.equal(runs[0][1], runs[1][1])
    assert runs[0][0].shape == (16, 3, 12, 12)
