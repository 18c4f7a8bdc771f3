"""The measured cost plan: what a study's trials cost on a device, before any of them runs.

`optbench run STUDY --dry-run --measure` times a short training run of each distinct training
configuration of the study (`distinct_configs`: the model, optimizer, recipe, per-process batch,
dataset, input pipeline and population; not lr, wd, seed or epochs, which change no step's
cost) on this machine (train/measure.py), and caches the figures in the study folder
(`<output>/<name>/costs.json`) per (device name, configuration). The plan table
(cli/terminal_tables.py: plan_table) turns the cache into device-hours per cell and in total, the
SLURM `time_min` a job needs (`job_minutes`: the estimate + 25% + 5 min), and whether a trial fits
its device at its batch; `optbench status` compares the estimate with the finished trials' wall time
(`estimate_note`). Without `--measure` the plan reads the cache only and says which cells are
measured and which are missing.

A trial's estimate (`trial_seconds`): start-up and warm-up as measured, then per epoch the
training steps at the measured step time, one validation pass and one checkpoint write. Under
DDP (executor.slurm nodes x tasks) each process runs at the measured speed of its share of the
batch, and the validation pass is split among them (no all-reduce cost is counted). A
population (executor.population > 1) is measured as its solo trials are.
"""

from __future__ import annotations

import hashlib
import json
import math
import statistics
from dataclasses import dataclass

from optbench import safefs
from optbench.data.catalogue import CATALOGUE
from optbench.errors import UsageError
from optbench.plan.trials import Trial, plan
from optbench.spec.caps import MAX_BATCH
from optbench.spec.schema import StudySpec

COSTS_FILE = "costs.json"
MAX_COSTS_BYTES = 4 * 2**20
MARGIN, MARGIN_MIN = 1.25, 5  # SLURM time_min: the estimate x MARGIN + MARGIN_MIN minutes


def processes(spec: StudySpec) -> int:
    """The processes that train one trial (DDP), 1 off SLURM."""
    s = spec.executor.slurm
    return s.nodes * s.tasks if spec.executor.kind == "slurm" else 1


def config_key(spec: StudySpec, trial: Trial) -> str:
    """What a step of `trial` costs depends on, hashed: not lr, wd, seed or epochs."""
    cfg = trial.config.model_dump(mode="json", exclude={"lr", "wd", "seed", "epochs"})
    cfg["dataset"].pop("root", None)
    cfg["per_process_batch"] = max(1, trial.config.batch_size // processes(spec))
    cfg["pipeline"] = spec.dataset.pipeline
    cfg["population"] = spec.executor.population
    blob = json.dumps(cfg, sort_keys=True, default=str).encode()
    return f"{trial.cell.model}-{trial.cell.optimizer}-{hashlib.sha256(blob).hexdigest()[:12]}"


def distinct_configs(spec: StudySpec) -> dict[str, Trial]:
    """One trial of each distinct training configuration, by config_key, in plan order."""
    found: dict[str, Trial] = {}
    for trial in plan(spec):
        found.setdefault(config_key(spec, trial), trial)
    return found


def read_costs(spec: StudySpec) -> dict[str, dict[str, dict]]:
    """The study's cache: device name -> config key -> figures ({} without a cache). The file
    is read as untrusted input (`cache_problem`): one that is not what --measure writes is one
    line naming the file and the field, exit 2."""
    path = spec.study_dir / COSTS_FILE
    raw = safefs.read_bytes(path, spec.output, MAX_COSTS_BYTES)
    if raw is None:
        return {}
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):  # RecursionError: nested deeper than Python's stack
        data, problem = None, "not JSON"
    else:
        problem = cache_problem(data)
    if problem is not None:
        raise UsageError(
            f"{path}: not a cost cache optbench wrote ({problem}); remove it and measure again"
        )
    return data


# Each figure of a cache entry (measure.measure_config's): its type and range. A figure outside
# them would make the plan a traceback (a string, 1e308 s overflowing time_min) or a lie (batch
# 0, negative times: "-278 device-hours"). Times are capped at a day: no step, evaluation of
# an image, checkpoint or start-up of a trial takes one.
_DAY = 86_400.0
FIGURES: dict[str, tuple[type, float, float]] = {
    "batch": (int, 1, MAX_BATCH),
    "n_train": (int, 1, 2**53),
    "n_val": (int, 0, 2**53),
    "step_s": (float, 0, _DAY),
    "eval_s_per_image": (float, 0, _DAY),
    "checkpoint_s": (float, 0, _DAY),
    "start_s": (float, 0, _DAY),
}
# Figures the plan and the table may show, checked where present.
OPTIONAL_FIGURES: dict[str, tuple[type, float, float]] = {
    "steps": (int, 1, 2**31),
    "warmup": (int, 0, 2**31),
    "images_per_s": (float, 0, 1e12),
    "input_wait": (float, 0, 1),
    "peak_memory_bytes": (int, 0, 2**63),
    "device_memory_bytes": (int, 0, 2**63),
}


def cache_problem(data) -> str | None:
    """What makes `data` (costs.json, parsed) not a cache --measure writes, naming the entry and
    field; None where it is one. An entry is a configuration's figures (FIGURES, and
    OPTIONAL_FIGURES where present), with `fits` (whether the study's batch fit) and
    `fitting_batch` (the batch measured), or, for a configuration too large at every batch,
    `fits: false` and `fitting_batch: null` alone. Other fields must be plain values."""
    if not isinstance(data, dict):
        return "not a JSON object of devices"
    for device, entries in data.items():
        if not _printable(device):  # the plan prints it: no terminal escape sequence
            return f"{device!r:.60}: not a device name (printable text of 1 to 200 characters)"
        if not isinstance(entries, dict):
            return f"{device}: not an object of configurations"
        for key, entry in entries.items():
            if not _printable(key):
                return f"{device} / {key!r:.60}: not a configuration key (printable text)"
            problem = _entry_problem(entry)
            if problem is not None:
                return f"{device} / {key}: {problem}"
    return None


def _printable(name: str) -> bool:
    return 0 < len(name) <= 200 and name.isprintable()


def _entry_problem(entry) -> str | None:
    if not isinstance(entry, dict):
        return "not an object of figures"
    for name, value in entry.items():
        if not (value is None or isinstance(value, (str, int, float, bool))):
            return f"{name}: not a plain value"
    if type(entry.get("fits")) is not bool:
        return "fits: not true or false"
    if entry["fits"] is False and entry.get("fitting_batch") is None:
        return None  # too large at every batch: no figures
    optional = {**OPTIONAL_FIGURES, "fitting_batch": (int, 1, MAX_BATCH)}
    figures = {**FIGURES, **{k: v for k, v in optional.items() if entry.get(k) is not None}}
    for name, (kind, lo, hi) in figures.items():
        value = entry.get(name)
        numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not numeric or (kind is int and not isinstance(value, int)):
            return f"{name}: not {'an integer' if kind is int else 'a number'} ({value!r:.40})"
        if not (math.isfinite(value) and lo <= value <= hi):
            return f"{name}: {value!r:.40} is not within {lo:g}..{hi:g}"
    return None


def measure_study(spec: StudySpec, *, steps: int, warmup: int, notify=print) -> dict[str, dict]:
    """Time each distinct configuration on this machine (a GPU if there is one) and add the
    figures to the study's cache; the figures, by config key. Writes only in the study folder."""
    import torch

    from optbench.host import training_device
    from optbench.train.measure import device_name, measure_config

    device = training_device()
    if device == "cpu":
        torch.set_num_threads(cpu_threads(spec))
    name = device_name(torch.device(device))
    configs = distinct_configs(spec)
    safefs.make_dirs(spec.study_dir, spec.output)
    measured = {}
    for n, (key, trial) in enumerate(configs.items(), 1):
        notify(f"measuring {n}/{len(configs)}: {key} ({warmup} + {steps} steps on {name})")
        cfg = trial.config.model_copy(
            update={"batch_size": max(1, trial.config.batch_size // processes(spec))}
        )
        measured[key] = measure_config(
            cfg, trial.execution, device, steps=steps, warmup=warmup, scratch=spec.study_dir
        )
    cache = read_costs(spec)
    cache.setdefault(name, {}).update(measured)
    safefs.write_text(spec.study_dir / COSTS_FILE, spec.output, json.dumps(cache, indent=1))
    return measured


def cpu_threads(spec: StudySpec) -> int:
    """The torch threads one of the study's CPU trials gets: a local worker's share of the
    cores, all of them in the debug executor, a SLURM job's cpus_per_task."""
    from optbench.executors import pool_size
    from optbench.host import usable_cores

    if spec.executor.kind == "slurm":
        return spec.executor.slurm.cpus_per_task
    if spec.executor.kind == "debug":
        return usable_cores()
    return pool_size(spec.executor.workers, usable_cores())[1]


def trial_seconds(
    figures: dict, spec: StudySpec, epochs: int, n_train: int | None = None
) -> float | None:
    """One trial's wall time from a configuration's figures (module docstring), at `n_train`
    training images (default: as many as the measured copy had); None where the figures are
    of a smaller batch than a process gets (it does not fit)."""
    if not figures.get("fits"):
        return None
    steps = (n_train or figures["n_train"]) // (figures["batch"] * processes(spec)) or 1
    # the published validation size where there is one: a measured copy may be a sample
    n_val = CATALOGUE[spec.dataset.name].n_val or figures["n_val"]
    epoch_s = steps * figures["step_s"] + n_val * figures["eval_s_per_image"] / processes(spec)
    return figures["start_s"] + epochs * (epoch_s + figures["checkpoint_s"])


def job_minutes(trial_s: float, trials_per_job: int) -> int:
    """The SLURM time_min a job of `trials_per_job` trials of `trial_s` seconds needs."""
    return math.ceil(MARGIN * trials_per_job * trial_s / 60) + MARGIN_MIN


@dataclass(frozen=True)
class CostPlan:
    """The cache read for a study: the device chosen and each cell's figures (None: missing)."""

    device: str | None
    figures: dict  # cell -> figures or None

    def trial_s(self, spec: StudySpec, cell, n_train: int | None = None) -> float | None:
        figures = self.figures.get(cell)
        return None if figures is None else trial_seconds(figures, spec, cell.epochs, n_train)


def cost_plan(spec: StudySpec) -> CostPlan:
    """Each cell's measured figures from the cache, on the device with the most of this
    study's configurations measured."""
    cache = read_costs(spec)
    if not cache:
        return CostPlan(None, {})
    keys = {}  # every trial of a cell has its configuration (lr, wd and seed cost nothing)
    for trial in plan(spec):
        keys.setdefault(trial.cell, config_key(spec, trial))
    device = max(sorted(cache), key=lambda d: sum(k in cache[d] for k in keys.values()))
    return CostPlan(device, {cell: cache[device].get(key) for cell, key in keys.items()})


def plan_notes(spec: StudySpec, costs: CostPlan, todo: dict, n_train: int) -> list[str]:
    """The plan's caption lines about measured costs: the device, device-hours, time_min per
    job, what is missing and what does not fit. `todo`: cell -> trials left to run;
    `n_train`: the training images of an epoch (the dataset's published size, where known)."""
    if costs.device is None:
        return ["no measured costs yet: `optbench run STUDY --dry-run --measure` times each "
                "training configuration on this machine"]  # fmt: skip
    lines, hours, longest, missing, too_big = [], 0.0, 0.0, [], []
    for cell in spec.cells():
        figures, trial_s = costs.figures.get(cell), costs.trial_s(spec, cell, n_train)
        label = f"{cell.model}/{cell.optimizer}/e{cell.epochs}"
        if figures is None:
            missing.append(label)
        elif trial_s is None and figures.get("fitting_batch") is None:  # not even at batch 1
            too_big.append(
                f"{label} does not fit at batch {figures_batch(spec, cell)} per process, nor at "
                "batch 1: too large for one device"
            )
        elif trial_s is None:
            gpus = -(-figures_batch(spec, cell) // figures["fitting_batch"])
            too_big.append(
                f"{label} does not fit at batch {figures_batch(spec, cell)} per process "
                f"(fits at {figures.get('fitting_batch')}: {gpus * processes(spec)} GPUs per "
                "trial with DDP)"
            )
        else:
            hours += todo.get(cell, 0) * trial_s * processes(spec) / 3600
            longest = max(longest, trial_s)
    per_job = spec.executor.slurm.trials_per_job
    lines.append(
        f"measured on {costs.device} (cached in {spec.study_dir / COSTS_FILE}): "
        f"{hours:.3g} device-hours to run the cells measured"
        + (
            f"; a SLURM job of {per_job} trial(s) needs time_min >= "
            f"{job_minutes(longest, per_job)} (the longest trial, {longest / 60:.3g} min, "
            f"+{MARGIN - 1:.0%} +{MARGIN_MIN} min; executor.slurm.time_min is "
            f"{spec.executor.slurm.time_min})"
            if longest
            else ""
        )
    )
    if missing:
        lines.append(f"not measured on it: {', '.join(missing)}")
    lines.extend(too_big)
    if spec.executor.population > 1:
        lines.append("population trials measured as solo trials (their speed-up is not counted)")
    return lines


def figures_batch(spec: StudySpec, cell) -> int:
    """The batch one process of a trial of `cell` trains at."""
    return max(1, spec.batch_size // processes(spec))


def estimate_note(spec: StudySpec, store) -> str | None:
    """Estimated vs measured trial time per cell, for the cells with finished trials and a
    measured estimate (`optbench status`; `store`: the study's Store); None where none."""
    costs = cost_plan(spec)
    if costs.device is None:
        return None
    stored = store.read(plan(spec))
    parts = []
    for cell in spec.cells():
        estimate = costs.trial_s(spec, cell)
        walls = [
            s.record.user_attrs.get("wall_s")
            for s in stored
            if s.trial.cell == cell and s.status == "finished" and s.record is not None
        ]
        walls = [w for w in walls if isinstance(w, (int, float)) and w > 0]
        if estimate is None or not walls:
            continue
        wall = statistics.median(walls)
        parts.append(
            f"{cell.model}/{cell.optimizer}/e{cell.epochs} {_clock(estimate)} vs "
            f"{_clock(wall)} ({estimate / wall - 1:+.0%}, {len(walls)} trial(s))"
        )
    if not parts:
        return None
    return f"trial time, estimated on {costs.device} vs measured (median): " + "; ".join(parts)


def _clock(seconds: float) -> str:
    return f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.0f} s"
