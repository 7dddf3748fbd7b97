"""Tests of `reports`: the plot data (numbers, not pixels), the HTML page, `provision report`.

The result rendered here is a fixture built by hand-running `provisioner.simulate` over
a small grid per family and assembling RESULT_SCHEMA.md (`fixture_result`), so these
tests do not depend on the search engine; `tests/test_report_browser.py` reuses it.
"""

from __future__ import annotations

import copy
import functools
import json
import math
import re

import numpy as np
import pytest

from provisioner import SLO, grid, simulate
from provisioner.errors import ProvisionerError
from provisioner.results import design_result_json
from reports import build_report_html, report_data, write_report
from reports import CHECK_NAMES, LOAD_FACTORS, non_dominated, token_cdfs

# --------------------------------------------------------------------------- fixture
FIXTURE_WORKLOAD = "coding"
FIXTURE_MODEL = "bloom-176b"
FIXTURE_RPS = 70.0
FIXTURE_DURATION_S = 60.0
FIXTURE_SEED = 0
# Small grids around each family's boundary at 70 req/s (coding, BLOOM-176B), so each
# heatmap has SLO-meeting and SLO-missing cells. Baselines: machines; split: (prompt, token).
FIXTURE_GRIDS = {
    "baseline-a100": (range(130, 181, 10),),
    "baseline-h100": (range(70, 111, 5),),
    "splitwise-aa": (range(40, 64, 4), range(8, 22, 3)),
    "splitwise-hh": (range(20, 36, 2), range(1, 9)),
    "splitwise-ha": (range(20, 36, 2), range(8, 22, 3)),  # A100 token machines: more of them
    "splitwise-hhcap": (range(20, 36, 2), range(1, 9)),
}
MAX_REPORT_BYTES = 10 * 1024 * 1024


@functools.lru_cache(maxsize=None)
def _fixture_json(families: tuple[str, ...]) -> str:
    from hardware_catalog import load_catalog
    from workloads import make_workload

    catalog = load_catalog()
    slo = SLO()
    trace = make_workload(FIXTURE_WORKLOAD, FIXTURE_RPS, duration_s=FIXTURE_DURATION_S, seed=FIXTURE_SEED)
    evaluated, best = [], []
    for fam in families:
        table = simulate(grid(fam, *FIXTURE_GRIDS[fam]), trace, FIXTURE_MODEL, slo=slo)
        for _, row in table.iterrows():
            evaluated.append({
                "family": fam, "prompt_machines": int(row.prompt_machines), "token_machines": int(row.token_machines),
                "prompt_machine": row.prompt_machine, "token_machine": row.token_machine,
                "prompt_power_cap": float(row.prompt_power_cap), "token_power_cap": float(row.token_power_cap),
                "cost_usd_per_h": float(row.cost_usd_per_h), "power_kw": float(row.power_kw),
                "slo_met": bool(row.slo_met), "binding_slo": str(row.binding_slo), "min_margin": float(row.min_margin),
                "slowdown": {m: {f"p{p}": float(row[f"slowdown_{m}_p{p}"]) for p in (50, 90, 99)}
                             for m in ("ttft", "tbt", "e2e")},
                "rps": FIXTURE_RPS})
        met = table[table.slo_met]
        if met.empty:  # report the closest miss, as the search does
            pick, feasible = table.sort_values("min_margin", ascending=False).iloc[0], False
        else:
            pick = met.sort_values(["cost_usd_per_h", "power_kw", "prompt_machines"], kind="stable").iloc[0]
            feasible = True
        obj = design_result_json(pick, workload=FIXTURE_WORKLOAD, model=FIXTURE_MODEL, rps=FIXTURE_RPS,
                                 catalog=catalog)
        obj.update(feasible=feasible, reason=None if feasible else f"{pick.binding_slo} binds in the grid",
                   sustainable_rps=None, lower_bound=None, gap_to_bound_pct=None, searcher="enumeration",
                   evaluations=len(table),
                   verification={"engine": "fluid", "duration_s": FIXTURE_DURATION_S, "seeds": [FIXTURE_SEED],
                                 "met": feasible, "worst_slowdown": obj["slo"]["slowdown"]})
        best.append(obj)
    feasible = [b for b in best if b["feasible"]]
    machines = sorted({d for b in best for d in (b["design"]["prompt_machine"], b["design"]["token_machine"])})
    result = {
        "goal": "cost", "constraint": {"rps": FIXTURE_RPS},
        "question": {
            "workload": FIXTURE_WORKLOAD, "model": FIXTURE_MODEL, "duration_s": FIXTURE_DURATION_S,
            "seed": FIXTURE_SEED, "arrival": "poisson", "families": list(families),
            "slo": {"ttft": list(slo.ttft), "tbt": list(slo.tbt), "e2e": list(slo.e2e)}, "slo_scale": 1.0,
            "code_version": "0.1.0",
            "catalog": {m: {"cost_usd_per_h": catalog.machine(m).cost_usd_per_h,
                            "cost_option": catalog.machine(m).default_cost_option} for m in machines},
        },
        "best": best,
        "winner": min(feasible, key=lambda b: b["cost_usd_per_h"]) if feasible else None,
        "evaluated": evaluated,
        "elapsed_s": 0.0,
    }
    return json.dumps(result, allow_nan=False)


def fixture_result(families: tuple[str, ...] = tuple(FIXTURE_GRIDS)) -> dict:
    """A RESULT_SCHEMA.md result built by simulating FIXTURE_GRIDS (a fresh copy)."""
    return json.loads(_fixture_json(tuple(families)))


@pytest.fixture(scope="module")
def result():
    return fixture_result()


@pytest.fixture(scope="module")
def data(result):
    return report_data(result)


@pytest.fixture(scope="module")
def html(result):
    return build_report_html(result)


# --------------------------------------------------------------------------- heatmaps
def test_fixture_has_feasible_and_failing_designs(result):
    for fam in FIXTURE_GRIDS:
        met = [r["slo_met"] for r in result["evaluated"] if r["family"] == fam]
        assert any(met) and not all(met), fam


def test_heatmap_mask_equals_evaluated_slo_met(result, data):
    assert list(data.heatmaps) == list(FIXTURE_GRIDS)
    for row in result["evaluated"]:
        h = data.heatmaps[row["family"]]
        i = int(np.searchsorted(h.token_counts, row["token_machines"]))
        j = int(np.searchsorted(h.prompt_counts, row["prompt_machines"]))
        assert h.evaluated[i, j]
        assert h.slo_met[i, j] == row["slo_met"]
        assert h.cost_usd_per_h[i, j] == pytest.approx(row["cost_usd_per_h"])
        assert math.isnan(h.masked_cost[i, j]) == (not row["slo_met"])
        np.testing.assert_allclose(h.slowdown[i, j], [row["slowdown"][c.split("_")[0]][c.split("_")[1]]
                                                       for c in CHECK_NAMES])
    for h in data.heatmaps.values():
        assert h.evaluated.sum() == sum(r["family"] == h.family for r in result["evaluated"])


def test_designs_the_recheck_rejected_are_drawn_apart_and_off_the_pareto(result):
    """The cheapest SLO-meeting rows of the search trace that the re-check rejected were
    coloured as options and made the Pareto frontier, cheaper than the answer."""
    marked = copy.deepcopy(result)
    fam = next(iter(FIXTURE_GRIDS))
    met = sorted((r for r in marked["evaluated"] if r["family"] == fam and r["slo_met"]),
                 key=lambda r: r["cost_usd_per_h"])
    met[0]["recheck"] = "failed"
    data = report_data(marked)
    h = data.heatmaps[fam]
    i = int(np.searchsorted(h.token_counts, met[0]["token_machines"]))
    j = int(np.searchsorted(h.prompt_counts, met[0]["prompt_machines"]))
    assert h.slo_met[i, j] and h.recheck_failed[i, j] and math.isnan(h.masked_cost[i, j])
    assert h.recheck_failed.sum() == 1
    cell = data.pareto[(data.pareto.family == fam) & (data.pareto.prompt_machines == met[0]["prompt_machines"])
                       & (data.pareto.token_machines == met[0]["token_machines"])]
    assert cell.empty
    assert "fail the re-check" in build_report_html(marked)


def test_optimum_marked_at_cheapest_feasible_design(result, data):
    best = {b["design"]["family"]: b for b in result["best"]}
    for fam, h in data.heatmaps.items():
        p, t = h.optimum
        i, j = int(np.searchsorted(h.token_counts, t)), int(np.searchsorted(h.prompt_counts, p))
        assert h.slo_met[i, j]
        assert h.cost_usd_per_h[i, j] == pytest.approx(np.nanmin(h.masked_cost))
        d = best[fam]["design"]
        assert (p, t) == (d["prompt_machines"], d["token_machines"])


def test_optimum_falls_back_to_cheapest_cell_without_an_answer(result):
    from reports import evaluated_frame, heatmap

    h = heatmap(evaluated_frame(result), "splitwise-hh", "cost", best=None)
    p, t = h.optimum
    cells = [r for r in result["evaluated"] if r["family"] == "splitwise-hh" and r["slo_met"]]
    assert min(r["cost_usd_per_h"] for r in cells) == pytest.approx(
        next(r["cost_usd_per_h"] for r in cells if (r["prompt_machines"], r["token_machines"]) == (p, t)))
    hp = heatmap(evaluated_frame(result), "splitwise-hh", "power", best=None)
    p, t = hp.optimum
    assert min(r["power_kw"] for r in cells) == pytest.approx(
        next(r["power_kw"] for r in cells if (r["prompt_machines"], r["token_machines"]) == (p, t)))


# --------------------------------------------------------------------------- Pareto
def test_non_dominated_on_a_hand_example():
    x = np.array([[1, 5], [2, 2], [5, 1], [3, 3], [2, 2], [np.nan, 0]])
    np.testing.assert_array_equal(non_dominated(x), [True, True, True, False, True, False])


def test_pareto_frontier_is_non_dominated(result, data):
    pf = data.pareto
    met = [r for r in result["evaluated"] if r["slo_met"]]
    assert len(pf) == len(met)  # one load per design in the fixture
    obj = np.column_stack([pf.cost_usd_per_h, pf.power_kw, -pf.throughput_rps])
    front = obj[pf.on_frontier.to_numpy()]
    assert len(front) >= 1
    for f in front:  # nothing beats a frontier point
        assert not np.any(np.all(obj <= f, axis=1) & np.any(obj < f, axis=1))
    for o in obj[~pf.on_frontier.to_numpy()]:  # every other point is beaten by the frontier
        assert np.any(np.all(front <= o, axis=1) & np.any(front < o, axis=1))
    cheapest = min(met, key=lambda r: r["cost_usd_per_h"])["cost_usd_per_h"]
    assert pf[pf.on_frontier].cost_usd_per_h.min() == pytest.approx(cheapest)


# --------------------------------------------------------------------------- summary bars
def test_summary_bars_equal_one_for_the_baseline(result, data):
    assert data.baseline == "baseline-h100"
    s = data.summary
    np.testing.assert_allclose(s[s.family == "baseline-h100"].normalized, 1.0)
    best = {b["design"]["family"]: b for b in result["best"] if b["feasible"]}
    assert set(s.family) == set(best)
    for fam, b in best.items():
        row = s[(s.family == fam) & (s.metric == "cost_usd_per_h")].iloc[0]
        assert row.value == pytest.approx(b["cost_usd_per_h"])
        assert row.normalized == pytest.approx(b["cost_usd_per_h"] / best["baseline-h100"]["cost_usd_per_h"])


def test_summary_baseline_can_be_chosen(result):
    from reports import summary_bars

    s, base = summary_bars(result, "splitwise-aa")
    assert base == "splitwise-aa"
    np.testing.assert_allclose(s[s.family == "splitwise-aa"].normalized, 1.0)
    with pytest.raises(ProvisionerError, match="baseline 'no-such-family' is not a family"):
        summary_bars(result, "no-such-family")
    r = copy.deepcopy(result)
    next(b for b in r["best"] if b["design"]["family"] == "splitwise-aa")["feasible"] = False
    assert summary_bars(r, "splitwise-aa")[1] == "baseline-h100"
    assert report_data(r, baseline="splitwise-aa", load_factors=(1.0,)).notes == [
        "baseline 'splitwise-aa' has no feasible answer; bars are normalized to 'baseline-h100'"]


# --------------------------------------------------------------------------- workload
def test_token_cdfs_monotone_ending_at_one(data):
    for name in ("prompt_tokens", "output_tokens"):
        c = data.token_cdfs[data.token_cdfs.quantity == name]
        assert len(c) > 10
        assert np.all(np.diff(c.tokens) > 0)
        assert np.all(np.diff(c.cdf) > 0) and c.cdf.iloc[0] > 0
        assert c.cdf.iloc[-1] == pytest.approx(1.0)


def test_token_cdf_thinning_keeps_the_end():
    from types import SimpleNamespace

    v = np.arange(1, 5001)
    c = token_cdfs(SimpleNamespace(prompt_tokens=v, output_tokens=v[::-1].copy()), max_points=50)
    assert c.groupby("quantity").size().max() <= 50
    assert c.groupby("quantity").cdf.last().tolist() == [1.0, 1.0]
    p = c[c.quantity == "prompt_tokens"]
    np.testing.assert_allclose(p.cdf, p.tokens / 5000)


def test_arrival_rate_counts_every_request(data):
    r = data.arrival_rate
    n = round(FIXTURE_RPS * FIXTURE_DURATION_S)
    assert r.requests.sum() == n
    # the search's trace: exactly n requests, the last ones may arrive just past the window
    assert FIXTURE_DURATION_S <= len(r) <= 1.1 * FIXTURE_DURATION_S
    assert r.requests.mean() == pytest.approx(n / len(r))


# --------------------------------------------------------------------------- latency vs load
def test_load_curves_cover_every_feasible_answer(result, data):
    c = data.load_curves
    fams = [b["design"]["family"] for b in result["best"] if b["feasible"]]
    assert list(c.family.unique()) == fams
    assert sorted(c.load_factor.unique()) == list(LOAD_FACTORS)
    np.testing.assert_allclose(sorted(c.rps.unique()), [f * FIXTURE_RPS for f in LOAD_FACTORS])
    assert len(c) == len(fams) * len(LOAD_FACTORS) * 9
    limits = SLO().limits()
    for k, m in enumerate(("ttft", "tbt", "e2e")):
        for j, p in enumerate(("p50", "p90", "p99")):
            assert set(c[(c.metric == m) & (c.percentile == p)].slo_limit) == {limits[k, j]}


def test_load_curve_at_the_goal_rate_reproduces_the_answer(result, data):
    # Same trace (workload, rate, duration, seed) and engine: the same slowdowns.
    c = data.load_curves
    for b in result["best"]:
        if not b["feasible"]:
            continue
        at1 = c[(c.family == b["design"]["family"]) & (c.load_factor == 1.0)]
        for row in at1.itertuples():
            assert row.slowdown == pytest.approx(b["slo"]["slowdown"][row.metric][row.percentile], rel=1e-9)
            assert row.slo_met


def test_load_curves_p50_nondecreasing_in_load(data):
    # p50 slowdowns (per-request ratios, so the request sizes of each trace cancel out)
    # of TTFT and E2E: more load never makes the median request faster, up to the
    # sampling noise of traces drawn at different rates. TBT is not checked: once a
    # split design's prompt pool saturates it throttles what reaches the token pool,
    # whose decode batches (and TBT) then shrink.
    # Past overload (a median slowdown beyond 5x, the loosest p99 limit) the mixed pool lends
    # token machines to the swamped prompt side, and medians of a finite trace follow those
    # transients; the step-by-step check stops at the first overloaded load.
    c = data.load_curves
    for (fam, m), g in c[(c.percentile == "p50") & c.metric.isin(["ttft", "e2e"])].groupby(["family", "metric"]):
        y = g.sort_values("rps").slowdown.to_numpy()
        assert np.all(np.isfinite(y)), (fam, m, y)
        over = np.flatnonzero(y > 5.0)
        head = y[: over[0] + 1] if over.size else y
        assert np.all(head[1:] >= 0.9 * np.maximum.accumulate(head)[:-1]), (fam, m, y)
        assert y[-1] >= y[0], (fam, m, y)


# --------------------------------------------------------------------------- latency model
def test_latency_model_curves_and_calibration_points(data):
    pts, cur = data.calibration_points, data.latency_curves
    assert set(pts.gpu) == {"a100-80gb", "h100-80gb"} and set(pts.tp) == {2, 4, 8}
    assert set(pts.phase) == {"prefill", "decode"} and (pts.time_ms > 0).all()
    assert pts.excluded.sum() == 2  # batch 64 at TP 2, one per GPU
    assert (cur.time_ms > 0).all()
    for _, g in cur[cur.phase == "prefill"].groupby(["model", "gpu", "tp"]):
        assert np.all(np.diff(g.sort_values("x").time_ms) > 0)
    # the question's model (no measurements) is drawn on the answers' GPUs
    q = cur[cur.model == FIXTURE_MODEL]
    assert set(q.gpu) == {"a100-80gb", "h100-80gb"} and not q.measured.any()
    # the model is close to the points it was fitted on (README: held-out MAPE < 10%)
    merged = pts[~pts.excluded].merge(cur[cur.measured], on=["phase", "model", "gpu", "tp", "x"],
                                      suffixes=("_measured", "_model"))
    assert len(merged) > 0.8 * (~pts.excluded).sum()
    ape = np.abs(merged.time_ms_model / merged.time_ms_measured - 1)
    assert ape.median() < 0.15


# --------------------------------------------------------------------------- HTML page
def test_report_is_self_contained_and_small(html):
    assert len(html.encode()) < MAX_REPORT_BYTES
    # plotly.js inlined exactly once, no script or stylesheet fetched from anywhere
    assert html.count("window.PlotlyConfig") == 1
    for tag in re.findall(r"<(?:script|link|img|iframe)\b[^>]*>", html, flags=re.I):
        assert not re.search(r"""(?:src|href)\s*=\s*["']?(?:https?:)?//""", tag, flags=re.I), tag
    assert not re.search(r"""<script[^>]+src=""", html, flags=re.I)


def test_report_has_every_chart(result, html):
    charts = re.findall(r'class="chart" data-chart="([^"]+)"', html)
    expected = [f"heatmap-{f}" for f in FIXTURE_GRIDS] + ["pareto", "latency-vs-load", "summary", "workload",
                                                          "latency-model"]
    assert charts == expected
    assert html.count('class="plotly-graph-div"') == len(expected)


def test_report_header_states_question_and_answer(result, html):
    w = result["winner"]
    for text in ("coding", "bloom-176b", "goal", "seed", "0.1.0", "dgx-h100", "TTFT p50/p90/p99",
                 w["design"]["family"] + " ★", f"{w['cost_usd_per_h']:,.0f}"):
        assert text in html, text


def test_report_without_feasible_answer_still_renders(result):
    r = copy.deepcopy(result)
    for b in r["best"]:
        b["feasible"] = False
    r["winner"] = None
    for row in r["evaluated"]:
        row["slo_met"] = False
    # a family the search could not score at all: its design's fields are null
    r["best"][0]["design"].update(prompt_machines=None, token_machines=None, prompt_machine=None,
                                  token_machine=None)
    r["best"][0]["cost_usd_per_h"] = r["best"][0]["power_kw"] = None
    page = build_report_html(r)
    charts = re.findall(r'data-chart="([^"]+)"', page)
    assert "pareto" not in charts and "latency-vs-load" not in charts and "summary" not in charts
    assert "No design of any family meets every SLO" in page
    assert "no design" in page


def test_write_report_refuses_to_overwrite(result, html, tmp_path, monkeypatch):
    import reports

    # file handling only: the page itself is the module's `html`
    monkeypatch.setattr(reports, "build_report_html", lambda r, **kw: html)
    out = tmp_path / "sub" / "report.html"
    assert write_report(result, out) == out and out.read_text() == html
    with pytest.raises(ProvisionerError, match="exists; pass force=True"):
        write_report(result, out)
    out.write_text("old")
    write_report(result, out, force=True)
    assert out.read_text() == html
    with pytest.raises(ProvisionerError, match="is a directory"):
        write_report(result, tmp_path)


@pytest.mark.parametrize("path, key", [
    (("question", "workload"), "question.workload"),
    (("evaluated", 3, "slo_met"), "evaluated[3].slo_met"),
    (("best", 0, "design"), "best[0].design"),
    (("winner",), "'winner'"),
])
def test_missing_key_is_a_one_line_error_naming_it(result, path, key):
    r = copy.deepcopy(result)
    obj = r
    for k in path[:-1]:
        obj = obj[k]
    del obj[path[-1]]
    with pytest.raises(ProvisionerError, match=re.escape(key)) as err:
        report_data(r)
    assert "\n" not in str(err.value)


# --------------------------------------------------------------------------- CLI
def _cli(argv, capsys):
    """`provision report ARGV` through `provisioner.cli.run`, the console script's error path:
    returns (exit code, stdout + stderr)."""
    from provisioner.cli import run

    code = run(["report", *[str(a) for a in argv]])
    out = capsys.readouterr()
    return code, out.out + out.err


def test_cli_report_writes_the_file_and_refuses_overwrite(tmp_path, capsys, monkeypatch):
    import reports

    src = tmp_path / "result.json"
    src.write_text(json.dumps(fixture_result(("splitwise-hh",))))
    out = tmp_path / "r.html"
    code, output = _cli([src, "--out", out], capsys)
    assert code == 0 and "wrote" in output, output
    assert out.read_text().startswith("<!DOCTYPE html>") and 'data-chart="heatmap-splitwise-hh"' in out.read_text()
    code, output = _cli([src, "--out", out], capsys)
    assert code == 2 and "exists; pass --force" in output
    monkeypatch.setattr(reports, "build_report_html", lambda r, **kw: "<!DOCTYPE html>forced")
    assert _cli([src, "--out", out, "--force"], capsys)[0] == 0
    assert out.read_text() == "<!DOCTYPE html>forced"


@pytest.mark.parametrize("content, message", [
    ("{not json", "is not valid JSON (line 1, column 2"),
    ('{"goal": "cost"}', "lacks key 'constraint'"),
    ('[1, 2]', "must be a JSON object"),
    # another command's answer: which one (was: "lacks key 'constraint'"); cloud and autoscale
    # answers are drawn as their --report draws them, so a cut or mistyped one says what is wrong
    ('{"goal": "rps", "inventory": "thunderserve-32gpu", "replicas": []}',
     "this answer of `provision cloud --json`: lacks key 'slo_attainment'; save it again"),
    ('{"static": {}, "autoscaled": {}}', "this answer of `provision autoscale --json`: lacks key 'family'"),
    ('{"static": {"machines": 2}, "autoscaled": {}, "scale_on": "rate", "duration_s": "a day", "family": "f", '
     '"saving_pct": 1, "timeline": {"time_s": [0], "machines": [1], "observed_rps": [1]}}',
     "this answer of `provision autoscale --json`: key 'duration_s' must be number (got 'a day', a string)"),
    ('{"design": {}, "ttft_ms": {}}', "answer of `provision simulate --json`"),
    # one checker worded for each kind of file (the command pages' wording was string-replaced)
    ('{"goal": "cost", "constraint": [], "question": {}, "best": [], "winner": null, "evaluated": []}',
     "result JSON key 'constraint' must be object (got [], a list) (see provisioner/RESULT_SCHEMA.md)"),
    ('{"inventory": "i", "replicas": [], "slo_attainment": {"ttft": "x"}, "cost_usd_per_h": 1, "throughput_rps": 1}',
     "this answer of `provision cloud --json`: key 'slo_attainment.ttft' must be number (got 'x', a string); "
     "save it again with `provision cloud ... --json`"),
    ('{"static": {"machines": 2, "ttft_ms": {"p99": "slow"}}, "autoscaled": {}, "scale_on": "rate", "duration_s": 60, '
     '"family": "f", "saving_pct": 1, "timeline": {"time_s": [0], "machines": [1], "observed_rps": [1]}}',
     "this answer of `provision autoscale --json`: key 'static.ttft_ms.p99' must be number or null (got 'slow', "
     "a string); save it again"),
    # drawn without a word before (helper 66): values no day holds
    ('{"static": {"machines": 2}, "autoscaled": {}, "scale_on": "rate", "duration_s": NaN, "family": "f", '
     '"saving_pct": 1, "timeline": {"time_s": [0], "machines": [1], "observed_rps": [1]}}',
     "key 'duration_s' must be a finite number >= 0 (got nan)"),
    ('{"static": {"machines": -5}, "autoscaled": {}, "scale_on": "rate", "duration_s": 60, "family": "f", '
     '"saving_pct": 1, "timeline": {"time_s": [0], "machines": [1], "observed_rps": [1]}}',
     "key 'static.machines' must be >= 0 (got -5)"),
    ('{"static": {"machines": 2}, "autoscaled": {}, "scale_on": "rate", "duration_s": 60, "family": "f", '
     '"saving_pct": 1, "timeline": {"time_s": [0, 60], "machines": [1], "observed_rps": [1, 2]}}',
     "keys 'timeline.time_s' and 'timeline.machines' must be as long"),
])
def test_cli_report_bad_input_is_one_line(tmp_path, capsys, content, message):
    src = tmp_path / "bad.json"
    src.write_text(content)
    code, output = _cli([src, "--out", tmp_path / "r.html"], capsys)
    assert code == 2
    lines = [line for line in output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], output
    assert not (tmp_path / "r.html").exists()


def _autoscale_answer(arrival: str) -> dict:
    """A small autoscale answer as `provision autoscale --json` writes it (a 1-h day)."""
    window = {"start_s": 1200.0, "requests": 80, "rps": 0.67, "prompt_tokens": 160000, "output_tokens": 4000}
    return {"family": "baseline-h100", "duration_s": 3600.0, "saving_pct": 20.0, "scale_on": "rate",
            "static": {"machines": 3}, "autoscaled": {},
            "timeline": {"time_s": [60.0, 120.0], "observed_rps": [1.0, 2.0], "machines": [1, 2]},
            "trace": {"arrival": arrival, "duration_s": 120.0},
            "sizing": {"by": ["prompt_tokens"], **window, "sized": True},
            "sizing_windows": [{"by": ["requests", "output_tokens"], **window, "start_s": 600.0},
                               {"by": ["prompt_tokens"], **window}]}


def test_the_autoscale_page_shades_a_replayed_days_sizing_windows():
    """Where the static cluster was sized: the day's busiest windows shaded, the one that set
    its count named; drawn arrivals are sized on the stream at the peak, no part of the day."""
    from reports import build_autoscale_html

    page = build_autoscale_html(_autoscale_answer("replay"))
    assert "static sized here" in page and ("shaded: the day's busiest 120-s windows (grey: by requests and "
                                            "output tokens; red: by prompt tokens)") in page
    assert page.count('"fillcolor":"firebrick"') == 2 and page.count('"fillcolor":"gray"') == 2   # both panels
    assert "static sized here" not in build_autoscale_html(_autoscale_answer("poisson"))
    saved_before = _autoscale_answer("replay")
    del saved_before["sizing_windows"], saved_before["sizing"]["by"], saved_before["sizing"]["sized"]
    assert "(red: by requests)" in build_autoscale_html(saved_before)   # a page of an answer saved before them
    given = _autoscale_answer("replay")
    given["sizing"]["sized"] = False   # --static-machines: no window sized it
    page = build_autoscale_html(given)
    assert "static sized here" not in page and "the static cluster its size given (--static-machines)" in page
    assert '"fillcolor":"firebrick"' not in page


def test_cli_report_missing_file(tmp_path, capsys):
    code, output = _cli([tmp_path / "nope.json", "--out", tmp_path / "r.html"], capsys)
    assert code == 2 and "does not exist" in output


# --------------------------------------------------------------------------- a real search
@pytest.fixture(scope="module")
def searched():
    """`provision` on a small question (two families, 30-s trace): its JSON as saved."""
    from provisioner.search import ProvisionRequest, provision

    req = ProvisionRequest(goal="cost", rps=20, families=("baseline-h100", "splitwise-hh"), duration_s=30)
    return json.loads(json.dumps(provision(req).to_json()))


def test_splitwisesim_answers_have_no_timeline_to_re_run(monkeypatch):
    """SplitwiseSim's scheduler keeps no timeline: every answer was re-run in the DES for an
    empty section (minutes on a large question)."""
    import provisioner.sim

    result = fixture_result(("baseline-h100", "splitwise-hh"))
    for b in result["best"]:
        b["design"]["scheduler"] = "splitwisesim"
    simulate, for_timelines = provisioner.sim.simulate, []

    def recorded(*args, **kwargs):
        if "timelines" in kwargs:
            for_timelines.append(args)
        return simulate(*args, **kwargs)
    monkeypatch.setattr(provisioner.sim, "simulate", recorded)
    assert report_data(result, load_factors=(1.0,), curve_duration_s=5.0).scheduler_timelines == {}
    assert not for_timelines


def test_a_cost_answer_on_a_replayed_window_is_drawn_at_the_asked_load(cli):
    """A 20-s window of coding's replayed arrivals at 3 req/s holds 12 requests: the design
    space recorded its rows at 0.6 req/s (requests over the window), and the frontier drew
    the 3-req/s answer as sustaining 0.6."""
    text = cli("--goal", "cost", "--rps", "3", "--workload", "coding", "--arrival", "replay", "--duration", "20",
               "--design", "baseline-h100", "--no-verify", "--json")
    result = json.loads(text)
    assert result["best"][0]["requests"] == 12 and {r["rps"] for r in result["evaluated"]} == {3.0}
    assert set(report_data(result).pareto.throughput_rps) == {3.0}


def test_report_of_a_real_search_result(searched, tmp_path):
    data = report_data(searched)
    best = {b["design"]["family"]: b for b in searched["best"]}
    for fam, h in data.heatmaps.items():
        rows = [r for r in searched["evaluated"] if r["family"] == fam]
        for r in rows:  # a cell meets the SLOs when any of its evaluations did
            i = int(np.searchsorted(h.token_counts, r["token_machines"]))
            j = int(np.searchsorted(h.prompt_counts, r["prompt_machines"]))
            assert h.evaluated[i, j]
            assert h.slo_met[i, j] == any(o["slo_met"] for o in rows
                                          if (o["prompt_machines"], o["token_machines"])
                                          == (r["prompt_machines"], r["token_machines"]))
        if best[fam]["feasible"]:
            d = best[fam]["design"]
            assert h.optimum == (d["prompt_machines"], d["token_machines"])
    assert set(data.load_curves.family) == {f for f, b in best.items() if b["feasible"]}
    out = write_report(searched, tmp_path / "search.html")
    assert out.stat().st_size < MAX_REPORT_BYTES
    assert len(re.findall(r'class="chart" data-chart=', out.read_text())) == 2 + 5


def test_the_curves_of_a_swap_answer_preempt_by_swap():
    """The latency-vs-load curves re-ran a swap answer with recompute preemption (the default)."""
    from provisioner import make_design
    from provisioner.search import ProvisionRequest, provision
    from reports import load_curves
    from workloads import TraceGenerator

    req = ProvisionRequest(goal="cost", rps=12, workload="conversation", families=("baseline-h100",),
                           duration_s=20, scheduler="jsq", preemption="swap", swap_space_gb=1.0, verify=False)
    result = json.loads(json.dumps(provision(req).to_json()))
    for answer in (result["best"][0], result["winner"]):
        answer["design"]["prompt_machines"] = 2   # overloaded: it preempts
    at1 = load_curves(result, load_factors=(1.0,)).set_index(["metric", "percentile"]).latency_ms
    design = make_design("baseline-h100", machines=2, scheduler="jsq")
    for preemption, same in (("swap", True), ("recompute", False)):
        trace = TraceGenerator.from_json(result["question"]).at(12.0)
        row = simulate(design, trace, "bloom-176b", engine="des", preemption=preemption,
                       swap_space_gb=1.0).iloc[0]
        assert (at1["ttft", "p99"] == row["ttft_p99_s"] * 1e3) == same, preemption
