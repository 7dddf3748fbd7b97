"""The `provision` command: a thin typer layer over the Python API.

Each command lives in its own module and only parses flags, calls the API and renders
the answer. `main()` turns the project's typed errors into one-line messages and a
non-zero exit, never a traceback.
"""

from __future__ import annotations

import sys

import typer

from ._errors import USER_ERRORS, cli_message, fail

__all__ = ["app", "get_app", "main"]

app = typer.Typer(
    name="provision",
    help="Capacity planning for LLM inference clusters (Splitwise-style phase splitting).",
    no_args_is_help=False,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _register() -> None:
    from . import _catalog, _main, _perf, _report, _simulate

    app.callback(invoke_without_command=True)(_main.main_command)
    app.add_typer(_perf.app, name="perf", help="Latency models: predict, calibrate, plot.")
    app.command("catalog", help="List the GPUs, machines and models of the catalog.")(_catalog.catalog_command)
    app.command("simulate", help="Score one cluster design against a workload.")(_simulate.simulate_command)
    app.command("report", help="Render a saved provisioning result (JSON) as an HTML report.")(_report.report_command)


def get_app() -> typer.Typer:
    """The `provision` typer app with every command registered (for typer's CliRunner)."""
    if not app.registered_commands:
        _register()
    return app


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point."""
    get_app()
    try:
        app(args=argv, standalone_mode=True)
    except USER_ERRORS as exc:
        fail(cli_message(exc))


if __name__ == "__main__":  # pragma: no cover
    main(sys.argv[1:])
