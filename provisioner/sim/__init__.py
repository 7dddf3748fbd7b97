"""Cluster simulation: score many designs against a request trace.

`simulate(designs, trace, model, engine="fluid" | "des")` returns one row per design.
Both engines implement the rules of `SEMANTICS.md`; the fluid engine (numba) is the
fast path for search, the discrete-event engine the reference it is tested against.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd

from perfmodels import LatencyModel

from ..designs import Design, DesignBatch, checked_batch
from .._validation import Options, validate_params
from ..errors import ProvisionerError
from ..schedulers import DEFAULT_SCHEDULER, DEFAULT_SWAP_SPACE_GB, PREEMPTION_MODES, check_preemption_mode
from ..slo import SLO, SLO_REFERENCE_TP
from ..workers import signals_held
from ._inputs import EngineOutput, SimInputs, build_inputs, swap_inputs
from ._long_run import announce_long_des, des_seconds
from ._memory import des_check, fluid_plan
from ._metrics import request_latencies, summarize
from ._servable import KV_CAPACITY_CHECK, unservable_reason, unservable_requests
# the reference engine, for callers that build SimInputs (cloud plans); the fluid one,
# run_fluid, is loaded on first use (`__getattr__`)
from ._des import run_des
from ._des_cloud import ServerPlan, plan_holds
from ._des_llumnix import SCHEDULER_STATS
from ._sched_metrics import add_scheduler_columns, high_priority_mask, refuse_on_demand_in_fluid

__all__ = ["simulate", "simulate_requests", "solo_latencies", "cluster_cost_power", "ENGINES",
           "SimInputs", "EngineOutput", "build_inputs", "request_latencies", "unservable_reason",
           "fluid_plan", "COMPILING_MESSAGE", "simulate_scaled", "simulate_controlled", "ScalingControl",
           "SCALE_METRICS", "refuse_closed_loop_in_fluid", "run_des", "run_fluid", "ServerPlan", "plan_holds",
           "swap_inputs", "PREEMPTION_MODES", "SCHEDULER_STATS", "refuse_on_demand_in_fluid", "des_seconds",
           "announce_long_des"]

# Said once on stderr when the fluid kernel is compiled (its cache misses), never on stdout.
COMPILING_MESSAGE = "compiling the simulator (first run only; a Ctrl-C takes effect once it is done)"

ENGINES = ("fluid", "des")
_CONSTRAINTS = {"engine": [Options(ENGINES)], "slo": [None, SLO], "perf": [None, LatencyModel],
                "stop_infeasible": [bool]}
# timelines and requests are filled in place: a tuple was an AttributeError once the run was done
_SIMULATE_CONSTRAINTS = {**_CONSTRAINTS, "high_priority_slo": [None, SLO], "timelines": [None, list],
                         "requests": [None, list]}


def __getattr__(name: str):
    """`run_fluid`, imported on first use: the fluid kernel imports numba (seconds), which
    `import provisioner.sim` does not."""
    if name == "run_fluid":
        return _load_run_fluid()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _load_run_fluid():
    """The fluid engine, with Ctrl-C and SIGTERM held while numba loads (a second or two,
    usually while `provision`'s first re-check workers start): a KeyboardInterrupt inside
    numba's import leaves it half-loaded, and its C extension reports that as
    "ImportError: numba._devicearray failed to import" with the interrupt gone from the
    chain, so Ctrl-C then read as an internal error (seen in CI)."""
    loaded = globals().get("run_fluid")
    if loaded is None:
        with signals_held():
            from ._fluid import run_fluid as loaded
        globals()["run_fluid"] = loaded   # once: later lookups skip `__getattr__` and this
    return loaded


def _engine(name: str):
    if name == "fluid":
        return _load_run_fluid()
    if name == "des":
        from ._des import run_des
        return run_des
    raise ProvisionerError(f"unknown engine '{name}': use one of {', '.join(ENGINES)}")


def solo_latencies(trace, llm, perf: LatencyModel, slo: SLO):
    """(ttft, tbt, e2e) of each request alone on the SLO reference machine (s, shape (r,))."""
    ref = perf.catalog.machine(slo.reference_machine)
    ttft, tbt, e2e = perf.solo_request_s(llm, ref.gpu, SLO_REFERENCE_TP, trace.prompt_tokens, trace.output_tokens)
    tbt = np.where(trace.output_tokens > 1, tbt, np.nan)
    return ttft, tbt, e2e


def cluster_cost_power(designs: DesignBatch, catalog):
    """Provisioned cost ($/h) and power (kW, at the pools' caps) per design."""
    cost = np.zeros(len(designs))
    power = np.zeros(len(designs))
    for count, mcol, capcol in (("prompt_machines", "prompt_machine", "prompt_power_cap"),
                                ("token_machines", "token_machine", "token_power_cap")):
        n = designs.columns[count].astype(float)
        names = designs.columns[mcol]
        for name in np.unique(names):
            idx = names == name
            machine = catalog.machine(str(name))
            cost[idx] += n[idx] * machine.cost_usd_per_h
            power[idx] += n[idx] * machine.power_w(designs.columns[capcol][idx].astype(float)) / 1e3
    return cost, power


def simulate_requests(designs, trace, model="bloom-176b", *, engine: str = "fluid",
                      perf: LatencyModel | None = None, slo: SLO | None = None,
                      stop_infeasible: bool = False, high_priority_fraction: float = 0.0,
                      preemption: str = "recompute", swap_space_gb: float = DEFAULT_SWAP_SPACE_GB):
    """Run an engine; returns (DesignBatch, SimInputs, EngineOutput) with per-request times
    (with an on-demand scheduler, the DES's `scheduler_stats` and `timelines` too).

    slo : the SLO whose reference machine defines slowdowns (default: Table VI).
    stop_infeasible : with the fluid engine, stop a design as soon as more than 1%
        (+1) of its requests exceeded a p99 limit of `slo`: that p99 is then violated
        whatever the rest of the trace does. Its unfinished requests get +inf times.
    """
    validate_params(dict(engine=engine, slo=slo, perf=perf, stop_infeasible=stop_infeasible), _CONSTRAINTS)
    perf = perf if perf is not None else LatencyModel()
    batch, inputs, out, _ = _run(checked_batch(designs), trace, perf.llm(model), perf, engine,
                                 slo if slo is not None else SLO(), stop_infeasible,
                                 high_priority=high_priority_fraction, preemption=preemption,
                                 swap_space_gb=swap_space_gb)
    return batch, inputs, out


def refuse_closed_loop_in_fluid(metric: str) -> None:
    """The fluid engine runs precomputed windows only (SEMANTICS.md, "Closed-loop autoscaling")."""
    raise ProvisionerError(f"the fluid simulator cannot run closed-loop autoscaling (scale_on {metric} reads the "
                           f"cluster's state as it runs): use engine des", params=("scale_on", "engine"))


def _run(designs, trace, llm, perf, engine, slo, stop_infeasible, keep_requests=True, windows=None,
         high_priority=0.0, scaling=None, preemption="recompute", swap_space_gb=DEFAULT_SWAP_SPACE_GB):
    """(DesignBatch, SimInputs, EngineOutput, solo latencies (ttft, tbt, e2e)).

    keep_requests : False lets the fluid engine return only per-design figures.
    windows : (active_from_s, active_until_s) per server (see `_windows.py`), or None.
    scaling : a closed-loop controller's settings (`_control.ScalingControl`; DES only), or None.
    preemption : "recompute" or "swap" (on-demand baselines: `_inputs.swap_inputs`).
    swap_space_gb : with swap, host memory per GPU (GiB; vLLM's --swap-space, default 4)."""
    if not all(hasattr(trace, a) for a in ("arrival_s", "prompt_tokens", "output_tokens")):   # was an AttributeError
        raise ProvisionerError(f"trace must be a workloads.Trace, e.g. make_workload('coding', 70) "
                               f"(got {trace!r:.60})", params=("trace",))
    batch = DesignBatch.from_designs(designs)
    inputs = build_inputs(batch, trace, llm, perf, high_priority_mask(trace, high_priority))
    if windows is not None:
        inputs = dataclasses.replace(inputs, active_from_s=windows[0], active_until_s=windows[1])
    if scaling is not None:
        inputs = dataclasses.replace(inputs, scaling=scaling)
    check_preemption_mode(preemption)
    if preemption == "swap":
        inputs = dataclasses.replace(inputs, swap=swap_inputs(batch, llm, perf.catalog, swap_space_gb))
    duration_s = getattr(trace, "duration_s", None)
    if engine == "fluid":
        refuse_on_demand_in_fluid(inputs)
        if scaling is not None:
            refuse_closed_loop_in_fluid(scaling.metric)
    if engine != "fluid":
        des_check(inputs.n_designs, len(trace), duration_s)
        return batch, inputs, _engine(engine)(inputs), solo_latencies(trace, llm, perf, slo)
    run_fluid = _load_run_fluid()
    import numba   # loaded by then
    threads = numba.get_num_threads()
    plan = fluid_plan(inputs.n_machines.sum(axis=1), len(trace), keep_requests, threads, duration_s)
    solo = solo_latencies(trace, llm, perf, slo)
    solo_s = np.stack(solo, axis=1)
    late_s, abort_after = None, 0
    if stop_infeasible:
        late_s = np.nan_to_num(solo_s * slo.limits()[:, -1], nan=np.inf)
        abort_after = int(np.ceil(0.01 * len(trace))) + 1
    numba.set_num_threads(plan.threads)   # fewer designs at once when their working sets would not fit
    try:
        out = run_fluid(inputs, None, late_s, abort_after, solo_s=solo_s, keep_requests=keep_requests)
    finally:
        numba.set_num_threads(threads)
    return batch, inputs, out, solo


def simulate(designs: Design | DesignBatch | list, trace, model="bloom-176b", *, engine: str = "fluid",
             slo: SLO | None = None, perf: LatencyModel | None = None,
             stop_infeasible: bool = False, high_priority_fraction: float = 0.0,
             high_priority_slo: SLO | None = None, timelines: list | None = None,
             preemption: str = "recompute", requests: list | None = None,
             swap_space_gb: float = DEFAULT_SWAP_SPACE_GB) -> pd.DataFrame:
    """Score designs against a trace.

    Parameters
    ----------
    designs : one `Design`, a list of them, or a `DesignBatch` of n designs.
    trace : a `workloads.Trace` (randomness lives there: the workload's seed).
    model : catalog model name or `LLM`.
    engine : "fluid" (fast) or "des" (exact reference).
    slo : latency SLOs (default: Splitwise Table VI).
    stop_infeasible : (fluid) stop a design once a p99 SLO is certainly violated; its
        row then has `stopped_early` True, `slo_met` False and +inf percentiles where
        the unfinished requests dominate. For search; keep False to see full metrics.
    high_priority_fraction : share of requests marked high priority (on-demand schedulers;
        the trace's own `high_priority` column wins when it has one).
    high_priority_slo : the SLO the high-priority class's own verdict is checked against
        (default: `slo`); the other class and the overall verdict use `slo`.
    timelines : a list that gets, per design under an on-demand scheduler, its (k, 6)
        per-second samples (time, preemptions, migrations, downtime s, fragmentation,
        queued prompts; SEMANTICS.md "Schedulers").
    preemption : "recompute" (default) or "swap": how an on-demand baseline preempts when
        KV runs out (vLLM's two modes; swap adds `swaps` and `swapped_bytes`).
    swap_space_gb : with swap, the host memory each GPU swaps into, GiB (vLLM's
        `--swap-space`, default 4), capped by the machine's DRAM (catalog) per replica.
    requests : a list that gets, per design, its requests' (first_token_s, finish_s)
        arrays (absolute s; +inf: not finished). The rows are the same with or without it.

    Returns
    -------
    DataFrame with n rows: the design columns, `{ttft,tbt,e2e}_p{50,90,99}_s`,
    `slowdown_*`, `margin_*`, `slo_met`, `binding_slo`, `throughput_rps`, pool
    utilizations and mean decode batches, KV-transfer overhead, `cost_usd_per_h`,
    `power_kw`, `energy_wh_per_request`. Under an on-demand scheduler also `preemptions`,
    `migrations`, `migration_downtime_s`, `scheduler_fragmentation_mean`,
    `recomputed_tokens` (and per-priority percentiles).
    """
    validate_params(dict(engine=engine, slo=slo, high_priority_slo=high_priority_slo, perf=perf,
                         stop_infeasible=stop_infeasible, timelines=timelines, requests=requests),
                    _SIMULATE_CONSTRAINTS)
    slo = slo if slo is not None else SLO()
    perf = perf if perf is not None else LatencyModel()
    batch, inputs, out, solo = _run(checked_batch(designs), trace, perf.llm(model), perf, engine, slo, stop_infeasible,
                                    keep_requests=requests is not None, high_priority=high_priority_fraction,
                                    preemption=preemption, swap_space_gb=swap_space_gb)
    cost, power = cluster_cost_power(batch, perf.catalog)
    frame = batch.to_frame()
    if (frame["scheduler"] == DEFAULT_SCHEDULER).all():   # least-work results keep their columns
        frame = frame.drop(columns="scheduler")
    result = summarize(frame, out, trace, solo, slo, cost, power, inputs.n_machines)
    add_scheduler_columns(result, out, inputs, trace, solo, slo, high_priority_slo)
    result.insert(0, "engine", engine)
    result["stopped_early"] = out.aborted if out.aborted is not None else False
    # A request whose KV cache fits on none of a design's machines is not served, whatever
    # the engine's no-deadlock rule made of it: the design fails.
    result["unservable_requests"] = unservable_requests(inputs)
    failed = result["unservable_requests"].to_numpy() > 0
    result.loc[failed, "slo_met"] = False
    result.loc[failed, "binding_slo"] = KV_CAPACITY_CHECK
    if timelines is not None and out.timelines is not None:
        timelines.extend(out.timelines)
    if requests is not None:
        requests.extend(zip(out.first_token_s, out.finish_s))
    return result


from ._scaled import simulate_controlled, simulate_scaled  # noqa: E402  (uses _run above)
from ._control import SCALE_METRICS, ScalingControl  # noqa: E402
