"""Static (sized for the peak) versus autoscaled clusters over a rate profile."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from .._validation import Integral, Interval, Real, validate_params
from ..designs import DesignBatch, family_spec, make_design
from ..errors import ProvisionerError
from ..results import latency_json
from ..sim import (ScalingControl, cluster_cost_power, refuse_closed_loop_in_fluid, simulate, simulate_controlled,
                   simulate_scaled, unservable_reason)
from ..slo import SLO
from ..schedulers import DEFAULT_SWAP_SPACE_GB, ON_DEMAND_SCHEDULERS, SPLITWISESIM
from ._calibrate import Calibration, calibrate
from ._policy import MAX_MACHINES, AutoscalePolicy, ScalingSchedule, plan_scaling

__all__ = ["AutoscaleResult", "ClusterDay", "Sizing", "autoscale", "check_floor", "machine_hours", "measures_text",
           "saving_caveat", "saving_text", "saving_parts", "size_for_peak", "size_for_windows", "run_closed_loop",
           "SIZING_BATCH", "MAX_STATIC_MACHINES"]

SIZING_BATCH = 32            # machine counts scored per batched simulation when sizing the static cluster
MAX_STATIC_MACHINES = 1024
MAX_DECISIONS = 1_000_000   # scaling decisions over the profile (one a minute for a day is 1,440)


@dataclass(frozen=True)
class ClusterDay:
    """What one cluster costs and how it serves over the profile."""

    machine_hours: float
    cost_usd: float
    energy_kwh: float
    row: pd.Series = field(repr=False)   # the engine's result row (latencies, SLO verdict)

    def to_json(self) -> dict:
        out = {"machine_hours": self.machine_hours, "cost_usd": self.cost_usd, "energy_kwh": self.energy_kwh,
               "requests": int(self.row["requests"])}
        out.update(latency_json(self.row))
        return out


@dataclass(frozen=True)
class AutoscaleResult:
    family: str
    static_machines: int
    capacity_rps: float
    static: ClusterDay
    autoscaled: ClusterDay
    schedule: ScalingSchedule
    policy: AutoscalePolicy
    duration_s: float
    calibration: Calibration | None = None   # the `auto` thresholds' reading at the peak
    sizing_window: int = 0   # the sizing window that set the static count (0: the peak trace)
    static_given: bool = False   # the static count was given (static_machines), not sized for the peak

    @property
    def saving_pct(self) -> float:
        return _saving(self.static.cost_usd, self.autoscaled.cost_usd)

    def to_json(self) -> dict:
        s = self.schedule
        fewest, most = s.machines_range
        return {
            "family": self.family, "duration_s": self.duration_s, "capacity_rps": self.capacity_rps,
            "policy": self._policy_json(),
            "static": {"machines": self.static_machines, "given": self.static_given,
                       **self.static.to_json()},
            "autoscaled": {"machines_started": s.n_machines, "machines_max": most,
                           "machines_min": fewest, **self.autoscaled.to_json()},
            "saving_pct": self.saving_pct,
            "machine_hours_saving_pct": _saving(self.static.machine_hours, self.autoscaled.machine_hours),
            "energy_saving_pct": _saving(self.static.energy_kwh, self.autoscaled.energy_kwh),
            "timeline": {"time_s": s.decision_s.tolist(), s.metric_name: s.observed_rps.tolist(),
                         "machines": s.machines.tolist()},
            "scale_on": self.policy.scale_on, "scaling_events": s.scaling_events,
        }


    def _policy_json(self) -> dict:
        """The policy as run (thresholds as numbers) and, closed-loop, where they came from."""
        out = self.policy.to_json()
        if self.policy.closed_loop:
            out["thresholds"] = self.calibration.to_json() if self.calibration else {"source": "given"}
        return out


def measures_text(by) -> str:
    """What a sizing window is busiest by, in words: ["requests", "prompt_tokens"] ->
    "requests and prompt tokens"; three -> "requests, prompt tokens and output tokens"."""
    words = [m.replace("_", " ") for m in by]
    return " and ".join([", ".join(words[:-1]), words[-1]] if len(words) > 2 else words)


def saving_text(answer: dict) -> str:
    """The cost saving of an answer of `provision autoscale --json` in words: "saves 12.3%
    of the cost", or, where the autoscaled day costs more (a flat day, on which the target
    load keeps more machines than the peak's static cluster), "costs 16.0% more than the
    static cluster", never a negative saving (compared as printed: -0.04% saves 0.0%)."""
    pct = round(float(answer["saving_pct"]), 1)
    return f"saves {abs(pct):.1f}% of the cost" if pct >= 0 else f"costs {-pct:.1f}% more than the static cluster"


def saving_parts(answer: dict) -> str:
    """The machine-hours and energy savings in words, for after `saving_text`: "12.3% of the
    machine-hours" (a saving, as the phrase before it), "4.0% more machine-hours", or
    "saves 2.5% of the energy" after a phrase that said "more"."""
    after_more = round(float(answer["saving_pct"]), 1) < 0   # saving_text said "costs ... more"
    parts = []
    for key, what in (("machine_hours_saving_pct", "machine-hours"), ("energy_saving_pct", "energy")):
        pct = round(float(answer[key]), 1)
        if pct < 0:
            parts.append(f"{-pct:.1f}% more {what}")
        else:
            parts.append(f"{'saves ' if after_more else ''}{abs(pct):.1f}% of the {what}")
        after_more = pct < 0
    return ", ".join(parts)


def saving_caveat(answer: dict) -> str:
    """What qualifies a saving in an answer of `provision autoscale --json` ("" when both
    days meet the SLOs): a saving bought with missed SLOs is not one, nor a cost over a
    static day that misses them. A hand-cut answer without the autoscaled SLO block gets
    none; without the static one, no word of it."""
    scaled, static = (answer.get(side, {}).get("slo") or {} for side in ("autoscaled", "static"))
    if scaled.get("met", True):
        if scaled and static.get("met") is False:
            return f", where the static day misses the SLOs ({static.get('binding')}) the autoscaled day meets"
        return ""
    missed = f", but the autoscaled day misses the SLOs ({scaled.get('binding')})"
    if static.get("met") is True:
        return f"{missed} the static day meets"
    if static.get("met") is None:   # a hand-cut answer: the static day's verdict unknown, not "meets"
        return missed
    return f", but both days miss the SLOs (autoscaled: {scaled.get('binding')}; static: {static.get('binding')})"


def _saving(static: float, scaled: float) -> float:
    return 100.0 * (1.0 - scaled / static) if static > 0 else 0.0


@dataclass(frozen=True)
class Sizing:
    """The static cluster for the day's busiest windows: `machines`, the fewest meeting every
    SLO on each; `window`, the index of the one that last raised the count;
    `request_times`, that cluster's (first_token_s, finish_s) per request of that window
    (None unless asked for)."""

    machines: int
    window: int
    request_times: tuple | None = None


def size_for_peak(family: str, peak_trace, model: str, slo: SLO, perf, engine: str = "fluid",
                  preemption: str = "recompute", request_times: list | None = None,
                  swap_space_gb: float = DEFAULT_SWAP_SPACE_GB, peak_rps: float | None = None,
                  min_machines: int = 1, **overrides) -> int:
    """The fewest machines of `family` that meet every SLO on `peak_trace` (the sizing trace:
    a constant-rate trace at the profile's peak, or a replayed day's busiest window; its rate
    `peak_rps`, default its requests over its window): `size_for_windows` on that one window.
    request_times : a list that gets that cluster's (first_token_s, finish_s) per request,
        kept from the same simulation (the calibrated thresholds read them).
    min_machines : the autoscaled cluster's floor, refused as `size_for_windows` says."""
    sizing = size_for_windows(family, [peak_trace], model, slo, perf, engine, preemption,
                              keep_request_times=request_times is not None, swap_space_gb=swap_space_gb,
                              peak_rps=peak_rps, min_machines=min_machines, **overrides)
    if request_times is not None:
        request_times.append(sizing.request_times)
    return sizing.machines


def size_for_windows(family: str, windows, model: str, slo: SLO, perf, engine: str = "fluid",
                     preemption: str = "recompute", keep_request_times: bool = False,
                     swap_space_gb: float = DEFAULT_SWAP_SPACE_GB, peak_rps: float | None = None,
                     min_machines: int = 1, **overrides) -> Sizing:
    """The fewest machines of `family` that meet every SLO on each of `windows` (a replayed
    day's busiest windows by requests, prompt tokens and output tokens: one of fewer, longer
    prompts can need more machines than the one of the most requests), scored by the search's
    `Evaluator` in batches of counts: each window searched from the count so far up, that
    count alone first (usually it carries the window: one simulation, not a batch), and a
    raised count checked again on every window (the verdict need not grow with the count).
    peak_rps : the first window's rate in the error when no count meets the SLOs (default
        its requests over its window).
    min_machines : the autoscaled cluster's floor; refused (ProvisionerError naming the
        static count, the most it may be) when min_machines - 1 machines already meet the
        SLOs on every window, so the count is below it: found by simulating that one count
        first, not a batch of SIZING_BATCH (in the discrete-event engine, seconds instead of
        a minute), then counts from 1 in batches of SIZING_BATCH up to the first that meets
        them (a floor of 200 over a static 3 is one batch, not 199 clusters of up to 199
        machines). The batch that holds min_machines - 1 recalls its score."""
    from ..search import Evaluator

    if not len(windows):
        raise ProvisionerError("windows must hold at least one trace (the sizing trace first)", params=("windows",))
    evaluators = [Evaluator(w, model, slo, perf, engine=engine, preemption=preemption,
                            keep_requests=keep_request_times, swap_space_gb=swap_space_gb) for w in windows]
    below = min_machines - 1
    if 1 <= below <= MAX_STATIC_MACHINES and all(_meets(e, family, [below], overrides)[0] for e in evaluators):
        machines, _ = _fewest_on_every(evaluators, family, overrides, top=below)   # the static count is at most `below`
        if machines is not None:
            _refuse_floor_above_static(min_machines, machines, sized=True)
    machines, window = _fewest_on_every(evaluators, family, overrides, top=MAX_STATIC_MACHINES)
    if machines is None:
        rate = windows[window].rate_rps if peak_rps is None or window > 0 else peak_rps
        which = "sizing trace" if len(windows) == 1 else f"sizing window {window + 1} of {len(windows)}"
        raise ProvisionerError(f"{family}: no cluster of up to {MAX_STATIC_MACHINES} machines meets the SLOs on the "
                               f"{which} ({rate:g} req/s); lower the profile's rates or "
                               f"loosen the SLOs (a larger slo_scale)", params=("slo_scale",))
    times = None
    if keep_request_times:
        from ..search import design_keys
        design = make_design(family, machines=machines, **overrides)
        times = evaluators[window].request_times[design_keys(DesignBatch.from_designs([design]))[0]]
    return Sizing(machines, window, times)


def _fewest_on_every(evaluators, family, overrides, top: int) -> tuple[int | None, int]:
    """(the fewest machines, at most `top`, meeting the SLOs on every window, the window that
    last raised it), or (None, a window no count from there up to `top` meets). Each window
    is searched from the current count up, that count alone first (it usually carries the
    window: one simulation); a raised count is checked again on every window, since the
    verdict need not grow with the count (coding's busiest 600 s by requests on BLOOM-176B
    met at 66 A100 machines, missed at 67, met from 68: a count raised to 67 by another
    window misses it). The evaluators recall the counts they scored."""
    machines, window, carried = 0, 0, set()   # carried: the windows `machines` meets the SLOs on
    while len(carried) < len(evaluators):
        i = min(set(range(len(evaluators))) - carried)
        if machines and _meets(evaluators[i], family, [machines], overrides)[0]:
            carried.add(i)
            continue
        found = _first_meeting(evaluators[i], family, overrides, machines + 1, top)
        if found is None:
            return None, i
        machines, window, carried = found, i, {i}
    return machines, window


def _first_meeting(evaluate, family, overrides, lo: int, top: int) -> int | None:
    """The first count from `lo` to `top` meeting the SLOs on the evaluator's window, scored in
    batches of SIZING_BATCH; None when none does."""
    while lo <= top:
        counts = range(lo, min(lo + SIZING_BATCH, top + 1))
        met = _meets(evaluate, family, counts, overrides)
        if met.any():
            return counts[int(np.argmax(met))]
        lo += SIZING_BATCH
    return None


def _meets(evaluate, family: str, counts, overrides) -> np.ndarray:
    """Whether `family` with each of `counts` machines meets every SLO on the evaluator's trace."""
    designs = [make_design(family, machines=n, **overrides) for n in counts]
    return evaluate(designs)["slo_met"].to_numpy(bool)


def autoscale(family: str, trace, peak_trace, model: str, policy: AutoscalePolicy, *, perf, slo: SLO | None = None,
              engine: str = "fluid", capacity_rps: float | None = None, static_machines: int | None = None,
              initial_rps: float | None = None, preemption: str = "recompute",
              swap_space_gb: float = DEFAULT_SWAP_SPACE_GB, peak_rps: float | None = None,
              sizing_windows=(), **overrides) -> AutoscaleResult:
    """Compare the static cluster sized for the peak with the autoscaled one on `trace`.

    trace : the day (`TraceGenerator.with_profile`); its `duration_s` is the billing window.
    peak_trace : the sizing trace (the static sizing question):
        `TraceGenerator.busiest_window(peak, profile)`: drawn arrivals' constant-rate trace
        at the profile's peak, a replayed file's busiest window of the day as it plays it.
    capacity_rps : requests/s per machine the controller plans with; default `peak_rps` over
        the static count (what one machine of the static cluster carries where it was sized).
    sizing_windows : other windows the static cluster must carry too (a replayed day's busiest
        by prompt and by output tokens, `TraceGenerator.busiest_window(by=...)`): its count is
        the fewest meeting the SLOs on `peak_trace` and on each (`size_for_windows`), and the
        result's `sizing_window` says which set it (0: `peak_trace`, i: `sizing_windows[i - 1]`).
    peak_rps : the peak, req/s (default: the rate of the window that set the static count, its
        requests over its length, which the static cluster is sized to carry; the guard on the
        machines at the peak reads the highest of the windows' rates; drawn arrivals pass the
        profile's peak, which their window only rounds).
    initial_rps : the rate the autoscaled cluster is warm for at time 0 (default: the
        arrivals of its first control window).
    preemption : "recompute" or "swap" (on-demand schedulers), for the sizing and both days.
    swap_space_gb : with swap, host memory per GPU, GiB (vLLM's `--swap-space`, default 4).
    """
    validate_params({"capacity_rps": capacity_rps, "static_machines": static_machines, "peak_rps": peak_rps},
                    {"capacity_rps": [None, Interval(Real, 0, None, closed="neither")],
                     "peak_rps": [None, Interval(Real, 0, None, closed="neither")],
                     "static_machines": [None, Interval(Integral, 1, MAX_MACHINES)]})
    check_floor(policy.min_machines, static_machines)
    decisions = float(trace.duration_s) / policy.interval_s
    if decisions > MAX_DECISIONS:   # before any work: the schedule holds one entry per decision
        raise ProvisionerError(f"interval_s {policy.interval_s:g} makes {decisions:.3g} scaling decisions over the "
                               f"profile's {float(trace.duration_s):g} s, more than {MAX_DECISIONS:,}; raise interval_s "
                               f"to at least {float(trace.duration_s) / MAX_DECISIONS:.3g} s", params=("interval_s",))
    spec = family_spec(family)
    if spec.split:
        raise ProvisionerError(f"autoscale scales one pool of machines: {family} has two (prompt and token) with "
                               f"lending; use a baseline or splitwiser family")
    if policy.closed_loop:   # refused before any work
        if family.startswith("splitwiser"):
            raise ProvisionerError(f"scale_on {policy.scale_on} scales baseline machines inside the discrete-event "
                                   f"engine; use scale_on rate for {family}", params=("scale_on",))
        if overrides.get("scheduler") == SPLITWISESIM:
            raise ProvisionerError(f"scale_on {policy.scale_on} cannot run under scheduler splitwisesim (the "
                                   f"controller does not read SplitwiseSim's machines): use scale_on rate, or "
                                   f"another scheduler", params=("scale_on", "scheduler"))
        if engine == "fluid":
            refuse_closed_loop_in_fluid(policy.scale_on)
    one = make_design(family, machines=1, **overrides)
    # the day's requests, then the peak trace's (drawn arrivals' has sizes the day may not; a
    # replay's windows are the day's own): no count meets the SLOs, and looser SLOs would not help
    for sizes in (trace, peak_trace):
        unservable = unservable_reason(sizes.prompt_tokens, sizes.output_tokens, perf.llm(model), perf,
                                       [one.prompt_machine, one.token_machine])
        if unservable is not None:
            raise ProvisionerError(f"{family}: {unservable}", params=("trace",))
    slo = slo if slo is not None else SLO()
    # Closed loop under least-work: the fluid engine sizes the static cluster (a batch of
    # counts on a peak trace takes it seconds, the discrete-event engine minutes); both days run in the DES.
    sizing_engine = "fluid" if policy.closed_loop and "scheduler" not in overrides else engine
    calibrate = policy.thresholds_auto
    windows = [peak_trace, *sizing_windows]
    sizing = Sizing(int(static_machines), 0) if static_machines else \
        size_for_windows(family, windows, model, slo, perf, sizing_engine, preemption, keep_request_times=calibrate,
                         swap_space_gb=swap_space_gb, peak_rps=peak_rps, min_machines=policy.min_machines,
                         **overrides)
    n_static, sized_on = sizing.machines, windows[sizing.window]
    # a token window can set the count at fewer requests than the window of the most
    highest_rps = max(float(w.rate_rps) for w in windows) if peak_rps is None else float(peak_rps)
    peak_rps = float(sized_on.rate_rps if peak_rps is None else peak_rps)
    if static_machines is None:   # given: checked above
        # the sizing refused a floor whose count min_machines - 1 meets the SLOs; a smaller count
        # meeting them where that one does not (the verdict need not grow with the count) shows here
        _refuse_floor_above_static(policy.min_machines, n_static, sized=True)
    calibration = None
    if calibrate:
        calibration = _calibrate(family, sized_on, model, policy, perf, slo, sizing_engine, preemption, n_static,
                                 sizing.request_times, overrides, swap_space_gb)
    if policy.closed_loop:
        policy = policy.with_thresholds(calibration.scale_out if calibration else None)
    capacity = float(capacity_rps) if capacity_rps is not None else peak_rps / n_static
    at_peak = highest_rps / (capacity * policy.target_load)
    if at_peak > MAX_MACHINES:   # the controller keeps a list entry per machine and tick
        if capacity_rps is not None or static_machines is None:   # sized: the capacity is the one to give
            what = (f"capacity_rps {capacity_rps:.3g}" if capacity_rps is not None else
                    f"the static cluster's {n_static} machines at {peak_rps:.3g} req/s")
            raise ProvisionerError(f"{what} means {capacity:.3g} req/s per machine: {at_peak:.3g} machines at the "
                                   f"peak ({highest_rps:.3g} req/s), more than {MAX_MACHINES:,}; give a larger "
                                   f"capacity_rps", params=("capacity_rps",))
        raise ProvisionerError(f"static_machines {n_static} means {capacity:.3g} req/s per machine: {at_peak:.3g} "
                               f"machines at the peak, more than {MAX_MACHINES:,}; lower static_machines",
                               params=("static_machines",))
    horizon_s = float(trace.duration_s)
    if initial_rps is None:
        # the first window's rate, over at least one decision interval: a 1-ms profile's one
        # request over its 1.7 ms read as 589 req/s, and started 589 machines for it
        first = max(min(policy.window_s, horizon_s), policy.interval_s)
        initial_rps = np.searchsorted(trace.arrival_s, first) / first
    initial = max(policy.min_machines, math.ceil(initial_rps / (capacity * policy.target_load)))
    static_design = make_design(family, machines=n_static, **overrides)
    usd_per_h, kw = (float(v[0]) / n_static for v in cluster_cost_power(DesignBatch.from_designs([static_design]),
                                                                        perf.catalog))
    if policy.closed_loop:
        scaled_row, schedule = run_closed_loop(family, trace, model, policy, perf, slo, engine, n_static, initial,
                                               overrides, preemption, swap_space_gb)
        hours = machine_hours(schedule, schedule.released_s, horizon_s)
    else:
        schedule = plan_scaling(trace.arrival_s, horizon_s, capacity, initial, policy)
        scaled_design = make_design(family, machines=schedule.n_machines, **overrides)
        lo, hi, layout = _server_windows(scaled_design, schedule, perf)
        scaled_row, drained_s = simulate_scaled(scaled_design, trace, model, lo, hi, engine=engine, slo=slo,
                                                perf=perf, preemption=preemption, swap_space_gb=swap_space_gb)
        hours = machine_hours(schedule, _machine_drained_s(drained_s, layout, schedule.n_machines), horizon_s)
    scaled = ClusterDay(hours, hours * usd_per_h, hours * kw, scaled_row.iloc[0])
    static_row = simulate(static_design, trace, model, engine=engine, slo=slo, perf=perf,
                          preemption=preemption, swap_space_gb=swap_space_gb).iloc[0]
    hours = n_static * horizon_s / 3600.0
    static = ClusterDay(hours, hours * usd_per_h, hours * kw, static_row)
    return AutoscaleResult(family, n_static, capacity, static, scaled, schedule, policy, horizon_s, calibration,
                           sizing.window, static_given=bool(static_machines))


def check_floor(min_machines: int, static_machines: int | None = None) -> None:
    """Refuse, before any trace is simulated, a floor (`AutoscalePolicy.min_machines`) above
    the static cluster when that is known without sizing it: `static_machines` when given,
    else the most the sizing gives (MAX_STATIC_MACHINES). The sized count is known only
    after the sizing's simulations: `size_for_windows` checks it there, before the day runs.
    `autoscale` calls it first; the CLI too, before it draws the day's trace."""
    if static_machines is not None:
        _refuse_floor_above_static(min_machines, static_machines, sized=False)
    elif min_machines > MAX_STATIC_MACHINES:
        raise ProvisionerError(f"min_machines {min_machines} is above the largest static cluster autoscale sizes "
                               f"for the peak ({MAX_STATIC_MACHINES} machines): the autoscaled cluster could never "
                               f"be smaller; give min_machines of at most {MAX_STATIC_MACHINES}, or give "
                               f"static_machines", params=("min_machines", "static_machines"))


def _refuse_floor_above_static(min_machines: int, n_static: int, sized: bool) -> None:
    """A floor above the static cluster keeps the autoscaled one larger all day: it never
    scales in to the static size, so it only costs more (a negative saving), which answers
    no autoscaling question."""
    if min_machines > n_static:
        where = ("the fewest meeting the SLOs on the sizing trace" if sized
                 else "static_machines")
        fix = "" if sized else " or raise static_machines"
        raise ProvisionerError(f"min_machines {min_machines} is above the static cluster's {n_static} machines "
                               f"({where}): the autoscaled cluster could never be smaller; give min_machines "
                               f"of at most {n_static}{fix}",
                               params=("min_machines",) if sized else ("min_machines", "static_machines"))


def _calibrate(family, peak_trace, model, policy, perf, slo, engine, preemption, n_static, peak_times, overrides,
               swap_space_gb=DEFAULT_SWAP_SPACE_GB):
    """The closed-loop thresholds from the static cluster at the peak: its requests' times
    `peak_times` (first_token_s, finish_s) from the sizing run, or (None: a static count given,
    so no sizing ran) from its one run on the peak."""
    from ..sim import build_inputs

    design = make_design(family, machines=n_static, **overrides)
    if peak_times is None:
        ran = []
        simulate(design, peak_trace, model, engine=engine, slo=slo, perf=perf, preemption=preemption,
                 requests=ran, swap_space_gb=swap_space_gb)
        peak_times = ran[0]
    inputs = build_inputs(DesignBatch.from_designs([design]), peak_trace, perf.llm(model), perf)
    servers = int(inputs.n_machines[0, 0])
    kv_per_machine = float(inputs.kv_cap_tokens[0, 0]) * servers / n_static
    first_s, finish_s = peak_times
    return calibrate(policy.scale_on, peak_trace, first_s, finish_s, n_static, kv_per_machine, policy.interval_s,
                     on_demand=design.scheduler in ON_DEMAND_SCHEDULERS)


def run_closed_loop(family, trace, model, policy: AutoscalePolicy, perf, slo, engine, n_static, initial, overrides,
                    preemption: str = "recompute", swap_space_gb: float = DEFAULT_SWAP_SPACE_GB):
    """The autoscaled day under the closed-loop controller in the discrete-event engine:
    (result row, its ScalingSchedule with `released_s`). `n_static` is the default maximum,
    `initial` the machines serving at 0, `overrides` the design's fields (its scheduler)."""
    if None in (getattr(policy, f"scale_out_{policy.scale_on}"), getattr(policy, f"scale_in_{policy.scale_on}")):
        raise ProvisionerError(f"run_closed_loop needs its {policy.scale_on} thresholds as numbers: `autoscale` "
                               f"calibrates auto ones (its result's `policy`), or use `policy.with_thresholds`")
    top = int(policy.max_machines) if policy.max_machines is not None else max(n_static, policy.min_machines)
    one = make_design(family, machines=1, **overrides)
    rep = perf.catalog.machine(one.prompt_machine).gpus_per_machine // int(one.prompt_tp)
    control = ScalingControl(policy.scale_on, getattr(policy, f"scale_out_{policy.scale_on}"),
                             getattr(policy, f"scale_in_{policy.scale_on}"), policy.interval_s, policy.startup_s,
                             policy.min_machines, top, min(initial, top), rep, float(trace.duration_s),
                             calm_s=policy.window_s)
    design = make_design(family, machines=control.slots, **overrides)
    row, log = simulate_controlled(design, trace, model, control, engine=engine, slo=slo, perf=perf,
                                   preemption=preemption, swap_space_gb=swap_space_gb)
    schedule = ScalingSchedule(log["billed_from_s"], log["serve_from_s"], log["serve_until_s"], log["time_s"],
                               log["metric"], log["machines"], metric_name=_METRIC_NAMES[policy.scale_on],
                               events=int(log["events"]), released_s=log["released_s"])
    return row, schedule


_METRIC_NAMES = {"freeness": "freeness_steps", "queue": "requests_per_machine"}


def machine_hours(schedule: ScalingSchedule, drained_s: np.ndarray, horizon_s: float) -> float:
    """Paid hours: each machine from the start of its weight loading to the end of its
    draining (its last request's finish, or the scale-in if it held none), within the
    profile's window; a machine never scaled in to the window's end."""
    stopped = np.isfinite(schedule.serve_until_s)
    end = np.where(stopped, np.maximum(schedule.serve_until_s, np.where(stopped, drained_s, 0.0)), horizon_s)
    end = np.minimum(end, horizon_s)
    return float(np.sum(np.maximum(end - schedule.billed_from_s, 0.0))) / 3600.0


def _server_windows(design, schedule: ScalingSchedule, perf):
    """(from, until, layout) per server: machine k's replicas are servers k x rep ..
    (k + 1) x rep - 1 of each pool (Splitwiser: its prefill then its decode servers);
    layout = (pools, rep)."""
    machine = perf.catalog.machine(design.prompt_machine)
    rep = machine.gpus_per_machine // int(design.prompt_tp)
    pools = 2 if design.mps_prefill_share > 0 else 1
    lo = np.tile(np.repeat(schedule.serve_from_s, rep), pools)
    hi = np.tile(np.repeat(schedule.serve_until_s, rep), pools)
    return lo, hi, (pools, rep)


def _machine_drained_s(drained_s: np.ndarray, layout: tuple[int, int], n_machines: int) -> np.ndarray:
    """Per machine: the latest drain time of its servers (the layout of `_server_windows`)."""
    pools, rep = layout
    return np.asarray(drained_s, float)[:pools * n_machines * rep].reshape(pools, n_machines, rep).max(axis=(0, 2))
