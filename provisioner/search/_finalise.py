"""The end of a family's search: choose among the scored-feasible candidates (with the
discrete-event re-check when verification is on), and word the answer when nothing is
feasible."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..designs import DESIGN_FIELDS, DesignBatch
from ..results import json_number
from ..slo import PERCENTILES
from ._evaluate import Evaluator
from ._ilp import CapacityBound
from ._problem import SearchProblem
from ._result import FamilyResult
from ._verify import start_verification


@dataclass
class Choice:
    """What `choose` settled on: the design (None if none passed), the verification JSON
    (None without verification) and, when no design passed, why."""

    design: object | None
    verification: dict | None
    reason: str | None
    rechecked: pd.DataFrame | None = None   # the designs re-checked: design fields, `rps`, `recheck`


class PendingChoice:
    """A `Choice` whose discrete-event re-check may still be running: `result()` waits."""

    def __init__(self, finish):
        self._finish, self._choice = finish, None

    def result(self) -> Choice:
        if self._choice is None:
            self._choice = self._finish()
        return self._choice


def choose(problem: SearchProblem, family: str, cand: DesignBatch, objective: np.ndarray, ev: Evaluator,
           rps: float) -> Choice:
    """The design to report among `cand` (sorted by `objective`); `ev` is the search-trace
    evaluator at `rps`."""
    return start_choice(problem, family, cand, objective, ev, rps).result()


def start_choice(problem: SearchProblem, family: str, cand: DesignBatch, objective: np.ndarray, ev: Evaluator,
                 rps: float) -> PendingChoice:
    """`choose`, its discrete-event re-check left running in `problem.des_pool`."""
    req = problem.req
    if not req.verify:
        choice = _cheapest_scored(cand, objective, ev)
        return PendingChoice(lambda: choice)
    verify_traces = verification_traces(problem, rps)
    # The verification traces' fluid screen is counted in the verification, not in the
    # family's `evaluations` (which match its `evaluated` rows on the search trace).
    screen = [ev] + [problem.evaluator(tr, [0], rps=rps) for tr in verify_traces]
    problem.progress.start(f"{family}: verify (DES)", None)
    pending = start_verification(cand, objective, screen, traces=verify_traces, seeds=req.verification_seeds,
                                 model=req.model, slo=problem.slo, rps=rps, duration_s=req.verification_duration_s,
                                 perf=problem.perf, pool=problem.des_pool, store=problem.store,
                                 on_progress=lambda: problem.progress.advance(1), preemption=req.preemption,
                                 swap_space_gb=req.swap_space_gb)
    return PendingChoice(lambda: _verified_choice(req, cand, pending.outcome(), rps))


def _verified_choice(req, cand: DesignBatch, out, rps: float) -> Choice:
    """The `Choice` of a finished candidate walk (`VerifyOutcome` out) at load `rps`."""
    rechecked = _rechecked(cand, out, rps)
    if out.index is None:
        if out.last_failure is not None:
            v = out.last_failure
            reason = (f"designs feasible on the search trace fail the discrete-event re-check ({v.binding} "
                      f"margin {v.min_margin:+.0%} on {v.duration_s:g}-s traces, seeds "
                      f"{', '.join(map(str, v.seeds))}); {relax_advice(req)}")
            return Choice(None, {**v.to_json(), "des_runs": out.des_runs, "screened": out.screened}, reason,
                          rechecked)
        reason = (f"no design passes the fluid screen on the {req.verification_duration_s:g}-s verification "
                  f"traces (seeds {', '.join(map(str, req.verification_seeds))}); {relax_advice(req)}")
        return Choice(None, None, reason, rechecked)
    return Choice(cand.design(out.index),
                  {**out.verification.to_json(), "des_runs": out.des_runs, "screened": out.screened}, None,
                  rechecked)


def _rechecked(cand: DesignBatch, out, rps: float) -> pd.DataFrame:
    """The designs the walk rejected ("failed") and the one it kept ("passed"), at `rps`."""
    index = list(out.failed) + ([out.index] if out.index is not None else [])
    verdict = ["failed"] * len(out.failed) + (["passed"] if out.index is not None else [])
    return cand.take(np.array(index, dtype=int)).to_frame().assign(rps=float(rps), recheck=verdict)


def with_rechecks(evaluated: pd.DataFrame, *choices: Choice) -> pd.DataFrame:
    """`evaluated` with a `recheck` column where a design met every SLO on the search trace:
    "passed" at a load it passed, else "failed" at or above the lowest load at which the
    re-check (`choices`' walks) rejected it (a higher load is no easier: goal throughput's
    search scored designs at loads above those the re-check tried), else None. The report draws
    the failed ones apart: cheaper than the answer, they met the search trace only."""
    frames = [c.rechecked for c in choices if c is not None and c.rechecked is not None and len(c.rechecked)]
    out = evaluated.assign(recheck=None) if len(evaluated) else evaluated
    if not frames or not len(evaluated):
        return out
    checked = pd.concat(frames, ignore_index=True)
    keys = [k for k in DESIGN_FIELDS if k in evaluated.columns and k in checked.columns]
    failed_from: dict[tuple, float] = {}   # design -> the lowest load it failed at
    passed_at: set[tuple] = set()
    for *design, rps, verdict in checked[keys + ["rps", "recheck"]].itertuples(index=False, name=None):
        if verdict == "failed":
            failed_from[tuple(design)] = min(failed_from.get(tuple(design), np.inf), round(float(rps), 9))
        else:
            passed_at.add((*design, round(float(rps), 9)))

    def verdict_of(design: tuple, rps: float) -> str | None:
        load = round(float(rps), 9)
        if (*design, load) in passed_at:   # the answer (the DES's verdicts need not be monotone in the load)
            return "passed"
        return "failed" if load >= failed_from.get(design, np.inf) else None

    rows = out[keys + ["rps"]].itertuples(index=False, name=None)
    found = [verdict_of(tuple(r[:-1]), r[-1]) for r in rows]
    out["recheck"] = [v if met else None for v, met in zip(found, out["slo_met"].to_numpy(bool))]
    return out


def _cheapest_scored(cand: DesignBatch, objective: np.ndarray, ev: Evaluator) -> Choice:
    """The cheapest scored-feasible design (ties: the widest margin on the search trace)."""
    n_tied = int(np.sum(objective <= objective[0] * (1 + 1e-9)))
    head = cand.take(np.arange(min(max(n_tied, 1), 64)))
    frame = ev(head)
    ok = frame["slo_met"].to_numpy(bool)
    if not ok.any():
        return Choice(None, None, "no design of the space meets every SLO on the search trace")
    obj = objective[:len(head)]
    idx = np.flatnonzero(ok)
    best = idx[np.lexsort((-frame["min_margin"].to_numpy(float)[idx], np.round(obj[idx], 9)))][0]
    return Choice(head.design(int(best)), None, None)


def verification_traces(problem: SearchProblem, rps: float) -> list:
    """The traces of the discrete-event re-check at `rps` (one per verification seed)."""
    req = problem.req
    req.check_verification_window(rps)   # goal throughput: the load found (the others were checked up front)
    return [req.traces(req.verification_duration_s, s).at(rps) for s in req.verification_seeds]


def infeasible(problem: SearchProblem, family: str, counter: list, bound: CapacityBound | None,
               designs: DesignBatch, searcher: str, *, evaluated: pd.DataFrame | None, reason: str | None = None,
               verification=None, rps=None) -> FamilyResult:
    """A family with nothing feasible: its closest design (`designs[0]`) and why (the
    binding SLO unless `reason` says otherwise)."""
    req = problem.req
    design = designs.design(0)
    trace = problem.trace if rps is None else problem.scaled.at(rps)
    full = problem.final_row(design, trace)
    if reason is None:
        reason = _binding_reason(problem, full, design, req.rps if rps is None else rps)
    fr = FamilyResult(family, False, full, req.rps if rps is None else rps, reason=reason,
                      lower_bound=json_number(bound.value) if bound is not None else None, searcher=searcher,
                      evaluations=counter[0], verification=verification,
                      evaluated=evaluated if evaluated is not None else pd.DataFrame())
    problem.progress.done()
    return fr


def _binding_reason(problem: SearchProblem, full: pd.Series, design, rps: float) -> str:
    b = str(full["binding_slo"])
    m, p = b.split("_p")
    lim = getattr(problem.slo, m)[PERCENTILES.index(int(p))]
    size = (f"{design.prompt_machines} prompt + {design.token_machines} token machines"
            if design.token_machines else f"{design.prompt_machines} machines")
    slowdown = float(full[f"slowdown_{b}"])
    if slowdown <= lim:   # not the design that failed (a search whose candidates all failed elsewhere)
        return (f"no design searched meets every SLO at {rps:g} req/s ({b} closest to its limit: {slowdown:.2f}x "
                f"of {lim:g}x with {size}); {relax_advice(problem.req)}")
    return (f"{b} binds: slowdown {slowdown:.2f}x > {lim:g}x even with {size} at {rps:g} req/s; "
            f"{relax_advice(problem.req)}")


# The request's parameters a family's reason names as its fix (`relax_advice`): a front end
# says them its own way (the CLI: its flags, by the errors' PARAM_FLAGS).
REASON_PARAMS = ("max_machines", "slo_scale")


def relax_advice(req) -> str:
    """What relaxes a question no design meets: goals cost and power fix the load and search
    the machines; goal throughput fixes the budget and lowers the load itself. Names the
    request's parameters (`REASON_PARAMS`)."""
    if req.goal == "throughput":
        return "raise the budget or loosen the SLO (slo_scale)"
    return "relax with more machines (max_machines), a looser SLO (slo_scale) or a lower load"
