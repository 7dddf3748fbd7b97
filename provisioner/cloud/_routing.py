"""The routing LPs of a split plan, over the real links: ThunderServe's two-stage
transportation problem (the most requests/s through prefill replica i then decode replica
j, `RoutingLP.route`; settled without the LP where the proportional routing attains its
bound, `RoutingLP.throughput_rps`), and the routing that serves a given rate with every
replica and link as lightly loaded as it can (`balanced_routing`).

Each shared inter-node link carries KV bytes up to the busy fraction its transfers' waits
allow (`Scorer.network_limit`); requests that only some pairs hold are routed as classes
(`_holding.Holding`), each its share of the requests on its own pairs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

# the third routing stage keeps every replica's load within this share of the second's
# (LP round-off: the second stage's optimum must stay feasible)
_LOAD_SLACK = 1e-6
# a level row's dual value above this holds its replica at the level in every optimum
_DUAL_TOL = 1e-9
# the proportional routing settles a plan's throughput without the LP only with every link
# at most 1 - this busy (`Scorer.throughput_rps`)
_LINK_MARGIN = 1e-9


@dataclass(frozen=True)
class Routing:
    """A split plan's routing: the most requests/s it carries and how it spreads them."""

    throughput_rps: float
    prefill_share: np.ndarray   # (p,) fraction of requests to each prefill replica
    decode_share: np.ndarray    # (p, d) fraction of prefill i's requests sent to decode j


class RoutingLP:
    """The plan-level half of `Scorer` (which it is mixed into): the routing LP and its
    shortcut. It reads the scorer's replica rates (`prefill`, `decode`, `class_costs`), its
    pairs (`pair`, `_transfer`, `network_limit`) and `holding`, and fills its caches
    (`_throughputs`, `_plans`, `lp_solves`)."""

    def throughput_rps(self, prefill_groups, decode_groups) -> float:
        """The routing LP's optimum (`route`), without the LP where routing every prefill
        replica's requests to the decode replicas in proportion to their capacities
        (x_ij = R p_i d_j / (P D), R = min(P, D)) uses only usable pairs and loads no link
        to its bandwidth: that routing attains the bound R, so it is the optimum. At 40 Gbps
        it settles 88% of the plans the search scores on conversation and 54% on coding,
        where solving their LPs was most of the search's time. With routing classes it
        must split among them, each its share on its own pairs with its own KV bytes
        (`Holding.split`): where they nest; else the LP judges."""
        key = (tuple(prefill_groups), tuple(decode_groups))
        if key not in self._throughputs:
            rate = self._proportional_bound(prefill_groups, decode_groups)
            if rate is None:
                rate = self.route(prefill_groups, decode_groups).throughput_rps
            self._throughputs[key] = rate
        return self._throughputs[key]

    def _proportional_bound(self, pg, dg) -> float | None:
        """min(P, D) when the proportional routing attains it (`throughput_rps`), else None."""
        p_cap = np.array([self.prefill(g)[0] for g in pg])
        d_cap = np.array([self.decode(g)[0] for g in dg])
        p_sum, d_sum = float(p_cap.sum()), float(d_cap.sum())
        if p_sum <= 0 or d_sum <= 0:
            return 0.0
        rate = min(p_sum, d_sum)
        flow = rate * np.outer(p_cap / p_sum, d_cap / d_sum)
        routed = flow > 0
        if not all(self.pair(pg[i], dg[j])[0] for i, j in zip(*np.nonzero(routed))):
            return None
        holding = self.holding(pg, dg)
        if holding.classes:
            split = holding.split(flow)
            if split is None or not self._time_shared(pg, dg, split, p_cap, d_cap):
                return None   # the long requests' pairs would carry less than their share, or cost more
            parts = [(part, lambda a, b, c=c: self._transfer(a, b, c.mean_prompt)[0], c.sample)
                     for part, c in zip(split, holding.classes)]
        else:
            parts = [(flow, lambda a, b: self.pair(a, b)[2], None)]
        busy: dict = {}   # link -> seconds of KV transfer per second
        crossings = []   # (i, j, class's requests, links): every pair is routed, as in the LP's arcs
        for part, traffic_of, among in parts:
            for i, j in zip(*np.nonzero(part > 0)):
                traffic = traffic_of(pg[i], dg[j])
                for link, by in traffic.items():
                    busy[link] = busy.get(link, 0.0) + part[i, j] * by / self.ph.capacity_bytes_per_s(link)
                crossings.append((i, j, among, traffic))
        limits = self._least_limits(pg, dg, crossings)
        # a margin below the limit: a link at its limit is the LP's to judge
        return rate if all(v < limits[link] * (1.0 - _LINK_MARGIN) for link, v in busy.items()) else None

    def _time_shared(self, pg, dg, split, p_cap, d_cap) -> bool:
        """Whether every replica carries the classes' flows (`Holding.split`) within its rate,
        each class at its cost there (`class_costs`: at least 1, so min(P, D) still bounds
        every routing, and a split within the rates that attains it is the optimum)."""
        for axis, caps, costs in zip((0, 1), (p_cap, d_cap), self.class_costs(pg, dg)):
            load = sum(part.sum(axis=1 - axis) * costs[:, c] for c, part in enumerate(split))
            if (load > np.asarray(caps) * (1.0 + 1e-9)).any():
                return False
        return True

    def route(self, prefill_groups, decode_groups) -> Routing:
        """ThunderServe's routing LP: the most requests/s through prefill i then decode j."""
        key = (tuple(prefill_groups), tuple(decode_groups))
        if key in self._plans:
            return self._plans[key]
        p_cap = np.array([self.prefill(g)[0] for g in prefill_groups])
        d_cap = np.array([self.decode(g)[0] for g in decode_groups])
        out = self._solve(prefill_groups, decode_groups, p_cap, d_cap)
        self._plans[key] = out
        return out

    def _solve(self, pg, dg, p_cap, d_cap) -> Routing:
        from ortools.linear_solver import pywraplp

        n_p, n_d = len(pg), len(dg)
        empty = Routing(0.0, np.zeros(n_p), np.zeros((n_p, n_d)))
        if n_p == 0 or n_d == 0 or p_cap.sum() <= 0 or d_cap.sum() <= 0:
            return empty
        arcs, shares = self.arcs(pg, dg, p_cap, d_cap)
        if not arcs:
            return empty
        solver = pywraplp.Solver.CreateSolver("GLOP")
        # rows built coefficient by coefficient: building them from the natural API's
        # expressions was a third of the search's time (the same LP, the same optima)
        p_rows = [solver.Constraint(-solver.infinity(), float(c)) for c in p_cap]
        d_rows = [solver.Constraint(-solver.infinity(), float(c)) for c in d_cap]
        objective = solver.Objective()
        x, links = [], {}
        for arc in arcs:
            v = solver.NumVar(0.0, solver.infinity(), "")
            p_rows[arc.i].SetCoefficient(v, arc.p_cost)
            d_rows[arc.j].SetCoefficient(v, arc.d_cost)
            objective.SetCoefficient(v, 1.0)
            for link, by in arc.traffic.items():
                links.setdefault(link, []).append((v, by))
            x.append(v)
        _limit_links(solver, links, self.ph, 1.0, self.link_limits(pg, dg, arcs))
        _class_shares(solver, arcs, x, shares)
        objective.SetMaximization()
        self.lp_solves += 1
        if solver.Solve() != pywraplp.Solver.OPTIMAL:
            return empty
        flow = _pair_flow(arcs, _values(x), n_p, n_d)
        total = float(flow.sum())
        if total <= 1e-12:
            return empty
        row = flow.sum(axis=1)
        share = row / total
        with np.errstate(invalid="ignore", divide="ignore"):
            dshare = np.where(row[:, None] > 0, flow / row[:, None], 0.0)
        return Routing(total, share, dshare)

    def arcs(self, pg, dg, p_cap, d_cap) -> tuple[list, tuple]:
        """The routing LPs' variables, one `Arc` per usable pair (i, j) of replicas with a
        rate and per routing class it holds (`Holding.classes`), and each class's share of
        the held requests (() without classes: one arc per pair)."""
        holding = self.holding(pg, dg)
        pairs = [(i, j) for i, a in enumerate(pg) for j, b in enumerate(dg)
                 if p_cap[i] > 0 and d_cap[j] > 0 and self.pair(a, b)[0]]
        if not holding.classes:
            return [Arc(i, j, 0, pair[2], pair[1]) for i, j in pairs for pair in [self.pair(pg[i], dg[j])]], ()
        p_cost, d_cost = self.class_costs(pg, dg)
        arcs = [Arc(i, j, c, *self._transfer(pg[i], dg[j], cls.mean_prompt), p_cost[i, c], d_cost[j, c])
                for i, j in pairs for c, cls in enumerate(holding.classes) if cls.pairs[i, j]]
        return arcs, tuple(cls.share for cls in holding.classes)

    def link_limits(self, pg, dg, arcs) -> dict:
        """{shared link: the busy fraction it may reach}: the least `network_limit` of the
        arcs that cross it, each over its routing class's requests (every arc's transfers'
        waits on it within the miss budget). Each class as if alone on the link, its misses
        counted among all the requests (the attainment's share): the LP keeps the long
        requests' transfers on the pairs that hold them. Judged among the mix a pair holds,
        the 100k-token prompts' 40-s transfers at 16 Gbps limited their link to a fifth of
        its bandwidth for the mix's short requests' sake, though the DES sent none of those
        over it; counted among their own class (5% of the requests), to two fifths; on
        Poisson arrivals the DES met 99% at the link's full bandwidth."""
        classes = self.holding(pg, dg).classes
        return self._least_limits(pg, dg, ((arc.i, arc.j, classes[arc.c].sample if classes else None, arc.traffic)
                                           for arc in arcs))

    def _least_limits(self, pg, dg, crossings) -> dict:
        """{shared link: the least `network_limit` of the crossings (prefill i, decode j, the
        class's requests or None, the links they cross) that cross it}: `link_limits` of the
        LP's arcs, and of the proportional routing's pairs (`_proportional_bound`)."""
        out: dict = {}
        senders = _Senders(pg)
        for i, j, among, links in crossings:
            for link in links:
                out[link] = min(out.get(link, 1.0), self.network_limit(pg[i], dg[j], senders(link), among))
        return out


class _Senders:
    """The prefill replicas that may send over a link (`Physics.links`): those with a stage on
    its sending node, or for a node's incoming card on any other node. Whether they are
    routed over it or not: the count may not grow as pairs become usable (a faster network
    would lower the link's limit), and more senders only assume more waiting. Counted per
    node once for the prefill groups `pg`, not once per link a pair crosses."""

    def __init__(self, pg):
        self.n = len(pg)
        self.on: dict = {}     # node -> groups with a stage on it
        self.only: dict = {}   # node -> groups with every stage on it
        for g in pg:
            nodes = {node for node, _ in g}
            for node in nodes:
                self.on[node] = self.on.get(node, 0) + 1
            if len(nodes) == 1:
                self.only[node] = self.only.get(node, 0) + 1

    def __call__(self, link) -> int:
        kind, node = link[0], link[1]
        return self.n - self.only.get(node, 0) if kind == "in" else self.on.get(node, 0)

class Arc(NamedTuple):
    """A routing LP variable: requests/s of routing class c (`Holding.classes`; 0 without
    classes) through prefill replica i then decode replica j, loading each shared link with
    `traffic` bytes a request and waiting `transfer_s` for its KV. A request takes `p_cost`
    and `d_cost` of a request of the mix on its replicas (`Scorer.class_costs`)."""

    i: int
    j: int
    c: int
    traffic: dict
    transfer_s: float
    p_cost: float = 1.0
    d_cost: float = 1.0

    def cost(self, axis) -> float:
        """Its cost on its prefill (axis 0) or decode (axis 1) replica."""
        return self.d_cost if axis else self.p_cost

def _limit_links(solver, links, physics, bound, limits) -> None:
    """Each shared link's KV busy time at most `bound` (1: the link's limit; a variable: the
    utilization all share) times its limit (`Scorer.link_limits`: the busy fraction its
    transfers' waits allow): {link: [(requests/s variable, bytes a request)]}. Written in
    link-seconds per second (bytes over bandwidth), coefficients of ~1: in bytes (~1e9 a
    request) beside requests/s (~1) GLOP gave up (MPSOLVER_ABNORMAL) on a balancing stage."""
    fixed = isinstance(bound, (int, float))
    for key, terms in links.items():
        cap = physics.capacity_bytes_per_s(key)
        row = solver.Constraint(-solver.infinity(), float(bound) * limits[key] if fixed else 0.0)
        for v, by in terms:
            row.SetCoefficient(v, by / cap)
        if not fixed:
            row.SetCoefficient(bound, -limits[key])


def _class_shares(solver, arcs, x, shares) -> None:
    """Each routing class carries its share of the routed requests (`Holding.classes`):
    its arcs' requests/s sum to its share of all arcs'."""
    for c, share in enumerate(shares):
        row = solver.Constraint(0.0, 0.0)
        for arc, v in zip(arcs, x):
            row.SetCoefficient(v, float(arc.c == c) - share)


def _values(x) -> np.ndarray:
    return np.array([max(v.solution_value(), 0.0) for v in x])


def _pair_flow(arcs, values, n_p, n_d) -> np.ndarray:
    """(p, d) requests/s per replica pair, the classes' arcs summed."""
    flow = np.zeros((n_p, n_d))
    for arc, value in zip(arcs, values):
        flow[arc.i, arc.j] += value
    return flow


def _through(arcs, axis, k) -> list:
    """Indices of the arcs through prefill (axis 0) or decode (axis 1) replica k."""
    return [m for m, arc in enumerate(arcs) if (arc.j if axis else arc.i) == k]


def _weighted(arcs, x, axis, k) -> list:
    """The terms of replica k's load (axis 0: prefill, 1: decode) in requests of the mix it
    holds: each arc's requests/s at its class's cost there (`Arc.cost`)."""
    return [x[m] * arcs[m].cost(axis) for m in _through(arcs, axis, k)]


def balanced_routing(scorer, prefill_groups, decode_groups, rps: float) -> Routing:
    """Routing for serving `rps` (capped at the plan's capacity) with the least maximum
    utilization of any replica or link (the second stage after the throughput LP, which
    leaves the split among equal optima to the solver's vertex), each phase's replicas
    balanced among themselves under it (`_balanced_phases`), then the least mean
    KV-transfer time with every replica's load unchanged (the third stage): a request's KV
    stays inside its node wherever the balance allows, instead of crossing the network for
    nothing, and no replica queues more for it."""
    from ortools.linear_solver import pywraplp

    best = scorer.route(prefill_groups, decode_groups)
    rate = min(float(rps), best.throughput_rps)
    if rate <= 0:
        return best
    p_cap = [scorer.prefill(g)[0] for g in prefill_groups]
    d_cap = [scorer.decode(g)[0] for g in decode_groups]
    arcs, shares = scorer.arcs(prefill_groups, decode_groups, p_cap, d_cap)
    solver = pywraplp.Solver.CreateSolver("GLOP")
    u = solver.NumVar(0.0, solver.infinity(), "u")
    x, links = [], {}
    for arc in arcs:
        x.append(solver.NumVar(0.0, solver.infinity(), ""))
        for link, by in arc.traffic.items():
            links.setdefault(link, []).append((x[-1], by))
    solver.Add(solver.Sum(x) == rate)
    _class_shares(solver, arcs, x, shares)
    for axis, caps in enumerate((p_cap, d_cap)):
        for k, cap in enumerate(caps):
            terms = _weighted(arcs, x, axis, k)
            if terms:
                solver.Add(solver.Sum(terms) <= u * float(cap))
    _limit_links(solver, links, scorer.ph, u, scorer.link_limits(prefill_groups, decode_groups, arcs))
    solver.Minimize(u)
    if solver.Solve() != pywraplp.Solver.OPTIMAL:
        return best
    least = _values(x)
    solver.Add(u <= u.solution_value() * (1.0 + _LOAD_SLACK))   # the later stages keep it
    values = _balanced_phases(solver, arcs, x, [1.0 / scorer.prefill(g)[1] for g in prefill_groups], d_cap, least)
    values = _least_transfer(solver, arcs, x, values, (len(p_cap), len(d_cap)))
    flow = _pair_flow(arcs, values, len(p_cap), len(d_cap))
    row = flow.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        dshare = np.where(row[:, None] > 0, flow / row[:, None], 0.0)
    return Routing(best.throughput_rps, row / flow.sum(), dshare)


def _balanced_phases(solver, arcs, x, p_speed, d_cap, values) -> np.ndarray:
    """`values` (the arcs' requests/s at the least maximum utilization, which `solver`
    holds) re-solved so that each side's replicas are as evenly loaded as the constraints
    allow: the prefill side by busy fraction (load over `p_speed`, the replica's
    requests/s when always busy), the decode side by share of its sustainable rate
    (`d_cap`); `values` itself when the solver confirms no optimum. The least maximum is
    set by the side that binds; the other side's replicas only have to stay under it, and
    the solver's vertex then loaded one of two equal prefill replicas with a whole 0.8
    req/s and left the other idle (its TTFT p99 1.44 -> 2.09 s in the DES, which
    dispatches only to replicas with a share). Prefill shares in proportion to speed also
    make the engines' dispatch (least pending prompt tokens per unit of share) send each
    prompt where it is drained soonest.

    Lexicographic min-max by progressive filling: minimize the sum of each side's largest
    level, fix the replicas that stay at it in every optimum (their level row has a nonzero
    dual value: complementary slackness), and minimize again over the others. Minimizing
    only the largest left replicas below it as the vertex fell: of four A40 TP2 replicas on
    a node whose link binds, one got 0.065 of the requests and its siblings 0.101."""
    from ortools.linear_solver import pywraplp

    sides = [solver.NumVar(0.0, solver.infinity(), "") for _ in range(2)]
    rows = {}   # (side, replica) -> (its level row, weight)
    for axis, weights in ((0, p_speed), (1, d_cap)):
        for k, weight in enumerate(weights):
            terms = _weighted(arcs, x, axis, k)
            if terms:
                rows[axis, k] = (solver.Add(solver.Sum(terms) - sides[axis] * float(weight) <= 0.0), float(weight))
    objective = solver.Objective()
    for side in sides:
        objective.SetCoefficient(side, 1.0)
    objective.SetMinimization()
    free = set(rows)
    while free:
        if solver.Solve() != pywraplp.Solver.OPTIMAL:
            return values   # the last level's (or the least maximum's)
        values = _values(x)
        fixed = {key for key in free if abs(rows[key][0].dual_value()) > _DUAL_TOL}
        if not fixed:
            break
        level = [side.solution_value() for side in sides]   # read before the model changes
        for axis, k in fixed:   # held at this level from now on
            row, weight = rows[axis, k]
            row.SetCoefficient(sides[axis], 0.0)
            row.SetUb(level[axis] * weight * (1.0 + _LOAD_SLACK) + 1e-12)
        free -= fixed
        for axis, side in enumerate(sides):
            if not any(a == axis for a, _ in free):
                objective.SetCoefficient(side, 0.0)
    return values


def _least_transfer(solver, arcs, x, values, shape) -> np.ndarray:
    """`values` re-solved for the least total KV-transfer seconds with each prefill and
    decode replica's load held (requests/s at their classes' costs, `_weighted`; each
    within _LOAD_SLACK) and no link loaded past
    the least maximum utilization (which `solver` holds); `values` itself when the solver
    confirms no optimum."""
    from ortools.linear_solver import pywraplp

    for axis, n in enumerate(shape):
        for k in range(n):
            terms = _weighted(arcs, x, axis, k)
            if terms:
                load = sum(values[m] * arcs[m].cost(axis) for m in _through(arcs, axis, k))
                solver.Add(solver.Sum(terms) <= load * (1.0 + _LOAD_SLACK) + 1e-12)
                solver.Add(solver.Sum(terms) >= load * (1.0 - _LOAD_SLACK))
    solver.Minimize(solver.Sum([v * arc.transfer_s for arc, v in zip(arcs, x)]))
    if solver.Solve() != pywraplp.Solver.OPTIMAL:
        return values
    return _values(x)
