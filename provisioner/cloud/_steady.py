"""Whether a plan can keep up with a trace's requests in steady state: the load its servers
carry, from the work each request brings, whatever the engines' finite window shows.

A sustained rate is bisected on a finite window, and the engines drain the queue after it
ends. Where a class of requests has deadlines as long as the window (a 100k-token prompt's
p99 TTFT limit is minutes), an overloaded server's queue has not done its damage by the
window's end: 5% of 100k-token prompts on thunderserve-32gpu "sustained" 1.07 req/s on a
187-s window and 0.49 on a window ten times longer, the same plan (docs/cloud.md, "Steady
state"). This check needs no window to be long: a server whose share of the work that
arrives in the window takes longer than the window falls further behind with every window.

Two loads per plan, each a lower bound on what the engines' rules make a server do, so a
plan the check refuses could not keep up under any routing:

- prefill: the seconds of compute a prompt adds to the passes that prefill it,
  c_gemm s + c_head + c_attn s^2 + its all-reduce + c_seq (`perfmodels.prompt_compute_s`;
  the weights' read and the fixed costs of a pass are shared by a batch, so left out);
- KV: the token-seconds a request books in a decode budget, s + n tokens for at least
  n - 1 decode steps, each no shorter than one decode alone at context s.

A request goes to the servers that hold it (`sim.plan_holds`); among them it may be split
at will (the engines' dispatch follows queue state). The load of a side is the least, over
such splits, of the most loaded server's work over the window (its capacity: the window,
or the window times its KV budget): a small LP. Load <= 1 is needed for a steady state.
"""

from __future__ import annotations

import numpy as np

from perfmodels import prompt_compute_s, roofline_terms_s

from ..sim import plan_holds


def steady_state_load(sp, n_prefill: int, prompt_tokens, output_tokens, window_s: float) -> dict:
    """{"prefill": load, "kv": load} of a plan's servers (`server_plan`'s `sp`, its first
    `n_prefill` servers prefill or serve both) on the requests of a window of `window_s`
    seconds that the plan holds: each side's least achievable busiest-server utilization
    (module docstring). 0 where a side has no work."""
    s = np.asarray(prompt_tokens, dtype=float)
    n = np.asarray(output_tokens, dtype=float)
    front_ok, back_ok = plan_holds(sp, s, n)   # (p, r), (d, r)
    front_ok &= (np.asarray(sp.prefill_share) > 0)[:, None]
    held = front_ok.any(axis=0)
    s, n, front_ok = s[held], n[held], front_ok[:, held]
    coef = np.asarray(sp.coef, dtype=float)
    front = coef[:n_prefill]
    prefill_s = prompt_compute_s(front, s)
    if back_ok.shape[0] == 0:   # non-split: the servers that prefill a request also decode it
        back, back_ok = front, front_ok
        kv_cap = np.asarray(sp.kv_cap_tokens, dtype=float)[:n_prefill]
    else:
        reach = np.asarray(sp.decode_share) > 0   # (p, d)
        back = coef[n_prefill:]
        back_ok = back_ok[:, held] & ((reach.T.astype(float) @ front_ok.astype(float)) > 0)
        kv_cap = np.asarray(sp.kv_cap_tokens, dtype=float)[n_prefill:]
    kv_token_s = (s + n) * np.maximum(n - 1.0, 0.0) * _decode_step_s(back, s) / kv_cap[:, None]
    return {"prefill": _least_busiest(prefill_s, front_ok, window_s),
            "kv": _least_busiest(kv_token_s, back_ok, window_s)}


def _decode_step_s(coef, context_tokens) -> np.ndarray:
    """(servers, r) one decode step of a lone request at each context: no step of a batch
    over the same context is shorter."""
    out = np.empty((len(coef), len(context_tokens)))
    for k, c in enumerate(coef):
        compute, memory, allreduce, overhead = roofline_terms_s(c, 0.0, 0.0, 0.0, 1.0, context_tokens)
        out[k] = np.maximum(compute, memory) + allreduce + overhead
    return out


def _least_busiest(work, holds, window_s: float) -> float:
    """min over splits of each request among the servers that `holds` it (servers, r) of the
    most loaded server's `work` (servers, r: the share of its capacity-seconds a request
    would take there) over `window_s`. Requests that the same servers hold form one class:
    the LP has a variable per class and holding server."""
    if holds.size == 0 or not holds.any() or window_s <= 0:
        return 0.0
    keys, cls = np.unique(np.packbits(holds, axis=0), axis=1, return_inverse=True)
    cls = np.asarray(cls).reshape(-1)
    n_cls, n_srv = keys.shape[1], holds.shape[0]
    per_class = np.zeros((n_cls, n_srv))
    np.add.at(per_class, cls, (work * holds).T)
    class_holds = np.zeros((n_cls, n_srv), dtype=bool)
    class_holds[cls] = holds.T
    if n_cls == 1:   # one class: split in proportion to the servers' speeds
        w = per_class[0][class_holds[0]]
        return float(1.0 / np.sum(1.0 / np.maximum(w, 1e-300)) / window_s) if (w > 0).all() else 0.0
    return _lp_busiest(per_class, class_holds) / window_s


def _lp_busiest(per_class, class_holds) -> float:
    """min theta s.t. each class's fractions over its servers sum to 1 and every server's
    sum of fraction x work <= theta."""
    from ortools.linear_solver import pywraplp

    solver = pywraplp.Solver.CreateSolver("GLOP")
    theta = solver.NumVar(0.0, solver.infinity(), "")
    rows = [solver.Constraint(-solver.infinity(), 0.0) for _ in range(per_class.shape[1])]
    for row in rows:
        row.SetCoefficient(theta, -1.0)
    for c in range(per_class.shape[0]):
        whole = solver.Constraint(1.0, 1.0)
        for i in np.flatnonzero(class_holds[c]):
            y = solver.NumVar(0.0, 1.0, "")
            whole.SetCoefficient(y, 1.0)
            rows[i].SetCoefficient(y, float(per_class[c, i]))
    objective = solver.Objective()
    objective.SetCoefficient(theta, 1.0)
    objective.SetMinimization()
    if solver.Solve() != pywraplp.Solver.OPTIMAL:
        return float("inf")
    return float(theta.solution_value())
