"""Upper bound on a plan's throughput: the LP relaxation of the plan choice.

Every group the search may form (one or MAX_PP slices of any nodes) may be used a
fractional number of times, in either phase, within each node's GPUs; routing is free
and links unlimited. Any plan the search can return is a feasible integer point of this
LP with its links added, so its rps is at most the LP's optimum.
"""

from __future__ import annotations

import itertools

from perfmodels import TP_DEGREES

from ._search import MAX_PP


def candidate_groups(physics) -> list[tuple]:
    slices = [(node, tp) for node, ti in enumerate(physics.node_type)
              for tp in TP_DEGREES if tp <= physics.inv.types[ti].gpus]
    groups = [(s,) for s in slices]
    for k in range(2, MAX_PP + 1):
        groups += [tuple(sorted(c)) for c in itertools.combinations_with_replacement(slices, k)]
    out = []
    for g in groups:
        per_node = {}
        for node, tp in g:
            per_node[node] = per_node.get(node, 0) + tp
        if all(n <= physics.node_gpus(node) for node, n in per_node.items()) \
                and physics.group(g):
            out.append(g)
    return out


def upper_bound_rps(scorer, phases=("prefill", "decode")) -> float:
    """Optimum of the relaxation (split plans; phases=("both",) for non-split plans)."""
    from ortools.linear_solver import pywraplp

    ph = scorer.ph
    groups = candidate_groups(ph)
    solver = pywraplp.Solver.CreateSolver("GLOP")
    lam = solver.NumVar(0.0, solver.infinity(), "rps")
    use = {}
    for g in groups:
        for p in phases:
            rate = {"prefill": lambda: scorer.prefill(g)[0], "decode": lambda: scorer.decode(g)[0],
                    "both": lambda: scorer.both(g)}[p]()
            if rate > 0:
                use[g, p] = (solver.NumVar(0.0, solver.infinity(), ""), rate)
    for node, ti in enumerate(ph.node_type):
        terms = [v * sum(tp for n, tp in g if n == node) for (g, _), (v, _) in use.items()
                 if any(n == node for n, _ in g)]
        if terms:
            solver.Add(solver.Sum(terms) <= float(ph.inv.types[ti].gpus))
    for p in phases:
        terms = [v * rate for (g, q), (v, rate) in use.items() if q == p]
        if not terms:
            return 0.0
        solver.Add(lam <= solver.Sum(terms))
    solver.Maximize(lam)
    if solver.Solve() != pywraplp.Solver.OPTIMAL:
        return 0.0
    return float(lam.solution_value())
