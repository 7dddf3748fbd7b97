"""Options and helpers shared by several commands."""

from __future__ import annotations

import hashlib
import json
import math
import os
import sys
import threading
import time
from pathlib import Path

import typer

from hardware_catalog import read_input
from workloads import DEFAULT_DURATION_S, TraceGenerator, default_arrival

from .._validation import shown
from ..errors import ProvisionerError
from ..files import refuse_shipped, resolved
from ..results import json_safe
from ..store import refuse_foreign_study, sqlite_file

WORKLOAD_HELP = "'coding', 'conversation', or a path to a CSV trace (canonical, Azure or SplitwiseSim header)."
ARRIVAL_HELP = ("replay (a CSV trace's own arrivals and sizes, request by request; the default for a CSV path), "
                "poisson (the default for coding/conversation) or gamma (bursty, --cv).")
CV_HELP = "Coefficient of variation of the gamma arrival gaps (--arrival gamma)."
DEFAULT_MODEL = "bloom-176b"
DEFAULT_WORKLOAD = "coding"
# What a --duration help says when the flag is not given (the generator decides the window).
DURATION_DEFAULT_HELP = f"default {DEFAULT_DURATION_S:g}; a replayed trace: the whole file"


def trace_generator(workload: str, arrival: str | None, rps: float | None, duration_s: float | None, seed: int,
                    cv: float = 2.0) -> TraceGenerator:
    """The trace generator a command runs on (validated, one-line errors).

    No --duration (None) is left to the generator, the one rule the Python API shares: a
    replayed trace runs whole (with no --rps, at its own rate), drawn arrivals 120 s.
    """
    if rps is not None and not 0 < rps < math.inf:
        raise ProvisionerError(f"--rps must be > 0 and finite, in requests per second (got {rps:g})")
    if duration_s is not None and not 0 < duration_s < math.inf:
        raise ProvisionerError(f"--duration must be > 0 and finite, in seconds (got {duration_s:g})")
    check_seed(seed)
    arrival = arrival or default_arrival(workload)
    return TraceGenerator(workload, duration_s, seed, arrival=arrival, cv=cv, rps=rps)


def replay_note(traces: TraceGenerator, rps: float | None, requests: int, window_s: float | None = None) -> str | None:
    """One line saying what a replay did to the file (None for drawn arrivals); `window_s`
    the window simulated when it is not the generator's (a floor of requests stretched it)."""
    if traces.arrival != "replay":
        return None
    what = (f"time-scaled from its own {traces.native_rps:.4g} to {rps:g} req/s" if traces.rescaled(rps)
            else f"at its own {traces.native_rps:.4g} req/s")
    sha = f" (sha256 {traces.sha256[:12]})" if traces.sha256 else ""
    return (f"replayed trace {traces.to_json()['workload']}{sha}: {requests} request{'' if requests == 1 else 's'} in a "
            f"{window_s or traces.duration_s:.4g}-s window, {what}")


PIPED_WIDTH = 1000   # columns of a rich console writing to a file or pipe


def console():
    """A rich console on stdout (stderr when an output of the command is stdout); piped or
    redirected, wide enough never to truncate or wrap a table. Text is printed as written,
    never read as rich markup: the user's paths and names are in it ('[/b]/t.csv' was a
    MarkupError after the whole run); emphasis is a `style`."""
    from rich.console import Console

    from ..files import stdout_is_an_output

    stderr = stdout_is_an_output()   # `--report /dev/stdout > f.html`: the file is the report alone
    out = Console(markup=False, stderr=stderr)
    return out if out.is_terminal else Console(width=PIPED_WIDTH, soft_wrap=True, markup=False, stderr=stderr)


def given(ctx: typer.Context, param: str) -> bool:
    """The user typed this option (it is not at its default)."""
    source = ctx.get_parameter_source(param)
    return source is not None and source.name not in ("DEFAULT", "DEFAULT_MAP")


def refuse_idle_flags(ctx: typer.Context, workload: str, arrival: str | None, verify: bool = True) -> None:
    """A flag that would change nothing is an error, not silently dropped: the user meant
    something by it (one line naming the flag and the fix)."""
    if given(ctx, "cv") and (arrival or default_arrival(workload)) != "gamma":
        raise ProvisionerError("--cv sets the burstiness of gamma arrivals: add --arrival gamma, or drop --cv")
    for param in ("verify_seeds", "verify_duration"):
        if not verify and param in ctx.params and given(ctx, param):
            flag = "--" + param.replace("_", "-")
            raise ProvisionerError(f"{flag} sets the discrete-event re-check, which --no-verify turns off: "
                                   f"drop one of them")
    if "verify_seeds" in ctx.params and given(ctx, "verify_seeds") and _replays(workload, arrival):
        raise ProvisionerError("--verify-seeds sets how many drawn traces the discrete-event re-check runs; a "
                               "replayed trace draws nothing, so the re-check replays it once: drop --verify-seeds, "
                               "or draw arrivals with --arrival poisson or gamma")


def refuse_idle_seed(ctx: typer.Context, workload: str, arrival: str | None) -> None:
    """--seed where it seeds only the trace: a replayed one has no random draws to fix."""
    if given(ctx, "seed") and _replays(workload, arrival):
        raise ProvisionerError("--seed fixes the workload's random draws; a replayed trace has none (its own "
                               "arrivals and sizes): drop --seed, or draw arrivals with --arrival poisson or gamma")


def _replays(workload: str, arrival: str | None) -> bool:
    """A replayed trace: --arrival replay, or by default a trace file. A name that is neither
    shipped nor a file ('codng') is not one: its own error names the nearest workload."""
    if arrival is not None:
        return arrival == "replay"
    return default_arrival(workload) == "replay" and Path(workload).expanduser().is_file()


def check_seed(seed: int) -> None:
    if not 0 <= seed < 2**63:
        raise ProvisionerError(f"--seed must be a whole number in [0, 2**63) (got {shown(seed)})")


def echo_json(obj) -> None:
    typer.echo(json.dumps(json_safe(obj), indent=2))


# -- measured-profile latency models (every command that simulates) ---------------
def latency_profile_option(help_text: str = "Measured prefill and decode-iteration times (SplitwiseSim's "
                           "perf_model.csv columns); interpolated per model, GPU and TP, the roofline where "
                           "unmeasured."):
    return typer.Option(None, "--latency-profile", metavar="PATH.csv", help=help_text)


def prefill_chunk_option(default_help="Default: the -chunked families search it, the others prefill whole prompts."):
    return typer.Option(None, "--prefill-chunk-tokens", metavar="N",
                        help="Chunked prefill (Sarathi-Serve, vLLM's default): at most N prompt tokens per "
                             "iteration, long prompts split into chunks; 0 turns it off. " + default_help)


def mps_share_option():
    return typer.Option(None, "--mps-prefill-share", metavar="F",
                        help="Splitwiser families: the prefill process's share of the SMs (NVIDIA MPS) while "
                             "both processes run, strictly between 0 and 1; the decode process gets the rest. "
                             "Default: searched over 0.3, 0.5, 0.7 (simulate: 0.5).")


def duplicate_weights_option():
    return typer.Option(False, "--duplicate-weights",
                        help="Splitwiser families: each process loads its own copy of the weights (default: "
                             "one copy shared through CUDA IPC).")


def scheduler_option(help_text: str | None = None):
    """`--scheduler` (CONTRACTS.md item 9) for every command that simulates (`help_text`: a
    command's own, where it takes fewer policies)."""
    from ..schedulers import DEFAULT_SCHEDULER, SCHEDULER_HELP
    return typer.Option(DEFAULT_SCHEDULER, "--scheduler", metavar="POLICY", help=help_text or SCHEDULER_HELP)


def preemption_option():
    """`--preemption` for the commands that take an on-demand `--scheduler`."""
    return typer.Option("recompute", "--preemption", metavar="recompute|swap",
                        help="How an on-demand --scheduler preempts when KV memory runs out (vLLM's two modes): "
                             "recompute (default: drop the KV, prefill again) or swap (copy the KV to host memory "
                             "over PCIe and back; recompute when host memory is full). Baseline families.")


def swap_space_option():
    """`--swap-space-gb` next to `--preemption`."""
    from ..schedulers import DEFAULT_SWAP_SPACE_GB
    return typer.Option(DEFAULT_SWAP_SPACE_GB, "--swap-space-gb", metavar="GIB",
                        help="--preemption swap: host memory each GPU swaps KV into, GiB (vLLM's --swap-space; "
                             "default 4, vLLM's), capped by the machine's host memory (catalog) per replica.")


def check_swap_space_flag(ctx: typer.Context, preemption: str, swap_space_gb: float) -> float:
    """One line for --swap-space-gb without --preemption swap, or not > 0 and finite."""
    from ..schedulers import check_swap_space
    if given(ctx, "swap_space_gb") and preemption != "swap":
        raise ProvisionerError("--swap-space-gb sets the host memory of swap preemption: add --preemption swap, "
                               "or drop --swap-space-gb")
    return check_swap_space(swap_space_gb)


def check_preemption(ctx: typer.Context, preemption: str, scheduler: str) -> None:
    """One line for an unknown mode, or a typed --preemption (swap, or recompute) under a
    scheduler that does not preempt (it would change nothing): `schedulers.check_preemption`,
    whose parameter names print as flags."""
    from ..schedulers import check_preemption as check
    check(preemption, scheduler, chosen=given(ctx, "preemption"))


def high_priority_option():
    return typer.Option(0.0, "--high-priority-fraction", metavar="F",
                        help="Share of requests marked high priority (on-demand schedulers: admitted and kept "
                             "first, Llumnix's headroom); the JSON then has per-priority percentiles.")


def latency_interp_option(help_text: str = "How --latency-profile is interpolated: grid (default; prompt tokens x "
                          "batch size) or splitwisesim (SplitwiseSim's own rule, to reproduce its numbers)."):
    return typer.Option(None, "--latency-interp", help=help_text)


def check_latency_interp(interp: str | None) -> None:
    """Refuse a `--latency-interp` that names no interpolation rule (one line)."""
    from perfmodels import INTERPS
    if interp is not None and interp not in INTERPS:
        raise ProvisionerError(f"--latency-interp must be one of {', '.join(INTERPS)} (got '{interp}')")


def load_latency_model(profile, interp: str | None, where: str | None = None):
    """The LatencyModel of a command: the roofline (None) or a fitted profile model.
    where : how the profile's errors name it (default: the --latency-profile flag)."""
    check_latency_interp(interp)
    if profile is None:
        if interp is not None:
            raise ProvisionerError("--latency-interp needs --latency-profile PATH.csv (the measurements to "
                                   "interpolate)")
        return None
    from perfmodels import load_profile_model
    return load_profile_model(profile, interp or "grid", where=where or f"--latency-profile '{profile}'")


def family_pools(request, catalog) -> list[tuple[str, int]]:
    """(gpu, tp) of every pool a search of `request` may simulate (whole-machine TP)."""
    from ..designs import FAMILY_SPECS
    machines = []
    for f in request.families:
        spec = FAMILY_SPECS.get(f)
        machines += [spec.prompt_machine, spec.token_machine] if spec else []
    machines += list(request.prompt_machine_types or ()) + list(request.token_machine_types or ())
    return [(catalog.machine(m).gpu, catalog.machine(m).gpus_per_machine) for m in dict.fromkeys(machines)]


def latency_model_json(perf, model: str, pools, prompt_tokens=None) -> dict:
    """Warn (stderr, one line each) where the run leaves the profile; return the JSON's
    `latency_model` object."""
    notes = perf.fallbacks(model, pools, prompt_tokens)
    for note in notes:
        typer.echo(f"warning: latency profile: {note}", err=True)
    return {**perf.describe(), "fallbacks": notes}


def recorded_profile(result: dict, interp: str | None = None):
    """(path, interp) of the measured profile an answer of `provision --json` was found with
    ((None, interp) for the roofline); the file must be unchanged (SHA-256)."""
    recorded = result.get("latency_model") if isinstance(result, dict) else None   # else: the schema check says why
    if not isinstance(recorded, dict) or recorded.get("kind") != "profile":
        return None, interp
    path = Path(str(recorded.get("profile")))
    try:
        digest = hashlib.sha256(read_input(path)).hexdigest()
    except OSError as exc:
        raise ProvisionerError(f"the answer used the latency profile '{path}', which cannot be read "
                               f"({exc.strerror or exc}); pass --latency-profile PATH.csv") from None
    if digest != recorded.get("sha256"):
        raise ProvisionerError(f"the latency profile '{path}' changed since the answer was found "
                               f"(SHA-256 differs); restore it or pass --latency-profile PATH.csv")
    return str(path), interp or recorded.get("interp")


def study_option():
    return typer.Option(None, "--study", metavar="PATH.db|URL",
                        help="Keep every simulation, DES re-check and optuna trial in this SQLite file (created "
                             "if missing) or database URL (postgresql://user@host/db, shared by several "
                             "workers): the same command run again, after a kill too, re-uses them and gives "
                             "the same answer.")


def check_study_path(study: str | None, outputs, flag: str) -> None:
    """A --study SQLite file that is also an output path would be replaced by that output
    (atomically, after the run), losing every simulation the study kept: refused first; so
    is an existing file that is not a study (`refuse_foreign_study`)."""
    path = sqlite_file(study) if study else None
    if path is None:
        return
    refuse_shipped(path, "--study")
    refuse_foreign_study(study)
    db = resolved(path, "--study")
    _refuse_read_only_study(db)
    for out in outputs:
        if out is not None and resolved(out, flag) == db:
            raise ProvisionerError(f"{flag} '{out}' is also the --study database; give them different paths")


def _refuse_read_only_study(db: Path) -> None:
    """A study SQLite can only keep work where it may write the file and, beside it, its
    journal: refused now, not after the run as an internal error on its first write."""
    if db.exists() and not os.access(db, os.W_OK):
        raise ProvisionerError(f"--study '{db}' is read-only, and the study writes every result it keeps: make it "
                               f"writable (chmod u+w) or give another path")
    if db.parent.is_dir() and not os.access(db.parent, os.W_OK | os.X_OK):
        raise ProvisionerError(f"--study '{db}': its directory '{db.parent}' is read-only, and SQLite writes its "
                               f"journal there: give a path in a writable directory")


def input_files(*paths) -> tuple:
    """The files among `paths` (flag values, some None or names) this command reads: a
    report must never replace one of them (nor the shipped data a name such as
    `thunderserve-32gpu` stands for: `files.check_output_path`)."""
    return tuple(p for p in paths if p and Path(str(p)).is_file())


HEARTBEAT_S = 60.0   # off a terminal, a long stage says what it is doing this often
HEARTBEAT_ENV = "PROVISION_HEARTBEAT_S"   # ... or as often as this says (seconds)
HEARTBEAT_RANGE_S = (0.01, 1e9)   # shorter floods stderr; longer overflows threading's wait


def heartbeat_period_s() -> float:
    """The heartbeat's period: $PROVISION_HEARTBEAT_S if set, else HEARTBEAT_S."""
    text = os.environ.get(HEARTBEAT_ENV)
    if text is None:
        return HEARTBEAT_S
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    low, high = HEARTBEAT_RANGE_S
    if not low <= value <= high:
        raise ProvisionerError(f"{HEARTBEAT_ENV} must be a number of seconds from {low:g} to {high:,.0f} (got "
                               f"{text!r}): set it so, or unset it for one line every {HEARTBEAT_S:g} s")
    return value


def report_then_answer(report, write_report, show_answer) -> None:
    """Write a command's report (`write_report()`, when `report` names one), then show its
    answer. A report refused at the end (a file made at its path during the run, kept
    without --force) still shows the answer first: the search behind it may have taken
    minutes. show_answer(written): whether a report was written."""
    if report is None:
        show_answer(False)
        return
    try:
        write_report()
    except ProvisionerError:
        show_answer(False)
        raise
    show_answer(True)


def refuse_idle_force(force: bool, output, flag: str) -> None:
    """--force overwrites one output: given without it, it would change nothing."""
    if force and output is None:
        raise ProvisionerError(f"--force overwrites the {flag} file, and no {flag} is given; give {flag} PATH, "
                               f"or drop --force")


NUMBA_THREADS_ENV = "NUMBA_NUM_THREADS"   # numba's own; the sweep sets it for its workers
MAX_NUMBA_THREADS = 1024


def check_numba_threads() -> None:
    """Refuse a $NUMBA_NUM_THREADS numba cannot run with, before numba reads it: 0 was an
    internal error when the engine started, and 'abc' a traceback printed as a warning."""
    text = os.environ.get(NUMBA_THREADS_ENV)
    if text is None:
        return
    if not text.strip():   # empty: unset, or numba prints a traceback on int('')
        os.environ.pop(NUMBA_THREADS_ENV)
        return
    try:
        value = int(text.strip())
    except ValueError:
        value = 0
    if not 1 <= value <= MAX_NUMBA_THREADS:
        raise ProvisionerError(f"{NUMBA_THREADS_ENV} must be a whole number of threads from 1 to "
                               f"{MAX_NUMBA_THREADS} (got {text!r}): set it so, or unset it to use every core")


class RichProgress:
    """`provisioner.search.Progress` drawn with rich on stderr, gone when done. unit : what a
    stage counts ("designs"); None: stages without counts, each a spinner, its label and the
    time it has taken (`provision cloud`). When stderr is not a terminal (a log, a CI job)
    there is no bar: every `heartbeat_s` ($PROVISION_HEARTBEAT_S, default 60) of the run, a
    line on stderr names the stage it is in and for how long, so a search of minutes is seen
    working; shorter runs print nothing."""

    def __init__(self, unit: str | None = "designs", heartbeat_s: float | None = None):
        self.unit = unit
        self.heartbeat_s = heartbeat_period_s() if heartbeat_s is None else heartbeat_s

    def __enter__(self):
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, \
            TimeElapsedColumn

        console = Console(stderr=True)
        counts = () if self.unit is None else (BarColumn(), MofNCompleteColumn(), TextColumn(self.unit))
        self._bar = Progress(SpinnerColumn(), TextColumn("{task.description}"), *counts, TimeElapsedColumn(),
                             console=console, transient=True, disable=not console.is_terminal)
        self._bar.__enter__()
        self._task = None
        self._stage = None   # (label, total, start time) of the running stage, for the heartbeat
        self._count = 0
        self._stop = None
        self._stream = sys.stderr   # None when fd 2 was closed: then print() would write to stdout
        if not console.is_terminal and self._stream is not None:
            self._stop = threading.Event()
            threading.Thread(target=self._beat, name="provision-heartbeat", daemon=True).start()
        return self

    def __exit__(self, *exc):
        if self._stop is not None:
            self._stop.set()
        return self._bar.__exit__(*exc)

    def start(self, label: str, total: int | None = None) -> None:
        if self._task is not None:
            self._bar.remove_task(self._task)
        self._task = self._bar.add_task(label, total=total)
        self._stage, self._count = (label, total, time.monotonic()), 0

    def advance(self, n: int = 1) -> None:
        if self._task is not None:
            self._bar.advance(self._task, n)
            self._count += n

    def done(self) -> None:
        if self._task is not None:
            self._bar.remove_task(self._task)
            self._task = None
        self._stage = None

    def _beat(self) -> None:
        while not self._stop.wait(self.heartbeat_s):
            stage = self._stage
            if stage is None:
                continue
            label, total, t0 = stage
            count = f" {self._count:,}/{total:,} {self.unit}" if total and self.unit else ""
            try:
                print(f"... {label}{count} ({time.monotonic() - t0:,.0f} s)", file=self._stream, flush=True)
            except (OSError, ValueError):   # stderr closed or gone: the run goes on, unreported
                return
