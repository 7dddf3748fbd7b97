"""Measured-profile latency models (`--latency-profile`, `perfmodels.ProfileLatencyModel`).

The shared Llama2-70B profile is the oracle: the grid model must return its measured
means at measured points, the splitwisesim model SplitwiseSim's medians, interpolation
and 1.1x mixed rule; both engines must evaluate the same vectors; a malformed file must
be refused with one line naming file, line and field.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import perfmodels
from perfmodels import LatencyModel, PerfModelError, load_profile_model
from provisioner import make_design, simulate
from workloads import Trace

# The shipped copy of ../shared/data/profiles/llama2-70b_dgx.csv (SplitwiseSim's measurements).
PROFILE = Path(perfmodels.__file__).parent / "data" / "llama2-70b_dgx.csv"
PROVISION = shutil.which("provision") or os.path.join(os.path.dirname(sys.executable), "provision")
LLAMA, H100, A100 = "llama2-70b", "h100-80gb", "a100-80gb"
GOOD = ("model,hardware,tensor_parallel,prompt_size,batch_size,token_size,prompt_time_ms,token_time_ms\n"
        "llama2-70b,h100-80gb,8,512,1,128,53.8,30.5\n"
        "llama2-70b,h100-80gb,8,1024,1,128,77.9,29.7\n")


@pytest.fixture(scope="module")
def rows() -> pd.DataFrame:
    return pd.read_csv(PROFILE)


@pytest.fixture(scope="module")
def grid():
    return load_profile_model(PROFILE, "grid")


@pytest.fixture(scope="module")
def sws():
    return load_profile_model(PROFILE, "splitwisesim")


def _cell(rows, gpu, s, b, col, how="mean"):
    sel = rows[(rows.hardware == gpu) & (rows.tensor_parallel == 8) & (rows.prompt_size == s) & (rows.batch_size == b)]
    return getattr(sel[col], how)()


# -- the two interpolation rules -----------------------------------------------------------
def test_grid_returns_the_measured_means(grid, rows):
    for gpu in (H100, A100):
        for s, b in ((128, 1), (2048, 1), (8192, 1), (512, 8), (512, 64)):
            assert grid.prefill_time_s(LLAMA, gpu, 8, s, b) * 1e3 == pytest.approx(
                _cell(rows, gpu, s, b, "prompt_time_ms"), rel=1e-12)
            assert grid.decode_time_s(LLAMA, gpu, 8, b, s) * 1e3 == pytest.approx(
                _cell(rows, gpu, s, b, "token_time_ms"), rel=1e-12)


def test_grid_interpolates_between_and_fills_the_cross_by_the_product_rule(grid, rows):
    lo, hi = (_cell(rows, H100, s, 1, "prompt_time_ms") for s in (2048, 4096))
    assert grid.prefill_time_s(LLAMA, H100, 8, 3072, 1) * 1e3 == pytest.approx((lo + hi) / 2, rel=1e-12)
    # (4096, 8) is not measured: t(4096, 1) x t(512, 8) / t(512, 1)
    expect = (_cell(rows, H100, 4096, 1, "prompt_time_ms") * _cell(rows, H100, 512, 8, "prompt_time_ms")
              / _cell(rows, H100, 512, 1, "prompt_time_ms"))
    assert grid.prefill_time_s(LLAMA, H100, 8, 4096, 8) * 1e3 == pytest.approx(expect, rel=1e-12)


def test_grid_falls_back_to_the_roofline_outside_the_measurements(grid):
    roof = LatencyModel()
    for args in ((LLAMA, H100, 8, 9000, 1), (LLAMA, H100, 8, 100, 1), ("bloom-176b", H100, 8, 2048, 1),
                 (LLAMA, "l40s", 8, 2048, 1)):
        assert grid.prefill_time_s(*args) == roof.prefill_time_s(*args)
    assert grid.decode_time_s(LLAMA, H100, 8, 65, 1000) == roof.decode_time_s(LLAMA, H100, 8, 65, 1000)
    notes = grid.fallbacks(LLAMA, [(H100, 8), (H100, 8), ("l40s", 8)], prompt_tokens=[100, 600, 9000, 20000])
    assert len(notes) == 2 and "50.0% of prompts" in notes[0] and "no llama2-70b on l40s" in notes[1]


@pytest.mark.parametrize("interp, taken, point", [("grid", "mean", "prompt 512 x batch 1"),
                                                  ("splitwisesim", "median", "prompt x batch = 512 tokens")])
def test_repeats_that_disagree_are_named(tmp_path, rows, interp, taken, point):
    """A prefill time 100x its repeats (a unit slip) went into the table's mean without a
    word; the shipped profile's repeats differ by at most 1.45x and raise no note."""
    slipped = rows.copy()
    at = slipped.index[(slipped.hardware == H100) & (slipped.tensor_parallel == 8) & (slipped.prompt_size == 512)
                       & (slipped.batch_size == 1)][0]
    slipped.loc[at, "prompt_time_ms"] *= 100
    path = tmp_path / "slipped.csv"
    slipped.to_csv(path, index=False)
    notes = load_profile_model(path, interp).fallbacks(LLAMA, [(H100, 8)])
    same = (rows.hardware == H100) & (rows.tensor_parallel == 8) & (
        (rows.prompt_size == 512) & (rows.batch_size == 1) if interp == "grid"
        else rows.prompt_size * rows.batch_size == 512)   # splitwisesim: one knot per prompt x batch
    cell = rows.loc[same, "prompt_time_ms"].drop(at)
    assert notes[1] == (f"llama2-70b on h100-80gb TP 8: repeated prefill measurements of 1 point(s) differ by up to "
                        f"{slipped.loc[at, 'prompt_time_ms'] / cell.min():.3g}x ({point}: "
                        f"{cell.min():.4g} to {slipped.loc[at, 'prompt_time_ms']:.4g} ms), more than 2x; the table "
                        f"takes their {taken}: check those rows")
    assert len(notes) == 2
    assert not [n for n in load_profile_model(PROFILE, interp).fallbacks(LLAMA, [(H100, 8), (A100, 8)])
                if "differ by" in n]


def test_splitwisesim_rule(sws, rows):
    sel = rows[(rows.hardware == H100) & (rows.tensor_parallel == 8)]
    x = sel.prompt_size * sel.batch_size
    med = sel.assign(x=x).groupby("x")[["prompt_time_ms", "token_time_ms"]].median()
    # a prefill at measured batch tokens: the median; between two: linear
    assert sws.prefill_time_s(LLAMA, H100, 8, 4096, 1) * 1e3 == pytest.approx(med.prompt_time_ms[4096], rel=1e-12)
    assert sws.prefill_time_s(LLAMA, H100, 8, 3072, 1) * 1e3 == pytest.approx(
        med.prompt_time_ms[[2048, 4096]].mean(), rel=1e-12)
    # a decode of b requests is looked up at batch tokens b, extrapolated below 128
    slope = (med.token_time_ms[256] - med.token_time_ms[128]) / 128
    assert sws.decode_time_s(LLAMA, H100, 8, 10, 5000) * 1e3 == pytest.approx(
        med.token_time_ms[128] + slope * (10 - 128), rel=1e-12)
    # a mixed pass: prefill lookup at all its tokens x 1.1
    mixed = sws.iteration_time_s(LLAMA, H100, 8, prefill_tokens=2000, prefill_sq_tokens=4e6, prefill_seqs=1,
                                 decode_batch=48, decode_context_tokens=48 * 900)
    assert mixed == pytest.approx(1.1 * sws.prefill_time_s(LLAMA, H100, 8, 2048, 1), rel=1e-12)
    # SplitwiseSim's SLO reference: TBT = decode lookup at batch tokens = prompt size
    ttft, tbt, e2e = sws.solo_request_s(LLAMA, A100, 8, np.array([1024]), np.array([11]))
    assert tbt[0] == pytest.approx(float(sws.decode_time_s(LLAMA, A100, 8, 1024, 0)), rel=1e-12)
    assert e2e[0] == pytest.approx(ttft[0] + 10 * tbt[0], rel=1e-12)


def test_a_power_cap_scales_the_measurements_like_the_roofline(grid):
    roof = LatencyModel()
    ratio = roof.prefill_time_s(LLAMA, H100, 8, 2048, 1, 0.5) / roof.prefill_time_s(LLAMA, H100, 8, 2048, 1, 1.0)
    assert ratio > 1.1
    assert grid.prefill_time_s(LLAMA, H100, 8, 1024, 1, 0.5) == pytest.approx(
        ratio * grid.prefill_time_s(LLAMA, H100, 8, 1024, 1, 1.0), rel=1e-12)


# -- both engines evaluate the same vectors ----------------------------------------------
def _one_request(s, n):
    return Trace(arrival_s=[0.0], prompt_tokens=[s], output_tokens=[n], name="one", duration_s=1.0)


@pytest.mark.parametrize("engine", ["fluid", "des"])
def test_engines_use_the_table(engine, sws, grid):
    """One request alone: TTFT is the prefill lookup; E2E adds n - 1 decode lookups at batch 1."""
    trace = _one_request(3000, 5)
    for perf in (grid, sws):
        row = simulate(make_design("splitwise-hh", 1, 1), trace, LLAMA, engine=engine, perf=perf).iloc[0]
        assert row.ttft_p50_s == pytest.approx(float(perf.prefill_time_s(LLAMA, H100, 8, 3000, 1)), rel=1e-12)
        decode = float(perf.decode_time_s(LLAMA, H100, 8, 1, 3001))   # grid: flat enough in context
        assert row.tbt_p50_s > decode * 0.99


def test_engines_agree_and_the_roofline_fallback_is_exact(sws):
    rng = np.random.default_rng(0)
    n = 300
    trace = Trace(arrival_s=np.sort(rng.uniform(0, 30, n)), prompt_tokens=rng.integers(50, 4000, n),
                  output_tokens=rng.integers(1, 200, n), name="t", duration_s=30.0)
    designs = [make_design("splitwise-hh", 2, 1), make_design("baseline-h100", machines=3)]
    fluid = simulate(designs, trace, LLAMA, perf=sws)
    des = simulate(designs, trace, LLAMA, perf=sws, engine="des")
    cols = [f"{m}_p{p}_s" for m in ("ttft", "tbt", "e2e") for p in (50, 90, 99)]
    np.testing.assert_allclose(fluid[cols].to_numpy(), des[cols].to_numpy(), rtol=0.1)
    # a model the profile lacks runs on the roofline, bit for bit
    unmeasured = simulate(designs, trace, "llama-13b", perf=sws)
    roof = simulate(designs, trace, "llama-13b")
    assert unmeasured[cols].equals(roof[cols])


# -- malformed profiles --------------------------------------------------------------------
@pytest.mark.parametrize("text, needles", [
    (GOOD.replace(",token_time_ms", ""), ["line 1", "missing column 'token_time_ms'"]),
    (GOOD.replace("53.8", "0"), ["line 2, column prompt_time_ms", "positive"]),
    (GOOD.replace("29.7", "-3"), ["line 3, column token_time_ms", "positive"]),
    (GOOD.replace("h100-80gb,8,1024", "h900,8,1024"), ["line 3, column hardware", "unknown gpu 'h900'"]),
    (GOOD.replace("77.9", "fast"), ["line 3, column prompt_time_ms", "must be a positive number"]),
    (GOOD.replace("llama2-70b,h100-80gb,8,512", "llama2-70b,h100-80gb,3,512"), ["line 2, column tensor_parallel",
                                                                                 "must be 1, 2, 4 or 8"]),
    # a short row was refused, a long one (a comma too many) read as if the extra field were not there
    (GOOD.replace("29.7", "29,7"), ["line 3: 9 fields but the header has 8; fix the commas"]),
    # blank lines above the header: the file's own line numbers (the header was read as empty)
    ("\n \n" + GOOD.replace("29.7", "-3"), ["line 5, column token_time_ms", "positive"]),
    # a repeated column: the first was read and the second ignored without a word
    (GOOD.replace("\n", ",prompt_time_ms\n", 1).replace("5\n", "5,9\n"), ["line 1", "column 'prompt_time_ms' "
                                                                                   "appears twice"]),
    (GOOD.replace("\n", ",prompt_time\n", 1).replace("5\n", "5,9\n"), ["columns 'prompt_time_ms' and "
                                                                                "'prompt_time' both give"]),
])
def test_malformed_profiles_are_refused(tmp_path, text, needles):
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(PerfModelError) as err:
        load_profile_model(path)
    for needle in needles + [str(path)]:
        assert needle in str(err.value)
    assert str(err.value).startswith(f"{path}, ")   # a Python caller is told the path, not a flag


def _provision(*args, cwd):
    return subprocess.run([PROVISION, *map(str, args)], cwd=cwd, capture_output=True, text=True, timeout=600)


def test_cli_refuses_a_malformed_profile_with_one_line(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text(GOOD.replace("h100-80gb,8,1024", "h900,8,1024"))
    for cmd in (["simulate", "--design", "splitwise-hh", "--prompt-machines", "2", "--token-machines", "1"],
                ["--goal", "cost", "--rps", "5"]):
        r = _provision(*cmd, "--latency-profile", path, cwd=tmp_path)
        assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and "line 3" in lines[0] and "hardware" in lines[0]
    r = _provision("simulate", "--design", "splitwise-hh", "--prompt-machines", "2", "--token-machines", "1",
                   "--latency-interp", "splitwisesim", cwd=tmp_path)
    assert r.returncode == 2 and "--latency-interp needs --latency-profile" in r.stderr


def test_provision_refuses_a_long_profile_row_naming_the_flag(tmp_path, capsys, monkeypatch):
    """A comma too many was read as if the extra field were not there (`perf calibrate`
    refused it): one reader now, and its errors name the flag that gave the file."""
    from provisioner.cli import run
    (tmp_path / "long.csv").write_text(GOOD.replace("77.9", "77,9"))
    monkeypatch.chdir(tmp_path)
    code = run(["--goal", "cost", "--rps", "5", "--latency-profile", "long.csv"])
    err = capsys.readouterr().err
    assert code == 2 and err.strip() == ("error: --latency-profile 'long.csv', line 3: 9 fields but the header has "
                                         "8; fix the commas on that line"), err


def test_cli_simulate_with_a_profile_says_where_it_falls_back(tmp_path):
    r = _provision("simulate", "--design", "splitwise-hh", "--prompt-machines", "3", "--token-machines", "1",
                   "--model", LLAMA, "--rps", "8", "--duration", "20", "--latency-profile", PROFILE,
                   "--latency-interp", "splitwisesim", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    obj = json.loads(r.stdout)
    lm = obj["latency_model"]
    assert lm["kind"] == "profile" and lm["interp"] == "splitwisesim" and len(lm["sha256"]) == 64
    assert "llama2-70b/h100-80gb/tp8" in lm["measured"] and lm["fallbacks"]
    assert r.stderr.count("warning: latency profile:") == len(lm["fallbacks"])
    assert obj["requests"] > 0


def test_perf_plot_draws_the_profile_model(sws):
    from perfmodels import calibrate
    from reports import perf_plot_data, profile_curves

    data = perf_plot_data(calibrate(holdout_fraction=0.2, seed=0), grid_points=8)
    drawn = profile_curves(data, sws)
    line = drawn[(drawn.kind == "model") & (drawn.panel == "prefill_vs_batch") & (drawn.gpu == H100) & (drawn.tp == 8)]
    np.testing.assert_allclose(line.time_ms, 1e3 * sws.prefill_time_s(LLAMA, H100, 8, 512, line.batch_size.to_numpy()))
    measured = drawn.kind == "measured"
    assert drawn[measured].time_ms.equals(data[measured].time_ms)   # the measurements are untouched


def test_cli_provision_searches_with_the_profile(tmp_path):
    r = _provision("--goal", "cost", "--rps", "6", "--design", "splitwise-hh", "--model", LLAMA, "--duration", "20",
                   "--no-verify", "--latency-profile", PROFILE, "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    obj = json.loads(r.stdout)
    assert obj["latency_model"]["interp"] == "grid" and obj["latency_model"]["fallbacks"]
    assert "warning: latency profile: llama2-70b on h100-80gb TP 8" in r.stderr
    assert obj["best"][0]["feasible"]


def test_a_one_point_profile(tmp_path):
    path = tmp_path / "one.csv"
    path.write_text(GOOD.rsplit("\n", 2)[0] + "\n")   # the header and one measurement
    grid = load_profile_model(path, "grid")
    assert grid.prefill_time_s(LLAMA, H100, 8, 512, 1) == pytest.approx(0.0538, rel=1e-12)
    assert grid.prefill_time_s(LLAMA, H100, 8, 600, 1) == LatencyModel().prefill_time_s(LLAMA, H100, 8, 600, 1)
    with pytest.raises(PerfModelError, match="needs two or more"):
        load_profile_model(path, "splitwisesim")
    with pytest.raises(PerfModelError, match="--latency-interp must be one of grid, splitwisesim"):
        load_profile_model(path, "cubic")


# -- the smallest times an interpolation gives ---------------------------------------------
HEAD = "model,hardware,tensor_parallel,prompt_size,batch_size,token_size,prompt_time_ms,token_time_ms\n"


@pytest.mark.parametrize("interp, rows, tail", [
    # a cross (batch 1 over prompts, prompt 512 over batches): the product rule fills (1024, 64)
    # with t(1024, 1) x t(512, 64) / t(512, 1) = 0.001 x 0.001 / 1 ms
    ("grid", "512,1,128,100,1.0\n1024,1,128,200,0.001\n512,64,128,300,0.001\n",
     "the grid's product-rule fill gives 1e-06 ms (under 1 us) for a decode iteration at prompt_size 1024, "
     "batch_size 64; give a measurement there"),
    # SplitwiseSim's rule: a decode of 1 request, extrapolated from the knots 2 and 3 batch tokens
    ("splitwisesim", "2,1,128,1.0,0.001\n3,1,128,1.1,0.001999999999999\n",
     "the splitwisesim rule extrapolates a decode iteration of 1 request to 1e-15 ms (under 1 us); give "
     "measurements at smaller prompt_size x batch_size (down to 1) or use --latency-interp grid"),
    # a prefill of 1 token extrapolated below zero (it used the roofline without a word)
    ("splitwisesim", "2,1,128,1.0,1.0\n3,1,128,3.0,1.1\n",
     "the splitwisesim rule extrapolates a prefill of 1 token to -1 ms (under 1 us); give measurements at "
     "smaller prompt_size x batch_size (down to 1) or use --latency-interp grid"),
])
def test_an_interpolation_under_a_microsecond_is_refused_when_built(tmp_path, interp, rows, tail):
    """Every measurement is above the reader's 1-us floor, but the model would time a pass the
    engines ask (a batch of 1, a prompt of 1 token, a filled cell) under it: refused at load,
    not mid-simulation (the fluid engine's clock stopped; the DES gave meaningless results)."""
    path = tmp_path / "p.csv"
    path.write_text(HEAD + "".join(f"{LLAMA},{A100},8,{r}\n" for r in rows.splitlines()))
    with pytest.raises(PerfModelError) as err:
        load_profile_model(path, interp)
    assert str(err.value) == f"{path}: {LLAMA} on {A100} TP 8: {tail}"
    # the other interpolation reads the same file: grid does not extrapolate, and the
    # splitwisesim knots 512, 1024 and 32768 batch tokens give no lookup under 1 us
    load_profile_model(path, "splitwisesim" if interp == "grid" else "grid")


def test_a_splitwisesim_line_falling_under_a_microsecond_past_the_last_knot_uses_the_roofline(tmp_path):
    """Beyond its last knot a falling line gives times under 1 us, then under zero, at some
    size: the roofline is used for both (the shipped profile's TP2 tables fall there, so a
    falling last segment is not refused)."""
    path = tmp_path / "p.csv"
    path.write_text(HEAD + f"{LLAMA},{A100},8,1,1,128,1.0,1.0005\n{LLAMA},{A100},8,2,1,128,2.0,0.5005\n")
    sws = load_profile_model(path, "splitwisesim")
    roof = LatencyModel()
    assert sws.decode_time_s(LLAMA, A100, 8, 2, 100) == pytest.approx(0.5005e-3, rel=1e-12)
    for batch in (3, 4):   # 0.0005 ms, then -0.4995 ms
        assert sws.decode_time_s(LLAMA, A100, 8, batch, 100) == roof.decode_time_s(LLAMA, A100, 8, batch, 100)
