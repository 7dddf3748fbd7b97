"""Simulator speed: the fluid engine on the whole Fig. 12 space, the DES on one design.

- `simulate(grid, trace, stop_infeasible=True)`: Splitwise-HH, prompt 1-40 x token 1-40
  machines (1,600 designs), BLOOM-176B, the 120-s 70-RPS coding trace (8,400 requests).
  The target is <= 2 s for the space.
- the engine kernel alone: `run_fluid(inputs, None, late_s, abort_after)` on prebuilt
  inputs (what `simulate` adds: building inputs, solo latencies, percentiles, the table).
- the same space without the early stop (every design to the end).
- the DES on Splitwise-HH 27+3.

Each timing is the median of `--repeat` runs after one warm-up run (numba compiles or
loads its cache on the first call; that first call is reported separately).

Usage:  python benchmarks/sim_speed.py [--repeat 3]
Writes  benchmarks/results/sim_speed.md (machine, CPU, date).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

from perfmodels import LatencyModel
from provisioner.designs import DesignBatch, grid, make_design
from provisioner.sim import simulate, solo_latencies
from provisioner.sim import build_inputs
from provisioner.slo import SLO
from workloads import make_workload

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fidelity import machine_info  # noqa: E402

MODEL = "bloom-176b"
RESULTS = Path(__file__).resolve().parent / "results" / "sim_speed.md"


def timed(fn, repeat, label=""):
    times, out = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    if label:
        print(f"  {label}: {np.median(times):.3f} s (median of {repeat})", flush=True)
    return float(np.median(times)), float(np.min(times)), out


def one_design_rows(trace, llm, perf, slo, repeat: int) -> list[tuple[str, float, float]]:
    """Timings of the 27P+3T design alone: the DES kernel, simulate with the DES, the fluid kernel."""
    from provisioner.sim.testing import run_des, run_fluid

    one = make_design("splitwise-hh", 27, 3)
    one_inputs = build_inputs(DesignBatch.from_designs([one]), trace, llm, perf)
    med_d, best_d, _ = timed(lambda: run_des(one_inputs), repeat, "DES 27+3")
    med_ds, best_ds, _ = timed(lambda: simulate([one], trace, MODEL, engine="des", perf=perf, slo=slo), repeat,
                               "simulate DES 27+3")
    med_f1, best_f1, _ = timed(lambda: run_fluid(one_inputs), repeat, "fluid 27+3")
    return [("DES kernel `run_des` on 27+3", med_d, best_d),
            ("`simulate([27+3], trace, engine='des')`", med_ds, best_ds),
            ("fluid kernel `run_fluid` on 27+3", med_f1, best_f1)]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    from provisioner.sim.testing import run_fluid   # noqa: import after argparse (numba)

    import numba
    threads = numba.get_num_threads()
    load_before = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    perf = LatencyModel()
    trace = make_workload("coding", 70, duration_s=120, seed=0)
    space = grid("splitwise-hh", range(1, 41), range(1, 41))
    slo = SLO()
    llm = perf.llm(MODEL)

    t0 = time.perf_counter()
    simulate(space, trace, MODEL, perf=perf, slo=slo, stop_infeasible=True)
    t_first = time.perf_counter() - t0
    print(f"  first call: {t_first:.2f} s", flush=True)
    rows = []

    med, best, table = timed(lambda: simulate(space, trace, MODEL, perf=perf, slo=slo, stop_infeasible=True),
                             args.repeat, "simulate, early stop")
    feasible = int(table["slo_met"].sum())
    stopped = int(table["stopped_early"].sum())
    rows.append(("`simulate(space, trace, stop_infeasible=True)`", med, best))

    inputs = build_inputs(DesignBatch.from_designs(space), trace, llm, perf)
    solo = np.stack(solo_latencies(trace, llm, perf, slo), axis=1)
    late_s = np.nan_to_num(solo * slo.limits()[:, -1], nan=np.inf)
    abort_after = int(np.ceil(0.01 * len(trace))) + 1
    med_k, best_k, _ = timed(lambda: run_fluid(inputs, None, late_s, abort_after), args.repeat, "kernel, early stop")
    rows.append(("kernel: `run_fluid(inputs, None, late_s, abort_after)`", med_k, best_k))
    med_b, best_b, _ = timed(lambda: build_inputs(DesignBatch.from_designs(space), trace, llm, perf), args.repeat, "build_inputs")
    rows.append(("`build_inputs` (1,600 designs)", med_b, best_b))

    med_full, best_full, full = timed(lambda: simulate(space, trace, MODEL, perf=perf, slo=slo), 1, "simulate, full")
    rows.append(("`simulate(space, trace)` without early stop (1 run)", med_full, best_full))
    med_kf, best_kf, _ = timed(lambda: run_fluid(inputs), 1, "kernel, full")
    rows.append(("kernel without early stop: `run_fluid(inputs)` (1 run)", med_kf, best_kf))
    agree = bool((full["slo_met"].to_numpy() == table["slo_met"].to_numpy()).all())

    rows += one_design_rows(trace, llm, perf, slo, args.repeat)

    info = machine_info()
    lines = [
        "# Simulator speed",
        "",
        f"Generated by `python benchmarks/sim_speed.py --repeat {args.repeat}` on {info['date']}; "
        f"commit {info['commit']} plus the working tree.",
        f"Machine: {info['nproc']} CPUs (`nproc`), {info['cpu']}, Python {info['python']}, "
        f"numba {numba.__version__} with {threads} threads; load average before / after "
        f"{load_before} / {info['loadavg']} (1, 5, 15 min; other jobs may share the CPUs).",
        "",
        f"Workload: BLOOM-176B, coding, 70 RPS, 120 s, seed 0 ({len(trace)} requests). Design space: "
        f"Splitwise-HH, prompt 1-40 x token 1-40 ({len(space)} designs, Fig. 12). "
        f"{feasible} designs meet the SLOs; {stopped} stop early with `stop_infeasible=True`; "
        f"verdicts with and without the early stop {'agree on every design' if agree else 'DIFFER'}.",
        "",
        "| what | median (s) | best (s) |",
        "|---|---|---|",
        *[f"| {name} | {m:.3f} | {b:.3f} |" for name, m, b in rows],
        "",
        f"First call in a fresh process (numba cache load or compile + run): {t_first:.2f} s.",
        "",
        f"Target: <= 2 s for the space with `simulate(..., stop_infeasible=True)`: "
        f"**{'met' if med <= 2.0 else 'not met'}** ({med:.2f} s median).",
        "",
    ]
    text = "\n".join(lines)
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
