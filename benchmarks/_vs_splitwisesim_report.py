"""Markdown report of `vs_splitwisesim.py` (tables computed from its JSON cache)."""

from __future__ import annotations

import numpy as np
import pandas as pd

METRICS = ("ttft", "tbt", "e2e")
PCTS = (50, 90, 99)
COLS = [f"{m}_p{p}" for m in METRICS for p in PCTS]
MODE_TITLES = {"roofline": "roofline (shipped calibration)",
               "profile": "profile, `--latency-interp splitwisesim`"}


def ratio_table(runs: pd.DataFrame, cache: dict, mode: str, engine: str) -> pd.DataFrame:
    """ours / theirs per run (rows) and percentile (columns), plus both verdicts."""
    rows = []
    for r in runs.itertuples():
        entry = cache.get(f"{r.run_id}|{mode}|{engine}")
        if entry is None:
            continue
        row = {"run_id": r.run_id}
        for m in METRICS:
            for k, p in enumerate(PCTS):
                row[f"{m}_p{p}"] = entry[m][k] / getattr(r, f"{m}_p{p}_s")
        row["ours_meets"] = entry["meets_tableVI_slo"]
        row["theirs_meets"] = bool(r.meets_tableVI_slo)
        rows.append(row)
    return pd.DataFrame(rows)


def summary(table: pd.DataFrame) -> dict:
    dev = np.abs(table[COLS].to_numpy() - 1.0)
    p99 = np.abs(table[[f"{m}_p99" for m in METRICS]].to_numpy() - 1.0)
    return {"runs": len(table), "median_abs_dev": float(np.median(dev)) if len(table) else float("nan"),
            "verdict_agree": int((table.ours_meets == table.theirs_meets).sum()),
            "p99_over_25": table.run_id[(p99 > 0.25).any(axis=1)].tolist()}


def _markdown(table: pd.DataFrame, runs: pd.DataFrame) -> list[str]:
    info = runs.set_index("run_id")
    head = ["run", "family", "P+T", "trace"] + [c.replace("_", " ") for c in COLS] + ["SLO ours/theirs"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in table.itertuples():
        r = info.loc[row.run_id]
        pt = f"{r.prompt_machines}+{r.token_machines}" if r.token_machines else f"{r.prompt_machines}"
        cells = [f"{getattr(row, c):.2f}" for c in COLS]
        cells = [f"**{c}**" if abs(float(c) - 1) > 0.25 and col.endswith("99") else c for c, col in zip(cells, COLS)]
        verdict = f"{'Y' if row.ours_meets else 'n'}/{'Y' if row.theirs_meets else 'n'}"
        lines.append("| " + " | ".join([row.run_id, r.system, pt, r.trace.replace("_2min", ""), *cells, verdict]) + " |")
    return lines


def write_report(runs: pd.DataFrame, cache: dict, path, machine: str) -> None:
    out = ["# Cross-validation against SplitwiseSim (Llama2-70B, 35 runs)", "",
           f"Machine: {machine}. Written by `python benchmarks/vs_splitwisesim.py --write` from "
           "`results/vs_splitwisesim.json`.", "",
           "Each run's exact SplitwiseSim trace is replayed request by request through our engine "
           "with the family and machine counts of the run. Ratios are ours / SplitwiseSim's, "
           "with SplitwiseSim's metric conventions (TBT = (E2E - TTFT) / output tokens; Table VI "
           "slowdowns against each request alone on a DGX-A100 through the same latency model). "
           "Bold: a p99 that differs by more than 25%.", ""]
    engines = sorted({k.split("|")[2] for k in cache})
    out += ["## Summary", "", "| latency model | engine | runs | median abs(ratio - 1) over runs x {TTFT,TBT,E2E} x "
            "{p50,p90,p99} | Table VI verdict agrees | runs with a p99 off by > 25% |", "|---|---|---|---|---|---|"]
    tables = {}
    for mode in MODE_TITLES:
        for engine in engines:
            t = ratio_table(runs, cache, mode, engine)
            if len(t):
                tables[mode, engine] = t
                s = summary(t)
                out.append(f"| {MODE_TITLES[mode]} | {engine} | {s['runs']} | {100 * s['median_abs_dev']:.1f}% | "
                           f"{s['verdict_agree']} of {s['runs']} | {len(s['p99_over_25'])} |")
    for (mode, engine), t in tables.items():
        out += ["", f"## {MODE_TITLES[mode]}, {engine} engine", ""] + _markdown(t, runs)
    path.write_text("\n".join(out) + "\n")
