"""WebDataset shards (`dataset.layout: wds`, data/shards.py) and `optbench data pack`: real tar
files packed from real class folders, read by both pipelines as the folder itself is read."""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
from pathlib import Path

import pytest
import torch
from test_data import make_folders
from test_input_pipeline import folder_config, make_jpeg_folders, stop_mid_epoch

from optbench.data import shards
from optbench.data.datasets import check_dataset_files, load_dataset, split_samples
from optbench.errors import UsageError
from optbench.spec.recipe import Dataset
from optbench.spec.schema import parse_spec
from optbench.train.run_trial import run_trial
from optbench.trial.config import Execution


def wds(root: Path, **fields) -> Dataset:
    return Dataset(name="imagefolder", root=root, layout="wds", **fields)


@pytest.fixture
def packed(tmp_path, cli) -> tuple[Path, Path]:
    make_folders(tmp_path / "folder")
    code, out, err = cli("data", "pack", "folder", "shards", "--per-shard", "5")
    assert code == 0, err
    assert "train: 12 images in 3 shards" in out
    return tmp_path / "folder", tmp_path / "shards"


def test_pack_writes_shards_a_manifest_and_an_index_in_the_folders_order(packed):
    folder, root = packed
    manifest = json.loads((root / "manifest.json").read_text())
    assert manifest["classes"] == ["cat", "dog", "fox"]
    assert manifest["splits"]["val"]["per_class"] == [4, 4, 4]
    for entry in manifest["splits"]["train"]["shards"] + manifest["splits"]["val"]["shards"]:
        data = (root / entry["name"]).read_bytes()
        assert hashlib.sha256(data).hexdigest() == entry["sha256"] and len(data) == entry["bytes"]
    assert (root / shards.INDEX_NAME).is_file()
    on_folder = load_dataset(Dataset(name="imagefolder", root=folder, img_size=16))
    on_shards = load_dataset(wds(root, img_size=16))
    assert on_shards.classes == on_folder.classes
    for split in ("train", "val"):
        a, b = split_samples(on_folder, split), split_samples(on_shards, split)
        assert [c for _, c in a] == [c for _, c in b]
        assert [Path(p).read_bytes() for p, _ in a] == [shards.read_bytes(m) for m, _ in b]


def test_pack_refuses_bad_input_in_one_line_and_writes_nothing(tmp_path, cli):
    make_folders(tmp_path / "folder")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep.txt").write_text("mine")
    code, _, err = cli("data", "pack", "folder", "full")
    assert code == 2 and "full is not empty" in err and len(err.strip().splitlines()) == 1
    assert os.listdir(tmp_path / "full") == ["keep.txt"]
    (tmp_path / "folder" / "val" / "dog" / "0.png").write_bytes(b"")
    code, _, err = cli("data", "pack", "folder", "out")
    assert code == 2 and "0.png is an empty file" in err and len(err.strip().splitlines()) == 1
    code, _, err = cli("data", "pack", "nowhere", "out")
    assert code == 2 and "nowhere/train is not a folder" in err
    assert sorted(os.listdir(tmp_path)) == ["folder", "full"]  # no partial pack left


def _tree(root: Path) -> dict[str, bytes | None]:
    return {
        str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None)
        for p in sorted(root.rglob("*"))
    }


@pytest.mark.parametrize(
    "folder, out, why",
    [
        ("folder", "folder/val/packed", "lies inside FOLDER"),  # it was packed, exit 0
        ("folder", "folder/packed", "lies inside FOLDER"),
        ("folder", "folder", "lies inside FOLDER"),
        ("folder/..", "folder/packed", "lies inside FOLDER"),
        ("folder/../folder", "./folder/val/x/..", "lies inside FOLDER"),
        ("sub/folder", "sub", "holds FOLDER"),
        ("folder", "nowhere/out", "nowhere does not exist"),  # it was a traceback
    ],
)
def test_pack_refuses_an_out_inside_its_folder_or_around_it_in_one_line(
    tmp_path, cli, folder, out, why
):
    make_folders(tmp_path / "folder")
    (tmp_path / "sub").mkdir()
    make_folders(tmp_path / "sub" / "folder")
    before = _tree(tmp_path)
    code, _, err = cli("data", "pack", folder, out)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert f"OUT: {Path(out)}" in err and why in err, err
    assert _tree(tmp_path) == before  # nothing written


def test_pack_on_a_full_disk_is_one_line_and_leaves_nothing(tmp_path, cli, monkeypatch):
    import errno

    make_folders(tmp_path / "folder")
    written = []

    def full_after_two(self, info, fileobj=None):  # a tar write on a full disk: no file named
        if len(written) == 2:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        written.append(info.name)
        return addfile(self, info, fileobj)

    addfile = tarfile.TarFile.addfile
    monkeypatch.setattr(tarfile.TarFile, "addfile", full_after_two)
    code, _, err = cli("data", "pack", "folder", "shards")
    assert code == 1, err
    assert err.strip() == "error: shards/train-000000.tar: cannot write: No space left on device"
    assert sorted(os.listdir(tmp_path)) == ["folder"]  # no partial pack left
    monkeypatch.setattr(tarfile.TarFile, "addfile", addfile)  # space is back
    code, _, err = cli("data", "pack", "folder", "shards")
    assert code == 0, err


def _tar(path: Path, members: dict[str, bytes] | list[tuple[str, bytes]]) -> None:
    """A tar shard of `members` (name, bytes), in order; a list may name a member twice."""
    with tarfile.open(path, "w") as tar:
        for name, data in members.items() if isinstance(members, dict) else members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def test_bad_shards_are_refused_before_a_run_naming_the_file(packed):
    _, root = packed
    spec = wds(root)
    check_dataset_files(spec)
    (root / "train-000001.tar").rename(root / "moved.bin")
    with pytest.raises(UsageError, match=r"train-000001.tar is missing \(manifest.json lists 3"):
        check_dataset_files(spec)
    (root / "moved.bin").rename(root / "train-000001.tar")
    (root / shards.INDEX_NAME).write_text('{"version": 1, "shards": [["x.tar", 1, 1]]}')
    with pytest.raises(UsageError, match=f"{shards.INDEX_NAME} is not a valid shard index"):
        check_dataset_files(spec)
    (root / shards.INDEX_NAME).unlink()
    (root / "manifest.json").unlink()
    _tar(root / "train-000009.tar", {"a.txt": b"not an image", "a.cls": b"0"})
    with pytest.raises(UsageError, match=r"train-000009.tar: sample 'a' has no image member"):
        check_dataset_files(spec)
    _tar(root / "train-000009.tar", {"a.png": b"x", "a.cls": b"one"})
    with pytest.raises(UsageError, match=r"member 'a.cls' is not a class index"):
        check_dataset_files(spec)


def test_a_crafted_index_or_member_name_reads_only_inside_the_shards(packed, tmp_path):
    _, root = packed
    # a member named like a path outside: a label only, its bytes read from the shard itself
    (root / "manifest.json").unlink()
    _tar(
        root / "train-000009.tar",
        {"../../../etc/passwd.png": b"PNG?", "../../../etc/passwd.cls": b"2"},
    )
    (root / shards.INDEX_NAME).unlink()
    samples = split_samples(load_dataset(wds(root, img_size=16), cache_dir=tmp_path), "train")
    member, label = samples[-1]
    assert (label, shards.read_bytes(member), member.shard) == (
        2,
        b"PNG?",
        str(root / "train-000009.tar"),
    )
    # an index whose row points beyond its shard (to read another file's bytes) is refused
    index = json.loads((root / shards.INDEX_NAME).read_text())
    index["train"][0][1] = 10**9
    (root / shards.INDEX_NAME).write_text(json.dumps(index))
    with pytest.raises(UsageError, match="not a valid shard index"):
        check_dataset_files(wds(root))


def test_the_index_is_cached_beside_the_shards_or_else_in_the_study_folder(
    packed, tmp_path, monkeypatch
):
    _, root = packed
    (root / shards.INDEX_NAME).unlink()
    check_dataset_files(wds(root))
    assert not (root / shards.INDEX_NAME).exists()  # a check writes nothing
    write_text = shards.safefs.write_text

    def read_only_shards(path, base, text):  # EACCES where the shards are (root ignores 0555)
        if Path(base) == root:
            raise PermissionError(13, "Permission denied", str(path))
        write_text(path, base, text)

    monkeypatch.setattr(shards.safefs, "write_text", read_only_shards)
    shards._index.cache_clear()
    study = tmp_path / "study"
    load_dataset(wds(root, img_size=16), cache_dir=study)
    assert not (root / shards.INDEX_NAME).exists()
    assert [p.name for p in study.iterdir()] == [shards.cache_file(root, study).name]
    shards._index.cache_clear()
    assert shards.open_index(root, study)[1]  # read back from the study folder
    monkeypatch.undo()
    shards._index.cache_clear()
    load_dataset(wds(root, img_size=16), cache_dir=tmp_path / "other")  # writable: beside them
    assert (root / shards.INDEX_NAME).is_file() and not (tmp_path / "other").exists()


def test_the_layout_is_no_part_of_a_cell_id():
    base = {
        "name": "s",
        "models": ["vit_c_w64_16px"],
        "optimizers": ["sgd"],
        "epochs": [1],
        "batch_size": 4,
        "search": {"n_samples": 1, "ranges": {"sgd": {"lr": [0.1, 1.0], "wd": [1e-5, 1e-3]}}},
    }
    folder = parse_spec({**base, "dataset": {"name": "imagefolder", "root": "data"}})
    packed = parse_spec({**base, "dataset": {"name": "imagefolder", "root": "s", "layout": "wds"}})
    assert [folder.cell_id(c) for c in folder.cells()] == [
        packed.cell_id(c) for c in packed.cells()
    ]
    with pytest.raises(Exception, match="cifar10 is read only as"):
        parse_spec({**base, "dataset": {"name": "cifar10", "root": "c", "layout": "wds"}})


@pytest.mark.slow
@pytest.mark.parametrize("pipeline", ["pil", "tensor"])
def test_a_trial_on_packed_shards_equals_the_trial_on_the_folder(tmp_path, cli, pipeline):
    make_jpeg_folders(tmp_path / "folder")
    assert cli("data", "pack", "folder", "shards", "--per-shard", "4")[0] == 0
    run = Execution(pipeline=pipeline)
    on_folder = folder_config(tmp_path / "folder", epochs=1)
    on_shards = on_folder.model_copy(update={"dataset": wds(tmp_path / "shards", img_size=16)})
    a = run_trial(on_folder, tmp_path / "a", workers=1, execution=run)
    b = run_trial(on_shards, tmp_path / "b", workers=1, execution=run)
    assert a.status == b.status == "finished", (a.message, b.message)
    assert a.digest == b.digest and a.final_error == b.final_error


@pytest.mark.slow
def test_a_trial_on_shards_stopped_mid_epoch_resumes_to_the_same_digest(tmp_path, cli, monkeypatch):
    make_jpeg_folders(tmp_path / "folder")
    assert cli("data", "pack", "folder", "shards", "--per-shard", "4")[0] == 0
    cfg = folder_config(tmp_path / "folder").model_copy(
        update={"dataset": wds(tmp_path / "shards", img_size=16)}
    )
    whole = run_trial(cfg, tmp_path / "whole", workers=1)
    stop_mid_epoch(cfg, tmp_path / "stopped", monkeypatch)
    resumed = run_trial(cfg, tmp_path / "stopped", resume=True, workers=1)
    assert whole.status == "finished" and resumed.digest == whole.digest


@pytest.mark.slow
def test_a_study_on_packed_shards_records_the_trials_of_the_study_on_the_folder(
    tmp_path, cli, tiny_dict
):
    make_jpeg_folders(tmp_path / "folder")
    assert cli("data", "pack", "folder", "shards", "--per-shard", "4")[0] == 0
    digests = {}
    for name, dataset in (
        ("on-folder", {"name": "imagefolder", "root": "folder", "img_size": 16}),
        ("on-shards", {"name": "imagefolder", "root": "shards", "img_size": 16, "layout": "wds"}),
    ):
        study = {
            **tiny_dict,
            "name": name,
            "dataset": dataset,
            "models": ["vit_c_w64_16px"],
            "batch_size": 4,
            "ref_batch": 4,
            "executor": {"workers": 1},
        }
        (tmp_path / f"{name}.yaml").write_text(json.dumps(study))
        code, _, err = cli("run", f"{name}.yaml")
        assert code == 0, err
        results = sorted((Path(study["output"]) / name / "trials").rglob("result.json"))
        digests[name] = {
            str(p.relative_to(Path(study["output"]) / name)): json.loads(p.read_text())["digest"]
            for p in results
        }
    assert len(digests["on-folder"]) == 2 and None not in digests["on-folder"].values()
    assert digests["on-folder"] == digests["on-shards"]  # same trial keys, same weights


def test_optbench_train_on_a_bad_shard_stops_in_one_line_and_writes_nothing(packed, cli):
    _, root = packed
    (root / "manifest.json").unlink()
    _tar(root / "val-000009.tar", {"x/1.webp": b"RIFF", "x/1.cls": b"0", "x/2.cls": b"1"})
    code, _, err = cli(
        *("train", "vit_c_w64_16px", "--dataset", "imagefolder", "--data-root", "shards"),
        *("--layout", "wds", "--img-size", "16", "--optimizer", "sgd", "--lr", "0.1"),
        *("--wd", "0", "--epochs", "1", "--batch-size", "4", "--out", "out"),
    )
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "val-000009.tar: sample 'x/2' has no image member" in err
    assert not (root.parent / "out").exists()


def test_a_member_that_is_no_image_fails_its_trial_naming_shard_and_member(packed):
    from optbench.data.batches import FolderBatches
    from optbench.data.datasets import UnreadableImage
    from optbench.data.tensor_folder import _read, decode
    from optbench.spec.recipe import Recipe

    _, root = packed
    (root / "manifest.json").unlink()
    _tar(root / "train-000009.tar", {"bad.png": b"not a png", "bad.cls": b"1"})
    data = load_dataset(wds(root, img_size=16))
    last = len(split_samples(data, "train")) - 1
    cpu = torch.device("cpu")
    pil = FolderBatches(data, 4, Recipe(), seed=0, device=cpu, workers=0)
    with pytest.raises(UnreadableImage, match=r"train-000009.tar:bad.png: not a readable image"):
        pil.train_set[(0, last, "image")]
    member = split_samples(data, "train")[last][0]  # as the reader threads and decoder see it
    with pytest.raises(UnreadableImage, match=r"train-000009.tar:bad.png: not a readable image"):
        decode([_read(member)], [member], cpu)


# --- labels, read strictly and bounded (issue 43, item 3) ---------------------------------------


def _one_more_sample(root: Path, members) -> None:
    """A shard of one more training sample (members), the pack's manifest and index gone."""
    (root / "manifest.json").unlink()
    (root / shards.INDEX_NAME).unlink()
    _tar(root / "train-000009.tar", members)


PNG = b"\x89PNG\r\n\x1a\n"  # an image member: the checks decode none


# What Python's int() reads and a .cls is not: int("1_0") is 10, int(" +3 ") is 3, int("٣") is 3.
NOT_A_CLASS = [b"1_0", b"+3", b" 1", b"1 ", b"\t1", b"1\n\n", b"1\r\n", b"0x1", b"-1", b"1.0"]
NOT_A_CLASS += ["\u0661".encode(), b"", b"\x001"]


@pytest.mark.parametrize("text", NOT_A_CLASS, ids=repr)
def test_a_cls_member_is_a_plain_non_negative_integer(packed, text):
    _, root = packed
    _one_more_sample(root, {"a.png": PNG, "a.cls": text})
    with pytest.raises(UsageError, match=r"train-000009.tar: member 'a.cls' is not a class index"):
        check_dataset_files(wds(root))


@pytest.mark.parametrize("text", [b"1", b"1\n", b"01"], ids=repr)
def test_a_cls_member_may_end_in_a_newline(packed, text):
    _, root = packed
    _one_more_sample(root, {"a.png": PNG, "a.cls": text})
    check_dataset_files(wds(root))
    assert split_samples(load_dataset(wds(root, img_size=16)), "train")[-1][1] == 1


def test_two_cls_members_of_one_sample_are_refused(packed):
    # tar keeps both; the last one won
    _, root = packed
    _one_more_sample(root, [("a.png", PNG), ("a.cls", b"0"), ("a.cls", b"2")])
    with pytest.raises(UsageError, match=r"train-000009.tar: sample 'a' has two .cls members"):
        check_dataset_files(wds(root))


def test_a_huge_class_is_one_line_naming_shard_and_member(packed, cli):
    # it was a MemoryError: every class up to it was listed
    _, root = packed
    _one_more_sample(root, {"a.png": PNG, "a.cls": b"100000000000"})
    code, _, err = cli(
        *("train", "vit_c_w64_16px", "--dataset", "imagefolder", "--data-root", "shards"),
        *("--layout", "wds", "--img-size", "16", "--optimizer", "sgd", "--lr", "0.1"),
        *("--wd", "0", "--epochs", "1", "--batch-size", "4", "--out", "out"),
    )
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "train-000009.tar: member 'a.cls': class 100000000000" in err, err
    assert "every class needs a training sample" in err, err
    assert not (root.parent / "out").exists()


def test_a_class_beyond_the_datasets_classes_is_refused(packed, monkeypatch):
    # a dataset of published classes (imagenet: 1000) has no class beyond them, whatever the
    # shards hold; here 2 classes, and the packed shards hold classes 0, 1 and 2
    import dataclasses

    from optbench.spec.catalogue import CATALOGUE

    _, root = packed
    monkeypatch.setitem(
        CATALOGUE, "imagenet", dataclasses.replace(CATALOGUE["imagenet"], classes=2)
    )
    with pytest.raises(
        UsageError,
        match=r"train-000001.tar: member '00000008.cls': class 2, but imagenet has 2 classes",
    ):
        check_dataset_files(Dataset(name="imagenet", root=root, layout="wds"))


@pytest.mark.parametrize("cls", [10**12, 12])
def test_a_cached_index_with_a_class_out_of_range_is_refused(packed, cls):
    # the index names 12 training samples: no class of them is 12 or more
    _, root = packed
    index = json.loads((root / shards.INDEX_NAME).read_text())
    index["train"][0][4] = cls
    (root / shards.INDEX_NAME).write_text(json.dumps(index))
    with pytest.raises(UsageError, match="is not a valid shard index .*class"):
        check_dataset_files(wds(root))


# --- manifest.json, read as untrusted input (issue 43, item 5) ----------------------------------


def _manifest_with(root: Path, change) -> None:
    manifest = json.loads((root / "manifest.json").read_text())
    change(manifest)
    (root / "manifest.json").write_text(json.dumps(manifest))


def _set(path: str, value):
    """A change setting the manifest's field at the dotted `path` (list positions as numbers)."""

    def change(manifest):
        *parents, last = [int(p) if p.isdigit() else p for p in path.split(".")]
        node = manifest
        for part in parents:
            node = node[part]
        node[last] = value

    return change


BAD_MANIFESTS = {
    "a count as text": (_set("splits.train.shards.0.images", "5"), "splits.train.shards.0.images"),
    "a name as a number": (_set("splits.val.shards.0.name", 7), "splits.val.shards.0.name"),
    "a name with a folder": (
        _set("splits.val.shards.0.name", "../x.tar"),
        "splits.val.shards.0.name",
    ),
    "a count below 0": (_set("splits.train.shards.1.images", -5), "splits.train.shards.1.images"),
    "a count of 5.0": (_set("splits.train.shards.1.images", 5.0), "splits.train.shards.1.images"),
    "no shards": (_set("splits.val", {}), "splits.val.shards"),
    "shards an object": (_set("splits.val.shards", {"a": 1}), "splits.val.shards"),
    "a class name a number": (_set("classes.1", 3), "classes.1"),
    "deep nesting": (_set("classes", json.loads("[" * 200 + "]" * 200)), "classes"),
}


@pytest.mark.parametrize(("change", "field"), BAD_MANIFESTS.values(), ids=BAD_MANIFESTS)
def test_a_crafted_manifest_is_one_line_naming_its_field(packed, cli, change, field):
    _, root = packed
    _manifest_with(root, change)
    with pytest.raises(UsageError, match=f"manifest.json: {field}"):
        check_dataset_files(wds(root))


def test_a_manifest_nested_beyond_pythons_stack_is_one_line(packed):
    _, root = packed
    (root / "manifest.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(UsageError, match="manifest.json cannot be read"):
        check_dataset_files(wds(root))


@pytest.mark.parametrize("case", ["a count as text", "a name as a number", "deep nesting"])
def test_optbench_train_on_a_crafted_manifest_is_one_line_exit_2_writing_nothing(packed, cli, case):
    # each was a traceback, exit 1
    _, root = packed
    change, field = BAD_MANIFESTS[case]
    _manifest_with(root, change)
    code, _, err = cli(
        *("train", "vit_c_w64_16px", "--dataset", "imagefolder", "--data-root", "shards"),
        *("--layout", "wds", "--img-size", "16", "--optimizer", "sgd", "--lr", "0.1"),
        *("--wd", "0", "--epochs", "1", "--batch-size", "4", "--out", "out"),
    )
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert f"error: dataset.root: shards/manifest.json: {field}" in err, err
    assert not (root.parent / "out").exists()


def test_compressed_shards_are_refused_saying_they_are_not_read(packed, cli):
    # issue 43, item 10: it said only "holds no *train*.tar shard"
    import gzip

    _, root = packed
    for tar in sorted(root.glob("*.tar")):
        (root / f"{tar.name}.gz").write_bytes(gzip.compress(tar.read_bytes()))
        tar.unlink()
    (root / "manifest.json").unlink()
    code, _, err = cli(
        *("train", "vit_c_w64_16px", "--dataset", "imagefolder", "--data-root", "shards"),
        *("--layout", "wds", "--img-size", "16", "--optimizer", "sgd", "--lr", "0.1"),
        *("--wd", "0", "--epochs", "1", "--batch-size", "4", "--out", "out"),
    )
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "holds no *train*.tar shard (3 compressed, such as train-000000.tar.gz: " in err, err
    assert "compressed shards are not read" in err, err
    assert not (root.parent / "out").exists()
