import itertools

import pytest
import torch

from tinyagent.evaluate import evaluate, pass_at_k
from tinyagent.gym import HELDOUT_TASKS
from tinyagent.policy import Policy


@pytest.mark.parametrize("n,c,k", [(16, 0, 1), (16, 3, 1), (16, 3, 8), (6, 2, 3), (5, 5, 2), (7, 1, 7)])
def test_pass_at_k_against_brute_force(n, c, k):
    outcomes = [1] * c + [0] * (n - c)
    subsets = list(itertools.combinations(range(n), k))
    brute = sum(any(outcomes[i] for i in s) for s in subsets) / len(subsets)
    assert pass_at_k(n, c, k) == pytest.approx(brute, abs=1e-12)


def test_pass_at_k_bad_input():
    with pytest.raises(ValueError, match="0 <= c <= n"):
        pass_at_k(4, 5, 1)
    with pytest.raises(ValueError, match="1 <= k <= n"):
        pass_at_k(4, 1, 5)


def test_evaluate_reports_and_is_zero_distance_from_itself():
    policy = Policy(seed=0)
    out = evaluate(policy, HELDOUT_TASKS[:3], n=4, ks=(1, 2), reference=policy)
    assert set(out) >= {"pass@1", "pass@2", "distinct", "reads", "malformed", "kl_from_ref"}
    assert abs(out["kl_from_ref"]) < 1e-20
    assert 1 <= out["distinct"] <= 4
    assert out == evaluate(policy, HELDOUT_TASKS[:3], n=4, ks=(1, 2), reference=policy)
