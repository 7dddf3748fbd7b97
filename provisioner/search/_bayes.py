"""Bayesian optimization (optuna TPE) over spaces too wide to enumerate.

The space splits in two. The *hardware* of a design — machine type and tensor-parallel
degree per pool, a continuous GPU power cap per pool, the prompt batch cap, the
chunked-prefill budget — is what TPE samples. The *counts* are not sampled: for one hardware choice, feasibility is monotone
in the machine counts, so the frontier search of `_enumerate.py` finds the cheapest
feasible counts exactly in a few rounds. A trial is one hardware choice; its value is
the least objective (cost or power) over its count grid.

Trials are asked in batches (`study.ask()` k times); their count searches run in
lockstep, so every round of every search in the batch is ONE batched simulation, and
the batch is told back. Count searches stop early at the best design found by any trial
so far (a hardware whose designs are all costlier says so in a round or two); such a
trial is told that incumbent, a lower bound of its own optimum. A hardware with no
feasible design within its count bounds is told a constraint violation (optuna's
`trial.set_constraint`, > 0 infeasible).

The first batch holds every combination of (machine type, TP) choices at the top of the
power-cap range (up to `MAX_TYPE_SEEDS` of them) and the integer program's warm start:
a designed start that gives TPE one answer per combination before it explores caps.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..designs import MAX_DESIGN_MACHINES
from ._enumerate import StaircaseRun, lockstep
from ._space import FamilySpace, PoolSpace

MAX_TYPE_SEEDS = 16
PER_TRIAL_ROUND = 8     # designs per trial per lockstep round
CAP_STEP = 0.01         # power caps on a 0.01 grid: finer is below the calibration's resolution


@dataclass
class BayesOutcome:
    """trials: one row per trial (hardware, value, feasible); runs: the count searches by trial number."""

    trials: pd.DataFrame
    runs: dict
    n_trials: int


def bayes_search(space: FamilySpace, evaluate: Callable, *, objective_fn: Callable, bounds: Callable,
                 n_trials: int = 48, batch: int = 6, seed: int = 0, warm_starts: list[dict] | None = None,
                 lower_bound: float | None = None, on_batch: Callable[[int], None] | None = None,
                 designed_start: bool = True, durable=None, expansions: int = 0) -> BayesOutcome:
    """Minimize the objective over `space` subject to every SLO (see the module docstring).

    Parameters
    ----------
    evaluate : designs -> scored frame (the evaluator; the one evaluation path).
    objective_fn : fixed-hardware FamilySpace -> ((p, t) -> objective).
    bounds : hardware dict -> (max prompt count, max token count) for its count grid.
    n_trials : hardware trials, warm starts included; fewer once every hardware choice of
        `space` has had one (`hardware_points`: more would only repeat them).
    batch : trials per ask/tell round.
    seed : the TPE sampler's seed (its only randomness).
    warm_starts : hardware dicts enqueued first (e.g. the integer program's choice).
    lower_bound : a bound on the objective (cells below it start infeasible).
    designed_start : the first batch also holds `type_seeds(space)` (every (machine type,
        TP) combination at full power); False leaves the start to TPE (an ablation).
    durable : a `DurableStudy` each told trial is recorded in (or checked against).
    expansions : how often a trial's count bounds double (up to MAX_DESIGN_MACHINES) while
        every design in them fails: `bounds` is an estimate, which a hardware choice can
        outgrow (11 DGX-A100 at TP 4 meet 10 req/s of llama2-70b coding, past the bound its
        capacity gave; without doubling the family was called infeasible).
    """
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    sampler = optuna.samplers.TPESampler(seed=seed, multivariate=True, constant_liar=True,
                                         n_startup_trials=max(batch, 8))
    study = optuna.create_study(direction="minimize", sampler=sampler)
    for w in list(warm_starts or []) + (type_seeds(space) if designed_start else []):
        study.enqueue_trial(_params_of(space, w), skip_if_exists=True)
    best = float("inf")
    rows, runs = [], {}
    asked = 0
    points, seen = hardware_points(space), set()
    while asked < n_trials and len(seen) < points:   # stop once every hardware choice has had a trial
        k = min(batch, n_trials - asked)
        trials = [study.ask() for _ in range(k)]
        hws = [hardware_of(space, t) for t in trials]
        seen.update(_point(space, hw) for hw in hws)

        def count_search(hw: dict, top: tuple[int, int]) -> StaircaseRun:
            fixed = fixed_space(space, hw, *top)
            return StaircaseRun(fixed, objective=objective_fn(fixed), lower_bound=lower_bound,
                                decide_all=False, per_round=PER_TRIAL_ROUND)

        tops = [tuple(bounds(hw)) for hw in hws]
        batch_runs = [count_search(hw, top) for hw, top in zip(hws, tops)]
        best = lockstep(batch_runs, evaluate, incumbent=best)
        for _ in range(expansions):
            grow = [i for i, run in enumerate(batch_runs) if _outgrown(run, tops[i])]
            if not grow:
                break
            for i in grow:
                tops[i] = _doubled(tops[i])
                batch_runs[i] = count_search(hws[i], tops[i])
            best = lockstep([batch_runs[i] for i in grow], evaluate, incumbent=best)
        for t, hw, run in zip(trials, hws, batch_runs):
            value = run.best_objective
            feasible = bool(np.isfinite(value))
            if not feasible and np.isfinite(best) and _box_has_unknown(run):
                # Its designs as cheap as the best so far all fail; the costlier ones were
                # not needed: the best so far bounds its optimum from below.
                value, violation = best, 0.0
            elif not feasible:
                value, violation = float(np.max(run.obj_grid)), 1.0
            else:
                violation = 0.0
            t.set_constraint("slo_violation", violation)
            study.tell(t, value)
            rows.append({**hw, "value": value, "feasible": feasible, "trial": t.number,
                         "evaluations": run.sc.evaluations})
            if durable is not None:
                durable.record(study.trials[t.number], value, violation,
                               {"feasible": feasible, "evaluations": int(run.sc.evaluations)})
            runs[t.number] = run
        asked += k
        if on_batch is not None:
            on_batch(k)
    return BayesOutcome(pd.DataFrame(rows), runs, asked)


def hardware_points(space: FamilySpace) -> int:
    """How many hardware choices `hardware_of` can sample (power caps on its `CAP_STEP` grid)."""
    n = len(space.prompt_batch_caps) * len(space.prefill_chunks) * len(space.mps_shares)
    for _, pool in _pools(space):
        n *= len(pool.choices) * _cap_steps(pool)
    return n


def _cap_steps(pool: PoolSpace) -> int:
    lo, hi = pool.power_cap
    return int(np.floor((hi - lo) / CAP_STEP + 1e-9)) + 1


def _point(space: FamilySpace, hw: dict) -> tuple:
    """A hardware choice as a key: each power cap as its step on the pool's grid (from the low end)."""
    key = dict(hw)
    for name, pool in _pools(space):
        step = int(round((float(hw[f"{name}_power_cap"]) - pool.power_cap[0]) / CAP_STEP))
        key[f"{name}_power_cap"] = min(max(step, 0), _cap_steps(pool) - 1)
    return tuple(sorted(key.items()))


def _outgrown(run: StaircaseRun, top: tuple[int, int]) -> bool:
    """Every design of the run's count grid is known to fail (its largest among them), and
    the grid can still grow."""
    return not np.isfinite(run.best_objective) and not _box_has_unknown(run) and _doubled(top) != top


def _doubled(top: tuple[int, int]) -> tuple[int, int]:
    return tuple(min(2 * n, MAX_DESIGN_MACHINES) for n in top)


def _box_has_unknown(run: StaircaseRun) -> bool:
    return bool(np.any(run.sc.verdicts() == -1))


def _pools(space: FamilySpace):
    return [("prompt", space.prompt)] + ([("token", space.token)] if space.token is not None else [])


def _label(machine: str, tp: int, pool: PoolSpace) -> str:
    return machine if len(pool.tps(machine)) <= 1 else f"{machine}/tp{tp}"


def hardware_of(space: FamilySpace, trial) -> dict:
    """The hardware a trial samples: per pool a (machine type, TP degree) choice and a power
    cap, and the prompt batch cap (fixed choices are not parameters). TP 0: whole machine."""
    hw = {"prompt_batch_cap_tokens": int(_cat(trial, "prompt_batch_cap_tokens", space.prompt_batch_caps)),
          "prefill_chunk_tokens": int(_cat(trial, "prefill_chunk_tokens", space.prefill_chunks)),
          "mps_prefill_share": float(_cat(trial, "mps_prefill_share", space.mps_shares))}
    for name, pool in _pools(space):
        choices = pool.choices
        labels = [_label(m, d, pool) for m, d in choices]
        label = labels[0] if len(labels) == 1 else trial.suggest_categorical(f"{name}_hardware", labels)
        machine, tp = choices[labels.index(label)]
        hw.update({f"{name}_machine": machine, f"{name}_tp": int(tp), f"{name}_power_cap": _cap(
            trial, f"{name}_power_cap", pool)})
    return hw


def fixed_space(space: FamilySpace, hw: dict, max_prompt: int, max_token: int) -> FamilySpace:
    """The count grid of one hardware choice."""
    def pool(name, max_machines):
        m, tp = str(hw[f"{name}_machine"]), int(hw.get(f"{name}_tp", 0))
        return PoolSpace((m,), (float(hw[f"{name}_power_cap"]),) * 2, ((m, (tp,)),) if tp else (),
                         max_machines=int(max_machines))
    token = pool("token", max_token) if space.token is not None else None
    chunk = int(hw.get("prefill_chunk_tokens", space.prefill_chunks[0]))
    share = float(hw.get("mps_prefill_share", space.mps_shares[0]))
    return FamilySpace(space.family, pool("prompt", max_prompt), token, (int(hw["prompt_batch_cap_tokens"]),),
                       (chunk,), (share,), space.duplicate_weights, label=space.label, catalog=space.catalog)


def type_seeds(space: FamilySpace) -> list[dict]:
    """Every combination of (machine type, TP) choices at the top of the cap range (none if too many)."""
    combos = [{}]
    for name, pool in _pools(space):
        combos = [{**c, f"{name}_machine": m, f"{name}_tp": d, f"{name}_power_cap": pool.power_cap[1]}
                  for c in combos for m, d in pool.choices]
    if len(combos) <= 1 or len(combos) > MAX_TYPE_SEEDS:
        return []
    return [{**c, "prompt_batch_cap_tokens": space.prompt_batch_caps[0],
             "prefill_chunk_tokens": space.prefill_chunks[0], "mps_prefill_share": space.mps_shares[0]}
            for c in combos]


def _params_of(space: FamilySpace, hw: dict) -> dict:
    """Trial parameters that reproduce a hardware dict (for `study.enqueue_trial`)."""
    params = {}
    for name, pool in _pools(space):
        if len(pool.choices) > 1 and f"{name}_machine" in hw:
            m = hw[f"{name}_machine"]
            tp = int(hw.get(f"{name}_tp", 0)) or (pool.tps(m) or (0,))[0]
            params[f"{name}_hardware"] = _label(m, tp, pool)
        lo, hi = pool.power_cap
        if lo != hi and f"{name}_power_cap" in hw:
            params[f"{name}_power_cap"] = float(np.round(np.clip(hw[f"{name}_power_cap"], lo, hi) / CAP_STEP)
                                                * CAP_STEP)
    if len(space.prompt_batch_caps) > 1 and "prompt_batch_cap_tokens" in hw:
        params["prompt_batch_cap_tokens"] = int(hw["prompt_batch_cap_tokens"])
    if len(space.prefill_chunks) > 1 and "prefill_chunk_tokens" in hw:
        params["prefill_chunk_tokens"] = int(hw["prefill_chunk_tokens"])
    if len(space.mps_shares) > 1 and "mps_prefill_share" in hw:
        params["mps_prefill_share"] = float(hw["mps_prefill_share"])
    return params


def _cat(trial, name: str, choices):
    choices = tuple(choices)
    return choices[0] if len(choices) == 1 else trial.suggest_categorical(name, list(choices))


def _cap(trial, name: str, pool: PoolSpace) -> float:
    lo, hi = pool.power_cap
    if lo == hi:
        return float(hi)
    return float(trial.suggest_float(name, lo, hi, step=CAP_STEP))
