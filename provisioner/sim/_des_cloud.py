"""Cloud plans in the discrete-event engine (SEMANTICS.md, "Cloud plans"): every server
has its own latency vector and KV budget, requests follow the plan's routing fractions,
and each prefill -> decode pair has its own KV link.

Routing is deterministic (smooth weighted round-robin): each arrival adds every prefill
server's share to its credit and goes to the server with the most credit (lowest index
on ties), which then gives up one; the decode server is chosen the same way among that
prefill server's decode shares. Over n requests each server's count stays within one
request of n x its share, with no random draw.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._des import _Cluster
from ._des_scalar import iteration_fn


@dataclass(frozen=True)
class ServerPlan:
    """One cloud plan: p prefill servers then d decode servers (non-split: p servers, d = 0)."""

    coef: np.ndarray             # (p + d, n_coef) latency vector per server
    kv_cap_tokens: np.ndarray    # (p + d,)
    prefill_share: np.ndarray    # (p,) fraction of requests per prefill (or non-split) server
    decode_share: np.ndarray     # (p, d) fraction of prefill i's requests decoded on j
    kv_setup_s: np.ndarray       # (p, d) fixed cost of a transfer i -> j
    kv_s_per_token: np.ndarray   # (p, d) serialized seconds per prompt token i -> j


class CloudCluster(_Cluster):
    def __init__(self, inputs, d: int):
        super().__init__(inputs, d)
        plan: ServerPlan = inputs.servers[d]
        for mc, coef, kv in zip(self.machines, plan.coef, plan.kv_cap_tokens):
            mc.coef = tuple(float(x) for x in coef)
            mc.iteration_s = iteration_fn(mc.coef)
            mc.kv_cap = float(kv)
        self.kv_cap = np.asarray(plan.kv_cap_tokens, dtype=float).copy()
        self.plan = plan
        self.p_credit = np.zeros(self.n_prompt)
        self.d_credit = np.zeros((self.n_prompt, max(self.n_token, 1)))

    def route(self, r, t):
        plan = self.plan
        self.p_credit += plan.prefill_share
        p = int(np.argmax(self.p_credit))
        self.p_credit[p] -= 1.0
        if self.n_token == 0:
            d = p
        else:
            self.d_credit[p] += plan.decode_share[p]
            j = int(np.argmax(self.d_credit[p]))
            self.d_credit[p, j] -= 1.0
            d = self.n_prompt + j
        return self.assign(r, p, d)

    def kv_link_of(self, p, d):
        j = d - self.n_prompt
        return (float(self.plan.kv_s_per_token[p, j]), float(self.plan.kv_setup_s[p, j]), self.kv_link[2],
                self.kv_link[3])
