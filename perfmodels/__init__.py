"""Per-phase latency models of LLM inference, from the roofline plus a few fitted constants.

Public surface:

- `LatencyModel`: prefill, decode-iteration and mixed-iteration times of any catalog
  model on any catalog GPU, tensor-parallel degree and power cap (numpy-vectorized).
- `calibrate`: fits the constants on measured profiles; `load_calibration` /
  `dump_calibration` read and write them (a small TOML file with provenance).
- memory: `kv_cache_bytes`, `kv_capacity_tokens`, `max_decode_batch`, `weight_bytes_per_gpu`.
- KV transfer: `kv_transfer_time_s`, `kv_wire_bytes_per_s`.
- power: `clock_fraction`.
- measured profiles: `load_profile_model` / `ProfileLatencyModel` (a `LatencyModel` that
  interpolates measured times, roofline where unmeasured), `read_profile`.
"""

from ._calibrate import CalibrationReport, calibrate, shipped_profile
from ._constants import Calibration, GpuConstants, dump_calibration, load_calibration
from ._kv_transfer import LAYERWISE_MIN_PROMPT_TOKENS, kv_transfer_time_s, kv_wire_bytes_per_s
from ._memory import (HBM_UTILIZATION, fits_in_memory, kv_cache_bytes, kv_capacity_tokens,
                      max_decode_batch, weight_bytes_per_gpu)
from ._model import LatencyModel
from ._power import clock_fraction
from ._profile import INTERPS, Profile, read_profile
from ._profile_eval import profile_iteration_s
from ._profile_model import ProfileLatencyModel, load_profile_model
from ._roofline import (COEF_NAMES, N_COEF, HardwareArrays, ModelShape, iteration_time_s,
                        roofline_coefficients, time_from_coefficients)
from .errors import PerfModelError

__all__ = [
    "LatencyModel", "Calibration", "GpuConstants", "CalibrationReport", "calibrate",
    "shipped_profile", "load_calibration", "dump_calibration",
    "kv_cache_bytes", "kv_capacity_tokens", "max_decode_batch", "weight_bytes_per_gpu",
    "fits_in_memory", "HBM_UTILIZATION", "kv_transfer_time_s", "kv_wire_bytes_per_s",
    "LAYERWISE_MIN_PROMPT_TOKENS", "clock_fraction", "HardwareArrays", "ModelShape",
    "iteration_time_s", "PerfModelError", "COEF_NAMES", "N_COEF",
    "roofline_coefficients", "time_from_coefficients",
    "ProfileLatencyModel", "load_profile_model", "read_profile", "Profile", "INTERPS", "profile_iteration_s",
]
