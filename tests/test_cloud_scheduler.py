"""Cloud plans under an on-demand scheduler (SEMANTICS.md, "Cloud plans under an on-demand
scheduler"; CONTRACTS.md item 9): KV on demand, dispatch by freeness among the routed
replicas that hold a request, migration over each replica pair's own link."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from perfmodels import N_COEF
from provisioner.schedulers import scheduler_codes
from provisioner.sim import ServerPlan, SimInputs
from provisioner.sim.testing import run_des

PROVISION = str(Path(sys.executable).with_name("provision"))
TAU_S = 0.01          # a decode iteration, whatever the batch (fixed HBM time)
SETUP_S, PER_TOKEN_S = 0.002, 1e-5   # migration link decode 1 -> decode 2


def _plan(decode_kv, decode_share, migration=True):
    """One fast prefill server and two decode servers of `decode_kv` KV tokens."""
    prefill, decode = np.zeros(N_COEF), np.zeros(N_COEF)
    prefill[0], decode[4] = 1e-6, TAU_S
    link = np.zeros((3, 3, 2))
    link[1, 2] = link[2, 1] = (PER_TOKEN_S, SETUP_S)
    return ServerPlan(coef=np.stack([prefill, decode, decode]), kv_cap_tokens=np.array([1e6, *decode_kv]),
                      prefill_share=np.array([1.0]), decode_share=np.array([decode_share], float),
                      kv_setup_s=np.zeros((1, 2)), kv_s_per_token=np.zeros((1, 2)),
                      migration_link=link if migration else None)


def _run(plan, policy, arrival_s, prompt_tokens, output_tokens):
    inputs = SimInputs(
        n_machines=np.array([[1, 2]], np.int64), coef=np.stack([plan.coef[:1], plan.coef[-1:]], axis=1),
        kv_cap_tokens=np.array([[plan.kv_cap_tokens[0], plan.kv_cap_tokens[-1]]]),
        batch_cap_tokens=np.array([2048.0]), chunk_tokens=np.zeros(1), allow_borrow=np.zeros(1, bool),
        mps_share=np.zeros(1), kv_s_per_token=np.zeros(1), kv_setup_s=np.zeros(1), n_layers=60,
        layerwise_min_tokens=512.0, overload_tokens=np.array([np.inf]), arrival_s=np.asarray(arrival_s, float),
        prompt_tokens=np.asarray(prompt_tokens, np.int64), output_tokens=np.asarray(output_tokens, np.int64),
        servers=(plan,), scheduler=scheduler_codes([policy]))
    return run_des(inputs)


def test_freeness_sends_decodes_to_the_routed_replica_with_room():
    """Equal decode shares, 2k and 1M KV tokens: least-work's booked-share rule alternates
    the idle replicas; dispatch by freeness (KV free per request) sends every request to the
    large one. Both finish every request."""
    args = (np.arange(6) * 2.0, [100] * 6, [20] * 6)
    by_share = _run(_plan([2000, 1e6], [0.5, 0.5]), "jsq", *args)
    by_freeness = _run(_plan([2000, 1e6], [0.5, 0.5]), "llumnix-dispatch", *args)
    assert np.all(by_share.drained_s[0, 1:3] > 0)
    assert by_freeness.drained_s[0, 1] == 0 and by_freeness.drained_s[0, 2] > 0
    for out in (by_share, by_freeness):
        assert np.all(np.isfinite(out.finish_s[0]))


def test_migration_moves_a_request_over_the_pairs_own_link():
    """The routing sends every decode to replica 1 (1,500 KV tokens); three requests of 200 +
    400 tokens outgrow it, and llumnix moves one to replica 2 (1M tokens, routed no
    decode) before it must preempt. A stage's copy takes the pair's setup + tokens x s per
    token, so the downtime (the last stage: one token) is 2.01 ms a migration: the
    design's own link (0 s here) would give 0."""
    plan = _plan([1500, 1e6], [1.0, 0.0])
    out = _run(plan, "llumnix", [0.0, 0.001, 0.002], [200] * 3, [400] * 3)
    preemptions, migrations, downtime_s = out.scheduler_stats[0, :3]
    assert migrations >= 1 and preemptions == 0
    assert downtime_s == pytest.approx(migrations * (SETUP_S + PER_TOKEN_S), rel=1e-9)
    assert out.drained_s[0, 2] > 0 and np.all(np.isfinite(out.finish_s[0]))
    without = _run(plan, "jsq", [0.0, 0.001, 0.002], [200] * 3, [400] * 3)   # no migration: it preempts
    assert without.scheduler_stats[0, 0] >= 1 and without.scheduler_stats[0, 1] == 0


def test_a_migrating_plan_needs_its_pair_links():
    with pytest.raises(ValueError, match="migration_link"):
        _run(_plan([1500, 1e6], [1.0, 0.0], migration=False), "llumnix", [0.0], [10], [2])


def test_cli_cloud_runs_llumnix_and_reports_its_counts():
    """`provision cloud --scheduler llumnix` (CONTRACTS.md items 4 and 9): the plan's keys, the
    policy and its counts; the search and its DES re-scoring under llumnix."""
    proc = subprocess.run([PROVISION, "cloud", "--inventory", "thunderserve-32gpu", "--workload", "conversation",
                           "--rps", "2", "--duration", "30", "--prefill-chunk-tokens", "0", "--scheduler", "llumnix",
                           "--json"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    answer = json.loads(proc.stdout)
    assert answer["scheduler"] == "llumnix" and answer["replicas"]
    assert set(answer["scheduler_stats"]) == {"preemptions", "migrations", "migration_downtime_s",
                                              "fragmentation_mean", "recomputed_tokens"}
    assert 0 <= answer["slo_attainment"]["all"] <= 1 and answer["sustained_rps"] > 0
