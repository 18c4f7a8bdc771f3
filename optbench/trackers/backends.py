"""Experiment trackers (MLflow, Weights & Biases): the two backends that write one tracker run
(`open_run`), offline first, as the study's `tracking:` block (spec/tracking.py) sets them.

Runs. One tracker run per trial (trackers/trial_run.py feeds it from metrics.jsonl) and one per
study for the report's files (`attach_report`). Grouping: MLflow's experiment is the study, a
run's tags name its cell, model, optimizer, epochs, seed and sample; W&B's project is the
study's (or `project`), group the cell, job_type "trial". A run is reopened by the id kept in
its folder (RUN_FILE), so a resumed or retried trial continues its run. A trial stopped while its
run opens keeps that run too: a W&B id is chosen and recorded before the run opens (`new_run_id`),
and an MLflow run (its id the server's) that holds this trial's key and nothing logged yet is
taken up again rather than made twice.

Nothing outside the study folder: `tracker_env` points W&B's run, cache, config and data
folders into <study folder>/wandb and turns MLflow's telemetry off; an MLflow file or SQLite
store keeps its artifacts in the study folder (`_artifacts`).
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import secrets
import string
import urllib.parse
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

from optbench import safefs
from optbench.provenance import provenance
from optbench.spec.caps import MAX_EPOCHS

# Tracking is also named here as optbench.trackers.backends.Tracking by the pickles of SLURM jobs
# queued before it moved to spec/tracking.py (executors/slurm/legacy.py, MOVED_CLASSES)
from optbench.spec.tracking import MLFLOW_FOLDER, Tracking

RUN_FILE = "tracker.json"  # in a trial (or report) folder: which tracker run it writes to
WANDB_FOLDER = "wandb"  # in the study folder: W&B's offline runs, cache and config
ARTIFACT_FOLDER = "mlartifacts"  # in the study folder: a SQLite store's artifacts
LOCK_FILE = ".tracking.lock"  # in the study folder: one worker creates the experiment
STATUS = {"finished": "FINISHED", "diverged": "FINISHED", "failed": "FAILED", None: "KILLED"}
# A server that does not answer fails a write within seconds, not MLflow's minutes (7 retries,
# 120 s timeouts): one retry after 1 s, 5 s to connect or answer (its trial's run is completed
# by the next `optbench run`, repair.py).
MLFLOW_HTTP_LIMITS = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "1",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "5",
}


def tracker_env(tracking: Tracking, study_dir: Path) -> dict[str, str]:
    """The environment the tracker libraries read: no telemetry, W&B's folders in the study
    folder (and offline unless `mode: online`; online keeps the user's login, in W&B's config)."""
    wandb = study_dir.resolve() / WANDB_FOLDER
    env = {
        "MLFLOW_DISABLE_TELEMETRY": "true",
        "MLFLOW_ALLOW_FILE_STORE": "true",  # MLflow 3 keeps the file store in maintenance mode
        **MLFLOW_HTTP_LIMITS,
        "WANDB_SILENT": "true",
        "WANDB_DISABLE_GIT": "true",
        "WANDB_DISABLE_CODE": "true",
        "WANDB_DIR": str(study_dir.resolve()),
        "WANDB_CACHE_DIR": str(wandb / "cache"),
        "WANDB_DATA_DIR": str(wandb / "data"),
        "WANDB_ARTIFACT_DIR": str(wandb / "artifacts"),
    }
    if tracking.kind == "wandb" and tracking.mode == "offline":
        env |= {"WANDB_MODE": "offline", "WANDB_CONFIG_DIR": str(wandb / "config")}
    return env


# --- the run file: which run a folder writes to, and how many epochs it holds ----------------


class RunFile(NamedTuple):
    """What a folder's RUN_FILE says of its run in one tracker: its id (None: no run), the last
    epoch it holds, and whether it ended (None: a file from before optbench recorded that)."""

    run_id: str | None
    logged: int
    ended: bool | None


def read_run_file(folder: Path, root: Path, tracking: Tracking) -> RunFile:
    """`folder`'s run in this tracker; no run where there is none, it is another tracker's, or
    the file is not ours (untrusted input)."""
    try:
        data = json.loads(safefs.read_bytes(folder / RUN_FILE, root, 1 << 16) or b"null")
        entry = data[_where(tracking)]
        run_id, logged, ended = entry["run_id"], entry["logged"], entry.get("ended")
    except (
        OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError, safefs.UnsafePath
    ):  # fmt: skip
        return RunFile(None, 0, None)  # RecursionError: nested deeper than Python's stack
    if not (isinstance(run_id, str) and re.fullmatch(r"[A-Za-z0-9_-]{1,64}", run_id)):
        return RunFile(None, 0, None)
    logged = logged if type(logged) is int and 0 <= logged <= MAX_EPOCHS else 0
    return RunFile(run_id, logged, ended if type(ended) is bool else None)


def write_run_file(
    folder: Path, root: Path, tracking: Tracking, run_id: str, logged: int, ended: bool = False
) -> None:
    """Record `folder`'s run id, the last epoch logged and whether the run ended (atomically,
    safefs)."""
    entry = {"run_id": run_id, "logged": logged, "ended": ended}
    safefs.write_text(folder / RUN_FILE, root, json.dumps({_where(tracking): entry}) + "\n")


def new_run_id(tracking: Tracking) -> str | None:
    """The id of a run not yet opened, to record before it opens: W&B takes one from the caller
    (8 characters of [a-z0-9], as its own), MLflow's server assigns its own (None)."""
    if tracking.kind != "wandb":
        return None
    return "".join(secrets.choice(string.ascii_lowercase + string.digits) for _ in range(8))


def _where(tracking: Tracking) -> str:
    return f"{tracking.kind}:{tracking.uri or tracking.project}"


def attach_report(tracking: Tracking | None, study_dir: Path, report_dir: Path) -> str | None:
    """Attach the files of the report in `report_dir` to the study's report run (one per study,
    its id in the study folder's RUN_FILE: a report drawn again replaces its files). None, or
    the warning line of a tracker that failed (the report itself is written either way)."""
    if tracking is None:
        return None
    try:
        run_id = read_run_file(study_dir, study_dir, tracking).run_id
        tags = {"study": study_dir.name, **{k: str(v) for k, v in provenance().items()}}
        meta = {"name": "report", "group": "report", "job": "report", "tags": tags, "params": {}}
        run = open_run(tracking, study_dir, run_id, meta)
        write_run_file(study_dir, study_dir, tracking, run.run_id, 0)
        files = [p for p in sorted(report_dir.rglob("*")) if p.is_file() and not p.is_symlink()]
        run.attach(files, report_dir)
        run.end("finished", {"status": "report"})
    except Exception as err:  # noqa: BLE001 - the tracker's failure is never the report's
        why = describe_failure(err, tracking)
        return f"optbench: {tracking.kind}: the report's files were not attached: {why}"
    return None


def describe_failure(err: BaseException, tracking: Tracking) -> str:
    """Why a tracker write failed, in optbench's words (never the library's message, which
    may run to hundreds of characters): what did not answer or could not be written."""
    # what led to it: the causes and contexts, and the errors that HTTP libraries keep as an
    # argument or a `reason` (urllib3 and requests wrap a connection reset so, and a server
    # killed mid-request ends there, with nothing chained)
    chain, waiting = [], [err]
    while waiting and len(chain) < 20:
        seen = waiting.pop(0)
        if any(seen is e for e in chain):
            continue
        chain.append(seen)
        linked = [seen.__cause__, seen.__context__, getattr(seen, "reason", None), *seen.args]
        waiting += [e for e in linked if isinstance(e, BaseException)]
    if tracking.kind == "mlflow":
        uri = tracking.uri or ""
        where = f"the MLflow {'server' if uri.startswith('http') else 'store'} at {uri}"
    else:
        where = f"W&B ({tracking.mode} mode)"
    if any(isinstance(e, ImportError) for e in chain):
        return f"{tracking.kind} is not installed here: pip install 'optbench[{tracking.kind}]'"
    if any(isinstance(e, TimeoutError) for e in chain):
        return f"{where} did not answer in time"
    if any(isinstance(e, ConnectionError) for e in chain):
        return f"{where} is not answering"
    if any(isinstance(e, safefs.UnsafePath) for e in chain):
        return str(next(e for e in chain if isinstance(e, safefs.UnsafePath)))
    disk = next((e for e in chain if isinstance(e, OSError) and e.strerror), None)
    if disk is not None:
        named = f": {disk.filename}" if disk.filename else ""
        return f"{where} could not be written ({disk.strerror.lower()}{named})"
    return f"{where} refused a write ({type(err).__name__})"


# --- the backends ------------------------------------------------------------------------------


def open_run(tracking: Tracking, study_dir: Path, run_id: str | None, meta: dict) -> TrackerRun:
    """A tracker run: `run_id`'s continued, or a new one with `meta` (name, group, tags,
    params). Imports the tracker library: call it off the training thread."""
    for own in (MLFLOW_FOLDER, WANDB_FOLDER):  # a planted link would lead the tracker out
        safefs.check(study_dir / own, study_dir)
    os.environ.update(tracker_env(tracking, study_dir))
    backend = MlflowRun if tracking.kind == "mlflow" else WandbRun
    return backend(tracking, study_dir, run_id, meta)


class TrackerRun:
    """What both backends do: log epoch lines, attach files, end with a status."""

    run_id: str

    def log(self, lines: Iterable[dict]) -> None: ...

    def attach(self, files: Iterable[Path], base: Path) -> None: ...

    def end(self, status: str | None, summary: dict) -> None: ...


def _numbers(line: dict) -> dict[str, float]:
    return {k: v for k, v in line.items() if k != "epoch" and type(v) in (int, float)}


class MlflowRun(TrackerRun):
    """One MLflow run in the experiment named after the study (created once, under a lock)."""

    def __init__(self, tracking: Tracking, study_dir: Path, run_id: str | None, meta: dict):
        from mlflow.entities import Param
        from mlflow.tracking import MlflowClient

        self.client = MlflowClient(tracking_uri=tracking.uri)
        self.local_roots = _local_roots(study_dir, tracking.uri)
        if run_id is not None and self._exists(run_id):
            self.run_id = run_id
            self.client.update_run(run_id, status="RUNNING")
            return
        experiment = self._experiment(study_dir, tracking.uri)
        self.run_id = self._unlogged(experiment, meta["tags"].get("key"))
        if self.run_id is not None:
            self.client.update_run(self.run_id, status="RUNNING")
        else:
            tags = {**meta["tags"], "optbench.group": meta["group"], "optbench.job": meta["job"]}
            run = self.client.create_run(experiment, run_name=meta["name"], tags=tags)
            self.run_id = run.info.run_id
        params = [Param(k, str(v)[:6000]) for k, v in meta["params"].items()]
        for i in range(0, len(params), 100):  # MLflow takes up to 100 params per batch
            self.client.log_batch(self.run_id, params=params[i : i + 100])

    def _exists(self, run_id: str) -> bool:
        from mlflow.exceptions import MlflowException

        try:
            return self.client.get_run(run_id).info.lifecycle_stage == "active"
        except MlflowException:
            return False

    def _unlogged(self, experiment: str, key: str | None) -> str | None:
        """The run of the trial `key` that was opened but never recorded in its folder (the
        trial stopped while it opened): one with nothing logged yet, or None."""
        if key is None or "'" in key:  # a folder's name, not optbench's key: not in a filter
            return None
        found = self.client.search_runs([experiment], f"tags.key = '{key}'")
        return next((run.info.run_id for run in found if not run.data.metrics), None)

    def _experiment(self, study_dir: Path, uri: str) -> str:
        """The study's experiment id; workers that start together create it once (a lock file
        in the study folder), a local store's artifacts in the study folder."""
        name = study_dir.name
        lock = safefs.open_rw(study_dir / LOCK_FILE, study_dir)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)
            found = self.client.get_experiment_by_name(name)
            if found is not None:
                return found.experiment_id
            return self.client.create_experiment(name, artifact_location=_artifacts(study_dir, uri))
        finally:
            os.close(lock)  # and with it the lock

    def log(self, lines: Iterable[dict]) -> None:
        from mlflow.entities import Metric

        metrics = [
            Metric(k, float(v), 0, line["epoch"])
            for line in lines
            for k, v in _numbers(line).items()
        ]
        for i in range(0, len(metrics), 1000):  # MLflow's batch limit
            self.client.log_batch(self.run_id, metrics=metrics[i : i + 1000])

    def attach(self, files: Iterable[Path], base: Path) -> None:
        # MLflow copies a local run's artifacts to the artifact_uri its store records (a file of
        # the store, meta.yaml or a database row): one edited to lead elsewhere is refused
        where = self.client.get_run(self.run_id).info.artifact_uri
        if not _inside(where, self.local_roots):
            raise safefs.UnsafePath(
                f"the report run's artifact location {where} is outside the study folder and "
                "the MLflow store; optbench writes nowhere else"
            )
        for path in files:
            folder = path.parent.relative_to(base).as_posix()
            self.client.log_artifact(self.run_id, str(path), None if folder == "." else folder)

    def end(self, status: str | None, summary: dict) -> None:
        from mlflow.entities import RunTag

        tags = [RunTag(f"optbench.{k}", str(v)[:5000]) for k, v in summary.items()]
        self.client.log_batch(self.run_id, tags=tags)
        self.client.set_terminated(self.run_id, STATUS[status])


def _local_roots(study_dir: Path, uri: str) -> tuple[Path, ...] | None:
    """The folders a local store's artifacts may lie in: the study folder and a file store's own
    folder (resolved: links followed); None for a server (its artifacts are where it says)."""
    roots = [study_dir.resolve()]
    if uri.startswith("file:"):
        roots.append(_file_path(uri))
    elif not uri.startswith("sqlite:"):
        return None
    return tuple(roots)


def _inside(artifact_uri: str, roots: tuple[Path, ...] | None) -> bool:
    """Whether a run's artifact URI lies in one of `roots` (None: anywhere, a server's)."""
    if roots is None:
        return True
    if urllib.parse.urlparse(artifact_uri).scheme not in ("", "file"):
        return False  # a local store's run sending its artifacts to s3:, http: or the like
    path = _file_path(artifact_uri)
    return any(path.is_relative_to(root) for root in roots)


def _file_path(uri: str) -> Path:
    """The folder a file: URI (or a plain path) names, links followed."""
    return Path(urllib.parse.unquote(urllib.parse.urlparse(uri).path)).resolve()


def _artifacts(study_dir: Path, uri: str) -> str | None:
    """Where a new experiment keeps its artifacts: a file store's own default (inside it), a
    SQLite store's in the study folder (MLflow's default is ./mlartifacts in the working
    folder), a server's where the server says."""
    if uri.startswith("sqlite:"):
        return (study_dir.resolve() / ARTIFACT_FOLDER).as_uri()
    return None


class WandbRun(TrackerRun):
    """One W&B run (offline: a folder of files under <study folder>/wandb, for `wandb sync`)."""

    def __init__(self, tracking: Tracking, study_dir: Path, run_id: str | None, meta: dict):
        import wandb

        self.run = wandb.init(
            project=tracking.project,
            group=meta["group"],
            job_type=meta["job"],
            name=meta["name"],
            id=run_id,
            resume="allow",
            reinit="create_new",  # a population's members: runs side by side in one process
            config=meta["params"],
            tags=[v for k, v in meta["tags"].items() if k in ("model", "optimizer")],
            dir=str(study_dir.resolve()),
            mode=tracking.mode,
            settings=wandb.Settings(
                console="off", x_disable_stats=True, x_disable_machine_info=True
            ),
        )
        self.run_id = self.run.id
        self.run.config.update({"optbench": meta["tags"]}, allow_val_change=True)

    def log(self, lines: Iterable[dict]) -> None:
        for line in lines:
            self.run.log(_numbers(line), step=line["epoch"])

    def attach(self, files: Iterable[Path], base: Path) -> None:
        for path in files:
            self.run.save(str(path), base_path=str(base), policy="now")

    def end(self, status: str | None, summary: dict) -> None:
        self.run.summary.update(summary)
        self.run.finish(exit_code=0 if STATUS[status] == "FINISHED" else 1)
