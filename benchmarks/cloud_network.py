"""Cloud plans against the inter-node bandwidth: does a faster network ever sustain less?

KV transfers count in the TBT (SEMANTICS.md "Metrics"), so a request with a short output
misses its limit where its transfer crosses a slow link, or waits behind others on a busy
one. Each row is `provision cloud --inventory thunderserve-32gpu --workload W --goal
throughput --inter-node-gbps G --prefill-chunk-tokens 0` as a user runs it (llama-30b,
seed 0, 120-s traces): the split plan's predicted rate (the analytic score), the rate
the DES sustains at 99% attainment, the share of its requests whose KV crosses nodes in
the answer's routing, its replicas, and the best non-split plan's sustained rate.

    python benchmarks/cloud_network.py   # writes benchmarks/results/cloud_network.md
"""

from __future__ import annotations

import time

from cloud import _machine, write_results
from perfmodels import LatencyModel
from provisioner.cloud import load_inventory, plan_cloud
from workloads import TraceGenerator

GBPS = (5, 8, 10, 12, 15, 20, 40)


def main() -> None:
    machine = _machine()
    perf = LatencyModel()
    inv = load_inventory("thunderserve-32gpu", perf.catalog)
    rows = []
    for workload in ("coding", "conversation"):
        traces = TraceGenerator(workload, 120.0, 0, arrival="poisson", rps=4.0)
        for gbps in GBPS:
            t0 = time.perf_counter()
            out = plan_cloud(inv.with_bandwidth(gbps), perf.llm("llama-30b"), perf, traces, goal="throughput",
                             prefill_chunk_tokens=0)
            took = time.perf_counter() - t0
            phases = [r["phase"] for r in out["replicas"]]
            cells = (workload, gbps, f"{out['throughput_rps']:.2f}", f"{out['sustained_rps']:.2f}",
                     f"{_across_nodes(out):.0%}", f"{phases.count('prefill')} / {phases.count('decode')}",
                     f"{out['non_split']['sustained_rps']:.2f}", f"{took:.1f}")
            rows.append("| " + " | ".join(map(str, cells)) + " |")
            print(rows[-1], flush=True)
    write_results("cloud_network", "Cloud plans against the inter-node bandwidth", machine, __doc__,
                  ["workload", "Gbps", "split predicted rps", "split sustained rps", "KV across nodes",
                   "replicas P / D", "non-split sustained rps", "wall s"], rows)


def _across_nodes(out) -> float:
    """Share of the requests routed over a prefill -> decode pair whose nodes differ (`flows`:
    [prefill replica, decode replica, share], indices into `replicas`)."""
    nodes = [set(r["nodes"]) for r in out["replicas"]]
    return sum(share for i, j, share in out["flows"] if nodes[i] != nodes[j])


if __name__ == "__main__":
    main()
