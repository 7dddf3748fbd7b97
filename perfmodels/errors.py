"""Typed errors of the latency models."""


class PerfModelError(ValueError):
    """A latency model was asked something it cannot answer (unknown GPU constants,
    invalid tensor-parallel degree, a batch that does not fit in memory, ...)."""
