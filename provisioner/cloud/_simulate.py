"""A plan through either engine: per-server latency vectors and KV budgets, the plan's
routing, per-pair KV links (SEMANTICS.md, "Cloud plans"); SLO attainment and the Table VI
percentile checks."""

from __future__ import annotations

import numpy as np

from perfmodels import LAYERWISE_MIN_PROMPT_TOKENS

from ..designs import DEFAULT_PROMPT_BATCH_CAP_TOKENS
from ..errors import ProvisionerError
from ..schedulers import DEFAULT_SCHEDULER, MIGRATING_SCHEDULERS, scheduler_codes
from ..sim import (ENGINES, SCHEDULER_STATS, ServerPlan, SimInputs, plan_holds, refuse_on_demand_in_fluid,
                   request_latencies, run_des)
from ..slo import METRICS, PERCENTILES, row_percentiles
from ._steady import steady_state_load


def server_plan(ctx, plan, routing=None) -> tuple[ServerPlan, int, int]:
    """(ServerPlan, prefill-or-mixed servers, decode servers) of a plan."""
    ph = ctx.physics
    if all(p == "both" for _, p in plan):
        groups = [st for st, _ in plan]
        share = ctx.scorer.both_shares(groups)
        sp = ServerPlan(coef=np.stack([ph.group(g).coef for g in groups]),
                        kv_cap_tokens=np.array([ph.group(g).kv_cap_tokens for g in groups]),
                        prefill_share=share, decode_share=np.zeros((len(groups), 0)),
                        kv_setup_s=np.zeros((len(groups), 0)), kv_s_per_token=np.zeros((len(groups), 0)),
                        migration_link=migration_links(ctx, groups, groups))
        return sp, len(groups), 0
    from ._plan import plan_routing
    pre, dec, r = routing or plan_routing(ctx, plan)
    groups = pre + dec
    setup = np.zeros((len(pre), len(dec)))
    per_token = np.zeros_like(setup)
    for i, a in enumerate(pre):
        for j, b in enumerate(dec):
            setup[i, j], per_token[i, j] = ph.kv_seconds(a, b, ctx.kv_bits)
    sp = ServerPlan(coef=np.stack([ph.group(g).coef for g in groups]),
                    kv_cap_tokens=np.array([ph.group(g).kv_cap_tokens for g in groups]),
                    prefill_share=r.prefill_share, decode_share=r.decode_share, kv_setup_s=setup,
                    kv_s_per_token=per_token, kv_link_s_per_token=shared_links(ctx, pre, dec),
                    migration_link=migration_links(ctx, groups, dec))
    return sp, len(pre), len(dec)


def migration_links(ctx, groups, trading) -> np.ndarray | None:
    """(n, n, 2) live migration's (s per token, setup s) from server a to server b of
    `groups` (n servers), for the pairs of the `trading` groups (a split plan's decode
    replicas; a non-split plan's all): the KV-transfer model over the pair's own links, at
    `kv_bits` (`Physics.kv_seconds`); None unless `ctx.scheduler` migrates."""
    if ctx.scheduler not in MIGRATING_SCHEDULERS:
        return None
    out = np.zeros((len(groups), len(groups), 2))
    first = len(groups) - len(trading)
    for a, src in enumerate(trading, start=first):
        for b, dst in enumerate(trading, start=first):
            if a != b:
                out[a, b] = ctx.physics.kv_seconds(src, dst, ctx.kv_bits)[::-1]
    return out


def shared_links(ctx, pre, dec) -> np.ndarray:
    """(p, d, L) seconds per prompt token a KV transfer i -> j holds each shared link it
    crosses (a directed node pair's link, a node's NIC: `Physics.links`): its share of the
    request's KV bytes (at `kv_bits`) over the link's bandwidth. The engines queue transfers
    on these links first-come first-served (SEMANTICS.md, "Cloud plans"): pairs between the
    same two nodes share one link, and pairs leaving (entering) a node share its NIC."""
    ph = ctx.physics
    bytes_per_token = ph.llm.kv_bytes_per_token * ctx.kv_bits / 16.0
    traffic = [[ph.link_shares(ph.kv_traffic(a, b)) for b in dec] for a in pre]
    links = sorted({key for row in traffic for pair in row for key in pair})
    out = np.zeros((len(pre), len(dec), len(links)))
    for i, row in enumerate(traffic):
        for j, pair in enumerate(row):
            for key, share in pair.items():
                out[i, j, links.index(key)] = share * bytes_per_token / ph.capacity_bytes_per_s(key)
    return out


def simulate_plan(ctx, plan, trace, routing=None, engine="des", chunk_tokens=0) -> dict:
    """SLO attainment per metric (share within the p99 limit), the nine percentile checks,
    and the achieved throughput of `plan` on `trace`, by `engine` ("des" or "fluid").

    chunk_tokens : chunked-prefill budget (prompt tokens per iteration, 0: whole prompts) of
        a non-split plan's replicas. A split plan ignores it: its prefill replicas batch no
        decodes, so there is no decode for a long prompt to stall (SEMANTICS.md, "Cloud plans")."""
    if engine not in ENGINES:
        raise ProvisionerError(f"unknown engine '{engine}': use one of {', '.join(ENGINES)}")
    sp, n_p, n_d = server_plan(ctx, plan, routing)
    if sp.prefill_share.sum() <= 0:   # the routing found no rate worth routing: none served
        return nothing_served(trace, unservable=kv_misfits(ctx, plan, trace)[0])
    # the router rejects at arrival a request no routed replica holds: it is not simulated
    unserved = unservable(sp, trace.prompt_tokens, trace.output_tokens)
    if unserved.all():
        return nothing_served(trace, unservable=len(trace))
    inputs = plan_inputs(ctx, sp, n_p, n_d, trace, chunk_tokens if n_d == 0 else 0, keep=~unserved)
    if engine == "fluid":
        refuse_on_demand_in_fluid(inputs)   # as for the families (`plan_cloud` refuses it first, naming its flag)
        from ..sim import run_fluid
        out = run_fluid(inputs)
    else:
        out = run_des(inputs)
    scores = plan_scores(ctx, trace, inputs, out, unserved)
    if out.scheduler_stats is not None:   # an on-demand scheduler's counts
        scores["scheduler_stats"] = {k: float(v) for k, v in zip(SCHEDULER_STATS, out.scheduler_stats[0])}
    return scores


def plan_load(ctx, plan, rate, routing=None) -> dict:
    """`steady_state_load` of `plan` (routed by `routing`) serving the plan's mix (`ctx.trace`,
    the requests it was scored on) at `rate` req/s: whether its servers keep up with them
    however long the arrivals go on. Of the mix, not of a probe's window: a replayed file's
    window at a low rate holds only its first rows (at 0.067 req/s, none of the 60k-token
    outputs of a 400-s file), and the load is linear in the rate."""
    sp, n_p, _ = server_plan(ctx, plan, routing)
    mix = ctx.trace
    return steady_state_load(sp, n_p, mix.prompt_tokens, mix.output_tokens, len(mix) / rate if rate > 0 else 0.0)


def no_attainment() -> dict:
    """Attainment per metric (and "all") of a plan that serves no request."""
    return {m: 0.0 for m in (*METRICS, "all")}


def nothing_served(trace, unservable: int = 0) -> dict:
    """`simulate_plan`'s result for a plan that serves no request of `trace` (`unservable` of
    them fit in none of its replicas)."""
    return {"slo_attainment": no_attainment(), "slo": {"met": False}, "served_rps": 0.0, "requests": len(trace),
            "unservable_requests": int(unservable)}


def plan_inputs(ctx, sp: ServerPlan, n_p: int, n_d: int, trace, chunk_tokens=0, keep=None) -> SimInputs:
    """One design: the plan's servers (`servers`); the per-pool arrays are placeholders
    (the first and last server) that the engines replace by the plan's own. The chunk
    budget is the design's, so every server of the plan applies the engines' chunking rule.
    keep : (r,) the requests of `trace` to simulate (None: all)."""
    keep = slice(None) if keep is None else np.asarray(keep, dtype=bool)
    return SimInputs(
        n_machines=np.array([[n_p, n_d]], dtype=np.int64), coef=np.stack([sp.coef[:1], sp.coef[-1:]], axis=1),
        kv_cap_tokens=np.array([[sp.kv_cap_tokens[0], sp.kv_cap_tokens[-1]]]),
        batch_cap_tokens=np.array([float(DEFAULT_PROMPT_BATCH_CAP_TOKENS)]),
        chunk_tokens=np.array([float(chunk_tokens)]),
        allow_borrow=np.zeros(1, dtype=bool), mps_share=np.zeros(1), kv_s_per_token=np.zeros(1),
        kv_setup_s=np.zeros(1), n_layers=int(ctx.llm.n_layers), layerwise_min_tokens=float(LAYERWISE_MIN_PROMPT_TOKENS),
        overload_tokens=np.array([np.inf]), arrival_s=np.ascontiguousarray(np.asarray(trace.arrival_s)[keep], dtype=float),
        prompt_tokens=np.ascontiguousarray(np.asarray(trace.prompt_tokens)[keep], dtype=np.int64),
        output_tokens=np.ascontiguousarray(np.asarray(trace.output_tokens)[keep], dtype=np.int64), servers=(sp,),
        scheduler=None if ctx.scheduler == DEFAULT_SCHEDULER else scheduler_codes([ctx.scheduler]))


def unservable(sp: ServerPlan, prompt_tokens, output_tokens) -> np.ndarray:
    """(r,) the requests no server the plan routes to holds (`plan_holds`: the prompt's KV
    at a routed prefill server and the whole request's at one of its routed decode servers;
    a non-split server holds the whole request). The router rejects such a request at
    arrival (SEMANTICS.md, "Cloud plans"): on the GPUs it would fail, so it counts as
    missing every deadline, and it is not simulated."""
    r = len(prompt_tokens)
    if r == 0:
        return np.zeros(0, dtype=bool)
    prefill_ok, _ = plan_holds(sp, prompt_tokens, output_tokens)   # (p, r)
    return ~(prefill_ok & (np.asarray(sp.prefill_share) > 0)[:, None]).any(axis=0)


def kv_misfits(ctx, plan, trace) -> tuple[int, int, str]:
    """(requests of `trace` that fit in no group of `plan`, routed or not; the largest
    request's KV tokens; the plan's largest KV budgets in words: the decode side's, which
    holds the whole request, and in a split plan the prefill side's, which holds its
    prompt), without simulating."""
    caps = {ph: [ctx.physics.group(st).kv_cap_tokens for st, p in plan if p == ph]
            for ph in ("prefill", "decode", "both")}
    front, back = (caps["both"], None) if caps["both"] else (caps["prefill"], caps["decode"])
    misfit = fits_nowhere(trace.prompt_tokens, trace.output_tokens, front, back)
    need = np.asarray(trace.prompt_tokens) + np.asarray(trace.output_tokens)
    if back is None:
        budgets = f"the largest replica {int(max(front, default=0.0)):,}"
    else:
        budgets = (f"the largest decode replica {int(max(back, default=0.0)):,}, the largest prefill replica "
                   f"{int(max(front, default=0.0)):,} for the prompt")
    return int(misfit.sum()), int(need.max(initial=0)), budgets


def fits_nowhere(prompt_tokens, output_tokens, front_kv_tokens, back_kv_tokens=None) -> np.ndarray:
    """(r,) the requests that fit in none of the KV budgets: a prompt's `s` tokens in no
    prefill budget (`front`) and `s + n` in no decode budget (`back`); a non-split plan
    (back None) holds `s + n` in its front budgets."""
    s = np.asarray(prompt_tokens, dtype=float)
    need = s + np.asarray(output_tokens, dtype=float)
    front = float(np.max(front_kv_tokens, initial=0.0))
    if back_kv_tokens is None:
        return need > front
    return (s > front) | (need > float(np.max(back_kv_tokens, initial=0.0)))


def plan_scores(ctx, trace, inputs, out, unserved) -> dict:
    """Attainment, the Table VI checks and the served rate of one engine run of a plan on
    the requests of `trace` it holds. The others (`unserved`, rejected at arrival) count
    as misses in the attainment and make the checks fail; the percentiles are of the
    requests served."""
    r, served = len(trace), ~unserved
    lat = request_latencies(out, inputs.arrival_s, inputs.output_tokens)
    from ._plan import reference_latencies
    ref = reference_latencies(ctx.ref_physics, trace.prompt_tokens, trace.output_tokens)
    limits = ctx.slo.limits()
    attain, checks, latency, ok_all = {}, {}, {}, served.copy()
    ok_served = ok_all[served]
    for k, m in enumerate(METRICS):
        has_all = np.isfinite(ref[k])   # every request but TBT's one-token ones
        has = has_all[served]
        slow = lat[k][0][has] / ref[k][served][has]
        within = slow <= limits[k, -1]
        attain[m] = float(within.sum() / has_all.sum()) if has_all.any() else 1.0
        ok_served[has] &= within
        pct = row_percentiles(slow[None, :])[0]
        checks[m] = {f"p{p}": float(v) for p, v in zip(PERCENTILES, pct)}
        seconds = row_percentiles(lat[k][0][has][None, :])[0]   # the fidelity comparison's unit
        latency[m] = {f"p{p}": float(v) for p, v in zip(PERCENTILES, seconds)}
    ok_all[served] = ok_served
    attain["all"] = float(ok_all.mean())
    met = not unserved.any() and all(checks[m][f"p{p}"] <= limits[k, j] for k, m in enumerate(METRICS)
                                     for j, p in enumerate(PERCENTILES))
    kept = len(inputs.arrival_s)
    span = float(np.nanmax(out.finish_s[0]) - inputs.arrival_s[0]) if kept else 0.0
    return {"slo_attainment": attain, "slo": {"met": bool(met), "slowdown": checks}, "latency_s": latency,
            "served_rps": kept / span if span > 0 else 0.0, "requests": r, "unservable_requests": int(unserved.sum())}
