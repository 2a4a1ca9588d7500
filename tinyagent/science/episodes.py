"""Held-out episodes split by what they did: read or not, the kind of task, the malformed calls.

Section 10.7's evidence explains where our runs differ from the book's by splitting the episodes
`evaluate` scored (the same episodes, from `heldout_rollout`): a mean over all of them hides which
kind of episode makes a difference. Two kinds of task: the majority, where the failing test names
the broken function, and the log-reading minority, where only the log does (`gym.make_splits`).
Nothing that trains or evaluates imports this module.
"""
import math
from collections import Counter

import numpy as np
import pandas as pd

from ..evaluation import ATTEMPTS, heldout_rollout
from ..gym import HELDOUT_TASKS
from ..harness.runs import policy_from_state
from .diagnostics import malformed_calls

KINDS = (("majority", False), ("needs the log", True))     # (label, task.needs_log)


def by_reading(batch):
    """The share of episodes that read anything, the pass rates of those that did and of those
    that did not, and pass@1: an agent that never reads passes at the blind ceiling, so reading is
    what can lift pass@1 above it."""
    read = [e for e in batch.episodes if e.reads > 0]
    blind = [e for e in batch.episodes if e.reads == 0]
    return {"episodes that read": len(read) / len(batch.episodes),
            "pass rate, read": np.mean([e.reward for e in read]),
            "pass rate, no read": np.mean([e.reward for e in blind]),
            "pass@1": np.mean([e.reward for e in batch.episodes])}


def passes_per_task(batch, tasks=HELDOUT_TASKS):
    """How many of each task's attempts passed, tasks in order (as `evaluate`'s passed_per_task)."""
    return batch.rewards.view(len(tasks), -1).sum(1).long().tolist()


def by_kind(batch, passed, tasks=HELDOUT_TASKS):
    """Malformed calls per episode and the fewest passes of any task, for each kind of task:
    `passed` counts each task's passes, `tasks` in order."""
    out = {}
    for kind, needs_log in KINDS:
        episodes = [e for e in batch.episodes if e.task.needs_log == needs_log]
        out[f"malformed, {kind}"] = sum(e.malformed for e in episodes) / len(episodes)
        out[f"fewest passes, {kind}"] = min(c for c, t in zip(passed, tasks)
                                            if t.needs_log == needs_log)
    return out


def minority_part(parts, column):
    """The log-reading tasks' part of a `diagnostics.k3_decomposition`: their share of the tokens
    (column "share") or their contribution to the distance ("contribution")."""
    return sum(part[column] for (kind, _), part in parts.items() if kind == "needs the log")


def distance_by_seed(base_batch, runs, batches, decompositions, seeds, tasks=HELDOUT_TASKS):
    """One row for the RL base agent, then one per seed's run: its distance from the base agent,
    the log-reading tasks' share of its tokens and of that distance, and `by_kind`'s malformed
    calls and fewest passes. Whether the minority's share of the distance exceeds its share of the
    tokens says where RL moved the policy most."""
    rows = {"RL base agent": {"distance": 0.0, "minority's share of tokens": math.nan,
                              "minority's share of distance": math.nan,
                              **by_kind(base_batch, passes_per_task(base_batch, tasks), tasks)}}
    for seed, parts, batch, run in zip(seeds, decompositions, batches, runs):
        distance = run["eval"]["kl_to_ref"]
        rows[f"none, seed {seed}"] = {
            "distance": distance, "minority's share of tokens": minority_part(parts, "share"),
            "minority's share of distance": minority_part(parts, "contribution") / distance,
            **by_kind(batch, run["eval"]["passed_per_task"], tasks)}
    return rows


def malformed_patterns(batches, base_batch, top=10):
    """The `top` most frequent malformed-call patterns (`diagnostics.call_pattern`) over `batches`
    (one per seed), at how many seeds each occurs and how often `base_batch` writes it: whether RL
    made a pattern new, rarer or more frequent."""
    calls, seen_at = Counter(), Counter()
    for batch in batches:
        counts = malformed_calls(batch)
        calls.update(counts)
        seen_at.update(counts.keys())
    base = malformed_calls(base_batch)
    rows = calls.most_common(top)
    return pd.DataFrame({"calls (5 seeds)": [n for _, n in rows],
                         "seeds": [seen_at[key] for key, _ in rows],
                         "RL base agent": [base[key] for key, _ in rows]},
                        index=pd.MultiIndex.from_tuples([key for key, _ in rows],
                                                        names=["task", "malformed call"]))


def distance_sources(decompositions, batches, first_calls, runs, tasks=HELDOUT_TASKS):
    """Where one setting's distance from its start comes from, seed by seed (lists) or counted
    over seeds: the share carried by verbs and arguments ("decided"), the first call's exact
    reverse KL spread over the episode's policy tokens (a floor on its part of the per-token
    distance), at how many seeds the log-reading tasks carry more of the distance than of the
    tokens, their share of the malformed calls, and at how many seeds each kind of task has a
    task never solved."""
    tokens = [float(batch.policy_mask.sum()) / len(batch.episodes) for batch in batches]
    distances = [run["eval"]["kl_to_ref"] for run in runs]
    counts = [malformed_calls(batch) for batch in batches]
    kinds = [by_kind(batch, run["eval"]["passed_per_task"], tasks)
             for batch, run in zip(batches, runs)]
    return {
        "tokens per episode": tokens,
        "first-call floor": [d["reverse KL"] / n for d, n in zip(first_calls, tokens)],
        "decided": [sum(p["contribution"] for (_, role), p in parts.items() if role != "other")
                    / distance for parts, distance in zip(decompositions, distances)],
        "minority over-represented": sum(minority_part(parts, "contribution") / distance
                                         > minority_part(parts, "share")
                                         for parts, distance in zip(decompositions, distances)),
        "malformed in the log tasks": [sum(n for (kind, _), n in c.items()
                                           if kind == "needs the log") / sum(c.values())
                                       for c in counts],
        "unsolved at": {kind: sum(k[f"fewest passes, {kind}"] == 0 for k in kinds)
                        for kind, _ in KINDS}}


def malformed_price(batches):
    """What a malformed call costs, on the majority's tasks of `batches` pooled: the pass rates of
    episodes with and without one, their counts, and the difference ("cost"): the training reward
    a setting gains by writing fewer malformed calls is about that cost per call."""
    majority = [e for batch in batches for e in batch.episodes if not e.task.needs_log]
    with_malformed = [e.reward for e in majority if e.malformed]
    without = [e.reward for e in majority if not e.malformed]
    return {"with": np.mean(with_malformed), "episodes with": len(with_malformed),
            "without": np.mean(without), "episodes without": len(without),
            "cost": np.mean(without) - np.mean(with_malformed)}


def paired_pass_by_kind(records, a, b, tasks=HELDOUT_TASKS):
    """Setting `a` minus setting `b` at the same agent and seed, over a study's records: each
    pair's held-out pass rate on the log-reading tasks and on the majority's, as
    {agent: (seeds, 2)} in seed order (the layout `plan_v2.hierarchical_means` resamples)."""
    log = np.array([t.needs_log for t in tasks])
    rate = {}
    for r in records:
        passed = np.asarray(r["eval"]["passed_per_task"], dtype=float)
        if len(passed) != len(tasks):
            raise ValueError(f"a record counts {len(passed)} tasks' passes, not the {len(tasks)} "
                             f"held-out tasks")
        rate[r["setting"], r["agent"], r["seed"]] = passed
    out = {}
    for (setting, agent, seed), passed in sorted(rate.items(), key=lambda kv: kv[0][2]):
        if setting != a or (b, agent, seed) not in rate:
            continue
        diff = (passed - rate[b, agent, seed]) / ATTEMPTS
        out.setdefault(agent, []).append([diff[log].mean(), diff[~log].mean()])
    if not out:
        raise ValueError(f"no agent and seed has runs of both {a!r} and {b!r}")
    return {agent: np.array(rows) for agent, rows in out.items()}


def heldout_batches(runs):
    """The held-out episodes `evaluate` scored, re-rolled from each run's final parameters."""
    return [heldout_rollout(policy_from_state(run["state"])) for run in runs]


def reading_split(runs):
    """`by_reading` of each run's held-out episodes; refuses episodes whose pass@1 is not the one
    `evaluate` recorded for the run (they would not be the episodes it scored)."""
    rows = [by_reading(batch) for batch in heldout_batches(runs)]
    for row, run in zip(rows, runs):
        if not math.isclose(row["pass@1"], run["eval"]["pass@1"]):
            raise ValueError(f"re-rolled pass@1 {row['pass@1']} is not the evaluated "
                             f"{run['eval']['pass@1']}: not the episodes evaluate() scored")
    return rows


def distance_parts(decompositions, summaries):
    """`diagnostics.k3_decomposition`s of one setting's runs, one per seed, regrouped as
    {"kind: role": [that part at each seed]}, plus "all tokens" (the evaluated distance itself);
    refuses parts that do not add up to each run's evaluated distance (`summaries`, kl_to_ref)."""
    for parts, row in zip(decompositions, summaries):
        total = sum(p["contribution"] for p in parts.values())
        if not math.isclose(total, row["kl_to_ref"], rel_tol=1e-9):
            raise ValueError(f"the parts add up to {total}, the evaluated distance is "
                             f"{row['kl_to_ref']}")
    by_part = {f"{kind}: {role}": [parts[(kind, role)] for parts in decompositions]
               for kind, role in decompositions[0]}
    by_part["all tokens"] = [{"share": 1.0, "per_token": row["kl_to_ref"],
                              "contribution": row["kl_to_ref"]} for row in summaries]
    return by_part


def part_by_seed(by_part, field, parts, seeds):
    """One `field` (share, per_token or contribution) of some of `distance_parts`' parts, a row
    per seed: which seed a median-and-range table's extremes belong to."""
    return pd.DataFrame({part: [p[field] for p in by_part[part]] for part in parts},
                        index=pd.Index(seeds, name="seed"))
