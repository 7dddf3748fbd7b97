"""`provision autoscale`: a statically provisioned cluster (sized for the peak) against one
that scales machines in and out, over a rate profile (CONTRACTS.md, command 9)."""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path

import typer

from workloads import MAX_TRACE_REQUESTS, WINDOW_MEASURES, diurnal_profile, read_profile_csv

from ..errors import ProvisionerError
from ..schedulers import DEFAULT_SCHEDULER, scheduler_code
from ..sim import ENGINES, refuse_closed_loop_in_fluid
from ..slo import SLO
from ._common import (ARRIVAL_HELP, CV_HELP, DEFAULT_MODEL, DEFAULT_WORKLOAD, WORKLOAD_HELP, echo_json,
                      latency_interp_option, latency_model_json, latency_profile_option, load_latency_model,
                      refuse_idle_flags, refuse_idle_seed, given, scheduler_option, trace_generator, preemption_option,
                      check_preemption, swap_space_option, check_swap_space_flag, input_files, refuse_idle_force,
                      report_then_answer)

DIURNAL = "diurnal"
DEFAULT_SIZING_S = 600.0
CLOSED_LOOP_INTERVAL_S = 10.0   # Llumnix's SCALING_INTERVAL (its config/default.py)
# Flags that only one --scale-on reads: given with another, they would change nothing.
_POLICY_FLAGS = {"rate": ("scale_out_load", "scale_in_load"),
                 "freeness": ("scale_out_freeness", "scale_in_freeness", "max_machines"),
                 "queue": ("scale_out_queue", "scale_in_queue", "max_machines")}


def autoscale_command(
    ctx: typer.Context,
    profile: str = typer.Option(..., "--profile", metavar="RATE.csv|diurnal",
                                help="The load over time: a CSV with columns time_s,rps (piecewise-constant from "
                                     "each row's time) or 'diurnal' (24 h cosine, peak at 14:00 = 3x the trough "
                                     "at 02:00; its peak is --rps)."),
    design: str = typer.Option(..., "--design", help="A family with one pool: baseline-a100, baseline-h100, "
                                                     "splitwiser-a100, splitwiser-h100."),
    workload: str = typer.Option(DEFAULT_WORKLOAD, "--workload", help=WORKLOAD_HELP),
    rps: float = typer.Option(None, "--rps", help="The profile's peak rate (req/s): required for 'diurnal'; for a "
                                                  "CSV profile, rescales its rates to this peak."),
    duration: float = typer.Option(None, "--duration", help="The profile's length (s; default: 24 h for diurnal, "
                                                            "a CSV's rows with the last one as long as the gap "
                                                            "before it)."),
    model: str = typer.Option(DEFAULT_MODEL, "--model", help="Catalog model name."),
    seed: int = typer.Option(0, "--seed", help="Seed of the workload's random draws."),
    arrival: str = typer.Option(None, "--arrival", help=ARRIVAL_HELP),
    cv: float = typer.Option(2.0, "--cv", help=CV_HELP),
    engine: str = typer.Option("fluid", "--engine", help="fluid (fast) or des (exact reference; slow on a day; "
                                                         "the default under an on-demand --scheduler and with "
                                                         "--scale-on freeness or queue, which need it)."),
    slo_scale: float = typer.Option(1.0, "--slo-scale", help="Multiply every SLO slowdown limit (looser > 1)."),
    static_machines: int = typer.Option(None, "--static-machines", help="The static cluster's size (default: the "
                                        "fewest machines meeting the SLOs on the sizing trace: see --sizing-duration)."),
    sizing_duration: float = typer.Option(DEFAULT_SIZING_S, "--sizing-duration",
                                          help="Length (s) of the trace the static cluster is sized on: a "
                                               "constant-rate one at the peak (a replayed --workload: the day's "
                                               "own busiest windows of this length, as the day plays them, by "
                                               "requests, prompt tokens and output tokens)."),
    capacity_rps: float = typer.Option(None, "--capacity-rps", help="Requests/s one machine carries, for the "
                                       "controller (default: the peak over the static machine count; a replayed "
                                       "--workload's peak is the rate of the busiest --sizing-duration window "
                                       "that set that count)."),
    scale_out_load: float = typer.Option(0.95, "--scale-out-load", help="Add machines when the observed rate "
                                         "exceeds this fraction of the capacity of the machines up or starting."),
    scale_in_load: float = typer.Option(0.7, "--scale-in-load", help="Stop machines when the rate would stay "
                                        "below this fraction of the capacity of one machine fewer."),
    target_load: float = typer.Option(0.85, "--target-load", help="The load a scaling step aims at."),
    startup_s: float = typer.Option(120.0, "--startup-s", help="Weight loading: a started machine serves this "
                                                               "many seconds after the decision (paid from it)."),
    interval_s: float = typer.Option(None, "--interval-s", help="Seconds between scaling decisions (default 60 "
                                     "with --scale-on rate, 10 closed-loop: Llumnix's scaling interval)."),
    window_s: float = typer.Option(300.0, "--window-s", help="A decision looks at the arrivals of this many "
                                                             "seconds before it (closed-loop: the calm a scale-in "
                                                             "waits for, and between two stops)."),
    min_machines: int = typer.Option(1, "--min-machines", help="Never fewer serving machines."),
    scale_on: str = typer.Option("rate", "--scale-on", metavar="rate|freeness|queue",
                                 help="rate: plan from the observed arrival rate (both engines). freeness or "
                                      "queue: a closed-loop controller inside the discrete-event engine reads "
                                      "Llumnix's freeness (decode steps) or the requests queued or in service "
                                      "per machine, averaged over each interval."),
    scale_out_freeness: str = typer.Option("auto", "--scale-out-freeness", metavar="STEPS|auto",
                                           help="--scale-on freeness: add machines when the cluster's freeness "
                                                "(decode steps) falls below this. auto: the 10th percentile of the "
                                                "readings (one per --interval-s) of the static cluster at the peak, from the sizing "
                                                "run (where the SLOs hold). Llumnix's own 10 (for 7B models on "
                                                "24-GB GPUs) by typing it."),
    scale_in_freeness: str = typer.Option("auto", "--scale-in-freeness", metavar="STEPS|auto",
                                          help="--scale-on freeness: stop a machine when one fewer would stay above "
                                               "this. auto: 1.5x the scale-out level (Llumnix's 60 by typing it)."),
    scale_out_queue: str = typer.Option("auto", "--scale-out-queue", metavar="REQUESTS|auto",
                                        help="--scale-on queue: add machines when the requests queued or in service "
                                             "per machine exceed this. auto: the 90th percentile of the "
                                             "readings (one per --interval-s) of the static cluster at the peak, from the sizing run."),
    scale_in_queue: str = typer.Option("auto", "--scale-in-queue", metavar="REQUESTS|auto",
                                       help="--scale-on queue: stop a machine when one fewer would carry fewer "
                                            "requests per machine than this. auto: the scale-out level / 1.5."),
    max_machines: int = typer.Option(None, "--max-machines", help="Closed-loop: never more machines serving or "
                                     "loading (default: the static cluster's count)."),
    json_out: bool = typer.Option(False, "--json",
                                  help="Print the answer as one JSON object (its keys: provisioner/RESULT_SCHEMA.md)."),
    report: Path = typer.Option(None, "--report", readable=False, metavar="PATH.html",
                                help="Write rate and machines over time (both clusters) as an HTML page."),
    force: bool = typer.Option(False, "--force", help="Overwrite the --report file if it exists."),
    latency_profile: str = latency_profile_option(),
    latency_interp: str = latency_interp_option(),
    scheduler: str = scheduler_option(),
    preemption: str = preemption_option(),
    swap_space_gb: float = swap_space_option(),
) -> None:
    from ..autoscale import SCALE_ON, AutoscalePolicy, autoscale, check_floor

    if engine not in ENGINES:
        raise ProvisionerError(f"--engine must be one of {', '.join(ENGINES)} (got '{engine}')")
    if not 0 < slo_scale < math.inf:
        raise ProvisionerError(f"--slo-scale must be a finite number > 0 (got {slo_scale:g})")
    if not 0 < sizing_duration < math.inf:   # before trace_generator, which would name --duration
        raise ProvisionerError(f"--sizing-duration must be > 0 and finite, in seconds (got {sizing_duration:g})")
    if static_machines is not None and static_machines < 1:
        raise ProvisionerError(f"--static-machines must be >= 1 (got {static_machines})")
    refuse_idle_flags(ctx, workload, arrival)
    refuse_idle_seed(ctx, workload, arrival)
    scheduler_code(scheduler)   # an unknown name: one line listing the policies
    check_preemption(ctx, preemption, scheduler)
    swap_space_gb = check_swap_space_flag(ctx, preemption, swap_space_gb)
    if scheduler != DEFAULT_SCHEDULER and not given(ctx, "engine"):
        engine = "des"   # the on-demand schedulers run in the discrete-event engine only
    rate = _profile(profile, rps, duration)
    inputs = input_files(profile, workload, latency_profile)
    refuse_idle_force(force, report, "--report")
    if report is not None:   # before any work: a bad output path is refused at once
        from ..files import check_output_path
        check_output_path(report, flag="--report", force=force, force_hint="--force", inputs=inputs,
                          stdout_taken_by="--json" if json_out else None)
    if scale_on not in SCALE_ON:   # before the flags it reads: '--scale-on load' is the error, not them
        raise ProvisionerError(f"--scale-on must be one of {', '.join(SCALE_ON)} (got '{scale_on}')")
    _refuse_other_policy_flags(ctx, scale_on)
    if interval_s is None:
        interval_s = 60.0 if scale_on == "rate" else CLOSED_LOOP_INTERVAL_S
    policy = AutoscalePolicy(scale_out_load, scale_in_load, target_load, startup_s, interval_s, window_s, min_machines,
                             scale_on, _number_or_auto(scale_out_freeness, "--scale-out-freeness"),
                             _number_or_auto(scale_in_freeness, "--scale-in-freeness"),
                             _number_or_auto(scale_out_queue, "--scale-out-queue"),
                             _number_or_auto(scale_in_queue, "--scale-in-queue"), max_machines)
    check_floor(policy.min_machines, static_machines)   # before the day's trace is drawn (seconds for a busy day)
    if policy.closed_loop:
        if engine == "fluid" and given(ctx, "engine"):
            refuse_closed_loop_in_fluid(scale_on)
        engine = "des"   # the controller reads the discrete-event engine's state
    traces = trace_generator(workload, arrival, None, sizing_duration, seed, cv)
    measured = load_latency_model(latency_profile, latency_interp)
    if measured is None:
        from perfmodels import LatencyModel
    perf = measured if measured is not None else LatencyModel()
    if rate.peak_rps * traces.duration_s < 0.5:   # the sizing trace at the peak would hold no request
        raise ProvisionerError(f"--profile: its peak, {rate.peak_rps:.3g} req/s, brings no request in the "
                               f"{traces.duration_s:g}-s sizing trace at the peak; raise the profile's rates (or "
                               f"--rps, its peak) or --sizing-duration")
    at_peak = rate.peak_rps * traces.duration_s
    day_fits = rate.mean_rps * rate.duration_s <= MAX_TRACE_REQUESTS   # else drawing the day refuses it, naming it
    if traces.arrival != "replay" and at_peak > MAX_TRACE_REQUESTS and day_fits:   # named "the duration" before
        raise ProvisionerError(f"--sizing-duration {traces.duration_s:.3g}: the sizing trace at the peak "
                               f"({rate.peak_rps:.3g} req/s) would hold {at_peak:.3g} requests, more than a trace "
                               f"holds ({MAX_TRACE_REQUESTS:,}); shorten --sizing-duration")
    t0 = time.perf_counter()
    day = traces.with_profile(rate)
    # The static cluster is sized on the day's busiest load: drawn arrivals' first window at
    # the profile's peak rate (a stationary stream), a replayed file's busiest windows of the
    # day as the day plays them (the file at the peak rate would size a burst the day plays in
    # a trough as if it came at the peak), the one that sets the count giving the peak rate.
    windows = _sizing_windows(traces, rate, day)
    replayed = traces.arrival == "replay"
    overrides = {"scheduler": scheduler} if scheduler != DEFAULT_SCHEDULER else {}
    result = autoscale(design, day, windows[0][1], model, policy, perf=perf, slo=SLO().scaled(slo_scale),
                       engine=engine, capacity_rps=capacity_rps, static_machines=static_machines,
                       preemption=preemption, swap_space_gb=swap_space_gb,
                       sizing_windows=[trace for _, trace, _ in windows[1:]],
                       peak_rps=None if replayed else rate.peak_rps, **overrides)
    elapsed_s = time.perf_counter() - t0
    obj = {"workload": workload, "model": model, "engine": engine, "scheduler": scheduler,
           # the day is TraceGenerator.from_json(trace).with_profile(RateProfile.from_json(profile)),
           # the sizing trace the same generator's `.busiest_window(peak_rps, profile, by=sizing.by[0])`
           # (its duration_s: --sizing-duration; `.at(peak_rps)` for drawn arrivals, the day's own
           # busiest window for a replay, from `sizing.start_s` in the day)
           "profile": {**rate.to_json(), "requests": len(day)},
           "trace": traces.to_json(),
           # sized: False when --static-machines gave the count (the window the peak rate is read from)
           "sizing": {**_window_json(*windows[result.sizing_window]), "sized": static_machines is None},
           "sizing_windows": [_window_json(*w) for w in windows],
           **result.to_json()}
    if preemption != "recompute":   # recompute results keep their keys
        obj["preemption"] = preemption
        obj["swap_space_gb"] = swap_space_gb
    if measured is not None:
        from ..designs import make_design
        d = make_design(design, machines=1)
        pool = (perf.catalog.machine(d.prompt_machine).gpu, d.prompt_tp)
        obj["latency_model"] = latency_model_json(perf, model, [pool], day.prompt_tokens)
    def show(written: bool) -> None:
        if not json_out:
            _print_summary(obj, elapsed_s)
            return
        echo_json(obj)
        if sys.stderr.isatty():
            typer.echo(f"simulated {len(day):,} requests twice in {elapsed_s:.1f} s", err=True)

    report_then_answer(report, lambda: _write_report(report, obj, inputs, force), show)


def _sizing_windows(traces, rate, day) -> list[tuple[list, object, float]]:
    """The distinct windows the static cluster is sized on, each (the measures it is busiest
    by, its trace, where it starts in the day): a replayed day's busiest by requests, by
    prompt tokens and by output tokens (one window may be all three); drawn arrivals' one
    stream at the peak (stationary: no window is busier), by requests."""
    measures = WINDOW_MEASURES if traces.arrival == "replay" else WINDOW_MEASURES[:1]
    windows: dict[float, tuple[list, object, float]] = {}
    for by in measures:
        trace, start_s = traces.busiest_window(rate.peak_rps, rate, day=day, by=by)
        windows.setdefault(start_s, ([], trace, start_s))[0].append(by)
    return list(windows.values())


def _window_json(by: list, trace, start_s: float) -> dict:
    return {"by": by, "start_s": start_s, "requests": len(trace), "rps": float(trace.rate_rps),
            "prompt_tokens": int(trace.prompt_tokens.sum()), "output_tokens": int(trace.output_tokens.sum())}


def _refuse_other_policy_flags(ctx: typer.Context, scale_on: str) -> None:
    """One line for a threshold flag that the chosen --scale-on does not read."""
    mine = _POLICY_FLAGS.get(scale_on, ())
    for params in _POLICY_FLAGS.values():
        for param in params:
            if param not in mine and given(ctx, param):
                flag = "--" + param.replace("_", "-")
                readers = " or ".join(p for p, ps in _POLICY_FLAGS.items() if param in ps)   # max_machines: two
                raise ProvisionerError(f"{flag} is read by --scale-on {readers}, not {scale_on}: add --scale-on "
                                       f"{readers}, or drop {flag}")


def _number_or_auto(value: str, flag: str) -> float | None:
    """A closed-loop threshold: a number (decode steps, requests per machine), or None for `auto`."""
    if value.strip().lower() == "auto":
        return None
    try:
        number = float(value)
    except ValueError:
        raise ProvisionerError(f"{flag} must be a number or auto (got '{value}')") from None
    if not math.isfinite(number):
        raise ProvisionerError(f"{flag} must be a finite number or auto (got '{value}')")
    return number


def _profile(profile: str, rps: float | None, duration: float | None):
    if rps is not None and not 0 < rps < math.inf:
        raise ProvisionerError(f"--rps must be > 0 and finite, the profile's peak in requests per second (got {rps:g})")
    if duration is not None and not 0 < duration < math.inf:
        raise ProvisionerError(f"--duration must be > 0 and finite, in seconds (got {duration:g})")
    if not profile.strip():   # '' is the current directory to Path
        raise ProvisionerError("--profile is empty: give a CSV with columns time_s,rps or 'diurnal'")
    if profile.strip().lower() == DIURNAL:
        if rps is None:
            raise ProvisionerError("--profile diurnal needs its peak rate: add --rps R (requests/s)")
        return diurnal_profile(rps, duration if duration is not None else 86400.0)
    if not Path(profile).exists():
        raise ProvisionerError(f"--profile: '{profile}' is neither a file nor 'diurnal'; give a CSV with columns "
                               f"time_s,rps or 'diurnal'")
    rate = read_profile_csv(profile, duration)
    return rate.scaled_to_peak(rps) if rps is not None else rate


def _print_summary(obj: dict, elapsed_s: float) -> None:
    from rich.table import Table

    from ..autoscale import measures_text, saving_caveat, saving_parts, saving_text
    from ._common import console as make_console

    p = obj["profile"]
    table = Table(title=f"{obj['family']} over '{p['name']}' ({p['duration_s'] / 3600:.3g} h, peak {p['peak_rps']:.3g} "
                        f"req/s, mean {p['mean_rps']:.3g} req/s, {p['requests']:,} requests) — {obj['workload']}, "
                        f"{obj['model']}, scheduler {obj['scheduler']}, {obj['engine']} engine")
    table.add_column("cluster")
    for col in ("machines", "machine-hours", "cost ($)", "energy (kWh)", "TTFT p99 (ms)", "E2E p99 (ms)", "SLOs"):
        table.add_column(col, justify="right")
    s, a = obj["static"], obj["autoscaled"]
    static = "static (as given)" if s.get("given") else "static (sized for the peak)"
    for name, c, machines in ((static, s, f"{s['machines']}"),
                              ("autoscaled", a, f"{a['machines_min']}..{a['machines_max']}")):
        table.add_row(name, machines, f"{c['machine_hours']:.1f}", f"{c['cost_usd']:,.0f}", f"{c['energy_kwh']:,.0f}",
                      f"{c['ttft_ms']['p99']:.0f}", f"{c['e2e_ms']['p99']:.0f}",
                      "met" if c["slo"]["met"] else f"violated ({c['slo']['binding']})")
    console = make_console()
    console.print(table)
    how = (f"the controller plans with {obj['capacity_rps']:.3g} req/s per machine" if obj["scale_on"] == "rate" else
           f"the controller scales on {obj['scale_on']} inside the discrete-event engine "
           f"({obj['scaling_events']} scaling events)")
    if obj["trace"]["arrival"] == "replay" and "sizing" in obj:
        z = obj["sizing"]
        by = measures_text(z["by"])
        # a day shorter than --sizing-duration is one window, the day
        window_s = min(obj["trace"]["duration_s"], p["duration_s"])
        window = f"{window_s:g}-s window"
        if window_s < obj["trace"]["duration_s"]:
            window += f" (the whole day, shorter than --sizing-duration {obj['trace']['duration_s']:g} s)"
        what = (f"the static cluster is sized on the day's busiest {window} by {by} "
                f"(of {len(obj['sizing_windows'])} distinct)" if z["sized"] else
                f"the static cluster's size is given (--static-machines); the controller's peak is the day's "
                f"busiest {window} by {by}")
        console.print(f"{what}: from {z['start_s']:.6g} s, {z['requests']:,} requests ({z['rps']:.3g} req/s), "
                      f"{z['prompt_tokens']:,} prompt and {z['output_tokens']:,} output tokens")
    if obj["scale_on"] != "rate":
        console.print(_thresholds_line(obj["policy"], obj["scale_on"]))
    console.print(f"autoscaling {saving_text(obj)} ({saving_parts(obj)}){saving_caveat(obj)}; {how} and "
                  f"started {a['machines_started']} machines")
    console.print(f"simulated {p['requests']:,} requests twice in {elapsed_s:.1f} s")


def _thresholds_line(policy: dict, metric: str) -> str:
    """The closed-loop thresholds as run, and where they came from (a run is reproducible from them)."""
    unit = "decode steps" if metric == "freeness" else "requests per machine"
    line = (f"thresholds: scale out at {policy[f'scale_out_{metric}']:.6g}, in at {policy[f'scale_in_{metric}']:.6g} "
            f"{unit}")
    source = policy.get("thresholds", {"source": "given"})
    if source["source"] == "auto":
        line += (f" (auto: the {source['scale_out_percentile']:g}th percentile of the static cluster's "
                 f"{source['interval_s']:g}-s readings at the peak ({source['machines']} machines), and {source['scale_in_factor']:g}x better)")
    return line


def _write_report(path: Path, obj: dict, inputs: tuple = (), force: bool = False) -> None:
    """Rate and machines over time, one self-contained HTML page (`reports.write_autoscale_report`)."""
    from reports import write_autoscale_report

    # Checked before the run; without --force a file made there meanwhile is kept.
    write_autoscale_report(obj, path, force=force, inputs=inputs, force_hint="--force")
    typer.echo(f"wrote {path}", err=True)
