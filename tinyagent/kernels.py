"""Loads tinyagent's C kernels (matmul.c, gelu.c), which `pip install -e .` compiles (setup.py)
into plain shared libraries, called through ctypes: no Python or torch headers needed."""
import ctypes
import importlib.machinery
from pathlib import Path


def load(stem, what):
    """The shared library `_<stem>` built beside this file from `<stem>.c`; `what` names it in
    the error raised when it has not been built."""
    here = Path(__file__).resolve().parent
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        path = here / f"_{stem}{suffix}"
        if path.exists():
            return ctypes.CDLL(str(path))
    raise ImportError(f"tinyagent's {what} is not built (no _{stem}*.so in {here}): install the "
                      f"package with `pip install -e .` (what `make setup` runs), which compiles "
                      f"tinyagent/{stem}.c with the machine's C compiler")
