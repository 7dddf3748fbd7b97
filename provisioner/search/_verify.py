"""Re-check finalists with the discrete-event engine on longer traces and other seeds.

The searchers score designs with the fluid engine on one trace; a design near the edge
of its capacity can pass that trace and fail another draw of the same workload. So a
finalist is reported feasible only if the discrete-event engine finds every SLO met on
every verification trace (default: twice as long, two other seeds; a replayed file has
no random draws, so it is re-checked once, on its own window).

Finalists are taken in increasing objective. Before spending a DES run on one, the
fluid engine screens a chunk of candidates on the verification traces (cheap, batched);
among the candidates of the cheapest objective level that pass the screen, the one with
the widest worst-case margin goes to the DES. If it fails, the next candidate goes.

The DES runs of one `provision` call share one pool of worker processes (`DesPool`),
one task per (design, trace): a family's check is submitted and the search of the next
family goes on while it runs (`start_verification`), so both cores stay busy; the walk
resumes when the family's answer is collected (`PendingVerification.outcome`).
With a result store (`--study`), a (design, trace) run already stored is recalled instead
of submitted, and each new run is stored when collected.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ..workers import in_worker_process, shared_executor, submit_deaf_to_ctrl_c, worker_count
from ..designs import DesignBatch
from ..schedulers import DEFAULT_SCHEDULER, DEFAULT_SWAP_SPACE_GB
from ..results import json_number
from ..slo import METRICS, PERCENTILES
from ..store import latency_model_digest
from ._evaluate import Evaluator, preemption_key, stored_keys, stored_record

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


def _des_one(design, trace, model, slo, perf, preemption="recompute", swap_space_gb=DEFAULT_SWAP_SPACE_GB):
    """One DES run (a pool task: module-level so it pickles)."""
    from ..sim import simulate
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return simulate(design, trace, model, engine="des", slo=slo, perf=perf, preemption=preemption,
                        swap_space_gb=swap_space_gb)


class DesPool:
    """Where the DES checks of one `provision` call run: worker processes (one per core,
    2 to 8) shared by every family's checks, each (design, trace) one task; in a worker
    process itself (a sweep question), here, one after the other, as `beside` does (a Dask
    worker is daemonic: a pool of its own failed the whole sweep with "daemonic processes
    are not allowed to have children"). The same checks and answers either way."""

    def __init__(self, n_jobs: int | None = None):
        if n_jobs is None:
            n_jobs = 1 if in_worker_process() else worker_count()
        self.n_jobs = n_jobs
        self._started = False

    def start(self) -> None:
        """Start the workers and load the DES in each: called before the search, so their
        start-up (a second or so of imports each) overlaps it instead of the first check."""
        if self.n_jobs > 1 and not self._started:
            executor = shared_executor(self.n_jobs)   # deaf to Ctrl-C: one line from the parent only
            for _ in range(self.n_jobs):
                submit_deaf_to_ctrl_c(executor, _load_des)
            self._started = True

    def submit(self, design, traces: list, model: str, slo, perf, preemption: str = "recompute",
               swap_space_gb: float = DEFAULT_SWAP_SPACE_GB) -> list:
        """Start the DES of `design` on each trace; one future (`.result()`) per trace.
        With one job, each runs here and now."""
        if self.n_jobs <= 1:
            return [_Done(_des_one(design, tr, model, slo, perf, preemption, swap_space_gb)) for tr in traces]
        _announce(design, traces, self.n_jobs)
        self.start()
        # the pool asked for again: a joblib Parallel since (a sweep) replaces it with its own.
        # Deaf: the workers may have ended, idle, while the search ran (loky then starts others)
        executor = shared_executor(self.n_jobs)
        return [submit_deaf_to_ctrl_c(executor, _des_one, design, tr, model, slo, perf, preemption,
                                      swap_space_gb) for tr in traces]


def _announce(design, traces: list, n_jobs: int) -> None:
    """The DES's notice of a long run, said here: the workers that run it stay silent."""
    from ..sim import announce_long_des, des_seconds
    if not traces:
        return
    on_demand = design.scheduler != DEFAULT_SCHEDULER
    runs = [des_seconds(len(tr), int(np.sum(tr.output_tokens)), on_demand) for tr in traces]
    announce_long_des(sum(runs) / min(n_jobs, len(runs)), max(len(tr) for tr in traces), len(runs))


def _load_des() -> None:
    """A worker's first task: import what `_des_one` needs."""
    from ..sim import run_des, simulate  # noqa: F401  (provisioner.sim loads the DES engine)


def _stored_checks(pool: DesPool, store, design, traces: list, model: str, slo, perf,
                   preemption: str = "recompute", swap_space_gb: float = DEFAULT_SWAP_SPACE_GB) -> list:
    """`pool.submit`, recalling the runs `store` has and storing the new ones when collected."""
    keys = stored_keys("des", (str(model), repr(slo), latency_model_digest(perf), *preemption_key(preemption, swap_space_gb)),
                       design, traces)
    found = store.get_many(keys)
    missing = [j for j, k in enumerate(keys) if k not in found]
    running = iter(pool.submit(design, [traces[j] for j in missing], model, slo, perf, preemption, swap_space_gb)
                   if missing else [])
    return [_Done(pd.DataFrame([found[k]])) if k in found else _Storing(next(running), store, k) for k in keys]


@dataclass
class _Storing:
    """A pool future whose DES row is stored when it is collected."""

    future: object
    store: object
    key: str

    def result(self):
        frame = self.future.result()
        self.store.put_many("des", {self.key: stored_record(frame)})
        return frame


@dataclass
class _Done:
    """A result computed in this process, behind the futures' `result()`."""

    value: object

    def result(self):
        return self.value


def summarize_checks(frames: list[pd.DataFrame], seeds: tuple[int, ...], *, rps: float,
                     duration_s: float) -> Verification:
    """The worst case over the DES rows of one design (one row per verification trace)."""
    rows = pd.concat(frames, ignore_index=True).assign(seed=list(seeds))
    worst = rows[SLOWDOWN_COLUMNS].to_numpy(float).max(axis=0).reshape(3, 3)
    worst_row = rows.loc[rows["min_margin"].idxmin()]
    return Verification("des", duration_s, tuple(seeds), float(rps), bool(rows["slo_met"].all()), worst,
                        float(rows["min_margin"].min()), str(worst_row["binding_slo"]), rows)


@dataclass
class VerifyOutcome:
    """The first candidate that passed (index into the candidates), or None."""

    index: int | None
    verification: Verification | None
    screened: int
    des_runs: int
    last_failure: Verification | None = None
    failed: tuple[int, ...] = ()     # candidates the re-check rejected (the fluid screen or the DES)


def candidate_walk(candidates: DesignBatch, objective: np.ndarray, screen: list[Evaluator], *,
                   chunk: int = 24, max_des: int = 3, on_progress=None):
    """Walk candidates in increasing objective until one passes the DES on every trace.

    A generator: it yields the index of each candidate to check with the DES and is sent
    that candidate's `Verification`; its return value is the `VerifyOutcome`.

    Parameters
    ----------
    candidates : designs, sorted by `objective` (ascending).
    screen : fluid evaluators, one per trace the candidate must pass (search trace and
        verification traces).
    max_des : give up after this many DES failures.
    """
    screened = 0
    des_runs = 0
    last = None
    failed: list[int] = []
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
        failed += idx[~ok].tolist()
        if not len(passing):
            continue
        # Cheapest objective first; within a level, the widest margin.
        order = np.lexsort((-margin[ok], np.round(objective[passing], 9)))
        for i in passing[order]:
            v = yield int(i)
            des_runs += 1
            if on_progress is not None:
                on_progress()
            if v.met:
                return VerifyOutcome(int(i), v, screened, des_runs, failed=tuple(failed))
            last = v
            failed.append(int(i))
            if des_runs >= max_des:
                return VerifyOutcome(None, None, screened, des_runs, last, tuple(failed))
    return VerifyOutcome(None, None, screened, des_runs, last, tuple(failed))


class PendingVerification:
    """A candidate walk whose current DES check runs in the pool."""

    def __init__(self, walk, check, summarize):
        self._walk, self._check, self._summarize = walk, check, summarize
        self._outcome = self._futures = None
        self._advance(None)

    def _advance(self, verification):
        """Send the walk the last check's result (None: start it); submit the next check."""
        try:
            i = next(self._walk) if verification is None else self._walk.send(verification)
        except StopIteration as stop:
            self._outcome = stop.value
            return
        self._futures = self._check(i)

    def outcome(self) -> VerifyOutcome:
        """Wait for the checks; a failed candidate's successors are checked the same way."""
        while self._outcome is None:
            self._advance(self._summarize([f.result() for f in self._futures]))
        return self._outcome


def start_verification(candidates: DesignBatch, objective: np.ndarray, screen: list[Evaluator], *,
                       traces: list, seeds: tuple[int, ...], model: str, slo, rps: float, duration_s: float,
                       perf, pool: DesPool, store=None, chunk: int = 24, max_des: int = 3,
                       on_progress=None, preemption: str = "recompute",
                       swap_space_gb: float = DEFAULT_SWAP_SPACE_GB) -> PendingVerification:
    """Screen candidates and submit the first DES check to `pool` (see `candidate_walk`);
    `traces`, `seeds` are the verification traces and their seeds, `perf` the search's
    latency model (the screen's evaluators use it too), `store` a `ResultStore` for the
    DES runs (None: none)."""
    walk = candidate_walk(candidates, objective, screen, chunk=chunk, max_des=max_des, on_progress=on_progress)

    def check(i):
        design = candidates.design(i)
        if store is None:
            return pool.submit(design, traces, model, slo, perf, preemption, swap_space_gb)
        return _stored_checks(pool, store, design, traces, model, slo, perf, preemption, swap_space_gb)

    return PendingVerification(
        walk, check,
        lambda frames: summarize_checks(frames, seeds, rps=rps, duration_s=duration_s))

