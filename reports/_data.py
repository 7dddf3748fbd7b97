"""Plot data of the report, computed apart from any figure.

Every function here returns numbers (numpy arrays, DataFrames, dicts) that the
figures in `_figures` only draw, so the tests check these numbers, not pixels.
Units are in the column names. The pieces live in `_base` (constants, the evaluated
table), `_design_space` (heatmaps, Pareto, summary bars) and `_curves` (workload,
latency vs load, latency model); this module holds the question and answer tables and
assembles `ReportData`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pandas as pd

from provisioner import SLO
from provisioner.slo import METRICS

from ._base import (CHECK_NAMES, CHECKS, CURVE_DURATION_S, LOAD_FACTORS, best_throughput_rps, design_label,
                    evaluated_frame, is_feasible, slo_of)
from ._curves import arrival_rate, latency_model_curves, load_curves, question_trace, token_cdfs
from ._scheduler import scheduler_timelines
from ._design_space import Heatmap, heatmaps, pareto, summary_bars
from ._schema import as_result_dict, num

__all__ = ["ReportData", "report_data", "question_rows", "answer_table", "Heatmap", "CHECK_NAMES",
           "best_throughput_rps", "design_label"]


def question_rows(result: dict) -> list[tuple[str, str]]:
    """The question as (label, text) rows for the report header."""
    q = result["question"]
    goal = result["goal"]
    cons = result["constraint"]
    labels = {"rps": ("at", "req/s"), "power_budget_kw": ("power budget", "kW"),
              "cost_budget_usd_per_h": ("cost budget", "$/h")}
    cons_text = ", ".join(f"{labels.get(k, (k, ''))[0]} {v:g} {labels.get(k, (k, ''))[1]}".strip()
                          if isinstance(v, (int, float)) else f"{k} {v}" for k, v in cons.items())
    goal_text = {"cost": "least cost ($/h) meeting every SLO",
                 "power": "least provisioned power (kW) meeting every SLO",
                 "throughput": "most sustainable throughput (req/s) meeting every SLO"}[goal]
    slo = slo_of(result)
    slo_text = "; ".join(f"{m.upper()} p50/p90/p99 ≤ " + "/".join(f"{v:g}x" for v in getattr(slo, m))
                         for m in METRICS)
    catalog = q.get("catalog") or {}
    cat_text = ", ".join(
        f"{name} ${num(v.get('cost_usd_per_h')):g}/h" + (f" ({v['cost_option']})" if v.get("cost_option") else "")
        if isinstance(v, dict) else f"{name} {v}" for name, v in catalog.items()) or "shipped catalog"
    rows = [
        ("goal", f"{goal}: {goal_text}"),
        ("constraint", cons_text or "none"),
        ("workload", f"{q['workload']}, {q.get('arrival', 'poisson')} arrivals"
                     + (f" time-scaled from the file's {num(q.get('native_rps')):.4g} req/s" if q.get("rescaled") else "")
                     + f", {num(q.get('duration_s', math.nan)):g} s trace"),
        ("model", str(q["model"])),
        ("SLOs", f"{slo_text} (slowdown vs. the request alone on a {slo.reference_machine}; "
                 f"scale {num(q.get('slo_scale', 1.0)):g})"),
        ("families", ", ".join(map(str, q["families"]))),
        ("catalog", cat_text),
        ("code version", str(q.get("code_version", "unknown"))),
        ("seed", str(q["seed"])),
    ]
    if result.get("elapsed_s") is not None:
        rows.append(("search time", f"{num(result['elapsed_s']):.1f} s"))
    return rows


def answer_table(result: dict) -> pd.DataFrame:
    """One row per family's answer: design, cost, power, sustainable RPS, SLO margins.

    Margins are limit / observed - 1 (negative = violated), in the columns
    `margin_{ttft,tbt,e2e}_p{50,90,99}`; `min_margin` is the binding one. These are the
    search trace's; `recheck_binding_slo` and `recheck_min_margin` are the discrete-event
    re-check's that the answer passed ("" and NaN without one).
    """
    winner = result.get("winner") or {}
    wdesign = winner.get("design") if winner else None
    wfamily = wdesign.get("family") if wdesign else None
    rows = []
    for b in result["best"]:
        d = b["design"]
        margin = (b.get("slo") or {}).get("margin") or {}
        row = {
            "family": str(d["family"]),
            "design": design_label(d),
            "prompt_machines": num(d.get("prompt_machines")),
            "token_machines": num(d.get("token_machines")),
            "machine_types": (f"{d.get('prompt_machine')} / {d.get('token_machine')}" if d.get("token_machines")
                              else str(d.get("prompt_machine") or "–")),
            "feasible": is_feasible(b),
            "winner": wdesign is not None and d == wdesign and d["family"] == wfamily,
            "cost_usd_per_h": num(b["cost_usd_per_h"]),
            "power_kw": num(b["power_kw"]),
            "sustainable_rps": best_throughput_rps(b),
            "binding_slo": str((b.get("slo") or {}).get("binding") or ""),
            "reason": b.get("reason") or "",
            "searcher": str(b.get("searcher") or ""),
            "evaluations": b.get("evaluations"),
            "gap_to_bound_pct": num(b.get("gap_to_bound_pct")),
        }
        v = b.get("verification") or {}
        passed = is_feasible(b) and bool(v.get("met"))
        row["recheck_binding_slo"] = str(v.get("binding") or "") if passed else ""
        row["recheck_min_margin"] = num(v.get("min_margin")) if passed else math.nan
        for m, p in CHECKS:
            row[f"margin_{m}_{p}"] = num((margin.get(m) or {}).get(p))
        finite = [row[f"margin_{c}"] for c in CHECK_NAMES if math.isfinite(row[f"margin_{c}"])]
        row["min_margin"] = min(finite) if finite else math.nan
        rows.append(row)
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------- all of it
@dataclass(frozen=True)
class ReportData:
    """Everything the report draws; figures only read it."""

    result: dict
    question: list[tuple[str, str]]
    answer: pd.DataFrame
    heatmaps: dict[str, Heatmap]
    pareto: pd.DataFrame
    load_curves: pd.DataFrame
    slo: SLO
    summary: pd.DataFrame
    baseline: str | None
    token_cdfs: pd.DataFrame
    arrival_rate: pd.DataFrame
    latency_curves: pd.DataFrame
    calibration_points: pd.DataFrame
    notes: list[str] = field(default_factory=list)
    scheduler_timelines: dict = field(default_factory=dict)   # answer label -> (k, 6) samples (on-demand)


def report_data(result, *, perf=None, baseline: str | None = None, load_factors=LOAD_FACTORS,
                curve_duration_s: float = CURVE_DURATION_S) -> ReportData:
    """Compute every table and curve of the report from a provisioning result.

    Parameters
    ----------
    result : the result dict (RESULT_SCHEMA.md), its JSON text, or an object with
        `.to_json()`.
    perf : `perfmodels.LatencyModel` for the latency-vs-load simulations and the
        latency-model curves (default: the shipped calibration).
    baseline : family the summary bars are normalized to (default baseline-h100).
    load_factors, curve_duration_s : loads (x the goal's rate) and trace length (s)
        of the latency-vs-load curves.
    """
    from perfmodels import LatencyModel

    result = as_result_dict(result)
    perf = LatencyModel() if perf is None else perf
    notes: list[str] = []
    ev = evaluated_frame(result)
    summary, chosen = summary_bars(result, baseline)
    if baseline is not None and chosen != baseline:
        notes.append(f"baseline '{baseline}' has no feasible answer; bars are normalized to '{chosen}'")
    try:
        trace = question_trace(result)
        cdfs, rate = token_cdfs(trace), arrival_rate(trace)
    except Exception as exc:  # a CSV workload that is not on this machine: say so, draw the rest
        notes.append(f"workload '{result['question']['workload']}' could not be re-drawn ({_line(exc)})")
        cdfs = pd.DataFrame(columns=["quantity", "tokens", "cdf"])
        rate = pd.DataFrame(columns=["second", "requests"])
    try:
        curves = load_curves(result, perf=perf, load_factors=load_factors, duration_s=curve_duration_s)
    except Exception as exc:
        notes.append(f"latency-vs-load curves skipped ({_line(exc)})")
        curves = pd.DataFrame(columns=["family", "design", "load_factor", "rps", "metric", "percentile",
                                       "latency_ms", "slowdown", "slo_limit", "slo_met"])
    model = str(result["question"]["model"])
    gpus = []
    for b in result["best"]:
        for key in ("prompt_machine", "token_machine"):
            name = b["design"].get(key)
            if name:
                try:
                    gpus.append(perf.catalog.machine(name).gpu)
                except Exception:  # an unknown machine name: its curve is simply not drawn
                    pass
    lat, pts = latency_model_curves(perf, [(model, g) for g in dict.fromkeys(gpus)])
    try:
        timelines = scheduler_timelines(result, perf)
    except Exception as exc:
        notes.append(f"scheduler timelines skipped ({_line(exc)})")
        timelines = {}
    return ReportData(
        result=result, question=question_rows(result), answer=answer_table(result),
        heatmaps=heatmaps(result, ev), pareto=pareto(ev), load_curves=curves, slo=slo_of(result),
        summary=summary, baseline=chosen, token_cdfs=cdfs, arrival_rate=rate,
        latency_curves=lat, calibration_points=pts, notes=notes, scheduler_timelines=timelines)


def _line(exc: BaseException) -> str:
    return " ".join(str(exc).split("\n")[0].split()) or type(exc).__name__
