import subprocess
import sys

import pytest
import torch

from tinyagent.gym import TRAIN_TASKS
from tinyagent.policy import Policy
from tinyagent.sampler import draw_uniforms, rollout, sample_tokens, token_logprobs

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
    # the float32 policy's logits, one token at a time against the whole sequence: rounding apart
    assert torch.allclose(logp[mask].double(), batch.logp[mask], atol=1e-5, rtol=0)
    assert (batch.logp[~mask] == 0).all()


def test_log_probs_at_policy_positions_equal_the_full_computation():
    policy, batch = Policy(seed=1), run(0)
    mask = batch.policy_mask
    full_logp, full_dist = token_logprobs(policy, batch.tokens, 1.3)
    logp, dist = token_logprobs(policy, batch.tokens, 1.3, mask)
    assert dist.shape == (int(mask.sum()), full_dist.shape[-1])          # (N, V), not (B, T, V)
    torch.testing.assert_close(logp[mask], full_logp[mask], atol=1e-5, rtol=0)
    assert (logp[~mask] == 0).all()
    torch.testing.assert_close(dist, full_dist[mask], atol=1e-5, rtol=0)
    with pytest.raises(ValueError, match="False at position 0"):
        token_logprobs(policy, batch.tokens, 1.0, torch.ones_like(mask))


def test_masked_log_probs_carry_the_same_gradient():
    batch = run(0)
    grads = []
    for mask in (None, batch.policy_mask):
        policy = Policy(seed=1)
        logp, dist = token_logprobs(policy, batch.tokens, 1.0, mask)
        entropy = -(dist.exp() * dist).sum(-1)
        entropy = entropy[batch.policy_mask] if mask is None else entropy
        ((logp * batch.policy_mask).sum() + entropy.sum()).backward()
        grads.append(torch.cat([p.grad.flatten() for p in policy.parameters()]))
    torch.testing.assert_close(grads[0], grads[1], atol=1e-4, rtol=1e-3)   # float32 rounding


def test_prefill_fills_the_cache_as_one_token_steps_do():
    policy, batch = Policy(seed=1), run(0)
    prompt = batch.tokens[:, :13]
    cache_a, cache_b = policy.new_cache(16), policy.new_cache(16)
    with torch.no_grad():
        logits_a = policy.prefill(prompt, cache_a)
        for pos in range(13):
            logits_b = policy.step(prompt[:, pos], pos, cache_b)
    torch.testing.assert_close(logits_a, logits_b, atol=1e-5, rtol=0)
    for (ka, va), (kb, vb) in zip(cache_a, cache_b):      # keys (B, nh, hs, L), values (B, nh, L, hs)
        torch.testing.assert_close(ka[..., :13], kb[..., :13], atol=1e-5, rtol=0)
        torch.testing.assert_close(va[:, :, :13], vb[:, :, :13], atol=1e-5, rtol=0)


def test_inverse_cdf_sampling_follows_the_distribution():
    logits = torch.log(torch.tensor([[0.1, 0.6, 0.3]], dtype=torch.float64)).repeat(20000, 1)
    tokens, _ = sample_tokens(logits, draw_uniforms(20000, torch.Generator().manual_seed(0)))
    freq = torch.bincount(tokens, minlength=3).double() / 20000
    assert torch.allclose(freq, torch.tensor([0.1, 0.6, 0.3], dtype=torch.float64), atol=0.015)


def test_bad_temperature():
    with pytest.raises(ValueError, match="temperature must be positive"):
        rollout(Policy(), TASKS[:1], torch.Generator(), temperature=0)


SCRIPT = """
import torch, hashlib
torch.set_num_threads({threads})
from tinyagent.evaluation import heldout_rollout
from tinyagent.policy import Policy
b = heldout_rollout(Policy(seed=1), n=8)
print(torch.get_num_threads(), hashlib.sha256(b.tokens.numpy().tobytes() + b.logp.numpy().tobytes()).hexdigest())
"""


def test_the_held_out_rollout_is_bitwise_the_same_whatever_the_callers_threads():
    """Measured: on two threads a float32 product of a few rows rounds differently, so the
    held-out rollout (like training) runs on one thread and gives the caller back its own."""
    out = [subprocess.run([sys.executable, "-c", SCRIPT.format(threads=t)], capture_output=True,
                          text=True, check=True).stdout.split() for t in (1, 2)]
    assert [threads for threads, _ in out] == ["1", "2"]
    assert out[0][1] == out[1][1]


@pytest.mark.parametrize("temperature", [0.0, -1.0, float("inf"), float("nan")])
def test_temperatures_that_define_no_distribution_are_refused(temperature):
    policy, gen = Policy(seed=0), torch.Generator().manual_seed(0)
    with pytest.raises(ValueError, match="temperature must be positive and finite"):
        rollout(policy, TRAIN_TASKS[:2], gen, temperature)
    tokens = torch.zeros(2, 5, dtype=torch.long)
    with pytest.raises(ValueError, match="temperature must be positive and finite"):
        token_logprobs(policy, tokens, temperature)


def test_a_rollout_needs_a_task():
    with pytest.raises(ValueError, match="at least one task"):
        rollout(Policy(seed=0), [], torch.Generator().manual_seed(0))


@pytest.mark.parametrize("temperature", [1e-310, 1e-4])
def test_temperatures_below_the_shared_floor_are_refused_where_the_config_refuses_them(temperature):
    """The rule is checks.temperature, the one the config applies: 1e-310 would sample one token
    forever with non-finite log-probs."""
    with pytest.raises(ValueError, match=r"temperature must be .*at least 0\.001"):
        rollout(Policy(seed=0), TASKS[:1], torch.Generator().manual_seed(0), temperature)
    with pytest.raises(ValueError, match=r"at least 0\.001"):
        token_logprobs(Policy(seed=0), torch.zeros(1, 5, dtype=torch.long), temperature)


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_a_policy_with_non_finite_outputs_stops_the_rollout(bad):
    policy = Policy(seed=0)
    with torch.no_grad():
        policy.head.weight.fill_(bad)
    with pytest.raises(FloatingPointError, match="logits for position 13 are not finite"):
        rollout(policy, TASKS[:2], torch.Generator().manual_seed(0))


def test_a_block_size_that_cuts_episodes_off_is_an_error_not_a_zero_reward():
    from tinyagent.gym import MAX_EPISODE_TOKENS
    from tinyagent.policy import PolicyConfig
    short = Policy(PolicyConfig(block_size=20), seed=0)
    with pytest.raises(ValueError, match=rf"block_size 20 cut off .* needs {MAX_EPISODE_TOKENS}"):
        rollout(short, TASKS[:4], torch.Generator().manual_seed(0))
    assert MAX_EPISODE_TOKENS <= Policy(seed=0).cfg.block_size      # the shipped size fits all


def test_the_policy_tasks_tokens_and_mask_are_checked_where_they_enter():
    policy, gen = Policy(seed=0), torch.Generator().manual_seed(0)
    with pytest.raises(TypeError, match="policy must be a Policy"):
        rollout(None, TRAIN_TASKS[:1], gen)
    with pytest.raises(TypeError, match="each task must be a Task"):
        rollout(policy, ["x"], gen)
    batch = rollout(policy, TRAIN_TASKS[:2], gen)
    for mask in (batch.policy_mask.float(), batch.policy_mask.long()):
        with pytest.raises(TypeError, match="mask must be a bool tensor"):
            token_logprobs(policy, batch.tokens, mask=mask)
    with pytest.raises(ValueError, match="tokens must hold ids"):
        token_logprobs(policy, batch.tokens.masked_fill(~batch.policy_mask, 999), mask=batch.policy_mask)
