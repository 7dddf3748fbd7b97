"""Search spaces as data: what a family's designs may vary, and the bounds of each.

A `FamilySpace` lists, per pool, the machine types a design may use, the range of the
GPU power cap (a fraction of TDP; equal ends = fixed), the tensor-parallel degrees and
the machine-count bounds, plus the prompt batch caps, chunked-prefill budgets and (the
splitwiser families) the prefill process's MPS share of the SMs. A space
with one choice of everything but the counts is a *grid* (Splitwise's Fig. 12 space):
enumeration decides it. Fixed hardware with a few batch caps, chunk budgets or shares is a
handful of grids (`grid_parts`), each enumerated; anything wider goes to Bayesian
optimization.

Count bounds come from the capacity model, so the user need not give them: enough
machines of the slowest type for `BOUND_FACTOR` x the work the trace asks for (goals
cost and power), or as many as the budget buys (goal throughput).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np

from ..designs import (CUSTOM_BASELINE, CUSTOM_COLOCATED, CUSTOM_FAMILIES, DEFAULT_PROMPT_BATCH_CAP_TOKENS, FAMILY_SPECS,
                       MPS_SHARE_CHOICES, DesignBatch)
from ..errors import ProvisionerError
from ..schedulers import DEFAULT_SCHEDULER

# Count bounds: this many times the machines the work needs (the SLOs need headroom
# over the bare work; Fig. 12's optimum is about 1.4x the work bound).
BOUND_FACTOR = 2.0
MIN_BOUND = 4
# Power caps below this fraction of TDP are outside the calibrated range (SW Fig. 9 goes
# down to ~250 W of 700 W).
MIN_POWER_CAP = 0.4


@dataclass(frozen=True)
class PoolSpace:
    """The choices of one pool (prompt, token, or a baseline's mixed pool).

    machines : machine types (catalog names) a design may use for this pool.
    power_cap : (low, high) GPU power cap, fraction of TDP; low == high means fixed.
    tp : tensor-parallel degrees per machine type, as ((machine, (degrees...)), ...);
        a machine not listed uses its GPU count (one replica per machine). A smaller
        degree runs GPUs / degree replicas per machine.
    max_machines, min_machines : count bounds.
    """

    machines: tuple[str, ...]
    power_cap: tuple[float, float] = (1.0, 1.0)
    tp: tuple[tuple[str, tuple[int, ...]], ...] = ()
    max_machines: int = 40
    min_machines: int = 1

    def tps(self, machine: str) -> tuple[int, ...]:
        """TP degrees of `machine` in this pool (empty: the machine's GPU count)."""
        return dict(self.tp).get(machine, ())

    @property
    def choices(self) -> tuple[tuple[str, int], ...]:
        """(machine, TP degree) pairs; degree 0 means the machine's GPU count."""
        return tuple((m, d) for m in self.machines for d in (self.tps(m) or (0,)))

    @property
    def fixed_hardware(self) -> bool:
        return len(self.choices) == 1 and self.power_cap[0] == self.power_cap[1]

    def cap_grid(self, steps: int) -> np.ndarray:
        lo, hi = self.power_cap
        return np.array([hi]) if lo == hi else np.linspace(lo, hi, steps)


@dataclass(frozen=True)
class FamilySpace:
    """A design family's search space; `token` is None for a baseline (mixed pool)."""

    family: str
    prompt: PoolSpace
    token: PoolSpace | None
    prompt_batch_caps: tuple[int, ...] = (DEFAULT_PROMPT_BATCH_CAP_TOKENS,)
    prefill_chunks: tuple[int, ...] = (0,)     # chunked-prefill budgets (0: whole prompts)
    mps_shares: tuple[float, ...] = (0.0,)      # Splitwiser: prefill SM shares (0: not co-located)
    duplicate_weights: bool = False             # Splitwiser: each process holds its own weights
    scheduler: str = DEFAULT_SCHEDULER          # cluster scheduler policy of every design
    label: str = field(default="", compare=False)
    catalog: object = field(default=None, compare=False, repr=False)   # resolves TP 0; default: shipped

    @property
    def split(self) -> bool:
        return self.token is not None

    @property
    def is_grid(self) -> bool:
        """Only the machine counts vary (enumerable by the frontier search)."""
        return (self.fixed_hardware and len(self.prompt_batch_caps) == 1 and len(self.prefill_chunks) == 1
                and len(self.mps_shares) == 1)

    @property
    def fixed_hardware(self) -> bool:
        return self.prompt.fixed_hardware and (self.token is None or self.token.fixed_hardware)

    def grid_parts(self) -> list["FamilySpace"]:
        """One grid per (batch cap, chunk budget, MPS share) when the hardware is fixed; [] otherwise."""
        if not self.fixed_hardware:
            return []
        return [replace(self, prompt_batch_caps=(cap,), prefill_chunks=(chunk,), mps_shares=(share,))
                for cap in self.prompt_batch_caps for chunk in self.prefill_chunks for share in self.mps_shares]

    @property
    def prompt_counts(self) -> np.ndarray:
        return np.arange(self.prompt.min_machines, self.prompt.max_machines + 1)

    @property
    def token_counts(self) -> np.ndarray:
        if self.token is None:
            return np.array([0])
        return np.arange(self.token.min_machines, self.token.max_machines + 1)

    def size(self, cap_steps: int = 7) -> int:
        """Designs in the space with each continuous cap on `cap_steps` values."""
        n = len(self.prompt_counts) * len(self.prompt.choices) * len(self.prompt.cap_grid(cap_steps))
        n *= len(self.prompt_batch_caps) * len(self.prefill_chunks) * len(self.mps_shares)
        if self.token is not None:
            n *= len(self.token_counts) * len(self.token.choices) * len(self.token.cap_grid(cap_steps))
        return int(n)

    def with_bounds(self, max_prompt: int, max_token: int | None = None) -> "FamilySpace":
        token = None if self.token is None else replace(self.token, max_machines=int(max_token or max_prompt))
        return replace(self, prompt=replace(self.prompt, max_machines=int(max_prompt)), token=token)

    def designs(self, prompt_machines, token_machines=None, *, prompt_machine=None, token_machine=None,
                prompt_power_cap=None, token_power_cap=None, prompt_tp=None, token_tp=None,
                prompt_batch_cap_tokens=None, prefill_chunk_tokens=None, mps_prefill_share=None,
                catalog=None) -> DesignBatch:
        """A batch of designs of this family (arrays broadcast; hardware defaults to the first choice)."""
        p = np.atleast_1d(np.asarray(prompt_machines, dtype=np.int64))
        n = len(p)
        tok = self.token if self.token is not None else self.prompt
        t = np.zeros(n, np.int64) if self.token is None else np.broadcast_to(
            np.asarray(token_machines, dtype=np.int64), (n,))

        def col(value, default, dtype):
            return np.broadcast_to(np.asarray(default if value is None else value, dtype=dtype), (n,)).copy()

        pm = col(prompt_machine, self.prompt.machines[0], object)
        tm = pm.copy() if self.token is None else col(token_machine, tok.machines[0], object)
        pc = col(prompt_power_cap, self.prompt.power_cap[1], float)
        tc = pc.copy() if self.token is None else col(token_power_cap, tok.power_cap[1], float)
        ptp = col(prompt_tp, self.prompt.choices[0][1], np.int64)
        ttp = ptp.copy() if self.token is None else col(token_tp, tok.choices[0][1], np.int64)
        if np.any(ptp == 0) or np.any(ttp == 0):
            catalog = catalog if catalog is not None else self.catalog
            if catalog is None:
                from hardware_catalog import load_catalog
                catalog = load_catalog()
            gpus = {m: catalog.machine(str(m)).gpus_per_machine for m in set(pm) | set(tm)}
            ptp = np.where(ptp == 0, [gpus[m] for m in pm], ptp)
            ttp = np.where(ttp == 0, [gpus[m] for m in tm], ttp)
        bc = col(prompt_batch_cap_tokens, self.prompt_batch_caps[0], np.int64)
        chunk = col(prefill_chunk_tokens, self.prefill_chunks[0], np.int64)
        share = col(mps_prefill_share, self.mps_shares[0], float)
        return DesignBatch({
            "family": np.full(n, self.family, dtype=object), "prompt_machines": p, "token_machines": t,
            "prompt_machine": pm.astype(str), "token_machine": tm.astype(str), "prompt_power_cap": pc,
            "token_power_cap": tc, "prompt_tp": ptp, "token_tp": ttp, "prompt_batch_cap_tokens": bc,
            "allow_borrow": np.ones(n, bool), "prefill_chunk_tokens": chunk, "mps_prefill_share": share,
            "duplicate_weights": np.full(n, self.duplicate_weights and self.mps_shares != (0.0,)),
            "scheduler": np.full(n, self.scheduler, dtype=object)})


def family_space(family: str, *, prompt_machines=None, token_machines=None, power_cap=(MIN_POWER_CAP, 1.0),
                 prompt_batch_caps=(DEFAULT_PROMPT_BATCH_CAP_TOKENS,), max_prompt=40, max_token=40,
                 tp=(), prefill_chunk_tokens: int | None = None,
                 mps_prefill_share: float | None = None, duplicate_weights: bool = False) -> FamilySpace:
    """The space of a named family (CONTRACTS.md) or of a custom one.

    Named families fix machine types and power caps (designs.FAMILY_SPECS) and run TP
    over a whole machine; custom families (`splitwise-custom`, `baseline-custom`) take
    machine-type lists, search the power cap continuously in `power_cap` and the TP
    degrees in `tp` (((machine, (degrees...)), ...); default: the whole machine).
    prefill_chunk_tokens : a chunked-prefill budget for every design (0: off); None: the
    family's own (the `-chunked` families search several).
    mps_prefill_share : the prefill SM share of every co-located (splitwiser) design;
    None: searched over `MPS_SHARE_CHOICES`. Other families ignore it, and `duplicate_weights`
    (each co-located process loads its own copy of the weights).
    """
    caps = tuple(int(c) for c in prompt_batch_caps)
    chunks = (int(prefill_chunk_tokens),) if prefill_chunk_tokens is not None else None
    shares = (float(mps_prefill_share),) if mps_prefill_share is not None else MPS_SHARE_CHOICES
    if family in FAMILY_SPECS:
        spec = FAMILY_SPECS[family]
        prompt = PoolSpace((spec.prompt_machine,), (spec.prompt_power_cap,) * 2, max_machines=max_prompt)
        token = PoolSpace((spec.token_machine,), (spec.token_power_cap,) * 2, max_machines=max_token) \
            if spec.split else None
        return FamilySpace(family, prompt, token, caps, chunks or spec.prefill_chunk_tokens,
                           shares if spec.mps_prefill_shares != (0.0,) else (0.0,), duplicate_weights,
                           label=family)
    if family not in CUSTOM_FAMILIES:
        from ..designs import family_spec
        family_spec(family)   # raises with the nearest name
    lo, hi = (float(power_cap[0]), float(power_cap[1]))
    if not (MIN_POWER_CAP <= lo <= hi <= 1.0):
        raise ProvisionerError(f"power-cap range must satisfy {MIN_POWER_CAP} <= low <= high <= 1 (got {lo:g}-{hi:g})")
    pm = tuple(prompt_machines or ("dgx-a100", "dgx-h100"))
    tp = tuple((m, tuple(int(d) for d in ds)) for m, ds in tp)
    if family in (CUSTOM_BASELINE, CUSTOM_COLOCATED):
        return FamilySpace(family, PoolSpace(pm, (lo, hi), _only(tp, pm), max_machines=max_prompt), None, caps,
                           chunks or (0,), shares if family == CUSTOM_COLOCATED else (0.0,), duplicate_weights,
                           label=family)
    tm = tuple(token_machines or pm)
    return FamilySpace(family, PoolSpace(pm, (lo, hi), _only(tp, pm), max_machines=max_prompt),
                       PoolSpace(tm, (lo, hi), _only(tp, tm), max_machines=max_token), caps, chunks or (0,),
                       label=family)


def _only(tp, machines) -> tuple:
    return tuple((m, ds) for m, ds in tp if m in machines)


def count_bound(machines_needed: float) -> int:
    """Upper count bound from the machines the work needs (see module docstring)."""
    return max(MIN_BOUND, int(math.ceil(BOUND_FACTOR * machines_needed)) + 2)


def most_machines_needed(bound: int) -> float:
    """The most machines the work may need for `count_bound` to stay within `bound` (its inverse)."""
    return (bound - 2) / BOUND_FACTOR
