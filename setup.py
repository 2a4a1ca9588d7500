"""Builds the engine's C files (tinyagent/engine/c/) into one extension module,
tinyagent.engine._kernels (the rest of the metadata is in pyproject.toml). It needs a C compiler and
Python's headers, not torch's. The extension is optional: where it cannot be built (no compiler,
no headers), the install still succeeds and the package computes with plain PyTorch, saying so
in one line when a run starts (tinyagent/engine/__init__.py). The run cache's code hash covers
the same files (harness/cache.py), so that a change to a kernel recomputes runs."""
import platform
from glob import glob

from setuptools import Extension, setup

# -ffp-contract=off: no multiply and add fused unless the code says so. Beyond that, any flags
# give the same bits (the order of every operation is the code's); these give speed
# (-fno-math-errno lets Adam's square roots run as vector instructions: the same roots).
x86 = platform.machine().lower() in ("x86_64", "amd64")
flags = ["-O3", "-ffp-contract=off", "-fno-math-errno"] + (["-mavx2", "-mfma"] if x86 else [])
# On Linux the kernels share large work between threads with OpenMP, linked as libgomp.so.1: the
# soname of the copy torch's wheel ships and loads first, so the kernels' threads are torch's own.
# Elsewhere (Apple's compiler has no -fopenmp) they are built without it and run on one thread.
openmp = ["-fopenmp"] if platform.system() == "Linux" else []
setup(ext_modules=[Extension("tinyagent.engine._kernels",
                             sources=sorted(glob("tinyagent/engine/c/*.c")),
                             depends=["tinyagent/engine/c/kernels.h"],
                             extra_compile_args=flags + openmp, extra_link_args=openmp,
                             libraries=["m"], optional=True)])
