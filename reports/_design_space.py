"""Plot data of the design space: heatmaps per family (Splitwise Fig. 12), the Pareto
frontier, and the answers normalized to a baseline (Figs. 18-19)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from provisioner import ProvisionerError

from ._base import (CHECK_NAMES, DEFAULT_BASELINE, OBJECTIVE_COLUMN, SUMMARY_METRICS, best_throughput_rps,
                    evaluated_frame, is_feasible, meets_slos)
from ._schema import num


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
    slo_met: np.ndarray             # (ny, nx) bool, False where not evaluated (the search trace's verdict)
    slowdown: np.ndarray            # (ny, nx, 9) in CHECK_NAMES order
    binding_slo: np.ndarray         # (ny, nx) str
    min_margin: np.ndarray          # (ny, nx)
    optimum: tuple[int, int] | None  # (prompt_machines, token_machines) of the answer
    objective: str                  # column the goal minimizes
    recheck_failed: np.ndarray | None = None   # (ny, nx) bool: met the search trace, failed the re-check

    @property
    def split(self) -> bool:
        return bool(np.any(self.token_counts > 0))

    @property
    def meets(self) -> np.ndarray:
        """Every SLO holds on the search trace and the re-check did not reject the design."""
        return self.slo_met & ~self.recheck_failed if self.recheck_failed is not None else self.slo_met

    @property
    def masked_cost(self) -> np.ndarray:
        """Cost where every SLO holds (and the re-check agrees), NaN elsewhere (what the heatmap colours)."""
        return np.where(self.meets, self.cost_usd_per_h, np.nan)


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
    rows = (rows.assign(_rps=rows.rps.fillna(-np.inf), _meets=meets_slos(rows))
            .sort_values(["_meets", "slo_met", "_rps", objective], ascending=[False, False, False, True],
                         kind="stable")
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
        optimum=None, objective=objective, recheck_failed=grid("slo_met", False, bool) & ~grid("_meets", False, bool))
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
    met = rows[meets_slos(rows)]
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
    """SLO-meeting designs across families with cost, power and sustainable throughput
    (those the re-check rejected left out: `meets_slos`).

    A design's throughput is the highest load it was scored at and met every SLO.
    `on_frontier` marks the designs no other design beats on all three of
    (lower cost, lower power, higher throughput).
    """
    key = ["family", "prompt_machines", "token_machines", "prompt_machine", "token_machine",
           "prompt_power_cap", "token_power_cap"]
    met = evaluated[meets_slos(evaluated)]
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
                               f"use one of {', '.join(families)}", params=("baseline",))
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
