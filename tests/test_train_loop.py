"""One trial end to end: determinism, metrics, divergence, checkpoint/resume, stop signals, DDP."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import optbench.train.loop as loop
from optbench.spec import Dataset, Recipe
from optbench.train.checkpoint import CHECKPOINT_FILE
from optbench.train.config import TrainConfig
from optbench.train.loop import TrialInterrupted, run_trial
from optbench.train.results import read_metrics, read_result

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """One torch thread: fast on a shared 2-core machine, and the same in subprocesses."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


TIMING = {"wall_s", "images_per_s", "epoch_s"}


def config(epochs: int = 3, **recipe) -> TrainConfig:
    """digits at 16 px, batch 256: 5 steps per epoch. The paper preset exercises every random
    part of the loop (AutoAugment, mixup/CutMix, EMA)."""
    return TrainConfig(
        model="vit_c_w64_16px",
        dataset=Dataset(name="digits", img_size=16),
        optimizer="adamw",
        lr=4e-3,
        wd=0.05,
        epochs=epochs,
        batch_size=256,
        recipe=Recipe(**{"preset": "paper", **recipe}),
    )


def comparable(out: Path) -> tuple[dict, list[dict]]:
    result = json.loads((out / "result.json").read_text())
    lines = [{k: v for k, v in m.items() if k not in TIMING} for m in read_metrics(out)]
    return {k: v for k, v in result.items() if k not in TIMING}, lines


@pytest.fixture(scope="module")
def reference(tmp_path_factory, one_thread) -> tuple[dict, list[dict]]:
    out = tmp_path_factory.mktemp("reference")
    assert run_trial(config(), out).status == "finished"
    return comparable(out)


def test_same_config_same_result_and_metrics(tmp_path, reference):
    result = run_trial(config(), tmp_path)
    assert comparable(tmp_path) == reference
    assert result.final_error == result.ema_final_error and result.reported == "ema_final"
    metrics = read_metrics(tmp_path)
    assert [m["epoch"] for m in metrics] == [1, 2, 3]
    for key in (
        "train_loss",
        "lr",
        "raw_top1",
        "raw_top5",
        "ema_top1",
        "ema_top5",
        "images_per_s",
        "epoch_s",
    ):
        assert all(m[key] is not None for m in metrics), key
    assert result.best_error == min(m["ema_top1"] for m in metrics)
    assert not (tmp_path / CHECKPOINT_FILE).exists()  # removed once the result is written


def interrupt_at(monkeypatch, step: int, signum: int) -> None:
    """Deliver `signum` to this process while optimizer step `step` is being prepared."""
    calls = {"n": 0}
    seed_step = loop.seed_step

    def seed_and_maybe_signal(seed: int, device) -> None:
        if calls["n"] == step:
            os.kill(os.getpid(), signum)
        calls["n"] += 1
        seed_step(seed, device)

    monkeypatch.setattr(loop, "seed_step", seed_and_maybe_signal)


@pytest.fixture
def recorded_signals():
    """A caller's own SIGTERM / SIGUSR2 handler, which records what run_trial passes on."""
    got: list[int] = []

    def record(signum, frame) -> None:
        got.append(signum)

    previous = {s: signal.signal(s, record) for s in loop.STOP_SIGNALS}
    yield got, record
    for s, handler in previous.items():
        signal.signal(s, handler)


@pytest.mark.parametrize(
    "step, signum", [(7, signal.SIGUSR2), (4, signal.SIGTERM)], ids=["mid-epoch", "epoch-end"]
)
def test_interrupted_trial_resumes_to_the_same_result(
    tmp_path, monkeypatch, reference, recorded_signals, step, signum
):
    got, record = recorded_signals
    interrupt_at(monkeypatch, step, signum)
    with pytest.raises(TrialInterrupted) as stopped:
        run_trial(config(), tmp_path)
    assert stopped.value.signum == signum
    assert got == [signum]  # passed on, once, to the caller's handler
    assert signal.getsignal(signal.SIGTERM) is record  # and the handlers are restored
    assert (tmp_path / CHECKPOINT_FILE).is_file() and read_result(tmp_path) is None
    monkeypatch.undo()
    result = run_trial(config(), tmp_path, resume=True)
    assert result.status == "finished"
    assert comparable(tmp_path) == reference


STOPPED_BY_DEFAULT = """
import os, signal, sys
from pathlib import Path
import optbench.train.loop as loop
from optbench.spec import Dataset, Recipe
from optbench.train.config import TrainConfig
seed_step = loop.seed_step
def seed_and_signal(seed, device, calls=[]):
    if len(calls) == 2:
        os.kill(os.getpid(), signal.SIGTERM)
    calls.append(seed)
    seed_step(seed, device)
loop.seed_step = seed_and_signal
cfg = TrainConfig(model="vit_p_w64_16px", dataset=Dataset(name="digits", img_size=16),
    optimizer="sgd", lr=0.8, wd=1e-4, epochs=2, batch_size=256, recipe=Recipe(warmup_epochs=1))
loop.run_trial(cfg, Path(sys.argv[1]))
print("not reached")
"""


def test_without_a_handler_the_signal_ends_the_process_after_the_checkpoint(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-c", STOPPED_BY_DEFAULT, str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == -signal.SIGTERM, done.stderr
    assert "not reached" not in done.stdout
    assert (tmp_path / CHECKPOINT_FILE).is_file() and read_result(tmp_path) is None


def test_resume_refuses_a_checkpoint_of_another_config(tmp_path, monkeypatch, recorded_signals):
    interrupt_at(monkeypatch, 2, signal.SIGUSR2)
    with pytest.raises(TrialInterrupted):
        run_trial(config(), tmp_path)
    monkeypatch.undo()
    result = run_trial(config(epochs=4), tmp_path, resume=True)
    assert result.status == "failed" and "epochs: 4 here, 3 there" in result.message
    assert (tmp_path / CHECKPOINT_FILE).is_file()  # refused, not deleted


def test_divergence_ends_the_trial_with_its_epoch(tmp_path):
    result = run_trial(config(diverge_loss=0.5), tmp_path)
    assert result.status == "diverged" and result.diverged_epoch == 1
    assert result.final_error is None and result.epochs_run == 1
    assert len(read_metrics(tmp_path)) == 1


def test_raw_report_without_ema(tmp_path):
    result = run_trial(config(epochs=2, ema=False, report="raw_best"), tmp_path)
    assert result.ema_final_error is None
    assert result.final_error == result.best_error == result.raw_best_error


def test_deit_recipe_trains_with_every_augmentation(tmp_path):
    cfg = config(epochs=2, preset="deit", schedule_step="epoch")
    result = run_trial(cfg, tmp_path)
    assert result.status == "finished", result.message
    assert result.config.recipe.repeated_aug == 3 and result.ema_final_top5_error is not None


@pytest.mark.slow  # torch.compile takes ~30 s on one core
def test_the_gpu_settings_bf16_channels_last_and_compile_train_through_the_loop_on_the_cpu(
    tmp_path, monkeypatch
):
    # run_trial turns amp, channels_last and compile on for CUDA only; the loop's code under
    # them (bf16 autocast in training and evaluation, channels_last inputs, a compiled model
    # beside its EMA, soft targets, checkpoints) is the same on any device, so it is run here on
    # the CPU, where torch has bf16 autocast and inductor too.
    from optbench.train.distributed import DistContext

    run = loop._Runtime(
        torch.device("cpu"), DistContext(), amp=True, channels_last=True, compile=True
    )
    compiled, compile_ = [], torch.compile
    monkeypatch.setattr(torch, "compile", lambda m: compiled.append(m) or compile_(m))
    cfg = config(epochs=2)
    result = loop._train(cfg, tmp_path, run, loop.StopRequest(), resume=False)
    assert result.status == "finished" and len(compiled) == 1
    assert 0 <= result.ema_final_error <= 100 and 0 <= result.raw_final_error <= 100
    assert all(m["train_loss"] > 0 for m in read_metrics(tmp_path))
    fp32 = run_trial(cfg, tmp_path / "fp32")
    assert result.digest != fp32.digest  # bf16 did compute: not silently the fp32 path


def test_a_crash_is_a_failed_result(tmp_path):
    cfg = config().model_copy(update={"batch_size": 100_000})
    result = run_trial(cfg, tmp_path)
    assert result.status == "failed" and "exceeds" in result.message
    assert (tmp_path / "error.log").is_file()


CLI_INTERRUPTED = """
import os, signal, sys
import optbench.train.loop as loop
seed_step, calls = loop.seed_step, []
def seed_and_signal(seed, device):  # SIGTERM arrives while step 7 (mid-epoch 2) is prepared
    if len(calls) == 7:
        os.kill(os.getpid(), signal.SIGTERM)
    calls.append(seed)
    seed_step(seed, device)
loop.seed_step = seed_and_signal
from optbench.cli import main
sys.argv = ["optbench", *sys.argv[1:]]
main()
"""


def cli_train(out: Path, *extra: str, interrupt: bool = False) -> subprocess.CompletedProcess:
    args = ["train", "vit_c_w64_16px", "--dataset", "digits", "--img-size", "16"]
    args += ["--optimizer", "adamw", "--lr", "4e-3", "--wd", "0.05", "--batch-size", "256"]
    args += ["--recipe", "paper", "--epochs", "3", "--threads", "1", "--out", str(out), *extra]
    head = ["-c", CLI_INTERRUPTED] if interrupt else ["-m", "optbench"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, *head, *args], env=env, capture_output=True, text=True, timeout=300
    )


def test_cli_sigterm_checkpoints_and_resume_finishes_identically(tmp_path, reference):
    stopped = cli_train(tmp_path, interrupt=True)
    assert stopped.returncode == 128 + signal.SIGTERM, stopped.stderr
    assert "--resume" in stopped.stderr and read_result(tmp_path) is None
    assert (tmp_path / CHECKPOINT_FILE).is_file()
    resumed = cli_train(tmp_path, "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert comparable(tmp_path) == reference


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


DDP_SCRIPT = """
import sys
from pathlib import Path
from optbench.spec import Dataset, Recipe
from optbench.train.config import TrainConfig
from optbench.train.loop import run_trial
cfg = TrainConfig(model="vit_p_w64_16px", dataset=Dataset(name="digits", img_size=16),
    optimizer="sgd", lr=0.8, wd=1e-4, epochs=1, batch_size=256,
    recipe=Recipe(preset="paper", auto_augment="none"))
result = run_trial(cfg, Path(sys.argv[1]))
print(result.status, result.world_size, result.digest, result.message)
"""


def test_ddp_two_cpu_processes_train_one_trial(tmp_path):
    port = free_port()
    procs = []
    for rank in range(2):
        env = {
            **os.environ,
            "PYTHONPATH": str(REPO),
            "RANK": str(rank),
            "LOCAL_RANK": str(rank),
            "WORLD_SIZE": "2",
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            "OMP_NUM_THREADS": "1",
        }
        cmd = [sys.executable, "-c", DDP_SCRIPT, str(tmp_path)]
        procs.append(
            subprocess.Popen(
                cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
        )
    outputs = [p.communicate(timeout=300) for p in procs]
    lines = [out.split() for out, _ in outputs]
    assert all(p.returncode == 0 for p in procs), outputs
    assert lines[0][:2] == ["finished", "2"], outputs
    assert lines[0][2] == lines[1][2]  # every rank ends with the same weights
    result = read_result(tmp_path)
    assert result.world_size == 2 and result.digest == lines[0][2]
    assert len(read_metrics(tmp_path)) == 1


def test_process_group_comes_from_torchrun_or_a_multi_task_srun_step():
    from optbench.train.distributed import DistContext, context_from_env

    assert context_from_env({}) == DistContext()
    assert context_from_env({"RANK": "1", "WORLD_SIZE": "4", "LOCAL_RANK": "1"}) == DistContext(
        1, 4, 1
    )
    srun = {"SLURM_STEP_NUM_TASKS": "2", "SLURM_PROCID": "1", "SLURM_LOCALID": "1"}
    assert context_from_env(srun) == DistContext(1, 2, 1)
    # a batch script of a multi-task job is not a process group by itself
    assert context_from_env({"SLURM_NTASKS": "4", "SLURM_PROCID": "0"}) == DistContext()


def test_each_ddp_process_takes_its_local_ranks_gpu_among_those_it_sees():
    from optbench.train.distributed import DistContext, process_device

    rank3 = DistContext(rank=3, world=4, local_rank=3)
    assert process_device(rank3, "cuda", visible_gpus=4) == torch.device("cuda", 3)
    # one GPU bound per task (--gpus-per-task=1): each task's only GPU is cuda:0
    assert process_device(rank3, "cuda", visible_gpus=1) == torch.device("cuda", 0)
    assert process_device(DistContext(), "cuda", visible_gpus=4) == torch.device("cuda")
    assert process_device(rank3, "cpu", visible_gpus=0) == torch.device("cpu")
