"""Cluster designs: one frozen `Design`, or many as a struct of arrays (`DesignBatch`).

A design is a pool of prompt machines and a pool of token machines (Splitwise
families) or one pool of mixed machines (baselines), each pool with a machine type,
a GPU power cap and a tensor-parallel degree. Machines of one design run one model
replica each (TP = GPUs per machine by default).

Families (Splitwise Sec. IV-D; CONTRACTS.md names):

| family            | prompt pool          | token pool                 |
|-------------------|----------------------|----------------------------|
| baseline-a100     | mixed DGX-A100       | (same machines)            |
| baseline-h100     | mixed DGX-H100       | (same machines)            |
| splitwise-aa      | DGX-A100             | DGX-A100                   |
| splitwise-hh      | DGX-H100             | DGX-H100                   |
| splitwise-ha      | DGX-H100             | DGX-A100                   |
| splitwise-hhcap   | DGX-H100             | DGX-H100, GPUs capped at 50% |
| baseline-a100-chunked | mixed DGX-A100, chunked prefill | (same machines)  |
| baseline-h100-chunked | mixed DGX-H100, chunked prefill | (same machines)  |
| splitwiser-a100   | DGX-A100, each running a prefill and a decode process (MPS) |  |
| splitwiser-h100   | DGX-H100, each running a prefill and a decode process (MPS) |  |

Chunked prefill (Sarathi-Serve; vLLM's default scheduler): `prefill_chunk_tokens` > 0
makes it a hard per-iteration budget of prompt tokens, prompts split into chunks that
ride along with the running decodes (SEMANTICS.md). 0 keeps whole prompts under the
prompt batch cap. The `-chunked` families search the chunk size over
`CHUNK_TOKEN_CHOICES`; any family takes a fixed one.

Splitwiser (co-located phases; `mps_prefill_share` > 0): each of the `prompt_machines`
machines runs a prefill process and a decode process on the same GPUs under NVIDIA MPS,
the prefill process with that share of the SMs while both run (SEMANTICS.md). The KV
cache stays in the machine's HBM; the weights are loaded once (shared through CUDA IPC)
or twice (`duplicate_weights`). `token_machines` is 0: cost and power count machines.
The splitwiser families search the share over `MPS_SHARE_CHOICES`.
"""

from __future__ import annotations

import difflib
import math
from dataclasses import asdict, dataclass, fields, replace

import numpy as np
import pandas as pd

from perfmodels import MIN_POWER_CAP

from ._validation import Integral, Interval, Real, shown, validate_params
from .errors import ProvisionerError
from .schedulers import DEFAULT_SCHEDULER, check_scheduler_family

DEFAULT_PROMPT_BATCH_CAP_TOKENS = 2048  # Splitwise Sec. III-B: prompt throughput drops beyond it
MAX_PROMPT_BATCH_CAP_TOKENS = 10_000_000   # a prompt batch of more tokens holds no model's KV
# Token budgets the chunked families search: Sarathi-Serve runs 512 for strict TBT SLOs
# and 2048 for relaxed ones; 256 and 1024 bracket them.
CHUNK_TOKEN_CHOICES = (256, 512, 1024, 2048)
DEFAULT_CHUNK_TOKENS = 512   # a chunked family's design when none is chosen (vLLM's chunked-prefill default)
# `--prefill-chunk-tokens` (None: searched; 0: off), one rule for `provision` and `provision cloud`
# a budget past any context window prefills every prompt whole; past it only overflows
MAX_CHUNK_TOKENS = 10_000_000
CHUNK_TOKENS_CONSTRAINT = [None, Interval(Integral, 0, MAX_CHUNK_TOKENS)]
# SM shares of the prefill process the splitwiser families search (the decode process gets
# the rest); an even split when none is chosen.
MPS_SHARE_CHOICES = (0.3, 0.5, 0.7)
DEFAULT_MPS_PREFILL_SHARE = 0.5
MAX_DESIGN_MACHINES = 100_000   # per pool; the scale benchmark simulates 2,000


@dataclass(frozen=True)
class FamilySpec:
    """A design family of fixed hardware: its machines, power caps and what the search
    varies besides the counts. A spec added to FAMILY_SPECS joins the default families of
    `provision` and `provision sweep` and is accepted by `--design` everywhere (simulate:
    `--prompt-machines/--token-machines` for a split family, `--machines` otherwise).

    name : the family's name (`--design NAME`).
    split : prompt and token pools (Splitwise) or one pool of mixed machines (a baseline).
    prompt_machine, token_machine : catalog machine names (a baseline uses the prompt one).
    prompt_power_cap, token_power_cap : GPU power as a fraction of its rating.
    """

    name: str
    split: bool
    prompt_machine: str
    token_machine: str
    prompt_power_cap: float = 1.0
    token_power_cap: float = 1.0
    prefill_chunk_tokens: tuple[int, ...] = (0,)   # chunk budgets searched (0: whole prompts)
    mps_prefill_shares: tuple[float, ...] = (0.0,)  # prefill SM shares searched (0: not co-located)


FAMILY_SPECS = {
    f.name: f
    for f in (
        FamilySpec("baseline-a100", False, "dgx-a100", "dgx-a100"),
        FamilySpec("baseline-h100", False, "dgx-h100", "dgx-h100"),
        FamilySpec("splitwise-aa", True, "dgx-a100", "dgx-a100"),
        FamilySpec("splitwise-hh", True, "dgx-h100", "dgx-h100"),
        FamilySpec("splitwise-ha", True, "dgx-h100", "dgx-a100"),
        FamilySpec("splitwise-hhcap", True, "dgx-h100", "dgx-h100", token_power_cap=0.5),
        FamilySpec("baseline-a100-chunked", False, "dgx-a100", "dgx-a100", prefill_chunk_tokens=CHUNK_TOKEN_CHOICES),
        FamilySpec("baseline-h100-chunked", False, "dgx-h100", "dgx-h100", prefill_chunk_tokens=CHUNK_TOKEN_CHOICES),
        FamilySpec("splitwiser-a100", False, "dgx-a100", "dgx-a100", mps_prefill_shares=MPS_SHARE_CHOICES),
        FamilySpec("splitwiser-h100", False, "dgx-h100", "dgx-h100", mps_prefill_shares=MPS_SHARE_CHOICES),
    )
}
FAMILIES = tuple(FAMILY_SPECS)
# Heterogeneous families built from any catalog machines use these names.
CUSTOM_SPLIT = "splitwise-custom"
CUSTOM_BASELINE = "baseline-custom"
CUSTOM_COLOCATED = "splitwiser-custom"
CUSTOM_FAMILIES = (CUSTOM_SPLIT, CUSTOM_BASELINE, CUSTOM_COLOCATED)


def family_spec(name: str) -> FamilySpec:
    if not isinstance(name, str):   # difflib below takes strings only
        raise ProvisionerError(f"family must be a design family's name, a string such as 'splitwise-hh' "
                               f"(got {shown(name)})", params=("family",))
    if name in FAMILY_SPECS:
        return FAMILY_SPECS[name]
    if name in CUSTOM_FAMILIES:   # "unknown ... did you mean" misled
        raise ProvisionerError(f"design family '{name}' (families) has no machines of its own: `provision --design "
                               f"{name}` chooses them (--prompt-machine-types, --token-machine-types); here give a "
                               f"family with fixed machines: {', '.join(FAMILIES)}", params=("families",))
    near = difflib.get_close_matches(name, FAMILIES, n=1)
    hint = f" — did you mean '{near[0]}'?" if near else "."
    raise ProvisionerError(f"unknown design family '{name}' (families){hint} Known: {', '.join(FAMILIES)}",
                           params=("families",))


@dataclass(frozen=True)
class Design:
    """One cluster design. For a baseline, `prompt_machines` counts its mixed machines
    and `token_machines` is 0; the token-pool fields repeat the prompt pool's."""

    family: str
    prompt_machines: int
    token_machines: int
    prompt_machine: str
    token_machine: str
    prompt_power_cap: float = 1.0
    token_power_cap: float = 1.0
    prompt_tp: int = 8
    token_tp: int = 8
    prompt_batch_cap_tokens: int = DEFAULT_PROMPT_BATCH_CAP_TOKENS
    allow_borrow: bool = True
    prefill_chunk_tokens: int = 0   # > 0: chunked prefill with this token budget per iteration
    mps_prefill_share: float = 0.0  # > 0: Splitwiser, the prefill process's SM share (module doc)
    duplicate_weights: bool = False  # Splitwiser: each process holds its own copy of the weights
    scheduler: str = DEFAULT_SCHEDULER  # cluster scheduler policy (provisioner.schedulers.SCHEDULERS)

    @property
    def split(self) -> bool:
        return self.token_machines > 0 or self.family.startswith("splitwise-")

    @property
    def colocated(self) -> bool:
        return self.mps_prefill_share > 0

    @property
    def machines(self) -> int:
        return self.prompt_machines + self.token_machines

    def to_dict(self) -> dict:
        return asdict(self)


def make_design(family: str, prompt_machines: int = 0, token_machines: int = 0, *,
                machines: int | None = None, **overrides) -> Design:
    """A design of a named family with the family's machine types and power caps.

    One-pool families (baselines, splitwisers) take `machines` (or `prompt_machines`);
    Splitwise families take `prompt_machines` and `token_machines`. A count the family has
    no pool for is refused, not dropped.
    """
    spec = family_spec(family)
    _refuse_counts_of_other_pools(spec, prompt_machines, token_machines, machines)
    if not spec.split:
        prompt_machines = machine_count("machines", machines if machines is not None else prompt_machines)
        token_machines = 0
    else:
        prompt_machines = machine_count("prompt_machines", prompt_machines)
        token_machines = machine_count("token_machines", token_machines)
    unknown = [k for k in overrides if k not in DESIGN_FIELDS]
    if unknown:
        near = difflib.get_close_matches(unknown[0], DESIGN_FIELDS, n=1)
        hint = f"did you mean {near[0]}? " if near else ""
        raise ProvisionerError(f"{unknown[0]} is not a design field; {hint}a design takes "
                               f"{', '.join(DESIGN_FIELDS[1:])}", params=(unknown[0],))
    d = Design(family, prompt_machines, token_machines, spec.prompt_machine,
               spec.token_machine, spec.prompt_power_cap, spec.token_power_cap,
               prefill_chunk_tokens=DEFAULT_CHUNK_TOKENS if spec.prefill_chunk_tokens != (0,) else 0,
               mps_prefill_share=DEFAULT_MPS_PREFILL_SHARE if spec.mps_prefill_shares != (0.0,) else 0.0)
    d = replace(d, **overrides) if overrides else d
    check_design(d)
    return d


def _refuse_counts_of_other_pools(spec: FamilySpec, prompt_machines, token_machines, machines) -> None:
    """make_design("baseline-a100", 10, 5) made 10 machines and dropped the 5; machines=30 beside a
    Splitwise family's two counts was dropped too, and alone it said 'prompt_machines ... (got 0)'."""
    if spec.split and machines is not None:
        raise ProvisionerError(f"{spec.name} has a prompt and a token pool: give prompt_machines and token_machines, "
                               f"not machines (got machines={shown(machines)})", params=("machines",))
    if not spec.split and not _is_zero(token_machines):
        raise ProvisionerError(f"{spec.name} has one pool of machines: give machines=N, not token_machines "
                               f"(got token_machines={shown(token_machines)})", params=("token_machines",))
    if not spec.split and machines is not None and not _is_zero(prompt_machines):
        raise ProvisionerError(f"{spec.name}: give machines or prompt_machines, not both (got machines="
                               f"{shown(machines)}, prompt_machines={shown(prompt_machines)})",
                               params=("machines", "prompt_machines"))


def _is_zero(count) -> bool:
    return isinstance(count, Real) and not isinstance(count, bool) and count == 0


def machine_count(name: str, value) -> int:
    """A machine count as an int: an integer, or a float with a whole value (np.linspace's
    2.0); one line naming `name` for a fraction (was: silently truncated), NaN or a string."""
    if isinstance(value, Integral) and not isinstance(value, bool):
        return int(value)
    if isinstance(value, Real) and not isinstance(value, bool) and math.isfinite(value) and float(value).is_integer():
        return int(value)
    raise ProvisionerError(f"{name} must be a whole number of machines, 1-{MAX_DESIGN_MACHINES:,} "
                           f"(got {shown(value)})", params=(name,))


# The type of each design field (`check_design`): a wrong one was a TypeError from a
# comparison, or a value accepted and misread ('no' as allow_borrow, 8.0 as a TP degree).
_FIELD_TYPES = {"prompt_machine": [str], "token_machine": [str], "prompt_power_cap": [Interval(Real, None, None)],
                "token_power_cap": [Interval(Real, None, None)], "prompt_tp": [Interval(Integral, None, None)],
                "token_tp": [Interval(Integral, None, None)],
                "prompt_batch_cap_tokens": [Interval(Integral, None, None)],
                "allow_borrow": [bool], "prefill_chunk_tokens": [Interval(Integral, None, None)],
                "mps_prefill_share": [Interval(Real, None, None)], "duplicate_weights": [bool],
                "scheduler": [str]}


def check_design(d: Design) -> None:
    """Refuse a design no run could simulate: the family's counts (at most
    `MAX_DESIGN_MACHINES` per pool), power caps, batch and chunk sizes, TP degrees."""
    # a custom family's machines are the search's choice (not a spec's); its pools are its name's
    split = d.family == CUSTOM_SPLIT if d.family in CUSTOM_FAMILIES else family_spec(d.family).split
    for name in ("prompt_machines", "token_machines"):
        machine_count(name, getattr(d, name))   # a Design built directly skips make_design's
    validate_params({k: getattr(d, k) for k in _FIELD_TYPES}, _FIELD_TYPES)
    counts = ((("prompt_machines", d.prompt_machines), ("token_machines", d.token_machines)) if split
              else (("machines", d.prompt_machines),))   # a baseline's one pool: make_design's `machines`
    for name, count in counts:
        if not 1 <= count <= MAX_DESIGN_MACHINES:
            raise ProvisionerError(f"{d.family}: {name} must be 1-{MAX_DESIGN_MACHINES:,} (got {count})",
                                   params=(name,))
    for name in ("prompt_power_cap", "token_power_cap"):
        v = getattr(d, name)
        if not MIN_POWER_CAP <= v <= 1:
            raise ProvisionerError(f"{name} must be a fraction of rated GPU power in "
                                   f"[{math.ceil(MIN_POWER_CAP * 100) / 100:g}, 1] (got {v:g}); below "
                                   f"{MIN_POWER_CAP:.3f} the GPU's static power leaves no clock to run at",
                                   params=(name,))
    if not 1 <= d.prompt_batch_cap_tokens <= MAX_PROMPT_BATCH_CAP_TOKENS:
        raise ProvisionerError(f"prompt_batch_cap_tokens must be in [1, {MAX_PROMPT_BATCH_CAP_TOKENS:,}] (got "
                               f"{shown(d.prompt_batch_cap_tokens)})", params=("prompt_batch_cap_tokens",))
    if not 0 <= d.prefill_chunk_tokens <= MAX_CHUNK_TOKENS:
        raise ProvisionerError(f"prefill_chunk_tokens must be in [0, {MAX_CHUNK_TOKENS}] (got "
                               f"{shown(d.prefill_chunk_tokens)}); 0 turns chunked prefill off",
                               params=("prefill_chunk_tokens",))
    colocated_family = d.family.startswith("splitwiser")
    if colocated_family and not 0 < d.mps_prefill_share < 1:
        raise ProvisionerError(f"mps_prefill_share must be strictly between 0 and 1 (got {d.mps_prefill_share:g}): "
                               "the prefill process's share of the SMs, the decode process gets the rest",
                               params=("mps_prefill_share",))
    for name, given in (("mps_prefill_share", d.mps_prefill_share != 0),
                        ("duplicate_weights", d.duplicate_weights)):
        if given and not colocated_family:
            raise ProvisionerError(f"{name} applies to the splitwiser families only (not {d.family})",
                                   params=(name,))
    check_scheduler_family(d.scheduler, d.family, d.colocated, d.prefill_chunk_tokens)   # SEMANTICS.md, "Schedulers"
    for name in ("prompt_tp", "token_tp"):
        if getattr(d, name) not in (1, 2, 4, 8):
            raise ProvisionerError(f"{name} must be 1, 2, 4 or 8 (got {getattr(d, name)})", params=(name,))


DESIGN_FIELDS = tuple(f.name for f in fields(Design))
_NO_DESIGNS = "designs is empty: give at least one design (make_design, grid; a filtered table may have kept none)"
# Columns that results written before they existed lack: their value then.
OPTIONAL_DESIGN_FIELDS = {"prefill_chunk_tokens": 0, "mps_prefill_share": 0.0, "duplicate_weights": False,
                          "scheduler": DEFAULT_SCHEDULER}


class DesignBatch:
    """Many designs as a struct of arrays, shape (n_designs,) each."""

    def __init__(self, columns: dict[str, np.ndarray]):
        columns = dict(columns)
        if OPTIONAL_DESIGN_FIELDS.keys() - columns.keys() and columns:
            n = len(np.atleast_1d(next(iter(columns.values()))))
            for k, v in OPTIONAL_DESIGN_FIELDS.items():
                columns.setdefault(k, np.full(n, v))
        missing = set(DESIGN_FIELDS) - set(columns)
        if missing:
            raise ProvisionerError(f"design batch lacks columns {sorted(missing)}")
        n = {len(np.atleast_1d(v)) for v in columns.values()}
        if len(n) != 1:
            raise ProvisionerError("design batch columns have different lengths")
        self.columns = {k: np.atleast_1d(np.asarray(columns[k])) for k in DESIGN_FIELDS}

    @classmethod
    def from_designs(cls, designs) -> "DesignBatch":
        if isinstance(designs, DesignBatch):
            return designs
        if isinstance(designs, Design):
            designs = [designs]
        if isinstance(designs, pd.DataFrame):   # iterating it gave its column names: "got 'family'"
            raise ProvisionerError("designs is a table: give DesignBatch.from_frame(table) (its design columns, e.g. "
                                   "the rows of a simulate result)", params=("designs",))
        if isinstance(designs, (str, dict)) or not np.iterable(designs):
            raise ProvisionerError(f"designs must be a Design, a list of them or a DesignBatch (make_design, grid) "
                                   f"(got {shown(designs)})", params=("designs",))
        designs = list(designs)
        if not designs:
            raise ProvisionerError(_NO_DESIGNS, params=("designs",))
        wrong = [d for d in designs if not isinstance(d, Design)]
        if wrong:
            raise ProvisionerError(f"designs must hold Design objects (make_design) (got {shown(wrong[0])})",
                                   params=("designs",))
        return cls({k: np.array([getattr(d, k) for d in designs]) for k in DESIGN_FIELDS})

    @classmethod
    def from_frame(cls, frame: pd.DataFrame) -> "DesignBatch":
        return cls({k: frame[k].to_numpy() for k in DESIGN_FIELDS if k in frame})

    def __len__(self) -> int:
        return len(self.columns["family"])

    def __getattr__(self, name):
        try:
            return self.__dict__["columns"][name]
        except KeyError:
            raise AttributeError(name) from None

    def design(self, i: int) -> Design:
        return Design(**{k: _scalar(self.columns[k][i]) for k in DESIGN_FIELDS})

    def take(self, idx) -> "DesignBatch":
        return DesignBatch({k: v[idx] for k, v in self.columns.items()})

    def to_frame(self) -> pd.DataFrame:
        return pd.DataFrame(self.columns)

    @property
    def is_split(self) -> np.ndarray:
        return self.columns["token_machines"] > 0

    @property
    def is_colocated(self) -> np.ndarray:
        return self.columns["mps_prefill_share"].astype(float) > 0


def checked_batch(designs) -> DesignBatch:
    """`DesignBatch.from_designs`, each distinct design checked as `make_design` checks it: a
    `Design` built directly or a batch read from a table skips that check (an unknown family,
    -1 machines or a 0.1 power cap were simulated, their rows nonsense)."""
    batch = DesignBatch.from_designs(designs)
    if len(batch) == 0:   # a filter that kept no row: numpy's "zero-size array to reduction operation"
        raise ProvisionerError(_NO_DESIGNS, params=("designs",))
    # each distinct row once, first occurrences in order, keyed by plain tuples: pandas'
    # to_frame().drop_duplicates() was most of this function's time, 1.9-2.1 s of a 60-84 s
    # `provision --goal cost --rps 70` (115 calls, on a loaded 2-core machine; now 0.35-0.5 s)
    first: dict[tuple, int] = {}
    for i, row in enumerate(zip(*(batch.columns[k].tolist() for k in DESIGN_FIELDS))):
        first.setdefault(row, i)
    family = batch.columns["family"]
    for i in first.values():
        if family[i] not in CUSTOM_FAMILIES:   # a custom family's designs come from its search
            check_design(batch.design(i))
    return batch


def _scalar(v):
    return v.item() if hasattr(v, "item") else v


def grid(family: str, prompt_counts, token_counts=(0,), **overrides) -> DesignBatch:
    """All designs of a family over a grid of machine counts (Fig. 12 style): every
    (prompt, token) pair of a Splitwise family; one design per count of `prompt_counts`
    for a one-pool family (baselines, splitwisers), which take no `token_counts`."""
    spec = family_spec(family)
    for name, counts in (("prompt_counts", prompt_counts), ("token_counts", token_counts)):
        if isinstance(counts, str) or not np.iterable(counts):
            raise ProvisionerError(f"{name} must be a sequence of machine counts such as range(20, 36) "
                                   f"(got {shown(counts)})", params=(name,))
    if not spec.split:
        token_counts = list(token_counts)   # a baseline's token counts were dropped: one design per prompt count
        if any(not _is_zero(t) for t in token_counts):
            raise ProvisionerError(f"{spec.name} has one pool of machines: its counts are prompt_counts alone; "
                                   f"drop token_counts (got {shown(token_counts)[:60]})", params=("token_counts",))
        return DesignBatch.from_designs([make_design(family, machines=n, **overrides) for n in prompt_counts])
    return DesignBatch.from_designs([make_design(family, p, t, **overrides)
                                     for p in prompt_counts for t in token_counts])
