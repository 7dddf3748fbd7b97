"""`ProvisionRequest`: the question `provision` answers, validated once at the boundary."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field, replace
from functools import cached_property

from workloads import ARRIVAL_PROCESSES, MAX_TRACE_REQUESTS, TraceGenerator, default_arrival

from ..designs import (CHUNK_TOKENS_CONSTRAINT, CUSTOM_FAMILIES, CUSTOM_SPLIT,
                       DEFAULT_PROMPT_BATCH_CAP_TOKENS, FAMILIES, MAX_DESIGN_MACHINES, MAX_PROMPT_BATCH_CAP_TOKENS,
                       family_spec)
from ..errors import ProvisionerError
from ..schedulers import DEFAULT_SCHEDULER, DEFAULT_SWAP_SPACE_GB, PREEMPTION_MODES, SCHEDULERS, check_preemption, refuse_scheduler_families
from .._validation import Integral, Interval, Options, Real, shown, validate_params
from ..slo import SLO

GOALS = ("cost", "power", "throughput")
SEARCHERS = ("auto", "enumerate", "exhaustive", "optuna")
# Verification: the DES on traces this many times longer than the search trace, with
# this many other seeds (seed + 1, seed + 2, ...). Two seeds run side by side on two cores.
DEFAULT_VERIFY_FACTOR = 2.0
DEFAULT_VERIFY_SEEDS = 2
MAX_TRIALS = 10_000   # optuna trials, each a count search of its own (48 by default)
_POSITIVE = Interval(Real, 0, None, closed="neither")
_COUNT = Interval(Integral, 1, None, closed="left")
_CONSTRAINTS = {
    "goal": [Options(GOALS)],
    "model": [str],
    "rps": [None, _POSITIVE],
    "power_budget_kw": [None, _POSITIVE],
    "cost_budget_usd_per_h": [None, _POSITIVE],
    "duration_s": [None, _POSITIVE],
    "arrival": [None, Options(ARRIVAL_PROCESSES)],
    "cv": [_POSITIVE],
    "seed": [Interval(Integral, 0, None, closed="left")],
    "slo": [SLO],
    "slo_scale": [_POSITIVE],
    "searcher": [Options(SEARCHERS)],
    "verify": [bool],
    "verify_duration_s": [None, _POSITIVE],
    "max_machines": [None, Interval(Integral, 1, MAX_DESIGN_MACHINES, closed="both")],
    "n_trials": [Interval(Integral, 1, MAX_TRIALS, closed="both")],
    "trial_batch": [_COUNT],
    "sampler_seed": [None, Interval(Integral, 0, None, closed="left")],
    "prefill_chunk_tokens": CHUNK_TOKENS_CONSTRAINT,
    "mps_prefill_share": [None, Interval(Real, 0, 1, closed="neither")],
    "duplicate_weights": [bool],
    "scheduler": [Options(SCHEDULERS)],
    "preemption": [Options(PREEMPTION_MODES)],
    "swap_space_gb": [_POSITIVE],
    "search_tp": [bool],
    "optuna_designed_start": [bool],
}


def check_machine_types(families, prompt_machine_types=None, token_machine_types=None) -> None:
    """Refuse machine types that no family of `families` uses (they were ignored). The
    CLI calls it as soon as it knows the families, so this mistake is named before a flag
    the user gave for the custom family they meant (--trials, --power-cap-range)."""
    custom = [f for f in families if f in CUSTOM_FAMILIES]
    for name, given in (("prompt_machine_types", prompt_machine_types), ("token_machine_types", token_machine_types)):
        if given and not custom:
            which = "" if name == "token_machine_types" else " (or another custom family)"   # one has a token pool
            raise ProvisionerError(f"{name} sets the machines of a custom family ({', '.join(CUSTOM_FAMILIES)}), "
                                   f"none of which families names: add '{CUSTOM_SPLIT}'{which} to families, or "
                                   f"drop {name}", params=(name, "families"))
    if token_machine_types and CUSTOM_SPLIT not in custom:
        raise ProvisionerError(f"token_machine_types sets the token pool of {CUSTOM_SPLIT}; "
                               f"{' and '.join(custom)} {'has' if len(custom) == 1 else 'have'} one pool of "
                               f"prompt_machine_types machines: add '{CUSTOM_SPLIT}' to families, or drop "
                               f"token_machine_types", params=("token_machine_types", "prompt_machine_types", "families"))


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
        Goals cost and power with a replayed trace and no `rps`: the trace's own rate.
    workload : "coding", "conversation" or a CSV trace path.
    model : catalog model name.
    families : design families to search (CONTRACTS.md names, or "splitwise-custom" /
        "baseline-custom" with `prompt_machine_types` / `token_machine_types`).
    duration_s, seed : the search trace (`workloads.TraceGenerator`); `duration_s` None
        (default): a replay's whole trace once at `rps`, drawn arrivals 120 s (the
        generator's rule, as the CLI without --duration). Resolved to seconds on construction.
    arrival : "replay", "poisson" or "gamma" (default: replay for a CSV path, Poisson for
        a shipped name); cv : coefficient of variation of the gamma gaps.
    slo, slo_scale : the SLO (Splitwise Table VI) and a factor on every limit.
    searcher : "auto" (frontier enumeration for fixed-hardware families, optuna for
        custom ones), "enumerate" (decide every cell of the count grid), "exhaustive"
        (simulate every cell), "optuna".
    verify : re-check finalists with the DES on `verify_seeds` traces of
        `verify_duration_s` (default 2 x duration_s and seeds seed+1, seed+2). A replay
        has no random draws: it is re-checked on itself (default: the search window, one run).
    prompt_machine_types, token_machine_types : machine types of the custom families.
    power_cap_range : (low, high) GPU power-cap range searched by the custom families.
    prompt_batch_caps : prompt batch caps (tokens) the custom families may choose from.
    prefill_chunk_tokens : chunked-prefill budget (tokens per iteration) of every family;
        0 turns chunking off. None: the `-chunked` families search `CHUNK_TOKEN_CHOICES`,
        the others prefill whole prompts.
    mps_prefill_share : the prefill process's SM share of the splitwiser families (in (0, 1));
        None: searched over `MPS_SHARE_CHOICES`.
    duplicate_weights : the splitwiser families' processes each load their own weights
        (default: one copy shared through CUDA IPC).
    scheduler : the cluster scheduler of every design (`provisioner.schedulers`).
    preemption : "recompute" (default) or "swap": how an on-demand scheduler preempts
        (baseline families; the result's question records "swap").
    swap_space_gb : with swap, the host memory each GPU swaps into, GiB (vLLM's
        `--swap-space`, default 4), capped by the machine's DRAM per replica.
    max_machines : count bound per pool (default: derived from the capacity model).
    n_trials, trial_batch : optuna budget (hardware trials, each with its own count search, at
        most `MAX_TRIALS`; the search stops sooner once every hardware choice has had one)
        and trials per batched ask/tell.
    sampler_seed : seed of optuna's TPE sampler (default: `seed`).
    search_tp : custom families also choose the tensor-parallel degree per pool among those
        that fit the model (a machine then runs GPUs / TP replicas); else TP = the machine.
    optuna_designed_start : optuna's first batch holds every (machine type, TP) combination
        at full power (False: TPE's own random start, for ablations).
    """

    goal: str
    rps: float | None = None
    power_budget_kw: float | None = None
    cost_budget_usd_per_h: float | None = None
    workload: str = "coding"
    model: str = "bloom-176b"
    families: tuple[str, ...] = FAMILIES
    duration_s: float | None = None
    seed: int = 0
    arrival: str | None = None
    cv: float = 2.0
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
    prefill_chunk_tokens: int | None = None
    mps_prefill_share: float | None = None
    duplicate_weights: bool = False
    scheduler: str = DEFAULT_SCHEDULER
    preemption: str = "recompute"
    swap_space_gb: float = DEFAULT_SWAP_SPACE_GB
    max_machines: int | None = None
    n_trials: int = 48
    trial_batch: int = 6
    sampler_seed: int | None = None
    search_tp: bool = True
    optuna_designed_start: bool = True

    def __post_init__(self):
        validate_params({f: getattr(self, f) for f in _CONSTRAINTS}, _CONSTRAINTS)
        if self.seed >= 2**63:   # numpy's generators take seeds below 2**63
            raise ProvisionerError(f"seed must be below 2**63 (got {shown(self.seed)})", params=("seed",))
        self._check_sequences()   # after the seed: the CLI's verify_seeds are seed + 1, seed + 2, ...
        self._resolve_trace()
        if self.goal in ("cost", "power"):
            if self.rps is None:
                raise ProvisionerError(f"goal {self.goal} needs rps, the load to serve (requests/s)",
                                       params=("goal", "rps"))
            if self.power_budget_kw is not None or self.cost_budget_usd_per_h is not None:
                raise ProvisionerError(f"goal {self.goal} takes rps, not a budget; budgets go with goal throughput",
                                       params=("goal", "rps"))
        else:
            budgets = [b for b in (self.power_budget_kw, self.cost_budget_usd_per_h) if b is not None]
            if len(budgets) != 1:
                raise ProvisionerError("goal throughput needs exactly one budget: power_budget_kw (iso-power) "
                                       "or cost_budget_usd_per_h (iso-cost)",
                                       params=("goal", "power_budget_kw", "cost_budget_usd_per_h"))
            if self.rps is not None:
                raise ProvisionerError("goal throughput finds the highest sustainable load itself; drop rps",
                                       params=("goal", "rps"))
        if self.goal in ("cost", "power"):   # before the search, not after it
            self.traces().check_rate(self.rps)   # a sweep's question: refused as its spec is read
            self.check_verification_window(self.rps)
        if not self.families:
            raise ProvisionerError("no design family to search: give families", params=("families",))
        fams = tuple(dict.fromkeys(self.families))
        for f in fams:
            if f not in CUSTOM_FAMILIES:
                family_spec(f)      # unknown name -> error with the nearest one
        object.__setattr__(self, "families", fams)
        check_machine_types(fams, self.prompt_machine_types, self.token_machine_types)
        check_preemption(self.preemption, self.scheduler)
        refuse_scheduler_families(self.scheduler, fams, self.preemption)
        lo, hi = self.power_cap_range
        if not (0.4 <= lo <= hi <= 1.0):
            raise ProvisionerError(f"power_cap_range must satisfy 0.4 <= low <= high <= 1 (got {lo:g}-{hi:g})",
                                   params=("power_cap_range",))
        if any(not 1 <= int(c) <= MAX_PROMPT_BATCH_CAP_TOKENS for c in self.prompt_batch_caps):   # as check_design
            raise ProvisionerError(f"prompt_batch_caps must be from 1 to {MAX_PROMPT_BATCH_CAP_TOKENS:,} tokens (got "
                                   f"{shown(self.prompt_batch_caps)})", params=("prompt_batch_caps",))

    def _check_sequences(self) -> None:
        """The parameters that take several values: a sequence of the right items (a string
        was iterated character by character: families='splitwise-hh' said "unknown design
        family 's'"; verify_seeds='12' ran seeds '1' and '2'; a float batch cap was truncated)."""
        def items(name, ok, what, example, size=None):
            value = getattr(self, name)
            if value is None:
                return
            if isinstance(value, (str, bytes, dict)) or not hasattr(value, "__iter__") \
                    or not all(ok(v) for v in value) or (size is not None and len(value) != size):
                raise ProvisionerError(f"{name} must be a tuple of {what}, e.g. {example} (got {shown(value)})",
                                       params=(name,))

        def whole(v, low):
            return isinstance(v, Integral) and not isinstance(v, bool) and low <= v < 2 ** 63

        items("families", lambda v: isinstance(v, str), "design family names", "('splitwise-hh',)")
        for name in ("prompt_machine_types", "token_machine_types"):
            items(name, lambda v: isinstance(v, str), "machine names", "('dgx-h100', 'dgx-a100')")
        items("verify_seeds", lambda v: whole(v, 0), "seeds (integers >= 0)", "(1, 2)")
        items("prompt_batch_caps", lambda v: whole(v, 1), "token counts >= 1", "(2048,)")
        items("power_cap_range", lambda v: Interval(Real, None, None).is_satisfied_by(v), "two numbers (low, high)",
              "(0.5, 1.0)", size=2)
        # tuples of plain values: a list or numpy array made the request unhashable (and its repr,
        # the study's name, depend on the container)
        for name, kind in (("families", str), ("prompt_machine_types", str), ("token_machine_types", str),
                           ("verify_seeds", int), ("prompt_batch_caps", int), ("power_cap_range", float)):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, tuple(kind(v) for v in getattr(self, name)))

    def _resolve_trace(self) -> None:
        """Default the arrival process, read the trace, fill `duration_s` (and a replay's `rps`)."""
        if isinstance(self.workload, (str, os.PathLike)) and str(self.workload).strip() == "":
            raise ProvisionerError("workload is empty: use coding, conversation or a CSV path", params=("workload",))
        arrival = self.arrival if self.arrival is not None else default_arrival(self.workload)
        object.__setattr__(self, "arrival", arrival)
        traces = self.traces()
        object.__setattr__(self, "duration_s", traces.duration_s)
        if self.rps is None and arrival == "replay" and self.goal in ("cost", "power"):
            object.__setattr__(self, "rps", traces.native_rps)

    def traces(self, duration_s: float | None = None, seed: int | None = None) -> TraceGenerator:
        """The trace generator of the search (default) or of a verification window and seed."""
        if duration_s is None and seed is None:
            return self._search_traces
        # The source trace, already read (a file is read and hashed once per request).
        return TraceGenerator(self._search_traces.source, duration_s or self.duration_s,
                              self.seed if seed is None else seed, arrival=self.arrival, cv=self.cv)

    @cached_property
    def _search_traces(self) -> TraceGenerator:
        return TraceGenerator(self.workload, self.duration_s, self.seed, arrival=self.arrival, cv=self.cv,
                              rps=self.rps if self.goal in ("cost", "power") else None)

    # -- derived ---------------------------------------------------------------------
    @property
    def effective_slo(self) -> SLO:
        return self.slo.scaled(self.slo_scale) if self.slo_scale != 1.0 else self.slo

    @property
    def verification_duration_s(self) -> float:
        factor = 1.0 if self.arrival == "replay" else DEFAULT_VERIFY_FACTOR
        return float(self.verify_duration_s or factor * self.duration_s)

    def check_verification_window(self, rps: float) -> None:
        """Refuse a `verify_duration_s` whose verification traces at `rps` hold no request
        (a replay holds one at least) or more than a trace holds."""
        if not self.verify or self.verify_duration_s is None:
            return
        window = float(self.verify_duration_s)
        at, params = f"at {rps:g} req/s", ("verify_duration_s",)
        expected = rps * window
        if expected > MAX_TRACE_REQUESTS:   # an infinite product too
            most = MAX_TRACE_REQUESTS / rps
            most = f"{math.floor(most):,}" if most >= 1 else f"{most:.3g}"
            raise ProvisionerError(f"verify_duration_s {window:g} {at} is {expected:.3g} requests per verification "
                                   f"trace, more than a trace holds ({MAX_TRACE_REQUESTS:,}); give a "
                                   f"verify_duration_s of at most {most} s", params=params)
        if self.arrival != "replay" and round(expected) < 1:
            raise ProvisionerError(f"verify_duration_s {window:g} {at} is {expected:.3g} requests per verification "
                                   f"trace, which rounds to none; give a verify_duration_s of at least "
                                   f"{1 / rps:.3g} s (the default is twice the search trace's)", params=params)

    @property
    def verification_seeds(self) -> tuple[int, ...]:
        if self.arrival == "replay":
            return (self.seed,)     # a replay draws nothing: other seeds give the same trace
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

