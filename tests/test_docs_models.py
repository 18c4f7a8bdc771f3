"""docs/models.md holds the zoo table exactly as `optbench models` prints it."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from optbench.cli.app import app

DOC = Path(__file__).parent.parent / "docs" / "models.md"
BEGIN, END = "<!-- BEGIN `optbench models`", "<!-- END `optbench models` -->"


@pytest.mark.slow
def test_docs_table_is_the_output_of_optbench_models():
    text = DOC.read_text()
    block = text[text.index(BEGIN) : text.index(END)]
    documented = block.split("\n", 1)[1].strip()  # the lines after the BEGIN marker
    result = CliRunner().invoke(app, ["models"])
    assert result.exit_code == 0, result.output
    assert documented == result.output.strip(), (
        "docs/models.md is stale: paste the output of `optbench models` between its markers"
    )
