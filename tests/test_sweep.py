"""`provision sweep SPEC.toml --out DIR` (CONTRACTS.md, command 7) as a user types it.

A tiny grid (10-s traces, two families, no DES re-check) so each sweep takes seconds:
the table's rows and columns, the price lists, the summary page, the overwrite rule,
spec errors (one line naming the file and the key, exit 2), the same table on a
`distributed.LocalCluster` as on the local backend, and the main command's `--arrival`,
`--cv`, `--latency-profile` and `--latency-interp` applied to every question.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import perfmodels
import pytest
import workloads

from provisioner.sweep import SWEEP_COLUMNS

PROVISION = str(Path(sys.executable).with_name("provision"))
SPEC = """\
goals = ["cost"]
rps = [5, 10]
families = ["splitwise-hh", "baseline-h100"]
duration_s = 10
verify = false

[price_lists]
catalog = {}
spot = { dgx-h100 = 20.0 }
"""


def provision(*args, timeout=300):
    return subprocess.run([PROVISION, *map(str, args)], capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    """(spec path, output dir) of one local sweep of SPEC."""
    root = tmp_path_factory.mktemp("sweep")
    spec = root / "spec.toml"
    spec.write_text(SPEC)
    proc = provision("sweep", spec, "--out", root / "local", "--jobs", "2")
    assert proc.returncode == 0, proc.stderr
    # the grid's size, said before it runs (a 101,000-question grid ran silently for hours)
    questions = pd.read_parquet(root / "local" / "results.parquet")["question"].nunique()
    assert proc.stderr.startswith(f"sweep: {questions} questions; a long sweep resumes after a stop with "
                                  f"--study PATH\n"), proc.stderr
    return spec, root / "local"


def test_sweep_table_one_row_per_question_and_family(swept):
    _, out = swept
    table = pd.read_parquet(out / "results.parquet")
    assert list(table.columns) == list(SWEEP_COLUMNS)
    assert len(table) == 4 * 2 and table["question"].nunique() == 4   # 2 rates x 2 price lists, 2 families
    assert set(table["family"]) == {"splitwise-hh", "baseline-h100"}
    assert table.groupby("question")["winner"].sum().eq(1).all()
    csv = pd.read_csv(out / "results.csv")
    assert len(csv) == len(table) and list(csv.columns) == list(table.columns)
    feasible = table[table["feasible"]]
    assert (feasible["machines"] == feasible["prompt_machines"] + feasible["token_machines"]).all()
    # cost per request = $/h / 3600 / (requests/s)
    assert feasible["cost_usd_per_request"].to_numpy() == pytest.approx(
        (feasible["cost_usd_per_h"] / 3600 / feasible["rps"]).to_numpy())
    for c in ("margin_ttft_p99", "slowdown_tbt_p90", "lower_bound", "gap_to_bound_pct", "min_margin"):
        assert feasible[c].notna().all(), c


def test_sweep_price_lists_reprice_the_machines(swept):
    _, out = swept
    table = pd.read_parquet(out / "results.parquet")
    spot = table[(table["price_list"] == "spot") & table["feasible"]]
    assert (spot["cost_usd_per_h"] == 20.0 * spot["machines"]).all()   # every machine is a DGX-H100 at $20/h
    listed = table[(table["price_list"] == "catalog") & table["feasible"]]
    assert (listed["cost_usd_per_h"] == 38.0 * listed["machines"]).all()


def test_sweep_summary_is_self_contained(swept):
    _, out = swept
    html = (out / "summary.html").read_text()
    assert 'id="plotly-js"' in html and 'data-chart="machines"' in html and 'data-chart="cost"' in html
    assert not re.search(r"""<script[^>]+src=""", html, flags=re.I)   # plotly.js inlined, nothing fetched
    assert html.count("spot") >= 2 and "baseline-h100" in html


def test_sweep_refuses_to_overwrite_without_force(swept):
    spec, out = swept
    before = (out / "results.csv").read_bytes()
    proc = provision("sweep", spec, "--out", out)
    assert proc.returncode == 2 and "already exists; pass --force" in proc.stderr
    assert (out / "results.csv").read_bytes() == before


SMALL = 'families = ["baseline-a100"]\nduration_s = 3\nmax_machines = 4\nverify = false\n'   # seconds of work


@pytest.mark.parametrize("body, needles", [
    ('rps = [5]\nfamilys = ["splitwise-hh"]\n', ["unknown key 'familys'", "families"]),
    ('rps = [-5]\n', ["key 'rps'", "> 0"]),
    ('rps = [5]\nfamilies = ["splitwise-hx"]\n', ["key 'families'", "splitwise-hh"]),
    ('rps = [5]\nmodels = ["gpt"]\n', ["key 'models'", "bloom-176b"]),
    ('goals = ["throughput"]\n', ["power_budget_kw", "cost_budget_usd_per_h"]),
    ('goals = ["cost"]\n', ["key 'rps'"]),
    ('rps = [5]\n[price_lists]\nspot = { dgx-h10 = 3.0 }\n', ["key 'price_lists.spot.dgx-h10'", "dgx-h100"]),
    ('rps = [5]\n[price_lists]\nspot = { dgx-h100 = 0 }\n', ["key 'price_lists.spot.dgx-h100'", "> 0"]),
    # were an OverflowError (exit 1), and a run with solver errors writing cost inf as feasible
    ('rps = [5]\n[price_lists]\nspot = { dgx-h100 = 1' + '0' * 400 + ' }\n',
     ["key 'price_lists.spot.dgx-h100'", "at most 1e+06", "a 401-digit integer"]),
    ('rps = [5]\n[price_lists]\nspot = { dgx-h100 = 1e308 }\n', ["key 'price_lists.spot.dgx-h100'", "at most 1e+06"]),
    ('rps = [5]\n[price_lists]\nspot = { dgx-h100 = 1.5e6 }\n', ["key 'price_lists.spot.dgx-h100'", "at most 1e+06"]),
    ('rps = [5\n', ["not valid TOML"]),
    # keys no question reads: were accepted and changed nothing
    ('goals = ["throughput"]\nrps = [5]\npower_budget_kw = [100]\n' + SMALL, ["key 'rps'", "goals cost and power"]),
    ('rps = [5]\npower_budget_kw = [100]\n' + SMALL, ["key 'power_budget_kw'", "goal throughput"]),
    ('rps = [5]\ncv = 3\n' + SMALL, ["key 'cv'", 'arrival = "gamma"']),
    ('rps = [5]\nverify_duration_s = 60\n' + SMALL, ["key 'verify_duration_s'", "verify = false"]),
    ('rps = [5]\ntrials = 8\n' + SMALL, ["key 'trials'", 'searcher = "optuna"']),
    # a replay has no draws: the same question, row and work once per seed
    ('rps = [5]\narrival = "replay"\nseeds = [0, 1]\n' + SMALL, ["key 'seeds'", "same question again"]),
    # a mistyped name is not a replayed file: was "key 'seeds' ... every workload is replayed"
    ('rps = [5]\nworkloads = ["codng"]\nseeds = [0, 1]\n' + SMALL, ["key 'workloads': unknown workloads 'codng'", "coding"]),
    ('goals = ["throughput"]\npower_budget_kw = [100]\nsearcher = "exhaustive"\n' + SMALL,
     ["key 'searcher'", "races every design"]),
    # asked the same questions twice: duplicate rows, twice the time
    ('rps = [5, 10, 5.0]\n' + SMALL, ["key 'rps' lists 5.0 twice"]),
    ('rps = [5]\nworkloads = ["coding", "Code"]\n' + SMALL, ["key 'workloads' lists 'coding' and 'Code', one workload"]),
    (f'rps = [5]\nworkloads = ["{Path(workloads.__file__).parent / "data" / "code.csv"}", '
     f'"{Path(workloads.__file__).parent / "data" / ".." / "data" / "code.csv"}"]\n' + SMALL, ["one workload"]),
    # named the request's field (n_trials) and Python's booleans
    ('rps = [5]\nsearcher = "optuna"\ntrials = 0\n', ["key 'trials': trials must be an integer"]),
    ('rps = [5]\nverify = "no"\n', ["key 'verify': verify must be true or false"]),
    # was "cannot read trace '<the spec's folder>': it is a directory" ('' is '.' to Path)
    ('rps = [5]\nworkloads = [""]\n', ["key 'workloads'", "is empty"]),
    # were refused only once the question ran, naming no key (and after the others had run)
    ('rps = [5, 1e300]\n' + SMALL, ["keys 'rps' and 'duration_s': 1e+300 requests/s over 3 s", "more than a trace holds"]),
    ('rps = [1e300]\nverify = false\n', ["key 'rps': 1e+300 requests/s over 120 s", "more than a trace holds"]),
    # a replay's window past the floats: an internal OverflowError once the question ran
    (f'rps = [1000]\nworkloads = ["{Path(workloads.__file__).parent / "data" / "code.csv"}"]\nduration_s = 1e308\n',
     ["key 'duration_s': a 1e+308-s window of trace", "repeats the file beyond counting"]),
])
def test_sweep_spec_errors_name_file_and_key(tmp_path, capsys, body, needles):
    from provisioner.cli import run   # the console script's error path, in this process
    spec = tmp_path / "bad.toml"
    spec.write_text(body)
    assert run(["sweep", str(spec), "--out", str(tmp_path / "out")]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: '{spec}': "), lines
    for needle in needles:
        assert needle in lines[0]
    assert not (tmp_path / "out").exists()   # refused before any work or output


JSQ = 'scheduler = "jsq"\n'


@pytest.mark.parametrize("name, body, flags, message", [
    # a value given as a flag: the flag, not a spec key it never came from (was "key 'preemption'")
    ("s", JSQ, ["--preemption", "bogus"], "--preemption must be one of recompute, swap (got 'bogus')"),
    ("s", JSQ, ["--preemption", "swap", "--swap-space-gb", "-1"], "--swap-space-gb must be a finite number > 0"),
    ("s", JSQ, ["--preemption", "swap", "--swap-space-gb", "nan"],   # was an internal error (KeyError)
     "--swap-space-gb must be a finite number > 0 (got nan)"),
    ("s", "", ["--scheduler", "bogus"], "--scheduler must be one of least-work, jsq"),
    ("s", "", ["--preemption", "swap"], "--preemption swap sets how the on-demand schedulers preempt; --scheduler "
                                        "least-work does not preempt"),
    ("s", 'families = ["splitwiser-h100"]\n', ["--scheduler", "splitwisesim"],
     "'{spec}': key 'families': --scheduler splitwisesim applies to the baseline and splitwise designs"),
    # a value in the spec: its key, after the file's quoted path
    ("s", JSQ + 'preemption = "bogus"\n', [], "'{spec}': key 'preemption': preemption must be one of"),
    ("s", JSQ + 'preemption = "swap"\nswap_space_gb = -1\n', [],
     "'{spec}': key 'swap_space_gb': swap_space_gb must be a finite number > 0"),
    ("s", 'preemption = "swap"\n', [], "'{spec}': key 'preemption': preemption swap sets how the on-demand"),
    ("s", 'scheduler = "splitwisesim"\nfamilies = ["splitwiser-h100"]\n', [],   # was "--scheduler splitwisesim"
     "'{spec}': keys 'scheduler' and 'families': scheduler splitwisesim applies to the baseline and splitwise designs"),
    # one value from each place: each named where it was given
    ("s", 'swap_space_gb = 3\n', ["--preemption", "recompute"],
     "'{spec}': key 'swap_space_gb' sets the host memory of KV swapping, which --preemption recompute does not use"),
    ("s", 'preemption = "recompute"\n', ["--swap-space-gb", "3"],
     "'{spec}': key 'preemption' is 'recompute', and --swap-space-gb sets the host memory of KV swapping"),
    # a quoted path is the user's text: a spec named cv.toml stays cv.toml (was --cv.toml)
    ("cv", 'arrival = "poisson"\n', ["--cv", "3"],
     "'{spec}': key 'arrival' is 'poisson', and --cv sets the burstiness of gamma arrivals"),
])
def test_sweep_errors_name_the_flag_or_the_spec_key(tmp_path, capsys, name, body, flags, message):
    """An error about a value names where it came from: the flag when given on the command
    line, the spec's key (after the file's quoted path) when given in the spec."""
    from provisioner.cli import run
    spec = tmp_path / f"{name}.toml"
    spec.write_text('rps = [2]\nduration_s = 3\nverify = false\n' + body)
    code = run(["sweep", str(spec), "--out", str(tmp_path / "out"), *flags])
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), lines
    assert message.format(spec=spec) in lines[0]
    assert ("key '" in lines[0] or "keys '" in lines[0]) == ("'{spec}'" in message), lines[0]   # a flag's error names no spec key
    assert not (tmp_path / "out").exists()

def test_a_failed_sweep_leaves_no_empty_out_directory(tmp_path, capsys):
    """Was: --out was created before the run, so a sweep that failed (here: no Dask scheduler
    at that address) left an empty directory behind."""
    from provisioner.cli import run
    spec = tmp_path / "s.toml"
    spec.write_text('rps = [2]\n' + SMALL)
    assert run(["sweep", str(spec), "--out", str(tmp_path / "out" / "sub"), "--dask-scheduler", ""]) == 2
    assert "--dask-scheduler" in capsys.readouterr().err and not (tmp_path / "out").exists()
    (tmp_path / "file").write_text("x")
    assert run(["sweep", str(spec), "--out", str(tmp_path / "file" / "sub")]) == 2   # refused before the run
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is a file" in err, err


def test_sweep_on_dask_local_cluster_gives_the_local_table(swept, tmp_path):
    """`--dask-local 2` runs the questions on a `distributed.LocalCluster` (joblib's dask
    backend): the same table, byte for byte in CSV, as the local backend."""
    spec, local = swept
    proc = provision("sweep", spec, "--out", tmp_path, "--dask-local", "2")
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "results.csv").read_bytes() == (local / "results.csv").read_bytes()
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "results.parquet"),
                                  pd.read_parquet(local / "results.parquet"))


def test_a_worker_limited_to_one_numba_thread_still_simulates():
    """A sweep task lowers numba's threads (Dask workers: cores / workers on the machine);
    the fluid engine then runs its designs on that many threads, and simulating works."""
    code = ("import numba; from provisioner.sweep._run import _limit_numba_threads; _limit_numba_threads(1); "
            "from provisioner import grid, simulate; from workloads import make_workload; "
            "t = simulate(grid('splitwise-hh', [2, 3], [1]), make_workload('coding', rps=2, duration_s=5, seed=0)); "
            "print(numba.get_num_threads(), numba.config.NUMBA_NUM_THREADS, len(t))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["1", "1", "2"]


def test_spec_grid_and_trace_files_relative_to_the_spec(tmp_path):
    """The grid is goals x models x workloads x loads x price lists x seeds; a CSV workload is
    read relative to the spec and replayed whole (as `provision` does), drawn ones 120 s."""
    from provisioner.sweep import load_sweep_spec
    rows = "\n".join(f"{i * 0.5},{100 + i},{5 + i % 3}" for i in range(40))
    (tmp_path / "t.csv").write_text("arrival_s,prompt_tokens,output_tokens\n" + rows + "\n")
    (tmp_path / "s.toml").write_text('goals = ["cost", "throughput"]\nworkloads = ["t.csv", "coding"]\n'
                                     'rps = [2, 4]\npower_budget_kw = [100]\nseeds = [0, 1]\n'
                                     'families = ["splitwise-hh"]\n[price_lists]\na = {}\nb = "sw-table-v"\n')
    questions = load_sweep_spec(tmp_path / "s.toml").questions
    # (rates + budgets) x lists x seeds drawn, x lists once replayed (a replay draws nothing: seed 0 only)
    assert len(questions) == (2 + 1) * 2 * 2 + (2 + 1) * 2
    assert [q.index for q in questions] == list(range(len(questions)))
    replayed = [q.request for q in questions if q.request.workload != "coding"]
    assert all(r.workload == str(tmp_path / "t.csv") and r.arrival == "replay" for r in replayed)
    # the whole file: its 40 rows, time-scaled to the rate (cost) or at its own 2 req/s (throughput)
    assert all(r.duration_s == 40 / (r.rps or 2.0) for r in replayed)
    drawn = [q.request for q in questions if q.request.workload == "coding"]
    assert all(r.arrival == "poisson" and r.duration_s == 120.0 for r in drawn)
    table_v = next(q for q in questions if q.price_list == "b").prices
    assert table_v["dgx-h100"] == 41.36   # the catalog's sw-table-v option


def test_a_replayed_question_runs_once_among_seeded_ones_and_resumes(tmp_path):
    """seeds = [3, 1] over a drawn and a replayed workload ran the replayed question twice:
    the same run (a replay ignores the seed) and the same rows. It runs once, under the
    first seed; the drawn one under each. Run again on its study, the table is the same."""
    from provisioner.store import open_store
    from provisioner.sweep import load_sweep_spec, run_sweep

    rows = "\n".join(f"{i * 0.25},{100 + i},{5 + i % 3}" for i in range(16))
    (tmp_path / "t.csv").write_text("arrival_s,prompt_tokens,output_tokens\n" + rows + "\n")
    (tmp_path / "s.toml").write_text('rps = [2]\nworkloads = ["t.csv", "coding"]\nseeds = [3, 1]\n' + SMALL)
    questions = load_sweep_spec(tmp_path / "s.toml").questions
    assert [(q.request.arrival, q.request.seed) for q in questions] == [("replay", 3), ("poisson", 3), ("poisson", 1)]
    db = tmp_path / "study.db"
    table = run_sweep(questions, study=db, n_jobs=1)
    assert list(zip(table.workload.str.endswith("t.csv"), table.seed)) == [(True, 3), (False, 3), (False, 1)]
    again = run_sweep(load_sweep_spec(tmp_path / "s.toml").questions, study=db, n_jobs=1)
    pd.testing.assert_frame_equal(again, table)
    assert open_store(db).count("sweep-question") == 3


def test_optuna_seeds_a_replayed_question_so_each_seed_runs(tmp_path):
    """searcher optuna draws its trials with the seed: a replayed question differs per seed."""
    from provisioner.sweep import load_sweep_spec

    spec = tmp_path / "s.toml"
    spec.write_text('rps = [2]\narrival = "replay"\nsearcher = "optuna"\nseeds = [0, 1]\n' + SMALL)
    assert [q.request.seed for q in load_sweep_spec(spec).questions] == [0, 1]


def test_spec_trace_paths_resolve_as_every_path_does(tmp_path):
    """A spec's trace path is read as `--out` and `--study` are (`provisioner.files`): `~`
    expanded (was read as a folder named ~ beside the spec), a symbolic link followed, a
    path beside the spec found whatever the case of its .CSV (was read relative to the
    working directory), each recorded as the file it reads."""
    home, specs = tmp_path / "home", tmp_path / "specs"
    (home / "traces").mkdir(parents=True)
    specs.mkdir()
    rows = "\n".join(f"{i * 0.5},{100 + i},{5 + i % 3}" for i in range(20))
    trace = home / "traces" / "t.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n" + rows + "\n")
    linked = home / "traces" / "t2.csv"   # another file: two spellings of one are refused (the same question)
    linked.write_text(trace.read_text())
    (specs / "link.csv").symlink_to(linked)
    (specs / "UPPER.CSV").write_text(trace.read_text())
    (specs / "s.toml").write_text('rps = [2]\nworkloads = ["~/traces/t.csv", "link.csv", "UPPER.CSV"]\n'
                                  'families = ["baseline-a100"]\nmax_machines = 4\nverify = false\n')
    env = {**os.environ, "HOME": str(home),   # the simulator's compiled cache stays where it is
           "XDG_CACHE_HOME": os.environ.get("XDG_CACHE_HOME", str(Path.home() / ".cache"))}
    proc = subprocess.run([PROVISION, "sweep", "specs/s.toml", "--out", "out", "--jobs", "1"],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr
    workloads = list(pd.read_csv(tmp_path / "out" / "results.csv").workload)
    assert workloads == [str(trace.resolve()), str(linked.resolve()), str((specs / "UPPER.CSV").resolve())]


@pytest.mark.parametrize("workload, message", [
    ("loop.csv", "leads into a loop of symbolic links"),   # was an internal error (RuntimeError)
    ("~no-such-user-here/t.csv", "home folder (~name) of an unknown user"),
])
def test_spec_trace_path_that_cannot_resolve_is_one_line(tmp_path, capsys, workload, message):
    from provisioner.cli import run
    (tmp_path / "loop.csv").symlink_to(tmp_path / "loop2.csv")
    (tmp_path / "loop2.csv").symlink_to(tmp_path / "loop.csv")
    spec = tmp_path / "s.toml"
    spec.write_text(f'rps = [2]\nworkloads = ["{workload}"]\n' + SMALL)
    assert run(["sweep", str(spec), "--out", str(tmp_path / "out")]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: '{spec}': key 'workloads': "), lines
    assert message in lines[0]
    assert not (tmp_path / "out").exists()

# -- the main command's trace and latency-model flags (CONTRACTS.md item 6) --------------
SHARED_PROFILE = Path("/work/shared/data/profiles/llama2-70b_dgx.csv")   # SplitwiseSim's measurements
PROFILE = (SHARED_PROFILE if SHARED_PROFILE.is_file()   # else the shipped copy of it
           else Path(perfmodels.__file__).parent / "data" / SHARED_PROFILE.name)
# one question where the measured profile and the roofline disagree (seconds of work)
PROFILED = ('models = ["llama2-70b"]\nrps = [5]\nfamilies = ["baseline-h100"]\nduration_s = 10\n'
            'verify = false\n')
ASKED = ("--goal", "cost", "--rps", "5", "--design", "baseline-h100", "--duration", "10", "--no-verify")


def _only_row(out: Path) -> dict:
    table = pd.read_csv(out / "results.csv")
    assert len(table) == 1, table
    return table.iloc[0].to_dict()


def _provision_best(*args, model: str = "llama2-70b") -> dict:
    import json
    proc = provision(*ASKED, "--model", model, *args, "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)["best"][0]


def test_sweep_latency_profile_answers_as_provision_does_and_never_reuses_another_models_answers(tmp_path):
    """`--latency-profile` runs every question on the measured model: the sweep's answer is
    `provision`'s with the same profile (here 3 DGX-H100 where the roofline takes 4), the
    table names the profile, and one --study never hands a question's answer from one
    latency model (roofline, grid, splitwisesim) to another."""
    spec = tmp_path / "s.toml"
    spec.write_text(PROFILED)
    study = tmp_path / "study.db"
    runs = {"roofline": (), "grid": ("--latency-profile", PROFILE),
            "splitwisesim": ("--latency-profile", PROFILE, "--latency-interp", "splitwisesim")}
    rows = {}
    for name, flags in runs.items():   # the roofline first: its stored answer must not come back
        proc = provision("sweep", spec, "--out", tmp_path / name, "--jobs", "1", "--study", study, *flags)
        assert proc.returncode == 0, proc.stderr
        rows[name] = _only_row(tmp_path / name)
    assert "latency_profile" not in rows["roofline"]
    for interp in ("grid", "splitwisesim"):
        assert rows[interp]["latency_profile"] == str(PROFILE) and rows[interp]["latency_interp"] == interp
        assert len(rows[interp]["latency_profile_sha256"]) == 64
    best = _provision_best("--latency-profile", PROFILE)
    row = rows["grid"]
    assert (row["prompt_machines"], row["token_machines"]) == (best["design"]["prompt_machines"],
                                                              best["design"]["token_machines"])
    assert row["cost_usd_per_h"] == pytest.approx(best["cost_usd_per_h"])
    assert row["slowdown_ttft_p99"] == pytest.approx(best["slo"]["slowdown"]["ttft"]["p99"])
    assert row["machines"] == 3 and rows["roofline"]["machines"] == 4 and rows["splitwisesim"]["machines"] == 4
    # the same sweep again, its question sent to a Dask worker (the fitted model pickled with
    # it), finds its own stored answer under the same key: the same row
    proc = provision("sweep", spec, "--out", tmp_path / "again", "--study", study, "--latency-profile", PROFILE,
                     "--dask-local", "1")
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "again" / "results.csv").read_bytes() == (tmp_path / "grid" / "results.csv").read_bytes()
    from provisioner.store import ResultStore
    assert ResultStore(study).count("sweep-question") == 3   # one answer per latency model


def test_sweep_arrival_gamma_is_the_main_commands(tmp_path):
    """`--arrival gamma --cv 3` draws every question's trace from the gamma process: the
    answer differs from the Poisson one, equals `provision --arrival gamma --cv 3`'s, and
    the table records the arrival process and its cv."""
    spec = tmp_path / "s.toml"
    spec.write_text(PROFILED.replace("llama2-70b", "bloom-176b"))
    poisson = provision("sweep", spec, "--out", tmp_path / "poisson", "--jobs", "1")
    gamma = provision("sweep", spec, "--out", tmp_path / "gamma", "--jobs", "1", "--arrival", "gamma", "--cv", "3")
    assert poisson.returncode == 0 and gamma.returncode == 0, poisson.stderr + gamma.stderr
    drawn, bursty = _only_row(tmp_path / "poisson"), _only_row(tmp_path / "gamma")
    assert "arrival" not in drawn and (bursty["arrival"], bursty["cv"]) == ("gamma", 3.0)
    slowdowns = [c for c in drawn if c.startswith("slowdown_")]
    assert [drawn[c] for c in slowdowns] != pytest.approx([bursty[c] for c in slowdowns])
    best = _provision_best("--arrival", "gamma", "--cv", "3", model="bloom-176b")
    assert bursty["machines"] == best["design"]["prompt_machines"] + best["design"]["token_machines"]
    assert bursty["slowdown_e2e_p99"] == pytest.approx(best["slo"]["slowdown"]["e2e"]["p99"])


@pytest.mark.parametrize("spec_lines, flags, needles", [
    ("", ["--latency-profile", "missing.csv"], ["--latency-profile 'missing.csv'", "cannot read"]),
    ("", ["--latency-profile", "bad.csv"], ["--latency-profile 'bad.csv', line 1", "missing columns"]),
    ("", ["--latency-interp", "splitwisesim"], ["--latency-interp needs --latency-profile"]),
    ("", ["--latency-profile", PROFILE, "--latency-interp", "linear"], ["--latency-interp", "grid, splitwisesim"]),
    ("", ["--arrival", "bursty"], ["--arrival must be one of replay, poisson, gamma", "'bursty'"]),
    ("", ["--arrival", "gamma", "--cv", "-1"], ["--cv must be a finite number > 0"]),
    ("", ["--cv", "3"], ["--cv sets the burstiness of gamma arrivals", "--arrival gamma"]),
    ('arrival = "poisson"\n', ["--arrival", "gamma"], ["the spec asks for 'poisson'", "--arrival 'gamma'",
                                                       "in one place"]),
    ('arrival = "gamma"\ncv = 2\n', ["--cv", "3"], ["the spec asks for '2'", "--cv '3.0'"]),
])
def test_sweep_trace_and_latency_flags_refused_before_any_question(tmp_path, capsys, monkeypatch, spec_lines, flags,
                                                                  needles):
    """A bad --latency-profile (missing, malformed), an idle or bad flag, or a flag the spec
    contradicts (as with --scheduler: given in two places, the values must agree): one line,
    exit 2, before any question runs or any output is made."""
    from provisioner.cli import run
    spec = tmp_path / "s.toml"
    spec.write_text('rps = [2]\n' + SMALL + spec_lines)
    (tmp_path / "bad.csv").write_text("model,hardware\nllama2-70b,h100-80gb\n")
    monkeypatch.chdir(tmp_path)   # the profile paths are relative
    code = run(["sweep", str(spec), "--out", str(tmp_path / "out"), *map(str, flags)])
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), lines
    for needle in needles:
        assert needle in lines[0], lines[0]
    assert not (tmp_path / "out").exists()


def test_sweep_takes_cv_with_the_specs_gamma_and_never_overwrites_the_profile(tmp_path, capsys):
    """--cv with a spec's `arrival = "gamma"` is taken (the spec reads it as its own); the
    profile is an input: an output over it is refused, --force or not."""
    from provisioner.sweep import load_sweep_spec
    spec = tmp_path / "s.toml"
    spec.write_text('rps = [2]\narrival = "gamma"\n' + SMALL)
    request = load_sweep_spec(spec, arrival="gamma", cv=3.0).questions[0].request
    assert (request.arrival, request.cv) == ("gamma", 3.0)
    from provisioner.cli import run
    out = tmp_path / "out"
    out.mkdir()
    profile = out / "results.csv"
    profile.write_bytes(PROFILE.read_bytes())
    before = profile.read_bytes()
    code = run(["sweep", str(spec), "--out", str(out), "--force", "--cv", "3", "--latency-profile", str(profile)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "--out" in err and "input" in err, err
    assert profile.read_bytes() == before


def test_a_sweep_off_a_terminal_says_how_far_it_is(tmp_path):
    """Its bar shows on a terminal only: in a log, a sweep of hours said nothing until its end."""
    (tmp_path / "spec.toml").write_text('rps = [2, 3]\nfamilies = ["splitwise-hh"]\nduration_s = 5\nverify = false\n')
    proc = subprocess.run([PROVISION, "sweep", str(tmp_path / "spec.toml"), "--out", str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PROVISION_HEARTBEAT_S": "0.05"})
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"^\.\.\. sweep \d/2 questions \(\d+ s\)$", proc.stderr, re.MULTILINE), proc.stderr
