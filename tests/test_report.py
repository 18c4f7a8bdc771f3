"""write_report: summary.json contract, files, figures (curve counts), skipped sections, page."""

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from optbench.decision.summary import Options, summarize
from optbench.errors import UsageError
from optbench.models import create_model
from optbench.report.drawing import data_lines
from optbench.report.sections import build_sections
from optbench.report.summary_lines import format_table
from optbench.report.synthetic import synthetic_trials
from optbench.report.writer import write_report
from optbench.spec.schema import parse_spec

MODELS = ["vit_p_w64_16px", "vit_c_w64_16px"]
RANGES = {
    "adamw": {"lr": [2.5e-4, 8e-3], "wd": [0.02, 0.8]},
    "sgd": {"lr": [0.1, 3.2], "wd": [4e-6, 1.2e-4]},
}
FAST = Options(n_boot=100)


def _spec(optimizers=("adamw",), epochs=(5,), n_samples=4):
    return parse_spec(
        {
            "name": "tiny",
            "dataset": {"name": "digits", "img_size": 16},
            "models": MODELS,
            "optimizers": list(optimizers),
            "epochs": list(epochs),
            "batch_size": 64,
            "search": {"n_samples": n_samples, "ranges": {o: RANGES[o] for o in optimizers}},
        }
    )


def _hand_trials() -> pd.DataFrame:
    """P: errors 10, 11, 13 and one diverged; C: 20, 20.5, 30, 50; one failed, one pending."""
    rows = [
        (MODELS[0], "finished", 10.0),
        (MODELS[0], "finished", 11.0),
        (MODELS[0], "finished", 13.0),
        (MODELS[0], "diverged", np.nan),
        (MODELS[0], "failed", np.nan),
        (MODELS[1], "finished", 20.0),
        (MODELS[1], "finished", 20.5),
        (MODELS[1], "finished", 30.0),
        (MODELS[1], "finished", 50.0),
        (MODELS[1], "pending", np.nan),
    ]
    frame = synthetic_trials(MODELS, ["adamw"], [5], 5, with_metrics=True)
    frame = frame.iloc[: len(rows)].copy()
    frame["model"] = [r[0] for r in rows]
    frame["status"] = [r[1] for r in rows]
    frame["final_error"] = [r[2] for r in rows]
    return frame


def test_summary_keeps_the_issue_2_contract_with_hand_values():
    summary = summarize("tiny", _hand_trials(), FAST)
    assert summary["study"] == "tiny"
    p, c = summary["cells"]
    issue2 = {
        "model",
        "optimizer",
        "epochs",
        "n",
        "n_diverged",
        "best_error",
        "median_error",
        "frac_within",
    }
    assert issue2 <= set(p) and issue2 <= set(c)
    assert (p["model"], p["optimizer"], p["epochs"]) == (MODELS[0], "adamw", 5)
    assert (p["n"], p["n_diverged"], p["best_error"], p["median_error"]) == (4, 1, 10.0, 11.0)
    assert p["frac_within"] == {"1": 0.5, "2": 0.5, "4": 0.75, "8": 0.75}
    assert (c["n"], c["n_diverged"], c["best_error"], c["median_error"]) == (4, 0, 20.0, 25.25)
    assert c["frac_within"] == {"1": 0.5, "2": 0.5, "4": 0.5, "8": 0.5}
    # dtop-1 P: 0, 1, 3, inf -> (1 + 0.9 + 0.7 + 0) / 4; C: 0, 0.5, 10, 30 -> (1 + 0.95) / 4
    assert p["auc_10"] == pytest.approx(0.65) and c["auc_10"] == pytest.approx(0.4875)
    assert (summary["n_results"], summary["n_planned"], summary["partial"]) == (8, 10, True)
    assert summary["status_counts"] == {"finished": 7, "diverged": 1, "failed": 1, "pending": 1}
    (pair,) = summary["comparisons"]
    assert (pair["model_a"], pair["model_b"]) == tuple(MODELS)
    assert pair["ks_statistic"] == pytest.approx(0.25)  # at x = 3: 3/4 vs 2/4
    assert pair["frac_within_4_diff"] == pytest.approx(0.25)
    low, high = pair["frac_within_4_diff_ci"]
    assert low <= 0.25 <= high


def test_a_cell_where_everything_diverged():
    trials = _hand_trials()
    trials.loc[trials["model"] == MODELS[1], "status"] = "diverged"
    cell = summarize("tiny", trials, FAST)["cells"][1]
    assert (cell["n"], cell["n_diverged"], cell["best_error"], cell["median_error"]) == (
        5,
        5,
        None,
        None,
    )
    assert set(cell["frac_within"].values()) == {0.0}


@pytest.mark.slow
def test_write_report_files_and_page(tmp_path: Path, monkeypatch):
    from optbench.decision import claims
    from optbench.report import claims_page

    tables_made = []  # the claims' bootstrap runs once per report (summary.json and the page)
    real = claims.claims_table
    monkeypatch.setattr(
        claims, "claims_table", lambda *a, **k: tables_made.append(real(*a, **k)) or tables_made[-1]
    )
    spec = _spec(optimizers=("adamw", "sgd"), epochs=(5, 10))
    trials = synthetic_trials(MODELS, ["adamw", "sgd"], [5, 10], 6, pending_fraction=0.1, seed=2)
    summary = write_report(spec, trials, tmp_path, n_boot=100)
    assert len(tables_made) == 1 and summary["claims"] == claims_page.records(tables_made[0])
    on_disk = json.loads((tmp_path / "summary.json").read_text())
    assert on_disk == summary and len(summary["cells"]) == 8
    figures = ["edf", "edf_raw", "scatter", "length", "optimizer", "curves", "tunability"]
    for name in figures:
        assert (tmp_path / f"{name}.png").stat().st_size > 0
        assert (tmp_path / f"{name}.svg").stat().st_size > 0
    page = (tmp_path / "index.html").read_text()
    embedded = re.findall(r"<img alt='(\w+)' src='data:image/png;base64,", page)
    assert sorted(embedded) == sorted(figures)
    for text in ["partial:", "Peak error", "Between models", "Study spec", "name: tiny"]:
        assert text in page
    # the comparisons' sample-size advice is about another statistic than claim (a)'s: said
    between = page[page.index("Between models") :]
    assert "not claim (a)'s EDF area to 10 points" in between[: between.index("<h2>", 5)]
    assert "src='http" not in page and "href=" not in page  # self-contained
    csv = pd.read_csv(tmp_path / "trials.csv")
    assert len(csv) == len(trials) and "metrics" not in csv.columns
    assert list(csv.columns[: len(_documented_first_columns())]) == _documented_first_columns()
    assert (tmp_path / "trials.parquet").exists() == _has_pyarrow()
    table = format_table(summary)
    assert all(m in table for m in MODELS) and "partial:" in table


def _documented_first_columns() -> list[str]:
    """trials.csv's first columns as docs/reports.md promises them ("one row per trial: ...,
    then the store's other columns")."""
    docs = (Path(__file__).resolve().parents[1] / "docs" / "reports.md").read_text()
    [row] = [line for line in docs.splitlines() if line.startswith("| `trials.csv` |")]
    listed = row.split("one row per trial:")[1].split(", then")[0]
    return [name.strip() for name in listed.split(",")]


def _has_pyarrow() -> bool:
    import importlib.util

    return importlib.util.find_spec("pyarrow") is not None


@pytest.mark.slow
def test_report_is_reproducible(tmp_path: Path):
    spec = _spec()
    trials = synthetic_trials(MODELS, ["adamw"], [5], 8, seed=4)
    a = write_report(spec, trials, tmp_path / "a", figures={"peak", "edf"}, n_boot=100)
    b = write_report(
        spec,
        trials.sample(frac=1.0, random_state=0),
        tmp_path / "b",
        figures={"peak", "edf"},
        n_boot=100,
    )
    assert a == b
    # Byte for byte, figures included: a regenerated report differs only where numbers do.
    files = sorted(f.name for f in (tmp_path / "a").iterdir())
    assert any(name.endswith(".svg") for name in files)
    for name in files:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name


def _figure(sections, name):
    return dict(fig for s in sections for fig in s.figures)[name]


def _visible_axes(fig):
    return [ax for ax in fig.axes if ax.get_visible()]


@pytest.mark.slow
def test_figures_draw_one_curve_per_model_and_cell():
    optimizers, epochs = ["adamw", "sgd"], [5, 10, 20]
    spec = _spec(optimizers=optimizers, epochs=epochs)
    trials = synthetic_trials(MODELS, optimizers, epochs, 6, seed=1)
    sections = build_sections(spec, trials, None, FAST)
    n_cells = len(optimizers) * len(epochs)
    for name in ["edf", "edf_raw"]:
        axes = _visible_axes(_figure(sections, name))
        assert len(axes) == n_cells
        assert all(len(data_lines(ax)) == len(MODELS) for ax in axes)
        assert all(len(ax.collections) == len(MODELS) for ax in axes)  # one band per model
    scatter = _visible_axes(_figure(sections, "scatter"))
    assert len(scatter) == 3 * n_cells
    assert all(len(data_lines(ax)) == len(MODELS) for ax in scatter)  # one point cloud per model
    bests = [[x for x in ax.get_lines() if x.get_label() == "_best"] for ax in scatter]
    assert all(len(lines) == len(MODELS) for lines in bests)  # + a best-value tick each
    length = _visible_axes(_figure(sections, "length"))
    assert len(length) == len(optimizers)
    assert all(len(data_lines(ax)) == len(MODELS) for ax in length)
    optimizer = _visible_axes(_figure(sections, "optimizer"))
    assert len(optimizer) == len(MODELS)
    assert all(len(data_lines(ax)) == len(optimizers) for ax in optimizer)
    curves = _visible_axes(_figure(sections, "curves"))
    assert len(curves) == n_cells
    assert all(len(data_lines(ax)) == 3 * len(MODELS) for ax in curves)


@pytest.mark.slow
def test_optimizer_figure_draws_a_substituted_cell_dashed():
    spec = _spec(optimizers=("adamw", "sgd"), epochs=(5, 10))
    trials = synthetic_trials(MODELS, ["adamw", "sgd"], [5, 10], 4, seed=1)
    dead = (
        (trials["model"] == MODELS[0]) & (trials["optimizer"] == "sgd") & (trials["epochs"] == 10)
    )
    trials.loc[dead, ["status", "final_error"]] = ["diverged", np.nan]
    sections = build_sections(spec, trials, {"optimizer"}, FAST)
    # one seed: the claims section says claim (c) is not tested; the figure's section follows
    assert [s.key for s in sections] == ["claims", "optimizer"]
    section = sections[1]
    p_axes, c_axes = _visible_axes(_figure(sections, "optimizer"))
    dashed = [line for line in data_lines(p_axes) if line.get_linestyle() == "--"]
    assert len(dashed) == 1 and "diverged" in dashed[0].get_label()
    assert not [line for line in data_lines(c_axes) if line.get_linestyle() == "--"]
    assert "dashed" in section.captions["optimizer"]
    assert any("replaced" in title for title, _ in section.tables)


@pytest.mark.slow
def test_sections_without_data_are_skipped_with_a_note(tmp_path: Path):
    spec = _spec()  # one optimizer, one schedule length
    trials = synthetic_trials(MODELS, ["adamw"], [5], 4).drop(columns="metrics")
    write_report(spec, trials, tmp_path, n_boot=50)
    for name in ["length", "optimizer", "curves"]:
        assert not (tmp_path / f"{name}.png").exists()
    page = (tmp_path / "index.html").read_text()
    assert "needs at least two schedule lengths" in page
    assert "needs both AdamW and SGD" in page
    assert "per-epoch metrics" in page


@pytest.mark.slow
def test_only_the_requested_figures_are_written(tmp_path: Path):
    spec = _spec(optimizers=("adamw", "sgd"), epochs=(5, 10))
    trials = synthetic_trials(MODELS, ["adamw", "sgd"], [5, 10], 4)
    write_report(spec, trials, tmp_path, figures={"length"}, n_boot=50)
    assert sorted(p.name for p in tmp_path.glob("*.png")) == ["length.png"]
    with pytest.raises(UsageError, match="figures"):
        write_report(spec, trials, tmp_path, figures={"violin"})
    with pytest.raises(UsageError, match="metric"):
        write_report(spec, trials, tmp_path, metric="top5")


def test_no_results_yet(tmp_path: Path):
    trials = synthetic_trials(MODELS, ["adamw"], [5], 3, pending_fraction=1.0)
    summary = write_report(_spec(), trials, tmp_path, n_boot=50)
    assert summary["n_results"] == 0 and summary["partial"]
    assert all(c["n"] == 0 and c["best_error"] is None for c in summary["cells"])
    assert not list(tmp_path.glob("*.png"))
    assert "No finished or diverged trial" in (tmp_path / "index.html").read_text()


def test_complexity_table_counts_each_models_parameters():
    trials = synthetic_trials(MODELS, ["adamw"], [5], 4)
    (section,) = build_sections(_spec(), trials, {"complexity"}, FAST, data_shape=(10, 1, 16))
    ((title, table),) = section.tables
    assert "16x16, 1 channel, 10 classes" in title  # one channel, not "1 channels"
    assert table["model"].tolist() == MODELS
    for model, params in zip(table["model"], table["params (M)"], strict=True):
        built = create_model(model, num_classes=10, in_chans=1, img_size=16)
        assert params == pytest.approx(sum(p.numel() for p in built.parameters()) / 1e6)
    assert {"GF", "acts (M)", "s/epoch", "img/s"} <= set(table.columns)
    # the harness's share of each trial: 0.1 of its 0.4 s per epoch outside the epochs
    assert table["outside epochs (%)"].tolist() == pytest.approx([25.0] * len(MODELS))


@pytest.mark.slow
def test_the_complexity_table_measures_each_model_at_the_input_size_it_trains_at(tmp_path):
    from optbench.data.datasets import load_dataset
    from optbench.models.complexity import model_complexity
    from optbench.spec.recipe import Dataset

    root = tmp_path / "imagenet"  # the layout is all a trial's input size needs
    for split in ("train", "val"):
        (root / split / "n01440764").mkdir(parents=True)
    models = ["vit_c_1gf", "regnety_1gf"]
    spec = _spec().model_copy(
        update={"dataset": Dataset(name="imagenet", root=root), "models": models}
    )
    trials = synthetic_trials(models, ["adamw"], [5], 4)
    (section,) = build_sections(spec, trials, {"complexity"}, FAST)
    ((title, table),) = section.tables
    assert "each model's input size, 3 channels, 1000 classes" in title
    sizes = dict(zip(table["model"], table["input px"], strict=True))
    for model, gf in zip(table["model"], table["GF"], strict=True):
        trains_at = load_dataset(Dataset(name="imagenet", root=root), model).img_size
        assert sizes[model] == trains_at
        counted = model_complexity(model, num_classes=1000, in_chans=3, img_size=trains_at)
        assert gf == pytest.approx(counted["flops"] / 1e9)
    assert sizes["regnety_1gf"] != sizes["vit_c_1gf"]  # each model at its own size


@pytest.mark.slow
def test_the_report_leaves_the_users_matplotlib_backend_alone(tmp_path):
    script = (
        "import matplotlib; matplotlib.use('svg')\n"
        "from optbench.report.writer import write_report\n"
        "from optbench.report.synthetic import synthetic_trials\n"
        "from optbench.spec.schema import parse_spec\n"
        f"spec = parse_spec({_spec().model_dump(mode='json')!r})\n"
        f"trials = synthetic_trials({MODELS!r}, ['adamw'], [5], 4)\n"
        f"write_report(spec, trials, {str(tmp_path)!r}, {{'edf'}}, n_boot=20)\n"
        "print(matplotlib.get_backend())\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "svg"
    assert (tmp_path / "edf.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_vector_figures_keep_their_text_editable(tmp_path: Path, cli):
    """--format png,svg,pdf: SVG text as <text> elements, PDF fonts embedded as TrueType."""
    spec = _spec()
    trials = synthetic_trials(MODELS, ["adamw"], [5], 6)
    write_report(spec, trials, tmp_path, figures={"edf"}, n_boot=20, formats=["svg", "pdf"])
    assert not list(tmp_path.glob("*.png")) and (tmp_path / "edf.pdf").is_file()
    svg = (tmp_path / "edf.svg").read_text()
    assert "<text" in svg and "vit_p_w64_16px" in svg  # a legend entry, as text
    pdf = (tmp_path / "edf.pdf").read_bytes()
    assert b"/FontFile2" in pdf and b"/CIDFontType2" in pdf  # TrueType glyphs (Type 42)
    assert b"/Subtype /Type3" not in pdf  # no fonts drawn as glyph procedures
    assert "data:image/png;base64," in (tmp_path / "index.html").read_text()
    with pytest.raises(UsageError, match="--format: 'png,eps'"):
        write_report(spec, trials, tmp_path, figures={"edf"}, formats=["png", "eps"])
    code, _, err = cli("report", "--results", str(tmp_path / "none"), "--format", "gif")
    assert code == 2


@pytest.mark.slow
def test_a_study_at_fixed_lr_wd_gets_seed_tables_and_no_edf(tmp_path: Path):
    # sampler: good trains one (lr, wd) per cell: an EDF, a KS test or an EDF-evidence line of
    # its seeds would describe seed noise as lr/wd stability. The page says why in one line
    # and shows every seed's error instead.
    spec = _spec(optimizers=("adamw",), epochs=(5, 10))
    trials = synthetic_trials(MODELS, ["adamw"], [5, 10], 1, seeds=(0, 1, 2), seed=3)
    summary = write_report(spec, trials, tmp_path, n_boot=50)
    assert not list(tmp_path.glob("edf*.png")) and not (tmp_path / "scatter.png").exists()
    assert summary["comparisons"] == []
    page = (tmp_path / "index.html").read_text()
    assert "not drawn: no cell has 4 or more sampled (lr, wd) pairs" in page
    assert "Errors per seed" in page and "seed 2 (%)" in page
    assert "KS D" not in page
    sections = build_sections(spec, trials, None, FAST)
    seeds = next(s for s in sections if s.key == "seeds")
    ((_, table),) = seeds.tables
    assert len(table) == len(MODELS) * 2  # one row per cell's only pair
    row = table.iloc[0]
    errors = [row[f"seed {s} (%)"] for s in range(3)]
    assert row["mean (%)"] == pytest.approx(np.mean(errors), abs=0.01)


# --- links planted in the report folder (issue 32, item 11) ---------------------------------------


def _every_file(root: Path) -> dict[str, bytes | None]:
    """Every path below `root` with its bytes (a link's: where it points), links not followed."""
    out = {}
    for path in sorted(root.rglob("*")):
        if path.is_symlink():
            out[str(path.relative_to(root))] = str(path.readlink()).encode()
        else:
            out[str(path.relative_to(root))] = path.read_bytes() if path.is_file() else None
    return out


@pytest.mark.parametrize(
    "linked", ["index.html", "trials.csv", "summary.json", "edf.png", "scatter.pdf", "folder"]
)
def test_report_refuses_a_planted_link_in_one_line_and_writes_nothing(
    tmp_path, monkeypatch, capsys, linked
):
    from cli_inprocess import run_cli

    study = tmp_path / "study.yaml"
    study.write_text(
        "name: s\ndataset: {name: digits, img_size: 16}\nmodels: [vit_p_w64_16px]\n"
        "optimizers: [adamw]\nepochs: 1\nbatch_size: 64\noutput: results\n"
        "search: {n_samples: 2, ranges: {adamw: {lr: [1.0e-4, 1.0e-2], wd: [0.01, 0.5]}}}\n"
    )
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "precious").write_text("theirs")
    folder = tmp_path / "reports" / "s"
    if linked == "folder":
        folder.parent.mkdir()
        folder.symlink_to(theirs, target_is_directory=True)
    else:
        folder.mkdir(parents=True)
        (folder / linked).symlink_to(theirs / "precious")
    before = _every_file(tmp_path / "reports"), _every_file(theirs)
    code, _, err = run_cli(["report", "study.yaml"], tmp_path, monkeypatch, capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    named = folder if linked == "folder" else folder / linked
    assert f"{named.relative_to(tmp_path)}: a symbolic link" in err
    assert (_every_file(tmp_path / "reports"), _every_file(theirs)) == before


@pytest.mark.slow
def test_a_link_planted_after_the_check_is_replaced_never_written_through(tmp_path, monkeypatch):
    """Every file, the figures matplotlib saves included, goes to a temporary file renamed into
    place: a link planted between refuse_links and the writes is replaced, its target kept."""
    import optbench.report.writer as report

    spec = _spec(optimizers=("adamw", "sgd"), epochs=(5, 10))
    trials = synthetic_trials(MODELS, ["adamw", "sgd"], [5, 10], 4)
    theirs = tmp_path / "theirs"
    theirs.write_text("theirs")
    out = tmp_path / "report"
    out.mkdir()
    names = ["length.png", "length.svg", "length.pdf", "trials.csv", "summary.json", "index.html"]
    for name in names:
        (out / name).symlink_to(theirs)
    monkeypatch.setattr(report, "refuse_links", lambda out_dir, root: None)  # planted too late
    write_report(spec, trials, out, figures={"length"}, n_boot=50, formats=("png", "svg", "pdf"))
    assert theirs.read_text() == "theirs"
    for name in names:
        assert not (out / name).is_symlink() and (out / name).stat().st_size > 0, name
    assert (out / "length.svg").read_bytes().startswith(b"<?xml")
    assert (out / "length.pdf").read_bytes().startswith(b"%PDF")
    parquet = ["trials.parquet"] if _has_pyarrow() else []
    assert sorted(p.name for p in out.iterdir()) == sorted(names + parquet)  # no temporary file


@pytest.mark.slow
def test_every_figure_a_report_draws_is_one_refuse_links_looks_for(tmp_path):
    from optbench.report.writer import FIGURE_NAMES

    spec = _spec(optimizers=("adamw", "sgd"), epochs=(5, 10))
    trials = synthetic_trials(MODELS, ["adamw", "sgd"], [5, 10], 4)
    drawn = {
        n for s in build_sections(spec, trials, options=Options(n_boot=20)) for n, _ in s.figures
    }
    assert drawn and drawn <= set(FIGURE_NAMES)


def test_the_claims_page_of_several_reports_reads_their_summaries_as_the_reports_decided(tmp_path):
    # studies/mini/run.sh's claims.md: a sequential study's claim is its last look's (a repeated
    # interval, "holds after 16 of at most 32 samples"), not a fixed-size interval recomputed from
    # its trials.csv (which it was: the mini's page said "holds with 16 samples" and a BCa interval)
    from optbench.report import claims_page

    row = {
        "claim": "a",
        "paper": "ViT_C's lr/wd EDF is steeper than ViT_P's (Figs 4-5)",
        "study": "mini_edf",
        "optimizer": "adamw",
        "epochs": 8,
        "models": "vit_c_w64_16px vs vit_p_w64_16px",
        "estimate": 0.333,
        "low": 0.0043,
        "high": 0.662,
        "verdict": "holds",
        "curve_verdict": None,
        "unit": "samples",
        "n_now": 16,
        "advice": "decided after 16 of at most 32 samples",
        "looks": 2,
        "n_max": 32,
    }
    fixed = row | {"study": "mini_stem", "claim": "c", "verdict": "not shown", "looks": None}
    fixed |= {"n_max": None, "n_now": 3, "unit": "seeds", "low": -0.1, "advice": "not shown; x"}
    for name, claim in (("edf", row), ("stem", fixed)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "summary.json").write_text(json.dumps({"claims": [claim]}))
    out = tmp_path / "claims.md"
    assert claims_page.main([str(out), str(tmp_path / "edf"), str(tmp_path / "stem")]) == 0
    text = out.read_text()
    assert (
        "holds after 16 of at most 32 samples (EDF area to 10 points: +0.333 [+0.0043, +0.662]"
        in text
    )
    assert "not shown with 3 seeds" in text
    assert "| mini_edf | adamw, 8 ep |" in text and "| mini_stem |" in text
