"""The trainer's CUDA-only branches, run on the CPU where torch can run them: the settings a
trial takes on CUDA (Compute.for_trial), the input-wait clock's device branch (driven by fake
timing events), SyncBatchNorm under DDP, and fused optimizer kernels in a training step. bf16
autocast, channels_last and torch.compile through the loop are tests/test_train_loop.py's (slow
lane); what only a GPU can run is listed in docs/development.md (bench/gpu_checks.sh)."""

from __future__ import annotations

import pytest
import torch
from cli_inprocess import tiny_config
from torch import nn

from optbench.spec.recipe import Recipe
from optbench.train import parts
from optbench.train.compute import Compute
from optbench.train.distributed import DistContext
from optbench.train.epoch import DeviceStepClock, StepClock, step_clock


def test_a_trial_on_cuda_asks_for_every_gpu_setting_and_on_the_cpu_for_none(monkeypatch):
    recipe = Recipe(amp=True, channels_last=True, compile=True)
    gpu = Compute.for_trial(recipe, "cuda", DistContext(), None)  # builds no CUDA tensor
    cpu = Compute.for_trial(recipe, "cpu", DistContext(), None)
    settings = ("amp", "channels_last", "compile", "fused")
    assert [getattr(gpu, s) for s in settings] == [True] * 4
    assert [getattr(cpu, s) for s in settings] == [False] * 4
    assert not Compute.for_trial(Recipe(amp=False), "cuda", DistContext(), None).amp
    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)  # the clock records its start
    assert isinstance(step_clock(gpu.device), DeviceStepClock)
    assert type(step_clock(cpu.device)) is StepClock


class FakeEvent:
    """A CUDA timing event on a made-up stream clock (milliseconds); counts the host's waits."""

    now = 0.0
    waits = 0

    def __init__(self, enable_timing: bool):
        assert enable_timing
        self.at: float | None = None

    def record(self) -> None:
        self.at = FakeEvent.now

    def synchronize(self) -> None:
        assert self.at is not None
        FakeEvent.waits += 1

    def elapsed_time(self, end: FakeEvent) -> float:
        return end.at - self.at


def test_the_device_clock_charges_each_interval_to_the_part_it_ends_and_waits_once_per_read():
    FakeEvent.now, FakeEvent.waits = 0.0, 0
    clock = DeviceStepClock(FakeEvent)
    assert clock.waited_s() == 0.0  # no step yet
    step = [("input_wait", 5), ("to_device", 1), ("augment", 2), ("forward_backward", 10),
            ("optimizer", 3), ("ema", 1), ("host_reads", 0.5)]  # fmt: skip
    for _ in range(3):
        for part, ms in step:
            FakeEvent.now += ms
            clock.mark(part)
        clock.step_ended()
    assert FakeEvent.waits == 0  # nothing read while the steps run
    parts = clock.read()
    assert FakeEvent.waits == 1
    for part, ms in step:
        assert parts[part] == pytest.approx(3 * ms / 1000)
    assert parts["first_step"] == pytest.approx(22.5 / 1000)  # the clock's start to step 1's end
    assert clock.waited_s() == pytest.approx(3 * 6 / 1000)  # getting and copying the input
    FakeEvent.now += 7
    clock.mark("input_wait")  # read again: only what came after the last read is added
    assert clock.read()["input_wait"] == pytest.approx((15 + 7) / 1000)


def test_under_ddp_on_cuda_batchnorm_becomes_syncbatchnorm(monkeypatch):
    ddp = DistContext(rank=0, world=2, local_rank=0)
    assert parts.syncs_batchnorm(Compute(torch.device("cuda"), ddp, False, False))
    assert not parts.syncs_batchnorm(Compute(torch.device("cpu"), ddp, False, False))
    assert not parts.syncs_batchnorm(Compute(torch.device("cuda"), DistContext(), False, False))
    # the conversion itself, on a model with BatchNorm (ViT_C's conv stem), on the CPU
    monkeypatch.setattr(parts, "syncs_batchnorm", lambda compute: True)
    cfg = tiny_config(model="vit_c_w64_16px")
    model = parts.build_parts(cfg, Compute.for_trial(cfg.recipe, "cpu", DistContext(), None)).model
    kinds = {type(m) for m in model.modules()}
    assert nn.SyncBatchNorm in kinds and nn.BatchNorm2d not in kinds


@pytest.mark.parametrize("optimizer", ["adamw", "sgd"])
@pytest.mark.slow  # steps a model with each fused optimizer: over half a second here
def test_a_solo_stepper_on_a_cuda_compute_steps_with_fused_kernels(tmp_path, optimizer):
    from optbench.train.stepper import SoloStepper

    cfg = tiny_config(optimizer=optimizer, batch_size=512, epochs=1)
    fused = Compute(torch.device("cpu"), DistContext(), False, False, fused=True)
    stepper = SoloStepper(cfg, fused, "pil", tmp_path / "checkpoint.pt")
    assert stepper.optimizer.defaults["fused"] is True  # torch runs fused AdamW/SGD on the CPU
    stepper.begin(resume=False)
    x, y = next(iter(stepper.parts.batches.train(0, 0)))
    before = [p.detach().clone() for p in stepper.model.parameters()]
    stepper.losses(*stepper.parts.augment(x, y)).sum().backward()
    stepper.update([cfg.lr_used])
    assert any(
        not torch.equal(a, p) for a, p in zip(before, stepper.model.parameters(), strict=True)
    )
