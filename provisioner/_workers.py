"""Worker processes and Ctrl-C.

A terminal sends Ctrl-C (SIGINT) to every process of the foreground group, so joblib's
worker processes would each die with a KeyboardInterrupt traceback of their own. Workers
are started with SIGINT blocked (the mask survives fork and exec), so only the parent
sees it; `stop_workers` then ends them.
"""

from __future__ import annotations

import contextlib
import signal
import sys

__all__ = ["sigint_blocked_for_workers", "stop_workers"]


@contextlib.contextmanager
def sigint_blocked_for_workers():
    """Block SIGINT in this thread while workers may be started (they inherit the mask).

    The parent still sees a Ctrl-C: through another thread at once, or when the block ends."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def stop_workers() -> None:
    """Kill joblib's worker processes, if any were started, so none outlives Ctrl-C.

    Reads loky's current executor instead of calling `get_reusable_executor()`, which
    would start a fresh pool when its arguments differ from joblib's."""
    module = sys.modules.get("joblib.externals.loky.reusable_executor")
    executor = getattr(module, "_executor", None)
    if executor is None:
        return
    try:
        executor.shutdown(wait=False, kill_workers=True)
    except Exception:  # noqa: BLE001 - best effort while exiting
        pass
