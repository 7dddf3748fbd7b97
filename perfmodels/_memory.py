"""HBM capacity: weights per GPU, KV-cache bytes, and the largest decode batch that fits.

KV-cache bytes per token = 2 (K and V) x layers x kv_heads x head_dim x bytes per
element (Splitwise Sec. IV-C); with tensor parallelism each GPU holds 1/tp of the
weights and of the KV cache.
"""

from __future__ import annotations

import numpy as np

from .errors import PerfModelError

GB = 1e9
# Share of HBM the serving engine may use for weights + KV cache; the rest is
# activations, CUDA context and fragmentation (vLLM's gpu_memory_utilization default).
HBM_UTILIZATION = 0.9


def weight_bytes_per_gpu(llm, tp) -> np.ndarray:
    """Weight bytes each GPU of a TP group holds. Non-increasing in `tp`."""
    return llm.weight_bytes / np.asarray(tp, dtype=float)


def kv_cache_bytes(llm, tokens) -> np.ndarray:
    """KV-cache bytes for `tokens` tokens of context (whole replica, all GPUs)."""
    return llm.kv_bytes_per_token * np.asarray(tokens, dtype=float)


def kv_capacity_tokens(llm, gpu, tp, hbm_utilization: float = HBM_UTILIZATION) -> np.ndarray:
    """Tokens of KV cache that fit in a TP group's HBM after the weights (>= 0)."""
    tp = np.asarray(tp, dtype=float)
    usable = tp * gpu.hbm_capacity_gb * GB * hbm_utilization
    return np.maximum(usable - llm.weight_bytes, 0.0) / llm.kv_bytes_per_token


def colocated_kv_capacity_tokens(llm, gpu, tp, prefill_tokens, weight_copies=1,
                                 hbm_utilization: float = HBM_UTILIZATION) -> np.ndarray:
    """KV tokens left to the decode process of a TP group whose GPUs also run a prefill
    process (Splitwiser, MPS): HBM after `weight_copies` copies of the weights (1: shared
    between the processes through CUDA IPC; 2: each process loads its own) and after the
    prefill process's working set of `prefill_tokens` KV tokens (its batch cap or chunk
    budget). >= 0."""
    tp = np.asarray(tp, dtype=float)
    usable = tp * gpu.hbm_capacity_gb * GB * hbm_utilization
    free = usable - np.asarray(weight_copies, dtype=float) * llm.weight_bytes
    return np.maximum(free / llm.kv_bytes_per_token - np.asarray(prefill_tokens, dtype=float), 0.0)


def max_decode_batch(llm, gpu, tp, context_tokens, hbm_utilization: float = HBM_UTILIZATION) -> np.ndarray:
    """Largest number of requests of `context_tokens` each whose KV cache fits (int array)."""
    ctx = np.asarray(context_tokens, dtype=float)
    if np.any(ctx <= 0):
        raise PerfModelError("context_tokens must be positive")
    return np.floor(kv_capacity_tokens(llm, gpu, tp, hbm_utilization) / ctx).astype(np.int64)


def fits_in_memory(llm, gpu, tp, hbm_utilization: float = HBM_UTILIZATION) -> np.ndarray:
    """Whether the weights fit on a TP group with room for at least one 2048-token request."""
    return kv_capacity_tokens(llm, gpu, tp, hbm_utilization) >= 2048
