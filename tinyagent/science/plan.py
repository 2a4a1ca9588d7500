"""The study's declared rule (tinyagent/data/study_plan.json), as code: each claim's estimand, a
four-way verdict, a family-wise level, and verdicts that do not depend on the bootstrap's seed.

A claim is scored through its parts. A part is one number per run (per seed), and an estimand:
  - a share (per-run frequency, or the probability of improvement): the number is 1 where the
    run's statement holds and 0 where it does not (ties of a paired comparison count 1/2); the
    part holds if its whole interval lies above 1/2 and does not hold if below;
  - a mean (paired by seed where it compares settings): holds if every value of the interval
    passes the part's test, does not hold if none does;
  - an equivalence: the signed mean is *equivalent* if its whole interval lies inside +-rope,
    does not hold if wholly outside.
A claim holds (or is equivalent) when every part does, does not hold when any part does not, and
is unresolved otherwise. Intervals are stratified bootstrap percentile intervals (seeds resampled
within each base agent, agents weighted equally) at the Bonferroni level over every part the plan
scores, from the plan's number of resamples, computed under ten generator seeds: a claim whose
verdict differs among them is unresolved (and said to be unstable). Nothing that trains or
evaluates imports this module.
"""
import json
from dataclasses import dataclass
from typing import Callable

import numpy as np
import pandas as pd

from ..harness.cache import PACKAGE
from ..checks import instance, int_in, nonempty_list, positive_int, real_number, seed_int
from .claims import (NEAR_ENTROPY, SAME_REWARD, TRACK_REWARD, WINDOWS, beta_size_claims,
                     comparison_claims, entropy_fall_claims, figure_claims, series, window_means)
from . import study
from .claims.comparison import LOSSES, NEAR_DISTANCE
from .experiments import COMPARISON
from .report import PASS1_NOISE

PLAN = json.loads((PACKAGE / "data" / "study_plan.json").read_text())
RESAMPLES = PLAN["rule"]["resamples"]
BOOTSTRAP_SEEDS = tuple(range(10))
ALPHA = 0.05
VERDICTS = ("holds", "does not hold", "equivalent", "unresolved")


@dataclass(frozen=True)
class Part:
    """One number per run and how it is decided: kind "share", "mean" (with `test`) or
    "equivalence" (with `rope`)."""
    name: str
    per_run: Callable
    kind: str
    test: Callable | None = None
    rope: float | None = None


@dataclass(frozen=True)
class ScoredClaim:
    key: str
    estimand: str
    parts: tuple
    source: str          # which results it reads: "summary" ({label: run_summary}) or "run"


def _share(claim):
    return Part("", lambda r: float(claim.holds(claim.measure(r))), "share")


def _improvement(claim):
    def per_run(r):
        value = claim.measure(r)
        return 0.5 if value == 0 else float(claim.holds(value))
    return Part("", per_run, "share")


def _windows(a, b, key):
    """Per window, `a`'s window mean of `key` minus `b`'s (b may be a number)."""
    def gap(i):
        def per_run(r):
            other = b if isinstance(b, float) else window_means(r, b, key)[i]
            return float(window_means(r, a, key)[i] - other)
        return per_run
    return [(f"steps {w.start}-{w.stop - 1}", gap(i)) for i, w in enumerate(WINDOWS)]


def _diff(a, b, column):
    return lambda r: r[a][column] - r[b][column]


def _signed_parts(noise=PASS1_NOISE):
    """The parts of the mean and equivalence claims, as the plan's `why` declares them."""
    below = lambda limit: (lambda v: v < limit)      # noqa: E731
    above = lambda limit: (lambda v: v > limit)      # noqa: E731
    k3, k3p = "k3 beta=0.3", "k3+ beta=0.3"
    kl = ("k3+ beta=0.05", "k3+ beta=0.3", "k3+ beta=1.0")
    others = [s for s in COMPARISON if s != "none"]
    right = ("none", "entropy 0.03", "k3 beta=0.3")

    def windows_ordered(key, sign):
        return [(f"{b} - {a}, {name}", (lambda f: lambda r: sign * f(r))(f))
                for a, b in zip(kl, kl[1:]) for name, f in _windows(b, a, key)]

    return {
        "k3_vs_k3plus": [Part("", _diff(k3, k3p, "pass@1"), "equivalence", rope=noise)],
        "k3_vs_k3plus_entropy": [Part("", _diff(k3, k3p, "entropy"), "equivalence",
                                      rope=NEAR_ENTROPY)],
        "k3_vs_k3plus_distance": [Part("", _diff(k3, k3p, "kl_to_ref"), "equivalence",
                                       rope=NEAR_DISTANCE)],
        "reward_pass1": [Part(f"- {s}", _diff("reward beta=0.3", s, "pass@1"), "mean", below(-noise))
                         for s in LOSSES],
        "reward_distance": [Part(f"- {s}", _diff("reward beta=0.3", s, "kl_to_ref"), "mean",
                                 below(0.0)) for s in LOSSES],
        "no_reward_gain": [Part(s, _diff(s, "none", "late_reward"), "mean", below(0.02))
                           for s in others],
        "fig_kl_entropy": [Part(n, f, "mean", above(0.0)) for n, f in windows_ordered("entropy", +1)],
        "fig_kl_reward": [Part(n, f, "mean", above(0.0)) for n, f in windows_ordered("reward", -1)],
        "fig_bonus_reward": [Part(n, f, "equivalence", rope=TRACK_REWARD)
                             for n, f in _windows("entropy 0.03", "none", "reward")],
        "fig_bonus_entropy": [Part(n, f, "equivalence", rope=NEAR_ENTROPY)
                              for n, f in _windows("entropy 0.03", 0.3, "entropy")[1:]],
        "fig_k3_entropy": [Part(n, f, "equivalence", rope=NEAR_ENTROPY)
                           for n, f in _windows(k3, k3p, "entropy")],
        "fig_k3_reward": [Part(n, f, "equivalence", rope=TRACK_REWARD)
                          for n, f in _windows(k3, k3p, "reward")],
        "fig_reward_entropy": [Part(f"- {o}, {n}", f, "mean", above(0.0)) for o in right
                               for n, f in _windows("reward beta=0.3", o, "entropy")],
        "fig_reward_reward": [Part(f"{o} -, {n}", (lambda f: lambda r: -f(r))(f), "mean", above(0.0))
                              for o in right for n, f in _windows("reward beta=0.3", o, "reward")],
        "bonus_same_reward": [Part("", lambda r: series(r, "entropy 0.03", "reward")[39]
                                   - series(r, "none", "reward")[39], "equivalence",
                                   rope=SAME_REWARD)],
    }


def scored_claims(keys=None):
    """The plan's claims (all, or those of `keys`), in its order, with their parts; not-scored
    claims are left out."""
    by_key = {c.key: (c, "summary") for c in comparison_claims()}
    by_key |= {c.key: (c, "run") for c in figure_claims() + entropy_fall_claims()
               + beta_size_claims()}
    signed = _signed_parts()
    out = []
    for key, declared in PLAN["claims"].items():
        estimand = declared["estimand"]
        if estimand == "not scored" or (keys is not None and key not in keys):
            continue
        claim, source = by_key[key]
        if estimand == "per-run frequency":
            parts = (_share(claim),)
        elif estimand == "probability of improvement":
            parts = (_improvement(claim),)
        else:
            parts = tuple(signed[key])
            if estimand == "equivalence of the mean":
                assert all(p.rope == declared["rope"] for p in parts), key
        out.append(ScoredClaim(key, estimand, parts, source))
    return out


def family_size(claims=None):
    """The number of intervals the plan scores: the Bonferroni divisor."""
    return sum(len(c.parts) for c in (scored_claims() if claims is None else claims))


MIN_RESAMPLES = 100       # below it an interval end rests on a handful of resamples (the plan uses 20,000)


def _claims_arg(claims):
    """`claims` as a tuple of at least one ScoredClaim."""
    claims = nonempty_list("claims", claims)
    for c in claims:
        instance("each of claims", c, ScoredClaim)
    return claims


def _values_arg(values_by_agent, n_parts=None, min_seeds=2):
    """`values_by_agent` if it maps at least one agent to a finite 2-D array (seeds, parts) of
    at least `min_seeds` seeds, every agent with `n_parts` parts (the claims' parts) when given."""
    if not isinstance(values_by_agent, dict) or not values_by_agent:
        raise TypeError(f"values_by_agent must map each agent to its (seeds, parts) array (as "
                        f"plan.values returns), got {values_by_agent!r:.100}")
    for agent, v in values_by_agent.items():
        if not isinstance(v, np.ndarray) or v.ndim != 2 or v.shape[0] < min_seeds:
            raise ValueError(f"values_by_agent[{agent!r}] must be a 2-D array (seeds, parts) of "
                             f"at least {min_seeds} seeds, got {getattr(v, 'shape', type(v).__name__)}")
        if n_parts is not None and v.shape[1] != n_parts:
            raise ValueError(f"values_by_agent[{agent!r}] has {v.shape[1]} parts; the claims "
                             f"have {n_parts}")
        if not np.isfinite(v).all():
            raise ValueError(f"values_by_agent[{agent!r}] holds a NaN or infinite value")
    return values_by_agent


def _level_arg(level):
    return real_number("level", level, lambda v: 0 < v < 1, "a probability in (0, 1), e.g. 0.95")


def _resamples_arg(resamples):
    return int_in("resamples", resamples, MIN_RESAMPLES, 10 ** 7)


def values(claims, summaries, runs):
    """{agent: array (seeds, parts)} of every part's number at every seed, parts in claim order;
    `summaries` and `runs` map agent -> one {label: ...} per seed (run summaries and runs)."""
    out = {}
    for agent in runs:
        rows = []
        for summary, run in zip(summaries[agent], runs[agent]):
            rows.append([p.per_run(summary if c.source == "summary" else run)
                         for c in claims for p in c.parts])
        out[agent] = np.array(rows, dtype=float)
        if not np.isfinite(out[agent]).all():
            raise ValueError(f"a part measured a non-finite number for agent {agent!r}")
    return out


def _bootstrap_means(values_by_agent, counts_by_agent):
    """(parts, R): each resample's mean over agents of each agent's resampled mean over seeds
    (summed in agent order into one array: the additions of `sum`, without its temporaries)."""
    total = None
    for v, counts in zip(values_by_agent.values(), counts_by_agent):
        means = np.ascontiguousarray(v.T) @ counts        # (a row-major left operand: 2x faster)
        if total is None:
            total = means
        else:
            total += means
    total /= len(values_by_agent)
    return total


def _counts(rng, n, resamples):
    """How often each of n seeds is drawn in each resample (with replacement), divided by n:
    (n, R), so that values.T @ counts is every resample's mean."""
    return np.ascontiguousarray(rng.multinomial(n, np.full(n, 1 / n), size=resamples).T) / n


def _percentiles(boot, level):
    """np.quantile's linear percentiles (1 - level) / 2 and (1 + level) / 2 of each row, from
    two order statistics each, all four placed by one partition instead of a full sort (in place:
    `boot`'s rows are reordered)."""
    resamples = boot.shape[1]
    positions = [q * (resamples - 1) for q in ((1 - level) / 2, (1 + level) / 2)]
    ranks = [(int(np.floor(x)), min(int(np.floor(x)) + 1, resamples - 1)) for x in positions]
    boot.partition(sorted({r for pair in ranks for r in pair}), axis=1)
    part = boot
    return [part[:, k] + (x - k) * (part[:, k1] - part[:, k]) for x, (k, k1) in zip(positions, ranks)]


def intervals(values_by_agent, level, resamples=RESAMPLES, seed=0):
    """(effect, low, high), each an array over parts: the mean over agents of each agent's mean
    over seeds, and its stratified bootstrap percentile interval at `level`. One resample of
    seeds serves every part (counts @ values)."""
    return _intervals(_values_arg(values_by_agent), _level_arg(level), _resamples_arg(resamples),
                      seed_int("seed", seed))


def _intervals(values_by_agent, level, resamples, seed):
    rng = np.random.default_rng(seed)
    counts = [_counts(rng, len(v), resamples) for v in values_by_agent.values()]
    effect = np.mean([v.mean(0) for v in values_by_agent.values()], 0)
    return (effect, *_percentiles(_bootstrap_means(values_by_agent, counts), level))


def _part_verdict(part, low, high):
    if part.kind == "share":
        return "holds" if low > 0.5 else "does not hold" if high < 0.5 else "unresolved"
    if part.kind == "equivalence":
        inside = -part.rope < low and high < part.rope
        outside = low >= part.rope or high <= -part.rope
        return "equivalent" if inside else "does not hold" if outside else "unresolved"
    passed = [bool(part.test(float(x))) for x in np.linspace(low, high, 201)]
    return "holds" if all(passed) else "does not hold" if not any(passed) else "unresolved"


def _combine(verdicts):
    if "does not hold" in verdicts:
        return "does not hold"
    if len(set(verdicts)) == 1:
        return verdicts[0]
    return "unresolved"


def _claim_verdicts(claims, effect, low, high):
    out, i = [], 0
    for c in claims:
        n = len(c.parts)
        parts = [_part_verdict(p, low[i + j], high[i + j]) for j, p in enumerate(c.parts)]
        out.append((_combine(parts), effect[i:i + n], low[i:i + n], high[i:i + n]))
        i += n
    return out


def _level(claims, m):
    """The Bonferroni level: over every part of the plan unless `m` says otherwise (a table of
    some of the claims keeps the whole family's level)."""
    return 1 - ALPHA / (family_size() if m is None else positive_int("m (intervals in the family)", m))


def verdicts(claims, values_by_agent, m=None, resamples=RESAMPLES, seeds=BOOTSTRAP_SEEDS):
    """One row per claim: its estimand, its first part's effect and interval, the verdict under
    the declared rule (unresolved where the ten bootstrap seeds disagree) and whether they did."""
    claims = _claims_arg(claims)
    _values_arg(values_by_agent, family_size(claims))
    seeds = nonempty_list("seeds (bootstrap generator seeds)", seeds)
    level = _level(claims, m)
    resamples = _resamples_arg(resamples)
    runs = [_claim_verdicts(claims, *_intervals(values_by_agent, level, resamples, seed_int('seed', s)))
            for s in seeds]
    rows = {}
    for k, c in enumerate(claims):
        found = {run[k][0] for run in runs}
        _, effect, low, high = runs[0][k]
        rows[c.key] = {"estimand": c.estimand, "parts": len(c.parts),
                       "effect": float(effect[0]), "low": float(low[0]), "high": float(high[0]),
                       "verdict": found.pop() if len(found) == 1 else "unresolved",
                       "unstable": len({run[k][0] for run in runs}) > 1}
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("claim")


def per_agent(claims, values_by_agent, m=None):
    """Each agent's own verdict, by the same rule and level on its seeds alone."""
    return pd.DataFrame({agent: verdicts(claims, {agent: v}, m)["verdict"]
                         for agent, v in values_by_agent.items()})


def agreement(a, b):
    """Two lists of verdicts compared: the share with the same verdict, the number of
    contradictions (holds or equivalent against does not hold) and the share resolved."""
    a, b = nonempty_list("a (verdicts)", a), nonempty_list("b (verdicts)", b)
    if len(a) != len(b):
        raise ValueError(f"agreement compares verdicts claim by claim: got {len(a)} and {len(b)}")
    unknown = sorted({v for v in a + b if v not in VERDICTS}, key=str)
    if unknown:
        raise ValueError(f"agreement takes the verdicts {VERDICTS}, got {unknown[:3]}")
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


def study_values(records, claims):
    """`values` of `claims` on a study's records (the pilot's or the fresh draw's)."""
    return values(claims, study.summaries(records), study.by_agent(records))


def table(claims, values_by_agent, live=None):
    """The verdict table a notebook prints: estimand, first part's effect and interval, verdict
    over every agent, each agent's own verdict, and with `live` (report.score_claims's table of
    the same claims on the notebook's seeds) the live k of n beside them, a count, not a verdict."""
    out = verdicts(claims, values_by_agent).join(per_agent(claims, values_by_agent))
    out["across checkpoints"] = [
        row["verdict"] if row["verdict"] != "unresolved"
        and all(row[a] == row["verdict"] for a in values_by_agent) else "" for _, row in out.iterrows()]
    if live is not None:
        out["live, k of n"] = (live["holds in"].astype(str) + " of "
                               + live["of seeds"].astype(str)).reindex(out.index)
    return out.drop(columns=["unstable"] if not out["unstable"].any() else [])


AFTER_DRAW = "scored after the draw (not in the declared plan)"


def after_draw_table(records, claims):
    """Claims the plan never declared, scored on a study's records by its rule (per-run
    frequencies at the plan's family-wise level) and labelled as scored after the draw: a number
    that existed before its test was chosen is not a test of the plan."""
    scored = [ScoredClaim(c.key, "per-run frequency", (_share(c),), "summary") for c in claims]
    out = table(scored, study_values(records, scored))
    out.insert(0, "scored", AFTER_DRAW)
    return out
