"""Matrix products whose bits do not depend on the CPU.

BLAS libraries pick their kernels and blocking by the CPU they find; under MKL's reproducibility
branch the policy's forward pass still matched across Intel and AMD, but its first optimizer step
did not. So every product the policy computes (its linear layers and attention, forward and
backward) goes through one small C kernel (matmul.c) that sums each element over k in a fixed
order with fused multiply-adds. Its bits depend only on its operands. The kernel also finishes
what follows a product, in the same pass and with torch's bits: attention's scale and causal mask
(`scores`), and a linear layer's bias (`linear`).
"""
import math

import torch

from ..checks import env_flag
from . import guard
from .kernels import load

_lib = load("matrix kernel")
PATHS = {"fastest": 0, "scalar": 1, "avx2": 2, "avx512": 3}
# Switched on (1, yes, on, true), the kernel computes as on a CPU without AVX-512 (AMD Zen 3, many
# Intel laptops) on one that has it: every path asked for is capped at AVX2, "fastest" included.
# `make test` under it checks the promise "with or without AVX-512" on a machine that has AVX-512.
IMITATE_NO_AVX512 = "TINYAGENT_IMITATE_NO_AVX512"
IMITATING_NO_AVX512 = env_flag(IMITATE_NO_AVX512, False)
_CEILING = PATHS["avx2"] if IMITATING_NO_AVX512 else PATHS["avx512"]    # the fastest path allowed


def use_path(name):
    """Make the kernel compute on one path ("scalar", "avx2", "avx512", or "fastest", the default)
    and return the one in force (a path this CPU lacks, or the imitation forbids, falls back
    to the fastest below it): all give the same bits, which the tests show this way."""
    if name not in PATHS:
        raise ValueError(f"unknown path {name!r}; allowed: {', '.join(PATHS)}")
    in_force = _lib.matmul_path(min(PATHS[name] or _CEILING, _CEILING))
    return next(n for n, code in PATHS.items() if code == in_force)


if IMITATING_NO_AVX512:
    use_path("fastest")


def _bmm(a, b, scale=1.0, causal=False, bias=None):
    """a (..., M, K) @ b (..., K, N) -> contiguous (..., M, N) through the C kernel, float32, no
    autograd, for a and b of one number of dimensions, at most 4 (two leading ones, equal). Both
    are read through their strides, so a transposed view (a weight in `linear`) costs no copy in
    Python. Each product is then multiplied by `scale` (rounded to float32, as torch does) and,
    with `causal`, its elements above the diagonal set to -inf: attention's scores. A contiguous
    float32 `bias` (N,) is added to every row, as torch's `+` adds it: a linear layer's. A 2-D b
    with a contiguous a of another number of dimensions, (..., K), is one matrix for all of a's
    rows. Plain indexing, no views: a run calls it ~900 times a step, most on one token's rows."""
    shape, sa, sb = a.shape, a.stride(), b.stride()
    n = len(shape)                                  # leading dimensions: n - 2, read as (n1, n2)
    if len(sb) == 2 != n:                           # a's rows, (rows, K), times one b
        n1 = n2 = 1
        sa1 = sa2 = sb1 = sb2 = 0
        M, sam = math.prod(shape[:-1]), shape[-1]
    else:
        n1, sa1, sb1 = (shape[0], sa[0], sb[0]) if n == 4 else (1, 0, 0)
        n2, sa2, sb2 = (shape[n - 3], sa[n - 3], sb[n - 3]) if n > 2 else (1, 0, 0)
        M, sam = shape[-2], sa[-2]
    out = torch.empty((*shape[:-1], b.shape[-1]), dtype=torch.float32)
    _lib.bmm(n1, n2, M, b.shape[-1], shape[-1], a.data_ptr(), sa1, sa2, sam, sa[-1],
             b.data_ptr(), sb1, sb2, sb[-2], sb[-1], out.data_ptr(), scale, causal,
             None if bias is None else bias.data_ptr())
    return out


class _MatMul(torch.autograd.Function):
    """a (..., M, K) @ b (..., K, N); both gradients are products through the same kernel."""

    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return _bmm(a, b)

    @staticmethod
    def backward(ctx, grad):
        return _matmul_backward(grad, *ctx.saved_tensors, ctx.needs_input_grad)


def matmul_backward(grad, a, b, needs=(True, True)):
    """The gradients of a and b in a @ b from the product's `grad`, each by the kernel (None
    where `needs` says no): a (..., M, K) and b (..., K, N) of one number of dimensions, at most
    4, and grad (..., M, N), all float32."""
    where = "matmul_backward"
    for name, t in (("grad", grad), ("a", a), ("b", b)):
        guard.tensor(where, name, t, ndim=(2, 3, 4))
    if a.dim() != b.dim() or a.shape[:-2] != b.shape[:-2] or a.shape[-1] != b.shape[-2]:
        raise ValueError(f"{where}: a (..., M, K) and b (..., K, N) with equal leading "
                         f"dimensions, got shapes {tuple(a.shape)} and {tuple(b.shape)}")
    guard.shape(where, "grad", grad, (*a.shape[:-1], b.shape[-1]), " (the product's)")
    _check_sizes(where, grad, a.shape[-1])
    return _matmul_backward(grad, a, b, needs)


def _matmul_backward(grad, a, b, needs=(True, True)):
    """`matmul_backward` on operands already checked (the engine's own passes)."""
    return (_bmm(grad, b.transpose(-2, -1)) if needs[0] else None,
            _bmm(a.transpose(-2, -1), grad) if needs[1] else None)


def matmul(a, b):
    """a (..., M, K) @ b (..., K, N), the leading dimensions equal; b may also be a single (K, N)
    matrix shared by every row of a. Float32 (the policy's precision) goes through the kernel; a
    copy of the policy in another precision (float64, bfloat16: to compare samplers) gets torch's
    own product, whose bits are the library's. Both are dense floating-point CPU tensors of at
    least two dimensions; every size below 2**31."""
    if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor):
        raise TypeError(f"matmul: the operands must be tensors, got {type(a).__name__} @ "
                        f"{type(b).__name__}")
    guard.tensor("matmul", "a", a, dtype=None)
    guard.tensor("matmul", "b", b, dtype=None)
    if a.dim() < 1 or b.dim() < 2:
        raise ValueError(f"matmul: a of at least 1 and b of at least 2 dimensions, (..., K) @ "
                         f"(K, N) or (..., M, K) @ (..., K, N), got {a.dim()} and {b.dim()} "
                         f"dimensions, shapes {tuple(a.shape)} and {tuple(b.shape)}")
    if a.dtype != b.dtype:
        raise TypeError(f"matmul: operands of one dtype, got {a.dtype} @ {b.dtype}")
    if a.dtype != torch.float32:
        return torch.matmul(a, b)
    if a.shape[-1] != b.shape[-2] or (b.dim() > 2 and a.shape[:-2] != b.shape[:-2]):
        raise ValueError(f"matmul: shapes {tuple(a.shape)} and {tuple(b.shape)} do not "
                         f"multiply: (..., M, K) @ (K, N) or (..., K, N) with equal leading dims")
    if b.dim() != 2 and (a.dim() > 4 or b.dim() != a.dim()):
        raise ValueError(f"matmul takes at most two leading dimensions, equal in a and b, got "
                         f"{tuple(a.shape)} @ {tuple(b.shape)}")
    if not a.numel() or not b.numel():        # an empty operand: torch's product (zeros)
        return torch.matmul(a, b)
    # Without a gradient to record (sampling, evaluation) the kernel is called directly.
    product = _MatMul.apply if torch.is_grad_enabled() and (a.requires_grad or b.requires_grad) else _bmm
    if b.dim() == 2:                      # one matrix for every row of a: one long product
        rows = a.reshape(-1, a.shape[-1])     # (rows, K), a view when a's rows are evenly spaced
        _check_sizes("matmul", rows, b.shape[-1])
        return product(rows, b).view(*a.shape[:-1], b.shape[-1])
    _check_sizes("matmul", a, b.shape[-1])
    return product(a, b)


def _check_sizes(where, a, N):
    """Refuse a product (..., M, K) @ (..., K, N) with a size the kernel cannot take: each of
    its sizes and the number of products (the leading dimensions') below 2**31."""
    *lead, M, K = (1, *a.shape) if a.dim() == 1 else a.shape
    guard.sizes(where, M=M, N=N, K=K, products=math.prod(lead))


class _Scores(torch.autograd.Function):
    """(q @ kᵀ) * scale with the future masked, for q (B, nh, T, hs) and k (B, nh, L, hs)."""

    @staticmethod
    def forward(ctx, q, k, scale, causal):
        ctx.save_for_backward(q, k)
        ctx.scale, ctx.causal = scale, causal
        return _bmm(q, k.transpose(-2, -1), scale, causal)

    @staticmethod
    def backward(ctx, grad):
        return (*_scores_backward(grad, *ctx.saved_tensors, ctx.scale, ctx.causal,
                                  ctx.needs_input_grad), None, None)


def scores_backward(grad, q, k, scale, causal, needs=(True, True)):
    """The gradients of q and k from the scores' `grad` (None where `needs` says no): q (B, nh,
    T, hs), k (B, nh, L, hs) and grad (B, nh, T, L), all float32, L = T when `causal`."""
    where = "scores_backward"
    for name, t in (("grad", grad), ("q", q), ("k", k)):
        guard.tensor(where, name, t, ndim=4)
    _check_scores(where, q, k, causal)
    guard.shape(where, "grad", grad, (*q.shape[:-1], k.shape[-2]), " (the scores')")
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not math.isfinite(scale):
        raise ValueError(f"{where}: scale must be a finite number, got {scale!r}")
    return _scores_backward(grad, q, k, scale, causal, needs)


def _check_scores(where, q, k, causal):
    """Refuse q and k that are not (B, nh, T, hs) and (B, nh, L, hs), L = T when causal, or
    whose sizes the kernel cannot take."""
    if q.shape[:2] != k.shape[:2] or q.shape[-1] != k.shape[-1] \
            or (causal and q.shape[-2] != k.shape[-2]):
        raise ValueError(f"{where}: q (B, nh, T, hs) and k (B, nh, L, hs), L = T when causal, "
                         f"got shapes {tuple(q.shape)} and {tuple(k.shape)}")
    _check_sizes(where, q, k.shape[-2])


def _scores_backward(grad, q, k, scale, causal, needs=(True, True)):
    """`scores_backward` on operands already checked (the engine's own passes)."""
    grad = grad.contiguous()
    g = torch.empty_like(grad)                # through the mask and the scale, as autograd goes
    _lib.scores_grad(grad.shape[0] * grad.shape[1], grad.shape[-2],
                     grad.shape[-1], grad.data_ptr(), g.data_ptr(), scale, causal)
    return (_bmm(g, k) if needs[0] else None,
            _bmm(g.transpose(-2, -1), q) if needs[1] else None)


def scores(q, k, causal):
    """Attention's scores q kᵀ / √hs for q (B, nh, T, hs) and k (B, nh, L, hs), with `causal` the
    future of each position (T = L) at -inf: bit for bit what `matmul(q, k.transpose(2, 3)) *
    (1 / √hs)` followed by `masked_fill` gives, forward and backward, in one pass of the kernel
    instead of three operators over the (T, L) scores. q and k are dense CPU tensors, every size
    below 2**31."""
    guard.tensor("scores", "q", q, dtype=None, ndim=4)
    guard.tensor("scores", "k", k, dtype=None, ndim=4)
    scale = 1.0 / math.sqrt(q.shape[-1])
    if q.dtype != torch.float32 or k.dtype != torch.float32:      # another precision: torch's own
        att = matmul(q, k.transpose(-2, -1)) * scale
        return att.masked_fill(torch.ones(att.shape[-2:], dtype=torch.bool).triu(1),
                               float("-inf")) if causal else att
    _check_scores("scores", q, k, causal)
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad):
        return _Scores.apply(q, k, scale, causal)
    return _bmm(q, k.transpose(-2, -1), scale, causal)


class _Linear(torch.autograd.Function):
    """x (..., in) @ weight.T + bias, the bias added as the kernel stores each product. The
    gradients are autograd's for the product and `+`: the bias's is the sum of the output's over
    its leading dimensions, taken from the gradient as it arrives (its strides decide how torch
    orders the sum), as autograd's `+` takes it; the products get it flattened into rows."""

    @staticmethod
    def forward(ctx, x, weight, bias, weight_rows):
        rows = x.reshape(-1, x.shape[-1])
        ctx.save_for_backward(rows, weight)
        return _bmm(rows, weight.t() if weight_rows is None else weight_rows,
                    bias=bias).view(*x.shape[:-1], weight.shape[0])

    @staticmethod
    def backward(ctx, grad):
        return (*_linear_backward(grad, *ctx.saved_tensors, ctx.needs_input_grad), None)


def linear_backward(grad, rows, weight, needs=(True, True, True)):
    """The gradients of x (..., in), the weight and the bias from the output's `grad` (..., out),
    x's `rows` being x flattened (rows, in): autograd's for the product and `+` (None where
    `needs` says no). All float32."""
    where = "linear_backward"
    guard.tensor(where, "grad", grad)
    guard.tensor(where, "rows", rows, ndim=2)
    guard.tensor(where, "weight", weight, ndim=2)
    if grad.dim() < 1 or grad.shape[-1] != weight.shape[0] or rows.shape[1] != weight.shape[1] \
            or math.prod(grad.shape[:-1]) != rows.shape[0]:
        raise ValueError(f"{where}: grad (..., out), rows (n, in) with n the product of grad's "
                         f"leading dimensions, weight (out, in); got shapes {tuple(grad.shape)}, "
                         f"{tuple(rows.shape)} and {tuple(weight.shape)}")
    guard.sizes(where, rows=rows.shape[0], out=weight.shape[0], **{"in": weight.shape[1]})
    return _linear_backward(grad, rows, weight, needs)


def _linear_backward(grad, rows, weight, needs=(True, True, True)):
    """`linear_backward` on operands already checked (the engine's own passes)."""
    grad_bias = grad.sum(tuple(range(grad.dim() - 1))) if needs[2] else None
    flat = grad.reshape(-1, grad.shape[-1])
    grad_x = _bmm(flat, weight).view(*grad.shape[:-1], weight.shape[1]) if needs[0] else None
    return grad_x, _bmm(flat.t(), rows) if needs[1] else None, grad_bias


def linear(x, weight, bias=None, rows=None):
    """x (..., in) @ weight.T (in, out) + bias, as nn.Linear computes it, through the kernel, the
    bias added as each product is stored (the same bits as `+`, one operator less). `rows`,
    weight.T copied into rows (`weights.Weights.rows`), spares the kernel its copy of the
    transposed weight at every product (its first row is compared with the weight's first
    column); the gradients are taken from the weight itself. Dense CPU tensors, every size below
    2**31."""
    where = "linear"
    for name, t in (("x", x), ("weight", weight)) + ((("bias", bias),) if bias is not None else ()):
        guard.tensor(where, name, t, dtype=None)
    if rows is not None:
        guard.tensor(where, "rows", rows)
        guard.shape(where, "rows", rows, tuple(weight.shape)[::-1], " (weight.T's)")
    if weight.dim() != 2 or x.dim() < 1 or (bias is not None and bias.shape != weight.shape[:1]):
        raise ValueError(f"{where}: x (..., in), weight (out, in) and bias (out,), got shapes "
                         f"{tuple(x.shape)}, {tuple(weight.shape)} and "
                         f"{None if bias is None else tuple(bias.shape)}")
    if bias is None or not x.dtype == weight.dtype == bias.dtype == torch.float32 \
            or x.shape[-1] != weight.shape[1] or not bias.is_contiguous():
        y = matmul(x, weight.t())           # another precision, no bias, or bad input's errors
        return y if bias is None else y + bias
    if not x.numel() or not weight.numel():      # an empty operand: torch's product
        return matmul(x, weight.t()) + bias
    guard.sizes(where, rows=math.prod(x.shape[:-1]), out=weight.shape[0],
                **{"in": weight.shape[1]})
    if rows is not None and not torch.equal(rows[:, 0].view(torch.int32),      # bits: NaN too
                                            weight[0].detach().view(torch.int32)):
        raise ValueError(f"{where}: rows must be weight.T copied into rows, and its first row is "
                         f"not weight's first column (another layer's rows, or a copy from "
                         f"before the weight changed): pass this weight's rows, or none")
    if torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad or bias.requires_grad):
        return _Linear.apply(x, weight, bias, rows)
    return _bmm(x.contiguous(), weight.t() if rows is None else rows, bias=bias)
