"""Prefill and decode-iteration times of configuration points (`provision perf predict`)."""

from __future__ import annotations

import pandas as pd

from ._model import LatencyModel
from .errors import PerfModelError

PREDICTED_COLUMNS = ("prompt_time_ms", "token_time_ms")
_POINT_COLUMNS = ("model", "gpu", "tensor_parallel", "prompt_size", "batch_size", "power_cap")


def predict_points(points: pd.DataFrame, perf: LatencyModel | None = None) -> pd.DataFrame:
    """Prefill and decode-iteration times (ms) of configuration points.

    Parameters
    ----------
    points : DataFrame with columns model, gpu (a catalog GPU name), tensor_parallel,
        prompt_size, batch_size, power_cap (fraction of TDP); shape (n,) each.
    perf : the latency model (default: the shipped calibration).

    Returns
    -------
    DataFrame indexed like `points` with prompt_time_ms (one prefill pass over
    batch_size prompts of prompt_size tokens) and token_time_ms (one decode iteration of
    batch_size requests with prompt_size tokens of context each). One model call per
    (model, gpu) group.
    """
    if not isinstance(points, pd.DataFrame):
        raise PerfModelError(f"points must be a pandas DataFrame with columns {', '.join(_POINT_COLUMNS)} "
                             f"(got {type(points).__name__})")
    missing = [c for c in _POINT_COLUMNS if c not in points.columns]
    if missing:   # was an AttributeError or an unpacking ValueError
        hint = " (the CLI's 'hardware' column is 'gpu' here)" if "gpu" in missing and "hardware" in points else ""
        raise PerfModelError(f"points lacks column{'s' * (len(missing) > 1)} {', '.join(missing)}{hint}; "
                             f"give {', '.join(_POINT_COLUMNS)}")
    perf = perf if perf is not None else LatencyModel()
    out = pd.DataFrame(index=points.index, columns=list(PREDICTED_COLUMNS), dtype=float)
    for (model, gpu), g in points.groupby(["model", "gpu"], sort=False):
        tp = g.tensor_parallel.to_numpy(float)
        s = g.prompt_size.to_numpy(float)
        b = g.batch_size.to_numpy(float)
        cap = g.power_cap.to_numpy(float)
        out.loc[g.index, "prompt_time_ms"] = 1e3 * perf.prefill_time_s(model, gpu, tp, s, b, cap)
        out.loc[g.index, "token_time_ms"] = 1e3 * perf.decode_time_s(model, gpu, tp, b, s, cap)
    return out
