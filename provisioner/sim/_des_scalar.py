"""The discrete-event engine's latency formulas in Python scalars (one call per iteration or
transfer): the same formulas and operation order as perfmodels' vector ones. The fluid
kernel compiles these same functions (`perfmodels.scalar_iteration_s`, `kv_visible_s`,
`kv_link_fifo_s`): one rule for both engines."""

from __future__ import annotations

from functools import partial

from perfmodels import scalar_iteration_s

__all__ = ["iteration_s", "iteration_fn", "kv_visible_s", "kv_link_fifo_s"]


def iteration_s(c, prefill_tokens, prefill_sq_tokens, prefill_seqs, decode_batch, decode_context_tokens):
    """`perfmodels.scalar_iteration_s`: the iteration time both engines run (the fluid
    kernel compiles the same function).

    `c` is a sequence of the N_COEF coefficients of one pool (layout `COEF_NAMES`),
    followed for a measured-profile model by its table (looked up first).
    """
    return scalar_iteration_s(c, prefill_tokens, prefill_sq_tokens, prefill_seqs, decode_batch, decode_context_tokens)


def iteration_fn(c):
    """`iteration_s` with the coefficients `c` bound (a machine keeps one for its pool)."""
    return partial(scalar_iteration_s, c)


def kv_visible_s(s, prefill_s, kv_s_per_token, kv_setup_s, n_layers, layerwise_min_tokens):
    """`perfmodels.kv_transfer_time_s(mode="auto")` for one request: the part of its KV
    transfer not hidden behind a prefill iteration of `prefill_s` seconds. Plain scalars:
    the fluid kernel compiles this same function (`register_jitable`)."""
    total = kv_s_per_token * s
    if s < layerwise_min_tokens:
        return kv_setup_s + total
    last = total / n_layers
    return kv_setup_s + last + max(total - last - prefill_s, 0.0)


def kv_link_fifo_s(links, row0, stride, col, link_free, s, e, prefill_s, setup_s, visible_s,
                   layerwise_min_tokens):
    """The visible part of a KV transfer that queues on shared links (SEMANTICS.md "Cloud
    plans"). `links[row0 + k * stride, col]` is the seconds per prompt token it holds link k
    (0: it does not cross it). On each link it crosses it starts when the link is free and
    its first layer is ready (the prefill's start when sent layer by layer, its end
    otherwise), holds the link for its bytes, and moves the link's free time (`link_free`,
    updated); it is visible from the prefill's end `e` to the last link's end plus the
    setup, never less than `visible_s` (the transfer alone). Plain scalars: the fluid
    kernel compiles this same function (`register_jitable`)."""
    ready = e - prefill_s if s >= layerwise_min_tokens else e
    last = e
    for k in range(len(link_free)):
        c = links[row0 + k * stride, col]
        if c > 0.0:
            start = link_free[k] if link_free[k] > ready else ready
            link_free[k] = start + c * s
            last = link_free[k] if link_free[k] > last else last
    queued = setup_s + last - e
    return queued if queued > visible_s else visible_s
