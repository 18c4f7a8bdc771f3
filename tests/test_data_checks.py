"""Data problems that are cheap to see are seen before anything runs (issue 24): a class folder
with no image, a batch larger than the images among other files, CIFAR batches of the wrong
shape or with labels out of range, an unreadable dataset folder, images whose side a model's
patches cannot tile. Each: exit 2, one `error:` line naming the path or field, nothing written.
(A bad image that only decoding shows fails its trial: tests/test_input_pipeline.py.)"""

from __future__ import annotations

import copy
import os
from pathlib import Path

import numpy as np
import pytest
import yaml
from cli_inprocess import ONE_MODEL_STUDY, run_cli
from test_data import CIFAR, make_cifar, make_folders, py2_pickle

from optbench.data.datasets import check_dataset_files, dataset_info
from optbench.data.input_plan import resolve_execution
from optbench.models import input_multiple
from optbench.spec.recipe import Dataset, Recipe


def _tree(root: Path) -> dict[str, tuple[int, int]]:
    """Every path below `root` with its mtime and size (lstat: an unreadable file is listed
    too; an unreadable folder's contents are not, and nothing can be written there)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            st = os.lstat(Path(dirpath) / name)
            out[str(Path(dirpath, name).relative_to(root))] = (st.st_mtime_ns, st.st_size)
    return out


def _reads_anything() -> bool:
    """Whether this process reads a chmod 000 folder anyway (root, or CAP_DAC_OVERRIDE)."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        os.chmod(tmp, 0)
        try:
            os.listdir(tmp)
            return True
        except PermissionError:
            return False
        finally:
            os.chmod(tmp, 0o700)


READS_ANYTHING = _reads_anything()


def _refused(tmp_path, monkeypatch, capsys, dataset: dict, *extra: str, **changes) -> str:
    """`optbench run` of the one-model study on `dataset`: exit 2, one error line, nothing
    written anywhere below tmp_path. Returns the line."""
    study = {**copy.deepcopy(ONE_MODEL_STUDY), "output": "results", "dataset": dataset, **changes}
    (tmp_path / "study.yaml").write_text(yaml.safe_dump(study))
    before = _tree(tmp_path)
    code, _, err = run_cli(["run", "study.yaml", *extra], tmp_path, monkeypatch, capsys)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), err
    assert _tree(tmp_path) == before  # no results/ folder, no study.db
    return lines[0]


def _folders(root: Path, per_class: int = 2) -> dict:
    make_folders(root, per_class=per_class)
    return {"name": "imagefolder", "root": str(root), "img_size": 16}


def test_a_batch_larger_than_the_images_among_other_files_is_refused(tmp_path, monkeypatch, capsys):
    dataset = _folders(tmp_path / "data")  # 3 classes x 2 images
    for c in ("cat", "dog", "fox"):
        for i in range(20):
            (tmp_path / "data" / "train" / c / f"notes{i}.txt").write_text("not an image")
    info = dataset_info(Dataset.model_validate(dataset))
    assert info.n_train == 6  # the 60 text files are not counted
    line = _refused(tmp_path, monkeypatch, capsys, dataset, batch_size=8)
    assert "batch_size: 8 is larger than the 6 training images" in line


@pytest.mark.parametrize("split", ["train", "val"])
def test_a_class_folder_without_images_is_refused(tmp_path, monkeypatch, capsys, split):
    dataset = _folders(tmp_path / "data")
    for s in ("train", "val"):
        (tmp_path / "data" / s / "owl").mkdir()
        if s != split:
            (tmp_path / "data" / s / "owl" / "0.png").write_bytes(
                (tmp_path / "data" / s / "cat" / "0.png").read_bytes()
            )
    (tmp_path / "data" / split / "owl" / "README.txt").write_text("owls to come")
    line = _refused(tmp_path, monkeypatch, capsys, dataset, batch_size=4)
    assert f"{tmp_path / 'data' / split / 'owl'} holds no image" in line


def _cifar_with(root: Path, name: str, fname: str, **batch) -> dict:
    """A CIFAR fixture whose batch `fname` has the entries `batch` changed."""
    make_cifar(root, name)
    folder, *_, label_key, _ = CIFAR[name]
    rng = np.random.default_rng(1)
    entry = {
        b"data": rng.integers(0, 256, (8, 3072), dtype=np.uint8),
        label_key.encode(): [0] * 8,
    }
    entry.update({k.replace("labels", label_key).encode(): v for k, v in batch.items()})
    (root / folder / fname).write_bytes(py2_pickle(entry))
    return {"name": name, "root": str(root)}


CIFAR_FAULTS = {
    "rows of 3000 bytes": (
        dict(data=np.zeros((8, 3000), dtype=np.uint8)),
        "its 'data' is uint8 of shape (8, 3000), not rows of 3072 uint8",
    ),
    "one flat row": (dict(data=np.zeros(3072 * 8, dtype=np.uint8)), "shape (24576,)"),
    "a label past the classes": (dict(labels=[0] * 7 + [10]), "label 10 is outside 0..9"),
    "a negative label": (dict(labels=[-1] + [0] * 7), "label -1 is outside 0..9"),
    "fewer labels than images": (dict(labels=[0] * 5), "not 8 integers (one per image)"),
    "labels that are words": (dict(labels=[b"cat"] * 8), "not 8 integers"),
}


@pytest.mark.parametrize("fault", sorted(CIFAR_FAULTS))
def test_a_cifar_batch_of_the_wrong_shape_or_labels_is_refused(
    tmp_path, monkeypatch, capsys, fault
):
    changes, says = CIFAR_FAULTS[fault]
    dataset = _cifar_with(tmp_path / "data", "cifar10", "data_batch_4", **changes)
    line = _refused(tmp_path, monkeypatch, capsys, dataset, batch_size=8)
    assert str(tmp_path / "data" / "cifar-10-batches-py" / "data_batch_4") in line
    assert says in line


def test_cifar100_labels_are_checked_against_its_100_classes(tmp_path):
    from optbench.errors import UsageError

    fine = _cifar_with(tmp_path / "a", "cifar100", "train", labels=[99] * 8)
    check_dataset_files(Dataset.model_validate(fine))
    past = _cifar_with(tmp_path / "b", "cifar100", "test", labels=[100] * 8)
    with pytest.raises(UsageError, match="label 100 is outside 0..99"):
        check_dataset_files(Dataset.model_validate(past))


@pytest.mark.skipif(
    READS_ANYTHING, reason=f"uid {os.geteuid()} reads a chmod 000 folder anyway (root's override)"
)
@pytest.mark.parametrize("which", ["root", "train", "a class folder", "a cifar batch"])
def test_an_unreadable_dataset_folder_or_file_is_one_line(tmp_path, monkeypatch, capsys, which):
    if which == "a cifar batch":
        make_cifar(tmp_path / "data", "cifar10")
        dataset = {"name": "cifar10", "root": str(tmp_path / "data")}
        locked = tmp_path / "data" / "cifar-10-batches-py" / "test_batch"
    else:
        dataset = _folders(tmp_path / "data")
        locked = {
            "root": tmp_path / "data",
            "train": tmp_path / "data" / "train",
            "a class folder": tmp_path / "data" / "val" / "dog",
        }[which]
    locked.chmod(0)
    try:
        line = _refused(tmp_path, monkeypatch, capsys, dataset, batch_size=4)
    finally:
        locked.chmod(0o755)
    assert "cannot be read (Permission denied)" in line and str(tmp_path / "data") in line


@pytest.mark.parametrize("dry_run", [False, True])
def test_an_img_size_the_patches_cannot_tile_is_refused(tmp_path, monkeypatch, capsys, dry_run):
    model = ONE_MODEL_STUDY["models"][0]
    patch = input_multiple(model)
    assert patch > 1 and input_multiple("regnety_1gf") == 1  # a CNN takes any size
    extra = ("--dry-run",) if dry_run else ()
    dataset = {"name": "digits", "img_size": 4 * patch + 2}  # 18 px for a 4-px patch
    line = _refused(tmp_path, monkeypatch, capsys, dataset, *extra)
    size = 4 * patch + 2
    assert f"dataset.img_size: {size} is not a multiple of {model}'s patch size {patch}" in line


@pytest.mark.slow  # builds every model of the zoo: over half a second here
def test_the_patch_size_is_read_from_each_model_of_the_zoo():
    # the zoo's models refuse to be built at a size their patches cannot tile: input_multiple
    # must be that size for each family (read from the model, not from a table)
    import timm

    for model in ("vit_c_w64_16px", "dhvt_tiny_cifar_p2", "vit_s1_w64_16px", "dhvt_w64_16px"):
        patch = input_multiple(model)
        timm.create_model(model, img_size=4 * patch, num_classes=10)
        with pytest.raises(ValueError, match="not a multiple"):
            timm.create_model(model, img_size=4 * patch + 1, num_classes=10)


@pytest.mark.parametrize("split", ["train", "val"])
def test_an_empty_image_file_is_refused(tmp_path, monkeypatch, capsys, split):
    # before: it passed, and failed or was silently skipped mid-training (issue 35)
    dataset = _folders(tmp_path / "data")
    empty = tmp_path / "data" / split / "dog" / "1.png"
    empty.write_bytes(b"")
    line = _refused(tmp_path, monkeypatch, capsys, dataset, batch_size=4)
    assert line == f"error: study.yaml: dataset.root: {empty} is an empty file, not an image"


@pytest.mark.parametrize("dry_run", [False, True])
def test_a_policy_the_tensor_pipeline_cannot_run_is_refused_there(
    tmp_path, monkeypatch, capsys, dry_run
):
    # `3a` (Desaturate, GaussianBlurRand): before, --dry-run passed and every trial failed
    extra = ("--dry-run",) if dry_run else ()
    dataset = {"name": "digits", "pipeline": "tensor"}
    line = _refused(tmp_path, monkeypatch, capsys, dataset, *extra, recipe={"auto_augment": "3a"})
    assert line.startswith("error: study.yaml: recipe.auto_augment: '3a' has ops without a")
    assert "(Desaturate, GaussianBlurRand)" in line and "dataset.pipeline tensor" in line


def test_auto_feeds_a_policy_without_a_tensor_version_through_pil_and_says_so(
    tmp_path, monkeypatch, capsys
):
    from optbench.trial.config import Execution

    study = {
        **copy.deepcopy(ONE_MODEL_STUDY),
        "output": "results",
        "recipe": {"auto_augment": "3a"},
    }
    (tmp_path / "study.yaml").write_text(yaml.safe_dump(study))
    code, out, _ = run_cli(["run", "study.yaml", "--dry-run"], tmp_path, monkeypatch, capsys)
    notes = [line for line in out.splitlines() if "no tensor" in line or "tensor ver" in line]
    assert code == 0 and len(notes) == 1, out
    assert "dataset.pipeline auto feeds this study through pil, on CUDA too" in notes[0]
    assert resolve_execution(Execution(), "cuda", Recipe(auto_augment="3a")).pipeline == "pil"
    assert resolve_execution(Execution(), "cuda", Recipe(auto_augment="v0")).pipeline == "tensor"
    explicit = Execution(pipeline="tensor")  # an explicit choice is kept: refused before it runs
    assert resolve_execution(explicit, "cuda", Recipe(auto_augment="3a")).pipeline == "tensor"


def test_optbench_train_refuses_the_tensor_pipeline_for_such_a_policy(
    tmp_path, monkeypatch, capsys
):
    args = ["train", ONE_MODEL_STUDY["models"][0], "--dataset", "digits", "--optimizer", "sgd"]
    args += ["--lr", "0.1", "--wd", "0", "--epochs", "1", "--out", "out", "--pipeline", "tensor"]
    code, _, err = run_cli([*args, "--set", "auto_augment=3a"], tmp_path, monkeypatch, capsys)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "--pipeline tensor needs" in lines[0], err
    assert "recipe.auto_augment: '3a'" in lines[0] and not (tmp_path / "out").exists()
