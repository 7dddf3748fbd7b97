"""Swap preemption (vLLM's swap mode): a hand-computed case against recompute, the host
budget, token conservation, and `--preemption` as typed."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import types

import numpy as np
import pytest

from perfmodels import LatencyModel
from provisioner.cli import run
from provisioner.designs import DesignBatch, make_design
from provisioner.sim import build_inputs, swap_inputs
from provisioner.sim.testing import DesOnDemandMachine as OnDemandMachine
from provisioner.sim.testing import des_simulate_design, run_des, scaling_machine_usage
from test_scheduler import unit_inputs
from workloads import TraceGenerator

PERF = LatencyModel()


def with_swap(inputs, s_per_token=0.01, host_tokens=1e9, bytes_per_token=100.0):
    return dataclasses.replace(inputs, swap=np.array([[s_per_token, host_tokens, bytes_per_token]]))


def test_swap_against_recompute_by_hand():
    """test_scheduler's case (two 8-token prompts, 6 output tokens, a 20-token machine,
    1-s iterations): at t = 3 B holds 8 + 3 = 11 tokens and is preempted. Recompute: its
    prefill over 11 tokens waits for A (done at 6) and runs in [6, 7]; B ends at 9.
    Swap at 0.01 s per token: the swap-out extends A's iteration [3, 4.11], A ends at 6.11;
    no prefill is admitted while B waits, and B comes back when A's KV is gone: the swap-in
    extends [6.11, 7.22], which emits its token 4; B ends at 9.22. 11 tokens x 100 bytes
    go out and come back."""
    base = unit_inputs(20, [0.0, 0.0], [8, 8], [6, 6])
    recompute, swap = run_des(base), run_des(with_swap(base))
    np.testing.assert_allclose(recompute.finish_s[0], [6.0, 9.0])
    np.testing.assert_allclose(swap.finish_s[0], [6.11, 9.22])
    np.testing.assert_allclose(swap.first_token_s[0], [1.0, 1.0])
    preemptions, _, _, _, recomputed = swap.scheduler_stats[0]
    assert (preemptions, recomputed) == (1, 0) and swap.swap_stats[0].tolist() == [1, 2200.0]
    assert recompute.swap_stats is None


def test_a_full_host_falls_back_to_recompute():
    """A host budget of 10 tokens cannot take B's 11: it is recomputed, as without swap."""
    base = unit_inputs(20, [0.0, 0.0], [8, 8], [6, 6])
    out = run_des(with_swap(base, host_tokens=10.0))
    np.testing.assert_allclose(out.finish_s[0], [6.0, 9.0])
    assert out.swap_stats[0].tolist() == [0, 0.0] and out.scheduler_stats[0, 4] == 11


def conversation_inputs(scheduler="jsq", host_fraction=None):
    trace = TraceGenerator("conversation", 60, 0).at(20.0)
    batch = DesignBatch.from_designs([make_design("baseline-a100", machines=10, scheduler=scheduler)])
    llm = PERF.llm("bloom-176b")
    inputs = build_inputs(batch, trace, llm, PERF)
    swap = swap_inputs(batch, llm, PERF.catalog)
    if host_fraction is not None:   # a host budget that holds a few requests only
        swap[:, 1] = host_fraction
    return trace, dataclasses.replace(inputs, swap=swap)


@pytest.mark.parametrize("scheduler", ["jsq", "llumnix"])
def test_swap_conserves_tokens_and_keeps_the_host_budget(scheduler, monkeypatch):
    trace, inputs = conversation_inputs(scheduler, host_fraction=4000.0)
    peak = []
    original = OnDemandMachine.swap_out

    def recording(self, r, tokens):
        original(self, r, tokens)
        peak.append(self.host_used)

    monkeypatch.setattr(OnDemandMachine, "swap_out", recording)
    cl = des_simulate_design(inputs, 0)
    assert cl.decode_tokens + cl.prefills_done == int(trace.output_tokens.sum())
    assert cl.swaps > 0
    if scheduler == "jsq":   # more preemption than llumnix (it migrates instead): the budget fills
        assert cl.recomputed_tokens > 0
    assert max(peak) <= 4000.0
    assert all(not mc.swapped and mc.host_used == 0 for mc in cl.machines)
    assert np.all(np.array(cl.finish) >= np.array(cl.first))


def test_the_controller_reads_a_swapped_request_as_freeness_does(monkeypatch):
    """A swapped-out request's prefill demand is in V (`queued_kv`) and the request in B, for
    Llumnix's freeness as for the closed-loop controller (SEMANTICS.md: "for freeness a
    swapped request counts in B"): at every swap-out both read the same (V, B)."""
    _, inputs = conversation_inputs("jsq", host_fraction=4000.0)
    seen = []
    original = OnDemandMachine.swap_out

    def recording(self, r, tokens):
        original(self, r, tokens)
        virtual, requests = scaling_machine_usage(types.SimpleNamespace(machines={0: self}), 0)
        assert requests >= self.running + len(self.swapped) and self.swapped
        assert (virtual, requests) == self.usage()
        assert (self.kv_cap - virtual) / max(requests, 1) == self.freeness()
        seen.append(requests)

    monkeypatch.setattr(OnDemandMachine, "swap_out", recording)
    des_simulate_design(inputs, 0)
    assert seen


def test_host_link_and_budget_from_the_catalog():
    """DGX-A100, BLOOM-176B at TP 8: 8 GPUs x 32 GB/s of PCIe Gen4 per direction, and the
    machine's 2 TB of DRAM for its one replica as the cap of the swap space (vLLM's
    --swap-space: 4 GiB per GPU by default, 32 GiB for the TP-8 replica)."""
    llm = PERF.llm("bloom-176b")
    batch = DesignBatch.from_designs([make_design("baseline-a100", machines=2, scheduler="jsq")])
    swap = swap_inputs(batch, llm, PERF.catalog)[0]
    assert swap[0] == pytest.approx(llm.kv_bytes_per_token / (8 * 32e9))
    assert swap[1] == pytest.approx(8 * 4 * 2**30 / llm.kv_bytes_per_token)
    assert swap[2] == llm.kv_bytes_per_token
    assert swap_inputs(batch, llm, PERF.catalog, 100.0)[0, 1] == pytest.approx(8 * 100 * 2**30 / llm.kv_bytes_per_token)
    capped = swap_inputs(batch, llm, PERF.catalog, 1e6)[0]
    assert capped[1] == pytest.approx(2048e9 / llm.kv_bytes_per_token)


def cli(args):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = run(["simulate", "--model", "bloom-176b", "--workload", "conversation", "--rps", "20",
                    "--duration", "30", *args, "--json"])
    return code, out.getvalue(), err.getvalue()


def test_cli_swap_adds_its_counts_and_recompute_keeps_its_keys():
    design = ["--design", "baseline-h100", "--machines", "6", "--scheduler", "jsq"]
    code, out, err = cli(design)
    assert code == 0, err
    plain = json.loads(out)
    assert "preemption" not in plain and "swaps" not in plain["scheduler_stats"]
    code, out, err = cli(design + ["--preemption", "swap"])
    assert code == 0, err
    swap = json.loads(out)
    assert swap["preemption"] == "swap" and {"swaps", "swapped_bytes"} <= set(swap["scheduler_stats"])
    assert swap["scheduler_stats"]["preemptions"] >= swap["scheduler_stats"]["swaps"] > 0


def test_cli_swap_space_sets_the_budget():
    """--swap-space-gb is recorded with swap; 0.01 GiB per GPU (~80 MB for the TP-8 replica,
    ~20 BLOOM-176B tokens) holds no victim, so its preemptions are recomputed."""
    base = ["--design", "baseline-h100", "--machines", "7", "--scheduler", "jsq", "--preemption", "swap"]
    code, out, err = cli(base)
    assert code == 0, err
    small = json.loads(out)
    code, out, err = cli(base + ["--swap-space-gb", "0.01"])
    assert code == 0, err
    tiny = json.loads(out)
    assert small["swap_space_gb"] == 4.0 and tiny["swap_space_gb"] == 0.01
    assert tiny["scheduler_stats"]["swaps"] == 0 < small["scheduler_stats"]["swaps"]
    assert tiny["scheduler_stats"]["recomputed_tokens"] > 0


@pytest.mark.parametrize("args, message", [
    (["--design", "baseline-a100", "--machines", "4", "--preemption", "swap"], "--scheduler least-work does not preempt"),
    # typed, the default changes nothing either (was accepted without a word)
    (["--design", "baseline-a100", "--machines", "4", "--preemption", "recompute"],
     "--preemption recompute sets how the on-demand schedulers preempt; --scheduler least-work does not preempt"),
    (["--design", "baseline-a100", "--machines", "4", "--scheduler", "jsq", "--preemption", "copy"],
     "--preemption must be one of recompute, swap"),
    (["--design", "splitwise-aa", "--prompt-machines", "2", "--token-machines", "2", "--scheduler", "jsq",
      "--preemption", "swap"], "modelled on the baseline families"),
    (["--design", "baseline-a100", "--machines", "4", "--scheduler", "jsq", "--swap-space-gb", "8"],
     "--swap-space-gb sets the host memory of swap preemption: add --preemption swap"),
    (["--design", "baseline-a100", "--machines", "4", "--scheduler", "jsq", "--preemption", "swap",
      "--swap-space-gb", "inf"], "--swap-space-gb must be > 0 and finite"),
])
def test_cli_bad_preemption_is_one_line_exit_2(args, message):
    code, _, err = cli(args)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and message in lines[0], lines


def autoscale_cli(args):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = run(["autoscale", "--design", "baseline-h100", "--model", "bloom-176b", "--workload", "conversation",
                    "--profile", "diurnal", "--rps", "8", "--duration", "900", "--static-machines", "3", *args])
    return code, out.getvalue(), err.getvalue()


def test_autoscale_takes_swap_under_an_on_demand_scheduler():
    code, out, err = autoscale_cli(["--scheduler", "jsq", "--preemption", "swap", "--json"])
    assert code == 0, err
    obj = json.loads(out)
    assert obj["preemption"] == "swap" and obj["engine"] == "des"
    code, _, err = autoscale_cli(["--preemption", "swap", "--json"])
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "--scheduler least-work does not preempt" in lines[0], lines


def test_search_and_sweep_take_swap(tmp_path):
    from provisioner.search import ProvisionRequest, provision
    from provisioner.sweep import load_sweep_spec

    req = ProvisionRequest(goal="cost", rps=12.0, workload="conversation", model="bloom-176b",
                           families=("baseline-h100",), duration_s=30.0, scheduler="jsq", preemption="swap",
                           verify=False)
    obj = provision(req).to_json()
    assert obj["question"]["preemption"] == "swap" and obj["best"][0]["feasible"]
    spec = tmp_path / "sweep.toml"
    spec.write_text('goals = ["cost"]\nmodels = ["bloom-176b"]\nworkloads = ["conversation"]\nrps = [12]\n'
                    'families = ["baseline-h100"]\nduration_s = 30\nscheduler = "jsq"\npreemption = "swap"\n')
    question = load_sweep_spec(spec).questions[0]
    assert question.request.preemption == "swap" and question.columns()["preemption"] == "swap"
    with pytest.raises(Exception, match="does not preempt"):
        ProvisionRequest(goal="cost", rps=12.0, workload="conversation", families=("baseline-h100",),
                         duration_s=30.0, preemption="swap")


JSQ_SPEC = 'goals = ["cost"]\nrps = [12]\nfamilies = ["baseline-h100"]\nscheduler = "jsq"\n'   # the sweep tests' spec


@pytest.mark.parametrize("spec_line, flags", [('swap_space_gb = 8\n', []), ("", ["--swap-space-gb", "8"])])
def test_sweep_refuses_swap_space_without_swap(tmp_path, spec_line, flags):
    """swap_space_gb sizes swap preemption only: a sweep spec (or `provision sweep
    --swap-space-gb`) that sets it without preemption = "swap" is refused in one line, as
    `provision --swap-space-gb` is, and nothing is written."""
    spec = tmp_path / "sweep.toml"
    spec.write_text(JSQ_SPEC + spec_line)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = run(["sweep", str(spec), "--out", str(tmp_path / "out"), *flags])
    lines = err.getvalue().strip().splitlines()
    name = flags[0] if flags else "swap_space_gb"
    fix = "give --preemption swap" if flags else 'set preemption = "swap" in the spec'
    assert code == 2 and len(lines) == 1 and f"{name} sets the host memory of KV swapping: {fix}" in lines[0], lines
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("spec_lines, kwargs", [('preemption = "swap"\nswap_space_gb = 8\n', {}),
                                                ("", {"preemption": "swap", "swap_space_gb": 8.0}),
                                                ('preemption = "swap"\n', {"swap_space_gb": 8.0})])
def test_sweep_takes_swap_space_with_swap(tmp_path, spec_lines, kwargs):
    from provisioner.sweep import load_sweep_spec

    spec = tmp_path / "sweep.toml"
    spec.write_text(JSQ_SPEC + spec_lines)
    request = load_sweep_spec(spec, **kwargs).questions[0].request
    assert request.preemption == "swap" and request.swap_space_gb == 8.0


def test_sweep_library_names_the_parameter(tmp_path):
    from provisioner.errors import ProvisionerError
    from provisioner.sweep import load_sweep_spec

    spec = tmp_path / "sweep.toml"
    spec.write_text(JSQ_SPEC)
    with pytest.raises(ProvisionerError) as error:
        load_sweep_spec(spec, swap_space_gb=8.0)
    assert "swap_space_gb sets the host memory of KV swapping: give preemption swap" in str(error.value)
    assert "--" not in str(error.value)
    assert error.value.params == ("swap_space_gb", "preemption")


@pytest.mark.parametrize("scheduler", ["least-work", "splitwisesim"])
def test_every_caller_refuses_swap_without_an_on_demand_scheduler_alike(scheduler):
    """One rule (`schedulers.check_preemption`): the library names its parameters, the CLI its flags."""
    from provisioner.errors import ProvisionerError
    from provisioner.search import ProvisionRequest

    batch = DesignBatch.from_designs([make_design("baseline-a100", machines=2, scheduler=scheduler)])
    with pytest.raises(ProvisionerError) as sim_error:
        swap_inputs(batch, PERF.llm("bloom-176b"), PERF.catalog)
    with pytest.raises(ProvisionerError) as request_error:
        ProvisionRequest(goal="cost", rps=12.0, workload="conversation", families=("baseline-h100",),
                         duration_s=30.0, scheduler=scheduler, preemption="swap")
    for exc in (sim_error.value, request_error.value):
        assert f"scheduler {scheduler} does not preempt" in str(exc) and "--" not in str(exc)
        assert exc.params == ("preemption", "scheduler")
    code, _, err = cli(["--design", "baseline-a100", "--machines", "2", "--scheduler", scheduler,
                        "--preemption", "swap"])
    assert code == 2 and f"--scheduler {scheduler} does not preempt" in err and "--preemption swap" in err


def test_the_library_names_preemption_as_a_parameter():
    """The engines' own swap refusals name the Python parameter (the CLI says --preemption)."""
    from provisioner.errors import ProvisionerError

    split = DesignBatch.from_designs([make_design("splitwise-aa", prompt_machines=2, token_machines=2, scheduler="jsq")])
    with pytest.raises(ProvisionerError) as family_error:
        swap_inputs(split, PERF.llm("bloom-176b"), PERF.catalog)
    exc = family_error.value
    assert "preemption swap is modelled on the baseline families" in str(exc) and "--" not in str(exc)
    assert exc.params == ("preemption",)


def test_search_cli_refuses_swap_without_an_on_demand_scheduler():
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = run(["--goal", "cost", "--rps", "12", "--design", "baseline-h100", "--preemption", "swap"])
    lines = err.getvalue().strip().splitlines()
    assert code == 2 and len(lines) == 1 and "--scheduler least-work does not preempt" in lines[0], lines


def test_swap_searches_the_baselines_by_default_and_refuses_other_families_up_front(tmp_path):
    """`provision --scheduler jsq --preemption swap` (no --design) failed on splitwise-aa, a
    family the user never named; a sweep question naming a split family failed when it ran,
    not as the spec was read."""
    from provisioner.errors import ProvisionerError
    from provisioner.search import ProvisionRequest
    from provisioner.sweep import load_sweep_spec

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = run(["--goal", "cost", "--rps", "2", "--model", "llama2-70b", "--workload", "conversation",
                    "--duration", "10", "--no-verify", "--scheduler", "jsq", "--preemption", "swap", "--json"])
    assert code == 0, err.getvalue()
    families = json.loads(out.getvalue())["question"]["families"]
    assert families and all(f.startswith("baseline-") for f in families)
    spec = tmp_path / "sweep.toml"
    spec.write_text('rps = [2]\nscheduler = "jsq"\npreemption = "swap"\n')
    assert all(f.startswith("baseline-") for f in load_sweep_spec(spec).questions[0].request.families)
    spec.write_text('rps = [2]\nscheduler = "jsq"\npreemption = "swap"\nfamilies = ["splitwiser-h100"]\n')
    with pytest.raises(ProvisionerError,
                       match=r"sweep.toml': keys 'preemption' and 'families': .* not splitwiser-h100: drop it"):
        load_sweep_spec(spec)
    with pytest.raises(ProvisionerError) as error:
        ProvisionRequest(goal="cost", rps=2.0, families=("baseline-h100", "splitwise-hh"), scheduler="jsq",
                         preemption="swap")
    assert error.value.params == ("preemption", "families") and "--" not in str(error.value)
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = run(["--goal", "cost", "--rps", "2", "--design", "splitwise-hh", "--scheduler", "jsq", "--preemption",
                    "swap"])
    lines = err.getvalue().strip().splitlines()
    assert code == 2 and len(lines) == 1 and "not splitwise-hh: drop it from --design" in lines[0], lines
