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

import numpy as np
import pandas as pd

from ..checks import instance, int_in, nonempty_list, positive_int, real_number, seed_int
from .claims import beta_size_claims, comparison_claims, entropy_fall_claims, figure_claims
from . import study
from .plan_parts import Part, ScoredClaim, improvement_part, share_part, signed_parts  # noqa: F401

PLAN = study.read_json(study.FRESH.plan, "git checkout of the committed plan",
                       sha256=study.FRESH.plan_sha256)
RESAMPLES = PLAN["rule"]["resamples"]
BOOTSTRAP_SEEDS = tuple(range(10))
ALPHA = 0.05
VERDICTS = ("holds", "does not hold", "equivalent", "unresolved")


def scored_claims(keys=None):
    """The plan's claims (all, or those of `keys`), in its order, with their parts; not-scored
    claims are left out."""
    by_key = {c.key: (c, "summary") for c in comparison_claims()}
    by_key |= {c.key: (c, "run") for c in figure_claims() + entropy_fall_claims()
               + beta_size_claims()}
    signed = signed_parts()
    out = []
    for key, declared in PLAN["claims"].items():
        estimand = declared["estimand"]
        if estimand == "not scored" or (keys is not None and key not in keys):
            continue
        claim, source = by_key[key]
        if estimand == "per-run frequency":
            parts = (share_part(claim),)
        elif estimand == "probability of improvement":
            parts = (improvement_part(claim),)
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
    scored = [ScoredClaim(c.key, "per-run frequency", (share_part(c),), "summary") for c in claims]
    out = table(scored, study_values(records, scored))
    out.insert(0, "scored", AFTER_DRAW)
    return out
