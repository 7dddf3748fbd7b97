"""The analytic decode rate of one cloud replica against the DES (issue 13: how far the search's ranking can mislead).

The tabu search ranks plans by an analytic score (`Scorer`): a decode replica's rate is the
lesser of two limits (`Scorer.decode_limits`): "slots", the largest batch whose iteration
meets the mean TBT budget and whose KV, at the mean tokens a running request holds, fits
its budget, less a square-root-staffing headroom; and "admission", the largest rate at
which first-come first-served admission of whole requests into the budget lets at most 1%
of the requests miss a p99 deadline (`KvAdmission`). Here each decode group the 32-GPU search builds (llama-30b on `thunderserve-32gpu`) is the
only decode replica of a plan behind four prefill replicas (two A40 TP4, an A6000 TP4 and
an A5000 TP4 on the other nodes) with 400 Gbps between nodes, so that neither the KV
transfers nor (where the prefill rate is the larger) the prefill side bind; its
DES-sustained rate at 99% attainment (long Poisson traces: 3,000 s coding, 1,200 s
conversation, at least a few hundred requests at these rates) against its two limits and
the analytic rate (their lesser).

    python benchmarks/cloud_decode_rates.py   # writes benchmarks/results/cloud_decode_rates.md
"""

from __future__ import annotations

from cloud import _machine, write_results
from perfmodels import LatencyModel
from provisioner.cloud import TARGET_ATTAINMENT, load_inventory, make_context, size_sample, sustained_rps
from workloads import TraceGenerator

FAST_NETWORK_GBPS = 400.0
TRACE_S = {"coding": 3000.0, "conversation": 1200.0}
# decode groups: (node type prefix, index of that type's node, TP) per stage
DECODE_GROUPS = {
    "A6000 TP2": (("a6000", 0, 2),),
    "A6000 TP4": (("a6000", 0, 4),),
    "A5000 TP4": (("a5000", 0, 4),),
    "3090 Ti TP4": (("rtx3090ti", 0, 4),),
    "A5000 TP4 + 3090 Ti TP4 (PP2)": (("a5000", 0, 4), ("rtx3090ti", 0, 4)),
    "3090 Ti TP4 x PP2": (("rtx3090ti", 0, 4), ("rtx3090ti", 1, 4)),
}
PREFILL_GROUPS = ((("a40", 0, 4),), (("a40", 0, 4),), (("a6000", 1, 4),), (("a5000", 1, 4),))


def main() -> None:
    machine = _machine()
    perf = LatencyModel()
    inv = load_inventory("thunderserve-32gpu", perf.catalog).with_bandwidth(FAST_NETWORK_GBPS)
    names = [name for name, _ in inv.nodes]

    def stages(spec):
        return tuple(sorted((names.index(f"{kind}-{'8x' if kind == 'a40' else '4x'}-{k}"), tp) for kind, k, tp in spec))

    prefill = [(stages(g), "prefill") for g in PREFILL_GROUPS]
    rows = []
    for workload, duration in TRACE_S.items():
        ctx = make_context(inv, perf.llm("llama-30b"), perf,
                           size_sample(TraceGenerator(workload, 120.0, 0, arrival="poisson", rps=4.0), 4.0))
        long = TraceGenerator(workload, duration, 0, arrival="poisson", rps=4.0)
        prefill_rps = sum(ctx.scorer.prefill(g)[0] for g, _ in prefill)
        for label, spec in DECODE_GROUPS.items():
            group = stages(spec)
            decode_rps = ctx.scorer.decode(group)[0]
            limits = ctx.scorer.decode_limits(group)
            des = sustained_rps(ctx, prefill + [(group, "decode")], long, min(decode_rps, prefill_rps),
                                TARGET_ATTAINMENT)
            binds = decode_rps < prefill_rps
            ratio = f"{des / decode_rps:.2f}" if binds else "(prefill binds)"
            rows.append(f"| {workload} | {label} | {ctx.physics.group(group).kv_cap_tokens / 1e3:.0f}k | "
                        f"{limits['slots']:.2f} | {limits['admission']:.2f} | {decode_rps:.2f} | {prefill_rps:.2f} | "
                        f"{des:.2f} | {ratio} |")
            print(rows[-1], flush=True)
    write_results("cloud_decode_rates", "One decode replica: analytic rate against the DES", machine, __doc__,
                  ["workload", "decode replica", "KV tokens", "slots rps", "admission rps", "analytic decode rps",
                   "analytic prefill rps", "DES-sustained rps", "DES / analytic decode"], rows)


if __name__ == "__main__":
    main()
