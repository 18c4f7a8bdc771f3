"""Stem ablations (Xiao et al., Table 3): stems between ViT_P and ViT_C, S1-S4 at 4 GF and
S1-S2 at 16 px.

Each stem holds one "patchify" layer (kernel = stride = p) of growing pixel size p = 2, 4, 8, 16
inside an otherwise convolutional stem. The paper gives no layer list, so this is the
construction used here, shown on ViT_C-4GF (d 384, 6 heads, MLP 1152, 11 blocks, 224 px):

1. Start from ViT_C-4GF's stem (3x3 stride-2 convs 48-96-192-384, then a biased 1x1 conv).
2. Replace its first log2(p) stride-2 3x3 convs by ONE p x p stride-p conv to the width the last
   replaced conv had (48, 96, 192, 384 for p = 2, 4, 8, 16). Like every conv of the stem it has no
   bias and is followed by BatchNorm and ReLU; the remaining stride-2 3x3 convs stay as in ViT_C.
3. Append stride-1 3x3 convs at width 384 (design rule: stride 1 keeps the channels), as many as
   bring the stem's flops nearest to ViT_C-4GF's stem (0.43 GF). Each costs 0.26 GF at 14x14,
   so totals stay within 3.5% of ViT_C-4GF's (measured with complexity.py):

   | model | stem | stem GF | total GF |
   |---|---|---|---|
   | ViT_C-4GF | 3x3 s2 48, 96, 192, 384; 1x1 | 0.435 | 3.96 |
   | S1 | 2x2 p 48; 3x3 s2 96, 192, 384; 1x1 | 0.426 | 3.95 |
   | S2 | 4x4 p 96; 3x3 s2 192, 384; 3x3 s1 384; 1x1 | 0.564 | 4.09 |
   | S3 | 8x8 p 192; 3x3 s2 384; 3x3 s1 384; 1x1 | 0.448 | 3.97 |
   | S4 | 16x16 p 384; 3x3 s1 384; 1x1 | 0.347 | 3.87 |

   (S2 without its stride-1 conv would have a 0.30 GF stem, 0.13 below; with it 0.13 above:
   nearest by a hair.) S1 is thus "C with a small 2x2 patchify layer", as the paper describes it.

Init: pycls has no code for these stems. Its rule is by role in the stem, which these stems
share with ViT_C's: every conv that feeds a BatchNorm keeps PyTorch's default init (so the
p x p patchify layer does too: BatchNorm, not its init, sets the scale of what it outputs, unlike
ViT_P's patchify stem, which feeds the transformer directly and gets sqrt(1/fan_in)), and the final
1x1 conv gets normal with std sqrt(2 / out_channels). See `vit.init_weights_pycls`.

At 16 px (the digits pair `vit_{p,c}_w64_16px`: d 64, 4 heads, MLP 192, patch 4; ViT_C has 3
blocks and the stem 3x3 s2 32, 3x3 s2 64, 1x1) the same three steps give the two stems whose
patchify layer fits a total stride of 4, p = 2 and 4, named by p as at 4 GF (S1: p 2, S2: p 4).
With ViT_P and ViT_C they make the ablation C, S1, S2, P; S2 patchifies the whole 4x4 patch, the
role S4 plays at 4 GF. Step 3 at 16 px: a 3x3 stride-1 conv at width 64 on the 4x4 grid costs
0.59 M multiply-adds, so (measured with complexity.py; M = 1e6 multiply-adds, 1 input channel):

   | model | stem | stem M | total M |
   |---|---|---|---|
   | vit_c_w64_16px | 3x3 s2 32, 64; 1x1 | 0.379 | 2.58 |
   | vit_s1_w64_16px | 2x2 p 32; 3x3 s2 64; 1x1 | 0.369 | 2.57 |
   | vit_s2_w64_16px | 4x4 p 64; 3x3 s1 64; 1x1 | 0.672 | 2.87 |

   (S1 with a stride-1 conv would be 0.59 M further away. S2 without it would have a 0.082 M
   stem, 0.297 M below ViT_C's; with it 0.293 M above: nearest by a hair, as S2 at 4 GF, and
   11% more flops in all, between ViT_C's 2.58 M and ViT_P's 2.95 M.)
"""

from __future__ import annotations

from timm.models import generate_default_cfgs, register_model

from optbench.models.vit import VIT_4GF, VIT_W64_16PX, VisionTransformer, build_vit, pycls_cfg

default_cfgs = generate_default_cfgs(
    {
        **{f"vit_s{i}_4gf": pycls_cfg(224, 1000, test_size=256) for i in (1, 2, 3, 4)},
        **{f"vit_s{i}_w64_16px": pycls_cfg(16, 10, in_chans=1) for i in (1, 2)},
    }
)


def ablation_cfg(
    pixel: int, widths: tuple[int, ...], strides: tuple[int, ...], vit_p: dict = VIT_4GF
) -> dict:
    """ViT_C of the ViT_P config `vit_p` (one block fewer) with a conv stem whose first layer
    patchifies `pixel` x `pixel` windows."""
    kernels = (pixel,) + (3,) * (len(widths) - 1)
    return dict(
        vit_p,
        depth=vit_p["depth"] - 1,
        stem="conv",
        stem_widths=widths,
        stem_strides=strides,
        stem_kernel_sizes=kernels,
    )


@register_model
def vit_s1_4gf(pretrained: bool = False, **kwargs) -> VisionTransformer:
    """S1: 2x2 patchify to 48, 3x3 stride-2 convs to 96, 192, 384; 11 blocks."""
    cfg = ablation_cfg(2, (48, 96, 192, 384), (2, 2, 2, 2))
    return build_vit("vit_s1_4gf", cfg, pretrained, **kwargs)


@register_model
def vit_s2_4gf(pretrained: bool = False, **kwargs) -> VisionTransformer:
    """S2: 4x4 patchify to 96, 3x3 stride-2 convs to 192, 384, one 3x3 stride-1 conv; 11 blocks."""
    cfg = ablation_cfg(4, (96, 192, 384, 384), (4, 2, 2, 1))
    return build_vit("vit_s2_4gf", cfg, pretrained, **kwargs)


@register_model
def vit_s3_4gf(pretrained: bool = False, **kwargs) -> VisionTransformer:
    """S3: 8x8 patchify to 192, a 3x3 stride-2 conv to 384, one 3x3 stride-1 conv; 11 blocks."""
    cfg = ablation_cfg(8, (192, 384, 384), (8, 2, 1))
    return build_vit("vit_s3_4gf", cfg, pretrained, **kwargs)


@register_model
def vit_s4_4gf(pretrained: bool = False, **kwargs) -> VisionTransformer:
    """S4: 16x16 patchify to 384, one 3x3 stride-1 conv; 11 blocks."""
    cfg = ablation_cfg(16, (384, 384), (16, 1))
    return build_vit("vit_s4_4gf", cfg, pretrained, **kwargs)


@register_model
def vit_s1_w64_16px(pretrained: bool = False, **kwargs) -> VisionTransformer:
    """S1 at 16 px: 2x2 patchify to 32, a 3x3 stride-2 conv to 64; 3 blocks."""
    cfg = ablation_cfg(2, (32, 64), (2, 2), VIT_W64_16PX)
    return build_vit("vit_s1_w64_16px", cfg, pretrained, **kwargs)


@register_model
def vit_s2_w64_16px(pretrained: bool = False, **kwargs) -> VisionTransformer:
    """S2 at 16 px: 4x4 patchify to 64, one 3x3 stride-1 conv; 3 blocks."""
    cfg = ablation_cfg(4, (64, 64), (4, 1), VIT_W64_16PX)
    return build_vit("vit_s2_w64_16px", cfg, pretrained, **kwargs)
