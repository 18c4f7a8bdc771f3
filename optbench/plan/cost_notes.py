"""The measured cost plan in words (plan/costs.py computes it): the caption lines of
`optbench run --dry-run`'s plan table (`plan_notes`: device-hours, the SLURM time_min a job
needs, what is missing and what does not fit) and `optbench status`'s lines (`estimate_notes`:
the estimates beside the finished trials' wall time and the completed SLURM jobs' elapsed time;
`spent_notes`: where the trials' seconds went; `job_notes`: what the SLURM jobs paid besides
their trials).
"""

from __future__ import annotations

import statistics

from optbench.plan.costs import (
    COSTS_FILE,
    MARGIN,
    MARGIN_MIN,
    CostPlan,
    cost_plan,
    job_minutes,
    job_seconds,
    job_start_s,
    processes,
    run_starts,
    trials_per_job,
)
from optbench.plan.trials import plan
from optbench.spec.schema import StudySpec
from optbench.trial.results import stored_timing
from optbench.trial.timing import PARTS, STEP_PARTS, TrialTiming


def plan_notes(
    spec: StudySpec,
    costs: CostPlan,
    todo: dict,
    n_train: int,
    at_once: int | None = None,
    rounds: list[int] | None = None,
) -> list[str]:
    """The plan's caption lines about measured costs: the device, device-hours, time_min per
    job, what is missing and what does not fit. `todo`: cell -> trials left to run;
    `n_train`: the training images of an epoch (the dataset's published size, where known);
    `at_once`: the processes the executor runs at once (executors.at_once: a local run's
    workers, the SLURM jobs; None: one worker, executor.slurm.array_parallelism jobs);
    `rounds`: the trials left to run in each round, submitted at once (None: all of `todo`,
    one round)."""
    if costs.device is None:
        return ["no measured costs yet: `optbench run STUDY --dry-run --measure` times each "
                "training configuration on this machine"]  # fmt: skip
    lines, hours, longest, missing, too_big = [], 0.0, None, [], []
    per_job = trials_per_job(spec, costs)
    # the run's process starts, shared among the cells by their trials
    starts = run_starts(spec, rounds or [sum(todo.values())], per_job, at_once)
    start_share = starts / max(1, sum(todo.values()))
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
            hours += (n * trial_s + n * start_share * job_start_s(figures)) * processes(spec) / 3600
            job = (job_seconds(figures, trial_s, per_job), trial_s, job_start_s(figures))
            longest = max(longest or job, job)
    lines.append(
        f"measured on {costs.device} (cached in {spec.study_dir / COSTS_FILE}): "
        f"{hours:.3g} device-hours to run the cells measured"
        + {"slurm": " (with one start per SLURM job)", "local": " (with one start per worker)"}.get(
            spec.executor.kind, ""
        )
        + (
            f"; a SLURM job of {per_job} trial(s) needs time_min >= {job_minutes(longest[0])} "
            f"(the longest, {longest[0] / 60:.3g} min: trials of {_clock(longest[1])} each, its "
            f"process's start, exit and dataset read {_clock(longest[2])}; +{MARGIN - 1:.0%} "
            f"+{MARGIN_MIN} min; "
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
            f"measured by an earlier optbench, which did not count a trial's fixed costs apart: "
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
    a trial's (the median wall_s of its finished trials beside the median of their estimates:
    a warm trial's, plus the dataset's read for a process's first, `_trial_estimate`) and, on
    SLURM, a job's (the median elapsed time of its completed jobs of finished trials; `job_times`: Executor.job_times,
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
        timed = [
            (s.record.user_attrs.get("wall_s"), stored_timing(s.record.user_attrs)[0])
            for s in finished.values()
            if s.trial.cell == cell
        ]
        timed = [(w, t) for w, t in timed if isinstance(w, (int, float)) and w > 0]
        if timed:
            estimates = [_trial_estimate(costs.figures[cell], estimate, t) for _, t in timed]
            walls = [w for w, _ in timed]
            trial_parts.append(_compared(cell, statistics.median(estimates), walls, "trial(s)"))
        timings = [
            t
            for s in finished.values()
            if s.trial.cell == cell and (t := stored_timing(s.record.user_attrs)[0]) is not None
        ]
        if timings:
            part_lines.append(_parts_compared(cell, costs.parts(spec, cell), timings))
        jobs = [
            (len(job.keys), job.elapsed_s)
            for job in ended_jobs
            if job.elapsed_s > 0
            and all(k in finished and finished[k].trial.cell == cell for k in job.keys)
        ]
        if jobs:
            figures = costs.figures[cell]
            size = statistics.median_low(n for n, _ in jobs)
            elapsed = [e for n, e in jobs if n == size]
            job_s = job_seconds(figures, estimate, size)
            job_parts.append(_compared(cell, job_s, elapsed, f"job(s) of {size} trial(s)"))
    mixed = _mixed_jobs(spec, costs, ended_jobs, finished)
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
    if mixed:
        lines.append(mixed)
    return lines


def _mixed_jobs(spec: StudySpec, costs, ended_jobs, finished: dict) -> str | None:
    """The completed SLURM jobs whose finished trials are of several cells (`auto` packs a
    round's trials across cells), estimated as job_seconds estimates a job: its start (the
    largest of its cells' `job_start_s`) and its trials' estimates one after
    another; compared summed over those jobs. None where there is no such job or a cell of
    one has no estimate."""
    estimated = measured = 0.0
    count = 0
    for job in ended_jobs:
        if job.elapsed_s <= 0 or not all(k in finished for k in job.keys):
            continue
        cells = [finished[k].trial.cell for k in job.keys]
        if len(set(cells)) < 2:
            continue
        trial_s = [costs.trial_s(spec, cell) for cell in cells]
        if any(t is None for t in trial_s):
            return None
        start = max(job_start_s(costs.figures[cell]) for cell in set(cells))
        estimated += start + sum(trial_s)
        measured += job.elapsed_s
        count += 1
    if not count:
        return None
    return (
        "SLURM jobs of several cells, estimated vs measured (sacct elapsed, summed over them): "
        f"{_clock(estimated)} vs {_clock(measured)} ({estimated / measured - 1:+.0%}, "
        f"{count} job(s))"
    )


def spent_notes(spec: StudySpec, store) -> list[str]:
    """Where the finished and diverged trials' seconds went (result.json's `timing`,
    trial/timing.py), a line per cell that has them (`optbench status`): the share of what its
    trials cost their workers (their wall_s and the process starts they paid) spent outside the
    training epochs, and that share's largest parts. [] where no trial recorded its timing."""
    by_cell: dict = {}
    malformed: dict = {}  # cell -> why its first result with a timing that is none was read so
    for s in store.read(plan(spec)):
        if s.status not in ("finished", "diverged") or not s.is_result:
            continue
        timing, why = stored_timing(s.record.user_attrs)
        if timing is not None:
            by_cell.setdefault(s.trial.cell, []).append(timing)
        elif why is not None:
            malformed.setdefault(s.trial.cell, []).append(why)
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
        lines += _step_line(cell, [t.steps for t in timings if t.steps is not None])
    for cell, whys in malformed.items():
        lines.append(
            f"timing {_label(cell)}: {len(whys)} result(s) hold a timing that is not one, read "
            f"as absent (their errors count; their seconds do not): {_sanitized(whys[0])}"
        )
    return lines


def _sanitized(text: str) -> str:
    """A note from a store (a shared database is untrusted): printable characters only, at
    most 200, so that nothing it holds reaches the terminal as an escape sequence."""
    text = "".join(c if c.isprintable() else "?" for c in text)
    return text if len(text) <= 200 else text[:197] + "..."


def _step_line(cell, steps: list) -> list[str]:
    """Where `cell`'s trials' steps went (timing.steps, trial/timing.py), a share per part of
    their summed time; [] where none recorded it (results from before issue 66)."""
    total = sum(s.total() for s in steps)
    if total <= 0:
        return []
    count = sum(s.count for s in steps)
    clocks = "/".join(sorted({s.clock for s in steps}))
    shares = ", ".join(
        f"{name} {sum(getattr(s, name) for s in steps) / total:.1%}" for name in STEP_PARTS
    )
    return [
        f"steps {_label(cell)} ({count} step(s), {total / count * 1e3:.1f} ms each, {clocks}): {shares}"
    ]


def job_notes(spec: StudySpec, store, job_times) -> list[str]:
    """What the study's completed SLURM jobs paid besides their trials (`optbench status`;
    `job_times`: Executor.job_times): their median wait in the queue, the median start of a
    job's process (its first trial's recorded process start and imports, result.json's
    `timing`) and the share of their elapsed time their trials' training epochs took. [] where
    no job completed."""
    jobs = job_times()
    if not jobs:
        return []
    timings = {
        s.trial.key: t
        for s in store.read(plan(spec))
        if s.is_result and (t := stored_timing(s.record.user_attrs)[0]) is not None
    }
    waits = [job.queue_s for job in jobs if job.queue_s is not None]
    starts, epochs, timed_elapsed = [], 0.0, 0.0
    for job in jobs:
        if not all(key in timings for key in job.keys):
            continue  # results from before the timing was recorded, or not recorded yet
        first = [timings[k] for k in job.keys if timings[k].process_trial == 1]
        starts += [(t.process_start_s or 0) + (t.imports_s or 0) for t in first]
        epochs += sum(timings[k].epochs for k in job.keys)
        timed_elapsed += job.elapsed_s
    trials = sum(len(job.keys) for job in jobs)
    parts = [f"{len(jobs)} job(s) of {trials} trial(s)"]
    if waits:
        parts.append(f"queue wait {_clock(statistics.median(waits))} (median)")
    if starts:
        parts.append(f"start {_clock(statistics.median(starts))} (median: process and imports)")
    if timed_elapsed > 0:
        parts.append(f"training epochs {epochs / timed_elapsed:.0%} of their elapsed time")
    return ["SLURM jobs completed: " + ", ".join(parts)]


def _trial_estimate(figures: dict, warm_s: float, timing) -> float:
    """One finished trial's estimate: `warm_s` (trial_seconds), plus the dataset's read
    (`data_s`) where its result.json's timing says it was its process's first trial."""
    first = timing is not None and timing.process_trial == 1
    return warm_s + figures["data_s"] if first else warm_s


def _parts_compared(cell, estimate: dict[str, float], timings: list[TrialTiming]) -> str:
    """`cell`'s estimated parts (trial_parts) beside the median of its trials' recorded ones
    (`timings`: result.json's, as the store holds them; `start`: setup, data and model)."""

    def recorded(timing: TrialTiming, part: str) -> float:
        names = ("setup", "data", "model") if part == "start" else (part,)
        return sum(getattr(timing, name, 0.0) for name in names)

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
