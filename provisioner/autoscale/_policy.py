"""The autoscaling controller: when machines start loading weights, serve, and stop.

The controller is causal and open-loop with respect to the engines: every
`interval_s` it looks at the arrivals of the last `window_s` (what a load balancer
counts) and compares the observed rate per machine with the per-machine capacity
`capacity_rps` (SEMANTICS.md, "Autoscaling"). Its decisions depend only on arrival
times, so both engines run the same schedule of availability windows.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from .._validation import shown
from ..designs import MAX_DESIGN_MACHINES
from ..errors import ProvisionerError
from ..sim import SCALE_METRICS
from ._calibrate import SCALE_IN_FACTOR

MAX_MACHINES = 100_000       # machines the autoscaled cluster may need at the peak

__all__ = ["AutoscalePolicy", "ScalingSchedule", "plan_scaling", "SCALE_ON"]

SCALE_ON = ("rate", "freeness", "queue")


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
    scale_on : "rate" (the thresholds above on the observed arrival rate, planned before
        the run) or, closed-loop inside the discrete-event engine, "freeness" (Llumnix's
        pooled freeness in decode steps: scale out below `scale_out_freeness`, in when one
        machine fewer would stay above `scale_in_freeness`) or "queue" (requests queued or in
        service per machine: out above `scale_out_queue`, in when one machine fewer would stay
        below `scale_in_queue`). A threshold None is `auto`: calibrated on the static cluster
        at the peak (`_calibrate.py`, `autoscale` resolves it; `with_thresholds`).
    max_machines : never more machines serving or loading (None: the static peak count).
    """

    scale_out_load: float = 0.95
    scale_in_load: float = 0.7
    target_load: float = 0.85
    startup_s: float = 120.0
    interval_s: float = 60.0
    window_s: float = 300.0
    min_machines: int = 1
    scale_on: str = "rate"
    # None: `auto`, calibrated on the cluster sized for the peak (`_calibrate.py`). Llumnix's
    # own 10 / 60 (its config/default.py) suit 7B models on 24-GB GPUs, where KV binds; on a
    # DGX running BLOOM-176B the peak-sized cluster reads ~50k steps and 10 never fires.
    scale_out_freeness: float | None = None
    scale_in_freeness: float | None = None
    scale_out_queue: float | None = None   # None: auto, as the freeness
    scale_in_queue: float | None = None
    max_machines: int | None = None

    RATE_FIELDS = ("scale_out_load", "scale_in_load", "target_load", "startup_s", "interval_s", "window_s",
                   "min_machines")

    def __post_init__(self):
        for name in ("scale_out_load", "scale_in_load", "target_load", "interval_s", "window_s"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise ProvisionerError(f"{name} must be a finite number > 0 (got {value!r})", params=(name,))
        if not 0 <= self.startup_s < math.inf:
            raise ProvisionerError(f"startup_s must be a finite number of seconds >= 0 (got {self.startup_s!r})",
                                   params=("startup_s",))
        if not self.scale_in_load < self.target_load <= self.scale_out_load:
            raise ProvisionerError(f"the loads must satisfy scale_in_load < target_load <= scale_out_load "
                                   f"(got {self.scale_in_load:g}, {self.target_load:g}, {self.scale_out_load:g})",
                                   params=("scale_in_load", "target_load", "scale_out_load"))
        if int(self.min_machines) != self.min_machines or not 1 <= self.min_machines <= MAX_MACHINES:
            raise ProvisionerError(f"min_machines must be a whole number in [1, {MAX_MACHINES}] "
                                   f"(got {shown(self.min_machines)})", params=("min_machines",))
        if self.scale_on not in SCALE_ON:
            raise ProvisionerError(f"scale_on must be one of {', '.join(SCALE_ON)} (got '{self.scale_on}')",
                                   params=("scale_on",))
        self._check_closed_loop()

    def _check_closed_loop(self):
        for name in ("scale_out_freeness", "scale_in_freeness", "scale_out_queue", "scale_in_queue"):
            value = getattr(self, name)
            if value is None:
                continue   # auto
            if not (isinstance(value, (int, float)) and math.isfinite(value)):
                raise ProvisionerError(f"{name} must be a finite number, or None (auto) (got {value!r})", params=(name,))
        for metric in SCALE_METRICS:
            self._check_thresholds(metric)
        if self.max_machines is not None and (int(self.max_machines) != self.max_machines
                                              or self.max_machines < self.min_machines):
            raise ProvisionerError(f"max_machines must be a whole number >= min_machines ({self.min_machines}) "
                                   f"(got {self.max_machines!r})", params=("max_machines", "min_machines"))
        if self.closed_loop:   # was refused after the sizing run, as "--machines must be 1-100,000 (got 2x it)"
            most = MAX_DESIGN_MACHINES // 2
            for name in ("max_machines", "min_machines"):
                value = getattr(self, name)
                if value is not None and value > most:
                    raise ProvisionerError(f"{name} must be at most {most:,} with scale_on {self.scale_on}: the "
                                           f"engine keeps a slot per machine serving or loading and one per draining, "
                                           f"{MAX_DESIGN_MACHINES:,} at most (got {shown(value)})",
                                           params=(name, "scale_on"))

    # Both thresholds given: scale out where the cluster is worse off than where it scales in
    # (freeness: fewer free decode steps; queue: more requests per machine).
    _THRESHOLD_ORDER = {
        "freeness": (lambda out, into: out < into,
                     "scale_out_freeness must be below scale_in_freeness (scale out when the cluster is less "
                     "free than when it scales in; got {out:g} >= {into:g})"),
        "queue": (lambda out, into: 0 <= into < out,
                  "the queues must satisfy 0 <= scale_in_queue < scale_out_queue (requests per machine; "
                  "got {into:g}, {out:g})"),
    }

    def _check_thresholds(self, metric: str):
        """Both given: in the order above. One given: the other follows by the calibration's
        factor, which needs a positive number."""
        out, into = getattr(self, f"scale_out_{metric}"), getattr(self, f"scale_in_{metric}")
        ordered, rule = self._THRESHOLD_ORDER[metric]
        if out is not None and into is not None and not ordered(out, into):
            raise ProvisionerError(rule.format(out=out, into=into), params=(f"scale_out_{metric}", f"scale_in_{metric}"))
        for name, value in ((f"scale_out_{metric}", out), (f"scale_in_{metric}", into)):
            if (out is None) != (into is None) and value is not None and value <= 0:
                raise ProvisionerError(f"{name} {value:g} with the other {metric} threshold auto: give a number > 0 "
                                       f"(the other is it x or / {SCALE_IN_FACTOR:g}), or both", params=(name,))

    @property
    def thresholds_auto(self) -> bool:
        """Both thresholds of the closed-loop metric left to the calibration on the peak-sized cluster."""
        return (self.closed_loop and getattr(self, f"scale_out_{self.scale_on}") is None
                and getattr(self, f"scale_in_{self.scale_on}") is None)

    def with_thresholds(self, calibrated_out: float | None = None) -> "AutoscalePolicy":
        """The policy with both thresholds of its metric numbers: a lone given one sets the
        other by `SCALE_IN_FACTOR` (freeness: in = out x it; queue: in = out / it); both auto
        take `calibrated_out` (the calibration's scale-out level) and its in."""
        metric = self.scale_on
        out, into = getattr(self, f"scale_out_{metric}"), getattr(self, f"scale_in_{metric}")
        better = SCALE_IN_FACTOR if metric == "freeness" else 1.0 / SCALE_IN_FACTOR   # in = out x better
        if out is None and into is None:
            out = calibrated_out
        if out is None:
            out = into / better
        if into is None:
            into = out * better
        return dataclasses.replace(self, **{f"scale_out_{metric}": float(out), f"scale_in_{metric}": float(into)})

    @property
    def closed_loop(self) -> bool:
        return self.scale_on != "rate"

    def to_json(self) -> dict:
        """The settings of this policy's `scale_on` (rate: exactly the fields it always had)."""
        out = {k: getattr(self, k) for k in self.RATE_FIELDS}
        if self.closed_loop:
            del out["scale_out_load"], out["scale_in_load"]   # target_load, window_s: the warm start at 0
            metric = self.scale_on
            out.update({"scale_on": metric, f"scale_out_{metric}": getattr(self, f"scale_out_{metric}"),
                        f"scale_in_{metric}": getattr(self, f"scale_in_{metric}"), "max_machines": self.max_machines})
        return out


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
    # Closed loop: what each tick read (instead of observed_rps) and how many ticks acted.
    metric_name: str = "observed_rps"
    events: int | None = None
    released_s: np.ndarray | None = None   # per machine: end of its draining (inf: never stopped)

    @property
    def n_machines(self) -> int:
        return len(self.billed_from_s)

    @property
    def machines_range(self) -> tuple[int, int]:
        """(fewest, most) machines serving or loading over the day: after each decision and
        at time 0, where the day starts with the machines billed from 0 (the first window's
        rate can start more than any later decision keeps)."""
        counts = np.append(np.count_nonzero(self.billed_from_s == 0), self.machines)
        return int(counts.min()), int(counts.max())

    @property
    def scaling_events(self) -> int:
        """Decisions that started or stopped machines."""
        if self.events is not None:
            return self.events
        started = self.billed_from_s[self.billed_from_s > 0]
        stopped = self.serve_until_s[np.isfinite(self.serve_until_s)]
        return len(np.unique(started)) + len(np.unique(stopped))

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
        raise ProvisionerError(f"capacity_rps must be a finite number > 0 requests/s per machine "
                               f"(got {capacity_rps!r})", params=("capacity_rps",))
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
            # those that took requests before t: one whose weights finish loading at t has not
            # served, and stopped now it would serve in the empty window [t, t)
            serving = [k for k in live if serve_from[k] < t]
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
