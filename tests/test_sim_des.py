"""Tests for the discrete-event engine (`provisioner.sim.testing` exposes its parts) (SEMANTICS.md, exactly).

Expected latencies are computed here from the pool coefficients with the numpy
`time_from_coefficients` and `kv_transfer_time_s`, independently of the engine.
"""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest

from perfmodels import N_COEF, iteration_parts, kv_transfer_time_s, kv_wire_bytes_per_s, time_from_coefficients
from provisioner.designs import DesignBatch, make_design
from provisioner.errors import ProvisionerError
from provisioner.sim.testing import DesMachine, build_inputs, des_iteration_s, des_simulate_design, run_des
from workloads import make_workload

MODEL = "bloom-176b"


def _trace(arrival_s, prompt_tokens, output_tokens):
    return SimpleNamespace(arrival_s=np.asarray(arrival_s, dtype=float),
                           prompt_tokens=np.asarray(prompt_tokens), output_tokens=np.asarray(output_tokens))


def _inputs(perf, llm, designs, trace):
    return build_inputs(DesignBatch.from_designs(designs), trace, llm, perf)


def _prefill_s(coef, s):
    return float(time_from_coefficients(coef, s, s * s, 1, 0, 0))


def _solo_decodes_s(coef, s, n):
    """n - 1 decode iterations at batch 1; context s + k in the k-th (the prefill made token 1)."""
    k = np.arange(1, n)
    return float(np.sum(time_from_coefficients(coef, 0, 0, 0, 1, s + k)))


def _kv_visible_s(perf, llm, design, s, prefill_s):
    cat = perf.catalog
    src, dst = cat.machine(design.prompt_machine), cat.machine(design.token_machine)
    wire = kv_wire_bytes_per_s(src, dst, design.prompt_tp)
    setup = perf.calibration.for_gpu(src.gpu).kv_transfer_setup_s
    return float(kv_transfer_time_s(llm, s, wire, setup, prefill_time_s=prefill_s, mode="auto"))


# --- the scalar iteration time ------------------------------------------------------

def test_scalar_iteration_time_equals_numpy_formula(perf, llm):
    rng = np.random.default_rng(0)
    real = perf.coefficients(llm, perf.catalog.gpu("h100-80gb"), 8, 1.0)
    for trial in range(500):
        coef = real if trial % 2 else rng.uniform(0.0, 1e-3, N_COEF) * rng.choice([1e-3, 1.0, 1e3], N_COEF)
        seqs = int(rng.integers(0, 5))
        prompts = rng.integers(1, 8000, seqs)
        b = int(rng.integers(0, 300)) * int(rng.integers(0, 2))
        ctx = int(rng.integers(b, b * 9000 + 1))
        args = (int(prompts.sum()), int((prompts ** 2).sum()), seqs, b, ctx)
        want = float(time_from_coefficients(coef, *args))
        got = des_iteration_s(tuple(map(float, coef)), *args)
        assert got == pytest.approx(want, rel=1e-13, abs=0)
        # GPU sharing splits the same iteration: alone, its time is the engines' to the bit
        assert iteration_parts(tuple(map(float, coef)), *args)[0] == got


# --- one request alone ----------------------------------------------------------------

@pytest.mark.parametrize("s", [300, 1500])  # serialized and layer-wise KV transfer
@pytest.mark.parametrize("family", ["splitwise-hh", "splitwise-ha"])
def test_single_request_on_splitwise(perf, llm, family, s):
    design = make_design(family, 1, 1)
    n = 40
    inp = _inputs(perf, llm, [design], _trace([2.5], [s], [n]))
    out = run_des(inp)
    ttft = _prefill_s(inp.coef[0, 0], s)
    e2e = ttft + _kv_visible_s(perf, llm, design, s, ttft) + _solo_decodes_s(inp.coef[0, 1], s, n)
    assert out.first_token_s[0, 0] - 2.5 == pytest.approx(ttft, rel=1e-12)
    assert out.finish_s[0, 0] - 2.5 == pytest.approx(e2e, rel=1e-12)
    assert out.kv_transfers[0] == 1
    assert out.kv_visible_s_sum[0] == pytest.approx(_kv_visible_s(perf, llm, design, s, ttft), rel=1e-12)
    assert out.busy_s[0, 0] == pytest.approx(ttft, rel=1e-12)
    assert out.decode_time_s[0, 1] == pytest.approx(e2e - ttft - out.kv_visible_s_sum[0], rel=1e-12)
    assert out.decode_batch_time_s[0, 1] == pytest.approx(out.decode_time_s[0, 1], rel=1e-12)
    assert out.borrowed_decodes[0] == out.borrowed_prefills[0] == 0


def test_single_request_on_baseline(perf, llm):
    s, n = 1200, 25
    inp = _inputs(perf, llm, [make_design("baseline-a100", machines=2)], _trace([0.0], [s], [n]))
    out = run_des(inp)
    ttft = _prefill_s(inp.coef[0, 0], s)
    assert out.first_token_s[0, 0] == pytest.approx(ttft, rel=1e-12)
    assert out.finish_s[0, 0] == pytest.approx(ttft + _solo_decodes_s(inp.coef[0, 0], s, n), rel=1e-12)
    assert out.kv_transfers[0] == 0


def test_light_load_baseline_matches_solo_latencies(perf, llm):
    """Requests 200 s apart on one machine never share an iteration."""
    sizes = make_workload("coding", 5, duration_s=10, seed=3)
    k = len(sizes)
    s, n = sizes.prompt_tokens.copy(), sizes.output_tokens.copy()
    n[::7] = 1
    arrival = 200.0 * np.arange(k)
    inp = _inputs(perf, llm, [make_design("baseline-h100", machines=1)], _trace(arrival, s, n))
    out = run_des(inp)
    ttft, _, e2e = perf.solo_request_s(MODEL, "h100-80gb", 8, s, n)
    # absolute times near 10^4 s: compare latencies to ~1e-12 s of rounding
    np.testing.assert_allclose(out.first_token_s[0] - arrival, ttft, rtol=0, atol=1e-9)
    np.testing.assert_allclose(out.finish_s[0] - arrival, e2e, rtol=1e-9, atol=1e-9)
    np.testing.assert_array_equal(out.finish_s[0][n == 1], out.first_token_s[0][n == 1])


# --- hand-computed batches: prompt cap, mixed batches, KV budget ------------------------

def _f(coef, n_p=0, sq=0, seqs=0, b=0, ctx=0):
    return float(time_from_coefficients(coef, n_p, sq, seqs, b, ctx))


def test_prompt_batch_cap_and_mixed_batches(perf, llm):
    design = make_design("baseline-h100", machines=1)  # cap 2048 prompt tokens
    inp = _inputs(perf, llm, [design], _trace([0.0, 0.0, 0.0, 0.0], [1000, 1000, 1500, 1500], [2, 2, 3, 2]))
    out = run_des(inp)
    c = inp.coef[0, 0]
    t1 = _f(c, 2000, 2 * 1000**2, 2)                      # r0 + r1 fit the cap together
    t2 = t1 + _f(c, 1500, 1500**2, 1, 2, 2 * 1001)         # r2 alone (cap), with r0, r1 decoding
    t3 = t2 + _f(c, 1500, 1500**2, 1, 1, 1501)             # r3 alone, r2 decoding (r0, r1 done)
    t4 = t3 + _f(c, 0, 0, 0, 2, 1502 + 1501)               # r2's last token and r3's only decode
    np.testing.assert_allclose(out.first_token_s[0], [t1, t1, t2, t3], rtol=1e-12)
    np.testing.assert_allclose(out.finish_s[0], [t2, t2, t4, t4], rtol=1e-12)
    assert out.decode_batch_time_s[0, 0] == pytest.approx(2 * (t2 - t1) + (t3 - t2) + 2 * (t4 - t3), rel=1e-12)


def test_local_prompt_waits_for_kv(perf, llm):
    s, n = 1000, 3
    inp = _inputs(perf, llm, [make_design("baseline-h100", machines=1)], _trace([0.0, 0.0], [s, s], [n, n]))
    inp = replace(inp, kv_cap_tokens=np.array([[1.5 * (s + n), 1.5 * (s + n)]]))
    out = run_des(inp)
    c = inp.coef[0, 0]
    t1 = _f(c, s, s * s, 1)                                 # r1 fits the cap but not the KV budget
    done = t1 + _f(c, b=1, ctx=s + 1) + _f(c, b=1, ctx=s + 2)
    np.testing.assert_allclose(out.first_token_s[0], [t1, done + t1], rtol=1e-12)
    np.testing.assert_allclose(out.finish_s[0], [done, 2 * done], rtol=1e-12)


def test_transferred_decode_waits_for_kv(perf, llm):
    s, n = 1000, 3
    design = make_design("splitwise-hh", 1, 1, allow_borrow=False)
    inp = _inputs(perf, llm, [design], _trace([0.0, 0.0], [s, s], [n, n]))
    inp = replace(inp, kv_cap_tokens=np.array([[1e9, 1.5 * (s + n)]]))
    out = run_des(inp)
    t1 = _f(inp.coef[0, 0], 2 * s, 2 * s * s, 2)            # one prefill iteration for both
    arrive = t1 + _kv_visible_s(perf, llm, design, s, t1)
    decodes = _f(inp.coef[0, 1], b=1, ctx=s + 1) + _f(inp.coef[0, 1], b=1, ctx=s + 2)
    np.testing.assert_allclose(out.first_token_s[0], [t1, t1], rtol=1e-12)
    np.testing.assert_allclose(out.finish_s[0], [arrive + decodes, arrive + 2 * decodes], rtol=1e-12)
    assert out.kv_transfers[0] == 2


# --- conservation and invariants on loaded clusters ------------------------------------

CASES = {
    "baseline": dict(family="baseline-h100", machines=3),
    "split-borrow": dict(family="splitwise-hh", prompt_machines=8, token_machines=1),  # prompt slack, token side full
    "split-noborrow": dict(family="splitwise-hh", prompt_machines=3, token_machines=1, allow_borrow=False),
    "split-ha": dict(family="splitwise-ha", prompt_machines=2, token_machines=2),
    "prompt-overload": dict(family="splitwise-aa", prompt_machines=1, token_machines=3),
}


@pytest.fixture(scope="module")
def loaded_trace():
    tr = make_workload("coding", 20, duration_s=15, seed=1)
    n = tr.output_tokens.copy()
    n[::11] = 1  # the coding trace has no one-token answers
    return _trace(tr.arrival_s, tr.prompt_tokens, n)


def _design(case):
    kw = dict(CASES[case])
    return make_design(kw.pop("family"), **kw)


@pytest.mark.parametrize("tiny_kv", [False, True])
@pytest.mark.parametrize("case", list(CASES))
def test_conservation(perf, llm, loaded_trace, case, tiny_kv, monkeypatch):
    inp = _inputs(perf, llm, [_design(case)], loaded_trace)
    if tiny_kv:  # below most requests' s + n: exercises the "empty machine" exceptions
        inp = replace(inp, kv_cap_tokens=np.full_like(inp.kv_cap_tokens, 2500.0))
    holders = _watch_kv(monkeypatch)
    cl = des_simulate_design(inp, 0)
    a, s, n = inp.arrival_s, inp.prompt_tokens, inp.output_tokens
    first, finish = np.array(cl.first), np.array(cl.finish)
    assert np.isfinite(first).all() and np.isfinite(finish).all()
    pools = [0, 1] if inp.n_machines[0, 1] else [0]
    min_prefill = np.min([time_from_coefficients(inp.coef[0, p], s, s * s, 1, 0, 0) for p in pools], axis=0)
    min_decode = min(float(time_from_coefficients(inp.coef[0, p], 0, 0, 0, 1, 1)) for p in pools)
    assert np.all(first >= a + min_prefill * (1 - 1e-12))
    assert np.all(finish >= first)
    np.testing.assert_array_equal(finish[n == 1], first[n == 1])
    assert np.all(finish[n > 1] - first[n > 1] >= (n[n > 1] - 1) * min_decode * (1 - 1e-12))
    assert cl.decode_tokens == int(np.sum(n - 1))
    transferred = (np.array(cl.prefill_on) != np.array(cl.decode_on)) & (n > 1)
    assert cl.kv_transfers == transferred.sum()
    # every counter drains: nothing pending, reserved, held or queued at the end
    assert not any(cl.pending_prompt) and not any(cl.pending_decode) and not any(cl.reserved)
    for mc in cl.machines:
        assert (mc.running, mc.ctx, mc.kv_used) == (0, 0, 0)
        assert not mc.prompt_q and not mc.wait_q and not mc.done_at
    assert max(holders) >= 1
    out = run_des(inp)
    np.testing.assert_array_equal(out.finish_s[0], finish)
    assert out.busy_s[0].sum() >= out.decode_time_s[0].sum() > 0
    assert np.all(out.decode_batch_time_s[0] >= out.decode_time_s[0])


def _watch_kv(monkeypatch):
    """Wrap _Machine.start: the KV budget holds unless one request alone holds KV."""
    holders = []
    original = DesMachine.start

    def start(self, S, N, local):
        dur = original(self, S, N, local)
        if dur is not None:
            held = self.running + sum(1 for r in self.prefilling if local[r])
            holders.append(held)
            assert self.kv_used <= self.kv_cap or held == 1
        return dur

    monkeypatch.setattr(DesMachine, "start", start)
    return holders


def test_rejects_requests_outside_the_semantics(perf, llm):
    design = [make_design("baseline-h100", machines=1)]
    with pytest.raises(ProvisionerError, match="output_tokens >= 1"):
        run_des(_inputs(perf, llm, design, _trace([0.0], [10], [0])))
    with pytest.raises(ProvisionerError, match="sorted"):
        run_des(_inputs(perf, llm, design, _trace([1.0, 0.0], [10, 10], [2, 2])))


def test_design_subset_keeps_order(perf, llm, loaded_trace):
    designs = [_design(c) for c in ("baseline", "split-borrow", "split-ha")]
    inp = _inputs(perf, llm, designs, loaded_trace)
    both = run_des(inp, np.array([2, 0]))
    for row, d in enumerate((2, 0)):
        one = run_des(inp, np.array([d]))
        np.testing.assert_array_equal(both.finish_s[row], one.finish_s[0])
        np.testing.assert_array_equal(both.busy_s[row], one.busy_s[0])


# --- the mixed pool (Splitwise Sec. IV-B) -------------------------------------------------

@pytest.mark.parametrize("case,counter", [("split-borrow", "borrowed_decodes"),
                                          ("prompt-overload", "borrowed_prefills")])
def test_borrowing_only_when_allowed(perf, llm, loaded_trace, case, counter):
    on, off = _design(case), replace(_design(case), allow_borrow=False)
    inp = _inputs(perf, llm, [on, off], loaded_trace)
    out = run_des(inp)
    assert getattr(out, counter)[0] > 0
    assert out.borrowed_decodes[1] == out.borrowed_prefills[1] == 0
    many = int(np.sum(loaded_trace.output_tokens > 1))
    # a lent machine serves only the other phase, so prefill and decode machines always
    # differ and every multi-token request moves its KV cache exactly once, either way
    assert out.kv_transfers[0] == out.kv_transfers[1] == many
    # without borrowing the prompt pool never decodes and the token pool never prefills
    assert out.decode_time_s[1, 0] == 0
    lent_pool = 0 if counter == "borrowed_decodes" else 1
    assert out.busy_s[0, lent_pool] > 0


# --- monotonicity ------------------------------------------------------------------------

@pytest.mark.parametrize("allow_borrow", [True, False])
def test_more_token_machines_never_raise_mean_e2e(perf, llm, loaded_trace, allow_borrow):
    designs = [make_design("splitwise-hh", 3, t, allow_borrow=allow_borrow) for t in (1, 2, 3, 4)]
    inp = _inputs(perf, llm, designs, loaded_trace)
    out = run_des(inp)
    mean_e2e = (out.finish_s - inp.arrival_s).mean(axis=1)
    assert np.all(np.diff(mean_e2e) <= 1e-12), mean_e2e


def test_more_baseline_machines_never_raise_mean_e2e(perf, llm, loaded_trace):
    designs = [make_design("baseline-a100", machines=m) for m in (2, 3, 4, 6)]
    inp = _inputs(perf, llm, designs, loaded_trace)
    mean_e2e = (run_des(inp).finish_s - inp.arrival_s).mean(axis=1)
    assert np.all(np.diff(mean_e2e) <= 1e-12), mean_e2e
