"""The HTML report of a cloud plan (`provision cloud --report`): the plan drawn as a flow
diagram (nodes -> replica groups -> routed shares from prefill to decode replicas), the
split and non-split plans side by side, and the re-plan's attainment when a node left
(`--without`: a headed section with the chart and a table of attainment per SLO metric before,
with no re-plan, after the lightweight and the full re-plan, each re-plan's time and what it
changed). The plan tables read as the CLI's (`provisioner.cloud.replica_cells`).

Only cartesian traces (lines, markers, bars), so the vendored plotly.js bundle serves.
"""

from __future__ import annotations

from html import escape

from provisioner.files import check_output_path, write_output

__all__ = ["cloud_flow", "cloud_figures", "build_cloud_html", "write_cloud_report"]

_COLORS = {"prefill": "#1f77b4", "decode": "#d62728", "both": "#7f7f7f", "node": "#2ca02c"}


def cloud_flow(answer: dict) -> dict:
    """The diagram as data: node and replica positions, GPU edges and routed-share edges."""
    reps = answer["replicas"]
    nodes = sorted({n for r in reps for n in r["nodes"]})
    pre = [i for i, r in enumerate(reps) if r["phase"] == "prefill"]
    dec = [i for i, r in enumerate(reps) if r["phase"] == "decode"]
    pos = {("node", n): (0.0, _y(k, len(nodes))) for k, n in enumerate(nodes)}
    pos.update({("rep", i): (1.0, _y(k, len(pre))) for k, i in enumerate(pre)})
    pos.update({("rep", i): (2.0, _y(k, len(dec))) for k, i in enumerate(dec)})
    gpu_edges = [(("node", n), ("rep", i), sum(r["gpus"].values()) / len(r["nodes"]))
                 for i, r in enumerate(reps) for n in r["nodes"]]
    flows = [(("rep", i), ("rep", j), f) for (i, j, f) in answer.get("flows", [])]
    return {"nodes": nodes, "positions": pos, "gpu_edges": gpu_edges, "flows": flows, "replicas": reps}


def _y(k: int, n: int) -> float:
    return 1.0 - (k + 0.5) / max(n, 1)


def cloud_figures(answer: dict) -> list[tuple[str, object]]:
    import plotly.graph_objects as go

    from provisioner.cloud import gpus_text, tp_text
    flow = cloud_flow(answer)
    pos, reps = flow["positions"], flow["replicas"]
    fig = go.Figure()
    for a, b, gpus in flow["gpu_edges"]:
        (x0, y0), (x1, y1) = pos[a], pos[b]
        fig.add_trace(go.Scatter(x=[x0, x1], y=[y0, y1], mode="lines", line={"width": 1 + gpus, "color": "#bbb"},
                                 hoverinfo="skip", showlegend=False))
    for a, b, share in flow["flows"]:
        (x0, y0), (x1, y1) = pos[a], pos[b]
        fig.add_trace(go.Scatter(x=[x0, x1], y=[y0, y1], mode="lines", opacity=0.6,
                                 line={"width": 1 + 30 * share, "color": "#9467bd"}, showlegend=False,
                                 hovertemplate=f"{share:.1%} of requests<extra></extra>"))
    xs = [pos[("node", n)][0] for n in flow["nodes"]]
    ys = [pos[("node", n)][1] for n in flow["nodes"]]
    fig.add_trace(go.Scatter(x=xs, y=ys, mode="markers+text", text=flow["nodes"], textposition="middle left",
                             marker={"size": 16, "color": _COLORS["node"], "symbol": "square"}, name="node"))
    for phase in ("prefill", "decode"):
        idx = [i for i, r in enumerate(reps) if r["phase"] == phase]
        labels = [f"{gpus_text(reps[i]['gpus'])} TP{tp_text(reps[i])} PP{reps[i]['pp']}"
                  f" ({reps[i]['share']:.0%})" for i in idx]
        fig.add_trace(go.Scatter(x=[pos[("rep", i)][0] for i in idx], y=[pos[("rep", i)][1] for i in idx],
                                 mode="markers+text", text=labels,
                                 textposition="middle right" if phase == "decode" else "top center",
                                 marker={"size": 14, "color": _COLORS[phase]}, name=phase))
    fig.update_layout(title="The plan: nodes -> replica groups -> routed shares (prefill -> decode)",
                      xaxis={"visible": False, "range": [-0.6, 2.8]}, yaxis={"visible": False},
                      height=120 + 40 * max(len(reps), len(flow["nodes"])), template="plotly_white")
    figs = [("plan", fig)]
    if "replan" in answer:
        from provisioner.cloud import replan_event
        rp = answer["replan"]
        cases = [("before", rp["before"]), ("no re-plan", rp["none"]["slo_attainment"]),
                 ("lightweight", rp["light"]["slo_attainment"]), ("full", rp["full"]["slo_attainment"])]
        bar = go.Figure()
        for metric in ("ttft", "tbt", "e2e", "all"):
            bar.add_trace(go.Bar(x=[c for c, _ in cases], y=[a[metric] for _, a in cases], name=metric))
        bar.update_layout(title=f"SLO attainment {replan_event(rp)}", yaxis={"title": "share of requests",
                          "range": [0, 1]}, barmode="group", template="plotly_white", height=420)
        figs.append(("replan", bar))
    return figs


def _latency_model_text(answer: dict) -> str:
    """The roofline, or the roofline fitted on `--latency-profile` (the answer's `latency_model`)."""
    lm = answer.get("latency_model")
    if not isinstance(lm, dict):
        return "the roofline, the shipped calibration's constants"
    gpus = lm.get("gpus") if isinstance(lm.get("gpus"), dict) else {}
    where = "; ".join(f"{g}: {how}" for g, how in gpus.items())
    profile = lm.get("profile", "(not named)")
    if not any(how == "fitted" or str(how).startswith("borrows") for how in gpus.values()):
        return (f"the roofline, the shipped calibration's constants: the measured profile {profile} sets none "
                f"of these GPUs'" + (f" ({where})" if where else ""))
    return f"the roofline with constants fitted on the measured profile {profile} ({where})"


def build_cloud_html(answer: dict, *, title: str = "Cloud plan") -> str:
    from ._html import CSS, PLOTLY_CONFIG, plotly_js

    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             f"<title>{escape(title)}</title><style>{CSS}</style></head><body><main>",
             f"<h1>{escape(title)}: {escape(str(answer['inventory']))}</h1>", f'<p class="lead">{_lead(answer)}</p>',
             f"<p>Network: {escape(str(answer['network']))}; {escape(str(answer['kv_bits']))}-bit KV on the wire. "
             f"Latency model: {escape(_latency_model_text(answer))}.</p>",
             "<script>window.PlotlyConfig = {MathJaxConfig: 'local'};</script>",
             f'<script id="plotly-js" charset="utf-8">{plotly_js({"scatter", "bar"})}</script>']
    charts = {}
    for index, (cid, fig) in enumerate(cloud_figures(answer)):
        html = fig.to_html(full_html=False, include_plotlyjs=False, div_id=f"chart-{index}", config=PLOTLY_CONFIG)
        charts[cid] = f'<div class="chart" data-chart="{escape(cid)}">{html}</div>'
    if "plan" in charts:
        parts.append(charts["plan"])
    parts += _replan_section(answer, charts.get("replan"))
    plans = [("Split plan" if not answer.get("no_split_plan") else "Split plan: none", answer["replicas"]),
             ("Best non-split plan", answer["non_split"]["replicas"])]
    if "non_split_chunked" in answer:   # absent with --prefill-chunk-tokens 0
        ch = answer["non_split_chunked"]
        plans.append((f"Best non-split plan, chunked prefill ({ch['prefill_chunk_tokens']} tokens)", ch["replicas"]))
    for name, reps in plans:
        parts += [f"<h2>{escape(name)}</h2>", _table(reps)]
    parts += _rental_section(answer)
    parts += ["<footer>self-contained: plotly.js is inlined; this file loads nothing from the network.</footer>",
              "</main></body></html>"]
    return "\n".join(parts)


def _lead(a: dict) -> str:
    att = a["slo_attainment"]
    if a.get("no_split_plan"):   # the non-split plan is the answer
        ns, nat = a["non_split"], a["non_split"]["slo_attainment"]
        return escape(f"{a['model']} on {a['workload']}: {a['no_split_plan']}. Non-split: {ns['throughput_rps']:.2f} "
                      f"req/s predicted, {ns['sustained_rps']:.2f} req/s at {a['target_attainment']:.0%} attainment "
                      f"in the DES{_chunked_lead(a)}. At {a['rps']:g} req/s: non-split attainment ttft "
                      f"{nat['ttft']:.1%}, tbt {nat['tbt']:.1%}, e2e {nat['e2e']:.1%}. {_load_lead(a)}Planned "
                      f"in {a['elapsed_s']:.2f} s.")
    return escape(f"{a['model']} on {a['workload']}: {a['throughput_rps']:.2f} req/s predicted (bound "
                  f"{a['upper_bound_rps']:.2f}, gap {a['gap']:.1%}), {a['sustained_rps']:.2f} req/s at "
                  f"{a['target_attainment']:.0%} attainment in the DES; non-split "
                  f"{a['non_split']['sustained_rps']:.2f}{_chunked_lead(a)}. At {a['rps']:g} req/s: attainment "
                  f"ttft {att['ttft']:.1%}, "
                  f"tbt {att['tbt']:.1%}, e2e {att['e2e']:.1%}. {_load_lead(a)}Planned in {a['elapsed_s']:.2f} s.")


def _load_lead(a: dict) -> str:
    from provisioner.cloud import load_text
    loads = load_text(a)
    return (f"The busiest server's steady-state load (at least; over 100% it falls behind however long the "
            f"window): {loads}. " if loads else "")


def _rental_section(a: dict) -> list[str]:
    """`--goal cost`: what was rented for the split plan, and the cheapest rental served
    non-split, with its plan's table and whether it is cheaper."""
    from provisioner.cloud import checks_text, prompts_text, rented_text
    if "non_split_rental" not in a:
        return []
    ns = a["non_split_rental"]
    split = f"the split plan above rents {rented_text(a['rented'])} for {a['cost_usd_per_h']:.3f} $/h"
    if ns["cost_usd_per_h"] is None:
        return ["<h2>What to rent</h2>", f"<p>For {a['rps']:g} req/s, {escape(split)}; no non-split rental "
                f"serves it: {escape(ns['why'])}</p>"]
    prompts = prompts_text(ns["prefill_chunk_tokens"])
    cheaper = ("cheaper" if ns["cost_usd_per_h"] < a["cost_usd_per_h"] else
               "the same price" if ns["cost_usd_per_h"] == a["cost_usd_per_h"] else "dearer")
    checks = (f"Both meet {a['target_attainment']:.0%} attainment; Table VI's percentile checks: non-split "
              f"{checks_text(ns['slo'])}, split {checks_text(a['slo'])}.")
    return ["<h2>What to rent</h2>",
            f"<p>For {a['rps']:g} req/s, {escape(split)}. The cheapest rental served non-split ({escape(prompts)}) "
            f"rents {escape(rented_text(ns['rented']))} for {ns['cost_usd_per_h']:.3f} $/h, {cheaper}. "
            f"{escape(checks)}</p>",
            _table(ns["replicas"])]



def _chunked_lead(a: dict) -> str:
    if "non_split_chunked" not in a:
        return ""
    ch = a["non_split_chunked"]
    return f", non-split with {ch['prefill_chunk_tokens']}-token chunked prefill {ch['sustained_rps']:.2f}"


def _replan_section(a: dict, chart: str | None) -> list[str]:
    """`--without NODE` / `--replan-workload W`: a heading, the chart, and the same numbers as
    a table: attainment per SLO metric before the change, with no re-plan, after the
    lightweight and the full re-plan, each re-plan's time and what it changed."""
    if "replan" not in a:
        if "replan_skipped" not in a:
            return []
        return ['<section id="replan"><h2>Re-plan</h2>',
                f'<p class="note">{escape(a["replan_skipped"])}</p></section>']
    from provisioner.cloud import REPLAN_METRICS, replan_event, replan_rows

    rp = a["replan"]
    node, mix = rp.get("node"), rp.get("workload")
    head = ("<tr><th>case</th>" + "".join(f"<th class=n>{m} attainment</th>" for m in REPLAN_METRICS)
            + "<th class=n>re-plan time (s)</th><th>what changed</th></tr>")
    rows = []
    for row in replan_rows(a):
        cells = "".join(f"<td class=n>{row['attainment'][m]:.1%}</td>" for m in REPLAN_METRICS)
        rows.append(f'<tr data-case="{row["case"]}"><td>{escape(row["name"])}</td>{cells}'
                    f'<td class=n>{escape(row["took"])}</td><td>{escape(row["changed"])}</td></tr>')
    what = " and ".join(([f"node {node} leaves"] if node else []) +
                        ([f"the requests become the {mix} mix's (at the same rate)"] if mix else []))
    same = "the same trace in each case" if not mix else "the planned mix's trace before, the new mix's after"
    replicas, nodes = ("the surviving replicas", "the remaining nodes") if node else ("the replicas", "the same nodes")
    note = (f"Share of requests within each SLO limit at {a['rps']:g} req/s, {same}, "
            f"when {what}: with no re-plan ({replicas} keep their phases and "
            f"routing), after the lightweight re-plan (phase flips and re-routing only: no model reloaded) and "
            f"after a full re-plan (a new plan of {nodes}). 'all': within every limit; re-plan time: seconds the "
            f"re-plan's search and simulations took (— where nothing is re-planned).")
    skipped = [f'<p class="note">{escape(a["replan_skipped"])}</p>'] if "replan_skipped" in a else []
    return ['<section id="replan">', f"<h2>Re-plan {escape(replan_event(rp))}</h2>", *skipped,
            f'<p class="note">{escape(note)}</p>', chart or "",
            f'<table class="replan">{head}{"".join(rows)}</table>', "</section>"]


def _table(reps: list) -> str:
    from provisioner.cloud import REPLICA_COLUMNS, replica_cells

    head = "".join(f"<th>{escape(c)}</th>" for c in REPLICA_COLUMNS)
    rows = "".join("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in replica_cells(r)) + "</tr>" for r in reps)
    return f"<table><tr>{head}</tr>{rows}</table>"


def write_cloud_report(answer: dict, path, *, force: bool = False, flag: str = "--report", inputs=(),
                       force_hint: str = "force=True"):
    """Write the page atomically (refusing an existing file unless `force`)."""
    check_output_path(path, flag=flag, force=force, force_hint=force_hint, inputs=inputs)
    return write_output(path, build_cloud_html(answer), flag=flag, force=force, force_hint=force_hint, inputs=inputs)
