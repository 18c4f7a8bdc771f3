"""The zoo: every model builds at its defaults with the right output, stems are built as the paper
specifies, ViT_C is ViT_P with one block fewer, DHVT's head tokens and DAFF behave as described,
and `optbench models` prints the zoo."""

from __future__ import annotations

import json
import math

import pytest
import timm
import torch
from torch import nn
from typer.testing import CliRunner

from optbench.cli.app import app
from optbench.errors import UsageError
from optbench.models import create_model
from optbench.models.dhvt import DHVT, SOPE
from optbench.models.vit import ConvStem, PatchifyStem, VisionTransformer
from optbench.models.zoo import model_defaults, zoo_models

ZOO = zoo_models()
GFS = (1, 4, 18, 36, 72)
PAIRS = [(f"vit_p_{g}gf", f"vit_c_{g}gf") for g in GFS] + [
    (f"vit_p_{s}", f"vit_c_{s}") for s in ("w64_16px", "w192_32px", "w384_32px")
]


def build_meta(name: str, **overrides) -> nn.Module:
    """`name` at its defaults on the meta device (no memory, no arithmetic)."""
    d = model_defaults(name)
    args = dict(num_classes=d.num_classes, in_chans=d.in_chans, img_size=d.img_size)
    with torch.device("meta"):
        return create_model(name, **{**args, **overrides}).eval()


def test_the_zoo_lists_every_model_the_issue_names():
    expected = {f"vit_{s}_{g}gf" for g in GFS for s in "pc"}
    expected |= {f"vit_s{i}_4gf" for i in (1, 2, 3, 4)} | {"vit_s1_w64_16px", "vit_s2_w64_16px"}
    expected |= {f"vit_{s}_w{w}_32px" for w in (192, 384) for s in "pc"}
    expected |= {"vit_p_w64_16px", "vit_c_w64_16px", "dhvt_w64_16px"}
    expected |= {f"dhvt_{s}_cifar_p{p}" for s in ("tiny", "small") for p in (4, 2)}
    expected |= {f"dhvt_{s}_{d}_p16" for s in ("tiny", "small") for d in ("imagenet", "domainnet")}
    expected |= {"regnety_1gf", "regnety_4gf", "regnety_16gf"}
    assert expected <= set(ZOO)
    assert all(timm.is_model(n) for n in ZOO)
    # every optbench entry point has a cfg in the listing, and nothing else is listed
    ours = {
        n
        for n in timm.list_models()
        if timm.models.model_entrypoint(n).__module__.startswith("optbench.")
    }
    assert ours == set(ZOO)


@pytest.mark.parametrize("name", ZOO)
@pytest.mark.slow
def test_every_model_maps_its_default_input_to_its_classes(name):
    d = model_defaults(name)
    model = build_meta(name)
    out = model(torch.empty(2, d.in_chans, d.img_size, d.img_size, device="meta"))
    assert out.shape == (2, d.num_classes)


def test_defaults_of_the_paper_models():
    for name in ("vit_p_1gf", "vit_c_72gf", "vit_s3_4gf", "dhvt_small_imagenet_p16"):
        assert model_defaults(name).img_size == 224 and model_defaults(name).num_classes == 1000
    assert model_defaults("dhvt_tiny_domainnet_p16").num_classes == 345
    assert model_defaults("dhvt_tiny_cifar_p2").img_size == 32
    assert model_defaults("vit_c_w384_32px").img_size == 32


@pytest.mark.parametrize("name", ["vit_p_w64_16px", "vit_c_w64_16px", "dhvt_w64_16px"])
def test_quickstart_models_train_on_one_channel_digits(name):
    torch.manual_seed(0)
    model = create_model(name, num_classes=10, in_chans=1, img_size=16)
    loss = model(torch.randn(4, 1, 16, 16)).logsumexp(1).mean()
    loss.backward()
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)


def test_create_model_passes_img_size_only_to_models_that_take_it():
    cnn = build_meta("resnet18", img_size=64)  # ResNet takes no img_size: not passed
    assert cnn(torch.empty(1, 3, 64, 64, device="meta")).shape == (1, 1000)
    vit = build_meta("vit_tiny_patch16_224", img_size=64, num_classes=7)
    assert vit(torch.empty(1, 3, 64, 64, device="meta")).shape == (1, 7)
    ours = build_meta("vit_p_1gf", img_size=64)
    assert ours.pos_embed.shape[1] == (64 // 16) ** 2 + 1


def test_no_pretrained_weights():
    with pytest.raises(ValueError, match="pretrained"):
        timm.create_model("vit_p_w64_16px", pretrained=True)


# --- stems -----------------------------------------------------------------------------------


def conv_stem_layers(stem: ConvStem) -> list[tuple[nn.Conv2d, nn.Module, nn.Module]]:
    """(conv, next, one after) for every conv but the last."""
    mods = list(stem)
    return [
        (m, mods[i + 1], mods[i + 2]) for i, m in enumerate(mods[:-1]) if isinstance(m, nn.Conv2d)
    ]


STEM_ABLATIONS = [(f"vit_s{i}_4gf", 2**i) for i in (1, 2, 3, 4)] + [
    ("vit_s1_w64_16px", 2),
    ("vit_s2_w64_16px", 4),
]
CONV_STEM_MODELS = [c for _, c in PAIRS] + [name for name, _ in STEM_ABLATIONS]


@pytest.mark.parametrize("name", CONV_STEM_MODELS)
@pytest.mark.slow  # builds full-size models: over half a second here
def test_conv_stems_have_bn_relu_after_each_conv_and_a_biased_final_1x1(name):
    model = build_meta(name)
    stem = model.stem
    assert isinstance(stem, ConvStem)
    layers = conv_stem_layers(stem)
    assert layers
    for conv, norm, act in layers:
        assert conv.bias is None
        assert isinstance(norm, nn.BatchNorm2d) and norm.num_features == conv.out_channels
        assert isinstance(act, nn.ReLU)
        assert conv.kernel_size == (3, 3) or conv.kernel_size == conv.stride
    last = list(stem)[-1]
    assert isinstance(last, nn.Conv2d) and last.kernel_size == (1, 1) and last.bias is not None
    assert math.prod(conv.stride[0] for conv, _, _ in layers) == model.patch_size


@pytest.mark.parametrize(("name", "pixel"), STEM_ABLATIONS)
def test_stem_ablations_hold_one_patchify_layer_of_their_pixel_size(name, pixel):
    convs = [conv for conv, _, _ in conv_stem_layers(build_meta(name).stem)]
    patchify = [c for c in convs if c.kernel_size != (3, 3)]
    assert [c.kernel_size for c in patchify] == [(pixel, pixel)]
    assert patchify[0].stride == (pixel, pixel) and patchify[0] is convs[0]


def stem_multiply_adds(model: VisionTransformer) -> int:
    """k*k*c_in*c_out*h_out*w_out summed over the stem's convs, the output size followed by hand."""
    size, total = model.img_size, 0
    for conv in (m for m in model.stem if isinstance(m, nn.Conv2d)):
        (k, _), (s, _), (pad, _) = conv.kernel_size, conv.stride, conv.padding
        size = (size + 2 * pad - k) // s + 1
        total += k * k * conv.in_channels * conv.out_channels * size * size
    return total


@pytest.mark.parametrize(
    ("name", "vit_c"),
    [(f"vit_s{i}_4gf", "vit_c_4gf") for i in (1, 2, 3, 4)]
    + [(f"vit_s{i}_w64_16px", "vit_c_w64_16px") for i in (1, 2)],
)
def test_stem_ablations_have_the_stride_1_convs_that_bring_flops_nearest_vit_c(name, vit_c):
    """stem_ablation.py's step 3: as many stride-1 3x3 convs at width d as bring the stem's
    multiply-adds nearest ViT_C's; one more, or one fewer, would be further away."""
    model, reference = build_meta(name), build_meta(vit_c)
    assert len(model.blocks) == len(reference.blocks)
    target, mine = stem_multiply_adds(reference), stem_multiply_adds(model)
    grid = model.img_size // model.patch_size
    d = model.norm.normalized_shape[0]
    extra = 9 * d * d * grid * grid  # one 3x3 stride-1 conv at width d on the token grid
    stride_1 = [c for c, _, _ in conv_stem_layers(model.stem) if c.stride == (1, 1)]
    assert abs(mine - target) <= abs(mine + extra - target)
    if stride_1:
        assert abs(mine - target) <= abs(mine - extra - target)


@pytest.mark.slow
@pytest.mark.parametrize(("p_name", "c_name"), PAIRS)
def test_vit_c_is_vit_p_with_a_conv_stem_and_one_block_fewer(p_name, c_name):
    p, c = build_meta(p_name), build_meta(c_name)
    assert isinstance(p.stem, PatchifyStem)
    (conv,) = list(p.stem)
    assert conv.kernel_size == conv.stride == (p.patch_size, p.patch_size) and conv.bias is not None
    assert isinstance(c.stem, ConvStem) and c.patch_size == p.patch_size
    assert len(c.blocks) == len(p.blocks) - 1
    assert c.blocks[0].attn.num_heads == p.blocks[0].attn.num_heads
    assert c.norm.normalized_shape == p.norm.normalized_shape


def test_stem_strides_must_multiply_to_the_patch_size():
    with pytest.raises(ValueError, match="patch_size"):
        VisionTransformer(patch_size=16, stem="conv", stem_widths=(8, 16), stem_strides=(2, 2))
    with pytest.raises(ValueError, match="kernel"):
        ConvStem(3, 16, widths=(8,), strides=(2,), kernel_sizes=(5,))


# --- DHVT ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("patch", "widths", "gelus"), [(16, [24, 48, 96, 192], 3), (4, [96, 192], 1), (2, [192], 1)]
)
def test_sope_convs_widths_and_gelus(patch, widths, gelus):
    sope = SOPE(3, 192, patch)
    convs = [m for m in sope.convs if isinstance(m, nn.Conv2d)]
    assert [c.out_channels for c in convs] == widths
    assert all(c.kernel_size == (3, 3) and c.stride == (2, 2) and c.bias is None for c in convs)
    assert sum(isinstance(m, nn.BatchNorm2d) for m in sope.convs) == len(convs)
    assert sum(isinstance(m, nn.GELU) for m in sope.convs) == gelus


def test_dhvt_has_no_position_embedding_and_plain_batchnorm():
    model = build_meta("dhvt_tiny_cifar_p4")
    bigger = build_meta("dhvt_tiny_cifar_p4", img_size=64)  # 4x the tokens, same parameters
    assert [p.shape for p in model.parameters()] == [p.shape for p in bigger.parameters()]
    norms = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    assert norms and all(type(m) is nn.BatchNorm2d for m in norms)


def record(seen: dict, key: str, what):
    """A forward hook that stores what(inputs, output) under `key` and changes nothing."""

    def hook(module, inputs, output) -> None:
        seen.setdefault(key, what(inputs, output))

    return hook


def small_dhvt() -> DHVT:
    torch.manual_seed(0)
    return DHVT(
        img_size=16, patch_size=4, in_chans=1, num_classes=5, dim=32, depth=2, num_heads=4
    ).eval()


def test_head_tokens_join_attention_and_leave_its_output():
    model, seen = small_dhvt(), {}
    attn = model.blocks[0].attn
    attn.qkv.register_forward_hook(record(seen, "qkv_in", lambda i, o: i[0].shape))
    attn.register_forward_hook(record(seen, "attn_out", lambda i, o: o.shape))
    x = torch.randn(3, 1, 16, 16)
    tokens = 1 + (16 // 4) ** 2
    assert model.forward_features(x).shape == (3, tokens, 32)
    assert seen["qkv_in"] == (3, tokens + 4, 32)  # one head token per head
    assert seen["attn_out"] == (3, tokens, 32)


def test_head_tokens_mean_is_added_to_the_class_token_output():
    model, seen = small_dhvt(), {}
    attn = model.blocks[0].attn
    attn.proj.register_forward_hook(record(seen, "full", lambda i, o: o))
    x = torch.randn(2, 17, 32)
    with torch.no_grad():
        out = attn(x)
    full = seen["full"]  # (B, N + h, C): attention output before the head tokens leave
    assert full.shape == (2, 17 + 4, 32)
    assert torch.equal(out[:, 1:], full[:, 1:17])
    torch.testing.assert_close(out[:, 0], full[:, 0] + full[:, 17:].mean(dim=1))


def test_class_token_skips_the_daff_convolutions():
    model, seen = small_dhvt(), {}
    daff = model.blocks[0].mlp
    daff.expand.register_forward_hook(record(seen, "conv_in", lambda i, o: i[0].shape))
    x = torch.randn(2, 17, 32)
    out = daff(x, (4, 4))
    assert seen["conv_in"] == (2, 32, 4, 4)  # the 16 patch tokens only
    x2 = x.clone()
    x2[:, 0] += 1.0  # a different class token leaves the patch tokens' outputs unchanged
    out2 = daff(x2, (4, 4))
    assert torch.equal(out2[:, 1:], out[:, 1:])
    assert not torch.allclose(out2[:, 0], out[:, 0])


# --- the `optbench models` command -----------------------------------------------------------


def test_models_command_prints_json_rows_with_plain_counts():
    result = CliRunner().invoke(app, ["models", "vit_c_w64_16px", "resnet18", "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    assert [r["name"] for r in rows] == ["vit_c_w64_16px", "resnet18"]
    for row in rows:
        assert set(row) == {"name", "img_size", "num_classes", "flops", "params", "acts"}
        assert all(type(row[k]) is int and row[k] > 0 for k in ("flops", "params", "acts"))
    assert rows[0]["img_size"] == 16 and rows[0]["num_classes"] == 10


def test_models_command_measures_throughput_and_prints_a_table():
    result = CliRunner().invoke(app, ["models", "vit_p_w64_16px", "--measure"])
    assert result.exit_code == 0, result.output
    header, _, row = result.output.strip().splitlines()
    assert "train img/s" in header and row.startswith("| vit_p_w64_16px | 16 | 10 |")
    assert float(row.strip("| ").split("|")[-1]) > 0


def test_models_command_rejects_unknown_names():
    result = CliRunner().invoke(app, ["models", "no_such_model"])
    assert isinstance(result.exception, UsageError) and "no_such_model" in str(result.exception)
