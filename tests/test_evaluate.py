import itertools
from math import comb

import pytest

from tinyagent.science.diagnostics import heldout_prompts
from tinyagent.evaluation import evaluate, heldout_rollout, pass_at_k
from tinyagent.gym import HELDOUT_TASKS
from tinyagent.policy import Policy
from tinyagent.checkpoint import load_rl_base


@pytest.mark.parametrize("n,c,k", [(16, 0, 1), (16, 3, 1), (16, 3, 8), (6, 2, 3), (5, 5, 2), (7, 1, 7)])
def test_pass_at_k_against_brute_force(n, c, k):
    outcomes = [1] * c + [0] * (n - c)
    subsets = list(itertools.combinations(range(n), k))
    brute = sum(any(outcomes[i] for i in s) for s in subsets) / len(subsets)
    assert pass_at_k(n, c, k) == pytest.approx(brute, abs=1e-12)


@pytest.mark.parametrize("args,message", [((4, 5, 1), r"c must be an integer in \[0, 4\]"),
                                          ((4, 1, 5), r"k must be an integer in \[1, 4\]"),
                                          ((True, True, True), "n must be a positive integer"),
                                          ((5.0, 2, 1), "n must be a positive integer")])
def test_pass_at_k_bad_input(args, message):
    with pytest.raises(ValueError, match=message):
        pass_at_k(*args)


def test_evaluate_reports_and_is_zero_distance_from_itself():
    policy = Policy(seed=0)
    out = evaluate(policy, HELDOUT_TASKS[:3], n=4, ks=(1, 2), reference=policy)
    assert set(out) >= {"pass@1", "pass@2", "distinct", "reads", "malformed", "kl_to_ref"}
    assert abs(out["kl_to_ref"]) < 1e-10     # the float32 trainer against the sampler's float64
    assert 1 <= out["distinct"] <= out["distinct_raw"] <= 4     # merging spellings only merges
    assert out == evaluate(policy, HELDOUT_TASKS[:3], n=4, ks=(1, 2), reference=policy)


def test_evaluate_scores_the_heldout_rollout_by_hand():
    tasks, n = HELDOUT_TASKS[:4], 6
    batch = heldout_rollout(load_rl_base(), tasks, n)
    out = evaluate(load_rl_base(), tasks, n=n, ks=(1, 3))
    passed = [int(sum(ep.reward for ep in batch.episodes[j * n:(j + 1) * n])) for j in range(len(tasks))]
    assert [ep.task for ep in batch.episodes] == [task for task in tasks for _ in range(n)]
    assert 0 < sum(passed) < len(tasks) * n, "the RL base agent should pass some attempts, not all"
    assert out["passed_per_task"] == passed
    assert out["pass@1"] == pytest.approx(sum(passed) / (len(tasks) * n))
    assert out["pass@3"] == pytest.approx(sum(1 - comb(n - c, 3) / comb(n, 3) for c in passed) / len(tasks))
    assert out["reads"] == pytest.approx(sum(ep.reads for ep in batch.episodes) / len(batch.episodes))
    assert out["malformed"] == pytest.approx(sum(ep.malformed for ep in batch.episodes) / len(batch.episodes))
    assert [ep.names for ep in batch.episodes] == [ep.names for ep in heldout_prompts(tasks, n)]


@pytest.mark.parametrize("tasks,n,message", [(HELDOUT_TASKS[:2], 0, "n .* must be a positive integer"),
                                              (HELDOUT_TASKS[:2], 2.5, "n .* must be a positive integer"),
                                              ((), 4, "tasks must hold at least one")])
def test_an_evaluation_needs_tasks_and_attempts(tasks, n, message):
    with pytest.raises(ValueError, match=message):
        evaluate(Policy(seed=0), tasks, n=n)


@pytest.mark.parametrize("ks", [(1, 8), (0,), (-1,), (1.5,), (True,), "12", None, ()])
def test_ks_are_checked_against_n_before_the_rollout(monkeypatch, ks):
    import tinyagent.evaluation as module
    monkeypatch.setattr(module, "rollout", lambda *args: pytest.fail("rolled out first"))
    with pytest.raises((TypeError, ValueError), match="ks"):
        evaluate(Policy(seed=0), HELDOUT_TASKS[:2], n=2, ks=ks)


@pytest.mark.parametrize("reference", ["x", 0, {"wte.weight": None}])
def test_a_reference_that_is_not_a_policy_is_refused_before_the_rollout(monkeypatch, reference):
    import tinyagent.evaluation as module
    monkeypatch.setattr(module, "rollout", lambda *args: pytest.fail("rolled out first"))
    with pytest.raises(TypeError, match="reference must be a Policy"):
        evaluate(Policy(seed=0), HELDOUT_TASKS[:2], n=2, ks=(1,), reference=reference)


@pytest.mark.parametrize("seed", [-1, 2 ** 64, 1.5, "x"])
def test_an_evaluation_takes_the_seeds_a_config_takes(seed):
    with pytest.raises((TypeError, ValueError), match=r"seed must be an integer in \[0, 2\*\*64\)"):
        evaluate(Policy(seed=0), HELDOUT_TASKS[:2], n=2, ks=(1,), seed=seed)


def test_tasks_may_be_a_generator():
    tasks = HELDOUT_TASKS[:2]
    assert evaluate(Policy(seed=0), (t for t in tasks), n=2, ks=(1,)) == evaluate(
        Policy(seed=0), tasks, n=2, ks=(1,))


@pytest.mark.parametrize("temperature", [1e-310, 0.0, float("nan")])
def test_an_evaluation_refuses_the_temperatures_the_config_refuses(temperature):
    with pytest.raises(ValueError, match=r"temperature must be .*at least 0\.001"):
        evaluate(Policy(seed=0), HELDOUT_TASKS[:1], n=2, ks=(1,), temperature=temperature)
    with pytest.raises(ValueError, match=r"temperature must be .*at least 0\.001"):
        heldout_rollout(Policy(seed=0), HELDOUT_TASKS[:1], n=2, temperature=temperature)


def test_distinct_per_task_refuses_groups_that_are_not_one_task_each():
    from tinyagent.evaluation import distinct_per_task
    batch = heldout_rollout(Policy(seed=0), HELDOUT_TASKS[:2], n=4)
    assert distinct_per_task(batch, 4) >= 1
    for n, message in ((3, "grouped by task"), (8, "grouped by task"), (0, "positive integer")):
        with pytest.raises(ValueError, match=message):
            distinct_per_task(batch, n)
