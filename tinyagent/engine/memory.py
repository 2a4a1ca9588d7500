"""Freed memory kept for the next tensor instead of given back to the operating system.

glibc's malloc gives a large freed block back to the system (above a threshold that it adjusts
as blocks are freed, at most 32 MiB), and the next tensor of that size faults its pages in again,
each zeroed by the kernel first. A run makes the same tensors of a few MiB at every step (the
key/value cache, a minibatch's activations and gradients): about 50,000 page faults in a 40-step
run, 3-6% of its time on the Intel Xeon measured (README, Speed). Raising both thresholds keeps
freed blocks in the heap for the next tensor. The process then holds its peak memory until it
ends; no number computed changes.
"""
import ctypes
import sys

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3     # mallopt's parameters (glibc's malloc.h)
MMAP_THRESHOLD = 32 << 20                        # the largest glibc accepts
TRIM_THRESHOLD = 2**31 - 1                       # the largest an int holds: the heap's top stays


def keep_freed_memory():
    """Make glibc's malloc keep freed blocks below 32 MiB for reuse. Returns whether it could:
    False on another C library or system, where nothing changes."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and \
        bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
