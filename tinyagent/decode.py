"""A rollout's one-token passes as a short list of kernel calls (`Policy.step` while
`Policy.fixed_weights` holds the weights' rows).

Through the modules, a one-token pass of the two-layer policy makes about 410 function calls as
cProfile counts them (module dispatch, `linear`'s checks, `_bmm` reading shapes and strides,
views), and a rollout makes about 36 such passes a step, so that for a batch of one episode the
calls cost more than the arithmetic. This pass makes about 160: it calls the same kernels, on the
same operands, in the same order: the embedding's addition, layer norm, the products with their
bias (the weights' rows and biases read once, when the weights are fixed), the key/value store
and one token's attention (kvcache.py), GELU's passes (gelu.c, with torch's erf), the residual
additions, and the head on the rows that sample. Each is the operator the modules would call, so
the bits are theirs (tests/test_decode.py); what is gone is the work around them.
"""
import torch
import torch.nn.functional as F

from . import kvcache
from .gelu import gelu_float32
from .matmul import _lib as _matmul


class OneTokenPass:
    """`Policy.step` for a float32 policy whose weights are fixed (`fixed_weights` builds it),
    on a float32 cache, without a gradient to record."""

    def __init__(self, policy):
        self.C = policy.cfg.n_embd
        self.wte, self.wpe = policy.wte.weight.detach(), policy.wpe.weight.detach()
        self.rows = []                        # the copies the addresses point into, kept alive

        def norm(ln):                         # F.layer_norm's arguments after the shape
            return ln.weight.detach(), ln.bias.detach(), ln.eps

        def product(layer):                   # (rows' address, bias's address, N, K)
            self.rows.append(layer.rows)
            return (layer.rows.data_ptr(), layer.bias.data_ptr(), *layer.rows.shape[::-1])
        self.layers = [(norm(b.ln_1), product(b.attn.qkv), product(b.attn.proj), norm(b.ln_2),
                        product(b.mlp.fc), product(b.mlp.proj)) for b in policy.blocks]
        self.ln_f, self.head = norm(policy.ln_f), product(policy.head)

    @staticmethod
    def applies(cache):
        """Whether this pass computes the step: no gradient to record, a float32 cache."""
        return not torch.is_grad_enabled() and kvcache.in_place(cache)

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
            kvcache.store(q_k_v, layer, pos)
            x += linear(kvcache.attend_one_token(q_k_v, layer, pos + 1)[:, 0], proj)
            h = linear(F.layer_norm(x, (C,), *ln_2), fc)                    # (B, 4C)
            x += linear(gelu_float32(h, keep_erf=False), fc_proj)
        x = F.layer_norm(x, (C,), *self.ln_f)
        return linear(x if rows is None else x[rows], self.head)
