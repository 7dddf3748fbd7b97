"""First run: commands that do not simulate never import numba, and the kernel says it
is compiling only when its on-disk cache really misses (issue #10, fast first run)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from provisioner.designs import make_design
from provisioner.sim import simulate

NO_NUMBA = """
import sys
from provisioner.cli import main
try:
    main({argv!r})
except SystemExit as stop:
    assert not stop.code, stop.code
print("numba" in sys.modules)
"""


@pytest.mark.parametrize("argv", [["catalog"], ["perf", "predict", "--help"], ["report", "--help"], ["--help"]])
def test_commands_that_do_not_simulate_never_import_numba(argv):
    out = subprocess.run([sys.executable, "-c", NO_NUMBA.format(argv=argv)], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip().splitlines()[-1] == "False"


@pytest.fixture
def tiny_trace_for_first_run():
    from workloads import make_workload
    return make_workload("coding", 5, duration_s=5, seed=0)


ANNOUNCE = "from provisioner.sim import _fluid; _fluid._announce_compile(); _fluid._announce_compile()"


def _announce_stderr(env):
    return subprocess.run([sys.executable, "-c", ANNOUNCE], capture_output=True, text=True, check=True,
                          env=env).stderr


def test_compiling_message_once_on_an_empty_cache(tmp_path):
    from provisioner.sim import COMPILING_MESSAGE
    env = {**os.environ, "PROVISIONER_JIT_CACHE": str(tmp_path / "jit")}
    env.pop("NUMBA_CACHE_DIR", None)
    assert _announce_stderr(env).splitlines() == [COMPILING_MESSAGE]


def test_no_compiling_message_when_the_cache_holds_the_kernel(tiny_trace_for_first_run):
    # this process runs the kernel, so the cache it uses holds it; a new process reads it
    simulate(make_design("splitwise-hh", 2, 1), tiny_trace_for_first_run, "bloom-176b")
    env = dict(os.environ)
    assert _announce_stderr(env) == ""


@pytest.mark.parametrize("env_name", ["PROVISIONER_JIT_CACHE", "NUMBA_CACHE_DIR"])
def test_a_cache_variable_naming_a_file_warns_and_uses_the_default(tmp_path, env_name):
    """`PROVISIONER_JIT_CACHE=some-file`: numba found no cache directory there and fell back,
    without a word, to `__pycache__` inside the installed package (what the per-user cache
    exists to avoid). Now one warning line names the variable, the file is left alone and
    the default cache is used."""
    from pathlib import Path

    import provisioner

    not_a_dir = tmp_path / "cache.txt"
    not_a_dir.write_text("mine")
    package = Path(provisioner.__file__).parent
    before = {p: p.stat().st_mtime_ns for p in package.rglob("*.nbi")}
    env = {k: v for k, v in os.environ.items() if k not in ("PROVISIONER_JIT_CACHE", "NUMBA_CACHE_DIR")}
    env[env_name] = str(not_a_dir)
    r = subprocess.run([str(Path(sys.executable).with_name("provision")), "simulate", "--design", "baseline-a100",
                        "--machines", "2", "--rps", "1", "--duration", "5", "--json"],
                       capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr
    warnings = [line for line in r.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and env_name in warnings[0] and "is a file" in warnings[0], r.stderr
    assert not_a_dir.read_text() == "mine"
    assert {p: p.stat().st_mtime_ns for p in package.rglob("*.nbi")} == before   # nothing cached in the package
