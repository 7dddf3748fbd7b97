"""Markdown report of `vs_splitwisesim.py` (tables computed from its JSON cache)."""

from __future__ import annotations

import numpy as np
import pandas as pd

METRICS = ("ttft", "tbt", "e2e")
PCTS = (50, 90, 99)
COLS = [f"{m}_p{p}" for m in METRICS for p in PCTS]
MODE_TITLES = {"roofline": "roofline (shipped calibration)",
               "profile": "profile, `--latency-interp splitwisesim`",
               "grid": "profile, `--latency-interp grid`",
               "profile-swsim": "profile, `--latency-interp splitwisesim`, `--scheduler splitwisesim`",
               "roofline-swsim": "roofline (shipped calibration), `--scheduler splitwisesim`"}


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


# Why a run's p99 differs by more than 25% with the profile model: the latency model is
# then SplitwiseSim's own, so what is left is the scheduler. Evidence: SplitwiseSim's
# per-request `nth_token_overheads` (wait before decoding) and our DES iteration counts.
MECHANISMS = {
    "A": ("Prompt side saturated; SplitwiseSim's mixed pool drafts token machines into prefill. Its "
          "`mixed_pool` scheduler takes a token machine into the mixed pool whenever the least-loaded prompt "
          "queue is over its pending-token threshold, with no floor on the machines left decoding, and those "
          "machines then interleave prefills with their decodes (mixed iterations at 1.1x the prefill of all "
          "tokens). The overload so moves from TTFT into TBT: its TTFT is lower, and its TBT, which counts the "
          "wait before decoding starts (its `nth_token_overheads`, p99 1.3-4.9 s in these runs), is higher. "
          "Our mixed pool (SEMANTICS.md) lends a token machine only past 4 batches of pending prompt work, "
          "while two or more are at home and the token side has room, so our prompt queue absorbs the "
          "overload as TTFT. Both verdicts fail on every such run."),
    "B": ("Baseline at moderate load: TTFT agrees within 10%, TBT is 1.45-1.95x SplitwiseSim's, and the gap "
          "shrinks with the output length (L_bh_code70_30, decode seconds per token, ours / theirs: 2.1x for "
          "outputs under 10 tokens, 1.9x for 10-30, 1.5x for 30-100, 1.08x above 100). Both run every decode "
          "of a machine inside its prefill iterations (ours: 11% of iterations, 8,286 of 75,530 in the DES, "
          "mean 203 ms). The evidence points to routing: ours sends a prompt to the machine with the least "
          "pending prompt plus remaining decode tokens; every machine is decoding (mean batch 4), so that is "
          "the machine whose decodes are nearly done or short, and their few tokens then share a 200-ms "
          "mixed iteration. SplitwiseSim's `token_jsq` counts a decoding request as one pending token "
          "whatever its length, so its prompts do not seek out short decodes (its median per token for "
          "outputs under 10 tokens, 31.5 ms, is the pure decode iteration). The latency model is not the "
          "cause: with the roofline the same runs differ in the same direction (TBT 1.2-1.6x)."),
    "C": ("Baseline far past capacity (SplitwiseSim's TTFT p99 4-30 s): the prompt queue depends on "
          "prioritization. SplitwiseSim preempts decode tasks for prompts (up to 4 times per request; its "
          "`nth_token_overheads` p99 2.4-3.7 s) and its JSQ counts a decoding request as one pending token; "
          "ours never preempts a running decode and routes by pending prompt plus decode tokens, so our TTFT "
          "is higher and our TBT lower. Both verdicts fail."),
    "D": ("Near capacity, only the TBT tail differs (our TBT p99 0.2-0.7x): in bursts SplitwiseSim's "
          "prompt queue crosses its threshold and a token machine is drafted into prefill (mechanism A, "
          "briefly); decodes assigned to it wait (its `nth_token_overheads` p99 0.1-1.4 s against our KV "
          "transfer of tens of ms), and coding outputs are short (median 13 tokens), so a 0.7 s wait adds "
          "50 ms per token. The same drafting lowers its TTFT tail where the prompt pool is smallest. "
          "Verdicts agree on all of these but one (L_hh_code70_15p1t: its single token machine is drafted; "
          "ours is never lent, so our TBT p99 slowdown stays within 5x). How long they wait is set by two "
          "more SplitwiseSim rules, which `--scheduler splitwisesim` replays: its KV transfer (all of it after "
          "the prefill, at 200 GiB/s) and its contiguous decode runs, which a prompt over the 2,048-token "
          "budget cannot interrupt (L_ha_code70_15p8t in the section above)."),
}


# The runs whose p99 still differs by more than 25% with SplitwiseSim's latency rule AND its
# scheduler (profile-swsim, DES). Evidence: SplitwiseSim's per-request outputs against ours.
SWSIM_EXPLAINED = {
    "L_hhcap_code70_12p3t": (
        "Latency model, not scheduler: the prefill time of the power-capped token machines. The prompt side "
        "is saturated, so the capped machines are drafted into prefill all run long (ours: 313 prefills and "
        "1,934 decodes off their home pool; SplitwiseSim: 2,701 requests wait over 0.5 s before decoding, "
        "spread over the whole 120 s). Every size class is faster in ours by a similar factor (median TTFT "
        "0.26-0.27 s against 0.32-0.33 s, median TBT 66-67 ms against 87-102 ms, for outputs of 5-20, 20-100 "
        "and 100+ tokens). SplitwiseSim's own `data/perf_model.csv` has measured Llama2-70B rows for "
        "`h100-80gb-pcap` (TP8 prefill of 2,048 tokens 178 ms, of 8,192 1.10 s: 1.30x its H100 rows; decode "
        "as H100), which the shared profile `llama2-70b_dgx.csv` omits; ours derates the H100 rows by the "
        "roofline's capped/uncapped ratio, 1.19x (160 ms), so the drafted machines prefill 9% faster in a "
        "pool past capacity. The uncapped twin, L_hh_code70_12p3t, replays within 16%, and "
        "L_hhcap_code70_15p5t, where the capped machines are drafted only in bursts, within 8%."),
    "L_ha_code70_15p8t": (
        "SplitwiseSim's contiguous decode runs (`instance.py`, `ORCAInstance.get_num_contiguous_iterations` "
        "and `pause_iteration`, `SplitwiseInstance.task_arrival`), replayed since: see the section's "
        "opening. If this run is flagged again, compare the drafting sequence first (12 drafts in "
        "SplitwiseSim, at 4.50-37.90 s)."),
}

# Runs that were flagged under profile-swsim until a SplitwiseSim rule was replayed: printed with
# their current ratios while they stay within 25%. Evidence: SplitwiseSim's per-request outputs.
SWSIM_CLOSED = {
    "L_ha_code70_15p8t": (
        "Its TBT tail (p99 0.65 before) was SplitwiseSim's contiguous decode runs (`instance.py`: "
        "`ORCAInstance.get_num_contiguous_iterations`, `pause_iteration`; `SplitwiseInstance.task_arrival`). "
        "A decode-only batch is scheduled as one event lasting until its shortest decode ends; an arriving "
        "task ends it early only if it fits the 2,048-token budget (a decode, a prompt of at most 2,048 "
        "tokens) or, on a KV transfer's source, if something waits there. A prompt longer than the budget "
        "cannot: it waits. A token machine drafted into the mixed pool (the one with the fewest pending "
        "decodes) is often left with one or two long decodes: in SplitwiseSim one A100 commits a "
        "single decode for 242 iterations (10.3 s) at 34.65 s. Request 2062 (7,270 prompt tokens) reaches "
        "a drafted A100 at 30.32 s and prefills only at 38.17 s (TTFT 9.39 s, 1.54 s of it prefill); "
        "request 2413 (5,804 tokens) waits 2.94 s the same way. Stuck long prompts keep the mixed machines' "
        "queues long, so by 37.90 s every token machine is drafted (12 drafts) and decodes go to mixed "
        "machines (28 to 2062's); one such arrival ends the run, the long prompt prefills alone (1.2-1.6 s on an A100), and "
        "the decodes sent there meanwhile wait behind it: 28 start together at 39.709 s when 2062's prefill "
        "ends, 32 at 39.517 s, 24 at 39.295 s (276 waits over 0.5 s in all). Ours had started such a "
        "prompt at the next iteration. A re-statement of SplitwiseSim's scheduler and instance rules (not "
        "shipped) reproduces all 8,353 requests of this run within 1 ms, and without the contiguous runs "
        "gives TBT p99 0.67x and 89 waits over 0.5 s. Two more of its rules decide which machine is drafted "
        "and when its run ends, so ours replays the same drafts only with all three: a decode server reserves "
        "s + n KV tokens (its decode task generates n - 1; ours reserved s + 1 + n), and its KV transfer "
        "moves all s tokens after the prefill at 200 GiB/s without grouped-query sharing (90 ms for 7,400 "
        "tokens; ours overlapped a smaller transfer with the prefill layer by layer). TBT p99 was 0.87 with "
        "the runs alone, 0.89 with the reservation too; with all three, "
        "ours drafts the same machines at the same times (12 drafts, 4.50-37.90 s)."),
    "L_hhcap_code70_12p3t": (
        "The same contiguous decode runs, on the capped H100 token machines, all drafted as the prompt side "
        "is saturated (TTFT/TBT/E2E p99 0.86/0.72/0.78 before; TBT p99 0.93 with the runs alone). What is "
        "left includes the capped machines' prefill time: SplitwiseSim's own `data/perf_model.csv` measures "
        "`h100-80gb-pcap` prefill at 1.30x its H100 rows, a row the shared profile `llama2-70b_dgx.csv` "
        "lacks, and ours derates the H100 rows by the roofline's 1.19x."),
}


def mechanism(run, row) -> str:
    """The MECHANISMS key of a run whose p99 differs by more than 25% (profile model)."""
    if run.system.startswith("baseline"):
        return "C" if row.ttft_p50 > 1.25 else "B"
    return "A" if row.ttft_p50 > 1.25 else "D"


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
        cells = []
        for col in COLS:
            v = getattr(row, col)
            cells.append(f"**{v:.2f}**" if col.endswith("99") and abs(v - 1) > 0.25 else f"{v:.2f}")
        verdict = f"{'Y' if row.ours_meets else 'n'}/{'Y' if row.theirs_meets else 'n'}"
        trace = r.trace.replace("_2min", "")
        lines.append("| " + " | ".join([row.run_id, r.system, pt, trace, *cells, verdict]) + " |")
    return lines


def _explanations(table: pd.DataFrame, runs: pd.DataFrame) -> list[str]:
    info = runs.set_index("run_id")
    flagged = summary(table)["p99_over_25"]
    groups = {}
    for row in table[table.run_id.isin(flagged)].itertuples():
        groups.setdefault(mechanism(info.loc[row.run_id], row), []).append(row.run_id)
    out = ["", "## Why a p99 differs by more than 25% (profile model, least-work scheduler, fluid engine)", "",
           "With SplitwiseSim's own latency rule, what differs is the scheduler. Every flagged run, by mechanism "
           "(`--scheduler splitwisesim` replays mechanisms A-D: see the section above):"]
    for key, ids in sorted(groups.items()):
        out += ["", f"**{key}** ({len(ids)} runs: {', '.join(ids)}). {MECHANISMS[key]}"]
    return out


def _swsim_explanations(tables: dict, runs: pd.DataFrame) -> list[str]:
    """Every run flagged under SplitwiseSim's latency rule and scheduler, with its mechanism."""
    t = tables.get(("profile-swsim", "des"))
    if t is None:
        return []
    s = summary(t)
    out = ["", "## Why a p99 differs by more than 25% (profile model, `--scheduler splitwisesim`, DES)", "",
           f"With SplitwiseSim's latency rule and its scheduler, the median difference is "
           f"{100 * s['median_abs_dev']:.1f}% and {len(s['p99_over_25'])} of {s['runs']} runs have a p99 off by "
           f"more than 25%. Mechanisms A-D below (the least-work rows) are SplitwiseSim's scheduling rules, which "
           f"`--scheduler splitwisesim` now replays (SEMANTICS.md, \"The splitwisesim scheduler\")."]
    roof = tables.get(("roofline-swsim", "des"))
    if roof is not None:
        out[-1] += (f" With the same scheduler and the shipped roofline the median is "
                    f"{100 * summary(roof)['median_abs_dev']:.1f}%: that difference is the latency model's share.")
    for run_id in s["p99_over_25"]:
        out += ["", f"**{run_id}**. {SWSIM_EXPLAINED.get(run_id, 'Not yet explained: investigate before publishing.')}"]
    for run_id, text in SWSIM_CLOSED.items():
        if run_id in s["p99_over_25"] or run_id not in set(t.run_id):
            continue
        row = t[t.run_id == run_id].iloc[0]
        now = "/".join(f"{row[f'{m}_p99']:.2f}" for m in METRICS)
        out += ["", f"**{run_id}** (now within 25%: TTFT/TBT/E2E p99 {now}). {text}"]
    return out


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
    out += _swsim_explanations(tables, runs)
    if ("profile", "fluid") in tables:
        out += _explanations(tables["profile", "fluid"], runs)
    for (mode, engine), t in tables.items():
        out += ["", f"## {MODE_TITLES[mode]}, {engine} engine", ""] + _markdown(t, runs)
    path.write_text("\n".join(out) + "\n")
