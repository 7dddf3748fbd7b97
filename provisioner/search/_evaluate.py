"""The one evaluation path: every searcher scores designs through `Evaluator.__call__`.

An evaluator holds the question (trace, model, SLO, latency model) and turns a batch of
designs into one batched `simulate` call. It remembers what it has scored (so a design a
searcher asks about twice costs nothing the second time) and keeps the log of scored
rows that the result reports as `evaluated`.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import numpy as np
import pandas as pd

from ..designs import DesignBatch, DESIGN_FIELDS
from ..schedulers import DEFAULT_SCHEDULER, DEFAULT_SWAP_SPACE_GB
from ..sim import simulate
from ..store import code_version, digest, latency_model_digest, trace_digest

# Columns of a scored row that the search and the result need (the rest is dropped
# from the log to keep it small).
LOG_COLUMNS = (*DESIGN_FIELDS, "slo_met", "binding_slo", "min_margin", "stopped_early", "cost_usd_per_h", "power_kw",
               "throughput_rps", "requests",
               *(f"slowdown_{m}_p{p}" for m in ("ttft", "tbt", "e2e") for p in (50, 90, 99)))


def design_keys(batch: DesignBatch) -> list[tuple]:
    """Hashable identity of each design of a batch (power caps rounded to 1e-6). The
    default scheduler is left out, so least-work keys (and stored studies) stay as they were."""
    cols = []
    for k in DESIGN_FIELDS:
        if k == "scheduler":
            continue
        v = batch.columns[k]
        cols.append(np.round(v.astype(float), 6) if k.endswith("power_cap") else v)
    sched = batch.columns["scheduler"]
    return [tuple(_py(c[i]) for c in cols) + (() if sched[i] == DEFAULT_SCHEDULER else (str(sched[i]),))
            for i in range(len(batch))]


def _py(v):
    return v.item() if hasattr(v, "item") else v


def preemption_key(preemption: str, swap_space_gb: float = DEFAULT_SWAP_SPACE_GB) -> tuple:
    """The preemption's part of a store key: empty for recompute (recompute keys stay as they
    were before swap existed), else the mode and its swap space per GPU (GiB)."""
    return () if preemption == "recompute" else (preemption, float(swap_space_gb))


def engine_for(batch: DesignBatch, engine: str) -> str:
    """The discrete-event engine for designs under an on-demand scheduler (the fluid
    engine models only least-work, SEMANTICS.md "Schedulers"); else `engine`."""
    return "des" if np.any(batch.columns["scheduler"] != DEFAULT_SCHEDULER) else engine


class Evaluator:
    """Score designs against one trace with the fluid (or discrete-event) engine.

    Parameters
    ----------
    trace : workloads.Trace the designs are scored on.
    model : catalog model name.
    slo : the SLO the verdicts use.
    perf : the latency model (shared, so the catalog is read once).
    engine : "fluid" for search, "des" for verification.
    stop_infeasible : stop a design as soon as a p99 SLO is certainly violated (fluid).
    on_evaluate : called with the number of new designs after each batch (progress bars).
    store : a `provisioner.store.ResultStore` (None: remember in memory only).
    preemption : "recompute" (default) or "swap", for designs under an on-demand scheduler.
    swap_space_gb : with swap, host memory per GPU, GiB (vLLM's `--swap-space`).
    rps : the load the designs are judged at, recorded in the log (default: the trace's
        requests over its window, which rounds the load to whole requests).
    keep_requests : also keep each newly simulated design's per-request (first_token_s,
        finish_s) in `request_times` (by design key), e.g. to read a sized cluster's state
        (`provision autoscale`'s calibrated thresholds) without simulating it again.

    Attributes
    ----------
    evaluations : designs scored so far, simulated or recalled from the store (repeats
        within this evaluator not counted).
    recalled : how many of them came from the store.
    log : list of scored frames, each with the columns of `LOG_COLUMNS` plus `rps`.
    """

    def __init__(self, trace, model: str, slo, perf, *, engine: str = "fluid", stop_infeasible: bool = True,
                 on_evaluate: Callable[[int], None] | None = None, store=None, preemption: str = "recompute",
                 keep_requests: bool = False, swap_space_gb: float = DEFAULT_SWAP_SPACE_GB,
                 rps: float | None = None):
        self.trace = trace
        self._rps = float(trace.rate_rps if rps is None else rps)
        self.preemption = preemption
        self.swap_space_gb = swap_space_gb
        self.model = model
        self.slo = slo
        self.perf = perf
        self.engine = engine
        self.stop_infeasible = stop_infeasible
        self.on_evaluate = on_evaluate
        self.store = store
        self.evaluations = 0
        self.recalled = 0
        self._context_key = None
        self.log: list[pd.DataFrame] = []
        self._cache: dict[tuple, dict] = {}
        self.keep_requests = keep_requests
        self.request_times: dict[tuple, tuple] = {}

    @property
    def rps(self) -> float:
        return self._rps

    def __call__(self, designs) -> pd.DataFrame:
        """One row per design (in order), from one batched simulation of the new ones."""
        batch = DesignBatch.from_designs(designs)
        keys = design_keys(batch)
        first_index: dict[tuple, int] = {}
        for i, k in enumerate(keys):
            first_index.setdefault(k, i)
        todo = [i for k, i in first_index.items() if k not in self._cache]
        if todo:
            records = self._recall([keys[i] for i in todo])
            missing = [i for i in todo if keys[i] not in records]
            if missing:
                records.update(self._simulate(batch, missing, keys))
            self.log.append(pd.DataFrame([records[keys[i]] for i in todo]))
            for i in todo:
                self._cache[keys[i]] = records[keys[i]]
            self.evaluations += len(todo)
            self.recalled += len(todo) - len(missing)
            if self.on_evaluate is not None:
                self.on_evaluate(len(todo))
        return pd.DataFrame([self._cache[k] for k in keys])

    def _simulate(self, batch: DesignBatch, idx: list[int], keys: list[tuple]) -> dict[tuple, dict]:
        """Score designs `idx` of `batch` in one simulation; their records by design key (stored)."""
        with warnings.catch_warnings():
            # Early-stopped designs have +inf latencies; numpy warns on their percentiles.
            warnings.simplefilter("ignore", RuntimeWarning)
            todo = batch.take(np.asarray(idx))
            engine = engine_for(todo, self.engine)
            kept = [] if self.keep_requests else None
            frame = simulate(todo, self.trace, self.model, engine=engine, slo=self.slo, perf=self.perf,
                             stop_infeasible=self.stop_infeasible and engine == "fluid", preemption=self.preemption,
                             requests=kept, swap_space_gb=self.swap_space_gb)
        if kept is not None:
            self.request_times.update({keys[i]: times for i, times in zip(idx, kept)})
        frame = frame[[c for c in LOG_COLUMNS if c in frame.columns]].assign(rps=self.rps)
        records = {keys[i]: {k: _py(v) for k, v in rec.items()} for i, rec in zip(idx, frame.to_dict("records"))}
        if self.store is not None:
            self.store.put_many("fluid" if self.engine == "fluid" else self.engine,
                                {self._store_key(k): rec for k, rec in records.items()})
        return records

    def _recall(self, keys: list[tuple]) -> dict[tuple, dict]:
        """Records of `keys` found in the store."""
        if self.store is None:
            return {}
        by_hash = {self._store_key(k): k for k in keys}
        return {by_hash[h]: rec for h, rec in self.store.get_many(list(by_hash)).items()}

    @property
    def context_key(self) -> str:
        """Content hash of everything but the design that a score depends on."""
        if self._context_key is None:
            self._context_key = digest("evaluator", trace_digest(self.trace), str(self.model), repr(self.slo),
                                       latency_model_digest(self.perf), self.engine,
                                       bool(self.stop_infeasible and self.engine == "fluid"),
                                       *preemption_key(self.preemption, self.swap_space_gb), code_version())
        return self._context_key

    def _store_key(self, design_key: tuple) -> str:
        return digest(self.context_key, design_key)

    def scored(self) -> pd.DataFrame:
        """Every design scored so far (one row each)."""
        if not self.log:
            return pd.DataFrame(columns=[*LOG_COLUMNS, "rps"])
        return pd.concat(self.log, ignore_index=True)


def stored_keys(kind: str, context: tuple, design, traces: list) -> list[str]:
    """The store keys of `design` scored on each trace: content hashes of the kind of
    score, its `context` (model, SLO, latency-model digest, engine options), the trace,
    the design and the code version."""
    dkey = design_keys(DesignBatch.from_designs([design]))[0]
    return [digest(kind, *context, trace_digest(tr), dkey, code_version()) for tr in traces]


def stored_record(row: pd.DataFrame) -> dict:
    """A one-row result frame as the plain record the store keeps."""
    return {k: _py(v) for k, v in row.to_dict("records")[0].items()}


def stored_rows(store, kind: str, context: tuple, design, traces: list, compute: Callable) -> list[dict]:
    """One record per trace of `design` scored on it: from the store where there, else
    `compute(missing trace indices) -> records` (stored). `context`: what else the score
    depends on (model, SLO, latency-model digest, engine options)."""
    keys = stored_keys(kind, context, design, traces)
    found = store.get_many(keys) if store is not None else {}
    missing = [i for i, k in enumerate(keys) if k not in found]
    if missing:
        new = [{k: _py(v) for k, v in rec.items()} for rec in compute(missing)]
        fresh = {keys[i]: rec for i, rec in zip(missing, new)}
        if store is not None:
            store.put_many(kind, fresh)
        found.update(fresh)
    return [found[k] for k in keys]
