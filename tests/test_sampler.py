import subprocess
import sys

import pytest
import torch

from tinyagent.gym import TRAIN_TASKS
from tinyagent.policy import Policy
from tinyagent.sampler import rollout, sample_tokens, token_logprobs

TASKS = [TRAIN_TASKS[i // 4] for i in range(16)]


def run(seed, policy=None):
    return rollout(policy or Policy(seed=1), TASKS, torch.Generator().manual_seed(seed))


def test_same_seed_same_episodes_bitwise():
    a, b = run(0), run(0)
    assert torch.equal(a.tokens, b.tokens) and torch.equal(a.logp, b.logp)
    assert not torch.equal(a.tokens, run(1).tokens)


def test_sampler_logprobs_equal_a_full_recompute():
    batch = run(0)
    logp, _ = token_logprobs(Policy(seed=1), batch.tokens, batch.temperature)
    mask = batch.policy_mask
    assert mask.any()
    assert torch.allclose(logp[mask], batch.logp[mask], atol=1e-12, rtol=0)
    assert (batch.logp[~mask] == 0).all()


def test_inverse_cdf_sampling_follows_the_distribution():
    logits = torch.log(torch.tensor([[0.1, 0.6, 0.3]], dtype=torch.float64)).repeat(20000, 1)
    tokens, _ = sample_tokens(logits, torch.Generator().manual_seed(0))
    freq = torch.bincount(tokens, minlength=3).double() / 20000
    assert torch.allclose(freq, torch.tensor([0.1, 0.6, 0.3], dtype=torch.float64), atol=0.015)


def test_bad_temperature():
    with pytest.raises(ValueError, match="temperature must be positive"):
        rollout(Policy(), TASKS[:1], torch.Generator(), temperature=0)


SCRIPT = """
import torch, hashlib
torch.set_num_threads({threads})
from tinyagent.policy import Policy
from tinyagent.gym import TRAIN_TASKS
from tinyagent.sampler import rollout
b = rollout(Policy(seed=1), [TRAIN_TASKS[i // 8] for i in range(64)], torch.Generator().manual_seed(0))
print(hashlib.sha256(b.tokens.numpy().tobytes()).hexdigest(), b.logp.sum().item())
"""


def test_one_and_two_threads_give_the_same_episodes_bitwise():
    out = [subprocess.run([sys.executable, "-c", SCRIPT.format(threads=t)], capture_output=True,
                          text=True, check=True).stdout for t in (1, 2)]
    (tokens_1, logp_1), (tokens_2, logp_2) = (o.split() for o in out)
    assert tokens_1 == tokens_2                     # the same episodes, bitwise
    assert abs(float(logp_1) - float(logp_2)) < 1e-9   # log-probs to rounding (summed over 64)
