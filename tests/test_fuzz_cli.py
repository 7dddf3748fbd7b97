"""A property-based fuzzer of the `provision` command line (issue 9).

Hypothesis generates arguments (families, machine counts, rates, durations, seeds, power
caps, SLO scales, engines) and trace / points / result files (sizes, malformed rows,
type-confused JSON), runs them through `provisioner.cli.run` — the console script's own
error path, in-process so hundreds of cases fit in seconds — and checks what every user
relies on: exit code 0 or 2, never a traceback, and no file written anywhere but the
output the command was given. Work is bounded: at most ~100 requests per trace.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from provisioner.cli import run
from provisioner.designs import FAMILIES

FUZZ = settings(max_examples=40, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])



def mostly(valid: list[str], invalid: list[str], odds: int = 6):
    """Valid values `odds` times as often as invalid ones, so that a run of ~10 flags is
    often valid as a whole (then the command really simulates) and often not."""
    return st.sampled_from(valid * odds + invalid)


NUMBERS = mostly(["3", "20", "0.5"], ["0", "-1", "1e-9", "1e9", "1e308", "inf", "-inf", "nan", "abc", ""])
DURATIONS = mostly(["2", "5", "0.5"], ["0", "-5", "1e-4", "1e12", "inf", "nan", "x"])
SEEDS = mostly(["0", "1", "7"], ["-1", str(2**63), str(2**64 + 1), "1.5"])
COUNTS = mostly(["1", "2", "3", "6"], ["0", "-2", "1e3", "x"])
CAPS = mostly(["0.3", "0.5", "1"], ["0.01", "0.27", "1.5", "-1", "nan"], odds=2)
NAMES = mostly(list(FAMILIES), ["baseline-a10", "splitwise", "", "a</script>"])
TOKENS = mostly(["1", "2", "17", "500", "2048"], ["100000", "0", "-3", "1.5", "1e19", "nan", "x", ""], odds=4)
TIMES = mostly(["0", "0.1", "0.5", "1", "2.5"], ["-1", "nan", "inf", "x", ""], odds=4)

def invoke(argv: list[str], cwd: Path) -> tuple[int, str]:
    """Run the CLI in `cwd`; (exit code, stdout + stderr)."""
    out, err = io.StringIO(), io.StringIO()
    here = os.getcwd()
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = run(argv)
    finally:
        os.chdir(here)
    return code, out.getvalue() + err.getvalue()


def files_under(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


def check(argv: list[str], folder: Path, inputs: set[str], allowed_output: str | None = None) -> tuple[int, str]:
    """The fuzzer's invariants for one command line run in `folder` (holding only `inputs`)."""
    code, text = invoke(argv, folder)
    assert code in (0, 2), (argv, code, text[-2000:])
    assert "Traceback" not in text, (argv, text[-2000:])
    if code == 2:
        errors = [line for line in text.splitlines() if line.startswith("error: ")]
        assert len(errors) == 1, (argv, text[-2000:])
    written = files_under(folder) - inputs
    assert written <= ({allowed_output} if allowed_output and code == 0 else set()), (argv, written)
    return code, text


@pytest.fixture(autouse=True)
def traceback_dir(tmp_path, monkeypatch):
    """Internal errors would save a traceback here: the fuzzer also asserts none was."""
    folder = tmp_path / "tracebacks"
    folder.mkdir()
    monkeypatch.setenv("PROVISIONER_TRACEBACK_DIR", str(folder))
    yield folder
    assert not list(folder.iterdir()), "an internal error saved a traceback"


def trace_csv(rows: list[tuple[str, str, str]], header: str) -> str:
    return header + "\n" + "".join(",".join(r) + "\n" for r in rows)


TRACE_FILES = st.builds(
    trace_csv,
    st.lists(st.tuples(TIMES, TOKENS, TOKENS), min_size=0, max_size=4),
    mostly(["arrival_s,prompt_tokens,output_tokens"], ["TIMESTAMP,ContextTokens,GeneratedTokens",
                                                       "a,b,c", "arrival_s,prompt_tokens", ""], odds=3),
)


@FUZZ
@given(family=NAMES, prompt=COUNTS, token=COUNTS, machines=COUNTS, rps=NUMBERS, duration=DURATIONS,
       seed=SEEDS, engine=mostly(["fluid", "des"], ["exact"]), cap=st.one_of(st.none(), st.none(), CAPS),
       cap_flag=st.sampled_from(["--prompt-power-cap", "--token-power-cap"]),
       slo_scale=mostly(["1", "0.5", "2"], ["0.01", "0", "-1", "inf"]),
       trace=st.one_of(st.none(), st.none(), TRACE_FILES))
def test_simulate_never_crashes(family, prompt, token, machines, rps, duration, seed, engine, cap, cap_flag,
                                slo_scale, trace):
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        workload, inputs = "coding", set()
        if trace is not None:
            (folder / "t.csv").write_text(trace)
            workload, inputs = "t.csv", {"t.csv"}
        if _finite(rps) and _finite(duration) and float(rps) * float(duration) > 100:
            duration = "2"   # bound the work, not the validation: at most ~100 requests
            rps = str(min(float(rps), 50.0))
        argv = ["simulate", "--design", family, "--rps", rps, "--duration", duration, "--engine", engine,
                "--slo-scale", slo_scale, "--workload", workload, "--json"]
        argv += ["--seed", seed] if trace is None else []   # a replayed file has no draws to seed (refused)
        argv += (["--prompt-machines", prompt, "--token-machines", token] if family.startswith("splitwise-")
                 else ["--machines", machines])
        if cap is not None:
            argv += [cap_flag, cap]
        code, text = check(argv, folder, inputs)
        if code == 0:
            obj = json.loads(text)
            assert obj["requests"] >= 1 and "nan" not in text.lower()


@FUZZ
@given(rows=st.lists(st.tuples(mostly(["bloom-176b", "llama2-70b", "llama-7b"], ["gpt-5"]),
                               mostly(["h100-80gb", "dgx-a100", "a100-80gb"], ["tpu"]),
                               mostly(["1", "2", "8"], ["3", "16", "x"]), TOKENS, TOKENS,
                               mostly(["", "0.5", "1"], ["0", "2", "0.01"]),
                               mostly(["note", ""], ["a,b"])), min_size=1, max_size=4),
       extra_column=st.booleans(), force=st.booleans(), out=mostly(["times.csv"], ["points.csv", "sub/x.csv"], odds=4))
def test_perf_predict_never_crashes(rows, extra_column, force, out):
    header = "model,hardware,tensor_parallel,prompt_size,batch_size,power_cap" + (",comment" if extra_column else "")
    lines = [",".join(r[:6] + ((r[6],) if extra_column else ())) for r in rows]
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "points.csv").write_text(header + "\n" + "\n".join(lines) + "\n")
        argv = ["perf", "predict", "--points", "points.csv", "--out", out] + (["--force"] if force else [])
        code, _ = check(argv, folder, {"points.csv"}, allowed_output=out)
        assert (folder / "points.csv").read_text().startswith(header)   # never overwritten
        if code == 0 and extra_column:
            assert (folder / out).read_text().splitlines()[0].startswith(header.replace(",comment", ""))
            assert "comment" in (folder / out).read_text().splitlines()[0]


JUNK = st.one_of(st.none(), st.booleans(), st.integers(-3, 10**20), st.floats(allow_nan=True),
                 st.text(alphabet="<>\"'&/ascript", max_size=12), st.lists(st.integers(0, 3), max_size=2),
                 st.dictionaries(st.sampled_from(["a", "family"]), st.integers(0, 3), max_size=2))


@pytest.fixture(scope="module")
def good_result() -> dict:
    from test_reports import fixture_result

    return fixture_result(("splitwise-hh",))


@settings(max_examples=12, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(path=st.sampled_from([("goal",), ("question", "families"), ("question", "seed"), ("question", "model"),
                             ("best", 0, "design", "prompt_machines"), ("best", 0, "cost_usd_per_h"),
                             ("best", 0, "slo"), ("evaluated", 0, "slo_met"), ("evaluated", 0, "family"),
                             ("winner",), ("constraint",), ("evaluated",)]), value=JUNK)
def test_report_of_a_mangled_result_never_crashes(good_result, path, value):
    result = json.loads(json.dumps(good_result))
    target = result
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "r.json").write_text(json.dumps(result))
        check(["report", "r.json", "--out", "r.html"], folder, {"r.json"}, allowed_output="r.html")


@settings(max_examples=6, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(goal=mostly(["cost", "power", "throughput"], ["speed"]), rps=NUMBERS, duration=DURATIONS,
       seed=SEEDS, budget=st.sampled_from(["--power-budget-kw", "--cost-budget-usd-per-h"]),
       amount=mostly(["50", "300"], ["0", "1e7", "nan"]))
def test_provision_never_crashes(goal, rps, duration, seed, budget, amount):
    if _finite(rps) and _finite(duration) and float(rps) * float(duration) > 60:
        duration, rps = "3", str(min(float(rps), 20.0))
    argv = ["--goal", goal, "--design", "baseline-a100", "--duration", duration, "--seed", seed, "--no-verify",
            "--max-machines", "6"]
    argv += [budget, amount] if goal == "throughput" else ["--rps", rps]
    with tempfile.TemporaryDirectory() as tmp:
        check(argv, Path(tmp), set())


def _finite(text: str) -> bool:
    try:
        return math.isfinite(float(text))
    except ValueError:
        return False
