"""Plot data of the workload (size CDFs, arrival rate), the answers' latency against load
(Fig. 16), and the latency model beside its calibration points."""

from __future__ import annotations

import math
from dataclasses import fields

import numpy as np
import pandas as pd

from provisioner import ProvisionerError
from provisioner.designs import FAMILY_SPECS, Design, DesignBatch
from provisioner.schedulers import DEFAULT_SCHEDULER
from provisioner.slo import METRICS, PERCENTILES

from ._base import (CURVE_DURATION_S, LOAD_FACTORS, PROFILE_DECODE_PROMPT_TOKENS, PROFILE_MODEL,
                    PROFILE_OUTPUT_TOKENS, design_label, goal_rps, is_feasible, slo_of)
from ._perf import profile_medians
from ._schema import num


# --------------------------------------------------------------------------- workload
def question_trace(result: dict, rps: float | None = None, duration_s: float | None = None):
    """The question's trace rebuilt by the one generator (same workload, arrival process, seed,
    window and file), at `rps` (default: the question's) over `duration_s` (default: its window)."""
    from workloads import TraceGenerator

    q = result["question"]
    rps = goal_rps(result) if rps is None else rps
    if not (math.isfinite(rps) and rps > 0):
        raise ProvisionerError("the result names no request rate (constraint.rps, best[].rps)")
    recorded = q.get("duration_s")   # missing: the generator's default window, as when it was asked
    duration = (None if recorded is None else num(recorded)) if duration_s is None else duration_s
    cv = num(q.get("cv", 2.0))
    return TraceGenerator.from_json({**q, "duration_s": duration, "cv": cv if math.isfinite(cv) else 2.0}).at(rps)


def token_cdfs(trace, max_points: int = 400) -> pd.DataFrame:
    """Empirical CDFs of prompt and output tokens: (quantity, tokens, cdf).

    Each curve is the step CDF at its distinct values, thinned to at most
    `max_points` points (always keeping the last, where the CDF is 1).
    """
    parts = []
    for name, values in (("prompt_tokens", trace.prompt_tokens), ("output_tokens", trace.output_tokens)):
        v = np.sort(np.asarray(values))
        x = np.unique(v)
        cdf = np.searchsorted(v, x, side="right") / len(v)
        if len(x) > max_points:
            keep = np.unique(np.linspace(0, len(x) - 1, max_points).round().astype(int))
            x, cdf = x[keep], cdf[keep]
        parts.append(pd.DataFrame({"quantity": name, "tokens": x.astype(int), "cdf": cdf}))
    return pd.concat(parts, ignore_index=True)


def arrival_rate(trace) -> pd.DataFrame:
    """Arrivals per one-second bin over the trace window: (second, requests)."""
    seconds = int(math.ceil(max(trace.duration_s, float(trace.arrival_s[-1]) + 1e-9)))
    counts = np.bincount(np.floor(trace.arrival_s).astype(int), minlength=seconds)[:seconds]
    return pd.DataFrame({"second": np.arange(seconds), "requests": counts})


# --------------------------------------------------------------------------- latency vs load
def winner_designs(result: dict) -> list[Design]:
    """The feasible answer of each family as a `Design`."""
    out = []
    names = {f.name for f in fields(Design)}
    for b in result["best"]:
        if not is_feasible(b):
            continue
        d = dict(b["design"])
        spec = FAMILY_SPECS.get(d["family"])
        if spec is not None:
            d.setdefault("prompt_machine", spec.prompt_machine)
            d.setdefault("token_machine", spec.token_machine)
        d.setdefault("token_machine", d.get("prompt_machine"))
        d["token_machines"] = int(d.get("token_machines") or 0)
        try:
            out.append(Design(**{k: v for k, v in d.items() if k in names and v is not None}))
        except TypeError as exc:
            raise ProvisionerError(f"result JSON best[].design of {d['family']} is incomplete: {exc}") from None
    return out


def load_curves(result: dict, *, perf=None, load_factors=LOAD_FACTORS,
                duration_s: float = CURVE_DURATION_S) -> pd.DataFrame:
    """Latency percentiles of every family's answer at a range of loads (Fig. 16).

    Each load is `factor x goal_rps(result)`; all answers run on the same trace per
    load (the question's workload, arrivals and seed, `duration_s` long) with the
    fluid engine. Long table: family, design, load_factor, rps, metric (ttft, tbt,
    e2e), percentile (p50, p90, p99), latency_ms, slowdown, slo_limit, slo_met.
    """
    from provisioner.results import preemption_from_question
    from provisioner.sim import simulate

    designs = winner_designs(result)
    cols = ["family", "design", "load_factor", "rps", "metric", "percentile", "latency_ms", "slowdown",
            "slo_limit", "slo_met"]
    if not designs:
        return pd.DataFrame(columns=cols)
    slo = slo_of(result)
    limits = slo.limits()
    base = goal_rps(result)
    q = result["question"]
    asked_s = num(q.get("duration_s"))
    duration = min(duration_s, asked_s) if math.isfinite(asked_s) and asked_s > 0 else duration_s
    batch = DesignBatch.from_designs(designs)
    preemption, swap_space_gb = preemption_from_question(q)   # a swap answer's curves preempt by swap
    rows = []
    for factor in load_factors:
        rps = float(factor) * base
        trace = question_trace(result, rps=rps, duration_s=duration)
        on_demand = any(d.scheduler != DEFAULT_SCHEDULER for d in designs)   # jsq, llumnix: the DES only
        table = simulate(batch, trace, q["model"], engine="des" if on_demand else "fluid", slo=slo, perf=perf,
                         preemption=preemption, swap_space_gb=swap_space_gb)
        for k, (_, r) in enumerate(table.iterrows()):
            for i, m in enumerate(METRICS):
                for j, p in enumerate(PERCENTILES):
                    rows.append({"family": designs[k].family,
                                 "design": design_label(designs[k].to_dict()),
                                 "load_factor": float(factor), "rps": rps, "metric": m, "percentile": f"p{p}",
                                 "latency_ms": float(r[f"{m}_p{p}_s"]) * 1e3,
                                 "slowdown": float(r[f"slowdown_{m}_p{p}"]),
                                 "slo_limit": float(limits[i, j]), "slo_met": bool(r["slo_met"])})
    return pd.DataFrame(rows, columns=cols)


# --------------------------------------------------------------------------- latency model
def latency_model_curves(perf=None, models_gpus: list[tuple[str, str]] = ()) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per-phase latency curves of the model beside its calibration measurements.

    Returns (curves, points):
    - curves: phase ("prefill" | "decode"), model, gpu, tp, x (prompt tokens for
      prefill at batch 1; batch size for decode at prompt 512, 128 output tokens),
      time_ms, measured (whether the model/GPU has calibration points);
    - points: the shipped Llama2-70B profile medians at the same x, with
      `excluded` marking the rows left out of the fit (a known artifact).
    `models_gpus` adds curves (TP 8) for the question's model on its GPUs.
    """
    from perfmodels import LatencyModel, calibration_artifacts, shipped_profile

    perf = LatencyModel() if perf is None else perf
    prof = shipped_profile()
    med = profile_medians(prof[prof.model == PROFILE_MODEL])
    prefill = med[(med.batch_size == 1) & (med.token_size == PROFILE_OUTPUT_TOKENS)]
    prefill_pts = (prefill[["hardware", "tensor_parallel", "prompt_size", "prompt_time_ms"]]
                   .rename(columns={"prompt_size": "x", "prompt_time_ms": "time_ms"}).assign(phase="prefill"))
    decode = med[(med.prompt_size == PROFILE_DECODE_PROMPT_TOKENS) & (med.token_size == PROFILE_OUTPUT_TOKENS)]
    decode_pts = (decode[["hardware", "tensor_parallel", "batch_size", "token_time_ms"]]
                  .rename(columns={"batch_size": "x", "token_time_ms": "time_ms"}).assign(phase="decode"))
    points = pd.concat([prefill_pts, decode_pts], ignore_index=True).rename(
        columns={"hardware": "gpu", "tensor_parallel": "tp"})
    points["model"] = PROFILE_MODEL
    # Prefill points are at batch 1; a decode point's x is its batch size.
    points["excluded"] = calibration_artifacts(pd.DataFrame({
        "batch_size": np.where(points.phase == "decode", points.x, 1), "tensor_parallel": points.tp}))
    points = points[["phase", "model", "gpu", "tp", "x", "time_ms", "excluded"]]

    # Curves pass through every measured x, so model and measurement compare point by point.
    prompt_x = np.unique(np.concatenate([np.geomspace(128, 8192, 40).round(), prefill_pts.x]))
    batch_x = np.unique(np.concatenate([np.arange(1, 65, dtype=float), decode_pts.x]))
    combos = [(PROFILE_MODEL, g, int(t), True) for g, t in
              points[["gpu", "tp"]].drop_duplicates().itertuples(index=False)]
    combos += [(m, g, 8, False) for m, g in models_gpus if (m, g, 8, True) not in combos]
    parts = []
    for model, gpu, tp, measured in combos:
        pre = perf.prefill_time_s(model, gpu, tp, prompt_x, 1) * 1e3
        ctx = PROFILE_DECODE_PROMPT_TOKENS + PROFILE_OUTPUT_TOKENS / 2.0
        dec = perf.decode_time_s(model, gpu, tp, batch_x, ctx) * 1e3
        for phase, x, t in (("prefill", prompt_x, pre), ("decode", batch_x, dec)):
            parts.append(pd.DataFrame({"phase": phase, "model": model, "gpu": gpu, "tp": tp, "x": x,
                                       "time_ms": np.broadcast_to(t, x.shape), "measured": measured}))
    return pd.concat(parts, ignore_index=True), points
