"""What a study would run and how far it is, as terminal tables: its plan with the compute it
needs (`optbench run --dry-run`, `plan_table`), its trial counts per cell (`optbench status`,
`status_table`) and its trials in progress (`optbench status --trials`, `trials_table`). They
only read the spec, the store, the study's lock and the trials' metrics files; nothing here
runs or writes. A trial counts as running where its SLURM job runs (the executor's answer) or
where the driver that holds the study's lock now marked it as run by one of its workers
(`running_trials`).
"""

from __future__ import annotations

import statistics
import time
from collections import Counter
from dataclasses import dataclass

from optbench.plan.cost_notes import plan_notes
from optbench.plan.costs import cost_plan, job_minutes, processes, trials_per_job
from optbench.plan.trials import plan, populations
from optbench.provenance import mixed_code_warning
from optbench.run.console import TextTable
from optbench.run.locks import running_driver
from optbench.run.progress import (
    StudyProgress,
    clock,
    epoch_cells,
    input_notes,
    left_cell,
    read_trial_epochs,
    trial_label,
)
from optbench.run.rounds import Rounds, asked_trials, size_lines
from optbench.spec.schema import StudySpec
from optbench.store.database import Store, StoredTrial, refuse_links, running_since


def running_trials(
    spec: StudySpec, stored: list[StoredTrial], jobs_running: set[str] = frozenset()
) -> dict[str, float | None]:
    """The trials running now, each with since when (time.time; None where unknown): those
    whose SLURM job runs (`jobs_running`, the executor's answer) and those the driver that
    holds the study's lock marked as started by its workers (store.running_since). A mark left
    by a driver that died is not running: its workers died with it."""
    run = running_driver(spec.study_dir)
    found: dict[str, float | None] = dict.fromkeys(jobs_running)
    for item in stored:
        since = running_since(item, run)
        if since is not None:
            found[item.trial.key] = since
    return found


def status_table(spec: StudySpec, running: set[str] = frozenset()) -> tuple[TextTable, str | None]:
    """Counts per cell, read from the store without running or writing anything, and the
    one-line warning when a cell mixes results of different training code (None if none);
    `running`: the keys of trials whose job is running (SLURM); running_trials adds those a
    driver runs now. The table's caption adds progress.input_notes (cells that mix input
    pipelines; input-bound trials). A link in the study folder is refused (store.refuse_links)."""
    refuse_links(spec, plan(spec))
    store = Store(spec, create=False)
    stored = store.read(asked_trials(spec, store))
    now_running = set(running_trials(spec, stored, set(running)))
    table = StudyProgress(stored, running=now_running).table(
        f"{spec.name}: {sum(s.is_result for s in stored)} of {len(stored)} trials done"
    )
    for note in input_notes(stored):
        table.add_caption(note)
    fingerprints = (
        (s.trial.cell_id, (s.record.user_attrs.get("provenance") or {}).get("code_fingerprint"))
        for s in stored
        if s.is_result and s.record is not None
    )
    return table, mixed_code_warning(fingerprints)


def trials_table(spec: StudySpec, running: set[str] = frozenset()) -> TextTable | None:
    """The trials without a result that run now (running_trials; `running`: SLURM's) or whose
    metrics file has epochs (`optbench status --trials`): epoch k/N, last validation error,
    seconds per epoch, the last epoch's training images/s and fraction of it waiting for input,
    when the file last grew, and `left`: a running trial's time left at its pace or "stalled
    N min" (progress.stalled_s), "not running" for the others (a worker that died)."""
    store = Store(spec, create=False)
    stored = store.read(asked_trials(spec, store))
    now_running = running_trials(spec, stored, set(running))
    table = TextTable(title=f"{spec.name}: trials in progress (read from their metrics files)")
    columns = ("trial", "epoch", "val error", "s/epoch", "img/s", "input wait", "updated", "left")
    for col in columns:
        table.add_column(col, justify="left" if col == "trial" else "right")
    now = time.time()
    for item in stored:
        key, total = item.trial.key, item.trial.cell.epochs
        if item.is_result:
            continue
        epochs = read_trial_epochs(item.trial.out_dir, item.trial.job.root)
        if epochs.updated is None and key not in now_running:
            continue
        cells = epoch_cells(epochs, total)
        speed = "–" if epochs.images_per_s is None else f"{epochs.images_per_s:.0f}"
        wait = "–" if epochs.input_wait is None else f"{epochs.input_wait:.0%}"
        updated = "–" if epochs.updated is None else f"{clock(now - epochs.updated)} ago"
        left = "not running"
        if key in now_running:
            left = left_cell(epochs, total, now_running[key], now)
        table.add_row(trial_label(item), *cells, speed, wait, updated, left)
    return table if table.row_count else None


@dataclass(frozen=True)
class RecordedSpeed:
    """How fast this study's finished trials of one model trained, on one device."""

    device: str
    images_per_s: float  # median training images/s
    overhead: float  # median of wall time / training time (evaluation, start-up)
    trials: int

    def trial_s(self, epochs: int, n_train: int) -> float:
        """The wall time of a trial of `epochs` epochs at this speed."""
        return epochs * n_train / self.images_per_s * self.overhead


def recorded_speed(stored: list, model: str, n_train: int) -> RecordedSpeed | None:
    """The speed of the finished trials of `model` (this study's: the same dataset), on the
    device that ran most of them (a GPU first on a tie); None if none is recorded."""
    by_device: dict[str, list[tuple[float, float]]] = {}
    for item in stored:
        if item.status != "finished" or item.trial.cell.model != model:
            continue
        attrs = item.record.user_attrs
        speed, wall, epochs = (attrs.get(k) for k in ("images_per_s", "wall_s", "epochs_run"))
        if speed and wall and epochs:
            overhead = wall / (epochs * n_train / speed)
            by_device.setdefault(attrs.get("device") or "?", []).append((speed, overhead))
    if not by_device:
        return None
    device = max(by_device, key=lambda d: (len(by_device[d]), d.startswith("cuda")))
    rows = by_device[device]
    return RecordedSpeed(
        device,
        statistics.median(r[0] for r in rows),
        max(1.0, statistics.median(r[1] for r in rows)),
        len(rows),
    )


def _lr_wd_columns(spec: StudySpec, cell, bounds) -> tuple[str, str]:
    """The plan's lr and wd columns: the box pairs are drawn from, or under `sampler: good`
    the one value every trial of the cell trains at. The lr is the one trained, after batch
    scaling (lr x batch_size / ref_batch; `lr_scale_note` says so)."""
    scale = spec.batch_size / spec.ref_batch
    if spec.search.sampler == "good":
        good = spec.search.good_values[cell.model][cell.optimizer]
        return f"{good.lr * scale:.3g} (fixed)", f"{good.wd:.3g} (fixed)"
    lr = f"{bounds.lr[0] * scale:.3g} .. {bounds.lr[1] * scale:.3g}"
    return lr, f"{bounds.wd[0]:.3g} .. {bounds.wd[1]:.3g}"


def lr_scale_note(spec: StudySpec) -> str | None:
    """One line when the study's batch differs from its reference batch: every trial trains at
    its lr times batch_size / ref_batch, not at the lr its file declares (None otherwise)."""
    batch, ref = spec.batch_size, spec.ref_batch
    if batch == ref:
        return None
    factor = f"/ {ref // batch}" if ref % batch == 0 else f"x {batch / ref:.3g}"
    return (
        f"lr: the study's lr values are at ref_batch {ref}; at batch_size {batch} every trial "
        f"trains at lr x {batch}/{ref} (lr {factor}); ref_batch: {batch} trains at the lr as "
        "written (docs/study.md)"
    )


def plan_table(spec: StudySpec, earlier: list[dict] = ()) -> TextTable:
    """The trial plan of `optbench run --dry-run`: what would run, per cell, and its compute:
    training images x forward multiply-adds per image (backward adds about 2x), each model at
    the input size it would train at (`px`: a class-folder dataset takes it from the model
    unless the study sets dataset.img_size). A sequential study's caption gives its range of
    sizes (rounds.size_lines; `earlier`: an earlier report's claims rows). Writes nothing."""
    from optbench.data.datasets import dataset_info
    from optbench.models.cache import cached_counts

    info = {model: dataset_info(spec.dataset, model) for model in spec.models}
    n_train = info[spec.models[0]].n_train
    trials = plan(spec)
    store = Store(spec, create=False)
    if spec.decide is not None:  # a sequential study: the most it may train
        rounds = Rounds.of(spec, store, trials)  # what a real run refuses, the dry run too
        trials = rounds.within(trials, rounds.most())
    stored = store.read(trials)
    table = TextTable(title=f"{spec.name}: plan ({spec.dataset.name}, {n_train} training images)")
    for col in (
        "model",
        "optimizer",
        "epochs",
        "trials",
        "to run",
        "lr trained",
        "wd range",
        "px",
        "GF/img",
        "PF to run",
        "img/s",
        "peak GB",
        "device-h",
    ):
        table.add_column(col, no_wrap=col == "model")
    total = 0.0
    flops_of: dict[str, int] = {}
    speeds = {m: recorded_speed(stored, m, n_train) for m in spec.models}
    hours, longest_s = 0.0, 0.0
    measured_costs, todo_of, trial_hours, trial_pf = cost_plan(spec), {}, {}, {}
    for cell in spec.cells():
        items = [s for s in stored if s.trial.cell == cell]
        todo = sum(not s.is_result for s in items)
        b = spec.search.bounds(cell.model, cell.optimizer)
        shape = info[cell.model]
        if cell.model not in flops_of:  # one count per model, not per cell
            flops_of[cell.model] = cached_counts(
                cell.model,
                num_classes=shape.num_classes,
                in_chans=shape.in_chans,
                img_size=shape.img_size,
            )["flops"]
        flops = flops_of[cell.model]
        cell_flops = todo * cell.epochs * n_train * flops
        total += cell_flops
        todo_of[cell] = todo
        speed, figures = speeds[cell.model], measured_costs.figures.get(cell)
        trial_s = measured_costs.trial_s(spec, cell, n_train)  # measured first, then recorded
        if trial_s is None and speed is not None and figures is None:
            trial_s = speed.trial_s(cell.epochs, shape.n_train)
            hours += todo * trial_s * processes(spec) / 3600
            longest_s = max(longest_s, trial_s)
        cell_h = None if trial_s is None else todo * trial_s * processes(spec) / 3600
        key = (cell.model, cell.optimizer, cell.epochs)
        trial_hours[key] = None if trial_s is None else trial_s * processes(spec) / 3600
        trial_pf[key] = cell.epochs * n_train * flops * 3 / 1e15  # with backward (about 2x)
        rate = speed and speed.images_per_s
        peak = figures and figures.get("peak_memory_bytes")  # none where nothing fits
        if figures is not None and figures.get("images_per_s"):
            rate = figures["images_per_s"] * processes(spec)
        table.add_row(
            cell.model,
            cell.optimizer,
            str(cell.epochs),
            str(len(items)),
            str(todo),
            *_lr_wd_columns(spec, cell, b),
            str(shape.img_size),
            f"{flops / 1e9:.3g}",
            f"{cell_flops / 1e15:.3g}",
            "–" if not rate else f"{rate:.0f}",
            "–" if peak is None else f"{peak / 2**30:.2g}",
            "–" if cell_h is None else f"{cell_h:.3g}",
        )
    to_run = sum(not s.is_result for s in stored)
    table.caption = (
        f"{len(stored)} trials, {to_run} to run: {total / 1e15:.3g} PF of forward "
        f"multiply-adds ({total * 3 / 1e15:.3g} PF with backward)" + execution_note(spec, trials)
    )
    sizes = size_lines(spec, trials, trial_hours, list(earlier), trial_pf) if spec.decide else []
    running = None  # what the executor runs at once: only where measured costs are counted
    if measured_costs.device is not None:
        from optbench.executors import at_once

        on_gpus = measured_costs.device.startswith("cuda")
        running = at_once(spec, sum(todo_of.values()), on_gpus)
    round_sizes = None  # a sequential study submits each round's trials at once
    if spec.decide is not None:
        left = Counter(rounds.round_of(s.trial) for s in stored if not s.is_result)
        round_sizes = [left[k] for k in sorted(left)]
    notes = plan_notes(spec, measured_costs, todo_of, n_train, running, round_sizes)
    for line in [lr_scale_note(spec), *notes, *sizes]:
        if line:
            table.add_caption(line)
    measured = {m: v for m, v in speeds.items() if v is not None}
    if measured and longest_s:  # cells without measured costs, from finished trials
        devices = sorted({v.device for v in measured.values()})
        per_job = trials_per_job(spec)
        minutes = job_minutes(per_job * longest_s)
        table.add_caption(
            f"img/s: median of this study's finished trials of the model on {', '.join(devices)}; "
            f"{hours:.3g} device-hours to run the cells without measured costs (device-h: trials "
            "x processes); "
            f"a SLURM job of {per_job} trial(s) needs time_min >= {minutes} "
            f"(executor.slurm.time_min is {spec.executor.slurm.time_min})"
        )
    return table


def execution_note(spec: StudySpec, trials: list) -> str:
    """How the trials are grouped into jobs (executor.population, slurm.trials_per_job)."""
    k, ex = spec.executor.population, spec.executor
    note = ""
    if k > 1:
        groups = populations(trials, k)
        note = (
            f"\nexecutor.population {k}: {len(groups)} population(s) of up to {k} trials of one "
            "cell and seed, each trained in one process (one batched forward per step)"
        )
    per_job = trials_per_job(spec)
    if ex.kind == "slurm" and (k > 1 or per_job > 1):
        auto = ex.slurm.trials_per_job == "auto"
        note += (
            f"\nslurm: each array element runs {'up to ' if auto else ''}{per_job} "
            f"{'population(s)' if k > 1 else 'trial(s)'} one after another"
            + (
                " (auto: a round has at least as many jobs as SLURM runs at once, "
                "array_parallelism or what the partition holds)"
                if auto
                else ""
            )
            + f"; time_min "
            f"{ex.slurm.time_min} must cover them all"
            + (
                " (a population takes about one trial's time x its slowdown, bench/population.py)"
                if k > 1
                else ""
            )
        )
    return note
