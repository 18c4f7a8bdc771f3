"""Defaults that work: `optbench train` with the default recipe takes any --epochs, a study of
short schedules plans, and every file optbench writes follows the user's umask."""

from __future__ import annotations

import json
import os
import stat
from contextlib import contextmanager

import pytest
import torch

from optbench import safefs
from optbench.plan.trials import plan
from optbench.spec.recipe import Recipe
from optbench.spec.schema import parse_spec
from optbench.train.checkpoint import save_checkpoint


@contextmanager
def umask(mask: int):
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


def _mode(path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.slow
def test_train_with_the_default_recipe_takes_a_one_epoch_schedule(cli, tmp_path):
    with umask(0o027):
        code, out, err = cli(
            "train", "vit_c_w64_16px", "--dataset", "digits", "--optimizer", "adamw",
            "--lr", "2e-3", "--wd", "0.05", "--epochs", "1", "--out", "one",
        )  # fmt: skip
    assert code == 0, err
    result = json.loads(out)
    assert result["status"] == "finished" and result["epochs_run"] == 1
    assert _mode(tmp_path / "one" / "result.json") == 0o640  # 0666 & ~027


def test_the_default_warmup_fits_every_schedule_and_a_given_one_is_kept(tiny_dict):
    default = Recipe()
    assert all(0 < default.warmup_for(n) < n for n in range(1, 200))
    assert default.warmup_for(400) == default.warmup_epochs  # long schedules: the full warmup
    assert Recipe(warmup_epochs=2.0).warmup_for(10) == 2.0  # the study's own, as given
    del tiny_dict["recipe"]
    tiny_dict["epochs"] = [1, 2, 3, 5]
    assert len(plan(parse_spec(tiny_dict))) == 4 * 4  # no "warmup must be shorter" stop


@pytest.mark.parametrize("mask", [0o022, 0o002, 0o077])
def test_written_files_follow_the_umask(tmp_path, mask):
    with umask(mask):
        safefs.write_text(tmp_path / "result.json", tmp_path, "{}")
        save_checkpoint(tmp_path / "checkpoint.pt", {"x": torch.zeros(1)})
    assert _mode(tmp_path / "result.json") == 0o666 & ~mask
    assert _mode(tmp_path / "checkpoint.pt") == 0o666 & ~mask
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


@pytest.mark.parametrize("preset", ["basic", "paper", "deit"])
def test_every_preset_takes_any_schedule_length(tiny_dict, preset):
    tiny_dict["recipe"] = {"preset": preset}
    tiny_dict["epochs"] = [1, 2, 3]
    spec = parse_spec(tiny_dict)
    assert len(plan(spec)) == 4 * 3
    if preset != "basic":  # pycls's and DeiT's code warm up 5 epochs whatever the schedule
        assert spec.recipe.warmup_for(1) == 5.0


def test_basic_with_pycls_s_schedule_keeps_pycls_s_fixed_warmup():
    # the shortening is for the cosine rule only; pycls's rule warms up through short schedules
    assert Recipe(schedule="pycls", schedule_step="epoch").warmup_for(3) == 5.0
