"""Replica physics on a heterogeneous inventory: latency coefficients, KV capacity and
KV-transfer cost of one replica group, from the roofline GPU by GPU.

A group is a tuple of stages `(node, tp)`: `tp` GPUs of one node (one GPU type) run one
pipeline stage with tensor parallelism; stages in series (PP) may mix types. Rules
(SEMANTICS.md, "Cloud plans"):
- layers go to stages in proportion to their compute (tp x peak FLOP/s), never more than
  a stage holds with room for one 2048-token request's KV of its layers (water-filling);
- one iteration runs its stages one after the other (no micro-batch pipelining): its
  coefficient vector is the layer-weighted sum of the stages' full-model vectors, the LM
  head on the last stage only, plus a hand-off of the activations (hidden x 2 bytes per
  token) over the link between consecutive stages;
- the group's KV budget is the smallest over stages of free bytes / KV bytes of its layers.
"""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass, replace

import numpy as np

from perfmodels import COEF_NAMES, HBM_UTILIZATION, N_COEF, TP_DEGREES, ProfileLatencyModel

GB = 1e9
MAX_RELABELLINGS = 1000   # node relabellings `Physics.relabellings` lists; beyond, none
ONE_REQUEST_KV_TOKENS = 2048   # as perfmodels.fits_in_memory: room for one 2048-token request
_C_LM_HEAD, _C_AR_FIXED, _C_AR_TOKEN, _C_KNEE, _C_AR_BEYOND = (COEF_NAMES.index(n) for n in (
    "s_per_seq_lm_head", "s_allreduce_fixed", "s_per_token_allreduce", "allreduce_knee_tokens",
    "s_per_token_allreduce_beyond_knee"))


@dataclass(frozen=True)
class GroupPhysics:
    """What the planner and the engines need of one replica group."""

    coef: np.ndarray           # (N_COEF,) iteration cost vector (perfmodels layout)
    kv_cap_tokens: float       # KV budget, tokens
    layers: tuple[int, ...]    # layers per stage
    n_gpus: int


class Physics:
    """Group physics for one inventory and model, cached per group (the search revisits groups)."""

    def __init__(self, inventory, llm, perf):
        if isinstance(perf, ProfileLatencyModel):   # a measured table is per whole replica of one GPU type: the
            perf = perf.roofline_fit().model        # groups, and the SLO references, use the roofline fitted on it
        self.inv, self.llm, self.perf = inventory, llm, perf
        cat = perf.catalog
        self.node_type = np.array([ti for _, ti in inventory.nodes], dtype=np.int64)
        # each node type's GPU on its own link: a TP group's all-reduce runs over the node's
        # intra_link_gb_per_s (1 MB/s timed TP all-reduces at the catalog's PCIe before)
        self.gpus = [replace(cat.gpu(t.gpu), intra_link_bandwidth_gb_per_s=t.intra_link_gb_per_s)
                     for t in inventory.types]
        pair = inventory.link_gbps() * 1e9 / 8.0
        self.nic_bytes_per_s = inventory.nic_gbps() * 1e9 / 8.0
        # one transfer alone between two nodes: the slowest of the pair's link and the two NICs
        self.link_bytes_per_s = np.minimum(pair, np.minimum.outer(self.nic_bytes_per_s, self.nic_bytes_per_s))
        np.fill_diagonal(self.link_bytes_per_s, np.inf)
        self._pair_bytes_per_s = pair
        self._cache: dict = {}
        # the search's regroupings of each pair of groups (`_search._regroup`): plans one
        # move apart share most pairs, and enumerating them was half the search's time
        self.regroupings: dict = {}

    def node_gpus(self, node: int) -> int:
        """GPUs of node `node` (an index into `inventory.nodes`)."""
        return self.inv.types[self.node_type[node]].gpus

    @functools.cached_property
    def interchangeable(self) -> bool:
        """Whether the nodes of one type are interchangeable (`_interchangeable`)."""
        return _interchangeable(self.node_type, self.link_bytes_per_s)

    @functools.cached_property
    def relabellings(self) -> list[np.ndarray] | None:
        """Every permutation of the nodes that maps each node to one of its type (arrays: new
        index per node), the identity included; None when the nodes of a type are not
        interchangeable (a bandwidth matrix tells them apart) or there are more than
        MAX_RELABELLINGS. Computed when first asked (only the finalists' dedup does)."""
        if not self.interchangeable:
            return None
        blocks = [np.flatnonzero(self.node_type == t) for t in np.unique(self.node_type)]
        if math.prod(math.factorial(len(b)) for b in blocks) > MAX_RELABELLINGS:
            return None
        out = []
        for choice in itertools.product(*(itertools.permutations(b) for b in blocks)):
            perm = np.arange(len(self.node_type))
            for block, image in zip(blocks, choice):
                perm[block] = image
            out.append(perm)
        return out

    def group(self, stages: tuple) -> GroupPhysics | None:
        """Physics of a group (stages sorted), None when it cannot hold the weights."""
        hit = self._cache.get(stages, False)
        if hit is False:
            hit = self._cache[stages] = self._group(stages)
        return hit

    def _group(self, stages):
        llm = self.llm
        L = int(llm.n_layers)
        gpus = [self.gpus[self.node_type[n]] for n, _ in stages]
        tps = np.array([tp for _, tp in stages], dtype=float)
        if any(tp not in TP_DEGREES for _, tp in stages):
            return None
        usable = tps * np.array([g.hbm_capacity_gb for g in gpus]) * GB * HBM_UTILIZATION
        per_layer = (llm.weight_bytes + llm.kv_bytes_per_token * ONE_REQUEST_KV_TOKENS) / L
        hold = np.floor(usable / per_layer).astype(int)
        speed = tps * np.array([g.dense_fp16_tflops for g in gpus])
        layers = split_layers(L, speed, hold)
        if layers is None or np.any(layers == 0):
            return None
        frac = layers / L
        coefs = np.stack([self.perf.coefficients(llm, g, int(tp))[:N_COEF] for g, tp in zip(gpus, tps)])
        coef = (frac[:, None] * coefs).sum(axis=0)
        coef[_C_LM_HEAD] = coefs[-1, _C_LM_HEAD]
        coef[_C_KNEE] = coefs[:, _C_KNEE].min()
        hand = self._handoff_s_per_token(stages)
        coef[_C_AR_FIXED] += hand[0]
        coef[_C_AR_TOKEN] += hand[1]
        coef[_C_AR_BEYOND] += hand[1]
        free = usable - llm.weight_bytes * frac
        kv_cap = float(np.min(free / (llm.kv_bytes_per_token * frac)))
        return GroupPhysics(coef=coef, kv_cap_tokens=kv_cap, layers=tuple(int(x) for x in layers),
                            n_gpus=int(tps.sum()))

    def _handoff_s_per_token(self, stages) -> tuple[float, float]:
        """(fixed s, s per token) of the activation hand-offs between consecutive stages."""
        fixed = per_token = 0.0
        act_bytes = self.llm.hidden_size * self.llm.bytes_per_param
        for (a, tpa), (b, tpb) in zip(stages[:-1], stages[1:]):
            if a == b:
                bw = self.inv.types[self.node_type[a]].intra_link_gb_per_s * GB
            else:
                bw = self.link_bytes_per_s[a, b]
                fixed += self.inv.inter_node_latency_s
            per_token += act_bytes / bw
        return fixed, per_token

    def links(self, a: int, b: int) -> tuple:
        """The shared links a byte from node a to node b crosses: a's outgoing NIC
        ("out", a) and b's incoming one ("in", b) when given, and the pair's own link
        ("pair", a, b) unless a NIC it shares is no faster (then every transfer on the pair
        finishes on that NIC no earlier, first-come first-served, and its bytes there are no
        fewer, so the pair's link never binds)."""
        keys = [key for key in (("out", a), ("in", b)) if np.isfinite(self.nic_bytes_per_s[key[1]])]
        if self._pair_bytes_per_s[a, b] < min(self.nic_bytes_per_s[a], self.nic_bytes_per_s[b]):
            keys.append(("pair", a, b))
        return tuple(keys)

    def capacity_bytes_per_s(self, link: tuple) -> float:
        """Bandwidth of a link `links` names: a NIC's per direction, or a node pair's."""
        kind, *ends = link
        return float(self._pair_bytes_per_s[ends[0], ends[1]] if kind == "pair" else self.nic_bytes_per_s[ends[0]])

    def link_shares(self, traffic: dict) -> dict:
        """{shared link: share of a request's KV bytes} from `kv_traffic`'s {(a, b): share}:
        the inter-node pairs' shares summed over each link they cross (in-node pairs cross none)."""
        out: dict = {}
        for (a, b), share in traffic.items():
            if a != b:
                for key in self.links(a, b):
                    out[key] = out.get(key, 0.0) + share
        return out

    def kv_traffic(self, src: tuple, dst: tuple) -> dict:
        """Share of a request's KV bytes per (src node, dst node): layer ranges overlapped."""
        ls, ld = self.group(src).layers, self.group(dst).layers
        cs, cd = np.concatenate([[0], np.cumsum(ls)]), np.concatenate([[0], np.cumsum(ld)])
        out: dict = {}
        L = float(self.llm.n_layers)
        for k, (a, _) in enumerate(src):
            for m, (b, _) in enumerate(dst):
                overlap = min(cs[k + 1], cd[m + 1]) - max(cs[k], cd[m])
                if overlap > 0:
                    out[(a, b)] = out.get((a, b), 0.0) + overlap / L
        return out

    def kv_seconds(self, src: tuple, dst: tuple, kv_bits: int) -> tuple[float, float]:
        """(setup s, s per prompt token) of moving a request's KV cache from src to dst
        (`kv_terms`)."""
        return self.kv_terms(src, dst, kv_bits)[:2]

    def kv_terms(self, src: tuple, dst: tuple, kv_bits: int) -> tuple[float, float, dict]:
        """(setup s, s per prompt token, {shared link: share of a request's KV bytes}) of
        moving a request's KV cache from src to dst (the pair's traffic listed once).

        Alpha-beta over the real links, the node pairs in parallel: the most loaded link (an
        in-node pair's, or a shared link with the bytes of every pair crossing it) sets the
        time. With kv_bits < 16 the prefill side quantizes and the decode side
        dequantizes: each reads 16-bit and writes kv_bits-bit KV once in HBM (its compute
        cost, memory-bound)."""
        per_token_bytes = self.llm.kv_bytes_per_token
        worst, setup = 0.0, 0.0
        traffic = self.kv_traffic(src, dst)
        for (a, b), share in traffic.items():
            if a == b:
                tp = min(_tp_on(src, a), _tp_on(dst, b))
                bw = self.inv.types[self.node_type[a]].intra_link_gb_per_s * GB * tp
                worst = max(worst, share * per_token_bytes * kv_bits / 16.0 / bw)
            else:
                setup = max(setup, self.inv.inter_node_latency_s)
        shares = self.link_shares(traffic)
        for key, share in shares.items():
            worst = max(worst, share * per_token_bytes * kv_bits / 16.0 / self.capacity_bytes_per_s(key))
        if kv_bits < 16:
            worst += sum(self._codec_s_per_token(g, kv_bits) for g in (src, dst))
        return setup, worst, shares

    def _codec_s_per_token(self, stages, kv_bits) -> float:
        gpus = [self.gpus[self.node_type[n]] for n, _ in stages]
        hbm = sum(g.hbm_bandwidth_gb_per_s * GB * tp for g, (_, tp) in zip(gpus, stages)) / len(stages)
        return self.llm.kv_bytes_per_token * (1.0 + kv_bits / 16.0) / hbm


def _interchangeable(node_type, link) -> bool:
    """Whether the nodes of one type are interchangeable: every link's bandwidth a function
    of its two ends' types (no full matrix telling them apart), so relabelling nodes within
    a type maps every plan to one of equal physics."""
    n = len(node_type)
    seen: dict = {}
    for a in range(n):
        for b in range(n):
            if a != b and seen.setdefault((node_type[a], node_type[b]), link[a, b]) != link[a, b]:
                return False
    return True


def _tp_on(stages, node) -> int:
    return sum(tp for n, tp in stages if n == node)


def split_layers(n_layers: int, speed: np.ndarray, hold: np.ndarray) -> np.ndarray | None:
    """Integer layers per stage proportional to `speed`, each at most `hold` (water-filling);
    None when the stages together hold fewer than `n_layers`."""
    hold = np.asarray(hold, dtype=int)
    if hold.sum() < n_layers:
        return None
    layers = np.zeros(len(speed), dtype=int)
    free = np.ones(len(speed), dtype=bool)
    left = n_layers
    while left > 0:
        share = np.where(free, speed, 0.0)
        want = left * share / share.sum()
        take = np.minimum(np.floor(want).astype(int), hold - layers)
        if take.sum() == 0:   # hand out the remainder one layer at a time, largest wish first
            order = np.argsort(-(want - np.floor(want)) - free * 1e-9)
            for k in order:
                if free[k] and layers[k] < hold[k] and left > 0:
                    layers[k] += 1
                    left -= 1
            free &= layers < hold
            continue
        layers += take
        left -= int(take.sum())
        free &= layers < hold
    return layers
