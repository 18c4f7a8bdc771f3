"""Counting the host's reads of tensor values (tests/test_host_reads.py): `HostReads` patches
the Tensor methods that hand a value to Python (`.item()`, `.tolist()`, `bool()`, `int()`,
`float()`, an index, `.cpu()`, `.numpy()`) and counts each call with its caller. On CUDA each
such read of a device tensor waits for every queued kernel (a host sync); on the CPU, where the
tests run, the count shows where one would be. Not counted: a torch optimizer's own step counter
(`state["step"]`), which torch keeps on the host for a non-fused optimizer (capturable=False)
and reads as a number by design, never a device value."""

from __future__ import annotations

import sys
from collections import Counter

import torch

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
                if not self._host_counter(tensor):
                    caller = sys._getframe(1).f_code
                    self.where[f"{_name} {caller.co_filename}:{caller.co_name}"] += 1
                return _read(tensor, *args, **kwargs)

            setattr(torch.Tensor, name, counted)
        return self

    def __exit__(self, *exc) -> None:
        for name, read in self._saved.items():
            setattr(torch.Tensor, name, read)
