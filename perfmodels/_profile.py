"""Measured latency profiles: read and validate them, turn them into lookup tables.

The file layout is SplitwiseSim's `perf_model.csv` (and `../data/profiles/*.csv`):
`model,hardware,tensor_parallel,prompt_size,batch_size,token_size,prompt_time_ms,
token_time_ms[,e2e_time_ms]`, one row per measurement; repeated rows are combined
(averaged for the `grid` tables, their median for `splitwisesim`, as SplitwiseSim does).
SplitwiseSim's own header names the times `prompt_time` / `token_time` (ms): accepted too.
"""

from __future__ import annotations

import csv
import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ._profile_eval import KIND_GRID, KIND_SPLITWISESIM
from .errors import PerfModelError

REQUIRED = ("model", "hardware", "tensor_parallel", "prompt_size", "batch_size", "token_size",
            "prompt_time_ms", "token_time_ms")
ALIASES = {"prompt_time": "prompt_time_ms", "token_time": "token_time_ms", "e2e_time": "e2e_time_ms"}
INTERPS = ("grid", "splitwisesim")
TP_DEGREES = (1, 2, 4, 8)


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


def read_profile(path, catalog) -> Profile:
    """Read and validate a profile CSV; errors name the file, line and field.

    catalog : a `hardware_catalog.Catalog`; every model and GPU must be in it.
    """
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise PerfModelError(f"--latency-profile '{path}': cannot read it ({exc.strerror})") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise PerfModelError(f"{path}: not a UTF-8 text CSV file") from None
    reader = csv.reader(text.splitlines())
    cells = next(reader, None)
    while cells is not None and not any(c.strip() for c in cells):   # blank lines above the header
        cells = next(reader, None)
    header_line = reader.line_num
    header = [ALIASES.get(h.strip(), h.strip()) for h in cells or []]
    missing = [c for c in REQUIRED if c not in header]
    if missing:
        raise PerfModelError(f"{path}, line {max(header_line, 1)}: missing column '{missing[0]}' (a profile needs "
                             f"{', '.join(REQUIRED)})")
    repeated = next((c for c in REQUIRED if header.count(c) > 1), None)
    if repeated is not None:   # which of the two holds the measurement is anyone's guess
        first, second = [cells[i].strip() for i, h in enumerate(header) if h == repeated][:2]
        twice = (f"column '{first}' appears twice in the header" if first == second else
                 f"columns '{first}' and '{second}' both give '{repeated}'")
        raise PerfModelError(f"{path}, line {header_line}: {twice}: keep one")
    col = {c: header.index(c) for c in REQUIRED}
    gpus, models = set(catalog.gpus), set(catalog.models)
    out = {c: [] for c in REQUIRED}
    ends = reader.line_num
    for fields in reader:
        line, ends = ends + 1, reader.line_num   # the line the row starts on (a quoted field may span lines)
        if not fields or all(not f.strip() for f in fields):
            continue
        if len(fields) < len(header):
            raise PerfModelError(f"{path}, line {line}: {len(fields)} fields, the header has {len(header)}")
        row = {c: fields[i].strip() for c, i in col.items()}
        _check_name(path, line, "model", row["model"], models)
        _check_name(path, line, "hardware", row["hardware"], gpus)
        out["model"].append(row["model"])
        out["hardware"].append(row["hardware"])
        tp = _number(path, line, "tensor_parallel", row["tensor_parallel"], integer=True)
        if tp not in TP_DEGREES:
            raise PerfModelError(f"{path}, line {line}: field 'tensor_parallel' must be 1, 2, 4 or 8 "
                                 f"(got {row['tensor_parallel']})")
        out["tensor_parallel"].append(tp)
        for c in REQUIRED[3:]:
            out[c].append(_number(path, line, c, row[c], integer=c in ("prompt_size", "batch_size", "token_size")))
    if not out["model"]:
        raise PerfModelError(f"{path}: no measurement rows after the header")
    return Profile(
        source=str(path), sha256=hashlib.sha256(raw).hexdigest(), model=np.array(out["model"]),
        gpu=np.array(out["hardware"]), tp=np.array(out["tensor_parallel"], dtype=np.int64),
        prompt_tokens=np.array(out["prompt_size"], dtype=float), batch_size=np.array(out["batch_size"], dtype=float),
        token_size=np.array(out["token_size"], dtype=float),
        prompt_time_ms=np.array(out["prompt_time_ms"], dtype=float),
        token_time_ms=np.array(out["token_time_ms"], dtype=float))


MAX_MEASURED = 1e9   # the largest number a profile field may hold: 11.6 days in ms, a billion tokens


def _check_name(path, line, field, value, known) -> None:
    if value not in known:
        raise PerfModelError(f"{path}, line {line}: field '{field}' names unknown '{value}' "
                             f"(known: {', '.join(sorted(known))})")


def _number(path, line, field, text, integer=False):
    try:
        value = float(text)
    except ValueError:
        raise PerfModelError(f"{path}, line {line}: field '{field}' must be a number (got '{text}')") from None
    if not np.isfinite(value) or value <= 0:
        raise PerfModelError(f"{path}, line {line}: field '{field}' must be positive (got '{text}')")
    if value > MAX_MEASURED:   # the tables' interpolation and fits would overflow, and no measurement is so large
        raise PerfModelError(f"{path}, line {line}: field '{field}' must be at most {MAX_MEASURED:g} (got '{text}'); "
                             f"give the measured value (times in ms)")
    if integer:
        if value != int(value):
            raise PerfModelError(f"{path}, line {line}: field '{field}' must be a whole number (got '{text}')")
        return int(value)
    return value


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


