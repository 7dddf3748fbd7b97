"""Autoscaling: availability windows in both engines, the controller against a
hand-computed case, and `provision autoscale` as typed."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from perfmodels import LatencyModel
from provisioner.autoscale import AutoscalePolicy, autoscale, machine_hours, plan_scaling
from provisioner.cli import get_app
from provisioner.designs import make_design
from provisioner.errors import ProvisionerError
from provisioner.sim import simulate, simulate_scaled
from workloads import RateProfile, TraceGenerator

MODEL = "llama2-70b"
PERF = LatencyModel()
DGX_A100_USD_PER_H = 17.6      # Splitwise Table I (the catalog's default cost option)
DGX_A100_KW = 6.5


def two_levels(levels=(1.0, 3.0), step_s=1800.0):
    """The load of the hand-computed case: 1 req/s, then 3 req/s (then back, if given)."""
    starts = np.arange(len(levels)) * step_s
    return RateProfile(starts, np.array(levels), step_s * len(levels), "two-levels")


# Capacity 1 req/s per machine, decisions every 300 s on the last 300 s, 120-s start-up,
# scale out above 0.9 to a load of 0.8, scale in below 0.5 (of one machine fewer).
POLICY = AutoscalePolicy(scale_out_load=0.9, scale_in_load=0.5, target_load=0.8, startup_s=120.0,
                         interval_s=300.0, window_s=300.0, min_machines=1)


def run_case(levels, engine="fluid", seed=0):
    gen = TraceGenerator("coding", 300, seed=seed)
    day = gen.with_profile(two_levels(levels))
    return autoscale("baseline-a100", day, gen.at(3.0), MODEL, POLICY, perf=PERF, engine=engine,
                     capacity_rps=1.0, static_machines=4)


def test_hand_computed_two_levels():
    """At 1 req/s the controller keeps ceil(1 / 0.8) = 2 machines; the first tick whose
    window holds only the 3-req/s level is 1800 + 300 = 2100 s: 3 > 0.9 x 2 x 1 starts
    ceil(3 / 0.8) - 2 = 2 machines, serving at 2220 s. Paid: 2 x 1 h + 2 x 1500 s =
    2.8333 machine-hours against the static 4 x 1 h."""
    r = run_case((1.0, 3.0))
    s = r.schedule
    assert s.billed_from_s.tolist() == [0, 0, 2100, 2100]
    assert s.serve_from_s.tolist() == [0, 0, 2220, 2220]
    assert np.isinf(s.serve_until_s).all()
    hours = 2 + 2 * 1500 / 3600
    assert r.autoscaled.machine_hours == pytest.approx(hours)
    assert r.static.machine_hours == pytest.approx(4.0)
    assert r.autoscaled.cost_usd == pytest.approx(hours * DGX_A100_USD_PER_H)
    assert r.static.energy_kwh == pytest.approx(4.0 * DGX_A100_KW)
    assert r.saving_pct == pytest.approx(100 * (1 - hours / 4))
    assert s.serving_at([2219.0, 2220.0]).tolist() == [2, 4]


def test_scale_in_pays_until_the_drain():
    """Back to 1 req/s at 3600 s: the tick at 3900 s sees 1 < 0.5 x 3 and stops the two
    newest machines; each stays paid until its last request finishes, if that is later."""
    r = run_case((1.0, 3.0, 1.0))
    s = r.schedule
    assert s.serve_until_s[2:].tolist() == [3900, 3900] and np.isinf(s.serve_until_s[:2]).all()
    extra_h = r.autoscaled.machine_hours - (2 * 1.5 + 2 * 1800 / 3600)
    assert 0 <= extra_h < 2 * 120 / 3600
    # the billing rule itself: drained after the scale-in extends the bill, before it does not
    drained = np.array([5000.0, 5000.0, 3960.0, 3850.0])
    assert machine_hours(s, drained, 5400.0) == pytest.approx((2 * 5400 + 3960 - 2100 + 3900 - 2100) / 3600)


def test_default_windows_change_nothing():
    trace = TraceGenerator("coding", 60, seed=2).at(4.0)
    d = make_design("baseline-a100", machines=3)
    for engine in ("fluid", "des"):
        plain = simulate(d, trace, MODEL, engine=engine, perf=PERF).iloc[0]
        row, drained = simulate_scaled(d, trace, MODEL, np.zeros(3), np.full(3, np.inf), engine=engine, perf=PERF)
        for col in ("ttft_p50_s", "ttft_p99_s", "tbt_p99_s", "e2e_p99_s", "throughput_rps"):
            assert row.iloc[0][col] == plain[col]
        assert trace.arrival_s[-1] < drained.max() < np.inf   # the last request finishes after it arrives


def test_engines_agree_on_an_autoscaled_run():
    """The fluid engine against the discrete-event reference on the two-level case
    (benchmarks/fidelity.py's tolerances: medians within 5%, p99 within 10%)."""
    fluid, des = run_case((1.0, 3.0), "fluid"), run_case((1.0, 3.0), "des")
    assert fluid.schedule.billed_from_s.tolist() == des.schedule.billed_from_s.tolist()
    for col, tol in (("ttft_p50_s", 0.05), ("e2e_p50_s", 0.05), ("ttft_p99_s", 0.10), ("e2e_p99_s", 0.10)):
        assert fluid.autoscaled.row[col] == pytest.approx(des.autoscaled.row[col], rel=tol), col
    assert fluid.autoscaled.machine_hours == pytest.approx(des.autoscaled.machine_hours, rel=0.01)


def test_windows_refused_where_they_cannot_hold():
    trace = TraceGenerator("coding", 30, seed=0).at(2.0)
    with pytest.raises(ProvisionerError, match="no server is available"):
        simulate_scaled(make_design("baseline-a100", machines=2), trace, MODEL, np.array([0.0, 20.0]),
                        np.array([10.0, np.inf]), perf=PERF)
    with pytest.raises(ProvisionerError, match="two pools"):
        simulate_scaled(make_design("splitwise-aa", 1, 1), trace, MODEL, np.zeros(2), np.full(2, np.inf), perf=PERF)


def test_controller_keeps_the_minimum():
    s = plan_scaling(np.array([]), 3600.0, 1.0, 3, AutoscalePolicy(min_machines=2))
    assert s.machines.min() == 2 and s.serving_at([3599.0])[0] == 2


def test_the_machine_range_counts_the_machines_the_day_starts_with():
    """Was: machines_min..max read the decisions only, so a day that starts 5 machines and
    scales in to 1 at the first tick was reported as 1..1."""
    s = plan_scaling(np.array([]), 600.0, 1.0, 5, AutoscalePolicy(min_machines=1))
    assert s.machines.max() == 1 and s.machines_range == (1, 5)
    assert plan_scaling(np.array([]), 30.0, 1.0, 3, AutoscalePolicy()).machines_range == (3, 3)   # no tick


def test_a_machine_is_stopped_only_after_it_served():
    """A machine whose weights finished loading at a decision was stopped at it, leaving it
    the empty window [t, t): the engines refused the schedule ('every availability window
    needs active_until_s > active_from_s', exit 2). Here a burst starts 11 machines at 60 s,
    ready at 180 s, and the load is gone by then."""
    policy = AutoscalePolicy(interval_s=60.0, window_s=60.0, startup_s=120.0, min_machines=1)
    s = plan_scaling(np.linspace(0.0, 59.9, 600), 600.0, 1.0, 1, policy)
    stopped = np.isfinite(s.serve_until_s)
    assert stopped.sum() == 11 and np.all(s.serve_until_s[stopped] > s.serve_from_s[stopped])


runner = CliRunner()


def test_cli_json_keeps_the_contract(tmp_path):
    profile = tmp_path / "rate.csv"
    profile.write_text("time_s,rps\n0,1\n1800,3\n")
    res = runner.invoke(get_app(), ["autoscale", "--profile", str(profile), "--design", "baseline-a100",
                                    "--workload", "coding", "--model", MODEL, "--static-machines", "4",
                                    "--capacity-rps", "1", "--interval-s", "300", "--window-s", "300",
                                    "--scale-out-load", "0.9", "--scale-in-load", "0.5", "--target-load", "0.8",
                                    "--arrival", "poisson", "--seed", "0", "--json"])
    assert res.exit_code == 0, res.output
    obj = json.loads(res.stdout)
    for side in ("static", "autoscaled"):
        assert {"machine_hours", "cost_usd", "energy_kwh", "slo"} <= set(obj[side])
        assert isinstance(obj[side]["slo"]["met"], bool) and "p99" in obj[side]["slo"]["slowdown"]["ttft"]
    assert obj["autoscaled"]["machine_hours"] == pytest.approx(2 + 2 * 1500 / 3600)
    assert obj["saving_pct"] == pytest.approx(100 * (1 - obj["autoscaled"]["cost_usd"] / obj["static"]["cost_usd"]))
    # saved, it is drawn later as --report draws it
    saved, page = tmp_path / "day.json", tmp_path / "day.html"
    saved.write_text(res.stdout)
    drawn = runner.invoke(get_app(), ["report", str(saved), "--out", str(page)])
    assert drawn.exit_code == 0 and "Autoscaling baseline-a100" in page.read_text(), drawn.output
    # a hand-edited value is refused naming its key (was "lacks key None", or drawn as it stood)
    from reports import write_command_page
    for mangle, needle in ((lambda a: a.__setitem__("scale_on", None), "'scale_on' must be string"),
                           (lambda a: a["autoscaled"].__setitem__("cost_usd", "x"), "'autoscaled.cost_usd'"),
                           (lambda a: a.__setitem__("saving_pct", None), "'saving_pct' must be number"),
                           (lambda a: a["timeline"].__setitem__("machines", [1]), "must be as long")):
        bad = json.loads(res.stdout)
        mangle(bad)
        with pytest.raises(ProvisionerError, match=needle):
            write_command_page(bad, tmp_path / "bad.html")
    assert not (tmp_path / "bad.html").exists()


def test_the_json_rebuilds_the_day_and_the_sizing_trace_it_ran_on(tmp_path):
    """The JSON named the profile's file and its peak, not its steps: a CSV edited since
    (or rescaled by --rps) gave another day. Its `profile` now holds the steps as run, and
    with `trace` (the generator) rebuilds both traces request for request."""
    from workloads import read_profile_csv

    profile = tmp_path / "rate.csv"
    profile.write_text("time_s,rps\n0,1\n600,3\n1200,2\n")
    res = runner.invoke(get_app(), ["autoscale", "--profile", str(profile), "--rps", "4", "--design", "baseline-a100",
                                    "--model", MODEL, "--static-machines", "4", "--sizing-duration", "60",
                                    "--arrival", "gamma", "--cv", "3", "--seed", "7", "--json"])
    assert res.exit_code == 0, res.output
    obj = json.loads(res.stdout)
    profile.write_text("time_s,rps\n0,9\n60,1\n")   # the file changes after the run
    gen = TraceGenerator.from_json(obj["trace"])
    day = gen.with_profile(RateProfile.from_json(obj["profile"]))
    ran = TraceGenerator("coding", 60, seed=7, arrival="gamma", cv=3.0)
    expected = ran.with_profile(RateProfile(np.array([0.0, 600.0, 1200.0]), np.array([4 / 3, 4.0, 8 / 3]), 1800.0))
    assert len(day) == obj["profile"]["requests"] == len(expected)
    np.testing.assert_array_equal(day.arrival_s, expected.arrival_s)
    np.testing.assert_array_equal(day.prompt_tokens, expected.prompt_tokens)
    sizing = gen.at(obj["profile"]["peak_rps"])
    np.testing.assert_array_equal(sizing.arrival_s, ran.at(4.0).arrival_s)
    assert read_profile_csv(profile).peak_rps == 9.0   # what re-reading the file would have given
    # drawn arrivals: one window, the stream at the peak (no part of the day is busier);
    # --static-machines gave the count, so it was not sized on it
    assert obj["sizing"] == {"by": ["requests"], "start_s": 0.0, "requests": len(sizing),
                             "rps": len(sizing) / 60, "prompt_tokens": int(sizing.prompt_tokens.sum()),
                             "output_tokens": int(sizing.output_tokens.sum()), "sized": False}
    assert obj["sizing_windows"] == [{k: v for k, v in obj["sizing"].items() if k != "sized"}]


def test_a_profile_shorter_than_a_decision_interval_starts_what_one_interval_needs(tmp_path):
    """One request in 1 ms: the warm start read 589 req/s over the profile's 1.7 ms and
    started 589 machines ("saves -58800%"); over one 60-s interval it is one machine."""
    profile = tmp_path / "rate.csv"
    profile.write_text("time_s,rps\n0,1\n0.001,1\n")
    res = runner.invoke(get_app(), ["autoscale", "--profile", str(profile), "--design", "baseline-h100",
                                    "--model", MODEL, "--static-machines", "1", "--capacity-rps", "1", "--json"])
    assert res.exit_code == 0, res.output
    obj = json.loads(res.stdout)
    assert obj["autoscaled"]["machine_hours"] == pytest.approx(obj["static"]["machine_hours"])


def test_cli_runs_a_replayed_day(tmp_path):
    """The coding trace's own gaps, stretched to the profile: bursty enough that a scale-in
    met a machine just loaded (the empty window above)."""
    profile = tmp_path / "rate.csv"
    profile.write_text("time_s,rps\n0,1\n300,3\n600,1.5\n")
    res = runner.invoke(get_app(), ["autoscale", "--profile", str(profile), "--design", "baseline-h100", "--duration",
                                    "900", "--sizing-duration", "60", "--arrival", "replay", "--json"])
    assert res.exit_code == 0, res.output
    obj = json.loads(res.stdout)
    assert obj["scaling_events"] > 0
    # the controller plans with the peak over the static count, as --capacity-rps says: the
    # rate of the day's busiest 60-s window, which the static cluster is sized on (was: the
    # first window's 63 requests over its 60 s, 1.05 req/s for a 3-req/s peak, so 21 machines
    # ran where 6 were bought; then the peak of 3 over those 6 machines, which the first
    # window had sized)
    assert obj["sizing"]["rps"] > 3.0
    assert obj["capacity_rps"] == pytest.approx(obj["sizing"]["rps"] / obj["static"]["machines"])


def _autoscale_replayed_day(tmp_path, arrival, profile_rows: str, *args):
    """`provision autoscale --json` replaying `arrival` (1,500-token prompts, 200-token outputs)
    over the rate profile of `profile_rows` (`time_s,rps` lines): its JSON and the profile's path."""
    trace = tmp_path / "bursty.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n" + "".join(f"{a:g},1500,200\n" for a in arrival))
    profile = tmp_path / "rate.csv"
    profile.write_text("time_s,rps\n" + profile_rows)
    res = runner.invoke(get_app(), ["autoscale", "--profile", str(profile), "--workload", str(trace), *args, "--json"])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout), profile


def test_a_replayed_day_is_sized_on_its_busiest_window(tmp_path):
    """A file quiet for 60 s, busy for 60 s (a request every 0.5 s), then quiet, replayed over
    a day peaking at 1 req/s: the static cluster was sized on the file's first 60 s at the
    peak (41 requests: 3 machines) and missed its SLOs over the day it was bought for. Now on
    the day's own busiest 60 s, which the day plays at its peak (123 requests: 6 machines),
    and meets them."""
    from provisioner.autoscale import size_for_peak
    from provisioner.slo import SLO
    from workloads import read_profile_csv

    arrival = np.concatenate([6.0 * np.arange(10), 60 + 0.5 * np.arange(120), 120 + 6.0 * np.arange(10)])
    obj, profile = _autoscale_replayed_day(tmp_path, arrival, "0,0.5\n600,1\n",
                                           "--design", "baseline-a100", "--sizing-duration", "60")
    gen = TraceGenerator.from_json(obj["trace"])
    first = gen.at(1.0)
    busiest, start_s = gen.busiest_window(1.0, read_profile_csv(profile))
    assert obj["sizing"] == {"by": ["requests", "prompt_tokens", "output_tokens"], "start_s": start_s,
                             "requests": len(busiest), "rps": len(busiest) / 60,
                             "prompt_tokens": 1500 * len(busiest), "output_tokens": 200 * len(busiest),
                             "sized": True}
    # equal sizes: the most requests are the most tokens
    assert obj["sizing_windows"] == [{k: v for k, v in obj["sizing"].items() if k != "sized"}]
    assert (len(first), len(busiest)) == (41, 123) and start_s > 0
    assert size_for_peak("baseline-a100", first, "bloom-176b", SLO(), PERF) == 3
    assert obj["static"]["machines"] == 6 and obj["static"]["slo"]["met"]


def test_a_window_of_fewer_longer_prompts_sizes_the_static_cluster_when_it_needs_more(tmp_path):
    """A file of 160 short requests in its first 80 s (100-token prompts), then 120 long ones
    in the next 80 s (6,000-token prompts), replayed over a flat 160-s day at its own rate
    (1.75 req/s, so the day plays it as recorded): the busiest 60 s by requests are short
    ones (120), which one H100 machine carries; by prompt tokens long ones (91), which need
    two. The static cluster was sized on the most requests only: one machine, which misses
    the SLOs over the day; now it is the fewest meeting them on both windows, set by the
    long prompts', and it meets them all day."""
    from provisioner.autoscale import Sizing, size_for_peak, size_for_windows
    from provisioner.slo import SLO

    arrival = np.concatenate([0.5 * np.arange(160), 80 + (80 / 120) * np.arange(120)])
    prompts = np.concatenate([np.full(160, 100), np.full(120, 6000)])
    trace = tmp_path / "mixed.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n" +
                     "".join(f"{a:.6f},{p},50\n" for a, p in zip(arrival, prompts)))
    profile = tmp_path / "rate.csv"
    profile.write_text("time_s,rps\n0,1.75\n")
    res = runner.invoke(get_app(), ["autoscale", "--profile", str(profile), "--duration", "160", "--workload",
                                    str(trace), "--design", "baseline-h100", "--model", MODEL, "--sizing-duration",
                                    "60", "--json"])
    assert res.exit_code == 0, res.output
    obj = json.loads(res.stdout)
    by = {tuple(w["by"]): w for w in obj["sizing_windows"]}
    assert set(by) == {("requests", "output_tokens"), ("prompt_tokens",)}
    short, long = by[("requests", "output_tokens")], by[("prompt_tokens",)]
    assert short["requests"] > long["requests"] and long["prompt_tokens"] > short["prompt_tokens"]
    gen = TraceGenerator.from_json(obj["trace"])
    day = gen.with_profile(RateProfile.from_json(obj["profile"]))
    windows = [gen.busiest_window(1.0, RateProfile.from_json(obj["profile"]), day=day, by=b)[0]
               for b in ("requests", "prompt_tokens")]
    alone = [size_for_peak("baseline-h100", w, MODEL, SLO(), PERF) for w in windows]
    assert alone == [1, 2]
    assert size_for_windows("baseline-h100", windows, MODEL, SLO(), PERF) == Sizing(2, 1)
    assert obj["sizing"] == {**long, "sized": True} and obj["static"]["machines"] == 2 and obj["static"]["slo"]["met"]
    # the one machine the most requests asked for misses the SLOs over the day it was bought for
    assert not simulate(make_design("baseline-h100", machines=1), day, MODEL, perf=PERF)["slo_met"].iloc[0]
    assert obj["capacity_rps"] == pytest.approx(long["rps"] / alone[1])


class _Verdicts:
    """A stand-in for the search's Evaluator over toy windows: each window (a list of the
    counts meeting the SLOs on it, past its last entry every count does) says which of the
    designs it is given meet them, and records the counts it was asked about."""

    asked: list = []

    def __init__(self, window, *args, **kwargs):
        self.meeting = window

    def __call__(self, designs):
        import pandas as pd

        counts = [d.prompt_machines for d in designs]
        _Verdicts.asked.append(counts)
        return pd.DataFrame({"slo_met": [n in self.meeting or n > max(self.meeting) for n in counts]})


@pytest.mark.parametrize("windows, sized, asked", [
    # the count a later window raised misses an earlier one (met at 66, missed at 67): on up to 68
    # (the Evaluator recalls what it scored: 66 and 68 on the second window are simulated once)
    ([[66, 68], [67]], (68, 0), [list(range(1, 33)), list(range(33, 65)), list(range(65, 97)), [66],
                                 list(range(67, 99)), [67], list(range(68, 100)), [68]]),
    # a window the count already carries costs one simulation of it, and does not set the count
    ([[3], [2, 3], [3]], (3, 0), [list(range(1, 33)), [3], [3]]),
])
def test_the_static_count_meets_the_slos_on_every_window(monkeypatch, windows, sized, asked):
    """The fewest machines meeting the SLOs on every window, each searched from the count so
    far up: a count raised for a later window is checked again on the earlier ones, since
    the verdict need not grow with the count (coding's busiest 600 s by requests on BLOOM-176B
    met at 66 A100 machines, missed at 67, met from 68)."""
    import provisioner.search
    from provisioner.autoscale import Sizing, size_for_windows

    monkeypatch.setattr(provisioner.search, "Evaluator", _Verdicts)
    monkeypatch.setattr(_Verdicts, "asked", [])
    assert size_for_windows("baseline-a100", windows, MODEL, None, PERF) == Sizing(*sized)
    assert _Verdicts.asked == asked


def test_a_floor_is_refused_only_when_the_count_below_it_meets_every_window(monkeypatch):
    """min_machines 4 over windows met from 3 and from 5: the static count is 5, no refusal
    (was: the first window alone, met at 3, would have refused it); over windows met from 2
    and from 3 it is refused naming 3, the count on both."""
    import provisioner.search
    from provisioner.autoscale import size_for_windows

    monkeypatch.setattr(provisioner.search, "Evaluator", _Verdicts)
    assert size_for_windows("baseline-a100", [[3], [5]], MODEL, None, PERF, min_machines=4).machines == 5
    with pytest.raises(ProvisionerError) as info:
        size_for_windows("baseline-a100", [[2], [3]], MODEL, None, PERF, min_machines=4)
    assert "above the static cluster's 3 machines" in str(info.value)
    with pytest.raises(ProvisionerError) as info:
        size_for_windows("baseline-a100", [], MODEL, None, PERF)
    assert str(info.value) == "windows must hold at least one trace (the sizing trace first)"


def test_a_request_no_machine_holds_is_named_not_blamed_on_the_slos(tmp_path, capsys):
    """A 5M-token prompt fits no H100 machine's KV cache: the sizing said no cluster of up
    to 1024 machines meets the SLOs and to loosen them, which no --slo-scale fixes."""
    from provisioner.cli import run

    trace = tmp_path / "kvbig.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n" + "".join(f"{i},500,20\n" for i in range(20))
                     + "20,5000000,10\n")
    code = run(["autoscale", "--workload", str(trace), "--profile", "diurnal", "--rps", "1", "--duration", "900",
                "--design", "baseline-h100", "--model", MODEL, "--slo-scale", "1000"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err
    assert err.startswith("error: baseline-h100: ") and err.endswith(
        "request(s) cannot be served: the largest needs 5,000,010 tokens of KV cache (1,638 GB of llama2-70b), a "
        "dgx-h100 holds at most 1,336,820 tokens after the weights; drop or truncate those requests, or use a model "
        "with a smaller KV cache")


def test_a_burst_the_day_plays_in_a_trough_is_sized_where_it_arrives(tmp_path):
    """A file quiet for 600 s (a request every 6 s), 400 requests in the next 120 s, then
    quiet, replayed over a day rising from 0.5 to 3 req/s in 1800 s and staying there 100 s:
    the day plays the burst near its start, at about 0.7 req/s, and its busiest 120 s hold
    430 requests (from 173 s). The file's busiest window at the peak rate (675 requests) sized
    the static cluster as if the burst came at the peak: 7 H100 machines and a 79% "saving",
    where 3 meet every SLO all day."""
    arrival = np.concatenate([6.0 * np.arange(100), 600 + 0.3 * np.arange(400), 720 + 6.0 * np.arange(1600)])
    obj, _ = _autoscale_replayed_day(tmp_path, arrival, "0,0.5\n1800,3\n1900,3\n",
                                     "--design", "baseline-h100", "--model", MODEL, "--sizing-duration", "120")
    day = TraceGenerator.from_json(obj["trace"]).with_profile(RateProfile.from_json(obj["profile"]))
    start = int(np.searchsorted(day.arrival_s, obj["sizing"]["start_s"]))
    assert day.arrival_s[start] == obj["sizing"]["start_s"] < 600   # in the day, where the rate is under 1 req/s
    assert obj["sizing"]["requests"] == 430 and obj["sizing"]["rps"] == pytest.approx(430 / 120)
    # no 120 s of the day holds more
    assert (np.searchsorted(day.arrival_s, day.arrival_s + 120.0) - np.arange(len(day))).max() == 430
    assert obj["static"]["machines"] == 3 and obj["static"]["slo"]["met"]
    assert obj["capacity_rps"] == pytest.approx(430 / 120 / 3)


def test_cli_diurnal_day_saves_at_equal_slos():
    """The issue's case: a 24-hour diurnal day (peak 3x the trough); the static cluster
    is sized for the peak by the search's evaluator."""
    res = runner.invoke(get_app(), ["autoscale", "--profile", "diurnal", "--rps", "4", "--design",
                                    "baseline-a100", "--model", MODEL, "--json"])
    assert res.exit_code == 0, res.output
    obj = json.loads(res.stdout)
    assert obj["static"]["slo"]["met"] and obj["autoscaled"]["slo"]["met"]
    assert obj["saving_pct"] > 10
    assert obj["static"]["machine_hours"] == pytest.approx(24 * obj["static"]["machines"])


@pytest.mark.parametrize("args, message", [
    (["--profile", "{bad}"], ":3: column 2 (rps): 'x'"),
    (["--profile", "diurnal"], "--profile diurnal needs its peak rate"),
    (["--profile", "nope.csv"], "neither a file nor 'diurnal'"),
    (["--profile", "diurnal", "--rps", "2", "--scale-in-load", "0.9"], "--scale-in-load < --target-load"),
    # were internal errors (exit 1): a division by the capacity before any check
    (["--profile", "diurnal", "--rps", "2", "--capacity-rps", "0"], "--capacity-rps must be a finite number > 0"),
    (["--profile", "diurnal", "--rps", "2", "--capacity-rps", "nan"], "--capacity-rps must be a finite number > 0"),
    # named --duration, a flag the user did not give
    (["--profile", "diurnal", "--rps", "2", "--sizing-duration", "0"], "--sizing-duration must be > 0"),
    # was "out of memory while simulating ... --max-machines": one decision per interval
    (["--profile", "diurnal", "--rps", "2", "--interval-s", "1e-6"], "raise --interval-s to at least 0.0864 s"),
    # ran for hours: the controller kept a Python list entry per machine (10**8 of them) and tick
    (["--profile", "diurnal", "--rps", "2", "--static-machines", "100000000"],
     "--static-machines must be an integer in [1, 100000]"),
    (["--profile", "diurnal", "--rps", "2", "--static-machines", "90000"], "lower --static-machines"),
    # were internal errors (exit 1): integers too large for a float or an index
    (["--profile", "diurnal", "--rps", "2", "--static-machines", str(10 ** 400)], "a 401-digit integer"),
    (["--profile", "diurnal", "--rps", "2", "--min-machines", "99999999999999999999"],
     "--min-machines must be a whole number in [1, 100000]"),
    (["--profile", "diurnal", "--rps", "2", "--capacity-rps", "1e-9"], "give a larger --capacity-rps"),
    # said "lower the rate or shorten the duration" (--duration was 900 s)
    (["--profile", "diurnal", "--rps", "2", "--duration", "900", "--sizing-duration", "1e9"],
     "--sizing-duration 1e+09: the sizing trace at the peak (2 req/s) would hold 2e+09 requests, more than a trace "
     "holds (10,000,000); shorten --sizing-duration"),
    # was accepted: the autoscaled cluster never went below 5 machines, 4 static, a -25% "saving"
    (["--profile", "diurnal", "--rps", "2", "--static-machines", "4", "--min-machines", "5"],
     "--min-machines 5 is above the static cluster's 4 machines (--static-machines): the autoscaled cluster "
     "could never be smaller; give --min-machines of at most 4 or raise --static-machines"),
    # was refused only after sizing the static cluster at the peak (which gives at most 1024)
    (["--profile", "diurnal", "--rps", "2", "--min-machines", "1025"],
     "--min-machines 1025 is above the largest static cluster autoscale sizes for the peak (1024 machines): the "
     "autoscaled cluster could never be smaller; give --min-machines of at most 1024, or give --static-machines"),
    (["--profile", ""], "--profile is empty"),   # was ": cannot read the rate profile (No such file ...)"
    # said "raise --rps or --duration", neither given: the profile's rates were the cause
    (["--profile", "diurnal", "--rps", "1e-9"], "raise the profile's rates"),
])
def test_cli_bad_input_is_one_line_exit_2(tmp_path, args, message):
    from provisioner.cli import run

    bad = tmp_path / "bad.csv"
    bad.write_text("time_s,rps\n0,2\n60,x\n")
    args = [a.replace("{bad}", str(bad)) for a in args]
    import contextlib
    import io
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = run(["autoscale", "--design", "baseline-a100", *args])
    assert code == 2
    from provisioner.sim import COMPILING_MESSAGE   # a first run's notice (a cold JIT cache), not the error
    lines = [line for line in err.getvalue().strip().splitlines() if line != COMPILING_MESSAGE]
    assert len(lines) == 1 and message in lines[0], lines


def test_cli_report_never_overwrites_without_force_nor_an_input(tmp_path):
    """Was: --report replaced any existing file, the --workload trace included (exit 0)."""
    from provisioner.cli import run

    kept, trace = tmp_path / "day.html", tmp_path / "trace.csv"
    kept.write_text("keep me")
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n0,100,10\n1,100,10\n2,100,10\n")
    base = ["autoscale", "--design", "baseline-a100", "--profile", "diurnal", "--rps", "2", "--duration", "3600",
            "--sizing-duration", "30", "--static-machines", "2"]
    import contextlib
    import io
    for extra, words in (([ "--report", str(kept)], "pass --force"),
                         (["--workload", str(trace), "--report", str(trace), "--force"], "input")):
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            assert run([*base, *extra]) == 2
        lines = err.getvalue().strip().splitlines()
        assert len(lines) == 1 and words in lines[0], lines
    assert kept.read_text() == "keep me" and trace.read_text().startswith("arrival_s,")
    assert runner.invoke(get_app(), [*base, "--report", str(kept), "--force", "--json"]).exit_code == 0
    assert kept.read_text().startswith("<")


def test_static_cluster_is_the_fewest_machines_meeting_the_slos_at_the_peak():
    from provisioner.autoscale import size_for_peak
    from provisioner.slo import SLO

    peak = TraceGenerator("coding", 300, seed=0).at(4.0)
    n = size_for_peak("baseline-a100", peak, MODEL, SLO(), PERF)
    rows = simulate([make_design("baseline-a100", machines=k) for k in (n - 1, n)], peak, MODEL, perf=PERF)
    assert rows["slo_met"].tolist() == [False, True]


def test_a_floor_above_the_sized_static_cluster_is_refused_naming_the_static_count(monkeypatch):
    """--min-machines above the sized static cluster was refused only once the sizing had
    scored its batch of 32 counts (half a minute in the discrete-event engine). The count
    min_machines - 1 is scored first: when it meets the SLOs the counts below it, one batch,
    find the static cluster, and the refusal names it as the most the floor may be (the
    early refusal said only "give a lower min_machines"); when it does not the sizing
    answers as it does without a floor."""
    from provisioner.autoscale import size_for_peak
    from provisioner.slo import SLO

    gen = TraceGenerator("coding", 300, seed=0)
    n = size_for_peak("baseline-a100", gen.at(4.0), MODEL, SLO(), PERF)
    assert size_for_peak("baseline-a100", gen.at(4.0), MODEL, SLO(), PERF, min_machines=n) == n
    floor = AutoscalePolicy(interval_s=300.0, window_s=300.0, min_machines=n + 3)
    import provisioner.search

    scored = []   # the designs each Evaluator call is given: the sizing's batch of 32 is not among them

    class CountingEvaluator(provisioner.search.Evaluator):
        def __call__(self, designs, *args, **kwargs):
            scored.append(len(designs))
            return super().__call__(designs, *args, **kwargs)

    monkeypatch.setattr(provisioner.search, "Evaluator", CountingEvaluator)
    with pytest.raises(ProvisionerError) as refused:
        autoscale("baseline-a100", gen.with_profile(two_levels((1.0, 4.0))), gen.at(4.0), MODEL, floor, perf=PERF)
    assert str(refused.value) == (f"min_machines {n + 3} is above the static cluster's {n} machines (the fewest "
                                  f"meeting the SLOs on the sizing trace): the autoscaled cluster could never be "
                                  f"smaller; give min_machines of at most {n}")
    assert refused.value.params == ("min_machines",)   # no static_machines was given: the fix is the floor
    assert scored == [1, n + 2]   # min_machines - 1 alone, then the counts 1..min_machines - 1


def test_a_floor_above_any_sized_static_cluster_is_refused_before_any_simulation():
    gen = TraceGenerator("coding", 300, seed=0)
    floor = AutoscalePolicy(interval_s=300.0, window_s=300.0, min_machines=1025)
    with pytest.raises(ProvisionerError, match=r"^min_machines 1025 is above the largest static cluster autoscale "
                                               r"sizes for the peak \(1024 machines\)"):
        autoscale("baseline-a100", gen.with_profile(two_levels()), gen.at(3.0), MODEL, floor, perf=PERF)


def test_cli_is_reproducible_and_writes_the_report(tmp_path):
    profile = tmp_path / "rate.csv"
    profile.write_text("time_s,rps\n0,1\n600,2\n1200,1\n")
    args = ["autoscale", "--profile", str(profile), "--design", "baseline-h100", "--model", MODEL,
            "--arrival", "gamma", "--cv", "3", "--seed", "7", "--json"]
    first = runner.invoke(get_app(), args + ["--report", str(tmp_path / "day.html")])
    second = runner.invoke(get_app(), args)
    assert first.exit_code == 0 and second.exit_code == 0, first.output
    assert first.stdout == second.stdout
    assert json.loads(first.stdout)["trace"]["arrival"] == "gamma"
    html = (tmp_path / "day.html").read_text()
    assert "plotly" in html and "machines (serving or loading)" in html
    # the saved answer drawn later is the same page, byte for byte (was: plotly's random div id)
    (tmp_path / "day.json").write_text(first.stdout)
    drawn = runner.invoke(get_app(), ["report", str(tmp_path / "day.json"), "--out", str(tmp_path / "later.html")])
    assert drawn.exit_code == 0 and (tmp_path / "later.html").read_text() == html, drawn.output


def test_cli_takes_a_measured_latency_profile(tmp_path):
    from pathlib import Path

    import perfmodels

    measured = Path(perfmodels.__file__).parent / "data" / "llama2-70b_dgx.csv"   # the shipped copy
    profile = tmp_path / "rate.csv"
    profile.write_text("time_s,rps\n0,1\n600,2\n")
    res = runner.invoke(get_app(), ["autoscale", "--profile", str(profile), "--design", "baseline-h100", "--model",
                                    MODEL, "--latency-profile", str(measured), "--latency-interp", "splitwisesim",
                                    "--json"])
    assert res.exit_code == 0, res.output
    obj = json.loads(res.stdout)
    assert obj["latency_model"]["kind"] == "profile" and obj["latency_model"]["interp"] == "splitwisesim"


@pytest.mark.parametrize("scheduler", ["llumnix", "splitwisesim"])
def test_on_demand_schedulers_honour_availability_windows(scheduler):
    """Freeness dispatch and migration send nothing to a server after its window closes:
    it drains what it holds, long before the servers that stay on. So does SplitwiseSim's
    token_jsq (was: it read no window, and autoscale --scheduler splitwisesim ran its day
    on every machine ever started, all open from 0 s to the end)."""

    trace = TraceGenerator("conversation", 90.0, seed=0).at(6.0)
    design = make_design("baseline-h100", machines=3, scheduler=scheduler)
    closes = np.array([np.inf, np.inf, 20.0])
    _, drained = simulate_scaled(design, trace, "bloom-176b", np.zeros(3), closes, engine="des")
    _, always = simulate_scaled(design, trace, "bloom-176b", np.zeros(3), np.full(3, np.inf), engine="des")
    assert always.min() > 90.0                    # open all along: every server works to the end
    assert drained[2] < 0.7 * drained[:2].min()   # closed at 20 s: it only drains


def test_the_library_refuses_a_floor_above_the_static_cluster_by_its_parameters():
    """The Python API names min_machines, not the CLI's flag."""
    gen = TraceGenerator("coding", 300, seed=0)
    floor = AutoscalePolicy(interval_s=300.0, window_s=300.0, min_machines=5)
    with pytest.raises(ProvisionerError, match=r"^min_machines 5 is above the static cluster's 4 machines "
                                               r"\(static_machines\).*at most 4 or raise static_machines$"):
        autoscale("baseline-a100", gen.with_profile(two_levels()), gen.at(3.0), MODEL, floor, perf=PERF,
                  capacity_rps=1.0, static_machines=4)


def test_a_cost_over_the_static_cluster_is_not_a_negative_saving():
    """A flat day, on which the target load keeps more machines than the static cluster,
    read "autoscaling saves -16.0% of the cost (-16.0% of the machine-hours, ...)"."""
    from provisioner.autoscale import saving_parts, saving_text

    answer = {"saving_pct": -16.04, "machine_hours_saving_pct": -16.0, "energy_saving_pct": 2.5}
    assert saving_text(answer) == "costs 16.0% more than the static cluster"
    assert saving_parts(answer) == "16.0% more machine-hours, saves 2.5% of the energy"
    answer.update(saving_pct=39.2, machine_hours_saving_pct=39.0)
    assert (saving_text(answer), saving_parts(answer)) == \
        ("saves 39.2% of the cost", "39.0% of the machine-hours, 2.5% of the energy")
    answer.update(saving_pct=-0.04, machine_hours_saving_pct=-0.0)   # as printed: no "costs 0.0% more", no "-0.0%"
    assert (saving_text(answer), saving_parts(answer)) == \
        ("saves 0.0% of the cost", "0.0% of the machine-hours, 2.5% of the energy")
    answer.update(saving_pct=3.0, machine_hours_saving_pct=-2.0)   # a saving after "more" says so
    assert saving_parts(answer) == "2.0% more machine-hours, saves 2.5% of the energy"


def test_a_saving_that_misses_the_slos_says_so():
    """A day whose autoscaled cluster misses its SLOs read "autoscaling saves 39.2% of the
    cost", and the report's title likewise, with no word of the miss."""
    from provisioner.autoscale import measures_text, saving_caveat
    from reports import build_autoscale_html

    met, missed = {"met": True, "binding": "none"}, {"met": False, "binding": "ttft_p50"}
    answer = {"family": "baseline-h100", "duration_s": 3600.0, "saving_pct": 39.2, "scale_on": "rate",
              "static": {"machines": 3, "slo": met}, "autoscaled": {"slo": missed},
              "timeline": {"time_s": [60.0], "observed_rps": [1.0], "machines": [1]}}
    caveat = ", but the autoscaled day misses the SLOs (ttft_p50) the static day meets"
    assert saving_caveat(answer) == caveat
    assert f"Autoscaling baseline-h100: saves 39.2% of the cost{caveat}" in build_autoscale_html(answer)
    answer["static"]["slo"] = {"met": False, "binding": "tbt_p99"}
    assert saving_caveat(answer) == ", but both days miss the SLOs (autoscaled: ttft_p50; static: tbt_p99)"
    answer["autoscaled"]["slo"] = met   # a saving over a static day that misses the SLOs is qualified too
    assert saving_caveat(answer) == ", where the static day misses the SLOs (tbt_p99) the autoscaled day meets"
    answer["static"]["slo"] = met
    assert saving_caveat(answer) == ""
    assert [measures_text(by) for by in (["requests"], ["requests", "output_tokens"],
                                          ["requests", "prompt_tokens", "output_tokens"])] == \
        ["requests", "requests and output tokens", "requests, prompt tokens and output tokens"]
