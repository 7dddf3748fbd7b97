"""Which requests a split plan's prefill -> decode pairs hold, as routing classes
(`Holding`): the long requests that only some replicas' KV budgets fit are routed on the
pairs that hold them, each class with its own share and its own KV bytes
(`Scorer.holding`; the routing LPs' arcs, `_routing.RoutingLP.arcs`)."""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

@dataclass(frozen=True)
class HeldClass:
    """Requests of a split plan that the same usable prefill -> decode pairs hold."""

    pairs: np.ndarray    # (p, d) bool: the usable pairs that hold them
    share: float         # their share of the held requests
    sample: np.ndarray   # (r,) bool: which requests of the scored sample (`Workload`) they are
    mean_prompt: float   # their mean prompt tokens, over every request KV fit is judged on

    @functools.cached_property
    def key(self) -> bytes:
        """`sample` as a cache key, built and hashed once (`Scorer.class_rate`)."""
        return self.sample.tobytes()


@dataclass(frozen=True)
class Holding:
    """Which requests a split plan's prefill -> decode pairs hold, as routing classes.

    A request is held by the usable pairs (i, j) whose prefill replica holds its prompt and
    whose decode replica holds it whole. When some usable pairs cannot hold some requests,
    the held requests form classes by the pairs that hold them (`classes`), and the routing
    LPs carry each class on its own pairs with its own KV bytes (`Scorer.arcs`): else the
    engines' routing would leave the long requests no pair to go to, and the links would
    carry them as average ones. No classes: every usable pair holds every held request."""

    unheld: float                  # share of the requests no usable pair holds
    classes: tuple = ()            # `HeldClass` per set of holding pairs (none: every pair holds all)
    nested: bool = True            # whether of any two classes' pairs one set holds the other
    # the mean of `unheld` and the shares whose prompt no prefill replica holds and whose
    # whole KV no decode replica holds: a slope for the search where a pair needs both
    shortfall: float = 0.0

    @classmethod
    def of(cls, sizes, sample_sizes, prefill_caps, decode_caps, usable, counted=None) -> "Holding":
        """sizes, sample_sizes: (prompt tokens, whole KV tokens) of every request KV fit is
        judged on and of the scored sample; prefill_caps (p,), decode_caps (d,): the
        replicas' KV budgets; usable (p, d). A request fits the budgets at least as large
        as its size, so the replicas that hold it follow from its rank among the sorted
        budgets: requests are counted by that pair of ranks (`count_ranks`; `counted`: its
        result for these sorted budgets, which many plans share)."""
        r = len(sizes[0])
        if r == 0:
            return cls(0.0)
        p_sorted, d_sorted = np.sort(prefill_caps), np.sort(decode_caps)
        p, d = len(p_sorted), len(d_sorted)
        if counted is None:
            counted = cls.count_ranks(sizes, sample_sizes, p_sorted, d_sorted)
        codes, counts, prompt_per_code, sample_code = counted
        ranks = np.stack([codes // (d + 1), codes % (d + 1)], axis=1)

        def fits(rank, caps, sorted_caps):
            return caps >= sorted_caps[rank] if rank < len(sorted_caps) else np.zeros(len(caps), dtype=bool)

        masks = [np.outer(fits(a, prefill_caps, p_sorted), fits(b, decode_caps, d_sorted)) & usable for a, b in ranks]
        held = np.array([m.any() for m in masks])
        n_held = int(counts[held].sum())
        shortfall = (1.0 - n_held / r + float(counts[ranks[:, 0] == p].sum()) / r
                     + float(counts[ranks[:, 1] == d].sum()) / r) / 3.0
        if n_held == 0:
            return cls(1.0, shortfall=shortfall)
        unheld = 1.0 - n_held / r
        if all(int(m.sum()) == int(usable.sum()) for m, h in zip(masks, held) if h):
            return cls(unheld, shortfall=shortfall)   # every usable pair holds every held request
        by_pairs: dict = {}   # the held codes grouped by the pairs that hold them
        for k in np.flatnonzero(held):
            by_pairs.setdefault(masks[k].tobytes(), []).append(k)
        shares = [float(counts[ks].sum()) / n_held for ks in by_pairs.values()]
        means = [float(prompt_per_code[codes[ks]].sum() / counts[ks].sum()) for ks in by_pairs.values()]
        pairs = [masks[ks[0]] for ks in by_pairs.values()]
        class_of_code = np.full(len(prompt_per_code), -1)   # -1: unheld, or a sample size the trace lacks
        for k, ks in enumerate(by_pairs.values()):
            class_of_code[codes[ks]] = k
        sample_class = class_of_code[sample_code]
        classes = tuple(HeldClass(pairs[k], shares[k], sample_class == k, means[k]) for k in range(len(pairs)))
        within = lambda a, b: not (a & ~b).any()   # a's pairs among b's
        nested = all(within(a, b) or within(b, a) for k, a in enumerate(pairs) for b in pairs[:k])
        return cls(unheld, classes, nested=nested, shortfall=shortfall)

    @staticmethod
    def count_ranks(sizes, sample_sizes, p_sorted, d_sorted) -> tuple:
        """(codes present, requests per code, prompt tokens per code (every code), the sample's
        codes): a request's code is rank_p (d + 1) + rank_d, its ranks the number of sorted
        budgets too small for its prompt and for its whole KV (it fits those from that rank
        on). Codes are below (p + 1)(d + 1): counted, not sorted."""
        d = len(d_sorted)

        def code(prompt, need):
            return np.searchsorted(p_sorted, prompt, side="left") * (d + 1) + np.searchsorted(d_sorted, need,
                                                                                              side="left")
        request_code = code(*sizes)
        per_code = np.bincount(request_code, minlength=(len(p_sorted) + 1) * (d + 1))
        prompt_per_code = np.bincount(request_code, weights=np.asarray(sizes[0], dtype=float), minlength=len(per_code))
        codes = np.flatnonzero(per_code)
        return codes, per_code[codes], prompt_per_code, code(*sample_sizes)

    def split(self, flow: np.ndarray) -> list | None:
        """A routing's flow (p, d) split among the classes, each its share on its own pairs
        ([(p, d) per class]), or None when this split finds none: where the classes nest,
        the innermost take their shares first, from each of their pairs in proportion to
        what is left on it, and that finds a split whenever one exists (Hall's condition);
        where they do not nest, None (the LP's to judge)."""
        if not self.nested:
            return None
        total, left = float(flow.sum()), flow.astype(float).copy()
        parts = [None] * len(self.classes)
        for k in sorted(range(len(self.classes)), key=lambda m: int(self.classes[m].pairs.sum())):
            c = self.classes[k]
            room = float(left[c.pairs].sum())
            need = c.share * total
            if need > room * (1.0 + 1e-9):
                return None
            parts[k] = np.where(c.pairs, left, 0.0) * (min(need / room, 1.0) if room > 0 else 0.0)
            left -= parts[k]
        return parts
