"""Splitwiser (SEMANTICS.md, "Splitwiser"): a prefill and a decode process sharing each
machine's GPUs under MPS. Hand-computed cases in both engines, engine agreement on a
loaded design, the search space and the CLI as typed.

Expected times come from the numpy `time_from_coefficients`, independently of the engines.
"""

from __future__ import annotations

import contextlib
import io
import json
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest

from perfmodels import shared_iteration_s, time_from_coefficients
from provisioner.cli import run as run_cli
from provisioner.designs import MPS_SHARE_CHOICES, DesignBatch, make_design
from provisioner.search import family_space
from provisioner.sim import simulate
from provisioner.sim.testing import build_inputs, run_des, run_fluid
from workloads import make_workload

MODEL = "bloom-176b"
ENGINES = {"fluid": run_fluid, "des": run_des}
# The fluid engine takes a decode stretch's context at its start (~1e-6 relative here).
DECODE_RTOL = {"fluid": 1e-5, "des": 1e-12}
# Roofline coefficients of compute (GEMM, LM head, attention): with every other one zero
# an iteration is purely compute-bound, T = C, and its HBM demand is 0.
COMPUTE_COEFS = (0, 1, 2, 3)


def _trace(arrival_s, prompt_tokens, output_tokens):
    return SimpleNamespace(arrival_s=np.asarray(arrival_s, dtype=float),
                           prompt_tokens=np.asarray(prompt_tokens), output_tokens=np.asarray(output_tokens))


def _f(coef, n_p=0, sq=0, seqs=0, b=0, ctx=0):
    return float(time_from_coefficients(coef, n_p, sq, seqs, b, ctx))


def _inputs(perf, llm, design, trace, compute_only=False):
    inp = build_inputs(DesignBatch.from_designs([design]), trace, llm, perf)
    if compute_only:
        coef = np.zeros_like(inp.coef)
        coef[..., COMPUTE_COEFS] = inp.coef[..., COMPUTE_COEFS]
        inp = replace(inp, coef=coef)
    return inp


def test_the_sharing_rule_by_hand():
    # Compute-bound (C=0.2, u=0.1, rest 0.05) with 30% of the SMs: 0.2/0.3 + 0.05.
    assert shared_iteration_s(0.25, 0.2, 0.1, 0.05, 0.5, 0.3) == pytest.approx(0.2 / 0.3 + 0.05)
    # Memory-bound (u=0.8) beside a sibling asking 0.6 of the bandwidth: stretched by 1.4.
    assert shared_iteration_s(0.1, 0.01, 0.8, 0.02, 0.6, 0.7) == pytest.approx(0.1 * 1.4)
    # Demands that fit the peak together and enough SMs: no slow-down.
    assert shared_iteration_s(0.1, 0.01, 0.5, 0.02, 0.4, 0.7) == pytest.approx(0.1)


@pytest.mark.parametrize("engine", ENGINES)
def test_one_request_alone_takes_a_plain_machines_time(engine, perf, llm):
    trace = _trace([0.0], [1500], [20])
    outs = [ENGINES[engine](_inputs(perf, llm, make_design(f, machines=1), trace))
            for f in ("baseline-h100", "splitwiser-h100")]
    np.testing.assert_allclose(outs[1].first_token_s, outs[0].first_token_s, rtol=1e-12)
    np.testing.assert_allclose(outs[1].finish_s, outs[0].finish_s, rtol=DECODE_RTOL[engine])
    c = _inputs(perf, llm, make_design("baseline-h100", machines=1), trace).coef[0, 0]
    assert outs[1].first_token_s[0, 0] == pytest.approx(_f(c, 1500, 1500**2, 1), rel=1e-12)


@pytest.mark.parametrize("engine", ENGINES)
def test_two_concurrent_compute_bound_phases(engine, perf, llm):
    """r0's prefill runs alone; its one decode iteration then runs beside r1's prefill.
    With 30% of the SMs to the prefill, the decode takes C_d / 0.7; the prefill does 0.3 of
    that time's worth meanwhile and the rest alone: C_p + C_d in all (work-conserving)."""
    share = 0.3
    design = make_design("splitwiser-h100", machines=1, mps_prefill_share=share)
    s0, s1 = 800, 1200
    inp = _inputs(perf, llm, design, _trace([0.0, 0.01], [s0, s1], [2, 1]), compute_only=True)
    c = inp.coef[0, 0]
    a = _f(c, s0, s0**2, 1)                    # r0's prefill, alone
    # r0's decode iteration alone; the fluid engine leaves out the token the prefill made
    c_d = _f(c, b=1, ctx=s0 + (engine == "des"))
    c_p = _f(c, s1, s1**2, 1)                  # r1's prefill alone
    assert c_p > c_d / (1 - share) * share     # the decode ends first
    out = ENGINES[engine](inp)
    decode_s = out.finish_s[0, 0] - a
    prefill_s = out.first_token_s[0, 1] - a
    assert decode_s == pytest.approx(c_d / (1 - share), rel=1e-9)
    assert prefill_s == pytest.approx(c_p + c_d, rel=1e-9)
    for took, solo, other in ((decode_s, c_d, c_p), (prefill_s, c_p, c_d)):
        assert solo * (1 - 1e-9) <= took <= (solo + other) * (1 + 1e-9)
    # busy time is real elapsed time: both prefills on the prompt server, the decode on the token server
    np.testing.assert_allclose(out.busy_s[0], [a + prefill_s, decode_s], rtol=1e-9)


@pytest.mark.parametrize("workload, rps, machines", [("coding", 12, 8), ("conversation", 20, 6)])
def test_engines_agree_on_a_loaded_splitwiser_design(workload, rps, machines, perf):
    trace = make_workload(workload, rps=rps, duration_s=40, seed=2)
    design = make_design("splitwiser-h100", machines=machines, mps_prefill_share=0.5)
    fluid, des = (simulate(design, trace, MODEL, engine=e, perf=perf).iloc[0] for e in ("fluid", "des"))
    for m in ("ttft", "tbt", "e2e"):
        for p in (50, 90):
            assert fluid[f"{m}_p{p}_s"] == pytest.approx(des[f"{m}_p{p}_s"], rel=0.05), (m, p)


def test_kv_budget_of_a_splitwiser_machine(perf):
    """One budget per machine: HBM after the weights (once, or twice when duplicated) and
    after the prefill process's working set (its batch cap, here 2048 tokens)."""
    llm = perf.catalog.model("llama2-70b")
    trace = _trace([0.0], [100], [2])
    plain, shared, dup = (_inputs(perf, llm, make_design(f, machines=1, **kw), trace).kv_cap_tokens[0]
                          for f, kw in (("baseline-a100", {}), ("splitwiser-a100", {}),
                                        ("splitwiser-a100", {"duplicate_weights": True})))
    assert shared[1] == pytest.approx(plain[0] - 2048)
    assert dup[1] == pytest.approx(shared[1] - llm.weight_bytes / llm.kv_bytes_per_token)


def test_duplicated_weights_that_do_not_fit_are_refused(perf, llm):
    from provisioner.errors import ProvisionerError
    with pytest.raises(ProvisionerError, match="duplicate_weights"):
        _inputs(perf, llm, make_design("splitwiser-a100", machines=1, duplicate_weights=True), _trace([0.0], [9], [2]))


# --- search and CLI -----------------------------------------------------------------------

def cli(*argv) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of `provision ARGV`, in this process."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = run_cli([str(a) for a in argv])
    return code, out.getvalue(), err.getvalue()


def test_splitwiser_searches_every_share_and_a_given_share_is_fixed():
    parts = family_space("splitwiser-h100").grid_parts()
    assert sorted(p.mps_shares[0] for p in parts) == sorted(MPS_SHARE_CHOICES)
    assert [p.mps_shares for p in family_space("splitwiser-h100", mps_prefill_share=0.4).grid_parts()] == [(0.4,)]
    assert family_space("baseline-h100", mps_prefill_share=0.4).mps_shares == (0.0,)
    custom = family_space("splitwiser-custom", prompt_machines=("dgx-a100", "dgx-h100"))
    assert custom.token is None and not custom.is_grid and custom.mps_shares == MPS_SHARE_CHOICES


def test_cli_simulate_splitwiser():
    code, out, err = cli("simulate", "--design", "splitwiser-h100", "--machines", "4", "--rps", "5", "--duration",
                         "20", "--mps-prefill-share", "0.3", "--json")
    assert code == 0, err
    obj = json.loads(out)
    assert obj["design"]["mps_prefill_share"] == 0.3 and obj["design"]["token_machines"] == 0
    code, out1, err = cli("simulate", "--design", "baseline-h100", "--machines", "4", "--rps", "5", "--duration",
                          "20", "--json")
    assert obj["cost_usd_per_h"] == json.loads(out1)["cost_usd_per_h"]     # machines, not processes


def test_cli_provision_splitwiser():
    code, out, err = cli("--goal", "cost", "--rps", "8", "--duration", "30", "--design", "splitwiser-h100",
                         "--no-verify", "--json")
    assert code == 0, err
    best = json.loads(out)["best"][0]
    assert best["design"]["family"] == "splitwiser-h100"
    assert best["design"]["mps_prefill_share"] in MPS_SHARE_CHOICES
    assert not best["design"]["duplicate_weights"]


def test_cli_provision_duplicated_weights_on_a_model_that_fits_twice():
    code, out, err = cli("--goal", "cost", "--rps", "4", "--duration", "30", "--model", "llama2-70b", "--design",
                         "splitwiser-a100", "--duplicate-weights", "--mps-prefill-share", "0.5", "--no-verify",
                         "--json")
    assert code == 0, err
    design = json.loads(out)["best"][0]["design"]
    assert design["duplicate_weights"] and design["mps_prefill_share"] == 0.5


@pytest.mark.parametrize("argv", [["simulate", "--design", "splitwiser-h100", "--machines", "2",
                                   "--mps-prefill-share", "1.5"],
                                  ["simulate", "--design", "splitwiser-h100", "--machines", "2",
                                   "--mps-prefill-share", "0"],
                                  ["simulate", "--design", "baseline-h100", "--machines", "2",
                                   "--mps-prefill-share", "0.5"],
                                  ["--goal", "cost", "--rps", "5", "--mps-prefill-share", "1"],
                                  ["--goal", "cost", "--rps", "5", "--design", "baseline-h100",
                                   "--mps-prefill-share", "0.5"]])
def test_cli_rejects_a_bad_share(argv):
    _one_line_error(cli(*argv), "--mps-prefill-share")


@pytest.mark.parametrize("argv", [["simulate", "--design", "baseline-h100", "--machines", "2", "--duplicate-weights"],
                                  ["simulate", "--design", "splitwiser-h100", "--machines", "2",
                                   "--duplicate-weights"],   # BLOOM-176B does not fit twice on 8 H100s
                                  ["--goal", "cost", "--rps", "5", "--design", "splitwise-hh",
                                   "--duplicate-weights"]])
def test_cli_rejects_duplicated_weights_where_they_do_not_apply_or_fit(argv):
    _one_line_error(cli(*argv), "--duplicate-weights")


def _one_line_error(result, flag):
    code, out, err = result
    assert code == 2 and "Traceback" not in out + err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and flag in lines[0], err
