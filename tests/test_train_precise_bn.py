"""Precise BN: the statistics pycls's compute_precise_bn_stats computes (the mean over batches of
each batch's mean and unbiased variance, written out here), and that evaluation of the model
and of the EMA sees them."""

from __future__ import annotations

import pytest
import torch
from cli_inprocess import tiny_config
from torch import nn

from optbench.spec.recipe import Recipe
from optbench.train.distributed import DistContext
from optbench.train.precise_bn import precise_bn_batches, recompute_bn_stats
from optbench.train.run_trial import run_trial
from optbench.train.stepper import SoloStepper
from optbench.trial.config import TrainConfig


def test_bn_statistics_are_the_mean_of_batch_means_and_unbiased_batch_variances():
    torch.manual_seed(0)
    model = nn.Sequential(nn.BatchNorm2d(3), nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4, momentum=0.3))
    model.eval()
    batches = [torch.randn(5, 3, 6, 6) * (i + 1) + i for i in range(4)]
    seen = []  # the second BatchNorm's inputs, as the recomputation runs
    model[2].register_forward_hook(lambda m, args, out: seen.append(args[0].detach().clone()))
    recompute_bn_stats(model, batches, DistContext())

    def expected(inputs: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        means = [x.mean(dim=(0, 2, 3)) for x in inputs]
        variances = [x.transpose(0, 1).flatten(1).var(dim=1, unbiased=True) for x in inputs]
        return torch.stack(means).mean(0), torch.stack(variances).mean(0)

    for bn, inputs in ((model[0], batches), (model[2], seen)):
        mean, var = expected(inputs)
        assert torch.allclose(bn.running_mean, mean, atol=1e-5)
        assert torch.allclose(bn.running_var, var, rtol=1e-4)
    assert model[2].momentum == 0.3 and not model.training  # restored


def test_precise_bn_takes_pyclss_number_of_batches():
    # pycls: int(NUM_SAMPLES_PRECISE / batch per GPU / NUM_GPUS), at most the loader's length
    assert precise_bn_batches(8192, 2048, 625) == 4
    assert precise_bn_batches(8192, 128, 11) == 11
    assert precise_bn_batches(8192, 10000, 50) == 1


def config(**recipe) -> TrainConfig:
    return tiny_config(
        model="vit_c_w64_16px",  # BatchNorm in its conv stem
        optimizer="sgd",
        lr=0.5,
        wd=1e-4,
        epochs=2,
        batch_size=256,
        recipe=Recipe(**{"preset": "paper", "precise_bn_images": 512, **recipe}),
    )


def bn_buffers(model: nn.Module) -> torch.Tensor:
    return torch.cat(
        [
            torch.cat([m.running_mean, m.running_var])
            for m in model.modules()
            if isinstance(m, nn.BatchNorm2d)
        ]
    ).clone()


@pytest.fixture
def spied(monkeypatch):
    """Record the BN buffers each recomputation leaves, and those each evaluation sees (of the
    raw model or the EMA's, as the loop asks the solo stepper for them)."""
    events = []
    recompute, logits_of = SoloStepper.recompute_bn, SoloStepper.logits_of

    def recompute_spy(self, kind, inputs):
        model = self._module(kind)
        before = bn_buffers(model)
        recompute(self, kind, inputs)
        events.append(("recomputed", id(model), before, bn_buffers(model)))

    def evaluate_spy(self, kind):
        forward = logits_of(self, kind)
        model = self._module(kind)
        events.append(("evaluated", id(model), bn_buffers(model), None))
        return forward

    monkeypatch.setattr(SoloStepper, "recompute_bn", recompute_spy)
    monkeypatch.setattr(SoloStepper, "logits_of", evaluate_spy)
    return events


@pytest.mark.slow
def test_evaluation_of_the_model_and_the_ema_sees_the_recomputed_statistics(tmp_path, spied):
    torch.set_num_threads(1)
    assert run_trial(config(), tmp_path).status == "finished"
    evaluated = [e for e in spied if e[0] == "evaluated"]
    assert len(evaluated) == 4  # raw and EMA, 2 epochs
    assert len({e[1] for e in evaluated}) == 2
    for i, (kind, model, buffers, _) in enumerate(spied):
        if kind != "evaluated":
            continue
        earlier = [e for e in spied[:i] if e[1] == model]
        assert earlier and earlier[-1][0] == "recomputed"
        _, _, before, after = earlier[-1]
        assert torch.equal(buffers, after)
        assert not torch.allclose(before, after)  # precise BN changed them


@pytest.mark.slow
def test_without_precise_bn_nothing_is_recomputed(tmp_path, spied):
    torch.set_num_threads(1)
    assert run_trial(config(precise_bn_images=0), tmp_path).status == "finished"
    assert [e[0] for e in spied] == ["evaluated"] * 4
