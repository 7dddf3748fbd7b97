"""Requests no design can serve: their KV cache does not fit on any of its machines.

A request holds `s + n` KV tokens where it decodes (SEMANTICS.md). The engines admit a
request into an empty running set even when it does not fit, so nothing deadlocks;
a cluster that cannot hold a request's KV cache at all would then look as if it served
it. Such requests are counted here, the design is marked as failing ("kv_capacity"),
and the search refuses a family whose largest machine cannot hold them.
"""

from __future__ import annotations

import numpy as np

from perfmodels import kv_capacity_tokens, machine_tp_degrees

__all__ = ["KV_CAPACITY_CHECK", "unservable_requests", "unservable_reason"]

KV_CAPACITY_CHECK = "kv_capacity"


def unservable_requests(inputs) -> np.ndarray:
    """(d,) number of requests whose `s + n` KV tokens exceed every pool's per-replica budget."""
    need = (inputs.prompt_tokens + inputs.output_tokens).astype(float)
    split = inputs.n_machines[:, 1] > 0
    largest = np.where(split, np.maximum(inputs.kv_cap_tokens[:, 0], inputs.kv_cap_tokens[:, 1]),
                       inputs.kv_cap_tokens[:, 0])
    order = np.sort(need)
    return len(order) - np.searchsorted(order, largest, side="right")


def unservable_reason(prompt_tokens, output_tokens, llm, perf, machines) -> str | None:
    """Why requests of this trace fit on none of `machines` (a one-line reason), or None."""
    need = np.asarray(prompt_tokens, dtype=float) + np.asarray(output_tokens, dtype=float)
    if need.size == 0:
        return None
    cat = perf.catalog
    best_tokens, best_name = 0.0, None
    for name in dict.fromkeys(machines):
        m = cat.machine(name)
        # a request's KV cache lives in one replica: the widest TP group the machine holds
        tokens = float(kv_capacity_tokens(llm, cat.gpu(m.gpu), machine_tp_degrees(m.gpus_per_machine)[0]))
        if tokens > best_tokens or best_name is None:
            best_tokens, best_name = tokens, name
    too_big = need > best_tokens
    if not too_big.any():
        return None
    worst = int(np.argmax(need))
    kv_gb = need[worst] * llm.kv_bytes_per_token / 1e9
    return (f"{int(too_big.sum()):,} request(s) cannot be served: the largest needs {int(need[worst]):,} "
            f"tokens of KV cache ({kv_gb:,.0f} GB of {llm.name}), a {best_name} holds at most "
            f"{int(best_tokens):,} tokens after the weights; drop or truncate those requests, or use a "
            f"model with a smaller KV cache")
