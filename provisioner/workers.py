"""Worker processes: `beside` (one independent question computed in a worker while the
caller goes on), the pool size (`worker_count`), and Ctrl-C.

A terminal sends Ctrl-C (SIGINT) to every process of the foreground group, so joblib's
worker processes would each die with a KeyboardInterrupt traceback of their own. Workers
are started while SIGINT is blocked in the starting thread (a blocked signal stays blocked
across fork and exec, so it stays pending in the worker and never becomes a
KeyboardInterrupt there), so only the parent sees a Ctrl-C; `stop_workers` then ends them.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import warnings

__all__ = ["start_executor_deaf_to_ctrl_c", "start_workers_deaf_to_ctrl_c", "submit_deaf_to_ctrl_c", "stop_workers",
           "quiet_pool_warnings", "worker_count", "in_worker_process", "beside", "signals_held",
           "handlers_swapped", "shared_executor"]

# loky's resource tracker, a child process, cleans up after the workers at exit; when
# Ctrl-C has just killed them it can find a semaphore already gone and print a UserWarning
# after our one-line "interrupted" (a race). Its warning filters come from the environment.
RESOURCE_TRACKER_FILTER = "ignore:resource_tracker:UserWarning"
# loky warns, in this process, when a worker that ended cleanly (its idle timeout ran out)
# leaves tasks just submitted: it starts another worker for them, so nothing is lost, but
# the two-line warning landed among a command's output (seen once in ~60 runs of 143 s).
# A worker that dies breaks the pool instead (BrokenProcessPool), which stays an error.
IDLE_WORKER_RACE_MESSAGE = "A worker stopped while some jobs were given to the executor"


def start_executor_deaf_to_ctrl_c(executor) -> None:
    """Start the worker processes of a loky executor deaf to Ctrl-C, this process not.

    loky starts every worker when the first task is submitted (fork + exec, synchronous,
    in this thread). SIGINT is blocked in this thread meanwhile, so the workers inherit it
    blocked; it is not ignored, since ignoring it is process-wide and discarded a Ctrl-C
    that came in those milliseconds: `provision` ran on to the end, exit 0 (seen: Ctrl-C
    0.8 s into `provision --goal cost --rps 70`, as its re-check workers started). That
    Ctrl-C (or a SIGTERM) is held (`signals_held`) and delivered here once they have started."""
    submit_deaf_to_ctrl_c(executor, int)   # a builtin: the task needs no import in the worker


def submit_deaf_to_ctrl_c(executor, fn, *args):
    """`executor.submit(fn, *args)`, any worker it starts deaf to Ctrl-C (as
    `start_executor_deaf_to_ctrl_c`). loky starts workers with a later task too, when it finds
    some gone: a reusable executor's workers end after 10 s idle, and the next plain submit
    started their replacements able to take Ctrl-C (each then a KeyboardInterrupt traceback)."""
    with _workers_launched_deaf():
        return executor.submit(fn, *args)


@contextlib.contextmanager
def _workers_launched_deaf():
    """Worker processes launched in the block inherit SIGINT blocked; a Ctrl-C (or SIGTERM)
    meanwhile is held and comes after it. Off the main thread too: the signal mask is per
    thread, and a worker forked from a thread that takes SIGINT would take it
    (`signals_held` holds nothing there; none is needed, since Python runs its handlers in
    the main thread only)."""
    if not hasattr(signal, "pthread_sigmask"):
        yield   # no signal mask (Windows): no fork either, nothing inherits one
        return
    with signals_held():
        _start_resource_trackers()
        old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            yield
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _start_resource_trackers() -> None:
    """loky's and multiprocessing's resource trackers (processes), started before the
    workers: loky starts them with a worker's launch if not yet running, and
    multiprocessing's start ends by unblocking SIGINT in the calling thread (Python
    3.11's `ensure_running`: SIG_UNBLOCK, not the mask it found), so the workers launched
    after it would take Ctrl-C. Running already: nothing to do."""
    from multiprocessing import resource_tracker

    from joblib.externals.loky.backend import resource_tracker as loky_resource_tracker

    loky_resource_tracker.ensure_running()
    resource_tracker.ensure_running()


def start_workers_deaf_to_ctrl_c(parallel, n_workers: int) -> None:
    """`start_executor_deaf_to_ctrl_c` for the workers of an entered `joblib.Parallel`."""
    executor = getattr(getattr(parallel, "_backend", None), "_workers", None)
    if executor is None or not hasattr(executor, "submit"):
        return   # not loky (or a joblib that hides it): nothing to start early
    start_executor_deaf_to_ctrl_c(executor)


@contextlib.contextmanager
def handlers_swapped(handler, signums):
    """Run the block with `handler` for each of `signums`, the handlers before it put back
    after, every one, even when a signal comes mid-change and its handler raises (Ctrl-C's
    KeyboardInterrupt): that exception left the rest unswapped or never put back (a Ctrl-C
    while `signals_held` put SIGINT back left SIGTERM held for good). Blocking the signals
    meanwhile would not do: the mask is per thread, and the kernel hands a signal to any
    thread not blocking it (loky's, joblib's), Python then running its handler here.
    Main thread only, where handlers live."""
    if threading.current_thread() is not threading.main_thread():
        raise ValueError("handlers_swapped: signal handlers can only be changed in the main thread")
    previous = {}
    try:
        for s in signums:
            previous[s] = signal.getsignal(s)
            signal.signal(s, handler)
        yield
    finally:
        _put_back(previous)


def _put_back(handlers) -> None:
    """Install `handlers`, going on when one just installed raises, and raise its exception
    (the first) once all are in. Last in, first back: the first swapped (SIGINT, whose
    KeyboardInterrupt is the one that raises) goes back last, so a flood of Ctrl-C, one
    raising where the retry cannot catch it, finds the others back already."""
    interruption, remaining = None, dict(reversed(list(handlers.items())))
    while remaining:
        try:
            for s, old in list(remaining.items()):
                signal.signal(s, old if old is not None else signal.SIG_DFL)
                del remaining[s]
        except (ValueError, OSError, TypeError):   # signal.signal's own refusals: a retry would refuse again
            raise
        except BaseException as error:   # noqa: BLE001 - a handler's; re-raised below, once the rest are in
            interruption = interruption or error
    if interruption is not None:
        raise interruption


@contextlib.contextmanager
def signals_held(signums=(signal.SIGINT, signal.SIGTERM)):
    """Hold Ctrl-C and SIGTERM while the block runs, and deliver them once it is done (in the
    main thread, whose handlers they are; elsewhere the block just runs). For a step that a
    KeyboardInterrupt must not cut: numba loading or compiling the simulator, where LLVM
    calls back into Python and an exception raised inside such a callback is dropped with
    LLVM half-done (the process then crashed, SIGSEGV: seen in CI, Ctrl-C 3 s into a run)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []
    try:
        with handlers_swapped(lambda signum, _frame: held.append(signum), signums):
            yield
    finally:
        for signum in dict.fromkeys(held):   # each once, in the order they came
            signal.raise_signal(signum)


def stop_workers() -> None:
    """Kill joblib's worker processes, if any were started, so none outlives Ctrl-C.

    Reads loky's current executor instead of calling `get_reusable_executor()`, which
    would start a fresh pool when its arguments differ from joblib's."""
    executor = _current_executor()
    if executor is None:
        return
    try:
        _forget_queued_tasks(executor)
        executor.shutdown(wait=False, kill_workers=True)
    except Exception:  # noqa: BLE001 - best effort while exiting
        pass


def _forget_queued_tasks(executor) -> None:
    """Empty loky's queue of the task ids not yet handed to a worker. Shut down with
    kill_workers, its manager thread drops every pending task, then hands the workers the ids
    still queued and fails on the first (KeyError, "Exception in thread ExecutorManagerThread"
    after our one line): Ctrl-C while more re-checks were queued than the workers held (seen:
    `provision --goal cost --rps 70`, Ctrl-C 4-9 s in). Those tasks are dropped anyway."""
    import queue

    ids = getattr(executor, "_work_ids", None)
    while ids is not None:
        try:
            ids.get(block=False)
        except queue.Empty:
            return


def quiet_pool_warnings() -> None:
    """Drop loky's two benign race warnings: IDLE_WORKER_RACE_MESSAGE in this process, and
    RESOURCE_TRACKER_FILTER, added to PYTHONWARNINGS (kept: the user's own filters), in the
    processes started from here on (loky's resource tracker among them). For the CLI: a
    library does not set a notebook's warning filters."""
    warnings.filterwarnings("ignore", message=IDLE_WORKER_RACE_MESSAGE, category=UserWarning)
    current = os.environ.get("PYTHONWARNINGS", "")
    if RESOURCE_TRACKER_FILTER not in current.split(","):
        os.environ["PYTHONWARNINGS"] = f"{current},{RESOURCE_TRACKER_FILTER}" if current else RESOURCE_TRACKER_FILTER


def worker_count() -> int:
    """Worker processes of a pool here: one per core, 2 to 8 (`provision`'s DES checks and
    `beside` ask `shared_executor` for the same size, so they share its workers; another
    size would resize the pool once its running tasks end)."""
    return min(max(2, os.cpu_count() or 1), 8)


class Beside:
    """`fn(*args)` computed beside the caller's own work (`beside`): `result()` waits for
    it; `abandon()`, when the caller fails before asking, stops a worker still computing
    it rather than let it run on (a command's exit would wait for it)."""

    def __init__(self, fn, args, in_worker: bool):
        self._fn, self._args = fn, args
        self._future = None
        if in_worker:
            # pickled here, now: loky pickles a task in a feeder thread while this one goes
            # on, and the caller's next step may change the arguments (a scorer's caches
            # grow as it plans): seen as "Could not pickle the task" in the tests
            import cloudpickle

            self._future = submit_deaf_to_ctrl_c(_pool(), _call_pickled, cloudpickle.dumps((fn, args)))

    def result(self):
        if self._future is None:   # not started in a worker: computed here, now
            return self._fn(*self._args)
        return self._future.result()

    def abandon(self) -> None:
        if self._future is not None and not self._future.done():
            stop_workers()

    def __enter__(self) -> "Beside":
        return self

    def __exit__(self, kind, *_) -> None:
        if kind is not None:
            self.abandon()


def _call_pickled(task: bytes):
    """A worker's side of `Beside`: fn(*args) from their pickle."""
    import pickle

    fn, args = pickle.loads(task)
    return fn(*args)


def beside(fn, *args, parallel: bool = True) -> Beside:
    """Start `fn(*args)` in a worker process while this one goes on (`Beside`; use it as a
    context manager, so a failure stops it). Its arguments and result are pickled, so it
    suits a second, independent question of seconds, not a hot loop. On one core, or with
    `parallel` False, or in a worker process itself (its pool already fills the cores), it
    runs in this process when its result is asked for: the same result, the same order of
    work as without a worker."""
    return Beside(fn, args, in_worker=parallel and _may_start_workers())


def _may_start_workers() -> bool:
    """More than one core, and this is not a worker itself (`beside`)."""
    return not in_worker_process() and (os.cpu_count() or 1) > 1


def in_worker_process() -> bool:
    """This process is a pool's worker (a sweep's loky or Dask worker): its pool already fills
    the cores, so it starts no workers of its own; a Dask worker (a daemonic process) cannot."""
    import multiprocessing

    return multiprocessing.parent_process() is not None


def _pool():
    """The shared pool of `worker_count()` workers (`shared_executor`)."""
    return shared_executor(worker_count())


def shared_executor(n_workers: int):
    """The process's one pool of worker processes (loky's reusable executor) of `n_workers`,
    deaf to Ctrl-C: started so when made; workers that ended idle since start again with
    the next `submit_deaf_to_ctrl_c`, which every task here goes through. The current pool
    when it is this package's, of that size and usable (not shut down or broken). Otherwise made the way joblib makes its own
    (`get_memmapping_executor`): joblib's next `Parallel` (its arguments differ) shuts the
    current pool down and starts its own, which needs attributes joblib sets on its pools;
    a plain loky pool failed it (AttributeError: '_temp_folder_manager'), e.g. `run_sweep`
    after `provision()` in one notebook. Each such call makes a temporary folder in
    /dev/shm, hence the reuse. Large arrays are pickled, not memory-mapped (max_nbytes
    None), so a worker may write to what it is given; idle workers end after loky's 10 s."""
    executor = _current_executor()
    if getattr(executor, "_provisioner_workers", None) != n_workers or not _usable(executor):
        if executor is not None and _usable(executor):
            _wait_for_tasks(executor)   # a resize or a new pool waits for them
        from joblib.executor import get_memmapping_executor

        with _workers_launched_deaf():   # a resize starts its workers here, at once
            executor = get_memmapping_executor(n_workers, timeout=10, max_nbytes=None)
        executor._provisioner_workers = n_workers
        start_executor_deaf_to_ctrl_c(executor)   # Ctrl-C: one line from the parent only
    return executor


def _current_executor():
    """loky's current reusable executor, if any, without making one."""
    module = sys.modules.get("joblib.externals.loky.reusable_executor")
    return getattr(module, "_executor", None)


def _usable(executor) -> bool:
    flags = getattr(executor, "_flags", None)
    return flags is not None and not flags.shutdown and not flags.broken


def _wait_for_tasks(executor) -> None:
    """Wait until the executor has no task pending or running, here, where Ctrl-C stops the
    wait (loky's own, before a resize or a shutdown, would run where Ctrl-C is held)."""
    import time

    while getattr(executor, "_pending_work_items", None):
        time.sleep(0.05)
