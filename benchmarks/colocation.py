"""Where each answer to prefill-decode interference wins: the cost-optimal design of
Baseline (whole prompts), Baseline with chunked prefill, the co-located Splitwiser
families (when the catalog has them) and Splitwise-HH, over rates and both workloads.

Every cell is `provision --goal cost --rps R --design F` through the Python API (the same
search as the CLI: enumeration of the count grid, one grid per chunk budget), on the
default model and SLOs, a 120-s trace, seed 0. The fluid engine decides; the DES
re-check is off (`--no-verify`) to keep 100+ searches within minutes, so a cell can be a
machine short of what `provision` reports with verification. Each answer is the cheapest
design meeting every Table VI SLO at that rate.

Usage:  python benchmarks/colocation.py [--rates 1,2,5,10,20,40,70,100] [--model M]
Writes  benchmarks/results/colocation.md
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fidelity import machine_info  # noqa: E402

from provisioner.designs import FAMILIES  # noqa: E402
from provisioner.search import ProvisionRequest, provision  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "colocation.md"
WANTED = ("baseline-h100", "baseline-h100-chunked", "splitwiser-h100", "splitwise-hh")


def families() -> tuple[str, ...]:
    return tuple(f for f in WANTED if f in FAMILIES)


def answer(workload: str, rps: float, family: str, model: str) -> dict:
    req = ProvisionRequest(goal="cost", rps=rps, workload=workload, model=model, families=(family,), verify=False)
    fr = provision(req).families[0]
    if not fr.feasible:
        return {"text": "none", "cost": float("inf")}
    r = fr.row
    chunk = int(r.get("prefill_chunk_tokens", 0) or 0)
    counts = (f"{int(r['prompt_machines'])}P+{int(r['token_machines'])}T" if int(r["token_machines"])
              else f"{int(r['prompt_machines'])}")
    share = float(r.get("mps_prefill_share", 0.0) or 0.0)
    return {"text": counts + (f" c{chunk}" if chunk else "") + (f" f{share:g}" if share else ""),
            "cost": float(r["cost_usd_per_h"])}


def table(workload: str, rates, fams, model: str) -> list[str]:
    lines = [f"### {workload}", "",
             "| req/s | " + " | ".join(fams) + " | cheapest |",
             "|---|" + "---|" * (len(fams) + 1)]
    for rps in rates:
        cells = {f: answer(workload, rps, f, model) for f in fams}
        best = min(cells.values(), key=lambda c: c["cost"])["cost"]
        winners = [f for f, c in cells.items() if c["cost"] <= best * (1 + 1e-9)]
        row = [f"{c['text']} (${c['cost']:,.0f}/h)" if c["cost"] < float("inf") else "none" for c in cells.values()]
        lines.append(f"| {rps:g} | " + " | ".join(row) + f" | {', '.join(winners)} |")
        print(lines[-1], flush=True)
    return lines + [""]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rates", default="1,2,5,10,20,40,70,100")
    ap.add_argument("--model", default="bloom-176b")
    args = ap.parse_args(argv)
    rates = [float(x) for x in args.rates.split(",")]
    fams = families()
    t0 = time.perf_counter()
    body = []
    for workload in ("coding", "conversation"):
        body += table(workload, rates, fams, args.model)
    info = machine_info()
    head = [
        "# Co-location vs splitting: cost-optimal designs by rate", "",
        f"Written by `python benchmarks/colocation.py` on {info['date']}, commit {info['commit']}; machine: "
        f"{info['nproc']} CPUs, {info['cpu']}, Python {info['python']}, load average {info['loadavg']}; "
        f"{time.perf_counter() - t0:.0f} s.", "",
        f"Model {args.model}, SLOs of Splitwise Table VI, 120-s Poisson traces (seed 0), fluid engine, no DES "
        "re-check. A cell: machines (P+T for Splitwise; `cN`: chunked prefill with an N-token budget; `fF`: "
        "Splitwiser's prefill SM share) and $/h "
        "of the cheapest design meeting every SLO; `cheapest`: the families at the least $/h.", ""]
    RESULTS.write_text("\n".join(head + body))
    print(f"wrote {RESULTS}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
