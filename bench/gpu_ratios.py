"""Issue 66's figures in one JSON line, from the logs `CHECKS=ratios bash bench/gpu_checks.sh`
leaves in its output folder: per training configuration of bench/step_parts.py, the MFU of the
model alone and of the trial, input / model alone, trial / model alone, the share of the steps
waiting for input, the host syncs per step, the epoch's evaluation beside its training, and
the steps' profile (bench/step_profile.py: operations per step, the device's busy share, time by
kind of operation); the tensor pipeline's stages on a class folder, each alone
(bench/input_stages.py); population K / solo per model (bench/population.py, K = 4 and 16);
and a short trial's wall time over its epochs with the clock its step parts came from
(`optbench train`'s result.json). A figure whose log is missing or failed is null, so the line
is always printed.

    python3 bench/gpu_ratios.py OUT_DIR
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def json_lines(path: Path) -> list[dict]:
    """The JSON objects among `path`'s lines ([] where it is missing)."""
    if not path.is_file():
        return []
    out = []
    for line in path.read_text(errors="replace").splitlines():
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return out


def step_figures(lines: list[dict]) -> dict:
    figures = {}
    for line in lines:
        if line.get("bench") != "step_parts" or "config" not in line:
            continue
        figures[line["config"]] = {
            "mfu_model": line["mfu_model"],
            "mfu_trial": line["mfu_trial"],
            "input_over_model": line["input_over_model"],
            "harness_over_model": line["harness_over_model"],
            "trial_over_model": line["trial_over_model"],
            "trial_img_s": line["trial_img_s"],
            "input_wait_share": line["step_shares"]["input_wait"],
            "syncs_per_step": line["syncs_per_step"],
            "sync_sites": line.get("sync_sites"),
            "evaluation": line.get("evaluation"),
            "profile": profile_figures(line.get("profile")),
            "profile_model": profile_figures(line.get("profile_model")),
        }
    return figures


def profile_figures(profile: dict | None) -> dict | None:
    """bench/step_profile.py's figures of a profile (the trial's or the model's steps), less its
    list of top operations."""
    if not profile:
        return None
    keys = ("ops_per_step", "busy_share", "busy_share_unprofiled", "kind_shares",
            "matmul_time_efficiency")  # fmt: skip
    return {k: profile.get(k) for k in keys}


def input_stages(lines: list[dict]) -> dict | None:
    """bench/input_stages.py's images/s per stage of the tensor pipeline, and the slowest."""
    for line in lines:
        if line.get("bench") == "input_stages" and "slowest" in line:
            return {k: v for k, v in line.items() if k.endswith("_img_s") or k == "slowest"}
    return None


def population_figures(lines: list[dict], figure=lambda row: row["speedup"]) -> dict:
    """`figure` of each K's result row, per model (default: population / solo images/s); a K
    that failed, or whose row lacks the figure, is left out, and a model left with none."""
    figures = {}
    for line in lines:
        if line.get("bench") == "population":
            ran = (r for r in line["results"] if "failed" not in r)
            values = {str(r["k"]): v for r in ran if (v := figure(r)) is not None}
            if values:
                figures[line["model"]] = values
    return figures


def ops_over_solo(row: dict) -> float | None:
    """A K's operations per step, population / solo (bench/population.py --profile): below 1/K,
    fewer launches per member than a solo trial's; None without the profile."""
    if not row.get("solo_ops_per_step"):
        return None
    return round(row["population_ops_per_step"] / row["solo_ops_per_step"], 4)


def trial_figures(lines: list[dict]) -> dict | None:
    for r in lines:
        timing = r.get("timing") or {}
        if r.get("status") == "finished" and timing.get("epochs"):
            steps = timing.get("steps") or {}
            return {
                "wall_over_epochs": round(r["wall_s"] / timing["epochs"], 3),
                "step_clock": steps.get("clock"),
                "first_step_s": timing.get("first_step_s"),
            }
    return None


def main() -> None:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "bench/out")
    env = (out / "env.txt").read_text().strip() if (out / "env.txt").is_file() else None
    steps = [line for log in sorted(out.glob("step_parts*.log")) for line in json_lines(log)]
    summary = next((s for s in steps if s.get("summary")), {})  # the device's, either run
    population = json_lines(out / "population_vit_c.log") + json_lines(out / "population_dhvt.log")
    line = {
        "bench": "gpu_ratios",
        "env": env,
        "device": summary.get("device"),
        "matmul_tflops": summary.get("matmul_tflops"),
        "configs": step_figures(steps) or None,
        "input_stages": input_stages(json_lines(out / "input_stages.log")),
        "population_over_solo": population_figures(population) or None,
        "population_ops_over_solo": population_figures(population, ops_over_solo) or None,
        "quickstart_trial": trial_figures(json_lines(out / "train_steps_result.log")),
    }
    print(json.dumps(line))


if __name__ == "__main__":
    main()
