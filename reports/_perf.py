"""The latency model against its calibration measurements (`provision perf plot`,
Splitwise Fig. 5 and 6 style): the plot data as a tidy table, and its plotly figure."""

from __future__ import annotations

import numpy as np
import pandas as pd

from perfmodels import (POINT_COLUMNS, CalibrationReport, LatencyModel, calibration_artifacts, holdout_mask,
                        shipped_profile)

PLOT_GPUS = ("a100-80gb", "h100-80gb")
PLOT_PROMPT_SIZE = 512  # prompt size of the batch sweeps in the profiles
PANELS = {
    # panel: (phase, x column, title)
    "prefill_vs_prompt": ("prompt_time", "prompt_size", "Prompt phase vs prompt size (batch 1)"),
    "prefill_vs_batch": ("prompt_time", "batch_size", f"Prompt phase vs batch size (prompt {PLOT_PROMPT_SIZE})"),
    "decode_vs_batch": ("token_time", "batch_size", f"Decode iteration vs batch size (prompt {PLOT_PROMPT_SIZE})"),
    "decode_vs_context": ("token_time", "context_tokens", "Decode iteration vs context (batch 1)"),
}


def profile_medians(profile: pd.DataFrame, extra: tuple[str, ...] = ()) -> pd.DataFrame:
    """Median prompt_time_ms and token_time_ms of each configuration point of a profile
    (model and POINT_COLUMNS, plus `extra` columns), with its repetitions (`reps`)."""
    return (profile.groupby(["model", *POINT_COLUMNS, *extra], as_index=False)
            .agg(prompt_time_ms=("prompt_time_ms", "median"), token_time_ms=("token_time_ms", "median"),
                 reps=("prompt_time_ms", "size")))


def perf_plot_data(report: CalibrationReport, profile: pd.DataFrame | None = None, *,
                   holdout_fraction: float = 0.2, seed: int = 0, catalog=None,
                   grid_points: int = 60) -> pd.DataFrame:
    """The numbers of `provision perf plot`: measured medians and model curves, tidy.

    Parameters
    ----------
    report : from `perfmodels.calibrate(profile, holdout_fraction=..., seed=...)`; its
        constants draw the model curves.
    profile : the profile it was fitted on (default: the shipped one).
    holdout_fraction, seed : the split `calibrate` used, to mark held-out points (must
        match the call that produced `report`).
    grid_points : model-curve points per (panel, model, gpu, tp).

    Returns
    -------
    DataFrame, one row per plotted point, columns: panel (a key of PANELS), phase
    ("prompt_time" | "token_time"), model, gpu, tp, kind ("measured" | "model"),
    split ("train" | "held-out" | "excluded" for measured points, "" for the model),
    x (the panel's x: prompt_size, batch_size or context_tokens), prompt_size,
    batch_size, context_tokens, time_ms (median of the repetitions for a measured
    point), reps (repetitions; 0 for the model).

    Decode times are compared at the mean context of the generation,
    prompt_size + token_size / 2, as in `perfmodels.calibrate` (the profile's
    token_time_ms averages the iterations of a generation whose context grows).
    """
    profile = shipped_profile() if profile is None else profile
    perf = LatencyModel(report.calibration, catalog)
    df = profile.copy()
    excluded = calibration_artifacts(df)
    kept = df.loc[~excluded]
    held = pd.Series(False, index=df.index)
    held.loc[kept.index] = holdout_mask(kept, holdout_fraction, seed)
    df["split"] = np.where(excluded, "excluded", np.where(held, "held-out", "train"))
    med = profile_medians(df, ("split",))
    med = med.rename(columns={"hardware": "gpu", "tensor_parallel": "tp"})
    med["context_tokens"] = med.prompt_size + med.token_size / 2.0

    # The batch sweep generates one output length (128 tokens in the shipped profiles):
    # keep that length at batch 1 too, so one decode curve has one context.
    sweep = med.prompt_size == PLOT_PROMPT_SIZE
    sweep_tokens = med.token_size[sweep & (med.batch_size > 1)].min()
    slices = {
        "prefill_vs_prompt": med.batch_size == 1,
        "prefill_vs_batch": sweep,
        "decode_vs_batch": sweep & (med.token_size == sweep_tokens),
        "decode_vs_context": med.batch_size == 1,
    }
    parts = []
    for panel, sel in slices.items():
        phase, xcol, _ = PANELS[panel]
        m = med.loc[sel].copy()
        if m.empty:
            continue
        m["panel"], m["phase"], m["kind"] = panel, phase, "measured"
        m["x"] = m[xcol].astype(float)
        m["time_ms"] = m[f"{phase}_ms"]
        parts.append(m)
        for (model, gpu, tp), g in m.groupby(["model", "gpu", "tp"]):
            parts.append(_model_curve(perf, panel, model, gpu, tp, g, grid_points))
    cols = ["panel", "phase", "model", "gpu", "tp", "kind", "split", "x", "prompt_size", "batch_size",
            "context_tokens", "time_ms", "reps"]
    data = pd.concat(parts, ignore_index=True)[cols]
    for col in ("prompt_size", "batch_size", "context_tokens", "x", "time_ms"):
        data[col] = data[col].astype(float)
    data["tp"] = data.tp.astype(int)
    return data


def _model_curve(perf: LatencyModel, panel: str, model: str, gpu: str, tp: int, g: pd.DataFrame,
                 grid_points: int) -> pd.DataFrame:
    """The model's curve of one panel over the x range of its measured points `g`."""
    phase, xcol, _ = PANELS[panel]
    lo, hi = g.x.min(), g.x.max()
    x = np.unique(np.geomspace(lo, hi, grid_points)) if hi > lo else np.array([lo])
    if xcol == "batch_size":
        x = np.unique(np.concatenate([np.unique(np.round(x)), g.x.unique()]))
    n = len(x)
    if panel == "prefill_vs_prompt":
        s, b, ctx = x, np.ones(n), np.full(n, np.nan)
        t = perf.prefill_time_s(model, gpu, tp, s, b)
    elif panel == "prefill_vs_batch":
        s, b, ctx = np.full(n, float(PLOT_PROMPT_SIZE)), x, np.full(n, np.nan)
        t = perf.prefill_time_s(model, gpu, tp, s, b)
    elif panel == "decode_vs_batch":
        ctx = np.full(n, float(g.context_tokens.iloc[0]))
        s, b = np.full(n, float(PLOT_PROMPT_SIZE)), x
        t = perf.decode_time_s(model, gpu, tp, b, ctx)
    else:
        s, b, ctx = np.full(n, np.nan), np.ones(n), x
        t = perf.decode_time_s(model, gpu, tp, b, ctx)
    return pd.DataFrame(dict(panel=panel, phase=phase, model=model, gpu=gpu, tp=tp, kind="model", split="", x=x,
                             prompt_size=s, batch_size=b, context_tokens=ctx, time_ms=1e3 * t, reps=0))


def perf_figure(data: pd.DataFrame, gpus=PLOT_GPUS):
    """A plotly figure of `perf_plot_data`: one row per panel, one column per GPU."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    gpus = [g for g in gpus if g in set(data.gpu)] or sorted(data.gpu.unique())
    panels = [p for p in PANELS if p in set(data.panel)]
    titles = [f"{PANELS[p][2]} — {g}" for p in panels for g in gpus]
    fig = make_subplots(rows=len(panels), cols=len(gpus), subplot_titles=titles,
                        horizontal_spacing=0.08, vertical_spacing=0.06)
    colors = {1: "#7f7f7f", 2: "#1f77b4", 4: "#ff7f0e", 8: "#2ca02c"}
    symbols = {"train": "circle", "held-out": "diamond-open", "excluded": "x"}
    models = sorted(data.model.unique())
    shown = set()
    for i, panel in enumerate(panels, start=1):
        phase, xcol, _ = PANELS[panel]
        for j, gpu in enumerate(gpus, start=1):
            d = data[(data.panel == panel) & (data.gpu == gpu)]
            for (model, tp), g in d.groupby(["model", "tp"]):
                label = f"TP {tp}" + (f" {model}" if len(models) > 1 else "")
                color = colors.get(tp, None)
                line = g[g.kind == "model"].sort_values("x")
                key = (label, "model")
                fig.add_trace(go.Scatter(
                    x=line.x, y=line.time_ms, mode="lines", line=dict(color=color),
                    name=f"{label} model", legendgroup=label, showlegend=key not in shown,
                    hovertemplate=f"{label} model<br>{xcol}=%{{x:.0f}}<br>%{{y:.1f}} ms<extra></extra>"),
                    row=i, col=j)
                shown.add(key)
                for split, pts in g[g.kind == "measured"].groupby("split"):
                    key = (label, split)
                    fig.add_trace(go.Scatter(
                        x=pts.x, y=pts.time_ms, mode="markers",
                        marker=dict(color=color, symbol=symbols.get(split, "circle"), size=8,
                                    line=dict(width=1.5, color=color)),
                        name=f"{label} measured ({split})", legendgroup=label, showlegend=key not in shown,
                        hovertemplate=(f"{label} measured, {split}<br>{xcol}=%{{x:.0f}}<br>"
                                       f"median %{{y:.1f}} ms<extra></extra>")),
                        row=i, col=j)
                    shown.add(key)
            fig.update_xaxes(type="log", title_text=xcol.replace("_", " "), row=i, col=j)
            fig.update_yaxes(title_text=f"{'prompt' if phase == 'prompt_time' else 'decode iteration'} time (ms)",
                             row=i, col=j)
    fig.update_layout(
        height=380 * len(panels), width=1200,
        title=("Latency model vs measured medians (markers: filled = fitted on, open diamond = held out, "
               "x = excluded artifact; lines: model)"),
        legend=dict(groupclick="toggleitem"))
    return fig


def profile_curves(data: pd.DataFrame, perf) -> pd.DataFrame:
    """`data` (from `perf_plot_data`) with the model rows' `time_ms` recomputed by `perf`
    (a `ProfileLatencyModel`): that model drawn against the measurements it interpolates.
    The measured rows and the curves' points stay as they are."""
    out = data.copy()
    model_rows = out.kind == "model"
    for (panel, model, gpu, tp), g in out[model_rows].groupby(["panel", "model", "gpu", "tp"]):
        if panel.startswith("prefill"):
            t = perf.prefill_time_s(model, gpu, tp, g.prompt_size.to_numpy(), g.batch_size.to_numpy())
        else:
            t = perf.decode_time_s(model, gpu, tp, g.batch_size.to_numpy(), g.context_tokens.to_numpy())
        out.loc[g.index, "time_ms"] = 1e3 * np.asarray(t, dtype=float)
    return out
