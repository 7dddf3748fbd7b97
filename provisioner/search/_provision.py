"""`provision(request)`: search every family, verify the finalists, pick the winner.

Per family (Splitwise Sec. IV-D):

1. the space (`_space.py`) with count bounds from the capacity model;
2. the integer program's bound (`_ilp.py`) — the lower bound on cost or power, or the
   upper bound on throughput, and the starting point of the search;
3. the search, always through one `Evaluator` (batched fluid simulations):
   goals cost / power — the frontier search on a count grid (`_enumerate.py`) or optuna
   on a wider space (`_bayes.py`); goal throughput — the designs the budget affords at
   most, raced by bisection on the load (`_throughput.py`);
4. verification of the finalists with the discrete-event engine (`_verify.py`);
5. the reported design re-scored in full (no early stop) for the result.
"""

from __future__ import annotations

import time
import warnings

import numpy as np
import pandas as pd

from perfmodels import LatencyModel

from ..designs import CUSTOM_BASELINE, CUSTOM_SPLIT, DesignBatch
from ..errors import ProvisionerError
from ..sim import cluster_cost_power, simulate
from ..sim._servable import KV_CAPACITY_CHECK, unservable_reason
from ..slo import PERCENTILES, SLO_REFERENCE_TP
from ._bayes import bayes_search
from ._capacity import Demand, MachineCapacity, machine_capacity, tp_options
from ._enumerate import Staircase, exhaustive_search, staircase_search
from ._evaluate import Evaluator
from ._ilp import CapacityBound, capacity_bound, gap_pct, pool_options
from ._request import ProvisionRequest
from ._result import FamilyResult, ProvisionResult
from ._space import FamilySpace, count_bound, family_space
from ._throughput import MIN_REQUESTS, LoadScaledTraces, max_sustainable_rps
from ._verify import verify_candidates

MAX_EXPANSIONS = 2              # count bounds double at most this often before giving up
ILP_CAP_STEPS = 7               # power-cap grid of the integer program for a cap range
THROUGHPUT_MAX_CANDIDATES = 96  # designs raced per family (best capacity estimates first)
THROUGHPUT_VERIFY_STEP = 0.03   # a sustainable rps that fails the DES is lowered by 3% and retried
THROUGHPUT_VERIFY_TRIES = 6


class Progress:
    """Progress hooks (the CLI draws rich bars; the default does nothing)."""

    def start(self, label: str, total: int | None = None) -> None:
        pass

    def advance(self, n: int = 1) -> None:
        pass

    def done(self) -> None:
        pass


def provision(request: ProvisionRequest, *, progress: Progress | None = None,
              perf: LatencyModel | None = None) -> ProvisionResult:
    """Answer a provisioning question (see `ProvisionRequest`)."""
    t0 = time.perf_counter()
    progress = progress or Progress()
    perf = perf if perf is not None else LatencyModel()
    llm = perf.llm(request.model)
    for m in (request.prompt_machine_types or ()) + (request.token_machine_types or ()):
        perf.catalog.machine(m)
    ctx = _Context(request, perf, llm, progress)
    unreachable = {f: ctx.unservable(f) or ctx.unreachable_slo(f) for f in request.families}
    if all(unreachable.values()):
        raise ProvisionerError(next(iter(unreachable.values())))
    results = []
    for family in request.families:
        if unreachable[family]:
            results.append(FamilyResult(family, False, None, request.rps, reason=unreachable[family],
                                        searcher="ilp+enumeration" if ctx.space(family, (1, 1)).is_grid
                                        else "optuna"))
            continue
        t_family = time.perf_counter()
        if request.goal == "throughput":
            results.append(ctx.throughput_family(family))
        else:
            results.append(ctx.objective_family(family))
        results[-1].elapsed_s = time.perf_counter() - t_family
    evaluated = pd.concat([f.details.pop("scored") for f in results if "scored" in f.details] or [pd.DataFrame()],
                          ignore_index=True)
    return ProvisionResult(request, results, evaluated, time.perf_counter() - t0, perf.catalog)


class _Context:
    """The shared pieces of one `provision` call (trace, demand, latency model)."""

    def __init__(self, request: ProvisionRequest, perf: LatencyModel, llm, progress: Progress):
        self.req = request
        self.perf = perf
        self.llm = llm
        self.progress = progress
        self.slo = request.effective_slo
        # Every trace of the search comes from one unit-rate stream per seed (`_throughput.py`):
        # a higher load holds the same requests, sooner, plus more of them.
        self.scaled = LoadScaledTraces(request.workload, request.duration_s, request.seed)
        if request.goal == "throughput":
            self.trace = None
            sample = self.scaled.at(max(1.0, 2000.0 / request.duration_s))
        else:
            self.trace = self.scaled.at(request.rps)
            sample = self.trace
        self.demand = Demand.from_trace(sample)
        self._caps: dict[tuple, MachineCapacity] = {}

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
        pf, pl = self.pool_capacities(space.prompt)
        popts = pool_options(pf, pl, self.perf.catalog)
        topts = None
        if space.token is not None:
            tf, tl = self.pool_capacities(space.token)
            topts = pool_options(tf, tl, self.perf.catalog)
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
        ref = self.perf.catalog.machine(self.slo.reference_machine)
        s = self.demand.prompt_tokens
        n = self.demand.output_tokens
        solo = self.perf.solo_request_s(self.llm, ref.gpu, SLO_REFERENCE_TP, s, n)
        tok_pool = space.token if space.token is not None else space.prompt
        best = None
        for pm in space.prompt.machines:
            for tm in tok_pool.machines:
                pmach, tmach = self.perf.catalog.machine(pm), self.perf.catalog.machine(tm)
                if self.capacity(pm, space.prompt.power_cap[1]).kv_capacity_tokens <= 0 or \
                        self.capacity(tm, tok_pool.power_cap[1]).kv_capacity_tokens <= 0:
                    continue
                ttft, _, _ = self.perf.solo_request_s(self.llm, pmach.gpu, pmach.gpus_per_machine, s, n,
                                                      space.prompt.power_cap[1])
                _, tbt, _ = self.perf.solo_request_s(self.llm, tmach.gpu, tmach.gpus_per_machine, s, n,
                                                     tok_pool.power_cap[1])
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
                if worst is None:
                    return None
                best = best or worst
        if best is None:
            fams = ", ".join(dict.fromkeys(space.prompt.machines + tok_pool.machines))
            return (f"{self.llm.name} does not fit in the memory of a {fams} machine: use machines with more "
                    f"GPU memory")
        return (f"no machine can meet the SLO even alone on an idle machine ({best}), so no number of machines "
                f"helps: loosen it (--slo-scale > 1) or use faster machines")

    # -- spaces ----------------------------------------------------------------------------
    def space(self, family: str, bounds: tuple[int, int] | None = None) -> FamilySpace:
        req = self.req
        kwargs = {}
        if family in (CUSTOM_SPLIT, CUSTOM_BASELINE):
            machines = tuple(dict.fromkeys((req.prompt_machine_types or ()) + (req.token_machine_types or ())))
            tp = tuple((m, tp_options(self.perf, self.llm, m)) for m in machines) if req.search_tp else ()
            kwargs = dict(prompt_machines=req.prompt_machine_types, token_machines=req.token_machine_types,
                          power_cap=req.power_cap_range, prompt_batch_caps=req.prompt_batch_caps, tp=tp)
        sp = family_space(family, **kwargs)
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
        worst = 0.0
        for pool in (sp.prompt, sp.token):
            if pool is None:
                continue
            for m in pool.machines:
                c = self.capacity(m, pool.power_cap[0])
                if c.kv_capacity_tokens > 0:
                    worst = max(worst, req.rps * c.work_s_per_request)
        n = count_bound(worst)
        return n, n

    def budget_bounds(self, sp: FamilySpace) -> tuple[int, int]:
        per = []
        for pool in (sp.prompt, sp.token):
            if pool is None:
                continue
            unit = min(self.unit_objective(m, pool.power_cap[0]) for m in pool.machines)
            per.append(unit)
        budget = self.budget
        if sp.token is None:
            return max(1, int(np.floor(budget / per[0] + 1e-9))), 1
        return (max(1, int(np.floor((budget - per[1]) / per[0] + 1e-9))),
                max(1, int(np.floor((budget - per[0]) / per[1] + 1e-9))))

    @property
    def budget(self) -> float:
        r = self.req
        return float(r.power_budget_kw if r.power_budget_kw is not None else r.cost_budget_usd_per_h)

    @property
    def budget_key(self) -> str:
        return "power_kw" if self.req.power_budget_kw is not None else "cost_usd_per_h"

    def unit_objective(self, machine: str, cap: float, key: str | None = None) -> float:
        key = key or (self.budget_key if self.req.goal == "throughput" else _objective_key(self.req.goal))
        m = self.perf.catalog.machine(machine)
        return float(m.cost_usd_per_h) if key == "cost_usd_per_h" else float(m.power_w(cap)) / 1e3

    def objective_of(self, space: FamilySpace, key: str):
        """(p, t) -> objective for a fixed-hardware space (cost and power are linear in the counts)."""
        up = self.unit_objective(space.prompt.machines[0], space.prompt.power_cap[1], key)
        ut = 0.0 if space.token is None else self.unit_objective(space.token.machines[0], space.token.power_cap[1],
                                                                 key)
        return lambda p, t: np.asarray(p, float) * up + np.asarray(t, float) * ut

    def evaluator(self, trace, counter: list) -> Evaluator:
        def tick(n):
            counter[0] += n
            self.progress.advance(n)
        return Evaluator(trace, self.req.model, self.slo, self.perf, on_evaluate=tick)

    # -- goals cost and power ----------------------------------------------------------------
    def objective_family(self, family: str) -> FamilyResult:
        req = self.req
        key = _objective_key(req.goal)
        space = self.space(family)
        grid = space.is_grid and req.searcher != "optuna"
        bound = self.bound(space, goal=req.goal, rps=req.rps)
        self.progress.start(f"{family}: search", None)
        counter = [0]
        ev = self.evaluator(self.trace, counter)
        details: dict = {}
        searcher = "optuna" if not grid else ("ilp+enumeration" if req.searcher == "auto" else "enumeration")
        if grid:
            # Grow the count bounds while the largest design of the space still fails.
            for _ in range(MAX_EXPANSIONS + 1):
                corner = space.designs([space.prompt.max_machines],
                                       [space.token.max_machines if space.token is not None else 0])
                corner_row = ev(corner).iloc[0]
                if corner_row["slo_met"] or req.max_machines is not None:
                    break
                space = space.with_bounds(2 * space.prompt.max_machines,
                                          2 * space.token.max_machines if space.token is not None else None)
            if not corner_row["slo_met"]:
                return self._infeasible(family, ev, counter, bound, corner, searcher, why="search")
            if req.searcher == "exhaustive":
                exhaustive_search(space, ev)
            obj = self.objective_of(space, key)
            sc = staircase_search(space, ev, objective=obj,
                                  lower_bound=bound.value if (req.searcher == "auto" and bound.feasible) else None,
                                  decide_all=req.searcher != "auto")
            details["staircase"] = sc
            if sc.violations:
                details["monotonicity_violations"] = sc.violations
            cand = self._grid_candidates(space, sc, obj)
        else:
            cand, details["bayes"] = self._bayes_candidates(space, ev, bound, key)
            if cand is None:
                biggest = space.designs([space.prompt.max_machines],
                                        [space.token.max_machines if space.token is not None else 0])
                return self._infeasible(family, ev, counter, bound, biggest, searcher, why="search")
        objective = _objective_values(cand, self.perf.catalog, key)
        chosen, verification, reason = self._verify(family, cand, objective, ev, req.rps)
        if chosen is None:
            fr = self._infeasible(family, ev, counter, bound, cand.take(np.array([0])), searcher,
                                  why="verify", verification=verification)
            fr.reason = reason
            return fr
        row = self._final_row(chosen, self.trace)
        value = float(row[key])
        fr = FamilyResult(family, True, row, req.rps, lower_bound=_finite(bound.value),
                          gap_to_bound_pct=_finite(gap_pct(value, bound.value)), searcher=searcher,
                          evaluations=counter[0], verification=verification, staircase=details.get("staircase"),
                          details={**details, "scored": ev.scored(), "bound": bound})
        self.progress.done()
        return fr

    def _grid_candidates(self, space: FamilySpace, sc: Staircase, obj) -> DesignBatch | None:
        p, t = sc.feasible_cells()
        if not len(p):
            return None
        order = np.lexsort((-t, obj(p, t)))
        return space.designs(p[order], t[order])

    def _bayes_candidates(self, space: FamilySpace, ev: Evaluator, bound: CapacityBound, key: str):
        req = self.req
        warm = []
        if bound.warm_start and bound.warm_start.get("prompt"):
            po, _ = bound.warm_start["prompt"]
            hw = {"prompt_machine": po.machine, "prompt_power_cap": po.power_cap, "prompt_tp": po.capacity.tp}
            to = (bound.warm_start.get("token") or (None, 0))[0]
            if to is not None:
                hw.update(token_machine=to.machine, token_power_cap=to.power_cap, token_tp=to.capacity.tp)
            warm.append(hw)
        out = bayes_search(space, ev, objective_fn=lambda fs: self.objective_of(fs, key),
                           bounds=lambda hw: self.hardware_bounds(space, hw, req.rps), n_trials=req.n_trials,
                           batch=req.trial_batch, seed=req.seed if req.sampler_seed is None else req.sampler_seed,
                           warm_starts=warm, lower_bound=bound.value if bound.feasible else None)
        frames = []
        for run in out.runs.values():
            p, t = run.sc.feasible_cells()
            if len(p):
                frames.append(run.space.designs(p, t).to_frame())
        if not frames:
            return None, out
        allc = pd.concat(frames, ignore_index=True).drop_duplicates()
        batch = DesignBatch.from_frame(allc)
        objective = _objective_values(batch, self.perf.catalog, key)
        return batch.take(np.lexsort((-batch.token_machines, objective))), out

    def hardware_bounds(self, space: FamilySpace, hw: dict, rps: float) -> tuple[int, int]:
        """Count bounds of one hardware choice: BOUND_FACTOR x the machines its work needs."""
        if self.req.max_machines is not None:
            return self.req.max_machines, self.req.max_machines
        cp = self.capacity(hw["prompt_machine"], hw["prompt_power_cap"], hw.get("prompt_tp", 0))
        n_p = count_bound(rps * cp.work_s_per_request)
        if space.token is None:
            return n_p, 1
        ct = self.capacity(hw["token_machine"], hw["token_power_cap"], hw.get("token_tp", 0))
        return n_p, count_bound(rps * ct.work_s_per_request)

    # -- verification ------------------------------------------------------------------------
    def _verify(self, family: str, cand: DesignBatch, objective: np.ndarray, ev: Evaluator, rps: float):
        """(chosen Design, verification JSON, reason if none); `cand` sorted by `objective`,
        `ev` the search-trace evaluator at `rps`."""
        req = self.req
        if not req.verify:
            # The cheapest scored-feasible design (ties: the widest margin on the search trace).
            n_tied = int(np.sum(objective <= objective[0] * (1 + 1e-9)))
            head = cand.take(np.arange(min(max(n_tied, 1), 64)))
            frame = ev(head)
            ok = frame["slo_met"].to_numpy(bool)
            if not ok.any():
                return None, None, "no design of the space meets every SLO on the search trace"
            obj = objective[:len(head)]
            idx = np.flatnonzero(ok)
            best = idx[np.lexsort((-frame["min_margin"].to_numpy(float)[idx], np.round(obj[idx], 9)))][0]
            return head.design(int(best)), None, None
        seeds = req.verification_seeds
        verify_traces = self.verification_traces(rps)
        # The verification traces' fluid screen is counted in the verification, not in the
        # family's `evaluations` (which match its `evaluated` rows on the search trace).
        screen = [ev] + [self.evaluator(tr, [0]) for tr in verify_traces]
        self.progress.start(f"{family}: verify (DES)", None)
        out = verify_candidates(cand, objective, screen, traces=verify_traces, seeds=seeds, model=req.model,
                                slo=self.slo, rps=rps, duration_s=req.verification_duration_s,
                                on_progress=lambda: self.progress.advance(1))
        if out.index is None:
            if out.last_failure is not None:
                v = out.last_failure
                reason = (f"designs feasible on the search trace fail the discrete-event re-check ({v.binding} "
                          f"margin {v.min_margin:+.0%} on {v.duration_s:g}-s traces, seeds "
                          f"{', '.join(map(str, v.seeds))}); relax with more machines, a looser SLO or a lower load")
                return None, {**v.to_json(), "des_runs": out.des_runs, "screened": out.screened}, reason
            reason = (f"no design passes the fluid screen on the {req.verification_duration_s:g}-s verification "
                      f"traces (seeds {', '.join(map(str, seeds))}); relax with more machines (--max-machines), "
                      f"a looser SLO or a lower load")
            return None, None, reason
        return (cand.design(out.index),
                {**out.verification.to_json(), "des_runs": out.des_runs, "screened": out.screened}, None)

    def verification_traces(self, rps: float) -> list:
        req = self.req
        return [LoadScaledTraces(req.workload, req.verification_duration_s, s).at(rps)
                for s in req.verification_seeds]

    def _final_row(self, design, trace) -> pd.Series:
        """The reported design scored in full (no early stop), for every metric of the result."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            frame = simulate(design, trace, self.req.model, slo=self.slo, perf=self.perf)
        return frame.iloc[0].copy()

    def _infeasible(self, family, ev, counter, bound, designs, searcher, *, why, verification=None,
                    rps=None) -> FamilyResult:
        """A family with nothing feasible: its closest design (`designs[0]`) and why."""
        req = self.req
        design = designs.design(0)
        trace = self.trace if rps is None else self.scaled.at(rps)
        full = self._final_row(design, trace)
        reason = None
        if why == "search" and str(full["binding_slo"]) == KV_CAPACITY_CHECK:
            reason = (f"{int(full['unservable_requests'])} request(s) need more KV cache than a machine of "
                      f"{design.family} holds; drop or truncate them, or use a smaller model")
        elif why == "search":
            b = str(full["binding_slo"])
            m, p = b.split("_p")
            lim = getattr(self.slo, m)[PERCENTILES.index(int(p))]
            size = (f"{design.prompt_machines} prompt + {design.token_machines} token machines"
                    if design.token_machines else f"{design.prompt_machines} machines")
            load = f"at {req.rps:g} req/s" if rps is None else f"at {rps:g} req/s"
            reason = (f"{b} binds: slowdown {full[f'slowdown_{b}']:.2f}x > {lim:g}x even with {size} {load}; "
                      f"relax with more machines (--max-machines), a looser SLO (--slo-scale) or a lower load")
        fr = FamilyResult(family, False, full, req.rps if rps is None else rps, reason=reason,
                          lower_bound=_finite(bound.value) if bound is not None else None, searcher=searcher,
                          evaluations=counter[0], verification=verification,
                          details={"scored": ev.scored() if ev is not None else pd.DataFrame()})
        self.progress.done()
        return fr

    # -- goal throughput ---------------------------------------------------------------------
    def throughput_family(self, family: str) -> FamilyResult:
        req = self.req
        space = self.space(family)
        bkey = self.budget_key
        searcher = "ilp+enumeration" if space.is_grid else "optuna"
        cand = self._budget_candidates(space)
        bound = self.bound(space, goal="throughput")
        if cand is None or not len(cand):
            return FamilyResult(family, False, None, None, reason=(
                f"the budget of {self._budget_text()} does not buy the smallest {family} design "
                f"({self._smallest_text(space)}); raise the budget"), lower_bound=_finite(bound.value),
                searcher=searcher)
        counter = [0]
        evaluators: dict[float, Evaluator] = {}

        def evaluator_at(rps: float) -> Evaluator:
            trace = self.scaled.at(rps)
            key = round(float(rps), 9)
            if key not in evaluators:
                evaluators[key] = self.evaluator(trace, counter)
            return evaluators[key]

        def scored() -> pd.DataFrame:
            return pd.concat([e.scored() for e in evaluators.values()] or [pd.DataFrame()], ignore_index=True)

        hi = bound.value if bound.feasible else 100.0
        self.progress.start(f"{family}: sustainable rps", None)
        rps, frame = max_sustainable_rps(cand, self.scaled, lambda d, tr: evaluator_at(tr.rate_rps)(d),
                                         rps_lo=0.6 * hi, rps_hi=hi)
        if not np.isfinite(rps):
            biggest = cand.take(np.array([int(np.argmax(_objective_values(cand, self.perf.catalog, bkey)))]))
            r_min = MIN_REQUESTS / req.duration_s
            fr = self._infeasible(family, None, counter, bound, biggest, searcher, why="search", rps=r_min)
            fr.reason = (f"no design within {self._budget_text()} meets every SLO even at {r_min:g} req/s "
                         f"(binding {fr.row['binding_slo']}); raise the budget or loosen the SLO")
            fr.details["scored"] = scored()
            return fr
        # The designs that sustain the load, cheapest in the budget's currency first.
        alive = cand.take(frame["candidate"].to_numpy())
        obj = _objective_values(alive, self.perf.catalog, bkey)
        order = np.lexsort((-frame["min_margin"].to_numpy(float), np.round(obj, 9)))
        alive, obj = alive.take(order), obj[order]
        verification = None
        if req.verify:
            # A claim that fails the re-check is lowered step by step and re-checked.
            chosen = None
            for _ in range(THROUGHPUT_VERIFY_TRIES):
                chosen, verification, reason = self._verify(family, alive, obj, evaluator_at(rps), rps)
                if chosen is not None:
                    break
                rps = float(f"{rps / (1 + THROUGHPUT_VERIFY_STEP):.4g}")
            if chosen is None:
                fr = self._infeasible(family, None, counter, bound, alive, searcher, why="verify",
                                      verification=verification, rps=rps)
                fr.reason = reason
                fr.details["scored"] = scored()
                return fr
        else:
            chosen = alive.design(0)
        row = self._final_row(chosen, self.scaled.at(rps))
        fr = FamilyResult(family, True, row, rps, sustainable_rps=rps, lower_bound=_finite(bound.value),
                          gap_to_bound_pct=_finite(gap_pct(rps, bound.value)), searcher=searcher,
                          evaluations=counter[0], verification=verification,
                          details={"scored": scored(), "bound": bound, "candidates": len(cand)})
        self.progress.done()
        return fr

    def _budget_candidates(self, space: FamilySpace) -> DesignBatch | None:
        """The designs the budget affords that no other affordable design dominates."""
        bkey = self.budget_key
        budget = self.budget * (1 + 1e-9)
        frames = []
        steps = 4 if not space.is_grid else 1
        pcaps = space.prompt.cap_grid(steps)
        tpool = space.token
        for pm, ptp in space.prompt.choices:
            for pc in pcaps:
                up = self.unit_objective(pm, pc, bkey)
                if space.token is None:
                    n = int(np.floor(budget / up))
                    if n >= 1:
                        frames.append(space.designs([n], prompt_machine=[pm], prompt_power_cap=[pc],
                                                    prompt_tp=[ptp]).to_frame())
                    continue
                for tm, ttp in tpool.choices:
                    for tc in tpool.cap_grid(steps):
                        ut = self.unit_objective(tm, tc, bkey)
                        t = np.arange(1, int(np.floor((budget - up) / ut)) + 1)
                        if not len(t):
                            continue
                        p = np.floor((budget - t * ut) / up).astype(int)
                        keep = p >= 1
                        t, p = t[keep], p[keep]
                        # Drop (p, t) when (p, t + 1) is affordable too: it is dominated.
                        last = np.r_[p[1:] < p[:-1], True] if len(p) else p
                        t, p = t[last], p[last]
                        if len(t):
                            frames.append(space.designs(p, t, prompt_machine=[pm] * len(p),
                                                        token_machine=[tm] * len(p), prompt_power_cap=[pc] * len(p),
                                                        token_power_cap=[tc] * len(p), prompt_tp=[ptp] * len(p),
                                                        token_tp=[ttp] * len(p)).to_frame())
        if not frames:
            return None
        batch = DesignBatch.from_frame(pd.concat(frames, ignore_index=True))
        if len(batch) > THROUGHPUT_MAX_CANDIDATES:
            est = self._rps_estimate(batch)
            batch = batch.take(np.sort(np.argsort(-est, kind="stable")[:THROUGHPUT_MAX_CANDIDATES]))
        return batch

    def _rps_estimate(self, batch: DesignBatch) -> np.ndarray:
        """Rough sustainable rps of each design: machines over the mean work per request."""
        out = np.empty(len(batch))
        for i in range(len(batch)):
            d = batch.design(i)
            cp = self.capacity(d.prompt_machine, d.prompt_power_cap, d.prompt_tp)
            if d.token_machines == 0:
                out[i] = d.prompt_machines / cp.work_s_per_request
                continue
            ct = self.capacity(d.token_machine, d.token_power_cap, d.token_tp)
            out[i] = min(d.prompt_machines / cp.prompt_s_per_request,
                         d.token_machines / max(ct.decode_s_per_request, 1e-9)) + \
                0.5 * (d.prompt_machines + d.token_machines) / (cp.prompt_s_per_request + ct.decode_s_per_request)
        return out

    def _budget_text(self) -> str:
        r = self.req
        return f"{r.power_budget_kw:g} kW" if r.power_budget_kw is not None else f"${r.cost_budget_usd_per_h:g}/h"

    def _smallest_text(self, space: FamilySpace) -> str:
        key = self.budget_key
        unit = "kW" if key == "power_kw" else "$/h"
        up = min(self.unit_objective(m, space.prompt.power_cap[0], key) for m in space.prompt.machines)
        ut = 0.0 if space.token is None else min(self.unit_objective(m, space.token.power_cap[0], key)
                                                 for m in space.token.machines)
        return f"{up + ut:.1f} {unit}"


def _objective_key(goal: str) -> str:
    return "power_kw" if goal == "power" else "cost_usd_per_h"


def _objective_values(batch: DesignBatch, catalog, key: str) -> np.ndarray:
    cost, power = cluster_cost_power(batch, catalog)
    return power if key == "power_kw" else cost


def _finite(v):
    if v is None:
        return None
    v = float(v)
    return v if np.isfinite(v) else None
