"""The measured cost plan: what a study's trials cost on a device, before any of them runs.

`optbench run STUDY --dry-run --measure` times a short training run of each distinct training
configuration of the study (`distinct_configs`: the model, optimizer, recipe, per-process batch,
dataset, input pipeline and population; not lr, wd, seed or epochs, which change no step's
cost) on this machine (train/measure.py), and caches the figures in the study folder
(`<output>/<name>/costs.json`) per (device name, configuration). The plan table
(cli/terminal_tables.py: plan_table) turns the cache into device-hours per cell and in total, the
SLURM `time_min` a job needs (`job_minutes`: the estimate + 25% + 5 min), and whether a trial fits
its device at its batch; `optbench status` compares the estimate with the finished trials' wall time
and, on SLURM, with the completed jobs' elapsed time by sacct (`estimate_notes`). Without
`--measure` the plan reads the cache only and says which cells are measured and which are missing.

What is measured, each in the trainer's own code and in a fresh Python process as a job runs its
trial (train/measure.py: `measure_fresh`): the process's start, imports and exit (`process_s`), the
trial's start (its data, model, optimizer and EMA built, and what its first steps take beyond the
steady pace: `start_s`), the step time, an epoch's end as the recipe runs it (precise BN where
recipe.precise_bn_images asks for it: `precise_bn_s`; the validation pass of the raw weights and
the EMA: `eval_s_per_image`), a checkpoint write and the trial's end (its weights' digest:
`end_s`). A cache entry without the fixed costs (an optbench before issue 43's) counts as not
measured and the plan says so.

A trial's estimate (`trial_seconds`, result.json's wall_s): `start_s`, then per epoch the
training steps at the measured step time, precise BN, one validation pass and one checkpoint
write, then `end_s`. A SLURM job's (`job_seconds`, sacct's elapsed): `process_s` and its trials
one after another; the plan's total counts one job start per job (`job_starts`). Not counted:
queueing, what SLURM does outside the job's process (prolog, epilog), the driver's own work,
a local worker's start (once per run), tracker latency, and DDP's all-reduce: under
DDP (executor.slurm nodes x tasks) each process runs at the measured speed of its share of the
batch, and the validation pass is split among them. A population (executor.population > 1) is
measured as its solo trials are.
"""

from __future__ import annotations

import hashlib
import json
import math
import statistics
from dataclasses import dataclass

from optbench import safefs
from optbench.errors import UsageError
from optbench.plan.trials import Trial, plan
from optbench.spec.caps import MAX_BATCH
from optbench.spec.catalogue import CATALOGUE
from optbench.spec.schema import StudySpec
from optbench.trial.timing import CHECKPOINT_SHARE

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
    "precise_bn_s": (float, 0, _DAY),
    "end_s": (float, 0, _DAY),
    "process_s": (float, 0, _DAY),
}
# The fixed costs measured since issue 43: an entry without them is an earlier optbench's, whose
# estimate missed them, and counts as not measured.
FIXED_FIGURES = ("precise_bn_s", "end_s", "process_s")


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
    from optbench.train.measure import device_name, measure_fresh

    device = training_device()
    threads = cpu_threads(spec)
    if device == "cpu":
        torch.set_num_threads(threads)
    name = device_name(torch.device(device))
    configs = distinct_configs(spec)
    safefs.make_dirs(spec.study_dir, spec.output)
    measured = {}
    for n, (key, trial) in enumerate(configs.items(), 1):
        notify(f"measuring {n}/{len(configs)}: {key} ({warmup} + {steps} steps on {name})")
        cfg = trial.config.model_copy(
            update={"batch_size": max(1, trial.config.batch_size // processes(spec))}
        )
        measured[key] = measure_fresh(
            cfg,
            trial.execution,
            device,
            steps=steps,
            warmup=warmup,
            scratch=spec.study_dir,
            threads=threads,
        )
    cache = read_costs(spec)
    cache.setdefault(name, {}).update(measured)
    safefs.write_text(spec.study_dir / COSTS_FILE, spec.output, json.dumps(cache, indent=1))
    return measured


def cpu_threads(spec: StudySpec) -> int:
    """The torch threads one of the study's CPU trials gets: a local worker's share of the
    cores, all of them in the debug executor, a SLURM job's cpus_per_task."""
    from optbench.executors.local import pool_size
    from optbench.host import usable_cores

    if spec.executor.kind == "slurm":
        return spec.executor.slurm.cpus_per_task
    if spec.executor.kind == "debug":
        return usable_cores()
    return pool_size(spec.executor.workers, usable_cores())[1]


def trial_parts(
    figures: dict, spec: StudySpec, epochs: int, n_train: int | None = None
) -> dict[str, float] | None:
    """One trial's wall time (result.json's wall_s) from a configuration's figures (module
    docstring), by the parts result.json's `timing` names (trial/timing.py; `start` is its
    setup, data and model together), at `n_train` training images (default: as many as the
    measured copy had); None where the figures are of a smaller batch than a process gets (it
    does not fit). Checkpoints at train/loop.py's cadence: one after the first epoch, then at
    most CHECKPOINT_SHARE of the time, none after the last."""
    if not figures.get("fits"):
        return None
    steps = (n_train or figures["n_train"]) // (figures["batch"] * processes(spec)) or 1
    # the published validation size where there is one: a measured copy may be a sample
    n_val = CATALOGUE[spec.dataset.name].n_val or figures["n_val"]
    training = epochs * steps * figures["step_s"]
    evaluation = epochs * (
        n_val * figures["eval_s_per_image"] / processes(spec) + figures["precise_bn_s"]
    )
    checkpoints = min(
        (epochs - 1) * figures["checkpoint_s"],
        figures["checkpoint_s"] + CHECKPOINT_SHARE * (training + evaluation),
    )
    return {
        "start": figures["start_s"],
        "epochs": training,
        "evaluation": evaluation,
        "checkpoints": checkpoints,
        "end": figures["end_s"],
    }


def trial_seconds(
    figures: dict, spec: StudySpec, epochs: int, n_train: int | None = None
) -> float | None:
    """One trial's wall time: its parts (trial_parts) added up; None where it does not fit."""
    parts = trial_parts(figures, spec, epochs, n_train)
    return None if parts is None else sum(parts.values())


def job_seconds(figures: dict, trial_s: float, trials: int) -> float:
    """A SLURM job's time (sacct's elapsed) that runs `trials` trials of `trial_s` seconds one
    after another: its process's start, imports and exit as measured (`process_s`), and the trials.
    What SLURM does outside that process (prolog, epilog, staging) is not measured here."""
    return figures["process_s"] + trials * trial_s


def job_starts(spec: StudySpec, trials: int, per_job: int) -> float:
    """How many job starts `trials` trials of a cell cost: on SLURM one per job of `per_job`
    trials (trials_per_job; a population counts as one trial), as a share where a job holds
    trials of several cells; elsewhere none (a local worker starts once per run, the debug
    executor runs in the driver)."""
    if spec.executor.kind != "slurm":
        return 0.0
    return trials / spec.executor.population / per_job


# trials_per_job auto: a job runs trials until its start (process_s) is at most this share of it.
START_SHARE = 0.10


def packed_trials(process_s: float, trial_s: float, time_min: int) -> int:
    """How many trials of `trial_s` seconds one SLURM job of `auto` runs: the fewest that make
    its start (`process_s`) at most START_SHARE of the job, but no more than fit in `time_min`
    with the plan's margin (job_minutes); at least one."""
    if trial_s <= 0:
        return 1
    wanted = math.ceil(process_s * (1 - START_SHARE) / (START_SHARE * trial_s))
    fitting = math.floor(((time_min - MARGIN_MIN) * 60 / MARGIN - process_s) / trial_s)
    return max(1, min(wanted, fitting))


def trials_per_job(spec: StudySpec, costs: CostPlan | None = None) -> int:
    """slurm.trials_per_job, `auto` resolved: the fewest of `packed_trials` over the study's
    cells (each at its measured costs), 1 where a cell has none (its trial might not fit)."""
    setting = spec.executor.slurm.trials_per_job
    if setting != "auto":
        return setting
    costs = costs or cost_plan(spec)
    time_min = spec.executor.slurm.time_min
    packed = []
    for cell in spec.cells():
        trial_s, figures = costs.trial_s(spec, cell), costs.figures.get(cell)
        if trial_s is None or figures is None:
            return 1
        packed.append(packed_trials(figures["process_s"], trial_s, time_min))
    return min(packed, default=1)


def job_minutes(job_s: float) -> int:
    """The SLURM time_min a job of `job_s` seconds needs."""
    return math.ceil(MARGIN * job_s / 60) + MARGIN_MIN


@dataclass(frozen=True)
class CostPlan:
    """The cache read for a study: the device chosen and each cell's figures (None: missing)."""

    device: str | None
    figures: dict  # cell -> figures or None
    stale: tuple = ()  # cells measured by an earlier optbench (FIXED_FIGURES): not in figures

    def trial_s(self, spec: StudySpec, cell, n_train: int | None = None) -> float | None:
        figures = self.figures.get(cell)
        return None if figures is None else trial_seconds(figures, spec, cell.epochs, n_train)

    def parts(self, spec: StudySpec, cell) -> dict[str, float] | None:
        figures = self.figures.get(cell)
        return None if figures is None else trial_parts(figures, spec, cell.epochs)


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
    found = {cell: cache[device].get(key) for cell, key in keys.items()}
    stale = tuple(
        cell
        for cell, e in found.items()
        if e is not None and e.get("fits") is not False and not all(k in e for k in FIXED_FIGURES)
    )
    return CostPlan(device, {c: None if c in stale else e for c, e in found.items()}, stale)


def plan_notes(spec: StudySpec, costs: CostPlan, todo: dict, n_train: int) -> list[str]:
    """The plan's caption lines about measured costs: the device, device-hours, time_min per
    job, what is missing and what does not fit. `todo`: cell -> trials left to run;
    `n_train`: the training images of an epoch (the dataset's published size, where known)."""
    if costs.device is None:
        return ["no measured costs yet: `optbench run STUDY --dry-run --measure` times each "
                "training configuration on this machine"]  # fmt: skip
    lines, hours, longest, missing, too_big = [], 0.0, None, [], []
    per_job = trials_per_job(spec, costs)
    for cell in spec.cells():
        figures, trial_s = costs.figures.get(cell), costs.trial_s(spec, cell, n_train)
        label = _label(cell)
        if figures is None:
            if cell not in costs.stale:
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
            n = todo.get(cell, 0)
            hours += (
                (n * trial_s + job_starts(spec, n, per_job) * figures["process_s"])
                * processes(spec)
                / 3600
            )
            job = (job_seconds(figures, trial_s, per_job), trial_s, figures["process_s"])
            longest = max(longest or job, job)
    lines.append(
        f"measured on {costs.device} (cached in {spec.study_dir / COSTS_FILE}): "
        f"{hours:.3g} device-hours to run the cells measured"
        + (" (with one start per SLURM job)" if spec.executor.kind == "slurm" else "")
        + (
            f"; a SLURM job of {per_job} trial(s) needs time_min >= {job_minutes(longest[0])} "
            f"(the longest, {longest[0] / 60:.3g} min: trials of {_clock(longest[1])} each, its "
            f"process's start and exit {_clock(longest[2])}; +{MARGIN - 1:.0%} +{MARGIN_MIN} min; "
            f"executor.slurm.time_min is {spec.executor.slurm.time_min})"
            if longest
            else ""
        )
    )
    if missing:
        lines.append(f"not measured on it: {', '.join(missing)}")
    if costs.stale:
        stale = ", ".join(map(_label, costs.stale))
        lines.append(
            f"measured by an earlier optbench, which did not count a trial's fixed costs: "
            f"{stale}; `optbench run STUDY --dry-run --measure` measures them again"
        )
    lines.extend(too_big)
    if spec.executor.population > 1:
        lines.append("population trials measured as solo trials (their speed-up is not counted)")
    return lines


def figures_batch(spec: StudySpec, cell) -> int:
    """The batch one process of a trial of `cell` trains at."""
    return max(1, spec.batch_size // processes(spec))


def estimate_notes(spec: StudySpec, store, job_times=lambda: []) -> list[str]:
    """Estimated vs measured time per cell (`optbench status`; `store`: the study's Store):
    a trial's (the median wall_s of its finished trials) and, on SLURM, a job's (the median
    elapsed time of its completed jobs of finished trials; `job_times`: Executor.job_times,
    asked only where there are measured costs). A line for each that has something to
    compare; [] without measured costs."""
    costs = cost_plan(spec)
    if costs.device is None:
        return []
    ended_jobs = job_times()
    finished = {
        s.trial.key: s
        for s in store.read(plan(spec))
        if s.status == "finished" and s.record is not None
    }
    trial_parts, part_lines, job_parts = [], [], []
    for cell in spec.cells():
        estimate = costs.trial_s(spec, cell)
        if estimate is None:
            continue
        walls = [
            s.record.user_attrs.get("wall_s") for s in finished.values() if s.trial.cell == cell
        ]
        walls = [w for w in walls if isinstance(w, (int, float)) and w > 0]
        if walls:
            trial_parts.append(_compared(cell, estimate, walls, "trial(s)"))
        timings = [
            t
            for s in finished.values()
            if s.trial.cell == cell and isinstance(t := s.record.user_attrs.get("timing"), dict)
        ]
        if timings:
            part_lines.append(_parts_compared(cell, costs.parts(spec, cell), timings))
        jobs = [
            (len(keys), elapsed)
            for keys, elapsed in ended_jobs
            if elapsed > 0 and all(k in finished and finished[k].trial.cell == cell for k in keys)
        ]
        if jobs:
            figures = costs.figures[cell]
            size = statistics.median_low(n for n, _ in jobs)
            elapsed = [e for n, e in jobs if n == size]
            job_s = job_seconds(figures, estimate, size)
            job_parts.append(_compared(cell, job_s, elapsed, f"job(s) of {size} trial(s)"))
    lines = []
    if trial_parts:
        lines.append(
            f"trial time, estimated on {costs.device} vs measured (median wall_s): "
            + "; ".join(trial_parts)
        )
    if part_lines:
        lines.append(
            "a trial's parts, estimated vs measured (median of result.json's timing): "
            + "; ".join(part_lines)
        )
    if job_parts:
        lines.append(
            "SLURM job time, estimated vs measured (median sacct elapsed): " + "; ".join(job_parts)
        )
    return lines


def spent_notes(spec: StudySpec, store) -> list[str]:
    """Where the finished and diverged trials' seconds went (result.json's `timing`,
    trial/timing.py), a line per cell that has them (`optbench status`): the share of what its
    trials cost their workers (their wall_s and the process starts they paid) spent outside the
    training epochs, and that share's largest parts. [] where no trial recorded its timing."""
    from pydantic import ValidationError

    from optbench.trial.timing import PARTS, TrialTiming

    by_cell: dict = {}
    for s in store.read(plan(spec)):
        raw = s.record.user_attrs.get("timing") if s.is_result else None
        if s.status in ("finished", "diverged") and isinstance(raw, dict):
            try:  # the store holds what the driver validated; an edited database may not
                by_cell.setdefault(s.trial.cell, []).append(TrialTiming.model_validate(raw))
            except ValidationError:
                continue
    lines = []
    for cell in spec.cells():
        timings = by_cell.get(cell)
        if not timings:
            continue
        paid = sum(t.paid_s() for t in timings)
        if paid <= 0:
            continue
        shares = {p: sum(getattr(t, p) for t in timings) / paid for p in PARTS if p != "epochs"}
        shares["process start"] = (
            sum((t.process_start_s or 0) + (t.imports_s or 0) for t in timings) / paid
        )
        outside = 1 - sum(t.epochs for t in timings) / paid
        largest = sorted(shares.items(), key=lambda kv: -kv[1])[:4]
        lines.append(
            f"cost {_label(cell)} ({len(timings)} trial(s), {_clock(paid / len(timings))} each): "
            f"{outside:.1%} outside the epochs ("
            + ", ".join(f"{name} {share:.1%}" for name, share in largest)
            + ")"
        )
    return lines


def _parts_compared(cell, estimate: dict[str, float], timings: list[dict]) -> str:
    """`cell`'s estimated parts (trial_parts) beside the median of its trials' recorded ones
    (`timings`: result.json's, as the store holds them; `start`: setup, data and model)."""

    def recorded(timing: dict, part: str) -> float:
        names = ("setup", "data", "model") if part == "start" else (part,)
        values = [timing.get(name) for name in names]
        return sum(v for v in values if isinstance(v, (int, float)))

    shown = [
        f"{part} {estimate[part]:.3g} vs {statistics.median(recorded(t, part) for t in timings):.3g}"
        for part in estimate
    ]
    return f"{_label(cell)} (s) " + ", ".join(shown)


def _label(cell) -> str:
    return f"{cell.model}/{cell.optimizer}/e{cell.epochs}"


def _compared(cell, estimate: float, measured: list[float], what: str) -> str:
    median = statistics.median(measured)
    return (
        f"{_label(cell)} {_clock(estimate)} vs {_clock(median)} "
        f"({estimate / median - 1:+.0%}, {len(measured)} {what})"
    )


def _clock(seconds: float) -> str:
    return f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.0f} s"
