"""Matrix products whose bits do not depend on the CPU.

BLAS libraries pick their kernels and blocking by the CPU they find; under MKL's reproducibility
branch the policy's forward pass still matched across Intel and AMD, but its first optimizer step
did not. So every product the policy computes (its linear layers and attention, forward and
backward) goes through one small C kernel (matmul.c) that sums each element over k in a fixed
order with fused multiply-adds. Its bits depend only on its operands.
"""
import ctypes
import importlib.machinery
from pathlib import Path

import torch


def _load_kernel():
    here = Path(__file__).resolve().parent
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        path = here / f"_matmul{suffix}"
        if path.exists():
            kernel = ctypes.CDLL(str(path)).tiny_bmm
            kernel.argtypes = [ctypes.c_int] * 4 + [ctypes.c_void_p] * 3
            kernel.restype = None
            return kernel
    raise ImportError(f"tinyagent's matrix kernel is not built (no _matmul*.so in {here}): "
                      f"install the package with `pip install -e .` (what `make setup` runs), "
                      f"which compiles tinyagent/matmul.c with the machine's C compiler")


_kernel = _load_kernel()


def _bmm(a, b):
    """(n, M, K) @ (n, K, N) -> (n, M, N) through the C kernel, float32, no autograd."""
    a, b = a.contiguous(), b.contiguous()
    n, M, K = a.shape
    out = torch.empty((n, M, b.shape[2]), dtype=torch.float32)
    _kernel(n, M, b.shape[2], K, a.data_ptr(), b.data_ptr(), out.data_ptr())
    return out


class _MatMul(torch.autograd.Function):
    """a (n, M, K) @ b (n, K, N); both gradients are products through the same kernel."""

    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return _bmm(a, b)

    @staticmethod
    def backward(ctx, grad):
        a, b = ctx.saved_tensors
        grad_a = _bmm(grad, b.transpose(1, 2)) if ctx.needs_input_grad[0] else None
        grad_b = _bmm(a.transpose(1, 2), grad) if ctx.needs_input_grad[1] else None
        return grad_a, grad_b


def matmul(a, b):
    """a (..., M, K) @ b (..., K, N), the leading dimensions equal; b may also be a single (K, N)
    matrix shared by every row of a. Float32 (the policy's precision) goes through the kernel; a
    copy of the policy in another precision (float64, bfloat16: to compare samplers) gets torch's
    own product, whose bits are the library's."""
    if a.dtype != b.dtype:
        raise TypeError(f"matmul: operands of one dtype, got {a.dtype} @ {b.dtype}")
    if a.dtype != torch.float32:
        return torch.matmul(a, b)
    if a.shape[-1] != b.shape[-2] or (b.dim() > 2 and a.shape[:-2] != b.shape[:-2]):
        raise ValueError(f"matmul: shapes {tuple(a.shape)} and {tuple(b.shape)} do not "
                         f"multiply: (..., M, K) @ (K, N) or (..., K, N) with equal leading dims")
    if b.dim() == 2:                                   # one matrix: rows of a are independent
        out = _MatMul.apply(a.reshape(1, -1, a.shape[-1]), b[None])
        return out.view(*a.shape[:-1], b.shape[-1])
    lead = a.shape[:-2]
    out = _MatMul.apply(a.reshape(-1, *a.shape[-2:]), b.reshape(-1, *b.shape[-2:]))
    return out.view(*lead, a.shape[-2], b.shape[-1])


def linear(x, weight, bias=None):
    """x (..., in) @ weight.T (in, out) + bias, as nn.Linear computes it, through the kernel."""
    y = matmul(x, weight.t())
    return y if bias is None else y + bias
