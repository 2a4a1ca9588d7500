"""The cache's store and one-token attention on its memory (engine/kvcache.py) give the bits of
the views that `CausalSelfAttention` writes, computed by the same kernels one call at a time
(tests/kernel_modules.py)."""
import pytest
import torch

import kernel_modules
from tinyagent import engine
from tinyagent.engine import kvcache
from tinyagent.policy import Cache, Policy


pytestmark = pytest.mark.usefixtures("kernels_engine")   # tests of the kernels themselves


def decoded(policy, idx, prefix, direct):
    """Logits of a prefill of idx[:, :prefix] and then one token at a time, through the views of
    kernel_modules with autograd recording, or through the engine's `Decoder` in inference mode
    (the store and attention on the cache's memory)."""
    cache = policy.new_cache(idx.shape[0], idx.shape[1])
    if direct:
        decoder = engine.Decoder(policy)
        with torch.inference_mode():
            logits = [decoder.prefill(idx[:, :prefix], cache)]
            logits += [decoder.step(idx[:, t], t, cache) for t in range(prefix, idx.shape[1])]
    else:
        logits = [kernel_modules.prefill(policy, idx[:, :prefix], cache)]
        logits += [kernel_modules.step(policy, idx[:, t], t, cache)
                   for t in range(prefix, idx.shape[1])]
        assert logits[-1].grad_fn is not None                        # autograd recorded the views
    return torch.stack(logits, 1).detach(), [t.detach().clone() for pair in cache for t in pair]


def test_direct_decoding_has_the_bits_of_the_views():
    policy = Policy(seed=3)
    idx = torch.randint(0, policy.cfg.vocab_size, (5, 40), generator=torch.Generator().manual_seed(3))
    views, views_cache = decoded(policy, idx, 13, direct=False)
    direct, direct_cache = decoded(policy, idx, 13, direct=True)
    assert torch.equal(direct, views)
    assert all(torch.equal(a, b) for a, b in zip(direct_cache, views_cache))   # every position


def test_the_store_writes_in_place_only_where_it_applies():
    policy = Policy()
    cache = policy.new_cache(2, 8)
    assert kvcache.in_place(cache)
    assert not kvcache.in_place([(k.double(), v.double()) for k, v in cache])   # another precision
    assert not kvcache.in_place([(k[..., :4], v) for k, v in cache])          # a strided cache


def test_compacting_keeps_what_indexing_keeps_in_the_filled_positions():
    policy = Policy()
    gen = torch.Generator().manual_seed(4)
    for dtype in (torch.float32, torch.float64):
        cache = Cache([tuple(torch.randn(t.shape, generator=gen, dtype=dtype) for t in pair)
                       for pair in policy.new_cache(9, 20)], policy.cfg, 12)
        expected = [(k[[0, 3, 4, 8]], v[[0, 3, 4, 8]]) for k, v in cache]
        compacted = kvcache.compact(cache, [0, 3, 4, 8], 12)
        assert isinstance(compacted, Cache) and compacted.filled == 12
        for (k, v), (ek, ev) in zip(compacted, expected):
            assert k.shape == ek.shape and v.shape == ev.shape and k.dtype == dtype
            assert torch.equal(k[..., :12], ek[..., :12]) and torch.equal(v[:, :, :12], ev[:, :, :12])
            assert k.is_contiguous() and v.is_contiguous()


def test_direct_decoding_writes_float32_whatever_the_default_dtype():
    policy = Policy(seed=6)
    idx = torch.randint(0, policy.cfg.vocab_size, (2, 16), generator=torch.Generator().manual_seed(6))
    expected, _ = decoded(policy, idx, 8, direct=True)
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        got, _ = decoded(policy, idx, 8, direct=True)
    finally:
        torch.set_default_dtype(before)
    assert got.dtype == torch.float32 and torch.equal(got, expected)
