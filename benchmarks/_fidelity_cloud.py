"""Cloud plans in `benchmarks/fidelity.py`: the fluid engine against the DES on plans of the
shipped inventories (SEMANTICS.md, "Cloud plans"), at rates around where the SLOs bind.

Plans: the tabu search's best split plan and its best non-split plan (seed 0) on
`thunderserve-32gpu`, on a 36-GPU rental from `cloud-prices` (1x 4xA6000, 4x 4xA5000,
1x 8xA40, 2x 4x3090Ti; SLO reference: the price list's best node, as `--goal cost`) and on
`thunderserve-32gpu` with a 40-Gbps network card per node (`--nic-gbps 40`), llama-30b,
coding and conversation. The SLOs bind at `lambda_99`, the highest rate at which the DES keeps
99% of requests within every p99 limit (`provision cloud`'s sustained rate, bisected on the
same traces); each plan runs at LOADS x `lambda_99` on 600-s Poisson traces (nested across
rates; at 1-3 req/s a 120-s trace would hold a few hundred requests, so 1% would be two or
three), through `simulate_plan(..., engine="des" | "fluid")`.
"""

from __future__ import annotations

import time

import pandas as pd

from perfmodels import LatencyModel
from provisioner.cloud import TARGET_ATTAINMENT, load_inventory, make_context, plan_routing, search_plan, size_sample, \
    simulate_plan, sustained_rps
from workloads import TraceGenerator

MODEL = "llama-30b"
LOADS = (0.5, 0.8, 1.0, 1.2)
PRICES_RENTAL = (1, 4, 1, 2)   # cloud-prices node counts (a6000-4x, a5000-4x, a40-8x, rtx3090ti-4x)
METRICS = ("ttft", "tbt", "e2e")
PCTS = (50, 90, 99)
ATTAIN = ("ttft", "tbt", "e2e", "all")
TRACE_S = 600.0
NIC_GBPS = 40.0   # a network card per node: every KV transfer queues for two cards too


def inventories(perf):
    """(label, inventory, SLO reference inventory)."""
    ts = load_inventory("thunderserve-32gpu", perf.catalog)
    prices = load_inventory("cloud-prices", perf.catalog)
    return [("thunderserve-32gpu", ts, ts), ("cloud-prices 1/4/1/2", prices.with_counts(PRICES_RENTAL), prices),
            (f"thunderserve-32gpu, {NIC_GBPS:g}-Gbps cards", ts.with_nic(NIC_GBPS), ts)]


def plans(ctx):
    """(kind, plan, predicted rps) of the best split and the best non-split plan."""
    split, cap = search_plan(ctx, seed=0)
    mixed, mixed_cap = search_plan(ctx, seed=0, phases=("both",))
    return [("split", split, cap), ("non-split", mixed, mixed_cap)]


def run_case(ctx, plan, kind, trace, rps) -> dict:
    """Both engines on one plan at one rate: their percentiles (s), attainment, verdicts, times."""
    routing = plan_routing(ctx, plan, rps) if kind == "split" else None
    row = {}
    for engine in ("des", "fluid"):
        t0 = time.perf_counter()
        sim = simulate_plan(ctx, plan, trace, routing, engine=engine)
        row[f"{engine}_s"] = time.perf_counter() - t0
        row[f"{engine}_slo_met"] = sim["slo"]["met"]
        for m in ATTAIN:
            row[f"{engine}_attain_{m}"] = sim["slo_attainment"][m]
        for m in METRICS:
            for p in PCTS:
                row[f"{engine}_{m}_p{p}_s"] = sim["latency_s"][m][f"p{p}"]
    for m in METRICS:
        for p in PCTS:
            row[f"rd_{m}_p{p}"] = abs(row[f"fluid_{m}_p{p}_s"] - row[f"des_{m}_p{p}_s"]) / row[f"des_{m}_p{p}_s"]
    for m in ATTAIN:
        row[f"ad_{m}"] = abs(row[f"fluid_attain_{m}"] - row[f"des_attain_{m}"])
    return row


def cloud_cases(seed: int, duration_s: float = TRACE_S) -> pd.DataFrame:
    perf = LatencyModel()
    rows = []
    for label, inv, ref in inventories(perf):
        for workload in ("coding", "conversation"):
            traces = TraceGenerator(workload, duration_s, seed, arrival="poisson", rps=2.0)
            ctx = make_context(inv, perf.llm(MODEL), perf, size_sample(traces, 2.0), reference=ref)
            for kind, plan, cap in plans(ctx):
                bind = sustained_rps(ctx, plan, traces, cap, TARGET_ATTAINMENT, split=kind == "split") or cap
                for load in LOADS:
                    trace = traces.at(load * bind)
                    row = {"inventory": label, "workload": workload, "plan": kind, "replicas": len(plan),
                           "lambda_99": bind, "load": load, "rps": load * bind, "requests": len(trace)}
                    rows.append({**row, **run_case(ctx, plan, kind, trace, load * bind)})
                    print(f"  cloud {label} {workload} {kind} {load}x: worst rel diff "
                          f"{max(rows[-1][f'rd_{m}_p{p}'] for m in METRICS for p in PCTS):.3f}", flush=True)
    return pd.DataFrame(rows)


def cloud_summary(df: pd.DataFrame, tol: dict) -> tuple[pd.DataFrame, bool]:
    """Per percentile: median / p90 / max relative difference over cases, against `tol`."""
    rows = []
    for m in METRICS:
        for p in PCTS:
            rd = df[f"rd_{m}_p{p}"]
            worst = df.loc[rd.idxmax()]
            rows.append({"metric": f"{m} p{p}", "median": rd.median(), "p90 over cases": rd.quantile(0.9),
                         "max": rd.max(), "tolerance (median)": tol[p], "ok": bool(rd.median() <= tol[p]),
                         "worst case": f"{worst['inventory']} {worst['workload']} {worst['plan']} {worst['load']:.1f}x"})
    table = pd.DataFrame(rows)
    agree = (df["fluid_slo_met"] == df["des_slo_met"]).mean()
    return table, bool(table["ok"].all()) and agree >= 0.95


def cloud_report(df: pd.DataFrame, tol: dict, fmt_table) -> list[str]:
    table, ok = cloud_summary(df, tol)
    agree = (df["fluid_slo_met"] == df["des_slo_met"]).mean()
    attain = pd.DataFrame([{"attainment": m, "median abs diff": df[f"ad_{m}"].median(),
                            "max abs diff": df[f"ad_{m}"].max()} for m in ATTAIN])
    per = df[["inventory", "workload", "plan", "replicas", "lambda_99", "load", "rps", "requests",
              "des_attain_all", "fluid_attain_all", "des_slo_met", "fluid_slo_met"]
             + [f"rd_{m}_p{p}" for m in METRICS for p in PCTS] + ["des_s", "fluid_s"]]
    return [
        "## Cloud plans (heterogeneous replicas, `provision cloud`)",
        "",
        *[line.strip() for line in __doc__.split("\n\n")[1].splitlines()],
        "",
        fmt_table(table, "{:.4f}"),
        "",
        f"- SLO verdict agreement: {agree:.1%} of {len(df)} cases; overall: **{'PASS' if ok else 'FAIL'}** "
        "(every median within tolerance and >= 95 % SLO agreement).",
        f"- Time: DES {df['des_s'].sum():.2f} s, fluid {df['fluid_s'].sum():.2f} s for all {len(df)} cases "
        f"(median {df['des_s'].median() * 1e3:.1f} / {df['fluid_s'].median() * 1e3:.1f} ms per case).",
        "",
        "SLO attainment (share of requests within each p99 limit), |fluid - des|:",
        "",
        fmt_table(attain, "{:.4f}"),
        "",
        fmt_table(per.rename(columns=lambda c: c.replace("rd_", "")), "{:.3f}"),
        "",
    ]
