"""The study's rule v2 (tinyagent/data/study_plan_v2.json), as code: margins argued per measure,
agents as a source of variance, Holm's level over the claims, and per-agent columns at their
nominal level. It judges the third draw; applied to the pilot and the fresh draw, which existed
before it, it is a re-analysis and says so (`reanalysis`).

Every part of a claim is one number per run and a decision about its mean over runs:
  - "bound": the claim is that the mean lies beyond a threshold (a per-run frequency above 1/2,
    "no regularizer's gain reaches the reward margin"): holds or does not hold;
  - "band": the claim is a difference in a direction; the margin is the smallest difference the
    chapter's sentence cares about, so the part holds beyond the margin, is *equivalent* inside
    it (no difference worth a sentence) and does not hold beyond it the other way (a probability
    of improvement is a band of 0.10 around 1/2);
  - "equivalence": the claim is "about the same": equivalent inside the margin, does not hold
    outside it on either side.
The estimate (the mean over agents of each agent's mean over seeds) names the verdict each part
points to, and a one-sided p-value tests it (two one-sided tests for equivalence). A claim takes
its parts' common verdict (its p-value the largest of theirs: every part must pass), and does not
hold as soon as one part contradicts it (the smallest such p-value times the number of parts).
Holm's step-down procedure at 0.05 over the plan's claims decides which verdicts are resolved;
the others are unresolved. Overall p-values come from a hierarchical bootstrap (agents resampled,
then seeds within each drawn agent), so a verdict speaks for a base agent `make agents` would
build, not for these checkpoints; it is computed under several generator seeds and a claim whose
verdict differs among them is unresolved. Each agent's own column uses exact tests (a binomial
tail for shares, Student's t for means) at the same Holm level: one agent has no agents to
resample, and a bootstrap of 20 seeds is liberal. Nothing that trains or evaluates imports this.
"""
import math
from dataclasses import dataclass
from typing import Callable

import numpy as np
import pandas as pd

from ..checks import int_in, nonempty_list, seed_int
from ..harness.cache import PACKAGE
from . import plan, study
from .claims import beta_size_claims, comparison_claims, entropy_fall_claims, figure_claims
from .plan_parts import ScoredClaim, improvement_part, share_part, signed_parts

PLAN_V2_FILE = PACKAGE / "data" / "study_plan_v2.json"
# Its digest as declared before the third draw, which its records' manifests carry too: an edited
# rule would judge the records (and re-analyse the fresh draw) under another plan than declared.
PLAN_V2_SHA256 = "67e7a40f333f6c552148ec62558005d13a412ee7f27d10482020ce4cb823e1bc"


class StalePlan(RuntimeError):
    """The plan file cannot be read, or is not the plan its records were judged under."""


PLAN = study.read_json(PLAN_V2_FILE, "git checkout of the committed file", StalePlan,
                       PLAN_V2_SHA256)
RULE = PLAN["rule"]
ALPHA = RULE["alpha"]
RESAMPLES = RULE["resamples"]
BOOTSTRAP_SEEDS = tuple(RULE["bootstrap_seeds"])
MARGINS = {name: m["value"] for name, m in RULE["margins"].items()}
VERDICTS = plan.VERDICTS
REANALYSIS = "re-analysis under rule v2 of data that existed before it"


@dataclass(frozen=True)
class RulePart:
    """One number per run (`per_run`, on what the claim's `source` reads) and its decision: kind
    "bound" (the mean beyond `center` in the direction `sign`), "band" (beyond `center` +- `margin`
    in the direction `sign`, equivalent inside) or "equivalence" (inside `center` +- `margin`).
    `share` marks numbers in {0, 1/2, 1} (per-run statements and paired wins), tested exactly
    per agent."""
    name: str
    per_run: Callable
    kind: str
    center: float
    margin: float = 0.0
    sign: int = 1
    share: bool = False


def _v2_parts(key, declared, claim, signed):
    """A claim's parts under v2: the numbers v1 measures, decided by v2's estimand and margin."""
    estimand = declared["estimand"]
    if estimand == "per-run frequency":
        return (RulePart("", share_part(claim).per_run, "bound", 0.5, share=True),)
    if estimand == "probability of improvement":
        return (RulePart("", improvement_part(claim).per_run, "band", 0.5,
                         MARGINS["probability of improvement"], share=True),)
    margin = MARGINS[declared["margin"]]
    sign = {"above": 1, "below": -1}.get(declared.get("direction"), 1)
    kind = {"difference of the mean": "band", "equivalence of the mean": "equivalence",
            "mean beyond the margin": "bound"}[estimand]
    center = -sign * margin if kind == "bound" else 0.0    # "below": no gain reaching +margin
    return tuple(RulePart(p.name, p.per_run, kind, center, margin, sign) for p in signed[key])


def _chapter_claims():
    """{key: (the chapter's claim, what its measure reads: a run's "summary" or the "run")}."""
    by_key = {c.key: (c, "summary") for c in comparison_claims()}
    return by_key | {c.key: (c, "run") for c in figure_claims() + entropy_fall_claims()
                     + beta_size_claims()}


def book_values(claims):
    """Each claim's quantity in the book's single run (its `book`; None where the book prints
    none), one per claim of `claims`."""
    by_key = _chapter_claims()
    return pd.Series([by_key[c.key][0].book for c in claims],
                     index=pd.Index([c.key for c in claims], name="claim"), name="book")


def scored_claims(keys=None):
    """The v2 plan's claims (all, or those of `keys`), in its order, with their parts."""
    by_key = _chapter_claims()
    signed = signed_parts()
    out = []
    for key, declared in PLAN["claims"].items():
        if declared["estimand"] == "not scored" or (keys is not None and key not in keys):
            continue
        claim, source = by_key[key]
        out.append(ScoredClaim(key, declared["estimand"],
                               _v2_parts(key, declared, claim, signed), source))
    return out


# ------------------------------------------------------------------ tails: the p-values' sources

class BootstrapTails:
    """One-sided p-values from resampled means (parts x resamples): P(mean <= c) for "above c",
    each count plus one over resamples plus one, so no p-value is zero."""

    def __init__(self, boot):
        self.boot = boot

    def above(self, i, c):
        return (1 + np.count_nonzero(self.boot[i] <= c)) / (self.boot.shape[1] + 1)

    def below(self, i, c):
        return (1 + np.count_nonzero(self.boot[i] >= c)) / (self.boot.shape[1] + 1)


def _binomial_tail(n, k, p, upper):
    """P(Binomial(n, p) >= k) if `upper`, else P(... <= k), by exact sums."""
    ks = range(max(k, 0), n + 1) if upper else range(0, min(k, n) + 1)
    return min(1.0, sum(math.comb(n, j) * p ** j * (1 - p) ** (n - j) for j in ks))


def student_t_cdf(t, df):
    """Student's t distribution function at `t` with integer `df` >= 1, from the closed forms
    for integer degrees of freedom (Abramowitz and Stegun 26.7.3 and 26.7.4)."""
    theta = math.atan2(t, math.sqrt(df))
    s, c2 = math.sin(theta), math.cos(theta) ** 2
    if df % 2 == 0:
        term = total = 1.0
        for k in range(2, df, 2):
            term *= c2 * (k - 1) / k
            total += term
        a = s * total
    else:
        total = 0.0
        if df > 1:
            term = total = 1.0
            for k in range(3, df, 2):
                term *= c2 * (k - 1) / k
                total += term
        a = (2 / math.pi) * (theta + s * math.cos(theta) * total)
    return 0.5 + 0.5 * a          # a = P(|T| < t) signed by t's sign (theta keeps the sign)


class ExactTails:
    """One-sided p-values of one agent's seeds: an exact binomial tail for a share (its count of
    wins, a tie counted half, rounded toward the null) and Student's t for a mean. Both hold their
    nominal level, which a bootstrap of 20 seeds does not."""

    def __init__(self, values, parts):
        self.values, self.parts = values, parts

    def _p(self, i, c, upper):
        v = self.values[:, i]
        n = len(v)
        if self.parts[i].share:
            wins = v.sum()
            k = math.floor(wins + 1e-9) if upper else math.ceil(wins - 1e-9)
            return _binomial_tail(n, k, c, upper)
        mean, sd = v.mean(), v.std(ddof=1)
        if sd == 0:
            return 0.0 if (mean > c if upper else mean < c) else 1.0
        t = (mean - c) / (sd / math.sqrt(n))
        return 1 - student_t_cdf(t, n - 1) if upper else student_t_cdf(t, n - 1)

    def above(self, i, c):
        return self._p(i, c, True)

    def below(self, i, c):
        return self._p(i, c, False)


# ------------------------------------------------------------------ the decision

def _part_test(part, estimate, tails, i):
    """(the verdict the estimate points to, its one-sided p-value)."""
    s = part.sign if part.kind != "equivalence" else 1
    above = (lambda c: tails.above(i, c)) if s > 0 else (lambda c: tails.below(i, -c))
    below = (lambda c: tails.below(i, c)) if s > 0 else (lambda c: tails.above(i, -c))
    e, c, m = s * estimate, s * part.center, part.margin
    if part.kind == "bound":
        if e == c:
            return "unresolved", 1.0
        return ("holds", above(c)) if e > c else ("does not hold", below(c))
    if c - m <= e <= c + m:
        return "equivalent", max(above(c - m), below(c + m))
    if e > c + m:
        return ("holds" if part.kind == "band" else "does not hold"), above(c + m)
    return "does not hold", below(c - m)


def claim_test(results):
    """A claim's (verdict, p-value) from its parts' (verdict, p-value): their common verdict at
    the largest p-value; does not hold where a part does not, or where some parts hold and others
    show no difference (the claim asserts one in every part), at the smallest such p-value times
    the number of parts (capped at 1)."""
    verdicts = [v for v, _ in results]
    k = len(results)
    if "does not hold" in verdicts:
        return "does not hold", min(1.0, k * min(p for v, p in results if v == "does not hold"))
    if len(set(verdicts)) == 1:
        return verdicts[0], max(p for _, p in results)
    if set(verdicts) == {"holds", "equivalent"}:
        return "does not hold", min(1.0, k * min(p for v, p in results if v == "equivalent"))
    return "unresolved", 1.0


def holm(pvalues, alpha=ALPHA):
    """Holm's step-down procedure: (which hypotheses are rejected, the level each was tested at).
    The i-th smallest p-value (from 0) is tested at alpha / (m - i) until the first that fails;
    it and every larger one keep that level and are not rejected."""
    p = np.asarray(pvalues, dtype=float)
    m = len(p)
    rejected, levels = np.zeros(m, bool), np.empty(m)
    stopped = None
    for rank, j in enumerate(np.argsort(p, kind="stable")):
        level = alpha / (m - rank) if stopped is None else stopped
        levels[j] = level
        if stopped is None and p[j] <= level:
            rejected[j] = True
        elif stopped is None:
            stopped = level
    return rejected, levels


def _decide(claims, estimate, tails):
    """[(claim verdict, p-value)] and the Holm verdicts: resolved where Holm rejects, at level."""
    tested, i = [], 0
    for c in claims:
        tested.append(claim_test([_part_test(p, estimate[i + j], tails, i + j)
                                  for j, p in enumerate(c.parts)]))
        i += len(c.parts)
    rejected, levels = holm([p for _, p in tested])
    verdicts = [v if r else "unresolved" for (v, _), r in zip(tested, rejected)]
    return verdicts, [p for _, p in tested], levels


def _first_parts(claims):
    out, i = [], 0
    for c in claims:
        out.append(i)
        i += len(c.parts)
    return out


def hierarchical_means(values_by_agent, resamples, seed):
    """(parts, resamples): each resample draws as many agents as there are, with replacement,
    then each drawn agent's seeds with replacement, and averages the drawn agents' means (an agent
    drawn twice gets two independent resamples of its seeds)."""
    rng = np.random.default_rng(seed)
    agents = list(values_by_agent.values())
    n_agents = len(agents)
    picks = rng.integers(n_agents, size=(n_agents, resamples))
    total = np.zeros((agents[0].shape[1], resamples))
    for slot in range(n_agents):
        for a, v in enumerate(agents):
            cols = np.flatnonzero(picks[slot] == a)
            if cols.size:
                n = len(v)
                counts = rng.multinomial(n, np.full(n, 1 / n), size=cols.size).T / n
                total[:, cols] += np.ascontiguousarray(v.T) @ counts
    total /= n_agents
    return total


def _estimate(values_by_agent):
    return np.mean([v.mean(0) for v in values_by_agent.values()], 0)


def _check(claims, values_by_agent, min_seeds=2):
    claims = plan._claims_arg(claims)
    plan._values_arg(values_by_agent, sum(len(c.parts) for c in claims), min_seeds)
    return claims


def verdicts(claims, values_by_agent, resamples=RESAMPLES, seeds=BOOTSTRAP_SEEDS):
    """One row per claim under rule v2 over every agent: its estimand, its first part's estimate
    and its interval at the level Holm tested the claim (two-sided, 1 - 2 x level), the claim's
    p-value, the verdict, and whether it changed with the bootstrap's generator seed (then it is
    unresolved). `claims` is the whole family Holm runs over (normally `scored_claims()`)."""
    claims = _check(claims, values_by_agent)
    resamples = int_in("resamples", resamples, plan.MIN_RESAMPLES, 10 ** 7)
    seeds = [seed_int("seed", s) for s in nonempty_list("seeds (bootstrap generator seeds)", seeds)]
    estimate = _estimate(values_by_agent)
    runs = []
    for s in seeds:
        boot = hierarchical_means(values_by_agent, resamples, s)
        runs.append((boot, *_decide(claims, estimate, BootstrapTails(boot))))
    boot, first, pvalues, levels = runs[0]
    rows = {}
    for k, (c, i) in enumerate(zip(claims, _first_parts(claims))):
        found = {run[1][k] for run in runs}
        low, high = np.quantile(boot[i], [levels[k], 1 - levels[k]])
        rows[c.key] = {"estimand": c.estimand, "parts": len(c.parts),
                       "effect": float(estimate[i]), "low": float(low), "high": float(high),
                       "p": float(pvalues[k]), "level": float(levels[k]),
                       "verdict": first[k] if len(found) == 1 else "unresolved",
                       "unstable": len(found) > 1}
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("claim")


def agent_verdicts(claims, values):
    """One agent's own verdicts (seeds, parts): exact tests, Holm over the same claims."""
    parts = [p for c in claims for p in c.parts]
    return _decide(claims, values.mean(0), ExactTails(values, parts))[0]


def per_agent(claims, values_by_agent):
    """Each agent's own verdict, by exact tests on its seeds at Holm's level over the claims."""
    claims = _check(claims, values_by_agent)
    keys = pd.Index([c.key for c in claims], name="claim")
    return pd.DataFrame({agent: agent_verdicts(claims, v) for agent, v in values_by_agent.items()},
                        index=keys)


def point_estimates(claims, values_by_agent):
    """The verdict each claim's estimate points to, with no interval: what a rule that ignores
    the spread would say (a degenerate rule, for the replication test)."""
    claims = _check(claims, values_by_agent, min_seeds=1)
    estimate = _estimate(values_by_agent)
    never = type("Never", (), {"above": lambda self, i, c: 1.0, "below": lambda self, i, c: 1.0})()
    out, i = [], 0
    for c in claims:
        out.append(claim_test([_part_test(p, estimate[i + j], never, i + j)
                               for j, p in enumerate(c.parts)])[0])
        i += len(c.parts)
    return pd.Series(out, index=pd.Index([c.key for c in claims], name="claim"), name="verdict")


def table(claims, values_by_agent, resamples=RESAMPLES, seeds=BOOTSTRAP_SEEDS):
    """The verdict table: rule v2 over every agent, each agent's own verdict beside it, and
    "every agent" where all agents give that same resolved verdict on their own."""
    out = verdicts(claims, values_by_agent, resamples, seeds)
    agents = per_agent(claims, values_by_agent)
    out = out.join(agents)
    out["every agent"] = [row["verdict"] if row["verdict"] != "unresolved"
                          and all(row[a] == row["verdict"] for a in agents) else ""
                          for _, row in out.iterrows()]
    return out


# The earlier rule's claims that v2 merged into one: 10.8's name -> the claim v2 scores.
MERGED = {"beta1_few_reads": "beta1_reads"}


def beside_five_seeds(five_seed, draw):
    """A notebook's five-seed claims table (`report.score_claims`) beside a draw's v2 verdict
    table (`table`): each claim's count and category on the notebook's seeds, then the draw's
    estimand, estimate, interval and verdict, and the shipped agent's own verdict."""
    v2 = draw.loc[[MERGED.get(k, k) for k in five_seed.index]].set_axis(five_seed.index)
    return pd.DataFrame({
        "five seeds": five_seed["holds in"].astype(str) + " of " + five_seed["of seeds"].astype(str),
        "category": five_seed["category"], "draw: estimand": v2["estimand"],
        "effect": v2["effect"].round(3), "low": v2["low"].round(3), "high": v2["high"].round(3),
        "draw verdict (v2, re-analysis)": v2["verdict"], "shipped agent alone": v2["rl_base"]})


def study_values(records, claims=None):
    """{agent: (seeds, parts)} of the v2 claims on a study's records."""
    return plan.study_values(records, scored_claims() if claims is None else claims)


def reanalysis(resamples=RESAMPLES, seeds=BOOTSTRAP_SEEDS):
    """The pilot and the fresh draw under rule v2, labelled as a re-analysis of data that existed
    before the rule: {"pilot": table, "fresh draw": table}, each with a column saying so."""
    claims = scored_claims()
    out = {}
    for name, records in (("pilot", study.load_pilot()), ("fresh draw", study.load_records())):
        t = table(claims, study_values(records, claims), resamples, seeds)
        t.insert(0, "scored", REANALYSIS)
        out[name] = t
    return out
