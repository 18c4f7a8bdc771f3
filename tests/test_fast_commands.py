"""Read-only commands need neither the dataset's files nor torch: `import optbench` and the
command line's start load no torch or timm, `status`, `cancel` and `report` work on a study whose
dataset folder is absent, and `optbench models` reads its counts from a cache once counted."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from fifos import fifo_never_waited_on

from optbench.data.datasets import check_dataset
from optbench.errors import UsageError
from optbench.models import cache
from optbench.spec.catalogue import CATALOGUE
from optbench.spec.recipe import Dataset

REPO = Path(__file__).resolve().parent.parent

RUN_AND_LIST_MODULES = """
import json, sys
from optbench.cli.app import main
sys.argv = ["optbench", *sys.argv[1:]]
try:
    main()
except SystemExit as exit_:
    assert not exit_.code, exit_.code
print(json.dumps(sorted(m for m in ("torch", "timm", "sklearn") if m in sys.modules)))
"""


def _loaded_after(*args: str, cwd: Path) -> list[str]:
    """Run `optbench ARGS` in a fresh interpreter; which of torch, timm and scikit-learn it
    imported."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-c", RUN_AND_LIST_MODULES, *args],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def test_importing_optbench_loads_neither_torch_nor_timm():
    code = (
        "import sys, optbench, optbench.cli, optbench.models\n"
        "import optbench.run.preflight, optbench.spec.overrides\n"
        "print([m for m in ('torch', 'timm') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_every_catalogued_dataset_and_layout_is_checked_and_refused_without_its_files(tmp_path):
    # the catalogue (read without torch by spec and checks) is what the loaders know: each
    # name in each of its layouts has a check, which names the missing root in one line
    for kind in CATALOGUE.values():
        for layout in kind.layouts:
            if kind.format == "bundled":
                check_dataset(Dataset(name=kind.name))
                continue
            missing = tmp_path / "absent"
            with pytest.raises(UsageError, match=f"dataset.root: {missing}"):
                check_dataset(Dataset(name=kind.name, root=missing, layout=layout))


@pytest.fixture
def away(tiny_dict, tmp_path) -> Path:
    """A study of a dataset whose folder is on another machine."""
    tiny_dict["dataset"] = {"name": "imagefolder", "root": str(tmp_path / "on-the-cluster")}
    tiny_dict["output"] = "results"
    (tmp_path / "away.yaml").write_text(yaml.safe_dump(tiny_dict))
    return tmp_path


@pytest.mark.slow
def test_status_and_cancel_need_no_data_and_no_torch(away):
    assert _loaded_after("status", "away.yaml", "--trials", cwd=away) == []
    assert _loaded_after("cancel", "away.yaml", cwd=away) == []
    assert not (away / "results").exists()


def test_report_needs_no_data(cli, away):
    code, _, err = cli("report", "away.yaml", "--complexity")
    assert code == 0, err
    page = (away / "reports" / "tiny" / "index.html").read_text()
    assert "No finished or diverged trial" in page


@pytest.fixture
def empty_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    cache.CACHE.clear()
    yield
    cache.CACHE.clear()  # the next test reads the session's cache again


@pytest.mark.slow
def test_a_dry_run_on_digits_loads_neither_torch_timm_nor_sklearn_once_its_models_are_cached(
    tiny_dict, tmp_path, empty_cache
):
    # the input-size check reads each model's patch size from the cache after the first run,
    # digits' split size from the catalogue, and the dataset checks import torch only where
    # they make tensors (data/datasets.py): `optbench run` checks without any of them
    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump(tiny_dict))
    assert "timm" in _loaded_after("run", "tiny.yaml", "--dry-run", cwd=tmp_path)  # computed
    assert _loaded_after("run", "tiny.yaml", "--dry-run", cwd=tmp_path) == []
    tiny_dict["dataset"]["img_size"] = 18  # not a multiple of 4: the cached patch size refuses it
    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump(tiny_dict))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    refused = subprocess.run(
        [sys.executable, "-m", "optbench", "run", "tiny.yaml", "--dry-run"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert refused.returncode == 2 and "is not a multiple of vit_p_w64_16px's patch size 4" in (
        refused.stderr
    )


@pytest.mark.slow
def test_models_reads_its_counts_from_the_cache_once_counted(tmp_path, empty_cache):
    first = _loaded_after("models", "vit_c_w64_16px", "dhvt_w64_16px", "--json", cwd=tmp_path)
    assert first == ["timm", "torch"]  # counted: needs both
    assert _loaded_after("models", "vit_c_w64_16px", "dhvt_w64_16px", cwd=tmp_path) == []


def test_the_cache_gives_the_counted_numbers_and_forgets_them_when_the_code_changes(
    empty_cache, monkeypatch
):
    shape = dict(num_classes=10, in_chans=1, img_size=16)
    counted = cache.cached_counts("vit_p_w64_16px", **shape)

    def no_count(*args, **kwargs):
        raise AssertionError("counted again")

    import optbench.models.complexity as complexity

    monkeypatch.setattr(complexity, "model_complexity", no_count)
    cache.CACHE.clear()  # a new process: read from the file
    assert cache.cached_counts("vit_p_w64_16px", **shape) == counted
    monkeypatch.setattr(cache, "fingerprint", lambda: "other code")
    cache.CACHE.clear()
    with pytest.raises(AssertionError, match="counted again"):
        cache.cached_counts("vit_p_w64_16px", **shape)


def test_a_fifo_in_place_of_the_cache_is_ignored_never_waited_on(cli, empty_cache, monkeypatch):
    import optbench.models.complexity as complexity

    fake = {"flops": 1, "params": 2, "acts": 3}
    monkeypatch.setattr(complexity, "model_complexity", lambda name, **shape: dict(fake))
    with fifo_never_waited_on(cache.cache_path()):
        code, out, err = cli("models", "vit_p_w64_16px", "--json")
    assert code == 0, err
    assert {k: json.loads(out)[0][k] for k in fake} == fake
    assert cache.cache_path().is_file()  # the next write replaced the FIFO by a cache


@pytest.mark.parametrize(
    "entries",
    [
        [],  # not an object
        {"counts/vit_p_w64_16px/10/1/16": "many"},
        {"counts/vit_p_w64_16px/10/1/16": {"flops": "1", "params": 2, "acts": 3}},
        {"counts/vit_p_w64_16px/10/1/16": {"flops": True, "params": 2, "acts": 3}},
        {"counts/vit_p_w64_16px/10/1/16": {"flops": 1.5, "params": 2, "acts": 3}},
        {"counts/vit_p_w64_16px/10/1/16": {"flops": -1, "params": 2, "acts": 3}},
        {"counts/vit_p_w64_16px/10/1/16": {"flops": 1, "params": 2}},
        {"defaults/vit_p_w64_16px": ["img_size", 16]},
        {"defaults/vit_p_w64_16px": {"img_size": None, "in_chans": 1, "num_classes": 10}},
    ],
    ids=[
        "entries-list",
        "string",
        "string-count",
        "bool-count",
        "float-count",
        "negative",
        "missing-key",
        "defaults-list",
        "defaults-null",
    ],
)
def test_wrongly_typed_cache_entries_are_counted_again(cli, empty_cache, monkeypatch, entries):
    cache_json = json.dumps({"fingerprint": cache.fingerprint(), "entries": entries})
    _counted_again_despite(cache_json, cli, monkeypatch)


@pytest.mark.parametrize(
    "text", ["[" * 100_000, " " * (1 << 20) + "{}"], ids=["nested", "oversized"]
)
def test_a_cache_file_nested_too_deep_or_too_large_is_ignored(cli, empty_cache, monkeypatch, text):
    _counted_again_despite(text, cli, monkeypatch)


def _counted_again_despite(cache_text: str, cli, monkeypatch) -> None:
    """`optbench models` with `cache_text` in the cache file counts the model again."""
    path = cache.cache_path()
    path.parent.mkdir(parents=True)
    path.write_text(cache_text)
    import optbench.models.complexity as complexity

    fake = {"flops": 7, "params": 8, "acts": 9}
    monkeypatch.setattr(complexity, "model_complexity", lambda name, **shape: dict(fake))
    code, out, err = cli("models", "vit_p_w64_16px", "--json")
    assert code == 0 and "Traceback" not in err, err
    [row] = json.loads(out)
    assert (row["img_size"], row["num_classes"]) == (16, 10)
    assert {k: row[k] for k in fake} == fake  # counted again, not read from the bad entry
