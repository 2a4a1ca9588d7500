"""One arithmetic for every run, so that a run's numbers depend only on its config, seed and code.

A 40-step run turns a last-bit difference in arithmetic into a different sampled token and then a
different run, and which kernels torch and MKL run depends on the CPU: torch picks its vectorized
kernels by the instructions it finds (AVX-512 or AVX2), MKL its matrix-multiply code path by the
CPU's model and vendor. Two settings fix both, and must be in the environment before torch
computes anything:

    ATEN_CPU_CAPABILITY=avx2      torch's own kernels at AVX2, which every current x86-64 CPU has
    MKL_CBWR=COMPATIBLE,STRICT    MKL's Conditional Numerical Reproducibility branch that MKL
                                  documents as reproducible on Intel and AMD alike (its AVX2
                                  branch falls back to the automatic one on AMD)

The thread count is the third pin: measured, even under these settings a float32 matrix product
of up to 64 rows gives other bits on two threads than on one. So training and the held-out rollout
run on one torch thread (`torch_threads`), and SFT on its own fixed count.

`import tinyagent` sets the two variables (unless the environment already says otherwise), and the
run workers of `tinyagent.runs` are always started with them. A process that trains without them
in force is told so by `warn_if_unpinned`. Imports nothing from the package, and torch only inside
functions, so that it can run before torch computes anything.
"""
import ctypes
import os
import warnings
from contextlib import contextmanager
from pathlib import Path

PINS = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "COMPATIBLE,STRICT"}
TORCH_CAPABILITY = "AVX2"      # what torch reports when the first pin is in force
MKL_COMPATIBLE = 3             # MKL_CBWR_COMPATIBLE, as mkl_cbwr_get(MKL_CBWR_BRANCH) answers


def pin_environment():
    """Put the pins into this process's environment where it names no value of its own. Torch and
    MKL read them lazily, at their first computation, so this works after `import torch` too."""
    for name, value in PINS.items():
        os.environ.setdefault(name, value)


@contextmanager
def pinned_environment():
    """The pins in force in os.environ for the body (overriding other values), for starting worker
    processes that inherit them; the caller's environment comes back afterwards."""
    before = {name: os.environ.get(name) for name in PINS}
    os.environ.update(PINS)
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@contextmanager
def torch_threads(n):
    """Run the body on `n` torch threads, then give the caller back its own count."""
    import torch
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _mkl_branch():
    """MKL's code branch as MKL itself reports it, or None where this torch build does not let us
    ask (its MKL is linked into libtorch_cpu; another build may hide or lack it)."""
    import torch
    try:
        lib = ctypes.CDLL(str(Path(torch.__file__).parent / "lib" / "libtorch_cpu.so"))
        get = lib.mkl_serv_cbwr_get
    except (OSError, AttributeError):
        return None
    get.argtypes, get.restype = [ctypes.c_int], ctypes.c_int
    return get(1)                                    # 1: MKL_CBWR_BRANCH


def arithmetic_in_force():
    """What this process computes with: torch's kernel set, MKL's branch (None: cannot ask) and
    whether that is the pinned arithmetic."""
    import torch
    capability = torch.backends.cpu.get_cpu_capability()
    branch = _mkl_branch()
    mkl_pinned = (branch == MKL_COMPATIBLE if branch is not None
                  else os.environ.get("MKL_CBWR") == PINS["MKL_CBWR"])
    return {"torch kernels": capability, "MKL branch": branch,
            "pinned": capability == TORCH_CAPABILITY and mkl_pinned}


_warned = False


def warn_if_unpinned():
    """Warn once per process when it trains without the pinned arithmetic: its numbers are then
    this machine's, and a run of the same config may end differently elsewhere."""
    global _warned
    state = arithmetic_in_force()
    if state["pinned"] or _warned:
        return
    _warned = True
    warnings.warn(f"training without the pinned arithmetic (torch kernels {state['torch kernels']}, "
                  f"MKL branch {state['MKL branch']}): numbers may differ from another machine's. "
                  f"Set {' '.join(f'{k}={v}' for k, v in PINS.items())} before torch computes "
                  f"anything, or train through tinyagent.runs, whose workers always do.",
                  RuntimeWarning, stacklevel=3)
