"""Initialization: every tensor kind of the ViTs starts as pycls's `init_weights_vit` starts it
(weight_init "reference"), or as optbench's earlier timm-style init ("timm"); DHVT as its official
code; RegNetY as pycls's `init_weights`. The expected values are the reference codes' formulas,
written out here; stds are checked within sampling tolerance at two widths."""

from __future__ import annotations

import math

import pytest
import torch
from cli_inprocess import tiny_config
from torch import nn

from optbench.models import create_model
from optbench.models.zoo import model_defaults
from optbench.spec.recipe import Recipe

# The ViT_P / ViT_C pairs at two widths (d 192 and 384; 32 px, patch 4) and the 1-channel 16 px
# quickstart pair (d 64).
VIT_P = ["vit_p_w192_32px", "vit_p_w384_32px", "vit_p_w64_16px"]
VIT_C = ["vit_c_w192_32px", "vit_c_w384_32px", "vit_c_w64_16px"]
STEM_ABLATIONS = [f"vit_s{i}_4gf" for i in (1, 2, 3, 4)] + ["vit_s1_w64_16px", "vit_s2_w64_16px"]


def build(name: str, seed: int = 0, **kwargs) -> nn.Module:
    d = model_defaults(name)
    torch.manual_seed(seed)
    return create_model(
        name, num_classes=d.num_classes, in_chans=d.in_chans, img_size=d.img_size, **kwargs
    )


def std_tolerance(t: torch.Tensor, kurtosis: float) -> float:
    """Five standard errors of a sample std, relative: sqrt((kurtosis - 1) / (4 n))."""
    return 5 * math.sqrt((kurtosis - 1) / (4 * t.numel()))


NORMAL, UNIFORM = 3.0, 1.8  # kurtosis


def assert_normal(t: torch.Tensor, std: float) -> None:
    assert t.mean().abs() < 5 * std / math.sqrt(t.numel())
    assert t.std().item() == pytest.approx(std, rel=std_tolerance(t, NORMAL))
    # a normal, not a uniform: some draws beyond sqrt(3) std (a uniform of that std has none)
    assert (t.abs() > math.sqrt(3) * std).float().mean() > 0.05


def assert_uniform(t: torch.Tensor, bound: float) -> None:
    assert t.abs().max() <= bound
    assert t.std().item() == pytest.approx(bound / math.sqrt(3), rel=std_tolerance(t, UNIFORM))


def torch_default_bound(weight: torch.Tensor) -> float:
    """PyTorch's default Linear/Conv init: kaiming-uniform with a = sqrt(5), i.e. a uniform of
    bound gain * sqrt(3 / fan_in) with gain sqrt(2 / (1 + 5)): 1 / sqrt(fan_in); biases too."""
    fan_in = math.prod(weight.shape[1:])
    return math.sqrt(2 / (1 + 5)) * math.sqrt(3 / fan_in)


def xavier_bound(weight: torch.Tensor) -> float:
    fan_out, fan_in = weight.shape
    return math.sqrt(6 / (fan_in + fan_out))


def same_tensors(a: nn.Module, b: nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


def conv_stem(model: nn.Module) -> tuple[list[nn.Conv2d], nn.Conv2d]:
    convs = [m for m in model.stem if isinstance(m, nn.Conv2d)]
    return convs[:-1], convs[-1]


def assert_norms_start_at_one_and_zero(model: nn.Module) -> None:
    norms = [m for m in model.modules() if isinstance(m, (nn.LayerNorm, nn.BatchNorm2d))]
    assert norms
    for m in norms:
        assert torch.equal(m.weight, torch.ones_like(m.weight))
        assert torch.equal(m.bias, torch.zeros_like(m.bias))


# --- ViT, weight_init "reference" (pycls) -------------------------------------------------------


@pytest.mark.parametrize("name", VIT_P)
def test_patchify_stem_is_truncated_normal_with_fan_in_std(name):
    (conv,) = list(build(name).stem)
    fan_in = conv.in_channels * conv.kernel_size[0] * conv.kernel_size[1]
    assert_normal(conv.weight, math.sqrt(1 / fan_in))
    assert conv.weight.abs().max() <= 2  # torch's trunc_normal_ cuts at +-2
    assert not conv.bias.any()


@pytest.mark.parametrize("name", VIT_C + STEM_ABLATIONS)
@pytest.mark.slow  # builds full-size models: over half a second here
def test_conv_stem_keeps_pytorch_defaults_before_bn_and_he_normal_final_1x1(name):
    convs, last = conv_stem(build(name))
    for conv in convs:  # 3x3s, and the stem ablations' p x p patchify layer
        assert conv.bias is None
        assert_uniform(conv.weight, torch_default_bound(conv.weight))
    assert last.kernel_size == (1, 1)
    assert_normal(last.weight, math.sqrt(2 / last.out_channels))
    assert not last.bias.any()


@pytest.mark.parametrize("name", VIT_P[:2] + VIT_C[:2])
def test_transformer_tensors_follow_pycls(name):
    model = build(name)
    d = model.pos_embed.shape[-1]
    for block in model.blocks:
        qkv, proj = block.attn.qkv, block.attn.proj
        assert qkv.weight.shape == (3 * d, d)  # xavier over the fused matrix, as pycls's attn_proj
        assert_uniform(qkv.weight, math.sqrt(6 / (d + 3 * d)))
        assert not qkv.bias.any()
        assert_uniform(proj.weight, 1 / math.sqrt(d))
        assert not proj.bias.any()
        for fc in (block.mlp.fc1, block.mlp.fc2):
            assert_uniform(fc.weight, xavier_bound(fc.weight))
            assert fc.bias.any() and fc.bias.abs().max() < 6e-6  # normal, std 1e-6
    biases = torch.cat([fc.bias for b in model.blocks for fc in (b.mlp.fc1, b.mlp.fc2)])
    assert biases.std().item() == pytest.approx(1e-6, rel=std_tolerance(biases, NORMAL))
    assert not model.head.weight.any() and not model.head.bias.any()
    assert not model.cls_token.any()
    pos = model.pos_embed
    assert pos.std().item() == pytest.approx(0.02, rel=std_tolerance(pos, NORMAL))
    assert_norms_start_at_one_and_zero(model)


def test_reference_init_values_differ_from_timm_style_where_pycls_differs():
    """The two choices are really different at the tensors the issue lists (d 192)."""
    ref, old = build("vit_p_w192_32px"), build("vit_p_w192_32px", weight_init="timm")
    assert ref.stem[0].weight.std() > 3 * old.stem[0].weight.std()
    assert ref.blocks[0].attn.qkv.weight.std() > 2 * old.blocks[0].attn.qkv.weight.std()
    assert not ref.cls_token.any() and old.cls_token.any()


def test_same_seed_same_model_and_init_does_not_depend_on_anything_else():
    a, b = build("vit_c_w192_32px", seed=3), build("vit_c_w192_32px", seed=3)
    assert same_tensors(a, b)


# --- ViT, weight_init "timm" (optbench's earlier init) -------------------------------------------


@pytest.mark.parametrize("name", [VIT_P[0], VIT_P[1], VIT_C[0], VIT_C[1], STEM_ABLATIONS[1]])
@pytest.mark.slow  # builds full-size models: over half a second here
def test_timm_style_init_is_kept_as_a_choice(name):
    model = build(name, weight_init="timm")
    for m in model.modules():
        if isinstance(m, nn.Linear) and m is not model.head:
            assert_normal(m.weight, 0.02)  # truncated at +-2: no visible cut at std 0.02
            assert not m.bias.any()
        elif isinstance(m, nn.Conv2d):
            fan_out = m.out_channels * m.kernel_size[0] * m.kernel_size[1]
            assert_normal(m.weight, math.sqrt(2 / fan_out))  # He-normal, fan-out
            assert m.bias is None or not m.bias.any()
    for t in (model.pos_embed, model.cls_token):
        assert t.std().item() == pytest.approx(0.02, rel=std_tolerance(t, NORMAL) + 0.05)
    assert not model.head.weight.any() and not model.head.bias.any()
    assert_norms_start_at_one_and_zero(model)


# --- how weight_init reaches the model ------------------------------------------------------------


def test_create_model_rejects_an_unknown_init_and_ignores_it_for_timm_models():
    with pytest.raises(ValueError, match="weight_init"):
        build("vit_p_w64_16px", weight_init="xavier")
    torch.manual_seed(0)
    a = create_model("resnet18", num_classes=3, in_chans=1, img_size=16, weight_init="timm")
    torch.manual_seed(0)
    b = create_model("resnet18", num_classes=3, in_chans=1, img_size=16)
    assert same_tensors(a, b)


@pytest.mark.parametrize("name", ["dhvt_w64_16px", "regnety_1gf"])
def test_timm_is_the_reference_init_for_models_with_one_init(name):
    a, b = build(name, weight_init="timm"), build(name)
    assert same_tensors(a, b)


def test_recipe_weight_init_reaches_the_model_and_the_cell_id():
    from types import SimpleNamespace

    from optbench.spec.schema import parse_spec
    from optbench.train.parts import build_model

    batches = SimpleNamespace(num_classes=10, in_chans=1, img_size=16)
    compute = SimpleNamespace(
        dist=SimpleNamespace(enabled=False), device=torch.device("cpu"), channels_last=False
    )
    cls_tokens = {}
    for init in ("reference", "timm"):
        cfg = tiny_config(epochs=10, recipe=Recipe(weight_init=init))  # basic: 5 warmup epochs
        cls_tokens[init] = build_model(cfg, batches, compute).cls_token
    assert not cls_tokens["reference"].any() and cls_tokens["timm"].any()
    assert Recipe().weight_init == "reference"

    study = {
        "name": "s",
        "dataset": {"name": "digits", "img_size": 16},
        "models": ["vit_p_w64_16px"],
        "optimizers": ["adamw"],
        "epochs": [10],
        "batch_size": 32,
        "search": {"n_samples": 1, "ranges": {"adamw": {"lr": [1e-4, 1e-2], "wd": [0.01, 0.5]}}},
    }
    ids = {
        init: (spec := parse_spec({**study, "recipe": {"weight_init": init}})).cell_id(
            spec.cells()[0]
        )
        for init in ("reference", "timm")
    }
    assert ids["reference"] != ids["timm"]


# --- DHVT (official code) and RegNetY (pycls) -----------------------------------------------------


@pytest.mark.parametrize("name", ["dhvt_tiny_cifar_p4", "dhvt_small_cifar_p4"])
def test_dhvt_starts_as_its_official_code(name):
    model = build(name)
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    assert model.head in linears
    for m in linears:  # truncated normal 0.02, the classifier included; zero bias
        assert_normal(m.weight, 0.02)
        assert not m.bias.any()
    embeds = torch.cat([b.attn.head_embed.flatten() for b in model.blocks])
    assert_normal(embeds, 0.02)
    assert model.cls_token.std().item() == pytest.approx(0.02, rel=0.3)  # 192 or 384 draws
    for m in model.modules():
        if isinstance(m, nn.Conv2d):  # PyTorch's default, weights and biases
            assert_uniform(m.weight, torch_default_bound(m.weight))
            if m.bias is not None:
                assert m.bias.abs().max() <= torch_default_bound(m.weight)
    assert_norms_start_at_one_and_zero(model)
    for affine in (model.patch_embed.pre_affine, model.patch_embed.post_affine):
        assert torch.equal(affine.alpha, torch.ones_like(affine.alpha))
        assert not affine.beta.any()


@pytest.mark.parametrize("name", ["regnety_1gf", "regnety_4gf"])
@pytest.mark.slow  # builds full-size models: over half a second here
def test_regnety_starts_as_pycls_init_weights(name):
    model = build(name)
    se_biases = []
    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            # normal, std sqrt(2 / (k * k * out_channels)): groups are not divided out
            fan_out = m.kernel_size[0] * m.kernel_size[1] * m.out_channels
            if m.weight.numel() >= 1000:
                assert_normal(m.weight, math.sqrt(2 / fan_out))
            if m.bias is not None:  # SE's convs: PyTorch's default bias, never overwritten
                bound = torch_default_bound(m.weight)
                assert m.bias.abs().max() <= bound
                se_biases.append(m.bias / bound)
        elif isinstance(m, nn.BatchNorm2d):
            assert torch.equal(m.weight, torch.ones_like(m.weight)) and not m.bias.any()
    se_biases = torch.cat(se_biases)  # uniform in [-1, 1] once scaled by the bound
    assert se_biases.std().item() == pytest.approx(
        1 / math.sqrt(3), rel=std_tolerance(se_biases, UNIFORM)
    )
    assert_normal(model.head.fc.weight, 0.01)
    assert not model.head.fc.bias.any()
    # the grouped 3x3s are where pycls's rule and timm's (fan-out / groups) part
    conv2 = model.s3.b1.conv2.conv
    assert conv2.groups > 1
    assert conv2.weight.std() < 0.5 * math.sqrt(2 / (9 * conv2.out_channels / conv2.groups))
