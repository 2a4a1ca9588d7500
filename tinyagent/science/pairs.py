"""Seed-by-seed comparisons of two settings trained on the same seeds (Section 10.7).

Two runs with one seed share their first training tasks and the names of their held-out episodes,
so their difference, seed by seed, leaves out part of the noise that separates two seeds. The
book trains each setting once, so its column is one seed's difference. Nothing that trains or
evaluates imports this module.
"""
import math
from collections.abc import Mapping

import numpy as np
import pandas as pd

from .report import paired_differences


def column_per_seed(results, label, column):
    """`column` of setting `label` at each seed: `results` maps a setting to a list holding one
    {column: value} per seed (run summaries, first-call summaries)."""
    if not isinstance(results, Mapping) or label not in results:
        known = list(results) if isinstance(results, Mapping) else results
        raise ValueError(f"no setting {label!r}; the results hold {known!r:.200}")
    return [row[column] for row in results[label]]


def paired(a, b):
    """One row of a paired table: the mean, range and count of the seed-by-seed differences
    a - b (`report.paired_differences` without the list of differences itself)."""
    out = paired_differences(a, b)
    del out["per_seed"]
    return out


def book_difference(book, a, b, column):
    """The book's one-seed difference a - b on `column`, NaN where it prints either number."""
    x, y = book[a][column], book[b][column]
    return math.nan if x is None or y is None else x - y


def paired_table(results, book, comparisons):
    """For every comparison (a, b, column) the chapter draws: the book's difference and ours,
    paired by seed (mean, range, at how many seeds a is above b), one row each."""
    pairs = {(a, b, column): {"book": book_difference(book, a, b, column),
                              **paired(column_per_seed(results, a, column),
                                       column_per_seed(results, b, column))}
             for a, b, column in comparisons}
    return pd.DataFrame.from_dict(pairs, orient="index").rename_axis(["a", "b", "column"])


def by_seed(results):
    """`results` ({label: [one entry per seed]}) turned around: one {label: entry} per seed, the
    form a claim's `measure` reads."""
    counts = {len(entries) for entries in results.values()}
    if len(counts) != 1:
        raise ValueError(f"every setting needs one entry per seed, the same number; got "
                         f"{ {label: len(entries) for label, entries in results.items()} }")
    return [{label: results[label][i] for label in results} for i in range(counts.pop())]


def paired_by_column(results, a, b, columns):
    """Setting `a` minus setting `b`, paired by seed (`paired`), for each of `columns`."""
    return {column: paired(column_per_seed(results, a, column), column_per_seed(results, b, column))
            for column in columns}


def paired_by_label(results, labels, b, column):
    """Each of `labels` minus setting `b` on one `column`, paired by seed (`paired`)."""
    return {label: paired(column_per_seed(results, label, column),
                          column_per_seed(results, b, column)) for label in labels}


def minus_by_seed(results, labels, b, column):
    """Each of `labels` minus setting `b` on `column`, the differences themselves, seed by seed,
    one row named "column, label minus b" each."""
    base = column_per_seed(results, b, column)
    return {f"{column}, {label} minus {b}":
            np.subtract(column_per_seed(results, label, column), base) for label in labels}


def rows_table(rows, name):
    """{row: {column: value}} (rows of `paired`) as a table whose index is called `name`."""
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis(name)
