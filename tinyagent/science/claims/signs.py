"""The two tests most claims share: the measured quantity is above, or below, zero."""


def positive(value):
    return value > 0


def negative(value):
    return value < 0
