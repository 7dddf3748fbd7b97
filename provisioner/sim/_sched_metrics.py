"""What the on-demand schedulers add to a result: preemption, migration and fragmentation
counts, per-priority latency percentiles, and which requests are high priority."""

from __future__ import annotations

import math
from numbers import Real

import numpy as np

from ..errors import ProvisionerError
from ..schedulers import SCHEDULERS
from ..slo import METRICS, PERCENTILES, evaluate_slo, row_percentiles
from ._inputs import EngineOutput, SimInputs
from ._metrics import metric_slowdowns, request_latencies

_GOLDEN = (math.sqrt(5.0) - 1.0) / 2.0


def high_priority_mask(trace, fraction: float) -> np.ndarray | None:
    """Which requests are high priority: the trace's own `high_priority` column when it has
    one, else a share `fraction` of them spread evenly over the trace (request i is high
    when frac(i x golden ratio) < fraction: deterministic, no seed, and within one request
    of the exact share in every window). None when there are none."""
    own = getattr(trace, "high_priority", None)
    if own is not None:
        return np.asarray(own, dtype=bool)
    # a string was a TypeError from the comparison
    if isinstance(fraction, bool) or not isinstance(fraction, Real) or not 0.0 <= fraction <= 1.0:
        raise ProvisionerError(f"high_priority_fraction must be a number in [0, 1] (got {fraction!r})",
                               params=("high_priority_fraction",))
    if fraction == 0.0:
        return None
    i = np.arange(len(trace.arrival_s), dtype=float)
    return np.mod(i * _GOLDEN, 1.0) < fraction


def refuse_on_demand_in_fluid(inputs: SimInputs) -> None:
    """The fluid engine models the least-work rule only (SEMANTICS.md, "Schedulers")."""
    if inputs.scheduler is not None and np.any(inputs.scheduler != 0):
        name = SCHEDULERS[int(inputs.scheduler[np.flatnonzero(inputs.scheduler)[0]])]
        what = "SplitwiseSim's routing and preemption" if name == "splitwisesim" else \
            "on-demand KV, preemption, migration"
        raise ProvisionerError(f"the fluid engine does not model --scheduler {name} ({what}): use --engine des")


def add_scheduler_columns(frame, out: EngineOutput, inputs: SimInputs, trace, solo=None, slo=None,
                          high_slo=None) -> None:
    """Counts of the on-demand schedulers and, with high-priority requests, the latency
    percentiles of each priority class (`{metric}_p{p}_s_high` / `_low`) and, given the
    requests' `solo` latencies and the `slo`, each class's own SLO verdict
    (`slo_met_high` / `_low`, `binding_slo_high` / `_low`; the high class against `high_slo`
    when given). Nothing is added for
    least-work results, so they keep their columns."""
    if out.scheduler_stats is None:
        return
    from ._des_llumnix import SCHEDULER_STATS
    for k, name in enumerate(SCHEDULER_STATS):
        frame[name] = out.scheduler_stats[:, k]
    frame["scheduler_fragmentation_mean"] = frame.pop("fragmentation_mean")
    if out.swap_stats is not None:   # swap preemption
        frame["swaps"], frame["swapped_bytes"] = out.swap_stats[:, 0], out.swap_stats[:, 1]
    if inputs.high_priority is None or out.first_token_s is None:
        return
    lat = request_latencies(out, trace.arrival_s, trace.output_tokens.astype(float))
    for label, mask in (("high", inputs.high_priority), ("low", ~inputs.high_priority)):
        for k, metric in enumerate(METRICS):
            pct = row_percentiles(lat[k][:, mask]) if mask.any() else np.full((len(frame), len(PERCENTILES)), np.nan)
            for j, p in enumerate(PERCENTILES):
                frame[f"{metric}_p{p}_s_{label}"] = pct[:, j]
        if solo is not None and slo is not None and mask.any():
            _class_verdict(frame, lat, solo, high_slo if label == "high" and high_slo else slo, mask, label)


def _class_verdict(frame, lat, solo, slo, mask: np.ndarray, label: str) -> None:
    """The SLO verdict of one priority class: its own requests' slowdown percentiles
    against `slo` (a class meets it on its requests alone)."""
    met, _, binding = evaluate_slo(metric_slowdowns(lat, solo, mask), slo)
    frame[f"slo_met_{label}"] = met
    frame[f"binding_slo_{label}"] = binding
