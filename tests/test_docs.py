"""The README's Python examples and the docstrings' examples run as written."""

from __future__ import annotations

import doctest
import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("hardware_catalog", "workloads", "perfmodels", "provisioner", "reports")


def readme_python_blocks() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M)


def modules_with_examples() -> list[str]:
    out = []
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            if ">>>" in path.read_text(encoding="utf-8"):
                parts = list(path.relative_to(ROOT).with_suffix("").parts)
                out.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return out


def test_the_readme_has_python_examples():
    assert readme_python_blocks(), "README.md lost its ```python blocks"


@pytest.mark.parametrize("index", range(len(readme_python_blocks())))
def test_readme_python_block_runs(index):
    block = readme_python_blocks()[index]
    namespace: dict = {}
    exec(compile(block, f"README.md python block {index + 1}", "exec"), namespace)
    if "cheapest" in namespace:  # the API example: a non-empty table of feasible designs
        cheapest = namespace["cheapest"]
        assert len(cheapest) and cheapest.slo_met.all()
        assert {"ttft_p99_s", "slowdown_tbt_p90", "margin_e2e_p99", "cost_usd_per_h", "power_kw"} <= set(
            namespace["table"].columns)
    if "replan_rows" in namespace:   # the cloud example: a plan, and its re-plan for the new mix
        answer = namespace["answer"]
        assert answer["sustained_rps"] > 0 and answer["replan"]["workload"] == "coding"
        assert [row["case"] for row in namespace["replan_rows"](answer)] == ["before", "none", "light", "full"]


@pytest.mark.parametrize("module", modules_with_examples())
def test_docstring_examples(module):
    result = doctest.testmod(importlib.import_module(module), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0, result
