"""DHVT as its official code builds it (github ArieSeirack/DHVT, vision_transformer.py)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from optbench.models import create_model
from optbench.models.dhvt import DAFF, DHVT, HeadTokenAttention

# Parameter counts of the official models, external reference numbers: each official factory
# (`dhvt_tiny_cifar_patch4(num_classes=100)` ...) instantiated on timm 0.4.12 and counted with
# sum(p.numel() for p in model.parameters()); CIFAR-100 100 classes, ImageNet 1000, DomainNet 345.
OFFICIAL_PARAMS = {
    "dhvt_tiny_cifar_p4": 6_008_650,  # dhvt_tiny_cifar_patch4
    "dhvt_small_cifar_p4": 23_425_450,  # dhvt_small_cifar_patch4
    "dhvt_tiny_cifar_p2": 5_845_162,  # dhvt_tiny_cifar_patch2
    "dhvt_small_cifar_p2": 22_766_698,  # dhvt_small_cifar_patch2
    "dhvt_tiny_imagenet_p16": 6_267_334,  # dhvt_tiny_imagenet_patch16
    "dhvt_small_imagenet_p16": 24_040_606,  # dhvt_small_imagenet_patch16
    "dhvt_tiny_domainnet_p16": 6_105_975,  # dhvt_tiny_domain_patch16
    "dhvt_small_domainnet_p16": 23_788_431,  # dhvt_small_domain_patch16
}
CLASSES = {"cifar": 100, "imagenet": 1000, "domainnet": 345}


@pytest.mark.parametrize("name", list(OFFICIAL_PARAMS))
@pytest.mark.slow  # builds the official-size DHVTs: over half a second here
def test_parameter_counts_equal_the_official_models(name):
    size = 32 if "cifar" in name else 224
    with torch.device("meta"):
        model = create_model(
            name, num_classes=CLASSES[name.split("_")[2]], in_chans=3, img_size=size
        )
    assert sum(p.numel() for p in model.parameters()) == OFFICIAL_PARAMS[name]


def test_daff_convs_have_biases_and_the_head_token_norm_pytorchs_eps():
    daff = DAFF(16, 64)
    convs = [m for m in daff.modules() if isinstance(m, nn.Conv2d)]
    assert len(convs) == 3 and all(c.bias is not None for c in convs)
    attn = HeadTokenAttention(16, 4)
    assert attn.head_norm.eps == 1e-5 and attn.head_norm.normalized_shape == (4,)


def test_block_and_final_layernorms_have_eps_1e_6():
    model = DHVT(img_size=16, patch_size=4, in_chans=1, num_classes=5, dim=32, depth=2, num_heads=4)
    head_norms = {id(b.attn.head_norm) for b in model.blocks}
    others = [m for m in model.modules() if isinstance(m, nn.LayerNorm) and id(m) not in head_norms]
    assert len(others) == 2 * 2 + 1 and all(m.eps == 1e-6 for m in others)


def test_stochastic_depth_rises_linearly_to_the_rate_over_the_blocks():
    model = DHVT(dim=32, depth=5, num_heads=4, drop_path_rate=0.2)
    rates = [getattr(b.drop_path, "drop_prob", 0.0) for b in model.blocks]
    assert rates == pytest.approx(torch.linspace(0, 0.2, 5).tolist())
