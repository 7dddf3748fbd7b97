"""Shared pieces of the report's plot data: constants, the evaluated table and small
readers of a result dict (goal rate, SLO, feasibility, design labels)."""

from __future__ import annotations

import math

import pandas as pd

from provisioner.errors import ProvisionerError
from provisioner.slo import METRICS, PERCENTILES, SLO

from ._schema import num

# Loads of the latency-vs-load curves, as multiples of the goal's request rate.
LOAD_FACTORS = (0.25, 0.5, 0.75, 1.0, 1.25, 1.5)
# Trace length of each point of those curves: long enough for stable p99s at the
# rates of the paper (>= 1,000 requests at 20 req/s), short enough to keep a report
# under a few seconds of simulation.
CURVE_DURATION_S = 60.0
DEFAULT_BASELINE = "baseline-h100"
CHECKS = tuple((m, f"p{p}") for m in METRICS for p in PERCENTILES)
CHECK_NAMES = tuple(f"{m}_{p}" for m, p in CHECKS)
OBJECTIVE_COLUMN = {"cost": "cost_usd_per_h", "power": "power_kw", "throughput": "cost_usd_per_h"}
SUMMARY_METRICS = (
    ("throughput_rps", "sustainable throughput"),
    ("cost_usd_per_h", "cost"),
    ("power_kw", "power"),
    ("machines", "machines"),
    ("rps_per_usd_per_h", "throughput per $"),
    ("rps_per_kw", "throughput per kW"),
)
# The shipped Llama2-70B profiles: prefill swept over prompt size at batch 1, decode
# over batch size at prompt 512 (perfmodels/data/SOURCE.md).
PROFILE_MODEL = "llama2-70b"
PROFILE_DECODE_PROMPT_TOKENS = 512
PROFILE_OUTPUT_TOKENS = 128


# --------------------------------------------------------------------------- tables
def evaluated_frame(result: dict) -> pd.DataFrame:
    """`result["evaluated"]` as a table: one row per scored design (and load).

    Columns: family, prompt_machines, token_machines, prompt_machine, token_machine,
    prompt_power_cap, token_power_cap, cost_usd_per_h, power_kw, slo_met, binding_slo,
    min_margin, rps, recheck ("failed", "passed" or "": see `meets_slos`), and
    `slowdown_{ttft,tbt,e2e}_p{50,90,99}`.
    """
    rows = []
    for r in result["evaluated"]:
        sd = r.get("slowdown") or {}
        row = {
            "family": str(r["family"]),
            "prompt_machines": int(r["prompt_machines"]),
            "token_machines": int(r["token_machines"] or 0),
            "prompt_machine": str(r.get("prompt_machine", "")),
            "token_machine": str(r.get("token_machine", "")),
            "prompt_power_cap": num(r.get("prompt_power_cap", 1.0)),
            "token_power_cap": num(r.get("token_power_cap", 1.0)),
            "cost_usd_per_h": num(r["cost_usd_per_h"]),
            "power_kw": num(r["power_kw"]),
            "slo_met": bool(r["slo_met"]),
            "binding_slo": str(r.get("binding_slo") or ""),
            "min_margin": num(r.get("min_margin")),
            "rps": num(r.get("rps")),
            "recheck": str(r.get("recheck") or ""),
        }
        for m, p in CHECKS:
            row[f"slowdown_{m}_{p}"] = num((sd.get(m) or {}).get(p))
        rows.append(row)
    cols = ["family", "prompt_machines", "token_machines", "prompt_machine", "token_machine",
            "prompt_power_cap", "token_power_cap", "cost_usd_per_h", "power_kw", "slo_met", "binding_slo",
            "min_margin", "rps", "recheck", *[f"slowdown_{c}" for c in CHECK_NAMES]]
    return pd.DataFrame(rows, columns=cols)


def meets_slos(evaluated: pd.DataFrame) -> pd.Series:
    """The rows that meet every SLO on the search trace and were not rejected by the
    re-check (the fluid screen on the verification traces or the discrete-event engine):
    a design cheaper than the answer that met the search trace only is not an option."""
    if "recheck" not in evaluated.columns:   # a table the search made without its re-check
        return evaluated.slo_met
    return evaluated.slo_met & (evaluated.recheck != "failed")


def is_feasible(best: dict) -> bool:
    """A family's answer meets every SLO (the DES-verified flag when present)."""
    if best.get("feasible") is not None:
        return bool(best["feasible"])
    return bool((best.get("slo") or {}).get("met", False))


def best_throughput_rps(best: dict) -> float:
    """Sustainable request rate of a family's answer: the searched maximum for the
    throughput goal, else the rate it was provisioned for."""
    v = num(best.get("sustainable_rps"))
    return v if math.isfinite(v) else num(best.get("rps"))


def design_label(design: dict) -> str:
    """`27P + 3T` for a split design, `40 mixed` for a baseline (`, chunk 512` with chunked
    prefill), `28 co-located, MPS 0.7` for Splitwiser, `no design` when the search scored
    none (its counts are null)."""
    if design.get("prompt_machines") is None:
        return "no design"
    p, t = int(design["prompt_machines"]), int(design.get("token_machines") or 0)
    chunk = int(design.get("prefill_chunk_tokens") or 0)
    share = float(design.get("mps_prefill_share") or 0.0)
    if share:   # Splitwiser: each machine runs a prefill and a decode process
        return f"{p} co-located, MPS {share:g}" + (f", chunk {chunk}" if chunk else "")
    return (f"{p}P + {t}T" if t else f"{p} mixed") + (f", chunk {chunk}" if chunk else "")


def goal_rps(result: dict) -> float:
    """The request rate the question is about: the constraint's, else the winner's."""
    rps = num(result["constraint"].get("rps"))
    if math.isfinite(rps) and rps > 0:
        return rps
    cands = [best_throughput_rps(b) for b in result["best"] if is_feasible(b)]
    cands = [c for c in cands if math.isfinite(c) and c > 0]
    if cands:
        return max(cands)
    cands = [num(b.get("rps")) for b in result["best"]]
    cands = [c for c in cands if math.isfinite(c) and c > 0]
    return max(cands) if cands else math.nan


def slo_of(result: dict) -> SLO:
    """The SLO the result was checked against: `question.slo` limits times `slo_scale`
    (`provisioner.results.slo_from_question`, as `simulate --from-result` reads it)."""
    from provisioner.results import slo_from_question
    return slo_from_question(result["question"])
