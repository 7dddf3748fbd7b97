"""The CLI's one error path: every failure becomes one line on stderr and an exit code.

- a user error (bad flag, bad file, impossible question), at any depth: `error: ...`
  naming the field and the fix, exit 2;
- Ctrl-C: `interrupted` once, worker processes stopped, exit 130;
- anything else (a bug): one line naming the file the full traceback was saved to,
  exit 1.
"""

from __future__ import annotations

import errno
import io
import os
import re
import sys
import tempfile
import time
import traceback
from pathlib import Path

from typer import exceptions as typer_exc
from typer._click import exceptions as click_exc

from hardware_catalog import CatalogError
from perfmodels import PerfModelError
from workloads import WorkloadError

from ..workers import stop_workers
from ..errors import ProvisionerError
from ..files import NAME_MAX_BYTES, long_name_part
from ._loading import EXIT_INTERRUPTED, EXIT_TERMINATED, INTERRUPTED_LINE, TERMINATED_LINE

USER_ERRORS = (ProvisionerError, CatalogError, PerfModelError, WorkloadError, FileNotFoundError)
EXIT_OK, EXIT_INTERNAL, EXIT_USER_ERROR = 0, 1, 2
_terminated = False   # set by `on_sigterm`: the interrupt the command stops on is a SIGTERM
TRACEBACK_DIR_ENV = "PROVISIONER_TRACEBACK_DIR"
# The library's errors name Python parameters (their `params`); the CLI says its flags.
PARAM_FLAGS = {
    "goal": "--goal", "rps": "--rps", "power_budget_kw": "--power-budget-kw",
    "cost_budget_usd_per_h": "--cost-budget-usd-per-h", "workload": "--workload", "model": "--model",
    "families": "--design", "duration_s": "--duration", "seed": "--seed", "slo_scale": "--slo-scale",
    "searcher": "--searcher", "verify_duration_s": "--verify-duration", "power_cap_range": "--power-cap-range",
    "max_machines": "--max-machines", "n_trials": "--trials", "engine": "--engine", "arrival": "--arrival", "cv": "--cv",
    "prefill_chunk_tokens": "--prefill-chunk-tokens", "mps_prefill_share": "--mps-prefill-share", "scheduler": "--scheduler",
    "duplicate_weights": "--duplicate-weights", "preemption": "--preemption",
    "swap_space_gb": "--swap-space-gb",
    "study": "--study", "machines": "--machines", "prompt_machines": "--prompt-machines",
    "token_machines": "--token-machines", "prompt_power_cap": "--prompt-power-cap",
    "baseline": "--baseline", "kv_bits": "--kv-bits", "inter_node_gbps": "--inter-node-gbps", "nic_gbps": "--nic-gbps",
    "capacity_rps": "--capacity-rps", "static_machines": "--static-machines", "interval_s": "--interval-s",
    "min_machines": "--min-machines", "peak_rps": "--rps", "scale_on": "--scale-on", "startup_s": "--startup-s",
    "window_s": "--window-s", "scale_out_load": "--scale-out-load", "scale_in_load": "--scale-in-load",
    "prompt_machine_types": "--prompt-machine-types", "token_machine_types": "--token-machine-types",
    "target_load": "--target-load", "scale_out_freeness": "--scale-out-freeness",
    "scale_in_freeness": "--scale-in-freeness", "scale_out_queue": "--scale-out-queue",
    "scale_in_queue": "--scale-in-queue",
    "token_power_cap": "--token-power-cap", "family": "--family", "target": "--target-attainment",
    "rescore_engine": "--rescore-engine", "without": "--without", "high_priority_fraction": "--high-priority-fraction",
}


def cli_message(exc: BaseException) -> str:
    """The error's message with the Python parameters it names (`exc.params`) replaced by
    their flags (`flag_text`)."""
    return flag_text(str(exc), getattr(exc, "params", ()))


def flag_text(text: str, params) -> str:
    """`text` (an error, a family's reason) with the Python parameters `params` it names
    replaced by their flags, outside quotes: a quoted path or header is the user's text,
    kept as is."""
    parts = re.split(r"('[^']*')", text)   # odd items: quoted spans
    for param in params:
        if param in PARAM_FLAGS:
            word = re.compile(rf"(?<![\w-]){re.escape(param)}(?![\w-])")
            parts = [part if k % 2 else word.sub(PARAM_FLAGS[param], part) for k, part in enumerate(parts)]
    return "".join(parts)


def one_line(message) -> str:
    return " ".join(str(message).split("\n")[0].split()) or "failed"


def on_sigterm(signum, frame) -> None:
    """SIGTERM (`kill`, a job scheduler's stop) takes Ctrl-C's path: the command stops where it
    is, its worker processes are stopped (else they outlive it, each still computing), one
    line, exit 143. The console script installs it (`provisioner.cli.main`)."""
    global _terminated
    _terminated = True
    raise KeyboardInterrupt


def _stopped() -> int:
    """After an interrupt: stop the worker processes, say so in one line; the exit code."""
    stop_workers()
    if _terminated:
        _echo_err(TERMINATED_LINE)
        return EXIT_TERMINATED
    _echo_err(INTERRUPTED_LINE)
    return EXIT_INTERRUPTED


def run_guarded(command) -> int:
    """Call `command()` (a typer app in non-standalone mode); map every outcome to an exit code."""
    closed = sys.stdout is None   # `provision catalog >&-`: Python starts with no sys.stdout
    if closed:
        sys.stdout = _ClosedStdout()
    try:
        code = command()
        sys.stdout.flush()   # a full disk or closed pipe on stdout shows up here
        code = code if isinstance(code, int) else EXIT_OK
    except click_exc.NoArgsIsHelpError:   # typer has printed the help already
        return EXIT_OK
    except click_exc.NoSuchOption as exc:
        return _say(exc.format_message() + _other_commands_with(exc), EXIT_USER_ERROR)
    except click_exc.UsageError as exc:
        return _say(exc.format_message() + _commands_of(exc), EXIT_USER_ERROR)
    except click_exc.ClickException as exc:
        return _say(exc.format_message(), EXIT_USER_ERROR)
    except (KeyboardInterrupt, typer_exc.Abort):
        code = EXIT_INTERRUPTED
    except USER_ERRORS as exc:
        return _say(cli_message(exc), EXIT_USER_ERROR)
    except BaseException as exc:  # noqa: BLE001 - the last line of defence: never a traceback
        return _unexpected(exc)
    finally:
        if closed:
            sys.stdout = None
    if code == EXIT_INTERRUPTED:   # typer turns Ctrl-C inside a command into Exit(130)
        return _stopped()
    return code


def _commands_of(exc) -> str:
    """`provision nope`: the commands there are (click names only the nearest, if any)."""
    group = exc.ctx.command if exc.ctx is not None else None
    commands = sorted(getattr(group, "commands", {}) or ())
    if "No such command" not in exc.format_message() or not commands:
        return ""
    return f" Commands: {', '.join(commands)}."


def _other_commands_with(exc) -> str:
    """Where a flag the command lacks belongs (`provision --kv-bits 4`: `provision cloud`'s)."""
    if exc.ctx is None:
        return ""
    root = exc.ctx.find_root()
    group, here = root.command, exc.ctx.command
    commands = [(root.info_name, group)] + [(f"{root.info_name} {name}", cmd)
                                            for name, cmd in sorted(getattr(group, "commands", {}).items())]
    owners = [name for name, cmd in commands
              if cmd is not here and any(exc.option_name in (*p.opts, *p.secondary_opts) for p in cmd.params)]
    if not owners:
        return ""
    names = " or ".join(f"'{name}'" for name in owners)
    return f"; it is an option of {names}"


def _unexpected(exc: BaseException) -> int:
    if _broken_pipe(exc):   # `provision catalog | head`: the reader has all it wants
        _silence_stdout()
        return EXIT_OK
    if isinstance(exc, SystemExit):
        return exc.code if isinstance(exc.code, int) else EXIT_USER_ERROR
    cause = _root_cause(exc)
    if isinstance(cause, KeyboardInterrupt):   # numba's parallel region wraps it in a SystemError
        return _stopped()
    if isinstance(cause, MemoryError):
        return _say("out of memory while simulating; shorten --duration, lower --rps or --max-machines, "
                    "or set PROVISIONER_MEMORY_BUDGET_GB lower so the planner refuses earlier", EXIT_USER_ERROR)
    if isinstance(cause, OSError) and cause.errno in (errno.EACCES, errno.EPERM) and cause.filename:
        # A file we were not allowed to open: it may be an input, so do not say "write".
        return _say(f"cannot open '{cause.filename}': {cause.strerror or cause}; check its permissions "
                    f"or choose another path", EXIT_USER_ERROR)
    if isinstance(cause, OSError) and cause.errno == errno.ENAMETOOLONG:   # a path the user gave, always
        name = str(cause.filename or "")
        shown = name if len(name) <= 80 else f"{name[:40]}...{name[-30:]}"
        fix = (f"give a shorter file name (at most {NAME_MAX_BYTES} bytes a name)"
               if long_name_part(name) is not None else "give a shorter path")
        return _say(f"path '{shown}' ({len(os.fsencode(name)):,} bytes): {cause.strerror or cause}; {fix}",
                    EXIT_USER_ERROR)
    if isinstance(cause, OSError) and cause.errno == errno.EBADF:   # `provision catalog >&-`
        _silence_stdout()
        return _say(f"cannot write the output: {cause.strerror or cause}; redirect it to a file or "
                    f"/dev/null instead of closing it", EXIT_USER_ERROR)
    if isinstance(cause, OSError) and cause.errno in (errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EROFS,
                                                      errno.EACCES):
        _silence_stdout()
        return _say(f"cannot write the output: {cause.strerror or cause}; free some space or redirect "
                    f"it elsewhere", EXIT_USER_ERROR)
    saved = save_traceback(exc)
    return _say(f"internal error ({type(exc).__name__}: {one_line(exc)[:200]}); this is a bug: the full "
                f"traceback is in {saved}", EXIT_INTERNAL)


def _broken_pipe(exc: BaseException) -> bool:
    """A write found the pipe's reader gone (EPIPE). typer turns the BrokenPipeError into
    SystemExit(1), and so does rich's `Console.on_broken_pipe`: both raise it while handling
    the error, which is then the exit's context."""
    if isinstance(exc, SystemExit):
        exc = exc.__context__
    cause = _root_cause(exc) if exc is not None else None
    return isinstance(cause, OSError) and cause.errno == errno.EPIPE


def _root_cause(exc: BaseException) -> BaseException:
    seen = set()
    while id(exc) not in seen:
        seen.add(id(exc))
        nxt = exc.__cause__ or exc.__context__
        if nxt is None or not isinstance(exc, SystemError):
            return exc
        exc = nxt
    return exc


def save_traceback(exc: BaseException) -> Path:
    """Write exc's full traceback to a file (PROVISIONER_TRACEBACK_DIR or the temp dir); its path."""
    folder = Path(os.environ.get(TRACEBACK_DIR_ENV) or tempfile.gettempdir())
    text = "".join(traceback.format_exception(exc))
    try:
        fd, name = tempfile.mkstemp(prefix=f"provision-{time.strftime('%Y%m%d-%H%M%S')}-",
                                    suffix=".txt", dir=folder)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(" ".join(sys.argv) + "\n\n" + text)
        return Path(name)
    except OSError:
        return Path("(not saved: the temporary directory is not writable)")


def _say(message: str, code: int) -> int:
    _echo_err(f"error: {one_line(message)}")
    return code


def _echo_err(line: str) -> None:
    try:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
    except (OSError, ValueError, AttributeError):   # stderr closed too (`2>&-`)
        pass


class _ClosedStdout(io.TextIOBase):
    """sys.stdout while file descriptor 1 is closed: Python leaves sys.stdout None and rich and
    typer drop what they write; here the first write fails as a write to a closed descriptor does."""

    encoding, errors = "utf-8", "strict"

    def writable(self) -> bool:
        return True

    def write(self, text) -> int:
        if not text:
            return 0
        raise OSError(errno.EBADF, "standard output is closed")


def _silence_stdout() -> None:
    """After a failed write, route stdout to /dev/null so the interpreter's final flush is quiet."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass
