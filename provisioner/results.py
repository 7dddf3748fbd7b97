"""Result rows -> the JSON objects of CONTRACTS.md."""

from __future__ import annotations

import numpy as np

from .slo import METRICS, PERCENTILES

DESIGN_KEYS = ("family", "prompt_machines", "token_machines", "prompt_machine", "token_machine",
               "prompt_gpu", "token_gpu", "prompt_power_cap", "token_power_cap", "prompt_tp", "token_tp",
               "prompt_batch_cap_tokens")


def design_json(row, catalog=None) -> dict:
    """The "design" object of one result row (GPU names resolved through the catalog)."""
    if catalog is None:
        from hardware_catalog import load_catalog
        catalog = load_catalog()
    out = {}
    for k in DESIGN_KEYS:
        if k == "prompt_gpu":
            out[k] = catalog.machine(str(row["prompt_machine"])).gpu
        elif k == "token_gpu":
            out[k] = catalog.machine(str(row["token_machine"])).gpu
        else:
            out[k] = _py(row[k])
    return out


def latency_json(row) -> dict:
    """ttft_ms/tbt_ms/e2e_ms percentiles and the SLO block of one result row."""
    out = {}
    for m in METRICS:
        out[f"{m}_ms"] = {f"p{p}": _py(row[f"{m}_p{p}_s"] * 1e3) for p in PERCENTILES}
    out["slo"] = {
        "met": bool(row["slo_met"]),
        "binding": str(row["binding_slo"]),
        "unservable_requests": int(row.get("unservable_requests", 0) or 0),
        "slowdown": {m: {f"p{p}": _py(row[f"slowdown_{m}_p{p}"]) for p in PERCENTILES} for m in METRICS},
        "margin": {m: {f"p{p}": _py(row[f"margin_{m}_p{p}"]) for p in PERCENTILES} for m in METRICS},
    }
    return out


def design_result_json(row, *, workload: str, model: str, rps: float, catalog=None) -> dict:
    """`provision simulate --json` (CONTRACTS.md)."""
    obj = {"design": design_json(row, catalog), "workload": str(workload), "model": str(model),
           "rps": float(rps), "requests": int(row["requests"])}
    obj.update(latency_json(row))
    obj.update(cost_usd_per_h=_py(row["cost_usd_per_h"]), power_kw=_py(row["power_kw"]),
               throughput_rps=_py(row["throughput_rps"]),
               energy_wh_per_request=_py(row["energy_wh_per_request"]),
               kv_transfer_visible_mean_ms=_py(row["kv_transfer_visible_mean_s"] * 1e3),
               borrowed_decodes=_py(row["borrowed_decodes"]), borrowed_prefills=_py(row["borrowed_prefills"]),
               engine=str(row.get("engine", "fluid")))
    return obj


def json_safe(x):
    """A JSON-safe copy of nested dicts/lists: numpy scalars to Python, NaN/inf to None."""
    if isinstance(x, dict):
        return {str(k): json_safe(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [json_safe(v) for v in x]
    return _py(x)


def _py(v):
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, float) and not np.isfinite(v):
        return None
    return v
