"""One arithmetic for every run, so that a run's numbers depend only on its config, seed and code.

A 40-step run turns a last-bit difference in arithmetic into a different sampled token and then a
different run, and several libraries inside the torch wheel pick their code by the CPU they find
(under MKL's reproducibility branch, Intel and AMD still computed the first optimizer step
differently). So the policy's matrix products are our own (matmul.c: a fixed order of summation,
the same bits on any CPU), Adam's square root is the correctly rounded one (adam.c), and what
remains of a run is chosen by two pins:

    library (what of ours runs on it)          pin
    engine/c/matmul.c (every float32 matrix    none: the order of summation is the code's,
      product of the policy, forward and back)    on any number of threads (each element is
                                                  one thread's chain)
    engine/c/kvcache.c (the key/value cache's none: a copy rounds nothing
      stores and moves)
    engine/c/gelu.c (GELU's additions and     none: IEEE 754 rounds each alike (compiled
      multiplications, forward and back)          without fused multiply-adds)
    engine/c/adam.c (Adam's step of a float32 none: IEEE 754 rounds each alike, fused only
      parameter, its square root the CPU's        where the code says; the square root is the
      correctly rounded one)                      correctly rounded one (torch.sqrt calls MKL,
                                                  which rounds it otherwise, and differently on
                                                  Intel and AMD)
    engine/c/softmax.c (attention's softmax   none: ATen's AVX2 order and SLEEF's exp written
      over a prefix, forward)                     out, fused where they fuse
    ATen's vectorized kernels (layer norm,      ATEN_CPU_CAPABILITY=avx2: AVX2 code even where
      one token's softmax, softmax's gradient,    the CPU has AVX-512
      log-softmax, sums, sampling in float64)
    MKL's vector math (float32 exp, and erf     MKL_CBWR=COMPATIBLE,STRICT: the same bits on the
      for GELU: ATen calls it)                    Intel Xeon and AMD Zen 3, 4 and 5 measured
                                                  (tests/test_vendor.py); unpinned, Intel's AUTO
                                                  branch computes other bits, AMD's the same
    MKL's BLAS and oneDNN                       MKL_CBWR and ONEDNN_MAX_CPU_ISA=AVX2, kept for
                                                  10.1-10.5's exact mathematics (float64
                                                  products); no run reaches them
                                                  (tests/test_arithmetic.py)
    OpenMP (how a reduction is split)           one torch thread for training and the held-out
                                                  rollout (set by the harness's entry points and
                                                  each notebook's set-up line), a fixed two for SFT
    never reached by our runs: FBGEMM and QNNPACK (quantized ops), NNPACK and XNNPACK
    (convolutions). glibc's libm picks FMA variants of exp and log by the CPU, identical on every
    CPU with AVX2 (they all have FMA).

A list can miss a library, so the arithmetic is also checked by what it computes
(fingerprint.py). The engine's start (`tinyagent.engine.start`, at the first computation of a run,
when a checkpoint loads, or called by hand) sets the variables on x86-64 (unless the environment
already says otherwise, and then refuses an ATen capability the CPU cannot run), and the run
workers of `tinyagent.harness.runs` are always started with them. Imports torch only inside
functions, so that it can run before torch computes anything.
"""
import ctypes
import os
import platform
from contextlib import contextmanager
from pathlib import Path

PINS = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "COMPATIBLE,STRICT", "ONEDNN_MAX_CPU_ISA": "AVX2"}

# The x86 flags each value of ATEN_CPU_CAPABILITY needs (for "avx512", torch's own test when it
# chooses for itself). Told a value, torch does not check: on a CPU without those instructions it
# stops at its first such kernel on an illegal instruction, with no message (measured: `make agents`
# under ATEN_CPU_CAPABILITY=avx512 on an AMD EPYC Zen 3 died of SIGILL, its stderr empty).
ATEN_NEEDS = {"default": set(), "avx2": {"avx2", "fma"},
              "avx512": {"avx512vl", "avx512bw", "avx512dq", "fma"}}


def cpu_flags():
    """The x86 CPU's feature flags as Linux lists them (/proc/cpuinfo), or None where it does not
    list them (another system, or an ARM CPU, whose line is called Features)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return None


THIS_CPU = "this CPU"     # the flags argument's default: read them from /proc/cpuinfo


def _runnable(value, flags):
    """Whether this CPU (its `flags`, None: unknown) can run the ATen code `value` names."""
    needs = ATEN_NEEDS.get(value.strip().lower())
    return flags is None or needs is None or needs <= flags


def is_x86(machine=None):
    """Whether this machine (or `machine`, as platform.machine() names one) is x86-64: the pins
    name x86 code and an x86 build of MKL, and mean nothing elsewhere (torch on ARM warns about an
    ATen capability it does not have, in every process)."""
    return (platform.machine() if machine is None else machine).lower() in ("x86_64", "amd64")


def runnable_pins(flags=THIS_CPU, machine=None):
    """The pins that apply here and this CPU can run: none off x86-64; there all of them, except
    ATen's AVX2 on a CPU without AVX2 and FMA, where it would stop torch (the stored bits are not
    promised there, tinyagent.harness.contract)."""
    if not is_x86(machine):
        return {}
    flags = cpu_flags() if flags is THIS_CPU else flags
    return {name: value for name, value in PINS.items()
            if name != "ATEN_CPU_CAPABILITY" or _runnable(value, flags)}


def check_aten_capability(environ=None, flags=THIS_CPU):
    """Refuse an ATEN_CPU_CAPABILITY this CPU cannot run, naming the values it can, before torch
    computes anything (torch would die of an illegal instruction, silently)."""
    value = (os.environ if environ is None else environ).get("ATEN_CPU_CAPABILITY")
    flags = cpu_flags() if flags is THIS_CPU else flags
    if value is None or _runnable(value, flags):
        return
    allowed = [name for name, needs in ATEN_NEEDS.items() if needs <= flags]
    raise RuntimeError(
        f"ATEN_CPU_CAPABILITY={value} asks torch for code this CPU cannot run (it lacks "
        f"{', '.join(sorted(ATEN_NEEDS[value.strip().lower()] - flags))}): torch would stop on an "
        f"illegal instruction, without a message. Allowed on this CPU: {', '.join(allowed)} "
        f"(the pin is {PINS['ATEN_CPU_CAPABILITY']}); or leave it unset, and the engine sets "
        f"the pin")


def pin_environment():
    """Put the pins into this process's environment where it names no value of its own, after
    refusing an ATen capability the CPU cannot run. Torch and MKL read them lazily, at their first
    computation, so this works after `import torch` too."""
    check_aten_capability()
    for name, value in runnable_pins().items():
        os.environ.setdefault(name, value)


@contextmanager
def pinned_environment():
    """The pins in force in os.environ for the body (overriding other values), for starting worker
    processes that inherit them; the caller's environment comes back afterwards."""
    before = {name: os.environ.get(name) for name in PINS}
    os.environ.update(runnable_pins())
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
    """Run the body on `n` torch threads, then give the caller back its own count (the engine's
    start, `tinyagent.engine.start`, comes first, so that it does not reset them inside)."""
    import torch
    from ..checks import positive_int
    from . import start
    positive_int("torch_threads' n", n)
    start()
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def mkl_branch():
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
