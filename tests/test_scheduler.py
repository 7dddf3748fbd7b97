"""On-demand schedulers (jsq, llumnix-dispatch, llumnix) in the discrete-event engine:
hand-computed preemption and migration cases on unit-time iterations, conservation and
the default's invariance on shipped workloads."""

from __future__ import annotations

import numpy as np
import pytest

from perfmodels import N_COEF
from provisioner.designs import make_design
from provisioner.errors import ProvisionerError
from provisioner.schedulers import SCHEDULERS
from provisioner.sim import SimInputs, simulate
from provisioner.sim.testing import des_simulate_design, run_des
from workloads import TraceGenerator


def unit_inputs(kv_cap, arrivals, prompts, outputs, scheduler="jsq", machines=1,
                s_per_token=0.01, setup_s=0.01) -> SimInputs:
    """One baseline design whose every iteration takes exactly 1 s (only the fixed
    weight-read term), with `machines` mixed machines of `kv_cap` KV tokens each."""
    coef = np.zeros((1, 2, N_COEF))
    coef[:, :, 4] = 1.0       # s_weights_read: every iteration 1 s
    coef[:, :, 8] = 1e9       # allreduce knee far away
    return SimInputs(
        n_machines=np.array([[machines, 0]]), coef=coef, kv_cap_tokens=np.full((1, 2), float(kv_cap)),
        batch_cap_tokens=np.array([2048.0]), chunk_tokens=np.zeros(1), allow_borrow=np.zeros(1, bool),
        mps_share=np.zeros(1), kv_s_per_token=np.array([s_per_token]), kv_setup_s=np.array([setup_s]),
        n_layers=80, layerwise_min_tokens=512.0, overload_tokens=np.array([8192.0]),
        arrival_s=np.asarray(arrivals, float), prompt_tokens=np.asarray(prompts, np.int64),
        output_tokens=np.asarray(outputs, np.int64),
        scheduler=np.array([SCHEDULERS.index(scheduler)]))


def test_preemption_by_recompute_at_the_hand_computed_time():
    # Two 8-token prompts of 6 output tokens on a 20-token machine: both prefill in [0, 1]
    # (16 <= 99% of 20), hold 18, 20, then 22 > 20 at t = 3: B (admitted last) is
    # preempted with 3 tokens out; its recompute over 8 + 3 tokens waits for A to finish
    # at 6, runs in [6, 7] emitting token 4, and tokens 5, 6 come at 8, 9.
    inputs = unit_inputs(20, [0.0, 0.0], [8, 8], [6, 6])
    out = run_des(inputs)
    np.testing.assert_allclose(out.first_token_s[0], [1.0, 1.0])
    np.testing.assert_allclose(out.finish_s[0], [6.0, 9.0])
    preemptions, migrations, downtime_s, _, recomputed = out.scheduler_stats[0]
    assert (preemptions, migrations, downtime_s, recomputed) == (1, 0, 0.0, 11)
    cl = des_simulate_design(inputs, 0)
    assert cl.decode_tokens + cl.prefills_done == 12   # 5 + 4 decodes, 3 prefills (one a recompute)


def test_without_memory_pressure_jsq_is_the_least_work_rule():
    trace = TraceGenerator("conversation", 20, 3).at(6.0)
    times = {}
    for name in ("least-work", "jsq"):
        row = simulate(make_design("baseline-a100", machines=3, scheduler=name), trace, "llama2-70b", engine="des")
        times[name] = row[["ttft_p50_s", "ttft_p99_s", "tbt_p99_s", "e2e_p99_s"]].to_numpy()
    np.testing.assert_allclose(times["jsq"], times["least-work"], rtol=1e-12)


def migration_case(c_prompt, outputs=100):
    # A (600 tokens) and C go to machine 0 (freeness ties to the lowest index), B (600
    # tokens, 2 outputs) to machine 1. With C = 350, machine 0 holds 952 of 1000 tokens
    # after the prefill: freeness 24 < 32 and machine 1's is 400.
    return unit_inputs(1000, [0.0, 0.0, 0.0], [600, 600, c_prompt], [outputs, 2, outputs], scheduler="llumnix",
                       machines=2)


def test_migration_stages_and_downtime_by_hand():
    # C starts moving at t = 1 with 351 tokens: stage 0 copies them in 0.01 + 3.51 s (ends
    # 4.52, seen at the iteration end 5); stage 1 copies the 4 tokens emitted meanwhile
    # (0.05 s, seen at 6); 1 new token: the final stage, downtime 0.01 + 0.01 s. C
    # leaves machine 0 at 6 with 6 tokens out and decodes its other 94 on machine 1 from 6.02.
    out = run_des(migration_case(350))
    preemptions, migrations, downtime_s, _, _ = out.scheduler_stats[0]
    assert (preemptions, migrations) == (0, 1)
    assert downtime_s == pytest.approx(0.02)
    np.testing.assert_allclose(out.first_token_s[0], [1.0, 1.0, 1.0])
    np.testing.assert_allclose(out.finish_s[0], [100.0, 2.0, 100.02])


def test_no_migration_while_the_source_has_memory():
    # C = 300, 10 outputs: machine 0 holds 902 to 920 tokens, freeness 49 down to 40 >= 32:
    # nothing moves (with 100 outputs it would fall below 32 and C would move).
    out = run_des(migration_case(300, outputs=10))
    assert out.scheduler_stats[0][1] == 0
    np.testing.assert_allclose(out.finish_s[0], [10.0, 2.0, 10.0])
    assert run_des(migration_case(300)).scheduler_stats[0][1] == 1


@pytest.mark.parametrize("name", ["jsq", "llumnix-dispatch", "llumnix", "jsq-migration"])
def test_tokens_are_conserved_under_preemption_and_migration(name):
    trace = TraceGenerator("conversation", 60, 0).at(20.0)
    from provisioner.sim import build_inputs
    from provisioner.designs import DesignBatch
    from perfmodels import LatencyModel
    perf = LatencyModel()
    inputs = build_inputs(DesignBatch.from_designs([make_design("baseline-a100", machines=10, scheduler=name)]),
                          trace, perf.llm("bloom-176b"), perf)
    cl = des_simulate_design(inputs, 0)
    assert cl.decode_tokens + cl.prefills_done == int(trace.output_tokens.sum())
    assert sum(mc.preemptions for mc in cl.machines) > 0   # this load does preempt
    assert np.all(np.array(cl.finish) >= np.array(cl.first))
    if name.endswith("migration") or name == "llumnix":
        assert cl.migrations.count > 0


def test_fluid_engine_declines_the_on_demand_schedulers():
    trace = TraceGenerator("conversation", 10, 0).at(4.0)
    with pytest.raises(ProvisionerError, match="fluid engine does not model --scheduler llumnix.*--engine des"):
        simulate(make_design("baseline-a100", machines=2, scheduler="llumnix"), trace, "llama2-70b")


def test_every_family_takes_every_scheduler_and_an_unknown_one_is_refused():
    # Until issue 14 the split families refused the on-demand policies ("baseline families").
    # splitwisesim replays SplitwiseSim, which has no co-located Splitwiser.
    for family, prompt, token in (("splitwise-hh", 2, 2), ("splitwise-ha", 1, 1), ("splitwiser-h100", 2, 0)):
        for name in SCHEDULERS:
            if name == "splitwisesim" and family.startswith("splitwiser"):
                with pytest.raises(ProvisionerError, match="no co-located Splitwiser"):
                    make_design(family, prompt, token, scheduler=name)
                continue
            assert make_design(family, prompt, token, scheduler=name).scheduler == name
    with pytest.raises(ProvisionerError, match="^scheduler must be one of"):   # the library names its parameter
        make_design("baseline-a100", machines=2, scheduler="fastest")


def test_high_priority_requests_go_first():
    # 10% high priority on a loaded cluster: their prompts jump the queue and their
    # instances keep headroom, so their TTFT is a fraction of the others'.
    trace = TraceGenerator("conversation", 60, 0).at(20.0)
    row = simulate(make_design("baseline-h100", machines=6, scheduler="llumnix"), trace, "bloom-176b",
                   engine="des", high_priority_fraction=0.1).iloc[0]
    assert row["ttft_p50_s_high"] < 0.5 * row["ttft_p50_s_low"]
    assert row["ttft_p99_s_high"] < row["ttft_p99_s_low"]
    with pytest.raises(ProvisionerError, match="^high_priority_fraction must be a number in"):
        simulate(make_design("baseline-h100", machines=6, scheduler="llumnix"), trace, "bloom-176b",
                 engine="des", high_priority_fraction=1.5)
