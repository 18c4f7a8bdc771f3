"""The DHVT-recipe study files: each validates (`optbench run X --dry-run` exits 0, writes
nothing) and resolves to DHVT's CIFAR recipe as the DHVT paper (Lu et al. 2022) and DHVT's
run_code_cifar.sh / main.py give it (the expected values below are those sources' numbers)."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_inprocess import run_cli

from optbench.spec.schema import load_spec

ROOT = Path(__file__).resolve().parents[1]
STUDIES = [
    ROOT / "studies" / "dhvt_deit_cifar100.yaml",
    ROOT / "studies" / "edf_adamw_deit_cifar100.yaml",
]

# DHVT's CIFAR run: 2 GPUs x --batch-size 256, --lr 1e-3 scaled by total batch / 512,
# --weight-decay 0.05, --epochs 300, --warmup-epochs 5, --warmup-lr 1e-6, --min-lr 1e-5,
# --drop-path 0.1, repeated aug x3, --reprob 0.25, --mixup 0.8, --cutmix 1.0, --smoothing 0.1,
# --aa rand-m9-mstd0.5-inc1, --opt-eps 1e-8, --train-interpolation bicubic.
DHVT = {
    "batch": 512,
    "lr": 1e-3,
    "wd": 0.05,
    "epochs": 300,
    "warmup_epochs": 5,
    "warmup_lr": 1e-6,
    "min_lr": 1e-5,
    "drop_path": 0.1,
    "repeated_aug": 3,
    "random_erasing": 0.25,
    "mixup_alpha": 0.8,
    "cutmix_alpha": 1.0,
    "label_smoothing": 0.1,
    "auto_augment": "rand-m9-mstd0.5-inc1",
    "eps": 1e-8,
    "interpolation": "bicubic",
}


@pytest.mark.slow
@pytest.mark.parametrize("path", STUDIES, ids=lambda p: p.stem)
def test_dhvt_study_dry_run_validates(path, tmp_path, monkeypatch, capsys):
    code, out, err = run_cli(["run", str(path), "--dry-run"], tmp_path, monkeypatch, capsys)
    assert code == 0, err
    assert "trials" in out and not any(tmp_path.iterdir())


@pytest.mark.parametrize("path", STUDIES, ids=lambda p: p.stem)
def test_dhvt_study_resolves_to_dhvts_recipe(path):
    spec = load_spec(path)
    r = spec.recipe
    assert spec.batch_size == DHVT["batch"] and spec.epochs == [DHVT["epochs"]]
    assert r.preset == "deit" and spec.optimizers == ["adamw"]
    good = spec.search.good_values["dhvt_tiny_cifar_p4"]["adamw"]
    lr_used = good.lr * spec.batch_size / spec.ref_batch
    assert lr_used == pytest.approx(DHVT["lr"]) and good.wd == pytest.approx(DHVT["wd"])
    assert r.warmup_epochs == DHVT["warmup_epochs"]
    assert r.warmup_factor * lr_used == pytest.approx(DHVT["warmup_lr"])
    assert r.min_lr * lr_used == pytest.approx(DHVT["min_lr"])
    for key in ("drop_path", "repeated_aug", "random_erasing", "mixup_alpha", "cutmix_alpha"):
        assert getattr(r, key) == pytest.approx(DHVT[key]), key
    for key in ("label_smoothing", "auto_augment", "eps", "interpolation"):
        assert getattr(r, key) == DHVT[key], key


def test_the_deit_edf_box_is_the_papers_range_around_dhvts_value():
    spec = load_spec(STUDIES[1])
    for model in spec.models:
        box = spec.search.bounds(model, "adamw")
        assert box.lr == pytest.approx((DHVT["lr"] / 8, DHVT["lr"] * 4))
        assert box.wd == pytest.approx((DHVT["wd"] / 8, DHVT["wd"] * 4))
    assert spec.search.n_samples == 64


@pytest.mark.slow
def test_the_plan_of_a_fixed_value_study_shows_the_value_it_trains(tmp_path, monkeypatch, capsys):
    # sampler: good: every trial trains the good value; the plan's lr/wd columns show it, not
    # the box the sampler would draw from (0.000125 .. 0.004 here)
    path = STUDIES[0]
    spec = load_spec(path)
    assert spec.search.sampler == "good"
    monkeypatch.setenv("COLUMNS", "250")  # the table's columns unwrapped
    code, out, err = run_cli(["run", str(path), "--dry-run"], tmp_path, monkeypatch, capsys)
    assert code == 0, err
    good = spec.search.good_values["dhvt_tiny_cifar_p4"]["adamw"]
    assert f"{good.lr:.3g} (fixed)" in out and f"{good.wd:.3g} (fixed)" in out
    assert " .. " not in out
