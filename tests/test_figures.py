"""Figures a reader can trust: legends off the data, an EDF axis that shows every finite dtop-1
or says what it leaves out, 150 dpi PNGs beside SVGs, near-chance cells marked, "–" for what is
missing, whole-number epochs."""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path

import numpy as np
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from PIL import Image

from optbench.decision import frames
from optbench.decision.summary import Options
from optbench.report import figures
from optbench.report.drawing import data_lines
from optbench.report.drawing_curves import LookPanel, plot_looks
from optbench.report.sections import build_sections
from optbench.report.summary_lines import format_table
from optbench.report.synthetic import synthetic_trials
from optbench.report.writer import write_report
from optbench.spec.schema import parse_spec

MODELS = ["vit_p_w64_16px", "vit_c_w64_16px"]
FAST = Options(n_boot=50)


def _spec(optimizers=("adamw", "sgd"), epochs=(5, 10)):
    ranges = {
        "adamw": {"lr": [2.5e-4, 8e-3], "wd": [0.02, 0.8]},
        "sgd": {"lr": [0.1, 3.2], "wd": [4e-6, 1.2e-4]},
    }
    return parse_spec({
        "name": "tiny", "dataset": {"name": "digits", "img_size": 16}, "models": MODELS,
        "optimizers": list(optimizers), "epochs": list(epochs), "batch_size": 64,
        "search": {"n_samples": 6, "ranges": {o: ranges[o] for o in optimizers}},
    })  # fmt: skip


def _errors(trials, model, values):
    """Give `model`'s trials these final errors (all finished)."""
    rows = trials.index[trials["model"] == model]
    trials.loc[rows, "status"] = "finished"
    trials.loc[rows, "final_error"] = values[: len(rows)]
    return trials


def _every_figure():
    trials = synthetic_trials(MODELS, ["adamw", "sgd"], [5, 10], 6, seed=1)
    sections = build_sections(_spec(), trials, None, FAST, data_shape=(10, 1, 16))
    return {name: fig for s in sections for name, fig in s.figures}


@pytest.mark.slow
def test_legends_sit_outside_every_panel():
    drawn = _every_figure()
    assert set(drawn) == {
        "edf",
        "edf_raw",
        "scatter",
        "length",
        "optimizer",
        "curves",
        "tunability",
    }
    for name, fig in drawn.items():
        renderer = FigureCanvasAgg(fig).get_renderer()
        fig.draw(renderer)
        panels = [ax for ax in fig.axes if ax.get_visible()]
        assert all(ax.get_legend() is None for ax in panels), name
        assert len(fig.legends) == 1, name
        legend = fig.legends[0].get_window_extent(renderer)
        for ax in panels:
            assert not legend.overlaps(ax.get_window_extent(renderer)), name
        assert 0 <= legend.x0 and legend.x1 <= fig.bbox.x1  # inside the image


def test_the_edf_axis_shows_every_finite_dtop1_up_to_50_points_and_counts_the_rest():
    trials = synthetic_trials(MODELS, ["adamw"], [5], 6)
    # best 10: dtop-1 0..32 -> the axis ends at 35 and every point is on it
    _errors(trials, MODELS[0], np.array([10.0, 12.0, 20.0, 30.0, 42.0, 14.0]))
    _errors(trials, MODELS[1], np.array([5.0, 6.0, 7.0, 8.0, 9.0, 10.0]))
    ax = figures.edf_figure(trials, n_boot=20).axes[0]
    assert ax.get_xlim() == (0.0, 35.0)
    assert "beyond" not in ax.get_title()
    # a trial 75 points from its best: the axis stops at 50 and the title counts it
    _errors(trials, MODELS[1], np.array([5.0, 6.0, 7.0, 8.0, 9.0, 80.0]))
    ax = figures.edf_figure(trials, n_boot=20).axes[0]
    assert ax.get_xlim() == (0.0, 50.0)
    assert "beyond 50 points (not drawn): vit_c_w64_16px 1" in ax.get_title().replace("\n", " ")
    for line in data_lines(ax):  # each curve reaches the fraction of its trials on the axis
        x, y = line.get_data()
        assert x[-1] == 50.0
    fractions = {line.get_label(): line.get_data()[1][-1] for line in data_lines(ax)}
    assert fractions == {MODELS[0]: 1.0, MODELS[1]: pytest.approx(5 / 6)}


@pytest.mark.slow
def test_a_cell_near_chance_is_dotted_and_warned_about(tmp_path):
    trials = synthetic_trials(MODELS, ["adamw"], [5], 6)
    _errors(trials, MODELS[0], np.array([88.0, 89.0, 90.0, 89.5, 88.5, 90.0]))  # 10 classes: 90%
    _errors(trials, MODELS[1], np.array([70.0, 72.0, 75.0, 71.0, 73.0, 74.0]))  # far from it
    summary = write_report(_spec(("adamw",), (5,)), trials, tmp_path, {"edf"}, n_boot=20,
                           data_shape=(10, 1, 16))  # fmt: skip
    assert [c["near_chance"] for c in summary["cells"]] == [True, False]
    ax = figures.edf_figure(trials, n_boot=20, num_classes=10).axes[0]
    styles = {line.get_label(): line.get_linestyle() for line in data_lines(ax)}
    assert styles[MODELS[0]] != styles[MODELS[1]] == "-"
    page = (tmp_path / "index.html").read_text()
    assert "class='warning'" in page and "vit_p_w64_16px/adamw/5 epochs: best error 88.0%" in page
    assert "vit_c_w64_16px/adamw/5" not in page.split("class='warning'")[1].split("</div>")[0]
    assert "near chance (90.0%)" in format_table(summary)


@pytest.mark.slow
def test_pngs_are_150_dpi_beside_svgs(tmp_path):
    trials = synthetic_trials(MODELS, ["adamw", "sgd"], [5, 10], 4, seed=2)
    write_report(_spec(), trials, tmp_path, n_boot=20, data_shape=(10, 1, 16))
    pngs = sorted(tmp_path.glob("*.png"))
    assert len(pngs) == 7  # edf, edf_raw, scatter, length, optimizer, curves, tunability
    for png in pngs:
        assert Image.open(png).info["dpi"][0] >= 150 - 0.5  # PNG stores pixels per metre
        assert png.with_suffix(".svg").stat().st_size > 0


def test_missing_values_read_as_a_dash_never_none_or_nan(tmp_path, cli):
    trials = synthetic_trials(MODELS, ["adamw"], [5], 3, pending_fraction=1.0)
    summary = write_report(_spec(("adamw",), (5,)), trials, tmp_path, n_boot=20)
    page = (tmp_path / "index.html").read_text()
    cells = re.findall(r"<td>(.*?)</td>", page)
    assert cells and not {"None", "nan", "NaN", "-"} & set(cells)
    assert "–" in cells
    assert not re.search(r"\b(None|nan)\b", format_table(summary))


def test_tables_have_no_stray_header():
    trials = synthetic_trials(MODELS, ["adamw", "sgd"], [5, 10], 4, seed=2)
    best = frames.best_by_cell(frames.with_errors(trials))
    gaps = frames.optimizer_gaps(frames.optimizer_stability(best))
    assert gaps.columns.name is None  # a pivot's name drew an empty "optimizer" column


@pytest.mark.slow
def test_epoch_axes_have_whole_numbers():
    fig = _every_figure()["curves"]
    fig.draw(FigureCanvasAgg(fig).get_renderer())
    for ax in [ax for ax in fig.axes if ax.get_visible()]:
        ticks = [t for t in ax.get_xticks() if ax.get_xlim()[0] <= t <= ax.get_xlim()[1]]
        assert ticks and all(float(t).is_integer() for t in ticks)


@pytest.mark.slow
def test_every_figure_is_a_function_of_a_trials_frame():
    trials = synthetic_trials(MODELS, ["adamw", "sgd"], [5, 10], 4, seed=3)
    plain = trials.drop(columns="metrics")
    for draw in (
        figures.edf_figure,
        figures.scatter_figure,
        figures.length_figure,
        figures.optimizer_figure,
    ):
        assert draw(plain).axes
    assert figures.curves_figure(figures.per_epoch(trials)).axes
    with pytest.raises(figures.NothingToDraw, match="two schedule lengths"):
        figures.length_figure(plain[plain["epochs"] == 5])


@pytest.mark.parametrize("draw", [figures.length_figure, figures.optimizer_figure])
def test_length_and_optimizer_figures_draw_seed_bars_only_with_several_seeds(draw):
    def bars(seeds):
        trials = synthetic_trials(MODELS, ["adamw", "sgd"], [5, 10], 2, seeds=seeds, seed=4)
        fig = draw(trials)
        return sum(len(ax.containers) for ax in fig.axes if ax.get_visible())

    assert bars((0,)) == 0
    assert bars((0, 1, 2)) > 0


def test_stem_figure_orders_conv_stem_ablations_then_patchify_and_needs_an_ablation():
    with pytest.raises(figures.NothingToDraw):
        figures.stem_figure(synthetic_trials(MODELS, ["adamw"], [5], 2))
    stems = ["vit_p_w64_16px", "vit_s2_w64_16px", "vit_c_w64_16px", "vit_s1_w64_16px"]
    trials = synthetic_trials(stems, ["adamw", "sgd"], [5], 2, seeds=(0, 1, 2))
    fig = figures.stem_figure(trials)
    (ax,) = [ax for ax in fig.axes if ax.get_visible()]
    order = [t.get_text() for t in ax.get_xticklabels()]
    assert order == ["vit_c_w64_16px", "vit_s1_w64_16px", "vit_s2_w64_16px", "vit_p_w64_16px"]
    assert len(data_lines(ax)) == 2 and ax.containers  # one series per optimizer, seed bars
    # categories: points only, never a line from one model to the next
    assert all(line.get_linestyle() == "None" for line in data_lines(ax))
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert any(text.startswith("bars: lowest to highest seed") for text in legend)


PAGE_PX = 1200  # index.html's width: the page's CSS max-width


def test_the_edf_legend_gives_each_models_best_error_and_explains_the_band():
    trials = synthetic_trials(MODELS, ["adamw"], [5], 6, seed=2)
    fig = figures.edf_figure(trials, n_boot=20)
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    for model in MODELS:
        best = trials.loc[
            (trials["model"] == model) & (trials["status"] == "finished"), "final_error"
        ]
        assert any(t.startswith(f"{model}: best {best.min():.1f}%,") for t in legend)
    assert "shaded: simultaneous 95% band (whole curve), 20 resamples" in legend


def _shaded_area(ax) -> list[float]:
    """The area of each band (PolyCollection) of `ax`, in data units, in drawing order."""
    areas = []
    for band in ax.collections:
        x, y = np.concatenate([p.vertices for p in band.get_paths()]).T
        areas.append(0.5 * abs(np.dot(x, np.roll(y, 1)) - np.dot(y, np.roll(x, 1))))
    return areas


def test_an_edf_shades_one_kind_of_band_in_each_curves_colour_with_no_edge_lines():
    from matplotlib.colors import to_rgb
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    trials = synthetic_trials(MODELS + ["dhvt_w64_16px"], ["adamw"], [5], 12, seed=5)
    default = figures.edf_figure(trials, n_boot=50)
    pointwise = figures.edf_figure(trials, n_boot=50, band="pointwise")
    for fig in (default, pointwise):
        ax = fig.axes[0]
        curves = data_lines(ax)
        assert len(curves) == len(ax.collections) == 3  # one band per curve, one kind
        assert {line.get_linestyle() for line in ax.get_lines()} == {"-"}  # no dashed edge
        for curve, band in zip(curves, ax.collections, strict=True):
            assert band.get_linewidth().max() == 0  # shaded only, no outline
            assert to_rgb(band.get_facecolor()[0]) == to_rgb(curve.get_color())
        legend = fig.legends[0]
        swatches = legend.legend_handles[:3]  # each model's entry: its band with its curve
        lines = [a for a in legend.findobj(Line2D) if a.get_linestyle() == "-"]
        for curve, swatch in zip(curves, swatches, strict=True):
            assert isinstance(swatch, Patch)
            assert to_rgb(swatch.get_facecolor()) == to_rgb(curve.get_color())
            assert any(to_rgb(line.get_color()) == to_rgb(curve.get_color()) for line in lines)
    # the default is the simultaneous band: it holds for the whole curve, so it is the wider
    explicit = figures.edf_figure(trials, n_boot=50, band="simultaneous")
    assert _shaded_area(default.axes[0]) == _shaded_area(explicit.axes[0])
    wide, narrow = _shaded_area(default.axes[0]), _shaded_area(pointwise.axes[0])
    assert all(w > n for w, n in zip(wide, narrow, strict=True)), (wide, narrow)
    texts = [t.get_text() for t in pointwise.legends[0].get_texts()]
    assert "shaded: pointwise 95% band (each x alone), 50 resamples" in texts
    bare = figures.edf_figure(trials, n_boot=50, band="none")
    assert not bare.axes[0].collections
    assert not any("shaded" in t.get_text() for t in bare.legends[0].get_texts())
    with pytest.raises(ValueError, match="band: 'dashed'"):
        figures.edf_figure(trials, band="dashed")


def test_the_scatters_good_ranges_are_outlines_above_every_dot():
    from matplotlib.colors import to_rgb

    trials = synthetic_trials(MODELS, ["adamw"], [5], 12, seed=3)
    fig = figures.scatter_figure(trials, n_boot=20)
    FigureCanvasAgg(fig).draw()
    for ax in [a for a in fig.axes if a.get_visible()]:
        to_axes = ax.transData + ax.transAxes.inverted()
        dots = data_lines(ax)
        boxes = [p for p in ax.patches if p.get_label() == "_good_range"]
        assert len(boxes) == len(dots) == len(MODELS)
        for dot, box in zip(dots, boxes, strict=True):
            assert not box.get_fill() and not box.get_hatch()  # the dots show through
            assert to_rgb(box.get_edgecolor()) == to_rgb(dot.get_color())
            x, y = dot.get_data()
            highest = to_axes.transform(np.column_stack([x, y]))[:, 1].max()
            assert box.get_y() > highest  # in the strip above the dots, over none of them


def test_the_scatters_tick_labels_never_overlap_over_many_decades():
    trials = synthetic_trials(MODELS, ["adamw"], [5], 40, seed=4)
    span = np.random.default_rng(0).uniform(-6.0, 0.0, len(trials))
    trials["lr"] = 10.0**span  # six decades of lr, and lr*wd with it
    fig = figures.scatter_figure(trials, n_boot=20)
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    renderer = canvas.get_renderer()
    for ax in [a for a in fig.axes if a.get_visible()]:
        low, high = ax.get_xlim()
        boxes = sorted(
            (t.get_window_extent(renderer) for t in ax.get_xticklabels()
             if t.get_text() and low <= t.get_position()[0] <= high),
            key=lambda b: b.x0,
        )  # fmt: skip
        assert len(boxes) >= 2
        assert all(a.x1 < b.x0 for a, b in itertools.pairwise(boxes)), [b.x0 for b in boxes]


@pytest.mark.slow
def test_the_scatter_reads_at_page_width_with_labelled_ticks_and_its_best_values_inside():
    trials = synthetic_trials(MODELS, ["adamw", "sgd"], [5], 12, seed=3)
    fig = figures.scatter_figure(trials, n_boot=20)
    FigureCanvasAgg(fig).draw()
    scale = min(1.0, PAGE_PX / (fig.get_figwidth() * 150))  # PNG px shown in PAGE_PX
    texts = [t for t in fig.findobj(lambda a: hasattr(a, "get_fontsize")) if t.get_text()]
    assert texts and min(t.get_fontsize() for t in texts) * scale >= 9
    for ax in [a for a in fig.axes if a.get_visible()]:
        low, high = ax.get_xlim()
        labels = [t.get_text() for t in ax.get_xticklabels() if low <= t.get_position()[0] <= high]
        assert len([x for x in labels if x]) >= 2, labels  # at least two labelled log ticks
        for line in ax.get_lines():
            if line.get_label() == "_best":  # a best value, inside the frame, off its edge
                x = line.get_xdata()[0]
                assert low < x < high and np.log10(high / x) > 0.01 and np.log10(x / low) > 0.01
    assert not any(p.get_hatch() for ax in fig.axes for p in ax.patches)  # no box hides dots


@pytest.mark.parametrize("band", ["simultaneous", "pointwise"])
@pytest.mark.slow  # renders a whole report: over half a second here
def test_each_figure_on_the_page_has_a_caption_saying_what_it_draws(band, tmp_path):
    import html
    import re

    trials = synthetic_trials(MODELS, ["adamw"], [5], 6, seed=2)
    write_report(_spec(("adamw",), (5,)), trials, tmp_path, {"edf", "curves"}, n_boot=20,
                 data_shape=(10, 1, 16), band=band)  # fmt: skip
    page = (tmp_path / "index.html").read_text()
    figures_ = re.findall(r"<figure><img alt='(\w+)'.*?</figure>", page, flags=re.DOTALL)
    captions = dict(zip(figures_, re.findall(r"<figcaption>(.*?)</figcaption>", page), strict=True))
    assert set(captions) == {"edf", "edf_raw", "scatter", "curves"}
    for name, caption in captions.items():
        assert name not in caption and ".png" not in caption, caption  # not a file name
        assert len(caption.split()) >= 12, caption
    assert f"Shaded: each curve's {band} 95% bootstrap band" in html.unescape(captions["edf"])
    assert "good range as a box" in captions["scatter"]


def test_the_edf_marks_claim_a_area_and_gives_each_models_area_in_the_legend():
    from optbench.decision.edf import AUC_MAX_POINTS, dtop1, edf_auc

    trials = synthetic_trials(MODELS, ["adamw"], [5], 8, seed=3)
    fig = figures.edf_figure(trials, n_boot=20)
    ax = fig.axes[0]
    marks = [line for line in ax.get_lines() if line not in data_lines(ax)]
    assert [tuple(line.get_xdata()) for line in marks] == [(AUC_MAX_POINTS, AUC_MAX_POINTS)]
    # its label sits right of the line near the top, where a model's curve has not risen yet at
    # the left, and neither hides a curve nor is hidden by a band (it once sat at the bottom,
    # over the curves' first steps)
    (label,) = [t for t in ax.texts if t.get_text().startswith("area to")]
    fig.canvas.draw()
    box = label.get_window_extent().transformed(ax.transData.inverted())
    assert box.x0 > AUC_MAX_POINTS and box.y0 > 0.8
    bands = [c.get_zorder() for c in ax.collections]
    assert max(bands) < label.get_zorder() < min(line.get_zorder() for line in data_lines(ax))
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    for model in MODELS:
        cell = trials[trials["model"] == model]
        errors = np.where(cell["status"] == "finished", cell["final_error"], np.inf)
        area = edf_auc(dtop1(errors))  # claim (a)'s estimate is the difference of two of these
        assert any(
            t.startswith(f"{model}: best") and t.endswith(f"area {area:.2f}") for t in legend
        )
    # the raw-error figure has no dtop-1 axis: no area to mark
    raw = figures.edf_figure(trials, n_boot=20, raw=True)
    assert data_lines(raw.axes[0]) == raw.axes[0].get_lines()
    assert not any("area" in t.get_text() for t in raw.legends[0].get_texts())


def test_boundary_labels_of_close_looks_at_one_height_do_not_overlap():
    # the quickstart on an Intel Xeon: looks 6, 8 and 10 whose intervals end near one height
    # wrote "c=2.54" over "c=2.55" and over the cap of the interval at 10
    looks = [
        dict(n=6, estimate=0.287, low=-0.155, high=0.729, boundary=2.368),
        dict(n=8, estimate=0.323, low=-0.036, high=0.682, boundary=2.541),
        dict(n=10, estimate=0.392, low=0.087, high=0.697, boundary=2.549),
    ]
    panel = LookPanel(
        title="(a) adamw 20ep vit_c vs vit_p", statistic="EDF area", unit="samples",
        **{key: [look[key] for look in looks] for key in looks[0]},
        outcome="holds", n_max=24, margin=0.1,
    )  # fmt: skip
    fig = plot_looks([panel])
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    renderer = canvas.get_renderer()
    [ax] = [ax for ax in fig.axes if ax.texts]
    boxes = [t.get_window_extent(renderer) for t in ax.texts]
    assert len(boxes) == 3
    panel_box = ax.get_window_extent(renderer)
    half = 4 * fig.dpi / 72  # a cap's half width: capsize 4 points
    caps = [
        ax.transData.transform((look["n"], look[end])) for look in looks for end in ("low", "high")
    ]

    def covers(box, cap) -> bool:
        x, y = cap
        return box.y0 <= y <= box.y1 and box.x0 <= x + half and x - half <= box.x1

    for i, box in enumerate(boxes):
        assert panel_box.x0 <= box.x0 and box.x1 <= panel_box.x1
        assert panel_box.y0 <= box.y0 and box.y1 <= panel_box.y1
        assert not any(box.overlaps(other) for other in boxes[i + 1 :])
        assert not any(covers(box, cap) for cap in caps)


@pytest.mark.parametrize("n_panels", [1, 2])
def test_a_looks_title_lies_inside_the_figure_in_any_panel_count(n_panels):
    # a declared best-error comparison's one panel: its title, wrapped at a fixed number of
    # characters and centred on a panel that its ylabel shifts right, ran past the right edge
    title = "(mine) vit_c_w64_16px adamw 1ep vs vit_p_w64_16px adamw 1ep"
    panel = LookPanel(
        title=title, statistic=f"best_3 of each side of {title} (points)", unit="samples",
        n=[6, 8], estimate=[0.3, 0.4], low=[-0.1, 0.1], high=[0.7, 0.7], boundary=[2.5, 2.5],
        outcome="holds", n_max=8,
    )  # fmt: skip
    fig = plot_looks([panel] * n_panels)
    for dpi in (100, 150):  # the figure's own and the report's PNG
        fig.set_dpi(dpi)
        canvas = FigureCanvasAgg(fig)
        canvas.draw()
        renderer = canvas.get_renderer()
        titles = [ax.title for ax in fig.axes if ax.get_visible()]
        assert len(titles) == n_panels
        for text in titles:
            assert " ".join(text.get_text().split()) == f"{title}: holds"
            box = text.get_window_extent(renderer)
            assert fig.bbox.x0 <= box.x0 and box.x1 <= fig.bbox.x1, (dpi, box, fig.bbox)


def test_each_looks_boundary_label_lies_inside_its_panel():
    # the mini's stem study stopped at its last look (6 of at most 6 seeds): that look's "c=2.29",
    # written above its interval, was cut by the panel's right edge
    from optbench.api import looks_figure

    summary = Path(__file__).parents[1] / "docs/reference/mini/mini_stem/summary.json"
    fig = looks_figure(json.loads(summary.read_text())["looks"])
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    renderer = canvas.get_renderer()
    labels = [(ax, t) for ax in fig.axes for t in ax.texts if t.get_text().startswith("c=")]
    assert len(labels) == 6
    for ax, text in labels:
        box, panel = text.get_window_extent(renderer), ax.get_window_extent(renderer)
        assert panel.x0 <= box.x0 and box.x1 <= panel.x1, text.get_text()
