"""Cluster scheduler policies: their names, codes and constants (SEMANTICS.md, "Schedulers").

`least-work` is the default rule of SEMANTICS.md (KV reserved for a whole request at
admission, dispatch to the least pending work). The other policies allocate KV on demand
and preempt (vLLM) and run in the discrete-event engine only, on every family
(`sim/_des_llumnix.py`; Splitwise's two pools `sim/_des_split_on_demand.py`; Splitwiser
`sim/_des_splitwiser_on_demand.py`):

| policy            | KV memory            | dispatch            | migration |
|-------------------|----------------------|---------------------|-----------|
| least-work        | whole request, oracle | least pending work | no        |
| jsq               | on demand, preemption | least pending work | no        |
| llumnix-dispatch  | on demand, preemption | most freeness      | no        |
| llumnix           | on demand, preemption | most freeness      | yes       |
| jsq-migration     | on demand, preemption | least pending work | yes       |

`splitwisesim` replays SplitwiseSim's own rules (`sim/_des_splitwisesim.py`; SEMANTICS.md,
"The splitwisesim scheduler"): its `token_jsq` routing on the baselines, its `mixed_pool`
routing on the split families, prompts ahead of decodes in every iteration. DES only.
"""

from __future__ import annotations

import numpy as np

from .errors import ProvisionerError

SCHEDULERS = ("least-work", "jsq", "llumnix-dispatch", "llumnix", "jsq-migration", "splitwisesim")
SPLITWISESIM = "splitwisesim"
DEFAULT_SCHEDULER = "least-work"
# The policies that allocate KV on demand and preempt (vLLM): `_des_llumnix.OnDemandMachine`.
ON_DEMAND_SCHEDULERS = ("jsq", "llumnix-dispatch", "llumnix", "jsq-migration")
# The policies that live-migrate decoding requests (`_migration.py`).
MIGRATING_SCHEDULERS = ("llumnix", "jsq-migration")
# How an on-demand scheduler preempts: recompute the victim's KV, or swap it to host memory.
PREEMPTION_MODES = ("recompute", "swap")
# Swap preemption's host memory per GPU, GiB: vLLM's `--swap-space` default (4 GiB per GPU).
# A replica of TP t swaps into t x this, capped by its share of the machine's DRAM (catalog).
DEFAULT_SWAP_SPACE_GB = 4.0
SCHEDULER_HELP = ("least-work (default: KV reserved per request at admission, least pending work), jsq (KV on "
                  "demand with vLLM preemption, least pending work), llumnix-dispatch (on demand, dispatch by "
                  "freeness), llumnix (dispatch by freeness with live migration), jsq-migration (least "
                  "work with live migration) or splitwisesim (SplitwiseSim's token_jsq / mixed_pool routing "
                  "and prompt-first batching, to reproduce the Splitwise paper). All but least-work run in "
                  "the discrete-event engine.")

# vLLM keeps 1% of the KV blocks free when it admits a prompt, so that admission does not
# preempt a running request at the very next decode step.
WATERMARK_FRACTION = 0.01
# Llumnix migrates from the least free to the freest instance when their freeness (free
# KV tokens per running request, i.e. decode steps left) differs by more than this ...
MIGRATION_FREENESS_GAP = 100.0
# ... and only from a machine under memory pressure: freeness below this many decode steps
# (negative when its queue's demand exceeds its free KV).
MIGRATION_SOURCE_FREENESS = 32.0
# The multi-stage copy stops (downtime stage) once a stage has this many new tokens or
# fewer, or after MIGRATION_MAX_STAGES stages whatever the count (the copy cannot converge
# when the link is slower than decoding).
MIGRATION_FINAL_STAGE_TOKENS = 1
MIGRATION_MAX_STAGES = 8
# Seconds between two samples of the scheduler timeline (fragmentation, counts).
TIMELINE_STEP_S = 1.0
# The high-priority headroom: Llumnix adds this many virtual KV tokens per running
# high-priority request to its instance's usage, so new work avoids that instance.
HIGH_PRIORITY_HEADROOM_TOKENS = 2048.0
# SplitwiseSim's configuration (its configs/orchestrator_repo/schedulers/mixed_pool.yml and
# the instance settings of the paper's runs): a prompt queue is "long" past this many
# pending tokens, an iteration holds at most this many requests, and a KV cache moves
# from prefill to decode server at this bandwidth (GiB/s, `transfer_bandwidth`).
SPLITWISESIM_PROMPT_QUEUE_TOKENS = 8192
SPLITWISESIM_MAX_BATCH = 512
SPLITWISESIM_TRANSFER_GIB_S = 200.0


def scheduler_codes(names) -> np.ndarray:
    """Policy names -> int codes (index in SCHEDULERS); one clear line for an unknown name."""
    names = np.atleast_1d(np.asarray(names, dtype=object))
    codes = np.empty(len(names), dtype=np.int64)
    for i, name in enumerate(names):
        codes[i] = scheduler_code(str(name))
    return codes


def scheduler_code(name: str) -> int:
    if name not in SCHEDULERS:
        raise ProvisionerError(f"scheduler must be one of {', '.join(SCHEDULERS)} (got {name!r})",
                               params=("scheduler",))
    return SCHEDULERS.index(name)


def check_scheduler_family(scheduler: str, family: str, colocated: bool, prefill_chunk_tokens: int = 0) -> None:
    """Every policy applies to every family but `splitwisesim`, which replays SplitwiseSim's
    baselines and Splitwise pools (it has no co-located Splitwiser, and prefills whole prompts)."""
    scheduler_code(scheduler)
    if scheduler == SPLITWISESIM and colocated:
        raise ProvisionerError(f"scheduler splitwisesim applies to the baseline and splitwise families "
                               f"(SplitwiseSim has no co-located Splitwiser), not {family}", params=("scheduler",))
    if scheduler == SPLITWISESIM and prefill_chunk_tokens > 0:   # was found in the engine, naming a flag never given
        fix = (f"use {family.removesuffix('-chunked')}" if family.endswith("-chunked")
               else "drop prefill_chunk_tokens")
        raise ProvisionerError(f"scheduler splitwisesim prefills whole prompts (SplitwiseSim has no chunked "
                               f"prefill), and {family} chunks them here: {fix}",
                               params=("scheduler", "prefill_chunk_tokens"))


def check_preemption(preemption: str, scheduler: str, *, chosen: bool = False) -> None:
    """One line for an unknown preemption mode, or for a mode that would change nothing: swap
    under a scheduler that does not preempt, or any mode the caller says was `chosen` (typed,
    not the default recompute) under one. The message names the Python parameters (`params`;
    the CLI prints its flags)."""
    check_preemption_mode(preemption)
    if (preemption == "swap" or chosen) and scheduler not in ON_DEMAND_SCHEDULERS:
        raise ProvisionerError(f"preemption {preemption} sets how the on-demand schedulers preempt; scheduler "
                               f"{scheduler} does not preempt: choose scheduler {', '.join(ON_DEMAND_SCHEDULERS[:-1])} "
                               f"or {ON_DEMAND_SCHEDULERS[-1]}, or drop preemption", params=("preemption", "scheduler"))


def check_preemption_mode(preemption: str) -> None:
    """One line for a preemption mode that is not recompute or swap."""
    if preemption not in PREEMPTION_MODES:
        raise ProvisionerError(f"preemption must be one of {', '.join(PREEMPTION_MODES)} (got '{preemption}')",
                               params=("preemption",))


def check_swap_space(swap_space_gb) -> float:
    """The swap space per GPU (GiB) as a float; one line unless it is > 0 and finite."""
    try:
        value = float(swap_space_gb)
    except (TypeError, ValueError):
        value = float("nan")
    if not 0 < value < float("inf"):
        raise ProvisionerError(f"swap_space_gb must be > 0 and finite, in GiB of host memory per GPU (got "
                               f"{swap_space_gb!r})", params=("swap_space_gb",))
    return value


def scheduler_applies_to(scheduler: str, family: str, preemption: str = "recompute") -> bool:
    """Whether a family's designs can run under the scheduler and preemption mode (a
    search's default families): swap preemption is modelled on the baselines only."""
    if preemption == "swap" and not family.startswith("baseline-"):
        return False
    # SplitwiseSim has no co-located Splitwiser and prefills whole prompts (no *-chunked family)
    return scheduler != SPLITWISESIM or not (family.startswith("splitwiser") or family.endswith("-chunked"))


def refuse_scheduler_families(scheduler: str, families, preemption: str = "recompute") -> None:
    """A search under `splitwisesim` cannot take a Splitwiser or chunked family, nor one with swap
    preemption a family other than a baseline (one line naming the parameters, `params`:
    the CLI says its flags and --design, a sweep spec its keys)."""
    bad = [f for f in families if not scheduler_applies_to(scheduler, f)]
    if bad and bad[0].endswith("-chunked"):   # was found when its first design ran, naming --prefill-chunk-tokens
        raise ProvisionerError(f"scheduler splitwisesim prefills whole prompts (SplitwiseSim has no chunked "
                               f"prefill): drop {bad[0]} from families", params=("scheduler", "families"))
    if bad:
        raise ProvisionerError(f"scheduler splitwisesim applies to the baseline and splitwise designs "
                               f"(SplitwiseSim has no co-located Splitwiser): drop {bad[0]} from families",
                               params=("scheduler", "families"))
    bad = [f for f in families if not scheduler_applies_to(DEFAULT_SCHEDULER, f, preemption)]
    if bad:   # was found when the family's first design ran (a sweep's other questions done)
        raise ProvisionerError(f"preemption swap is modelled on the baselines (one pool of vLLM instances), not "
                               f"{bad[0]}: drop it from families, or use preemption recompute",
                               params=("preemption", "families"))
