"""Benchmark: 10,000 synthetic trials through write_report (every figure, 1,000 bootstrap
resamples). Prints one JSON line with the wall time; not a test."""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

from optbench.report.synthetic import synthetic_trials
from optbench.report.writer import write_report
from optbench.spec.schema import parse_spec

MODELS = ["vit_p_w64_16px", "vit_c_w64_16px"]
OPTIMIZERS = ["adamw", "sgd"]
EPOCHS = [10, 20, 40, 80]
N_SAMPLES = 625  # 2 models x 2 optimizers x 4 lengths x 625 = 10,000 trials


def main() -> None:
    spec = parse_spec(
        {
            "name": "bench",
            "dataset": {"name": "digits", "img_size": 16},
            "models": MODELS,
            "optimizers": OPTIMIZERS,
            "epochs": EPOCHS,
            "batch_size": 64,
            "search": {
                "n_samples": N_SAMPLES,
                "ranges": {
                    "adamw": {"lr": [2.5e-4, 8e-3], "wd": [0.02, 0.8]},
                    "sgd": {"lr": [0.1, 3.2], "wd": [4e-6, 1.2e-4]},
                },
            },
        }
    )
    trials = synthetic_trials(MODELS, OPTIMIZERS, EPOCHS, N_SAMPLES, pending_fraction=0.01)
    with tempfile.TemporaryDirectory() as out:
        start = time.perf_counter()
        summary = write_report(spec, trials, Path(out), data_shape=(10, 1, 16))
        seconds = time.perf_counter() - start
        files = sorted(p.name for p in Path(out).iterdir())
    print(
        json.dumps(
            {
                "bench": "report",
                "trials": len(trials),
                "results": summary["n_results"],
                "cells": len(summary["cells"]),
                "n_boot": 1000,
                "files": len(files),
                "seconds": round(seconds, 2),
            }
        )
    )


if __name__ == "__main__":
    main()
