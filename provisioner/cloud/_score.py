"""Fast analytic score of a plan: each replica's sustainable rate under the SLOs, each
prefill -> decode pair's KV transfers over the real links, and (mixed in from
`_routing.RoutingLP`) the routing LP, ThunderServe's two-stage transportation problem.

- prefill replica: M/G/1 at the rate where the mean TTFT (service + Pollaczek-Khinchine
  wait) equals the p50 TTFT limit: rho = k / (1 + k), k = 2 slack E[S] / E[S^2];
- decode replica: the lesser of two limits (`Scorer.decode_limits`): the batch its KV
  holds at the mean request, less square-root staffing ("slots"), and the rate at which
  first-come first-served admission of whole requests into its KV budget (a stochastic
  knapsack: `_admission.py`) makes at most 1 - target of the requests miss a p99
  deadline ("admission"); each with its mean batch's iteration within the p50 TBT limit;
- non-split replica ("both"): prefills interleave with decodes, stretching each decode
  step by 1 / (1 - rho_prefill); the largest rate meeting the prefill rule and the slots
  limit (bisection; `Scorer.both` says why not the admission limit);
- a prefill -> decode pair is usable when its mean KV transfer fits in the p50 E2E slack
  left by the two replicas and at most 1 - target of its requests miss a p99 deadline for
  their transfer alone (it counts in the TBT: a short output cannot absorb a slow one);
  each shared inter-node link (a directed node pair's, a node's NIC per direction:
  `Physics.links`) carries KV bytes up to the busy fraction at which the waits behind
  other transfers keep those misses within 1 - target (`Scorer.network_limit`);
- requests that only some pairs hold (long ones: `_holding.Holding`) are routed as
  classes, each its share of the requests on its own pairs, with its own mean prompt of KV.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace
import numpy as np

from perfmodels import LAYERWISE_MIN_PROMPT_TOKENS, decode_token_s, time_from_coefficients

from ._admission import KvAdmission
from ._holding import Holding
from ._routing import RoutingLP

TARGET_ATTAINMENT = 0.99   # share of requests within every p99 limit a plan is judged at
# bisection steps on the admission limit's offered load (`Scorer._admission_limit`): 2^-24
# of the range
_LOAD_BISECTIONS = 24
_MAX_BATCH = 512   # the slots limit's largest batch
# offered loads a decode iteration is tabulated at (`Scorer._step_curve`), interpolated between
_LOAD_POINTS = 512
_WAIT_BISECTIONS = 20   # bisection steps on a link's utilization (`Scorer.network_limit`)


@dataclass(frozen=True)
class Workload:
    """The request sizes a plan is scored on and the SLO's per-request reference latencies."""

    prompt_tokens: np.ndarray   # (r,) sample of prompt sizes
    output_tokens: np.ndarray   # (r,)
    ttft_limit_s: float         # mean budgets: p50 limit x mean reference latency
    tbt_limit_s: float
    e2e_limit_s: float
    ttft_p50_s: np.ndarray      # (r,) each request's p50 TTFT limit (p50 limit x its reference)
    tbt_p99_s: np.ndarray       # (r,) its p99 TBT limit (inf for one-token requests)
    e2e_p99_s: np.ndarray       # (r,) its p99 E2E limit
    target: float = TARGET_ATTAINMENT   # a decode replica lets at most 1 - target miss
    # the sizes KV fit is judged on (`Scorer.holding`; None: the sample's): every request of
    # the trace, so that a replayed file's long prompts past the sample are not missed
    fit_prompt_tokens: np.ndarray | None = None
    fit_output_tokens: np.ndarray | None = None

    def subset(self, keep: np.ndarray) -> "Workload":
        """The requests `keep` of the sample, each mean budget scaled as its requests' own
        limits are (the same workload when all are kept)."""
        if keep.all():
            return self

        def scaled(limit, per_request):
            finite = np.isfinite(per_request)
            mine, every = per_request[keep & finite], per_request[finite]
            return limit * float(mine.mean()) / float(every.mean()) if mine.size and every.mean() > 0 else limit

        return replace(self, prompt_tokens=self.prompt_tokens[keep], output_tokens=self.output_tokens[keep],
                       ttft_limit_s=scaled(self.ttft_limit_s, self.ttft_p50_s),
                       tbt_limit_s=scaled(self.tbt_limit_s, self.tbt_p99_s),
                       e2e_limit_s=scaled(self.e2e_limit_s, self.e2e_p99_s),
                       ttft_p50_s=self.ttft_p50_s[keep], tbt_p99_s=self.tbt_p99_s[keep],
                       e2e_p99_s=self.e2e_p99_s[keep])

    @functools.cached_property
    def mean_prompt(self) -> float:
        return float(self.prompt_tokens.mean())

    @functools.cached_property
    def mean_output(self) -> float:
        return float(self.output_tokens.mean())

    @functools.cached_property
    def decode_steps(self) -> np.ndarray:
        """(r,) decode iterations of each request (n - 1), as floats."""
        return np.maximum(self.output_tokens.astype(float) - 1.0, 0.0)

    @functools.cached_property
    def kv_tokens_held(self) -> float:
        """KV tokens a running request holds on average over decode time: s + n weighted by
        the n - 1 iterations it holds them (Little's law; long decodes hold longer)."""
        size = self.prompt_tokens + self.output_tokens
        return float((size * self.decode_steps).sum() / max(self.decode_steps.sum(), 1.0))

    @property
    def context_held(self) -> float:
        """Context tokens of a running request, s + n / 2 at the means (the decode limits'
        iteration cost per request)."""
        return self.mean_prompt + self.mean_output / 2.0

@dataclass(frozen=True)
class TransferRoom:
    """A prefill -> decode pair's requests and their KV transfers (`Scorer._transfer_room`)."""

    missed: float                 # share whose transfer alone misses a deadline
    room: np.ndarray              # the wait each of the others may add, s
    requests: int                 # the requests the shares are of: the pair's, or all for a class
    service: np.ndarray | None    # sorted link-seconds of each on its busiest shared link (None: in-node)
    # the share of that link time past the request's own prefill, E[(S - prefill)+] / E[S]:
    # what a replica's next transfer can find of its own still on the link
    overrun: float = 0.0

    @functools.cached_property
    def _excess(self) -> np.ndarray:
        """E[(S - t)+] / E[S] at each request's room t (`misses`): rho-free, so computed once."""
        s = self.service
        tail = np.concatenate([np.cumsum(s[::-1])[::-1], [0.0]])   # sum of s[k:]
        k = np.searchsorted(s, self.room, side="right")
        return (tail[k] - self.room * (len(s) - k)) / float(s.sum())

    def misses(self, rho: float, senders: int) -> float:
        """Share of the pair's requests that miss with the busiest link at busy fraction rho
        shared by `senders` prefill replicas (`Scorer.network_limit`)."""
        others = 1.0 - (1.0 - self.overrun) / senders   # the busy share a transfer can wait behind
        ratio = rho / (1.0 - rho) if rho < 1.0 else np.inf
        with np.errstate(invalid="ignore"):   # rho = 1: every wait that can miss does (inf x 0 for those that cannot)
            waits = np.where(self._excess > 0, np.minimum(ratio * self._excess, rho), 0.0)
        return self.missed + others * float(waits.sum()) / self.requests

_HOLDS_ALL = Holding(0.0)   # every request fits every replica of the plan


class SharedRates:
    """What a `Scorer` computes of one replica or one prefill -> decode pair, keyed by the
    numbers it is computed from (a replica's iteration vector and KV budget; a pair's
    transfer terms, `Scorer._room_key`), not by the nodes that hold them: replicas and
    pairs of one physics share it, on the interchangeable nodes of one inventory and, given
    to several scorers, across inventories. `--goal cost` gives one to every rental of a
    price list it plans (the same requests, SLOs and KV bits: `admit` refuses another
    question's): coding on cloud-prices at 4 req/s planned eight rentals with 8,438 pairs'
    transfer terms and 12,411 transfer rooms, of which 1,504 and 2,717 differ. Pickles
    empty: a worker computes its own (the store of a price list's rentals is tens of MB)."""

    def __init__(self):
        self.values: dict = {}
        self.admissions: dict = {}   # (KV budget (tokens), among) -> its `KvAdmission`
        self.held: dict = {}   # (KV budget, whole, among) -> the requests it holds (`Scorer._held`)
        self._question = None   # (workload, KV bits, model name) of the values

    def admit(self, workload: Workload, kv_bits: int, model: str) -> None:
        """Take a scorer's question; one whose requests, limits, KV bits or model differ
        from the values' is refused (they would be another question's)."""
        question = (workload, int(kv_bits), model)
        if self._question is None:
            self._question = question
        elif not _same_question(self._question, question):
            raise ValueError("SharedRates holds another question's rates (requests, SLOs, KV bits or model)")

    def __reduce__(self):
        return SharedRates, ()


def _same_question(a, b) -> bool:
    """Whether two (workload, KV bits, model) are one question: every field equal."""
    def same(x, y):
        if x is None or y is None:
            return x is None and y is None
        return bool(np.array_equal(np.asarray(x), np.asarray(y), equal_nan=True))

    return a[1:] == b[1:] and (a[0] is b[0] or all(same(getattr(a[0], f), getattr(b[0], f))
                                                   for f in a[0].__dataclass_fields__))


class Scorer(RoutingLP):
    """Rates per replica (cached per group), pairs and links, and the routing LP of a plan.
    shared : a `SharedRates` to take and give the replicas' and pairs' values (default: one
    of its own)."""

    def __init__(self, physics, workload: Workload, kv_bits: int = 16, shared: SharedRates | None = None):
        self.ph, self.w, self.kv_bits = physics, workload, int(kv_bits)
        self._shared = SharedRates() if shared is None else shared
        self._shared.admit(workload, self.kv_bits, physics.llm.name)
        self._rates: dict = {}
        self._pairs: dict = {}
        self._plans: dict = {}
        self._throughputs: dict = {}
        self.lp_solves = 0

    # -- per replica ------------------------------------------------------------
    def prefill(self, group) -> tuple[float, float]:
        """(sustainable rps, mean service s) of a prefill replica."""
        key = ("p", group)
        if key not in self._rates:
            self._rates[key] = self._alike("p", group, lambda g: self._prefill(g.coef, self._held(g.kv_cap_tokens,
                                                                                                  whole=False)))
        return self._rates[key]

    def _alike(self, kind, group, rate):
        """rate(group's physics), computed once per (kind, KV budget, iteration vector): all
        a replica's rates read of its group, so groups alike share them (`SharedRates`)."""
        g = self.ph.group(group)
        same = (kind, float(g.kv_cap_tokens), g.coef.tobytes())
        alike = self._shared.values
        if same not in alike:
            alike[same] = rate(g)
        return alike[same]

    def _prefill_moments(self, coef, w) -> tuple[float, float]:
        """(E[S], E[S^2]) of a prompt's prefill time s over `w`'s prompts on a replica with this vector."""
        s = w.prompt_tokens.astype(float)
        t = time_from_coefficients(coef, prefill_tokens=s, prefill_sq_tokens=s * s, prefill_seqs=1.0)
        return float(t.mean()), float((t * t).mean())

    def _prefill(self, coef, w):
        """(rps, mean service s) of an M/G/1 prefill queue over `w`'s prompts (None: it holds none)."""
        if w is None:
            return 0.0, np.inf
        es, es2 = self._prefill_moments(coef, w)
        return _prefill_rate(es, es2, w.ttft_limit_s), es

    def decode(self, group) -> tuple[float, float]:
        """(sustainable rps, iteration s at that rate) of a decode replica: the lesser of
        its two limits (`decode_limits`)."""
        key = ("d", group)
        if key not in self._rates:
            self._rates[key] = self._alike("d", group, self._decode)
        return self._rates[key]

    def _decode(self, g) -> tuple[float, float]:
        """`decode` of a group's physics `g`."""
        slots = self._slots_limit(g.coef, g.kv_cap_tokens, 0.0)
        return min(slots, self._admission_limit(g.coef, g.kv_cap_tokens, 0.0, slots[0]), key=lambda r: r[0])

    def class_rate(self, group, phase, among, key: bytes | None = None) -> float | None:
        """Sustainable rps of a prefill or decode replica serving only the requests `among`
        of the sample (a routing class: `HeldClass.sample`); None when the sample has none
        of them that the replica holds. Prefill: the rule of `prefill`. Decode: the rule
        of `decode` where the slots rule gives a rate; else (a budget or a TBT limit that
        allows a batch of one) the admission limit alone (`decode_limits`), the one made
        for requests few of which fit the budget at once (the slots rule's square-root
        staffing leaves no headroom at one slot). key : `among.tobytes()`, when the caller
        has it."""
        among_key = among.tobytes() if key is None else key
        key = (phase, group, among_key)
        if key not in self._rates:
            g = self.ph.group(group)
            # groups of one physics (the same stages on interchangeable nodes) share a rate:
            # on coding 166 rates serve 214 (group, class) pairs
            alike = (phase, float(g.kv_cap_tokens), g.coef.tobytes(), among_key)
            if alike not in self._shared.values:
                self._shared.values[alike] = self._class_rate(g, phase, among)
            self._rates[key] = self._shared.values[alike]
        return self._rates[key]

    def _class_rate(self, g, phase, among) -> float | None:
        w = self._held(g.kv_cap_tokens, whole=phase == "decode", among=among)
        if w is None:
            return None
        if phase == "prefill":
            return self._prefill(g.coef, w)[0]
        slots = self._slots_limit(g.coef, g.kv_cap_tokens, 0.0, among=among)[0] or np.inf
        return min(slots, self._admission_limit(g.coef, g.kv_cap_tokens, 0.0, slots, among=among)[0])

    def class_costs(self, pg, dg) -> tuple[np.ndarray, np.ndarray]:
        """(prefill (p, classes), decode (d, classes)): the capacity a request of each
        routing class (`holding`) takes on each replica of a split plan, in units of the
        replica's rate on the whole mix it holds (`prefill`, `decode`): that rate over
        `class_rate`, at least 1. The routing LPs time-share a replica among its classes
        (sum of requests/s x cost <= its rate): a 100k-token prompt takes 30.5 s of the 8x
        A40, not the 1 / 0.16 s of an average request of the mix it holds, so where 5% of
        the requests are such prompts a plan whose A40 alone prefills them scores 0.56
        req/s, not the 1.34 its rate on the mix allowed (docs/cloud.md, "Steady state").
        At least 1: a class of shorter requests than the mix may not push a replica past
        its rate on the mix (conservative; it keeps min(P, D) a bound on every routing, so
        the shortcut past the LP stands: `_time_shared`). At most the class's work over the
        mix's (`_work_ratio`: a class served as the mix is, at the mix's margin): where
        the class's own rule allows it little or no rate (it misses its limits there at
        any load), its requests still take only their work, and the cost does not leap
        from finite to infinite as that rate falls to 0. A class the target lets miss whole
        (`_missable`: two 100k-token prompts in 200 at 99%) has no limits to meet: it costs
        the time its requests hold the replica (`_occupancy_s`) times that rate, within
        the same bounds (at --slo-scale 1 the A6000 pipeline, which misses their limits
        at any rate, was charged 37.5 requests of its mix for each, and a plan the DES
        sustains at 1.4-2 req/s scored 0.21; now 1 and 0.89). 1 where a replica carries
        one class (its rate is that class's) or the sample lacks the class (no rate to
        judge it by)."""
        key = ("costs", tuple(pg), tuple(dg))
        if key not in self._rates:
            holding = self.holding(pg, dg)
            missable = self._missable(holding)
            p_cap = [self.prefill(g)[0] for g in pg]
            d_cap = [self.decode(g)[0] for g in dg]
            self._rates[key] = (self._side_costs(pg, "prefill", holding, p_cap, missable),
                                self._side_costs(dg, "decode", holding, d_cap, missable))
        return self._rates[key]

    def _side_costs(self, groups, phase, holding, caps, missable) -> np.ndarray:
        """`class_costs` of one phase's replicas (rates on the mix `caps`; `missable`: the
        classes the target lets miss whole, costed by the time they hold a replica)."""
        costs = np.ones((len(groups), len(holding.classes)))
        for k, (group, cap) in enumerate(zip(groups, caps)):
            carried = [c for c, cls in enumerate(holding.classes)
                       if (cls.pairs[k] if phase == "prefill" else cls.pairs[:, k]).any()]
            if len(carried) < 2 or cap <= 0:
                continue
            for c in carried:
                cls = holding.classes[c]
                if not cls.sample.any():
                    continue   # none in the sample: no rate or work to judge it by
                work = self._work_ratio(group, phase, cls)
                if c in missable:
                    costs[k, c] = max(min(cap * self._occupancy_s(group, phase, cls), work), 1.0)
                    continue
                rate = self.class_rate(group, phase, cls.sample, cls.key)
                if rate is not None:
                    own = cap / rate if rate > 0 else np.inf
                    costs[k, c] = max(min(own, work), 1.0)
        return costs

    def _long_classes(self, holding) -> list:
        """Indices of the routing classes some usable pair does not hold (the class every
        pair holds is the mix itself)."""
        if not holding.classes:
            return []
        every = np.logical_or.reduce([cls.pairs for cls in holding.classes])
        return [k for k, cls in enumerate(holding.classes) if not (cls.pairs == every).all()]

    def _missable(self, holding) -> set:
        """Indices of the long routing classes (`_long_classes`) the target lets miss whole:
        the smallest, while together with the unheld requests they are at most 1 - target
        of the requests (2 of 200 100k-token prompts may both miss at 99%)."""
        left = 1.0 - self.w.target - holding.unheld
        out = set()
        for k in sorted(self._long_classes(holding), key=lambda k: holding.classes[k].share):
            left -= holding.classes[k].share * (1.0 - holding.unheld)
            if left < -1e-12:
                break
            out.add(k)
        return out

    def _resource_use(self, group, phase, among=None) -> tuple | None:
        """What a request of those a replica holds (of those `among`, a bool mask, when
        given) takes of it on average, per resource: prefill (its pass, s,); decode (its KV
        token-steps, (s + n) tokens for n - 1 steps: `steady_state_load`'s measure; its
        step-seconds, n - 1 steps each lengthened by its context: `_decode_seconds`).
        None when it holds none."""
        key = ("use", phase, group, None if among is None else among.tobytes())
        if key not in self._rates:
            g = self.ph.group(group)
            w = self._held(g.kv_cap_tokens, whole=phase == "decode", among=among)
            self._rates[key] = (None if w is None else (self._prefill_moments(g.coef, w)[0],) if phase == "prefill"
                                else (_token_steps(w), _decode_seconds(g.coef, w)))
        return self._rates[key]

    def _occupancy_s(self, group, phase, cls) -> float:
        """Seconds of a replica a request of class `cls` holds, on average, when its limits do
        not bind (a class the target lets miss): prefill, its pass; decode, the larger of
        its step-seconds and its KV token-steps over the budget at the iteration of the
        replica's rate (the share of the budget it holds, for how long)."""
        use = self._resource_use(group, phase, cls.sample)
        if use is None:
            return 0.0
        if phase == "prefill":
            return use[0]
        token_steps, step_s = use
        return max(step_s, token_steps * self.decode(group)[1] / self.ph.group(group).kv_cap_tokens)

    def _work_ratio(self, group, phase, cls) -> float:
        """A request of class `cls` over a request of the mix a replica holds, in work: the
        largest ratio over the resources it uses (`_resource_use`). On the A6000 pipeline, a
        100k-token prompt's decode holds 38 times the KV token-steps of the mix's mean
        request (tests' long-prompt trace, 1% of them) and adds 28 times its step-seconds;
        counted in steps alone it would cost what an average request does."""
        mix, mine = self._resource_use(group, phase), self._resource_use(group, phase, cls.sample)
        if mix is None or mine is None:
            return 1.0
        return max(_ratio(a, b) for a, b in zip(mine, mix))

    def class_capacity(self, prefill_groups, decode_groups) -> float:
        """The rate at which a split plan's routing classes of long requests saturate the
        replicas that hold them, each class on its own (`class_rate`): the least, over those
        classes, of min(its prefill replicas' rates, its decode replicas') over its share of
        the requests; inf without such classes. Not the score, which time-shares each
        replica among its classes (`class_costs`): a tie-break among plans that score alike
        (`tie_break`). A class every usable pair holds is the mix itself, and classes the
        target lets miss whole (`_missable`) or that the sample lacks set no rate."""
        holding = self.holding(prefill_groups, decode_groups)
        missable = self._missable(holding)
        out = np.inf
        for c in self._long_classes(holding):
            cls = holding.classes[c]
            if c in missable or not cls.sample.any():
                continue   # a class that may miss, or none in the sample: no rate to set
            side = lambda groups, phase, rows: sum(self.class_rate(g, phase, cls.sample) or 0.0
                                                   for g, used in zip(groups, rows) if used)
            rate = min(side(prefill_groups, "prefill", cls.pairs.any(axis=1)),
                       side(decode_groups, "decode", cls.pairs.any(axis=0)))
            out = min(out, rate / (cls.share * (1.0 - holding.unheld)))
        return out

    def _held(self, kv_cap, whole=True, among=None) -> Workload | None:
        """The requests of the sample (of those `among`, a bool mask, when given) a replica
        with this KV budget holds, None when it holds none: whole (s + n tokens, a decode
        replica) or their prompt (s, a prefill replica). A split plan's replica is rated on
        the requests it serves; the plan routes the others to replicas that hold them
        (`Holding`). Averaged in, 5% of
        60k-token outputs among 1k-token ones made the KV a running request holds 58k
        tokens and every small decode replica's slots limit 0, and 5% of 100k-token
        prompts rated an A5000 TP4 prefill replica 0.04 req/s instead of 1.9."""
        key = (float(kv_cap), bool(whole), None if among is None else among.tobytes())
        held = self._shared.held
        if key not in held:
            w = self.w
            keep = (w.prompt_tokens + w.output_tokens if whole else w.prompt_tokens) <= kv_cap
            if among is not None:
                keep = keep & among
            held[key] = w.subset(keep) if keep.any() else None
        return held[key]

    def decode_limits(self, group) -> dict:
        """A decode replica's two limits, rps each:
        - "slots": the largest batch B whose iteration meets the p50 TBT limit and whose KV,
          at the mean tokens a running request holds, fits; B / (t(B) (n - 1)) requests/s
          less one slot in sqrt(B) (square-root staffing) so that the wait for a slot stays
          short;
        - "admission": the largest rate at which first-come first-served admission of
          whole requests into the KV budget makes at most 1 - target of the requests miss a
          p99 deadline (`KvAdmission`).
        Admission binds where long prompts meet a small budget: a 13k-token replica on
        coding, where the mean says five slots and one 7k-token prompt blocks the queue
        (the slots rule rated such replicas 2-17x above the DES, benchmarks/results/
        cloud_decode_rates.md). Slots binds on the larger budgets, 5-15% under the
        admission rate and the DES: a margin like the prefill rule's (the mean TTFT within
        the p50 limit, each replica alone where the engines pool them), and the plans
        depend on the two sides' margins alike: with admission alone, conversation's plan
        moved decode GPUs to prefill and sustained 4-6% less in the DES."""
        g = self.ph.group(group)
        return {"slots": self._slots_limit(g.coef, g.kv_cap_tokens, 0.0)[0],
                "admission": self._admission_limit(g.coef, g.kv_cap_tokens, 0.0)[0]}

    def _decode_step_s(self, coef, batch, prefill_busy, w):
        """Decode iteration s at (mean) batch `batch`, each running request of `w` at the
        mean context it holds, stretched by the prefills sharing the replica."""
        b = np.maximum(batch, 1.0)
        with np.errstate(over="ignore"):   # absurd requests (a billion tokens): an infinite step, never admitted
            t = time_from_coefficients(coef, decode_batch=b, decode_context_tokens=b * w.context_held)
        return t / (1.0 - prefill_busy)

    def _slots_limit(self, coef, kv_cap, prefill_busy, held=True, among=None) -> tuple[float, float]:
        """(rps, iteration s) of the slots rule (`decode_limits`): over the requests (of
        those `among`) the budget holds (`_held`), or with held False over all (a non-split
        replica: `both`)."""
        w = self._held(kv_cap, among=among) if held else self.w
        if w is None:
            return 0.0, np.inf
        b = np.arange(1, _MAX_BATCH + 1, dtype=float)
        t = self._decode_step_s(coef, b, prefill_busy, w)
        ok = (t <= w.tbt_limit_s) & (b * w.kv_tokens_held <= kv_cap)
        if not ok.any():
            return 0.0, float(t[0])
        k = int(np.flatnonzero(ok)[-1])
        headroom = max(1.0 - 1.0 / np.sqrt(b[k]), 0.0)
        return float(headroom * b[k] / (t[k] * max(w.mean_output - 1.0, 1.0))), float(t[k])

    def _admission(self, kv_cap, among=None) -> KvAdmission:
        """The admission model of a budget over the requests (of those `among`) it holds
        whole (`_held`): its rate and miss share are of the requests the replica is sent."""
        key = (float(kv_cap), None if among is None else among.tobytes())
        admissions = self._shared.admissions
        if key not in admissions:
            admissions[key] = KvAdmission.of(self._held(kv_cap, among=among) or self.w, kv_cap)
        return admissions[key]

    def _step_curve(self, coef, prefill_busy, full_load, w) -> tuple[np.ndarray, np.ndarray]:
        """(offered loads up to the KV budget's full load, iteration s at each): the mean
        batch at offered load c (iterations of decode work per iteration) is c mean(n - 1)
        over the requests `w` the budget holds (Little's law)."""
        loads = np.linspace(0.0, full_load, _LOAD_POINTS + 1)
        with np.errstate(over="ignore"):   # a mean output of ~1e7 tokens: an infinite batch, never admitted
            batch = loads * float(w.decode_steps.mean())
        return loads, self._decode_step_s(coef, batch, prefill_busy, w)

    def _admits(self, adm, load, step, tbt_limit_s) -> bool:
        """Whether a decode replica at offered `load` with iteration `step` s stays within
        the p50 TBT limit and lets at most 1 - target of the requests miss
        (`KvAdmission.miss_share`)."""
        return step <= tbt_limit_s and adm.miss_share(load, step, load / step) <= 1.0 - self.w.target

    def _admission_limit(self, coef, kv_cap, prefill_busy, within=np.inf, among=None) -> tuple[float, float]:
        """(rps, iteration s) of the admission rule (`decode_limits`), by bisection on the
        offered load (the rate, load / step, grows with it); (0, the lone step) when no
        load is within it. within : a rate past which the limit is not needed (returned
        with its step when it is admitted: where the slots limit binds, one check instead
        of the bisection). among : over those requests only (`_held`)."""
        w = self._held(kv_cap, among=among)
        if w is None:
            return 0.0, np.inf
        adm = self._admission(kv_cap, among)
        loads, steps = self._step_curve(coef, prefill_busy, adm.full_load, w)
        hi = adm.full_load
        rates = loads[1:] / steps[1:]
        if within < rates[-1]:
            hi = float(np.interp(within, np.concatenate([[0.0], rates]), loads))
            step = float(np.interp(hi, loads, steps))
            if self._admits(adm, hi, step, w.tbt_limit_s):
                return float(within), step
        best = (0.0, float(steps[0]))
        lo = 0.0
        for _ in range(_LOAD_BISECTIONS):
            mid = 0.5 * (lo + hi)
            step = float(np.interp(mid, loads, steps))
            if self._admits(adm, mid, step, w.tbt_limit_s):
                lo, best = mid, (mid / step, step)
            else:
                hi = mid
        return best

    def both(self, group) -> float:
        """Sustainable rps of a non-split replica (mixed batching), by bisection on the rate:
        prefills interleave with decodes, stretching each decode iteration by
        1 / (1 - prefill busy); the rate must meet the prefill rule and the slots limit.
        Not the admission limit: here a request books its KV before its prefill starts, so
        a request that does not fit waits in the prompt queue (SEMANTICS.md, "Machines"),
        a wait the TTFT limit and the prefill rule's queue judge, not the TBT and E2E slack
        the admission limit spends."""
        key = ("b", group)
        if key not in self._rates:
            self._rates[key] = self._alike("b", group, self._both)
        return self._rates[key]

    def _both(self, g) -> float:
        """`both` of a group's physics `g`."""
        es, es2 = self._prefill_moments(g.coef, self.w)   # the whole mix, as the slots limit here
        lo, hi = 0.0, _prefill_rate(es, es2, self.w.ttft_limit_s)
        for _ in range(30):
            mid = 0.5 * (lo + hi)
            busy = mid * es
            # prefill slows too: its queue sees the decode iterations' share of time
            ok = busy < 1 and _mean_ttft_s(es, es2, busy) <= self.w.ttft_limit_s
            ok = ok and self._slots_limit(g.coef, g.kv_cap_tokens, busy, held=False)[0] >= mid
            lo, hi = (mid, hi) if ok else (lo, mid)
        return lo

    def both_shares(self, groups) -> np.ndarray:
        """Routing shares of a non-split plan's replicas: in proportion to their sustainable
        rates, evenly when none meets the analytic limits (a tight SLO: the engine judges)."""
        rates = np.array([self.both(g) for g in groups])
        return rates / rates.sum() if rates.sum() > 0 else np.full(len(groups), 1.0 / len(groups))

    # -- which replicas hold which requests ---------------------------------------
    @functools.cached_property
    def _fit_sizes(self) -> tuple[np.ndarray, np.ndarray, float, float]:
        """(prompt tokens, prompt + output tokens, the largest of each) of the requests KV
        fit is judged on."""
        w = self.w
        s = np.asarray(w.prompt_tokens if w.fit_prompt_tokens is None else w.fit_prompt_tokens, dtype=float)
        n = np.asarray(w.output_tokens if w.fit_output_tokens is None else w.fit_output_tokens, dtype=float)
        return s, s + n, float(s.max(initial=0.0)), float((s + n).max(initial=0.0))

    def holding(self, prefill_groups, decode_groups) -> "Holding":
        """Which requests a split plan's usable prefill -> decode pairs hold (`Holding`):
        the prompt's KV in the prefill replica and the whole request's in the decode one,
        as the engines route (`sim.plan_holds`)."""
        if self._fit_everywhere(prefill_groups, decode_groups):
            return _HOLDS_ALL
        key = ("hold", tuple(prefill_groups), tuple(decode_groups))
        if key not in self._rates:
            s, need, _, _ = self._fit_sizes
            w = self.w
            usable = np.array([[self.prefill(a)[0] > 0 and self.decode(b)[0] > 0 and self.pair(a, b)[0]
                                for b in decode_groups] for a in prefill_groups], dtype=bool)
            p_caps = np.array([self.ph.group(g).kv_cap_tokens for g in prefill_groups])
            d_caps = np.array([self.ph.group(g).kv_cap_tokens for g in decode_groups])
            sample = (w.prompt_tokens, w.prompt_tokens + w.output_tokens)
            # the requests' ranks among the sorted budgets: shared by the plans whose
            # replicas have the same budgets (coding: 1,723 plans, 728 budget lists)
            ranked_key = ("ranks", tuple(np.sort(p_caps)), tuple(np.sort(d_caps)))
            if ranked_key not in self._rates:
                self._rates[ranked_key] = Holding.count_ranks((s, need), sample, np.sort(p_caps), np.sort(d_caps))
            self._rates[key] = Holding.of((s, need), sample, p_caps, d_caps,
                                          usable.reshape(len(prefill_groups), len(decode_groups)),
                                          counted=self._rates[ranked_key])
        return self._rates[key]

    def _fit_everywhere(self, front_groups, back_groups=None) -> bool:
        """Whether the largest request fits every group: its prompt every prefill group and
        its whole KV every decode group (non-split: its whole KV every group). The common
        case (the shipped workloads on thunderserve-32gpu), settled in two comparisons."""
        _, _, s_max, need_max = self._fit_sizes
        cap = lambda groups: min(self.ph.group(g).kv_cap_tokens for g in groups)
        if back_groups is None:
            return not front_groups or need_max <= cap(front_groups)
        return (not front_groups or s_max <= cap(front_groups)) and (not back_groups or need_max <= cap(back_groups))

    def unheld_share(self, prefill_groups, decode_groups=None) -> float:
        """Share of the requests no replica of a plan serves for want of KV room: in a split
        plan no usable pair holds them (`holding`); in a non-split plan (decode_groups
        None) no replica with a routing share holds the whole request. The engines reject
        them at arrival, a miss of every deadline (`_simulate.unservable`)."""
        if decode_groups is not None:
            return self.holding(prefill_groups, decode_groups).unheld
        if self._fit_everywhere(prefill_groups):
            return 0.0
        key = ("hold", tuple(prefill_groups))
        if key not in self._rates:
            _, need, _, _ = self._fit_sizes
            routed = self.both_shares(prefill_groups) > 0
            caps = [self.ph.group(g).kv_cap_tokens for g, r in zip(prefill_groups, routed) if r]
            self._rates[key] = float((need > max(caps, default=0.0)).mean()) if need.size else 0.0
        return self._rates[key]

    def shortfall(self, prefill_groups, decode_groups=None) -> float:
        """How far a plan is from holding every request, for the search's slope: a split
        plan's `Holding.shortfall` (a step nearer when either side gains a replica that
        holds the long requests), a non-split plan's `unheld_share`."""
        if decode_groups is None:
            return self.unheld_share(prefill_groups)
        return self.holding(prefill_groups, decode_groups).shortfall

    def served_factor(self, prefill_groups, decode_groups=None) -> float:
        """The share of a plan's rate left once its unheld requests (`unheld_share`) take
        their part of the miss budget: 1 - unheld / (1 - target), 0 when they take it all.
        An unheld request misses at every rate, so at unheld = 1 - target the plan meets the
        target at none (it sustains a rate only where its replicas let nothing else miss),
        and in between the rate its replicas may add misses at shrinks with what is left.
        Linear in between: the per-replica rates are cached for the whole budget, and the
        DES decides among the finalists. The per-replica rates leave such requests out
        (`_held`), so without this a plan that cannot hold the long prompts scored as
        if they were not there (10 of 200 requests of 100k tokens: the search made the one
        replica that holds them a prefill one, and the split plan sustained 0.06 req/s)."""
        unheld = self.unheld_share(prefill_groups, decode_groups)
        budget = 1.0 - self.w.target
        if unheld <= 1e-12:
            return 1.0
        return max(1.0 - unheld / budget, 0.0) if budget > 0 else 0.0

    # -- pairs and their links -------------------------------------------------------
    def pair(self, src, dst):
        """(usable, mean transfer s, {shared link: bytes per request over it}), at the means
        of the requests the decode replica holds (`_held`: those the pair carries). Usable:
        its mean transfer fits in the mean E2E slack the two replicas leave, and at most
        1 - target of its requests miss a deadline for their transfer alone
        (`_transfer_room`)."""
        key = (src, dst)
        if key not in self._pairs:
            w = self._held(self.ph.group(dst).kv_cap_tokens) or self.w
            traffic, t = self._transfer(src, dst, w.mean_prompt)
            _, es = self.prefill(src)
            _, step = self.decode(dst)
            slack = w.e2e_limit_s - es - (w.mean_output - 1.0) * step
            alone = self._transfer_room(src, dst).missed <= 1.0 - w.target
            self._pairs[key] = (t <= slack and alone, t, traffic)
        return self._pairs[key]

    def network_limit(self, src, dst, senders: int, among=None) -> float:
        """The largest busy fraction of the shared links the pair src -> dst crosses at which
        at most 1 - target of its requests miss a p99 deadline for their transfer, alone
        (`_transfer_room`) or by its wait on a link over which `senders` prefill replicas
        send, each link judged as busy as the busiest the pair crosses (its transfers'
        link-seconds there: on the safe side for the others); 1 for an in-node pair, 0
        where the transfers alone miss more. The whole miss budget, as each replica's rule
        spends it on its own (the finalists' DES judges them together): with half of it,
        coding at 20 Gbps predicted 4.85 req/s and sustained 5.27, with all of it 5.25 and
        5.73. A transfer waits for what it finds on the link:
        the other senders' transfers, and its own replica's past the prefills that space
        them (`TransferRoom.overrun`: a transfer no longer than its prefill has left the link
        before the next one is ready), with probability rho times that share of the busy
        time, and longer than t with rho / (1 - rho) E[(S - t)+] / E[S] (S the link-seconds
        of a transfer) within that: the Pollaczek-Khinchine mean wait of an M/G/1 queue,
        spread as the residual of a transfer in flight, so no wait outlasts the longest
        transfers. A plain M/G/1 tail (exponential, every sender's transfers Poisson) put
        the misses of coding's plan at 20 Gbps 10x above the DES's, two senders on each
        link; this rule, 1.2-1.5x above (1-2x at 10 Gbps). among : over a routing class's
        requests only (`HeldClass.sample`)."""
        among_key = None if among is None else among.tobytes()
        key = ("network", src, dst, int(senders), among_key)
        if key not in self._pairs:
            same, alike = ("network", self._room_key(src, dst), int(senders), among_key), self._shared.values
            if same not in alike:
                alike[same] = self._network_limit(self._transfer_room(src, dst, among), senders)
            self._pairs[key] = alike[same]
        return self._pairs[key]

    def _network_limit(self, room, senders) -> float:
        """`network_limit` of a pair's `TransferRoom`."""
        allowed = 1.0 - self.w.target
        if room.missed > allowed:
            return 0.0
        if room.service is None or room.misses(1.0, senders) <= allowed:
            return 1.0   # no shared link, or no wait it may find makes too many miss
        lo, hi = 0.0, 1.0
        for _ in range(_WAIT_BISECTIONS):
            mid = 0.5 * (lo + hi)
            lo, hi = (mid, hi) if room.misses(mid, senders) <= allowed else (lo, mid)
        return lo

    def _transfer_room(self, src, dst, among=None) -> "TransferRoom":
        """The pair's requests (those the decode replica holds) and the wait each may add to
        its KV transfer before it misses (`TransferRoom`). A request's slack is
        min((n - 1)(TBT limit - step), E2E limit - prefill - (n - 1) step) less its visible
        transfer (`kv_visible_s`: setup, the last layer and what the prefill does not
        hide), the step the decode replica's at its rate: the TBT counts the transfer
        (SEMANTICS.md "Metrics"), so a short output cannot absorb a long one (at 8 Gbps a
        7k-token prompt with 9 output tokens missed its TBT limit crossing a node alone,
        and coding's plan there routed 4% of its requests so; it sustained 0.29 req/s of
        the 3.04 it predicted). A wait is hidden while the prefill still computes. A
        one-token request moves no KV (it ends with its prefill): it counts among the
        requests, never as a miss or a transfer. among : of those, a routing class's
        (`HeldClass.sample`; a class the sample lacks is judged as the pair's mix)."""
        among_key = None if among is None else among.tobytes()
        key = ("room", src, dst, among_key)
        if key not in self._pairs:
            same, alike = ("room", self._room_key(src, dst), among_key), self._shared.values
            if same not in alike:
                alike[same] = self._room(src, dst, among)
            self._pairs[key] = alike[same]
        return self._pairs[key]

    def _room_key(self, src, dst) -> tuple:
        """All `_transfer_room` reads of a pair: the prefill replica's iteration vector (its
        passes), the decode replica's KV budget and iteration at its rate, the transfer's
        setup and s per prompt token, and its link-seconds per token on the busiest shared
        link. Pairs with one key share their rooms and link limits (`SharedRates`)."""
        key = ("room_key", src, dst)
        if key not in self._pairs:
            setup, per_token, shares = self._link_terms(src, dst)
            self._pairs[key] = (self.ph.group(src).coef.tobytes(), float(self.ph.group(dst).kv_cap_tokens),
                                self.decode(dst)[1], setup, per_token, self._link_s_per_token(shares))
        return self._pairs[key]

    def _link_s_per_token(self, shares) -> float:
        """Link-seconds a prompt token's KV takes on the busiest of the shared links
        (`_link_terms`' {link: share}); 0 for an in-node pair."""
        return max((share * self.ph.llm.kv_bytes_per_token * self.kv_bits / 16.0 / self.ph.capacity_bytes_per_s(link)
                    for link, share in shares.items()), default=0.0)

    def _room(self, src, dst, among) -> "TransferRoom":
        """`_transfer_room`, computed."""
        w = self.w
        s, steps = w.prompt_tokens.astype(float), w.decode_steps
        mine = s + w.output_tokens <= self.ph.group(dst).kv_cap_tokens
        if among is not None and not (mine & among).any():
            return self._transfer_room(src, dst)   # none of the class in the sample: no requests of its own
        if among is not None:
            mine = mine & among
        if not mine.any():
            mine = np.ones(len(s), dtype=bool)   # `pair`'s fallback: the mix
        setup, per_token, shares = self._link_terms(src, dst)
        prefill_s = self._prefill_times(src)
        total = per_token * s
        last = total / self.ph.llm.n_layers
        layerwise = s >= LAYERWISE_MIN_PROMPT_TOKENS
        visible = setup + np.where(layerwise, last + np.maximum(total - last - prefill_s, 0.0), total)
        hidden = np.where(layerwise, np.maximum(prefill_s - (total - last), 0.0), 0.0)
        step = self.decode(dst)[1]
        with np.errstate(invalid="ignore"):   # one-token requests: no TBT (an infinite limit, 0 steps)
            tbt_room = np.where(steps > 0, steps * (w.tbt_p99_s - step), np.inf)
        # a class's misses count among all the requests, as the attainment does
        requests = len(s) if among is not None else int(mine.sum())
        mine = mine & (steps > 0)   # those that move their KV
        slack = (np.minimum(tbt_room, w.e2e_p99_s - prefill_s - steps * step) - visible)[mine]
        link_s_per_token = self._link_s_per_token(shares)
        if link_s_per_token > 0 and mine.any():
            service = link_s_per_token * s[mine]
            overrun = float(np.maximum(service - prefill_s[mine], 0.0).sum() / service.sum())
            service = np.sort(service)
        else:
            service, overrun = None, 0.0
        return TransferRoom(float((slack < 0).sum()) / requests, (slack + hidden[mine])[slack >= 0], requests,
                            service, overrun)

    def _prefill_times(self, group) -> np.ndarray:
        """(r,) each sampled prompt's prefill pass alone on `group`, s."""
        key = ("prefill_s", group)
        if key not in self._pairs:
            s = self.w.prompt_tokens.astype(float)
            self._pairs[key] = self._alike("prefill_s", group, lambda g: time_from_coefficients(
                g.coef, prefill_tokens=s, prefill_sq_tokens=s * s, prefill_seqs=1.0))
        return self._pairs[key]

    def _transfer(self, src, dst, mean_prompt) -> tuple[dict, float]:
        """({shared link: bytes a request}, mean transfer s) of a request of `mean_prompt`
        tokens on the pair `src` -> `dst`: a pair's at the mix it carries (`pair`), a routing
        class's at its own (`HeldClass.mean_prompt`: a 100k-token prompt's 160 GB, not the
        6k-token mean's 10 GB, is what loads the network)."""
        key = ("transfer", src, dst, float(mean_prompt))
        if key not in self._pairs:
            setup, per_token, shares = self._link_terms(src, dst)
            req_bytes = self.ph.llm.kv_bytes_per_token * mean_prompt * self.kv_bits / 16.0
            traffic = {link: share * req_bytes for link, share in shares.items()}
            self._pairs[key] = (traffic, setup + per_token * mean_prompt)
        return self._pairs[key]

    def _link_terms(self, src, dst) -> tuple[float, float, dict]:
        """(setup s, s per prompt token, {shared link: share of a request's KV bytes}) of the
        pair `src` -> `dst`, whatever the prompt: computed once per pair, not once per
        routing class's mean prompt (a class's mean moves with the plan's KV budgets)."""
        key = ("links", src, dst)
        if key not in self._pairs:
            self._pairs[key] = self.ph.kv_terms(src, dst, self.kv_bits)
        return self._pairs[key]


def _ratio(mine: float, base: float) -> float:
    """mine / base, 1 where the base has no work (nothing to compare with)."""
    return mine / base if base > 0 else 1.0


def _token_steps(w) -> float:
    """Mean KV token-steps a decode of `w` holds: s + n tokens for n - 1 steps."""
    return float(((w.prompt_tokens + w.output_tokens) * w.decode_steps).mean())


def _decode_seconds(coef, w) -> float:
    """Mean step-seconds a decode of `w` adds to the iterations it runs in: n - 1 steps, each
    adding one sequence's cost at its mean context s + n / 2 (`perfmodels.decode_token_s`)."""
    return float((w.decode_steps * decode_token_s(coef, w.prompt_tokens + w.output_tokens / 2.0)).mean())


def _prefill_rate(es, es2, ttft_limit_s) -> float:
    """The largest rps (to 1% utilization) at which an M/G/1 prefill queue of service
    moments (E[S], E[S^2]) keeps its mean TTFT within the limit; 0 when none does."""
    rho = np.linspace(0.0, 0.99, 100)[1:]
    ok = _mean_ttft_s(es, es2, rho) <= ttft_limit_s
    return float(rho[np.flatnonzero(ok)[-1]]) / es if ok.any() else 0.0


def _mean_ttft_s(es, es2, rho):
    """Mean TTFT of an M/G/1 prefill queue at utilization rho: service E[S] plus the
    Pollaczek-Khinchine mean wait rho E[S^2] / (2 (1 - rho) E[S])."""
    return es + rho * es2 / (2.0 * (1.0 - rho) * es)
