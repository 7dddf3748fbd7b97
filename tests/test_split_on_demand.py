"""The on-demand schedulers on the split families (SEMANTICS.md, "Schedulers", split
designs): Splitwise's prompt + token pools and Splitwiser's co-located processes, in the
discrete-event engine. A hand-computed recompute on the prompt pool, KV bounds and token
conservation on shipped workloads, llumnix against jsq, and the least-work rule kept."""

from __future__ import annotations

import numpy as np
import pytest

from perfmodels import N_COEF, LatencyModel
from provisioner.designs import FAMILIES, DesignBatch, make_design
from provisioner.errors import ProvisionerError
from provisioner.schedulers import SCHEDULERS
from provisioner.search import ProvisionRequest
from provisioner.sim import SimInputs, build_inputs, simulate
from provisioner.sim.testing import DesTokenMachine, des_simulate_design, run_des
from workloads import TraceGenerator

BINDING = ("splitwise-hh", 3, 2, 20.0)       # bloom-176b conversation: the token pool's KV binds
SPLITWISER_BINDING = ("splitwiser-h100", 2, 0, 10.0)


def split_unit_inputs(kv_cap, arrivals, prompts, outputs, scheduler="jsq", setup_s=0.5) -> SimInputs:
    """One prompt and one token machine whose every iteration takes exactly 1 s; a KV
    transfer of a short prompt is visible for `setup_s` (no per-token time)."""
    coef = np.zeros((1, 2, N_COEF))
    coef[:, :, 4] = 1.0       # s_weights_read: every iteration 1 s
    coef[:, :, 8] = 1e9       # allreduce knee far away
    return SimInputs(
        n_machines=np.array([[1, 1]]), coef=coef, kv_cap_tokens=np.full((1, 2), float(kv_cap)),
        batch_cap_tokens=np.array([2048.0]), chunk_tokens=np.zeros(1), allow_borrow=np.ones(1, bool),
        mps_share=np.zeros(1), kv_s_per_token=np.zeros(1), kv_setup_s=np.array([setup_s]),
        n_layers=80, layerwise_min_tokens=512.0, overload_tokens=np.array([8192.0]),
        arrival_s=np.asarray(arrivals, float), prompt_tokens=np.asarray(prompts, np.int64),
        output_tokens=np.asarray(outputs, np.int64), scheduler=np.array([SCHEDULERS.index(scheduler)]))


def test_a_preempted_decode_recomputes_on_the_prompt_pool_and_transfers_again():
    # A and B (8-token prompts, 6 outputs) prefill in [0, 1]; their KV reaches the 20-token
    # token machine at 1.5. It holds 18, 20, then 22 > 20 at 3.5: B (admitted last) is
    # preempted with 3 tokens out. Its recompute over 8 + 3 tokens runs on the prompt
    # machine in [3.5, 4.5] (token 4) and transfers again (visible at 5.0); A (13 tokens)
    # leaves no room for B's 12 until A finishes at 6.5; tokens 5, 6 come at 7.5, 8.5.
    inputs = split_unit_inputs(20, [0.0, 0.0], [8, 8], [6, 6])
    out = run_des(inputs)
    np.testing.assert_allclose(out.first_token_s[0], [1.0, 1.0])
    np.testing.assert_allclose(out.finish_s[0], [6.5, 8.5])
    preemptions, migrations, downtime_s, _, recomputed = out.scheduler_stats[0]
    assert (preemptions, migrations, downtime_s, recomputed) == (1, 0, 0.0, 11)
    assert out.kv_transfers[0] == 3 and out.kv_visible_s_sum[0] == pytest.approx(1.5)
    cl = des_simulate_design(inputs, 0)
    assert cl.decode_tokens + cl.prefills_done == 12   # 5 + 4 decodes, 3 prefills (one a recompute)
    assert cl.prefill_on == [0, 0] and cl.decode_on == [1, 1]


def binding_inputs(family, prompt, token, rps, scheduler, high_priority=None):
    trace = TraceGenerator("conversation", 30, 0).at(rps)
    perf = LatencyModel()
    design = make_design(family, prompt, token, scheduler=scheduler)
    return trace, build_inputs(DesignBatch.from_designs([design]), trace, perf.llm("bloom-176b"), perf,
                               high_priority=high_priority)


@pytest.mark.parametrize("case", [(*BINDING, "jsq"), (*BINDING, "llumnix"), (*SPLITWISER_BINDING, "jsq"),
                                  (*SPLITWISER_BINDING, "jsq-migration")])
def test_token_kv_stays_within_capacity_and_tokens_are_conserved(case, monkeypatch):
    *design, scheduler = case
    trace, inputs = binding_inputs(*design, scheduler)
    over = []
    real = DesTokenMachine.take_work

    def checked(mc, S, N, local):
        work = real(mc, S, N, local)
        if mc.running > 1 and mc.ctx + mc.incoming > mc.kv_cap:   # a lone request always runs
            over.append((mc.index, mc.ctx, mc.incoming, mc.kv_cap))
        return work

    monkeypatch.setattr(DesTokenMachine, "take_work", checked)
    cl = des_simulate_design(inputs, 0)
    assert not over
    assert cl.decode_tokens + cl.prefills_done == int(trace.output_tokens.sum())
    assert sum(mc.preemptions for mc in cl.machines) + (cl.migrations.count if cl.migrations else 0) > 0
    assert np.all(np.array(cl.finish) >= np.array(cl.first))
    assert all(mc.queued == 0 and mc.queued_kv == 0 and mc.ctx == 0 for mc in cl.tokens)   # all drained
    assert not cl.reserved_in and not cl.hop


def test_llumnix_preempts_less_than_jsq_where_token_kv_binds():
    family, prompt, token, rps = BINDING
    trace = TraceGenerator("conversation", 30, 0).at(rps)
    rows = {name: simulate(make_design(family, prompt, token, scheduler=name), trace, "bloom-176b",
                           engine="des").iloc[0] for name in ("jsq", "llumnix")}
    assert rows["jsq"]["preemptions"] >= 5 and rows["jsq"]["migrations"] == 0
    assert rows["llumnix"]["preemptions"] < rows["jsq"]["preemptions"] / 2
    assert rows["llumnix"]["migrations"] > 0 and rows["llumnix"]["migration_downtime_s"] > 0
    assert rows["llumnix"]["recomputed_tokens"] < rows["jsq"]["recomputed_tokens"]
    again = simulate(make_design(family, prompt, token, scheduler="llumnix"), trace, "bloom-176b", engine="des")
    assert again.iloc[0].equals(rows["llumnix"])   # seeded: the same run twice


@pytest.mark.parametrize("family, prompt, token", [("splitwise-hh", 2, 2), ("splitwise-ha", 2, 2),
                                                   ("splitwiser-h100", 2, 0)])
def test_without_memory_pressure_jsq_is_the_least_work_rule_on_split_families(family, prompt, token):
    # Nothing preempts and nothing is lent, so on-demand KV admits what the reservation did.
    trace = TraceGenerator("conversation", 30, 0).at(4.0)
    cols = ["ttft_p50_s", "ttft_p99_s", "tbt_p99_s", "e2e_p99_s", "busy_s_prompt", "busy_s_token"]
    rows = {name: simulate(make_design(family, prompt, token, scheduler=name), trace, "llama2-70b",
                           engine="des").iloc[0] for name in ("least-work", "jsq")}
    cols = [c for c in cols if c in rows["jsq"].index]
    assert rows["jsq"]["preemptions"] == 0
    np.testing.assert_array_equal(rows["jsq"][cols].to_numpy(float), rows["least-work"][cols].to_numpy(float))


def test_least_work_split_results_are_those_before_the_on_demand_split_engine():
    # Pinned from the commit before this engine existed (63d3a82): the default rule's
    # split and Splitwiser results do not move.
    trace = TraceGenerator("conversation", 30, 0).at(10.0)
    for family, prompt, token, pinned in (("splitwise-hh", 2, 1, (4.733703, 13.489812, 0.918063, 73.648261)),
                                          ("splitwiser-h100", 2, 0, (4.501944, 9.845411, 0.372706, 43.334629))):
        row = simulate(make_design(family, prompt, token), trace, "bloom-176b", engine="des").iloc[0]
        got = row[["ttft_p50_s", "ttft_p99_s", "tbt_p99_s", "e2e_p99_s"]].to_numpy(float)
        np.testing.assert_allclose(got, pinned, atol=5e-7)


def test_high_priority_prompts_jump_the_prompt_queue_on_split_families():
    family, prompt, token, _ = BINDING
    trace = TraceGenerator("conversation", 30, 0).at(30.0)
    row = simulate(make_design(family, 2, token, scheduler="llumnix"), trace, "bloom-176b", engine="des",
                   high_priority_fraction=0.1).iloc[0]
    assert row["ttft_p50_s_high"] < row["ttft_p50_s_low"]


def test_a_search_request_takes_an_on_demand_policy_for_every_family():
    request = ProvisionRequest(goal="cost", rps=4, families=FAMILIES, duration_s=20, scheduler="llumnix")
    assert request.families == FAMILIES and request.scheduler == "llumnix"
    with pytest.raises(ProvisionerError, match="scheduler"):
        ProvisionRequest(goal="cost", rps=4, families=("splitwise-hh",), duration_s=20, scheduler="fifo")
