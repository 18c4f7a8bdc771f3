"""Benchmark: training throughput of a population of K members (train/population.py) against K
solo trials run one after another on the same device, and memory per member. Not a test.

Each measurement runs in its own fresh process (so its peak memory is its own): `steps` training
steps (after `warmup` untimed ones) of
- solo: K models, one after another, each its own forward, backward and torch.optim step
  (optim.build_optimizer, as a solo trial steps);
- population: one batched forward and backward of K members (population.member_losses) and
  the batched optimizer step (population_optim.py).
On the CPU it also gives img per CPU-second (user+sys of the process), the figure to read on
a loaded machine. The input is a random batch of the dataset's shape (no data loading or augmentation, which a
population shares anyway). Aggregate img/s = K x batch x steps / seconds. Memory: peak RSS on
the CPU, torch.cuda.max_memory_allocated on CUDA, of the whole process, divided by K.

    PYTHONPATH=. python bench/population.py [--device cpu] [--threads 2] [--sizes 1,4,16]
    # the GPU runs (one H200: see docs/population.md):
    PYTHONPATH=. python bench/population.py --device cuda --model vit_c_w64_16px --steps 50
    PYTHONPATH=. python bench/population.py --device cuda --model dhvt_tiny_cifar_p4 \\
        --img-size 32 --chans 3 --classes 100 --batch 256 --steps 50

The last line is JSON: one entry per K with solo and population img/s, the speedup and memory;
with `--profile N`, each mode's operations per step (all K members: kernels on CUDA) and the
device's busy share over N more steps (bench/step_profile.py): a population whose operations
grow with K (vmap running fused attention member by member) stays launch-bound on a GPU.
`--manual-attention` measures timm's attention as plain matmuls in both modes (vmap has no
batching rule for fused scaled-dot-product attention and runs it member by member; the
population trainer keeps the model's own attention, so its numbers match the solo trial's).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

from optbench.host import cpu_name

OPTIMIZER = "adamw"


def _config(args, lr: float, wd: float):
    from optbench.spec.recipe import Dataset, Recipe
    from optbench.trial.config import TrainConfig

    return TrainConfig(
        model=args.model,
        dataset=Dataset(name="digits", img_size=16),  # not read: the batch is synthetic
        optimizer=OPTIMIZER,
        lr=lr,
        wd=wd,
        epochs=10,
        batch_size=args.batch,
        ref_batch=2048,  # the lr as measured before basic stopped scaling (bench/RESULTS.md)
        recipe=Recipe(warmup_epochs=0),
    )


def child(args) -> dict:
    """One measurement in this process: mode args.child ("solo"/"population"), K members."""
    import torch
    from torch import nn

    from optbench.models import create_model
    from optbench.train.optim import build_optimizer, is_decayed, weight_decay_groups
    from optbench.train.population import StackedWeights, member_losses
    from optbench.train.population_optim import PopulationOptimizer

    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    k = args.k
    cfgs = [_config(args, 1e-3 * (1 + i), 0.05) for i in range(k)]

    def model():
        torch.manual_seed(0)
        shape = dict(num_classes=args.classes, in_chans=args.chans, img_size=args.img_size)
        m = create_model(args.model, **shape).to(device)
        for module in m.modules():  # timm's attention: fused SDPA, or q k^T softmax v in matmuls
            if hasattr(module, "fused_attn") and args.manual_attention:
                module.fused_attn = False
        return m

    x = torch.randn(args.batch, args.chans, args.img_size, args.img_size, device=device)
    y = torch.randint(0, args.classes, (args.batch,), device=device)
    criterion = nn.CrossEntropyLoss(label_smoothing=0.1)
    amp = torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda")
    if args.child == "solo":
        runs = [(m := model(), build_optimizer(m, c, fused=device.type == "cuda")) for c in cfgs]

        def step() -> None:
            for m, opt in runs:  # one trial after another
                with amp:
                    loss = criterion(m(x), y)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
    else:
        base = model()
        groups = weight_decay_groups(base, 0.05, ())
        params = dict(base.named_parameters())
        names = [g["names"] for g in groups]
        decays = [is_decayed(n[0], params[n[0]], ()) for n in names]
        weights = StackedWeights(base, names, k)
        lrs, active = [c.lr_used for c in cfgs], [True] * k
        opt = PopulationOptimizer(
            weights.flats, decays, [c.wd for c in cfgs], lrs, OPTIMIZER, cfgs[0].recipe
        )

        def step() -> None:
            with amp:
                losses = member_losses(base, criterion, weights.tensors(), x, y)
            opt.zero_grad()
            losses.sum().backward()
            opt.step(lrs, active)

    import warnings

    warnings.filterwarnings("ignore", message="There is a performance drop")
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    for _ in range(args.warmup):
        step()
    sync()
    start, cpu_start = time.perf_counter(), time.process_time()
    for _ in range(args.steps):
        step()
    sync()
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
    if device.type == "cuda":
        peak = torch.cuda.max_memory_allocated(device) / 2**20
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    images = k * args.batch * args.steps
    out = {
        "images_per_s": round(images / seconds, 1),
        "images_per_cpu_s": round(images / cpu_seconds, 1),  # user+sys: robust to a loaded CPU
        "peak_mb": round(peak, 1),
    }
    if args.profile:  # the operations one step of the K members issues (step_profile.py)
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from step_profile import profile_steps

        figures = profile_steps(lambda n: [step() for _ in range(n)], device, args.profile)
        out["ops_per_step"], out["busy_share"] = figures["ops_per_step"], figures["busy_share"]
    return out


def run_child(mode: str, k: int) -> dict | None:
    """One measurement (`mode`, `k`) in a fresh process: its JSON line, or None when it failed
    (the end of its stderr printed to ours)."""
    cmd = [sys.executable, __file__, *sys.argv[1:], "--child", mode, "--k", str(k)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode == 0:
        return json.loads(done.stdout.strip().splitlines()[-1])
    print(
        f"population: {mode} K={k} failed ({done.returncode}):",
        done.stderr[-3000:],
        file=sys.stderr,
    )
    return None


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="vit_c_w64_16px")
    p.add_argument("--img-size", type=int, default=16)
    p.add_argument("--chans", type=int, default=1)
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--sizes", default="1,4,16")
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument(
        "--manual-attention",
        action="store_true",
        help="timm attention as matmuls (vmap batches them) instead of fused SDPA (run member by member)",
    )
    p.add_argument("--profile", type=int, default=0, help="steps profiled (step_profile.py)")
    p.add_argument("--child", choices=["solo", "population"], help=argparse.SUPPRESS)
    p.add_argument("--k", type=int, default=1, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        print(json.dumps(child(args)))
        return
    load_before = os.getloadavg()
    t0, wall0 = os.times(), time.perf_counter()
    rows = []
    for k in [int(s) for s in args.sizes.split(",")]:
        row = {"k": k}
        for mode in ("solo", "population"):
            got = run_child(mode, k)
            if got is None:  # e.g. out of memory at K = 16: the other Ks' rows are kept
                row["failed"] = mode
                break
            row[f"{mode}_images_per_s"] = got["images_per_s"]
            row[f"{mode}_images_per_cpu_s"] = got["images_per_cpu_s"]
            row[f"{mode}_peak_mb"] = got["peak_mb"]
            if args.profile:
                row[f"{mode}_ops_per_step"] = got["ops_per_step"]
                row[f"{mode}_busy_share"] = got["busy_share"]
        rows.append(row)
        if "failed" in row:
            continue
        row["speedup"] = round(row["population_images_per_s"] / row["solo_images_per_s"], 3)
        cpu = row["population_images_per_cpu_s"] / row["solo_images_per_cpu_s"]
        row["speedup_per_cpu_s"] = round(cpu, 3)
        row["population_mb_per_member"] = round(row["population_peak_mb"] / k, 1)
    t1 = os.times()
    print(
        json.dumps(
            {
                "bench": "population",
                "device": args.device,
                "cpu": cpu_name(),
                "threads": args.threads,
                "model": args.model,
                "input": [args.batch, args.chans, args.img_size, args.img_size],
                "optimizer": OPTIMIZER,
                "attention": "manual" if args.manual_attention else "fused sdpa",
                "steps": args.steps,
                "memory": "cuda max_memory_allocated" if args.device == "cuda" else "peak RSS",
                "load_before": [round(v, 2) for v in load_before],
                "load_after": [round(v, 2) for v in os.getloadavg()],
                "wall_s": round(time.perf_counter() - wall0, 1),
                "children_user_sys_s": round(
                    t1.children_user + t1.children_system - t0.children_user - t0.children_system, 1
                ),
                "results": rows,
            }
        )
    )


if __name__ == "__main__":
    main()
