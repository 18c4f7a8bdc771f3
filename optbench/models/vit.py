"""ViT_P and ViT_C (Xiao et al. 2021): one ViT, two stems.

ViT_P patchifies with one stride-p p x p conv; ViT_C replaces it with a stack of 3x3 convs
(each followed by BatchNorm and ReLU) and a final biased 1x1 conv, and drops one block to keep
flops matched. The encoder is a standard pre-LN ViT with a class token and a learned absolute
position embedding. Factory functions below only set a config; they are registered with timm so
`timm.create_model("vit_c_w64_16px", num_classes=10, in_chans=1)` builds them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from timm.layers import LayerNorm
from timm.models import register_model
from timm.models.vision_transformer import Block
from torch import nn


class PatchifyStem(nn.Sequential):
    """One Conv2d(in, dim, kernel=p, stride=p, bias=True): no norm, no activation."""

    def __init__(self, in_chans: int, dim: int, patch_size: int):
        super().__init__(nn.Conv2d(in_chans, dim, patch_size, stride=patch_size, bias=True))
        self.stride = patch_size


class ConvStem(nn.Sequential):
    """3x3 convs (padding 1, no bias) each followed by BN + ReLU, then a biased 1x1 conv to dim.

    Design rule of the paper: a 3x3 conv either has stride 2 and doubles the channels, or
    stride 1 and keeps them. The product of the strides is the stem's patch size.
    """

    def __init__(self, in_chans: int, dim: int, widths: Sequence[int], strides: Sequence[int]):
        if len(widths) != len(strides) or not widths:
            raise ValueError(f"conv stem needs one stride per width, got {widths} / {strides}")
        layers: list[nn.Module] = []
        c_in = in_chans
        for width, stride in zip(widths, strides, strict=True):
            layers += [
                nn.Conv2d(c_in, width, 3, stride=stride, padding=1, bias=False),
                nn.BatchNorm2d(width),
                nn.ReLU(inplace=True),
            ]
            c_in = width
        layers.append(nn.Conv2d(c_in, dim, 1, bias=True))
        super().__init__(*layers)
        self.stride = math.prod(strides)


class VisionTransformer(nn.Module):
    """Pre-LN ViT: stem -> tokens + class token + position embedding -> blocks -> LN -> head."""

    def __init__(
        self,
        *,
        img_size: int = 224,
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
        drop_path_rate: float = 0.0,
    ):
        super().__init__()
        if stem == "patchify":
            self.stem: nn.Module = PatchifyStem(in_chans, dim, patch_size)
        elif stem == "conv":
            self.stem = ConvStem(in_chans, dim, stem_widths, stem_strides)
        else:
            raise ValueError(f"stem must be 'patchify' or 'conv', got {stem!r}")
        if self.stem.stride != patch_size:
            raise ValueError(
                f"stem strides multiply to {self.stem.stride}, not patch_size {patch_size}"
            )
        if img_size % patch_size:
            raise ValueError(f"img_size {img_size} is not a multiple of patch_size {patch_size}")
        self.img_size, self.patch_size, self.num_classes = img_size, patch_size, num_classes
        self.num_patches = (img_size // patch_size) ** 2
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embed = nn.Parameter(torch.zeros(1, self.num_patches + 1, dim))
        dpr = torch.linspace(0, drop_path_rate, depth).tolist()
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
        self.head = nn.Linear(dim, num_classes)
        self._init_weights()

    def _init_weights(self) -> None:
        nn.init.trunc_normal_(self.pos_embed, std=0.02)
        nn.init.trunc_normal_(self.cls_token, std=0.02)
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.trunc_normal_(m.weight, std=0.02)
                nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
        nn.init.zeros_(self.head.weight)

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x).flatten(2).transpose(1, 2)  # (B, N, dim)
        cls = self.cls_token.expand(x.shape[0], -1, -1)
        x = torch.cat([cls, x], dim=1) + self.pos_embed
        return self.norm(self.blocks(x))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.forward_features(x)[:, 0])


def _vit(cfg: dict, **kwargs) -> VisionTransformer:
    for key in ("pretrained", "pretrained_cfg", "pretrained_cfg_overlay", "cache_dir"):
        if kwargs.pop(key, None):
            raise ValueError("optbench models have no pretrained weights")
    return VisionTransformer(**{**cfg, **kwargs})


# --- quickstart pair: width 64, 16x16 input, patch 4 (16 tokens) ---------------------------------

_W64_16PX = dict(img_size=16, patch_size=4, dim=64, num_heads=4, mlp_ratio=3.0)


@register_model
def vit_p_w64_16px(**kwargs) -> VisionTransformer:
    """Quickstart ViT_P: patchify stem (4x4), 4 blocks."""
    return _vit(dict(_W64_16PX, depth=4, stem="patchify"), **kwargs)


@register_model
def vit_c_w64_16px(**kwargs) -> VisionTransformer:
    """Quickstart ViT_C: conv stem (32, 64 channels, strides 2, 2), 3 blocks."""
    return _vit(
        dict(_W64_16PX, depth=3, stem="conv", stem_widths=(32, 64), stem_strides=(2, 2)), **kwargs
    )
