"""Discrete-event engine for the on-demand schedulers: jsq, llumnix-dispatch, llumnix,
jsq-migration.

KV memory is allocated on demand and running requests are preempted by recomputation
when it runs out (vLLM); dispatch is by least pending work (jsq) or by Llumnix's freeness;
llumnix and jsq-migration also live-migrate decoding requests (`_migration.py`). The rules are those of
SEMANTICS.md, "Schedulers"; the event loop is `_des._simulate`'s. This module's cluster
is the baselines' (machines that run both phases); the split families' clusters
(`_des_split_on_demand.py`, `_des_splitwiser_on_demand.py`) reuse its machine and
observation logic per pool.

Per-request state beyond `_des._Cluster`'s: `plen[r]` the tokens its next prefill runs
over (the prompt, or prompt + generated tokens after a preemption) and `gen[r]` the tokens
it had emitted when it last joined a running set, at machine iteration `joined[r]`; so
before iteration `it` it has emitted `gen[r] + it - joined[r]` tokens and its context
(the KV it holds) is `s + that`.
"""

from __future__ import annotations

import bisect
import math

import numpy as np

from ..schedulers import (HIGH_PRIORITY_HEADROOM_TOKENS, MIGRATING_SCHEDULERS, SCHEDULERS, TIMELINE_STEP_S,
                          WATERMARK_FRACTION)
from ._des import _Cluster, _Machine
from ._migration import Migrations


class OnDemandMachine(_Machine):
    """A machine whose requests hold only the KV they have computed (vLLM's paged cache).

    KV in use = `ctx` (the contexts of the running set for its next iteration) + `pf_kv`
    (prompts whose prefill has started); `incoming` is reserved for migrations in and
    `queued_kv` is the prefill demand of the prompt queue (virtual usage, for freeness)."""

    __slots__ = ("st", "index", "running_set", "pf_kv", "incoming", "queued_kv", "high", "promote", "copy_charge_s",
                 "preemptions", "swapped", "host_used")

    def __init__(self, st, index, pool, coef, kv_cap, batch_cap, chunk=0):
        super().__init__(pool, coef, kv_cap, batch_cap, chunk)
        self.st, self.index = st, index   # the cluster (per-request lists, counters), this machine's index
        self.running_set = {}        # running requests (a dict: ordered, O(1) removal)
        self.pf_kv = self.incoming = self.queued_kv = 0
        self.high = 0                # running high-priority requests
        self.promote = False         # a high-priority prompt joined the queue: reorder it
        self.copy_charge_s = 0.0     # HBM time of migration copies and host-link time of swaps, added to the next iteration
        self.preemptions = 0
        self.swapped = []            # swapped-out requests (swap preemption), in arrival order
        self.host_used = 0           # KV tokens of this server's swapped-out requests in host memory

    def emitted(self, r) -> int:
        """Tokens request r (running here) has emitted before the next iteration."""
        return self.st.gen[r] + self.iteration - self.st.joined[r]

    def join(self, r, gen):
        """Request r, having emitted `gen` tokens (its KV: s + gen), joins the running set."""
        st = self.st
        st.gen[r], st.joined[r] = gen, self.iteration
        self.running += 1
        self.ctx += st.prompt[r] + gen
        self.high += st.high[r]
        self.running_set[r] = None
        self.done_at.setdefault(self.iteration + st.N[r] - gen - 1, []).append(r)

    def leave(self, r) -> int:
        """Take running request r out of the running set (preempted or migrated); its emitted tokens."""
        st = self.st
        g = self.emitted(r)
        del self.running_set[r]
        self.done_at[st.joined[r] + st.N[r] - st.gen[r] - 1].remove(r)
        self.running -= 1
        self.ctx -= st.prompt[r] + g
        self.high -= st.high[r]
        st.gen[r] = g
        return g

    def admit(self, S, N):
        """Migrated requests join at once: their KV was reserved when the copy began."""
        st = self.st
        while self.wait_q:
            r = self.wait_q.popleft()
            self.incoming -= st.reserved_in.pop(r)
            self.join(r, st.gen[r])

    def preempt(self):
        """While the running set's next iteration needs more KV than there is, the latest
        arrival (low priority first) loses its KV: swapped out to host memory (swap
        preemption, while the host budget holds it) or dropped and sent back to the prompt
        queue (recompute); a lone request always runs."""
        st = self.st
        while self.running > 1 and self.ctx + self.pf_kv > self.kv_cap:
            r = self.victim()
            g = self.leave(r)
            self.preemptions += 1
            if st.swap is not None and self.host_used + st.prompt[r] + g <= st.swap[1]:
                self.swap_out(r, st.prompt[r] + g)
                continue
            st.plen[r] = st.prompt[r] + g
            self.prompt_q.insert(1 if self.head_done else 0, r)   # behind a partly prefilled head
            self.queued_kv += st.plen[r]
            st.pending_prompt[self.index] += st.plen[r]
            st.pending_decode[self.index] -= 1   # the recompute emits the next token
            st.recomputed_tokens += st.plen[r]

    def swap_out(self, r, tokens):
        """vLLM's swap: the KV of request r goes to host memory before this iteration's model
        step (its copy time extends the iteration); r waits, in arrival order, to come back."""
        st = self.st
        bisect.insort(self.swapped, r)
        self.host_used += tokens
        self.queued_kv += tokens          # virtual usage: its KV comes back
        self.copy_charge_s += tokens * st.swap[0]
        st.swaps += 1
        st.swapped_bytes += tokens * st.swap[2]

    def swap_in(self):
        """Swapped-out requests come back first (vLLM's swapped queue goes before new prompts),
        oldest first, while their KV fits under the watermark (or the server holds none)."""
        st = self.st
        while self.swapped:
            r = self.swapped[0]
            tokens = st.prompt[r] + st.gen[r]
            if (self.ctx or self.pf_kv) and self.ctx + self.pf_kv + self.incoming + tokens > self.kv_cap * (
                    1.0 - WATERMARK_FRACTION):
                return
            del self.swapped[0]
            self.host_used -= tokens
            self.queued_kv -= tokens
            self.copy_charge_s += tokens * st.swap[0]
            st.swapped_bytes += tokens * st.swap[2]
            self.join(r, st.gen[r])

    def victim(self) -> int:
        """The running request preempted (or migrated) first: vLLM's FCFS order keeps the
        running set sorted by arrival, so the latest arrival (highest index), low priority first."""
        high = self.st.high
        low = [q for q in self.running_set if not high[q]]
        return max(low) if low else max(self.running_set)

    def _holds_kv(self, r, S, N, local) -> bool:
        """A prompt needs KV for its prefill (`plen`) plus the watermark, unless the machine holds none."""
        need = S[r]
        if (self.ctx or self.pf_kv) and self.ctx + self.pf_kv + self.incoming + need > self.kv_cap * (
                1.0 - WATERMARK_FRACTION):
            return False
        self.pf_kv += need
        self.queued_kv -= need
        return True

    def take_work(self, S, N, local):
        self.preempt()
        if self.swapped:
            self.swap_in()
        if self.promote:
            self.promote_high()
        if self.swapped and self.running:   # vLLM schedules no prefill while requests wait swapped out
            return self.decode_only(S, N)
        return super().take_work(S, N, local)

    def decode_only(self, S, N):
        """An iteration of the running set alone (migrations admitted first)."""
        if self.wait_q:
            self.admit(S, N)
        b = self.running
        self.busy, self.prefilling, self.decoding, self.prefill_tokens = True, (), b, 0
        return 0, 0, 0, b

    def promote_high(self):
        """High-priority prompts go ahead of low-priority ones (stable; a partly prefilled
        head keeps its place)."""
        high, pq = self.st.high, self.prompt_q
        keep = [pq.popleft()] if self.head_done and pq else []
        rest = list(pq)
        pq.clear()
        pq.extend(keep + [r for r in rest if high[r]] + [r for r in rest if not high[r]])
        self.promote = False

    def start(self, S, N, local):
        work = self.take_work(S, N, local)
        if work is None:
            return None
        self.duration = self.iteration_s(*work, self.ctx) + self.copy_charge_s
        self.copy_charge_s = 0.0
        return self.duration

    def end_decodes(self, S, N):
        """Every running request gains a token; the finishers leave with their KV."""
        b = self.decoding
        finished = self.done_at.pop(self.iteration, ()) if b else ()
        self.iteration += 1
        self.ctx += b
        st = self.st
        for r in finished:
            self.ctx -= st.prompt[r] + N[r]
            self.high -= st.high[r]
            del self.running_set[r]
        self.running -= len(finished)
        self.busy = False
        return finished

    def free_kv(self) -> float:
        return self.kv_cap - self.ctx - self.pf_kv - self.incoming

    def usage(self, queue: bool = True):
        """(virtual usage V in KV tokens, requests B) as Llumnix's freeness counts them: the
        running and prefilling requests' KV, the incoming copies and the high-priority
        headroom and, with `queue`, the queued prompts' demand (`queued_kv`, which a swap-out
        also adds to) with the queued and swapped-out requests counted in B. The closed-loop
        controller reads the same pair (`_control.machine_usage`)."""
        virtual = self.ctx + self.pf_kv + self.incoming + HIGH_PRIORITY_HEADROOM_TOKENS * self.high
        requests = self.running + len(self.prefilling)
        if queue:
            virtual += self.queued_kv
            requests += len(self.prompt_q) + len(self.swapped)
        return virtual, requests

    def freeness(self, queue: bool = True) -> float:
        """Llumnix's F = (M - virtual usage) / B: KV free per request (running, prefilling and,
        with `queue`, queued or swapped out) after the incoming copies, the high-priority
        headroom and, with `queue`, the queued prompts' demand (`usage`). Without the queue
        (migration) it is the decode steps left before the machine must preempt."""
        virtual, requests = self.usage(queue)
        return (self.kv_cap - virtual) / max(requests, 1)



class OnDemandCluster(_Cluster):
    """A design of machines that run both phases under an on-demand scheduler policy."""

    machine_types = (OnDemandMachine, OnDemandMachine)   # per pool (split designs: `_des_split_on_demand.py`)

    def __init__(self, inputs, d: int):
        super().__init__(inputs, d)
        policy = SCHEDULERS[int(inputs.scheduler[d])]
        self.by_freeness = policy in ("llumnix-dispatch", "llumnix")
        r = len(inputs.arrival_s)
        self.prompt = self.S                    # prompt tokens (never change)
        self.S = list(self.prompt)              # the prefill length the machines see: plen
        self.plen = self.S
        self.gen, self.joined = [0] * r, [0] * r
        high = inputs.high_priority
        self.high = [False] * r if high is None else [bool(x) for x in high]
        self.reserved_in = {}                   # migrating request -> KV reserved on its destination
        self.recomputed_tokens = 0
        self.swap = None if inputs.swap is None else tuple(float(x) for x in inputs.swap[d])   # SimInputs.swap
        self.swaps, self.swapped_bytes = 0, 0.0
        self.prefills_done = 0                  # prefills that emitted a token (first or recompute)
        coefs = [tuple(float(x) for x in inputs.coef[d, p]) for p in (0, 1)]
        kv = [float(inputs.kv_cap_tokens[d, p]) for p in (0, 1)]
        cap, chunk = float(inputs.batch_cap_tokens[d]), int(inputs.chunk_tokens[d])
        self.machines = [self.machine_types[p](self, i, p, coefs[p], kv[p], cap, chunk)
                         for i, p in enumerate(self.pools)]
        self.migrations = Migrations(self, inputs, d) if policy in MIGRATING_SCHEDULERS else None
        self.timeline = []                      # rows of (t, preemptions, migrations, downtime s, fragmentation, queued)
        self.next_sample_s = float(inputs.arrival_s[0]) if r else 0.0
        self.fragmentation_sum, self.samples = 0.0, 0

    # -- dispatch ------------------------------------------------------------------
    def route(self, r, t):
        self.observe(t)
        s, n = self.prompt[r], self.N[r]
        m = self.machine_for(r, t)
        self.prefill_on[r] = self.decode_on[r] = m
        self.local[r] = True
        self.pending_prompt[m] += s
        self.pending_decode[m] += n - 1
        self.machines[m].queued_kv += s
        self.machines[m].promote |= self.high[r]
        return m

    def machine_for(self, r, t) -> int:
        """The machine of request r arriving at t: the highest freeness (llumnix*) or the
        least pending work (jsq*); ties: lowest index."""
        if self.by_freeness:
            free = np.array([mc.freeness() for mc in self.machines])
            taking = self.available(t)     # availability windows (autoscaling): only servers in theirs
            return int(np.argmax(free if taking is None else np.where(taking, free, -np.inf)))
        return int(np.argmin(self.prompt_work(t) + self.pending_decode))

    def taking_decodes(self, t):
        """Which servers may receive a migration at t (None: all)."""
        return self.available(t)

    # -- iterations ----------------------------------------------------------------
    def start(self, m, t):
        self.observe(t)
        return super().start(m, t)

    def end(self, m, e):
        """Iteration end: finishers, migration stages, then the prefilled prompts join."""
        self.observe(e)
        mc = self.machines[m]
        for r in mc.end_decodes(self.S, self.N):
            self.finish[r] = e
        self.pending_decode[m] -= mc.decoding
        arrivals = self.migrations.advance(m, e) if self.migrations is not None else []
        if mc.prefill_tokens:
            self.pending_prompt[m] -= mc.prefill_tokens
            self.pf_tokens[m] = 0.0
            for r in mc.prefilling:
                mc.pf_kv -= self.plen[r]
                self.prefills_done += 1
                if math.isnan(self.first[r]):
                    self.first[r] = e
                emitted = self.gen[r] + 1
                if emitted >= self.N[r]:
                    self.finish[r] = e
                else:
                    mc.join(r, emitted)
            mc.prefilling = ()
        if self.migrations is not None:
            self.migrations.maybe_start(m, e)
        return arrivals

    # -- observation -----------------------------------------------------------------
    def observe(self, t):
        """Sample the timeline at every TIMELINE_STEP_S up to t (the state is constant
        between events, so a sample taken at the next event is the state at its time)."""
        while t >= self.next_sample_s:
            frag = self.fragmented_fraction()
            queued = sum(len(mc.prompt_q) for mc in self.machines)
            mig = self.migrations
            self.timeline.append((self.next_sample_s, sum(mc.preemptions for mc in self.machines),
                                  mig.count if mig else 0, mig.downtime_s if mig else 0.0, frag, queued))
            self.fragmentation_sum += frag
            self.samples += 1
            self.next_sample_s += TIMELINE_STEP_S

    def fragmented_fraction(self) -> float:
        """Llumnix's fragmentation: the cluster's free KV (as a fraction of all KV) when some
        machine's queue head waits for memory that the free KV of all machines together
        would cover; else 0."""
        free = [max(mc.free_kv(), 0.0) for mc in self.machines]
        total = sum(free)
        for mc, f in zip(self.machines, free):
            if mc.prompt_q and not mc.head_done:
                need = self.plen[mc.prompt_q[0]]
                if need > f and need <= total:
                    return total / float(self.kv_cap.sum())
        return 0.0

    def stats(self) -> tuple:
        """(preemptions, migrations, migration downtime s, mean fragmentation, recomputed tokens)."""
        mig = self.migrations
        return (sum(mc.preemptions for mc in self.machines), mig.count if mig else 0,
                mig.downtime_s if mig else 0.0, self.fragmentation_sum / max(self.samples, 1),
                self.recomputed_tokens)


SCHEDULER_STATS = ("preemptions", "migrations", "migration_downtime_s", "fragmentation_mean", "recomputed_tokens")
SCHEDULER_TIMELINE = ("time_s", "preemptions", "migrations", "migration_downtime_s", "fragmentation", "queued")


def record_stats(out, row: int, cl: OnDemandCluster) -> None:
    """Copy a finished design's counts and timeline into the engine output (row `row`)."""
    n = len(out.busy_s)
    if out.scheduler_stats is None:
        out.scheduler_stats = np.zeros((n, len(SCHEDULER_STATS)))
        out.timelines = [None] * n
    out.scheduler_stats[row] = cl.stats()
    if cl.swap is not None:
        if out.swap_stats is None:
            out.swap_stats = np.zeros((n, 2))
        out.swap_stats[row] = (cl.swaps, cl.swapped_bytes)
    out.timelines[row] = np.array(cl.timeline, dtype=float).reshape(-1, len(SCHEDULER_TIMELINE))
