"""Cloud plan times (issue 13): tabu search on 16, 24, 32 and 64 GPUs of ThunderServe's
node types (llama-30b), and the split / non-split throughput ratios at 32 GPUs, non-split
with whole prompts (HexGen) and with chunked prefill (the best of the chunked baseline
families' budgets, vLLM's scheduler).

    python benchmarks/cloud.py [--engine des|fluid]   # writes benchmarks/results/cloud.md

`--engine` simulates the equal-attainment bisections (default des, the reference for the
README's ratios; fluid: the same split rates and non-split rates within 2% on these plans,
in under a tenth of the simulation time, benchmarks/results/fidelity.md).
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import os
import platform
import subprocess
import time
from pathlib import Path

from perfmodels import LatencyModel
from provisioner.cloud import (DEFAULT_SLO_SCALE, FINALISTS, TARGET_ATTAINMENT, best_by_des, best_of_budgets, canon,
                               chunked_non_split_by_budget, finalist_plans, initial_plan, load_inventory, make_context,
                               plan_cloud, plan_routing, replan_event, score, search_plan, simulate_plan, size_sample,
                               sustained_rps, symmetry_key)
from provisioner.designs import CHUNK_TOKEN_CHOICES
from workloads import TraceGenerator

# (a6000-4x, a5000-4x, a40-8x, rtx3090ti-4x) nodes per size
# The equal-attainment rates are bisected on 600-s traces: at 2-4 req/s a 120-s trace holds
# 250-500 requests, so 99% attainment would rest on the fate of 2-5 of them.
ATTAINMENT_TRACE_S = 600.0
SIZES = {16: (1, 1, 0, 2), 24: (1, 1, 1, 1), 32: (2, 2, 1, 2), 64: (4, 4, 2, 4)}
# which SLO binds: attainment per metric just past each plan's sustained rate
PAST_SUSTAINED = 1.1
SLOW_NETWORK_GBPS = 5.0   # ThunderServe's slowest measured inter-node Ethernet
SPLIT_INSIDE = (("a40",), ("a6000",), ("a40", "a6000"))   # GPU types whose nodes hold two llama-30b replicas
OTHER_SEEDS = (1, 2)      # the equal-attainment comparison again on other traces
# (workload, rps, --without, --replan-workload): the answer's times, and re-plans where the SLOs bind
CLI_RUNS = (("coding", 4.0, None, None), ("conversation", 4.0, None, None), ("conversation", 6.0, "a6000-4x-0", None),
            ("coding", 6.0, None, "conversation"), ("conversation", 6.0, None, "coding"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--engine", choices=("des", "fluid"), default="des", help="simulator of the bisections")
    engine = ap.parse_args().engine
    machine = _machine()   # the load average before the runs, not after them
    perf = LatencyModel()
    base = load_inventory("thunderserve-32gpu", perf.catalog)
    rows, sustained, decode_size, budgets, binding, slow, split_some = [], [], [], [], [], [], []
    for workload in ("coding", "conversation"):
        traces = TraceGenerator(workload, 120.0, 0, arrival="poisson", rps=4.0)
        trace = size_sample(traces, 4.0)   # as provision cloud scores plans
        for gpus, counts in SIZES.items():
            ctx = make_context(base.with_counts(counts), perf.llm("llama-30b"), perf, trace)
            t0, c0 = time.perf_counter(), time.process_time()
            plan, rps = search_plan(ctx)
            secs, cpu_s = time.perf_counter() - t0, time.process_time() - c0
            ns_plan, ns_rps = search_plan(ctx, phases=("both",))
            rows.append(f"| {workload} | {gpus} | {secs:.2f} | {cpu_s:.2f} | {rps:.2f} | {ns_rps:.2f} | {rps / ns_rps:.2f}x | "
                        f"{replica_counts(plan)} |")
            print(rows[-1], flush=True)
            if gpus == 32:   # as `provision cloud`: the rate at 99% attainment, both plans
                row, smaller, by_budget, binds = _equal_attainment(ctx, workload, engine)
                sustained.append(row)
                decode_size.append(smaller)
                budgets.append(by_budget)
                binding += binds
                long = TraceGenerator(workload, ATTAINMENT_TRACE_S, 0, arrival="poisson", rps=4.0)
                slow += _slow_network_rows(ctx, workload, long, engine)
                split_some += _split_some_nodes_rows(ctx, workload, long, engine)
                print(row, smaller, by_budget, *binds, *slow[-2:], *split_some[-len(SPLIT_INSIDE):], sep="\n",
                      flush=True)
    seeds = [_other_seed_row(base, perf, workload, seed, engine) for seed in OTHER_SEEDS
             for workload in ("coding", "conversation")]
    as_run = [_as_the_cli_runs_it(base, perf, *run) for run in CLI_RUNS]
    head = (f"# Cloud plan times (benchmarks/cloud.py)\n\n{machine}\n\nTabu search (seed 0) on ThunderServe's node types, llama-30b, "
            f"120-s Poisson trace sizes, SLOs Table VI x 2 against the inventory's best node. ThunderServe: "
            f"21 / 36 / 54 s for 16 / 24 / 32 GPUs; split over non-split (HexGen) 1.5x coding, 1.3x "
            f"conversation. Plan s is wall time, plan CPU s the search's own CPU time (one thread): on "
            f"a shared machine the wall time stretches with the load, the CPU time does not.\n\n| workload | GPUs | "
            f"plan s | plan CPU s | split rps | non-split rps | ratio | prefill / decode replicas |\n"
            f"|---|---|---|---|---|---|---|---|\n")
    tail = (f"\n\nAt equal attainment (32 GPUs): the highest rate at which the {engine.upper()} keeps 99% of requests "
            "within each metric's p99 limit (bisection on nested 600-s traces), for the best of the tabu search's five "
            "best plans by the analytic score, as `provision cloud` answers; dispatch by least queued work within "
            "the routing shares (SEMANTICS.md, \"Cloud plans\"). Replicas: the split plan's prefill / decode and "
            f"the non-split plan's; GPUs per type as prefill / decode; plan s: search and {engine.upper()} re-scoring of the "
            "split plan on the 600-s trace (wall). Non-split: whole prompts in mixed batches (HexGen, ThunderServe's "
            "comparison); chunked: the same search with chunked prefill on every replica, the best of budgets "
            f"{', '.join(map(str, CHUNK_TOKEN_CHOICES))} tokens (the chunked baseline families', vLLM's scheduler) "
            "by the same criterion\n\n| workload | split rps | non-split rps | ratio | chunked non-split rps "
            "(budget) | ratio | split replicas P / D | non-split replicas | chunked non-split replicas | GPUs "
            "prefill / decode | plan s |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
    sizes = ("\n\nDecode replicas (32 GPUs): the chosen split plan against (a) the same plan with every "
             "decode group of several nodes cut into one replica per node (same GPUs, more and smaller decode "
             "replicas; decode replicas and their KV tokens each) and (b) the best plan with more decode than "
             "prefill replicas (ThunderServe's Table 3 shape for conversation; the five best such plans of the "
             "tabu search, re-scored as `provision cloud` does; prefill / decode replicas) and (c) the finest "
             "grouping: every node cut into the smallest TP groups that hold the weights (12 replicas: TP2 on "
             "the 48-GB cards, TP4 on the 24-GB ones), its phases chosen exhaustively (every designation scored "
             "analytically, the five best re-scored as `provision cloud` does; prefill / decode replicas and "
             f"GPUs per type as prefill / decode); the {engine.upper()}-sustained rate at 99% attainment\n\n"
             "| workload | decode replicas | rps | instead | rps |\n|---|---|---|---|---|\n")
    per_budget = (f"\n\nChunked non-split plans (32 GPUs): the {engine.upper()}-sustained rate at 99% attainment "
                  "per chunk budget (tokens), each the best of the non-split search's five finalists\n\n| workload | "
                  + " | ".join(map(str, CHUNK_TOKEN_CHOICES)) + " |\n|---|" + "---|" * len(CHUNK_TOKEN_CHOICES) + "\n")
    binds = (f"\n\nWhich SLO binds (32 GPUs): each plan at {PAST_SUSTAINED:g}x its own sustained rate, the "
             f"{engine.upper()}'s share of requests within the p99 limit per metric on the 600-s trace (the metric "
             "under 99% is the one that stopped the bisection)\n\n| workload | plan | rps | TTFT | TBT | E2E |\n"
             "|---|---|---|---|---|---|\n")
    network = (f"\n\nA slow network (32 GPUs, {SLOW_NETWORK_GBPS:g} Gbps between nodes): the split plan "
               "`provision cloud --inter-node-gbps 5 [--kv-bits 4]` chooses, its predicted rate (routing LP), its "
               f"{engine.upper()}-sustained rate at 99% attainment and the share of KV bytes that cross nodes; the "
               "best non-split plan's sustained rate (it moves no KV)\n\n| workload | KV bits | split predicted "
               "rps | split rps | KV across nodes | non-split rps |\n|---|---|---|---|---|---|\n")
    some = (f"\n\nSplit inside some nodes (32 GPUs, {SLOW_NETWORK_GBPS:g} Gbps, 16-bit KV): each node that holds "
            "two replicas (4x48 GB, 8x48 GB) of the listed types is its own split cluster (prefill and decode "
            "replicas inside it, so its KV never crosses the network), the rest (4x24 GB: one replica each) one "
            "non-split cluster, each request sent to one cluster in proportion to its sustained rate; the sum of "
            f"the {engine.upper()}-sustained rates at 99% attainment (each cluster the best of its search's five "
            "finalists), against the whole inventory split and non-split above\n\n| workload | split inside "
            "| split nodes rps | non-split rest rps | total rps |\n|---|---|---|---|---|\n")
    other = (f"\n\nOther trace seeds (32 GPUs): the equal-attainment comparison with seed 1 and 2 for both "
             f"the sizes the search scores and the 600-s {engine.upper()} traces\n\n| seed | workload | split rps | "
             "non-split rps | ratio | split replicas P / D | GPUs prefill / decode |\n|---|---|---|---|---|---|---|\n")
    cli = ("\n\n`provision cloud` as a user runs it (32 GPUs, the CLI's defaults: 120-s Poisson trace, seed 0, "
           "DES, the 512-token chunked comparison): plan s is the answer's `elapsed_s` (search and DES "
           "re-scoring), total s the whole `plan_cloud` call (wall, without the interpreter's start); with "
           "`--without` (a node leaves) or `--replan-workload` (the requests become another workload's at the "
           "same rate), the share of requests within every limit before, with no re-plan, after the lightweight "
           "re-plan (phase flips and re-routing) and after the full one, and the re-plans' seconds\n\n"
           "| workload | rps | re-plan | plan s | total s | before | none | light | full | light s | full s |\n"
           "|---|---|---|---|---|---|---|---|---|---|---|\n")
    Path(__file__).with_name("results").joinpath("cloud.md").write_text(
        head + "\n".join(rows) + tail + "\n".join(sustained) + per_budget + "\n".join(budgets) + binds
        + "\n".join(binding) + sizes + "\n".join(decode_size) + network + "\n".join(slow) + some
        + "\n".join(split_some) + other
        + "\n".join(seeds) + cli + "\n".join(as_run) + "\n")


def _split_some_nodes_rows(ctx, workload, traces, engine) -> list[str]:
    """ThunderServe's Table 5 answer at 5 Gbps, a per-node split, where only some nodes can
    split: each such node is its own split cluster (its KV never leaves it), the rest one
    non-split cluster. The SLO reference is the whole inventory's, as for the plans it is
    compared with."""
    slow = ctx.inventory.with_bandwidth(SLOW_NETWORK_GBPS)
    one_node = {}
    for k, t in enumerate(slow.types):
        if any(t.gpu in gpus for gpus in SPLIT_INSIDE):
            part = make_context(slow.with_counts([int(i == k) for i in range(len(slow.types))]), ctx.llm, ctx.perf,
                                ctx.trace, reference=slow)
            one_node[t.gpu] = best_by_des(part, traces, TARGET_ATTAINMENT, 0, engine=engine)[2]
    rows = []
    for gpus in SPLIT_INSIDE:
        split = sum(t.count * one_node[t.gpu] for t in slow.types if t.gpu in gpus)
        rest = [0 if t.gpu in gpus else t.count for t in slow.types]
        others = make_context(slow.with_counts(rest), ctx.llm, ctx.perf, ctx.trace, reference=slow)
        _, _, mixed = best_by_des(others, traces, TARGET_ATTAINMENT, 0, phases=("both",), engine=engine)
        rows.append(f"| {workload} | {' + '.join(gpus)} | {split:.2f} | {mixed:.2f} | {split + mixed:.2f} |")
    return rows


def _as_the_cli_runs_it(base, perf, workload, rps, without, mix) -> str:
    """One `provision cloud --rps R [--without NODE] [--replan-workload W]` answer: its times
    and re-plan."""
    traces = TraceGenerator(workload, 120.0, 0, arrival="poisson", rps=rps)
    new_mix = None if mix is None else TraceGenerator(mix, 120.0, 0, arrival="poisson", rps=rps)
    t0 = time.perf_counter()
    a = plan_cloud(base, perf.llm("llama-30b"), perf, traces, rps=rps, without=without, new_mix=new_mix)
    total_s = time.perf_counter() - t0
    cells, event = ["", "", "", "", "", ""], ""
    if "replan" in a:
        rp = a["replan"]
        event = replan_event(rp)
        cells = [f"{rp['before']['all']:.1%}"] + [f"{rp[k]['slo_attainment']['all']:.1%}" for k in ("none", "light",
                                                                                                "full")]
        cells += [f"{rp['light']['elapsed_s']:.2f}", f"{rp['full']['elapsed_s']:.2f}"]
    row = f"| {workload} | {rps:g} | {event} | {a['elapsed_s']:.2f} | {total_s:.2f} | " + " | ".join(cells) + " |"
    print(row, flush=True)
    return row


def _other_seed_row(base, perf, workload, seed, engine) -> str:
    """The 32-GPU split and non-split plans `provision cloud --seed` picks, on that seed's traces."""
    return comparison_row((seed, workload), *split_and_non_split(base, perf, workload, seed, engine))


def comparison_row(lead, ctx, plan, split, mixed, extra=()) -> str:
    """One printed table row: the `lead` cells, split and non-split rps, their ratio, the
    split plan's replicas P / D, the `extra` cells and its GPUs by phase."""
    ratio = f"{split / mixed:.2f}x" if mixed > 0 else "n/a"
    cells = (*lead, f"{split:.2f}", f"{mixed:.2f}", ratio, replica_counts(plan), *extra, gpus_by_phase(ctx, plan))
    row = "| " + " | ".join(map(str, cells)) + " |"
    print(row, flush=True)
    return row


def write_results(script: str, title: str, machine: str, doc: str, columns: list[str], rows: list[str],
                  name: str | None = None) -> None:
    """results/NAME.md (default SCRIPT.md): the title, the machine, the first paragraph after
    `doc`'s summary line and the table of `rows` under `columns`."""
    about = doc.split("\n\n")[1].replace("\n", " ")
    head = (f"# {title} (benchmarks/{script}.py)\n\n{machine}\n\n{about}\n\n| " + " | ".join(columns)
            + " |\n|" + "---|" * len(columns) + "\n")
    Path(__file__).with_name("results").joinpath(f"{name or script}.md").write_text(head + "\n".join(rows) + "\n")


def _equal_attainment(ctx, workload, engine) -> tuple:
    """One row: sustained rates (`engine`) of the split, non-split and chunked non-split plans
    `provision cloud` picks, their replica counts and the split plan's GPUs per type and
    phase; the decode-size row, the per-budget row and the binding-metric rows."""
    long = TraceGenerator(workload, ATTAINMENT_TRACE_S, 0, arrival="poisson", rps=4.0)
    t0 = time.perf_counter()
    plan, _, split = best_by_des(ctx, long, TARGET_ATTAINMENT, 0, engine=engine)
    plan_s = time.perf_counter() - t0
    ns_plan, _, mixed = best_by_des(ctx, long, TARGET_ATTAINMENT, 0, phases=("both",), engine=engine)
    rated = chunked_non_split_by_budget(ctx, long, TARGET_ATTAINMENT, 0, CHUNK_TOKEN_CHOICES, engine=engine)
    ch_plan, _, chunked, chunk = best_of_budgets(rated)
    row = (f"| {workload} | {split:.2f} | {mixed:.2f} | {split / mixed:.2f}x | {chunked:.2f} ({chunk}) | "
           f"{split / chunked:.2f}x | {replica_counts(plan)} | {len(ns_plan)} | {len(ch_plan)} | "
           f"{gpus_by_phase(ctx, plan)} | {plan_s:.1f} |")
    by_budget = f"| {workload} | " + " | ".join(f"{r[2]:.2f}" for r in rated) + " |"
    binds = [_binding_row(ctx, workload, name, p, rate, long, engine, c)
             for name, p, rate, c in (("split", plan, split, 0), ("non-split", ns_plan, mixed, 0),
                                      (f"non-split, chunks of {chunk}", ch_plan, chunked, chunk))]
    return row, _smaller_decode_row(ctx, plan, split, long, workload, engine) + "\n" + \
        _more_decode_row(ctx, split, long, workload, engine) + "\n" + \
        _finest_grouping_row(ctx, split, long, workload, engine), by_budget, binds


def _more_decode_row(ctx, split, traces, workload, engine) -> str:
    """The best plan with more decode than prefill replicas (ThunderServe's Table 3 shape for
    conversation): the tabu search's finalists among such plans, re-scored as `provision
    cloud` re-scores its own."""
    ranked = finalist_plans(ctx, 0, keep=_more_decode_than_prefill)
    if not ranked:
        return f"| {workload} | more decode than prefill replicas | {split:.2f} | none scored by the search | |"
    plan, _, rate = best_by_des(ctx, traces, TARGET_ATTAINMENT, 0, engine=engine, ranked=ranked)
    n_dec = sum(ph == "decode" for _, ph in plan)
    return (f"| {workload} | more decode than prefill replicas | {split:.2f} | {len(plan) - n_dec} / {n_dec} | "
            f"{rate:.2f} |")


def _finest_grouping_row(ctx, split, traces, workload, engine) -> str:
    """Every node cut into its smallest replicas (the search's starting groups), the best
    phase designation over all of them: what the physics picks when replicas cannot grow."""
    groups = [stages for stages, _ in initial_plan(ctx.physics, ctx.scorer)]
    rated: dict = {}
    for phases in itertools.product(("prefill", "decode"), repeat=len(groups)):
        if len(set(phases)) == 2:
            plan = canon(zip(groups, phases))
            key = symmetry_key(ctx.physics, plan)
            if key not in rated:
                rated[key] = score(ctx.scorer, key)
    ranked = sorted(rated.items(), key=lambda kv: (-kv[1], kv[0]))[:FINALISTS]
    plan, _, rate = best_by_des(ctx, traces, TARGET_ATTAINMENT, 0, engine=engine, ranked=ranked)
    return (f"| {workload} | finest grouping ({len(groups)} replicas) | {split:.2f} | {replica_counts(plan)} "
            f"({gpus_by_phase(ctx, plan)}) | {rate:.2f} |")


def _more_decode_than_prefill(plan) -> bool:
    return sum(ph == "decode" for _, ph in plan) > sum(ph == "prefill" for _, ph in plan)


def _slow_network_rows(ctx, workload, traces, engine) -> list[str]:
    """At 5 Gbps between nodes, 16- and 4-bit KV on the wire: the split plan's predicted and
    sustained rates and where its KV goes, and the non-split plan's sustained rate (it moves
    no KV), each chosen as `provision cloud --inter-node-gbps 5 [--kv-bits 4]` chooses."""
    rows = []
    slow = ctx.inventory.with_bandwidth(SLOW_NETWORK_GBPS)
    for bits in (16, 4):
        c = make_context(slow, ctx.llm, ctx.perf, ctx.trace, kv_bits=bits)
        plan, cap, split = best_by_des(c, traces, TARGET_ATTAINMENT, 0, engine=engine)
        cross = kv_across_nodes(c, plan, split)
        _, _, mixed = best_by_des(c, traces, TARGET_ATTAINMENT, 0, phases=("both",), engine=engine)
        rows.append(f"| {workload} | {bits} | {cap:.2f} | {split:.2f} | {cross:.1%} | {mixed:.2f} |")
    return rows


def kv_across_nodes(ctx, plan, rate) -> float:
    """Share of a split plan's KV bytes, routed at `rate`, that crosses nodes."""
    pre, dec, r = plan_routing(ctx, plan, rate)
    flow = r.prefill_share[:, None] * r.decode_share
    return sum(flow[i, j] * sum(share for (a, b), share in ctx.physics.kv_traffic(pre[i], dec[j]).items() if a != b)
               for i in range(len(pre)) for j in range(len(dec)))


def _binding_row(ctx, workload, name, plan, sustained, traces, engine, chunk) -> str:
    """Attainment per metric of `plan` at PAST_SUSTAINED x its sustained rate."""
    rate = sustained * PAST_SUSTAINED
    split = any(ph != "both" for _, ph in plan)
    routing = plan_routing(ctx, plan, rate) if split else None
    att = simulate_plan(ctx, plan, traces.at(rate), routing, engine=engine, chunk_tokens=chunk)["slo_attainment"]
    return f"| {workload} | {name} | {rate:.2f} | " + " | ".join(f"{att[m]:.1%}" for m in ("ttft", "tbt", "e2e")) + " |"


def _smaller_decode_row(ctx, plan, split, traces, workload, engine) -> str:
    """The chosen split plan with every decode group of several nodes cut into one replica
    per node (more, smaller decode replicas, as ThunderServe's Table 3 counts them)."""
    cut = []
    for stages, phase in plan:
        nodes = sorted({n for n, _ in stages})
        parts = [tuple(sorted(st for st in stages if st[0] == n)) for n in nodes]
        whole = phase != "decode" or len(parts) == 1 or not all(ctx.physics.group(g) for g in parts)
        cut += [(stages, phase)] if whole else [(g, phase) for g in parts]
    cut = canon(cut)
    rate = (sustained_rps(ctx, cut, traces, score(ctx.scorer, cut), TARGET_ATTAINMENT, engine=engine)
            if cut != plan else split)
    kv = lambda p: "+".join(f"{ctx.physics.group(st).kv_cap_tokens / 1e3:.0f}k"   # noqa: E731
                            for st, ph in p if ph == "decode")
    n_dec = sum(ph == "decode" for _, ph in cut)
    return (f"| {workload} | {sum(ph == 'decode' for _, ph in plan)} ({kv(plan)}) | {split:.2f} | "
            f"{n_dec} ({kv(cut)}) | {rate:.2f} |")


def context_and_traces(inv, perf, workload, seed=0, slo_scale=DEFAULT_SLO_SCALE, kv_bits=16):
    """(context scoring plans on the sizes `provision cloud --seed S` scores them on, the
    600-s traces the sustained rates are bisected on)."""
    sizes = size_sample(TraceGenerator(workload, 120.0, seed, arrival="poisson", rps=4.0), 4.0)
    ctx = make_context(inv, perf.llm("llama-30b"), perf, sizes, slo_scale, kv_bits)
    return ctx, TraceGenerator(workload, ATTAINMENT_TRACE_S, seed, arrival="poisson", rps=4.0)


def split_and_non_split(inv, perf, workload, seed=0, engine="des", slo_scale=DEFAULT_SLO_SCALE, kv_bits=16):
    """(context, split plan, its sustained rps, the non-split plan's) on `inv` at 99%
    attainment, seed `seed` for the sizes the search scores and the 600-s traces, as
    `provision cloud --seed S --slo-scale X --kv-bits B` picks them."""
    ctx, long = context_and_traces(inv, perf, workload, seed, slo_scale, kv_bits)
    plan, _, split = best_by_des(ctx, long, TARGET_ATTAINMENT, seed, engine=engine)
    _, _, mixed = best_by_des(ctx, long, TARGET_ATTAINMENT, seed, phases=("both",), engine=engine)
    return ctx, plan, split, mixed


def replica_counts(plan) -> str:
    """'prefill / decode' replicas of a split plan."""
    n_pre = sum(ph == "prefill" for _, ph in plan)
    return f"{n_pre} / {len(plan) - n_pre}"


def gpus_by_phase(ctx, plan) -> str:
    """GPUs per type as prefill / decode, e.g. `a40 8/0`."""
    count: dict = {}
    for stages, phase in plan:
        for node, tp in stages:
            gpu = ctx.inventory.types[ctx.physics.node_type[node]].gpu
            count.setdefault(gpu, [0, 0])[phase == "decode"] += tp
    return ", ".join(f"{g} {p}/{d}" for g, (p, d) in sorted(count.items()))


def _machine() -> str:
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.machine()) if Path("/proc/cpuinfo").exists() else \
        platform.machine()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=Path(__file__).resolve().parent, check=False).stdout.strip()
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return (f"Machine: {os.cpu_count()} cores, {cpu}, Python {platform.python_version()}; load average {load} "
            f"at start; {now}; commit {commit}.")


if __name__ == "__main__":
    main()
