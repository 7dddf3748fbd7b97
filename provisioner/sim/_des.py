"""Reference discrete-event engine: every batch iteration on every machine.

`run_des(inputs)` applies the rules of SEMANTICS.md exactly, one design at a time.
Events are iteration ends, KV-transfer arrivals, request arrivals and a deferred
"start" per machine (Reading 1). A heap holds the ends, transfers and starts; request
arrivals, sorted already, are merged in from the trace; a start with no other event
due at its instant runs at once instead of through the heap. Per-request state lives
in plain Python lists indexed by request (no object per request); a running set is a
count plus a context sum, and each running request is filed under the iteration index
at whose end it finishes, so an iteration costs O(prefills + finishers), not
O(decode batch). Routing compares all machines per arrival, in numpy vectors.

Readings of SEMANTICS.md where the text leaves a choice (the fluid engine must make the
same ones):

1. Simultaneous events. All events at one time are applied before any machine starts an
   iteration at that time: iteration ends (by machine index), then KV-transfer arrivals
   (by request index), then request arrivals (by request index), then the starts of the
   idle machines that have work (by machine index). So a request arriving exactly when
   an iteration ends is routed with that iteration's prefills completed, and it can join
   the iteration that starts at that instant.
2. Admission (step 3) is done when a machine starts an iteration. Since a machine starts
   at the end `e` of its previous iteration whenever it has work, this is step 3 at `e`;
   it also covers "a decode that reaches an idle machine starts an iteration at once".
   Admission precedes the selection of prompts, so transferred decodes get KV before
   local prompts of the same instant.
3. Tokens generated: the prefill generates the first token, so a running request's
   context in its k-th decode iteration (k = 1..n-1) is `s + k` (as
   `LatencyModel.solo_request_s` assumes: mean context s + n/2). "generated" in the
   pending-decode count means decode tokens, so pending decode tokens are the decode
   iterations a request still needs (`n - 1` at routing, minus one per decode iteration).
4. KV budget of a local prompt: a prompt whose decode is local may start on a machine
   holding no KV at all even if `s + n` exceeds `kv_cap` -- the prefill counterpart of
   the "admitted into an empty running set" rule, so nothing deadlocks. At a start, the
   machine holds KV only if its running set is non-empty.
5. Requests with `n == 1` are routed like the others (their decode machine is chosen
   and reserves `s + n` until the first token; on a local machine the prefill needs and
   holds `s + n` KV tokens until its end). `borrowed_decodes` counts only requests with
   `n > 1` routed to decode on a prompt machine (an `n == 1` request has no decode);
   `borrowed_prefills` counts every prefill routed to a token machine.
6. Pending prompt tokens of a machine drop when the prefill iteration ends (its prompts
   are pending until their prefill has completed). Baseline routing uses
   pending prompt + pending decode tokens of the mixed machines.
7. The prompt batch stops at the first prompt that would break the token cap or the KV
   budget (FCFS, no skipping ahead); the first prompt always fits the cap.
8. `kv_visible(s, prefill_duration)` gets the duration of the whole iteration that
   carried the prefill (other prompts and decodes included), per "with this iteration's
   duration".
9. Outputs: `decode_batch_time_s` sums decode batch x duration and `decode_time_s` the
   durations of iterations with a decode batch > 0, per pool; their ratio is the
   time-weighted mean decode batch. `busy_s` sums all iteration durations per pool.
10. Splitwiser (`_des_colocated.py`): a re-timed iteration's end event is filed anew and
   the old one skipped; ends at one instant are then taken in event-id order.
"""

from __future__ import annotations

import heapq

import numpy as np

from ..errors import ProvisionerError
from ..schedulers import SCHEDULERS, SPLITWISESIM
from ._des_machine import Machine as _Machine
from ._des_scalar import kv_visible_s
from ._inputs import EngineOutput, SimInputs, check_arrival_range
from ._long_run import announce_long_des, des_seconds
from ._windows import server_drained_s, windowed_cluster

_END, _KV, _ARRIVAL, _START = 0, 1, 2, 3  # event kinds, in their order at equal times


class _Cluster:
    """Machines of one design plus the scheduler's per-machine counters and routing.

    The routing counters are numpy arrays: every arrival compares all machines, and the
    comparisons are a few vector operations instead of a Python loop over machines (the
    same values and the same lowest-index tie-break, so the same choices)."""

    def __init__(self, inputs: SimInputs, d: int):
        self.n_prompt, self.n_token = int(inputs.n_machines[d, 0]), int(inputs.n_machines[d, 1])
        if self.n_prompt < 1 or self.n_token < 0:
            raise ProvisionerError(f"design {d}: needs >= 1 prompt (or mixed) machine and >= 0 token "
                                   f"machines (got {self.n_prompt} and {self.n_token})")
        cap = float(inputs.batch_cap_tokens[d])
        chunk = int(inputs.chunk_tokens[d])
        pools = [0] * self.n_prompt + [1] * self.n_token
        coefs = [tuple(float(x) for x in inputs.coef[d, p]) for p in (0, 1)]
        kv = [float(inputs.kv_cap_tokens[d, p]) for p in (0, 1)]
        self.machines = [_Machine(p, coefs[p], kv[p], cap, chunk) for p in pools]
        self.pools = pools
        m = len(pools)
        self.index = np.arange(m)
        self.token_pool = np.array(pools) == 1
        self.prompt_pool = ~self.token_pool
        self.lent = np.zeros(m, dtype=bool)     # serving the other pool's phase (the mixed pool)
        self.n_lent = 0
        self.kv_cap = np.array([kv[p] for p in pools])
        self.pending_prompt, self.pending_decode, self.reserved = (np.zeros(m, dtype=np.int64) for _ in range(3))
        # the prefill in flight per machine (no prefill: 0 tokens), for the routing's prompt work
        self.pf_tokens, self.pf_start, self.pf_dur = np.zeros(m), np.zeros(m), np.ones(m)
        self.borrow = bool(inputs.allow_borrow[d])
        self.overload = float(inputs.overload_tokens[d])
        self.kv_link = (float(inputs.kv_s_per_token[d]), float(inputs.kv_setup_s[d]), int(inputs.n_layers),
                        float(inputs.layerwise_min_tokens))   # kv_visible_s's parameters
        r = len(inputs.arrival_s)
        self.S, self.N = inputs.prompt_tokens.tolist(), inputs.output_tokens.tolist()
        self.prefill_on, self.decode_on, self.local = [0] * r, [0] * r, [False] * r
        self.first, self.finish = [np.nan] * r, [np.nan] * r
        self.busy_s, self.batch_time_s, self.decode_time_s = [0.0, 0.0], [0.0, 0.0], [0.0, 0.0]
        self.borrowed_decodes = self.borrowed_prefills = self.kv_transfers = 0
        self.decode_tokens = 0      # tokens generated by decode iterations (a conservation check)
        self.kv_visible_sum = 0.0

    def available(self, t):
        """Which servers take new requests at t; None: all (availability windows narrow it)."""
        return None

    def prompt_work(self, t):
        """Pending prompt tokens per machine less the share of the prefill in flight already
        done at t (a machine without one: its pending tokens)."""
        return self.pending_prompt - self.pf_tokens * np.minimum((t - self.pf_start) / self.pf_dur, 1.0)

    def route(self, r, t):
        """Assign request r's prefill and decode machines at time t (SEMANTICS.md, routing)."""
        s, n = self.S[r], self.N[r]
        work = self.prompt_work(t)
        if self.n_token == 0:
            p = d = int(np.argmin(work + self.pending_decode))
        else:
            p, d = self._route_split(s + n, work)
            self.borrowed_prefills += self.pools[p] == 1
            self.borrowed_decodes += self.pools[d] == 0 and n > 1
        return self.assign(r, p, d)

    def assign(self, r, p, d) -> int:
        """Book request r's prefill on server p and its decode on d: the pending prompt
        and decode work and the reserved KV that routing reads; returns p."""
        s, n = self.S[r], self.N[r]
        self.prefill_on[r], self.decode_on[r], self.local[r] = p, d, p == d
        self.pending_prompt[p] += s
        self.pending_decode[d] += n - 1
        self.reserved[d] += s + n
        return p

    def _route_split(self, need, work):
        """Least-loaded home machines; lent machines (the mixed pool) only when no home one can."""
        prompt, token, lent, pp, pd, res = self.prompt_pool, self.token_pool, self.lent, self.pending_prompt, \
            self.pending_decode, self.reserved
        home0, home1 = prompt, token
        if self.n_lent:   # a lent machine goes home once its borrowed work has drained
            lent &= ~((prompt & (res == 0)) | (token & (pp == 0)))
            self.n_lent = int(lent.sum())
            home0, home1 = prompt & ~lent, token & ~lent
        p = _least(home0, work)
        # decode: a home token machine with room, else a lent prompt machine with room, else lend one
        fits = res + need <= self.kv_cap
        t = _least(fits & home1, pd)
        token_room = t is not None
        prompt_slack = work[p] <= self.overload     # lending never starves the prompt side
        if t is None and prompt_slack:
            t = _least(fits & prompt & lent, pd)
        if t is None:
            t = _least(home1, pd)
            if self.borrow and home0.sum() >= 2 and prompt_slack:
                t = self._lend(_least(home0 & (self.index != p), work))
        # prefill: the home prompt machine unless it is overloaded; then a lent token machine
        # below the threshold, else lend one
        if self.borrow and work[p] > self.overload:
            c = _least(token & lent, work)
            if c is not None and work[c] <= self.overload:
                p = c
            elif home1.sum() >= 2 and token_room:   # never starve the token side
                p = self._lend(_least(home1 & (self.index != t), res))
        return p, t

    def receiver(self, r) -> int:
        """The machine whose wait queue a KV arrival of request r reaches: its decode machine."""
        return self.decode_on[r]

    def kv_link_of(self, p, d):
        """kv_visible_s's link parameters for a transfer p -> d (one link per design here)."""
        return self.kv_link

    def kv_queued_s(self, p, d, s, e, prefill_s, visible):
        """The visible part of a transfer p -> d after any queue for shared links (none here:
        each transfer has its link to itself)."""
        return visible

    def _lend(self, m):
        self.lent[m] = True
        self.n_lent += 1
        return m

    def start(self, m, t):
        """Start an iteration on idle machine m at time t; return its duration or None."""
        mc = self.machines[m]
        dur = mc.start(self.S, self.N, self.local)
        if dur is not None:
            pool = mc.pool
            self.busy_s[pool] += dur
            if mc.decoding:
                self.decode_tokens += mc.decoding
                self.batch_time_s[pool] += mc.decoding * dur
                self.decode_time_s[pool] += dur
            if mc.prefill_tokens and dur > 0:   # whole prompts or chunks
                self.pf_tokens[m], self.pf_start[m], self.pf_dur[m] = mc.prefill_tokens, t, dur
        return dur

    def end(self, m, e):
        """Iteration end on machine m at time e; return (request, arrival time) KV transfers."""
        mc = self.machines[m]
        S, N, res = self.S, self.N, self.reserved
        for r in mc.end_decodes(S, N):
            self.finish[r] = e
            res[m] -= S[r] + N[r]
        self.pending_decode[m] -= mc.decoding
        if not mc.prefill_tokens:
            return ()
        self.pending_prompt[m] -= mc.prefill_tokens    # whole prompts and chunks alike
        self.pf_tokens[m] = 0.0
        transfers = []
        for r in mc.prefilling:
            s, n = S[r], N[r]
            self.first[r] = e
            if n == 1:
                self.finish[r] = e
                res[self.decode_on[r]] -= s + n
                if self.local[r]:
                    mc.kv_used -= s + n
            elif self.local[r]:
                mc.join(r, s, n)
            else:
                d = self.decode_on[r]
                alone = kv_visible_s(s, mc.duration, *self.kv_link_of(m, d))
                visible = self.kv_queued_s(m, d, s, e, mc.duration, alone)
                self.kv_transfers += 1
                self.kv_visible_sum += visible
                transfers.append((r, e + visible))
        mc.prefilling = ()
        return transfers


def _least(candidates, load):
    """The candidate (boolean mask) with the least load (lowest index on ties), or None.
    Loads are finite, so the minimum of the masked loads is a candidate if there is one."""
    i = int(np.where(candidates, load, np.inf).argmin())
    return i if candidates[i] else None


def _cluster_class(inputs: SimInputs, d: int, colocated: bool) -> type:
    if colocated and inputs.scheduler is not None and inputs.scheduler[d]:   # on-demand Splitwiser
        from ._des_splitwiser_on_demand import SplitwiserOnDemandCluster
        return SplitwiserOnDemandCluster
    if colocated:
        from ._des_colocated import ColocatedCluster   # it subclasses _Cluster: imported late
        return ColocatedCluster
    if inputs.servers is not None and inputs.servers[d] is not None:   # a cloud plan (_des_cloud.py)
        from ._des_cloud import CloudCluster, CloudOnDemandCluster, CloudSplitOnDemandCluster
        if inputs.scheduler is not None and inputs.scheduler[d]:   # on demand (SEMANTICS.md, "Cloud plans")
            return CloudSplitOnDemandCluster if inputs.n_machines[d, 1] > 0 else CloudOnDemandCluster
        return CloudCluster
    if inputs.scheduler is not None and inputs.scheduler[d] == SCHEDULERS.index(SPLITWISESIM):
        from ._des_splitwisesim import SplitwiseSimCluster   # SplitwiseSim's own rules
        return SplitwiseSimCluster
    if inputs.scheduler is not None and inputs.scheduler[d]:   # jsq, llumnix (SEMANTICS.md, "Schedulers")
        if inputs.n_machines[d, 1] > 0:   # Splitwise's two pools
            from ._des_split_on_demand import SplitOnDemandCluster
            return SplitOnDemandCluster
        from ._des_llumnix import OnDemandCluster
        return OnDemandCluster
    return _Cluster


def _simulate(inputs: SimInputs, d: int) -> _Cluster:
    """Run design d to the end of the last request; the cluster holds the results.

    Request arrivals are read in order from the trace rather than kept in the heap (they
    come sorted), so the heap holds only the machines' ends, starts and KV transfers.
    """
    colocated = inputs.mps_share[d] > 0
    if inputs.scaling is not None:   # closed-loop autoscaling: the controller sets the windows
        from ._control import controlled_cluster
        cl = controlled_cluster(_cluster_class(inputs, d, colocated), inputs, d)
    else:
        cl = windowed_cluster(_cluster_class(inputs, d, colocated), inputs, d)
    ctl = getattr(cl, "controller", None)
    machines = cl.machines
    n_requests = len(inputs.arrival_s)
    arrivals = inputs.arrival_s.tolist() + [float("inf")]   # a sentinel after the last request
    heap = []
    push, pop = heapq.heappush, heapq.heappop

    def begin(m, t):
        """Start an iteration on m at t and file its end (Splitwiser: an end event's id
        carries its version, and the sibling's re-timed end is filed too)."""
        dur = cl.start(m, t)
        if dur is not None:
            push(heap, (t + dur, _END, cl.end_event(m) if colocated else m))
        if colocated:
            file_retimed()

    def file_retimed():
        for event in cl.retimed:
            push(heap, (event[0], _END, event[1]))
        cl.retimed.clear()

    def wake(m, t, next_arrival):
        """An idle machine with possible work starts at t, after every other event at t
        (Reading 1): deferred through the heap if one is due at t, else at once (the
        deferred start would be the next event anyway)."""
        mc = machines[m]
        if mc.busy or mc.start_pending:
            return
        if next_arrival <= t or (heap and heap[0][0] <= t):
            mc.start_pending = True
            push(heap, (t, _START, m))
            return
        begin(m, t)

    r, a = 0, arrivals[0]
    while True:
        if heap and (heap[0][0] < a or (heap[0][0] == a and heap[0][1] < _ARRIVAL)):
            t, kind, i = pop(heap)
        elif r < n_requests:
            t, kind, i = a, _ARRIVAL, r
            r += 1
            a = arrivals[r]
        else:
            break
        if ctl is not None and t >= ctl.next_due_s:   # its samples and ticks read the state before this event
            ctl.advance(t)
        if kind == _END:
            if colocated:
                if not cl.is_current(i):
                    continue   # a re-timed iteration's old end
                i %= cl.n_servers
            if ctl is not None:
                cl.last_end_s[i] = t   # when a draining machine's work ended (closed-loop release)
            for req, at in cl.end(i, t):
                push(heap, (at, _KV, req))
            if colocated:
                file_retimed()
            wake(i, t, a)
        elif kind == _KV:
            m = cl.receiver(i)
            machines[m].wait_q.append(i)
            wake(m, t, a)
        elif kind == _ARRIVAL:
            m = cl.route(i, t)
            machines[m].prompt_q.append(i)
            wake(m, t, a)
        else:
            machines[i].start_pending = False
            begin(i, t)
    if ctl is not None:
        ctl.finish()
    return cl


def run_des(inputs: SimInputs, designs: np.ndarray | None = None) -> EngineOutput:
    """Simulate designs exactly, iteration by iteration.

    Parameters
    ----------
    inputs : SimInputs for n_designs designs and n_requests requests.
    designs : indices of the designs to simulate (default: all), in output order.

    Returns
    -------
    EngineOutput with one row per simulated design; per-request arrays are (d, r) in
    seconds (absolute times), pool arrays (d, 2).
    """
    if len(inputs.arrival_s) and (inputs.prompt_tokens.min() < 1 or inputs.output_tokens.min() < 1):
        raise ProvisionerError("every request needs prompt_tokens >= 1 and output_tokens >= 1")
    if np.any(np.diff(inputs.arrival_s) < 0):
        raise ProvisionerError("arrival_s must be sorted (requests are taken in arrival order)")
    check_arrival_range(inputs.arrival_s)
    idx = np.arange(inputs.n_designs) if designs is None else np.asarray(designs, dtype=np.int64).ravel()
    r = len(inputs.arrival_s)
    tokens = int(np.sum(inputs.output_tokens))
    announce_long_des(sum(des_seconds(r, tokens, inputs.scheduler is not None and bool(inputs.scheduler[d]))
                          for d in idx), r, len(idx))
    out = EngineOutput(
        first_token_s=np.empty((len(idx), r)), finish_s=np.empty((len(idx), r)),
        busy_s=np.zeros((len(idx), 2)), decode_batch_time_s=np.zeros((len(idx), 2)),
        decode_time_s=np.zeros((len(idx), 2)), borrowed_decodes=np.zeros(len(idx), dtype=np.int64),
        borrowed_prefills=np.zeros(len(idx), dtype=np.int64), kv_visible_s_sum=np.zeros(len(idx)),
        kv_transfers=np.zeros(len(idx), dtype=np.int64), drained_s=np.zeros((len(idx), inputs.n_machines.sum(1).max())))
    for row, d in enumerate(idx):
        cl = _simulate(inputs, int(d))
        out.first_token_s[row], out.finish_s[row] = cl.first, cl.finish
        if np.isnan(out.finish_s[row]).any():  # cannot happen: the heap runs dry only when all finished
            raise ProvisionerError(f"design {d}: the simulation ended with unfinished requests")
        out.busy_s[row], out.decode_batch_time_s[row], out.decode_time_s[row] = (
            cl.busy_s, cl.batch_time_s, cl.decode_time_s)
        out.borrowed_decodes[row], out.borrowed_prefills[row] = cl.borrowed_decodes, cl.borrowed_prefills
        out.kv_visible_s_sum[row], out.kv_transfers[row] = cl.kv_visible_sum, cl.kv_transfers
        out.drained_s[row] = server_drained_s(cl.prefill_on, cl.decode_on, cl.finish, out.drained_s.shape[1])
        if hasattr(cl, "controller"):   # closed-loop autoscaling
            from ._control import scaling_log_arrays
            out.scaling = out.scaling or [None] * len(idx)
            out.scaling[row] = scaling_log_arrays(cl.controller)
        if hasattr(cl, "stats"):   # an on-demand scheduler's counts and timeline
            from ._des_llumnix import record_stats
            record_stats(out, row, cl)
    return out
