"""Population training (`run_population`): K trials that differ only in (lr, wd) trained together
in one process (`PopulationStepper`, a Stepper of stepper.py driven by loop.py as a solo trial
is), each recorded as its own trial (result.json, metrics.jsonl and epoch sinks, TensorBoard
events included, in its folder, as `run_trial` writes them).

Such trials share the model, dataset, schedule, recipe and seed, hence the initial weights, the
data order and every augmentation draw; so each step draws its batch once (parts.py's batches
and augmentation, seeded as epoch.py seeds a solo step) and runs the forward and backward of all
members as one batched computation: torch.func's `vmap` over `functional_call` of the one model,
with the members' weights and BatchNorm buffers stacked (`StackedWeights`), the input shared.
Each member then takes its own optimizer step with its own lr (its own schedule, optim.py) and
weight decay (population_optim.py), and its own EMA (ema.py over the stacked weights). At each
epoch end every member is measured by evaluation.py, as a solo trial is: precise BatchNorm
statistics per member (precise_bn.py), then top-1/top-5 errors of its raw and EMA weights.

Randomness inside the model (drop path) is drawn once per step and shared by the members
(`vmap(randomness="same")`), which is the draw a solo trial makes at that step: drop path is
batched, not refused. Not batched, refused at validation (spec/schema.py): `recipe.compile`, DDP
(SLURM tasks_per_node > 1) and an optimizer population_optim.py does not implement.

What is not bit-identical to a solo trial: vmap runs the batched kernels (a convolution over K
members becomes one grouped convolution, matmuls become batched matmuls), whose reductions may
sum in another order, so a member's losses differ from its solo trial's in the last bits and
drift apart as training amplifies that, by how much depending on the CPU's kernels: in float64
they stay equal to rounding, in float32 the final errors agree in distribution, within seed
noise (tests/test_population.py, docs/population.md). The weights digest therefore differs from
the solo run's; it is reproducible for the same population (result.json's `execution.population`).

Divergence (loop.py): a member whose epoch loss is non-finite or above `recipe.diverge_loss`
is recorded "diverged" at that epoch, exactly as a solo trial, and frozen (its optimizer rows
are no longer updated) while the others go on; a member whose result.json already exists (for
its config) is frozen from the start and left untouched.

Checkpoint: one file, POPULATION_CHECKPOINT in the first member's folder, holding every member
(stacked weights, EMA, optimizer state, per-member position and history), written atomically at
each epoch end and on a stop signal (checkpoint.py), removed when the population ends. A stopped
population resumes all members from it exactly; a checkpoint of another population (e.g. after
executor.population changed) is not resumed from: the population starts again, the finished
members' results kept.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn
from torch.func import functional_call, vmap

from optbench import safefs
from optbench.train.checkpoint import load_checkpoint, restoring, save_checkpoint
from optbench.train.compute import Compute
from optbench.train.distributed import DistContext
from optbench.train.ema import WeightAverage
from optbench.train.loop import (
    CheckpointCadence,
    Members,
    run_guarded,
    start_program,
    train_members,
)
from optbench.train.optim import LrSchedule, is_decayed, weight_decay_groups
from optbench.train.parts import build_parts
from optbench.train.population_optim import PopulationOptimizer
from optbench.train.precise_bn import recompute_stacked_bn_stats
from optbench.train.signals import StopRequest
from optbench.train.state import TrialState
from optbench.trial.config import Execution, TrainConfig, TrialResult
from optbench.trial.results import finished_result
from optbench.trial.timing import PartClock
from optbench.user_code import import_modules

POPULATION_CHECKPOINT = "population.pt"
# vmap runs an op without a batching rule (e.g. CPU flash attention) member by member; it warns
# each time. The results are the same; bench/population.py measures the speed.
_NO_BATCHING_RULE = "There is a performance drop because we have not yet implemented"


class StackedWeights(nn.Module):
    """The weights of K members of one model: the parameters of each weight-decay group as one
    (K, N) parameter (row k: member k's, flattened), the state dict's other tensors (BatchNorm
    buffers) stacked (K, ...). All members start from `model`'s weights."""

    def __init__(self, model: nn.Module, groups: list[list[str]], members: int):
        super().__init__()
        params = dict(model.named_parameters())
        self.groups = groups
        self.shapes = {n: tuple(params[n].shape) for names in groups for n in names}
        for i, names in enumerate(groups):
            flat = torch.cat([params[n].detach().reshape(-1) for n in names])
            self.register_parameter(f"flat{i}", nn.Parameter(flat.expand(members, -1).clone()))
        grouped = set(self.shapes)
        state = model.state_dict()
        self.state_keys = list(state)  # the solo model's state dict keys, in its order
        self.buffer_names = [n for n in state if n not in grouped]
        for i, name in enumerate(self.buffer_names):
            t = state[name].detach()
            self.register_buffer(f"buffer{i}", t.expand(members, *t.shape).clone())

    @property
    def flats(self) -> list[torch.Tensor]:
        return [getattr(self, f"flat{i}") for i in range(len(self.groups))]

    def tensors(self) -> dict[str, torch.Tensor]:
        """Every stacked tensor under the model's own names, for `functional_call` under vmap:
        the parameters (reshaped copies of the flat rows, through which gradients reach the
        flats) and the buffers themselves (so BatchNorm updates them in place)."""
        out = {}
        for names, flat in zip(self.groups, self.flats, strict=True):
            sizes = [math.prod(self.shapes[n]) for n in names]
            for n, piece in zip(names, flat.split(sizes, dim=1), strict=True):
                out[n] = piece.reshape(flat.shape[0], *self.shapes[n])
        for i, name in enumerate(self.buffer_names):
            out[name] = getattr(self, f"buffer{i}")
        return out

    @torch.no_grad()
    def member_state(self, k: int) -> dict[str, torch.Tensor]:
        """Member k's weights as the solo model's state dict (for its digest)."""
        tensors = self.tensors()
        return {n: tensors[n][k].clone() for n in self.state_keys}


def member_logits(model: nn.Module, tensors: dict, x: torch.Tensor) -> torch.Tensor:
    """(K, batch, classes): `model` run once, batched over the members' `tensors`, on the
    shared input `x`. Random draws inside (drop path) are shared: the solo trial's draw."""
    return vmap(lambda t: functional_call(model, t, (x,)), randomness="same")(tensors)


def member_losses(
    model: nn.Module, criterion: nn.Module, tensors: dict, x: torch.Tensor, y: torch.Tensor
) -> torch.Tensor:
    """(K,): each member's training loss on the shared batch, in one batched forward."""
    loss = lambda t: criterion(functional_call(model, t, (x,)), y)  # noqa: E731
    return vmap(loss, randomness="same")(tensors)


class PopulationStepper:
    """K members in one batched program (stepper.Stepper): member 0's parts (batches, model
    structure, augmentation, loss; parts.py), the stacked weights, their optimizer, EMA and
    per-member schedules; `active` as given (False: done before the program starts)."""

    def __init__(
        self,
        cfgs: list[TrainConfig],
        compute: Compute,
        pipeline: str,
        active: list[bool],
        checkpoint: Path,
        root: Path | None = None,
        clock: PartClock | None = None,
    ):
        cfg = cfgs[0]
        self.cfgs, self.active, self.checkpoint, self.root = cfgs, list(active), checkpoint, root
        self.parts = parts = build_parts(cfg, compute, pipeline, clock)
        groups = weight_decay_groups(parts.model, cfg.wd, cfg.recipe.wd_exclude)
        params = dict(parts.model.named_parameters())
        names = [g["names"] for g in groups]
        decays = [is_decayed(g[0], params[g[0]], cfg.recipe.wd_exclude) for g in names]
        self.weights = StackedWeights(parts.model, names, len(cfgs))
        steps = len(parts.batches)
        self.optimizer = PopulationOptimizer(
            self.weights.flats,
            decays,
            [c.wd for c in cfgs],
            [c.lr_used for c in cfgs],
            cfg.optimizer,
            cfg.recipe,
        )
        self.schedules = [LrSchedule(c, steps) for c in cfgs]
        self.ema = WeightAverage(self.weights, cfg, steps) if cfg.recipe.ema else None

    def begin(self, resume: bool) -> list[TrialState]:
        if not resume:
            return [TrialState() for _ in self.cfgs]
        return restore_population(self.checkpoint, self, self.root)

    def train(self) -> None:
        self.parts.model.train()

    def losses(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        tensors = self.weights.tensors()
        return member_losses(self.parts.model, self.parts.criterion, tensors, x, y)

    def update(self, lrs: list[float]) -> None:
        self.optimizer.step(lrs, self.active)

    def _stack(self, kind: str) -> StackedWeights:
        return self.weights if kind == "raw" else self.ema.module

    def recompute_bn(self, kind: str, inputs) -> None:
        model, tensors = self.parts.model, self._stack(kind).tensors()
        forward = lambda x: member_logits(model, tensors, x)  # noqa: E731
        recompute_stacked_bn_stats(model, tensors, inputs, forward)

    def logits_of(self, kind: str) -> Callable[[torch.Tensor], torch.Tensor]:
        model = self.parts.model
        model.eval()
        with torch.no_grad():
            tensors = self._stack(kind).tensors()
        return lambda x: member_logits(model, tensors, x)

    def save(self, states: list[TrialState]) -> None:
        save_population(self.checkpoint, self, states, self.root)

    def member_weights(self, k: int) -> dict[str, torch.Tensor]:
        return self.weights.member_state(k)


# --- checkpoint ---------------------------------------------------------------------------------


def _checkpoint_config(cfgs: list[TrainConfig]) -> dict:
    return {"population": [c.model_dump(mode="json") for c in cfgs]}


def save_population(
    path: Path, pop: PopulationStepper, states: list[TrialState], root: Path | None = None
) -> None:
    save_checkpoint(
        path,
        {
            "config": _checkpoint_config(pop.cfgs),
            "model": pop.weights.state_dict(),
            "ema": pop.ema.state_dict() if pop.ema is not None else None,
            "optimizer": pop.optimizer.state_dict(),
            "progress": {"members": [s.__dict__ for s in states], "active": list(pop.active)},
        },
        root,
    )


def restore_population(
    path: Path, pop: PopulationStepper, root: Path | None = None
) -> list[TrialState]:
    """Load the population checkpoint at `path` into `pop` and return the members' states;
    fresh states when there is none or it is another population's."""
    saved = load_checkpoint(path, root=root)
    fresh = [TrialState() for _ in pop.cfgs]
    if saved is None or saved["config"] != _checkpoint_config(pop.cfgs):
        return fresh
    with restoring(path):
        pop.weights.load_state_dict(saved["model"])
        pop.optimizer.load_state_dict(saved["optimizer"])
        if pop.ema is not None:
            pop.ema.load_state_dict(saved["ema"])
        progress = saved["progress"]
        pop.active = [a and on for a, on in zip(pop.active, progress["active"], strict=True)]
        return [TrialState(**s) for s in progress["members"]]


# --- the run ------------------------------------------------------------------------------------


def run_population(
    cfgs: list[TrainConfig],
    out_dirs: list[Path],
    device: str = "cpu",
    *,
    handle_signals: bool = True,
    keep_checkpoint: bool = False,
    execution: Execution = Execution(),
    root: Path | None = None,
    attempts: list[int | None] | None = None,
) -> list[TrialResult]:
    """Train the members `cfgs` (configs equal but for lr and wd) together, member k into
    `out_dirs[k]`, resuming from the population checkpoint if there is one, and write each
    member's result.json as it ends; return the results. As `run_trial(..., resume=True)`: a
    member whose folder holds its result already is left as it is (another config's result
    raises ResumeMismatch); a crash is every unfinished member's "failed" result (traceback in
    its error.log); it raises only for DISK_FAULTS; on SIGTERM / SIGUSR2 it checkpoints, then
    passes the signal on. One process, no DDP. `execution` (its pipeline) is resolved
    for the device as `run_trial` resolves it; each result.json records it with `population`
    the number of members. No link below `root` (the study folder; default each member's own
    folder) is followed (safefs): a linked member folder raises UnsafePath before any write.
    `attempts[k]`: the study's attempt member k runs, recorded in its result.json."""
    if len({c.population_key() for c in cfgs}) != 1:
        raise ValueError("a population's members must differ in lr and wd only")
    import_modules(cfgs[0].imports)  # the study's own models and optimizers (user_code.py)
    out_dirs = [Path(d) for d in out_dirs]
    for d in out_dirs:
        safefs.make_dirs(d, root or d)
    results: list[TrialResult | None] = [
        finished_result(c, d, root) for c, d in zip(cfgs, out_dirs, strict=True)
    ]
    if all(r is not None for r in results):
        return results
    start, compute, execution = start_program(
        cfgs[0].recipe, device, DistContext(), None, root or out_dirs[0], execution, len(cfgs)
    )
    members = Members(
        cfgs, out_dirs, root, compute.device, execution,
        start=start, results=results, attempts=attempts,
    )  # fmt: skip
    checkpoint = out_dirs[0] / POPULATION_CHECKPOINT
    stop = StopRequest()

    def train() -> None:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=_NO_BATCHING_RULE)
            active = [r is None for r in results]
            with members.clock.part("model"):
                pop = PopulationStepper(
                    cfgs, compute, execution.pipeline, active, checkpoint, root, members.clock
                )
            cadence = CheckpointCadence(every_epoch=keep_checkpoint)
            train_members(pop, members, compute, stop, resume=True, cadence=cadence)

    return run_guarded(
        members,
        train,
        stop,
        handle_signals=handle_signals,
        checkpoint=checkpoint,
        keep_checkpoint=keep_checkpoint,
    )
