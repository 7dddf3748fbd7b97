"""Measured latency profiles: read and validate them, turn them into lookup tables.

The file layout is SplitwiseSim's `perf_model.csv` (and `../data/profiles/*.csv`):
`model,hardware,tensor_parallel,prompt_size,batch_size,token_size,prompt_time_ms,
token_time_ms[,e2e_time_ms]`, one row per measurement; repeated rows are combined
(averaged for the `grid` tables, their median for `splitwisesim`, as SplitwiseSim does).
SplitwiseSim's own header names the times `prompt_time` / `token_time` (ms): accepted too.

`read_profile(path, catalog, where=None)` is the one reader of such a file, for the
measured-profile model (`--latency-profile`) and for the fit (`provision perf calibrate
--profile`, through `Profile.frame()`): one set of checks, every error one line naming
the file (as `where` says, e.g. the flag that gave it), the line, the column and the fix.
"""

from __future__ import annotations

import csv
import hashlib
import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from hardware_catalog import UnknownNameError, decode_text, read_input

from ._calibrate import REQUIRED_COLUMNS
from ._model import TP_DEGREES
from ._profile_eval import KIND_GRID, KIND_SPLITWISESIM, MIN_TIME_MS
from .errors import PerfModelError

REQUIRED = tuple(REQUIRED_COLUMNS)   # the columns the fit reads are the ones a profile must have
ALIASES = {"prompt_time": "prompt_time_ms", "token_time": "token_time_ms", "e2e_time": "e2e_time_ms"}
INTERPS = ("grid", "splitwisesim")
MAX_MEASURED = 1e9   # the largest number a profile field may hold: 11.6 days in ms, a billion tokens
MIN_MEASURED_MS = MIN_TIME_MS   # the shortest time (ms) a measurement may hold (why: `_profile_eval`)
# what a numeric cell holds, for the fix of its error
MEANING = {"tensor_parallel": "the tensor-parallel degree: 1, 2, 4 or 8", "prompt_size": "the tokens per prompt",
           "batch_size": "the requests per batch", "token_size": "the output tokens per request",
           "prompt_time_ms": "the measured time in ms", "token_time_ms": "the measured time in ms"}
WHOLE = ("tensor_parallel", "prompt_size", "batch_size", "token_size")


@dataclass(frozen=True)
class Profile:
    """Validated measurements: arrays of shape (n_rows,), times in ms."""

    source: str
    sha256: str
    model: np.ndarray
    gpu: np.ndarray
    tp: np.ndarray
    prompt_tokens: np.ndarray
    batch_size: np.ndarray
    token_size: np.ndarray
    prompt_time_ms: np.ndarray
    token_time_ms: np.ndarray

    def keys(self) -> list[tuple[str, str, int]]:
        """The (model, gpu, tp) combinations measured, sorted."""
        return sorted({(str(m), str(g), int(t)) for m, g, t in zip(self.model, self.gpu, self.tp)})

    def rows(self, model: str, gpu: str, tp: int) -> np.ndarray:
        return np.flatnonzero((self.model == model) & (self.gpu == gpu) & (self.tp == tp))

    def frame(self) -> pd.DataFrame:
        """The rows as `calibrate` and `reports.perf_plot_data` take them, in file order: the
        columns `PROFILE_COLUMNS`, names as text, TP and sizes as integers (as `pd.read_csv`
        reads the shipped profile), times (ms) as floats."""
        return pd.DataFrame({
            "model": self.model.astype(object), "hardware": self.gpu.astype(object), "tensor_parallel": self.tp,
            "prompt_size": self.prompt_tokens.astype(np.int64), "batch_size": self.batch_size.astype(np.int64),
            "token_size": self.token_size.astype(np.int64), "prompt_time_ms": self.prompt_time_ms,
            "token_time_ms": self.token_time_ms})


def read_profile(path, catalog, where: str | None = None) -> Profile:
    """Read and validate a profile CSV; every error is one line naming the file, line, column and fix.

    catalog : a `hardware_catalog.Catalog`; every model and GPU must be in it.
    where : how errors name the file, e.g. "--profile 'p.csv'" (a CLI names its flag);
        default: the path. `Profile.source` is the path either way.
    """
    if not str(path).strip():   # Path('') is '.', the working directory: "is a directory" misled
        raise PerfModelError(f"{where or repr(str(path))}: the path is empty; give a profile CSV with columns "
                             f"{','.join(REQUIRED)}")
    path = Path(path)
    where = str(path) if where is None else where
    raw = _read_bytes(path, where)
    header_line, cells, rows = _records(raw, where)
    header = _header(where, header_line, cells)
    col = {c: header.index(c) for c in REQUIRED}
    out = {c: [] for c in REQUIRED}
    for line, fields in rows:
        if len(fields) != len(header):   # a cell lost or a comma too many: which column moved is a guess
            raise PerfModelError(f"{where}, line {line}: {len(fields)} fields but the header has {len(header)}; "
                                 f"fix the commas on that line")
        for c, i in col.items():
            try:
                out[c].append(_cell(catalog, c, fields[i].strip()))
            except _BadCell as exc:
                raise PerfModelError(f"{where}, line {line}, column {c}: {exc}") from None
    if not out["model"]:
        raise PerfModelError(f"{where}: no measurement rows after the header; add one row per measurement")
    return Profile(
        source=str(path), sha256=hashlib.sha256(raw).hexdigest(), model=np.array(out["model"]),
        gpu=np.array(out["hardware"]), tp=np.array(out["tensor_parallel"], dtype=np.int64),
        prompt_tokens=np.array(out["prompt_size"], dtype=float), batch_size=np.array(out["batch_size"], dtype=float),
        token_size=np.array(out["token_size"], dtype=float),
        prompt_time_ms=np.array(out["prompt_time_ms"], dtype=float),
        token_time_ms=np.array(out["token_time_ms"], dtype=float))


def _read_bytes(path: Path, where: str) -> bytes:
    try:
        return read_input(path)
    except IsADirectoryError:
        raise PerfModelError(f"{where}: is a directory; give a profile CSV with columns {','.join(REQUIRED)}") from None
    except OSError as exc:
        raise PerfModelError(f"{where}: cannot read it ({exc.strerror})") from None


def _records(raw: bytes, where: str) -> tuple[int, list[str] | None, list[tuple[int, list[str]]]]:
    """(line of the header, its cells or None, [(line, fields)] of each data row). Blank lines
    are skipped but counted, so a line is the one an editor shows where the row starts."""
    try:   # a BOM (Excel) or UTF-16 (PowerShell's `>`) reads as written, as every file a user gives
        text = decode_text(raw)
    except UnicodeDecodeError:
        raise PerfModelError(f"{where}: not UTF-8 or UTF-16 text; save it as a UTF-8 CSV file") from None
    reader = csv.reader(io.StringIO(text, newline=""))
    header, header_line, rows, start = None, 1, [], 1
    try:
        for fields in reader:
            line, start = start, reader.line_num + 1   # a quoted field may span lines
            if not any(f.strip() for f in fields):
                continue
            if header is None:
                header, header_line = fields, line
            else:
                rows.append((line, fields))
    except csv.Error as exc:
        raise PerfModelError(f"{where}: not a valid CSV file ({exc})") from None
    return header_line, header, rows


def _header(where: str, line: int, cells: list[str] | None) -> list[str]:
    """The column names, SplitwiseSim's aliases read as ours; refused if one is repeated or missing."""
    if cells is None:
        raise PerfModelError(f"{where}: file is empty; the header must name the columns {', '.join(REQUIRED)}")
    names = [c.strip() for c in cells]
    header = [ALIASES.get(h, h) for h in names]
    repeated = next((h for i, h in enumerate(header) if h and h in header[:i]), None)
    if repeated is not None:   # which of the two holds the measurement is anyone's guess
        first, second = [names[i] for i, h in enumerate(header) if h == repeated][:2]
        twice = (f"column '{first}' appears twice in the header" if first == second else
                 f"columns '{first}' and '{second}' both give '{repeated}'")
        raise PerfModelError(f"{where}, line {line}: {twice}: keep one")
    missing = [c for c in REQUIRED if c not in header]
    if missing:
        raise PerfModelError(f"{where}, line {line}: missing column{'s' if len(missing) > 1 else ''} "
                             f"{', '.join(repr(c) for c in missing)} (a profile needs {', '.join(REQUIRED)}; "
                             f"SplitwiseSim's prompt_time, token_time are taken too)")
    return header


class _BadCell(ValueError):
    """What is wrong with one cell and the fix; `read_profile` adds where it is."""


def _cell(catalog, column: str, text: str):
    """The value of one cell of `column`: a catalog name, or a positive number (whole for TP and sizes)."""
    if column in ("model", "hardware"):
        return _name(catalog, column, text)
    if not text:
        raise _BadCell(f"empty cell; give {MEANING[column]}")
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if column == "tensor_parallel":
        if value not in TP_DEGREES:
            raise _BadCell(f"must be 1, 2, 4 or 8 (got {text})")
        return int(value)
    if not 0 < value <= MAX_MEASURED:   # NaN fails too; past the bound the fits overflow, and no measurement is so large
        raise _BadCell(f"must be a positive number at most {MAX_MEASURED:g} (got '{text}'); give {MEANING[column]}")
    if column not in WHOLE and value < MIN_MEASURED_MS:
        raise _BadCell(f"{text} ms is shorter than any GPU pass (at least {MIN_MEASURED_MS:g} ms, 1 microsecond); "
                       f"give {MEANING[column]}")
    if column in WHOLE:
        if value != int(value):
            raise _BadCell(f"must be a whole number (got '{text}'); give {MEANING[column]}")
        return int(value)
    return value


def _name(catalog, column: str, text: str) -> str:
    """A model or GPU name of the catalog; an unknown one is told with the close matches."""
    kind, lookup, known = (("model", catalog.model, catalog.models) if column == "model" else
                           ("GPU", catalog.gpu, catalog.gpus))
    if not text:
        raise _BadCell(f"empty cell; give a {kind} name (known: {', '.join(sorted(known))})")
    try:
        lookup(text)
    except UnknownNameError as exc:
        raise _BadCell(str(exc)) from None
    return text


# ---------------------------------------------------------------- tables
def grid_table(p: Profile, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(prompt axis, batch axis, prefill ms, decode ms) of one (model, gpu, tp).

    Cells are the mean of their repeated measurements. A cell not measured is filled by
    the product rule from the reference row and column (the batch size measured at the
    most prompt sizes, and the prompt size measured at the most batch sizes):
    t(s, b) = t(s, b0) x t(s0, b) / t(s0, b0). Profiles are often a cross like this
    (SplitwiseSim's: batch 1 over prompt sizes, prompt 512 over batch sizes), and the
    rule holds on them: H100 TP8 predicts 2.69 s for 8 x 4096 tokens, 2.94 s is
    measured for 64 x 512. Cells it cannot fill stay NaN (the roofline is used there).
    """
    s_axis = np.unique(p.prompt_tokens[idx])
    b_axis = np.unique(p.batch_size[idx])
    i = np.searchsorted(s_axis, p.prompt_tokens[idx])
    j = np.searchsorted(b_axis, p.batch_size[idx])
    tables = []
    for times in (p.prompt_time_ms[idx], p.token_time_ms[idx]):
        total = np.zeros((len(s_axis), len(b_axis)))
        count = np.zeros_like(total)
        np.add.at(total, (i, j), times)
        np.add.at(count, (i, j), 1.0)
        with np.errstate(invalid="ignore"):
            tables.append(total / count)
    measured = ~np.isnan(tables[0])
    j0 = int(np.argmax(measured.sum(axis=0)))   # reference batch column
    i0 = int(np.argmax(measured.sum(axis=1)))   # reference prompt row
    for t in tables:
        fill = np.outer(t[:, j0], t[i0, :]) / t[i0, j0]
        t[~measured] = fill[~measured]
    return s_axis, b_axis, tables[0], tables[1]


def splitwisesim_table(p: Profile, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(batch-token knots, prefill ms, decode ms): SplitwiseSim's median time per value of
    prompt_size x batch_size (performance_model.py, DatabasePerformanceModel)."""
    x = p.prompt_tokens[idx] * p.batch_size[idx]
    knots = np.unique(x)
    if len(knots) < 2:
        raise PerfModelError(f"{p.source}: {p.model[idx[0]]} on {p.gpu[idx[0]]} TP {p.tp[idx[0]]} has one value of "
                             f"prompt_size x batch_size; --latency-interp splitwisesim needs two or more")
    prefill = np.array([np.median(p.prompt_time_ms[idx][x == k]) for k in knots])
    decode = np.array([np.median(p.token_time_ms[idx][x == k]) for k in knots])
    return knots, prefill, decode


def pack_table(p: Profile, idx: np.ndarray, interp: str) -> np.ndarray:
    """The table part of a coefficient vector (see `_profile_eval`), without the scales."""
    if interp == "grid":
        s_axis, b_axis, pre, dec = grid_table(p, idx)
        head = [KIND_GRID, 1.0, 1.0, len(s_axis), len(b_axis)]
        return np.concatenate([head, s_axis, b_axis, pre.ravel(), dec.ravel()])
    knots, pre, dec = splitwisesim_table(p, idx)
    head = [KIND_SPLITWISESIM, 1.0, 1.0, len(knots), len(knots)]
    return np.concatenate([head, knots, pre, knots, dec])


