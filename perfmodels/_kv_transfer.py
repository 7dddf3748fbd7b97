"""KV-cache transfer from a prompt machine to a token machine (alpha-beta model).

Each GPU of the prompt replica sends its 1/tp shard of the cache over its own NIC, so
the wire rate is tp x the per-GPU NIC bandwidth of the slower end (ThunderServe:
T = alpha + bytes / beta). Two modes (Splitwise Sec. IV-C):

- serialized: the whole cache moves after the prefill; all of it is visible latency.
- layer-wise: layer i moves while layer i+1 computes; only the last layer, the setup
  and any excess of transfer over compute time are visible.

Splitwise picks serialized below a prompt-size threshold (512 tokens on H100), where
per-layer transfers cost more than they hide. Quantized transfer (ThunderServe's 4-bit
KV compression) scales the bytes by bits / 16.
"""

from __future__ import annotations

import numpy as np

from .errors import PerfModelError

LAYERWISE_MIN_PROMPT_TOKENS = 512
KV_ELEMENT_BITS = 16


def kv_wire_bytes_per_s(src_machine, dst_machine, tp) -> np.ndarray:
    """Transfer rate (bytes/s) between two machines: tp GPU NICs of the slower end."""
    gbps = min(src_machine.nic_bandwidth_gbps_per_gpu, dst_machine.nic_bandwidth_gbps_per_gpu)
    return np.asarray(tp, dtype=float) * gbps * 1e9 / 8.0


def kv_transfer_time_s(
    llm,
    prompt_tokens,
    wire_bytes_per_s,
    setup_s,
    *,
    prefill_time_s=None,
    mode: str = "auto",
    bits: int = KV_ELEMENT_BITS,
) -> np.ndarray:
    """Visible KV-transfer time (s): the delay the transfer adds before the second token.

    Parameters
    ----------
    prompt_tokens : array_like, tokens whose KV cache moves.
    wire_bytes_per_s : array_like, from `kv_wire_bytes_per_s`.
    setup_s : fixed cost per transfer (alpha), fitted per GPU in the calibration.
    prefill_time_s : array_like, the prefill the layer-wise transfer overlaps with
        (required for "layerwise" and "auto").
    mode : "serialized" | "layerwise" | "auto" (layer-wise from 512 prompt tokens).
    bits : bits per KV element on the wire (16 = uncompressed, 4 = ThunderServe's).
    """
    if mode not in ("serialized", "layerwise", "auto"):
        raise PerfModelError("kv transfer mode must be 'serialized', 'layerwise' or 'auto'")
    if not 1 <= bits <= KV_ELEMENT_BITS:
        raise PerfModelError("kv transfer bits must be between 1 and 16")
    s = np.asarray(prompt_tokens, dtype=float)
    total_s = llm.kv_bytes_per_token * s * (bits / KV_ELEMENT_BITS) / np.asarray(wire_bytes_per_s, dtype=float)
    serialized = setup_s + total_s
    if mode == "serialized":
        return serialized
    if prefill_time_s is None:
        raise PerfModelError("layer-wise KV transfer needs the prefill time it overlaps with")
    last_layer_s = total_s / llm.n_layers
    excess_s = np.maximum(total_s - last_layer_s - np.asarray(prefill_time_s, dtype=float), 0.0)
    layerwise = setup_s + last_layer_s + excess_s
    if mode == "layerwise":
        return layerwise
    return np.where(s < LAYERWISE_MIN_PROMPT_TOKENS, serialized, layerwise)
