"""One-line errors for the CLI: the user's mistake, named, with the fix; exit code 2."""

from __future__ import annotations

import re

import typer

from hardware_catalog import CatalogError
from perfmodels import PerfModelError
from workloads import WorkloadError

from ..errors import ProvisionerError

USER_ERRORS = (ProvisionerError, CatalogError, PerfModelError, WorkloadError, FileNotFoundError)
EXIT_USER_ERROR = 2
# The library's errors name Python parameters (`ProvisionerError.params`); the CLI says its flags.
PARAM_FLAGS = {
    "goal": "--goal", "rps": "--rps", "power_budget_kw": "--power-budget-kw",
    "cost_budget_usd_per_h": "--cost-budget-usd-per-h", "workload": "--workload", "model": "--model",
    "families": "--design", "duration_s": "--duration", "seed": "--seed", "slo_scale": "--slo-scale",
    "searcher": "--searcher", "verify_duration_s": "--verify-duration", "power_cap_range": "--power-cap-range",
    "max_machines": "--max-machines", "n_trials": "--trials", "engine": "--engine", "arrival": "--arrival",
}


def cli_message(exc: BaseException) -> str:
    """The error's message with the Python parameters it names replaced by their flags."""
    message = str(exc)
    for param in getattr(exc, "params", ()):
        if param in PARAM_FLAGS:
            message = re.sub(rf"(?<![\w-]){re.escape(param)}(?![\w-])", PARAM_FLAGS[param], message)
    return message


def fail(message: str) -> None:
    """Print `error: message` (first line only) to stderr and exit 2."""
    line = " ".join(str(message).split("\n")[0].split()) or "failed"
    typer.echo(f"error: {line}", err=True)
    raise SystemExit(EXIT_USER_ERROR)


def positive(name: str, value: float | None) -> None:
    if value is not None and not value > 0:
        raise ProvisionerError(f"{name} must be > 0 (got {value:g})")
