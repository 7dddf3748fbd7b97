"""`provision --goal ...`: the main job (CONTRACTS.md, command 1).

Parses flags into a `ProvisionRequest`, runs `provisioner.search.provision` with rich
progress bars on stderr, and prints the per-family table (or the RESULT_SCHEMA.md JSON
with `--json`); `--report PATH.html` also writes the HTML report.
"""

from __future__ import annotations

from pathlib import Path

import typer

from ..designs import CUSTOM_BASELINE, CUSTOM_COLOCATED, CUSTOM_FAMILIES, CUSTOM_SPLIT, FAMILIES
from .._validation import shown
from ..errors import ProvisionerError
from ..schedulers import DEFAULT_SCHEDULER, scheduler_applies_to
from ..files import check_output_path, forget_outputs
from ._common import (ARRIVAL_HELP, CV_HELP, DURATION_DEFAULT_HELP, DEFAULT_MODEL, DEFAULT_WORKLOAD, WORKLOAD_HELP,
                      RichProgress, duplicate_weights_option, echo_json, input_files, latency_interp_option,
                      latency_model_json, latency_profile_option, load_latency_model, mps_share_option,
                      prefill_chunk_option, given, refuse_idle_flags, refuse_idle_seed, replay_note, scheduler_option,
                      study_option, preemption_option, check_preemption, swap_space_option, check_swap_space_flag,
                      check_study_path, family_pools, refuse_idle_force, report_then_answer)
from ._tables import reason_text, render_result

MAX_VERIFY_SEEDS = 32   # each seed is a discrete-event run of every family's answer


def main_command(
    ctx: typer.Context,
    goal: str = typer.Option(None, "--goal", help="cost | power (at --rps) or throughput (within a budget)."),
    rps: float = typer.Option(None, "--rps", help="Load to serve, requests/s (goals cost and power; a replayed "
                                                  "trace is time-scaled to it, default its own rate)."),
    power_budget_kw: float = typer.Option(None, "--power-budget-kw", help="Iso-power budget, provisioned kW."),
    cost_budget_usd_per_h: float = typer.Option(None, "--cost-budget-usd-per-h", help="Iso-cost budget, $/h."),
    workload: str = typer.Option(DEFAULT_WORKLOAD, "--workload", help=WORKLOAD_HELP),
    model: str = typer.Option(DEFAULT_MODEL, "--model", help="Catalog model name."),
    design: list[str] = typer.Option(None, "--design",
                                     help=f"Design family (repeatable; default all: {', '.join(FAMILIES)}; "
                                          f"or {CUSTOM_SPLIT} / {CUSTOM_BASELINE} / {CUSTOM_COLOCATED} with "
                                          f"machine types)."),
    seed: int = typer.Option(0, "--seed", help="Seed of the search trace."),
    json_out: bool = typer.Option(False, "--json",
                                  help="Print the result JSON (its keys: provisioner/RESULT_SCHEMA.md) on stdout."),
    report: Path = typer.Option(None, "--report", readable=False, help="Also write the HTML report to this file."),
    force: bool = typer.Option(False, "--force", help="Overwrite the --report file if it exists."),
    duration: float = typer.Option(None, "--duration", help=f"Search trace length (s; "
                                                            f"{DURATION_DEFAULT_HELP})."),
    arrival: str = typer.Option(None, "--arrival", help=ARRIVAL_HELP),
    cv: float = typer.Option(2.0, "--cv", help=CV_HELP),
    slo_scale: float = typer.Option(1.0, "--slo-scale", help="Multiply every SLO slowdown limit (looser > 1)."),
    searcher: str = typer.Option("auto", "--searcher",
                                 help="auto | enumerate (decide every grid cell) | exhaustive (simulate every "
                                      "cell) | optuna."),
    verify: bool = typer.Option(True, "--verify/--no-verify",
                                help="Re-check finalists with the discrete-event engine on longer traces."),
    verify_duration: float = typer.Option(None, "--verify-duration", help="Verification trace length (s; "
                                                                          "default 2x --duration)."),
    verify_seeds: int = typer.Option(2, "--verify-seeds", help="Verification seeds (seed+1, seed+2, ...)."),
    prompt_machine_types: str = typer.Option(None, "--prompt-machine-types",
                                             help="Comma-separated machine types for the prompt pool of "
                                                  f"{CUSTOM_SPLIT} (and the machines of {CUSTOM_BASELINE} / "
                                                  f"{CUSTOM_COLOCATED})."),
    token_machine_types: str = typer.Option(None, "--token-machine-types",
                                            help=f"Comma-separated machine types for the token pool of {CUSTOM_SPLIT}."),
    power_cap_range: str = typer.Option("0.4,1.0", "--power-cap-range",
                                        help="LOW,HIGH GPU power cap (fraction of TDP) searched by custom families."),
    max_machines: int = typer.Option(None, "--max-machines", help="Count bound per pool (default: derived "
                                                                  "from a capacity estimate)."),
    trials: int = typer.Option(48, "--trials", help="Optuna trials (hardware choices) for spaces too wide to "
                                                    "enumerate."),
    latency_profile: str = latency_profile_option(),
    latency_interp: str = latency_interp_option(),
    prefill_chunk_tokens: int = prefill_chunk_option(),
    mps_prefill_share: float = mps_share_option(),
    duplicate_weights: bool = duplicate_weights_option(),
    study: str = study_option(),
    scheduler: str = scheduler_option(),
    preemption: str = preemption_option(),
    swap_space_gb: float = swap_space_option(),
) -> None:
    forget_outputs()   # every command runs this callback first: no output of it checked yet
    if ctx.invoked_subcommand is not None:
        return
    if _all_defaults(ctx):
        typer.echo(ctx.get_help())
        raise typer.Exit(0)
    if goal is None:
        raise ProvisionerError("--goal is required: cost or power (with --rps) or throughput (with a budget)")
    refuse_idle_flags(ctx, workload, arrival, verify)
    if not 1 <= verify_seeds <= MAX_VERIFY_SEEDS:
        raise ProvisionerError(f"--verify-seeds must be 1-{MAX_VERIFY_SEEDS} (got {verify_seeds}): each seed re-runs "
                               f"every family's answer in the discrete-event engine; 2-5 is usual")
    if verify and 0 <= seed < 2**63 <= seed + verify_seeds:   # its verification traces' seeds: seed + 1, ...
        raise ProvisionerError(f"--seed must be below 2**63 - {verify_seeds} (got {shown(seed)}): the "
                               f"discrete-event re-check draws its traces with seeds seed + 1 to seed + "
                               f"{verify_seeds}; give a smaller --seed, or --no-verify")
    check_study_path(study, (report,), "--report")   # before the search, not after it
    refuse_idle_force(force, report, "--report")
    if report is not None:
        check_output_path(report, flag="--report", force=force, force_hint="--force",
                          inputs=input_files(workload, latency_profile), stdout_taken_by="--json" if json_out else None)
    check_preemption(ctx, preemption, scheduler)
    swap_space_gb = check_swap_space_flag(ctx, preemption, swap_space_gb)
    from ..search import ProvisionRequest, check_machine_types, provision

    families = tuple(design) if design else None
    if families is None and (scheduler, preemption) != (DEFAULT_SCHEDULER, "recompute"):   # those they apply to
        families = tuple(f for f in FAMILIES if scheduler_applies_to(scheduler, f, preemption))
    ptypes = _names(prompt_machine_types, "--prompt-machine-types")
    ttypes = _names(token_machine_types, "--token-machine-types")
    for flag, flag_given in (("--mps-prefill-share", mps_prefill_share is not None),
                             ("--duplicate-weights", duplicate_weights)):
        if flag_given and families and not any(f.startswith("splitwiser") for f in families):
            raise ProvisionerError(f"{flag} applies to the splitwiser families: add --design splitwiser-h100 "
                                   f"(or splitwiser-a100, splitwiser-custom)")
    if (ptypes or ttypes) and not design and not any(f in CUSTOM_FAMILIES for f in (families or ())):
        families = (*(families or ()), CUSTOM_SPLIT)   # the default list: the types name the family
    check_machine_types(families or FAMILIES, ptypes, ttypes)   # before the flags a custom family takes
    _refuse_idle_search_flags(ctx, families or FAMILIES, searcher, goal)
    # optuna's sampler is the one other draw --seed fixes; goal throughput never runs it
    optuna_runs = goal != "throughput" and (searcher == "optuna" or
                                            any(f in CUSTOM_FAMILIES for f in families or FAMILIES))
    if not optuna_runs:
        refuse_idle_seed(ctx, workload, arrival)
    request = ProvisionRequest(
        goal=goal, rps=rps, power_budget_kw=power_budget_kw, cost_budget_usd_per_h=cost_budget_usd_per_h,
        workload=workload, model=model, families=families or FAMILIES, seed=seed, arrival=arrival, cv=cv,
        duration_s=duration,
        slo_scale=slo_scale, searcher=searcher, verify=verify, verify_duration_s=verify_duration,
        verify_seeds=tuple(seed + k for k in range(1, verify_seeds + 1)) if verify else None,
        prompt_machine_types=ptypes,
        token_machine_types=ttypes or (ptypes if CUSTOM_SPLIT in (families or ()) else None),
        power_cap_range=_cap_range(power_cap_range),
        max_machines=max_machines, n_trials=trials, prefill_chunk_tokens=prefill_chunk_tokens,
        mps_prefill_share=mps_prefill_share, duplicate_weights=duplicate_weights, scheduler=scheduler,
        preemption=preemption, swap_space_gb=swap_space_gb)
    perf = load_latency_model(latency_profile, latency_interp)
    latency = None if perf is None else latency_model_json(perf, model, family_pools(request, perf.catalog))
    with RichProgress() as progress:
        result = provision(request, progress=progress, perf=perf, study=study)
    _answer(result, request, latency, report, json_out, perf, input_files(workload, latency_profile), force)


def _refuse_idle_search_flags(ctx: typer.Context, families: tuple, searcher: str, goal: str) -> None:
    """--power-cap-range and --trials steer the search of the custom families (and
    --trials any optuna search): with none of those they would change nothing. Goal
    throughput races every design its budget affords: no searcher to choose, no trials."""
    if goal == "throughput":
        for param, flag in (("searcher", "--searcher"), ("trials", "--trials")):
            if given(ctx, param) and (param != "searcher" or searcher != "auto"):
                raise ProvisionerError(f"{flag} steers the search of goals cost and power; --goal throughput "
                                       f"races every design the budget affords (the custom families' caps on a "
                                       f"grid): drop {flag}")
    custom = any(f in CUSTOM_FAMILIES for f in families)
    if given(ctx, "power_cap_range") and not custom:
        raise ProvisionerError(f"--power-cap-range sets the power caps the custom families search; the named "
                               f"families have fixed caps: add --design {CUSTOM_SPLIT} (or {CUSTOM_BASELINE}, "
                               f"{CUSTOM_COLOCATED}), or drop --power-cap-range")
    if given(ctx, "trials") and not custom and searcher != "optuna":
        raise ProvisionerError("--trials sets the optuna search, which runs for --searcher optuna or the "
                               "custom families only: add one of them, or drop --trials")


def _answer(result, request, latency: dict | None, report, json_out: bool, perf, inputs: tuple,
            force: bool = False) -> None:
    """Write the report, then print the JSON or the tables (and what a replay did)."""
    obj = result.to_json()
    for entry in obj["best"]:   # `winner` is one of these: translated with them
        entry["reason"] = reason_text(entry["reason"])
    if latency is not None:
        obj["latency_model"] = latency
    def write() -> None:
        from reports import write_report
        # Checked before the search; without --force a file made there meanwhile is kept.
        write_report(obj, report, force=force, perf=perf, inputs=inputs, flag="--report", force_hint="--force")

    def show(written: bool) -> None:
        if json_out:
            echo_json(obj)
            return
        from ._common import console as make_console
        console = make_console()
        render_result(result, console)
        note = replay_note(request.traces(), request.rps, len(request.traces().at(request.rps))) \
            if request.rps is not None else None
        if note:
            console.print(note)
        if written:
            console.print(f"report: {report}")

    report_then_answer(report, write, show)


def _all_defaults(ctx: typer.Context) -> bool:
    """True when the user gave no option at all (then the command prints its help)."""
    sources = (ctx.get_parameter_source(p.name) for p in ctx.command.params)
    return all(s is None or s.name in ("DEFAULT", "DEFAULT_MAP") for s in sources)


def _names(text: str | None, flag: str) -> tuple[str, ...] | None:
    """Machine types of a comma-separated flag, each checked against the catalog (None: not given)."""
    if text is None:
        return None
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    if not names:   # "" or ",,": the custom family would fall back to other machines without a word
        raise ProvisionerError(f"{flag} lists no machine type (got '{text}'); give catalog machines such as "
                               f"dgx-h100,dgx-a100 (provision catalog machines)")
    from hardware_catalog import CatalogError, load_catalog
    catalog = load_catalog()
    for name in names:
        try:
            catalog.machine(name)
        except CatalogError as exc:
            raise ProvisionerError(f"{flag}: {str(exc).splitlines()[0]}") from None
    return names


def _cap_range(text: str) -> tuple[float, float]:
    try:
        lo, hi = (float(x) for x in text.split(","))
    except ValueError:
        raise ProvisionerError(f"--power-cap-range must be LOW,HIGH fractions of TDP such as 0.4,1.0 "
                               f"(got '{text}')") from None
    return lo, hi
