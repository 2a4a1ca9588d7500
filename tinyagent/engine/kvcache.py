"""The key/value cache of incremental decoding (`Policy.new_cache`): storing a layer's new keys
and values, and one token's attention over everything stored.

A rollout samples each token with a one-token pass, and each layer's attention of that pass, as
`CausalSelfAttention.attend` writes it on views of the cache, is about twenty small operators:
splitting q, k and v out of qkv's rows, the slice assignments, the views of the stored prefix,
the products, the transposes. Here it is one store (kvcache.c), the two products of `attend`
called on the cache's memory directly, and the same softmax: the same bits
(tests/test_kvcache.py), a few operators. Where autograd must record the pass, or the policy is in
another precision than float32, `CausalSelfAttention` computes it on views, as written there.
"""
import math

import torch
import torch.nn.functional as F

from .kernels import load

_lib = load("key/value cache's store")


def _plain_float32(*tensors):
    """Whether the C code can read and write the tensors' memory as it is: float32, contiguous."""
    return all(t.dtype == torch.float32 and t.is_contiguous() for t in tensors)


def in_place(cache):
    """Whether the C store can write every layer's keys and values into `cache` as it is."""
    return all(_plain_float32(*pair) for pair in cache)


def store(qkv, cache, pos):
    """Store the keys and values of qkv (B, T, 3C), rows [q | k | v] of the tokens at positions
    pos .. pos+T-1, in `cache` = (keys (B, nh, hs, L), values (B, nh, L, hs)), for a pass that
    `direct` admits: the slice assignments of `CausalSelfAttention.forward`, as one C loop."""
    keys, values = cache
    _, nh, hs, L = keys.shape
    _lib.kv_store(qkv.shape[0], qkv.shape[1], nh, hs, L, pos, qkv.data_ptr(),
                  qkv.shape[1] * qkv.shape[2], qkv.shape[2], keys.data_ptr(), values.data_ptr())


def attend_one_token(qkv, cache, length):
    """softmax(q kᵀ / √hs) v (B, 1, C) of one token per episode, qkv (B, 1, 3C), over the first
    `length` positions of `cache`, for a float32 pass that `direct` admits: `attend`'s two
    products and softmax, on q in qkv's rows and on the cache itself, through the strides that
    the views would have."""
    keys, values = cache
    B, nh, hs, L = keys.shape
    C = nh * hs
    att = torch.empty(B, nh, 1, length, dtype=torch.float32)     # q kᵀ / √hs
    _lib.bmm(B, nh, 1, length, hs, qkv.data_ptr(), 3 * C, hs, 3 * C, 1,
             keys.data_ptr(), C * L, hs * L, L, 1, att.data_ptr(), 1.0 / math.sqrt(hs), 0, None)
    att = F.softmax(att, dim=-1)
    y = torch.empty(B, 1, C, dtype=torch.float32)        # (B, nh, 1, hs) is (B, 1, C) in memory
    _lib.bmm(B, nh, 1, hs, length, att.data_ptr(), nh * length, length, length, 1,
             values.data_ptr(), C * L, L * hs, hs, 1, y.data_ptr(), 1.0, 0, None)
    return y


def compact(cache, keep, length):
    """The cache of the episodes `keep` (increasing indices into its rows) only, as a rollout
    drops the episodes that ended: per layer (keys, values) with len(keep) rows, equal to
    `keys[keep]` and `values[keep]` in their first `length` positions, the only ones attention
    reads. A float32 cache moves the kept rows up in place, their first `length` positions only
    (kvcache.c); another is indexed."""
    if not in_place(cache):
        return [(k[keep], v[keep]) for k, v in cache]
    rows = torch.tensor(keep, dtype=torch.int64)
    _, nh, hs, L = cache[0][0].shape
    for k, v in cache:
        _lib.kv_compact(len(keep), rows.data_ptr(), nh, hs, L, length, k.data_ptr(), v.data_ptr())
    return [(k[:len(keep)], v[:len(keep)]) for k, v in cache]
