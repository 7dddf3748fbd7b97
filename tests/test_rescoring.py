"""An answer can be reproduced from what the result records, and one latency model per call.

`provision simulate --from-result RESULT.json [--family F]` rebuilds the trace the search
found each answer on (workload, arrival process, window, seed, cv, file hash) and re-scores
the family's design on it: the percentiles must equal the answer's exactly (fluid engine).
The latency model `provision(perf=...)` is given is the only one of the call, including the
discrete-event re-check of the finalists.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from perfmodels import LatencyModel, load_calibration
from provisioner import simulate
from provisioner.designs import FAMILIES
from provisioner.results import design_from_json
from provisioner.search import ProvisionRequest, provision

PROVISION = str(Path(sys.executable).with_name("provision"))
SCORED_KEYS = ("design", "requests", "rps", "ttft_ms", "tbt_ms", "e2e_ms", "slo", "cost_usd_per_h", "power_kw",
               "throughput_rps", "energy_wh_per_request", "trace")


def _assert_rescored_equal(cli, tmp_path, result_text: str, families) -> dict:
    path = tmp_path / "result.json"
    path.write_text(result_text)
    result = json.loads(result_text)
    by_family = {b["design"]["family"]: b for b in result["best"]}
    for family in families:
        again = json.loads(cli("simulate", "--from-result", path, "--family", family, "--json"))
        for key in SCORED_KEYS:
            assert again[key] == by_family[family][key], (family, key)
    return result


def test_every_familys_answer_is_reproduced_from_the_result(cli, tmp_path):
    text = cli("--goal", "cost", "--rps", "8", "--duration", "20", "--no-verify", "--json")
    result = _assert_rescored_equal(cli, tmp_path, text, FAMILIES)
    assert [b["design"]["family"] for b in result["best"]] == list(FAMILIES)
    q = result["question"]
    assert (q["arrival"], q["duration_s"], q["seed"], q["cv"], q["workload_sha256"]) == ("poisson", 20.0, 0, 2.0, None)
    winner = json.loads(cli("simulate", "--from-result", tmp_path / "result.json", "--json"))
    assert winner["design"] == result["winner"]["design"] and winner["e2e_ms"] == result["winner"]["e2e_ms"]


def test_throughput_answers_are_reproduced_at_their_own_load(cli, tmp_path):
    text = cli("--goal", "throughput", "--power-budget-kw", "60", "--design", "splitwise-aa", "--design",
               "baseline-a100", "--duration", "20", "--no-verify", "--json")
    result = _assert_rescored_equal(cli, tmp_path, text, ("splitwise-aa", "baseline-a100"))
    assert all(b["rps"] == b["sustainable_rps"] for b in result["best"] if b["feasible"])


def _replay_file(path, requests: int):
    """A trace file of `requests` requests (5 req/s Poisson arrivals, seed 5) at `path`."""
    rng = np.random.default_rng(5)
    arrival = np.cumsum(rng.exponential(0.2, requests))
    rows = [f"{a!r},{int(p)},{int(o)}" for a, p, o in
            zip(arrival.tolist(), rng.integers(50, 1500, requests), rng.integers(2, 200, requests))]
    path.write_text("arrival_s,prompt_tokens,output_tokens\n" + "\n".join(rows) + "\n")
    return path


def test_a_throughput_answer_on_a_short_replayed_file_meets_its_slo_at_its_own_load(cli, tmp_path):
    """Was judged at each bisection trace's whole requests over its window: 131 requests of
    this 4.6-s file at 28.66 req/s were judged at 28.5 and the answer, feasible, said the SLO
    was missed at 28.66."""
    trace = _replay_file(tmp_path / "short.csv", 30)
    text = cli("--goal", "throughput", "--power-budget-kw", "40", "--workload", trace, "--design", "baseline-h100",
               "--no-verify", "--json")
    result = _assert_rescored_equal(cli, tmp_path, text, ("baseline-h100",))
    (best,) = result["best"]
    assert best["feasible"] and best["slo"]["met"] and best["rps"] == best["sustainable_rps"]
    # the design space records the load each design was judged at: the answer's among them
    assert any(row["slo_met"] and row["rps"] == best["rps"] and row["prompt_machines"] == best["design"]["prompt_machines"]
               for row in result["evaluated"])


def test_a_replayed_file_is_searched_verified_and_reproduced(cli, tmp_path):
    trace = _replay_file(tmp_path / "prod.csv", 150)
    text = cli("--goal", "cost", "--rps", "8", "--workload", trace, "--design", "splitwise-hh", "--model",
               "llama2-70b", "--json")
    result = _assert_rescored_equal(cli, tmp_path, text, ("splitwise-hh",))
    (best,) = result["best"]
    q = result["question"]
    assert q["arrival"] == "replay" and q["rescaled"] is True and len(q["workload_sha256"]) == 64
    assert best["requests"] == 150 and best["trace"]["requests"] == 150      # the whole file, time-scaled
    assert best["verification"]["seeds"] == [0] and best["verification"]["duration_s"] == q["duration_s"]
    # the file changed: the answer can no longer be reproduced, and the user is told why
    trace.write_text(trace.read_text().replace("\n", "\n0.0,1,1\n", 1))
    proc = subprocess.run([PROVISION, "simulate", "--from-result", tmp_path / "result.json"], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2 and proc.stderr.startswith("error: ") and "SHA-256" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_a_replayed_answer_re_scored_from_another_directory_says_where_to_run(tmp_path):
    """The result keeps the trace path as typed; from another directory it was 'result JSON
    'question' is invalid: cannot read trace 'prod.csv': no such file', no fix named."""
    here, elsewhere = tmp_path / "here", tmp_path / "elsewhere"
    here.mkdir(), elsewhere.mkdir()
    (here / "prod.csv").write_text("arrival_s,prompt_tokens,output_tokens\n"
                                   + "".join(f"{0.25 * i},{300 + 40 * i},{20 + i}\n" for i in range(40)))
    found = subprocess.run([PROVISION, "--goal", "cost", "--workload", "prod.csv", "--design", "baseline-h100",
                            "--no-verify", "--json"], cwd=here, capture_output=True, text=True, timeout=240)
    assert found.returncode == 0, found.stderr
    (tmp_path / "result.json").write_text(found.stdout)
    again = [PROVISION, "simulate", "--from-result", str(tmp_path / "result.json"), "--json"]
    proc = subprocess.run(again, cwd=elsewhere, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert "'prod.csv'" in line and "question.workload" in line and "run from the one `provision` ran in" in line
    proc = subprocess.run(again, cwd=here, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and json.loads(proc.stdout)["requests"] == 40, proc.stderr


def test_a_custom_familys_answer_is_reproduced(cli, tmp_path):
    """Was 'result JSON design of splitwise-custom is invalid: ... has no machines of its own' (exit 2)."""
    text = cli("--goal", "cost", "--rps", "3", "--design", "splitwise-custom", "--prompt-machine-types", "dgx-h100",
               "--token-machine-types", "dgx-a100", "--duration", "10", "--no-verify", "--trials", "2", "--json")
    _assert_rescored_equal(cli, tmp_path, text, ("splitwise-custom",))
    for family, token_machines, share in (("baseline-custom", 0, 0.0), ("splitwiser-custom", 0, 0.5)):
        d = design_from_json({"family": family, "prompt_machines": 2, "token_machines": token_machines,
                              "prompt_machine": "dgx-a100", "token_machine": "dgx-a100", "prompt_power_cap": 0.8,
                              "token_power_cap": 0.8, "prompt_tp": 4, "token_tp": 4,
                              "prompt_batch_cap_tokens": 2048, "mps_prefill_share": share})
        assert d.family == family and not d.split


def test_a_swap_answer_is_rescored_with_swap(cli, tmp_path, capsys):
    """Was re-scored with recompute preemption (the flag's default), not the question's swap."""
    text = cli("--goal", "cost", "--rps", "12", "--workload", "conversation", "--design", "baseline-h100",
               "--scheduler", "jsq", "--preemption", "swap", "--swap-space-gb", "1", "--duration", "20", "--no-verify",
               "--json")
    result = json.loads(text)
    result["best"][0]["design"]["prompt_machines"] = 2   # an overloaded design: it preempts
    path = tmp_path / "result.json"
    path.write_text(json.dumps(result))
    again = json.loads(cli("simulate", "--from-result", path, "--json"))
    assert again["preemption"] == "swap" and again["swap_space_gb"] == 1.0 and again["scheduler_stats"]["swaps"] > 0
    direct = json.loads(cli("simulate", "--design", "baseline-h100", "--machines", "2", "--workload", "conversation",
                            "--rps", "12", "--duration", "20", "--scheduler", "jsq", "--preemption", "swap",
                            "--swap-space-gb", "1", "--json"))
    assert again["ttft_ms"] == direct["ttft_ms"] and again["e2e_ms"] == direct["e2e_ms"]
    from provisioner.cli import run
    assert run(["simulate", "--from-result", str(path), "--preemption", "recompute"]) == 2
    assert capsys.readouterr().err.strip().endswith("drop --preemption")


def test_from_result_refuses_conflicting_flags_and_unknown_families(tmp_path):
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"question": {"workload": "coding"}, "best": [], "winner": None}))
    for args, words in ((["--workload", "coding"], "drop --workload"), ([], "no winner")):
        proc = subprocess.run([PROVISION, "simulate", "--from-result", path, *args], capture_output=True, text=True,
                              timeout=120)
        assert proc.returncode == 2 and words in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


def test_from_result_of_a_binary_file_is_one_line(tmp_path, capsys):
    from provisioner.cli import run

    path = tmp_path / "r.json"
    path.write_bytes(bytes(range(128, 256)))   # not UTF-8: was an internal error (UnicodeDecodeError), exit 1
    assert run(["simulate", "--from-result", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: --from-result '") and "not a JSON text file (UTF-8 or UTF-16)" in err, err


@pytest.mark.parametrize("answer, command", [
    ({"goal": "rps", "inventory": "thunderserve-32gpu", "replicas": []}, "provision cloud --json"),
    ({"static": {}, "autoscaled": {}, "saving_pct": 1.0}, "provision autoscale --json"),
])
def test_from_result_of_another_commands_answer_names_that_command(tmp_path, capsys, answer, command):
    """Was "has no 'question' and 'best'", as `provision report` said before it named the command."""
    from provisioner.cli import run

    path = tmp_path / "answer.json"
    path.write_text(json.dumps(answer))
    assert run(["simulate", "--from-result", str(path)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("error: --from-result '") and f"`{command}`" in line and "provision --goal" in line


def _slow_h100() -> LatencyModel:
    """The shipped model with H100 GEMMs at 60% of their calibrated efficiency."""
    cal = load_calibration()
    h100 = cal.per_gpu["h100-80gb"]
    slow = dataclasses.replace(h100, compute_efficiency=0.6 * h100.compute_efficiency)
    return LatencyModel(calibration=dataclasses.replace(cal, per_gpu={**cal.per_gpu, "h100-80gb": slow}))


def test_verification_uses_the_calls_latency_model():
    perf = _slow_h100()
    request = ProvisionRequest(goal="cost", rps=6.0, families=("splitwise-hh",), duration_s=20.0,
                               verify_duration_s=20.0, verify_seeds=(1,))
    result = provision(request, perf=perf)
    (fr,) = result.families
    assert fr.feasible and fr.verification is not None
    design = design_from_json(fr.to_json("coding", request.model)["design"])
    trace = request.traces(20.0, 1).at(6.0)
    ws = fr.verification["worst_slowdown"]
    mine = simulate(design, trace, request.model, engine="des", perf=perf).iloc[0]
    shipped = simulate(design, trace, request.model, engine="des").iloc[0]
    assert ws["ttft"]["p99"] == pytest.approx(mine["slowdown_ttft_p99"], rel=1e-12)
    assert ws["ttft"]["p50"] == pytest.approx(mine["slowdown_ttft_p50"], rel=1e-12)
    assert abs(mine["slowdown_ttft_p50"] / shipped["slowdown_ttft_p50"] - 1) > 0.05   # the test can tell them apart


def test_from_result_with_a_window_of_no_request_names_the_json_not_flags(tmp_path, capsys):
    """A hand-edited duration_s of 1e-300 said 'too few requests: --rps * --duration', flags the
    user never gave: the trace comes from the result's question."""
    from provisioner.cli import run

    design = {"family": "baseline-a100", "prompt_machines": 2, "token_machines": 0, "prompt_machine": "dgx-a100",
              "token_machine": "dgx-a100", "prompt_power_cap": 1.0, "token_power_cap": 1.0, "prompt_tp": 8,
              "token_tp": 8, "prompt_batch_cap_tokens": 2048}
    best = {"design": design, "rps": 5.0}
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"question": {"workload": "coding", "model": "bloom-176b", "arrival": "poisson",
                                             "duration_s": 1e-300, "seed": 0},
                                "best": [best], "winner": best}))
    assert run(["simulate", "--from-result", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: result JSON 'question' is invalid: too few requests: rps * duration_s") and \
        "--" not in err and err.count("\n") == 1, err


def test_from_result_with_a_seed_past_2_63_is_refused_as_seed_is(tmp_path, capsys):
    """A hand-edited seed of 2**70 was drawn with, where --seed and ProvisionRequest stop at 2**63."""
    from provisioner.cli import run

    design = {"family": "baseline-a100", "prompt_machines": 2, "token_machines": 0, "prompt_machine": "dgx-a100",
              "token_machine": "dgx-a100", "prompt_power_cap": 1.0, "token_power_cap": 1.0, "prompt_tp": 8,
              "token_tp": 8, "prompt_batch_cap_tokens": 2048}
    best = {"design": design, "rps": 5.0}
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"question": {"workload": "coding", "model": "bloom-176b", "arrival": "poisson",
                                             "duration_s": 60, "seed": 2**70},
                                "best": [best], "winner": best}))
    assert run(["simulate", "--from-result", str(path)]) == 2
    assert capsys.readouterr().err == (f"error: result JSON 'question' is invalid: seed must be an integer below "
                                       f"2**63, got {2**70}\n")
