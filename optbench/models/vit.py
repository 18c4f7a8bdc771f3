"""ViT_P and ViT_C (Xiao et al. 2021): one ViT, two stems, at every size the project studies.

ViT_P patchifies with one stride-p p x p conv; ViT_C replaces it with a stack of 3x3 convs (each
followed by BatchNorm and ReLU) and a final biased 1x1 conv, and drops one block to keep flops
matched. The encoder is a standard pre-LN ViT with a class token and a learned absolute position
embedding.

Both stems start from the paper code's init (pycls `init_weights_vit`; `init_weights_pycls`), or
with `weight_init="timm"` from optbench's earlier timm-style init (`init_weights_timm`).

Registered with timm (each with a pretrained cfg that holds its default input size, classes and
evaluation crop):
- the paper's pairs at 224 px, 1000 classes: `vit_{p,c}_{1,4,18,36,72}gf`;
- 32 px (CIFAR-sized, 100 classes) pairs at widths 192 and 384: `vit_{p,c}_w{192,384}_32px`.
  ViT_P uses patch 4 (64 tokens); ViT_C a conv stem of two stride-2 3x3 convs (widths d/2, d:
  each stride-2 conv doubles the channels, as the paper's design rule asks) and one block fewer.
  Depth, heads and MLP ratio are those of the 1GF (d 192) and 4GF (d 384) models;
- the quickstart pair for 16 px digits: `vit_{p,c}_w64_16px`.

`timm.create_model("vit_c_4gf")` builds ViT_C-4GF; the stem ablations live in stem_ablation.py.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from timm.layers import LayerNorm
from timm.models import generate_default_cfgs, register_model
from timm.models.vision_transformer import Block
from torch import nn

from optbench.models.builder import (
    TokenClassifier,
    WeightInit,
    build,
    check_weight_init,
    classifier,
    square_size,
    token_features,
    zoo_cfg,
)


class PatchifyStem(nn.Sequential):
    """One Conv2d(in, dim, kernel=p, stride=p, bias=True): no norm, no activation."""

    def __init__(self, in_chans: int, dim: int, patch_size: int):
        super().__init__(nn.Conv2d(in_chans, dim, patch_size, stride=patch_size, bias=True))
        self.stride = patch_size


class ConvStem(nn.Sequential):
    """Convs (no bias) each followed by BN + ReLU, then a biased 1x1 conv to dim, nothing after.

    Each conv is a 3x3 (padding 1) unless `kernel_sizes` says otherwise; the only other kernel
    allowed is a "patchify" layer whose kernel equals its stride (no padding), which the stem
    ablations S1-S4 use. Design rule of the paper: a 3x3 conv either has stride 2 and doubles the
    channels, or stride 1 and keeps them. The product of the strides is the stem's patch size.
    """

    def __init__(
        self,
        in_chans: int,
        dim: int,
        widths: Sequence[int],
        strides: Sequence[int],
        kernel_sizes: Sequence[int] | None = None,
    ):
        kernel_sizes = kernel_sizes or [3] * len(widths)
        if not widths or not len(widths) == len(strides) == len(kernel_sizes):
            raise ValueError(
                f"conv stem needs one stride and kernel per width, got {widths} / {strides} / "
                f"{kernel_sizes}"
            )
        layers: list[nn.Module] = []
        c_in = in_chans
        for width, stride, kernel in zip(widths, strides, kernel_sizes, strict=True):
            if kernel == 3:
                padding = 1
            elif kernel == stride > 1:
                padding = 0  # patchify layer: non-overlapping p x p windows
            else:
                raise ValueError(
                    f"stem kernel {kernel} with stride {stride}: use 3 or kernel == stride"
                )
            layers += [
                nn.Conv2d(c_in, width, kernel, stride=stride, padding=padding, bias=False),
                nn.BatchNorm2d(width),
                nn.ReLU(inplace=True),
            ]
            c_in = width
        layers.append(nn.Conv2d(c_in, dim, 1, bias=True))
        super().__init__(*layers)
        self.stride = math.prod(strides)


class VisionTransformer(TokenClassifier, nn.Module):
    """Pre-LN ViT: stem -> tokens + class token + position embedding -> blocks -> LN -> head.
    timm's classifier and feature API come from TokenClassifier (builder.py)."""

    def __init__(
        self,
        *,
        img_size: int | Sequence[int] = 224,
        patch_size: int = 16,
        in_chans: int = 3,
        num_classes: int = 1000,
        dim: int = 192,
        depth: int = 12,
        num_heads: int = 3,
        mlp_ratio: float = 3.0,
        stem: str = "patchify",
        stem_widths: Sequence[int] = (),
        stem_strides: Sequence[int] = (),
        stem_kernel_sizes: Sequence[int] | None = None,
        drop_path_rate: float = 0.0,
        weight_init: WeightInit = "reference",
    ):
        super().__init__()
        check_weight_init(weight_init)
        img_size = square_size(img_size)
        if stem == "patchify":
            self.stem: nn.Module = PatchifyStem(in_chans, dim, patch_size)
        elif stem == "conv":
            self.stem = ConvStem(in_chans, dim, stem_widths, stem_strides, stem_kernel_sizes)
        else:
            raise ValueError(f"stem must be 'patchify' or 'conv', got {stem!r}")
        if self.stem.stride != patch_size:
            raise ValueError(
                f"stem strides multiply to {self.stem.stride}, not patch_size {patch_size}"
            )
        if img_size % patch_size:
            raise ValueError(f"img_size {img_size} is not a multiple of patch_size {patch_size}")
        self.img_size, self.patch_size = img_size, patch_size
        self.in_chans, self.num_classes = in_chans, num_classes
        self.num_patches = (img_size // patch_size) ** 2
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embed = nn.Parameter(torch.zeros(1, self.num_patches + 1, dim))
        dpr = [drop_path_rate * i / max(depth - 1, 1) for i in range(depth)]  # linear rise
        self.blocks = nn.Sequential(
            *(
                Block(
                    dim,
                    num_heads,
                    mlp_ratio=mlp_ratio,
                    qkv_bias=True,
                    drop_path=dpr[i],
                    norm_layer=LayerNorm,
                )
                for i in range(depth)
            )
        )
        self.norm = LayerNorm(dim)
        self.num_features = self.head_hidden_size = dim
        self.head = classifier(dim, num_classes)
        self.feature_info = token_features(depth, dim, patch_size)
        if weight_init == "reference":
            init_weights_pycls(self)
        else:
            init_weights_timm(self)

    def _tokens(self, x: torch.Tensor) -> tuple[torch.Tensor, tuple[int, int]]:
        x = self.stem(x)
        grid = (x.shape[2], x.shape[3])
        x = x.flatten(2).transpose(1, 2)  # (B, N, dim)
        cls = self.cls_token.expand(x.shape[0], -1, -1)
        return torch.cat([cls, x], dim=1) + self.pos_embed, grid

    def _block(self, block: nn.Module, x: torch.Tensor, grid: tuple[int, int]) -> torch.Tensor:
        return block(x)


@torch.no_grad()
def init_weights_pycls(model: VisionTransformer) -> None:
    """The init of the paper's code (pycls `init_weights_vit`), tensor kind by tensor kind.

    Tensors not named here keep what their constructor gave them, as in pycls: PyTorch's default
    for the attention output projection's weight and for every conv of a conv stem but the last
    (the stem ablations' patchify layer included: like those convs it feeds a BatchNorm), ones
    and zeros for the norms, zeros for the class token. The draws come in pycls's order (stem,
    blocks, head, then the position embedding), so one seed gives pycls's tensors.
    """
    last = [m for m in model.stem if isinstance(m, nn.Conv2d)][-1]
    if isinstance(model.stem, PatchifyStem):  # tokens straight from pixels: unit-variance fan-in
        fan_in = last.in_channels * last.kernel_size[0] * last.kernel_size[1]
        nn.init.trunc_normal_(last.weight, std=math.sqrt(1.0 / fan_in))
    else:  # the conv stem's final 1x1: He-normal over its outputs
        nn.init.normal_(last.weight, std=math.sqrt(2.0 / last.out_channels))
    nn.init.zeros_(last.bias)
    for block in model.blocks:
        nn.init.xavier_uniform_(block.attn.qkv.weight)  # over the fused q/k/v matrix, as pycls
        nn.init.zeros_(block.attn.qkv.bias)
        nn.init.zeros_(block.attn.proj.bias)
        for fc in (block.mlp.fc1, block.mlp.fc2):
            nn.init.xavier_uniform_(fc.weight)
            nn.init.normal_(fc.bias, std=1e-6)
    if isinstance(model.head, nn.Linear):  # no head: a feature extractor (num_classes 0)
        nn.init.zeros_(model.head.weight)
        nn.init.zeros_(model.head.bias)
    nn.init.normal_(model.pos_embed, std=0.02)


@torch.no_grad()
def init_weights_timm(model: VisionTransformer) -> None:
    """optbench's earlier timm-style init: truncated normal 0.02 for linears, the class token and
    the position embedding, He-normal (fan-out) convs, zero biases and a zero classifier."""
    nn.init.trunc_normal_(model.pos_embed, std=0.02)
    nn.init.trunc_normal_(model.cls_token, std=0.02)
    for m in model.modules():
        if isinstance(m, nn.Linear):
            nn.init.trunc_normal_(m.weight, std=0.02)
            nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            if m.bias is not None:
                nn.init.zeros_(m.bias)
    if isinstance(model.head, nn.Linear):
        nn.init.zeros_(model.head.weight)


def build_vit(variant: str, cfg: dict, pretrained: bool = False, **kwargs) -> VisionTransformer:
    """Build the ViT `variant` from its architecture `cfg` (kwargs override it)."""
    return build(VisionTransformer, variant, cfg, pretrained, **kwargs)


def pycls_cfg(img_size: int, num_classes: int, in_chans: int = 3, **kwargs) -> dict:
    """A zoo cfg with pycls's evaluation resize (bilinear)."""
    return zoo_cfg(img_size, num_classes, in_chans, interpolation="bilinear", **kwargs)


default_cfgs = generate_default_cfgs(
    {
        "vit_p_w64_16px": pycls_cfg(16, 10, in_chans=1),
        "vit_c_w64_16px": pycls_cfg(16, 10, in_chans=1),
        # pycls evaluates ImageNet models on the centre 224 of the image resized to 256
        **{
            f"vit_{stem}_{gf}gf": pycls_cfg(224, 1000, test_size=256)
            for gf in (1, 4, 18, 36, 72)
            for stem in ("p", "c")
        },
        **{
            f"vit_{stem}_w{width}_32px": pycls_cfg(32, 100)
            for width in (192, 384)
            for stem in ("p", "c")
        },
    }
)


# --- quickstart pair: width 64, 16x16 input, patch 4 (16 tokens) ---------------------------------

VIT_W64_16PX = dict(patch_size=4, dim=64, num_heads=4, mlp_ratio=3.0, depth=4)


@register_model
def vit_p_w64_16px(pretrained: bool = False, **kwargs) -> VisionTransformer:
    """Quickstart ViT_P: patchify stem (4x4), 4 blocks."""
    return build_vit("vit_p_w64_16px", VIT_W64_16PX, pretrained, **kwargs)


@register_model
def vit_c_w64_16px(pretrained: bool = False, **kwargs) -> VisionTransformer:
    """Quickstart ViT_C: conv stem (32, 64 channels, strides 2, 2), 3 blocks."""
    cfg = conv_twin(VIT_W64_16PX, dict(stem_widths=(32, 64), stem_strides=(2, 2)))
    return build_vit("vit_c_w64_16px", cfg, pretrained, **kwargs)


# --- the paper's models at 224 px (reference table; ViT_C = conv stem, one block fewer) ----------

VIT_1GF = dict(dim=192, mlp_ratio=3.0, num_heads=3, depth=12)
VIT_4GF = dict(dim=384, mlp_ratio=3.0, num_heads=6, depth=12)
VIT_18GF = dict(dim=768, mlp_ratio=4.0, num_heads=12, depth=12)
VIT_36GF = dict(dim=1024, mlp_ratio=4.0, num_heads=16, depth=14)
VIT_72GF = dict(dim=1152, mlp_ratio=4.0, num_heads=18, depth=22)

_STEM_1GF = dict(stem_widths=(24, 48, 96, 192), stem_strides=(2, 2, 2, 2))
_STEM_4GF = dict(stem_widths=(48, 96, 192, 384), stem_strides=(2, 2, 2, 2))
_STEM_18GF = dict(stem_widths=(64, 128, 128, 256, 256, 512), stem_strides=(2, 2, 1, 2, 1, 2))
_STEM_72GF = dict(
    stem_widths=(64, 128, 128, 256, 256, 256, 512, 512), stem_strides=(2, 2, 1, 2, 1, 1, 2, 1)
)


def conv_twin(cfg: dict, stem_cfg: dict) -> dict:
    """ViT_C of a ViT_P config: the conv stem and one block fewer, to keep flops matched."""
    return dict(cfg, stem="conv", depth=cfg["depth"] - 1, **stem_cfg)


@register_model
def vit_p_1gf(pretrained: bool = False, **kwargs) -> VisionTransformer:
    """ViT_P-1GF: d 192, 3 heads, MLP 576, 12 blocks, 16x16 patchify."""
    return build_vit("vit_p_1gf", VIT_1GF, pretrained, **kwargs)


@register_model
def vit_c_1gf(pretrained: bool = False, **kwargs) -> VisionTransformer:
    """ViT_C-1GF: conv stem 24-48-96-192, 11 blocks."""
    return build_vit("vit_c_1gf", conv_twin(VIT_1GF, _STEM_1GF), pretrained, **kwargs)


@register_model
def vit_p_4gf(pretrained: bool = False, **kwargs) -> VisionTransformer:
    """ViT_P-4GF: d 384, 6 heads, MLP 1152, 12 blocks, 16x16 patchify."""
    return build_vit("vit_p_4gf", VIT_4GF, pretrained, **kwargs)


@register_model
def vit_c_4gf(pretrained: bool = False, **kwargs) -> VisionTransformer:
    """ViT_C-4GF: conv stem 48-96-192-384, 11 blocks."""
    return build_vit("vit_c_4gf", conv_twin(VIT_4GF, _STEM_4GF), pretrained, **kwargs)


@register_model
def vit_p_18gf(pretrained: bool = False, **kwargs) -> VisionTransformer:
    """ViT_P-18GF: d 768, 12 heads, MLP 3072, 12 blocks, 16x16 patchify."""
    return build_vit("vit_p_18gf", VIT_18GF, pretrained, **kwargs)


@register_model
def vit_c_18gf(pretrained: bool = False, **kwargs) -> VisionTransformer:
    """ViT_C-18GF: conv stem 64-128-128-256-256-512 (strides 2,2,1,2,1,2), 11 blocks."""
    return build_vit("vit_c_18gf", conv_twin(VIT_18GF, _STEM_18GF), pretrained, **kwargs)


@register_model
def vit_p_36gf(pretrained: bool = False, **kwargs) -> VisionTransformer:
    """ViT_P-36GF: d 1024, 16 heads, MLP 4096, 14 blocks, 16x16 patchify."""
    return build_vit("vit_p_36gf", VIT_36GF, pretrained, **kwargs)


@register_model
def vit_c_36gf(pretrained: bool = False, **kwargs) -> VisionTransformer:
    """ViT_C-36GF: the 18GF conv stem, 13 blocks."""
    return build_vit("vit_c_36gf", conv_twin(VIT_36GF, _STEM_18GF), pretrained, **kwargs)


@register_model
def vit_p_72gf(pretrained: bool = False, **kwargs) -> VisionTransformer:
    """ViT_P-72GF (ImageNet-21k scale): d 1152, 18 heads, MLP 4608, 22 blocks."""
    return build_vit("vit_p_72gf", VIT_72GF, pretrained, **kwargs)


@register_model
def vit_c_72gf(pretrained: bool = False, **kwargs) -> VisionTransformer:
    """ViT_C-72GF: 8-conv stem 64-128-128-256-256-256-512-512, 21 blocks."""
    return build_vit("vit_c_72gf", conv_twin(VIT_72GF, _STEM_72GF), pretrained, **kwargs)


# --- 32 px (CIFAR-sized): patch 4, 64 tokens -----------------------------------------------------

_W192_32PX = dict(VIT_1GF, patch_size=4)
_W384_32PX = dict(VIT_4GF, patch_size=4)


@register_model
def vit_p_w192_32px(pretrained: bool = False, **kwargs) -> VisionTransformer:
    """32 px ViT_P: d 192, 3 heads, 12 blocks, 4x4 patchify."""
    return build_vit("vit_p_w192_32px", _W192_32PX, pretrained, **kwargs)


@register_model
def vit_c_w192_32px(pretrained: bool = False, **kwargs) -> VisionTransformer:
    """32 px ViT_C: conv stem 96-192 (strides 2, 2), 11 blocks."""
    stem = dict(stem_widths=(96, 192), stem_strides=(2, 2))
    return build_vit("vit_c_w192_32px", conv_twin(_W192_32PX, stem), pretrained, **kwargs)


@register_model
def vit_p_w384_32px(pretrained: bool = False, **kwargs) -> VisionTransformer:
    """32 px ViT_P: d 384, 6 heads, 12 blocks, 4x4 patchify."""
    return build_vit("vit_p_w384_32px", _W384_32PX, pretrained, **kwargs)


@register_model
def vit_c_w384_32px(pretrained: bool = False, **kwargs) -> VisionTransformer:
    """32 px ViT_C: conv stem 192-384 (strides 2, 2), 11 blocks."""
    stem = dict(stem_widths=(192, 384), stem_strides=(2, 2))
    return build_vit("vit_c_w384_32px", conv_twin(_W384_32PX, stem), pretrained, **kwargs)
