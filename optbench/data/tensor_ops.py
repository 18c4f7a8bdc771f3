"""The tensor policy's pixel ops: timm's auto-augment ops on uint8 batches (n, C, H, W) on any
device, reproducing Pillow's arithmetic (tests/test_tensor_policy.py checks each against timm's
PIL op, image for image), one op slot of a batch at a time (`apply_slot`) with a fixed number of
tensor operations whatever the batch size and whichever ops the images drew, each part of a slot
computing on the images that drew it only (taken out with one index_select, put back with one
index_copy_; which images, and their parameters, found on the host by `slot_plan`, in numpy):
- the lookup-table ops (AutoContrast, Equalize, Invert, Posterize, Solarize, SolarizeAdd): one
  256-entry table per image and channel (the host's; AutoContrast's and Equalize's from the
  image, in integers), then one gather on uint8;
- the enhance blends (Color, Contrast, Brightness, Sharpness): one float32 interpolation with
  per-image factors towards a per-image degenerate image (grey, mean grey, black or SMOOTH);
- the affine ops (Rotate, Shear, Translate): Pillow's own bilinear / bicubic (a = -1) sampling
  in float64, pixel centres at +0.5, edge pixels replicated inside the image and the fill
  colour outside it, the taps gathered as uint8 along the axis that moves (a shear or
  translation moves one), then across for Rotate (on chunks of at most `WARP_VALUES` taps: a
  whole batch of CIFAR-sized images, a few large ones at a time on the CPU).
The table that picks the ops is tensor_policy.py, the draws tensor_draws.py.
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


def to_device(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A small CPU tensor (the per-image parameters) on `device`. To CUDA through pinned memory
    without blocking: a plain copy would wait for the GPU's queued work, a host sync per batch;
    torch's pinned-memory cache keeps the buffer until the copy is done."""
    if device.type == "cpu":
        return t
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


_AXIS_X = ("ShearX", "TranslateX", "TranslateXRel")  # move x only; the other axis ops y only
# which part of a slot runs each kind (`op_kind`): a part takes its images out of the batch,
# changes them and puts them back (one index_select and index_copy_ per part and slot)
GROUPS = {
    "lut": ("table", "autocontrast", "equalize"),
    "blend": ("grey", "mean", "black", "smooth"),
    "warp": ("warp", "warp_axis"),
}
_TAPS = {"bicubic": (-1.0, 0.0, 1.0, 2.0), "bilinear": (0.0, 0.0, 1.0, 1.0)}
# The affine warps' taps (T x T or T a pixel, x C) on chunks of at most this many values: on the
# CPU few enough for the float64 passes to stay in cache and in the allocator's reused memory (a
# fresh large buffer costs its pages' faults), enough for a batch of 256 CIFAR-sized images;
# on CUDA a whole batch.
WARP_VALUES = {"cpu": 2**21, "cuda": 2**27}


def op_kind(name: str) -> str:
    """Which part of a slot runs op `name`: "table" (posterize, solarize, solarize_add, invert),
    "autocontrast", "equalize" (the lookup tables); "grey", "mean", "black", "smooth" (the blends,
    by degenerate image); "warp" (Rotate: both axes move), "warp_axis" (the shears and
    translations: one axis moves, the other stays on the pixel centres)."""
    base = name.replace("Increasing", "").replace("Original", "")
    if base in ("AutoContrast", "Equalize"):
        return base.lower()
    if base in _LUT_OPS:
        return "table"
    if base in _BLEND_OPS:
        return {"Color": "grey", "Contrast": "mean", "Brightness": "black"}.get(base, "smooth")
    return "warp" if base == "Rotate" else "warp_axis"


def slot_plan(
    names: tuple[str, ...],
    op: np.ndarray,
    arg: np.ndarray,
    resample: np.ndarray,
    shape: tuple[int, int, int],
    filters: tuple[str, ...],
    device_type: str = "cpu",
) -> dict:
    """What `apply_slot` reads for one slot of images `shape` (C, H, W) in which image i runs op
    names[op[i]] (none where op[i] < 0) with argument arg[i] and, for an affine op, filter
    RESAMPLE[resample[i]] (one of the policy's `filters`): numpy arrays per part (GROUPS), each
    with its images' rows first (int64), then
    - lut: tables (r, 1, 256) uint8 (posterize, solarize, solarize_add, invert; 0..255 for the
      others), flags (2, r, 1, 1) bool (AutoContrast's, Equalize's), Equalize's positions;
    - blend: the factor (r, 1, 1) (Pillow's float32, as float64), flags (2, r, 1, 1) bool (the
      degenerate image is the grey one: Color; the mean grey: Contrast; else black), SMOOTH's
      (Sharpness) positions;
    - warp: a list of chunks (`_warp_plan`)."""
    kinds = np.array([op_kind(name) for name in names] + ["none"])[op]  # op -1: the last
    rows = np.flatnonzero(np.isin(kinds, GROUPS["lut"]))
    quantum, threshold = np.ones((len(rows), 1)), np.full((len(rows), 1), 256.0)
    add = np.zeros((len(rows), 1))
    for k, name in enumerate(names):
        mine = op[rows] == k
        v = np.trunc(arg[rows][mine])  # the integer ops' arguments, as Python's int()
        base = name.replace("Increasing", "").replace("Original", "")
        if base == "Invert":
            threshold[mine] = 0.0
        elif base == "Posterize":  # 0 bits: black, as `augment._posterize`
            quantum[mine, 0] = 2.0 ** (8 - np.clip(v, 0, 8))
        elif base == "Solarize":
            threshold[mine, 0] = v
        elif base == "SolarizeAdd":
            add[mine, 0] = v
    ix = np.arange(256.0)
    table = ix - np.fmod(ix, quantum)  # Pillow's tables: posterize, solarize, solarize_add
    table = np.where(ix < threshold, table, 255.0 - table)
    table = np.where(ix < 128, np.minimum(table + add, 255.0), table)
    kind = kinds[rows]
    flags = np.stack([kind == "autocontrast", kind == "equalize"]).reshape(2, -1, 1, 1)
    tables = table.astype(np.uint8).reshape(-1, 1, 256)
    plan = {"lut": (rows, tables, flags, np.flatnonzero(kind == "equalize"))}
    rows = np.flatnonzero(np.isin(kinds, GROUPS["blend"]))
    kind = kinds[rows]
    factor = arg[rows].astype(np.float32).astype(np.float64).reshape(-1, 1, 1)
    flags = np.stack([kind == "grey", kind == "mean"]).reshape(2, -1, 1, 1)
    plan["blend"] = (rows, factor, flags, np.flatnonzero(kind == "smooth"))
    plan["warp"] = _warp_plan(names, op, arg, resample, kinds, shape, filters, device_type)
    return plan


def _warp_plan(names, op, arg, resample, kinds, shape, filters, device_type) -> list[tuple]:
    """The affine ops of a slot as chunks (WARP_VALUES) of tap rows: a filter's T taps along
    the moving axis at each pixel, gathered and filtered in one pass; a Rotate image has T tap
    rows (the other axis' taps, filtered in a second pass), a shear or translation one (its
    other axis stays on the pixel centres, where the taps would weigh (0, 1, 0, 0)). The axis
    moving in the first pass is x, y for the ops that move y only (their matrix rows swapped).
    Per chunk: its images' rows (Rotate's first), each tap row's image row, each Rotate
    image's first tap row; per tap row, float64, `geometry` (4, 2, R, 1, 1):
    the matrix' coefficients a, b, c of the moving then the other coordinate, their sizes, and
    `axes` (5, R, 1, 1): the moving axis' last index and flat stride, the tap row's offset on
    the other axis, that axis' last index and stride; the taps (R, T, 1) where the filter is
    drawn per image (else None); the number of Rotate images."""
    c, h, w = shape
    t = 2 if filters == ("bilinear",) else 4
    matrix = np.zeros((len(op), 6))
    for k, name in enumerate(names):
        mine = op == k
        if name in AFFINE_OPS and mine.any():
            matrix[mine] = _affine_matrix(name, arg[mine], h, w)
    taps = np.array([_TAPS[f] for f in RESAMPLE])[np.maximum(resample, 0)]  # (n, 4)
    if t == 2:
        taps = np.tile([0.0, 1.0], (len(op), 1))
    turned = np.flatnonzero(kinds == "warp")
    moved = np.flatnonzero(kinds == "warp_axis")
    along_y = ~np.isin(np.array([*names, ""])[op[moved]], _AXIS_X)
    limit = WARP_VALUES.get(device_type, WARP_VALUES["cpu"]) // (t * c * h * w)
    chunks, start_t, start_m = [], 0, 0
    while not chunks or start_t < len(turned) or start_m < len(moved):
        n_t = min(len(turned) - start_t, max(limit // t, 1))
        n_m = min(len(moved) - start_m, max(limit - n_t * t, 0 if n_t else 1))
        rows_t, rows_m = turned[start_t : start_t + n_t], moved[start_m : start_m + n_m]
        swap = np.concatenate([np.zeros(n_t, bool), along_y[start_m : start_m + n_m]])
        rows = np.concatenate([rows_t, rows_m])
        per_row = np.concatenate([np.full(n_t, t), np.ones(n_m, int)])  # tap rows per image
        image = np.repeat(np.arange(len(rows)), per_row)
        m = matrix[rows][:, [3, 4, 5, 0, 1, 2]]
        m = np.where(swap[:, None], m, matrix[rows])  # moving coordinate's coefficients first
        size = np.where(swap[:, None], [[h, w]], [[w, h]])
        stride = np.where(swap[:, None], [[w, 1.0]], [[1.0, w]])
        offset = np.concatenate([taps[rows_t].reshape(-1), np.zeros(n_m)])
        geometry = np.stack([m[:, [0, 3]], m[:, [1, 4]], m[:, [2, 5]], size])[:, image]
        axes = np.stack(
            [size[:, 0] - 1.0, stride[:, 0], np.zeros(len(rows)), size[:, 1] - 1.0, stride[:, 1]]
        )[:, image]
        axes[2] = offset
        drawn = taps[rows][image].reshape(-1, t, 1) if len(filters) == 2 else None
        chunks.append(
            (
                rows,
                rows[image],
                np.arange(n_t, dtype=np.int64) * t,
                geometry.transpose(0, 2, 1).reshape(4, 2, -1, 1, 1),
                axes.reshape(5, -1, 1, 1),
                drawn,
                n_t,
            )
        )
        start_t, start_m = start_t + n_t, start_m + n_m
    return chunks


def plan_to_device(plan, device: torch.device):
    """A plan (nested tuples, lists, dicts of numpy arrays and other values) with its arrays
    on `device`, in one copy per dtype (int64, float64, uint8; bool as uint8) whatever their
    number, split into views of their shapes."""
    arrays: list[np.ndarray] = []

    def collect(node):
        if isinstance(node, np.ndarray):
            arrays.append(node)
        elif isinstance(node, (tuple, list)):
            for item in node:
                collect(item)
        elif isinstance(node, dict):
            for item in node.values():
                collect(item)

    collect(plan)
    buckets: dict[np.dtype, list[np.ndarray]] = {}
    for a in arrays:
        buckets.setdefault(np.dtype(np.uint8) if a.dtype == bool else a.dtype, []).append(a)
    pieces = {}
    for dtype, parts in buckets.items():
        flat = np.concatenate([p.astype(dtype, copy=False).ravel() for p in parts])
        pieces[dtype] = iter(
            to_device(torch.from_numpy(flat), device).split([p.size for p in parts])
        )

    def rebuild(node):
        if isinstance(node, np.ndarray):
            t = next(pieces[np.dtype(np.uint8) if node.dtype == bool else node.dtype])
            t = t.view(node.shape) if node.ndim > 1 else t
            return t.view(torch.bool) if node.dtype == bool else t
        if isinstance(node, (tuple, list)):
            return type(node)(rebuild(item) for item in node)
        if isinstance(node, dict):
            return {key: rebuild(item) for key, item in node.items()}
        return node

    return rebuild(plan)


@functools.lru_cache(maxsize=16)
def _constants(c: int, h: int, w: int, fill: tuple[int, ...], device: torch.device) -> dict:
    """The tensors every batch of this shape reads, made once per shape and device (on the
    CPU, then copied as the plans are: no host sync on a GPU)."""
    f64 = dict(dtype=torch.float64)
    border = torch.ones(h, w, dtype=torch.bool)
    border[1:-1, 1:-1] = False
    constants = {
        "ix": torch.arange(256, **f64),
        "255": torch.full((1, 1, 1), 255.0, **f64),
        "luma": torch.tensor([19595, 38470, 7471], dtype=torch.int32).view(1, 3, 1),
        "border": border.view(1, 1, h * w),
        # (x + .5, y + .5) of every output pixel, (1, 1, H*W) each
        "cols": (torch.arange(w, **f64).repeat(h) + 0.5).view(1, 1, h * w),
        "rows": (torch.arange(h, **f64).repeat_interleave(w) + 0.5).view(1, 1, h * w),
        # a filter's taps along an axis: bicubic's; bilinear's 2
        "bicubic": torch.tensor(_TAPS["bicubic"], **f64).view(1, 4, 1),
        "bilinear": torch.tensor([0.0, 1.0], **f64).view(1, 2, 1),
        # bicubic's p2, p3, p4 from integer taps v1..v4 (`_cubic`: exact in any order)
        "cubic": torch.tensor([[-1.0, 0, 1, 0], [2, -2, 1, -1], [-1, 1, -1, 1]], **f64),
        "fill": torch.tensor(fill, **f64).view(1, c, 1),
        "one": torch.ones((), **f64),
        "zero": torch.zeros((), **f64),
        "zero32": torch.zeros(()),
    }
    return {key: to_device(t, device) for key, t in constants.items()}


def apply_slot(out: torch.Tensor, plan: dict, kind: frozenset[str], fill, filters) -> None:
    """One slot of uint8 images `out` (n, C, H, W), in place: each part (GROUPS) the slot can
    draw (`kind`: its `op_kind`s, a fixed choice per policy, not per batch) on its own images,
    `plan` the slot's `slot_plan` on out's device; `filters` the policy's affine filters. A
    fixed number of tensor operations whatever the batch and the draws (per chunk of the
    warps: one at CIFAR's size), arithmetic only on the images that drew each kind."""
    n, c, h, w = out.shape
    k = _constants(c, h, w, tuple(fill), out.device)
    flat = out.view(n, c, h * w)
    if kind & set(GROUPS["lut"]):
        _lookup(flat, *plan["lut"], k, kind)
    if kind & set(GROUPS["blend"]):
        _blend(flat, *plan["blend"], k, kind, h, w)
    if kind & set(GROUPS["warp"]):
        for chunk in plan["warp"]:
            _warp(flat, *chunk, k, filters)


def _lookup(out, rows, tables, flags, equalized, k: dict, kind: frozenset):
    """Each image and channel through its own table: the host's (posterize, solarize,
    solarize_add, invert; 0..255 for the others), AutoContrast's or Equalize's where drawn, in
    Pillow's integer arithmetic (exact in float64); then one gather on uint8."""
    images = out.index_select(0, rows)
    index = images.long()
    r, c, hw = images.shape
    table = tables
    if kind & {"autocontrast", "equalize"}:
        ix = k["ix"]
        lo, hi = images.aminmax(dim=2, keepdim=True)  # uint8; float64 with float64 operands
        autocontrast, equalize = flags.unbind(0)
        if "autocontrast" in kind:
            # ImageOps.autocontrast: [lo, hi] stretched to [0, 255]; a tensor quotient, not
            # 255.0 / d, which torch computes as 255 x (1 / d), not the correctly rounded one
            scale = k["255"] / (hi - lo).clamp_(min=1)
            stretched = (ix * scale - lo * scale).trunc_().clamp_(0.0, 255.0)
            table = torch.where(autocontrast & (hi > lo), stretched, table)
        if "equalize" in kind:
            # ImageOps.equalize: cumulative histogram steps, the top value's count left out
            # (an image of one value has step 0: kept); the Equalize images' histograms only
            some = index[equalized]
            counts = torch.zeros(len(some), c, 256, dtype=torch.float64, device=out.device)
            counts.scatter_add_(2, some, k["one"].expand_as(some))
            hist = torch.zeros(r, c, 256, dtype=torch.float64, device=out.device)
            hist.index_copy_(0, equalized, counts)
            step = (float(hw) - hist.gather(2, hi.long())).div_(255.0, rounding_mode="floor")
            lut = (hist.cumsum(2) - hist).add_(step.div(2.0, rounding_mode="floor"))
            lut = lut.div_(step.clamp(min=1.0), rounding_mode="floor").clamp_(max=255.0)
            table = torch.where(equalize & (step > 0.0), lut, table)
        table = table.to(torch.uint8)  # (r, C, 256)
    else:
        table = table.expand(r, c, 256)
    out.index_copy_(0, rows, table.gather(2, index))


def _blend(out, rows, factor, flags, smooth, k: dict, kind: frozenset, h: int, w: int):
    """ImageEnhance's Image.blend(degenerate, img, factor) per image, in float32, truncated:
    degenerate the grey image (Color: ITU-R 601-2 luma in 16-bit fixed point, rounded), its
    rounded mean (Contrast), black (Brightness) or SMOOTH (Sharpness: 3x3 kernel 1 1 1 / 1 5 1 /
    1 1 1 over 13, rounded, the border kept; its sums are exact integers in float32 and
    (total + 6.5) / 13 is never within float32's error of an integer, so it floors as Pillow's
    (2 total + 13) // 26)."""
    images = out.index_select(0, rows)
    r, c, hw = images.shape
    v = images.float()
    degenerate = k["zero32"]
    if kind & {"grey", "mean"}:
        grey = images
        if c == 3:
            luma = (images * k["luma"]).sum(1, keepdim=True, dtype=torch.int32)
            grey = luma.add_(32768).bitwise_right_shift_(16)
        colour, contrast = flags.unbind(0)
        degenerate = torch.where(colour, grey, degenerate)  # float32
        if "mean" in kind:
            mean = (grey.sum(2, keepdim=True, dtype=torch.float64) / float(hw) + 0.5).trunc_()
            degenerate = torch.where(contrast, mean.float(), degenerate)
    if "smooth" in kind:
        if kind & {"grey", "mean"}:
            degenerate = degenerate.repeat(1, c, 1)
        else:
            degenerate = torch.zeros(r, c, hw, device=out.device)
        some = v[smooth]
        box = torch.nn.functional.avg_pool2d(some.view(-1, c, h, w), 3, 1, 1, divisor_override=1)
        total = (
            box.view(-1, c, hw).add_(some, alpha=4.0).add_(6.5).div_(13.0, rounding_mode="floor")
        )
        degenerate.index_copy_(0, smooth, torch.where(k["border"], some, total))
    # degenerate + factor (img - degenerate) in float32: the float64 factor holds a float32,
    # whose product with a float32 is exact in float64 and rounds once, as float32's
    mixed = v.sub_(degenerate).mul_(factor).add_(degenerate)
    out.index_copy_(0, rows, mixed.clamp_(0.0, 255.0).trunc_().to(torch.uint8))


def _cubic(v1, v2, v3, v4, d):
    """Pillow's BICUBIC (cubic convolution, a = -1), in its order of operations. In place on
    three new tensors: a CPU allocates each fresh one page by page."""
    p2 = v3 - v1  # Pillow's -v1 + v3, the same double
    p3 = torch.add(v3, v1 - v2, alpha=2.0).sub_(v4)  # 2 (v1 - v2) + v3: x 2 is exact
    p4 = (v2 - v1).sub_(v3).add_(v4)  # Pillow's -v1 + v2 - v3 + v4
    return p4.mul_(d).add_(p3).mul_(d).add_(p2).mul_(d).add_(v2)


def _lerp(v2, v3, d):
    """Pillow's BILINEAR v2 + (v3 - v2) d."""
    return (v3 - v2).mul_(d).add_(v2)


def _along(values, d, k: dict):
    """The first pass over integer taps `values` (R, C, T, H*W): bilinear's, or bicubic's with
    its p2, p3, p4 as one product with integer weights (exact, so in any order), then Pillow's
    p1 + d (p2 + d (p3 + d p4))."""
    if values.shape[2] == 2:
        return _lerp(*values.unbind(2), d)
    p2, p3, p4 = torch.matmul(k["cubic"], values).unbind(2)
    return p4.mul_(d).add_(p3).mul_(d).add_(p2).mul_(d).add_(values.select(2, 1))


def _warp(out, rows, tap_rows, turned, geometry, axes, taps, n_turned, k, filters):
    """Image.transform(AFFINE) of a chunk of images (`_warp_plan`): each output pixel centre
    (x + .5, y + .5) maps to an input point, as Pillow's affine_transform; its taps are
    gathered as uint8 (edge pixels replicated) and filtered in float64, along the moving axis
    for every tap row, then across the tap rows for Rotate; the fill colour outside the image."""
    images = out.index_select(0, tap_rows)  # (R, C, H*W)
    n_rows, c, hw = images.shape
    pa, pb, pc, size = geometry.unbind(0)  # (2, R, 1, 1): the moving, the other coordinate
    last, stride, offset, other_last, other_stride = axes.unbind(0)  # (R, 1, 1)
    uv = pa * k["cols"] + pb * k["rows"] + pc
    inside = ((uv >= 0.0) & (uv < size)).all(0)
    uv = uv - 0.5
    base = uv.floor()
    (moving, other), (frac, other_frac) = base.unbind(0), (uv - base).unbind(0)
    taps = k[filters[0]] if taps is None else taps
    index = (moving + taps).clamp_(k["zero"], last).mul_(stride)
    index = index.add_((other + offset).clamp_(k["zero"], other_last).mul_(other_stride))
    t = index.shape[1]
    flat = index.long().view(n_rows, 1, t * hw).expand(n_rows, c, -1)
    along = _along(images.gather(2, flat).double().view(n_rows, c, t, hw), frac, k)
    # the fill colour outside the image, before the second pass: a Rotate image's tap rows
    # share their pixels' inside, and the filters give (f, f, f, f) back as f exactly
    along = torch.where(inside, along, k["fill"])
    across = along.narrow(0, 0, n_turned * t).view(n_turned, t, c, hw).unbind(1)
    across = (_lerp if t == 2 else _cubic)(*across, other_frac[turned])
    value = torch.cat([across, along.narrow(0, n_turned * t, n_rows - n_turned * t)])
    value = value.clamp_(0.0, 255.0).trunc_().to(torch.uint8)
    out.index_copy_(0, rows, value)


def apply_op(
    name: str, x: torch.Tensor, arg: torch.Tensor, resample: torch.Tensor, fill: tuple[int, ...]
) -> torch.Tensor:
    """timm's op `name` on uint8 images (n, C, H, W), image i with argument arg[i] (CPU
    float64; ignored by ops without one) and, for affine ops, filter RESAMPLE[resample[i]]:
    one slot of `apply_slot` in which every image drew `name`."""
    if name not in OPS:
        raise KeyError(name)
    drew = np.zeros(len(x), dtype=np.int64)
    arrays = (arg.numpy(), resample.numpy(), tuple(x.shape[1:]), RESAMPLE, x.device.type)
    plan = plan_to_device(slot_plan((name,), drew, *arrays), x.device)
    out = x.clone()
    apply_slot(out, plan, frozenset({op_kind(name)}), fill, RESAMPLE)
    return out
