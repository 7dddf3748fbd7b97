"""A decode replica's KV admission in the analytic score (`KvAdmission`, `Scorer.decode_limits`):
the occupancy law, what it counts, and the rate it gives against the DES."""

from __future__ import annotations

import numpy as np
import pytest

from perfmodels import LatencyModel
from provisioner.cloud import (KV_UNITS, KvAdmission, Workload, load_inventory, make_context, plan_routing,
                               simulate_plan, size_sample)
from workloads import TraceGenerator


@pytest.fixture(scope="module")
def perf():
    return LatencyModel()


def _workload(prompt, output, tbt_p99_s=1.0, e2e_p99_s=100.0):
    prompt, output = np.asarray(prompt), np.asarray(output)
    r = len(prompt)
    return Workload(prompt, output, ttft_limit_s=1.0, tbt_limit_s=0.1, e2e_limit_s=10.0,
                    ttft_p50_s=np.full(r, 0.5), tbt_p99_s=np.full(r, tbt_p99_s), e2e_p99_s=np.full(r, e2e_p99_s))


def _erlang_b(servers: int, offered: float) -> float:
    b = 1.0
    for k in range(1, servers + 1):
        b = offered * b / (k + offered * b)
    return b


def test_one_request_size_blocks_as_erlang_b():
    """Requests of one size, a quarter of the budget each: the budget is four servers, and
    the share of arrivals that find it full is Erlang B at the offered requests in service
    (load x (n - 1) iterations)."""
    w = _workload(np.full(50, 899), np.full(50, 101))     # s + n = 1000 tokens, 100 iterations
    adm = KvAdmission.of(w, 4000.0)
    assert np.all(adm.units == KV_UNITS // 4)
    for load in (0.005, 0.02, 0.035):   # up to 3.5 of the 4 servers busy (0.04: all four)
        assert adm.blocked(load) == pytest.approx(np.full(50, _erlang_b(4, load * 100)), rel=1e-5)


def test_misses_grow_with_load_and_with_a_slower_step(perf):
    sizes = TraceGenerator("coding", 120.0, 0, arrival="poisson", rps=4.0).at(4.0)
    w = _workload(sizes.prompt_tokens[:1000], sizes.output_tokens[:1000], tbt_p99_s=0.4, e2e_p99_s=200.0)
    adm = KvAdmission.of(w, 13_000.0)
    loads = np.linspace(0.05, 0.95, 10) * adm.full_load
    misses = [adm.miss_share(c, 0.05, c / 0.05) for c in loads]
    assert misses[0] < 0.01 and np.all(np.diff(misses) > 0)
    assert adm.miss_share(loads[3], 0.08, loads[3] / 0.08) > misses[3]
    assert adm.miss_share(adm.full_load, 0.05, adm.full_load / 0.05) == 1.0


def test_a_request_larger_than_the_budget_books_nothing_here():
    """A request no replica of this size holds is the plan's to route elsewhere or count as
    unservable (`_simulate.unservable`): it neither fills this budget nor counts as its miss,
    so a tenth of such requests does not make every replica worthless."""
    prompt = np.where(np.arange(100) % 10 == 0, 200_000, 1000)
    big = KvAdmission.of(_workload(prompt, np.full(100, 101)), 13_000.0)
    small = KvAdmission.of(_workload(np.full(90, 1000), np.full(90, 101)), 13_000.0)
    assert len(big.units) == 90 and big.unit_steps == pytest.approx(small.unit_steps * 90 / 100)
    assert big.miss_share(0.2 * big.full_load, 0.05, 1.0) < 0.01


def _limits(perf, workload, spec):
    inv = load_inventory("thunderserve-32gpu", perf.catalog)
    ctx = make_context(inv, perf.llm("llama-30b"), perf,
                       size_sample(TraceGenerator(workload, 120.0, 0, arrival="poisson", rps=4.0), 4.0))
    names = [n for n, _ in inv.nodes]
    group = tuple(sorted((names.index(node), tp) for node, tp in spec))
    return ctx, group, ctx.scorer.decode_limits(group)


def test_long_prompts_in_a_small_budget_are_limited_by_admission(perf):
    """Coding on a 13k-token 3090 Ti TP4 replica: the mean request holds 2.3k tokens (five
    slots), but one 7k-token prompt fills half the budget and the queue waits behind it.
    Conversation on a 67k-token one: the slots rule binds, the admission rule allows more."""
    ctx, group, coding = _limits(perf, "coding", [("rtx3090ti-4x-0", 4)])
    assert coding["admission"] < 0.7 * coding["slots"]
    assert ctx.scorer.decode(group)[0] == pytest.approx(coding["admission"], rel=1e-6)
    ctx, group, conversation = _limits(perf, "conversation", [("rtx3090ti-4x-0", 4), ("rtx3090ti-4x-1", 4)])
    assert conversation["slots"] < conversation["admission"]
    assert ctx.scorer.decode(group)[0] == conversation["slots"]


def test_the_admission_rate_holds_in_the_des_where_the_slots_rate_does_not(perf):
    """That coding replica as the only decode replica behind four prefill replicas and a
    400-Gbps network (neither side's transfers nor prefill binding): at the rate the score
    gives it the DES meets about 99% of the deadlines; at the slots rule's rate (what the
    score gave before) it misses several times the 1% allowed."""
    inv = load_inventory("thunderserve-32gpu", perf.catalog).with_bandwidth(400.0)
    ctx = make_context(inv, perf.llm("llama-30b"), perf,
                       size_sample(TraceGenerator("coding", 120.0, 0, arrival="poisson", rps=4.0), 4.0))
    names = [n for n, _ in inv.nodes]
    prefill = [(((names.index(n), 4),), "prefill") for n in ("a40-8x-0", "a40-8x-0", "a6000-4x-1", "a5000-4x-1")]
    plan = prefill + [(((names.index("rtx3090ti-4x-0"), 4),), "decode")]
    decode = plan[-1][0]
    limits = ctx.scorer.decode_limits(decode)

    def attainment(rps):
        trace = TraceGenerator("coding", 1500.0, 0, arrival="poisson", rps=rps).at(rps)
        return simulate_plan(ctx, plan, trace, routing=plan_routing(ctx, plan, rps))["slo_attainment"]["all"]

    assert attainment(ctx.scorer.decode(decode)[0]) >= 0.975
    assert attainment(limits["slots"]) <= 0.95
