"""`provision cloud --goal cost`'s answer time, where it goes, and the plain rate's and throughput's beside it.

`--goal cost` on cloud-prices (coding and conversation at 4 req/s) checks a dozen rentals, each a shorter tabu search and simulations of its finalists, then plans the one it rents; `--rps 4` and `--goal throughput` on thunderserve-32gpu plan one inventory. For each question: the wall time of the whole `plan_cloud` call as the CLI runs it (its independent work in a worker beside it), and the CPU time of the same work in one process (`beside(..., parallel=False)`, a one-core machine's path; on a shared machine the wall time follows the CPU time), split into the tabu searches (`finalist_plans`) and the simulations (`simulate_plan`). With `--before PATH` (a checkout of an earlier commit) each run alternates between that code and this checkout's, each in its own process, so that both see the machine alike, and the answers are compared (the JSON but `elapsed_s`: equal, or the row says so). llama-30b, 120-s Poisson traces, seed 0, the CLI's defaults (16-bit KV; `--kv-bits 4`: the two `--goal cost` questions with 4-bit KV on the wire, whose searches run a 16-bit search beside each compressed one); the table gives the fastest and slowest of the runs.

    python benchmarks/cloud_cost_speed.py [--runs 2] [--before PATH]   # writes results/cloud_cost_speed.md
    python benchmarks/cloud_cost_speed.py --kv-bits 4 [...]            # writes results/cloud_cost_speed_kv4.md
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from unittest import mock

QUESTIONS = (("cloud-prices", "cost", "coding"), ("cloud-prices", "cost", "conversation"),
             ("thunderserve-32gpu", "rps", "coding"), ("thunderserve-32gpu", "throughput", "coding"))
RPS = 4.0
HERE = Path(__file__).resolve()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=2, help="runs of each question each way")
    ap.add_argument("--before", help="a checkout of the code to compare with (its repository root)")
    ap.add_argument("--kv-bits", type=int, default=16, choices=(16, 8, 4),
                    help="KV bits on the wire (below 16: the --goal cost questions only)")
    ap.add_argument("--one", nargs=3, metavar=("INVENTORY", "GOAL", "WORKLOAD"), help=argparse.SUPPRESS)
    ap.add_argument("--one-process", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(_measure(*args.one, one_process=args.one_process, kv_bits=args.kv_bits)))
        return
    from cloud import _machine, write_results

    machine = _machine()
    trees = ([("before", Path(args.before).resolve())] if args.before else []) + [("this", HERE.parents[1])]
    labels = {name: _commit(tree) for name, tree in trees}
    rows = []
    questions = QUESTIONS if args.kv_bits == 16 else [q for q in QUESTIONS if q[1] == "cost"]
    for question in questions:
        runs: dict = {name: [] for name, _ in trees}
        for _ in range(args.runs):
            for name, tree in trees:
                wall = _child(tree, question, one_process=False, kv_bits=args.kv_bits)
                cpu = _child(tree, question, one_process=True, kv_bits=args.kv_bits)
                runs[name].append((wall["wall_s"], cpu["cpu_s"], cpu["search_cpu_s"], cpu["des_cpu_s"],
                                   wall["answer"], cpu["answer"]))
        answers = {a for r in runs.values() for run in r for a in run[4:]}
        for name, _ in trees:
            r = runs[name]
            asked = " ".join(question) + ("" if args.kv_bits == 16 else f" kv{args.kv_bits}")
            rows.append(f"| {asked} | {labels[name]} | " + " | ".join(_span([x[k] for x in r]) for k in range(4))
                        + f" | {'identical' if len(answers) == 1 else 'DIFFERENT: ' + ', '.join(sorted(answers))} |")
            print(rows[-1], flush=True)
    write_results("cloud_cost_speed", "provision cloud --goal cost's answer time, and where it goes", machine,
                  __doc__, ["question", "code", "wall s (CLI)", "CPU s (one process)", "of it: searches",
                            "of it: simulations", "answers"], rows,
                  name="cloud_cost_speed" + ("" if args.kv_bits == 16 else f"_kv{args.kv_bits}"))


def _commit(tree: Path) -> str:
    out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=tree,
                         check=False).stdout.strip()
    return out or tree.name


def _child(tree: Path, question, one_process: bool, kv_bits: int) -> dict:
    """`_measure` of `question` in a process of its own running the code of `tree`."""
    cmd = ([sys.executable, str(HERE), "--one", *question, "--kv-bits", str(kv_bits)]
           + (["--one-process"] if one_process else []))
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def _measure(inventory, goal, workload, one_process, kv_bits=16) -> dict:
    """Wall s of the whole `plan_cloud` call, or (one_process) its CPU s with the searches'
    and the simulations' CPU s, and a digest of the answer (its JSON but `elapsed_s`)."""
    from perfmodels import LatencyModel
    from provisioner.cloud import finalist_plans, load_inventory, plan_cloud, simulate_plan
    from provisioner.workers import beside
    from workloads import TraceGenerator

    perf = LatencyModel()
    inv = load_inventory(inventory, perf.catalog)
    traces = TraceGenerator(workload, 120.0, 0, arrival="poisson", rps=RPS)
    spent = {"search": 0.0, "des": 0.0}

    depth = {"search": 0, "des": 0}

    def timed(fn, stage):
        def run(*args, **kwargs):   # the outermost call only: under --kv-bits 4 a search runs a 16-bit one inside
            depth[stage] += 1
            t0 = time.process_time()
            try:
                return fn(*args, **kwargs)
            finally:
                depth[stage] -= 1
                if depth[stage] == 0:
                    spent[stage] += time.process_time() - t0
        return run

    where = "provisioner.cloud._answer."   # the names plan_cloud calls them by
    patches = [mock.patch(where + "finalist_plans", timed(finalist_plans, "search")),
               mock.patch(where + "simulate_plan", timed(simulate_plan, "des"))]
    if one_process:
        patches.append(mock.patch(where + "beside", lambda fn, *a, parallel=True: beside(fn, *a, parallel=False)))
    for p in patches:
        p.start()
    t0, c0 = time.perf_counter(), time.process_time()
    out = plan_cloud(inv, perf.llm("llama-30b"), perf, traces, goal=goal, rps=None if goal == "throughput" else RPS,
                     kv_bits=kv_bits)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    out.pop("elapsed_s")
    digest = hashlib.sha1(json.dumps(out, sort_keys=True, default=str).encode()).hexdigest()[:10]
    return {"wall_s": wall, "cpu_s": cpu, "search_cpu_s": spent["search"], "des_cpu_s": spent["des"],
            "answer": digest}


def _span(values) -> str:
    values = sorted(values)
    return f"{values[0]:.1f}-{values[-1]:.1f}" if len(values) > 1 else f"{values[0]:.1f}"


if __name__ == "__main__":
    main()
