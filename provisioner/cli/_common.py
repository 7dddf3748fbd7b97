"""Options and helpers shared by several commands."""

from __future__ import annotations

import json
import math

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
    if not 0 < rps < math.inf:
        raise ProvisionerError(f"--rps must be > 0 and finite, in requests per second (got {rps:g})")
    if not 0 < duration_s < math.inf:
        raise ProvisionerError(f"--duration must be > 0 and finite, in seconds (got {duration_s:g})")
    check_seed(seed)
    return make_workload(workload, rps, duration_s=duration_s, arrival=arrival, cv=cv, seed=seed)


PIPED_WIDTH = 1000   # columns of a rich console writing to a file or pipe


def console():
    """A rich console on stdout; piped or redirected, wide enough never to truncate or wrap a table."""
    from rich.console import Console

    out = Console()
    return out if out.is_terminal else Console(width=PIPED_WIDTH, soft_wrap=True)


def check_seed(seed: int) -> None:
    if not 0 <= seed < 2**63:
        raise ProvisionerError(f"--seed must be a whole number in [0, 2**63) (got {seed})")


def echo_json(obj) -> None:
    typer.echo(json.dumps(json_safe(obj), indent=2))
