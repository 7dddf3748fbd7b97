"""The cloud plans with a network card per node (issue 13: what a node's NIC does to the split).

`thunderserve-32gpu` gives each node pair a 40-Gbps link of its own, as ThunderServe's
bandwidth matrix does, so a decode node may take KV from every other node at once, at up
to 6 x 40 Gbps. A cloud node has one network card: with `--nic-gbps 40` every KV
transfer entering a node shares its card's 40 Gbps (and every one leaving it, its
outgoing direction). A llama-30b request's KV is ~1.6 MB per prompt token at 16 bits (~3 GB
for a mean coding prompt), so the cards decide how much KV may cross nodes. This benchmark
plans `thunderserve-32gpu` (llama-30b, seed 0, SLOs Table VI x 2) without cards and with
40-Gbps cards, at 16- and 4-bit KV on the wire (ThunderServe's one-shot compression), as
`benchmarks/cloud.py` does: split and non-split plans, each the best of the tabu search's
five finalists by the DES-sustained rate at 99% attainment on 600-s traces (the
non-split plan moves no KV: one rate per workload); KV across nodes is the share of the
split plan's KV bytes, at its routing, that crosses nodes; "without cards" is the
sustained rate of the plan chosen with cards on the same inventory without them. A card
only adds a link to share, so that rate is never lower (up to the bisection's step); the
search is local, so it may exceed the rate of the plan chosen without cards.

    python benchmarks/cloud_nic.py   # writes benchmarks/results/cloud_nic.md
"""

from __future__ import annotations

from cloud import _machine, comparison_row, context_and_traces, kv_across_nodes, split_and_non_split, write_results
from perfmodels import LatencyModel
from provisioner.cloud import TARGET_ATTAINMENT, load_inventory, score, sustained_rps

NIC_GBPS = (None, 40.0)   # no card (each pair's link its own), one 40-Gbps card per node
KV_BITS = (16, 4)


def main() -> None:
    machine = _machine()
    perf = LatencyModel()
    base = load_inventory("thunderserve-32gpu", perf.catalog)
    rows = []
    for workload in ("coding", "conversation"):
        for nic in NIC_GBPS:
            inv = base if nic is None else base.with_nic(nic)
            for bits in KV_BITS:
                ctx, plan, split, mixed = split_and_non_split(inv, perf, workload, kv_bits=bits)
                lead = (workload, "none" if nic is None else f"{nic:g} Gbps", bits)
                across = f"{kv_across_nodes(ctx, plan, split):.1%}" if split > 0 else "n/a"
                bare = "—" if nic is None else f"{_without_cards(base, perf, workload, bits, plan):.2f}"
                rows.append(comparison_row(lead, ctx, plan, split, mixed, (across, bare)))
    write_results("cloud_nic", "Cloud plans with a network card per node", machine, __doc__,
                  ["workload", "NIC", "KV bits", "split rps", "non-split rps", "ratio", "split replicas P / D",
                   "KV across nodes", "without cards", "GPUs prefill / decode"], rows)


def _without_cards(inv, perf, workload, bits, plan) -> float:
    """The DES-sustained rate of `plan` on `inv` (no cards), as `split_and_non_split` rates it."""
    ctx, long = context_and_traces(inv, perf, workload, kv_bits=bits)
    return sustained_rps(ctx, plan, long, score(ctx.scorer, plan), TARGET_ATTAINMENT)


if __name__ == "__main__":
    main()
