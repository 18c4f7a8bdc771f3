"""Every paper study can decide what it exists for (issue 53): the EDF studies claim (a) with a
training seed per sample, the length, optimizer and stem studies their seed claims with seeds
enough for a t interval; `--dry-run` gives each design's trials, compute and device-hours at the
least, as expected and at the most, against the fixed design's."""

from __future__ import annotations

from pathlib import Path

import pytest

from optbench.plan.trials import plan
from optbench.run.preflight import seed_effect_note
from optbench.run.rounds import Rounds, size_lines
from optbench.spec.schema import load_spec

ROOT = Path(__file__).resolve().parents[1]
# The paper's studies and the claim each exists for (docs/study.md, "The bundled studies").
PAPER_EDF = [
    f"edf_{opt}_{size}" for opt in ("adamw", "sgd") for size in ("1gf", "4gf", "18gf", "cifar100")
] + ["edf_adamw_deit_cifar100"]
PAPER_SEEDS = {
    "length_stability": ["b"],
    "optimizer_stability": ["c"],
    "stem_ablation": ["d"],
    "length_stability_cifar100": ["b", "c"],
}


@pytest.mark.parametrize("name", PAPER_EDF)
def test_each_paper_edf_study_decides_claim_a_with_a_seed_per_sample(name):
    spec = load_spec(ROOT / "studies" / f"{name}.yaml")
    assert spec.decide.claims == ["a"] and spec.seed_per_sample
    # at most the paper's 64 samples per model, looked at every 8 (the bench's design)
    assert spec.decide.looks == list(range(8, 65, 8)) and spec.search.n_samples == 64
    assert seed_effect_note(spec) is None


@pytest.mark.parametrize("name", sorted(PAPER_SEEDS))
def test_each_paper_seed_study_can_decide_its_claims(name):
    spec = load_spec(ROOT / "studies" / f"{name}.yaml")
    assert spec.decide.claims == PAPER_SEEDS[name]
    assert spec.decide.looks == [3, 4, 6] and len(spec.seeds) == 6
    rounds = Rounds(spec, [])
    most = rounds.most()
    assert min(rounds.targets().values()) == 3  # every cell has a t interval's seeds at first
    assert max(most.values()) == 6  # and the cells the claims read can add seeds


def test_the_dry_run_sizes_a_paper_study_against_its_fixed_design():
    spec = load_spec(ROOT / "studies" / "edf_adamw_4gf.yaml")
    cells = [(c.model, c.optimizer, c.epochs) for c in spec.cells()]
    hours = dict.fromkeys(cells, 2.0)  # device-hours of one trial
    pf = dict.fromkeys(cells, 500.0)
    trials = Rounds(spec, []).within(plan(spec), Rounds(spec, []).most())
    design, sizes, expected, fixed = size_lines(spec, trials, hours, [], pf)
    assert "(a) looked at after 8, 16, 24, 32, 40, 48, 56, 64 samples per cell (Pocock" in design
    # at least: 3 models x 8; at most: ViT_P, ViT_C at 64 and RegNetY (no claim) at 8
    assert "from 24 trials, 48 device-hours, 1.2e+04 PF" in sizes
    assert "to 136, 272 device-hours, 6.8e+04 PF" in sizes
    assert "against 192 trials, 384 device-hours, 9.6e+04 PF for the fixed design" in fixed
    n = int(expected.split("about ")[1].split(" trials")[0])
    assert 24 < n < 136, expected
    # 2 device-hours a trial; "about n" is the expected count rounded, the hours are not
    hours_expected = float(expected.split(" trials, ")[1].split(" device-hours")[0])
    assert abs(hours_expected - 2 * n) <= 1 and "90% of the time" in expected


def test_a_seed_design_is_sized_against_one_seed_too():
    spec = load_spec(ROOT / "studies" / "stem_ablation.yaml")
    cells = [(c.model, c.optimizer, c.epochs) for c in spec.cells()]
    lines = size_lines(spec, plan(spec), dict.fromkeys(cells, 1.0), [])
    # 6 models x 2 optimizers: 3 seeds each at first; ViT_C (no step of (d)) never grows
    assert "from 36 trials, 36 device-hours" in lines[1] and "to 66, 66" in lines[1]
    assert "against 72 trials, 72 device-hours" in lines[3]
    assert "one seed per cell, which decides none of (b)-(d): 12, 12 device-hours" in lines[3]


@pytest.mark.slow  # counts both models' multiply-adds: about 10 s on a loaded 2-core machine
def test_the_plan_sizes_a_sequential_study_in_its_measured_device_hours(tiny_dict):
    # the plan's device-hours of one trial per cell (from costs.json, --measure's cache) reach
    # the sequential design's lines: the least, the expected, the most and the fixed design
    import json

    from optbench.cli.terminal_tables import plan_table
    from optbench.plan.costs import COSTS_FILE, distinct_configs
    from optbench.spec.schema import parse_spec

    tiny_dict["search"]["n_samples"] = 8
    tiny_dict["decide"] = {"claims": ["a"], "looks": [4, 8]}
    spec = parse_spec(tiny_dict)
    figures = {
        "batch": 128, "n_train": 1280, "step_s": 1.0, "eval_s_per_image": 0.01, "n_val": 400,
        "checkpoint_s": 0.5, "precise_bn_s": 2.0, "start_s": 10.0, "end_s": 0.25,
        "process_s": 7.0, "data_s": 3.0, "eval_passes": 2, "fits": True,
        "fitting_batch": 128,
    }  # fmt: skip
    spec.study_dir.mkdir(parents=True)
    entries = dict.fromkeys(distinct_configs(spec), figures)
    (spec.study_dir / COSTS_FILE).write_text(json.dumps({"cpu: test": entries}))
    caption = " ".join(plan_table(spec).caption.plain.split())
    fixed = caption.split("against 16 trials, ")[1].split(" device-hours")[0]
    least = caption.split("from 8 trials, ")[1].split(" device-hours")[0]
    assert float(fixed) == pytest.approx(2 * float(least), rel=1e-2)  # 16 trials against 8
    expected = caption.split("decide: about ")[1]
    assert " device-hours, " in expected.split(" expected if each effect")[0], caption
