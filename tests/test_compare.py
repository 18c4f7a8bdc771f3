"""`optbench compare RUN REFERENCE`: two reports matched trial by trial, digests and errors."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from optbench.store.database import user_code_cell

REFERENCE = Path(__file__).resolve().parents[1] / "docs" / "reference" / "quickstart"


def test_a_run_is_compared_with_the_committed_reference(cli, tmp_path):
    trials = pd.read_csv(REFERENCE / "trials.csv")
    n = len(trials)
    assert n >= 18  # the quickstart's first look: 6 samples of its 3 models
    run = tmp_path / "run"
    run.mkdir()
    mine = trials.sample(frac=1.0, random_state=1).iloc[2:].copy()  # all but 2, reordered
    other = mine.index[0]  # one trial trained elsewhere: another digest, 1.5 points more error
    mine.loc[other, "digest"] = "1" * 64
    mine.loc[other, "final_error"] += 1.5
    mine.to_csv(run / "trials.csv", index=False)

    code, out, err = cli("compare", str(run), str(REFERENCE))
    assert code == 0, err
    first = out.splitlines()[0]
    assert f"{n - 2} trials in both, digests equal {n - 3}, unequal 1" in first
    assert "only in the run 0, only in the reference 2" in first
    differ = out.split("trials whose digests differ:")[1]
    assert trials.loc[other, "model"] in differ and "1.50" in differ

    code, out, _ = cli("compare", str(REFERENCE), str(REFERENCE))
    assert f"{n} trials in both, digests equal {n}, unequal 0" in out

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


# --- the machine a result ran on (issue 68, item 5) -----------------------------------------------

MACHINE = {
    "cpu": "AuthenticAMD family 25 model 1 stepping 1",
    "cpu_flags": "avx avx2 fma",
    "cpu_capability": "AVX2",
    "gpu": None,
    "gpu_driver": None,
}


def test_compare_names_the_cpu_capability_that_differs_and_says_when_it_cannot_tell(cli, tmp_path):
    trials = pd.read_csv(REFERENCE / "trials.csv")
    run, reference = tmp_path / "run", tmp_path / "reference"
    run.mkdir()
    reference.mkdir()
    # the same code, torch, threads and CPU model name; another vector kernel set in torch
    mine = trials.assign(digest="3" * 64, **MACHINE)
    mine.to_csv(run / "trials.csv", index=False)
    trials.assign(**{**MACHINE, "cpu_capability": "AVX512"}).to_csv(
        reference / "trials.csv", index=False
    )
    code, out, err = cli("compare", str(run), str(reference))
    assert code == 0, err
    why = out.splitlines()[1]
    assert why == (
        "no digest matches: torch's CPU capability (AVX2 here; AVX512 in the reference) "
        "differ(s) (docs/faults.md)"
    )
    # another CPU family and model under the same name and capability
    other = {**MACHINE, "cpu": "AuthenticAMD family 26 model 2 stepping 1"}
    trials.assign(**other).to_csv(reference / "trials.csv", index=False)
    code, out, _ = cli("compare", str(run), str(reference))
    assert "the CPU (vendor, family, model, stepping) (AuthenticAMD family 25 model 1" in out
    # a reference of results from before the machine was recorded (the committed one's rows
    # without those columns: it has them since its redraw): it cannot tell, and does not guess
    # another library
    before = tmp_path / "before"
    before.mkdir()
    trials.drop(columns=[c for c in MACHINE if c in trials]).to_csv(
        before / "trials.csv", index=False
    )
    code, out, _ = cli("compare", str(run), str(before))
    why = out.splitlines()[1]
    assert "not recorded on both sides: torch's CPU capability, the CPU" in why, why
    assert "cannot tell" in why and "another library" not in why and "GPU" not in why


# --- the study's own modules (issue 54, item 4) ----------------------------------------------------


def _with_user_code(folder: Path, trials: pd.DataFrame, user_code: dict | None) -> Path:
    """A report folder of `trials` whose results were trained with the study's own modules
    `user_code` (as provenance.user_code records them; None: a study without imports), written
    into trials.csv as the store writes it."""
    folder.mkdir()
    trials.assign(user_code=user_code_cell(user_code)).to_csv(folder / "trials.csv", index=False)
    return folder


def test_compare_names_each_user_module_whose_version_or_source_differs(cli, tmp_path):
    trials = pd.read_csv(REFERENCE / "trials.csv")
    same = {"version": "1.0", "digest": "5" * 16}
    recorded = {  # provenance.user_code of the reference's results, then of the run's
        "reference": {
            "lab_models": {"version": "0.1", "digest": "0" * 16},
            "lab_optim": {"version": "2.0", "digest": "1" * 16},
            "lab_gone": {"version": None, "digest": "3" * 16},
            "lab_same": same,
        },
        "run": {
            "lab_models": {"version": "0.2", "digest": "a" * 16},
            "lab_optim": {"version": "2.0", "digest": "b" * 16},  # edited, version kept
            "lab_new": {"version": None, "digest": "c" * 16},
            "lab_same": same,
        },
    }
    reference = _with_user_code(tmp_path / "reference", trials, recorded["reference"])
    run = _with_user_code(tmp_path / "run", trials.assign(digest="2" * 64), recorded["run"])
    code, out, err = cli("compare", str(run), str(reference))
    assert code == 0, err
    named = [line for line in out.splitlines() if line.startswith("user module")]
    assert named == [
        f"user module lab_gone: only in the reference (version (none) digest {'3' * 16})",
        "user module lab_models: version 0.2 here; 0.1 in the reference",
        f"user module lab_new: only here (version (none) digest {'c' * 16})",
        f"user module lab_optim: version 2.0 on both sides, source digest {'b' * 16} here; "
        f"{'1' * 16} in the reference",
    ]
    assert out.splitlines()[1].startswith("no digest matches")  # then the modules

    # the same modules on both sides: none named, and the trials compared as before
    code, out, _ = cli("compare", str(reference), str(reference))
    assert "user module" not in out and f"digests equal {len(trials)}," in out

    # a study without imports against one with them: each module is only on one side
    plain = _with_user_code(tmp_path / "plain", trials, None)
    code, out, _ = cli("compare", str(plain), str(reference))
    assert (
        sum(
            line.endswith("in the reference (version 0.1 digest " + "0" * 16 + ")")
            for line in out.splitlines()
        )
        == 1
    )

    # a report written before trials.csv recorded user code (no such column): nothing said
    (old := tmp_path / "old").mkdir()
    trials.drop(columns="user_code", errors="ignore").to_csv(old / "trials.csv", index=False)
    code, out, _ = cli("compare", str(run), str(old))
    assert code == 0 and "user module" not in out


# --- trials.csv, read as untrusted input (issue 43, item 5) --------------------------------------

ESC = "\x1b"


def _edited(tmp_path: Path, change) -> Path:
    """A report folder whose trials.csv is the reference's with `change(frame)` made."""
    trials = pd.read_csv(REFERENCE / "trials.csv", dtype=str, keep_default_na=False)
    folder = tmp_path / "edited"
    folder.mkdir()
    change(trials)
    trials.to_csv(folder / "trials.csv", index=False)
    return folder


def _cell(column: str, value: str, row: int = 3):
    def change(trials):
        trials.loc[row, column] = value

    return change


BAD_TRIALS = {
    "a text final_error": (_cell("final_error", "nine"), "row 4: final_error"),
    "an error above 100": (_cell("final_error", "130.5"), "row 4: final_error"),
    "epochs 20.0": (_cell("epochs", "20.0"), "row 4: epochs"),
    "epochs as words": (_cell("epochs", "twenty"), "row 4: epochs"),
    "a negative seed": (_cell("seed", "-1"), "row 4: seed"),
    "a seed of 2**63": (_cell("seed", str(2**63)), "row 4: seed: not a training seed"),
    "an unknown status": (_cell("status", "done"), "row 4: status"),
    "a digest not hex": (_cell("digest", "z" * 64), "row 4: digest"),
    "an escape in a model": (_cell("model", f"{ESC}[2J{ESC}[31mvit"), "row 4: model"),
    "an escape in a device": (_cell("device", f"cpu {ESC}]0;pwned{ESC}\\"), "row 4: device"),
    "an escape in torch": (_cell("torch", f"2.14{ESC}[8m"), "row 4: torch"),
    "threads as text": (_cell("threads", "two"), "row 4: threads"),
    "user code not JSON": (_cell("user_code", "lab_models 0.1"), "row 4: user_code: not a JSON"),
    "an escape in a user module's version": (
        _cell("user_code", '{"m": {"version": "0.1\\u001b[2J", "digest": "0123456789abcdef"}}'),
        "row 4: user_code: m: version: not printable",
    ),
    "a user module's digest not hex": (
        _cell("user_code", '{"m": {"version": null, "digest": "xyz"}}'),
        "row 4: user_code: m: digest",
    ),
}


@pytest.mark.parametrize(("change", "needle"), BAD_TRIALS.values(), ids=BAD_TRIALS)
def test_a_bad_trials_csv_is_one_line_naming_row_and_column(cli, tmp_path, change, needle):
    # each was a traceback, or (escapes) reached the terminal as they were
    folder = _edited(tmp_path, change)
    for args in ((folder, REFERENCE), (REFERENCE, folder)):
        code, out, err = cli("compare", *map(str, args))
        assert code == 2 and len(err.strip().splitlines()) == 1, err
        assert f"{folder / 'trials.csv'}: {needle}" in err, err
        assert ESC not in out + err


def test_a_trial_listed_twice_is_refused_naming_it(cli, tmp_path):
    # it was counted twice
    def twice(trials):
        trials.loc[len(trials)] = trials.loc[5]

    folder = _edited(tmp_path, twice)
    code, _, err = cli("compare", str(folder), str(REFERENCE))
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    reference = pd.read_csv(REFERENCE / "trials.csv")
    appended, seed = len(reference) + 1, reference.loc[5, "seed"]  # rows count from 1
    assert (
        f"rows 6 and {appended} are one trial (vit_p_w64_16px adamw 20 sample 5 seed {seed})" in err
    )


def test_a_run_of_pending_trials_only_is_compared_not_a_traceback(cli, tmp_path):
    # empty cells are missing values: a column of errors all empty is still one of numbers
    def pending(trials):
        trials[["status", "final_error", "digest", "threads"]] = ["pending", "", "", ""]

    folder = _edited(tmp_path, pending)
    code, out, err = cli("compare", str(folder), str(REFERENCE))
    assert code == 0, err
    assert "0 trials in both, digests equal 0, unequal 0" in out, out
