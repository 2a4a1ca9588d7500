"""Whether the declared rule's verdicts replicate: the fresh draw against the pilot, and the draw
against itself split into halves. Both compare four-way verdicts claim by claim (`agreement`)."""
import numpy as np
import pandas as pd

from ..checks import nonempty_list, positive_int, seed_int
from .plan import (RESAMPLES, VERDICTS, _bootstrap_means, _claim_verdicts, _claims_arg, _counts,
                   _level, _percentiles, _resamples_arg, _values_arg, family_size, verdicts)


def verdict_lists(a, b):
    """`a` and `b` as lists of verdicts of equal length, each one of the four."""
    a, b = nonempty_list("a (verdicts)", a), nonempty_list("b (verdicts)", b)
    if len(a) != len(b):
        raise ValueError(f"agreement compares verdicts claim by claim: got {len(a)} and {len(b)}")
    unknown = sorted({v for v in a + b if v not in VERDICTS}, key=str)
    if unknown:
        raise ValueError(f"agreement takes the verdicts {VERDICTS}, got {unknown[:3]}")
    return list(a), list(b)


def agreement(a, b):
    """Two lists of verdicts compared: the share with the same verdict, the number of
    contradictions (holds or equivalent against does not hold) and the share resolved."""
    a, b = verdict_lists(a, b)
    pairs = list(zip(a, b))
    positive = {"holds", "equivalent"}
    contradictions = sum((x in positive and y == "does not hold") or
                         (y in positive and x == "does not hold") for x, y in pairs)
    resolved = np.mean([v != "unresolved" for pair in pairs for v in pair])
    return {"same verdict": float(np.mean([x == y for x, y in pairs])),
            "contradictions": int(contradictions), "resolved": float(resolved),
            "claims": len(pairs)}


# The plan's replication goal against the pilot (study_plan.json, "replication"): at least this share
# of the same four-way verdicts, at most this many contradictions, at least this share resolved.
GOAL = {"same verdict": (">=", 0.90), "contradictions": ("<=", 0), "resolved": (">=", 0.70)}


def replication(claims, pilot_values, draw_values):
    """The fresh draw against the pilot, by the declared rule: (one row per claim, its pilot and
    fresh-draw verdicts and whether they are the same; one row per goal of the plan, what was
    measured, the goal and whether it is met). `resolved` pools both verdict lists, as
    `agreement` defines it. Both sets of values must measure the same claims."""
    pilot = verdicts(claims, pilot_values)["verdict"]
    draw = verdicts(claims, draw_values)["verdict"]
    per_claim = pd.DataFrame({"pilot": pilot, "fresh draw": draw})
    per_claim["same"] = per_claim["pilot"] == per_claim["fresh draw"]
    measured = agreement(pilot, draw)
    goal = pd.DataFrame(
        [{"measure": name, "measured": measured[name], "goal": f"{op} {bound:g}",
          "met": measured[name] >= bound if op == ">=" else measured[name] <= bound}
         for name, (op, bound) in GOAL.items()]).set_index("measure")
    return per_claim, goal


def split_halves(claims, values_by_agent, splits=1000, seed=0, m=None, resamples=RESAMPLES):
    """The draw against itself: `splits` stratified random splits of every agent's seeds into two
    halves, each half scored by the rule (one bootstrap seed per half). Returns (per claim, the
    share of splits in which both halves give the same verdict; the three agreement numbers
    pooled over all splits). The resample pattern of a half's positions is drawn once and the
    seeds that fill the positions are drawn afresh per split, which keeps 1,000 splits to
    seconds. Each half needs at least two seeds of every agent."""
    claims = _claims_arg(claims)
    _values_arg(values_by_agent, family_size(claims), min_seeds=4)
    splits, seed = positive_int("splits", splits), seed_int("seed", seed)
    resamples = _resamples_arg(resamples)
    level = _level(claims, m)
    rng = np.random.default_rng(seed)
    halves = {a: len(v) // 2 for a, v in values_by_agent.items()}
    counts = [[_counts(rng, halves[a], resamples) for a in values_by_agent] for _ in range(2)]
    same = np.zeros(len(claims))
    first, second = [], []
    for _ in range(splits):
        verdict_sets = []
        order = {a: rng.permutation(len(v)) for a, v in values_by_agent.items()}
        for h in range(2):
            part = {a: v[order[a][h * halves[a]:(h + 1) * halves[a]]]
                    for a, v in values_by_agent.items()}
            boot = _bootstrap_means(part, counts[h])
            effect = np.mean([v.mean(0) for v in part.values()], 0)
            verdict_sets.append([v[0] for v in _claim_verdicts(claims, effect,
                                                                *_percentiles(boot, level))])
        same += np.array([a == b for a, b in zip(*verdict_sets)])
        first += verdict_sets[0]
        second += verdict_sets[1]
    keep = pd.Series(same / splits, index=pd.Index([c.key for c in claims], name="claim"),
                     name="halves agree")
    return keep, agreement(first, second)
