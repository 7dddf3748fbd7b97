"""One plan search on one inventory (`search_plan`: the tabu search from its starts), the
context it scores in (`make_context`: the inventory's physics, the scored requests, the
SLOs) and a plan's routing and JSON; `_answer.plan_cloud` asks the whole question.

SLOs: Table VI's slowdown limits x `slo_scale` (default 2), each request's slowdown taken
against the same request alone on the inventory's best single node (per metric, the
fastest node type at its largest TP that holds the model): a rented inventory has no
DGX-A100 to compare with. SLO attainment (ThunderServe's metric) is the share of requests
whose slowdown is within the p99 limit, per metric; 99% on every metric is the same
test as the p99 check.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from perfmodels import TP_DEGREES

from .._validation import Interval, Real, validate_params
from ..errors import ProvisionerError
from ..schedulers import DEFAULT_SCHEDULER, ON_DEMAND_SCHEDULERS, scheduler_code
from ..slo import SLO
from ._bound import candidate_groups, upper_bound_rps
from ._physics import Physics
from ._routing import balanced_routing
from ._score import TARGET_ATTAINMENT, Scorer, Workload
from ._search import canon, initial_groups, initial_plan, node_local_plan, search_value, tabu_search, valid_plan

DEFAULT_SLO_SCALE = 2.0
SIZE_SAMPLE = 2000     # requests whose sizes the analytic score averages over
SEARCH_STEPS = 100     # tabu steps (ThunderServe's 100)


@dataclass
class Context:
    """Everything fixed while planning one question."""

    inventory: object
    llm: object
    perf: object
    trace: object            # sizes and arrivals at the asked rate
    slo: SLO
    kv_bits: int
    ref: tuple               # (ttft, tbt, e2e) per request of `trace` alone on the reference
    physics: Physics
    scorer: Scorer
    ref_physics: Physics     # whose best node is the SLO reference
    scheduler: str = DEFAULT_SCHEDULER   # how the engines simulate a plan (the search's score: least-work)


def make_context(inventory, llm, perf, trace, slo_scale=DEFAULT_SLO_SCALE, kv_bits=16, reference=None,
                 target=TARGET_ATTAINMENT, scheduler=DEFAULT_SCHEDULER, shared=None) -> Context:
    """reference : the inventory whose best node defines the SLO (default: `inventory`;
    a price list's every node type when choosing what to rent).
    target : the attainment plans are judged at (the analytic score's decode replicas let
    at most 1 - target of the requests miss a deadline).
    scheduler : the policy the engines simulate plans under (`provisioner.schedulers`;
    SEMANTICS.md, "Cloud plans under an on-demand scheduler"); the analytic score that
    ranks plans is least-work's (KV reserved per request).
    shared : a `SharedRates` the scorer takes its replicas' and pairs' values from and adds
    to: one per question that plans several inventories alike (`--goal cost`'s rentals of
    one price list); None, its own."""
    if kv_bits not in (16, 8, 4):
        raise ProvisionerError(f"kv_bits must be 16, 8 or 4 (got {kv_bits})", params=("kv_bits",))
    validate_params({"slo_scale": slo_scale}, {"slo_scale": [Interval(Real, 0, None, closed="neither")]})
    if inventory.n_gpus == 0:
        raise ProvisionerError(f"inventory {inventory.name} has no nodes to plan (every count is 0): "
                               f"use goal cost to choose what to rent", params=("goal",))
    slo = SLO().scaled(slo_scale)
    physics = Physics(inventory, llm, perf)
    ref_inv = inventory if reference is None else reference.with_counts(
        [int(t.count > 0 or bool(t.available)) for t in reference.types])
    ref_physics = physics if reference is None else Physics(ref_inv, llm, perf)
    ref = reference_latencies(ref_physics, trace.prompt_tokens, trace.output_tokens)
    limits = slo.limits()
    lim = limits[:, 0]
    k = scored_requests(len(trace))
    ttft_ref, tbt_ref, e2e_ref = (r[k] for r in ref)
    tbt_held = tbt_ref[np.isfinite(tbt_ref)]   # none when every request is one token: no TBT to keep
    w = Workload(np.asarray(trace.prompt_tokens)[k], np.asarray(trace.output_tokens)[k],
                 ttft_limit_s=lim[0] * float(ttft_ref.mean()),
                 tbt_limit_s=lim[1] * float(tbt_held.mean()) if tbt_held.size else np.inf,
                 e2e_limit_s=lim[2] * float(e2e_ref.mean()), ttft_p50_s=lim[0] * ttft_ref,
                 tbt_p99_s=np.nan_to_num(limits[1, -1] * tbt_ref, nan=np.inf), e2e_p99_s=limits[2, -1] * e2e_ref,
                 target=float(target), fit_prompt_tokens=np.asarray(trace.prompt_tokens),
                 fit_output_tokens=np.asarray(trace.output_tokens))
    return Context(inventory, llm, perf, trace, slo, kv_bits, ref, physics, Scorer(physics, w, kv_bits, shared),
                   ref_physics, check_cloud_scheduler(scheduler))


def check_cloud_scheduler(scheduler: str) -> str:
    """`scheduler` if the engines simulate cloud plans under it: least-work or an on-demand
    policy; SplitwiseSim's replay (its two-pool routing) is refused in one line."""
    scheduler_code(scheduler)   # an unknown name: one line listing the policies
    if scheduler not in (DEFAULT_SCHEDULER, *ON_DEMAND_SCHEDULERS):
        raise ProvisionerError(f"scheduler {scheduler}: SplitwiseSim's routing is modelled for the baseline and "
                               f"Splitwise families, not for cloud plans; use one of {DEFAULT_SCHEDULER}, "
                               f"{', '.join(ON_DEMAND_SCHEDULERS)}", params=("scheduler",))
    return scheduler


def scored_requests(n: int) -> np.ndarray:
    """Indices of the requests of a trace of `n` whose sizes the analytic score averages
    over: all up to SIZE_SAMPLE, else a seeded random SIZE_SAMPLE of them, in order. The
    first SIZE_SAMPLE alone made the score hinge on where a file's long rows sit: 125
    100k-token prompts after row 2,000 of 2,500 were no request of the sample, cost
    nothing on the replicas that hold them, and loosened the mean TTFT budget the short
    ones were rated on 6.5x; a plan scored 1.25 req/s that, the rows shuffled, scored
    0.56 (its prefill load at 1.25: 1.9). Not evenly spaced rows: of 2,500 those skip
    every row 2 mod 5, so a long request every 20th row from row 2 was again none."""
    if n <= SIZE_SAMPLE:
        return np.arange(n)
    return np.sort(np.random.default_rng(0).choice(n, SIZE_SAMPLE, replace=False))


def size_sample(traces, rps=None):
    """The trace a plan is scored on: the asked rate's, stretched to at least SIZE_SAMPLE
    requests. A generator's request sizes are one stream whatever the rate, so a low rate
    (or `--goal throughput`'s start) would otherwise score every plan on the first hundred
    requests' sizes, and the plan would hinge on them. A replayed file is taken once, whole:
    stretching it past its length would count its first rows twice."""
    if traces.arrival == "replay":
        return traces.source
    floor = SIZE_SAMPLE / traces.duration_s if traces.duration_s else 1.0
    return traces.at(max(float(rps or 0.0), floor))


def reference_latencies(physics, prompt_tokens, output_tokens):
    """Per request (ttft, tbt, e2e) alone on the inventory's best single node, per metric."""
    best = None
    for node, ti in enumerate(physics.node_type):
        gpus = physics.inv.types[ti].gpus
        tp = max((t for t in TP_DEGREES if t <= gpus and physics.group(((node, t),))), default=None)
        if tp is None:
            continue
        lat = physics.perf.solo_request_s(physics.llm, physics.gpus[ti], tp, prompt_tokens, output_tokens)
        best = lat if best is None else tuple(np.minimum(a, b) for a, b in zip(best, lat))
    if best is None:
        raise ProvisionerError(f"{physics.llm.name} fits on no single node of inventory {physics.inv.name}: "
                               f"rent larger nodes or pick a smaller model", params=("model",))
    ttft, tbt, e2e = best
    return ttft, np.where(np.asarray(output_tokens) > 1, tbt, np.nan), e2e


def search_plan(ctx: Context, seed=0, phases=("prefill", "decode"), start=None, moves=None, steps=SEARCH_STEPS,
                sample=40, seen: dict | None = None, starts: list | None = None):
    """(plan, rps): tabu search from `start` (default: from each of `initial_starts`, the
    best plan of all by `search_value`; ties go to the first start's; `starts`: these
    instead, e.g. `node_local_starts`); `seen` collects every plan scored, with its rps.
    (None, 0.0) when it finds no plan of `phases` (`valid_plan`): a split plan
    needs a prefill and a decode group, which an inventory with room for one replica of the
    model does not have (`no_split_plan_reason`)."""
    sc = ctx.scorer
    starts = [start] if start is not None else starts or initial_starts(ctx, phases)
    if not starts[0]:
        raise ProvisionerError(f"{ctx.llm.name} fits in no group of inventory {ctx.inventory.name} (a node's "
                               f"tensor-parallel groups, or a pipeline of two): add nodes or larger ones, or plan "
                               f"a smaller model", params=("model",))
    best, best_rps, best_value = None, -1.0, -np.inf
    for first in starts:
        if moves is not None:
            plan, rps, _ = tabu_search(sc, first, steps=steps, sample=sample, rng=seed, phases=phases, moves=moves,
                                       seen=seen)
        else:   # ThunderServe's moves first, then GPUs dealt anew between pairs of groups (regroup)
            plan, rps, _ = tabu_search(sc, first, steps=steps, sample=sample, rng=seed, phases=phases, seen=seen)
            plan, rps, _ = tabu_search(sc, plan, steps=steps, sample=sample, rng=seed, phases=phases,
                                       moves=("flip", "split", "merge", "move", "regroup"), seen=seen)
        # its rps, or for plans that score 0, how near it is to holding every request
        value = search_value(sc, plan)
        if valid_plan(plan) and value > best_value:
            best, best_rps, best_value = plan, rps, value
    if best is None:
        return None, 0.0
    if seen is not None:
        seen[best] = best_rps
    return best, best_rps


def initial_starts(ctx: Context, phases=("prefill", "decode")) -> list[tuple]:
    """The tabu search's starts: the bandwidth clustering with each node cut into its
    smallest TP groups and into its largest (`initial_groups`), phases by comparative
    advantage (`initial_plan`; all "both" for a non-split search). Two starts, because the
    search is local: at tight SLOs small groups miss the limits, so the fine start and
    nearly all its neighbours score 0 and the search has no slope to climb (coding at
    Table VI x 1.25: 0.55 req/s from the fine start, 2.70 from the coarse one); at looser
    SLOs the fine start's many small groups are where the best plans lie."""
    starts = []
    for coarse in (False, True):
        if phases == ("both",):
            first = canon([(g, "both") for g in initial_groups(ctx.physics, coarse)])
        else:
            first = initial_plan(ctx.physics, ctx.scorer, coarse)
        if first not in starts:
            starts.append(first)
    return starts


def node_local_starts(ctx: Context, plan, phases=("prefill", "decode")) -> list[tuple]:
    """More starts for a split search whose best `plan` the network limits
    (`_network_binds`): each node's groups, fine and coarse, given both phases inside the
    node (`node_local_plan`); none otherwise. The search is local, and from the bandwidth
    clustering's starts it may not reach plans that pair the phases inside nodes:
    conversation at 12 Gbps sustained 5.40 req/s, and 6.99 with these starts' finalists
    beside (`finalist_plans`)."""
    if phases == ("both",) or not _network_binds(ctx.scorer, plan):
        return []
    plans = [node_local_plan(ctx.physics, ctx.scorer, coarse) for coarse in (False, True)]
    return [p for i, p in enumerate(plans) if p is not None and p not in plans[:i]]


def _network_binds(scorer, plan) -> bool:
    """Whether the network limits the plan: a pair of its prefill and decode groups on
    different nodes is unusable for its transfers, or may load a shared link less than
    fully (`Scorer.pair`, `Scorer.network_limit`). At 40 Gbps on thunderserve-32gpu
    coding's best plan has no such pair; conversation's may (a link limit of 0.99)."""
    pg = [g for g, ph in plan if ph == "prefill"]
    dg = [g for g, ph in plan if ph == "decode"]
    for src in pg:
        for dst in dg:
            if {n for n, _ in src} == {n for n, _ in dst}:
                continue   # the same node(s): no shared link
            if not scorer.pair(src, dst)[0] or scorer.network_limit(src, dst, len(pg)) < 1.0:
                return True
    return False


def no_split_plan_reason(ctx: Context, where: str | None = None) -> str:
    """Why an inventory has no split plan (the search found none): a split plan needs two
    disjoint GPU groups that each hold the model, a prefill and a decode replica.
    where : what the message calls the inventory (default "inventory NAME")."""
    inv, ph = ctx.inventory, ctx.physics
    where = where or f"inventory {inv.name}"
    nodes = ", ".join(f"{t.count}x {t.name}" for t in inv.types if t.count)
    groups = candidate_groups(ph)
    gpus = [inv.types[ti].gpus for ti in ph.node_type]

    def disjoint(a, b):
        used: dict = {}
        for node, tp in a + b:
            used[node] = used.get(node, 0) + tp
        return all(n <= gpus[node] for node, n in used.items())

    if any(disjoint(a, b) for i, a in enumerate(groups) for b in groups[i:]):
        return (f"no split plan on {where} ({nodes}): the search found no plan with both a prefill "
                f"and a decode replica of {ctx.llm.name}")
    return (f"no split plan on {where} ({nodes}): a split plan needs two replicas of {ctx.llm.name} "
            f"(a prefill and a decode one), and its GPUs hold only one")


def uncompressed(ctx: Context) -> Context:
    """The same question with 16-bit KV on the wire (its own scorer: rates are cached per scorer)."""
    return replace(ctx, kv_bits=16, scorer=Scorer(ctx.physics, ctx.scorer.w, 16))


def plan_routing(ctx: Context, plan, rps: float | None = None):
    """(prefill groups, decode groups, Routing) of a split plan: the throughput LP's
    routing, or with `rps` the least-utilization routing of that rate."""
    pre = [st for st, ph in plan if ph == "prefill"]
    dec = [st for st, ph in plan if ph == "decode"]
    if rps is None:
        return pre, dec, ctx.scorer.route(pre, dec)
    return pre, dec, balanced_routing(ctx.scorer, pre, dec, rps)


def replicas_json(ctx: Context, plan, routing=None) -> list[dict]:
    """The CONTRACTS.md replica objects: phase, gpus (type -> count), tp, pp, share."""
    inv = ctx.inventory
    names = [n for n, _ in inv.nodes]
    out = []
    if all(ph == "both" for _, ph in plan):
        shares = ctx.scorer.both_shares([st for st, _ in plan])
        return [_replica(ctx, st, "both", float(s), names) for (st, _), s in zip(plan, shares)]
    pre, dec, r = routing or plan_routing(ctx, plan)
    dshare = r.prefill_share @ r.decode_share if len(pre) else np.zeros(len(dec))
    out += [_replica(ctx, st, "prefill", float(s), names) for st, s in zip(pre, r.prefill_share)]
    out += [_replica(ctx, st, "decode", float(s), names) for st, s in zip(dec, dshare)]
    return out


def _replica(ctx, stages, phase, share, names) -> dict:
    gpus: dict = {}
    for node, tp in stages:
        g = ctx.inventory.types[ctx.physics.node_type[node]].gpu
        gpus[g] = gpus.get(g, 0) + tp
    rate = {"prefill": lambda: ctx.scorer.prefill(stages)[0], "decode": lambda: ctx.scorer.decode(stages)[0],
            "both": lambda: ctx.scorer.both(stages)}[phase]()
    # "tp" (CONTRACTS.md, one number) is the widest stage's; "stage_tp" each stage's
    return {"phase": phase, "gpus": gpus, "tp": max(tp for _, tp in stages), "stage_tp": [tp for _, tp in stages],
            "pp": len(stages),
            "share": round(share, 6), "nodes": [names[n] for n, _ in stages],
            "layers": list(ctx.physics.group(stages).layers), "capacity_rps": round(rate, 4)}


def bounds(ctx: Context) -> dict:
    return {"split": upper_bound_rps(ctx.scorer), "non_split": upper_bound_rps(ctx.scorer, ("both",))}


__all__ = ["Context", "make_context", "size_sample", "search_plan", "no_split_plan_reason", "plan_routing",
           "replicas_json", "reference_latencies",
           "bounds"]
