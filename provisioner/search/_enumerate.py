"""Enumeration of a count grid (Splitwise's Fig. 12 space) by its feasibility frontier.

Adding a machine to a pool never makes a design worse in the simulator, so feasibility
is monotone on the (prompt count, token count) grid: if (p, t) meets every SLO, so does
every (p', t') >= (p, t). The feasible region is then a staircase: in each token column
t the feasible prompt counts are those >= h(t), and h is non-increasing in t. The
search keeps, per column, the largest prompt count known infeasible (`lo`) and the
smallest known feasible (`hi`), asks one batched simulation per round for points inside
the open intervals, and propagates every answer along the staircase (a feasible cell
makes the cells to its upper right feasible, an infeasible one those to its lower left
infeasible). Every cell of the grid ends with a verdict after O(columns x log rows)
simulations instead of columns x rows.

With an objective (cost or power, increasing in both counts) and `decide_all=False`,
columns whose cheapest undecided cell costs more than the best feasible cell found are
dropped: that is the frontier strategy of the cost and power goals. With a lower bound
on the objective (the integer program's), cells below it start as infeasible.

Monotonicity is a property of the simulator, not a law: answers that contradict it are
counted (`violations`) and the direct observation wins.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ..designs import DESIGN_FIELDS, DesignBatch
from ._space import FamilySpace

DEFAULT_PER_ROUND = 24


@dataclass
class Staircase:
    """The verdicts of a count grid.

    prompt_counts : (P,) sorted prompt (or baseline machine) counts.
    token_counts : (T,) sorted token counts ((0,) for a baseline).
    lo : (T,) index into prompt_counts + 1 of the largest count known infeasible (0: none).
    hi : (T,) index + 1 of the smallest count known feasible (P + 1: none).
    """

    prompt_counts: np.ndarray
    token_counts: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    simulated: set = field(default_factory=set)
    violations: int = 0
    evaluations: int = 0
    rounds: int = 0

    @property
    def shape(self) -> tuple[int, int]:
        return len(self.prompt_counts), len(self.token_counts)

    def verdicts(self) -> np.ndarray:
        """(P, T) int8: 1 feasible, 0 infeasible, -1 undecided."""
        P, T = self.shape
        rank = np.arange(1, P + 1)[:, None]
        out = np.full((P, T), -1, np.int8)
        out[rank >= self.hi[None, :]] = 1
        out[rank <= self.lo[None, :]] = 0
        return out

    def frontier(self) -> list[tuple[int, int]]:
        """(prompt count, token count) of the cheapest feasible cell of each column."""
        P = len(self.prompt_counts)
        return [(int(self.prompt_counts[h - 1]), int(t)) for h, t in zip(self.hi, self.token_counts) if h <= P]

    def feasible_cells(self) -> tuple[np.ndarray, np.ndarray]:
        """Prompt and token counts of every cell known or inferred feasible."""
        v = self.verdicts()
        i, j = np.nonzero(v == 1)
        return self.prompt_counts[i], self.token_counts[j]


def _propagate(lo: np.ndarray, hi: np.ndarray) -> int:
    """Monotone closure along the token axis, in place; returns the number of contradictions."""
    np.minimum.accumulate(hi, out=hi)
    lo[:] = np.maximum.accumulate(lo[::-1])[::-1]
    bad = lo >= hi
    lo[bad] = hi[bad] - 1
    return int(bad.sum())


def _points(lo: int, hi: int, k: int) -> list[int]:
    """Up to k ranks strictly between lo and hi, evenly spaced."""
    width = hi - lo
    return sorted({lo + int(round(j * width / (k + 1))) for j in range(1, k + 1)} - {lo, hi})


class StaircaseRun:
    """One frontier search as a proposer: `propose()` the cells to simulate next,
    `update()` with their verdicts; `lockstep` drives many runs with one simulation per
    round. Parameters as `staircase_search`."""

    def __init__(self, space: FamilySpace, *, objective: Callable | None = None, lower_bound: float | None = None,
                 decide_all: bool = True, per_round: int = DEFAULT_PER_ROUND):
        self.space = space
        self.decide_all = decide_all
        self.per_round = int(per_round)
        P, T = len(space.prompt_counts), len(space.token_counts)
        self.sc = Staircase(space.prompt_counts, space.token_counts, np.zeros(T, np.int64),
                            np.full(T, P + 1, np.int64))
        self.obj_grid = None
        if objective is not None:
            pp, tt = np.meshgrid(space.prompt_counts, space.token_counts, indexing="ij")
            self.obj_grid = np.asarray(objective(pp.ravel(), tt.ravel()), dtype=float).reshape(P, T)
            if lower_bound is not None and np.isfinite(lower_bound):
                # the objective rises with the prompt count: the cells below the bound are a prefix
                self.sc.lo[:] = np.sum(self.obj_grid < lower_bound * (1 - 1e-9), axis=0)
        self.sc.violations += _propagate(self.sc.lo, self.sc.hi)

    @property
    def best_objective(self) -> float:
        """Least objective over the cells known feasible (inf if none)."""
        sc = self.sc
        done = np.flatnonzero(sc.hi <= len(sc.prompt_counts))
        if self.obj_grid is None or not len(done):
            return float("inf")
        return float(min(self.obj_grid[sc.hi[j] - 1, j] for j in done))

    def open_columns(self, incumbent: float | None = None) -> np.ndarray:
        sc = self.sc
        cols = np.flatnonzero(sc.hi - sc.lo > 1)
        if self.decide_all or self.obj_grid is None or not len(cols):
            return cols
        best = min(self.best_objective, float("inf") if incumbent is None else float(incumbent))
        if np.isfinite(best):
            cheapest_open = self.obj_grid[sc.lo[cols], cols]   # rank lo+1 -> index lo
            cols = cols[cheapest_open <= best * (1 + 1e-9)]
        return cols

    def propose(self, incumbent: float | None = None) -> list[tuple[int, int]]:
        """(rank, column) cells to simulate next; empty when the search is over."""
        sc = self.sc
        cols = self.open_columns(incumbent)
        if not len(cols):
            return []
        if len(cols) > self.per_round:
            pick = np.unique(np.round(np.linspace(0, len(cols) - 1, self.per_round)).astype(int))
            queries = [(j, _points(sc.lo[j], sc.hi[j], 1)) for j in cols[pick]]
        else:
            k = max(1, self.per_round // len(cols))
            queries = [(j, _points(sc.lo[j], sc.hi[j], k)) for j in cols]
        return [(r, int(j)) for j, ranks in queries for r in ranks]

    def designs(self, cells) -> DesignBatch:
        ranks = np.array([r for r, _ in cells])
        cols = np.array([j for _, j in cells])
        return self.space.designs(self.sc.prompt_counts[ranks - 1], self.sc.token_counts[cols])

    def update(self, cells, met) -> None:
        sc = self.sc
        for (r, j), ok in zip(cells, met):
            sc.simulated.add((int(sc.prompt_counts[r - 1]), int(sc.token_counts[j])))
            if ok:
                sc.hi[j] = min(sc.hi[j], r)
            else:
                sc.lo[j] = max(sc.lo[j], r)
        sc.violations += _propagate(sc.lo, sc.hi)
        sc.evaluations += len(cells)
        sc.rounds += 1


def staircase_search(space: FamilySpace, evaluate: Callable, *, objective: Callable | None = None,
                     lower_bound: float | None = None, decide_all: bool = True,
                     per_round: int = DEFAULT_PER_ROUND, on_round: Callable[[Staircase], None] | None = None,
                     ) -> Staircase:
    """Decide the feasibility of every cell of a count grid (see the module docstring).

    Parameters
    ----------
    space : a grid space (`space.is_grid`).
    evaluate : designs -> frame with `slo_met` (the evaluator).
    objective : (prompt counts, token counts) arrays -> objective array, increasing in
        both; used for the lower bound and, with `decide_all=False`, to stop early.
    lower_bound : cells with objective below it start infeasible.
    decide_all : decide every cell (enumeration) or only what the optimum needs.
    per_round : designs per batched simulation.
    """
    run = StaircaseRun(space, objective=objective, lower_bound=lower_bound, decide_all=decide_all,
                       per_round=per_round)
    while True:
        cells = run.propose()
        if not cells:
            return run.sc
        run.update(cells, evaluate(run.designs(cells))["slo_met"].to_numpy(bool))
        if on_round is not None:
            on_round(run.sc)


def lockstep(runs: list[StaircaseRun], evaluate: Callable, *, incumbent: float = float("inf")) -> float:
    """Drive many frontier searches together: each round, ONE batched simulation of every
    run's proposals. Columns costlier than the best design found by any run are dropped.
    Returns the best objective found (or `incumbent`)."""
    best = float(incumbent)
    while True:
        proposals = [(run, run.propose(best)) for run in runs]
        proposals = [(run, cells) for run, cells in proposals if cells]
        if not proposals:
            return best
        batch = concat_batches([run.designs(cells) for run, cells in proposals])
        met = evaluate(batch)["slo_met"].to_numpy(bool)
        start = 0
        for run, cells in proposals:
            run.update(cells, met[start:start + len(cells)])
            start += len(cells)
            best = min(best, run.best_objective)


def concat_batches(batches: list[DesignBatch]) -> DesignBatch:
    """One batch holding the designs of several, in order."""
    return DesignBatch({k: np.concatenate([b.columns[k] for b in batches]) for k in DESIGN_FIELDS})


def exhaustive_search(space: FamilySpace, evaluate: Callable, *, batch: int = 256,
                      on_round: Callable | None = None) -> pd.DataFrame:
    """Simulate every cell of the grid (for a complete heatmap); returns the scored frame."""
    pp, tt = np.meshgrid(space.prompt_counts, space.token_counts, indexing="ij")
    pp, tt = pp.ravel(), tt.ravel()
    frames = []
    for start in range(0, len(pp), batch):
        frames.append(evaluate(space.designs(pp[start:start + batch], tt[start:start + batch])))
        if on_round is not None:
            on_round(None)
    return pd.concat(frames, ignore_index=True)
