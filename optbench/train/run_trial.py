"""One trial, start to finish (`run_trial`): build what it trains with (stepper.SoloStepper),
restore its position when resuming (state.py), then epoch by epoch train, measure and
checkpoint through the training loop (loop.py, as a population's members); write metrics.jsonl,
checkpoint.pt and result.json. A crash becomes a "failed" result, a diverging run a "diverged"
one, and a stop signal a checkpoint (signals.py). `optbench train` and a study's workers both
call `run_trial`. Each epoch's metrics line also goes to the trial's epoch sinks (trackers/sinks.py:
a TensorBoard event file in OUT where tensorboard is installed, trackers/tensorboard.py).

Reproducibility: all randomness derives from the trial's seed and a position (data/seeding.py), so a
trial is a pure function of its config on the CPU: the same config on the same machine, library
versions and thread count gives the same `digest` (result.json records all three, and which code
made it: optbench.provenance), and resuming
from any step replays the rest exactly.

Result files and resume: at each epoch end OUT/checkpoint.pt is replaced atomically (state.py,
checkpoint.py). Resume is detected from the files: OUT/result.json present = the trial is done;
otherwise OUT/checkpoint.pt present = it can be resumed. `run_trial(..., resume=True)` (CLI:
`optbench train ... --resume`) continues from the checkpoint if there is one (and starts fresh
if not); with result.json present it returns that result untouched (if it is this config's:
another config's result or checkpoint is refused, naming the difference, and kept). Without
`resume`, a trial starts from scratch. The checkpoint is deleted once result.json is written
(`keep_checkpoint=True` keeps it). No result.json is written for a stopped trial.

Speed. Data lives on the device for small datasets (data/batches.py); augmentation is batched
(data/augment.py). The loss is read once per epoch, so divergence (a non-finite mean loss, or one
above `recipe.diverge_loss`) costs no sync per step; a diverged trial is a result ("diverged",
with its epoch), not a crash. On CUDA: bf16 autocast, channels_last, fused optimizers, timm's
scaled-dot-product attention and `torch.compile` as the recipe asks; on the CPU all of these are
off (compute.py), so CPU results stay exact and comparable.

DDP: when torchrun's or SLURM's environment names a world of several processes (see
distributed.py), one trial spans them: BatchNorm becomes SyncBatchNorm on CUDA (torch has no
CPU SyncBatchNorm; with gloo on the CPU each process normalizes its own share), each process
takes batch / world images of every global batch, and only rank 0 writes files.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from optbench import safefs
from optbench.train.checkpoint import CHECKPOINT_FILE
from optbench.train.compute import Compute
from optbench.train.distributed import (
    DistContext,
    context_from_env,
    destroy_process_group,
    init_process_group,
    master_port,
)
from optbench.train.loop import (
    CheckpointCadence,
    Members,
    run_guarded,
    start_program,
    train_members,
)
from optbench.train.population import run_population
from optbench.train.signals import StopRequest
from optbench.train.state import check_resumable
from optbench.train.stepper import SoloStepper
from optbench.trial.config import Execution, TrainConfig, TrialResult
from optbench.trial.jobs import Job, PopulationJob
from optbench.trial.results import finished_result
from optbench.user_code import import_modules


def _train(
    cfg: TrainConfig,
    out_dir: Path,
    root: Path,
    compute: Compute,
    stop: StopRequest,
    resume: bool,
    members: Members,
    execution: Execution,
    cadence: CheckpointCadence,
) -> TrialResult:
    """Train from the start (or the checkpoint's position) to the last epoch or a divergence
    and record the result in `members` (the trial in `out_dir` alone); an agreed stop
    checkpoints and raises TrialInterrupted."""
    with members.clock.part("model"):  # the data's share goes to its own part (parts.py)
        stepper = SoloStepper(
            cfg, compute, execution.pipeline, out_dir / CHECKPOINT_FILE, root, members.clock
        )
    train_members(stepper, members, compute, stop, resume, cadence)
    return members.results[0]


def check_environment() -> None:
    """Before anything is written: the variables a trial reads to join a process group
    (torchrun's RANK, WORLD_SIZE, LOCAL_RANK, MASTER_PORT; SLURM's task ids, distributed.py),
    a bad one a UsageError naming it."""
    if context_from_env().enabled:
        master_port()


def check_resume(cfg: TrainConfig, out_dir: Path) -> None:
    """Before anything is written: what `run_trial(cfg, out_dir, resume=True)` would continue
    from is this config's. A result.json or checkpoint.pt of another configuration, one that
    cannot be read or one whose tensors do not fit the model or optimizer is a UsageError
    naming the file (and the difference). Reads only; deletes nothing."""
    if finished_result(cfg, out_dir) is None:
        check_resumable(out_dir / CHECKPOINT_FILE, cfg)


def run_trial(
    cfg: TrainConfig,
    out_dir: Path,
    device: str = "cpu",
    *,
    resume: bool = False,
    handle_signals: bool = True,
    keep_checkpoint: bool = False,
    workers: int | None = None,
    distributed: bool = True,
    on_epoch: Callable[[dict], None] | None = None,
    execution: Execution = Execution(),
    root: Path | None = None,
    attempt: int | None = None,
) -> TrialResult:
    """Train `cfg` into `out_dir` and write result.json there. Never raises for a failed trial:
    the failure (with its traceback in error.log) is the result; a refused checkpoint is kept.
    It raises only where no result can be written for it: an OSError of DISK_FAULTS (disk
    full, I/O error; loop.py), or, with `resume`, a result.json in `out_dir` that is invalid
    or another config's (results.finished_result). On SIGTERM / SIGUSR2 it checkpoints, then
    passes the signal on (see signals.py). `workers` sets the input pipeline's workers (results
    do not depend on it); `execution` how to run it (resolved for the device, recorded in
    result.json). `distributed=False` ignores torchrun's / SLURM's environment and trains in
    this process alone (see distributed.py). `on_epoch(line)` is called with each epoch's
    metrics line (trackers/sinks.py). No link below `root` (default `out_dir`; a study's workers
    pass the study folder) is followed (safefs.UnsafePath). The config's `imports` are imported
    first (a UsageError naming one that cannot be). `attempt`: the study's attempt it runs
    (executors.base.TrialJob), recorded in result.json."""
    import_modules(cfg.imports)  # the study's own models and optimizers, in every process
    out_dir = Path(out_dir)
    root = Path(root or out_dir)
    safefs.make_dirs(out_dir, root)
    if resume and (done := finished_result(cfg, out_dir, root)) is not None:
        return done  # ResumeMismatch or InvalidResultFile if it is not this config's result
    ctx = context_from_env() if distributed else DistContext()
    start, compute, execution = start_program(
        cfg.recipe, device, ctx, workers, root, execution, population=1
    )
    members = Members(
        [cfg],
        [out_dir],
        root,
        compute.device,
        execution,
        is_main=ctx.is_main,
        on_epoch=on_epoch,
        start=start,
        attempts=[attempt],
    )
    stop = StopRequest()

    def train() -> None:
        with members.clock.part("setup"):
            init_process_group(ctx, compute.device.type)
        cadence = CheckpointCadence(every_epoch=keep_checkpoint)
        _train(cfg, out_dir, root, compute, stop, resume, members, execution, cadence)

    try:
        [result] = run_guarded(
            members,
            train,
            stop,
            handle_signals=handle_signals,
            checkpoint=out_dir / CHECKPOINT_FILE,
            keep_checkpoint=keep_checkpoint,
        )
    finally:
        destroy_process_group(ctx)
    return result


def run_job(job: Job, device: str, *, distributed: bool = False) -> list[TrialResult]:
    """Train `job` in this process (resuming from its checkpoint if an earlier run stopped);
    each trial's result.json records its attempt. `distributed`: a solo trial joins the DDP
    group that torchrun's or SLURM's environment describes (a population never does)."""
    if isinstance(job, PopulationJob):
        members = job.members
        return run_population(
            [m.config for m in members],
            [m.out_dir for m in members],
            device,
            execution=members[0].execution,  # one study's: the same for every member
            root=job.root,
            attempts=[m.attempt for m in members],
        )
    result = run_trial(
        job.config, job.out_dir, device, resume=True, distributed=distributed,
        execution=job.execution, root=job.root, attempt=job.attempt,
    )  # fmt: skip
    return [result]
