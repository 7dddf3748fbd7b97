"""Ctrl-C (or SIGTERM) while the `provision` command's modules load (about a second: numpy,
pandas, typer): nothing has started, so one line and exit 130 (143), as at any later point
(was a KeyboardInterrupt traceback; a SIGTERM then killed the process without a word, or,
once `main` had installed its handler, was a traceback). Imports nothing heavy, so it is in
place first."""

from __future__ import annotations

import contextlib
import os
import signal
import threading

from ..workers import handlers_swapped

INTERRUPTED_LINE = "interrupted (Ctrl-C); stopped"
EXIT_INTERRUPTED = 130
TERMINATED_LINE = "terminated (SIGTERM); stopped"
EXIT_TERMINATED = 143
_STOPPED = {signal.SIGINT: (INTERRUPTED_LINE, EXIT_INTERRUPTED), signal.SIGTERM: (TERMINATED_LINE, EXIT_TERMINATED)}


def _stop_while_loading(signum, frame) -> None:
    line, code = _STOPPED[signum]
    os.write(2, f"{line}\n".encode())
    os._exit(code)   # no worker, file or output exists yet: nothing to clean up


@contextlib.contextmanager
def ctrl_c_stops_loading():
    """Ctrl-C or SIGTERM inside the block ends the process with one line; the handlers before
    it are put back after (an importer such as pytest keeps its own). A signal the process
    was started to ignore (nohup, `&`) stays ignored. Main thread only, where handlers live."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    heeded = [s for s in _STOPPED if signal.getsignal(s) is not signal.SIG_IGN]
    with handlers_swapped(_stop_while_loading, heeded):
        yield
