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
from ._goal_cost_power import least_objective_family
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
    t0 = time.perf_counter()
    problem = SearchProblem(request, perf, progress, store=open_store(study))
    unreachable = {f: problem.unservable(f) or problem.unreachable_slo(f) for f in request.families}
    if all(unreachable.values()):
        raise ProvisionerError(next(iter(unreachable.values())), params=("slo_scale",))
    search = max_throughput_family if request.goal == "throughput" else least_objective_family
    results = []
    for family in request.families:
        if unreachable[family]:
            searcher = "ilp+enumeration" if problem.space(family, (1, 1)).fixed_hardware else "optuna"
            results.append(FamilyResult(family, False, None, request.rps, reason=unreachable[family],
                                        searcher=searcher))
            continue
        t_family = time.perf_counter()
        results.append(search(problem, family))
        results[-1].elapsed_s = time.perf_counter() - t_family
    evaluated = pd.concat([f.evaluated for f in results if f.evaluated is not None] or [pd.DataFrame()],
                          ignore_index=True)
    return ProvisionResult(request, results, evaluated, time.perf_counter() - t0, problem.catalog)
