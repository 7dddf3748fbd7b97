"""Chunked prefill (SEMANTICS.md, "Chunked prefill"): hand-computed cases in both engines,
the budget and the once-only prefill on a real trace, and the CLI and search surface.

Expected times come from the numpy `time_from_coefficients`, independently of the engines.
"""

from __future__ import annotations

import contextlib
import io
import json
from types import SimpleNamespace

import numpy as np
import pytest

from perfmodels import time_from_coefficients
from provisioner.cli import run as run_cli
from provisioner.designs import CHUNK_TOKEN_CHOICES, DesignBatch, make_design
from provisioner.sim import simulate
from provisioner.search import family_space
from provisioner.sim.testing import build_inputs, recorded_des_iterations, run_des, run_fluid
from workloads import make_workload

MODEL = "bloom-176b"
ENGINES = {"fluid": run_fluid, "des": run_des}
# The DES is exact. The fluid engine takes a decode stretch's context at its start, without
# the token the prefill made (one token of context: ~1e-6 relative here); prefills are exact.
DECODE_RTOL = {"fluid": 1e-5, "des": 1e-12}


def _trace(arrival_s, prompt_tokens, output_tokens):
    return SimpleNamespace(arrival_s=np.asarray(arrival_s, dtype=float),
                           prompt_tokens=np.asarray(prompt_tokens), output_tokens=np.asarray(output_tokens))


def _f(coef, n_p=0, sq=0, seqs=0, b=0, ctx=0):
    return float(time_from_coefficients(coef, n_p, sq, seqs, b, ctx))


def _run(engine, perf, llm, design, trace):
    inp = build_inputs(DesignBatch.from_designs([design]), trace, llm, perf)
    return inp.coef[0, 0], ENGINES[engine](inp)


@pytest.mark.parametrize("engine", ENGINES)
def test_a_long_prompt_is_prefilled_once_across_its_chunks(engine, perf, llm):
    s = 1300
    design = make_design("baseline-h100", machines=1, prefill_chunk_tokens=512)
    c, out = _run(engine, perf, llm, design, _trace([0.0], [s], [2]))
    # Chunks 512, 512, 276 at offsets 0, 512, 1024: attention (o + c)^2 - o^2 each.
    ttft = _f(c, 512, 512**2, 1) + _f(c, 512, 1024**2 - 512**2, 1) + _f(c, 276, s**2 - 1024**2, 1)
    np.testing.assert_allclose(out.first_token_s[0], [ttft], rtol=1e-12)
    np.testing.assert_allclose(out.finish_s[0], [ttft + _f(c, b=1, ctx=s + 1)], rtol=DECODE_RTOL[engine])


@pytest.mark.parametrize("engine", ENGINES)
def test_a_chunk_fills_the_budget_and_rides_with_decodes(engine, perf, llm):
    design = make_design("baseline-h100", machines=1, prefill_chunk_tokens=512)
    # r0 starts alone at 0; r1 and r2 arrive during its first chunk.
    c, out = _run(engine, perf, llm, design, _trace([0.0, 1e-3, 2e-3], [600, 300, 400], [3, 2, 2]))
    t1 = _f(c, 512, 512**2, 1)                                              # r0: 512 of 600
    t2 = t1 + _f(c, 512, (600**2 - 512**2) + 300**2 + 124**2, 3)            # r0's 88, r1, r2's first 124
    t3 = t2 + _f(c, 276, 400**2 - 124**2, 1, 2, 601 + 301)                  # r2's last 276; r0, r1 decode
    t4 = t3 + _f(c, 0, 0, 0, 2, 602 + 401)                                  # r0's last token, r2's decode
    rtol = DECODE_RTOL[engine]
    np.testing.assert_allclose(out.first_token_s[0], [t2, t2, t3], rtol=rtol)
    np.testing.assert_allclose(out.finish_s[0], [t4, t3, t4], rtol=rtol)


@pytest.mark.parametrize("engine", ENGINES)
def test_without_chunking_the_same_prompts_run_whole(engine, perf, llm):
    design = make_design("baseline-h100", machines=1)
    c, out = _run(engine, perf, llm, design, _trace([0.0], [1300], [2]))
    np.testing.assert_allclose(out.first_token_s[0], [_f(c, 1300, 1300**2, 1)], rtol=1e-12)


def test_no_iteration_carries_more_prompt_tokens_than_the_budget(perf, llm):
    """On a real trace, every DES iteration's prompt tokens stay within the budget, and the
    chunks of all iterations add up to every prompt token exactly once."""
    trace = make_workload("coding", rps=20, duration_s=20, seed=3)
    for budget in (256, 512):
        inp = build_inputs(DesignBatch.from_designs(
            [make_design("baseline-h100", machines=3, prefill_chunk_tokens=budget)]), trace, llm, perf)
        with recorded_des_iterations() as log:
            run_des(inp)
        tokens = np.array([it[0] for it in log])
        assert tokens.max() <= budget
        assert tokens.sum() == trace.prompt_tokens.sum()
        # Attention: the chunks' (o + c)^2 - o^2 telescope to each prompt's s^2.
        assert sum(it[1] for it in log) == pytest.approx(float(np.sum(trace.prompt_tokens.astype(float) ** 2)))


def test_chunking_cuts_the_decode_stall_of_a_busy_baseline(perf):
    """Long prefills stall the decodes riding with them; chunks bound the stall (Sarathi-Serve)."""
    trace = make_workload("coding", rps=40, duration_s=60, seed=0)
    designs = [make_design("baseline-h100", machines=30),
               make_design("baseline-h100", machines=30, prefill_chunk_tokens=512)]
    rows = simulate(designs, trace, MODEL, perf=perf)
    assert rows["tbt_p99_s"].iloc[1] < 0.7 * rows["tbt_p99_s"].iloc[0]


@pytest.mark.parametrize("family", ["baseline-h100-chunked", "splitwise-hh"])
def test_engines_agree_with_chunking(family, perf):
    trace = make_workload("conversation", rps=30, duration_s=40, seed=1)
    design = (make_design(family, machines=12) if family.startswith("baseline")
              else make_design(family, 10, 6, prefill_chunk_tokens=1024))
    fluid, des = (simulate(design, trace, MODEL, engine=e, perf=perf).iloc[0] for e in ("fluid", "des"))
    for m in ("ttft", "tbt", "e2e"):
        for p in (50, 90):
            assert fluid[f"{m}_p{p}_s"] == pytest.approx(des[f"{m}_p{p}_s"], rel=0.05), (m, p)


# --- search and CLI -----------------------------------------------------------------------

def cli(*argv) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of `provision ARGV`, in this process."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = run_cli([str(a) for a in argv])
    return code, out.getvalue(), err.getvalue()


def test_chunked_family_searches_every_budget_and_a_given_budget_is_fixed():
    parts = family_space("baseline-h100-chunked").grid_parts()
    assert sorted(p.prefill_chunks[0] for p in parts) == sorted(CHUNK_TOKEN_CHOICES)
    assert [p.prefill_chunks for p in family_space("baseline-h100-chunked", prefill_chunk_tokens=512).grid_parts()] \
        == [(512,)]
    assert family_space("baseline-h100").prefill_chunks == (0,)
    assert family_space("splitwise-hh", prefill_chunk_tokens=1024).designs([3], [2]).prefill_chunk_tokens[0] == 1024


def test_cli_simulate_with_a_chunk():
    code, out, err = cli("simulate", "--design", "baseline-h100", "--machines", "20", "--rps", "20", "--duration",
                         "30", "--prefill-chunk-tokens", "512", "--json")
    assert code == 0, err
    assert json.loads(out)["design"]["prefill_chunk_tokens"] == 512


def test_cli_provision_chunked_baseline_and_a_fixed_chunk():
    code, out, err = cli("--goal", "cost", "--rps", "20", "--duration", "30", "--design", "baseline-h100-chunked",
                         "--design", "baseline-h100", "--no-verify", "--json")
    assert code == 0, err
    best = {b["design"]["family"]: b for b in json.loads(out)["best"]}
    assert best["baseline-h100-chunked"]["design"]["prefill_chunk_tokens"] in CHUNK_TOKEN_CHOICES
    assert best["baseline-h100"]["design"]["prefill_chunk_tokens"] == 0
    assert best["baseline-h100-chunked"]["cost_usd_per_h"] <= best["baseline-h100"]["cost_usd_per_h"]
    code, out, err = cli("--goal", "cost", "--rps", "20", "--duration", "30", "--design", "baseline-h100",
                         "--prefill-chunk-tokens", "256", "--no-verify", "--json")
    assert code == 0, err
    assert json.loads(out)["best"][0]["design"]["prefill_chunk_tokens"] == 256


@pytest.mark.parametrize("argv", [["simulate", "--design", "baseline-h100", "--machines", "2",
                                   "--prefill-chunk-tokens", "-1"],
                                  ["--goal", "cost", "--rps", "5", "--prefill-chunk-tokens", "-3"]])
def test_cli_rejects_a_negative_chunk(argv):
    code, out, err = cli(*argv)
    assert code == 2 and "Traceback" not in out + err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "--prefill-chunk-tokens" in lines[0], err
