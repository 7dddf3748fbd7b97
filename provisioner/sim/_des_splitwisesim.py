"""`--scheduler splitwisesim`: SplitwiseSim's scheduling rules in the discrete-event engine
(SEMANTICS.md, "The splitwisesim scheduler"), so a run replays the paper's simulator
(github.com/Mutinifni/splitwise-sim, `scheduler.py` and `instance.py`) rule for rule.

Routing (`SplitwiseSimCluster.route`). Every server keeps SplitwiseSim's two scheduler
counters: pending tokens (a routed prompt counts its prompt tokens until its prefill
ends, a routed decode counts ONE token until it finishes, whatever its length) and
reserved memory (KV tokens, SplitwiseSim's estimate: s + 1 on the prefill server until
the prefill ends, s + n on the decode server until the request finishes: the `max_memory`
of its prompt task, s + 1, and of its decode task, which generates n - 1).
- Baselines (`token_jsq`): prefill and decode on the server with the fewest pending tokens.
- Split families (`mixed_pool`): the prefill goes to the prompt server with the fewest
  pending tokens unless its queue is "long" (something waiting there and its pending
  tokens plus this prompt exceed 8,192), then to the least-pending mixed server on the
  same test; the decode goes to the token server with the least reserved memory unless
  it would reach the memory budget, then to the least-reserved mixed server. With no
  prompt server found, the token server with the fewest pending tokens is drafted into
  the mixed pool (no floor: every token server can be drafted); with no decode server,
  the prompt server with the least reserved memory is. If either is still missing, both
  phases go to the server with the fewest pending tokens. A mixed server returns to its
  home pool when it falls idle with nothing queued.

Iterations (`SplitwiseSimMachine`, SplitwiseSim's `SplitwiseInstance.select_batch`): every
iteration takes, under one budget of `batch_cap` tokens (a prompt counts its tokens, a
decode one) and 512 requests, first queued prompts (FCFS), then preempted decodes, then
the decodes of the previous iteration, then new decodes (in arrival order, while their
KV fits, up to the first request whose prompt is still queued here). A decode of the
previous iteration that no longer fits is preempted: it keeps its KV and waits in the
preempted queue, ahead of the others at the next iteration. A request routed to one
server for both phases counts as queued there until its decode starts (SplitwiseSim
submits its decode task with its prompt).

Decode runs (SplitwiseSim's `ORCAInstance.get_num_contiguous_iterations` and
`pause_iteration`): a decode-only batch is committed for as many iterations as its shortest
decode has left, and nothing joins it until then unless a task arrival ends the run at the
current iteration: a decode (KV arrived, or submitted with a prompt routed here for both
phases), a prompt within the batch token budget, or the completed KV transfer of a prompt
prefilled here while something waits here. A prompt longer than the budget cannot end it:
it waits for the run's shortest decode to finish or for such an arrival.

Memory (`splitwisesim_kv_tokens`): SplitwiseSim sizes the KV cache of a token as
2 x hidden x layers x bytes (every attention head, no grouped-query sharing) and gives a
server all of its GPUs' memory (GiB) less the weights.

KV transfers (`splitwisesim_kv_s_per_token`, SplitwiseSim's `KVScheduler.add_kv_cache_transfer`
on a `DummyLink`): the s prompt tokens' KV at that size moves at 200 GiB/s once the prefill
ends, each transfer on its own link; the decode arrives when it is done.
"""

from __future__ import annotations

import numpy as np

from ..errors import ProvisionerError
from ..schedulers import SPLITWISESIM_MAX_BATCH, SPLITWISESIM_PROMPT_QUEUE_TOKENS, SPLITWISESIM_TRANSFER_GIB_S
from ._des import _Cluster
from ._des_scalar import iteration_fn

GIB = 2.0 ** 30   # SplitwiseSim's GPU memory sizes are GiB (80 GB: 85,899,345,920 bytes)


def splitwisesim_kv_tokens(llm, gpu, tp) -> np.ndarray:
    """KV tokens per server by SplitwiseSim's estimate (>= 0): all GPU memory less the
    weights, at 2 x hidden x layers x bytes per token."""
    per_token_bytes = 2.0 * llm.hidden_size * llm.n_layers * llm.bytes_per_param
    usable = np.asarray(tp, dtype=float) * gpu.hbm_capacity_gb * GIB
    return np.maximum(usable - llm.weight_bytes, 0.0) / per_token_bytes


def splitwisesim_kv_s_per_token(llm) -> float:
    """Seconds per prompt token of SplitwiseSim's KV transfer: its KV estimate (as above)
    at the mixed_pool scheduler's `transfer_bandwidth`."""
    return 2.0 * llm.hidden_size * llm.n_layers * llm.bytes_per_param / (SPLITWISESIM_TRANSFER_GIB_S * GIB)


class SplitwiseSimMachine:
    """One server under SplitwiseSim's iteration rule (prompts first, decodes preemptible).

    Same interface as `_des_machine.Machine` (what `_Cluster` and `_simulate` call), with
    the running set kept as an ordered list so single decodes can be preempted."""

    __slots__ = ("pool", "coef", "iteration_s", "kv_cap", "batch_cap", "prompt_q", "wait_q", "batch", "blocked",
                 "left", "kv_used", "busy", "start_pending", "prefilling", "decoding", "duration",
                 "prefill_tokens", "finished", "preemptions", "local_waiting", "run_left", "hold")

    def __init__(self, pool, coef, kv_cap, batch_cap):
        self.pool, self.coef, self.kv_cap, self.batch_cap = pool, coef, kv_cap, batch_cap
        self.iteration_s = iteration_fn(coef)
        self.prompt_q, self.wait_q = [], []   # wait_q: new decodes (KV arrived or prefilled here)
        self.batch, self.blocked = [], []     # decodes of the last iteration; preempted decodes
        self.left = {}                        # request -> decode iterations still to run
        self.kv_used = 0
        self.busy = self.start_pending = False
        self.prefilling, self.decoding, self.duration, self.prefill_tokens = (), 0, 0.0, 0
        self.finished = ()
        self.preemptions = 0
        self.local_waiting = 0   # requests routed here for both phases whose decode has not started
        # SplitwiseSim's contiguous decode run: a decode-only batch is committed for as many
        # iterations as its shortest decode has left (`run_left` after this one); `hold`
        # until then unless a task arrival ends it (`arrival`)
        self.run_left, self.hold = 0, False

    def queued(self) -> bool:
        """SplitwiseSim's non-empty `pending_queue`: a prompt or decode waiting here (the decode
        of a request routed here for both phases is queued with its prompt, at routing)."""
        return bool(self.prompt_q or self.wait_q or self.blocked or self.local_waiting)

    def join(self, r, s, n):
        """A local prompt's decode (its KV held since the prefill) waits for the next batch."""
        self.left[r] = n - 1
        self.wait_q.append(r)

    def arrival(self, prompt_tokens=0):
        """A task arrives here (a prompt of `prompt_tokens`, or a decode): SplitwiseSim's
        `task_arrival` ends a committed decode run at this iteration (`pause_iteration`) for
        a decode while fewer than 512 requests run, and for a prompt within the token
        budget; a longer prompt waits for the run to end."""
        if prompt_tokens:
            self.hold = self.hold and prompt_tokens > self.batch_cap
        elif len(self.batch) < SPLITWISESIM_MAX_BATCH:
            self.hold = False

    def start(self, S, N, local):
        """Select the batch of the iteration starting now; its duration, or None when idle."""
        if self.hold:   # a committed decode run, not paused: the same decodes, nothing else
            self.run_left -= 1
            self.hold = self.run_left > 0
            return self._run(S, N, (), self.batch, 0, 0)
        budget, room = self.batch_cap, SPLITWISESIM_MAX_BATCH
        prompts, tokens, sq = self._take_prompts(S, N, local, budget, room)
        carry = self.blocked + self.batch   # preempted decodes first, then the last batch's
        k = 0
        while k < len(carry) and len(prompts) + k < room and (not (prompts or k) or tokens + k + 1 <= budget):
            k += 1
        decodes, preempted = carry[:k], self.batch[max(k - len(self.blocked), 0):]
        self.blocked = self.blocked[k:] + preempted   # they keep their KV and wait, in order
        self.preemptions += len(preempted)
        self._admit_new(S, N, decodes, prompts, tokens + k, budget, room)
        if not prompts and not decodes:
            self.batch = []
            self.hold = False
            return None
        # a decode-only batch commits to the iterations its shortest decode has left
        self.run_left = 0 if prompts else min(self.left[r] for r in decodes) - 1
        self.hold = self.run_left > 0
        return self._run(S, N, prompts, decodes, tokens, sq)

    def _run(self, S, N, prompts, decodes, tokens, sq):
        ctx = 0
        for r in decodes:
            ctx += S[r] + N[r] - self.left[r]   # context of its k-th decode: s + k, k = n - left
        self.batch, self.prefilling, self.decoding, self.prefill_tokens = decodes, prompts, len(decodes), tokens
        self.busy = True
        self.duration = self.iteration_s(tokens, sq, len(prompts), len(decodes), ctx)
        return self.duration

    def _take_prompts(self, S, N, local, budget, room):
        """Queued prompts FCFS while they fit the token budget (the first always does) and,
        for a prompt decoded here, the KV budget."""
        q, taken, tokens, sq = self.prompt_q, 0, 0, 0
        while taken < len(q) and taken < room:
            r = q[taken]
            s = S[r]
            if taken and tokens + s > budget:
                break
            if local[r]:
                need = s + N[r]
                if self.kv_used and self.kv_used + need > self.kv_cap:
                    break
                self.kv_used += need
            taken += 1
            tokens += s
            sq += s * s
        prompts = q[:taken]
        del q[:taken]
        return prompts, tokens, sq

    def _admit_new(self, S, N, decodes, prompts, used, budget, room):
        """New decodes in arrival order (request index) while the budgets and the KV fit; a
        transferred decode reserves its KV here when admitted."""
        wq = self.wait_q
        if not wq:
            return
        wq.sort()
        # SplitwiseSim walks its requests in arrival order and stops at the first that does
        # not fit: a prompt still queued here (it did not fit above) bars every later decode.
        oldest_prompt = self.prompt_q[0] if self.prompt_q else len(S)
        k = 0
        while k < len(wq) and wq[k] < oldest_prompt and len(prompts) + len(decodes) < room \
                and (not (prompts or decodes) or used + 1 <= budget):
            r = wq[k]
            if r not in self.left:   # a transferred decode: its KV arrives with it
                need = S[r] + N[r]
                if self.kv_used and self.kv_used + need > self.kv_cap:
                    break
                self.kv_used += need
                self.left[r] = N[r] - 1
            else:
                self.local_waiting -= 1
            decodes.append(r)
            used += 1
            k += 1
        del wq[:k]

    def end_decodes(self, S, N):
        """Every decode of the iteration gains a token; return (and keep) the finishers."""
        left, finished = self.left, []
        for r in self.batch:
            left[r] -= 1
            if not left[r]:
                finished.append(r)
        if finished:
            done = set(finished)
            self.batch = [r for r in self.batch if r not in done]
            for r in finished:
                del left[r]
                self.kv_used -= S[r] + N[r]
        self.finished = finished
        self.busy = False
        return finished


class SplitwiseSimCluster(_Cluster):
    """SplitwiseSim's `token_jsq` (baselines) and `mixed_pool` (split families) routing."""

    def __init__(self, inputs, d: int):
        super().__init__(inputs, d)
        if inputs.chunk_tokens[d] > 0:
            raise ProvisionerError("--scheduler splitwisesim prefills whole prompts (SplitwiseSim has no chunked "
                                   "prefill): drop --prefill-chunk-tokens")
        cap = float(inputs.batch_cap_tokens[d])
        self.machines = [SplitwiseSimMachine(mc.pool, mc.coef, mc.kv_cap, cap) for mc in self.machines]
        m = len(self.machines)
        self.sched_pending = [0] * m   # prompt tokens until the prefill ends + 1 per decode until it ends
        self.sched_memory = [0] * m    # KV tokens reserved by routing (SplitwiseSim's estimate)
        self.mem_budget = [float(mc.kv_cap) for mc in self.machines]
        self.homes = ([i for i in range(m) if self.pools[i] == 0], [i for i in range(m) if self.pools[i] == 1])
        self.mixed = []                # the mixed pool, in drafting order

    @property
    def preemptions(self) -> int:
        return sum(mc.preemptions for mc in self.machines)

    def route(self, r, t):
        s, n = self.S[r], self.N[r]
        pend = self.sched_pending.__getitem__
        if self.n_token == 0:   # token_jsq, among the servers taking new requests
            p = d = min(self._open_servers(t), key=pend)
        else:
            p, d = self._mixed_pool(s, n)
            self.borrowed_prefills += self.pools[p] == 1
            self.borrowed_decodes += self.pools[d] == 0 and n > 1
        self.sched_pending[p] += s
        self.sched_pending[d] += 1
        self.machines[p].arrival(s)
        if p == d:   # SplitwiseSim submits the decode task with the prompt
            self.machines[p].arrival()
        if p == d:
            self.sched_memory[p] += s + n
            self.machines[p].local_waiting += n > 1
        else:
            self.sched_memory[p] += s + 1
            self.sched_memory[d] += s + n
        return self.assign(r, p, d)

    def _open_servers(self, t):
        """Every server, or under availability windows (autoscaling) those whose window holds
        t (`available`; the least-work rule reads them through prompt_work, which token_jsq
        does not: it routed to servers not started yet and to stopped ones)."""
        taking = self.available(t)
        if taking is None:
            return range(len(self.machines))
        return np.flatnonzero(taking[:len(self.machines)]).tolist()

    def kv_link_of(self, p, d):
        """SplitwiseSim's KV transfer: all of it after the prefill (no layer-wise overlap),
        `splitwisesim_kv_s_per_token` per prompt token, no setup, no shared link."""
        return self.kv_link[0], self.kv_link[1], self.kv_link[2], float("inf")

    def receiver(self, r) -> int:
        """A KV arrival is a decode arriving at its decode server, and SplitwiseSim's
        `notify_flow_completion` on the transfer's source ends that server's decode run too
        if anything waits there."""
        d, p = self.decode_on[r], self.prefill_on[r]
        self.machines[d].arrival()
        if self.machines[p].queued():
            self.machines[p].arrival()
        return d

    def _mixed_pool(self, s, n):
        """SplitwiseSim's MixedPoolScheduler.schedule: (prefill server, decode server)."""
        prompt, token = self.homes
        mixed, pend, mem = self.mixed, self.sched_pending.__getitem__, self.sched_memory.__getitem__
        p = self._prompt_server(prompt, s)
        if p is None:
            p = self._prompt_server(mixed, s)
        d = self._token_server(token, s + n)
        if d is None:
            d = self._token_server(mixed, s + n)
        if p is None and token:   # draft the least-pending token server into the mixed pool
            p = min(token, key=pend)
            token.remove(p)
            mixed.append(p)
        if d is None and prompt:  # draft the prompt server with the least reserved memory
            d = min(prompt, key=mem)
            prompt.remove(d)
            mixed.append(d)
        if p is None or d is None:   # nothing found: baseline mixed batching
            p = d = min(prompt + mixed + token, key=pend)
        return p, d

    def _prompt_server(self, servers, s):
        """The least-pending server unless its queue is long (something waits there and its
        pending tokens plus this prompt exceed the threshold)."""
        if not servers:
            return None
        c = min(servers, key=self.sched_pending.__getitem__)
        if self.machines[c].queued() and self.sched_pending[c] + s > SPLITWISESIM_PROMPT_QUEUE_TOKENS:
            return None
        return c

    def _token_server(self, servers, need):
        """The server with the least reserved memory unless this request would fill it."""
        if not servers:
            return None
        c = min(servers, key=self.sched_memory.__getitem__)
        return None if self.sched_memory[c] + need >= self.mem_budget[c] else c

    def start(self, m, t):
        dur = super().start(m, t)
        if dur is None and m in self.mixed and not self.machines[m].queued():
            self.mixed.remove(m)          # idle with nothing queued: back to its home pool
            self.homes[self.pools[m]].append(m)
        return dur

    def end(self, m, e):
        mc = self.machines[m]
        S, N = self.S, self.N
        prefilled = mc.prefilling
        transfers = super().end(m, e)
        for r in mc.finished:
            self._release_decode(m, r)
        for r in prefilled:
            self.sched_pending[m] -= S[r]
            if not self.local[r]:
                self.sched_memory[m] -= S[r] + 1
            if N[r] == 1:   # done at its prefill: its decode server lets go of it too
                self._release_decode(self.decode_on[r], r)
        mc.finished = ()
        return transfers

    def _release_decode(self, d, r):
        self.sched_pending[d] -= 1
        self.sched_memory[d] -= self.S[r] + self.N[r]
