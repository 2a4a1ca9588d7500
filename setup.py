"""Builds tinyagent/matmul.c, the policy's matrix products (the rest of the metadata is in
pyproject.toml). A plain C library loaded with ctypes: no Python or torch headers needed."""
import platform

from setuptools import Extension, setup

# Any flags give the same bits (the order of summation is the code's); these give speed.
x86 = platform.machine().lower() in ("x86_64", "amd64")
flags = ["-O3", "-ffp-contract=off"] + (["-mavx2", "-mfma"] if x86 else [])
setup(ext_modules=[Extension("tinyagent._matmul", sources=["tinyagent/matmul.c"],
                             extra_compile_args=flags, libraries=["m"])])
