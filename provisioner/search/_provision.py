"""`provision(request)`: search every family, verify the finalists, pick the winner.

Per family (Splitwise Sec. IV-D):

1. the space (`_space.py`) with count bounds from the capacity model (`_problem.py`);
2. the integer program's bound (`_ilp.py`) — the lower bound on cost or power, or the
   upper bound on throughput, and the starting point of the search;
3. the search, always through one `Evaluator` (batched fluid simulations):
   goals cost / power (`_goal_cost_power.py`) — the frontier search on a count grid
   (`_enumerate.py`) or optuna on a wider space (`_bayes.py`); goal throughput
   (`_goal_throughput.py`) — the designs the budget affords at most, raced by bisection
   on the load (`_throughput.py`);
4. verification of the finalists with the discrete-event engine (`_finalise.py`, `_verify.py`);
5. the reported design re-scored in full (no early stop) for the result.
"""

from __future__ import annotations

import time

import pandas as pd

from perfmodels import LatencyModel

from ..errors import ProvisionerError
from ..store import open_store
from ._goal_cost_power import start_least_objective_family
from ._goal_throughput import max_throughput_family
from ._problem import SearchProblem
from ._progress import Progress
from ._request import ProvisionRequest
from ._result import FamilyResult, ProvisionResult

__all__ = ["Progress", "provision"]


def provision(request: ProvisionRequest, *, progress: Progress | None = None,
              perf: LatencyModel | None = None, study=None) -> ProvisionResult:
    """Answer a provisioning question (see `ProvisionRequest`).

    study : a SQLite file path, a database URL (`postgresql://...`) or a
        `provisioner.store.ResultStore`: every simulation, DES re-check and optuna trial
        is stored there, so the same call run again (after a kill, say) re-uses them and
        gives the same answer. None: nothing is kept.
    """
    if not isinstance(request, ProvisionRequest):   # a dict was an AttributeError from inside the search
        raise ProvisionerError(f"request must be a ProvisionRequest, e.g. provision(ProvisionRequest(goal='cost', "
                               f"rps=70)) (got {type(request).__name__})", params=("request",))
    if perf is not None and not isinstance(perf, LatencyModel):
        raise ProvisionerError(f"perf must be a perfmodels.LatencyModel or None (got {type(perf).__name__})",
                               params=("perf",))
    t0 = time.perf_counter()
    problem = SearchProblem(request, perf, progress, store=open_store(study))
    unreachable = {f: problem.unservable(f) or problem.unreachable_slo(f) for f in request.families}
    if all(unreachable.values()):
        raise ProvisionerError(next(iter(unreachable.values())), params=("slo_scale",))
    if request.goal != "throughput":
        for family in request.families:   # refuses a load no design can hold before any search runs
            if not unreachable[family]:
                problem.space(family)
    if request.verify:
        problem.des_pool.start()
    # Goals cost and power: a family's discrete-event re-check runs in the background while
    # the next family is searched; the families are finished in order once all are searched.
    started = {}   # family -> (function finishing it, seconds its search took)
    for family in request.families:
        if unreachable[family]:
            continue
        t_family = time.perf_counter()
        if request.goal == "throughput":
            finish = _done(max_throughput_family(problem, family))
        else:
            finish = start_least_objective_family(problem, family)
        started[family] = (finish, time.perf_counter() - t_family)
    results = [_finish(*started[f]) if f in started else _unreachable(problem, f, unreachable[f])
               for f in request.families]
    evaluated = pd.concat([f.evaluated for f in results if f.evaluated is not None] or [pd.DataFrame()],
                          ignore_index=True)
    return ProvisionResult(request, results, evaluated, time.perf_counter() - t0, problem.catalog)


def _done(fr: FamilyResult):
    return lambda: fr


def _finish(finish, searched_s: float) -> FamilyResult:
    """A family's result; its `elapsed_s` is its search plus the wait for its re-check."""
    t0 = time.perf_counter()
    fr = finish()
    fr.elapsed_s = searched_s + time.perf_counter() - t0
    return fr


def _unreachable(problem: SearchProblem, family: str, reason: str) -> FamilyResult:
    searcher = "ilp+enumeration" if problem.space(family, (1, 1)).fixed_hardware else "optuna"
    return FamilyResult(family, False, None, problem.req.rps, reason=reason, searcher=searcher)
