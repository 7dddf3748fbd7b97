"""Read request traces from CSV files, and load the shipped Azure 2023 traces."""

from __future__ import annotations

import csv
import functools
import hashlib
import io
import os
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from collections.abc import Iterator
from typing import TextIO

import numpy as np
import pandas as pd

from hardware_catalog import decode_text, read_input
from workloads._trace import Trace
from workloads.errors import TraceFormatError, UnknownWorkloadError

__all__ = ["WORKLOAD_NAMES", "azure_trace", "read_trace_csv"]

WORKLOAD_NAMES: tuple[str, ...] = ("coding", "conversation")

WORKLOAD_ALIASES = {"coding": "coding", "code": "coding",
            "conversation": "conversation", "conv": "conversation"}
_SHIPPED_FILES = {"coding": "code.csv", "conversation": "conv.csv"}
_AZURE_TIME_EXAMPLE = "2023-11-16 18:17:03.9799600"
# Larger token counts are typos or overflow: they exceed every model's context window (10M
# tokens at most in 2026), and a simulator would step through each output token.
MAX_TOKENS_PER_REQUEST = 1e7


@dataclass(frozen=True)
class _Format:
    """One accepted CSV layout and where its three trace fields live."""

    label: str
    columns: tuple[str, ...]
    time: str
    prompt: str
    output: str

    @property
    def header(self) -> str:
        return ",".join(self.columns)


_FORMATS = (
    _Format("canonical", ("arrival_s", "prompt_tokens", "output_tokens"),
            "arrival_s", "prompt_tokens", "output_tokens"),
    _Format("Azure", ("TIMESTAMP", "ContextTokens", "GeneratedTokens"),
            "TIMESTAMP", "ContextTokens", "GeneratedTokens"),
    _Format("SplitwiseSim", ("request_id", "request_type", "application_id",
                             "arrival_timestamp", "batch_size", "prompt_size", "token_size"),
            "arrival_timestamp", "prompt_size", "token_size"),
)


def read_trace_csv(path: str | os.PathLike[str]) -> Trace:
    """Read a request trace from a CSV file.

    The format is detected from the header line (column names match case-insensitively):

    - canonical ``arrival_s,prompt_tokens,output_tokens``: arrival times in seconds
      (>= 0), kept as they are;
    - Azure public dataset ``TIMESTAMP,ContextTokens,GeneratedTokens``: timestamps such
      as ``2023-11-16 18:17:03.9799600`` (ISO 8601, up to nanoseconds), converted to
      seconds since the earliest request;
    - SplitwiseSim ``request_id,request_type,application_id,arrival_timestamp,
      batch_size,prompt_size,token_size``: ``arrival_timestamp`` in seconds (>= 0);
      every row must have ``batch_size`` 1.

    Rows whose arrival times are out of order are sorted by arrival time (stable, so
    ties keep file order); this is not an error. Blank lines are skipped. The file is
    UTF-8 (a byte order mark allowed, as Excel writes) or UTF-16 (as PowerShell writes):
    see :func:`hardware_catalog.decode_text`.

    Parameters
    ----------
    path : str or os.PathLike
        The CSV file.

    Returns
    -------
    Trace
        ``n`` requests, named after the file stem, with the window length inferred
        from the arrivals (see :class:`Trace`).

    Raises
    ------
    TraceFormatError
        One line naming the file, the line (as an editor numbers it: the header is
        line 1) and the column, with the fix: missing or unreadable file, another
        encoding (Latin-1: save it as UTF-8), empty file,
        header only, unknown header, empty or non-numeric cell, non-whole or < 1 token
        count, negative or non-finite time, unparseable timestamp.
    """
    return read_trace_file(path)[0]


def read_trace_file(path: str | os.PathLike[str]) -> tuple[Trace, str]:
    """`read_trace_csv`'s trace and the SHA-256 of the bytes it was read from: the file is
    read once (a pipe, `<(...)` or a named one, cannot be read twice)."""
    source = os.fspath(path)
    try:
        raw = read_input(source)
        text = decode_text(raw)
        return _parse(io.StringIO(text, newline=""), source, Path(source).stem), hashlib.sha256(raw).hexdigest()
    except FileNotFoundError:
        raise TraceFormatError(f"cannot read trace '{source}': no such file") from None
    except IsADirectoryError:
        raise TraceFormatError(f"cannot read trace '{source}': it is a directory; "
                               f"give the path of a CSV file") from None
    except UnicodeDecodeError:
        raise TraceFormatError(f"cannot read trace '{source}': not UTF-8 or UTF-16 text; "
                               f"save it as a UTF-8 CSV file") from None
    except csv.Error as exc:
        raise TraceFormatError(f"cannot read trace '{source}': not a valid CSV file "
                               f"({exc})") from None
    except OSError as exc:
        raise TraceFormatError(f"cannot read trace '{source}': {exc.strerror}") from None


def azure_trace(name: str) -> Trace:
    """Return a shipped Azure LLM inference trace (2023, CC-BY 4.0; see data/SOURCE.md).

    Parameters
    ----------
    name : str
        ``"coding"`` (alias ``"code"``; 8,819 requests over ~57 min) or
        ``"conversation"`` (alias ``"conv"``; 19,366 requests over ~58 min).

    Returns
    -------
    Trace
        Arrival times in seconds since the trace's first request; the trace is read
        once per process and shared (its arrays are read-only).

    Raises
    ------
    UnknownWorkloadError
        If ``name`` is not one of the names or aliases above.
    """
    key = WORKLOAD_ALIASES.get(name.strip().lower()) if isinstance(name, str) else None
    if key is None:
        raise UnknownWorkloadError(
            f"unknown workload {name!r}; use one of {', '.join(WORKLOAD_NAMES)} "
            f"(aliases: code, conv)")
    return _load_shipped(key)


@functools.cache
def _load_shipped(name: str) -> Trace:
    data = resources.files("workloads").joinpath("data", _SHIPPED_FILES[name])
    with data.open("r", encoding="utf-8-sig", newline="") as stream:
        return _parse(stream, f"{name} (shipped {_SHIPPED_FILES[name]})", name)


def _parse(stream: TextIO, source: str, name: str) -> Trace:
    reader = csv.reader(stream)
    header = next(reader, None)
    if header is None or not any(cell.strip() for cell in header):
        raise TraceFormatError(f"trace '{source}' is empty: trace has no requests; "
                               f"write a header line and one row per request")
    fmt = _detect_format(header, source)
    rows = _read_rows(reader, fmt, source)
    arrival_s = _times(rows, fmt, source)
    prompt = _tokens(rows, fmt.prompt, source)
    output = _tokens(rows, fmt.output, source)
    if fmt.label == "SplitwiseSim":
        _check_batch_size(rows, source)
    order = np.argsort(arrival_s, kind="stable")
    return Trace(arrival_s[order], prompt[order], output[order], name)


def _detect_format(header: list[str], source: str) -> _Format:
    names = tuple(cell.strip().strip('"').strip().lower() for cell in header)
    for fmt in _FORMATS:
        if names == tuple(column.lower() for column in fmt.columns):
            return fmt
    accepted = "; ".join(f"{fmt.label} '{fmt.header}'" for fmt in _FORMATS)
    shown = ",".join(cell.strip() for cell in header)[:120]
    raise TraceFormatError(f"trace '{source}', line 1: unknown header {shown!r}; "
                           f"use one of: {accepted}")


def _read_rows(reader: Iterator[list[str]], fmt: _Format, source: str) -> pd.DataFrame:
    """All cells as stripped strings, blank lines skipped; index = line in the file."""
    lines, cells = [], []
    width = len(fmt.columns)
    for row in reader:
        if len(row) != width:
            if not any(cell.strip() for cell in row):
                continue
            raise TraceFormatError(
                f"trace '{source}', line {reader.line_num}: {len(row)} fields but the "
                f"header has {width} ({fmt.header}); give one value per column")
        lines.append(reader.line_num)
        cells.append(row)
    if not cells:
        raise TraceFormatError(f"trace '{source}' has only a header: trace has no "
                               f"requests; add one row per request below the header")
    rows = pd.DataFrame(cells, columns=list(fmt.columns), index=lines, dtype=str)
    return rows.apply(lambda column: column.str.strip())


def _cell_error(source: str, line: int, column: str, problem: str) -> TraceFormatError:
    return TraceFormatError(f"trace '{source}', line {line}, column '{column}': {problem}")


def _shown(cell: str) -> str:
    return repr(cell if len(cell) <= 40 else cell[:37] + "...")


def _numbers(rows: pd.DataFrame, column: str, source: str, unit: str) -> np.ndarray:
    """Parse one column as finite float64, or raise naming the first bad cell."""
    values = pd.to_numeric(rows[column], errors="coerce").to_numpy(dtype=np.float64)
    bad = np.flatnonzero(~np.isfinite(values))
    if bad.size:
        line, cell = int(rows.index[bad[0]]), rows[column].iloc[bad[0]]
        problem = ("empty value" if cell == "" else f"{_shown(cell)} is not a finite number")
        raise _cell_error(source, line, column, f"{problem}; write the {unit} as a number")
    return values


def _tokens(rows: pd.DataFrame, column: str, source: str) -> np.ndarray:
    values = _numbers(rows, column, source, "token count")
    bad = np.flatnonzero((values < 1) | (values != np.round(values)))
    if bad.size:
        line, cell = int(rows.index[bad[0]]), rows[column].iloc[bad[0]]
        raise _cell_error(source, line, column,
                          f"{_shown(cell)} tokens; token counts must be whole numbers "
                          f">= 1 (every request has at least 1 token): fix or drop the row")
    huge = np.flatnonzero(values > MAX_TOKENS_PER_REQUEST)
    if huge.size:   # beyond exact float integers and any model's context: never cast to int64
        line, cell = int(rows.index[huge[0]]), rows[column].iloc[huge[0]]
        raise _cell_error(source, line, column,
                          f"{_shown(cell)} tokens is more than any request holds (at most "
                          f"{MAX_TOKENS_PER_REQUEST:,.0f}, a context window of today's longest): fix or drop the row")
    return values.astype(np.int64)


def _times(rows: pd.DataFrame, fmt: _Format, source: str) -> np.ndarray:
    if fmt.label == "Azure":
        return _timestamps_s(rows, fmt.time, source)
    values = _numbers(rows, fmt.time, source, "arrival time in seconds")
    bad = np.flatnonzero(values < 0)
    if bad.size:
        line = int(rows.index[bad[0]])
        raise _cell_error(source, line, fmt.time,
                          f"negative time {values[bad[0]]:g} s; arrival times are seconds "
                          f"from the trace start and must be >= 0")
    return values


def _timestamps_s(rows: pd.DataFrame, column: str, source: str) -> np.ndarray:
    """Parse ISO 8601 timestamps; return seconds since the earliest one."""
    _refuse_mixed_zones(rows, column, source)
    stamps = pd.to_datetime(rows[column], format="ISO8601", utc=True, errors="coerce")
    bad = np.flatnonzero(stamps.isna().to_numpy())
    if bad.size:
        line, cell = int(rows.index[bad[0]]), rows[column].iloc[bad[0]]
        problem = "empty value" if cell == "" else f"unparseable timestamp {_shown(cell)}"
        raise _cell_error(source, line, column,
                          f"{problem}; write it as YYYY-MM-DD HH:MM:SS.fffffff, "
                          f"e.g. {_AZURE_TIME_EXAMPLE}")
    seconds = (stamps - stamps.min()) / pd.Timedelta(seconds=1)
    return seconds.to_numpy(dtype=np.float64)


# a clock time then an ISO 8601 offset ending the stamp: 18:17:03Z, 18:17:03.97+05:00, 18:17-0800
_ZONE = r"\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?\s*(?:Z|[+-]\d{2}(?::?\d{2})?)\s*$"


def _refuse_mixed_zones(rows: pd.DataFrame, column: str, source: str) -> None:
    """Stamps with a time zone beside stamps without: the naive ones would be read as UTC,
    hours off from the others (a '+05:00' stamp and a plain one 1 s later came out 5 h
    apart), so the file is refused at the first stamp unlike the first row's."""
    zoned = rows[column].astype(str).str.contains(_ZONE, regex=True).to_numpy()
    if zoned.any() and not zoned.all():
        k = int(np.flatnonzero(zoned != zoned[0])[0])
        line = int(rows.index[k])
        has, lacks = ("a time zone", "none") if zoned[k] else ("no time zone", "one")
        raise _cell_error(source, line, column,
                          f"{_shown(rows[column].iloc[k])} has {has} where the first timestamp has {lacks}; "
                          f"give every timestamp the same form, e.g. {_AZURE_TIME_EXAMPLE} (UTC)")


def _check_batch_size(rows: pd.DataFrame, source: str) -> None:
    sizes = _numbers(rows, "batch_size", source, "batch size")
    bad = np.flatnonzero(sizes != 1)
    if bad.size:
        line, cell = int(rows.index[bad[0]]), rows["batch_size"].iloc[bad[0]]
        raise _cell_error(source, line, "batch_size",
                          f"batch size {_shown(cell)}; only batch_size 1 is supported: "
                          f"write one row per request")
