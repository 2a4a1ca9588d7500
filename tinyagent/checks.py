"""Argument checks shared by the configurations and entry points, so that every bad count is
refused with the same message naming what is allowed."""
import math
import numbers


def _is_int(value):
    # a bool is an int to Python, but True as a group size or a seed is a mistake
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def positive_int(name, value):
    """`value` as an int if it is an integer >= 1 (not a bool); otherwise a ValueError naming
    `name`."""
    if not _is_int(value) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


def seed_int(name, value):
    """`value` as an int if it is an integer (not a bool) in [0, 2**64), the seeds a torch
    generator takes (it would read -1 as 2**64 - 1: two seeds, one run)."""
    if not _is_int(value):
        raise TypeError(f"{name} must be an integer in [0, 2**64), got {value!r}")
    if not 0 <= value < 2 ** 64:
        raise ValueError(f"{name} must be an integer in [0, 2**64), got {value!r}")
    return int(value)


def real_number(name, value, allowed, what):
    """`value` as a float if it is a real number (not a bool, a string or a tensor) that
    `allowed(value)` accepts; otherwise an error naming `name` and `what` is allowed. NaN is
    always refused: in a config, one step would turn every parameter NaN."""
    if not isinstance(value, numbers.Real) or isinstance(value, bool):
        raise TypeError(f"{name} must be a real number {what}, got {value!r}")
    value = float(value)
    if math.isnan(value) or not allowed(value):
        raise ValueError(f"{name} must be {what}, got {value!r}")
    return value


def finite_nonnegative(name, value):
    """`value` as a float if it is a real number in [0, inf)."""
    return real_number(name, value, lambda v: 0 <= v < math.inf, "finite and non-negative")


def finite_positive(name, value):
    """`value` as a float if it is a real number in (0, inf)."""
    return real_number(name, value, lambda v: 0 < v < math.inf, "finite and positive")
