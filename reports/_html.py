"""One self-contained HTML page: the question and answer, then the figures.

plotly.js is inlined once (the first figure carries it, the others reuse it), so the
file works offline and loads nothing from the network.
"""

from __future__ import annotations

import math
import re
import warnings
from html import escape
from importlib import resources

from ._base import CURVE_DURATION_S
from ._data import CHECK_NAMES, ReportData

VENDORED_BUNDLE = "plotly-cartesian.min.js"
# Trace types of the cartesian partial bundle (reports/_vendor/SOURCE.md).
CARTESIAN_TRACES = frozenset({"bar", "box", "contour", "heatmap", "histogram", "histogram2d",
                              "histogram2dcontour", "image", "pie", "scatter", "scatterternary", "violin"})
PLOTLY_CONFIG = {"displaylogo": False, "responsive": True,
                 "modeBarButtonsToRemove": ["select2d", "lasso2d"]}

SECTIONS = {
    "heatmaps": ("Design space per family",
                 "Every design the search scored, on a grid of prompt x token machines (one row of mixed "
                 "machines for a baseline), coloured by cost; grey cells miss at least one SLO on the search "
                 "trace; orange cells meet it there but failed the re-check (the fluid screen on the "
                 "verification traces or the discrete-event engine). The star is the family's answer. Hover a cell for its nine SLO slowdowns (Splitwise Fig. 12). The view opens on the "
                 "designs up to twice the cheapest SLO-meeting cost; zoom out (autoscale button) for all."),
    "pareto": ("Cost, power and throughput",
               "Designs that meet every SLO, across families (those the re-check rejected left out). Large "
               "outlined markers are the Pareto frontier: "
               "no other design is cheaper, lower-power and higher-throughput at once."),
    "load": ("Latency vs. load",
             f"Each family's answer re-simulated (fluid engine, same workload and seed, on a "
             f"{CURVE_DURATION_S:g}-s trace: at 1x its percentiles differ a little from the answer's, simulated on "
             "the question's trace) from a quarter to 1.5x of the goal's rate: p50/p90/p99 of TTFT, TBT and E2E as "
             "slowdowns against the same request alone, with the SLO limit dashed (Splitwise Fig. 16). Hover for "
             "milliseconds."),
    "summary": ("Summary",
                "Each family's answer normalized to the baseline (Splitwise Figs. 18-19)."),
    "workload": ("Workload", "Request sizes and arrivals of the question's trace (same seed)."),
    "scheduler": ("Scheduler over time",
                  "Each on-demand-scheduler answer (jsq, llumnix) re-run by the discrete-event engine on the "
                  "question's trace: cumulative preemptions, migrations and migration downtime, the fragmented "
                  "KV memory (free KV a waiting prompt could use were it on one machine) and the queued prompts, "
                  "sampled every second (SEMANTICS.md, Schedulers)."),
    "perf": ("Latency model",
             "The calibrated roofline model's per-phase times beside the measured profiles it was fitted on "
             "(Llama2-70B on DGX-A100/H100), and its prediction for the question's model."),
}

CSS = """
body{font-family:system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;margin:0;color:#222;background:#fafafa}
main{max-width:1400px;margin:0 auto;padding:20px 28px 40px}
h1{font-size:22px;margin:4px 0 2px}h2{font-size:18px;margin:28px 0 4px;border-bottom:1px solid #ddd;padding-bottom:4px}
p.lead{color:#555;margin:2px 0 14px}p.note{color:#555;font-size:13px;margin:2px 0 10px;max-width:1100px}
.qa{display:grid;grid-template-columns:minmax(320px,1fr) 2fr;gap:22px;align-items:start}
table{border-collapse:collapse;font-size:13px;background:#fff}
th,td{padding:4px 8px;border-bottom:1px solid #e5e5e5;text-align:left;vertical-align:top}
td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}
table.question th{color:#555;font-weight:600;white-space:nowrap}table.replan td:first-child{white-space:nowrap}
.answer-table td:nth-child(-n+3){white-space:nowrap}
tr.winner td{background:#fff3e0;font-weight:600}tr.infeasible td{color:#999}
td.bad{color:#b00020}td.good{color:#1b5e20}
.answer{font-size:15px;margin:8px 0 14px;padding:10px 14px;background:#fff;border-left:4px solid #D55E00}
.grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(620px,1fr));gap:14px}
.chart{background:#fff;border:1px solid #e5e5e5;border-radius:4px;padding:4px;margin:8px 0}
.notes{color:#8a4b00;font-size:13px}footer{color:#777;font-size:12px;margin-top:30px}
"""


def render_page(data: ReportData, figures: list[tuple[str, str, object]]) -> str:
    """The HTML document. `figures` are (chart id, section, plotly figure), in page order."""
    r = data.result
    q = r["question"]
    title = f"Provisioning report: {r['goal']} · {q['workload']} · {q['model']}"
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             '<meta name="viewport" content="width=device-width, initial-scale=1">',
             f"<title>{escape(title)}</title><style>{CSS}</style></head><body><main>",
             f"<h1>{escape(title)}</h1>", f'<p class="lead">{escape(_answer_sentence(data))}</p>',
             '<div class="qa"><div><h2>Question</h2>', _question_table(data), "</div>",
             "<div><h2>Answer</h2>", _answer_table(data), _margins_table(data), "</div></div>"]
    if data.notes:
        parts.append('<ul class="notes">' + "".join(f"<li>{escape(n)}</li>" for n in data.notes) + "</ul>")
    by_section: dict[str, list[str]] = {}
    if figures:
        # plotly.js once, inline, before the first chart; every chart reuses it.
        source = plotly_js({t.type for _, _, fig in figures for t in fig.data})
        parts.append("<script>window.PlotlyConfig = {MathJaxConfig: 'local'};</script>")
        parts.append(f'<script id="plotly-js" charset="utf-8">{source}</script>')
    for index, (cid, section, fig) in enumerate(figures):
        # The element id comes from the position, never from a name found in the JSON.
        html = fig.to_html(full_html=False, include_plotlyjs=False, div_id=f"chart-{index}", config=PLOTLY_CONFIG)
        by_section.setdefault(section, []).append(
            f'<div class="chart" data-chart="{escape(cid)}">{html}</div>')
    for section, (heading, note) in SECTIONS.items():
        charts = by_section.get(section)
        if section == "scheduler" and not charts:   # only answers under an on-demand scheduler have one
            continue
        parts.append(f"<section id=\"{section}\"><h2>{escape(heading)}</h2>")
        if section == "summary" and data.baseline:
            note = note.replace("the baseline", f"the baseline ({data.baseline})")
        parts.append(f'<p class="note">{escape(note)}</p>')
        if not charts:
            parts.append('<p class="note"><em>Nothing to draw: no family has a feasible answer.</em></p>')
        elif section == "heatmaps":
            parts.append('<div class="grid">' + "".join(charts) + "</div>")
        else:
            parts.extend(charts)
        parts.append("</section>")
    parts.append(f"<footer>provisioner {escape(str(q.get('code_version', '')))} · seed {escape(str(q['seed']))} · "
                 "self-contained: plotly.js is inlined; this file loads nothing from the network.</footer>")
    parts.append("</main></body></html>")
    return "\n".join(parts)


def _answer_sentence(data: ReportData) -> str:
    w = data.result.get("winner")
    if not w:
        return "No design of any family meets every SLO within the search space."
    d = w["design"]
    from ._data import best_throughput_rps, design_label

    rate = (f"{_fmt(best_throughput_rps(w), '.3g')} req/s sustained" if data.result.get("goal") == "throughput"
            else f"every SLO met at the asked {_fmt(best_throughput_rps(w), '.3g')} req/s")
    return (f"Answer: {d['family']} with {design_label(d)} machines — ${_fmt(w['cost_usd_per_h'], ',.0f')}/h, "
            f"{_fmt(w['power_kw'], ',.1f')} kW, {rate}.")


def _question_table(data: ReportData) -> str:
    rows = "".join(f"<tr><th>{escape(k)}</th><td>{escape(v)}</td></tr>" for k, v in data.question)
    return f'<table class="question">{rows}</table>'


def _answer_table(data: ReportData) -> str:
    a = data.answer
    head = ("<tr><th>family</th><th>design</th><th>machines</th><th class=n>$/h</th><th class=n>kW</th>"
            f"<th class=n>{'sustainable req/s' if data.result.get('goal') == 'throughput' else 'req/s'}</th>"
            "<th>binding SLO</th><th class=n>min margin</th><th>re-check: binding, margin</th><th>searcher</th></tr>")
    body = []
    for row in a.itertuples():
        cls = "winner" if row.winner else ("" if row.feasible else "infeasible")
        status = "" if row.feasible else f" — {row.reason or 'misses an SLO'}"
        searcher = row.searcher + (f" ({row.evaluations} designs)" if row.evaluations is not None else "")
        body.append(
            f'<tr class="{cls}"><td>{escape(row.family)}{" ★" if row.winner else ""}</td>'
            f"<td>{escape(row.design)}{escape(status)}</td><td>{escape(row.machine_types)}</td>"
            f"<td class=n>{_fmt(row.cost_usd_per_h, ',.0f')}</td><td class=n>{_fmt(row.power_kw, ',.1f')}</td>"
            f"<td class=n>{_fmt(row.sustainable_rps, '.3g')}</td><td>{escape(row.binding_slo)}</td>"
            f"<td class=n>{_fmt(row.min_margin * 100, '+.1f')}%</td><td>{escape(_recheck_text(row))}</td>"
            f"<td>{escape(searcher)}</td></tr>")
    return f'<table class="answer-table">{head}{"".join(body)}</table>'


def _recheck_text(row) -> str:
    """The discrete-event re-check's binding SLO and margin of an answer ('–' without one)."""
    if not row.recheck_binding_slo:
        return "–"
    return f"{row.recheck_binding_slo}, {_fmt(row.recheck_min_margin * 100, '+.1f')}%"


def _margins_table(data: ReportData) -> str:
    a = data.answer
    if a.empty:
        return ""
    head = "<tr><th>SLO margin</th>" + "".join(f"<th class=n>{c.replace('_', ' ')}</th>" for c in CHECK_NAMES) + "</tr>"
    body = []
    for row in a.itertuples():
        cells = []
        for c in CHECK_NAMES:
            v = getattr(row, f"margin_{c}")
            cls = "bad" if math.isfinite(v) and v < 0 else "good"
            cells.append(f'<td class="n {cls}">{_fmt(v * 100, "+.0f")}%</td>')
        body.append(f"<tr><td>{escape(row.family)}</td>{''.join(cells)}</tr>")
    return (f'<p class="note" style="margin-top:12px">SLO margins (limit / observed − 1) of each answer:</p>'
            f"<table>{head}{''.join(body)}</table>")


def _fmt(v, spec: str) -> str:
    try:
        v = float(v)
    except (TypeError, ValueError):
        return "–"
    return format(v, spec) if math.isfinite(v) else "–"


def plotly_js(trace_types=frozenset()) -> str:
    """The plotly.js source to inline: the vendored cartesian bundle when it matches the
    installed plotly's plotly.js version and covers `trace_types`, else (with a warning)
    the full bundle shipped with plotly."""
    from plotly.offline import get_plotlyjs, get_plotlyjs_version

    source, why = vendored_plotly_js(), ""
    wanted = get_plotlyjs_version()
    if source is None:
        why = "it is not installed"
    else:
        found = re.search(r"plotly\.js \(cartesian[^)]*\) v(\S+)", source[:400])
        have = found.group(1) if found else "of unknown version"
        if have != wanted:
            why = f"it is plotly.js {have} and the installed plotly draws with {wanted}"
        elif not set(trace_types) <= CARTESIAN_TRACES:
            why = f"the charts use {sorted(set(trace_types) - CARTESIAN_TRACES)}"
    if why:
        warnings.warn(f"reports: inlining plotly's full plotly.js bundle (4.8 MB, slower to render) instead of "
                      f"reports/_vendor/{VENDORED_BUNDLE}: {why}", stacklevel=3)
        source = get_plotlyjs()
    return source.replace("</script", "<\\/script")


def vendored_plotly_js() -> str | None:
    try:
        return resources.files("reports").joinpath("_vendor", VENDORED_BUNDLE).read_text(encoding="utf-8")
    except (FileNotFoundError, OSError):
        return None
