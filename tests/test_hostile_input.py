"""Issue 9's hostile and extreme inputs, one regression test each.

Run as a user types them: the console script in a subprocess where the exit code,
memory or signals matter, else `provisioner.cli.run` (the same error path, in-process).
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from provisioner.cli import run
from provisioner.sim import COMPILING_MESSAGE

PROVISION = str(Path(sys.executable).with_name("provision"))
GB = 1e9


def cli(*argv, cwd: Path | None = None) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of `provision ARGV` run in-process."""
    out, err = io.StringIO(), io.StringIO()
    here = os.getcwd()
    if cwd is not None:
        os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = run([str(a) for a in argv])
    finally:
        os.chdir(here)
    return code, out.getvalue(), err.getvalue()


def assert_one_line_error(code: int, stdout: str, stderr: str, *needles: str) -> str:
    assert code == 2, stderr
    assert "Traceback" not in stdout + stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


def run_measured(args, timeout_s: float) -> tuple[int, str, str, float, float]:
    """(exit code, stdout, stderr, seconds, peak RSS bytes) of `provision ARGS` (Linux wait4)."""
    t0 = time.perf_counter()
    with open(os.devnull, "rb") as stdin:
        p = subprocess.Popen([PROVISION, *map(str, args)], stdin=stdin, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    deadline = t0 + timeout_s
    while True:
        pid, status, usage = os.wait4(p.pid, os.WNOHANG)
        if pid:
            break
        if time.perf_counter() > deadline:
            p.kill()
            pytest.fail(f"provision {' '.join(map(str, args))} took more than {timeout_s} s")
        time.sleep(0.2)
    out, err = p.stdout.read(), p.stderr.read()
    p.returncode = os.waitstatus_to_exitcode(status)
    return p.returncode, out, err, time.perf_counter() - t0, usage.ru_maxrss * 1024.0


# --------------------------------------------------------------------------- out of memory
@pytest.mark.parametrize("args", [
    ["--goal", "cost", "--rps", "5000"],
    ["--goal", "throughput", "--power-budget-kw", "1e7"],
])
def test_a_huge_question_answers_or_refuses_in_60s_under_2GB(args):
    code, out, err, seconds, peak = run_measured(args, timeout_s=120)
    assert "Traceback" not in out + err
    assert code in (0, 2), err
    if code == 2:
        assert len(err.strip().splitlines()) == 1 and err.startswith("error: "), err
        assert peak < 2 * GB, f"peak RSS {peak / GB:.2f} GB"
    assert seconds < 60, f"{seconds:.0f} s"


@pytest.mark.parametrize("args, needle", [
    (["--goal", "cost", "--rps", "1e9"], "more than a trace holds"),
    (["simulate", "--design", "splitwise-hh", "--prompt-machines", "27", "--token-machines", "3",
      "--duration", "1e12"], "more than a trace holds"),
])
def test_astronomical_traces_are_refused_before_allocating(args, needle):
    assert_one_line_error(*cli(*args), needle)


def test_the_memory_budget_refuses_one_design_that_cannot_fit(monkeypatch):
    monkeypatch.setenv("PROVISIONER_MEMORY_BUDGET_GB", "0.001")
    line = assert_one_line_error(*cli("simulate", "--design", "splitwise-hh", "--prompt-machines", "27",
                                      "--token-machines", "3", "--duration", "60"), "memory budget")
    assert "shorten --duration to" in line and ("GB" in line or "MB" in line)


def test_the_memory_budget_runs_fewer_designs_at_once():
    from provisioner.sim import fluid_plan

    servers = [10, 10, 10, 10]
    one = 32 * 10 * 1000 + 128 * 1000
    assert fluid_plan(servers, 1000, False, threads=4, budget_bytes=4 * one).threads == 4
    assert fluid_plan(servers, 1000, False, threads=4, budget_bytes=2.5 * one).threads == 2
    with pytest.raises(Exception, match="memory budget"):
        fluid_plan(servers, 1000, False, threads=4, budget_bytes=0.5 * one)


# --------------------------------------------------------------------------- impossible answers
def _trace(tmp_path: Path, rows) -> Path:
    path = tmp_path / "t.csv"
    path.write_text("arrival_s,prompt_tokens,output_tokens\n" + "".join(f"{a},{s},{n}\n" for a, s, n in rows))
    return path


def test_a_prompt_whose_kv_cache_fits_nowhere_is_not_feasible(tmp_path):
    trace = _trace(tmp_path, [(0, 100_000, 10), (0.5, 1000, 20), (1.0, 500, 30)])
    assert_one_line_error(*cli("--goal", "cost", "--rps", "2", "--duration", "10", "--design", "splitwise-hh",
                               "--workload", trace, "--no-verify"), "cannot be served", "KV cache")
    code, out, err = cli("simulate", "--design", "splitwise-hh", "--prompt-machines", "3", "--token-machines", "2",
                         "--workload", trace, "--rps", "2", "--duration", "10", "--json")
    obj = json.loads(out)
    assert code == 0 and obj["slo"]["met"] is False and obj["slo"]["binding"] == "kv_capacity"
    assert obj["slo"]["unservable_requests"] > 0


def test_an_impossible_slo_scale_is_not_clamped():
    assert_one_line_error(*cli("--goal", "cost", "--rps", "5", "--slo-scale", "0.01", "--design", "splitwise-hh",
                               "--duration", "20", "--no-verify"), "no machine can meet the SLO")


def test_one_token_outputs_have_no_tbt_slo(tmp_path):
    trace = _trace(tmp_path, [(0, 100, 1), (0.5, 1000, 1), (1.0, 500, 1)])
    code, out, err = cli("--goal", "cost", "--rps", "2", "--duration", "20", "--design", "splitwise-hh",
                         "--workload", trace, "--no-verify")
    assert code == 0, err
    assert "nan" not in out.lower() and "n/a" in out and "winner: splitwise-hh" in out


def test_a_power_cap_below_the_static_power_is_refused():
    assert_one_line_error(*cli("simulate", "--design", "splitwise-hh", "--prompt-machines", "3",
                               "--token-machines", "2", "--token-power-cap", "0.01"), "--token-power-cap", "[0.28, 1]")


# --------------------------------------------------------------------------- tracebacks
@pytest.mark.parametrize("args, needle", [
    (["--goal", "cost", "--rps", "70", "--duration", "0.0001"], "too few requests"),
    (["--goal", "cost", "--rps", "70", "--duration", "inf"], "--duration"),
    (["--goal", "cost", "--rps", "70", "--seed", "-1", "--design", "baseline-a100"], "--seed"),
    (["simulate", "--design", "baseline-a100", "--machines", "3", "--seed", "-1"], "--seed"),
    (["simulate", "--design", "baseline-a100", "--machines", "3", "--rps", "0.5", "--duration", "0.5"],
     "too few requests"),
])
def test_odd_numbers_are_one_line_errors(args, needle):
    assert_one_line_error(*cli(*args), needle)


@pytest.mark.parametrize("args, needle", [
    (["--goal", "cost", "--rps", "5", "--cv", "3", "--design", "baseline-h100", "--no-verify"], "--arrival gamma"),
    (["simulate", "--design", "baseline-h100", "--machines", "3", "--cv", "4"], "--arrival gamma"),
    (["--goal", "cost", "--rps", "5", "--no-verify", "--verify-seeds", "3"], "--verify-seeds"),
    (["--goal", "cost", "--rps", "5", "--no-verify", "--verify-duration", "60"], "--verify-duration"),
    # a replay is re-checked once whatever the count: was accepted, and the answer recorded seeds [0]
    (["--goal", "cost", "--rps", "5", "--arrival", "replay", "--verify-seeds", "3"], "replays it once"),
    # a replay draws nothing to seed: was accepted and changed nothing
    (["simulate", "--design", "baseline-h100", "--machines", "3", "--arrival", "replay", "--seed", "3"],
     "a replayed trace has none"),
    (["--goal", "cost", "--rps", "5", "--design", "baseline-h100", "--arrival", "replay", "--seed", "3"],
     "a replayed trace has none"),
    (["autoscale", "--profile", "diurnal", "--rps", "3", "--design", "baseline-h100", "--arrival", "replay", "--seed",
      "3"], "a replayed trace has none"),
    # goal throughput runs no optuna, custom families or not: the seed changed nothing
    (["--goal", "throughput", "--power-budget-kw", "40", "--design", "baseline-custom", "--prompt-machine-types",
      "dgx-h100", "--arrival", "replay", "--seed", "3"], "a replayed trace has none"),
    # a mistyped name is not a replayed file: was "--seed ... a replayed trace has none"
    (["--goal", "cost", "--rps", "5", "--workload", "codng", "--seed", "3"], "unknown workload 'codng'"),
    (["simulate", "--design", "baseline-h100", "--machines", "3", "--workload", "codng", "--seed", "3"],
     "unknown workload 'codng'"),
    (["--goal", "cost", "--rps", "5", "--workload", "codng", "--verify-seeds", "3"], "unknown workload 'codng'"),
    (["--goal", "cost", "--rps", "5", "--design", "splitwise-hh", "--power-cap-range", "0.5,0.9"],
     "--design splitwise-custom"),
    (["--goal", "cost", "--rps", "5", "--design", "baseline-h100", "--trials", "10"], "--searcher optuna"),
    # goal throughput races every affordable design: both were accepted and changed nothing
    (["--goal", "throughput", "--power-budget-kw", "40", "--searcher", "optuna"], "drop --searcher"),
    (["--goal", "throughput", "--power-budget-kw", "40", "--design", "splitwise-custom", "--prompt-machine-types",
      "dgx-h100", "--trials", "4"], "drop --trials"),
    (["simulate", "--design", "baseline-h100", "--machines", "3", "--high-priority-fraction", "0.2"],
     "--scheduler jsq"),
    # silently added splitwise-custom to the user's own --design list
    (["--goal", "cost", "--rps", "5", "--design", "baseline-h100", "--token-machine-types", "dgx-h100"],
     "add 'splitwise-custom' to --design, or drop --token-machine-types"),
    # every point held out: an internal KeyError
    (["perf", "calibrate", "--holdout", "0.995", "--out", "c.toml"], "use --holdout 0.99 or less"),
    # wrote its three files into the working directory
    (["sweep", "spec.toml", "--out", ""], "--out is empty"),
    # said "is a directory" (the working directory)
    (["simulate", "--design", "baseline-h100", "--machines", "2", "--latency-profile", ""], "the path is empty"),
    # said "'.' is a directory", a path the user never typed
    (["cloud", "--inventory", "thunderserve-32gpu", "--rps", "4", "--report", ""], "--report is empty or '.'"),
    # --force with nothing to overwrite: accepted in silence
    (["--goal", "cost", "--rps", "5", "--force"], "--force overwrites the --report file, and no --report is given"),
    (["simulate", "--design", "baseline-h100", "--machines", "1", "--force"],
     "--force overwrites the --timeline file, and no --timeline is given"),
    (["cloud", "--inventory", "thunderserve-32gpu", "--rps", "4", "--force"], "give --report PATH, or drop --force"),
])
def test_a_flag_that_would_change_nothing_is_refused(args, needle):
    assert_one_line_error(*cli(*args), needle)


@pytest.mark.parametrize("mangle, needle", [
    (lambda r: r["best"][0]["design"].__setitem__("prompt_machines", "many"), "best[0].design.prompt_machines"),
    (lambda r: r["question"].__setitem__("families", 7), "question.families"),
    # named the library's "SLO.scaled: factor"; NaN was taken as 1
    (lambda r: r["question"].__setitem__("slo_scale", float("nan")), "'question.slo_scale' must be a finite number"),
    (lambda r: r["question"].__setitem__("slo_scale", 0), "'question.slo_scale' must be a finite number"),
    # internal errors (rc 1): the page read them as a table and as slowdowns
    (lambda r: r["question"].__setitem__("catalog", [1]), "'question.catalog' must be object or null"),
    (lambda r: r["evaluated"][0].__setitem__("slowdown", "x"), "'evaluated[0].slowdown' must be object or null"),
    (lambda r: r["evaluated"][0]["slowdown"].__setitem__("ttft", {"p50": "x"}), "'evaluated[0].slowdown.ttft.p50'"),
])
def test_a_mistyped_result_json_is_refused(tmp_path, mangle, needle):
    from test_reports import fixture_result

    result = fixture_result(("splitwise-hh",))
    mangle(result)
    (tmp_path / "r.json").write_text(json.dumps(result))
    assert_one_line_error(*cli("report", tmp_path / "r.json", "--out", tmp_path / "r.html"), needle)
    assert not (tmp_path / "r.html").exists()


def test_report_errors_name_the_flag_and_what_the_path_is(tmp_path):
    from test_reports import fixture_result

    (tmp_path / "r.json").write_text(json.dumps(fixture_result(("splitwise-hh",))))
    # was "baseline 'nope' ...": no flag named
    assert_one_line_error(*cli("report", tmp_path / "r.json", "--out", tmp_path / "a.html", "--baseline", "nope"),
                          "--baseline 'nope' is not a family")
    (tmp_path / "d.json").mkdir()   # was "result file 'd.json' does not exist"
    line = assert_one_line_error(*cli("report", tmp_path / "d.json", "--out", tmp_path / "b.html"), "is a directory")
    assert "does not exist" not in line and not list(tmp_path.glob("*.html"))


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_a_full_disk_is_one_line(tmp_path):
    points = tmp_path / "p.csv"
    points.write_text("model,hardware,tensor_parallel,prompt_size,batch_size\nbloom-176b,h100-80gb,8,512,1\n")
    assert_one_line_error(*cli("perf", "predict", "--points", points, "--out", "/dev/full", "--force"),
                          "No space left")
    with open("/dev/full", "w") as full:
        r = subprocess.run([PROVISION, "catalog"], stdout=full, stderr=subprocess.PIPE, text=True, timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.count("\n") == 1 and "No space left" in r.stderr


def test_perf_calibrate_to_a_full_disk_is_one_line():
    assert_one_line_error(*cli("perf", "calibrate", "--out", "/dev/full", "--force"), "No space left")


def _points(tmp_path: Path) -> Path:
    points = tmp_path / "p.csv"
    points.write_text("model,hardware,tensor_parallel,prompt_size,batch_size\nbloom-176b,h100-80gb,8,512,1\n")
    return points


@pytest.mark.parametrize("kind", ["fifo", "device", "socket"])
def test_a_special_file_as_output_needs_force(tmp_path, kind):
    """`--out` a named pipe nobody read blocked the command forever (after the work), a
    device got the bytes, a socket failed only after the run: now refused first, unless
    --force says it is meant."""
    import socket
    import threading

    if kind == "fifo":
        out, what = tmp_path / "pipe", "is a named pipe (FIFO)"
        os.mkfifo(out)
    elif kind == "device":
        out, what = Path("/dev/zero"), "is a character device"
        if not out.exists():
            pytest.skip("needs /dev/zero")
    else:
        out, what = tmp_path / "s", "is a socket"
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(out))
        sock.close()
    points = _points(tmp_path)
    assert_one_line_error(*cli("perf", "predict", "--points", points, "--out", out), what, "pass --force")
    assert_one_line_error(*cli("--goal", "cost", "--rps", "5", "--report", out), what, "pass --force")
    if kind == "fifo":   # with --force it is written, in place
        got = []
        reader = threading.Thread(target=lambda: got.append(out.read_text()))
        reader.start()
        code, _, err = cli("perf", "predict", "--points", points, "--out", out, "--force")
        reader.join(timeout=60)
        assert code == 0, err
        assert got and got[0].startswith("model,hardware") and out.is_fifo()


def test_dev_null_and_the_commands_own_stdout_need_no_force(tmp_path):
    points = _points(tmp_path)
    code, _, err = cli("perf", "predict", "--points", points, "--out", os.devnull)
    assert code == 0, err
    for stream in ("stdout", "stderr"):   # a pipe here; a terminal when typed
        r = subprocess.run([PROVISION, "perf", "predict", "--points", points, "--out", f"/dev/{stream}"],
                           stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        assert getattr(r, stream).startswith("model,hardware,tensor_parallel"), r


@pytest.mark.parametrize("mode", ["w", "a"], ids=[">", ">>"])
def test_the_commands_own_stdout_redirected_to_a_file_needs_no_force(tmp_path, mode):
    """`--out /dev/stdout > f.csv` asked for --force: /dev/stdout is then a regular file that
    exists (the shell made it). The user asked for it; with `>>` what f.csv held stays."""
    points = _points(tmp_path)
    kept = tmp_path / "kept.csv"
    kept.write_text("# mine\n")
    with open(kept, mode) as stdout:
        r = subprocess.run([PROVISION, "perf", "predict", "--points", points, "--out", "/dev/stdout"],
                           stdin=subprocess.DEVNULL, stdout=stdout, stderr=subprocess.PIPE, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stderr == "wrote 1 rows to /dev/stdout\n"   # not into the file, after the CSV
    text = kept.read_text()
    assert text.startswith("# mine\nmodel,hardware,tensor_parallel" if mode == "a" else "model,hardware"), text
    assert text.count("model,hardware") == 1 and len(text.strip().splitlines()) == 2 + (mode == "a"), text


SIMULATE = ("simulate", "--design", "baseline-h100", "--machines", "2", "--rps", "1", "--duration", "5")


def test_a_report_on_stdout_redirected_to_a_file_holds_the_report_alone(tmp_path):
    """`--report /dev/stdout > plan.html` wrote the text summary (the table, "winner: ...")
    after the page's </html>: the summary goes to standard error when an output is stdout."""
    page = tmp_path / "plan.html"
    with open(page, "w") as stdout:
        r = subprocess.run([PROVISION, "--goal", "cost", "--rps", "5", "--design", "baseline-h100", "--model",
                            "llama2-70b", "--duration", "20", "--no-verify", "--report", "/dev/stdout"],
                           stdin=subprocess.DEVNULL, stdout=stdout, stderr=subprocess.PIPE, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert page.read_text().rstrip().endswith("</html>")
    assert "winner: baseline-h100" in r.stderr


def test_a_report_on_stdout_beside_json_is_refused():
    """`--json --report /dev/stdout`: HTML then JSON on one stream, parsable as neither."""
    r = subprocess.run([PROVISION, *SIMULATE, "--scheduler", "llumnix", "--timeline", "/dev/stdout", "--json"],
                       stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and r.stdout == "", r
    assert r.stderr.strip() == ("error: --timeline '/dev/stdout' is standard output, where --json prints too: "
                                "write --timeline to a file, or drop --json")


@pytest.mark.parametrize("args", [("catalog",), (), SIMULATE, (*SIMULATE, "--json"),
                                  (*SIMULATE, "--scheduler", "llumnix", "--timeline", "/dev/stdout")],
                         ids=["catalog", "help", "simulate", "simulate-json", "timeline-on-stdout"])
def test_a_pipe_whose_reader_left_exits_0_quietly(args):
    """`provision ... | true` under `set -o pipefail`: rich's and typer's broken-pipe handling
    raise SystemExit(1); the reader had all it wanted, so exit 0 and nothing on stderr. The read
    end is closed before the command starts: its first write fails, every time."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        r = subprocess.run([PROVISION, *args], stdin=subprocess.DEVNULL, stdout=write_end, stderr=subprocess.PIPE,
                           text=True, timeout=120)
    finally:
        os.close(write_end)
    assert (r.returncode, r.stderr.replace(COMPILING_MESSAGE + "\n", "")) == (0, "")


@pytest.mark.skipif(not hasattr(__import__("fcntl"), "F_SETPIPE_SZ"), reason="needs Linux's F_SETPIPE_SZ")
def test_head_after_one_line_exits_0_quietly():
    """`provision catalog | head -1`: a one-page pipe holds less than the catalog's 7 kB, so
    the command is still writing when the reader closes after the first line."""
    import fcntl

    read_end, write_end = os.pipe()
    fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, 4096)
    p = subprocess.Popen([PROVISION, "catalog"], stdin=subprocess.DEVNULL, stdout=write_end, stderr=subprocess.PIPE,
                         text=True)
    os.close(write_end)
    first = b""
    while not first.endswith(b"\n"):
        chunk = os.read(read_end, 1)
        assert chunk, "provision catalog wrote nothing"
        first += chunk
    os.close(read_end)
    _, err = p.communicate(timeout=120)
    assert first == b"GPUs\n" and (p.returncode, err) == (0, "")


def test_a_closed_stdout_is_one_line():
    """`provision catalog >&-`: Python starts with sys.stdout None (was an internal error)."""
    r = subprocess.run([PROVISION, "catalog"], stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                       timeout=120, preexec_fn=lambda: os.close(1))
    assert_one_line_error(r.returncode, "", r.stderr, "standard output is closed", "redirect it")
    assert "internal error" not in r.stderr


def test_a_read_only_directory_is_one_line(tmp_path, monkeypatch):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    if os.geteuid() == 0:   # root writes anyway: make the file system say what it says to users
        import errno

        import provisioner.files as io_module

        def refuse(*a, **k):
            raise PermissionError(errno.EACCES, "Permission denied")

        monkeypatch.setattr(io_module.tempfile, "mkstemp", refuse)
    points = tmp_path / "p.csv"
    points.write_text("model,hardware,tensor_parallel,prompt_size,batch_size\nbloom-176b,h100-80gb,8,512,1\n")
    assert_one_line_error(*cli("perf", "predict", "--points", points, "--out", ro / "t.csv"),
                          "cannot write", "Permission denied")
    assert not (ro / "t.csv").exists()


def test_a_read_only_study_is_refused_before_the_run(tmp_path, monkeypatch):
    """It was an internal error (exit 1) at the study's first write, after the search."""
    db = tmp_path / "plans.db"
    db.write_bytes(b"")   # an empty file: SQLite takes it as a new database
    db.chmod(0o444)
    real_access = os.access
    # root may write anyway: make the check see what a user's process sees
    monkeypatch.setattr(os, "access",
                        lambda p, mode: False if Path(p) == db and mode & os.W_OK else real_access(p, mode))
    assert_one_line_error(*cli("--goal", "cost", "--rps", "5", "--design", "baseline-h100", "--no-verify",
                               "--study", db), "--study", "is read-only", "chmod u+w")


def test_a_result_file_in_a_symlink_loop_says_so(tmp_path):
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    assert_one_line_error(*cli("report", tmp_path / "a", "--out", tmp_path / "r.html"),
                          "leads into a loop of symbolic links")   # was "does not exist"
    assert_one_line_error(*cli("report", os.devnull, "--out", tmp_path / "r.html"), "is not a regular file")


def test_an_unknown_command_lists_the_commands():
    line = assert_one_line_error(*cli("nope"))
    assert line == ("error: No such command 'nope'. Commands: autoscale, catalog, cloud, perf, report, simulate, "
                    "sweep.")
    assert assert_one_line_error(*cli("perf", "nope")).endswith("Commands: calibrate, plot, predict.")


def test_an_unreadable_output_is_replaced_with_force(tmp_path, monkeypatch):
    """An atomic replace never reads the file it replaces: typer's Path check refused an
    existing output whose mode denies reading, even with --force."""
    points, out = _points(tmp_path), tmp_path / "t.csv"
    out.write_text("old")
    real_access = os.access
    monkeypatch.setattr(os, "access",
                        lambda p, mode: False if Path(p) == out and mode & os.R_OK else real_access(p, mode))
    code, _, err = cli("perf", "predict", "--points", points, "--out", out, "--force")
    assert code == 0, err
    assert out.read_text().startswith("model,hardware")


def test_an_internal_error_is_one_line_with_a_saved_traceback(tmp_path, monkeypatch):
    from rich.table import Table

    def broken(*args, **kwargs):   # a bug anywhere inside a command
        raise RuntimeError("boom")

    monkeypatch.setattr(Table, "add_row", broken)
    monkeypatch.setenv("PROVISIONER_TRACEBACK_DIR", str(tmp_path))
    code, out, err = cli("catalog")
    assert code == 1 and "Traceback" not in out + err
    (line,) = err.strip().splitlines()
    saved = Path(line.split("traceback is in ")[1])
    assert saved.parent == tmp_path and "RuntimeError: boom" in saved.read_text()


def test_an_unreadable_input_is_not_called_an_output(monkeypatch):
    import errno

    from rich.table import Table

    def refuse(*args, **kwargs):   # any open() the command did not wrap itself
        raise PermissionError(errno.EACCES, "Permission denied", "/data/profile.csv")

    monkeypatch.setattr(Table, "add_row", refuse)
    line = assert_one_line_error(*cli("catalog"), "cannot open '/data/profile.csv'", "Permission denied")
    assert "write" not in line


def test_worker_cleanup_warnings_are_dropped_and_the_users_filters_kept(monkeypatch, capsys):
    """After Ctrl-C kills the workers, loky's resource tracker (a child process) could print
    "resource_tracker: ...: FileNotFoundError" under the one-line "interrupted" (seen in CI).
    `provision` adds a filter for it to the environment its children inherit."""
    monkeypatch.setenv("PYTHONWARNINGS", "error::DeprecationWarning")
    assert run(["catalog"]) == 0
    capsys.readouterr()
    assert os.environ["PYTHONWARNINGS"].startswith("error::DeprecationWarning,")
    child = subprocess.run([sys.executable, "-c", "import warnings; "
                            "warnings.warn('resource_tracker: /loky-1-x: FileNotFoundError(2)', UserWarning); "
                            "warnings.warn('another warning', UserWarning)"],
                           capture_output=True, text=True, env=dict(os.environ), check=True)
    assert "resource_tracker" not in child.stderr and "another warning" in child.stderr


# `provision` as a terminal starts it: SIGINT at its default. Tests started in the
# background (bash's `cmd &` without job control, as CI runners do) inherit SIGINT ignored,
# and Python then never raises KeyboardInterrupt: every Ctrl-C test would skip, or fail when
# the job outlasted the wait (seen in CI: 60.1 s against 60).
_AS_FROM_A_TERMINAL = ("import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
                       "os.execv(sys.argv[1], sys.argv[1:])")


# Ctrl-C (or SIGTERM) the moment `module` starts to load: an import hook raises the signal then
_CTRL_C_WHILE_LOADING = """
import importlib.abc, signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)   # as a terminal starts it
class CtrlC(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == sys.argv[1]:
            sys.meta_path.remove(self)
            signal.raise_signal(getattr(signal, sys.argv[2]))
sys.meta_path.insert(0, CtrlC())
from provisioner.cli import main   # as the console script does
main(["--goal", "cost", "--rps", "70"])
"""


@pytest.mark.parametrize("module", ["pandas", "provisioner.cli._main"])
def test_ctrl_c_while_the_command_loads_is_one_line(module):
    """The first second of a run loads numpy, pandas and typer (the package's modules, then the
    commands'): a Ctrl-C there was a KeyboardInterrupt traceback."""
    proc = subprocess.run([sys.executable, "-c", _CTRL_C_WHILE_LOADING, module, "SIGINT"], capture_output=True,
                          text=True, timeout=120)
    assert (proc.returncode, proc.stdout, proc.stderr) == (130, "", "interrupted (Ctrl-C); stopped\n")


@pytest.mark.parametrize("module", ["pandas", "provisioner.cli._main"])
def test_sigterm_while_the_command_loads_is_one_line(module):
    """SIGTERM in that first second: while the package loaded (before `main` installs its
    handler) it killed the process without a word (exit -15), and while the commands loaded
    it was a KeyboardInterrupt traceback."""
    proc = subprocess.run([sys.executable, "-c", _CTRL_C_WHILE_LOADING, module, "SIGTERM"], capture_output=True,
                          text=True, timeout=120)
    assert (proc.returncode, proc.stdout, proc.stderr) == (143, "", "terminated (SIGTERM); stopped\n")


def test_the_package_loads_on_first_use_and_keeps_its_subpackages():
    """`import provisioner` loads no pandas (so the command can take a Ctrl-C first), and its
    public names and subpackages resolve as before (`provisioner.sim` was an AttributeError)."""
    code = ("import sys, provisioner; assert 'pandas' not in sys.modules; "
            "from provisioner import simulate, SLO; import provisioner as p; "
            "assert p.sim.simulate is simulate and p.search.provision is p.provision and p.slo.SLO is SLO; "
            "assert not hasattr(p, 'no_such_module')")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_importing_the_cli_keeps_the_importers_ctrl_c():
    """The loading guard is for the command: an importer (pytest, a notebook) keeps its handler."""
    before = signal.getsignal(signal.SIGINT)
    import provisioner.cli  # noqa: F401
    run(["catalog"])
    assert signal.getsignal(signal.SIGINT) is before


@pytest.mark.parametrize("phase", ["search", "verification"])
def test_ctrl_c_stops_the_search_with_one_line(phase):
    """Ctrl-C in a terminal signals the whole process group, joblib's workers included. The
    main job (every family; 33 s here) rather than one design (4 s): one design's search
    could end before the signal at 3 s, and its re-check within the 0.3 s after its workers
    appeared, and the test skipped (seen in CI under pytest-xdist)."""
    p = subprocess.Popen([sys.executable, "-c", _AS_FROM_A_TERMINAL, PROVISION, "--goal", "cost", "--rps", "70"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    if phase == "search":
        time.sleep(3)
    else:   # the discrete-event re-check runs in worker processes: wait until they have all started
        _wait_for_workers_to_settle(p)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(p.pid, signal.SIGINT)
    # a signal that came while the workers were starting is held until they have
    # (`start_executor_deaf_to_ctrl_c`; it was lost, and the job ran on, exit 0)
    out, err = p.communicate(timeout=300)
    if p.returncode == 0:
        pytest.skip("the search finished before the signal")
    assert p.returncode == 130, err
    assert err.strip().splitlines() == ["interrupted (Ctrl-C); stopped"], err
    assert out == ""
    time.sleep(1)
    assert _live_processes_of_group(p.pid) == [], "a worker outlived the command"


def test_a_long_discrete_event_run_says_so_first_and_ctrl_c_stops_it():
    """A DES over hours of traffic ran minutes in silence. Now one line on stderr first
    (roughly how long; Ctrl-C stops it), nothing on stdout, and its promise holds."""
    long_run = ["simulate", "--design", "baseline-a100", "--machines", "20", "--rps", "70", "--duration",
                "7200", "--engine", "des", "--json"]   # 504,000 requests
    p = subprocess.Popen([sys.executable, "-c", _AS_FROM_A_TERMINAL, PROVISION, *long_run],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    notice = next(line for line in p.stderr if line.strip() != COMPILING_MESSAGE)
    assert re.fullmatch(r"the discrete-event engine has 504,000 requests to simulate: roughly \d+ s; "
                        r"Ctrl-C stops it\n", notice), notice
    time.sleep(1)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(p.pid, signal.SIGINT)
    out, err = p.communicate(timeout=60)
    assert (p.returncode, out, err.strip()) == (130, "", "interrupted (Ctrl-C); stopped")
    code, out, err = cli("simulate", "--design", "baseline-a100", "--machines", "20", "--rps", "70",
                         "--engine", "des", "--json")   # the default 120 s: no notice
    assert code == 0 and json.loads(out)["requests"] == 8400
    assert [line for line in err.splitlines() if line != COMPILING_MESSAGE] == [], err


# Ctrl-C one second into a fluid batch of 1,600 designs run to the end (3-9 s here)
_CTRL_C_IN_A_FLUID_BATCH = """
import os, signal, threading, time
signal.signal(signal.SIGINT, signal.default_int_handler)   # as a terminal starts it
from provisioner.designs import grid, make_design
from provisioner.sim import simulate
from workloads import make_workload
trace = make_workload("coding", 70, duration_s=120, seed=0)
simulate(make_design("splitwise-hh", 2, 1), trace)   # the kernel loaded (or compiled) first
space = grid("splitwise-hh", range(1, 41), range(1, 41))
sent = []
def ctrl_c():
    time.sleep(1.0)
    sent.append(time.perf_counter())
    os.kill(os.getpid(), signal.SIGINT)
threading.Thread(target=ctrl_c, daemon=True).start()
try:
    simulate(space, trace)
    print("finished")
except KeyboardInterrupt:
    print(time.perf_counter() - sent[0])
"""


@pytest.mark.parametrize("threads", ["1", "2"])
def test_ctrl_c_stops_a_fluid_batch_within_a_second(threads):
    """A compiled kernel takes no signal: the fluid engine ran a whole batch before a Ctrl-C
    took effect (4.3 s after it here, on the Fig. 12 space). The kernels now run on worker
    threads and read a stop flag that the waiting main thread sets (milliseconds)."""
    proc = subprocess.run([sys.executable, "-c", _CTRL_C_IN_A_FLUID_BATCH], capture_output=True, text=True,
                          timeout=600, env={**os.environ, "NUMBA_NUM_THREADS": threads})
    assert proc.returncode == 0, proc.stderr
    if proc.stdout.strip() == "finished":
        pytest.skip("the batch finished before the signal")
    assert float(proc.stdout) < 1.0, proc.stdout


def test_sigterm_to_the_command_alone_stops_its_workers_too():
    """`kill PID` (SIGTERM, to the parent only: a job scheduler's stop) once the DES re-check's
    workers run: it takes Ctrl-C's path, so no worker outlives the command (before, the
    parent died at once and its workers computed on, orphaned)."""
    p = subprocess.Popen([sys.executable, "-c", _AS_FROM_A_TERMINAL, PROVISION, "--goal", "cost", "--rps", "70"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    _wait_for_workers_to_settle(p)
    with contextlib.suppress(ProcessLookupError):
        p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=300)
    if p.returncode == 0:
        pytest.skip("the search finished before the signal")
    assert p.returncode == 143, err
    assert err.strip().splitlines() == ["terminated (SIGTERM); stopped"], err
    time.sleep(1)
    assert _live_processes_of_group(p.pid) == [], "a worker outlived the command"


def _wait_for_workers_to_settle(p, settle_s=0.5, timeout_s=120) -> None:
    """Until worker processes exist and none has started for `settle_s`: the phase the test
    means to interrupt (the re-check running), not the workers' start."""
    deadline = time.time() + timeout_s
    seen, since = set(), time.time()
    while p.poll() is None and time.time() < deadline:
        now = set(_workers_of_group(p.pid))
        if now - seen:
            seen |= now
            since = time.time()
        elif seen and time.time() - since >= settle_s:
            return
        time.sleep(0.1)


def _workers_of_group(pgid: int) -> list[int]:
    return [pid for pid in _live_processes_of_group(pgid)
            if b"LokyProcess" in Path(f"/proc/{pid}/cmdline").read_bytes()]


def _live_processes_of_group(pgid: int) -> list[int]:
    """Processes of a process group that still run (zombies, awaiting their reaper, do not)."""
    alive = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            alive.append(int(stat.parent.name))
    return alive


# --------------------------------------------------------------------------- options given twice
@pytest.mark.parametrize("args, needle", [
    (["--goal", "cost", "--rps", "70", "--rps", "80"], "--rps is given twice ('70', then '80')"),
    (["--goal", "cost", "--rps=70", "--rps", "80"], "--rps is given twice ('70', then '80')"),
    (["--goal", "cost", "--rps", "70", "--verify", "--no-verify"], "--verify and --no-verify are both given"),
    (["--goal", "cost", "--rps", "70", "--json", "--json"], "--json is given twice"),
    (["simulate", "--design", "baseline-a100", "--machines", "2", "--machines", "3"], "--machines is given twice"),
    (["cloud", "--inventory", "thunderserve-32gpu", "--rps", "1", "--inventory", "cloud-prices"],
     "--inventory is given twice"),
    (["autoscale", "--design", "baseline-a100", "--profile", "diurnal", "--design", "baseline-h100"],
     "--design is given twice"),   # one family here, unlike `provision --design`
    (["sweep", "spec.toml", "--jobs", "1", "--out", "o", "--jobs=2"], "--jobs is given twice ('1', then '2')"),
    (["perf", "predict", "--points", "a.csv", "--out", "o.csv", "--out", "p.csv"], "--out is given twice"),
])
def test_an_option_given_twice_is_refused(args, needle):
    """click kept the last value without a word: `--rps 70 --rps 80` planned for 80 req/s."""
    assert_one_line_error(*cli(*args), needle, "give")


def test_an_option_given_twice_is_refused_as_typed():
    r = subprocess.run([PROVISION, "--goal", "cost", "--rps", "70", "--rps", "80"], stdin=subprocess.DEVNULL,
                       capture_output=True, text=True, timeout=120)
    assert_one_line_error(r.returncode, r.stdout, r.stderr, "--rps is given twice", "give it once")


@pytest.mark.parametrize("args, needle", [
    (["--goal", "cost", "--rps", "0", "--design", "baseline-a100", "--design", "baseline-h100"], "--rps must be"),
    (["cloud", "--inventory", "thunderserve-32gpu", "--rps", "1", "--without", "a40-8x-0", "--without",
      "a6000-4x-0"], "--without takes one node"),   # its own rule, not this one
])
def test_repeatable_options_may_repeat(args, needle):
    line = assert_one_line_error(*cli(*args), needle)
    assert "given twice" not in line


# --------------------------------------------------------------------------- ignored flags, lost data
@pytest.mark.parametrize("args, needle", [
    (["simulate", "--design", "baseline-a100", "--prompt-machines", "5", "--token-machines", "3"], "--machines N"),
    (["simulate", "--design", "baseline-a100", "--machines", "5", "--token-power-cap", "0.5"], "no token pool"),
    (["simulate", "--design", "splitwise-hh", "--machines", "5"], "--prompt-machines N"),
])
def test_flags_of_another_family_are_refused(args, needle):
    assert_one_line_error(*cli(*args), needle)


def test_report_never_overwrites_its_own_input(tmp_path):
    from test_reports import fixture_result

    src = tmp_path / "good.json"
    src.write_text(json.dumps(fixture_result(("splitwise-hh",))))
    before = src.read_text()
    assert_one_line_error(*cli("report", src, "--out", src, "--force"), "input")
    assert src.read_text() == before


@pytest.mark.parametrize("args,shipped", [
    (("cloud", "--inventory", "thunderserve-32gpu", "--rps", "1", "--report"),
     ("hardware_catalog", "data/inventories/thunderserve-32gpu.toml")),
    (("cloud", "--inventory", "thunderserve-32gpu", "--rps", "1", "--report"), ("workloads", "data/code.csv")),
    (("--goal", "cost", "--rps", "2", "--report"), ("hardware_catalog", "data/gpus/a100-80gb.toml")),
    # a new file there: the catalog loader reads every *.toml of the folder
    (("cloud", "--inventory", "thunderserve-32gpu", "--rps", "1", "--report"), ("hardware_catalog", "data/gpus/zz.toml")),
    (("perf", "predict", "--points", "POINTS", "--out"), ("hardware_catalog", "data/gpus/a40.toml")),
    (("--goal", "cost", "--rps", "2", "--duration", "3", "--design", "baseline-a100", "--no-verify",
      "--max-machines", "4", "--study"), ("hardware_catalog", "data/gpus/s.toml")),
    (("sweep", "SPEC", "--out"), ("workloads", "data/sweep")),   # was refused only after the sweep ran
    # the plotly.js every report inlines
    (("cloud", "--inventory", "thunderserve-32gpu", "--rps", "1", "--report"),
     ("reports", "_vendor/plotly-cartesian.min.js")),
])
def test_no_output_lands_in_the_shipped_packages(tmp_path, args, shipped):
    """`--inventory thunderserve-32gpu` reads the package's TOML, `--workload coding` its
    CSV, every command the catalog, every report the vendored plotly.js: no output goes
    into the shipped packages, --force or not (was: HTML written over the shipped
    inventory, or a new TOML in the catalog folder, and every later run failed on it)."""
    from importlib import resources

    points, spec = tmp_path / "points.csv", tmp_path / "s.toml"
    points.write_text("model,hardware,tensor_parallel,prompt_size,batch_size\nllama2-70b,h100-80gb,8,512,1\n")
    spec.write_text('rps = [2]\nfamilies = ["baseline-a100"]\nduration_s = 3\nverify = false\nmax_machines = 4\n')
    args = tuple({"POINTS": points, "SPEC": spec}.get(a, a) for a in args)
    package, name = shipped
    path = Path(str(resources.files(package))) / name
    before = path.read_bytes() if path.is_file() else None
    assert_one_line_error(*cli(*args, path, "--force"), args[-1], "shipped code and data", "input")
    assert (path.read_bytes() if path.is_file() else None) == before and (before is not None or not path.exists())


def test_a_study_database_is_never_an_output(tmp_path):
    """Was: the search kept its work in the --study file, then the report replaced it (exit 0)."""
    line = assert_one_line_error(*cli("--goal", "cost", "--rps", "2", "--duration", "3", "--design", "baseline-a100",
                                      "--no-verify", "--max-machines", "4", "--study", "plan.html", "--report",
                                      tmp_path / "plan.html", cwd=tmp_path), "--report", "--study database")
    assert not (tmp_path / "plan.html").exists(), line
    spec = tmp_path / "s.toml"
    spec.write_text('rps = [2]\nfamilies = ["baseline-a100"]\nduration_s = 3\nverify = false\nmax_machines = 4\n')
    assert_one_line_error(*cli("sweep", spec, "--out", tmp_path / "out", "--study", tmp_path / "out" / "results.csv"),
                          "--out", "--study database")
    assert not (tmp_path / "out").exists()


def test_perf_predict_refuses_fractional_tokens_and_keeps_extra_columns(tmp_path):
    points = tmp_path / "p.csv"
    points.write_text("model,hardware,tensor_parallel,prompt_size,batch_size,note\n"
                      "bloom-176b,h100-80gb,8,512.5,1,x\n")
    assert_one_line_error(*cli("perf", "predict", "--points", points, "--out", tmp_path / "o.csv"),
                          "prompt_size", "whole number")
    points.write_text("model,hardware,tensor_parallel,prompt_size,batch_size,note\n"
                      "bloom-176b,h100-80gb,8,512,1,first run\n")
    code, _, err = cli("perf", "predict", "--points", points, "--out", tmp_path / "o.csv")
    assert code == 0, err
    header, row = (tmp_path / "o.csv").read_text().splitlines()
    assert header.split(",")[:6] == ["model", "hardware", "tensor_parallel", "prompt_size", "batch_size", "note"]
    assert "first run" in row and header.endswith("prompt_time_ms,token_time_ms")


# --------------------------------------------------------------------------- readable output
def test_piped_catalog_never_truncates_names(tmp_path):
    with open(tmp_path / "f.txt", "w") as f:
        r = subprocess.run([PROVISION, "catalog", "models"], stdout=f, stderr=subprocess.PIPE, text=True, timeout=120)
    text = (tmp_path / "f.txt").read_text()
    assert r.returncode == 0 and "…" not in text
    for name in ("llama2-70b", "llama3-70b", "bloom-176b"):
        assert name in text


def test_overflowing_token_counts_are_named_as_written(tmp_path):
    trace = _trace(tmp_path, [(0, "1e19", 10), (0.5, 1000, 20)])
    line = assert_one_line_error(*cli("simulate", "--design", "baseline-a100", "--machines", "2",
                                      "--workload", trace, "--duration", "5", "--rps", "1"), "1e19")
    assert "-9223372036854775808" not in line


def test_overwrite_message_names_one_override_only(tmp_path):
    """The library names its parameter, the CLI its flag; never both ("--force (force=True)")."""
    from reports import write_report
    from provisioner.errors import ProvisionerError

    with pytest.raises(ProvisionerError) as info:
        write_report({}, __file__)
    assert "force=True" in str(info.value) and "--force" not in str(info.value)
    existing = tmp_path / "plan.html"
    existing.write_text("keep me")
    line = assert_one_line_error(*cli("report", __file__, "--out", existing), "--force")
    assert "force=True" not in line and existing.read_text() == "keep me"


def test_a_misspelt_workload_gets_a_suggestion():
    assert_one_line_error(*cli("--goal", "cost", "--rps", "5", "--workload", "codng"), "did you mean 'coding'")


def test_the_library_names_parameters_and_the_cli_names_flags():
    import provisioner

    with pytest.raises(provisioner.ProvisionerError) as err:
        provisioner.make_design("splitwiser-h100", machines=3, mps_prefill_share=1.5)
    assert str(err.value).startswith("mps_prefill_share must be") and "--" not in str(err.value)
    assert_one_line_error(*cli("simulate", "--design", "splitwiser-h100", "--machines", "3",
                               "--mps-prefill-share", "1.5"), "--mps-prefill-share must be")


# --------------------------------------------------------------------------- a review's findings (2026-11-27)
@pytest.mark.parametrize("args, needle", [
    (["--goal", "cost", "--rps", "1e308", "--design", "splitwise-hh"], "more than a trace holds"),   # was OverflowError
    (["--goal", "cost", "--rps", "5", "--duration", "1e308", "--design", "splitwise-hh"], "more than a trace holds"),
    (["--goal", "cost", "--rps", "5", "--arrival", "gamma", "--cv", "1e308"], "--cv must be between"),
    (["--goal", "cost", "--rps", "5", "--arrival", "gamma", "--cv", "1e-300"], "--cv must be between"),
    (["--goal", "cost", "--rps", "5", "--verify-seeds", "99999999999"], "--verify-seeds must be 1-32"),   # was ~GBs
    (["--goal", "throughput", "--design", "splitwise-hh", "--power-budget-kw", "1e9"], "buys over 10,000 machines"),
    (["--goal", "throughput", "--cost-budget-usd-per-h", "1e308"], "--cost-budget-usd-per-h 1e+308 buys over"),
    (["--goal", "throughput", "--design", "splitwise-hh", "--power-budget-kw", "1e9", "--max-machines", "20000"],
     "buys over 10,000 machines of one pool of splitwise-hh, more than the planner simulates; give a budget of at "
     "most"),   # the affordable designs are enumerated up to --max-machines per pool (below 10,000: no refusal)
    (["--goal", "cost", "--rps", "5", "--max-machines", "100000000"], "--max-machines must be an integer in"),
    (["--goal", "cost", "--rps", "inf"], "--rps must be a finite number > 0"),
    (["autoscale", "--profile", "diurnal", "--rps", "15", "--duration", "1e308", "--design", "baseline-a100"],
     "lasts at most 366 days"),
    (["autoscale", "--profile", "diurnal", "--rps", "1e308", "--design", "baseline-a100"], "holds inf requests"),
    (["--goal", "cost", "--rps", "5", "--slo-scale", "1e308"], "--slo-scale 1e+308 makes the limits infinite"),
    (["cloud", "--inventory", "thunderserve-32gpu", "--rps", "1e4", "--duration", "20"],   # was minutes of DES
     "--rps 10000 is over 4x what this inventory carries"),
])
def test_extreme_numbers_are_one_line_errors(args, needle):
    assert_one_line_error(*cli(*args), needle)


def test_a_path_in_an_error_is_printed_as_the_user_wrote_it(tmp_path):
    """Flag names replace the parameters an error names, never words inside a quoted path or
    header, nor plain words such as "arrival" in a file's message."""
    folder = tmp_path / "rps"
    folder.mkdir()
    trace = folder / "seed.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\nsoon,10,10\n")
    line = assert_one_line_error(*cli("simulate", "--design", "splitwise-hh", "--prompt-machines", "2",
                                      "--token-machines", "1", "--workload", trace), "line 2")
    assert f"'{trace}'" in line and "--rps/--seed" not in line and "--arrival" not in line


def test_a_path_that_reads_as_rich_markup_is_printed_as_written(tmp_path):
    """A folder named '[/b]' (or an inventory's node '[red]n[/red]') was a MarkupError, exit 1,
    after the whole run: the tables read the user's text as rich markup."""
    folder = tmp_path / "[red]x[/red]" / "[/b]"   # folders '[red]x[', 'red]', '[' and 'b]'
    folder.mkdir(parents=True)
    trace = folder / "t.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n0.0,500,100\n1.0,800,200\n")
    code, out, err = cli("simulate", "--design", "baseline-a100", "--machines", "2", "--workload", trace)
    assert code == 0 and err == "" and str(trace) in out, err


def test_files_saved_with_a_byte_order_mark_are_read(tmp_path):
    """Excel and Notepad write UTF-8 with a BOM: an inventory and a rate profile so saved read as without."""
    shipped = Path(__file__).resolve().parents[1] / "hardware_catalog" / "data" / "inventories"
    inventory = tmp_path / "inv.toml"
    inventory.write_bytes(b"\xef\xbb\xbf" + (shipped / "thunderserve-32gpu.toml").read_bytes())
    from hardware_catalog import load_catalog
    from provisioner.cloud import load_inventory
    assert load_inventory(inventory, load_catalog()).n_gpus == 32
    profile = tmp_path / "rate.csv"
    profile.write_bytes(b"\xef\xbb\xbftime_s,rps\n0,2\n600,4\n")
    from workloads import read_profile_csv
    assert list(read_profile_csv(profile, duration_s=1200).rps) == [2.0, 4.0]


def test_a_hand_edited_result_is_refused_in_one_line(tmp_path):
    code, out, err = cli("--goal", "cost", "--rps", "5", "--design", "splitwise-hh", "--duration", "20",
                         "--no-verify", "--json")
    assert code == 0, err
    result = json.loads(out)
    for entry in (*result["best"], result["winner"]):
        entry["design"]["prompt_machines"] = -4
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(result))
    assert_one_line_error(*cli("simulate", "--from-result", edited), "result JSON design of splitwise-hh is invalid",
                          "prompt_machines must be 1-100,000 (got -4)")
    result["best"] = 5   # was an internal error (TypeError: 'int' object is not iterable)
    edited.write_text(json.dumps(result))
    assert_one_line_error(*cli("simulate", "--from-result", edited, "--family", "splitwise-hh"),
                          "'best' must be a list")


def test_sweep_refuses_jobs_with_dask(tmp_path):
    """--jobs sets local processes: with a Dask cluster it would change nothing (README: bad input)."""
    spec = tmp_path / "one.toml"
    spec.write_text('goals = ["cost"]\nmodels = ["bloom-176b"]\nworkloads = ["coding"]\nrps = [5]\n')
    assert_one_line_error(*cli("sweep", spec, "--out", tmp_path / "out", "--jobs", "2", "--dask-local", "1"),
                          "--jobs sets local worker processes")


@pytest.mark.parametrize("flag", ["--jobs", "--dask-local"])
def test_sweep_refuses_more_processes_than_4x_the_cpus(tmp_path, flag):
    """`--dask-local 100000` started that many worker processes (and `--jobs` as many as the
    grid has questions) before the first answer: at most 4x the CPUs, said in one line."""
    spec = tmp_path / "one.toml"
    spec.write_text('goals = ["cost"]\nmodels = ["bloom-176b"]\nworkloads = ["coding"]\nrps = [5]\n')
    limit = 4 * (os.cpu_count() or 1)
    assert_one_line_error(*cli("sweep", spec, "--out", tmp_path / "out", flag, limit + 1),
                          flag, f"at most {limit}", f"got {limit + 1}")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("prompt,output", [(5_000_000, 100), (100, 10_000_000)], ids=["prompts", "outputs"])
def test_a_cloud_trace_no_replica_can_hold_is_answered_not_simulated_for_minutes(tmp_path, prompt, output):
    """Every request needs more KV than any replica holds: each is a miss, so the sustained-rate
    bisections need no simulation (they ran each 5M-token prompt as if it fitted, for minutes),
    and the router rejects each at arrival in the reported run (the engines decoded 1e7-token
    outputs one token at a time, over 120 s for 30 requests)."""
    inventory = tmp_path / "two.toml"
    inventory.write_text('[network]\ninter_node_gbps = 40\n[[nodes]]\ntype = "a6000-4x"\ncount = 1\n'
                         '[[nodes]]\ntype = "a5000-4x"\ncount = 1\n')
    trace = tmp_path / "huge.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n"
                     + "".join(f"{0.5 * k},{prompt},{output}\n" for k in range(30)))
    code, out, err, _, _ = run_measured(["cloud", "--inventory", inventory, "--workload", trace, "--rps", "1",
                                         "--json"], timeout_s=60)
    assert code == 0 and "Traceback" not in err and "Warning" not in err, err
    answer = json.loads(out)
    assert answer["unservable_requests"] == 30 and answer["slo_attainment"]["all"] == 0.0


def test_perf_predict_refuses_a_power_cap_no_clock_can_run_at(tmp_path):
    """0.01-0.27 used to give 0.27's times silently, where a design's caps are refused below 0.28."""
    points = tmp_path / "points.csv"
    points.write_text("model,hardware,tensor_parallel,prompt_size,batch_size,power_cap\n"
                      "llama2-70b,h100-80gb,8,1024,1,0.1\n")
    assert_one_line_error(*cli("perf", "predict", "--points", points, "--out", tmp_path / "out.csv"),
                          "line 2, column power_cap: must be a fraction of rated power in [0.28, 1]")


def test_an_inventory_giving_both_link_forms_is_refused(tmp_path):
    """inter_node_gbps and a bandwidth_gbps matrix together: one would be ignored."""
    inventory = tmp_path / "both.toml"
    inventory.write_text('[network]\ninter_node_gbps = 40\nbandwidth_gbps = [[0, 10], [10, 0]]\n'
                         '[[nodes]]\ntype = "a6000-4x"\ncount = 2\n')
    assert_one_line_error(*cli("cloud", "--inventory", inventory, "--rps", "1"),
                          "network.inter_node_gbps", "not both")


def test_a_replay_spanning_ages_is_refused_and_a_rate_rescales_it(tmp_path):
    """Arrival times in nanoseconds read as seconds: replayed at their own rate, 100 requests
    over ~6e8 years kept the fluid engine stepping through idle time for minutes."""
    trace = tmp_path / "ns.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n"
                     + "".join(f"{k * 2e14:.1f},1000,100\n" for k in range(100)))
    assert_one_line_error(*cli("simulate", "--design", "splitwise-hh", "--prompt-machines", "2",
                               "--token-machines", "1", "--workload", trace),
                          "write its arrival times in seconds", "or give --rps to rescale it")
    from workloads import TraceGenerator
    assert len(TraceGenerator(str(trace), None, rps=5.0).at(5.0)) == 100   # rescaled to 5 req/s: 20 s
    # a span near the float limit: "--duration ... got inf" (not given), or NaN with --rps (exit 1)
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n0,1000,100\n1e308,1000,100\n")
    for rps in ((), ("--rps", "1")):
        assert_one_line_error(*cli("simulate", "--design", "splitwise-hh", "--prompt-machines", "2",
                                   "--token-machines", "1", "--workload", trace, *rps), "no unit of time")


@pytest.mark.parametrize("argv,owner", [
    (["--goal", "cost", "--rps", "70", "--kv-bits", "4"], "an option of 'provision cloud'"),
    (["cloud", "--rps", "3", "--max-machines", "3"], "an option of 'provision' or 'provision autoscale'"),
    (["cloud", "--rps", "3", "--no-verify"], "an option of 'provision'"),   # a flag's off switch
])
def test_a_flag_of_another_command_names_that_command(argv, owner):
    """`provision --kv-bits 4` said only "No such option": the flag is right, the command is not."""
    assert_one_line_error(*cli(*argv), "No such option", owner)


def test_an_unknown_flag_names_no_command():
    line = assert_one_line_error(*cli("cloud", "--rps", "3", "--seeed", "3"), "No such option: --seeed")
    assert "it is an option of" not in line


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux's /proc")
def test_a_report_in_a_directory_that_takes_no_files_is_refused_before_the_run():
    """/proc takes no new files: the report failed only after the whole search had run."""
    code, out, err, seconds, _ = run_measured(["--goal", "cost", "--rps", "70", "--report", "/proc/x.html"],
                                              timeout_s=60)
    assert_one_line_error(code, out, err, "cannot write '/proc/x.html'")
    assert out == ""   # refused before the search: no table


@pytest.mark.parametrize("url,needle", [
    ("sqlite://plans.db", "names no file: write sqlite:/// then the file's path"),
    ("sqlite:///~/plans.db", "~ is not expanded in a URL"),
    ("sqlite:///nodir/plans.db", "an absolute path takes four slashes"),
    ("sqlite:////nodir/plans.db", "directory '/nodir' does not exist"),
])
def test_a_sqlite_url_with_the_wrong_slashes_says_how_many(tmp_path, url, needle):
    """Was the driver's "unable to open database file": the slash count is the usual slip."""
    assert_one_line_error(*cli("--goal", "cost", "--rps", "5", "--study", url, cwd=tmp_path), "--study", needle)


@pytest.mark.parametrize("url,file", [("sqlite:///plans.db", "plans.db"),
                                      ("sqlite:///my%20dir/plans.db", "my dir/plans.db")])
def test_a_relative_sqlite_url_opens_the_file_here(tmp_path, url, file):
    """The check reads the URL as SQLAlchemy does (a percent-encoded space is a space)."""
    (tmp_path / "my dir").mkdir()
    code, _, err = cli("--goal", "cost", "--rps", "5", "--duration", "20", "--no-verify", "--max-machines", "8",
                       "--study", url, cwd=tmp_path)
    assert code == 0, err
    assert (tmp_path / file).stat().st_size > 0


def test_a_trace_with_no_rate_is_named_by_its_file(tmp_path):
    """The message said trace 'one' (the file's stem), not which file."""
    trace = tmp_path / "one.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n0.0,100,10\n")
    assert_one_line_error(*cli("--goal", "cost", "--workload", trace), f"trace '{trace}' has no rate to replay")


def test_a_report_through_a_symbolic_link_replaces_its_target_and_keeps_the_link(tmp_path):
    """The atomic rename replaced the link itself with a file: `--report /dev/stdout --force`
    with stdout redirected to a file (a link to a regular file) would have made /dev/stdout a
    file. The target gets the report; the link stays a link."""
    from test_reports import fixture_result

    src = tmp_path / "good.json"
    src.write_text(json.dumps(fixture_result(("splitwise-hh",))))
    target, link = tmp_path / "real.html", tmp_path / "link.html"
    target.write_text("old")
    link.symlink_to(target)
    code, _, err = cli("report", src, "--out", link, "--force")
    assert code == 0, err
    assert link.is_symlink() and "<html" in target.read_text().lower()


def test_a_cloud_trace_of_one_token_requests_has_no_tbt_to_keep(tmp_path):
    """Prompt-only requests (classification, embeddings: one output token) have no TBT. The
    planner took the mean of no TBT as its limit (NaN): numpy warnings leaked, the split
    plan sustained 0 req/s and the non-split one 0.004. Now no TBT limit binds them."""
    trace = tmp_path / "prompts.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n" + "".join(f"{0.5 * k},500,1\n" for k in range(40)))
    code, out, err, _, _ = run_measured(["cloud", "--inventory", "thunderserve-32gpu", "--workload", trace,
                                         "--rps", "1", "--json"], timeout_s=120)
    assert code == 0 and err.strip() == "", err
    answer = json.loads(out)
    assert answer["slo_attainment"]["all"] == 1.0
    assert answer["sustained_rps"] > 10 and answer["non_split"]["sustained_rps"] > 10


def test_cloud_slos_no_replica_meets_are_said_not_shown_as_a_plan(tmp_path):
    """--slo-scale 0.5: no replica meets the limits even alone. The answer showed a 12-replica
    split plan routing nothing and 'ratio 0.00x', with no reason."""
    code, out, err = cli("cloud", "--inventory", "thunderserve-32gpu", "--rps", "4", "--slo-scale", "0.5")
    assert code == 0, err
    assert "no plan of this inventory meets 99% attainment at any rate" in out and "--slo-scale 0.5" in out
    assert "ratio n/a" in out
    code, out, err = cli("cloud", "--inventory", "thunderserve-32gpu", "--rps", "4", "--json")
    assert code == 0 and "no_plan_meets_target" not in json.loads(out)


def test_a_cloud_replay_says_what_the_file_became(tmp_path):
    """A 2-request file is simulated as 20 requests (the floor): the answer's "requests"
    said 20 with no word of the replay, as the main command gives."""
    trace = tmp_path / "two.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n0.0,500,100\n1.0,800,200\n")
    code, out, err = cli("cloud", "--inventory", "thunderserve-32gpu", "--workload", trace, "--rps", "1")
    assert code == 0, err
    assert f"replayed trace {trace}" in out and "20 requests in a 20-s window" in out


def test_a_cloud_replay_as_the_new_mix_says_what_the_file_became(tmp_path):
    """--replan-workload FILE is replayed over the plan's window at its rate: said as for
    --workload, naming the flag."""
    trace = tmp_path / "two.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n0.0,500,100\n1.0,800,200\n")
    code, out, err = cli("cloud", "--inventory", "thunderserve-32gpu", "--rps", "1", "--duration", "20",
                         "--prefill-chunk-tokens", "0", "--replan-workload", trace)
    assert code == 0, err
    assert f"--replan-workload: replayed trace {trace}" in out and "20 requests in a 20-s window" in out


@pytest.mark.parametrize("rps", [[], ["--rps", "0.01"]], ids=["throughput", "rps"])
def test_a_long_cloud_replay_needs_its_window_given(tmp_path, rps):
    """40 requests ~100 s apart: the whole 4,456-s window, simulated at every rate the
    bisections try (10 req/s: 44k requests a run), took 474 s (--rps 0.01: over 6 min)."""
    trace = tmp_path / "slow.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n" + "".join(f"{111.4 * k},500,100\n" for k in range(40)))
    assert_one_line_error(*cli("cloud", "--inventory", "thunderserve-32gpu", "--workload", trace, *rps),
                          "give --duration", "to keep it whole")


def test_a_study_file_whose_name_starts_with_sqlite_is_a_path(tmp_path):
    """The SQLite-URL check took any text starting with "sqlite" for a URL and refused a
    file named sqlite_plans.db."""
    code, _, err = cli("--goal", "cost", "--rps", "5", "--duration", "20", "--no-verify", "--max-machines", "8",
                       "--study", "sqlite_plans.db", cwd=tmp_path)
    assert code == 0, err
    assert (tmp_path / "sqlite_plans.db").stat().st_size > 0


# --------------------------------------------------------------------------- a review of 2026-11-28
def test_no_output_replaces_a_file_the_command_reads(tmp_path):
    """--replan-workload's file (cloud) and the traces a sweep spec names were not among the
    inputs an output may not replace: `--report t.csv --force` replaced the trace with HTML."""
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n0.0,500,100\n1.0,800,200\n")
    before = trace.read_text()
    assert_one_line_error(*cli("cloud", "--inventory", "thunderserve-32gpu", "--rps", "1", "--duration", "20",
                               "--replan-workload", trace, "--report", trace, "--force"), "--report", "input")
    (tmp_path / "results.csv").write_text(before)
    spec = tmp_path / "s.toml"
    spec.write_text('workloads = ["results.csv"]\nrps = [2]\nfamilies = ["baseline-a100"]\nduration_s = 3\n'
                    'verify = false\nmax_machines = 4\n')
    assert_one_line_error(*cli("sweep", spec, "--out", tmp_path, "--force"), "--out", "input")
    assert trace.read_text() == before and (tmp_path / "results.csv").read_text() == before


def test_another_applications_database_is_refused_as_a_sqlite_url_too(tmp_path):
    import sqlite3
    with sqlite3.connect(tmp_path / "other.db") as conn:
        conn.execute("CREATE TABLE t (x)")
    assert_one_line_error(*cli("--goal", "cost", "--rps", "1", "--duration", "3", "--no-verify", "--design",
                               "baseline-a100", "--max-machines", "4", "--study", "sqlite:///other.db",
                               cwd=tmp_path), "another application's SQLite database")
    with sqlite3.connect(tmp_path / "other.db") as conn:
        assert [r[0] for r in conn.execute("SELECT name FROM sqlite_master")] == ["t"]


BIG = str(10 ** 400)


@pytest.mark.parametrize("args, needle", [
    (["--goal", "cost", "--rps", "1", "--seed", BIG], "a 401-digit integer"),
    (["--goal", "cost", "--rps", "1", "--prefill-chunk-tokens", "99999999999999999999"],
     "--prefill-chunk-tokens must be an integer in [0, 10000000]"),
    (["cloud", "--inventory", "thunderserve-32gpu", "--rps", "1", "--prefill-chunk-tokens", BIG],
     "--prefill-chunk-tokens must be an integer in [0, 10000000] (got a 401-digit integer)"),
    (["simulate", "--design", "baseline-h100", "--machines", "2", "--rps", "1", "--prefill-chunk-tokens", BIG],
     "--prefill-chunk-tokens must be in [0, 10000000]"),
])
def test_integers_too_large_for_a_float_are_one_line_errors(args, needle):
    """Were internal errors (exit 1): OverflowError converting them to floats or C longs."""
    assert_one_line_error(*cli(*args), needle)


def test_a_seed_whose_verification_seeds_pass_2_to_the_63_names_the_seed():
    """The re-check draws with seeds seed + 1, seed + 2: at --seed 2**63 - 1 the request said
    'verify_seeds must be a tuple of seeds', a flag the user never gave. Without the
    re-check the seed is fine."""
    seed = str(2**63 - 1)
    assert_one_line_error(*cli("--goal", "cost", "--rps", "1", "--seed", seed), "--seed must be below 2**63 - 2")
    code, _, err = cli("--goal", "cost", "--rps", "1", "--seed", seed, "--no-verify", "--duration", "3", "--design",
                       "baseline-a100", "--max-machines", "4")
    assert code == 0, err


@pytest.mark.parametrize("name, text, needle", [
    ("deep.json", "[" * 100_000 + "]" * 100_000, "nesting thousands deep"),
    ("big.json", '{"goal": ' + "9" * 5000 + "}", "over 4,300 digits"),
])
def test_a_json_python_cannot_read_is_one_line(tmp_path, name, text, needle):
    """Were RecursionError and ValueError (exit 1) in `report` and `simulate --from-result`."""
    path = tmp_path / name
    path.write_text(text)
    assert_one_line_error(*cli("report", path, "--out", tmp_path / "o.html"), needle)
    assert_one_line_error(*cli("simulate", "--from-result", path), "--from-result", needle)


def test_a_number_python_cannot_read_in_a_toml_is_one_line(tmp_path):
    inv, spec = tmp_path / "inv.toml", tmp_path / "s.toml"
    inv.write_text(f'[[nodes]]\ntype = "a40-8x"\ncount = {"9" * 5000}\n')
    spec.write_text(f'rps = [{"9" * 5000}]\n')
    assert_one_line_error(*cli("cloud", "--inventory", inv, "--rps", "1"), "inv.toml", "over 4,300 digits")
    assert_one_line_error(*cli("sweep", spec, "--out", tmp_path / "o"), "s.toml", "over 4,300 digits")
    spec.write_text(f"rps = [{BIG}]\n")
    assert_one_line_error(*cli("sweep", spec, "--out", tmp_path / "o"), "key 'rps'", "a 401-digit integer")


def test_a_profile_of_absurd_times_is_refused_where_it_is_read(tmp_path):
    """1e308 ms passed the checks: calibrate failed in the fit (exit 1), simulate printed
    numpy overflow warnings and fell back to the roofline without a word."""
    import perfmodels
    lines = (Path(perfmodels.__file__).parent / "data" / "llama2-70b_dgx.csv").read_text().splitlines()
    col = lines[0].split(",").index("prompt_time_ms")
    huge = [lines[0]] + [",".join("1e308" if i == col else v for i, v in enumerate(ln.split(","))) for ln in lines[1:]]
    profile = tmp_path / "huge.csv"
    profile.write_text("\n".join(huge) + "\n")
    assert_one_line_error(*cli("perf", "calibrate", "--profile", profile, "--out", tmp_path / "c.toml"),
                          "prompt_time_ms", "at most 1e+09")
    assert_one_line_error(*cli("simulate", "--design", "baseline-a100", "--machines", "2", "--rps", "1",
                               "--duration", "10", "--model", "llama2-70b", "--latency-profile", profile),
                          "prompt_time_ms", "at most 1e+09")


def test_smaller_fixes_of_the_review(tmp_path):
    """Errors that named no way out, or the wrong one."""
    page = tmp_path / "t.html"
    page.write_text("mine")
    assert_one_line_error(*cli("simulate", "--design", "splitwise-hh", "--prompt-machines", "2",
                               "--token-machines", "1", "--rps", "1", "--duration", "10", "--scheduler", "jsq",
                               "--timeline", page), "already exists; pass --force")
    assert page.read_text() == "mine"
    single = tmp_path / "single.toml"
    single.write_text('[[nodes]]\ntype = "a40-8x"\n')
    assert_one_line_error(*cli("cloud", "--inventory", single, "--rps", "1", "--without", "a40-8x-0"),
                          "the only node", "drop --without")
    matrix = tmp_path / "m.toml"
    matrix.write_text('[[nodes]]\ntype = "a40-8x"\n[[nodes]]\ntype = "a6000-4x"\n[network]\n'
                      'bandwidth_gbps = [[-5, 10], [10, nan]]\n')
    assert_one_line_error(*cli("cloud", "--inventory", matrix, "--rps", "1"), "the diagonal must be finite")


def test_library_errors_name_python_parameters_and_the_cli_its_flags():
    """plan_cloud(goal="cost") without rps said "--goal cost needs --rps", and
    diurnal_profile "(--rps)" and "--duration": flags a Python caller has none of."""
    from perfmodels import LatencyModel
    from provisioner.cloud import load_inventory, plan_cloud
    from provisioner.errors import ProvisionerError
    from workloads import TraceGenerator, WorkloadError, diurnal_profile

    perf = LatencyModel()
    prices = load_inventory("cloud-prices", perf.catalog)
    with pytest.raises(ProvisionerError, match=r"^goal 'cost' needs rps \(the load the rented nodes must serve\)$"):
        plan_cloud(prices, perf.llm("llama-30b"), perf, TraceGenerator("coding", 30.0, 0), goal="cost", rps=None)
    with pytest.raises(WorkloadError, match=r"^the diurnal profile needs a peak rate peak_rps > 0, got -1$"):
        diurnal_profile(-1)
    with pytest.raises(WorkloadError, match=r"days \(3\.16224e\+07 s, duration_s\), got 1e\+09 s; shorten it$"):
        diurnal_profile(1.0, 1e9)
    assert_one_line_error(*cli("autoscale", "--profile", "diurnal", "--rps", "15", "--duration", "1e9", "--design",
                               "baseline-a100"), "days (3.16224e+07 s, --duration), got 1e+09 s; shorten it")
    assert_one_line_error(*cli("autoscale", "--profile", "diurnal", "--rps", "2", "--duration", "100", "--design",
                               "baseline-a100"), "needs a --duration of at least one step, 900 s, got 100")
    with pytest.raises(ProvisionerError, match=r"^without: no node 'nope' in inventory cloud-prices; its nodes"):
        prices.with_counts([t.available or 1 for t in prices.types]).without("nope")
    one_node = load_inventory("thunderserve-32gpu", perf.catalog)
    one_node = one_node.with_counts([int(i == 0) for i in range(len(one_node.types))])
    with pytest.raises(ProvisionerError, match=r"nothing is left to re-plan on; drop without, or add nodes"):
        one_node.without(one_node.nodes[0][0])
    with pytest.raises(ProvisionerError, match=r"^inventory \S+ has no nodes to plan .*: use goal cost to choose"):
        plan_cloud(prices, perf.llm("llama-30b"), perf, TraceGenerator("coding", 30.0, 0), rps=1.0)


def test_the_library_refuses_an_integer_too_large_for_a_float():
    """An int is finite to Python, but a rate of 10**400 overflows every float it meets:
    a Real parameter takes an int only within a float's range."""
    from provisioner import ProvisionRequest
    from provisioner.errors import ProvisionerError
    with pytest.raises(ProvisionerError, match="rps must be a finite number > 0 \\(got a 401-digit integer\\)"):
        ProvisionRequest(goal="cost", rps=10 ** 400)


@pytest.mark.parametrize("column", ["model", "hardware"])
def test_a_profile_with_an_empty_name_cell_is_named_by_line_and_column(tmp_path, column):
    """pandas reads an empty cell as NaN: calibrate and plot failed with IndexError (exit 1)."""
    import perfmodels
    lines = (Path(perfmodels.__file__).parent / "data" / "llama2-70b_dgx.csv").read_text().splitlines()
    col = lines[0].split(",").index(column)
    fields = lines[2].split(",")
    fields[col] = ""
    lines[2] = ",".join(fields)
    profile = tmp_path / "p.csv"
    profile.write_text("\n".join(lines) + "\n")
    needles = ("--profile", "p.csv", f"line 3, column {column}: empty cell")
    assert_one_line_error(*cli("perf", "calibrate", "--profile", profile, "--out", tmp_path / "c.toml"), *needles)
    assert_one_line_error(*cli("perf", "plot", "--profile", profile, "--out", tmp_path / "p.html"), *needles)
    assert not (tmp_path / "c.toml").exists() and not (tmp_path / "p.html").exists()


@pytest.mark.parametrize("bad_row, needle", [
    ("llama2-70b,a100-80gb,3,512,1,128,100,50,6500", "column tensor_parallel: must be 1, 2, 4 or 8 (got 3)"),
    ("llama2-70b,a100-80gb,2,512,1,128,-1,50,6500", "column prompt_time_ms: must be a positive number"),
    ("llama2-70b,no-such-gpu,2,512,1,128,100,50,6500", "column hardware: unknown gpu 'no-such-gpu'"),
    (",a100-80gb,2,512,1,128,100,50,6500", "column model: empty cell"),
])
def test_a_profile_error_names_the_files_own_line_past_blank_lines(tmp_path, bad_row, needle):
    """pandas skips blank lines, so its row index + 2 was not the file's line: a bad row
    after blank lines was named lines too early (line 11 for line 13)."""
    import perfmodels
    lines = (Path(perfmodels.__file__).parent / "data" / "llama2-70b_dgx.csv").read_text().splitlines()
    text = [lines[0], "", *lines[1:10], "   ", bad_row, *lines[10:20]]   # the bad row is line 13
    profile = tmp_path / "p.csv"
    profile.write_text("\n".join(text) + "\n")
    for command, out in (("calibrate", "c.toml"), ("plot", "p.html")):
        assert_one_line_error(*cli("perf", command, "--profile", profile, "--out", tmp_path / out),
                              "--profile", f"line 13, {needle}")
        assert not (tmp_path / out).exists()

@pytest.mark.parametrize("column", ["prompt_time_ms", "model"])
def test_a_profile_with_a_repeated_column_is_refused(tmp_path, column):
    """pandas reads a repeated name as name.1: calibrate and plot fitted the first column
    and ignored the second without a word."""
    import perfmodels
    lines = (Path(perfmodels.__file__).parent / "data" / "llama2-70b_dgx.csv").read_text().splitlines()
    assert lines[0].endswith(",e2e_time_ms")
    profile = tmp_path / "p.csv"
    profile.write_text("\n".join([lines[0].replace("e2e_time_ms", column), *lines[1:40]]) + "\n")
    for command, out in (("calibrate", "c.toml"), ("plot", "p.html")):
        assert_one_line_error(*cli("perf", command, "--profile", profile, "--out", tmp_path / out),
                              "--profile", f"column '{column}' appears twice in the header")
        assert not (tmp_path / out).exists()
    # the simulator's own reader took the first copy without a word
    assert_one_line_error(*cli("simulate", "--design", "baseline-a100", "--machines", "2", "--rps", "1",
                               "--duration", "10", "--model", "llama2-70b", "--latency-profile", profile),
                          "line 1", f"column '{column}' appears twice in the header: keep one")

@pytest.mark.parametrize("header, rows, needle", [
    ("model,hardware,tensor_parallel,prompt_size,batch_size,", ["", ",7"], "column 6 has no name in the header, "
                                                                          "but line 3 holds '7'"),
    ("model,,hardware,tensor_parallel,prompt_size,batch_size", None, "column 2 has no name in the header, but "
                                                                     "line 2 holds 'measured'"),
])
def test_predict_refuses_data_in_a_column_with_no_name(tmp_path, header, rows, needle):
    """The output keeps the input's named columns only: data under an empty header cell
    was dropped without a word."""
    point = "llama2-70b,a100-80gb,2,512,{b}"
    if rows is None:   # the unnamed column is the second
        lines = ["llama2-70b,measured,a100-80gb,2,512,1"]
    else:
        lines = [point.format(b=1) + rows[0], point.format(b=2) + rows[1]]
    (tmp_path / "q.csv").write_text("\n".join([header, *lines]) + "\n")
    assert_one_line_error(*cli("perf", "predict", "--points", "q.csv", "--out", "o.csv", cwd=tmp_path),
                          "--points 'q.csv'", needle, "name the column in the header")
    assert not (tmp_path / "o.csv").exists()
    # a trailing comma on every line (an empty column) is no data: taken
    (tmp_path / "q.csv").write_text("model,hardware,tensor_parallel,prompt_size,batch_size,\n" + point.format(b=1)
                                    + ",\n")
    code, out, err = cli("perf", "predict", "--points", "q.csv", "--out", "o.csv", cwd=tmp_path)
    assert code == 0 and "wrote 1 rows" in out, err

@pytest.mark.parametrize("args, flag", [
    (["perf", "predict", "--points", "q.csv", "--out", "loop1"], "--out"),
    (["perf", "calibrate", "--out", "loop1"], "--out"),
    (["perf", "plot", "--out", "loop1/p.html"], "--out"),
    (["--goal", "cost", "--rps", "5", "--report", "loop1"], "--report"),
    (["--goal", "cost", "--rps", "5", "--study", "loop1"], "--study"),
    (["sweep", "s.toml", "--out", "loop1"], "--out"),
    (["sweep", "s.toml", "--out", "o", "--study", "loop1"], "--study"),
])
def test_a_path_that_is_a_loop_of_symbolic_links_is_one_line(tmp_path, args, flag):
    """Path.resolve() raised RuntimeError ('Symlink loop'): an internal error (exit 1)."""
    (tmp_path / "loop1").symlink_to("loop2")
    (tmp_path / "loop2").symlink_to("loop1")
    (tmp_path / "q.csv").write_text("model,hardware,tensor_parallel,prompt_size,batch_size\n"
                                    "llama2-70b,a100-80gb,2,512,1\n")
    (tmp_path / "s.toml").write_text('rps = [5]\nfamilies = ["baseline-a100"]\nduration_s = 3\nverify = false\n')
    assert_one_line_error(*cli(*args, cwd=tmp_path), f"{flag} 'loop1", "loop of symbolic links")
    assert not (tmp_path / "o").exists()


def test_a_study_that_is_a_loop_of_symbolic_links_is_refused_by_the_library(tmp_path):
    from provisioner.errors import ProvisionerError
    from provisioner.store import open_store
    (tmp_path / "loop1").symlink_to("loop2")
    (tmp_path / "loop2").symlink_to("loop1")
    with pytest.raises(ProvisionerError, match="study '.*loop1' leads into a loop of symbolic links"):
        open_store(str(tmp_path / "loop1"))


def test_a_rate_profile_whose_end_overflows_is_named_by_file_and_column(tmp_path):
    """0 then 1e308 s: the last step (as long as the gap before it) ended at inf, with numpy
    overflow warnings and then an error naming no file or column."""
    import warnings
    profile = tmp_path / "rate.csv"
    profile.write_text("time_s,rps\n0,1\n1e308,2\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # a printed RuntimeWarning fails the test
        result = cli("autoscale", "--profile", profile, "--design", "baseline-a100")
    assert_one_line_error(*result, "rate.csv:3: column 1 (time_s)", "--duration")


@pytest.mark.parametrize("toml, where", [
    ('[[nodes]]\ntype = "a40-8x"\nname = "a\\nb"\n', "inv.toml:3: nodes[1].name"),
    ('[[nodes]]\ngpu = "a100-80gb"\ngpus = 8\nname = "n\\u202e1"\n', "inv.toml:4: nodes[1].name"),
    ('name = "my\\tcloud"\n[[nodes]]\ntype = "a40-8x"\n', "inv.toml:1: name"),
])
def test_an_inventory_name_with_a_control_character_is_refused(tmp_path, toml, where):
    """A newline in a node's name was accepted, and broke the tables and errors printing it."""
    inventory = tmp_path / "inv.toml"
    inventory.write_text(toml)
    assert_one_line_error(*cli("cloud", "--inventory", inventory, "--rps", "1"), where, "control characters")


# --------------------------------------------------------------------------- a review of 2026-11-29
def test_a_rate_no_design_can_hold_is_refused_before_the_search():
    """The count bound derived from --rps had no ceiling: 1e6 req/s searched for 10 minutes and
    answered 648,079 machines, where `simulate` refuses over 100,000 per pool."""
    code, out, err, seconds, _ = run_measured(["--goal", "cost", "--rps", "1e6", "--duration", "0.0002",
                                               "--design", "baseline-a100", "--no-verify"], timeout_s=60)
    line = assert_one_line_error(code, out, err, "--rps 1e+06 gives baseline-a100 a count bound over 100,000 "
                                                 "machines", "give --rps of at most about")
    fits = float(line.rsplit("at most about ", 1)[1].split()[0].replace(",", ""))
    assert 1e3 < fits < 1e6


def test_a_replay_whose_own_rate_no_design_can_hold_names_its_rate(tmp_path):
    """Arrivals 1e-300 s apart: the solver's infinite coefficients, then an OverflowError."""
    trace = _trace(tmp_path, [(0, 100, 10), (1e-300, 100, 10), (2e-300, 100, 10)])
    line = assert_one_line_error(*cli("--goal", "cost", "--workload", trace, "--design", "baseline-a100",
                                      "--no-verify"), f"the replayed trace '{trace}' at its own rate",
                                 "give --rps of at most about")
    assert "internal error" not in line


@pytest.mark.parametrize("designs", [["baseline-custom"], ["splitwiser-custom", "baseline-custom", "splitwise-hh"]])
def test_token_machine_types_without_splitwise_custom_are_refused(designs):
    """Only splitwise-custom has a token pool: the other custom families ignored the flag (exit 0)."""
    args = [a for d in designs for a in ("--design", d)]
    assert_one_line_error(*cli("--goal", "cost", "--rps", "5", "--duration", "10", "--no-verify", *args,
                               "--token-machine-types", "a40-8x", "--trials", "1"),
                          "--token-machine-types sets the token pool of splitwise-custom; "
                          f"{' and '.join(d for d in designs if d != 'splitwise-hh')} ha",
                          "add 'splitwise-custom' to --design, or drop --token-machine-types")


@pytest.mark.parametrize("also", [["--trials", "3"], ["--power-cap-range", "0.5,1.0"],
                                  ["--verify-duration", "0.001"]])
def test_machine_types_no_named_family_uses_are_named_first(also):
    """The flags a custom family takes were refused first ("drop --trials"), hiding the real
    mistake: no custom family in --design."""
    assert_one_line_error(*cli("--goal", "cost", "--rps", "5", "--design", "baseline-h100",
                               "--prompt-machine-types", "dgx-h100", *also),
                          "--prompt-machine-types sets the machines of a custom family", "none of which --design names")


def test_a_trial_budget_past_any_use_is_refused():
    assert_one_line_error(*cli("--goal", "cost", "--rps", "5", "--duration", "20", "--design", "splitwise-hh",
                               "--searcher", "optuna", "--trials", "10000000", "--no-verify"),
                          "--trials must be an integer in [1, 10000] (got 10000000)")


def test_optuna_stops_once_every_hardware_choice_has_had_a_trial():
    """--trials 10000 on a space of one hardware choice ran for minutes, asking it again and again;
    the answer is the one a budget of one batch gives."""
    args = ["--goal", "cost", "--rps", "5", "--duration", "20", "--design", "splitwise-hh", "--searcher", "optuna",
            "--no-verify", "--json"]
    code, out, err, _, _ = run_measured([*args, "--trials", "10000"], timeout_s=60)
    assert code == 0, err
    code, one_batch, err = cli(*args, "--trials", "6")
    assert code == 0, err
    assert json.loads(out)["winner"]["design"] == json.loads(one_batch)["winner"]["design"]


def test_optuna_stops_once_every_power_cap_of_a_custom_space_has_had_a_trial():
    from provisioner.search import ProvisionRequest, provision
    request = ProvisionRequest(goal="cost", rps=5, duration_s=20, families=("baseline-custom",), verify=False,
                               prompt_machine_types=("dgx-h100",), power_cap_range=(0.96, 1.0), search_tp=False,
                               n_trials=120)
    bayes = provision(request).family("baseline-custom").bayes
    assert bayes.n_trials < 120 and sorted(bayes.trials["prompt_power_cap"].round(2).unique()) == \
        [0.96, 0.97, 0.98, 0.99, 1.0]


@pytest.mark.parametrize("window, needle", [
    ("1e-9", "which rounds to none; give a --verify-duration of at least 0.2 s"),
    ("1e12", "more than a trace holds (10,000,000); give a --verify-duration of at most 2,000,000 s"),
])
def test_a_verification_window_no_trace_can_be_made_of_is_refused_before_the_search(window, needle):
    """It failed after the search, naming --rps and --duration."""
    assert_one_line_error(*cli("--goal", "cost", "--rps", "5", "--duration", "5", "--design", "baseline-a100",
                               "--verify-duration", window), f"--verify-duration {float(window):g} at 5 req/s",
                          needle)


def test_cloud_never_reports_a_negative_zero_rate():
    """At --slo-scale 0.6 (the cloud default is 2) no plan sustains a rate: the tabu search's
    best plan held every request (search value minus a shortfall of 0, i.e. -0.0) and the
    JSON said "throughput_rps": -0.0, the table "split: -0.00 req/s"."""
    args = ("cloud", "--inventory", "thunderserve-32gpu", "--rps", "5", "--slo-scale", "0.6")
    code, out, err = cli(*args, "--json")
    assert code == 0, err

    def negative_zeros(node, where="") -> list[str]:
        if isinstance(node, dict):
            return [w for k, v in node.items() for w in negative_zeros(v, f"{where}.{k}")]
        if isinstance(node, list):
            return [w for i, v in enumerate(node) for w in negative_zeros(v, f"{where}[{i}]")]
        return [where] if isinstance(node, float) and node == 0 and math.copysign(1.0, node) < 0 else []

    answer = json.loads(out)
    assert answer["throughput_rps"] == 0.0 and negative_zeros(answer) == []
    code, out, err = cli(*args)
    assert code == 0 and "split: 0.00 req/s" in out and "-0.0" not in out, out


# --------------------------------------------------------------------------- the Python API, misused from a notebook
@pytest.mark.parametrize("call, needle", [
    (lambda p: p.make_design("splitwise-hh", 2.7, 1), "prompt_machines must be a whole number"),   # was truncated to 2
    (lambda p: p.make_design("splitwise-hh", "abc", 1), "prompt_machines must be a whole number"),   # int()'s ValueError
    (lambda p: p.make_design("baseline-a100", machines="4"), "machines must be a whole number"),
    (lambda p: p.make_design("splitwise-hh", 3, 1, prompt_power_cap="0.5"), "prompt_power_cap must be a finite"),
    (lambda p: p.make_design("splitwise-hh", 3, 1, prompt_tp=8.0), "prompt_tp must be an integer"),   # crashed in simulate
    (lambda p: p.make_design("splitwise-hh", 3, 1, allow_borrow="no"), "allow_borrow must be True or False"),
    (lambda p: p.make_design("splitwise-hh", 3, 1, prompt_batch_cap=512), "did you mean prompt_batch_cap_tokens"),
    (lambda p: p.make_design(None, 3, 1), "family must be a design family's name"),
    (lambda p: p.grid("splitwise-hh", [2.5], [1]), "prompt_machines must be a whole number"),
    (lambda p: p.grid("splitwise-hh", 5, [1]), "prompt_counts must be a sequence"),
])
def test_make_design_refuses_a_value_of_the_wrong_type_naming_it(call, needle):
    import provisioner

    with pytest.raises(provisioner.ProvisionerError, match=needle):
        call(provisioner)
    assert provisioner.make_design("splitwise-hh", 3.0, 1).prompt_machines == 3   # a whole float is a count


def test_simulate_checks_designs_it_did_not_make():
    """A `Design` built directly or a batch read back from a table skipped make_design's
    checks: an unknown family or -1 machines were simulated into a nonsense row; a string
    was an AttributeError."""
    import provisioner
    from workloads import Trace

    trace = Trace([0.0], [100], [2], "one")
    frame = provisioner.grid("splitwise-hh", [2], [1]).to_frame()
    for column, value, needle in [("prompt_machines", -1, "prompt_machines must be 1-"),
                                  ("family", "nope", "unknown design family 'nope'"),
                                  ("prompt_power_cap", 0.1, "prompt_power_cap must be a fraction")]:
        with pytest.raises(provisioner.ProvisionerError, match=needle):
            provisioner.simulate(provisioner.DesignBatch.from_frame(frame.assign(**{column: value})), trace)
    with pytest.raises(provisioner.ProvisionerError, match="designs must be a Design"):
        provisioner.simulate("splitwise-hh", trace)


def test_simulate_refuses_a_trace_that_is_not_one():
    import provisioner

    with pytest.raises(provisioner.ProvisionerError, match="trace must be a workloads.Trace"):
        provisioner.simulate(provisioner.make_design("splitwise-hh", 2, 1), "coding")   # was an AttributeError


@pytest.mark.parametrize("given, needle", [
    (dict(families="splitwise-hh"), "families must be a tuple of design family names"),   # was "unknown family 's'"
    (dict(verify_seeds="12"), "verify_seeds must be a tuple of seeds"),   # ran seeds '1' and '2'
    (dict(verify_seeds=(1.5,)), "verify_seeds must be a tuple of seeds"),
    (dict(prompt_batch_caps=(1000.7,)), "prompt_batch_caps must be a tuple of token counts"),   # truncated
    (dict(power_cap_range="0.5"), "power_cap_range must be a tuple of two numbers"),   # an unpacking ValueError
    (dict(prompt_machine_types="dgx-h100", families=("splitwise-custom",)), "prompt_machine_types must be a tuple"),
    (dict(model=None), "model must be a string"),   # an AttributeError once the search ran
])
def test_a_request_refuses_a_string_or_number_where_a_sequence_goes(given, needle):
    import provisioner

    with pytest.raises(provisioner.ProvisionerError, match=needle):
        provisioner.ProvisionRequest(**{"goal": "cost", "rps": 5, "verify": False, **given})


def test_scheduler_and_priority_errors_name_the_parameter_and_the_cli_its_flag():
    """The library said '--scheduler must be one of' and '--high-priority-fraction must be in'
    (flags a notebook does not have); a string fraction was a TypeError from a comparison."""
    import provisioner
    from workloads import Trace

    with pytest.raises(provisioner.ProvisionerError, match="^scheduler must be one of"):
        provisioner.make_design("baseline-a100", machines=2, scheduler="fastest")
    design = provisioner.make_design("baseline-a100", machines=2, scheduler="llumnix")
    with pytest.raises(provisioner.ProvisionerError, match="^high_priority_fraction must be a number in"):
        provisioner.simulate(design, Trace([0.0], [100], [2], "one"), engine="des", high_priority_fraction="0.5")
    assert_one_line_error(*cli("simulate", "--design", "baseline-a100", "--machines", "2", "--scheduler", "fastest"),
                          "--scheduler must be one of")


def test_an_empty_numba_thread_count_is_unset(monkeypatch, capsys):
    """NUMBA_NUM_THREADS= (set, empty): numba printed a traceback reading int('')."""
    import os

    monkeypatch.setenv("NUMBA_NUM_THREADS", "")
    code, _, err = cli("--help")
    assert code == 0 and "Traceback" not in err and "NUMBA_NUM_THREADS" not in os.environ


@pytest.mark.parametrize("value", ["0", "abc", "-3", "100000"])
def test_a_numba_thread_count_numba_cannot_run_with_is_one_line(monkeypatch, value):
    """NUMBA_NUM_THREADS=0 was an internal error (exit 1) when the engine started; 'abc'
    printed numba's traceback as a warning and ran on."""
    monkeypatch.setenv("NUMBA_NUM_THREADS", value)
    assert_one_line_error(*cli("simulate", "--design", "splitwise-hh", "--prompt-machines", "2", "--token-machines",
                               "1", "--rps", "2", "--duration", "5"),
                          f"NUMBA_NUM_THREADS must be a whole number of threads from 1 to 1024 (got '{value}')")


def test_a_shipped_workload_with_a_file_checksum_says_so(tmp_path):
    """Was "the answer's trace file 'coding' ... does not exist": 'coding' is a shipped name."""
    from test_reports import fixture_result

    result = fixture_result(("splitwise-hh",))
    assert result["question"]["workload"] == "coding"
    result["question"]["workload_sha256"] = "00" * 32
    (tmp_path / "r.json").write_text(json.dumps(result))
    assert_one_line_error(*cli("simulate", "--from-result", tmp_path / "r.json"),
                          "names the shipped workload 'coding' but records a trace file's SHA-256")
