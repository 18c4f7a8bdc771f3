"""One trial, start to finish: data, model, optimizer, EMA; train; evaluate each epoch; write
metrics.jsonl, checkpoint.pt and result.json. `optbench train` and the runner's workers both call
`run_trial`.

Reproducibility. All randomness is derived from the trial's seed and a position: the data order
from (seed, epoch), and before every optimizer step torch's, numpy's and Python's global
generators are reseeded from (seed, step, rank), which fixes that step's augmentation, mixup and
stochastic depth. A trial is therefore a pure function of its config on the CPU (same config ->
same `digest`), and resuming from any step replays the rest exactly.

Checkpoint, stop signals and resume (for the SLURM helper and any other caller):
- At each epoch end OUT/checkpoint.pt is replaced atomically (see checkpoint.py).
- SIGTERM or SIGUSR2 delivered to the trial's process (`kill -USR2 <pid>`; SLURM's
  `--signal=USR2@120` reaches processes started by srun, and SLURM sends SIGTERM at the time
  limit or on preemption) asks the trial to stop: it finishes the running optimizer step,
  writes OUT/checkpoint.pt at that position, restores the previous handlers and delivers the
  signal again to what was there before. By default that ends the process (exit status 128 +
  the signal number: 143 for SIGTERM, 140 for SIGUSR2), as the signal would have without
  optbench, only after the checkpoint; a caller's own handler runs instead if it installed one
  (submitit's requeue on SIGUSR2, say; `optbench train` installs one that exits with that same
  status). If that handler returns, `run_trial` raises `TrialInterrupted` (a BaseException, so
  it is not recorded as a failure). Either way no result.json is written. The handlers are
  installed only when `run_trial` runs in the main thread and `handle_signals` is true. A
  signal is acted on after the next optimizer step, so one that arrives during evaluation
  waits for it.
- Resume is detected from the files: OUT/result.json present = the trial is done; otherwise
  OUT/checkpoint.pt present = it can be resumed. `run_trial(..., resume=True)` (CLI: `optbench
  train ... --resume`) continues from the checkpoint if there is one (and starts fresh if not);
  with result.json present it returns that result untouched (if it is this config's: another
  config's result or checkpoint is refused, naming the difference, and kept). Without
  `resume`, a trial starts from scratch. The checkpoint is deleted once result.json is written (`keep_checkpoint=True`
  keeps it).

Speed. Data lives on the device for small datasets (data.py); augmentation is batched
(augment.py). The loss is summed on the device and read once per epoch, so divergence (a
non-finite mean loss, or one above `recipe.diverge_loss`) costs no sync per step; a diverged
trial is a result ("diverged", with its epoch), not a crash. On CUDA: bf16 autocast
(`recipe.amp`), channels_last (`recipe.channels_last`), fused optimizers, timm's
scaled-dot-product attention, and `torch.compile` when `recipe.compile`; on the CPU all of these
are off (compile included), so CPU results stay exact and comparable.

DDP: when torchrun's or SLURM's environment names a world of several processes (see
distributed.py), one trial spans them: BatchNorm becomes SyncBatchNorm on CUDA (torch has no
CPU SyncBatchNorm; with gloo on the CPU each process normalizes its own share), each process
takes batch / world images of every global batch, and only rank 0 writes files.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import math
import random
import signal
import threading
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from timm.loss import SoftTargetCrossEntropy
from timm.utils.model_ema import ModelEmaV3
from torch import nn

from optbench.models import create_model
from optbench.train.augment import BatchAugment
from optbench.train.checkpoint import (
    CHECKPOINT_FILE,
    CheckpointError,
    load_checkpoint,
    restoring,
    save_checkpoint,
)
from optbench.train.config import TrainConfig, TrialResult
from optbench.train.data import (
    DeviceBatches,
    DeviceData,
    FolderBatches,
    Shard,
    TrainBatches,
    derive_seed,
    load_dataset,
)
from optbench.train.distributed import (
    DistContext,
    context_from_env,
    destroy_process_group,
    init_process_group,
    process_device,
)
from optbench.train.optim import build_optimizer, build_schedule, schedule_position
from optbench.train.results import (
    atomic_write_text,
    finished_result,
    runtime_info,
    write_metrics,
    write_result,
)

STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR2)
# A write that fails for these is the machine's fault, not the trial's: run_trial raises it.
DISK_FAULTS = (errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EROFS)


class TrialInterrupted(BaseException):
    """A stop signal arrived; the checkpoint is written and the trial can be resumed."""

    def __init__(self, signum: int):
        super().__init__(f"stopped by signal {signal.Signals(signum).name}; checkpoint saved")
        self.signum = signum


@dataclass
class StopRequest:
    """Set by a signal handler, read by the loop after each optimizer step."""

    signum: int = 0

    def __call__(self, signum: int, frame) -> None:
        self.signum = signum


@contextlib.contextmanager
def stop_signals_caught(stop: StopRequest, enabled: bool) -> Iterator[dict]:
    """Route SIGTERM / SIGUSR2 to `stop` while the trial runs (main thread only). Yields the
    handlers it replaced (empty when it replaced none); they are restored on exit."""
    if not enabled or threading.current_thread() is not threading.main_thread():
        yield {}
        return
    previous = {s: signal.signal(s, stop) for s in STOP_SIGNALS}
    try:
        yield previous
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def pass_on(signum: int, previous: dict) -> None:
    """Deliver `signum` again, now to the handler the trial had replaced: the default action
    ends the process (as the signal would have without optbench, only after the checkpoint), a
    caller's handler (e.g. submitit's requeue on SIGUSR2, or the CLI's exit) runs. Returns only
    if that handler returns, or if the trial had not taken the signal over."""
    if signum in previous and previous[signum] is not signal.SIG_IGN:
        signal.raise_signal(signum)


def weights_digest(model: nn.Module) -> str:
    """sha256 of the model's state (names, dtypes, shapes and bytes), in key order."""
    h = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        t = tensor.detach().cpu().contiguous()
        h.update(f"{name}:{t.dtype}:{tuple(t.shape)}".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def seed_step(seed: int, device: torch.device) -> None:
    """Reseed the global generators that augmentation, mixup and drop path draw from: the CPU's
    and `device`'s torch generators, numpy's and Python's. (Only these: torch.manual_seed would
    also visit every other backend, ~100 us a step.)"""
    torch.default_generator.manual_seed(seed)
    if device.type == "cuda":
        torch.cuda.manual_seed(seed)  # the current device's generator
    np.random.seed(seed % 2**32)
    random.seed(seed)


@torch.no_grad()
def evaluate(
    model: nn.Module, batches: TrainBatches, augment: BatchAugment, run: _Runtime
) -> tuple[float, float]:
    """Top-1 and top-5 error in percent over the whole validation split (all ranks)."""
    model.eval()
    counts = torch.zeros(3, device=run.device, dtype=torch.float64)  # wrong@1, wrong@5, n
    k = min(5, batches.num_classes)
    for x, y in batches.val():
        with run.autocast():
            logits = model(run.layout(augment.normalize(x)))
        top = logits.topk(k, dim=1).indices
        hit = top == y[:, None]
        counts[0] += (~hit[:, 0]).sum()
        counts[1] += (~hit.any(1)).sum()
        counts[2] += len(y)
    run.dist.sum_(counts)
    wrong1, wrong5, n = counts.tolist()
    return 100.0 * wrong1 / n, 100.0 * wrong5 / n


@dataclass(frozen=True)
class _Runtime:
    """Where and how the trial computes: device, process group, precision and memory layout."""

    device: torch.device
    dist: DistContext
    amp: bool
    channels_last: bool
    compile: bool = False
    workers: int | None = None  # DataLoader workers (class-folder datasets); None: up to 8

    def autocast(self):
        return torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.amp)

    def layout(self, x: torch.Tensor) -> torch.Tensor:
        return x.contiguous(memory_format=torch.channels_last) if self.channels_last else x


@dataclass
class _Progress:
    """Where a trial is and what it has measured so far (saved in checkpoints)."""

    epoch: int = 0  # completed epochs
    batch: int = 0  # completed batches of the running epoch (non-zero only mid-epoch)
    loss_sum: float = 0.0  # of the running epoch's completed batches
    epoch_s: float = 0.0  # of the running epoch so far
    train_s: float = 0.0  # of all completed epochs
    images: int = 0  # images stepped through in completed epochs (global)
    history: list[dict] = field(default_factory=list)  # one metrics line per completed epoch


def _build_batches(cfg: TrainConfig, run: _Runtime) -> TrainBatches:
    if cfg.batch_size % run.dist.world:
        raise ValueError(
            f"batch_size {cfg.batch_size} is not divisible by {run.dist.world} processes"
        )
    mixing = cfg.recipe.mixup_alpha > 0 or cfg.recipe.cutmix_alpha > 0
    if mixing and (cfg.batch_size // run.dist.world) % 2:
        raise ValueError(
            "mixup/CutMix pair each image with the batch reversed: the batch per process must be even"
        )
    data = load_dataset(cfg.dataset)
    shard = Shard(run.dist.rank, run.dist.world)
    if isinstance(data, DeviceData):
        batches: TrainBatches = DeviceBatches(
            data.to(run.device),
            cfg.batch_size,
            seed=cfg.seed,
            repeated_aug=cfg.recipe.repeated_aug,
            shard=shard,
        )
        n_train = data.num_train
    else:
        batches = FolderBatches(
            data,
            cfg.batch_size,
            cfg.recipe,
            seed=cfg.seed,
            device=run.device,
            shard=shard,
            workers=run.workers,
        )
        n_train = len(batches.train_set)
    if len(batches) == 0:
        raise ValueError(f"batch_size {cfg.batch_size} exceeds the {n_train} training images")
    return batches


def _build_model(cfg: TrainConfig, batches: TrainBatches, run: _Runtime) -> nn.Module:
    torch.manual_seed(cfg.seed)
    # The recipe decides stochastic depth: drop_path 0 means none, whatever the model's own
    # default (DHVT's is 0.1).
    model = create_model(
        cfg.model,
        num_classes=batches.num_classes,
        in_chans=batches.in_chans,
        img_size=batches.img_size,
        drop_path_rate=cfg.recipe.drop_path,
        weight_init=cfg.recipe.weight_init,
    )
    if run.dist.enabled and run.device.type == "cuda":  # torch's SyncBatchNorm is CUDA-only
        model = nn.SyncBatchNorm.convert_sync_batchnorm(model)
    model = model.to(run.device)
    if run.channels_last:
        model = model.to(memory_format=torch.channels_last)
    return model


def _train(
    cfg: TrainConfig, out_dir: Path, run: _Runtime, stop: StopRequest, resume: bool
) -> TrialResult:
    recipe = cfg.recipe
    batches = _build_batches(cfg, run)
    model = _build_model(cfg, batches, run)
    optimizer = build_optimizer(model, cfg, fused=run.device.type == "cuda")
    steps_per_epoch = len(batches)
    total_steps = cfg.epochs * steps_per_epoch
    schedule = build_schedule(optimizer, cfg, steps_per_epoch)
    warmup_steps = round(recipe.warmup_for(cfg.epochs) * steps_per_epoch)
    ema = None
    if recipe.ema:  # pycls-style: a copy during warmup, then a time constant of ema_horizon
        decay = max(0.0, 1.0 - 1.0 / (recipe.ema_horizon * total_steps))
        ema = ModelEmaV3(model, decay=decay, update_after_step=warmup_steps)
    augment = BatchAugment(
        recipe,
        num_classes=batches.num_classes,
        mean=batches.mean,
        std=batches.std,
        device=run.device,
        geometric=batches.geometric_on_device,
    )
    criterion = (
        SoftTargetCrossEntropy()
        if augment.soft_targets
        else nn.CrossEntropyLoss(label_smoothing=recipe.label_smoothing)
    )

    ckpt_path = out_dir / CHECKPOINT_FILE
    progress = _Progress()
    state = load_checkpoint(ckpt_path, cfg.model_dump(mode="json")) if resume else None
    if state is not None:
        with restoring(ckpt_path):
            model.load_state_dict(state["model"])
            optimizer.load_state_dict(state["optimizer"])
            schedule.load_state_dict(state["schedule"])
            if ema is not None:
                ema.load_state_dict(state["ema"])
            progress = _Progress(**state["progress"])

    trained = model
    if run.dist.enabled:
        ids = [run.device.index] if run.device.type == "cuda" else None
        trained = nn.parallel.DistributedDataParallel(model, device_ids=ids)
    if run.compile:
        trained = torch.compile(trained)

    def checkpoint() -> None:
        if run.dist.is_main:
            save_checkpoint(
                ckpt_path,
                {
                    "config": cfg.model_dump(mode="json"),
                    "model": model.state_dict(),
                    "ema": ema.state_dict() if ema is not None else None,
                    "optimizer": optimizer.state_dict(),
                    "schedule": schedule.state_dict(),
                    "progress": progress.__dict__,
                },
            )

    if run.dist.is_main:  # the file holds exactly the completed epochs' lines
        write_metrics(out_dir, progress.history)
    stop_flag = torch.zeros(1, device=run.device)
    diverged_epoch = None
    stopping = False  # agreed by every rank, decided after each step
    while progress.epoch < cfg.epochs and diverged_epoch is None:
        epoch = progress.epoch
        trained.train()
        loss_sum = torch.full((), progress.loss_sum, device=run.device, dtype=torch.float64)
        t0 = time.perf_counter() - progress.epoch_s
        for b, (x, y) in enumerate(batches.train(epoch, progress.batch), start=progress.batch):
            step = epoch * steps_per_epoch + b
            seed_step(derive_seed(cfg.seed, "step", step, run.dist.rank), run.device)
            x, y = augment(x, y)
            schedule.step_update(schedule_position(cfg, step, steps_per_epoch))
            with run.autocast():
                loss = criterion(trained(run.layout(x)), y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            if ema is not None:
                ema.update(model, step=step + 1)
            loss_sum += loss.detach()
            if run.dist.enabled:  # every rank must stop at the same step
                stop_flag.fill_(float(stop.signum != 0))
                run.dist.sum_(stop_flag)
                stopping = bool(stop_flag.item())
            else:
                stopping = stop.signum != 0
            if stopping and b + 1 < steps_per_epoch:
                progress.batch, progress.loss_sum = (
                    b + 1,
                    run.dist.sum_(loss_sum).item() / run.dist.world,
                )
                progress.epoch_s = time.perf_counter() - t0
                checkpoint()
                raise TrialInterrupted(stop.signum or signal.SIGTERM)
        train_loss = run.dist.sum_(loss_sum).item() / run.dist.world / steps_per_epoch
        epoch_s = time.perf_counter() - t0
        if not math.isfinite(train_loss) or train_loss > recipe.diverge_loss:
            diverged_epoch = epoch + 1
        line = {
            "epoch": epoch + 1,
            "lr": optimizer.param_groups[0]["lr"],
            "train_loss": train_loss if math.isfinite(train_loss) else None,
            "images_per_s": round(steps_per_epoch * cfg.batch_size / epoch_s, 2),
            "epoch_s": round(epoch_s, 4),
        }
        if diverged_epoch is None:
            line["raw_top1"], line["raw_top5"] = evaluate(model, batches, augment, run)
            if ema is not None:
                line["ema_top1"], line["ema_top5"] = evaluate(ema.module, batches, augment, run)
            line["val_error"] = line[recipe.report.split("_")[0] + "_top1"]
        progress = _Progress(
            epoch=epoch + 1,
            train_s=progress.train_s + epoch_s,
            images=progress.images + steps_per_epoch * cfg.batch_size,
            history=[*progress.history, line],
        )
        if run.dist.is_main:
            write_metrics(out_dir, progress.history)
        if diverged_epoch is None:
            checkpoint()
        if stopping and progress.epoch < cfg.epochs and diverged_epoch is None:
            raise TrialInterrupted(stop.signum or signal.SIGTERM)
    return _result(cfg, progress, diverged_epoch, model, run)


def _result(
    cfg: TrainConfig,
    progress: _Progress,
    diverged_epoch: int | None,
    model: nn.Module,
    run: _Runtime,
) -> TrialResult:
    common = dict(
        epochs=cfg.epochs,
        epochs_run=progress.epoch,
        images_per_s=progress.images / progress.train_s if progress.train_s else None,
        digest=weights_digest(model),
        config=cfg,
        reported=cfg.recipe.report,
        world_size=run.dist.world,
    )
    if diverged_epoch is not None:
        return TrialResult(status="diverged", diverged_epoch=diverged_epoch, **common)
    hist = progress.history
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
) -> TrialResult:
    """Train `cfg` into `out_dir` and write result.json there. Never raises for a failed trial:
    the failure (with its traceback in error.log) is the result; a refused checkpoint is kept.
    It raises only where no result can be written for it: an OSError of DISK_FAULTS (disk
    full, I/O error), or, with `resume`, a result.json in `out_dir` that is invalid or another
    config's (results.finished_result). On SIGTERM / SIGUSR2 it checkpoints, then passes the
    signal on (see the module docstring). `workers`
    sets the DataLoader workers of class-folder datasets (results do not depend on it).
    `distributed=False` ignores torchrun's / SLURM's environment and trains in this process
    alone (see distributed.py)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    if resume and (done := finished_result(cfg, out_dir)) is not None:
        return done  # ResumeMismatch or InvalidResultFile if it is not this config's result
    start = time.perf_counter()
    ctx = context_from_env() if distributed else DistContext()
    dev = torch.device(device)
    if ctx.enabled and dev.type == "cuda":
        dev = process_device(ctx, device, torch.cuda.device_count())
        torch.cuda.set_device(dev)
    on_gpu = dev.type == "cuda"
    run = _Runtime(
        dev,
        ctx,
        amp=cfg.recipe.amp and on_gpu,
        channels_last=cfg.recipe.channels_last and on_gpu,
        compile=cfg.recipe.compile and on_gpu,
        workers=workers,
    )
    stop = StopRequest()
    replaced: dict = {}
    try:
        init_process_group(ctx, dev.type)
        with stop_signals_caught(stop, handle_signals) as replaced:
            result = _train(cfg, out_dir, run, stop, resume)
    except TrialInterrupted as stopped:
        pass_on(stopped.signum, replaced)
        raise
    except Exception as err:  # noqa: BLE001 - any crash becomes a recorded "failed" result
        if isinstance(err, OSError) and err.errno in DISK_FAULTS:
            raise  # not this trial's failure: the caller stops (nothing more can be written)
        # a refused checkpoint stays where it is for the user to look at
        keep_checkpoint = keep_checkpoint or isinstance(err, CheckpointError)
        if ctx.is_main:
            atomic_write_text(out_dir / "error.log", traceback.format_exc())
        result = TrialResult(
            status="failed", epochs=cfg.epochs, config=cfg, message=f"{type(err).__name__}: {err}"
        )
    finally:
        destroy_process_group(ctx)
    result.wall_s = round(time.perf_counter() - start, 3)
    for name, value in runtime_info(dev).items():  # what the digest depends on
        setattr(result, name, value)
    if ctx.is_main:
        write_result(out_dir, result)
        if not keep_checkpoint:
            (out_dir / CHECKPOINT_FILE).unlink(missing_ok=True)
    return result
