"""Time-varying load: a piecewise-constant rate profile over hours.

A :class:`RateProfile` is a step function of the request rate: step ``k`` runs at
``rps[k]`` requests/s from ``start_s[k]`` to the next step's start (the last one to
``end_s``). :meth:`workloads.TraceGenerator.with_profile` applies it to a workload by
time rescaling: the generator's unit-rate stream (the same requests as at a constant
rate) is mapped through the inverse of the cumulative rate ``Lambda(t)``, so Poisson
arrivals become a non-homogeneous Poisson process, gamma arrivals a gamma renewal
process in "operational time", and a replayed file keeps its own gaps, stretched.

Profiles come from a CSV file (:func:`read_profile_csv`, columns ``time_s,rps``) or the
built-in diurnal curve (:func:`diurnal_profile`).
"""

from __future__ import annotations

import csv
import io
import math
import numbers
import os
from dataclasses import dataclass

import numpy as np

from hardware_catalog import decode_text, read_input
from workloads.errors import WorkloadError

__all__ = ["RateProfile", "ProfileFormatError", "read_profile_csv", "diurnal_profile", "PROFILE_COLUMNS",
           "DIURNAL_PEAK_HOUR", "DIURNAL_PEAK_TO_TROUGH"]

PROFILE_COLUMNS = ("time_s", "rps")
DIURNAL_PEAK_HOUR = 14.0         # busiest at 14:00, quietest 12 h later (02:00)
DIURNAL_PEAK_TO_TROUGH = 3.0     # the "peak/trough about 3x"
DIURNAL_STEP_S = 900.0           # 15-minute steps
DIURNAL_MAX_DAYS = 366          # a year of 15-minute steps at most (35k steps)


class ProfileFormatError(WorkloadError):
    """A rate-profile file breaks the format (the message names file, line and column; `params`
    only the Python arguments it names, so the CLI never rewrites the column name 'rps')."""


@dataclass(frozen=True, eq=False)
class RateProfile:
    """A piecewise-constant request rate.

    Parameters
    ----------
    start_s : (k,) float, step starts in s, strictly increasing, the first 0.
    rps : (k,) float, the rate of each step (requests/s), >= 0, some > 0.
    end_s : float, the end of the last step (s), > start_s[-1].
    name : str, where it came from (a file path or "diurnal").
    """

    start_s: np.ndarray
    rps: np.ndarray
    end_s: float
    name: str = "profile"

    def __post_init__(self) -> None:
        start, rps = _float_array("start_s", self.start_s), _float_array("rps", self.rps)
        if not _is_number(self.end_s):   # math.isfinite('10') was a TypeError
            raise WorkloadError(f"a rate profile's end_s must be a number of seconds, got {self.end_s!r}; give the "
                                f"end of the last step", params=("end_s",))
        if start.ndim != 1 or start.shape != rps.shape or start.size < 1:
            raise WorkloadError("a rate profile needs start_s and rps of the same length >= 1")
        if start[0] != 0.0 or np.any(np.diff(start) <= 0) or not (math.isfinite(self.end_s) and self.end_s > start[-1]):
            raise WorkloadError("a rate profile's steps must start at 0, increase, and end after the last start")
        if not np.all(np.isfinite(rps)) or np.any(rps < 0) or not np.any(rps > 0):
            raise WorkloadError("a rate profile's rates must be finite, >= 0, and not all 0")
        object.__setattr__(self, "start_s", start)
        object.__setattr__(self, "rps", rps)
        object.__setattr__(self, "end_s", float(self.end_s))

    @property
    def duration_s(self) -> float:
        return self.end_s

    @property
    def peak_rps(self) -> float:
        return float(self.rps.max())

    @property
    def mean_rps(self) -> float:
        return self.expected_requests / self.end_s

    @property
    def expected_requests(self) -> float:
        """The integral of the rate over the profile (requests)."""
        return float(self._cumulative_at_starts()[-1])

    def to_json(self) -> dict:
        """The steps as run (a CSV's already scaled to its peak) and the summary figures:
        :meth:`from_json` rebuilds the same profile whatever happens to the file since."""
        return {"name": self.name, "duration_s": self.duration_s, "peak_rps": self.peak_rps,
                "mean_rps": self.mean_rps, "start_s": self.start_s.tolist(), "rps": self.rps.tolist(),
                "end_s": self.end_s}

    @classmethod
    def from_json(cls, obj: dict) -> RateProfile:
        """The profile a :meth:`to_json` object (an autoscale result's ``profile``) describes."""
        missing = [k for k in ("start_s", "rps", "end_s") if k not in obj]
        if missing:
            raise WorkloadError(f"a rate profile's JSON needs start_s, rps and end_s (missing {', '.join(missing)}); "
                                f"give the 'profile' of a `provision autoscale --json` answer")
        return cls(np.asarray(obj["start_s"], dtype=float), np.asarray(obj["rps"], dtype=float), float(obj["end_s"]),
                   str(obj.get("name", "profile")))

    def scaled_to_peak(self, peak_rps: float) -> RateProfile:
        """The same shape with its peak at ``peak_rps``."""
        return RateProfile(self.start_s, self.rps * (peak_rps / self.peak_rps), self.end_s, self.name)

    def rate_at(self, t_s) -> np.ndarray:
        """The rate (requests/s) at times t_s (the last step's rate past the end)."""
        k = np.searchsorted(self.start_s, np.asarray(t_s, dtype=np.float64), side="right") - 1
        return self.rps[np.clip(k, 0, len(self.rps) - 1)]

    def cumulative(self, t_s) -> np.ndarray:
        """Lambda(t): expected requests in [0, t) (t clipped to the profile)."""
        t = np.clip(np.asarray(t_s, dtype=np.float64), 0.0, self.end_s)
        k = np.clip(np.searchsorted(self.start_s, t, side="right") - 1, 0, len(self.rps) - 1)
        return self._cumulative_at_starts()[k] + self.rps[k] * (t - self.start_s[k])

    def time_at(self, cumulative) -> np.ndarray:
        """The inverse of :meth:`cumulative`: the time at which Lambda reaches each value
        (values in [0, expected_requests); zero-rate steps are skipped)."""
        u = np.asarray(cumulative, dtype=np.float64)
        at_starts = self._cumulative_at_starts()
        # the last step whose start is at or below u: never a zero-rate step, whose
        # cumulative equals the next step's
        k = np.clip(np.searchsorted(at_starts, u, side="right") - 1, 0, len(self.rps) - 1)
        rate = self.rps[k]
        return self.start_s[k] + np.where(rate > 0, (u - at_starts[k]) / np.where(rate > 0, rate, 1.0), 0.0)

    def _cumulative_at_starts(self) -> np.ndarray:
        """(k + 1,) Lambda at each step start, then at the end."""
        ends = np.append(self.start_s[1:], self.end_s)
        with np.errstate(over="ignore"):   # an infinite total is refused where a trace is drawn
            return np.concatenate(([0.0], np.cumsum(self.rps * (ends - self.start_s))))


def diurnal_profile(peak_rps: float, duration_s: float = 86400.0, step_s: float = DIURNAL_STEP_S) -> RateProfile:
    """The built-in day: a cosine over 24 h, busiest at 14:00 and quietest at 02:00, the
    peak exactly ``DIURNAL_PEAK_TO_TROUGH`` (3x) the trough, in 15-minute steps (each at
    the curve's value at its midpoint, rescaled so the steps span trough..peak exactly).
    The mean rate is (peak + trough) / 2, two thirds of the peak."""
    if not (_is_number(peak_rps) and math.isfinite(peak_rps) and peak_rps > 0):   # '5' was a TypeError
        raise WorkloadError(f"the diurnal profile needs a peak rate peak_rps > 0, got {peak_rps!r}",
                            params=("peak_rps",))
    if not (_is_number(step_s) and math.isfinite(step_s) and step_s > 0):
        raise WorkloadError(f"the diurnal profile's step_s must be a number of seconds > 0, got {step_s!r}; "
                            f"give the length of one step, e.g. {DIURNAL_STEP_S:g}", params=("step_s",))
    if not (_is_number(duration_s) and math.isfinite(duration_s) and duration_s >= step_s):
        raise WorkloadError(f"the diurnal profile needs a duration_s of at least one step, {step_s:g} s, got "
                            f"{duration_s!r}", params=("duration_s",))
    if duration_s > DIURNAL_MAX_DAYS * 86400.0:
        raise WorkloadError(f"the diurnal profile lasts at most {DIURNAL_MAX_DAYS} days ({DIURNAL_MAX_DAYS * 86400:g} s, "
                            f"duration_s), got {duration_s:g} s; shorten it", params=("duration_s",))
    start = np.arange(0.0, duration_s, step_s)
    mid_h = (start + 0.5 * np.minimum(step_s, duration_s - start)) / 3600.0
    curve = np.cos(2.0 * np.pi * (mid_h - DIURNAL_PEAK_HOUR) / 24.0)
    share = (curve - curve.min()) / (curve.max() - curve.min()) if curve.max() > curve.min() else np.ones_like(curve)
    trough = peak_rps / DIURNAL_PEAK_TO_TROUGH
    return RateProfile(start, trough + (peak_rps - trough) * share, float(duration_s), "diurnal")


def read_profile_csv(path, duration_s: float | None = None) -> RateProfile:
    """A profile from a CSV file with the header ``time_s,rps``.

    Each row starts a step at ``time_s`` (s, strictly increasing; the trace starts at the
    first row's time, shifted to 0) at ``rps`` requests/s. The last step lasts as long
    as the gap before it, unless ``duration_s`` gives the profile's length from the
    first row (a one-row file needs it). The file is UTF-8 (a byte order mark allowed, as
    Excel writes) or UTF-16 (as PowerShell writes): see :func:`hardware_catalog.decode_text`.

    Raises
    ------
    ProfileFormatError : one line naming the file, the line and the column.
    """
    name = os.fspath(path)
    try:
        # read whole: a pipe (`<(...)`) cannot be reopened
        rows = list(csv.reader(io.StringIO(decode_text(read_input(name)), newline="")))
    except OSError as exc:
        raise ProfileFormatError(f"{name}: cannot read the rate profile ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise ProfileFormatError(f"{name}: not UTF-8 or UTF-16 text; save it as a UTF-8 CSV file with header "
                                 f"time_s,rps") from None
    except csv.Error as exc:   # a field past csv's size limit, a stray quote: was an internal error
        raise ProfileFormatError(f"{name}: not a valid CSV file ({exc}); give a CSV with header time_s,rps") from None
    lines = [(i + 1, row) for i, row in enumerate(rows) if row and any(c.strip() for c in row)]
    if not lines:
        raise ProfileFormatError(f"{name}: empty file; give a CSV with header time_s,rps")
    head_line, header = lines[0]
    if tuple(c.strip().lower() for c in header) != PROFILE_COLUMNS:
        raise ProfileFormatError(f"{name}:{head_line}: header is {','.join(header)!r}; the rate profile's header "
                                 f"must be time_s,rps")
    if len(lines) < 2:
        raise ProfileFormatError(f"{name}: no data rows after the header; give one row per step: time_s,rps")
    times, rates = [], []
    for line, row in lines[1:]:
        if len(row) != 2:
            raise ProfileFormatError(f"{name}:{line}: {len(row)} fields; each row needs 2 (time_s,rps)")
        t = _cell(name, line, 1, "time_s", row[0])
        if times and t <= times[-1]:
            raise ProfileFormatError(f"{name}:{line}: column 1 (time_s): {t:g} is not after the previous "
                                     f"row's {times[-1]:g}; times must increase")
        times.append(t)
        rates.append(_cell(name, line, 2, "rps", row[1]))
    start = np.asarray(times) - times[0]
    if duration_s is not None:
        end = float(duration_s)
        if not (math.isfinite(end) and end > 0):
            raise ProfileFormatError(f"{name}: duration_s must be > 0 s (got {end:g})", params=("duration_s",))
    elif len(start) < 2:
        raise ProfileFormatError(f"{name}: one row has no length; add a row or give duration_s", params=("duration_s",))
    else:
        end = float(start[-1]) + float(start[-1] - start[-2])   # Python floats: inf past the range, no warning
        if not math.isfinite(end):
            raise ProfileFormatError(f"{name}:{lines[-1][0]}: column 1 (time_s): the last step lasts as long as the "
                                     f"gap before it, so it would end at {start[-1]:g} + {start[-1] - start[-2]:g} s, "
                                     f"past a float's range; give smaller times, or --duration")
    keep = start < end   # a duration shorter than the file cuts its last steps
    if not any(r > 0 for r, k in zip(rates, keep) if k):
        raise ProfileFormatError(f"{name}: column 2 (rps) is 0 on every row in the profile's "
                                 f"{end:g} s; give a rate > 0 somewhere")
    return RateProfile(start[keep], np.asarray(rates)[keep], end, name)


def _is_number(value: object) -> bool:
    """A real number, not a bool nor a string ('5' is not a rate here)."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _float_array(name: str, values: object) -> np.ndarray:
    try:
        return np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        raise WorkloadError(f"a rate profile's {name} must be numbers, got {values!r:.60}", params=(name,)) from None


def _cell(name: str, line: int, column: int, header: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise ProfileFormatError(f"{name}:{line}: column {column} ({header}): {text.strip()!r} is not a finite "
                                 f"number >= 0")
    return value
