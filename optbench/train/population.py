"""Population training (`run_population`): K trials that differ only in (lr, wd) trained together
in one process, each recorded as its own trial (result.json and metrics.jsonl in its folder, as
`run_trial` writes them).

Such trials share the model, dataset, schedule, recipe and seed, hence the initial weights, the
data order and every augmentation draw; so each step draws its batch once (build.py's batches
and augmentation, seeded as epoch.py seeds a solo step) and runs the forward and backward of all
members as one batched computation: torch.func's `vmap` over `functional_call` of the one model,
with the members' weights and BatchNorm buffers stacked (`StackedWeights`), the input shared.
Each member then takes its own optimizer step with its own lr (its own schedule, optim.py) and
weight decay (population_optim.py), and its own EMA (ema.py over the stacked weights). At each
epoch end every member is measured as evaluation.py measures a solo trial: precise BatchNorm
statistics per member (precise_bn.py), then top-1/top-5 errors of its raw and EMA weights.

Randomness inside the model (drop path) is drawn once per step and shared by the members
(`vmap(randomness="same")`), which is the draw a solo trial makes at that step: drop path is
batched, not refused. Not batched, refused at validation (spec.py): `recipe.compile` and DDP
(SLURM tasks_per_node > 1).

What is not bit-identical to a solo trial: vmap runs the batched kernels (a convolution over K
members becomes one grouped convolution, matmuls become batched matmuls), whose reductions may
sum in another order, so a member's losses differ from its solo trial's in the last bits and
drift apart slowly (tests/test_population.py bounds it: <= 1e-5 relative over 50 steps, the
final error within one validation image). The weights digest therefore differs from the solo
run's; it is reproducible for the same population (result.json's `execution.population`).

Divergence: a member whose epoch loss is non-finite or above `recipe.diverge_loss` is recorded
"diverged" at that epoch, exactly as a solo trial, and frozen (its optimizer rows are no longer
updated) while the others go on; a member whose result.json already exists (for its config) is
frozen from the start and left untouched.

Checkpoint: one file, POPULATION_CHECKPOINT in the first member's folder, holding every member
(stacked weights, EMA, optimizer state, per-member position and history), written atomically at
each epoch end and on a stop signal (checkpoint.py), removed when the population ends. A stopped
population resumes all members from it exactly; a checkpoint of another population (e.g. after
executor.population changed) is not resumed from: the population starts again, the finished
members' results kept.
"""

from __future__ import annotations

import math
import time
import traceback
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn
from torch.func import functional_call, vmap

from optbench import safefs
from optbench.train.build import TrialParts, build_parts
from optbench.train.checkpoint import CheckpointError, load_checkpoint, restoring, save_checkpoint
from optbench.train.compute import Compute
from optbench.train.config import Execution, TrainConfig, TrialResult
from optbench.train.distributed import DistContext
from optbench.train.ema import WeightAverage
from optbench.train.epoch import InputClock
from optbench.train.evaluation import count_errors, error_percent, precise_bn_inputs
from optbench.train.loop import DISK_FAULTS, record_result, trial_result
from optbench.train.optim import LrSchedule, is_decayed, weight_decay_groups
from optbench.train.population_optim import PopulationOptimizer
from optbench.train.precise_bn import has_batchnorm, recompute_stacked_bn_stats
from optbench.train.results import ERROR_LOG, failure_line, finished_result, write_metrics
from optbench.train.seeding import derive_seed, seed_step
from optbench.train.signals import (
    StopAgreement,
    StopRequest,
    TrialInterrupted,
    pass_on,
    stop_signals_caught,
)
from optbench.train.state import TrialState
from optbench.train.tracking import TrialTracker

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


class _LrGroups:
    """What LrSchedule sets a member's lr in (an optimizer's param_groups, one group)."""

    def __init__(self, lr: float):
        self.param_groups = [{"lr": lr}]


@dataclass
class Population:
    """What a population trains with: member 0's parts (batches, model structure, augmentation,
    loss; build.py), the stacked weights, their optimizer, EMA and per-member schedules."""

    cfgs: list[TrainConfig]
    parts: TrialParts
    weights: StackedWeights
    optimizer: PopulationOptimizer
    schedules: list[LrSchedule]
    ema: WeightAverage | None
    active: list[bool]  # not diverged, not already done


def build_population(cfgs: list[TrainConfig], compute: Compute, pipeline: str) -> Population:
    cfg = cfgs[0]
    parts = build_parts(cfg, compute, pipeline)
    groups = weight_decay_groups(parts.model, cfg.wd, cfg.recipe.wd_exclude)
    params = dict(parts.model.named_parameters())
    names = [g["names"] for g in groups]
    decays = [is_decayed(g[0], params[g[0]], cfg.recipe.wd_exclude) for g in names]
    weights = StackedWeights(parts.model, names, len(cfgs))
    steps = len(parts.batches)
    optimizer = PopulationOptimizer(
        weights.flats, decays, [c.wd for c in cfgs], cfg.optimizer, cfg.recipe
    )
    schedules = [LrSchedule(_LrGroups(c.lr_used), c, steps) for c in cfgs]
    ema = WeightAverage(weights, cfg, steps) if cfg.recipe.ema else None
    return Population(cfgs, parts, weights, optimizer, schedules, ema, [True] * len(cfgs))


@dataclass(frozen=True)
class PopulationEpoch:
    """How a call of `train_population_epoch` ended (epoch.EpochRun, per member)."""

    complete: bool
    stop: int
    train_losses: list[float] | None = None  # per member (complete only)
    seconds: float = 0.0
    wait_s: float = 0.0  # of which waiting for input (epoch.InputClock; complete only)


def train_population_epoch(
    pop: Population, compute: Compute, states: list[TrialState], stop: StopRequest
) -> PopulationEpoch:
    """epoch.train_one_epoch for a population: every member steps through epoch
    `lead.epoch` from batch `lead.batch` (lead: the first active member's state)."""
    cfg, parts = pop.cfgs[0], pop.parts
    lead = states[pop.active.index(True)]
    epoch, steps_per_epoch = lead.epoch, len(parts.batches)
    parts.model.train()
    sums = [s.loss_sum for s in states]
    loss_sum = torch.tensor(sums, device=compute.device, dtype=torch.float64)
    agreement = StopAgreement(stop, compute.dist, compute.device)
    signum = 0
    t0 = time.perf_counter() - lead.epoch_s
    clock = InputClock(compute.device)
    batches = clock.batches(parts.batches.train(epoch, lead.batch))
    for b, (x, y) in enumerate(batches, start=lead.batch):
        clock.step_started()
        step = epoch * steps_per_epoch + b
        seed_step(derive_seed(cfg.seed, "step", step, compute.dist.rank), compute.device)
        x, y = parts.augment(x, y)
        lrs = [schedule.set_lr(step) for schedule in pop.schedules]
        with compute.autocast():
            tensors = pop.weights.tensors()
            losses = member_losses(parts.model, parts.criterion, tensors, compute.layout(x), y)
        pop.optimizer.zero_grad()
        losses.sum().backward()  # member k's gradient is d loss_k: the members do not mix
        pop.optimizer.step(lrs, pop.active)
        if pop.ema is not None:
            pop.ema.after_step(pop.weights, epoch, b, step)
        loss_sum += losses.detach()
        clock.step_ended()
        epoch_end = b + 1 == steps_per_epoch
        signum = agreement.after_step(step, epoch_end)
        if signum and not epoch_end:
            waited = clock.waited_s()
            for k, s in enumerate(states):
                if pop.active[k]:
                    s.batch, s.loss_sum = b + 1, loss_sum[k].item()
                    s.epoch_s = time.perf_counter() - t0
                    s.epoch_wait_s += waited
            return PopulationEpoch(complete=False, stop=signum)
    losses_out = [v / steps_per_epoch for v in loss_sum.tolist()]
    seconds = time.perf_counter() - t0
    return PopulationEpoch(True, signum, losses_out, seconds, lead.epoch_wait_s + clock.waited_s())


def evaluate_population(pop: Population, compute: Compute, epoch: int) -> list[dict]:
    """evaluation.evaluate_epoch for each member: its metrics line's errors."""
    cfg, parts, model = pop.cfgs[0], pop.parts, pop.parts.model
    stacks = {"raw": pop.weights}
    if pop.ema is not None:
        stacks["ema"] = pop.ema.module
    if cfg.recipe.precise_bn_images and has_batchnorm(model):
        for stack in stacks.values():
            tensors = stack.tensors()
            inputs = precise_bn_inputs(parts.batches, parts.augment, cfg, compute, epoch)
            forward = lambda x, t=tensors: member_logits(model, t, x)  # noqa: E731
            recompute_stacked_bn_stats(model, tensors, inputs, forward)
    model.eval()
    errors = {}
    for kind, stack in stacks.items():
        with torch.no_grad():
            tensors = stack.tensors()
        forward = lambda x, t=tensors: member_logits(model, t, x)  # noqa: E731
        counts = count_errors(forward, parts.batches, parts.augment, compute)
        errors[kind] = [error_percent(c) for c in counts]
    lines = []
    for k in range(len(pop.cfgs)):
        line = {}
        for kind in stacks:
            line[f"{kind}_top1"], line[f"{kind}_top5"] = errors[kind][k]
        line["val_error"] = line[cfg.recipe.report.split("_")[0] + "_top1"]
        lines.append(line)
    return lines


# --- checkpoint ---------------------------------------------------------------------------------


def _checkpoint_config(cfgs: list[TrainConfig]) -> dict:
    return {"population": [c.model_dump(mode="json") for c in cfgs]}


def save_population(
    path: Path, pop: Population, states: list[TrialState], root: Path | None = None
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


def restore_population(path: Path, pop: Population, root: Path | None = None) -> list[TrialState]:
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


def _train(
    pop: Population,
    out_dirs: list[Path],
    compute: Compute,
    stop: StopRequest,
    ended: Callable[[int, TrialResult], None],
    root: Path | None,
) -> None:
    """Train the active members to the last epoch, each to its divergence at the latest; call
    `ended(k, result)` when member k ends. An agreed stop checkpoints and raises."""
    cfg, ckpt = pop.cfgs[0], out_dirs[0] / POPULATION_CHECKPOINT
    states = restore_population(ckpt, pop, root)
    for k, out_dir in enumerate(out_dirs):
        if pop.active[k]:
            write_metrics(out_dir, states[k].history, root)
    images_per_epoch = len(pop.parts.batches) * cfg.batch_size
    while any(pop.active) and states[pop.active.index(True)].epoch < cfg.epochs:
        epoch = states[pop.active.index(True)].epoch
        ran = train_population_epoch(pop, compute, states, stop)
        if not ran.complete:
            save_population(ckpt, pop, states, root)
            raise TrialInterrupted(ran.stop)
        members = [k for k, on in enumerate(pop.active) if on]
        losses = {k: ran.train_losses[k] for k in members}
        diverged = {
            k for k, v in losses.items() if not math.isfinite(v) or v > cfg.recipe.diverge_loss
        }
        errors = evaluate_population(pop, compute, epoch) if diverged != set(members) else []
        for k in members:
            line = {
                "epoch": epoch + 1,
                "lr": pop.schedules[k].optimizer.param_groups[0]["lr"],
                "train_loss": losses[k] if math.isfinite(losses[k]) else None,
                "images_per_s": round(images_per_epoch / ran.seconds, 2),
                "epoch_s": round(ran.seconds, 4),
                "input_wait": round(ran.wait_s / ran.seconds, 4) if ran.seconds else None,
            }
            if k not in diverged:
                line.update(errors[k])
            states[k] = states[k].after_epoch(line, ran.seconds, images_per_epoch, ran.wait_s)
            write_metrics(out_dirs[k], states[k].history, root)
            if k in diverged:
                pop.active[k] = False  # frozen: its rows are no longer updated
                ended(k, _result(pop, k, states[k], epoch + 1))
        if not any(pop.active):
            break
        save_population(ckpt, pop, states, root)
        if ran.stop and epoch + 1 < cfg.epochs:
            raise TrialInterrupted(ran.stop)
    for k, on in enumerate(pop.active):
        if on:
            ended(k, _result(pop, k, states[k], None))


def _result(pop: Population, k: int, state: TrialState, diverged_epoch: int | None) -> TrialResult:
    return trial_result(
        pop.cfgs[k], state, diverged_epoch, pop.weights.member_state(k), DistContext()
    )


def run_population(
    cfgs: list[TrainConfig],
    out_dirs: list[Path],
    device: str = "cpu",
    *,
    handle_signals: bool = True,
    keep_checkpoint: bool = False,
    execution: Execution = Execution(),
    root: Path | None = None,
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
    folder) is followed (safefs): a linked member folder raises UnsafePath before any write."""
    if len({c.population_key() for c in cfgs}) != 1:
        raise ValueError("a population's members must differ in lr and wd only")
    out_dirs = [Path(d) for d in out_dirs]
    for d in out_dirs:
        safefs.make_dirs(d, root or d)
    results: list[TrialResult | None] = [
        finished_result(c, d, root) for c, d in zip(cfgs, out_dirs, strict=True)
    ]
    if all(r is not None for r in results):
        return results
    start = time.perf_counter()
    compute = Compute.for_trial(cfgs[0].recipe, device, DistContext(), None)
    execution = execution.resolved(compute.device.type).model_copy(update={"population": len(cfgs)})
    stop = StopRequest()
    replaced: dict = {}
    done = [r is not None for r in results]
    trackers = [  # each member's own run (train/tracking.py), the done ones none
        TrialTracker(c, d, root, None if r else execution.tracking)
        for c, d, r in zip(cfgs, out_dirs, done, strict=True)
    ]

    def ended(k: int, result: TrialResult) -> None:
        result.execution = execution
        trackers[k].end(result, wait=False)  # the other members train on meanwhile
        record_result(out_dirs[k], result, start, compute.device, keep_checkpoint=True, root=root)
        results[k] = result

    keep = keep_checkpoint
    try:
        with stop_signals_caught(stop, handle_signals) as replaced, warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=_NO_BATCHING_RULE)
            pop = build_population(cfgs, compute, execution.pipeline)
            pop.active = [not d for d in done]
            _train(pop, out_dirs, compute, stop, ended, root)
    except TrialInterrupted as stopped:
        for tracker in trackers:
            tracker.end(None)
        pass_on(stopped.signum, replaced)
        raise
    except Exception as err:  # noqa: BLE001 - any crash is every unfinished member's failure
        if isinstance(err, OSError) and err.errno in DISK_FAULTS:
            raise
        if isinstance(err, safefs.UnsafePath):
            raise  # a link in a member's folder: no result can be written there (the driver says so)
        keep = keep or isinstance(err, CheckpointError)
        for k, (cfg, out_dir) in enumerate(zip(cfgs, out_dirs, strict=True)):
            if results[k] is None:
                safefs.write_text(out_dir / ERROR_LOG, root or out_dir, traceback.format_exc())
                failed = TrialResult(
                    status="failed",
                    epochs=cfg.epochs,
                    config=cfg,
                    message=failure_line(err),
                )
                ended(k, failed)
    if not keep:
        safefs.remove(out_dirs[0] / POPULATION_CHECKPOINT, root or out_dirs[0])
    for tracker in trackers:
        tracker.wait()
    return results
