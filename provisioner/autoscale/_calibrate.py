"""Closed-loop thresholds calibrated on the cluster sized for the profile's peak (`auto`).

The static cluster is the fewest machines meeting the SLOs at the peak, so the freeness
(or requests per machine) it runs at there is a level at which the SLOs are known to hold,
for this model, machine,
workload and SLO. The sizing simulation already ran that cluster on the peak trace (a
replayed day: the busiest window that set its count); its
requests' arrival and finish times give, by Little's law, the time integrals of the
requests B and the virtual usage V the controller samples, interval by interval, so the
controller's readings at the peak are known without simulating the cluster again
(SEMANTICS.md, "Closed-loop autoscaling", calibrated thresholds).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import ProvisionerError

__all__ = ["Calibration", "calibrate", "SCALE_OUT_PERCENTILE", "SCALE_IN_FACTOR"]

# Scale out when an interval reads worse than the peak-sized cluster's readings at the peak
# do in nine intervals of ten (freeness: below their 10th percentile; requests per machine:
# above their 90th): that cluster meets its SLOs and is past this level only one tick in
# ten (noise a single tick reacts to), a busier cluster more and more often.
SCALE_OUT_PERCENTILE = {"freeness": 10.0, "queue": 90.0}
# Scale in when one machine fewer would read 1.5x better than the scale-out level (freeness
# above 1.5x it, requests per machine below it / 1.5). Requests per machine grow with the load
# per machine, and F + (mean KV per request) ~ machines x KV per machine / requests shrinks
# inversely, so 1.5x is one machine fewer at no more than ~2/3 of the load at which the
# controller scales out (the rate controller's defaults: 0.7 / 0.95 = 0.74). After a stop
# every interval of the calm window read 1.5x better, so a start right after it needs a
# third of the margin to vanish within one interval; after a start to the scale-out level,
# one machine fewer reads worse than it and no stop follows: the two rules cannot alternate.
SCALE_IN_FACTOR = 1.5
WARMUP_FRACTION = 0.1   # the peak trace starts empty: its first 10% (at least one interval) is left out


@dataclass(frozen=True)
class Calibration:
    """The peak-sized cluster's interval readings of `metric` and the thresholds from them
    (freeness in decode steps; queue in requests per machine)."""

    metric: str
    machines: int
    intervals: int
    interval_s: float   # the length of each reading (the controller's `interval_s`)
    median: float
    scale_out: float   # the readings' SCALE_OUT_PERCENTILE[metric] percentile
    scale_in: float

    def to_json(self) -> dict:
        return {"source": "auto", "from": "the static cluster on the window that set its count (sizing run)",
                "machines": self.machines, "intervals": self.intervals,
                "interval_s": self.interval_s, "peak_median": self.median,
                "scale_out_percentile": SCALE_OUT_PERCENTILE[self.metric], "scale_in_factor": SCALE_IN_FACTOR}


def calibrate(metric: str, peak_trace, first_token_s, finish_s, machines: int, kv_per_machine_tokens: float,
              interval_s: float, on_demand: bool) -> Calibration:
    """Thresholds from the sized cluster's requests on `peak_trace` (their first-token and
    finish times, s): the controller's interval readings, F = (machines x M1 - V) / B
    (freeness) or B / machines (queue)."""
    requests, virtual_tokens = _interval_integrals(peak_trace, np.asarray(first_token_s, float),
                                                   np.asarray(finish_s, float), interval_s, on_demand)
    busy = requests > 0
    if busy.sum() < 2:
        raise ProvisionerError(f"scale_out_{metric} auto: the peak trace has too few requests in "
                               f"{interval_s:g}-s intervals to calibrate on; give the thresholds as numbers",
                               params=(f"scale_out_{metric}",))
    readings = _readings(metric, requests[busy], virtual_tokens[busy], machines, kv_per_machine_tokens)
    out = float(np.percentile(readings, SCALE_OUT_PERCENTILE[metric]))
    if out <= 0:   # freeness only: requests per machine in a busy interval are > 0
        raise ProvisionerError(f"scale_out_freeness auto: the peak-sized cluster has no free KV at its peak "
                               f"(freeness {out:.3g} steps); give the thresholds as numbers",
                               params=("scale_out_freeness",))
    into = out * SCALE_IN_FACTOR if metric == "freeness" else out / SCALE_IN_FACTOR
    return Calibration(metric, machines, int(busy.sum()), float(interval_s), float(np.median(readings)), out, into)


def _readings(metric: str, requests, virtual_tokens, machines: int, kv_per_machine_tokens: float) -> np.ndarray:
    """What the controller reads from an interval's mean requests B and virtual usage V."""
    if metric == "freeness":
        return (machines * kv_per_machine_tokens - virtual_tokens) / requests
    return requests / machines


def _interval_integrals(trace, first_s, finish_s, interval_s: float, on_demand: bool):
    """Per interval after the warm-up: the mean requests in the system B and their mean
    virtual usage V (KV tokens), from each request's stay [arrival, finish).

    Least-work reserves s + n from arrival (queued) to finish. On-demand KV holds the
    prompt until the first token, then grows to s + n: s + n/2 on average while decoding."""
    arrival = trace.arrival_s
    s = trace.prompt_tokens.astype(float)
    n = trace.output_tokens.astype(float)
    start_s = max(interval_s, WARMUP_FRACTION * trace.duration_s)
    edges = np.arange(start_s, trace.duration_s + 1e-9, interval_s)
    requests, virtual = np.zeros(len(edges) - 1), np.zeros(len(edges) - 1)
    for k, (lo, hi) in enumerate(zip(edges[:-1], edges[1:])):
        stay = _overlap(arrival, finish_s, lo, hi)
        requests[k] = stay.sum() / interval_s
        if on_demand:
            virtual[k] = (s * _overlap(arrival, first_s, lo, hi) + (s + n / 2) * _overlap(first_s, finish_s, lo, hi)
                          ).sum() / interval_s
        else:
            virtual[k] = ((s + n) * stay).sum() / interval_s
    return requests, virtual


def _overlap(start_s, end_s, lo: float, hi: float) -> np.ndarray:
    """Seconds of each [start, end) inside [lo, hi)."""
    return np.clip(np.minimum(end_s, hi) - np.maximum(start_s, lo), 0.0, None)
