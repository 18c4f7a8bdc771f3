"""The tensor policy's pixel ops: timm's auto-augment ops on uint8 batches (n, C, H, W) on any
device, reproducing Pillow's arithmetic (tests/test_tensor_policy.py checks each against timm's
PIL op, image for image), one op slot of a batch at a time (`apply_slot`) with a fixed number of
tensor operations whatever the batch size and whichever ops the images drew, each part of a slot
computing on the images that drew it only (taken out with one indexing, put back with one
index_copy_; which images, ordered by kind, and their parameters, found on the host by
`slot_plan`, in numpy):
- the lookup-table ops (AutoContrast, Equalize, Invert, Posterize, Solarize, SolarizeAdd): one
  256-entry table per image and channel (the host's; AutoContrast's and Equalize's from the
  image, in integers), then one gather on uint8;
- the enhance blends (Color, Contrast, Brightness, Sharpness): one float32 interpolation with
  per-image factors towards a per-image degenerate image (grey, mean grey, black or SMOOTH);
- the affine ops (Rotate, Shear, Translate): Pillow's own bilinear / bicubic (a = -1) sampling
  in float64, pixel centres at +0.5, edge pixels replicated inside the image and the fill
  colour outside it, the taps taken as uint8 from the batch along the axis that moves (a shear or
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
# changes them and puts them back (one indexing and index_copy_ per part and slot)
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
    RESAMPLE[resample[i]] (one of the policy's `filters`): per part (GROUPS), its images' rows
    (int64) ordered by kind, so that each kind is a slice of the part, then
    - lut: the tables (r, C, 256) uint8 of the rows after the AutoContrast and Equalize ones
      (posterize, solarize, solarize_add, invert), (the Equalize rows, the AutoContrast rows);
    - blend: the factor (r, 1, 1) float32 (Pillow's), (the rows whose degenerate image is the
      grey one: Color; the mean grey: Contrast; black: Brightness; the others SMOOTH);
    - warp: a list of chunks (`_warp_plan`)."""
    kinds = np.array([op_kind(name) for name in names] + ["none"])[op]  # op -1: the last
    rows, counts = _rows_by_kind(kinds, ("equalize", "autocontrast", "table"))
    static = rows[counts[0] + counts[1] :]  # the rows whose tables the host makes
    drawn = op[static]
    quantum, threshold = np.ones((len(drawn), 1)), np.full((len(drawn), 1), 256.0)
    add = np.zeros((len(drawn), 1))
    for k, name in enumerate(names):
        mine = drawn == k
        v = np.trunc(arg[static][mine])  # as Python's int()
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
    tables = np.repeat(table.astype(np.uint8)[:, None], shape[0], axis=1)  # per channel
    plan = {"lut": (rows, tables, tuple(counts[:2]))}
    rows, counts = _rows_by_kind(kinds, ("grey", "mean", "black", "smooth"))
    factor = arg[rows].astype(np.float32).reshape(-1, 1, 1)
    plan["blend"] = (rows, factor, tuple(counts[:3]))
    plan["warp"] = _warp_plan(names, op, arg, resample, kinds, shape, filters, device_type)
    return plan


def _rows_by_kind(kinds: np.ndarray, order: tuple[str, ...]) -> tuple[np.ndarray, list[int]]:
    """The rows of `kinds` that are one of `order`, kind after kind, and each kind's count."""
    rows = [np.flatnonzero(kinds == kind) for kind in order]
    return np.concatenate(rows), [len(r) for r in rows]


def _warp_plan(names, op, arg, resample, kinds, shape, filters, device_type) -> list[tuple]:
    """The affine ops of a slot as chunks (WARP_VALUES) of tap rows: a filter's T taps along
    the moving axis at each pixel, gathered and filtered in one pass; a Rotate image has T tap
    rows (the other axis' taps, filtered in a second pass), a shear or translation one (its
    other axis stays on the pixel centres, where the taps would weigh (0, 1, 0, 0)). The axis
    moving in the first pass is x, y for the ops that move y only (their matrix rows swapped).
    Per chunk: its images' rows (Rotate's first); per tap row (the Rotate images' first taps,
    their second taps, ..., then the shears' and translations'), float64 (2, R, 1, 1) for the
    moving then the other coordinate: the matrix' coefficients a, b, c, the sizes; its taps'
    offsets (T, 2, R, 1, 1), the axes' last index and flat stride (2, R, 1, 1); int64
    (R, C, 1) where its image's channels start in the flat batch; the number of Rotate
    images."""
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
        # each tap row's image (index into rows): Rotate's tap by tap, then one per image
        image = np.concatenate([np.tile(np.arange(n_t), t), np.arange(n_t, n_t + n_m)])
        m = matrix[rows][:, [3, 4, 5, 0, 1, 2]]
        m = np.where(swap[:, None], m, matrix[rows])[image]  # moving coordinate's first
        size = np.where(swap[:, None], [[h, w]], [[w, h]])[image]
        stride = np.where(swap[:, None], [[w, 1.0]], [[1.0, w]])[image]
        offset = np.concatenate([taps[rows_t].T.reshape(-1), np.zeros(n_m)])
        shift = np.stack([taps[rows][image].T, np.broadcast_to(offset, (t, len(image)))], 1)
        base = rows[image][:, None] * (c * h * w) + np.arange(c) * (h * w)

        def per_row(a):  # (R, 2) -> (2, R, 1, 1)
            return np.ascontiguousarray(a.T).reshape(2, -1, 1, 1)

        chunks.append(
            (
                rows,
                per_row(m[:, [0, 3]]),
                per_row(m[:, [1, 4]]),
                per_row(m[:, [2, 5]]),
                per_row(size.astype(np.float64)),
                shift.reshape(t, 2, -1, 1, 1),
                per_row(size - 1.0),
                per_row(stride),
                base.reshape(-1, c, 1),
                n_t,
            )
        )
        start_t, start_m = start_t + n_t, start_m + n_m
    return chunks


def plan_to_device(plan, device: torch.device):
    """A plan (nested tuples, lists, dicts of numpy arrays and other values) with its arrays
    on `device`, in one copy per dtype whatever their number, each array a strided view of
    its dtype's copy (one operation each)."""
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
        buckets.setdefault(a.dtype, []).append(a)
    views: dict[np.dtype, list[torch.Tensor]] = {}
    for dtype, parts in buckets.items():
        flat = to_device(torch.from_numpy(np.concatenate([p.ravel() for p in parts])), device)
        offsets = np.cumsum([0] + [p.size for p in parts[:-1]]).tolist()
        views[dtype] = [
            flat.as_strided(p.shape, np.cumprod((1, *p.shape[:0:-1]))[::-1].tolist(), o)
            for p, o in zip(parts, offsets, strict=True)
        ]
    pieces = {dtype: iter(v) for dtype, v in views.items()}

    def rebuild(node):
        if isinstance(node, np.ndarray):
            return next(pieces[node.dtype])
        if isinstance(node, (tuple, list)):
            return type(node)(rebuild(item) for item in node)
        if isinstance(node, dict):
            return {key: rebuild(item) for key, item in node.items()}
        return node

    return rebuild(plan)


@functools.lru_cache(maxsize=16)
def _constants(c: int, h: int, w: int, fill: tuple[int, ...], device: torch.device) -> dict:
    """The tensors every batch of this shape reads, made once per shape and device (on the
    CPU, then copied as the plans are: no host sync on a GPU). Scalars of the operands' own
    dtype: a Python number meeting a float32 or int32 tensor is a conversion per use."""
    f64, f32 = dict(dtype=torch.float64), dict(dtype=torch.float32)
    border = torch.ones(h, w, dtype=torch.bool)
    border[1:-1, 1:-1] = False
    constants = {
        "ix": torch.arange(256, **f64),
        "255": torch.full((1, 1, 1), 255.0, **f64),
        "luma": torch.tensor([19595.0, 38470.0, 7471.0], **f32).view(1, 3, 1),
        "2**15": torch.tensor(2.0**15, **f32),
        "2**-16": torch.tensor(2.0**-16, **f32),
        "6.5": torch.tensor(6.5, **f32),
        "13": torch.tensor(13.0, **f32),
        "border": border.view(1, 1, h * w),
        # (x + .5, y + .5) of every output pixel, (1, 1, H*W) each
        "cols": (torch.arange(w, **f64).repeat(h) + 0.5).view(1, 1, h * w),
        "rows": (torch.arange(h, **f64).repeat_interleave(w) + 0.5).view(1, 1, h * w),
        "fill": torch.tensor(fill, **f64).view(1, c, 1),
        "one": torch.ones((), **f64),
        "zero": torch.zeros((), **f64),
        "zero32": torch.zeros((), **f32),
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
            _warp(flat, *chunk, k)


def _pixels(values: torch.Tensor) -> torch.Tensor:
    """Float pixel values as Pillow stores them: clipped to [0, 255], truncated (by the
    conversion to uint8, as C's), uint8."""
    return values.clamp_(0.0, 255.0).to(torch.uint8)


def _lookup(out, rows, tables, counts, k: dict, kind: frozenset):
    """Each image and channel through its own table: the host's (posterize, solarize,
    solarize_add, invert), Equalize's or AutoContrast's from the image, in Pillow's integer
    arithmetic (exact in float64); then one gather on uint8."""
    images = out[rows]
    index = images.long()
    n_equalize, n_autocontrast = counts
    made = []
    if "equalize" in kind:
        made.append(_equalize(index[:n_equalize], k))
    if "autocontrast" in kind:
        made.append(_autocontrast(images[n_equalize : n_equalize + n_autocontrast], k))
    if made:
        made = made[0] if len(made) == 1 else torch.cat(made)
        tables = torch.cat([made.to(torch.uint8), tables])
    out.index_copy_(0, rows, tables.gather(2, index))


def _equalize(index, k: dict):
    """ImageOps.equalize's tables (e, C, 256) float64 of images `index` (int64): cumulative
    histogram steps, the top value's count left out; an image of one value (step 0) kept."""
    hist = torch.zeros(*index.shape[:2], 256, dtype=torch.float64, device=index.device)
    hist.scatter_add_(2, index, k["one"].expand(index.shape))
    top = hist.gather(2, index.amax(2, keepdim=True))
    step = top.neg_().add_(float(index.shape[2])).div_(255.0, rounding_mode="floor")
    lut = hist.cumsum(2).sub_(hist).add_(step.div(2.0, rounding_mode="floor"))
    lut = lut.div_(step.clamp_min(1.0), rounding_mode="floor").clamp_max_(255.0)
    return torch.where(step > 0.0, lut, k["ix"])


def _autocontrast(images, k: dict):
    """ImageOps.autocontrast's tables (a, C, 256) float64 of uint8 images: [lo, hi] stretched
    to [0, 255]; an image of one value kept. A tensor quotient, not 255.0 / d, which torch
    computes as 255 x (1 / d), not the correctly rounded one."""
    lo, hi = images.double().aminmax(dim=2, keepdim=True)
    scale = k["255"] / (hi - lo).clamp_min_(1.0)
    stretched = (k["ix"] * scale).sub_(lo * scale).clamp_(0.0, 255.0)  # truncated as uint8
    return torch.where(hi > lo, stretched, k["ix"])


def _blend(out, rows, factor, counts, k: dict, kind: frozenset, h: int, w: int):
    """ImageEnhance's Image.blend(degenerate, img, factor) per image, in float32, truncated:
    degenerate the grey image (Color: `_grey`), its rounded mean (Contrast), black
    (Brightness) or SMOOTH (Sharpness: `_smooth`)."""
    images = out[rows]
    (n_grey, n_mean, n_black), hw = counts, images.shape[2]
    v = images.float()
    blends = kind & set(GROUPS["blend"])
    if blends == {"grey"}:  # Color only: the grey image itself, broadcast
        degenerate = _grey(v, k)
    else:
        degenerate = torch.zeros(v.shape, device=v.device)  # black: Brightness's
        if blends & {"grey", "mean"}:
            grey = _grey(v[: n_grey + n_mean], k)
            if "mean" in blends:  # the Contrast images' grey replaced by its mean
                contrast = grey[n_grey:]
                mean = contrast.sum(2, keepdim=True, dtype=torch.float64)
                contrast.copy_(mean.div_(float(hw)).add_(0.5).trunc_())
            degenerate[: n_grey + n_mean].copy_(grey)
        if "smooth" in blends:
            smooth = n_grey + n_mean + n_black
            degenerate[smooth:].copy_(_smooth(v[smooth:], k, h, w))
    # degenerate + factor (img - degenerate) in float32, as Pillow's
    out.index_copy_(0, rows, _pixels(v.sub_(degenerate).mul_(factor).add_(degenerate)))


def _grey(v, k: dict):
    """Image.convert("L") of float32 images (ITU-R 601-2 luma in 16-bit fixed point,
    rounded): exact in float32, whose sums stay under 2^24 (a copy of 1-channel images)."""
    if v.shape[1] != 3:
        return v.clone()  # not a view of v, which the blend changes
    grey = (v * k["luma"]).sum(1, keepdim=True)
    return grey.add_(k["2**15"]).mul_(k["2**-16"]).floor_()


def _smooth(v, k: dict, h: int, w: int):
    """ImageFilter.SMOOTH of float32 images (s, C, H*W): the 3x3 kernel 1 1 1 / 1 5 1 / 1 1 1
    over 13, rounded, the border kept; its sums are exact integers in float32 and
    (total + 6.5) / 13 is never within float32's error of an integer, so it floors as Pillow's
    (2 total + 13) // 26."""
    box = torch.nn.functional.avg_pool2d(v.view(-1, v.shape[1], h, w), 3, 1, 1, divisor_override=1)
    total = box.view(v.shape).add_(v, alpha=4.0).add_(k["6.5"])
    return torch.where(k["border"], v, total.div_(k["13"], rounding_mode="floor"))


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


def _warp(out, rows, pa, pb, pc, size, shift, last, stride, base, n_turned, k):
    """Image.transform(AFFINE) of a chunk of images (`_warp_plan`): each output pixel centre
    (x + .5, y + .5) maps to an input point, as Pillow's affine_transform; its taps are
    taken as uint8 from the flat batch (edge pixels replicated) and filtered in float64, along
    the moving axis for every tap row, then across the tap rows for Rotate; the fill colour
    outside the image."""
    uv = pa * k["cols"] + pb * k["rows"] + pc  # (2, R, 1, H*W): the moving, the other
    inside = ((uv >= 0.0) & (uv < size)).all(0)
    uv = uv.sub_(0.5)
    floor = uv.floor()
    frac = uv.sub_(floor)
    # flat positions (T, R, C, H*W) of each tap row's T taps, every channel
    index = (floor + shift).clamp_(k["zero"], last).mul_(stride).sum(1).long() + base
    t = shift.shape[0]
    filtered = (_lerp if t == 2 else _cubic)(*out.take(index).double().unbind(0), frac[0])
    # the fill colour outside the image, before the second pass: a Rotate image's tap rows
    # share their pixels' inside, and the filters give (f, f, f, f) back as f exactly
    along = torch.where(inside, filtered, k["fill"])
    across = along[: n_turned * t].view(t, n_turned, *along.shape[1:]).unbind(0)
    across = (_lerp if t == 2 else _cubic)(*across, frac[1][:n_turned])
    out.index_copy_(0, rows, _pixels(torch.cat([across, along[n_turned * t :]])))


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
