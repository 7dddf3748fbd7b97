"""Two processes sharing one GPU under NVIDIA MPS (Splitwiser): each iteration's time from
the roofline of what runs concurrently, not from a fixed slow-down factor.

An iteration's roofline time is T = max(C, M) + O (`_scalar.roofline_terms_s`): compute C, HBM traffic
M, and the rest O (all-reduces over the links, kernel-launch and per-sequence
overheads, which neither SMs nor HBM bandwidth shorten). Alone, its HBM demand is
u = M / T (a fraction of the peak bandwidth, averaged over the iteration).

While a sibling process runs too, a process with MPS active-thread share f (the sibling
gets 1 - f) takes

    T' = max(C / f + O,  T x max(1, u + u_sibling))

- SMs are split by the MPS share, so compute stretches by 1 / f;
- bandwidth is split in proportion to demand once the two demands exceed the peak
  (u + u_sibling > 1), which stretches the whole iteration by that sum; below the peak
  both get what they ask for.
Alone (no sibling) T' = T: one request alone takes exactly a plain machine's time.

`iteration_parts` splits an iteration into (T, C, u, O); with a measured-profile vector
(longer than `N_COEF`) the roofline's parts are scaled to the measured time, so the
shares of compute, memory and the rest stay the roofline's. Plain Python scalars: the
discrete-event engine calls them as is, the fluid kernel compiles them (`jit_contention`).
"""

from __future__ import annotations

from ._profile_eval import profile_iteration_s
from ._roofline import N_COEF
from ._scalar import roofline_terms_s


def iteration_parts(c, n_p, sq, seqs, b, ctx):
    """(T, compute_s, hbm_demand, rest_s) of one iteration alone on its GPUs: T is exactly
    `scalar_iteration_s` (the measured profile where it covers the iteration)."""
    compute, memory, allreduce, overhead = roofline_terms_s(c, n_p, sq, seqs, b, ctx)
    t = (memory if memory > compute else compute) + allreduce + overhead
    rest = allreduce + overhead
    if len(c) > N_COEF:   # len: the discrete-event engine passes a tuple
        measured = profile_iteration_s(c, n_p, sq, seqs, b, ctx)
        if measured > 0.0:
            scale = measured / t
            return measured, compute * scale, memory / t, rest * scale
    return t, compute, memory / t, rest


def shared_iteration_s(solo_s, compute_s, hbm_demand, rest_s, sibling_hbm_demand, sm_share):
    """Time of an iteration (parts from `iteration_parts`) while the sibling process runs
    an iteration of HBM demand `sibling_hbm_demand`, with `sm_share` of the SMs."""
    return max(compute_s / sm_share + rest_s, solo_s * max(1.0, hbm_demand + sibling_hbm_demand))


def jit_contention():
    """(iteration_parts, shared_iteration_s), callable from numba-compiled code."""
    from numba.extending import register_jitable

    from ._scalar import jit_scalar_iteration
    jit_scalar_iteration()
    for fn in (iteration_parts, shared_iteration_s):
        register_jitable(fn)
    return iteration_parts, shared_iteration_s
