"""A memory budget for the engines: estimate a run's peak before it allocates.

The fluid engine keeps, per design in flight, four (machines x requests) tables (the
finish and wait heaps of every machine: 4 x 8 bytes per cell) plus a few per-request
columns, and it runs one design per thread at once. A question at a high rate asks for
thousands of machines over hundreds of thousands of requests: tens of GB per design.
`fluid_plan` estimates that from the designs' server counts and the trace length, runs
fewer designs at once when all threads' working sets do not fit, and refuses with the
estimate and what to change when even one design does not.

The budget is PROVISIONER_MEMORY_BUDGET_GB when set, else half of the memory available
when the run starts (at most 64 GB).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from ..errors import ProvisionerError

__all__ = ["MemoryBudgetError", "memory_budget_bytes", "fluid_plan", "des_check", "BUDGET_ENV"]

BUDGET_ENV = "PROVISIONER_MEMORY_BUDGET_GB"
FLUID_BYTES_PER_SERVER_REQUEST = 32.0   # fin_key, fin_val, wait_key, wait_val in _fluid._simulate_design
FLUID_BYTES_PER_REQUEST = 128.0         # req (4 x 8), join_iter, first/finish, the percentile scratch (6 x 8)
FLUID_BYTES_PER_KEPT_CELL = 16.0        # first-token and finish time of each (design, request), when kept
DES_BYTES_PER_REQUEST = 400.0           # Python lists and the event heap of one design
MAX_BUDGET_BYTES = 64e9
MIN_USEFUL_DURATION_S = 1.0           # a shorter trace holds too few requests to judge a p99


class MemoryBudgetError(ProvisionerError):
    """A simulation would need more memory than the budget allows (one line, with the fix)."""

    def __init__(self, message: str):
        super().__init__(message, params=("duration_s", "rps", "max_machines"))


@dataclass(frozen=True)
class FluidPlan:
    threads: int            # designs simulated at once
    peak_bytes: float       # the estimate at that concurrency


def memory_budget_bytes() -> float:
    """PROVISIONER_MEMORY_BUDGET_GB, else half the memory available now (capped at 64 GB)."""
    text = os.environ.get(BUDGET_ENV)
    if text:
        try:
            gb = float(text)
        except ValueError:
            gb = float("nan")
        if not gb > 0:
            raise ProvisionerError(f"{BUDGET_ENV} must be a number of GB > 0, e.g. 4 (got '{text}')")
        return gb * 1e9
    return min(MAX_BUDGET_BYTES, 0.5 * _available_bytes())


def _available_bytes() -> float:
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return float(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return float(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return 8e9


def fluid_design_bytes(servers: np.ndarray, n_requests: int) -> np.ndarray:
    """Working set of one design in the fluid engine (bytes), per design."""
    servers = np.asarray(servers, dtype=float)
    return (FLUID_BYTES_PER_SERVER_REQUEST * servers + FLUID_BYTES_PER_REQUEST) * float(n_requests)


def fluid_plan(servers: np.ndarray, n_requests: int, keep_requests: bool, threads: int,
               duration_s: float | None = None, budget_bytes: float | None = None) -> FluidPlan:
    """How many designs the fluid engine may run at once within the budget.

    servers : (d,) model replicas of each design (both pools).
    Raises MemoryBudgetError when one design alone does not fit.
    """
    budget = memory_budget_bytes() if budget_bytes is None else budget_bytes
    each = np.sort(fluid_design_bytes(servers, n_requests))[::-1]
    kept = FLUID_BYTES_PER_KEPT_CELL * len(each) * n_requests if keep_requests else 0.0
    if len(each) == 0:
        return FluidPlan(max(1, threads), kept)
    for k in range(max(1, min(threads, len(each))), 0, -1):
        peak = kept + float(each[:k].sum())
        if peak <= budget:
            return FluidPlan(k, peak)
    raise MemoryBudgetError(_refusal(float(each[0]) + kept, budget, int(np.max(servers)), n_requests, duration_s))


def des_check(n_designs: int, n_requests: int, duration_s: float | None = None,
              budget_bytes: float | None = None) -> None:
    """Refuse a discrete-event run whose per-request tables would not fit."""
    budget = memory_budget_bytes() if budget_bytes is None else budget_bytes
    need = (DES_BYTES_PER_REQUEST + FLUID_BYTES_PER_KEPT_CELL * n_designs) * float(n_requests)
    if need > budget:
        raise MemoryBudgetError(
            f"the discrete-event engine would need ~{_gb(need)} for {n_requests:,} requests (memory budget "
            f"{_gb(budget)}, {BUDGET_ENV}); {_shorter(duration_s, budget / need)}")


def _refusal(need: float, budget: float, servers: int, n_requests: int, duration_s: float | None) -> str:
    return (f"simulating a design of {servers:,} model replicas on {n_requests:,} requests needs ~{_gb(need)} "
            f"(replicas x requests x {FLUID_BYTES_PER_SERVER_REQUEST:g} bytes), over the memory budget of "
            f"{_gb(budget)} ({BUDGET_ENV}); {_shorter(duration_s, budget / need)}")


def _shorter(duration_s: float | None, fraction: float) -> str:
    fitting_s = None if duration_s is None else duration_s * fraction * 0.9
    if fitting_s is not None and fitting_s >= MIN_USEFUL_DURATION_S:
        return f"shorten duration_s to {fitting_s:.3g} s or lower rps (fewer requests and machines)"
    if fitting_s is not None:   # no trace short enough says anything: the design itself is too large
        return (f"the design is too large to simulate here: ask for fewer machines (a lower rps or budget, or "
                f"max_machines) or raise {BUDGET_ENV}")
    return "use a shorter trace or a lower rate"


def _gb(n_bytes: float) -> str:
    return f"{n_bytes / 1e9:,.1f} GB" if n_bytes >= 1e8 else f"{n_bytes / 1e6:,.0f} MB"
