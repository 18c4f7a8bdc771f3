"""Whose a result file is, one rule (optbench/run/attempts.py: `whose`) for every reader of a
trial's folder: catching up (a file found on disk), submitting (a file kept for a job that
outlived its driver) and recording a job's end take the same file as the attempt's, or not."""

from __future__ import annotations

import json
from types import SimpleNamespace

from optbench.plan.trials import plan
from optbench.run.attempts import holds_its_result, record_end, record_from_disk
from optbench.spec.schema import parse_spec
from optbench.trial.results import RESULT_FILE

# The file in the trial's folder while its attempt 2 runs (attempt 1 failed): what a worker's
# result.json says (None: no file, bytes: the file's bytes), and whether it is attempt 2's.
CASES = {
    "no file": (None, False),
    "attempt 2's": ({"attempt": 2}, True),
    "attempt 2's failure": ({"attempt": 2, "status": "failed", "message": "E"}, True),
    "attempt 1's": ({"attempt": 1}, False),
    "another configuration's": ({"attempt": 2, "seed": 99}, False),
    # written before results named their attempt: a finished one is the latest attempt's, a
    # failed one an earlier attempt's crash (a failed attempt's file was left in its folder)
    "unnumbered, finished": ({"attempt": None}, True),
    "unnumbered, failed": ({"attempt": None, "status": "failed", "message": "E"}, False),
}


READERS = ("submit", "catch-up", "end")


class _Recorder:
    """The store's side of recording: what was recorded for each trial (result, metrics)."""

    def __init__(self):
        self.recorded = {}

    def record(self, item, result, metrics, timing_note=None) -> bool:
        self.recorded[item.trial.key] = result
        return True


def _second_attempts(tiny_dict, n: int) -> list[SimpleNamespace]:
    """`n` trials of a study, each running its attempt 2, as the store hands them out."""
    tiny_dict["models"], tiny_dict["search"]["n_samples"] = tiny_dict["models"][:1], n
    return [SimpleNamespace(trial=trial, attempts=2) for trial in plan(parse_spec(tiny_dict))]


def _write(item, changes) -> None:
    """The worker's result.json that `changes` describes, in `item`'s folder (None: none)."""
    if changes is None:
        return
    config = item.trial.config.model_dump(mode="json")
    config.update({k: v for k, v in changes.items() if k == "seed"})
    data = {"status": "finished", "final_error": 7.0, "best_error": 6.0, "epochs": 1}
    data |= {"config": config, **{k: v for k, v in changes.items() if k != "seed"}}
    if data["status"] == "failed":
        data["final_error"] = data["best_error"] = None
    item.trial.out_dir.mkdir(parents=True)
    (item.trial.out_dir / RESULT_FILE).write_text(json.dumps(data))


def test_every_reader_of_a_trial_folder_takes_the_same_file_as_the_attempts(tiny_dict):
    cases = {(case, reader) for case in CASES for reader in READERS}
    items, store = _second_attempts(tiny_dict, len(cases)), _Recorder()
    folders = dict(zip(sorted(cases), items, strict=True))
    for (case, _), item in folders.items():
        _write(item, CASES[case][0])
    kept, found = {}, {}
    for (case, reader), item in folders.items():
        if reader == "submit":  # the folder keeps the attempt's file (its job is followed again)
            kept[case] = holds_its_result(item)
        elif reader == "catch-up":  # the attempt's file is recorded; any other is left alone
            found[case] = record_from_disk(store, item)
        else:  # a job's end: the attempt's file is its result, any other a failure named
            record_end(store, item, None)
    for case, (changes, its_own) in CASES.items():
        assert kept[case] is its_own and found[case] is its_own, case
        caught_up = store.recorded.get(folders[case, "catch-up"].trial.key)
        item = folders[case, "end"]
        ended = store.recorded[item.trial.key]
        if its_own:  # the worker's result, as it wrote it, on both
            worker = ((changes or {}).get("status", "finished"), "worker", changes.get("attempt"))
            for result in (caught_up, ended):
                assert (result.status, result.origin, result.attempt) == worker, case
        else:
            assert caught_up is None, case
            assert (ended.status, ended.origin, ended.attempt) == ("failed", "driver", 2), case
            assert str(item.trial.out_dir) in ended.message, case


def test_an_invalid_file_is_the_attempts_failure_for_every_reader(tiny_dict):
    # the folder is cleared before each attempt: a file too broken to say whose it is, is its
    items, store = _second_attempts(tiny_dict, 3), _Recorder()
    for item in items:
        _write(item, {"attempt": 2, "final_error": "low"})
    submitted, caught_up, ended = items
    assert not holds_its_result(submitted)  # cleared before the job runs
    assert record_from_disk(store, caught_up)
    record_end(store, ended, "the executor's line")
    for item in (caught_up, ended):
        result = store.recorded[item.trial.key]
        assert (result.status, result.origin, result.attempt) == ("failed", "driver", 2)
        assert result.message.startswith(str(item.trial.out_dir / RESULT_FILE))
