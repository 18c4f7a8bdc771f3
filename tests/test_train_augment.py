"""Batched on-device augmentation, auto-augment policies and PCA lighting."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from PIL import Image
from pydantic import ValidationError
from timm.data import auto_augment as timm_aa

from optbench.data.augment import (
    BatchAugment,
    input_stats,
    pca_lighting,
    random_crop_flip,
    random_erasing,
    timm_policy,
)
from optbench.spec.recipe import Recipe


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
    recipe = Recipe(auto_augment="randaugment", augment_group=4)
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


def seeded(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def test_v0_is_timms_v0_policy():
    hparams = {"translate_const": 100, "img_mean": (124, 116, 104), "interpolation": Image.BICUBIC}
    ours, timms = timm_policy("v0", 3, 224), timm_aa.auto_augment_transform("v0", hparams)

    def table(t):
        return [[(op.name, op.prob, op.magnitude) for op in sub] for sub in t.policy]

    assert table(ours) == table(timms) and len(table(ours)) == 25
    rng = np.random.default_rng(0)
    black = 0
    for i in range(150):  # the same draws give the same image
        img = Image.fromarray(rng.integers(0, 256, (20, 20, 3), dtype=np.uint8))
        seeded(i)
        mine = np.asarray(ours(img))
        seeded(i)
        try:
            theirs = np.asarray(timms(img))
        except ValueError:  # timm's 0-bit posterize, which Pillow >= 13.0 rejects (pyproject)
            black += 1
            assert not mine.any()
            continue
        assert np.array_equal(mine, theirs)
    assert black > 0  # the sub-policy [Posterize 0.8 @ 2, Solarize 0.6 @ 10] was drawn


def test_pycls_v0_is_v0_with_pyclss_resampling_fill_and_posterize_floor():
    v0, pycls = timm_policy("v0"), timm_policy("pycls_v0")
    pairs = [
        (a, b)
        for sa, sb in zip(v0.policy, pycls.policy, strict=True)
        for a, b in zip(sa, sb, strict=True)
    ]
    assert all((a.name, a.prob, a.magnitude) == (b.name, b.prob, b.magnitude) for a, b in pairs)
    # pycls/datasets/augment.py: WARP_PARAMS fill (128, 128, 128), bilinear; POSTERIZE_MIN 1
    assert all(
        b.kwargs == {"fillcolor": (128, 128, 128), "resample": Image.BILINEAR} for _, b in pairs
    )
    posterize = [(a, b) for a, b in pairs if a.name == "Posterize"]
    for a, b in posterize:  # pycls: bits = max(POSTERIZE_MIN, int(magnitude/10 * 4))
        assert b.level_fn(b.magnitude, {}) == (max(1, int(b.magnitude / 10 * 4)),)
        assert a.level_fn(a.magnitude, {}) == (int(a.magnitude / 10 * 4),)
    assert sorted(a.magnitude for a, _ in posterize) == [2, 6]


@pytest.mark.parametrize(
    "name",
    ["v0", "v0r", "original-mstd0.5", "3a", "rand-m9-mstd0.5-inc1", "rand-n3-m7-p0.3-mmax15"],
)
def test_every_timm_policy_string_the_recipe_accepts_builds(name):
    recipe = Recipe(auto_augment=name)
    policy = timm_policy(recipe.auto_augment)
    seeded(0)
    assert policy(Image.new("RGB", (8, 8), (40, 90, 200))).size == (8, 8)


@pytest.mark.parametrize("name", ["v9", "rand-m9-x", "rand-q1", "augmix-m5", "v0-mstd"])
def test_bad_policy_names_are_rejected_in_the_recipe(name):
    with pytest.raises(ValidationError, match=f"auto_augment '{name}'"):
        Recipe(auto_augment=name)


def test_torchvision_policy_keys_belong_to_torchvision_policies():
    with pytest.raises(ValidationError, match="autoaugment_policy 'cifar10' is read only"):
        Recipe(preset="paper", autoaugment_policy="cifar10")
    assert Recipe(preset="paper", auto_augment="autoaugment", autoaugment_policy="cifar10")


@pytest.mark.parametrize("chans", [1, 3])
def test_timm_policies_augment_each_image_on_its_own(chans):
    recipe = Recipe(auto_augment="pycls_v0", translate=0, hflip=False)
    aug = BatchAugment(
        recipe,
        num_classes=10,
        mean=(0.5,) * chans,
        std=(0.25,) * chans,
        device=torch.device("cpu"),
        in_chans=chans,
        img_size=12,
    )
    x = images(n=1, c=chans).repeat(32, 1, 1, 1)  # one image, 32 times
    seeded(3)
    out = aug.apply_policy(x)
    assert out.shape == x.shape and out.dtype == torch.uint8
    assert len({o.numpy().tobytes() for o in out}) > 8  # independent draws per image
    seeded(3)
    assert torch.equal(aug.apply_policy(x), out)


def test_pca_lighting_adds_pyclss_alexnet_noise_per_image():
    # pycls (ImageNet, RGB): eigenvalues and eigenvectors (columns), PCA_STD 0.1
    eigval = torch.tensor([0.2175, 0.0188, 0.0045], dtype=torch.float64)
    eigvec = torch.tensor(
        [[-0.5675, 0.7192, 0.4009], [-0.5808, -0.0045, -0.8140], [-0.5836, -0.6948, 0.4203]],
        dtype=torch.float64,
    )
    torch.manual_seed(0)
    x = torch.full((20000, 3, 2, 2), 100.0)
    out = pca_lighting(x, 0.1) - 100.0
    shift = out[:, :, 0, 0].double() / 255.0  # in [0, 1] units, as pycls adds it
    assert torch.allclose(out, out[:, :, :1, :1].expand_as(out))  # one shift per image
    # pycls: shift = eigvec @ (alpha * eigval), alpha ~ N(0, 0.1^2) per image and direction
    alpha = torch.linalg.solve(eigvec, shift.T).T / eigval
    assert alpha.mean(0).abs().max() < 0.003
    assert torch.allclose(alpha.std(0), torch.full((3,), 0.1, dtype=torch.float64), rtol=0.03)
    assert torch.corrcoef(alpha.T).sub(torch.eye(3, dtype=torch.float64)).abs().max() < 0.03
    assert torch.equal(pca_lighting(x, 0.0), x)


def test_lighting_only_where_the_data_takes_it_and_imagenet_normalization():
    recipe = Recipe(lighting_std=0.1, translate=0, hflip=False)
    x = images()
    for pca, changes in ((False, False), (True, True)):
        aug = BatchAugment(
            recipe,
            num_classes=10,
            mean=(0.5,) * 3,
            std=(0.25,) * 3,
            device=torch.device("cpu"),
            pca_lighting=pca,
        )
        torch.manual_seed(0)
        plain = (x.float() / 255 - 0.5) / 0.25
        assert (not torch.allclose(aug.inputs(x), plain, atol=1e-5)) == changes
    deit = Recipe(preset="deit")
    assert input_stats(deit, (0.1,) * 3, (0.2,) * 3) == (
        (0.485, 0.456, 0.406),
        (0.229, 0.224, 0.225),
    )
    (mean,), (std,) = input_stats(deit, (0.1,), (0.2,))
    assert mean == pytest.approx((0.485 + 0.456 + 0.406) / 3)
    assert input_stats(Recipe(), (0.1,), (0.2,)) == ((0.1,), (0.2,))
