"""Result rows -> the JSON objects of CONTRACTS.md."""

from __future__ import annotations

import numpy as np

from .errors import ProvisionerError
from .schedulers import DEFAULT_SCHEDULER
from .slo import METRICS, PERCENTILES

DESIGN_KEYS = ("family", "prompt_machines", "token_machines", "prompt_machine", "token_machine",
               "prompt_gpu", "token_gpu", "prompt_power_cap", "token_power_cap", "prompt_tp", "token_tp",
               "prompt_batch_cap_tokens", "prefill_chunk_tokens", "mps_prefill_share", "duplicate_weights")


def design_json(row, catalog=None) -> dict:
    """The "design" object of one result row (GPU names resolved through the catalog)."""
    if catalog is None:
        from hardware_catalog import load_catalog
        catalog = load_catalog()
    out = {}
    for k in DESIGN_KEYS:
        if k == "prompt_gpu":
            out[k] = catalog.machine(str(row["prompt_machine"])).gpu
        elif k == "token_gpu":
            out[k] = catalog.machine(str(row["token_machine"])).gpu
        else:
            out[k] = _py(row[k])
    scheduler = str(row.get("scheduler", DEFAULT_SCHEDULER) or DEFAULT_SCHEDULER)
    if scheduler != DEFAULT_SCHEDULER:   # absent for the default: earlier results stay as they were
        out["scheduler"] = scheduler
    return out


def latency_json(row) -> dict:
    """ttft_ms/tbt_ms/e2e_ms percentiles and the SLO block of one result row."""
    out = {}
    for m in METRICS:
        out[f"{m}_ms"] = {f"p{p}": _py(row[f"{m}_p{p}_s"] * 1e3) for p in PERCENTILES}
    out["slo"] = {
        "met": bool(row["slo_met"]),
        "binding": str(row["binding_slo"]),
        "unservable_requests": int(row.get("unservable_requests", 0) or 0),
        "slowdown": {m: {f"p{p}": _py(row[f"slowdown_{m}_p{p}"]) for p in PERCENTILES} for m in METRICS},
        "margin": {m: {f"p{p}": _py(row[f"margin_{m}_p{p}"]) for p in PERCENTILES} for m in METRICS},
    }
    return out


def design_result_json(row, *, workload: str, model: str, rps: float, catalog=None, trace: dict | None = None) -> dict:
    """`provision simulate --json` (CONTRACTS.md); `trace`: `TraceGenerator.to_json(rps)`, what
    rebuilds the trace the row was scored on (adds `workload_sha256` and `trace`)."""
    obj = {"design": design_json(row, catalog), "workload": str(workload), "model": str(model),
           "rps": float(rps), "requests": int(row["requests"])}
    if trace is not None:
        obj.update(workload_sha256=trace["workload_sha256"], trace={**trace, "requests": int(row["requests"])})
    obj.update(latency_json(row))
    obj.update(cost_usd_per_h=_py(row["cost_usd_per_h"]), power_kw=_py(row["power_kw"]),
               throughput_rps=_py(row["throughput_rps"]),
               energy_wh_per_request=_py(row["energy_wh_per_request"]),
               kv_transfer_visible_mean_ms=_py(row["kv_transfer_visible_mean_s"] * 1e3),
               borrowed_decodes=_py(row["borrowed_decodes"]), borrowed_prefills=_py(row["borrowed_prefills"]),
               engine=str(row.get("engine", "fluid")))
    return obj


SCHEDULER_COUNTS = ("preemptions", "migrations", "migration_downtime_s", "recomputed_tokens")


def scheduler_json(row) -> dict:
    """An on-demand scheduler's counts (`"scheduler_stats"`) and, with high-priority
    requests, per-priority percentiles (`"priority"`); {} for least-work results."""
    if "preemptions" not in row.index:
        return {}
    stats = {k: _py(row[k]) for k in SCHEDULER_COUNTS}
    stats["fragmentation_mean"] = _py(row["scheduler_fragmentation_mean"])
    if "swaps" in row.index:   # swap preemption
        stats.update(swaps=_py(row["swaps"]), swapped_bytes=_py(row["swapped_bytes"]))
    out = {"scheduler_stats": stats}
    if "ttft_p99_s_high" in row.index:
        out["priority"] = {label: {f"{m}_ms": {f"p{p}": _py(row[f"{m}_p{p}_s_{label}"] * 1e3) for p in PERCENTILES}
                                   for m in METRICS} for label in ("high", "low")}
        for label in ("high", "low"):
            if f"slo_met_{label}" in row.index:
                out["priority"][label]["slo"] = {"met": bool(row[f"slo_met_{label}"]),
                                                 "binding": str(row[f"binding_slo_{label}"])}
    return out


def json_number(v) -> float | None:
    """float(v) for a JSON number; None for None, NaN and infinities (JSON has neither)."""
    if v is None:
        return None
    v = float(v)
    return v if np.isfinite(v) else None


def json_safe(x):
    """A JSON-safe copy of nested dicts/lists: numpy scalars to Python, NaN/inf to None."""
    if isinstance(x, dict):
        return {str(k): json_safe(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [json_safe(v) for v in x]
    return _py(x)


def _py(v):
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, float) and not np.isfinite(v):
        return None
    return v


# --------------------------------------------------------------------------- re-scoring
def rescoring_question(result: dict, family: str | None = None):
    """What `provision simulate --from-result` needs to re-score one answer of a result.

    Returns (Design, workloads.TraceGenerator, rps, model, SLO): the family's reported
    design (default: the winner's), the generator of the search trace the answer was found
    on (workload, arrival, window, seed, cv; a file must still have the recorded SHA-256),
    the load of that answer, the model and the effective SLO of the question.
    """
    from workloads import TraceGenerator

    from .errors import ProvisionerError

    entry = _family_entry(result, family)
    q = result["question"]
    _refuse_missing_trace_file(q)
    from workloads import WorkloadError
    if isinstance(q, dict) and "workload" not in q:
        raise ProvisionerError("result JSON key 'question.workload' is missing; give the output of "
                               "`provision --json`")
    rps = entry.get("rps")
    if not isinstance(rps, (int, float)) or not 0 < rps < float("inf"):
        raise ProvisionerError(f"result JSON best[].rps of {entry['design']['family']} is {rps!r}; "
                               f"it needs the load the answer was found at")
    try:
        traces = TraceGenerator.from_json(q)
        traces.check_rate(rps)   # a hand-edited duration_s of 1e-300: no request to re-score
    except WorkloadError as exc:   # its parameter names are the JSON's keys here, not flags
        raise ProvisionerError(f"result JSON 'question' is invalid: {exc}") from None
    return design_from_json(entry["design"]), traces, float(rps), str(q["model"]), slo_from_question(q)


def _refuse_missing_trace_file(q: dict) -> None:
    """A replayed file (the question records its SHA-256) that is not where the result says,
    said with the fix: the path is as `provision` was given it, relative to where it ran."""
    from pathlib import Path

    from .errors import ProvisionerError

    from workloads import shipped_name

    workload = q.get("workload")
    if not q.get("workload_sha256") or not isinstance(workload, str) or Path(workload).expanduser().exists():
        return
    if shipped_name(workload) is not None:   # was "trace file 'coding' does not exist"
        raise ProvisionerError(f"the answer names the shipped workload '{workload}' but records a trace file's "
                               f"SHA-256 (result JSON key 'question.workload_sha256'), which a shipped workload "
                               f"has not; give the output of `provision --json` as it was written")
    where = ("; a relative path is read from the current directory: run from the one `provision` ran in"
             if not Path(workload).expanduser().is_absolute() else "")
    raise ProvisionerError(f"the answer's trace file '{workload}' (result JSON key 'question.workload') does not "
                           f"exist{where}, or put the file back at that path")


def _family_entry(result: dict, family: str | None) -> dict:
    from .errors import ProvisionerError

    listed = result.get("best")
    if not isinstance(listed, list):
        raise ProvisionerError(f"the result's 'best' must be a list of designs (got {type(listed).__name__}); give "
                               f"the output of `provision --json`")
    best = [b for b in listed if isinstance(b, dict) and isinstance(b.get("design"), dict)]
    names = [str(b["design"].get("family")) for b in best]
    if family is None:
        winner = result.get("winner")
        if not isinstance(winner, dict) or not isinstance(winner.get("design"), dict):
            raise ProvisionerError(f"the result has no winner (nothing in it is feasible); choose one with family "
                                   f"({', '.join(names) or 'none in the result'})", params=("family",))
        family = str(winner["design"]["family"])
    if not names:
        raise ProvisionerError("the result's 'best' holds no family's design; give the output of `provision --json`")
    if family not in names:
        raise ProvisionerError(f"family {family} is not in the result; use one of {', '.join(names)}",
                               params=("family",))
    entry = best[names.index(family)]
    if entry["design"].get("prompt_machines") is None:
        raise ProvisionerError(f"the result has no design for {family} ({entry.get('reason') or 'none scored'}); "
                               f"choose another family", params=("family",))
    return entry


# The design keys of a result, by the type each holds (`design_from_json` reads them strictly:
# 2.5 machines ran as 2, true as 1, "false" as duplicated weights).
_DESIGN_KEY_TYPES = {"family": str, "prompt_machines": int, "token_machines": int, "prompt_machine": str,
                     "token_machine": str, "prompt_power_cap": float, "token_power_cap": float, "prompt_tp": int,
                     "token_tp": int, "prompt_batch_cap_tokens": int, "prefill_chunk_tokens": int,
                     "mps_prefill_share": float, "duplicate_weights": bool, "scheduler": str}


def design_from_json(obj: dict):
    """The `Design` of a result's "design" object (`design_json`'s inverse), read strictly:
    each key of its type (an integer for counts, a number for caps, true/false for flags),
    the keys older results lack at their defaults, and the design one its family holds (a
    baseline has no token machines; a named family runs its own machine types)."""
    from .designs import OPTIONAL_DESIGN_FIELDS, Design, check_design

    values = {}
    for key, kind in _DESIGN_KEY_TYPES.items():
        if key not in obj:
            if key not in OPTIONAL_DESIGN_FIELDS:
                raise _bad_design(obj, f"lacks key '{key}'")
            values[key] = OPTIONAL_DESIGN_FIELDS[key]
            continue
        value = obj[key]
        fits = (isinstance(value, bool) if kind is bool else
                isinstance(value, (int, float)) and not isinstance(value, bool) if kind is float else
                isinstance(value, kind) and not isinstance(value, bool))
        if not fits:
            wanted = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}[kind]
            raise _bad_design(obj, f"key '{key}' is {value!r:.40}, not {wanted}")
        values[key] = float(value) if kind is float else value
    d = Design(**values)
    try:
        check_design(d)
        _check_family_shape(d)
    except ProvisionerError as exc:   # named as the file's keys, not as flags
        raise _bad_design(obj, f"is invalid: {exc}") from None
    return d


def _check_family_shape(d) -> None:
    """A named family's design as the family runs it: one pool for a baseline, its machines."""
    from .designs import CUSTOM_FAMILIES, family_spec

    if d.family in CUSTOM_FAMILIES:
        return
    spec = family_spec(d.family)
    if not spec.split and d.token_machines:
        raise ProvisionerError(f"{d.family} has one pool of mixed machines: token_machines must be 0 "
                               f"(got {d.token_machines})")
    for side in ("prompt", "token"):
        machine = getattr(d, f"{side}_machine")
        if machine != getattr(spec, f"{side}_machine"):
            raise ProvisionerError(f"{d.family} runs {getattr(spec, f'{side}_machine')} machines, not {machine} "
                                   f"({side}_machine)")


def _bad_design(obj: dict, what: str) -> ProvisionerError:
    return ProvisionerError(f"result JSON design of {str(obj.get('family'))[:40]} {what}; give the output of "
                            f"`provision --json`")


def preemption_from_question(q: dict) -> tuple[str, float]:
    """(preemption, swap_space_gb) of a result's question: how its on-demand scheduler
    preempted (recompute and vLLM's default swap space when the question does not say)."""
    from .errors import ProvisionerError
    from .schedulers import DEFAULT_SWAP_SPACE_GB, PREEMPTION_MODES, check_swap_space

    preemption = q.get("preemption", "recompute")
    if preemption not in PREEMPTION_MODES:
        raise ProvisionerError(f"result JSON key 'question.preemption' must be one of {', '.join(PREEMPTION_MODES)} "
                               f"(got {preemption!r}); give the output of `provision --json`")
    swap_space_gb = q.get("swap_space_gb", DEFAULT_SWAP_SPACE_GB)
    try:
        return preemption, check_swap_space(swap_space_gb)
    except ProvisionerError as exc:   # named as the file's key, not as a flag
        raise ProvisionerError(f"result JSON key 'question.{exc}; give the output of `provision --json`") from None


def slo_from_question(q: dict):
    """The effective SLO of a result's question: `slo` limits times `slo_scale`."""
    from .errors import ProvisionerError
    from .slo import SLO

    try:
        slo = SLO(**{m: tuple(float(v) for v in q["slo"][m]) for m in METRICS if m in (q.get("slo") or {})})
        scale = 1.0 if q.get("slo_scale") is None else float(q["slo_scale"])
    except (TypeError, ValueError) as exc:
        raise ProvisionerError(f"result JSON key 'question.slo' is malformed: {exc}") from None
    if not 0 < scale < float("inf"):   # NaN too
        raise ProvisionerError(f"result JSON key 'question.slo_scale' must be a finite number > 0 (got {scale:g}); "
                               f"give the output of `provision --json`")
    return slo.scaled(scale) if scale != 1.0 else slo
