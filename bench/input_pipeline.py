"""Input rate of each pipeline (data/batches.py, data/tensor_folder.py) beside the model's own
training rate on the same device. Prints one JSON line.

Class-folder data: `--images` JPEGs of 500x375 (quality 90, smooth colour waves plus noise:
compressible like photographs) generated into a temporary ImageNet-layout folder, read at
224 px with the `paper` recipe's per-image work (RandomResizedCrop, flip, pycls's AutoAugment):
- pil: persistent DataLoader workers (1, 2, 4, ... `--workers`), PIL decode and ops per image;
- tensor: reader threads + decode_jpeg batched on the device + crop/flip + the tensor policy,
  on the CPU and, when there is one, on CUDA.
CIFAR-sized data (`--cifar` uint8 32x32 images in memory) with the `deit` recipe
(translate, flip, rand-m9-mstd0.5-inc1): pil = worker processes preparing batches
(PreparedBatches), tensor = the policy per sample on the device (BatchAugment).
Shards: the same JPEGs packed into WebDataset tar shards (`optbench data pack`, `--per-shard`),
read through both pipelines by their member index (`wds_224px_paper`, with the pack's and the
index scan's seconds).
Model: training images/s (forward, backward, SGD step; models.zoo.measure_throughput) of
`--model` (224 px) and `--cifar-model` (32 px).

Only batch production is timed (the first batch of each pass is warm-up, untimed); what
follows on the device in both pipelines (PCA lighting, normalization, mixup) is the same.

    PYTHONPATH=. python bench/input_pipeline.py [--images 2000] [--batches 8] [--workers N]
    PYTHONPATH=. python bench/input_pipeline.py --images 20000 --write-jpegs DIR  # data only
    PYTHONPATH=. python bench/input_pipeline.py --write-cifar DIR
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from optbench.data.augment import BatchAugment
from optbench.data.batches import DeviceBatches, FolderBatches, PreparedBatches
from optbench.data.datasets import DeviceData, load_dataset
from optbench.data.tensor_folder import TensorFolderBatches, device_policy
from optbench.host import cpu_name, usable_cores
from optbench.spec.recipe import Dataset, Recipe


def write_jpegs(root: Path, n: int, classes: int = 10, jobs: int = 1) -> None:
    """n JPEGs of 500x375 (a quarter portrait), quality 90, in `classes` class folders of
    train/ (and 1 image per class in val/, which the bench does not read); `jobs` processes."""
    from multiprocessing import Pool

    chunks = [(root, n, classes, range(j, n + classes, jobs)) for j in range(jobs)]
    if jobs == 1:
        _write_some(*chunks[0])
    else:
        with Pool(jobs) as pool:
            pool.starmap(_write_some, chunks)


def _write_some(root: Path, n: int, classes: int, indices: range) -> None:
    yy, xx = np.mgrid[0:375, 0:500]
    for i in indices:
        rng = np.random.default_rng(i)
        split = "train" if i < n else "val"
        folder = root / split / f"c{i % classes:02d}"
        folder.mkdir(parents=True, exist_ok=True)
        phase, scale = rng.uniform(0, 6, 3), rng.uniform(10, 60, (3, 2))
        img = np.stack(
            [
                128 + 90 * np.sin(xx / scale[c, 0] + phase[c]) * np.cos(yy / scale[c, 1] - phase[c])
                for c in range(3)
            ],
            -1,
        )
        img = np.clip(img + rng.normal(0, 8, img.shape), 0, 255).astype(np.uint8)
        if i % 4 == 3:
            img = img.transpose(1, 0, 2)
        Image.fromarray(img).save(folder / f"{i:05d}.jpg", quality=90)


def write_cifar100(root: Path, n_train: int = 50_000, n_val: int = 10_000) -> None:
    """CIFAR-100-sized data in torchvision's pickle format (random pixels and labels)."""
    import pickle

    folder = root / "cifar-100-python"
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for name, n in (("train", n_train), ("test", n_val)):
        entry = {
            "data": rng.integers(0, 256, (n, 3072), dtype=np.uint8),
            "fine_labels": rng.integers(0, 100, n).tolist(),
        }
        with open(folder / name, "wb") as f:
            pickle.dump(entry, f)


def rate(batches, n_batches: int, sync) -> float:
    """Images/s over `n_batches` batches after one untimed warm-up batch."""
    it = iter(batches)
    x, _ = next(it)
    sync()
    images, t0 = 0, time.perf_counter()
    for _ in range(n_batches):
        x, _ = next(it)
        images += len(x)
    sync()
    return images / (time.perf_counter() - t0)


def folder_rates(dataset: Dataset, args, devices: list[torch.device]) -> dict:
    data = load_dataset(dataset)
    recipe = Recipe(preset="paper")
    out = {}
    cpu = torch.device("cpu")
    for w in worker_counts(args.workers):
        b = FolderBatches(data, args.batch, recipe, seed=0, device=cpu, workers=w)
        out[f"pil_{w}w"] = round(rate(b.train(0), args.batches, lambda: None), 1)
    for dev in devices:
        b = TensorFolderBatches(
            data, args.batch, recipe, seed=0, device=dev, readers=max(1, args.workers)
        )
        out[f"tensor_{dev.type}"] = round(rate(b.train(0), args.batches, sync_of(dev)), 1)
    return out


def shard_rates(folder: Path, args, devices: list[torch.device]) -> dict:
    """The same images packed into WebDataset shards (`optbench data pack`), read through both
    pipelines as `folder_rates` reads the folder; with the pack's and the index scan's times."""
    from optbench.data import shards
    from optbench.data.pack import pack_folder

    out_dir = folder.with_name(folder.name + "-shards")  # outside it: pack refuses to nest
    t = time.perf_counter()
    pack_folder(folder, out_dir, per_shard=args.per_shard)
    pack_s = time.perf_counter() - t
    t = time.perf_counter()
    shards.build_index(out_dir, shards.shard_files(out_dir))
    index_s = time.perf_counter() - t
    dataset = Dataset(name="imagefolder", root=out_dir, img_size=224, layout="wds")
    rates = folder_rates(dataset, args, devices)
    folder_data = Dataset(name="imagefolder", root=folder, img_size=224)
    reads = {  # the bytes alone: what the layouts change (decode and crop are the same)
        f"read_us_per_image_{name}": read_us(d)
        for name, d in (("folder", folder_data), ("shards", dataset))
    }
    return {**rates, **reads, "pack_s": round(pack_s, 2), "index_scan_s": round(index_s, 3)}


def read_us(dataset: Dataset) -> float:
    """Microseconds to read one training image's encoded bytes (shards.read_bytes), all of them."""
    from optbench.data.datasets import split_samples
    from optbench.data.shards import read_bytes

    samples = split_samples(load_dataset(dataset), "train")
    t = time.perf_counter()
    for sample, _ in samples:
        read_bytes(sample)
    return round((time.perf_counter() - t) / len(samples) * 1e6, 1)


def cifar_rates(args, devices: list[torch.device]) -> dict:
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 256, (args.cifar, 3, 32, 32), dtype=torch.uint8, generator=g)
    y = torch.randint(0, 100, (args.cifar,), generator=g)
    data = DeviceData(x, y, x[:256], y[:256], 100, (0.5,) * 3, (0.25,) * 3)
    recipe = Recipe(preset="deit")
    out = {}
    cpu = torch.device("cpu")
    for w in worker_counts(args.workers):
        b = PreparedBatches(data, args.cifar_batch, recipe, seed=0, device=cpu, workers=w)
        out[f"pil_{w}w"] = round(rate(b.train(0), args.batches, lambda: None), 1)
    for dev in devices:
        batches = DeviceBatches(data.to(dev), args.cifar_batch, seed=0)
        augment = BatchAugment(
            recipe,
            num_classes=100,
            mean=data.mean,
            std=data.std,
            device=dev,
            img_size=32,
            device_policy=device_policy(recipe, 3, 32),
        )

        def augmented(batches=batches, augment=augment):
            for xb, yb in batches.train(0):
                yield augment.inputs(xb), yb

        out[f"tensor_{dev.type}"] = round(rate(augmented(), args.batches, sync_of(dev)), 1)
    return out


def worker_counts(most: int) -> list[int]:
    """1, 2, 4, ... below `most`, and `most`."""
    return sorted({*(2**k for k in range(most.bit_length()) if 2**k < most), most})


def sync_of(dev: torch.device):
    return torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)


def model_rates(args, devices: list[torch.device]) -> dict:
    from optbench.models.zoo import measure_throughput

    out = {}
    for dev in devices:
        steps, batch = (20, 128) if dev.type == "cuda" else (2, 8)
        for name in (args.model, args.cifar_model):
            rate_ = measure_throughput(name, device=dev, batch_size=batch, steps=steps)
            out[f"{name}_{dev.type}"] = round(rate_, 1)
    return out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--images", type=int, default=2000)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--batches", type=int, default=8, help="timed batches per measurement")
    p.add_argument("--workers", type=int, default=usable_cores())
    p.add_argument("--per-shard", type=int, default=500, help="images per shard")
    p.add_argument("--no-cifar", action="store_true", help="skip the CIFAR-sized measurement")
    p.add_argument("--cifar", type=int, default=10_000)
    p.add_argument("--cifar-batch", type=int, default=256)
    p.add_argument("--model", default="vit_c_1gf")
    p.add_argument("--cifar-model", default="dhvt_tiny_cifar_p4")
    p.add_argument("--no-model", action="store_true", help="skip the model's training rate")
    p.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads (1: a per-core figure; many "
        "intra-op threads on a loaded machine cost more than they give)",
    )
    p.add_argument("--write-jpegs", type=Path, help="only write --images JPEGs into this folder")
    p.add_argument("--write-cifar", type=Path, help="only write CIFAR-100-sized pickles here")
    p.add_argument("--jobs", type=int, default=usable_cores(), help="processes writing JPEGs")
    args = p.parse_args()
    if args.write_jpegs or args.write_cifar:
        if args.write_jpegs:
            write_jpegs(args.write_jpegs, args.images, classes=100, jobs=args.jobs)
        if args.write_cifar:
            write_cifar100(args.write_cifar, n_train=args.cifar, n_val=max(256, args.cifar // 5))
        return
    torch.set_num_threads(args.threads)
    devices = [torch.device("cpu")] + ([torch.device("cuda")] if torch.cuda.is_available() else [])
    load_before = os.getloadavg()
    t_wall, t_cpu = time.perf_counter(), os.times()
    with tempfile.TemporaryDirectory(prefix="optbench-bench-") as tmp:
        t = time.perf_counter()
        write_jpegs(Path(tmp), args.images, jobs=args.jobs)
        generate_s = time.perf_counter() - t
        folder = folder_rates(Dataset(name="imagefolder", root=tmp, img_size=224), args, devices)
        try:
            shards = shard_rates(Path(tmp), args, devices)
        finally:
            shutil.rmtree(Path(tmp + "-shards"), ignore_errors=True)
    cifar = {} if args.no_cifar else cifar_rates(args, devices)
    models = {} if args.no_model else model_rates(args, devices)
    done = os.times()
    print(
        json.dumps(
            {
                "bench": "input_pipeline",
                "unit": "images/s",
                "imagefolder_224px_paper": folder,
                "wds_224px_paper": shards,
                "cifar_32px_deit": cifar,
                "model_training": models,
                "images": args.images,
                "batch": args.batch,
                "cifar_batch": args.cifar_batch,
                "timed_batches": args.batches,
                "generate_s": round(generate_s, 1),
                "cpu": cpu_name(),
                "usable_cores": usable_cores(),
                "torch_threads": torch.get_num_threads(),
                "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
                "load_before": [round(v, 2) for v in load_before],
                "load_after": [round(v, 2) for v in os.getloadavg()],
                "wall_s": round(time.perf_counter() - t_wall, 1),
                # this process and its (DataLoader worker) children
                "user_s": round(
                    done.user - t_cpu.user + done.children_user - t_cpu.children_user, 1
                ),
                "sys_s": round(
                    done.system - t_cpu.system + done.children_system - t_cpu.children_system, 1
                ),
                "torch": torch.__version__,
            }
        )
    )


if __name__ == "__main__":
    main()
