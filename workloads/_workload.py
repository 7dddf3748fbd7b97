"""`make_workload`: one trace at one rate, from the one generator (`_generate.py`)."""

from __future__ import annotations

import os

from workloads._arrivals import RngLike
from workloads._generate import ARRIVAL_PROCESSES, TraceGenerator, check_positive
from workloads._trace import Trace

__all__ = ["ARRIVAL_PROCESSES", "make_workload"]


def make_workload(workload: str | os.PathLike[str] | Trace, rps: float | None, *,
                  duration_s: float | None = None, arrival: str | None = None, cv: float = 2.0,
                  seed: RngLike = 0) -> Trace:
    """The trace of a workload at a target rate: ``TraceGenerator(...).at(rps)``.

    The same generator draws the search's traces, so a trace made here is the trace the
    search scored at that rate, workload, window and seed.

    Parameters
    ----------
    workload : str, os.PathLike or Trace
        ``"coding"`` or ``"conversation"`` (the shipped Azure 2023 traces; aliases
        ``"code"``, ``"conv"``), a path to a CSV trace in any format
        :func:`read_trace_csv` accepts, or a :class:`Trace`.
    rps : float or None
        Mean request rate in requests per second, > 0. None only with ``"replay"``:
        the trace's own rate.
    duration_s : float or None, default None
        Window length in seconds, > 0. None: a replay's whole trace once (as the CLI
        without ``--duration``); drawn arrivals (``"poisson"``, ``"gamma"``) 120 s.
    arrival : {"replay", "poisson", "gamma"}, optional
        Default ``"poisson"`` for a shipped name, ``"replay"`` for a file or a Trace.
        ``"poisson"``: exactly ``n = round(rps * duration_s)`` requests with exponential
        gaps (the first at 0; the last may fall slightly past the window).
        ``"gamma"``: the same with gamma gaps of coefficient of variation ``cv``
        (bursty for ``cv > 1``). Both draw (prompt, output) pairs jointly, with
        replacement, from the trace's requests, which keeps their correlation, and
        both draw the same sizes for a seed. ``"replay"``: the trace's own requests in
        order, its arrival times time-scaled to mean rate ``rps``, cut to the window
        (wrapping around, by time-shifted copies, when the window is longer).
    cv : float, default 2.0
        Coefficient of variation of the gamma gaps, > 0 (used by ``"gamma"`` only).
    seed : int, numpy.random.Generator or None, default 0
        Randomness of ``"poisson"`` and ``"gamma"`` (a Generator gives one draw of an
        int seed; None fresh entropy). The same int seed gives bitwise-equal traces.

    Returns
    -------
    Trace
        With the window ``duration_s`` (resolved as above; so ``rate_rps`` is the requested rate up to the
        rounding of ``n`` for ``"poisson"`` and ``"gamma"``), named after the source.

    Raises
    ------
    ValueError
        One line naming the bad parameter and the fix (``rps``, ``duration_s``,
        ``cv``, ``arrival``, or too few requests).
    UnknownWorkloadError
        If ``workload`` is neither a shipped name nor a path to a CSV file.
    TraceFormatError
        If the CSV trace cannot be read.
    """
    if rps is not None:
        check_positive("rps", rps, "the mean request rate in requests per second, e.g. 70")
    return TraceGenerator(workload, duration_s, seed, arrival=arrival, cv=cv, rps=rps).at(rps)
