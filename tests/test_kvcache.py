"""The cache's direct store and one-token attention (kvcache.py) give the bits of the views that
`CausalSelfAttention` computes otherwise."""
import torch

from tinyagent import kvcache
from tinyagent.policy import Policy


def decoded(policy, idx, prefix, grad):
    """Logits of a prefill of idx[:, :prefix] and then one token at a time, with autograd
    recording (the views' path) or in inference mode (the direct path)."""
    cache = policy.new_cache(idx.shape[0], idx.shape[1])
    with torch.set_grad_enabled(grad):
        logits = [policy.prefill(idx[:, :prefix], cache)]
        logits += [policy.step(idx[:, t], t, cache) for t in range(prefix, idx.shape[1])]
    return torch.stack(logits, 1).detach(), [t.detach().clone() for pair in cache for t in pair]


def test_direct_decoding_has_the_bits_of_the_views():
    policy = Policy(seed=3)
    idx = torch.randint(0, policy.cfg.vocab_size, (5, 40), generator=torch.Generator().manual_seed(3))
    views, views_cache = decoded(policy, idx, 13, grad=True)
    with policy.fixed_weights():
        direct, direct_cache = decoded(policy, idx, 13, grad=False)
    assert torch.equal(direct, views)
    assert all(torch.equal(a, b) for a, b in zip(direct_cache, views_cache))   # every position


def test_the_direct_path_is_taken_only_where_it_applies():
    policy = Policy()
    cache = policy.new_cache(2, 8)[0]                               # one layer's
    qkv = torch.zeros(2, 1, 3 * policy.cfg.n_embd)
    with torch.no_grad():
        assert kvcache.direct(qkv, cache)
        assert not kvcache.direct(qkv.double(), cache)              # another precision
        assert not kvcache.direct(qkv, (cache[0][..., :4], cache[1]))   # a strided cache
    assert not kvcache.direct(qkv.requires_grad_(), cache)          # autograd records the pass


def test_compacting_keeps_what_indexing_keeps_in_the_filled_positions():
    policy = Policy()
    gen = torch.Generator().manual_seed(4)
    for dtype in (torch.float32, torch.float64):
        cache = [tuple(torch.randn(t.shape, generator=gen, dtype=dtype) for t in pair)
                 for pair in policy.new_cache(9, 20)]
        expected = [(k[[0, 3, 4, 8]], v[[0, 3, 4, 8]]) for k, v in cache]
        compacted = kvcache.compact(cache, [0, 3, 4, 8], 12)
        for (k, v), (ek, ev) in zip(compacted, expected):
            assert k.shape == ek.shape and v.shape == ev.shape and k.dtype == dtype
            assert torch.equal(k[..., :12], ek[..., :12]) and torch.equal(v[:, :, :12], ev[:, :, :12])
            assert k.is_contiguous() and v.is_contiguous()


def test_direct_decoding_writes_float32_whatever_the_default_dtype():
    policy = Policy(seed=6)
    idx = torch.randint(0, policy.cfg.vocab_size, (2, 16), generator=torch.Generator().manual_seed(6))
    expected, _ = decoded(policy, idx, 8, grad=False)
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        got, _ = decoded(policy, idx, 8, grad=False)
    finally:
        torch.set_default_dtype(before)
    assert got.dtype == torch.float32 and torch.equal(got, expected)
