"""Tests of tinyagent.science.pairs: seed-by-seed differences of two settings, beside the book's."""
import math

import pytest

from tinyagent.science.pairs import (book_difference, by_seed, column_per_seed, minus_by_seed,
                                     paired, paired_by_column, paired_by_label, paired_table,
                                     rows_table)

OURS = {"a": [{"x": 0.5, "y": 2.0}, {"x": 0.7, "y": 1.0}, {"x": 0.1, "y": 3.0}],
        "b": [{"x": 0.4, "y": 2.5}, {"x": 0.2, "y": 1.0}, {"x": 0.3, "y": 2.0}]}
BOOK = {"a": {"x": 0.9, "y": None}, "b": {"x": 0.6, "y": 4.0}}


def test_column_per_seed_reads_one_column_in_seed_order_and_names_an_unknown_setting():
    assert column_per_seed(OURS, "a", "x") == [0.5, 0.7, 0.1]
    with pytest.raises(ValueError, match="no setting 'c'"):
        column_per_seed(OURS, "c", "x")


def test_paired_is_antisymmetric_and_counts_the_seeds_where_a_is_above():
    ab, ba = paired([0.5, 0.7, 0.1], [0.4, 0.2, 0.3]), paired([0.4, 0.2, 0.3], [0.5, 0.7, 0.1])
    assert "per_seed" not in ab and ab["seeds"] == 3
    assert ab["mean"] == pytest.approx(-ba["mean"])
    assert (ab["min"], ab["max"]) == pytest.approx((-ba["max"], -ba["min"]))
    assert ab["a_above_b"] + ba["a_above_b"] == 3            # no ties here
    assert ab["min"] <= ab["mean"] <= ab["max"]


def test_book_difference_is_missing_where_the_book_prints_either_number():
    assert book_difference(BOOK, "a", "b", "x") == pytest.approx(0.3)
    assert math.isnan(book_difference(BOOK, "a", "b", "y"))


def test_paired_table_has_one_row_per_comparison_with_the_paired_mean():
    table = paired_table(OURS, BOOK, [("a", "b", "x"), ("a", "b", "y"), ("b", "a", "x")])
    assert list(table.index) == [("a", "b", "x"), ("a", "b", "y"), ("b", "a", "x")]
    assert table.index.names == ["a", "b", "column"]
    row = table.loc[("a", "b", "x")]
    assert row["mean"] == pytest.approx((0.1 + 0.5 - 0.2) / 3) and row["a_above_b"] == 2
    assert table.loc[("b", "a", "x"), "mean"] == pytest.approx(-row["mean"])
    assert math.isnan(table.loc[("a", "b", "y"), "book"])


def test_by_seed_turns_settings_of_seeds_into_seeds_of_settings():
    seeds = by_seed(OURS)
    assert len(seeds) == 3 and seeds[1] == {"a": OURS["a"][1], "b": OURS["b"][1]}
    with pytest.raises(ValueError, match="one entry per seed"):
        by_seed({"a": [1, 2], "b": [1]})


def test_paired_rows_by_column_and_by_label_are_the_same_differences():
    by_column = paired_by_column(OURS, "a", "b", ["x", "y"])
    assert list(by_column) == ["x", "y"]
    assert by_column["x"] == paired([0.5, 0.7, 0.1], [0.4, 0.2, 0.3])
    assert paired_by_label(OURS, ["a"], "b", "x") == {"a": by_column["x"]}


def test_minus_by_seed_keeps_each_seeds_difference_and_names_the_row():
    (name, diff), = minus_by_seed(OURS, ["a"], "b", "y").items()
    assert name == "y, a minus b" and list(diff) == pytest.approx([-0.5, 0.0, 1.0])


def test_rows_table_has_one_row_per_entry_under_the_given_index_name():
    table = rows_table(paired_by_column(OURS, "a", "b", ["x", "y"]), "a minus b")
    assert list(table.index) == ["x", "y"] and table.index.name == "a minus b"
    assert table.loc["y", "a_above_b"] == 1
