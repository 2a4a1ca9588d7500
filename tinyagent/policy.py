"""The TinyAgent policy: a ~155k-parameter decoder-only transformer in float32, in plain PyTorch.

Read top-down: config, attention, MLP, block, cache, model; the checks of their inputs close
the file. The model never imports the gym: it maps token ids to next-token logits, nothing more.
Saving and loading live in checkpoint.py.

This file is the model's definition. The trainers reach it through `tinyagent.engine`, which by
default computes this same function from these same parameters with its own kernels (the same
bits on every x86-64 CPU, and faster); `TINYAGENT_ENGINE=torch` runs the modules below instead.
tests/test_engine.py holds the two to each other.
"""
import math
from dataclasses import asdict, dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from .checks import instance, int_in, positive_int, row_indices, seed_int, token_ids
from .vocab import VOCAB_SIZE


@dataclass(frozen=True)
class PolicyConfig:
    vocab_size: int = VOCAB_SIZE   # the gym's 316 words
    block_size: int = 96           # longest episode: 13 prompt tokens + 6 calls with observations
    n_layer: int = 2               # two layers are enough to copy a name from an observation
    n_head: int = 6                # head size 11
    n_embd: int = 66               # sized so the model has the chapter's ~157k parameters

    def __post_init__(self):
        for name, value in asdict(self).items():
            positive_int(name, value)
        if self.n_embd % self.n_head:
            raise ValueError(f"n_embd ({self.n_embd}) must be a multiple of n_head ({self.n_head}): "
                             f"the heads split the embedding evenly")


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.n_head = cfg.n_head
        self.qkv = nn.Linear(cfg.n_embd, 3 * cfg.n_embd)    # queries, keys, values in one product
        self.proj = nn.Linear(cfg.n_embd, cfg.n_embd)

    def forward(self, x, cache=None, pos=0):
        """Causal attention over x (B, T, C). With a `cache` (one layer's (keys, values) of a
        `Cache`), x holds the tokens at positions pos .. pos+T-1: their keys and values are
        stored there and the queries attend to every position stored so far. A pair of the
        wrong shape, dtype or device, or positions outside it, is refused before anything is
        written; a pair does not say how far it is filled, so positions before `pos` must hold
        keys and values already (`Policy.features`, given the whole Cache, checks that too)."""
        check_features("CausalSelfAttention", x, self.qkv.in_features)
        B, T, C = x.shape
        if cache is not None:
            layer_length("CausalSelfAttention: the cache", cache, B, self.n_head, C // self.n_head,
                         x.dtype, x.device, pos, T)
        q, k, v = self.qkv(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
                   for t in (q, k, v))                               # (B, nh, T, hs)
        if cache is not None:
            keys, values = cache                                     # keys stored as kᵀ
            keys[..., pos:pos + T] = k.transpose(2, 3)
            values[:, :, pos:pos + T] = v
            k, v = keys[..., :pos + T].transpose(2, 3), values[:, :, :pos + T]  # (B, nh, L, hs)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.shape[-1]))        # (B, nh, T, L)
        if T > 1:                                   # a prefix: each position sees its past only
            future = torch.ones(T, T, dtype=torch.bool).triu(1)
            att = att.masked_fill(future, float("-inf"))
        y = F.softmax(att, dim=-1) @ v                                          # (B, nh, T, hs)
        y = y.transpose(1, 2).contiguous().view(B, T, C)                        # (B, T, C)
        return self.proj(y)


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.fc = nn.Linear(cfg.n_embd, 4 * cfg.n_embd)
        self.proj = nn.Linear(4 * cfg.n_embd, cfg.n_embd)

    def forward(self, x):
        return self.proj(F.gelu(self.fc(x)))        # the exact GELU, x·Φ(x), written with erf


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.n_embd)
        self.attn = CausalSelfAttention(cfg)
        self.ln_2 = nn.LayerNorm(cfg.n_embd)
        self.mlp = MLP(cfg)

    def forward(self, x, cache=None, pos=0):
        """x (B, T, C) through attention and the MLP, each added to it (`cache` and `pos`: see
        CausalSelfAttention)."""
        check_features("Block", x, self.ln_1.normalized_shape[0])
        x = x + self.attn(self.ln_1(x), cache, pos)
        return x + self.mlp(self.ln_2(x))


class Cache(list):
    """`Policy.new_cache`'s keys and values, one (keys, values) pair per layer, with the config
    they were made for and `filled`, how many positions hold keys and values: the only ones a
    next token may attend to (the others hold whatever memory the cache was given). Decoding
    takes a Cache and nothing else: a plain list of pairs does not say how far it is filled, so
    a position past what was written would read that memory. Rows copied out of a cache are a
    cache again as `Cache([(k[rows], v[rows]) for k, v in cache], cache.cfg, cache.filled)`."""

    def __init__(self, layers, cfg, filled=0):
        super().__init__(layers)
        if not isinstance(cfg, PolicyConfig):
            raise TypeError(f"a Cache's cfg is the PolicyConfig its keys and values were made "
                            f"for, got {type(cfg).__name__}")
        self.cfg, self.filled = cfg, int_in("a Cache's filled", filled, 0, cfg.block_size)

    @staticmethod
    def check(where, cache):
        """`cache` if it is a Cache; otherwise a TypeError naming `where` and what is allowed."""
        if not isinstance(cache, Cache):
            hint = (" (a plain list of pairs counts no fill: wrap rows copied out of a cache "
                    "as Cache(layers, cache.cfg, cache.filled))"
                    if isinstance(cache, (list, tuple)) else "")
            raise TypeError(f"{where}: the cache must be a Cache from Policy.new_cache (or "
                            f"engine.Decoder.new_cache), one (keys, values) pair per layer that "
                            f"counts how many positions are filled; got "
                            f"{type(cache).__name__}{hint}")
        return cache


class Policy(nn.Module):
    """Token ids (B, T) to next-token logits (B, T, V). Untied input and output embeddings
    (tied ones learned to copy names much more slowly)."""

    def __init__(self, cfg=PolicyConfig(), seed=0):
        super().__init__()
        self.cfg = instance("cfg", cfg, PolicyConfig)
        self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.wpe = nn.Embedding(cfg.block_size, cfg.n_embd)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.n_embd)
        self.head = nn.Linear(cfg.n_embd, cfg.vocab_size)
        self._init_weights(torch.Generator().manual_seed(seed_int("seed", seed)))

    def _init_weights(self, gen):
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif "ln" in name:
                nn.init.ones_(p)
            else:
                std = 0.02 / math.sqrt(2 * self.cfg.n_layer) if name.endswith("proj.weight") else 0.02
                with torch.no_grad():
                    # drawn in float64 whatever the dtype, so the same seed starts
                    # the same model in either precision
                    p.copy_(torch.randn(p.shape, generator=gen, dtype=torch.float64) * std)

    def features(self, idx, cache=None, pos=0):
        """The final layer's normalized features (B, T, C) of tokens idx (B, T) at positions
        pos .. pos+T-1 (with a `cache`: see CausalSelfAttention)."""
        token_ids("idx", idx, self.cfg.vocab_size, empty=True)
        B, T = idx.shape
        self.check_positions(pos, T, cache, B)
        x = self.wte(idx) + self.wpe(torch.arange(pos, pos + T))      # (B, T, C)
        for i, block in enumerate(self.blocks):
            x = block(x, None if cache is None else cache[i], pos)
        if cache is not None:
            cache.filled = pos + T                # what follows position pos + T - 1 is stale
        return self.ln_f(x)                                          # (B, T, C)

    def forward(self, idx):
        return self.head(self.features(idx))                         # (B, T, V)

    def new_cache(self, batch_size, length=None):
        """Empty keys and values for decoding up to `length` positions (default block_size), one
        (keys, values) pair per layer in the parameters' precision: values (B, nh, length, hs),
        keys transposed, (B, nh, hs, length), so that q kᵀ reads them by rows. Attention reads
        only the positions already written."""
        c, hs = self.cfg, self.cfg.n_embd // self.cfg.n_head
        positive_int("batch_size", batch_size)
        length = c.block_size if length is None else min(positive_int("length", length), c.block_size)
        dtype = self.head.weight.dtype
        return Cache([(torch.empty(batch_size, c.n_head, hs, length, dtype=dtype),
                       torch.empty(batch_size, c.n_head, length, hs, dtype=dtype))
                      for _ in range(c.n_layer)], c)

    def prefill(self, idx, cache):
        """Feed a whole prefix idx (B, T) from position 0, filling the cache; the logits (B, V) of
        the token that follows it."""
        token_ids("the prefix idx", idx, self.cfg.vocab_size)
        return self.head(self.features(idx, cache)[:, -1])             # (B, V)

    def step(self, tokens, pos, cache, rows=None):
        """Logits (B, V) after feeding one token per sequence, tokens (B,), at position `pos`;
        with `rows` (a list of indices), only those sequences' logits (len(rows), V). Every
        sequence's keys and values are stored either way."""
        token_ids("tokens", tokens, self.cfg.vocab_size, ndim=1)
        row_indices("rows", rows, len(tokens))
        if cache is None:       # alone, the token would attend to itself only
            raise ValueError("step attends to the positions in the cache: give it the cache "
                             "(new_cache, one (keys, values) pair per layer), got None")
        x = self.features(tokens[:, None], cache, pos)[:, 0]                 # (B, C)
        return self.head(x if rows is None else x[rows])

    def check_positions(self, pos, T, cache=None, B=None):
        """Refuse positions pos .. pos+T-1 before 0, past block_size or past the cache's length,
        a token whose past the cache has not filled, a prefix fed into a cache after position 0,
        B sequences fed to a cache of another batch size, and a cache that is not this policy's
        (`check_cache`)."""
        if isinstance(pos, bool) or not isinstance(pos, int) or pos < 0:
            raise ValueError(f"pos must be a position, an int >= 0, got {pos!r}")
        if pos + T > self.cfg.block_size:
            raise ValueError(f"sequence length {pos + T} exceeds block_size {self.cfg.block_size}")
        if cache is None:
            return
        self.check_cache(cache)
        if pos > 0 and T > 1:
            raise ValueError("the cache takes a prefix at position 0 or one token at a time")
        if pos + T > cache[0][0].shape[-1]:
            raise ValueError(f"sequence length {pos + T} exceeds the cache's "
                             f"{cache[0][0].shape[-1]} positions (new_cache's `length`)")
        if pos > cache.filled:
            raise ValueError(f"position {pos} attends to positions the cache has not filled: it "
                             f"holds {cache.filled} (those before position {cache.filled}); feed "
                             f"a token at position {cache.filled} at most, or prefill a prefix")
        if B is not None and B != cache[0][0].shape[0]:
            raise ValueError(f"{B} sequences fed to a cache of {cache[0][0].shape[0]} "
                             f"(new_cache's `batch_size`)")

    def check_cache(self, cache, where="decoding"):
        """Refuse what is not a `Cache` of this policy's shapes: a plain list, another config's
        cache, one missing a layer, keys not transposed, another dtype or device than the
        parameters', layers that share a tensor, a fill past its length. `where` names the call
        in the refusal of what is not a Cache."""
        c, hs = self.cfg, self.cfg.n_embd // self.cfg.n_head
        Cache.check(where, cache)
        if cache.cfg != c:
            raise ValueError(f"the cache was made for another config ({cache.cfg}), not this "
                             f"policy's ({c}): make it with this policy's new_cache")
        if len(cache) != c.n_layer:
            raise ValueError(f"the cache must hold one (keys, values) pair per layer, "
                             f"{c.n_layer} layers, got {len(cache)}")
        dtype = self.head.weight.dtype
        B = cache[0][0].shape[0] if isinstance(cache[0], (tuple, list)) \
            and isinstance(cache[0][0], torch.Tensor) and cache[0][0].dim() else None
        L = layer_length("the cache's layer 0", cache[0], B, c.n_head, hs, dtype, CPU)
        for i, layer in enumerate(cache[1:], 1):
            if layer_length(f"the cache's layer {i}", layer, B, c.n_head, hs, dtype, CPU) != L:
                raise ValueError(f"the cache's layer {i} holds {layer[0].shape[-1]} positions, "
                                 f"layer 0 {L}: every layer alike, make the cache with "
                                 f"new_cache")
        if len({t.data_ptr() for layer in cache for t in layer}) < 2 * len(cache):
            raise ValueError("the cache's layers must each hold keys and values of their own; "
                             "some share one tensor (as [pair] * n_layer would), so a layer "
                             "would overwrite another's: make the cache with new_cache")
        if not (isinstance(cache.filled, int) and 0 <= cache.filled <= L):
            raise ValueError(f"the cache's filled must be an integer in [0, {L}], the positions "
                             f"it holds (new_cache's `length`), got {cache.filled!r}")

    def num_params(self):
        return sum(p.numel() for p in self.parameters())


# ------------------------------------------ the checks of a block's input and of a cache's layer

CPU = torch.device("cpu")       # where decoding's caches are (the engine's kernels read CPU memory)


def check_features(where, x, C):
    """Refuse x that is not a (B, T, C) tensor: the features a block or its attention reads."""
    if not isinstance(x, torch.Tensor) or x.dim() != 3 or x.shape[-1] != C:
        raise ValueError(f"{where}: x must be a tensor of features (B, T, C) with C = {C}, got "
                         f"{tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__}")


def layer_length(where, layer, B, n_head, hs, dtype, device, pos=None, T=1):
    """L, the positions of one layer's cache `layer`, a pair (keys (B, nh, hs, L), values
    (B, nh, L, hs)) of `dtype` tensors on `device` for B sequences and n_head heads of hs
    channels; with `pos`, also refuse T tokens at positions pos .. pos+T-1 outside it, and a
    prefix anywhere but at position 0. Otherwise an error naming `where` and what is allowed."""
    if isinstance(layer, Cache) or not isinstance(layer, (tuple, list)) or len(layer) != 2:
        raise ValueError(f"{where} must be one layer's pair (keys, values), such as cache[i] of "
                         f"a Cache, got a {type(layer).__name__}"
                         f"{f' of {len(layer)}' if isinstance(layer, (tuple, list)) else ''}: "
                         f"make the cache with new_cache")
    keys, values = layer
    for name, t in (("keys", keys), ("values", values)):
        if not isinstance(t, torch.Tensor) or t.device != device or t.dtype != dtype:
            got = f"{t.dtype} on {t.device.type}" if isinstance(t, torch.Tensor) \
                else f"a {type(t).__name__}"
            raise ValueError(f"{where}'s {name} must be {dtype} tensors on the {device.type}, as "
                             f"this policy's parameters, got {got}: make the cache with "
                             f"new_cache")
    L = keys.shape[-1] if keys.dim() == 4 else None
    if keys.shape != (B, n_head, hs, L) or values.shape != (B, n_head, L, hs):
        raise ValueError(f"{where} has keys {tuple(keys.shape)} and values "
                         f"{tuple(values.shape)}; this policy's config stores keys transposed, "
                         f"(B, nh, hs, L) = ({B}, {n_head}, {hs}, L), values ({B}, {n_head}, L, "
                         f"{hs}), for B = {B} sequences: make the cache with new_cache")
    if pos is not None and (isinstance(pos, bool) or not isinstance(pos, int) or pos < 0
                            or pos + T > L or (pos > 0 and T > 1)):
        raise ValueError(f"{where} holds {L} positions: pos must be an int >= 0 with pos + T "
                         f"<= {L} for T = {T} tokens, and a prefix (T > 1) goes at position 0; "
                         f"got pos={pos!r}")
    return L
