"""Re-check finalists with the discrete-event engine on longer traces and other seeds.

The searchers score designs with the fluid engine on one trace; a design near the edge
of its capacity can pass that trace and fail another draw of the same workload. So a
finalist is reported feasible only if the discrete-event engine finds every SLO met on
every verification trace (default: twice as long, two other seeds; a replayed file has
no random draws, so it is re-checked once, on its own window).

Finalists are taken in increasing objective. Before spending a DES run on one, the
fluid engine screens a chunk of candidates on the verification traces (cheap, batched);
among the candidates of the cheapest objective level that pass the screen, the one with
the widest worst-case margin goes to the DES, its seeds in parallel (joblib). If it
fails, the next candidate goes.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from .._workers import start_workers_deaf_to_ctrl_c
from ..designs import DesignBatch
from ..results import json_number
from ..slo import METRICS, PERCENTILES
from ..store import latency_model_digest
from ._evaluate import Evaluator, stored_rows

SLOWDOWN_COLUMNS = [f"slowdown_{m}_p{p}" for m in METRICS for p in PERCENTILES]


@dataclass
class Verification:
    """What the discrete-event check found for one design.

    met : every SLO held on every seed.
    worst_slowdown : (3 metrics, 3 percentiles) worst slowdown over the seeds.
    binding : the check with the smallest margin on the worst seed.
    """

    engine: str
    duration_s: float
    seeds: tuple[int, ...]
    rps: float
    met: bool
    worst_slowdown: np.ndarray
    min_margin: float
    binding: str
    rows: pd.DataFrame = field(repr=False, default=None)

    def to_json(self) -> dict:
        ws = self.worst_slowdown
        return {"engine": self.engine, "duration_s": self.duration_s, "seeds": list(self.seeds),
                "rps": self.rps, "met": bool(self.met),
                "worst_slowdown": {m: {f"p{p}": json_number(ws[i, j]) for j, p in enumerate(PERCENTILES)}
                                   for i, m in enumerate(METRICS)},
                "min_margin": json_number(self.min_margin), "binding": self.binding}


def _des_one(design, trace, model, slo, perf):
    """One DES run (a joblib task: module-level so it pickles)."""
    from ..sim import simulate
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return simulate(design, trace, model, engine="des", slo=slo, perf=perf)


def des_check(design, traces: list, seeds: tuple[int, ...], model: str, slo, *, rps: float,
              duration_s: float, perf, n_jobs: int | None = None, store=None) -> Verification:
    """Run the DES on every trace (in parallel) and summarize the worst case; `perf` is the
    search's latency model (the only source of hardware data of the call). With a
    `ResultStore`, runs already stored are recalled and new ones stored."""
    context = (str(model), repr(slo), latency_model_digest(perf))
    records = stored_rows(store, "des", context, design, traces,
                          lambda missing: _des_runs(design, [traces[i] for i in missing], model, slo, perf, n_jobs))
    rows = pd.DataFrame(records).assign(seed=list(seeds))
    worst = rows[SLOWDOWN_COLUMNS].to_numpy(float).max(axis=0).reshape(3, 3)
    worst_row = rows.loc[rows["min_margin"].idxmin()]
    return Verification("des", duration_s, tuple(seeds), float(rps), bool(rows["slo_met"].all()), worst,
                        float(rows["min_margin"].min()), str(worst_row["binding_slo"]), rows)


def _des_runs(design, traces: list, model: str, slo, perf, n_jobs: int | None) -> list[dict]:
    """One DES record per trace, the traces in parallel."""
    from joblib import Parallel, delayed

    # One process per trace even beyond the core count: equal-length tasks finish together
    # (3 traces on 2 cores take 1.5x one run instead of 2x).
    n_jobs = n_jobs if n_jobs is not None else min(len(traces), max(2, os.cpu_count() or 1), 8)
    if n_jobs > 1 and len(traces) > 1:
        with Parallel(n_jobs=n_jobs) as parallel:
            start_workers_deaf_to_ctrl_c(parallel, n_jobs)   # Ctrl-C: one line from the parent only
            frames = parallel(delayed(_des_one)(design, tr, model, slo, perf) for tr in traces)
    else:
        frames = [_des_one(design, tr, model, slo, perf) for tr in traces]
    return [f.to_dict("records")[0] for f in frames]


@dataclass
class VerifyOutcome:
    """The first candidate that passed (index into the candidates), or None."""

    index: int | None
    verification: Verification | None
    screened: int
    des_runs: int
    last_failure: Verification | None = None


def verify_candidates(candidates: DesignBatch, objective: np.ndarray, screen: list[Evaluator], *,
                      traces: list, seeds: tuple[int, ...], model: str, slo, rps: float, duration_s: float, perf,
                      chunk: int = 24, max_des: int = 3, n_jobs: int | None = None,
                      on_progress=None, store=None) -> VerifyOutcome:
    """Walk candidates in increasing objective until one passes the DES on every trace.

    Parameters
    ----------
    candidates : designs, sorted by `objective` (ascending).
    screen : fluid evaluators, one per trace the candidate must pass (search trace and
        verification traces).
    traces, seeds : the verification traces for the DES (and their seeds).
    perf : the latency model of the search (the screen's evaluators use it too).
    max_des : give up after this many DES failures.
    store : a `ResultStore` for the DES runs (None: none).
    """
    screened = 0
    des_runs = 0
    last = None
    for start in range(0, len(candidates), chunk):
        idx = np.arange(start, min(start + chunk, len(candidates)))
        part = candidates.take(idx)
        ok = np.ones(len(idx), bool)
        margin = np.full(len(idx), np.inf)
        for ev in screen:
            live = np.flatnonzero(ok)
            if not len(live):
                break
            frame = ev(part.take(live))
            ok[live] = frame["slo_met"].to_numpy(bool)
            margin[live] = np.minimum(margin[live], frame["min_margin"].to_numpy(float))
        screened += len(idx)
        if on_progress is not None:
            on_progress()
        passing = idx[ok]
        if not len(passing):
            continue
        # Cheapest objective first; within a level, the widest margin.
        order = np.lexsort((-margin[ok], np.round(objective[passing], 9)))
        for i in passing[order]:
            v = des_check(candidates.design(int(i)), traces, seeds, model, slo, rps=rps, duration_s=duration_s,
                          perf=perf, n_jobs=n_jobs, store=store)
            des_runs += 1
            if on_progress is not None:
                on_progress()
            if v.met:
                return VerifyOutcome(int(i), v, screened, des_runs)
            last = v
            if des_runs >= max_des:
                return VerifyOutcome(None, None, screened, des_runs, last)
    return VerifyOutcome(None, None, screened, des_runs, last)
