"""Tests of tinyagent.science.verdicts: the stratified bootstrap, the interval rule, the re-draw check and
the book's numbers placed in our distribution."""
import numpy as np
import pytest

from tinyagent.science.report import Claim
from tinyagent.science.verdicts import (book_in_distribution, claim_verdicts, halves, measures,
                                redraw_check, stratified_interval, verdict)


def test_a_constant_effect_has_a_point_interval():
    assert stratified_interval([[0.3] * 5, [0.3] * 7]) == pytest.approx((0.3, 0.3, 0.3))


def test_seeds_are_resampled_within_agents_not_across_them():
    # each agent constant: a pooled bootstrap would spread, a stratified one cannot
    effect, low, high = stratified_interval([[0.0] * 10, [1.0] * 10])
    assert effect == low == high == 0.5
    effect, low, high = stratified_interval([np.arange(10.0), np.arange(10.0)])
    assert low < effect == 4.5 < high


def test_the_interval_narrows_with_more_seeds():
    rng = np.random.default_rng(1)
    values = rng.normal(size=200)
    few = stratified_interval([values[:10]])
    many = stratified_interval([values])
    assert many[2] - many[1] < few[2] - few[1]


def test_the_verdict_follows_where_the_interval_lies():
    above = lambda v: v > 0                                        # noqa: E731
    assert verdict(above, 0.1, 0.4) == "holds"
    assert verdict(above, -0.4, -0.1) == "does not hold"
    assert verdict(above, -0.1, 0.1) == "unresolved"
    within = lambda v: abs(v) < 0.08                               # noqa: E731
    assert verdict(within, -0.05, 0.05) == "holds"
    assert verdict(within, -0.5, 0.5) == "unresolved"              # both ends fail, the middle holds
    assert verdict(within, 0.1, 0.5) == "does not hold"


def test_a_non_finite_measure_is_refused_not_scored():
    claim = Claim("x", "x", lambda r: r["v"], lambda v: v > 0)
    with pytest.raises(ValueError, match="non-finite"):
        measures([claim], {"a": [{"v": 1.0}, {"v": float("nan")}]})


def claims_and_values(shift, seeds=20, agents=3, seed=0):
    rng = np.random.default_rng(seed)
    claims = [Claim(f"c{i}", "", lambda r, i=i: r[i], lambda v: v > 0) for i in range(len(shift))]
    results = {f"agent{a}": [[s + rng.normal(scale=0.1) for s in shift] for _ in range(seeds)]
               for a in range(agents)}
    return claims, measures(claims, results)


def test_clear_effects_are_resolved_and_agree_across_redraws():
    claims, values = claims_and_values([1.0, -1.0, 0.5])
    table = claim_verdicts(claims, values)
    assert list(table["verdict"]) == ["holds", "does not hold", "holds"]
    assert set(table.columns) >= {"effect", "low", "high", "agent0", "agent1", "agent2"}
    check = redraw_check(claims, values, random_splits=3)
    assert (check["same verdict"] == 1).all() and (check["resolved"] == 1).all()


def test_an_effect_at_the_threshold_stays_unresolved_and_lowers_the_resolved_share():
    claims, values = claims_and_values([1.0, 0.0])
    assert claim_verdicts(claims, values).loc["c1", "verdict"] == "unresolved"
    assert redraw_check(claims, values, random_splits=3).loc["first half of the seeds vs second half", "resolved"] < 1


def test_halves_split_each_agents_seeds_in_order():
    claims = [Claim("late", "", lambda r: r, lambda v: v > 0)]
    values = {"late": {"a": np.r_[-np.ones(10), np.ones(10)], "b": np.r_[-np.ones(6), np.ones(6)]}}
    assert halves(claims, values).loc["late"].tolist() == ["does not hold", "holds"]


def test_a_book_number_is_placed_at_its_percentile_among_our_runs():
    ours = {"a": {"none": {"pass@1": np.linspace(0, 1, 21)}},
            "b": {"none": {"pass@1": np.linspace(0.5, 1.5, 21)}}}
    table = book_in_distribution({"none": {"pass@1": 2.0}}, ours, ["pass@1", "reads"])
    (row,) = table.to_dict("records")
    assert row["percentile"] == 100 and not row["inside"] and row["inside agents"] == "none"
    table = book_in_distribution({"none": {"pass@1": 0.2}}, ours, ["pass@1"])
    assert table.loc[0, "inside agents"] == "a" and table.loc[0, "inside"]


def test_the_live_k_of_n_sits_beside_the_study_verdict():
    import pandas as pd
    claims, values = claims_and_values([1.0, -1.0])
    live = pd.DataFrame({"holds in": [4, 1], "of seeds": [5, 5]}, index=["c0", "c1"])
    table = claim_verdicts(claims, values, live=live)
    assert table["live, k of n"].tolist() == ["4 of 5", "1 of 5"]


def test_the_margin_is_how_far_an_interval_can_widen_before_its_verdict_changes():
    from tinyagent.science.verdicts import margin
    above = lambda v: v > 0                                        # noqa: E731
    assert margin(above, 0.1, 0.3) == pytest.approx(0.5, abs=0.03)  # widened by 0.1 it reaches 0
    assert margin(above, 1.0, 1.1) == 5.0                          # far from 0: the cap
    assert margin(above, -0.1, 0.1) == 0.0                         # unresolved already
    assert margin(lambda v: v < 0, -0.3, -0.1) == pytest.approx(0.5, abs=0.03)
