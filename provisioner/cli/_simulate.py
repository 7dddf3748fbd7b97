"""`provision simulate`: score one design (CONTRACTS.md, command 2), or re-score an answer
of `provision --json` on the trace it was found on (`--from-result`)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import typer

from ..designs import FAMILY_SPECS, family_spec, make_design
from ..errors import ProvisionerError
from ..files import check_output_path, write_output
from ..results import design_result_json, scheduler_json
from ..schedulers import DEFAULT_SCHEDULER, ON_DEMAND_SCHEDULERS
from ..sim import ENGINES, simulate
from ..slo import SLO
from ._common import (ARRIVAL_HELP, CV_HELP, DEFAULT_MODEL, DEFAULT_WORKLOAD, WORKLOAD_HELP, duplicate_weights_option,
                      echo_json, latency_interp_option, latency_model_json, latency_profile_option, load_latency_model,
                      mps_share_option, prefill_chunk_option, recorded_profile, refuse_idle_flags, refuse_idle_seed,
                      given, high_priority_option, scheduler_option, preemption_option, check_preemption,
                      swap_space_option, check_swap_space_flag, replay_note, trace_generator, input_files,
                      refuse_idle_force)

DEFAULT_RPS = 70.0
_ON_DEMAND_CHOICES = ", ".join(ON_DEMAND_SCHEDULERS[:-1]) + " or " + ON_DEMAND_SCHEDULERS[-1]
# Flags that describe the design or the trace: --from-result takes them from the result.
QUESTION_FLAGS = ("design", "prompt_machines", "token_machines", "machines", "workload", "rps", "model", "duration",
                  "seed", "arrival", "cv", "prompt_power_cap", "token_power_cap", "slo_scale", "prefill_chunk_tokens",
                  "mps_prefill_share", "duplicate_weights", "scheduler", "preemption", "swap_space_gb")


def simulate_command(
    ctx: typer.Context,
    design: str = typer.Option(None, "--design", help="Design family, e.g. splitwise-hh or baseline-a100."),
    prompt_machines: int = typer.Option(0, "--prompt-machines", help="Prompt machines (Splitwise families)."),
    token_machines: int = typer.Option(0, "--token-machines", help="Token machines (Splitwise families)."),
    machines: int = typer.Option(0, "--machines", help="Machines of a baseline family."),
    workload: str = typer.Option(DEFAULT_WORKLOAD, "--workload", help=WORKLOAD_HELP),
    rps: float = typer.Option(None, "--rps", help="Request rate (requests/s; default 70). With a replayed trace: "
                                                  "rescale its time to this mean rate (default: its own)."),
    model: str = typer.Option(DEFAULT_MODEL, "--model", help="Catalog model name."),
    duration: float = typer.Option(None, "--duration", help="Trace length (s; default 120). With a replayed "
                                                            "trace: the window from its first arrival (default: "
                                                            "the whole file)."),
    seed: int = typer.Option(0, "--seed", help="Seed of the workload's random draws."),
    arrival: str = typer.Option(None, "--arrival", help=ARRIVAL_HELP),
    cv: float = typer.Option(2.0, "--cv", help=CV_HELP),
    engine: str = typer.Option("fluid", "--engine", help="fluid (fast) or des (exact reference)."),
    prompt_power_cap: float = typer.Option(None, "--prompt-power-cap", help="GPU power cap of the prompt pool, fraction of TDP."),
    token_power_cap: float = typer.Option(None, "--token-power-cap", help="GPU power cap of the token pool, fraction of TDP."),
    slo_scale: float = typer.Option(1.0, "--slo-scale", help="Multiply every SLO slowdown limit (looser > 1)."),
    from_result: Path = typer.Option(None, "--from-result", help="Re-score an answer of `provision --json` "
                                                                 "(saved to this file) on the trace it was found on."),
    family: str = typer.Option(None, "--family", help="With --from-result: the family whose answer to re-score "
                                                      "(default: the winner)."),
    json_out: bool = typer.Option(False, "--json",
                                  help="Print the answer as one JSON object (its keys: provisioner/RESULT_SCHEMA.md)."),
    latency_profile: str = latency_profile_option(),
    latency_interp: str = latency_interp_option(),
    prefill_chunk_tokens: int = prefill_chunk_option(),
    mps_prefill_share: float = mps_share_option(),
    duplicate_weights: bool = duplicate_weights_option(),
    scheduler: str = scheduler_option(),
    high_priority_fraction: float = high_priority_option(),
    high_priority_slo_scale: float = typer.Option(1.0, "--high-priority-slo-scale", metavar="F",
                                                  help="The high-priority requests' own SLO: every limit x F "
                                                       "(tighter < 1); each class's verdict is in the JSON."),
    timeline: Path = typer.Option(None, "--timeline", readable=False, metavar="PATH.html",
                                  help="With an on-demand --scheduler: write a page of preemptions, migrations, "
                                       "downtime and memory fragmentation over time."),
    force: bool = typer.Option(False, "--force", help="Overwrite the --timeline file if it exists."),
    preemption: str = preemption_option(),
    swap_space_gb: float = swap_space_option(),
) -> None:
    engine = _engine_for(ctx, engine, scheduler)
    if engine not in ENGINES:
        raise ProvisionerError(f"--engine must be one of {', '.join(ENGINES)} (got '{engine}')")
    profile_where = None   # how a --latency-profile error names the file (default: the flag)
    if from_result is not None:
        given = [p for p in QUESTION_FLAGS if ctx.get_parameter_source(p).name not in ("DEFAULT", "DEFAULT_MAP")]
        if given:
            flag = "--" + given[0].replace("_", "-")
            raise ProvisionerError(f"--from-result takes the design and the trace from the result; drop {flag}")
        from ..results import preemption_from_question, rescoring_question
        result = _read_result(from_result)
        d, traces, rps, model, slo = rescoring_question(result, family)
        preemption, swap_space_gb = preemption_from_question(result["question"])   # swap answers re-scored as swap
        workload = traces.to_json()["workload"]
        if latency_profile is None:
            latency_profile, latency_interp = recorded_profile(result, latency_interp)
            profile_where = f"{from_result}: its latency profile '{latency_profile}'"   # not typed as a flag
    else:
        if family is not None:
            raise ProvisionerError("--family goes with --from-result; to score a design give --design FAMILY")
        if design is None:
            raise ProvisionerError("--design is required (a family such as splitwise-hh), or --from-result RESULT.json")
        refuse_idle_flags(ctx, workload, arrival)
        refuse_idle_seed(ctx, workload, arrival)
        d = _design(design, prompt_machines, token_machines, machines, prompt_power_cap, token_power_cap,
                    prefill_chunk_tokens, mps_prefill_share, duplicate_weights, scheduler)
        traces = trace_generator(workload, arrival, rps, duration, seed, cv)
        if rps is None and traces.arrival != "replay":
            rps = DEFAULT_RPS
        if not 0 < slo_scale < float("inf"):
            raise ProvisionerError(f"--slo-scale must be a finite number > 0 (got {slo_scale:g})")
        slo = SLO().scaled(slo_scale)
    trace = traces.at(rps)
    rps = float(rps if rps is not None else traces.native_rps)
    perf = load_latency_model(latency_profile, latency_interp, profile_where)
    # Priorities and the timeline are the on-demand schedulers' (least-work and splitwisesim
    # neither preempt nor migrate): elsewhere the flag would change nothing, or draw nothing.
    if high_priority_fraction and d.scheduler not in ON_DEMAND_SCHEDULERS:
        raise ProvisionerError(f"--high-priority-fraction sets the priorities of the on-demand schedulers, not "
                               f"{d.scheduler}'s: add --scheduler {_ON_DEMAND_CHOICES}, or drop it")
    high_slo = _high_priority_slo(ctx, slo, high_priority_slo_scale, high_priority_fraction)
    check_preemption(ctx, preemption, d.scheduler)
    swap_space_gb = check_swap_space_flag(ctx, preemption, swap_space_gb)
    refuse_idle_force(force, timeline, "--timeline")
    if timeline is not None:
        if d.scheduler not in ON_DEMAND_SCHEDULERS:
            raise ProvisionerError(f"--timeline draws an on-demand scheduler's preemptions and migrations, which "
                                   f"{d.scheduler} has none of: add --scheduler {_ON_DEMAND_CHOICES}, or drop it")
        check_output_path(timeline, flag="--timeline", force=force, force_hint="--force",
                          inputs=input_files(workload, latency_profile, from_result),
                          stdout_taken_by="--json" if json_out else None)
    t0 = time.perf_counter()
    timelines = []
    row = simulate(d, trace, model, engine=_engine_for(ctx, engine, d.scheduler), slo=slo, perf=perf,
                   high_priority_fraction=high_priority_fraction, high_priority_slo=high_slo,
                   timelines=timelines, preemption=preemption, swap_space_gb=swap_space_gb).iloc[0]
    if timeline is not None:
        from reports import build_scheduler_html
        write_output(timeline, build_scheduler_html({d.scheduler: timelines[0]},
                                                    lead=f"{d.family} x {d.machines}, {workload} at {rps:g} req/s, "
                                                         f"{model}"), flag="--timeline", force=force)
    elapsed_s = time.perf_counter() - t0
    obj = design_result_json(row, workload=workload, model=model, rps=rps, trace=traces.to_json(rps))
    obj.update(scheduler_json(row))
    if preemption != "recompute":   # recompute results keep their keys
        obj["preemption"] = preemption
        obj["swap_space_gb"] = swap_space_gb
    # Wall time of the engine call (metrics included; a first run also compiles the kernel).
    # Never in the JSON, which stays byte-identical from run to run.
    speed = (f"simulated {len(trace):,} requests in {elapsed_s:.2f} s "
             f"({len(trace) / max(elapsed_s, 1e-9):,.0f} simulated requests/s)")
    if perf is not None:
        obj["latency_model"] = latency_model_json(perf, model, _pools(d, perf), trace.prompt_tokens)
    if json_out:
        echo_json(obj)
        if sys.stderr.isatty():   # for the person at the terminal; never mixed into captured output
            typer.echo(speed, err=True)
        return
    _print_summary(obj, row, replay_note(traces, rps, len(trace)), speed)


def _engine_for(ctx, engine: str, scheduler: str) -> str:
    """The on-demand schedulers run in the discrete-event engine: it is the default for
    them, and asking for the fluid one is refused (by the simulator, one line)."""
    if scheduler != DEFAULT_SCHEDULER and not given(ctx, "engine"):
        return "des"
    return engine


def _design(design, prompt_machines, token_machines, machines, prompt_power_cap, token_power_cap,
            prefill_chunk_tokens=None, mps_prefill_share=None, duplicate_weights=False,
            scheduler=DEFAULT_SCHEDULER):
    spec = family_spec(design)
    _refuse_flags_of_other_families(spec, prompt_machines, token_machines, machines, token_power_cap)
    overrides = {"scheduler": scheduler} if scheduler != DEFAULT_SCHEDULER else {}
    if prefill_chunk_tokens is not None:
        overrides["prefill_chunk_tokens"] = prefill_chunk_tokens
    if mps_prefill_share is not None:
        overrides["mps_prefill_share"] = mps_prefill_share
    if duplicate_weights:
        overrides["duplicate_weights"] = True
    if prompt_power_cap is not None:
        overrides["prompt_power_cap"] = prompt_power_cap
    if token_power_cap is not None:
        overrides["token_power_cap"] = token_power_cap
    if spec.split:
        return make_design(design, prompt_machines, token_machines, **overrides)
    return make_design(design, machines=machines, **overrides)


def _read_result(path: Path) -> dict:
    from ._report import load_result

    obj = load_result(path, flag="--from-result")
    if not isinstance(obj, dict) or not isinstance(obj.get("question"), dict) or "best" not in obj:
        from reports import answer_kind
        kind = answer_kind(obj)   # another command's answer: which one, not just what it lacks
        what = f"is the answer of `provision {kind} --json`, which" if kind else "has no 'question' and 'best', and"
        raise ProvisionerError(f"--from-result '{path}' {what} --from-result does not re-score; give the output of "
                               f"`provision --goal ... --json`")
    return obj


def _pools(d, perf):
    """(gpu, tp) of the design's pools."""
    cat = perf.catalog
    return [(cat.machine(d.prompt_machine).gpu, d.prompt_tp), (cat.machine(d.token_machine).gpu, d.token_tp)]


def _refuse_flags_of_other_families(spec, prompt_machines: int, token_machines: int, machines: int,
                                    token_power_cap: float | None) -> None:
    """A flag that does not apply to the family is an error, never silently ignored."""
    from ..errors import ProvisionerError

    if spec.split and machines:
        raise ProvisionerError(f"--machines is for baseline families; {spec.name} has two pools: give "
                               f"--prompt-machines N --token-machines M")
    if not spec.split and (prompt_machines or token_machines):
        raise ProvisionerError(f"{spec.name} has one pool of mixed machines: give --machines N, not "
                               f"--prompt-machines/--token-machines")
    if not spec.split and token_power_cap is not None:
        raise ProvisionerError(f"{spec.name} has no token pool: cap its machines with --prompt-power-cap, "
                               f"not --token-power-cap")


def _print_summary(obj: dict, row, note: str | None, speed: str) -> None:
    from rich.table import Table

    from ._common import console as make_console
    from ._tables import fmt_cell

    d = obj["design"]
    def count(n, what="machine"):
        return f"{n} {what}" + ("" if n == 1 else "s")
    title = (f"{d['family']}: {d['prompt_machines']} prompt + {count(d['token_machines'], 'token machine')}"
             if d["token_machines"] else f"{d['family']}: {count(d['prompt_machines'])}")
    title += _power_caps_text(d)
    if d.get("prefill_chunk_tokens"):
        title += f", chunked prefill {d['prefill_chunk_tokens']} tokens"
    if d.get("scheduler"):
        title += f", scheduler {d['scheduler']}"
    if d.get("mps_prefill_share"):
        title += f", prefill/decode processes sharing each GPU (prefill SM share {d['mps_prefill_share']:g}"
        title += ", weights duplicated)" if d.get("duplicate_weights") else ")"
    table = Table(title=f"{title} — {obj['workload']}, {obj['model']}, {obj['rps']:g} req/s, {obj['requests']} requests")
    table.add_column("metric")
    for p in ("p50", "p90", "p99"):
        table.add_column(f"{p} (ms)", justify="right")
        table.add_column(f"{p} slowdown", justify="right")
    for m in ("ttft", "tbt", "e2e"):
        cells = []
        for p in ("p50", "p90", "p99"):
            cells += [fmt_cell(obj[m + "_ms"][p], ".0f"), fmt_cell(obj["slo"]["slowdown"][m][p], ".2f")]
        table.add_row(m.upper(), *cells)
    console = make_console()
    console.print(table)
    if note:
        console.print(note)
    if "scheduler_stats" in obj:
        s = obj["scheduler_stats"]
        console.print(f"scheduler {d['scheduler']}: {s['preemptions']:.0f} preemptions ({s['recomputed_tokens']:.0f} "
                      f"tokens recomputed), {s['migrations']:.0f} migrations ({s['migration_downtime_s']:.3f} s "
                      f"downtime in all), mean fragmentation {100 * s['fragmentation_mean']:.1f}% of the KV memory")
        if "swaps" in s:
            console.print(f"swap preemption: {s['swaps']:.0f} swaps, {s['swapped_bytes'] / 1e9:.2f} GB over the host "
                          f"link (out and back in)")
    verdict = "meets every SLO" if obj["slo"]["met"] else f"violates the SLOs (binding: {row.binding_slo})"
    if obj["slo"]["unservable_requests"]:
        verdict = (f"cannot serve {obj['slo']['unservable_requests']} request(s): their KV cache is larger than "
                   f"any machine of the design holds")
    console.print(f"{verdict}; ${obj['cost_usd_per_h']:.1f}/h, {obj['power_kw']:.1f} kW, "
                  f"throughput {obj['throughput_rps']:.1f} req/s (requests / time to the last finish)")
    console.print(speed)


def _power_caps_text(d: dict) -> str:
    """The pools' GPU power caps, when any is below TDP or not the family's own (a hhcap
    design run at --token-power-cap 1.0 is uncapped, and its title says so). A custom
    family has no caps of its own: only caps below TDP are named."""
    spec = FAMILY_SPECS.get(d["family"])
    text = ""
    for pool, name in (("prompt", "prompt pool" if d["token_machines"] else "machines"), ("token", "token pool")):
        cap = d.get(f"{pool}_power_cap")
        own = getattr(spec, f"{pool}_power_cap") if spec is not None else 1.0
        if cap is None or (pool == "token" and not d["token_machines"]) or (cap == 1.0 and own == 1.0):
            continue
        text += f", {name} at {100 * cap:g}% of TDP"
        if spec is not None and cap != own:
            text += f" (the family's own: {100 * own:g}%)"
    return text


def _high_priority_slo(ctx: typer.Context, slo: SLO, scale: float, fraction: float) -> SLO | None:
    """The high-priority class's SLO (`--high-priority-slo-scale`); None: the same as the others'."""
    if not given(ctx, "high_priority_slo_scale"):
        return None
    if not 0 < scale < float("inf"):
        raise ProvisionerError(f"--high-priority-slo-scale must be a finite number > 0 (got {scale:g})")
    if not fraction:
        raise ProvisionerError("--high-priority-slo-scale sets the SLO of the high-priority requests: add "
                               "--high-priority-fraction F (with an on-demand --scheduler), or drop it")
    return slo.scaled(scale)
