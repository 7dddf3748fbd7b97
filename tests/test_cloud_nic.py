"""Network cards in cloud plans: a node's NIC is one link per direction that every KV
transfer leaving (entering) the node shares, whichever node is at the other end
(SEMANTICS.md, "Cloud plans")."""

from __future__ import annotations

import json

import numpy as np
import pytest

from perfmodels import LatencyModel
from provisioner import ProvisionerError
from provisioner.cli import run
from provisioner.cloud import load_inventory, make_context, plan_routing, score, search_plan, shared_links
from workloads import TraceGenerator

THREE_NODES = """name = "three"
[network]
inter_node_gbps = 40
{network}
[[nodes]]
type = "a40-8x"
{a40}
[[nodes]]
type = "rtx3090ti-4x"
count = 2
"""


@pytest.fixture(scope="module")
def perf():
    return LatencyModel()


def _inventory(tmp_path, perf, network="", a40=""):
    path = tmp_path / "inv.toml"
    path.write_text(THREE_NODES.format(network=network, a40=a40))
    return load_inventory(str(path), perf.catalog)


def _ctx(perf, inv, workload="coding", rps=4.0):
    trace = TraceGenerator(workload, 30.0, 0, arrival="poisson", rps=rps).at(rps)
    return make_context(inv, perf.llm("llama-30b"), perf, trace)


def test_the_network_default_and_a_node_override(tmp_path, perf):
    inv = _inventory(tmp_path, perf, network="nic_gbps = 25", a40="nic_gbps = 100")
    assert [t.nic_gbps for t in inv.types] == [100.0, 25.0]
    assert list(inv.nic_gbps()) == [100.0, 25.0, 25.0]
    assert [t.nic_gbps for t in _inventory(tmp_path, perf).types] == [None, None]
    assert list(inv.with_nic(10).nic_gbps()) == [10.0] * 3


@pytest.mark.parametrize("network, a40, field, line", [
    ("nic_gbps = 0", "", "network.nic_gbps", 4),
    ("", 'nic_gbps = "fast"', "nodes[1].nic_gbps", 7),
    ("", "nic_gbps = 1e9", "nodes[1].nic_gbps", 7),
    # a TOML integer past a float's range: was an internal error (OverflowError in math.isfinite)
    ("nic_gbps = 1" + "0" * 400, "", "network.nic_gbps", 4),
    ("", "price_usd_per_h = 1" + "0" * 400, "nodes[1].price_usd_per_h", 7),
])
def test_nic_nonsense_names_file_line_field(tmp_path, perf, network, a40, field, line):
    with pytest.raises(ProvisionerError) as err:
        _inventory(tmp_path, perf, network, a40)
    assert str(err.value).startswith(f"{tmp_path / 'inv.toml'}:{line}: {field}:"), err.value


def test_the_links_a_transfer_crosses(tmp_path, perf):
    """A NIC no faster than the pair's link makes that link moot; a faster one leaves it."""
    ph = _ctx(perf, _inventory(tmp_path, perf, network="nic_gbps = 40")).physics
    assert ph.links(0, 1) == (("out", 0), ("in", 1))
    assert ph.capacity_bytes_per_s(("in", 1)) == pytest.approx(40e9 / 8)
    ph = _ctx(perf, _inventory(tmp_path, perf, network="nic_gbps = 100")).physics
    assert ph.links(0, 1) == (("out", 0), ("in", 1), ("pair", 0, 1))
    ph = _ctx(perf, _inventory(tmp_path, perf)).physics
    assert ph.links(0, 1) == (("pair", 0, 1),)


# prefill on the A40 node and on the first 3090 Ti node, decode on the second
SENDERS, RECEIVER = [((0, 4),), ((1, 4),)], [((2, 4),)]


def test_transfers_from_two_nodes_share_the_receivers_nic(tmp_path, perf):
    """Without NICs the two senders reach the receiver over two links of their own; with
    them both queue on its one incoming card (and each on its own outgoing one)."""
    for network, shared in (("", False), ("nic_gbps = 40", True)):
        ctx = _ctx(perf, _inventory(tmp_path, perf, network=network))
        links = shared_links(ctx, SENDERS, RECEIVER)[:, 0, :]   # (senders, links)
        both = np.flatnonzero((links[0] > 0) & (links[1] > 0))
        assert len(both) == (1 if shared else 0), links


def test_routing_keeps_every_nic_within_its_bandwidth(tmp_path, perf):
    """At the plan's LP rate, the KV bytes each NIC carries stay within its bandwidth."""
    ctx = _ctx(perf, _inventory(tmp_path, perf, network="nic_gbps = 10"))
    plan, rate = search_plan(ctx, steps=20)
    pre, dec, r = plan_routing(ctx, plan, rate)
    links = shared_links(ctx, pre, dec)
    busy = np.einsum("i,ij,ijk->k", rate * r.prefill_share, r.decode_share, links) * ctx.scorer.w.mean_prompt
    assert 0 < rate and busy.max() <= 1.0 + 1e-6


def test_a_nic_never_raises_a_plans_rate(perf):
    """A NIC only adds links to share: every plan scores at most what it scores without."""
    inv = load_inventory("thunderserve-32gpu", perf.catalog)
    free, carded = _ctx(perf, inv), _ctx(perf, inv.with_nic(40))
    (free_plan, free_rate), (carded_plan, carded_rate) = search_plan(free, steps=20), search_plan(carded, steps=20)
    for plan in (free_plan, carded_plan):
        assert score(carded.scorer, plan) <= score(free.scorer, plan) + 1e-9
    assert carded_rate < free_rate   # coding's KV, ~3 GB a request, binds on 40-Gbps cards


def test_cli_nic_flag(capsys):
    assert run(["cloud", "--inventory", "thunderserve-32gpu", "--rps", "1", "--duration", "5",
                "--nic-gbps", "1e-9"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--nic-gbps must be between" in err, err
    assert run(["cloud", "--inventory", "thunderserve-32gpu", "--workload", "conversation", "--rps", "2",
                "--duration", "30", "--prefill-chunk-tokens", "0", "--nic-gbps", "40", "--json"]) == 0
    obj = json.loads(capsys.readouterr().out)
    assert set(obj["nic_gbps"].values()) == {40.0}


def test_the_answer_says_what_network_it_planned_on(tmp_path, perf, capsys):
    assert _inventory(tmp_path, perf).network_text() == \
        "40 Gbps per node pair, 0.5 ms; no network cards (each node pair's link its own)"
    assert _inventory(tmp_path, perf, network="nic_gbps = 25").network_text().endswith("network cards of 25 Gbps")
    mixed = _inventory(tmp_path, perf, network="nic_gbps = 25", a40="nic_gbps = 100").network_text()
    assert mixed.endswith("network cards a40-8x 100 Gbps, rtx3090ti-4x 25 Gbps"), mixed
    report = tmp_path / "plan.html"
    assert run(["cloud", "--inventory", "thunderserve-32gpu", "--workload", "conversation", "--rps", "2",
                "--duration", "30", "--prefill-chunk-tokens", "0", "--nic-gbps", "40", "--kv-bits", "4",
                "--report", str(report)]) == 0
    said = "40 Gbps per node pair, 0.5 ms; network cards of 40 Gbps; 4-bit KV on the wire"
    assert f"network: {said}" in capsys.readouterr().out
    assert f"Network: {said}." in report.read_text()
