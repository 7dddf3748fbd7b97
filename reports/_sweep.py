"""The HTML summary of a sweep (`provision sweep`): one self-contained page.

Two figures from the sweep table (`provisioner.sweep.SWEEP_COLUMNS`), one line per
family and series (model, workload, price list, seed, goal): the answer (machines) vs
the request rate, and the cost per request vs the rate (goals cost and power; a
throughput question is drawn at the rate its answer sustains). Infeasible answers are
left out of the lines and counted in the table below them.
"""

from __future__ import annotations

from html import escape

import pandas as pd

from provisioner.files import check_output_path, write_output

__all__ = ["sweep_figures", "build_sweep_html", "write_sweep_report"]

SERIES = ("goal", "model", "workload", "price_list", "seed")


def _series_label(key: tuple) -> str:
    return " · ".join(str(k) for k in key)


def sweep_figures(table: pd.DataFrame) -> list[tuple[str, object]]:
    """(chart id, plotly figure): machines vs rate and $/request vs rate, per family and series."""
    import plotly.graph_objects as go

    feasible = table[table["feasible"]].copy()
    feasible["rate"] = feasible["rps"].where(feasible["goal"] != "throughput", feasible["sustainable_rps"])
    # Series columns that vary in this sweep (the others would only lengthen the legend).
    series = [c for c in SERIES if table[c].nunique(dropna=False) > 1]
    figs = []
    for cid, column, title, unit in (("machines", "machines", "Answer: machines vs request rate", "machines"),
                                     ("cost", "cost_usd_per_request", "Cost per request vs request rate",
                                      "$ per request")):
        fig = go.Figure()
        for (family, *key), part in feasible.groupby(["family", *series], sort=True, dropna=False):
            part = part.sort_values("rate")
            fig.add_trace(go.Scatter(x=part["rate"], y=part[column], mode="lines+markers",
                                     name=f"{family} ({_series_label(key)})" if key else family,
                                     customdata=part[["prompt_machines", "token_machines", "cost_usd_per_h"]],
                                     hovertemplate="%{x:.3g} req/s: %{y:.4g}<br>%{customdata[0]}P + "
                                                   "%{customdata[1]}T, $%{customdata[2]:,.0f}/h<extra></extra>"))
        fig.update_layout(title=title, xaxis_title="request rate (req/s)", yaxis_title=unit, height=460,
                          template="plotly_white", legend={"font": {"size": 11}})
        figs.append((cid, fig))
    return figs


def _table_html(table: pd.DataFrame) -> str:
    cols = ["question", "goal", "model", "workload", "rps", "power_budget_kw", "cost_budget_usd_per_h", "price_list",
            "seed", "family", "feasible", "machines", "cost_usd_per_h", "power_kw", "cost_usd_per_request",
            "min_margin", "binding_slo", "gap_to_bound_pct", "reason"]
    head = "".join(f"<th>{escape(c)}</th>" for c in cols)
    body = []
    for rec, winner in zip(table[cols].to_dict("records"), table["winner"]):
        cls = ' class="winner"' if winner else ("" if rec["feasible"] else ' class="infeasible"')
        cells = "".join(f"<td>{escape(_cell(rec[c]))}</td>" for c in cols)
        body.append(f"<tr{cls}>{cells}</tr>")
    return f"<table><tr>{head}</tr>{''.join(body)}</table>"


def _cell(v) -> str:
    if v is None or (isinstance(v, float) and v != v):
        return "–"
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def build_sweep_html(table: pd.DataFrame, *, title: str = "Sweep") -> str:
    """The summary page (str): the figures (plotly.js inlined once) and the table."""
    from ._html import CSS, PLOTLY_CONFIG, plotly_js

    figs = sweep_figures(table)
    n_q = int(table["question"].nunique()) if len(table) else 0
    infeasible = int((~table["feasible"]).sum())
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             f"<title>{escape(title)}</title><style>{CSS}</style></head><body><main>",
             f"<h1>{escape(title)}</h1>",
             f'<p class="lead">{n_q} questions, {len(table)} answers (question x family), {infeasible} '
             f"infeasible (left out of the figures).</p>",
             "<script>window.PlotlyConfig = {MathJaxConfig: 'local'};</script>",
             f'<script id="plotly-js" charset="utf-8">{plotly_js({"scatter"})}</script>']
    for index, (cid, fig) in enumerate(figs):
        html = fig.to_html(full_html=False, include_plotlyjs=False, div_id=f"chart-{index}", config=PLOTLY_CONFIG)
        parts.append(f'<div class="chart" data-chart="{escape(cid)}">{html}</div>')
    parts += ["<h2>Answers</h2>", _table_html(table),
              "<footer>self-contained: plotly.js is inlined; this file loads nothing from the network.</footer>",
              "</main></body></html>"]
    return "\n".join(parts)


def write_sweep_report(table: pd.DataFrame, path, *, force: bool = False, title: str = "Sweep"):
    """Write the summary page atomically (refusing an existing file unless `force`)."""
    check_output_path(path, flag="path", force=force, parents=True)
    return write_output(path, build_sweep_html(table, title=title), flag="path", force=force, parents=True)
