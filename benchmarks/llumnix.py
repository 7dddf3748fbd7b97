"""Llumnix's scheduler (freeness dispatch + live migration) next to dispatch-time load
balancing, in the discrete-event engine, and what it is worth in machines.

1. Fixed cluster, memory-bound load: `baseline-h100` (bloom-176b: ~56k KV tokens per
   DGX-H100, whose compute outruns its memory sooner than an A100's), the conversation
   workload at 20 req/s on 7 and 8 machines, where dispatch-time balancing preempts.
   Poisson and gamma (cv 2) arrivals, seeds 0-2, 120-s traces. Policies: jsq (on-demand
   KV with vLLM preemption, least-work dispatch),
   llumnix-dispatch (INFaaS++-like: on-demand KV, dispatch by freeness, no migration) and
   llumnix (freeness + migration), jsq-migration (least work + migration). Ratios are
   baseline / with migration (> 1: migration better), as Llumnix reports them.
2. Downtime of one migration against recomputing the request, at 1k-8k tokens of context,
   from the same KV-transfer and iteration models the engine uses.
3. Machines: `provision --goal cost --rps 20 --workload conversation --design F` for
   baseline-a100 and baseline-h100 under each scheduler (the DES decides for the
   on-demand ones; no re-check).

Usage:  python benchmarks/llumnix.py [--seeds 0,1,2] [--duration 120] [--timeline PATH.html]
Writes  benchmarks/results/llumnix.md (and the timeline page if asked)
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fidelity import machine_info  # noqa: E402

from perfmodels import LatencyModel  # noqa: E402
from provisioner.designs import DesignBatch, make_design  # noqa: E402
from provisioner.search import ProvisionRequest, provision  # noqa: E402
from provisioner.sim import build_inputs, simulate_requests  # noqa: E402
from provisioner.sim.testing import des_iteration_s  # noqa: E402
from workloads import TraceGenerator  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "llumnix.md"
MODEL, FAMILY, WORKLOAD, RPS = "bloom-176b", "baseline-h100", "conversation", 20.0
CLUSTERS = (7, 8)
ARRIVALS = (("poisson", None), ("gamma", 2.0))
POLICIES = ("jsq", "llumnix-dispatch", "llumnix", "jsq-migration")
# (baseline, with migration): each pair differs by migration alone.
PAIRS = (("jsq", "llumnix"), ("llumnix-dispatch", "llumnix"), ("jsq", "jsq-migration"))
# Llumnix (OSDI'24) vs INFaaS++, "up to": mean / P99 TTFT, P99 TBT, preemption loss, fragmentation.
PAPER = {"ttft_mean": "2.2x", "ttft_p99": "5.5x", "tbt_p99": "1.3x", "preemptions": "70% less loss",
         "fragmentation": "92% less"}


def run_policy(policy: str, machines: int, arrival: str, cv, seed: int, duration_s: float, perf) -> dict:
    trace = TraceGenerator(WORKLOAD, duration_s, seed, arrival=arrival, cv=cv or 2.0).at(RPS)
    design = make_design(FAMILY, machines=machines, scheduler=policy)
    _, _, out = simulate_requests(design, trace, MODEL, engine="des", perf=perf)
    ttft = out.first_token_s[0] - trace.arrival_s
    extra = trace.output_tokens - 1.0
    keep = extra > 0
    tbt = (out.finish_s[0][keep] - out.first_token_s[0][keep]) / extra[keep]
    pre, mig, down, frag, recomputed = out.scheduler_stats[0]
    return {"ttft_mean": ttft.mean(), "ttft_p99": np.percentile(ttft, 99), "tbt_p99": np.percentile(tbt, 99),
            "preemptions": pre, "recomputed": recomputed, "fragmentation": frag, "migrations": mig,
            "downtime_ms": 1e3 * down / max(mig, 1), "timeline": out.timelines[0]}


def cluster_table(seeds, duration_s, perf) -> tuple[list[str], dict]:
    lines, timelines = [], {}
    for machines in CLUSTERS:
        for arrival, cv in ARRIVALS:
            runs = {p: [run_policy(p, machines, arrival, cv, s, duration_s, perf) for s in seeds] for p in POLICIES}
            if machines == CLUSTERS[-1] and arrival == "poisson":
                timelines = {p: runs[p][0]["timeline"] for p in POLICIES}
            mean = {p: {k: float(np.mean([r[k] for r in rs])) for k in rs[0] if k != "timeline"}
                    for p, rs in runs.items()}
            lines += [f"### {machines} machines, {arrival}" + (f" (cv {cv:g})" if cv else ""), "",
                      "| policy | TTFT mean (s) | TTFT p99 (s) | TBT p99 (ms) | preemptions | tokens recomputed | "
                      "fragmentation (% KV) | migrations | downtime / migration (ms) |",
                      "|---|---|---|---|---|---|---|---|---|"]
            for p, m in mean.items():
                lines.append(f"| {p} | {m['ttft_mean']:.2f} | {m['ttft_p99']:.2f} | {1e3 * m['tbt_p99']:.0f} | "
                             f"{m['preemptions']:.1f} | {m['recomputed']:,.0f} | {100 * m['fragmentation']:.2f} | "
                             f"{m['migrations']:.1f} | {m['downtime_ms']:.1f} |")
            lines += ["", "| ratio (baseline / with migration) | TTFT mean | TTFT p99 | TBT p99 | preemptions | "
                          "fragmentation |", "|---|---|---|---|---|---|"]
            for base, mig in PAIRS:
                cells = [_ratio(mean[base][k], mean[mig][k])
                         for k in ("ttft_mean", "ttft_p99", "tbt_p99", "preemptions", "fragmentation")]
                lines.append(f"| {base} / {mig} | " + " | ".join(cells) + " |")
            lines.append("| Llumnix paper (vs INFaaS++) | " + " | ".join(PAPER.values()) + " |")
            lines.append("")
    return lines, timelines


def _ratio(a: float, b: float) -> str:
    if b == 0:
        return "-" if a == 0 else "inf"
    return f"{a / b:.2f}x"


def downtime_table(perf) -> list[str]:
    """One migration's downtime (the engine's stage rule) against recomputing the request."""
    llm = perf.llm(MODEL)
    inputs = build_inputs(DesignBatch.from_designs([make_design(FAMILY, machines=2, scheduler="llumnix")]),
                          TraceGenerator(WORKLOAD, 5, 0).at(1.0), llm, perf)
    coef = inputs.coef[0, 0]
    spt, setup = float(inputs.kv_s_per_token[0]), float(inputs.kv_setup_s[0])
    lines = ["| context (tokens) | decode step (ms, batch 8) | stages | copy (ms) | downtime (ms) | downtime "
             "(steps) | recompute (ms) | recompute (steps) |", "|---|---|---|---|---|---|---|---|"]
    for ctx in (1024, 2048, 4096, 8192):
        step = des_iteration_s(coef, 0, 0, 0, 8, 8 * ctx)
        stages, copy_total, tokens, t = 0, 0.0, ctx, 0.0
        while True:
            copy = setup + tokens * spt
            stages += 1
            if tokens <= 1 or stages >= 8:
                break
            copy_total += copy
            tokens = max(1, int(np.ceil(copy / step)))   # iterations (tokens) until the stage is seen done
        recompute = des_iteration_s(coef, ctx, ctx * ctx, 1, 7, 7 * ctx)
        lines.append(f"| {ctx} | {1e3 * step:.1f} | {stages} | {1e3 * copy_total:.1f} | {1e3 * copy:.2f} | "
                     f"{copy / step:.2f} | {1e3 * recompute:.0f} | {recompute / step:.1f} |")
    return lines


def machines_table(perf) -> list[str]:
    lines = ["| family | scheduler | machines | $/h | binding SLO | search time (s) |", "|---|---|---|---|---|---|"]
    for family in ("baseline-a100", FAMILY):
        for policy in ("least-work", *POLICIES):
            t0 = time.perf_counter()
            req = ProvisionRequest(goal="cost", rps=RPS, workload=WORKLOAD, model=MODEL, families=(family,),
                                   verify=False, scheduler=policy)
            fr = provision(req, perf=perf).families[0]
            if fr.feasible:
                r = fr.row
                lines.append(f"| {family} | {policy} | {int(r['prompt_machines'])} | {r['cost_usd_per_h']:,.0f} | "
                             f"{r['binding_slo']} | {time.perf_counter() - t0:.0f} |")
            else:
                lines.append(f"| {family} | {policy} | none | - | - | {time.perf_counter() - t0:.0f} |")
    return lines


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--duration", type=float, default=120.0)
    ap.add_argument("--timeline", default=None, help="write the timeline page (HTML) here")
    args = ap.parse_args(argv)
    seeds = tuple(int(s) for s in args.seeds.split(","))
    perf = LatencyModel()
    info = machine_info()
    t0 = time.perf_counter()
    clusters, timelines = cluster_table(seeds, args.duration, perf)
    lines = ["# Llumnix's scheduler in the discrete-event engine", "",
             f"{info['date']}, commit {info['commit']}, {info['nproc']} x {info['cpu']}, Python {info['python']}, "
             f"load {info['loadavg']}. `python benchmarks/llumnix.py --seeds {args.seeds} --duration "
             f"{args.duration:g}`.", "",
             f"{MODEL} on `{FAMILY}` (KV per machine: HBM after the weights), {WORKLOAD} workload at {RPS:g} "
             f"req/s, {args.duration:g}-s traces, means over seeds {args.seeds}.", "",
             "## Latency, preemption and fragmentation", "", *clusters,
             "## One migration against recomputation (DGX-H100 pair, the engine's stage rule)", "",
             *downtime_table(perf), "",
             "## Machines for the SLOs (`provision --goal cost`, no DES re-check)", "", *machines_table(perf), "",
             f"Total {time.perf_counter() - t0:.0f} s."]
    RESULTS.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))
    if args.timeline:
        from reports import build_scheduler_html
        Path(args.timeline).write_text(build_scheduler_html(
            timelines, title="Scheduler timeline", lead=f"{MODEL}, {FAMILY} x {CLUSTERS[-1]}, {WORKLOAD} at "
                                                         f"{RPS:g} req/s, seed {seeds[0]}"), encoding="utf-8")


if __name__ == "__main__":
    main()
