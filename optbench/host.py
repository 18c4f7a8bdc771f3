"""This machine as a trial's process sees it: how many CPU cores it may use (`usable_cores`):
its affinity mask, capped by a cgroup CPU quota; the executors divide them among their workers,
and a trial's input pipeline sizes its workers from its share (data/batches.py). And the device
a trial trains on (`training_device`): every executor's workers, `--measure` and
`optbench models --measure` ask it. And whether a folder can be written here
(`check_writable_folder`: a study's output, `--out`, the storage's folder). And its CPU's model
name (`cpu_name`), which a trial's runtime info and the benches record, and what its float
arithmetic depends on beyond that name (`cpu_identity`: vendor, family, model, stepping and the
vector flags; `gpu_identity`: a GPU's name, compute capability and driver), which each result's
provenance records (provenance.py: `machine`). And a process's exit without the interpreter's
collections over every object torch and timm made (`freeze_at_exit`)."""

from __future__ import annotations

import atexit
import functools
import gc
import math
import os
import platform
from pathlib import Path

from optbench.errors import UsageError

CPUINFO = Path("/proc/cpuinfo")
NVIDIA_DRIVER = Path(
    "/proc/driver/nvidia/version"
)  # "NVRM version: ... Kernel Module  550.54.15 ..."
# the CPU flags that choose torch's and numpy's kernels (and with them the order of float sums)
MATH_FLAGS = ("avx", "avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni", "amx_tile")
CGROUP_CPU_MAX = Path("/sys/fs/cgroup/cpu.max")  # cgroup v2: "<quota> <period>" or "max <period>"
# What a Linux machine with a GPU driver has: NVIDIA's kernel module (also inside a container
# given GPUs), WSL2's GPU paravirtualisation, ROCm's compute interface (torch.cuda on AMD).
GPU_DRIVER_FILES = (
    Path("/proc/driver/nvidia"),
    Path("/dev/nvidiactl"),
    Path("/dev/dxg"),
    Path("/dev/kfd"),
)


def cgroup_cpu_limit(path: Path = CGROUP_CPU_MAX) -> int | None:
    """The cores a cgroup v2 CPU quota allows (rounded up), None where there is no quota."""
    try:
        quota, period = path.read_text().split()[:2]
        if quota == "max":
            return None
        return max(1, math.ceil(int(quota) / int(period)))
    except (OSError, ValueError, ZeroDivisionError):
        return None


def usable_cores() -> int:
    """Cores this process may use: its affinity mask (SLURM's cpu binding, taskset), capped by
    a cgroup CPU quota (containers, cgroup-limited SLURM steps)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    limit = cgroup_cpu_limit()
    return min(cores, limit) if limit else cores


def cuda_device_count() -> int:
    """The CUDA devices torch sees (torch.cuda.device_count()). On Linux without a GPU driver's
    files it is 0, answered without importing torch: a local study's driver asks it to size its
    pool, and importing torch costs each `optbench run` seconds of CPU (bench/RESULTS.md)."""
    if platform.system() == "Linux" and not any(f.exists() for f in GPU_DRIVER_FILES):
        return 0
    import torch

    return torch.cuda.device_count()


def training_device() -> str:
    """ "cuda" where torch sees a GPU (a pool worker sees the one it was given), else "cpu"."""
    import torch  # a trial's process has it loaded already; the driver never asks

    return "cuda" if torch.cuda.is_available() else "cpu"


@functools.cache  # registered once per process
def freeze_at_exit() -> None:
    """At this process's exit, after the exit hooks registered later (a tracker's flush among
    them), collect its garbage once and freeze what is left, which the interpreter's own exit
    collections then skip: with torch and timm loaded they traverse millions of objects,
    several times (a pool worker's exit 1.9 s -> 0.7 s on a 2-core VM, bench/RESULTS.md:
    process_costs), paid by every `optbench` command, pool worker and SLURM job step. Only the
    exit changes."""
    atexit.register(_collect_and_freeze)


def _collect_and_freeze() -> None:
    gc.collect()  # garbage cycles still end as at any exit: their finalizers run
    gc.freeze()


def check_writable_folder(path: Path, what: str) -> None:
    """`path` is a folder, or can be made one: no part of it is a file, and the deepest part
    that exists is a folder this process may write into, on a file system that stores files
    (not /proc or /sys, where even root's writes fail after the folders above were made)."""
    path = Path(path)
    existing = path
    while not (existing.exists() or existing.is_symlink()):
        if existing.parent == existing:
            break
        existing = existing.parent
    inside = "" if existing == path else f" (on the way to {path})"
    if not existing.is_dir():
        kind = "a file" if existing.exists() else "a broken symbolic link"
        raise UsageError(f"{what}: {existing} is {kind}, not a folder{inside}")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise UsageError(f"{what}: {existing} is not writable{inside}")
    if os.statvfs(existing).f_blocks == 0:  # proc, sysfs, devpts: no blocks to store a file in
        raise UsageError(f"{what}: {existing} is on a file system that stores no files{inside}")


def cpu_name() -> str:
    """The CPU's model name (/proc/cpuinfo), as results and benches record the machine."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _cpuinfo(path: Path = CPUINFO) -> dict[str, str]:
    """The first processor's fields of /proc/cpuinfo ({} where there is none: not Linux)."""
    fields: dict[str, str] = {}
    try:
        with open(path) as f:
            for line in f:
                if not line.strip():
                    break  # the first processor's block ends
                key, _, value = line.partition(":")
                fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    return fields


def cpu_identity(path: Path = CPUINFO) -> dict[str, str | None]:
    """`cpu`: "vendor family F model M stepping S" (/proc/cpuinfo; CPUs of one model name, a
    VM's "AMD EPYC" say, differ here), `cpu_flags`: those of MATH_FLAGS it has, in that order;
    None where /proc/cpuinfo does not say (not Linux)."""
    info = _cpuinfo(path)
    parts = [
        (label, info.get(key))
        for label, key in (("", "vendor_id"), ("family", "cpu family"), ("model", "model"),
                           ("stepping", "stepping"))
    ]  # fmt: skip
    cpu = " ".join(f"{label} {value}".strip() for label, value in parts if value) or None
    flags = set(info.get("flags", "").split())
    return {
        "cpu": cpu,
        "cpu_flags": " ".join(f for f in MATH_FLAGS if f in flags) if "flags" in info else None,
    }


def nvidia_driver(path: Path = NVIDIA_DRIVER) -> str | None:
    """The NVIDIA kernel driver's version (its /proc file, read without running nvidia-smi)."""
    try:
        words = path.read_text().split()
    except OSError:
        return None
    return next((w for w in words if w[:1].isdigit() and w.count(".") >= 1), None)


def gpu_identity(device) -> dict[str, str | None]:
    """`gpu`: the name and compute capability of CUDA device `device` ("NVIDIA H100 80GB HBM3,
    capability 9.0"), `gpu_driver`: the driver's version (None where unknown)."""
    import torch  # a CUDA trial's process has it loaded already

    major, minor = torch.cuda.get_device_capability(device)
    name = torch.cuda.get_device_name(device)
    return {"gpu": f"{name}, capability {major}.{minor}", "gpu_driver": nvidia_driver()}
