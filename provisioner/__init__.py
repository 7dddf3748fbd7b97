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

from .designs import FAMILIES, Design, DesignBatch, family_spec, grid, make_design
from .errors import ProvisionerError
from .search import ProvisionRequest, ProvisionResult, provision
from .sim import simulate
from .slo import SLO

__all__ = ["provision", "ProvisionRequest", "ProvisionResult", "FAMILIES", "Design", "DesignBatch", "family_spec",
           "grid", "make_design", "SLO", "simulate", "ProvisionerError"]
