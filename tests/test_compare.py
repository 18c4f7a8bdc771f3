"""`optbench compare RUN REFERENCE`: two reports matched trial by trial, digests and errors."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

REFERENCE = Path(__file__).resolve().parents[1] / "docs" / "reference" / "quickstart"


def test_a_run_is_compared_with_the_committed_reference(cli, tmp_path):
    trials = pd.read_csv(REFERENCE / "trials.csv")
    assert len(trials) == 30
    run = tmp_path / "run"
    run.mkdir()
    mine = trials.sample(frac=1.0, random_state=1).iloc[2:].copy()  # 28 of 30, reordered
    other = mine.index[0]  # one trial trained elsewhere: another digest, 1.5 points more error
    mine.loc[other, "digest"] = "1" * 64
    mine.loc[other, "final_error"] += 1.5
    mine.to_csv(run / "trials.csv", index=False)

    code, out, err = cli("compare", str(run), str(REFERENCE))
    assert code == 0, err
    first = out.splitlines()[0]
    assert "28 trials in both, digests equal 27, unequal 1" in first
    assert "only in the run 0, only in the reference 2" in first
    differ = out.split("trials whose digests differ:")[1]
    assert trials.loc[other, "model"] in differ and "1.50" in differ

    code, out, _ = cli("compare", str(REFERENCE), str(REFERENCE))
    assert "30 trials in both, digests equal 30, unequal 0" in out

    code, _, err = cli("compare", str(tmp_path / "nowhere"), str(REFERENCE))
    assert code == 2 and "no trials.csv" in err


def test_when_no_digest_matches_compare_says_what_differs(cli, tmp_path):
    trials = pd.read_csv(REFERENCE / "trials.csv")
    run = tmp_path / "run"
    run.mkdir()
    mine = trials.copy()
    mine["digest"] = "2" * 64  # every trial trained on another machine
    mine["device"] = "cpu: Some Other CPU"
    mine.to_csv(run / "trials.csv", index=False)
    code, out, err = cli("compare", str(run), str(REFERENCE))
    assert code == 0, err
    why = out.splitlines()[1]
    assert why.startswith("no digest matches: the device (cpu: Some Other CPU here; ")
    assert "training code" not in why  # the fingerprints are the same

    # a reference written before trials.csv recorded torch and the thread count
    older = tmp_path / "older"
    older.mkdir()
    trials.drop(columns=["torch", "threads"]).to_csv(older / "trials.csv", index=False)
    mine["device"] = trials["device"]
    mine.to_csv(run / "trials.csv", index=False)
    code, out, _ = cli("compare", str(run), str(older))
    assert "not recorded on both sides: torch" in out.splitlines()[1]

    # both sides record torch and threads (trials.csv from this version on): a thread count
    # that differs is named
    reference = tmp_path / "reference"
    reference.mkdir()
    theirs = trials.assign(torch="2.14.1", threads=1)
    theirs.to_csv(reference / "trials.csv", index=False)
    mine.assign(torch="2.14.1", threads=2).to_csv(run / "trials.csv", index=False)
    code, out, _ = cli("compare", str(run), str(reference))
    assert out.splitlines()[1].startswith("no digest matches: the thread count (2 here; 1 in ")
