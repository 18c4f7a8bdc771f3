"""The help a newcomer reads first: every command's `--help` shows its text whole (no help
string loses a bracketed part to markup), flags without a type after them, and `optbench --help`
lists each command with a whole one-line summary."""

from __future__ import annotations

import inspect

import pytest
import typer
from cli_inprocess import run_cli

from optbench.cli.app import app

COMMANDS = typer.main.get_command(app).commands  # name -> click command, as `optbench` has them
EVERY_HELP = [[], *([name] for name in COMMANDS), ["data", "pack"]]
STUDY_COMMANDS = ["run", "status", "cancel", "report"]  # the ones with --set


def _help(args, tmp_path, monkeypatch, capsys) -> str:
    code, out, err = run_cli([*args, "--help"], tmp_path, monkeypatch, capsys)
    assert code == 0, err
    return out


@pytest.mark.parametrize("args", EVERY_HELP, ids=lambda a: " ".join(a) or "optbench")
def test_no_flag_shows_a_type_after_it(args, tmp_path, monkeypatch, capsys):
    out = _help(args, tmp_path, monkeypatch, capsys)
    assert "<bool>" not in out, out
    assert "--help" in out


@pytest.mark.parametrize("command", STUDY_COMMANDS)
def test_the_set_example_is_shown_whole(command, tmp_path, monkeypatch, capsys):
    out = " ".join(_help([command], tmp_path, monkeypatch, capsys).split())
    assert "--set KEY=VALUE" in out
    assert "e.g. --set search.n_samples=8 --set models='[vit_c_4gf]'; repeatable" in out, out


def test_each_command_is_listed_with_its_whole_one_line_summary(tmp_path, monkeypatch, capsys):
    lines = _help([], tmp_path, monkeypatch, capsys).splitlines()
    for name, command in COMMANDS.items():
        summary = inspect.cleandoc(command.help).split("\n\n")[0]
        assert "\n" not in summary, f"{name}: its docstring's first paragraph spans lines"
        assert [name, summary] in [line.split(None, 1) for line in lines], (name, lines)


def test_run_says_what_reports_is_for(tmp_path, monkeypatch, capsys):
    out = " ".join(_help(["run"], tmp_path, monkeypatch, capsys).split())
    assert "sample-size advice of REPORTS/<study name>/summary.json" in out, out
