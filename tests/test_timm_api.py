"""The zoo in timm: registered as soon as timm is imported (before or after optbench), and timm's
classifier and feature API on every family, checked with timm's own entry points."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import timm
import torch
from timm.data import resolve_model_data_config

import optbench  # noqa: F401  (registers the zoo with timm)

REPO = Path(__file__).resolve().parent.parent
TINY = {  # name: (in_chans, img_size)
    "vit_p_w64_16px": (1, 16),
    "vit_c_w64_16px": (1, 16),
    "dhvt_w64_16px": (1, 16),
    "vit_s2_4gf": (3, 32),  # a stem ablation, at a small input
    "regnety_1gf": (3, 64),
}


def _kwargs(name: str) -> dict:
    in_chans, size = TINY[name]
    return dict(in_chans=in_chans) | ({} if name.startswith("regnet") else dict(img_size=size))


def _input(name: str) -> torch.Tensor:
    in_chans, size = TINY[name]
    return torch.randn(2, in_chans, size, size, generator=torch.Generator().manual_seed(0))


@pytest.mark.slow
@pytest.mark.parametrize(
    "order", ["import optbench, timm", "import timm, optbench", "import optbench.models, timm"]
)
def test_the_zoo_is_in_timm_whichever_is_imported_first(order):
    code = f"{order}\nprint(timm.create_model('vit_c_4gf', pretrained=False).__class__.__name__)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "VisionTransformer"


@pytest.mark.slow
@pytest.mark.parametrize("name", TINY)
def test_classifier_api(name):
    torch.manual_seed(0)
    model = timm.create_model(name, **_kwargs(name)).eval()
    x = _input(name)
    with torch.no_grad():
        logits = model(x)
        features = model.forward_features(x)
        assert torch.equal(model.forward_head(features), logits)
        pooled = model.forward_head(features, pre_logits=True)
    assert pooled.shape == (2, model.num_features)
    assert model.get_classifier().out_features == logits.shape[1] == model.num_classes
    model.reset_classifier(7)
    assert model(x).shape == (2, 7) and model.num_classes == 7
    # the same weights without a head: timm's feature extractor, returning `pooled`
    backbone = timm.create_model(name, num_classes=0, **_kwargs(name)).eval()
    backbone.load_state_dict(
        {k: v for k, v in model.state_dict().items() if not k.startswith(("head.", "head.fc."))}
    )
    with torch.no_grad():
        assert torch.allclose(backbone(x), pooled, atol=1e-6)
    head = {n for n, _ in model.named_parameters()} - {n for n, _ in backbone.named_parameters()}
    assert head and all(n.startswith("head") for n in head)
    assert resolve_model_data_config(backbone)["input_size"] == (
        TINY[name][0],
        *model.pretrained_cfg["input_size"][1:],
    )


@pytest.mark.parametrize("name", TINY)
def test_features_only_gives_timms_feature_maps(name):
    maps = timm.create_model(name, features_only=True, **_kwargs(name)).eval()
    x = _input(name)
    with torch.no_grad():
        outs = maps(x)
    info = maps.feature_info
    assert len(outs) == len(info.channels()) >= 2
    for out, channels, reduction in zip(outs, info.channels(), info.reduction(), strict=True):
        assert out.shape == (2, channels, x.shape[2] // reduction, x.shape[3] // reduction)


def test_a_transformers_last_feature_map_is_its_last_blocks_patch_tokens():
    name = "vit_c_w64_16px"
    torch.manual_seed(0)
    model = timm.create_model(name, **_kwargs(name)).eval()
    x = _input(name)
    with torch.no_grad():
        final, maps = model.forward_intermediates(x, indices=1, norm=True)
        tokens = model.forward_features(x)
    assert torch.equal(final, tokens)
    grid = tokens[:, 1:].reshape(2, 4, 4, -1).permute(0, 3, 1, 2)  # 16 patches as a 4x4 map
    assert torch.equal(maps[-1], grid)
