"""Attention's softmax over a prefix's causal scores, with torch's bits, computed in C only where
the mask leaves entries (softmax.c).

A full pass's scores are T x T per head with the future at -inf, so torch's softmax spends about
half its exponentials on exp(-inf) = 0. softmax.c computes each row as ATen's CPU kernel does,
skipping the vectors that hold only masked entries, which add exact zeros (tests/test_softmax.py
compares the bits with torch's, forward and backward). Rows without a mask (one token's scores
over its cache) are torch's own: there is nothing to skip. Where autograd records the pass, the
gradient is torch's softmax backward.
"""
import torch
import torch.nn.functional as F

from . import guard
from .kernels import load

_lib = load("causal softmax")


def _causal(x):
    """softmax(x) of contiguous float32 T x T causal scores, or None where softmax.c is not
    built (a CPU without AVX2)."""
    y = torch.empty_like(x)
    n = x.shape[-1]
    return y if _lib.causal_softmax(x.numel() // n, n, x.data_ptr(), y.data_ptr()) else None


class _CausalSoftmax(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        y = _causal(x)
        if y is None:
            y = torch.softmax(x, -1)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad):
        return softmax_backward(grad, *ctx.saved_tensors)


def softmax_backward(grad, y):
    """The gradient of the scores from the softmax's output y and its `grad`: torch's."""
    return torch._softmax_backward_data(grad, y, -1, y.dtype)


def softmax(att, causal=False):
    """softmax(att) over its last dimension, with `F.softmax`'s bits. With `causal`, att's last
    two dimensions are square and every entry above their diagonal is already -inf (attention's
    scores over a prefix, `matmul.scores`); those come out 0, as from torch, without being
    computed, so scores without that mask are refused. A dense floating-point CPU tensor."""
    guard.tensor("softmax", "att", att, dtype=None)
    if causal and att.dim() >= 2 and att.shape[-1] == att.shape[-2]:
        above = torch.ones(att.shape[-2:], dtype=torch.bool).triu(1)
        if not torch.isneginf(att.detach()[..., above]).all():
            raise ValueError("softmax: with causal=True every entry of att above the diagonal of "
                             "its last two dimensions must be -inf (the mask of "
                             "matmul.scores(q, k, causal=True)), and some is not: mask it, or "
                             "pass causal=False")
    return _softmax(att, causal)


def _softmax(att, causal=False):
    """`softmax` of an att already checked (the engine's own passes)."""
    if not causal or att.dtype != torch.float32 or not att.is_contiguous() or att.numel() == 0 \
            or att.dim() < 2 or att.shape[-1] != att.shape[-2]:
        return F.softmax(att, dim=-1)
    if torch.is_grad_enabled() and att.requires_grad:
        return _CausalSoftmax.apply(att)
    y = _causal(att)
    return F.softmax(att, dim=-1) if y is None else y
