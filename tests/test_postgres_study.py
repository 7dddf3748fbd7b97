"""Two worker processes on one PostgreSQL study (`--study postgresql://...`).

The test starts a throwaway PostgreSQL server of its own (Debian's `postgresql` package:
`initdb` + `pg_ctl`, a Unix socket in a temporary directory, no TCP port). Under CI
(`CI` set, as `.ci/run` is run) it FAILS when there is none: `.ci/run` installs the
package, so a missing server is a broken CI, not an optional feature. Elsewhere (a
newcomer's quick start) it skips, saying how to install one. Run as root, the server runs
as the `postgres` user (PostgreSQL refuses root).
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

PROVISION = str(Path(sys.executable).with_name("provision"))
SEARCH = ["--goal", "cost", "--rps", "10", "--duration", "20", "--design", "splitwise-custom",
          "--prompt-machine-types", "dgx-h100,dgx-a100", "--trials", "24", "--no-verify", "--json"]
INSTALL_HINT = "install Debian's PostgreSQL server (apt-get install postgresql), as .ci/run does"


def _bindir() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=lambda p: int(Path(p).parts[-3]))
    pg_ctl = found[-1] if found else shutil.which("pg_ctl")
    if pg_ctl is None:
        missing = pytest.fail if os.environ.get("CI") else pytest.skip
        missing(f"no PostgreSQL server binaries (pg_ctl, initdb) on this machine: {INSTALL_HINT}")
    return Path(pg_ctl).parent


def _as_server_user(cmd: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *cmd] if os.geteuid() == 0 else cmd


@pytest.fixture(scope="module")
def postgres_url():
    """A PostgreSQL server of this test module: its URL (Unix socket), stopped afterwards."""
    bindir = _bindir()
    root = Path(tempfile.mkdtemp(prefix="provisioner-pg-"))
    if os.geteuid() == 0:
        shutil.chown(root, "postgres", "postgres")
    data = root / "data"

    def run(*cmd):
        proc = subprocess.run(_as_server_user([str(bindir / cmd[0]), *cmd[1:]]), capture_output=True, text=True,
                              timeout=120)
        if proc.returncode != 0:
            pytest.fail(f"could not start PostgreSQL ({cmd[0]}: {proc.stderr.strip()[-400:]}): {INSTALL_HINT}")

    run("initdb", "-D", str(data), "-A", "trust", "-U", "postgres", "--no-sync")
    run("pg_ctl", "-D", str(data), "-l", str(root / "server.log"), "-w", "-o",
        f"-c listen_addresses='' -k {root} -p 5432 -c fsync=off", "start")
    try:
        yield f"postgresql://postgres@/postgres?host={root}&port=5432"
    finally:
        subprocess.run(_as_server_user([str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"]),
                       capture_output=True, timeout=60)
        shutil.rmtree(root, ignore_errors=True)


def _answer(text: str) -> dict:
    obj = json.loads(text)
    obj.pop("elapsed_s")
    for part in obj["best"] + [obj["winner"]]:
        part.pop("elapsed_s")
    return obj


def test_two_workers_share_one_postgresql_study(postgres_url, cli):
    """Two processes run the same optuna search on one study at once: both give the answer
    of a run without a study, and the database holds each trial and each simulated design."""
    alone = cli(*SEARCH)   # in this process, without a study
    workers = [subprocess.Popen([PROVISION, *SEARCH, "--study", postgres_url], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [w.communicate(timeout=300) for w in workers]
    for w, (out, err) in zip(workers, outs):
        assert w.returncode == 0, err
        assert _answer(out) == _answer(alone)

    import sqlalchemy as sa
    engine = sa.create_engine(postgres_url)
    with engine.connect() as conn:
        designs = conn.execute(sa.text("SELECT count(*) FROM provisioner_results WHERE kind = 'fluid'")).scalar()
        seqs = {json.loads(v) for (v,) in conn.execute(
            sa.text("SELECT value_json FROM trial_user_attributes WHERE key = 'seq'"))}
    engine.dispose()
    assert designs == len(_answer(alone)["evaluated"])   # each design stored once, by either worker
    assert seqs == set(range(24))
