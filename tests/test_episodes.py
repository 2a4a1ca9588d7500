"""Tests of tinyagent.science.episodes: held-out episodes split by reading, by kind of task and by
their malformed calls, on rollouts of an untrained policy (it writes many malformed calls) against
the RL base agent."""
from types import SimpleNamespace

import pytest
import torch

from tinyagent.evaluation import evaluate, heldout_rollout
from tinyagent.gym import HELDOUT_TASKS
from tinyagent.policy import Policy
from tinyagent.checkpoint import load_rl_base
from tinyagent.science import episodes as E
from tinyagent.science.diagnostics import k3_decomposition, malformed_calls

TASKS = HELDOUT_TASKS[:4]          # both kinds of task
assert {t.needs_log for t in TASKS} == {True, False}
N = 4                              # attempts per task


@pytest.fixture(scope="module")
def base():
    return load_rl_base()


@pytest.fixture(scope="module")
def seeds(base):
    """Two 'seeds': an untrained policy's and the base agent's rollouts, with their evaluation."""
    out = []
    for policy in (Policy(seed=0), base):
        batch = heldout_rollout(policy, TASKS, n=N)
        run = {"eval": evaluate(policy, TASKS, n=N, ks=(1,), reference=base)}
        out.append((batch, run, k3_decomposition(batch, base)))
    return out


def test_by_reading_weighs_the_two_pass_rates_by_the_share_that_reads():
    episodes = [SimpleNamespace(reads=r, reward=w) for r, w in
                ((1, 1.0), (2, 0.0), (0, 1.0), (0, 0.0), (0, 0.0), (1, 1.0))]
    row = E.by_reading(SimpleNamespace(episodes=episodes))
    share = row["episodes that read"]
    assert share == pytest.approx(0.5)
    assert row["pass@1"] == pytest.approx(share * row["pass rate, read"]
                                          + (1 - share) * row["pass rate, no read"])


def test_passes_and_kinds_agree_with_what_evaluate_scored(seeds):
    for batch, run, _ in seeds:
        passed = E.passes_per_task(batch, TASKS)
        assert passed == run["eval"]["passed_per_task"]
        kinds = E.by_kind(batch, passed, TASKS)
        for kind, needs_log in E.KINDS:
            here = [e for e in batch.episodes if e.task.needs_log == needs_log]
            assert kinds[f"malformed, {kind}"] * len(here) == pytest.approx(
                sum(e.malformed for e in here))
            assert kinds[f"fewest passes, {kind}"] == min(
                c for c, t in zip(passed, TASKS) if t.needs_log == needs_log)


def test_distance_by_seed_puts_the_base_agent_first_and_reads_each_runs_minority_part(seeds, base):
    batches, runs, parts = zip(*seeds)
    rows = E.distance_by_seed(heldout_rollout(base, TASKS, n=N), runs, batches, parts, (7, 8),
                              TASKS)
    assert list(rows) == ["RL base agent", "none, seed 7", "none, seed 8"]
    assert rows["RL base agent"]["distance"] == 0.0
    row = rows["none, seed 7"]
    assert row["distance"] == runs[0]["eval"]["kl_to_ref"]
    assert 0 < row["minority's share of tokens"] < 1
    assert row["minority's share of distance"] * row["distance"] == pytest.approx(
        E.minority_part(parts[0], "contribution"))


def test_malformed_patterns_count_every_rejected_call_and_the_seeds_it_occurs_at(seeds):
    batches = [batch for batch, _, _ in seeds]
    table = E.malformed_patterns(batches, batches[1], top=1000)
    total = sum(sum(malformed_calls(batch).values()) for batch in batches)
    assert table["calls (5 seeds)"].sum() == total > 0
    assert table["calls (5 seeds)"].is_monotonic_decreasing
    assert table["seeds"].between(1, len(batches)).all()
    assert (table["RL base agent"] <= table["calls (5 seeds)"]).all()   # the base is one of them
    assert len(E.malformed_patterns(batches, batches[1], top=2)) == 2


def test_distance_sources_shares_lie_in_zero_one_and_the_floor_is_the_kl_per_token(seeds):
    batches, runs, parts = zip(*seeds)
    first_calls = [{"reverse KL": 1.5}, {"reverse KL": 0.0}]
    out = E.distance_sources(parts, batches, first_calls, runs, TASKS)
    tokens = [float(b.policy_mask.sum()) / len(b.episodes) for b in batches]
    assert out["first-call floor"] == pytest.approx([1.5 / tokens[0], 0.0])
    assert all(0 <= share <= 1 + 1e-12 for share in out["decided"])
    assert all(0 <= share <= 1 for share in out["malformed in the log tasks"])
    assert 0 <= out["minority over-represented"] <= len(batches)
    assert set(out["unsolved at"]) == {"majority", "needs the log"}


def test_malformed_price_is_the_gap_between_the_two_pass_rates():
    task, log_task = SimpleNamespace(needs_log=False), SimpleNamespace(needs_log=True)
    batch = SimpleNamespace(episodes=[SimpleNamespace(task=t, malformed=m, reward=r) for t, m, r in
                                      ((task, 1, 0.0), (task, 0, 1.0), (task, 0, 1.0),
                                       (task, 2, 1.0), (log_task, 1, 1.0))])
    price = E.malformed_price([batch])
    assert (price["episodes with"], price["episodes without"]) == (2, 2)  # the log task left out
    assert price["cost"] == pytest.approx(price["without"] - price["with"]) == pytest.approx(0.5)
    assert torch.is_tensor(price["cost"]) is False


def test_distance_parts_regroup_the_parts_by_name_and_refuse_parts_that_do_not_add_up(seeds):
    _, runs, parts = zip(*seeds)
    summaries = [run["eval"] for run in runs]
    by_part = E.distance_parts(parts, summaries)
    assert by_part["needs the log: verb"] == [p[("needs the log", "verb")] for p in parts]
    assert [row["contribution"] for row in by_part["all tokens"]] == [s["kl_to_ref"] for s in summaries]
    with pytest.raises(ValueError, match="add up"):
        E.distance_parts(parts, [{"kl_to_ref": s["kl_to_ref"] + 0.01} for s in summaries])


def test_reading_split_re_rolls_the_evaluated_episodes_and_refuses_others(base):
    pass1 = E.by_reading(heldout_rollout(base))["pass@1"]
    (row,) = E.reading_split([{"state": base.state_dict(), "eval": {"pass@1": pass1}}])
    assert row["pass@1"] == pass1
    with pytest.raises(ValueError, match="not the episodes"):
        E.reading_split([{"state": base.state_dict(), "eval": {"pass@1": pass1 + 0.1}}])


def test_part_by_seed_puts_each_seeds_value_in_its_row():
    by_part = {"a: other": [{"per_token": 0.1}, {"per_token": 0.5}],
               "b: other": [{"per_token": 0.2}, {"per_token": 0.0}]}
    table = E.part_by_seed(by_part, "per_token", ["b: other", "a: other"], seeds=[3, 4])
    assert table.loc[4, "a: other"] == 0.5 and table.loc[3, "b: other"] == 0.2
    assert list(table.columns) == ["b: other", "a: other"]


def _record(setting, agent, seed, passed):
    return {"setting": setting, "agent": agent, "seed": seed,
            "eval": {"passed_per_task": passed, "pass@1": sum(passed) / (16 * len(passed))}}


def test_the_paired_pass_rates_by_kind_of_task_average_to_the_paired_pass1():
    """Two settings at the same agent and seed: the log-reading tasks' and the others' paired
    differences, weighted by how many tasks each kind has, give the paired pass@1 difference;
    a run without its partner is left out, and no pair at all is refused."""
    log = [t.needs_log for t in HELDOUT_TASKS]
    g = torch.Generator().manual_seed(0)
    records = [_record(s, a, seed, torch.randint(0, 17, (10,), generator=g).tolist())
               for s in ("a", "b") for a in ("x", "y") for seed in range(3)]
    records.append(_record("a", "x", 7, [16] * 10))                      # no partner in "b"
    out = E.paired_pass_by_kind(records, "a", "b")
    assert {k: v.shape for k, v in out.items()} == {"x": (3, 2), "y": (3, 2)}
    by = {(r["setting"], r["agent"], r["seed"]): r["eval"]["pass@1"] for r in records}
    share = sum(log) / len(log)
    for agent, rows in out.items():
        for seed, (on_log, others) in enumerate(rows):
            assert share * on_log + (1 - share) * others == pytest.approx(
                by["a", agent, seed] - by["b", agent, seed])
    with pytest.raises(ValueError, match="no agent and seed"):
        E.paired_pass_by_kind(records, "a", "c")
