"""Counting the host's reads of tensor values (tests/test_host_reads.py): `HostReads` patches
the Tensor methods that hand a value to Python (`.item()`, `.tolist()`, `bool()`, `int()`,
`float()`, an index, `.cpu()`, `.numpy()`) and counts each call with its caller. On CUDA each
such read of a device tensor waits for every queued kernel (a host sync); on the CPU, where the
tests run, the count shows where one would be. Not counted: a torch optimizer's own step counter
(`state["step"]`), which torch keeps on the host for a non-fused optimizer (capturable=False)
and reads as a number by design, never a device value.

`BlockingUploads` counts the other host sync a CPU run hides: code (not torch's own) making a
tensor from host data on a device with a blocking copy (`torch.tensor(data, device=d)`, or `.to(d)` of
a host tensor without non_blocking). On CUDA such a copy from pageable memory waits for the
queued kernels first; `data/tensor_ops.to_device` sends through pinned memory instead."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import torch
from torch.overrides import TorchFunctionMode

READS = ("item", "tolist", "__bool__", "__int__", "__float__", "__index__", "cpu", "numpy")


class HostReads:
    """`with HostReads(optimizer) as reads: ...`: `reads.count` of the reads made inside (and
    `reads.where`: caller file:line -> count). `optimizer`: whose step counters are the
    host's own (None: count every read)."""

    def __init__(self, optimizer: torch.optim.Optimizer | None = None):
        self.optimizer = optimizer
        self.where: Counter = Counter()
        self._saved: dict = {}

    @property
    def count(self) -> int:
        return sum(self.where.values())

    def _host_counter(self, tensor: torch.Tensor) -> bool:
        if not isinstance(self.optimizer, torch.optim.Optimizer):
            return False  # population_optim.py counts its steps in an int
        return any(tensor is s.get("step") for s in self.optimizer.state.values())

    def __enter__(self) -> HostReads:
        for name in READS:
            read = getattr(torch.Tensor, name)
            self._saved[name] = read

            def counted(tensor, *args, _read=read, _name=name, **kwargs):
                caller = sys._getframe(1).f_code
                # BlockingUploads, inside, hands the same call on (counted once, at its caller)
                if not self._host_counter(tensor) and caller.co_filename != __file__:
                    self.where[f"{_name} {caller.co_filename}:{caller.co_name}"] += 1
                return _read(tensor, *args, **kwargs)

            setattr(torch.Tensor, name, counted)
        return self

    def __exit__(self, *exc) -> None:
        for name, read in self._saved.items():
            setattr(torch.Tensor, name, read)


TORCH = str(Path(torch.__file__).parent)


class BlockingUploads(TorchFunctionMode):
    """`with BlockingUploads() as uploads: ...`: `uploads.count` of the blocking uploads made
    inside (`uploads.where`: caller file:function -> count). Not counted: torch's own calls
    (its optimizers' scalars on the CPU; on CUDA the trials use its fused optimizers)."""

    def __init__(self):
        super().__init__()
        self.where: Counter = Counter()

    @property
    def count(self) -> int:
        return sum(self.where.values())

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        caller = sys._getframe(1).f_code
        if not caller.co_filename.startswith(TORCH) and _blocking_upload(func, args, kwargs):
            self.where[f"{func.__name__} {caller.co_filename}:{caller.co_name}"] += 1
        return func(*args, **kwargs)


def _blocking_upload(func, args, kwargs) -> bool:
    """Whether the call copies host data to a device blockingly (on the CPU: would, on CUDA)."""
    if func in (torch.tensor, torch.as_tensor):
        return kwargs.get("device") is not None and not isinstance(args[0], torch.Tensor)
    if func is torch.Tensor.to:
        device, _, non_blocking, _ = torch._C._nn._parse_to(*args[1:], **kwargs)
        return device is not None and args[0].device.type == "cpu" and not non_blocking
    return False
