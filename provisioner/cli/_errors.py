"""One-line errors for the CLI: the user's mistake, named, with the fix; exit code 2."""

from __future__ import annotations


import typer

from hardware_catalog import CatalogError
from perfmodels import PerfModelError
from workloads import WorkloadError

from ..errors import ProvisionerError

USER_ERRORS = (ProvisionerError, CatalogError, PerfModelError, WorkloadError, FileNotFoundError)
EXIT_USER_ERROR = 2


def fail(message: str) -> None:
    """Print `error: message` (first line only) to stderr and exit 2."""
    line = " ".join(str(message).split("\n")[0].split()) or "failed"
    typer.echo(f"error: {line}", err=True)
    raise SystemExit(EXIT_USER_ERROR)


def positive(name: str, value: float | None) -> None:
    if value is not None and not value > 0:
        raise ProvisionerError(f"{name} must be > 0 (got {value:g})")
