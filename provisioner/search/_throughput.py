"""Sustainable throughput: the highest load at which a design meets every SLO.

Traces at different loads come from `workloads.TraceGenerator`: one unit-rate stream of
requests per workload, arrival process and seed, with time divided by the load. A trace
at a higher load therefore holds the same requests, sooner, plus more of them — so the
only thing that changes with the load is the load, which is what makes "more load never
helps" testable and the bisection reproducible.

Bisection is on the logarithm of the load. `max_sustainable_rps` answers the goal
throughput question for a set of candidate designs (the best of a family within a
budget) with ONE batched simulation per step: all designs still in the race at the
same load. `sustainable_rps` gives every design its own value; designs whose brackets
sit at the same load share a simulation.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from workloads import TraceGenerator

from ..designs import DesignBatch

MIN_REQUESTS = 20          # a trace shorter than this says nothing about p99
DEFAULT_REL_TOL = 0.01     # bisection stops when hi / lo <= 1 + rel_tol


# The search's traces come from the one trace generator (nested across rates).
LoadScaledTraces = TraceGenerator


def _geo_mid(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    # Rounded to 4 significant digits so designs with equal brackets share a trace.
    mid = np.sqrt(lo * hi)
    return np.array([float(f"{m:.4g}") for m in np.atleast_1d(mid)])


def max_sustainable_rps(designs: DesignBatch, traces: LoadScaledTraces, evaluate_at: Callable, *,
                        rps_lo: float, rps_hi: float, rel_tol: float = DEFAULT_REL_TOL,
                        on_step: Callable[[], None] | None = None):
    """The highest load at which at least one of `designs` meets every SLO.

    Parameters
    ----------
    designs : candidates (e.g. the designs a budget affords), n of them.
    evaluate_at : (designs, trace) -> frame with `slo_met` (the one evaluation path).
    rps_lo, rps_hi : initial bracket; widened (x/÷ 2) until lo is feasible and hi is not.

    Returns
    -------
    (rps, frame) : the load and the frame of the designs still in the race at that load
        (rows with `slo_met` True are the designs that sustain it); (nan, None) if no
        design meets the SLOs at any load down to a few requests per trace.
    """
    alive = np.arange(len(designs))
    lo, hi = float(rps_lo), float(rps_hi)
    min_rps = MIN_REQUESTS / traces.duration_s

    def run(rps, idx):
        frame = evaluate_at(designs.take(idx), traces.at(rps))
        if on_step is not None:
            on_step()
        return frame

    # Make the bracket valid: some design feasible at lo, none at hi.
    frame_lo = run(lo, alive)
    while not frame_lo["slo_met"].any():
        if lo <= min_rps:   # missed even at the fewest requests a p99 means anything on
            return float("nan"), None
        hi, lo = lo, max(lo / 2.0, min_rps)
        frame_lo = run(lo, alive)
    alive = alive[frame_lo["slo_met"].to_numpy(bool)]
    frame_lo = frame_lo[frame_lo["slo_met"].to_numpy(bool)].reset_index(drop=True)
    while hi <= lo * (1 + rel_tol):
        hi = lo * 2.0
    for _ in range(8):
        frame_hi = run(hi, alive)
        if not frame_hi["slo_met"].any():
            break
        ok = frame_hi["slo_met"].to_numpy(bool)
        alive, frame_lo, lo, hi = alive[ok], frame_hi[ok].reset_index(drop=True), hi, hi * 2.0
    while hi > lo * (1 + rel_tol):
        mid = float(_geo_mid(np.array([lo]), np.array([hi]))[0])
        if not lo < mid < hi:
            break
        frame = run(mid, alive)
        ok = frame["slo_met"].to_numpy(bool)
        if ok.any():
            alive, frame_lo, lo = alive[ok], frame[ok].reset_index(drop=True), mid
        else:
            hi = mid
    frame_lo = frame_lo.assign(candidate=alive)
    return lo, frame_lo


def sustainable_rps(designs, traces: LoadScaledTraces, evaluate_at: Callable, *, rps_lo: float,
                    rps_hi: float, rel_tol: float = DEFAULT_REL_TOL, return_bracket: bool = False):
    """Each design's highest load meeting every SLO (requests/s), shape (n,); NaN if none.

    Each step simulates every unfinished design at the geometric middle of its bracket;
    designs at the same load share one batched call. Brackets are widened per design
    until lo is feasible and hi is not. With `return_bracket`, returns (lo, hi): every
    design met the SLOs at lo and missed one at hi <= lo x (1 + rel_tol).
    """
    batch = DesignBatch.from_designs(designs)
    n = len(batch)
    lo = np.full(n, float(rps_lo))
    hi = np.full(n, float(rps_hi))
    lo_ok = np.zeros(n, bool)      # lo verified feasible
    hi_ok = np.zeros(n, bool)      # hi verified infeasible
    dead = np.zeros(n, bool)       # infeasible even at the smallest load
    min_rps = MIN_REQUESTS / traces.duration_s

    def step(load: np.ndarray, idx: np.ndarray) -> np.ndarray:
        met = np.zeros(len(idx), bool)
        for rps in np.unique(load):
            sel = load == rps
            frame = evaluate_at(batch.take(idx[sel]), traces.at(float(rps)))
            met[sel] = frame["slo_met"].to_numpy(bool)
        return met

    for _ in range(64):
        need_lo = np.flatnonzero(~lo_ok & ~dead)
        need_hi = np.flatnonzero(lo_ok & ~hi_ok)
        bisect = np.flatnonzero(lo_ok & hi_ok & (hi > lo * (1 + rel_tol)))
        if not (len(need_lo) or len(need_hi) or len(bisect)):
            break
        idx = np.concatenate([need_lo, need_hi, bisect])
        load = np.concatenate([lo[need_lo], hi[need_hi], _geo_mid(lo[bisect], hi[bisect]) if len(bisect) else []])
        met = step(load, idx)
        k1, k2 = len(need_lo), len(need_lo) + len(need_hi)
        for i, ok in zip(need_lo, met[:k1]):
            if ok:
                lo_ok[i] = True
            else:
                dead[i] = lo[i] <= min_rps
                hi[i], lo[i] = lo[i], max(lo[i] / 2.0, min_rps)
                hi_ok[i] = True
        for i, ok in zip(need_hi, met[k1:k2]):
            if ok:
                lo[i], hi[i] = hi[i], hi[i] * 2.0
            else:
                hi_ok[i] = True
        for i, mid, ok in zip(bisect, load[k2:], met[k2:]):
            if ok:
                lo[i] = mid
            else:
                hi[i] = mid
    out = np.where(dead | ~lo_ok, np.nan, lo)
    return (out, np.where(dead | ~lo_ok, np.nan, hi)) if return_bracket else out

