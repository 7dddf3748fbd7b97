"""`provision cloud`: plan a heterogeneous cloud inventory (CONTRACTS.md, command 4)."""

from __future__ import annotations

from pathlib import Path

import typer

from ..errors import ProvisionerError
from ..files import stdout_is_an_output
from ..sim import ENGINES
from ._common import (ARRIVAL_HELP, CV_HELP, DEFAULT_WORKLOAD, DURATION_DEFAULT_HELP, WORKLOAD_HELP, RichProgress,
                      check_latency_interp, echo_json, input_files, latency_interp_option, latency_profile_option,
                      prefill_chunk_option, refuse_idle_flags, replay_note, scheduler_option, trace_generator,
                      refuse_idle_force, report_then_answer)

CLOUD_MODEL = "llama-30b"
# A replay with no --duration is taken whole; planning simulates that window at every rate
# its bisections try, so a long one (40 requests over 4,456 s: 44k requests a run at
# 10 req/s, 474 s) needs the user's word that the whole window is meant.
MAX_IMPLICIT_REPLAY_S = 1200.0
GOALS = ("rps", "throughput", "cost")


def cloud_command(
    ctx: typer.Context,
    inventory: str = typer.Option(..., "--inventory", help="Inventory TOML path, or a shipped example: "
                                                           "thunderserve-32gpu, cloud-prices (a price list)."),
    workload: str = typer.Option(DEFAULT_WORKLOAD, "--workload", help=WORKLOAD_HELP),
    rps: float = typer.Option(None, "--rps", help="Request rate to plan for (req/s)."),
    goal: str = typer.Option(None, "--goal", help="rps (default with --rps: plan this inventory for the rate), "
                                                  "throughput (highest rate at the target attainment) or cost "
                                                  "(what to rent from a price list to serve --rps)."),
    model: str = typer.Option(CLOUD_MODEL, "--model", help="Catalog model name."),
    inter_node_gbps: float = typer.Option(None, "--inter-node-gbps", help="Override the inventory's "
                                                                          "inter-node bandwidth (Gbps)."),
    nic_gbps: float = typer.Option(None, "--nic-gbps", help="Give every node a network card of this bandwidth "
                                   "(Gbps per direction), shared by all its inter-node links (default: the "
                                   "inventory's nic_gbps, else none: each node pair's link is its own)."),
    kv_bits: int = typer.Option(16, "--kv-bits", help="Bits per KV element on the wire: 16, 8 or 4."),
    without: list[str] = typer.Option(None, "--without", metavar="NODE", help="Re-plan without this node (e.g. a6000-4x-1): "
                                                              "none vs lightweight vs full re-plan."),
    replan_workload: str = typer.Option(None, "--replan-workload", metavar="W", help="Re-plan for a changed mix: "
                                        "the requests become W's (coding, conversation or a CSV trace) at the same "
                                        "rate; none vs lightweight vs full re-plan (with --without: both at once)."),
    slo_scale: float = typer.Option(2.0, "--slo-scale", help="Multiply Table VI's limits (cloud default 2; "
                                                             "slowdowns against the inventory's best node)."),
    target_attainment: float = typer.Option(0.99, "--target-attainment",
                                            help="Share of requests within each p99 limit a plan is judged at: "
                                                 "the sustained rates (every goal), --goal throughput's rate, "
                                                 "--goal cost's rentals."),
    seed: int = typer.Option(0, "--seed", help="Seed of the trace and of the tabu search."),
    duration: float = typer.Option(None, "--duration", help=f"Trace length (s; {DURATION_DEFAULT_HELP}, "
                                                            f"which past {MAX_IMPLICIT_REPLAY_S:g} s needs "
                                                            f"--duration)."),
    engine: str = typer.Option("des", "--engine", help="Simulator of the reported attainment: des (exact "
                                                       "reference) or fluid."),
    rescore_engine: str = typer.Option("des", "--rescore-engine", help="Simulator of the re-scoring that "
                                       "chooses (finalists' sustained rates, --goal cost's rentals): des or "
                                       "fluid (faster once its cloud kernel is compiled)."),
    arrival: str = typer.Option(None, "--arrival", help=ARRIVAL_HELP),
    cv: float = typer.Option(2.0, "--cv", help=CV_HELP),
    json_out: bool = typer.Option(False, "--json",
                                  help="Print the answer as one JSON object (its keys: provisioner/RESULT_SCHEMA.md)."),
    report: Path = typer.Option(None, "--report", readable=False,
                                help="Also write the plan's HTML report to this file."),
    force: bool = typer.Option(False, "--force", help="Overwrite the --report file if it exists."),
    latency_profile: str = latency_profile_option(
        "Measured prefill and decode-iteration times (SplitwiseSim's perf_model.csv columns): the roofline's "
        "constants of each GPU measured at 10 points or more are fitted on them (as provision perf calibrate), "
        "since a group's pipeline stages may mix GPUs, which no measured table describes."),
    latency_interp: str = latency_interp_option("Ignored here, with a warning (a value other than grid or "
                                                "splitwisesim is refused): cloud interpolates no profile."),
    scheduler: str = scheduler_option("least-work (default: KV reserved per request, the least-loaded replica "
                                      "within the routing LP's shares), jsq, llumnix-dispatch, llumnix or "
                                      "jsq-migration (KV on demand with vLLM preemption; llumnix* dispatch by "
                                      "freeness among the routed replicas; llumnix and jsq-migration migrate "
                                      "decoding requests over the replicas' own links). The on-demand policies "
                                      "run in the DES; the search's analytic score is least-work's."),
    prefill_chunk_tokens: int = prefill_chunk_option(
        "Cloud: the budget of the second non-split comparison (non_split_chunked); the split plan's "
        "prefill replicas batch no decodes and never chunk. Default: 512 (of 256-2048 on "
        "thunderserve-32gpu the best on coding, within 1% of the best on conversation: "
        "benchmarks/results/cloud.md)."),
) -> None:
    refuse_idle_flags(ctx, workload, arrival)
    if without and len(without) > 1:   # typer would keep the last one and drop the others silently
        raise ProvisionerError(f"--without takes one node (given {len(without)} times: {', '.join(without)}); "
                               f"re-plan without one node at a time")
    without = without[0] if without else None
    goal = goal or ("throughput" if rps is None else "rps")
    if goal not in GOALS:
        raise ProvisionerError(f"--goal must be one of {', '.join(GOALS)} (got '{goal}')")
    if goal in ("rps", "cost") and rps is None:
        raise ProvisionerError(f"--goal {goal} needs --rps R (requests/s)")
    if goal == "throughput" and rps is not None:
        raise ProvisionerError("--goal throughput finds the rate itself: drop --rps")
    for flag, name in (("--engine", engine), ("--rescore-engine", rescore_engine)):
        if name not in ENGINES:
            raise ProvisionerError(f"{flag} must be one of {', '.join(ENGINES)} (got '{name}')")
    if not 0 < target_attainment <= 1:
        raise ProvisionerError(f"--target-attainment must be in (0, 1] (got {target_attainment:g})")
    refuse_idle_force(force, report, "--report")
    if report is not None:   # refuse before the search, not after it
        from ..files import check_output_path
        inputs = input_files(inventory, workload, latency_profile, replan_workload)
        check_output_path(report, flag="--report", force=force, force_hint="--force", inputs=inputs,
                          stdout_taken_by="--json" if json_out else None)
    from perfmodels import LatencyModel

    from ..cloud import COMPARISON_CHUNK_TOKENS, check_without, load_inventory, plan_cloud
    check_latency_interp(latency_interp)
    if latency_interp is not None:
        typer.echo(f"warning: --latency-interp {latency_interp}: ignored; cloud interpolates no profile (a group's "
                   f"pipeline stages may mix GPUs, which no measured table describes)", err=True)
    perf = LatencyModel()
    inv = load_inventory(inventory, perf.catalog)
    if inter_node_gbps is not None:
        inv = inv.with_bandwidth(inter_node_gbps)
    if nic_gbps is not None:
        inv = inv.with_nic(nic_gbps)
    if without is not None:   # an unknown node is refused before the trace is read
        check_without(inv, without, goal)
    traces = trace_generator(workload, arrival, rps, duration, seed, cv)
    if duration is None and traces.duration_s > MAX_IMPLICIT_REPLAY_S:
        raise ProvisionerError(f"--workload: the replayed window is {traces.duration_s:,.0f} s long, and planning "
                               f"simulates it at every rate it tries (at 10 req/s, {10 * traces.duration_s:,.0f} "
                               f"requests a run: minutes); give --duration, e.g. --duration 120, or --duration "
                               f"{traces.duration_s:.0f} to keep it whole")
    new_mix = None if replan_workload is None else _new_mix(replan_workload, arrival, rps, traces, seed, cv)
    if new_mix is not None and _same_mix(new_mix, traces):   # a re-plan for no change: refused, not run
        raise ProvisionerError(f"--replan-workload {replan_workload}: the requests would not change (the same mix "
                               f"as --workload {workload}, drawn alike); give another mix (coding, conversation or "
                               f"a CSV trace), or drop --replan-workload")
    latency = None
    if latency_profile is not None:   # fitted once the question is known sound: its lines come last
        perf, latency = _fitted_profile(latency_profile, perf, inv)
    llm = perf.llm(model)
    with RichProgress(unit=None) as progress:
        answer = plan_cloud(inv, llm, perf, traces, goal=goal, rps=rps, kv_bits=kv_bits, slo_scale=slo_scale,
                            seed=seed, without=without, target=target_attainment, engine=engine,
                            rescore_engine=rescore_engine,
                            prefill_chunk_tokens=(COMPARISON_CHUNK_TOKENS if prefill_chunk_tokens is None
                                                  else prefill_chunk_tokens), new_mix=new_mix, scheduler=scheduler,
                            progress=progress)
    answer["workload"] = workload
    if latency is not None:
        answer["latency_model"] = latency
    def write() -> None:
        from reports import write_cloud_report
        # Checked before the search; without --force a file made there meanwhile is kept.
        write_cloud_report(answer, report, force=force, force_hint="--force")

    report_then_answer(report, write, lambda written: echo_json(answer) if json_out else _render(answer))
    if json_out:
        return
    # what the file became at the answer's rate (a short file is repeated up to a floor of requests)
    notes = [("", traces, answer["requests"])]
    if new_mix is not None and "replan" in answer:
        notes.append(("--replan-workload: ", new_mix, answer["replan"]["requests"]))
    for flag, generator, requests in notes:
        note = replay_note(generator, answer["rps"], requests,
                           window_s=max(generator.duration_s, requests / answer["rps"] if answer["rps"] else 0.0))
        if note:
            typer.echo(flag + note, err=stdout_is_an_output())
    if report is not None:
        typer.echo(f"report: {report}", err=stdout_is_an_output())


def _fitted_profile(path, perf, inv) -> tuple:
    """(latency model, the JSON's `latency_model`) of `--latency-profile`: the roofline with
    the constants of the GPUs it measures fitted on it (`perfmodels.fit_roofline`, as
    `provision perf calibrate`). A measured table is per whole replica of one GPU type and
    TP, and a cloud group's pipeline stages may mix types, so nothing is interpolated. What
    was fitted, not fitted or left out goes to stderr."""
    from perfmodels import ARTIFACT_RULE, MIN_FIT_POINTS, POOR_FIT_MAPE_PCT, fit_roofline, read_profile
    where = f"--latency-profile '{path}'"
    profile = read_profile(path, perf.catalog, where)
    fit = fit_roofline(profile.frame(), perf.calibration, perf.catalog)
    cal = fit.model.calibration

    def source(gpu: str) -> str:   # where a GPU's constants now come from
        lender = cal.borrowed.get(gpu)
        return ("fitted" if gpu in fit.fitted else f"borrows {lender}'s fitted constants" if lender in fit.fitted
                else "the shipped calibration's constants")

    gpus = {gpu: source(gpu) for gpu in dict.fromkeys(t.gpu for t in inv.types)}
    if fit.excluded_rows:
        emptied = sorted(set(profile.gpu) - set(fit.fitted) - set(fit.too_few))
        typer.echo(f"latency profile: {fit.excluded_rows} artifact row{'s' * (fit.excluded_rows != 1)} left out of "
                   f"the fit ({ARTIFACT_RULE}, as provision perf calibrate does)"
                   + (f", all of {', '.join(emptied)}'s" if emptied else ""), err=True)
    for gpu, points in fit.too_few.items():
        now = "it keeps its shipped constants" if source(gpu).startswith("the shipped") else f"it {source(gpu)}"
        typer.echo(f"warning: latency profile: {gpu} has {points} configuration point{'s' * (points != 1)}, fewer "
                   f"than the {MIN_FIT_POINTS} a fit of its constants needs: not fitted, {now}; add measurements "
                   f"(other TP degrees, prompt and batch sizes)", err=True)
    for gpu, f in fit.fitted.items():
        if f["tp_degrees"] == [1]:
            typer.echo(f"warning: latency profile: {gpu} is measured at TP 1 only, where no all-reduce runs: its "
                       f"all-reduce constants stay the shipped calibration's; measure TP 2 or more too", err=True)
        elif len(f["tp_degrees"]) == 1:
            typer.echo(f"warning: latency profile: {gpu} is measured at TP {f['tp_degrees'][0]} only: its other TP "
                       f"degrees rest on the all-reduce constants fitted there; measure two or more", err=True)
    for gpu, f in fit.fitted.items():
        worst = max(f["prefill_mape_pct"], f["decode_mape_pct"])
        if worst > POOR_FIT_MAPE_PCT:   # a 200% fit (H100 rows relabelled A40) planned without a word
            typer.echo(f"warning: latency profile: the fit of {gpu} is poor (in-sample MAPE {worst:.1f}%, over "
                       f"{POOR_FIT_MAPE_PCT:g}%): its plan rests on it; check the profile's units and hardware "
                       f"names", err=True)
    fitted = ", ".join(f"{g} ({f['points']} points, in-sample MAPE prefill {f['prefill_mape_pct']:.1f}%, decode "
                       f"{f['decode_mape_pct']:.1f}%)" for g, f in fit.fitted.items())
    here = "; ".join(f"{g}: {how}" for g, how in gpus.items())
    if not any(how != "the shipped calibration's constants" for how in gpus.values()):
        typer.echo(f"warning: latency profile: it sets the constants of no GPU here ({here}); the plan is the "
                   f"shipped calibration's" + (f" (fitted: {fitted})" if fitted else ""), err=True)
    else:
        typer.echo(f"latency profile: the roofline's constants fitted on {fitted}; here {here}", err=True)
    return fit.model, {"kind": "profile", "use": "roofline fitted", "profile": profile.source,
                       "sha256": profile.sha256, "fitted": fit.fitted, "too_few": fit.too_few,
                       "excluded_rows": fit.excluded_rows, "gpus": gpus}


def _render(a: dict) -> None:
    from rich.table import Table

    from ..cloud import REPLICA_COLUMNS, load_text, rented_text, replica_cells
    from ._common import console as make_console
    con = make_console()
    nodes = "rented" if a["goal"] == "cost" else "nodes"   # a fixed inventory is not rented: it is given
    con.print(f"{a['inventory']}: {a['model']} on {a['workload']}, {a['cost_usd_per_h']:.3f} $/h, planned in "
              f"{a['elapsed_s']:.2f} s; {nodes} {rented_text(a['rented'])}")
    con.print(f"network: {a['network']}; {a['kv_bits']}-bit KV on the wire")
    none = a.get("no_split_plan")   # no split plan on this inventory: the non-split plan is the answer
    if none:
        con.print(none, style="bold")
    tables = [("best non-split plan", a["non_split"]["replicas"])]
    for title, reps in ([] if none else [("split plan", a["replicas"])]) + tables:
        t = Table(title=title)
        for col in REPLICA_COLUMNS:
            t.add_column(col)
        for r in reps:
            t.add_row(*replica_cells(r))
        con.print(t)
    att = a["slo_attainment"]
    ns = a["non_split"]
    ns_att = (f"ttft {ns['slo_attainment']['ttft']:.1%} tbt {ns['slo_attainment']['tbt']:.1%} "
              f"e2e {ns['slo_attainment']['e2e']:.1%}")
    ch = a.get("non_split_chunked")
    chunked = ""
    if ch is not None:
        ratio = a["split_over_non_split_chunked_sustained"]
        over = f" (split over it {ratio:.2f}x)" if ratio is not None else ""
        chunked = f"; non-split with {ch['prefill_chunk_tokens']}-token chunked prefill {ch['sustained_rps']:.2f}{over}"
    if none:
        con.print(f"non-split: {ns['throughput_rps']:.2f} req/s (bound {ns['upper_bound_rps']:.2f})")
        con.print(f"at {a['rps']:g} req/s ({a['engine'].upper()}): non-split attainment {ns_att}")
        con.print(f"sustained at {a['target_attainment']:.0%} attainment: non-split {ns['sustained_rps']:.2f} "
                  f"req/s{chunked}")
    else:
        con.print(f"split: {a['throughput_rps']:.2f} req/s (bound {a['upper_bound_rps']:.2f}, gap {a['gap']:.1%}); "
                  f"non-split: {ns['throughput_rps']:.2f} req/s; ratio "
                  + (f"{a['split_over_non_split']:.2f}x" if a['split_over_non_split'] is not None else "n/a"))
        con.print(f"at {a['rps']:g} req/s ({a['engine'].upper()}): attainment ttft {att['ttft']:.1%} "
                  f"tbt {att['tbt']:.1%} e2e {att['e2e']:.1%}; non-split {ns_att}")
    con.print(f"busiest server's steady-state load at {a['rps']:g} req/s (at least; over 100%: falls behind): "
              f"{load_text(a)}")
    stats = a.get("scheduler_stats")
    if stats is not None:   # an on-demand --scheduler: the plan's counts at the rate
        con.print(f"--scheduler {a['scheduler']} at {a['rps']:g} req/s: {stats['preemptions']:.0f} preemptions "
                  f"({stats['recomputed_tokens']:,.0f} tokens recomputed), {stats['migrations']:.0f} migrations "
                  f"({stats['migration_downtime_s']:.3f} s downtime)")
    if a.get("no_plan_meets_target"):
        con.print(a['no_plan_meets_target'].replace('slo_scale', '--slo-scale'), style="bold", highlight=False)
    if a.get("unservable_requests"):
        con.print(f"cannot serve {a['unservable_requests']} request(s): their KV cache is larger than any "
                  f"replica of the plan holds (counted as misses above)", style="bold")
    if not none:
        con.print(f"sustained at {a['target_attainment']:.0%} attainment: split {a['sustained_rps']:.2f} req/s; "
                  f"non-split {ns['sustained_rps']:.2f}{chunked}")
        # a comparison point that sustains more: the plan above is not the one to deploy
        points = [(ns["sustained_rps"], "the best non-split plan", "non_split")]
        if ch is not None:
            points.append((ch["sustained_rps"], f"non-split with {ch['prefill_chunk_tokens']}-token chunked prefill",
                           "non_split_chunked"))
        rate, what, key = max(points, key=lambda p: p[0])
        if rate > a["sustained_rps"]:
            con.print(f"{what} sustains more than the split plan here ({rate:.2f} vs {a['sustained_rps']:.2f} "
                      f"req/s): see {key} in --json", style="bold")
    if "non_split_rental" in a:
        _render_non_split_rental(con, a)
    if "replan_skipped" in a:
        con.print(f"re-plan: {a['replan_skipped']}")
    if "replan" in a:
        _render_replan(con, a)


def _render_replan(con, a: dict) -> None:
    """The report's re-plan table (`replan_rows`): attainment before, with no re-plan, after
    the lightweight and the full re-plan, their seconds and what each changed."""
    from rich.table import Table

    from ..cloud import REPLAN_METRICS, replan_event, replan_rows
    t = Table(title=f"re-plan {replan_event(a['replan'])} at {a['rps']:g} req/s (share of requests within each "
                    f"SLO limit)")
    for col in ("case", *REPLAN_METRICS, "re-plan s", "what changed"):
        t.add_column(col, justify="right" if col in REPLAN_METRICS or col == "re-plan s" else "left")
    for row in replan_rows(a):
        t.add_row(row["name"], *(f"{row['attainment'][m]:.1%}" for m in REPLAN_METRICS), row["took"], row["changed"])
    con.print(t)


def _new_mix(replan_workload, arrival, rps, traces, seed, cv):
    """--replan-workload's trace generator: the new mix over the plan's window (a replayed file
    at the planned rate, its time rescaled), drawn with the plan's seed; errors name the flag."""
    from workloads import WorkloadError

    from ._errors import cli_message
    arrival = arrival if arrival != "replay" else None   # a replay is of the --workload file: W's own default
    try:
        return trace_generator(replan_workload, arrival, rps, traces.duration_s, seed, cv)
    except (WorkloadError, ProvisionerError, FileNotFoundError) as e:
        raise ProvisionerError(f"--replan-workload: {cli_message(e)}") from None


def _same_mix(a, b) -> bool:
    """Whether two trace generators make the same requests: one source (a shipped name, or a
    file's content), arrival process and burstiness (the window and seed are the plan's)."""
    return ((a.sha256 or a.name), a.arrival, a.cv) == ((b.sha256 or b.name), b.arrival, b.cv)


def _render_non_split_rental(con, a: dict) -> None:
    """--goal cost: the cheapest rental served non-split, beside the split one above. Both
    are chosen on attainment (ThunderServe's metric); Table VI's percentile checks are
    said beside it, as a plan can meet one and miss the other."""
    from ..cloud import checks_text, prompts_text, rented_text
    ns = a["non_split_rental"]
    if ns["cost_usd_per_h"] is None:
        con.print(f"non-split rental: none ({ns['why']})")
        return
    checks = f"Table VI percentile checks: non-split {checks_text(ns['slo'])}, split {checks_text(a['slo'])}"
    con.print(f"cheapest non-split rental for {a['rps']:g} req/s: {rented_text(ns['rented'])} "
              f"({prompts_text(ns['prefill_chunk_tokens'])}), {ns['cost_usd_per_h']:.3f} $/h "
              f"(the split rental above: {a['cost_usd_per_h']:.3f} $/h); both meet {a['target_attainment']:.0%} "
              f"attainment; {checks}")
    if ns["cost_usd_per_h"] < a["cost_usd_per_h"]:
        con.print(f"renting for a non-split plan is cheaper here ({ns['cost_usd_per_h']:.3f} vs "
                  f"{a['cost_usd_per_h']:.3f} $/h): see non_split_rental in --json", style="bold")

