"""The on-demand schedulers' timeline page: preemptions, migrations, downtime and memory
fragmentation over time, one line per policy (rows of `SCHEDULER_TIMELINE`, sampled every
second by the discrete-event engine)."""

from __future__ import annotations

from html import escape

import numpy as np

# Columns of a timeline row (provisioner.sim._des_llumnix.SCHEDULER_TIMELINE).
TIMELINE_COLUMNS = ("time_s", "preemptions", "migrations", "migration_downtime_s", "fragmentation", "queued")
PANELS = (("preemptions", "preemptions (cumulative)", 1.0), ("migrations", "migrations (cumulative)", 1.0),
          ("migration_downtime_s", "migration downtime (s, cumulative)", 1.0),
          ("fragmentation", "fragmented KV memory (% of all KV)", 100.0), ("queued", "queued prompts", 1.0))


def scheduler_timelines(result: dict, perf=None) -> dict:
    """The timeline of every feasible answer under an on-demand scheduler, re-run by the
    discrete-event engine on the question's trace: {"family (scheduler)": (k, 6) array}."""
    from provisioner.results import preemption_from_question
    from provisioner.schedulers import ON_DEMAND_SCHEDULERS
    from provisioner.sim import simulate

    from ._curves import question_trace, slo_of, winner_designs

    # splitwisesim keeps no timeline (it neither preempts nor migrates): not re-run for nothing
    designs = [d for d in winner_designs(result) if d.scheduler in ON_DEMAND_SCHEDULERS]
    if not designs:
        return {}
    trace = question_trace(result)
    timelines: list = []
    preemption, swap_space_gb = preemption_from_question(result["question"])
    simulate(designs, trace, result["question"]["model"], engine="des", slo=slo_of(result), perf=perf,
             timelines=timelines, preemption=preemption, swap_space_gb=swap_space_gb)
    return {f"{d.family} ({d.scheduler})": t for d, t in zip(designs, timelines)}


def scheduler_timeline_figure(timelines: dict):
    """One plotly figure, a panel per quantity; `timelines`: policy -> (k, 6) array."""
    from plotly.subplots import make_subplots

    from ._figures import _layout

    fig = make_subplots(rows=len(PANELS), cols=1, shared_xaxes=True, vertical_spacing=0.04,
                        subplot_titles=[title for _, title, _ in PANELS])
    for name, rows in timelines.items():
        rows = np.asarray(rows, dtype=float).reshape(-1, len(TIMELINE_COLUMNS))
        for i, (col, _, scale) in enumerate(PANELS, start=1):
            fig.add_scatter(x=rows[:, 0], y=rows[:, TIMELINE_COLUMNS.index(col)] * scale, mode="lines", name=name,
                            legendgroup=name, showlegend=i == 1, row=i, col=1)
    fig.update_xaxes(title_text="time (s)", row=len(PANELS), col=1)
    return _layout(fig, "Scheduler over time", 190 * len(PANELS))


def build_scheduler_html(timelines: dict, *, title: str = "Scheduler timeline", lead: str = "") -> str:
    """A self-contained page (plotly.js inlined) with the timeline figure."""
    from ._html import CSS, PLOTLY_CONFIG, plotly_js

    fig = scheduler_timeline_figure(timelines)
    chart = fig.to_html(full_html=False, include_plotlyjs=False, div_id="chart-0", config=PLOTLY_CONFIG)
    return "\n".join([
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{escape(title)}</title><style>{CSS}</style></head><body><main>", f"<h1>{escape(title)}</h1>",
        f'<p class="lead">{escape(lead)}</p>' if lead else "",
        "<script>window.PlotlyConfig = {MathJaxConfig: 'local'};</script>",
        f'<script id="plotly-js" charset="utf-8">{plotly_js({"scatter"})}</script>',
        f'<div class="chart" data-chart="scheduler-timeline">{chart}</div>',
        "<footer>self-contained: plotly.js is inlined; this file loads nothing from the network.</footer>",
        "</main></body></html>"])
