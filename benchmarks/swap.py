"""Preemption by recompute against swap (vLLM's two modes) where dispatch-time balancing
preempts: benchmarks/llumnix.py's memory-bound setting (baseline-h100, BLOOM-176B, the
conversation workload at 20 req/s on 7 and 8 machines, Poisson, 120-s traces).

For each scheduler (jsq, llumnix) and mode: P99 TTFT and TBT (mean over seeds),
preemptions, what a preemption costs (recompute: prompt + emitted tokens prefilled again;
swap: bytes over the host link, out and back in, and the seconds those copies add to
iterations: bytes / (TP x PCIe per direction)), and the SLO verdicts.

Usage:  python benchmarks/swap.py [--seeds 0,1,2] [--duration 120]
Writes  benchmarks/results/swap.md (machine, date, commit).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import os
import platform
import subprocess
from pathlib import Path

import numpy as np

from perfmodels import LatencyModel
from provisioner.designs import make_design
from provisioner.schedulers import DEFAULT_SWAP_SPACE_GB
from provisioner.sim import simulate
from workloads import TraceGenerator

FAMILY, MODEL, WORKLOAD, RPS = "baseline-h100", "bloom-176b", "conversation", 20.0
CLUSTERS = (7, 8)
POLICIES = ("jsq", "llumnix")
OUT = Path(__file__).parent / "results" / "swap.md"


def one(policy: str, machines: int, mode: str, seed: int, duration_s: float, perf) -> dict:
    trace = TraceGenerator(WORKLOAD, duration_s, seed).at(RPS)
    row = simulate(make_design(FAMILY, machines=machines, scheduler=policy), trace, MODEL, engine="des", perf=perf,
                   preemption=mode).iloc[0]
    machine = perf.catalog.machine(make_design(FAMILY, machines=1).prompt_machine)
    link_bytes_per_s = machine.gpus_per_machine * machine.host_link_gb_per_s_per_gpu * 1e9   # TP 8: all its GPUs
    swapped = float(row.get("swapped_bytes", 0.0))
    return {"ttft": row["ttft_p99_s"], "tbt": row["tbt_p99_s"], "preemptions": row["preemptions"],
            "recomputed": row["recomputed_tokens"], "swaps": float(row.get("swaps", 0.0)), "gb": swapped / 1e9,
            "copy_s": swapped / link_bytes_per_s, "met": bool(row["slo_met"])}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--duration", type=float, default=120.0)
    args = ap.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    perf = LatencyModel()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    lines = ["# Preemption by recompute vs swap (benchmarks/swap.py)", "",
             f"Machine: {os.cpu_count()} cores, {platform.processor() or platform.machine()}, Python "
             f"{platform.python_version()}; {_dt.datetime.now(_dt.timezone.utc):%Y-%m-%d %H:%M} UTC; commit {commit}.",
             "", f"{FAMILY} x N, {MODEL}, {WORKLOAD} at {RPS:g} req/s, Poisson, {args.duration:g}-s traces, seeds "
             f"{args.seeds} (means over seeds; SLOs: seeds meeting all nine). Swap: DGX-H100, 8 x PCIe Gen5 at "
             f"64 GB/s per direction; swap space {DEFAULT_SWAP_SPACE_GB:g} GiB per GPU (vLLM's --swap-space "
             f"default; 32 GiB per TP-8 replica), capped by the machine's 2 TB of DRAM.", "",
             "| machines | scheduler | preemption | TTFT p99 (s) | TBT p99 (ms) | preemptions | tokens recomputed | "
             "swaps | GB over PCIe | copy time (s) | SLOs met |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for machines in CLUSTERS:
        for policy in POLICIES:
            for mode in ("recompute", "swap"):
                runs = [one(policy, machines, mode, s, args.duration, perf) for s in seeds]
                m = {k: float(np.mean([r[k] for r in runs])) for k in runs[0] if k != "met"}
                lines.append(f"| {machines} | {policy} | {mode} | {m['ttft']:.2f} | {1e3 * m['tbt']:.0f} | "
                             f"{m['preemptions']:.1f} | {m['recomputed']:,.0f} | {m['swaps']:.1f} | {m['gb']:.1f} | "
                             f"{m['copy_s']:.2f} | {sum(r['met'] for r in runs)}/{len(runs)} |")
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
