"""Fixtures shared by the test modules."""

from __future__ import annotations

import pytest

from perfmodels import LatencyModel


@pytest.fixture(scope="session")
def perf() -> LatencyModel:
    """The shipped latency model (calibration and catalog), loaded once."""
    return LatencyModel()


@pytest.fixture(scope="module")
def llm(perf, request):
    """The catalog model named by the test module's MODEL (default BLOOM-176B)."""
    return perf.catalog.model(getattr(request.module, "MODEL", "bloom-176b"))
