"""One trial on several processes (DDP): the process group, read from the environment.

A trial runs distributed when its environment says so, set by torchrun (RANK, WORLD_SIZE,
LOCAL_RANK, MASTER_ADDR, MASTER_PORT) or by an srun step of several tasks (SLURM_PROCID,
SLURM_STEP_NUM_TASKS, SLURM_LOCALID; the master address defaults to the job's first node and the
port to one derived from the job id). With a world of one nothing is initialized. An executor
that runs *independent* trials as the tasks of one multi-task srun step must pass
`run_trial(..., distributed=False)`, or every task would join one process group. The backend is
NCCL on CUDA and gloo on the CPU. The configured batch is the global batch: each process takes
batch / world. A variable that is not what it should be (WORLD_SIZE=abc, a RANK not below
WORLD_SIZE, MASTER_PORT=99999) is one line naming it, exit 2 (`env_int`).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass

import torch
import torch.distributed as dist

from optbench.errors import UsageError


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


def env_int(
    name: str,
    default: int,
    minimum: int = 0,
    maximum: int | None = None,
    env: Mapping[str, str] = os.environ,
) -> int:
    """The integer environment variable `name`, `default` when it is unset or empty. A value
    that is not an integer in [minimum, maximum] (WORLD_SIZE=abc) is a UsageError naming the
    variable: one line and exit 2 (bad input), not a ValueError traceback."""
    value = env.get(name) or None
    if value is None:
        return default
    try:
        number = int(value)
    except ValueError:
        number = None
    if number is None or number < minimum or (maximum is not None and number > maximum):
        upto = f" and at most {maximum}" if maximum is not None else ""
        raise UsageError(
            f"environment variable {name}={value[:40]!r}: must be an integer of at least "
            f"{minimum}{upto}"
        )
    return number


def context_from_env(env: Mapping[str, str] = os.environ) -> DistContext:
    """Rank, world size and local rank from torchrun's or SLURM's variables (torchrun wins);
    UsageError naming a variable that is not a rank or world size (env_int)."""
    if "WORLD_SIZE" in env and "RANK" in env:
        return _context(env, "RANK", "WORLD_SIZE", "LOCAL_RANK")
    if env_int("SLURM_STEP_NUM_TASKS", 1, minimum=1, env=env) > 1 and "SLURM_PROCID" in env:
        return _context(env, "SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_LOCALID")
    return DistContext()


def _context(env: Mapping[str, str], rank: str, world: str, local: str) -> DistContext:
    ctx = DistContext(
        env_int(rank, 0, env=env), env_int(world, 1, minimum=1, env=env), env_int(local, 0, env=env)
    )
    if ctx.rank >= ctx.world:
        raise UsageError(f"environment variable {rank}={ctx.rank}: not below {world}={ctx.world}")
    return ctx


def master_port(env: Mapping[str, str] = os.environ) -> int:
    """The process group's port: MASTER_PORT, else one derived from SLURM's job id."""
    default = 20000 + env_int("SLURM_JOB_ID", 0, env=env) % 20000
    return env_int("MASTER_PORT", default, minimum=1, maximum=65535, env=env)


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
    port = master_port()
    backend = "nccl" if device_type == "cuda" else "gloo"
    dist.init_process_group(
        backend, init_method=f"tcp://{addr}:{port}", rank=ctx.rank, world_size=ctx.world
    )


def destroy_process_group(ctx: DistContext) -> None:
    if ctx.enabled and dist.is_initialized():
        dist.destroy_process_group()
