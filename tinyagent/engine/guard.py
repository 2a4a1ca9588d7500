"""The checks at the engine's entry points: what the C kernels assume of what they are handed.

A kernel gets raw addresses and sizes (c/bindings.c reads every size as a C int) and trusts them:
a tensor on the meta device has the address 0, a float16 tensor holds half the bytes a float32
kernel reads, an expanded tensor one element where the kernel reads millions, a position past the
cache is memory of another tensor, and so is a position past what a cache holds. Each public
function of matmul.py, gelu.py, softmax.py, kvcache.py and adam.py, and each call of the seam's
`Decoder` and of kernel_policy.py, checks its operands here once, before any kernel runs, and
refuses with an error naming what is allowed; a cache must be a `policy.Cache`, which knows how
far it is filled. The engine's own passes (sequence_pass.py, token_pass.py) call the unchecked
kernels on the tensors they made, so the hot path pays one check per call of the seam, not one
per kernel.
"""
import math
import numbers
import operator

import torch

from ..policy import Cache

LIMIT = 2 ** 31                 # every size a kernel takes is a C int: below 2**31


def tensor(where, name, t, dtype=torch.float32, ndim=None, contiguous=False):
    """`t` if it is a dense CPU tensor of `dtype` (None: any floating-point one), with `ndim`
    dimensions (an int or a tuple of them; None: any), and contiguous if asked; otherwise an error
    naming `where` (the function), `name` (the argument) and what is allowed."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{where}: {name} must be a torch.Tensor, got a {type(t).__name__}")
    if not t.is_cpu:
        raise ValueError(f"{where}: {name} must be on the cpu (the engine's kernels read CPU "
                         f"memory), got a tensor on {t.device.type}")
    if t.layout != torch.strided:
        raise ValueError(f"{where}: {name} must be a dense tensor (torch.strided), got a "
                         f"{str(t.layout).replace('torch.', '').replace('_coo', '')} one "
                         f"({t.layout})")
    if dtype is None:
        if not t.dtype.is_floating_point:
            raise TypeError(f"{where}: {name} must be a floating-point tensor (float32, the "
                            f"policy's precision, or float64, bfloat16, float16), got "
                            f"{str(t.dtype).replace('torch.', '')}")
    elif t.dtype != dtype:
        raise TypeError(f"{where}: {name} must be {str(dtype).replace('torch.', '')}, got "
                        f"{str(t.dtype).replace('torch.', '')}")
    if ndim is not None and t.dim() not in ((ndim,) if isinstance(ndim, int) else ndim):
        allowed = ndim if isinstance(ndim, int) else " or ".join(map(str, ndim))
        raise ValueError(f"{where}: {name} must have {allowed} dimensions, got {t.dim()} "
                         f"dimensions, shape {tuple(t.shape)}")
    if contiguous and not t.is_contiguous():
        raise ValueError(f"{where}: {name} must be contiguous (the kernel reads its elements in "
                         f"order; an expanded or transposed view is not), got strides "
                         f"{t.stride()} for shape {tuple(t.shape)}: pass {name}.contiguous()")
    return t


def sizes(where, **named):
    """Refuse any of the named sizes at or past 2**31, which a C int cannot hold (it would wrap
    to another size, and the kernel read or write elsewhere)."""
    for name, n in named.items():
        if n >= LIMIT:
            raise ValueError(f"{where}: {name} = {n} is too large: the kernels take sizes below "
                             f"2**31 (a C int)")


def shape(where, name, t, expected, hint=""):
    """Refuse `t` unless its shape is `expected` (a tuple)."""
    if tuple(t.shape) != tuple(expected):
        raise ValueError(f"{where}: {name} must have shape {tuple(expected)}{hint}, got "
                         f"{tuple(t.shape)}")


def position(where, name, value, low, high, what):
    """`value` as an int if it is an integer (not a bool) in [low, high]; otherwise an error
    naming what it indexes."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) \
            or not low <= value <= high:
        raise ValueError(f"{where}: {name} must be an integer in [{low}, {high}] ({what}), got "
                         f"{value!r}")
    return int(value)


def position_mask(idx, keep):
    """`keep` if it is a bool tensor shaped like the tokens idx: the positions whose features a
    pass computes (`features`' `keep`). Where idx is no tensor, its own check refuses it."""
    if not isinstance(idx, torch.Tensor):
        return keep
    if not isinstance(keep, torch.Tensor) or keep.dtype != torch.bool or keep.shape != idx.shape:
        raise ValueError(f"keep must be a bool tensor shaped like idx {tuple(idx.shape)}; got "
                         f"{getattr(keep, 'dtype', type(keep).__name__)} "
                         f"{tuple(getattr(keep, 'shape', ()))}")
    return keep


def cache(where, cache):
    """`cache` if it is a `policy.Cache` (`Policy.new_cache`'s, `Decoder.new_cache`'s), which
    counts how many positions are filled; otherwise a TypeError naming `where` and what is
    allowed. A plain list of (keys, values) pairs is refused: past what was written, a kernel
    would attend to whatever memory the cache was given."""
    return Cache.check(where, cache)


def kept_rows(where, keep, n):
    """`keep` as a list of ints if it holds increasing indices of n rows (a list, a tuple or a
    1-D integer tensor): the rows a compacted cache keeps, which move up in place only in that
    order; a negative index would keep a row from the end."""
    if isinstance(keep, torch.Tensor):
        keep = keep.tolist() if keep.dim() == 1 and not keep.is_floating_point() else None
    elif isinstance(keep, (list, tuple)):
        keep = list(keep)
    else:
        keep = None
    # A rollout's keep is a list of Python ints, checked by type in one C pass; another integer
    # type (numpy's) is checked one by one
    if keep is None or (set(map(type, keep)) - {int} and not all(
            isinstance(j, numbers.Integral) and not isinstance(j, bool) for j in keep)) \
            or (keep and (min(keep) < 0 or max(keep) >= n)) \
            or any(map(operator.ge, keep, keep[1:])):
        raise ValueError(f"{where}: keep must be increasing indices of the cache's rows, in "
                         f"[0, {n}), as a list, got {keep!r:.200}")
    return keep


def adam_settings(lr, betas, eps):
    """(lr, betas, eps) if Adam can step with them: lr and eps finite and positive (lr = inf
    makes every parameter infinite at the first step, eps = inf freezes them), two betas in
    [0, 1); otherwise a ValueError naming what is allowed."""
    def finite_positive(value):
        return isinstance(value, numbers.Real) and not isinstance(value, bool) \
            and math.isfinite(value) and value > 0
    try:
        betas = tuple(betas)
    except TypeError:
        betas = None
    if not finite_positive(lr) or not finite_positive(eps) or betas is None or len(betas) != 2 \
            or not all(isinstance(b, numbers.Real) and 0 <= b < 1 for b in betas):
        raise ValueError(f"Adam needs lr > 0 and eps > 0, both finite, and two betas in "
                         f"[0, 1); got lr={lr!r}, betas={betas!r}, eps={eps!r}")
    return lr, betas, eps
