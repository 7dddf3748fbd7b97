"""`ProfileLatencyModel`: measured prefill and decode times, the roofline where unmeasured.

A drop-in `LatencyModel` (same methods, same `perf` parameter everywhere: simulator,
search, SLO references, verification). `fit(profile)` builds one table per measured
(model, GPU, TP); `coefficients` returns the roofline coefficients followed by that
table, so the simulator engines evaluate it through the same vector (SEMANTICS.md).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ._model import LatencyModel, solo_request_tokens
from ._profile import INTERPS, Profile, pack_table, read_profile
from ._profile_eval import HEADER, KIND_GRID, MIN_TIME_MS, N_COEF, _lerp_extrapolate, profile_iteration_s
from ._roofline import time_from_coefficients
from .errors import PerfModelError

# Repeated measurements of one point differing by more than this are flagged (`fallbacks`).
REPEAT_SPREAD_WARN = 2.0

# Where the power-cap slowdown of each phase is read off the roofline (the profiles are
# measured uncapped): a 2048-token prefill and a 32-request decode at 1024 tokens of context.
CAP_PREFILL_TOKENS, CAP_DECODE_BATCH, CAP_DECODE_CONTEXT = 2048.0, 32.0, 1024.0


class ProfileLatencyModel(LatencyModel):
    """Latency model interpolating measured profiles.

    Parameters
    ----------
    interp : "grid" (bilinear over prompt tokens x batch size, per phase; the roofline
        outside the measured range) or "splitwisesim" (SplitwiseSim's rule: one
        piecewise-linear function of batch tokens per phase, extrapolated).
    calibration, catalog : of the roofline used where the profile has no measurement.

    Attributes (after `fit`)
    ----------
    profile_ : the `Profile` fitted on.
    tables_ : {(model, gpu, tp): table vector (layout in `_profile_eval`)}.
    n_coef : length of the vectors `coefficients` returns.
    """

    def __init__(self, interp: str = "grid", calibration=None, catalog=None):
        if interp not in INTERPS:
            raise PerfModelError(f"--latency-interp must be one of {', '.join(INTERPS)} (got '{interp}')")
        super().__init__(calibration, catalog)
        self.interp = interp

    def fit(self, profile: Profile, where: str | None = None) -> "ProfileLatencyModel":
        """Build the tables; refuse one whose interpolation times a pass under `MIN_TIME_MS`.

        where : how that error names the file, e.g. "--latency-profile 'p.csv'" (default: its path).
        """
        self.profile_ = profile
        self._roofline_fit = None
        self.tables_ = {key: pack_table(profile, profile.rows(*key), self.interp) for key in profile.keys()}
        for key, table in self.tables_.items():
            _check_smallest_times(profile, key, table, where or profile.source)
        self.n_coef = N_COEF + max(len(t) for t in self.tables_.values())
        return self

    # -- coefficient vectors ---------------------------------------------------
    def table(self, model, gpu, tp) -> np.ndarray | None:
        """The table of one (model, GPU, TP), or None when the profile lacks it."""
        return self.tables_.get((self.llm(model).name, self.gpu(gpu).name, int(tp)))

    def coefficients(self, model, gpu, tp=8, power_cap=1.0) -> np.ndarray:
        """Roofline coefficients then the table, shape broadcast(tp, power_cap) + (n_coef,)."""
        tp_b, cap_b = np.broadcast_arrays(np.asarray(tp), np.asarray(power_cap, dtype=float))
        shape = tp_b.shape
        tp_f, cap_f = tp_b.ravel(), cap_b.ravel()
        out = np.zeros((tp_f.size, self.n_coef))
        out[:, :N_COEF] = super().coefficients(model, gpu, tp_f, cap_f)
        for t in np.unique(tp_f):
            table = self.table(model, gpu, t)
            if table is None:
                continue
            sel = tp_f == t
            out[sel, N_COEF:N_COEF + len(table)] = table
            out[sel, N_COEF + 1], out[sel, N_COEF + 2] = self._cap_scales(model, gpu, t, cap_f[sel])
        return out.reshape(shape + (self.n_coef,))

    def _cap_scales(self, model, gpu, tp, caps):
        """Roofline capped/uncapped time of a prefill and of a decode iteration (the base
        class's pass time: this model's own would read the table these scales go into)."""
        s, b, ctx = CAP_PREFILL_TOKENS, CAP_DECODE_BATCH, CAP_DECODE_CONTEXT
        roofline = super().iteration_time_s
        prefill = [roofline(model, gpu, tp, cap, prefill_tokens=s, prefill_sq_tokens=s * s, prefill_seqs=1.0)
                   for cap in (caps, 1.0)]
        decode = [roofline(model, gpu, tp, cap, decode_batch=b, decode_context_tokens=ctx * b) for cap in (caps, 1.0)]
        return prefill[0] / prefill[1], decode[0] / decode[1]

    # -- phase latencies (arrays) ---------------------------------------------
    def iteration_time_s(self, model, gpu, tp=8, power_cap=1.0, *, prefill_tokens=0.0, prefill_sq_tokens=0.0,
                         prefill_seqs=0.0, decode_batch=0.0, decode_context_tokens=0.0):
        """Time (s) of one pass: the table where it covers the pass, else the roofline."""
        args = np.broadcast_arrays(*(np.asarray(x, dtype=float) for x in (
            power_cap, prefill_tokens, prefill_sq_tokens, prefill_seqs, decode_batch, decode_context_tokens)))
        caps, batch = args[0], args[1:]
        out = np.empty(caps.shape)
        for cap in np.unique(caps):
            sel = caps == cap
            vec = self.coefficients(model, gpu, tp, cap)
            parts = [a[sel] for a in batch]
            t = np.array([profile_iteration_s(vec, *point) for point in zip(*parts)])
            roof = t < 0
            if roof.any():
                t[roof] = time_from_coefficients(vec[:N_COEF], *(a[roof] for a in parts))
            out[sel] = t
        return out

    def solo_request_s(self, model, gpu, tp, prompt_tokens, output_tokens, power_cap=1.0):
        """TTFT, TBT, E2E (s) of requests alone. With `splitwisesim`, SplitwiseSim's
        reference: the decode looked up at batch tokens = the prompt size."""
        if self.interp == "grid" or self.table(model, gpu, tp) is None:
            return super().solo_request_s(model, gpu, tp, prompt_tokens, output_tokens, power_cap)
        s, n = solo_request_tokens(prompt_tokens, output_tokens)
        ttft = self.prefill_time_s(model, gpu, tp, s, 1, power_cap)
        tbt = self.iteration_time_s(model, gpu, tp, power_cap, decode_batch=s, decode_context_tokens=s * s)
        return ttft, tbt, ttft + np.maximum(n - 1.0, 0.0) * tbt

    # -- the roofline fitted on the measurements ---------------------------------
    def roofline_fit(self):
        """`fit_roofline` on this model's profile and calibration (a `RooflineFit`), computed
        once per `fit`: a planner builds its physics several times per question."""
        if getattr(self, "_roofline_fit", None) is None:
            from ._calibrate import fit_roofline
            self._roofline_fit = fit_roofline(self.profile_.frame(), self.calibration, self.catalog)
        return self._roofline_fit

    # -- what the user is told -------------------------------------------------
    def describe(self) -> dict:
        """The `latency_model` object of the JSON outputs."""
        p = self.profile_
        return {"kind": "profile", "interp": self.interp, "profile": p.source, "sha256": p.sha256,
                "measured": [f"{m}/{g}/tp{t}" for m, g, t in self.tables_]}

    def fallbacks(self, model, pools, prompt_tokens=None) -> list[str]:
        """One line per way the runs of `model` on `pools` [(gpu, tp), ...] leave the profile.

        prompt_tokens : the trace's prompt sizes, to count the prompts beyond the table.
        """
        notes = []
        llm = self.llm(model)
        for gpu, tp in dict.fromkeys((self.gpu(g).name, int(t)) for g, t in pools):
            table = self.table(llm, gpu, tp)
            if table is None:
                notes.append(f"the profile has no {llm.name} on {gpu} at TP {tp}: that pool uses the roofline")
                continue
            na, nb = int(table[3]), int(table[4])
            axis = table[HEADER:]   # grid: prompt axis then batch axis; splitwisesim: batch-token knots
            if table[0] == KIND_GRID:
                s_max, b_max = axis[na - 1], axis[na + nb - 1]
                here = ""
                if prompt_tokens is not None:
                    here = f"here {100 * float(np.mean(np.asarray(prompt_tokens) > s_max)):.1f}% of prompts, and "
                notes.append(f"{llm.name} on {gpu} TP {tp}: measured prompts {axis[0]:g}-{s_max:g} tokens, batches "
                             f"{axis[na]:g}-{b_max:g}; outside that range ({here}any decode batch above {b_max:g}) "
                             f"the roofline is used")
            else:
                notes.append(f"{llm.name} on {gpu} TP {tp}: measured batch tokens {axis[0]:g}-{axis[na - 1]:g}; "
                             f"beyond them times are extrapolated linearly, as SplitwiseSim does")
            notes += self._spread_notes(llm.name, gpu, tp)
        return notes

    def _spread_notes(self, model: str, gpu: str, tp: int) -> list[str]:
        """A note when repeated measurements of one point (prompt size x batch size) differ by
        more than REPEAT_SPREAD_WARN: a unit slip or a broken run, which the table's mean
        (splitwisesim: median) would take in silently. The shipped profiles' repeats (five
        to 45 each, over output lengths) differ by at most 1.45x."""
        p = self.profile_
        rows = p.rows(model, gpu, tp)
        s, b = p.prompt_tokens[rows], p.batch_size[rows]
        # the points each table combines: a grid cell (prompt, batch); a splitwisesim knot, their product
        points = pd.DataFrame({"point": list(zip(s, b)) if self.interp == "grid" else s * b,
                               "prefill": p.prompt_time_ms[rows], "decode": p.token_time_ms[rows]})
        notes = []
        for phase in ("prefill", "decode"):
            times = points.groupby("point")[phase]
            spread = times.max() / times.min()
            wide = spread[spread > REPEAT_SPREAD_WARN]
            if len(wide):
                at = wide.idxmax()
                where = (f"prompt {at[0]:g} x batch {at[1]:g}" if self.interp == "grid" else
                         f"prompt x batch = {at:g} tokens")
                notes.append(f"{model} on {gpu} TP {tp}: repeated {phase} measurements of {len(wide)} point(s) "
                             f"differ by up to {wide.max():.3g}x ({where}: {times.min()[at]:.4g} to "
                             f"{times.max()[at]:.4g} ms), more than {REPEAT_SPREAD_WARN:g}x; the table takes "
                             f"their {'mean' if self.interp == 'grid' else 'median'}: check those rows")
        return notes


def _check_smallest_times(profile: Profile, key, table: np.ndarray, where: str) -> None:
    """Refuse a table whose lookups can time a pass under `MIN_TIME_MS` (or not a finite time).

    The reader bounds the measurements; what the interpolation makes of them is bounded at
    the extremes of what the engines ask (a prompt of 1 token, a batch of 1 request or more):
    - grid: inside the axes a lookup is a convex combination of cells, so its smallest is
      the smallest cell, and a product-rule fill can be far below the measured ones
      (outside the axes the roofline is used);
    - splitwisesim: between knots the same; below the first knot the first segment is
      extrapolated down to 1 batch token, the smallest point it is asked (a prefill of 1
      token, a decode of 1 request), and a line's smallest on [1, first knot] is at an end.
      Beyond the last knot a falling line ends under 1 us at some size: those lookups use
      the roofline (`profile_iteration_s`); refusing a falling last segment would refuse
      the shipped profile (its TP2 tables fall there).
    """
    na, nb = int(table[3]), int(table[4])
    data = HEADER
    here = f"{where}: {key[0]} on {key[1]} TP {key[2]}: "

    def bad(v):
        return not (MIN_TIME_MS <= v < np.inf)

    def why(v):
        return f"{v:.3g} ms ({'under 1 us' if v < MIN_TIME_MS else 'not a finite time'})"

    if table[0] == KIND_GRID:
        s_axis, b_axis = table[data:data + na], table[data + na:data + na + nb]
        idx = profile.rows(*key)
        measured = set(zip(profile.prompt_tokens[idx], profile.batch_size[idx]))
        for phase, lo in (("prefill", data + na + nb), ("decode iteration", data + na + nb + na * nb)):
            cells = table[lo:lo + na * nb].reshape(na, nb)
            worst = [(cells[i, j], i, j) for i in range(na) for j in range(nb)
                     if not np.isnan(cells[i, j]) and bad(cells[i, j])]
            if worst:
                v, i, j = min(worst)
                s, b = s_axis[i], b_axis[j]
                how = "the grid's measurements give" if (s, b) in measured else "the grid's product-rule fill gives"
                raise PerfModelError(f"{here}{how} {why(v)} for a {phase} at prompt_size {s:g}, batch_size {b:g}; "
                                     f"give a measurement there")
    elif table[data] > 1.0:   # splitwisesim, the first knot above 1 batch token: extrapolated down to 1
        for what, ys in (("a prefill of 1 token", data + na), ("a decode iteration of 1 request", data + 3 * na)):
            v = _lerp_extrapolate(table, data, ys, na, 1.0)
            if bad(v):
                raise PerfModelError(f"{here}the splitwisesim rule extrapolates {what} to {why(v)}; give "
                                     f"measurements at smaller prompt_size x batch_size (down to 1) or use "
                                     f"--latency-interp grid")


def load_profile_model(path, interp: str = "grid", calibration=None, catalog=None,
                       where: str | None = None) -> ProfileLatencyModel:
    """Read a profile CSV and fit a `ProfileLatencyModel` on it (errors name file, line, column;
    `where` says how they name the file, as in `read_profile`)."""
    model = ProfileLatencyModel(interp, calibration, catalog)
    return model.fit(read_profile(path, model.catalog, where), where)
