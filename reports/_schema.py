"""Reading a provisioning result (provisioner/RESULT_SCHEMA.md) defensively.

The report renders a JSON object written by another program (or by hand), so every
key it relies on is checked up front and a missing one is named in one line.
"""

from __future__ import annotations

import json
import math

from provisioner.errors import ProvisionerError

SCHEMA_DOC = "provisioner/RESULT_SCHEMA.md"
GOALS = ("cost", "power", "throughput")


def as_result_dict(result) -> dict:
    """A result as a dict: accepts a dict, a JSON string, or an object with `.to_json()`."""
    if hasattr(result, "to_json") and not isinstance(result, (dict, str)):
        result = result.to_json()
    if isinstance(result, (str, bytes)):
        try:
            result = json.loads(result)
        except json.JSONDecodeError as exc:
            raise ProvisionerError(f"result is not valid JSON (line {exc.lineno}, column {exc.colno}: "
                                   f"{exc.msg})") from None
        except (ValueError, RecursionError):   # an integer of over 4,300 digits; arrays nested thousands deep
            raise ProvisionerError("result is not a provisioning result (a number of over 4,300 digits, or "
                                   "nesting thousands deep)") from None
    if not isinstance(result, dict):
        raise ProvisionerError(f"a provisioning result must be a JSON object ({SCHEMA_DOC}), "
                               f"got {type(result).__name__}")
    validate_result(result)
    return result


NUMBER, INT, STR, BOOL, DICT, LIST, NULL = "number", "integer", "string", "boolean", "object", "list", "null"
# key -> (allowed JSON types, required). Values a report draws or prints are typed here, so
# a malformed file is refused in one line instead of failing somewhere inside a figure.
QUESTION_SPEC = {"workload": ((STR,), True), "model": ((STR,), True), "seed": ((INT,), True),
                 "families": ((LIST,), True), "rps": ((NUMBER, NULL), False), "duration_s": ((NUMBER, NULL), False),
                 "slo": ((DICT, NULL), False), "slo_scale": ((NUMBER, NULL), False), "arrival": ((STR, NULL), False),
                 "cv": ((NUMBER, NULL), False), "code_version": ((STR, NULL), False), "catalog": ((DICT, NULL), False)}
DESIGN_SPEC = {"family": ((STR,), True), "prompt_machines": ((INT, NULL), True), "token_machines": ((INT, NULL), True),
               "prompt_machine": ((STR, NULL), False), "token_machine": ((STR, NULL), False),
               "prompt_power_cap": ((NUMBER, NULL), False), "token_power_cap": ((NUMBER, NULL), False),
               "prompt_gpu": ((STR, NULL), False), "token_gpu": ((STR, NULL), False)}
BEST_SPEC = {"design": ((DICT,), True), "cost_usd_per_h": ((NUMBER, NULL), True), "power_kw": ((NUMBER, NULL), True),
             "feasible": ((BOOL,), False), "slo": ((DICT, NULL), False), "reason": ((STR, NULL), False),
             "searcher": ((STR, NULL), False), "evaluations": ((INT, NULL), False),
             "sustainable_rps": ((NUMBER, NULL), False), "gap_to_bound_pct": ((NUMBER, NULL), False),
             "elapsed_s": ((NUMBER, NULL), False), "rps": ((NUMBER, NULL), False),
             "lower_bound": ((NUMBER, NULL), False)}
EVALUATED_SPEC = {"family": ((STR,), True), "prompt_machines": ((INT,), True), "token_machines": ((INT,), True),
                  "cost_usd_per_h": ((NUMBER, NULL), True), "power_kw": ((NUMBER, NULL), True),
                  "slo_met": ((BOOL,), True), "binding_slo": ((STR, NULL), False), "min_margin": ((NUMBER, NULL), False),
                  "prompt_machine": ((STR, NULL), False), "token_machine": ((STR, NULL), False),
                  "prompt_power_cap": ((NUMBER, NULL), False), "token_power_cap": ((NUMBER, NULL), False),
                  "recheck": ((STR, NULL), False), "slowdown": ((DICT, NULL), False), "rps": ((NUMBER, NULL), False)}
SLO_SPEC = {"met": ((BOOL, NULL), False), "binding": ((STR, NULL), False), "slowdown": ((DICT, NULL), False),
            "margin": ((DICT, NULL), False)}


# What the other commands print with --json (keys only they have), and the page each draws itself.
OTHER_OUTPUTS = ((("inventory", "replicas"), "provision cloud",
                  "`provision report` draws it, as `provision cloud --report` does (reports.write_cloud_report)"),
                 (("static", "autoscaled"), "provision autoscale",
                  "`provision report` draws it, as `provision autoscale --report` does "
                  "(reports.write_autoscale_report)"),
                 (("design", "ttft_ms"), "provision simulate",
                  "one design's score has no design space to draw; save `provision --goal ... --json` instead"))


def answer_kind(answer) -> str | None:
    """Which command's `--json` a loaded answer is: "cloud", "autoscale", "simulate" (by the
    keys only it has), or None (a provisioning result, or not an answer at all)."""
    if not isinstance(answer, dict) or "best" in answer:
        return None
    return next((command.split()[-1] for keys, command, _ in OTHER_OUTPUTS if all(k in answer for k in keys)), None)


def validate_result(result: dict) -> None:
    """Raise a one-line `ProvisionerError` naming the first missing or mistyped key (or the
    command whose answer the file is, when another command wrote it)."""
    if "best" not in result:   # `provision cloud --json` has a goal too
        for keys, command, fix in OTHER_OUTPUTS:
            if all(k in result for k in keys):
                raise ProvisionerError(f"this is the answer of `{command} --json`, not a provisioning result "
                                       f"(`provision --goal ... --json`, {SCHEMA_DOC}); {fix}")
    for key in ("goal", "constraint", "question", "best", "winner", "evaluated"):
        if key not in result:
            raise ProvisionerError(f"result JSON lacks key '{key}' (see {SCHEMA_DOC})")
    if not isinstance(result["goal"], str) or result["goal"] not in GOALS:
        raise ProvisionerError(f"result JSON key 'goal' must be one of {', '.join(GOALS)} "
                               f"(got {_shown(result['goal'])})")
    _require_dict(result["constraint"], "constraint")
    for key, value in result["constraint"].items():
        _check_type(value, (NUMBER, NULL), f"constraint.{key}")
    q = _check_spec(result["question"], QUESTION_SPEC, "question")
    for i, family in enumerate(q["families"]):
        _check_type(family, (STR,), f"question.families[{i}]")
    for name in ("best", "evaluated"):
        if not isinstance(result[name], list):
            raise ProvisionerError(f"result JSON key '{name}' must be a list "
                                   f"(got {type(result[name]).__name__})")
    answers = [(b, f"best[{i}]") for i, b in enumerate(result["best"])]
    if result["winner"] is not None:
        answers.append((result["winner"], "winner"))
    for b, where in answers:
        _check_spec(b, BEST_SPEC, where)
        _check_spec(b["design"], DESIGN_SPEC, f"{where}.design")
        if isinstance(b.get("slo"), dict):
            _check_slo(b["slo"], f"{where}.slo")
    for i, row in enumerate(result["evaluated"]):
        _check_spec(row, EVALUATED_SPEC, f"evaluated[{i}]")
        for metric, pcts in (row.get("slowdown") or {}).items():
            for p, v in _require_dict(pcts, f"evaluated[{i}].slowdown.{metric}").items():
                _check_type(v, (NUMBER, NULL), f"evaluated[{i}].slowdown.{metric}.{p}")


def _check_slo(slo: dict, where: str) -> None:
    _check_spec(slo, SLO_SPEC, where)
    for part in ("slowdown", "margin"):
        for metric, pcts in (slo.get(part) or {}).items():
            for p, v in _require_dict(pcts, f"{where}.{part}.{metric}").items():
                _check_type(v, (NUMBER, NULL), f"{where}.{part}.{metric}.{p}")


def _check_spec(obj, spec: dict, where: str) -> dict:
    obj = _require_dict(obj, where)
    for key, (types, required) in spec.items():
        if key not in obj:
            if required:
                raise ProvisionerError(f"result JSON lacks key '{where}.{key}' (see {SCHEMA_DOC})")
            continue
        _check_type(obj[key], types, f"{where}.{key}")
    return obj


def _check_type(value, types: tuple[str, ...], where: str) -> None:
    kind = _json_type(value)
    if not (kind in types or (kind == INT and NUMBER in types)):
        raise ProvisionerError(f"result JSON key '{where}' must be {' or '.join(types)} (got {_shown(value)}, "
                               f"a {kind}; see {SCHEMA_DOC})")
    if kind == INT and INT in types and value < 0:
        raise ProvisionerError(f"result JSON key '{where}' must be >= 0 (got {value})")


def _json_type(value) -> str:
    if value is None:
        return NULL
    if isinstance(value, bool):
        return BOOL
    if isinstance(value, int):
        return INT
    if isinstance(value, float):
        return NUMBER
    if isinstance(value, str):
        return STR
    if isinstance(value, list):
        return LIST
    if isinstance(value, dict):
        return DICT
    return type(value).__name__


def _shown(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _require_dict(value, where: str) -> dict:
    if not isinstance(value, dict):
        raise ProvisionerError(f"result JSON key '{where}' must be an object (got {type(value).__name__})")
    return value


def num(value) -> float:
    """A JSON number as float; null (NaN/inf written as null) and missing become NaN."""
    if value is None or isinstance(value, bool):
        return math.nan
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan
