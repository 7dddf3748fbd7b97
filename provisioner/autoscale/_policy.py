"""The autoscaling controller: when machines start loading weights, serve, and stop.

The controller is causal and open-loop with respect to the engines: every
`interval_s` it looks at the arrivals of the last `window_s` (what a load balancer
counts) and compares the observed rate per machine with the per-machine capacity
`capacity_rps` (SEMANTICS.md, "Autoscaling"). Its decisions depend only on arrival
times, so both engines run the same schedule of availability windows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..errors import ProvisionerError

__all__ = ["AutoscalePolicy", "ScalingSchedule", "plan_scaling"]


@dataclass(frozen=True)
class AutoscalePolicy:
    """Thresholds on the observed load per machine: rate / (machines x capacity_rps).

    Attributes
    ----------
    scale_out_load : above it (machines counted with those still loading), start
        enough machines to bring the load to `target_load`.
    scale_in_load : when the load with one machine fewer would stay below it, stop
        machines down to the count at `target_load` (at least `min_machines`).
    target_load : the load a scaling step aims at.
    startup_s : weight loading: a started machine serves this long after the decision
        (and is paid for from the decision).
    interval_s : time between decisions; window_s : the arrivals a decision looks at.
    min_machines : never fewer serving machines.
    """

    scale_out_load: float = 0.95
    scale_in_load: float = 0.7
    target_load: float = 0.85
    startup_s: float = 120.0
    interval_s: float = 60.0
    window_s: float = 300.0
    min_machines: int = 1

    def __post_init__(self):
        for name in ("scale_out_load", "scale_in_load", "target_load", "interval_s", "window_s"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise ProvisionerError(f"--{name.replace('_', '-')} must be a finite number > 0 (got {value!r})")
        if not 0 <= self.startup_s < math.inf:
            raise ProvisionerError(f"--startup-s must be a finite number of seconds >= 0 (got {self.startup_s!r})")
        if not self.scale_in_load < self.target_load <= self.scale_out_load:
            raise ProvisionerError(f"the loads must satisfy --scale-in-load < --target-load <= --scale-out-load "
                                   f"(got {self.scale_in_load:g}, {self.target_load:g}, {self.scale_out_load:g})")
        if int(self.min_machines) != self.min_machines or self.min_machines < 1:
            raise ProvisionerError(f"--min-machines must be a whole number >= 1 (got {self.min_machines!r})")


@dataclass(frozen=True)
class ScalingSchedule:
    """One row per machine ever started, in start order (s).

    billed_from_s : when it started loading weights (0 for the machines there at the start).
    serve_from_s : when it takes its first request (billed_from_s + startup_s, or 0).
    serve_until_s : when it stopped taking new requests (inf: never scaled in).
    decision_s, observed_rps, machines : per tick, its time, the rate it observed and the
        machines serving or loading after its decision.
    """

    billed_from_s: np.ndarray
    serve_from_s: np.ndarray
    serve_until_s: np.ndarray
    decision_s: np.ndarray
    observed_rps: np.ndarray
    machines: np.ndarray      # machines counted (serving or loading) after each decision

    @property
    def n_machines(self) -> int:
        return len(self.billed_from_s)

    def serving_at(self, t_s) -> np.ndarray:
        """Machines taking new requests at each time of t_s."""
        t = np.asarray(t_s, dtype=float)[..., np.newaxis]
        return ((self.serve_from_s <= t) & (t < self.serve_until_s)).sum(axis=-1)


def plan_scaling(arrival_s: np.ndarray, duration_s: float, capacity_rps: float, initial_machines: int,
                 policy: AutoscalePolicy) -> ScalingSchedule:
    """Run the controller over a trace's arrivals (sorted, s) up to `duration_s`.

    At each tick t = k x interval_s (0 < t < duration_s) the observed rate is the number
    of arrivals in [t - window_s, t) over the window's length (the elapsed time while
    t < window_s). Scale-out starts new machines (serving after `startup_s`); scale-in
    stops the most recently started serving machines first.
    """
    if not (math.isfinite(capacity_rps) and capacity_rps > 0):
        raise ProvisionerError(f"--capacity-rps must be a finite number > 0 requests/s per machine "
                               f"(got {capacity_rps!r})")
    n0 = max(int(initial_machines), policy.min_machines)
    billed, serve_from, serve_until = [0.0] * n0, [0.0] * n0, [math.inf] * n0
    ticks = np.arange(policy.interval_s, duration_s, policy.interval_s)
    observed = _observed_rps(np.asarray(arrival_s, float), ticks, policy.window_s)
    counted = []
    for t, rate in zip(ticks.tolist(), observed.tolist()):
        live = [k for k in range(len(billed)) if serve_until[k] == math.inf]   # serving or loading
        n = len(live)
        wanted = max(policy.min_machines, math.ceil(rate / (capacity_rps * policy.target_load)))
        if rate > policy.scale_out_load * capacity_rps * n and wanted > n:
            for _ in range(wanted - n):
                billed.append(t)
                serve_from.append(t + policy.startup_s)
                serve_until.append(math.inf)
        elif n > policy.min_machines and rate < policy.scale_in_load * capacity_rps * (n - 1):
            serving = [k for k in live if serve_from[k] <= t]
            for k in sorted(serving, key=lambda k: (serve_from[k], k))[::-1][:max(n - wanted, 0)]:
                if len(serving) <= policy.min_machines:
                    break
                serve_until[k] = t
                serving.remove(k)
        counted.append(sum(1 for u in serve_until if u == math.inf))
    return ScalingSchedule(np.array(billed), np.array(serve_from), np.array(serve_until), ticks, observed,
                           np.array(counted, dtype=np.int64))


def _observed_rps(arrival_s: np.ndarray, ticks: np.ndarray, window_s: float) -> np.ndarray:
    """Arrivals in [t - window, t) per second of the window (clipped at 0) for each tick t."""
    lo = np.maximum(ticks - window_s, 0.0)
    count = np.searchsorted(arrival_s, ticks, side="left") - np.searchsorted(arrival_s, lo, side="left")
    return count / np.maximum(ticks - lo, 1e-12)
