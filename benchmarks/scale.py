"""Scale: long traces, a 2,000-machine design, and a sweep on 1 core vs 2 (issue #15).

1. Fluid simulation time vs trace length: Splitwise-HH 27P + 3T (Splitwise Fig. 12's
   answer) on the coding workload at 70 req/s, traces of 10^4 .. 10^6 requests (10^6 at
   70 req/s is ~4 hours; a day at ~12 req/s), one `simulate` call each. Time is the
   engine call (inputs, kernel, percentiles); the trace draw is timed apart. Linear
   growth means a constant time per request.
2. Peak memory (max RSS of the process) of each of those runs, each in its own process.
3. A 2,000-machine design (Splitwise-HH 1,800P + 200T) at 4,667 req/s (the 27P+3T load
   scaled by 2000/30) on a 10^5-request trace.
4. A 24-question sweep (`provision sweep`, 6 rates x 2 price lists x 2 seeds, every
   family, 120-s traces, no DES) on one core (`taskset -c 0`, `--jobs 1`, one numba
   thread) vs two (`--jobs 2`: two worker processes, one numba thread each).

Usage:  python benchmarks/scale.py [--max-requests 1000000] [--skip-sweep]
Writes  benchmarks/results/scale.md (machine, date, every number).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fidelity import machine_info  # noqa: E402

from provisioner.designs import FAMILIES  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "scale.md"
SIZES = (10_000, 30_000, 100_000, 300_000, 1_000_000)
RPS = 70.0
SWEEP_SPEC = """\
goals = ["cost"]
rps = [10, 20, 30, 40, 50, 60]
seeds = [0, 1]
duration_s = 120
verify = false

[price_lists]
catalog = {}
spot = { dgx-h100 = 20.0, dgx-a100 = 9.0 }
"""


def child(kind: str, n_requests: int) -> dict:
    """One measurement in this (fresh) process: times and the peak RSS."""
    from provisioner.designs import make_design
    from provisioner.sim import simulate
    from workloads import make_workload

    if kind == "sim":
        design, rps = make_design("splitwise-hh", 27, 3), RPS
    else:   # "big": 2,000 machines at the proportionally scaled load
        design, rps = make_design("splitwise-hh", 1800, 200), RPS * 2000 / 30
    warm = make_workload("coding", rps=rps, duration_s=2000 / rps, seed=0)
    simulate(design, warm, "bloom-176b")            # numba loads its cache; not timed
    t0 = time.perf_counter()
    trace = make_workload("coding", rps=rps, duration_s=n_requests / rps, seed=0)
    t1 = time.perf_counter()
    row = simulate(design, trace, "bloom-176b").iloc[0]
    t2 = time.perf_counter()
    peak_bytes = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {"kind": kind, "requests": len(trace), "machines": int(design.prompt_machines + design.token_machines),
            "rps": rps, "trace_s": t1 - t0, "simulate_s": t2 - t1, "peak_rss_bytes": peak_bytes,
            "throughput_rps": float(row["throughput_rps"]), "slo_met": bool(row["slo_met"])}


def measure(kind: str, n_requests: int) -> dict:
    proc = subprocess.run([sys.executable, __file__, "--child", kind, str(n_requests)], capture_output=True,
                          text=True, timeout=3600)
    if proc.returncode != 0:
        return {"kind": kind, "requests": n_requests, "error": proc.stderr.strip().splitlines()[-1:]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def sweep_time(folder: Path, *, cores: int) -> float:
    """Wall time of the 24-question sweep on `cores` cores (1: pinned to core 0)."""
    spec = folder / "spec.toml"
    spec.write_text(SWEEP_SPEC)
    out = folder / f"out-{cores}"
    provision = str(Path(sys.executable).with_name("provision"))
    env = dict(os.environ)
    cmd = [provision, "sweep", str(spec), "--out", str(out), "--jobs", str(cores)]
    if cores == 1:
        cmd = ["taskset", "-c", "0", *cmd]
        env["NUMBA_NUM_THREADS"] = "1"
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=3600)
    elapsed = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"sweep failed: {proc.stderr}")
    return elapsed


def report(rows: list[dict], big: dict, sweep: dict | None, info: dict) -> str:
    lines = ["# Scale (benchmarks/scale.py)", "",
             f"Machine: {info['nproc']} cores, {info['cpu']}, Python {info['python']}; load average "
             f"{info['loadavg']} at start; {info['date']}; commit {info['commit']}.", "",
             "## Fluid simulation time vs trace length", "",
             f"Splitwise-HH 27P+3T, BLOOM-176B, coding at {RPS:g} req/s; one `simulate` call per trace, each in "
             "its own process (peak RSS is that process's).", "",
             "| requests | trace draw (s) | simulate (s) | us per request | peak RSS (GB) |", "|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['requests']:,} | failed: {' '.join(r['error'])} | | | |")
            continue
        lines.append(f"| {r['requests']:,} | {r['trace_s']:.2f} | {r['simulate_s']:.2f} | "
                     f"{1e6 * r['simulate_s'] / r['requests']:.1f} | {r['peak_rss_bytes'] / 1e9:.2f} |")
    ok = [r for r in rows if "error" not in r]
    if len(ok) >= 3:
        import numpy as np
        n = np.array([r["requests"] for r in ok], float)
        t = np.array([r["simulate_s"] for r in ok])
        per_request_s, fixed_s = np.polyfit(n, t, 1)
        worst = float(np.max(np.abs(fixed_s + per_request_s * n - t) / t))
        lines += ["", f"Least-squares line: {fixed_s:.3f} s + {1e6 * per_request_s:.2f} us x requests; the "
                      f"largest relative deviation of a measured time from it is {worst:.0%} (a fixed cost "
                      "dominates the smallest traces, then time grows linearly)."]
    lines += ["", "## 2,000 machines", ""]
    if "error" in big:
        lines.append(f"Failed: {' '.join(big['error'])}")
    else:
        lines.append(f"Splitwise-HH 1,800P + 200T at {big['rps']:.0f} req/s, {big['requests']:,} requests: "
                     f"simulate {big['simulate_s']:.2f} s, peak RSS {big['peak_rss_bytes'] / 1e9:.2f} GB, "
                     f"SLO met: {big['slo_met']}.")
    if sweep is not None:
        lines += ["", "## 24-question sweep, 1 core vs 2", "",
                  f"`provision sweep` (6 rates x 2 price lists x 2 seeds; all {len(FAMILIES)} families; 120-s traces; no DES). "
                  "Load average (1 min) before each run: "
                  f"{sweep['load_one']:.1f} and {sweep['load_two']:.1f} (other processes share the cores).",
                  "", f"- 1 core (`taskset -c 0`, `--jobs 1`, NUMBA_NUM_THREADS=1): {sweep['one_s']:.1f} s",
                  f"- 2 cores (`--jobs 2`, one numba thread per worker): {sweep['two_s']:.1f} s",
                  f"- speed-up: {sweep['one_s'] / sweep['two_s']:.2f}x (target 1.7x)"]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", nargs=2, metavar=("KIND", "REQUESTS"), help=argparse.SUPPRESS)
    parser.add_argument("--max-requests", type=int, default=SIZES[-1])
    parser.add_argument("--skip-sweep", action="store_true")
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child[0], int(args.child[1]))))
        return
    info = machine_info()
    rows = []
    for n in (s for s in SIZES if s <= args.max_requests):
        rows.append(measure("sim", n))
        print(rows[-1], flush=True)
    big = measure("big", 100_000)
    print(big, flush=True)
    sweep = None
    if not args.skip_sweep:
        folder = Path(tempfile.mkdtemp(prefix="scale-sweep-"))
        try:
            sweep = {"load_one": os.getloadavg()[0], "one_s": sweep_time(folder, cores=1),
                     "load_two": os.getloadavg()[0], "two_s": sweep_time(folder, cores=2)}
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        print(sweep, flush=True)
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(report(rows, big, sweep, info))
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
