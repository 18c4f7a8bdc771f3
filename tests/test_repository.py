"""The repository stands alone: no committed file points at a folder outside it (the team's
reference notes, a developer's machine); papers are cited by name and section instead."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
OUTSIDE = re.compile(r"\.\./shared|shared/reference|/work/")


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git to list the committed files")
def test_no_committed_file_points_outside_the_repository():
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=REPO, capture_output=True, text=True, check=False
    )
    if listed.returncode != 0:
        pytest.skip("not a git checkout")
    files = [REPO / name for name in listed.stdout.split("\0") if name]
    assert len(files) > 50
    offending = []
    for path in files:
        if path.suffix in (".png", ".parquet") or path == Path(__file__).resolve():
            continue
        try:
            text = path.read_text()
        except (UnicodeDecodeError, FileNotFoundError):
            continue
        offending += [
            f"{path.relative_to(REPO)}:{n}: {line.strip()}"
            for n, line in enumerate(text.splitlines(), start=1)
            if OUTSIDE.search(line)
        ]
    assert offending == []
