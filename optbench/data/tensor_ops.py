"""The tensor policy's pixel ops (`OPS`, `apply_op`): timm's auto-augment ops on uint8
batches (n, C, H, W) on any device, each image with its own argument, reproducing Pillow's
arithmetic (tests/test_tensor_policy.py checks each against timm's PIL op, image for image):
the LUT ops in integers, the enhance blends in float32 as Pillow's C code, the affine ops with
Pillow's own bilinear / bicubic (a = -1) sampling in float64, pixel centres at +0.5, edge
pixels replicated inside the image and the fill colour outside it. The table that picks them
is tensor_policy.py, the draws tensor_draws.py.
"""

from __future__ import annotations

import math
from collections.abc import Callable

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


def to_device(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A small CPU tensor (indices, per-image arguments) on `device`. To CUDA through pinned
    memory without blocking: a plain copy would wait for the GPU's queued work each time, a
    host sync per op; torch's pinned-memory cache keeps the buffer until the copy is done."""
    if device.type != "cuda":
        return t.to(device)
    return t.pin_memory().to(device, non_blocking=True)


def apply_op(
    name: str,
    x: torch.Tensor,
    arg: torch.Tensor,
    resample: torch.Tensor,
    fill: tuple[int, ...],
) -> torch.Tensor:
    """timm's op `name` on uint8 images (n, C, H, W), image i with argument arg[i] (CPU
    float64; ignored by ops without one) and, for affine ops, filter RESAMPLE[resample[i]]."""
    return OPS[name](x, arg, resample, fill)


def _per_image(v: torch.Tensor, x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return to_device(v.to(dtype), x.device).view(-1, 1, 1, 1)


def _blend(degenerate: torch.Tensor, x: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    """Pillow's Image.blend(degenerate, x, factor), per image: float32 arithmetic, truncated,
    clipped when extrapolating (ImageEnhance's enhance)."""
    alpha = _per_image(factor, x, torch.float32)
    lo = degenerate.float()
    mixed = lo + alpha * (x.float() - lo)
    return mixed.clamp(0.0, 255.0).trunc().to(torch.uint8)


def _grey(x: torch.Tensor) -> torch.Tensor:
    """Pillow's convert("L") (ITU-R 601-2 luma, 16-bit fixed point, rounded), (n, 1, H, W)."""
    if x.shape[1] == 1:
        return x
    r, g, b = x.to(torch.int32).unbind(1)
    return ((r * 19595 + g * 38470 + b * 7471 + 0x8000) >> 16).to(torch.uint8)[:, None]


def _lut_ops(x: torch.Tensor, lut: torch.Tensor) -> torch.Tensor:
    """Map every (image, channel) through its own 256-entry table lut (n*C, 256)."""
    n, c, h, w = x.shape
    flat = x.reshape(n * c, h * w).long()
    return lut.gather(1, flat).to(torch.uint8).reshape(n, c, h, w)


def auto_contrast(x, arg, resample, fill):
    """ImageOps.autocontrast: each channel's [min, max] stretched to [0, 255]."""
    n, c, h, w = x.shape
    flat = x.reshape(n * c, h * w)
    lo, hi = flat.amin(1).double(), flat.amax(1).double()
    # full(255).div(d), not 255.0 / d: torch computes the latter as 255 x (1 / d), which is
    # not Python's correctly rounded quotient
    span = (hi - lo).clamp(min=1.0)
    scale = torch.full_like(span, 255.0).div(span)
    offset = -lo * scale
    ix = torch.arange(256, dtype=torch.float64, device=x.device)
    lut = (ix * scale[:, None] + offset[:, None]).trunc().clamp(0, 255).long()
    lut = torch.where((hi > lo)[:, None], lut, ix.long())
    return _lut_ops(x, lut)


def equalize(x, arg, resample, fill):
    """ImageOps.equalize, per channel, in Pillow's integer arithmetic."""
    n, c, h, w = x.shape
    flat = x.reshape(n * c, h * w).long()
    hist = torch.zeros(n * c, 256, dtype=torch.long, device=x.device)
    hist.scatter_add_(1, flat, torch.ones_like(flat))
    last = hist.gather(1, flat.amax(1, keepdim=True)).squeeze(1)  # count of the top value
    step = (h * w - last) // 255
    before = hist.cumsum(1) - hist
    lut = (step[:, None] // 2 + before) // step.clamp(min=1)[:, None]
    keep = ((hist > 0).sum(1) <= 1) | (step == 0)
    lut = torch.where(keep[:, None], torch.arange(256, device=x.device), lut.clamp(max=255))
    return _lut_ops(x, lut)


def invert(x, arg, resample, fill):
    return 255 - x


def posterize(x, arg, resample, fill):
    """Keep the top `arg` bits (0 bits: black, as `augment._posterize`)."""
    bits = _per_image(arg, x, torch.long)
    mask = 256 - torch.pow(2, 8 - bits.clamp(0, 8))
    return x & mask.to(torch.uint8)


def solarize(x, arg, resample, fill):
    """ImageOps.solarize: values >= threshold inverted."""
    return torch.where(x < _per_image(arg, x, torch.long), x, 255 - x)


def solarize_add(x, arg, resample, fill):
    """timm's solarize_add: values below 128 get `arg` added (capped at 255)."""
    added = (x.to(torch.int16) + _per_image(arg, x, torch.int16)).clamp(max=255).to(torch.uint8)
    return torch.where(x < 128, added, x)


def color(x, arg, resample, fill):
    return _blend(_grey(x).expand_as(x), x, arg)


def contrast(x, arg, resample, fill):
    """ImageEnhance.Contrast: blend with the grey image of the rounded mean luma."""
    n, _, h, w = x.shape
    mean = _grey(x).reshape(n, -1).sum(1).double() / (h * w)
    degenerate = (mean + 0.5).trunc().to(torch.uint8).view(n, 1, 1, 1).expand_as(x)
    return _blend(degenerate, x, arg)


def brightness(x, arg, resample, fill):
    return _blend(torch.zeros_like(x), x, arg)


def sharpness(x, arg, resample, fill):
    """ImageEnhance.Sharpness: blend with ImageFilter.SMOOTH (3x3 kernel 1 1 1 / 1 5 1 /
    1 1 1 over 13, rounded; the border pixels kept)."""
    h, w = x.shape[-2:]
    v = x.to(torch.int32)
    total = 4 * v[..., 1:-1, 1:-1]
    for dy in range(3):
        for dx in range(3):
            total = total + v[..., dy : h - 2 + dy, dx : w - 2 + dx]
    smooth = x.clone()
    smooth[..., 1:-1, 1:-1] = ((2 * total + 13) // 26).to(torch.uint8)
    return _blend(smooth, x, arg)


# The affine ops: Pillow's Image.transform(size, AFFINE, (a, b, c, d, e, f)) maps output pixel
# centre (x + .5, y + .5) to input point (a x' + b y' + c, d x' + e y' + f).


def _lerp(a, b, d):
    return a + (b - a) * d  # Pillow's BILINEAR


def _cubic(v1, v2, v3, v4, d):  # Pillow's BICUBIC: cubic convolution with a = -1
    p1 = v2
    p2 = -v1 + v3
    p3 = 2 * (v1 - v2) + v3 - v4
    p4 = -v1 + v2 - v3 + v4
    return p1 + d * (p2 + d * (p3 + d * p4))


_FILTERS = {"bilinear": ((0, 1), _lerp), "bicubic": ((-1, 0, 1, 2), _cubic)}


def _taps(img: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """The pixels at flat indices, as int16: the first pass's differences stay exact integers
    (as in Pillow, where they are ints) and cost a quarter of float64's memory traffic."""
    n, c = img.shape[:2]
    return img.reshape(n, c, -1).gather(2, index[:, None].expand(n, c, -1)).to(torch.int16)


def _sample(img: torch.Tensor, u: torch.Tensor, v: torch.Tensor, resample: str, axes: str):
    """Pillow's bilinear / bicubic filter at input points (u, v) (already minus 0.5), edge
    pixels replicated: (n, C, H*W) float64. An axis not in `axes` is known to fall on pixel
    centres (a shear or translation along the other axis): its weights would be (1, 0, ...)
    exactly, so its pass is skipped, with the same result."""
    h, w = img.shape[-2:]
    offsets, combine = _FILTERS[resample]

    def grid(coord: torch.Tensor, size: int, moves: bool):
        if not moves:
            return [coord.long()], None
        base = coord.floor()
        return [(base + o).clamp(0, size - 1).long() for o in offsets], (coord - base)[:, None]

    xs, dx = grid(u, w, "x" in axes)
    ys, dy = grid(v, h, "y" in axes)
    rows = []
    for yy in ys:
        taps = [_taps(img, yy * w + xx) for xx in xs]
        rows.append(taps[0] if dx is None else combine(*taps, dx))
    return rows[0] if dy is None else combine(*rows, dy)


def _warp(x: torch.Tensor, matrix: torch.Tensor, resample: str, axes: str, fill: tuple[int, ...]):
    n, c, h, w = x.shape
    a = to_device(matrix, x.device)[:, :, None]  # (n, 6, 1): float64
    cols = torch.arange(w, dtype=torch.float64, device=x.device).repeat(h)[None] + 0.5
    rows = torch.arange(h, dtype=torch.float64, device=x.device).repeat_interleave(w)[None] + 0.5
    u = a[:, 0] * cols + a[:, 1] * rows + a[:, 2]  # (n, H*W), as Pillow's affine_transform
    v = a[:, 3] * cols + a[:, 4] * rows + a[:, 5]
    inside = ((u >= 0) & (u < w) & (v >= 0) & (v < h))[:, None]
    values = _sample(x, u - 0.5, v - 0.5, resample, axes)
    values = values.clamp(0.0, 255.0).trunc().to(torch.uint8)
    colour = to_device(torch.tensor(fill, dtype=torch.uint8), x.device).view(1, c, 1)
    return torch.where(inside, values, colour).reshape(n, c, h, w)


# On the CPU the float64 sampling runs on chunks of about this many values, which stay in
# cache (measured: bicubic at 224 px took 3x longer per image in chunks of 16 images than of 1).
CPU_CHUNK_VALUES = 2**18


def _affine(matrix_of: Callable, axes: str = "xy") -> Callable:
    """An affine op from a function (arg (n,) float64, H, W) -> Pillow's matrices (n, 6);
    `axes`: the axes whose sample points move off the pixel centres."""

    def op(x, arg, resample, fill):
        out = x.clone()
        matrix = matrix_of(arg, *x.shape[-2:])
        # the identity (magnitude 0: v0's Rotate @ 0, ShearY @ 0) gives each pixel back exactly
        moves = (matrix != _matrix(1)).any(1)
        chunk = len(x) if x.is_cuda else max(1, CPU_CHUNK_VALUES // x[0].numel())
        for k, name in enumerate(RESAMPLE):
            rows = ((resample == k) & moves).nonzero().squeeze(1)
            for part in rows.split(chunk) if len(rows) else ():
                idx = to_device(part, x.device)
                out[idx] = _warp(x.index_select(0, idx), matrix[part], name, axes, fill)
        return out

    return op


def _matrix(n: int, **entries: torch.Tensor) -> torch.Tensor:
    m = torch.tensor([1.0, 0, 0, 0, 1.0, 0], dtype=torch.float64).repeat(n, 1)
    for i, key in enumerate("abcdef"):
        if key in entries:
            m[:, i] = entries[key]
    return m


def _rotation(degrees: torch.Tensor, h: int, w: int) -> torch.Tensor:
    """Image.rotate's matrix (about the centre, counter-clockwise, coefficients rounded to 15
    decimals), from Python's math per image: a few scalars each, exactly as Pillow has them."""
    out = []
    cx, cy = w / 2.0, h / 2.0
    for deg in degrees.tolist():
        angle = -math.radians(deg % 360.0)
        cos, sin = round(math.cos(angle), 15), round(math.sin(angle), 15)
        a, b, d, e = cos, sin, round(-math.sin(angle), 15), cos
        out.append([a, b, a * -cx + b * -cy + 0.0 + cx, d, e, d * -cx + e * -cy + 0.0 + cy])
    return torch.tensor(out, dtype=torch.float64).reshape(-1, 6)


OPS: dict[str, Callable] = {
    "AutoContrast": auto_contrast,
    "Equalize": equalize,
    "Invert": invert,
    "Posterize": posterize,
    "PosterizeIncreasing": posterize,
    "PosterizeOriginal": posterize,
    "Solarize": solarize,
    "SolarizeIncreasing": solarize,
    "SolarizeAdd": solarize_add,
    "Color": color,
    "ColorIncreasing": color,
    "Contrast": contrast,
    "ContrastIncreasing": contrast,
    "Brightness": brightness,
    "BrightnessIncreasing": brightness,
    "Sharpness": sharpness,
    "SharpnessIncreasing": sharpness,
    "Rotate": _affine(_rotation),
    "ShearX": _affine(lambda f, h, w: _matrix(len(f), b=f), "x"),
    "ShearY": _affine(lambda f, h, w: _matrix(len(f), d=f), "y"),
    "TranslateX": _affine(lambda px, h, w: _matrix(len(px), c=px), "x"),
    "TranslateY": _affine(lambda px, h, w: _matrix(len(px), f=px), "y"),
    "TranslateXRel": _affine(lambda pct, h, w: _matrix(len(pct), c=pct * w), "x"),
    "TranslateYRel": _affine(lambda pct, h, w: _matrix(len(pct), f=pct * h), "y"),
}
