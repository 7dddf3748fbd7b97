"""The on-demand scheduler policies on Splitwiser machines (SEMANTICS.md, "Schedulers",
split designs), in the discrete-event engine.

A Splitwiser machine's prefill and decode processes are `_des_colocated.py`'s paired
servers (GPU sharing re-timed exactly); its KV is `_des_split_on_demand.py`'s: the decode
server holds each request's KV on demand in the machine's KV budget and preempts by
recompute (the request re-prefills on the prefill server of the machine the policy then
picks, whose hand-over is in HBM). The policy picks machines: least work (the prefill
server's pending prompt work plus the decode server's pending decode tokens) or the
decode server's freeness. Migration moves decoding requests between machines over their
network link (`SimInputs.migration_link`), each copy's bytes charged as HBM time to both
decode servers' next iterations, which the sharing then stretches like any HBM traffic.
"""

from __future__ import annotations

import numpy as np

from ._des_colocated import ColocatedCluster
from ._des_split_on_demand import SplitOnDemandCluster


class SplitwiserOnDemandCluster(ColocatedCluster, SplitOnDemandCluster):
    """A Splitwiser design under an on-demand scheduler policy (MRO: the co-located
    timing around the two-pool on-demand KV, routing and preemption)."""

    route = SplitOnDemandCluster.route

    def pair(self, t, r) -> tuple:
        """Request r: machine j's prefill server j and decode server n + j, j by the policy (ties:
        lowest index; availability windows narrow both rules)."""
        n = self.n
        if self.by_freeness:
            free = np.array([mc.freeness() for mc in self.tokens])
            taking = self.available(t)
            j = int(np.argmax(free if taking is None else np.where(taking[:n], free, -np.inf)))
        else:
            j = int(np.argmin(self.prompt_work(t)[:n] + self.pending_decode[n:]))
        return j, j + n

    def taking_decodes(self, t):
        """Decode server n + j is in machine j's availability window (its prefill server's)."""
        taking = self.available(t)
        return None if taking is None else np.tile(taking[:self.n], 2)

    def start(self, m, t):
        self.observe(t)
        return ColocatedCluster.start(self, m, t)

    def parts_of(self, mc, work) -> tuple:
        """The iteration's parts with the pending migration copy's HBM time added (to its
        solo time and its HBM demand: the copy is HBM traffic)."""
        solo, compute, hbm, rest = super().parts_of(mc, work)
        charge = mc.copy_charge_s
        if not charge:
            return solo, compute, hbm, rest
        mc.copy_charge_s = 0.0
        total = solo + charge
        return total, compute, (hbm * solo + charge) / total, rest
