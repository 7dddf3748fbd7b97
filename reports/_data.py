"""Plot data of the report, computed apart from any figure.

Every function here returns numbers (numpy arrays, DataFrames, dicts) that the
figures in `_figures` only draw, so the tests check these numbers, not pixels.
Units are in the column names.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields

import numpy as np
import pandas as pd

from provisioner.designs import FAMILY_SPECS, Design, DesignBatch
from provisioner.errors import ProvisionerError
from provisioner.slo import METRICS, PERCENTILES, SLO

from ._schema import as_result_dict, num

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
    min_margin, rps, and `slowdown_{ttft,tbt,e2e}_p{50,90,99}`.
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
        }
        for m, p in CHECKS:
            row[f"slowdown_{m}_{p}"] = num((sd.get(m) or {}).get(p))
        rows.append(row)
    cols = ["family", "prompt_machines", "token_machines", "prompt_machine", "token_machine",
            "prompt_power_cap", "token_power_cap", "cost_usd_per_h", "power_kw", "slo_met", "binding_slo",
            "min_margin", "rps", *[f"slowdown_{c}" for c in CHECK_NAMES]]
    return pd.DataFrame(rows, columns=cols)


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
    """`27P + 3T` for a split design, `40 mixed` for a baseline, `no design` when the
    search scored none (its counts are null)."""
    if design.get("prompt_machines") is None:
        return "no design"
    p, t = int(design["prompt_machines"]), int(design.get("token_machines") or 0)
    return f"{p}P + {t}T" if t else f"{p} mixed"


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
    """The SLO the result was checked against: `question.slo` limits times `slo_scale`."""
    q = result["question"]
    base = q.get("slo") or {}
    try:
        slo = SLO(**{m: tuple(float(v) for v in base[m]) for m in METRICS if m in base})
    except (TypeError, ValueError) as exc:
        raise ProvisionerError(f"result JSON key 'question.slo' is malformed: {exc}") from None
    scale = num(q.get("slo_scale", 1.0))
    return slo.scaled(scale) if math.isfinite(scale) and scale != 1.0 else slo


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
        ("workload", f"{q['workload']}, {q.get('arrival', 'poisson')} arrivals, "
                     f"{num(q.get('duration_s', math.nan)):g} s trace"),
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
    `margin_{ttft,tbt,e2e}_p{50,90,99}`; `min_margin` is the binding one.
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
        for m, p in CHECKS:
            row[f"margin_{m}_{p}"] = num((margin.get(m) or {}).get(p))
        finite = [row[f"margin_{c}"] for c in CHECK_NAMES if math.isfinite(row[f"margin_{c}"])]
        row["min_margin"] = min(finite) if finite else math.nan
        rows.append(row)
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------- heatmaps
@dataclass(frozen=True)
class Heatmap:
    """The design space of one family on a prompt x token machine grid (Fig. 12).

    Arrays are (n_token_counts, n_prompt_counts): rows are token-machine counts
    (a single row of 0 for a baseline, whose machines are all mixed), columns
    prompt-machine counts. Cells never evaluated are NaN / False.
    """

    family: str
    prompt_counts: np.ndarray       # (nx,) machines
    token_counts: np.ndarray        # (ny,) machines
    cost_usd_per_h: np.ndarray      # (ny, nx)
    power_kw: np.ndarray            # (ny, nx)
    rps: np.ndarray                 # (ny, nx) load the cell was scored at
    evaluated: np.ndarray           # (ny, nx) bool
    slo_met: np.ndarray             # (ny, nx) bool, False where not evaluated
    slowdown: np.ndarray            # (ny, nx, 9) in CHECK_NAMES order
    binding_slo: np.ndarray         # (ny, nx) str
    min_margin: np.ndarray          # (ny, nx)
    optimum: tuple[int, int] | None  # (prompt_machines, token_machines) of the answer
    objective: str                  # column the goal minimizes

    @property
    def split(self) -> bool:
        return bool(np.any(self.token_counts > 0))

    @property
    def masked_cost(self) -> np.ndarray:
        """Cost where every SLO holds, NaN elsewhere (what the heatmap colours)."""
        return np.where(self.slo_met, self.cost_usd_per_h, np.nan)


def heatmap(evaluated: pd.DataFrame, family: str, goal: str = "cost", best: dict | None = None) -> Heatmap:
    """Grid one family's evaluated designs.

    The axes are evenly spaced counts from the smallest to the largest evaluated (see
    `_axis`); cells in between that were not evaluated are NaN / False.
    Several rows for one (prompt, token) cell (other power caps or loads) collapse to
    the one that best represents the cell: SLO-meeting first, then the highest load,
    then the lowest objective. The optimum is the family's answer (`best`) when it is
    a feasible cell of the grid, else the feasible cell with the lowest objective
    (for the throughput goal: the highest load, then the lowest cost).
    """
    rows = evaluated[evaluated.family == family]
    if rows.empty:
        raise ProvisionerError(f"no evaluated designs of family '{family}' in the result")
    objective = OBJECTIVE_COLUMN[goal]
    rows = (rows.assign(_rps=rows.rps.fillna(-np.inf))
            .sort_values(["slo_met", "_rps", objective], ascending=[False, False, True], kind="stable")
            .drop_duplicates(["prompt_machines", "token_machines"]))
    px = _axis(rows.prompt_machines.to_numpy())
    ty = _axis(rows.token_machines.to_numpy())
    shape = (len(ty), len(px))
    ix = np.searchsorted(px, rows.prompt_machines.to_numpy())
    iy = np.searchsorted(ty, rows.token_machines.to_numpy())

    def grid(col, fill=np.nan, dtype=float):
        out = np.full(shape, fill, dtype=dtype)
        out[iy, ix] = rows[col].to_numpy()
        return out

    slow = np.full(shape + (len(CHECK_NAMES),), np.nan)
    slow[iy, ix] = rows[[f"slowdown_{c}" for c in CHECK_NAMES]].to_numpy(float)
    evaluated_mask = np.zeros(shape, bool)
    evaluated_mask[iy, ix] = True
    h = Heatmap(
        family=family, prompt_counts=px, token_counts=ty,
        cost_usd_per_h=grid("cost_usd_per_h"), power_kw=grid("power_kw"), rps=grid("rps"),
        evaluated=evaluated_mask, slo_met=grid("slo_met", False, bool),
        slowdown=slow, binding_slo=grid("binding_slo", "", object), min_margin=grid("min_margin"),
        optimum=None, objective=objective)
    return _with_optimum(h, rows, goal, best)


def _axis(counts: np.ndarray) -> np.ndarray:
    """Evenly spaced machine counts covering `counts`: the grid's step is the largest
    that hits every evaluated count (a search visits scattered cells; a grid has a step),
    so every cell of the heatmap is the same size and gaps show as empty cells."""
    values = np.unique(counts.astype(int))
    if len(values) < 2:
        return values
    step = int(np.gcd.reduce(np.diff(values)))
    return np.arange(values[0], values[-1] + 1, step)


def _with_optimum(h: Heatmap, rows: pd.DataFrame, goal: str, best: dict | None) -> Heatmap:
    from dataclasses import replace

    if best is not None and is_feasible(best) and best["design"].get("prompt_machines") is not None:
        d = best["design"]
        cell = (int(d["prompt_machines"]), int(d.get("token_machines") or 0))
        if cell[0] in h.prompt_counts and cell[1] in h.token_counts:
            j = int(np.searchsorted(h.prompt_counts, cell[0]))
            i = int(np.searchsorted(h.token_counts, cell[1]))
            if h.slo_met[i, j]:
                return replace(h, optimum=cell)
    met = rows[rows.slo_met]
    if met.empty:
        return h
    if goal == "throughput":
        met = met.assign(_rps=met.rps.fillna(-np.inf)).sort_values(["_rps", "cost_usd_per_h"],
                                                                   ascending=[False, True], kind="stable")
    else:
        met = met.sort_values([h.objective, "prompt_machines", "token_machines"], kind="stable")
    top = met.iloc[0]
    return replace(h, optimum=(int(top.prompt_machines), int(top.token_machines)))


def heatmaps(result: dict, evaluated: pd.DataFrame | None = None) -> dict[str, Heatmap]:
    """One `Heatmap` per family with evaluated designs, in `question.families` order."""
    evaluated = evaluated_frame(result) if evaluated is None else evaluated
    best = {b["design"]["family"]: b for b in result["best"]}
    order = [f for f in result["question"]["families"] if f in set(evaluated.family)]
    order += [f for f in evaluated.family.unique() if f not in order]
    return {f: heatmap(evaluated, f, result["goal"], best.get(f)) for f in order}


# --------------------------------------------------------------------------- Pareto
def non_dominated(objectives: np.ndarray) -> np.ndarray:
    """Mask of the Pareto-optimal rows of `objectives` (n, k), every column minimized.

    A row is dominated when another is no worse in every column and better in one.
    Rows with a NaN are never on the frontier.
    """
    x = np.asarray(objectives, dtype=float)
    n = len(x)
    ok = np.all(np.isfinite(x), axis=1)
    front = ok.copy()
    others = x[ok]
    for i in np.flatnonzero(ok):
        dominated = np.all(others <= x[i], axis=1) & np.any(others < x[i], axis=1)
        front[i] = not dominated.any()
    return front if n else np.zeros(0, bool)


def pareto(evaluated: pd.DataFrame) -> pd.DataFrame:
    """SLO-meeting designs across families with cost, power and sustainable throughput.

    A design's throughput is the highest load it was scored at and met every SLO.
    `on_frontier` marks the designs no other design beats on all three of
    (lower cost, lower power, higher throughput).
    """
    key = ["family", "prompt_machines", "token_machines", "prompt_machine", "token_machine",
           "prompt_power_cap", "token_power_cap"]
    met = evaluated[evaluated.slo_met]
    if met.empty:
        return pd.DataFrame(columns=[*key, "cost_usd_per_h", "power_kw", "throughput_rps", "on_frontier"])
    out = (met.groupby(key, as_index=False, sort=False)
           .agg(cost_usd_per_h=("cost_usd_per_h", "first"), power_kw=("power_kw", "first"),
                throughput_rps=("rps", "max")))
    obj = np.column_stack([out.cost_usd_per_h, out.power_kw, -out.throughput_rps.fillna(-np.inf)])
    out["on_frontier"] = non_dominated(obj)
    return out  # families in the order they were evaluated


# --------------------------------------------------------------------------- summary bars
def summary_bars(result: dict, baseline: str | None = None) -> tuple[pd.DataFrame, str | None]:
    """Each feasible family answer's metrics and their ratio to a baseline family's.

    Returns a long table (family, metric, label, value, normalized) and the baseline
    used: `baseline` if it has a feasible answer, else baseline-h100, else the first
    feasible family (None when no family is feasible). Figs. 18-19 of Splitwise.
    A `baseline` that is not a family of the result is an error.
    """
    families = [str(b["design"]["family"]) for b in result["best"]]
    if baseline is not None and baseline not in families:
        raise ProvisionerError(f"baseline '{baseline}' is not a family of this result; "
                               f"use one of {', '.join(families)}")
    vals = {}
    for b in result["best"]:
        if not is_feasible(b):
            continue
        d = b["design"]
        rps, cost, kw = best_throughput_rps(b), num(b["cost_usd_per_h"]), num(b["power_kw"])
        vals[str(d["family"])] = {
            "throughput_rps": rps, "cost_usd_per_h": cost, "power_kw": kw,
            "machines": float(int(d["prompt_machines"]) + int(d.get("token_machines") or 0)),
            "rps_per_usd_per_h": rps / cost if cost else math.nan,
            "rps_per_kw": rps / kw if kw else math.nan,
        }
    if not vals:
        return pd.DataFrame(columns=["family", "metric", "label", "value", "normalized"]), None
    chosen = next((c for c in (baseline, DEFAULT_BASELINE) if c in vals), next(iter(vals)))
    rows = []
    for fam, v in vals.items():
        for metric, label in SUMMARY_METRICS:
            ref = vals[chosen][metric]
            rows.append({"family": fam, "metric": metric, "label": label, "value": v[metric],
                         "normalized": v[metric] / ref if ref else math.nan})
    return pd.DataFrame(rows), chosen


# --------------------------------------------------------------------------- workload
def question_trace(result: dict, rps: float | None = None, duration_s: float | None = None):
    """The question's workload re-drawn (same workload, arrival process and seed)."""
    from workloads import make_workload

    q = result["question"]
    rps = goal_rps(result) if rps is None else rps
    if not (math.isfinite(rps) and rps > 0):
        raise ProvisionerError("the result names no request rate (constraint.rps, best[].rps)")
    duration = num(q.get("duration_s", 120.0)) if duration_s is None else duration_s
    arrival = q.get("arrival") or "poisson"
    cv = num(q.get("cv", 2.0))
    return make_workload(q["workload"], rps, duration_s=duration, arrival=arrival,
                         cv=cv if math.isfinite(cv) else 2.0, seed=q["seed"])


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
    rows = []
    for factor in load_factors:
        rps = float(factor) * base
        trace = question_trace(result, rps=rps, duration_s=duration)
        table = simulate(batch, trace, q["model"], engine="fluid", slo=slo, perf=perf)
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
    prof = prof[prof.model == PROFILE_MODEL]
    prefill_pts = (prof[(prof.batch_size == 1) & (prof.token_size == PROFILE_OUTPUT_TOKENS)]
                   .groupby(["hardware", "tensor_parallel", "prompt_size"], as_index=False).prompt_time_ms.median()
                   .rename(columns={"prompt_size": "x", "prompt_time_ms": "time_ms"}).assign(phase="prefill"))
    decode_pts = (prof[(prof.prompt_size == PROFILE_DECODE_PROMPT_TOKENS) & (prof.token_size == PROFILE_OUTPUT_TOKENS)]
                  .groupby(["hardware", "tensor_parallel", "batch_size"], as_index=False).token_time_ms.median()
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
    return ReportData(
        result=result, question=question_rows(result), answer=answer_table(result),
        heatmaps=heatmaps(result, ev), pareto=pareto(ev), load_curves=curves, slo=slo_of(result),
        summary=summary, baseline=chosen, token_cdfs=cdfs, arrival_rate=rate,
        latency_curves=lat, calibration_points=pts, notes=notes)


def _line(exc: BaseException) -> str:
    return " ".join(str(exc).split("\n")[0].split()) or type(exc).__name__
