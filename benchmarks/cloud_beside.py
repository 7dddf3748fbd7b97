"""`provision cloud`'s answer time with its independent work beside the plan, and without.

`plan_cloud` runs the chunked non-split comparison (its own search and bisections) in a
worker process beside its own work (`provisioner.workers.beside`; `--goal cost` checked
its cheaper rentals two at a time so until 2026-12-02, when the rentals came to share their
rates, which a worker cannot read: they now run in this process). This benchmark times the whole `plan_cloud`
call (wall, the interpreter's start aside) and its `elapsed_s` (search and DES re-scoring
of the split plan) both ways, alternating runs so that both see the machine alike: beside
(the default) and one after the other in this process (`beside(..., parallel=False)`, the
code path of a one-core machine), on thunderserve-32gpu at 4 req/s and on cloud-prices
with `--goal cost` at 4 req/s (llama-30b, 120-s Poisson traces, seed 0, the CLI's
defaults). The answers are the same either way (tests/test_cloud_chunked.py,
tests/test_cloud.py); the table gives the fastest and slowest of the runs.

    python benchmarks/cloud_beside.py [--runs N]   # writes benchmarks/results/cloud_beside.md
"""

from __future__ import annotations

import argparse
import time
from unittest import mock

from cloud import _machine, write_results
from perfmodels import LatencyModel
from provisioner.cloud import load_inventory, plan_cloud
from provisioner.workers import beside
from workloads import TraceGenerator

QUESTIONS = (("thunderserve-32gpu", "rps", "coding"), ("thunderserve-32gpu", "rps", "conversation"),
             ("cloud-prices", "cost", "coding"))
RPS = 4.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=3, help="runs of each question each way")
    runs = ap.parse_args().runs
    machine = _machine()
    perf = LatencyModel()
    rows = []
    for inventory, goal, workload in QUESTIONS:
        inv = load_inventory(inventory, perf.catalog)
        times: dict = {True: [], False: []}
        for _ in range(runs):
            for parallel in (True, False):
                times[parallel].append(_timed(inv, perf, goal, workload, parallel))
        cells = [_span(times[p], k) for p in (True, False) for k in (0, 1)]
        rows.append(f"| {inventory} | {goal} | {workload} | " + " | ".join(cells) + " |")
        print(rows[-1], flush=True)
    write_results("cloud_beside", "provision cloud's answer time, work beside the plan or after it", machine,
                  __doc__, ["inventory", "goal", "workload", "beside: total s", "beside: elapsed_s",
                            "after: total s", "after: elapsed_s"], rows)


def _timed(inv, perf, goal, workload, parallel) -> tuple[float, float]:
    """(wall s of the whole plan_cloud call, its elapsed_s), with `beside` in a worker or not."""
    here = beside if parallel else (lambda fn, *args, parallel=True: beside(fn, *args, parallel=False))
    traces = TraceGenerator(workload, 120.0, 0, arrival="poisson", rps=RPS)
    with mock.patch("provisioner.cloud._answer.beside", here):
        t0 = time.perf_counter()
        out = plan_cloud(inv, perf.llm("llama-30b"), perf, traces, goal=goal, rps=RPS)
        return time.perf_counter() - t0, out["elapsed_s"]


def _span(pairs, k) -> str:
    values = sorted(p[k] for p in pairs)
    return f"{values[0]:.1f}-{values[-1]:.1f}" if len(values) > 1 else f"{values[0]:.1f}"


if __name__ == "__main__":
    main()
