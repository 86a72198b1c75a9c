"""Comparison helpers shared by the equivalence tests."""


def rel(a, b):
    """Relative difference of ``a`` from the reference ``b``."""
    return abs(a - b) / max(abs(b), 1e-12)
