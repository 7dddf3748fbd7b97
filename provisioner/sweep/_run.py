"""Run a sweep: every question through `provisioner.search.provision`, in parallel with joblib.

One task is one question (all its families): big enough to amortize scheduling, and its
answer streams back as soon as it is done. The local backend (loky processes) runs on
one machine; joblib's dask backend on a `distributed` cluster. Each worker process
limits numba's threads to its machine's cores / the workers on that machine, so the
workers together never oversubscribe the cores.

A sweep may run on a measured latency model (`perf`, e.g. a fitted
`perfmodels.ProfileLatencyModel`): each question then runs on a copy of it with the
question's price list, sent to the workers whole (a Dask worker need not see the file).

With a store (`--study`), each answered question's rows are stored under the content
hash of the question (request, prices, latency model, code version): a sweep run again
skips what was answered and re-runs the rest, whose searches re-use their stored
simulations; another latency model never re-uses them.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable

import numpy as np
import pandas as pd

from ..results import json_number
from ..slo import METRICS, PERCENTILES
from ..store import code_version, digest, latency_model_digest, open_store
from ._spec import Question, price_catalog

__all__ = ["run_sweep", "answer_question", "SWEEP_COLUMNS"]

CHECKS = [f"{m}_p{p}" for m in METRICS for p in PERCENTILES]
SWEEP_COLUMNS = (
    "question", "goal", "model", "workload", "rps", "power_budget_kw", "cost_budget_usd_per_h", "price_list", "seed",
    "family", "feasible", "winner", "machines", "prompt_machines", "token_machines", "prompt_machine",
    "token_machine", "prompt_power_cap", "token_power_cap", "prompt_tp", "token_tp", "prompt_batch_cap_tokens",
    "prefill_chunk_tokens", "mps_prefill_share", "duplicate_weights", "cost_usd_per_h", "power_kw",
    "throughput_rps", "sustainable_rps", "cost_usd_per_request", "binding_slo", "min_margin",
    *(f"margin_{c}" for c in CHECKS), *(f"slowdown_{c}" for c in CHECKS),
    "lower_bound", "gap_to_bound_pct", "searcher", "evaluations", "verified", "recheck_binding_slo",
    "recheck_min_margin", "reason")


def answer_question(question: Question, study=None, threads: int | None = None, perf=None) -> list[dict]:
    """The sweep rows (one per family) of one question; a joblib task (module level: it pickles).

    threads : numba threads for this process (None: leave as is; "per-host": the cores of
        this machine / the Dask workers on it).
    perf : the sweep's latency model (None: the roofline), run with the question's prices."""
    store = open_store(study)
    perf = question_latency_model(question, perf)
    key = digest("sweep-question", repr(question.request), question.prices, latency_model_digest(perf),
                 code_version())
    if store is not None:
        done = store.get(key)
        if done is not None:
            return done
    if threads == "per-host":
        threads = _dask_host_threads()
    if threads is not None:
        _limit_numba_threads(int(threads))
    from ..search import provision
    result = provision(question.request, perf=perf, study=store)
    rows = _rows(question, result, perf)
    if store is not None:
        store.put_many("sweep-question", {key: rows})
    return rows


def question_latency_model(question: Question, perf=None):
    """The latency model one question runs on: `perf` (None: the calibrated roofline) with
    the machines of the question's price list. A copy: `perf` itself is not changed; a
    fitted model keeps its tables (they do not depend on prices)."""
    catalog = price_catalog(question.prices)
    if perf is None:
        from perfmodels import LatencyModel
        return LatencyModel(catalog=catalog)
    model = copy.copy(perf)
    model.catalog = catalog
    return model


def latency_columns(perf) -> dict:
    """The sweep table's columns naming a measured latency model (none for the roofline)."""
    described = perf.describe() if hasattr(perf, "describe") else None
    if not described or described.get("kind") != "profile":
        return {}
    return {"latency_profile": described["profile"], "latency_profile_sha256": described["sha256"],
            "latency_interp": described["interp"]}


def _limit_numba_threads(threads: int) -> None:
    """At most `threads` numba threads in this process (never more than it has): the fluid
    engine runs `numba.get_num_threads()` kernel threads. `numba.config.NUMBA_NUM_THREADS`
    is lowered as well, so code that reads the configured count sees the limit too. loky's
    workers already start with NUMBA_NUM_THREADS = cores / jobs (joblib sets it); Dask
    workers need this."""
    import numba
    n = max(1, min(threads, int(numba.config.NUMBA_NUM_THREADS)))
    numba.set_num_threads(n)
    numba.config.NUMBA_NUM_THREADS = n


def _rows(question: Question, result, perf=None) -> list[dict]:
    best = result.best
    rows = []
    extra = {**question.columns(), **latency_columns(perf)}
    columns = SWEEP_COLUMNS + tuple(c for c in extra if c not in SWEEP_COLUMNS)   # scheduler, latency model
    for rec in best.to_dict("records"):
        row = {**extra, **{c: rec.get(c) for c in SWEEP_COLUMNS if c in rec}}
        row["winner"] = rec["family"] == result.winner_family
        row["machines"] = _total(rec.get("prompt_machines"), rec.get("token_machines"))
        served = rec.get("sustainable_rps") if question.request.goal == "throughput" else question.request.rps
        cost = rec.get("cost_usd_per_h")
        row["cost_usd_per_request"] = (json_number(float(cost) / 3600.0 / float(served))
                                       if cost is not None and served else None)
        rows.append({c: _plain(row.get(c)) for c in columns})
    return rows


def _total(p, t):
    if p is None or (isinstance(p, float) and np.isnan(p)):
        return None
    return int(p) + (int(t) if t is not None and not (isinstance(t, float) and np.isnan(t)) else 0)


def _plain(v):
    if hasattr(v, "item") and not isinstance(v, str):
        v = v.item()
    if isinstance(v, float) and np.isnan(v):
        return None
    return v


def _dask_host_threads() -> int | None:
    """cores / Dask workers on the machine this task runs on (None outside a Dask worker)."""
    from urllib.parse import urlparse
    try:
        from distributed import get_client, get_worker
        me = urlparse(get_worker().address).hostname
        workers = get_client().scheduler_info(n_workers=-1)["workers"]
    except (ImportError, ValueError):
        return None
    here = sum(1 for addr in workers if urlparse(addr).hostname == me)
    return local_threads(here)


def local_threads(n_workers: int) -> int:
    """numba threads per worker process so that `n_workers` of them fill the cores."""
    return max(1, (os.cpu_count() or 1) // max(1, n_workers))


def run_sweep(questions, *, study=None, n_jobs: int | None = None, backend: str = "loky",
              threads: int | None = None, on_answer: Callable[[Question], None] | None = None,
              perf=None) -> pd.DataFrame:
    """Answer every question; the tidy table (`SWEEP_COLUMNS`, one row per question x family).

    n_jobs : parallel questions (default: the cores, at most the questions); 1 runs them
        here, one after the other.
    backend : a joblib backend: "loky" (local processes) or "dask" (the active
        `distributed.Client`'s cluster).
    threads : numba threads per task (default: cores / n_jobs for loky, as is otherwise).
    on_answer : called with each question as its answer arrives (progress).
    perf : a latency model every question runs on, with its own price list (None: the
        roofline); a measured profile adds the columns `latency_profile`,
        `latency_profile_sha256` and `latency_interp`.
    """
    questions = list(questions)
    if not questions:
        return pd.DataFrame(columns=list(SWEEP_COLUMNS))
    n_jobs = n_jobs or os.cpu_count() or 1
    if backend == "loky":   # a worker without a question only costs its start (seconds each)
        n_jobs = min(n_jobs, len(questions))
    location = None if study is None else open_store(study).location
    by_index = {}
    if n_jobs == 1 and backend == "loky":
        for q in questions:
            by_index[q.index] = answer_question(q, location, threads, perf)
            if on_answer is not None:
                on_answer(q)
    else:
        by_index = _parallel(questions, location, n_jobs, backend, threads, on_answer, perf)
    rows = [row for q in questions for row in by_index[q.index]]
    return table_of(rows)


def _parallel(questions, location, n_jobs: int, backend: str, threads, on_answer, perf) -> dict:
    from joblib import Parallel, delayed, parallel_config

    from ..workers import start_workers_deaf_to_ctrl_c

    if threads is None and backend == "loky":
        threads = local_threads(n_jobs)
    out = {}
    # Largest questions first, one per task: the last tasks are short, so no worker idles
    # long at the end (longest-processing-time-first scheduling).
    ordered = sorted(questions, key=_work_estimate, reverse=True)
    with parallel_config(backend=backend, n_jobs=n_jobs):
        with Parallel(return_as="generator_unordered", batch_size=1) as parallel:
            start_workers_deaf_to_ctrl_c(parallel, n_jobs)
            tasks = (delayed(_indexed)(q, location, threads, perf) for q in ordered)
            by_index = {q.index: q for q in questions}
            for index, rows in parallel(tasks):
                out[index] = rows
                if on_answer is not None:
                    on_answer(by_index[index])
    return out


def _work_estimate(question: Question) -> float:
    """Requests simulated per design, roughly: the rate x the trace length (a throughput
    question searches over rates: it counts as the largest)."""
    r = question.request
    return float("inf") if r.rps is None else float(r.rps) * float(r.duration_s) * len(r.families)


def _indexed(question: Question, location, threads, perf):
    return question.index, answer_question(question, location, threads, perf)


def table_of(rows: list[dict]) -> pd.DataFrame:
    """The sweep table from its rows (the same dtypes however the rows were made)."""
    extra = [c for c in dict.fromkeys(k for r in rows for k in r) if c not in SWEEP_COLUMNS]   # scheduler
    frame = pd.DataFrame(rows, columns=[*SWEEP_COLUMNS, *extra])
    for c in ("feasible", "winner"):
        frame[c] = frame[c].astype(bool)
    return frame
