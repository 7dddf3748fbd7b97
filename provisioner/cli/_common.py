"""Options and helpers shared by several commands."""

from __future__ import annotations

import json
import math

import typer

from workloads import make_workload

from ..errors import ProvisionerError

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
    typer.echo(json.dumps(_clean(obj), indent=2))


def _clean(x):
    """JSON-safe: numpy scalars to Python, NaN/inf to None."""
    if isinstance(x, dict):
        return {str(k): _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    if hasattr(x, "item") and not isinstance(x, (str, bytes)):
        x = x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x
