"""The input pipelines (data/batches.py, data/tensor_folder.py): the tensor pipeline draws, decodes
and resizes what the PIL pipeline does (measured tolerances), both replay a position exactly
(workers, resume), a broken file fails its trial naming it, the pipeline is an execution setting
(recorded, never part of a cell id), and input wait is measured."""

from __future__ import annotations

import io
import json
import math
import os
import signal
import struct
import time
import zlib
from pathlib import Path

import numpy as np
import pytest
import torch
from cli_inprocess import tiny_config
from host_reads import BlockingUploads
from PIL import Image
from torchvision.transforms import v2

import optbench.train.epoch as epoch_mod
from optbench.data.batches import FolderBatches, PreparedBatches, epoch_order, loader_workers
from optbench.data.datasets import UnreadableImage, load_dataset, load_digits
from optbench.data.input_plan import resolve_execution
from optbench.data.tensor_folder import TensorFolderBatches, crop_params, decode
from optbench.host import cgroup_cpu_limit
from optbench.spec.recipe import Dataset, Recipe
from optbench.spec.schema import parse_spec
from optbench.train.checkpoint import CHECKPOINT_FILE
from optbench.train.run_trial import run_trial
from optbench.train.signals import TrialInterrupted
from optbench.trial.config import Execution, TrainConfig
from optbench.trial.results import read_metrics

CPU = torch.device("cpu")


def natural_image(rng: np.random.Generator, h: int, w: int) -> np.ndarray:
    """Smooth colour waves plus sensor-like noise: JPEG-compressible like a photograph."""
    yy, xx = np.mgrid[0:h, 0:w]
    phase = rng.uniform(0, 6, 3)
    waves = [
        128 + 100 * np.sin(xx / rng.uniform(8, 40) + p) * np.cos(yy / rng.uniform(8, 40) - p)
        for p in phase
    ]
    img = np.stack(waves, -1) + rng.normal(0, 10, (h, w, 3))
    return np.clip(img, 0, 255).astype(np.uint8)


def make_jpeg_folders(root: Path, classes=("a", "b"), per_class=6, size=(40, 52), quality=90):
    rng = np.random.default_rng(0)
    for split in ("train", "val"):
        for c in classes:
            (root / split / c).mkdir(parents=True)
            for i in range(per_class):
                h, w = size if i % 2 else size[::-1]  # portrait and landscape
                Image.fromarray(natural_image(rng, h, w)).save(
                    root / split / c / f"{i}.jpg", quality=quality
                )
    return root


def jpeg_bytes(img: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(img).save(buf, "JPEG", quality=90)
    return buf.getvalue()


# --- the tensor pipeline computes what the PIL one does ------------------------------------


def test_crop_params_draw_what_torchvisions_random_resized_crop_draws():
    # the same algorithm from the same generator state: torchvision draws from the global one
    crop = v2.RandomResizedCrop(16)
    for seed in range(200):
        h, w = [(375, 500), (500, 375), (20, 400), (400, 20), (7, 7)][seed % 5]
        torch.manual_seed(seed)
        expected = crop.make_params([torch.empty(3, h, w)])
        ours = crop_params(h, w, torch.Generator().manual_seed(seed))
        assert ours == (expected["top"], expected["left"], expected["height"], expected["width"])


def test_cpu_jpeg_decode_gives_pils_pixels_and_pngs_decode_too():
    rng = np.random.default_rng(1)
    images = [natural_image(rng, 375, 500), natural_image(rng, 120, 90)]
    encoded = [torch.frombuffer(bytearray(jpeg_bytes(im)), dtype=torch.uint8) for im in images]
    png = io.BytesIO()
    Image.fromarray(images[1]).save(png, "PNG")
    encoded.append(torch.frombuffer(bytearray(png.getvalue()), dtype=torch.uint8))
    pixels = torch.from_numpy(images[0]).permute(2, 0, 1)  # as _read gives an image PIL decoded
    with BlockingUploads() as uploads:  # decoded on the host: sent as on CUDA, without blocking
        decoded = decode([*encoded, pixels], ["a.jpg", "b.jpg", "c.png", "d.png"], CPU)
    assert uploads.count == 0, uploads.where
    for data, ours in zip(encoded, decoded, strict=False):
        pil = np.asarray(Image.open(io.BytesIO(data.numpy().tobytes())).convert("RGB"))
        assert np.array_equal(ours.permute(1, 2, 0).numpy(), pil)  # measured: identical
    assert torch.equal(decoded[-1], pixels)


def test_tensor_batches_follow_epoch_order_and_replay_any_position(tmp_path):
    make_jpeg_folders(tmp_path)
    data = load_dataset(Dataset(name="imagefolder", root=tmp_path, img_size=16))
    recipe = Recipe(repeated_aug=3)
    one = TensorFolderBatches(data, 4, recipe, seed=5, device=CPU, readers=1)
    many = TensorFolderBatches(data, 4, recipe, seed=5, device=CPU, readers=4)
    a, b = list(one.train(epoch=2)), list(many.train(epoch=2))
    assert len(a) == 3 and a[0][0].shape == (4, 3, 16, 16) and a[0][0].dtype == torch.uint8
    order = epoch_order(12, 5, 2, 3)[:12]
    labels = torch.tensor([one.train_samples[i][1] for i in order.tolist()])
    assert torch.equal(torch.cat([y for _, y in a]), labels)
    for (xa, ya), (xb, yb) in zip(a, b, strict=True):
        assert torch.equal(xa, xb) and torch.equal(ya, yb)
    resumed = list(one.train(epoch=2, start=2))
    assert torch.equal(resumed[0][0], a[2][0])
    assert not torch.equal(a[0][0], list(one.train(epoch=2, stream="precise-bn"))[0][0])
    assert sum(len(y) for _, y in one.val()) == 12


def test_jpegs_decoded_by_the_reader_threads_give_the_batches_of_one_decode_call(tmp_path):
    # on the CPU the readers decode (in parallel); one decode_jpeg call over the batch, as on a
    # GPU, is the same libjpeg-turbo on one thread: the same pixels, batch for batch
    make_jpeg_folders(tmp_path, per_class=8, size=(37, 53))
    data = load_dataset(Dataset(name="imagefolder", root=tmp_path, img_size=16))
    recipe = Recipe(preset="paper")
    readers = TensorFolderBatches(data, 4, recipe, seed=3, device=CPU, readers=2)
    one_call = TensorFolderBatches(
        data, 4, recipe, seed=3, device=CPU, readers=2, host_decode=False
    )
    assert readers.host_decode and not one_call.host_decode
    for (xa, ya), (xb, yb) in zip(readers.train(epoch=1), one_call.train(epoch=1), strict=True):
        assert torch.equal(xa, xb) and torch.equal(ya, yb)
    for (xa, _), (xb, _) in zip(readers.val(), one_call.val(), strict=True):
        assert torch.equal(xa, xb)


@pytest.mark.slow
def test_prepared_batches_are_the_same_for_any_number_of_workers():
    data = load_digits(Dataset(name="digits", img_size=16))
    recipe = Recipe(preset="paper")
    inline = PreparedBatches(data, 64, recipe, seed=1, device=CPU, workers=0)
    pooled = PreparedBatches(data, 64, recipe, seed=1, device=CPU, workers=2)
    a, b = list(inline.train(epoch=1)), list(pooled.train(epoch=1, start=0))
    assert len(a) == len(inline) == 22
    for (xa, ya), (xb, yb) in zip(a, b, strict=True):
        assert torch.equal(xa, xb) and torch.equal(ya, yb)
    assert torch.equal(next(iter(pooled.train(epoch=1, start=5)))[0], a[5][0])
    second = list(pooled.train(epoch=2))  # the persistent workers serve the next epoch
    assert not torch.equal(second[0][0], a[0][0])
    # translate, flip and the policy were applied: the images are not the raw ones
    order = epoch_order(len(data.train_y), 1, 1, 1)
    assert not torch.equal(a[0][0], data.train_x[order[:64]])


# --- a broken file fails its trial with one line naming it ---------------------------------


def unreadable_line(root: Path, pipeline: str) -> str:
    """The UnreadableImage line that an epoch of the class folders at `root` raises."""
    data = load_dataset(Dataset(name="imagefolder", root=root, img_size=16))
    if pipeline == "pil":
        batches = FolderBatches(data, 4, Recipe(), seed=0, device=CPU, workers=1)
    else:
        batches = TensorFolderBatches(data, 4, Recipe(), seed=0, device=CPU)
    with pytest.raises(UnreadableImage) as err:
        list(batches.train(epoch=0))
    return str(err.value)


@pytest.mark.parametrize("pipeline", ["pil", "tensor"])
@pytest.mark.slow
def test_a_corrupt_jpeg_fails_the_trial_naming_the_file(tmp_path, pipeline):
    make_jpeg_folders(tmp_path / "data")
    bad = tmp_path / "data" / "train" / "b" / "3.jpg"
    bad.write_bytes(bad.read_bytes()[:200])  # truncated mid-scan
    line = unreadable_line(tmp_path / "data", pipeline)
    assert line.startswith(f"{bad}: not a readable image (") and "\n" not in line
    cfg = folder_config(tmp_path / "data", epochs=1)
    result = run_trial(cfg, tmp_path / "out", workers=1, execution=Execution(pipeline=pipeline))
    assert result.status == "failed" and str(bad) in result.message
    assert "\n" not in result.message


def bomb_png(width: int = 30_000, height: int = 30_000) -> bytes:
    """A PNG whose header claims width x height (PIL's decompression-bomb limit is 2 x
    89,478,485 pixels) over a few bytes of pixel data."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        crc = zlib.crc32(kind + data)
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)  # 8-bit RGB
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(b"\0" * 1000))
        + chunk(b"IEND", b"")
    )


@pytest.mark.parametrize("pipeline", ["pil", "tensor"])
def test_a_decompression_bomb_fails_the_trial_in_one_line_naming_the_file(tmp_path, pipeline):
    # PIL's DecompressionBombError is no OSError: the PIL pipeline's DataLoader worker raised it
    # as a 31-line traceback without the file's name; torchvision's decoder (the tensor
    # pipeline) has no limit, and libpng crashed the process on this header (issue 32)
    make_jpeg_folders(tmp_path / "data")
    (tmp_path / "data" / "train" / "b" / "3.jpg").unlink()
    bomb = tmp_path / "data" / "train" / "b" / "3.png"
    bomb.write_bytes(bomb_png())
    cfg = folder_config(tmp_path / "data", epochs=1)
    result = run_trial(cfg, tmp_path / "out", workers=1, execution=Execution(pipeline=pipeline))
    assert result.status == "failed" and "\n" not in result.message
    assert result.message.startswith(f"UnreadableImage: {bomb}: not a readable image (Image size")


def test_a_dataloader_workers_exception_is_one_line_in_the_result():
    from torch._utils import ExceptionWrapper

    from optbench.trial.results import failure_line

    try:
        raise KeyError("no such key")
    except KeyError:
        wrapped = ExceptionWrapper(where="in DataLoader worker process 0")
    with pytest.raises(KeyError) as raised:
        wrapped.reraise()  # as a DataLoader re-raises it: the worker's traceback in its message
    assert len(str(raised.value).splitlines()) > 3
    assert failure_line(raised.value) == "KeyError: 'no such key'"
    assert failure_line(ValueError("one\ntwo")) == "ValueError: one two"


# --- whole trials -----------------------------------------------------------------------------


def folder_config(root: Path, epochs: int = 2, seed: int = 0, **recipe) -> TrainConfig:
    return tiny_config(
        model="vit_c_w64_16px",
        dataset=Dataset(name="imagefolder", root=root, img_size=16),
        optimizer="sgd",
        lr=0.2,
        wd=1e-4,
        epochs=epochs,
        batch_size=4,
        seed=seed,
        recipe=Recipe(
            **{"preset": "paper", "auto_augment": "none", "warmup_epochs": 0.5, **recipe}
        ),
    )


def stop_mid_epoch(cfg: TrainConfig, out: Path, monkeypatch, **run) -> None:
    """Run `cfg` into `out` and stop it (SIGUSR2, as a scheduler's warning) at step 4: mid-epoch
    2 of a 3-step epoch, with its checkpoint written."""
    seed_step, calls = epoch_mod.seed_step, []

    def stop_at_step_4(seed, device):
        if len(calls) == 4:
            os.kill(os.getpid(), signal.SIGUSR2)
        calls.append(seed)
        seed_step(seed, device)

    monkeypatch.setattr(epoch_mod, "seed_step", stop_at_step_4)
    previous = signal.signal(signal.SIGUSR2, lambda *_: None)  # what run_trial passes it on to
    try:
        with pytest.raises(TrialInterrupted):
            run_trial(cfg, out, workers=1, **run)
    finally:
        signal.signal(signal.SIGUSR2, previous)
    assert (out / CHECKPOINT_FILE).is_file()
    monkeypatch.undo()


@pytest.mark.slow
def test_tensor_pipeline_trial_is_reproducible_and_resumes_mid_epoch_exactly(tmp_path, monkeypatch):
    make_jpeg_folders(tmp_path / "data")
    cfg, tensor = folder_config(tmp_path / "data"), Execution(pipeline="tensor")
    whole = run_trial(cfg, tmp_path / "whole", workers=2, execution=tensor)
    again = run_trial(cfg, tmp_path / "again", workers=1, execution=tensor)
    assert whole.status == "finished", whole.message
    assert whole.digest == again.digest and whole.execution == tensor
    stop_mid_epoch(cfg, tmp_path / "stopped", monkeypatch, execution=tensor)
    resumed = run_trial(cfg, tmp_path / "stopped", resume=True, workers=1, execution=tensor)
    assert resumed.digest == whole.digest
    lines = read_metrics(tmp_path / "whole")
    assert all(0 <= m["input_wait"] <= 1 for m in lines)
    assert 0 <= whole.input_wait <= 1 and whole.images_per_s > 0


@pytest.mark.slow
def test_the_pipeline_is_recorded_outside_the_config_and_not_part_of_a_cell_id(tmp_path):
    base = {
        "name": "s",
        "output": str(tmp_path),
        "models": ["vit_c_w64_16px"],
        "optimizers": ["sgd"],
        "epochs": [1],
        "batch_size": 64,
        "search": {"n_samples": 1, "ranges": {"sgd": {"lr": [0.1, 1.0], "wd": [1e-5, 1e-3]}}},
    }
    specs = {
        p: parse_spec({**base, "dataset": {"name": "digits", "img_size": 16, "pipeline": p}})
        for p in ("auto", "pil", "tensor")
    }
    from optbench.plan.trials import plan

    plans = {p: plan(s) for p, s in specs.items()}
    assert len({t[0].key for t in plans.values()}) == 1  # one cell, one trial key
    assert len({t[0].config for t in plans.values()}) == 1  # one config
    assert plans["tensor"][0].job.execution == Execution(pipeline="tensor")
    assert resolve_execution(Execution(), "cuda", Recipe()).pipeline == "tensor"
    assert resolve_execution(Execution(), "cpu", Recipe()).pipeline == "pil"
    result = run_trial(plans["tensor"][0].config, tmp_path / "t", execution=Execution())
    saved = json.loads((tmp_path / "t" / "result.json").read_text())
    assert (
        saved["execution"] == {"pipeline": "pil", "population": 1}
        and "pipeline" not in saved["config"]["dataset"]
    )
    assert result.status == "finished"


def test_loader_workers_come_from_the_trials_share_of_the_cores(tmp_path):
    quota = tmp_path / "cpu.max"
    quota.write_text("250000 100000\n")
    assert cgroup_cpu_limit(quota) == 3
    quota.write_text("max 100000\n")
    assert cgroup_cpu_limit(quota) is None
    assert cgroup_cpu_limit(tmp_path / "missing") is None
    cores = len(os.sched_getaffinity(0))
    assert loader_workers(threads=1) == 1  # always one
    assert loader_workers(threads=cores) == max(1, cores - 1)
    assert loader_workers(threads=10 * cores) == max(1, cores - 1)  # no more than it may use


def test_input_wait_is_the_host_time_spent_getting_batches():
    clock = epoch_mod.step_clock(CPU)

    def slow():
        for i in range(3):
            t = time.perf_counter()
            while time.perf_counter() - t < 0.02:
                pass
            yield i

    assert list(clock.batches(slow())) == [0, 1, 2]
    assert 0.055 < clock.waited_s() < 0.5 and math.isfinite(clock.waited_s())


def digits_config(seed: int = 0) -> TrainConfig:
    return tiny_config(
        model="vit_c_w64_16px",
        lr=4e-3,
        epochs=1,
        batch_size=256,
        seed=seed,
        recipe=Recipe(preset="deit", warmup_epochs=0),
    )


@pytest.mark.slow
def test_in_memory_data_runs_the_policy_per_sample_on_the_device_in_the_tensor_pipeline(tmp_path):
    tensor = Execution(pipeline="tensor")
    a = run_trial(digits_config(), tmp_path / "a", execution=tensor)
    b = run_trial(digits_config(), tmp_path / "b", execution=tensor)
    pil = run_trial(
        digits_config(), tmp_path / "pil", workers=1, execution=Execution(pipeline="pil")
    )
    assert a.status == b.status == pil.status == "finished", (a.message, pil.message)
    assert a.digest == b.digest and a.execution == tensor
    assert pil.digest != a.digest and pil.execution == Execution(pipeline="pil")


def separable_folders(root: Path, per_class: int = 16) -> Path:
    """Three classes a small model can tell apart (hue and stripe direction), 40 x 52 JPEGs."""
    rng = np.random.default_rng(0)
    yy, xx = np.mgrid[0:40, 0:52]
    stripes = [np.sin(xx / 3.0), np.sin(yy / 3.0), np.sin((xx + yy) / 4.0)]
    for split, n in (("train", per_class), ("val", per_class // 2)):
        for c in range(3):
            (root / split / f"c{c}").mkdir(parents=True)
            for i in range(n):
                img = np.empty((40, 52, 3))
                for ch in range(3):
                    img[..., ch] = 128 + 60 * stripes[c] * (1 if ch == c else 0.3)
                img += rng.normal(0, 20, img.shape)
                Image.fromarray(np.clip(img, 0, 255).astype(np.uint8)).save(
                    root / split / f"c{c}" / f"{i}.jpg", quality=90
                )
    return root


@pytest.mark.slow
def test_pil_and_tensor_pipelines_train_to_the_same_loss_within_seed_noise(tmp_path):
    """3 seeds each on 48 training JPEGs (batch 8, 2 workers: more than a batch per worker),
    the paper recipe with its policy. Welch's t-test of the final training losses must not
    reject equality (p > 0.01), and the two means must differ by less than the seed-to-seed
    range of either pipeline."""
    from scipy import stats

    root = separable_folders(tmp_path / "data")
    losses: dict[str, list[float]] = {"pil": [], "tensor": []}
    for pipeline in losses:
        for seed in range(3):
            cfg = folder_config(root, epochs=4, seed=seed, auto_augment="pycls_v0")
            cfg = cfg.model_copy(update={"batch_size": 8, "ref_batch": 8, "lr": 0.05})
            out = tmp_path / f"{pipeline}{seed}"
            result = run_trial(cfg, out, workers=2, execution=Execution(pipeline=pipeline))
            assert result.status == "finished", result.message
            losses[pipeline].append(read_metrics(out)[-1]["train_loss"])
    t, p = stats.ttest_ind(losses["pil"], losses["tensor"], equal_var=False)
    spread = max(max(v) - min(v) for v in losses.values())
    gap = abs(np.mean(losses["pil"]) - np.mean(losses["tensor"]))
    print(
        f"final train loss: {losses}; Welch t {t:.3f}, p {p:.3f}; gap {gap:.4f}, spread {spread:.4f}"
    )
    assert p > 0.01 and gap < spread


def test_status_says_when_a_cell_mixes_pipelines_and_when_input_is_the_bottleneck():
    from types import SimpleNamespace

    from optbench.run.progress import input_notes

    def item(cell: str, pipeline: str, wait: float):
        record = SimpleNamespace(user_attrs={"pipeline": pipeline, "input_wait": wait})
        return SimpleNamespace(is_result=True, trial=SimpleNamespace(cell_id=cell), record=record)

    calm = [item("a", "pil", 0.05), item("a", "pil", 0.1), item("b", "tensor", 0.0)]
    assert input_notes(calm) == []
    notes = input_notes([*calm, item("a", "tensor", 0.5)])
    assert len(notes) == 2
    assert notes[0].startswith("a mixes input pipelines (2 pil, 1 tensor)")
    assert notes[1].startswith("input is the bottleneck: 1 of 4 trials") and "50%" in notes[1]


@pytest.mark.slow
def test_dry_run_turns_recorded_speed_into_device_hours_and_a_time_limit(tiny_dict, cli, tmp_path):
    import yaml

    tiny_dict["models"] = ["vit_c_w64_16px"]
    tiny_dict["dataset"]["pipeline"] = "pil"
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(tiny_dict))
    code, out, err = cli("run", "s.yaml", "--dry-run")
    assert code == 0, err
    assert "device-hours" not in out  # nothing recorded yet
    code, out, err = cli("run", "s.yaml", "--executor", "debug")
    assert code == 0, err
    tiny_dict["epochs"] = [1, 4]  # a new cell: its time comes from the recorded one's speed
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(tiny_dict))
    code, out, err = cli("run", "s.yaml", "--dry-run")
    assert code == 0, err
    flat = " ".join(out.split())
    assert "device-hours to run the cells without measured costs" in flat
    assert "time_min >=" in flat
    code, out, err = cli("status", "s.yaml")
    assert code == 0 and "mixes" not in out


@pytest.mark.parametrize("pipeline", ["pil", "tensor"])
def test_a_trials_input_plan_and_its_input_workers_are_decided_once(
    tmp_path, monkeypatch, pipeline
):
    # build_parts decides both for every part that reads them: the batches and the augmentation
    from dataclasses import replace

    from optbench.data import batches as batches_module
    from optbench.data import input_plan as plan_module
    from optbench.data import tensor_folder
    from optbench.train import parts
    from optbench.train.compute import Compute
    from optbench.train.distributed import DistContext

    plans = []

    def counted(*args, **kwargs):
        plans.append(plan_module.input_plan(*args, **kwargs))
        return plans[-1]

    for module in (parts, batches_module, tensor_folder):
        monkeypatch.setattr(module, "input_plan", counted)
    monkeypatch.setattr(parts, "loader_workers", lambda: 3)  # the trial's share of the cores
    cfg = folder_config(make_jpeg_folders(tmp_path / "folder"))
    compute = Compute.for_trial(cfg.recipe, "cpu", DistContext(), None)
    built = parts.build_parts(cfg, compute, pipeline)
    assert len(plans) == 1 and built.batches.plan is plans[0]

    def workers(batches):
        return batches.workers if pipeline == "pil" else batches.readers

    assert workers(built.batches) == 3
    assert workers(parts.build_parts(cfg, replace(compute, workers=1), pipeline).batches) == 1
