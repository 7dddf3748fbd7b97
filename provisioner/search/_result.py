"""`ProvisionResult`: the answer of `provision`, as tables, JSON (RESULT_SCHEMA.md) and rich tables."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ..results import design_result_json
from ..slo import METRICS, PERCENTILES

GOAL_OBJECTIVE = {"cost": "cost_usd_per_h", "power": "power_kw", "throughput": "sustainable_rps"}


@dataclass
class FamilyResult:
    """One family's answer.

    row : the reported design's full fluid-engine row on the search trace (or None when
        no design could be scored, e.g. a budget that buys no machine).
    feasible : met every SLO and passed the DES re-check (when verification is on).
    staircase : the frontier search's verdicts (grid families), for heatmaps.
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
    details: dict = field(default_factory=dict, repr=False)
    elapsed_s: float | None = None

    def to_json(self, workload: str, model: str, catalog=None) -> dict:
        if self.row is not None:
            obj = design_result_json(self.row, workload=workload, model=model,
                                     rps=float(self.rps if self.rps is not None else self.row.get("rps", np.nan)),
                                     catalog=catalog)
        else:
            obj = _empty_design_json(self.family, workload, model)
        obj.update(feasible=bool(self.feasible), reason=self.reason, sustainable_rps=_num(self.sustainable_rps),
                   lower_bound=_num(self.lower_bound), gap_to_bound_pct=_num(self.gap_to_bound_pct),
                   searcher=self.searcher, evaluations=int(self.evaluations), verification=self.verification,
                   elapsed_s=_num(self.elapsed_s))
        return obj


def _num(v):
    if v is None:
        return None
    v = float(v)
    return v if np.isfinite(v) else None


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
            "cost_usd_per_h": _num(r["cost_usd_per_h"]), "power_kw": _num(r["power_kw"]),
            "slo_met": bool(r["slo_met"]), "binding_slo": str(r["binding_slo"]), "min_margin": _num(r["min_margin"]),
            "slowdown": {m: {f"p{p}": _num(r[f"slowdown_{m}_p{p}"]) for p in PERCENTILES} for m in METRICS},
            "rps": _num(r["rps"]), "stopped_early": bool(r.get("stopped_early", False)),
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
                          "token_power_cap", "prompt_tp", "token_tp", "prompt_batch_cap_tokens", "cost_usd_per_h",
                          "power_kw", "throughput_rps", "binding_slo", "min_margin"):
                    rec[k] = fr.row.get(k)
                for m in METRICS:
                    for p in PERCENTILES:
                        rec[f"slowdown_{m}_p{p}"] = fr.row.get(f"slowdown_{m}_p{p}")
                        rec[f"margin_{m}_p{p}"] = fr.row.get(f"margin_{m}_p{p}")
            rec.update(rps=fr.rps, sustainable_rps=fr.sustainable_rps, lower_bound=fr.lower_bound,
                       gap_to_bound_pct=fr.gap_to_bound_pct, searcher=fr.searcher, evaluations=fr.evaluations,
                       verified=None if fr.verification is None else bool(fr.verification["met"]),
                       reason=fr.reason)
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

    def family(self, name: str) -> FamilyResult:
        for fr in self.families:
            if fr.family == name:
                return fr
        raise KeyError(name)

    # -- JSON --------------------------------------------------------------------------
    def to_json(self) -> dict:
        """The RESULT_SCHEMA.md object (NaN/inf as None)."""
        req = self.request
        workload = str(req.workload)
        best = [fr.to_json(workload, req.model, self._catalog) for fr in self.families]
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
        catalog = self._catalog
        if catalog is None:
            from hardware_catalog import load_catalog
            catalog = load_catalog()
        cat_json = {}
        for m in sorted(machines):
            mach = catalog.machine(m)
            cat_json[m] = {"cost_usd_per_h": float(mach.cost_usd_per_h), "cost_option": mach.default_cost_option,
                           "rated_power_kw": float(mach.rated_power_w) / 1e3}
        return {"workload": str(req.workload), "model": req.model, "duration_s": float(req.duration_s),
                "seed": int(req.seed), "arrival": "poisson", "families": list(req.families),
                "slo": {m: list(getattr(slo, m)) for m in METRICS}, "slo_scale": float(req.slo_scale),
                "searcher": req.searcher, "verify": bool(req.verify),
                "verify_duration_s": req.verification_duration_s if req.verify else None,
                "verify_seeds": list(req.verification_seeds) if req.verify else None,
                "code_version": _version(), "catalog": cat_json}

    # -- rendering -----------------------------------------------------------------------
    def render_table(self, console=None) -> None:
        """Print one table row per family (design, $/h, kW, nine slowdowns with margins,
        sustainable rps, gap to bound) and the winner, with rich."""
        from rich.console import Console
        from rich.table import Table

        console = console or Console()
        req = self.request
        if req.goal == "cost":
            title = f"least $/h meeting every SLO at {req.rps:g} req/s"
        elif req.goal == "power":
            title = f"least provisioned kW meeting every SLO at {req.rps:g} req/s"
        elif req.power_budget_kw is not None:
            title = f"highest sustainable req/s within {req.power_budget_kw:g} kW"
        else:
            title = f"highest sustainable req/s within ${req.cost_budget_usd_per_h:g}/h"
        from rich import box

        table = Table(title=f"provision: {title} — {req.workload}, {req.model}", box=box.SIMPLE_HEAD, pad_edge=False,
                      caption="bound: the integer program's bound on the objective; gap: distance to it; "
                              "DES: discrete-event re-check", caption_justify="left")
        for col, just in (("family", "left"), ("design", "left"), ("$/h", "right"), ("kW", "right"),
                          ("req/s", "right"), ("bound", "right"), ("gap", "right"), ("evals", "right"),
                          ("DES", "left")):
            table.add_column(col, justify=just, no_wrap=True, min_width=len(col))
        for fr in self.families:
            table.add_row(*self._cells(fr), style=None if fr.feasible else "dim")
        console.print(table)
        limits = ", ".join(f"{m.upper()} " + "/".join(f"{v:g}" for v in getattr(req.effective_slo, m)) for m in METRICS)
        slo = Table(title="SLO slowdowns and margins to the limits (%); binding in bold", box=box.SIMPLE_HEAD, pad_edge=False,
                    caption=f"limits (p50/p90/p99): {limits}", caption_justify="left")
        slo.add_column("family", no_wrap=True)
        for m in METRICS:
            for p in PERCENTILES:
                slo.add_column(f"{m.upper()}\np{p}", justify="right", no_wrap=True, min_width=4)
        for fr in self.families:
            slo.add_row(fr.family, *self._slo_cells(fr), style=None if fr.feasible else "dim")
        console.print(slo)
        for fr in self.families:
            if not fr.feasible and fr.reason:
                console.print(f"[yellow]{fr.family}[/]: {fr.reason}")
        if self.winner_family is None:
            console.print("[bold red]no family has a feasible design[/]")
        else:
            fr = self.family(self.winner_family)
            console.print(f"[bold green]winner: {fr.family}[/] — {_design_text(fr.row).replace(chr(10), ' ')}, "
                          f"${fr.row['cost_usd_per_h']:.1f}/h, {fr.row['power_kw']:.1f} kW"
                          + (f", {fr.sustainable_rps:.1f} req/s sustained" if fr.sustainable_rps else "")
                          + f"  ({self.elapsed_s:.1f} s)")

    def _cells(self, fr: FamilyResult) -> list[str]:
        r = fr.row
        gap = "-" if fr.gap_to_bound_pct is None else f"{fr.gap_to_bound_pct:.0f}%"
        ver = "-" if fr.verification is None else ("pass" if fr.verification["met"] else "fail")
        if r is None:
            return [fr.family + " ✗", "-", "-", "-", "-", _fmt(fr.lower_bound, ".0f"), gap, str(fr.evaluations), ver]
        rps = fr.sustainable_rps if fr.sustainable_rps is not None else fr.rps
        return [fr.family + ("" if fr.feasible else " ✗"), _design_text(r), f"{r['cost_usd_per_h']:.0f}",
                f"{r['power_kw']:.0f}", _fmt(rps, ".1f"), _fmt(fr.lower_bound, ".0f"), gap, str(fr.evaluations),
                ver]

    def _slo_cells(self, fr: FamilyResult) -> list[str]:
        r = fr.row
        cells = []
        for m in METRICS:
            for p in PERCENTILES:
                if r is None:
                    cells.append("-")
                    continue
                s, g = r[f"slowdown_{m}_p{p}"], r[f"margin_{m}_p{p}"]
                text = _fmt(s, ".2f") + ("" if not np.isfinite(g) else f"\n{100 * g:+.0f}")
                cells.append(f"[bold]{text}[/]" if str(r["binding_slo"]) == f"{m}_p{p}" else text)
        return cells


def _design_text(r) -> str:
    """Compact, two lines: '25P h100', '+8T h100@0.5' (machine names without the dgx-/hgx-
    prefix; '/tp4' when a machine runs several replicas)."""
    from hardware_catalog import load_catalog
    cat = load_catalog()

    def pool(n, m, cap, tp, tag):
        name = str(m).removeprefix("dgx-").removeprefix("hgx-")
        gpus = cat.machine(str(m)).gpus_per_machine
        tp_text = "" if int(tp) in (0, gpus) else f"/tp{int(tp)}"
        return f"{int(n)}{tag} {name}{tp_text}" + ("" if float(cap) >= 0.999 else f"@{float(cap):.2g}")
    if int(r["token_machines"]) == 0:
        return pool(r["prompt_machines"], r["prompt_machine"], r["prompt_power_cap"], r["prompt_tp"], "")
    return (f"{pool(r['prompt_machines'], r['prompt_machine'], r['prompt_power_cap'], r['prompt_tp'], 'P')}\n"
            f"+{pool(r['token_machines'], r['token_machine'], r['token_power_cap'], r['token_tp'], 'T')}")


def _fmt(v, spec: str = ".1f") -> str:
    if v is None:
        return "-"
    try:
        v = float(v)
    except (TypeError, ValueError):
        return str(v)
    if np.isnan(v):
        return "n/a"   # undefined, e.g. TBT when every request has one output token
    return format(v, spec) if np.isfinite(v) else "inf"


def _version() -> str:
    try:
        from importlib.metadata import version
        return version("provisioner")
    except Exception:  # pragma: no cover - not installed
        return "0.0.0"
