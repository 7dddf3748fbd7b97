"""Goals cost and power: the least $/h or provisioned kW of a family meeting every SLO at
the requested load (iso-throughput; Splitwise Sec. IV-D).

A count grid (fixed hardware) is decided by the frontier search, started from the integer
program's bound; fixed hardware with a few batch caps or chunk budgets is one such grid
each, the candidates merged; a wider space (custom families, or `searcher="optuna"`) by optuna, each
trial's counts found by the frontier search. The candidates, cheapest first, go to
`_finalise.start_choice`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import pandas as pd

from ..designs import MAX_DESIGN_MACHINES, DesignBatch
from ..results import json_number
from ._bayes import BayesOutcome, bayes_search, fixed_space
from ._enumerate import Staircase, exhaustive_search, staircase_search
from ._evaluate import Evaluator
from ._finalise import infeasible, start_choice, with_rechecks
from ._ilp import CapacityBound, gap_pct
from ._problem import SearchProblem, objective_key
from ._result import FamilyResult
from ._space import FamilySpace

MAX_EXPANSIONS = 2              # count bounds double at most this often before giving up


@dataclass
class _Found:
    """The search's candidates (cheapest first; None: nothing feasible) and how it found them."""

    candidates: DesignBatch | None
    space: FamilySpace
    staircase: Staircase | None = None
    bayes: BayesOutcome | None = None
    closest: DesignBatch | None = None      # the design to report when nothing is feasible


def start_least_objective_family(problem: SearchProblem, family: str) -> Callable[[], FamilyResult]:
    """The cheapest (goal cost) or least-power (goal power) design of `family` at `rps`, in
    two steps: the search runs now, and the returned function finishes the family (its
    discrete-event re-check runs in between)."""
    req = problem.req
    key = objective_key(req.goal)
    space = problem.space(family)
    parts = space.grid_parts() if req.searcher != "optuna" else []
    grid = bool(parts)
    bound = problem.bound(space, goal=req.goal, rps=req.rps)
    problem.progress.start(f"{family}: search", None)
    counter = [0]
    ev = problem.evaluator(problem.trace, counter, rps=req.rps)
    searcher = "optuna" if not grid else ("ilp+enumeration" if req.searcher == "auto" else "enumeration")
    found = _grids_search(problem, parts, ev, bound, key) if grid else _bayes_search(problem, space, ev, bound, key)
    if found.candidates is None:
        fr = infeasible(problem, family, counter, bound, found.closest, searcher, evaluated=ev.scored())
        return lambda: fr
    cand = found.candidates
    pending = start_choice(problem, family, cand, problem.objective_values(cand, key), ev, req.rps)

    def finish() -> FamilyResult:
        choice = pending.result()
        evaluated = with_rechecks(ev.scored(), choice)
        if choice.design is None:
            return infeasible(problem, family, counter, bound, cand.take(np.array([0])), searcher,
                              evaluated=evaluated, reason=choice.reason, verification=choice.verification)
        row = problem.final_row(choice.design, problem.trace)
        value = float(row[key])
        fr = FamilyResult(family, True, row, req.rps, lower_bound=json_number(bound.value),
                          gap_to_bound_pct=json_number(gap_pct(value, bound.value)), searcher=searcher,
                          evaluations=counter[0], verification=choice.verification, staircase=found.staircase,
                          bound=bound, bayes=found.bayes, evaluated=evaluated)
        problem.progress.done()
        return fr

    return finish


def _grids_search(problem: SearchProblem, parts: list[FamilySpace], ev: Evaluator, bound: CapacityBound,
                  key: str) -> _Found:
    """The frontier search of each grid; candidates of all, cheapest first. The staircase
    (and space) kept for the report is the one of the grid with the cheapest candidate."""
    found = [_grid_search(problem, part, ev, bound, key) for part in parts]
    if len(found) == 1:
        return found[0]
    alive = [f for f in found if f.candidates is not None]
    if not alive:
        return found[-1]
    batch = DesignBatch.from_frame(pd.concat([f.candidates.to_frame() for f in alive], ignore_index=True))
    objective = problem.objective_values(batch, key)
    best = min(alive, key=lambda f: float(problem.objective_values(f.candidates.take(np.array([0])), key)[0]))
    return _Found(batch.take(np.lexsort((-batch.token_machines, objective))), best.space, staircase=best.staircase)


def _grid_search(problem: SearchProblem, space: FamilySpace, ev: Evaluator, bound: CapacityBound,
                 key: str) -> _Found:
    """The frontier search of a count grid, its bounds grown while its largest design fails."""
    req = problem.req
    for _ in range(MAX_EXPANSIONS + 1):
        top = (space.prompt.max_machines, space.token.max_machines if space.token is not None else 0)
        corner = space.designs([top[0]], [top[1]])
        corner_row = ev(corner).iloc[0]
        grown = tuple(min(2 * n, MAX_DESIGN_MACHINES) for n in top)   # no design has more
        if corner_row["slo_met"] or req.max_machines is not None or grown == top:
            break
        space = space.with_bounds(*grown)
    if not corner_row["slo_met"]:
        return _Found(None, space, closest=corner)
    if req.searcher == "exhaustive":
        exhaustive_search(space, ev)
    obj = problem.objective_of(space, key)
    sc = staircase_search(space, ev, objective=obj,
                          lower_bound=bound.value if (req.searcher == "auto" and bound.feasible) else None,
                          decide_all=req.searcher != "auto")
    p, t = sc.feasible_cells()
    if not len(p):
        return _Found(None, space, staircase=sc, closest=corner)
    order = np.lexsort((-t, obj(p, t)))
    return _Found(space.designs(p[order], t[order]), space, staircase=sc)


def _largest_hardware_counts(problem: SearchProblem, space: FamilySpace, biggest: DesignBatch, ev: Evaluator,
                             key: str, out: BayesOutcome) -> _Found:
    """The feasible counts of the hardware of `biggest` (the family's largest design, which
    met every SLO where no trial found a design), up to its counts: its cheapest, not the
    largest itself."""
    d = biggest.design(0)
    hw = {f: getattr(d, f) for f in ("prompt_machine", "prompt_power_cap", "prompt_tp", "token_machine",
                                     "token_power_cap", "token_tp", "prompt_batch_cap_tokens",
                                     "prefill_chunk_tokens", "mps_prefill_share")}
    fixed = fixed_space(space, hw, d.prompt_machines, max(d.token_machines, 1))
    sc = staircase_search(fixed, ev, objective=problem.objective_of(fixed, key), decide_all=False)
    p, t = sc.feasible_cells()
    batch = fixed.designs(p, t)
    return _Found(batch.take(np.lexsort((-batch.token_machines, problem.objective_values(batch, key)))), space,
                  bayes=out)


def _bayes_search(problem: SearchProblem, space: FamilySpace, ev: Evaluator, bound: CapacityBound,
                  key: str) -> _Found:
    """Optuna over the hardware of a wide space; the candidates are every trial's feasible cells."""
    req = problem.req
    warm = []
    if bound.warm_start and bound.warm_start.get("prompt"):
        po, _ = bound.warm_start["prompt"]
        hw = {"prompt_machine": po.machine, "prompt_power_cap": po.power_cap, "prompt_tp": po.capacity.tp}
        to = (bound.warm_start.get("token") or (None, 0))[0]
        if to is not None:
            hw.update(token_machine=to.machine, token_power_cap=to.power_cap, token_tp=to.capacity.tp)
        warm.append(hw)
    out = bayes_search(space, ev, objective_fn=lambda fs: problem.objective_of(fs, key),
                       bounds=lambda hw: problem.hardware_bounds(space, hw, req.rps), n_trials=req.n_trials,
                       batch=req.trial_batch, seed=req.seed if req.sampler_seed is None else req.sampler_seed,
                       warm_starts=warm, lower_bound=bound.value if bound.feasible else None,
                       designed_start=req.optuna_designed_start, durable=problem.durable_study(space.family),
                       expansions=MAX_EXPANSIONS if req.max_machines is None else 0)
    frames = []
    for run in out.runs.values():
        p, t = run.sc.feasible_cells()
        if len(p):
            frames.append(run.space.designs(p, t).to_frame())
    if not frames:
        biggest = space.designs([space.prompt.max_machines],
                                [space.token.max_machines if space.token is not None else 0])
        if ev(biggest)["slo_met"].iloc[0]:   # the family's own count bound holds one the trials' did not
            return _largest_hardware_counts(problem, space, biggest, ev, key, out)
        return _Found(None, space, bayes=out, closest=biggest)
    allc = pd.concat(frames, ignore_index=True).drop_duplicates()
    batch = DesignBatch.from_frame(allc)
    objective = problem.objective_values(batch, key)
    return _Found(batch.take(np.lexsort((-batch.token_machines, objective))), space, bayes=out)
