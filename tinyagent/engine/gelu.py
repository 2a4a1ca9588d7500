"""The exact GELU, x·Φ(x) = 0.5 · x · (1 + erf(x / √2)), computed from erf.

F.gelu runs oneDNN code chosen by the CPU, so the policy writes GELU from erf. Written as torch
expressions, that is five operators forward and nine more in autograd's backward, each a pass
over a (tokens, 264) tensor. Here the additions and multiplications between erf and exp are one
pass of C each (gelu.c), in torch's order and precision, so the bits are the torch expression's
(tests/test_gelu.py checks forward and gradient).
"""
import torch

from . import guard
from .kernels import load

ERF_SCALE = 0.7071067811865476        # 1/√2
ERF_SLOPE = 1.1283791670955126        # 2/√π: erf'(u) = 2/√π · exp(-u²), as autograd writes it

_lib = load("GELU kernel")


def gelu_expression(x):
    """The definition as torch expressions: what `gelu` computes, bit for bit."""
    return 0.5 * x * (1.0 + torch.erf(x * ERF_SCALE))


def gelu_float32(x, keep_erf=True):
    """GELU of a contiguous float32 x, and erf(x/√2), which the gradient needs (without
    `keep_erf`, GELU is written over it and returned alone)."""
    guard.tensor("gelu_float32", "x", x, contiguous=True)
    return _gelu_float32(x, keep_erf)


def _gelu_float32(x, keep_erf=True):
    """`gelu_float32` of an x already checked (the engine's own passes)."""
    e = torch.empty_like(x)
    _lib.gelu_erf_argument(x.numel(), x.data_ptr(), ERF_SCALE, e.data_ptr())
    torch.erf(e, out=e)                                       # in place: the same bits
    y = torch.empty_like(x) if keep_erf else e
    _lib.gelu_forward(x.numel(), x.data_ptr(), e.data_ptr(), y.data_ptr())
    return (y, e) if keep_erf else y


class _GELU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        y, e = _gelu_float32(x)
        ctx.save_for_backward(x, e)
        return y

    @staticmethod
    def backward(ctx, grad):
        return _gelu_backward(grad, *ctx.saved_tensors)


def gelu_backward(grad, x, e):
    """The gradient of x from GELU's `grad`, with e = erf(x/√2) from `gelu_float32`: three
    float32 tensors of one shape, x and e contiguous."""
    guard.tensor("gelu_backward", "grad", grad)
    guard.tensor("gelu_backward", "x", x, contiguous=True)
    guard.tensor("gelu_backward", "e", e, contiguous=True)
    guard.shape("gelu_backward", "grad", grad, x.shape, " (x's)")
    guard.shape("gelu_backward", "e", e, x.shape, " (x's)")
    return _gelu_backward(grad, x, e)


def _gelu_backward(grad, x, e):
    """`gelu_backward` of operands already checked (the engine's own passes)."""
    grad = grad.contiguous()
    m = torch.empty_like(x)
    _lib.gelu_exp_argument(x.numel(), x.data_ptr(), ERF_SCALE, m.data_ptr())
    expm = torch.exp(m)
    gx = torch.empty_like(x)
    _lib.gelu_backward(x.numel(), x.data_ptr(), e.data_ptr(), expm.data_ptr(), grad.data_ptr(),
                       ERF_SCALE, ERF_SLOPE, gx.data_ptr())
    return gx


def gelu(x):
    """GELU of x, elementwise, with the bits of `gelu_expression` (another precision than the
    policy's float32 gets the expression itself). A dense floating-point CPU tensor."""
    guard.tensor("gelu", "x", x, dtype=None)
    if x.dtype != torch.float32:
        return gelu_expression(x)
    x = x.contiguous()
    if torch.is_grad_enabled() and x.requires_grad:
        return _GELU.apply(x)
    return _gelu_float32(x, keep_erf=False)
