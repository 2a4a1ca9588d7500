"""Whether rule v2's verdicts replicate (study_plan_v2.json, "replication"): two draws' verdicts
compared claim by claim by Cohen's kappa over the four verdicts, the contradictions and the share
resolved; the goal, which no degenerate rule meets (`DEGENERATE`); and the size of a new draw
that meets it, predicted by simulation (`predicted_replication`, `power_analysis`; the plan's
numbers: python -m tinyagent.science.replication_v2)."""
import argparse

import numpy as np
import pandas as pd

from ..checks import int_in, nonempty_list, positive_int, seed_int
from . import plan_v2, study
from .plan import VERDICTS
from .replication import verdict_lists

RESOLVED = ("holds", "does not hold", "equivalent")


def kappa(a, b):
    """Cohen's kappa of two lists of verdicts: (observed - chance agreement) / (1 - chance), the
    chance agreement from each list's own verdict frequencies. Where chance agreement is 1 (both
    lists give one verdict to every claim) nothing beyond chance can be shown: 0."""
    a, b = verdict_lists(a, b)
    observed = np.mean([x == y for x, y in zip(a, b)])
    chance = sum(a.count(v) * b.count(v) for v in VERDICTS) / len(a) ** 2
    return 0.0 if chance == 1 else float((observed - chance) / (1 - chance))


def agreement(a, b):
    """Two lists of verdicts under rule v2: kappa, the same-verdict share, the contradictions
    (two different resolved verdicts: v2's three resolved verdicts are disjoint regions, so an
    'equivalent' against a 'holds' is as much a contradiction as a 'does not hold') and the share
    of both lists' verdicts that is resolved."""
    a, b = verdict_lists(a, b)
    pairs = list(zip(a, b))
    return {"kappa": kappa(a, b), "same verdict": float(np.mean([x == y for x, y in pairs])),
            "contradictions": int(sum(x != y and x in RESOLVED and y in RESOLVED for x, y in pairs)),
            "resolved": float(np.mean([v in RESOLVED for v in a + b])), "claims": len(pairs)}


_GOAL = plan_v2.PLAN["replication"]["goal"]
GOAL = {"kappa": (">=", _GOAL["kappa"]), "contradictions": ("<=", _GOAL["contradictions"]),
        "resolved": (">=", _GOAL["resolved"])}


def goal_table(measured):
    """One row per goal: what was measured, the goal and whether it is met."""
    return pd.DataFrame(
        [{"measure": name, "measured": measured[name], "goal": f"{op} {bound:g}",
          "met": measured[name] >= bound if op == ">=" else measured[name] <= bound}
         for name, (op, bound) in GOAL.items()]).set_index("measure")


def met(measured):
    """Whether every goal is met."""
    return bool(goal_table(measured)["met"].all())


def replication(claims, first_values, second_values, names=("fresh draw", "third draw"), **rule):
    """Two draws under rule v2: (one row per claim, both verdicts and whether they are the same;
    the goal table). `rule` passes resamples and seeds to `plan_v2.verdicts`."""
    first = plan_v2.verdicts(claims, first_values, **rule)["verdict"]
    second = plan_v2.verdicts(claims, second_values, **rule)["verdict"]
    per_claim = pd.DataFrame({names[0]: first, names[1]: second})
    per_claim["same"] = per_claim[names[0]] == per_claim[names[1]]
    return per_claim, goal_table(agreement(list(first), list(second)))


def stability(claims, values_by_agent, splits=20, resamples=4000, seed=0, whole=None):
    """How stable each verdict of a draw is: `splits` random splits of every agent's seeds into
    two halves, each half scored alone by rule v2 (one bootstrap generator seed, `resamples`
    resamples). Returns, per claim, the draw's own verdict (`plan_v2.verdicts` at the plan's
    resamples) and the share of the 2 x `splits` halves that give that same verdict: near 1, half
    the seeds already decide it; near 0, the verdict rests on every seed the draw has. `whole`:
    the draw's verdicts, if `plan_v2.verdicts` has computed them already."""
    claims = plan_v2._check(claims, values_by_agent, min_seeds=4)
    splits, seed = positive_int("splits", splits), seed_int("seed", seed)
    resamples = int_in("resamples", resamples, 100, 10 ** 7)
    if whole is None:
        whole = plan_v2.verdicts(claims, values_by_agent)["verdict"]
    rng = np.random.default_rng(seed)
    kept = np.zeros(len(claims))
    for split in range(splits):
        order = {a: rng.permutation(len(v)) for a, v in values_by_agent.items()}
        for h in range(2):
            half = {a: v[np.sort(order[a][h::2])] for a, v in values_by_agent.items()}
            found = plan_v2.verdicts(claims, half, resamples, (2 * split + h,))["verdict"]
            kept += (found == whole).to_numpy()
    return pd.DataFrame({"verdict": whole, "halves keep it": kept / (2 * splits)})


def _constant(verdict):
    return lambda claims, values: [verdict] * len(claims)


# Rules that decide without evidence, or without its spread: none of them may meet the goal.
DEGENERATE = {
    "always holds": _constant("holds"),
    "always equivalent": _constant("equivalent"),
    "always unresolved": _constant("unresolved"),
    "point estimate": lambda claims, values: list(plan_v2.point_estimates(claims, values)),
}


def _simulated_draw(rng, population, agents, seeds):
    """A draw of `agents` x `seeds` from the population of observed agents: agents drawn with
    replacement, each drawn agent's seeds drawn with replacement from its own."""
    names = list(population)
    out = {}
    for k, a in enumerate(rng.integers(len(names), size=agents)):
        v = population[names[a]]
        out[f"sim_{k}"] = v[rng.integers(len(v), size=seeds)]
    return out


def predicted_replication(claims, population, sizes, reference=(6, 20), draws=100, resamples=4000,
                          seed=0):
    """For each (agents, seeds) in `sizes`: `draws` simulated pairs of a reference-sized draw and
    a draw of that size, both from `population` ({agent: (seeds, parts)}, the observed agents as a
    population: a hierarchical bootstrap of the data), each scored by rule v2 (one bootstrap seed,
    `resamples` resamples), and compared by `agreement`. Returns one row per size: the mean kappa,
    contradictions, resolved share, and the share of pairs that meet the goal."""
    claims = plan_v2._check(claims, population)
    sizes = nonempty_list("sizes", sizes)
    draws, seed = positive_int("draws", draws), seed_int("seed", seed)
    resamples = int_in("resamples", resamples, 100, 10 ** 7)
    rng = np.random.default_rng(seed)
    rows = []
    for agents, seeds in sizes:
        found = []
        for d in range(draws):
            pair = [_simulated_draw(rng, population, *size) for size in (reference, (agents, seeds))]
            verdicts = [list(plan_v2.verdicts(claims, v, resamples, (d,))["verdict"]) for v in pair]
            found.append(agreement(*verdicts))
        rows.append({"agents": agents, "seeds": seeds, "runs": agents * seeds * 9,
                     "kappa": float(np.mean([f["kappa"] for f in found])),
                     "resolved": float(np.mean([f["resolved"] for f in found])),
                     **{f"{name} met": float(np.mean([goal_table(f).loc[name, "met"] for f in found]))
                        for name in GOAL},
                     "goal met": float(np.mean([met(f) for f in found]))})
    return pd.DataFrame(rows)


def variance_components(claims, population):
    """Per claim (its first part): the mean over agents, the spread of the agents' own means
    beyond what their seeds explain (agent-to-agent standard deviation, method of moments,
    floored at 0) and the pooled seed-to-seed standard deviation within an agent."""
    claims = plan_v2._check(claims, population)
    values = np.stack(list(population.values()))            # (agents, seeds, parts)
    seeds = values.shape[1]
    within = values.var(axis=1, ddof=1).mean(axis=0)        # (parts,)
    between = np.maximum(values.mean(axis=1).var(axis=0, ddof=1) - within / seeds, 0.0)
    first = plan_v2._first_parts(claims)
    return pd.DataFrame({"mean": values.mean(axis=(0, 1))[first],
                         "agent sd": np.sqrt(between[first]), "seed sd": np.sqrt(within[first])},
                        index=pd.Index([c.key for c in claims], name="claim"))


# The sizes the plan's power analysis tried (agents, seeds), and its simulation's settings.
POWER_SIZES = ((6, 20), (8, 20), (10, 20), (12, 20), (14, 20), (16, 20), (20, 20), (12, 40),
               (16, 40), (8, 60))
POWER_DRAWS = 200


def pilot_population(claims=None):
    """The pilot data of rule v2 as a population of agents: the pilot's 3 and the fresh draw's 6
    agents ({"pilot rl_base": (seeds, parts), ..., "fresh agent_7": ...})."""
    claims = plan_v2.scored_claims() if claims is None else claims
    return ({f"pilot {a}": v for a, v in plan_v2.study_values(study.load_pilot(), claims).items()}
            | {f"fresh {a}": v for a, v in plan_v2.study_values(study.load_records(), claims).items()})


def power_analysis(sizes=POWER_SIZES, draws=POWER_DRAWS, seed=0):
    """The plan's power analysis (study_plan_v2.json, design.power): `predicted_replication` of a
    fresh-sized draw by a draw of each size, from the pilot population (about 5 minutes)."""
    claims = plan_v2.scored_claims()
    return predicted_replication(claims, pilot_population(claims), sizes, draws=draws, seed=seed)


if __name__ == "__main__":
    argparse.ArgumentParser(prog="python -m tinyagent.science.replication_v2",   # no options
                            description=__doc__.splitlines()[0]).parse_args()
    with pd.option_context("display.width", 200, "display.max_rows", 100):
        print(variance_components(plan_v2.scored_claims(), pilot_population()).round(3))
        print(power_analysis().round(3))
