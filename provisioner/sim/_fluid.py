"""Fluid engine: the SEMANTICS.md rules with decode progress as a continuous flow.

Per machine, decode progress is one number: `I`, the cumulative count of decode
iterations the machine has run. Every running request advances with `I`, so a request
that joined at `I_j` finishes when `I` reaches `I_j + n - 1` — a min-heap of these
targets per machine replaces per-request, per-iteration bookkeeping, and the context
sum of the batch is `sum(s) + b * I - sum(I_j)` in O(1).

Between events (a request finishing, a decode or prompt arriving), a machine running
only decodes advances `I` at the rate 1 / t_iter(b, context), with the context taken
at the start of the stretch: that is the fluid approximation (the discrete-event
engine steps every iteration with the exact context). Joins and prefills still happen
on iteration boundaries (integer `I`), prefill batches are discrete iterations with
the running decodes riding along, and routing reads the fractional progress.

Splitwiser (co-located prefill and decode processes, SEMANTICS.md "Splitwiser"): a
prefill iteration is timed exactly, re-timed (remaining fraction x new time) whenever its
sibling decode server's rate changes. The decode server's rate is only re-computed at an
iteration boundary, the first one after its sibling started or ended a prefill (the
fluid steps decode on whole iterations): until then the decode stretch keeps the rate it
had, where the discrete-event engine re-times the decode iteration in flight at once.

A machine is only advanced when its next event is due (`next_event_s`), so an
arrival costs O(machines) comparisons, not O(machines) simulations. Numba compiles
the loop; designs run in parallel (threads over a `nogil` kernel), each with its own
state tables.
"""

from __future__ import annotations

import math
import sys
import threading
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait

import numpy as np
import numba
from numba import njit
from numba.extending import register_jitable

from perfmodels import jit_contention, jit_scalar_iteration

from . import _jit  # noqa: F401  (before any @njit: the kernel cache lives outside the package)
from ..errors import ProvisionerError
from ..workers import signals_held
from ._des_scalar import kv_link_fifo_s, kv_visible_s
from ._inputs import EngineOutput, SimInputs, check_arrival_range
from ._windows import server_windows

iter_time = jit_scalar_iteration()   # perfmodels' scalar iteration time (roofline or measured), compiled in
iteration_parts, shared_iteration_s = jit_contention()   # Splitwiser's GPU-sharing rule
# the DES's KV-transfer rules compiled in (one rule for both engines)
register_jitable(kv_visible_s)
register_jitable(kv_link_fifo_s)

# Per-design statistics columns.
ST_BUSY0, ST_BUSY1, ST_DBT0, ST_DBT1, ST_DT0, ST_DT1, ST_BORROW_D, ST_BORROW_P, ST_KV_SUM, ST_KV_N, ST_LATE_TTFT, \
    ST_LATE_TBT, ST_LATE_E2E, ST_ABORTED, ST_LAST_FINISH, ST_STALLED, ST_STALL_AT_S, ST_STALL_ITER_S = range(18)
N_STATS = 18   # ST_STALLED: 1 when the clock stopped (`_run_until`), at ST_STALL_AT_S, on an iteration of ST_STALL_ITER_S
# Float state per machine.
F_NOW, F_ITER, F_RATE, F_END, F_LEN, F_SUM_S, F_SUM_JOIN, F_KV_USED, F_RESERVED, F_PEND_P, \
    F_DEC_ASSIGNED, F_BATCH_TOK, F_INV_LEN, F_HEAD_DONE, F_REAL_START, F_SOLO, F_COMPUTE, F_HBM, F_REST, \
    F_STALE_AT = range(20)
N_F = 20   # F_HEAD_DONE: prompt tokens of the prompt-queue head already prefilled (chunked prefill)
# Splitwiser: F_REAL_START the real start of the prefill in flight; F_SOLO, F_COMPUTE, F_HBM,
# F_REST the current iteration alone (perfmodels.iteration_parts); F_STALE_AT when the
# sibling prefill server changed state since this decode server's rate was set (INF: not).
# Integer state per machine.
I_POOL, I_PREFILL, I_BATCH, I_QHEAD, I_QTAIL, I_RUN, I_FIN, I_WAIT, I_LENT, I_ROW = range(10)
N_I = 10   # I_ROW: the machine's row of `coef` and `kv_cap`: its pool, or itself in a cloud plan
EPS = 1e-9
INF = np.inf
_BLOCK_SHIFT = 3   # machines per block of the earliest-event index: 8
_INTERLEAVE = 16   # stride of the design interleaving that balances the threads' blocks
# Events one instant can hold in a run whose clock advances: each machine ends an iteration
# and starts the next, and each request arrives, joins a queue or is admitted there, a few
# times over at most. Past this many in a row at one time the clock has stopped (an
# iteration shorter than half its spacing: 1e-18 s at t = 100 s, where doubles are 1.4e-14
# apart), and the design would loop for ever: `_run_until` ends it instead (within two
# such spans of events).
STALL_EVENTS_PER_ITEM = 4
STALL_EVENTS_MIN = 1024
# How often a long stretch of events reads the stop flag `_run_batch` sets on Ctrl-C (a power
# of 2): 4,096 events take a few milliseconds; the flag is also read at every arrival.
STOP_CHECK_EVENTS = 4096
# Below this many (design, request) pairs a batch on one thread runs in the calling thread:
# ~0.1 s at the kernel's ~0.5 us per pair (Fig. 12 space: 13.4M pairs in 6.5 s of CPU), so
# Ctrl-C waits that long at most, where a worker thread would add 0.1-1 ms to every call
# (a one-design call takes 0.25 ms on 50 requests).
INLINE_DESIGN_REQUESTS = 200_000


@njit(cache=True, forceinline=True, _nrt=False)
def _fmax(a, b):
    """max of two floats, inlined: numba's builtin max is an out-of-line call, which cost
    about 10% of the kernel in the routing scans (perf, 2026-11-22)."""
    return a if a >= b else b


@njit(cache=True, forceinline=True, _nrt=False)
def _fmin(a, b):
    return a if a <= b else b


# ---------------------------------------------------------------- binary heaps (one row per machine)
@njit(cache=True, forceinline=True, _nrt=False)
def _push(keys, vals, st, col, m, key, val):
    i = st[m, col]
    st[m, col] = i + 1
    while i > 0:
        parent = (i - 1) >> 1
        if keys[m, parent] <= key:
            break
        keys[m, i] = keys[m, parent]
        vals[m, i] = vals[m, parent]
        i = parent
    keys[m, i] = key
    vals[m, i] = val


@njit(cache=True, forceinline=True, _nrt=False)
def _pop(keys, vals, st, col, m):
    top = vals[m, 0]
    n = st[m, col] - 1
    st[m, col] = n
    if n > 0:
        key = keys[m, n]
        val = vals[m, n]
        i = 0
        while True:
            child = 2 * i + 1
            if child >= n:
                break
            if child + 1 < n and keys[m, child + 1] < keys[m, child]:
                child += 1
            if keys[m, child] >= key:
                break
            keys[m, i] = keys[m, child]
            vals[m, i] = vals[m, child]
            i = child
        keys[m, i] = key
        vals[m, i] = val
    return top


# ---------------------------------------------------------------- one design
@njit(cache=True)
def _simulate_design(n0, n1, coef, kv_cap, prompt_budget, allow_borrow, kv_s_per_token, kv_setup, n_layers,
                     layerwise_min, overload, arrival, s_arr, n_arr, late_s, abort_after, first_out, finish_out,
                     stats, window, drained, stop, plan):
    """stop : [0] set by another thread to end the run early (Ctrl-C, `_run_batch`).
    plan : a cloud plan's table (`cloud_rows`), or None: the families' rules."""
    R = arrival.shape[0]
    M = n0 + n1
    fs = np.zeros((M, N_F))
    fs[:, F_STALE_AT] = INF
    st = np.zeros((M, N_I), np.int64)
    st[n0:, I_POOL] = 1
    for m in range(M):   # a cloud plan's servers each have their own latency vector and KV budget
        st[m, I_ROW] = st[m, I_POOL] if plan is None else m
    st[:, I_QHEAD] = -1
    st[:, I_QTAIL] = -1
    req = np.zeros((R, 4), np.int64)     # next in prompt queue, decode machine, prefill machine, unused
    req[:, 0] = -1
    join_iter = np.zeros(R)
    fin_key = np.empty((M, R))
    fin_val = np.empty((M, R), np.int64)
    wait_key = np.empty((M, R))
    wait_val = np.empty((M, R), np.int64)
    next_s = np.full(M, INF)           # next event time per machine
    n_blocks = (M + (1 << _BLOCK_SHIFT) - 1) >> _BLOCK_SHIFT
    earliest_t = np.full(1 + n_blocks, INF)    # [0]: earliest event time; [1 + b]: earliest in block b
    earliest_m = np.zeros(1 + n_blocks, np.int64)   # the machines they belong to (ties: lowest index)
    for b in range(n_blocks):
        earliest_m[1 + b] = b << _BLOCK_SHIFT
    sim = (coef, kv_cap, prompt_budget, kv_s_per_token, kv_setup, n_layers, layerwise_min, s_arr, n_arr,
           first_out, finish_out, stats, fs, st, req, join_iter, fin_key, fin_val, wait_key, wait_val, next_s,
           arrival, late_s, earliest_t, earliest_m, np.zeros(1, np.int64), stop)
    if plan is None:
        _arrivals(n0, n1, M, R, allow_borrow, overload, abort_after, sim, window, None)
    else:   # the plan, its dispatch's credits and a scratch row of loads
        # ... and when each shared link is next free (`cloud_rows`' link rows: L per n0 rows)
        cloud = (plan, np.zeros(n0), np.zeros((n0, max(n1, 1))), np.empty(M),
                 np.zeros((plan.shape[0] - 1 - 3 * n0) // n0))
        _arrivals(n0, n1, M, R, allow_borrow, overload, abort_after, sim, window, cloud)
    for r in range(R):   # a server has drained when the last request it served finishes
        if finish_out[r] < INF:
            drained[req[r, 1]] = _fmax(drained[req[r, 1]], finish_out[r])
            drained[req[r, 2]] = _fmax(drained[req[r, 2]], finish_out[r])


# The event loop runs without reference counting (`_nrt=False`): in a function that may
# allocate, numba increfs and decrefs every array it takes out of `sim` on each use, which
# cost 15% of the kernel when this loop lived in `_simulate_design`.
@njit(cache=True, _nrt=False)
def _arrivals(n0, n1, M, R, allow_borrow, overload, abort_after, sim, window, cloud):
    """Route each request at its arrival, after every machine event due before it."""
    (coef, kv_cap, prompt_budget, kv_s_per_token, kv_setup, n_layers, layerwise_min, s_arr, n_arr,
     first_out, finish_out, stats, fs, st, req, join_iter, fin_key, fin_val, wait_key, wait_val, next_s,
     arrival, late_s, earliest_t, earliest_m, lent, stop) = sim   # lent: [number of lent machines]
    stall_limit = STALL_EVENTS_PER_ITEM * (M + R) + STALL_EVENTS_MIN
    for r in range(R):
        t = arrival[r]
        if not _run_until(t, sim, cloud, stall_limit) or stop[0] != 0:
            return
        if abort_after > 0 and _fmax(_fmax(stats[ST_LATE_TTFT], stats[ST_LATE_TBT]), stats[ST_LATE_E2E]) >= abort_after:
            stats[ST_ABORTED] = 1.0
            return
        need = s_arr[r] + n_arr[r]
        if cloud is not None:
            p, d = _cloud_route(t, s_arr[r], need, n0, n1, cloud, kv_cap, fs, st, window)
        elif n1 == 0:
            p = _least_loaded_mixed(t, n0, fs, st, window)
            d = p
        elif prompt_budget[2] > 0.0:
            p = _least_loaded_machine(t, n0, fs, st, window)
            d = p + n0
        else:
            p, d = _route_split(t, need, n0, M, allow_borrow, overload, kv_cap, fs, st, lent)
            if st[p, I_POOL] == 1:
                stats[ST_BORROW_P] += 1
            if st[d, I_POOL] == 0 and n_arr[r] > 1:
                stats[ST_BORROW_D] += 1
        req[r, 1] = d
        req[r, 2] = p
        fs[d, F_RESERVED] += need
        fs[d, F_DEC_ASSIGNED] += n_arr[r] - 1
        fs[p, F_PEND_P] += s_arr[r]
        if st[p, I_QTAIL] < 0:
            st[p, I_QHEAD] = r
        else:
            req[st[p, I_QTAIL], 0] = r
        st[p, I_QTAIL] = r
        _schedule(p, sim)
    _run_until(INF, sim, cloud, stall_limit)


@njit(cache=True, forceinline=True, _nrt=False)
def _run_until(t, sim, cloud, stall_limit):
    """Process every machine event up to time t, in time order. False when the run must end:
    the stop flag is set (Ctrl-C), or the clock stopped (`stall_limit` events in a row at one
    time; the stall is in the statistics).

    Both are read every `STOP_CHECK_EVENTS` events only (one integer count and mask per event):
    the clock is compared once `stall_limit` events have passed, and one that has not moved
    over that many has stopped.

    The stall guard is a backstop: no input is known to reach it. A clock stops when an
    iteration is at most half the spacing of doubles at the current time; every latency
    model times a pass at 1 us or more (a profile's cells and its interpolations are refused
    below that when loaded), and `run_fluid` refuses arrivals past `MAX_ARRIVAL_S` (2**32 s,
    where doubles are 0.95 us apart), which stopped it (1e15 s and later, the Python API or
    `provision simulate --rps 1e-15 --duration 3e16`). A run would have to drain for
    centuries past its last arrival to get there."""
    earliest_t, earliest_m = sim[23], sim[24]
    mark = -INF
    count = 0
    while True:
        tm = earliest_t[0]
        if tm > t or tm == INF:
            return True
        first = earliest_m[0]
        count += 1
        if count & (STOP_CHECK_EVENTS - 1) == 0:
            if sim[26][0] != 0:
                return False
            if count >= stall_limit:
                if tm <= mark:
                    _stalled(first, tm, sim)
                    return False
                mark = tm
                count = 0
        _step(first, tm, sim, cloud)
        _schedule(first, sim)


@njit(cache=True, _nrt=False)
def _stalled(m, t, sim):
    """Record a stopped clock: when, and the iteration machine m was running (s)."""
    stats, fs, st = sim[11], sim[12], sim[13]
    stats[ST_STALLED] = 1.0
    stats[ST_STALL_AT_S] = t
    if st[m, I_PREFILL] == 1:
        stats[ST_STALL_ITER_S] = fs[m, F_LEN]
    elif fs[m, F_RATE] > 0.0:
        stats[ST_STALL_ITER_S] = 1.0 / fs[m, F_RATE]


@njit(cache=True, forceinline=True, _nrt=False)
def _decode_progress(m, t, fs, st):
    """Pending decode tokens of machine m at time t (fractional during a decode stretch)."""
    it = fs[m, F_ITER]
    if st[m, I_RUN] > 0 and st[m, I_PREFILL] == 0 and t > fs[m, F_NOW]:
        it += (t - fs[m, F_NOW]) * fs[m, F_RATE]
    return fs[m, F_DEC_ASSIGNED] - (st[m, I_RUN] * it - fs[m, F_SUM_JOIN])


@njit(cache=True, forceinline=True, _nrt=False)
def _prompt_work(m, t, fs, st):
    """Pending prompt tokens of machine m at t, less the done share of the batch in flight."""
    w = fs[m, F_PEND_P]
    if st[m, I_PREFILL] == 1:
        done = (t - (fs[m, F_END] - fs[m, F_LEN])) * fs[m, F_INV_LEN]
        w -= fs[m, F_BATCH_TOK] * _fmin(_fmax(done, 0.0), 1.0)
    return w


@njit(cache=True, _nrt=False)
def _least_loaded_mixed(t, n0, fs, st, window):
    best, best_load = 0, INF
    for m in range(n0):
        if t < window[m, 0] or t >= window[m, 1]:   # not serving yet, or scaled in (SEMANTICS.md)
            continue
        load = _prompt_work(m, t, fs, st) + _decode_progress(m, t, fs, st)
        if load < best_load - EPS:
            best, best_load = m, load
    return best


@njit(cache=True, _nrt=False)
def _least_loaded_machine(t, n0, fs, st, window):
    """Splitwiser: the machine with the least pending prompt work of its prefill server
    plus pending decode tokens of its decode server (ties: lowest index)."""
    best, best_load = 0, INF
    for m in range(n0):
        if t < window[m, 0] or t >= window[m, 1]:
            continue
        load = _prompt_work(m, t, fs, st) + _decode_progress(m + n0, t, fs, st)
        if load < best_load - EPS:
            best, best_load = m, load
    return best


@njit(cache=True, _nrt=False)
def _cloud_route(t, s, need, n0, n1, cloud, kv_cap, fs, st, window):
    """A cloud plan's (prefill, decode) servers (SEMANTICS.md "Cloud plans", as `_des_cloud.py`).
    Prefill (or non-split): the least queued work per unit of share among the servers with a
    share that hold the request. Decode: among the prefill server's decode servers (share > 0)
    that hold it, the least share of its KV budget booked. Ties by smooth weighted round-robin
    on the shares. A request no server holds is routed as if every server held it."""
    plan, p_credit, d_credit, loads, _ = cloud
    fit = True
    for attempt in range(2):   # the second attempt, when no server holds it, ignores fit
        held = False
        for m in range(n0):
            loads[m] = INF
            if plan[0, m] > 0.0 and window[m, 0] <= t < window[m, 1] and (not fit or _cloud_holds(m, s, need, n0, n1,
                                                                                                     plan, kv_cap)):
                work = _prompt_work(m, t, fs, st)
                if n1 == 0:   # a non-split server also decodes what it prefilled
                    work += _decode_progress(m, t, fs, st)
                loads[m] = work / plan[0, m]
                held = True
        if held:
            break
        fit = False
    p = _least_then_credit(loads, n0, p_credit, plan[0])
    if n1 == 0:
        return p, p
    for j in range(n1):
        ok = plan[1 + p, j] > 0.0 and (not fit or need <= kv_cap[n0 + j])
        loads[j] = fs[n0 + j, F_RESERVED] / kv_cap[n0 + j] if ok else INF
    return p, n0 + _least_then_credit(loads, n1, d_credit[p], plan[1 + p])


@njit(cache=True, forceinline=True, _nrt=False)
def _cloud_holds(m, s, need, n0, n1, plan, kv_cap):
    """Whether prefill (or non-split) server m holds a request (`_des_cloud.plan_holds`): the
    prompt in its budget (non-split: the whole request) and, split, the whole request in
    one of its routed decode servers."""
    if n1 == 0:
        return need <= kv_cap[m]
    if s > kv_cap[m]:
        return False
    for j in range(n1):
        if plan[1 + m, j] > 0.0 and need <= kv_cap[n0 + j]:
            return True
    return False


@njit(cache=True, _nrt=False)
def _least_then_credit(loads, n, credit, share):
    """The least of loads[:n]; among ties (1e-9), the most credit (first on ties). Every
    server earns its share per request, the chosen one spends one."""
    least = INF
    for m in range(n):
        least = _fmin(least, loads[m])
    best, best_credit = 0, -INF
    for m in range(n):
        credit[m] += share[m]
        if loads[m] <= least + 1e-9 and credit[m] > best_credit:
            best, best_credit = m, credit[m]
    credit[best] -= 1.0
    return best


@njit(cache=True, _nrt=False)
def _route_split(t, need, n0, M, allow_borrow, overload, kv_cap, fs, st, lent):
    """Prefill and decode machines of a request (SEMANTICS.md): least-loaded home machines;
    lent machines (the mixed pool) only when no home machine can take the work."""
    if lent[0] > 0:
        for m in range(M):   # lent machines whose borrowed work has drained go home
            if st[m, I_LENT] == 1:
                if m < n0 and fs[m, F_RESERVED] <= EPS:
                    st[m, I_LENT] = 0
                    lent[0] -= 1
                elif m >= n0 and fs[m, F_PEND_P] <= EPS:
                    st[m, I_LENT] = 0
                    lent[0] -= 1
    p, p_work = -1, INF
    for m in range(n0):
        if st[m, I_LENT] == 0:
            w = _prompt_work(m, t, fs, st)
            if w < p_work - EPS:
                p, p_work = m, w
    home0 = 0
    home1 = 0
    if lent[0] == 0:
        home0 = n0
        home1 = M - n0
    else:
        for m in range(M):
            if st[m, I_LENT] == 0:
                if m < n0:
                    home0 += 1
                else:
                    home1 += 1
    # decode: a home token machine with room, else a lent prompt machine with room, else lend one
    d = _least_decode(t, need, n0, M, kv_cap[1], fs, st, 0, True)
    token_room = d >= 0
    prompt_slack = p_work <= overload     # lending never starves the prompt side
    if d < 0 and prompt_slack and lent[0] > 0:
        d = _least_decode(t, need, 0, n0, kv_cap[0], fs, st, 1, True)
    if d < 0:
        d = _least_decode(t, need, n0, M, kv_cap[1], fs, st, 0, False)
        if allow_borrow and home0 >= 2 and prompt_slack:
            d = _lend(_least_prompt_work(t, n0, fs, st, p), st, lent)
    # prefill: the home prompt machine unless overloaded; then a lent token machine below the
    # threshold, else lend one
    if allow_borrow and p_work > overload:
        c, c_work = -1, INF
        if lent[0] > 0:
            for m in range(n0, M):
                if st[m, I_LENT] == 1:
                    w = _prompt_work(m, t, fs, st)
                    if w < c_work - EPS:
                        c, c_work = m, w
        if c >= 0 and c_work <= overload:
            p = c
        elif home1 >= 2 and token_room:   # never starve the token side
            c = _least(n0, M, fs, st, F_RESERVED, d)
            if c >= 0:
                p = _lend(c, st, lent)
    return p, d


@njit(cache=True, forceinline=True, _nrt=False)
def _least_decode(t, need, lo, hi, cap, fs, st, lent, need_room):
    best, best_load = -1, INF
    for m in range(lo, hi):
        if st[m, I_LENT] == lent:
            if need_room and fs[m, F_RESERVED] + need > cap:
                continue
            load = _decode_progress(m, t, fs, st)
            if load < best_load - EPS:
                best, best_load = m, load
    return best


@njit(cache=True, forceinline=True, _nrt=False)
def _least_prompt_work(t, n0, fs, st, exclude):
    best, best_w = -1, INF
    for m in range(n0):
        if st[m, I_LENT] == 0 and m != exclude:
            w = _prompt_work(m, t, fs, st)
            if w < best_w - EPS:
                best, best_w = m, w
    return best


@njit(cache=True, forceinline=True, _nrt=False)
def _lend(m, st, lent):
    """Lend machine m to the other pool; `lent` counts lent machines so routing can skip
    the lent-machine scans when there are none."""
    st[m, I_LENT] = 1
    lent[0] += 1
    return m


@njit(cache=True, forceinline=True, _nrt=False)
def _least(lo, hi, fs, st, col, exclude):
    best, best_v = -1, INF
    for m in range(lo, hi):
        if st[m, I_LENT] == 0 and m != exclude and fs[m, col] < best_v - EPS:
            best, best_v = m, fs[m, col]
    return best


@njit(cache=True, forceinline=True, _nrt=False)
def _set_next(m, t, next_s, earliest_t, earliest_m):
    """Set machine m's next event time; keep each block's earliest and the overall earliest.

    Machines are grouped in blocks of 8: a later time for a block's earliest machine
    rescans its block, and the overall earliest is rescanned over the blocks only when its
    own time moved. Both scans are short, branch-free and independent of the comparisons,
    where a binary tournament tree walked six dependent levels per event (the tree took a
    quarter of the kernel; this is 8% faster overall)."""
    next_s[m] = t
    b = 1 + (m >> _BLOCK_SHIFT)
    bt = earliest_t[b]
    bm = earliest_m[b]
    if t < bt or (t == bt and m < bm):
        earliest_t[b] = t
        earliest_m[b] = m
    elif bm == m:
        lo = (b - 1) << _BLOCK_SHIFT
        hi = min(lo + (1 << _BLOCK_SHIFT), next_s.shape[0])
        best_t = next_s[lo]
        best_m = lo
        for k in range(lo + 1, hi):
            v = next_s[k]
            take = v < best_t
            best_t = v if take else best_t
            best_m = k if take else best_m
        earliest_t[b] = best_t
        earliest_m[b] = best_m
    else:
        return
    nt = earliest_t[b]
    nm = earliest_m[b]
    if nt < earliest_t[0] or (nt == earliest_t[0] and nm < earliest_m[0]):
        earliest_t[0] = nt
        earliest_m[0] = nm
    elif earliest_m[0] == m:
        best_t = earliest_t[1]
        best_m = earliest_m[1]
        for k in range(2, earliest_t.shape[0]):
            v = earliest_t[k]
            take = v < best_t
            best_t = v if take else best_t
            best_m = earliest_m[k] if take else best_m
        earliest_t[0] = best_t
        earliest_m[0] = best_m


@njit(cache=True, forceinline=True, _nrt=False)
def _schedule(m, sim):
    """Set machine m's next event time from its state (no simulation)."""
    fs, st, wait_key, wait_val, next_s = sim[12], sim[13], sim[18], sim[19], sim[20]
    s_arr, n_arr, req, kv_cap = sim[7], sim[8], sim[14], sim[1]
    if st[m, I_PREFILL] == 1:
        _set_next(m, fs[m, F_END], next_s, sim[23], sim[24])
        return
    now = fs[m, F_NOW]
    room = kv_cap[st[m, I_ROW]] - fs[m, F_KV_USED]
    running = st[m, I_RUN] > 0
    work_at = INF
    h = st[m, I_QHEAD]
    if h >= 0 and (req[h, 1] != m or s_arr[h] + n_arr[h] <= room or not running or fs[m, F_HEAD_DONE] > 0):
        work_at = _fmax(now, sim[21][h])   # an idle machine's clock is its last event
    if st[m, I_WAIT] > 0:
        h = wait_val[m, 0]
        if req[h, 2] == m or s_arr[h] + n_arr[h] <= room or not running:
            work_at = _fmin(work_at, _fmax(wait_key[m, 0], now))
    if not running:
        _set_next(m, work_at, next_s, sim[23], sim[24])
        return
    i0 = fs[m, F_ITER]
    rate = fs[m, F_RATE]
    nxt = now + (sim[16][m, 0] - i0) / rate
    stale = fs[m, F_STALE_AT]
    if stale < INF:   # Splitwiser: re-rate at the first boundary after the sibling changed
        k = _fmax(math.ceil(i0 + (stale - now) * rate - 1e-7), i0)
        nxt = _fmin(nxt, now + (k - i0) / rate)
    if work_at < INF:
        k = math.ceil(i0 + (work_at - now) * rate - 1e-7)
        if k <= i0 and work_at > now + 1e-12:
            # Work due a hair after this boundary (within the 1e-7-iteration tolerance) is not
            # admitted at `now` (`_start` admits up to now + 1e-12): wait for the next boundary,
            # else the machine is rescheduled at `now` forever.
            k = i0 + 1
        nxt = _fmin(nxt, now + (k - i0) / rate)
    _set_next(m, nxt, next_s, sim[23], sim[24])


@njit(cache=True, forceinline=True, _nrt=False)
def _step(m, e, sim, cloud):
    """Process machine m's event at time e: an iteration end, a finish or a boundary."""
    (coef, kv_cap, prompt_budget, kv_s_per_token, kv_setup, n_layers, layerwise_min, s_arr, n_arr,
     first_out, finish_out, stats, fs, st, req, join_iter, fin_key, fin_val, wait_key, wait_val, _, _, _, _, _, _,
     _) = sim
    pm = st[m, I_POOL]
    if st[m, I_PREFILL] == 1:
        dur = fs[m, F_LEN]
        # a re-timed (Splitwiser) prefill is busy for its real elapsed time
        stats[ST_BUSY0 + pm] += e - fs[m, F_REAL_START] if prompt_budget[2] > 0.0 else dur
        st[m, I_PREFILL] = 0
        fs[m, F_NOW] = e
        if st[m, I_RUN] > 0:
            stats[ST_DBT0 + pm] += st[m, I_RUN] * dur
            stats[ST_DT0 + pm] += dur
            fs[m, F_ITER] += 1.0
            _finish_due(m, e, sim)
        left = fs[m, F_BATCH_TOK]   # prompt tokens of this iteration, head first
        for _ in range(st[m, I_BATCH]):
            r = st[m, I_QHEAD]
            if r < 0:
                raise RuntimeError("prompt queue shorter than the batch in flight")
            rest = s_arr[r] - fs[m, F_HEAD_DONE]
            if rest > left:      # a chunk: the prompt stays at the head, partly prefilled
                fs[m, F_HEAD_DONE] += left
                fs[m, F_PEND_P] -= left
                break
            left -= rest
            fs[m, F_HEAD_DONE] = 0.0
            fs[m, F_PEND_P] -= rest
            st[m, I_QHEAD] = req[r, 0]
            if req[r, 0] < 0:
                st[m, I_QTAIL] = -1
            first_out[r] = e
            if e - sim[21][r] > sim[22][r, 0]:
                stats[ST_LATE_TTFT] += 1
            d = req[r, 1]
            if n_arr[r] == 1:
                finish_out[r] = e
                if e - sim[21][r] > sim[22][r, 2]:
                    stats[ST_LATE_E2E] += 1
                fs[d, F_RESERVED] -= s_arr[r] + 1
                if d == m:
                    fs[m, F_KV_USED] -= s_arr[r] + 1
            elif d == m:
                _push(wait_key, wait_val, st, I_WAIT, m, e, r)
            else:
                per_token, setup = kv_s_per_token, kv_setup
                if cloud is not None:   # the pair's own link (`cloud_rows`); one credit per prefill server
                    n0 = cloud[1].shape[0]
                    per_token, setup = cloud[0][1 + n0 + m, d - n0], cloud[0][1 + 2 * n0 + m, d - n0]
                vis = kv_visible_s(s_arr[r], dur, per_token, setup, n_layers, layerwise_min)
                if cloud is not None and cloud[4].shape[0] > 0:
                    n0 = cloud[1].shape[0]   # the plan table's link rows: 1 + (3 + k) n0 + m
                    vis = kv_link_fifo_s(cloud[0], 1 + 3 * n0 + m, n0, d - n0, cloud[4], s_arr[r], e, dur, setup,
                                         vis, layerwise_min)
                stats[ST_KV_SUM] += vis
                stats[ST_KV_N] += 1
                _push(wait_key, wait_val, st, I_WAIT, d, e + vis, r)
                _schedule(d, sim)
        st[m, I_BATCH] = 0
    elif st[m, I_RUN] > 0:
        dt = e - fs[m, F_NOW]
        if dt > 0:
            stats[ST_BUSY0 + pm] += dt
            stats[ST_DT0 + pm] += dt
            stats[ST_DBT0 + pm] += st[m, I_RUN] * dt
        fs[m, F_ITER] = float(round(fs[m, F_ITER] + dt * fs[m, F_RATE]))
        fs[m, F_NOW] = e
        _finish_due(m, e, sim)
    else:
        fs[m, F_NOW] = e
    _start(m, e, sim)


@njit(cache=True, forceinline=True, _nrt=False)
def _finish_due(m, e, sim):
    s_arr, n_arr, finish_out, fs, st, join_iter, fin_key, fin_val = (
        sim[7], sim[8], sim[10], sim[12], sim[13], sim[15], sim[16], sim[17])
    first_out, stats, arrival, late_s = sim[9], sim[11], sim[21], sim[22]
    while st[m, I_FIN] > 0 and fin_key[m, 0] <= fs[m, F_ITER] + 1e-6:
        r = _pop(fin_key, fin_val, st, I_FIN, m)
        finish_out[r] = e
        if (e - first_out[r]) / (n_arr[r] - 1.0) > late_s[r, 1]:
            stats[ST_LATE_TBT] += 1
        if e - arrival[r] > late_s[r, 2]:
            stats[ST_LATE_E2E] += 1
        need = s_arr[r] + n_arr[r]
        st[m, I_RUN] -= 1
        fs[m, F_SUM_S] -= s_arr[r]
        fs[m, F_SUM_JOIN] -= join_iter[r]
        fs[m, F_KV_USED] -= need
        fs[m, F_RESERVED] -= need
        fs[m, F_DEC_ASSIGNED] -= n_arr[r] - 1


@njit(cache=True, forceinline=True, _nrt=False)
def _start(m, t, sim):
    """At an iteration boundary t: admit waiting decodes, form a prefill batch, set the decode rate."""
    (coef, kv_cap, prompt_budget, kv_s_per_token, kv_setup, n_layers, layerwise_min, s_arr, n_arr,
     first_out, finish_out, stats, fs, st, req, join_iter, fin_key, fin_val, wait_key, wait_val, _, _, _, _, _, _,
     _) = sim
    pm = st[m, I_POOL]
    row = st[m, I_ROW]
    cap = kv_cap[row]
    fs[m, F_NOW] = t
    while st[m, I_WAIT] > 0 and wait_key[m, 0] <= t + 1e-12:
        r = wait_val[m, 0]
        if req[r, 2] != m:  # local decodes reserved their KV when their prefill started
            need = s_arr[r] + n_arr[r]
            if fs[m, F_KV_USED] + need > cap and st[m, I_RUN] > 0:
                break
            fs[m, F_KV_USED] += need
        _pop(wait_key, wait_val, st, I_WAIT, m)
        it = fs[m, F_ITER]
        join_iter[r] = it
        _push(fin_key, fin_val, st, I_FIN, m, it + (n_arr[r] - 1), r)
        st[m, I_RUN] += 1
        fs[m, F_SUM_S] += s_arr[r]
        fs[m, F_SUM_JOIN] += it
    tokens, sq, k = _select_prompts(m, prompt_budget[0], prompt_budget[1], cap, s_arr, n_arr, fs, st, req)
    b = st[m, I_RUN]
    ctx = fs[m, F_SUM_S] + b * fs[m, F_ITER] - fs[m, F_SUM_JOIN]
    if prompt_budget[2] > 0.0:
        _start_colocated(m, t, pm, tokens, sq, k, b, ctx, prompt_budget[2], sim)
    elif k > 0:
        st[m, I_BATCH] = k
        fs[m, F_BATCH_TOK] = tokens
        dur = iter_time(coef[row], tokens, sq, k, b, ctx)
        st[m, I_PREFILL] = 1
        fs[m, F_END] = t + dur
        fs[m, F_LEN] = dur
        fs[m, F_INV_LEN] = 1.0 / dur    # routing reads the progress of every prompt machine
    elif b > 0:
        fs[m, F_RATE] = 1.0 / iter_time(coef[row], 0.0, 0.0, 0.0, b, ctx)


@njit(cache=True, forceinline=True, _nrt=False)
def _start_colocated(m, t, pm, tokens, sq, k, b, ctx, share, sim):
    """Splitwiser, at an iteration boundary t of server m: time its prefill (prompt server)
    or set its decode rate (token server) under the sibling's load (SEMANTICS.md); a prefill
    start or end marks the sibling's rate stale, a new decode rate re-times the sibling's
    prefill in flight."""
    coef, fs, st = sim[0], sim[12], sim[13]
    n0 = fs.shape[0] >> 1
    if pm == 0:
        sib = m + n0
        if k > 0:
            st[m, I_BATCH] = k
            fs[m, F_BATCH_TOK] = tokens
            _set_parts(m, coef[0], tokens, sq, k, 0.0, 0.0, fs)
            dur = _shared_s(m, sib, st[sib, I_RUN] > 0, share, fs)
            st[m, I_PREFILL] = 1
            fs[m, F_END] = t + dur
            fs[m, F_LEN] = dur
            fs[m, F_INV_LEN] = 1.0 / dur
            fs[m, F_REAL_START] = t
        if st[sib, I_RUN] > 0:
            fs[sib, F_STALE_AT] = _fmin(fs[sib, F_STALE_AT], t)
            _schedule(sib, sim)
        return
    sib = m - n0
    fs[m, F_STALE_AT] = INF
    if b > 0:
        _set_parts(m, coef[1], 0.0, 0.0, 0.0, b, ctx, fs)
        fs[m, F_RATE] = 1.0 / _shared_s(m, sib, st[sib, I_PREFILL] == 1, 1.0 - share, fs)
    if st[sib, I_PREFILL] == 1:   # re-time the sibling's prefill: remaining fraction x new time
        length = fs[sib, F_LEN]
        done = _fmin(_fmax((t - (fs[sib, F_END] - length)) / length, 0.0), 1.0)
        new = _shared_s(sib, m, b > 0, share, fs)
        fs[sib, F_END] = t + (1.0 - done) * new
        fs[sib, F_LEN] = new       # the virtual start t - done x new keeps routing's done share
        fs[sib, F_INV_LEN] = 1.0 / new
        _schedule(sib, sim)


@njit(cache=True, forceinline=True, _nrt=False)
def _set_parts(m, c, n_p, sq, seqs, b, ctx, fs):
    solo, compute, hbm, rest = iteration_parts(c, n_p, sq, seqs, b, ctx)
    fs[m, F_SOLO] = solo
    fs[m, F_COMPUTE] = compute
    fs[m, F_HBM] = hbm
    fs[m, F_REST] = rest


@njit(cache=True, forceinline=True, _nrt=False)
def _shared_s(m, sib, sib_busy, share, fs):
    """Iteration time of server m: alone, or beside its busy sibling with `share` of the SMs."""
    if not sib_busy:
        return fs[m, F_SOLO]
    return shared_iteration_s(fs[m, F_SOLO], fs[m, F_COMPUTE], fs[m, F_HBM], fs[m, F_REST], fs[sib, F_HBM], share)


@njit(cache=True, forceinline=True, _nrt=False)
def _select_prompts(m, batch_cap, chunk, cap, s_arr, n_arr, fs, st, req):
    """The prefill part of an iteration: (prompt tokens, sum of their attention squares,
    prompts), reserving the KV of the prompts whose decode stays here (SEMANTICS.md).

    chunk > 0: up to `chunk` prompt tokens, the last prompt cut to fit; a chunk at
    offset o of c tokens costs the attention of (o + c)^2 - o^2, so a prompt's chunks
    add up to its unchunked s^2. chunk == 0: whole prompts under `batch_cap`."""
    tokens = 0.0
    sq = 0.0
    k = 0
    done = fs[m, F_HEAD_DONE]   # only the head can be partly prefilled
    r = st[m, I_QHEAD]
    while r >= 0:
        s = s_arr[r]
        if chunk > 0.0:
            if tokens >= chunk:
                break
        elif k > 0 and tokens + s > batch_cap:
            break
        if req[r, 1] == m and done == 0.0:
            need = s + n_arr[r]
            if fs[m, F_KV_USED] + need > cap and (k > 0 or st[m, I_RUN] > 0):
                break
            fs[m, F_KV_USED] += need
        c = _fmin(s - done, chunk - tokens) if chunk > 0.0 else s
        tokens += c
        sq += (done + c) * (done + c) - done * done
        done = 0.0
        k += 1
        r = req[r, 0]
    return tokens, sq, k


def run_fluid(inputs: SimInputs, designs: np.ndarray | None = None, late_s: np.ndarray | None = None,
              abort_after: int = 0, solo_s: np.ndarray | None = None, keep_requests: bool = True) -> EngineOutput:
    """Simulate the designs of `inputs` (all, or the given indices) with the fluid engine.

    late_s : (r, 3) TTFT, TBT, E2E thresholds (s) per request; with `abort_after` > 0 a
        design stops once that many requests exceeded one of them — its p99 for that
        metric is then above the threshold whatever happens next. Requests it did not
        finish get +inf times and `aborted` is set.
    solo_s : (r, 3) TTFT, TBT, E2E of each request alone (the SLO reference); when
        given, latency and slowdown percentiles are computed inside the kernel, per
        design in parallel (the numpy route over a (designs x requests) table is
        memory-bound and took as long as the simulation on the Fig. 12 space).
    keep_requests : return each request's first-token and finish times, a (designs x
        requests) table (215 MB for the Fig. 12 space); False needs `solo_s`, and the
        engine then keeps only the percentiles and the makespan.
    """
    if not keep_requests and solo_s is None:
        raise ValueError("run_fluid: keep_requests=False needs solo_s, else nothing would be returned")
    check_arrival_range(inputs.arrival_s)   # later ones stop the clock (`_run_until`)
    idx = np.arange(inputs.n_designs) if designs is None else np.asarray(designs, dtype=np.int64)
    r = len(inputs.arrival_s)
    if late_s is None:
        late_s = np.full((r, 3), np.inf)
    want_pct = solo_s is not None
    inv_solo = 1.0 / np.ascontiguousarray(solo_s if want_pct else np.ones((r, 3)), dtype=np.float64)
    n_machines = inputs.n_machines[idx]
    # Each thread gets one contiguous block of designs. A design space is ordered by machine counts, so the
    # long-running feasible designs sit together; a fixed interleaving spreads them.
    order = np.argsort(np.arange(len(idx)) % _INTERLEAVE, kind="stable")
    window = server_windows(inputs, idx)
    drained = np.zeros(window.shape[:2])
    coef, kv_cap, plan = cloud_rows(inputs, idx)
    _announce_compile(plan is not None)
    first, finish, stats, pct = _run_batch(
        n_machines, coef, kv_cap,
        np.stack([inputs.batch_cap_tokens[idx], inputs.chunk_tokens[idx], inputs.mps_share[idx]], axis=1),
        inputs.allow_borrow[idx], inputs.kv_s_per_token[idx], inputs.kv_setup_s[idx], inputs.n_layers,
        inputs.layerwise_min_tokens, inputs.overload_tokens[idx], inputs.arrival_s,
        inputs.prompt_tokens.astype(np.float64), inputs.output_tokens.astype(np.float64),
        np.ascontiguousarray(late_s, dtype=np.float64), int(abort_after), inv_solo, want_pct,
        keep_requests, order, window, drained, plan)
    _refuse_stopped_clock(stats)
    return EngineOutput(
        first_token_s=first if keep_requests else None, finish_s=finish if keep_requests else None,
        busy_s=stats[:, [ST_BUSY0, ST_BUSY1]], decode_batch_time_s=stats[:, [ST_DBT0, ST_DBT1]],
        decode_time_s=stats[:, [ST_DT0, ST_DT1]], borrowed_decodes=stats[:, ST_BORROW_D],
        borrowed_prefills=stats[:, ST_BORROW_P], kv_visible_s_sum=stats[:, ST_KV_SUM],
        kv_transfers=stats[:, ST_KV_N], aborted=stats[:, ST_ABORTED] > 0,
        makespan_s=stats[:, ST_LAST_FINISH] - inputs.arrival_s[0],
        latency_pct_s=pct[:, 0] if want_pct else None, slowdown_pct=pct[:, 1] if want_pct else None,
        drained_s=drained)


def _refuse_stopped_clock(stats: np.ndarray) -> None:
    """One line when a design's clock stopped (`_run_until`): its results are not a simulation."""
    stalled = np.flatnonzero(stats[:, ST_STALLED] > 0)
    if len(stalled) == 0:
        return
    row = stats[stalled[0]]
    iteration = f"an iteration at {row[ST_STALL_ITER_S]:.3g} s" if row[ST_STALL_ITER_S] > 0 else "an iteration"
    raise ProvisionerError(   # for the whole batch: a search's other designs share the latency model at fault
        f"the fluid simulator's clock stopped at {row[ST_STALL_AT_S]:.6g} s of simulated time: the latency model "
        f"timed {iteration}, too short for the clock to advance; check the latency "
        f"model's times (a measured profile's cells, and what its grid's product rule or splitwisesim's "
        f"extrapolation makes of them, must stay above 1 microsecond per pass)")


def cloud_rows(inputs: SimInputs, idx: np.ndarray):
    """(coef, kv_cap, plan) of the designs idx: per pool ((d, 2, n_coef), (d, 2)) and no plan
    (None) when no design is a cloud plan; when all are, one coef and KV row per server
    of each, and its table of p prefill servers: row 0 the prefill shares, rows
    1 + i the decode shares of prefill server i, rows 1 + p + i and 1 + 2p + i the KV seconds
    per prompt token and setups of its links, rows 1 + (3 + k) p + i the seconds per prompt
    token its transfers hold shared link k (`ServerPlan.kv_link_s_per_token`; -1 past a
    plan's own links, so a design with fewer links never queues on them). Cloud plans compile the kernel's cloud
    specialisation once (cached like the other); a batch cannot mix the two kinds."""
    plans = [None if inputs.servers is None else inputs.servers[i] for i in idx]
    coef, kv_cap = inputs.coef[idx], inputs.kv_cap_tokens[idx]
    if all(plan is None for plan in plans):
        return coef, kv_cap, None
    if any(plan is None for plan in plans):
        raise ProvisionerError("run_fluid: simulate cloud plans and designs in separate calls (each kind has "
                               "its own compiled kernel)")
    shapes = [plan.decode_share.shape for plan in plans]
    rows = max(2, max(p + d for p, d in shapes))
    wide_coef, wide_kv = np.zeros((len(idx), rows, coef.shape[2])), np.zeros((len(idx), rows))
    links = [plan.shared_links for plan in plans]
    height = max((3 + lk.shape[2]) * p for (p, _), lk in zip(shapes, links))
    table = np.full((len(idx), 1 + height, max(max(p, d) for p, d in shapes)), -1.0)
    for i, (plan, lk) in enumerate(zip(plans, links)):
        p, d = plan.decode_share.shape
        wide_coef[i, :p + d], wide_kv[i, :p + d] = plan.coef, plan.kv_cap_tokens
        table[i, 0, :p] = plan.prefill_share
        parts = (plan.decode_share, plan.kv_s_per_token, plan.kv_setup_s, *np.moveaxis(lk, 2, 0))
        for c, part in enumerate(parts):
            table[i, 1 + c * p:1 + (c + 1) * p, :d] = part
    return wide_coef, wide_kv, table


def _writable(a):
    """`a` as the kernel's one specialisation takes it: an array C-contiguous and writable
    (a copy of a read-only one, e.g. a `Trace`'s frozen arrival times), anything else as is.
    numba types an array's read-only flag: callers of both kinds compiled the whole kernel
    twice (~30 s each on a 2-core machine; three specialisations after the test suite)."""
    if isinstance(a, np.ndarray) and not (a.flags.c_contiguous and a.flags.writeable):
        return np.array(a, order="C")
    return a


from . import COMPILING_MESSAGE  # noqa: E402  (the package's constant; the package never imports this module eagerly)
_announced = set()


def _announce_compile(cloud: bool = False) -> None:
    """Say once on stderr that numba is about to compile, when the kernel's specialisation
    (the families', or the cloud plans': its last argument a plan table, not None) is neither
    loaded in this process nor in the on-disk cache (an index file for this source)."""
    kind = "array" if cloud else "none"
    if kind in _announced or any(str(sig[-1]).startswith(kind) for sig in _run_block.signatures):
        return
    _announced.add(kind)
    try:   # numba's cache index: empty when missing or written for another version of this file
        cached = any(str(key[0][-1]).startswith(kind) for key in _run_block._cache._cache_file._load_index())
    except Exception:   # noqa: BLE001 (a numba without this internal: stay silent rather than guess)
        return
    if not cached:
        print(COMPILING_MESSAGE, file=sys.stderr, flush=True)


def _run_batch(n_machines, coef, kv_cap, prompt_budget, allow_borrow, kv_s_per_token, kv_setup, n_layers,
               layerwise_min, overload, arrival, s_arr, n_arr, late_s, abort_after, inv_solo, want_pct,
               keep_requests, order, window, drained, plan):
    """Simulate every design, `order` split into one contiguous block per thread.

    Python threads over a `nogil` kernel instead of numba's `parallel=True` prange:
    same blocks, same results, but no parfor passes and gufunc to compile (~17 s CPU of
    the first run). `numba.get_num_threads()` (NUMBA_NUM_THREADS, or less after
    `numba.set_num_threads`) sets the number of threads, as it did for prange.

    The kernels run on worker threads, even one alone, so that the main thread, waiting,
    takes Ctrl-C (and SIGTERM's KeyboardInterrupt) at once: it sets the stop flag, which the
    kernels read at every arrival and every `STOP_CHECK_EVENTS` events, and re-raises once
    they have returned (milliseconds). A kernel in the main thread kept the signal waiting
    until the whole batch was done (9 s for the Fig. 12 space without early stop). One
    thread's batch runs in the calling thread when it is short (`INLINE_DESIGN_REQUESTS`)
    or that thread is not the main one: no signal reaches a Dask or thread-pool task's
    thread, and a worker thread there would only hold the interpreter's exit (it joins
    pool threads, not the daemon threads Dask runs tasks on) until the batch is done."""
    D = n_machines.shape[0]
    R = arrival.shape[0]
    kept = D if keep_requests else 0
    first = np.empty((kept, R))
    finish = np.empty((kept, R))
    stats = np.zeros((D, N_STATS))
    pct = np.zeros((D, 2, 3, 3))   # (latency | slowdown, ttft/tbt/e2e, p50/p90/p99)
    stop = np.zeros(1, np.int64)   # set to 1 to end every kernel of this batch early
    args = tuple(_writable(a) for a in (
        n_machines, coef, kv_cap, prompt_budget, allow_borrow, kv_s_per_token, kv_setup, n_layers, layerwise_min,
        overload, arrival, s_arr, n_arr, late_s, abort_after, inv_solo, want_pct, keep_requests, first, finish,
        stats, pct, window, drained, stop, plan))
    _compile_with_signals_held(_run_block, (order, 0, D, *args))
    n_threads = max(1, min(numba.get_num_threads(), D))
    if n_threads == 1 and (D * R < INLINE_DESIGN_REQUESTS or threading.current_thread() is not threading.main_thread()):
        _run_block(order, 0, D, *args)
        return first, finish, stats, pct
    bounds = [D * k // n_threads for k in range(n_threads + 1)]
    pool = ThreadPoolExecutor(n_threads)
    try:   # the submits inside: a Ctrl-C between two of them stops the first too
        done = [pool.submit(_run_block, order, lo, hi, *args) for lo, hi in zip(bounds[:-1], bounds[1:])]
        finished, _ = wait(done, return_when=FIRST_EXCEPTION)   # all of them, unless one raised first
        for future in finished:
            future.result()
    except BaseException:   # Ctrl-C, SIGTERM or a kernel's exception: stop the other kernels
        stop[0] = 1
        raise
    finally:
        pool.shutdown(wait=True)   # milliseconds once stopped
    return first, finish, stats, pct


def _compile_with_signals_held(kernel, args) -> None:
    """Load or compile the kernel's specialisation for `args` before it runs, with Ctrl-C
    and SIGTERM held until that is done (`workers.signals_held`: a KeyboardInterrupt inside
    one of LLVM's callbacks crashed the process). Once compiled, a call only dispatches."""
    signature = tuple(numba.typeof(a) for a in args)
    if signature not in kernel.overloads:
        with signals_held():
            kernel.compile(signature)


@njit(cache=True, nogil=True)
def _run_block(order, lo, hi, n_machines, coef, kv_cap, prompt_budget, allow_borrow, kv_s_per_token, kv_setup, n_layers,
               layerwise_min, overload, arrival, s_arr, n_arr, late_s, abort_after, inv_solo, want_pct,
               keep_requests, first, finish, stats, pct, window, drained, stop, plan):
    for j in range(lo, hi):
        if stop[0] != 0:
            return
        _one_design(order[j], n_machines, coef, kv_cap, prompt_budget, allow_borrow, kv_s_per_token, kv_setup,
                    n_layers, layerwise_min, overload, arrival, s_arr, n_arr, late_s, abort_after, inv_solo,
                    want_pct, keep_requests, first, finish, stats, pct, window, drained, stop, plan)


@njit(cache=True)
def _one_design(i, n_machines, coef, kv_cap, prompt_budget, allow_borrow, kv_s_per_token, kv_setup, n_layers,
                layerwise_min, overload, arrival, s_arr, n_arr, late_s, abort_after, inv_solo, want_pct,
                keep_requests, first, finish, stats, pct, window, drained, stop, plan):
    """Simulate design i into row i of the outputs."""
    R = arrival.shape[0]
    if keep_requests:
        first_i, finish_i = first[i], finish[i]
    else:
        first_i, finish_i = np.empty(R), np.empty(R)
    first_i[:] = INF   # a stopped design leaves its unfinished requests at +inf
    finish_i[:] = INF
    args = (n_machines[i, 0], n_machines[i, 1], coef[i], kv_cap[i], prompt_budget[i], allow_borrow[i],
            kv_s_per_token[i], kv_setup[i], n_layers, layerwise_min, overload[i], arrival, s_arr, n_arr, late_s,
            abort_after, first_i, finish_i, stats[i], window[i], drained[i], stop)
    # numba prunes the branch the type of `plan` excludes: the families' kernel (None) never
    # compiles the cloud rules, the cloud plans' kernel never the families' routing
    if plan is None:
        _simulate_design(*args, None)
    else:
        _simulate_design(*args, plan[i])
    stats[i, ST_LAST_FINISH] = _max_finite(finish_i)
    if want_pct:
        _design_percentiles(first_i, finish_i, arrival, n_arr, inv_solo, pct[i])


@njit(cache=True)
def _max_finite(a):
    """Largest finite value of a (-inf if none)."""
    best = -INF
    for x in a:
        if x < INF and x > best:
            best = x
    return best


@njit(cache=True)
def _design_percentiles(first, finish, arrival, n_arr, inv_solo, out):
    """p50/p90/p99 of TTFT, TBT, E2E and of their slowdowns for one design.

    Same definition as numpy's default (linear interpolation); requests a stopped design
    never finished count as +inf; TBT covers requests with more than one token. Only
    finite values are stored and ranked: a stopped design is mostly +inf, and ranking
    those cost as much as simulating it.
    """
    R = arrival.shape[0]
    finite = np.empty((6, R))          # ttft, tbt, e2e (s), then the same as slowdowns
    n_finite = np.zeros(3, np.int64)
    n_all = np.zeros(3, np.int64)
    for r in range(R):
        ttft = first[r] - arrival[r]
        e2e = finish[r] - arrival[r]
        tbt = (e2e - ttft) / (n_arr[r] - 1.0) if n_arr[r] > 1 else 0.0
        for k in range(3):
            if k == 1 and n_arr[r] <= 1:
                continue
            n_all[k] += 1
            done = first[r] < INF if k == 0 else finish[r] < INF
            if done:
                value = ttft if k == 0 else (tbt if k == 1 else e2e)
                finite[k, n_finite[k]] = value
                finite[k + 3, n_finite[k]] = value * inv_solo[r, k]
                n_finite[k] += 1
    for k in range(3):
        _percentiles_into(finite[k], n_finite[k], n_all[k], out[0, k])
        _percentiles_into(finite[k + 3], n_finite[k], n_all[k], out[1, k])


@njit(cache=True)
def _percentiles_into(a, n_finite, n, out):
    """p50, p90, p99 (numpy's linear interpolation) of n values: a[:n_finite] and
    n - n_finite times +inf. Reorders a[:n_finite]."""
    if n == 0:
        out[:] = np.nan
        return
    pos = np.empty(3)
    ranks = np.empty(6, np.int64)
    for j, q in enumerate((0.5, 0.9, 0.99)):
        pos[j] = q * (n - 1)
        k = int(math.floor(pos[j]))
        ranks[2 * j] = k
        ranks[2 * j + 1] = k + 1 if k + 1 < n else n - 1
    wanted = _distinct_below(ranks, n_finite)   # ascending; the others are +inf
    found = np.empty(wanted.shape[0])
    _ranked_values(a, n_finite, wanted, found)
    values = np.full(6, INF)
    for i in range(6):
        for w in range(wanted.shape[0]):
            if wanted[w] == ranks[i]:
                values[i] = found[w]
    for j in range(3):
        below, above = values[2 * j], values[2 * j + 1]
        frac = pos[j] - ranks[2 * j]
        if above == INF:
            out[j] = INF if (frac > 0 or below == INF) else below
        elif frac >= 0.5:   # numpy's lerp: from the nearer end, so an end value comes out exact
            out[j] = above - (above - below) * (1.0 - frac)
        else:
            out[j] = below + (above - below) * frac


@njit(cache=True)
def _distinct_below(values, limit):
    """The distinct values below limit, ascending: np.unique and a boolean mask would
    compile numba's generic sort for six numbers (~10 s of the first run)."""
    out = np.empty(values.shape[0], np.int64)
    n = 0
    for v in values:
        if v >= limit:
            continue
        k = n
        while k > 0 and out[k - 1] > v:
            k -= 1
        if k > 0 and out[k - 1] == v:
            continue
        for i in range(n, k, -1):
            out[i] = out[i - 1]
        out[k] = v
        n += 1
    return out[:n]


@njit(cache=True)
def _bucket_of(below, x):
    """np.searchsorted(below, x, side="right") - 1, without compiling numba's generic one."""
    lo, hi = 0, below.shape[0]
    while lo < hi:
        mid = (lo + hi) >> 1
        if below[mid] <= x:
            lo = mid + 1
        else:
            hi = mid
    return lo - 1


_BUCKET_BITS = 11


@njit(cache=True)
def _ranked_values(a, n, ranks, out):
    """out[j] = the ranks[j]-th smallest of a[:n] (ranks strictly ascending, each < n).
    May reorder a.

    A radix select: the bit patterns of non-negative floats sort like the floats, so one
    histogram of the top bits of (bits - min bits) finds each rank's bucket, and only those
    buckets' few elements are ranked. It has no data-dependent branches to mispredict,
    which made quickselect cost ~0.1 ms per array (14% of the Fig. 12 run).
    """
    if ranks.shape[0] == 0:
        return
    bits = a[:n].view(np.int64)
    lo_b = bits[0]
    hi_b = bits[0]
    for i in range(1, n):
        x = bits[i]
        lo_b = x if x < lo_b else lo_b
        hi_b = x if x > hi_b else hi_b
    if lo_b < 0:   # a negative value (or -0.0): bit patterns do not sort, select instead
        lo = 0
        for j in range(ranks.shape[0]):
            if ranks[j] >= lo:
                _select(a, lo, n - 1, ranks[j])
                lo = ranks[j] + 1
            out[j] = a[ranks[j]]
        return
    shift = 0
    while ((hi_b - lo_b) >> shift) >= (1 << _BUCKET_BITS):
        shift += 1
    below = np.zeros((1 << _BUCKET_BITS) + 1, np.int64)   # below[b]: elements in buckets < b
    for i in range(n):
        below[((bits[i] - lo_b) >> shift) + 1] += 1
    for b in range(1, below.shape[0]):
        below[b] += below[b - 1]
    # gather the elements of the buckets holding the ranks, one segment per bucket
    slot = np.full(1 << _BUCKET_BITS, -1, np.int64)
    bucket = np.empty(ranks.shape[0], np.int64)
    start = np.zeros(ranks.shape[0] + 1, np.int64)
    n_seg = 0
    for j in range(ranks.shape[0]):
        b = _bucket_of(below, ranks[j])
        bucket[j] = b
        if slot[b] < 0:
            slot[b] = n_seg
            start[n_seg + 1] = start[n_seg] + below[b + 1] - below[b]
            n_seg += 1
    fill = start[:n_seg].copy()
    gathered = np.empty(start[n_seg])
    for i in range(n):
        s = slot[(bits[i] - lo_b) >> shift]
        if s >= 0:
            gathered[fill[s]] = a[i]
            fill[s] += 1
    for j in range(ranks.shape[0]):
        s = slot[bucket[j]]
        segment = gathered[start[s]:start[s + 1]]
        k = ranks[j] - below[bucket[j]]
        _select(segment, 0, segment.shape[0] - 1, k)
        out[j] = segment[k]


@njit(cache=True)
def _select(a, lo, hi, k):
    """Reorder a[lo:hi + 1] so that a[k] is its (k - lo)-th smallest, smaller ones before it
    and larger ones after (Hoare's quickselect, median-of-three pivot)."""
    while hi > lo:
        mid = (lo + hi) >> 1
        x, y, z = a[lo], a[mid], a[hi]
        if x > y:
            x, y = y, x
        if y > z:
            y = z if x <= z else x
        pivot = y
        i, j = lo, hi
        while i <= j:
            while a[i] < pivot:
                i += 1
            while a[j] > pivot:
                j -= 1
            if i <= j:
                a[i], a[j] = a[j], a[i]
                i += 1
                j -= 1
        if k <= j:
            hi = j
        elif k >= i:
            lo = i
        else:
            return
