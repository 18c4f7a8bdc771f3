"""Benchmark: what the data check before a run costs on an ImageNet-sized class-folder tree
(1,000 classes, 1,281,167 train and 50,000 val files; each one byte: the check stats files, it
decodes none). Times `check_dataset_files` (count each class folder's images by name, refuse an
empty file) on the tree just written (its folders in the page cache: a cold or network file
system is slower). Prints one JSON line; not a test.

    PYTHONPATH=. python bench/folder_check.py [--train 1281167] [--val 50000] [--dir /tmp]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import tempfile
import time
from pathlib import Path

CLASSES = 1000


def write_tree(root: Path, n_train: int, n_val: int) -> None:
    """One-byte .JPEG files spread evenly over CLASSES class folders of each split."""
    for split, n in (("train", n_train), ("val", n_val)):
        for c in range(CLASSES):
            folder = root / split / f"n{c:08d}"
            folder.mkdir(parents=True)
            for i in range(c, n, CLASSES):
                fd = os.open(folder / f"{i:08d}.JPEG", os.O_WRONLY | os.O_CREAT, 0o644)
                os.write(fd, b"x")
                os.close(fd)


def cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train", type=int, default=1_281_167)
    parser.add_argument("--val", type=int, default=50_000)
    parser.add_argument("--dir", default=None, help="where to write the tree (default: $TMPDIR)")
    args = parser.parse_args()
    from optbench.data.datasets import check_dataset_files
    from optbench.spec.recipe import Dataset

    load_before = os.getloadavg()[0]
    root = Path(tempfile.mkdtemp(prefix="optbench-folder-check-", dir=args.dir))
    try:
        start = time.perf_counter()
        write_tree(root, args.train, args.val)
        write_s = time.perf_counter() - start
        cpu, start = cpu_s(), time.perf_counter()
        check_dataset_files(Dataset(name="imagefolder", root=root))
        check_s, check_cpu = time.perf_counter() - start, cpu_s() - cpu
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(
        json.dumps(
            {
                "bench": "folder_check",
                "files": args.train + args.val,
                "classes": CLASSES,
                "write_s": round(write_s, 1),
                "check_s": round(check_s, 2),
                "check_user_sys_s": round(check_cpu, 2),
                "load_1min": {"before": round(load_before, 2), "after": round(os.getloadavg()[0], 2)},
            }
        )
    )  # fmt: skip


if __name__ == "__main__":
    main()
