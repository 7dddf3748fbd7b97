"""Search benchmarks and the Splitwise provisioning reproduction (SW Sec. IV-D, VI).

Sections (each prints as it goes; all land in benchmarks/results/search.md):

1. Fig. 12 enumeration: every cell of Splitwise-HH's 40 x 40 count grid decided at 70
   rps (BLOOM-176B, coding, 120 s, seed 0) by the frontier search; target <= 5 s. The
   same grid simulated cell by cell checks that every verdict agrees.
2. The full default `provision --goal cost --rps 70` (six families, DES verification
   included), run as a user runs it (the console script, --json); target <= 60 s.
3. Optuna on a space with three machine types per pool and continuous power caps
   (0.4-1.0): 10 sampler seeds; target: within 2% of the enumerated optimum's cost in
   >= 9 seeds while simulating <= 10% of the designs enumeration needs.
4. The reproduction table: Fig. 12; iso-power (power of 40 DGX-H100 = 455 kW) and
   iso-cost ($1520/h = 40 DGX-H100) throughput-optimized designs; iso-throughput (70
   rps) cost- and power-optimized designs; the headline ratios.

Timings exclude numba's one-time compilation (a warm-up call runs first).

Usage:  python benchmarks/search.py [--skip-exhaustive] [--seeds 10]
Writes  benchmarks/results/search.md
"""

from __future__ import annotations

import argparse
import itertools
import json
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np

from perfmodels import LatencyModel
from provisioner import SLO
from provisioner.search import (Evaluator, FamilySpace, PoolSpace, ProvisionRequest, SearchProblem,
                                exhaustive_search, family_space, provision, staircase_search)
from workloads import TraceGenerator

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fidelity import machine_info  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "search.md"
PROVISION = str(Path(sys.executable).with_name("provision"))
MODEL = "bloom-176b"
TYPES = ("dgx-a100", "dgx-h100", "hgx-h200")
ISO_POWER_KW = 40 * 11.375      # 40 DGX-H100 (SW Sec. VI: = 70 DGX-A100)
ISO_COST_USD_PER_H = 40 * 38.0  # 40 DGX-H100 at SW Table I's price
FAMILIES = ("baseline-a100", "baseline-h100", "splitwise-aa", "splitwise-hh", "splitwise-ha", "splitwise-hhcap")

# Splitwise's published designs (FACTS.md, SW Sec. VI); None: not given as a design.
PAPER_ISO_POWER = {"baseline-a100": "70", "baseline-h100": "40", "splitwise-aa": "55P+15T",
                   "splitwise-hh": "35P+5T", "splitwise-ha": None, "splitwise-hhcap": None}


# Why our numbers differ from the paper's: prose appended to the results as written.
NOTES = (Path(__file__).resolve().parent / "search_notes.md").read_text(encoding="utf-8")


def log(msg: str) -> None:
    print(msg, flush=True)


def design_text(d: dict) -> str:
    if d.get("prompt_machines") is None:
        return "-"
    if not d["token_machines"]:
        return f"{d['prompt_machines']}"
    cap = "" if d["token_power_cap"] >= 0.999 else f" (T@{d['token_power_cap']:g})"
    return f"{d['prompt_machines']}P+{d['token_machines']}T{cap}"


# -- 1. Fig. 12 ------------------------------------------------------------------------------
def fig12(perf, exhaustive: bool) -> tuple[list[str], dict]:
    log("1. Fig. 12 enumeration (Splitwise-HH, 40 x 40, 70 rps)")
    space = family_space("splitwise-hh", max_prompt=40, max_token=40)
    trace = TraceGenerator("coding", 120.0, 0).at(70.0)
    ev = Evaluator(trace, MODEL, SLO(), perf)
    t0 = time.perf_counter()
    sc = staircase_search(space, ev)
    t_stair = time.perf_counter() - t0
    v = sc.verdicts()
    cost = 38.0 * (space.prompt_counts[:, None] + space.token_counts[None, :])
    best = cost[v == 1].min()
    optimal = [(int(p), int(t)) for p, t in zip(*np.nonzero((v == 1) & (cost == best)))]
    optimal = [(int(space.prompt_counts[i]), int(space.token_counts[j])) for i, j in optimal]
    lines = [f"- Frontier enumeration: all {v.size} cells decided ({int((v == 1).sum())} feasible) with "
             f"**{sc.evaluations} simulations in {sc.rounds} batched rounds, {t_stair:.2f} s** (target <= 5 s: "
             f"{'PASS' if t_stair <= 5 else 'FAIL'}); monotonicity contradictions: {sc.violations}.",
             f"- Cheapest feasible on the search trace: ${best:.0f}/h = {int(best / 38)} machines, e.g. "
             + ", ".join(f"{p}P+{t}T" for p, t in optimal[:7]) + ".",
             "- Frontier (least prompt machines per token count): "
             + ", ".join(f"{p}P+{t}T" for p, t in sc.frontier()[:10]) + ", ..."]
    out = {"t_stair": t_stair, "evals": sc.evaluations, "best_machines": int(best / 38), "frontier": sc.frontier()}
    if exhaustive:
        ev2 = Evaluator(trace, MODEL, SLO(), perf)
        t0 = time.perf_counter()
        frame = exhaustive_search(space, ev2)
        t_ex = time.perf_counter() - t0
        truth = frame["slo_met"].to_numpy(bool).reshape(v.shape)
        agree = int(((v == 1) == truth).sum())
        lines.append(f"- Check: simulating every cell ({len(frame)} designs) took {t_ex:.1f} s; the frontier "
                     f"enumeration agrees on **{agree} of {v.size}** cells.")
        from provisioner import simulate
        checks = simulate(space.designs([27, 28, 27, 26], [3, 3, 4, 4]), trace, MODEL, perf=perf)
        for (_, r), (p, t) in zip(checks.iterrows(), ((27, 3), (28, 3), (27, 4), (26, 4))):
            lines.append(f"  - {p}P+{t}T: {'meets every SLO' if r.slo_met else 'fails'}; binding {r.binding_slo}, "
                         f"TTFT p99 slowdown {r.slowdown_ttft_p99:.2f} (limit 6), min margin {r.min_margin:+.1%}")
        out.update(t_exhaustive=t_ex, agree=agree)
    for line in lines:
        log("   " + line)
    return lines, out


# -- 2. the full default run -------------------------------------------------------------------
def full_default(extra: list[str], label: str) -> tuple[dict, float]:
    log(f"2. provision {' '.join(extra)} --json  ({label})")
    # A small run first, so numba's compilation (if its cache is stale) is not timed.
    subprocess.run([PROVISION, "simulate", "--design", "splitwise-hh", "--prompt-machines", "2", "--token-machines",
                    "1", "--rps", "2", "--duration", "10", "--engine", "fluid"], capture_output=True, timeout=600)
    t0 = time.perf_counter()
    proc = subprocess.run([PROVISION, *extra, "--json"], capture_output=True, text=True, timeout=1800)
    elapsed = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"provision failed: {proc.stderr.strip()}")
    obj = json.loads(proc.stdout)
    log(f"   {elapsed:.1f} s wall; winner {obj['winner']['design']['family'] if obj['winner'] else None}")
    return obj, elapsed


def enumerate_pairs(perf, problem: SearchProblem, space: FamilySpace) -> dict:
    """(pm, ptp, tm, ttp) -> ((least cost, p, t), simulations) for every pair of (machine
    type, TP) choices. For the cost goal a cap below 1 never lowers the cost (a machine
    costs the same at any cap) and never speeds a machine up, so each pair is enumerated
    at full power; its count grid is decided exactly by the frontier search."""
    cost = {m: perf.catalog.machine(m).cost_usd_per_h for m in TYPES}
    ev = Evaluator(problem.trace, MODEL, SLO(), perf)
    per_pair = {}
    for (pm, ptp), (tm, ttp) in itertools.product(space.prompt.choices, space.token.choices):
        sp = FamilySpace("splitwise-custom", PoolSpace((pm,), (1.0, 1.0), ((pm, (ptp,)),), max_machines=80),
                         PoolSpace((tm,), (1.0, 1.0), ((tm, (ttp,)),), max_machines=80))
        sc = staircase_search(sp, ev, objective=lambda p, t, pm=pm, tm=tm: p * cost[pm] + t * cost[tm],
                              decide_all=False)
        fr = sc.frontier()
        best = min((p * cost[pm] + t * cost[tm], p, t) for p, t in fr) if fr else (np.inf, 0, 0)
        per_pair[(pm, ptp, tm, ttp)] = (best, sc.evaluations)
    return per_pair


def ablation_runs(perf, base: ProvisionRequest, seeds: int, opt: float) -> list[dict]:
    """TPE alone, without the designed first batch (random start, same budget), per sampler seed."""
    ablation = []
    for s in range(seeds):
        res = provision(base.replace(sampler_seed=s, optuna_designed_start=False), perf=perf)
        fr = res.family("splitwise-custom")
        c = float(fr.row["cost_usd_per_h"]) if fr.feasible else np.inf
        ablation.append({"gap_pct": (c - opt) / opt * 100, "evals": fr.evaluations})
        log(f"   ablation seed {s}: ${c:.1f}/h ({ablation[-1]['gap_pct']:+.2f}%), {fr.evaluations} simulations")
    return ablation


# -- 3. optuna vs enumeration ------------------------------------------------------------------
def optuna_vs_enumeration(perf, seeds: int) -> tuple[list[str], dict]:
    log("3. optuna vs enumeration (3 machine types per pool, TP where it fits, caps 0.4-1.0, 70 rps)")

    base = ProvisionRequest(goal="cost", rps=70, families=("splitwise-custom",), prompt_machine_types=TYPES,
                            token_machine_types=TYPES, power_cap_range=(0.4, 1.0), searcher="optuna", verify=False)
    problem = SearchProblem(base, perf)
    space = problem.space("splitwise-custom")
    t0 = time.perf_counter()
    per_pair = enumerate_pairs(perf, problem, space)
    t_enum = time.perf_counter() - t0
    opt_key = min(per_pair, key=lambda k: per_pair[k][0][0])
    (opt, opt_p, opt_t), _ = per_pair[opt_key]
    frontier_evals = sum(e for _, e in per_pair.values())
    n_pairs = len(per_pair)
    # What enumeration needs without the full-power argument: every cap pair on a 0.1 grid
    # (7 x 7) for every choice pair, each count grid decided by the frontier search (about
    # as many simulations as at full power), or every cell simulated (counts up to 80 x 80).
    cap_pairs = 7 * 7
    need_frontier = frontier_evals * cap_pairs
    need_plain = n_pairs * cap_pairs * 80 * 80

    def summary(rows):
        within = sum(r["gap_pct"] <= 2.0 for r in rows)
        return within, max(r["evals"] for r in rows)

    rows = []
    for s in range(seeds):
        t0 = time.perf_counter()
        res = provision(base.replace(sampler_seed=s), perf=perf)
        el = time.perf_counter() - t0
        fr = res.family("splitwise-custom")
        c = float(fr.row["cost_usd_per_h"]) if fr.feasible else np.inf
        trials = fr.bayes.trials
        hit = trials.index[trials["value"] <= opt * 1.02 + 1e-9]
        rows.append({"seed": s, "cost": c, "gap_pct": (c - opt) / opt * 100, "evals": fr.evaluations,
                     "design": f"{int(fr.row['prompt_machines'])}P {fr.row['prompt_machine']}/tp"
                               f"{int(fr.row['prompt_tp'])} @{fr.row['prompt_power_cap']:.2f} + "
                               f"{int(fr.row['token_machines'])}T {fr.row['token_machine']}/tp"
                               f"{int(fr.row['token_tp'])} @{fr.row['token_power_cap']:.2f}",
                     "first": int(hit[0]) + 1 if len(hit) else None, "seconds": el})
        log(f"   seed {s}: ${c:.1f}/h ({rows[-1]['gap_pct']:+.2f}%), {fr.evaluations} simulations, {el:.1f} s")
    within, max_evals = summary(rows)
    ok = within >= 0.9 * seeds and max_evals <= 0.1 * need_frontier

    a_within, a_max = summary(ablation_runs(perf, base, seeds, opt))

    def name(m, tp):
        return f"{m.split('-')[-1]}/tp{tp}"

    lines = [
        f"- Space: {space.prompt.choices} per pool ((machine, TP) choices where BLOOM-176B fits), GPU power cap "
        f"0.4-1.0 continuous per pool, counts up to the capacity-derived bounds.",
        f"- Enumerated optimum: **${opt:.2f}/h = {opt_p}P {name(*opt_key[:2])} + {opt_t}T {name(*opt_key[2:])}** "
        f"at full power ({frontier_evals} simulations over the {n_pairs} choice pairs, {t_enum:.1f} s). Per pair: "
        + "; ".join(f"{name(a, b)}+{name(c, d)} ${v[0][0]:.0f}" for (a, b, c, d), v in per_pair.items()) + ".",
        f"- Designs enumeration needs without the full-power argument: {need_frontier:,} simulations "
        f"(frontier search of each of {n_pairs} choice pairs x {cap_pairs} cap pairs on a 0.1 grid), or "
        f"{need_plain:,} cells simulated one by one.",
        f"- Optuna (TPE, {base.n_trials} hardware trials in batches of {base.trial_batch}, each trial's counts "
        f"found by the frontier search in lockstep): within 2% of the optimum in **{within} of {seeds} seeds**, at "
        f"most **{max_evals} simulations** = {100 * max_evals / need_frontier:.1f}% of the frontier enumeration "
        f"({100 * max_evals / need_plain:.3f}% of the plain one). Target: >= 9/10 seeds and <= 10%: "
        f"{'PASS' if ok else 'FAIL'}.",
        f"- The first batch of trials holds every pair of (machine, TP) choices at full power (a designed start, "
        f"`optuna_designed_start`), which is where the optimum is found (column 'first trial within 2%'); TPE then "
        f"explores the caps. Ablation, TPE from a random start with the same budget: within 2% in "
        f"**{a_within} of {seeds}** seeds, at most {a_max} simulations.",
        "",
        "| sampler seed | design | $/h | vs optimum | simulations | first trial within 2% | s |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(f"| {r['seed']} | {r['design']} | {r['cost']:.1f} | {r['gap_pct']:+.2f}% | {r['evals']} | "
                     f"{r['first']} | {r['seconds']:.1f} |")
    return lines, {"opt": opt, "within": within, "max_evals": max_evals, "need_frontier": need_frontier}


# -- 4. reproduction -------------------------------------------------------------------------
def run_goal(perf, label: str, **kwargs):
    log(f"4. {label}")
    t0 = time.perf_counter()
    res = provision(ProvisionRequest(**kwargs), perf=perf)
    log(f"   {time.perf_counter() - t0:.1f} s")
    return res.to_json(), time.perf_counter() - t0


def by_family(obj: dict) -> dict:
    return {b["design"]["family"]: b for b in obj["best"]}


def reproduction(cost_obj, power_obj, isop_obj, isoc_obj, conv_obj) -> list[str]:
    cost, power, isop, isoc = by_family(cost_obj), by_family(power_obj), by_family(isop_obj), by_family(isoc_obj)
    hh = cost["splitwise-hh"]
    d = hh["design"]
    lines = ["### Fig. 12: cost-optimal Splitwise-HH, coding, 70 rps", "",
             "| | Splitwise (paper) | ours |", "|---|---|---|",
             f"| design | 27P + 3T DGX-H100 (30 machines) | {d['prompt_machines']}P + {d['token_machines']}T "
             f"({d['prompt_machines'] + d['token_machines']} machines, verified by the DES) |",
             f"| cost | $1140/h | ${hh['cost_usd_per_h']:.0f}/h (bound ${hh['lower_bound']:.0f}/h, gap "
             f"{hh['gap_to_bound_pct']:.0f}%) |", ""]
    lines += ["### Iso-power (455 kW = 40 DGX-H100 = 70 DGX-A100) and iso-cost ($1520/h = 40 DGX-H100): "
              "the highest sustainable load, coding", "",
              "| family | paper iso-power design | ours iso-power | rps | $/h | kW | ours iso-cost | rps | $/h | kW |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for f in FAMILIES:
        a, b = isop[f], isoc[f]
        lines.append(f"| {f} | {PAPER_ISO_POWER[f] or '-'} | {design_text(a['design'])} | "
                     f"{_n(a['sustainable_rps'])} | {_n(a['cost_usd_per_h'], 0)} | {_n(a['power_kw'], 0)} | "
                     f"{design_text(b['design'])} | {_n(b['sustainable_rps'])} | {_n(b['cost_usd_per_h'], 0)} | "
                     f"{_n(b['power_kw'], 0)} |")
    if conv_obj is not None:
        c = by_family(conv_obj)["splitwise-hh"]
        lines += ["", f"Conversation, iso-power, Splitwise-HH: paper 25P+15T; ours {design_text(c['design'])} at "
                      f"{_n(c['sustainable_rps'])} rps."]
    lines += ["", "### Iso-throughput (70 rps, coding): cost- and power-optimized", "",
              "| family | cost-opt design | $/h | kW | power-opt design | $/h | kW |", "|---|---|---|---|---|---|---|"]
    for f in FAMILIES:
        a, b = cost[f], power[f]
        lines.append(f"| {f} | {design_text(a['design'])} | {_n(a['cost_usd_per_h'], 0)} | {_n(a['power_kw'], 0)} | "
                     f"{design_text(b['design'])} | {_n(b['cost_usd_per_h'], 0)} | {_n(b['power_kw'], 0)} |")

    def ratio(x, y):
        return x / y if x and y else float("nan")

    bh_p, bh_c = isop["baseline-h100"], isoc["baseline-h100"]
    rows = [
        ("iso-power: Splitwise-AA vs Baseline-H100, throughput (cost)", "1.4x at 20% lower cost",
         f"{ratio(isop['splitwise-aa']['sustainable_rps'], bh_p['sustainable_rps']):.2f}x at "
         f"{100 * (1 - ratio(isop['splitwise-aa']['cost_usd_per_h'], bh_p['cost_usd_per_h'])):.0f}% lower cost"),
        ("iso-power: Splitwise-HH vs Baseline-H100 (same cost and power)", "2.35x",
         f"{ratio(isop['splitwise-hh']['sustainable_rps'], bh_p['sustainable_rps']):.2f}x (cost "
         f"{isop['splitwise-hh']['cost_usd_per_h']:.0f} vs {bh_p['cost_usd_per_h']:.0f}, kW "
         f"{isop['splitwise-hh']['power_kw']:.0f} vs {bh_p['power_kw']:.0f})"),
        ("iso-cost: Splitwise-HHcap vs Baseline-H100 (same cost)", "1.76x with 15% lower power",
         f"{ratio(isoc['splitwise-hhcap']['sustainable_rps'], bh_c['sustainable_rps']):.2f}x with "
         f"{100 * (1 - ratio(isoc['splitwise-hhcap']['power_kw'], bh_c['power_kw'])):.0f}% lower power"),
        ("iso-cost: Splitwise-AA vs Baseline-H100", "1.4x at 25% more power",
         f"{ratio(isoc['splitwise-aa']['sustainable_rps'], bh_c['sustainable_rps']):.2f}x at "
         f"{100 * (ratio(isoc['splitwise-aa']['power_kw'], bh_c['power_kw']) - 1):.0f}% more power"),
        ("iso-throughput power-optimized: Splitwise-HHcap vs Baseline-H100", "25% less power",
         f"{100 * (1 - ratio(power['splitwise-hhcap']['power_kw'], power['baseline-h100']['power_kw'])):.0f}% "
         f"less power"),
        ("iso-throughput cost-optimized: Splitwise-AA vs Baseline-H100", "25% lower cost",
         f"{100 * (1 - ratio(cost['splitwise-aa']['cost_usd_per_h'], cost['baseline-h100']['cost_usd_per_h'])):.0f}"
         f"% lower cost"),
    ]
    lines += ["", "### Headline ratios", "", "| comparison | Splitwise (paper) | ours |", "|---|---|---|"]
    lines += [f"| {a} | {b} | {c} |" for a, b, c in rows]
    lines += ["", "### Rankings", ""]
    for label, table, key, rev in (("iso-power, sustainable rps, best first", isop, "sustainable_rps", True),
                                   ("iso-cost, sustainable rps, best first", isoc, "sustainable_rps", True),
                                   ("iso-throughput, $/h, best (lowest) first", cost, "cost_usd_per_h", False),
                                   ("iso-throughput, kW, best (lowest) first", power, "power_kw", False)):
        order = sorted((f for f in FAMILIES if table[f][key] is not None), key=lambda f: table[f][key], reverse=rev)
        lines.append(f"- {label}: " + ", ".join(f"{f} ({table[f][key]:.0f})" for f in order))
    return lines


def _n(v, digits=1):
    return "-" if v is None else f"{v:.{digits}f}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--skip-exhaustive", action="store_true", help="Do not simulate every Fig. 12 cell.")
    ap.add_argument("--seeds", type=int, default=10, help="Optuna sampler seeds.")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore", RuntimeWarning)
    info = machine_info()
    perf = LatencyModel()
    log("warm-up (numba)")
    provision(ProvisionRequest(goal="cost", rps=4, families=("splitwise-hh",), duration_s=20, verify=False), perf=perf)

    fig_lines, fig = fig12(perf, not args.skip_exhaustive)
    cost_obj, t_full = full_default(["--goal", "cost", "--rps", "70"], "six families, verification included")
    opt_lines, _ = optuna_vs_enumeration(perf, args.seeds)
    power_obj, t_power = run_goal(perf, "iso-throughput power-optimized (70 rps)", goal="power", rps=70)
    isop_obj, t_isop = run_goal(perf, "iso-power (455 kW)", goal="throughput", power_budget_kw=ISO_POWER_KW)
    isoc_obj, t_isoc = run_goal(perf, "iso-cost ($1520/h)", goal="throughput", cost_budget_usd_per_h=ISO_COST_USD_PER_H)
    conv_obj, t_conv = run_goal(perf, "iso-power, conversation, Splitwise-HH", goal="throughput",
                                power_budget_kw=ISO_POWER_KW, workload="conversation", families=("splitwise-hh",))
    rep = reproduction(cost_obj, power_obj, isop_obj, isoc_obj, conv_obj)

    cost_rows = ["| family | design | $/h | kW | bound | gap | simulations | searcher | DES (runs; screened) |",
                 "|---|---|---|---|---|---|---|---|---|"]
    for b in cost_obj["best"]:
        v = b["verification"] or {}
        des = f"{'pass' if v.get('met') else 'fail'} ({v.get('des_runs')}; {v.get('screened')})" if v else "-"
        cost_rows.append(f"| {b['design']['family']} | {design_text(b['design'])} | {_n(b['cost_usd_per_h'], 0)} | "
                         f"{_n(b['power_kw'], 0)} | {_n(b['lower_bound'], 0)} | {_n(b['gap_to_bound_pct'], 0)}% | "
                         f"{b['evaluations']} | {b['searcher']} | {des} |")
    md = [
        "# Search benchmarks and the Splitwise provisioning reproduction", "",
        f"Generated by `python benchmarks/search.py` on {info['date']}; commit {info['commit']} plus the working tree.",
        f"Machine: {info['nproc']} CPUs (`nproc`), {info['cpu']}, Python {info['python']}; load average at the end "
        f"{machine_info()['loadavg']} (other jobs share the machine: timings are indicative).",
        "Question: BLOOM-176B, Azure 2023 coding trace, 120-s search trace (seed 0), Splitwise Table VI SLOs; "
        "finalists re-checked by the discrete-event engine on two 240-s traces (seeds 1, 2).", "",
        "## 1. Fig. 12 enumeration", "", *fig_lines, "",
        "## 2. Full default run: `provision --goal cost --rps 70`", "",
        f"- Wall time {t_full:.1f} s for six families, DES verification included (target <= 60 s: "
        f"{'PASS' if t_full <= 60 else 'FAIL'}); the search itself reported {cost_obj['elapsed_s']:.1f} s "
        f"(per family: " + ", ".join(f"{b['design']['family']} {b['elapsed_s']:.1f} s" for b in cost_obj["best"])
        + ").", "",
        *cost_rows, "",
        "## 3. Optuna vs enumeration", "", *opt_lines, "",
        "## 4. Reproduction of Splitwise's provisioning results", "",
        f"Run times: power goal {t_power:.0f} s, iso-power {t_isop:.0f} s, iso-cost {t_isoc:.0f} s, "
        f"conversation iso-power (one family) {t_conv:.0f} s, all with DES verification.", "",
        *rep, "", NOTES,
    ]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(md) + "\n", encoding="utf-8")
    log(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
