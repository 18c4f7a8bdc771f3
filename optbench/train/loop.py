"""One trial, start to finish (`run_trial`): build what it trains with (build.py), restore its
position when resuming (state.py), then epoch by epoch train (epoch.py), measure (evaluation.py)
and checkpoint; write metrics.jsonl, checkpoint.pt and result.json. A crash becomes a "failed"
result, a diverging run a "diverged" one, and a stop signal a checkpoint (signals.py).
`optbench train` and the runner's workers both call `run_trial`. Each epoch's metrics line also
goes to a TensorBoard event file in OUT where tensorboard is installed (tensorboard.py).

Reproducibility: all randomness derives from the trial's seed and a position (seeding.py), so a
trial is a pure function of its config on the CPU: the same config on the same machine, library
versions and thread count gives the same `digest` (result.json records all three, and which code
made it: optbench.provenance), and resuming
from any step replays the rest exactly.

Result files and resume: at each epoch end OUT/checkpoint.pt is replaced atomically (state.py,
checkpoint.py). Resume is detected from the files: OUT/result.json present = the trial is done;
otherwise OUT/checkpoint.pt present = it can be resumed. `run_trial(..., resume=True)` (CLI:
`optbench train ... --resume`) continues from the checkpoint if there is one (and starts fresh
if not); with result.json present it returns that result untouched (if it is this config's:
another config's result or checkpoint is refused, naming the difference, and kept). Without
`resume`, a trial starts from scratch. The checkpoint is deleted once result.json is written
(`keep_checkpoint=True` keeps it). No result.json is written for a stopped trial.

Speed. Data lives on the device for small datasets (batches.py); augmentation is batched
(augment.py). The loss is read once per epoch, so divergence (a non-finite mean loss, or one
above `recipe.diverge_loss`) costs no sync per step; a diverged trial is a result ("diverged",
with its epoch), not a crash. On CUDA: bf16 autocast, channels_last, fused optimizers, timm's
scaled-dot-product attention and `torch.compile` as the recipe asks; on the CPU all of these are
off (compute.py), so CPU results stay exact and comparable.

DDP: when torchrun's or SLURM's environment names a world of several processes (see
distributed.py), one trial spans them: BatchNorm becomes SyncBatchNorm on CUDA (torch has no
CPU SyncBatchNorm; with gloo on the CPU each process normalizes its own share), each process
takes batch / world images of every global batch, and only rank 0 writes files.
"""

from __future__ import annotations

import errno
import hashlib
import math
import time
import traceback
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

from optbench import safefs
from optbench.provenance import provenance
from optbench.train.build import build_parts, for_training
from optbench.train.checkpoint import CHECKPOINT_FILE, CheckpointError
from optbench.train.compute import Compute
from optbench.train.config import Execution, Provenance, TrainConfig, TrialResult
from optbench.train.distributed import (
    DistContext,
    context_from_env,
    destroy_process_group,
    init_process_group,
)
from optbench.train.epoch import train_one_epoch
from optbench.train.evaluation import evaluate_epoch
from optbench.train.results import (
    ERROR_LOG,
    failure_line,
    finished_result,
    runtime_info,
    write_metrics,
    write_result,
)
from optbench.train.signals import StopRequest, TrialInterrupted, pass_on, stop_signals_caught
from optbench.train.state import TrialState, restore_state, save_state
from optbench.train.tensorboard import EpochEvents
from optbench.train.tracking import TrialTracker

# A write that fails for these is the machine's fault, not the trial's: run_trial raises it.
DISK_FAULTS = (errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EROFS)


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


def _train(
    cfg: TrainConfig,
    out_dir: Path,
    root: Path,
    compute: Compute,
    stop: StopRequest,
    resume: bool,
    on_epoch: Callable[[dict], None] | None = None,
    execution: Execution = Execution(pipeline="pil"),
) -> TrialResult:
    """Train from the start (or the checkpoint's position) to the last epoch or a divergence;
    an agreed stop checkpoints and raises TrialInterrupted."""
    parts = build_parts(cfg, compute, execution.pipeline)
    ckpt_path = out_dir / CHECKPOINT_FILE
    state = restore_state(ckpt_path, cfg, parts, root) if resume else TrialState()
    trained = for_training(parts.model, compute)
    if compute.dist.is_main:  # the file holds exactly the completed epochs' lines
        write_metrics(out_dir, state.history, root)
    images_per_epoch = len(parts.batches) * cfg.batch_size
    while state.epoch < cfg.epochs:
        epoch = state.epoch
        ran = train_one_epoch(trained, parts, cfg, compute, state, stop)
        if not ran.complete:
            save_state(ckpt_path, cfg, parts, state, compute.dist, root)
            raise TrialInterrupted(ran.stop)
        loss = ran.train_loss
        diverged = not math.isfinite(loss) or loss > cfg.recipe.diverge_loss
        line = {
            "epoch": epoch + 1,
            "lr": parts.optimizer.param_groups[0]["lr"],
            "train_loss": loss if math.isfinite(loss) else None,
            "images_per_s": round(images_per_epoch / ran.seconds, 2),
            "epoch_s": round(ran.seconds, 4),
            "input_wait": round(ran.wait_s / ran.seconds, 4) if ran.seconds else None,
        }
        if not diverged:
            line.update(evaluate_epoch(parts, cfg, compute, epoch))
        state = state.after_epoch(line, ran.seconds, images_per_epoch, ran.wait_s)
        if compute.dist.is_main:
            write_metrics(out_dir, state.history, root)
            if on_epoch is not None:
                on_epoch(line)
        if diverged:
            return trial_result(cfg, state, epoch + 1, parts.model, compute.dist)
        save_state(ckpt_path, cfg, parts, state, compute.dist, root)
        if ran.stop and state.epoch < cfg.epochs:
            raise TrialInterrupted(ran.stop)
    return trial_result(cfg, state, None, parts.model, compute.dist)


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
    kind, which = cfg.recipe.report.split("_")
    final, best = errors[f"{kind}_final_error"], errors[f"{kind}_best_error"]
    return TrialResult(
        status="finished",
        final_error=final if which == "final" else best,
        best_error=best,
        **errors,
        **common,
    )


def run_trial(
    cfg: TrainConfig,
    out_dir: Path,
    device: str = "cpu",
    *,
    resume: bool = False,
    handle_signals: bool = True,
    keep_checkpoint: bool = False,
    workers: int | None = None,
    distributed: bool = True,
    on_epoch: Callable[[dict], None] | None = None,
    execution: Execution = Execution(),
    root: Path | None = None,
) -> TrialResult:
    """Train `cfg` into `out_dir` and write result.json there. Never raises for a failed trial:
    the failure (with its traceback in error.log) is the result; a refused checkpoint is kept.
    It raises only where no result can be written for it: an OSError of DISK_FAULTS (disk
    full, I/O error), or, with `resume`, a result.json in `out_dir` that is invalid or another
    config's (results.finished_result). On SIGTERM / SIGUSR2 it checkpoints, then passes the
    signal on (see signals.py). `workers`
    sets the input pipeline's workers (results do not depend on it); `execution` how to run
    it (resolved for the device, recorded in result.json).
    `distributed=False` ignores torchrun's / SLURM's environment and trains in this process
    alone (see distributed.py). `on_epoch(line)` is called with each epoch's metrics line. No link below `root` (default
    `out_dir`; a study's workers pass the study folder) is followed (safefs.UnsafePath)."""
    out_dir = Path(out_dir)
    root = Path(root or out_dir)
    safefs.make_dirs(out_dir, root)
    if resume and (done := finished_result(cfg, out_dir, root)) is not None:
        return done  # ResumeMismatch or InvalidResultFile if it is not this config's result
    start = time.perf_counter()
    ctx = context_from_env() if distributed else DistContext()
    compute = Compute.for_trial(cfg.recipe, device, ctx, workers)
    execution = execution.resolved(compute.device.type)
    stop = StopRequest()
    replaced: dict = {}
    events = EpochEvents(out_dir, root) if ctx.is_main else None  # TensorBoard, if installed
    tracker = TrialTracker(cfg, out_dir, root, execution.tracking if ctx.is_main else None)

    def each_epoch(line: dict) -> None:  # called on the main process only
        events.write(line)
        tracker.epoch_ended()
        if on_epoch is not None:
            on_epoch(line)

    try:
        init_process_group(ctx, compute.device.type)
        with stop_signals_caught(stop, handle_signals) as replaced:
            result = _train(cfg, out_dir, root, compute, stop, resume, each_epoch, execution)
    except TrialInterrupted as stopped:
        tracker.end(None)
        pass_on(stopped.signum, replaced)
        raise
    except Exception as err:  # noqa: BLE001 - any crash becomes a recorded "failed" result
        if isinstance(err, OSError) and err.errno in DISK_FAULTS:
            raise  # not this trial's failure: the caller stops (nothing more can be written)
        if isinstance(err, safefs.UnsafePath):
            raise  # a link in its folder: no result can be written there (the driver says so)
        # a refused checkpoint stays where it is for the user to look at
        keep_checkpoint = keep_checkpoint or isinstance(err, CheckpointError)
        if ctx.is_main:
            safefs.write_text(out_dir / ERROR_LOG, root, traceback.format_exc())
        result = TrialResult(
            status="failed", epochs=cfg.epochs, config=cfg, message=failure_line(err)
        )
    finally:
        destroy_process_group(ctx)
        if events is not None:
            events.close()
    result.execution = execution
    tracker.end(result)
    if ctx.is_main:
        record_result(out_dir, result, start, compute.device, keep_checkpoint, root)
    else:
        stamp_result(result, start, compute.device)
    return result


def stamp_result(result: TrialResult, start: float, device: torch.device) -> None:
    """Add the wall time since `start` and what the digest depends on (runtime_info)."""
    result.wall_s = round(time.perf_counter() - start, 3)
    for name, value in runtime_info(device).items():
        setattr(result, name, value)
    result.provenance = Provenance(**provenance())


def record_result(
    out_dir: Path,
    result: TrialResult,
    start: float,
    device: torch.device,
    keep_checkpoint: bool,
    root: Path | None = None,
) -> None:
    """Stamp `result` and write it as OUT/result.json; remove the checkpoint unless kept
    (nothing followed through a link below `root`, safefs)."""
    stamp_result(result, start, device)
    write_result(out_dir, result, root)
    if not keep_checkpoint:
        safefs.remove(out_dir / CHECKPOINT_FILE, root)
