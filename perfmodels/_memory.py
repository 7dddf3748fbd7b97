"""HBM capacity: weights per GPU, KV-cache bytes, and the largest decode batch that fits.

KV-cache bytes per token = 2 (K and V) x layers x kv_heads x head_dim x bytes per
element (Splitwise Sec. IV-C); with tensor parallelism each GPU holds 1/tp of the
weights and of the KV cache.
"""

from __future__ import annotations

import numbers

import numpy as np

from hardware_catalog import GPU, LLM

from ._model import check_tp_degrees, float_array
from .errors import PerfModelError

GB = 1e9
# Share of HBM the serving engine may use for weights + KV cache; the rest is
# activations, CUDA context and fragmentation (vLLM's gpu_memory_utilization default).
HBM_UTILIZATION = 0.9


def weight_bytes_per_gpu(llm, tp) -> np.ndarray:
    """Weight bytes each GPU of a TP group holds. Non-increasing in `tp`."""
    return _llm(llm).weight_bytes / _tp(tp)


def kv_cache_bytes(llm, tokens) -> np.ndarray:
    """KV-cache bytes for `tokens` tokens of context (whole replica, all GPUs)."""
    return _llm(llm).kv_bytes_per_token * _tokens(tokens, "tokens", low=0.0)


def kv_capacity_tokens(llm, gpu, tp, hbm_utilization: float = HBM_UTILIZATION) -> np.ndarray:
    """Tokens of KV cache that fit in a TP group's HBM after the weights (>= 0)."""
    llm, usable = _llm(llm), _usable_hbm_bytes(gpu, tp, hbm_utilization)
    return np.maximum(usable - llm.weight_bytes, 0.0) / llm.kv_bytes_per_token


def colocated_kv_capacity_tokens(llm, gpu, tp, prefill_tokens, weight_copies=1,
                                 hbm_utilization: float = HBM_UTILIZATION) -> np.ndarray:
    """KV tokens left to the decode process of a TP group whose GPUs also run a prefill
    process (Splitwiser, MPS): HBM after `weight_copies` copies of the weights (1: shared
    between the processes through CUDA IPC; 2: each process loads its own) and after the
    prefill process's working set of `prefill_tokens` KV tokens (its batch cap or chunk
    budget). >= 0."""
    llm, usable = _llm(llm), _usable_hbm_bytes(gpu, tp, hbm_utilization)
    free = usable - _tokens(weight_copies, "weight_copies", low=1.0) * llm.weight_bytes
    return np.maximum(free / llm.kv_bytes_per_token - _tokens(prefill_tokens, "prefill_tokens", low=0.0), 0.0)


def max_decode_batch(llm, gpu, tp, context_tokens, hbm_utilization: float = HBM_UTILIZATION) -> np.ndarray:
    """Largest number of requests of `context_tokens` each whose KV cache fits (int array)."""
    ctx = _tokens(context_tokens, "context_tokens", low=0.0)
    if np.any(ctx <= 0):
        raise PerfModelError(f"context_tokens must be positive (got {np.min(ctx):g})")
    return np.floor(kv_capacity_tokens(llm, gpu, tp, hbm_utilization) / ctx).astype(np.int64)


def fits_in_memory(llm, gpu, tp, hbm_utilization: float = HBM_UTILIZATION) -> np.ndarray:
    """Whether the weights fit on a TP group with room for at least one 2048-token request."""
    return kv_capacity_tokens(llm, gpu, tp, hbm_utilization) >= 2048


def _llm(llm) -> LLM:
    """The catalog LLM; a name is refused rather than looked up in a catalog that may not be the caller's."""
    if isinstance(llm, LLM):
        return llm
    raise PerfModelError(f"llm must be a catalog LLM, got {llm!r:.60}; get one with LatencyModel().llm(name) or "
                         f"load_catalog().model(name)")


def _usable_hbm_bytes(gpu, tp, hbm_utilization) -> np.ndarray:
    """HBM bytes a TP group of `gpu` may fill with weights and KV cache."""
    if not isinstance(gpu, GPU):   # a name was an AttributeError ('str' has no 'hbm_capacity_gb')
        raise PerfModelError(f"gpu must be a catalog GPU, got {gpu!r:.60}; get one with LatencyModel().gpu(name) "
                             f"or load_catalog().gpu(name)")
    if not (isinstance(hbm_utilization, numbers.Real) and not isinstance(hbm_utilization, bool)
            and 0 < hbm_utilization <= 1):   # 2.0 doubled the HBM
        raise PerfModelError(f"hbm_utilization must be a fraction in (0, 1] of the HBM, got {hbm_utilization!r:.60}; "
                             f"the default is {HBM_UTILIZATION}")
    return _tp(tp) * gpu.hbm_capacity_gb * GB * float(hbm_utilization)


def _tp(tp) -> np.ndarray:
    return check_tp_degrees(_tokens(tp, "tp", low=1.0), "tp")


def _tokens(values, name: str, low: float) -> np.ndarray:
    """`values` as a float array of finite numbers >= `low` (a string or a negative count is refused)."""
    arr = float_array(values, name)
    if np.any(~np.isfinite(arr)) or np.any(arr < low):
        raise PerfModelError(f"{name} must be finite and >= {low:g} (got {np.min(arr):g})")
    return arr
