"""A cloud answer's plans as a user reads them, for the CLI's tables and the HTML report
alike: `4x a5000 + 4x rtx3090ti`, `a5000-4x-0, rtx3090ti-4x-1`, layers `37/23`; and what a
re-plan changed in words."""

from __future__ import annotations

from collections import Counter

REPLICA_COLUMNS = ("phase", "gpus", "tp", "pp", "nodes", "layers", "share", "capacity rps")
REPLAN_CASES = ("before", "none", "light", "full")
REPLAN_METRICS = ("ttft", "tbt", "e2e", "all")   # the re-plan table's attainment columns


def gpus_text(gpus: dict) -> str:
    """{'a5000': 4, 'rtx3090ti': 4} -> '4x a5000 + 4x rtx3090ti' (a pipeline over both)."""
    return " + ".join(f"{n}x {g}" for g, n in gpus.items())


def rented_text(counts: dict) -> str:
    """{'a6000-4x': 2, 'a40-8x': 0} -> '2x a6000-4x' (node counts of a rental; none rented left out)."""
    return ", ".join(f"{n}x {t}" for t, n in counts.items() if n)


def prompts_text(chunk_tokens: int) -> str:
    """How a non-split plan's replicas take prompts: 512 -> '512-token chunked prefill', 0 -> 'whole prompts'."""
    return f"{chunk_tokens}-token chunked prefill" if chunk_tokens else "whole prompts"


def checks_text(slo: dict) -> str:
    """Whether a plan meets Table VI's percentile checks (`slo` of an answer): 'met' or 'missed'."""
    return "met" if slo["met"] else "missed"


def load_text(answer: dict) -> str:
    """The busiest servers' steady-state load of an answer's plans at its rate (`steady_state_load`,
    a lower bound): 'split: prefill compute 63%, KV 25%; non-split: prefill compute 47%, KV 5%'
    ('' for an answer saved before answers carried it)."""
    plans = [] if answer.get("no_split_plan") else [("split", answer)]
    loads = [(name, p["steady_state_load"]) for name, p in plans + [("non-split", answer["non_split"])]
             if "steady_state_load" in p]
    return "; ".join(f"{name}: prefill compute {load['prefill']:.0%}, KV {load['kv']:.0%}" for name, load in loads)


def nodes_text(nodes) -> str:
    """['a5000-4x-0', 'rtx3090ti-4x-1'] -> 'a5000-4x-0, rtx3090ti-4x-1'."""
    return ", ".join(str(n) for n in nodes)


def layers_text(layers) -> str:
    """[37, 23] -> '37/23' (layers per pipeline stage)."""
    return "/".join(str(n) for n in layers)


def tp_text(r: dict) -> str:
    """A replica's tensor parallelism: '4', or per pipeline stage '8/4' when its stages
    differ (`stage_tp`; an answer without it gives its one `tp`)."""
    stages = r.get("stage_tp") or [r["tp"]]
    return "/".join(str(t) for t in stages) if len(set(stages)) > 1 else str(stages[0])


def replica_cells(r: dict) -> tuple[str, ...]:
    """One replica group of a plan (`replicas` of the answer) as the cells of
    `REPLICA_COLUMNS`, plain text (the caller escapes it for HTML)."""
    return (str(r["phase"]), gpus_text(r["gpus"]), tp_text(r), str(r["pp"]), nodes_text(r["nodes"]),
            layers_text(r["layers"]), f"{r['share']:.3f}", f"{r['capacity_rps']:.2f}")


def _key(r: dict) -> tuple:
    """A replica group's identity apart from its phase: the same GPUs, split the same way."""
    return (tuple(r["nodes"]), tuple(sorted(r["gpus"].items())), tp_text(r), r["pp"], tuple(r["layers"]))


def _group(r: dict) -> str:
    return f"{gpus_text(r['gpus'])} TP{tp_text(r)} PP{r['pp']} on {nodes_text(r['nodes'])}"


def replan_event(rp: dict) -> str:
    """What `answer['replan']` re-plans for, in words: "without NODE" (`--without`), "for the
    W mix" (`--replan-workload`), or both."""
    parts = ([f"without {rp['node']}"] if rp.get("node") else []) + \
        ([f"for the {rp['workload']} mix"] if rp.get("workload") else [])
    return ", ".join(parts)


def replan_rows(answer: dict) -> list[dict]:
    """The re-plan table, as the CLI and the report show it: per case of REPLAN_CASES its
    `case`, `name`, `attainment` (per SLO metric), `took` (the re-plan's seconds, "—" where
    nothing is re-planned) and `changed` (`replan_changes`)."""
    _check_replanned(answer)
    rp, changes = answer["replan"], replan_changes(answer)
    before = ", ".join((["all nodes"] if rp.get("node") else []) + (["the planned mix"] if rp.get("workload") else []))
    names = {"before": f"before ({before})", "none": "no re-plan", "light": "lightweight re-plan",
             "full": "full re-plan"}
    return [{"case": case, "name": names[case],
             "attainment": rp["before"] if case == "before" else rp[case]["slo_attainment"],
             "took": f"{rp[case]['elapsed_s']:.2f}" if case in ("light", "full") else "—",
             "changed": changes[case]} for case in REPLAN_CASES]


def replan_changes(answer: dict) -> dict[str, str]:
    """What each case of `answer['replan']` (`provision cloud --without` / `--replan-workload`)
    changed against the plan, in words: {'before', 'none', 'light', 'full'} -> text."""
    _check_replanned(answer)
    rp, reps = answer["replan"], answer["replicas"]
    node = rp.get("node")
    lost = [r for r in reps if node in r["nodes"]]
    kept = [r for r in reps if node not in r["nodes"]]
    phases = Counter(r["phase"] for r in reps)
    lost_phases = ", ".join(f"{n} {p}" for p, n in sorted(Counter(r["phase"] for r in lost).items()))
    mix = f", now serving the {rp['workload']} mix" if rp.get("workload") else ""
    none = (f"{node} lost with {len(lost)} replica group(s) ({lost_phases or 'none'}); the other "
            f"{len(kept)} keep their phases and routing, the lost shares spread over them{mix}" if node else
            f"the {len(kept)} replica groups keep their phases and routing{mix}")
    out = {"before": f"the plan: {len(reps)} replica groups ({phases['prefill']} prefill, "
                     f"{phases['decode']} decode)",
           "none": none}
    before = Counter((_key(r), r["phase"]) for r in kept)
    for case, say in (("light", _light_change), ("full", _full_change)):
        # a re-plan that found no split plan says why
        out[case] = rp[case].get("no_split_plan") or say(kept, before, rp[case]["replicas"])
    return out


def _check_replanned(answer) -> None:
    """One line for what is not a re-planned answer (`{}` was a KeyError 'replan')."""
    from ..errors import ProvisionerError
    if not (isinstance(answer, dict) and isinstance(answer.get("replan"), dict) and "replicas" in answer):
        got = "an answer with no 'replan'" if isinstance(answer, dict) else f"{answer!r:.40}"
        raise ProvisionerError(f"answer must be a re-planned answer of plan_cloud (given without=NODE or "
                               f"new_mix=...), got {got}", params=("answer",))


def _light_change(kept, before, light) -> str:
    """Phase flips only: the lightweight re-plan keeps the surviving groups (its search moves
    are flips), so what it changed is which of them flipped."""
    flips = []
    after = Counter((_key(r), r["phase"]) for r in light)
    for (key, phase), n in sorted((before - after).items()):
        r = next(r for r in kept if _key(r) == key)
        flips += [f"{_group(r)}: {phase} → {'decode' if phase == 'prefill' else 'prefill'}"] * n
    if flips:
        return f"{len(flips)} phase flip(s): {'; '.join(flips)}; re-routed, no model reloaded"
    return "no phase flips; re-routed only, no model reloaded"


def _full_change(kept, before, full) -> str:
    same = sum((Counter((_key(r), r["phase"]) for r in full) & before).values())
    groups_full, groups_kept = Counter(_key(r) for r in full), Counter(_key(r) for r in kept)
    flipped = sum((groups_full & groups_kept).values()) - same
    new = groups_full - groups_kept
    left, new_groups = Counter(new), []
    for r in full:
        if left[_key(r)] > 0:
            left[_key(r)] -= 1
            new_groups.append(f"{_group(r)} ({r['phase']})")
    new_text = "; ".join(new_groups)
    return (f"{len(full)} replica groups: {same} kept as they were, {flipped} kept with a phase flip, "
            + (f"{sum(new.values())} new (weights reloaded): {new_text}" if new else "none new"))
