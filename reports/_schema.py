"""Reading a provisioning result (provisioner/RESULT_SCHEMA.md) defensively.

The report renders a JSON object written by another program (or by hand), so every
key it relies on is checked up front and a missing one is named in one line.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

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


# What the cloud and autoscale pages read of their command's `--json` (each checked before
# drawing: a hand-edited value was drawn as it stood, or failed as "lacks key None").
CLOUD_SPEC = {"replicas": ((LIST,), True), "slo_attainment": ((DICT,), True), "cost_usd_per_h": ((NUMBER,), True),
              "throughput_rps": ((NUMBER,), True), "inventory": ((STR,), False), "model": ((STR,), False),
              "rps": ((NUMBER,), False), "gap": ((NUMBER,), False),
              "upper_bound_rps": ((NUMBER,), False), "target_attainment": ((NUMBER,), False),
              "sustained_rps": ((NUMBER,), False), "elapsed_s": ((NUMBER,), False), "flows": ((LIST,), False),
              "steady_state_load": ((DICT,), False), "rented": ((DICT, NULL), False),
              "non_split": ((DICT,), False), "non_split_chunked": ((DICT,), False)}
COMPARISON_SPEC = {"replicas": ((LIST,), True), "sustained_rps": ((NUMBER,), False),
                   "steady_state_load": ((DICT,), False)}   # non_split, non_split_chunked
REPLICA_SPEC = {"phase": ((STR,), True), "gpus": ((DICT,), True), "tp": ((INT,), True), "pp": ((INT,), True),
                "share": ((NUMBER,), True), "capacity_rps": ((NUMBER, NULL), False)}
REPLICA_PHASES = ("prefill", "decode", "both")
AUTOSCALE_SPEC = {"family": ((STR,), True), "model": ((STR,), False), "duration_s": ((NUMBER,), True),
                  "profile": ((DICT,), False), "static": ((DICT,), True), "autoscaled": ((DICT,), True),
                  "timeline": ((DICT,), True), "scale_on": ((STR,), True), "policy": ((DICT,), False),
                  "saving_pct": ((NUMBER,), True), "machine_hours_saving_pct": ((NUMBER,), False),
                  "energy_saving_pct": ((NUMBER,), False), "capacity_rps": ((NUMBER,), False),
                  "engine": ((STR,), False), "trace": ((DICT,), False)}
DAY_SPEC = {"machine_hours": ((NUMBER,), False), "cost_usd": ((NUMBER,), False), "energy_kwh": ((NUMBER,), False),
            "slo": ((DICT,), False), "requests": ((INT,), False), "ttft_ms": ((DICT,), False),
            "tbt_ms": ((DICT,), False), "e2e_ms": ((DICT,), False), "machines_started": ((INT,), False),
            "machines_min": ((INT,), False), "machines_max": ((INT,), False)}
SCALE_ON_SERIES = {"rate": "observed_rps", "freeness": "freeness_steps", "queue": "requests_per_machine"}


@dataclass(frozen=True)
class _Checker:
    """Checks one kind of answer, its errors worded for it: `subject` names the file and
    `fix` ends each message with what to do."""
    subject: str
    fix: str

    def error(self, what: str) -> ProvisionerError:
        return ProvisionerError(f"{self.subject} {what}{self.fix}")

    def spec(self, obj, spec: dict, where: str) -> dict:
        """`obj` (at `where`; "" the top level) with each key of `spec` of its type."""
        if not (where or isinstance(obj, dict)):
            raise self.error(f"must be a JSON object (got {_json_type(obj)})")
        obj = self.object(obj, where)
        for key, (types, required) in spec.items():
            at = f"{where}.{key}" if where else key
            if key not in obj:
                if required:
                    raise self.error(f"lacks key '{at}'")
                continue
            self.type(obj[key], types, at)
        return obj

    def type(self, value, types: tuple[str, ...], where: str) -> None:
        kind = _json_type(value)
        if not (kind in types or (kind == INT and NUMBER in types)):
            article = "an" if kind[0] in "aeiou" else "a"
            raise self.error(f"key '{where}' must be {' or '.join(types)} (got {_shown(value)}, {article} {kind})")
        if kind == INT and INT in types and value < 0:
            raise self.error(f"key '{where}' must be >= 0 (got {value})")

    def amount(self, value, where: str) -> None:
        """A number the page draws as an amount: absent, null, or finite and >= 0."""
        if value is None:
            return
        self.type(value, (NUMBER,), where)
        if not 0 <= float(value) < float("inf"):
            raise self.error(f"key '{where}' must be a finite number >= 0 (got {_shown(value)})")

    def object(self, value, where: str) -> dict:
        self.type(value, (DICT,), where)
        return value

    def one_of(self, value, allowed, where: str) -> None:
        if not (isinstance(value, str) and value in allowed):
            raise self.error(f"key '{where}' must be one of {', '.join(allowed)} (got {_shown(value)})")

    def numbers(self, values, where: str) -> None:
        """A list of numbers (a timeline's series), each a number or null."""
        if not isinstance(values, list):
            raise self.error(f"key '{where}' must be a list of numbers (got {_shown(values)})")
        for j, v in enumerate(values):
            self.type(v, (NUMBER, NULL), f"{where}[{j}]")

    def percentiles(self, blocks: dict, where: str) -> None:
        """Metric blocks (`{"ttft": {"p50": 1.2, ...}, ...}`; a block may be null): each
        percentile a number or null."""
        for metric, pcts in blocks.items():
            if pcts is not None:
                for p, v in self.object(pcts, f"{where}.{metric}").items():
                    self.type(v, (NUMBER, NULL), f"{where}.{metric}.{p}")


RESULT = _Checker("result JSON", f" (see {SCHEMA_DOC})")


def _command_checker(kind: str) -> _Checker:
    return _Checker(f"this answer of `provision {kind} --json`:", f"; save it again with `provision {kind} ... --json`")


def validate_command_answer(answer: dict, kind: str) -> None:
    """Raise a one-line `ProvisionerError` naming the first key of a `provision cloud` or
    `provision autoscale` answer (`kind`) its page cannot draw: missing, mistyped, or a
    number that is negative or not finite."""
    check = _command_checker(kind)
    if kind == "cloud":
        _check_cloud_plan(check, answer, "", CLOUD_SPEC)
        for key in ("cost_usd_per_h", "upper_bound_rps", "elapsed_s"):
            check.amount(answer.get(key), key)
        for i, flow in enumerate(answer.get("flows", [])):
            if not (isinstance(flow, list) and len(flow) == 3):
                raise check.error(f"key 'flows[{i}]' must be a list [from, to, share] (got {_shown(flow)})")
        for metric, share in answer["slo_attainment"].items():
            check.type(share, (NUMBER,), f"slo_attainment.{metric}")
        for name in ("non_split", "non_split_chunked"):
            if name in answer:
                _check_cloud_plan(check, answer[name], name, COMPARISON_SPEC)
        return
    check.spec(answer, AUTOSCALE_SPEC, "")
    check.one_of(answer["scale_on"], SCALE_ON_SERIES, "scale_on")
    check.amount(answer["duration_s"], "duration_s")
    for day in ("static", "autoscaled"):
        d = check.spec(answer[day], DAY_SPEC, day)
        for key in ("machine_hours", "cost_usd", "energy_kwh"):
            check.amount(d.get(key), f"{day}.{key}")
        check.percentiles({block: d.get(block) for block in ("ttft_ms", "tbt_ms", "e2e_ms")}, day)
    for key, v in (answer.get("policy") or {}).items():   # numbers, and a thresholds block when calibrated
        if key != "thresholds":
            check.type(v, (NUMBER, NULL, STR, BOOL), f"policy.{key}")
    machines = answer["static"].get("machines")
    check.type(machines, (INT,), "static.machines")
    if machines < 1:
        raise check.error(f"key 'static.machines' must be a count of one or more (got {machines})")
    timeline = answer["timeline"]
    for key in ("time_s", "machines", SCALE_ON_SERIES[answer["scale_on"]]):
        check.numbers(timeline.get(key), f"timeline.{key}")
    if len({len(timeline[k]) for k in ("time_s", "machines")}) != 1:
        raise check.error("keys 'timeline.time_s' and 'timeline.machines' must be as long")


def _check_cloud_plan(check: _Checker, plan: dict, where: str, spec: dict) -> None:
    """A cloud plan's replicas, rates and steady-state loads (`where`: "" the answer's own)."""
    at = (lambda key: f"{where}.{key}" if where else key)
    check.spec(plan, spec, where)
    for i, rep in enumerate(plan["replicas"]):
        r = check.spec(rep, REPLICA_SPEC, at(f"replicas[{i}]"))
        check.one_of(r["phase"], REPLICA_PHASES, at(f"replicas[{i}].phase"))
        check.amount(r["share"], at(f"replicas[{i}].share"))
        for gpu, count in r["gpus"].items():
            check.type(count, (INT,), at(f"replicas[{i}].gpus.{gpu}"))
    for key in ("throughput_rps", "rps", "sustained_rps", "target_attainment", "gap"):
        check.amount(plan.get(key), at(key))
    for key, load in (plan.get("steady_state_load") or {}).items():
        check.type(load, (NUMBER,), at(f"steady_state_load.{key}"))


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
            raise RESULT.error(f"lacks key '{key}'")
    RESULT.one_of(result["goal"], GOALS, "goal")
    for key, value in RESULT.object(result["constraint"], "constraint").items():
        RESULT.type(value, (NUMBER, NULL), f"constraint.{key}")
    q = RESULT.spec(result["question"], QUESTION_SPEC, "question")
    for i, family in enumerate(q["families"]):
        RESULT.type(family, (STR,), f"question.families[{i}]")
    for name in ("best", "evaluated"):
        RESULT.type(result[name], (LIST,), name)
    answers = [(b, f"best[{i}]") for i, b in enumerate(result["best"])]
    if result["winner"] is not None:
        answers.append((result["winner"], "winner"))
    for b, where in answers:
        RESULT.spec(b, BEST_SPEC, where)
        RESULT.spec(b["design"], DESIGN_SPEC, f"{where}.design")
        if isinstance(b.get("slo"), dict):
            slo = RESULT.spec(b["slo"], SLO_SPEC, f"{where}.slo")
            for part in ("slowdown", "margin"):
                RESULT.percentiles(slo.get(part) or {}, f"{where}.slo.{part}")
    for i, row in enumerate(result["evaluated"]):
        RESULT.spec(row, EVALUATED_SPEC, f"evaluated[{i}]")
        RESULT.percentiles(row.get("slowdown") or {}, f"evaluated[{i}].slowdown")


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
    text = "null" if value is None else repr(value)   # as the JSON wrote it
    return text if len(text) <= 40 else text[:37] + "..."


def num(value) -> float:
    """A JSON number as float; null (NaN/inf written as null) and missing become NaN."""
    if value is None or isinstance(value, bool):
        return math.nan
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan
