"""Arrival processes: request arrival times for a target rate over a time window.

Each generator returns exactly ``n = round(rps * duration_s)`` arrivals, so the realized
mean rate ``n / duration_s`` is the requested rate (up to the rounding of ``n``); none of
them changes the requested rate.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from workloads.errors import WorkloadError

# Ten million requests (~40 bytes each across the generator's arrays) bound any trace in memory.
MAX_TRACE_REQUESTS = 10_000_000
# A gamma process's coefficient of variation: past these the shape 1 / cv^2 under- or overflows.
CV_RANGE = (1e-3, 1e3)

__all__ = ["gamma_arrivals", "poisson_arrivals", "replay_arrivals"]

RngLike = int | np.random.Generator | np.random.SeedSequence | None


def poisson_arrivals(rps: float, duration_s: float, rng: RngLike) -> np.ndarray:
    """Poisson arrivals conditioned on their count.

    Draws ``n = round(rps * duration_s)`` times i.i.d. uniform on ``[0, duration_s)``
    and sorts them. Given its count, a Poisson process on a window is exactly this, so
    the gaps are exponential in distribution but the realized rate equals the requested
    rate instead of fluctuating around it.

    Parameters
    ----------
    rps : float
        Mean arrival rate in requests per second, > 0.
    duration_s : float
        Window length in seconds, > 0.
    rng : int, numpy.random.Generator, SeedSequence or None
        Passed to :func:`numpy.random.default_rng`.

    Returns
    -------
    numpy.ndarray of float64, shape (n,)
        Sorted arrival times in seconds, each in ``[0, duration_s)``.

    Raises
    ------
    ValueError
        If ``rps`` or ``duration_s`` is not a finite number > 0, or
        ``round(rps * duration_s) == 0`` ("too few requests").
    """
    n = request_count(rps, duration_s)
    return np.sort(_generator(rng).uniform(0.0, duration_s, size=n))


def gamma_arrivals(rps: float, duration_s: float, cv: float, rng: RngLike) -> np.ndarray:
    """Bursty arrivals: a gamma renewal process whose gaps have coefficient of variation ``cv``.

    Draws ``n = round(rps * duration_s)`` gaps from a Gamma distribution of shape
    ``1 / cv**2`` and rescales them to sum to exactly ``duration_s``, so the mean rate
    is exact. The gaps tile the window as a cycle that starts at a uniformly random
    phase (so, as for Poisson arrivals, nothing pins an arrival to time 0); one gap is
    split across the window's ends. ``cv = 1`` is Poisson-like, ``cv > 1`` bursty.

    Parameters
    ----------
    rps : float
        Mean arrival rate in requests per second, > 0.
    duration_s : float
        Window length in seconds, > 0.
    cv : float
        Coefficient of variation (std / mean) of the inter-arrival gaps, > 0.
    rng : int, numpy.random.Generator, SeedSequence or None
        Passed to :func:`numpy.random.default_rng`.

    Returns
    -------
    numpy.ndarray of float64, shape (n,)
        Sorted arrival times in seconds, each in ``[0, duration_s)``.

    Raises
    ------
    ValueError
        If a parameter is not a finite number > 0, or ``round(rps * duration_s) == 0``.
    """
    n = request_count(rps, duration_s)
    check_cv(cv)
    rng = _generator(rng)
    gaps = rng.gamma(1.0 / cv**2, 1.0, size=n)
    total = float(gaps.sum())
    if not (math.isfinite(total) and total > 0):
        raise WorkloadError(f"cv={cv:g} is too large: every gamma gap underflowed to 0; "
                            f"use a smaller cv (e.g. <= 10)", params=("cv",))
    gaps *= duration_s / total
    starts = np.concatenate(([0.0], np.cumsum(gaps[:-1])))
    phase = rng.uniform(0.0, duration_s)
    return np.sort(np.remainder(starts + phase, duration_s))


def replay_arrivals(base_arrival_s: np.ndarray, rps: float, duration_s: float) -> np.ndarray:
    """Replay recorded arrival times, time-scaled to a target mean rate.

    The base times are shifted to start at 0 and scaled so that their mean gap,
    ``(last - first) / (m - 1)``, becomes ``1 / rps``. If the scaled base has fewer
    than ``n = round(rps * duration_s)`` arrivals, it wraps around: copies of it are
    concatenated, each shifted by ``m / rps`` seconds (its span plus one mean gap), so
    the pattern repeats with the same mean rate. The first ``n`` arrivals are
    returned; arrival ``i`` replays base arrival ``i % m``.

    Parameters
    ----------
    base_arrival_s : array_like of float, shape (m,)
        Recorded arrival times in seconds, sorted ascending, at least two distinct.
    rps : float
        Target mean rate in requests per second, > 0.
    duration_s : float
        Window length in seconds, > 0.

    Returns
    -------
    numpy.ndarray of float64, shape (n,)
        Sorted arrival times in seconds, starting at 0. There are exactly ``n``, so the
        last ones may fall slightly past ``duration_s`` when the base is locally
        slower than its mean (or slightly short of it when faster).

    Raises
    ------
    ValueError
        If ``rps`` or ``duration_s`` is not a finite number > 0,
        ``round(rps * duration_s) == 0``, or the base times are not sorted, finite, and
        spread over a positive time span.
    """
    n = request_count(rps, duration_s)
    base = _replay_base(base_arrival_s)
    m = base.size
    scaled = base * ((m - 1) / (rps * base[-1]))
    copies = -(-n // m)
    shifts = (m / rps) * np.arange(copies, dtype=np.float64)
    return (scaled[np.newaxis, :] + shifts[:, np.newaxis]).ravel()[:n]


def _generator(rng: RngLike) -> np.random.Generator:
    """numpy's generator of `rng`, refusing in one line what numpy refuses with its own error."""
    try:
        return np.random.default_rng(rng)
    except (TypeError, ValueError):   # "a" or -1: numpy's SeedSequence errors
        raise WorkloadError(f"rng must be an integer seed >= 0, a numpy Generator or SeedSequence, or None; "
                            f"got {rng!r:.60}", params=("rng",)) from None


def _replay_base(base_arrival_s: np.ndarray) -> np.ndarray:
    """Validate recorded arrival times; return them shifted to start at 0."""
    try:
        base = np.asarray(base_arrival_s, dtype=np.float64)
    except (TypeError, ValueError):   # ["a", "b"] was numpy's "could not convert string to float"
        raise WorkloadError(f"base_arrival_s must be arrival times in seconds (numbers), got "
                            f"{base_arrival_s!r:.60}", params=("base_arrival_s",)) from None
    if base.ndim != 1 or base.size < 2 or not np.all(np.isfinite(base)):
        raise WorkloadError("replay needs at least 2 finite base arrival times (shape (m,)); "
                         "use arrival='poisson' for a shorter trace")
    if np.any(np.diff(base) < 0):
        raise WorkloadError("base_arrival_s must be sorted ascending; sort it first")
    if base[-1] == base[0]:
        raise WorkloadError("all base arrivals are at the same time, so the trace has no "
                         "rate to scale; use arrival='poisson'")
    return base - base[0]


def request_count(rps: float, duration_s: float) -> int:
    """``round(rps * duration_s)``, refusing bad parameters and empty traces."""
    check_positive("rps", rps, "the mean request rate in requests per second, e.g. 70")
    check_positive("duration_s", duration_s, "the window length in seconds, e.g. 120")
    expected = rps * duration_s
    n = round(expected) if expected <= MAX_TRACE_REQUESTS else math.inf   # round(inf) would raise
    if n < 1:
        raise WorkloadError(f"too few requests: rps * duration_s = {expected:g} "
                            f"rounds to 0 requests; raise rps or duration_s", params=("rps", "duration_s"))
    if n > MAX_TRACE_REQUESTS:
        raise WorkloadError(f"{rps:g} requests/s over {duration_s:g} s is {expected:.3g} requests, more than a trace "
                            f"holds (at most {MAX_TRACE_REQUESTS:,}, ~{MAX_TRACE_REQUESTS * 40 / 1e9:.1f} GB); "
                            f"lower the rate or shorten the duration", params=("rps", "duration_s"))
    return int(n)


def check_cv(cv: object) -> None:
    """A gamma process's coefficient of variation: finite, within `CV_RANGE` (outside it the
    gamma shape 1 / cv^2 overflows or underflows, or every gap but one is 0)."""
    check_positive("cv", cv, "the coefficient of variation of the gaps, e.g. 2.0")
    low, high = CV_RANGE
    if not low <= cv <= high:
        raise WorkloadError(f"cv must be between {low:g} and {high:g}, got {cv!r}; give the coefficient of "
                            f"variation of the gaps, e.g. 2.0 (1 is Poisson)", params=("cv",))


def check_positive(name: str, value: object, meaning: str) -> None:
    real = isinstance(value, numbers.Real) and not isinstance(value, bool)
    try:
        ok = real and math.isfinite(float(value)) and value > 0
    except OverflowError:   # an integer too large for a float
        raise WorkloadError(f"{name} must be a finite number > 0, got an integer too large for a float; "
                            f"give {meaning}", params=(name,)) from None
    if not ok:
        raise WorkloadError(f"{name} must be a finite number > 0, got {value!r}; "
                            f"give {meaning}", params=(name,))
