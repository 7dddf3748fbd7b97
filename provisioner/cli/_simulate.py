"""`provision simulate`: score one design (CONTRACTS.md, command 2)."""

from __future__ import annotations

import typer

from ..designs import family_spec, make_design
from ..results import design_result_json
from ..sim import ENGINES, simulate
from ..slo import SLO
from ._common import (DEFAULT_DURATION_S, DEFAULT_MODEL, DEFAULT_WORKLOAD, WORKLOAD_HELP, echo_json,
                      load_workload)


def simulate_command(
    design: str = typer.Option(..., "--design", help="Design family, e.g. splitwise-hh or baseline-a100."),
    prompt_machines: int = typer.Option(0, "--prompt-machines", help="Prompt machines (Splitwise families)."),
    token_machines: int = typer.Option(0, "--token-machines", help="Token machines (Splitwise families)."),
    machines: int = typer.Option(0, "--machines", help="Machines of a baseline family."),
    workload: str = typer.Option(DEFAULT_WORKLOAD, "--workload", help=WORKLOAD_HELP),
    rps: float = typer.Option(70.0, "--rps", help="Request rate (requests/s)."),
    model: str = typer.Option(DEFAULT_MODEL, "--model", help="Catalog model name."),
    duration: float = typer.Option(DEFAULT_DURATION_S, "--duration", help="Trace length (s)."),
    seed: int = typer.Option(0, "--seed", help="Seed of the workload's random draws."),
    engine: str = typer.Option("fluid", "--engine", help="fluid (fast) or des (exact reference)."),
    prompt_power_cap: float = typer.Option(None, "--prompt-power-cap", help="GPU power cap of the prompt pool, fraction of TDP."),
    token_power_cap: float = typer.Option(None, "--token-power-cap", help="GPU power cap of the token pool, fraction of TDP."),
    slo_scale: float = typer.Option(1.0, "--slo-scale", help="Multiply every SLO slowdown limit (looser > 1)."),
    json_out: bool = typer.Option(False, "--json", help="Print the CONTRACTS.md JSON object."),
) -> None:
    if engine not in ENGINES:
        from ..errors import ProvisionerError
        raise ProvisionerError(f"--engine must be one of {', '.join(ENGINES)} (got '{engine}')")
    spec = family_spec(design)
    _refuse_flags_of_other_families(spec, prompt_machines, token_machines, machines, token_power_cap)
    overrides = {}
    if prompt_power_cap is not None:
        overrides["prompt_power_cap"] = prompt_power_cap
    if token_power_cap is not None:
        overrides["token_power_cap"] = token_power_cap
    if spec.split:
        d = make_design(design, prompt_machines, token_machines, **overrides)
    else:
        d = make_design(design, machines=machines, **overrides)
    trace = load_workload(workload, rps, duration, seed)
    row = simulate(d, trace, model, engine=engine, slo=SLO().scaled(slo_scale)).iloc[0]
    obj = design_result_json(row, workload=workload, model=model, rps=rps)
    if json_out:
        echo_json(obj)
        return
    _print_summary(obj, row)


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


def _print_summary(obj: dict, row) -> None:
    from rich.table import Table

    from ._common import console as make_console

    d = obj["design"]
    title = (f"{d['family']}: {d['prompt_machines']} prompt + {d['token_machines']} token machines"
             if d["token_machines"] else f"{d['family']}: {d['prompt_machines']} machines")
    table = Table(title=f"{title} — {obj['workload']}, {obj['model']}, {obj['rps']:g} req/s, {obj['requests']} requests")
    table.add_column("metric")
    for p in ("p50", "p90", "p99"):
        table.add_column(f"{p} (ms)", justify="right")
        table.add_column(f"{p} slowdown", justify="right")
    for m in ("ttft", "tbt", "e2e"):
        cells = []
        for p in ("p50", "p90", "p99"):
            cells += [f"{obj[m + '_ms'][p]:.0f}", f"{obj['slo']['slowdown'][m][p]:.2f}"]
        table.add_row(m.upper(), *cells)
    console = make_console()
    console.print(table)
    verdict = "meets every SLO" if obj["slo"]["met"] else f"violates the SLOs (binding: {row.binding_slo})"
    if obj["slo"]["unservable_requests"]:
        verdict = (f"cannot serve {obj['slo']['unservable_requests']} request(s): their KV cache is larger than "
                   f"any machine of the design holds")
    console.print(f"{verdict}; ${obj['cost_usd_per_h']:.1f}/h, {obj['power_kw']:.1f} kW, "
                  f"throughput {obj['throughput_rps']:.1f} req/s")
