"""Tests of perfmodels: properties of the roofline latency model, hand calculations of
memory, the shipped calibration, and physics checks against published numbers.

Published figures are cited where they are used: [SW] Patel et al., Splitwise, ISCA 2024;
[TS] Jiang et al., ThunderServe, MLSys 2025 (see /work/shared/reference/FACTS.md).
"""

import functools
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import perfmodels
from hardware_catalog import UnknownNameError, load_catalog
from perfmodels import (
    Calibration,
    GpuConstants,
    MIN_POWER_CAP,
    LatencyModel,
    PerfModelError,
    calibrate,
    clock_fraction,
    kv_cache_bytes,
    kv_capacity_tokens,
    kv_transfer_time_s,
    kv_wire_bytes_per_s,
    load_calibration,
    max_decode_batch,
    prompt_compute_s,
    decode_token_s,
    shipped_profile,
    time_from_coefficients,
    weight_bytes_per_gpu,
)

CAT = load_catalog()
GPUS = sorted(CAT.gpus)          # every GPU, borrowed constants included
MODELS = sorted(CAT.models)
TPS = (1, 2, 4, 8)
SHARED = Path(__file__).resolve().parents[2] / "shared"
PROPERTY = settings(max_examples=60, deadline=None)


@functools.cache
def perf() -> LatencyModel:
    return LatencyModel()


@pytest.fixture(scope="module")
def report():
    return calibrate()


# --- properties over every GPU and model of the catalog --------------------------------

tokens = st.integers(1, 32_768)
batches = st.integers(1, 512)
caps = st.floats(MIN_POWER_CAP, 1.0)


@PROPERTY
@given(gpu=st.sampled_from(GPUS), model=st.sampled_from(MODELS), tp=st.sampled_from(TPS),
       s=st.lists(tokens, min_size=2, max_size=8), b=st.lists(batches, min_size=2, max_size=8), cap=caps)
def test_prefill_never_faster_with_more_tokens_or_a_larger_batch(gpu, model, tp, s, b, cap):
    s, b = np.sort(s).astype(float), np.sort(b).astype(float)
    by_prompt = perf().prefill_time_s(model, gpu, tp, s, b[0], cap)
    by_batch = perf().prefill_time_s(model, gpu, tp, s[0], b, cap)
    assert np.all(np.isfinite(by_prompt)) and np.all(by_prompt > 0)
    assert np.all(np.diff(by_prompt) >= 0)
    assert np.all(np.diff(by_batch) >= 0)


@PROPERTY
@given(gpu=st.sampled_from(GPUS), model=st.sampled_from(MODELS), tp=st.sampled_from(TPS),
       b=st.lists(batches, min_size=2, max_size=8), ctx=st.lists(tokens, min_size=2, max_size=8), cap=caps)
def test_decode_never_faster_with_a_larger_batch_or_longer_context(gpu, model, tp, b, ctx, cap):
    b, ctx = np.sort(b).astype(float), np.sort(ctx).astype(float)
    by_batch = perf().decode_time_s(model, gpu, tp, b, ctx[0], cap)
    by_ctx = perf().decode_time_s(model, gpu, tp, b[0], ctx, cap)
    assert np.all(np.isfinite(by_batch)) and np.all(by_batch > 0)
    assert np.all(np.diff(by_batch) >= 0)
    assert np.all(np.diff(by_ctx) >= 0)


@PROPERTY
@given(gpu=st.sampled_from(GPUS), model=st.sampled_from(MODELS), tp=st.sampled_from(TPS), s=tokens,
       b=st.integers(1, 64), cap=st.lists(caps, min_size=2, max_size=8))
def test_a_lower_power_cap_never_makes_prefill_faster(gpu, model, tp, s, b, cap):
    cap = np.sort(cap)[::-1]  # descending caps: times must not decrease
    t = perf().prefill_time_s(model, gpu, tp, s, b, cap)
    assert np.all(np.diff(t) >= 0)
    assert np.all(np.diff(clock_fraction(cap)) <= 0)


@PROPERTY
@given(gpu=st.sampled_from(GPUS), model=st.sampled_from(MODELS), tp=st.sampled_from(TPS),
       prompts=st.lists(tokens, min_size=1, max_size=4), b=st.integers(0, 64), ctx=tokens)
def test_a_pass_takes_at_least_its_prompts_compute(gpu, model, tp, prompts, b, ctx):
    """`prompt_compute_s` is a lower bound on each prompt's part of any pass it shares with
    other prompts and decodes (the steady-state load's premise), and a lone compute-bound
    prompt's pass is that plus the pass's fixed all-reduce and layer overheads."""
    c = perf().coefficients(model, gpu, tp)
    s = np.asarray(prompts, dtype=float)
    total = float(time_from_coefficients(c, s.sum(), (s * s).sum(), len(s), b, b * ctx))
    assert total >= float(prompt_compute_s(c, s).sum()) * (1 - 1e-12)
    one = s[:1]
    compute = c[0] * one[0] + c[1] + c[2] * one[0] ** 2
    if compute >= c[4] + c[5] * one[0]:
        alone = float(time_from_coefficients(c, one[0], one[0] ** 2, 1))
        assert alone == pytest.approx(float(prompt_compute_s(c, one)[0]) + c[6] + c[10], rel=1e-12)


@PROPERTY
@given(gpu=st.sampled_from(GPUS), model=st.sampled_from(MODELS), tp=st.sampled_from(TPS),
       b=st.integers(1, 256), ctx=tokens)
def test_a_decoding_sequence_adds_at_most_its_token_cost(gpu, model, tp, b, ctx):
    """One more sequence at context ctx lengthens an iteration below the all-reduce knee by
    at most `decode_token_s` (the larger of its compute and its KV traffic, plus its
    all-reduce token and overhead); by that much when the resource it needs more of binds
    both iterations."""
    c = perf().coefficients(model, gpu, tp)
    if b + 1 > c[8]:
        return
    step = lambda k: float(time_from_coefficients(c, decode_batch=k, decode_context_tokens=k * ctx))
    added, cost = step(b + 1) - step(b), float(decode_token_s(c, ctx))
    assert added <= cost * (1 + 1e-9)
    compute, memory = c[0] + c[1] + c[3] * ctx, c[5] * (ctx + 1)
    memory_bound = [c[4] + memory * k >= compute * k for k in (b, b + 1)]
    if (memory >= compute and all(memory_bound)) or (compute >= memory and not any(memory_bound)):
        assert added == pytest.approx(cost, rel=1e-9)


def test_per_token_costs_broadcast_designs_against_sizes():
    """(designs, N_COEF) coefficients against (r,) sizes give (designs, r) costs."""
    c = np.stack([perf().coefficients("llama-30b", gpu, 4) for gpu in ("a40", "a6000", "rtx3090ti")])
    sizes = np.array([1.0, 500.0, 4000.0, 100_000.0])
    for fn in (prompt_compute_s, decode_token_s):
        table = fn(c, sizes)
        assert table.shape == (3, 4)
        assert np.allclose(table[1], [float(fn(c[1], x)) for x in sizes], rtol=1e-15)


def test_power_cap_barely_changes_decode_of_bloom_on_h100():
    # [SW] Insight VI / Fig. 9: the token phase sees almost no latency impact when an
    # H100 is capped by 50% (700 W -> 350 W).
    b = np.array([1, 2, 4, 8, 16, 32, 64], dtype=float)[:, None]
    ctx = np.array([128, 512, 1024, 2048, 4096], dtype=float)[None, :]
    capped = perf().decode_time_s("bloom-176b", "h100-80gb", 8, b, ctx, 0.5)
    full = perf().decode_time_s("bloom-176b", "h100-80gb", 8, b, ctx, 1.0)
    assert np.all(capped >= full)
    assert np.max(capped / full) < 1.05


@given(model=st.sampled_from(MODELS))
def test_a_higher_tp_degree_never_needs_more_weight_memory_per_gpu(model):
    per_gpu = weight_bytes_per_gpu(CAT.model(model), np.array(TPS))
    assert np.all(np.diff(per_gpu) <= 0)
    assert per_gpu[0] == CAT.model(model).weight_bytes


@pytest.mark.parametrize("gpu", GPUS)
def test_every_catalog_gpu_has_constants_and_finite_times(gpu):
    cal = perf().calibration
    assert cal.is_calibrated(gpu) or cal.borrowed.get(gpu) in cal.per_gpu
    for model in MODELS:
        t = np.concatenate([perf().prefill_time_s(model, gpu, np.array(TPS), 1024, 4),
                            perf().decode_time_s(model, gpu, np.array(TPS), 16, 1024)])
        assert np.all(np.isfinite(t)) and np.all(t > 0)


def test_only_the_profiled_gpus_are_calibrated():
    cal = perf().calibration
    assert set(cal.per_gpu) == {"a100-80gb", "h100-80gb"}
    assert cal.borrowed["h200-141gb"] == "h100-80gb"
    assert cal.borrowed["a6000"] == "a100-80gb"


# --- hand calculations -----------------------------------------------------------------


def test_bloom_kv_bytes_per_token_by_hand():
    # 2 (K and V) x 70 layers x 112 kv heads x 128 head dim (14336 / 112) x 2 bytes (fp16)
    # = 2 * 70 * 112 * 128 * 2 = 4,014,080 bytes per token ([SW] Sec. IV-C formula).
    bloom = CAT.model("bloom-176b")
    assert bloom.kv_bytes_per_token == 4_014_080
    assert kv_cache_bytes(bloom, 1500) == 1500 * 4_014_080  # 6.02 GB for a coding prompt


def test_bloom_decode_batch_limit_on_dgx_h100_by_hand():
    # Parameters from the architecture (h = 14336, 70 layers, vocab 250880, tied embeddings):
    #   attention 4 h^2 = 822,083,584; GeLU FFN 2 * h * 4h = 1,644,167,168 per layer
    #   70 x 2,466,250,752 = 172,637,552,640; embedding 250,880 x 14,336 = 3,596,615,680
    #   total 176,234,168,320 params; x 2 bytes = 352,468,336,640 bytes of weights.
    # Usable HBM of a DGX-H100 at TP 8: 8 x 80e9 x 0.9 = 576,000,000,000 bytes.
    # KV room: 576,000,000,000 - 352,468,336,640 = 223,531,663,360 bytes.
    # One 2,048-token request: 4,014,080 x 2,048 = 8,220,835,840 bytes.
    # Batch limit: floor(223,531,663,360 / 8,220,835,840) = floor(27.19) = 27.
    bloom, h100 = CAT.model("bloom-176b"), CAT.gpu("h100-80gb")
    assert bloom.params == 176_234_168_320
    weight_bytes = 176_234_168_320 * 2
    by_hand = math.floor((8 * 80e9 * 0.9 - weight_bytes) / (4_014_080 * 2048))
    assert by_hand == 27
    assert max_decode_batch(bloom, h100, 8, 2048) == by_hand
    assert kv_capacity_tokens(bloom, h100, 8) == pytest.approx((8 * 80e9 * 0.9 - weight_bytes) / 4_014_080)
    # On one GPU the weights alone exceed HBM: nothing fits.
    assert max_decode_batch(bloom, h100, 1, 2048) == 0


# --- calibration -----------------------------------------------------------------------


def test_recalibrating_reproduces_the_shipped_constants(report):
    shipped = load_calibration()
    assert set(report.calibration.per_gpu) == set(shipped.per_gpu)
    assert report.calibration.borrowed == shipped.borrowed
    for gpu, fitted in report.calibration.per_gpu.items():
        for name in GpuConstants.fitted_names():
            # abs: near-zero overheads (h100 prefill_seq_overhead_s ~ 1e-15 s) sit on a bound.
            assert getattr(fitted, name) == pytest.approx(getattr(shipped.per_gpu[gpu], name), rel=0.01, abs=1e-9), \
                f"{gpu}.{name}"
        assert fitted.kv_transfer_setup_s == shipped.per_gpu[gpu].kv_transfer_setup_s


@pytest.mark.parametrize("gpu", ["a100-80gb", "h100-80gb"])
@pytest.mark.parametrize("phase", ["prompt_time", "token_time"])
def test_held_out_mape_at_most_8_percent(report, gpu, phase):
    m = report.mape.set_index(["gpu", "phase", "split"]).loc[(gpu, phase, "held-out")]
    assert m.points > 0
    assert m.mape_pct <= 8.0
    # The shipped file states the same number it was fitted with.
    assert load_calibration().holdout_mape_pct[f"{gpu}/{phase}"] == pytest.approx(m.mape_pct, abs=0.01)


def test_the_artifact_rows_are_excluded(report):
    # profiles/SOURCE.md: batch 64 at TP 2 did not hold the whole batch in memory.
    profile = shipped_profile()
    artifacts = profile[(profile.batch_size == 64) & (profile.tensor_parallel == 2)]
    assert report.excluded_rows == len(artifacts) == 10
    assert report.excluded_rule == "batch_size == 64 and tensor_parallel == 2"
    assert "memory" in report.excluded_reason
    assert report.mape[report.mape.phase == "prompt_time"].rows.sum() == len(profile) - len(artifacts)
    # The fit does not go through them: the model predicts far more than the measured time.
    model = LatencyModel(report.calibration)
    for gpu, rows in artifacts.groupby("hardware"):
        pred = 1e3 * model.prefill_time_s("llama2-70b", gpu, 2, rows.prompt_size.to_numpy(), 64)
        assert np.all(pred > 2 * rows.prompt_time_ms.to_numpy())


@pytest.mark.skipif(not (SHARED / "data" / "profiles").is_dir(), reason="../shared is not checked out beside the repo")
def test_the_shipped_profile_is_the_shared_one():
    shipped = Path(perfmodels.__file__).parent / "data" / "llama2-70b_dgx.csv"
    assert shipped.read_bytes() == (SHARED / "data" / "profiles" / "llama2-70b_dgx.csv").read_bytes()


# --- physics against published numbers ------------------------------------------------


def test_h100_prefill_of_a_bloom_prompt_is_faster_than_a100():
    # [SW] Table I: 3.43x the compute, 1.64x the bandwidth; Table IV shows ~1.9x lower TTFT.
    a100 = perf().prefill_time_s("bloom-176b", "a100-80gb", 8, 1500)
    h100 = perf().prefill_time_s("bloom-176b", "h100-80gb", 8, 1500)
    assert 1.5 <= a100 / h100 <= 3.5


@pytest.mark.parametrize("gpu", ["a40", "a5000", "a6000", "rtx3090ti", "l40s"])
def test_pcie_cards_do_not_inherit_the_nvswitch_allreduce_knee(gpu):
    """The knee was fitted on DGX (NVSwitch) profiles; a PCIe card borrowing those constants
    moves every all-reduce byte at its own link's fitted rate, so a long prompt still gets
    faster with each doubling of TP (the knee would cap PCIe all-reduce at ~4 GB/s)."""
    p = perf()
    assert p.hardware(gpu, 4).allreduce_slowdown == 1.0
    long_prompt_s = [float(p.prefill_time_s("llama-30b", gpu, tp, 6400)) for tp in (2, 4, 8)]
    assert long_prompt_s[0] > long_prompt_s[1] > long_prompt_s[2]
    # TP8 well ahead of TP2 (with the lent knee: 1.05x on the A40); the L40S's 362 TFLOPS
    # leave more of its prefill to the PCIe all-reduce
    assert long_prompt_s[0] / long_prompt_s[2] > (1.2 if gpu == "l40s" else 1.5)
    # ... but sublinearly: the all-reduce grows with 2(tp-1)/tp of the message over PCIe
    assert long_prompt_s[0] / long_prompt_s[1] < 1.9


def test_the_knee_stays_where_it_was_measured_or_nothing_says_otherwise():
    """Calibrated GPUs keep their own knee; NVLink borrowers and the MI300X (Infinity Fabric:
    nothing measured either way) keep their lender's; a lender missing from a custom
    catalog leaves the fitted value."""
    p = perf()
    for own in ("a100-80gb", "h100-80gb"):
        assert p.hardware(own, 4).allreduce_slowdown == p.calibration.for_gpu(own).allreduce_slowdown > 1
    h100 = p.calibration.for_gpu("h100-80gb").allreduce_slowdown
    for borrower in ("h200-141gb", "b200", "mi300x"):
        assert p.hardware(borrower, 4).allreduce_slowdown == h100
    a100 = p.calibration.per_gpu["a100-80gb"]
    orphan = Calibration(per_gpu={"not-in-the-catalog": a100}, borrowed={"a40": "not-in-the-catalog"})
    assert LatencyModel(orphan, CAT).hardware("a40", 4).allreduce_slowdown == a100.allreduce_slowdown


@pytest.mark.parametrize("gpu", ["a100-80gb", "h100-80gb"])
@pytest.mark.parametrize("model,ctx", [("bloom-176b", 512), ("llama2-70b", 1500)])
def test_decode_at_batch_64_is_about_twice_batch_1(gpu, model, ctx):
    # [SW] Sec. III: TBT at batch 64 is about 2x TBT at batch 1.
    assert max_decode_batch(CAT.model(model), CAT.gpu(gpu), 8, ctx) >= 64  # the batch fits
    ratio = perf().decode_time_s(model, gpu, 8, 64, ctx) / perf().decode_time_s(model, gpu, 8, 1, ctx)
    assert 1.3 <= ratio <= 2.5


def test_half_power_cap_slows_an_h100_bloom_prefill_about_1_3x():
    # [SW] Fig. 9: prompt phase highly sensitive to caps; SplitwiseSim's Hcap uses 1.3x.
    full = perf().prefill_time_s("bloom-176b", "h100-80gb", 8, 1500)
    capped = perf().prefill_time_s("bloom-176b", "h100-80gb", 8, 1500, 1, 0.5)
    assert 1.15 <= capped / full <= 1.5


def _dgx_pair(gpu):
    machine = CAT.machine_for_gpu(gpu)
    return kv_wire_bytes_per_s(machine, machine, 8), perf().calibration.for_gpu(gpu).kv_transfer_setup_s


@pytest.mark.parametrize("gpu,lo_ms,hi_ms", [("h100-80gb", 3, 8), ("a100-80gb", 5, 11)])
def test_visible_layerwise_kv_transfer_of_a_bloom_prompt(gpu, lo_ms, hi_ms):
    # [SW] Sec. VI-A: ~5 ms visible on DGX-H100 pairs (400 Gbps), ~8 ms on A100 pairs.
    bloom = CAT.model("bloom-176b")
    wire, setup = _dgx_pair(gpu)
    prefill = perf().prefill_time_s(bloom, gpu, 8, 1500)
    visible = kv_transfer_time_s(bloom, 1500, wire, setup, prefill_time_s=prefill, mode="layerwise")
    assert lo_ms <= 1e3 * visible <= hi_ms
    assert visible < 0.07 * prefill  # [SW]: overhead < 7% of prompt time


def test_serialized_kv_transfer_grows_linearly_and_4_bit_moves_4x_fewer_bytes():
    bloom = CAT.model("bloom-176b")
    wire, setup = _dgx_pair("h100-80gb")
    s = np.array([250.0, 500.0, 1000.0, 1500.0, 2000.0])
    serialized = kv_transfer_time_s(bloom, s, wire, setup, mode="serialized")
    slope = np.diff(serialized) / np.diff(s)
    assert slope == pytest.approx(np.full(len(slope), bloom.kv_bytes_per_token / wire))  # linear
    assert serialized[0] - s[0] * slope[0] == pytest.approx(setup)
    # [TS] Table 8: 4-bit KV compression cut transfer 584 ms -> 133 ms (4.4x; ~4x of it the bytes).
    wire16 = kv_transfer_time_s(bloom, s, wire, 0.0, mode="serialized")
    wire4 = kv_transfer_time_s(bloom, s, wire, 0.0, mode="serialized", bits=4)
    assert wire16 / wire4 == pytest.approx(np.full(len(s), 4.0))
    # auto: serialized below 512 tokens, layer-wise from 512 ([SW] Sec. IV-C).
    prefill = perf().prefill_time_s(bloom, "h100-80gb", 8, s)
    auto = kv_transfer_time_s(bloom, s, wire, setup, prefill_time_s=prefill)
    small = s < 512
    assert np.all(auto[small] == serialized[small]) and np.all(auto[~small] < serialized[~small])


# --- errors ----------------------------------------------------------------------------


def _one_line(exc_info) -> str:
    text = str(exc_info.value)
    assert text and "\n" not in text
    return text


def test_unknown_gpu_names_the_known_ones():
    with pytest.raises(UnknownNameError) as e:
        perf().prefill_time_s("bloom-176b", "h100", 8, 512)
    assert "h100-80gb" in _one_line(e)


def test_unknown_model_names_the_known_ones():
    with pytest.raises(UnknownNameError) as e:
        perf().decode_time_s("bloom", "h100-80gb", 8, 1, 512)
    assert "bloom-176b" in _one_line(e)


@pytest.mark.parametrize("tp", [3, 0, 16, 2.5, -8])
def test_invalid_tensor_parallel_degree(tp):
    with pytest.raises(PerfModelError) as e:
        perf().prefill_time_s("bloom-176b", "h100-80gb", tp, 512)
    assert "1, 2, 4 or 8" in _one_line(e)


@pytest.mark.parametrize("call", [
    lambda m: m.prefill_time_s("bloom-176b", "h100-80gb", 8, -5),
    lambda m: m.prefill_time_s("bloom-176b", "h100-80gb", 8, 512, 0),
    lambda m: m.decode_time_s("bloom-176b", "h100-80gb", 8, -1, 512),
    lambda m: m.decode_time_s("bloom-176b", "h100-80gb", 8, 4, -512),
    lambda m: m.prefill_time_s("bloom-176b", "h100-80gb", 8, np.nan),
    lambda m: m.prefill_time_s("bloom-176b", "h100-80gb", 8, 512, 1, 1.5),
    lambda m: m.decode_time_s("bloom-176b", "h100-80gb", 8, 1, 512, 0.0),
], ids=["negative prompt", "zero batch", "negative batch", "negative context", "nan prompt",
        "cap above 1", "cap 0"])
def test_invalid_sizes_and_caps_raise_one_line_errors(call):
    with pytest.raises(PerfModelError) as e:
        call(perf())
    _one_line(e)


def test_a_gpu_without_constants_says_how_to_fix_it():
    cal = Calibration(per_gpu={"a100-80gb": perf().calibration.per_gpu["a100-80gb"]})
    with pytest.raises(PerfModelError) as e:
        LatencyModel(cal).prefill_time_s("bloom-176b", "h100-80gb", 8, 512)
    assert "[borrowed]" in _one_line(e)


def test_a_model_or_gpu_that_is_neither_a_name_nor_a_catalog_entry_is_one_line():
    """None (a notebook's unset variable) was an AttributeError from inside the roofline."""
    with pytest.raises(PerfModelError, match="model must be a catalog model name"):
        perf().prefill_time_s(None, "h100-80gb", 8, 1024)
    with pytest.raises(PerfModelError, match="gpu must be a catalog GPU name"):
        perf().decode_time_s("llama2-70b", None, 8, 16, 1024)
    assert perf().prefill_time_s(CAT.model("llama2-70b"), CAT.gpu("h100-80gb"), 8, 1024) > 0


def test_predict_points_names_a_missing_column():
    import pandas as pd

    points = pd.DataFrame({"model": ["llama2-70b"], "hardware": ["h100-80gb"], "tensor_parallel": [8],
                           "prompt_size": [512], "batch_size": [1]})
    with pytest.raises(PerfModelError, match="points lacks columns gpu, power_cap \\(the CLI's 'hardware'"):
        perfmodels.predict_points(points, perf())   # was an unpacking ValueError, then an AttributeError
    fixed = points.rename(columns={"hardware": "gpu"}).assign(power_cap=1.0)
    assert perfmodels.predict_points(fixed, perf())["prompt_time_ms"].iloc[0] > 0


def test_arrays_of_shapes_that_do_not_broadcast_are_one_line():
    with pytest.raises(PerfModelError, match=r"broadcast to one \(got prompt_tokens \(3,\), batch_size \(2,\)\)"):
        perf().prefill_time_s("llama2-70b", "h100-80gb", 8, [512, 1024, 2048], [1, 2])   # was numpy's error
    with pytest.raises(PerfModelError, match=r"context_tokens \(3,\)"):
        perf().decode_time_s("llama2-70b", "h100-80gb", 8, [1, 2], [512, 1024, 2048])
    assert perf().prefill_time_s("llama2-70b", "h100-80gb", [4, 8], [512, 1024], 1).shape == (2,)


@pytest.mark.parametrize("cap", [0.2, MIN_POWER_CAP - 1e-6, [0.5, 0.1], float("nan"), 0.0, 1.01])
def test_the_latency_model_refuses_a_power_cap_that_leaves_no_clock(cap):
    """Below MIN_POWER_CAP (~0.271) the clock was clamped: a 0.1 cap ran as fast as 0.27, a
    speed no GPU has, where designs and `provision perf predict` refuse such caps."""
    for call in (lambda: clock_fraction(cap), lambda: perf().prefill_time_s("llama2-70b", "h100-80gb", 8, 512, 1, cap)):
        with pytest.raises(PerfModelError, match=r"^power_cap must be a fraction of rated power in \[0\.271, 1\]"
                                                 r".*below 0\.271 the GPU's static power leaves no clock") as info:
            call()
        assert "\n" not in str(info.value)
    assert clock_fraction(MIN_POWER_CAP) == pytest.approx(0.2)   # the lowest cap still runs, at the lowest clock
