"""Plotly figures of the report, drawn from `_data.ReportData` (plotly imported lazily).

Each function takes numbers computed in `_data` and returns a `plotly.graph_objects.Figure`,
or None when there is nothing to draw (the page then says why).
"""

from __future__ import annotations

import zlib

import numpy as np

from provisioner.slo import METRICS, PERCENTILES

from ._data import Heatmap, ReportData

# One colour per family, the same in every chart (Okabe-Ito, colour-blind safe).
FAMILY_COLORS = {
    "baseline-a100": "#999999", "baseline-h100": "#000000", "splitwise-aa": "#E69F00",
    "splitwise-hh": "#0072B2", "splitwise-ha": "#009E73", "splitwise-hhcap": "#CC79A7",
}
EXTRA_COLORS = ("#D55E00", "#56B4E9", "#F0E442", "#882255", "#44AA99", "#117733")
FONT = dict(family="system-ui, -apple-system, Segoe UI, Roboto, sans-serif", size=12, color="#2a3f5f")
# plotly_white's look without its `automargin`, which re-lays each chart out several
# times and was most of the report's render time; margins are set per figure instead.
_AXIS = dict(gridcolor="#EBF0F8", linecolor="#EBF0F8", zerolinecolor="#EBF0F8", zerolinewidth=2, ticks="")
LEAN_TEMPLATE = dict(layout=dict(paper_bgcolor="white", plot_bgcolor="white", hovermode="closest",
                                 hoverlabel=dict(align="left", font_size=11), xaxis=_AXIS, yaxis=_AXIS,
                                 colorway=list(EXTRA_COLORS)))


def family_color(family: str) -> str:
    """The family's colour; other (custom) families get one from their name, stably."""
    if family in FAMILY_COLORS:
        return FAMILY_COLORS[family]
    return EXTRA_COLORS[zlib.crc32(family.encode()) % len(EXTRA_COLORS)]


def _layout(fig, title: str, height: int):
    fig.update_layout(title=dict(text=title, x=0.01, xanchor="left", font=dict(size=15)), height=height,
                      margin=dict(l=70, r=20, t=60, b=55), template=LEAN_TEMPLATE, font=FONT)
    return fig


REJECTED_COLOUR = "#f6c28b"   # met the search trace, rejected by the re-check


def heatmap_figure(h: Heatmap):
    """Prompt x token machines coloured by cost; SLO-failing cells grey, cells the re-check
    rejected orange; optimum starred.

    The two heatmaps carry only colours (float32); the hover text (nine slowdowns, cost,
    power, load, binding SLO) rides on one transparent marker per evaluated cell, so a
    sparse search over a wide grid stays small in the page.
    """
    import plotly.graph_objects as go

    split = h.split
    y = h.token_counts if split else ["mixed"]
    # Colour range from the cheapest SLO-meeting design to twice its cost: a search
    # visits a few far, expensive cells that would otherwise flatten the region that
    # matters into one colour (costs beyond saturate; hover shows the exact cost).
    feasible = h.masked_cost[np.isfinite(h.masked_cost)]
    lo = float(feasible.min()) if feasible.size else None
    hi = float(max(min(feasible.max(), 2 * feasible.min()), feasible.min() + 1)) if feasible.size else None
    gap = 1 if max(h.cost_usd_per_h.shape) <= 40 else 0  # cell borders only while cells are wide
    fig = go.Figure()
    fig.add_trace(go.Heatmap(
        x=h.prompt_counts, y=y, z=np.where(h.evaluated & ~h.slo_met, 1.0, np.nan).astype(np.float32),
        colorscale=[[0, "#d0d0d0"], [1, "#d0d0d0"]], showscale=False, hoverinfo="skip",
        xgap=gap, ygap=gap, name="misses an SLO"))
    rejected = h.recheck_failed if h.recheck_failed is not None else np.zeros_like(h.slo_met)
    if rejected.any():
        fig.add_trace(go.Heatmap(
            x=h.prompt_counts, y=y, z=np.where(rejected, 1.0, np.nan).astype(np.float32),
            colorscale=[[0, REJECTED_COLOUR], [1, REJECTED_COLOUR]], showscale=False, hoverinfo="skip",
            xgap=gap, ygap=gap, name="fails the re-check"))
    fig.add_trace(go.Heatmap(
        x=h.prompt_counts, y=y, z=h.masked_cost.astype(np.float32), zmin=lo, zmax=hi,
        colorscale="Viridis", colorbar=dict(title=dict(text="$/h"), thickness=12), hoverinfo="skip",
        xgap=gap, ygap=gap, name="meets every SLO"))
    iy, ix = np.nonzero(h.evaluated)
    custom = np.column_stack([h.slowdown[iy, ix], h.cost_usd_per_h[iy, ix], h.power_kw[iy, ix], h.rps[iy, ix]])
    verdict = np.where(rejected[iy, ix], "meets every SLO on the search trace, fails the re-check",
                       np.where(h.slo_met[iy, ix], "meets every SLO", "misses an SLO"))
    fig.add_trace(go.Scatter(
        x=h.prompt_counts[ix], y=h.token_counts[iy] if split else ["mixed"] * len(ix), mode="markers",
        marker=dict(size=10, opacity=0), customdata=custom.round(4), text=h.binding_slo[iy, ix].astype(str),
        meta=None, hovertext=verdict, showlegend=False, name="designs",
        hovertemplate=("%{x} prompt" + (" + %{y} token" if split else "") + " machines: %{hovertext}<br>"
                       "$%{customdata[9]:,.0f}/h · %{customdata[10]:,.1f} kW · at %{customdata[11]:.3g} req/s<br>"
                       "slowdown p50 / p90 / p99<br>"
                       "TTFT %{customdata[0]:.2f} / %{customdata[1]:.2f} / %{customdata[2]:.2f}<br>"
                       "TBT  %{customdata[3]:.2f} / %{customdata[4]:.2f} / %{customdata[5]:.2f}<br>"
                       "E2E  %{customdata[6]:.2f} / %{customdata[7]:.2f} / %{customdata[8]:.2f}<br>"
                       "binding: %{text}<extra></extra>")))
    if h.optimum is not None:
        p, t = h.optimum
        j, i = int(np.searchsorted(h.prompt_counts, p)), int(np.searchsorted(h.token_counts, t))
        label = f"{p}P + {t}T" if split else f"{p} machines"
        fig.add_trace(go.Scatter(
            x=[p], y=[t if split else "mixed"], mode="markers", name="optimum",
            marker=dict(symbol="star", size=17, color="#FF6F00", line=dict(color="white", width=1.5)),
            hoverinfo="skip", showlegend=False))
        best = f" · ★ {label}: ${h.cost_usd_per_h[i, j]:,.0f}/h, {h.power_kw[i, j]:,.0f} kW"
    else:
        best = " · none meets every SLO"
    fig.update_xaxes(title_text="prompt machines" if split else "machines (mixed)")
    fig.update_yaxes(title_text="token machines" if split else "")
    if hi is not None:
        _zoom_to_region(fig, h, hi, split)
    failed = f" ({int(rejected.sum())} fail the re-check, orange)" if rejected.any() else ""
    title = f"<b>{h.family}</b>: {int(h.slo_met.sum())}/{int(h.evaluated.sum())} designs meet the SLOs{failed}{best}"
    return _layout(fig, title, 380 if split else 230)


def _zoom_to_region(fig, h: Heatmap, max_cost: float, split: bool) -> None:
    """Open the view on the designs costing up to `max_cost` (SLO-meeting or not): the
    frontier around the optimum. Far cells a search probed stay one zoom-out away."""
    near = h.evaluated & (h.cost_usd_per_h <= max_cost)
    iy, ix = np.nonzero(near)
    if len(ix) == 0 or near.sum() == h.evaluated.sum():
        return

    def rng(values, counts):
        step = float(counts[1] - counts[0]) if len(counts) > 1 else 1.0
        return [float(values.min()) - 2.5 * step, float(values.max()) + 2.5 * step]

    fig.update_xaxes(range=rng(h.prompt_counts[ix], h.prompt_counts))
    if split:
        fig.update_yaxes(range=rng(h.token_counts[iy], h.token_counts))


def pareto_figure(pareto):
    """SLO-meeting designs of all families, the frontier (non-dominated in cost, power and
    sustainable throughput) drawn large. Cost vs power, and cost vs throughput when the
    designs' throughputs differ (throughput goal); at one fixed rate the frontier is the
    cost-power one and is joined by a line."""
    if pareto.empty:
        return None
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    rates = pareto.throughput_rps.dropna().unique()
    one_rate = len(rates) <= 1
    panels = [("power_kw", "provisioned power (kW)")]
    if not one_rate:
        panels.append(("throughput_rps", "sustainable throughput (req/s)"))
    fig = make_subplots(rows=1, cols=len(panels), horizontal_spacing=0.1,
                        subplot_titles=[f"cost vs. {t.split(' (')[0]}" for _, t in panels] if not one_rate else None)
    for fam, g in pareto.groupby("family", sort=False):
        color = family_color(fam)
        p, t = g.prompt_machines.astype(str), g.token_machines.astype(str)
        label = np.where(g.token_machines > 0, p + "P + " + t + "T", p + " mixed")
        custom = np.column_stack([label, g.cost_usd_per_h, g.power_kw, g.throughput_rps])
        hover = ("%{customdata[0]}<br>$%{customdata[1]:,.0f}/h · %{customdata[2]:,.1f} kW · "
                 "%{customdata[3]:.3g} req/s<extra>" + fam + "</extra>")
        for front in (False, True):
            sel = (g.on_frontier == front).to_numpy()
            if not sel.any():
                continue
            marker = (dict(size=12, color=color, line=dict(color="#222", width=1.2)) if front
                      else dict(size=7, color=color, opacity=0.4))
            for col, (key, _) in enumerate(panels, start=1):
                fig.add_trace(go.Scatter(
                    x=g.cost_usd_per_h[sel], y=g[key][sel], mode="markers", marker=marker, customdata=custom[sel],
                    hovertemplate=hover, legendgroup=fam, name=fam + (" (frontier)" if front else ""),
                    showlegend=col == 1), row=1, col=col)
    if one_rate:
        front = pareto[pareto.on_frontier].sort_values("cost_usd_per_h")
        fig.add_trace(go.Scatter(x=front.cost_usd_per_h, y=front.power_kw, mode="lines", name="frontier",
                                 line=dict(color="#555", dash="dot", width=1), hoverinfo="skip"), row=1, col=1)
    fig.update_xaxes(title_text="cost ($/h)")
    for col, (_, title) in enumerate(panels, start=1):
        fig.update_yaxes(title_text=title, row=1, col=col)
    n = int(pareto.on_frontier.sum())
    where = f"all at {rates[0]:.3g} req/s" if one_rate and len(rates) else "cost, power and throughput"
    return _layout(fig, f"Pareto frontier across families: {n} of {len(pareto)} SLO-meeting designs ({where})", 460)


def load_curves_figure(curves, slo):
    """Slowdown percentiles vs load for each family's answer, with the SLO limits (Fig. 16)."""
    if curves.empty:
        return None
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    pcts = [f"p{p}" for p in PERCENTILES]
    fig = make_subplots(rows=3, cols=3, shared_xaxes=True, vertical_spacing=0.07, horizontal_spacing=0.07,
                        subplot_titles=[f"{m.upper()} {p}" for p in pcts for m in METRICS])
    limits = slo.limits()
    for (fam, design), g in curves.groupby(["family", "design"], sort=False):
        color = family_color(fam)
        for i, p in enumerate(pcts):
            for j, m in enumerate(METRICS):
                s = g[(g.metric == m) & (g.percentile == p)].sort_values("rps")
                y = s.slowdown.where(np.isfinite(s.slowdown))
                fig.add_trace(go.Scatter(
                    x=s.rps, y=y, mode="lines+markers", line=dict(color=color, width=1.8),
                    marker=dict(size=5), customdata=s.latency_ms, legendgroup=fam, name=f"{fam} ({design})",
                    showlegend=(i == 0 and j == 0),
                    hovertemplate=(f"{fam} {design}<br>%{{x:.3g}} req/s: {m.upper()} {p} "
                                   "%{customdata:,.0f} ms, slowdown %{y:.2f}<extra></extra>")),
                    row=i + 1, col=j + 1)
    for i in range(3):
        for j in range(3):
            fig.add_hline(y=float(limits[j, i]), line=dict(color="#C0392B", dash="dash", width=1.2),
                          row=i + 1, col=j + 1)
    fig.update_yaxes(type="log")
    for i in range(3):
        fig.update_yaxes(title_text="slowdown", row=i + 1, col=1)
    for j in range(3):
        fig.update_xaxes(title_text="load (req/s)", row=3, col=j + 1)
    return _layout(fig, "Latency vs. load of each family's answer (slowdown vs. the request alone; "
                        "dashed: SLO limit)", 760)


def summary_figure(summary, baseline):
    """Answers' metrics normalized to the baseline family (Figs. 18-19)."""
    if summary.empty:
        return None
    import plotly.graph_objects as go

    fig = go.Figure()
    for fam, g in summary.groupby("family", sort=False):
        fig.add_trace(go.Bar(
            x=g.label, y=g.normalized, name=fam, marker_color=family_color(fam), customdata=g.value,
            hovertemplate=f"{fam}<br>%{{x}}: %{{customdata:,.4g}} (%{{y:.2f}}x {baseline})<extra></extra>"))
    fig.add_hline(y=1.0, line=dict(color="#555", dash="dot", width=1))
    fig.update_layout(barmode="group", yaxis_title=f"normalized to {baseline}")
    return _layout(fig, f"Each family's answer, normalized to {baseline}", 420)


def workload_figure(cdfs, rate):
    """Prompt and output token CDFs and arrivals per second of the question's workload."""
    if cdfs.empty:
        return None
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=3, horizontal_spacing=0.07,
                        subplot_titles=("prompt tokens (CDF)", "output tokens (CDF)", "arrivals per second"))
    for col, (name, color) in enumerate((("prompt_tokens", "#0072B2"), ("output_tokens", "#E69F00")), start=1):
        g = cdfs[cdfs.quantity == name]
        fig.add_trace(go.Scatter(x=g.tokens, y=g.cdf, mode="lines", line=dict(shape="hv", color=color),
                                 name=name.replace("_", " "), showlegend=False,
                                 hovertemplate="%{x} tokens: %{y:.3f}<extra></extra>"), row=1, col=col)
        fig.update_xaxes(type="log", title_text="tokens", row=1, col=col)
    fig.update_yaxes(title_text="fraction of requests", range=[0, 1.02], row=1, col=1)
    fig.add_trace(go.Bar(x=rate.second, y=rate.requests, marker_color="#009E73", showlegend=False,
                         name="arrivals", hovertemplate="second %{x}: %{y} requests<extra></extra>"), row=1, col=3)
    fig.update_xaxes(title_text="time (s)", row=1, col=3)
    fig.update_yaxes(title_text="requests", row=1, col=3)
    return _layout(fig, "Workload", 360)


def latency_model_figure(curves, points):
    """Per-phase latency curves of the model and the measured calibration points."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.08,
                        subplot_titles=("prefill, batch 1", "decode iteration, prompt 512 tokens"))
    palette = {("a100-80gb", 2): "#F5C26B", ("a100-80gb", 4): "#E69F00", ("a100-80gb", 8): "#A66F00",
               ("h100-80gb", 2): "#7FB8DE", ("h100-80gb", 4): "#0072B2", ("h100-80gb", 8): "#003F63"}
    extra = iter(EXTRA_COLORS)
    for (model, gpu, tp), g in curves.groupby(["model", "gpu", "tp"], sort=False):
        measured = bool(g.measured.iloc[0])
        color = palette.get((gpu, tp)) if measured else None
        color = color or next(extra, "#555")
        name = f"{model} {gpu} TP{tp}"
        for col, phase in ((1, "prefill"), (2, "decode")):
            c = g[g.phase == phase]
            fig.add_trace(go.Scatter(
                x=c.x, y=c.time_ms, mode="lines", name=name + ("" if measured else " (no measurements)"),
                line=dict(color=color, dash="solid" if measured else "dash"), legendgroup=name,
                showlegend=col == 1, hovertemplate=f"{name}<br>%{{x:g}}: %{{y:.1f}} ms (model)<extra></extra>"),
                row=1, col=col)
            p = points[(points.phase == phase) & (points.gpu == gpu) & (points.tp == tp) & (points.model == model)]
            if not p.empty:
                fig.add_trace(go.Scatter(
                    x=p.x, y=p.time_ms, mode="markers", legendgroup=name, showlegend=False, name=name + " measured",
                    marker=dict(color=color, size=7, symbol=np.where(p.excluded, "x", "circle"),
                                line=dict(color="white", width=0.5)),
                    hovertemplate=f"{name}<br>%{{x:g}}: %{{y:.1f}} ms (measured median)<extra></extra>"),
                    row=1, col=col)
    fig.update_xaxes(type="log", title_text="prompt tokens", row=1, col=1)
    fig.update_xaxes(type="log", title_text="batch size (requests)", row=1, col=2)
    fig.update_yaxes(type="log", title_text="time (ms)", row=1, col=1)
    fig.update_yaxes(type="log", title_text="time per iteration (ms)", row=1, col=2)
    return _layout(fig, "Latency model (lines) and its calibration points (markers; x: excluded from the fit)", 440)


def figures(data: ReportData) -> list[tuple[str, str, object]]:
    """(chart id, section, figure) for every chart with data, in page order."""
    out = []
    for fam, h in data.heatmaps.items():
        out.append((f"heatmap-{fam}", "heatmaps", heatmap_figure(h)))
    out.append(("pareto", "pareto", pareto_figure(data.pareto)))
    out.append(("latency-vs-load", "load", load_curves_figure(data.load_curves, data.slo)))
    out.append(("summary", "summary", summary_figure(data.summary, data.baseline)))
    out.append(("workload", "workload", workload_figure(data.token_cdfs, data.arrival_rate)))
    if data.scheduler_timelines:
        from ._scheduler import scheduler_timeline_figure
        out.append(("scheduler-timeline", "scheduler", scheduler_timeline_figure(data.scheduler_timelines)))
    out.append(("latency-model", "perf", latency_model_figure(data.latency_curves, data.calibration_points)))
    return [(cid, sec, fig) for cid, sec, fig in out if fig is not None]


__all__ = ["heatmap_figure", "pareto_figure", "load_curves_figure", "summary_figure", "workload_figure",
           "latency_model_figure", "figures", "FAMILY_COLORS"]
