"""`--scheduler splitwisesim` (sim/_des_splitwisesim.py): SplitwiseSim's routing and batching
rules on hand-computed unit-time cases, the CLI as typed, and one shipped SplitwiseSim
run replayed to its own percentiles."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from perfmodels import N_COEF
from provisioner.designs import make_design
from provisioner.errors import ProvisionerError
from provisioner.schedulers import SCHEDULERS
from provisioner.sim import SimInputs
from provisioner.sim.testing import des_simulate_design, run_des

PROVISION = str(Path(sys.executable).with_name("provision"))
BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


def unit_inputs(arrivals, prompts, outputs, machines=(1, 0), scheduler="splitwisesim", batch_cap=2048.0,
                kv_cap=1e6) -> SimInputs:
    """One design whose every iteration takes exactly 1 s, `machines` = (prompt or mixed, token)."""
    coef = np.zeros((1, 2, N_COEF))
    coef[:, :, 4] = 1.0       # s_weights_read: every iteration 1 s
    coef[:, :, 8] = 1e9       # allreduce knee far away
    return SimInputs(
        n_machines=np.array([machines]), coef=coef, kv_cap_tokens=np.full((1, 2), float(kv_cap)),
        batch_cap_tokens=np.array([batch_cap]), chunk_tokens=np.zeros(1), allow_borrow=np.ones(1, bool),
        mps_share=np.zeros(1), kv_s_per_token=np.array([0.0]), kv_setup_s=np.array([0.0]),
        n_layers=80, layerwise_min_tokens=512.0, overload_tokens=np.array([4 * batch_cap]),
        arrival_s=np.asarray(arrivals, float), prompt_tokens=np.asarray(prompts, np.int64),
        output_tokens=np.asarray(outputs, np.int64), scheduler=np.array([SCHEDULERS.index(scheduler)]))


@pytest.mark.parametrize("prompt, prefill_on", [(5000, [0, 1, 0]), (4000, [0, 0, 1])])
def test_a_token_machine_is_drafted_when_the_prompt_queue_passes_8192_tokens(prompt, prefill_on):
    # Three prompts at t = 0 on 1 prompt + 1 token machine. At 5000 tokens the second
    # finds the prompt machine with one queued prompt: 5000 + 5000 > 8192 is a long queue,
    # so the token machine is drafted into the mixed pool and prefills (and decodes) it;
    # the third finds both long and falls back to the least-pending server, the prompt
    # machine. At 4000 tokens the second still fits (8000 <= 8192) and the third drafts.
    # Idle with nothing queued, the drafted machine goes home.
    cl = des_simulate_design(unit_inputs([0.0] * 3, [prompt] * 3, [4] * 3, machines=(1, 1)), 0)
    drafted = prefill_on.index(1)
    decode_on = [0 if k > drafted else 1 for k in range(3)] if prompt == 5000 else [1, 1, 1]
    assert (cl.prefill_on, cl.decode_on) == (prefill_on, decode_on)
    assert cl.borrowed_prefills == 1 and cl.homes == ([0], [1]) and cl.mixed == []


def test_jsq_counts_a_decode_as_one_pending_token():
    # Baseline, 2 machines. A (1000 output tokens) goes to 0, B (10) to 1 while A decodes.
    # C at t = 3.5: both machines hold one decode, one pending token each, so splitwisesim
    # takes the lowest index, 0, though A's decode is far longer; least-work takes 1.
    args = ([0.0, 1.5, 3.5], [100, 100, 100], [1000, 10, 5])
    swsim = des_simulate_design(unit_inputs(*args, machines=(2, 0)), 0)
    least = des_simulate_design(unit_inputs(*args, machines=(2, 0), scheduler="least-work"), 0)
    assert swsim.prefill_on == [0, 1, 0] and least.prefill_on == [0, 1, 1]


def test_a_prompt_preempts_a_decode_on_a_baseline():
    # One machine, 10-token budget. A (5 prompt tokens, 5 output) prefills in [0, 1] and
    # decodes token 2 in [1, 2]. B (10 prompt tokens) arrives at 1.5: at t = 2 prompts go
    # first, B fills the budget, and A is preempted for [2, 3]; it resumes first at 3 and
    # finishes at 6 instead of 5. B's decode joins at 3 and ends at 4.
    inputs = unit_inputs([0.0, 1.5], [5, 10], [5, 2], batch_cap=10.0)
    out = run_des(inputs)
    np.testing.assert_allclose(out.first_token_s[0], [1.0, 3.0])
    np.testing.assert_allclose(out.finish_s[0], [6.0, 4.0])
    assert des_simulate_design(inputs, 0).preemptions == 1
    least = run_des(unit_inputs([0.0, 1.5], [5, 10], [5, 2], batch_cap=10.0, scheduler="least-work"))
    assert least.finish_s[0][0] == 5.0   # our default runs A's decode inside B's prefill


def test_a_prompt_longer_than_the_budget_waits_for_the_decode_run_to_be_paused():
    # 1 prompt + 2 token machines, KV instant. A (3000 tokens, 6 out) decodes on token
    # machine 1 from t = 1: a decode-only batch, committed for its 5 iterations [1, 6].
    # E and F decode on machine 2; C and D (5000 tokens) keep the prompt machine busy, D's
    # decode going to 1. B (5000 tokens) at 2.5 finds the prompt queue long and drafts
    # machine 1 (fewest pending tokens); longer than the 2048-token budget, it cannot end
    # A's run, but D's KV arriving at 4.1 does, at the end of [4, 5]: B prefills [5, 6]
    # (before this rule, at the next iteration: [3, 4]) and A, preempted, finishes at 7.
    args = ([0.0, 0.1, 0.2, 2.1, 2.2, 2.5], [3000, 10, 10, 5000, 5000, 5000], [6, 50, 50, 2, 2, 2])
    inputs = unit_inputs(*args, machines=(1, 2))
    cl = des_simulate_design(inputs, 0)
    assert cl.prefill_on == [0, 0, 0, 0, 0, 1] and cl.decode_on == [1, 2, 2, 2, 1, 2]
    out = run_des(inputs)
    np.testing.assert_allclose(out.first_token_s[0], [1.0, 2.0, 2.0, 3.1, 4.1, 6.0])
    np.testing.assert_allclose(out.finish_s[0], [7.0, 51.0, 51.0, 5.0, 7.0, 7.0])


def test_splitwiser_families_are_refused():
    with pytest.raises(ProvisionerError, match="splitwisesim applies to the baseline and splitwise families"):
        make_design("splitwiser-h100", machines=2, scheduler="splitwisesim")
    assert make_design("splitwise-hh", 2, 1, scheduler="splitwisesim").scheduler == "splitwisesim"


def _provision(*args):
    return subprocess.run([PROVISION, "simulate", *args], capture_output=True, text=True, timeout=240)


def test_cli_runs_splitwisesim_in_the_des_and_the_fluid_engine_declines_it_in_one_line():
    split = ("--design", "splitwise-hh", "--prompt-machines", "2", "--token-machines", "1",
             "--workload", "coding", "--rps", "3", "--duration", "20", "--scheduler", "splitwisesim")
    proc = _provision(*split, "--json")
    assert proc.returncode == 0, proc.stderr
    obj = json.loads(proc.stdout)
    assert obj["design"]["scheduler"] == "splitwisesim" and obj["engine"] == "des"
    proc = _provision(*split, "--engine", "fluid")
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "fluid engine does not model --scheduler splitwisesim" in lines[0] and "--engine des" in lines[0]


def _bench():
    sys.path.insert(0, str(BENCH))
    import vs_splitwisesim

    if not (vs_splitwisesim.VALIDATION / "results.csv").exists():
        pytest.skip("the SplitwiseSim reference runs are not on this machine")
    return vs_splitwisesim


def _replay(bench, run_id, mode):
    import pandas as pd

    from provisioner import SLO
    from provisioner.sim import simulate_requests, solo_latencies
    from workloads import read_trace_csv

    run = next(pd.read_csv(bench.VALIDATION / "results.csv").query("run_id == @run_id").itertuples())
    trace = read_trace_csv(bench.VALIDATION / "traces" / f"{run.trace}.csv")
    perf, slo = bench.latency_model(mode), SLO()
    _, _, out = simulate_requests([bench.design_of(run, mode)], trace, bench.MODEL, engine="des", perf=perf, slo=slo)
    solo = solo_latencies(trace, perf.llm(bench.MODEL), perf, slo)
    return run, bench.splitwisesim_metrics(out.first_token_s[0], out.finish_s[0], trace, solo, slo)


def test_a_shipped_splitwisesim_baseline_run_replays_to_its_percentiles():
    # llama_bh_code70_20: token_jsq on 20 DGX-H100 at 70 req/s, SplitwiseSim's own latency rule.
    bench = _bench()
    run, ours = _replay(bench, "llama_bh_code70_20", "profile-swsim")
    for m in bench.METRICS:
        theirs = [getattr(run, f"{m}_p{p}_s") for p in bench.PCTS]
        np.testing.assert_allclose(ours[m], theirs, rtol=0.02, err_msg=m)


def test_the_default_scheduler_results_are_unchanged():
    # The least-work rows of results/vs_splitwisesim.json were written before this scheduler.
    bench = _bench()
    cached = json.loads(bench.CACHE.read_text())["L_hh_code70_12p3t|profile|des"]
    _, ours = _replay(bench, "L_hh_code70_12p3t", "profile")
    for m in bench.METRICS:
        np.testing.assert_allclose(ours[m], cached[m], rtol=1e-12, err_msg=m)


def test_chunked_families_are_left_out_by_default_and_refused_up_front(tmp_path, capsys):
    """`provision --scheduler splitwisesim` (no --design) failed with 'drop --prefill-chunk-tokens',
    a flag never given: the default families included baseline-*-chunked."""
    from provisioner.cli import run
    from provisioner.search import ProvisionRequest
    from provisioner.sweep import load_sweep_spec

    assert run(["--goal", "cost", "--rps", "2", "--model", "llama2-70b", "--duration", "10", "--no-verify",
                "--scheduler", "splitwisesim", "--json"]) == 0
    families = json.loads(capsys.readouterr().out)["question"]["families"]
    assert families and not any(f.endswith("-chunked") or f.startswith("splitwiser") for f in families)
    spec = tmp_path / "sweep.toml"
    spec.write_text('rps = [2]\nscheduler = "splitwisesim"\n')
    assert list(load_sweep_spec(spec).questions[0].request.families) == families
    with pytest.raises(ProvisionerError) as error:
        ProvisionRequest(goal="cost", rps=2.0, families=("baseline-a100-chunked",), scheduler="splitwisesim")
    assert "prefills whole prompts" in str(error.value) and error.value.params == ("scheduler", "families")
    assert run(["--goal", "cost", "--rps", "2", "--design", "baseline-h100-chunked", "--scheduler",
                "splitwisesim"]) == 2
    assert "drop baseline-h100-chunked from --design" in capsys.readouterr().err


def test_a_chunked_design_under_splitwisesim_is_refused_naming_the_family(capsys):
    """simulate/autoscale --design baseline-h100-chunked --scheduler splitwisesim said 'drop
    --prefill-chunk-tokens', a flag never given (autoscale has none)."""
    from provisioner.cli import run

    with pytest.raises(ProvisionerError, match="baseline-a100-chunked chunks them here: use baseline-a100"):
        make_design("baseline-a100-chunked", machines=2, scheduler="splitwisesim")
    assert run(["autoscale", "--profile", "diurnal", "--rps", "2", "--duration", "900", "--design",
                "baseline-h100-chunked", "--scheduler", "splitwisesim"]) == 2
    assert capsys.readouterr().err.strip().endswith("chunks them here: use baseline-h100")
    assert run(["simulate", "--design", "baseline-h100", "--machines", "2", "--scheduler", "splitwisesim",
                "--prefill-chunk-tokens", "256"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --scheduler splitwisesim") and err.strip().endswith("drop --prefill-chunk-tokens")
