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

from . import guard
from .kernels import load

_lib = load("key/value cache's store")


def _plain_float32(*tensors):
    """Whether the C code can read and write the tensors' memory as it is: float32, contiguous
    (their device and shapes are checked where a pass begins)."""
    return all(isinstance(t, torch.Tensor) and t.dtype == torch.float32 and t.is_contiguous()
               for t in tensors)


def in_place(cache):
    """Whether the C store can write every layer's keys and values into `cache` as it is."""
    return isinstance(cache, (list, tuple)) and all(
        isinstance(pair, (list, tuple)) and len(pair) == 2 and _plain_float32(*pair)
        for pair in cache)


def _layer(where, layer, dtype=torch.float32):
    """(B, nh, hs, L) of one layer's cache, a pair (keys (B, nh, hs, L), values (B, nh, L, hs))
    of dense CPU tensors of `dtype`, contiguous (None: of any floating-point dtype and strides,
    which `compact` indexes); otherwise an error naming what is wrong."""
    if not isinstance(layer, (tuple, list)) or len(layer) != 2:
        raise TypeError(f"{where}: a layer of the cache is a pair (keys, values), got "
                        f"{type(layer).__name__}")
    keys, values = layer
    for name, t in (("the cache's keys", keys), ("the cache's values", values)):
        guard.tensor(where, name, t, dtype=dtype, ndim=4, contiguous=dtype is not None)
    B, nh, hs, L = keys.shape
    guard.shape(where, "the cache's values", values, (B, nh, L, hs),
                " (the keys (B, nh, hs, L) are stored transposed, the values (B, nh, L, hs): "
                "make the cache with Policy.new_cache)")
    return B, nh, hs, L


def _check_qkv(where, qkv, B, C, T=None):
    """Refuse qkv that is not a contiguous float32 (B, T, 3C) tensor."""
    guard.tensor(where, "qkv", qkv, ndim=3, contiguous=True)
    if qkv.shape[0] != B or qkv.shape[2] != 3 * C or (T is not None and qkv.shape[1] != T):
        raise ValueError(f"{where}: qkv must have shape (B, {'T' if T is None else T}, 3C) = "
                         f"({B}, {'T' if T is None else T}, {3 * C}) for the cache's {B} rows and "
                         f"C = {C} channels, got {tuple(qkv.shape)}")


def store(qkv, cache, pos):
    """Store the keys and values of qkv (B, T, 3C), rows [q | k | v] of the tokens at positions
    pos .. pos+T-1, in `cache` = (keys (B, nh, hs, L), values (B, nh, L, hs)), for a pass that
    `direct` admits: the slice assignments of `CausalSelfAttention.forward`, as one C loop.
    qkv and the cache are contiguous float32 CPU tensors, and the positions lie in the cache."""
    B, nh, hs, L = _layer("store", cache)
    _check_qkv("store", qkv, B, nh * hs)
    T = qkv.shape[1]
    guard.position("store", "pos", pos, 0, L - T,
                   f"the position of the first of {T} tokens, which must fit in the cache's {L} "
                   f"positions")
    _store(qkv, cache, pos)


def _store(qkv, cache, pos):
    """`store` of operands already checked (the engine's own passes)."""
    keys, values = cache
    _, nh, hs, L = keys.shape
    _lib.kv_store(qkv.shape[0], qkv.shape[1], nh, hs, L, pos, qkv.data_ptr(),
                  qkv.shape[1] * qkv.shape[2], qkv.shape[2], keys.data_ptr(), values.data_ptr())


def attend_one_token(qkv, cache, length):
    """softmax(q kᵀ / √hs) v (B, 1, C) of one token per episode, qkv (B, 1, 3C), over the first
    `length` positions of `cache`, for a float32 pass that `direct` admits: `attend`'s two
    products and softmax, on q in qkv's rows and on the cache itself, through the strides that
    the views would have. qkv and the cache are contiguous float32 CPU tensors; `length` is at
    least 1 and at most the cache's."""
    B, nh, hs, L = _layer("attend_one_token", cache)
    _check_qkv("attend_one_token", qkv, B, nh * hs, T=1)
    guard.position("attend_one_token", "length", length, 1, L,
                   f"the positions attended, at most the cache's {L}")
    return _attend_one_token(qkv, cache, length)


def _attend_one_token(qkv, cache, length):
    """`attend_one_token` of operands already checked (the engine's own passes)."""
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
    (kvcache.c); another is indexed. `cache` is a `policy.Cache`, and so is the result, filled
    as far as `cache` was, at most `length`."""
    guard.cache("compact", cache)
    if not cache:
        raise ValueError("compact: the cache holds no layer; make it with Policy.new_cache")
    B, nh, hs, L = _layer("compact", cache[0], dtype=None)
    for layer in cache[1:]:
        if _layer("compact", layer, dtype=None) != (B, nh, hs, L):
            raise ValueError(f"compact: every layer of the cache must have the first's shape, "
                             f"keys {(B, nh, hs, L)}, got keys {tuple(layer[0].shape)}")
    length = guard.position("compact", "length", length, 0, L,
                            f"the positions filled, at most the cache's {L}")
    keep = guard.kept_rows("compact", keep, B)
    if not in_place(cache):
        kept = [(k[keep], v[keep]) for k, v in cache]
    else:
        rows = torch.tensor(keep, dtype=torch.int64)
        for k, v in cache:
            _lib.kv_compact(len(keep), rows.data_ptr(), nh, hs, L, length, k.data_ptr(),
                            v.data_ptr())
        kept = [(k[:len(keep)], v[:len(keep)]) for k, v in cache]
    from ..policy import Cache
    return Cache(kept, cache.cfg, min(cache.filled, length))
