"""Argument checks shared by the configurations and entry points, so that every bad count is
refused with the same message naming what is allowed."""


def positive_int(name, value):
    """`value` if it is an integer >= 1; otherwise a ValueError naming `name`."""
    if not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return value
