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

A machine is only advanced when its next event is due (`next_event_s`), so an
arrival costs O(machines) comparisons, not O(machines) simulations. Numba compiles
the loop; designs run in parallel (`prange`), each with its own state tables.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from ._inputs import EngineOutput, SimInputs

# Per-design statistics columns.
ST_BUSY0, ST_BUSY1, ST_DBT0, ST_DBT1, ST_DT0, ST_DT1, ST_BORROW_D, ST_BORROW_P, ST_KV_SUM, ST_KV_N, ST_LATE_TTFT, \
    ST_LATE_TBT, ST_LATE_E2E, ST_ABORTED = range(14)
N_STATS = 14
# Float state per machine.
F_NOW, F_ITER, F_RATE, F_END, F_LEN, F_SUM_S, F_SUM_JOIN, F_KV_USED, F_RESERVED, F_PEND_P, \
    F_DEC_ASSIGNED, F_BATCH_TOK = range(12)
N_F = 12
# Integer state per machine.
I_POOL, I_PREFILL, I_BATCH, I_QHEAD, I_QTAIL, I_RUN, I_FIN, I_WAIT, I_LENT = range(9)
N_I = 9
EPS = 1e-9
INF = np.inf
_INTERLEAVE = 16   # stride of the design interleaving that balances prange's blocks


@njit(cache=True, inline="always")
def iter_time(c, n_p, sq, seqs, b, ctx):
    """Scalar twin of perfmodels.time_from_coefficients (same formula)."""
    tokens = n_p + b
    compute = c[0] * tokens + c[1] * (seqs + b) + c[2] * sq + c[3] * ctx
    memory = c[4] + c[5] * (ctx + tokens)
    allreduce = c[6] + c[7] * min(tokens, c[8]) + c[9] * max(tokens - c[8], 0.0)
    lo = c[10] if seqs > 0 else 0.0
    ld = c[11] if b > 0 else 0.0
    return max(compute, memory) + allreduce + max(lo, ld) + c[12] * seqs + c[13] * b


# ---------------------------------------------------------------- binary heaps (one row per machine)
@njit(cache=True, inline="always")
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


@njit(cache=True, inline="always")
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
def _simulate_design(n0, n1, coef, kv_cap, batch_cap, allow_borrow, kv_s_per_token, kv_setup, n_layers,
                     layerwise_min, overload, arrival, s_arr, n_arr, late_s, abort_after, first_out, finish_out,
                     stats):
    R = arrival.shape[0]
    M = n0 + n1
    fs = np.zeros((M, N_F))
    st = np.zeros((M, N_I), np.int64)
    st[n0:, I_POOL] = 1
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
    leaves = 1
    while leaves < M:
        leaves *= 2
    tree_t = np.full(2 * leaves, INF)    # tournament tree over next_s: tree_t[1] is the earliest event
    tree_m = np.zeros(2 * leaves, np.int64)
    for m in range(leaves):
        tree_m[leaves + m] = m
    sim = (coef, kv_cap, batch_cap, kv_s_per_token, kv_setup, n_layers, layerwise_min, s_arr, n_arr,
           first_out, finish_out, stats, fs, st, req, join_iter, fin_key, fin_val, wait_key, wait_val, next_s,
           arrival, late_s, tree_t, tree_m)
    for r in range(R):
        t = arrival[r]
        _run_until(t, M, sim)
        if abort_after > 0 and max(stats[ST_LATE_TTFT], stats[ST_LATE_TBT], stats[ST_LATE_E2E]) >= abort_after:
            stats[ST_ABORTED] = 1.0
            return
        need = s_arr[r] + n_arr[r]
        if n1 == 0:
            p = _least_loaded_mixed(t, n0, fs, st)
            d = p
        else:
            p, d = _route_split(t, need, M, allow_borrow, overload, kv_cap, fs, st)
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
    _run_until(INF, M, sim)


@njit(cache=True, _nrt=False)
def _run_until(t, M, sim):
    """Process every machine event up to time t, in time order."""
    tree_t, tree_m = sim[23], sim[24]
    while True:
        tm = tree_t[1]
        if tm > t or tm == INF:
            return
        first = tree_m[1]
        _step(first, tm, sim)
        _schedule(first, sim)


@njit(cache=True, inline="always")
def _decode_progress(m, t, fs, st):
    """Pending decode tokens of machine m at time t (fractional during a decode stretch)."""
    it = fs[m, F_ITER]
    if st[m, I_RUN] > 0 and st[m, I_PREFILL] == 0 and t > fs[m, F_NOW]:
        it += (t - fs[m, F_NOW]) * fs[m, F_RATE]
    return fs[m, F_DEC_ASSIGNED] - (st[m, I_RUN] * it - fs[m, F_SUM_JOIN])


@njit(cache=True, inline="always")
def _prompt_work(m, t, fs, st):
    """Pending prompt tokens of machine m at t, less the done share of the batch in flight."""
    w = fs[m, F_PEND_P]
    if st[m, I_PREFILL] == 1 and fs[m, F_LEN] > 0:
        done = (t - (fs[m, F_END] - fs[m, F_LEN])) / fs[m, F_LEN]
        w -= fs[m, F_BATCH_TOK] * min(max(done, 0.0), 1.0)
    return w


@njit(cache=True, _nrt=False)
def _least_loaded_mixed(t, n0, fs, st):
    best, best_load = 0, INF
    for m in range(n0):
        load = _prompt_work(m, t, fs, st) + _decode_progress(m, t, fs, st)
        if load < best_load - EPS:
            best, best_load = m, load
    return best


@njit(cache=True, _nrt=False)
def _route_split(t, need, M, allow_borrow, overload, kv_cap, fs, st):
    """Prefill and decode machines of a request (SEMANTICS.md): least-loaded home machines;
    lent machines (the mixed pool) only when no home machine can take the work."""
    for m in range(M):   # lent machines whose borrowed work has drained go home
        if st[m, I_LENT] == 1:
            if st[m, I_POOL] == 0 and fs[m, F_RESERVED] <= EPS:
                st[m, I_LENT] = 0
            elif st[m, I_POOL] == 1 and fs[m, F_PEND_P] <= EPS:
                st[m, I_LENT] = 0
    home0 = 0
    home1 = 0
    p, p_work = -1, INF
    for m in range(M):
        if st[m, I_LENT] == 0:
            if st[m, I_POOL] == 0:
                home0 += 1
                w = _prompt_work(m, t, fs, st)
                if w < p_work - EPS:
                    p, p_work = m, w
            else:
                home1 += 1
    # decode: a home token machine with room, else a lent prompt machine with room, else lend one
    d = _least_decode(t, need, M, kv_cap, fs, st, 1, 0, True)
    token_room = d >= 0
    prompt_slack = p_work <= overload     # lending never starves the prompt side
    if d < 0 and prompt_slack:
        d = _least_decode(t, need, M, kv_cap, fs, st, 0, 1, True)
    if d < 0:
        d = _least_decode(t, need, M, kv_cap, fs, st, 1, 0, False)
        if allow_borrow and home0 >= 2 and prompt_slack:
            d = _lend_least_work(t, M, fs, st, p)
    # prefill: the home prompt machine unless overloaded; then a lent token machine below the
    # threshold, else lend one
    if allow_borrow and p_work > overload:
        c, c_work = -1, INF
        for m in range(M):
            if st[m, I_POOL] == 1 and st[m, I_LENT] == 1:
                w = _prompt_work(m, t, fs, st)
                if w < c_work - EPS:
                    c, c_work = m, w
        if c >= 0 and c_work <= overload:
            p = c
        elif home1 >= 2 and token_room:   # never starve the token side
            c = _least(M, fs, st, 1, F_RESERVED, d)
            if c >= 0:
                st[c, I_LENT] = 1
                p = c
    return p, d


@njit(cache=True, inline="always")
def _least_decode(t, need, M, kv_cap, fs, st, pool, lent, need_room):
    best, best_load = -1, INF
    for m in range(M):
        if st[m, I_POOL] == pool and st[m, I_LENT] == lent:
            if need_room and fs[m, F_RESERVED] + need > kv_cap[pool]:
                continue
            load = _decode_progress(m, t, fs, st)
            if load < best_load - EPS:
                best, best_load = m, load
    return best


@njit(cache=True, inline="always")
def _lend_least_work(t, M, fs, st, exclude):
    best, best_w = -1, INF
    for m in range(M):
        if st[m, I_POOL] == 0 and st[m, I_LENT] == 0 and m != exclude:
            w = _prompt_work(m, t, fs, st)
            if w < best_w - EPS:
                best, best_w = m, w
    st[best, I_LENT] = 1
    return best


@njit(cache=True, inline="always")
def _least(M, fs, st, pool, col, exclude):
    best, best_v = -1, INF
    for m in range(M):
        if st[m, I_POOL] == pool and st[m, I_LENT] == 0 and m != exclude and fs[m, col] < best_v - EPS:
            best, best_v = m, fs[m, col]
    return best


@njit(cache=True, inline="always")
def _set_next(m, t, next_s, tree_t, tree_m):
    """Set machine m's next event time and update the tournament tree above it."""
    next_s[m] = t
    i = tree_t.shape[0] // 2 + m
    tree_t[i] = t
    i >>= 1
    while i >= 1:
        a = 2 * i
        if tree_t[a + 1] < tree_t[a]:
            a += 1
        tree_t[i] = tree_t[a]
        tree_m[i] = tree_m[a]
        i >>= 1


@njit(cache=True, inline="always")
def _schedule(m, sim):
    """Set machine m's next event time from its state (no simulation)."""
    fs, st, wait_key, wait_val, next_s = sim[12], sim[13], sim[18], sim[19], sim[20]
    s_arr, n_arr, req, kv_cap = sim[7], sim[8], sim[14], sim[1]
    if st[m, I_PREFILL] == 1:
        _set_next(m, fs[m, F_END], next_s, sim[23], sim[24])
        return
    now = fs[m, F_NOW]
    room = kv_cap[st[m, I_POOL]] - fs[m, F_KV_USED]
    running = st[m, I_RUN] > 0
    work_at = INF
    h = st[m, I_QHEAD]
    if h >= 0 and (req[h, 1] != m or s_arr[h] + n_arr[h] <= room or not running):
        work_at = max(now, sim[21][h])   # an idle machine's clock is its last event
    if st[m, I_WAIT] > 0:
        h = wait_val[m, 0]
        if req[h, 2] == m or s_arr[h] + n_arr[h] <= room or not running:
            work_at = min(work_at, max(wait_key[m, 0], now))
    if not running:
        _set_next(m, work_at, next_s, sim[23], sim[24])
        return
    i0 = fs[m, F_ITER]
    rate = fs[m, F_RATE]
    nxt = now + (sim[16][m, 0] - i0) / rate
    if work_at < INF:
        k = math.ceil(i0 + (work_at - now) * rate - 1e-7)
        if k <= i0 and work_at > now + 1e-12:
            # Work due a hair after this boundary (within the 1e-7-iteration tolerance) is not
            # admitted at `now` (`_start` admits up to now + 1e-12): wait for the next boundary,
            # else the machine is rescheduled at `now` forever.
            k = i0 + 1
        nxt = min(nxt, now + (k - i0) / rate)
    _set_next(m, nxt, next_s, sim[23], sim[24])


@njit(cache=True, inline="always")
def _step(m, e, sim):
    """Process machine m's event at time e: an iteration end, a finish or a boundary."""
    (coef, kv_cap, batch_cap, kv_s_per_token, kv_setup, n_layers, layerwise_min, s_arr, n_arr,
     first_out, finish_out, stats, fs, st, req, join_iter, fin_key, fin_val, wait_key, wait_val, _, _, _, _, _) = sim
    pm = st[m, I_POOL]
    if st[m, I_PREFILL] == 1:
        dur = fs[m, F_LEN]
        stats[ST_BUSY0 + pm] += dur
        st[m, I_PREFILL] = 0
        fs[m, F_NOW] = e
        if st[m, I_RUN] > 0:
            stats[ST_DBT0 + pm] += st[m, I_RUN] * dur
            stats[ST_DT0 + pm] += dur
            fs[m, F_ITER] += 1.0
            _finish_due(m, e, sim)
        for _ in range(st[m, I_BATCH]):
            r = st[m, I_QHEAD]
            if r < 0:
                raise RuntimeError("prompt queue shorter than the batch in flight")
            st[m, I_QHEAD] = req[r, 0]
            if req[r, 0] < 0:
                st[m, I_QTAIL] = -1
            first_out[r] = e
            if e - sim[21][r] > sim[22][r, 0]:
                stats[ST_LATE_TTFT] += 1
            fs[m, F_PEND_P] -= s_arr[r]
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
                total = kv_s_per_token * s_arr[r]
                if s_arr[r] < layerwise_min:
                    vis = kv_setup + total
                else:
                    last = total / n_layers
                    vis = kv_setup + last + max(total - last - dur, 0.0)
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


@njit(cache=True, inline="always")
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


@njit(cache=True, inline="always")
def _start(m, t, sim):
    """At an iteration boundary t: admit waiting decodes, form a prefill batch, set the decode rate."""
    (coef, kv_cap, batch_cap, kv_s_per_token, kv_setup, n_layers, layerwise_min, s_arr, n_arr,
     first_out, finish_out, stats, fs, st, req, join_iter, fin_key, fin_val, wait_key, wait_val, _, _, _, _, _) = sim
    pm = st[m, I_POOL]
    cap = kv_cap[pm]
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
    tokens = 0.0
    sq = 0.0
    k = 0
    r = st[m, I_QHEAD]
    while r >= 0:
        s = s_arr[r]
        if k > 0 and tokens + s > batch_cap:
            break
        if req[r, 1] == m:
            need = s + n_arr[r]
            if fs[m, F_KV_USED] + need > cap and (k > 0 or st[m, I_RUN] > 0):
                break
            fs[m, F_KV_USED] += need
        tokens += s
        sq += s * s
        k += 1
        r = req[r, 0]
    b = st[m, I_RUN]
    ctx = fs[m, F_SUM_S] + b * fs[m, F_ITER] - fs[m, F_SUM_JOIN]
    if k > 0:
        st[m, I_BATCH] = k
        fs[m, F_BATCH_TOK] = tokens
        dur = iter_time(coef[pm], tokens, sq, k, b, ctx)
        st[m, I_PREFILL] = 1
        fs[m, F_END] = t + dur
        fs[m, F_LEN] = dur
    elif b > 0:
        fs[m, F_RATE] = 1.0 / iter_time(coef[pm], 0.0, 0.0, 0.0, b, ctx)


def run_fluid(inputs: SimInputs, designs: np.ndarray | None = None, late_s: np.ndarray | None = None,
              abort_after: int = 0, solo_s: np.ndarray | None = None) -> EngineOutput:
    """Simulate the designs of `inputs` (all, or the given indices) with the fluid engine.

    late_s : (r, 3) TTFT, TBT, E2E thresholds (s) per request; with `abort_after` > 0 a
        design stops once that many requests exceeded one of them — its p99 for that
        metric is then above the threshold whatever happens next. Requests it did not
        finish get +inf times and `aborted` is set.
    solo_s : (r, 3) TTFT, TBT, E2E of each request alone (the SLO reference); when
        given, latency and slowdown percentiles are computed inside the kernel, per
        design in parallel (the numpy route over a (designs x requests) table is
        memory-bound and took as long as the simulation on the Fig. 12 space).
    """
    idx = np.arange(inputs.n_designs) if designs is None else np.asarray(designs, dtype=np.int64)
    # prange splits the designs into one contiguous block per thread; a design space is
    # ordered by machine counts, so the feasible (long-running) designs sit together and
    # one thread would get most of them. A fixed interleaving balances the threads.
    order = np.argsort(np.arange(len(idx)) % _INTERLEAVE, kind="stable")
    r = len(inputs.arrival_s)
    if late_s is None:
        late_s = np.full((r, 3), np.inf)
    want_pct = solo_s is not None
    solo = np.ascontiguousarray(solo_s if want_pct else np.ones((r, 3)), dtype=np.float64)
    first, finish, stats, pct = _run_batch(
        inputs.n_machines[idx], inputs.coef[idx], inputs.kv_cap_tokens[idx], inputs.batch_cap_tokens[idx],
        inputs.allow_borrow[idx], inputs.kv_s_per_token[idx], inputs.kv_setup_s[idx], inputs.n_layers,
        inputs.layerwise_min_tokens, inputs.overload_tokens[idx], inputs.arrival_s,
        inputs.prompt_tokens.astype(np.float64), inputs.output_tokens.astype(np.float64),
        np.ascontiguousarray(late_s, dtype=np.float64), int(abort_after), solo, want_pct, order)
    aborted = stats[:, ST_ABORTED] > 0
    if aborted.any():
        np.nan_to_num(first, copy=False, nan=np.inf)
        np.nan_to_num(finish, copy=False, nan=np.inf)
    return EngineOutput(
        first_token_s=first, finish_s=finish,
        busy_s=stats[:, [ST_BUSY0, ST_BUSY1]], decode_batch_time_s=stats[:, [ST_DBT0, ST_DBT1]],
        decode_time_s=stats[:, [ST_DT0, ST_DT1]], borrowed_decodes=stats[:, ST_BORROW_D],
        borrowed_prefills=stats[:, ST_BORROW_P], kv_visible_s_sum=stats[:, ST_KV_SUM],
        kv_transfers=stats[:, ST_KV_N], aborted=aborted,
        latency_pct_s=pct[:, 0] if want_pct else None, slowdown_pct=pct[:, 1] if want_pct else None)


@njit(parallel=True, cache=True)
def _run_batch(n_machines, coef, kv_cap, batch_cap, allow_borrow, kv_s_per_token, kv_setup, n_layers,
               layerwise_min, overload, arrival, s_arr, n_arr, late_s, abort_after, solo, want_pct, order):
    D = n_machines.shape[0]
    R = arrival.shape[0]
    first = np.full((D, R), np.nan)
    finish = np.full((D, R), np.nan)
    stats = np.zeros((D, N_STATS))
    pct = np.zeros((D, 2, 3, 3))   # (latency | slowdown, ttft/tbt/e2e, p50/p90/p99)
    for j in prange(D):
        i = order[j]   # visiting order only; design i's results stay in row i
        _simulate_design(n_machines[i, 0], n_machines[i, 1], coef[i], kv_cap[i], batch_cap[i], allow_borrow[i],
                         kv_s_per_token[i], kv_setup[i], n_layers, layerwise_min, overload[i], arrival,
                         s_arr, n_arr, late_s, abort_after, first[i], finish[i], stats[i])
        if want_pct:
            _design_percentiles(first[i], finish[i], arrival, n_arr, solo, pct[i])
    return first, finish, stats, pct


@njit(cache=True)
def _design_percentiles(first, finish, arrival, n_arr, solo, out):
    """p50/p90/p99 of TTFT, TBT, E2E and of their slowdowns for one design.

    Same definition as numpy's default (linear interpolation); requests a stopped design
    never finished count as +inf; TBT covers requests with more than one token.
    """
    R = arrival.shape[0]
    lat = np.empty((3, R))
    slow = np.empty((3, R))
    n_tbt = 0
    for r in range(R):
        f = first[r] if np.isfinite(first[r]) else INF
        e = finish[r] if np.isfinite(finish[r]) else INF
        ttft = f - arrival[r]
        e2e = e - arrival[r]
        lat[0, r] = ttft
        lat[2, r] = e2e
        slow[0, r] = ttft / solo[r, 0]
        slow[2, r] = e2e / solo[r, 2]
        if n_arr[r] > 1:
            tbt = (e2e - ttft) / (n_arr[r] - 1.0) if e < INF else INF
            lat[1, n_tbt] = tbt
            slow[1, n_tbt] = tbt / solo[r, 1]
            n_tbt += 1
    for k in range(3):
        n = R if k != 1 else n_tbt
        _percentiles_into(lat[k, :n], out[0, k])
        _percentiles_into(slow[k, :n], out[1, k])


@njit(cache=True)
def _percentiles_into(a, out):
    n = a.shape[0]
    if n == 0:
        out[:] = np.nan
        return
    pos = np.array([0.5, 0.9, 0.99]) * (n - 1)
    kth = np.empty(6, np.int64)
    for j in range(3):
        kth[2 * j] = int(math.floor(pos[j]))
        kth[2 * j + 1] = min(int(math.floor(pos[j])) + 1, n - 1)
    part = np.partition(a, kth)
    for j in range(3):
        lo = part[kth[2 * j]]
        hi = part[kth[2 * j + 1]]
        frac = pos[j] - kth[2 * j]
        if hi == INF:
            out[j] = INF if (frac > 0 or lo == INF) else lo
        else:
            out[j] = lo + (hi - lo) * frac
