"""The complexity counter against hand-computed counts, and the zoo against the paper's sizes."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from timm.models.vision_transformer import Attention
from torch import nn

from optbench.models.complexity import ComplexityCounter, count_complexity, model_complexity


def test_conv_counts_multiply_adds_and_outputs():
    model = nn.Conv2d(3, 8, 3, stride=2, padding=1)  # 10x10 -> 5x5
    c = count_complexity(model, (1, 3, 10, 10))
    assert c["flops"] == 5 * 5 * 8 * (3 * 3 * 3)
    assert c["acts"] == 5 * 5 * 8
    assert c["params"] == 8 * 3 * 3 * 3 + 8


def test_grouped_and_transposed_convs():
    depthwise = nn.Conv2d(6, 6, 3, padding=1, groups=6, bias=False)
    c = count_complexity(depthwise, (1, 6, 4, 4))
    assert c["flops"] == 6 * 4 * 4 * 9 and c["acts"] == 6 * 4 * 4
    up = nn.ConvTranspose2d(4, 2, 2, stride=2)  # 3x3 -> 6x6: each input element hits 2*2*2
    c = count_complexity(up, (1, 4, 3, 3))
    assert c["flops"] == 4 * 3 * 3 * (2 * 2 * 2) and c["acts"] == 2 * 6 * 6


def test_linear_on_tokens_and_on_vectors():
    model = nn.Linear(16, 32)
    tokens = count_complexity(model, (2, 5, 16))
    assert tokens["flops"] == 2 * 5 * 16 * 32 and tokens["acts"] == 2 * 5 * 32
    vectors = count_complexity(model, (3, 16))
    assert vectors["flops"] == 3 * 16 * 32 and vectors["acts"] == 3 * 32
    assert vectors["params"] == 16 * 32 + 32


def test_norms_activations_softmax_and_adds_are_not_counted():
    model = nn.Sequential(nn.LayerNorm(8), nn.GELU(), nn.Softmax(dim=-1), nn.BatchNorm1d(4))
    c = count_complexity(model, (2, 4, 8))
    assert c["flops"] == 0 and c["acts"] == 0
    assert c["params"] == 8 * 2 + 4 * 2


def _sdpa_counts(b: int, h: int, length: int, source: int, e: int, ev: int) -> tuple[int, int]:
    attn_map = b * h * length * source
    return attn_map * (e + ev), attn_map + b * h * length * ev


def _unfused(q, k, v):
    return F.scaled_dot_product_attention(q, k, v)


def _fused_cpu_kernel(q, k, v):
    return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v)


@pytest.mark.parametrize(
    ("device", "attention", "ev"),
    [("meta", _unfused, 6), ("cpu", _unfused, 6), ("cpu", _fused_cpu_kernel, 4)],
)
def test_scaled_dot_product_attention_counts_qk_and_av(device, attention, ev):
    """The math path (two bmm's) and a fused kernel (no attention map built) count the same."""
    b, h, length, source, e = 2, 3, 5, 7, 4
    q = torch.randn(b, h, length, e, device=device)
    k = torch.randn(b, h, source, e, device=device)
    v = torch.randn(b, h, source, ev, device=device)
    with ComplexityCounter() as counter, torch.no_grad():
        attention(q, k, v)
    assert (counter.flops, counter.acts) == _sdpa_counts(b, h, length, source, e, ev)


def test_timm_attention_block_counts_projections_map_and_av():
    dim, heads, n = 12, 3, 7
    c = count_complexity(Attention(dim, num_heads=heads, qkv_bias=True), (1, n, dim))
    attn_flops, attn_acts = _sdpa_counts(1, heads, n, n, dim // heads, dim // heads)
    assert c["flops"] == n * dim * 3 * dim + attn_flops + n * dim * dim
    assert c["acts"] == n * 3 * dim + attn_acts + n * dim


def test_counts_scale_with_batch_and_leave_the_model_alone():
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.Flatten(), nn.Linear(4 * 6 * 6, 5)).train()
    one, two = count_complexity(model, (1, 3, 8, 8)), count_complexity(model, (2, 3, 8, 8))
    assert two["flops"] == 2 * one["flops"] and two["acts"] == 2 * one["acts"]
    assert model.training and all(p.device.type == "cpu" for p in model.parameters())


@pytest.mark.slow
@pytest.mark.parametrize("name", ["vit_c_4gf", "dhvt_tiny_cifar_p4", "resnet18"])
def test_params_equal_the_sum_of_parameter_sizes(name):
    from optbench.models import create_model

    with torch.device("meta"):
        model = create_model(name, num_classes=10, in_chans=3, img_size=32)
    c = model_complexity(name, num_classes=10, in_chans=3, img_size=32)
    assert c["params"] == sum(p.numel() for p in model.parameters())
    assert all(type(v) is int for v in c.values())


@pytest.mark.parametrize("gf", [1, 4, 18, 36, 72])
@pytest.mark.slow
def test_vit_pairs_have_the_flops_their_names_say_and_match_each_other(gf):
    """The paper names models by GF (1e9 multiply-adds); ViT_C's stem + one block fewer keeps
    flops within a few percent of ViT_P."""
    p = model_complexity(f"vit_p_{gf}gf", num_classes=1000, in_chans=3, img_size=224)
    c = model_complexity(f"vit_c_{gf}gf", num_classes=1000, in_chans=3, img_size=224)
    assert abs(math.log(p["flops"] / 1e9 / gf)) < math.log(1.15)
    assert abs(c["flops"] / p["flops"] - 1) < 0.05


@pytest.mark.parametrize("name", ["vit_c_w64_16px", "dhvt_w64_16px"])
def test_meta_counts_equal_counts_of_a_real_forward_pass(name):
    """The meta pass (unfused attention) counts what a real CPU pass (fused attention) runs."""
    from optbench.models import create_model

    model = create_model(name, num_classes=10, in_chans=1, img_size=16).eval()
    meta = count_complexity(model, (2, 1, 16, 16))
    with ComplexityCounter() as counter, torch.no_grad():
        model(torch.randn(2, 1, 16, 16))
    assert (counter.flops, counter.acts) == (meta["flops"], meta["acts"])
