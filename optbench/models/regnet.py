"""RegNetY-1.0GF, -4.0GF and -16GF, the CNN reference of Xiao et al., as the paper's configs define
them (pycls, branch `vitconfigs`, configs/vitconv_baselines/regnety/), with pycls's init.

They are not the RegNetYs of pycls's model zoo, nor timm's regnety_008/040/160 (other widths,
depths and group widths). All three: a simple stem (3x3 stride-2 conv to 32 channels, BN, ReLU);
four stages of residual bottleneck blocks (1x1, grouped 3x3, SE, 1x1; bottleneck multiplier 1;
SE width 0.25 x the block's input width; a 1x1 conv + BN shortcut where the shape changes), each
stage starting with stride 2; global average pool and a linear classifier.

| model | definition (pycls) | train / test px |
|---|---|---|
| regnety_1gf | AnyNet: depths 1, 4, 10, 3; widths 40, 120, 328, 904; group width 4 | 232 / 262 |
| regnety_4gf | RegNet generator: depth 26, w0 88, wa 30.3, wm 2.404; group width 32 | 240 / 272 |
| regnety_16gf | AnyNet: depths 2, 7, 18, 2; widths 168, 336, 896, 2128; group width 56 | 256 / 292 |

Built on timm's RegNet (stem, blocks, SE, head). The generator config is a timm `RegNetCfg` as it
stands (timm's generator and width/group adjustment give pycls's stages for it: widths
96, 192, 512, 1216, depths 2, 6, 16, 2); the two AnyNet configs, which no generator produces, are
an `AnyNetCfg` whose explicit stages replace the generator's. Each pretrained cfg records the
train size as input_size and crop_pct = train / test: evaluation resizes the shorter side to the
test size and centre-crops the train size, as pycls does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from timm.layers import calculate_drop_path_rates
from timm.models import generate_default_cfgs, register_model
from timm.models.regnet import RegNet, RegNetCfg
from torch import nn

from optbench.models.builder import WeightInit, build, check_weight_init, zoo_cfg


@dataclass
class AnyNetCfg(RegNetCfg):
    """A RegNetCfg with explicit stages (pycls's AnyNet) in place of the RegNet generator's."""

    stage_depths: tuple[int, ...] = ()
    stage_widths: tuple[int, ...] = ()
    stage_group_widths: tuple[int, ...] = ()


class RegNetY(RegNet):
    """timm's RegNet with pycls's init, built from a RegNetCfg or an AnyNetCfg."""

    def __init__(self, cfg: RegNetCfg, *, weight_init: WeightInit = "reference", **kwargs):
        check_weight_init(weight_init)  # one init, pycls's, under both names
        super().__init__(cfg, **kwargs)
        init_weights_pycls(self)

    def _get_stage_args(
        self,
        cfg: RegNetCfg,
        default_stride: int = 2,
        output_stride: int = 32,
        drop_path_rate: float = 0.0,
    ) -> tuple[list[dict], dict]:
        per_stage, common = super()._get_stage_args(
            cfg, default_stride, output_stride, drop_path_rate
        )
        if not isinstance(cfg, AnyNetCfg):
            return per_stage, common
        if output_stride != 32:
            raise ValueError("the AnyNet RegNetYs are built with output_stride 32 only")
        depths = list(cfg.stage_depths)
        rates = calculate_drop_path_rates(drop_path_rate, depths, stagewise=True)
        stages = zip(depths, cfg.stage_widths, cfg.stage_group_widths, rates, strict=True)
        per_stage = [
            dict(
                out_chs=width,
                stride=default_stride,
                dilation=1,
                depth=depth,
                bottle_ratio=cfg.bottle_ratio,
                group_size=group_width,
                drop_path_rates=rate,
            )
            for depth, width, group_width, rate in stages
        ]
        return per_stage, common


@torch.no_grad()
def init_weights_pycls(model: nn.Module) -> None:
    """pycls's `init_weights` (ResNet-style), module by module.

    Conv weights: normal with std sqrt(2 / fan_out), fan_out = k * k * out_channels (groups not
    divided out, as in pycls). Conv biases (only SE's convs have them) keep PyTorch's default,
    which pycls never overwrites. BatchNorm: weight 1, bias 0 (pycls's final-gamma zero init is
    off in these configs). Linear: normal with std 0.01, bias 0.
    """
    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            if m.bias is not None:
                m.reset_parameters()  # PyTorch's default for the bias (timm zeroes it)
            fan_out = m.kernel_size[0] * m.kernel_size[1] * m.out_channels
            nn.init.normal_(m.weight, std=math.sqrt(2.0 / fan_out))
        elif isinstance(m, nn.BatchNorm2d):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, std=0.01)
            nn.init.zeros_(m.bias)


# Shared by the three: pycls's AnyNet/RegNet defaults with SE on (ratio 0.25), ReLU, BatchNorm.
_REGNETY = dict(stem_width=32, bottle_ratio=1.0, se_ratio=0.25, downsample="conv1x1")

REGNETY_1GF = AnyNetCfg(
    stage_depths=(1, 4, 10, 3),
    stage_widths=(40, 120, 328, 904),
    stage_group_widths=(4, 4, 4, 4),
    **_REGNETY,
)
REGNETY_4GF = RegNetCfg(depth=26, w0=88, wa=30.3, wm=2.404, group_size=32, **_REGNETY)
REGNETY_16GF = AnyNetCfg(
    stage_depths=(2, 7, 18, 2),
    stage_widths=(168, 336, 896, 2128),
    stage_group_widths=(56, 56, 56, 56),
    **_REGNETY,
)


def _pycls_cfg(train_size: int, test_size: int) -> dict:
    """RegNets take any input size: img_size is not an argument of theirs."""
    return zoo_cfg(
        train_size,
        1000,
        test_size=test_size,
        fixed_input_size=False,
        interpolation="bilinear",
    )


default_cfgs = generate_default_cfgs(
    {
        "regnety_1gf": _pycls_cfg(232, 262),
        "regnety_4gf": _pycls_cfg(240, 272),
        "regnety_16gf": _pycls_cfg(256, 292),
    }
)


@register_model
def regnety_1gf(pretrained: bool = False, **kwargs) -> RegNetY:
    """RegNetY-1.0GF of Xiao et al. (AnyNet config), trained at 232 px, tested at 262."""
    return build(RegNetY, "regnety_1gf", dict(cfg=REGNETY_1GF), pretrained, **kwargs)


@register_model
def regnety_4gf(pretrained: bool = False, **kwargs) -> RegNetY:
    """RegNetY-4.0GF of Xiao et al. (RegNet generator config), trained at 240 px, tested at 272."""
    return build(RegNetY, "regnety_4gf", dict(cfg=REGNETY_4GF), pretrained, **kwargs)


@register_model
def regnety_16gf(pretrained: bool = False, **kwargs) -> RegNetY:
    """RegNetY-16GF of Xiao et al. (AnyNet config), trained at 256 px, tested at 292."""
    return build(RegNetY, "regnety_16gf", dict(cfg=REGNETY_16GF), pretrained, **kwargs)
