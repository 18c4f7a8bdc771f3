"""Where a trial's seconds go (issue 55): result.json's `timing` (trial/timing.py), the parts a
worker's process pays once, `optbench status`'s cost line per cell, and what a warm worker keeps
(its dataset) or skips (checkpoints beyond their cadence) without changing what it computes."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch
import yaml
from cli_inprocess import tiny_config

from optbench.plan.cost_notes import spent_notes
from optbench.plan.trials import plan
from optbench.spec.schema import parse_spec
from optbench.store.database import Store
from optbench.train import loop, parts
from optbench.train.checkpoint import CHECKPOINT_FILE
from optbench.train.run_trial import run_trial
from optbench.trial import timing
from optbench.trial.results import load_result
from optbench.trial.timing import PARTS, PartClock, TrialTiming


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


class FakeClock:
    """time.perf_counter that moves only when told."""

    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_part_inside_another_pauses_it_so_each_second_counts_once(monkeypatch):
    fake = FakeClock()
    monkeypatch.setattr(timing.time, "perf_counter", fake)
    clock = PartClock()
    with clock.part("model"):
        fake.now += 1.0
        with clock.part("data"):  # the batches, built inside the model's part (parts.py)
            fake.now += 3.0
        fake.now += 0.5
    fake.now += 10.0  # between parts: in none
    with clock.part("epochs"):
        fake.now += 2.0
    got = clock.timing()
    assert (got.model, got.data, got.epochs) == (1.5, 3.0, 2.0)
    assert got.within_wall() == 6.5
    with pytest.raises(ValueError, match="lunch"):
        with clock.part("lunch"):
            pass


# What a result file's `timing` may hold instead of seconds (issue 68): each reads as absent, the
# result kept, with a note naming the file and the field
CRAFTED_TIMINGS = {
    "text": ("soon", "timing: not an object of seconds per part"),
    "a list": ([1.0, 2.0], "timing: not an object of seconds per part"),
    "NaN": ({"epochs": float("nan")}, "timing.epochs: Input should be a finite number"),
    "negative": ({"epochs": 1.0, "checkpoints": -2.0}, "timing.checkpoints: Input should be"),
    "nested junk": ({"epochs": {"a": [1]}}, "timing.epochs: Input should be a valid number"),
    "text seconds": ({"epochs": "soon"}, "timing.epochs: Input should be a valid number"),
    "an unknown part": ({"\x1b[2Jlunch": 1.0}, "timing: holds a part that is none of a trial's"),
}


def test_a_result_without_timing_or_with_a_crafted_one_reads_as_one_without(tmp_path):
    from optbench.trial.config import TrialResult
    from optbench.trial.results import InvalidResultFile

    kept = TrialResult(status="finished", final_error=7.0, epochs=2, config=tiny_config())
    data = json.loads(kept.model_dump_json())
    data.pop("timing")  # as written before issue 55
    (tmp_path / "result.json").write_text(json.dumps(data))
    assert load_result(tmp_path).timing is None
    for crafted, why in CRAFTED_TIMINGS.values():
        (tmp_path / "result.json").write_text(json.dumps({**data, "timing": crafted}))
        notes: list[str] = []
        result = load_result(tmp_path, notes=notes)
        assert result == kept.model_copy(update={"timing": None})  # its errors are kept
        [note] = notes
        assert note.startswith(f"{tmp_path / 'result.json'}: {why}") and note.isprintable()
    # beside another field that is wrong, the file is still not a result
    bad = {**data, "timing": "soon", "final_error": "low"}
    (tmp_path / "result.json").write_text(json.dumps(bad))
    with pytest.raises(InvalidResultFile, match="final_error"):
        load_result(tmp_path)


def test_the_checkpoint_cadence_costs_at_most_its_share(monkeypatch):
    fake = FakeClock()
    monkeypatch.setattr(loop.time, "perf_counter", fake)
    cadence = loop.CheckpointCadence()
    assert cadence.due(last_epoch=False)  # the first epoch end: always
    cadence.written(1.0)  # a write of 1 s: the next once 1 / CHECKPOINT_SHARE s have passed
    fake.now += 1.0 / loop.CHECKPOINT_SHARE - 0.5
    assert not cadence.due(last_epoch=False)
    fake.now += 0.5
    assert cadence.due(last_epoch=False)
    assert not cadence.due(last_epoch=True)  # the result follows: nothing left to resume
    every = loop.CheckpointCadence(every_epoch=True)  # keep_checkpoint: the caller reads it
    every.written(1.0)
    assert every.due(last_epoch=False) and every.due(last_epoch=True)


class _Store:
    """Store.read's shape: each trial finished with the given timing record."""

    def __init__(self, records: list[dict | None]):
        self.records = records

    def read(self, trials):
        return [
            SimpleNamespace(
                trial=t,
                status="finished",
                is_result=True,
                record=SimpleNamespace(user_attrs={} if r is None else {"timing": r}),
            )
            for t, r in zip(trials, self.records, strict=False)
        ]


def test_status_says_per_cell_the_share_outside_the_epochs_and_its_largest_parts(tiny_dict):
    tiny_dict["models"] = ["vit_p_w64_16px"]
    spec = parse_spec(tiny_dict)
    first = {"epochs": 6.0, "evaluation": 1.0, "data": 0.5, "process_start_s": 1.5,
             "imports_s": 1.0, "process_trial": 1}  # fmt: skip
    second = {"epochs": 6.0, "evaluation": 1.0, "checkpoints": 1.0, "process_trial": 2}
    [line] = spent_notes(spec, _Store([first, second]))
    # paid: 10 + 8 = 18 s, 12 of them in the epochs
    assert line.startswith("cost vit_p_w64_16px/adamw/e1 (2 trial(s), 9 s each): 33.3% outside")
    assert "(process start 13.9%, evaluation 11.1%," in line
    assert spent_notes(spec, _Store([None, None])) == []  # results from before issue 55


def test_status_says_per_cell_where_its_trials_steps_went(tiny_dict):
    tiny_dict["models"] = ["vit_p_w64_16px"]
    tiny_dict["search"]["n_samples"] = 3
    spec = parse_spec(tiny_dict)
    steps = {"input_wait": 1.0, "to_device": 0.5, "augment": 1.5, "forward_backward": 5.0,
             "optimizer": 1.5, "ema": 0.5, "host_reads": 0.0, "count": 100}  # fmt: skip
    first = {"epochs": 12.0, "steps": steps}
    second = {"epochs": 12.0, "steps": {**steps, "input_wait": 3.0, "count": 100}}
    old = {"epochs": 12.0}  # from before the steps were timed: in the cost line only
    [cost, line] = spent_notes(spec, _Store([first, second, old]))
    assert cost.startswith("cost vit_p_w64_16px/adamw/e1 (3 trial(s),")
    # 22 s over 200 steps: input wait 4 s = 18.2%, forward and backward 10 s = 45.5%
    assert line.startswith("steps vit_p_w64_16px/adamw/e1 (200 step(s), 110.0 ms each, host):")
    assert "input_wait 18.2%" in line and "forward_backward 45.5%" in line
    assert "to_device 4.5%" in line and "host_reads 0.0%" in line


@pytest.mark.parametrize("name", CRAFTED_TIMINGS)
def test_status_reads_a_timing_edited_in_the_store_as_absent_and_says_so(tiny_dict, name):
    crafted, why = CRAFTED_TIMINGS[name]
    tiny_dict["models"] = ["vit_p_w64_16px"]
    spec = parse_spec(tiny_dict)
    good = {"epochs": 6.0, "evaluation": 2.0}
    lines = spent_notes(spec, _Store([good, crafted]))
    assert lines[0].startswith("cost vit_p_w64_16px/adamw/e1 (1 trial(s), 8 s each): 25.0% ")
    assert lines[1].startswith("timing vit_p_w64_16px/adamw/e1: 1 result(s) hold a timing that")
    assert why in lines[1]
    assert all(line.isprintable() for line in lines)


@pytest.mark.slow
def test_a_finished_trials_result_has_every_part_and_they_sum_to_its_wall_time(
    tmp_path, monkeypatch
):
    # a process no worker marked: a test before this one in the same pytest process may have
    # run a worker's trial code in-process
    from optbench.trial import timing

    monkeypatch.setattr(timing, "_PROCESS", {"start_s": None, "imports_s": None, "programs": 0})
    result = run_trial(tiny_config(epochs=3), tmp_path)
    assert result.status == "finished"
    recorded = json.loads((tmp_path / "result.json").read_text())["timing"]
    assert set(PARTS) <= set(recorded)
    got = TrialTiming(**recorded)
    assert all(getattr(got, p) > 0 for p in PARTS if p != "setup"), got
    assert abs(got.within_wall() - result.wall_s) <= 0.02 * result.wall_s + 0.05
    # outside a worker no process start is anyone's to pay
    assert got.process_start_s is None and got.process_trial is None
    # 3 epochs: checkpoints at the first epoch's end (and later ones as their cost allows)
    # but never at the last, whose result follows
    assert not (tmp_path / CHECKPOINT_FILE).exists()


@pytest.mark.slow
def test_a_warm_process_loads_its_dataset_once_and_trains_the_same_weights(tmp_path, monkeypatch):
    loads = []
    load = parts.load_dataset
    monkeypatch.setattr(parts, "load_dataset", lambda *a: loads.append(1) or load(*a))
    parts._warm.update(key=None, data=None, device=None, on_device=None)
    first = run_trial(tiny_config(epochs=1), tmp_path / "a")
    warm = run_trial(tiny_config(epochs=1, lr=1e-2), tmp_path / "b")
    assert len(loads) == 1  # the second trial of the same dataset reads none
    parts._warm.update(key=None, data=None, device=None, on_device=None)
    cold = run_trial(tiny_config(epochs=1, lr=1e-2), tmp_path / "c")
    assert len(loads) == 2 and first.status == warm.status == "finished"
    assert warm.digest == cold.digest and warm.final_error == cold.final_error


@pytest.mark.slow
def test_a_local_worker_pays_its_start_once_and_status_prints_the_cost_line(
    cli, one_model, tmp_path
):
    one_model["search"]["n_samples"] = 2
    one_model["executor"] = {"kind": "local", "workers": 1}
    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump(one_model))
    code, _, err = cli("run", "tiny.yaml")
    assert code == 0, err
    spec = parse_spec(one_model)
    results = [load_result(t.out_dir) for t in plan(spec)]
    by_order = sorted((r.timing for r in results), key=lambda t: t.process_trial)
    assert [t.process_trial for t in by_order] == [1, 2]  # one worker, warm for the second
    assert by_order[0].process_start_s > 0 and by_order[0].imports_s > 0
    assert by_order[1].process_start_s is None and by_order[1].imports_s is None
    for r in results:
        assert abs(r.timing.within_wall() - r.wall_s) <= 0.02 * r.wall_s + 0.05
    # the report's trials table: each trial's seconds outside its epochs
    frame = Store(spec, create=False).frame(plan(spec))
    expected = sorted(r.wall_s - r.timing.epochs for r in results)
    assert sorted(frame["outside_epochs_s"]) == pytest.approx(expected)
    code, out, err = cli("status", "tiny.yaml")
    flat = " ".join(out.split())
    assert code == 0, err
    assert "cost vit_p_w64_16px/adamw/e1 (2 trial(s)," in flat and "outside the epochs" in flat


def test_a_warm_process_lists_its_image_folders_once_until_they_change(tmp_path, monkeypatch):
    """Issue 55: a worker's later trials find the image folders listed (parts.warm_dataset),
    those of another model of the same input size too; an image added since is listed, not
    missed (a notebook's or the driver's later runs)."""
    from test_data import make_folders

    from optbench.data import folders
    from optbench.spec.recipe import Dataset
    from optbench.train.compute import Compute
    from optbench.train.distributed import DistContext

    make_folders(tmp_path / "data")
    data = Dataset(name="imagefolder", root=tmp_path / "data")  # at each model's input size
    cfg = tiny_config(model="vit_p_w64_16px", dataset=data, batch_size=4)
    compute = Compute.for_trial(cfg.recipe, "cpu", DistContext(), 0)
    listed = []
    listing = folders.folder_samples
    monkeypatch.setattr(folders, "folder_samples", lambda *a: listed.append(1) or listing(*a))
    first, _ = parts.build_batches(cfg, compute)
    second, _ = parts.build_batches(cfg.model_copy(update={"model": "vit_c_w64_16px"}), compute)
    assert len(listed) == 2 and second.num_train == first.num_train  # train and val, once
    cat = tmp_path / "data" / "train" / "cat"
    (cat / "new.png").write_bytes(next(cat.glob("*.png")).read_bytes())
    third, _ = parts.build_batches(cfg, compute)
    assert len(listed) == 4 and third.num_train == first.num_train + 1
