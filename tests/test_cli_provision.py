"""`provision --goal ...` as a user types it (the console script, in a subprocess).

CONTRACTS.md: `provision --goal cost --rps 70` with `--design` (repeatable), `--json`
printing {"goal", "constraint", "best": [...], "winner"}; bad input is one line
`error: ...` on stderr and exit code 2, never a traceback.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

PROVISION = str(Path(sys.executable).with_name("provision"))


def run(*args, timeout=240):
    return subprocess.run([PROVISION, *args], capture_output=True, text=True, timeout=timeout)


def assert_user_error(proc, *needles):
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert "Traceback" not in proc.stderr
    for n in needles:
        assert n in lines[0]


def test_fig12_splitwise_hh_json():
    """Splitwise Fig. 12: cost-optimal Splitwise-HH at 70 rps was 27 prompt + 3 token DGX-H100
    (30 machines). Ours must be within 20% of that machine count, verified by the DES."""
    proc = run("--goal", "cost", "--rps", "70", "--design", "splitwise-hh", "--json")
    assert proc.returncode == 0, proc.stderr
    obj = json.loads(proc.stdout)
    assert obj["goal"] == "cost" and obj["constraint"] == {"rps": 70.0}
    assert obj["question"]["model"] == "bloom-176b" and obj["question"]["workload"] == "coding"
    (best,) = obj["best"]
    d = best["design"]
    assert d["family"] == "splitwise-hh" and d["prompt_gpu"] == d["token_gpu"] == "h100-80gb"
    assert best["feasible"] is True and best["slo"]["met"] is True
    machines = d["prompt_machines"] + d["token_machines"]
    assert abs(machines - 30) <= 0.2 * 30
    assert d["prompt_machines"] > d["token_machines"]
    assert best["cost_usd_per_h"] == pytest.approx(38.0 * machines)
    assert best["verification"]["engine"] == "des" and best["verification"]["met"] is True
    assert 0 <= best["lower_bound"] <= best["cost_usd_per_h"]
    assert best["gap_to_bound_pct"] >= 0 and best["evaluations"] > 0
    for m in ("ttft", "tbt", "e2e"):
        assert set(best["slo"]["slowdown"][m]) == {"p50", "p90", "p99"}
    assert obj["winner"] == best
    assert obj["evaluated"] and all(r["family"] == "splitwise-hh" for r in obj["evaluated"])
    assert len(obj["evaluated"]) == best["evaluations"]
    assert_schema_names_every_key(obj)


def assert_schema_names_every_key(obj, schema=Path(__file__).parents[1] / "provisioner" / "RESULT_SCHEMA.md"):
    """Every key of a real result is in RESULT_SCHEMA.md, the page the README sends --json readers to
    (it had fallen behind: engine, elapsed_s, verification's des_runs and screened, ...)."""
    text = schema.read_text(encoding="utf-8")
    blocks = [obj, obj["question"], obj["best"][0], obj["best"][0]["verification"], obj["best"][0]["slo"],
              obj["evaluated"][0], obj["best"][0]["design"], obj["best"][0]["trace"]]
    missing = sorted({k for block in blocks for k in block if f'"{k}"' not in text})
    assert not missing, f"RESULT_SCHEMA.md does not name {missing}"


def test_table_output_and_power_goal():
    proc = run("--goal", "power", "--rps", "6", "--design", "splitwise-hh", "--design", "splitwise-hhcap",
               "--duration", "30", "--no-verify")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "least provisioned kW" in out and "splitwise-hhcap" in out and "winner:" in out
    assert "TTFT" in out and "gap" in out


def test_throughput_goal_json():
    proc = run("--goal", "throughput", "--power-budget-kw", "70", "--design", "splitwise-hh", "--duration", "30",
               "--no-verify", "--json")
    assert proc.returncode == 0, proc.stderr
    obj = json.loads(proc.stdout)
    assert obj["constraint"] == {"power_budget_kw": 70.0}
    best = obj["best"][0]
    assert best["sustainable_rps"] > 0 and best["power_kw"] <= 70.0
    assert best["lower_bound"] >= best["sustainable_rps"]


def test_a_throughput_answer_of_a_custom_family_names_the_search_it_ran():
    """Goal throughput races the budget's designs, the custom family's caps on a grid: its
    answer said searcher 'optuna', which never ran (--trials changed nothing; now refused)."""
    proc = run("--goal", "throughput", "--cost-budget-usd-per-h", "120", "--design", "baseline-custom",
               "--prompt-machine-types", "dgx-h100", "--duration", "10", "--no-verify", "--json")
    assert proc.returncode == 0, proc.stderr
    (best,) = json.loads(proc.stdout)["best"]
    assert best["feasible"] and best["searcher"] == "enumeration"


def test_a_throughput_answer_keeps_max_machines():
    """Was ignored by goal throughput: 40 kW buys 3 DGX-H100, and --max-machines 2 answered 3."""
    proc = run("--goal", "throughput", "--power-budget-kw", "40", "--design", "baseline-h100", "--design",
               "splitwise-hh", "--max-machines", "2", "--duration", "10", "--no-verify", "--json")
    assert proc.returncode == 0, proc.stderr
    best = json.loads(proc.stdout)["best"]
    assert all(b["feasible"] and max(b["design"]["prompt_machines"], b["design"]["token_machines"]) <= 2
               for b in best)
    assert best[0]["design"]["prompt_machines"] == 2   # the most the bound and the budget allow
    # a budget past what the planner enumerates is a question when --max-machines bounds the counts
    # (was refused: "buys over 10,000 machines", whatever --max-machines said)
    proc = run("--goal", "throughput", "--power-budget-kw", "1e9", "--design", "baseline-h100", "--max-machines", "2",
               "--duration", "10", "--no-verify", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["best"][0]["design"]["prompt_machines"] == 2


def test_no_options_prints_help():
    proc = run()
    assert proc.returncode == 0
    assert "--goal" in proc.stdout and "simulate" in proc.stdout


def test_subcommands_still_work():
    proc = run("simulate", "--design", "splitwise-hh", "--prompt-machines", "3", "--token-machines", "1",
               "--rps", "4", "--duration", "20", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["design"]["family"] == "splitwise-hh"


@pytest.mark.parametrize("args,needles", [
    (["--goal", "cost", "--rps", "0"], ["--rps must be a finite number > 0"]),
    (["--goal", "cost", "--rps", "-5"], ["--rps must be a finite number > 0"]),
    (["--goal", "cost"], ["--rps"]),
    (["--rps", "70"], ["--goal is required"]),
    (["--goal", "throughput"], ["exactly one budget"]),
    (["--goal", "throughput", "--power-budget-kw", "0"], ["--power-budget-kw must be a finite number > 0"]),
    (["--goal", "throughput", "--cost-budget-usd-per-h", "-1"], ["--cost-budget-usd-per-h must be a finite number > 0"]),
    (["--goal", "cost", "--rps", "70", "--design", "splitwise-xx"], ["splitwise-xx", "did you mean 'splitwise-"]),
    (["--goal", "cost", "--rps", "70", "--model", "blom-176b"], ["blom-176b", "bloom-176b"]),
    (["--goal", "cost", "--rps", "70", "--workload", "/nonexistent/trace.csv"], ["cannot read trace"]),
    (["--goal", "cost", "--rps", "70", "--prompt-machine-types", "dgx-h10"], ["dgx-h10", "dgx-h100"]),
    (["--goal", "cost", "--rps", "70", "--design", "baseline-a100", "--slo-scale", "0.5"],
     ["no machine can meet the SLO"]),
    (["--goal", "speed", "--rps", "70"], ["--goal must be one of"]),
    # named no flag ("unknown machine 'x'"): which of the two lists?
    (["--goal", "cost", "--rps", "2", "--design", "splitwise-custom", "--prompt-machine-types", "dgx-a100",
      "--token-machine-types", "dgx-b100"], ["--token-machine-types: unknown machine 'dgx-b100'"]),
    # an empty list was taken as not given (the prompt types, or the family's default machines)
    *[(["--goal", "cost", "--rps", "2", "--duration", "3", "--no-verify", "--max-machines", "4", "--design",
        "splitwise-custom", "--prompt-machine-types", ptypes, "--token-machine-types", ttypes],
       [f"{flag} lists no machine type"])
      for ptypes, ttypes, flag in (("dgx-a100", "", "--token-machine-types"),
                                   (",,", "dgx-a100", "--prompt-machine-types"))],
])
def test_bad_input_is_one_line_and_exit_2(args, needles):
    assert_user_error(run(*args), *needles)


def test_unreadable_trace_file(tmp_path):
    bad = tmp_path / "trace.csv"
    bad.write_text("this,is,not\na,trace,at all\n")
    assert_user_error(run("--goal", "cost", "--rps", "5", "--workload", str(bad)), "trace")


def test_existing_report_needs_force(tmp_path):
    out = tmp_path / "report.html"
    out.write_text("keep me")
    assert_user_error(run("--goal", "cost", "--rps", "5", "--report", str(out)), "--force")
    assert out.read_text() == "keep me"


def test_report_is_written(tmp_path):
    pytest.importorskip("reports")
    out = tmp_path / "report.html"
    proc = run("--goal", "cost", "--rps", "5", "--design", "splitwise-hh", "--duration", "30", "--no-verify",
               "--report", str(out))
    assert proc.returncode == 0, proc.stderr
    assert out.exists() and out.stat().st_size > 1000


@pytest.mark.parametrize("flags,expected", [
    ([], "splitwise-hhcap: 3 prompt + 2 token machines, token pool at 50% of TDP —"),
    # an override of the cap that defines the family is run, and named, never passed off as the family's own
    (["--token-power-cap", "1.0"],
     "splitwise-hhcap: 3 prompt + 2 token machines, token pool at 100% of TDP (the family's own: 50%) —"),
])
def test_simulate_names_the_power_caps_it_ran(capsys, flags, expected):
    from provisioner.cli import run as run_in_process

    assert run_in_process(["simulate", "--design", "splitwise-hhcap", "--prompt-machines", "3", "--token-machines",
                           "2", "--rps", "2", "--duration", "10", *flags]) == 0
    assert expected in " ".join(capsys.readouterr().out.split())   # the title as rich wraps it, rejoined


def _run_with_env(env_update: dict, *args):
    import os

    return subprocess.run([PROVISION, *args], capture_output=True, text=True, timeout=240,
                          env={**os.environ, **env_update})


def test_a_long_run_off_a_terminal_says_what_it_is_doing():
    """stderr captured (a log, a CI job): no bar, but one line per heartbeat period."""
    proc = _run_with_env({"PROVISION_HEARTBEAT_S": "0.05"}, "--goal", "cost", "--rps", "2", "--duration", "5",
                         "--design", "splitwise-hh", "--json")
    assert proc.returncode == 0, proc.stderr
    json.loads(proc.stdout)   # the answer is untouched
    beats = [line for line in proc.stderr.splitlines() if line.startswith("... ")]
    assert beats and all(line.endswith(" s)") for line in beats), proc.stderr


@pytest.mark.parametrize("value", ["x", "0", "-1", "inf", "1e300", "1e-300"])   # 1e300: threading's wait overflowed
def test_a_bad_heartbeat_period_is_one_line(value):
    assert_user_error(_run_with_env({"PROVISION_HEARTBEAT_S": value}, "--goal", "cost", "--rps", "2", "--duration",
                                    "5", "--design", "splitwise-hh"), "PROVISION_HEARTBEAT_S must be a number")


def test_the_heartbeat_never_writes_to_stdout_when_stderr_is_closed():
    """With fd 2 closed, sys.stderr is None and print(file=None) wrote the heartbeat into the JSON."""
    import os

    proc = subprocess.run([PROVISION, "--goal", "cost", "--rps", "2", "--duration", "5", "--design",
                           "splitwise-hh", "--json"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                          timeout=240, env={**os.environ, "PROVISION_HEARTBEAT_S": "0.01"},
                          preexec_fn=lambda: os.close(2))
    assert proc.returncode == 0
    json.loads(proc.stdout)


def test_simulate_from_result_of_a_custom_family_prints_its_table(tmp_path, capsys):
    """A custom family has no caps of its own: the title's caps looked its spec up and
    refused the answer, after the simulation, naming a --design flag never typed."""
    from provisioner.cli import run as run_in_process

    assert run_in_process(["--goal", "cost", "--rps", "2", "--duration", "10", "--design", "baseline-custom",
                           "--prompt-machine-types", "dgx-h100", "--trials", "8", "--no-verify", "--json"]) == 0
    (tmp_path / "custom.json").write_text(capsys.readouterr().out)
    assert run_in_process(["simulate", "--from-result", str(tmp_path / "custom.json")]) == 0
    assert " ".join(capsys.readouterr().out.split()).startswith("baseline-custom: ")
