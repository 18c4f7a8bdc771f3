"""Datasets in their real on-disk formats (tiny fixtures), read through optbench's own loaders."""

from __future__ import annotations

import os
import pickle
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest
import torch
from cli_inprocess import tiny_config
from PIL import Image
from test_interpolation import folder_plan

from optbench.data.batches import DeviceBatches, FolderBatches, Shard, _val_transform, epoch_order
from optbench.data.datasets import check_dataset, dataset_info, load_dataset, model_input
from optbench.data.folders import folder_samples
from optbench.errors import UsageError
from optbench.spec.recipe import Dataset, Recipe
from optbench.train.run_trial import run_trial

CIFAR = {
    "cifar10": (
        "cifar-10-batches-py",
        [f"data_batch_{i}" for i in range(1, 6)],
        ["test_batch"],
        "labels",
        10,
    ),
    "cifar100": ("cifar-100-python", ["train"], ["test"], "fine_labels", 100),
}


def py2_pickle(obj) -> bytes:
    """`obj` pickled as Python 2's cPickle wrote the CIFAR batches (protocol 2): Python 2 str
    (bytes here) as BINSTRING, numpy arrays through numpy.core.multiarray._reconstruct with
    their raw bytes as a Python 2 str. Handles what a batch holds: dict, list, tuple, bytes,
    int, bool, None, uint8 arrays."""

    def s(b: bytes) -> bytes:  # a Python 2 str
        return (b"U" + bytes([len(b)]) if len(b) < 256 else b"T" + struct.pack("<i", len(b))) + b

    def glob(module: str, name: str) -> bytes:
        return b"c" + module.encode() + b"\n" + name.encode() + b"\n"

    def dump(o) -> bytes:
        if o is None:
            return b"N"
        if isinstance(o, bool):
            return b"\x88" if o else b"\x89"
        if isinstance(o, int):
            return b"J" + struct.pack("<i", o)
        if isinstance(o, bytes):
            return s(o)
        if isinstance(o, tuple):
            return b"(" + b"".join(dump(x) for x in o) + b"t"
        if isinstance(o, list):
            return b"](" + b"".join(dump(x) for x in o) + b"e"
        if isinstance(o, dict):
            return b"}(" + b"".join(dump(k) + dump(v) for k, v in o.items()) + b"u"
        if isinstance(o, np.ndarray) and o.dtype == np.uint8:
            dtype = glob("numpy", "dtype") + dump((b"u1", 0, 1)) + b"R"
            dtype += dump((3, b"|", None, None, None, -1, -1, 0)) + b"b"
            array = glob("numpy.core.multiarray", "_reconstruct")
            array += b"(" + glob("numpy", "ndarray") + dump((0,)) + s(b"b") + b"tR"
            state = b"(" + dump(1) + dump(o.shape) + dtype + dump(False) + s(o.tobytes()) + b"t"
            return array + state + b"b"
        raise TypeError(type(o))

    return b"\x80\x02" + dump(obj) + b"."


def make_cifar(root: Path, name: str, per_file: int = 8, seed: int = 0) -> dict:
    """Write torchvision-format CIFAR pickles as the real files are (Python 2 protocol-2 dicts
    with str keys; rows of 3072 uint8: R plane, G plane, B plane)."""
    folder, train_files, val_files, label_key, classes = CIFAR[name]
    rng = np.random.default_rng(seed)
    (root / folder).mkdir(parents=True)
    written = {}
    for fname in train_files + val_files:
        data = rng.integers(0, 256, (per_file, 3072), dtype=np.uint8)
        labels = rng.integers(0, classes, per_file).tolist()
        batch = {b"batch_label": b"training batch", label_key.encode(): labels, b"data": data}
        batch[b"filenames"] = [f"img_{i}.png".encode() for i in range(per_file)]
        (root / folder / fname).write_bytes(py2_pickle(batch))
        written[fname] = (data, labels)
    return written


def make_folders(root: Path, classes=("cat", "dog", "fox"), per_class: int = 4, size: int = 20):
    rng = np.random.default_rng(0)
    for split in ("train", "val"):
        for c in classes:
            (root / split / c).mkdir(parents=True)
            for i in range(per_class):
                pixels = rng.integers(0, 256, (size, size + 4, 3), dtype=np.uint8)
                Image.fromarray(pixels).save(root / split / c / f"{i}.png")


def test_digits_plan_from_the_catalogue_as_the_loader_splits_them():
    # `optbench run`'s checks and the dry run's table read digits' shape and split from the
    # catalogue without loading the bundle (sklearn): the catalogue must be what loading gives
    for img_size in (None, 16):
        spec = Dataset(name="digits", img_size=img_size)
        data, info = load_dataset(spec), dataset_info(spec)
        assert (info.num_classes, info.in_chans, info.img_size, info.n_train) == (
            data.num_classes, data.in_chans, data.img_size, data.num_train
        )  # fmt: skip


@pytest.mark.parametrize("name", ["cifar10", "cifar100"])
def test_cifar_pickles_load_in_chw_order(tmp_path, name):
    written = make_cifar(tmp_path, name)
    spec = Dataset(name=name, root=tmp_path)
    check_dataset(spec)
    data = load_dataset(spec)
    folder, train_files, val_files, _, classes = CIFAR[name]
    assert data.num_classes == classes
    assert data.train_x.shape == (8 * len(train_files), 3, 32, 32)
    assert data.train_x.dtype == torch.uint8 and data.val_x.shape == (8, 3, 32, 32)
    first, labels = written[train_files[0]]
    # row layout: 1024 red values (row-major), then green, then blue
    assert data.train_x[0, 1, 0, 5].item() == first[0, 1024 + 5]
    assert data.train_x[0, 2, 31, 31].item() == first[0, 3071]
    assert data.train_y[: len(labels)].tolist() == labels
    assert data.val_y.tolist() == written[val_files[0]][1]


def test_cifar_missing_root_names_path_and_layout(tmp_path):
    with pytest.raises(UsageError, match="cifar-10-batches-py") as err:
        check_dataset(Dataset(name="cifar10", root=tmp_path / "nowhere"))
    assert "nowhere" in str(err.value) and "data_batch_1" in str(err.value)
    with pytest.raises(UsageError, match="needs a root"):
        check_dataset(Dataset(name="cifar100"))


def test_cifar_missing_file_and_malformed_pickle(tmp_path):
    make_cifar(tmp_path, "cifar10")
    (tmp_path / "cifar-10-batches-py" / "data_batch_3").unlink()
    with pytest.raises(UsageError, match="data_batch_3"):
        check_dataset(Dataset(name="cifar10", root=tmp_path))
    (tmp_path / "cifar-10-batches-py" / "data_batch_3").write_bytes(b"not a pickle")
    with pytest.raises(UsageError, match="data_batch_3.*not a CIFAR pickle"):
        load_dataset(Dataset(name="cifar10", root=tmp_path))


class RunsAShellCommand:
    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


@pytest.mark.parametrize("where", ["the batch", "a label"])
def test_a_crafted_cifar_pickle_runs_nothing_and_is_refused_in_one_line(tmp_path, where):
    make_cifar(tmp_path, "cifar10")
    marker = tmp_path / "ran"
    crafted = RunsAShellCommand(marker)
    batch = crafted if where == "the batch" else {"data": np.zeros((1, 3072), np.uint8)}
    if where == "a label":
        batch["labels"] = [crafted]
    path = tmp_path / "cifar-10-batches-py" / "data_batch_2"
    path.write_bytes(pickle.dumps(batch, protocol=2))
    assert not marker.exists()
    with pytest.raises(UsageError) as err:
        load_dataset(Dataset(name="cifar10", root=tmp_path))
    assert not marker.exists()  # nothing was executed
    message = str(err.value)
    assert "\n" not in message and str(path) in message
    assert f"names {os.system.__module__}.system" in message


def test_cifar_batches_written_by_python3_load_too(tmp_path):
    """numpy 2's module name and protocol 2's bytes (through _codecs.encode), bytes keys."""
    written = make_cifar(tmp_path, "cifar100")
    for fname, (data, labels) in written.items():
        batch = {b"data": data, b"fine_labels": labels, b"filenames": [b"a.png"]}
        (tmp_path / "cifar-100-python" / fname).write_bytes(pickle.dumps(batch, protocol=2))
    data = load_dataset(Dataset(name="cifar100", root=tmp_path))
    assert data.train_y.tolist() == written["train"][1]


def test_folder_layout_checks(tmp_path):
    with pytest.raises(UsageError, match="train/<class>"):
        check_dataset(Dataset(name="imagefolder", root=tmp_path))
    make_folders(tmp_path)
    check_dataset(Dataset(name="imagenet", root=tmp_path))
    (tmp_path / "val" / "owl").mkdir()
    with pytest.raises(UsageError, match="different class folders.*owl"):
        check_dataset(Dataset(name="imagefolder", root=tmp_path))


def test_epoch_order_is_fixed_by_seed_and_epoch():
    a = epoch_order(100, seed=1, epoch=3, repeated_aug=1)
    assert sorted(a.tolist()) == list(range(100))
    assert torch.equal(a, epoch_order(100, seed=1, epoch=3, repeated_aug=1))
    assert not torch.equal(a, epoch_order(100, seed=1, epoch=4, repeated_aug=1))
    assert not torch.equal(a, epoch_order(100, seed=2, epoch=3, repeated_aug=1))


def test_repeated_augmentation_shows_each_image_three_times_in_a_row():
    order = epoch_order(99, seed=0, epoch=0, repeated_aug=3).tolist()
    assert len(order) == 99 and len(set(order)) == 33
    triples = [order[i : i + 3] for i in range(0, 99, 3)]
    assert all(len(set(t)) == 1 for t in triples)


def test_repeated_augmentation_beyond_the_data_costs_no_more_than_the_epoch():
    # r = 2**40 repeats of one image: building the r copies first would need 8 TB.
    order = epoch_order(10, seed=0, epoch=0, repeated_aug=2**40)
    assert len(order) == 10 and len(set(order.tolist())) == 1


def test_device_batches_shards_partition_the_global_batch(tmp_path):
    make_cifar(tmp_path, "cifar10")
    data = load_dataset(Dataset(name="cifar10", root=tmp_path))
    whole = list(DeviceBatches(data, 8, seed=0).train(epoch=2))
    halves = [
        list(DeviceBatches(data, 8, seed=0, shard=Shard(r, 2)).train(epoch=2)) for r in (0, 1)
    ]
    assert len(whole) == 40 // 8
    for b, (x, y) in enumerate(whole):
        assert torch.equal(torch.cat([halves[0][b][0], halves[1][b][0]]), x)
        assert torch.equal(torch.cat([halves[0][b][1], halves[1][b][1]]), y)
    resumed = list(DeviceBatches(data, 8, seed=0).train(epoch=2, start=3))
    assert torch.equal(resumed[0][0], whole[3][0])


def test_device_batches_evaluate_in_the_batch_each_process_trains_as_folders_do(tmp_path):
    # one large chunk was up to a third slower on a CPU (the attention of 1024 images leaves
    # the cache); every pipeline evaluates in the local training batch, split across ranks
    make_cifar(tmp_path, "cifar10")
    data = load_dataset(Dataset(name="cifar10", root=tmp_path))
    n = len(data.val_y)
    assert n >= 8  # the fixture's split holds two batches of 4 at least
    sizes = [len(y) for _, y in DeviceBatches(data, 4, seed=0).val()]
    assert sizes == [4] * (n // 4) + ([n % 4] if n % 4 else [])
    halves = [list(DeviceBatches(data, 4, seed=0, shard=Shard(r, 2)).val()) for r in (0, 1)]
    assert all(len(y) == 2 for part in halves for _, y in part[:-1]) and len(halves[0]) > 1
    seen = torch.cat([y for part in halves for _, y in part])
    assert sorted(seen.tolist()) == sorted(data.val_y.tolist())  # each image once


def test_an_images_logits_do_not_depend_on_the_evaluation_batch_on_this_cpu():
    # why evaluating in smaller batches leaves every error as it was (the quickstart's
    # digests and metrics equal the reference's): a model's logits for one image are the same
    # bits in a batch of 1024 and in batches of 128 or 64, for each model family shipped
    from optbench.models import create_model

    torch.manual_seed(0)
    x = torch.randn(300, 3, 16, 16)
    for name in ("vit_p_w64_16px", "vit_c_w64_16px", "dhvt_w64_16px"):
        model = create_model(name, num_classes=10, img_size=16, in_chans=3).eval()
        with torch.no_grad():
            whole = model(x)
            for chunk in (128, 64):
                parts = torch.cat([model(x[i : i + chunk]) for i in range(0, len(x), chunk)])
                assert torch.equal(parts, whole), (name, chunk)


def test_folder_batches_stream_uint8_and_replay_per_image_augmentation(tmp_path):
    make_folders(tmp_path)
    data = load_dataset(Dataset(name="imagefolder", root=tmp_path, img_size=16))
    recipe = Recipe(preset="paper")
    dev = torch.device("cpu")
    inline = FolderBatches(data, 4, recipe, seed=0, device=dev, workers=0)
    pooled = FolderBatches(data, 4, recipe, seed=0, device=dev, workers=2)
    a, b = list(inline.train(epoch=1)), list(pooled.train(epoch=1))
    assert len(a) == 3 and a[0][0].shape == (4, 3, 16, 16) and a[0][0].dtype == torch.uint8
    for (xa, ya), (xb, yb) in zip(a, b, strict=True):
        assert torch.equal(xa, xb) and torch.equal(ya, yb)
    val = list(inline.val())
    assert sum(len(y) for _, y in val) == 12


def test_a_dot_folder_beside_the_classes_is_no_class_in_either_pipeline(tmp_path):
    # e.g. .ipynb_checkpoints: torchvision's ImageFolder would take it as the first class and
    # shift every label by one; the dataset's classes leave it out, and so must both readers
    make_folders(tmp_path)
    for split in ("train", "val"):
        (tmp_path / split / ".ipynb_checkpoints").mkdir()
        shutil.copy(tmp_path / split / "cat" / "0.png", tmp_path / split / ".ipynb_checkpoints")
    data = load_dataset(Dataset(name="imagefolder", root=tmp_path, img_size=16))
    assert data.classes == ("cat", "dog", "fox")
    dev = torch.device("cpu")
    batches = FolderBatches(data, 4, Recipe(preset="paper"), seed=0, device=dev, workers=0)
    labels = torch.cat([y for _, y in batches.val()]).tolist()
    assert labels == [0] * 4 + [1] * 4 + [2] * 4  # 12 images, none from the dot-folder
    pil = [(Path(p).parent.name, y) for p, y in batches.train_set.samples]
    tensor = [(Path(p).parent.name, y) for p, y in folder_samples(tmp_path / "train", data.classes)]
    assert pil == tensor and {name for name, _ in pil} == {"cat", "dog", "fox"}


def test_dot_folders_inside_a_class_hold_no_image_of_it_in_either_pipeline(tmp_path):
    # a class's own .ipynb_checkpoints (or a .git deeper down) is left out at any depth: its
    # copies are neither counted, nor trained, nor evaluated as that class
    from optbench.data.tensor_folder import TensorFolderBatches

    make_folders(tmp_path)
    for hidden in ("train/cat/.ipynb_checkpoints", "train/dog/sub/.git", "val/fox/.cache"):
        (tmp_path / hidden).mkdir(parents=True)
        shutil.copy(tmp_path / "train" / "cat" / "0.png", tmp_path / hidden / "0-copy.png")
    shutil.copy(tmp_path / "train" / "dog" / "1.png", tmp_path / "train/dog/sub")  # is read
    spec = Dataset(name="imagefolder", root=tmp_path, img_size=16)
    data = load_dataset(spec)
    assert dataset_info(spec).n_train == 13
    dev, recipe = torch.device("cpu"), Recipe(preset="paper")
    pil = FolderBatches(data, 4, recipe, seed=0, device=dev, workers=0)
    tensor = TensorFolderBatches(data, 4, recipe, seed=0, device=dev)
    for samples in (pil.train_set.samples, tensor.train_samples):
        assert len(samples) == 13 and not [p for p, _ in samples if "/." in p]
    assert len(pil.val_set.samples) == len(tensor.val_samples) == 12


def test_evaluation_resizes_the_shorter_side_to_size_over_crop_pct_then_center_crops():
    # pycls evaluates at TEST.IM_SIZE (shorter side) then crops TRAIN.IM_SIZE: 256/224 for the
    # ViTs, 262/232 for RegNetY-1.0GF; optbench's crop_pct is train / test size
    for train, test in ((224, 256), (232, 262), (240, 272), (256, 292)):
        resize, crop = _val_transform(folder_plan(Recipe(), train, train / test)).transforms[:2]
        assert (resize.size, tuple(crop.size)) == ([test], (train, train))


def test_folder_datasets_take_the_models_input_size_and_crop_pct(tmp_path):
    make_folders(tmp_path)  # 20 x 24 images
    assert model_input(None) == (224, 0.875)  # no model: pycls's 224 / 256
    assert model_input("vit_c_w64_16px") == (16, 1.0)  # its cfg: no test size, whole image
    assert model_input("resnet18") == (224, 0.95)  # timm's cfg for it
    data = load_dataset(Dataset(name="imagefolder", root=tmp_path), "vit_c_w64_16px")
    assert (data.img_size, data.crop_pct) == (16, 1.0)
    data = load_dataset(Dataset(name="imagefolder", root=tmp_path), "resnet18")
    assert (data.img_size, data.crop_pct) == (224, 0.95)
    batches = FolderBatches(data, 4, Recipe(), seed=0, device=torch.device("cpu"), workers=0)
    x, _ = next(iter(batches.val()))
    assert x.shape == (4, 3, 224, 224)
    assert batches.val_set.transform.transforms[0].size == [235]  # timm's floor(224 / 0.95)
    set_size = load_dataset(Dataset(name="imagefolder", root=tmp_path, img_size=32), "resnet18")
    assert (set_size.img_size, set_size.crop_pct) == (32, 0.875)  # the study's size wins
    assert dataset_info(Dataset(name="imagenet", root=tmp_path), "resnet18").img_size == 224
    assert dataset_info(Dataset(name="imagenet", root=tmp_path), "vit_c_w64_16px").img_size == 16


@pytest.mark.slow
@pytest.mark.parametrize("name", ["cifar100", "imagefolder"])
def test_a_trial_trains_on_fixture_data(tmp_path, name):
    if name == "cifar100":
        make_cifar(tmp_path / "data", name)
    else:
        make_folders(tmp_path / "data")
    cfg = tiny_config(
        model="vit_c_w64_16px",
        dataset=Dataset(name=name, root=tmp_path / "data", img_size=16),
        optimizer="sgd",
        lr=0.5,
        wd=1e-4,
        batch_size=4,
        recipe=Recipe(preset="paper", warmup_epochs=0.5),
    )
    result = run_trial(cfg, tmp_path / "out", workers=0)
    assert result.status == "finished", result.message
    assert result.final_error == result.ema_final_error is not None
    assert result.raw_final_top5_error is not None
