"""The EMA rules against their reference codes' update rules, written out here: pycls's
`update_model_ema` (branch `vitconfigs`, pycls/core/net.py) and DeiT's ModelEma (timm 0.4, as
DHVT's official code uses it), replayed on recorded weights."""

from __future__ import annotations

import pytest
import torch
from cli_inprocess import tiny_config
from torch import nn

from optbench.spec.recipe import Dataset, Recipe
from optbench.train.ema import WeightAverage
from optbench.trial.config import TrainConfig


def small_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 6), nn.BatchNorm1d(6), nn.ReLU(), nn.Linear(6, 3))


def config(epochs: int, batch_size: int, **recipe) -> TrainConfig:
    return tiny_config(
        model="any",
        dataset=Dataset(name="digits"),
        optimizer="sgd",
        lr=0.1,
        wd=0.0,
        epochs=epochs,
        batch_size=batch_size,
        recipe=Recipe(**recipe),
    )


def float_state(model: nn.Module) -> dict[str, torch.Tensor]:
    return {
        k: v.detach().clone().double()
        for k, v in model.state_dict().items()
        if v.is_floating_point()
    }


def train_and_record(cfg: TrainConfig, steps_per_epoch: int):
    """Fake training: each step moves every weight and BN buffer; returns the WeightAverage
    and the model's state after each step (epoch, batch, state)."""
    model = small_model()
    initial = float_state(model)
    average = WeightAverage(model, cfg, steps_per_epoch)
    gen = torch.Generator().manual_seed(1)
    recorded = []
    for epoch in range(cfg.epochs):
        for batch in range(steps_per_epoch):
            with torch.no_grad():
                for v in model.state_dict().values():
                    if v.is_floating_point():
                        v.add_(torch.randn(v.shape, generator=gen))
            step = epoch * steps_per_epoch + batch
            average.after_step(model, epoch, batch, step)
            recorded.append((epoch, batch, float_state(model)))
    return average, initial, recorded


def assert_state_close(average: WeightAverage, expected: dict[str, torch.Tensor]) -> None:
    got = float_state(average.module)
    assert got.keys() == expected.keys()
    for k in expected:
        assert torch.allclose(got[k], expected[k], rtol=1e-5, atol=1e-5), k


@pytest.mark.parametrize("epochs", [7, 12])
def test_pycls_rule_updates_every_32_iterations_of_an_epoch_with_pyclss_alpha(epochs):
    batch, steps_per_epoch = 96, 70  # iterations 0, 32, 64 of each epoch update the EMA
    cfg = config(epochs, batch, preset="paper")
    average, initial, recorded = train_and_record(cfg, steps_per_epoch)
    # pycls: update when cur_iter % EMA_UPDATE_PERIOD == 0, alpha = min(1, EMA_ALPHA *
    # TRAIN.BATCH_SIZE / MAX_EPOCH * EMA_UPDATE_PERIOD), alpha = 1 while cur_epoch < WARMUP_EPOCHS
    alpha = min(1.0, 1e-5 * batch / epochs * 32)
    ema = dict(initial)
    updates = 0
    for epoch, it, weights in recorded:
        if it % 32 != 0:
            continue
        a = 1.0 if epoch < 5 else alpha
        ema = {k: ema[k] * (1 - a) + weights[k] * a for k in ema}
        updates += 1
    assert updates == epochs * 3
    assert_state_close(average, ema)
    # BatchNorm buffers are averaged too, not copied
    assert not torch.allclose(
        average.module[1].running_mean.double(), recorded[-1][2]["1.running_mean"]
    )


def test_pycls_rule_copies_the_weights_during_warmup():
    # 5 epochs = pycls's 5 warmup epochs: the EMA ends as the copy made at the last update
    # iteration (32 of 40) of the last epoch, not the final weights
    average, _, recorded = train_and_record(config(5, 64, preset="paper"), steps_per_epoch=40)
    copied = next(w for e, it, w in recorded if (e, it) == (4, 32))
    assert_state_close(average, copied)
    assert not torch.allclose(float_state(average.module)["0.weight"], recorded[-1][2]["0.weight"])


def test_decay_rule_is_deits_model_ema_from_the_first_step():
    cfg = config(3, 64, preset="deit", ema_decay=0.9)
    average, initial, recorded = train_and_record(cfg, steps_per_epoch=5)
    ema = dict(initial)  # DeiT's ModelEma starts from a copy of the initial model
    for _, _, weights in recorded:
        ema = {k: ema[k] * 0.9 + (1 - 0.9) * weights[k] for k in ema}
    assert_state_close(average, ema)


def test_horizon_rule_copies_during_warmup_then_decays_by_the_horizon():
    cfg = config(10, 64, warmup_epochs=2.0, ema_horizon=0.25)
    steps_per_epoch = 4
    average, _, recorded = train_and_record(cfg, steps_per_epoch)
    decay = 1 - 1 / (0.25 * 10 * steps_per_epoch)
    ema = None
    for step, (_, _, weights) in enumerate(recorded):
        # a copy through warmup (timm's update_after_step also copies at the first step after)
        if step <= 2 * steps_per_epoch:
            ema = dict(weights)
        else:
            ema = {k: ema[k] * decay + (1 - decay) * weights[k] for k in ema}
    assert_state_close(average, ema)
