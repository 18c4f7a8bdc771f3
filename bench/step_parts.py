"""Where a trial's step time goes, per training configuration (issue 66 items 1-2): the images/s
of (i) the input plan alone (the batches, their copy to the device and the augmentation), (ii)
the whole trial's steps with the model replaced by one of negligible cost (a linear layer on
the pooled image: the most the harness can feed), (iii) the model alone on one fixed batch on the
device (forward, backward, the trial's optimizer), (iv) the real trial's steps, and their
ratios; beside them the real trial's step parts (result.json's `timing.steps`, trial/timing.py)
as shares, and on CUDA the host syncs per step (torch's sync debug mode) and each rate's MFU;
for data held on the device, the epoch's evaluation at chunks of 1 and 4 training batches.
`--profile N` profiles N more steps of the trial and of the model alone (bench/step_profile.py:
operations per step, the device's busy share, time by kind of operation; `--trace DIR` keeps
the Chrome traces): the model's profile names what caps the model, the trial's what the
harness adds.

Configurations, as the studies define them (their first trial's config): the quickstart's three
16-px models on the digits (studies/quickstart.yaml), dhvt_tiny_cifar_p4 with DHVT's recipe on
a generated CIFAR-100-sized dataset (studies/dhvt_deit_cifar100.yaml, batch 256 per GPU as its
2-GPU run has), vit_p_4gf with the paper recipe on a generated ImageNet-layout class folder of
JPEGs (studies/edf_adamw_4gf.yaml, batch 256 per GPU). Each rate is `--steps` timed steps after
`--warmup` untimed ones (compilation among them). `--tiny` shrinks everything for the CPU: 8
images a batch (the quickstart's own 128), 2 + 3 steps, the 224-px model at 64 px; on a shared
CPU give it `--threads 1`.

    PYTHONPATH=. python bench/step_parts.py [--device cuda] [--compile] [--configs quickstart,cifar,224]
    PYTHONPATH=. python bench/step_parts.py --device cpu --tiny   # the CPU's dry run

One JSON line per configuration; the last line sums them up ("summary").
"""

from __future__ import annotations

import argparse
import copy
import json
import platform
import sys
import tempfile
import time
import warnings
from collections import Counter
from contextlib import contextmanager
from pathlib import Path

import torch
import yaml
from torch import nn

sys.path.insert(0, str(Path(__file__).parent))
from gpu_throughput import matmul_tflops, write_cifar100  # noqa: E402
from input_pipeline import write_jpegs  # noqa: E402
from step_profile import profile_steps  # noqa: E402

from optbench.data.batches import DeviceBatches  # noqa: E402
from optbench.host import cpu_name, usable_cores  # noqa: E402
from optbench.models.complexity import count_complexity  # noqa: E402
from optbench.plan.trials import plan  # noqa: E402
from optbench.spec.schema import parse_spec  # noqa: E402
from optbench.train import parts as parts_mod  # noqa: E402
from optbench.train.distributed import DistContext  # noqa: E402
from optbench.train.epoch import run_epoch  # noqa: E402
from optbench.train.evaluation import count_errors, weight_kinds  # noqa: E402
from optbench.train.loop import start_program  # noqa: E402
from optbench.train.signals import StopRequest  # noqa: E402
from optbench.train.state import TrialState  # noqa: E402
from optbench.train.stepper import SoloStepper  # noqa: E402
from optbench.trial.config import Execution, TrainConfig  # noqa: E402
from optbench.trial.timing import STEP_PARTS  # noqa: E402

STUDIES = Path(__file__).parent.parent / "studies"


def study_config(study: str, model: str | None = None, **dataset) -> TrainConfig:
    """The first trial's config of studies/`study`.yaml (of `model`), its dataset changed."""
    spec = parse_spec(yaml.safe_load((STUDIES / f"{study}.yaml").read_text()))
    cfg = next(t.config for t in plan(spec) if model in (None, t.config.model))
    return cfg.model_copy(update={"dataset": cfg.dataset.model_copy(update=dataset)})


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class Rate:
    """Images/s of what runs between `start()` and `stop(images)`, by the wall clock and per
    CPU-second of this process (user+sys of its threads, not of loader worker processes: the
    figure to read on a loaded CPU)."""

    def start(self, device: torch.device) -> None:
        sync(device)
        self.device, self.wall, self.cpu = device, time.perf_counter(), time.process_time()

    def stop(self, images: int) -> Rate:
        sync(self.device)
        self.per_s = images / (time.perf_counter() - self.wall)
        self.per_cpu_s = images / max(1e-9, time.process_time() - self.cpu)
        return self


def ratio(a: float, b: float) -> float:
    return float(f"{a / b:.4g}")


class Negligible(nn.Module):
    """A model of negligible cost: the image's channel means through one linear layer."""

    def __init__(self, in_chans: int, num_classes: int):
        super().__init__()
        self.head = nn.Linear(in_chans, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(x.float().mean((2, 3)))


@contextmanager
def negligible_model():
    """build_parts (train/parts.py) builds the negligible model instead of the trial's."""
    real = parts_mod.build_model

    def build(cfg, batches, compute):
        return Negligible(batches.in_chans, batches.num_classes).to(compute.device)

    parts_mod.build_model = build
    try:
        yield
    finally:
        parts_mod.build_model = real


def stepper_for(cfg: TrainConfig, device: str, workers: int | None, cache: Path):
    _, compute, execution = start_program(
        cfg.recipe, device, DistContext(), workers, cache, Execution(), 1
    )
    stepper = SoloStepper(cfg, compute, execution.pipeline, cache / "checkpoint.pt")
    return stepper, compute, execution.pipeline


def trial_steps(stepper, compute, warmup: int, steps: int) -> tuple[Rate, dict]:
    """The rate of `steps` training steps (run_epoch, across epoch ends) after `warmup`, and
    their step parts summed."""
    [state] = stepper.begin(False)
    totals = dict.fromkeys(STEP_PARTS, 0.0)

    def run(n: int) -> TrialState:
        nonlocal state
        while n > 0:
            left = len(stepper.parts.batches) - state.batch
            ran = run_epoch(stepper, [state], compute, StopRequest(), steps=min(n, left))
            for part in STEP_PARTS:
                totals[part] += ran.parts[part]
            n -= min(n, left)
            if ran.complete:
                state = TrialState(epoch=state.epoch + 1)
        return state

    run(warmup)
    totals.update(dict.fromkeys(STEP_PARTS, 0.0))
    rate = Rate()
    rate.start(compute.device)
    run(steps)
    return rate.stop(steps * stepper.cfgs[0].batch_size), totals


def input_alone(stepper, compute, warmup: int, steps: int) -> Rate:
    """The rate of the input plan alone: the batches, copied to the device and augmented."""
    batches, augment, done, rate = stepper.parts.batches, stepper.parts.augment, 0, Rate()
    epoch = 0
    while done < warmup + steps:
        for x, y in batches.train(epoch, 0):
            if done == warmup:
                rate.start(compute.device)
            x, y = x.to(compute.device, non_blocking=True), y.to(compute.device, non_blocking=True)
            augment(x, y)
            done += 1
            if done == warmup + steps:
                break
        epoch += 1
    return rate.stop(steps * stepper.cfgs[0].batch_size)


def model_alone(stepper, compute, warmup: int, steps: int, profile) -> tuple[Rate, dict | None]:
    """The rate of the model's steps on one fixed augmented batch already on the device:
    forward, backward and the trial's optimizer (no input, no EMA), and `profile` (a function
    of the steps' runner) of further steps."""
    stepper.begin(False)
    stepper.train()
    x, y = next(iter(stepper.parts.batches.train(0, 0)))
    x, y = stepper.parts.augment(x.to(compute.device), y.to(compute.device))
    x = compute.layout(x)
    lrs = [s.lr(0) for s in stepper.schedules]

    def step() -> None:
        with compute.autocast():
            losses = stepper.losses(x, y)
        stepper.optimizer.zero_grad(set_to_none=True)
        losses.sum().backward()
        stepper.update(lrs)

    for _ in range(warmup):
        step()
    rate = Rate()
    rate.start(compute.device)
    for _ in range(steps):
        step()
    rate.stop(steps * stepper.cfgs[0].batch_size)
    return rate, profile(lambda n: [step() for _ in range(n)])


def host_syncs(stepper, compute, steps: int) -> tuple[float, dict[str, int]] | None:
    """On CUDA: the host syncs torch's sync debug mode reports over `steps` more trial steps,
    per step (their epochs' own among them: the loss sums read, the next order sent), and where
    they are (sync_sites). None on the CPU."""
    if compute.device.type != "cuda":
        return None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            trial_steps(stepper, compute, 0, steps)
        finally:
            torch.cuda.set_sync_debug_mode("default")
    sites = sync_sites(caught)
    return round(sum(sites.values()) / steps, 3), dict(list(sites.items())[:8])


def sync_sites(caught: list[warnings.WarningMessage]) -> dict[str, int]:
    """The lines that synchronised ("file:line" -> count, most first) among caught warnings:
    torch's sync warning names the Python line that made the sync. A count near the steps run
    is a sync in every step; one near the epochs run, an epoch's."""
    syncs = (w for w in caught if "synchroniz" in str(w.message))
    return dict(Counter(f"{Path(w.filename).name}:{w.lineno}" for w in syncs).most_common())


def evaluation_rates(
    stepper, compute, trial_img_s: float, chunks=(1, 4), repeats: int = 3
) -> dict | None:
    """An epoch's evaluation beside its training: the images/s of one pass of the raw weights
    over the validation split (train/evaluation.count_errors, which an epoch's end runs once per
    kind of weights) in chunks of k x the training batch (every pipeline evaluates at 1 x: the
    fastest on a CPU, bench/RESULTS.md; a launch-bound GPU may prefer fewer, larger chunks), best
    of `repeats` after one untimed pass; the share of an epoch's training time (at
    `trial_img_s`) that the epoch's evaluation passes take; whether every chunking counted the
    same errors. For batches held on the device only (DeviceBatches); None for the loaders."""
    batches = stepper.parts.batches
    if not isinstance(batches, DeviceBatches):
        return None
    logits_of, augment = stepper.logits_of("raw"), stepper.parts.augment
    passes = len(weight_kinds(stepper))
    images = len(batches.data.val_y)
    epoch_s = len(batches) * batches.batch_size / trial_img_s
    rates, shares, counts = {}, {}, []
    for k in chunks:
        chunked = copy.copy(batches)
        chunked.local_batch = k * batches.local_batch
        counts.append(count_errors(logits_of, chunked, augment, compute).tolist())  # untimed
        best = 0.0
        for _ in range(repeats):
            rate = Rate()
            rate.start(compute.device)
            count_errors(logits_of, chunked, augment, compute)
            best = max(best, rate.stop(images).per_s)
        rates[str(k)] = round(best, 1)
        shares[str(k)] = round(passes * images / best / epoch_s, 4)
    return {
        "images": images,
        "passes_per_epoch": passes,
        "img_s": rates,
        "share_of_epoch": shares,
        "counts_equal": all(c == counts[0] for c in counts),
    }


def measure(name: str, cfg: TrainConfig, args, cache: Path, peak_tflops: float) -> dict:
    warmup, steps = args.warmup, args.steps
    if args.compile and args.device == "cuda":
        cfg = cfg.model_copy(update={"recipe": cfg.recipe.model_copy(update={"compile": True})})
    with negligible_model():
        harness, harness_compute, _ = stepper_for(cfg, args.device, args.workers, cache)
        harness_rate, _ = trial_steps(harness, harness_compute, warmup, steps)
    del harness
    stepper, compute, pipeline = stepper_for(cfg, args.device, args.workers, cache)
    size, chans = stepper.parts.batches.img_size, stepper.parts.batches.in_chans
    flops = count_complexity(stepper.parts.model, (1, chans, size, size))["flops"]

    def profiled(run_steps, part: str) -> dict | None:
        """step_profile's figures of `args.profile` steps of `part` ("trial", "model")."""
        if not args.profile:
            return None
        trace = (
            args.trace / f"profile_{part}_{name.replace('/', '_')}.json.gz" if args.trace else None
        )
        train_flops = 6 * flops * args.profile * cfg.batch_size  # as mfu_* count them
        return profile_steps(run_steps, compute.device, args.profile, train_flops=train_flops,
                             peak_tflops=peak_tflops, trace=trace)  # fmt: skip

    model_rate, model_profile = model_alone(
        stepper, compute, warmup, steps, lambda run: profiled(run, "model")
    )
    rates = {
        "input": input_alone(stepper, compute, warmup, steps),
        "harness": harness_rate,
        "model": model_rate,
    }
    stepper, compute, _ = stepper_for(cfg, args.device, args.workers, cache)  # fresh weights
    rates["trial"], split = trial_steps(stepper, compute, warmup, steps)
    total = sum(split.values()) or 1.0
    wall = {k: r.per_s for k, r in rates.items()}
    line = {
        "bench": "step_parts",
        "config": name,
        "model": cfg.model,
        "img_size": size,
        "batch": cfg.batch_size,
        "pipeline": pipeline,
        "compile": compute.compile,
        "amp": compute.amp,
        "steps": steps,
        **{f"{k}_img_s": round(v, 1) for k, v in wall.items()},
        **{f"{k}_img_cpu_s": round(r.per_cpu_s, 1) for k, r in rates.items()},
        "input_over_model": ratio(wall["input"], wall["model"]),
        "harness_over_model": ratio(wall["harness"], wall["model"]),
        "trial_over_model": ratio(wall["trial"], wall["model"]),
        "trial_over_input": ratio(wall["trial"], wall["input"]),
        "step_shares": {p: round(s / total, 4) for p, s in split.items()},
        "fwd_gflops": round(flops / 1e9, 4),
        # MFU: 2 FLOPs per multiply-add, x 3 for forward and backward, over the matmul peak
        "mfu_model": round(6 * flops * wall["model"] / (peak_tflops * 1e12), 4),
        "mfu_trial": round(6 * flops * wall["trial"] / (peak_tflops * 1e12), 4),
    }
    line["evaluation"] = evaluation_rates(stepper, compute, wall["trial"])
    syncs = host_syncs(stepper, compute, steps)
    line["syncs_per_step"], line["sync_sites"] = syncs if syncs else (None, None)
    if args.profile:
        line["profile"] = profiled(lambda n: trial_steps(stepper, compute, 0, n), "trial")
        line["profile_model"] = model_profile
        for part, key in (("trial", "profile"), ("model", "profile_model")):
            ms_per_step = 1e3 * cfg.batch_size / wall[part]  # the rate's, without the profiler
            line[key]["busy_share_unprofiled"] = unprofiled_busy(line[key], ms_per_step)
    return line


def unprofiled_busy(profile: dict, ms_per_step: float) -> float:
    """The device's busy time in a profiled step over a step's time without the profiler: its
    host-side cost stretches a launch-bound step, not the kernels, and so lowers busy_share."""
    busy_ms = profile["busy_share"] * profile["ms_per_step"]
    return round(min(1.0, busy_ms / ms_per_step), 4)


def configurations(args, data: Path) -> list[tuple[str, TrainConfig]]:
    wanted, out = args.configs.split(","), []
    tiny = {"batch_size": args.batch or 8} if args.tiny else {}
    per_gpu = {"batch_size": args.batch or (8 if args.tiny else 256)}
    if "quickstart" in wanted:
        for model in ("vit_p_w64_16px", "vit_c_w64_16px", "dhvt_w64_16px"):
            cfg = study_config("quickstart", model).model_copy(update=tiny)
            out.append((f"quickstart/{model}", cfg))
    if "cifar" in wanted:
        write_cifar100(data / "cifar", args.cifar_images, 256)
        cfg = study_config("dhvt_deit_cifar100", root=data / "cifar")
        out.append(("cifar/dhvt_tiny_cifar_p4", cfg.model_copy(update=per_gpu)))
    if "224" in wanted:
        write_jpegs(data / "folder", args.jpegs, jobs=args.workers or usable_cores())
        size = 64 if args.tiny else None
        cfg = study_config(
            "edf_adamw_4gf", "vit_p_4gf", name="imagefolder", root=data / "folder", img_size=size
        )
        out.append(("224/vit_p_4gf", cfg.model_copy(update=per_gpu)))
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--configs", default="quickstart,cifar,224")
    p.add_argument("--warmup", type=int, default=None, help="untimed steps (default 10; tiny 2)")
    p.add_argument("--steps", type=int, default=None, help="timed steps (default 30; tiny 3)")
    p.add_argument("--batch", type=int, default=None, help="the CIFAR and 224-px batch")
    p.add_argument("--compile", action="store_true", help="torch.compile on CUDA")
    p.add_argument("--workers", type=int, default=None, help="input workers (default: cores-1)")
    p.add_argument("--tiny", action="store_true", help="small sizes, few steps (the CPU)")
    p.add_argument("--threads", type=int, default=None, help="torch's CPU threads")
    p.add_argument(
        "--profile", type=int, default=0, help="steps to profile, trial and model (step_profile.py)"
    )
    p.add_argument(
        "--trace", type=Path, default=None, help="folder for the profiles' Chrome traces"
    )
    args = p.parse_args()
    if args.trace:
        args.trace.mkdir(parents=True, exist_ok=True)
    if args.threads:  # on a shared CPU more threads than free cores spin against each other
        torch.set_num_threads(args.threads)
    args.warmup = args.warmup if args.warmup is not None else (2 if args.tiny else 10)
    args.steps = args.steps if args.steps is not None else (3 if args.tiny else 30)
    batch = args.batch or (8 if args.tiny else 256)
    args.cifar_images = (args.warmup + args.steps + 2) * batch * (1 if args.tiny else 4)
    args.jpegs = (args.warmup + args.steps + 2) * batch
    if args.device == "cuda" and not torch.cuda.is_available():
        print(json.dumps({"bench": "step_parts", "skipped": "no CUDA GPU on this machine"}))
        return
    device = torch.device(args.device)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        name = torch.cuda.get_device_name(device)
        peak = matmul_tflops(device, 8192, 50)
    else:
        name = f"{cpu_name()}, {torch.get_num_threads()} thread(s)"
        peak = matmul_tflops(device, 1024, 5)
    summary = {"bench": "step_parts", "summary": True, "device": name, "torch": torch.__version__,
               "machine": platform.node(), "matmul_tflops": round(peak, 2)}  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        for config, cfg in configurations(args, Path(tmp)):
            line = measure(config, cfg, args, Path(tmp), peak)
            line["device"] = name
            print(json.dumps(line), flush=True)
            summary[config] = {k: line[k] for k in line if k.endswith(("_over_model", "_input"))}
            summary[config]["mfu_trial"] = line["mfu_trial"]
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
