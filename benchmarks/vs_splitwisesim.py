"""Cross-validation against SplitwiseSim: replay its 35 Llama2-70B runs, compare percentiles.

For each run of `../shared/validation/splitwise_sim_llama/results.csv` (SplitwiseSim's own
code, unmodified; see METHOD.md there), the run's exact trace is replayed request by
request (the file's own arrivals and sizes) through our engines, with two latency models:

- `roofline`: the shipped calibrated roofline (what `provision` uses by default);
- `profile`: `--latency-profile llama2-70b_dgx.csv --latency-interp splitwisesim`,
  SplitwiseSim's own interpolation of the same measurements;
- `grid`: the same profile with our default interpolation (`--latency-interp grid`);
- `profile-swsim`, `roofline-swsim`: `profile` and `roofline` under `--scheduler splitwisesim`
  (SplitwiseSim's own routing and batching, `provisioner/sim/_des_splitwisesim.py`; DES
  only), so the table separates what the latency model and the scheduler account for.

Latencies are computed with SplitwiseSim's conventions so the ratios compare like with
like: TBT = (E2E - TTFT) / output tokens over all requests, percentiles by linear
interpolation, Table VI slowdowns against each request alone on a DGX-A100 through the
mode's own latency model. Results accumulate in `results/vs_splitwisesim.json` (one entry
per run, mode and engine) so the CPU-heavy work can run in chunks:

    python benchmarks/vs_splitwisesim.py --engine fluid            # all runs, both modes
    python benchmarks/vs_splitwisesim.py --engine des --runs 0-9   # a chunk of DES runs
    python benchmarks/vs_splitwisesim.py --engine des --modes profile-swsim,roofline-swsim
    python benchmarks/vs_splitwisesim.py --write                   # results/vs_splitwisesim.md
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np
import pandas as pd

from perfmodels import LatencyModel, load_profile_model
from provisioner import SLO, make_design
from provisioner.sim import simulate_requests, solo_latencies
from workloads import read_trace_csv

HERE = Path(__file__).resolve().parent
SHARED = Path(os.environ.get("PROVISIONER_SHARED", HERE.parents[1] / "shared"))
if not (SHARED / "validation").exists():
    SHARED = Path("/work/shared")
VALIDATION = SHARED / "validation" / "splitwise_sim_llama"
PROFILE = SHARED / "data" / "profiles" / "llama2-70b_dgx.csv"
CACHE = HERE / "results" / "vs_splitwisesim.json"
REPORT = HERE / "results" / "vs_splitwisesim.md"
MODEL = "llama2-70b"
MODES = ("roofline", "profile", "grid", "profile-swsim", "roofline-swsim")
SWSIM = "-swsim"   # mode suffix: --scheduler splitwisesim
METRICS = ("ttft", "tbt", "e2e")
PCTS = (50, 90, 99)


def latency_model(mode: str):
    mode = mode.removesuffix(SWSIM)
    if mode == "roofline":
        return LatencyModel()
    return load_profile_model(PROFILE, "splitwisesim" if mode == "profile" else "grid")


def design_of(run, mode: str = "profile") -> object:
    sched = {"scheduler": "splitwisesim"} if mode.endswith(SWSIM) else {}
    if run.system.startswith("baseline"):
        return make_design(run.system, machines=int(run.prompt_machines), **sched)
    return make_design(run.system, int(run.prompt_machines), int(run.token_machines), **sched)


def splitwisesim_metrics(first_s, finish_s, trace, solo, slo: SLO) -> dict:
    """Percentiles (s) and Table VI slowdown percentiles with SplitwiseSim's conventions."""
    n = trace.output_tokens.astype(float)
    ttft = first_s - trace.arrival_s
    e2e = finish_s - trace.arrival_s
    tbt = (e2e - ttft) / n
    ref_ttft, ref_tbt, _ = solo
    ref_tbt = np.nan_to_num(ref_tbt, nan=0.0)   # solo_latencies blanks n == 1; SplitwiseSim keeps them
    ref_e2e = ref_ttft + ref_tbt * (n - 1.0)
    out = {}
    for name, x, ref in (("ttft", ttft, ref_ttft), ("tbt", tbt, ref_tbt), ("e2e", e2e, ref_e2e)):
        out[name] = np.percentile(x, PCTS).tolist()
        ok = ref > 0
        out[name + "_slowdown"] = np.percentile(x[ok] / ref[ok], PCTS).tolist()
    limits = slo.limits()
    out["meets_tableVI_slo"] = bool(all(np.all(np.array(out[m + "_slowdown"]) <= limits[k])
                                        for k, m in enumerate(METRICS)))
    return out


def run_chunk(runs: pd.DataFrame, engine: str, modes) -> None:
    cache = json.loads(CACHE.read_text()) if CACHE.exists() else {}
    slo = SLO()
    for mode in modes:
        if mode.endswith(SWSIM) and engine != "des":
            print(f"{mode}: --scheduler splitwisesim runs in the DES only (give --engine des); skipped")
            continue
        perf = latency_model(mode)
        for trace_name, group in runs.groupby("trace", sort=False):
            todo = [r for r in group.itertuples() if f"{r.run_id}|{mode}|{engine}" not in cache]
            if not todo:
                continue
            trace = read_trace_csv(VALIDATION / "traces" / f"{trace_name}.csv")
            solo = solo_latencies(trace, perf.llm(MODEL), perf, slo)
            for r in todo:   # one design per call: the cache then fills run by run
                t0 = time.perf_counter()
                _, _, out = simulate_requests([design_of(r, mode)], trace, MODEL, engine=engine, perf=perf, slo=slo)
                entry = splitwisesim_metrics(out.first_token_s[0], out.finish_s[0], trace, solo, slo)
                entry.update(requests=len(trace), wall_s=time.perf_counter() - t0)
                cache[f"{r.run_id}|{mode}|{engine}"] = entry
                _save(cache)
                print(f"{r.run_id:24s} {mode:8s} {engine:5s} {entry['wall_s']:6.1f} s  "
                      f"e2e p99 {entry['e2e'][2]:.2f} s (theirs {r.e2e_p99_s:.2f})", flush=True)


def _save(cache: dict) -> None:
    """One line per (run, mode, engine), sorted, so a rerun diffs line by line."""
    lines = [f"{json.dumps(k)}: {json.dumps(v)}" for k, v in sorted(cache.items())]
    CACHE.write_text("{\n" + ",\n".join(lines) + "\n}\n")


def _select(runs: pd.DataFrame, spec: str | None) -> pd.DataFrame:
    if not spec:
        return runs
    keep = []
    for part in spec.split(","):
        lo, _, hi = part.partition("-")
        keep += list(range(int(lo), int(hi or lo) + 1))
    return runs.iloc[[k for k in keep if k < len(runs)]]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--engine", choices=("fluid", "des"), default="fluid")
    ap.add_argument("--modes", default=",".join(MODES), help="comma-separated, of " + ",".join(MODES))
    ap.add_argument("--runs", default=None, help="row indices of results.csv, e.g. 0-9,12")
    ap.add_argument("--write", action="store_true", help="write results/vs_splitwisesim.md from the cache")
    args = ap.parse_args()
    runs = pd.read_csv(VALIDATION / "results.csv")
    if args.write:
        from _vs_splitwisesim_report import write_report
        write_report(runs, json.loads(CACHE.read_text()), REPORT, machine=_machine())
        print(f"wrote {REPORT}")
        return
    run_chunk(_select(runs, args.runs), args.engine, args.modes.split(","))


def _machine() -> str:
    from fidelity import machine_info   # the one machine description of the benchmarks

    m = machine_info()
    return (f"{m['cpu']}, {m['nproc']} cores (load average {m['loadavg']}), Python {m['python']}, "
            f"commit {m['commit']}; {m['date']}")


if __name__ == "__main__":
    main()
