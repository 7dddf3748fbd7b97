"""Fixtures shared by the test modules."""

from __future__ import annotations

import os

import pytest

from perfmodels import LatencyModel

# A long run off a terminal prints a heartbeat line on stderr each minute (RichProgress);
# on a loaded machine a test's run can pass a minute, and tests read stderr (and click's
# mixed output) exactly. The heartbeat's own test sets the period it wants.
os.environ["PROVISION_HEARTBEAT_S"] = "86400"


@pytest.fixture(scope="session")
def perf() -> LatencyModel:
    """The shipped latency model (calibration and catalog), loaded once."""
    return LatencyModel()


@pytest.fixture(scope="module")
def llm(perf, request):
    """The catalog model named by the test module's MODEL (default BLOOM-176B)."""
    return perf.catalog.model(getattr(request.module, "MODEL", "bloom-176b"))


@pytest.fixture(scope="module")
def cli():
    """`provision ARGS` in this process (typer's runner); returns stdout, asserts exit 0."""
    from typer.testing import CliRunner

    from provisioner.cli import get_app

    app = get_app()
    runner = CliRunner()

    def run(*args):
        result = runner.invoke(app, [str(a) for a in args], catch_exceptions=False)
        assert result.exit_code == 0, result.output
        return result.stdout
    return run
