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
QUESTION_KEYS = ("workload", "model", "seed", "families")
BEST_KEYS = ("design", "cost_usd_per_h", "power_kw")
DESIGN_KEYS = ("family", "prompt_machines", "token_machines")
EVALUATED_KEYS = ("family", "prompt_machines", "token_machines", "cost_usd_per_h", "power_kw", "slo_met")


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
    if not isinstance(result, dict):
        raise ProvisionerError(f"a provisioning result must be a JSON object ({SCHEMA_DOC}), "
                               f"got {type(result).__name__}")
    validate_result(result)
    return result


def validate_result(result: dict) -> None:
    """Raise a one-line `ProvisionerError` naming the first missing or malformed key."""
    for key in ("goal", "constraint", "question", "best", "winner", "evaluated"):
        if key not in result:
            raise ProvisionerError(f"result JSON lacks key '{key}' (see {SCHEMA_DOC})")
    if result["goal"] not in GOALS:
        raise ProvisionerError(f"result JSON key 'goal' must be one of {', '.join(GOALS)} "
                               f"(got {result['goal']!r})")
    _require_dict(result["constraint"], "constraint")
    q = _require_dict(result["question"], "question")
    for key in QUESTION_KEYS:
        if key not in q:
            raise ProvisionerError(f"result JSON lacks key 'question.{key}' (see {SCHEMA_DOC})")
    for name in ("best", "evaluated"):
        if not isinstance(result[name], list):
            raise ProvisionerError(f"result JSON key '{name}' must be a list "
                                   f"(got {type(result[name]).__name__})")
    for i, b in enumerate(result["best"]):
        _require_keys(_require_dict(b, f"best[{i}]"), BEST_KEYS, f"best[{i}]")
        _require_keys(_require_dict(b["design"], f"best[{i}].design"), DESIGN_KEYS, f"best[{i}].design")
    if result["winner"] is not None:
        _require_keys(_require_dict(result["winner"], "winner"), BEST_KEYS, "winner")
    for i, row in enumerate(result["evaluated"]):
        _require_keys(_require_dict(row, f"evaluated[{i}]"), EVALUATED_KEYS, f"evaluated[{i}]")


def _require_dict(value, where: str) -> dict:
    if not isinstance(value, dict):
        raise ProvisionerError(f"result JSON key '{where}' must be an object (got {type(value).__name__})")
    return value


def _require_keys(obj: dict, keys, where: str) -> None:
    for key in keys:
        if key not in obj:
            raise ProvisionerError(f"result JSON lacks key '{where}.{key}' (see {SCHEMA_DOC})")


def num(value) -> float:
    """A JSON number as float; null (NaN/inf written as null) and missing become NaN."""
    if value is None or isinstance(value, bool):
        return math.nan
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan
