"""Search for the cluster design that meets every SLO at the least cost or power, or
sustains the most load within a budget (Splitwise Sec. IV-D).

Three searchers share one evaluation path (batched fluid simulations, `Evaluator`):
the frontier enumeration of a count grid, Bayesian optimization with optuna for wider
spaces, and an OR-Tools integer program on the fluid capacity model that bounds the
answer and starts the search. Finalists are re-checked with the discrete-event engine.

    from provisioner.search import ProvisionRequest, provision
    result = provision(ProvisionRequest(goal="cost", rps=70, families=("splitwise-hh",)))
    result.best, result.winner, result.to_json()

`SearchProblem(request)` is the question one call poses (spaces, bounds, the search
trace); `FamilyResult` carries a family's answer and how it was found (`bound`,
`staircase`, `bayes.trials`, `evaluated`).
"""

from ._bayes import BayesOutcome
from ._capacity import Demand, MachineCapacity, machine_capacity
from ._enumerate import Staircase, exhaustive_search, staircase_search
from ._evaluate import Evaluator, design_keys
from ._finalise import REASON_PARAMS, relax_advice
from ._ilp import CapacityBound, PoolOption, capacity_bound, pool_options
from ._problem import SearchProblem
from ._progress import Progress
from ._provision import provision
from ._request import GOALS, SEARCHERS, ProvisionRequest, check_machine_types
from ._result import FamilyResult, ProvisionResult
from ._space import FamilySpace, PoolSpace, family_space
from ._throughput import LoadScaledTraces, max_sustainable_rps, sustainable_rps

__all__ = [
    "ProvisionRequest", "ProvisionResult", "FamilyResult", "provision", "Progress", "SearchProblem", "GOALS", "SEARCHERS",
    "Evaluator", "FamilySpace", "PoolSpace", "family_space", "staircase_search", "exhaustive_search", "Staircase",
    "capacity_bound", "CapacityBound", "PoolOption", "pool_options", "Demand", "MachineCapacity",
    "machine_capacity", "sustainable_rps", "max_sustainable_rps", "LoadScaledTraces", "BayesOutcome", "relax_advice",
    "REASON_PARAMS", "design_keys", "check_machine_types",
]
