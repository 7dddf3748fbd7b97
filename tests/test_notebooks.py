"""The notebooks run top to bottom on their default settings (nbclient), each within 2 min.

They are built from `notebooks/_build.py`; the first test fails when a notebook was edited
by hand or not rebuilt. The kernel is this interpreter (a kernel spec installed into a
temporary prefix and searched alone, so no user-level `python3` kernel is picked up).
"""

from __future__ import annotations

import importlib.util
import json
import sys
import time
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
BUDGET_S = 120.0  # per notebook, default settings


def _builder():
    spec = importlib.util.spec_from_file_location("notebooks_build", NOTEBOOKS / "_build.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def kernel_manager(tmp_path_factory):
    """A factory of kernel managers that start `sys.executable -m ipykernel_launcher`."""
    from ipykernel.kernelspec import install
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import KernelManager

    prefix = tmp_path_factory.mktemp("jupyter")
    install(prefix=str(prefix), kernel_name="python3")
    specs = KernelSpecManager(kernel_dirs=[str(prefix / "share" / "jupyter" / "kernels")])
    assert specs.get_kernel_spec("python3").argv[0] == sys.executable
    return lambda: KernelManager(kernel_name="python3", kernel_spec_manager=specs)


def _run(name: str, kernel_manager, workdir: Path) -> tuple[nbformat.NotebookNode, float]:
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    client = NotebookClient(nb, km=kernel_manager(), timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": str(workdir)}})
    t0 = time.perf_counter()
    client.execute()
    return nb, time.perf_counter() - t0


def _text(nb) -> str:
    out = []
    for cell in nb.cells:
        for o in cell.get("outputs", []):
            out.append(o.get("text", ""))
            out.append(json.dumps(o.get("data", {}).get("text/plain", "")))
    return "\n".join(out)


def test_notebooks_are_built_from_the_script():
    builder = _builder()
    assert sorted(builder.NOTEBOOKS) == sorted(p.name for p in NOTEBOOKS.glob("*.ipynb"))
    for name in builder.NOTEBOOKS:
        assert (NOTEBOOKS / name).read_text(encoding="utf-8") == builder.render(name), \
            f"{name} is stale: run python notebooks/_build.py"
        nb = nbformat.reads(builder.render(name), as_version=4)
        nbformat.validate(nb)
        assert not any(c.get("outputs") for c in nb.cells if c.cell_type == "code")
        settings = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
        assert len(settings) == 1 and "FULL_STUDY = False" in settings[0].source


@pytest.mark.slow
def test_capacity_planning_runs(kernel_manager, tmp_path):
    nb, elapsed = _run("capacity_planning.ipynb", kernel_manager, tmp_path)
    assert elapsed < BUDGET_S, f"{elapsed:.0f} s"
    table = (tmp_path / "capacity_plan.csv").read_text().splitlines()
    assert table[0].startswith("family,feasible,prompt_machines") and len(table) == 1 + 3
    assert (tmp_path / "capacity_report.html").stat().st_size > 1e6
    assert "x2 load -> x" in _text(nb)


@pytest.mark.slow
def test_reproduce_splitwise_runs(kernel_manager, tmp_path):
    nb, elapsed = _run("reproduce_splitwise.ipynb", kernel_manager, tmp_path)
    assert elapsed < BUDGET_S, f"{elapsed:.0f} s"
    text = _text(nb)
    for claim in ("Fig. 12 cost-optimal Splitwise-HH", "iso-power", "iso-throughput", "Table IV"):
        assert claim in text, claim


@pytest.mark.slow
def test_cloud_planning_runs(kernel_manager, tmp_path):
    nb, elapsed = _run("cloud_planning.ipynb", kernel_manager, tmp_path)
    assert elapsed < BUDGET_S, f"{elapsed:.0f} s"
    text = _text(nb)
    for claim in ("split over non-split", "without a6000-4x-0, at 6 req/s", "before (all nodes)",
                  "the conversation plan when the requests become coding's", "before (the planned mix)",
                  "lightweight re-plan", "no model reloaded", "split: rent"):
        assert claim in text, claim
    assert (tmp_path / "cloud_report.html").stat().st_size > 1e6
