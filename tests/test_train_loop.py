"""One trial end to end: determinism, metrics, divergence, checkpoint/resume, stop signals, DDP."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from cli_inprocess import tiny_config

import optbench.train.epoch as epoch
from optbench.spec.recipe import Dataset, Recipe
from optbench.train import run_trial as run_trial_module
from optbench.train.checkpoint import CHECKPOINT_FILE
from optbench.train.loop import CheckpointCadence, Members
from optbench.train.run_trial import run_trial
from optbench.train.signals import STOP_SIGNALS, StopRequest, TrialInterrupted
from optbench.trial.config import Execution, TrainConfig
from optbench.trial.results import read_metrics, read_result

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """One torch thread: fast on a shared 2-core machine, and the same in subprocesses."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


TIMING = {"wall_s", "images_per_s", "epoch_s", "input_wait", "timing"}


def config(epochs: int = 3, **recipe) -> TrainConfig:
    """digits at 16 px, batch 256: 5 steps per epoch. The paper preset exercises every random
    part of the loop (AutoAugment, mixup/CutMix, EMA)."""
    return tiny_config(
        model="vit_c_w64_16px",
        dataset=Dataset(name="digits", img_size=16),
        lr=4e-3,
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


@pytest.mark.slow
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
    seed_step = epoch.seed_step

    def seed_and_maybe_signal(seed: int, device) -> None:
        if calls["n"] == step:
            os.kill(os.getpid(), signum)
        calls["n"] += 1
        seed_step(seed, device)

    monkeypatch.setattr(epoch, "seed_step", seed_and_maybe_signal)


@pytest.fixture
def recorded_signals():
    """A caller's own SIGTERM / SIGUSR2 handler, which records what run_trial passes on."""
    got: list[int] = []

    def record(signum, frame) -> None:
        got.append(signum)

    previous = {s: signal.signal(s, record) for s in STOP_SIGNALS}
    yield got, record
    for s, handler in previous.items():
        signal.signal(s, handler)


@pytest.mark.slow
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
import optbench.train.epoch as epoch
from optbench.spec.recipe import Dataset, Recipe
from optbench.train.run_trial import run_trial
from optbench.trial.config import TrainConfig
seed_step = epoch.seed_step
def seed_and_signal(seed, device, calls=[]):
    if len(calls) == 2:
        os.kill(os.getpid(), signal.SIGTERM)
    calls.append(seed)
    seed_step(seed, device)
epoch.seed_step = seed_and_signal
cfg = TrainConfig(model="vit_p_w64_16px", dataset=Dataset(name="digits", img_size=16),
    optimizer="sgd", lr=0.8, wd=1e-4, epochs=2, batch_size=256, recipe=Recipe(warmup_epochs=1))
run_trial(cfg, Path(sys.argv[1]))
print("not reached")
"""


@pytest.mark.slow
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


@pytest.mark.slow
def test_resume_refuses_a_checkpoint_of_another_config(tmp_path, monkeypatch, recorded_signals):
    interrupt_at(monkeypatch, 2, signal.SIGUSR2)
    with pytest.raises(TrialInterrupted):
        run_trial(config(), tmp_path)
    monkeypatch.undo()
    result = run_trial(config(epochs=4), tmp_path, resume=True)
    assert result.status == "failed" and "epochs: 4 here, 3 there" in result.message
    assert (tmp_path / CHECKPOINT_FILE).is_file()  # refused, not deleted


@pytest.mark.slow
def test_divergence_ends_the_trial_with_its_epoch(tmp_path):
    result = run_trial(config(diverge_loss=0.5), tmp_path)
    assert result.status == "diverged" and result.diverged_epoch == 1
    assert result.final_error is None and result.epochs_run == 1
    assert len(read_metrics(tmp_path)) == 1


@pytest.mark.slow
def test_raw_report_without_ema(tmp_path):
    result = run_trial(config(epochs=2, ema=False, report="raw_best"), tmp_path)
    assert result.ema_final_error is None
    assert result.final_error == result.best_error == result.raw_best_error


@pytest.mark.slow
def test_deit_recipe_reports_the_raw_model_and_records_the_ema(tmp_path):
    # DHVT's main.py evaluates `model`, never `model_ema`: deit reports the raw model's error
    result = run_trial(config(epochs=2, preset="deit"), tmp_path)
    assert result.status == "finished", result.message
    assert result.config.recipe.repeated_aug == 3 and result.reported == "raw_final"
    metrics = read_metrics(tmp_path)
    assert result.final_error == result.raw_final_error == metrics[-1]["raw_top1"]
    assert result.best_error == min(m["raw_top1"] for m in metrics)
    assert result.ema_final_error == metrics[-1]["ema_top1"] is not None
    assert result.ema_final_top5_error is not None


@pytest.mark.slow  # torch.compile takes ~30 s on one core
def test_the_gpu_settings_bf16_channels_last_and_compile_train_through_the_loop_on_the_cpu(
    tmp_path, monkeypatch
):
    # run_trial turns amp, channels_last, compile and fused kernels on for CUDA only; the loop's
    # code under them (bf16 autocast in training and evaluation, channels_last inputs, a
    # compiled model beside its EMA, fused AdamW, soft targets, checkpoints) is the same on any
    # device, so it is run here on the CPU, where torch has bf16 autocast and inductor too.
    from optbench.train.compute import Compute
    from optbench.train.distributed import DistContext

    compute = Compute(
        torch.device("cpu"), DistContext(), amp=True, channels_last=True, compile=True, fused=True
    )
    compiled, compile_ = [], torch.compile
    monkeypatch.setattr(torch, "compile", lambda m, **kw: compiled.append(m) or compile_(m, **kw))
    cfg = config(epochs=2)
    run = Execution(pipeline="pil")
    members = Members([cfg], [tmp_path], tmp_path, compute.device, run, start=time.perf_counter())
    cadence = CheckpointCadence()
    result = run_trial_module._train(
        cfg, tmp_path, tmp_path, compute, StopRequest(), False, members, run, cadence
    )
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
import optbench.train.epoch as epoch
seed_step, calls = epoch.seed_step, []
def seed_and_signal(seed, device):  # SIGTERM arrives while step 7 (mid-epoch 2) is prepared
    if len(calls) == 7:
        os.kill(os.getpid(), signal.SIGTERM)
    calls.append(seed)
    seed_step(seed, device)
epoch.seed_step = seed_and_signal
from optbench.cli.app import main
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


@pytest.mark.slow
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
from optbench.spec.recipe import Dataset, Recipe
from optbench.trial.config import TrainConfig
from optbench.train.run_trial import run_trial
cfg = TrainConfig(model="vit_p_w64_16px", dataset=Dataset(name="digits", img_size=16),
    optimizer="sgd", lr=0.8, wd=1e-4, epochs=1, batch_size=256,
    recipe=Recipe(preset="paper", auto_augment="none"))
result = run_trial(cfg, Path(sys.argv[1]))
print(result.status, result.world_size, result.digest, result.message)
"""


def run_ddp(script: str, *args: object, world: int = 2) -> list[tuple[int, str, str]]:
    """Run `script` as the `world` ranks of one gloo process group on the CPU; (return code,
    stdout, stderr) of each rank."""
    port = free_port()
    procs = []
    for rank in range(world):
        env = {
            **os.environ,
            "PYTHONPATH": str(REPO),
            "RANK": str(rank),
            "LOCAL_RANK": str(rank),
            "WORLD_SIZE": str(world),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            "OMP_NUM_THREADS": "1",
        }
        cmd = [sys.executable, "-c", script, *map(str, args)]
        procs.append(
            subprocess.Popen(
                cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
        )
    outputs = [p.communicate(timeout=300) for p in procs]
    return [(p.returncode, out, err) for p, (out, err) in zip(procs, outputs, strict=True)]


@pytest.mark.slow
def test_ddp_two_cpu_processes_train_one_trial(tmp_path):
    ranks = run_ddp(DDP_SCRIPT, tmp_path)
    outputs = [(out, err) for _, out, err in ranks]
    lines = [out.split() for out, _ in outputs]
    assert all(rc == 0 for rc, _, _ in ranks), outputs
    assert lines[0][:2] == ["finished", "2"], outputs
    assert lines[0][2] == lines[1][2]  # every rank ends with the same weights
    result = read_result(tmp_path)
    assert result.world_size == 2 and result.digest == lines[0][2]
    assert len(read_metrics(tmp_path)) == 1


DDP_STOP_SCRIPT = """
import json, os, signal, sys
from pathlib import Path
import optbench.train.epoch as epoch
from optbench.spec.recipe import Dataset, Recipe
from optbench.trial.config import TrainConfig
from optbench.train.run_trial import run_trial
from optbench.train.signals import TrialInterrupted
out, epochs, signal_at, resume = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
passed_on, steps = [], []
signal.signal(signal.SIGUSR2, lambda signum, frame: passed_on.append(signum))
seed_step = epoch.seed_step
def seed_and_count(seed, device):  # rank 1 alone gets SIGUSR2 while step `signal_at` is prepared
    if len(steps) == signal_at and os.environ["RANK"] == "1":
        os.kill(os.getpid(), signal.SIGUSR2)
    steps.append(seed)
    seed_step(seed, device)
epoch.seed_step = seed_and_count
cfg = TrainConfig(model="vit_p_w64_16px", dataset=Dataset(name="digits", img_size=16),
    optimizer="sgd", lr=0.8, wd=1e-4, epochs=epochs, batch_size=BATCH,
    recipe=Recipe(preset="paper", auto_augment="none"))
try:
    result = run_trial(cfg, out, resume=resume == "resume")
    print("finished", result.status, result.digest)
except TrialInterrupted as stopped:
    print("stopped", stopped.signum, len(steps), json.dumps(passed_on))
"""


@pytest.mark.slow
def test_ddp_a_signal_on_one_rank_stops_every_rank_at_the_same_step_and_resumes_identically(
    tmp_path,
):
    from optbench.data.datasets import load_dataset
    from optbench.train.checkpoint import load_checkpoint
    from optbench.train.signals import STOP_CHECK_EVERY

    batch = 32
    script = DDP_STOP_SCRIPT.replace("BATCH", str(batch))
    steps_per_epoch = load_dataset(Dataset(name="digits", img_size=16)).num_train // batch
    # Signal right after an agreement (the longest wait), where the next one, STOP_CHECK_EVERY
    # steps on, falls in the same epoch and before its end (which is an agreement too).
    n, every = steps_per_epoch, STOP_CHECK_EVERY
    signal_at = next(k * every for k in range(1, 100) if k * every // n == ((k + 1) * every) // n)
    epochs = signal_at // n + 1  # the stop falls mid-epoch in the last epoch

    def ranks_say(out: Path, signal_at: int, resume: str) -> list[list[str]]:
        ranks = run_ddp(script, out, epochs, signal_at, resume)
        assert all(rc == 0 for rc, _, _ in ranks), ranks
        return [out.split() for _, out, _ in ranks]

    reference = ranks_say(tmp_path / "reference", -1, "fresh")
    assert reference[0][:2] == ["finished", "finished"] and reference[0] == reference[1]

    stopped = ranks_say(tmp_path / "stopped", signal_at, "fresh")
    for said in stopped:  # each rank stopped for SIGUSR2 and passed it on, once
        assert said[0] == "stopped" and int(said[1]) == signal.SIGUSR2, stopped
        assert json.loads(said[3]) == [signal.SIGUSR2]
    ran = {int(said[2]) for said in stopped}  # optimizer steps each rank ran
    assert len(ran) == 1, stopped  # every rank stopped after the same step
    (ran,) = ran
    assert signal_at < ran <= signal_at + STOP_CHECK_EVERY  # acted on within the promised steps
    assert ran % steps_per_epoch  # mid-epoch
    position = load_checkpoint(tmp_path / "stopped" / CHECKPOINT_FILE)["progress"]
    assert position["epoch"] * steps_per_epoch + position["batch"] == ran
    assert read_result(tmp_path / "stopped") is None

    resumed = ranks_say(tmp_path / "stopped", -1, "resume")
    assert resumed == reference  # both ranks end with the uninterrupted run's weights
    assert comparable(tmp_path / "stopped") == comparable(tmp_path / "reference")


def test_ddp_ranks_ask_each_other_only_every_few_steps_and_at_epoch_ends():
    """Under DDP the stop agreement (an all-reduce the host waits for) runs only at its
    cadence, and a signal another rank got is answered at the next agreement."""
    from optbench.train.signals import STOP_CHECK_EVERY, StopAgreement, StopRequest

    class OtherRankGetsSignal:  # stands in for a DistContext of two ranks
        enabled, world = True, 2

        def __init__(self):
            self.reduced_at, self.other, self.step = [], 0, 0

        def max_(self, t: torch.Tensor) -> torch.Tensor:
            self.reduced_at.append(self.step)
            return t.clamp_(min=self.other)

    group, every, per_epoch = OtherRankGetsSignal(), STOP_CHECK_EVERY, STOP_CHECK_EVERY + 5
    agreement = StopAgreement(StopRequest(), group, torch.device("cpu"))
    answers = {}
    for step in range(4 * every):
        group.step = step
        if step == 2 * every:  # the other rank's signal arrives while this step runs
            group.other = signal.SIGUSR2
        answers[step] = agreement.after_step(step, epoch_end=(step + 1) % per_epoch == 0)
    ends = {k * per_epoch - 1 for k in range(1, 4)}  # the last steps of epochs 1-3
    asked = sorted({k * every - 1 for k in range(1, 5)} | ends)
    assert group.reduced_at == asked  # no all-reduce, so no host sync, on the other steps
    first = min(s for s in asked if s >= 2 * every)
    assert all(answers[s] == 0 for s in answers if s < first)
    assert answers[first] == signal.SIGUSR2 and first - 2 * every < every


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


@pytest.mark.slow
def test_a_torchvision_built_for_another_torch_is_one_line_with_the_fix(tmp_path):
    import os
    import subprocess
    import sys

    fake = tmp_path / "site" / "torchvision"  # raises what a mismatched torchvision raises
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text(
        "raise RuntimeError('operator torchvision::nms does not exist')\n"
    )
    repo = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": f"{tmp_path / 'site'}{os.pathsep}{repo}"}
    args = ["train", "vit_p_w64_16px", "--dataset", "digits", "--optimizer", "adamw"]
    args += ["--lr", "1e-3", "--wd", "0.05", "--epochs", "1", "--out", str(tmp_path / "t")]
    done = subprocess.run(
        [sys.executable, "-m", "optbench", *args],
        env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 1
    [line] = done.stderr.splitlines()
    assert line.startswith("error: torchvision ") and "C++ operators do not load" in line
    assert line.endswith("(docs/install.md)")


def _mismatch_line(monkeypatch, torch: str, vision: str) -> str:
    from optbench import errors

    monkeypatch.setattr(errors, "built_version", {"torch": torch, "torchvision": vision}.get)
    line = errors.torch_mismatch(RuntimeError("operator torchvision::nms does not exist"))
    assert line is not None and "\n" not in line
    return line


def test_a_cpu_torch_with_a_cuda_torchvision_names_the_pair_by_version(monkeypatch):
    # what pip left when PyTorch's CPU index was unreachable (issue 44)
    line = _mismatch_line(monkeypatch, "2.13.0+cpu", "0.28.0+cu130")
    assert line.startswith(
        "torchvision 0.28.0+cu130 is built for CUDA 13.0, torch 2.13.0+cpu for the CPU only"
    )
    assert "install torchvision 0.28 (torch 2.13's) built for the CPU only: pip install " in line
    assert "'torchvision==0.28.*' --index-url https://download.pytorch.org/whl/cpu" in line
    # without that index, PyPI's pair; === so that no local CPU wheel of 2.13.0 stands in
    assert "pip install 'torch===2.13.0' 'torchvision==0.28.*'" in line


def test_a_torchvision_of_another_torch_version_names_the_one_that_pairs(monkeypatch):
    line = _mismatch_line(monkeypatch, "2.13.0+cpu", "0.29.1+cpu")
    assert line.startswith("torchvision 0.29.1+cpu is torch 2.14's, not torch 2.13.0+cpu's")
    assert "'torchvision==0.28.*' --index-url https://download.pytorch.org/whl/cpu" in line
    line = _mismatch_line(monkeypatch, "2.14.1", "0.28.0")  # PyPI's torch: PyPI's torchvision
    assert "torch 2.14's torchvision 0.29 with it from PyPI" in line and "--index-url" not in line
    line = _mismatch_line(monkeypatch, "2.99.0+cpu", "0.28.0+cpu")  # newer than the table
    assert "the torchvision released with torch 2.99 (pytorch/vision's README" in line


def test_the_table_of_pairs_has_the_installed_pair(tmp_path, monkeypatch):
    import torchvision

    from optbench.errors import TORCHVISION_OF_TORCH, built_version

    torch_minor = ".".join(torch.__version__.split(".")[:2])
    assert TORCHVISION_OF_TORCH[torch_minor] == ".".join(torchvision.__version__.split(".")[:2])
    package = tmp_path / "fake_vision"  # the build label is read from version.py, not imported
    package.mkdir()
    (package / "__init__.py").write_text("raise RuntimeError('never imported')\n")
    (package / "version.py").write_text("__version__ = '0.28.0+cu130'\ncuda = '13.0'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert built_version("fake_vision") == "0.28.0+cu130"
    assert built_version("no_such_package_here") == "none"


@pytest.mark.slow
def test_each_epoch_is_in_a_tensorboard_event_file_too(tmp_path, monkeypatch):
    from services import needs_extra

    needs_extra("tensorboard", "tensorboard", "tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    assert run_trial(config(epochs=2), tmp_path).status == "finished"
    events = EventAccumulator(str(tmp_path))
    events.Reload()
    metrics = read_metrics(tmp_path)
    for key in ("val_error", "train_loss", "lr", "ema_top1"):
        scalars = events.Scalars(key)
        assert [s.step for s in scalars] == [1, 2]
        assert [s.value for s in scalars] == pytest.approx([m[key] for m in metrics], rel=1e-6)

    # without the package, nothing is written and the trial is the same
    import optbench.trackers.tensorboard as tensorboard

    monkeypatch.setattr(tensorboard, "available", lambda: False)
    bare = tmp_path / "bare"
    assert run_trial(config(epochs=2), bare).digest == read_result(tmp_path).digest
    assert not list(bare.glob("events.out.tfevents.*"))
