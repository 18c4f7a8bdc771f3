"""The tensor policy's pixel ops: timm's auto-augment ops on uint8 batches (n, C, H, W) on any
device, reproducing Pillow's arithmetic (tests/test_tensor_policy.py checks each against timm's
PIL op, image for image), a whole op slot of a batch at once with a fixed number of tensor
operations whatever the batch size and whichever ops the images drew (`apply_slots`):
- the lookup-table ops (AutoContrast, Equalize, Invert, Posterize, Solarize, SolarizeAdd): one
  256-entry table per image and channel, in integers, then one gather;
- the enhance blends (Color, Contrast, Brightness, Sharpness): one float32 interpolation with
  per-image factors towards a per-image degenerate image (grey, mean grey, black or SMOOTH);
- the affine ops (Rotate, Shear, Translate): one sampling grid with per-image matrices, Pillow's
  own bilinear / bicubic (a = -1) sampling in float64, pixel centres at +0.5, edge pixels
  replicated inside the image and the fill colour outside it.
An image that did not draw an op of a kind gets that kind's identity (table 0..255, factor 1,
the identity matrix), which gives its pixels back exactly. What each image drew is turned into
those per-image parameters on the host (`slot_parameters`, numpy: no device operations). The
table that picks the ops is tensor_policy.py, the draws tensor_draws.py.
"""

from __future__ import annotations

import functools

import numpy as np
import torch

RESAMPLE = ("bilinear", "bicubic")  # what `PolicyDraws.resample` indexes
AFFINE_OPS = (
    "Rotate",
    "ShearX",
    "ShearY",
    "TranslateX",
    "TranslateY",
    "TranslateXRel",
    "TranslateYRel",
)
_LUT_OPS = ("AutoContrast", "Equalize", "Invert", "Posterize", "Solarize", "SolarizeAdd")
_BLEND_OPS = ("Color", "Contrast", "Brightness", "Sharpness")
OPS = frozenset(
    (*AFFINE_OPS, *_LUT_OPS, "PosterizeIncreasing", "PosterizeOriginal", "SolarizeIncreasing")
    + tuple(f"{op}{s}" for op in _BLEND_OPS for s in ("", "Increasing"))
)

# Per image and slot, the parameters `apply_slots` reads (float64; identity values in brackets):
# posterize's quantum 2 ** (8 - bits) [1], solarize's threshold [256], solarize_add's addend [0],
# the blend factor [1] and the weight of the mean grey in the degenerate image (1: Contrast; 0:
# Brightness's black) [0], the affine matrix a..f in pairs (a, d), (b, e), (c, f) [1 0, 0 1, 0 0].
PARAMETERS = ("quantum", "threshold", "add", "factor", "mean", "a", "d", "b", "e", "c", "f")
# ... and the flags (bool [False]): the table is AutoContrast's, Equalize's; the degenerate image
# is the grey one (Color), SMOOTH (Sharpness); the filter is bicubic.
FLAGS = ("autocontrast", "equalize", "grey", "smooth", "bicubic")
_P = {name: i for i, name in enumerate(PARAMETERS)}
_F = {name: i for i, name in enumerate(FLAGS)}


def to_device(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A small CPU tensor (the per-image parameters) on `device`. To CUDA through pinned memory
    without blocking: a plain copy would wait for the GPU's queued work, a host sync per batch;
    torch's pinned-memory cache keeps the buffer until the copy is done."""
    if device.type != "cuda":
        return t
    return t.pin_memory().to(device, non_blocking=True)


def _rotation(degrees: np.ndarray, h: int, w: int) -> np.ndarray:
    """Image.rotate's matrices (about the centre, counter-clockwise), (n, 6): Pillow rounds each
    coefficient to 15 decimals with Python's round, reproduced here exactly (`_round15`)."""
    angle = -np.radians(degrees % 360.0)
    cos, sin, msin = (_round15(v) for v in (np.cos(angle), np.sin(angle), -np.sin(angle)))
    cx, cy = w / 2.0, h / 2.0
    a, b, d, e = cos, sin, msin, cos
    return np.stack([a, b, a * -cx + b * -cy + 0.0 + cx, d, e, d * -cx + e * -cy + 0.0 + cy], 1)


def _round15(x: np.ndarray) -> np.ndarray:
    """Python's round(v, 15) for |v| <= 1, vectorized: the exact decimal value rounded half to
    even at 15 places, then the nearest double. x * 1e15 is rounded once; its exact error
    (Dekker's two-product) decides the cases where that rounding crosses a half."""
    scaled = x * 1e15
    split = 134217729.0  # 2 ** 27 + 1
    c = split * x
    x_hi = c - (c - x)
    x_lo = x - x_hi
    c = split * 1e15
    s_hi = c - (c - 1e15)
    s_lo = 1e15 - s_hi
    error = ((x_hi * s_hi - scaled) + x_hi * s_lo + x_lo * s_hi) + x_lo * s_lo
    below = np.floor(scaled)
    half = scaled - below - 0.5  # exact: |scaled| < 2 ** 50
    up = (half > -error) | ((half == -error) & (np.fmod(below, 2) != 0))
    return (below + up) / 1e15


def _affine_matrix(name: str, arg: np.ndarray, h: int, w: int) -> np.ndarray:
    """Pillow's Image.transform(size, AFFINE, (a, b, c, d, e, f)) matrices (n, 6) of an affine
    op: output pixel centre (x + .5, y + .5) maps to input point (a x + b y + c, d x + e y + f)."""
    if name == "Rotate":
        return _rotation(arg, h, w)
    m = np.tile(np.array([1.0, 0, 0, 0, 1.0, 0]), (len(arg), 1))
    column, scale = {
        "ShearX": (1, 1.0),
        "ShearY": (3, 1.0),
        "TranslateX": (2, 1.0),
        "TranslateY": (5, 1.0),
        "TranslateXRel": (2, w),
        "TranslateYRel": (5, h),
    }[name]
    m[:, column] = arg * scale if scale != 1.0 else arg
    return m


def slot_parameters(
    names: tuple[str, ...], op: np.ndarray, arg: np.ndarray, resample: np.ndarray, h: int, w: int
) -> tuple[np.ndarray, np.ndarray]:
    """The per-image parameters (len(PARAMETERS), n) float64 and flags (len(FLAGS), n) bool of
    one slot in which image i runs op names[op[i]] (none where op[i] < 0) with argument arg[i]
    and, for an affine op, filter RESAMPLE[resample[i]]."""
    n = len(op)
    p = np.zeros((len(PARAMETERS), n))
    p[[_P["quantum"], _P["factor"], _P["a"], _P["e"]]] = 1.0
    p[_P["threshold"]] = 256.0
    flags = np.zeros((len(FLAGS), n), dtype=bool)
    flags[_F["bicubic"]] = resample == RESAMPLE.index("bicubic")
    for k, name in enumerate(names):
        rows = op == k
        if not rows.any():
            continue
        v = np.trunc(arg[rows])  # the integer ops' arguments, as Python's int()
        kind = name.replace("Increasing", "").replace("Original", "")
        if kind == "AutoContrast":
            flags[_F["autocontrast"], rows] = True
        elif kind == "Equalize":
            flags[_F["equalize"], rows] = True
        elif kind == "Invert":
            p[_P["threshold"], rows] = 0.0
        elif kind == "Posterize":  # 0 bits: black, as `augment._posterize`
            p[_P["quantum"], rows] = 2.0 ** (8 - np.clip(v, 0, 8))
        elif kind == "Solarize":
            p[_P["threshold"], rows] = v
        elif kind == "SolarizeAdd":
            p[_P["add"], rows] = v
        elif kind in _BLEND_OPS:
            p[_P["factor"], rows] = arg[rows].astype(np.float32)  # Pillow's float32 factor
            p[_P["mean"], rows] = kind == "Contrast"
            flags[_F["grey"], rows] = kind == "Color"
            flags[_F["smooth"], rows] = kind == "Sharpness"
        else:
            m = _affine_matrix(name, arg[rows], h, w)
            for key, column in zip("abcdef", m.T, strict=True):
                p[_P[key], rows] = column
    return p, flags


@functools.lru_cache(maxsize=16)
def _constants(c: int, h: int, w: int, fill: tuple[int, ...], device: torch.device) -> dict:
    """The tensors every batch of this shape reads, made once per shape and device."""
    f64 = dict(dtype=torch.float64, device=device)
    ix = torch.arange(256, **f64)
    border = torch.ones(h, w, dtype=torch.bool, device=device)
    border[1:-1, 1:-1] = False
    smooth = torch.ones(c, 1, 3, 3, dtype=torch.float32, device=device)
    smooth[:, :, 1, 1] = 5.0
    return {
        "ix": ix,
        "low": ix < 128,
        "255": torch.tensor(255.0, **f64),
        "luma": torch.tensor([19595.0, 38470.0, 7471.0], device=device).view(1, 3, 1),
        "smooth": smooth,
        "border": border.view(1, 1, h * w),
        # (x + .5, y + .5) of every output pixel, (1, 1, H*W) each
        "cols": (torch.arange(w, **f64).repeat(h) + 0.5).view(1, 1, h * w),
        "rows": (torch.arange(h, **f64).repeat_interleave(w) + 0.5).view(1, 1, h * w),
        "size": torch.tensor([w, h], **f64).view(2, 1, 1, 1),
        "last": torch.tensor([w - 1, h - 1], **f64).view(2, 1, 1, 1),
        # the taps of a filter along each axis: bicubic's 4, bilinear's 2 as 4 (each twice)
        "taps": torch.tensor([[0, 0, 1, 1], [-1, 0, 1, 2]], **f64).view(2, 1, 4, 1),
        "fill": torch.tensor(fill, **f64).view(1, c, 1),
        "one": torch.ones((), dtype=torch.long, device=device),
    }


def apply_slots(
    x: torch.Tensor, parameters: torch.Tensor, flags: torch.Tensor, fill: tuple[int, ...]
) -> torch.Tensor:
    """uint8 images (n, C, H, W) through L op slots in turn, slot s with the per-image
    `parameters` (L, len(PARAMETERS), n) float64 and `flags` (L, len(FLAGS), n) bool on x's
    device: each slot a lookup table, then a blend, then an affine warp, each the identity where
    the image drew none (`slot_parameters`)."""
    n, c, h, w = x.shape
    k = _constants(c, h, w, tuple(fill), x.device)
    p = parameters.view(*parameters.shape, 1, 1).unbind(0)
    f = flags.view(*flags.shape, 1, 1).unbind(0)
    factor = parameters[:, _P["factor"]].float().view(-1, n, 1, 1).unbind(0)
    img = x.reshape(n, c, h * w).double()
    for s in range(len(p)):
        img = _lookup(img, p[s], f[s], k, h * w)
        img = _blend(img, p[s], f[s], factor[s], k, h, w)
        img = _warp(img, p[s], f[s], k, h, w)
    return img.to(torch.uint8).view(n, c, h, w)


def _lookup(img: torch.Tensor, p: torch.Tensor, f: torch.Tensor, k: dict, hw: int):
    """Each image and channel through its own table (n, C, 256): posterize, solarize and
    solarize_add (identities unless drawn), replaced by AutoContrast's or Equalize's where
    drawn, in Pillow's integer arithmetic."""
    ix = k["ix"]
    table = ix - torch.fmod(ix, p[_P["quantum"]])
    table = torch.where(ix < p[_P["threshold"]], table, 255 - table)
    table = torch.where(k["low"], (table + p[_P["add"]]).clamp(max=255), table)
    index = img.long()
    lo, hi = index.amin(2, keepdim=True), index.amax(2, keepdim=True)
    # ImageOps.autocontrast: [lo, hi] stretched to [0, 255]; a tensor quotient, not 255.0 / d,
    # which torch computes as 255 x (1 / d), not Python's correctly rounded quotient
    scale = k["255"] / (hi - lo).clamp(min=1)
    stretched = (ix * scale + -lo * scale).trunc().clamp(0, 255)
    table = torch.where(f[_F["autocontrast"]] & (hi > lo), stretched, table)
    # ImageOps.equalize: cumulative histogram steps, the top value's count left out
    hist = torch.zeros(*index.shape[:2], 256, dtype=torch.long, device=img.device)
    hist.scatter_add_(2, index, k["one"].expand_as(index))
    step = (hw - hist.gather(2, hi)) // 255
    before = hist.cumsum(2) - hist
    equalized = ((step // 2 + before) // step.clamp(min=1)).clamp(max=255)
    used = ((hist > 0).sum(2, keepdim=True) > 1) & (step > 0)
    table = torch.where(f[_F["equalize"]] & used, equalized, table)
    return table.gather(2, index)


def _blend(img, p, f, factor, k, h: int, w: int):
    """ImageEnhance's Image.blend(degenerate, img, factor) per image, in float32, truncated:
    degenerate the grey image (Color: ITU-R 601-2 luma in 16-bit fixed point, rounded), its
    rounded mean (Contrast), black (Brightness) or SMOOTH (Sharpness: 3x3 kernel 1 1 1 / 1 5 1 /
    1 1 1 over 13, rounded, the border kept)."""
    n, c = img.shape[:2]
    v = img.float()
    if c == 3:  # integers below 2 ** 24: float32 sums are exact in any order
        grey = ((v * k["luma"]).sum(1, keepdim=True) + 32768.0).div(65536.0).floor()
    else:
        grey = v
    mean = (grey.sum(2, keepdim=True, dtype=torch.float64) / (h * w) + 0.5).trunc()
    # the kernel's sums are integers below 2 ** 12, exact in float32 (TF32 too); round() undoes
    # a transform-based convolution's small errors
    total = torch.conv2d(v.view(n, c, h, w), k["smooth"], padding=1, groups=c).round()
    smooth = torch.where(k["border"], v, (total * 2 + 13).div(26).floor().view(n, c, h * w))
    degenerate = torch.where(f[_F["smooth"]], smooth, (mean * p[_P["mean"]]).float())
    degenerate = torch.where(f[_F["grey"]], grey, degenerate)
    return (degenerate + factor * (v - degenerate)).clamp(0.0, 255.0).trunc()


def _cubic(v1, v2, v3, v4, d):
    """Pillow's BICUBIC (cubic convolution, a = -1), in its order of operations; with taps
    (v2, v2, v3, v3) it is Pillow's BILINEAR v2 + (v3 - v2) d, exactly."""
    p2 = -v1 + v3
    p3 = 2 * (v1 - v2) + v3 - v4
    p4 = -v1 + v2 - v3 + v4
    return v2 + d * (p2 + d * (p3 + d * p4))


def _warp(img, p, f, k, h: int, w: int):
    """Image.transform(AFFINE) per image: input points of every output pixel centre, 4 x 4
    taps (bilinear's 2 x 2 each twice) gathered at once, filtered along x, then y, in float64."""
    n, c = img.shape[:2]
    pa, pb, pc = (p[_P[key] : _P[key] + 2] for key in "abc")  # (2, n, 1, 1): x's, y's
    uv = pa * k["cols"] + pb * k["rows"] + pc  # (2, n, 1, H*W), as Pillow's affine_transform
    inside = ((uv >= 0) & (uv < k["size"])).all(0)
    uv = uv - 0.5
    base = uv.floor()
    frac = uv - base
    taps = torch.where(f[_F["bicubic"]], k["taps"][1], k["taps"][0])  # (n, 4, 1)
    at = (base + taps).clamp(min=0).minimum(k["last"]).long()  # (2, n, 4, H*W)
    index = (at[1].unsqueeze(2) * w + at[0].unsqueeze(1)).view(n, 1, 16 * h * w)
    values = img.gather(2, index.expand(n, c, -1)).view(n, c, 4, 4, h * w)
    rows = _cubic(*values.unbind(3), frac[0].unsqueeze(1))
    out = _cubic(*rows.unbind(2), frac[1]).clamp(0.0, 255.0).trunc()
    return torch.where(inside, out, k["fill"])


def apply_op(
    name: str, x: torch.Tensor, arg: torch.Tensor, resample: torch.Tensor, fill: tuple[int, ...]
) -> torch.Tensor:
    """timm's op `name` on uint8 images (n, C, H, W), image i with argument arg[i] (CPU
    float64; ignored by ops without one) and, for affine ops, filter RESAMPLE[resample[i]]:
    one slot of `apply_slots` in which every image drew `name`."""
    if name not in OPS:
        raise KeyError(name)
    h, w = x.shape[-2:]
    ones = np.zeros(len(x), dtype=np.int64)
    p, flags = slot_parameters((name,), ones, arg.numpy(), resample.numpy(), h, w)
    p, flags = (to_device(torch.from_numpy(a[None]), x.device) for a in (p, flags))
    return apply_slots(x, p, flags, fill)
