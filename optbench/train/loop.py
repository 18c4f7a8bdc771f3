"""One trial, start to finish: build data, model, optimizer; train; evaluate each epoch; write
metrics.jsonl and result.json. `optbench train` and the runner's workers both call `run_trial`.

The loop is short on purpose. Data lives on the device (see data.py). The loss is summed on the
device and read once per epoch, so divergence (a non-finite or huge mean loss) costs no sync
per step; a diverged trial is a result, not a crash.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
import traceback
from pathlib import Path

import torch
from torch import nn

from optbench.models import create_model
from optbench.train.config import TrainConfig, TrialResult
from optbench.train.data import DeviceData, GpuLoader, load_dataset
from optbench.train.optim import build_optimizer, build_schedule
from optbench.train.results import METRICS_FILE, write_result


def weights_digest(model: nn.Module) -> str:
    """sha256 of the model's state (names, dtypes, shapes and bytes), in key order."""
    h = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        t = tensor.detach().cpu().contiguous()
        h.update(f"{name}:{t.dtype}:{tuple(t.shape)}".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


@torch.no_grad()
def top1_error(
    model: nn.Module, x: torch.Tensor, y: torch.Tensor, loader: GpuLoader, chunk: int = 1024
) -> float:
    """Top-1 error in percent over a whole split."""
    model.eval()
    wrong = 0
    for i in range(0, len(y), chunk):
        logits = model(loader.normalize(x[i : i + chunk]))
        wrong += (logits.argmax(1) != y[i : i + chunk]).sum().item()
    return 100.0 * wrong / len(y)


def _train(cfg: TrainConfig, data: DeviceData, out_dir: Path, device: torch.device) -> TrialResult:
    torch.manual_seed(cfg.seed)
    model = create_model(
        cfg.model, num_classes=data.num_classes, in_chans=data.in_chans, img_size=data.img_size
    ).to(device)
    optimizer = build_optimizer(model, cfg)
    gen = torch.Generator(device=device).manual_seed(cfg.seed)
    loader = GpuLoader(
        data, cfg.batch_size, translate=cfg.recipe.translate, hflip=cfg.recipe.hflip, generator=gen
    )
    if len(loader) == 0:
        raise ValueError(
            f"batch_size {cfg.batch_size} exceeds the {len(data.train_y)} training images"
        )
    schedule = build_schedule(optimizer, cfg, len(loader))
    criterion = nn.CrossEntropyLoss(label_smoothing=cfg.recipe.label_smoothing)

    errors: list[float] = []
    train_s, step = 0.0, 0
    diverged_epoch = None
    with open(out_dir / METRICS_FILE, "w") as metrics:
        for epoch in range(1, cfg.epochs + 1):
            model.train()
            t0 = time.perf_counter()
            loss_sum = torch.zeros((), device=device)
            for x, y in loader:
                loss = criterion(model(x), y)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                step += 1
                schedule.step_update(step)
                loss_sum += loss.detach()
            train_loss = loss_sum.item() / len(loader)
            epoch_s = time.perf_counter() - t0
            train_s += epoch_s
            if not math.isfinite(train_loss) or train_loss > cfg.recipe.diverge_loss:
                diverged_epoch = epoch
            val_error = (
                None if diverged_epoch else top1_error(model, data.val_x, data.val_y, loader)
            )
            line = {
                "epoch": epoch,
                "lr": optimizer.param_groups[0]["lr"],
                "train_loss": train_loss if math.isfinite(train_loss) else None,
                "val_error": val_error,
                "epoch_s": round(epoch_s, 4),
            }
            metrics.write(json.dumps(line) + "\n")
            metrics.flush()
            if diverged_epoch:
                break
            errors.append(val_error)

    common = dict(
        epochs=cfg.epochs,
        epochs_run=len(errors) + bool(diverged_epoch),
        images_per_s=step * cfg.batch_size / train_s if train_s else None,
        digest=weights_digest(model),
        config=cfg,
    )
    if diverged_epoch:
        return TrialResult(status="diverged", diverged_epoch=diverged_epoch, **common)
    return TrialResult(status="finished", final_error=errors[-1], best_error=min(errors), **common)


def run_trial(cfg: TrainConfig, out_dir: Path, device: str = "cpu") -> TrialResult:
    """Train `cfg` into `out_dir` and write result.json there. Never raises for a failed trial:
    the failure (with its traceback in error.log) is the result."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    try:
        dev = torch.device(device)
        data = load_dataset(cfg.dataset).to(dev)
        result = _train(cfg, data, out_dir, dev)
    except Exception as err:  # noqa: BLE001 - any crash becomes a recorded "failed" result
        (out_dir / "error.log").write_text(traceback.format_exc())
        result = TrialResult(
            status="failed", epochs=cfg.epochs, config=cfg, message=f"{type(err).__name__}: {err}"
        )
    result.wall_s = round(time.perf_counter() - start, 3)
    write_result(out_dir, result)
    return result
