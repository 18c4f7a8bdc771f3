"""One trial on several processes (DDP): the process group, read from the environment.

A trial runs distributed when its environment says so, set by torchrun (RANK, WORLD_SIZE,
LOCAL_RANK, MASTER_ADDR, MASTER_PORT) or by an srun step of several tasks (SLURM_PROCID,
SLURM_STEP_NUM_TASKS, SLURM_LOCALID; the master address defaults to the job's first node and the
port to one derived from the job id). With a world of one nothing is initialized. An executor
that runs *independent* trials as the tasks of one multi-task srun step must pass
`run_trial(..., distributed=False)`, or every task would join one process group. The backend is
NCCL on CUDA and gloo on the CPU. The configured batch is the global batch: each process takes
batch / world.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class DistContext:
    """This process's place in the trial's process group."""

    rank: int = 0
    world: int = 1
    local_rank: int = 0

    @property
    def enabled(self) -> bool:
        return self.world > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def sum_(self, t: torch.Tensor) -> torch.Tensor:
        """All-reduce (sum) `t` in place across the group; a no-op alone."""
        if self.enabled:
            dist.all_reduce(t, op=dist.ReduceOp.SUM)
        return t

    def max_(self, t: torch.Tensor) -> torch.Tensor:
        """All-reduce (max) `t` in place across the group; a no-op alone."""
        if self.enabled:
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return t


def _first_slurm_host(nodelist: str) -> str:
    out = subprocess.run(
        ["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True, check=True
    )
    return out.stdout.split()[0]


def context_from_env(env: Mapping[str, str] = os.environ) -> DistContext:
    """Rank, world size and local rank from torchrun's or SLURM's variables (torchrun wins)."""
    if "WORLD_SIZE" in env and "RANK" in env:
        return DistContext(int(env["RANK"]), int(env["WORLD_SIZE"]), int(env.get("LOCAL_RANK", 0)))
    if int(env.get("SLURM_STEP_NUM_TASKS", "1")) > 1 and "SLURM_PROCID" in env:
        return DistContext(
            int(env["SLURM_PROCID"]),
            int(env["SLURM_STEP_NUM_TASKS"]),
            int(env.get("SLURM_LOCALID", 0)),
        )
    return DistContext()


def process_device(ctx: DistContext, device: str, visible_gpus: int) -> torch.device:
    """This process's device: on CUDA under DDP, the GPU of its local rank among those it sees.
    A cluster may show each task every GPU of the node (pick GPU local_rank) or bind one GPU per
    task (`--gpus-per-task`, `--gpu-bind`: it sees one, GPU 0); modulo covers both."""
    dev = torch.device(device)
    if ctx.enabled and dev.type == "cuda" and visible_gpus > 0:
        return torch.device("cuda", ctx.local_rank % visible_gpus)
    return dev


def init_process_group(ctx: DistContext, device_type: str) -> None:
    """Join the group `ctx` describes (once per process); nothing for a world of one."""
    if not ctx.enabled or dist.is_initialized():
        return
    addr = os.environ.get("MASTER_ADDR")
    if not addr:
        nodes = os.environ.get("SLURM_JOB_NODELIST", "")
        single = os.environ.get("SLURM_JOB_NUM_NODES", "1") == "1"
        addr = "127.0.0.1" if single or not nodes else _first_slurm_host(nodes)
    port = os.environ.get("MASTER_PORT") or str(
        20000 + int(os.environ.get("SLURM_JOB_ID", "0")) % 20000
    )
    backend = "nccl" if device_type == "cuda" else "gloo"
    dist.init_process_group(
        backend, init_method=f"tcp://{addr}:{port}", rank=ctx.rank, world_size=ctx.world
    )


def destroy_process_group(ctx: DistContext) -> None:
    if ctx.enabled and dist.is_initialized():
        dist.destroy_process_group()
