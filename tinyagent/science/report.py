"""Tables for the notebooks: the book's numbers beside ours, results summarized over seeds, and the
chapter's claims scored seed by seed under a rule fixed before any number is seen.

Every table is a DataFrame of numbers (rounded for display, never pre-formatted strings), so a
reader can sort it and compute from it. Nothing that trains or evaluates imports this module.
"""
import math
import numbers
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Callable

import numpy as np
import pandas as pd

# The rule for a claim scored on five seeds, fixed before any run is scored (each notebook states
# it above its first table of claims).
HOLDS_AT_LEAST = 4          # holds at 4-5 of 5 seeds: "holds"
DEPENDS_AT_LEAST = 2        # 2-3 of 5: "depends on the seed"; 0-1 of 5: "does not hold"
# The chapter's noise level for a held-out pass@1 difference: runs closer than this are "within noise".
PASS1_NOISE = 0.08


def _is_real(value):
    """Whether `value` is a real number (numpy's too), not a bool or a string."""
    return isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_))


def _number_or_missing(value, where, prose_allowed=False):
    # a table cell: a real number, or None / NaN where there is none. With `prose_allowed` (the
    # book's column), words the book printed instead of a number ("between the modes") count as
    # not printed; text with a digit in it ('0.5x') is an error: write the number.
    if value is None or (prose_allowed and isinstance(value, str)
                         and not any(c.isdigit() for c in value)):
        return math.nan
    if not _is_real(value):
        raise TypeError(f"{where} must be a number, or None where there is none"
                        f"{' (or words without a digit)' if prose_allowed else ''}; got {value!r}")
    return float(value)


def _finite_array(values, what):
    # per-seed numbers as a float array; a string, None, NaN or inf among them is an error
    flat = np.asarray(values, dtype=object).ravel()
    bad = [v for v in flat if not _is_real(v) or not math.isfinite(v)]
    if bad:
        raise ValueError(f"{what} must be finite numbers, got {bad[:3]}")
    return np.asarray(values, dtype=float)


MAX_DECIMALS = 15     # a float64 holds 15-17 significant digits; more decimals show noise


def decimals(name, value):
    """`value` as a number of decimals to round to: an integer (not a bool) in [0, 15]. 2.5 or
    -1 as a count of decimals is a mistake (numpy fails on the first, rounds to tens on the
    second). The rule of checks.int_in, which this module does not import (it loads nothing of the
    package but its tables)."""
    if (not isinstance(value, numbers.Integral) or isinstance(value, (bool, np.bool_))
            or not 0 <= value <= MAX_DECIMALS):
        raise ValueError(f"{name} must be an integer in [0, {MAX_DECIMALS}], got {value!r}")
    return int(value)


def decimals_per_column(digits):
    """`digits` as {column: decimals}, each a count of decimals (`decimals`)."""
    if not isinstance(digits, Mapping):
        raise TypeError(f"digits must map each column to its decimals, e.g. {{'pass@1': 3}}, got "
                        f"{digits!r:.100}")
    return {col: decimals(f"digits[{col!r}] (decimals)", places) for col, places in digits.items()}


def rounded_table(table, digits):
    """`table` (a DataFrame or Series, or an array) rounded for display to `digits` decimals (a
    number, or {column: decimals}), with -0.0 shown as 0.0: a small negative number rounded to
    zero is zero, not "-0.000"."""
    return table.round(digits) + 0.0


def book_vs_ours(ours, book, digits, index_name="run"):
    """One row per key of `ours`, and per column of `digits` a pair ("ours", "book").

    `ours` and `book` map a row label to {column: value}; a value the book does not print is
    missing (NaN), as are words the book printed instead of a number; any other text ('0.5x')
    is an error. Each column is rounded to `digits[column]` decimals, the chapter's precision
    (and -0.0 shown as 0.0).
    """
    digits = decimals_per_column(digits)
    columns = {}
    for col, places in digits.items():
        for who, source in (("ours", ours), ("book", book)):
            values = [_number_or_missing(source.get(row, {}).get(col), f"{who}[{row!r}][{col!r}]",
                                         prose_allowed=who == "book") for row in ours]
            columns[(col, who)] = rounded_table(np.array(values, dtype=float), places)
    return pd.DataFrame(columns, index=pd.Index(list(ours), name=index_name))


def over_seeds(per_seed, digits, index_name="run"):
    """Median and range (min, max) over seeds. `per_seed` maps a row label to a list (one entry
    per seed) of {column: value}; returns columns (column, "median" | "min" | "max"). A column
    that does not apply to a row is NaN at every seed and shows as missing; NaN at some seeds only,
    or inf, is an error."""
    digits = decimals_per_column(digits)
    if not isinstance(per_seed, Mapping) or not per_seed:
        raise ValueError(f"per_seed must map at least one row to its results, one {{column: "
                         f"value}} per seed, got {per_seed!r:.100}")
    counts = {len(seeds) for seeds in per_seed.values()}
    if len(counts) != 1 or 0 in counts:
        raise ValueError(f"every row needs results for the same, non-zero number of seeds; got "
                         f"{ {row: len(seeds) for row, seeds in per_seed.items()} }")
    (n_seeds,) = counts
    for row, seeds in per_seed.items():
        for i, seed in enumerate(seeds):
            absent = [col for col in digits if not isinstance(seed, Mapping) or col not in seed]
            if absent:
                raise ValueError(f"per_seed[{row!r}] at seed {i} has no column {absent[0]!r} "
                                 f"(digits names it); it has "
                                 f"{sorted(seed) if isinstance(seed, Mapping) else seed!r:.100}")
    columns = {}
    for col, places in digits.items():
        rows = [[seed[col] for seed in per_seed[row]] for row in per_seed]
        applies = [not all(_is_real(v) and math.isnan(v) for v in row) for row in rows]
        values = np.full((len(rows), n_seeds), np.nan)
        values[applies] = _finite_array([r for r, a in zip(rows, applies) if a],
                                        f"the per-seed values of {col!r}")
        for stat, fn in (("median", np.median), ("min", np.min), ("max", np.max)):
            columns[(col, stat)] = rounded_table(fn(values, axis=1), places)
    return pd.DataFrame(columns, index=pd.Index(list(per_seed), name=index_name))


def regime_table(checks):
    """Each base agent against the regime bands, one row per agent, from `make agents`' record
    ({agent: {metric: {value, se, band, inside}}}): "value ± se", and "outside" past a band."""
    return pd.DataFrame({agent: {f"{m} (band {v['band'][0]}-{v['band'][1]})": f"{v['value']:.3f} ± "
                                 f"{v['se']:.3f}" + ("" if v["inside"] else " outside")
                                 for m, v in metrics.items()} for agent, metrics in checks.items()}).T


def quantiles_over_seeds(per_seed, book, digits):
    """Where the book's number falls among many random draws of a construction it does not
    publish (Sections 10.2-10.4). `per_seed` has one row per seed, first seed first, and one
    column per quantity; `book` maps a quantity to the book's number (None or absent: not
    printed). One row per quantity: ours at the first seed, the 5% quantile, median and 95%
    quantile over seeds, and the book's value, rounded to `digits` decimals.
    """
    digits = decimals_per_column(digits) if isinstance(digits, Mapping) else decimals("digits",
                                                                                    digits)
    per_seed = pd.DataFrame(per_seed)
    if per_seed.empty:
        raise ValueError(f"per_seed must hold at least one seed's results (a row per seed, a "
                         f"column per quantity), got none: columns {list(per_seed.columns)}, "
                         f"{len(per_seed)} rows")
    unknown = [key for key in book if key not in per_seed.columns]
    if unknown:
        raise ValueError(f"need per-seed results with a column for every book entry; book has "
                         f"{unknown} beyond the columns {list(per_seed.columns)}")
    table = pd.DataFrame({
        f"ours (seed {per_seed.index[0]})": per_seed.iloc[0],
        "5% of seeds": per_seed.quantile(0.05),
        "median": per_seed.median(),
        "95% of seeds": per_seed.quantile(0.95),
        "book": pd.Series(book, dtype=float).reindex(per_seed.columns),
    })
    table.index.name = per_seed.columns.name
    return rounded_table(table, digits)


def logged(run, key, where="the run"):
    """One logged quantity of a run, step by step: `key` of each of its per-step logs
    (run["history"]). A run without a history, or a key it did not log, is an error naming what
    it logged."""
    history = run.get("history") if isinstance(run, Mapping) else None
    if not isinstance(history, (list, tuple)) or not all(isinstance(log, Mapping)
                                                         for log in history):
        raise ValueError(f"{where} must be a run: a dict whose 'history' lists one dict of logged "
                         f"values per step, got {run!r:.100}")
    absent = [step for step, log in enumerate(history) if key not in log]
    if absent:
        raise ValueError(f"{where} did not log {key!r} (at step {absent[0]}); it logged "
                         f"{sorted(history[absent[0]])}")
    return [log[key] for log in history]


def logged_series(runs, key):
    """One logged quantity of a setting's runs, one run per seed: an array (seeds, steps)."""
    if isinstance(runs, Mapping) or not isinstance(runs, (list, tuple)) or not runs:
        what = "a run, not a list of runs" if isinstance(runs, Mapping) else f"{runs!r:.100}"
        raise ValueError(f"runs must be a list holding at least one run (one per seed), got "
                         f"{what}")
    series = [logged(run, key, f"run {i}") for i, run in enumerate(runs)]
    if len({len(steps) for steps in series}) != 1:
        raise ValueError(f"the runs logged {key!r} for different numbers of steps "
                         f"{[len(steps) for steps in series]}; an array (seeds, steps) needs "
                         f"runs of one length")
    return np.array(series, dtype=float)


def paired_differences(a, b):
    """Seed-by-seed differences a - b of two settings run on the same seeds: the differences, their
    mean and range, and at how many seeds a exceeds b."""
    a, b = _finite_array(a, "a (per-seed values)"), _finite_array(b, "b (per-seed values)")
    if a.ndim != 1 or a.shape != b.shape or a.size == 0:
        raise ValueError(f"need two equally long, non-empty lists of per-seed values, got "
                         f"shapes {a.shape} and {b.shape}")
    diff = a - b
    return {"per_seed": diff.tolist(), "mean": float(diff.mean()), "min": float(diff.min()),
            "max": float(diff.max()), "a_above_b": int((diff > 0).sum()), "seeds": int(diff.size)}


def category(n_holding, n_seeds):
    """The rule: "holds" at >= 4 of 5 seeds, "depends on the seed" at 2-3, "does not hold" at 0-1
    (thresholds scale with the number of seeds)."""
    whole = all(isinstance(n, numbers.Integral) and not isinstance(n, bool)
                for n in (n_holding, n_seeds))
    if not whole or not 0 <= n_holding <= n_seeds or n_seeds < 1:
        raise ValueError(f"need whole numbers 0 <= n_holding <= n_seeds and n_seeds >= 1, got "
                         f"{n_holding!r} of {n_seeds!r}")
    share = n_holding / n_seeds
    if share >= HOLDS_AT_LEAST / 5:
        return "holds"
    if share >= DEPENDS_AT_LEAST / 5:
        return "depends on the seed"
    return "does not hold"


@dataclass(frozen=True)
class Claim:
    """A chapter claim as data. `measure(results)` is the quantity it is about, on one seed's
    results; `holds(value)` decides it for that seed; `book` is what the book printed (its one seed)."""
    key: str
    text: str
    measure: Callable
    holds: Callable
    book: float | str | None = None


def claim_values(claim, results_by_seed, seeds=None):
    """`claim`'s measured quantity at each seed, as floats. A NaN or infinite one is an error
    naming the claim and the seed (NaN is not "does not hold": nothing was measured), as is an
    empty list, or `seeds` (their names) that are not one per result."""
    results_by_seed = list(results_by_seed)
    if not results_by_seed:
        raise ValueError(f"claim {claim.key!r}: need results for at least one seed, got none")
    seeds = list(range(len(results_by_seed))) if seeds is None else list(seeds)
    if len(seeds) != len(results_by_seed):
        raise ValueError(f"need one seed per result, got {len(seeds)} seeds {seeds} for "
                         f"{len(results_by_seed)} results")
    values = []
    for seed, results in zip(seeds, results_by_seed):
        value = claim.measure(results)
        try:
            if isinstance(value, (str, bytes)):
                raise TypeError
            values.append(float(value))
        except (TypeError, ValueError):
            raise ValueError(f"claim {claim.key!r} measured {value!r:.80} at seed {seed}; its "
                             f"measure must return a real number") from None
    bad = [(seed, v) for seed, v in zip(seeds, values) if not math.isfinite(v)]
    if bad:
        raise ValueError(f"claim {claim.key!r} measured a non-finite value at seed(s) "
                         f"{', '.join(f'{seed} ({v})' for seed, v in bad)}; its measure must be "
                         f"a finite number at every seed")
    return values


def failing_seeds(claims, results_by_seed, seeds):
    """For each claim, the seeds at which it does not hold, as text ("" where it holds at all of
    them): a prose sentence that reports a k of 5 names these. `seeds` names each result, one per
    result. Defined in Section 10.7."""
    results_by_seed, seeds = list(results_by_seed), list(seeds)
    out = {}
    for claim in claims:
        values = claim_values(claim, results_by_seed, seeds)
        out[claim.key] = ", ".join(str(seed) for seed, v in zip(seeds, values)
                                   if not claim.holds(v))
    return out


def score_claims(claims, results_by_seed, digits=3):
    """Every claim on every seed: the book's value, ours at the first seed, in how many seeds it
    holds, the measured quantity's median and range, and the category from the rule."""
    if isinstance(claims, (Claim, str, bytes)) or not hasattr(claims, "__iter__"):
        raise TypeError(f"claims must be a list of report.Claim, got {claims!r:.100}")
    results_by_seed, claims = list(results_by_seed), list(claims)
    if not claims:
        raise ValueError("score_claims needs at least one claim (a list of report.Claim), got none")
    rows = []
    for claim in claims:
        values = claim_values(claim, results_by_seed)
        n_holding = sum(bool(claim.holds(v)) for v in values)
        rows.append({"key": claim.key, "claim": claim.text, "book (one seed)": claim.book,
                     "ours, seed 0": round(values[0], digits), "holds in": n_holding,
                     "of seeds": len(values), "median": round(float(np.median(values)), digits),
                     "min": round(min(values), digits), "max": round(max(values), digits),
                     "category": category(n_holding, len(values))})
    return pd.DataFrame(rows).set_index("key")
