"""The tensor policy's pixel ops: timm's auto-augment ops on uint8 batches (n, C, H, W) on any
device, reproducing Pillow's arithmetic (tests/test_tensor_policy.py checks each against timm's
PIL op, image for image), one op slot of a batch after another (`apply_plan`) with a fixed number
of tensor operations whatever the batch size and whichever ops the images drew, each kind of op
computing on the images that drew it only (a slot's images taken out with one indexing and put
back with one index_copy_, the lookups written into them as uint8, the other kinds' values as one
float64 block clipped and truncated once; which images, ordered by kind, and their parameters,
found on the host by `plan_batch`, in numpy):
- the lookup-table ops (Equalize, Invert, Posterize, Solarize, SolarizeAdd, and Brightness, a
  blend with black): one 256-entry table per image and channel (the host's; Equalize's from the
  image's histogram, in integers), then one gather;
- AutoContrast: Pillow's float stretch of each channel between its lowest and highest value;
- the enhance blends (Color, Contrast, Sharpness): one float32 interpolation with per-image
  factors towards a per-image degenerate image (grey, mean grey or SMOOTH) built in one buffer;
- the affine ops (Rotate, Shear, Translate): Pillow's own bilinear / bicubic (a = -1) sampling
  in float64, pixel centres at +0.5, edge pixels replicated inside the image and the fill
  colour outside it, the taps taken as uint8 from the batch along the axis that moves (a shear or
  translation moves one), then across for Rotate; where they sample is computed once for the
  slots that share a chunk of at most `WARP_VALUES` taps per slot (every slot of a batch of
  CIFAR-sized images, a few large ones at a time on the CPU).
Views are made with one operation each (`_block`, `_narrow`), conversions with two
(`_convert`): torch.profiler counts what slicing and `to` record inside them (issue 66).
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
# A slot's images, kind after kind (each kind a run of rows): the lookup tables (Equalize's, made
# from the image; the host's), AutoContrast, the blends by degenerate image (Color's grey,
# Contrast's mean grey, Sharpness's SMOOTH), then the affine ops (`_warp_chunks`).
LUT_KINDS = ("equalize", "table")
BLEND_KINDS = ("grey", "mean", "smooth")
ROW_ORDER = (*LUT_KINDS, "autocontrast", *BLEND_KINDS)
WARP_KINDS = ("warp", "warp_axis")
_TAPS = {"bicubic": (-1.0, 0.0, 1.0, 2.0), "bilinear": (0.0, 0.0, 1.0, 1.0)}
# The affine warps' taps (T x T or T a pixel, x C) per slot on chunks of at most this many values:
# on the CPU few enough for the float64 passes to stay in cache and in the allocator's reused
# memory (a fresh large buffer costs its pages' faults), enough for a batch of 256 CIFAR-sized
# images; on CUDA a whole batch.
WARP_VALUES = {"cpu": 2**21, "cuda": 2**27}


def op_kind(name: str) -> str:
    """Which kind of work op `name` is (ROW_ORDER, WARP_KINDS): "table" (posterize, solarize,
    solarize_add, invert and Brightness, whose blend with black is a table of f x i), "equalize"
    (its table made from the image), "autocontrast"; "grey", "mean", "smooth" (the blends, by
    degenerate image); "warp" (Rotate: both axes move), "warp_axis" (the shears and
    translations: one axis moves, the other stays on the pixel centres)."""
    base = name.replace("Increasing", "").replace("Original", "")
    if base in ("AutoContrast", "Equalize"):
        return base.lower()
    if base in _LUT_OPS or base == "Brightness":
        return "table"
    if base in _BLEND_OPS:
        return {"Color": "grey", "Contrast": "mean"}.get(base, "smooth")
    return "warp" if base == "Rotate" else "warp_axis"


def plan_batch(
    names: tuple[str, ...],
    op: np.ndarray,
    arg: np.ndarray,
    resample: np.ndarray,
    shape: tuple[int, int, int],
    filters: tuple[str, ...],
    kinds: tuple[frozenset[str], ...],
    device_type: str = "cpu",
) -> dict:
    """What `apply_plan` reads for a batch of images `shape` (C, H, W) in which image i runs, in
    op slot s, op names[op[i, s]] (none where op[i, s] < 0) with argument arg[i, s] and, for an
    affine op, filter RESAMPLE[resample[i, s]] (one of the policy's `filters`); `kinds[s]` the
    kinds slot s can draw (a fixed choice per policy: what is planned and run, not per batch).
    {"slots": per slot {"rows": its images (int64), ROW_ORDER's kinds then the affine ones;
    "counts": images per kind; "tables": the host's tables (t, C, 256) float64 of its "table"
    rows; "factor": the blend rows' factors (b, 1, 1) float32 (Pillow's); "warp": per chunk
    (its index, the slot's first tap row in it, Rotate images, other affine images, whether the
    slot is the chunk's last)}, "chunks": the affine ops' tap rows (`_warp_chunks`)}."""
    per_image = np.array([op_kind(name) for name in names] + ["none"])  # op -1: the last
    slots, affine = [], []
    for s, kind in enumerate(kinds):
        drawn = per_image[op[:, s]]
        runs = [np.flatnonzero(drawn == k) for k in ROW_ORDER]
        slot = {
            "rows": np.concatenate(runs),
            "counts": dict(zip(ROW_ORDER, map(len, runs), strict=True)),
        }
        if "table" in kind:
            slot["tables"] = _host_tables(names, op[:, s], arg[:, s], runs[1], shape[0])
        if kind & set(BLEND_KINDS):
            blends = np.concatenate(runs[3:])
            slot["factor"] = arg[blends, s].astype(np.float32).reshape(-1, 1, 1)
        slots.append(slot)
        has_warps = kind & set(WARP_KINDS)
        affine.append(tuple(np.flatnonzero(drawn == k) for k in WARP_KINDS) if has_warps else None)
    chunks = _warp_chunks(names, op, arg, resample, affine, shape, filters, device_type, slots)
    return {"slots": slots, "chunks": chunks}


def _host_tables(names, op, arg, rows, c: int) -> np.ndarray:
    """The tables (t, C, 256) float64 of images `rows` running a fixed lookup: Pillow's
    posterize, solarize, solarize_add and invert tables; Brightness's Image.blend with black,
    f x i in float32 truncated (ImagingBlend: 0 + f (i - 0), clipped)."""
    drawn, arg = op[rows], arg[rows]
    quantum, threshold = np.ones((len(rows), 1)), np.full((len(rows), 1), 256.0)
    add = np.zeros((len(rows), 1))
    factor = np.full((len(rows), 1), np.nan, dtype=np.float32)
    for k, name in enumerate(names):
        mine = drawn == k
        v = np.trunc(arg[mine])  # as Python's int()
        base = name.replace("Increasing", "").replace("Original", "")
        if base == "Invert":
            threshold[mine] = 0.0
        elif base == "Posterize":  # 0 bits: black, as `augment._posterize`
            quantum[mine, 0] = 2.0 ** (8 - np.clip(v, 0, 8))
        elif base == "Solarize":
            threshold[mine, 0] = v
        elif base == "SolarizeAdd":
            add[mine, 0] = v
        elif base == "Brightness":
            factor[mine, 0] = arg[mine]
    ix = np.arange(256.0)
    table = ix - np.fmod(ix, quantum)  # Pillow's tables: posterize, solarize, solarize_add
    table = np.where(ix < threshold, table, 255.0 - table)
    table = np.where(ix < 128, np.minimum(table + add, 255.0), table)
    brightness = np.trunc(np.clip(factor * np.arange(256, dtype=np.float32), 0.0, 255.0))
    table = np.where(np.isnan(factor), table, brightness)
    return np.repeat(table[:, None], c, axis=1)  # per channel


def _matrices(names, op, arg, h: int, w: int) -> np.ndarray:
    """The affine matrices (n, 6) of images running ops names[op] with arguments arg."""
    matrix = np.zeros((len(op), 6))
    for k, name in enumerate(names):
        mine = op == k
        if name in AFFINE_OPS and mine.any():
            matrix[mine] = _affine_matrix(name, arg[mine], h, w)
    return matrix


def _warp_chunks(names, op, arg, resample, affine, shape, filters, device_type, slots) -> list:
    """The affine ops of every slot as chunks of tap rows whose coordinates are computed
    together (`_coordinates`): a filter's T taps along the moving axis at each pixel, gathered
    and filtered in one pass; a Rotate image has T tap rows (the other axis' taps, filtered in
    a second pass), a shear or translation one (its other axis stays on the pixel centres,
    where the taps would weigh (0, 1, 0, 0)). The axis moving in the first pass is x, y for the
    ops that move y only (their matrix rows swapped). A chunk holds at most one segment of
    each slot, of at most WARP_VALUES taps, laid out Rotate's images tap by tap then the
    others; consecutive slots share a chunk, so that the coordinates of a small batch are
    computed once for all its slots. Adds the segments to `slots` ("warp", "rows"). Per chunk,
    per tap row: float64 (2, R, 1, 1) for the moving then the other coordinate: the matrix'
    coefficients a, b, c, the largest coordinate inside the image (below its size), its taps'
    offsets (T, 2, R, 1, 1), the axes' last index and flat stride; int64 (R, C, 1) where its
    image's channels start in the flat batch."""
    c, h, w = shape
    t = 2 if tuple(filters) == ("bilinear",) else 4
    limit = WARP_VALUES.get(device_type, WARP_VALUES["cpu"]) // (t * c * h * w)  # tap rows
    chunks, segments = [], []
    for s, images in enumerate(affine):
        if images is None:
            continue
        turned, moved = images
        i_t = i_m = 0
        while True:
            n_t = min(len(turned) - i_t, max(limit // t, 1))
            n_m = min(len(moved) - i_m, max(limit - n_t * t, 0 if n_t else 1))
            segments.append((s, turned[i_t : i_t + n_t], moved[i_m : i_m + n_m]))
            i_t, i_m = i_t + n_t, i_m + n_m
            if i_t == len(turned) and i_m == len(moved):
                break
            chunks.append(segments)
            segments = []
    if segments:
        chunks.append(segments)
    taps = np.array([_TAPS[f] for f in RESAMPLE])  # per RESAMPLE index
    planned = []
    for index, segments in enumerate(chunks):
        rows, matrix, swap, moving, other, start = [], [], [], [], [], 0
        for j, (s, turned, moved) in enumerate(segments):
            # the chunk's slots come in order, one segment each: its last segment is the last use
            slots[s].setdefault("warp", []).append(
                (index, start, len(turned), len(moved), j == len(segments) - 1)
            )
            slots[s]["rows"] = np.concatenate([slots[s]["rows"], turned, moved])
            start += t * len(turned) + len(moved)
            images = np.concatenate([np.tile(turned, t), moved])  # Rotate's tap by tap
            rows.append(images)
            matrix.append(_matrices(names, op[images, s], arg[images, s], h, w))
            name = np.array([*names, ""])[op[moved, s]]
            swap.append(np.concatenate([np.zeros(t * len(turned), bool), ~np.isin(name, _AXIS_X)]))
            if t == 2:  # bilinear only: 2 taps
                image_taps = np.tile([0.0, 1.0], (len(images), 1))
            else:
                image_taps = taps[np.maximum(resample[images, s], 0)]
            moving.append(image_taps)
            # the other axis' tap of each Rotate tap row (tap j of its image); 0 for the others
            other.append(
                np.concatenate([image_taps[: len(turned)].T.reshape(-1), np.zeros(len(moved))])
            )
        rows, matrix, swap = np.concatenate(rows), np.concatenate(matrix), np.concatenate(swap)
        moving, other = np.concatenate(moving), np.concatenate(other)
        # the moving coordinate first
        m = np.where(swap[:, None], matrix[:, [3, 4, 5, 0, 1, 2]], matrix)
        size = np.where(swap[:, None], [[h, w]], [[w, h]]).astype(np.float64)
        stride = np.where(swap[:, None], [[w, 1.0]], [[1.0, w]])
        shift = np.stack([moving.T, np.broadcast_to(other, (t, len(rows)))], 1)

        def per_row(a):  # (R, 2) -> (2, R, 1, 1)
            return np.ascontiguousarray(a.T).reshape(2, -1, 1, 1)

        planned.append(
            (
                per_row(m[:, [0, 3]]),
                per_row(m[:, [1, 4]]),
                per_row(m[:, [2, 5]]),
                per_row(np.nextafter(size, 0.0)),
                shift.reshape(t, 2, -1, 1, 1),
                per_row(size - 1.0),
                per_row(stride),
                (rows * (c * h * w))[:, None, None] + np.arange(c)[:, None] * (h * w),
            )
        )
    return planned


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
        "255": torch.tensor(255.0, **f64),
        "zero": torch.zeros((), **f64),
        "hw": torch.tensor(float(h * w), **f64),
        "2hw": torch.tensor(2.0 * h * w, **f64),
        "luma": torch.tensor([19595.0, 38470.0, 7471.0], **f32).view(1, 3, 1),
        "2**15": torch.tensor(2.0**15, **f32),
        "2**16": torch.tensor(2.0**16, **f32),
        "6.5": torch.tensor(6.5, **f32),
        "13": torch.tensor(13.0, **f32),
        "border": border,
        # (x + .5, y + .5) of every output pixel, (1, 1, H*W) each
        "cols": (torch.arange(w, **f64).repeat(h) + 0.5).view(1, 1, h * w),
        "rows": (torch.arange(h, **f64).repeat_interleave(w) + 0.5).view(1, 1, h * w),
        "fill": torch.tensor(fill, **f64).view(1, c, 1),
        # Pillow's cubic coefficients (v2, -v1 + v3, 2 (v1 - v2) + v3 - v4, -v1 + v2 - v3 + v4)
        # of integer taps (v1, v2, v3, v4): exact in float64 whatever the order of the sums
        "cubic": torch.tensor(
            [[0.0, 1, 0, 0], [-1, 0, 1, 0], [2, -2, 1, -1], [-1, 1, -1, 1]], **f64
        ),
    }
    constants = {key: to_device(t, device) for key, t in constants.items()}
    # 1.0 repeated without memory: as scatter_add_'s source, larger than any index (a
    # scatter with a scalar value and reduce="add" is 2-3x slower on the CPU)
    constants["ones"] = torch.ones((), dtype=torch.float64, device=device).expand(2**20, c, h * w)
    return constants


# Views below are made with one as_strided each: slicing, select, unbind, expand and reshape
# record two or more operations apiece, which a GPU launches no kernel for but which
# torch.profiler counts (issue 66 counts them).
def _block(t: torch.Tensor, shape: tuple[int, ...], start: int = 0) -> torch.Tensor:
    """The prod(shape) elements of contiguous t from its flat position `start`, as `shape`."""
    stride, size = [], 1
    for n in reversed(shape):
        stride.append(size)
        size *= n
    return t.as_strided(shape, stride[::-1], t.storage_offset() + start)


def _narrow(t: torch.Tensor, dim: int, start: int, length: int) -> torch.Tensor:
    """t.narrow(dim, start, length)."""
    shape = list(t.shape)
    shape[dim] = length
    return t.as_strided(shape, t.stride(), t.storage_offset() + start * t.stride(dim))


def _convert(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """t in `dtype` (a uint8 conversion truncates, as C's): two operations, where `to`
    records four."""
    return torch.empty(t.shape, dtype=dtype, device=t.device).copy_(t)


def apply_plan(x: torch.Tensor, plan: dict, kinds, fill, filters) -> torch.Tensor:
    """The uint8 images x (n, C, H, W) through the slots of `plan` (`plan_batch`, on x's
    device) one after another, slot s running the kinds `kinds[s]` can draw, each on its own
    images; `filters` the policy's affine filters. A fixed number of tensor operations per
    slot whatever the batch and the draws (per chunk of the warps: one at CIFAR's size)."""
    n, c, h, w = x.shape
    k = _constants(c, h, w, tuple(fill), x.device)
    t = 2 if tuple(filters) == ("bilinear",) else 4
    out = torch.empty(x.shape, dtype=torch.uint8, device=x.device)
    out.copy_(x)
    flat = out.view(n, c, h * w)
    coordinates = {}
    for slot, kind in zip(plan["slots"], kinds, strict=True):
        # the slot's images, taken out once (the affine ones too): the lookups write theirs
        # into it as uint8, the other kinds' values (float64, `pieces`) follow them
        images = flat[slot["rows"]] if kind - set(WARP_KINDS) else None
        pieces = _pixel_ops(images, slot, kind, k, h, w) if images is not None else []
        for index, start, n_turned, n_moved, last in slot.get("warp", ()):
            if index not in coordinates:
                coordinates[index] = _coordinates(plan["chunks"][index], k)
            chunk = coordinates.pop(index) if last else coordinates[index]
            pieces += _warp(flat, chunk, start, n_turned, n_moved, kind, k, t)
        if pieces:
            values = torch.cat(pieces) if len(pieces) > 1 else pieces[0]
            # Pillow's pixels: clipped to [0, 255] (a clamp_ with both bounds as tensors is
            # 2-3x slower on the CPU), truncated (by the conversion to uint8)
            values = values.clamp_min_(k["zero"]).clamp_max_(k["255"])
            if images is None:
                images = _convert(values, torch.uint8)
            else:
                lookups = slot["counts"]["equalize"] + slot["counts"]["table"]
                _block(images, tuple(values.shape), lookups * c * h * w).copy_(values)
        flat.index_copy_(0, slot["rows"], images)
    return out


def _pixel_ops(images, slot: dict, kind: frozenset, k: dict, h: int, w: int) -> list:
    """The slot's images (r, C, H*W) that drew a lookup, looked up in place (uint8), and the
    float64 values of those that drew AutoContrast or a blend, in ROW_ORDER."""
    (c, hw), count = images.shape[1:], slot["counts"]
    pieces = []
    n_lut = count["equalize"] + count["table"]
    if kind & set(LUT_KINDS):  # each image and channel through its own table: one gather
        looked_up = _block(images, (n_lut, c, hw))
        index = _convert(looked_up, torch.int64)
        tables = []
        if "equalize" in kind:
            tables.append(_equalize(_block(index, (count["equalize"], c, hw)), k))
        if "table" in kind:
            tables.append(slot["tables"])
        tables = torch.cat(tables) if len(tables) > 1 else tables[0]
        # uint8: a float64 gather and its share of a float64 block cost a CPU 5x the traffic
        torch.gather(_convert(tables, torch.uint8), 2, index, out=looked_up)
    if "autocontrast" in kind:
        n = count["autocontrast"]
        pieces.append(_autocontrast(_block(images, (n, c, hw), n_lut * c * hw), k))
    if kind & set(BLEND_KINDS):
        start = (n_lut + count["autocontrast"]) * c * hw
        n = sum(count[kind] for kind in BLEND_KINDS)
        blends = _block(images, (n, c, hw), start)
        pieces.append(_blend(blends, slot["factor"], count, kind, k, h, w))
    return pieces


def _equalize(index, k: dict):
    """ImageOps.equalize's tables (e, C, 256) float64 of images `index` (int64): cumulative
    histogram steps, the top value's count left out; an image of one value (step 0) kept."""
    hist = torch.empty((*index.shape[:2], 256), dtype=torch.float64, device=index.device)
    hist.zero_().scatter_add_(2, index, k["ones"])
    below = hist.cumsum(2).sub_(hist)  # pixels below each value
    # the pixels below the top value: all but the top value's
    step = below.gather(2, index.amax(2, keepdim=True)).div_(255.0, rounding_mode="floor")
    lut = below.add_(step.div(2.0, rounding_mode="floor"))
    # step 0 gives inf or nan here, replaced by the identity below
    lut.div_(step, rounding_mode="floor").clamp_max_(k["255"])
    return torch.where(step > 0.0, lut, k["ix"], out=lut)


def _autocontrast(images, k: dict):
    """ImageOps.autocontrast of uint8 images (a, C, H*W) per channel, float64 before Pillow's
    clip and truncation: i x scale + offset (offset = -lo x scale, scale = 255 / (hi - lo), a
    tensor quotient: torch computes 255.0 / d as 255 x (1 / d)); a channel of one value kept."""
    v = _convert(images, torch.float64)
    lo, hi = v.aminmax(dim=2, keepdim=True)
    span = hi - lo
    scale = k["255"] / span  # inf for one value, replaced below
    stretched = (v * scale).sub_(lo * scale)
    return torch.where(span > 0.0, stretched, v, out=stretched)


def _blend(images, factor, count: dict, kind: frozenset, k: dict, h: int, w: int):
    """ImageEnhance's Image.blend(degenerate, img, factor) of uint8 images (b, C, H*W) in
    float32 (Pillow's), float64 before the clip and truncation: degenerate the grey image
    (Color: `_grey`), its rounded mean (Contrast: `_mean`) or SMOOTH (Sharpness: `_smooth`),
    each kind's written into one buffer (a copy broadcasts and converts as it writes)."""
    (n, c, hw), n_grey, n_mean = images.shape, count["grey"], count["mean"]
    v = _convert(images, torch.float32)
    if kind & set(BLEND_KINDS) == {"grey"}:  # Color only: the grey image itself, broadcast
        degenerate = _grey(v, k)
    else:
        degenerate = torch.empty(v.shape, dtype=torch.float32, device=v.device)
        if kind & {"grey", "mean"}:
            grey = _grey(_block(v, (n_grey + n_mean, c, hw)), k)
            # the Contrast rows' grey too, written over by their mean below
            _block(degenerate, (n_grey + n_mean, c, hw)).copy_(grey)
            if "mean" in kind:
                mean = _mean(_block(grey, (n_mean, 1, hw), n_grey * hw), k)
                _block(degenerate, (n_mean, c, hw), n_grey * c * hw).copy_(mean)
        if "smooth" in kind:
            start, smooth = (n_grey + n_mean) * c * hw, (n - n_grey - n_mean, c, h, w)
            _smooth(_block(v, smooth, start), _block(degenerate, smooth, start), k)
    # degenerate + factor (img - degenerate) in float32, as Pillow's
    return _convert(v.sub_(degenerate).mul_(factor).add_(degenerate), torch.float64)


def _grey(v, k: dict):
    """Image.convert("L") of float32 images (ITU-R 601-2 luma in 16-bit fixed point,
    rounded): exact in float32, whose sums stay under 2^24 (a copy of 1-channel images)."""
    if v.shape[1] != 3:
        return v.clone()  # not a view of v, which the blend changes
    grey = (v * k["luma"]).sum(1, keepdim=True)
    return grey.add_(k["2**15"]).div_(k["2**16"], rounding_mode="floor")


def _mean(grey, k: dict):
    """Contrast's degenerate: the grey images' (m, 1, H*W) mean as ImageStat gives it, rounded
    as int(mean + 0.5), (m, 1, 1) float64: floor((2 total + H W) / (2 H W)), equal to Pillow's
    double arithmetic for every total of images up to 512 x 512 (checked) and beyond (a
    quotient not a half is at least 1 / (2 H W) from one, far more than its rounding)."""
    total = _convert(grey, torch.float64).sum(2, keepdim=True)
    return torch.add(k["hw"], total, alpha=2.0).div_(k["2hw"], rounding_mode="floor")


def _smooth(v, out, k: dict):
    """ImageFilter.SMOOTH of float32 images v (s, C, H, W) into `out`: the 3x3 kernel 1 1 1 /
    1 5 1 / 1 1 1 over 13, rounded, the border kept; its sums are exact integers in float32
    and (total + 6.5) / 13 is never within float32's error of an integer, so it floors as
    Pillow's (2 total + 13) // 26."""
    total = torch.nn.functional.avg_pool2d(v, 3, 1, 1, divisor_override=1).add_(v, alpha=4.0)
    total.add_(k["6.5"]).div_(k["13"], rounding_mode="floor")
    torch.where(k["border"], v, total, out=out)


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


def _coordinates(chunk, k: dict):
    """Where a chunk's tap rows (`_warp_chunks`) sample, for every slot of the chunk at once:
    each output pixel centre (x + .5, y + .5) maps to an input point, as Pillow's
    affine_transform; the flat positions (T, R, C, H*W) int64 of its taps in the batch (edge
    pixels replicated), the fractions (2, R, 1, H*W) of the moving then the other
    coordinate, and whether the point is inside the image (R, 1, H*W)."""
    pa, pb, pc, below, shift, last, stride, base = chunk
    uv = (pa * k["cols"]).add_(pb * k["rows"]).add_(pc)  # (2, R, 1, H*W)
    inside = torch.eq(uv.clamp(k["zero"], below), uv).all(0)  # 0 <= u < size, both axes
    uv = uv.sub_(0.5)
    floor = uv.floor()
    frac = uv.sub_(floor)
    position = (floor + shift).clamp_(k["zero"], last).mul_(stride).sum(1)
    return torch.add(_convert(position, torch.int64), base), frac, inside


def _warp(flat, coordinates, start: int, n_turned: int, n_moved: int, kind, k: dict, t: int):
    """Image.transform(AFFINE) of one slot's segment of a chunk (`_warp_chunks`), float64
    before the clip and truncation, Rotate's images then the others: the taps taken as uint8
    from the flat batch and filtered along the moving axis for every tap row (bicubic: its
    coefficients from the integer taps in one matrix product, then Pillow's Horner steps),
    then across the tap rows for Rotate; the fill colour outside the image."""
    position, frac, inside = coordinates
    rows_in_chunk, c, hw = position.shape[1], flat.shape[1], flat.shape[2]
    r = t * n_turned + n_moved
    taps = flat.take(_narrow(position, 1, start, r))  # (T, r, C, H*W)
    taps = _convert(_block(taps, (t, r * c * hw)), torch.float64)
    d = _block(frac, (r, 1, hw), start * hw)
    if t == 4:
        p = k["cubic"].mm(taps)
        v2, p2, p3, p4 = (_block(p, (r, c, hw), j * r * c * hw) for j in range(4))
        along = p4.mul(d).add_(p3).mul_(d).add_(p2).mul_(d).add_(v2)
    else:
        along = _lerp(*(_block(taps, (r, c, hw), j * r * c * hw) for j in range(2)), d)
    # the fill colour outside the image, before the second pass: a Rotate image's tap rows
    # share their pixels' inside, and the filters give (f, f, f, f) back as f exactly
    torch.where(_block(inside, (r, 1, hw), start * hw), along, k["fill"], out=along)
    pieces = []
    if "warp" in kind:
        tap_rows = (_block(along, (n_turned, c, hw), j * n_turned * c * hw) for j in range(t))
        d = _block(frac, (n_turned, 1, hw), (rows_in_chunk + start) * hw)
        pieces.append((_lerp if t == 2 else _cubic)(*tap_rows, d))
    if "warp_axis" in kind:
        pieces.append(_block(along, (n_moved, c, hw), t * n_turned * c * hw))
    return pieces


def apply_op(
    name: str, x: torch.Tensor, arg: torch.Tensor, resample: torch.Tensor, fill: tuple[int, ...]
) -> torch.Tensor:
    """timm's op `name` on uint8 images (n, C, H, W), image i with argument arg[i] (CPU
    float64; ignored by ops without one) and, for affine ops, filter RESAMPLE[resample[i]]:
    one slot of `apply_plan` in which every image drew `name`."""
    if name not in OPS:
        raise KeyError(name)
    drew = np.zeros((len(x), 1), dtype=np.int64)
    kinds = (frozenset({op_kind(name)}),)
    shape = tuple(x.shape[1:])
    arrays = (arg.numpy()[:, None], resample.numpy()[:, None], shape, RESAMPLE, kinds)
    plan = plan_to_device(plan_batch((name,), drew, *arrays, x.device.type), x.device)
    return apply_plan(x, plan, kinds, fill, RESAMPLE)
