"""Simulate one design whose servers come and go (autoscaling): availability windows."""

from __future__ import annotations

import numpy as np

from perfmodels import LatencyModel

from ..schedulers import DEFAULT_SWAP_SPACE_GB
from ..slo import SLO
from ._metrics import summarize
from ._servable import KV_CAPACITY_CHECK, unservable_requests

__all__ = ["simulate_scaled"]


def simulate_scaled(design, trace, model, active_from_s: np.ndarray, active_until_s: np.ndarray, *,
                    engine: str = "fluid", slo: SLO | None = None, perf: LatencyModel | None = None,
                    preemption: str = "recompute", swap_space_gb: float = DEFAULT_SWAP_SPACE_GB):
    """Score one design whose server k takes new requests only in [active_from_s[k],
    active_until_s[k]) (SEMANTICS.md, "Availability windows").

    Parameters
    ----------
    design : a `Design` (a baseline or splitwiser family) with as many servers as windows.
    active_from_s, active_until_s : (servers,) float64 s.

    Returns
    -------
    (row, drained_s) : the one-row result frame of `simulate` (its cost and power are
    those of every server at once, not the scaled cluster's) and, per server, when its
    last request finished (s; 0 for a server that served none).
    """
    from . import _run

    slo = slo if slo is not None else SLO()
    perf = perf if perf is not None else LatencyModel()
    windows = (np.atleast_2d(np.asarray(active_from_s, float)), np.atleast_2d(np.asarray(active_until_s, float)))
    batch, inputs, out, solo = _run([design], trace, perf.llm(model), perf, engine, slo, False,
                                    keep_requests=False, windows=windows, preemption=preemption,
                                    swap_space_gb=swap_space_gb)
    return _row(batch, inputs, out, solo, trace, slo, perf, engine), out.drained_s[0]


def simulate_controlled(design, trace, model, scaling, *, engine: str = "des", slo: SLO | None = None,
                        perf: LatencyModel | None = None, preemption: str = "recompute",
                        swap_space_gb: float = DEFAULT_SWAP_SPACE_GB):
    """Score one baseline design of `2 x scaling.max_machines` machine slots under a
    closed-loop controller (`ScalingControl`; SEMANTICS.md, "Closed-loop autoscaling").

    Returns
    -------
    (row, log) : the one-row result frame of `simulate` (cost and power those of every slot,
    not the scaled cluster's) and the controller's log (`_control.scaling_log_arrays`).
    """
    from . import _run

    slo = slo if slo is not None else SLO()
    perf = perf if perf is not None else LatencyModel()
    batch, inputs, out, solo = _run([design], trace, perf.llm(model), perf, engine, slo, False,
                                    keep_requests=False, scaling=scaling, preemption=preemption,
                                    swap_space_gb=swap_space_gb)
    return _row(batch, inputs, out, solo, trace, slo, perf, engine), out.scaling[0]


def _row(batch, inputs, out, solo, trace, slo, perf, engine):
    """The one-row result frame of `simulate` for a scaled run."""
    from . import cluster_cost_power

    cost, power = cluster_cost_power(batch, perf.catalog)
    result = summarize(batch.to_frame(), out, trace, solo, slo, cost, power, inputs.n_machines)
    result.insert(0, "engine", engine)
    result["stopped_early"] = False
    result["unservable_requests"] = unservable_requests(inputs)
    failed = result["unservable_requests"].to_numpy() > 0
    result.loc[failed, "slo_met"] = False
    result.loc[failed, "binding_slo"] = KV_CAPACITY_CHECK
    return result
