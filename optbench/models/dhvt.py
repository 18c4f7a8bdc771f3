"""DHVT (Lu et al. 2022): a ViT for small datasets with a convolutional patch embedding (SOPE),
head tokens in attention (HI-MHSA) and a convolutional MLP (DAFF).

Written to match the official code (github ArieSeirack/DHVT, vision_transformer.py) parameter for
parameter and, with one seed, draw for draw at init, on current timm; with plain BatchNorm where
the official SOPE has SyncBatchNorm, so that one process trains it (DDP may convert it). No
absolute position embedding: position comes from the zero padding of the convs, so any square
input whose side is a multiple of the patch size works.

Registered with timm: `dhvt_{tiny,small}_cifar_p{4,2}` (32 px, 100 classes),
`dhvt_{tiny,small}_imagenet_p16` (224 px, 1000 classes), `dhvt_{tiny,small}_domainnet_p16`
(224 px, 345 classes), and `dhvt_w64_16px`, a digits-scale model for the quickstart study.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from timm.layers import DropPath, trunc_normal_
from timm.models import generate_default_cfgs, register_model
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


class Affine(nn.Module):
    """Per-channel x * alpha + beta on (B, C, H, W) maps (alpha starts at 1, beta at 0)."""

    def __init__(self, channels: int):
        super().__init__()
        self.alpha = nn.Parameter(torch.ones(1, channels, 1, 1))
        self.beta = nn.Parameter(torch.zeros(1, channels, 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.alpha + self.beta


class SOPE(nn.Module):
    """Sequential overlapping patch embedding: Affine -> log2(p) 3x3 stride-2 convs (no bias),
    each followed by BatchNorm, GELU between consecutive convs -> Affine -> tokens (B, N, C).

    Widths double up to C (patch 16: C/8, C/4, C/2, C). With a single conv (patch 2) a GELU
    follows it, as in the official code.
    """

    def __init__(self, in_chans: int, dim: int, patch_size: int):
        super().__init__()
        if patch_size < 2 or patch_size & (patch_size - 1):
            raise ValueError(f"SOPE patch_size must be a power of two >= 2, got {patch_size}")
        n_convs = patch_size.bit_length() - 1  # log2(patch_size)
        widths = [dim >> (n_convs - 1 - i) for i in range(n_convs)]
        layers: list[nn.Module] = []
        c_in = in_chans
        for i, width in enumerate(widths):
            layers += [nn.Conv2d(c_in, width, 3, stride=2, padding=1, bias=False)]
            layers += [nn.BatchNorm2d(width)]
            if i < n_convs - 1 or n_convs == 1:
                layers.append(nn.GELU())
            c_in = width
        self.pre_affine = Affine(in_chans)
        self.convs = nn.Sequential(*layers)
        self.post_affine = Affine(dim)
        self.patch_size = patch_size

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, tuple[int, int]]:
        """Tokens (B, H*W, C) and the grid (H, W) they came from."""
        x = self.post_affine(self.convs(self.pre_affine(x)))
        return x.flatten(2).transpose(1, 2), (x.shape[2], x.shape[3])


class HeadTokenAttention(nn.Module):
    """HI-MHSA: multi-head self-attention over the tokens plus one fresh "head token" per head.

    A head token summarizes its head's channel group: the group's mean over all tokens, projected
    d -> C by one shared Linear, LayerNorm over d, GELU, plus a learned per-layer head embedding.
    The head tokens leave the output; their mean is added to the class token's output.
    """

    def __init__(self, dim: int, num_heads: int):
        super().__init__()
        if dim % num_heads:
            raise ValueError(f"dim {dim} is not divisible by num_heads {num_heads}")
        self.num_heads, self.head_dim = num_heads, dim // num_heads
        # Built in the official code's order, which is the order its init draws in.
        self.qkv = nn.Linear(dim, 3 * dim, bias=True)
        self.proj = nn.Linear(dim, dim)
        self.head_proj = nn.Linear(self.head_dim, dim)
        self.head_norm = nn.LayerNorm(self.head_dim)  # PyTorch's eps 1e-5, as the official code
        self.head_act = nn.GELU()
        self.head_embed = nn.Parameter(trunc_normal_(torch.zeros(1, num_heads, dim), std=0.02))

    def head_tokens(self, x: torch.Tensor) -> torch.Tensor:
        """(B, N, C) -> (B, h, C)."""
        b, _, c = x.shape
        h, d = self.num_heads, self.head_dim
        groups = x.view(b, -1, h, d).mean(dim=1)  # (B, h, d): each channel group over all tokens
        tokens = self.head_proj(groups).view(b, h, h, d)  # shared d -> C, seen as h groups of d
        tokens = self.head_act(self.head_norm(tokens)).reshape(b, h, c)
        return tokens + self.head_embed

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, c = x.shape
        h, d = self.num_heads, self.head_dim
        x = torch.cat([x, self.head_tokens(x)], dim=1)  # (B, N + h, C)
        q, k, v = self.qkv(x).view(b, n + h, 3, h, d).permute(2, 0, 3, 1, 4)
        x = F.scaled_dot_product_attention(q, k, v)  # scale d^-0.5
        x = self.proj(x.transpose(1, 2).reshape(b, n + h, c))
        tokens, heads = x[:, :n], x[:, n:]
        cls = tokens[:, :1] + heads.mean(dim=1, keepdim=True)
        return torch.cat([cls, tokens[:, 1:]], dim=1)


class DAFF(nn.Module):
    """Dynamic aggregation feed forward. Patch tokens, on their (H, W) grid, go through
    1x1 conv C -> hidden + BN + GELU, a residual depthwise 3x3 conv + BN + GELU, 1x1 conv
    hidden -> C + BN. The class token skips the convs: it is scaled channel-wise by a vector
    computed from the mean output patch token (Linear C -> C/4, GELU, Linear C/4 -> C)."""

    def __init__(self, dim: int, hidden: int):
        super().__init__()
        # The convs have biases (before BatchNorm, so redundant) as in the official code.
        self.expand = nn.Sequential(nn.Conv2d(dim, hidden, 1), nn.BatchNorm2d(hidden), nn.GELU())
        self.depthwise = nn.Sequential(
            nn.Conv2d(hidden, hidden, 3, padding=1, groups=hidden),
            nn.BatchNorm2d(hidden),
            nn.GELU(),
        )
        self.reduce = nn.Sequential(nn.Conv2d(hidden, dim, 1), nn.BatchNorm2d(dim))
        self.aggregate = nn.Sequential(
            nn.Linear(dim, dim // 4), nn.GELU(), nn.Linear(dim // 4, dim)
        )

    def forward(self, x: torch.Tensor, grid: tuple[int, int]) -> torch.Tensor:
        b, n, c = x.shape
        cls, patches = x[:, :1], x[:, 1:]
        y = patches.transpose(1, 2).reshape(b, c, *grid)
        y = self.expand(y)
        y = y + self.depthwise(y)
        y = self.reduce(y).flatten(2).transpose(1, 2)  # (B, N - 1, C)
        cls = cls * self.aggregate(y.mean(dim=1, keepdim=True))
        return torch.cat([cls, y], dim=1)


class DHVTBlock(nn.Module):
    """Pre-LN block: x += HI-MHSA(LN(x)); x += DAFF(LN(x)), with stochastic depth."""

    def __init__(self, dim: int, num_heads: int, mlp_ratio: float, drop_path: float):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.attn = HeadTokenAttention(dim, num_heads)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = DAFF(dim, int(dim * mlp_ratio))
        self.drop_path = DropPath(drop_path) if drop_path > 0 else nn.Identity()

    def forward(self, x: torch.Tensor, grid: tuple[int, int]) -> torch.Tensor:
        x = x + self.drop_path(self.attn(self.norm1(x)))
        return x + self.drop_path(self.mlp(self.norm2(x), grid))


class DHVT(TokenClassifier, nn.Module):
    """SOPE -> class token + tokens -> DHVT blocks -> LN -> linear head on the class token.
    timm's classifier and feature API come from TokenClassifier (builder.py)."""

    def __init__(
        self,
        *,
        img_size: int | Sequence[int] = 32,
        patch_size: int = 4,
        in_chans: int = 3,
        num_classes: int = 100,
        dim: int = 192,
        depth: int = 12,
        num_heads: int = 4,
        mlp_ratio: float = 4.0,
        drop_path_rate: float = 0.1,
        weight_init: WeightInit = "reference",
    ):
        super().__init__()
        check_weight_init(weight_init)  # DHVT has one init, the official code's, under both names
        img_size = square_size(img_size)
        if img_size % patch_size:
            raise ValueError(f"img_size {img_size} is not a multiple of patch_size {patch_size}")
        self.img_size, self.patch_size = img_size, patch_size
        self.in_chans, self.num_classes = in_chans, num_classes
        self.patch_embed = SOPE(in_chans, dim, patch_size)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        dpr = [drop_path_rate * i / max(depth - 1, 1) for i in range(depth)]  # linear rise
        self.blocks = nn.ModuleList(DHVTBlock(dim, num_heads, mlp_ratio, p) for p in dpr)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.num_features = self.head_hidden_size = dim
        self.head = classifier(dim, num_classes)
        self.feature_info = token_features(depth, dim, patch_size)
        self._init_weights()

    @torch.no_grad()
    def _init_weights(self) -> None:
        """The official code's init (timm 0.4's DeiT `_init_vit_weights`, applied without module
        names): every Linear, the classifier included, truncated normal 0.02 with zero bias; the
        class token truncated normal 0.02. The head embeddings were drawn at construction; convs
        keep PyTorch's default init (weights and biases); norms and Affine start at 1 and 0."""
        trunc_normal_(self.cls_token, std=0.02)
        for m in self.modules():
            if isinstance(m, nn.Linear):
                trunc_normal_(m.weight, std=0.02)
                nn.init.zeros_(m.bias)

    def _tokens(self, x: torch.Tensor) -> tuple[torch.Tensor, tuple[int, int]]:
        x, grid = self.patch_embed(x)
        return torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1), grid

    def _block(self, block: nn.Module, x: torch.Tensor, grid: tuple[int, int]) -> torch.Tensor:
        return block(x, grid)


def _dhvt(variant: str, cfg: dict, pretrained: bool, **kwargs) -> DHVT:
    return build(DHVT, variant, cfg, pretrained, **kwargs)


default_cfgs = generate_default_cfgs(
    {
        "dhvt_w64_16px": zoo_cfg(16, 10, in_chans=1),
        **{f"dhvt_{s}_cifar_p{p}": zoo_cfg(32, 100) for p in (4, 2) for s in ("tiny", "small")},
        # the official code evaluates 224 px models on the centre 224 of the image resized to 256
        **{f"dhvt_{s}_imagenet_p16": zoo_cfg(224, 1000, test_size=256) for s in ("tiny", "small")},
        **{f"dhvt_{s}_domainnet_p16": zoo_cfg(224, 345, test_size=256) for s in ("tiny", "small")},
    }
)

_TINY = dict(dim=192, depth=12, mlp_ratio=4.0)
_SMALL = dict(dim=384, depth=12, mlp_ratio=4.0)


@register_model
def dhvt_w64_16px(pretrained: bool = False, **kwargs) -> DHVT:
    """Quickstart DHVT for 16 px digits: width 64, 4 heads, patch 4 (16 tokens), 2 blocks.

    Two blocks (not three like vit_c_w64_16px) because a DHVT block costs more on a CPU (DAFF's
    convs and BatchNorms); so a digits run takes about as long as vit_c_w64_16px's."""
    cfg = dict(dim=64, depth=2, num_heads=4, mlp_ratio=4.0, patch_size=4)
    return _dhvt("dhvt_w64_16px", cfg, pretrained, **kwargs)


@register_model
def dhvt_tiny_cifar_p4(pretrained: bool = False, **kwargs) -> DHVT:
    """DHVT-T for 32 px, patch 4 (64 tokens): C 192, 4 heads."""
    return _dhvt("dhvt_tiny_cifar_p4", dict(_TINY, num_heads=4, patch_size=4), pretrained, **kwargs)


@register_model
def dhvt_small_cifar_p4(pretrained: bool = False, **kwargs) -> DHVT:
    """DHVT-S for 32 px, patch 4: C 384, 8 heads."""
    return _dhvt(
        "dhvt_small_cifar_p4", dict(_SMALL, num_heads=8, patch_size=4), pretrained, **kwargs
    )


@register_model
def dhvt_tiny_cifar_p2(pretrained: bool = False, **kwargs) -> DHVT:
    """DHVT-T for 32 px, patch 2 (256 tokens): C 192, 4 heads."""
    return _dhvt("dhvt_tiny_cifar_p2", dict(_TINY, num_heads=4, patch_size=2), pretrained, **kwargs)


@register_model
def dhvt_small_cifar_p2(pretrained: bool = False, **kwargs) -> DHVT:
    """DHVT-S for 32 px, patch 2: C 384, 8 heads."""
    return _dhvt(
        "dhvt_small_cifar_p2", dict(_SMALL, num_heads=8, patch_size=2), pretrained, **kwargs
    )


@register_model
def dhvt_tiny_imagenet_p16(pretrained: bool = False, **kwargs) -> DHVT:
    """DHVT-T for 224 px, patch 16: C 192, 3 heads."""
    cfg = dict(_TINY, num_heads=3, patch_size=16)
    return _dhvt("dhvt_tiny_imagenet_p16", cfg, pretrained, **kwargs)


@register_model
def dhvt_small_imagenet_p16(pretrained: bool = False, **kwargs) -> DHVT:
    """DHVT-S for 224 px, patch 16: C 384, 6 heads."""
    cfg = dict(_SMALL, num_heads=6, patch_size=16)
    return _dhvt("dhvt_small_imagenet_p16", cfg, pretrained, **kwargs)


@register_model
def dhvt_tiny_domainnet_p16(pretrained: bool = False, **kwargs) -> DHVT:
    """DHVT-T for DomainNet (224 px, 345 classes), patch 16: C 192, 4 heads."""
    cfg = dict(_TINY, num_heads=4, patch_size=16)
    return _dhvt("dhvt_tiny_domainnet_p16", cfg, pretrained, **kwargs)


@register_model
def dhvt_small_domainnet_p16(pretrained: bool = False, **kwargs) -> DHVT:
    """DHVT-S for DomainNet (224 px, 345 classes), patch 16: C 384, 6 heads."""
    cfg = dict(_SMALL, num_heads=6, patch_size=16)
    return _dhvt("dhvt_small_domainnet_p16", cfg, pretrained, **kwargs)
