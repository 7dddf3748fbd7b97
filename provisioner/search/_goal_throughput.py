"""Goal throughput: the highest load a family sustains within a power or cost budget
(iso-power, iso-cost; Splitwise Sec. IV-D).

The designs the budget affords at most (none dominated by another affordable one) are
raced by bisection on the load (`_throughput.max_sustainable_rps`); the sustaining ones,
cheapest in the budget's currency first, go to `_finalise.choose`. A load at which no design
passes the discrete-event re-check is lowered in 3% steps, a pass bisected against the
step above it, else bisected further down (`_verified_rps`), every affordable design
competing again at each load tried.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..designs import DesignBatch
from ..results import json_number
from ._evaluate import Evaluator
from ._finalise import Choice, choose, infeasible, with_rechecks
from ._ilp import gap_pct
from ._problem import SearchProblem
from ._result import FamilyResult
from ._space import FamilySpace
from ._throughput import DEFAULT_REL_TOL, MIN_REQUESTS, _geo_mid, max_sustainable_rps

THROUGHPUT_MAX_CANDIDATES = 96  # designs raced per family (best capacity estimates first)
THROUGHPUT_VERIFY_STEP = 0.03   # a sustainable rps that fails the DES is lowered by 3% and retried,
THROUGHPUT_VERIFY_TRIES = 6     # this many times (a pass is then bisected against the load above it);
THROUGHPUT_VERIFY_FLOOR = 0.5   # then bisected down to this fraction of the search trace's rps


class _Evaluators:
    """One evaluator per load (the traces of `problem.scaled`), sharing one counter.

    It is also the traces `max_sustainable_rps` bisects over: `at(rps)` is the evaluator of
    the trace at `rps`, so each design is judged at the load the bisection names. (Judged
    at a trace's `rate_rps`, its whole requests over its window, a 6.8-s replayed window
    at 5.478 req/s, 31 requests, was judged at 4.56 req/s, and the answer's own SLO block
    at 5.478 said missed.)
    """

    def __init__(self, problem: SearchProblem):
        self.problem = problem
        self.counter = [0]
        self._by_rps: dict[float, Evaluator] = {}

    @property
    def duration_s(self) -> float:
        return self.problem.scaled.duration_s

    def at(self, rps: float) -> Evaluator:
        key = round(float(rps), 9)
        if key not in self._by_rps:
            self._by_rps[key] = self.problem.evaluator(self.problem.scaled.at(rps), self.counter, rps=rps)
        return self._by_rps[key]

    def scored(self) -> pd.DataFrame:
        return pd.concat([e.scored() for e in self._by_rps.values()] or [pd.DataFrame()], ignore_index=True)


def max_throughput_family(problem: SearchProblem, family: str) -> FamilyResult:
    """The design of `family` within the budget that sustains the highest load."""
    req = problem.req
    space = problem.space(family)
    searcher = "ilp+enumeration" if space.fixed_hardware else "enumeration"   # custom: caps on a grid, no optuna
    cand = budget_candidates(problem, space)
    bound = problem.bound(space, goal="throughput")
    if cand is None or not len(cand):
        return FamilyResult(family, False, None, None, reason=(
            f"the budget of {problem.budget_text()} does not buy the smallest {family} design "
            f"({problem.smallest_text(space)}); raise the budget"), lower_bound=json_number(bound.value),
            searcher=searcher)
    evs = _Evaluators(problem)
    hi = bound.value if bound.feasible else 100.0
    problem.progress.start(f"{family}: sustainable rps", None)
    rps, frame = max_sustainable_rps(cand, evs, lambda d, ev: ev(d),
                                     rps_lo=0.6 * hi, rps_hi=hi)
    if not np.isfinite(rps):
        biggest = cand.take(np.array([int(np.argmax(problem.objective_values(cand, problem.budget_key)))]))
        r_min = MIN_REQUESTS / req.duration_s
        fr = infeasible(problem, family, evs.counter, bound, biggest, searcher, evaluated=evs.scored(), rps=r_min)
        fr.reason = (f"no design within {problem.budget_text()} meets every SLO even at {r_min:g} req/s "
                     f"(binding {fr.row['binding_slo']}); raise the budget or loosen the SLO")
        return fr
    # The designs that sustain the load, cheapest in the budget's currency first.
    alive = cand.take(frame["candidate"].to_numpy())
    obj = problem.objective_values(alive, problem.budget_key)
    order = np.lexsort((-frame["min_margin"].to_numpy(float), np.round(obj, 9)))
    alive, obj = alive.take(order), obj[order]
    choices: list[Choice] = []
    if req.verify:
        rps, choice = _verified_rps(problem, family, cand, frame, alive, obj, evs, rps, choices)
        if choice.design is None:
            return infeasible(problem, family, evs.counter, bound, alive, searcher,
                              evaluated=with_rechecks(evs.scored(), *choices),
                              reason=choice.reason, verification=choice.verification, rps=rps)
    else:
        choice = Choice(alive.design(0), None, None)
    row = problem.final_row(choice.design, problem.scaled.at(rps))
    fr = FamilyResult(family, True, row, rps, sustainable_rps=rps, lower_bound=json_number(bound.value),
                      gap_to_bound_pct=json_number(gap_pct(rps, bound.value)), searcher=searcher,
                      evaluations=evs.counter[0], verification=choice.verification, bound=bound,
                      candidates=len(cand), evaluated=with_rechecks(evs.scored(), *choices))
    problem.progress.done()
    return fr


def _verified_rps(problem: SearchProblem, family: str, cand: DesignBatch, frame: pd.DataFrame, alive: DesignBatch,
                  obj: np.ndarray, evs: _Evaluators, rps: float, choices: list) -> tuple[float, Choice]:
    """The highest load at which a design passes the re-check: the search trace's `rps`
    (its designs `alive`, cheapest first, `obj`; `frame` their rows, `candidate` their
    index in `cand`), else the first of THROUGHPUT_VERIFY_TRIES loads THROUGHPUT_VERIFY_STEP
    apart under it, bisected against the load above it to the search's own resolution
    (DEFAULT_REL_TOL), else the best of a bisection from the last of them down to
    THROUGHPUT_VERIFY_FLOOR x `rps`. Under `rps` every affordable design of `cand` competes
    again. With none passing, the lowest load tried and its failure. Every `Choice` made is
    appended to `choices` (the designs each load's re-check rejected).

    Stepping among the designs that sustained the search trace's load only, and no further,
    called $342/h of splitwise-hh infeasible at 14.49 req/s (a load never tried) where
    `--goal cost --rps 14` verified 7P+2T at $342/h (now 14.5 req/s). Stopping at the first
    step that passed rated $1216/h of splitwise-hh at 68.3 req/s where `--goal cost --rps 70`
    verifies 26P+6T at $1216/h."""
    choice = choose(problem, family, alive, obj, evs.at(rps), rps)
    choices.append(choice)
    if choice.design is not None:
        return rps, choice
    everyone, every_obj = _cheapest_first(problem, cand, frame)

    def attempt(load: float) -> Choice:
        choices.append(choose(problem, family, everyone, every_obj, evs.at(load), load))
        return choices[-1]

    failed, load = (rps, choice), rps
    for _ in range(THROUGHPUT_VERIFY_TRIES):
        load = float(f"{load / (1 + THROUGHPUT_VERIFY_STEP):.4g}")
        choice = attempt(load)
        if choice.design is not None:
            return _bisect_verified(attempt, (load, choice), failed)
        failed = (load, choice)
    return _bisect_verified(attempt, None, failed, lo=rps * THROUGHPUT_VERIFY_FLOOR)


def _bisect_verified(attempt, passed: tuple[float, Choice] | None, failed: tuple[float, Choice],
                     lo: float | None = None) -> tuple[float, Choice]:
    """Bisect between a load that passed the re-check (`passed`, or a bare lower end `lo`)
    and one that failed, THROUGHPUT_VERIFY_TRIES times at most, until the two are within
    DEFAULT_REL_TOL. The highest load that passed with its choice, else the lowest that failed."""
    lo = passed[0] if passed is not None else lo
    hi = failed[0]
    for _ in range(THROUGHPUT_VERIFY_TRIES):
        load = float(_geo_mid(np.array([lo]), np.array([hi]))[0])
        if hi <= lo * (1 + DEFAULT_REL_TOL) or not lo < load < hi:
            break
        choice = attempt(load)
        if choice.design is not None:
            passed, lo = (load, choice), load
        else:
            failed, hi = (load, choice), load
    return passed or failed


def _cheapest_first(problem: SearchProblem, cand: DesignBatch, frame: pd.DataFrame) -> tuple[DesignBatch, np.ndarray]:
    """Every design of `cand`, cheapest in the budget's currency first; at equal cost those
    that sustained the search trace's load (`frame`) first, widest margin first."""
    obj = problem.objective_values(cand, problem.budget_key)
    margin = np.full(len(cand), np.inf)
    margin[frame["candidate"].to_numpy()] = -frame["min_margin"].to_numpy(float)
    order = np.lexsort((margin, np.round(obj, 9)))
    return cand.take(order), obj[order]


def budget_candidates(problem: SearchProblem, space: FamilySpace) -> DesignBatch | None:
    """The designs the budget affords that no other affordable design dominates, each pool
    within the question's max_machines (when given)."""
    problem.refuse_unenumerable_budget(space)
    bkey = problem.budget_key
    budget = problem.budget * (1 + 1e-9)
    cap = problem.req.max_machines or np.inf
    frames = []
    steps = 4 if not space.fixed_hardware else 1
    for pm, ptp in space.prompt.choices:
        for pc in space.prompt.cap_grid(steps):
            up = problem.unit_objective(pm, pc, bkey)
            if space.token is None:
                n = int(min(np.floor(budget / up), cap))
                if n >= 1:
                    frames.append(space.designs([n], prompt_machine=[pm], prompt_power_cap=[pc],
                                                prompt_tp=[ptp]).to_frame())
                continue
            for tm, ttp in space.token.choices:
                for tc in space.token.cap_grid(steps):
                    frame = _split_frontier(space, budget, up, problem.unit_objective(tm, tc, bkey),
                                            (pm, pc, ptp), (tm, tc, ttp), cap)
                    if frame is not None:
                        frames.append(frame)
    if not frames:
        return None
    frame = pd.concat(frames, ignore_index=True)
    # Chunk budgets and MPS shares cost nothing: every affordable design comes with each of them.
    frame = pd.concat([frame.assign(prefill_chunk_tokens=c) for c in space.prefill_chunks], ignore_index=True)
    frame = pd.concat([frame.assign(mps_prefill_share=f) for f in space.mps_shares], ignore_index=True)
    batch = DesignBatch.from_frame(frame)
    if len(batch) > THROUGHPUT_MAX_CANDIDATES:
        est = _rps_estimate(problem, batch)
        batch = batch.take(np.sort(np.argsort(-est, kind="stable")[:THROUGHPUT_MAX_CANDIDATES]))
    return batch


def _split_frontier(space: FamilySpace, budget: float, up: float, ut: float, prompt: tuple,
                    token: tuple, cap: float = np.inf) -> pd.DataFrame | None:
    """The undominated affordable (p, t) of one (machine, cap, TP) choice per pool, each
    count at most `cap`."""
    (pm, pc, ptp), (tm, tc, ttp) = prompt, token
    t = np.arange(1, int(min(np.floor((budget - up) / ut), cap)) + 1)
    if not len(t):
        return None
    p = np.minimum(np.floor((budget - t * ut) / up), cap).astype(int)
    keep = p >= 1
    t, p = t[keep], p[keep]
    # Drop (p, t) when (p, t + 1) is affordable too: it is dominated.
    last = np.r_[p[1:] < p[:-1], True] if len(p) else p
    t, p = t[last], p[last]
    if not len(t):
        return None
    n = len(p)
    return space.designs(p, t, prompt_machine=[pm] * n, token_machine=[tm] * n, prompt_power_cap=[pc] * n,
                         token_power_cap=[tc] * n, prompt_tp=[ptp] * n, token_tp=[ttp] * n).to_frame()


def _rps_estimate(problem: SearchProblem, batch: DesignBatch) -> np.ndarray:
    """Rough sustainable rps of each design: machines over the mean work per request."""
    out = np.empty(len(batch))
    for i in range(len(batch)):
        d = batch.design(i)
        cp = problem.capacity(d.prompt_machine, d.prompt_power_cap, d.prompt_tp)
        if d.token_machines == 0:
            out[i] = d.prompt_machines / cp.work_s_per_request
            continue
        ct = problem.capacity(d.token_machine, d.token_power_cap, d.token_tp)
        out[i] = min(d.prompt_machines / cp.prompt_s_per_request,
                     d.token_machines / max(ct.decode_s_per_request, 1e-9)) + \
            0.5 * (d.prompt_machines + d.token_machines) / (cp.prompt_s_per_request + ct.decode_s_per_request)
    return out
