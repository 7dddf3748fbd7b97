"""HTML reports of provisioning results (provisioner/RESULT_SCHEMA.md).

Public surface:

- `report_data(result)`: every table and curve the report draws (`ReportData`), as
  numbers — heatmap grids per family, the Pareto frontier, latency-vs-load curves of
  the answers, summary bars normalized to a baseline, workload CDFs, latency-model
  curves with their calibration points.
- the pieces of `report_data`, each a table: `evaluated_frame`, `heatmap(s)`, `pareto`
  (`non_dominated`), `summary_bars`, `load_curves`, `latency_model_curves`, `token_cdfs`.
- `build_report_html(result)`: one self-contained HTML page (plotly.js inlined once).
- `write_report(result, path)`: write it, refusing to overwrite unless `force`.
- `write_sweep_report(table, path)`, `build_sweep_html`, `sweep_figures`: the summary of
  a sweep (`provision sweep`): machines and cost per request vs rate, per family.
- `write_cloud_report(answer, path)`, `build_cloud_html`, `cloud_figures`, `cloud_flow`: a
  cloud plan (`provision cloud --report`) drawn as nodes -> replicas -> routed shares, its
  plan tables, and with `--without` the re-plan comparison (chart and table).
- `write_autoscale_report(answer, path)`, `build_autoscale_html`: an autoscaling day
  (`provision autoscale --report`): the scaling signal and the machines over the day.
- `write_command_page(answer, path)`: the page of a saved `provision cloud --json` or
  `provision autoscale --json` answer (`provision report` on it); `answer_kind` tells them.
- `perf_plot_data(report)`, `perf_figure(data)`: the latency model against its
  calibration measurements (`provision perf plot`), as a table and a figure.

plotly is imported only when figures are drawn.
"""

from __future__ import annotations

from pathlib import Path

from provisioner.errors import ProvisionerError
from provisioner.files import check_output_path, write_output

from ._autoscale import build_autoscale_html, write_autoscale_report
from ._cloud import build_cloud_html, cloud_figures, cloud_flow, write_cloud_report
from ._base import CHECK_NAMES, LOAD_FACTORS, evaluated_frame
from ._curves import latency_model_curves, load_curves, token_cdfs
from ._data import ReportData, report_data
from ._design_space import Heatmap, heatmap, heatmaps, non_dominated, pareto, summary_bars
from ._perf import PANELS, perf_figure, perf_plot_data, profile_curves
from ._schema import answer_kind, validate_command_answer
from ._scheduler import build_scheduler_html, scheduler_timeline_figure
from ._sweep import build_sweep_html, sweep_figures, write_sweep_report

__all__ = ["build_report_html", "write_report", "report_data", "ReportData", "perf_plot_data", "perf_figure", "profile_curves",
           "PANELS", "evaluated_frame", "heatmap", "heatmaps", "Heatmap", "pareto", "non_dominated", "summary_bars",
           "load_curves", "latency_model_curves", "token_cdfs", "CHECK_NAMES", "LOAD_FACTORS",
           "build_sweep_html", "sweep_figures", "write_sweep_report",
           "build_cloud_html", "cloud_figures", "cloud_flow", "write_cloud_report", "build_scheduler_html",
           "scheduler_timeline_figure", "build_autoscale_html", "write_autoscale_report", "write_command_page",
           "answer_kind"]

_COMMAND_PAGES = {"cloud": write_cloud_report, "autoscale": write_autoscale_report}


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
                 inputs=(), flag: str = "path", force_hint: str = "force=True") -> Path:
    """Write the HTML report to `path` (atomically) and return it.

    Refuses (one-line `ProvisionerError`) to overwrite an existing file unless `force`,
    and always to overwrite one of `inputs` (the files the report is made from).
    """
    check_output_path(path, flag=flag, force=force, force_hint=force_hint, inputs=inputs, parents=True)
    html = build_report_html(result, perf=perf, baseline=baseline)
    return write_output(path, html, flag=flag, force=force, force_hint=force_hint, inputs=inputs, parents=True)


def write_command_page(answer: dict, path, *, force: bool = False, flag: str = "path", inputs=()) -> Path:
    """Write the page `provision cloud --report` or `provision autoscale --report` draws, from
    that command's saved `--json` answer (`answer_kind`), atomically; refuses an existing
    file unless `force`. A file that lacks what the page reads (edited by hand, cut short)
    is one `ProvisionerError` line naming what is wrong, never a traceback."""
    kind = answer_kind(answer)
    if kind not in _COMMAND_PAGES:   # a provisioning result: `write_report`
        raise ProvisionerError("not an answer of `provision cloud --json` or `provision autoscale --json` (a "
                               "provisioning result is drawn by reports.write_report)")
    validate_command_answer(answer, kind)
    try:
        return _COMMAND_PAGES[kind](answer, path, force=force, flag=flag, inputs=inputs)
    except ProvisionerError:
        raise
    except KeyError as exc:
        raise ProvisionerError(f"this answer of `provision {kind} --json` lacks key {exc} the page reads; save it "
                               f"again with `provision {kind} ... --json`") from None
    except (TypeError, ValueError, AttributeError, IndexError, ZeroDivisionError) as exc:
        what = (str(exc).splitlines() or [""])[0][:120]
        raise ProvisionerError(f"this answer of `provision {kind} --json` holds a value the page cannot draw "
                               f"({type(exc).__name__}: {what}); save it again with `provision {kind} ... "
                               f"--json`") from None
