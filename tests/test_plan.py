"""science/plan.py: the declared rule of the study, as the plan states it."""
import numpy as np
import pytest

from tinyagent.science import plan, replication
from tinyagent.science.plan import Part, ScoredClaim


def test_every_scored_claim_of_the_plan_has_parts_of_its_estimand():
    claims = plan.scored_claims()
    declared = {k: v for k, v in plan.PLAN["claims"].items() if v["estimand"] != "not scored"}
    assert [c.key for c in claims] == list(declared)
    for c in claims:
        kinds = {p.kind for p in c.parts}
        if c.estimand in ("per-run frequency", "probability of improvement"):
            assert kinds == {"share"} and len(c.parts) == 1
        elif c.estimand == "mean":
            assert kinds == {"mean"} and all(p.test is not None for p in c.parts)
        else:
            assert kinds == {"equivalence"}
            assert all(p.rope == declared[c.key]["rope"] for p in c.parts)
    assert plan.family_size(claims) == sum(len(c.parts) for c in claims) > len(claims)


def _claim(kind, **kw):
    return ScoredClaim("x", kind, (Part("", lambda r: r, kind, **kw),), "run")


@pytest.mark.parametrize("kind, values, kw, expected", [
    ("share", [1.0] * 20, {}, "holds"),
    ("share", [0.0] * 20, {}, "does not hold"),
    ("share", [0.0, 1.0] * 10, {}, "unresolved"),
    ("equivalence", [0.01, -0.01] * 10, {"rope": 0.1}, "equivalent"),
    ("equivalence", [0.5, 0.6] * 10, {"rope": 0.1}, "does not hold"),
    ("equivalence", [-0.3, 0.3] * 10, {"rope": 0.1}, "unresolved"),
    ("mean", [2.0, 3.0] * 10, {"test": lambda v: v > 1}, "holds"),
    ("mean", [-2.0, -3.0] * 10, {"test": lambda v: v > 1}, "does not hold"),
])
def test_the_four_way_verdict(kind, values, kw, expected):
    table = plan.verdicts([_claim(kind, **kw)], {"a": np.array(values)[:, None]}, m=1,
                          resamples=2000, seeds=(0, 1))
    assert table.loc["x", "verdict"] == expected


def test_a_claim_holds_only_when_every_part_does_and_fails_when_any_part_fails():
    assert plan._combine(["holds", "holds"]) == "holds"
    assert plan._combine(["holds", "unresolved"]) == "unresolved"
    assert plan._combine(["holds", "does not hold", "unresolved"]) == "does not hold"
    assert plan._combine(["equivalent", "equivalent"]) == "equivalent"


def test_intervals_weight_agents_equally_and_resample_within_each():
    values = {"a": np.zeros((4, 1)), "b": np.ones((40, 1))}        # sizes differ tenfold
    effect, low, high = plan.intervals(values, level=0.99, resamples=500)
    assert effect[0] == 0.5 and low[0] == pytest.approx(0.5) == high[0]   # no spread within agents
    g = np.random.default_rng(1)
    noisy = {"a": g.normal(size=(20, 2)), "b": g.normal(size=(20, 2))}
    _, lo95, hi95 = plan.intervals(noisy, 0.95, 4000)
    _, lo99, hi99 = plan.intervals(noisy, 0.999, 4000)
    assert (lo99 < lo95).all() and (hi95 < hi99).all()             # the family-wise level widens


def test_a_verdict_that_changes_with_the_bootstrap_seed_is_unresolved():
    # a share whose interval ends right at 1/2 flips between generator seeds
    values = {"a": np.array([1.0] * 14 + [0.0] * 6)[:, None]}
    lows = [plan.intervals(values, 0.95, 200, seed)[1][0] for seed in range(10)]
    assert min(lows) <= 0.5 < max(lows)
    table = plan.verdicts([_claim("share")], values, m=1, resamples=200, seeds=range(10))
    assert table.loc["x", "verdict"] == "unresolved" and table.loc["x", "unstable"]


def test_agreement_counts_contradictions_and_an_all_unresolved_rule_is_not_resolved():
    a = ["holds", "does not hold", "equivalent", "unresolved"]
    b = ["does not hold", "does not hold", "does not hold", "unresolved"]
    out = replication.agreement(a, b)
    assert out["contradictions"] == 2 and out["same verdict"] == 0.5
    assert replication.agreement(["unresolved"] * 4, ["unresolved"] * 4)["resolved"] == 0.0


def test_the_pilot_scores_every_part_finitely_at_every_seed():
    from tinyagent.science import diagnostics, study
    grouped = study.by_agent(study.load_pilot())
    summaries = {a: [{label: diagnostics.run_summary(r) for label, r in seed.items()}
                     for seed in seeds] for a, seeds in grouped.items()}
    claims = plan.scored_claims()
    values = plan.values(claims, summaries, grouped)
    assert {a: v.shape for a, v in values.items()} == {a: (20, plan.family_size())
                                                        for a in study.PILOT_AGENTS}
    shares = [i for i, p in enumerate(p for c in claims for p in c.parts) if p.kind == "share"]
    assert set(np.unique(np.concatenate([v[:, shares].ravel() for v in values.values()]))) <= {0, 0.5, 1}


def _shares(rate, seeds=20, agents=("a", "b")):
    """Per-run values of one share claim holding in a `rate` fraction of each agent's seeds."""
    held = int(rate * seeds)
    return {a: np.array([1.0] * held + [0.0] * (seeds - held))[:, None] for a in agents}


def test_replication_meets_the_goal_only_when_the_draw_repeats_the_pilot():
    claims = [_claim("share")]
    same, goal = replication.replication(claims, _shares(1.0), _shares(1.0))
    assert same["same"].all() and goal["met"].all()
    reversed_, goal = replication.replication(claims, _shares(1.0), _shares(0.0))
    assert not reversed_["same"].any()
    assert goal.loc["contradictions", "measured"] == 1 and not goal.loc["contradictions", "met"]
    assert not goal.loc["same verdict", "met"]
    _, goal = replication.replication(claims, _shares(0.5), _shares(0.5))    # unresolved both times
    assert goal.loc["same verdict", "met"] and not goal.loc["resolved", "met"]


@pytest.mark.parametrize("level", [0.9, 0.95, 1 - 0.05 / 91])
def test_percentiles_are_numpys_linear_quantiles(level):
    boot = np.random.default_rng(0).normal(size=(7, 20_001))
    want = np.quantile(boot, [(1 - level) / 2, (1 + level) / 2], axis=1)
    low, high = plan._percentiles(boot, level)         # (reorders boot's rows in place)
    assert np.allclose(low, want[0], rtol=0, atol=1e-14) and np.allclose(high, want[1], rtol=0, atol=1e-14)


GOOD = {"a": np.array([1.0, 0.0] * 10)[:, None]}


@pytest.mark.parametrize("call, error, words", [
    (lambda: plan.intervals(GOOD, level=95), ValueError, "level must be a probability in (0, 1)"),
    (lambda: plan.intervals(GOOD, level=-0.5), ValueError, "level must be a probability"),
    (lambda: plan.intervals(GOOD, 0.95, resamples=1), ValueError, "resamples must be an integer"),
    (lambda: plan.intervals(GOOD, 0.95, seed=-1), ValueError, "seed must be an integer in [0, 2**64)"),
    (lambda: plan.intervals({}, 0.95), TypeError, "values_by_agent must map each agent"),
    (lambda: plan.intervals([GOOD["a"]], 0.95), TypeError, "values_by_agent must map each agent"),
    (lambda: plan.intervals({"a": np.ones(20)}, 0.95), ValueError, "must be a 2-D array (seeds, parts)"),
    (lambda: plan.intervals({"a": np.full((20, 1), np.nan)}, 0.95), ValueError, "NaN or infinite"),
    (lambda: plan.verdicts([_claim("share")], {"a": np.ones((20, 3))}), ValueError, "has 3 parts; the claims have 1"),
    (lambda: plan.verdicts([], GOOD), ValueError, "claims must hold at least one item"),
    (lambda: plan.verdicts(["x"], GOOD), TypeError, "each of claims must be a ScoredClaim"),
    (lambda: plan.verdicts([_claim("share")], GOOD, m=0), ValueError, "m (intervals in the family) must be a positive integer"),
    (lambda: plan.verdicts([_claim("share")], GOOD, seeds=()), ValueError, "seeds (bootstrap generator seeds) must hold"),
    (lambda: replication.split_halves([_claim("share")], GOOD, splits=0), ValueError, "splits must be a positive integer"),
    (lambda: replication.split_halves([_claim("share")], {"a": np.ones((3, 1))}), ValueError, "at least 4 seeds"),
    (lambda: replication.agreement(["holds"], ["holds", "holds"]), ValueError, "got 1 and 2"),
    (lambda: replication.agreement(["yes"], ["holds"]), ValueError, "agreement takes the verdicts"),
    (lambda: replication.agreement("holds", ["holds"]), TypeError, "a (verdicts) must be a list or tuple"),
])
def test_odd_arguments_are_refused_naming_what_is_allowed(call, error, words):
    with pytest.raises(error) as info:
        call()
    assert words in str(info.value)
