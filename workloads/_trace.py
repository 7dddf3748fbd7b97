"""The :class:`Trace` container: one row per request, stored as read-only arrays."""

from __future__ import annotations

import dataclasses
import math
import numbers
from dataclasses import dataclass

import numpy as np
import pandas as pd

from workloads.errors import TraceFormatError, WorkloadError

__all__ = ["Trace"]


@dataclass(frozen=True, eq=False)
class Trace:
    """A request trace: arrival times and token counts, one entry per request.

    The arrays are copied on construction and made read-only, so a ``Trace`` can be
    shared (and cached) safely.

    Parameters
    ----------
    arrival_s : array_like of float, shape (n,)
        Arrival time of each request in seconds from the start of the trace window;
        sorted ascending, finite, first >= 0.
    prompt_tokens : array_like of int, shape (n,)
        Prompt (context) length of each request in tokens, >= 1.
    output_tokens : array_like of int, shape (n,)
        Number of generated tokens of each request, >= 1.
    name : str
        ``"coding"``, ``"conversation"`` or the stem of the trace file.
    duration_s : float, optional
        Length in seconds of the window ``[0, duration_s)`` the trace covers, so that
        ``rate_rps = n / duration_s``. If omitted it is inferred from the arrivals as
        the last arrival plus one mean inter-arrival gap (so ``rate_rps`` equals the
        inverse mean gap); if all arrivals share one instant, the window ends 1 s after
        it. A replayed trace keeps exactly ``round(rps * duration_s)`` requests, so its
        last arrivals may fall slightly past ``duration_s``.

    Raises
    ------
    TraceFormatError
        If the arrays are not 1-D of equal length ``n >= 1``, arrivals are not finite,
        sorted and >= 0, token counts are not whole numbers >= 1, or ``duration_s`` is
        not a finite number > 0.
    """

    arrival_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    name: str
    duration_s: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str):   # 5 was kept, and broke the messages and JSON that name it
            raise TraceFormatError(f"a trace's name must be a string such as 'coding' or a file's stem, got "
                                   f"{self.name!r:.60}", params=("name",))
        arrival_s = _arrival_array(self.arrival_s, self.name)
        n = arrival_s.size
        prompt = _token_array(self.prompt_tokens, "prompt_tokens", n, self.name)
        output = _token_array(self.output_tokens, "output_tokens", n, self.name)
        duration_s = _duration(self.duration_s, arrival_s, self.name)
        for field, value in [("arrival_s", arrival_s), ("prompt_tokens", prompt),
                             ("output_tokens", output), ("duration_s", duration_s)]:
            object.__setattr__(self, field, value)

    def __len__(self) -> int:
        return int(self.arrival_s.size)

    def __repr__(self) -> str:
        return (f"Trace(name={self.name!r}, requests={len(self)}, "
                f"duration_s={self.duration_s:.6g}, rate_rps={self.rate_rps:.6g})")

    @property
    def rate_rps(self) -> float:
        """Mean request rate in requests per second, ``len(self) / duration_s``."""
        return len(self) / self.duration_s

    def to_frame(self) -> pd.DataFrame:
        """Return the trace as a table.

        Returns
        -------
        pandas.DataFrame, shape (n, 3)
            Columns ``arrival_s`` (float64, s), ``prompt_tokens`` and ``output_tokens``
            (int64, tokens); the canonical CSV format when written with ``index=False``.
        """
        return pd.DataFrame({"arrival_s": self.arrival_s.copy(),
                             "prompt_tokens": self.prompt_tokens.copy(),
                             "output_tokens": self.output_tokens.copy()})

    def head(self, duration_s: float) -> Trace:
        """Return the requests that arrive before ``duration_s``.

        Parameters
        ----------
        duration_s : float
            End of the kept window in seconds; must be > 0.

        Returns
        -------
        Trace
            The requests with ``arrival_s < duration_s``, with window length
            ``min(duration_s, self.duration_s)``.

        Raises
        ------
        WorkloadError
            If ``duration_s`` is not > 0 or no request arrives before it.
        """
        if not _is_positive(duration_s):   # a plain ValueError, unlike the package's other errors
            raise WorkloadError(f"duration_s must be a finite number of seconds > 0, got {duration_s!r}",
                                params=("duration_s",))
        keep = int(np.searchsorted(self.arrival_s, duration_s, side="left"))
        if keep == 0:
            raise WorkloadError(f"no request of trace '{self.name}' arrives before {duration_s:g} s (first "
                                f"arrival at {self.arrival_s[0]:g} s); use a longer duration_s",
                                params=("duration_s",))
        return Trace(self.arrival_s[:keep], self.prompt_tokens[:keep],
                     self.output_tokens[:keep], self.name,
                     min(float(duration_s), self.duration_s))

    def with_arrivals(self, arrival_s: np.ndarray, *,
                      duration_s: float | None = None) -> Trace:
        """Return the same requests with new arrival times.

        Parameters
        ----------
        arrival_s : array_like of float, shape (n,)
            New arrival times in seconds, sorted ascending, one per request in order.
        duration_s : float, optional
            Window length of the result in seconds; defaults to ``self.duration_s``.

        Returns
        -------
        Trace
        """
        window = self.duration_s if duration_s is None else duration_s
        return dataclasses.replace(self, arrival_s=arrival_s, duration_s=window)


def _fail(name: str, message: str) -> TraceFormatError:
    return TraceFormatError(f"trace '{name}': {message}")


def _arrival_array(values: object, name: str) -> np.ndarray:
    try:
        arr = np.array(values, dtype=np.float64)
    except (TypeError, ValueError):
        raise _fail(name, "arrival_s must be an array of numbers (seconds)") from None
    if arr.ndim != 1 or arr.size == 0:
        raise _fail(name, f"arrival_s must be a 1-D array with at least one request, "
                          f"got shape {arr.shape}; trace has no requests")
    if not np.all(np.isfinite(arr)):
        raise _fail(name, "arrival_s contains NaN or infinite times; drop those requests")
    if arr[0] < 0:
        raise _fail(name, f"first arrival is at {arr[0]:g} s; arrival times must be >= 0")
    unsorted = np.flatnonzero(np.diff(arr) < 0)
    if unsorted.size:
        i = int(unsorted[0]) + 1
        raise _fail(name, f"arrival_s is not sorted ascending (index {i}: {arr[i]:g} s "
                          f"after {arr[i - 1]:g} s); sort the requests by arrival time")
    arr.setflags(write=False)
    return arr


def _token_array(values: object, field: str, n: int, name: str) -> np.ndarray:
    raw = np.asarray(values)
    if raw.shape != (n,):
        raise _fail(name, f"{field} has shape {raw.shape} but arrival_s has shape ({n},); "
                          f"give one value per request")
    integral = raw.dtype.kind in "iu" or (
        raw.dtype.kind == "f" and bool(np.all(np.isfinite(raw) & (raw == np.round(raw)))))
    if not integral:
        raise _fail(name, f"{field} must hold whole numbers of tokens, got dtype {raw.dtype}")
    too_big = raw > np.iinfo(np.int64).max if raw.size else np.zeros(0, dtype=bool)
    if np.any(too_big):   # was wrapped by the cast and reported as a negative count
        i = int(np.flatnonzero(too_big)[0])
        raise _fail(name, f"{field}[{i}] = {raw[i]:.4g} tokens is past any context window; give token counts "
                          f"of at most {np.iinfo(np.int64).max}")
    arr = raw.astype(np.int64)  # astype copies, so the caller's array stays writable
    if np.any(arr < 1):
        i = int(np.flatnonzero(arr < 1)[0])
        raise _fail(name, f"{field}[{i}] = {arr[i]}; every request needs at least 1 token")
    arr.setflags(write=False)
    return arr


def _duration(value: float | None, arrival_s: np.ndarray, name: str) -> float:
    if value is None:
        return _inferred_window_s(arrival_s)
    if not _is_positive(value):
        raise _fail(name, f"duration_s must be a finite number of seconds > 0, got {value!r}")
    return float(value)


def _is_positive(value: object) -> bool:
    """True for a finite real number > 0 (bools and strings are not numbers here)."""
    if isinstance(value, (bool, str)) or not isinstance(value, numbers.Real):
        return False
    return math.isfinite(value) and value > 0


def _inferred_window_s(arrival_s: np.ndarray) -> float:
    """Last arrival plus one mean gap: the window a renewal process of that rate fills."""
    n = arrival_s.size
    span_s = float(arrival_s[-1] - arrival_s[0])
    mean_gap_s = span_s / (n - 1) if n > 1 and span_s > 0 else 1.0
    return float(arrival_s[-1]) + mean_gap_s
