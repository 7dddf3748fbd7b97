"""`SearchProblem`: the question one `provision` call poses, and the only place the search
consults the latency model and the catalog (capacities, unit costs and powers, spaces,
bounds, the search trace, SLO reachability)."""

from __future__ import annotations

import math
import warnings
from dataclasses import replace

import numpy as np
import pandas as pd

from perfmodels import LatencyModel

from ..designs import CUSTOM_FAMILIES, MAX_DESIGN_MACHINES, DesignBatch
from ..errors import ProvisionerError
from ..sim import cluster_cost_power, simulate, unservable_reason
from ..slo import PERCENTILES, SLO_REFERENCE_TP
from ..store import latency_model_digest
from ._capacity import Demand, MachineCapacity, machine_capacity, tp_options
from ._evaluate import Evaluator, engine_for, preemption_key, stored_rows
from ._ilp import CapacityBound, capacity_bound, pool_options
from ._progress import Progress
from ._request import ProvisionRequest
from ._space import BOUND_FACTOR, FamilySpace, count_bound, family_space, most_machines_needed
from ._verify import DesPool

ILP_CAP_STEPS = 7               # power-cap grid of the integer program for a cap range
MAX_BUDGET_MACHINES = 10_000    # machines per pool a throughput budget may buy (the designs are enumerated)


def objective_key(goal: str) -> str:
    """The result column a goal minimizes (cost and power goals)."""
    return "power_kw" if goal == "power" else "cost_usd_per_h"


class SearchProblem:
    """The shared pieces of one `provision` call: the request, the latency model, the
    search trace and its demand, and a cache of per-machine capacities.

    >>> problem = SearchProblem(ProvisionRequest(goal="cost", rps=70, families=("splitwise-hh",)))
    >>> problem.space("splitwise-hh").prompt.machines
    ('dgx-h100',)
    """

    def __init__(self, request: ProvisionRequest, perf: LatencyModel | None = None,
                 progress: Progress | None = None, store=None):
        self.req = request
        self.store = store          # a `provisioner.store.ResultStore`, or None
        self.perf = perf if perf is not None else LatencyModel()
        self.llm = self.perf.llm(request.model)
        for m in (request.prompt_machine_types or ()) + (request.token_machine_types or ()):
            self.perf.catalog.machine(m)
        self.progress = progress or Progress()
        self.slo = request.effective_slo
        # Every trace of the search comes from the one generator (`workloads.TraceGenerator`),
        # nested across rates: a higher load holds the same requests, sooner, plus more of them.
        self.scaled = request.traces()
        if request.goal == "throughput":
            self.trace = None
            sample = self.scaled.at(max(1.0, 2000.0 / request.duration_s))
        else:
            self.trace = self.scaled.at(request.rps)
            sample = self.trace
        self.demand = Demand.from_trace(sample)
        self._caps: dict[tuple, MachineCapacity] = {}
        self.des_pool = DesPool()   # the workers of every family's discrete-event re-check

    @property
    def catalog(self):
        return self.perf.catalog

    # -- capacity ----------------------------------------------------------------------
    def capacity(self, machine: str, cap: float, tp: int = 0) -> MachineCapacity:
        """Capacity of one machine option (TP 0: the whole machine)."""
        key = (machine, round(float(cap), 6), int(tp))
        if key not in self._caps:
            self._caps[key] = machine_capacity(self.perf, self.llm, self.demand, machine, cap, int(tp) or None)
        return self._caps[key]

    def pool_capacities(self, pool) -> tuple[list[MachineCapacity], list[float]]:
        """Capacity options of a pool; for a cap range, the (speed at upper, power at lower) envelope."""
        caps = pool.cap_grid(ILP_CAP_STEPS)
        fast, low = [], []
        for m, tp in pool.choices:
            if len(caps) == 1:
                fast.append(self.capacity(m, caps[0], tp))
                low.append(float(caps[0]))
            else:
                for a, b in zip(caps[:-1], caps[1:]):
                    fast.append(self.capacity(m, b, tp))
                    low.append(float(a))
                fast.append(self.capacity(m, caps[-1], tp))
                low.append(float(caps[-1]))
        return fast, low

    def bound(self, space: FamilySpace, *, goal: str, rps=None) -> CapacityBound:
        """The integer program's bound on the goal's objective over `space`."""
        pf, pl = self.pool_capacities(space.prompt)
        if space.mps_shares != (0.0,):
            # Splitwiser: a machine's prefill and decode processes each run at most at solo
            # speed (perfmodels.shared_iteration_s), so it does at most twice a machine's work.
            pf = [replace(c, prompt_s_per_request=c.prompt_s_per_request / 2,
                          decode_s_per_request=c.decode_s_per_request / 2) for c in pf]
        popts = pool_options(pf, pl, self.catalog)
        topts = None
        if space.token is not None:
            tf, tl = self.pool_capacities(space.token)
            topts = pool_options(tf, tl, self.catalog)
        if not popts or (topts is not None and not topts):
            return CapacityBound(float("nan"), goal, None, "infeasible")
        return capacity_bound(popts, topts, self.demand, goal=goal, rps=rps,
                              cost_budget_usd_per_h=self.req.cost_budget_usd_per_h,
                              power_budget_kw=self.req.power_budget_kw,
                              max_prompt=space.prompt.max_machines,
                              max_token=space.token.max_machines if space.token is not None else 1)

    # -- SLO reachability ----------------------------------------------------------------
    def unservable(self, family: str) -> str | None:
        """Why some requests fit on no machine of `family` (KV cache too large), or None."""
        space = self.space(family, bounds=(1, 1))
        machines = [*space.prompt.machines, *(space.token.machines if space.token is not None else ())]
        return unservable_reason(self.demand.prompt_tokens, self.demand.output_tokens, self.llm, self.perf,
                                 machines)

    def unreachable_slo(self, family: str) -> str | None:
        """Why no design of `family` can meet the SLO (each request alone on its fastest
        hardware already violates a percentile), or None."""
        space = self.space(family, bounds=(1, 1))
        tok_pool = space.token if space.token is not None else space.prompt
        best = None
        for pm in space.prompt.machines:
            for tm in tok_pool.machines:
                if self.capacity(pm, space.prompt.power_cap[1]).kv_capacity_tokens <= 0 or \
                        self.capacity(tm, tok_pool.power_cap[1]).kv_capacity_tokens <= 0:
                    continue
                worst = self._solo_violation(pm, space.prompt.power_cap[1], tm, tok_pool.power_cap[1])
                if worst is None:
                    return None
                best = best or worst
        if best is None:
            fams = ", ".join(dict.fromkeys(space.prompt.machines + tok_pool.machines))
            return (f"{self.llm.name} does not fit in the memory of a {fams} machine: use machines with more "
                    f"GPU memory")
        return (f"no machine can meet the SLO even alone on an idle machine ({best}), so no number of machines "
                f"helps: loosen it (slo_scale > 1) or use faster machines")

    def _solo_violation(self, pm: str, pcap: float, tm: str, tcap: float) -> str | None:
        """The first percentile a prompt machine `pm` + token machine `tm` violate with
        every request alone, or None."""
        ref = self.catalog.machine(self.slo.reference_machine)
        s = self.demand.prompt_tokens
        n = self.demand.output_tokens
        solo = self.perf.solo_request_s(self.llm, ref.gpu, SLO_REFERENCE_TP, s, n)
        pmach, tmach = self.catalog.machine(pm), self.catalog.machine(tm)
        ttft, _, _ = self.perf.solo_request_s(self.llm, pmach.gpu, pmach.gpus_per_machine, s, n, pcap)
        _, tbt, _ = self.perf.solo_request_s(self.llm, tmach.gpu, tmach.gpus_per_machine, s, n, tcap)
        e2e = ttft + np.maximum(n - 1, 0) * tbt
        worst = None
        for m, mine, ref_m in (("ttft", ttft, solo[0]), ("tbt", tbt, solo[1]), ("e2e", e2e, solo[2])):
            keep = n > 1 if m == "tbt" else np.ones(len(n), bool)
            if not keep.any():
                continue
            pct = np.percentile(mine[keep] / ref_m[keep], PERCENTILES)
            for p, v, lim in zip(PERCENTILES, pct, getattr(self.slo, m)):
                # No slack alone means a violation under any load at all.
                if v >= lim * (1 - 1e-6):
                    worst = worst or f"{m}_p{p} slowdown {v:.2f}x > {lim:g}x on {pm}/{tm}"
        return worst

    # -- spaces ----------------------------------------------------------------------------
    def space(self, family: str, bounds: tuple[int, int] | None = None) -> FamilySpace:
        """The design space of `family` for this request, with count bounds (derived from
        the capacity model unless given)."""
        req = self.req
        kwargs = {"prefill_chunk_tokens": req.prefill_chunk_tokens, "mps_prefill_share": req.mps_prefill_share,
                  "duplicate_weights": req.duplicate_weights}
        if family in CUSTOM_FAMILIES:
            machines = tuple(dict.fromkeys((req.prompt_machine_types or ()) + (req.token_machine_types or ())))
            tp = tuple((m, tp_options(self.perf, self.llm, m)) for m in machines) if req.search_tp else ()
            kwargs.update(prompt_machines=req.prompt_machine_types, token_machines=req.token_machine_types,
                          power_cap=req.power_cap_range, prompt_batch_caps=req.prompt_batch_caps, tp=tp)
        sp = replace(family_space(family, **kwargs), catalog=self.perf.catalog, scheduler=req.scheduler)
        if bounds is not None:
            return sp.with_bounds(*bounds)
        return sp.with_bounds(*self.count_bounds(sp))

    def count_bounds(self, sp: FamilySpace) -> tuple[int, int]:
        req = self.req
        if req.max_machines is not None:
            return req.max_machines, req.max_machines
        if req.goal == "throughput":
            return self.budget_bounds(sp)
        # Enough of the slowest option for BOUND_FACTOR x the bare work, in either pool
        # (machines of either pool serve both phases when lent).
        work = 0.0
        for pool in (sp.prompt, sp.token):
            if pool is None:
                continue
            for m in pool.machines:
                c = self.capacity(m, pool.power_cap[0])
                if c.kv_capacity_tokens > 0:
                    work = max(work, c.work_s_per_request)
        self.refuse_unsimulable_rate(sp, work)
        n = count_bound(req.rps * work)
        return n, n

    def refuse_unsimulable_rate(self, sp: FamilySpace, work_s_per_request: float) -> None:
        """Refuse a load whose count bound (`count_bound`) passes `MAX_DESIGN_MACHINES`, the
        most machines per pool a design may have: the search would simulate designs no
        other command accepts, for as long as it takes (or overflow), instead of answering."""
        rps = float(self.req.rps)
        most = most_machines_needed(MAX_DESIGN_MACHINES)
        needed = rps * work_s_per_request
        if needed <= most:   # also False for an infinite or NaN need
            return
        fits = most / work_s_per_request
        e = math.floor(math.log10(fits)) - 2
        fits = math.floor(fits / 10 ** e) * 10 ** e    # three significant digits, rounded down
        replay = self.req.arrival == "replay" and rps == self.scaled.native_rps
        load = (f"the replayed trace '{self.scaled.label}' at its own rate, {rps:.3g} req/s," if replay
                else f"rps {rps:g}")
        raise ProvisionerError(
            f"{load} gives {sp.family} a count bound over {MAX_DESIGN_MACHINES:,} machines per pool ({BOUND_FACTOR:g}x "
            f"the machines its bare work needs), more than a design may have; give rps of at most about "
            f"{fits:,.{max(0, -e)}f} req/s{' to time-scale the trace' if replay else ''}", params=("rps",))

    def hardware_bounds(self, space: FamilySpace, hw: dict, rps: float) -> tuple[int, int]:
        """Count bounds of one hardware choice: BOUND_FACTOR x the machines its work needs."""
        if self.req.max_machines is not None:
            return self.req.max_machines, self.req.max_machines
        most = most_machines_needed(MAX_DESIGN_MACHINES)   # no design has more (`count_bounds` refused more)
        cp = self.capacity(hw["prompt_machine"], hw["prompt_power_cap"], hw.get("prompt_tp", 0))
        n_p = count_bound(min(rps * cp.work_s_per_request, most))
        if space.token is None:
            return n_p, 1
        ct = self.capacity(hw["token_machine"], hw["token_power_cap"], hw.get("token_tp", 0))
        return n_p, count_bound(min(rps * ct.work_s_per_request, most))

    # -- budgets and objectives ------------------------------------------------------------
    def budget_bounds(self, sp: FamilySpace) -> tuple[int, int]:
        per = self._cheapest_units(sp)
        budget = self.budget
        if sp.token is None:
            return max(1, int(np.floor(budget / per[0] + 1e-9))), 1
        return (max(1, int(np.floor((budget - per[1]) / per[0] + 1e-9))),
                max(1, int(np.floor((budget - per[0]) / per[1] + 1e-9))))

    def refuse_unenumerable_budget(self, sp: FamilySpace) -> None:
        """Refuse a budget that buys over `MAX_BUDGET_MACHINES` machines of one pool: the
        affordable designs are enumerated count by count (`budget_candidates`), up to
        max_machines per pool when it is given."""
        per = self._cheapest_units(sp)
        fixed = sum(per) - min(per)   # the other pool's one machine, if any
        enumerated = min((self.budget - fixed) / min(per), self.req.max_machines or np.inf)
        if enumerated > MAX_BUDGET_MACHINES:
            param = "power_budget_kw" if self.budget_key == "power_kw" else "cost_budget_usd_per_h"
            unit = "kW" if self.budget_key == "power_kw" else "$/h"
            raise ProvisionerError(
                f"{param} {self.budget:g} buys over {MAX_BUDGET_MACHINES:,} machines of one pool of {sp.family}, "
                f"more than the planner simulates; give a budget of at most "
                f"{fixed + MAX_BUDGET_MACHINES * min(per):,.0f} {unit}, or max_machines of at most "
                f"{MAX_BUDGET_MACHINES:,}", params=(param, "max_machines"))

    def _cheapest_units(self, sp: FamilySpace) -> list[float]:
        """The least budget one machine of each pool of `sp` takes (its lowest power cap)."""
        return [min(self.unit_objective(m, pool.power_cap[0]) for m in pool.machines)
                for pool in (sp.prompt, sp.token) if pool is not None]

    @property
    def budget(self) -> float:
        r = self.req
        return float(r.power_budget_kw if r.power_budget_kw is not None else r.cost_budget_usd_per_h)

    @property
    def budget_key(self) -> str:
        return "power_kw" if self.req.power_budget_kw is not None else "cost_usd_per_h"

    def budget_text(self) -> str:
        r = self.req
        return f"{r.power_budget_kw:g} kW" if r.power_budget_kw is not None else f"${r.cost_budget_usd_per_h:g}/h"

    def smallest_text(self, space: FamilySpace) -> str:
        """The budget the smallest design of `space` needs, in the budget's unit."""
        key = self.budget_key
        unit = "kW" if key == "power_kw" else "$/h"
        up = min(self.unit_objective(m, space.prompt.power_cap[0], key) for m in space.prompt.machines)
        ut = 0.0 if space.token is None else min(self.unit_objective(m, space.token.power_cap[0], key)
                                                 for m in space.token.machines)
        return f"{up + ut:.1f} {unit}"

    def unit_objective(self, machine: str, cap: float, key: str | None = None) -> float:
        key = key or (self.budget_key if self.req.goal == "throughput" else objective_key(self.req.goal))
        m = self.catalog.machine(machine)
        return float(m.cost_usd_per_h) if key == "cost_usd_per_h" else float(m.power_w(cap)) / 1e3

    def objective_of(self, space: FamilySpace, key: str):
        """(p, t) -> objective for a fixed-hardware space (cost and power are linear in the counts)."""
        up = self.unit_objective(space.prompt.machines[0], space.prompt.power_cap[1], key)
        ut = 0.0 if space.token is None else self.unit_objective(space.token.machines[0], space.token.power_cap[1],
                                                                 key)
        return lambda p, t: np.asarray(p, float) * up + np.asarray(t, float) * ut

    def objective_values(self, batch: DesignBatch, key: str) -> np.ndarray:
        """Cost ($/h) or power (kW) of each design of `batch`."""
        cost, power = cluster_cost_power(batch, self.catalog)
        return power if key == "power_kw" else cost

    def durable_study(self, family: str):
        """The RDB study that records `family`'s optuna trials (None without a store), named
        after the question's content hash."""
        if self.store is None:
            return None
        from ..store import code_version, digest, trace_digest
        from ._study import DurableStudy
        key = digest(repr(self.req), trace_digest(self.trace), latency_model_digest(self.perf), code_version())
        return DurableStudy(self.store, f"{family}-{key[:20]}")

    # -- simulations -------------------------------------------------------------------------
    def evaluator(self, trace, counter: list, rps: float | None = None) -> Evaluator:
        """The one evaluation path on `trace` (drawn at `rps`); `counter[0]` counts its simulations."""
        def tick(n):
            counter[0] += n
            self.progress.advance(n)
        return Evaluator(trace, self.req.model, self.slo, self.perf, on_evaluate=tick, store=self.store,
                         preemption=self.req.preemption, swap_space_gb=self.req.swap_space_gb, rps=rps)

    def final_row(self, design, trace) -> pd.Series:
        """The reported design scored in full (no early stop), for every metric of the result."""
        def run(_missing):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                frame = simulate(design, trace, self.req.model, slo=self.slo, perf=self.perf,
                                 engine=engine_for(DesignBatch.from_designs(design), "fluid"),
                                 preemption=self.req.preemption, swap_space_gb=self.req.swap_space_gb)
            return frame.to_dict("records")
        context = (self.req.model, repr(self.slo), latency_model_digest(self.perf),
                   *preemption_key(self.req.preemption, self.req.swap_space_gb))
        return pd.Series(stored_rows(self.store, "final", context, design, [trace], run)[0])
