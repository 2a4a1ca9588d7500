import pytest
import torch

from tinyagent.policy import Policy


def _decode_both(policy, B, prefix, steps, rows=None, gen_seed=0):
    """Logits and caches of `steps` one-token passes after a prefix, through the modules and
    through the plan (`decode.OneTokenPass`), inside `fixed_weights` both."""
    gen = torch.Generator().manual_seed(gen_seed)
    idx = torch.randint(0, policy.cfg.vocab_size, (B, prefix + steps), generator=gen)
    out = []
    for plan in (False, True):
        cache = policy.new_cache(B)
        logits = []
        with torch.inference_mode(), policy.fixed_weights():
            plan_of_context, policy.one_token = policy.one_token, policy.one_token if plan else None
            try:
                policy.prefill(idx[:, :prefix], cache)
                for pos in range(prefix, prefix + steps):
                    logits.append(policy.step(idx[:, pos], pos, cache, rows))
            finally:
                policy.one_token = plan_of_context
        out.append((logits, cache))
    return out


@pytest.mark.parametrize("B, rows", [(1, None), (5, None), (16, [0, 3, 7]), (64, None)])
def test_the_plan_has_the_bits_of_the_modules(B, rows):
    """The one-token pass without the modules computes every logit and every stored key and
    value bit for bit as the modules do."""
    policy = Policy(seed=3)
    (modules, cache_m), (plan, cache_p) = _decode_both(policy, B, 13, 20, rows)
    assert all(torch.equal(a, b) for a, b in zip(modules, plan))
    assert plan[0].shape == (B if rows is None else len(rows), policy.cfg.vocab_size)
    for (km, vm), (kp, vp) in zip(cache_m, cache_p):
        assert torch.equal(km[..., :33], kp[..., :33]) and torch.equal(vm[:, :, :33], vp[:, :, :33])


def test_the_plan_runs_only_where_it_applies():
    """Built by `fixed_weights` for a float32 policy and gone after it; not for a float64 copy,
    and not while autograd records (there the modules compute, and the gradient reaches the
    weights)."""
    policy = Policy(seed=1)
    assert policy.one_token is None
    with policy.fixed_weights():
        assert policy.one_token is not None
        with policy.fixed_weights():                      # nested: the outer plan stays
            assert policy.one_token is not None
        assert policy.one_token is not None
        cache = policy.new_cache(2)
        with torch.no_grad():
            assert policy.one_token.applies(cache)
        assert not policy.one_token.applies(cache)        # grad enabled: the modules
        policy.step(torch.tensor([1, 2]), 0, cache).sum().backward()
        assert policy.head.weight.grad is not None
        with torch.no_grad():
            assert not policy.one_token.applies([(k.double(), v.double()) for k, v in cache])
    assert policy.one_token is None
    double = Policy(seed=1).double()
    with double.fixed_weights():
        assert double.one_token is None


def test_the_plan_refuses_positions_past_the_cache():
    policy = Policy()
    with torch.inference_mode(), policy.fixed_weights():
        with pytest.raises(ValueError, match="the cache's 5 positions"):
            policy.step(torch.tensor([1]), 5, policy.new_cache(1, 5))
        with pytest.raises(ValueError, match="exceeds block_size"):
            policy.step(torch.tensor([1]), policy.cfg.block_size, policy.new_cache(1))
