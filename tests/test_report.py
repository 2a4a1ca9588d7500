"""Tests of tinyagent.science.report: tables of numbers, summaries over seeds, and the claims rule."""
import math

import numpy as np
import pandas as pd
import pytest

from tinyagent.science.report import (Claim, book_vs_ours, category, logged_series, over_seeds,
                              paired_differences,
                              quantiles_over_seeds, regime_table, score_claims)


# ----------------------------------------------------------------------------- book_vs_ours

def test_book_vs_ours_rounds_each_column_and_leaves_unprinted_cells_missing():
    ours = {"a": {"x": 0.12345, "y": 2.0}, "b": {"x": -0.00001, "y": 3.14159}}
    book = {"a": {"x": 0.12}, "b": {"y": None}}
    table = book_vs_ours(ours, book, {"x": 2, "y": 3}, index_name="setting")
    assert list(table.columns) == [("x", "ours"), ("x", "book"), ("y", "ours"), ("y", "book")]
    assert table.index.name == "setting" and list(table.index) == ["a", "b"]
    assert table.loc["a", ("x", "ours")] == 0.12 and table.loc["b", ("y", "ours")] == 3.142
    assert table.loc["a", ("x", "book")] == 0.12
    assert math.isnan(table.loc["b", ("x", "book")]) and table[("y", "book")].isna().all()
    assert all(dtype.kind == "f" for dtype in table.dtypes)        # numbers, not strings
    assert math.copysign(1, table.loc["b", ("x", "ours")]) == 1   # -0.00001 shows as 0.0


def test_book_vs_ours_text_in_the_book_counts_as_not_printed():
    table = book_vs_ours({"r": {"mean": 0.1}}, {"r": {"mean": "between the modes"}}, {"mean": 2})
    assert math.isnan(table.loc["r", ("mean", "book")])


# ----------------------------------------------------------------------------- over seeds

def test_over_seeds_median_and_range():
    per_seed = {"run": [{"p": v} for v in (0.3, 0.1, 0.5, 0.2, 0.4)],
                "other": [{"p": v} for v in (1.0, 1.0, 1.0, 1.0, 1.0)]}
    table = over_seeds(per_seed, {"p": 2})
    assert table.loc["run", ("p", "median")] == 0.3
    assert (table.loc["run", ("p", "min")], table.loc["run", ("p", "max")]) == (0.1, 0.5)
    assert table.loc["other", ("p", "median")] == 1.0


def test_over_seeds_refuses_ragged_or_empty_rows():
    with pytest.raises(ValueError, match="same, non-zero number of seeds"):
        over_seeds({"a": [{"p": 1.0}] * 5, "b": [{"p": 1.0}] * 4}, {"p": 2})
    with pytest.raises(ValueError, match="same, non-zero number of seeds"):
        over_seeds({"a": []}, {"p": 2})


def test_quantiles_over_seeds_puts_the_book_beside_the_spread():
    per_seed = pd.DataFrame({"q": np.arange(101.0), "r": np.ones(101)})
    table = quantiles_over_seeds(per_seed, {"q": 50.004, "r": None}, digits=2)
    assert list(table.columns) == ["ours (seed 0)", "5% of seeds", "median", "95% of seeds", "book"]
    assert table.loc["q"].tolist() == [0.0, 5.0, 50.0, 95.0, 50.0]
    assert math.isnan(table.loc["r", "book"])
    with pytest.raises(ValueError, match="column for every book entry"):
        quantiles_over_seeds(per_seed, {"s": 1.0}, digits=2)


# ----------------------------------------------------------------------------- paired differences

def test_paired_differences_seed_by_seed():
    result = paired_differences([0.5, 0.4, 0.7], [0.3, 0.5, 0.6])
    assert result["per_seed"] == pytest.approx([0.2, -0.1, 0.1])
    assert result["mean"] == pytest.approx(0.2 / 3)
    assert (result["min"], result["max"]) == (pytest.approx(-0.1), pytest.approx(0.2))
    assert (result["a_above_b"], result["seeds"]) == (2, 3)


@pytest.mark.parametrize("a, b", [([1.0, 2.0], [1.0]), ([1.0], [1.0, 2.0]), ([], []),
                                  ([[1.0, 2.0]], [[1.0, 2.0]])])
def test_paired_differences_refuses_unpaired_values(a, b):
    with pytest.raises(ValueError, match="equally long, non-empty"):
        paired_differences(a, b)


# ----------------------------------------------------------------------------- the rule

@pytest.mark.parametrize("n, expected", [(5, "holds"), (4, "holds"), (3, "depends on the seed"),
                                         (2, "depends on the seed"), (1, "does not hold"),
                                         (0, "does not hold")])
def test_category_thresholds_at_five_seeds(n, expected):
    assert category(n, 5) == expected


def test_category_scales_with_the_number_of_seeds_and_refuses_bad_counts():
    assert category(10, 10) == "holds" and category(8, 10) == "holds"
    assert category(7, 10) == "depends on the seed" and category(3, 10) == "does not hold"
    for n, seeds in ((6, 5), (-1, 5), (0, 0)):
        with pytest.raises(ValueError, match="n_holding <= n_seeds"):
            category(n, seeds)


def test_score_claims_counts_seeds_and_applies_the_rule():
    claims = [Claim("up", "x stays above 1", measure=lambda r: r["x"], holds=lambda v: v > 1,
                    book=1.5),
              Claim("down", "x stays below 1", measure=lambda r: r["x"], holds=lambda v: v < 1)]
    results = [{"x": v} for v in (2.0, 1.5, 0.5, 3.0, 1.2)]
    table = score_claims(claims, results)
    assert table.loc["up", "holds in"] == 4 and table.loc["up", "category"] == "holds"
    assert table.loc["down", "holds in"] == 1 and table.loc["down", "category"] == "does not hold"
    assert table.loc["up", "ours, seed 0"] == 2.0 and table.loc["up", "median"] == 1.5
    assert (table.loc["up", "min"], table.loc["up", "max"]) == (0.5, 3.0)


def test_logged_series_stacks_one_row_per_seed():
    runs = [{"history": [{"kl": 0.1 * s + step} for step in range(3)]} for s in range(2)]
    series = logged_series(runs, "kl")
    assert series.shape == (2, 3) and series[1, 2] == pytest.approx(2.1)


# ----------------------------------------------------------------------------- bad input

@pytest.mark.parametrize("n_holding,n_seeds", [(2.5, 5), (2, 5.0), (True, 5), (6, 5), (0, 0)])
def test_category_needs_whole_numbers_of_seeds(n_holding, n_seeds):
    with pytest.raises(ValueError, match="need whole numbers 0 <= n_holding <= n_seeds"):
        category(n_holding, n_seeds)


def test_book_vs_ours_refuses_text_with_a_number_in_it():
    with pytest.raises(TypeError, match=r"book\['r'\]\['mean'\] must be a number.*'0\.5x'"):
        book_vs_ours({"r": {"mean": 0.1}}, {"r": {"mean": "0.5x"}}, {"mean": 2})
    with pytest.raises(TypeError, match=r"ours\['r'\]\['mean'\] must be a number.*'0\.1'"):
        book_vs_ours({"r": {"mean": "0.1"}}, {"r": {"mean": 0.5}}, {"mean": 2})
    table = book_vs_ours({"r": {"mean": 0.1}}, {"r": {"mean": None}}, {"mean": 2})
    assert math.isnan(table.loc["r", ("mean", "book")])


@pytest.mark.parametrize("bad", [math.nan, math.inf, None, "0.2"])
def test_over_seeds_refuses_values_that_are_not_finite_numbers(bad):
    per_seed = {"run": [{"p": 0.1}, {"p": bad}]}
    with pytest.raises(ValueError, match="per-seed values of 'p' must be finite numbers"):
        over_seeds(per_seed, {"p": 2})


@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_paired_differences_refuses_nan(bad):
    with pytest.raises(ValueError, match=r"a \(per-seed values\) must be finite numbers"):
        paired_differences([0.5, bad], [0.1, 0.2])
    with pytest.raises(ValueError, match=r"b \(per-seed values\) must be finite numbers"):
        paired_differences([0.5, 0.4], [bad, 0.2])


def test_score_claims_refuses_a_nan_measure_instead_of_calling_it_a_failure():
    claim = Claim("x", "x is positive", lambda r: r["x"], lambda v: v > 0)
    with pytest.raises(ValueError, match="claim 'x' measured a non-finite value at seed"):
        score_claims([claim], [{"x": math.nan}] * 5)


def test_rounded_table_rounds_each_column_and_shows_no_negative_zero():
    from tinyagent.science.report import rounded_table
    table = rounded_table(pd.DataFrame({"a": [-1e-9, 0.12345], "b": [-0.0004, 2.5]}), {"a": 3, "b": 2})
    assert table["a"].tolist() == [0.0, 0.123] and table["b"].tolist() == [0.0, 2.5]
    assert not np.signbit(table.to_numpy()).any()
    assert "-0.0" not in table.to_string()


def test_score_claims_refuses_no_claims_and_a_measure_that_is_not_a_number():
    claim = Claim("x", "x", lambda r: r["x"], lambda v: v > 0)
    with pytest.raises(ValueError, match="at least one claim"):
        score_claims([], [{"x": 1}])
    for bad in (None, "0.5", [1]):
        with pytest.raises(ValueError, match="claim 'x' measured .* at seed 0; its measure must"):
            score_claims([claim], [{"x": bad}])


# ----------------------------------------------------------------------------- bad input, round 3

@pytest.mark.parametrize("places", [2.5, -1, 16, True, "3", None])
def test_every_table_takes_a_count_of_decimals_only(places):
    with pytest.raises(ValueError, match=r"digits\['p'\] \(decimals\) must be an integer in "
                                         r"\[0, 15\]"):
        book_vs_ours({"r": {"p": 1.0}}, {}, {"p": places})
    with pytest.raises(ValueError, match=r"digits\['p'\] \(decimals\) must be an integer"):
        over_seeds({"r": [{"p": 1.0}]}, {"p": places})
    with pytest.raises(ValueError, match=r"digits must be an integer in \[0, 15\]"):
        quantiles_over_seeds({"p": [1.0, 2.0]}, {}, places)


@pytest.mark.parametrize("digits", [3, None, ["p"], "p"])
def test_per_column_tables_take_digits_as_a_mapping(digits):
    for table in (lambda: book_vs_ours({"r": {"p": 1.0}}, {}, digits),
                  lambda: over_seeds({"r": [{"p": 1.0}]}, digits)):
        with pytest.raises(TypeError, match="digits must map each column to its decimals"):
            table()


@pytest.mark.parametrize("per_seed,message", [
    ({"r": [{"b": 1.0}]}, r"per_seed\['r'\] at seed 0 has no column 'p'.*it has \['b'\]"),
    ({"r": [{"p": 1.0}, {"b": 1.0}]}, r"per_seed\['r'\] at seed 1 has no column 'p'"),
    ({}, "per_seed must map at least one row"),
    ([{"p": 1.0}], "per_seed must map at least one row")])
def test_over_seeds_names_the_row_and_seed_that_lack_a_column(per_seed, message):
    with pytest.raises(ValueError, match=message):
        over_seeds(per_seed, {"p": 2})


@pytest.mark.parametrize("per_seed", [{}, {"q": []}, pd.DataFrame()])
def test_quantiles_over_seeds_needs_at_least_one_seed(per_seed):
    with pytest.raises(ValueError, match="per_seed must hold at least one seed's results"):
        quantiles_over_seeds(per_seed, {}, 2)


def _run(*rewards):
    return {"history": [{"reward": r} for r in rewards]}


@pytest.mark.parametrize("runs,message", [
    ([_run(1.0), _run(1.0, 0.5)], r"different numbers of steps \[1, 2\]"),
    ([_run(1.0), {"history": [{"entropy": 0.5}]}],
     r"run 1 did not log 'reward' \(at step 0\); it logged \['entropy'\]"),
    ([_run(1.0), {"eval": {}}], "run 1 must be a run: a dict whose 'history'"),
    ([_run(1.0), {"history": [0.5]}], "run 1 must be a run"),
    ([], r"runs must be a list holding at least one run \(one per seed\), got \[\]"),
    (_run(1.0), "runs must be a list .* got a run, not a list of runs"),
    ((run for run in [_run(1.0)]), "runs must be a list")])
def test_logged_series_needs_runs_that_logged_the_key_for_equally_many_steps(runs, message):
    with pytest.raises((TypeError, ValueError), match=message):
        logged_series(runs, "reward")


@pytest.mark.parametrize("claims", [Claim("x", "x", lambda r: r["x"], lambda v: v > 0), "x", 3])
def test_score_claims_takes_a_list_of_claims(claims):
    with pytest.raises(TypeError, match="claims must be a list of report.Claim"):
        score_claims(claims, [{"x": 1.0}])


def test_regime_table_shows_each_agent_and_marks_a_value_outside_its_band():
    check = lambda value, inside: {"value": value, "se": 0.01, "band": [0.15, 0.3], "inside": inside}
    table = regime_table({"a": {"reads": check(0.2, True)}, "b": {"reads": check(0.1, False)}})
    assert list(table.index) == ["a", "b"] and list(table.columns) == ["reads (band 0.15-0.3)"]
    assert table.loc["a"].iloc[0] == "0.200 ± 0.010" and table.loc["b"].iloc[0].endswith("outside")
