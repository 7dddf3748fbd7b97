"""Ctrl-C while the `provision` command's modules load (about a second: numpy, pandas,
typer): nothing has started, so one line and exit 130, as a Ctrl-C at any later point
(was a KeyboardInterrupt traceback). Imports nothing heavy, so it is in place first."""

from __future__ import annotations

import contextlib
import os
import signal
import threading

INTERRUPTED_LINE = "interrupted (Ctrl-C); stopped"
EXIT_INTERRUPTED = 130


def _stop_while_loading(signum, frame) -> None:
    os.write(2, f"{INTERRUPTED_LINE}\n".encode())
    os._exit(EXIT_INTERRUPTED)   # no worker, file or output exists yet: nothing to clean up


@contextlib.contextmanager
def ctrl_c_stops_loading():
    """Ctrl-C inside the block ends the process with one line; the handler before it is put
    back after (an importer such as pytest keeps its own). Main thread only, where handlers live."""
    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGINT) is signal.SIG_IGN:   # started to ignore it (nohup, `&`): kept so
        yield
        return
    previous = signal.signal(signal.SIGINT, _stop_while_loading)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous if previous is not None else signal.SIG_DFL)
