"""Tests of tinyagent.science.plots: rounding for byte-stable PDFs, the median-and-band plot, and saving
figures that rebuild to the same bytes."""
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from tinyagent.science.plots import median_band, rounded, save_figure, use_style  # noqa: E402


def test_rounded_hides_differences_far_below_a_pixel():
    assert np.array_equal(rounded([0.1234567, 2.0]), rounded([0.1234567 + 1e-9, 2.0 - 1e-10]))
    assert not np.signbit(rounded([-1e-9])).any()                      # no "-0" in the PDF


def test_median_band_draws_a_band_only_for_several_seeds():
    use_style()
    fig, ax = plt.subplots()
    median_band(ax, [[1.0, 2.0, 3.0]], dict(color="tab:blue"))
    assert len(ax.collections) == 0 and np.allclose(ax.lines[0].get_ydata(), [1, 2, 3])
    median_band(ax, [[1.0, 2.0], [3.0, 6.0], [2.0, 2.0]], dict(color="tab:red"))
    assert len(ax.collections) == 1 and np.allclose(ax.lines[1].get_ydata(), [2, 2])
    plt.close(fig)


def test_saved_figures_have_the_same_bytes_when_the_data_differ_far_below_a_pixel(tmp_path):
    """What another CPU's float64 noise would do to a figure: lines and bands 1e-9 apart."""
    use_style()
    paths = []
    for attempt, noise in enumerate((0.0, 1e-9)):
        fig, ax = plt.subplots()
        x = np.linspace(0, 1, 50)
        ax.plot(x, x ** 2 + noise)
        ax.fill_between(x, x ** 3 - noise, x ** 2 + noise)
        paths.append(save_figure(fig, "f", tmp_path / str(attempt)))
        plt.close(fig)
    for suffix in (".png", ".pdf"):
        assert paths[0].with_suffix(suffix).read_bytes() == paths[1].with_suffix(suffix).read_bytes()
    fig, ax = plt.subplots()
    ax.plot(np.linspace(0, 1, 50) ** 2 + 1e-3)                 # a visible difference still shows
    other = save_figure(fig, "f", tmp_path / "other")
    plt.close(fig)
    assert other.with_suffix(".pdf").read_bytes() != paths[0].with_suffix(".pdf").read_bytes()


def test_save_figure_refuses_artists_it_cannot_round(tmp_path):
    fig, ax = plt.subplots()
    ax.scatter([0.1, 0.2], [0.3, 0.4])
    with pytest.raises(TypeError, match="lines and filled areas only, got a PathCollection"):
        save_figure(fig, "f", tmp_path)
    plt.close(fig)


def test_save_figure_takes_a_stem_or_a_path_one_way(tmp_path):
    from tinyagent.science.plots import figure_stem
    for name in ("fig", "fig.png", "fig.pdf", "fig.PNG", tmp_path / "fig.png"):
        assert figure_stem(name, tmp_path) == tmp_path / "fig", name
    assert figure_stem("sub/fig.png", tmp_path) == tmp_path / "sub" / "fig"
    fig, _ = plt.subplots()
    assert save_figure(fig, "fig.png", tmp_path) == tmp_path / "fig.png"
    plt.close(fig)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fig.pdf", "fig.png"]


@pytest.mark.parametrize("name", ["", " ", ".png", ".pdf", ".", "dir/", "fig.svg", "fig.v2"])
def test_save_figure_refuses_names_that_are_not_a_stem(tmp_path, name):
    fig, _ = plt.subplots()
    with pytest.raises(ValueError, match="a figure name"):
        save_figure(fig, name, tmp_path)
    plt.close(fig)
    assert not list(tmp_path.iterdir())


def test_save_figure_refuses_what_is_not_a_name(tmp_path):
    with pytest.raises(TypeError, match="a figure name must be a path"):
        save_figure(None, 3, tmp_path)


def test_save_figure_reads_its_paths_as_every_path_is_read(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    from tinyagent.science.plots import figure_stem
    assert figure_stem("~/f", tmp_path / "figures") == tmp_path / "f"
    (tmp_path / "file").write_text("")
    with pytest.raises(NotADirectoryError, match="directory .* is a file"):
        figure_stem("f", tmp_path / "file")


def test_the_committed_figures_are_written_only_when_a_make_step_asks(tmp_path, monkeypatch):
    """`make test` executes 10.7, which saves Figure 10.3: it must change nothing git tracks."""
    from tinyagent.science import plots
    monkeypatch.setattr(plots, "FIGURES", tmp_path)
    monkeypatch.delenv(plots.WRITE_FIGURES, raising=False)
    fig, ax = plt.subplots()
    ax.plot([0, 1], [0, 1])
    save_figure(fig, "f")
    assert list(tmp_path.iterdir()) == []
    monkeypatch.setenv(plots.WRITE_FIGURES, "1")
    save_figure(fig, "f")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.pdf", "f.png"]
    plt.close(fig)


NAN, INF = float("nan"), float("inf")


@pytest.mark.parametrize("curves", [[], [[]], [1.0, 2.0], [[1.0, 2.0], [1.0]], [["a", "b"]],
                                    [[1.0, NAN]], [[1.0, 2.0], [INF, 2.0]], None])
def test_median_band_takes_curves_of_finite_numbers_one_row_per_seed_only(curves):
    fig, ax = plt.subplots()
    with pytest.raises(ValueError, match=r"curves must be (\(seeds, steps\)|finite numbers)"):
        median_band(ax, curves, dict(color="tab:blue"))
    assert not ax.lines and not ax.collections                  # refused before drawing
    plt.close(fig)


@pytest.mark.parametrize("style", [{"lw": 1.0}, "tab:blue", None, [("color", "tab:blue")]])
def test_median_band_takes_a_style_with_a_colour_only(style):
    fig, ax = plt.subplots()
    with pytest.raises(ValueError, match="style must be a dict of line properties with a 'color'"):
        median_band(ax, [[1.0, 2.0], [2.0, 3.0]], style)
    assert not ax.lines and not ax.collections
    plt.close(fig)


def test_regularizer_panels_draw_each_column_beside_the_unregularized_run():
    from tinyagent.science.plots import REFERENCE_COLOR, regularizer_panels

    def runs_of(level):      # three seeds whose logs differ by seed
        return [{"history": [{"entropy": level + s, "reward": -level - s} for _ in range(5)]}
                for s in range(3)]
    runs = {"none": runs_of(0.0), "a": runs_of(1.0), "b": runs_of(2.0), "c": runs_of(3.0)}
    left, right = {"a": dict(color="tab:blue")}, {"b": dict(color="tab:red"),
                                                  "c": dict(color="tab:green")}
    fig = regularizer_panels(runs, left, right, seeds=[0, 2])
    top_left, top_right = fig.axes[0], fig.axes[1]
    assert [len(ax.lines) for ax in fig.axes] == [2, 3, 2, 3]     # "none" + each column's runs
    assert top_left.lines[0].get_color() == REFERENCE_COLOR
    assert np.allclose(top_right.lines[2].get_ydata(), 4.0)      # median of seeds 0 and 2 of "c"
    assert len(top_left.collections) == 2                         # a band per line, two seeds
    single = regularizer_panels(runs, left, right, seeds=[1])
    assert len(single.axes[0].collections) == 0 and np.allclose(single.axes[0].lines[1].get_ydata(), 2.0)
    plt.close(fig)
    plt.close(single)
