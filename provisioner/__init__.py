"""provisioner: choose LLM inference clusters that meet latency SLOs at the least cost or power.

Public surface (the CLI is a thin layer over these):

- designs: `Design`, `DesignBatch`, `make_design`, `grid`, `FAMILIES`
- SLOs: `SLO`
- simulation: `simulate` (fluid or discrete-event engine, one row per design)
"""

from .designs import FAMILIES, Design, DesignBatch, family_spec, grid, make_design
from .errors import NoFeasibleDesignError, ProvisionerError
from .sim import simulate
from .slo import SLO

__all__ = ["FAMILIES", "Design", "DesignBatch", "family_spec", "grid", "make_design", "SLO", "simulate",
           "ProvisionerError", "NoFeasibleDesignError"]
