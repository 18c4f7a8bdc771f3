"""The `optbench` command line: thin wrappers that parse flags and call the library. The
commands live in study_commands.py (run, status, cancel), train_commands.py (train, models),
optimizer_commands.py (optimizers), report_commands.py (report, compare) and data_commands.py
(data pack); this module makes them one app and owns how errors end it.

Bad input (a spec that does not validate, an unknown model, a missing dataset folder) raises
`UsageError`; `main` prints it as one message and exits with code 2, before anything is written.
So does a flag that click refuses (a bad value, a missing argument): one `error:` line naming
it, not typer's usage box.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from optbench.cli.data_commands import data_app
from optbench.cli.optimizer_commands import optimizers
from optbench.cli.report_commands import compare, report
from optbench.cli.study_commands import cancel, run, status
from optbench.cli.train_commands import models, train
from optbench.errors import (
    MeasureFailed,
    StorageUnavailable,
    UsageError,
    WriteError,
    torch_mismatch,
)
from optbench.host import freeze_at_exit

# Help is click's plain text, not typer's rich panels: rich reads "[...]" in a help string as
# markup and drops it (the --set example lost its '[vit_c_4gf]'), keeps a docstring's line
# breaks in the command list, and shows a <bool> type after every flag.
app = typer.Typer(
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    help="Benchmark how easy vision models are to optimize.",
)
app.add_typer(data_app, name="data")  # optbench data pack (data_commands.py)


def _print_version(value: bool) -> None:
    if value:
        from optbench import __version__

        typer.echo(f"optbench {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_print_version, is_eager=True, help="print the version"),
    ] = False,
) -> None:
    """Benchmark how easy vision models are to optimize (Xiao et al. 2021; DHVT)."""


# One module per command group; the order here is the order of `optbench --help`.
for command in (train, run, status, cancel, models, optimizers, report, compare):
    app.command()(command)


def main() -> None:
    freeze_at_exit()
    try:
        # Not standalone: click's errors (a bad flag value, a missing argument) come here to be
        # one line, not typer's usage box. The name fixes the completion variable
        # (_OPTBENCH_COMPLETE) and the usage line under `python -m` too.
        code = app(prog_name="optbench", standalone_mode=False)
        sys.exit(code or 0)  # typer.Exit(code) and Ctrl-C (130) come back as an exit code
    except typer.TyperException as err:  # click's errors (typer vendors click): usage, files
        if type(err).__name__ == "NoArgsIsHelpError":  # bare `optbench`: the help, as click's
            err.show()
            sys.exit(2)
        typer.echo(f"error: {click_error_line(err)}", err=True)
        sys.exit(err.exit_code)  # 2 for a usage error, as in click's standalone mode
    except typer.Abort:  # Ctrl-D at a prompt (Ctrl-C is typer's exit 130)
        typer.echo("error: aborted", err=True)
        sys.exit(1)
    except UsageError as err:
        typer.echo(f"error: {err}", err=True)
        sys.exit(2)
    # not bad input: a full disk, a server down, a --measure process that failed
    except (WriteError, StorageUnavailable, MeasureFailed) as err:
        typer.echo(f"error: {err}", err=True)
        sys.exit(1)
    except (RuntimeError, ImportError) as err:  # torchvision built for another torch: one line
        mismatch = torch_mismatch(err)
        if mismatch is None:
            raise
        typer.echo(f"error: {mismatch}", err=True)
        sys.exit(1)


def click_error_line(err: typer.TyperException) -> str:
    """A click error as one line: click's message (a usage error's names the option or
    argument) and, for a command's usage error, where that command's help is."""
    message = " ".join(err.format_message().split())
    ctx = getattr(err, "ctx", None)
    return f"{message} (see `{ctx.command_path} --help`)" if ctx is not None else message


if __name__ == "__main__":
    main()
