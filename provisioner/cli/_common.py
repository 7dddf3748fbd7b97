"""Options and helpers shared by several commands."""

from __future__ import annotations

import json

import typer

from workloads import make_workload

from ..errors import ProvisionerError
from ..results import json_safe

WORKLOAD_HELP = "'coding', 'conversation', or a path to a CSV trace (canonical, Azure or SplitwiseSim header)."
DEFAULT_MODEL = "bloom-176b"
DEFAULT_WORKLOAD = "coding"
DEFAULT_DURATION_S = 120.0


def load_workload(workload: str, rps: float, duration_s: float, seed: int, arrival: str = "poisson",
                  cv: float = 2.0):
    """The request trace a command runs on (validated, one-line errors)."""
    if not rps > 0:
        raise ProvisionerError(f"--rps must be > 0 requests per second (got {rps:g})")
    if not duration_s > 0:
        raise ProvisionerError(f"--duration must be > 0 seconds (got {duration_s:g})")
    return make_workload(workload, rps, duration_s=duration_s, arrival=arrival, cv=cv, seed=seed)


def echo_json(obj) -> None:
    typer.echo(json.dumps(json_safe(obj), indent=2))
