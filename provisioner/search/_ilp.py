"""An integer program on the fluid capacity model: a bound on the optimum and a warm start.

Variables, for each pool and each machine option k of the pool (machine type, power
cap): an integer count n_k, a binary u_k choosing the option (a design uses one option
per pool), and the request rates zp_k, zd_k whose prefill / decode run on option k.

    sum_k zp_k = rate,  sum_k zd_k = rate                 every request is served
    zp_k a_k + zd_k b_k <= (1 + drain) n_k                machine-seconds per second
    sum_k n_k kv_k >= rate x KV token-seconds per request  Little's law on HBM
    n_k <= max_k u_k,  n_k >= min_k u_k,  sum_k u_k = 1   one option per pool
    cost or power <= budget                               iso-cost / iso-power

minimizing cost or power at a given rate, or maximizing the rate within a budget. The
work per request (a_k prompt, b_k decode) is optimistic (`_capacity.py`) and any machine
may serve either phase (the mixed pool lends machines), so no design the simulator
finds feasible beats the bound. A continuous power cap is covered by a grid of caps
whose options take the power of the lower grid point and the speed of the upper one:
still a bound for every cap in between.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import ProvisionerError
from ._capacity import DRAIN_ALLOWANCE, Demand, MachineCapacity

GOALS = ("cost", "power", "throughput")


@dataclass(frozen=True)
class PoolOption:
    """One hardware choice of a pool as the integer program sees it."""

    capacity: MachineCapacity      # speed (work per request) and memory
    cost_usd_per_h: float          # per machine
    power_kw: float                # per machine, provisioned

    @property
    def machine(self) -> str:
        return self.capacity.machine

    @property
    def power_cap(self) -> float:
        return self.capacity.power_cap


@dataclass(frozen=True)
class CapacityBound:
    """The integer program's answer.

    value : bound on the objective ($/h, kW, or requests/s for goal throughput); a
        lower bound for cost and power, an upper bound for throughput. NaN if infeasible.
    objective : "cost_usd_per_h", "power_kw" or "rps".
    warm_start : {"prompt": (option, count), "token": (option, count) or None} of the
        integer solution, the design a searcher may start from.
    status : solver status ("optimal", "feasible", "infeasible").
    """

    value: float
    objective: str
    warm_start: dict | None
    status: str

    @property
    def feasible(self) -> bool:
        return self.status in ("optimal", "feasible")


def capacity_bound(prompt_options: list[PoolOption], token_options: list[PoolOption] | None, demand: Demand, *,
                   goal: str, rps: float | None = None, cost_budget_usd_per_h: float | None = None,
                   power_budget_kw: float | None = None, max_prompt: int = 1000, max_token: int = 1000,
                   kv_solo_iteration_s: float | None = None, time_limit_s: float = 10.0) -> CapacityBound:
    """Bound the best design of a family (see the module docstring).

    Parameters
    ----------
    prompt_options, token_options : hardware choices per pool (token None: a baseline).
    demand : the trace's per-request demand (`Demand.from_trace`).
    goal : "cost" or "power" (needs `rps`) or "throughput" (needs one budget).
    kv_solo_iteration_s : fastest decode iteration for the KV-residence term (default:
        the fastest option's).
    """
    from ortools.linear_solver import pywraplp

    _check_goal(goal, rps, cost_budget_usd_per_h, power_budget_kw)
    solver = _mip_solver(time_limit_s)
    inf = solver.infinity()
    pools = [("prompt", prompt_options, max_prompt)]
    if token_options is not None:
        pools.append(("token", token_options, max_token))
    all_opts = [o for _, opts, _ in pools for o in opts]
    if not all_opts:
        raise ProvisionerError("no machine option can hold the model")
    rate = solver.NumVar(0.0, inf, "rate") if goal == "throughput" else float(rps)
    fastest = kv_solo_iteration_s or min(o.capacity.solo_iteration_s for o in all_opts)
    kv_per_rps = demand.kv_token_iterations_per_request * fastest
    zp_sum, zd_sum, kv_sum, cost, power = 0, 0, 0, 0, 0
    counts = []
    for pool, opts, ub in pools:
        us = []
        for j, o in enumerate(opts):
            n = solver.IntVar(0, ub, f"n_{pool}_{j}")
            u = solver.BoolVar(f"u_{pool}_{j}")
            zp = solver.NumVar(0.0, inf, f"zp_{pool}_{j}")
            zd = solver.NumVar(0.0, inf, f"zd_{pool}_{j}")
            solver.Add(n <= ub * u)
            solver.Add(n >= u)
            solver.Add(zp * o.capacity.prompt_s_per_request + zd * o.capacity.decode_s_per_request
                       <= (1.0 + DRAIN_ALLOWANCE) * n)
            zp_sum += zp
            zd_sum += zd
            kv_sum += o.capacity.kv_capacity_tokens * n
            cost += o.cost_usd_per_h * n
            power += o.power_kw * n
            us.append(u)
            counts.append((pool, o, n))
        solver.Add(sum(us) == 1)
    solver.Add(zp_sum == rate)
    solver.Add(zd_sum == rate)
    solver.Add(kv_sum >= kv_per_rps * rate)
    if cost_budget_usd_per_h is not None:
        solver.Add(cost <= float(cost_budget_usd_per_h))
    if power_budget_kw is not None:
        solver.Add(power <= float(power_budget_kw))
    if goal == "cost":
        solver.Minimize(cost)
        objective = "cost_usd_per_h"
    elif goal == "power":
        solver.Minimize(power)
        objective = "power_kw"
    else:
        solver.Maximize(rate)
        objective = "rps"
    status = solver.Solve()
    if status not in (pywraplp.Solver.OPTIMAL, pywraplp.Solver.FEASIBLE):
        return CapacityBound(float("nan"), objective, None, "infeasible")
    # A MIP stopped early proves only its best bound, not its incumbent.
    value = solver.Objective().BestBound() if status == pywraplp.Solver.FEASIBLE else solver.Objective().Value()
    warm = {}
    for pool, o, n in counts:
        k = int(round(n.solution_value()))
        if k > 0:
            warm[pool] = (o, k)
    warm.setdefault("token", None)
    return CapacityBound(float(value), objective, warm,
                         "optimal" if status == pywraplp.Solver.OPTIMAL else "feasible")


def _check_goal(goal: str, rps, cost_budget_usd_per_h, power_budget_kw) -> None:
    if goal not in GOALS:
        raise ProvisionerError(f"goal must be one of {', '.join(GOALS)} (got '{goal}')", params=("goal",))
    if goal in ("cost", "power") and not (rps and rps > 0):
        raise ProvisionerError("the capacity bound of goal cost/power needs rps > 0", params=("rps",))
    if goal == "throughput" and cost_budget_usd_per_h is None and power_budget_kw is None:
        raise ProvisionerError("the capacity bound of goal throughput needs a cost or power budget",
                               params=("cost_budget_usd_per_h", "power_budget_kw"))


def _mip_solver(time_limit_s: float):
    """An OR-Tools MIP solver (SCIP, else CBC, else CP-SAT) with a time limit."""
    from ortools.linear_solver import pywraplp

    for name in ("SCIP", "CBC", "CP-SAT"):
        solver = pywraplp.Solver.CreateSolver(name)
        if solver is not None:
            solver.SetTimeLimit(int(time_limit_s * 1000))
            return solver
    raise ProvisionerError("OR-Tools has no MIP solver (SCIP, CBC or CP-SAT) available")  # pragma: no cover


def pool_options(capacities: list[MachineCapacity], power_caps_low: list[float] | None = None,
                 catalog=None) -> list[PoolOption]:
    """Options for the program; with `power_caps_low`, option i costs the power of that
    (lower) cap while running at capacity i's (higher) cap — the envelope of a cap range."""
    if catalog is None:
        from hardware_catalog import load_catalog
        catalog = load_catalog()
    out = []
    for i, c in enumerate(capacities):
        if c.kv_capacity_tokens <= 0:
            continue
        m = catalog.machine(c.machine)
        cap_low = c.power_cap if power_caps_low is None else power_caps_low[i]
        out.append(PoolOption(c, float(m.cost_usd_per_h), float(m.power_w(cap_low)) / 1e3))
    return out


def gap_pct(objective: float, bound: float) -> float:
    """Relative distance between an answer and its bound, % of the answer (>= 0)."""
    if not (np.isfinite(objective) and np.isfinite(bound)) or objective == 0:
        return float("nan")
    return abs(objective - bound) / abs(objective) * 100.0
