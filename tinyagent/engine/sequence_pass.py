"""The policy's pass over whole sequences (training's, the reference's, SFT's, and a rollout's
prompt into the cache) as a short list of kernel calls, with its gradient written out.

Through modules, one group's training pass records about 50 autograd nodes, 16 of them Python
functions (the products, the causal softmax, GELU) that autograd calls back under the
interpreter's lock. Here the forward calls the kernels in the modules' order (the embeddings'
sum, layer norm, the products with their bias, attention's scores, softmax and values, GELU, the
residual sums), and one autograd node, `_SequencePass`, holds what the backward needs. Its
backward calls what autograd would call for each operator, in autograd's order (a parameter's
gradient reaches it once per pass), so every gradient has the bits of the same kernels called one
by one (tests/test_sequence_pass.py). Where only some positions' features are read (`keep`: a
loss's tokens, a prompt's last), the last block computes the others up to its attention only,
whose keys and values the kept rows read.
"""
import math

import torch
import torch.nn.functional as F

from . import kvcache, matmul   # `matmul._bmm` looked up at each call: `make bench` counts it
# the unchecked kernels (guard.py): the pass hands them tensors it made itself
from .gelu import _gelu_backward as gelu_backward, _gelu_float32 as gelu_float32
from .matmul import _linear_backward as linear_backward, _matmul_backward as matmul_backward
from .matmul import _scores_backward as scores_backward
from .softmax import _softmax as softmax, softmax_backward


def features(policy, idx, weights, keep=None, cache=None):
    """`policy.features(idx)` (B, T, C) for a policy the kernels compute, `weights` its
    `weights.Weights`. With `keep` (B, T, bool), `policy.features(idx)[keep]` (n, C). With a
    `cache` (a prompt's pass from position 0, nothing to record), each layer's keys and values are
    stored in it, as `CausalSelfAttention` stores them. With a gradient to record, one autograd
    node; without, the forward alone."""
    kept = None if keep is None else _Kept(keep)
    if cache is None and torch.is_grad_enabled() and any(w.requires_grad for w in weights.ordered):
        return _SequencePass.apply(policy, weights.rows, idx, kept, *weights.ordered)
    return _forward(policy, weights.rows, idx, None, kept, cache)


def _layer_norm(x, ln, saved):
    """nn.LayerNorm's forward (its mean and 1/std kept for the backward)."""
    out, mean, rstd = torch.native_layer_norm(x, (x.shape[-1],), ln.weight, ln.bias, ln.eps)
    if saved is not None:
        saved += [x, mean, rstd]
    return out


def _linear(x, layer, weight_rows, saved):
    """nn.Linear's forward: x's rows times the weight's transpose (`weight_rows`, copied into
    rows), the bias added by the kernel."""
    rows = x.reshape(-1, x.shape[-1])
    if saved is not None:
        saved.append(rows)
    out = matmul._bmm(rows, weight_rows[layer], bias=layer.bias)
    return out.view(*x.shape[:-1], layer.weight.shape[0])


def _forward(policy, rows, idx, saved, kept=None, cache=None):
    """The modules' forward, operator for operator; with `saved` (a list), what the backward
    reads is appended to it, 16 tensors a block and 3 for the final layer norm. With `kept`, the
    last block's attention still runs over every position (its keys and values are read), but
    what follows it runs on the kept rows alone: past the last attention each row is computed
    on its own, and only the kept ones are read. In a GRPO batch that is under a third of them."""
    B, T = idx.shape
    C, nh = policy.cfg.n_embd, policy.cfg.n_head
    scale = 1.0 / math.sqrt(C // nh)
    last = policy.blocks[-1]
    x = F.embedding(idx, policy.wte.weight) + F.embedding(torch.arange(T), policy.wpe.weight)
    for i, block in enumerate(policy.blocks):
        attn = block.attn
        qkv = _linear(_layer_norm(x, block.ln_1, saved), attn.qkv, rows, saved)      # (B, T, 3C)
        if cache is not None:
            kvcache._store(qkv, cache[i], 0)
        q, k, v = (t.view(B, T, nh, C // nh).transpose(1, 2) for t in qkv.split(C, dim=2))
        p = softmax(matmul._bmm(q, k.transpose(-2, -1), scale, True), causal=True)
        y = matmul._bmm(p, v).transpose(1, 2).contiguous().view(B, T, C)
        if saved is not None:
            saved += [q, k, v, p]
        if kept is not None and block is last:
            x, y = kept.take(x), kept.take(y)                                  # (n, C)
        x = x + _linear(y, attn.proj, rows, saved)
        h = _linear(_layer_norm(x, block.ln_2, saved), block.mlp.fc, rows, saved)      # (B, T, 4C)
        if saved is None:
            g = gelu_float32(h, keep_erf=False)
        else:
            g, e = gelu_float32(h)
            saved += [h, e]
        x = x + _linear(g, block.mlp.proj, rows, saved)
    return _layer_norm(x, policy.ln_f, saved)


class _Kept:
    """The positions of a (B, T) batch whose features are read: `keep`'s True entries."""

    def __init__(self, keep):
        self.shape, self.index = keep.shape, keep.reshape(-1).nonzero()[:, 0]

    def take(self, t):
        """The kept rows (n, ...) of t (B, T, ...), in row-major order."""
        return t.flatten(0, 1).index_select(0, self.index)

    def among_zeros(self, rows):
        """The kept rows (n, ...) put back at their positions (B, T, ...), zeros elsewhere: the
        gradient of a row that nothing reads."""
        full = rows.new_zeros(self.shape.numel(), *rows.shape[1:])
        return full.index_copy_(0, self.index, rows).view(*self.shape, *rows.shape[1:])


def _layer_norm_backward(grad, x, mean, rstd, ln, kept=None):
    """The gradients of x, the weight and the bias: what autograd's node for layer norm calls.
    With `kept`, the arguments hold the kept rows only; they are put back among zero rows, so
    that the weight's and the bias's sums run over the rows the modules sum (ATen shares those
    rows between threads by their number), the others adding exact zeros."""
    if kept is not None:
        grad, x, mean, rstd = (kept.among_zeros(t) for t in (grad, x, mean, rstd))
    dx, dw, db = torch.ops.aten.native_layer_norm_backward(grad, x, [x.shape[-1]], mean, rstd,
                                                           ln.weight, ln.bias, [True, True, True])
    return (dx if kept is None else kept.take(dx)), dw, db


def _linear_backward(grad, rows, layer, kept=None):
    """`linear_backward` for `layer`; with `kept`, grad holds the kept rows only, and the bias's
    gradient (torch's sum over rows) is summed over every position, the others adding zeros."""
    if kept is None:
        return linear_backward(grad, rows, layer.weight)
    dx, dw, _ = linear_backward(grad, rows, layer.weight, (True, True, False))
    return dx, dw, kept.among_zeros(grad).sum((0, 1))


class _SequencePass(torch.autograd.Function):
    @staticmethod
    def forward(ctx, policy, rows, idx, kept, *weights):
        saved = []
        out = _forward(policy, rows, idx, saved, kept)
        ctx.policy, ctx.kept = policy, kept
        ctx.save_for_backward(idx, *saved)     # autograd's checks: no second backward without
        return out                             # retain_graph, no tensor changed in place since

    @staticmethod
    def backward(ctx, grad):
        """Each block's operators backwards, as autograd's nodes compute them. Where a tensor
        feeds two operators (a residual stream), its two gradients are added: one sum of two
        terms, whose bits do not depend on their order. With `kept`, the last block's rows past
        its attention are the kept ones (the others' gradient is zero, and a zero row adds exact
        zeros to a product's sums over rows, which start at +0: only a sum that underflowed to -0
        could keep that sign), put back among zeros for its attention."""
        policy, kept, (idx, *saved) = ctx.policy, ctx.kept, ctx.saved_tensors
        B, T = idx.shape
        C, nh = policy.cfg.n_embd, policy.cfg.n_head
        grads = []                                  # (bias, weight), from the last layer back
        dx, dw, db = _layer_norm_backward(grad, *saved[-3:], policy.ln_f, kept)
        grads += [db, dw]
        for i, block in reversed(list(enumerate(policy.blocks))):
            (x1, mean1, rstd1, h1, q, k, v, p, y,
             x2, mean2, rstd2, h2, h, e, g) = saved[16 * i:16 * (i + 1)]
            rows = kept if block is policy.blocks[-1] else None     # past its attention
            dg, dw, db = _linear_backward(dx, g, block.mlp.proj, rows)
            grads += [db, dw]
            dh2, dw, db = _linear_backward(gelu_backward(dg, h, e), h2, block.mlp.fc, rows)
            grads += [db, dw]
            dx2, dw, db = _layer_norm_backward(dh2, x2, mean2, rstd2, block.ln_2, rows)
            grads += [db, dw]
            dx = dx + dx2
            dy, dw, db = _linear_backward(dx, y, block.attn.proj, rows)
            grads += [db, dw]
            if rows is not None:
                dx, dy = rows.among_zeros(dx), rows.among_zeros(dy)
            dp, dv = matmul_backward(dy.view(B, T, nh, C // nh).transpose(1, 2), p, v)
            dq, dk = scores_backward(softmax_backward(dp, p), q, k, 1.0 / math.sqrt(C // nh),
                                     True)
            dqkv = torch.cat([t.transpose(1, 2).reshape(B, T, C) for t in (dq, dk, dv)], 2)
            dh1, dw, db = linear_backward(dqkv, h1, block.attn.qkv.weight)
            grads += [db, dw]
            dx1, dw, db = _layer_norm_backward(dh1, x1, mean1, rstd1, block.ln_1)
            grads += [db, dw]
            dx = dx + dx1
        # x = wte(idx) + wpe(arange(T)): the second term broadcast over the batch, so its
        # gradient is summed over it, as autograd's sum_to does
        grad_wpe = torch.ops.aten.embedding_dense_backward(
            dx.sum(0, keepdim=True).view(T, C), torch.arange(T), policy.wpe.weight.shape[0], -1,
            False)
        grad_wte = torch.ops.aten.embedding_dense_backward(dx, idx, policy.wte.weight.shape[0],
                                                           -1, False)
        return (None, None, None, None, grad_wte, grad_wpe, *reversed(grads))
