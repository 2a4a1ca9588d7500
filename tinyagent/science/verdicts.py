"""Verdicts by interval: a claim about trained agents decided on the study's runs, with the rule
fixed before any number was seen.

The rule. A claim (report.Claim) measures one number per seed (`measure`, paired where it compares
settings: both runs of a seed share the seed) and says which numbers satisfy it (`holds`). Its
effect is the mean of that number over seeds, each base agent weighted equally. Its interval is the
95% percentile interval of a stratified bootstrap that resamples seeds within each base agent (as
rliable's stratified bootstrap resamples runs within tasks), 2,000 resamples from a fixed generator.
The verdict is *holds* if every value of the interval satisfies the claim, *does not hold* if none
does, and *unresolved* otherwise (checked on a grid of 201 points across the interval, so a band such
as |difference| < 0.08 is handled as well as a threshold). The same rule gives the verdict within
each base agent. Nothing here asserts a verdict: they are results, shown in tables.

The re-draw check asks whether the verdicts are a property of the experiment or of the draw: the
same rule on two disjoint halves of the seeds (the first half against the second within every
agent, and random halves), and one agent against another. Three numbers: the share of claims with the same verdict
in both (unresolved included), the share that agree among claims resolved in both, and the share
resolved. Nothing that trains or evaluates imports this module.
"""
import itertools

import numpy as np
import pandas as pd

LEVEL = 0.95
RESAMPLES = 2000
GRID = 201
VERDICTS = ("holds", "does not hold", "unresolved")


def measures(claims, results_by_agent):
    """{claim key: {agent: array of the claim's number at each seed}}; a claim's number must be
    finite at every seed (a NaN would be scored as a verdict)."""
    out = {}
    for claim in claims:
        out[claim.key] = {}
        for agent, per_seed in results_by_agent.items():
            values = np.array([float(claim.measure(results)) for results in per_seed])
            if not np.isfinite(values).all():
                raise ValueError(f"claim {claim.key!r} measured a non-finite number for agent "
                                 f"{agent!r} at seed positions {np.flatnonzero(~np.isfinite(values))}")
            out[claim.key][agent] = values
    return out


def stratified_interval(values_by_agent, level=LEVEL, resamples=RESAMPLES, seed=0):
    """(effect, low, high): the mean over agents of each agent's mean over seeds, and its
    percentile interval when seeds are resampled with replacement within each agent."""
    rng = np.random.default_rng(seed)
    groups = [np.asarray(v, dtype=float) for v in values_by_agent]
    if not groups or any(len(v) < 2 for v in groups):
        raise ValueError("a stratified interval needs at least two seeds in every agent, got "
                         f"{[len(v) for v in groups]}")
    effect = float(np.mean([v.mean() for v in groups]))
    boot = np.mean([v[rng.integers(len(v), size=(resamples, len(v)))].mean(1) for v in groups], 0)
    low, high = np.quantile(boot, [(1 - level) / 2, (1 + level) / 2])
    return effect, float(low), float(high)


def verdict(holds, low, high, grid=GRID):
    """'holds' if every value in [low, high] satisfies `holds`, 'does not hold' if none does,
    else 'unresolved'."""
    satisfied = [bool(holds(float(v))) for v in np.linspace(low, high, grid)]
    return "holds" if all(satisfied) else "does not hold" if not any(satisfied) else "unresolved"


def margin(holds, low, high, step=0.02, most=5.0):
    """How far a resolved verdict is from changing: the smallest widening of [low, high], on both
    sides and in units of its own width, at which the verdict is no longer the same (0 for an
    unresolved claim, `most` if it holds up to that). Half the seeds widen an interval by about
    1.4 times, so a claim with a margin well under 0.5 can come out unresolved in a half."""
    width = max(high - low, 1e-12)
    decided = verdict(holds, low, high)
    if decided == "unresolved":
        return 0.0
    for t in np.arange(step, most + step / 2, step):
        if verdict(holds, low - t * width, high + t * width) != decided:
            return round(float(t), 2)
    return most


def _decide(claim, values_by_agent):
    effect, low, high = stratified_interval(values_by_agent)
    return effect, low, high, verdict(claim.holds, low, high)


def claim_verdicts(claims, values, digits=3, live=None):
    """One row per claim: its effect and interval over every agent, the verdict, and the verdict
    within each agent; `values` is `measures(...)`. With `live` (report.score_claims's table of
    the same claims on a notebook's own seeds), a last column gives its k of n beside them."""
    rows = {}
    for claim in claims:
        by_agent = values[claim.key]
        effect, low, high, overall = _decide(claim, by_agent.values())
        row = {"effect": round(effect, digits), "low": round(low, digits),
               "high": round(high, digits), "verdict": overall}
        for agent, v in by_agent.items():
            row[f"{agent}"] = _decide(claim, [v])[3]
        rows[claim.key] = row
    table = pd.DataFrame.from_dict(rows, orient="index").rename_axis("claim")
    if live is not None:
        table["live, k of n"] = (live["holds in"].astype(str) + " of "
                                 + live["of seeds"].astype(str)).reindex(table.index)
    return table


def _agreement(pairs):
    """The three re-draw numbers for a list of (verdict, verdict) pairs."""
    same = np.mean([a == b for a, b in pairs])
    resolved = [(a, b) for a, b in pairs if "unresolved" not in (a, b)]
    agree = np.mean([a == b for a, b in resolved]) if resolved else float("nan")
    share_resolved = np.mean([v != "unresolved" for pair in pairs for v in pair])
    return {"same verdict": same, "agree where both resolved": agree,
            "resolved": share_resolved, "claims": len(pairs)}


def _split_verdicts(claims, values, pick):
    return [verdict(c.holds, *stratified_interval([v[pick(agent, len(v))] for agent, v in
                                                   values[c.key].items()])[1:])
            for c in claims]


def halves(claims, values):
    """Each claim's verdict on the first and on the second half of every agent's seeds (the first
    row of `redraw_check`), one row per claim: where the two differ, the claim is undecided by
    the draw."""
    first = _split_verdicts(claims, values, lambda a, n: slice(0, n // 2))
    second = _split_verdicts(claims, values, lambda a, n: slice(n // 2, n))
    return pd.DataFrame({"first half": first, "second half": second},
                        index=pd.Index([c.key for c in claims], name="claim"))


def redraw_check(claims, values, random_splits=20, seed=0):
    """The re-draw numbers (see the module docstring), one row per kind of re-draw: the first and
    second halves of the seeds, random halves (averaged over `random_splits`), and every pair of
    agents (each agent's seeds alone)."""
    rows = {}
    split = halves(claims, values)
    rows["first half of the seeds vs second half"] = _agreement(
        list(zip(split["first half"], split["second half"])))
    rng = np.random.default_rng(seed)
    pairs = []
    for _ in range(random_splits):
        perms = {agent: rng.permutation(len(v)) for agent, v in values[claims[0].key].items()}
        a = _split_verdicts(claims, values, lambda ag, n: perms[ag][: n // 2])
        b = _split_verdicts(claims, values, lambda ag, n: perms[ag][n // 2:])
        pairs += list(zip(a, b))
    rows[f"random halves ({random_splits} splits)"] = _agreement(pairs)
    agents = list(values[claims[0].key])
    if len(agents) < 2:
        return pd.DataFrame.from_dict(rows, orient="index").round(3)
    pairs = []
    for x, y in itertools.combinations(agents, 2):
        vx = [verdict(c.holds, *stratified_interval([values[c.key][x]])[1:]) for c in claims]
        vy = [verdict(c.holds, *stratified_interval([values[c.key][y]])[1:]) for c in claims]
        pairs += list(zip(vx, vy))
    rows["agent vs agent"] = _agreement(pairs)
    return pd.DataFrame.from_dict(rows, orient="index").round(3)


def book_in_distribution(book, ours_by_agent, columns, central=0.90):
    """Each number of the book's table placed among the study's runs of that setting: its
    percentile among all of them, whether it lies inside their central 90%, and inside which
    agents' central 90% it lies. `book` maps setting -> {column: number}; `ours_by_agent` maps
    agent -> setting -> column -> array over seeds."""
    lo_q, hi_q = (1 - central) / 2, (1 + central) / 2
    rows = []
    for setting, printed in book.items():
        for column in columns:
            if printed.get(column) is None:             # not printed by the book
                continue
            value = printed[column]
            per_agent = {a: np.asarray(s[setting][column], float) for a, s in ours_by_agent.items()}
            pooled = np.concatenate(list(per_agent.values()))
            lo, hi = np.quantile(pooled, [lo_q, hi_q])
            inside_agents = [a for a, v in per_agent.items()
                             if np.quantile(v, lo_q) <= value <= np.quantile(v, hi_q)]
            rows.append({"setting": setting, "column": column, "book": value,
                         "our median": float(np.median(pooled)),
                         "our 5%": float(lo), "our 95%": float(hi),
                         "percentile": 100.0 * float(np.mean(pooled < value)
                                                     + 0.5 * np.mean(pooled == value)),
                         "inside": bool(lo <= value <= hi),
                         "inside agents": ", ".join(inside_agents) or "none"})
    return pd.DataFrame(rows)
