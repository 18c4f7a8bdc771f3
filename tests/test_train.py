"""One trial: result files, determinism, divergence as a result, failures as results."""

from __future__ import annotations

import json
import math

import pytest
import torch
from cli_inprocess import tiny_config

from optbench.spec.recipe import Recipe
from optbench.train.run_trial import run_trial
from optbench.trial.config import TrainConfig
from optbench.trial.results import read_result


def _cfg(**kw) -> TrainConfig:
    """The tiny trial on ViT_C (BatchNorm in its stem) with the tiny study's recipe."""
    recipe = Recipe(warmup_epochs=0.5, hflip=False, translate=2)
    return tiny_config(**{"model": "vit_c_w64_16px", "ref_batch": 128, "recipe": recipe, **kw})


@pytest.mark.slow
def test_result_and_metrics_files(tmp_path):
    result = run_trial(_cfg(), tmp_path)
    assert result.status == "finished"
    on_disk = json.loads((tmp_path / "result.json").read_text())
    for key in (
        "status",
        "final_error",
        "best_error",
        "epochs",
        "wall_s",
        "images_per_s",
        "digest",
    ):
        assert key in on_disk
    lines = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [m["epoch"] for m in lines] == [1, 2]
    assert set(lines[0]) >= {"epoch", "lr", "train_loss", "val_error"}
    assert result.final_error == lines[-1]["val_error"]
    assert result.best_error == min(m["val_error"] for m in lines)
    assert 0 <= result.best_error <= result.final_error <= 100
    assert read_result(tmp_path) == result


@pytest.mark.slow
def test_same_config_same_digest_other_seed_other_digest(tmp_path):
    a = run_trial(_cfg(), tmp_path / "a")
    b = run_trial(_cfg(), tmp_path / "b")
    c = run_trial(_cfg(seed=1), tmp_path / "c")
    assert a.digest == b.digest and a.final_error == b.final_error
    assert c.digest != a.digest


@pytest.mark.slow
def test_huge_lr_is_a_diverged_result_not_a_crash(tmp_path):
    result = run_trial(_cfg(optimizer="sgd", lr=1e6, wd=1e-5, epochs=3), tmp_path)
    assert result.status == "diverged"
    assert result.diverged_epoch == 1
    assert result.final_error is None
    last = json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[-1])
    assert last["train_loss"] is None or not math.isfinite(last["train_loss"])


def test_lr_is_normalized_to_the_reference_batch():
    assert _cfg(lr=2e-3, batch_size=256, ref_batch=2048).lr_used == 2.5e-4


def test_a_crash_is_a_failed_result(tmp_path):
    result = run_trial(_cfg(batch_size=100_000), tmp_path)  # more than the training images
    assert result.status == "failed"
    assert "batch_size" in result.message
    assert (tmp_path / "error.log").is_file()
    assert read_result(tmp_path).status == "failed"


def test_recipe_drop_path_overrides_the_model_default():
    from types import SimpleNamespace

    from timm.layers import DropPath

    from optbench.train.parts import build_model

    batches = SimpleNamespace(num_classes=10, in_chans=1, img_size=16)
    compute = SimpleNamespace(
        dist=SimpleNamespace(enabled=False), device=torch.device("cpu"), channels_last=False
    )
    rates = {}
    for drop in (0.0, 0.2):
        cfg = _cfg(model="dhvt_w64_16px", recipe=Recipe(warmup_epochs=0.5, drop_path=drop))
        model = build_model(cfg, batches, compute)
        rates[drop] = [m.drop_prob for m in model.modules() if isinstance(m, DropPath)]
    assert rates[0.0] == []  # DHVT's own default (0.1) does not apply
    assert max(rates[0.2]) == pytest.approx(0.2)
