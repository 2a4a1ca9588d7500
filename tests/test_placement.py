"""Tests of tinyagent.science.placement: the book's numbers placed in our distribution."""
import re

import numpy as np
import pytest

from tinyagent.science import placement as P
from tinyagent.science.placement import book_in_distribution, columns_by_agent


def test_a_book_number_is_placed_at_its_percentile_among_our_runs():
    ours = {"a": {"none": {"pass@1": np.linspace(0, 1, 21)}},
            "b": {"none": {"pass@1": np.linspace(0.5, 1.5, 21)}}}
    table = book_in_distribution({"none": {"pass@1": 2.0}}, ours, ["pass@1", "reads"])
    (row,) = table.to_dict("records")
    assert row["percentile"] == 100 and not row["inside"] and row["inside agents"] == "none"
    table = book_in_distribution({"none": {"pass@1": 0.2}}, ours, ["pass@1"])
    assert table.loc[0, "inside agents"] == "a" and table.loc[0, "inside"]


OURS = {"a": {"none": {"pass@1": np.linspace(0, 1, 21)}}}


@pytest.mark.parametrize("book, kwargs, says", [
    ({"none": {"pass@1": float("nan")}}, {}, "must be finite"),
    ({"none": {"pass@1": "0.5"}}, {}, "must be finite, a real number"),
    ([("none", 0.5)], {}, "book must map each setting to {column: number}"),
    ({"none": {"pass@1": 0.5}}, {"central": -0.5}, "central must be a share"),
    ({"none": {"pass@1": 0.5}}, {"central": 90}, "central must be a share"),
    ({"none": {"pass@1": 0.5}}, {"columns": "pass@1"}, "columns must be a non-empty list"),
    ({"none": {"pass@1": 0.5}}, {"columns": []}, "columns must be a non-empty list"),
])
def test_odd_arguments_are_refused_naming_what_is_allowed(book, kwargs, says):
    with pytest.raises((TypeError, ValueError), match=re.escape(says)):
        book_in_distribution(book, OURS, **{"columns": ["pass@1"], **kwargs})


def test_columns_by_agent_gathers_each_column_over_an_agents_seeds():
    summaries = {"a": [{"none": {"pass@1": 0.1, "reads": 1.0}}, {"none": {"pass@1": 0.3, "reads": 2.0}}]}
    assert columns_by_agent(summaries, ["none"], ["pass@1"]) == {"a": {"none": {"pass@1": [0.1, 0.3]}}}


@pytest.mark.parametrize("ours, words", [
    ({}, ["holds no agent"]),
    ({"a": {"kl": {"pass@1": [0.5]}}}, ["setting 'none'", "agent 'a'", "'kl'"]),
    ({"a": {"none": {"reads": [0.5]}}}, ["column 'pass@1'", "agent 'a'", "'reads'"]),
    ({"a": {"none": {"pass@1": []}}}, ["no runs", "empty"]),
    ({"a": {"none": {"pass@1": [0.5, float("nan")]}}}, ["holds NaN"]),
])
def test_our_runs_missing_empty_or_nan_are_refused_naming_which(ours, words):
    with pytest.raises(ValueError) as info:
        book_in_distribution({"none": {"pass@1": 0.5}}, ours, ["pass@1"])
    assert all(w in str(info.value) for w in words), str(info.value)


def test_seed_noise_pools_the_variance_within_agents_and_ignores_their_means():
    """Two agents whose runs differ only by an offset: the offset adds nothing; the pooled seed
    sd is the root of the agents' mean variance, and a two-seed difference's is sqrt 2 times it."""
    ours = {"a": {"s": {"pass@1": [0.1, 0.3, 0.2]}}, "b": {"s": {"pass@1": [0.6, 0.8, 0.7, 0.9]}}}
    out = P.seed_noise(ours, ["s"], "pass@1").loc["s"]
    pooled = np.sqrt((np.var([0.1, 0.3, 0.2], ddof=1) + np.var([0.6, 0.8, 0.7, 0.9], ddof=1)) / 2)
    assert out["seed sd"] == pytest.approx(pooled)
    assert out["two-seed difference sd"] == pytest.approx(np.sqrt(2) * pooled)
    with pytest.raises(ValueError, match="not among"):
        P.seed_noise(ours, ["t"], "pass@1")
