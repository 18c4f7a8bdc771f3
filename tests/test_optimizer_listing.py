"""`optbench optimizers` (issue 69 item 5): every optimizer it lists is one a study may name,
validates with its suggested box and trains on the CPU; `--json` parses; the boxes
follow the published rules from AdamW's box; the command writes nothing and loads no torch."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml
from cli_inprocess import TINY
from test_fast_commands import _loaded_after

from optbench.plan.trials import plan
from optbench.spec.optimizer_boxes import QUICKSTART_ADAMW, box_rule, optimizer_listing
from optbench.spec.schema import Range, parse_spec
from optbench.spec.timm_optimizers import TIMM_OPTIMIZERS

STUDIES = Path(__file__).resolve().parents[1] / "studies"


def _study_of(entry: dict) -> dict:
    """The tiny study training `entry`'s optimizer in its suggested box."""
    data = copy.deepcopy(TINY)
    data["models"] = TINY["models"][:1]
    data["optimizers"] = [entry["name"]]
    data["search"] = {"n_samples": 1, "ranges": {entry["name"]: entry["box"]}}
    return data


def _ranges(study: str) -> dict:
    return yaml.safe_load((STUDIES / study).read_text())["search"]["ranges"]


def test_every_listed_optimizer_is_one_a_study_names_with_its_box():
    listing = optimizer_listing()
    listed = [o["name"] for o in listing["optimizers"]]
    refused = {n for n, e in TIMM_OPTIMIZERS.items() if "unsupported" in e}
    assert sorted(listed) == sorted(set(TIMM_OPTIMIZERS) - refused)
    assert set(listing["refused"]) == refused and {"adahessian", "bnbadam"} <= refused
    for entry in listing["optimizers"]:
        spec = parse_spec(_study_of(entry))  # refused by nothing the study's checks ask
        (cfg,) = [t.config for t in plan(spec)]
        lo, hi = entry["box"]["lr"]
        assert cfg.optimizer == entry["name"] and lo <= cfg.lr <= hi
        for arg in entry["arguments"]:  # each argument at its listed default is accepted
            data = _study_of(entry)
            data["recipe"]["optimizer_args"] = {entry["name"]: {arg["name"]: arg["default"]}}
            if arg["default"] is not None:  # a default of None stands for any value
                parse_spec(data)


def test_the_boxes_follow_the_published_rules_from_adamws():
    # the quickstart's AdamW box is the default base
    assert QUICKSTART_ADAMW == Range(**_ranges("quickstart.yaml")["adamw"])
    # the SGD family gets the paper's SGD box from its AdamW box (the ViT EDF intervals)
    paper_adamw = Range(**_ranges("edf_adamw_cifar100.yaml")["adamw"])
    paper_sgd = Range(**_ranges("edf_sgd_cifar100.yaml")["sgd"])
    for name in ("sgd", "momentum", "sgdw", "sgdp", "lars"):
        box = box_rule(name).box(paper_adamw)
        assert box.lr == pytest.approx(paper_sgd.lr) and box.wd == pytest.approx(paper_sgd.wd)
    # Lion: lr 3 to 10x smaller, wd 3 to 10x larger (Chen et al. 2023), every Lion name alike
    for name in ("lion", "lionc", "clion"):
        box = box_rule(name).box(QUICKSTART_ADAMW)
        assert box.lr == pytest.approx((2e-5, 2e-2 / 3)) and box.wd == pytest.approx((9e-3, 5.0))
        assert "Chen et al. 2023" in box_rule(name).source
    # Muon's update matched to AdamW's RMS (timm's default) keeps AdamW's box, with its source
    assert box_rule("muon").box(QUICKSTART_ADAMW) == QUICKSTART_ADAMW
    assert "arXiv:2502.16982" in box_rule("muon").source
    assert box_rule("adopt").rule == "no published rule: AdamW's box"


def test_json_parses_and_the_command_writes_nothing(cli, tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    code, out, err = cli("optimizers", "--json", "--adamw-lr", "1e-3", "1e-2")
    assert code == 0, err
    listing = json.loads(out)
    assert listing == optimizer_listing(None, Range(lr=(1e-3, 1e-2), wd=QUICKSTART_ADAMW.wd))
    (lion,) = [o for o in listing["optimizers"] if o["name"] == "lion"]
    assert lion["box"]["lr"] == pytest.approx([1e-4, 1e-2 / 3]) and lion["population"]
    assert {"name": "caution", "default": False, "accepts": "true or false"} in lion["arguments"]
    code, out, err = cli("optimizers", "muon", "adamw")
    assert code == 0, err
    assert "fallback adamw" in out and "recipe.betas and recipe.eps" in out
    assert "refused:" in out and "adahessian: second order" in out
    assert list(tmp_path.iterdir()) == []  # no file, no cache, no folder


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["lino"], "NAME: unknown optimizer 'lino'; did you mean lion?"),
        (["adahessian"], "NAME: optimizer 'adahessian' is not supported"),
        (["--adamw-wd", "0.5", "0.1"], "--adamw-wd: wd low 0.5 must be < high 0.1"),
        (["--adamw-lr", "0", "0.1"], "--adamw-lr: lr bounds must be > 0"),
    ],
)
def test_a_bad_name_or_box_is_one_line_exit_2(cli, args, needle):
    code, out, err = cli("optimizers", *args)
    assert code == 2 and out == ""
    assert err.startswith(f"error: {needle}") and err.count("\n") == 1


@pytest.mark.slow  # a fresh interpreter
def test_the_listing_loads_no_torch(tmp_path):
    assert _loaded_after("optimizers", "--json", cwd=tmp_path) == []
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow  # 85 optimizers; kron's step compiles its preconditioner (over a minute here)
def test_every_listed_optimizer_trains_two_steps_on_the_cpu():
    import torch
    from torch import nn

    from optbench.train.optim import build_optimizer

    images, labels = torch.randn(8, 1, 8, 8), torch.randint(0, 10, (8,))
    for entry in optimizer_listing()["optimizers"]:
        (cfg,) = [t.config for t in plan(parse_spec(_study_of(entry)))]
        torch.manual_seed(0)
        # a conv, a norm and a matrix with its bias: what a hybrid splits by shape
        model = nn.Sequential(
            nn.Conv2d(1, 4, 3), nn.Flatten(), nn.LayerNorm(144), nn.Linear(144, 10)
        )
        before = [p.detach().clone() for p in model.parameters()]
        optimizer = build_optimizer(model, cfg)  # as a trial builds it, at the box's sample
        for _ in range(2):  # ADOPT's first step only sets its second moment
            optimizer.zero_grad()
            nn.functional.cross_entropy(model(images), labels).backward()
            optimizer.step()
        after = list(model.parameters())
        assert all(torch.isfinite(p).all() for p in after), entry["name"]
        assert not torch.equal(before[-2], after[-2]), entry["name"]  # the classifier moved
