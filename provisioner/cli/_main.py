"""`provision --goal ...`: the main job (CONTRACTS.md, command 1).

Parses flags into a `ProvisionRequest`, runs `provisioner.search.provision` with rich
progress bars on stderr, and prints the per-family table (or the RESULT_SCHEMA.md JSON
with `--json`); `--report PATH.html` also writes the HTML report.
"""

from __future__ import annotations

from pathlib import Path

import typer

from ..designs import CUSTOM_BASELINE, CUSTOM_SPLIT, FAMILIES
from ..errors import ProvisionerError
from ._common import DEFAULT_DURATION_S, DEFAULT_MODEL, DEFAULT_WORKLOAD, WORKLOAD_HELP, echo_json


def main_command(
    ctx: typer.Context,
    goal: str = typer.Option(None, "--goal", help="cost | power (at --rps) or throughput (within a budget)."),
    rps: float = typer.Option(None, "--rps", help="Load to serve, requests/s (goals cost and power)."),
    power_budget_kw: float = typer.Option(None, "--power-budget-kw", help="Iso-power budget, provisioned kW."),
    cost_budget_usd_per_h: float = typer.Option(None, "--cost-budget-usd-per-h", help="Iso-cost budget, $/h."),
    workload: str = typer.Option(DEFAULT_WORKLOAD, "--workload", help=WORKLOAD_HELP),
    model: str = typer.Option(DEFAULT_MODEL, "--model", help="Catalog model name."),
    design: list[str] = typer.Option(None, "--design",
                                     help=f"Design family (repeatable; default all: {', '.join(FAMILIES)}; "
                                          f"or {CUSTOM_SPLIT} / {CUSTOM_BASELINE} with machine types)."),
    seed: int = typer.Option(0, "--seed", help="Seed of the search trace."),
    json_out: bool = typer.Option(False, "--json", help="Print the result JSON (RESULT_SCHEMA.md) on stdout."),
    report: Path = typer.Option(None, "--report", help="Also write the HTML report to this file."),
    force: bool = typer.Option(False, "--force", help="Overwrite the --report file if it exists."),
    duration: float = typer.Option(DEFAULT_DURATION_S, "--duration", help="Search trace length (s)."),
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
                                                  f"{CUSTOM_SPLIT} (and the machines of {CUSTOM_BASELINE})."),
    token_machine_types: str = typer.Option(None, "--token-machine-types",
                                            help=f"Comma-separated machine types for the token pool of {CUSTOM_SPLIT}."),
    power_cap_range: str = typer.Option("0.4,1.0", "--power-cap-range",
                                        help="LOW,HIGH GPU power cap (fraction of TDP) searched by custom families."),
    max_machines: int = typer.Option(None, "--max-machines", help="Count bound per pool (default: derived "
                                                                  "from a capacity estimate)."),
    trials: int = typer.Option(48, "--trials", help="Optuna trials (hardware choices) for spaces too wide to "
                                                    "enumerate."),
) -> None:
    if ctx.invoked_subcommand is not None:
        return
    if _all_defaults(ctx):
        typer.echo(ctx.get_help())
        raise typer.Exit(0)
    if goal is None:
        raise ProvisionerError("--goal is required: cost or power (with --rps) or throughput (with a budget)")
    if verify_seeds < 1:
        raise ProvisionerError(f"--verify-seeds must be >= 1 (got {verify_seeds})")
    if report is not None:
        _check_report_path(report, force)
    from ..search import ProvisionRequest, provision

    families = tuple(design) if design else None
    ptypes = _names(prompt_machine_types)
    ttypes = _names(token_machine_types)
    if (ptypes or ttypes) and not any(f in (CUSTOM_SPLIT, CUSTOM_BASELINE) for f in (families or ())):
        families = (*(families or ()), CUSTOM_SPLIT)
    request = ProvisionRequest(
        goal=goal, rps=rps, power_budget_kw=power_budget_kw, cost_budget_usd_per_h=cost_budget_usd_per_h,
        workload=workload, model=model, families=families or FAMILIES, duration_s=duration, seed=seed,
        slo_scale=slo_scale, searcher=searcher, verify=verify, verify_duration_s=verify_duration,
        verify_seeds=tuple(seed + k for k in range(1, verify_seeds + 1)), prompt_machine_types=ptypes,
        token_machine_types=ttypes or ptypes, power_cap_range=_cap_range(power_cap_range),
        max_machines=max_machines, n_trials=trials)
    with _RichProgress() as progress:
        result = provision(request, progress=progress)
    obj = result.to_json()
    if report is not None:
        from reports import write_report
        write_report(obj, report, force=force)
    if json_out:
        echo_json(obj)
        return
    from ._common import console as make_console
    console = make_console()
    result.render_table(console)
    if report is not None:
        console.print(f"report: {report}")


def _all_defaults(ctx: typer.Context) -> bool:
    """True when the user gave no option at all (then the command prints its help)."""
    sources = (ctx.get_parameter_source(p.name) for p in ctx.command.params)
    return all(s is None or s.name in ("DEFAULT", "DEFAULT_MAP") for s in sources)


def _names(text: str | None) -> tuple[str, ...] | None:
    if not text:
        return None
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    return names or None


def _cap_range(text: str) -> tuple[float, float]:
    try:
        lo, hi = (float(x) for x in text.split(","))
    except ValueError:
        raise ProvisionerError(f"--power-cap-range must be LOW,HIGH fractions of TDP such as 0.4,1.0 "
                               f"(got '{text}')") from None
    return lo, hi


def _check_report_path(path: Path, force: bool) -> None:
    """Refuse before the search, not after it, to overwrite an existing report."""
    path = Path(path)
    if path.is_dir():
        raise ProvisionerError(f"--report '{path}' is a directory; give a file name such as {path / 'report.html'}")
    if path.exists() and not force:
        raise ProvisionerError(f"--report '{path}' exists; pass --force to overwrite it")


class _RichProgress:
    """`provisioner.search.Progress` drawn with rich on stderr (nothing when stderr is not a terminal)."""

    def __enter__(self):
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, \
            TimeElapsedColumn

        console = Console(stderr=True)
        self._bar = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                             MofNCompleteColumn(), TextColumn("designs"), TimeElapsedColumn(),
                             console=console, transient=True, disable=not console.is_terminal)
        self._bar.__enter__()
        self._task = None
        return self

    def __exit__(self, *exc):
        return self._bar.__exit__(*exc)

    def start(self, label: str, total: int | None = None) -> None:
        if self._task is not None:
            self._bar.remove_task(self._task)
        self._task = self._bar.add_task(label, total=total)

    def advance(self, n: int = 1) -> None:
        if self._task is not None:
            self._bar.advance(self._task, n)

    def done(self) -> None:
        if self._task is not None:
            self._bar.remove_task(self._task)
            self._task = None
