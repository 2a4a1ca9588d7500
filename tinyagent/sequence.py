"""A pass over whole sequences (`Policy.features` without a cache) as a short list of kernel
calls, with its gradient written out.

Through the modules, one group's training pass records about 50 autograd nodes, 16 of them
Python functions (the products, the causal softmax, GELU) that the engine calls back with the
interpreter's lock, and a step makes 8 such passes and 8 more for the reference. Here the forward
calls the same kernels on the same operands in the same order (the embeddings' sum, layer norm,
the products with their bias, attention's scores, softmax and values, GELU, the residual sums),
and one autograd node, `_SequencePass`, holds what the backward needs. Its backward calls what
autograd would call for each of them, in the order the engine would (the gradients of a
parameter reach it once per pass, as before), so every gradient has autograd's bits
(tests/test_sequence.py); what is gone is the bookkeeping around them. The modules stay the
definition; this pass is how a float32 policy computes it.
"""
import math

import torch
import torch.nn.functional as F

from . import matmul       # `matmul._bmm` looked up at each call, so that `make bench` counts
from .gelu import gelu_backward, gelu_float32
from .matmul import linear_backward, matmul_backward, scores_backward
from .softmax import softmax, softmax_backward


def _rows(layer):
    """A linear layer's weight transposed, (in, out): its copy in rows while the weights are
    fixed (`Policy.fixed_weights`), else a view that the kernel copies into rows."""
    return layer.weight.t() if layer.rows is None else layer.rows


def features(policy, idx, weights):
    """`policy.features(idx)` (B, T, C) for a float32 policy whose modules are the ones
    `Policy.plain_weights` vouches for, `weights` being their parameters in the order
    `_SequencePass` takes them (the two embeddings, each block's 12, the final layer norm's 2).
    With a gradient to record, one autograd node; without, the forward alone."""
    if torch.is_grad_enabled() and any(w.requires_grad for w in weights):
        return _SequencePass.apply(policy, idx, *weights)
    return _forward(policy, idx, None)


def _layer_norm(x, ln, saved):
    """nn.LayerNorm's forward (its mean and 1/std kept for the backward)."""
    out, mean, rstd = torch.native_layer_norm(x, (x.shape[-1],), ln.weight, ln.bias, ln.eps)
    if saved is not None:
        saved += [x, mean, rstd]
    return out


def _linear(x, layer, saved):
    """`Linear`'s forward: x's rows times the weight's transpose, the bias added by the kernel."""
    rows = x.reshape(-1, x.shape[-1])
    if saved is not None:
        saved.append(rows)
    out = matmul._bmm(rows, _rows(layer), bias=layer.bias)
    return out.view(*x.shape[:-1], layer.weight.shape[0])


def _forward(policy, idx, saved):
    """The modules' forward, operator for operator; with `saved` (a list), what the backward
    reads is appended to it, 16 tensors a block and 3 for the final layer norm."""
    B, T = idx.shape
    C, nh = policy.cfg.n_embd, policy.cfg.n_head
    scale = 1.0 / math.sqrt(C // nh)
    x = F.embedding(idx, policy.wte.weight) + F.embedding(torch.arange(T), policy.wpe.weight)
    for block in policy.blocks:
        attn = block.attn
        qkv = _linear(_layer_norm(x, block.ln_1, saved), attn.qkv, saved)      # (B, T, 3C)
        q, k, v = (t.view(B, T, nh, C // nh).transpose(1, 2) for t in qkv.split(C, dim=2))
        p = softmax(matmul._bmm(q, k.transpose(-2, -1), scale, True), causal=True)
        y = matmul._bmm(p, v).transpose(1, 2).contiguous().view(B, T, C)
        if saved is not None:
            saved += [q, k, v, p]
        x = x + _linear(y, attn.proj, saved)
        h = _linear(_layer_norm(x, block.ln_2, saved), block.mlp.fc, saved)      # (B, T, 4C)
        if saved is None:
            g = gelu_float32(h, keep_erf=False)
        else:
            g, e = gelu_float32(h)
            saved += [h, e]
        x = x + _linear(g, block.mlp.proj, saved)
    return _layer_norm(x, policy.ln_f, saved)


def _layer_norm_backward(grad, x, mean, rstd, ln):
    """The gradients of x, the weight and the bias: what autograd's node for layer norm calls."""
    return torch.ops.aten.native_layer_norm_backward(grad, x, [x.shape[-1]], mean, rstd,
                                                     ln.weight, ln.bias, [True, True, True])


class _SequencePass(torch.autograd.Function):
    @staticmethod
    def forward(ctx, policy, idx, *weights):
        saved = []
        out = _forward(policy, idx, saved)
        ctx.policy = policy
        ctx.save_for_backward(idx, *saved)     # autograd's checks: no second backward without
        return out                             # retain_graph, no tensor changed in place since

    @staticmethod
    def backward(ctx, grad):
        """Each block's operators backwards, as autograd's nodes compute them. Where a tensor
        feeds two operators (a residual stream), its two gradients are added: one sum of two
        terms, whose bits do not depend on their order."""
        policy, (idx, *saved) = ctx.policy, ctx.saved_tensors
        B, T = idx.shape
        C, nh = policy.cfg.n_embd, policy.cfg.n_head
        grads = []                                  # (bias, weight), from the last layer back
        dx, dw, db = _layer_norm_backward(grad, *saved[-3:], policy.ln_f)
        grads += [db, dw]
        for i, block in reversed(list(enumerate(policy.blocks))):
            (x1, mean1, rstd1, h1, q, k, v, p, y,
             x2, mean2, rstd2, h2, h, e, g) = saved[16 * i:16 * (i + 1)]
            dg, dw, db = linear_backward(dx, g, block.mlp.proj.weight)
            grads += [db, dw]
            dh2, dw, db = linear_backward(gelu_backward(dg, h, e), h2, block.mlp.fc.weight)
            grads += [db, dw]
            dx2, dw, db = _layer_norm_backward(dh2, x2, mean2, rstd2, block.ln_2)
            grads += [db, dw]
            dx = dx + dx2
            dy, dw, db = linear_backward(dx, y, block.attn.proj.weight)
            grads += [db, dw]
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
        return (None, None, grad_wte, grad_wpe, *reversed(grads))
