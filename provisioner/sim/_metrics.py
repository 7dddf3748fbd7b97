"""Per-request times -> one row per design: percentiles, slowdowns, SLO verdict, cost, power."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..slo import METRICS, PERCENTILES, SLO, evaluate_slo, row_percentiles, slowdown_percentiles
from ._inputs import EngineOutput


def request_latencies(out: EngineOutput, arrival_s: np.ndarray, output_tokens: np.ndarray):
    """TTFT, TBT, E2E (s), each (d, r); TBT is NaN for one-token requests."""
    ttft = out.first_token_s - arrival_s
    e2e = out.finish_s - arrival_s
    extra = output_tokens - 1.0
    with np.errstate(invalid="ignore", divide="ignore"):
        tbt = np.where(extra > 0, (e2e - ttft) / extra, np.nan)
    tbt = np.where((extra > 0) & np.isinf(e2e), np.inf, tbt)   # never finished (stopped design)
    return ttft, tbt, e2e


# A DGX idles at roughly a third of its rated power (fans, CPUs, HBM refresh, NICs);
# drawn power rises linearly with utilization to the (capped) rated power.
IDLE_POWER_FRACTION = 0.3


def summarize(designs_frame: pd.DataFrame, out: EngineOutput, trace, solo, slo: SLO,
              cost_usd_per_h: np.ndarray, power_kw: np.ndarray, servers: np.ndarray) -> pd.DataFrame:
    """The result table (one row per design, units in column names).

    solo : (ttft, tbt, e2e) arrays (r,) of each request alone on the SLO reference.
    power_kw : provisioned power (kW); energy per request uses the power drawn at the
        cluster's utilization.
    servers : (d, 2) model replicas per pool (machines x replicas per machine).
    """
    latency_pct, slowdowns = _percentiles(out, trace, solo)
    cols = {}
    for k, name in enumerate(METRICS):
        for j, p in enumerate(PERCENTILES):
            cols[f"{name}_p{p}_s"] = latency_pct[:, k, j]
    met, margins, binding = evaluate_slo(slowdowns, slo)
    for k, name in enumerate(METRICS):
        for j, p in enumerate(PERCENTILES):
            cols[f"slowdown_{name}_p{p}"] = slowdowns[:, k, j]
            cols[f"margin_{name}_p{p}"] = margins[:, k, j]
    makespan = _makespan(out, trace)
    n = len(trace)
    with np.errstate(invalid="ignore", divide="ignore"):
        util = out.busy_s / (servers * makespan[:, None])
        cluster_util = np.nan_to_num(out.busy_s.sum(axis=1) / (servers.sum(axis=1) * makespan))
        mean_batch = out.decode_batch_time_s / out.decode_time_s
    drawn_kw = power_kw * (IDLE_POWER_FRACTION + (1 - IDLE_POWER_FRACTION) * np.clip(cluster_util, 0, 1))
    frame = designs_frame.reset_index(drop=True).copy()
    frame = frame.assign(
        **cols,
        slo_met=met, binding_slo=binding, min_margin=np.where(np.isnan(margins), np.inf, margins).reshape(len(met), -1).min(axis=1),
        requests=n, throughput_rps=n / makespan, makespan_s=makespan,
        prompt_pool_utilization=util[:, 0], token_pool_utilization=util[:, 1],
        prompt_pool_mean_decode_batch=mean_batch[:, 0], token_pool_mean_decode_batch=mean_batch[:, 1],
        borrowed_decodes=out.borrowed_decodes, borrowed_prefills=out.borrowed_prefills,
        kv_transfer_visible_mean_s=np.where(out.kv_transfers > 0, out.kv_visible_s_sum / np.maximum(out.kv_transfers, 1), 0.0),
        cost_usd_per_h=cost_usd_per_h, power_kw=power_kw,
        energy_wh_per_request=drawn_kw * 1e3 * makespan / 3600.0 / n,
    )
    return frame


def _percentiles(out: EngineOutput, trace, solo):
    """(latency percentiles (d, 3, 3) in s, slowdown percentiles (d, 3, 3)), from the
    engine when it computed them, else from the per-request times."""
    if out.latency_pct_s is not None and out.slowdown_pct is not None:
        return out.latency_pct_s, out.slowdown_pct
    lat = request_latencies(out, trace.arrival_s, trace.output_tokens.astype(float))
    latency_pct = np.stack([row_percentiles(x) for x in lat], axis=1)
    return latency_pct, metric_slowdowns(lat, solo)


def metric_slowdowns(lat, solo, mask: np.ndarray | None = None) -> np.ndarray:
    """(d, 3 metrics, 3 percentiles) slowdown percentiles of per-request latencies `lat`
    (TTFT, TBT, E2E, each (d, r)) against `solo`, over the requests `mask` (None: all)."""
    keep = slice(None) if mask is None else mask
    return np.stack([slowdown_percentiles(x[:, keep], ref[keep]) for x, ref in zip(lat, solo)], axis=1)


def _makespan(out: EngineOutput, trace) -> np.ndarray:
    """Seconds from the first arrival to the last finish (finite part, for stopped designs)."""
    if out.makespan_s is not None:
        return out.makespan_s
    finish = np.where(np.isfinite(out.finish_s), out.finish_s, -np.inf)
    return np.max(finish, axis=1) - trace.arrival_s[0]
