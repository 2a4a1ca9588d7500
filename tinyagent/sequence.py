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

from .gelu import ERF_SCALE, ERF_SLOPE, gelu_float32, _lib as _gelu
from .matmul import _bmm, _lib as _matmul
from .softmax import _causal


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
    out, mean, rstd = torch.native_layer_norm(x, (x.shape[-1],), ln.weight, ln.bias, ln.eps)
    if saved is not None:
        saved += [x, mean, rstd]
    return out


def _linear(x, layer, saved):
    rows = x.reshape(-1, x.shape[-1])
    if saved is not None:
        saved.append(rows)
    return _bmm(rows, _rows(layer), bias=layer.bias).view(*x.shape[:-1], layer.weight.shape[0])


def _forward(policy, idx, saved):
    """The modules' forward, operator for operator; with `saved` (a list), what the backward
    reads is appended to it."""
    B, T = idx.shape
    C, nh = policy.cfg.n_embd, policy.cfg.n_head
    hs = C // nh
    scale = 1.0 / math.sqrt(hs)
    x = F.embedding(idx, policy.wte.weight) + F.embedding(torch.arange(T), policy.wpe.weight)
    for block in policy.blocks:
        attn = block.attn
        qkv = _linear(_layer_norm(x, block.ln_1, saved), attn.qkv, saved)        # (B, T, 3C)
        q, k, v = (t.view(B, T, nh, hs).transpose(1, 2) for t in qkv.split(C, dim=2))
        att = _bmm(q, k.transpose(-2, -1), scale, True)                           # (B, nh, T, T)
        p = _causal(att)                              # the causal softmax (softmax.py)
        if p is None:                                 # not built: a CPU without AVX2
            p = torch.softmax(att, -1)
        y = _bmm(p, v).transpose(1, 2).contiguous().view(B, T, C)
        if saved is not None:
            saved += [q, k, v, p]
        x = x + _linear(y, attn.proj, saved)
        h = _linear(_layer_norm(x, block.ln_2, saved), block.mlp.fc, saved)        # (B, T, 4C)
        if saved is None:
            g = gelu_float32(h, keep_erf=False)
        else:
            g, e = gelu_float32(h)
            saved += [h, e]
        x = x + _linear(g, block.mlp.proj, saved)
    return _layer_norm(x, policy.ln_f, saved)


def _layer_norm_backward(grad, saved, ln, needs):
    x, mean, rstd = saved
    return torch.ops.aten.native_layer_norm_backward(grad, x, [x.shape[-1]], mean, rstd,
                                                     ln.weight, ln.bias, needs)


def _linear_backward(grad, rows, layer):
    """_Linear.backward: the bias's gradient summed from the gradient as it arrives, the input's
    and the weight's by the kernel."""
    grad_bias = grad.sum(tuple(range(grad.dim() - 1)))
    flat = grad.reshape(-1, grad.shape[-1])
    grad_x = _bmm(flat, layer.weight).view(*grad.shape[:-1], layer.weight.shape[1])
    return grad_x, _bmm(flat.t(), rows), grad_bias


def _gelu_backward(grad, h, e):
    """_GELU.backward."""
    grad = grad.contiguous()
    m = torch.empty_like(h)
    _gelu.gelu_exp_argument(h.numel(), h.data_ptr(), ERF_SCALE, m.data_ptr())
    expm = torch.exp(m)
    gh = torch.empty_like(h)
    _gelu.gelu_backward(h.numel(), h.data_ptr(), e.data_ptr(), expm.data_ptr(), grad.data_ptr(),
                        ERF_SCALE, ERF_SLOPE, gh.data_ptr())
    return gh


def _attention_backward(grad, q, k, v, p, scale):
    """The gradients of q, k and v (B, nh, T, hs) from y's (B, nh, T, hs): _MatMul's, the
    softmax's and _Scores' backward."""
    grad_p = _bmm(grad, v.transpose(-2, -1))
    grad_v = _bmm(p.transpose(-2, -1), grad)
    grad_att = torch._softmax_backward_data(grad_p, p, -1, p.dtype).contiguous()
    g = torch.empty_like(grad_att)
    _matmul.scores_grad(grad_att.numel() // (grad_att.shape[-2] * grad_att.shape[-1]),
                        grad_att.shape[-2], grad_att.shape[-1], grad_att.data_ptr(), g.data_ptr(),
                        scale, True)
    return _bmm(g, k), _bmm(g.transpose(-2, -1), q), grad_v


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
        policy, (idx, *saved) = ctx.policy, ctx.saved_tensors
        B, T = idx.shape
        C, nh = policy.cfg.n_embd, policy.cfg.n_head
        hs = C // nh
        needs = [True, True, True]
        grads = []                                  # (weight, bias) pairs, last layer first
        dx, dw, db = _layer_norm_backward(grad, saved[-3:], policy.ln_f, needs)
        grads += [db, dw]
        at = len(saved) - 3
        for block in reversed(policy.blocks):
            (x1, mean1, rstd1, h1_rows, q, k, v, p, y_rows,
             x2, mean2, rstd2, h2_rows, h, e, g_rows) = saved[at - 16:at]
            at -= 16
            dg, dw, db = _linear_backward(dx, g_rows, block.mlp.proj)
            grads += [db, dw]
            dh2, dw, db = _linear_backward(_gelu_backward(dg, h, e), h2_rows, block.mlp.fc)
            grads += [db, dw]
            dx2, dw, db = _layer_norm_backward(dh2, (x2, mean2, rstd2), block.ln_2, needs)
            grads += [db, dw]
            dx = dx + dx2
            dy, dw, db = _linear_backward(dx, y_rows, block.attn.proj)
            grads += [db, dw]
            dq, dk, dv = _attention_backward(dy.view(B, T, nh, hs).transpose(1, 2), q, k, v, p,
                                             1.0 / math.sqrt(hs))
            dqkv = torch.cat([t.transpose(1, 2).reshape(B, T, C) for t in (dq, dk, dv)], 2)
            dh1, dw, db = _linear_backward(dqkv, h1_rows, block.attn.qkv)
            grads += [db, dw]
            dx1, dw, db = _layer_norm_backward(dh1, (x1, mean1, rstd1), block.ln_1, needs)
            grads += [db, dw]
            dx = dx + dx1
        grad_wpe = torch.ops.aten.embedding_dense_backward(
            dx.sum(0, keepdim=True).view(T, C), torch.arange(T), policy.wpe.weight.shape[0], -1,
            False)
        grad_wte = torch.ops.aten.embedding_dense_backward(dx, idx, policy.wte.weight.shape[0], -1,
                                                           False)
        return (None, None, grad_wte, grad_wpe, *reversed(grads))
