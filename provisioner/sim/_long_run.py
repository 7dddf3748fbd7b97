"""One notice on stderr before a long discrete-event run: roughly how long, and that Ctrl-C
stops it (the DES is pure Python, ~10^4 requests per second; a day of traffic takes minutes).

The estimate is the work at rates measured on a 2-core machine, rounded up: 50-120 us per
request under least-work (an iteration costs O(prefills + finishers), little beside),
80-750 us under an on-demand scheduler (placement over every machine, migrations), and
100-300 ns per generated token (long outputs). Short runs, and worker processes (their
parent says it once for all its tasks), print nothing; stdout never.
"""

from __future__ import annotations

import multiprocessing
import sys

DES_S_PER_REQUEST = 1e-4
DES_ON_DEMAND_S_PER_REQUEST = 5e-4
DES_S_PER_OUTPUT_TOKEN = 1.5e-7
LONG_DES_S = 30.0   # below it, no notice: the run is over before one is read
_said = False       # once per process: a search or a bisection runs the DES again and again


def des_seconds(n_requests: int, output_tokens: int, on_demand: bool = False) -> float:
    """Rough wall time of one design's discrete-event run over a trace, s."""
    per_request = DES_ON_DEMAND_S_PER_REQUEST if on_demand else DES_S_PER_REQUEST
    return n_requests * per_request + output_tokens * DES_S_PER_OUTPUT_TOKEN


def announce_long_des(estimate_s: float, n_requests: int, runs: int = 1) -> None:
    """Say once on stderr, from the main process, that a DES run of ~`estimate_s` lies ahead."""
    global _said
    if _said or estimate_s < LONG_DES_S or multiprocessing.parent_process() is not None:
        return
    _said = True
    what = f"{n_requests:,} requests" + (f" x {runs} runs" if runs > 1 else "")
    print(f"the discrete-event engine has {what} to simulate: roughly {_duration(estimate_s)}; Ctrl-C stops it",
          file=sys.stderr, flush=True)


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
