"""One replica of the discrete-event engine (`_des.py`): its prompt queue, decode wait
queue, running set and KV budget, and what one iteration on it admits, prefills and
finishes (SEMANTICS.md, steps 1-5; the readings in `_des.py`'s docstring)."""

from __future__ import annotations

from collections import deque

from ._des_scalar import iteration_fn

_NO_PROMPTS = ((), 0, 0, 0)   # (prompts, tokens, sum of squares, prompts) of an iteration without prefill


class Machine:
    """One replica: prompt queue, decode wait queue, running set, KV budget (tokens)."""

    __slots__ = ("pool", "coef", "iteration_s", "kv_cap", "batch_cap", "chunk", "head_done", "prompt_q", "wait_q",
                 "running", "ctx", "kv_used", "busy", "start_pending", "iteration", "done_at", "prefilling",
                 "decoding", "duration", "prefill_tokens")

    def __init__(self, pool, coef, kv_cap, batch_cap, chunk=0):
        self.pool, self.coef, self.kv_cap, self.batch_cap = pool, coef, kv_cap, batch_cap
        self.iteration_s = iteration_fn(coef)
        self.chunk = chunk          # chunked-prefill budget (0: whole prompts under batch_cap)
        self.head_done = 0          # prompt tokens of the prompt-queue head already prefilled
        self.prompt_q, self.wait_q = deque(), deque()
        self.running = self.ctx = self.kv_used = 0   # running count, sum of contexts, KV held
        self.busy = self.start_pending = False
        self.iteration = 0          # index of the next iteration to end
        self.done_at = {}           # iteration index -> requests finishing at its end
        self.prefilling, self.decoding, self.duration = (), 0, 0.0
        self.prefill_tokens = 0     # prompt tokens of the iteration in flight

    def join(self, r, s, n):
        """Request r (first token out) enters the running set before iteration `self.iteration`."""
        self.running += 1
        self.ctx += s + 1
        self.done_at.setdefault(self.iteration + n - 2, []).append(r)

    def admit(self, S, N):
        """Step 3: FCFS admission of the wait queue while s + n fits (or the set is empty)."""
        wq = self.wait_q
        while wq:
            r = wq[0]
            s, n = S[r], N[r]
            if self.running and self.kv_used + s + n > self.kv_cap:
                break
            wq.popleft()
            self.kv_used += s + n
            self.join(r, s, n)

    def select_prompts(self, S, N, local):
        """The prompts of the iteration starting now, taken off the queue: FCFS up to the
        token cap and the KV budget (Readings 4 and 7), or chunks (`_take_chunks`).
        Returns (prefilled prompts, tokens, sum of squared lengths, prompts or chunks)."""
        if self.chunk:
            return self._take_chunks(S, N, local)
        pq, cap = self.prompt_q, self.batch_cap
        batch, tokens, sq = [], 0, 0
        while pq:
            r = pq[0]
            s = S[r]
            if batch and tokens + s > cap:
                break
            if not self._holds_kv(r, S, N, local):
                break
            pq.popleft()
            batch.append(r)
            tokens += s
            sq += s * s
        return batch, tokens, sq, len(batch)

    def _holds_kv(self, r, S, N, local) -> bool:
        """Reserve the KV of a prompt whose decode stays here; False when it does not fit."""
        if local[r]:
            need = S[r] + N[r]
            if self.kv_used and self.kv_used + need > self.kv_cap:
                return False
            self.kv_used += need
        return True

    def _take_chunks(self, S, N, local):
        """Chunked prefill: up to `chunk` prompt tokens from the queue head, the last prompt
        cut to fit (it stays at the head). A chunk of c tokens at offset o adds
        (o + c)^2 - o^2 to the sum of squares; every chunk counts as a prompt, and only
        the prompts whose last chunk is in this iteration are returned as prefilled."""
        batch, tokens, sq, seqs = [], 0, 0, 0
        pq, budget, done = self.prompt_q, self.chunk, self.head_done
        while pq and tokens < budget:
            r = pq[0]
            s = S[r]
            if not done and not self._holds_kv(r, S, N, local):   # its first chunk reserves the KV
                break
            c = min(s - done, budget - tokens)
            tokens += c
            sq += (done + c) ** 2 - done ** 2
            seqs += 1
            if done + c < s:
                self.head_done = done + c
                break
            pq.popleft()
            batch.append(r)
            done = self.head_done = 0
        return batch, tokens, sq, seqs

    def start(self, S, N, local):
        """Start an iteration if there is work; return its duration or None (stays idle)."""
        work = self.take_work(S, N, local)
        if work is None:
            return None
        self.duration = self.iteration_s(*work, self.ctx)
        return self.duration

    def take_work(self, S, N, local):
        """Admit decodes and take prompts for the iteration starting now: (prompt tokens, sum
        of squares, prompts, decode batch), or None when there is nothing to run."""
        if self.wait_q:
            self.admit(S, N)
        batch, tokens, sq, seqs = self.select_prompts(S, N, local) if self.prompt_q else _NO_PROMPTS
        b = self.running
        if not seqs and not b:
            return None
        self.busy, self.prefilling, self.decoding, self.prefill_tokens = True, batch, b, tokens
        return tokens, sq, seqs, b

    def end_decodes(self, S, N):
        """Steps 2 of an iteration end: every running request gains a token; return finishers."""
        b = self.decoding
        finished = self.done_at.pop(self.iteration, ()) if b else ()
        self.iteration += 1
        self.ctx += b
        for r in finished:
            held = S[r] + N[r]
            self.ctx -= held
            self.kv_used -= held
        self.running -= len(finished)
        self.busy = False
        return finished
