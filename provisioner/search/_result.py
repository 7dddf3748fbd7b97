"""`ProvisionResult`: the answer of `provision`, as tables and JSON (RESULT_SCHEMA.md)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ..errors import ProvisionerError
from ..results import design_result_json, json_number
from ..slo import METRICS, PERCENTILES

GOAL_OBJECTIVE = {"cost": "cost_usd_per_h", "power": "power_kw", "throughput": "sustainable_rps"}


@dataclass
class FamilyResult:
    """One family's answer.

    row : the reported design's full fluid-engine row on the search trace (or None when
        no design could be scored, e.g. a budget that buys no machine).
    feasible : met every SLO and passed the DES re-check (when verification is on).
    staircase : the frontier search's verdicts (grid families), for heatmaps.
    bound : the integer program's `CapacityBound` (None when no search ran).
    bayes : optuna's `BayesOutcome` (its `trials` table) when optuna searched.
    candidates : designs the budget affords that were raced (goal throughput).
    evaluated : every design this family's search scored on the search trace(s).
    """

    family: str
    feasible: bool
    row: pd.Series | None
    rps: float | None
    reason: str | None = None
    sustainable_rps: float | None = None
    lower_bound: float | None = None
    gap_to_bound_pct: float | None = None
    searcher: str = "ilp+enumeration"
    evaluations: int = 0
    verification: dict | None = None
    staircase: object = field(default=None, repr=False)
    elapsed_s: float | None = None
    bound: object = field(default=None, repr=False)
    bayes: object = field(default=None, repr=False)
    candidates: int | None = None
    evaluated: pd.DataFrame | None = field(default=None, repr=False)

    def to_json(self, workload: str, model: str, catalog=None, traces=None) -> dict:
        """`traces`: the search's `workloads.TraceGenerator` (adds the `trace` block)."""
        if self.row is not None:
            rps = float(self.rps if self.rps is not None else self.row.get("rps", np.nan))
            obj = design_result_json(self.row, workload=workload, model=model, rps=rps, catalog=catalog,
                                     trace=None if traces is None else traces.to_json(rps))
        else:
            obj = _empty_design_json(self.family, workload, model)
        obj.update(feasible=bool(self.feasible), reason=self.reason, sustainable_rps=json_number(self.sustainable_rps),
                   lower_bound=json_number(self.lower_bound), gap_to_bound_pct=json_number(self.gap_to_bound_pct),
                   searcher=self.searcher, evaluations=int(self.evaluations), verification=self.verification,
                   elapsed_s=json_number(self.elapsed_s))
        return obj


def _empty_design_json(family: str, workload: str, model: str) -> dict:
    nulls = {f"p{p}": None for p in PERCENTILES}
    return {"design": {"family": family, "prompt_machines": None, "token_machines": None, "prompt_machine": None,
                       "token_machine": None, "prompt_gpu": None, "token_gpu": None, "prompt_power_cap": None,
                       "token_power_cap": None},
            "workload": workload, "model": model, "rps": None, "requests": None,
            **{f"{m}_ms": dict(nulls) for m in METRICS},
            "slo": {"met": False, "binding": None, "slowdown": {m: dict(nulls) for m in METRICS},
                    "margin": {m: dict(nulls) for m in METRICS}},
            "cost_usd_per_h": None, "power_kw": None, "throughput_rps": None, "energy_wh_per_request": None}


def evaluated_json(frame: pd.DataFrame) -> list[dict]:
    """RESULT_SCHEMA.md `evaluated` rows from the evaluators' logs."""
    out = []
    if frame is None or not len(frame):
        return out
    for r in frame.to_dict("records"):
        out.append({
            "family": r["family"], "prompt_machines": int(r["prompt_machines"]),
            "token_machines": int(r["token_machines"]), "prompt_machine": r["prompt_machine"],
            "token_machine": r["token_machine"], "prompt_power_cap": float(r["prompt_power_cap"]),
            "token_power_cap": float(r["token_power_cap"]), "prompt_tp": int(r["prompt_tp"]),
            "token_tp": int(r["token_tp"]), "prompt_batch_cap_tokens": int(r["prompt_batch_cap_tokens"]),
            "prefill_chunk_tokens": int(r.get("prefill_chunk_tokens", 0)),
            "mps_prefill_share": float(r.get("mps_prefill_share", 0.0)),
            "duplicate_weights": bool(r.get("duplicate_weights", False)),
            "cost_usd_per_h": json_number(r["cost_usd_per_h"]), "power_kw": json_number(r["power_kw"]),
            "slo_met": bool(r["slo_met"]), "binding_slo": str(r["binding_slo"]), "min_margin": json_number(r["min_margin"]),
            "slowdown": {m: {f"p{p}": json_number(r[f"slowdown_{m}_p{p}"]) for p in PERCENTILES} for m in METRICS},
            "rps": json_number(r["rps"]), "stopped_early": bool(r.get("stopped_early", False)),
            "recheck": r.get("recheck") if isinstance(r.get("recheck"), str) else None,
        })
    return out


class ProvisionResult:
    """What `provision` found.

    Attributes
    ----------
    request : the `ProvisionRequest`.
    families : one `FamilyResult` per family, in request order.
    best : DataFrame, one row per family (design, cost, power, slowdowns, margins,
        sustainable rps, bound, gap, feasibility, reason).
    evaluated : DataFrame of every design the fluid engine scored (all families).
    winner : the best feasible family's row of `best` (a Series), or None.
    elapsed_s : wall time of the search.
    """

    def __init__(self, request, families: list[FamilyResult], evaluated: pd.DataFrame, elapsed_s: float,
                 catalog=None):
        self.request = request
        self.families = families
        self.evaluated = evaluated
        self.elapsed_s = float(elapsed_s)
        self._catalog = catalog
        self.best = self._best_frame()
        self.winner_family = self._winner()

    # -- tables ------------------------------------------------------------------------
    def _best_frame(self) -> pd.DataFrame:
        rows = []
        for fr in self.families:
            rec = {"family": fr.family, "feasible": fr.feasible}
            if fr.row is not None:
                for k in ("prompt_machines", "token_machines", "prompt_machine", "token_machine", "prompt_power_cap",
                          "token_power_cap", "prompt_tp", "token_tp", "prompt_batch_cap_tokens", "prefill_chunk_tokens",
                          "mps_prefill_share", "duplicate_weights", "cost_usd_per_h", "power_kw", "throughput_rps",
                          "binding_slo", "min_margin"):
                    rec[k] = fr.row.get(k)
                for m in METRICS:
                    for p in PERCENTILES:
                        rec[f"slowdown_{m}_p{p}"] = fr.row.get(f"slowdown_{m}_p{p}")
                        rec[f"margin_{m}_p{p}"] = fr.row.get(f"margin_{m}_p{p}")
            rec.update(rps=fr.rps, sustainable_rps=fr.sustainable_rps, lower_bound=fr.lower_bound,
                       gap_to_bound_pct=fr.gap_to_bound_pct, searcher=fr.searcher, evaluations=fr.evaluations,
                       verified=None if fr.verification is None else bool(fr.verification["met"]),
                       reason=fr.reason)
            passed = fr.feasible and fr.verification is not None and bool(fr.verification["met"])
            rec.update(recheck_binding_slo=fr.verification.get("binding") if passed else None,
                       recheck_min_margin=json_number(fr.verification.get("min_margin")) if passed else None)
            rows.append(rec)
        return pd.DataFrame(rows)

    def _winner(self) -> str | None:
        feas = [fr for fr in self.families if fr.feasible and fr.row is not None]
        if not feas:
            return None
        goal = self.request.goal
        if goal == "throughput":
            return max(feas, key=lambda fr: (fr.sustainable_rps or 0.0, -fr.row["cost_usd_per_h"])).family
        key = GOAL_OBJECTIVE[goal]
        other = "power_kw" if key == "cost_usd_per_h" else "cost_usd_per_h"
        return min(feas, key=lambda fr: (round(float(fr.row[key]), 9), float(fr.row[other]))).family

    @property
    def winner(self) -> pd.Series | None:
        if self.winner_family is None:
            return None
        return self.best.set_index("family").loc[self.winner_family]

    @property
    def catalog(self):
        """The hardware catalog of the call's latency model (the shipped one if none was given)."""
        if self._catalog is None:
            from hardware_catalog import load_catalog
            return load_catalog()
        return self._catalog

    def family(self, name: str) -> FamilyResult:
        for fr in self.families:
            if fr.family == name:
                return fr
        searched = ", ".join(fr.family for fr in self.families)   # was a bare KeyError
        raise ProvisionerError(f"family {name!r} was not searched; this result holds {searched}", params=("family",))

    # -- JSON --------------------------------------------------------------------------
    def to_json(self) -> dict:
        """The RESULT_SCHEMA.md object (NaN/inf as None)."""
        req = self.request
        workload = str(req.workload)
        best = [fr.to_json(workload, req.model, self._catalog, req.traces()) for fr in self.families]
        winner = None
        if self.winner_family is not None:
            winner = best[[fr.family for fr in self.families].index(self.winner_family)]
        return {"goal": req.goal, "constraint": req.constraint, "question": self._question(), "best": best,
                "winner": winner, "evaluated": evaluated_json(self.evaluated), "elapsed_s": self.elapsed_s}

    def _question(self) -> dict:
        req = self.request
        slo = req.slo
        machines = set()
        for fr in self.families:
            if fr.row is not None:
                machines.update({str(fr.row["prompt_machine"]), str(fr.row["token_machine"])})
        for m in (req.prompt_machine_types or ()) + (req.token_machine_types or ()):
            machines.add(m)
        from ..designs import FAMILY_SPECS
        for f in req.families:
            if f in FAMILY_SPECS:
                machines.update({FAMILY_SPECS[f].prompt_machine, FAMILY_SPECS[f].token_machine})
        catalog = self.catalog
        cat_json = {}
        for m in sorted(machines):
            mach = catalog.machine(m)
            cat_json[m] = {"cost_usd_per_h": float(mach.cost_usd_per_h), "cost_option": mach.default_cost_option,
                           "rated_power_kw": float(mach.rated_power_w) / 1e3}
        trace = req.traces().to_json(req.rps)
        return {"workload": str(req.workload), "model": req.model, "duration_s": float(req.duration_s),
                "seed": int(req.seed), "arrival": req.arrival, "cv": trace["cv"],
                "workload_sha256": trace["workload_sha256"], "native_rps": trace["native_rps"],
                "rescaled": trace["rescaled"], "families": list(req.families),
                "slo": {m: list(getattr(slo, m)) for m in METRICS}, "slo_scale": float(req.slo_scale),
                "searcher": req.searcher, "verify": bool(req.verify),
                "verify_duration_s": req.verification_duration_s if req.verify else None,
                "verify_seeds": list(req.verification_seeds) if req.verify else None,
                "code_version": _version(), "catalog": cat_json,
                **({"preemption": req.preemption, "swap_space_gb": float(req.swap_space_gb)}
                   if req.preemption != "recompute" else {})}


def _version() -> str:
    try:
        from importlib.metadata import version
        return version("provisioner")
    except Exception:  # pragma: no cover - not installed
        return "0.0.0"
