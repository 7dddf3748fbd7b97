"""The on-demand scheduler policies on Splitwise's two pools (SEMANTICS.md, "Schedulers",
split designs), in the discrete-event engine.

Prompt machines only prefill: they hold a prompt's KV while its prefill runs (on demand,
with vLLM's watermark) and hand it to a token machine over the KV-transfer link. Token
machines only decode, holding each request's KV on demand (`s + g` after `g` tokens).
When a token machine's running set outgrows its KV, the latest arrival (low priority
first) is preempted by recompute: its KV is dropped, and the request goes back to the
prompt pool as a prefill of its prompt plus the tokens it has emitted (at the head of the
least-loaded prompt machine's queue), is given a decode machine by the policy again, and
its KV transfers anew. Decodes go to token machines by the policy (least pending decode
tokens, or Llumnix's freeness); migration moves decoding requests among token machines.
The mixed pool (lending) is off: its rule reads KV reserved per request, which on-demand
KV does not have.

The per-machine logic (`join`, `leave`, `victim`, `freeness`, the migration copy) is
`_des_llumnix.py`'s and `_migration.py`'s; this module adds what differs per pool.
"""

from __future__ import annotations

import math

import numpy as np

from ..schedulers import HIGH_PRIORITY_HEADROOM_TOKENS, WATERMARK_FRACTION
from ._des_llumnix import OnDemandCluster, OnDemandMachine
from ._des_scalar import kv_visible_s


class PromptMachine(OnDemandMachine):
    """A prompt-pool machine: prefills only, so its running set stays empty; recomputes
    sent back by the token pool arrive in its wait queue and go to the prompt queue's head."""

    __slots__ = ()

    def admit(self, S, N):
        at = 1 if self.head_done else 0   # behind a partly prefilled head, in arrival order
        while self.wait_q:
            self.prompt_q.insert(at, self.wait_q.popleft())
            at += 1


class TokenMachine(OnDemandMachine):
    """A token-pool machine: decodes only. `queued` requests are dispatched to it and not
    yet admitted (prefilling, transferring or waiting); `queued_kv` is the KV they will
    hold when admitted (their virtual usage, for freeness)."""

    __slots__ = ("queued",)

    def __init__(self, *args):
        super().__init__(*args)
        self.queued = 0

    def preempt(self):
        """Preemption runs at the iteration end (`SplitOnDemandCluster.shed`), where the
        recompute can be sent to the prompt pool; admission never overfills the KV."""

    def admit(self, S, N):
        """Migrated requests join at once (their KV was reserved when the copy began); KV
        transfers join FCFS while their context fits under the watermark (or the machine
        holds no KV)."""
        st, wq = self.st, self.wait_q
        for r in [r for r in wq if r in st.reserved_in]:
            wq.remove(r)
            self.incoming -= st.reserved_in.pop(r)
            self.join(r, st.gen[r])
        while wq:
            r = wq[0]
            need = st.prompt[r] + st.gen[r]
            if self.ctx and self.ctx + self.incoming + need > self.kv_cap * (1.0 - WATERMARK_FRACTION):
                break
            wq.popleft()
            self.queued_kv -= need
            self.queued -= 1
            self.join(r, st.gen[r])

    def usage(self, queue: bool = True):
        """(V, B) as on a baseline machine, the queue being the requests dispatched here and
        not yet admitted (`freeness` reads it through `OnDemandMachine.freeness`)."""
        virtual = self.ctx + self.incoming + HIGH_PRIORITY_HEADROOM_TOKENS * self.high
        requests = self.running
        if queue:
            virtual += self.queued_kv
            requests += self.queued
        return virtual, requests


class SplitOnDemandCluster(OnDemandCluster):
    """A Splitwise design (prompt pool + token pool) under an on-demand scheduler policy."""

    machine_types = (PromptMachine, TokenMachine)

    def __init__(self, inputs, d: int):
        super().__init__(inputs, d)
        self.tokens = [mc for mc in self.machines if mc.pool == 1]
        self.token_kv = float(sum(mc.kv_cap for mc in self.tokens))
        self.hop = {}     # preempted request -> the prompt machine its recompute goes to
        if self.migrations is not None:
            self.migrations.members = [mc.index for mc in self.tokens]

    # -- dispatch ------------------------------------------------------------------
    def route(self, r, t):
        """The prefill to the least-loaded prompt machine, the decode by the policy."""
        self.observe(t)
        return self.dispatch(r, t, self.N[r] - 1)

    def dispatch(self, r, t, decode_tokens) -> int:
        """Book request r's prefill (over `plen[r]` tokens) and its decode of
        `decode_tokens` more tokens after the prefill's one; returns the prompt machine."""
        plen = self.plen[r]
        p, d = self.pair(t, r)
        self.prefill_on[r], self.decode_on[r] = p, d
        self.pending_prompt[p] += plen
        self.pending_decode[d] += decode_tokens
        prompt, token = self.machines[p], self.machines[d]
        prompt.queued_kv += plen
        prompt.promote |= self.high[r]
        token.queued_kv += plen + 1
        token.queued += 1
        return p

    def pair(self, t, r) -> tuple:
        """(prefill machine, decode machine) of request r dispatched at t."""
        return int(np.argmin(np.where(self.prompt_pool, self.prompt_work(t), np.inf))), self.decode_machine()

    def decode_machine(self) -> int:
        """The token machine with the most freeness (llumnix*) or the least pending decode tokens."""
        if self.by_freeness:
            return max(self.tokens, key=lambda mc: mc.freeness()).index   # ties: lowest index
        return int(np.argmin(np.where(self.token_pool, self.pending_decode, np.iinfo(np.int64).max)))

    def receiver(self, r) -> int:
        """A recompute's hop reaches its prompt machine; KV transfers and migrations their decode machine."""
        p = self.hop.pop(r, None)
        return self.decode_on[r] if p is None else p

    # -- iterations ----------------------------------------------------------------
    def end(self, m, e):
        self.observe(e)
        return self.end_prefills(m, e) if self.machines[m].pool == 0 else self.end_decodes(m, e)

    def end_prefills(self, m, e) -> list:
        """A prompt machine's prefills emit a token each; their KV leaves for the decode machine."""
        mc = self.machines[m]
        mc.end_decodes(self.S, self.N)    # none run here: the machine goes idle
        self.pending_prompt[m] -= mc.prefill_tokens
        self.pf_tokens[m] = 0.0
        transfers = []
        for r in mc.prefilling:
            plen = self.plen[r]
            mc.pf_kv -= plen
            self.prefills_done += 1
            if math.isnan(self.first[r]):
                self.first[r] = e
            self.gen[r] += 1
            if self.gen[r] >= self.N[r]:
                self.finish[r] = e
                token = self.machines[self.decode_on[r]]
                token.queued_kv -= plen + 1
                token.queued -= 1
                continue
            d = self.decode_on[r]
            alone = kv_visible_s(plen, mc.duration, *self.kv_link_of(m, d))
            visible = self.kv_queued_s(m, d, plen, e, mc.duration, alone)   # shared links (cloud plans)
            self.kv_transfers += 1
            self.kv_visible_sum += visible
            transfers.append((r, e + visible))
        mc.prefilling = ()
        return transfers

    def end_decodes(self, m, e) -> list:
        """A token machine's finishers leave, its migration moves on, it preempts while its
        next iteration's contexts exceed its KV, and it may start a migration."""
        mc = self.machines[m]
        for r in mc.end_decodes(self.S, self.N):
            self.finish[r] = e
        self.pending_decode[m] -= mc.decoding
        arrivals = self.migrations.advance(m, e) if self.migrations is not None else []
        arrivals += self.shed(mc, e)
        if self.migrations is not None:
            self.migrations.maybe_start(m, e)
        return arrivals

    def shed(self, mc, e) -> list:
        """Preempt by recompute (a lone request always runs); [(request, e)] sent to the prompt pool."""
        sent = []
        while mc.running > 1 and mc.ctx > mc.kv_cap:
            r = mc.victim()
            g = mc.leave(r)
            self.pending_decode[mc.index] -= self.N[r] - g
            mc.preemptions += 1
            self.plen[r] = self.prompt[r] + g
            self.recomputed_tokens += self.plen[r]
            self.hop[r] = self.dispatch(r, e, self.N[r] - g - 1)
            sent.append((r, e))
        return sent

    # -- observation -----------------------------------------------------------------
    def fragmented_fraction(self) -> float:
        """The token pool's free KV (a fraction of its KV) when some token machine's first
        waiting transfer does not fit there but would fit in the pool's free KV together."""
        free = [max(mc.free_kv(), 0.0) for mc in self.tokens]
        total = sum(free)
        for mc, f in zip(self.tokens, free):
            waiting = [r for r in mc.wait_q if r not in self.reserved_in]
            if waiting:
                need = self.prompt[waiting[0]] + self.gen[waiting[0]]
                if f < need <= total:
                    return total / self.token_kv
        return 0.0
