"""How a GPU power cap slows each part of an iteration.

A cap lowers the core clock; HBM bandwidth and host-side overheads do not depend on
the core clock. Dynamic power goes roughly as f * V^2 with V proportional to f, so
P(f) = P_static + (P_tdp - P_static) * (f / f_max)^3. Inverting it at P = cap * P_tdp
gives the clock fraction. The static share is set from Splitwise Fig. 9 (Insight VI):
an H100 prompt takes ~2x as long at 250 W as at 700 W, i.e. f(250/700) = 0.5, which
gives P_static / P_tdp = (c - 0.125) / 0.875 with c = 250/700, about 0.265.
At a 50% cap this gives f = 0.68, compute 1.46x slower; with communication and
overheads unaffected, a prefill slows ~1.3x, as SplitwiseSim assumes for its Hcap.
"""

from __future__ import annotations

import numpy as np

from .errors import PerfModelError

STATIC_POWER_FRACTION = (250.0 / 700.0 - 0.125) / 0.875
MIN_CLOCK_FRACTION = 0.2  # below this the GPU would not run a kernel at all
# The lowest cap the model represents: the static power plus the dynamic power of the
# minimum clock. Below it the clock would be clamped (every lower cap the same speed), so
# `clock_fraction`, and the designs and `provision perf predict` before it, refuse it.
MIN_POWER_CAP = STATIC_POWER_FRACTION + (1.0 - STATIC_POWER_FRACTION) * MIN_CLOCK_FRACTION ** 3


def clock_fraction(power_cap) -> np.ndarray:
    """Core clock as a fraction of its maximum under a power cap (fraction of TDP).

    Parameters
    ----------
    power_cap : array_like, in [MIN_POWER_CAP, 1] (~0.271)
    """
    cap = np.asarray(power_cap, dtype=float)
    bad = cap[~((cap >= MIN_POWER_CAP) & (cap <= 1))]   # NaN included
    if bad.size:
        raise PerfModelError(f"power_cap must be a fraction of rated power in [{MIN_POWER_CAP:.3f}, 1], e.g. 0.5 "
                             f"(got {bad.flat[0]:g}); below {MIN_POWER_CAP:.3f} the GPU's static power leaves no "
                             f"clock to run at")
    dynamic = np.clip((cap - STATIC_POWER_FRACTION) / (1.0 - STATIC_POWER_FRACTION), 0.0, 1.0)
    return np.maximum(np.cbrt(dynamic), MIN_CLOCK_FRACTION)   # the maximum: rounding at MIN_POWER_CAP
