"""What optbench prints through rich, shown as text: the console (`text_console`) and the tables
(`TextTable`) of `optbench run`, `status` and `--dry-run`.

Console lines and tables show data from files: device names and messages from result files,
paths and names from the study file. rich reads a str as markup ("[/]" is a MarkupError
traceback, "[red]" a style the file chooses) and ":smile:" as an emoji; a Text is shown as it
is. Imports only rich (the command line imports it at start-up).
"""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text


def text_console(**options) -> Console:
    """The console optbench prints through: strings are text, never markup or emoji codes."""
    return Console(markup=False, emoji=False, **options)


class TextTable(Table):
    """A rich Table whose cells, title and caption are Text whatever console prints it (a
    caller's may read markup): strings given are shown as they are."""

    def add_row(self, *cells, **options) -> None:
        super().add_row(*(Text(c) if isinstance(c, str) else c for c in cells), **options)

    def add_caption(self, line: str) -> None:
        """Add a line below the caption (or start it)."""
        self.caption = line if not self.caption else self.caption + "\n" + line

    @property
    def title(self) -> Text | None:
        return self._title

    @title.setter
    def title(self, value: str | Text | None) -> None:
        self._title = Text(value, style="table.title") if isinstance(value, str) else value

    @property
    def caption(self) -> Text | None:
        return self._caption

    @caption.setter
    def caption(self, value: str | Text | None) -> None:
        self._caption = Text(value, style="table.caption") if isinstance(value, str) else value
