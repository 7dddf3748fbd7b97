"""Build a synthetic workload: request sizes from a trace, arrivals from a process."""

from __future__ import annotations

import difflib
import os

import numpy as np

from workloads._arrivals import (RngLike, _check_positive, _request_count, gamma_arrivals,
                                 poisson_arrivals, replay_arrivals)
from workloads._readers import _ALIASES, WORKLOAD_NAMES, azure_trace, read_trace_csv
from workloads._trace import Trace
from workloads.errors import UnknownWorkloadError

__all__ = ["ARRIVAL_PROCESSES", "make_workload"]

ARRIVAL_PROCESSES: tuple[str, ...] = ("poisson", "gamma", "replay")


def make_workload(workload: str | os.PathLike[str] | Trace, rps: float, *,
                  duration_s: float = 120.0, arrival: str = "poisson", cv: float = 2.0,
                  seed: RngLike = 0) -> Trace:
    """Generate ``n = round(rps * duration_s)`` requests at a target rate.

    Parameters
    ----------
    workload : str, os.PathLike or Trace
        ``"coding"`` or ``"conversation"`` (the shipped Azure 2023 traces; aliases
        ``"code"``, ``"conv"``), a path to a CSV trace in any format
        :func:`read_trace_csv` accepts, or a :class:`Trace`.
    rps : float
        Mean request rate in requests per second, > 0.
    duration_s : float, default 120.0
        Window length in seconds, > 0.
    arrival : {"poisson", "gamma", "replay"}, default "poisson"
        ``"poisson"``: :func:`poisson_arrivals`, a Poisson process conditioned on
        its count, so the realized rate equals ``rps``. ``"gamma"``:
        :func:`gamma_arrivals`, bursty gaps with coefficient of variation ``cv``,
        rescaled so the mean rate is exact. ``"replay"``: :func:`replay_arrivals`,
        the trace's own arrival times time-scaled to mean rate ``rps`` (wrapping around
        by concatenating time-shifted copies when the trace is too short), each with
        its own request sizes in trace order (no resampling).
    cv : float, default 2.0
        Coefficient of variation of the gamma gaps, > 0 (used by ``"gamma"`` only).
    seed : int, numpy.random.Generator or None, default 0
        Randomness for ``"poisson"`` and ``"gamma"``. Sizes and arrival times use two
        independent streams spawned from it, so the same seed gives bitwise-equal
        traces, and switching between poisson and gamma keeps the request sizes.

    Returns
    -------
    Trace
        ``n`` requests with ``duration_s`` as given (so ``rate_rps`` is the requested
        rate up to the rounding of ``n``), named after the source trace. For
        ``"poisson"`` and ``"gamma"``, (prompt, output) pairs are drawn jointly, with
        replacement, from the trace's requests, which keeps their correlation.

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
    n = _request_count(rps, duration_s)
    _check_positive("cv", cv, "the coefficient of variation of the gaps, e.g. 2.0")
    if arrival not in ARRIVAL_PROCESSES:
        raise ValueError(f"arrival must be one of {', '.join(ARRIVAL_PROCESSES)}, "
                         f"got {arrival!r}")
    base = _source_trace(workload)
    if arrival == "replay":
        arrival_s = replay_arrivals(base.arrival_s, rps, duration_s)
        rows = np.arange(n) % len(base)
    else:
        size_rng, arrival_rng = np.random.default_rng(seed).spawn(2)
        rows = size_rng.integers(0, len(base), size=n)
        arrival_s = (poisson_arrivals(rps, duration_s, arrival_rng) if arrival == "poisson"
                     else gamma_arrivals(rps, duration_s, cv, arrival_rng))
    return Trace(arrival_s, base.prompt_tokens[rows], base.output_tokens[rows],
                 base.name, float(duration_s))


def _source_trace(workload: str | os.PathLike[str] | Trace) -> Trace:
    """The trace that request sizes (and replayed arrivals) come from."""
    if isinstance(workload, Trace):
        return workload
    if isinstance(workload, str) and workload.strip().lower() in _ALIASES:
        return azure_trace(workload)
    if isinstance(workload, os.PathLike) or (
            isinstance(workload, str) and _looks_like_path(workload)):
        return read_trace_csv(workload)
    near = difflib.get_close_matches(str(workload).strip().lower(), list(_ALIASES), n=1)
    hint = f"did you mean {_ALIASES[near[0]]!r}? " if near else ""
    raise UnknownWorkloadError(
        f"unknown workload {workload!r}; {hint}use one of {', '.join(WORKLOAD_NAMES)} "
        f"or a path to a CSV trace")


def _looks_like_path(text: str) -> bool:
    return (os.path.exists(text) or text.lower().endswith(".csv")
            or os.sep in text or "/" in text)
