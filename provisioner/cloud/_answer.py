"""The cloud question end to end: plan, compare with the best non-split plan, bound,
simulate (`engine`: the discrete-event engine by default, or the fluid one), and optionally
re-plan without a node or choose what to rent."""

from __future__ import annotations

import itertools
import math
import time

import numpy as np

from perfmodels import LatencyModel, machine_tp_degrees
from workloads import Trace, TraceGenerator

from .._validation import Integral, Interval, Options, Real, validate_params
from ..designs import CHUNK_TOKEN_CHOICES, CHUNK_TOKENS_CONSTRAINT
from ..errors import ProvisionerError
from ..schedulers import DEFAULT_SCHEDULER
from ..search import Progress
from ..sim import ENGINES
from ..workers import beside
from ._plan import (SEARCH_STEPS, bounds, check_cloud_scheduler, make_context, no_split_plan_reason,
                    node_local_starts, plan_routing, replicas_json, search_plan, size_sample, uncompressed)
from ._routing import Routing
from ._score import TARGET_ATTAINMENT, SharedRates
from ._search import canon, score, search_value, symmetry_key, tie_break, valid_plan
from ._format import rented_text
from ._inventory import Inventory
from ._simulate import kv_misfits, no_attainment, nothing_served, plan_load, simulate_plan

BISECTION_STEPS = 8   # the sustained rate to 1.2 x capacity / 256
FINALISTS = 5        # plans the simulation re-scores after the tabu search
RENTAL_SEARCH_STEPS = 30   # --goal cost: the shorter search of each candidate rental
MIN_REQUESTS = 20     # the bisection's lowest rate: this many requests in the trace window
ASKED_RPS_REACH = 1.5   # a bisection ending under --rps checks it when its lowest miss is within this factor
# The chunked non-split comparison's budget: one budget, not the families' four (each is a
# bisection per finalist). On thunderserve-32gpu (benchmarks/results/cloud.md) 512 is the
# best on coding and within 1% of the best (2048) on conversation.
COMPARISON_CHUNK_TOKENS = 512
# x1.5 raises of the bisection's top while it passes (to 31x the predicted rate). Three (4x)
# capped the rate wherever the analytic score is far off: with 5% of 60k-token outputs every
# plan "sustained" exactly 4.04x its prediction, the split one 0.96 req/s where it meets 99%
# at 1.2, and the ratio to non-split was the analytic one to 14 digits
CEILING_RAISES = 8
SPLIT_PHASES, NON_SPLIT_PHASES = ("prefill", "decode"), ("both",)
CHEAPER_RENTAL_CHECKS = 6   # --goal cost: cheaper rentals checked by simulation after the program's pass
MAX_CHEAPER_RENTALS = 2000   # the cheapest of them `_cheaper_pass` weighs (its pruning is plain Python)
MAX_RENTALS_LISTED = 100_000   # count vectors a price list may have for them to be listed
# --goal cost refuses at once a rate above this many times what every available node carries
# at its single-node rates (the DES sustains 1.0-1.3x the analytic rate on the shipped
# workloads: a rate past 4x is not served, and finding so by simulation takes minutes)
RATE_HEADROOM = 4.0
# --goal rps refuses a rate above RATE_HEADROOM x what the inventory carries when its trace
# holds more requests than this: minutes of simulation to say that almost none is served
CRAWL_REQUESTS = 20_000
_NO_LOAD = {"prefill": 0.0, "kv": 0.0}   # `steady_state_load` of a plan that serves nothing
GOALS = ("rps", "throughput", "cost")
_QUESTION_CONSTRAINTS = {
    "goal": [Options(GOALS)], "perf": [LatencyModel], "new_mix": [None, TraceGenerator],
    "seed": [Interval(Integral, 0, 2**63 - 1)], "target": [Interval(Real, 0, 1, closed="right")],
    "engine": [Options(ENGINES)], "rescore_engine": [Options(ENGINES)], "without": [None, str],
}


def plan_cloud(inventory, llm, perf, traces, *, goal="rps", rps=None, kv_bits=16, slo_scale=2.0, seed=0,
               without=None, target=TARGET_ATTAINMENT, engine="des", rescore_engine="des",
               prefill_chunk_tokens=COMPARISON_CHUNK_TOKENS, new_mix=None, scheduler=DEFAULT_SCHEDULER,
               progress=None) -> dict:
    """The JSON answer of `provision cloud` (CONTRACTS.md item 4).

    inventory : `load_inventory(...)`; llm : a catalog model name or `perf.llm(name)`.
    goal : "rps" (plan for `rps`), "throughput" (the most the inventory sustains; no `rps`) or
        "cost" (what of a price list to rent for `rps`); target : the attainment, in (0, 1].
    traces : a `workloads.TraceGenerator`; `rps` picks its rate (goal throughput: found).
    without, new_mix : a re-plan (`replan`) once node `without` has left, or the requests
        have become `new_mix`'s (a `workloads.TraceGenerator`, at the same rate), or both.
    engine : the simulator of the reported attainment (`slo_attainment`, the re-plans').
    rescore_engine : the simulator of the many runs that choose: the finalists' sustained
        rates (bisections) and `--goal cost`'s checks of each rental. The fluid engine agrees
        with the DES on cloud plans (benchmarks/fidelity.py) in a fraction of its time, but
        its first cloud plan compiles the kernel's cloud specialisation (12-29 s of CPU, once
        per install), which would break the 10-s planning time of a first run: opt-in.
    prefill_chunk_tokens : the second comparison point, `non_split_chunked`: the best non-split
        plan whose replicas run chunked prefill with this budget (default
        `COMPARISON_CHUNK_TOKENS`; None: the best of the chunked baseline families' budgets,
        `CHUNK_TOKEN_CHOICES`, four times the simulations; 0: not computed). The first,
        `non_split`, prefills whole prompts (HexGen, ThunderServe's comparison).
    scheduler : the policy every simulation of a plan runs under (least-work, or an on-demand
        one: SEMANTICS.md, "Cloud plans under an on-demand scheduler"; the discrete-event
        engine only). The search's analytic score is least-work's either way.
    progress : a `provisioner.search.Progress` told each stage as it starts (the CLI draws
        them on a terminal: a 128-GPU plan takes a minute or more)."""
    validate_params({"prefill_chunk_tokens": prefill_chunk_tokens}, {"prefill_chunk_tokens": CHUNK_TOKENS_CONSTRAINT})
    llm = check_question(inventory, llm, perf, traces, goal=goal, rps=rps, seed=seed, target=target, engine=engine,
                         rescore_engine=rescore_engine, without=without, new_mix=new_mix)
    _refuse_fluid_on_demand(scheduler, engine, rescore_engine)
    t0 = time.perf_counter()
    progress = progress or Progress()
    reference = inventory
    if goal == "cost" and inventory.bandwidth_gbps is not None:
        # with_counts() drops a per-node matrix: the links of nodes not yet chosen are unknown
        raise ProvisionerError(f"{inventory.bandwidth_at or inventory.name}: network.bandwidth_gbps: a matrix gives "
                               f"the links between the nodes of a fixed inventory, and --goal cost chooses the "
                               f"nodes; give network.inter_node_gbps (or --inter-node-gbps) instead")
    met_plan = None
    # --goal cost plans many rentals of one price list for one question: their replicas and
    # pairs alike share their rates (`SharedRates`), and the answer's plan reads them again
    shared = SharedRates() if goal == "cost" else None
    if goal == "cost":
        progress.start("choosing what to rent (a search and a simulation per rental)")
        inventory, ns_rental, met_plan = _rentals(reference, llm, perf, traces, rps, kv_bits, slo_scale, seed,
                                                  target, rescore_engine, engine, prefill_chunk_tokens, scheduler,
                                                  shared)
    sizes = size_sample(traces, rps)
    ctx = make_context(inventory, llm, perf, sizes, slo_scale, kv_bits, reference=reference, target=target,
                       scheduler=scheduler, shared=shared)
    budgets = _chunk_budgets(prefill_chunk_tokens)
    # a long simulation of a plan far past its capacity would only say that little is served
    crawls = goal == "rps" and rps * traces.duration_s > CRAWL_REQUESTS
    bound = bounds(ctx) if crawls else None   # else computed once the plan is chosen, outside plan_s
    if crawls:
        _refuse_past_headroom(rps, max(bound.values()), "the LP bound on its plans")
    # The chunked comparison (its own search and bisections: as long as the split plan's)
    # asks nothing of the split plan: it runs in a worker beside it (the DES only: the fluid
    # engine's first use compiles its kernel, which two processes would do twice). Sharing
    # the two cores lengthens the plan's own time by about a second on coding, and the whole
    # answer comes 4-5 s sooner (benchmarks/results/cloud_beside.md); started only once the
    # plan was chosen, the answer came no sooner and the plan no faster.
    asked = rps if goal != "throughput" else None   # a rate each plan's rating checks too
    with beside(best_chunked_non_split, ctx, traces, target, seed, budgets, rescore_engine, None, asked,
                parallel=bool(budgets) and rescore_engine == "des") as chunked:
        progress.start(f"searching split plans of {inventory.n_gpus} GPUs (tabu search)")
        ranked = finalist_plans(ctx, seed)
        if met_plan is not None and all(p != met_plan for p, _ in ranked):
            # --goal cost rented for the plan that met the target at rps in its check, a shorter
            # search's finalist: it competes too (the long-prompt trace at 0.5 req/s: the answer's
            # own finalists sustained at most 0.46 req/s, that plan 1.35)
            ranked.append((met_plan, score(ctx.scorer, met_plan)))
        progress.start(f"simulating the {len(ranked)} best split plans for the rate each sustains")
        plan, cap, sustained = best_by_des(ctx, traces, target, seed, engine=rescore_engine, ranked=ranked,
                                           asked_rps=asked)
        if met_plan is not None and plan != met_plan and sustained < rps and \
                not meets_target(ctx, plan, trace_at(traces, rps), rps, target, engine=rescore_engine):
            # the pick misses the target at the rate rented for: the plan checked there is the answer
            plan, cap = met_plan, score(ctx.scorer, met_plan)
            sustained = sustained_rps(ctx, plan, traces, cap, target, engine=rescore_engine, asked_rps=asked)
        plan_s = time.perf_counter() - t0
        progress.start("searching and simulating non-split plans (the comparison)")
        ns_finalists = finalist_plans(ctx, seed, phases=("both",))   # shared by both non-split comparisons
        ns_plan, ns_cap, ns_sustained = best_by_des(ctx, traces, target, seed, phases=("both",), engine=rescore_engine,
                                                    ranked=ns_finalists, asked_rps=asked)
        bound = bound or bounds(ctx)
        carried = max(cap or 0.0, sustained or 0.0, ns_cap or 0.0, ns_sustained or 0.0)
        if crawls:
            _refuse_past_headroom(rps, carried, "its best plan")
        # a split plan needs a prefill and a decode replica: an inventory with room for one
        # replica has none, and the answer says so and points to the non-split plan
        no_split = no_split_plan_reason(ctx) if plan is None else None
        if goal == "throughput":
            if no_split:
                serves = (f"its best non-split plan sustains {ns_sustained:.2f} req/s at {target:.0%} attainment"
                          if ns_sustained > 0 else f"its best non-split plan meets {target:.0%} attainment at no rate")
                raise ProvisionerError(f"{no_split}: serve it non-split ({serves}; rps=R answers with it under "
                                       f"non_split), or add nodes (a [[nodes]] count) so that it holds two replicas",
                                       params=("rps",))
            if sustained <= 0:
                _refuse_kv_misfits(ctx, plan, sizes, target)
                fix = (f"its best non-split plan sustains {ns_sustained:.2f} req/s, so serve it non-split, or "
                       if ns_sustained > 0 else "")
                raise ProvisionerError(f"no split plan meets {target:.0%} attainment at any rate on this inventory: "
                                       f"{fix}loosen slo_scale or lower target", params=("slo_scale", "target"))
            rps = sustained
        trace = trace_at(traces, rps)   # --goal throughput's rate may lie below the floor
        if no_split:   # nothing to route or simulate: no request is served by a split plan
            routed, split_bound = None, 0.0
            sim = nothing_served(trace)
        else:
            routed, split_bound = plan_routing(ctx, plan, rps), bound["split"]
            sim = simulate_plan(ctx, plan, trace, routed, engine=engine)
        out = {"goal": goal, "inventory": inventory.name, "model": llm.name, "workload": traces.label, "rps": rps,
               "kv_bits": kv_bits,
               "inter_node_gbps": inventory.inter_node_gbps,
               "nic_gbps": {t.name: t.nic_gbps for t in inventory.types}, "network": inventory.network_text(),
               "cost_usd_per_h": round(inventory.cost_usd_per_h, 4),
               "rented": {t.name: t.count for t in inventory.types},
               "no_split_plan": no_split and f"{no_split}: serve it non-split (the best non-split plan: non_split)",
               "replicas": replicas_json(ctx, plan, routed) if plan is not None else [],
               "flows": flows_json(routed) if routed is not None else [],
               "throughput_rps": cap, "upper_bound_rps": split_bound,
               "gap": 1.0 - cap / split_bound if split_bound > 0 else 0.0,
               "slo_scale": slo_scale, "target_attainment": target, "engine": engine,
               "rescore_engine": rescore_engine, "scheduler": scheduler}
        if "scheduler_stats" in sim:
            out["scheduler_stats"] = sim["scheduler_stats"]
        out.update(slo_attainment=sim["slo_attainment"], slo=sim["slo"], requests=sim["requests"],
                   unservable_requests=sim["unservable_requests"],
                   steady_state_load=plan_load(ctx, plan, rps, routed) if not no_split else _NO_LOAD)
        ns_sim = simulate_plan(ctx, ns_plan, trace, engine=engine)
        out["non_split"] = {"replicas": replicas_json(ctx, ns_plan), "throughput_rps": ns_cap,
                            "upper_bound_rps": bound["non_split"], "slo_attainment": ns_sim["slo_attainment"],
                            "slo": ns_sim["slo"], "steady_state_load": plan_load(ctx, ns_plan, rps)}
        out["split_over_non_split"] = cap / ns_cap if ns_cap > 0 and not no_split else None
        out["sustained_rps"], out["non_split"]["sustained_rps"] = sustained, ns_sustained
        out["split_over_non_split_sustained"] = sustained / ns_sustained if ns_sustained > 0 and not no_split else None
        if budgets:
            progress.start("the chunked-prefill non-split comparison")
            out["non_split_chunked"] = _chunked_comparison(ctx, chunked.result(), trace, budgets, engine)
            ch = out["non_split_chunked"]["sustained_rps"]
            out["split_over_non_split_chunked_sustained"] = sustained / ch if ch > 0 and not no_split else None
        replans = without is not None or new_mix is not None
        # --goal cost: the price list could rent this node, the chosen rental does not, or
        # rents it alone (refused as "the only node of inventory cloud-prices", which has 14)
        unrented = without is not None and without not in (name for name, _ in inventory.nodes)
        alone = without is not None and not unrented and len(inventory.nodes) == 1
        if replans and no_split:
            out["replan_skipped"] = f"{no_split}: nothing to re-plan"
        elif (unrented or alone) and new_mix is None:
            out["replan_skipped"] = (f"the chosen rental has no node {without}: nothing to re-plan" if unrented else
                                     f"{without} is the chosen rental's only node: nothing is left to re-plan on")
        elif replans:
            if unrented or alone:
                out["replan_skipped"] = (f"the chosen rental has no node {without}" if unrented else
                                         f"{without} is the chosen rental's only node") + \
                    ": re-planned for the new mix alone"
            mix = None if new_mix is None else (new_mix.label, trace_at(new_mix, rps), size_sample(new_mix, rps))
            progress.start("re-planning: none, lightweight and full")
            out["replan"] = replan(ctx, plan, routed, sim["slo_attainment"], llm, perf, trace, rps, slo_scale, kv_bits,
                                   seed, engine, node=None if unrented or alone else without, mix=mix)
        if goal == "cost":
            out["non_split_rental"] = ns_rental
        if max(carried, out.get("non_split_chunked", {}).get("sustained_rps", 0.0)) <= 0:
            # every replica too slow for the SLOs even alone: the plans above are arbitrary
            out["no_plan_meets_target"] = (f"no plan of this inventory meets {target:.0%} attainment at any rate "
                                           f"under these SLOs (slo_scale {slo_scale:g}): loosen slo_scale or lower "
                                           f"the target attainment, or rent faster GPUs")
        out["elapsed_s"] = plan_s
        progress.done()
        return out


def check_question(inventory, llm, perf, traces, *, goal, rps, seed, target, engine, rescore_engine, without,
                   new_mix):
    """The LLM `plan_cloud` plans for (a catalog name or an LLM); one line naming the first
    parameter it cannot take, before any search (were: a TypeError from `rps * duration_s`, a
    trace error about unsorted arrivals at a negative rate, an unknown goal or node answered)."""
    if not isinstance(traces, TraceGenerator):   # a Trace is one rate; the plan tries many
        raise ProvisionerError(f"traces must be a workloads.TraceGenerator, e.g. TraceGenerator('coding', 60.0, 0, "
                               f"arrival='poisson', rps=6.0) (got {type(traces).__name__})", params=("traces",))
    validate_params(dict(goal=goal, perf=perf, new_mix=new_mix, seed=seed, target=target, engine=engine,
                         rescore_engine=rescore_engine, without=without), _QUESTION_CONSTRAINTS)
    if goal == "throughput" and rps is not None:
        raise ProvisionerError("goal throughput finds the rate itself: drop rps", params=("goal", "rps"))
    if goal != "throughput":
        if rps is None:
            load = "the rented nodes must serve" if goal == "cost" else "to plan for"
            raise ProvisionerError(f"goal '{goal}' needs rps (the load {load})", params=("goal", "rps"))
        validate_params({"rps": rps}, {"rps": [Interval(Real, 0, None, closed="neither")]})
    if not isinstance(inventory, Inventory):
        raise ProvisionerError(f"inventory must be an Inventory: load_inventory('thunderserve-32gpu', perf.catalog) "
                               f"(got {type(inventory).__name__})", params=("inventory",))
    if without is not None:
        check_without(inventory, without, goal)
    return perf.llm(llm)


def check_without(inventory, node: str, goal: str) -> None:
    """Refuse a node `without` names that the inventory (`goal` cost: any rental of it) lacks."""
    # --goal cost: the price list's counts are what is rented now (often 0); any node it may rent is known
    rentable = inventory.with_counts(inventory.rentable_counts())
    (rentable if goal == "cost" else inventory).without(node)


def _refuse_fluid_on_demand(scheduler, engine, rescore_engine) -> None:
    """One line, before any search: the fluid engine models least-work only."""
    check_cloud_scheduler(scheduler)
    fluid = [name for name, e in (("engine", engine), ("rescore_engine", rescore_engine)) if e == "fluid"]
    if scheduler != DEFAULT_SCHEDULER and fluid:
        raise ProvisionerError(f"{fluid[0]} fluid does not model scheduler {scheduler} (on-demand KV, preemption, "
                               f"migration): use {fluid[0]} des", params=(fluid[0], "scheduler"))


def _refuse_past_headroom(rps, carried, what) -> None:
    """The one-line refusal of a rate past RATE_HEADROOM x what the inventory `carried`
    (req/s, by `what`); nothing when it carries nothing analytically (the engines judge)."""
    if carried > 0 and rps > RATE_HEADROOM * carried:
        raise ProvisionerError(f"rps {rps:g} is over {RATE_HEADROOM:g}x what this inventory carries ({what}: "
                               f"{carried:.3g} req/s); lower rps, add nodes, or ask goal throughput for the most it "
                               f"sustains", params=("rps", "goal"))


def _rentals(price_list, llm, perf, traces, rps, kv_bits, slo_scale, seed, target, rescore_engine, engine,
             prefill_chunk_tokens, scheduler=DEFAULT_SCHEDULER, shared=None):
    """--goal cost: (the cheapest split rental, `non_split_rental`, the split plan that met the
    target on the rental at `rps`). Each search also checks
    the other's rental: the single-node rates that propose rentals are analytic and rank
    node types apart from the simulation (conversation on cloud-prices at 3 req/s: the
    split search alone rented 7.43 $/h; given the non-split rental it found one of 5.90)."""
    args = (price_list, llm, perf, traces, rps, kv_bits, slo_scale, seed, target)
    ns = non_split_rental(*args, rescore_engine, engine, prefill_chunk_tokens, scheduler=scheduler, shared=shared)
    also = [] if ns["rented"] is None else [tuple(ns["rented"][t.name] for t in price_list.types)]
    try:
        rental, (met_plan, _) = choose_rental(*args, engine=rescore_engine, also=also, scheduler=scheduler,
                                              shared=shared)
    except ProvisionerError as e:
        raise _with_non_split_rental(e, ns, rps) from None
    if ns["rented"] is None or rental.cost_usd_per_h < ns["cost_usd_per_h"]:
        # may the split rental serve the rate non-split?
        on_split_rental = non_split_rental(*args, rescore_engine, engine, prefill_chunk_tokens, rounds=0,
                                           also=[tuple(t.count for t in rental.types)], scheduler=scheduler,
                                           shared=shared)
        ns = on_split_rental if on_split_rental["rented"] is not None else ns
    return rental, ns, met_plan


def non_split_rental(price_list, llm, perf, traces, rps, kv_bits, slo_scale, seed, target, rescore_engine,
                     engine, prefill_chunk_tokens=COMPARISON_CHUNK_TOKENS, rounds=12, also=(),
                     scheduler=DEFAULT_SCHEDULER, shared=None) -> dict:
    """`non_split_rental` of a `--goal cost` answer: the cheapest rental whose non-split
    plan meets the target at `rps`, whole prompts or chunked with `prefill_chunk_tokens`
    (`choose_rental` with phases ("both",)): its cost, plan, budget and attainment; or why
    there is none (`cost_usd_per_h` None). The answer's rental is the cheapest split one; a
    capacity planner compares the two prices. `rounds`, `also` and `shared` as `choose_rental`'s."""
    budgets = (0,) + _chunk_budgets(prefill_chunk_tokens)
    try:
        rental, (plan, chunk) = choose_rental(price_list, llm, perf, traces, rps, kv_bits, slo_scale, seed, target,
                                              rounds=rounds, engine=rescore_engine, phases=NON_SPLIT_PHASES,
                                              chunk_budgets=budgets, also=also, scheduler=scheduler,
                                              shared=shared)
    except ProvisionerError as e:
        return {"rented": None, "cost_usd_per_h": None, "why": str(e)}
    ctx = make_context(rental, llm, perf, size_sample(traces, rps), slo_scale, kv_bits, reference=price_list,
                       target=target, scheduler=scheduler, shared=shared)
    sim = simulate_plan(ctx, plan, trace_at(traces, rps), engine=engine, chunk_tokens=chunk)
    return {"rented": {t.name: t.count for t in rental.types}, "cost_usd_per_h": round(rental.cost_usd_per_h, 4),
            "replicas": replicas_json(ctx, plan), "prefill_chunk_tokens": int(chunk),
            "slo_attainment": sim["slo_attainment"], "slo": sim["slo"]}


def _with_non_split_rental(error, ns, rps) -> ProvisionerError:
    """`error` (no split rental serves the rate) with what the non-split search found
    (`non_split_rental`): the cheapest rental that serves `rps` non-split, or that none does
    (then it failed alike: no rental); the planner's next question."""
    if ns["cost_usd_per_h"] is None:
        either = f"; no non-split rental serves {rps:g} req/s either" if ns["why"].startswith("no rental") else ""
        return ProvisionerError(f"{error}{either}", params=error.params)
    return ProvisionerError(f"{error}; non-split, renting {rented_text(ns['rented'])} "
                            f"({ns['cost_usd_per_h']:.3f} $/h) serves {rps:g} req/s", params=error.params)


def _refuse_kv_misfits(ctx, plan, trace, target) -> None:
    """Where no rate meets the target because too many requests fit in no replica, say so
    (rather than advise looser SLOs that cannot help)."""
    misfits, largest, caps = kv_misfits(ctx, plan, trace)
    if misfits > (1.0 - target) * len(trace):
        raise ProvisionerError(
            f"{misfits:,} of {len(trace):,} requests ({misfits / len(trace):.1%}) need more KV cache than any replica "
            f"of the plan holds (the largest {largest:,} tokens; {caps}), so no rate meets "
            f"{target:.0%} attainment: truncate those requests, or plan on nodes with more GPU memory",
            params=("target",))


def finalist_plans(ctx, seed, phases=("prefill", "decode"), finalists=FINALISTS, keep=None, start=None,
                   moves=None, steps=SEARCH_STEPS) -> list:
    """[(plan, predicted rps)]: the tabu search's `finalists` best plans by the analytic score
    (none when the inventory has no plan of `phases`: `no_split_plan_reason`), and where
    the network limits the best of them, with the `finalists` best of a search from
    `node_local_starts` (best first, as `_best_first` ranks);
    `keep(plan)`, when given, admits only the plans it accepts (e.g. a shape to compare with);
    `start`, `moves` and `steps` as `search_plan`'s (a re-plan's search; its start is a
    candidate too)."""
    seen: dict = {}
    if start is not None:
        start = canon(start)
        if valid_plan(start):
            seen[start] = score(ctx.scorer, start)
    best, best_rps = search_plan(ctx, seed=seed, phases=phases, start=start, moves=moves, steps=steps, seen=seen)
    if best is not None:
        seen[best] = best_rps
    ranked, keys = _finalists(ctx, seen, keep, finalists, set())
    if best is not None and start is None and moves is None:
        # Where the network limits the best plan, the search from node-local starts too: its
        # finalists beside the others, not instead of them (the score can overrate its plans:
        # coding at 10 Gbps, a plan with 47% of its KV across nodes predicted 2.78 req/s and
        # sustained 2.10, where one of the clustering's finalists sustains 2.93).
        local = node_local_starts(ctx, best, phases)
        if local:
            seen_local: dict = {}
            search_plan(ctx, seed=seed, phases=phases, steps=steps, seen=seen_local, starts=local)
            ranked = list(_best_first(ctx.scorer, ranked + _finalists(ctx, seen_local, keep, finalists, keys)[0]))
    if ctx.kv_bits < 16 and phases != ("both",):
        # The uncompressed search's finalists stay feasible with compressed (shorter)
        # transfers; tabu search is local, and alone the compressed one can miss them
        # (conversation at 5 Gbps: 4-bit finalists 5.67 req/s, the 16-bit plan 6.51).
        ranked += [(p, score(ctx.scorer, p)) for p, _ in finalist_plans(uncompressed(ctx), seed, phases, finalists, keep,
                                                                        start, moves, steps)
                   if symmetry_key(ctx.physics, p) not in keys]
    return ranked


def _finalists(ctx, seen, keep, finalists, keys) -> tuple[list, set]:
    """([(plan, rps)] the `finalists` best of `seen` that `keep` admits, one of each plan up
    to node relabelling and none whose key is in `keys`; `keys` with theirs added)."""
    kept = [(p, r) for p, r in seen.items() if valid_plan(p) and (keep is None or keep(p))]
    ranked = []
    for p, r in _best_first(ctx.scorer, kept):
        key = symmetry_key(ctx.physics, p)
        if key not in keys:
            keys.add(key)
            ranked.append((p, r))
            if len(ranked) == finalists:
                break
    return ranked, keys


def _best_first(scorer, scored):
    """[(plan, rps)] best first: by score, equal scores by `tie_break` (worked out only where
    scores tie, as far as the caller reads), then plans that score 0 nearest to holding
    every request first (`search_value`); the plans' order last."""
    positive = sorted((kv for kv in scored if kv[1] > 0), key=lambda kv: (-kv[1], kv[0]))
    for _, tied in itertools.groupby(positive, key=lambda kv: kv[1]):
        tied = list(tied)
        if len(tied) > 1:
            tied.sort(key=lambda kv: (*(-x for x in tie_break(scorer, kv[0])), kv[0]))
        yield from tied
    yield from sorted((kv for kv in scored if kv[1] <= 0), key=lambda kv: (-search_value(scorer, kv[0]), kv[0]))


def best_by_des(ctx, traces, target, seed, phases=("prefill", "decode"), finalists=FINALISTS, engine="des",
                chunk_tokens=0, ranked=None, asked_rps=None):
    """(plan, predicted rps, sustained rps): the tabu search's `finalists` best plans by the
    analytic score, re-scored by the rate the simulation (`engine`) sustains at the target
    attainment (the analytic score ranks; the simulation decides among the best it found).
    (None, 0.0, 0.0) when there is no plan of `phases` (`no_split_plan_reason`).
    chunk_tokens : chunked-prefill budget of non-split replicas in the simulation (0: off).
    ranked : `finalist_plans(ctx, seed, phases, finalists)` when the caller has it already.
    asked_rps : as `sustained_rps`'s."""
    if ranked is None:
        ranked = finalist_plans(ctx, seed, phases, finalists)
    if not ranked:
        return None, 0.0, 0.0
    split = phases != ("both",)
    best = None   # (sustained rps, predicted rps, plan)
    for p, cap in ranked:   # a finalist's bisection stops once it cannot reach the best rate so far
        sustained = sustained_rps(ctx, p, traces, cap, target, split=split, engine=engine, chunk_tokens=chunk_tokens,
                                  below=best[0] if best else None, asked_rps=asked_rps)
        if sustained is not None and (best is None or (sustained, cap) > best[:2]):
            best = (sustained, cap, p)
    sustained, cap, plan = best
    return plan, cap, sustained


def chunked_non_split_by_budget(ctx, traces, target, seed, budgets=CHUNK_TOKEN_CHOICES, engine="des",
                                ranked=None, asked_rps=None) -> list:
    """[(plan, predicted rps, sustained rps, chunk budget)]: `best_by_des` of the non-split
    plans once per budget. The analytic score ignores chunking, so the finalists are the
    unchunked comparison's (searched once: `ranked`, or here); only the simulation sees what
    chunking changes. asked_rps : as `sustained_rps`'s."""
    if ranked is None:
        ranked = finalist_plans(ctx, seed, phases=("both",))
    return [(*best_by_des(ctx, traces, target, seed, phases=("both",), engine=engine, chunk_tokens=c,
                          ranked=ranked, asked_rps=asked_rps), c)
            for c in budgets]


def best_chunked_non_split(ctx, traces, target, seed, budgets=CHUNK_TOKEN_CHOICES, engine="des", ranked=None,
                           asked_rps=None):
    """(plan, predicted rps, sustained rps, chunk budget): the best of
    `chunked_non_split_by_budget`, by `best_by_des`'s criterion (sustained rate, then
    predicted rate; the smaller budget on a tie)."""
    return best_of_budgets(chunked_non_split_by_budget(ctx, traces, target, seed, budgets, engine, ranked, asked_rps))


def best_of_budgets(rated):
    """The best entry of `chunked_non_split_by_budget`'s list."""
    return max(rated, key=lambda r: (r[2], r[1], -r[3]))


def _chunk_budgets(prefill_chunk_tokens) -> tuple:
    """Budgets of the chunked comparison: None searches the chunked families' budgets (as
    `provision` does), 0 turns it off, N fixes it."""
    if prefill_chunk_tokens is None:
        return CHUNK_TOKEN_CHOICES
    return (prefill_chunk_tokens,) if prefill_chunk_tokens > 0 else ()


def _chunked_comparison(ctx, best, trace, budgets, engine) -> dict:
    """`non_split_chunked` of the JSON: the best chunked non-split plan (`best`, from
    `best_chunked_non_split`), its budget, sustained rate and attainment at the planned rate."""
    plan, cap, sustained, chunk = best
    sim = simulate_plan(ctx, plan, trace, engine=engine, chunk_tokens=chunk)
    return {"prefill_chunk_tokens": int(chunk), "budgets_searched": [int(c) for c in budgets],
            "replicas": replicas_json(ctx, plan), "throughput_rps": cap, "sustained_rps": sustained,
            "slo_attainment": sim["slo_attainment"], "slo": sim["slo"]}


def flows_json(routed) -> list:
    """[prefill replica index, decode replica index, share of all requests] per routed pair
    (indices into `replicas`: prefill replicas first)."""
    pre, _, r = routed
    flow = r.prefill_share[:, None] * r.decode_share
    return [[int(i), len(pre) + int(j), round(float(flow[i, j]), 6)] for i, j in zip(*np.nonzero(flow > 1e-9))]


def _floor_rps(traces) -> float:
    """The rate whose window of `traces` holds MIN_REQUESTS requests (0 when they have no window length)."""
    return MIN_REQUESTS / traces.duration_s if traces.duration_s else 0.0


def trace_at(traces, rate):
    """`traces.at(rate)`, or below the rate whose window holds MIN_REQUESTS requests (the
    floor, `_floor_rps`), that many requests spread out in time (a window that long at this rate).
    A replayed file of MIN_REQUESTS rows or more with no window given is the whole file at
    every rate (`whole_at`): its window at the file's own rate held 149 of 200 rows at --goal
    throughput's 1.53 req/s, the easy first ones, and the plan's attainment on the whole file
    was 78.5%, not 99.3%. A shorter file is the floor's requests, as a window is."""
    if getattr(traces, "whole_file", False) and len(traces.source) >= MIN_REQUESTS:
        return traces.whole_at(rate)
    floor = _floor_rps(traces)
    if rate >= floor:
        return traces.at(rate)
    base = traces.at(floor)
    stretch = floor / rate
    return Trace(base.arrival_s * stretch, base.prompt_tokens, base.output_tokens, base.name,
                 base.duration_s * stretch)


def meets_target(ctx, plan, trace, rate, target, split=True, engine="des", chunk_tokens=0) -> bool:
    """Whether `plan` keeps every metric's attainment >= target on `trace` (drawn at `rate`;
    a split plan is routed for that rate), and its servers keep up with the plan's mix at
    that rate in steady state (`plan_load` <= 1: a window too short for the queue of an
    overloaded server to do its damage passes no rate that could not be held).
    chunk_tokens: as `sustained_rps`'s."""
    if kv_misfits(ctx, plan, trace)[0] > (1.0 - target) * len(trace):   # each a miss: no need to simulate
        return False
    routing = plan_routing(ctx, plan, rate) if split else None
    if max(plan_load(ctx, plan, rate, routing).values()) > 1.0:
        return False   # its servers fall behind with every window: however the window ends, not a steady rate
    sim = simulate_plan(ctx, plan, trace, routing, engine=engine, chunk_tokens=chunk_tokens)
    return min(sim["slo_attainment"][m] for m in ("ttft", "tbt", "e2e")) >= target


def sustained_rps(ctx, plan, traces, cap, target, split=True, engine="des", chunk_tokens=0,
                  below=None, asked_rps=None) -> float | None:
    """Highest rate (bisection on `engine`, traces nested across rates) at which every
    metric's attainment is >= target; 0 when even a tiny rate misses it. chunk_tokens:
    chunked-prefill budget of a non-split plan's replicas (0: whole prompts).
    below : a rate to beat (the best of other plans): None as soon as the bisection's top
        falls to it or under, as the whole bisection would end under it (it takes the same
        steps up to there, so a plan that can reach it is rated as without `below`).
    asked_rps : the question's rate: a bisection ending under it, with its lowest miss within
        ASKED_RPS_REACH of it, checks it too, and a plan meeting the target there is rated at
        it (also when the bisection stopped at `below`, if `asked_rps` is `below` or more).
        The bisection's probes below that rate hold
        fewer requests (a window of the same length), on which one miss can break 99%: the
        rental `--goal cost` chose for 4 req/s, meeting 99% there on 80 requests (20 s), was
        rated 2.85 req/s (one miss of 57), under the rate it was rented for.

    Every probe holds at least MIN_REQUESTS requests (below that 1% is not even one
    request): under the rate whose window holds that many (the floor), a probe is the
    floor's requests spread out in time, so a plan that misses at the floor is bisected
    below it instead of being rated 0 (one 4x3090 Ti node's non-split plan met every
    limit at 0.1 req/s, missed one request of 20 at the floor, 0.17, and was rated 0)."""
    floor = _floor_rps(traces)

    def ok(rate):
        return meets_target(ctx, plan, trace_at(traces, rate), rate, target, split, engine, chunk_tokens)
    lo, hi = 0.0, max(cap, 1e-3) * 1.2
    missed_floor = 0 < floor < hi and not ok(floor)
    if missed_floor:
        hi = floor      # the rate is below the floor: bisect under it
    elif 0 < floor < hi:
        lo = floor
    # the analytic capacity is a guess, not a ceiling: the DES's queue-aware dispatch can
    # sustain more than it predicts, so raise the bracket while its top still passes
    for _ in range(0 if missed_floor else CEILING_RAISES):
        if not ok(hi):
            break
        lo, hi = hi, hi * 1.5

    def at_asked():
        """`asked_rps` when it was not reached but lies within ASKED_RPS_REACH of the lowest
        miss, can rate the plan at `below` or more, and passes; else None."""
        if asked_rps is None or not lo < asked_rps <= hi * ASKED_RPS_REACH:
            return None
        if below is not None and asked_rps < below:
            return None
        return float(asked_rps) if ok(asked_rps) else None

    def pruned() -> bool:
        """Under `below`, with `asked_rps` under `below` or out of reach: `hi` only falls, so
        it stays out, and the plan is rated under `below` as without it."""
        if below is None or hi > below:
            return False
        return asked_rps is None or not below <= asked_rps <= hi * ASKED_RPS_REACH

    for _ in range(BISECTION_STEPS):
        if pruned():
            return None
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    if below is not None and hi <= below:
        return at_asked()
    asked = at_asked()
    return lo if asked is None else asked   # lo: a rate that passed, 0 when none did


def replan(ctx, plan, routed, before, llm, perf, trace, rps, slo_scale, kv_bits, seed, engine="des", node=None,
           mix=None) -> dict:
    """Attainment `before` (the plan's with its `routed` routing on `trace` at `rps`, already
    simulated), then with no re-plan, after a lightweight re-plan (phase flips and re-routing
    only: no model reload) and after a full re-plan, at the same rate, once `node` has left
    the inventory and/or the requests have become a new `mix` (its (label, trace at `rps`,
    size sample); ThunderServe's workload shift). Each re-plan is the best, by the
    simulation at that rate, of its search's finalists."""
    inv2, k = ctx.inventory.without(node) if node is not None else (ctx.inventory, None)
    label, trace, sizes = mix if mix is not None else (None, trace, ctx.trace)
    ctx2 = make_context(inv2, llm, perf, sizes, slo_scale, kv_bits, reference=ctx.ref_physics.inv,
                        target=ctx.scorer.w.target, scheduler=ctx.scheduler)
    survivors = canon([(_renumbered(st, k), ph) for st, ph in plan if _survives(st, k)])
    none = _keep_old_routing(ctx2, routed, k, trace, engine)
    res = {"node": node, "workload": label, "requests": len(trace), "before": before, "none": none}
    t0 = time.perf_counter()
    light = _best_at_rate(ctx2, finalist_plans(ctx2, seed, start=survivors, moves=("flip",)), trace, rps, engine)
    light_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    # the light plan is a full plan too: a full re-plan never does worse than the light one
    ranked = finalist_plans(ctx2, seed)
    if light is not None and all(p != light["plan"] for p, _ in ranked):
        ranked.append((light["plan"], light["throughput_rps"]))
    full = _best_at_rate(ctx2, ranked, trace, rps, engine)
    full_s = time.perf_counter() - t0
    # no light plan where a full one exists: the survivors' groups cannot pair by flips alone
    no_light = None if full is None else ("the surviving replica groups hold no prefill and decode pair by "
                                          "phase flips alone (the full re-plan regroups and reloads weights)")
    res["light"] = {**(light or _no_split_replan(ctx2, no_light)), "elapsed_s": light_s}
    res["full"] = {**(full or _no_split_replan(ctx2)), "elapsed_s": full_s}
    for name in ("light", "full"):
        if "plan" in res[name]:
            res[name]["replicas"] = replicas_json(ctx2, res[name].pop("plan"), res[name].pop("routing"))
    res["none"]["throughput_rps"] = score(ctx2.scorer, survivors) if survivors else 0.0
    return res


def _no_split_replan(ctx2, reason=None) -> dict:
    """A re-plan's answer that found no split plan: `reason`, by default that the inventory
    left has none (a lightweight re-plan can find none where a full one finds some)."""
    return {"no_split_plan": reason or no_split_plan_reason(ctx2), "replicas": [], "throughput_rps": 0.0,
            "slo_attainment": no_attainment()}


def _best_at_rate(ctx, ranked, trace, rps, engine) -> dict | None:
    """Of the finalists [(plan, predicted rps)], the one the simulation (`engine`) rates best
    at the rate the re-plan must serve: the highest share of requests within every limit,
    then the higher prediction. One run each, not a bisection: a re-plan answers for `rps`.
    None when there are no finalists (no split plan)."""
    best = None
    for p, cap in ranked:
        routing = plan_routing(ctx, p, rps)
        att = simulate_plan(ctx, p, trace, routing, engine=engine)["slo_attainment"]
        if best is None or (att["all"], cap) > (best["slo_attainment"]["all"], best["throughput_rps"]):
            best = {"plan": p, "routing": routing, "slo_attainment": att, "throughput_rps": cap}
    return best


def _survives(stages, k) -> bool:
    """Whether a group keeps all its GPUs once node k has left (k None: no node left)."""
    return k is None or all(n != k for n, _ in stages)


def _renumbered(stages, k):
    """A group's stages with the nodes after node k (removed) one index lower (k None: as they are)."""
    return stages if k is None else tuple((n - (n > k), tp) for n, tp in stages)


def _keep_old_routing(ctx2, routed, k, trace, engine) -> dict:
    """No re-plan: the surviving replicas keep their phases and the old routing (`routed`:
    the plan's (prefill groups, decode groups, Routing)), with the lost replicas' shares
    spread over the rest in proportion."""
    pre, dec, r = routed
    keep_p = [i for i, st in enumerate(pre) if _survives(st, k)]
    keep_d = [j for j, st in enumerate(dec) if _survives(st, k)]
    ds = r.decode_share[np.ix_(keep_p, keep_d)]
    rows = ds.sum(axis=1)
    ok = rows > 0
    if not keep_p or not keep_d or not ok.any():
        return {"slo_attainment": no_attainment()}
    ps = r.prefill_share[keep_p] * ok
    routing = Routing(r.throughput_rps, ps / ps.sum(), np.where(ok[:, None], ds / np.where(ok, rows, 1)[:, None], 0))
    kept_pre, kept_dec = [_renumbered(pre[i], k) for i in keep_p], [_renumbered(dec[j], k) for j in keep_d]
    new = [(st, "prefill") for st in kept_pre] + [(st, "decode") for st in kept_dec]
    return {"slo_attainment": simulate_plan(ctx2, new, trace, (kept_pre, kept_dec, routing),
                                            engine=engine)["slo_attainment"]}


def choose_rental(price_list, llm, perf, traces, rps, kv_bits, slo_scale, seed, target=TARGET_ATTAINMENT,
                  rounds=12, engine="des", phases=SPLIT_PHASES, chunk_budgets=(0,), also=(),
                  scheduler=DEFAULT_SCHEDULER, shared=None):
    """(rental, (plan, chunk budget)): the cheapest node counts (within availability) with a
    plan of `phases` (split, or non-split: ("both",)) that meets `target` attainment at `rps`
    in the simulation (`engine`), that plan, and the chunked-prefill budget of its replicas
    it met the target with (one of `chunk_budgets`; 0: whole prompts; non-split only).

    A small integer program (OR-Tools SCIP) gives the cheapest counts per node type such
    that, each node serving one phase (split: prefill or decode; non-split: both) at its
    type's single-node rates (`_node_rates`), every phase carries a required rate `need`;
    those nodes are planned (a shorter tabu search) and its finalists checked by simulation
    at `rps`: the rental passes when one of them meets the target, as `plan_cloud` lets the
    simulation decide among them.
    `need` starts at rps; after a miss it rises to rps / (sustained / predicted rate)
    of that plan (at most 3x), then is bisected between the largest miss and the cheapest pass.
    The single-node rates rank the node types, and may rank them wrongly: `also` lists more
    rentals (counts per type) to check (the cheapest non-split rental, say, may serve the
    rate split too), and up to CHEAPER_RENTAL_CHECKS rentals under the best pass whose rates
    could carry rps are checked (`_cheaper_pass`); the cheapest passing one of all is chosen.
    rounds=0 checks the rentals `also` lists, only.
    shared : a `SharedRates` for the rentals' scorers (one question's: the same requests, SLO
    reference and KV bits; default: one for this call's rentals)."""
    if rps is None:
        raise ProvisionerError("goal 'cost' needs rps (the load the rented nodes must serve)", params=("goal", "rps"))
    limits = price_list.rentable_counts()
    if not any(limits) and any(t.available is not None for t in price_list.types):
        raise ProvisionerError(f"inventory {price_list.name}: every [[nodes]] entry has `available` = 0, so there is "
                               f"nothing to rent: raise `available` of one")
    if not any(limits):
        raise ProvisionerError(f"inventory {price_list.name}: goal cost needs a price list (nodes with "
                               f"`available` limits)", params=("goal",))
    split = phases != NON_SPLIT_PHASES
    trace, sizes = trace_at(traces, rps), size_sample(traces, rps)   # as the answer then simulates it
    shared = SharedRates() if shared is None else shared
    rates = [_node_rates(price_list, k, llm, perf, sizes, slo_scale, kv_bits, phases, target, shared)
             for k in range(len(limits))]
    how = "split" if split else "non-split"
    everything = tuple(limits)
    most = _most_carried(everything, rates)
    # No search can close that gap: say so before searching. Not when a node type holds no
    # replica alone (rates 0): pipelines across such nodes carry what its rates cannot say.
    counted = all(max(r) > 0 for r, a in zip(rates, limits) if a)
    if counted and rps > RATE_HEADROOM * most:
        raise ProvisionerError(f"no rental within the availability of {price_list.name} serves {rps:g} req/s {how}: "
                               f"every available node together carries about {most:.3g} req/s at its single-node "
                               f"rates: lower rps or raise `available`", params=("rps",))
    verdicts: dict = {}   # counts -> (passes, sustained / predicted rate, the plan that met the target)
    no_split: dict = {}   # counts -> why the rental has no split plan
    question = (price_list, llm, perf, traces, trace, sizes, rps, kv_bits, slo_scale, seed, target, engine, phases,
                chunk_budgets, scheduler)

    def record(counts, checked):
        verdicts[counts], why = checked
        if why is not None:
            no_split[counts] = why
        return verdicts[counts]

    def passes(counts, measure_miss=False):
        return verdicts[counts] if counts in verdicts else record(counts, check_rental(counts, *question, measure_miss,
                                                                                      shared))

    lo, need, best = 0.0, float(rps), None     # best: (counts, need) of the cheapest pass
    for _ in range(rounds):
        counts = _cheapest_counts(price_list, limits, rates, need) or everything
        ok, realised, _ = passes(counts, measure_miss=best is None)   # the next `need` reads it until a pass
        if ok:
            best = (counts, need)
            if need <= max(lo, rps) * 1.05:
                break
            need = 0.5 * (max(lo, rps) + need)
        elif counts == everything:
            break   # renting every available node is not enough
        else:
            lo = need
            need = 0.5 * (lo + best[1]) if best else min(max(rps / max(realised, 1e-3), lo * 1.3), lo * 3.0)
    for counts in also:
        if (best is None or _cost(price_list, counts) < _cost(price_list, best[0])) and passes(tuple(counts))[0]:
            best = (tuple(counts), None)
    if best is not None and rounds > 0:
        # The single-node rates are the analytic model's, which can rank node types wrongly (a
        # 4x3090 Ti decode node holds 13k KV tokens: two long coding prompts fill it, and the
        # simulation's TBT misses what the mean-based rate predicts); so cheaper rentals
        # whose rates could carry rps are checked too, the cheapest and the likeliest to pass.
        cheaper = [c for c in _rentals_by_cost(price_list, limits, rates, rps, _cost(price_list, best[0]))
                   if c not in verdicts][:MAX_CHEAPER_RENTALS]
        best = _cheaper_pass(cheaper, rates, verdicts, question, record, shared) or best
    if best is None and everything in no_split:
        raise ProvisionerError(f"{no_split[everything]}: raise `available` of a [[nodes]] entry so that the rental "
                               f"can hold a prefill and a decode replica")
    if best is None:
        raise ProvisionerError(f"no rental within the availability of {price_list.name} serves {rps:g} req/s "
                               f"{how} at {target:.0%} attainment: lower rps or raise `available`", params=("rps",))
    return price_list.with_counts(best[0]), verdicts[best[0]][2]


def check_rental(counts, price_list, llm, perf, traces, trace, sizes, rps, kv_bits, slo_scale, seed, target, engine,
                 phases, chunk_budgets, scheduler=DEFAULT_SCHEDULER, measure_miss=True, shared=None) -> tuple:
    """`choose_rental`'s check of one rental (`counts` nodes per type of `price_list`): its
    shorter search's finalists simulated at `rps` on `trace`. Returns ((passes, sustained /
    predicted rate, (plan, chunk budget) that met the target or None), why the rental has
    no plan of `phases` or None). The sustained rate of a failing rental takes a bisection
    of DES runs; with `measure_miss` False it is not measured (nan): only `choose_rental`'s
    steps before its first pass read it (coding on cloud-prices at 4 req/s: a third of the
    answer's DES runs measured rates nothing read). shared : as `choose_rental`'s."""
    split = phases != NON_SPLIT_PHASES
    ctx = make_context(price_list.with_counts(counts), llm, perf, sizes, slo_scale, kv_bits, reference=price_list,
                       target=target, scheduler=scheduler, shared=shared)
    ranked = finalist_plans(ctx, seed, phases=phases, steps=RENTAL_SEARCH_STEPS)
    if not ranked:   # room for one replica: nothing to split, at any rate
        return (False, 0.0, None), no_split_plan_reason(ctx, f"every node {price_list.name} makes available")
    met = next(((plan, c) for plan, _ in ranked for c in chunk_budgets
                if meets_target(ctx, plan, trace, rps, target, split, engine, c)), None)
    plan, cap = ranked[0]
    if met is None and not measure_miss:
        return (False, math.nan, None), None
    realised = 1.0 if met is not None else (
        sustained_rps(ctx, plan, traces, cap, target, split=split, engine=engine,
                      chunk_tokens=chunk_budgets[0]) / max(cap, 1e-9))
    return (met is not None, realised, met), None


def _cheaper_pass(candidates, rates, verdicts, question, record, shared=None) -> tuple | None:
    """(counts, None) of the cheapest of `candidates` (cheapest first) seen to pass
    `check_rental` in at most CHEAPER_RENTAL_CHECKS checks, or None. Two walks share
    them, a check of each in turn: the cheapest candidate left, and the one whose nodes
    carry the most at their single-node rates (`_most_carried`), checked when the first
    fails. The analytic rates overrate most rentals (the DES sustains 0.84-1.0 of them on
    cloud-prices), so the candidates with the most headroom are the likeliest to pass; the
    cheapest-first walk alone spent its checks on near misses (coding at 4 req/s: six
    rentals with 1.06-1.14x headroom failed, and the 6.79 $/h one with 1.33x, ninth
    cheapest, went unchecked; at 4.5 req/s it was rented: a dearer answer for a lighter
    load). A pass drops every dearer candidate; a failure drops the candidates it holds node
    for node (fewer nodes of every type serve no more).
    The second walk's check ran in a worker beside the first's until the rentals shared
    their rates (`SharedRates`, which a worker cannot read: it pickles empty): here it takes
    half the CPU time of a worker's, and coding at 4 req/s answered in 15.6-16.2 s against
    15.5-22.5 s with the worker (load average ~3, 2 cores); the verdicts, and so the
    choice, are the same."""
    price_list = question[0]
    headroom = dict(zip(candidates, _most_carried(candidates, rates))) if candidates else {}
    failed = [c for c, (ok, _, _) in verdicts.items() if not ok]
    found, checks = None, 0

    def worth_checking(c, below) -> bool:
        return _cost(price_list, c) < below and not any(all(a <= b for a, b in zip(c, f)) for f in failed)

    left = [c for c in candidates if worth_checking(c, math.inf)]
    while left and checks < CHEAPER_RENTAL_CHECKS:
        here = left[0]
        ahead = max(left[1:], key=headroom.get) if len(left) > 1 and checks + 1 < CHEAPER_RENTAL_CHECKS else None
        checks += 1
        if record(here, check_rental(here, *question, False, shared))[0]:
            return here, None   # every candidate left is dearer
        failed.append(here)
        if ahead is not None:
            checks += 1
            if record(ahead, check_rental(ahead, *question, False, shared))[0]:
                found = ahead
            else:
                failed.append(ahead)
        below = _cost(price_list, found) if found is not None else math.inf
        left = [c for c in left if c not in (here, ahead) and worth_checking(c, below)]
    return (found, None) if found is not None else None


def _node_rates(price_list, k, llm, perf, trace, slo_scale, kv_bits, phases, target, shared=None) -> tuple[float, ...]:
    """The rps of one node of type k cut into equal TP groups, per phase of `phases` (the
    best TP for each). Network cards are not a cap here: a node may host a prefill and a
    decode replica, whose KV never crosses its card (capping each node's rate by its card
    rented 19.43 $/h where the simulation's correction of `need` finds 11.95, coding at
    3 req/s with 40-Gbps cards)."""
    one = price_list.with_counts([int(i == k) for i in range(len(price_list.types))])
    try:
        ctx = make_context(one, llm, perf, trace, slo_scale, kv_bits, reference=price_list, target=target,
                           shared=shared)
    except ProvisionerError:
        return (0.0,) * len(phases)
    gpus = one.types[k].gpus
    rate = {"prefill": lambda g: ctx.scorer.prefill(g)[0], "decode": lambda g: ctx.scorer.decode(g)[0],
            "both": ctx.scorer.both}
    best = [0.0] * len(phases)
    for tp in machine_tp_degrees(gpus):
        group = ((0, tp),)
        if ctx.physics.group(group):
            best = [max(b, gpus // tp * rate[ph](group)) for b, ph in zip(best, phases)]
    return tuple(best)


def _cost(price_list, counts) -> float:
    return sum(n * t.price_usd_per_h for n, t in zip(counts, price_list.types))


def _most_carried(counts, rates) -> float | np.ndarray:
    """The highest rate in every phase that node counts (one row per rental, or one vector)
    carry at `rates` (per type, per phase) when each node may give fractions of itself to
    the phases: an upper bound on the split a plan makes. Two phases: every node starts in
    decode; moving nodes to prefill in the order of prefill rate gained per decode rate
    given up traces the best (prefill, decode) frontier, and the answer is where it
    crosses prefill = decode (exact; a fractional knapsack)."""
    n = np.atleast_2d(np.asarray(counts, dtype=float))
    rates = np.asarray(rates, dtype=float)
    if rates.shape[1] == 1:
        return _as_given(n @ rates[:, 0], counts)
    p, d = rates[:, 0], rates[:, 1]
    order = sorted(range(len(p)), key=lambda k: -p[k] / d[k] if d[k] > 0 else -np.inf)
    gain, loss = n[:, order] * p[order], n[:, order] * d[order]
    zero = np.zeros((len(n), 1))
    prefill = np.hstack([zero, np.cumsum(gain, axis=1)])                  # at each breakpoint
    decode = (n @ d)[:, None] - np.hstack([zero, np.cumsum(loss, axis=1)])
    cross = np.argmax(prefill >= decode, axis=1)   # the first breakpoint past the crossing
    rows = np.arange(len(n))
    before = np.maximum(cross - 1, 0)
    p0, d0 = prefill[rows, before], decode[rows, before]
    step_p, step_d = prefill[rows, cross] - p0, d0 - decode[rows, cross]
    t = np.where(step_p + step_d > 0, (d0 - p0) / np.where(step_p + step_d > 0, step_p + step_d, 1), 0.0)
    most = np.where(cross == 0, np.minimum(prefill[:, 0], decode[:, 0]), p0 + t * step_p)
    return _as_given(most, counts)


def _as_given(per_row, counts):
    """A float for one count vector, else the array (one per row)."""
    return float(per_row[0]) if np.ndim(counts) == 1 else per_row


def _rentals_by_cost(price_list, limits, rates, rps, below) -> list[tuple]:
    """Node counts within `limits` costing less than `below`, cheapest first, whose nodes
    could carry `rps` in every phase at their single-node `rates` (`_most_carried`); none
    when the price list has more than MAX_RENTALS_LISTED count vectors. Necessary at the
    analytic rates only: the DES can sustain more than they say (on cloud-prices, coding at
    4 req/s non-split, the 6.79 $/h rental passes with rates summing to 3.88), so a rental
    left out here may pass."""
    if math.prod(a + 1 for a in limits) > MAX_RENTALS_LISTED:
        return []
    counts = np.array(list(itertools.product(*(range(a + 1) for a in limits)))[1:], dtype=int)   # all but none
    cost = sum(counts[:, k] * t.price_usd_per_h for k, t in enumerate(price_list.types))   # as `_cost` adds
    keep = (cost < below) & (_most_carried(counts, rates) >= rps)
    return [tuple(int(x) for x in counts[i]) for i in np.flatnonzero(keep)[np.argsort(cost[keep], kind="stable")]]


def _cheapest_counts(price_list, limits, rates, need) -> tuple | None:
    """Cheapest node counts per type (within `limits`) whose nodes, each given to one phase
    at its type's rate (`rates[type][phase]`), carry `need` rps in every phase."""
    from ortools.linear_solver import pywraplp

    solver = pywraplp.Solver.CreateSolver("SCIP")
    n_phases = len(rates[0])
    nodes = [[solver.IntVar(0, a, "") for _ in range(n_phases)] for a in limits]   # [type][phase]
    for per_phase, a in zip(nodes, limits):
        solver.Add(solver.Sum(per_phase) <= a)
    solver.Add(solver.Sum([v for x in nodes for v in x]) >= 1)   # a need under the solver's tolerance rents nothing
    for ph in range(n_phases):
        solver.Add(solver.Sum([x[ph] * r[ph] for x, r in zip(nodes, rates)]) >= need)
    solver.Minimize(solver.Sum([solver.Sum(x) * t.price_usd_per_h for x, t in zip(nodes, price_list.types)]))
    if solver.Solve() != pywraplp.Solver.OPTIMAL:
        return None
    return tuple(int(round(sum(v.solution_value() for v in x))) for x in nodes)


