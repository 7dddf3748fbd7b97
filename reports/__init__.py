"""HTML reports of provisioning results (provisioner/RESULT_SCHEMA.md).

Public surface:

- `report_data(result)`: every table and curve the report draws (`ReportData`), as
  numbers — heatmap grids per family, the Pareto frontier, latency-vs-load curves of
  the answers, summary bars normalized to a baseline, workload CDFs, latency-model
  curves with their calibration points.
- `build_report_html(result)`: one self-contained HTML page (plotly.js inlined once).
- `write_report(result, path)`: write it, refusing to overwrite unless `force`.

plotly is imported only when figures are drawn.
"""

from __future__ import annotations

from pathlib import Path

from ._data import ReportData, report_data

__all__ = ["build_report_html", "write_report", "report_data", "ReportData"]


def build_report_html(result, *, perf=None, baseline: str | None = None) -> str:
    """The report of a provisioning result as one HTML document (str).

    result : the result dict, its JSON text, or an object with `.to_json()`.
    perf : `perfmodels.LatencyModel` (default: the shipped calibration).
    baseline : family the summary bars are normalized to (default baseline-h100).
    """
    from ._figures import figures
    from ._html import render_page

    data = report_data(result, perf=perf, baseline=baseline)
    return render_page(data, figures(data))


def write_report(result, path, *, force: bool = False, perf=None, baseline: str | None = None,
                 inputs=()) -> Path:
    """Write the HTML report to `path` (atomically) and return it.

    Refuses (one-line `ProvisionerError`) to overwrite an existing file unless `force`,
    and always to overwrite one of `inputs` (the files the report is made from).
    """
    from provisioner._io import check_output_path, write_output

    check_output_path(path, flag="report path", force=force, inputs=inputs, parents=True)
    html = build_report_html(result, perf=perf, baseline=baseline)
    return write_output(path, html, flag="report path", force=force, inputs=inputs, parents=True)
