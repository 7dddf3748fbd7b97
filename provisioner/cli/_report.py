"""`provision report`: render a saved result (the JSON of `provision`, `provision cloud` or
`provision autoscale`) as one HTML file."""

from __future__ import annotations

import errno
import json
from pathlib import Path

import typer

from hardware_catalog import decode_text, read_input

from ..errors import ProvisionerError
from ..files import check_output_path, resolved, stdout_is_an_output
from ._common import load_latency_model, recorded_profile


def report_command(
    result_json: Path = typer.Argument(..., help="A result saved from `provision ... --json` "
                                                  "(keys: provisioner/RESULT_SCHEMA.md), or an answer of "
                                                  "`provision cloud --json` or `provision autoscale --json`."),
    out: Path = typer.Option(..., "--out", readable=False,
                             help="The HTML file to write (self-contained, works offline)."),
    force: bool = typer.Option(False, "--force", help="Overwrite OUT if it exists."),
    baseline: str = typer.Option(None, "--baseline",
                                 help="Family the summary bars are normalized to (default baseline-h100)."),
) -> None:
    from reports import answer_kind, write_command_page, write_report

    check_output_path(out, flag="--out", force=force, force_hint="--force", inputs=(result_json,))
    result = load_result(result_json)
    kind = answer_kind(result)
    if kind in ("cloud", "autoscale"):   # the page that command's --report draws
        if baseline is not None:
            raise ProvisionerError(f"--baseline normalizes a provisioning result's families; '{result_json}' is "
                                   f"the answer of `provision {kind} --json`: drop --baseline")
        path = write_command_page(result, out, force=force, flag="--out", inputs=(result_json,))
        typer.echo(f"wrote {path} ({path.stat().st_size / 1e6:.1f} MB)", err=stdout_is_an_output())
        return
    profile, interp = recorded_profile(result)   # the answer's own latency model, for its curves
    perf = load_latency_model(profile, interp if profile is not None else None,
                              where=f"{result_json}: its latency profile '{profile}'")   # not typed as a flag here
    path = write_report(result, out, force=force, baseline=baseline, perf=perf,
                        inputs=(result_json,) + ((profile,) if profile else ()))
    typer.echo(f"wrote {path} ({path.stat().st_size / 1e6:.1f} MB)", err=stdout_is_an_output())


def load_result(path: Path, flag: str = "result file") -> dict:
    """A saved answer's JSON, for `provision report` and `provision simulate --from-result`
    alike (`flag` names the argument): a missing, unreadable or non-JSON file is one line
    naming `flag`, the path and how to save one. What the object must hold is the caller's."""
    path = Path(path)
    save = "give the file saved with `provision ... --json > result.json`"
    resolved(path, flag)   # a loop of symbolic links says so, not "does not exist"
    if path.is_dir():
        raise ProvisionerError(f"{flag} '{path}' is a directory; {save}")
    if not path.exists():
        raise ProvisionerError(f"{flag} '{path}' does not exist; {save}")
    try:   # a pipe too: `--from-result <(provision ... --json)`, `... | provision report /dev/stdin`
        raw = read_input(path)
    except OSError as exc:
        fix = "check its permissions or " if exc.errno in (errno.EACCES, errno.EPERM) else ""
        raise ProvisionerError(f"{flag} '{path}' cannot be read ({exc.strerror or exc}); {fix}{save}") from None
    if not raw.strip():
        what = "is empty" if path.is_file() else "is not a regular file and gave nothing"   # /dev/null
        raise ProvisionerError(f"{flag} '{path}' {what}; {save}")
    try:
        # a BOM or PowerShell's UTF-16 `>` reads as saved, as a trace or a rate profile does
        return json.loads(decode_text(raw))
    except json.JSONDecodeError as exc:
        raise ProvisionerError(f"{flag} '{path}' is not valid JSON (line {exc.lineno}, column {exc.colno}: "
                               f"{exc.msg}); {save}") from None
    except UnicodeDecodeError:
        raise ProvisionerError(f"{flag} '{path}' is not a JSON text file (UTF-8 or UTF-16); {save}") from None
    except (ValueError, RecursionError):   # an integer of over 4,300 digits; arrays nested thousands deep
        raise ProvisionerError(f"{flag} '{path}' is not a result of `provision --json` (a number of over 4,300 "
                               f"digits, or nesting thousands deep); {save}") from None
