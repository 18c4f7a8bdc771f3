"""The driver of `optbench run`: plan the study's trials, hand the unfinished ones to an
executor, and record each result file into the store as its job ends.

spec -> trials (plan.plan; store.prepare attaches their state) -> jobs (plan.jobs) -> result
files (workers) -> store (record). `run_study` runs in named phases: `_catch_up` (record what
ended while no driver followed), one `Store.prepare` (then the tracker runs an outage left
incomplete are completed: trackers/repair.py), `_submit`, `_follow`.
The driver is the only writer of the database. A finished result is recorded once; results
already on disk but not yet recorded (a driver killed at the wrong moment) are recorded
before anything runs; Ctrl-C stops the workers and the same command resumes. While following,
the driver notes in the store which trials a worker runs (what `optbench status` counts as
running) and, with executor.stall_timeout_s, ends a trial that made no progress for that long
(`_end_stalled`). What the user sees meanwhile is progress.py's.
"""

from __future__ import annotations

import functools
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path

from optuna.trial import TrialState
from rich.console import Console
from rich.live import Live

from optbench import safefs
from optbench.errors import StorageUnavailable, UnfinishedWrite, WriteError
from optbench.executors.protocol import Executor
from optbench.plan.trials import Trial, plan
from optbench.plan.trials import jobs as plan_jobs
from optbench.run.console import text_console
from optbench.run.locks import driver_lock
from optbench.run.progress import EventLog, LiveView, StudyProgress, input_notes
from optbench.run.rounds import Rounds, decision_lines, look_line
from optbench.spec.schema import StudySpec, dump_spec
from optbench.store.database import Store, StoredTrial, refuse_links
from optbench.trackers.repair import complete_runs
from optbench.trial.config import TrialResult
from optbench.trial.jobs import Job
from optbench.trial.results import (
    ERROR_LOG,
    RESULT_FILE,
    InvalidResultFile,
    config_difference,
    load_result,
    read_metrics,
)


@contextmanager
def write_faults_as_one_line() -> Iterator[None]:
    """Disk full, I/O errors and a study file that cannot be written stop the run with one line
    naming the path and the cause (WriteError; the database's own are StorageUnavailable, see
    storage_url.storage_errors). What was recorded stays recorded: every database write is a
    transaction, and result files not yet recorded are recorded by the next run."""
    try:
        yield
    except OSError as err:
        raise WriteError.from_os(err) from None


def _read_files(item: StoredTrial) -> tuple[TrialResult | None, list[dict]]:
    """The attempt's result and metrics as its worker left them (None: no result file);
    InvalidResultFile if they are there but unusable (untrusted input, never a traceback)."""
    out_dir, root = item.trial.out_dir, item.trial.job.root
    result = load_result(out_dir, root)
    return result, (read_metrics(out_dir, root) if result is not None else [])


def _failed(item: StoredTrial, why: str) -> TrialResult:
    config = item.trial.config
    return TrialResult(
        status="failed",
        epochs=config.epochs,
        config=config,
        message=why,
        origin="driver",
        attempt=item.attempts,
    )


def _this_attempts(result: TrialResult, item: StoredTrial) -> bool:
    """Whether `result` (of the trial's config) is its latest attempt's, as the result says. A
    result written before results recorded their attempt: a failed one is an earlier attempt's
    crash (a failed attempt's file was left in its folder then), any other the latest's."""
    if result.attempt is None:
        return result.status != "failed"
    return result.attempt == item.attempts


def _clear_folder(item: StoredTrial) -> None:
    """Remove the trial's result file before its next attempt exists (store.prepare's
    `before_attempt`): a file found while that attempt runs is then its own, even one too
    broken to say so (an invalid result file)."""
    safefs.remove(item.trial.out_dir / RESULT_FILE, item.trial.job.root)


def _record_from_disk(store: Store, item: StoredTrial) -> bool:
    """Record the result file a worker wrote for the trial's latest attempt, if there is one.
    An invalid one is recorded as a failed attempt with its reason (and retried as one)."""
    try:
        result, metrics = _read_files(item)
    except InvalidResultFile as err:  # its folder was cleared before this attempt began
        return store.record(item, _failed(item, str(err)), [])
    if result is None or result.config != item.trial.config or not _this_attempts(result, item):
        return False
    return store.record(item, result, metrics)


class StopSignal(KeyboardInterrupt):
    """SIGINT, SIGTERM or SIGHUP to the driver: the run stops as on Ctrl-C (the workers are
    stopped, what ended is recorded, the same command resumes); exit code 128 + `signum`."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


# Ctrl-C, `kill`, a closed terminal or ssh session: each one stops the run the same way.
DRIVER_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextmanager
def stop_signals_as_ctrl_c() -> Iterator[None]:
    """While inside, the first of SIGINT, SIGTERM and SIGHUP raises StopSignal in the main
    thread, and every later one is ignored until the process exits: a stop takes seconds (the
    workers checkpoint), and signals come in bursts (a closing terminal sends SIGHUP, a
    supervisor SIGTERM, an impatient user Ctrl-C), so a second one must neither interrupt the
    stop nor, once handlers were restored, kill the process by its default action before it
    says how it stopped. Without a stop the previous handlers are restored on the way out.
    A SIGINT that this process inherited ignored (a shell's background job) stays ignored."""
    stopping: list[int] = []

    def stop(signum: int, frame) -> None:
        if stopping:
            return  # the stop that the first signal began is under way
        stopping.append(signum)
        # Ignored by the OS from now on, not by this handler: Python restores the default
        # action of every signal it handles as the interpreter finalizes, and a late SIGINT
        # in that window would kill the process with -2 instead of the stop's exit code.
        for s in taken:
            signal.signal(s, signal.SIG_IGN)
        raise StopSignal(signum)

    ignored = signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    taken = [s for s in DRIVER_STOP_SIGNALS if not (s == signal.SIGINT and ignored)]
    before = {s: signal.signal(s, stop) for s in taken}
    try:
        yield
    finally:
        if not stopping:  # after a stop `stop` stays: the process exits with the stop's code
            for s, handler in before.items():
                signal.signal(s, handler)


def run_study(
    spec: StudySpec,
    executor: Executor,
    *,
    console: Console | None = None,
    live: bool = True,
    detach: bool = False,
) -> StudyProgress:
    """Run every unfinished trial of `spec` on `executor` (executors.make_executor), in three
    phases: catch up (record what ended while no driver followed: `executor.settle`'s jobs and
    result files on disk), prepare the store once (so a failure among those is retried in this
    run), submit, and follow until every job has ended. With `detach`, an executor whose jobs
    outlive the driver (SLURM) returns right after submitting: a later run follows them.
    A study with `decide:` runs those phases once per round (rounds.py): between rounds the
    driver takes the looks that are due and records them before it asks for more trials; its
    recorded looks are read and checked (Rounds.of) before anything is written. A stop (Ctrl-C,
    SIGTERM, SIGHUP) anywhere says so in one line, and the same command resumes."""
    console = console or text_console()
    trials = plan(spec)  # pure: a spec that cannot be planned stops here, before any write
    refuse_links(spec, trials)  # before any write, too
    try:
        if spec.decide is not None:  # a changed design or cells, a damaged looks record
            _check_rounds(spec, trials)  # refused before the lock, spec.yaml or any write
        return _drive(spec, executor, trials, console, live, detach)
    except KeyboardInterrupt as stop:  # StopSignal too: Ctrl-C, SIGTERM, SIGHUP
        if not getattr(stop, "said", False):  # _follow says how many trials it left
            console.print(
                f"stopped: {spec.name}: every result recorded stays recorded; run the same "
                "command to resume"
            )
        raise


def _check_rounds(spec: StudySpec, trials: list[Trial]) -> None:
    """Rounds.of on the store opened read-only: DesignChanged, CellsChanged or DamagedLooks
    before anything is written. A database that holds a killed driver's unfinished write is
    read once the driver rolled it back (run_study checks the looks again then)."""
    try:
        Rounds.of(spec, Store(spec, create=False), trials)
    except UnfinishedWrite:
        pass


def _drive(
    spec: StudySpec,
    executor: Executor,
    trials: list[Trial],
    console: Console,
    live: bool,
    detach: bool,
) -> StudyProgress:
    """run_study's phases, under the study's lock."""
    # one driver per study, and none while an earlier driver's workers still write (locks.py)
    with write_faults_as_one_line(), driver_lock(spec.study_dir, on_wait=console.print) as run:
        store = Store(spec, create=True)
        rounds = Rounds.of(spec, store, trials) if spec.decide is not None else None
        safefs.write_text(spec.study_dir / "spec.yaml", spec.output, dump_spec(spec))
        _catch_up(store, trials, executor, console)
        try:  # one pool of workers serves every round of this run; none is left where it ends
            if rounds is None:
                return _run_trials(store, trials, executor, console, live, detach, run).progress
            ran = None
            while True:
                asked = _take_looks(store, rounds, trials, console)
                if rounds.finished and ran is not None:
                    break  # decided in this run: the last round's table was shown
                ran = _run_trials(store, asked, executor, console, live, detach, run, rounds)
                if ran.detached or not ran.trials or rounds.finished:
                    break
        except KeyboardInterrupt:  # a stop between rounds: stop the workers as _follow does
            executor.close(cancel=not executor.jobs_outlive_driver)
            raise
        finally:
            executor.close(cancel=False)  # detached SLURM jobs run on: close never cancels here
        if rounds.finished or not ran.trials:
            waiting = None if rounds.finished else _waiting_for(ran.progress, spec.executor.retries)
            for line in decision_lines(rounds, waiting):
                console.print(line, markup=False, highlight=False, soft_wrap=True)
        return ran.progress


def _waiting_for(progress: StudyProgress, retries: int) -> str:
    """What keeps a sequential study's next look from being taken after a run: its round's
    failed trials, which no later run retries (each had its executor.retries, or failed twice
    the same way), and what to do."""
    failed = [s for s in progress.trials if s.status == "failed"]
    repeating = [s for s in failed if repeats_itself(s)]
    if not failed:
        return "trials without a result"
    parts = []
    if len(failed) > len(repeating):
        parts.append(
            f"{len(failed) - len(repeating)} failed trial(s) that no run retries with "
            f"executor.retries: {retries}; raise it (e.g. --set executor.retries={retries + 1}) "
            "and run again to retry them"
        )
    if repeating:
        parts.append(
            f"{len(repeating)} failed trial(s) that failed twice the same way and are not "
            "retried (`not retried` above): remove the cause"
        )
    return "; ".join(parts)


def _take_looks(store: Store, rounds: Rounds, trials: list[Trial], console: Console) -> list[Trial]:
    """Record every look that is due (rounds.py: its round's trials all have results), one
    after the other, and return the trials the study asks for after them."""
    while True:
        asked = rounds.asked(trials)
        looks = rounds.look(store.frame(asked))
        if not looks:
            return asked
        for look in looks:
            store.record_look(look.record())
            console.print(look_line(look), markup=False, highlight=False, soft_wrap=True)
        rounds.add(looks)


@dataclass
class Ran:
    """What one pass of prepare, submit and follow did: the progress table, how many trials it
    handed out (0: none was left to run), and whether it returned right after submitting."""

    progress: StudyProgress
    trials: int = 0
    detached: bool = False


def _run_trials(
    store: Store,
    trials: list[Trial],
    executor: Executor,
    console: Console,
    live: bool,
    detach: bool,
    run: str,
    rounds: Rounds | None = None,
) -> Ran:
    """Prepare, submit and follow the unfinished ones of `trials` (run_study's phases)."""
    spec = store.spec
    stored = _prepare(store, trials, spec.executor.retries, console)
    earlier = store.earlier_note(trials)
    if earlier:
        console.print(earlier, markup=False, highlight=False, soft_wrap=True)
    # tracker runs that an outage left incomplete, now that retried trials' results are gone
    complete_runs(trials, lambda line: console.print(line, markup=False, highlight=False))
    todo = {s.trial.key: s for s in stored if s.status == "pending"}
    progress = StudyProgress(stored, flops_of=flops_counter(spec))
    if not todo:
        console.print(progress.table(f"{spec.name}: nothing to run"))
        return Ran(progress)
    log = EventLog(progress, console)
    handed_out = len(todo)  # _follow empties todo as the trials end
    attempts = {key: item.attempts for key, item in todo.items()}
    round_of = rounds.round_of if rounds is not None else None
    jobs = plan_jobs(trials, attempts, spec.executor.population, round_of)
    _submit(executor, jobs, todo, log, spec.executor.retries, console)
    if detach and executor.jobs_outlive_driver:
        executor.close(cancel=False)
        console.print(
            f"{len(todo)} trial(s) submitted or still queued; `optbench run` follows them "
            "and records their results, `optbench status` shows them"
        )
        return Ran(progress, handed_out, detached=True)
    view = LiveView(progress, spec.name) if live and console.is_terminal else None
    following = Following(run, spec.executor.stall_timeout_s)
    _follow(store, executor, todo, progress, view, log, console, following)
    if not view:
        console.print(progress.table(spec.name))
    for note in input_notes(progress.trials):
        console.print(note, markup=False, highlight=False)
    console.print(
        f"\nrecorded {progress.ran} trial(s); study folder {spec.study_dir}", markup=False
    )
    return Ran(progress, handed_out)


def repeats_itself(item: StoredTrial) -> bool:
    """Whether the trial's latest attempt failed with the same one-line reason (exception type
    and message, TrialResult.message) as the attempt before it, both reported by the worker
    itself: another would fail the same way (a corrupt image, an input the model cannot take),
    so it is not retried. A job that ended without its result (killed, stalled, preempted,
    out of time: the driver's message, origin "driver"; or recorded before origins were) is
    retried as before: its cause may not be the trial's."""
    if item.status != "failed" or item.earlier is None or item.earlier.state != TrialState.FAIL:
        return False
    latest, earlier = item.record.user_attrs, item.earlier.user_attrs
    if latest.get("origin") != "worker" or earlier.get("origin") != "worker":
        return False
    return latest.get("message") is not None and latest.get("message") == earlier.get("message")


def _prepare(
    store: Store, trials: list[Trial], retries: int, console: Console
) -> list[StoredTrial]:
    """store.prepare, retrying failed trials within `retries` unless they repeat themselves
    (each such trial is named, with its reason)."""
    held: list[StoredTrial] = []

    def retry(item: StoredTrial) -> bool:
        if repeats_itself(item):
            held.append(item)
            return False
        return True

    stored = store.prepare(trials, retries=retries, retry=retry, before_attempt=_clear_folder)
    for item in held:
        console.print(
            f"not retried: {item.trial.key} failed twice the same way: "
            f"{item.record.user_attrs['message']}",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
    return stored


def failed_trials(progress: StudyProgress, study_dir: Path) -> str | None:
    """One line for a run that leaves failed trials: how many, and their error.log files (or
    the trials folder, where none wrote one: a worker that died). None if none failed."""
    failed = [s for s in progress.trials if s.status == "failed"]
    if not failed:
        return None
    logs = [s.trial.out_dir / ERROR_LOG for s in failed if _error_log(s)]
    if logs:
        more = f" and {len(logs) - 3} more" if len(logs) > 3 else ""
        where = f"tracebacks in {', '.join(map(str, logs[:3]))}{more}"
    else:
        where = f"their folders are in {study_dir / 'trials'}"
    return f"{len(failed)} trial(s) failed; {where}"


def _error_log(item: StoredTrial) -> bool:
    """Whether the trial's folder holds an error.log (a link there is not one)."""
    try:
        return safefs.stat(item.trial.out_dir / ERROR_LOG, item.trial.job.root) is not None
    except safefs.UnsafePath:
        return False


def _catch_up(store: Store, trials: list[Trial], executor: Executor, console: Console) -> None:
    """Record the attempts that ended while no driver followed them: those whose job the
    executor says ended (`settle`), then result files already on disk (a driver killed before
    it recorded them). Attempts not yet asked for (WAITING) never ran: prepare asks for them."""
    running = {
        s.trial.key: s
        for s in store.read(trials)
        if s.status == "pending" and s.record is not None and s.record.state == TrialState.RUNNING
    }
    ended = executor.settle([s.trial.job for s in running.values()])
    for event in ended:
        _record_end(store, running[event.key], event.message)
    if ended:
        console.print(f"recorded {len(ended)} trial(s) whose job ended while no run followed")
    recovered = [
        s for s in running.values() if s.status == "pending" and _record_from_disk(store, s)
    ]
    if recovered:
        console.print(f"recorded {len(recovered)} result(s) found on disk")
        for s in recovered:
            if s.status == "failed":  # an invalid result file: a failed attempt, retried now
                console.print(f"failed: {s.record.user_attrs['message']}", markup=False)


def _submit(
    executor: Executor,
    jobs: list[Job],
    todo: dict[str, StoredTrial],
    log: EventLog,
    retries: int,
    console: Console,
) -> None:
    """Hand the jobs of the pending trials (plan.jobs) to the executor, each pending trial's
    folder cleared first of a result file that is not its attempt's (another configuration's,
    one written before results recorded their attempt, an invalid one); a population's members
    that are done keep theirs."""
    for item in todo.values():
        if item.attempts > 1:
            log.retried(item, retries)
    for item in todo.values():
        if not _own_result(item):
            safefs.remove(item.trial.out_dir / RESULT_FILE, item.trial.job.root)
    console.print(executor.submit(jobs), markup=False, highlight=False)


def _own_result(item: StoredTrial) -> bool:
    """Whether the trial's folder holds a valid result of its latest attempt: written after
    catching up read the folder by a job that outlived its driver (SLURM), which the executor
    follows again; its end records it."""
    try:
        result = load_result(item.trial.out_dir, item.trial.job.root)
    except InvalidResultFile:
        return False
    return (
        result is not None
        and result.config == item.trial.config
        and result.attempt == item.attempts
    )


@dataclass
class Following:
    """What `_follow` needs beside the trials: this driver run's token (locks.driver_lock), with
    which it marks the trials its workers run, and executor.stall_timeout_s (None: off)."""

    run: str
    stall_timeout_s: float | None = None
    ended: set[str] = field(default_factory=set)  # trials ended for a stall, not yet recorded


def _follow(
    store: Store,
    executor: Executor,
    todo: dict[str, StoredTrial],
    progress: StudyProgress,
    view: LiveView | None,
    log: EventLog,
    console: Console,
    following: Following,
) -> None:
    """Record each trial as its job ends, until none is left (`todo` empties); mark in the
    store the trials that run (and those SLURM requeued), and end stalled ones (_end_stalled).
    Ctrl-C, or a storage that stops answering, stops the jobs where they die with the driver
    and leaves them running where they outlive it (SLURM: the next run follows them)."""
    outlive = executor.jobs_outlive_driver
    try:
        with (
            Live(view.render(), console=console, refresh_per_second=2, transient=False)
            if view
            else nullcontext()
        ) as display:
            while todo:
                for event in executor.poll(timeout=0.5):
                    item = todo.get(event.key)
                    if item is None:
                        continue
                    if event.kind == "running":
                        progress.start(event.key)
                        store.mark_running(item, following.run, progress.started_at[event.key])
                        if not view:
                            log.started(item)
                        continue
                    if event.kind == "queued":  # SLURM requeued it: not running, not stalled
                        progress.queued(event.key)
                        store.mark_running(item, None)
                        continue
                    _record_end(store, item, event.message)
                    following.ended.discard(event.key)
                    progress.end(event.key)
                    del todo[event.key]
                    if not view or item.status == "failed":  # a failure shows on a terminal too
                        log.ended(item)
                if following.stall_timeout_s is not None:
                    _end_stalled(executor, todo, progress, following)
                if view:
                    display.update(view.render())
                else:
                    log.tick()
    except (KeyboardInterrupt, StorageUnavailable) as stop:  # the storage's error says which
        executor.close(cancel=not outlive)  # cluster jobs keep running: Ctrl-C detaches
        left = "still queued or running" if outlive else "left"
        console.print(
            f"stopped: {progress.ran} trial(s) recorded, {len(todo)} {left}; "
            "run the same command to resume"
        )
        if isinstance(stop, KeyboardInterrupt):
            stop.said = True  # run_study says nothing more
        raise
    except BaseException:  # e.g. a full disk: stop the workers (they checkpoint) first
        executor.close(cancel=not outlive)
        raise


def _end_stalled(
    executor: Executor,
    todo: dict[str, StoredTrial],
    progress: StudyProgress,
    following: Following,
) -> None:
    """End, through the executor, each running trial that made no progress (progress.idle_s:
    no new metrics line, or since its start) for executor.stall_timeout_s; its error.log says
    why in one line, and its job's end is recorded as a failed attempt with that line (retried
    like any failure)."""
    progress.read_epochs()
    now, limit = time.time(), following.stall_timeout_s
    for key in sorted(progress.running - following.ended):
        idle = progress.idle_s(key, now)
        if idle is None or idle < limit or key not in todo:
            continue
        why = f"stalled: no progress for {idle:.0f} s (executor.stall_timeout_s is {limit:g})"
        for ended in executor.end(key, why):  # the job's trials: a population's members too
            following.ended.add(ended)
            if ended in todo:
                job = todo[ended].trial.job
                safefs.write_text(job.out_dir / ERROR_LOG, job.root, why + "\n")


def flops_counter(spec: StudySpec) -> Callable[[str], float]:
    """Forward multiply-adds per image of a model on the study's input (each model counted once,
    when first asked: it needs torch and timm)."""

    @functools.cache
    def flops_of(model: str) -> float:
        from optbench.data.datasets import dataset_info
        from optbench.models.cache import cached_counts

        info = dataset_info(spec.dataset, model)
        shape = dict(num_classes=info.num_classes, in_chans=info.in_chans, img_size=info.img_size)
        return cached_counts(model, **shape)["flops"]

    return flops_of


def _record_end(store: Store, item: StoredTrial, lost_message: str | None) -> None:
    """Record the trial's result file; a missing one (or another configuration's) is a failure."""
    out_dir, config = item.trial.out_dir, item.trial.config
    try:
        result, metrics = _read_files(item)
    except InvalidResultFile as err:
        result, metrics, lost_message = None, [], str(err)
    if result is not None and result.attempt not in (None, item.attempts):
        result, metrics = None, []  # an earlier attempt's: this one wrote none
    if result is None or result.config != config:
        why = lost_message or (
            f"no {RESULT_FILE} written in {out_dir}"
            if result is None
            else f"{out_dir / RESULT_FILE} is the result of another configuration "
            f"({config_difference(config, result.config)})"
        )
        result, metrics = _failed(item, why), []
    store.record(item, result, metrics)
