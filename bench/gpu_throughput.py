"""Training throughput and MFU on a CUDA GPU, and the epoch time of DHVT on CIFAR-sized data.

1. The GPU's bf16 matmul rate, measured (8192^3 matmuls), is the MFU denominator.
2. For vit_p_4gf and vit_c_4gf at 224 px (bf16 autocast, channels_last, fused AdamW, optional
   torch.compile): training images/s over timed steps after warm-up, and
   MFU = 2 x 3 x flops per image x images/s / matmul rate, where flops are the model's counted
   forward multiply-adds (optbench.models.complexity, the same count as `optbench models` and
   the papers' GF; attention matmuls included), x 2 for FLOPs and x 3 for forward + backward.
   Target MFU >= 45% on an H100/H200-class GPU.
3. dhvt_tiny_cifar_p4: one epoch of `run_trial` (deit preset) on a synthetic CIFAR-100-sized
   dataset written in torchvision's pickle format (50,000 train / 10,000 val images): the whole
   loop, data pipeline and evaluation included.
Models not registered in this checkout are reported as missing, not guessed. Without a CUDA GPU
the script prints one JSON line saying so and exits 0. `--device cpu --smoke` runs the same
code on tiny quickstart models to check it works. The last line is JSON.

    PYTHONPATH=. python bench/gpu_throughput.py [--batch 256] [--steps 30] [--compile]
"""

from __future__ import annotations

import argparse
import json
import pickle
import platform
import tempfile
import time
from pathlib import Path

import numpy as np
import timm
import torch

from optbench import models  # noqa: F401  (registers optbench's models)
from optbench.models.complexity import count_complexity
from optbench.spec.recipe import Dataset, Recipe
from optbench.train.optim import build_optimizer
from optbench.train.run_trial import run_trial
from optbench.trial.config import TrainConfig


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def matmul_tflops(device: torch.device, n: int, reps: int) -> float:
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    for _ in range(3):
        a @ b
    sync(device)
    t0 = time.perf_counter()
    for _ in range(reps):
        a @ b
    sync(device)
    return 2 * n**3 * reps / (time.perf_counter() - t0) / 1e12


def train_images_per_s(
    name: str, img_size: int, batch: int, steps: int, device: torch.device, compile_: bool
) -> dict:
    cuda = device.type == "cuda"
    model = timm.create_model(name, num_classes=1000, in_chans=3, img_size=img_size).to(device)
    flops = count_complexity(model, (1, 3, img_size, img_size))["flops"]  # multiply-adds
    if cuda:
        model = model.to(memory_format=torch.channels_last)
    cfg = TrainConfig(
        model=name,
        dataset=Dataset(name="digits"),
        optimizer="adamw",
        lr=1e-3,
        wd=0.05,
        epochs=10,
        batch_size=batch,
        ref_batch=2048,  # the lr as measured before basic stopped scaling (bench/RESULTS.md)
    )
    opt = build_optimizer(model, cfg, fused=cuda)
    step_model = torch.compile(model) if compile_ and cuda else model
    x = torch.randn(batch, 3, img_size, img_size, device=device)
    if cuda:
        x = x.contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (batch,), device=device)
    criterion = torch.nn.CrossEntropyLoss(label_smoothing=0.1)
    model.train()

    def step() -> None:
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=cuda):
            loss = criterion(step_model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    for _ in range(max(3, steps // 5)):  # warm-up (and compilation)
        step()
    sync(device)
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    sync(device)
    images_per_s = steps * batch / (time.perf_counter() - t0)
    return {
        "images_per_s": round(images_per_s, 1),
        "fwd_gflops": round(flops / 1e9, 3),  # multiply-adds, as the papers count
        "_flops": flops,
    }


def write_cifar100(root: Path, n_train: int, n_val: int) -> None:
    rng = np.random.default_rng(0)
    folder = root / "cifar-100-python"
    folder.mkdir(parents=True)
    for name, n in (("train", n_train), ("test", n_val)):
        data = rng.integers(0, 256, (n, 3072), dtype=np.uint8)
        with open(folder / name, "wb") as f:
            pickle.dump({"data": data, "fine_labels": rng.integers(0, 100, n).tolist()}, f)


def dhvt_epoch(name: str, batch: int, device: str, n_train: int, n_val: int, img_size: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        write_cifar100(Path(tmp) / "data", n_train, n_val)
        cfg = TrainConfig(
            model=name,
            dataset=Dataset(name="cifar100", root=Path(tmp) / "data", img_size=img_size),
            optimizer="adamw",
            lr=1e-3,
            wd=0.05,
            epochs=2,
            batch_size=batch,
            ref_batch=512,
            recipe=Recipe(preset="deit"),
        )
        result = run_trial(cfg, Path(tmp) / "out", device, handle_signals=False)
        lines = [
            json.loads(s) for s in (Path(tmp) / "out" / "metrics.jsonl").read_text().splitlines()
        ]
    if result.status != "finished":
        return {"status": result.status, "message": result.message}
    return {
        "epoch_s": [line["epoch_s"] for line in lines],  # the first includes warm-up
        "train_images_per_s": [line["images_per_s"] for line in lines],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--compile", action="store_true")
    parser.add_argument("--smoke", action="store_true", help="tiny models (to test the script)")
    args = parser.parse_args()
    line: dict = {"bench": "gpu_throughput", "machine": platform.node()}
    if args.device == "cuda" and not torch.cuda.is_available():
        line.update(skipped="no CUDA GPU on this machine", ratio=None)
        print(json.dumps(line))
        return
    device = torch.device(args.device)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        line["gpu"] = torch.cuda.get_device_name(device)
    if args.smoke:
        vits, img, dhvt, batch, sizes = (
            ["vit_p_w64_16px", "vit_c_w64_16px"],
            16,
            "vit_c_w64_16px",
            16,
            (512, 128),
        )
        peak = matmul_tflops(device, 512, 5)
    else:
        vits, img, dhvt, batch, sizes = (
            ["vit_p_4gf", "vit_c_4gf"],
            224,
            "dhvt_tiny_cifar_p4",
            args.batch,
            (50_000, 10_000),
        )
        peak = matmul_tflops(device, 8192, 50)
    line["matmul_tflops"] = round(peak, 1)
    line["compile"] = args.compile
    for name in vits:
        if not timm.is_model(name):
            line[name] = "missing: not registered in this checkout"
            continue
        m = train_images_per_s(name, img, batch, args.steps, device, args.compile)
        flops = m.pop("_flops")
        m["mfu"] = round(2 * 3 * flops * m["images_per_s"] / (peak * 1e12), 4)
        line[name] = m
    key = f"epoch_{dhvt}"
    if timm.is_model(dhvt):
        img_size = 16 if args.smoke else None
        line[key] = dhvt_epoch(dhvt, batch if args.smoke else 128, args.device, *sizes, img_size)
    else:
        line[key] = "missing: not registered in this checkout"
    print(json.dumps(line))


if __name__ == "__main__":
    main()
