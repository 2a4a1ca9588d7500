"""The shared figure style, and saving figures so that rebuilding them gives the same bytes.

The unregularized run is drawn as the orange reference line in every TinyAgent panel.
A PNG is the same on every machine once its metadata are fixed. A PDF stores each coordinate with
ten decimals, so float64 noise of ~1e-9 between CPUs would reach its bytes: `save_figure` rounds
the plotted data first, so notebooks plot their numbers as they are.
"""
import io
import os
from collections.abc import Mapping

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.collections import PolyCollection

from ..checks import directory as directory_arg, path as path_arg
from ..harness.cache import ROOT
from .report import logged_series, rounded_table

REFERENCE_COLOR = "tab:orange"   # the unregularized run, everywhere
REFERENCE_STYLE = dict(color=REFERENCE_COLOR, lw=2.0, label="no regularizer")
PALETTE = ("tab:blue", "tab:green", "tab:purple", "tab:red", "tab:brown", "tab:gray")
FIGURES = ROOT / "figures"
SUFFIXES = (".png", ".pdf")        # a figure is saved as both


def use_style():
    """The book-like look: small figures, light grid, no top/right spines."""
    plt.rcParams.update({
        "figure.dpi": 100, "savefig.dpi": 150, "font.size": 9, "axes.titlesize": 9,
        "axes.grid": True, "grid.alpha": 0.3, "axes.spines.top": False,
        "axes.spines.right": False, "legend.frameon": False, "svg.hashsalt": "tinyagent",
    })


def rounded(values, decimals=6):
    """`values` as a float64 array rounded to 1e-6: a millionth of a unit is far below a pixel,
    and it hides the ~1e-9 differences in computed data between machines (no "-0")."""
    return rounded_table(np.asarray(values, dtype=np.float64), decimals)


def round_plotted_data(fig):
    """Round the coordinates of every line and filled area in `fig` (the only artists the
    notebooks draw from data) with `rounded`, and the axis limits to 7 significant digits, in
    place; anything else is refused, so that a new kind of artist cannot slip unrounded coordinates
    into a PDF."""
    for ax in fig.axes:
        for line in ax.lines:
            line.set_data(rounded(line.get_xdata()), rounded(line.get_ydata()))
        for collection in ax.collections:
            if not isinstance(collection, PolyCollection):
                raise TypeError(f"save_figure rounds lines and filled areas only, got a "
                                f"{type(collection).__name__}")
            for path in collection.get_paths():
                path.vertices = rounded(path.vertices)
        ax.set_xlim(*(float(f"{v:.7g}") for v in ax.get_xlim()))    # the limits, set from the
        ax.set_ylim(*(float(f"{v:.7g}") for v in ax.get_ylim()))    # data, to 7 digits too


def curves_array(curves):
    """`curves` as a float64 array (seeds, steps): at least one seed and one step, rows of one
    length, every value a finite number. A NaN would be drawn as a gap, and a ragged or 1-D list
    would fail deep inside numpy."""
    try:
        array = np.asarray(curves, dtype=np.float64)
    except (TypeError, ValueError):
        array = None
    if array is None or array.ndim != 2 or 0 in array.shape:
        raise ValueError(f"curves must be (seeds, steps): one list of numbers per seed, all of "
                         f"one length, at least one seed and one step (report.logged_series "
                         f"gives it), got {curves!r:.100}")
    if not np.isfinite(array).all():
        raise ValueError(f"curves must be finite numbers, got NaN or inf at (seed, step) "
                         f"{[tuple(i) for i in np.argwhere(~np.isfinite(array))[:3].tolist()]}")
    return array


def median_band(ax, curves, style):
    """A setting's runs over seeds, `curves` (seeds, steps): the median as a line and, for more
    than one seed, the band from the lowest to the highest, in the line's colour."""
    curves = curves_array(curves)
    if not isinstance(style, Mapping) or "color" not in style:
        raise ValueError(f"style must be a dict of line properties with a 'color' (the band is "
                         f"drawn in the line's colour), got {style!r:.100}")
    steps = np.arange(curves.shape[1])
    if len(curves) > 1:
        ax.fill_between(steps, curves.min(0), curves.max(0), color=style["color"], alpha=0.15,
                        lw=0)
    ax.plot(steps, np.median(curves, axis=0), **style)


def regularizer_panels(runs, left, right, seeds):
    """Figure 10.3's four panels: entropy (top) and batch reward (bottom) over the steps, the
    `left` settings in the left column and the `right` ones in the right, each {label: line
    style}, with the unregularized run ("none") in every panel. `runs` maps a label to its runs,
    one per seed; with one seed in `seeds` the lines are that seed's (the book draws seed 0), with
    several the median and a band from the lowest to the highest (`median_band`)."""
    use_style()
    fig, axes = plt.subplots(2, 2, figsize=(9, 6.2), sharex=True, sharey="row")
    for col, (group, title) in enumerate(((left, "KL penalty in the loss (k3+ gradient)"),
                                          (right, "other placements, entropy bonus"))):
        for row, (key, ylabel) in enumerate((("entropy", "policy-token entropy (nats)"),
                                             ("reward", "training batch reward"))):
            ax = axes[row, col]
            for label, style in (("none", REFERENCE_STYLE), *group.items()):
                median_band(ax, logged_series(runs[label], key)[list(seeds)],
                            {"lw": 1.4} | style)
            ax.set(ylabel=ylabel if col == 0 else None, xlabel="GRPO step" if row == 1 else None)
        axes[0, col].set_title(title)
        axes[1, col].legend(*axes[0, col].get_legend_handles_labels(), loc="upper center",
                            bbox_to_anchor=(0.5, -0.22), ncol=2, fontsize=8)   # off the data
    fig.tight_layout()
    return fig


def figure_stem(name, directory=FIGURES):
    """Where `save_figure` writes: `directory` / the stem of `name`. `name` is a stem
    ("fig10_1") or a path, relative to `directory` or absolute, with or without a .png or .pdf
    suffix ("fig10_1.png", "out/fig10_1"); either way the figure goes to stem.png and stem.pdf."""
    path = path_arg("a figure name", name)
    if str(name).endswith(("/", os.sep)):
        raise ValueError(f"a figure name must be a stem or a file path, got the directory "
                         f"{str(name)!r}")
    if path.suffix.lower() in SUFFIXES:
        path = path.with_suffix("")
    if not str(name).strip() or path.name in ("", ".", "..") or path.name.startswith("."):
        raise ValueError(f"a figure name must be a stem ('fig10_1') or a path ending in one "
                         f"('figures/fig10_1.png'), got {str(name)!r}")
    if path.suffix:
        raise ValueError(f"a figure name takes no suffix but {' or '.join(SUFFIXES)} (it is "
                         f"saved as both), got {str(name)!r}")
    return directory_arg("directory", directory) / path


WRITE_FIGURES = "TINYAGENT_WRITE_FIGURES"     # set to 1 by `make figures` and `make notebooks`


def save_figure(fig, name, directory=None):
    """Save `fig` as stem.png and stem.pdf (`figure_stem(name, directory)`) with its data rounded
    and no timestamps, so rebuilds give the same bytes, on another machine too. Returns the PNG's
    path. The committed figures/ are written only when a make step asks (TINYAGENT_WRITE_FIGURES=1):
    a notebook executed by `make test` or by hand renders the files in memory instead, so that a
    test run changes nothing git tracks."""
    stem = figure_stem(name, FIGURES if directory is None else directory)
    round_plotted_data(fig)
    png, pdf = stem.with_name(stem.name + ".png"), stem.with_name(stem.name + ".pdf")
    committed = stem.parent.resolve() == FIGURES.resolve()
    write = not committed or os.environ.get(WRITE_FIGURES) == "1"
    if write:
        stem.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png if write else io.BytesIO(), format="png", metadata={"Software": None},
                bbox_inches="tight")
    fig.savefig(pdf if write else io.BytesIO(), format="pdf",
                metadata={"CreationDate": None, "ModDate": None}, bbox_inches="tight")
    return png
