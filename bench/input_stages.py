"""Where the tensor pipeline's time goes on a class folder (issue 66: its on-device path read
2,221 images/s on an H200 where the model trains at about 9,900): each stage of
data/tensor_folder.py's batches timed alone, as images/s, on `--device`:

- read: the reader threads' bytes of a batch's files (`_read`, `--readers` threads);
- decode_device: the batch's JPEGs decoded in one call on the device (`decode`: nvjpeg on CUDA,
  whose hardware backend takes baseline JPEGs on A100/H100/H200, libjpeg-turbo on the CPU);
- decode_host_threads: the same JPEGs decoded by libjpeg-turbo on the host, one image per task
  over `--readers` threads (torchvision's decode releases the GIL), the alternative;
- upload: those host-decoded images copied to the device (whole images, pinned first);
- crop: RandomResizedCrop, flip and stacking per image on the device (`train_images`, no policy);
- policy: the paper recipe's AutoAugment on the cropped batch (`device_policy`).

Stages run one after another on the same batches (the first untimed), so each rate is what that
stage alone could feed; the pipeline's own rate is the slowest stage's or less (its stages
share the host thread but read-ahead, which overlaps). JPEGs as bench/input_pipeline.py writes
them (500x375, quality 90, baseline). One JSON line.

    PYTHONPATH=. python bench/input_stages.py [--device cuda] [--images 2304] [--batch 256]
    PYTHONPATH=. python bench/input_stages.py --device cpu --images 96 --batch 16   # dry run
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from itertools import repeat
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from input_pipeline import write_jpegs  # noqa: E402

from optbench.data.datasets import load_dataset  # noqa: E402
from optbench.data.tensor_folder import (  # noqa: E402
    CPU,
    TensorFolderBatches,
    _decode_jpeg,
    _read,
    decode,
    device_policy,
    train_images,
)
from optbench.host import cpu_name, usable_cores  # noqa: E402
from optbench.spec.recipe import Dataset, Recipe  # noqa: E402


def timed(device: torch.device, fn, batches: list) -> tuple[float, list]:
    """Images/s of `fn` over `batches` after one untimed call on the first (kept as that
    batch's output), and its outputs."""
    first = fn(batches[0])
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    out, images, start = [], 0, time.perf_counter()
    for batch in batches[1:]:
        out.append(fn(batch))
        images += len(batch)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return images / (time.perf_counter() - start), [first, *out]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--images", type=int, default=2304, help="JPEGs generated (9 batches of 256)")
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--readers", type=int, default=None, help="host threads (default: cores - 1)")
    p.add_argument("--threads", type=int, default=None, help="torch's CPU threads")
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.device == "cuda" and not torch.cuda.is_available():
        print(json.dumps({"bench": "input_stages", "skipped": "no CUDA GPU on this machine"}))
        return
    device = torch.device(args.device)
    readers = args.readers or max(1, usable_cores() - 1)
    recipe = Recipe(preset="paper")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "folder"
        write_jpegs(root, args.images, jobs=max(1, usable_cores()))
        data = load_dataset(Dataset(name="imagefolder", root=root, img_size=224))
        tensor = TensorFolderBatches(
            data, args.batch, recipe, seed=0, device=device, readers=readers
        )
        paths = [p for p, _ in tensor.train_samples]
        batches = [
            paths[i : i + args.batch] for i in range(0, len(paths) - args.batch + 1, args.batch)
        ]
        pool = ThreadPoolExecutor(readers)
        policy = device_policy(recipe, 3, 224)
        gen = torch.Generator().manual_seed(0)

        rates = {}
        rates["read"], encoded = timed(device, lambda b: list(pool.map(_read, b)), batches)
        by_paths = dict(zip(map(tuple, batches), encoded, strict=True))
        rates["decode_device"], images = timed(
            device, lambda b: decode(by_paths[tuple(b)], b, device), batches
        )
        rates["decode_host_threads"], host_images = timed(  # as the readers decode with host_decode
            device,
            lambda b: list(pool.map(_decode_jpeg, by_paths[tuple(b)], b, repeat(CPU))),
            batches,
        )
        on_host = dict(zip(map(tuple, batches), host_images, strict=True))
        pin = device.type == "cuda"
        rates["upload"], _ = timed(
            device,
            lambda b: [(im.pin_memory() if pin else im).to(device, non_blocking=pin) for im in on_host[tuple(b)]],
            batches,
        )  # fmt: skip
        decoded = dict(zip(map(tuple, batches), images, strict=True))
        rates["crop"], crops = timed(
            device, lambda b: train_images(decoded[tuple(b)], tensor.plan, gen, None), batches
        )
        cropped = dict(zip(map(tuple, batches), crops, strict=True))
        rates["policy"], _ = timed(device, lambda b: policy(cropped[tuple(b)], gen), batches)
        pool.shutdown()
    slowest = min(rates, key=rates.get)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_name()
    line = {
        "bench": "input_stages",
        "device": name,
        "torch": torch.__version__,
        "machine": platform.node(),
        "readers": readers,
        "batch": args.batch,
        "timed_batches": len(batches) - 1,
        **{f"{k}_img_s": round(v, 1) for k, v in rates.items()},
        "slowest": slowest,
    }
    print(json.dumps(line))


if __name__ == "__main__":
    main()
