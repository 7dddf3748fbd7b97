"""The `provision` command: a thin typer layer over the Python API.

Each command lives in its own module and only parses flags, calls the API and renders
the answer. `run()` is the one error path (`_errors.py`): a user error at any depth (an
option given twice too, `_repeats.py`) is one line and exit 2, Ctrl-C one line and exit
130 (SIGTERM the same, exit 143; workers stopped either way), anything else one line
naming the saved traceback and exit 1. Never a traceback on the terminal.
"""

from __future__ import annotations

import os
import signal
import sys

from ._loading import ctrl_c_stops_loading

with ctrl_c_stops_loading():   # the package itself loads lazily (provisioner/__init__.py)
    import typer

    from ..workers import quiet_pool_warnings
    from ._common import check_numba_threads
    from ._errors import on_sigterm, run_guarded
    from ._repeats import refuse_folder_outputs, refuse_repeated_options

__all__ = ["app", "get_app", "main", "run"]

app = typer.Typer(
    name="provision",
    help="Capacity planning for LLM inference clusters (Splitwise-style phase splitting).",
    no_args_is_help=False,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
_registered = False


def _register() -> None:
    global _registered
    if _registered:
        return
    from . import _autoscale, _catalog, _cloud, _main, _perf, _report, _simulate, _sweep

    app.callback(invoke_without_command=True)(_main.main_command)
    app.add_typer(_perf.app, name="perf", help="Latency models: predict, calibrate, plot.")
    app.command("catalog", help="List the GPUs, machines and models of the catalog.")(_catalog.catalog_command)
    app.command("simulate", help="Score one cluster design against a workload.")(_simulate.simulate_command)
    app.command("report", help="Render a saved result (the JSON of provision, cloud or autoscale) as an HTML "
                                "report.")(_report.report_command)
    app.command("sweep", help="Answer a grid of questions (TOML spec); write a table and an HTML summary.")(
        _sweep.sweep_command)
    app.command("autoscale", help="A cluster sized for the peak against one that scales in and out over a "
                                  "rate profile: machine-hours, cost, energy, SLOs.")(_autoscale.autoscale_command)
    app.command("cloud", help="Plan a heterogeneous cloud inventory (ThunderServe): replicas, phases, routing.")(
        _cloud.cloud_command)
    _registered = True


def run(argv: list[str] | None = None) -> int:
    """Run the command line `argv`; returns the exit code (0, 1, 2, 130 or 143), never raises."""
    args = sys.argv[1:] if argv is None else list(argv)

    def command():   # all of it inside `run_guarded`: a signal between two steps is one line too
        check_numba_threads()   # before numba is imported and reads it
        with ctrl_c_stops_loading():   # the commands' modules: the search, the engines, pandas
            _register()
        quiet_pool_warnings()   # Ctrl-C: one line, not a worker-cleanup warning after it; no loky races
        root = typer.main.get_command(app)
        refuse_repeated_options(root, args)   # before click keeps the last
        refuse_folder_outputs(root, args)   # before click's Path drops the slash
        return app(args=args, prog_name="provision", standalone_mode=False)
    return run_guarded(command)


def get_app() -> typer.Typer:
    """The `provision` typer app with every command registered (for typer's CliRunner)."""
    _register()
    return app


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point."""
    _open_closed_stderr()
    signal.signal(signal.SIGTERM, on_sigterm)   # as Ctrl-C: workers stopped, one line (exit 143)
    code = run(sys.argv[1:] if argv is None else argv)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)   # the work is done: a late SIGTERM just ends the exit
    signal.signal(signal.SIGINT, signal.SIG_IGN)   # the work is done: a late Ctrl-C must not break the exit
    raise SystemExit(code)


def _open_closed_stderr() -> None:
    """Run with standard error closed (`2>&-`), Python's sys.stderr is None: the worker pool
    (loky) failed on flushing it, and a print to it wrote to stdout. Messages then go to
    /dev/null, as to a closed stream; the answer on stdout is whole."""
    if sys.stderr is not None:
        return
    try:
        os.fstat(2)
    except OSError:   # fd 2 free: /dev/null there, for this process and its workers
        fd = os.open(os.devnull, os.O_WRONLY)
        if fd != 2:
            os.dup2(fd, 2)
            os.close(fd)
        os.set_inheritable(2, True)   # os.open's descriptors close on exec: worker processes need it too
        sys.stderr = open(2, "w", encoding="utf-8", errors="backslashreplace", closefd=False)
        return
    # fd 2 holds another file (a caller of main() opened one since): never write to it
    sys.stderr = open(os.devnull, "w", encoding="utf-8")


if __name__ == "__main__":  # pragma: no cover
    main(sys.argv[1:])
