"""bench/gpu_ratios.py, which turns the device script's logs into issue 66's one line: a log
cut short or a measurement that failed on the device (a population out of memory at K = 16)
leaves its figure out, never the line nor the figures that were measured."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(BENCH))
import gpu_ratios  # noqa: E402


def population_line(model: str, rows: list[dict]) -> dict:
    return {"bench": "population", "model": model, "results": rows}


def measured(k: int, speedup: float) -> dict:
    return {
        "k": k,
        "speedup": speedup,
        "solo_ops_per_step": 100.0,
        "population_ops_per_step": 10.0 * k,
    }


def test_a_failed_k_is_left_out_and_the_measured_ks_kept():
    lines = [
        population_line("vit_c_w64_16px", [measured(1, 1.0), measured(4, 2.5), measured(16, 5.0)]),
        population_line(
            "dhvt_tiny_cifar_p4", [measured(1, 1.0), {"k": 16, "failed": "population"}]
        ),
        population_line("only_failed", [{"k": 4, "failed": "solo"}]),
    ]
    assert gpu_ratios.population_figures(lines) == {
        "vit_c_w64_16px": {"1": 1.0, "4": 2.5, "16": 5.0},
        "dhvt_tiny_cifar_p4": {"1": 1.0},
    }
    ops = gpu_ratios.population_figures(lines, gpu_ratios.ops_over_solo)
    assert ops["vit_c_w64_16px"] == {"1": 0.1, "4": 0.4, "16": 1.6}


def test_the_line_is_printed_from_partial_logs(tmp_path):
    (tmp_path / "population_dhvt.log").write_text(
        "population: population K=16 failed (1): CUDA out of memory\n"
        + json.dumps(
            population_line(
                "dhvt_tiny_cifar_p4", [measured(4, 3.0), {"k": 16, "failed": "population"}]
            )
        )
        + "\n{cut short"
    )
    done = subprocess.run([sys.executable, str(BENCH / "gpu_ratios.py"), str(tmp_path)],
                          capture_output=True, text=True, check=True)  # fmt: skip
    line = json.loads(done.stdout)
    assert line["population_over_solo"] == {"dhvt_tiny_cifar_p4": {"4": 3.0}}
    assert (
        line["configs"] is None
        and line["input_stages"] is None
        and line["quickstart_trial"] is None
    )


def test_a_configs_evaluation_is_kept_and_an_older_log_without_it_gives_null():
    base = {
        "bench": "step_parts",
        **dict.fromkeys(("mfu_model", "mfu_trial", "input_over_model", "harness_over_model"), 0.1),
        "trial_over_model": 0.9,
        "trial_img_s": 100.0,
        "step_shares": {"input_wait": 0.01},
        "syncs_per_step": 0.0,
    }
    evaluation = {"img_s": {"1": 10.0, "4": 20.0}, "counts_equal": True}
    figures = gpu_ratios.step_figures(
        [{**base, "config": "new", "evaluation": evaluation}, {**base, "config": "old"}]
    )
    assert figures["new"]["evaluation"] == evaluation and figures["old"]["evaluation"] is None
