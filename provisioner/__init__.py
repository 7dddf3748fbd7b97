"""provisioner: choose LLM inference clusters that meet latency SLOs at the least cost or power.

Public surface (the CLI is a thin layer over these):

- the search: `provision(ProvisionRequest(...))` -> `ProvisionResult`
- designs: `Design`, `DesignBatch`, `make_design`, `grid`, `FAMILIES`, `family_spec`
- SLOs: `SLO`
- simulation: `simulate` (fluid or discrete-event engine, one row per design)
- errors: `ProvisionerError` (one line naming the parameter and the fix)

Subpackages: `provisioner.sim` (engines), `provisioner.search` (searchers, bounds),
`provisioner.cli` (the `provision` command).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

# Loaded on first use (PEP 562): `import provisioner.cli` then runs no pandas before the
# command can take a Ctrl-C in one line (cli/_loading.py). `from provisioner import X` is
# unchanged. The module each public name comes from:
_PUBLIC = {"FAMILIES": "designs", "Design": "designs", "DesignBatch": "designs", "family_spec": "designs",
           "grid": "designs", "make_design": "designs", "ProvisionerError": "errors",
           "ProvisionRequest": "search", "ProvisionResult": "search", "provision": "search",
           "simulate": "sim", "SLO": "slo"}

__all__ = ["provision", "ProvisionRequest", "ProvisionResult", "FAMILIES", "Design", "DesignBatch", "family_spec",
           "grid", "make_design", "SLO", "simulate", "ProvisionerError"]

if TYPE_CHECKING:   # for type checkers and editors: the same names, eagerly
    from .designs import FAMILIES, Design, DesignBatch, family_spec, grid, make_design
    from .errors import ProvisionerError
    from .search import ProvisionRequest, ProvisionResult, provision
    from .sim import simulate
    from .slo import SLO


def __getattr__(name: str):
    if name in _PUBLIC:
        value = getattr(importlib.import_module(f".{_PUBLIC[name]}", __name__), name)
        globals()[name] = value   # once: later lookups skip this hook
        return value
    if not name.startswith("_"):   # a subpackage (`provisioner.sim` after `import provisioner`), loaded now
        try:
            return importlib.import_module(f".{name}", __name__)
        except ModuleNotFoundError as exc:
            if exc.name != f"{__name__}.{name}":   # the module exists; something it imports does not
                raise
    raise AttributeError(f"module 'provisioner' has no attribute '{name}'")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_PUBLIC))
