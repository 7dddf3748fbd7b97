"""The fluid engine against the discrete-event engine, its early stop, and `simulate`'s table.

The full fidelity study (96 designs, 120-s traces) is `benchmarks/fidelity.py`; here six
small designs, one per family, with a few hundred requests each.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from provisioner import ProvisionerError
from provisioner.designs import make_design
from provisioner.sim import simulate, simulate_requests, solo_latencies
from provisioner.sim.testing import percentiles_into
from provisioner.slo import SLO
from workloads import Trace, make_workload

MODEL = "bloom-176b"
TOL = {50: 0.05, 90: 0.10, 99: 0.20}   # the tolerances (median over designs)
METRICS = ("ttft", "tbt", "e2e")


# One small design per family at 0.6-0.9 x its saturation rate (benchmarks/fidelity.py),
# 350-450 requests each.
FIDELITY_CASES = [
    (make_design("baseline-a100", machines=4), "coding", 4.0, 90.0),
    (make_design("baseline-h100", machines=3), "conversation", 4.5, 80.0),
    (make_design("splitwise-aa", 3, 3), "conversation", 5.0, 80.0),
    (make_design("splitwise-hh", 6, 2), "coding", 10.0, 40.0),
    (make_design("splitwise-ha", 5, 2), "coding", 7.5, 50.0),
    (make_design("splitwise-hhcap", 3, 3), "conversation", 11.0, 36.0),
]


@pytest.fixture(scope="module")
def fidelity_rows(perf):
    rows = []
    for design, workload, rps, duration in FIDELITY_CASES:
        trace = make_workload(workload, rps, duration_s=duration, seed=0)
        f = simulate([design], trace, MODEL, engine="fluid", perf=perf).iloc[0]
        d = simulate([design], trace, MODEL, engine="des", perf=perf).iloc[0]
        rows.append((design, len(trace), f, d))
    return rows


@pytest.mark.parametrize("p", [50, 90, 99])
@pytest.mark.parametrize("metric", METRICS)
def test_fluid_matches_des_percentiles(fidelity_rows, metric, p):
    col = f"{metric}_p{p}_s"
    rel = np.array([abs(f[col] - d[col]) / d[col] for _, _, f, d in fidelity_rows])
    assert all(300 <= n <= 500 for _, n, _, _ in fidelity_rows)
    assert np.median(rel) <= TOL[p], rel
    assert rel.max() <= 3 * TOL[p], rel      # no single design far off either


def test_fluid_matches_des_slo_verdicts(fidelity_rows):
    assert [bool(f["slo_met"]) for *_, f, _ in fidelity_rows] == [bool(d["slo_met"]) for *_, d in fidelity_rows]


def test_fluid_matches_des_pool_statistics(fidelity_rows):
    for design, _, f, d in fidelity_rows:
        assert f["prompt_pool_utilization"] == pytest.approx(d["prompt_pool_utilization"], rel=0.05, abs=0.01)
        assert f["makespan_s"] == pytest.approx(d["makespan_s"], rel=0.05)
        if design.token_machines:
            assert f["token_pool_utilization"] == pytest.approx(d["token_pool_utilization"], rel=0.05, abs=0.01)
            assert f["kv_transfer_visible_mean_s"] == pytest.approx(d["kv_transfer_visible_mean_s"], rel=0.05)


# ------------------------------------------------------------------ early stop
def _stop_designs():
    return ([make_design("splitwise-hh", p, t) for p in (3, 5, 7, 9, 12) for t in (1, 2, 3)]
            + [make_design("baseline-a100", machines=m) for m in (8, 12, 16)]
            + [make_design("baseline-h100", machines=m) for m in (5, 7)]
            + [make_design("splitwise-ha", 8, 2), make_design("splitwise-aa", 12, 3),
               make_design("splitwise-hhcap", 8, 3), make_design("splitwise-hhcap", 10, 4)])


@pytest.mark.parametrize("slo_scale", [1.0, 2.0])
def test_early_stop_never_changes_the_verdict(perf, slo_scale):
    trace = make_workload("coding", 20, duration_s=60, seed=0)
    designs = _stop_designs()
    slo = SLO().scaled(slo_scale)
    full = simulate(designs, trace, MODEL, slo=slo, perf=perf)
    fast = simulate(designs, trace, MODEL, slo=slo, perf=perf, stop_infeasible=True)
    assert len(designs) >= 20
    assert full["slo_met"].any() and not full["slo_met"].all()
    np.testing.assert_array_equal(fast["slo_met"].to_numpy(), full["slo_met"].to_numpy())
    stopped = fast["stopped_early"].to_numpy(bool)
    assert stopped.any() and not full["stopped_early"].any()
    assert not full["slo_met"][stopped].any()
    # designs that ran to the end are scored exactly as in the full run
    cols = [f"{m}_p{p}_s" for m in METRICS for p in (50, 90, 99)] + ["min_margin", "throughput_rps"]
    np.testing.assert_array_equal(fast.loc[~stopped, cols].to_numpy(), full.loc[~stopped, cols].to_numpy())


# ------------------------------------------------------------------ the result table
def test_simulate_columns_and_units(perf):
    trace = make_workload("conversation", 3.0, duration_s=40, seed=2)
    designs = [make_design("baseline-h100", machines=2), make_design("splitwise-ha", 2, 2, token_power_cap=0.7)]
    slo = SLO()
    r = simulate(designs, trace, MODEL, slo=slo, perf=perf)
    assert len(r) == 2 and list(r["engine"]) == ["fluid", "fluid"]
    pct = [f"{m}_p{p}_s" for m in METRICS for p in (50, 90, 99)]
    for col in (pct + [f"slowdown_{m}_p{p}" for m in METRICS for p in (50, 90, 99)]
                + [f"margin_{m}_p{p}" for m in METRICS for p in (50, 90, 99)]
                + ["slo_met", "binding_slo", "min_margin", "requests", "throughput_rps", "makespan_s",
                   "prompt_pool_utilization", "token_pool_utilization", "prompt_pool_mean_decode_batch",
                   "token_pool_mean_decode_batch", "borrowed_decodes", "borrowed_prefills",
                   "kv_transfer_visible_mean_s", "cost_usd_per_h", "power_kw", "energy_wh_per_request",
                   "stopped_early", "family", "prompt_machines", "token_machines"]):
        assert col in r.columns, col
    # percentiles in seconds, ordered; they recompute from the per-request times
    batch, inputs, out = simulate_requests(designs, trace, MODEL, perf=perf)
    ttft = out.first_token_s - trace.arrival_s
    e2e = out.finish_s - trace.arrival_s
    np.testing.assert_allclose(r[["ttft_p50_s", "ttft_p90_s", "ttft_p99_s"]].to_numpy(),
                               np.percentile(ttft, [50, 90, 99], axis=1).T, rtol=1e-12)
    np.testing.assert_allclose(r["e2e_p50_s"], np.percentile(e2e, 50, axis=1), rtol=1e-12)
    solo_ttft, solo_tbt, solo_e2e = solo_latencies(trace, perf.llm(MODEL), perf, slo)
    assert 0.05 < np.median(solo_ttft) < 2.0                   # seconds, not ms
    np.testing.assert_allclose(r["slowdown_ttft_p90"], np.percentile(ttft / solo_ttft, 90, axis=1), rtol=1e-12)
    for m in METRICS:
        v = r[[f"{m}_p{p}_s" for p in (50, 90, 99)]].to_numpy()
        assert np.all(v > 0) and np.all(np.diff(v, axis=1) >= 0)
        for j, p in enumerate((50, 90, 99)):
            limit = getattr(slo, m)[j]
            np.testing.assert_allclose(r[f"margin_{m}_p{p}"], limit / r[f"slowdown_{m}_p{p}"] - 1, rtol=1e-12)
    margins = r[[c for c in r.columns if c.startswith("margin_")]].to_numpy()
    np.testing.assert_allclose(r["min_margin"], margins.min(axis=1))
    assert list(r["slo_met"]) == list(r["min_margin"] >= 0)
    # rates, utilizations, cost and power
    assert np.all(r["requests"] == len(trace))
    np.testing.assert_allclose(r["makespan_s"], np.nanmax(out.finish_s, axis=1) - trace.arrival_s[0])
    np.testing.assert_allclose(r["throughput_rps"], len(trace) / r["makespan_s"])
    assert r["makespan_s"].min() >= trace.arrival_s[-1] - trace.arrival_s[0]
    assert np.all((r["prompt_pool_utilization"] > 0) & (r["prompt_pool_utilization"] <= 1))
    assert np.isnan(r["token_pool_utilization"][0]) or r["token_pool_utilization"][0] == 0
    assert 0 < r["token_pool_utilization"][1] <= 1
    cat = perf.catalog
    h100, a100 = cat.machine("dgx-h100"), cat.machine("dgx-a100")
    assert r["cost_usd_per_h"][0] == pytest.approx(2 * h100.cost_usd_per_h)
    assert r["cost_usd_per_h"][1] == pytest.approx(2 * h100.cost_usd_per_h + 2 * a100.cost_usd_per_h)
    assert r["power_kw"][0] == pytest.approx(2 * h100.power_w(1.0) / 1e3)
    assert r["power_kw"][1] == pytest.approx((2 * h100.power_w(1.0) + 2 * a100.power_w(0.7)) / 1e3)
    # energy: drawn power between idle (30 %) and the cap, over the makespan, per request
    bounds = r["power_kw"] * 1e3 * r["makespan_s"] / 3600 / len(trace)
    assert np.all(r["energy_wh_per_request"] >= 0.3 * bounds - 1e-9)
    assert np.all(r["energy_wh_per_request"] <= bounds + 1e-9)
    assert r["borrowed_decodes"][0] == 0 and r["kv_transfer_visible_mean_s"][0] == 0
    assert 0 < r["kv_transfer_visible_mean_s"][1] < 0.5
    assert not r["stopped_early"].any()


@pytest.mark.parametrize("engine,rel", [("des", 1e-9), ("fluid", 1e-4)])
def test_one_request_latency_is_its_solo_time_in_seconds(perf, engine, rel):
    """A lone request on the SLO reference machine (DGX-A100, TP 8) has slowdown 1. The fluid
    engine runs a decode stretch at the context of its start (SEMANTICS' fluid reading), so
    its E2E is a little short: 7e-6 relative here."""
    trace = make_workload("coding", 1.0, duration_s=1.0, seed=0)
    r = simulate([make_design("baseline-a100", machines=1)], trace, MODEL, engine=engine, perf=perf).iloc[0]
    ttft, _, e2e = perf.solo_request_s(MODEL, "a100-80gb", 8, trace.prompt_tokens, trace.output_tokens)
    assert trace.output_tokens[0] > 5
    assert r["ttft_p50_s"] == pytest.approx(float(ttft[0]), rel=1e-9)
    assert r["e2e_p50_s"] == pytest.approx(float(e2e[0]), rel=rel)
    assert r["slowdown_ttft_p50"] == pytest.approx(1.0, rel=1e-9)
    assert r["slowdown_e2e_p50"] == pytest.approx(1.0, rel=rel)


# ------------------------------------------------------------------ the mixed pool
@pytest.mark.parametrize("engine", ["fluid", "des"])
def test_splitwise_hh_27_3_borrows_decodes(perf, engine):
    """Splitwise-HH 27+3 on coding at 70 rps: the token pool is too small for the decodes,
    so prompt machines join the mixed pool (Splitwise observed over a third borrowed)."""
    trace = make_workload("coding", 70, duration_s=120, seed=0)
    r = simulate([make_design("splitwise-hh", 27, 3)], trace, MODEL, engine=engine, perf=perf).iloc[0]
    decodes = np.count_nonzero(trace.output_tokens > 1)
    assert r["borrowed_decodes"] > 0
    assert r["borrowed_decodes"] / decodes > 0.20
    assert r["prompt_pool_mean_decode_batch"] > 0      # prompt machines did run decodes


def test_fluid_terminates_when_work_is_due_just_after_a_boundary():
    """Regression: splitwise-hh 3+13, coding 70 rps (seed 0), full run: the fluid engine used
    to reschedule a token machine at the same instant forever (work due within the 1e-7
    iteration tolerance after a boundary, not admitted there; `_fluid._schedule`).
    Run in a subprocess so a relapse fails instead of hanging the suite."""
    code = ("import numpy as np\n"
            "from provisioner.designs import make_design\n"
            "from provisioner.sim import simulate_requests\n"
            "from workloads import make_workload\n"
            "tr = make_workload('coding', 70, duration_s=120, seed=0)\n"
            "_, _, out = simulate_requests([make_design('splitwise-hh', 3, 13)], tr, engine='fluid')\n"
            "assert np.isfinite(out.finish_s).all()\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]


@settings(max_examples=300, deadline=None)
@given(values=st.lists(st.floats(-1.0, 1e4, allow_nan=False) | st.sampled_from([0.0, 1.5, 2.0]),
                       min_size=0, max_size=400),
       n_inf=st.integers(0, 60))
def test_kernel_percentiles_are_numpys(values, n_inf):
    """The engine's own p50/p90/p99 (radix select over the finite values, the rest +inf)
    equal numpy's linear interpolation; where numpy gives NaN from inf - inf, the rank
    below is taken when the position is exact and +inf otherwise."""
    finite = np.array(values, dtype=float)
    everything = np.concatenate([finite, np.full(n_inf, np.inf)])
    out = np.empty(3)
    percentiles_into(finite.copy(), len(finite), len(everything), out)
    if len(everything) == 0:
        assert np.isnan(out).all()
        return
    with np.errstate(invalid="ignore"):
        expected = np.percentile(everything, [50, 90, 99])
    pos = np.array([0.5, 0.9, 0.99]) * (len(everything) - 1)
    below = np.sort(everything)[np.floor(pos).astype(int)]
    expected = np.where(np.isnan(expected), np.where(pos == np.floor(pos), below, np.inf), expected)
    np.testing.assert_allclose(out, expected, rtol=1e-12)


def test_the_kernel_runs_as_many_threads_as_numba_set_num_threads_allows(monkeypatch):
    """The memory plan and the sweep lower `numba.set_num_threads`; the fluid engine's
    design threads must follow it (it once read only NUMBA_NUM_THREADS)."""
    import numba

    def no_pool(*args, **kwargs):
        raise AssertionError("a thread pool was started although one numba thread is allowed")

    trace = make_workload("coding", rps=5, duration_s=10, seed=0)
    designs = [make_design("splitwise-hh", 2, 1), make_design("splitwise-hh", 3, 1)]
    before = numba.get_num_threads()
    monkeypatch.setattr("provisioner.sim._fluid.ThreadPoolExecutor", no_pool)
    numba.set_num_threads(1)
    try:
        assert len(simulate(designs, trace, MODEL)) == 2
    finally:
        numba.set_num_threads(before)


# ------------------------------------------------------------------ the clock's range
def _trace_from(start_s: float):
    """20 requests a second apart from start_s (500 prompt, 50 output tokens each)."""
    return Trace(start_s + np.arange(20.0), np.full(20, 500), np.full(20, 50), "late")


@pytest.mark.parametrize("engine", ["fluid", "des"])
def test_arrivals_past_the_clocks_range_are_refused_by_both_engines(perf, engine):
    """At 1e15 s doubles are 0.125 s apart: a 45-ms decode iteration left the clock where it
    was. The fluid engine stopped on its stalled clock (`_run_until`) blaming the latency
    model; the discrete-event engine reported 0-ms TBT and E2E. Both refuse such arrivals now."""
    with pytest.raises(ProvisionerError) as caught:
        simulate([make_design("baseline-a100", machines=2)], _trace_from(1e15), "llama2-70b", engine=engine, perf=perf)
    assert str(caught.value) == (
        "the trace's last request arrives at 1e+15 s (3.17e+07 years): past 4.29e+09 s (136 years) the "
        "simulators' clock cannot time a GPU pass; give a shorter duration_s or a higher rps, or arrival times "
        "in seconds from the trace's start")


@pytest.mark.parametrize("engine", ["fluid", "des"])
def test_arrivals_just_inside_the_clocks_range_time_as_at_zero(perf, engine):
    """Below the bound (2**32 s) the clock resolves a microsecond: the same requests give the
    same latencies as at 0 s (within 6 us here)."""
    design = [make_design("baseline-a100", machines=2)]
    columns = [f"{m}_p{p}_s" for m in METRICS for p in (50, 99)]
    early = simulate(design, _trace_from(0.0), "llama2-70b", engine=engine, perf=perf)[columns].iloc[0]
    late = simulate(design, _trace_from(2.0 ** 32 - 100), "llama2-70b", engine=engine, perf=perf)[columns].iloc[0]
    assert late.to_numpy() == pytest.approx(early.to_numpy(), abs=1e-5)
