"""Everything an engine needs, as arrays: designs x pool physics, and the requests.

Both engines read only this struct, so they cannot disagree about the hardware.
Pool 0 is the prompt pool (or a baseline's mixed pool), pool 1 the token pool. A
Splitwiser design (`mps_share` > 0) of n machines has n prompt servers (its prefill
processes) and n token servers (its decode processes): prompt server j and token server
n + j share machine j's GPUs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from perfmodels import LatencyModel, colocated_kv_capacity_tokens, kv_capacity_tokens, kv_wire_bytes_per_s
from perfmodels import LAYERWISE_MIN_PROMPT_TOKENS

from ..designs import DesignBatch
from ..errors import ProvisionerError
from ..schedulers import DEFAULT_SWAP_SPACE_GB, check_preemption, check_swap_space, scheduler_codes

# Splitwise's mixed pool: a prompt machine more than this many full batches behind
# lends the prefill to a token machine (SEMANTICS.md, "prompt pool overloaded").
PROMPT_OVERLOAD_BATCHES = 4.0
# The latest arrival the engines take (2**32 s, 136 years): below it their clock (float64
# seconds) resolves 0.95 us or better, under the shortest pass a latency model gives (1 us,
# the profile floor). Past it, decodes were timed to the millisecond at 1e13 s, and at
# 1e15 s a 45-ms iteration no longer moved the clock: the discrete-event engine reported
# 0-ms latencies, the fluid one stopped on its stalled clock blaming the latency model.
MAX_ARRIVAL_S = 2.0 ** 32


def check_arrival_range(arrival_s: np.ndarray) -> None:
    """Refuse arrivals too late for the engines' clock to time an iteration (`MAX_ARRIVAL_S`)."""
    last = float(np.max(arrival_s)) if len(arrival_s) else 0.0   # a hand-built SimInputs may be unsorted
    if last > MAX_ARRIVAL_S:
        raise ProvisionerError(
            f"the trace's last request arrives at {last:.3g} s ({last / 3.156e7:.3g} years): past "
            f"{MAX_ARRIVAL_S:.3g} s (136 years) the simulators' clock cannot time a GPU pass; give a shorter "
            f"duration_s or a higher rps, or arrival times in seconds from the trace's start",
            params=("duration_s", "rps"))


@dataclass(frozen=True)
class SimInputs:
    """Arrays of shape (n_designs,) or (n_designs, 2 pools[, N_COEF]) and (n_requests,)."""

    n_machines: np.ndarray          # (d, 2) int64 servers (model replicas): prompt (or mixed) pool, token pool
    coef: np.ndarray                # (d, 2, perf.n_coef) latency vector per pool: N_COEF roofline
                                    # coefficients, then a measured-profile table if any
    kv_cap_tokens: np.ndarray       # (d, 2) KV budget per machine, tokens
    batch_cap_tokens: np.ndarray    # (d,) prompt batch cap
    chunk_tokens: np.ndarray        # (d,) chunked-prefill budget of prompt tokens per iteration (0: off)
    allow_borrow: np.ndarray        # (d,) bool
    mps_share: np.ndarray           # (d,) Splitwiser: the prefill process's SM share (0: not co-located)
    kv_s_per_token: np.ndarray      # (d,) serialized transfer seconds per prompt token
    kv_setup_s: np.ndarray          # (d,) fixed cost per transfer
    n_layers: int
    layerwise_min_tokens: float
    overload_tokens: np.ndarray     # (d,) pending prompt tokens that count as overload
    arrival_s: np.ndarray           # (r,) float64 sorted
    prompt_tokens: np.ndarray       # (r,) int64
    output_tokens: np.ndarray       # (r,) int64
    # Availability windows per server (autoscaling, SEMANTICS.md "Availability windows"):
    # (d, max servers) float64 [from, until) in s; None: every server always available.
    active_from_s: np.ndarray | None = None
    active_until_s: np.ndarray | None = None
    servers: tuple | None = None    # (d,) per design a cloud ServerPlan (_des_cloud.py) or None; both engines
    scheduler: np.ndarray | None = None      # (d,) int64 codes of provisioner.schedulers.SCHEDULERS (None: least-work)
    high_priority: np.ndarray | None = None  # (r,) bool high-priority requests (None: none)
    # (d, 2) live migration's link between two token servers' machines: (s per token, setup s);
    # None: the KV-transfer link (kv_s_per_token, kv_setup_s)
    migration_link: np.ndarray | None = None
    # Closed-loop autoscaling (`_control.ScalingControl`, DES only): the controller sets the
    # servers' availability windows as it runs; None: no controller.
    scaling: object | None = None
    # Swap preemption (SEMANTICS.md "Schedulers"; DES, on-demand baselines): (d, 3) per server
    # (s per KV token over the host link, host KV budget in tokens, KV bytes per token);
    # None: preemption by recompute.
    swap: np.ndarray | None = None

    @property
    def n_designs(self) -> int:
        return len(self.batch_cap_tokens)


def build_inputs(designs: DesignBatch, trace, llm, perf: LatencyModel, high_priority=None) -> SimInputs:
    cat = perf.catalog
    d = len(designs)
    colocated = designs.is_colocated
    split = designs.is_split | colocated
    token_servers = np.where(colocated, designs.prompt_machines, designs.token_machines)
    n_machines = np.stack([designs.prompt_machines, np.where(split, token_servers, 0)], axis=1)
    n_machines = n_machines.astype(np.int64)
    coef = np.empty((d, 2, perf.n_coef))
    kv_cap = np.empty((d, 2))
    kv_s_per_token = np.empty(d)
    kv_setup = np.empty(d)
    pools = (("prompt_machine", "prompt_tp", "prompt_power_cap"), ("token_machine", "token_tp", "token_power_cap"))
    # Group designs by hardware so each distinct pool is computed once (vectorized over caps).
    for p, (mcol, tpcol, capcol) in enumerate(pools):
        keys = np.char.add(designs.columns[mcol].astype(str), "|" + designs.columns[tpcol].astype(str))
        for key in np.unique(keys):
            idx = np.flatnonzero(keys == key)
            machine = cat.machine(key.split("|")[0])
            tp = int(key.split("|")[1])
            if tp > machine.gpus_per_machine or machine.gpus_per_machine % tp:
                raise ProvisionerError(f"{tpcol.replace('_', '-')} {tp} does not divide the {machine.gpus_per_machine} "
                                       f"GPUs of a {machine.name}: use a divisor of {machine.gpus_per_machine}")
            gpu = cat.gpu(machine.gpu)
            caps = designs.columns[capcol][idx].astype(float)
            coef[idx, p] = perf.coefficients(llm, gpu, tp, caps)
            kv_cap[idx, p] = kv_capacity_tokens(llm, gpu, tp)
            swsim = idx[designs.columns["scheduler"][idx] == "splitwisesim"]
            if len(swsim):   # SplitwiseSim's own KV estimate (sim/_des_splitwisesim.py)
                from ._des_splitwisesim import splitwisesim_kv_tokens
                kv_cap[swsim, p] = splitwisesim_kv_tokens(llm, gpu, tp)
            # A machine whose GPUs hold several TP groups runs that many independent
            # replicas; the engines schedule replicas ("servers"), cost counts machines.
            n_machines[idx, p] *= machine.gpus_per_machine // tp
    for key in np.unique(np.char.add(designs.columns["prompt_machine"].astype(str),
                                     "|" + designs.columns["token_machine"].astype(str))):
        src, dst = (cat.machine(n) for n in key.split("|"))
        idx = np.flatnonzero((designs.columns["prompt_machine"] == src.name)
                             & (designs.columns["token_machine"] == dst.name))
        tp = designs.columns["prompt_tp"][idx].astype(float)
        kv_s_per_token[idx] = llm.kv_bytes_per_token / kv_wire_bytes_per_s(src, dst, tp)
        kv_setup[idx] = perf.calibration.for_gpu(src.gpu).kv_transfer_setup_s
    migration_link = _migration_link(designs, split, llm, perf, np.stack([kv_s_per_token, kv_setup], axis=1))
    swsim = designs.columns["scheduler"] == "splitwisesim"
    if swsim.any():   # SplitwiseSim's own KV transfer (sim/_des_splitwisesim.py)
        from ._des_splitwisesim import splitwisesim_kv_s_per_token
        kv_s_per_token[swsim], kv_setup[swsim] = splitwisesim_kv_s_per_token(llm), 0.0
    batch_cap = designs.prompt_batch_cap_tokens.astype(float)
    if colocated.any():
        _colocate(designs, colocated, llm, cat, batch_cap, kv_cap, kv_s_per_token, kv_setup)
    if np.any(kv_cap[:, 0] <= 0) or np.any(kv_cap[split, 1] <= 0):
        bad = designs.design(int(np.flatnonzero((kv_cap[:, 0] <= 0) | (split & (kv_cap[:, 1] <= 0)))[0]))
        what = (f"twice (duplicate_weights) beside the prefill working set on a {bad.prompt_machine}"
                if bad.duplicate_weights else f"on a {bad.prompt_machine} / {bad.token_machine} replica")
        raise ProvisionerError(f"{llm.name} weights do not fit {what} at this TP degree: "
                               f"use more GPUs per replica or a smaller model", params=("duplicate_weights",))
    return SimInputs(
        n_machines=n_machines.astype(np.int64), coef=coef, kv_cap_tokens=kv_cap,
        batch_cap_tokens=batch_cap, chunk_tokens=designs.prefill_chunk_tokens.astype(float),
        allow_borrow=designs.allow_borrow.astype(bool) & ~colocated,
        mps_share=np.where(colocated, designs.mps_prefill_share.astype(float), 0.0),
        kv_s_per_token=kv_s_per_token, kv_setup_s=kv_setup, n_layers=int(llm.n_layers),
        layerwise_min_tokens=float(LAYERWISE_MIN_PROMPT_TOKENS),
        overload_tokens=PROMPT_OVERLOAD_BATCHES * batch_cap,
        arrival_s=np.ascontiguousarray(trace.arrival_s, dtype=float),
        prompt_tokens=np.ascontiguousarray(trace.prompt_tokens, dtype=np.int64),
        output_tokens=np.ascontiguousarray(trace.output_tokens, dtype=np.int64),
        scheduler=scheduler_codes(designs.columns["scheduler"]), high_priority=high_priority,
        migration_link=migration_link,
    )


def _migration_link(designs, split, llm, perf, kv_link) -> np.ndarray:
    """(d, 2) live migration's link: token machine to token machine (its NICs at token_tp)
    where there is a token pool (Splitwise, Splitwiser: whose prefill-to-decode hand-over
    has no wire), the KV-transfer link on a baseline (machine to machine of its one type)."""
    link = kv_link.copy()
    cat = perf.catalog
    for name in np.unique(designs.columns["token_machine"][split].astype(str)):
        idx = np.flatnonzero(split & (designs.columns["token_machine"] == name))
        machine = cat.machine(name)
        tp = designs.columns["token_tp"][idx].astype(float)
        link[idx, 0] = llm.kv_bytes_per_token / kv_wire_bytes_per_s(machine, machine, tp)
        link[idx, 1] = perf.calibration.for_gpu(machine.gpu).kv_transfer_setup_s
    return link


def _colocate(designs, colocated, llm, cat, batch_cap, kv_cap, kv_s_per_token, kv_setup) -> None:
    """Splitwiser designs: the KV cache is handed over in the machine's own HBM (no
    transfer), and both servers of a machine draw on one KV budget: HBM after the
    weights (once or twice) and the prefill process's working set (its chunk budget,
    else its batch cap, of KV tokens)."""
    idx = np.flatnonzero(colocated)
    chunk = designs.prefill_chunk_tokens[idx].astype(float)
    working_set = np.where(chunk > 0, chunk, batch_cap[idx])
    copies = np.where(designs.duplicate_weights[idx].astype(bool), 2.0, 1.0)
    for i, w, k in zip(idx, working_set, copies):
        machine = cat.machine(str(designs.prompt_machine[i]))
        budget = colocated_kv_capacity_tokens(llm, cat.gpu(machine.gpu), int(designs.prompt_tp[i]), w, k)
        kv_cap[i] = float(budget)
    kv_s_per_token[idx] = 0.0
    kv_setup[idx] = 0.0


@dataclass
class EngineOutput:
    """What an engine returns; `_metrics.summarize` turns it into the result table."""

    first_token_s: np.ndarray | None  # (d, r) absolute time of the first token (None: not kept)
    finish_s: np.ndarray | None       # (d, r) absolute time of the last token (None: not kept)
    busy_s: np.ndarray              # (d, 2) machine-seconds busy per pool
    decode_batch_time_s: np.ndarray  # (d, 2) sum over iterations of decode batch x duration
    decode_time_s: np.ndarray       # (d, 2) machine-seconds of iterations that carried decodes
    borrowed_decodes: np.ndarray    # (d,) decodes that ran on a prompt machine (Splitwise)
    borrowed_prefills: np.ndarray   # (d,) prefills that ran on a token machine
    kv_visible_s_sum: np.ndarray    # (d,) sum of visible KV-transfer delays
    kv_transfers: np.ndarray        # (d,) number of transfers
    aborted: np.ndarray | None = None  # (d,) bool: stopped early, certainly infeasible (fluid only)
    makespan_s: np.ndarray | None = None     # (d,) first arrival to last finish, when the engine computed it
    latency_pct_s: np.ndarray | None = None  # (d, 3 metrics, 3 percentiles), when the engine computed them
    slowdown_pct: np.ndarray | None = None   # (d, 3, 3) percentiles of per-request slowdowns
    drained_s: np.ndarray | None = None      # (d, max servers) when each server's last request finished (0: none)
    scheduler_stats: np.ndarray | None = None  # (d, 5) on-demand schedulers (DES): SCHEDULER_STATS
    timelines: list | None = None            # per design: rows of SCHEDULER_TIMELINE sampled every second
    scaling: list | None = None              # per design: the closed-loop controller's log (_control.scaling_log_arrays)
    swap_stats: np.ndarray | None = None     # (d, 2) swap preemption (DES): swap-outs, bytes over the host link




def swap_inputs(designs: DesignBatch, llm, catalog, swap_space_gb: float = DEFAULT_SWAP_SPACE_GB) -> np.ndarray:
    """(d, 3) swap preemption's host side per server (`SimInputs.swap`): the seconds per KV
    token to copy it over the host links of its TP group's GPUs (PCIe, in parallel), the KV
    tokens its swap space holds (vLLM's `--swap-space`: `swap_space_gb` GiB per GPU of the
    TP group, capped by the replica's share of the machine's DRAM), and the KV bytes per
    token. Baselines under an on-demand scheduler only; a machine without host data is
    refused in one line."""
    swap_space_gb = check_swap_space(swap_space_gb)
    out = np.empty((len(designs), 3))
    for i in range(len(designs)):
        d = designs.design(i)
        check_preemption("swap", d.scheduler)
        if d.split or d.colocated:
            raise ProvisionerError(f"preemption swap is modelled on the baseline families (one pool of vLLM "
                                   f"instances), not {d.family}: use preemption recompute", params=("preemption",))
        machine = catalog.machine(d.prompt_machine)
        if machine.host_memory_gb is None or machine.host_link_gb_per_s_per_gpu is None:
            raise ProvisionerError(f"preemption swap needs the host memory and host link of a {machine.name}, which "
                                   f"the catalog does not have: use preemption recompute", params=("preemption",))
        tp = int(d.prompt_tp)
        replicas = machine.gpus_per_machine // tp
        host_bytes = min(swap_space_gb * 2**30 * tp, machine.host_memory_gb * 1e9 / replicas)
        out[i] = (llm.kv_bytes_per_token / (tp * machine.host_link_gb_per_s_per_gpu * 1e9),
                  host_bytes / llm.kv_bytes_per_token, llm.kv_bytes_per_token)
    return out
