"""science/plan_v2.py and replication_v2.py: rule v2 as study_plan_v2.json declares it, its
per-agent columns at their nominal level, and a replication goal no degenerate rule meets."""
import json
import math

import numpy as np
import pytest

from tinyagent.science import plan_v2, replication_v2
from tinyagent.science.plan_parts import ScoredClaim
from tinyagent.science.plan_v2 import RulePart


def test_every_claim_has_parts_of_its_estimand_and_every_margin_an_argument():
    claims = plan_v2.scored_claims()
    declared = {k: v for k, v in plan_v2.PLAN["claims"].items() if v["estimand"] != "not scored"}
    assert [c.key for c in claims] == list(declared)
    kinds = {"per-run frequency": "bound", "probability of improvement": "band",
             "difference of the mean": "band", "equivalence of the mean": "equivalence",
             "mean beyond the margin": "bound"}
    for c in claims:
        assert {p.kind for p in c.parts} == {kinds[c.estimand]}, c.key
        if "margin" in declared[c.key]:
            assert all(p.margin == plan_v2.MARGINS[declared[c.key]["margin"]] for p in c.parts)
    for name, margin in plan_v2.RULE["margins"].items():
        assert margin["value"] > 0 and len(margin["why"]) > 200 and margin["unit"], name
    improvement = [p for c in claims if c.estimand == "probability of improvement" for p in c.parts]
    assert {(p.center - p.margin, p.center + p.margin) for p in improvement} == {(0.4, 0.6)}


def test_the_duplicate_claim_is_merged():
    v1 = json.loads((plan_v2.PACKAGE / "data" / "study_plan.json").read_text())["claims"]
    assert {"beta1_reads", "beta1_few_reads"} <= set(v1)
    assert "beta1_reads" in plan_v2.PLAN["claims"] and "beta1_few_reads" not in plan_v2.PLAN["claims"]
    assert set(plan_v2.PLAN["claims"]) == set(v1) - {"beta1_few_reads"}


def _claim(kind, center=0.0, margin=0.0, sign=1, share=False, parts=1):
    return ScoredClaim("x", kind, tuple(RulePart("", None, kind, center, margin, sign, share)
                                        for _ in range(parts)), "run")


@pytest.mark.parametrize("claim, values, expected", [
    (_claim("bound", 0.5, share=True), [1.0] * 20, "holds"),
    (_claim("bound", 0.5, share=True), [0.0] * 20, "does not hold"),
    (_claim("bound", 0.5, share=True), [0.0, 1.0] * 10, "unresolved"),
    (_claim("band", 0.5, 0.1, share=True), [0.5] * 20, "equivalent"),      # ties: no difference
    (_claim("band", 0.5, 0.1, share=True), [1.0] * 20, "holds"),
    (_claim("band", 0.5, 0.1, share=True), [0.0] * 20, "does not hold"),
    (_claim("band", 0.0, 0.05), [0.30, 0.32] * 10, "holds"),
    (_claim("band", 0.0, 0.05, sign=-1), [0.30, 0.32] * 10, "does not hold"),
    (_claim("band", 0.0, 0.05, sign=-1), [-0.30, -0.32] * 10, "holds"),
    (_claim("band", 0.0, 0.05), [0.01, -0.01] * 10, "equivalent"),
    (_claim("band", 0.0, 0.05), [0.0, 0.1] * 10, "unresolved"),             # straddles the margin
    (_claim("equivalence", 0.0, 0.1), [0.01, -0.01] * 10, "equivalent"),
    (_claim("equivalence", 0.0, 0.1), [0.5, 0.6] * 10, "does not hold"),
    (_claim("equivalence", 0.0, 0.1), [-0.5, -0.6] * 10, "does not hold"),
    (_claim("equivalence", 0.0, 0.1), [-1.0, 1.0] * 10, "unresolved"),
    (_claim("bound", 0.05, sign=-1), [0.0, 0.01] * 10, "holds"),             # below +margin
    (_claim("bound", 0.05, sign=-1), [0.2, 0.3] * 10, "does not hold"),
])
def test_the_four_way_verdict_of_one_part(claim, values, expected):
    noisy = {a: np.array(values)[:, None] + 0.0 for a in ("a", "b", "c")}
    table = plan_v2.verdicts([claim], noisy, resamples=2000, seeds=(0, 1))
    assert table.loc["x", "verdict"] == expected


def test_a_claim_needs_every_part_and_fails_on_any_contradicting_part():
    assert plan_v2.claim_test([("holds", 0.001), ("holds", 0.01)]) == ("holds", 0.01)
    assert plan_v2.claim_test([("holds", 0.001), ("does not hold", 0.002)]) == ("does not hold", 0.004)
    assert plan_v2.claim_test([("holds", 0.001), ("equivalent", 0.003)]) == ("does not hold", 0.006)
    assert plan_v2.claim_test([("equivalent", 0.01), ("equivalent", 0.02)]) == ("equivalent", 0.02)
    assert plan_v2.claim_test([("holds", 0.001), ("unresolved", 1.0)]) == ("unresolved", 1.0)


def test_holm_steps_down_and_stops_at_the_first_failure():
    rejected, levels = plan_v2.holm([0.001, 0.04, 0.012, 0.03], alpha=0.05)
    # sorted 0.001 <= 0.05/4, 0.012 <= 0.05/3, 0.03 > 0.05/2: stops; 0.04 is not tested further
    assert list(rejected) == [True, False, True, False]
    assert levels[0] == 0.05 / 4 and levels[2] == 0.05 / 3 and levels[3] == levels[1] == 0.05 / 2


def test_the_interval_resamples_agents_so_agents_that_differ_widen_it():
    # no spread within an agent: only resampling agents gives the interval any width
    values = {a: np.full((20, 1), float(k)) for k, a in enumerate("abcdef")}
    boot = plan_v2.hierarchical_means(values, 4000, 0)
    assert boot.mean() == pytest.approx(2.5, abs=0.05) and boot.std() > 0.5
    same = {a: np.full((20, 1), 1.0) for a in "abcdef"}
    assert np.ptp(plan_v2.hierarchical_means(same, 500, 0)) == 0


@pytest.mark.parametrize("t, df, cdf", [(2.093024, 19, 0.975), (1.0, 1, 0.75), (2.919986, 2, 0.95),
                                        (-1.729133, 19, 0.05), (0.0, 7, 0.5), (3.365, 5, 0.99)])
def test_student_t_matches_its_tables(t, df, cdf):
    assert plan_v2.student_t_cdf(t, df) == pytest.approx(cdf, abs=2e-5)


def _rate(claim, draw, n_sim=4000, seeds=20, alpha=0.05):
    """How often one agent's own column says "holds" for simulated seeds (m = 1: level alpha)."""
    g = np.random.default_rng(0)
    holds = 0
    for _ in range(n_sim):
        v = draw(g, seeds)[:, None]
        verdict = plan_v2._decide([claim], v.mean(0), plan_v2.ExactTails(v, claim.parts))[0][0]
        holds += verdict == "holds"
    return holds / n_sim


@pytest.mark.parametrize("claim, draw", [
    # a per-run share of exactly 1/2
    (_claim("bound", 0.5, share=True), lambda g, n: g.integers(0, 2, n).astype(float)),
    # a paired win share at the band's edge: wins 0.6 of the seeds that are not tied
    (_claim("band", 0.5, 0.1, share=True), lambda g, n: (g.random(n) < 0.6).astype(float)),
    # a mean exactly at the margin
    (_claim("band", 0.0, 0.05), lambda g, n: 0.05 + 0.1 * g.standard_normal(n)),
])
def test_per_agent_columns_hold_their_nominal_level(claim, draw):
    # at the boundary the claim is false: "holds" at most 5% of the time (+ Monte Carlo error)
    assert _rate(claim, draw) <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / 4000)


def test_kappa_corrects_for_chance_and_gives_nothing_to_a_constant_rule():
    a = ["holds", "does not hold", "equivalent", "unresolved"] * 3
    assert replication_v2.kappa(a, a) == 1.0
    assert replication_v2.kappa(["holds"] * 12, ["holds"] * 12) == 0.0
    assert replication_v2.kappa(a, a[1:] + a[:1]) < 0
    out = replication_v2.agreement(["holds", "equivalent", "unresolved"],
                                   ["equivalent", "equivalent", "holds"])
    assert out["contradictions"] == 1 and out["resolved"] == 5 / 6


@pytest.fixture(scope="module")
def two_draws():
    from tinyagent.science import study
    claims = plan_v2.scored_claims()
    return (claims, plan_v2.study_values(study.load_pilot(), claims),
            plan_v2.study_values(study.load_records(), claims))


@pytest.mark.parametrize("rule", sorted(replication_v2.DEGENERATE))
def test_no_degenerate_rule_meets_the_replication_goal_on_the_pilot_and_the_fresh_draw(two_draws, rule):
    claims, pilot, fresh = two_draws
    decide = replication_v2.DEGENERATE[rule]
    measured = replication_v2.agreement(decide(claims, pilot), decide(claims, fresh))
    goal = replication_v2.goal_table(measured)
    assert not goal["met"].all(), (rule, measured)


def test_the_reanalysis_is_labelled_and_every_verdict_is_one_of_four(two_draws):
    claims, pilot, _ = two_draws
    table = plan_v2.table(claims, pilot, resamples=2000, seeds=(0,))
    assert set(table["verdict"]) <= set(plan_v2.VERDICTS)
    assert list(table.index) == [c.key for c in claims]
    assert plan_v2.REANALYSIS.startswith("re-analysis")


GOOD = {"a": np.array([1.0, 0.0] * 10)[:, None]}


@pytest.mark.parametrize("call, error, words", [
    (lambda: plan_v2.verdicts([_claim("bound", 0.5)], GOOD, resamples=1), ValueError, "resamples"),
    (lambda: plan_v2.verdicts([_claim("bound", 0.5)], GOOD, seeds=()), ValueError, "bootstrap generator seeds"),
    (lambda: plan_v2.verdicts([], GOOD), ValueError, "at least one"),
    (lambda: plan_v2.verdicts(["x"], GOOD), TypeError, "ScoredClaim"),
    (lambda: plan_v2.verdicts([_claim("bound", 0.5)], {"a": np.ones((20, 2))}), ValueError, "parts"),
    (lambda: plan_v2.verdicts([_claim("bound", 0.5)], {}), TypeError, "map each agent"),
    (lambda: replication_v2.kappa(["holds"], ["holds", "holds"]), ValueError, "claim by claim"),
    (lambda: replication_v2.kappa(["yes"], ["holds"]), ValueError, "verdicts"),
    (lambda: replication_v2.predicted_replication([_claim("bound", 0.5)], GOOD, [(2, 4)], draws=0),
     ValueError, "draws"),
])
def test_odd_arguments_are_refused_naming_what_is_allowed(call, error, words):
    with pytest.raises(error, match=None) as info:
        call()
    assert words in str(info.value)


def test_variance_components_separate_agents_from_seeds():
    g = np.random.default_rng(0)
    claim = _claim("band", 0.0, 0.05)
    population = {a: (mean + 0.3 * g.standard_normal((400, 1)))
                  for a, mean in zip("abcdefgh", [-0.2, -0.1, 0.0, 0.1, 0.2, -0.2, 0.0, 0.2])}
    out = replication_v2.variance_components([claim], population).loc["x"]
    assert out["seed sd"] == pytest.approx(0.3, abs=0.02)
    assert out["agent sd"] == pytest.approx(np.std([-0.2, -0.1, 0.0, 0.1, 0.2, -0.2, 0.0, 0.2],
                                                   ddof=1), abs=0.03)
    same = {a: 0.3 * g.standard_normal((400, 1)) for a in "abcdefgh"}
    assert replication_v2.variance_components([claim], same).loc["x", "agent sd"] < 0.03


def test_the_predicted_replication_reports_each_goal_as_a_share_of_simulated_pairs():
    claim = _claim("bound", 0.5, share=True)
    population = {a: np.ones((20, 1)) for a in "abc"}          # every run holds: always resolved
    out = replication_v2.predicted_replication([claim], population, [(3, 5)], reference=(3, 5),
                                               draws=3, resamples=200)
    row = out.iloc[0]
    assert (row["agents"], row["seeds"], row["runs"]) == (3, 5, 135)
    assert row["resolved"] == 1.0 and row["contradictions met"] == 1.0
    assert row["kappa"] == 0.0 and row["goal met"] == 0.0      # one verdict everywhere: kappa 0


def test_the_reanalysis_under_the_full_rule_is_stable_as_the_plan_says():
    """Rule v2 at its declared resamples and bootstrap seeds on the data that existed before it
    (about 15 s): the fresh draw's verdicts do not change with the bootstrap's seed; the pilot's
    one that does is the plan's, and is counted unresolved."""
    tables = plan_v2.reanalysis()
    assert set(tables) == {"pilot", "fresh draw"}
    assert all((t["scored"] == plan_v2.REANALYSIS).all() for t in tables.values())
    assert not tables["fresh draw"]["unstable"].any()
    unstable = list(tables["pilot"].index[tables["pilot"]["unstable"]])
    assert unstable == ["bonus01_nopass"] and tables["pilot"].loc["bonus01_nopass", "verdict"] == "unresolved"
    assert "bonus01_nopass" in plan_v2.RULE["stability"]


def test_stability_is_the_share_of_halves_that_keep_the_draws_verdict():
    """Runs that all hold keep "holds" in every half; a share of runs just above one half (0.53 of
    1,200 runs: z about 2.1) holds on the whole draw and is lost by halves (z about 1.5)."""
    claim = _claim("bound", 0.5, share=True)
    clear = {a: np.ones((8, 1)) for a in "abcd"}
    out = replication_v2.stability([claim], clear, splits=3, resamples=500,
                                   whole=plan_v2.verdicts([claim], clear, 500, (0,))["verdict"])
    assert out.loc["x", "verdict"] == "holds" and out.loc["x", "halves keep it"] == 1.0
    edge = {a: np.array([1.0] * 106 + [0.0] * 94)[:, None] for a in "abcdef"}   # 0.53 of 200
    whole = plan_v2.verdicts([claim], edge, resamples=2000, seeds=(0,))["verdict"]
    out = replication_v2.stability([claim], edge, splits=3, resamples=1000, whole=whole)
    assert out.loc["x", "verdict"] == "holds" and out.loc["x", "halves keep it"] < 1.0
    with pytest.raises(ValueError, match="splits"):
        replication_v2.stability([claim], clear, splits=0)
