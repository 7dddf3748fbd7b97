"""Splitwiser in the discrete-event engine: a prefill and a decode process sharing each
machine's GPUs (SEMANTICS.md, "Splitwiser"), re-timed exactly.

Server `j` (prompt pool) and server `n + j` (token pool) are machine `j`'s two processes.
An iteration's progress is a remaining fraction of its work, run at rate 1 / T alone or
1 / T' while the sibling is busy (`perfmodels.shared_iteration_s`). Whenever a server
starts or ends an iteration, its sibling's iteration in flight is re-timed: the fraction
done so far is kept, the rest runs at the new rate. A re-timed iteration gets a new end
event; the old one stays in the heap and is skipped (lazy deletion): an end event's id is
`server + n_servers x version`, and only the server's current version counts.
"""

from __future__ import annotations

import numpy as np

from perfmodels import iteration_parts, shared_iteration_s

from ..errors import ProvisionerError
from ._des import _Cluster


class ColocatedCluster(_Cluster):
    """A Splitwiser design: paired servers, routing over machines, GPU sharing."""

    def __init__(self, inputs, d: int):
        super().__init__(inputs, d)
        n = self.n_prompt
        if self.n_token != n:
            raise ProvisionerError(f"design {d}: a Splitwiser design pairs its servers (got {n} and "
                                   f"{self.n_token})")
        self.n = n
        share = float(inputs.mps_share[d])
        self.share = [share] * n + [1.0 - share] * n   # SM share while the sibling runs
        m = 2 * n
        self.n_servers = m
        self.sibling = list(range(n, m)) + list(range(n))
        self.version = [0] * m        # of the current end event of each server
        self.parts = [(0.0, 0.0, 0.0, 0.0)] * m   # (T, C, u, O) of the iteration in flight
        self.left = [0.0] * m         # its remaining fraction of work at `since`
        self.since = [0.0] * m
        self.rate = [1.0] * m         # fraction of work per second
        self.begun = [0.0] * m        # its real start (busy time is real elapsed time)
        self.retimed = []             # (end time, end event id) of re-timed iterations, for the heap

    def route(self, r, t):
        """The machine with the least prompt work plus pending decode tokens (ties: lowest
        index) gets the prefill on its prompt server and the decode on its token server."""
        n = self.n
        j = int(np.argmin(self.prompt_work(t)[:n] + self.pending_decode[n:]))
        return self.assign(r, j, j + n)

    def end_event(self, m) -> int:
        """Id of server m's current end event."""
        return m + self.n_servers * self.version[m]

    def is_current(self, event_id) -> bool:
        return event_id // self.n_servers == self.version[event_id % self.n_servers]

    def start(self, m, t):
        """Start an iteration on idle server m at t; return its duration at the current
        rate, or None. The sibling's iteration in flight is re-timed."""
        mc = self.machines[m]
        work = mc.take_work(self.S, self.N, self.local)
        if work is None:
            return None
        self.parts[m] = self.parts_of(mc, work)
        mc.duration = self.parts[m][0]
        self.decode_tokens += mc.decoding
        self.left[m], self.since[m], self.begun[m] = 1.0, t, t
        self.rate[m] = 1.0 / self._time(m)
        self.version[m] += 1
        dur = 1.0 / self.rate[m]
        if mc.prefill_tokens:
            self.pf_tokens[m], self.pf_start[m], self.pf_dur[m] = mc.prefill_tokens, t, dur
        self._retime(self.sibling[m], t)
        return dur

    def end(self, m, e):
        """Iteration end: busy time as real elapsed time; the sibling is re-timed."""
        mc = self.machines[m]
        elapsed = e - self.begun[m]
        pool = mc.pool
        self.busy_s[pool] += elapsed
        if mc.decoding:
            self.batch_time_s[pool] += mc.decoding * elapsed
            self.decode_time_s[pool] += elapsed
        transfers = super().end(m, e)     # the machine is idle from here
        self._retime(self.sibling[m], e)
        return transfers

    def parts_of(self, mc, work) -> tuple:
        """(T, C, u, O) of the iteration `work` (take_work's quantities) on server mc."""
        return iteration_parts(mc.coef, *work, mc.ctx)

    def _time(self, m) -> float:
        """Server m's iteration time at the current state of its sibling."""
        solo, compute, hbm, rest = self.parts[m]
        sib = self.sibling[m]
        if not self.machines[sib].busy:
            return solo
        return shared_iteration_s(solo, compute, hbm, rest, self.parts[sib][2], self.share[m])

    def _retime(self, m, t) -> None:
        """Re-time server m's iteration in flight at t: the done fraction is kept, the rest
        runs at the new rate; a changed end gets a new end event."""
        if not self.machines[m].busy:
            return
        rate = 1.0 / self._time(m)
        if rate == self.rate[m]:
            return
        left = max(self.left[m] - (t - self.since[m]) * self.rate[m], 0.0)
        self.left[m], self.since[m], self.rate[m] = left, t, rate
        self.version[m] += 1
        self.retimed.append((t + left / rate, self.end_event(m)))
        if self.pf_tokens[m]:   # the virtual start keeps routing's done share of the prefill
            self.pf_dur[m] = 1.0 / rate
            self.pf_start[m] = t - (1.0 - left) / rate
