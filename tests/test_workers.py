"""`beside`: a second, independent question computed in a worker process while the caller
goes on (`provision cloud`'s chunked comparison beside the split plan)."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import time

import pytest

from provisioner.workers import beside

# the start of a script run as `provision` runs from a terminal: Ctrl-C raises KeyboardInterrupt
AS_FROM_A_TERMINAL = (
    "import os, signal, threading, time\n"
    "signal.signal(signal.SIGINT, signal.default_int_handler)\n")   # a CI runner may start it ignored
# a Ctrl-C of its own to each of `executor`'s workers, which then have half a second to die of it
CTRL_C_TO_EACH_WORKER = (
    "pids = sorted(executor._processes)\n"
    "for pid in pids:\n"
    "    os.kill(pid, signal.SIGINT)\n"
    "time.sleep(0.5)\n")
# then: how many were sent one, whether all are alive, and what the pool computes for sum([1, 2])
WORKERS_ALIVE_AND_SERVING = (
    "print(len(pids), all(p.is_alive() for p in executor._processes.values()), "
    "executor.submit(sum, [1, 2]).result())\n")


def _run_script(script: str) -> subprocess.CompletedProcess:
    """Run `script` in a fresh interpreter (its own signal handlers and pool); its output as text."""
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)


# a failure inside `with beside(time.sleep, 60)`: the command must end at once, not when the
# sleep does (loky's exit handler waits for a task still running)
_FAILS_WHILE_A_WORKER_SLEEPS = (
    "import sys, time\n"
    "from provisioner.workers import beside\n"
    "with beside(time.sleep, 60) as slow:\n"
    "    time.sleep(1)\n"   # the worker has started and is asleep
    "    sys.exit(3)\n")


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="one core: `beside` computes in this process")
def test_beside_computes_in_another_process():
    with beside(os.getpid) as there:
        assert there.result() != os.getpid()


def test_beside_without_parallel_computes_here_when_asked():
    calls = []
    work = beside(calls.append, "asked", parallel=False)
    assert calls == []   # nothing yet: the same order of work as without `beside`
    work.result()
    assert calls == ["asked"]


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="one core: nothing runs beside")
def test_a_failure_stops_the_work_beside_instead_of_waiting_for_it():
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", _FAILS_WHILE_A_WORKER_SLEEPS], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 3, done.stderr
    # not a speed goal: the sleep beside lasts 60 s, and the exit must not wait for it
    assert time.perf_counter() - t0 < 30


def _pid_and_the_pid_beside():
    """(this process, where `beside` computes from here)."""
    with beside(os.getpid) as inner:
        return os.getpid(), inner.result()


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="one core: `beside` computes in this process")
def test_a_worker_computes_what_it_asks_beside_itself():
    """Its pool already fills the cores: workers of its own would oversubscribe them."""
    with beside(_pid_and_the_pid_beside) as there:
        worker, inner = there.result()
    assert worker != os.getpid() and inner == worker


def _des_pool_jobs(answer) -> None:
    """The DES pool of a `provision` call here (a sweep question), started as `provision`
    starts it; its size on `answer`."""
    from provisioner.search import ProvisionRequest, SearchProblem

    pool = SearchProblem(ProvisionRequest(goal="cost", rps=2, duration_s=10, families=("splitwise-hh",))).des_pool
    pool.start()
    answer.put(pool.n_jobs)


def test_a_daemonic_worker_runs_its_des_checks_in_process():
    """A Dask worker is a daemonic process: a DES pool of its own failed every `sweep
    --dask-local` question that re-checks ("daemonic processes are not allowed to have
    children"), where the local sweep answered. In a worker, the checks run in-process."""
    spawn = multiprocessing.get_context("spawn")   # not fork: this process may hold loky's threads
    answer = spawn.Queue()
    worker = spawn.Process(target=_des_pool_jobs, args=(answer,), daemon=True)
    worker.start()
    worker.join(120)
    assert worker.exitcode == 0 and answer.get(timeout=10) == 1


def test_signals_held_delivers_ctrl_c_after_the_block():
    """The fluid kernel is loaded or compiled with Ctrl-C held (`signals_held`): a
    KeyboardInterrupt raised inside one of LLVM's callbacks was dropped with LLVM half-done,
    and the process crashed (SIGSEGV, seen in CI: Ctrl-C 3 s into a run). The signal is
    not lost: it arrives once the block is done."""
    import signal

    from provisioner.workers import signals_held

    # as from a terminal: a CI runner may start the tests with SIGINT ignored
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    steps = []
    try:
        with pytest.raises(KeyboardInterrupt):
            with signals_held():
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.05)   # a KeyboardInterrupt would have come by now
                steps.append("block done")
        assert steps == ["block done"]
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler   # the handler is back
    finally:
        signal.signal(signal.SIGINT, before)


def test_a_ctrl_c_while_handlers_are_put_back_finds_every_one_back(monkeypatch):
    """A Ctrl-C that came while `signals_held` put the handlers back raised between two
    `signal.signal` calls: SIGINT was back, SIGTERM still held for good (a later SIGTERM then
    did nothing). The rest are put back, then the KeyboardInterrupt goes on."""
    import signal

    from provisioner.workers import signals_held

    before = {signal.SIGINT: signal.signal(signal.SIGINT, signal.default_int_handler),   # as from a terminal
              signal.SIGTERM: signal.getsignal(signal.SIGTERM)}
    real_signal, putting_back = signal.signal, []

    def ctrl_c_after_the_first_change(signum, handler):
        old = real_signal(signum, handler)
        if putting_back == [True]:
            putting_back.append("sent")   # one Ctrl-C, after the first handler is back
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)   # a KeyboardInterrupt would have come by now
        return old

    try:
        with pytest.raises(KeyboardInterrupt):
            with signals_held():
                monkeypatch.setattr(signal, "signal", ctrl_c_after_the_first_change)
                putting_back.append(True)
        monkeypatch.undo()
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        assert signal.getsignal(signal.SIGTERM) is before[signal.SIGTERM]
    finally:
        monkeypatch.undo()
        for signum, handler in before.items():
            signal.signal(signum, handler)


def test_a_handler_that_raises_while_handlers_go_back_leaves_none_swapped(monkeypatch):
    """`handlers_swapped` puts every handler back even when a signal's handler raises between
    two of them (its retry), then raises that exception; off the main thread it refuses at
    once (it span for ever retrying what `signal.signal` refuses there)."""
    import signal
    import threading

    from provisioner.workers import handlers_swapped

    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    real_signal, calls = signal.signal, []

    def interrupted_once(signum, handler):
        old = real_signal(signum, handler)
        calls.append(signum)
        if len(calls) == 3:   # two swapped in, then the first put back: a handler raises here
            raise KeyboardInterrupt
        return old

    monkeypatch.setattr(signal, "signal", interrupted_once)
    with pytest.raises(KeyboardInterrupt):
        with handlers_swapped(lambda *_: None, (signal.SIGINT, signal.SIGTERM)):
            pass
    monkeypatch.undo()
    assert {s: signal.getsignal(s) for s in before} == before
    refused = []
    worker = threading.Thread(target=lambda: refused.append(_refusal(handlers_swapped, (signal.SIGINT,))))
    worker.start()
    worker.join(timeout=10)
    assert refused == ["handlers_swapped: signal handlers can only be changed in the main thread"]


def _refusal(swap, signums) -> str:
    try:
        with swap(lambda *_: None, signums):
            return "no refusal"
    except ValueError as exc:
        return str(exc)


def test_a_ctrl_c_while_workers_start_stops_this_process_once_they_have():
    """Workers start deaf to Ctrl-C; this process did too, for those milliseconds (SIGINT was
    ignored, process-wide), and a Ctrl-C then was lost: `provision` ran to its end, exit 0
    (seen: Ctrl-C 0.8 s into `provision --goal cost --rps 70`). It now comes once they have."""
    import signal

    from provisioner.workers import start_executor_deaf_to_ctrl_c

    class Starting:   # an executor whose workers take a Ctrl-C to start
        submitted = []

        def submit(self, fn):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)   # a KeyboardInterrupt would have come by now
            self.submitted.append(fn)

    before = signal.signal(signal.SIGINT, signal.default_int_handler)   # as from a terminal
    try:
        with pytest.raises(KeyboardInterrupt):
            start_executor_deaf_to_ctrl_c(Starting())
        assert Starting.submitted == [int]
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        assert signal.SIGINT not in signal.pthread_sigmask(signal.SIG_BLOCK, [])
    finally:
        signal.signal(signal.SIGINT, before)


# workers started deaf, each then sent a Ctrl-C of its own: all alive and computing after it
_CTRL_C_TO_DEAF_WORKERS = (
    AS_FROM_A_TERMINAL +
    "from joblib.externals.loky import get_reusable_executor\n"
    "from provisioner.workers import start_executor_deaf_to_ctrl_c\n"
    "executor = get_reusable_executor(max_workers=2)\n"
    "start_executor_deaf_to_ctrl_c(executor)\n" +
    CTRL_C_TO_EACH_WORKER +
    WORKERS_ALIVE_AND_SERVING)


def test_workers_started_deaf_to_ctrl_c_stay_so():
    """The workers inherit SIGINT blocked (no longer ignored: that lost the parent's Ctrl-C),
    and loky's start-up must not unblock it before they are launched (multiprocessing's
    resource tracker, started with the first worker, unblocks SIGINT in the launching thread)."""
    done = _run_script(_CTRL_C_TO_DEAF_WORKERS)
    assert (done.returncode, done.stdout.strip(), done.stderr) == (0, "2 True 3", ""), done.stderr


# workers that ended idle (loky's timeout, 1 s here), replaced by the next task: deaf too?
_WORKERS_REPLACED_AFTER_IDLING = (
    AS_FROM_A_TERMINAL +
    "from joblib.externals.loky import get_reusable_executor\n"
    "from provisioner.workers import start_executor_deaf_to_ctrl_c, submit_deaf_to_ctrl_c\n"
    "executor = get_reusable_executor(max_workers=2, timeout=1)\n"
    "start_executor_deaf_to_ctrl_c(executor)\n"
    "first = set(executor._processes)\n"
    "time.sleep(3)\n"   # idle: they end
    "submit_deaf_to_ctrl_c(executor, int).result()\n" +
    CTRL_C_TO_EACH_WORKER +
    "print(len(pids), first.isdisjoint(pids), all(p.is_alive() for p in executor._processes.values()), "
    "submit_deaf_to_ctrl_c(executor, sum, [1, 2]).result())\n")


def test_workers_that_replace_idle_ones_are_deaf_to_ctrl_c_too():
    """loky ends a reusable executor's idle workers (10 s) and starts others with the next
    task: `provision`'s re-check submitted to its workers plainly, so after a long search its
    workers were new ones that a Ctrl-C killed, each with a traceback."""
    done = _run_script(_WORKERS_REPLACED_AFTER_IDLING)
    assert (done.returncode, done.stdout.strip(), done.stderr) == (0, "2 True True 3", ""), done.stderr


# workers started from a thread other than the main one (a library caller's thread)
_WORKERS_STARTED_OFF_THE_MAIN_THREAD = (
    AS_FROM_A_TERMINAL +
    "from joblib.externals.loky import get_reusable_executor\n"
    "from provisioner.workers import submit_deaf_to_ctrl_c\n"
    "executor = get_reusable_executor(max_workers=2)\n"
    "starter = threading.Thread(target=lambda: submit_deaf_to_ctrl_c(executor, int).result())\n"
    "starter.start(); starter.join()\n" +
    CTRL_C_TO_EACH_WORKER +
    WORKERS_ALIVE_AND_SERVING)


def test_workers_started_off_the_main_thread_are_deaf_to_ctrl_c_too():
    """The signal mask is per thread: a submit from another thread started its workers plainly,
    each then killed by a Ctrl-C with a traceback of its own."""
    done = _run_script(_WORKERS_STARTED_OFF_THE_MAIN_THREAD)
    assert (done.returncode, done.stdout.strip(), done.stderr) == (0, "2 True 3", ""), done.stderr


# this package's pool and joblib's Parallel in turn in one process (a notebook's provision()
# then run_sweep(), and back)
_OUR_POOL_THEN_JOBLIBS = (
    "from joblib import Parallel, delayed\n"
    "from provisioner.workers import shared_executor\n"
    "for _ in range(2):\n"
    "    pool = shared_executor(2)\n"
    "    ours = pool.submit(sum, [1, 2]).result()\n"
    "    again = shared_executor(2) is pool\n"   # the same pool, not one more /dev/shm folder per call
    "    theirs = Parallel(n_jobs=2)(delayed(abs)(-i) for i in range(3))\n"
    "    print(ours, again, theirs)\n")


def test_joblib_runs_after_this_packages_pool_in_one_process():
    """joblib's first Parallel adopts the process's current loky pool; made plainly, ours
    lacked what joblib sets on its own, and `run_sweep` after `provision()` failed with
    "AttributeError: '_ReusablePoolExecutor' object has no attribute '_temp_folder_manager'"."""
    done = _run_script(_OUR_POOL_THEN_JOBLIBS)
    assert (done.returncode, done.stdout, done.stderr) == (0, "3 True [0, 1, 2]\n" * 2, ""), done.stderr


# the shared pool asked for a larger size: loky starts the extra workers at once, in the asking thread
_POOL_RESIZED = (
    AS_FROM_A_TERMINAL +
    "from provisioner.workers import shared_executor\n"
    "shared_executor(2).submit(int).result()\n"   # idle: loky resizes a busy pool only once its tasks end
    "executor = shared_executor(3)\n" +
    CTRL_C_TO_EACH_WORKER +
    WORKERS_ALIVE_AND_SERVING)


def test_workers_a_resize_starts_are_deaf_to_ctrl_c_too():
    """A library caller asking for another pool size: loky started the extra workers outside
    any deaf submit, and a Ctrl-C killed each (TerminatedWorkerError, found by helper 60)."""
    done = _run_script(_POOL_RESIZED)
    assert (done.returncode, done.stdout.strip(), done.stderr) == (0, "3 True 3", ""), done.stderr


# the shared pool asked for another size while a task runs: loky waits for it before resizing
_CTRL_C_WHILE_A_RESIZE_WAITS = (
    AS_FROM_A_TERMINAL +
    "from provisioner.workers import shared_executor, stop_workers\n"
    "pool = shared_executor(2)\n"
    "pool.submit(int).result()\n"
    "pool.submit(time.sleep, 30)\n"
    "threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT)).start()\n"
    "started = time.time()\n"
    "try:\n"
    "    shared_executor(3)\n"
    "except KeyboardInterrupt:\n"
    "    print('interrupted', time.time() - started < 10)\n"
    "stop_workers()\n")


def test_ctrl_c_stops_the_wait_before_a_resize():
    """loky resizes a busy pool once its tasks end, and that wait ran where Ctrl-C is held
    (the workers a resize starts must be deaf): a Ctrl-C came only after the running task."""
    done = _run_script(_CTRL_C_WHILE_A_RESIZE_WAITS)
    assert (done.returncode, done.stdout.strip()) == (0, "interrupted True"), done.stderr


# more tasks than the workers hold, then stopped as Ctrl-C stops them
_STOPPED_WITH_TASKS_QUEUED = (
    "import time\n"
    "from joblib.externals.loky import get_reusable_executor\n"
    "from provisioner.workers import start_executor_deaf_to_ctrl_c, stop_workers\n"
    "executor = get_reusable_executor(max_workers=2)\n"
    "start_executor_deaf_to_ctrl_c(executor)\n"
    "futures = [executor.submit(time.sleep, 30) for _ in range(10)]\n"
    "time.sleep(0.5)\n"
    "stop_workers()\n")


def test_stopping_workers_with_tasks_queued_is_silent():
    """Ctrl-C while more DES re-checks were queued than the workers held: loky's manager
    thread dropped the pending tasks, then handed out the ids still queued and died on the
    first, "Exception in thread ExecutorManagerThread ... KeyError" after "interrupted"."""
    started = time.time()
    done = _run_script(_STOPPED_WITH_TASKS_QUEUED)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    assert time.time() - started < 25   # the sleeping tasks were killed, not waited for


# Ctrl-C 20 ms into loading the fluid engine, in a fresh interpreter (numba not yet loaded)
_CTRL_C_WHILE_NUMBA_LOADS = (
    "import os, signal, sys, threading\n"
    "signal.signal(signal.SIGINT, signal.default_int_handler)\n"   # as from a terminal
    "import provisioner.sim as sim\n"
    "assert 'numba' not in sys.modules\n"
    "threading.Timer(0.02, os.kill, (os.getpid(), signal.SIGINT)).start()\n"
    "try:\n"
    "    sim.run_fluid\n"
    "    print('no interrupt')\n"
    "except KeyboardInterrupt:\n"   # loaded whole by the time it comes?
    "    print('provisioner.sim._fluid' in sys.modules, hasattr(sys.modules.get('numba'), 'njit'))\n"
    "from provisioner.sim import run_fluid\n")


def test_ctrl_c_while_the_fluid_engine_loads_comes_after_numba_is_whole():
    """`provision` starts its first re-check workers, then loads numba: a Ctrl-C in that
    second left numba half-imported and came back as "ImportError: numba._devicearray failed
    to import", an internal error instead of "interrupted" (seen in CI). The load now holds
    the signal, so numba and the engine load whole and the interrupt follows."""
    done = _run_script(_CTRL_C_WHILE_NUMBA_LOADS)
    assert (done.returncode, done.stdout.strip()) == (0, "True True"), done.stderr


def test_the_cli_drops_lokys_idle_worker_race_warning_and_no_other(monkeypatch):
    """loky warns when a worker whose idle timeout ran out leaves tasks just submitted (it
    starts another for them); the CLI drops that line, matched on loky's own text."""
    import inspect
    import re
    import warnings

    from joblib.externals.loky import process_executor

    from provisioner.workers import IDLE_WORKER_RACE_MESSAGE, quiet_pool_warnings

    source = re.sub(r'"\s*\n\s*"', "", inspect.getsource(process_executor))   # adjacent literals joined
    assert IDLE_WORKER_RACE_MESSAGE in source
    monkeypatch.setenv("PYTHONWARNINGS", "")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        quiet_pool_warnings()
        warnings.warn(f"{IDLE_WORKER_RACE_MESSAGE}. This can be caused by a too short worker timeout", UserWarning)
        warnings.warn("something else", UserWarning)
    assert [str(w.message) for w in caught] == ["something else"]
