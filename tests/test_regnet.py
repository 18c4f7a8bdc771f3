"""The paper's RegNetYs: stages, params and flops as this test derives them from the pycls configs'
definitions (configs/vitconv_baselines/regnety/ on pycls's `vitconfigs` branch) by its own
arithmetic, and their train/test sizes in the timm cfg."""

from __future__ import annotations

import math

import numpy as np
import pytest
import timm
from torch import nn

from optbench.models.complexity import model_complexity
from optbench.models.zoo import model_defaults

# The configs, as pycls writes them: (stages or generator, group width, train size, test size).
ANYNET_1GF = dict(depths=[1, 4, 10, 3], widths=[40, 120, 328, 904], group_w=4)
REGNET_4GF = dict(depth=26, w0=88, wa=30.3, wm=2.404, group_w=32)
ANYNET_16GF = dict(depths=[2, 7, 18, 2], widths=[168, 336, 896, 2128], group_w=56)
SIZES = {"regnety_1gf": (232, 262), "regnety_4gf": (240, 272), "regnety_16gf": (256, 292)}


def regnet_stages(depth: int, w0: int, wa: float, wm: float, group_w: int, q: int = 8):
    """RegNet's generator (Radosavovic et al. 2020): per-block widths w0 + wa * j, snapped to
    w0 * wm^k, quantized to q; one stage per distinct width; then each width rounded to a multiple
    of its group width (bottleneck multiplier 1)."""
    cont = w0 + wa * np.arange(depth)
    ks = np.round(np.log(cont / w0) / np.log(wm))
    per_block = (np.round(w0 * wm**ks / q) * q).astype(int)
    widths, depths = np.unique(per_block, return_counts=True)
    widths = [int(max(group_w, round(w / group_w) * group_w)) for w in widths]
    return dict(depths=depths.tolist(), widths=widths, group_w=group_w)


def anynet_counts(depths, widths, group_w, size, stem_w=32, se_r=0.25, classes=1000):
    """(params, multiply-adds) of a RegNetY: 3x3/2 stem + BN; per block 1x1 -> grouped 3x3
    (stride at the stage's first block) -> SE (w_in / 4, with biases) -> 1x1, each conv + BN,
    1x1/s + BN shortcut when the shape changes; average pool; linear classifier."""

    def out(h, stride):  # k 3 with padding 1, or k 1: same output size
        return (h - 1) // stride + 1

    h = out(size, 2)
    params, flops = 27 * stem_w + 2 * stem_w, 27 * stem_w * h * h
    w_in = stem_w
    for depth, w in zip(depths, widths, strict=True):
        for i in range(depth):
            stride = 2 if i == 0 else 1
            h_out = out(h, stride)
            w_se = round(w_in * se_r)
            block_params = (
                w_in * w
                + 2 * w  # 1x1 a + BN
                + 9 * w * group_w
                + 2 * w  # grouped 3x3: w / group_w groups of group_w inputs
                + (w * w_se + w_se)
                + (w_se * w + w)  # SE
                + w * w
                + 2 * w  # 1x1 c + BN
            )
            block_flops = (
                w_in * w * h * h + 9 * w * group_w * h_out * h_out + 2 * w * w_se + w * w * h_out**2
            )
            if stride != 1 or w_in != w:
                block_params += w_in * w + 2 * w
                block_flops += w_in * w * h_out * h_out
            params, flops = params + block_params, flops + block_flops
            w_in, h = w, h_out
    return params + w_in * classes + classes, flops + w_in * classes


DEFINITIONS = {
    "regnety_1gf": ANYNET_1GF,
    "regnety_4gf": regnet_stages(**REGNET_4GF),
    "regnety_16gf": ANYNET_16GF,
}


def test_the_4gf_generator_gives_four_stages():
    assert len(DEFINITIONS["regnety_4gf"]["depths"]) == 4
    assert sum(DEFINITIONS["regnety_4gf"]["depths"]) == REGNET_4GF["depth"]


@pytest.mark.slow
@pytest.mark.parametrize("name", list(DEFINITIONS))
def test_stages_match_the_definition(name):
    d = DEFINITIONS[name]
    model = timm.create_model(name)
    stages = [model.s1, model.s2, model.s3, model.s4]
    assert [len(list(s.children())) for s in stages] == d["depths"]
    assert [s.b1.conv3.conv.out_channels for s in stages] == d["widths"]
    for s in stages:
        conv2 = s.b1.conv2.conv
        assert conv2.in_channels // conv2.groups == d["group_w"]
        assert isinstance(s.b1.se.fc1, nn.Conv2d)  # SE on (RegNetY)
    assert model.stem.conv.out_channels == 32 and model.stem.conv.stride == (2, 2)


@pytest.mark.parametrize("name", list(DEFINITIONS))
@pytest.mark.slow  # builds and counts full-size RegNetYs: over half a second here
def test_params_and_flops_equal_the_derived_counts(name):
    train, _ = SIZES[name]
    params, flops = anynet_counts(**DEFINITIONS[name], size=train)
    c = model_complexity(name, num_classes=1000, in_chans=3, img_size=train)
    assert (c["params"], c["flops"]) == (params, flops)


@pytest.mark.parametrize(
    ("name", "gf"), [("regnety_1gf", 1.0), ("regnety_4gf", 4.0), ("regnety_16gf", 16)]
)
def test_their_names_give_their_flops_at_the_training_size(name, gf):
    train, _ = SIZES[name]
    _, flops = anynet_counts(**DEFINITIONS[name], size=train)
    assert abs(math.log(flops / 1e9 / gf)) < math.log(1.05)


@pytest.mark.parametrize("name", list(SIZES))
def test_cfg_records_train_size_and_the_test_resize(name):
    train, test = SIZES[name]
    d = model_defaults(name)
    assert (d.img_size, d.in_chans, d.num_classes) == (train, 3, 1000)
    cfg = timm.get_pretrained_cfg(name)
    # timm's evaluation transform resizes the shorter side to floor(size / crop_pct), crops size
    assert math.floor(train / cfg.crop_pct) == test
    assert not cfg.fixed_input_size  # a RegNet takes any input size


@pytest.mark.parametrize(
    "name", ["vit_p_1gf", "vit_c_18gf", "vit_s2_4gf", "dhvt_tiny_imagenet_p16"]
)
def test_224_px_models_evaluate_on_the_centre_224_of_256(name):
    cfg = timm.get_pretrained_cfg(name)
    assert cfg.input_size[-1] == 224 and math.floor(224 / cfg.crop_pct) == 256


@pytest.mark.parametrize("name", ["vit_p_w192_32px", "dhvt_tiny_cifar_p4", "vit_c_w64_16px"])
def test_small_models_evaluate_on_the_whole_image(name):
    assert timm.get_pretrained_cfg(name).crop_pct == 1.0
