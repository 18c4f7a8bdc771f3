"""A profile of a few training steps in figures (issue 66 item 3: "or a profile naming what caps
it"): the operations a step issues, how much of the steps' wall time the device spends running
them, and their time by kind (matmul, attention, normalisation, optimizer and EMA, copies,
compiled fusions, other element-wise work), with the rate the matmuls reach while they run.

What an "operation" is depends on the device: on CUDA the kernels, copies and fills the GPU
runs (torch.profiler's device events); on the CPU the aten operations that do their own work
(`device_ops`), the CPU's closest analogue of a launch. `busy_share` is
the union of those operations' intervals over the steps' wall time: near 1 the device is never
idle (the work itself caps the step), well below 1 the host does not issue work fast enough
(launches, Python, syncs, input). bench/step_parts.py calls `profile_steps` after its rates;
`summarise` is the arithmetic, apart so that a test can feed it intervals.
"""

from __future__ import annotations

import gzip
import shutil
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile, schedule

# (kind, substrings of a lower-cased kernel or aten name), first match wins: attention before
# matmul (flash kernels multiply too); inductor's pointwise, reduction and persistent kernels
# before matmul (their names list the ops fused: "triton_poi_fused_convolution_gelu_3" is the
# bias and GELU after a convolution; its templates, "triton_tem", are matmuls); optimizer before
# copies (its foreach copies are its own).
KINDS = (
    ("attention", ("flash", "fmha", "attention", "sdpa", "mem_eff")),
    ("compiled_fusion", ("triton_poi", "triton_red", "triton_per")),
    ("matmul", ("gemm", "nvjet", "cutlass", "xmma", "wgmma", "triton_tem", "conv", "aten::mm",
                "aten::addmm", "aten::bmm", "aten::baddbmm", "matmul", "aten::linear")),
    ("optimizer_ema", ("adam", "sgd", "lion", "multi_tensor_apply", "_foreach", "lerp",
                       "addcdiv", "addcmul")),
    ("norm", ("norm",)),
    ("copy", ("memcpy", "memset", "copy", "aten::cat", "aten::fill", "aten::zero")),
)  # fmt: skip
OTHER = "elementwise_other"

# aten operations that launch nothing: views, shape queries, allocation without a fill
VIEWS = frozenset(
    f"aten::{name}"
    for name in (
        "view as_strided t transpose permute expand expand_as slice select unsqueeze squeeze "
        "squeeze_ unsqueeze_ detach detach_ alias _unsafe_view split split_with_sizes chunk "
        "unbind empty empty_like empty_strided contiguous flatten narrow _reshape_alias reshape "
        "resolve_conj resolve_neg lift_fresh view_as result_type set_ resize_ as_strided_ "
        "numpy_T"
    ).split()
)


def kind_of(name: str) -> str:
    low = name.lower()
    for kind, needles in KINDS:
        if any(n in low for n in needles):
            return kind
    return OTHER


def busy_time(intervals: Iterable[tuple[float, float]]) -> float:
    """The length of the union of (start, end) intervals: time during which at least one runs
    (kernels on several streams overlap; counted once)."""
    total, end = 0.0, float("-inf")
    for start, stop in sorted(intervals):
        if stop <= end:
            continue
        total += stop - max(start, end)
        end = stop
    return total


def summarise(
    ops: list[tuple[str, float]],
    intervals: list[tuple[float, float]],
    steps: int,
    wall_s: float,
    *,
    train_flops: float | None = None,
    peak_tflops: float | None = None,
    top: int = 8,
) -> dict:
    """Figures of `steps` steps that took `wall_s` seconds and ran `ops` (name, seconds of its
    own work) during `intervals` (start_s, end_s). `train_flops`: the FLOPs of those steps'
    forward and backward passes; with it, the TFLOP/s the model's arithmetic reaches over the
    matmul and attention time (and its share of `peak_tflops`): what the steps would reach if
    everything else took no time."""
    seconds: dict[str, float] = {}
    for name, s in ops:
        seconds[name] = seconds.get(name, 0.0) + s
    total = sum(seconds.values()) or 1.0
    by_kind: dict[str, float] = {}
    for name, s in seconds.items():
        by_kind[kind_of(name)] = by_kind.get(kind_of(name), 0.0) + s
    ranked = sorted(seconds.items(), key=lambda kv: -kv[1])[:top]
    line = {
        "steps": steps,
        "ms_per_step": round(1e3 * wall_s / steps, 3),
        "ops_per_step": round(len(ops) / steps, 1),
        "busy_share": round(min(1.0, busy_time(intervals) / wall_s), 4),
        "kind_shares": {k: round(s / total, 4) for k, s in sorted(by_kind.items(), key=lambda kv: -kv[1])},
        "top_ops": [{"name": n[:120], "share": round(s / total, 4), "kind": kind_of(n)} for n, s in ranked],
    }  # fmt: skip
    matmul_s = by_kind.get("matmul", 0.0) + by_kind.get("attention", 0.0)
    if train_flops and matmul_s > 0:
        line["tflops_over_matmul_time"] = round(train_flops / matmul_s / 1e12, 3)
        if peak_tflops:
            line["matmul_time_efficiency"] = round(train_flops / matmul_s / 1e12 / peak_tflops, 4)
    return line


def device_ops(
    prof, device: torch.device
) -> tuple[list[tuple[str, float]], list[tuple[float, float]]]:
    """What the profiled device ran: (name, seconds) per operation and their (start_s, end_s).
    On CUDA the kernels, copies and fills (not the annotations over them). On the CPU the aten operations that are not views
    and spend at least half their time in their own work (a kernel: addmm, which fills its
    output with the bias through copy_ first, counts, and so does that copy_; linear, which only
    dispatches to addmm, does not), with that own ("self") time."""
    ops, intervals = [], []
    for e in prof.events():
        start, end = e.time_range.start / 1e6, e.time_range.end / 1e6
        if device.type == "cuda":
            # not the ranges record_function mirrors on the GPU's timeline (Optimizer.step#...,
            # CompiledFunction): they span kernels counted already, and torch's own device-time
            # sums leave them out the same way
            if e.device_type == DeviceType.CUDA and not e.is_user_annotation:
                ops.append((e.name, end - start))
                intervals.append((start, end))
            continue
        if e.device_type != DeviceType.CPU or not e.name.startswith("aten::") or e.name in VIEWS:
            continue
        own = e.self_cpu_time_total / 1e6
        if end > start and own >= 0.5 * (end - start):
            ops.append((e.name, own))
            intervals.append((start, end))
    return ops, intervals


def profile_steps(
    run_steps: Callable[[int], object],
    device: torch.device,
    steps: int,
    *,
    train_flops: float | None = None,
    peak_tflops: float | None = None,
    trace: Path | None = None,
) -> dict:
    """Profile `run_steps(steps)` (steps already warm: compiled, allocator grown) and summarise
    it; the Chrome trace gzipped to `trace` when given (open it in Perfetto)."""
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    # one step traced and dropped first: the profiler's own start-up cost lands there
    # (torch.profiler's documented warm-up), then the `steps` kept: the active cycle that
    # leaving the block ends (another prof.step() would start a new, empty one)
    with profile(activities=activities, schedule=schedule(wait=0, warmup=1, active=1)) as prof:
        run_steps(1)
        prof.step()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        run_steps(steps)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        wall_s = time.perf_counter() - start
    ops, intervals = device_ops(prof, device)
    line = summarise(
        ops, intervals, steps, wall_s, train_flops=train_flops, peak_tflops=peak_tflops
    )
    line["ops"] = "cuda kernels, copies and fills" if device.type == "cuda" else "cpu leaf aten ops"
    if trace is not None:
        raw = trace.with_suffix("")  # NAME.json from NAME.json.gz
        prof.export_chrome_trace(str(raw))
        with raw.open("rb") as src, gzip.open(trace, "wb") as dst:
            shutil.copyfileobj(src, dst)
        raw.unlink()
        line["trace"] = trace.name
    return line
