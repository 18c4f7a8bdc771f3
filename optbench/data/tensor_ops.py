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
  replicated inside the image and the fill colour outside it (on chunks of at most
  `WARP_VALUES` taps: a whole batch of CIFAR-sized images, a few large ones at a time).
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
# the blend factor [1], the affine matrix a..f in pairs (a, d), (b, e), (c, f) [1 0, 0 1, 0 0];
# besides them a 256-entry table of the posterize, solarize, solarize_add and invert ops [0..255].
PARAMETERS = ("factor", "a", "d", "b", "e", "c", "f")
# ... and the flags (bool [False]): the table is AutoContrast's, Equalize's; the degenerate image
# is the grey one (Color), the mean grey (Contrast; else black), SMOOTH (Sharpness); the filter
# is bicubic.
FLAGS = ("autocontrast", "equalize", "grey", "mean", "smooth", "bicubic")
_P = {name: i for i, name in enumerate(PARAMETERS)}
_F = {name: i for i, name in enumerate(FLAGS)}


def to_device(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A small CPU tensor (the per-image parameters) on `device`. To CUDA through pinned memory
    without blocking: a plain copy would wait for the GPU's queued work, a host sync per batch;
    torch's pinned-memory cache keeps the buffer until the copy is done."""
    if device.type != "cuda":
        return t.to(device)
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
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The per-image parameters (len(PARAMETERS), n) float64, tables (n, 256) uint8 and flags
    (len(FLAGS), n) bool of one slot in which image i runs op names[op[i]] (none where
    op[i] < 0) with argument arg[i] and, for an affine op, filter RESAMPLE[resample[i]]."""
    n = len(op)
    p = np.zeros((len(PARAMETERS), n))
    p[[_P["factor"], _P["a"], _P["e"]]] = 1.0
    quantum, threshold, add = np.ones((n, 1)), np.full((n, 1), 256.0), np.zeros((n, 1))
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
            threshold[rows] = 0.0
        elif kind == "Posterize":  # 0 bits: black, as `augment._posterize`
            quantum[rows, 0] = 2.0 ** (8 - np.clip(v, 0, 8))
        elif kind == "Solarize":
            threshold[rows, 0] = v
        elif kind == "SolarizeAdd":
            add[rows, 0] = v
        elif kind in _BLEND_OPS:
            p[_P["factor"], rows] = arg[rows].astype(np.float32)  # Pillow's float32 factor
            flags[_F["mean"], rows] = kind == "Contrast"
            flags[_F["grey"], rows] = kind == "Color"
            flags[_F["smooth"], rows] = kind == "Sharpness"
        else:
            m = _affine_matrix(name, arg[rows], h, w)
            for key, column in zip("abcdef", m.T, strict=True):
                p[_P[key], rows] = column
    ix = np.arange(256.0)
    table = ix - np.fmod(ix, quantum)  # Pillow's tables: posterize, solarize, solarize_add
    table = np.where(ix < threshold, table, 255.0 - table)
    table = np.where(ix < 128, np.minimum(table + add, 255.0), table)
    return p, table.astype(np.uint8), flags


def op_kind(name: str) -> str:
    """Which part of a slot runs op `name`: "table" (posterize, solarize, solarize_add, invert),
    "autocontrast", "equalize" (the lookup tables); "grey", "mean", "black", "smooth" (the blends,
    by degenerate image); "affine"."""
    base = name.replace("Increasing", "").replace("Original", "")
    if base in ("AutoContrast", "Equalize"):
        return base.lower()
    if base in _LUT_OPS:
        return "table"
    if base in _BLEND_OPS:
        return {"Color": "grey", "Contrast": "mean", "Brightness": "black"}.get(base, "smooth")
    return "affine"


@functools.lru_cache(maxsize=16)
def _constants(c: int, h: int, w: int, fill: tuple[int, ...], device: torch.device) -> dict:
    """The tensors every batch of this shape reads, made once per shape and device (on the
    CPU, then copied as the parameters are: no host sync on a GPU)."""
    f64 = dict(dtype=torch.float64)
    ix = torch.arange(256, **f64)
    border = torch.ones(h, w, dtype=torch.bool)
    border[1:-1, 1:-1] = False
    taps = [torch.tensor(t, **f64) for t in ([0.0, 0, 1, 1], [-1.0, 0, 1, 2])]
    constants = {
        "ix": ix,
        "255": torch.tensor(255.0, **f64),
        "luma": torch.tensor([19595.0, 38470.0, 7471.0], **f64).view(1, 3, 1),
        "border": border.view(1, 1, h * w),
        # (x + .5, y + .5) of every output pixel, (1, 1, H*W) each
        "cols": (torch.arange(w, **f64).repeat(h) + 0.5).view(1, 1, h * w),
        "rows": (torch.arange(h, **f64).repeat_interleave(w) + 0.5).view(1, 1, h * w),
        "size": torch.tensor([w, h], **f64).view(2, 1, 1, 1),
        "first": torch.zeros(2, 1, 1, 1, 1, **f64),
        "last": torch.tensor([w - 1, h - 1], **f64).view(2, 1, 1, 1, 1),
        # the 4 x 4 taps of a filter, (x, y) offsets (2, 1, 4 y, 4 x, 1), per filter: bilinear's
        # 2 as 4 (each twice), bicubic's 4; a tap's flat index is x + y W
        "taps": torch.stack(
            [torch.stack(torch.meshgrid(t, t, indexing="xy")).view(2, 1, 4, 4, 1) for t in taps]
        ),
        "stride": torch.tensor([1.0, w], **f64).view(2, 1, 1, 1, 1),
        "fill": torch.tensor(fill, **f64).view(1, c, 1),
        "one": torch.ones((), **f64),
        "zero": torch.zeros((), **f64),
    }
    return {key: to_device(t, device) for key, t in constants.items()}


def apply_slots(
    x: torch.Tensor,
    parameters: torch.Tensor,
    tables: torch.Tensor,
    flags: torch.Tensor,
    warped: tuple[torch.Tensor, ...],
    fill: tuple[int, ...],
    kinds: tuple[frozenset[str], ...],
    filters: tuple[str, ...],
) -> torch.Tensor:
    """uint8 images (n, C, H, W) through L op slots in turn, slot s with the per-image
    `parameters` (L, len(PARAMETERS), n) float64, `tables` (L, n, 256) uint8 and `flags`
    (L, len(FLAGS), n) bool on x's device: each slot a lookup table, then a blend, then an affine warp, each the identity where
    the image drew none (`slot_parameters`). kinds[s]: the `op_kind`s slot s can draw (the parts
    no image can need are left out: a fixed choice per policy, not per batch); `filters`: the
    affine ops' (drawn per image when two)."""
    n, c, h, w = x.shape
    k = _constants(c, h, w, tuple(fill), x.device)
    p = parameters.view(*parameters.shape, 1, 1).unbind(0)
    f = flags.view(*flags.shape, 1, 1).unbind(0)
    factor = parameters[:, _P["factor"]].float().view(-1, n, 1, 1).unbind(0)
    if any("table" in kind for kind in kinds):
        t = tables.double().view(-1, n, 1, 256).unbind(0)
    img = x.reshape(n, c, h * w).double()  # integers, exact: float64 spares casts per op
    for s, kind in enumerate(kinds):
        if kind & {"table", "autocontrast", "equalize"}:
            img = _lookup(img, t[s] if "table" in kind else None, f[s], k, kind, h * w)
        if kind & {"grey", "mean", "black", "smooth"}:
            img = _blend(img, factor[s], f[s], k, kind, h, w)
        if "affine" in kind:
            rows = warped[s]
            p_rows, f_rows = p[s].index_select(1, rows), f[s].index_select(1, rows)
            moved = _warp(img.index_select(0, rows), p_rows, f_rows, k, filters, h, w)
            img = img.index_copy(0, rows, moved)
    return img.to(torch.uint8).view(n, c, h, w)


def _lookup(img: torch.Tensor, table, f, k: dict, kind: frozenset, hw: int):
    """Each image and channel through its own table (n, C, 256): the slot's `table` (n, 1, 256)
    (posterize, solarize, solarize_add, invert; the identity where not drawn; None: 0..255),
    replaced by AutoContrast's or Equalize's where drawn, in Pillow's integer arithmetic (exact
    in float64)."""
    ix = k["ix"]
    table = ix.expand(*img.shape[:2], 256) if table is None else table.expand(*img.shape[:2], 256)
    lo, hi = img.aminmax(dim=2, keepdim=True)
    varied = hi > lo
    if "autocontrast" in kind:
        # ImageOps.autocontrast: [lo, hi] stretched to [0, 255]; a tensor quotient, not
        # 255.0 / d, which torch computes as 255 x (1 / d), not the correctly rounded quotient
        scale = k["255"] / (hi - lo).clamp(min=1.0)
        stretched = (ix * scale - lo * scale).trunc().clamp(0.0, 255.0)
        table = torch.where(f[_F["autocontrast"]] & varied, stretched, table)
    index = img.long()
    if "equalize" in kind:
        # ImageOps.equalize: cumulative histogram steps, the top value's count left out
        hist = torch.zeros(*img.shape[:2], 256, dtype=img.dtype, device=img.device)
        hist.scatter_add_(2, index, k["one"].expand_as(index))
        step = (float(hw) - hist.gather(2, hi.long())).div(255.0, rounding_mode="floor")
        before = hist.cumsum(2) - hist
        equalized = (step.div(2.0, rounding_mode="floor") + before).div(
            step.clamp(min=1.0), rounding_mode="floor"
        )
        used = f[_F["equalize"]] & varied & (step > 0.0)
        table = torch.where(used, equalized.clamp(max=255.0), table)
    return table.gather(2, index)


def _blend(img, factor, f, k, kind: frozenset, h: int, w: int):
    """ImageEnhance's Image.blend(degenerate, img, factor) per image, in float32, truncated:
    degenerate the grey image (Color: ITU-R 601-2 luma in 16-bit fixed point, rounded), its
    rounded mean (Contrast), black (Brightness) or SMOOTH (Sharpness: 3x3 kernel 1 1 1 / 1 5 1 /
    1 1 1 over 13, rounded, the border kept); the degenerate images in float64 (integers)."""
    n, c = img.shape[:2]
    grey = img
    if c == 3 and kind & {"grey", "mean"}:
        grey = ((img * k["luma"]).sum(1, keepdim=True) + 32768.0).div(
            65536.0, rounding_mode="floor"
        )
    degenerate = k["zero"]
    if "mean" in kind:
        mean = (grey.sum(2, keepdim=True) / float(h * w) + 0.5).trunc()
        degenerate = torch.where(f[_F["mean"]], mean, 0.0) if "black" in kind else mean
    if "smooth" in kind:  # the 3x3 sums (integers, exact) plus 4 x the centre, over 13
        box = torch.nn.functional.avg_pool2d(img.view(n, c, h, w), 3, 1, 1, divisor_override=1)
        total = torch.add(box.view(n, c, h * w), img, alpha=4.0)
        # Pillow's (2 total + 13) // 26: (total + 6.5) / 13 is never an integer, so its
        # rounded quotient floors the same
        smooth = torch.where(k["border"], img, (total + 6.5).div(13.0, rounding_mode="floor"))
        degenerate = torch.where(f[_F["smooth"]], smooth, degenerate)
    if "grey" in kind:
        degenerate = torch.where(f[_F["grey"]], grey, degenerate)
    v, lo = img.float(), degenerate.float()
    return (lo + factor * (v - lo)).clamp(0.0, 255.0).trunc().double()


def _cubic(v1, v2, v3, v4, d):
    """Pillow's BICUBIC (cubic convolution, a = -1), in its order of operations; with taps
    (v2, v2, v3, v3) it is Pillow's BILINEAR v2 + (v3 - v2) d, exactly. In place on three new
    tensors: a CPU allocates each fresh one page by page."""
    p2 = v3 - v1  # Pillow's -v1 + v3, the same double
    p3 = (v1 - v2).mul_(2.0).add_(v3).sub_(v4)
    p4 = (v2 - v1).sub_(v3).add_(v4)  # Pillow's -v1 + v2 - v3 + v4
    return p4.mul_(d).add_(p3).mul_(d).add_(p2).mul_(d).add_(v2)


# The affine warp's 16 taps per pixel (float64) on chunks of at most this many values: one chunk
# for a whole batch of CIFAR-sized images (341 at 32 px on the CPU), a few images at a time at
# 224 px, where each operation is long and its memory (16 x 8 bytes a value) would be large.
WARP_VALUES = {"cpu": 2**24, "cuda": 2**27}


def _warp(img, p, f, k, filters: tuple[str, ...], h: int, w: int):
    """The affine ops of a slot, on chunks of images of at most WARP_VALUES taps (`_warp_chunk`);
    p, f: (parameters, n, 1, 1)."""
    n, c = img.shape[:2]
    chunk = max(1, WARP_VALUES.get(img.device.type, WARP_VALUES["cpu"]) // (16 * c * h * w))
    if n <= chunk:
        return _warp_chunk(img, p, f, k, filters, h, w)
    parts = zip(img.split(chunk), p.split(chunk, 1), f.split(chunk, 1), strict=True)
    return torch.cat([_warp_chunk(*part, k, filters, h, w) for part in parts])


def _warp_chunk(img, p, f, k, filters: tuple[str, ...], h: int, w: int):
    """Image.transform(AFFINE) per image: input points of every output pixel centre, 4 x 4
    taps (bilinear's 2 x 2 each twice) gathered at once, filtered along x, then y, in float64."""
    n, c = img.shape[:2]
    pa, pb, pc = (p[_P[key] : _P[key] + 2] for key in "abc")  # (2, n, 1, 1): x's, y's
    uv = pa * k["cols"] + pb * k["rows"] + pc  # (2, n, 1, H*W), as Pillow's affine_transform
    inside = ((uv >= 0.0) & (uv < k["size"])).all(0)
    uv = uv - 0.5
    base = uv.floor()
    frac = uv - base
    if len(filters) == 2:
        bicubic = f[_F["bicubic"]].view(1, n, 1, 1, 1)
        taps = torch.where(bicubic, k["taps"][1], k["taps"][0])  # (2, n, 4, 4, 1)
    else:
        taps = k["taps"][RESAMPLE.index(filters[0])]  # (2, 1, 4, 4, 1)
    at = (base.unsqueeze(2) + taps).clamp(k["first"], k["last"])  # (2, n, 4, 4, H*W)
    index = (at * k["stride"]).sum(0).long().view(n, 1, 16 * h * w)
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
    parts = slot_parameters((name,), ones, arg.numpy(), resample.numpy(), h, w)
    p, tables, flags = (to_device(torch.from_numpy(a[None]), x.device) for a in parts)
    every = (torch.arange(len(x), device=x.device),)
    return apply_slots(x, p, tables, flags, every, fill, (frozenset({op_kind(name)}),), RESAMPLE)
