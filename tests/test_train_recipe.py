"""Recipe presets, weight-decay groups, optimizers and the lr schedule.

The expected lr values are computed here from the reference codes' formulas, written out:
pycls's `get_epoch_lr` (branch `vitconfigs`, pycls/core/optimizer.py) and DeiT's epoch-stepped
timm 0.4 CosineLRScheduler as DHVT's main.py drives it.
"""

from __future__ import annotations

import math

import pytest
import timm
import torch
from cli_inprocess import tiny_config
from pydantic import ValidationError

from optbench import models  # noqa: F401  (registers the quickstart models)
from optbench.spec.recipe import Recipe
from optbench.train.optim import LrSchedule, build_optimizer, weight_decay_groups
from optbench.trial.config import TrainConfig


def config(
    epochs: int = 10,
    optimizer: str = "adamw",
    *,
    lr: float = 1e-3,
    batch_size: int = 256,
    ref_batch: int = 2048,
    **recipe,
) -> TrainConfig:
    return tiny_config(
        model="vit_c_w64_16px",
        optimizer=optimizer,
        lr=lr,
        wd=0.1,
        epochs=epochs,
        batch_size=batch_size,
        ref_batch=ref_batch,
        recipe=Recipe(**recipe),
    )


def quickstart_model() -> torch.nn.Module:
    return timm.create_model("vit_c_w64_16px", num_classes=10, in_chans=1, img_size=16)


# pycls (branch vitconfigs) as the project's pycls recipe notes state it, by pycls's own
# config names (its "Schedule", "EMA", "Optimizer", "Data" and "Configs" sections); the test
# maps each onto the recipe key that carries it, so a preset edit that drifts from pycls fails.
PYCLS_VIT = {
    "OPTIM.LR_POLICY": ("cos", "schedule", "pycls"),  # get_epoch_lr: pycls's cosine, per epoch
    "OPTIM.MIN_LR": (0.005, "min_lr", None),  # "the final lr is 0.5% of the peak"
    "OPTIM.WARMUP_EPOCHS": (5, "warmup_epochs", None),
    "OPTIM.WARMUP_FACTOR": (0.1, "warmup_factor", None),  # "starts at 10% of the peak"
    "OPTIM.NESTEROV": (True, "nesterov", None),  # "Nesterov on (pycls's default)"
    "OPTIM.MOMENTUM": (0.9, "momentum", None),
    "OPTIM.BETAS": ((0.9, 0.999), "betas", None),
    "TRAIN.LABEL_SMOOTHING": (0.1, "label_smoothing", None),
    "OPTIM.EMA_UPDATE_PERIOD": (32, "ema_period", None),
    "OPTIM.EMA_ALPHA": (1e-5, "ema_alpha", None),
    "BN.NUM_SAMPLES_PRECISE": (8192, "precise_bn_images", None),
    "TRAIN.AUGMENT": ("AutoAugment", "auto_augment", "pycls_v0"),  # pycls's own policy_v0
    "TRAIN.PCA_STD": (0.1, "lighting_std", None),
    "TRAIN.MIXUP_ALPHA": (0.8, "mixup_alpha", None),
    "TRAIN.CUTMIX_ALPHA": (1.0, "cutmix_alpha", None),
}


def test_paper_preset_is_pycls_vit_configs():
    r = Recipe(preset="paper")
    for name, (pycls_value, key, as_recipe) in PYCLS_VIT.items():
        expected = pycls_value if as_recipe is None else as_recipe
        assert getattr(r, key) == expected, f"{name} = {pycls_value!r} in pycls, {key} here"
    # pycls steps its lr once per epoch and its EMA rule is its own; warmup is not shortened
    assert (r.schedule_step, r.ema_rule, r.warmup_ref_epochs, r.ema_horizon) == (
        "epoch", "pycls", None, None,
    )  # fmt: skip
    # what pycls has none of: random erasing, repeated augmentation, drop path
    assert (r.random_erasing, r.repeated_aug, r.drop_path) == (0.0, 1, 0.0)
    assert r.ema and r.report == "ema_final"  # the paper reports the EMA model


def test_deit_preset_is_dhvts_official_code_and_keys_override_one_by_one():
    # DHVT main.py defaults and run_code_cifar.sh (lr 1e-3 at batch 256 x 2 GPUs = 512)
    r = Recipe(preset="deit")
    assert (r.schedule, r.warmup_epochs) == ("deit", 5.0)
    assert r.min_lr * 1e-3 == pytest.approx(1e-5) and r.warmup_factor * 1e-3 == pytest.approx(1e-6)
    assert (r.ema_rule, r.ema_decay, r.report) == ("decay", 0.99996, "raw_final")
    assert (r.auto_augment, r.random_erasing, r.normalize) == (
        "rand-m9-mstd0.5-inc1",
        0.25,
        "imagenet",
    )
    assert (r.repeated_aug, r.drop_path, r.eps, r.label_smoothing) == (3, 0.1, 1e-8, 0.1)
    assert r.nesterov  # timm 0.4's create_optimizer: opt "sgd" is Nesterov SGD
    o = Recipe.model_validate({"preset": "deit", "drop_path": 0.0, "report": "ema_final"})
    assert (o.drop_path, o.report, o.random_erasing) == (0.0, "ema_final", 0.25)
    # the resolved recipe round-trips: what a study stores is what it gets back
    assert Recipe.model_validate(o.model_dump(mode="json")) == o


def test_each_ema_rule_shows_only_its_own_parameters():
    basic = Recipe()
    assert (basic.ema_rule, basic.ema_horizon, basic.ema_period, basic.ema_decay) == (
        "horizon",
        0.078,
        None,
        None,
    )
    switched = Recipe(preset="paper", ema_rule="horizon")  # the preset's pycls keys go
    assert (switched.ema_horizon, switched.ema_period, switched.ema_alpha) == (0.078, None, None)
    assert Recipe(ema_rule="pycls", ema_period=8).ema_period == 8
    with pytest.raises(ValidationError, match="ema_period is read only by ema_rule 'pycls'"):
        Recipe(preset="deit", ema_period=8)
    with pytest.raises(ValidationError, match="schedule_step must be 'epoch'"):
        Recipe(schedule="pycls", schedule_step="iteration")
    assert Recipe(schedule="deit").schedule_step == "epoch"


def test_recipe_rejects_unknown_keys_presets_and_ema_less_ema_report():
    with pytest.raises(ValidationError, match="extra"):
        Recipe.model_validate({"preset": "paper", "mixup": 0.8})
    with pytest.raises(ValidationError, match="preset"):
        Recipe.model_validate({"preset": "fast"})
    with pytest.raises(ValidationError, match="needs ema"):
        Recipe(ema=False)
    assert Recipe(ema=False, report="raw_final").report == "raw_final"


def test_warmup_shortens_in_proportion_below_the_reference_length():
    r = Recipe(warmup_ref_epochs=50)  # 5 epochs of warmup for schedules of 50 epochs and more
    assert r.warmup_for(400) == r.warmup_for(50) == 5.0
    assert r.warmup_for(20) == pytest.approx(2.0)
    assert Recipe(warmup_epochs=5.0).warmup_for(20) == 5.0  # basic, a warmup of its own: as is
    config(epochs=4, warmup_ref_epochs=50)  # 0.4 warmup epochs fit
    with pytest.raises(ValidationError, match="warmup_epochs"):
        config(epochs=5, warmup_epochs=5.0)
    # pycls's and DeiT's rules warm up through a schedule shorter than the warmup, as their code
    assert config(epochs=3, preset="paper").recipe.warmup_for(3) == 5.0
    config(epochs=3, preset="deit")


def test_weight_decay_never_touches_norms_and_biases():
    model = quickstart_model()
    decayed, not_decayed = weight_decay_groups(model, 0.1, exclude=())
    assert decayed["weight_decay"] == 0.1 and not_decayed["weight_decay"] == 0.0
    for name, p in model.named_parameters():
        if p.ndim <= 1:  # LayerNorm and BatchNorm gains, all biases
            assert name in not_decayed["names"], name
    assert "stem.1.weight" in not_decayed["names"]  # BatchNorm gain of the conv stem
    assert "blocks.0.norm1.weight" in not_decayed["names"]
    assert "blocks.0.attn.qkv.bias" in not_decayed["names"]
    for name in (
        "stem.0.weight",
        "blocks.0.attn.qkv.weight",
        "head.weight",
        "pos_embed",
        "cls_token",
    ):
        assert name in decayed["names"], name


def test_weight_decay_exclusions_are_configurable():
    model = quickstart_model()
    decayed, not_decayed = weight_decay_groups(model, 0.1, exclude=("*pos_embed", "*cls_token"))
    assert {"pos_embed", "cls_token"} <= set(not_decayed["names"])
    assert "pos_embed" not in decayed["names"] and "head.weight" in decayed["names"]
    opt = build_optimizer(model, config(preset="deit"))
    by_wd = {g["weight_decay"]: sum(p.numel() for p in g["params"]) for g in opt.param_groups}
    assert by_wd[0.0] >= model.pos_embed.numel() + model.cls_token.numel()


def test_dhvt_affine_and_head_embeddings_can_be_excluded():
    model = timm.create_model("dhvt_tiny_cifar_p4", num_classes=10, in_chans=3, img_size=32)
    decayed, _ = weight_decay_groups(model, 0.05, exclude=())
    assert "patch_embed.post_affine.alpha" in decayed["names"]  # (1, C, 1, 1): not 1-D
    assert "blocks.0.attn.head_embed" in decayed["names"]
    decayed, kept = weight_decay_groups(model, 0.05, exclude=("*affine*", "*head_embed"))
    assert {"patch_embed.post_affine.alpha", "blocks.3.attn.head_embed"} <= set(kept["names"])
    assert not any("affine" in n or "head_embed" in n for n in decayed["names"])
    assert "blocks.0.attn.qkv.weight" in decayed["names"]


@pytest.mark.parametrize("nesterov", [False, True])
def test_sgd_uses_momentum_and_the_nesterov_option(nesterov):
    opt = build_optimizer(quickstart_model(), config(optimizer="sgd", nesterov=nesterov))
    assert isinstance(opt, torch.optim.SGD)
    assert all(g["momentum"] == 0.9 and g["nesterov"] is nesterov for g in opt.param_groups)
    assert opt.param_groups[0]["lr"] == pytest.approx(1e-3 * 256 / 2048)


def test_paper_sgd_is_nesterov_with_momentum_09_and_no_dampening():
    # pycls: OPTIM.NESTEROV True, MOMENTUM 0.9, DAMPENING 0 (never overridden by its configs)
    opt = build_optimizer(quickstart_model(), config(optimizer="sgd", preset="paper"))
    for group in opt.param_groups:
        assert (group["nesterov"], group["momentum"], group["dampening"]) == (True, 0.9, 0)


def test_adamw_takes_betas_and_eps_from_the_recipe():
    opt = build_optimizer(quickstart_model(), config(betas=(0.8, 0.99), eps=1e-6))
    assert isinstance(opt, torch.optim.AdamW)
    assert opt.param_groups[0]["betas"] == (0.8, 0.99) and opt.param_groups[0]["eps"] == 1e-6


@pytest.mark.parametrize("optimizer", ["adamw", "sgd"])
def test_the_fused_kernels_used_on_cuda_take_the_same_steps_as_foreach(optimizer):
    # torch's fused AdamW and SGD also run on the CPU: the GPU path's optimizer, checked here.
    cfg = config(optimizer=optimizer, nesterov=True)
    torch.manual_seed(0)
    start = torch.cat([p.flatten() for p in quickstart_model().parameters()]).detach()
    moved = {}
    for fused in (False, True):
        torch.manual_seed(0)
        model = quickstart_model()
        opt = build_optimizer(model, cfg, fused=fused)
        assert opt.defaults["fused" if fused else "foreach"] is True
        for step in range(3):
            x = torch.randn(8, 1, 16, 16, generator=torch.Generator().manual_seed(step))
            model(x).sum().backward()
            opt.step()
            opt.zero_grad()
        moved[fused] = torch.cat([p.detach().flatten() for p in model.parameters()]) - start
    # Same updates up to float rounding (Adam's division amplifies it where gradients are ~0).
    assert moved[False].norm() > 0
    assert (moved[True] - moved[False]).norm() / moved[False].norm() < 1e-3


def lrs(cfg: TrainConfig, steps_per_epoch: int) -> list[float]:
    """The lr each optimizer step of `cfg` trains at."""
    schedule = LrSchedule(cfg, steps_per_epoch)
    return [schedule.lr(step) for step in range(cfg.epochs * steps_per_epoch)]


def per_epoch(values: list[float], steps_per_epoch: int) -> list[float]:
    epochs = [values[i : i + steps_per_epoch] for i in range(0, len(values), steps_per_epoch)]
    assert all(len(set(e)) == 1 for e in epochs), "the lr changed within an epoch"
    return [e[0] for e in epochs]


def pycls_get_epoch_lr(cur_epoch, base_lr, max_epoch, min_lr, warmup_epochs, warmup_factor):
    """pycls's get_epoch_lr with LR_POLICY cos, written out."""
    lr = base_lr * (
        (1.0 - min_lr) * 0.5 * (1.0 + math.cos(math.pi * cur_epoch / max_epoch)) + min_lr
    )
    if cur_epoch < warmup_epochs:
        alpha = cur_epoch / warmup_epochs
        lr *= warmup_factor * (1.0 - alpha) + alpha
    return lr


@pytest.mark.parametrize("epochs", [10, 50])
def test_paper_schedule_is_pycls_get_epoch_lr_every_epoch(epochs):
    cfg = config(epochs=epochs, optimizer="sgd", preset="paper")
    trained = per_epoch(lrs(cfg, steps_per_epoch=3), 3)
    # pycls's ViT configs: MIN_LR 0.005, WARMUP_EPOCHS 5, WARMUP_FACTOR 0.1 (its default)
    expected = [pycls_get_epoch_lr(e, cfg.lr_used, epochs, 0.005, 5, 0.1) for e in range(epochs)]
    assert trained == pytest.approx(expected, rel=1e-12)
    assert trained[0] == pytest.approx(0.1 * cfg.lr_used)  # warmup from 10% of the peak


def deit_epoch_lr(epoch, lr, epochs, warmup_epochs, warmup_lr, min_lr):
    """What DHVT's main.py trains epoch `epoch` at: timm 0.4's CosineLRScheduler (t_in_epochs,
    no warmup prefix, cycle limit 1), stepped with scheduler.step(e) after epoch e."""
    t = max(epoch - 1, 0)  # step(e) after epoch e; epoch 0 at the initial (warmup) lr
    if t < warmup_epochs:
        return warmup_lr + t * (lr - warmup_lr) / warmup_epochs
    return min_lr + 0.5 * (lr - min_lr) * (1 + math.cos(math.pi * t / epochs))


@pytest.mark.parametrize("epochs", [4, 30])
def test_deit_schedule_is_dhvt_mains_epoch_stepped_timm_cosine(epochs):
    cfg = config(epochs, preset="deit", lr=1e-3, batch_size=512, ref_batch=512)  # DHVT's CIFAR run
    trained = per_epoch(lrs(cfg, steps_per_epoch=2), 2)
    # main.py: --warmup-epochs 5, --warmup-lr 1e-6, --min-lr 1e-5 (absolute, at lr 1e-3)
    expected = [deit_epoch_lr(e, 1e-3, epochs, 5, 1e-6, 1e-5) for e in range(epochs)]
    assert trained == pytest.approx(expected, rel=1e-9)


def test_per_iteration_schedule_warms_up_linearly_then_decays_by_half_cosine():
    cfg = config(epochs=10, warmup_epochs=2.0)
    peak = cfg.lr_used
    values = lrs(cfg, steps_per_epoch=5)  # warmup: 10 steps
    assert values[0] == pytest.approx(peak / 10)
    assert values[9] == pytest.approx(peak)
    assert values[:10] == sorted(values[:10]) and values[10:] == sorted(values[10:], reverse=True)
    assert values[29] == pytest.approx(peak / 2, rel=0.05)  # halfway through the cosine
    assert values[-1] < peak * 0.01


def test_cosine_min_lr_and_warmup_factor_are_fractions_of_the_peak():
    cfg = config(epochs=10, warmup_epochs=2.0, min_lr=0.1, warmup_factor=0.5)
    peak, values = cfg.lr_used, lrs(cfg, steps_per_epoch=5)
    assert values[0] == pytest.approx(0.5 * peak + (peak - 0.5 * peak) / 10)
    assert min(values) >= 0.1 * peak and values[-1] == pytest.approx(0.1 * peak, rel=1e-3)


def test_per_epoch_schedule_holds_lr_constant_within_an_epoch():
    cfg = config(epochs=10, warmup_epochs=2.0, schedule_step="epoch", min_lr=0.1)
    epochs = per_epoch(lrs(cfg, steps_per_epoch=5), 5)
    assert epochs[0] == pytest.approx(cfg.lr_used / 4)  # middle of the first warmup epoch
    assert epochs[-1] > 0.1 * cfg.lr_used  # the last epoch still learns


STUDY = {  # a one-cell study on digits
    "name": "s",
    "dataset": {"name": "digits", "img_size": 16},
    "models": ["vit_c_w64_16px"],
    "optimizers": ["adamw"],
    "epochs": [10],
    "batch_size": 128,
    "search": {"n_samples": 2, "ranges": {"adamw": {"lr": [1e-4, 1e-2], "wd": [0.01, 0.5]}}},
}


def test_a_study_picks_a_preset_and_overrides_keys(tmp_path):
    from optbench.errors import SpecError, UsageError
    from optbench.run.preflight import check_spec
    from optbench.spec.schema import parse_spec

    study = {**STUDY, "recipe": {"preset": "deit", "drop_path": 0.0}}
    spec = parse_spec(study)
    assert spec.recipe.random_erasing == 0.25 and spec.recipe.drop_path == 0.0
    cell = spec.cells()[0]
    assert spec.cell_config(cell)["recipe"]["preset"] == "deit"
    other = parse_spec({**study, "recipe": {"preset": "deit"}})
    assert other.cell_id(cell) != spec.cell_id(cell)  # an override makes a different cell
    with pytest.raises(SpecError, match="recipe.*unknown key"):
        parse_spec({**study, "recipe": {"preset": "deit", "erasing": 0.1}})
    with pytest.raises(UsageError, match="cifar-10-batches-py is not a folder"):
        check_spec(
            parse_spec({**study, "dataset": {"name": "cifar10", "root": str(tmp_path)}}), data=True
        )


@pytest.mark.parametrize(
    "key, value",
    [
        ("schedule", "deit"),
        ("warmup_factor", 0.2),
        ("min_lr", 0.01),
        ("ema_rule", "decay"),
        ("ema_period", 16),
        ("ema_alpha", 2e-5),
        ("precise_bn_images", 4096),
        ("lighting_std", 0.2),
        ("normalize", "imagenet"),
        ("auto_augment", "v0"),
    ],
)
def test_every_recipe_key_is_part_of_the_cell_id(key, value):
    from optbench.spec.schema import parse_spec

    base = {**STUDY, "recipe": {"preset": "paper"}}
    spec = parse_spec(base)
    changed = parse_spec({**base, "recipe": {"preset": "paper", key: value}})
    assert getattr(changed.recipe, key) == value
    cell = spec.cells()[0]
    assert changed.cell_id(cell) != spec.cell_id(cell)


def test_ref_batch_defaults_to_the_presets_and_an_explicit_one_wins():
    from optbench.spec.schema import parse_spec

    study = {**STUDY, "epochs": [60]}
    # DeiT's code scales lr by batch / 512; Xiao et al. normalize to 2048.
    assert parse_spec({**study, "recipe": {"preset": "deit"}}).ref_batch == 512
    assert parse_spec({**study, "recipe": {"preset": "paper"}}).ref_batch == 2048
    # basic does not scale: the lr a study declares is the lr it trains at
    assert parse_spec(study).ref_batch == study["batch_size"]
    assert parse_spec({**study, "batch_size": 16}).ref_batch == 16
    assert parse_spec({**study, "recipe": {"preset": "deit"}, "ref_batch": 1024}).ref_batch == 1024
    one_trial = config(epochs=60).model_dump(exclude={"ref_batch", "recipe"})  # `optbench train`'s
    deit = TrainConfig(**one_trial, recipe=Recipe(preset="deit"))
    assert deit.ref_batch == 512 and deit.lr_used == pytest.approx(1e-3 * 256 / 512)
    basic = TrainConfig(**one_trial)
    assert basic.ref_batch == 256 and basic.lr_used == basic.lr
