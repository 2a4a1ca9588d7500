"""The policy's one-token pass of a rollout (`Policy.step` without a gradient) as a short list of
kernel calls.

Through modules, a one-token pass of the two-layer policy makes about 410 function calls (module
dispatch, argument checks, views), and a rollout makes about 36 such passes a step, so that for a
batch of one episode the calls cost more than the arithmetic. This pass makes about 160: the
embedding's addition, layer norm, the products with their bias (the weights' rows and biases read
once per set of weights), the key/value store and one token's attention (kvcache.py), GELU's
passes (c/gelu.c, with torch's erf), the residual additions, and the head on the rows that sample:
the operators of `Policy.step`, on the same operands in the same order, so the bits are those of
the same kernels called one by one (tests/test_token_pass.py).
"""
import torch
import torch.nn.functional as F

from . import kvcache
from .gelu import _gelu_float32 as gelu_float32    # unchecked (guard.py): `Decoder.step` checks
from .matmul import _lib as _matmul


class OneTokenPass:
    """`Policy.step` for a policy the kernels compute (`kernel_policy.KernelPolicy` builds it, and drops it
    when a weight changes), on a float32 cache, without a gradient to record."""

    def __init__(self, policy, weights):
        self.C = policy.cfg.n_embd
        self.wte, self.wpe = policy.wte.weight.detach(), policy.wpe.weight.detach()
        self.rows = []                        # what the addresses point into, kept alive

        def norm(ln):                         # F.layer_norm's arguments after the shape
            return ln.weight.detach(), ln.bias.detach(), ln.eps

        def product(layer):                   # (rows' address, bias's address, N, K)
            rows = weights.rows[layer]
            self.rows += [rows, layer.bias]
            return (rows.data_ptr(), layer.bias.data_ptr(), *rows.shape[::-1])
        self.layers = [(norm(b.ln_1), product(b.attn.qkv), product(b.attn.proj), norm(b.ln_2),
                        product(b.mlp.fc), product(b.mlp.proj)) for b in policy.blocks]
        self.ln_f, self.head = norm(policy.ln_f), product(policy.head)

    @staticmethod
    def _linear(x, weights):
        """x (B, K) contiguous @ rows (K, N) + bias, as `linear` computes it without a gradient."""
        rows, bias, N, K = weights
        out = torch.empty(x.shape[0], N, dtype=torch.float32)
        _matmul.bmm(1, 1, x.shape[0], N, K, x.data_ptr(), 0, 0, K, 1, rows, 0, 0, N, 1,
                    out.data_ptr(), 1.0, 0, bias)
        return out

    def __call__(self, tokens, pos, cache, rows=None):
        """Logits (B, V), or (len(rows), V), after feeding tokens (B,) at position `pos`."""
        C, linear = self.C, self._linear
        x = self.wte[tokens] + self.wpe[pos]                                   # (B, C)
        for (ln_1, qkv, proj, ln_2, fc, fc_proj), layer in zip(self.layers, cache):
            q_k_v = linear(F.layer_norm(x, (C,), *ln_1), qkv)[:, None]      # (B, 1, 3C)
            kvcache._store(q_k_v, layer, pos)
            x += linear(kvcache._attend_one_token(q_k_v, layer, pos + 1)[:, 0], proj)
            h = linear(F.layer_norm(x, (C,), *ln_2), fc)                    # (B, 4C)
            x += linear(gelu_float32(h, keep_erf=False), fc_proj)
        x = F.layer_norm(x, (C,), *self.ln_f)
        return linear(x if rows is None else x[rows], self.head)
