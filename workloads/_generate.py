"""The one trace generator: every trace the project simulates is drawn here.

A :class:`TraceGenerator` holds a workload (a shipped name, a CSV file or a
:class:`Trace`), an arrival process, a window and a seed, and returns the trace at any
request rate. Traces are *nested across rates*: each process defines one unit-rate
stream of requests, and the trace at ``rps`` is that stream with time divided by
``rps``, cut to the window. A higher load therefore holds the same requests, sooner,
plus more of them: the only thing that changes with the load is the load (the search's
bisection on the rate relies on it).

- ``poisson`` and ``gamma``: request sizes are drawn jointly, with replacement, from the
  source's requests; unit-rate gaps are exponential (or gamma with coefficient of
  variation ``cv``), the first arrival at 0. The trace at ``rps`` holds exactly
  ``round(rps * duration_s)`` requests (its last arrivals may fall slightly past the
  window). Both processes draw the same sizes.
- ``replay``: the source's own requests in order, its arrival times shifted to start at
  0 and scaled by ``native_rps / rps`` (``native_rps``: the inverse mean gap of the
  file). The trace holds the requests that arrive within the window; a window longer
  than the file wraps around (copies shifted by the file's span plus one mean gap). No
  window (``duration_s=None``) means the whole file once; with neither a rate nor a
  window, the file is replayed exactly as recorded.

No window given (``duration_s=None``, the default) is decided here, once, for every
caller (the CLI, the search, ``make_workload``): a replay runs the whole file once; drawn
arrivals run ``DEFAULT_DURATION_S``.
"""

from __future__ import annotations

import difflib
import math
import os

import numpy as np

from workloads._arrivals import MAX_TRACE_REQUESTS, check_cv, check_positive, request_count
from workloads._profile import RateProfile
from workloads._readers import WORKLOAD_ALIASES, WORKLOAD_NAMES, azure_trace, read_trace_file
from workloads._trace import Trace
from workloads.errors import UnknownWorkloadError, WorkloadError

# A trace replayed at its own rate spans at most ~30 years: longer is a unit mistake (ms or ns as s).
# Past this span (1e100 s) no unit makes sense of it, and a window's arithmetic overflows.
MAX_RESCALABLE_SPAN_S = 1e100
MAX_REPLAY_SPAN_S = 1e9
# The window of drawn arrivals when none is given: Splitwise's 120-s provisioning traces.
DEFAULT_DURATION_S = 120.0

__all__ = ["ARRIVAL_PROCESSES", "DEFAULT_DURATION_S", "TraceGenerator", "WINDOW_MEASURES", "check_positive",
           "default_arrival"]

ARRIVAL_PROCESSES: tuple[str, ...] = ("replay", "poisson", "gamma")
# What makes a window of a replay the busiest (`TraceGenerator.busiest_window`): its requests,
# the prompt tokens they bring (prefill's work) or the tokens they generate (decode's steps).
WINDOW_MEASURES: tuple[str, ...] = ("requests", "prompt_tokens", "output_tokens")
_ARRIVAL_KEYS = {"poisson": 0x5CA1E, "gamma": 0x6A33A}   # independent arrival streams per seed
_WINDOW_REL_TOL = 1e-12   # an arrival within this fraction of the window's end is past it


def default_arrival(workload) -> str:
    """``"poisson"`` for a shipped name, ``"replay"`` for a CSV path or a Trace."""
    return "poisson" if shipped_name(workload) is not None else "replay"


class TraceGenerator:
    """Traces of one workload at any rate, nested across rates (see the module docstring).

    Parameters
    ----------
    workload : "coding", "conversation" (aliases "code", "conv"), a CSV path or a Trace.
    duration_s : window of every trace (s), > 0. None (default): a replay's whole file
        once at the reference rate ``rps``; drawn arrivals ``DEFAULT_DURATION_S`` (120 s).
    seed : int; fixes the sizes and arrivals of ``poisson`` and ``gamma``.
    arrival : "replay", "poisson" or "gamma"; default :func:`default_arrival`.
    cv : coefficient of variation of the ``gamma`` gaps, > 0.
    rps : reference rate (requests/s) that resolves ``duration_s=None`` for a replay;
        default the file's own rate.

    Raises
    ------
    ValueError : a bad parameter, in one line naming it and the fix.
    UnknownWorkloadError, TraceFormatError : the workload cannot be read.
    """

    def __init__(self, workload, duration_s: float | None = None, seed=0, *, arrival: str | None = None,
                 cv: float = 2.0, rps: float | None = None):
        self.arrival = default_arrival(workload) if arrival is None else arrival
        if self.arrival not in ARRIVAL_PROCESSES:
            raise WorkloadError(f"arrival must be one of {', '.join(ARRIVAL_PROCESSES)}, got {arrival!r}",
                                params=("arrival",))
        check_cv(cv)
        if rps is not None:
            check_positive("rps", rps, "the mean request rate in requests per second, e.g. 70")
        self.workload = workload
        self.source, self.sha256 = _source_trace(workload)
        self.seed = _int_seed(seed)
        self.cv = float(cv)
        self.native_rps = _native_rps(self.source, self.label) if self.arrival == "replay" else None
        # a replay with no window given is the user's whole file (`whole_at`)
        self.whole_file = self.arrival == "replay" and duration_s is None
        if duration_s is None:
            duration_s = self._default_window_s(rps)
        check_positive("duration_s", duration_s, "the window length in seconds, e.g. 120")
        self.duration_s = float(duration_s)
        self._n = 0
        self._unit = self._sizes = None

    def _default_window_s(self, rps: float | None) -> float:
        """The window when none is given: a replay is the user's own requests, so all of
        them (the file once, at `rps` or its own rate); drawn arrivals have no natural end."""
        if self.arrival != "replay":
            return DEFAULT_DURATION_S
        return len(self.source) / (rps or self.native_rps)

    def whole_at(self, rps: float) -> Trace:
        """A replay's whole file once at ``rps`` requests/s, every row, whatever the window:
        what a question on the user's own requests probes at each rate it tries (``at``
        keeps the window, which at a lower rate holds only the file's first rows)."""
        if self.arrival != "replay":
            raise WorkloadError(f"whole_at replays a file; {self.arrival} arrivals have no whole",
                                params=("arrival",))
        check_positive("rps", rps, "the mean request rate in requests per second, e.g. 70")
        src = self.source
        factor = self.native_rps / float(rps)
        return Trace((src.arrival_s - src.arrival_s[0]) * factor, src.prompt_tokens, src.output_tokens, self.name,
                     len(src) / float(rps))

    @property
    def name(self) -> str:
        return self.source.name

    @property
    def label(self) -> str:
        """How an error names the trace: the file the user gave, else the workload's name."""
        return self.name if self.sha256 is None else os.fspath(self.workload)

    def at(self, rps: float | None = None) -> Trace:
        """The trace at ``rps`` requests/s (None: a replay's own rate); window ``duration_s``."""
        if rps is None:
            if self.arrival != "replay":
                raise WorkloadError(f"rps must be given for {self.arrival} arrivals; give the mean request rate",
                                    params=("rps",))
            rps = self.native_rps
        check_positive("rps", rps, "the mean request rate in requests per second, e.g. 70")
        if self.arrival == "replay":
            return self._replay(float(rps))
        k = request_count(rps, self.duration_s)   # at least one, at most MAX_TRACE_REQUESTS
        self._grow(k)
        return Trace(self._unit[:k] / rps, self._sizes[0][:k], self._sizes[1][:k], self.name, self.duration_s)

    def busiest_window(self, rps: float, profile=None, *, day: Trace | None = None,
                       by: str = "requests") -> tuple[Trace, float]:
        """The window of ``duration_s`` that holds the most requests, as a trace starting at 0,
        and where it starts (s). ``by`` (one of ``WINDOW_MEASURES``) weighs them: the most
        ``"requests"``, the most ``"prompt_tokens"`` (prefill's work) or the most
        ``"output_tokens"`` (decode's steps); a window of fewer, longer requests can hold
        more work than the one of the most requests.

        Drawn arrivals are one stationary process, so any window is as busy as another:
        ``(at(rps), 0.0)``, the peak's window. A replay is the file's own arrivals, whose rate
        varies. Without a profile: the window of the trace at ``rps`` that starts at the
        arrival after which the most requests arrive within ``duration_s`` (wrapping around
        the file as ``with_profile`` does; the earliest on ties, so a file whose first window
        is busiest gives ``at(rps)``), and where it starts in that trace. With a
        :class:`RateProfile`: the day's own busiest window, ``rps`` unused: of the requests
        ``with_profile(profile)`` replays, at the times it plays them (a burst the day plays
        in a trough arrives at the trough's rate, not the peak's), the most in any window
        within the day starting at a request or the day's last window (the earliest on
        ties), with their own sizes, and where it starts in the day. What a static cluster
        for a replayed day must carry (``provision autoscale``). A day shorter than
        ``duration_s`` is one window, the day, whose ``rate_rps`` is the rate it carries.
        ``day``: ``with_profile(profile)``, when the caller drew it already (a 24-h replay
        is not drawn twice).
        """
        if by not in WINDOW_MEASURES:
            raise WorkloadError(f"by must be one of {', '.join(WINDOW_MEASURES)} (got {by!r:.40})", params=("by",))
        if self.arrival != "replay":
            return self.at(rps), 0.0
        check_positive("rps", rps, "the mean request rate in requests per second, e.g. 70")
        if profile is not None:
            return self._busiest_of_day(profile, self.with_profile(profile) if day is None else day, by)
        src = self.source
        m = len(src)
        pos, factor, window_s = self._replay_positions(float(rps), extra_copies=1)   # windows from any start
        ends = np.searchsorted(pos, pos[:m] + window_s, side="left")
        i = _heaviest_window(ends, _weights(src, by, len(pos)))
        k = int(ends[i]) - i
        self._check_replay_window(k, float(rps), float((pos[i + k - 1] - pos[i]) * factor))
        rows = (i + np.arange(k)) % m
        return (Trace((pos[i:i + k] - pos[i]) * factor, src.prompt_tokens[rows], src.output_tokens[rows], self.name,
                      self.duration_s), float(pos[i] * factor))

    def _busiest_of_day(self, profile, day: Trace, by: str) -> tuple[Trace, float]:
        """The busiest ``duration_s`` of the replayed `day` under `profile`, as it plays it:
        of the windows within the day, those starting at a request and the day's last (a
        window starting later is cut short by the day's end and holds no more than the
        last: cut short, one long prompt in the day's last millisecond read as 1,000 req/s).
        A day shorter than the window is one window, the day (a 300-s day at 1 req/s under
        a 600-s window carries 1 req/s, not 0.5)."""
        arrival = day.arrival_s   # at least one request, at most a trace's
        last_start = max(0.0, float(profile.end_s) - self.duration_s)
        full = int(np.searchsorted(arrival, last_start, side="right"))   # requests a whole window starts at
        firsts = np.r_[np.arange(full), np.searchsorted(arrival, last_start, side="left")]
        starts = np.r_[arrival[:full], last_start]
        ends = np.searchsorted(arrival, starts + self.duration_s * (1.0 - _WINDOW_REL_TOL), side="left")
        ends[-1] = len(arrival)   # the last window ends with the day: every arrival is before end_s
        j = _heaviest_window(ends, _weights(day, by, len(arrival)), firsts)
        i, k, start = int(firsts[j]), int(ends[j] - firsts[j]), float(starts[j])
        covered_s = min(self.duration_s, float(profile.end_s) - start)
        return (Trace(arrival[i:i + k] - start, day.prompt_tokens[i:i + k], day.output_tokens[i:i + k],
                      self.name, covered_s), start)

    def check_rate(self, rps: float) -> None:
        """Refuse, before drawing anything, a rate whose trace would hold no request or more
        than a trace holds (drawn arrivals), or a replay whose window wraps its file more
        times than a trace holds (the rest of a replay is checked as :meth:`at` cuts it)."""
        if self.arrival == "replay":
            check_positive("rps", rps, "the mean request rate in requests per second, e.g. 70")
            self._replay_copies(float(rps))
        else:
            request_count(rps, self.duration_s)

    def with_profile(self, profile) -> Trace:
        """The trace under a time-varying rate (a :class:`~workloads.RateProfile`), window
        ``[0, profile.duration_s)``: this generator's unit-rate stream (the requests of
        every constant-rate trace, in the same order) with unit time ``u`` placed at
        ``profile.time_at(u)``, the inverse of the cumulative rate (time rescaling)."""
        if not isinstance(profile, RateProfile):   # 5 was an AttributeError
            raise WorkloadError(f"profile must be a workloads.RateProfile, got {profile!r:.60}; build one with "
                                f"diurnal_profile(peak_rps) or read_profile_csv(path)", params=("profile",))
        total = profile.expected_requests
        if total > MAX_TRACE_REQUESTS:
            raise WorkloadError(f"the rate profile '{profile.name}' holds {total:.3g} requests, more than a trace "
                                f"holds (at most {MAX_TRACE_REQUESTS:,}); lower its rates or shorten it")
        if self.arrival == "replay":
            unit, prompt, output = self._replay_unit(total)
        else:
            self._grow(int(total) + 2)
            while self._unit[self._n - 1] < total:
                self._grow(2 * self._n)
            k = int(np.searchsorted(self._unit, total, side="left"))
            unit, prompt, output = self._unit[:k], self._sizes[0][:k], self._sizes[1][:k]
        if len(unit) < 1:
            raise WorkloadError(f"no request arrives under the rate profile '{profile.name}'; raise its rates")
        arrival = np.minimum(profile.time_at(unit), np.nextafter(profile.end_s, 0.0))
        return Trace(arrival, prompt, output, self.name, profile.duration_s)

    def _replay_unit(self, total: float):
        """The file's requests at unit rate (mean gap 1), wrapped, up to unit time ``total``."""
        src = self.source
        m = len(src)
        unit = (src.arrival_s - src.arrival_s[0]) * self.native_rps
        copies = max(1, math.ceil(total / m))
        pos = (unit[np.newaxis, :] + m * np.arange(copies)[:, np.newaxis]).ravel()
        k = int(np.searchsorted(pos, total * (1.0 - _WINDOW_REL_TOL), side="left"))
        rows = np.arange(k) % m
        return pos[:k], src.prompt_tokens[rows], src.output_tokens[rows]

    def rescaled(self, rps: float | None) -> bool:
        """Whether the trace at ``rps`` moves a replayed file's arrivals in time."""
        return self.arrival == "replay" and rps is not None and float(rps) != self.native_rps

    def to_json(self, rps: float | None = None) -> dict:
        """Everything needed to rebuild the trace at ``rps`` (see :meth:`from_json`)."""
        return {"workload": str(os.fspath(self.workload)) if not isinstance(self.workload, Trace) else self.name,
                "workload_sha256": self.sha256, "arrival": self.arrival,
                "rps": None if rps is None else float(rps), "duration_s": self.duration_s, "seed": self.seed,
                "cv": self.cv, "native_rps": self.native_rps, "rescaled": self.rescaled(rps)}

    @classmethod
    def from_json(cls, obj: dict) -> TraceGenerator:
        """The generator a :meth:`to_json` object (or a result's ``question``) describes;
        without an ``arrival`` key, the workload's :func:`default_arrival`.

        Refuses, in one line, a trace file whose SHA-256 differs from the recorded one.
        """
        if not isinstance(obj, dict) or "workload" not in obj:   # {} was a KeyError
            raise WorkloadError(f"a trace generator's JSON needs a 'workload' key, got {obj!r:.60}; give "
                                f"TraceGenerator.to_json() or a result's 'question'")
        # no arrival given (a hand-written question; every result the tool writes records one): the
        # workload's default, as the CLI and TraceGenerator() apply it, so a CSV is replayed
        gen = cls(obj["workload"], obj.get("duration_s"), obj.get("seed", 0),
                  arrival=obj.get("arrival") or None, cv=2.0 if obj.get("cv") is None else obj["cv"])
        want = obj.get("workload_sha256")
        if want and gen.sha256 != want:
            raise WorkloadError(f"trace file '{obj['workload']}' has SHA-256 {gen.sha256[:12]}..., not the recorded "
                             f"{want[:12]}...: it changed since the result was written; give the original file")
        return gen

    # -- poisson and gamma: one unit-rate stream per seed ------------------------------
    def _grow(self, n: int) -> None:
        if n <= self._n:
            return
        n = max(n, 2 * self._n, 1024)
        # Both draws are prefix-stable: a longer stream starts with the shorter one.
        size_rng = np.random.default_rng(self.seed).spawn(2)[0]
        rows = size_rng.integers(0, len(self.source), size=n)
        rng = np.random.default_rng([self.seed, _ARRIVAL_KEYS[self.arrival]])
        if self.arrival == "poisson":
            gaps = rng.standard_exponential(n)
        else:
            gaps = rng.gamma(1.0 / self.cv**2, self.cv**2, size=n)
        self._unit = np.cumsum(gaps) - gaps[0]
        self._sizes = (self.source.prompt_tokens[rows], self.source.output_tokens[rows])
        self._n = n

    # -- replay ------------------------------------------------------------------------
    def _replay(self, rps: float) -> Trace:
        src = self.source
        m = len(src)
        pos, factor, window_s = self._replay_positions(rps)
        k = int(np.searchsorted(pos, window_s, side="left"))
        self._check_replay_window(k, rps, float(pos[k - 1] * factor) if k > 0 else 0.0)
        rows = np.arange(k) % m
        return Trace(pos[:k] * factor, src.prompt_tokens[rows], src.output_tokens[rows], self.name,
                     self.duration_s)

    def _replay_positions(self, rps: float, extra_copies: int = 0):
        """(the file's arrivals wrapped over the window, in its own seconds from 0; the factor
        to seconds at `rps`; the window in its own seconds). `extra_copies` more copies of the
        file, for windows that start past its beginning."""
        src = self.source
        offset_s = src.arrival_s - src.arrival_s[0]
        copies, period_s, factor, window_s = self._replay_copies(rps, extra_copies)
        return (offset_s[np.newaxis, :] + period_s * np.arange(copies)[:, np.newaxis]).ravel(), factor, window_s

    def _replay_copies(self, rps: float, extra_copies: int = 0) -> tuple[int, float, float, float]:
        """(copies of the file the window at `rps` wraps over, the file's period in its own
        seconds, the factor to seconds at `rps`, the window in its own seconds); refused
        before anything is allocated when the copies hold more than a trace."""
        m = len(self.source)
        period_s = m / self.native_rps           # the file's span plus one mean gap
        factor = self.native_rps / rps           # exactly 1.0 at the file's own rate
        window_s = self.duration_s / factor * (1.0 - _WINDOW_REL_TOL)   # in the file's own seconds
        ratio = window_s / period_s   # inf past the floats (a 1e308-s window): checked before ceil
        copies = (max(1, math.ceil(ratio)) if ratio * m <= 2 * MAX_TRACE_REQUESTS else ratio) + extra_copies
        if copies * m > 2 * MAX_TRACE_REQUESTS:   # a window far longer than the file
            times = f"{copies:,.4g} times" if math.isfinite(copies) else "beyond counting"
            raise WorkloadError(f"a {self.duration_s:g}-s window of trace '{self.label}' at {rps:g} req/s repeats the "
                                f"file {times}, more than a trace holds ({MAX_TRACE_REQUESTS:,} "
                                f"requests); shorten duration_s", params=("duration_s",))
        return int(copies), period_s, factor, window_s

    def _check_replay_window(self, k: int, rps: float, span_s: float) -> None:
        """Refuse a replayed window of `k` requests over `span_s` seconds that no trace holds."""
        if k > MAX_TRACE_REQUESTS:
            raise WorkloadError(f"a {self.duration_s:g}-s window of trace '{self.label}' at {rps:g} req/s is {k:,} "
                                f"requests, more than a trace holds ({MAX_TRACE_REQUESTS:,}); shorten duration_s",
                                params=("duration_s",))
        if k < 1:
            raise WorkloadError(f"no request of trace '{self.label}' arrives in a {self.duration_s:g}-s window at "
                                f"{rps:g} req/s; use a longer duration_s", params=("duration_s",))
        if span_s > MAX_REPLAY_SPAN_S:   # the simulators would step through ages of idle time
            raise WorkloadError(f"trace '{self.label}' at {rps:.3g} req/s spans {span_s:.3g} s ({span_s / 3.156e7:.3g} "
                                f"years): write its arrival times in seconds (milliseconds / 1e3, nanoseconds / "
                                f"1e9), or give rps to rescale it", params=("rps",))


def shipped_name(workload) -> str | None:
    """The shipped workload `workload` names (an alias too: 'code' is 'coding'), else None."""
    if isinstance(workload, str) and workload.strip().lower() in WORKLOAD_ALIASES:
        return WORKLOAD_ALIASES[workload.strip().lower()]
    return None


def _source_trace(workload) -> tuple[Trace, str | None]:
    """The trace that request sizes (and replayed arrivals) come from, and the SHA-256 of
    its file (None: a Trace or a shipped name), from one read of it."""
    if isinstance(workload, Trace):
        return workload, None
    if shipped_name(workload) is not None:
        return azure_trace(workload), None
    if isinstance(workload, os.PathLike) or (isinstance(workload, str) and _looks_like_path(workload)):
        return read_trace_file(workload)
    near = difflib.get_close_matches(str(workload).strip().lower(), list(WORKLOAD_ALIASES), n=1)
    hint = f"did you mean {WORKLOAD_ALIASES[near[0]]!r}? " if near else ""
    raise UnknownWorkloadError(f"unknown workload {workload!r}; {hint}use one of {', '.join(WORKLOAD_NAMES)} "
                               f"or a path to a CSV trace")


def _looks_like_path(text: str) -> bool:
    return os.path.exists(text) or text.lower().endswith(".csv") or os.sep in text or "/" in text


def _native_rps(trace: Trace, label: str) -> float:
    """The inverse mean gap of a recorded trace (what replay rescales from); `label` names it."""
    span_s = float(trace.arrival_s[-1] - trace.arrival_s[0])
    if span_s > MAX_RESCALABLE_SPAN_S:   # its windows and rescaling overflow to inf and NaN
        raise WorkloadError(f"trace '{label}' spans {span_s:.3g} s between its first and last arrival: no unit of "
                            f"time (seconds, ms, ns) makes that a trace; fix its arrival times")
    if len(trace) < 2 or not span_s > 0:
        raise WorkloadError(f"trace '{label}' has no rate to replay ({len(trace)} request(s) over "
                            f"{span_s:g} s); it needs requests at two or more distinct times, or use "
                            f"arrival='poisson'", params=("arrival",))
    rate = (len(trace) - 1) / span_s
    if not math.isfinite(rate):   # a span of 1e-320 s: its window then read 0 s, blamed on --duration
        raise WorkloadError(f"trace '{label}' spans {span_s:.3g} s between its first and last arrival, too short "
                            f"to have a rate; write its arrival times in seconds")
    return rate


def _int_seed(seed) -> int:
    """An int seed; a Generator or SeedSequence gives one draw, None fresh entropy."""
    if isinstance(seed, (bool, np.bool_)):
        raise WorkloadError(f"seed must be an integer >= 0, got {seed!r}", params=("seed",))
    if isinstance(seed, (int, np.integer)):
        if seed < 0:
            raise WorkloadError(f"seed must be an integer >= 0, got {seed!r}", params=("seed",))
        if seed >= 2**63:   # the bound of every other seed (ProvisionRequest, --seed); a result JSON's too
            raise WorkloadError(f"seed must be an integer below 2**63, got {seed!r}", params=("seed",))
        return int(seed)
    if seed is None or isinstance(seed, (np.random.Generator, np.random.SeedSequence)):
        return int(np.random.default_rng(seed).integers(2**63))
    raise WorkloadError(f"seed must be an integer >= 0, got {seed!r}", params=("seed",))


def _weights(trace: Trace, by: str, n: int) -> np.ndarray:
    """Each of the first `n` positions' weight under measure `by` (positions past the
    trace's own wrap around it, as a replay's windows do)."""
    if by == "requests":
        return np.ones(n)
    sizes = trace.prompt_tokens if by == "prompt_tokens" else trace.output_tokens
    return np.asarray(sizes, dtype=np.float64)[np.arange(n) % len(trace)]


def _heaviest_window(ends: np.ndarray, weights: np.ndarray, firsts: np.ndarray | None = None) -> int:
    """The window j over positions [firsts[j], ends[j]) (default firsts[j] = j) that weighs
    the most (the earliest on ties)."""
    cumulative = np.concatenate([[0.0], np.cumsum(weights)])
    firsts = np.arange(len(ends)) if firsts is None else firsts
    return int(np.argmax(cumulative[ends] - cumulative[firsts]))
