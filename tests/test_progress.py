"""What a run shows while it runs: true running counts, time left from epoch timings, a line per
event without a terminal, `optbench train`'s epoch lines and `optbench status --trials`."""

from __future__ import annotations

import io
import json
import os
import re
from types import SimpleNamespace

import pytest
import yaml
from rich.console import Console

from optbench.executors.local import InlineExecutor, LocalExecutor
from optbench.plan.trials import plan
from optbench.run.driver import run_study
from optbench.run.progress import EventLog, StudyProgress, read_trial_epochs
from optbench.spec.schema import parse_spec
from optbench.store.database import StoredTrial


def _metrics(out_dir, seconds, errors=None, written_at=None):
    """A metrics file of len(seconds) epochs, last written at `written_at` (time.time)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    errors = errors or [50.0] * len(seconds)
    lines = [
        {"epoch": i + 1, "epoch_s": s, "val_error": e}
        for i, (s, e) in enumerate(zip(seconds, errors, strict=True))
    ]
    (out_dir / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    if written_at is not None:
        os.utime(out_dir / "metrics.jsonl", (written_at, written_at))


def _four_trials(tiny_dict):
    """vit_p (P) and vit_c (C), two samples each, 10 epochs."""
    tiny_dict["epochs"] = 10
    stored = [StoredTrial(t) for t in plan(parse_spec(tiny_dict))]
    assert [s.trial.cell.model for s in stored] == ["vit_p_w64_16px"] * 2 + ["vit_c_w64_16px"] * 2
    return stored


def test_time_left_comes_from_epoch_timings_and_compute_for_untimed_cells(tiny_dict):
    p0, p1, c0, c1 = stored = _four_trials(tiny_dict)
    flops = {"vit_p_w64_16px": 1.0, "vit_c_w64_16px": 2.0}
    progress = StudyProgress(stored, flops_of=flops.get)
    progress.start(p0.trial.key)
    progress.start(p1.trial.key)
    progress.read_epochs(force=True)
    assert progress.eta_s() is None  # nothing timed yet
    # 3 of 10 epochs done 6 s after the trial started (start, training, evaluation): 2 s each
    progress.started_at[p0.trial.key] = 1000.0
    _metrics(p0.trial.out_dir, [1.0, 1.5, 1.2], written_at=1006.0)
    progress.read_epochs(force=True)
    # Written out: P trials 7 and 10 epochs at 2 s; C trials 10 epochs each at 2 s x (2 / 1)
    # multiply-adds = 4 s; 114 s of work over the 2 trials seen running at once.
    left = [7 * 2.0, 10 * 2.0, 10 * 4.0, 10 * 4.0]
    assert progress.eta_s() == pytest.approx(sum(left) / 2)
    assert progress.counts()[("vit_p_w64_16px", "adamw", 10)]["running"] == 2
    # Without multiply-add counts an untimed cell is taken to be as fast as the timed ones.
    progress.flops_of = None
    assert progress.eta_s() == pytest.approx((7 + 10 + 10 + 10) * 2.0 / 2)


def test_time_left_is_never_shorter_than_the_longest_trial(tiny_dict):
    p0, *rest = stored = _four_trials(tiny_dict)
    for item in rest:
        item.status = "finished"
    progress = StudyProgress(stored)
    progress.start(p0.trial.key)
    progress.start(rest[0].trial.key)  # seen: two at once
    progress.end(rest[0].trial.key)
    progress.started_at[p0.trial.key] = 1000.0
    _metrics(p0.trial.out_dir, [2.0], written_at=1003.0)  # its first epoch took 3 s
    progress.read_epochs(force=True)
    assert progress.eta_s() == pytest.approx(9 * 3.0)  # one trial left: slots do not split it


def test_best_error_per_cell_and_recorded_timings(tiny_dict):
    p0, p1, c0, c1 = stored = _four_trials(tiny_dict)
    for item, error, wall in ((p0, 30.0, 120.0), (p1, 20.0, 100.0)):
        item.status = "finished"
        item.record = SimpleNamespace(
            user_attrs={"final_error": error, "wall_s": wall, "epochs_run": 10}
        )
    progress = StudyProgress(stored)
    assert progress.best_errors() == {("vit_p_w64_16px", "adamw", 10): 20.0}
    assert progress.epoch_seconds() == {("vit_p_w64_16px", "adamw", 10): 11.0}  # 12 and 10 s
    assert progress.eta_s() == pytest.approx(2 * 10 * 11.0)  # one slot: C's two trials in turn


def test_a_half_written_metrics_line_is_left_out(tmp_path):
    _metrics(tmp_path, [1.0, 2.0], [40.0, 30.0])
    with open(tmp_path / "metrics.jsonl", "a") as f:
        f.write('{"epoch": 3, "epo')  # the worker is writing it
    epochs = read_trial_epochs(tmp_path)
    assert (epochs.done, epochs.epoch_s, epochs.last_error) == (2, (1.0, 2.0), 30.0)
    assert read_trial_epochs(tmp_path / "nowhere").done == 0


def test_the_live_view_reads_metrics_through_the_capped_reader(tmp_path, monkeypatch):
    # One reader of metrics.jsonl (train.results.read_metrics): the live view's partial mode
    # gives up quietly where the driver's strict mode refuses the file.
    from optbench.trial import results

    _metrics(tmp_path / "big", [1.0, 2.0])
    monkeypatch.setattr(results, "MAX_METRICS_BYTES", 40)  # smaller than the two lines
    with pytest.raises(results.InvalidResultFile, match="larger than 40 bytes"):
        results.read_metrics(tmp_path / "big")
    assert read_trial_epochs(tmp_path / "big").done == 0
    monkeypatch.undo()
    _metrics(tmp_path / "real", [1.0])
    (tmp_path / "planted").mkdir()
    (tmp_path / "planted" / "metrics.jsonl").symlink_to(tmp_path / "real" / "metrics.jsonl")
    with pytest.raises(results.InvalidResultFile, match="symbolic link"):
        results.read_metrics(tmp_path / "planted")
    assert read_trial_epochs(tmp_path / "planted").done == 0
    with open(tmp_path / "real" / "metrics.jsonl", "a") as f:
        f.write('{"epoch": "two"}\n')  # not an epoch's metrics: the strict reader names the line
    with pytest.raises(results.InvalidResultFile, match="line 2"):
        results.read_metrics(tmp_path / "real")
    assert read_trial_epochs(tmp_path / "real").done == 1


class _Watched(LocalExecutor):
    """A local pool that notes how many trials it said were running at once."""

    def __init__(self, workers):
        super().__init__(workers)
        self.running: set[str] = set()
        self.most = 0

    def poll(self, timeout):
        events = super().poll(timeout)
        for event in events:
            if event.kind == "running":
                self.running.add(event.key)
            else:
                self.running.discard(event.key)
            self.most = max(self.most, len(self.running))
        return events


@pytest.mark.slow
def test_running_counts_are_the_trials_workers_run(tiny_dict):
    # A process pool queues a job beyond its workers and marks it running: one worker showed two.
    spec = parse_spec(tiny_dict)
    executor = _Watched(workers=1)
    progress = run_study(spec, executor, console=Console(file=io.StringIO()), live=False)
    assert progress.ran == 4 and progress.slots == 1
    assert executor.most == 1


@pytest.mark.slow
def test_without_a_terminal_each_event_is_a_line(tiny_dict):
    spec = parse_spec(tiny_dict)
    out = io.StringIO()
    run_study(spec, InlineExecutor(), console=Console(file=out, width=200), live=False)
    lines = out.getvalue().splitlines()
    started = [x for x in lines if re.match(r"\[\d+:\d\d\] started vit_", x)]
    ended = [x for x in lines if re.search(r"seed 0 finished, error \d+\.\d\d% in \d+:\d\d", x)]
    assert len(started) == 4 and len(ended) == 4
    assert any("best error" in x for x in lines)  # the final table


def test_a_summary_line_when_due_and_retries_are_said(tiny_dict):
    stored = _four_trials(tiny_dict)
    stored[0].status, stored[1].attempts = "finished", 2
    out = io.StringIO()
    progress = StudyProgress(stored)
    progress.start(stored[1].trial.key)
    log = EventLog(progress, Console(file=out, width=300), every_s=0.0)
    log.retried(stored[1], retries=2)
    log.tick()
    first, summary = out.getvalue().splitlines()
    assert first.endswith("sample 1 seed 0: attempt 2 of 3")
    assert "1 of 4 trials done (1 finished, 0 diverged), 0 failed, 1 running, 2 pending" in summary
    assert "time left after the first epoch" in summary


@pytest.mark.slow
def test_train_prints_a_line_per_epoch(cli, tmp_path):
    code, out, err = cli(
        "train", "vit_p_w64_16px", "--dataset", "digits",
        "--optimizer", "adamw", "--lr", "2e-3", "--wd", "0.05", "--epochs", "2",
        "--warmup-epochs", "0.5", "--img-size", "16", "--out", str(tmp_path / "t"),
        "--ref-batch", "2048",  # the lr is scaled: the banner says to what
    )  # fmt: skip
    assert code == 0, err
    epochs = [x for x in err.splitlines() if x.startswith("epoch ")]
    assert [x.split()[1] for x in epochs] == ["1/2", "2/2"]
    metrics = [json.loads(x) for x in (tmp_path / "t" / "metrics.jsonl").read_text().splitlines()]
    assert f"val error {metrics[1]['val_error']:.2f}%" in epochs[1]
    assert json.loads(out)["status"] == "finished"  # stdout is still the result's JSON
    # before the epochs: the lr the optimizer got (after ref_batch scaling) and the recipe
    from optbench.trial.config import TrainConfig

    saved = json.loads((tmp_path / "t" / "result.json").read_text())["config"]
    cfg = TrainConfig.model_validate(saved)
    banner, recipe = err.splitlines()[:2]
    assert f"lr_used {cfg.lr_used:.4g} (lr 0.002 x batch 128 / ref_batch {cfg.ref_batch})" in banner
    assert cfg.lr_used < 2e-3 and "recipe basic: cosine schedule, warmup 0.5 epochs" in recipe


def test_status_lists_trials_in_progress_from_their_metrics(cli, tiny_dict, tmp_path):
    tiny_dict["output"] = "results"
    tiny_dict["epochs"] = 3
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(tiny_dict))
    first = plan(parse_spec(tiny_dict))[0]  # its folder is relative: cli runs in tmp_path
    _metrics(first.out_dir, [1.0, 1.0], [60.0, 45.5])
    code, out, err = cli("status", "s.yaml", "--trials")
    assert code == 0, err
    (row,) = [x for x in out.splitlines() if "sample 0" in x and "vit_p" in x]
    assert "2/3" in row and "45.50%" in row and "ago" in row
