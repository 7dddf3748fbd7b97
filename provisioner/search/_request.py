"""`ProvisionRequest`: the question `provision` answers, validated once at the boundary."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field, replace

from ..designs import CUSTOM_BASELINE, CUSTOM_SPLIT, DEFAULT_PROMPT_BATCH_CAP_TOKENS, FAMILIES, family_spec
from ..errors import ProvisionerError
from ..slo import SLO

GOALS = ("cost", "power", "throughput")
SEARCHERS = ("auto", "enumerate", "exhaustive", "optuna")
CUSTOM_FAMILIES = (CUSTOM_SPLIT, CUSTOM_BASELINE)
# Verification: the DES on traces this many times longer than the search trace, with
# this many other seeds (seed + 1, seed + 2, ...). Two seeds run side by side on two cores.
DEFAULT_VERIFY_FACTOR = 2.0
DEFAULT_VERIFY_SEEDS = 2


@dataclass(frozen=True)
class ProvisionRequest:
    """What to provision for.

    Parameters
    ----------
    goal : "cost" or "power" (iso-throughput: least $/h or provisioned kW meeting every
        SLO at `rps`), or "throughput" (the highest sustainable rps within
        `power_budget_kw` or `cost_budget_usd_per_h`; Splitwise Sec. IV-D).
    rps : target load (goals cost and power), requests/s.
    power_budget_kw, cost_budget_usd_per_h : the budget of goal throughput (exactly one).
    workload : "coding", "conversation" or a CSV trace path.
    model : catalog model name.
    families : design families to search (CONTRACTS.md names, or "splitwise-custom" /
        "baseline-custom" with `prompt_machine_types` / `token_machine_types`).
    duration_s, seed : the search trace.
    slo, slo_scale : the SLO (Splitwise Table VI) and a factor on every limit.
    searcher : "auto" (frontier enumeration for fixed-hardware families, optuna for
        custom ones), "enumerate" (decide every cell of the count grid), "exhaustive"
        (simulate every cell), "optuna".
    verify : re-check finalists with the DES on `verify_seeds` traces of
        `verify_duration_s` (default 2 x duration_s and seeds seed+1, seed+2).
    prompt_machine_types, token_machine_types : machine types of the custom families.
    power_cap_range : (low, high) GPU power-cap range searched by the custom families.
    prompt_batch_caps : prompt batch caps (tokens) the custom families may choose from.
    max_machines : count bound per pool (default: derived from the capacity model).
    n_trials, trial_batch : optuna budget (hardware trials, each with its own count search)
        and trials per batched ask/tell.
    sampler_seed : seed of optuna's TPE sampler (default: `seed`).
    search_tp : custom families also choose the tensor-parallel degree per pool among those
        that fit the model (a machine then runs GPUs / TP replicas); else TP = the machine.
    """

    goal: str
    rps: float | None = None
    power_budget_kw: float | None = None
    cost_budget_usd_per_h: float | None = None
    workload: str = "coding"
    model: str = "bloom-176b"
    families: tuple[str, ...] = FAMILIES
    duration_s: float = 120.0
    seed: int = 0
    slo: SLO = field(default_factory=SLO)
    slo_scale: float = 1.0
    searcher: str = "auto"
    verify: bool = True
    verify_duration_s: float | None = None
    verify_seeds: tuple[int, ...] | None = None
    prompt_machine_types: tuple[str, ...] | None = None
    token_machine_types: tuple[str, ...] | None = None
    power_cap_range: tuple[float, float] = (0.4, 1.0)
    prompt_batch_caps: tuple[int, ...] = (DEFAULT_PROMPT_BATCH_CAP_TOKENS,)
    max_machines: int | None = None
    n_trials: int = 48
    trial_batch: int = 6
    sampler_seed: int | None = None
    search_tp: bool = True

    def __post_init__(self):
        if self.goal not in GOALS:
            raise ProvisionerError(f"--goal must be one of {', '.join(GOALS)} (got '{self.goal}')")
        if self.goal in ("cost", "power"):
            if self.rps is None:
                raise ProvisionerError(f"--goal {self.goal} needs --rps, the load to serve (requests/s)")
            _positive("--rps", self.rps)
            if self.power_budget_kw is not None or self.cost_budget_usd_per_h is not None:
                raise ProvisionerError(f"--goal {self.goal} takes --rps, not a budget; budgets go with --goal throughput")
        else:
            budgets = [b for b in (self.power_budget_kw, self.cost_budget_usd_per_h) if b is not None]
            if len(budgets) != 1:
                raise ProvisionerError("--goal throughput needs exactly one budget: --power-budget-kw P (iso-power) "
                                       "or --cost-budget-usd-per-h C (iso-cost)")
            if self.rps is not None:
                raise ProvisionerError("--goal throughput finds the highest sustainable rps; drop --rps")
            _positive("--power-budget-kw" if self.power_budget_kw is not None else "--cost-budget-usd-per-h",
                      budgets[0])
        _positive("--duration", self.duration_s)
        if not 0 <= int(self.seed) < 2**63:
            raise ProvisionerError(f"--seed must be a whole number in [0, 2**63) (got {self.seed})")
        if not math.isfinite(self.slo_scale) or self.slo_scale <= 0:
            raise ProvisionerError(f"--slo-scale must be > 0 (got {self.slo_scale:g})")
        if self.searcher not in SEARCHERS:
            raise ProvisionerError(f"--searcher must be one of {', '.join(SEARCHERS)} (got '{self.searcher}')")
        if not self.families:
            raise ProvisionerError("no design family to search: give --design FAMILY")
        fams = tuple(dict.fromkeys(self.families))
        for f in fams:
            if f not in CUSTOM_FAMILIES:
                family_spec(f)      # unknown name -> error with the nearest one
        object.__setattr__(self, "families", fams)
        lo, hi = self.power_cap_range
        if not (0.4 <= lo <= hi <= 1.0):
            raise ProvisionerError(f"power-cap range must satisfy 0.4 <= low <= high <= 1 (got {lo:g}-{hi:g})")
        if self.verify_duration_s is not None:
            _positive("--verify-duration", self.verify_duration_s)
        if self.max_machines is not None and self.max_machines < 1:
            raise ProvisionerError(f"--max-machines must be >= 1 (got {self.max_machines})")
        if self.n_trials < 1 or self.trial_batch < 1:
            raise ProvisionerError("--trials and the trial batch must be >= 1")
        if any(int(c) < 1 for c in self.prompt_batch_caps):
            raise ProvisionerError("prompt batch caps must be >= 1 token")
        if isinstance(self.workload, (str, os.PathLike)) and str(self.workload).strip() == "":
            raise ProvisionerError("--workload is empty: use coding, conversation or a CSV path")

    # -- derived ---------------------------------------------------------------------
    @property
    def effective_slo(self) -> SLO:
        return self.slo.scaled(self.slo_scale) if self.slo_scale != 1.0 else self.slo

    @property
    def verification_duration_s(self) -> float:
        return float(self.verify_duration_s or DEFAULT_VERIFY_FACTOR * self.duration_s)

    @property
    def verification_seeds(self) -> tuple[int, ...]:
        return tuple(self.verify_seeds) if self.verify_seeds else tuple(self.seed + k for k in range(1, DEFAULT_VERIFY_SEEDS + 1))

    @property
    def constraint(self) -> dict:
        if self.goal in ("cost", "power"):
            return {"rps": float(self.rps)}
        if self.power_budget_kw is not None:
            return {"power_budget_kw": float(self.power_budget_kw)}
        return {"cost_budget_usd_per_h": float(self.cost_budget_usd_per_h)}

    def replace(self, **changes) -> "ProvisionRequest":
        return replace(self, **changes)


def _positive(name: str, value) -> None:
    try:
        ok = math.isfinite(float(value)) and float(value) > 0
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise ProvisionerError(f"{name} must be > 0 and finite (got {value})")
