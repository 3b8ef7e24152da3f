"""Chapter 4's run figures are legible (issue 26, item 4): no tick labels drawn over each other (a log axis
spanning less than a decade labelled its minor ticks: Figures 4.3 and 4.4), no legend over the curves
(Figure 4.5's 13 entries sat inside its last panel), and a stand-in model labelled as one, not as the
thesis's "70M / 160M / 500M". Checked on the drawn figures, from the same synthetic records as
test_render_ch4."""

from __future__ import annotations

import shutil

import pytest

from test_render_ch4 import REPO, ch4_config, records, render  # noqa: F401  (records: a fixture)


@pytest.fixture(scope="module")
def drawn(records, tmp_path_factory):  # noqa: F811
    """The figures 4.3-4.5, drawn and kept open (save_figure is recorded instead of writing them)."""
    from leanlm.config import _load_matrix_cached
    from leanlm.reporting.ch4 import figures_runs

    root = tmp_path_factory.mktemp("figure_layout")
    shutil.copytree(REPO / "params", root / "params")
    for sub in ("schemas", "templates"):
        shutil.copytree(REPO / "workflow" / sub, root / "workflow" / sub)
    shutil.copytree(records / "results", root / "results")
    figs = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LEANLM_ROOT", str(root))
        mp.setattr(figures_runs, "save_figure", lambda fig, base: figs.setdefault(base.name, fig) and [])
        _load_matrix_cached.cache_clear()
        for name in ("figure_4_3", "figure_4_4", "figure_4_5"):
            render(ch4_config(), name)
    _load_matrix_cached.cache_clear()
    for fig in figs.values():
        fig.canvas.draw()
    return figs


def _overlap(a, b, slack: float = 0.5) -> bool:
    return a.x0 < b.x1 - slack and b.x0 < a.x1 - slack and a.y0 < b.y1 - slack and b.y0 < a.y1 - slack


def _tick_labels(ax):
    """The bounding boxes of the x tick labels drawn inside the axis' limits."""
    renderer = ax.figure.canvas.get_renderer()
    low, high = sorted(ax.get_xlim())
    ticks = ax.xaxis.get_major_ticks() + ax.xaxis.get_minor_ticks()
    return [t.label1.get_window_extent(renderer) for t in ticks
            if t.label1.get_visible() and t.label1.get_text() and low <= t.get_loc() <= high]


@pytest.mark.parametrize("name", ["figure_4_3", "figure_4_4", "figure_4_5"])
def test_no_tick_labels_collide_and_no_legend_covers_a_panel(drawn, name):
    fig = drawn[name]
    renderer = fig.canvas.get_renderer()
    for ax in fig.axes:
        boxes = _tick_labels(ax)
        assert len(boxes) >= 2, (name, ax.get_xlabel())  # an axis says where it is
        assert not any(_overlap(a, b) for i, a in enumerate(boxes) for b in boxes[i + 1:]), (name, ax.get_xlabel())
    legends = list(fig.legends) + [ax.get_legend() for ax in fig.axes if ax.get_legend()]
    assert legends
    for legend in legends:
        box = legend.get_window_extent(renderer)
        assert not any(_overlap(box, ax.get_window_extent(renderer)) for ax in fig.axes), name


def test_stand_in_sizes_are_labelled_as_stand_ins(drawn):
    """The synthetic profile's "70M" is a 2-layer model of width 32: the figures must not call it 70M."""
    legend = [t.get_text() for t in drawn["figure_4_4"].legends[0].get_texts()]
    assert legend and all("stand-in (" in text for text in legend), legend
    titles = [ax.get_title() for ax in drawn["figure_4_5"].axes]
    assert titles[0].startswith("(a) 70M stand-in (2 layers, d 32)"), titles


def test_a_model_of_the_thesis_size_keeps_the_thesis_name():
    from leanlm.modeling.qwen_sizes import TABLE_4_10
    from leanlm.reporting.ch4.figures_runs import size_shown
    from leanlm.runs import Run

    row = TABLE_4_10["160M"]
    run = Run(experiment="ch4_sizes", name="160m_standard", backbone="qwen", objective="causal_lm", finetune=(),
              model={"n_layers": row["layers"], "d_model": row["hidden"]}, size="qwen_160m")
    assert size_shown(run) == "160M"


@pytest.mark.parametrize("values", [(4.2e5, 5.2e5), (38.0, 44.0), (30.0, 4.0e5)])
def test_a_log_axis_within_or_across_decades_labels_without_collisions(values):
    """The smoke profile's WikiText perplexities (4.2e5 to 5.2e5, under a decade) drew matplotlib's minor
    labels "4.2x10^5 4.4x10^5 ..." over each other in Figures 4.3 and 4.4."""
    import matplotlib.pyplot as plt

    from leanlm.reporting.ch4.figures_runs import _xscale
    from leanlm.reporting.figures import STYLE

    with plt.rc_context({**STYLE, "figure.figsize": (2.4, 3.0)}):
        fig, ax = plt.subplots(constrained_layout=True)
        ax.scatter(values, [0, 1])
        _xscale(ax, True)
        fig.canvas.draw()
        boxes = _tick_labels(ax)
        plt.close(fig)
    assert len(boxes) >= 2
    assert not any(_overlap(a, b) for i, a in enumerate(boxes) for b in boxes[i + 1:]), values
