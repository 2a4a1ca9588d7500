"""Loads tinyagent's C kernels (matmul.c, kvcache.c, gelu.c, adam.c, softmax.c), which
`pip install -e .` compiles (setup.py) into the extension module tinyagent._kernels (entry
points in bindings.c)."""
import importlib


def load(what):
    """The kernels' module; `what` names the kernel asked for in the error raised when the module
    has not been built."""
    try:
        return importlib.import_module("tinyagent._kernels")
    except ModuleNotFoundError:
        raise ImportError(f"tinyagent's {what} is not built (no tinyagent/_kernels*.so): install "
                          f"the package with `pip install -e .` (what `make setup` runs), which "
                          f"compiles tinyagent/matmul.c, kvcache.c, gelu.c, adam.c, softmax.c and "
                          f"bindings.c with the machine's C compiler and Python's "
                          f"headers") from None
