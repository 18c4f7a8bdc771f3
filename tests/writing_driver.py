"""A driver that trains nothing: `WritingExecutor`, whose 'workers' only write each job's
result.json, and, run as a script, that driver killed by SIGKILL just before its N-th database
write, on FOLDER/study.yaml (`python tests/writing_driver.py N FOLDER [N FOLDER ...]`): a
driver killed inside a write, at points chosen by number, for tests/test_faults.py."""

from __future__ import annotations

import json
import os
import signal
import sys
import traceback
from pathlib import Path

import optuna
import sqlalchemy
import yaml
from rich.console import Console

from optbench.executors.protocol import JobEvent
from optbench.run.driver import run_study
from optbench.spec.schema import parse_spec
from optbench.store.database import Store
from optbench.trial.config import TrialResult
from optbench.trial.results import METRICS_FILE, RESULT_FILE, write_result

# The statements that end a database write: a transaction's COMMIT, and CREATE, which pysqlite
# commits by itself. Killed just before one, the driver is killed inside that write.
WRITES = ("CREATE", "COMMIT")


class WritingExecutor:
    """An executor whose 'workers' only write the given bytes as each job's result.json (or a
    valid finished result where none is given): the driver's handling of what it reads back,
    without training anything. `submitted` lists the keys of the jobs it was given."""

    jobs_outlive_driver = False

    def __init__(self, payload: bytes | None = None):
        self.payload, self.queue, self.submitted = payload, [], []

    def settle(self, jobs):
        return []

    def submit(self, jobs):
        self.queue += jobs
        self.submitted += [job.key for job in jobs]
        return "test"

    def poll(self, timeout):
        if not self.queue:
            return []
        job = self.queue.pop(0)
        path = job.out_dir / RESULT_FILE
        path.parent.mkdir(parents=True, exist_ok=True)
        if self.payload is None:
            write_result(
                job.out_dir,
                TrialResult(
                    status="finished",
                    final_error=7.0,
                    best_error=6.0,
                    epochs=1,
                    config=job.config,
                    attempt=job.attempt,  # as a worker records it
                ),
            )
        else:
            path.write_bytes(self.payload)
        return [JobEvent(job.key, "ended")]

    def close(self, cancel):
        pass


class LongTrialExecutor(WritingExecutor):
    """A WritingExecutor whose trials also leave the metrics of a long schedule (400 epochs, the
    paper's longest): recording one is a write of many pages."""

    EPOCHS = 400

    def poll(self, timeout):
        for job in self.queue[:1]:
            job.out_dir.mkdir(parents=True, exist_ok=True)
            lines = [
                json.dumps(
                    {
                        "epoch": e,
                        "lr": 1e-3 / e,
                        "train_loss": 2.0 / e,
                        "images_per_s": 1234.56,
                        "epoch_s": 1.2345,
                        "input_wait": 0.0123,
                        "val_loss": 1.5 / e,
                    }
                )
                for e in range(1, self.EPOCHS + 1)
            ]
            (job.out_dir / METRICS_FILE).write_text("\n".join(lines) + "\n")
        return super().poll(timeout)


def kill_before_write(n: int) -> list[int]:
    """SIGKILL this process just before the n-th statement that ends a write (WRITES), counted
    over every SQLite connection SQLAlchemy opens from now on. Returns the count, in a list."""
    count = [0]

    def trace(statement: str) -> None:
        if statement.lstrip().upper().startswith(WRITES):
            count[0] += 1
            if count[0] == n:
                os.kill(os.getpid(), signal.SIGKILL)

    @sqlalchemy.event.listens_for(sqlalchemy.engine.Engine, "connect")
    def traced(dbapi_connection, _record) -> None:
        # So that a kill inside a transaction leaves what one inside its commit leaves, a file
        # half-written beside a hot journal: a one-page cache spills changed pages into the file
        # before the commit (as a large write does), and without syncs SQLite marks its journal
        # valid as it writes it, not at the commit.
        dbapi_connection.execute("PRAGMA cache_size=1")
        dbapi_connection.execute("PRAGMA synchronous=OFF")
        dbapi_connection.set_trace_callback(trace)

    return count


def main(study: Path, n: int, recorded: Path) -> None:
    """run_study (what `optbench run STUDY` runs after its checks, which import torch) on
    a LongTrialExecutor, killed before its n-th write; each trial it recorded (Store.record
    committed) is appended to `recorded`. A run that is not killed prints how many writes it
    made."""
    record = Store.record

    def record_and_note(self, item, result, metrics, **options):
        done = record(self, item, result, metrics, **options)
        if done:  # written once the commit returned: the OS keeps it past a SIGKILL
            with open(recorded, "a") as f:
                f.write(f"{item.trial.key}\n")
        return done

    Store.record = record_and_note
    spec = parse_spec(yaml.safe_load(study.read_text()))
    count = kill_before_write(n)
    with open(os.devnull, "w") as devnull:
        run_study(spec, LongTrialExecutor(), console=Console(file=devnull), live=False)
    print(f"writes: {count[0]}")


def killed_drivers(runs: list[tuple[int, Path]]) -> None:
    """For each (n, folder), main() on folder/study.yaml killed before its n-th write, in a
    child forked from this process (so that the imports are made once); prints "n exit-code"
    for each, -9 for SIGKILL."""
    optuna.storages.RDBStorage("sqlite://")  # optuna's first one imports alembic: here, once
    for n, folder in runs:
        sys.stdout.flush()
        pid = os.fork()
        if pid == 0:
            _child(folder, n)
        _, status = os.waitpid(pid, 0)
        print(f"{n} {os.waitstatus_to_exitcode(status)}", flush=True)


def _child(folder: Path, n: int) -> None:
    code = 1
    try:
        os.chdir(folder)
        main(Path("study.yaml"), n, Path("recorded.txt"))
        code = 0
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        os._exit(code)  # never the parent's exit handlers


if __name__ == "__main__":  # N FOLDER [N FOLDER ...]
    args = sys.argv[1:]
    killed_drivers(
        [(int(n), Path(folder)) for n, folder in zip(args[::2], args[1::2], strict=True)]
    )
