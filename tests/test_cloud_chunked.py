"""Chunked prefill on cloud plans (SEMANTICS.md, "Chunked prefill" and "Cloud plans"): a
non-split plan's replicas chunk in both engines exactly as the uniform designs' machines
do; a split plan's prefill replicas never chunk; `provision cloud --prefill-chunk-tokens`."""

from __future__ import annotations

import json

import numpy as np
import pytest

from perfmodels import N_COEF, LatencyModel
from provisioner.cloud import COMPARISON_CHUNK_TOKENS, load_inventory, make_context, simulate_plan
from provisioner.sim import ServerPlan, SimInputs
from provisioner.sim.testing import run_des, run_fluid
from workloads import TraceGenerator

CONTRACT_KEYS = {"replicas", "throughput_rps", "slo_attainment", "elapsed_s"}   # CONTRACTS.md item 4


def _one_replica_inputs(chunk_tokens, arrival_s, prompt_tokens, output_tokens):
    """A non-split plan of one replica: a s per token (prompt and decode alike, compute) and at
    least tau per iteration (a fixed HBM time): an iteration of k tokens takes max(a k, tau)."""
    a, tau = 1e-3, 0.05
    coef = np.zeros((1, N_COEF))
    coef[0, 0], coef[0, 4] = a, tau
    plan = ServerPlan(coef=coef, kv_cap_tokens=np.array([1e6]), prefill_share=np.array([1.0]),
                      decode_share=np.zeros((1, 0)), kv_setup_s=np.zeros((1, 0)), kv_s_per_token=np.zeros((1, 0)))
    return SimInputs(
        n_machines=np.array([[1, 0]], np.int64), coef=np.stack([coef, coef], axis=1),
        kv_cap_tokens=np.array([[1e6, 1e6]]), batch_cap_tokens=np.array([2048.0]),
        chunk_tokens=np.array([float(chunk_tokens)]), allow_borrow=np.zeros(1, bool), mps_share=np.zeros(1),
        kv_s_per_token=np.zeros(1), kv_setup_s=np.zeros(1), n_layers=60, layerwise_min_tokens=512.0,
        overload_tokens=np.array([np.inf]), arrival_s=np.asarray(arrival_s, float),
        prompt_tokens=np.asarray(prompt_tokens, np.int64), output_tokens=np.asarray(output_tokens, np.int64),
        servers=(plan,))


@pytest.mark.parametrize("engine", [run_des, run_fluid], ids=["des", "fluid"])
@pytest.mark.parametrize("chunk, first, finish", [
    # 512-token chunks: r0's decodes ride along with r1's chunks of 512, 512, 176 tokens
    # (0.05-0.563, -1.076, -1.253): no iteration carries more than 512 prompt tokens, r0's
    # tokens come every ~0.5 s and it finishes with r1's last chunk.
    (512, [0.05, 1.253], [1.253, 1.253]),
    # whole prompts: r1's 1200 tokens in one iteration (0.05-1.251) stall r0's decode behind
    # them, then r0 decodes alone twice (1.301, 1.351).
    (0, [0.05, 1.251], [1.351, 1.251]),
])
def test_a_non_split_replica_chunks_long_prompts_in_both_engines(engine, chunk, first, finish):
    """r0 (10-token prompt, 4 tokens) prefills alone at 0 (tau: 0.05 s); r1 (1200 tokens, 1
    token) arrives at 0.005 and is prefilled in the iterations that decode r0."""
    out = engine(_one_replica_inputs(chunk, [0.0, 0.005], [10, 1200], [4, 1]))
    np.testing.assert_allclose(out.first_token_s[0], first, rtol=1e-12)
    np.testing.assert_allclose(out.finish_s[0], finish, rtol=1e-12)


@pytest.fixture(scope="module")
def ctx():
    perf = LatencyModel()
    trace = TraceGenerator("coding", 60.0, 0, rps=2.0).at(2.0)
    return make_context(load_inventory("thunderserve-32gpu", perf.catalog), perf.llm("llama-30b"), perf, trace), trace


def test_only_non_split_plans_chunk(ctx):
    """The budget changes a non-split plan's run (its replicas batch prefill with decode) and
    leaves a split plan's unchanged (its prefill replicas have no decode to protect)."""
    c, trace = ctx
    split = [(((4, 4),), "prefill"), (((5, 4),), "decode")]   # 4 of the A40 node's GPUs, a 4x3090Ti node
    mixed = [(((4, 4),), "both"), (((5, 4),), "both")]
    assert simulate_plan(c, split, trace, chunk_tokens=256) == simulate_plan(c, split, trace)
    assert simulate_plan(c, mixed, trace, chunk_tokens=256)["latency_s"] != simulate_plan(c, mixed, trace)["latency_s"]


@pytest.mark.parametrize("bad", ["-1", "-512"])
def test_cli_bad_chunk_budget_is_one_line(capsys, bad):
    from provisioner.cli import run
    assert run(["cloud", "--inventory", "thunderserve-32gpu", "--rps", "1", "--prefill-chunk-tokens", bad]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and f"--prefill-chunk-tokens must be an integer in [0, 10000000] (got {bad})" in err


def _cloud_json(*extra, duration_s: int = 60):
    from typer.testing import CliRunner

    from provisioner.cli import get_app
    res = CliRunner().invoke(get_app(), ["cloud", "--inventory", "thunderserve-32gpu", "--workload", "coding",
                                         "--rps", "2", "--duration", str(duration_s), "--json", *extra])
    assert res.exit_code == 0, res.output
    return json.loads(res.output)


def test_cli_reports_the_chunked_non_split_comparison_beside_the_unchunked_one(tmp_path):
    """Default: one budget, COMPARISON_CHUNK_TOKENS, beside `non_split` (whole prompts), in
    the JSON and the HTML report; the contract's keys unchanged; 0 turns it off."""
    page = tmp_path / "plan.html"
    default, off = _cloud_json("--report", str(page)), _cloud_json("--prefill-chunk-tokens", "0")
    assert CONTRACT_KEYS <= default.keys() and "non_split" in default
    ch = default["non_split_chunked"]
    assert ch["budgets_searched"] == [COMPARISON_CHUNK_TOKENS] == [ch["prefill_chunk_tokens"]]
    assert all(r["phase"] == "both" for r in ch["replicas"])
    assert default["split_over_non_split_chunked_sustained"] == pytest.approx(
        default["sustained_rps"] / ch["sustained_rps"])
    assert f"Best non-split plan, chunked prefill ({ch['prefill_chunk_tokens']} tokens)" in page.read_text()
    assert "non_split_chunked" not in off and "split_over_non_split_chunked_sustained" not in off
    assert {k: off[k] for k in CONTRACT_KEYS - {"elapsed_s"}} == {k: default[k] for k in CONTRACT_KEYS - {"elapsed_s"}}


def test_the_chunked_comparison_is_the_same_computed_beside_the_split_plan_or_after_it(monkeypatch):
    """It runs in a worker process beside the split plan (`provisioner.workers.beside`): the
    same answer, to the last digit, as computed in this process after it."""
    from provisioner.workers import beside

    in_worker = _cloud_json(duration_s=30)
    monkeypatch.setattr("provisioner.cloud._answer.beside",
                        lambda fn, *args, parallel=True: beside(fn, *args, parallel=False))
    here = _cloud_json(duration_s=30)
    in_worker.pop("elapsed_s"), here.pop("elapsed_s")
    assert in_worker == here
