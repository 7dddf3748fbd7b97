"""Rich tables of a `ProvisionResult` (the CLI's presentation of the answer)."""

from __future__ import annotations

import numpy as np

from ..slo import METRICS, PERCENTILES
from ._errors import flag_text


def reason_text(reason: str | None) -> str | None:
    """A family's reason as the CLI says it: the search's parameters it names as the fix
    (`REASON_PARAMS`: max_machines) are the flags (--max-machines)."""
    from ..search import REASON_PARAMS   # here: importing the search takes ~0.5 s, not for every command

    return None if reason is None else flag_text(reason, REASON_PARAMS)


def render_result(result, console=None) -> None:
    """Print one table row per family (design, $/h, kW, nine slowdowns with margins,
    sustainable rps, gap to bound) and the winner, with rich."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = console or Console(markup=False)   # the workload is the user's path: printed as written
    req = result.request
    if req.goal == "cost":
        title = f"least $/h meeting every SLO at {req.rps:g} req/s"
    elif req.goal == "power":
        title = f"least provisioned kW meeting every SLO at {req.rps:g} req/s"
    elif req.power_budget_kw is not None:
        title = f"highest sustainable req/s within {req.power_budget_kw:g} kW"
    else:
        title = f"highest sustainable req/s within ${req.cost_budget_usd_per_h:g}/h"
    from rich import box

    table = Table(title=f"provision: {title} — {req.workload}, {req.model}", box=box.SIMPLE_HEAD, pad_edge=False,
                  caption="bound: the integer program's bound on the objective; gap: distance to it; "
                          "DES: discrete-event re-check", caption_justify="left")
    for col, just in (("family", "left"), ("design", "left"), ("$/h", "right"), ("kW", "right"),
                      ("req/s", "right"), ("bound", "right"), ("gap", "right"), ("evals", "right"),
                      ("DES", "left")):
        table.add_column(col, justify=just, no_wrap=True, min_width=len(col))
    for fr in result.families:
        table.add_row(*_cells(fr, result.catalog), style=None if fr.feasible else "dim")
    console.print(table)
    limits = ", ".join(f"{m.upper()} " + "/".join(f"{v:g}" for v in getattr(req.effective_slo, m)) for m in METRICS)
    rechecked = [fr for fr in result.families if _recheck_slowdown(fr) is not None]
    caption = f"limits (p50/p90/p99): {limits}"
    if rechecked:
        v = rechecked[0].verification
        runs = (f"the replayed trace over {v['duration_s']:g} s" if req.arrival == "replay" else
                f"the worst of {len(v['seeds'])} traces of {v['duration_s']:g} s (seeds "
                f"{', '.join(map(str, v['seeds']))})")
        caption += (f"\nre-check: the discrete-event engine on {runs}, which the answer passed; the row "
                    f"above it is the fluid engine's on the search trace")
    slo = Table(title="SLO slowdowns and margins to the limits (%); binding in bold", box=box.SIMPLE_HEAD, pad_edge=False,
                caption=caption, caption_justify="left")
    slo.add_column("family", no_wrap=True)
    for m in METRICS:
        for p in PERCENTILES:
            slo.add_column(f"{m.upper()}\np{p}", justify="right", no_wrap=True, min_width=4)
    for fr in result.families:
        slo.add_row(fr.family, *_slo_cells(fr), style=None if fr.feasible else "dim")
        worst = _recheck_slowdown(fr)
        if worst is not None:
            slo.add_row("  re-check", *_slowdown_cells(worst, req.effective_slo, fr.verification.get("binding")),
                        style=None if fr.feasible else "dim")
    console.print(slo)
    for fr in result.families:
        if not fr.feasible and fr.reason:
            console.print(Text.assemble((fr.family, "yellow"), f": {reason_text(fr.reason)}"))
    if result.winner_family is None:
        console.print("no family has a feasible design", style="bold red")
    else:
        fr = result.family(result.winner_family)
        console.print(Text.assemble((f"winner: {fr.family}", "bold green"),
                                    f" — {_design_text(fr.row, result.catalog).replace(chr(10), ' ')}, "
                                    f"${fr.row['cost_usd_per_h']:.1f}/h, {fr.row['power_kw']:.1f} kW"
                                    + (f", {fr.sustainable_rps:.1f} req/s sustained" if fr.sustainable_rps else "")
                                    + f"  ({result.elapsed_s:.1f} s)"))


def _cells(fr, cat) -> list[str]:
    r = fr.row
    gap = "-" if fr.gap_to_bound_pct is None else f"{fr.gap_to_bound_pct:.0f}%"
    ver = "-" if fr.verification is None else ("pass" if fr.verification["met"] else "fail")
    if r is None:
        return [fr.family + " ✗", "-", "-", "-", "-", fmt_cell(fr.lower_bound, ".0f"), gap, str(fr.evaluations), ver]
    rps = fr.sustainable_rps if fr.sustainable_rps is not None else fr.rps
    return [fr.family + ("" if fr.feasible else " ✗"), _design_text(r, cat), f"{r['cost_usd_per_h']:.0f}",
            f"{r['power_kw']:.0f}", fmt_cell(rps, ".1f"), fmt_cell(fr.lower_bound, ".0f"), gap, str(fr.evaluations),
            ver]


def _slo_cells(fr) -> list:
    from rich.text import Text

    r = fr.row
    cells = []
    for m in METRICS:
        for p in PERCENTILES:
            if r is None:
                cells.append("-")
                continue
            s, g = r[f"slowdown_{m}_p{p}"], r[f"margin_{m}_p{p}"]
            text = fmt_cell(s, ".2f") + ("" if not np.isfinite(g) else f"\n{100 * g:+.0f}")
            cells.append(Text(text, style="bold") if str(r["binding_slo"]) == f"{m}_p{p}" else text)
    return cells


def _recheck_slowdown(fr) -> dict | None:
    """The re-check's worst slowdowns of the family's answer (None: no re-check of it)."""
    v = fr.verification
    if not fr.feasible or not v or not v.get("met") or not v.get("worst_slowdown"):
        return None
    return v["worst_slowdown"]


def _slowdown_cells(worst: dict, slo, binding: str | None) -> list:
    """Nine cells of slowdowns and margins (limit / slowdown - 1, as the results') from a
    {metric: {"p50": ..}} block."""
    from rich.text import Text

    cells = []
    for m in METRICS:
        for i, p in enumerate(PERCENTILES):
            s = worst.get(m, {}).get(f"p{p}")
            if s is None or not np.isfinite(s):
                cells.append("-")
                continue
            limit = getattr(slo, m)[i]
            text = fmt_cell(s, ".2f") + (f"\n{100 * (limit / s - 1):+.0f}" if s > 0 else "")
            cells.append(Text(text, style="bold") if binding == f"{m}_p{p}" else text)
    return cells


def _design_text(r, cat) -> str:
    """Compact, two lines: '25P h100', '+8T h100@0.5' (machine names without the dgx-/hgx-
    prefix; '/tp4' when a machine runs several replicas; ', chunk 512' with chunked
    prefill); `cat`: the call's catalog."""

    def pool(n, m, cap, tp, tag):
        name = str(m).removeprefix("dgx-").removeprefix("hgx-")
        gpus = cat.machine(str(m)).gpus_per_machine
        tp_text = "" if int(tp) in (0, gpus) else f"/tp{int(tp)}"
        return f"{int(n)}{tag} {name}{tp_text}" + ("" if float(cap) >= 0.999 else f"@{float(cap):.2g}")
    chunk = int(r.get("prefill_chunk_tokens", 0) or 0)
    chunk_text = f", chunk {chunk}" if chunk else ""
    share = float(r.get("mps_prefill_share", 0.0) or 0.0)
    chunk_text += f", MPS {share:g}" if share else ""
    scheduler = str(r.get("scheduler", "least-work") or "least-work")
    chunk_text += f", {scheduler}" if scheduler != "least-work" else ""
    if int(r["token_machines"]) == 0:
        return pool(r["prompt_machines"], r["prompt_machine"], r["prompt_power_cap"], r["prompt_tp"], "") + chunk_text
    return (f"{pool(r['prompt_machines'], r['prompt_machine'], r['prompt_power_cap'], r['prompt_tp'], 'P')}\n"
            f"+{pool(r['token_machines'], r['token_machine'], r['token_power_cap'], r['token_tp'], 'T')}"
            + chunk_text)


def fmt_cell(v, spec: str = ".1f") -> str:
    """A number for a table cell: '-' when absent, 'n/a' when undefined (NaN), 'inf'."""
    if v is None:
        return "-"
    try:
        v = float(v)
    except (TypeError, ValueError):
        return str(v)
    if np.isnan(v):
        return "n/a"   # undefined, e.g. TBT when every request has one output token
    return format(v, spec) if np.isfinite(v) else "inf"
