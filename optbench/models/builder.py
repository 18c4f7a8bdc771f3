"""What every optbench model shares: its timm pretrained cfg (default input, classes and evaluation
crop; no weights), the one builder that applies that cfg, the names of the weight inits, and
timm's classifier and feature API for the transformers (`TokenClassifier`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, get_args

import torch
from timm.models import build_model_with_cfg
from timm.models._features import feature_take_indices  # timm's own ViTs use it from here
from torch import nn

WeightInit = Literal["reference", "timm"]
WEIGHT_INITS: tuple[str, ...] = get_args(WeightInit)


def check_weight_init(weight_init: str) -> None:
    """Raise ValueError unless `weight_init` names an init ("reference" or "timm")."""
    if weight_init not in WEIGHT_INITS:
        raise ValueError(f"weight_init must be one of {WEIGHT_INITS}, got {weight_init!r}")


def zoo_cfg(
    img_size: int,
    num_classes: int,
    in_chans: int = 3,
    *,
    test_size: int | None = None,
    fixed_input_size: bool = True,
    interpolation: str = "bicubic",
) -> dict:
    """A timm pretrained cfg that records a model's default input, classes and evaluation crop.

    `img_size` is the training size. Evaluation resizes the shorter side to `test_size` and
    centre-crops `img_size` (timm's convention: crop_pct = train / test); without a test_size the
    whole image is used (crop_pct 1). `fixed_input_size` tells `optbench.models.create_model`
    (and timm) that the model is built for one size and takes img_size.
    """
    return dict(
        input_size=(in_chans, img_size, img_size),
        num_classes=num_classes,
        crop_pct=img_size / (test_size or img_size),
        interpolation=interpolation,
        fixed_input_size=fixed_input_size,
        mean=(0.5,) * in_chans,
        std=(0.5,) * in_chans,
        license="mit",
    )


def build(
    model_cls: type[nn.Module], variant: str, cfg: dict, pretrained: bool, **kwargs
) -> nn.Module:
    """Build `variant` from its architecture `cfg`; kwargs (num_classes, img_size...) override it,
    and the defaults come from the variant's pretrained cfg. With features_only=True (timm), a
    TokenClassifier gives the maps of its last `out_indices` blocks (default 3, or all of fewer), as timm's ViTs."""
    if pretrained:
        raise ValueError("optbench models have no pretrained weights")
    if issubclass(model_cls, TokenClassifier):
        depth = {**cfg, **kwargs}.get("depth", 3)
        out_indices = kwargs.pop("out_indices", min(3, depth))
        kwargs["feature_cfg"] = dict(feature_cls="getter", out_indices=out_indices)
    return build_model_with_cfg(model_cls, variant, pretrained=False, **{**cfg, **kwargs})


def square_size(img_size: int | Sequence[int]) -> int:
    """The side of a square input: timm passes img_size as (H, W) from a pretrained cfg."""
    if isinstance(img_size, int):
        return img_size
    h, w = img_size
    if h != w:
        raise ValueError(f"optbench models take square inputs, got img_size {tuple(img_size)}")
    return int(h)


class TokenClassifier:
    """timm's classifier and feature API for the zoo's transformers (a class token, then the
    patch tokens; the classifier reads the class token), so that timm's tools work on them:
    `create_model(..., num_classes=0)` (a feature extractor), `reset_classifier`,
    `forward_features` / `forward_head(pre_logits=True)`, and `features_only=True` (per-block
    feature maps through timm's FeatureGetterNet).

    A model provides `blocks`, `norm`, `head`, `num_features`, `patch_size`, `_tokens(x)`
    (embedded tokens and their grid) and `_block(block, x, grid)` (one block's forward).
    """

    num_prefix_tokens = 1  # the class token
    global_pool = "token"

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        """Every token after the last block and the final norm: (batch, 1 + patches, dim)."""
        x, grid = self._tokens(x)
        for block in self.blocks:
            x = self._block(block, x, grid)
        return self.norm(x)

    def forward_head(self, x: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        """The class token (or, with global_pool "avg", the mean patch token) through the head."""
        if self.global_pool == "avg":
            x = x[:, self.num_prefix_tokens :].mean(dim=1)
        else:
            x = x[:, 0]
        return x if pre_logits else self.head(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_head(self.forward_features(x))

    def get_classifier(self) -> nn.Module:
        return self.head

    def reset_classifier(self, num_classes: int, global_pool: str | None = None) -> None:
        """A new linear head for `num_classes` (PyTorch's default init; 0: no head, the model
        returns features). global_pool: "token" (the class token) or "avg"."""
        if global_pool is not None:
            if global_pool not in ("token", "avg"):
                raise ValueError(f"global_pool must be 'token' or 'avg', got {global_pool!r}")
            self.global_pool = global_pool
        self.num_classes = num_classes
        self.head = classifier(self.num_features, num_classes)

    def forward_intermediates(
        self,
        x: torch.Tensor,
        indices: int | Sequence[int] | None = None,
        norm: bool = False,
        stop_early: bool = False,
        output_fmt: str = "NCHW",
        intermediates_only: bool = False,
    ):
        """The patch tokens after the blocks `indices` names (timm's convention: an int n is the
        last n blocks, None all), as (batch, dim, h, w) maps ("NCHW") or tokens ("NLC"); with
        the final features too unless `intermediates_only`."""
        if output_fmt not in ("NCHW", "NLC"):
            raise ValueError(f"output_fmt must be 'NCHW' or 'NLC', got {output_fmt!r}")
        take, last = feature_take_indices(len(self.blocks), indices)
        x, grid = self._tokens(x)
        intermediates = []
        for i, block in enumerate(self.blocks):
            if stop_early and i > last:
                break
            x = self._block(block, x, grid)
            if i in take:
                y = (self.norm(x) if norm else x)[:, self.num_prefix_tokens :]
                if output_fmt == "NCHW":
                    y = y.reshape(y.shape[0], *grid, -1).permute(0, 3, 1, 2).contiguous()
                intermediates.append(y)
        if intermediates_only:
            return intermediates
        return self.norm(x), intermediates

    def prune_intermediate_layers(
        self, indices: int | Sequence[int] = 1, prune_norm: bool = False, prune_head: bool = True
    ) -> list[int]:
        """Drop the blocks after the last of `indices` (and the norm, the head): for features."""
        take, last = feature_take_indices(len(self.blocks), indices)
        self.blocks = self.blocks[: last + 1]
        if prune_norm:
            self.norm = nn.Identity()
        if prune_head:
            self.reset_classifier(0)
        return take


def classifier(num_features: int, num_classes: int) -> nn.Module:
    """A linear classifier, or nothing (identity) for num_classes 0, as timm's models do."""
    return nn.Linear(num_features, num_classes) if num_classes > 0 else nn.Identity()


def token_features(depth: int, dim: int, patch_size: int) -> list[dict]:
    """timm's feature_info of a transformer: one entry per block."""
    return [dict(module=f"blocks.{i}", num_chs=dim, reduction=patch_size) for i in range(depth)]
