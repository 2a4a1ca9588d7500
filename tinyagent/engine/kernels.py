"""Loads the engine's C kernels (c/matmul.c, kvcache.c, gelu.c, adam.c, softmax.c), which
`pip install -e .` compiles (setup.py) into the extension module tinyagent.engine._kernels (entry
points in c/bindings.c). The extension is optional: `available()` says whether it was built."""
import importlib

MODULE = "tinyagent.engine._kernels"


def available():
    """Whether the C extension was built and loads."""
    try:
        importlib.import_module(MODULE)
    except ImportError:
        return False
    return True


def load(what):
    """The kernels' module; `what` names the kernel asked for in the error raised when the module
    has not been built."""
    try:
        return importlib.import_module(MODULE)
    except ImportError:
        raise ImportError(f"tinyagent's {what} is not built (no tinyagent/engine/_kernels*.so): "
                          f"install the package with `pip install -e .` (what `make setup` runs), "
                          f"which compiles tinyagent/engine/c/*.c with the machine's C compiler and "
                          f"Python's headers; without them, TINYAGENT_ENGINE=torch computes with "
                          f"plain PyTorch") from None
