"""Cloud plans in the discrete-event engine (SEMANTICS.md, "Cloud plans"): every server
has its own latency vector and KV budget, requests follow the plan's routing shares
(below), and each prefill -> decode pair has its own KV link.

Prefill (or non-split) server: the least queued work per unit of routing share, among
the servers the plan routes to (share > 0): prompt tokens pending on a prefill server;
prompt and decode tokens pending on a non-split one (the work the uniform engine's
least-work routing counts). Ties (idle servers) go by smooth weighted round-robin:
each arrival adds every server's share to its credit, the tied server with the most
credit (lowest index on ties) takes the request and gives up one. So load follows the
shares, but a short prompt is not queued behind a long one while another replica sits
idle: with fixed fractions blind to queue state that TTFT tail, not the mean, bound
attainment at 99% (SEMANTICS.md, "Cloud plans").
Decode server: among the prefill server's decode servers (decode share > 0), the one
with the least share of its KV budget booked; ties by smooth weighted round-robin on
that prefill server's decode shares.
Both choices are among the servers that hold the request (`plan_holds`): a prefill server
whose budget holds the prompt (a non-split one: the whole request) and, in a split plan,
one of whose decode servers holds the whole request; a router knows a request's size
and a replica's memory. A request no routed server holds is the caller's to reject
(`provisioner.cloud` counts it unservable and does not simulate it); given one anyway,
the engine routes it as if every server held it and runs it alone (as any machine does).

Under an on-demand scheduler (jsq, llumnix-dispatch, llumnix, jsq-migration; SEMANTICS.md,
"Cloud plans under an on-demand scheduler") the servers hold KV on demand and preempt as
the families' do (`_des_llumnix.py`, `_des_split_on_demand.py`), each with its own vector
and budget: the prefill (or non-split) server as above under jsq*, the freest routed
holder under llumnix*; a split plan's decode server among the prefill server's routed
holders by the policy; migrations between the servers that trade requests over their own
pair's link (`ServerPlan.migration_link`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._des import _Cluster
from ._des_llumnix import OnDemandCluster
from ._des_scalar import iteration_fn, kv_link_fifo_s
from ._des_split_on_demand import SplitOnDemandCluster

_INF = float("inf")


@dataclass(frozen=True)
class ServerPlan:
    """One cloud plan: p prefill servers then d decode servers (non-split: p servers, d = 0)."""

    coef: np.ndarray             # (p + d, n_coef) latency vector per server
    kv_cap_tokens: np.ndarray    # (p + d,)
    prefill_share: np.ndarray    # (p,) fraction of requests per prefill (or non-split) server
    decode_share: np.ndarray     # (p, d) fraction of prefill i's requests decoded on j
    kv_setup_s: np.ndarray       # (p, d) fixed cost of a transfer i -> j
    kv_s_per_token: np.ndarray   # (p, d) serialized seconds per prompt token i -> j
    # (p, d, L) seconds per prompt token a transfer i -> j holds each shared inter-node link
    # (L links, FIFO, SEMANTICS.md "Cloud plans"); None or L = 0: no shared link
    kv_link_s_per_token: np.ndarray | None = None
    # (p + d, p + d, 2) live migration's link from server a to server b (s per token, setup
    # s): the servers that trade requests under llumnix / jsq-migration (split: the decode
    # servers; non-split: all); None: the plan is simulated without migration
    migration_link: np.ndarray | None = None

    @property
    def shared_links(self) -> np.ndarray:
        """(p, d, L) `kv_link_s_per_token`, L = 0 when the plan has none."""
        if self.kv_link_s_per_token is None:
            return np.zeros(self.decode_share.shape + (0,))
        return np.asarray(self.kv_link_s_per_token, dtype=float)


class _CloudServers:
    """What every cloud cluster shares (a mixin before the cluster class): each server's own
    latency vector and KV budget, the holding rule, the prefill server's choice and the
    per-pair KV links, shared links queued first-come first-served."""

    def _take_plan(self, plan: ServerPlan) -> None:
        for mc, coef, kv in zip(self.machines, plan.coef, plan.kv_cap_tokens):
            mc.coef = tuple(float(x) for x in coef)
            mc.iteration_s = iteration_fn(mc.coef)
            mc.kv_cap = float(kv)
        self.kv_cap = np.asarray(plan.kv_cap_tokens, dtype=float).copy()
        self.plan = plan
        # Routing reads a few servers per request: plain lists, not numpy arrays, whose
        # per-call overhead was ~40% of a cloud plan's simulation time (same floats, same picks)
        self.prefill_share = [float(x) for x in plan.prefill_share]
        self.decode_share = np.asarray(plan.decode_share, dtype=float).tolist()   # (p, d)
        self.p_credit = [0.0] * self.n_prompt
        self.d_credit = [[0.0] * self.n_token for _ in range(self.n_prompt)]
        self.decode_kv_cap = self.kv_cap[self.n_prompt:].tolist()
        links = plan.shared_links   # (p, d, L) -> rows k * p + i, as the fluid kernel's table
        self.link_rows = np.ascontiguousarray(np.moveaxis(links, 2, 0).reshape(links.shape[2] * links.shape[0], links.shape[1]))
        self.link_free = np.zeros(links.shape[2])   # when each shared link is next free
        self.pair_links: dict = {}   # (p, j) -> the links transfer p -> j crosses (`kv_queued_s`)
        self.least_kv_cap = float(self.kv_cap.min())   # a request within it fits on every server
        self.everywhere = ([True] * self.n_prompt, [True] * self.n_token)

    def holders(self, s, n) -> tuple[list, list]:
        """(prefill servers, decode servers) that hold a request of s prompt and n output
        tokens (`plan_holds`); every server when no routed one does."""
        if s + n <= self.least_kv_cap:   # it fits on every server
            return self.everywhere
        held = plan_holds(self.plan, s, n)
        if any(ok and share > 0 for ok, share in zip(held[0], self.prefill_share)):
            return held[0].tolist(), held[1].tolist()
        return self.everywhere   # held nowhere: routed as if held everywhere

    def _prefill_server(self, t, ok) -> int:
        """Least queued work per unit of share among the servers that hold the request;
        ties by smooth weighted round-robin."""
        k = self.n_prompt
        work = self.prompt_work(t)[:k].tolist()
        if self.n_token == 0:   # a non-split server also decodes what it prefilled
            work = [w + dec for w, dec in zip(work, self.pending_decode[:k].tolist())]
        load = [w / share if share > 0 and held else _INF
                for w, share, held in zip(work, self.prefill_share, ok)]
        return _least_then_credit(load, self.p_credit, self.prefill_share)

    def kv_queued_s(self, p, d, s, e, prefill_s, visible):
        """`visible` (the transfer alone) or later: the transfer queues first-come first-served
        on each shared link it crosses (`kv_link_fifo_s`)."""
        if not self.link_free.size:
            return visible
        j = d - self.n_prompt
        setup = float(self.plan.kv_setup_s[p, j])
        # Only the links the pair crosses: a plan has a link per node pair its routing uses
        # (760 for 38 prefill and 10 decode two-node pipelines) and a transfer crosses a
        # few; looping over all of them in Python was most of such a plan's simulation time.
        # The links it skips hold it 0 s and are passed over by `kv_link_fifo_s` alike.
        hit = self.pair_links.get((p, j))
        if hit is None:
            column = self.link_rows[p::self.n_prompt, j]
            crossed = np.flatnonzero(column > 0.0)
            hit = self.pair_links[p, j] = (np.ascontiguousarray(column[crossed, None]), crossed)
        costs, crossed = hit
        free = self.link_free[crossed]
        queued = kv_link_fifo_s(costs, 0, 1, 0, free, s, e, prefill_s, setup, visible, self.kv_link[3])
        self.link_free[crossed] = free
        return queued

    def kv_link_of(self, p, d):
        j = d - self.n_prompt
        return (float(self.plan.kv_s_per_token[p, j]), float(self.plan.kv_setup_s[p, j]), self.kv_link[2],
                self.kv_link[3])


class CloudCluster(_CloudServers, _Cluster):
    """A cloud plan under the default rule (least-work: KV reserved per request)."""

    def __init__(self, inputs, d: int):
        super().__init__(inputs, d)
        self._take_plan(inputs.servers[d])

    def route(self, r, t):
        prefill_ok, decode_ok = self.holders(self.S[r], self.N[r])
        p = self._prefill_server(t, prefill_ok)
        d = p if self.n_token == 0 else self.n_prompt + self._decode_server(p, decode_ok)
        return self.assign(r, p, d)

    def _decode_server(self, p, ok) -> int:
        """Among prefill server p's decode servers that hold the request, the least share
        of KV booked; ties by smooth weighted round-robin on p's decode shares."""
        share = self.decode_share[p]
        booked = self.reserved[self.n_prompt:].tolist()
        load = [b / cap if sh > 0 and held else _INF
                for b, cap, sh, held in zip(booked, self.decode_kv_cap, share, ok)]
        return _least_then_credit(load, self.d_credit[p], share)


def _take_migration_links(cl, plan: ServerPlan) -> None:
    """Migrations over each server pair's own link (`ServerPlan.migration_link`)."""
    if cl.migrations is not None:
        if plan.migration_link is None:
            raise ValueError("a cloud plan under a migrating scheduler needs ServerPlan.migration_link")
        cl.migrations.pair_links = np.asarray(plan.migration_link, dtype=float).tolist()


class CloudOnDemandCluster(_CloudServers, OnDemandCluster):
    """A non-split cloud plan under an on-demand scheduler: every server runs both phases."""

    def __init__(self, inputs, d: int):
        super().__init__(inputs, d)
        self._take_plan(inputs.servers[d])
        _take_migration_links(self, self.plan)

    def machine_for(self, r, t) -> int:
        """jsq*: least queued work per unit of share (`_prefill_server`); llumnix*: the highest
        freeness; both among the routed servers that hold the request (ties: round-robin
        credit on the shares)."""
        ok, _ = self.holders(self.prompt[r], self.N[r])
        if not self.by_freeness:
            return self._prefill_server(t, ok)
        load = [-mc.freeness() if share > 0 and held else _INF
                for mc, share, held in zip(self.machines, self.prefill_share, ok)]
        return _least_then_credit(load, self.p_credit, self.prefill_share)


class CloudSplitOnDemandCluster(_CloudServers, SplitOnDemandCluster):
    """A split cloud plan under an on-demand scheduler: prefill servers then decode servers,
    as Splitwise's pools under it, with the plan's routing and links."""

    def __init__(self, inputs, d: int):
        super().__init__(inputs, d)
        self._take_plan(inputs.servers[d])
        self.token_kv = float(sum(mc.kv_cap for mc in self.tokens))
        _take_migration_links(self, self.plan)

    def pair(self, t, r) -> tuple:
        """The prefill server by queued work per share (`_prefill_server`), then among its
        routed decode servers that hold the request the freest (llumnix*) or the least
        pending decode tokens per unit of share (jsq*); ties by round-robin credit."""
        prefill_ok, decode_ok = self.holders(self.prompt[r], self.N[r])
        p = self._prefill_server(t, prefill_ok)
        share, k = self.decode_share[p], self.n_prompt
        if self.by_freeness:
            load = [-mc.freeness() if sh > 0 and held else _INF
                    for mc, sh, held in zip(self.tokens, share, decode_ok)]
        else:
            pending = self.pending_decode[k:].tolist()
            load = [w / sh if sh > 0 and held else _INF for w, sh, held in zip(pending, share, decode_ok)]
        return p, k + _least_then_credit(load, self.d_credit[p], share)


def plan_holds(plan: ServerPlan, s, n) -> tuple[np.ndarray, np.ndarray]:
    """((p,) prefill servers, (d,) decode servers) that can hold a request of `s` prompt and
    `n` output tokens (broadcast: arrays of requests give (p, r) and (d, r)). A decode
    server holds `s + n` KV tokens. A prefill server holds the prompt's `s` (a non-split
    one, decoding too, `s + n`) and, in a split plan, routes to a decode server that holds
    the request."""
    s, need = np.asarray(s, dtype=float), np.asarray(s, dtype=float) + np.asarray(n, dtype=float)
    p, d = plan.decode_share.shape
    cap = np.asarray(plan.kv_cap_tokens, dtype=float).reshape((-1,) + (1,) * need.ndim)
    if d == 0:
        return need <= cap[:p], np.zeros((0,) + need.shape, dtype=bool)
    decode_ok = need <= cap[p:]
    reach = np.asarray(plan.decode_share) > 0   # (p, d)
    onward = np.tensordot(reach, decode_ok, axes=(1, 0)) > 0   # (p, ...) some routed decode server holds it
    return (s <= cap[:p]) & onward, decode_ok


def _least_then_credit(load, credit, share) -> int:
    """The server of least load; among ties, the one with the most round-robin credit
    (every server earns its share per request, the chosen one spends one; lowest index
    on equal credit). Lists in, `credit` updated in place."""
    floor = min(load) + 1e-9
    best = -1
    for k, (x, sh) in enumerate(zip(load, share)):
        credit[k] += sh
        if x <= floor and (best < 0 or credit[k] > credit[best]):
            best = k
    credit[best] -= 1.0
    return best
