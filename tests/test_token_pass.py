"""The engine's one-token pass (engine/token_pass.py, a `Decoder`'s step) against the policy's
modules with each operator computed by the same kernels one call at a time
(tests/kernel_modules.py), bit for bit, and where it applies."""
import pytest
import torch

import kernel_modules
from tinyagent import engine
from tinyagent.engine.token_pass import OneTokenPass
from tinyagent.policy import Policy


pytestmark = pytest.mark.usefixtures("kernels_engine")   # tests of the kernels themselves


class _KernelModules:
    """kernel_modules as a decoder of `policy`."""

    def __init__(self, policy):
        self.policy = policy

    def prefill(self, idx, cache):
        return kernel_modules.prefill(self.policy, idx, cache)

    def step(self, tokens, pos, cache, rows=None):
        return kernel_modules.step(self.policy, tokens, pos, cache, rows)


def _decode_both(policy, B, prefix, steps, rows=None, gen_seed=0):
    """Logits and caches of `steps` one-token passes after a prefix, through the unfused kernels
    and through the engine's `Decoder` (its prefill the sequence pass, its steps the token pass)."""
    gen = torch.Generator().manual_seed(gen_seed)
    idx = torch.randint(0, policy.cfg.vocab_size, (B, prefix + steps), generator=gen)
    out = []
    for decoder in (_KernelModules(policy), engine.Decoder(policy)):
        cache = policy.new_cache(B)
        logits = []
        with torch.inference_mode():
            decoder.prefill(idx[:, :prefix], cache)
            for pos in range(prefix, prefix + steps):
                logits.append(decoder.step(idx[:, pos], pos, cache, rows))
        out.append((logits, cache))
    return out


@pytest.mark.parametrize("B, rows", [(1, None), (5, None), (16, [0, 3, 7]), (64, None)])
def test_the_token_pass_has_the_bits_of_the_kernels_called_one_by_one(monkeypatch, B, rows):
    """The one-token pass computes every logit and every stored key and value bit for bit as the
    unfused kernels do (and it did compute them: every step went through it)."""
    calls, plain = [], OneTokenPass.__call__
    monkeypatch.setattr(OneTokenPass, "__call__",
                        lambda self, *args: calls.append(1) or plain(self, *args))
    policy = Policy(seed=3)
    (modules, cache_m), (fused, cache_p) = _decode_both(policy, B, 13, 20, rows)
    assert len(calls) == 20
    assert all(torch.equal(a, b) for a, b in zip(modules, fused)) and len(fused) == 20
    assert fused[0].shape == (B if rows is None else len(rows), policy.cfg.vocab_size)
    for (km, vm), (kp, vp) in zip(cache_m, cache_p):
        assert torch.equal(km[..., :33], kp[..., :33]) and torch.equal(vm[:, :, :33], vp[:, :, :33])


def test_the_token_pass_runs_only_where_it_applies(monkeypatch):
    """A `Decoder` of a float32 policy builds the token pass and uses it without a gradient on a
    float32 cache; not while autograd records (there the modules compute, and the gradient
    reaches the weights), not on a float64 cache, not for a float64 policy, not under
    TINYAGENT_ENGINE=torch."""
    calls, plain = [], OneTokenPass.__call__
    monkeypatch.setattr(OneTokenPass, "__call__",
                        lambda self, *args: calls.append(1) or plain(self, *args))
    policy = Policy(seed=1)
    decoder = engine.Decoder(policy)
    assert decoder.kernels is not None
    cache = policy.new_cache(2)
    with torch.no_grad():
        decoder.step(torch.tensor([1, 2]), 0, cache)
    assert len(calls) == 1 and isinstance(decoder.kernels.token_pass, OneTokenPass)
    decoder.step(torch.tensor([1, 2]), 1, cache).sum().backward()      # grad enabled: the modules
    assert len(calls) == 1 and policy.head.weight.grad is not None
    with torch.no_grad():
        assert decoder._computer(cache) is decoder.kernels
        assert decoder._computer([(k.double(), v.double()) for k, v in cache]) is policy
    double = Policy(seed=1).double()
    assert engine.Decoder(double).kernels is None
    with torch.no_grad():
        engine.Decoder(double).step(torch.tensor([1, 2]), 0, double.new_cache(2))
    assert len(calls) == 1
    engine.use("torch")
    assert engine.Decoder(policy).kernels is None
    with torch.no_grad():
        engine.Decoder(policy).step(torch.tensor([1, 2]), 0, policy.new_cache(2))
    assert len(calls) == 1


def test_the_token_pass_refuses_positions_past_the_cache():
    policy = Policy()
    decoder = engine.Decoder(policy)
    with torch.inference_mode():
        with pytest.raises(ValueError, match="the cache's 5 positions"):
            decoder.step(torch.tensor([1]), 5, policy.new_cache(1, 5))
        with pytest.raises(ValueError, match="exceeds block_size"):
            decoder.step(torch.tensor([1]), policy.cfg.block_size, policy.new_cache(1))
