"""The policy as the kernels compute it: `KernelPolicy` answers the calls `Policy` answers
(`features`, `head`, `prefill`, `step`) and a rollout's `compact`, with the engine's passes, from
the policy's own parameters. The seam (__init__.py) makes one for each policy the kernels may
compute (`weights.why_not`) and keeps it while it is `current`, or its weights' values alone
changed (`refresh`).

Each call checks its tokens, positions, rows and cache once, as `Policy` does, before any kernel
runs: the kernels write where the cache says.
"""
import torch

from ..checks import row_indices, token_ids
from . import guard, kvcache, sequence_pass
from .matmul import linear
from .token_pass import OneTokenPass
from .weights import Weights


class KernelPolicy:
    """`policy`'s function on the kernels. Its rows are read once (weights.Weights); a rollout's
    one-token pass is built at its first step."""

    def __init__(self, policy):
        self.policy, self.weights = policy, Weights(policy)
        self.token_pass = None

    def current(self, policy):
        """Whether this is still `policy` as it is: no parameter, module or hook changed."""
        return self.weights.current(policy)

    def refresh(self):
        """After an optimizer's step, the same form with the new weights' rows (and its one-token
        pass, which reads their addresses, built again at the next step): True. False where more
        than the values changed, which takes a new form (`weights.Weights.refresh`)."""
        if not self.weights.refresh():
            return False
        self.token_pass = None
        return True

    def computes(self, cache):
        """Whether the kernels compute a decoding call on `cache` now: without a gradient to
        record, into a float32 cache they can write in place. Otherwise the modules do."""
        return not torch.is_grad_enabled() and kvcache.in_place(cache)

    def features(self, idx, keep=None):
        """`policy.features(idx)` (B, T, C); with `keep`, a bool (B, T), `features[keep]` (n, C),
        without computing the rows nothing reads."""
        token_ids("idx", idx, self.policy.cfg.vocab_size, empty=True)
        if keep is not None:
            guard.position_mask(idx, keep)
        if not idx.numel():
            out = self.policy.features(idx)
            return out if keep is None else out[keep]
        self.policy.check_positions(0, idx.shape[1])
        return sequence_pass.features(self.policy, idx, self.weights, keep)

    def head(self, x):
        """`policy.head(x)`: the logits (..., V) of features x (..., C) (`linear` checks x)."""
        layer = self.policy.head
        return linear(x, layer.weight, layer.bias, self.weights.rows[layer])

    def prefill(self, idx, cache):
        """`policy.prefill(idx, cache)`, the prompt's pass computing the last position's head
        only."""
        token_ids("the prefix idx", idx, self.policy.cfg.vocab_size)
        self.policy.check_positions(0, idx.shape[1], cache, idx.shape[0])
        last = torch.zeros(idx.shape, dtype=torch.bool)
        last[:, -1] = True
        x = sequence_pass.features(self.policy, idx, self.weights, last, cache)      # (B, C)
        cache.filled = idx.shape[1]                     # the Cache counts its positions
        head = self.policy.head
        return linear(x, head.weight, head.bias, self.weights.rows[head])           # (B, V)

    def step(self, tokens, pos, cache, rows=None):
        """`policy.step(tokens, pos, cache, rows)` by the one-token pass."""
        token_ids("tokens", tokens, self.policy.cfg.vocab_size, ndim=1)
        row_indices("rows", rows, len(tokens))
        self.policy.check_positions(pos, 1, cache, len(tokens))
        if self.token_pass is None:
            self.token_pass = OneTokenPass(self.policy, self.weights)
        logits = self.token_pass(tokens, pos, cache, rows)
        cache.filled = pos + 1
        return logits

    def compact(self, cache, keep, length):
        """The cache of the sequences `keep` only, the kept rows moved up in place (kvcache.py
        checks `keep` and `length`; the Decoder, that the cache is this policy's)."""
        return kvcache.compact(cache, keep, length)
