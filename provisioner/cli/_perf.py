"""`provision perf ...`: the latency models from the command line.

- `predict` (CONTRACTS.md, command 3): prefill and decode-iteration times for a CSV of
  configuration points.
- `calibrate`: refit the roofline constants on measured profiles, report MAPE per
  phase and GPU on held-out points, save the constants.
- `plot`: model against measurements (Splitwise Fig. 5 and 6 style) as one offline HTML.

The computations are library functions (`perfmodels.predict_points`,
`perfmodels.merge_calibration`, `reports.perf_plot_data`, `reports.perf_figure`): this
module parses, calls and prints.
"""

from __future__ import annotations

import csv
import io
import math
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import typer

import perfmodels
from hardware_catalog import UnknownNameError, decode_text, load_catalog, read_input
from perfmodels import (MIN_POWER_CAP, POOR_FIT_MAPE_PCT, TP_DEGREES, CalibrationReport, LatencyModel, Profile,
                        calibrate, dump_calibration, kv_capacity_tokens, load_calibration, merge_calibration,
                        predict_points, read_profile, PREDICTED_COLUMNS)
from reports import perf_figure, perf_plot_data

from ..files import check_output_path, resolved, stdout_is_an_output, write_output
from ._common import check_seed
from ._common import console as make_console
from ..errors import ProvisionerError

app = typer.Typer(
    help="Latency models: predict, calibrate, plot.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

POINT_INPUT_COLUMNS = ("model", "hardware", "tensor_parallel", "prompt_size", "batch_size")
MAX_POINT_COUNT = 1e12   # tokens or requests; beyond any model and float64's exact integers
OPTIONAL_INPUT_COLUMNS = ("power_cap",)


# --- predict ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _Points:
    """Parsed `--points` rows (one per data line, with its line number) and whether power_cap was given."""

    frame: pd.DataFrame      # model, hardware, gpu, tensor_parallel, prompt_size, batch_size, power_cap, line
    has_power_cap: bool
    extra: pd.DataFrame      # the input's other columns, as read (the output repeats them)


@app.command("predict")
def predict_command(
    points: Path = typer.Option(..., "--points", help="CSV with model,hardware,tensor_parallel,prompt_size,"
                                "batch_size and optionally power_cap (fraction of TDP)."),
    out: Path = typer.Option(..., "--out", readable=False,
                             help="CSV to write: the input columns plus prompt_time_ms, token_time_ms."),
    force: bool = typer.Option(False, "--force", help="Overwrite --out if it exists."),
) -> None:
    """Prefill and decode-iteration times (ms) for each row of a CSV."""
    _check_out(out, force, "--out", inputs=(points,))
    parsed = _read_points(points)
    perf = LatencyModel()
    df = parsed.frame
    _warn_borrowed(perf, df.gpu.unique())
    _warn_memory(perf.catalog, df, points)
    times = predict_points(df, perf)
    cols = list(POINT_INPUT_COLUMNS) + (["power_cap"] if parsed.has_power_cap else [])
    result = pd.concat([df[cols], parsed.extra, times], axis=1)
    write_output(out, result.to_csv(index=False), flag="--out", force=force, force_hint="--force", inputs=(points,))
    typer.echo(f"wrote {len(result)} rows to {out}", err=stdout_is_an_output())
    kept = [c for c in parsed.extra.columns if c.startswith("input_") and c[len("input_"):] in PREDICTED_COLUMNS]
    if kept:
        typer.echo(f"--points has {', '.join(c[len('input_'):] for c in kept)}: kept as {', '.join(kept)} beside the "
                   f"prediction", err=stdout_is_an_output())


def _read_points(path: Path) -> _Points:
    """Parse and validate `--points`; every error names the line (header = line 1) and column."""
    where = f"--points '{path}'"
    if path.is_dir() or not path.exists():   # a pipe is read (`<(...)`, /dev/stdin), as every input
        what = "is a directory" if path.is_dir() else "no such file"
        raise ProvisionerError(f"{where}: {what}; give a CSV with columns {','.join(POINT_INPUT_COLUMNS)}")
    header, rows = _csv_records(path, where)
    required = ", ".join(POINT_INPUT_COLUMNS)
    if header is None:
        raise ProvisionerError(f"{where}: file is empty; the header must name the columns {required}")
    dup = sorted({c for c in header if header.count(c) > 1 and c})
    if dup:
        raise ProvisionerError(f"{where}: column '{dup[0]}' appears twice in the header")
    missing = [c for c in POINT_INPUT_COLUMNS if c not in header]
    if missing:
        raise ProvisionerError(f"{where}: missing column{'s' if len(missing) > 1 else ''} "
                               f"{', '.join(missing)} (required: {required}; optional: power_cap)")
    if not rows:
        raise ProvisionerError(f"{where}: no data rows after the header")
    # a column with no name is dropped from the output: refused if it holds data (a trailing comma is fine)
    for i in (i for i, c in enumerate(header) if not c):
        line, cell = next(((line, r[i]) for line, r in rows if i < len(r) and r[i].strip()), (None, None))
        if line is not None:
            raise ProvisionerError(f"{where}: column {i + 1} has no name in the header, but line {line} holds "
                                   f"{cell.strip()!r} in it; name the column in the header, or delete its values")
    pos = {c: header.index(c) for c in (*POINT_INPUT_COLUMNS, *OPTIONAL_INPUT_COLUMNS) if c in header}
    has_cap = "power_cap" in pos
    cat = load_catalog()
    records = []
    for line, record in rows:
        if len(record) != len(header):
            raise ProvisionerError(f"{where}: line {line} has {len(record)} fields but the header has "
                                   f"{len(header)}; fix the commas on that line")
        cell = {c: record[i].strip() for c, i in pos.items()}
        at = f"{where}: line {line}, column"
        model = cell["model"]
        try:
            cat.model(model)
        except UnknownNameError as exc:
            raise ProvisionerError(f"{at} model: {exc}") from None
        gpu, machine = _resolve_hardware(cat, cell["hardware"], f"{at} hardware")
        tp = _number(cell["tensor_parallel"], f"{at} tensor_parallel")
        if tp not in TP_DEGREES:
            raise ProvisionerError(f"{at} tensor_parallel: must be 1, 2, 4 or 8 (got {cell['tensor_parallel']})")
        if tp > machine.gpus_per_machine:
            raise ProvisionerError(
                f"{at} tensor_parallel: {tp:g} is larger than the {machine.gpus_per_machine} GPUs of one "
                f"{machine.name} (a TP group stays inside one machine); use at most {machine.gpus_per_machine}")
        s = _number(cell["prompt_size"], f"{at} prompt_size")
        b = _number(cell["batch_size"], f"{at} batch_size")
        for name, v, unit in (("prompt_size", s, "tokens per prompt"), ("batch_size", b, "requests")):
            if not 0 < v <= MAX_POINT_COUNT or v != round(v):
                raise ProvisionerError(f"{at} {name}: must be a whole number of {unit} in [1, "
                                       f"{MAX_POINT_COUNT:.0e}] (got {cell[name]})")
        cap = 1.0
        if has_cap and cell["power_cap"]:  # an empty cell means uncapped
            cap = _number(cell["power_cap"], f"{at} power_cap")
            if not MIN_POWER_CAP <= cap <= 1:   # as a design's caps: below it no clock is left to run at
                raise ProvisionerError(f"{at} power_cap: must be a fraction of rated power in "
                                       f"[{math.ceil(MIN_POWER_CAP * 100) / 100:g}, 1], e.g. 0.5 (got {cell['power_cap']})")
        records.append(dict(model=model, hardware=cell["hardware"], gpu=gpu, tensor_parallel=int(tp),
                            prompt_size=s, batch_size=b, power_cap=cap, line=line))
    frame = pd.DataFrame.from_records(records)
    for col in ("prompt_size", "batch_size"):  # whole numbers (checked above), written back as integers
        frame[col] = frame[col].astype(np.int64)
    known = set(pos)
    # a column the output computes (e.g. measured times) is kept beside it, renamed input_<name>
    for c in PREDICTED_COLUMNS:
        if c in header and f"input_{c}" in header:   # the renamed column would replace the user's own
            raise ProvisionerError(f"--points has both {c} and input_{c}: the output keeps your {c} as input_{c} "
                                   f"beside its prediction; rename one of the two columns")
    extra = pd.DataFrame({(f"input_{c}" if c in PREDICTED_COLUMNS else c): [record[i].strip() for _, record in rows]
                          for i, c in enumerate(header) if c and c not in known}, index=frame.index)
    return _Points(frame, has_cap, extra)


def _csv_records(path: Path, where: str) -> tuple[list[str] | None, list[tuple[int, list[str]]]]:
    """(header with its names stripped, [(line, fields)] of each data row) of a CSV file, or
    (None, []) when it holds nothing. Blank lines are skipped but counted, so `line` is the
    one an editor shows where the row starts (the header is line 1 when it comes first):
    pandas skips them too, and its row index + 2 named the wrong line after one."""
    try:   # a BOM (Excel) or UTF-16 (PowerShell's `>`) reads as written, as every file a user gives
        reader = csv.reader(io.StringIO(decode_text(read_input(path)), newline=""))
        header, rows, start = None, [], 1
        for record in reader:
            line, start = start, reader.line_num + 1   # a quoted field may span lines
            if not any(cell.strip() for cell in record):
                continue
            if header is None:
                header = [c.strip() for c in record]
                continue
            rows.append((line, record))
    except UnicodeDecodeError:
        raise ProvisionerError(f"{where}: not UTF-8 or UTF-16 text; save it as a UTF-8 CSV file") from None
    except csv.Error as exc:
        raise ProvisionerError(f"{where}: not a valid CSV file ({exc})") from None
    except OSError as exc:   # unreadable, a device (/dev/zero), over a GiB
        raise ProvisionerError(f"{where}: cannot read it ({exc.strerror or exc})") from None
    return header, rows


def _resolve_hardware(cat, name: str, at: str):
    """(GPU name, the machine that bounds TP) of a GPU or machine name."""
    if name in cat.gpus:
        return name, cat.machine_for_gpu(name)
    if name in cat.machines:
        machine = cat.machine(name)
        return machine.gpu, machine
    exc = UnknownNameError("gpu or machine", name, [*cat.gpus, *cat.machines])
    raise ProvisionerError(f"{at}: {exc}")


def _number(text: str, at: str) -> float:
    if not text:
        raise ProvisionerError(f"{at}: empty cell; give a number")
    try:
        v = float(text)
    except ValueError:
        raise ProvisionerError(f"{at}: '{text}' is not a number") from None
    if not math.isfinite(v):
        raise ProvisionerError(f"{at}: '{text}' is not a finite number")
    return v


def _warn(message: str) -> None:
    typer.echo(f"warning: {message}", err=True)


def _warn_borrowed(perf: LatencyModel, gpus) -> None:
    """One line naming the GPUs whose constants are borrowed from another GPU's calibration."""
    borrowed = [g for g in gpus if not perf.calibration.is_calibrated(g)]
    if borrowed:
        pairs = ", ".join(f"{g} (from {perf.calibration.borrowed.get(g, '?')})" for g in borrowed)
        _warn(f"latency constants of {pairs} are borrowed, not calibrated on that GPU; "
              f"treat those times as estimates")


def _warn_memory(cat, df: pd.DataFrame, path: Path) -> None:
    """One line when some rows' weights plus KV cache exceed the TP group's HBM (extrapolated)."""
    bad = np.zeros(len(df), dtype=bool)
    for (model, gpu), g in df.groupby(["model", "gpu"], sort=False):
        capacity = kv_capacity_tokens(cat.model(model), cat.gpu(gpu), g.tensor_parallel.to_numpy(float))
        need = g.prompt_size.to_numpy(float) * g.batch_size.to_numpy(float)
        bad[df.index.get_indexer(g.index)] = need > capacity
    if bad.any():
        first = df.loc[bad].iloc[0]
        _warn(f"{int(bad.sum())} row(s) of {path} need more HBM than the TP group has (first: line "
              f"{first.line}, {first.model} on {first.tensor_parallel}x {first.gpu}, "
              f"{first.batch_size} x {first.prompt_size} tokens); their times are extrapolated")


def _check_out(out: Path, force: bool, flag: str, inputs=()) -> None:
    check_output_path(out, flag=flag, force=force, force_hint="--force", inputs=inputs)


# --- calibrate -------------------------------------------------------------------------


def _read_profile(profile: Path | None) -> Profile | None:
    """`--profile`, read and checked by `perfmodels.read_profile` (None: the shipped profile)."""
    if profile is None:
        return None
    return read_profile(profile, load_catalog(), where=f"--profile '{profile}'")


def _frame(measured: Profile | None) -> pd.DataFrame | None:
    """The rows `calibrate` fits and `perf_plot_data` draws (None: the shipped ones)."""
    return None if measured is None else measured.frame()


def run_calibration(profile: pd.DataFrame | None, holdout: float, seed: int,
                    where: str | None = None, why_split: str = "") -> CalibrationReport:
    """`perfmodels.calibrate` with the CLI's argument checks (one-line errors naming `where`).
    why_split : appended to a split that cannot be made, when the command's purpose does not
        say why it makes one."""
    if not 0 < holdout < 1:
        raise ProvisionerError(f"--holdout must be a fraction in (0, 1), e.g. 0.2 (got {holdout:g}){why_split}")
    check_seed(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # an empty split's mean; reported below
        report = calibrate(profile, holdout_fraction=holdout, seed=seed, where=where)
    # configuration points per GPU and split: a split left empty either way is refused
    counts = report.mape.groupby(["gpu", "split"]).points.max().unstack(fill_value=0)
    held, trained = (counts[split] if split in counts else pd.Series(0, index=counts.index)
                     for split in ("held-out", "train"))
    no_held, no_trained = (counts.index[split.to_numpy() == 0] for split in (held, trained))
    if len(no_held):
        gpu = no_held[0]
        points = int(trained[gpu])
        fix = (f"use --holdout {math.ceil(51 / points) / 100:g} or more (a fraction of its {points} configuration "
               f"points that rounds to at least one)" if points >= 2 else
               f"add measurements (it has {points} configuration point: none to hold out)")
        raise ProvisionerError(f"--holdout {holdout:g} leaves no held-out points for {gpu}; {fix}{why_split}")
    if len(no_trained):   # every point held out: nothing left to fit
        gpu = no_trained[0]
        points = int(held[gpu])
        raise ProvisionerError(f"--holdout {holdout:g} holds out every configuration point of {gpu}, leaving none "
                               f"to fit; use --holdout {math.floor((points - 0.51) / points * 100) / 100:g} or less "
                               f"(a fraction of its {points} points that leaves at least one){why_split}")
    return report


def mape_table(report: CalibrationReport) -> pd.DataFrame:
    """One row per (gpu, phase): held-out and train MAPE (%) and point counts."""
    m = report.mape.pivot_table(index=["gpu", "phase"], columns="split", values=["mape_pct", "points"],
                                aggfunc="first")
    m.columns = [f"{split}_{what}" for what, split in m.columns]
    return m.reset_index()[["gpu", "phase", "held-out_mape_pct", "train_mape_pct",
                            "held-out_points", "train_points"]]


@app.command("calibrate")
def calibrate_command(
    profile: Path = typer.Option(None, "--profile", help="Profile CSV (default: the Llama2-70B DGX-A100/H100 "
                                 "profiles shipped in perfmodels/data)."),
    holdout: float = typer.Option(0.2, "--holdout", help="Fraction of configuration points held out per GPU."),
    seed: int = typer.Option(0, "--seed", help="Seed of the held-out split."),
    out: Path = typer.Option(None, "--out", readable=False,
                             help="Where to save the constants (default: the package's own "
                             "perfmodels/data/calibration.toml, which the latency model loads)."),
    force: bool = typer.Option(False, "--force", help="Overwrite --out if it exists (not needed for the default)."),
    max_mape: float = typer.Option(None, "--max-mape", help="Fail (exit 2, nothing saved) if any held-out "
                                   "MAPE exceeds this percentage (for CI)."),
) -> None:
    """Fit the latency constants per GPU on measured profiles; print MAPE; save them."""
    from rich.console import Console
    from rich.table import Table

    if max_mape is not None and not max_mape > 0:
        raise ProvisionerError(f"--max-mape must be a percentage > 0, e.g. 8 (got {max_mape:g})")
    default = perfmodels.DEFAULT_CALIBRATION_PATH
    target = default if out is None else out
    is_default = resolved(target, "--out") == default
    if not is_default:
        _check_out(target, force, "--out", inputs=(profile,))
    report = run_calibration(_frame(_read_profile(profile)), holdout, seed, where=f"--profile '{profile}'")
    table = mape_table(report)

    console = Console(width=max(Console().width, 100), markup=False) if Console().is_terminal else make_console()
    t = Table(title=f"MAPE of the fitted model ({holdout:.0%} of points held out, seed {seed})")
    for col, justify in (("GPU", "left"), ("phase", "left"), ("held-out MAPE", "right"), ("train MAPE", "right"),
                         ("held-out points", "right"), ("train points", "right")):
        t.add_column(col, justify=justify)
    for r in table.itertuples(index=False):
        t.add_row(r.gpu, r.phase, f"{r[2]:.2f}%", f"{r[3]:.2f}%", str(int(r[4])), str(int(r[5])))
    console.print(t)
    for r in table.itertuples(index=False):  # plain lines too: greppable in CI logs
        console.print(f"MAPE {r.gpu} {r.phase}: held-out {r[2]:.2f}%, train {r[3]:.2f}%",
                      highlight=False, soft_wrap=True)
    console.print(f"excluded {report.excluded_rows} artifact rows where {report.excluded_rule}: "
                  f"{report.excluded_reason}", highlight=False, soft_wrap=True)

    if max_mape is None:   # a poor fit is saved all the same: said, on stderr
        worst_pct = table[["held-out_mape_pct", "train_mape_pct"]].max(axis=1)
        worst = table.loc[worst_pct.idxmax()]
        if worst_pct.max() > POOR_FIT_MAPE_PCT:
            typer.echo(f"warning: the fit of {worst.gpu} {worst.phase} is poor (MAPE {worst_pct.max():.1f}%, over "
                       f"{POOR_FIT_MAPE_PCT:g}%): check the profile's units and hardware names; --max-mape N refuses "
                       f"to save such a fit", err=True)
    else:
        worst = table.loc[table["held-out_mape_pct"].idxmax()]
        if worst["held-out_mape_pct"] > max_mape:
            raise ProvisionerError(
                f"held-out MAPE of {worst.gpu} {worst.phase} is {worst['held-out_mape_pct']:.2f}% > --max-mape "
                f"{max_mape:g}%; constants not saved")
    cal = report.calibration
    if is_default and target.exists():
        # The default file serves every GPU: a profile of some GPUs must not drop the others.
        cal, kept = merge_calibration(cal, load_calibration(target))
        if kept:
            console.print(f"kept the constants of {', '.join(kept)} from the previous {target.name} "
                          f"(not in the profile)", highlight=False, soft_wrap=True)
    write_output(target, dump_calibration(cal), flag="--out", force=force or is_default, force_hint="--force",
                 inputs=(profile,), shipped_ok=is_default)
    console.print(f"saved constants to {target}", highlight=False, soft_wrap=True)


# --- plot ------------------------------------------------------------------------------


@app.command("plot")
def plot_command(
    out: Path = typer.Option(..., "--out", readable=False, help="HTML file to write (self-contained, works offline)."),
    force: bool = typer.Option(False, "--force", help="Overwrite --out if it exists."),
    profile: Path = typer.Option(None, "--profile", help="Profile CSV (default: the shipped profiles)."),
    holdout: float = typer.Option(0.2, "--holdout", help="Fraction of configuration points held out per GPU."),
    seed: int = typer.Option(0, "--seed", help="Seed of the held-out split."),
    latency_interp: str = typer.Option(None, "--latency-interp",
                                       help="Draw the measured-profile model instead of the roofline: grid or "
                                            "splitwisesim (as --latency-profile does on the commands that "
                                            "simulate)."),
) -> None:
    """Model against measurements per phase, GPU and TP degree (Splitwise Fig. 5 and 6 style)."""
    if out.suffix.lower() not in (".html", ".htm"):
        raise ProvisionerError(f"--out {out}: the plot is an HTML page; give a path ending in .html")
    _check_out(out, force, "--out")
    measured = _read_profile(profile)
    df = _frame(measured)
    # the split is not the measured-profile model's: say why it is made at all
    why = ("" if latency_interp is None else f" (--latency-interp {latency_interp} draws the roofline where the "
                                              f"profile does not cover a point, fitted on a held-out split as "
                                              f"`perf plot` draws it)")
    report = run_calibration(df, holdout, seed, where=None if profile is None else f"--profile '{profile}'",
                             why_split=why)
    data = perf_plot_data(report, df, holdout_fraction=holdout, seed=seed)
    if latency_interp is not None:
        from perfmodels import ProfileLatencyModel, load_profile_model
        from reports import profile_curves
        shipped = Path(perfmodels.__file__).resolve().parent / "data" / "llama2-70b_dgx.csv"
        model = (load_profile_model(shipped, latency_interp) if measured is None else
                 ProfileLatencyModel(latency_interp).fit(measured, f"--profile '{profile}'"))   # read once
        data = profile_curves(data, model)
    fig = perf_figure(data)
    if latency_interp is not None:
        fig.update_layout(title=f"Measured-profile model (--latency-interp {latency_interp}, lines) vs measured "
                                "medians (markers); the roofline where the profile does not cover a point")
    write_output(out, fig.to_html(include_plotlyjs=True, full_html=True, div_id="chart-0"), flag="--out", force=force,
                 force_hint="--force", inputs=(profile,))
    typer.echo(f"wrote {out} ({len(data[data.kind == 'measured'])} measured points, "
               f"{data.panel.nunique()} panels)", err=stdout_is_an_output())
