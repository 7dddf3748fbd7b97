"""`--scheduler` as typed (CONTRACTS.md item 9): provision simulate, provision, sweep specs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from provisioner.designs import FAMILIES
from provisioner.sweep import load_sweep_spec

PROVISION = str(Path(sys.executable).with_name("provision"))
SIMULATE = ("simulate", "--design", "baseline-h100", "--machines", "3", "--workload", "conversation",
            "--rps", "4", "--duration", "30")


def run(*args, timeout=240):
    return subprocess.run([PROVISION, *args], capture_output=True, text=True, timeout=timeout)


def assert_user_error(proc, *needles):
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in proc.stderr, proc.stderr
    for n in needles:
        assert n in lines[0]


def test_simulate_llumnix_json_carries_the_counts_and_priorities():
    proc = run(*SIMULATE, "--scheduler", "llumnix", "--high-priority-fraction", "0.2", "--json")
    assert proc.returncode == 0, proc.stderr
    obj = json.loads(proc.stdout)
    assert obj["design"]["scheduler"] == "llumnix" and obj["engine"] == "des"
    stats = obj["scheduler_stats"]
    assert set(stats) == {"preemptions", "migrations", "migration_downtime_s", "recomputed_tokens",
                          "fragmentation_mean"}
    assert stats["preemptions"] >= 0 and 0 <= stats["fragmentation_mean"] <= 1
    assert obj["priority"]["high"]["ttft_ms"]["p99"] > 0 and obj["priority"]["low"]["ttft_ms"]["p50"] > 0
    assert all(isinstance(obj["priority"][c]["slo"]["met"], bool) for c in ("high", "low"))


def test_a_priority_class_of_every_request_has_the_overall_verdict():
    proc = run(*SIMULATE, "--scheduler", "jsq", "--high-priority-fraction", "1", "--json")
    assert proc.returncode == 0, proc.stderr
    obj = json.loads(proc.stdout)
    assert "slo" not in obj["priority"]["low"]     # no low-priority request: no verdict
    high = obj["priority"]["high"]["slo"]
    assert (high["met"], high["binding"]) == (obj["slo"]["met"], obj["slo"]["binding"])


def test_default_scheduler_json_has_no_new_keys():
    proc = run(*SIMULATE, "--json")
    assert proc.returncode == 0, proc.stderr
    obj = json.loads(proc.stdout)
    assert "scheduler" not in obj["design"] and "scheduler_stats" not in obj and "priority" not in obj
    same = json.loads(run(*SIMULATE, "--scheduler", "least-work", "--json").stdout)
    assert same == obj


def test_bad_scheduler_input_is_one_line():
    assert_user_error(run(*SIMULATE, "--scheduler", "fastest"), "--scheduler must be one of", "llumnix")
    assert_user_error(run(*SIMULATE, "--scheduler", "llumnix", "--engine", "fluid"), "--engine des")
    split = ("simulate", "--design", "splitwise-hh", "--prompt-machines", "2", "--token-machines", "2")
    assert_user_error(run(*split, "--scheduler", "jsq", "--engine", "fluid"), "--engine des")


def test_provision_answers_with_migration(tmp_path):
    report = tmp_path / "r.html"
    proc = run("--goal", "cost", "--rps", "4", "--workload", "conversation", "--duration", "30",
               "--design", "baseline-h100", "--scheduler", "llumnix", "--json", "--report", str(report))
    assert proc.returncode == 0, proc.stderr
    best = json.loads(proc.stdout)["best"][0]
    assert best["feasible"] and best["design"]["scheduler"] == "llumnix"
    assert best["verification"]["engine"] == "des" and best["verification"]["met"]
    html = report.read_text(encoding="utf-8")
    assert "Scheduler over time" in html and "baseline-h100 (llumnix)" in html
    assert "curves skipped" not in html   # the latency-vs-load curves ran (in the DES)
    saved = tmp_path / "result.json"
    saved.write_text(proc.stdout, encoding="utf-8")
    again = run("simulate", "--from-result", str(saved), "--json")
    assert again.returncode == 0, again.stderr
    rescored = json.loads(again.stdout)
    assert rescored["design"]["scheduler"] == "llumnix" and rescored["engine"] == "des"
    assert best["design"]["prompt_machines"] >= 1


def test_sweep_spec_scheduler_key(tmp_path):
    spec = tmp_path / "s.toml"
    spec.write_text('goals = ["cost"]\nrps = [5]\nworkloads = ["conversation"]\nscheduler = "llumnix"\n'
                    "verify = false\n", encoding="utf-8")
    q = load_sweep_spec(spec).questions[0].request
    assert q.scheduler == "llumnix" and q.families == FAMILIES   # every family takes every policy


def test_timeline_page(tmp_path):
    page = tmp_path / "t.html"
    proc = run(*SIMULATE, "--scheduler", "llumnix", "--timeline", str(page))
    assert proc.returncode == 0, proc.stderr
    html = page.read_text(encoding="utf-8")
    assert "fragmented KV memory" in html and "migration downtime" in html and "<script" in html
    assert_user_error(run(*SIMULATE, "--timeline", str(tmp_path / "u.html")), "--scheduler")


def test_sweep_with_a_scheduler_records_it(tmp_path):
    import pandas as pd
    spec = tmp_path / "s.toml"
    spec.write_text('goals = ["cost"]\nrps = [4]\nworkloads = ["conversation"]\nfamilies = ["baseline-h100"]\n'
                    'duration_s = 30\nverify = false\n', encoding="utf-8")
    proc = run("sweep", str(spec), "--out", str(tmp_path / "out"), "--scheduler", "llumnix")
    assert proc.returncode == 0, proc.stderr
    table = pd.read_csv(tmp_path / "out" / "results.csv")
    assert table["scheduler"].tolist() == ["llumnix"] and bool(table["feasible"].iloc[0])
    spec.write_text(spec.read_text(encoding="utf-8") + 'scheduler = "jsq"\n', encoding="utf-8")
    assert_user_error(run("sweep", str(spec), "--out", str(tmp_path / "o2"), "--scheduler", "llumnix"),
                      "'jsq'", "--scheduler 'llumnix'")


def test_cloud_and_autoscale_take_the_scheduler_option():
    """CONTRACTS.md item 9: --scheduler on every command that simulates; autoscale runs an
    on-demand policy in the DES; cloud runs one too (tests/test_cloud_scheduler.py) and
    refuses SplitwiseSim's replay, or the fluid engine with an on-demand policy, in a line."""
    cloud = ("cloud", "--inventory", "thunderserve-32gpu", "--rps", "1", "--duration", "20")
    autoscale = ("autoscale", "--profile", "diurnal", "--rps", "2", "--duration", "900", "--design",
                 "baseline-h100", "--workload", "conversation", "--json")
    assert_user_error(run(*cloud, "--scheduler", "splitwisesim"), "--scheduler splitwisesim", "not for cloud plans")
    assert_user_error(run(*cloud, "--scheduler", "llumnix", "--rescore-engine", "fluid"),
                      "--rescore-engine fluid does not model --scheduler llumnix", "use --rescore-engine des")
    for command in (cloud, autoscale):
        assert_user_error(run(*command, "--scheduler", "fifo"), "--scheduler must be one of")
    for policy, engine in (("least-work", "fluid"), ("llumnix", "des")):
        ok = run(*autoscale, "--static-machines", "2", "--capacity-rps", "1", "--scheduler", policy)
        assert ok.returncode == 0, ok.stderr
        answer = json.loads(ok.stdout)
        assert {"static", "autoscaled", "saving_pct"} <= set(answer)
        assert (answer["scheduler"], answer["engine"]) == (policy, engine)


def test_a_tighter_high_priority_slo_only_judges_the_high_class_and_never_passes_more():
    base = (*SIMULATE, "--scheduler", "llumnix", "--high-priority-fraction", "0.2", "--json")
    verdicts = {}
    for scale in ("1", "0.5"):
        proc = run(*base, "--high-priority-slo-scale", scale)
        assert proc.returncode == 0, proc.stderr
        obj = json.loads(proc.stdout)
        verdicts[scale] = (obj["priority"]["high"]["slo"]["met"], obj["priority"]["low"]["slo"], obj["slo"])
    assert verdicts["0.5"][1:] == verdicts["1"][1:]           # the others and the overall verdict stay
    assert verdicts["1"][0] or not verdicts["0.5"][0]          # tighter limits never pass more
    assert_user_error(run(*SIMULATE, "--high-priority-slo-scale", "0.5"), "--high-priority-fraction")


def test_priorities_and_the_timeline_are_refused_under_splitwisesim(tmp_path):
    """SplitwiseSim's scheduler neither preempts nor migrates: --high-priority-fraction
    changed no number (the JSON had no per-class block) and --timeline crashed (exit 1)."""
    splitwisesim = (*SIMULATE, "--scheduler", "splitwisesim")
    assert_user_error(run(*splitwisesim, "--high-priority-fraction", "0.2"), "--high-priority-fraction",
                      "splitwisesim", "jsq-migration")
    page = tmp_path / "t.html"
    assert_user_error(run(*splitwisesim, "--timeline", str(page)), "--timeline", "splitwisesim", "--scheduler jsq")
    assert not page.exists()


SPLIT = ("simulate", "--design", "splitwise-hh", "--prompt-machines", "3", "--token-machines", "2", "--model",
         "bloom-176b", "--workload", "conversation", "--rps", "20", "--duration", "30")


def test_simulate_a_split_family_under_llumnix_reports_the_counts_and_the_timeline(tmp_path):
    page = tmp_path / "t.html"
    proc = run(*SPLIT, "--scheduler", "llumnix", "--json", "--timeline", str(page))
    assert proc.returncode == 0, proc.stderr
    obj = json.loads(proc.stdout)
    assert obj["engine"] == "des" and obj["design"]["scheduler"] == "llumnix"
    stats = obj["scheduler_stats"]
    assert stats["migrations"] > 0 and stats["migration_downtime_s"] > 0 and stats["preemptions"] >= 0
    assert 0 <= stats["fragmentation_mean"] < 1
    html = page.read_text(encoding="utf-8")
    assert "fragmented KV memory" in html and "<script" in html
    jsq = json.loads(run(*SPLIT, "--scheduler", "jsq", "--json").stdout)["scheduler_stats"]
    assert jsq["preemptions"] > stats["preemptions"] and jsq["migrations"] == 0


def test_provision_answers_how_many_split_machines_with_migration(tmp_path):
    report = tmp_path / "r.html"
    proc = run("--goal", "cost", "--rps", "4", "--workload", "conversation", "--duration", "20",
               "--design", "splitwise-hh", "--design", "splitwiser-h100", "--scheduler", "llumnix", "--json",
               "--report", str(report))
    assert proc.returncode == 0, proc.stderr
    html = report.read_text(encoding="utf-8")
    assert "Scheduler over time" in html and "(llumnix)" in html
    answer = json.loads(proc.stdout)
    best = answer["best"][0]
    assert best["feasible"] and best["design"]["scheduler"] == "llumnix"
    assert best["design"]["family"] in ("splitwise-hh", "splitwiser-h100")
    assert best["verification"]["engine"] == "des" and best["verification"]["met"]
