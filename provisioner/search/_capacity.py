"""Fluid capacity model: how much work a trace asks of a machine, and how much fits in it.

Everything here is an *optimistic* estimate, so that the integer program built on it
(`_ilp.py`) bounds the simulator from below (cost, power) or above (throughput):

- prompt work of a request on a machine (machine-seconds): the parts of the roofline
  iteration time that grow with its own prompt — GEMM and LM-head compute, causal
  attention, the per-token all-reduce (convex in the batch's tokens, so never cheaper
  in a batch than alone) and the per-sequence overhead. Batching shares
  the weight read, the fixed all-reduce latency and the per-layer overhead among the
  prompts of a batch, so this is what a prompt costs at best (the batch cap only
  limits how much is shared; a prompt never costs less than this);
- decode work of a token: one iteration at the largest decode batch whose KV cache
  fits in HBM, divided by that batch (the weight read is shared by the batch);
- KV memory: by Little's law the KV tokens in use are rate x E[(s + n) x residence],
  the residence at least (n - 1) iterations at batch 1 on the fastest machine.

Machines of either pool may serve either phase (Splitwise's mixed pool lends them), so
the bound treats a design's machine-seconds as one budget shared by both phases.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from perfmodels import LatencyModel, kv_capacity_tokens, machine_tp_degrees, prompt_compute_s

from ..errors import ProvisionerError

# The simulator serves a trace of `duration_s` seconds and drains what is left; a design
# that meets the SLOs finishes its work within the window plus a short drain. Work is
# counted against `duration_s x (1 + DRAIN_ALLOWANCE)` machine-seconds per machine: the
# allowance keeps the bound below the simulator's answer on a finite trace.
DRAIN_ALLOWANCE = 0.05


@dataclass(frozen=True)
class Demand:
    """What one request of the trace asks for, on average (rate-free: scale by rps).

    Attributes
    ----------
    mean_prompt_tokens, mean_output_tokens : tokens per request.
    decode_tokens_per_request : mean (n - 1), tokens generated after the first.
    mean_decode_context_tokens : token-weighted mean context of a decode step.
    kv_token_iterations_per_request : mean (s + n) x (n - 1), KV tokens held x iterations.
    """

    mean_prompt_tokens: float
    mean_output_tokens: float
    decode_tokens_per_request: float
    mean_decode_context_tokens: float
    kv_token_iterations_per_request: float
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray

    @classmethod
    def from_trace(cls, trace) -> "Demand":
        s = np.asarray(trace.prompt_tokens, dtype=float)
        n = np.asarray(trace.output_tokens, dtype=float)
        steps = np.maximum(n - 1.0, 0.0)
        total_steps = steps.sum()
        ctx = float(np.sum(steps * (s + n / 2.0)) / total_steps) if total_steps > 0 else float(s.mean())
        return cls(float(s.mean()), float(n.mean()), float(steps.mean()), ctx,
                   float(np.mean((s + n) * steps)), s, n)


@dataclass(frozen=True)
class MachineCapacity:
    """Optimistic per-request work of one machine option (machine type, power cap, TP).

    A machine with more GPUs than the TP degree runs `replicas` = GPUs / TP independent
    model replicas; work and memory below are per machine (all its replicas).

    Attributes
    ----------
    prompt_s_per_request : machine-seconds of prefill per request (trace mean).
    decode_s_per_request : machine-seconds of decode per request (trace mean).
    kv_capacity_tokens : KV-cache tokens a machine holds (0: the model does not fit).
    decode_batch : the memory-limited decode batch of one replica the decode work assumes.
    solo_iteration_s : one decode iteration at batch 1 (the fastest a token can come).
    """

    machine: str
    power_cap: float
    tp: int
    replicas: int
    prompt_s_per_request: float
    decode_s_per_request: float
    kv_capacity_tokens: float
    decode_batch: float
    solo_iteration_s: float
    cost_usd_per_h: float
    power_kw: float

    @property
    def work_s_per_request(self) -> float:
        return self.prompt_s_per_request + self.decode_s_per_request

    def max_rps(self, machines: float, duration_s: float | None = None) -> float:
        """Requests/s that `machines` of this option could serve if they did nothing else."""
        return machines * (1.0 + DRAIN_ALLOWANCE) / self.work_s_per_request


def machine_capacity(perf: LatencyModel, llm, demand: Demand, machine: str, power_cap: float = 1.0,
                     tp: int | None = None) -> MachineCapacity:
    """The capacity of one machine option (see the module docstring for what is counted)."""
    cat = perf.catalog
    m = cat.machine(machine)
    tp = int(tp or m.gpus_per_machine)
    if tp < 1 or m.gpus_per_machine % tp:
        raise ProvisionerError(f"tensor-parallel degree {tp} does not divide the {m.gpus_per_machine} GPUs of a "
                               f"{m.name}")
    replicas = m.gpus_per_machine // tp
    gpu = cat.gpu(m.gpu)
    kv = float(kv_capacity_tokens(llm, gpu, tp))
    coef = perf.coefficients(llm, gpu, tp, power_cap)
    # batched with others a prompt costs at least what it costs alone (`prompt_compute_s`)
    prompt = prompt_compute_s(coef, demand.prompt_tokens)
    mean_need = demand.mean_prompt_tokens + demand.mean_output_tokens
    batch = max(1.0, np.floor(kv / mean_need)) if kv > 0 else 1.0
    ctx = demand.mean_decode_context_tokens
    decode_iter = float(perf.decode_time_s(llm, gpu, tp, batch, ctx, power_cap))
    solo = float(perf.decode_time_s(llm, gpu, tp, 1, ctx, power_cap))
    return MachineCapacity(
        machine=m.name, power_cap=float(power_cap), tp=tp, replicas=replicas,
        prompt_s_per_request=float(prompt.mean()) / replicas,
        decode_s_per_request=demand.decode_tokens_per_request * decode_iter / batch / replicas,
        kv_capacity_tokens=kv * replicas, decode_batch=batch, solo_iteration_s=solo,
        cost_usd_per_h=float(m.cost_usd_per_h), power_kw=float(m.power_w(power_cap)) / 1e3)


def tp_options(perf: LatencyModel, llm, machine: str) -> tuple[int, ...]:
    """Tensor-parallel degrees at which `llm` fits on a machine's GPUs (divisors of its GPU
    count, with room for at least one 2048-token request), largest first."""
    from perfmodels import fits_in_memory
    m = perf.catalog.machine(machine)
    gpu = perf.catalog.gpu(m.gpu)
    return tuple(d for d in machine_tp_degrees(m.gpus_per_machine) if bool(fits_in_memory(llm, gpu, d)))


def kv_tokens_needed(demand: Demand, rps: float, fastest_iteration_s: float) -> float:
    """KV tokens in use on average (Little's law) at `rps`, with the fastest decode."""
    return rps * demand.kv_token_iterations_per_request * fastest_iteration_s


def machines_needed(cap: MachineCapacity, rps: float) -> float:
    """Machines of one option that the work alone needs at `rps` (fractional)."""
    if not np.isfinite(cap.work_s_per_request) or cap.work_s_per_request <= 0:
        raise ProvisionerError(f"no capacity model for {cap.machine}")
    return rps * cap.work_s_per_request / (1.0 + DRAIN_ALLOWANCE)
