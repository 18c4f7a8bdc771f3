"""The measured cost plan: what a study's trials cost on a device, before any of them runs: its
cache and its arithmetic (cost_notes.py says it in words).

`optbench run STUDY --dry-run --measure` times a short training run of each distinct training
configuration of the study (`distinct_configs`: the model, optimizer, recipe, per-process batch,
dataset, input pipeline and population; not lr, wd, seed or epochs, which change no step's
cost) on this machine (run/measuring.py, train/measure.py), and caches the figures in the study
folder (`<output>/<name>/costs.json`, `save_figures`) per (device name, configuration). The plan
table (cli/terminal_tables.py: plan_table) turns the cache into device-hours per cell and in
total, the SLURM `time_min` a job needs (`job_minutes`: the estimate + 25% + 5 min), and whether
a trial fits its device at its batch; `optbench status` compares the estimate with the finished
trials' wall time and, on SLURM, with the completed jobs' elapsed time by sacct
(cost_notes.py: `estimate_notes`). Without `--measure` the plan reads the cache only and says
which cells are measured and which are missing.

What is measured, each in the trainer's own code and in a fresh Python process as a job runs its
trial (train/measure.py: `measure_fresh`): the process's start, imports and exit (`process_s`), the
dataset's read (`data_s`, an image dataset's listing included: once per process, which keeps it
for its later trials), the trial's start (its batches, model, optimizer and EMA built, and what
its first steps take beyond the steady pace: `start_s`), the step time, an epoch's end as the
recipe runs it (precise BN where recipe.precise_bn_images asks for it: `precise_bn_s`; the
validation passes of the raw weights and the EMA, per image of the split: `eval_s_per_image`,
`eval_passes` of them), a checkpoint write and the trial's end (its weights' digest: `end_s`).
A cache entry without the fixed costs (an optbench before issue 43's, before issue 55's
`data_s`, whose `start_s` held the dataset's read, or before `eval_passes`, whose
`eval_s_per_image` was one pass's share) counts as not measured and the plan says so.

A trial's estimate (`trial_seconds`, result.json's wall_s) is a warm trial's, its dataset
already read: `start_s`, then per epoch the training steps at the measured step time, precise
BN, one validation pass and one checkpoint write, then `end_s`; a process's first trial adds
`data_s`. A SLURM job's (`job_seconds`, sacct's elapsed): its start (`job_start_s`: `process_s`
and `data_s`) and its trials one after another; the plan's total counts one such start per
SLURM job and per local worker (`run_starts`). Not counted: queueing, what SLURM does outside
the job's process (prolog, epilog), the driver's own work (the debug executor's trials run in
it), tracker latency, and DDP's all-reduce: under
DDP (executor.slurm nodes x tasks) each process runs at the measured speed of its share of the
batch, and the validation pass is split among them. A population (executor.population > 1) is
measured as its solo trials are.
"""

from __future__ import annotations

import hashlib
import json
import math
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


def save_figures(spec: StudySpec, device: str, measured: dict[str, dict]) -> None:
    """Add `measured` (config key -> figures, as measured on `device`) to the study's cache;
    writes only in the study folder."""
    cache = read_costs(spec)
    cache.setdefault(device, {}).update(measured)
    safefs.write_text(spec.study_dir / COSTS_FILE, spec.output, json.dumps(cache, indent=1))


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
    "data_s": (float, 0, _DAY),
    "eval_passes": (int, 1, 2**31),
}
# The fixed costs measured since issue 43, the dataset's read apart from start_s since issue
# 55, and eval_passes since eval_s_per_image holds every kind of weights' pass (it held one
# kind's share: half an EMA recipe's evaluation): an entry without them is an earlier
# optbench's, whose estimate missed them (or charged every trial the read), and counts as not
# measured.
FIXED_FIGURES = ("precise_bn_s", "end_s", "process_s", "data_s", "eval_passes")


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


def job_start_s(figures: dict) -> float:
    """What a process pays once, whatever its trials: its start, imports and exit
    (`process_s`) and the dataset's read (`data_s`), which its later trials find done."""
    return figures["process_s"] + figures["data_s"]


def job_seconds(figures: dict, trial_s: float, trials: int) -> float:
    """A SLURM job's time (sacct's elapsed) that runs `trials` warm trials of `trial_s` seconds
    one after another after its start (`job_start_s`). What SLURM does outside that process
    (prolog, epilog, staging) is not measured here."""
    return job_start_s(figures) + trials * trial_s


def run_starts(spec: StudySpec, rounds: list[int], per_job: int, at_once: int | None) -> int:
    """How many process starts (`job_start_s` each: a start, imports and exit, and a dataset
    read) a run pays for `rounds`, the trials it submits at once, round after round (a fixed
    study's one round; a sequential study's, look by look). `at_once`: the processes the
    executor runs at once (executors.at_once; None: one local worker, array_parallelism SLURM
    jobs). On SLURM one start per job, as the executor cuts each round (under `auto`,
    `round_jobs` at `at_once` slots, `per_job` the most a job holds; else jobs of
    trials_per_job; a population counts as one trial); on a local pool one per worker, which
    starts once and reads its dataset once for all of its trials; none for the debug executor,
    which runs in the driver."""
    trials = sum(rounds)
    if spec.executor.kind == "local":
        return min(at_once or 1, trials)
    if spec.executor.kind != "slurm":
        return 0
    slurm = spec.executor.slurm
    units = [math.ceil(n / spec.executor.population) for n in rounds]
    if slurm.trials_per_job == "auto":
        slots = at_once or slurm.array_parallelism
        return sum(len(round_jobs(n, slots, per_job)) for n in units)
    return sum(math.ceil(n / per_job) for n in units)


# trials_per_job auto: a job runs trials until its start (job_start_s) is at most this share of it.
START_SHARE = 0.10


def packed_trials(start_s: float, trial_s: float, time_min: int) -> int:
    """How many trials of `trial_s` seconds one SLURM job of `auto` runs: the fewest that make
    its start (`start_s`: job_start_s) at most START_SHARE of the job, but no more than fit in
    `time_min` with the plan's margin (job_minutes); at least one."""
    if trial_s <= 0:
        return 1
    wanted = math.ceil(start_s * (1 - START_SHARE) / (START_SHARE * trial_s))
    fitting = math.floor(((time_min - MARGIN_MIN) * 60 / MARGIN - start_s) / trial_s)
    return max(1, min(wanted, fitting))


def round_jobs(trials: int, slots: int, most: int) -> list[int]:
    """How many trials each SLURM job of a round of `trials` holds under `auto`: at least as
    many jobs as SLURM runs at once (`slots`) while the round has trials for them, a slot idling
    beside a job of several trials only delays the round; more where a job would hold more than
    `most` (trials_per_job: the cost plan's packing within the time limit). The jobs' sizes
    differ by at most one, so the round's last jobs end together."""
    if trials <= 0:
        return []
    jobs = max(math.ceil(trials / most), min(trials, slots))
    size, bigger = divmod(trials, jobs)
    return [size + 1] * bigger + [size] * (jobs - bigger)


def trials_per_job(spec: StudySpec, costs: CostPlan | None = None) -> int:
    """slurm.trials_per_job, `auto` resolved: the fewest of `packed_trials` over the study's
    cells (each at its measured costs), 1 where a cell has none (its trial might not fit).
    Under `auto` it is the most a job holds: a round is cut by `round_jobs`."""
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
        packed.append(packed_trials(job_start_s(figures), trial_s, time_min))
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
