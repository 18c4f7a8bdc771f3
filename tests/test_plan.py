"""The planner: every trial of a study from the spec alone, each named once; writes nothing."""

from __future__ import annotations

import sys

import pytest
import yaml

from optbench.cli.app import main
from optbench.errors import SpecError
from optbench.plan.trials import plan
from optbench.spec.schema import parse_spec


def test_the_plan_is_a_pure_function_of_the_spec(tiny_dict, tmp_path):
    tiny_dict["seeds"] = [0, 1]
    tiny_dict["epochs"] = [1, 2]
    spec = parse_spec(tiny_dict)
    trials = plan(spec)
    assert trials == plan(spec)  # same spec, same plan (pairs included)
    assert list(tmp_path.iterdir()) == []  # planning wrote nothing
    assert len(trials) == 2 * 1 * 2 * 2 * 2  # models x optimizers x epochs x samples x seeds
    assert len({t.key for t in trials}) == len(trials)
    assert len({t.out_dir for t in trials}) == len(trials)
    for t in trials:
        assert t.out_dir.is_relative_to(spec.study_dir)
        assert (t.config.model, t.config.optimizer, t.config.epochs, t.config.seed) == (
            t.cell.model,
            t.cell.optimizer,
            t.cell.epochs,
            t.seed,
        )
        assert (t.config.lr, t.config.wd) == (t.lr, t.wd)
        assert (t.job.key, t.job.config, t.job.out_dir) == (t.key, t.config, t.out_dir)
    # Pairs are drawn per optimizer: sample i is the same point in every model's shared box.
    by_sample = {}
    for t in trials:
        by_sample.setdefault(t.sample, set()).add((t.lr, t.wd))
    assert all(len(pairs) == 1 for pairs in by_sample.values()) and len(by_sample) == 2


def test_growing_n_samples_keeps_the_first_trials(tiny_dict):
    first = plan(parse_spec(tiny_dict))
    tiny_dict["search"]["n_samples"] = 3
    grown = plan(parse_spec(tiny_dict))
    assert set(first) < set(grown) and len(grown) == 6


def test_a_spec_that_cannot_be_planned_stops_with_exit_2_and_writes_nothing(
    tiny_dict, tmp_path, monkeypatch, capsys
):
    tiny_dict["recipe"]["warmup_epochs"] = 1  # as long as the 1-epoch schedule
    with pytest.raises(SpecError, match="warmup_epochs"):
        plan(parse_spec(tiny_dict))
    tiny_dict["output"] = "results"
    (tmp_path / "warm.yaml").write_text(yaml.safe_dump(tiny_dict))
    monkeypatch.chdir(tmp_path)
    for command in (["run", "warm.yaml"], ["status", "warm.yaml"]):
        monkeypatch.setattr(sys, "argv", ["optbench", *command])
        with pytest.raises(SystemExit) as exit_:
            main()
        assert exit_.value.code == 2
        assert "warmup_epochs" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["warm.yaml"]


@pytest.mark.slow
def test_the_plan_counts_each_model_at_the_input_size_it_trains_at(tiny_dict, tmp_path):
    from optbench.cli.terminal_tables import plan_table
    from optbench.data.datasets import load_dataset
    from optbench.models.complexity import model_complexity
    from optbench.spec.recipe import Dataset

    root = tmp_path / "imagenet"  # the layout is all a plan or a trial's input size needs
    for split in ("train", "val"):
        (root / split / "n01440764").mkdir(parents=True)
    tiny_dict["dataset"] = {"name": "imagenet", "root": str(root)}
    tiny_dict["models"] = ["vit_c_1gf", "regnety_1gf"]
    table = plan_table(parse_spec(tiny_dict))
    column = {c.header: [str(cell) for cell in c._cells] for c in table.columns}  # Text cells
    rows = {m: i for i, m in enumerate(column["model"])}
    sizes = {}
    for model, i in rows.items():
        trains_at = load_dataset(Dataset(name="imagenet", root=root), model).img_size
        sizes[model] = int(column["px"][i])
        assert sizes[model] == trains_at
        flops = model_complexity(model, num_classes=1000, in_chans=3, img_size=trains_at)["flops"]
        assert column["GF/img"][i] == f"{flops / 1e9:.3g}"
    assert sizes["regnety_1gf"] != sizes["vit_c_1gf"]  # each model at its own size


def test_every_job_carries_the_study_folder_the_plan_put_it_in(tiny_dict, tmp_path):
    """The worker's link boundary (safefs root) is what the plan says, not read back from the
    shape of a folder path: a job of no study guards its own folder only."""
    from optbench.trial.jobs import TrialJob

    spec = parse_spec(tiny_dict)
    assert {t.job.root for t in plan(spec)} == {spec.study_dir}
    trial = plan(spec)[0]
    lone = TrialJob(trial.key, trial.config, trial.out_dir)  # the same path, no study
    assert lone.root == trial.out_dir


def _column(table, header: str) -> list[str]:
    return [str(cell) for cell in next(c for c in table.columns if c.header == header)._cells]


def test_the_plans_lr_column_is_the_lr_trained_after_batch_scaling(tiny_dict):
    from optbench.cli.terminal_tables import plan_table

    tiny_dict["ref_batch"] = 2048  # batch 128: every trial trains at lr / 16
    spec = parse_spec(tiny_dict)
    table = plan_table(spec)
    lr_used = sorted(t.config.lr_used for t in plan(spec))
    for shown in _column(table, "lr trained"):
        low, high = (float(x) for x in shown.split(" .. "))
        assert (low, high) == (float(f"{1e-3 / 16:.3g}"), float(f"{1e-2 / 16:.3g}"))
        assert low <= lr_used[0] and lr_used[-1] <= high  # what the trials' optimizers get
    assert "lr values are at ref_batch 2048; at batch_size 128 every trial trains at lr x " in str(
        table.caption
    )
    assert "(lr / 16)" in str(table.caption)
    tiny_dict["ref_batch"] = 128  # no scaling: the column is the study's range, no note
    table = plan_table(parse_spec(tiny_dict))
    assert set(_column(table, "lr trained")) == {"0.001 .. 0.01"}
    assert "ref_batch" not in str(table.caption)


def test_a_run_says_once_that_its_batch_scales_the_lr(tiny_dict, cli, monkeypatch, tmp_path):
    from optbench.run import driver, messages

    monkeypatch.setattr(driver, "run_study", lambda *args, **kw: None)  # no training
    monkeypatch.setattr(messages, "failed_trials", lambda *args: None)
    tiny_dict["ref_batch"] = 2048
    (tmp_path / "scaled.yaml").write_text(yaml.safe_dump(tiny_dict))
    code, out, err = cli("run", "scaled.yaml")
    assert code == 0, err
    [line] = [x for x in out.splitlines() if "ref_batch" in x]
    assert line.startswith("lr: the study's lr values are at ref_batch 2048; at batch_size 128")
    del tiny_dict["ref_batch"]  # the basic preset does not scale
    (tmp_path / "basic.yaml").write_text(yaml.safe_dump(tiny_dict))
    code, out, err = cli("run", "basic.yaml")
    assert code == 0 and "ref_batch" not in out, (out, err)


def test_seed_per_sample_gives_each_sample_its_seeds_and_keeps_the_box_paired(tiny_dict):
    tiny_dict["seeds"] = [0, 1]
    tiny_dict["search"]["n_samples"] = 3
    shared = plan(parse_spec(tiny_dict))
    tiny_dict["search"]["seed_per_sample"] = True
    spec = parse_spec(tiny_dict)
    own = plan(spec)
    assert [(t.cell, t.sample, t.lr, t.wd) for t in own] == [
        (t.cell, t.sample, t.lr, t.wd) for t in shared
    ]  # the same pairs in the same order: only the training seeds differ
    assert {t.seed for t in shared} == {0, 1}
    seeds_of = {}
    for t in own:
        assert t.config.seed == t.seed and f"-seed{t.seed}" in t.key
        seeds_of.setdefault(t.sample, {}).setdefault(t.cell.model, []).append(t.seed)
    for by_model in seeds_of.values():  # sample i has the same two seeds in every model
        assert len({tuple(s) for s in by_model.values()}) == 1
    per_sample = [set(next(iter(m.values()))) for m in seeds_of.values()]
    assert all(len(s) == 2 for s in per_sample)
    assert len(set().union(*per_sample)) == 6  # no seed shared by two samples
    assert {t.cell_id for t in own}.isdisjoint({t.cell_id for t in shared})  # new cells
