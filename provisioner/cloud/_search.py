"""Plan search: ThunderServe's tabu search, an exhaustive check for small inventories,
the best non-split plan, and an LP-relaxation upper bound on throughput.

A plan is a sorted tuple of (stages, phase); stages a sorted tuple of (node, tp) slices
(see `_physics`). Every GPU of the inventory belongs to one group.
"""

from __future__ import annotations

import itertools

import numpy as np

from perfmodels import TP_DEGREES

PHASES = ("prefill", "decode")
MAX_PP = 2   # pipeline stages per group the search forms
MAX_REGROUP_SLICES = 4   # slices two groups are dealt anew in (`_regroup`)
# Replicas a plan has at most (the fine start cuts nodes coarser, and no split goes past it):
# the search's time grows with the square of the groups (neighbours are pairs of them, and
# each LP has a variable per prefill-decode pair). llama-7b in TP 1 groups on 128 GPUs ran
# past 400 s; so capped, 79 s (on 64 GPUs 32 s instead of 46, the same plan of 29 groups).
# At 32, llama-30b on 128 GPUs (45 groups) lost 8% of its throughput.
MAX_GROUPS = 48


# Scores to 1e-9 req/s. Many plans tie (interchangeable groups, LP optima that only a
# binding link or pool sets): unrounded, the LP's last-digit round-off picked among them, and
# rewriting the link rows in other units (0cbb208: the same optimum to 1e-12) moved the tabu
# search to another local optimum (ThunderServe's own peaks, conversation: 5.60 -> 4.95 req/s).
SCORE_DECIMALS = 9


def canon(plan) -> tuple:
    """A plan in one order (GPUs within a group, then groups), so equal plans compare equal."""
    return tuple(sorted((tuple(sorted(st)), ph) for st, ph in plan))


def _ordered(groups) -> tuple:
    """`canon` of groups whose stages are in order already, as every move makes them (it
    builds groups from sorted stage tuples): sorting only the groups halves the cost of
    listing a plan's neighbours."""
    return tuple(sorted(groups))


def score(scorer, plan) -> float:
    """Sustainable rps of a plan (split: routing LP; non-split: the replicas' rates summed;
    less, to 0, as its replicas leave requests unheld: `Scorer.served_factor`), to
    SCORE_DECIMALS places: plans that tie do so exactly, and the search breaks ties by
    the plans' canonical order, not by the LP's round-off."""
    groups = _phase_groups(plan)
    served = scorer.served_factor(*groups)
    if served <= 0:
        return 0.0
    rate = sum(scorer.both(st) for st in groups[0]) if len(groups) == 1 else scorer.throughput_rps(*groups)
    return _rate(round(float(rate) * served, SCORE_DECIMALS))


def _rate(value: float) -> float:
    """A search value as the rate (req/s) it stands for: itself when positive, else 0.0.
    Never -0.0: a plan that holds every request but sustains nothing has value -0.0
    (`search_value`: minus a shortfall of 0), and an LP's round-off below zero rounds to
    -0.0, which JSON and the tables printed as "-0.0" req/s."""
    return value if value > 0 else 0.0


def search_value(scorer, plan) -> float:
    """What the tabu search climbs: a plan's `score`, and below 0, for plans that score 0,
    how far their replicas are from holding every request (`Scorer.shortfall`). Where
    the long prompts fit few groupings, most plans score 0 alike; this slope leads the
    search to a plan that holds them (without it, on the 32 GPUs less the 8x A40, none of
    1,080 plans scored was one of the A6000 + RTX 3090 Ti pipelines that hold them)."""
    s = score(scorer, plan)
    if s > 0:
        return s
    return -scorer.shortfall(*_phase_groups(plan))


def tie_break(scorer, plan) -> tuple:
    """How plans that `score` alike rank, best first by the largest: a split plan's
    `Scorer.class_capacity` (the rate at which its long requests saturate the replicas
    that hold them), then its replicas' capacity before the routing's links and classes
    (the lesser of its prefill and decode replicas' summed rates: at the same throughput,
    the plan whose replicas run least loaded); a non-split plan's summed rates. Where one
    replica or a shared link binds, many plans tie: on 5% of 100k-token prompts, every plan
    whose 8x A40 alone prefills them ties at the 0.56 req/s its prefill time allows (before
    that time was costed, 208 tied at the 1.25 req/s the links allowed, and the first five
    in plan order sustained 0.74-1.08 req/s in the DES; ranked so, the first sustained 1.32)."""
    groups = _phase_groups(plan)
    if len(groups) == 1:
        return (np.inf, sum(scorer.both(st) for st in groups[0]))
    replicas = min(sum(scorer.prefill(st)[0] for st in groups[0]), sum(scorer.decode(st)[0] for st in groups[1]))
    return (scorer.class_capacity(*groups), replicas)


def _phase_groups(plan) -> tuple:
    """(groups,) of a non-split plan, (prefill groups, decode groups) of a split one."""
    if all(ph == "both" for _, ph in plan):
        return ([st for st, _ in plan],)
    return [st for st, ph in plan if ph == "prefill"], [st for st, ph in plan if ph == "decode"]


def symmetry_key(physics, plan):
    """A key equal for plans that differ only in which of several interchangeable nodes each
    group uses, e.g. a prefill on the first 4x3090 Ti node and a decode on the second or the
    other way round: the same plan to the scorer and the engines. The key is the least image
    of the plan over the relabellings of nodes within each type (`Physics.relabellings`)
    that keep every group's stages in order (a group's stages run in node order, so a
    relabelling that would reorder stages of different TP is a different group). Exact:
    plans with one key are the same plan. Past MAX_RELABELLINGS (96 one-GPU nodes), where no
    node holds slices of two groups, the key is the plan's shapes (`_shape_key`); else, or
    where no nodes are interchangeable, it is the plan."""
    if physics.relabellings is None:
        return _shape_key(physics, plan) if physics.interchangeable else plan
    images = (_relabelled(plan, perm, physics.node_type) for perm in physics.relabellings)
    return min(image for image in images if image is not None)   # the identity's image is the plan


def _shape_key(physics, plan):
    """`symmetry_key` of a plan in which no node holds slices of two groups, without listing
    relabellings: the multiset of its groups' shapes, a shape the phase and per stage its
    node's type, its TP and which of the group's nodes it is on (first, second). Exact:
    two such plans of equal shapes map onto each other by sending the k-th node of each
    group to the k-th node of its twin (of the same type, in the same order, so the stages
    keep their order) and unused nodes to unused ones; a relabelling keeps both the shapes
    and that no node is shared. A plan that shares a node keeps itself as its key."""
    owner: dict = {}
    for k, (st, _) in enumerate(plan):
        for node, _tp in st:
            if owner.setdefault(node, k) != k:
                return plan
    shapes = []
    for st, ph in plan:
        nodes = sorted({node for node, _ in st})
        shapes.append((ph, tuple((int(physics.node_type[node]), tp, nodes.index(node)) for node, tp in st)))
    return ("shapes", tuple(sorted(shapes)))


def _relabelled(plan, perm, node_type):
    """The plan with node n renamed perm[n], in canonical order, or None when renaming would
    reorder a group's stages into a different sequence of (GPU type, TP)."""
    groups = []
    for st, ph in plan:
        moved = [(int(perm[n]), tp) for n, tp in st]
        ordered = sorted(moved)
        if [(node_type[n], tp) for n, tp in ordered] != [(node_type[n], tp) for n, tp in moved]:
            return None
        groups.append((tuple(ordered), ph))
    return tuple(sorted(groups))


def initial_groups(physics, coarse=False) -> list[tuple]:
    """Each node cut into the smallest TP groups that hold the model (`coarse`: the largest,
    the whole node where its GPU count is a TP degree); a node too small for one group joins
    (PP) its best-connected neighbour (a clustering of the bandwidth matrix). At most
    MAX_GROUPS groups: the nodes cut into the most are cut coarser (`_coarsen`), then nodes
    of one group each pair into pipelines (`_pipelines`; a node that can form none with
    those left stays on its own, past the cap)."""
    groups, leftovers, tps = [], [], {}
    degrees = sorted(TP_DEGREES, reverse=coarse)
    gpus = physics.node_gpus
    for node in range(len(physics.node_type)):
        tp = next((t for t in degrees if t <= gpus(node) and gpus(node) % t == 0 and physics.group(((node, t),))),
                  None)
        if tp is None:
            leftovers.append(node)
        else:
            tps[node] = tp
    _coarsen(tps, physics, MAX_GROUPS - (len(leftovers) + 1) // 2)
    # still too many groups (many nodes of one group each): pair such nodes into pipelines of
    # two whole nodes, one group fewer per pair, the smallest nodes first
    excess = _groups_of(tps, physics) + (len(leftovers) + 1) // 2 - MAX_GROUPS
    whole = sorted((n for n, tp in tps.items() if tp == gpus(n)), key=lambda n: (gpus(n), n))[:2 * max(excess, 0)]
    for node in whole:
        del tps[node]
    for node, tp in tps.items():
        groups += [((node, tp),)] * (gpus(node) // tp)
    return groups + _pipelines(leftovers, physics) + _pipelines(whole, physics, keep_unpaired=True)


def _groups_of(tps: dict, physics) -> int:
    """Groups the nodes {node: tp} are cut into."""
    return sum(physics.node_gpus(n) // tp for n, tp in tps.items())


def _pipelines(nodes: list, physics, keep_unpaired=False) -> list[tuple]:
    """Whole nodes paired into two-stage pipelines, each with its best-connected partner
    among `nodes` (a clustering of the bandwidth matrix). Nodes too small alone: a pair
    that cannot hold the weights is dropped, as is a node left without a partner. With
    `keep_unpaired` (nodes that hold the model alone): a partner of the node's own type
    first, then the best-connected with which the pipeline holds (a 1-GPU A5000 and an 8x
    B200 do not: the split gives the slow stage no layer); none, a group of its own."""
    gpus = physics.node_gpus
    pipeline = lambda a, b: tuple(sorted(((a, gpus(a)), (b, gpus(b)))))
    bw, left, out = physics.link_bytes_per_s, list(nodes), []
    while left:
        a = left.pop(0)
        if keep_unpaired:   # a node of its own type first (such a pair always holds), then any that holds
            order = sorted((b for b in left), key=lambda b: (physics.node_type[b] != physics.node_type[a], -bw[a, b], b))
            partner = next((b for b in order if physics.group(pipeline(a, b))), None)
        else:
            partner = next((int(b) for b in np.argsort(-bw[a]) if b != a and b in left), None)
        if partner is None:
            if keep_unpaired:
                out.append(((a, gpus(a)),))
            continue
        left.remove(partner)
        if physics.group(pipeline(a, partner)):
            out.append(pipeline(a, partner))
    return out


def _coarsen(tps: dict, physics, most: int) -> None:
    """Double the TP of the nodes cut into the most groups ({node: tp}, in place) until
    they make at most `most` groups, or every node is one group."""
    gpus = physics.node_gpus
    while _groups_of(tps, physics) > most:
        finer = [n for n, tp in tps.items() if 2 * tp in TP_DEGREES and gpus(n) % (2 * tp) == 0]
        if not finer:
            return
        node = max(finer, key=lambda n: (gpus(n) // tps[n], -n))
        tps[node] *= 2


def initial_plan(physics, scorer, coarse=False) -> tuple:
    """Phases by comparative advantage: groups (`initial_groups`) sorted by prefill/decode
    rate, the prefix that balances the two sides best goes to prefill."""
    groups = initial_groups(physics, coarse)
    ratio = [scorer.prefill(g)[0] / max(scorer.decode(g)[0], 1e-9) for g in groups]
    order = list(np.argsort(ratio)[::-1])
    best, best_k = -np.inf, 1
    for k in range(1, len(groups)):
        plan = [(groups[i], "prefill" if r < k else "decode") for r, i in enumerate(order)]
        s = search_value(scorer, plan)
        if s > best:
            best, best_k = s, k
    return canon([(groups[i], "prefill" if r < best_k else "decode") for r, i in enumerate(order)])


def node_local_plan(physics, scorer, coarse=False) -> tuple:
    """Phases node by node: every node's groups (`initial_groups`; a pipeline counts on its
    first node) sorted by prefill/decode rate, the same share of each node's groups to
    prefill (a node of two groups or more keeps one of each phase, so its KV need not leave
    it), the share that scores best (`search_value`). `initial_plan` balances the phases
    over the whole inventory and leaves it to the search to pair them inside nodes, which a
    local search on a slow network may not reach: conversation at 12 Gbps scored 5.01
    req/s from the clustering's starts and 5.42 from these (`node_local_starts`)."""
    groups = initial_groups(physics, coarse)
    ratio = [scorer.prefill(g)[0] / max(scorer.decode(g)[0], 1e-9) for g in groups]
    by_node: dict = {}
    for i, g in enumerate(groups):
        by_node.setdefault(g[0][0], []).append(i)
    ranked_nodes = [sorted(members, key=lambda i: (-ratio[i], i)) for members in by_node.values()]
    best, best_plan = -np.inf, None
    for share in np.linspace(0.1, 0.9, 17):
        phase = {}
        for members in ranked_nodes:
            k = int(round(share * len(members)))
            k = min(max(k, 1), len(members) - 1) if len(members) > 1 else k
            phase.update((i, "prefill" if r < k else "decode") for r, i in enumerate(members))
        plan = canon([(g, phase[i]) for i, g in enumerate(groups)])
        value = search_value(scorer, plan) if valid_plan(plan) else -np.inf
        if value > best:
            best, best_plan = value, plan
    return best_plan


def neighbours(plan, physics, moves=("flip", "split", "merge", "move"), phases=PHASES,
               merged_any_phase=False) -> list[tuple]:
    """Every plan one move away (flip a phase, split a group, merge two, move a stage);
    groups that cannot hold the weights are pruned before any evaluation. Each neighbour is
    in canonical order (`canon`). A merged group takes either merged group's phase, or
    with `merged_any_phase` any of `phases` (a plan short of KV room: two decode groups
    merged into a prefill group that holds the long prompts, one move, not two through a
    plan no better)."""
    out = set()
    plan = list(canon(plan))   # the moves keep stages in order, so `_ordered` suffices
    n = len(plan)
    for i, (st, ph) in enumerate(plan):
        rest = plan[:i] + plan[i + 1:]
        if "flip" in moves:
            for other in phases:
                if other != ph:
                    out.add(_ordered(rest + [(st, other)]))
        if "split" in moves and n < MAX_GROUPS:
            for parts in _splits(st):
                if all(physics.group(p) for p in parts):
                    out.add(_ordered(rest + [(p, ph) for p in parts]))
    for i, j in itertools.combinations(range(n), 2):
        (a, pa), (b, pb) = plan[i], plan[j]
        rest = [plan[k] for k in range(n) if k not in (i, j)]
        if "merge" in moves:
            for st in _merges(a, b, physics):
                for ph in (phases if merged_any_phase else {pa, pb}):
                    out.add(_ordered(rest + [(st, ph)]))
        if "regroup" in moves:
            for regrouped in _regroup(a, b, physics):
                for assign in itertools.product(*[phases] * len(regrouped)):
                    out.add(_ordered(rest + list(zip(regrouped, assign))))
            for src, dst, psrc, pdst in ((a, b, pa, pb), (b, a, pb, pa)):
                if len(src) < 2 or len(dst) >= MAX_PP:
                    continue
                for k in range(len(src)):
                    s2 = tuple(sorted(src[:k] + src[k + 1:]))
                    d2 = tuple(sorted(dst + (src[k],)))
                    if physics.group(s2) and physics.group(d2):
                        out.add(_ordered(rest + [(s2, psrc), (d2, pdst)]))
    return [p for p in out if valid_plan(p)]


def _n_flips(p, q) -> int:
    """Groups whose phase differs between two plans of the same groups (else a large number).
    Both in canonical order (`canon`), which sorts by the groups first, so plans of the same
    groups list them in the same order: compared in place, not sorted again (sorting both for
    each of a 48-group plan's thousands of neighbours took 13% of its search's time)."""
    if len(p) != len(q) or any(a[0] != b[0] for a, b in zip(p, q)):
        return 99
    return sum(a[1] != b[1] for a, b in zip(p, q))


def valid_plan(plan) -> bool:
    """A non-split plan (every group "both"), or a split plan: at least one prefill and one
    decode group (a lone prefill replica serves no request)."""
    phases = {ph for _, ph in plan}
    return phases == {"both"} or ("prefill" in phases and "decode" in phases)


def _regroup(a, b, physics) -> tuple:
    """Move GPUs between two groups: their slices (each halved too, while at most
    `MAX_REGROUP_SLICES` in all) dealt anew into two groups that hold the weights; cached
    per pair (`Physics.regroupings`)."""
    hit = physics.regroupings.get((a, b))
    if hit is None:
        hit = physics.regroupings[a, b] = tuple(_regroupings(a, b, physics))
    return hit


def _regroupings(a, b, physics, max_slices=MAX_REGROUP_SLICES):
    base = list(a + b)
    variants = {tuple(sorted(base))}
    for k, (node, tp) in enumerate(base):
        if tp > 1 and len(base) < max_slices:
            variants.add(tuple(sorted(base[:k] + base[k + 1:] + [(node, tp // 2)] * 2)))
    if len(base) + 1 < max_slices:
        halved = [h for node, tp in base for h in ([(node, tp // 2)] * 2 if tp > 1 else [(node, tp)])]
        if len(halved) <= max_slices:
            variants.add(tuple(sorted(halved)))
    for slices in variants:
        for groups in _groupings(list(slices)):
            if len(groups) == 2 and all(physics.group(g) for g in groups):
                yield groups


def _splits(st):
    """A group re-cut in place: PP stages apart; TP t halved into two groups or into two PP
    stages, and back (two equal PP stages on one node -> TP 2t: the same GPUs, no hand-off)."""
    if len(st) > 1:
        yield tuple((s,) for s in st)
        (na, ta), (nb, tb) = st[0], st[-1]
        if len(st) == 2 and na == nb and ta == tb and 2 * ta in TP_DEGREES:
            yield (((na, 2 * ta),),)
    elif st[0][1] > 1:
        node, tp = st[0]
        yield (((node, tp // 2),), ((node, tp // 2),))
        yield (((node, tp // 2), (node, tp // 2)),)   # TP t -> PP of two TP t/2 stages


def _merges(a, b, physics):
    if len(a) == 1 and len(b) == 1 and a[0][0] == b[0][0] and a[0][1] == b[0][1]:
        node, tp = a[0]
        st = ((node, 2 * tp),)
        if 2 * tp in TP_DEGREES and physics.group(st):
            yield st
    if len(a) + len(b) <= MAX_PP:
        st = tuple(sorted(a + b))
        if physics.group(st):
            yield st


def tabu_search(scorer, start, *, steps=100, sample=10, memory=5, patience=20, rng=0,
                moves=("flip", "split", "merge", "move"), phases=PHASES, seen: dict | None = None):
    """ThunderServe's tabu search: each step scores a seeded sample of `sample` neighbours
    (all of them when fewer) as one batch and moves to the best one not in the tabu list
    of the last `memory` plans, by `search_value`. Returns (best plan, its rps, plans
    scored); `seen`, when given, collects every scored plan's rps."""
    rng = np.random.default_rng(rng)
    cur = best = canon(start)
    # an invalid start (a re-plan's survivors, all one phase) is beaten by any valid neighbour
    best_s = search_value(scorer, cur) if valid_plan(cur) else -np.inf
    tabu = [cur]
    stale = scored = 0
    for _ in range(steps):
        short = valid_plan(cur) and search_value(scorer, cur) < 0   # it holds too few requests
        cands = [p for p in neighbours(cur, scorer.ph, moves, phases, merged_any_phase=short) if p not in tabu]
        if not cands:
            break
        if len(cands) > sample:   # every phase flip (cheap, often best), a seeded sample of the rest
            flips = [p for p in cands if len(p) == len(cur) and _n_flips(p, cur) == 1]
            others = sorted(set(cands) - set(flips))
            k = min(sample, len(others))
            cands = flips + [others[i] for i in rng.choice(len(others), k, replace=False)]
        vals = [search_value(scorer, p) for p in sorted(cands)]
        scored += len(cands)
        if seen is not None:
            seen.update((p, _rate(v)) for p, v in zip(sorted(cands), vals))
        k = int(np.argmax(vals))
        cur = sorted(cands)[k]
        tabu = (tabu + [cur])[-memory:]
        if vals[k] > best_s + 1e-9:
            best, best_s, stale = cur, vals[k], 0
        else:
            stale += 1
            if stale >= patience:
                break
    return best, _rate(best_s), scored


def exhaustive(scorer, phases=PHASES):
    """Every plan (all slice cuts of every node, every grouping of at most MAX_PP slices,
    every phase assignment): the optimum the tabu search is checked against."""
    ph = scorer.ph
    per_node = [_cuts(ph.inv.types[ti].gpus) for ti in ph.node_type]
    best, best_s = None, -1.0
    seen = set()
    for cut in itertools.product(*per_node):
        slices = [(node, tp) for node, tps in enumerate(cut) for tp in tps]
        for groups in _groupings(slices):
            if not all(ph.group(g) for g in groups):
                continue
            labels = [phases] * len(groups) if phases != ("both",) else [("both",)] * len(groups)
            for assign in itertools.product(*labels):
                plan = canon(list(zip(groups, assign)))
                if plan in seen or not valid_plan(plan):
                    continue
                seen.add(plan)
                s = score(scorer, plan)
                if s > best_s + 1e-9:
                    best, best_s = plan, s
    return best, best_s, len(seen)


def _cuts(gpus: int):
    """Multisets of TP degrees summing to `gpus`, largest first."""
    out = []

    def rec(left, largest, acc):
        if left == 0:
            out.append(tuple(acc))
            return
        for t in sorted(TP_DEGREES, reverse=True):
            if t <= left and t <= largest:
                rec(left - t, t, acc + [t])
    rec(gpus, gpus, [])
    return out


def _groupings(slices):
    """Partitions of the slices into groups of at most MAX_PP (sorted stage tuples)."""
    if not slices:
        yield []
        return
    first, rest = slices[0], slices[1:]
    for size in range(0, min(MAX_PP - 1, len(rest)) + 1):
        for mates in itertools.combinations(range(len(rest)), size):
            group = tuple(sorted((first,) + tuple(rest[k] for k in mates)))
            left = [s for k, s in enumerate(rest) if k not in mates]
            for tail in _groupings(left):
                yield [group] + tail
