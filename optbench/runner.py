"""The driver of `optbench run`: plan the study's trials, hand the unfinished ones to an
executor, and record each result file into the store as its job ends.

spec -> trials (store.prepare) -> jobs (TrialJob) -> result files (workers) -> store (record).
The driver is the only writer of the database. A finished result is recorded once; results
already on disk but not yet recorded (a driver killed at the wrong moment) are recorded
before anything runs; Ctrl-C stops the workers and the same command resumes.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from rich.console import Console
from rich.live import Live
from rich.table import Table

from optbench.launch.base import JobEvent, Launcher, TrialJob
from optbench.spec import StudySpec, UsageError, dump_spec
from optbench.store import PlannedTrial, StorageUnavailable, Store
from optbench.train.config import TrainConfig, TrialResult
from optbench.train.results import RESULT_FILE, atomic_write_text, read_metrics, read_result

STATES = ("finished", "diverged", "failed", "running", "pending")


def trial_dir(spec: StudySpec, item: PlannedTrial):
    return spec.study_dir / "trials" / item.cell_id / f"s{item.sample:03d}-seed{item.seed}"


def trial_config(spec: StudySpec, item: PlannedTrial) -> TrainConfig:
    return TrainConfig(
        model=item.cell.model,
        dataset=spec.dataset,
        optimizer=item.cell.optimizer,
        lr=item.lr,
        wd=item.wd,
        epochs=item.cell.epochs,
        batch_size=spec.batch_size,
        ref_batch=spec.ref_batch,
        seed=item.seed,
        recipe=spec.recipe,
    )


def trial_job(spec: StudySpec, item: PlannedTrial) -> TrialJob:
    return TrialJob(item.key, trial_config(spec, item), trial_dir(spec, item))


@contextmanager
def study_lock(spec: StudySpec) -> Iterator[None]:
    """One driver per study at a time: a second `optbench run` fails instead of racing."""
    spec.study_dir.mkdir(parents=True, exist_ok=True)
    with open(spec.study_dir / ".lock", "w") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise UsageError(
                f"{spec.study_dir}: another optbench run is driving this study"
            ) from None
        f.write(str(os.getpid()))
        f.flush()
        yield


@dataclass
class Progress:
    """Counts per cell for the live display and the final summary."""

    plan: list[PlannedTrial]
    running: set[str] = field(default_factory=set)
    started: float = field(default_factory=time.monotonic)
    ran: int = 0  # trials that ended in this invocation

    def state(self, item: PlannedTrial) -> str:
        if item.status == "pending" and item.key in self.running:
            return "running"
        return item.status

    def counts(self) -> dict[tuple, Counter]:
        out: dict[tuple, Counter] = {}
        for item in self.plan:
            c = item.cell
            out.setdefault((c.model, c.optimizer, c.epochs), Counter())[self.state(item)] += 1
        return out

    def eta_s(self) -> float | None:
        left = sum(1 for t in self.plan if t.status == "pending")
        if not self.ran or not left:
            return None
        per_trial = (time.monotonic() - self.started) / self.ran  # wall time per ended trial
        return per_trial * left

    def table(self, title: str) -> Table:
        table = Table(title=title)
        for col in ("model", "optimizer", "epochs", *STATES):
            table.add_column(col, justify="left" if col in ("model", "optimizer") else "right")
        for (model, opt, epochs), c in self.counts().items():
            table.add_row(model, opt, str(epochs), *(str(c[s]) for s in STATES))
        eta = self.eta_s()
        if eta is not None:
            table.caption = f"ETA {eta / 60:.1f} min"
        return table


def _record_from_disk(store: Store, spec: StudySpec, item: PlannedTrial) -> bool:
    """Record a result file a worker already wrote for this attempt, if there is one."""
    out_dir = trial_dir(spec, item)
    result = read_result(out_dir)
    if result is None or result.config != trial_config(spec, item):
        return False
    if result.status == "failed":
        return False  # a crash of an earlier attempt: this attempt runs again
    return store.record(item, result, read_metrics(out_dir))


def run_study(
    spec: StudySpec,
    make_launcher: Callable[[int], Launcher],
    *,
    console: Console | None = None,
    live: bool = True,
    detach: bool = False,
    settle: Callable[[list[TrialJob]], list[JobEvent]] | None = None,
) -> Progress:
    """Run every unfinished trial of `spec`. `make_launcher(n_jobs)` builds the executor.
    With `detach` (executors whose jobs outlive the driver, i.e. SLURM), return right after
    submitting: a later run follows the same jobs again. `settle(jobs)` (SLURM's
    `settle_ended`) reports the pending trials whose job ended while no driver followed it:
    they are recorded first, so that a failure among them is retried in this run."""
    console = console or Console()
    with study_lock(spec):
        store = Store(spec, create=True)
        atomic_write_text(spec.study_dir / "spec.yaml", dump_spec(spec))
        plan = store.prepare(retries=spec.executor.retries)
        if settle is not None:
            pending = {t.key: t for t in plan if t.status == "pending"}
            ended = settle([trial_job(spec, t) for t in pending.values()])
            for event in ended:
                _finish(store, spec, pending[event.key], event.message)
            if ended:
                console.print(
                    f"recorded {len(ended)} trial(s) whose job ended while no run followed"
                )
                plan = store.prepare(retries=spec.executor.retries)  # new attempts for failures
        recovered = sum(_record_from_disk(store, spec, t) for t in plan if t.status == "pending")
        if recovered:
            console.print(f"recorded {recovered} result(s) found on disk")
        unused = store.unused_trials()
        if unused:
            console.print(
                f"note: {unused} trial(s) from earlier configurations of {spec.name!r} "
                "stay in the database and are not used"
            )
        todo = {t.key: t for t in plan if t.status == "pending"}
        progress = Progress(plan)
        if not todo:
            console.print(progress.table(f"{spec.name}: nothing to run"))
            return progress
        jobs = [trial_job(spec, item) for item in todo.values()]
        for job in jobs:
            (job.out_dir / RESULT_FILE).unlink(missing_ok=True)  # a failed attempt's leftovers
        launcher = make_launcher(len(jobs))
        launcher.submit(jobs)
        outlive = getattr(launcher, "jobs_outlive_driver", False)
        if detach and outlive:
            launcher.close(cancel=False)
            console.print(
                f"{len(jobs)} trial(s) submitted or still queued; `optbench run` follows them "
                "and records their results, `optbench status` shows them"
            )
            return progress
        try:
            with Live(
                progress.table(spec.name),
                console=console,
                refresh_per_second=2,
                transient=False,
                auto_refresh=live,
            ) as display:
                while todo:
                    for event in launcher.poll(timeout=0.5):
                        item = todo.get(event.key)
                        if item is None:
                            continue
                        if event.kind == "running":
                            progress.running.add(event.key)
                            continue
                        _finish(store, spec, item, event.message)
                        progress.running.discard(event.key)
                        progress.ran += 1
                        del todo[event.key]
                    display.update(progress.table(spec.name))
        except (KeyboardInterrupt, StorageUnavailable):  # the storage's error says which
            launcher.close(cancel=not outlive)  # cluster jobs keep running: Ctrl-C detaches
            left = "still queued or running" if outlive else "left"
            console.print(
                f"stopped: {progress.ran} trial(s) recorded, {len(todo)} {left}; "
                "run the same command to resume"
            )
            raise
        launcher.close(cancel=False)
        console.print(f"\nrecorded {progress.ran} trial(s); study folder {spec.study_dir}")
        return progress


def _finish(store: Store, spec: StudySpec, item: PlannedTrial, lost_message: str | None) -> None:
    """Record the trial's result file; a missing one (or another configuration's) is a failure."""
    out_dir = trial_dir(spec, item)
    config = trial_config(spec, item)
    result, metrics = read_result(out_dir), read_metrics(out_dir)
    if result is None or result.config != config:
        why = lost_message or (
            f"no {RESULT_FILE} written in {out_dir}"
            if result is None
            else f"{out_dir / RESULT_FILE} is the result of another configuration"
        )
        result, metrics = (
            TrialResult(status="failed", epochs=config.epochs, config=config, message=why),
            [],
        )
    store.record(item, result, metrics)


def status_table(spec: StudySpec, running: set[str] = frozenset()) -> Table:
    """Counts per cell, read from the store without running or writing anything; `running`:
    the keys of trials whose job is running (SLURM)."""
    plan = Store(spec, create=False).plan()
    return Progress(plan, running=set(running)).table(
        f"{spec.name}: {sum(t.is_result for t in plan)} of {len(plan)} trials done"
    )


def plan_table(spec: StudySpec) -> Table:
    """The trial plan of `optbench run --dry-run`: what would run, per cell, and its compute:
    training images x forward multiply-adds per image (backward adds about 2x). Writes nothing."""
    from optbench.models.complexity import model_complexity
    from optbench.train.data import dataset_info

    info = dataset_info(spec.dataset)
    plan = Store(spec, create=False).plan()
    table = Table(title=f"{spec.name}: plan ({spec.dataset.name}, {info.n_train} training images)")
    for col in (
        "model",
        "optimizer",
        "epochs",
        "trials",
        "to run",
        "lr range",
        "wd range",
        "GF/img",
        "PF to run",
    ):
        table.add_column(col, no_wrap=col == "model")
    total = 0.0
    flops_of: dict[str, int] = {}
    for cell in spec.cells():
        items = [t for t in plan if t.cell == cell]
        todo = sum(not t.is_result for t in items)
        b = spec.search.bounds(cell.model, cell.optimizer)
        if cell.model not in flops_of:  # one count per model, not per cell
            flops_of[cell.model] = model_complexity(
                cell.model,
                num_classes=info.num_classes,
                in_chans=info.in_chans,
                img_size=info.img_size,
            )["flops"]
        flops = flops_of[cell.model]
        cell_flops = todo * cell.epochs * info.n_train * flops
        total += cell_flops
        table.add_row(
            cell.model,
            cell.optimizer,
            str(cell.epochs),
            str(len(items)),
            str(todo),
            f"{b.lr[0]:.3g} .. {b.lr[1]:.3g}",
            f"{b.wd[0]:.3g} .. {b.wd[1]:.3g}",
            f"{flops / 1e9:.3g}",
            f"{cell_flops / 1e15:.3g}",
        )
    to_run = sum(not t.is_result for t in plan)
    table.caption = (
        f"{len(plan)} trials, {to_run} to run: {total / 1e15:.3g} PF of forward "
        f"multiply-adds ({total * 3 / 1e15:.3g} PF with backward)"
    )
    return table
