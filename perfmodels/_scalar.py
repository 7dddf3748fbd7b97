"""One forward pass's time in plain Python scalars: the rule both simulator engines run.

`time_from_coefficients` (`_roofline.py`) is the vector form, over arrays of designs; this
is the same formula for one iteration, the same operations in the same order, for the
engines' event loops. The discrete-event engine calls it as Python, the fluid kernel
compiles it (`jit_scalar_iteration`), and `iteration_parts` (GPU sharing) splits an
iteration into its terms from it, so there is one scalar copy of the roofline.

numba's cache does not track functions compiled in from another file: the fluid kernel's
cache directory is keyed by this file's digest too (`provisioner/sim/_jit.py`).
"""

from __future__ import annotations

from ._profile_eval import profile_iteration_s
from ._roofline import N_COEF


def roofline_terms_s(c, n_p, sq, seqs, b, ctx):
    """(compute_s, memory_s, allreduce_s, overhead_s) of one pass with `n_p` prompt tokens
    (`sq` the sum of their squares per prompt, `seqs` prompts) and `b` decodes over `ctx`
    context tokens, from the coefficients `c` (layout `COEF_NAMES`). Its time is
    max(compute_s, memory_s) + allreduce_s + overhead_s. `min`/`max` are spelled out as
    conditional expressions (same operands, same result): faster in Python."""
    tokens = n_p + b
    compute = c[0] * tokens + c[1] * (seqs + b) + c[2] * sq + c[3] * ctx
    memory = c[4] + c[5] * (ctx + tokens)
    knee = c[8]
    over_knee = tokens - knee
    allreduce = c[6] + c[7] * (knee if knee < tokens else tokens) + c[9] * (over_knee if over_knee >= 0.0 else 0.0)
    fixed_p = c[10] if seqs > 0 else 0.0
    fixed_d = c[11] if b > 0 else 0.0
    overhead = (fixed_d if fixed_d > fixed_p else fixed_p) + c[12] * seqs + c[13] * b
    return compute, memory, allreduce, overhead


def scalar_iteration_s(c, n_p, sq, seqs, b, ctx):
    """Time (s) of one iteration: `time_from_coefficients` for one pass. A vector longer
    than `N_COEF` carries a measured-profile table, looked up first (the roofline where
    the table does not cover the iteration)."""
    if len(c) > N_COEF:
        measured = profile_iteration_s(c, n_p, sq, seqs, b, ctx)
        if measured > 0.0:
            return measured
    compute, memory, allreduce, overhead = roofline_terms_s(c, n_p, sq, seqs, b, ctx)
    return (memory if memory > compute else compute) + allreduce + overhead


def jit_scalar_iteration():
    """`scalar_iteration_s`, callable from numba-compiled code (registered only here, on
    the fluid kernel's import, so that `import perfmodels` never imports numba)."""
    from numba.extending import register_jitable

    from ._profile_eval import jit_profile_lookup
    jit_profile_lookup()
    for fn in (roofline_terms_s, scalar_iteration_s):
        register_jitable(fn)
    return scalar_iteration_s
