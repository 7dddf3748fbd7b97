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


# -- measured-profile latency models (every command that simulates) ---------------
def latency_profile_option():
    return typer.Option(None, "--latency-profile", metavar="PATH.csv",
                        help="Measured prefill and decode-iteration times (SplitwiseSim's perf_model.csv "
                             "columns); interpolated per model, GPU and TP, the roofline where unmeasured.")


def latency_interp_option():
    return typer.Option(None, "--latency-interp",
                        help="How --latency-profile is interpolated: grid (default; prompt tokens x batch "
                             "size) or splitwisesim (SplitwiseSim's own rule, to reproduce its numbers).")


def load_latency_model(profile, interp: str | None):
    """The LatencyModel of a command: the roofline (None) or a fitted profile model."""
    if profile is None:
        if interp is not None:
            raise ProvisionerError("--latency-interp needs --latency-profile PATH.csv (the measurements to "
                                   "interpolate)")
        return None
    from perfmodels import load_profile_model
    return load_profile_model(profile, interp or "grid")


def latency_model_json(perf, model: str, pools, prompt_tokens=None) -> dict:
    """Warn (stderr, one line each) where the run leaves the profile; return the JSON's
    `latency_model` object."""
    notes = perf.fallbacks(model, pools, prompt_tokens)
    for note in notes:
        typer.echo(f"warning: latency profile: {note}", err=True)
    return {**perf.describe(), "fallbacks": notes}
