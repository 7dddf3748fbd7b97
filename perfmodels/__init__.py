"""Per-phase latency models of LLM inference, from the roofline plus a few fitted constants.

Public surface:

- `LatencyModel`: prefill, decode-iteration and mixed-iteration times of any catalog
  model on any catalog GPU, tensor-parallel degree and power cap (numpy-vectorized).
- `calibrate`: fits the constants on measured profiles; `load_calibration` /
  `dump_calibration` read and write them (a small TOML file with provenance);
  `merge_calibration` keeps the GPUs a new fit lacks; `calibration_artifacts` marks the
  profile rows left out of every fit; `fit_roofline` (a `RooflineFit`) is the roofline with
  the constants of each GPU a profile measures at `MIN_FIT_POINTS` points or more fitted on it.
- `TP_DEGREES` (1, 2, 4, 8) and `machine_tp_degrees` (those dividing a machine's GPU count).
- `predict_points`: prefill and decode-iteration times of a table of configuration points.
- memory: `kv_cache_bytes`, `kv_capacity_tokens`, `colocated_kv_capacity_tokens`,
  `max_decode_batch`, `weight_bytes_per_gpu`.
- one iteration in plain scalars, the rule both simulator engines run:
  `scalar_iteration_s` (roofline or measured profile) and `roofline_terms_s` (its
  compute, memory, all-reduce and overhead terms); `jit_scalar_iteration` registers them
  with numba for the fluid kernel.
- GPU sharing (Splitwiser, MPS): `iteration_parts`, `shared_iteration_s` (plain Python;
  `jit_contention` registers them with numba for the fluid kernel).
- KV transfer: `kv_transfer_time_s`, `kv_wire_bytes_per_s`.
- power: `clock_fraction`, `MIN_POWER_CAP` (the lowest cap that leaves a clock to run at).
- measured profiles: `load_profile_model` / `ProfileLatencyModel` (a `LatencyModel` that
  interpolates measured times, roofline where unmeasured), `read_profile(path, catalog,
  where=None)` (the one reader and checker of a profile CSV; `Profile.frame()` gives the
  rows `calibrate` fits), `INTERPS`;
  `profile_iteration_s` (the table lookup both engines share) and `jit_profile_lookup`
  (the same, registered with numba by the fluid kernel: `import perfmodels` stays
  numba-free).
"""

from ._calibrate import (ARTIFACT_REASON, ARTIFACT_RULE, POINT_COLUMNS, REQUIRED_COLUMNS as PROFILE_COLUMNS,
                         MIN_FIT_POINTS, POOR_FIT_MAPE_PCT, CalibrationReport, RooflineFit, calibrate, calibration_artifacts, fit_roofline,
                         holdout_mask, shipped_profile)
from ._constants import (DEFAULT_CALIBRATION_PATH, Calibration, GpuConstants, dump_calibration, load_calibration,
                         merge_calibration)
from ._kv_transfer import LAYERWISE_MIN_PROMPT_TOKENS, kv_transfer_time_s, kv_wire_bytes_per_s
from ._contention import iteration_parts, jit_contention, shared_iteration_s
from ._memory import (HBM_UTILIZATION, colocated_kv_capacity_tokens, fits_in_memory, kv_cache_bytes, kv_capacity_tokens,
                      max_decode_batch, weight_bytes_per_gpu)
from ._model import TP_DEGREES, LatencyModel, machine_tp_degrees
from ._power import MIN_POWER_CAP, clock_fraction
from ._profile import INTERPS, MAX_MEASURED, Profile, read_profile
from ._profile_eval import jit_profile_lookup, profile_iteration_s
from ._profile_model import ProfileLatencyModel, load_profile_model
from ._predict import PREDICTED_COLUMNS, predict_points
from ._scalar import jit_scalar_iteration, roofline_terms_s, scalar_iteration_s
from ._roofline import (COEF_NAMES, N_COEF, HardwareArrays, ModelShape, decode_token_s, iteration_time_s,
                        prompt_compute_s, roofline_coefficients, time_from_coefficients)
from .errors import PerfModelError

__all__ = [
    "LatencyModel", "Calibration", "GpuConstants", "CalibrationReport", "calibrate", "fit_roofline", "RooflineFit", "MIN_FIT_POINTS", "POOR_FIT_MAPE_PCT",
    "shipped_profile", "load_calibration", "dump_calibration", "merge_calibration", "DEFAULT_CALIBRATION_PATH", "calibration_artifacts",
    "holdout_mask", "ARTIFACT_RULE", "ARTIFACT_REASON", "POINT_COLUMNS", "PROFILE_COLUMNS", "TP_DEGREES",
    "machine_tp_degrees",
    "predict_points", "PREDICTED_COLUMNS", "MAX_MEASURED",
    "kv_cache_bytes", "kv_capacity_tokens", "colocated_kv_capacity_tokens",
    "scalar_iteration_s", "roofline_terms_s", "jit_scalar_iteration",
    "iteration_parts", "shared_iteration_s", "jit_contention", "max_decode_batch", "weight_bytes_per_gpu",
    "fits_in_memory", "HBM_UTILIZATION", "kv_transfer_time_s", "kv_wire_bytes_per_s",
    "LAYERWISE_MIN_PROMPT_TOKENS", "clock_fraction", "MIN_POWER_CAP", "HardwareArrays", "ModelShape",
    "iteration_time_s", "PerfModelError", "COEF_NAMES", "N_COEF",
    "roofline_coefficients", "time_from_coefficients", "prompt_compute_s", "decode_token_s",
    "ProfileLatencyModel", "load_profile_model", "read_profile", "Profile", "INTERPS", "profile_iteration_s", "jit_profile_lookup",
]
