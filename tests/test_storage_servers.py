"""Study storages beside the default SQLite file: a PostgreSQL server (`optbench[postgres]`) and
optuna's journal file; and a storage that does not answer, which is one line, never a traceback."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import uuid

import optuna
import pytest
import sqlalchemy
import yaml
from cli_inprocess import run_cli
from writing_driver import WritingExecutor

from optbench.api import load_trials
from optbench.executors.local import InlineExecutor
from optbench.plan.trials import plan
from optbench.run.driver import run_study
from optbench.spec.schema import parse_spec
from optbench.store.database import Store
from optbench.store.storage_url import server_url


def _quiet():
    from rich.console import Console

    return Console(file=open("/dev/null", "w"))  # noqa: SIM115


def _digests(tiny_dict: dict, storage: str | None) -> dict[str, str]:
    data = {**tiny_dict, "storage": storage, "name": f"tiny-{uuid.uuid4().hex[:8]}"}
    data["search"] = {**tiny_dict["search"], "n_samples": 1}
    data["models"] = tiny_dict["models"][:1]
    spec = parse_spec(data)
    run_study(spec, InlineExecutor(), console=_quiet(), live=False)
    frame = Store(spec, create=False).frame(plan(spec))
    assert (frame.status == "finished").all() and len(frame) == 1
    return dict(zip(frame.model, frame.digest, strict=True))


@pytest.mark.slow
def test_a_study_on_postgresql_and_on_a_journal_file_records_what_sqlite_does(
    tiny_dict, tmp_path, postgres_url
):
    on_sqlite = _digests(tiny_dict, None)
    assert _digests(tiny_dict, postgres_url) == on_sqlite
    assert _digests(tiny_dict, f"journal://{tmp_path / 'journal.log'}") == on_sqlite


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "optbench", *args], capture_output=True, text=True, timeout=600
    )


@pytest.mark.slow
def test_a_postgresql_server_that_is_down_is_one_line_with_the_password_masked(
    tiny_dict, tmp_path, private_postgres
):
    url = private_postgres.url
    password = url.split(":")[2].split("@")[0]
    private_postgres.stop()
    study = tmp_path / "study.yaml"
    study.write_text(yaml.safe_dump({**tiny_dict, "storage": url}))
    for command in ("run", "status"):
        proc = _cli(command, str(study))
        assert proc.returncode == 1, proc.stderr
        [line] = proc.stderr.splitlines()
        assert line.startswith("error: storage postgresql://optbench:***@127.0.0.1:")
        assert "is not answering" in line and "Connection refused" in line
        assert password not in proc.stderr + proc.stdout


def _tables(url: str) -> list[str]:
    engine = sqlalchemy.create_engine(server_url(url))
    try:
        return sqlalchemy.inspect(engine).get_table_names()
    finally:
        engine.dispose()


@pytest.mark.slow
def test_commands_that_only_read_make_no_table_on_a_database_server_and_cannot_write(
    tiny_dict, tmp_path, private_postgres, monkeypatch, capsys
):
    # optuna's RDBStorage makes its tables wherever it opens: `status` on an empty database
    # made them.
    url = private_postgres.url
    study = tmp_path / "study.yaml"
    study.write_text(yaml.safe_dump({**tiny_dict, "storage": url}))
    for command in (["status", str(study)], ["run", str(study), "--dry-run"]):
        code, _, err = run_cli(command, tmp_path, monkeypatch, capsys)
        assert code == 0, err
    assert (load_trials(study).status == "pending").all()
    assert _tables(url) == []
    spec = parse_spec({**tiny_dict, "storage": url})
    run_study(spec, WritingExecutor(), console=_quiet(), live=False)
    reader = Store(spec, create=False)
    assert {s.status for s in reader.read(plan(spec))} == {"finished"}
    with pytest.raises(optuna.exceptions.StorageInternalError):  # its sessions are read-only
        optuna.create_study(study_name="another", storage=reader.storage)


@pytest.mark.slow
@pytest.mark.skipif(
    importlib.util.find_spec("psycopg2") is not None, reason="psycopg2 is installed here"
)
def test_a_missing_database_driver_names_the_extra(tiny_dict, tmp_path):
    study = tmp_path / "study.yaml"
    study.write_text(yaml.safe_dump({**tiny_dict, "storage": "postgresql+psycopg2://u:pw@h/db"}))
    proc = _cli("run", str(study))
    assert proc.returncode == 2
    [line] = proc.stderr.splitlines()
    assert "postgresql+psycopg2://u:***@h/db" in line and "optbench[postgres]" in line


def test_an_unusable_database_server_is_refused_with_the_password_masked(monkeypatch):
    # e.g. optuna's schema-version RuntimeError, whose text may quote the URL
    from optbench.errors import UsageError
    from optbench.store import storage_url

    url = "postgresql://optbench:s3cret@db.example:5432/studies"

    def refuse(_url, _writer):
        raise RuntimeError(f"cannot upgrade the schema of {url}")

    monkeypatch.setattr(storage_url, "_open_storage", refuse)
    with pytest.raises(UsageError) as refused:
        storage_url.make_storage(url, writer=True)
    assert "s3cret" not in str(refused.value) and "***" in str(refused.value)


def test_a_missing_extra_skips_saying_how_to_install_it_unless_ci_requires_it(monkeypatch):
    from services import needs_extra

    monkeypatch.delenv("OPTBENCH_TEST_REQUIRE", raising=False)
    with pytest.raises(pytest.skip.Exception, match=r"pip install -e '\.\[nope\]'"):
        needs_extra("optbench_no_such_module", "nope", "postgres")
    needs_extra("yaml", "nope", "postgres")  # installed: nothing happens
    monkeypatch.setenv("OPTBENCH_TEST_REQUIRE", "slurm,postgres")
    with pytest.raises(pytest.fail.Exception, match="OPTBENCH_TEST_REQUIRE"):
        needs_extra("optbench_no_such_module", "nope", "postgres")
