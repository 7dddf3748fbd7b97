"""Typed errors raised by :mod:`workloads`.

Every message is a single line that says what is wrong, where, and how to fix it, so
a command-line front end can print ``str(error)`` as is.
"""

from __future__ import annotations

__all__ = ["TraceFormatError", "UnknownWorkloadError", "WorkloadError"]


class WorkloadError(ValueError):
    """Base class of the errors raised by :mod:`workloads`.

    params : the Python parameters the message names, as parameters (a front end may name
    its own flags instead); a word such as "arrival" in a file's message is not one.
    """

    def __init__(self, message: str, *, params: tuple[str, ...] = ()):
        super().__init__(message)
        self.params = tuple(params)


class TraceFormatError(WorkloadError):
    """A trace file or a :class:`~workloads.Trace` breaks the trace format.

    Raised for an unreadable or empty file, an unknown header, or a bad cell (the
    message names the file, the line as an editor shows it, and the column).
    """


class UnknownWorkloadError(WorkloadError):
    """A workload name that is neither a shipped trace nor a path to a CSV trace."""
