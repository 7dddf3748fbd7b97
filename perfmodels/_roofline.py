"""Roofline time of one forward pass (an "iteration") of a tensor-parallel LLM replica.

One iteration may carry prefill work (whole prompts), decode work (one token for each
running request), or both (mixed continuous batching). Its time is

    max(compute_s, memory_s) + allreduce_s + overhead_s

- compute_s: GEMM FLOPs (2 x matmul params x tokens, plus the LM head for each
  sequence's last token) and attention FLOPs (causal prefill: 2 L h s^2 per prompt;
  decode: 4 L h c per request with context c), split over the TP group, at a fitted
  fraction of the dense fp16 peak, slowed by the core clock under a power cap.
- memory_s: weights read once per pass plus the KV cache read (decode context) and
  written (new tokens), at a fitted fraction of HBM bandwidth. Not slowed by a cap.
- allreduce_s: two ring all-reduces of the activations per layer (after attention and
  after the FFN) for TP > 1: 2(tp-1) latency steps plus 2(tp-1)/tp of the message at a
  fitted fraction of the link bandwidth; tokens beyond a knee move slower.
- overhead_s: per-layer (kernel launches) and per-sequence (host scheduling, sampling)
  fixed costs. The profiles show decode at small batch is mostly this term.

Everything broadcasts over numpy arrays: hardware parameters, TP degree, power cap
and batch contents may all be arrays of the same (or broadcastable) shape.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


ALLREDUCES_PER_LAYER = 2


@dataclass(frozen=True)
class HardwareArrays:
    """Struct of arrays describing TP groups: one entry per replica (or broadcastable).

    Datasheet quantities in SI units; fitted constants from the calibration.
    """

    peak_flops: np.ndarray            # FLOP/s per GPU, dense fp16
    hbm_bytes_per_s: np.ndarray       # per GPU
    hbm_capacity_bytes: np.ndarray    # per GPU
    link_bytes_per_s: np.ndarray      # intra-machine, per GPU per direction
    tp: np.ndarray                    # tensor-parallel degree
    clock: np.ndarray                 # core clock fraction under the power cap
    compute_efficiency: np.ndarray
    memory_efficiency: np.ndarray
    allreduce_step_s: np.ndarray
    allreduce_link_efficiency: np.ndarray
    allreduce_knee_tokens: np.ndarray
    allreduce_slowdown: np.ndarray
    prefill_layer_overhead_s: np.ndarray
    decode_layer_overhead_s: np.ndarray
    prefill_seq_overhead_s: np.ndarray
    decode_seq_overhead_s: np.ndarray


@dataclass(frozen=True)
class ModelShape:
    """The architecture numbers the roofline needs (from a catalog LLM)."""

    n_layers: int
    hidden_size: int
    attn_width: int            # n_heads * head_dim
    vocab_size: int
    matmul_params: float
    weight_bytes: float
    kv_bytes_per_token: float
    activation_bytes: float    # bytes per activation element (= bytes per parameter)

    @classmethod
    def of(cls, llm) -> "ModelShape":
        return cls(
            n_layers=llm.n_layers,
            hidden_size=llm.hidden_size,
            attn_width=llm.n_heads * llm.head_dim,
            vocab_size=llm.vocab_size,
            matmul_params=float(llm.matmul_params),
            weight_bytes=float(llm.weight_bytes),
            kv_bytes_per_token=float(llm.kv_bytes_per_token),
            activation_bytes=float(llm.bytes_per_param),
        )


# Layout of a coefficient vector: the roofline reduced to per-unit costs (seconds per
# token, per sequence, ...) so a simulator loop can evaluate an iteration with a few
# multiply-adds. `time_from_coefficients` is the one formula that uses them.
COEF_NAMES = (
    "s_per_token_gemm", "s_per_seq_lm_head", "s_per_sq_token_attn", "s_per_ctx_token_attn",
    "s_weights_read", "s_per_kv_token_rw", "s_allreduce_fixed", "s_per_token_allreduce",
    "allreduce_knee_tokens", "s_per_token_allreduce_beyond_knee",
    "s_prefill_layer_overhead", "s_decode_layer_overhead", "s_per_prefill_seq", "s_per_decode_seq",
)
N_COEF = len(COEF_NAMES)


def roofline_coefficients(m: ModelShape, hw: HardwareArrays) -> np.ndarray:
    """Per-unit costs of one forward pass, shape broadcast(hw) + (N_COEF,)."""
    flop_s = hw.tp * hw.peak_flops * hw.compute_efficiency * hw.clock
    byte_s = hw.tp * hw.hbm_bytes_per_s * hw.memory_efficiency
    steps = 2.0 * (hw.tp - 1.0)
    per_layer = ALLREDUCES_PER_LAYER * m.n_layers
    ar_token = per_layer * m.hidden_size * m.activation_bytes * steps / hw.tp / (
        hw.link_bytes_per_s * hw.allreduce_link_efficiency)
    cols = [
        2.0 * m.matmul_params / flop_s,
        2.0 * m.vocab_size * m.hidden_size / flop_s,
        2.0 * m.n_layers * m.attn_width / flop_s,
        4.0 * m.n_layers * m.attn_width / flop_s,
        m.weight_bytes / byte_s,
        m.kv_bytes_per_token / byte_s,
        per_layer * steps * hw.allreduce_step_s,
        ar_token,
        hw.allreduce_knee_tokens,
        ar_token * hw.allreduce_slowdown,
        m.n_layers * hw.prefill_layer_overhead_s,
        m.n_layers * hw.decode_layer_overhead_s,
        hw.prefill_seq_overhead_s,
        hw.decode_seq_overhead_s,
    ]
    return np.stack(np.broadcast_arrays(*[np.asarray(c, dtype=float) for c in cols]), axis=-1)


def time_from_coefficients(coef, prefill_tokens=0.0, prefill_sq_tokens=0.0, prefill_seqs=0.0,
                           decode_batch=0.0, decode_context_tokens=0.0) -> np.ndarray:
    """Time (s) of one forward pass from `roofline_coefficients` (last axis = coefficients)."""
    c = np.moveaxis(np.asarray(coef, dtype=float), -1, 0)
    n_p = np.asarray(prefill_tokens, dtype=float)
    seqs = np.asarray(prefill_seqs, dtype=float)
    b = np.asarray(decode_batch, dtype=float)
    ctx = np.asarray(decode_context_tokens, dtype=float)
    tokens = n_p + b
    compute = c[0] * tokens + c[1] * (seqs + b) + c[2] * np.asarray(prefill_sq_tokens, dtype=float) + c[3] * ctx
    memory = c[4] + c[5] * (ctx + tokens)
    allreduce = c[6] + c[7] * np.minimum(tokens, c[8]) + c[9] * np.maximum(tokens - c[8], 0.0)
    overhead = np.maximum(np.where(seqs > 0, c[10], 0.0), np.where(b > 0, c[11], 0.0)) + c[12] * seqs + c[13] * b
    return np.maximum(compute, memory) + allreduce + overhead


def _per_token_args(coef, tokens):
    """(coefficients on the leading axis, each shaped to broadcast over `tokens`; tokens):
    an array of coefficient vectors (..., N_COEF) against an array of token counts gives
    results of shape (...) + tokens.shape."""
    t = np.asarray(tokens, dtype=float)
    c = np.asarray(coef, dtype=float)
    c = np.moveaxis(c, -1, 0).reshape(c.shape[-1:] + c.shape[:-1] + (1,) * t.ndim)
    return c, t


def prompt_compute_s(coef, prompt_tokens) -> np.ndarray:
    """Seconds of compute one prompt adds to the prefill pass it runs in: its GEMMs, LM
    head, causal attention (s^2), the all-reduce of its tokens and its per-sequence
    overhead. Not the weights' read nor a pass's fixed costs, which a batch shares. The
    all-reduce is the prompt's alone (per-token cost rising past the knee). A pass takes at
    least the sum of this over its prompts: its compute is their sum, and its all-reduce
    is convex in its tokens. Shape coef.shape[:-1] + prompt_tokens.shape."""
    c, s = _per_token_args(coef, prompt_tokens)
    allreduce = c[7] * np.minimum(s, c[8]) + c[9] * np.maximum(s - c[8], 0.0)
    return c[0] * s + c[1] + c[2] * s * s + allreduce + c[12]


def decode_token_s(coef, context_tokens) -> np.ndarray:
    """Seconds one decoding sequence at `context_tokens` of context adds to an iteration,
    at most: the larger of its compute (GEMM, LM head, attention over its context) and its
    memory traffic (its KV read and the new token's write), plus its all-reduce token and
    per-sequence overhead. It adds the one of the two that binds the iteration (a memory-
    bound step of a small batch, its KV traffic alone). Not the weights' read nor an
    iteration's fixed costs, which the batch shares. Shape coef.shape[:-1] +
    context_tokens.shape."""
    c, ctx = _per_token_args(coef, context_tokens)
    compute = c[0] + c[1] + c[3] * ctx
    memory = c[5] * (ctx + 1.0)
    return np.maximum(compute, memory) + c[7] + c[13]


def iteration_time_s(
    m: ModelShape,
    hw: HardwareArrays,
    *,
    prefill_tokens=0.0,
    prefill_sq_tokens=0.0,
    prefill_seqs=0.0,
    decode_batch=0.0,
    decode_context_tokens=0.0,
) -> np.ndarray:
    """Time (s) of one forward pass.

    Parameters
    ----------
    prefill_tokens : total prompt tokens processed in the pass.
    prefill_sq_tokens : sum over prompts of prompt_tokens**2 (causal attention term).
    prefill_seqs : number of prompts in the pass.
    decode_batch : number of requests generating one token in the pass.
    decode_context_tokens : sum over those requests of their context length (tokens).
    """
    return time_from_coefficients(roofline_coefficients(m, hw), prefill_tokens, prefill_sq_tokens,
                                  prefill_seqs, decode_batch, decode_context_tokens)
