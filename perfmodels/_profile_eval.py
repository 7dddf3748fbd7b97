"""Iteration time from a measured-profile coefficient vector: the one scalar rule.

A profile model's coefficient vector is the roofline's `N_COEF` coefficients (the
fallback) followed by a table (layout below, written by `_profile.pack_table`). Both
simulator engines call `profile_iteration_s` (the fluid engine compiles it with numba,
the discrete-event engine runs it as Python), and `ProfileLatencyModel` loops it over
arrays, so all three agree to the last bit. It returns -1.0 where the table does not
cover the iteration (or gives under `MIN_TIME_MS`); the caller then uses the roofline
coefficients.

Layout after the roofline coefficients (offset `N_COEF`):
    [kind, prefill_scale, decode_scale, na, nb, data...]
- kind 1 (`grid`): data = prompt axis (na), batch axis (nb), prefill ms (na x nb,
  row-major by prompt), decode ms (na x nb); NaN marks an unmeasured cell.
- kind 2 (`splitwisesim`): data = prefill knots x (na), y (na), decode knots x (nb), y (nb),
  in batch tokens and ms; linear between knots and extrapolated beyond, as
  SplitwiseSim's `interp1d(fill_value="extrapolate")`.
- kind 0: no table for this pool (the roofline is used).
The scales carry a power cap (the profiles are measured uncapped): the roofline's
capped/uncapped time ratio of each phase.

The functions are plain Python; `jit_profile_lookup` registers them with numba when the
fluid kernel is imported, so they are compiled into the caller there. numba's cache
does not track that dependency: the kernel cache directory is keyed by this file's
digest too (`provisioner/sim/_jit.py`).
"""

from __future__ import annotations

import math

from ._roofline import N_COEF

KIND_NONE, KIND_GRID, KIND_SPLITWISESIM = 0, 1, 2
HEADER = 5
# SplitwiseSim costs an iteration mixing prompts and decodes as the prefill of all its
# tokens times this factor (performance_model.py, get_iteration_duration).
SPLITWISESIM_MIXED_FACTOR = 1.1
# The shortest time (ms) a profile may give a pass: no GPU pass takes under a microsecond (a kernel
# launch alone takes several), and the simulators' clocks, in seconds since the trace began, stop
# advancing on steps much shorter (1e-12 ms hung the fluid engine, past Ctrl-C and SIGTERM). The
# reader refuses measurements under it, `ProfileLatencyModel.fit` a table whose interpolation gives
# one at the smallest sizes, and a lookup under it (an extrapolation beyond the largest knot that
# falls through zero) is not covered: the roofline is used.
MIN_TIME_MS = 1e-3


def _bracket(c, lo, n, x):
    """Index i of axis c[lo:lo+n] with axis[i] <= x <= axis[i+1] (0 for a one-point axis
    equal to x), or -1 when x is outside the axis."""
    if x < c[lo] or x > c[lo + n - 1]:
        return -1
    i = 0
    while i < n - 2 and c[lo + i + 1] < x:
        i += 1
    return i


def _frac(c, lo, n, i, x):
    if n == 1:
        return 0.0
    return (x - c[lo + i]) / (c[lo + i + 1] - c[lo + i])


def _bilinear(c, pa, na, ba, nb, vals, x, y):
    """Bilinear interpolation of the na x nb table at c[vals] over axes c[pa], c[ba];
    -1.0 outside the axes or next to an unmeasured (NaN) cell."""
    i = _bracket(c, pa, na, x)
    j = _bracket(c, ba, nb, y)
    if i < 0 or j < 0:
        return -1.0
    fx = _frac(c, pa, na, i, x)
    fy = _frac(c, ba, nb, j, y)
    i1 = i + 1 if na > 1 else i
    j1 = j + 1 if nb > 1 else j
    v00 = c[vals + i * nb + j]
    v01 = c[vals + i * nb + j1]
    v10 = c[vals + i1 * nb + j]
    v11 = c[vals + i1 * nb + j1]
    v = (v00 * (1.0 - fx) * (1.0 - fy) + v01 * (1.0 - fx) * fy
         + v10 * fx * (1.0 - fy) + v11 * fx * fy)
    if math.isnan(v):
        return -1.0
    return v


def _lerp_extrapolate(c, xs, ys, n, x):
    """Piecewise-linear y(x) through n knots, extended linearly beyond both ends."""
    i = 0
    while i < n - 2 and c[xs + i + 1] < x:
        i += 1
    x0 = c[xs + i]
    y0 = c[ys + i]
    return y0 + (c[ys + i + 1] - y0) * (x - x0) / (c[xs + i + 1] - x0)


def profile_iteration_s(c, prefill_tokens, prefill_sq_tokens, prefill_seqs, decode_batch, decode_context_tokens):
    """Time (s) of one forward pass from a profile vector, or -1.0 (use the roofline).

    grid: a prefill of k prompts is looked up at (mean prompt tokens, k); a decode of b
    requests at (mean context, b); a mixed pass costs the larger of its prefill (decode
    tokens counted as extra prompt tokens) and its decode. splitwisesim: SplitwiseSim's
    rule (module docstring). `prefill_sq_tokens` is unused: the table holds attention.
    """
    o = N_COEF
    kind = c[o]
    if kind == KIND_NONE:
        return -1.0
    prefill_scale = c[o + 1]
    decode_scale = c[o + 2]
    na = int(c[o + 3])
    nb = int(c[o + 4])
    data = o + HEADER
    if kind == KIND_GRID:
        pa = data
        ba = pa + na
        pv = ba + nb
        dv = pv + na * nb
        t_ms = 0.0
        if prefill_seqs > 0:
            t_ms = _bilinear(c, pa, na, ba, nb, pv, (prefill_tokens + decode_batch) / prefill_seqs, prefill_seqs)
            if t_ms < 0:
                return -1.0
            t_ms *= prefill_scale
        if decode_batch > 0:
            d_ms = _bilinear(c, pa, na, ba, nb, dv, decode_context_tokens / decode_batch, decode_batch)
            if d_ms < 0:
                return -1.0
            d_ms *= decode_scale
            t_ms = t_ms if t_ms >= d_ms else d_ms
    else:
        px = data
        py = px + na
        dx = py + na
        dy = dx + nb
        if prefill_seqs > 0 and decode_batch > 0:
            t_ms = (_lerp_extrapolate(c, px, py, na, prefill_tokens + decode_batch)
                    * SPLITWISESIM_MIXED_FACTOR * prefill_scale)
        elif prefill_seqs > 0:
            t_ms = _lerp_extrapolate(c, px, py, na, prefill_tokens) * prefill_scale
        else:
            t_ms = _lerp_extrapolate(c, dx, dy, nb, decode_batch) * decode_scale
    if t_ms < MIN_TIME_MS:
        return -1.0
    return t_ms * 1e-3


def jit_profile_lookup():
    """`profile_iteration_s`, made callable from numba-compiled code (the fluid kernel).

    The helpers are registered with numba only here, on the kernel's import, so that
    `import perfmodels` (and every command that does not simulate) never imports numba.
    `register_jitable` returns each function unchanged, so Python callers (the DES, the
    model's own predictions) run the same code.
    """
    from numba.extending import register_jitable

    for fn in (_bracket, _frac, _bilinear, _lerp_extrapolate, profile_iteration_s):
        register_jitable(fn)
    return profile_iteration_s
