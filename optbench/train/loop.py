"""The one training loop of a solo trial (run_trial.py) and a population (population.py): a
Stepper's K >= 1 members (stepper.py) trained epoch by epoch (`train_members`: epoch.py's
`run_epoch`, the divergence rule, evaluation.py's `evaluate_members`, checkpoints), each member
recorded as a trial (`Members`: its metrics.jsonl, its epoch sinks, trackers/sinks.py, and its
result.json), under one guarded crash path (`run_guarded`).

Divergence: a member whose epoch loss is non-finite or above `recipe.diverge_loss` is recorded
"diverged" at that epoch, not evaluated, and frozen (no longer updated) while the others go on;
the program ends when no member is left. A crash is every unfinished member's "failed" result,
its traceback in error.log; a stop signal checkpoints every member and is passed on
(signals.py). Under DDP (solo only) every rank runs the loop and only rank 0 writes files.
"""

from __future__ import annotations

import hashlib
import math
import time
import traceback
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

from optbench import safefs
from optbench.data.input_plan import resolve_execution
from optbench.errors import DISK_FAULTS
from optbench.provenance import provenance
from optbench.spec.recipe import Recipe
from optbench.trackers.sinks import epoch_sinks
from optbench.trackers.trial_run import TrialTracker
from optbench.train.checkpoint import CheckpointError
from optbench.train.compute import Compute, runtime_info
from optbench.train.distributed import DistContext
from optbench.train.epoch import EpochRun, run_epoch
from optbench.train.evaluation import evaluate_members
from optbench.train.signals import StopRequest, TrialInterrupted, pass_on, stop_signals_caught
from optbench.train.state import TrialState
from optbench.train.stepper import Stepper
from optbench.trial.config import Execution, Provenance, TrainConfig, TrialResult
from optbench.trial.results import (
    ERROR_LOG,
    failure_line,
    write_metrics,
    write_result,
)
from optbench.trial.timing import CHECKPOINT_SHARE, PartClock


def weights_digest(model: nn.Module | dict[str, torch.Tensor]) -> str:
    """sha256 of the model's state (names, dtypes, shapes and bytes), in key order; `model` may
    be the state dict itself."""
    state = model.state_dict() if isinstance(model, nn.Module) else model
    h = hashlib.sha256()
    for name, tensor in sorted(state.items()):
        t = tensor.detach().cpu().contiguous()
        h.update(f"{name}:{t.dtype}:{tuple(t.shape)}".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def trial_result(
    cfg: TrainConfig,
    state: TrialState,
    diverged_epoch: int | None,
    model: nn.Module | dict[str, torch.Tensor],
    dist: DistContext,
) -> TrialResult:
    """The result of a trial that ran to its end or diverged at `diverged_epoch`: its errors
    from the metrics history, its speed, and the digest of its final weights (`model`, or its
    state dict)."""
    common = dict(
        epochs=cfg.epochs,
        epochs_run=state.epoch,
        images_per_s=state.images / state.train_s if state.train_s else None,
        input_wait=min(1.0, state.wait_s / state.train_s) if state.train_s else None,
        digest=weights_digest(model),
        config=cfg,
        reported=cfg.recipe.report,
        world_size=dist.world,
    )
    if diverged_epoch is not None:
        return TrialResult(status="diverged", diverged_epoch=diverged_epoch, **common)
    hist = state.history
    errors = {}
    for kind in ("raw", "ema"):
        top1 = [h[f"{kind}_top1"] for h in hist if f"{kind}_top1" in h]
        if top1:
            errors[f"{kind}_final_error"] = top1[-1]
            errors[f"{kind}_best_error"] = min(top1)
            errors[f"{kind}_final_top5_error"] = hist[-1][f"{kind}_top5"]
    kind = cfg.recipe.reported_weights
    final, best = errors[f"{kind}_final_error"], errors[f"{kind}_best_error"]
    return TrialResult(
        status="finished",
        final_error=final if cfg.recipe.reported_epoch == "final" else best,
        best_error=best,
        **errors,
        **common,
    )


def stamp_result(result: TrialResult, start: float, device: torch.device) -> None:
    """Add the wall time since `start` and what the digest depends on (runtime_info)."""
    result.wall_s = round(time.perf_counter() - start, 3)
    for name, value in runtime_info(device).items():
        setattr(result, name, value)
    result.provenance = Provenance(**provenance(result.config.imports, device))


def start_program(
    recipe: Recipe,
    device: str,
    dist: DistContext,
    workers: int | None,
    data_cache: Path,
    execution: Execution,
    population: int,
) -> tuple[float, Compute, Execution]:
    """What a solo trial (run_trial.py) and a population (population.py) do first, alike: the
    moment their wall_s counts from, where this process computes (Compute.for_trial), and the
    job's execution settings resolved for that device, `population` the number of trials the
    program trains (result.json records both)."""
    start = time.perf_counter()
    compute = Compute.for_trial(recipe, device, dist, workers, data_cache=data_cache)
    execution = resolve_execution(execution, compute.device.type, recipe)
    return start, compute, execution.model_copy(update={"population": population})


class Members:
    """Where the K >= 1 trials of one program are recorded: member k's metrics.jsonl, epoch
    sinks and result.json in `out_dirs[k]`, on the main process only (DDP); no link below
    `root` (default: each member's own folder) is followed. `results[k]` is member k's result
    once it has one (given: a member done before the program starts, which gets no sinks).
    Its wall_s counts from `start` (start_program's); each result records `attempts[k]`, the
    study's attempt member k runs (default: none)."""

    def __init__(
        self,
        cfgs: list[TrainConfig],
        out_dirs: list[Path],
        root: Path | None,
        device: torch.device,
        execution: Execution,
        *,
        start: float,
        is_main: bool = True,
        on_epoch: Callable[[dict], None] | None = None,
        results: list[TrialResult | None] | None = None,
        attempts: list[int | None] | None = None,
    ):
        self.cfgs, self.out_dirs, self.device = cfgs, out_dirs, device
        self.attempts = list(attempts) if attempts is not None else [None] * len(cfgs)
        self.execution, self.is_main = execution, is_main
        self.roots = [Path(root or d) for d in out_dirs]
        self.results = list(results) if results is not None else [None] * len(cfgs)
        self.start = start  # for wall_s
        self.clock = PartClock()  # where the wall_s goes (trial/timing.py)
        self.sinks = [
            epoch_sinks(c, d, r, on_epoch) if is_main and done is None else None
            for c, d, r, done in zip(cfgs, out_dirs, self.roots, self.results, strict=True)
        ]
        # each unfinished member's experiment-tracker run (trackers/trial_run.py; none without
        # tracking)
        tracking = execution.tracking if is_main else None
        self.trackers = [
            TrialTracker(c, d, r, tracking if done is None else None)
            for c, d, r, done in zip(cfgs, out_dirs, self.roots, self.results, strict=True)
        ]
        self.clock.seconds["setup"] = time.perf_counter() - start  # since start_program

    def metrics(self, k: int, history: list[dict]) -> None:
        """Member k's metrics.jsonl: exactly its completed epochs' lines."""
        if self.is_main:
            write_metrics(self.out_dirs[k], history, self.roots[k])

    def epoch_ended(self, k: int, history: list[dict]) -> None:
        """Member k's epoch ended with `history[-1]`: to metrics.jsonl, then its sinks."""
        if self.is_main:
            self.metrics(k, history)
            self.sinks[k].write(history[-1])
            self.trackers[k].epoch_ended()

    def ended(self, k: int, result: TrialResult) -> None:
        """Member k's result, stamped and written as its result.json (main process)."""
        result.execution, result.attempt = self.execution, self.attempts[k]
        result.timing = self.clock.timing()
        stamp_result(result, self.start, self.device)
        self.trackers[k].end(result, wait=False)  # the other members train on meanwhile
        if self.is_main:
            write_result(self.out_dirs[k], result, self.roots[k])
        self.results[k] = result

    def failed(self, err: Exception, trace: str) -> None:
        """Every member without a result fails for `err` (its traceback in error.log)."""
        for k, cfg in enumerate(self.cfgs):
            if self.results[k] is None:
                if self.is_main:
                    safefs.write_text(self.out_dirs[k] / ERROR_LOG, self.roots[k], trace)
                failed = TrialResult(
                    status="failed", epochs=cfg.epochs, config=cfg, message=failure_line(err)
                )
                self.ended(k, failed)

    def close(self) -> None:
        for tracker in self.trackers:  # a member stopped before its end resumes its run later
            tracker.end(None, wait=False)
        for tracker in self.trackers:
            tracker.wait()
        for sinks in self.sinks:
            if sinks is not None:
                sinks.close()


class CheckpointCadence:
    """Which epoch ends write a checkpoint: the first, then each once the seconds since the last
    one reach its write time / CHECKPOINT_SHARE (trial/timing.py), so checkpoints cost at most
    that share of the time they protect; never the last epoch's (the result follows: nothing is
    left to resume), unless `every_epoch` (keep_checkpoint: the caller reads it). A stop signal
    still writes one at its exact step (signals.py); any checkpoint resumes to the same result."""

    def __init__(self, every_epoch: bool = False):
        self.every_epoch = every_epoch
        self.write_s: float | None = None  # the last write's time; None: none written yet
        self.since = time.perf_counter()  # when the last write ended

    def due(self, last_epoch: bool) -> bool:
        if self.every_epoch:
            return True
        if last_epoch:
            return False
        return (
            self.write_s is None
            or (time.perf_counter() - self.since) * CHECKPOINT_SHARE >= self.write_s
        )

    def written(self, seconds: float) -> None:
        self.write_s, self.since = seconds, time.perf_counter()


def diverges(loss: float, recipe: Recipe) -> bool:
    return not math.isfinite(loss) or loss > recipe.diverge_loss


def metrics_line(epoch: int, lr: float, loss: float, ran: EpochRun, images: int) -> dict:
    """An epoch's metrics line before evaluation (`images`: the epoch's, over every rank)."""
    return {
        "epoch": epoch + 1,
        "lr": lr,
        "train_loss": loss if math.isfinite(loss) else None,
        "images_per_s": round(images / ran.seconds, 2),
        "epoch_s": round(ran.seconds, 4),
        "input_wait": round(ran.wait_s / ran.seconds, 4) if ran.seconds else None,
    }


def train_members(
    stepper: Stepper,
    members: Members,
    compute: Compute,
    stop: StopRequest,
    resume: bool,
    cadence: CheckpointCadence | None = None,
) -> None:
    """Train the active members from the start (or the checkpoint's position, with `resume`) to
    the last epoch, each to its divergence at the latest; each member's result is recorded as
    it ends. Checkpoints at the epoch ends `cadence` says (default: CheckpointCadence()). An
    agreed stop checkpoints and raises TrialInterrupted."""
    cfg, clock = stepper.cfgs[0], members.clock
    cadence = cadence or CheckpointCadence()
    with clock.part("model"):  # a checkpoint's weights restored
        states = stepper.begin(resume)
    with clock.part("writes"):
        for k, on in enumerate(stepper.active):
            if on:
                members.metrics(k, states[k].history)
    images_per_epoch = len(stepper.parts.batches) * cfg.batch_size
    while any(stepper.active) and states[stepper.active.index(True)].epoch < cfg.epochs:
        epoch = states[stepper.active.index(True)].epoch
        with clock.part("epochs"):
            ran = run_epoch(stepper, states, compute, stop)
        clock.add_steps(ran.parts, ran.steps_run, ran.clock)
        if not ran.complete:
            with clock.part("checkpoints"):
                stepper.save(states)
            raise TrialInterrupted(ran.stop)
        running = [k for k, on in enumerate(stepper.active) if on]
        diverged = {k for k in running if diverges(ran.train_losses[k], cfg.recipe)}
        with clock.part("evaluation"):
            errors = evaluate_members(stepper, compute, epoch) if diverged != set(running) else []
        for k in running:
            line = metrics_line(epoch, ran.lrs[k], ran.train_losses[k], ran, images_per_epoch)
            if k not in diverged:
                line.update(errors[k])
            states[k] = states[k].after_epoch(line, ran.seconds, images_per_epoch, ran.wait_s)
            with clock.part("writes"):
                members.epoch_ended(k, states[k].history)
            if k in diverged:
                stepper.active[k] = False  # frozen: its weights are no longer updated
                members.ended(k, _result(stepper, k, states[k], epoch + 1, compute, clock))
        if not any(stepper.active):
            return
        if cadence.due(last_epoch=epoch + 1 == cfg.epochs) or ran.stop:
            t0 = time.perf_counter()
            with clock.part("checkpoints"):
                stepper.save(states)
            cadence.written(time.perf_counter() - t0)
        if ran.stop and epoch + 1 < cfg.epochs:
            raise TrialInterrupted(ran.stop)
    for k, on in enumerate(stepper.active):
        if on:
            members.ended(k, _result(stepper, k, states[k], None, compute, clock))


def _result(
    stepper: Stepper,
    k: int,
    state: TrialState,
    diverged_epoch: int | None,
    compute: Compute,
    clock: PartClock,
) -> TrialResult:
    with clock.part("end"):  # mostly the weights' digest
        weights = stepper.member_weights(k)
        return trial_result(stepper.cfgs[k], state, diverged_epoch, weights, compute.dist)


def run_guarded(
    members: Members,
    train: Callable[[], None],
    stop: StopRequest,
    *,
    handle_signals: bool,
    checkpoint: Path,
    keep_checkpoint: bool,
) -> list[TrialResult]:
    """Run `train()` (which records each member's result as it ends) with the stop signals
    routed to `stop`, then remove `checkpoint` unless kept; return the members' results. A stop
    (TrialInterrupted) passes its signal on and is raised. A crash is every unfinished member's
    "failed" result, except what no result can be written for, which is raised: an OSError of
    DISK_FAULTS and a link in a member's folder (safefs.UnsafePath). A refused checkpoint
    (CheckpointError) is kept for the user to look at."""
    keep, replaced = keep_checkpoint, {}
    try:
        with stop_signals_caught(stop, handle_signals) as replaced:
            train()
    except TrialInterrupted as stopped:
        pass_on(stopped.signum, replaced)
        raise
    except Exception as err:  # noqa: BLE001 - any crash becomes a recorded "failed" result
        if isinstance(err, OSError) and err.errno in DISK_FAULTS:
            raise  # not this trial's failure: the caller stops (nothing more can be written)
        if isinstance(err, safefs.UnsafePath):
            raise  # no result can be written there (the driver says so)
        keep = keep or isinstance(err, CheckpointError)
        members.failed(err, traceback.format_exc())
    finally:
        members.close()
    if not keep and members.is_main:
        safefs.remove(checkpoint, members.roots[0])
    return members.results
