"""`provision perf plot --latency-interp`: the measured-profile model's curves.

The measured points and the curve points of `perf_plot_data` stay; only the curves'
times are recomputed with `ProfileLatencyModel`, so the figure shows that model against
the measurements it interpolates (and, where it falls back, the roofline).
"""

from __future__ import annotations

import numpy as np
import pandas as pd


def profile_curves(data: pd.DataFrame, perf) -> pd.DataFrame:
    """`data` (from `perf_plot_data`) with the model rows' `time_ms` from `perf`."""
    out = data.copy()
    model_rows = out.kind == "model"
    for (panel, model, gpu, tp), g in out[model_rows].groupby(["panel", "model", "gpu", "tp"]):
        if panel.startswith("prefill"):
            t = perf.prefill_time_s(model, gpu, tp, g.prompt_size.to_numpy(), g.batch_size.to_numpy())
        else:
            t = perf.decode_time_s(model, gpu, tp, g.batch_size.to_numpy(), g.context_tokens.to_numpy())
        out.loc[g.index, "time_ms"] = 1e3 * np.asarray(t, dtype=float)
    return out

