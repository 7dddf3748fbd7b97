"""Latency SLOs as slowdowns (Splitwise Table VI) and their evaluation.

A request's slowdown for a metric is its latency divided by the latency of the same
request alone on one DGX-A100 (same model, TP 8), from the latency model. A design
meets the SLO when the p50/p90/p99 slowdowns of TTFT, TBT and E2E are all within
their limits. The margin of a check is limit / observed - 1 (negative = violated);
the binding SLO is the one with the smallest margin.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ._validation import Interval, Real, shown
from .errors import ProvisionerError

METRICS = ("ttft", "tbt", "e2e")
PERCENTILES = (50, 90, 99)
SLO_REFERENCE_MACHINE = "dgx-a100"
SLO_REFERENCE_TP = 8
_POSITIVE = Interval(Real, 0, None, closed="neither")


@dataclass(frozen=True)
class SLO:
    """Slowdown limits per metric at p50, p90, p99."""

    ttft: tuple[float, float, float] = (2.0, 3.0, 6.0)
    tbt: tuple[float, float, float] = (1.25, 1.5, 5.0)
    e2e: tuple[float, float, float] = (1.25, 1.5, 5.0)
    reference_machine: str = field(default=SLO_REFERENCE_MACHINE)

    def __post_init__(self):
        # Kept as tuples of floats: a list or an array made the frozen SLO unhashable and its
        # == ambiguous; a string, None or a lone number was a TypeError from numpy or len().
        for m in METRICS:
            limits = getattr(self, m)
            items = tuple(limits) if np.iterable(limits) and not isinstance(limits, str) else None
            if items is None or len(items) != 3 or not all(_POSITIVE.is_satisfied_by(v) for v in items):
                raise ProvisionerError(f"SLO {m} limits must be three slowdowns > 0 for p50, p90, p99, e.g. "
                                       f"{getattr(SLO, m)} (got {shown(limits)[:80]})", params=(m,))
            object.__setattr__(self, m, tuple(float(v) for v in items))
        if not isinstance(self.reference_machine, str):
            raise ProvisionerError(f"SLO reference_machine must be a catalog machine name such as "
                                   f"'{SLO_REFERENCE_MACHINE}' (got {shown(self.reference_machine)[:60]})",
                                   params=("reference_machine",))

    def scaled(self, factor: float) -> "SLO":
        """Looser (factor > 1) or tighter (< 1) limits, never clamped: a limit below 1 asks
        for faster than alone on the reference machine, which only faster hardware can
        meet, and the search says so when nothing can."""
        if not _POSITIVE.is_satisfied_by(factor):
            raise ProvisionerError(f"SLO.scaled: factor must be a finite number > 0 (got {shown(factor)[:60]})",
                                   params=("factor",))
        out = {m: tuple(v * factor for v in getattr(self, m)) for m in METRICS}
        if not all(np.isfinite(v) and v > 0 for limits in out.values() for v in limits):
            raise ProvisionerError(f"slo_scale {factor:g} makes the limits {'infinite' if factor > 1 else '0'}; give "
                                   f"a factor such as 2 (looser) or 0.5 (tighter)", params=("slo_scale",))
        return SLO(**out, reference_machine=self.reference_machine)

    def limits(self) -> np.ndarray:
        """Shape (3 metrics, 3 percentiles)."""
        return np.array([getattr(self, m) for m in METRICS], dtype=float)

    def check_names(self) -> list[str]:
        return [f"{m}_p{p}" for m in METRICS for p in PERCENTILES]


def row_percentiles(x: np.ndarray) -> np.ndarray:
    """p50, p90, p99 of each row of x (d, r), shape (d, 3); +inf entries count as largest.

    Columns that are NaN in every row (TBT of one-token requests) are dropped first;
    NaN must not occur elsewhere. numpy's vectorized partition does the work (nanpercentile
    loops over rows in Python: 30x slower on a design space).
    """
    x = np.asarray(x, dtype=float)
    keep = ~np.all(np.isnan(x), axis=0)
    x = x[:, keep]
    if x.shape[1] == 0:
        return np.full((x.shape[0], len(PERCENTILES)), np.nan)
    huge = np.isinf(x)
    if huge.any():   # interpolating between infinities gives NaN; use a finite stand-in
        x = np.where(huge, _INF_STAND_IN, x)
    out = np.percentile(x, PERCENTILES, axis=1).T
    return np.where(out >= _INF_STAND_IN / 10, np.inf, out)


_INF_STAND_IN = 1e300


def slowdown_percentiles(latency_s: np.ndarray, solo_s: np.ndarray) -> np.ndarray:
    """Percentiles (p50, p90, p99) of per-request slowdowns, over the last axis.

    latency_s : (d, n_requests), NaN where undefined (TBT of one-token requests).
    solo_s : (n_requests,), the same requests alone on the reference machine.
    Returns (d, 3).
    """
    return row_percentiles(np.atleast_2d(latency_s) / solo_s)


def evaluate_slo(slowdowns: np.ndarray, slo: SLO):
    """Slowdowns (n, 3 metrics, 3 percentiles) -> (met (n,), margins (n, 3, 3), binding names (n,))."""
    limits = slo.limits()
    # NaN slowdown: the metric is undefined for every request (TBT when all have one
    # output token), so that SLO does not apply; it neither fails nor binds.
    applicable = ~np.isnan(slowdowns)
    with np.errstate(divide="ignore", invalid="ignore"):
        margins = limits / slowdowns - 1.0
    margins = np.where(np.isfinite(margins) | ~applicable, margins, -np.inf)
    flat = np.where(applicable, margins, np.inf).reshape(len(margins), -1)
    met = np.all(flat >= 0.0, axis=1)
    names = np.array(slo.check_names())
    binding = names[np.argmin(flat, axis=1)]
    return met, margins, binding
