"""Closed-loop autoscaling (`--scale-on freeness|queue`): the controller's arithmetic on a
hand-built cluster state, its invariants inside the discrete-event engine, and the CLI."""

from __future__ import annotations

import contextlib
import io
import json
from collections import deque
from types import SimpleNamespace

import numpy as np
import pytest

from perfmodels import LatencyModel
from provisioner.autoscale import SCALE_IN_FACTOR, AutoscalePolicy, autoscale
from provisioner.cli import run
from provisioner.designs import make_design
from provisioner.errors import ProvisionerError
from provisioner.sim import ScalingControl, build_inputs, simulate_controlled
from provisioner.sim.testing import ScalingController as Controller
from provisioner.sim.testing import DesOnDemandMachine, des_simulate_design
from workloads import RateProfile, Trace, TraceGenerator

PERF = LatencyModel()
MODEL = "bloom-176b"


# -- the controller on a hand-built state ---------------------------------------------
class StubMachine(SimpleNamespace):
    """An on-demand server's state, read through the on-demand machine's own `usage` (V, B)."""
    usage = DesOnDemandMachine.usage


def stub_cluster(slots: int, kv_cap: float = 1000.0):
    """A cluster of idle on-demand-like servers (one per machine) whose state the test sets."""
    machines = [StubMachine(prompt_q=deque(), wait_q=deque(), busy=False, start_pending=False, running=0,
                            incoming=0, ctx=0, pf_kv=0, high=0, queued_kv=0, prefilling=(), swapped=[])
                for _ in range(slots)]
    return SimpleNamespace(machines=machines, kv_cap=np.full(slots, kv_cap), window=np.full((slots, 2), np.inf),
                           last_end_s=[0.0] * slots, windows_changed=lambda: None)


def control(metric="queue", out=2.0, into=0.5, **kw):
    args = dict(interval_s=10.0, startup_s=30.0, min_machines=1, max_machines=3, initial_machines=1,
                servers_per_machine=1, horizon_s=120.0, calm_s=20.0)
    args.update(kw)
    return ScalingControl(metric, out, into, **args)


def test_queue_controller_by_hand():
    """Five prompts wait on the one machine for the first 10 s: the tick at 10 s reads a
    mean of 5 per machine > 2 and starts ceil(5 / 2) - 1 = 2 machines (paid from 10 s,
    serving from 40 s). Then the queue is empty: no stop while they load; from 40 s one
    machine fewer would do, so after the 20-s calm the newest stops at 60 s and the next
    at 80 s; the minimum (1) stays. The one stopped at 60 s ran an iteration until 65 s:
    released then; the other, idle, at its stop. Machine-hours: (120 + 70 + 55) s."""
    cl = stub_cluster(6)
    ctl = Controller(cl, control())
    assert cl.window[0].tolist() == [0.0, np.inf] and np.isinf(cl.window[1:]).all()
    cl.machines[0].prompt_q.extend(range(5))
    ctl.advance(10.0)
    assert [r[:3] for r in ctl.records] == [[0.0, 0.0, np.inf], [10.0, 40.0, np.inf], [10.0, 40.0, np.inf]]
    assert cl.window[1].tolist() == [40.0, np.inf]     # routing takes it only once loaded
    cl.machines[0].prompt_q.clear()
    ctl.advance(64.0)
    assert ctl.records[2][2] == 60.0 and ctl.records[1][2] == np.inf
    assert cl.window[2].tolist() == [40.0, 60.0]
    cl.last_end_s[2] = 65.0                             # its last iteration (drain) ended at 65 s
    ctl.finish()
    assert [r[2] for r in ctl.records] == [np.inf, 80.0, 60.0]
    assert [r[3] for r in ctl.records] == [np.inf, 80.0, 65.0]
    assert [m for _, _, m in ctl.ticks] == [3, 3, 3, 3, 3, 2, 2, 1, 1, 1, 1]
    assert ctl.events == 3
    paid_s = sum(min(r[3] if np.isfinite(r[2]) else 120.0, 120.0) - r[0] for r in ctl.records)
    assert paid_s == pytest.approx(120 + 70 + 55)


def test_freeness_controller_by_hand():
    """One machine of M = 1000 KV tokens holds V = 995 for B = 1 request: F = 5 decode steps
    < 10, so it starts max(1, ceil((10 x 1 + 995 - 1000) / 1000)) = 1 machine. Three
    requests at V = 2950 on two machines: F = (2000 - 2950) / 3 < 10 asks for
    ceil((30 + 2950 - 2000) / 1000) = 1 more."""
    cl = stub_cluster(6)
    ctl = Controller(cl, control("freeness", 10.0, 60.0, max_machines=3))
    cl.machines[0].ctx, cl.machines[0].running = 995, 1
    ctl.advance(10.0)
    assert ctl.ticks[0][:2] == (10.0, 5.0) and len(ctl.live) == 2
    cl.machines[1].ctx, cl.machines[1].running = 1955, 2
    ctl.advance(40.0)      # the new machine serves from 40 s; its state enters the samples from then
    ctl.advance(50.0)
    assert len(ctl.live) == 3 and ctl.records[2][0] == 50.0


def test_past_the_horizon_the_engine_stops_calling():
    """Once the samples and ticks reach the horizon, `next_due_s` is infinite (the engine calls
    `advance` only at t >= next_due_s), and `finish` still releases what drained."""
    cl = stub_cluster(6)
    ctl = Controller(cl, control(initial_machines=2, calm_s=0.0))
    ctl.advance(119.0)
    assert ctl.next_due_s == 120.0
    ctl.advance(130.0)
    assert ctl.next_due_s == np.inf and len(ctl.ticks) == 11
    ctl.finish()
    assert len(ctl.ticks) == 11 and not ctl.draining and ctl.next_due_s == np.inf


def test_a_draining_machine_with_work_is_not_released():
    cl = stub_cluster(6)
    ctl = Controller(cl, control(initial_machines=2, calm_s=0.0))
    ctl.advance(10.0)                          # empty queues: the newest of two stops at once
    assert ctl.records[1][2] == 10.0
    cl.machines[1].running = 1                 # still decoding what it held
    ctl.advance(30.0)
    assert ctl.records[1][3] == np.inf and ctl.draining
    cl.machines[1].running, cl.last_end_s[1] = 0, 33.5
    ctl.advance(40.0)
    assert ctl.records[1][3] == 33.5 and not ctl.draining


# -- inside the discrete-event engine -------------------------------------------------
def test_two_levels_in_the_engine_by_hand():
    """Every iteration takes 1 s and carries one 1500-token prompt (batch cap 2048) of one
    output token: a machine serves exactly 1 req/s. 0.5 req/s until 60 s never queues.
    3 req/s from 60 s to 90 s queue 2 (k - 60) prompts at second k on the one machine, one
    more in service: the tick at 70 s reads a mean of 11 + 1 = 12 > 2 requests per machine and
    starts min(ceil(12 / 2) - 1, 3 - 1) = 2 machines (paid from 70 s, serving from 90 s: 20-s
    start-up). The backlog of 60 stays where it was routed and drains at 1 per second until
    150 s (150 - k queued at second k, one in service), so ticks keep asking for more (at the
    maximum) until the 150-s tick's mean of 4.5 + 1 over three machines; from 160 s one
    machine fewer would do, so after 30 s of calm the newest stops at
    190 s, the next at 220 s, and the one at the minimum stays. The request at 100 s goes
    to the first new machine (least work), never to one before 90 s. Paid, to the 300-s
    horizon: 300 + (220 - 70) + (190 - 70) = 570 machine-seconds."""
    from test_scheduler import unit_inputs

    arrivals = np.concatenate([np.arange(0.0, 60.0, 2.0), 60.0 + np.arange(90) / 3.0, [100.0]])
    inputs = unit_inputs(1e6, arrivals, np.full(len(arrivals), 1500), np.ones(len(arrivals), np.int64),
                         scheduler="least-work", machines=6)
    ctl = ScalingControl("queue", 2.0, 0.5, 10.0, 20.0, 1, 3, 1, 1, 300.0, calm_s=30.0)
    import dataclasses
    cl = des_simulate_design(dataclasses.replace(inputs, scaling=ctl), 0)
    rec = [r[:4] for r in cl.controller.records]
    assert rec == [[0.0, 0.0, np.inf, np.inf], [70.0, 90.0, 220.0, 220.0], [70.0, 90.0, 190.0, 190.0]]
    queued = [m for t, m, _ in cl.controller.ticks if t in (70.0, 150.0)]
    assert queued == [12.0, pytest.approx(5.5 / 3)]   # tick 70: 12 on one machine; tick 150: 5.5 over three
    assert cl.prefill_on[-1] == 1 and cl.finish[-1] == 101.0
    assert max(cl.finish[:-1]) == 150.0 and all(p == 0 for p in cl.prefill_on[:-1])
    paid_s = sum(min(r[3], 300.0) - r[0] for r in rec)
    assert paid_s == 570.0


def two_level_trace(high_rps=3.0, low_rps=0.2, high_s=300.0, low_s=900.0, seed=0):
    """Deterministic arrivals: evenly spaced at high_rps, then at low_rps; coding sizes."""
    arrivals = np.concatenate([np.arange(0.0, high_s, 1.0 / high_rps), high_s + np.arange(0.0, low_s, 1.0 / low_rps)])
    sizes = TraceGenerator("coding", 60, seed=seed).at(len(arrivals) / 60.0)
    return Trace(arrivals, sizes.prompt_tokens[:len(arrivals)], sizes.output_tokens[:len(arrivals)], "two-levels",
                 high_s + low_s)


def run_engine(trace, ctl, scheduler="least-work"):
    import dataclasses

    design = make_design("baseline-a100", machines=ctl.slots, scheduler=scheduler)
    from provisioner.designs import DesignBatch
    inputs = build_inputs(DesignBatch.from_designs([design]), trace, PERF.llm(MODEL), PERF)
    return des_simulate_design(dataclasses.replace(inputs, scaling=ctl), 0)


@pytest.mark.parametrize("scheduler", ["least-work", "llumnix-dispatch"])
def test_engine_keeps_the_rules(scheduler):
    """3 req/s overloads the one machine it starts with, so machines are added; at 0.2 req/s
    they are stopped again. No request goes to a machine before it serves or after it
    stopped; a machine is released only after its last request finished; the minimum holds."""
    trace = two_level_trace()
    ctl = ScalingControl("queue", 2.0, 0.5, 10.0, 60.0, 1, 4, 1, 1, trace.duration_s, calm_s=60.0)
    cl = run_engine(trace, ctl, scheduler)
    rec = np.array(cl.controller.records)
    assert (rec[1:, 0] > 0).all() and np.isfinite(rec[1:, 2]).any()    # it scaled out and back in
    assert (rec[:, 1] - rec[:, 0] == np.where(rec[:, 0] > 0, 60.0, 0.0)).all()   # the weight load
    for r, a in enumerate(trace.arrival_s):
        lives = rec[rec[:, 4] == cl.prefill_on[r]]
        assert ((lives[:, 1] <= a) & (a < lives[:, 2])).any(), (r, a, lives)
    for life in rec[np.isfinite(rec[:, 2])]:
        served = [r for r, a in enumerate(trace.arrival_s) if cl.prefill_on[r] == life[4] and life[1] <= a < life[2]]
        assert life[3] >= max([life[2]] + [cl.finish[r] for r in served])
    ticks = np.array(cl.controller.ticks)
    serving = [sum(1 for b, f, u, *_ in rec if f <= t < u) for t in ticks[:, 0]]
    assert min(serving) >= 1 and ticks[:, 2].max() <= 4
    assert not np.isnan(cl.finish).any()


@pytest.mark.parametrize("metric", ["freeness", "queue"])
def test_closed_loop_day_with_default_thresholds_saves_at_met_slos(metric):
    """A 4-hour diurnal cosine (3x peak over trough) at a peak of 3 req/s, the thresholds
    left `auto` (calibrated on the cluster sized for the peak). The 4-h profile spans the
    cosine's trough..peak from its first hours: the peak at both ends, a third of it in the
    middle. The controller scales in for the trough and out again to the static count for
    the closing peak, meets every SLO, and pays fewer machine-hours than the static cluster."""
    from workloads import diurnal_profile

    gen = TraceGenerator("coding", 600, seed=0)
    profile = diurnal_profile(3.0, 4 * 3600.0)
    policy = AutoscalePolicy(scale_on=metric, interval_s=10.0, window_s=300.0)
    assert policy.thresholds_auto
    r = autoscale("baseline-a100", gen.with_profile(profile), gen.at(profile.peak_rps), MODEL, policy, perf=PERF,
                  engine="des")
    assert r.static.row["slo_met"] and r.autoscaled.row["slo_met"]
    assert r.autoscaled.machine_hours < 0.95 * r.static.machine_hours
    j = r.to_json()
    assert j["scale_on"] == metric and j["scaling_events"] >= 2
    assert j["policy"]["thresholds"]["source"] == "auto"
    out, into = j["policy"][f"scale_out_{metric}"], j["policy"][f"scale_in_{metric}"]
    cal = j["policy"]["thresholds"]
    if metric == "freeness":   # out: the 10th percentile of the peak readings, in: 1.5x it
        assert 0 < out <= cal["peak_median"] and into == pytest.approx(out * SCALE_IN_FACTOR)
    else:                      # out: the 90th percentile, in: out / 1.5
        assert out >= cal["peak_median"] > 0 and into == pytest.approx(out / SCALE_IN_FACTOR)
    t_h, machines = np.array(j["timeline"]["time_s"]) / 3600.0, np.array(j["timeline"]["machines"])
    assert machines[(t_h > 1.5) & (t_h < 2.5)].min() < r.static_machines   # scaled in for the trough
    assert machines[t_h > 3.5].max() == r.static_machines                  # and out again for the peak


def test_calibration_reads_the_controllers_freeness_by_hand():
    """Two machines of M1 = 1000 KV tokens; requests of s + n = 100 tokens, one arriving
    every 2 s and staying 5 s: in each 10-s interval after the warm-up the system holds
    B = 2.5 requests and V = 250 tokens on average, so every reading is (2000 - 250) / 2.5
    = 700 decode steps; out at 700, in at 1.5 x 700."""
    from provisioner.autoscale import calibrate

    arrivals = np.arange(0.0, 200.0, 2.0)
    trace = Trace(arrivals, np.full(len(arrivals), 60), np.full(len(arrivals), 40), "hand", 200.0)
    cal = calibrate("freeness", trace, arrivals + 1.0, arrivals + 5.0, 2, 1000.0, 10.0, on_demand=False)
    assert cal.median == pytest.approx(700.0)
    assert cal.scale_out == pytest.approx(700.0) and cal.scale_in == pytest.approx(700.0 * SCALE_IN_FACTOR)
    assert cal.intervals == 18    # 20 s of warm-up (10% of 200 s) left out
    assert cal.interval_s == 10.0 and cal.to_json()["interval_s"] == 10.0
    queue = calibrate("queue", trace, arrivals + 1.0, arrivals + 5.0, 2, 1000.0, 10.0, on_demand=False)
    assert queue.scale_out == pytest.approx(1.25) and queue.scale_in == pytest.approx(1.25 / SCALE_IN_FACTOR)


def test_fluid_engine_declines_in_one_line():
    trace = two_level_trace(high_s=30.0, low_s=30.0)
    ctl = ScalingControl("queue", 2.0, 0.5, 10.0, 60.0, 1, 2, 1, 1, trace.duration_s)
    with pytest.raises(ProvisionerError, match="fluid simulator cannot run closed-loop"):
        simulate_controlled(make_design("baseline-a100", machines=4), trace, MODEL, ctl, engine="fluid", perf=PERF)


# -- the command ----------------------------------------------------------------------
def cli(args):
    """`provision autoscale` with a design and a model unless `args` gives its own (an option
    is given once)."""
    defaults = [x for flag, value in (("--design", "baseline-a100"), ("--model", MODEL)) if flag not in args
                for x in (flag, value)]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = run(["autoscale", *defaults, *args])
    return code, out.getvalue(), err.getvalue()


def test_cli_closed_loop_json(tmp_path):
    profile = tmp_path / "rate.csv"
    profile.write_text("time_s,rps\n0,0.5\n600,2\n")
    code, out, err = cli(["--profile", str(profile), "--duration", "1200", "--scale-on", "queue",
                          "--static-machines", "4", "--json", "--report", str(tmp_path / "day.html")])
    assert code == 0, err
    obj = json.loads(out)
    assert obj["engine"] == "des" and obj["scale_on"] == "queue" and obj["policy"]["scale_on"] == "queue"
    assert obj["policy"]["interval_s"] == 10.0 and isinstance(obj["scaling_events"], int)
    for side in ("static", "autoscaled"):
        assert {"machine_hours", "cost_usd", "energy_kwh", "slo"} <= set(obj[side])
    assert "requests_per_machine" in obj["timeline"] and "saving_pct" in obj
    assert obj["policy"]["thresholds"]["source"] == "auto" and obj["policy"]["scale_out_queue"] > 0
    assert "requests queued or in service per machine" in (tmp_path / "day.html").read_text()


@pytest.mark.parametrize("args, message", [
    (["--scale-on", "load"], "--scale-on must be one of rate, freeness, queue"),
    (["--scale-on", "freeness", "--scale-out-freeness", "80", "--scale-in-freeness", "60"],
     "--scale-out-freeness must be below --scale-in-freeness"),
    (["--scale-on", "freeness", "--scale-out-freeness", "lots"], "--scale-out-freeness must be a number or auto"),
    (["--scale-on", "freeness", "--scale-in-freeness", "inf"], "--scale-in-freeness must be a finite number"),
    (["--scale-on", "freeness", "--scale-out-freeness", "-5"], "with the other freeness threshold auto"),
    (["--scale-on", "queue", "--scale-in-queue", "-1", "--scale-out-queue", "2"],
     "0 <= --scale-in-queue < --scale-out-queue"),
    (["--scale-on", "queue", "--scale-in-queue", "-1"], "with the other queue threshold auto"),
    (["--scale-on", "queue", "--scale-out-queue", "many"], "--scale-out-queue must be a number or auto"),
    (["--scale-on", "queue", "--max-machines", "0"], "--max-machines must be a whole number >= --min-machines"),
    # were "--machines must be 1-100,000 (got 2000000000)", a flag autoscale does not have, after the sizing
    (["--scale-on", "queue", "--max-machines", "1000000000"], "--max-machines must be at most 50,000"),
    (["--scale-on", "freeness", "--min-machines", "60000"], "--min-machines must be at most 50,000"),
    (["--scale-out-freeness", "5"], "--scale-out-freeness is read by --scale-on freeness, not rate"),
    (["--scale-on", "freeness", "--scale-out-load", "0.9"], "--scale-out-load is read by --scale-on rate, not freeness"),
    # was "--max-machines is a threshold of --scale-on freeness", and queue reads it too
    (["--max-machines", "5"], "--max-machines is read by --scale-on freeness or queue, not rate"),
    (["--scale-on", "queue", "--engine", "fluid"], "the fluid simulator cannot run closed-loop autoscaling"),
    (["--scale-on", "freeness", "--design", "splitwiser-a100"], "use --scale-on rate for splitwiser-a100"),
    (["--design", "baseline-h100", "--scheduler", "splitwisesim", "--scale-on", "queue", "--scale-out-queue", "5",
      "--scale-in-queue", "1"], "--scale-on queue cannot run under --scheduler splitwisesim"),
])
def test_cli_bad_policy_is_one_line_exit_2(args, message):
    code, _, err = cli(["--profile", "diurnal", "--rps", "2", "--duration", "900", "--static-machines", "2", *args])
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and message in lines[0], lines


@pytest.mark.parametrize("fields, message", [
    (dict(scale_on="load"), "scale_on must be one of rate, freeness, queue (got 'load')"),
    (dict(min_machines=0), "min_machines must be a whole number in [1, 100000] (got 0)"),
    (dict(scale_in_load=0.9), "the loads must satisfy scale_in_load < target_load <= scale_out_load"),
    (dict(scale_on="freeness", scale_out_freeness=80.0, scale_in_freeness=60.0),
     "scale_out_freeness must be below scale_in_freeness"),
    (dict(scale_on="queue", max_machines=0), "max_machines must be a whole number >= min_machines (1)"),
])
def test_the_policy_names_its_python_fields(fields, message):
    """AutoscalePolicy said '--scale-on', '--min-machines', ...: flags a Python caller does not
    have (the CLI says them, above, from the error's params)."""
    with pytest.raises(ProvisionerError) as info:
        AutoscalePolicy(**fields)
    assert str(info.value).startswith(message) and "--" not in str(info.value), info.value


def freeness_json(*args):
    code, out, err = cli(["--profile", "diurnal", "--rps", "3", "--duration", "1200", "--scale-on", "freeness",
                          "--json", *args])
    assert code == 0, err
    return json.loads(out)["policy"]


def test_calibrated_thresholds_follow_the_model():
    """At the same load and on the same machine, BLOOM-176B (no grouped-query attention: a
    DGX-A100 holds ~56k of its KV tokens) leaves far less free KV per request than
    Llama-2-70B (8 KV heads of 64), so its calibrated thresholds are lower: they come from
    the model's memory, not from a constant."""
    bloom, llama = freeness_json(), freeness_json("--model", "llama2-70b")
    assert bloom["thresholds"]["source"] == llama["thresholds"]["source"] == "auto"
    assert bloom["scale_out_freeness"] < llama["scale_out_freeness"]
    assert bloom["scale_in_freeness"] < llama["scale_in_freeness"]
    for p in (bloom, llama):
        assert p["scale_in_freeness"] == pytest.approx(1.5 * p["scale_out_freeness"])


@pytest.mark.parametrize("args, out, into", [
    (["--scale-out-freeness", "10", "--scale-in-freeness", "60"], 10.0, 60.0),   # Llumnix's own, typed
    (["--scale-out-freeness", "40000"], 40000.0, 60000.0),                        # the other by the factor
    (["--scale-in-freeness", "AUTO", "--scale-out-freeness", "300"], 300.0, 450.0),
])
def test_explicit_freeness_thresholds_are_honoured(args, out, into):
    p = freeness_json("--static-machines", "3", *args)
    assert (p["scale_out_freeness"], p["scale_in_freeness"]) == (out, into)
    assert p["thresholds"] == {"source": "given"}


def test_explicit_queue_thresholds_are_honoured():
    code, out, err = cli(["--profile", "diurnal", "--rps", "3", "--duration", "1200", "--scale-on", "queue",
                          "--static-machines", "3", "--scale-out-queue", "2", "--scale-in-queue", "0.5", "--json"])
    assert code == 0, err
    p = json.loads(out)["policy"]
    assert (p["scale_out_queue"], p["scale_in_queue"], p["thresholds"]) == (2.0, 0.5, {"source": "given"})


def test_summary_names_the_calibration_interval():
    """The thresholds line names the readings' length as run (--interval-s), not a fixed 10 s."""
    code, out, err = cli(["--profile", "diurnal", "--rps", "3", "--duration", "1200", "--scale-on", "queue",
                          "--static-machines", "3", "--interval-s", "20"])
    assert code == 0, err
    assert "static cluster's 20-s readings at the peak" in out and "10-s" not in out
    code, out, err = cli(["--profile", "diurnal", "--rps", "3", "--duration", "1200", "--scale-on", "queue",
                          "--static-machines", "3", "--interval-s", "20", "--json"])
    assert code == 0, err
    assert json.loads(out)["policy"]["thresholds"]["interval_s"] == 20.0


def test_run_closed_loop_refuses_unresolved_auto_thresholds():
    from provisioner.autoscale import run_closed_loop

    trace = two_level_trace(high_s=30.0, low_s=30.0)
    with pytest.raises(ProvisionerError, match="thresholds as numbers"):
        run_closed_loop("baseline-a100", trace, MODEL, AutoscalePolicy(scale_on="freeness"), PERF, None, "des", 2, 1,
                        {})
