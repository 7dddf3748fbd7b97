"""First-come first-served KV admission at a decode replica, judged as the engines judge it:
the share of requests that miss a p99 deadline (SEMANTICS.md, "Cloud plans"), the
"admission" limit of `Scorer.decode_limits`.

A decode replica admits a request when its whole KV (`s + n` tokens) fits in the free
budget, in arrival order, and holds it for its `n - 1` iterations. Requests of many sizes
sharing one budget are a stochastic knapsack: in the loss approximation (blocked requests
are few at the rates that matter) the budget's occupancy is the product-form compound
Poisson law truncated at the budget (Kaufman-Roberts), here by FFT. Per offered load `c`
(iterations of decode work offered per iteration, `rate x step`):

- a request of `u` KV units is blocked when more than `budget - u` units are held;
- a blocked request waits about the residual hold time of what blocks it, scaled by the
  share of the budget it needs, and longer as the budget fills (1 / (1 - utilization));
- behind a blocked head the queue waits too (FCFS): a request arriving then waits the
  blocked heads' residual wait (Little's law gives the share of time a head is blocked);
- a wait misses when it exceeds the request's slack: the time left within its p99 TBT
  limit over its `n - 1` tokens and within its p99 E2E limit after a typical TTFT;
  a request whose every token is slower than its TBT limit misses at any load. A request
  larger than the budget is not this replica's (it books nothing and is not counted): a
  plan sends it to a replica that holds it, or counts it as unservable
  (`_simulate.unservable`).

A waiting request's wait is drawn as exponential with that mean. On one decode replica
behind ample prefill (`benchmarks/results/cloud_decode_rates.md`) the DES sustains 0.92x
this rate on coding's 13k-token A5000 and 3090 Ti replicas, where the slots limit (the
batch that fits at the mean KV a request holds, less square-root staffing) said twice as
much: FCFS behind a long prompt, not the mean, sets their rate. On A6000 TP2 it still says
0.55 req/s against the DES's 0.08 (its slower steps hold the budget longer, and the rare
long-output blocker is what the DES meets).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

KV_UNITS = 256         # the budget's resolution: a request needs ceil((s + n) / (budget / 256)) units
_FFT_POINTS = 4 * KV_UNITS   # the untruncated occupancy law's support (its mass past 4x the budget is nil)


@dataclass(frozen=True)
class KvAdmission:
    """The load-independent part of one KV budget's admission model (cached per budget)."""

    units: np.ndarray          # (f,) KV units each decode that fits needs
    share: np.ndarray          # (f,) its units over the budget's
    steps: np.ndarray          # (f,) its decode iterations (n - 1)
    room_base_s: np.ndarray    # (f,) its slack before its own iterations: min(TBT p99 x (n - 1), E2E p99 - TTFT p50)
    n_requests: int
    log_gen: np.ndarray        # (_FFT_POINTS,) log generating function of the occupancy per unit load
    unit_steps: float          # KV unit-iterations a request books on average (one too large books none)
    residual_steps: float      # residual decode iterations of a running request (E[m^2] / 2 E[m])

    @classmethod
    def of(cls, workload, kv_cap_tokens: float) -> "KvAdmission":
        steps = workload.decode_steps
        size = workload.prompt_tokens + workload.output_tokens
        # (a size of exactly k units is k, not k + 1 by round-off)
        units = np.ceil(size / max(kv_cap_tokens, 1e-9) * KV_UNITS - 1e-9).astype(np.int64)
        fits = (steps > 0) & (units <= KV_UNITS)
        n = len(units)
        # offered load per class (unit size) per unit of load: each request's hold in iterations
        load = np.bincount(units[fits], weights=steps[fits], minlength=_FFT_POINTS)[:_FFT_POINTS] / n
        with np.errstate(invalid="ignore"):
            room = np.minimum(workload.tbt_p99_s * steps, workload.e2e_p99_s - workload.ttft_p50_s)
        m = steps[fits]
        return cls(units=units[fits], share=units[fits] / KV_UNITS, steps=m, room_base_s=room[fits],
                   n_requests=n,
                   log_gen=np.fft.fft(load) - load.sum(), unit_steps=float((m * units[fits]).sum() / n),
                   residual_steps=float((m * m).sum() / max(2.0 * m.sum(), 1e-300)))

    @property
    def full_load(self) -> float:
        """The offered load that books the whole budget (`utilization` 1)."""
        return KV_UNITS / max(self.unit_steps, 1e-300)

    def utilization(self, load: float) -> float:
        """The budget's share booked at offered load `load` (iterations per iteration)."""
        return load * self.unit_steps / KV_UNITS

    def blocked(self, load: float) -> np.ndarray:
        """(f,) probability that each decode that fits finds too little free KV on arrival."""
        pmf = np.maximum(np.fft.ifft(np.exp(load * self.log_gen)).real[:KV_UNITS + 1], 0.0)
        held_at_least = np.cumsum(pmf[::-1])[::-1] / pmf.sum()   # P(held >= k), k = 0..U
        return held_at_least[KV_UNITS + 1 - self.units]   # held > U - u (units >= 1)

    def miss_share(self, load: float, step_s: float, rate_rps: float) -> float:
        """Share of all requests whose decode misses a p99 deadline at this load."""
        busy = self.utilization(load)
        if busy >= 1.0:
            return 1.0
        room = self.room_base_s - self.steps * step_s
        late = room < 0   # slower than its limits even unblocked
        blocked = self.blocked(load)
        wait_s = (self.residual_steps * step_s / (1.0 - busy)) * self.share
        blocked_wait = blocked * wait_s
        head_blocked = min(rate_rps * float(blocked_wait.sum()) / self.n_requests, 1.0)
        behind_s = float((blocked_wait * wait_s).sum() / max(blocked_wait.sum(), 1e-300))
        room = np.maximum(room, 0.0)
        miss = blocked * np.exp(-room / wait_s) + (1.0 - blocked) * head_blocked * np.exp(-room / max(behind_s, 1e-300))
        return float(np.where(late, 1.0, miss).sum()) / self.n_requests
