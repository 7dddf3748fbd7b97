"""A search and a sweep killed with SIGKILL mid-way, run again with the same `--study`,
give exactly the answer of an uninterrupted run (CONTRACTS.md, command 7).

The runs are the console script in subprocesses. Each is killed once its SQLite study
shows progress (stored simulations, or answered questions) and before it finishes;
the resumed run must re-use that work (the stored rows are not simulated again) and
print or write what an uninterrupted run without a study prints or writes.
"""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

PROVISION = str(Path(sys.executable).with_name("provision"))
# An optuna search (custom family: machine type per pool) on a 20-s trace, no DES: ~5-10 s.
SEARCH = ["--goal", "cost", "--rps", "10", "--duration", "20", "--design", "splitwise-custom",
          "--prompt-machine-types", "dgx-h100,dgx-a100", "--trials", "24", "--no-verify", "--json"]
SWEEP_SPEC = """\
goals = ["cost"]
rps = [5, 10]
families = ["splitwise-hh", "baseline-h100"]
duration_s = 10
verify = true
verify_duration_s = 5

[price_lists]
catalog = {}
spot = { dgx-h100 = 20.0 }
"""


def provision(*args, timeout=300):
    return subprocess.run([PROVISION, *map(str, args)], capture_output=True, text=True, timeout=timeout)


def stored(db: Path, kind: str) -> int:
    """Rows of `kind` in the study's result table (0 before the table exists)."""
    if not db.exists():
        return 0
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as conn:
            return conn.execute("SELECT count(*) FROM provisioner_results WHERE kind = ?", (kind,)).fetchone()[0]
    except sqlite3.OperationalError:   # the table is being created
        return 0


def kill_when(args, db: Path, kind: str, at_least: int, timeout_s: float = 240) -> int:
    """Start `provision ARGS`, SIGKILL it once `db` holds `at_least` rows of `kind`; the rows then."""
    proc = subprocess.Popen([PROVISION, *map(str, args)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + timeout_s
    try:
        while stored(db, kind) < at_least:
            assert proc.poll() is None, f"finished before it could be killed: {proc.stderr.read().decode()}"
            assert time.monotonic() < deadline, "no progress in the study"
            time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    return stored(db, kind)


def without_timings(text: str) -> dict:
    obj = json.loads(text)
    obj.pop("elapsed_s")
    for family in obj["best"]:
        family.pop("elapsed_s")
    if obj["winner"]:
        obj["winner"].pop("elapsed_s")
    return obj


def test_killed_search_resumes_from_its_study_to_the_same_answer(tmp_path, cli):
    db = tmp_path / "search.db"
    uninterrupted = cli(*SEARCH)   # in this process, without a study
    done_before = kill_when([*SEARCH, "--study", db], db, "fluid", at_least=40)
    assert done_before >= 40
    resumed = provision(*SEARCH, "--study", db)
    assert resumed.returncode == 0, resumed.stderr
    assert without_timings(resumed.stdout) == without_timings(uninterrupted)
    # Every design of the answer's `evaluated` log was simulated once: the killed run's
    # rows were re-used, not simulated again (one row per design, nothing duplicated).
    evaluated = len(without_timings(resumed.stdout)["evaluated"])
    assert stored(db, "fluid") == evaluated
    with sqlite3.connect(db) as conn:   # the optuna study holds every trial once
        seqs = [json.loads(v) for (v,) in conn.execute(
            "SELECT value_json FROM trial_user_attributes WHERE key = 'seq'")]
    assert sorted(seqs) == list(range(24))


def test_killed_sweep_resumes_from_its_study_to_the_same_table(tmp_path, cli):
    spec = tmp_path / "spec.toml"
    spec.write_text(SWEEP_SPEC)
    db = tmp_path / "sweep.db"
    cli("sweep", spec, "--out", tmp_path / "whole", "--jobs", "1")   # in this process, without a study
    answered = kill_when(["sweep", spec, "--out", tmp_path / "resumed", "--jobs", "1", "--study", db], db,
                         "sweep-question", at_least=1)
    assert 1 <= answered < 4 and not (tmp_path / "resumed" / "results.csv").exists()
    resumed = provision("sweep", spec, "--out", tmp_path / "resumed", "--jobs", "1", "--study", db)
    assert resumed.returncode == 0, resumed.stderr
    for name in ("results.csv", "results.parquet"):
        assert (tmp_path / "resumed" / name).read_bytes() == (tmp_path / "whole" / name).read_bytes(), name
    assert stored(db, "sweep-question") == 4 and stored(db, "des") > 0


def test_study_errors_are_one_line_naming_the_flag(tmp_path, capsys):
    from provisioner.cli import run
    not_a_database = tmp_path / "notes.txt"
    not_a_database.write_text("hello\n")
    foreign = tmp_path / "other-app.db"
    with sqlite3.connect(foreign) as conn:
        conn.execute("CREATE TABLE mine (x)")
    foreign_bytes = foreign.read_bytes()
    base = ["--goal", "cost", "--rps", "5", "--duration", "5", "--no-verify"]
    cases = [(["--design", "splitwise-hh", "--study", str(not_a_database)], "not a SQLite database"),
             (["--design", "splitwise-custom", "--prompt-machine-types", "dgx-h100", "--trials", "2",
               "--study", str(not_a_database)], "not a SQLite database"),    # optuna's storage: same check
             (["--design", "splitwise-hh", "--study", str(foreign)], "another application's SQLite database"),
             (["--design", "splitwise-hh", "--study", ""], "--study is empty"),
             (["--design", "splitwise-hh", "--study", str(tmp_path)], "is a directory"),
             (["--design", "splitwise-hh", "--study", str(tmp_path / "missing" / "x.db")], "does not exist")]
    for args, needle in cases:
        assert run([*base, *args]) == 2, args
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and "--study" in lines[0], lines
        assert needle in lines[0], lines
    assert not_a_database.read_text() == "hello\n"   # nothing the user gave is changed
    assert foreign.read_bytes() == foreign_bytes
