"""The driver of `optbench run`: plan the study's trials, hand the unfinished ones to an
executor, and record each result file into the store as its job ends.

spec -> trials (plan.plan; store.prepare attaches their state) -> jobs (plan.jobs) -> result
files (workers) -> store (record). `run_study` runs in named phases: `catch_up` (catch_up.py:
record what ended while no driver followed), one `prepare` (attempts.py: the store's new
attempts and retries; then the tracker runs an outage left incomplete are completed:
trackers/repair.py), `submit` and `follow` (following.py). A study with `decide:` runs them
once per round (rounds.py), taking the looks that are due between rounds.
The driver is the only writer of the database. A finished result is recorded once (attempts.py
says whose a result file is); results already on disk but not yet recorded (a driver killed at
the wrong moment) are recorded before anything runs; Ctrl-C (and SIGTERM, SIGHUP:
stop_signals.py) stops the workers and the same command resumes. What the user sees meanwhile
is progress.py's and messages.py's.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from rich.console import Console

from optbench import safefs
from optbench.errors import UnfinishedWrite, WriteError
from optbench.executors.protocol import Executor
from optbench.plan.trials import Trial, plan
from optbench.plan.trials import jobs as plan_jobs
from optbench.run.attempts import prepare
from optbench.run.catch_up import catch_up
from optbench.run.console import text_console
from optbench.run.following import Following, follow, submit
from optbench.run.locks import driver_lock
from optbench.run.messages import flops_counter, waiting_for
from optbench.run.progress import EventLog, LiveView, StudyProgress, input_notes
from optbench.run.rounds import Rounds, decision_lines, look_line
from optbench.spec.schema import StudySpec, dump_spec
from optbench.store.database import Store, refuse_links
from optbench.trackers.repair import complete_runs


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
        # a damaged record of attempts or looks, a changed design or cells: refused before the
        # lock, spec.yaml or any write
        _check_records(spec, trials)
        return _drive(spec, executor, trials, console, live, detach)
    except KeyboardInterrupt as stop:  # StopSignal too: Ctrl-C, SIGTERM, SIGHUP
        if not getattr(stop, "said", False):  # follow says how many trials it left
            console.print(
                f"stopped: {spec.name}: every result recorded stays recorded; run the same "
                "command to resume"
            )
        raise


def _check_records(spec: StudySpec, trials: list[Trial]) -> None:
    """The recorded attempts (Store.read: a damaged one is a UsageError) and, with `decide:`,
    Rounds.of (DesignChanged, CellsChanged or DamagedLooks) on the store opened read-only,
    before anything is written. A database that holds a killed driver's unfinished write is
    read once the driver rolled it back (_drive reads both again then)."""
    try:
        store = Store(spec, create=False)
        store.read(trials)
        if spec.decide is not None:
            Rounds.of(spec, store, trials)
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
        catch_up(store, trials, executor, console)
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
        except KeyboardInterrupt:  # a stop between rounds: stop the workers as follow does
            executor.close(cancel=not executor.jobs_outlive_driver)
            raise
        finally:
            executor.close(cancel=False)  # detached SLURM jobs run on: close never cancels here
        if rounds.finished or not ran.trials:
            waiting = None if rounds.finished else waiting_for(ran.progress, spec.executor.retries)
            for line in decision_lines(rounds, waiting):
                console.print(line, markup=False, highlight=False, soft_wrap=True)
        return ran.progress


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
    stored = prepare(store, trials, spec.executor.retries, console)
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
    handed_out = len(todo)  # follow empties todo as the trials end
    attempts = {key: item.attempts for key, item in todo.items()}
    round_of = rounds.round_of if rounds is not None else None
    jobs = plan_jobs(trials, attempts, spec.executor.population, round_of)
    submit(executor, jobs, todo, log, spec.executor.retries, console)
    if detach and executor.jobs_outlive_driver:
        executor.close(cancel=False)
        console.print(
            f"{len(todo)} trial(s) submitted or still queued; `optbench run` follows them "
            "and records their results, `optbench status` shows them"
        )
        return Ran(progress, handed_out, detached=True)
    view = LiveView(progress, spec.name) if live and console.is_terminal else None
    following = Following(run, spec.executor.stall_timeout_s)
    follow(store, executor, todo, progress, view, log, console, following)
    if not view:
        console.print(progress.table(spec.name))
    for note in input_notes(progress.trials):
        console.print(note, markup=False, highlight=False)
    console.print(
        f"\nrecorded {progress.ran} trial(s); study folder {spec.study_dir}", markup=False
    )
    return Ran(progress, handed_out)
