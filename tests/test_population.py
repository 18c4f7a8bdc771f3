"""Population training (optbench/train/population.py): K trials of one cell trained together
compute what each trial computes alone, and are recorded as solo trials are."""

from __future__ import annotations

import contextlib
import copy
import json
import os
import signal
import subprocess
import sys
import time
import types
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from cli_inprocess import tiny_config
from driver_process import start_driver
from scipy import stats
from test_data import make_cifar
from timm.optim import create_optimizer_v2

from optbench.data.datasets import load_dataset
from optbench.plan.trials import jobs, plan, populations
from optbench.spec.optimizers import optimizer_kwargs
from optbench.spec.recipe import Dataset, Recipe
from optbench.spec.schema import SlurmSettings, parse_spec
from optbench.train import epoch, population, stepper
from optbench.train.population import POPULATION_CHECKPOINT, run_population
from optbench.train.population_optim import PopulationOptimizer
from optbench.train.run_trial import run_trial
from optbench.train.signals import TrialInterrupted
from optbench.trial.config import TrainConfig
from optbench.trial.jobs import PopulationJob, TrialJob
from optbench.trial.results import read_metrics

DIGITS = Dataset(name="digits", img_size=16)
TIMING = {"wall_s", "images_per_s", "epoch_s", "input_wait", "digest", "execution", "timing"}
BATCH = 64


def members(model, optimizer, pairs, epochs, seed=0, dataset=DIGITS, **recipe) -> list[TrainConfig]:
    return [
        tiny_config(
            model=model,
            seed=seed,
            dataset=dataset,
            optimizer=optimizer,
            lr=lr,
            wd=wd,
            epochs=epochs,
            batch_size=BATCH,
            # the basic case's lrs are at batch 2048 (its own default is the batch: no scaling)
            ref_batch=None if recipe.get("preset", "basic") != "basic" else 2048,
            recipe=Recipe(**recipe),
        )
        for lr, wd in pairs
    ]


def steps_per_epoch(dataset: Dataset = DIGITS) -> int:
    return load_dataset(dataset).num_train // BATCH


def val_image_percent() -> float:
    """One validation image, in percent."""
    return 100.0 / len(load_dataset(DIGITS).val_y)


# --- the batched optimizer is the solo trial's optimizer update, row by row ---------------------


LION_CASES = {  # recipe.optimizer_args.lion of each Lion case: timm's defaults, then each argument
    "lion": {},
    "lion-betas": {"betas": [0.95, 0.98]},
    "lion-corrected-wd": {"corrected_weight_decay": True},
    "lion-maximize": {"maximize": True},
    "lion-foreach": {"foreach": True},
}


def solo_optimizer(opt: str, groups: list, lr: float, recipe: Recipe) -> torch.optim.Optimizer:
    """The optimizer a solo trial builds (train/optim.py) over `groups`, off CUDA."""
    if opt == "adamw":
        return torch.optim.AdamW(groups, lr=lr, betas=recipe.betas, eps=recipe.eps, foreach=True)
    if opt == "sgd":
        return torch.optim.SGD(
            groups, lr=lr, momentum=recipe.momentum, nesterov=recipe.nesterov, foreach=True
        )
    args = optimizer_kwargs(recipe.optimizer_args.get(opt, {}))
    return create_optimizer_v2(
        groups, opt=opt, lr=lr, weight_decay=groups[0]["weight_decay"], **args
    )


@pytest.mark.parametrize(
    "opt, recipe",
    [
        ("adamw", {}),
        ("sgd", {"nesterov": True}),
        ("sgd", {"nesterov": False}),
        *[("lion", {"optimizer_args": {"lion": args}}) for args in LION_CASES.values()],
    ],
    ids=["adamw", "nesterov", "momentum", *LION_CASES],
)
def test_population_optimizer_steps_each_row_as_its_solo_optimizer_steps_it_alone(opt, recipe):
    torch.manual_seed(0)
    k, n = 3, 257
    lrs, wds = [1e-3, 3e-2, 0.2], [0.05, 0.0, 1e-3]
    recipe = Recipe(**recipe)
    decayed, plain = torch.randn(k, n), torch.randn(k, 31)
    flats = [torch.nn.Parameter(decayed.clone()), torch.nn.Parameter(plain.clone())]
    batched = PopulationOptimizer(flats, [True, False], wds, lrs, opt, recipe)
    solo = []
    for i in range(k):
        params = [torch.nn.Parameter(decayed[i].clone()), torch.nn.Parameter(plain[i].clone())]
        groups = [
            {"params": [params[0]], "weight_decay": wds[i]},
            {"params": [params[1]], "weight_decay": 0.0},
        ]
        solo.append((params, solo_optimizer(opt, groups, lrs[i], recipe)))
    for step in range(6):
        active = [True, step < 3, True]  # member 1 frozen after its third step
        grads = [torch.randn(k, n), torch.randn(k, 31)]
        for flat, g in zip(flats, grads, strict=True):
            flat.grad = g.clone()
        batched.step([lr * (1 + step) for lr in lrs], active)
        for i, (params, o) in enumerate(solo):
            if not active[i]:
                continue
            for group in o.param_groups:
                group["lr"] = lrs[i] * (1 + step)
            for p, g in zip(params, grads, strict=True):
                p.grad = g[i].clone()
            o.step()
        if step == 3:  # resumed from its state_dict, as a population checkpoint resumes it
            saved = copy.deepcopy(batched.state_dict())
            batched = PopulationOptimizer(flats, [True, False], wds, lrs, opt, recipe)
            batched.load_state_dict(saved)
    for i, (params, _) in enumerate(solo):
        assert torch.equal(flats[0].data[i], params[0].data), f"member {i}, decayed"
        assert torch.equal(flats[1].data[i], params[1].data), f"member {i}, not decayed"
        assert not torch.equal(params[0].data, decayed[i]), f"member {i} never stepped"


def test_lion_caution_is_refused_by_the_population_optimizer_too():
    flats = [torch.nn.Parameter(torch.zeros(2, 3))]
    recipe = Recipe(optimizer_args={"lion": {"caution": True}})
    with pytest.raises(ValueError, match="lion.caution True: a population implements") as err:
        PopulationOptimizer(flats, [True], [0.0, 0.0], [1e-3, 1e-3], "lion", recipe)
    assert "\n" not in str(err.value)


# --- one batched forward per step ------------------------------------------------------------------


@pytest.mark.slow
def test_the_model_runs_once_per_step_for_the_whole_population(tmp_path, monkeypatch):
    calls = {"train": 0, "eval": 0}
    build_parts = population.build_parts

    def count(module, args) -> None:
        calls["train" if module.training else "eval"] += 1

    def counted(cfg, compute, pipeline, clock=None):
        parts = build_parts(cfg, compute, pipeline, clock)
        parts.model.register_forward_pre_hook(count)
        calls["val_batches"] = sum(1 for _ in parts.batches.val())  # the split's batches
        return parts

    monkeypatch.setattr(population, "build_parts", counted)
    cfgs = members(
        "vit_p_w64_16px", "adamw", [(1e-3, 0.05), (2e-3, 0.1), (4e-3, 0), (8e-4, 0.3)], 1
    )
    results = run_population(cfgs, [tmp_path / f"m{k}" for k in range(4)])
    assert [r.status for r in results] == ["finished"] * 4
    assert calls["train"] == steps_per_epoch()  # not 4x: one forward serves every member
    assert calls["val_batches"] > 1  # digits' validation split, in batches of the training's
    assert calls["eval"] == 2 * calls["val_batches"]  # raw and EMA, each once for all members


# --- equivalence with solo trials ------------------------------------------------------------------

CASES = {
    # case: (model, optimizer, recipe, (lr, wd) pairs); the paper preset covers precise BN, pycls
    # EMA, AutoAugment, mixup/CutMix and Nesterov SGD; deit drop path, RandAugment, repeated
    # augmentation, random erasing and DeiT's EMA; basic the per-iteration cosine; lion timm's
    # Lion with the study's betas (recipe.optimizer_args).
    "vit_c_w64_16px": (
        "vit_c_w64_16px",
        "sgd",
        {"preset": "paper", "warmup_epochs": 1},
        [(0.05, 1e-4), (0.1, 5e-5), (0.02, 0.0), (0.2, 1e-3)],
    ),
    "vit_p_w64_16px": (
        "vit_p_w64_16px",
        "sgd",
        {"nesterov": False, "warmup_epochs": 1},
        [(0.05, 1e-4), (0.1, 5e-5), (0.02, 0.0), (0.2, 1e-3)],
    ),
    "dhvt_w64_16px": (
        "dhvt_w64_16px",
        "adamw",
        {"preset": "deit", "warmup_epochs": 1},
        [(1e-3, 0.05), (3e-3, 0.1), (5e-4, 0.0), (2e-3, 0.3)],
    ),
    "vit_p_w64_16px-lion": (
        "vit_p_w64_16px",
        "lion",
        {"warmup_epochs": 0.5, "optimizer_args": {"lion": {"betas": [0.95, 0.98]}}},
        [(3e-3, 0.1), (1e-2, 1.0), (5e-3, 0.0), (2e-2, 0.3)],
    ),
}
# Trained for 2 epochs, every step compared: the warmup (an epoch or half of one) and the decay
# after it, an epoch boundary (EMA, precise BN, the sampler's next epoch) and both epochs'
# evaluations; a wrong update fails it in 2 epochs as in 3 (docs/population.md). On a
# CIFAR-10-format fixture of 6 steps an epoch (5 files of 77 images at batch 64, read at 16 px):
# the digits' 22 steps an epoch cost 3 times the CPU for the same steps of the population's code.
EQUAL_EPOCHS = 2
EQUAL_PER_FILE = 77


@pytest.fixture(scope="module")
def equal_data(tmp_path_factory) -> Dataset:
    root = tmp_path_factory.mktemp("cifar10")
    make_cifar(root, "cifar10", per_file=EQUAL_PER_FILE)
    return Dataset(name="cifar10", root=root, img_size=16)


# A member's per-step loss against its solo trial's, both computed in float64 (unit roundoff
# u = 1.1e-16): the batched kernels sum in another order, so they differ by rounding, and
# training amplifies a difference. In float32 (u = 6e-8) that growth reached 1.6e-5 = 270 u in 22
# steps of Lion on an AVX2 CPU and 6.5e-3 = 1e5 u in 50 on AVX-512 (Lion's sign update turns a
# last-bit difference near zero into a step of 2 lr; SGD and AdamW stayed within 1e-5 = 170 u in
# 50). 1e-9 is 1e7 u in float64, far above any of these, and far below what a wrong update makes
# (docs/population.md: an lr swapped between members, weight decay applied twice).
EQUAL_IN_FLOAT64 = 1e-9


def computing_in_float64(build_parts):
    """`build_parts` whose model computes in float64: its weights and buffers cast, its input
    cast as it enters it (batches and augmentation stay float32: the same for member and solo
    trial)."""

    def built(cfg, compute, pipeline, clock=None):
        parts = build_parts(cfg, compute, pipeline, clock)
        parts.model.double()
        parts.model.register_forward_pre_hook(lambda _, args: tuple(a.double() for a in args))
        return parts

    return built


class StepLosses(torch.nn.Module):
    """A loss that records each value it returns (one per step of a solo trial)."""

    def __init__(self, criterion, seen: list):
        super().__init__()
        self.criterion, self.seen = criterion, seen

    def forward(self, logits, target):
        loss = self.criterion(logits, target)
        self.seen.append(loss.item())
        return loss


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_each_member_trains_as_its_solo_trial(tmp_path, monkeypatch, equal_data, case):
    """The population computes each member's training as its solo trial computes it: in
    float64, where the batched kernels' other order of summation stays at rounding level, every
    member's loss at each step of EQUAL_EPOCHS equals its solo trial's within EQUAL_IN_FLOAT64
    and its final error is the solo trial's. (In float32, a CPU's production precision, they
    drift apart past rounding, the more where the CPU's kernels differ, AVX2 or AVX-512;
    test_members_end_where_their_solo_trials_end_within_seed_noise states what holds there.)"""
    model, optimizer, recipe, pairs = CASES[case]
    cfgs = members(model, optimizer, pairs, EQUAL_EPOCHS, dataset=equal_data, **recipe)
    pop_losses: list[list[float]] = []
    member_losses = population.member_losses

    def recorded(*args):
        losses = member_losses(*args)
        pop_losses.append(losses.tolist())
        return losses

    monkeypatch.setattr(population, "member_losses", recorded)
    monkeypatch.setattr(population, "build_parts", computing_in_float64(population.build_parts))
    results = run_population(cfgs, [tmp_path / f"m{k}" for k in range(len(cfgs))])
    solo_parts = computing_in_float64(stepper.build_parts)
    for k, cfg in enumerate(cfgs):
        seen: list[float] = []

        def with_recorded_loss(cfg, compute, pipeline, clock=None, seen=seen):
            parts = solo_parts(cfg, compute, pipeline, clock)
            parts.criterion = StepLosses(parts.criterion, seen)
            return parts

        monkeypatch.setattr(stepper, "build_parts", with_recorded_loss)
        solo = run_trial(cfg, tmp_path / f"s{k}")
        member = [step[k] for step in pop_losses]
        assert len(seen) == len(member) == EQUAL_EPOCHS * steps_per_epoch(equal_data) == 12
        worst = max(abs(a - b) / abs(b) for a, b in zip(member, seen, strict=True))
        assert worst <= EQUAL_IN_FLOAT64, f"member {k}: step losses differ by {worst:.2g} relative"
        assert results[k].status == solo.status == "finished"
        assert results[k].final_error == solo.final_error, f"member {k}"
        assert results[k].execution.population == len(cfgs) and solo.execution.population == 1
        keys = set(json.loads((tmp_path / f"s{k}" / "result.json").read_text()))
        assert set(json.loads((tmp_path / f"m{k}" / "result.json").read_text())) == keys
        assert len(read_metrics(tmp_path / f"m{k}")) == EQUAL_EPOCHS


def population_equivalence_bench():
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    import population_equivalence

    return population_equivalence


@pytest.mark.slow
def test_members_end_where_their_solo_trials_end_within_seed_noise(tmp_path):
    """In float32 a member drifts from its solo trial past rounding (the batched kernels round
    otherwise and training amplifies it; more on some CPUs than others), so over whole short
    trainings the member is its solo trial in distribution: measured by
    bench/population_equivalence.py on the mini's 4-epoch design (augmentation, label
    smoothing, EMA, precise BN; docs/population.md), here on 8 of its ViT_P AdamW pairs, two
    populations at seeds of their own. The seed noise is measured on the same pairs: each solo
    trial against its seed twin (the same config, another seed). Asserted, at the twins' scale:
    - the mean member - solo difference lies within 3 standard errors of seed noise (the twins'
      root mean square / sqrt n): a population shifts errors by no more than seeds explain;
    - the members' root mean square difference is not above the twins' beyond what the F test
      allows at 0.1% (one-sided): a member is no farther from its solo trial than another
      seed's trial is."""
    bench = population_equivalence_bench()
    study = bench.design(8, sampler_seed=0, models=["vit_p_w64_16px"], optimizers=["adamw"])
    rows = bench.train(study, tmp_path)
    assert {r["statuses"] for r in rows} == {"finished/finished/finished"}
    d = np.array([r["member"] - r["solo"] for r in rows])
    s = np.array([r["twin"] - r["solo"] for r in rows])
    seen = bench.equivalence(d, s)
    assert seen["twin_minus_solo"]["nonzero"], "the seed twins differ: seed noise to measure"
    assert abs(seen["mean_in_twin_se"]) <= 3, f"members are shifted: {seen}"
    assert seen["farther_p"] >= 0.001, f"members end farther from their solo trials: {seen}"


# Lion past its drift: whole short trainings of members and of their solo trials, several seeds.
# The lrs are at batch 2048 (basic preset), 1e-3 to 3e-4 at the tests' batch 64; raw final
# weights are reported, so the EMA does not smooth the drift away; 3 epochs are 66 steps.
LION_DRIFT_RECIPE = {
    "warmup_epochs": 0.5,
    "hflip": False,
    "translate": 2,
    "report": "raw_final",
    "optimizer_args": {"lion": {"betas": [0.95, 0.98]}},
}
LION_DRIFT_PAIRS = [(3e-2, 0.1), (1e-1, 0.3), (6e-2, 0.0), (1e-2, 1.0)]
LION_DRIFT_EPOCHS, LION_DRIFT_SEEDS = 3, (0, 1, 2)


def lion_drift_errors(folder, seeds=LION_DRIFT_SEEDS) -> tuple[np.ndarray, np.ndarray]:
    """Final errors (seeds x members) of the Lion members trained as one population per seed,
    and of the same configs trained as solo trials."""
    pop, solo = [], []
    for seed in seeds:
        cfgs = members(
            "vit_p_w64_16px",
            "lion",
            LION_DRIFT_PAIRS,
            LION_DRIFT_EPOCHS,
            seed=seed,
            **LION_DRIFT_RECIPE,
        )
        results = run_population(cfgs, [folder / f"m{seed}-{k}" for k in range(len(cfgs))])
        pop.append([r.final_error for r in results])
        solo.append([run_trial(c, folder / f"s{seed}-{k}").final_error for k, c in enumerate(cfgs)])
    return np.array(pop), np.array(solo)


def paired_drift(pop: np.ndarray, solo: np.ndarray) -> dict[str, float]:
    """The paired differences d = member - solo trial (same lr, wd, seed): their mean, the half
    width of its 95% t-interval and their root mean square; and the seed noise: the solo
    trials' seed-to-seed SD, pooled over the configs (each config's variance over the seeds)."""
    d = (pop - solo).ravel()
    half = stats.t.ppf(0.975, d.size - 1) * d.std(ddof=1) / np.sqrt(d.size)
    seed_sd = float(np.sqrt(solo.var(axis=0, ddof=1).mean()))
    rms = float(np.sqrt(np.mean(d**2)))
    return {"mean": float(d.mean()), "half": float(half), "rms": rms, "seed_sd": seed_sd}


@pytest.mark.slow
def test_lion_members_end_where_their_solo_trials_end_within_seed_noise(tmp_path):
    """A Lion member drifts from its solo trial within 50 steps (sign flips, docs/population.md),
    so over whole trainings they are equal in distribution, not number by number. 4 members x 3
    seeds, 3 epochs, paired with their 12 solo trials; sigma is the solo trials' seed-to-seed SD
    (pooled over the 4 configs: 8 degrees of freedom). Asserted:
    - the 95% t-interval of the mean paired difference contains 0 (no bias shown) and lies
      within +-sigma / 2 (any bias is below half a seed's spread: equivalence at 5 %);
    - the differences' root mean square is below sigma: a member ends nearer its solo trial
      than another seed's trial would (two independent seeds differ by sqrt(2) sigma in RMS).
    A population that trained another Lion (lr x 2, betas swapped) fails it."""
    drift = paired_drift(*lion_drift_errors(tmp_path))
    mean, half, sigma = drift["mean"], drift["half"], drift["seed_sd"]
    assert abs(mean) <= half, f"members are biased: {drift}"
    assert abs(mean) + half <= sigma / 2, f"a bias of half a seed's SD is not excluded: {drift}"
    assert drift["rms"] <= sigma, f"members end farther from their solo trials: {drift}"


# --- divergence and resume -------------------------------------------------------------------------


@pytest.mark.slow
def test_a_diverging_member_is_recorded_diverged_and_frozen_while_the_others_go_on(tmp_path):
    pairs = [(1e-3, 0.05), (30.0, 0.0), (2e-3, 0.1)]  # member 1's lr makes its loss explode
    cfgs = members("vit_p_w64_16px", "adamw", pairs, 3, warmup_epochs=0, diverge_loss=3.0)
    results = run_population(cfgs, [tmp_path / f"m{k}" for k in range(3)])
    solo = run_trial(cfgs[1], tmp_path / "solo")
    assert solo.status == "diverged"
    assert results[1].status == "diverged" and results[1].diverged_epoch == solo.diverged_epoch
    assert len(read_metrics(tmp_path / "m1")) == solo.diverged_epoch  # frozen: no more lines
    assert [results[0].status, results[2].status] == ["finished", "finished"]
    assert [len(read_metrics(tmp_path / f"m{k}")) for k in (0, 2)] == [3, 3]
    assert not (tmp_path / "m0" / POPULATION_CHECKPOINT).exists()


def file_kinds(folder) -> list[str]:
    """The files a trial folder holds, event files by kind (their names carry host and time)."""
    return sorted(
        "events" if f.name.startswith("events.out.tfevents.") else f.name for f in folder.iterdir()
    )


@pytest.mark.slow
def test_each_member_writes_what_a_solo_trial_writes_tensorboard_events_included(tmp_path):
    from services import needs_extra

    needs_extra("tensorboard", "tensorboard", "tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    pairs = [(1e-3, 0.05), (30.0, 0.0), (2e-3, 0.1)]  # member 1 diverges
    cfgs = members("vit_p_w64_16px", "adamw", pairs, 2, warmup_epochs=0, diverge_loss=3.0)
    out = [tmp_path / f"m{k}" for k in range(3)]
    results = run_population(cfgs, out)
    assert [r.status for r in results] == ["finished", "diverged", "finished"]
    solo = tmp_path / "solo"
    assert run_trial(cfgs[0], solo).status == "finished"
    assert file_kinds(solo) == ["events", "metrics.jsonl", "result.json"]
    for k, folder in enumerate(out):
        assert file_kinds(folder) == file_kinds(solo), f"member {k}"
        events = EventAccumulator(str(folder))
        events.Reload()
        metrics = read_metrics(folder)
        keys = ("lr", "val_error", "train_loss", "ema_top1") if k != 1 else ("lr",)
        for key in keys:
            scalars = events.Scalars(key)
            assert [s.step for s in scalars] == [m["epoch"] for m in metrics], (k, key)
            assert [s.value for s in scalars] == pytest.approx([m[key] for m in metrics], rel=1e-6)
    assert len(read_metrics(out[1])) == results[1].diverged_epoch < 2  # no events once frozen
    # members done before a population starts get nothing more, no event file either
    extra = members("vit_p_w64_16px", "adamw", [(5e-4, 0.0)], 2, warmup_epochs=0, diverge_loss=3.0)
    before = {d: sorted(f.name for f in d.iterdir()) for d in out}
    again = run_population([*cfgs, *extra], [*out, tmp_path / "m3"])
    assert [(r.status, r.digest) for r in again[:3]] == [(r.status, r.digest) for r in results]
    assert again[3].status == "finished"
    assert {d: sorted(f.name for f in d.iterdir()) for d in out} == before
    assert file_kinds(tmp_path / "m3") == file_kinds(solo)


def comparable(out) -> tuple[dict, list[dict]]:
    result = json.loads((out / "result.json").read_text())
    lines = [{k: v for k, v in m.items() if k not in TIMING} for m in read_metrics(out)]
    return {k: v for k, v in result.items() if k not in TIMING}, lines


# Uninterrupted trainings of the resume tests' populations, by their configs: the AdamW
# population stopped mid-epoch and at an epoch's end is trained through once, not twice.
REFERENCES: dict[str, list[Path]] = {}


def trained_through(cfgs: list[TrainConfig], tmp_path_factory) -> list[Path]:
    """The member folders of `cfgs` trained as one population without a stop, trained on the
    first call for these configs (the callers share an xdist_group: one worker, one cache)."""
    key = json.dumps([c.model_dump(mode="json") for c in cfgs], sort_keys=True)
    if key not in REFERENCES:
        folder = tmp_path_factory.mktemp("reference")
        folders = [folder / f"ref{k}" for k in range(len(cfgs))]
        assert {r.status for r in run_population(cfgs, folders)} == {"finished"}
        REFERENCES[key] = folders
    return REFERENCES[key]


@pytest.mark.slow
@pytest.mark.xdist_group("population_resume")
@pytest.mark.parametrize(
    "step, optimizer",
    [(7, "adamw"), (steps_per_epoch() - 1, "adamw"), (7, "lion")],
    ids=["mid-epoch", "epoch-end", "lion-mid-epoch"],
)
def test_a_stopped_population_resumes_every_member_exactly(
    tmp_path, tmp_path_factory, monkeypatch, step, optimizer
):
    pairs = {
        "adamw": [(1e-3, 0.05), (3e-3, 0.1), (5e-4, 0.0)],
        "lion": [(1e-4, 0.5), (3e-4, 1.0), (5e-5, 0.0)],
    }
    lion_args = {"lion": {"betas": [0.95, 0.98], "corrected_weight_decay": True}}
    cfgs = members(
        "vit_c_w64_16px",
        optimizer,
        pairs[optimizer],
        2,
        preset="paper",
        warmup_epochs=1,
        optimizer_args=lion_args if optimizer == "lion" else {},
    )
    ref = trained_through(cfgs, tmp_path_factory)
    calls = {"n": 0}
    seed_step = epoch.seed_step

    def seed_and_maybe_signal(seed, device):
        if calls["n"] == step:
            os.kill(os.getpid(), signal.SIGUSR2)
        calls["n"] += 1
        seed_step(seed, device)

    previous = signal.signal(signal.SIGUSR2, lambda *_: None)  # the signal passed on: ignored
    try:
        monkeypatch.setattr(epoch, "seed_step", seed_and_maybe_signal)
        out = [tmp_path / f"m{k}" for k in range(3)]
        with pytest.raises(TrialInterrupted):
            run_population(cfgs, out)
        assert (out[0] / POPULATION_CHECKPOINT).exists()
        assert not any((d / "result.json").exists() for d in out)
        run_population(cfgs, out)
    finally:
        signal.signal(signal.SIGUSR2, previous)
    for a, b in zip(ref, out, strict=True):
        assert comparable(a) == comparable(b)
        assert (
            json.loads((a / "result.json").read_text())["digest"]
            == json.loads((b / "result.json").read_text())["digest"]
        )


# --- grouping and the study ------------------------------------------------------------------------


def test_only_trials_that_differ_in_lr_and_wd_are_grouped(tiny_dict):
    data = copy.deepcopy(tiny_dict)
    data.update(seeds=[0, 1], epochs=[1, 2])
    data["search"]["n_samples"] = 5
    data["executor"] = {"population": 4}
    trials = plan(parse_spec(data))
    groups = populations(trials, 4)
    assert (
        sorted(len(g) for g in groups) == [1] * 8 + [4] * 8
    )  # 2 models x 2 epochs x 2 seeds: 5 = 4 + 1
    for group in groups:
        shared = {t.config.model_dump_json(exclude={"lr", "wd"}) for t in group}
        assert len(shared) == 1 and len({(t.lr, t.wd) for t in group}) == len(group)
    done = {t.key for t in groups[0][:3]}  # the first group: 3 of its 4 members done
    todo = {t.key: 2 for t in trials if t.key not in done}  # each pending one on attempt 2
    made = jobs(trials, todo, 4)
    assert len(made) == len(groups) and isinstance(made[0], PopulationJob)
    assert made[0].keys == tuple(t.key for t in groups[0])
    assert [m.attempt for m in made[0].members] == [None, None, None, 2]  # done ones: not run
    assert all(isinstance(j, TrialJob) for j in made if len(j.keys) == 1)
    solo = jobs(trials, todo, 1)
    assert [j.key for j in solo] == [t.key for t in trials if t.key in todo]
    assert {j.attempt for j in solo} == {2}


def test_population_is_not_part_of_the_cell_id_and_what_it_cannot_batch_is_refused(
    tiny_dict, cli, tmp_path
):
    one = parse_spec(tiny_dict)
    data = copy.deepcopy(tiny_dict)
    data["executor"] = {"population": 4}
    four = parse_spec(data)
    assert [t.key for t in plan(one)] == [t.key for t in plan(four)]
    data["recipe"]["compile"] = True
    study = tmp_path / "compile.yaml"
    study.write_text(yaml.safe_dump(data))
    code, out, err = cli("run", str(study), "--dry-run")
    assert code == 2 and "population" in (out + err) and "compile" in (out + err)
    data["recipe"]["compile"] = False
    data["executor"] = {"kind": "slurm", "population": 4, "slurm": {"tasks_per_node": 2}}
    study.write_text(yaml.safe_dump(data))
    code, out, err = cli("run", str(study), "--dry-run")
    assert code == 2 and "DDP" in (out + err)


def test_dry_run_shows_the_populations_and_how_slurm_runs_them(tiny_dict, cli, tmp_path):
    data = copy.deepcopy(tiny_dict)
    data["search"]["n_samples"] = 4
    data["executor"] = {
        "kind": "slurm",
        "population": 4,
        "slurm": {"trials_per_job": 2, "time_min": 30},
    }
    study = tmp_path / "study.yaml"
    study.write_text(yaml.safe_dump(data))
    code, out, _ = cli("run", str(study), "--dry-run")
    assert code == 0
    flat = " ".join(out.split())
    assert "executor.population 4: 2 population(s)" in flat
    assert "runs 2 population(s) one after another; time_min 30" in flat


def _study(tiny_dict, population: int, out: str) -> dict:
    data = copy.deepcopy(tiny_dict)
    data["models"] = ["vit_c_w64_16px"]
    data["search"]["n_samples"] = 4
    data["executor"] = {"kind": "debug", "population": population}
    data["output"] = str(out)
    return data


@pytest.mark.slow
def test_a_population_study_records_the_trials_of_a_solo_study(tiny_dict, tmp_path):
    from rich.console import Console

    from optbench.executors import make_executor
    from optbench.run.driver import run_study
    from optbench.store.database import Store

    quiet = Console(file=open(os.devnull, "w"))  # noqa: SIM115
    errors = {}
    for k in (1, 4):
        spec = parse_spec(_study(tiny_dict, k, tmp_path / f"p{k}"))
        assert run_study(spec, make_executor(spec), console=quiet, live=False).ran == 4
        stored = Store(spec, create=False).read(plan(spec))
        errors[k] = {s.trial.key: s.record.value for s in stored}
        assert (
            run_study(spec, make_executor(spec), console=quiet, live=False).ran == 0
        )  # nothing again
        for s in stored:
            execution = json.loads((s.trial.out_dir / "result.json").read_text())["execution"]
            assert execution == {"pipeline": "pil", "population": k}
        assert set(Store(spec, create=False).frame(plan(spec))["population"]) == {k}
    assert errors[1].keys() == errors[4].keys()
    for key, error in errors[1].items():
        assert abs(errors[4][key] - error) <= val_image_percent() + 1e-9, key


@pytest.mark.slow
def test_ctrl_c_then_rerun_resumes_the_population(tiny_dict, tmp_path):
    data = _study(tiny_dict, 4, tmp_path / "results")
    data["epochs"] = 3
    data["executor"] = {"kind": "local", "workers": 1, "population": 4}
    study = tmp_path / "study.yaml"
    study.write_text(yaml.safe_dump(data))
    spec = parse_spec(data)
    first = plan(spec)[0].out_dir
    proc = start_driver(study, tmp_path)  # Ctrl-C reaches it as a terminal's
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and not (first / POPULATION_CHECKPOINT).exists():
        assert proc.poll() is None, proc.communicate()[1]
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    before = [read_metrics(t.out_dir) for t in plan(spec)]
    lengths = [len(m) for m in before]
    assert all(1 <= n < 3 for n in lengths), f"epochs recorded before the Ctrl-C: {lengths}"
    assert (first / POPULATION_CHECKPOINT).exists()
    resumed = subprocess.run(
        [sys.executable, "-m", "optbench", "run", str(study)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=900,  # a loaded 2-core machine: the last epochs of 4 members
    )
    assert resumed.returncode == 0, resumed.stderr
    for t, lines in zip(plan(spec), before, strict=True):
        after = read_metrics(t.out_dir)
        assert len(after) == 3 and after[: len(lines)] == lines  # continued, not restarted
        assert json.loads((t.out_dir / "result.json").read_text())["status"] == "finished"
    assert not (first / POPULATION_CHECKPOINT).exists()


# --- SLURM (without a cluster: the executor's side of a submission) --------------------------------


def _population_jobs(tmp_path, n: int, size: int) -> list[PopulationJob]:
    cfgs = members("vit_p_w64_16px", "adamw", [(1e-3 * (1 + i), 0.05) for i in range(size)], 1)
    return [
        PopulationJob(
            tuple(TrialJob(f"cell/s{j}{i}", c, tmp_path / f"t{j}{i}") for i, c in enumerate(cfgs))
        )
        for j in range(n)
    ]


class FakeSubmitit:
    """submitit's SlurmExecutor as SlurmExecutor._submit_new uses it; records what it runs."""

    def __init__(self):
        self.parameters, self.submitted = {"comment": ""}, []

    def update_parameters(self, **kw):
        self.parameters.update(kw)

    def batch(self):
        return contextlib.nullcontext()

    def submit(self, fn):
        self.submitted.append(fn)
        job_id = f"7_{len(self.submitted) - 1}"
        return types.SimpleNamespace(
            job_id=job_id, paths=types.SimpleNamespace(stderr=f"/l/{job_id}")
        )


def test_slurm_runs_trials_per_job_populations_per_array_element_and_follows_each_member(
    tmp_path, monkeypatch
):
    from optbench.executors.slurm import executor as slurm
    from optbench.executors.slurm.journal import read_records

    fake = FakeSubmitit()
    monkeypatch.setattr(slurm.SlurmExecutor, "_executor", lambda self: fake)
    monkeypatch.setattr(slurm, "max_array_size", lambda: 1000)
    (tmp_path / "slurm").mkdir()  # submit() makes it
    executor = slurm.SlurmExecutor(SlurmSettings(trials_per_job=2), tmp_path / "slurm", "tiny")
    jobs_ = _population_jobs(tmp_path, 3, 4)
    executor._submit_new(jobs_)
    assert [len(batch.jobs) for batch in fake.submitted] == [2, 1]  # populations, not trials
    assert fake.submitted[0].jobs == jobs_[:2]
    records = read_records(tmp_path / "slurm")
    assert set(records) == {k for job in jobs_ for k in job.keys}  # each member followed
    assert {records[k].job_id for k in jobs_[0].keys + jobs_[1].keys} == {"7_0"}
    assert executor.submitted == 12


def test_slurm_reattaches_a_queued_population_member_by_member(tmp_path, monkeypatch):
    from optbench.executors.slurm import executor as slurm
    from optbench.executors.slurm.client import Survey
    from optbench.executors.slurm.journal import JobRecord, config_hash

    queued, new = _population_jobs(tmp_path, 2, 2)
    known = {
        m.key: (JobRecord(m.key, "9_0", config_hash(m.config), "/l", 0.0), "RUNNING")
        for m in queued.members
    }
    monkeypatch.setattr(slurm, "followed_jobs", lambda *a, **k: (known, Survey({})))
    submitted = []
    monkeypatch.setattr(
        slurm.SlurmExecutor, "_submit_new", lambda self, jobs: submitted.extend(jobs)
    )
    executor = slurm.SlurmExecutor(SlurmSettings(), tmp_path / "slurm", "tiny")
    executor.submit([queued, new])
    assert submitted == [new] and set(executor._tracked) == set(queued.keys)


@pytest.mark.slow
def test_a_slurm_job_trains_its_population_in_one_process(tmp_path):
    from optbench.executors.slurm.job import TrialBatch

    [job] = _population_jobs(tmp_path, 1, 2)
    assert TrialBatch([job])() == ["finished", "finished"]
    for m in job.members:
        assert json.loads((m.out_dir / "result.json").read_text())["execution"] == {
            "pipeline": "pil",
            "population": 2,
        }


@pytest.mark.slow  # trains a trial and a population: over half a second here
def test_a_solo_trial_and_a_population_count_wall_s_from_the_same_moment(tmp_path, monkeypatch):
    # both start the clock before they set up where they compute (train/loop.py: start_program)
    from optbench.train.compute import Compute

    set_up = Compute.for_trial.__func__

    def slow_set_up(cls, *args, **kwargs):
        time.sleep(0.5)
        return set_up(cls, *args, **kwargs)

    def crash(*args, **kwargs):
        raise RuntimeError("stop here: a failed result still records its wall time")

    monkeypatch.setattr(Compute, "for_trial", classmethod(slow_set_up))
    monkeypatch.setattr(stepper, "build_parts", crash)
    monkeypatch.setattr(population, "build_parts", crash)
    solo = run_trial(tiny_config(), tmp_path / "solo")
    cfgs = [tiny_config(lr=lr) for lr in (1e-3, 2e-3)]
    pop = run_population(cfgs, [tmp_path / "a", tmp_path / "b"])
    assert [r.status for r in (solo, *pop)] == ["failed"] * 3
    assert all(r.wall_s >= 0.5 for r in (solo, *pop)), [r.wall_s for r in (solo, *pop)]
