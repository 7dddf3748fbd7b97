"""Llumnix's live migration of decoding requests, for `_des_llumnix.OnDemandCluster`.

SEMANTICS.md, "Schedulers": at the end of an iteration of the least free machine, if its
freeness without the queue (decode steps before it must preempt) is below
MIGRATION_SOURCE_FREENESS and the freest machine's exceeds it by more than the gap, the
request the source would preempt next starts moving. Stage 0 copies its whole KV (s + emitted tokens) while
it keeps decoding on the source; each later stage copies the tokens emitted during the
previous one; a stage takes the KV-transfer model's time (setup + tokens x seconds per
token over the machines' link, `SimInputs.migration_link`) and ends at the first source
iteration end after that. The machines that trade requests are `members` (split designs:
the token servers). When a stage has at most MIGRATION_FINAL_STAGE_TOKENS new tokens (or after
MIGRATION_MAX_STAGES stages) the request stops on the source: the last copy is the
downtime, after which it joins the destination's running set. The destination reserves
the KV of stage 0 while the copy runs; every stage's bytes are read from the source's
HBM and written to the destination's, charged as HBM time to each one's next iteration.
"""

from __future__ import annotations

from ..schedulers import (MIGRATION_FINAL_STAGE_TOKENS, MIGRATION_FREENESS_GAP, MIGRATION_MAX_STAGES,
                          MIGRATION_SOURCE_FREENESS)

_HBM_S_PER_KV_TOKEN = 5   # index of s_per_kv_token_rw in a pool's roofline coefficients


class Migrations:
    """The copies in flight (at most one out of and one into each machine) and their totals."""

    def __init__(self, cluster, inputs, d: int, gap: float = MIGRATION_FREENESS_GAP):
        self.cl = cluster
        link = inputs.migration_link
        self.s_per_token, self.setup_s = ((float(inputs.kv_s_per_token[d]), float(inputs.kv_setup_s[d]))
                                          if link is None else (float(link[d, 0]), float(link[d, 1])))
        self.pair_links = None   # (m, m, 2) per machine pair (s per token, setup s): a cloud plan's links
        self.gap = gap
        self.out = {}       # source machine -> [request, destination, stage, stage end (s), stage's first iteration]
        self.into = set()   # destinations with a copy in flight
        self.members = range(len(cluster.machines))   # the machines that trade requests (split: the token pool)
        self.count = 0      # completed migrations
        self.aborted = 0    # copies dropped: the request finished or was preempted first
        self.downtime_s = 0.0
        self.copied_tokens = 0

    def copy_s(self, tokens: int, src: int, dst: int) -> float:
        """One stage's copy time: the alpha-beta KV-transfer model over the link from machine
        `src` to `dst` (the design's one link, or a cloud plan's pair's: `pair_links`)."""
        if self.pair_links is None:
            return self.setup_s + tokens * self.s_per_token
        s_per_token, setup_s = self.pair_links[src][dst]
        return setup_s + tokens * s_per_token

    def maybe_start(self, m: int, e: float) -> None:
        """At machine m's iteration end: start a migration if m is the least free machine
        and the freest one is more than the gap freer."""
        if m in self.out:
            return
        machines = self.cl.machines
        src = machines[m]
        if src.running < 2:
            return
        free = [mc.freeness(queue=False) for mc in machines]   # preemption risk, not queueing
        low = min(self.members, key=free.__getitem__)
        taking = self.cl.taking_decodes(e)   # a destination must be in its availability window
        high = max((i for i in self.members if taking is None or taking[i]), key=free.__getitem__,
                   default=m)   # no server in its window: nowhere to go
        if (low != m or high == m or high in self.into or free[m] >= MIGRATION_SOURCE_FREENESS
                or free[high] - free[m] <= self.gap):
            return
        st = self.cl
        r = src.victim()
        ctx = st.prompt[r] + src.emitted(r)
        dst = machines[high]
        if dst.free_kv() < ctx:
            return
        dst.incoming += ctx
        st.reserved_in[r] = ctx
        self.into.add(high)
        self.out[m] = [r, high, 0, e + self.copy_s(ctx, m, high), src.iteration]
        self._charge(src, dst, ctx)

    def advance(self, m: int, e: float) -> list:
        """At machine m's iteration end: move its outgoing copy on; returns [(request,
        arrival time at the destination)] when the request leaves the source."""
        job = self.out.get(m)
        if job is None:
            return []
        r, high, stage, stage_end, first_it = job
        src, dst = self.cl.machines[m], self.cl.machines[high]
        if r not in src.running_set:    # finished or preempted while copying: drop the copy
            self._drop(m, r, high)
            self.aborted += 1
            return []
        if e < stage_end:
            return []
        new_tokens = src.iteration - first_it
        copy_s = self.copy_s(new_tokens, m, high)
        self._charge(src, dst, new_tokens)
        if new_tokens > MIGRATION_FINAL_STAGE_TOKENS and stage + 1 < MIGRATION_MAX_STAGES:
            job[2:] = [stage + 1, e + copy_s, src.iteration]
            return []
        emitted = src.leave(r)
        remaining = self.cl.N[r] - emitted
        del self.out[m]
        self.into.discard(high)
        self.cl.pending_decode[m] -= remaining
        self.cl.pending_decode[high] += remaining
        self.cl.decode_on[r] = high
        self.count += 1
        self.downtime_s += copy_s
        return [(r, e + copy_s)]

    def _drop(self, m, r, high):
        self.cl.machines[high].incoming -= self.cl.reserved_in.pop(r)
        self.into.discard(high)
        del self.out[m]

    def _charge(self, src, dst, tokens):
        """The copy's KV bytes: read from the source's HBM, written to the destination's."""
        self.copied_tokens += tokens
        src.copy_charge_s += tokens * src.coef[_HBM_S_PER_KV_TOKEN]
        dst.copy_charge_s += tokens * dst.coef[_HBM_S_PER_KV_TOKEN]
