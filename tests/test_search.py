"""provisioner.search: the searchers agree, the bound bounds, and answers move the right way.

Small questions (BLOOM-176B, coding, a few requests/s on 30-s traces) keep this file
fast; the Fig. 12 scale runs in benchmarks/search.py.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from provisioner.designs import DesignBatch
from provisioner.errors import ProvisionerError
from provisioner.search import (Evaluator, LoadScaledTraces, ProvisionRequest, capacity_bound, exhaustive_search,
                                family_space, max_sustainable_rps, provision, staircase_search,
                                sustainable_rps)
from provisioner.sim import simulate
from provisioner.slo import SLO
from workloads import make_workload

SMALL = dict(workload="coding", model="bloom-176b", duration_s=30.0, seed=0)
QUICK = dict(SMALL, verify=False)
PROPERTY = settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _cost(result, family="splitwise-hh"):
    fr = result.family(family)
    return float(fr.row["cost_usd_per_h"]) if fr.feasible else np.inf


# -- traces -----------------------------------------------------------------------------------
def test_load_scaled_traces_are_nested():
    traces = LoadScaledTraces("coding", 30.0, seed=3)
    lo, hi = traces.at(5.0), traces.at(8.0)
    assert len(lo) < len(hi)
    # the same requests, sooner, plus more of them
    np.testing.assert_array_equal(lo.prompt_tokens, hi.prompt_tokens[:len(lo)])
    np.testing.assert_allclose(lo.arrival_s * 5.0 / 8.0, hi.arrival_s[:len(lo)])
    again = LoadScaledTraces("coding", 30.0, seed=3).at(8.0)
    np.testing.assert_array_equal(again.arrival_s, hi.arrival_s)


# -- enumeration ------------------------------------------------------------------------------
def test_frontier_search_decides_every_cell_like_exhaustive_simulation(perf):
    space = family_space("splitwise-hh", max_prompt=8, max_token=4)
    ev = Evaluator(LoadScaledTraces("coding", 30.0, 0).at(8.0), "bloom-176b", SLO(), perf)
    frame = exhaustive_search(space, ev)
    truth = frame["slo_met"].to_numpy(bool).reshape(8, 4)
    simulated = ev.evaluations
    sc = staircase_search(space, ev, per_round=4)
    assert (sc.verdicts() == truth.astype(np.int8)).all()
    assert sc.violations == 0
    assert truth.any() and not truth.all()
    # the frontier search with a cost objective finds the same cheapest design with fewer simulations
    cost = lambda p, t: 38.0 * (np.asarray(p) + np.asarray(t))  # noqa: E731
    fresh = Evaluator(ev.trace, "bloom-176b", SLO(), perf)
    best = staircase_search(space, fresh, objective=cost, decide_all=False, per_round=4)
    p, t = np.meshgrid(np.arange(1, 9), np.arange(1, 5), indexing="ij")
    assert min(cost(*c) for c in best.frontier()) == cost(p, t)[truth].min()
    assert fresh.evaluations < simulated


def test_enumerate_and_frontier_agree():
    auto = provision(ProvisionRequest(goal="cost", rps=8, families=("splitwise-hh", "baseline-h100"), **QUICK))
    enum = provision(ProvisionRequest(goal="cost", rps=8, families=("splitwise-hh", "baseline-h100"),
                                      searcher="enumerate", **QUICK))
    for f in ("splitwise-hh", "baseline-h100"):
        assert _cost(auto, f) == _cost(enum, f)
        assert auto.family(f).evaluations <= enum.family(f).evaluations
    assert auto.family("splitwise-hh").searcher == "ilp+enumeration"
    assert enum.family("splitwise-hh").searcher == "enumeration"


# -- the integer program's bound -------------------------------------------------------------
@pytest.mark.parametrize("family,goal", [("splitwise-hh", "cost"), ("splitwise-ha", "cost"),
                                         ("baseline-a100", "cost"), ("splitwise-hhcap", "power")])
def test_bound_never_exceeds_the_verified_optimum(family, goal):
    req = ProvisionRequest(goal=goal, rps=6, families=(family,), verify=True, verify_duration_s=45.0,
                           verify_seeds=(1,), **SMALL)
    fr = provision(req).family(family)
    assert fr.feasible and fr.verification["met"]
    key = "cost_usd_per_h" if goal == "cost" else "power_kw"
    assert fr.lower_bound <= fr.row[key] + 1e-6
    assert fr.gap_to_bound_pct == pytest.approx((fr.row[key] - fr.lower_bound) / fr.row[key] * 100)


def test_pooled_verification_is_the_des_of_each_answer():
    """Every family's DES re-check runs in one worker pool while the next family is
    searched; each family's verification must be the DES of its own answer on the
    verification traces (seeds 1 and 2), as run here one by one."""
    families = ("splitwise-hh", "baseline-h100", "splitwise-ha")
    req = ProvisionRequest(goal="cost", rps=6, families=families, verify=True, verify_duration_s=45.0, **SMALL)
    res = provision(req)
    traces = [make_workload("coding", 6, duration_s=45.0, seed=s) for s in (1, 2)]
    for fr in res.families:
        v = fr.verification
        assert fr.feasible and v["seeds"] == [1, 2] and v["des_runs"] == 1   # the answer is the design checked
        design = DesignBatch.from_frame(fr.row.to_frame().T).design(0)
        rows = pd.concat([simulate(design, tr, "bloom-176b", engine="des") for tr in traces])
        assert v["min_margin"] == rows["min_margin"].min()
        for m in ("ttft", "tbt", "e2e"):
            for q in ("p50", "p90", "p99"):
                assert v["worst_slowdown"][m][q] == rows[f"slowdown_{m}_{q}"].max()


def test_throughput_bound_is_above_the_sustained_load():
    req = ProvisionRequest(goal="throughput", power_budget_kw=70.0, families=("splitwise-hh", "baseline-h100"),
                           **QUICK)
    res = provision(req)
    for fr in res.families:
        assert fr.feasible
        assert fr.row["power_kw"] <= 70.0 + 1e-9
        assert fr.sustainable_rps <= fr.lower_bound
    assert res.winner_family == "splitwise-hh"


@PROPERTY
@given(rps=st.sampled_from([3.0, 5.0, 8.0, 12.0]), family=st.sampled_from(["splitwise-hh", "splitwise-aa"]))
def test_bound_below_search_optimum(rps, family, perf):
    res = provision(ProvisionRequest(goal="cost", rps=rps, families=(family,), **QUICK), perf=perf)
    fr = res.family(family)
    assert fr.feasible and fr.lower_bound <= fr.row["cost_usd_per_h"] + 1e-6


# -- monotone answers ---------------------------------------------------------------------------
@PROPERTY
@given(rps=st.sampled_from([4.0, 7.0, 10.0]), scales=st.lists(st.sampled_from([0.8, 1.0, 1.3, 1.8]),
                                                              min_size=2, max_size=2, unique=True))
def test_a_looser_slo_never_raises_the_optimal_cost(rps, scales, perf):
    tight, loose = sorted(scales)
    costs = [_cost(provision(ProvisionRequest(goal="cost", rps=rps, families=("splitwise-hh",), slo_scale=s,
                                              **QUICK), perf=perf)) for s in (tight, loose)]
    assert costs[1] <= costs[0]


@PROPERTY
@given(rates=st.lists(st.sampled_from([3.0, 5.0, 7.0, 9.0, 12.0]), min_size=2, max_size=2, unique=True))
def test_a_higher_rate_never_lowers_the_optimal_cost(rates, perf):
    low, high = sorted(rates)
    costs = [_cost(provision(ProvisionRequest(goal="cost", rps=r, families=("splitwise-hh",), **QUICK), perf=perf))
             for r in (low, high)]
    assert costs[0] <= costs[1]


def test_sustainable_rps_is_vectorized_and_monotone_in_machines(perf):
    space = family_space("splitwise-hh")
    designs = space.designs([2, 4, 6], [1, 1, 2])
    traces = LoadScaledTraces("coding", 30.0, 0)
    calls = []

    def evaluate_at(batch, trace):
        calls.append(len(batch))
        return Evaluator(trace, "bloom-176b", SLO(), perf)(batch)

    rps, hi = sustainable_rps(designs, traces, evaluate_at, rps_lo=4.0, rps_hi=16.0, rel_tol=0.02,
                              return_bracket=True)
    assert np.all(np.isfinite(rps)) and np.all(np.diff(rps) >= 0)
    assert np.all(hi <= rps * 1.02 + 1e-9)
    assert max(calls) > 1  # designs at the same load share one simulation
    for d, (r, h) in enumerate(zip(rps, hi)):
        one = designs.take(np.array([d]))
        assert Evaluator(traces.at(r), "bloom-176b", SLO(), perf)(one)["slo_met"].all()
        assert not Evaluator(traces.at(h), "bloom-176b", SLO(), perf)(one)["slo_met"].all()


def test_the_bisection_tries_the_smallest_meaningful_load_before_giving_up():
    """A miss at `rps_lo` halved the load, and a half below the floor (MIN_REQUESTS per
    trace) gave up untried: the answer then said 'no design meets every SLO even at 2 req/s'
    of a design that meets them there."""
    traces = LoadScaledTraces("coding", 10.0, 0)       # the floor: 20 requests in 10 s, 2 req/s
    designs = family_space("baseline-h100").designs([1])
    tried = []

    def evaluate_at(batch, trace):   # meets the SLOs up to 2.2 req/s
        tried.append(trace.rate_rps)
        return pd.DataFrame({"slo_met": [trace.rate_rps <= 2.2] * len(batch), "min_margin": 0.0})

    rps, frame = max_sustainable_rps(designs, traces, evaluate_at, rps_lo=3.0, rps_hi=5.0)
    assert 2.0 in tried and 2.0 <= rps < 2.3 and frame["slo_met"].all()   # 2.2 as whole requests
    assert 2.0 <= sustainable_rps(designs, traces, evaluate_at, rps_lo=3.0, rps_hi=5.0)[0] < 2.3
    tried.clear()
    never = max_sustainable_rps(designs, traces, lambda b, t: evaluate_at(b, t).assign(slo_met=False),
                                rps_lo=3.0, rps_hi=5.0)
    assert np.isnan(never[0]) and min(tried) == 2.0      # the floor itself tried, nothing below it


# -- optuna ---------------------------------------------------------------------------------------
def _custom(seed, trials=12, search_tp=True):
    return ProvisionRequest(goal="cost", rps=6, families=("splitwise-custom",),
                            prompt_machine_types=("dgx-h100", "hgx-h200"), token_machine_types=("dgx-a100", "hgx-h200"),
                            searcher="optuna", n_trials=trials, trial_batch=4, sampler_seed=seed,
                            search_tp=search_tp, **QUICK)


def test_optuna_batched_ask_tell_is_reproducible(perf):
    a = provision(_custom(1), perf=perf)
    b = provision(_custom(1), perf=perf)
    ta = a.family("splitwise-custom").bayes.trials
    tb = b.family("splitwise-custom").bayes.trials
    assert len(ta) == 12
    assert ta.drop(columns=["evaluations"]).equals(tb.drop(columns=["evaluations"]))
    assert _cost(a, "splitwise-custom") == _cost(b, "splitwise-custom")
    c = provision(_custom(2), perf=perf).family("splitwise-custom").bayes.trials
    assert not ta[["prompt_power_cap", "token_power_cap"]].equals(c[["prompt_power_cap", "token_power_cap"]])


def test_optuna_matches_enumeration_on_a_small_mixed_space(perf):
    res = provision(_custom(0, search_tp=False), perf=perf)
    best = _cost(res, "splitwise-custom")
    assert res.family("splitwise-custom").searcher == "optuna"
    # Enumeration: every pair of machine types at full power (a lower cap never lowers the
    # cost and never speeds a machine up), each pair's count grid decided exactly.
    enumerated = []
    for pm in ("dgx-h100", "hgx-h200"):
        for tm in ("dgx-a100", "hgx-h200"):
            req = ProvisionRequest(goal="cost", rps=6, families=("splitwise-custom",), prompt_machine_types=(pm,),
                                   token_machine_types=(tm,), power_cap_range=(1.0, 1.0), searcher="enumerate",
                                   search_tp=False, **QUICK)
            r = provision(req, perf=perf)
            assert r.family("splitwise-custom").searcher == "enumeration"
            enumerated.append(_cost(r, "splitwise-custom"))
    assert best <= min(enumerated) * 1.02


def test_optuna_searches_tensor_parallelism_where_it_fits(perf):
    """BLOOM-176B (329 GB) fits an HGX-H200 (8 x 141 GB) at TP 4 or 8, a DGX-H100 only at TP 8."""
    res = provision(_custom(0, trials=16), perf=perf)
    trials = res.family("splitwise-custom").bayes.trials
    assert set(trials["prompt_tp"]) <= {4, 8}
    assert 4 in set(trials.loc[trials.prompt_machine == "hgx-h200", "prompt_tp"])
    assert set(trials.loc[trials.prompt_machine == "dgx-h100", "prompt_tp"]) == {8}


def test_optuna_grows_a_count_bound_the_capacity_estimate_set_too_low():
    """11 DGX-A100 at TP 4 meet 10 req/s of llama2-70b coding, past the count bound that
    hardware choice's capacity estimate gave: the family was called infeasible (its reason
    naming a 'binding' SLO under its limit), and found with max_machines=40."""
    kw = dict(goal="cost", rps=10, model="llama2-70b", families=("baseline-custom",),
              prompt_machine_types=("dgx-a100",), verify=False)
    grown = provision(ProvisionRequest(**kw)).family("baseline-custom")
    wide = provision(ProvisionRequest(max_machines=40, **kw)).family("baseline-custom")
    assert wide.feasible and grown.feasible
    assert grown.row["cost_usd_per_h"] <= wide.row["cost_usd_per_h"] * (1 + 1e-9)


# -- results and errors ---------------------------------------------------------------------------
def test_result_json_follows_the_schema():
    res = provision(ProvisionRequest(goal="cost", rps=6, families=("splitwise-hh", "baseline-a100"), **QUICK))
    obj = res.to_json()
    assert set(obj) >= {"goal", "constraint", "question", "best", "winner", "evaluated", "elapsed_s"}
    assert obj["constraint"] == {"rps": 6.0}
    assert [b["design"]["family"] for b in obj["best"]] == ["splitwise-hh", "baseline-a100"]
    for b in obj["best"]:
        assert {"feasible", "reason", "sustainable_rps", "lower_bound", "gap_to_bound_pct", "searcher",
                "evaluations", "verification", "slo", "ttft_ms", "cost_usd_per_h"} <= set(b)
        assert set(b["slo"]["slowdown"]) == {"ttft", "tbt", "e2e"}
    assert obj["winner"]["design"]["family"] == res.winner_family
    assert len(obj["evaluated"]) == sum(fr.evaluations for fr in res.families)
    reports = pytest.importorskip("reports._schema")
    reports.validate_result(obj)


def test_a_family_with_nothing_feasible_says_what_binds():
    res = provision(ProvisionRequest(goal="cost", rps=12, families=("splitwise-hh",), max_machines=2, **QUICK))
    fr = res.family("splitwise-hh")
    assert not fr.feasible and res.winner is None
    assert "binds" in fr.reason and "more machines (max_machines)" in fr.reason and "(slo_scale)" in fr.reason
    assert "--" not in fr.reason   # the Python API names its parameters; the CLI says its flags
    assert res.to_json()["winner"] is None
    with pytest.raises(ProvisionerError, match="'splitwise-aa' was not searched; this result holds splitwise-hh"):
        res.family("splitwise-aa")   # was a bare KeyError


@pytest.mark.parametrize("rps", [14, 70])
def test_a_budget_a_cost_answer_spends_sustains_its_load(rps):
    """`--goal cost --rps 14` verified splitwise-hh 7P+2T at $342/h; `--goal throughput` at
    $342/h called the budget infeasible: its six 3% steps under the search trace's 17.3 req/s,
    among the designs that sustained that load only, never passed the re-check. At 70 req/s
    ($1216/h) the first 3% step that passed was the answer, 68.3 req/s: a pass is now
    bisected against the load above it, to the search's 1%."""
    family = ("splitwise-hh",)
    cost = provision(ProvisionRequest(goal="cost", rps=rps, families=family)).family("splitwise-hh")
    assert cost.feasible
    budget = cost.row["cost_usd_per_h"]
    most = provision(ProvisionRequest(goal="throughput", cost_budget_usd_per_h=budget, families=family))
    fr = most.family("splitwise-hh")
    assert fr.feasible and fr.row["cost_usd_per_h"] <= budget and fr.sustainable_rps >= rps / 1.01


def test_the_recheck_verdicts_are_on_the_evaluated_rows():
    """`recheck`: every design the walk rejected costs no more than the answer, which is
    the one row that passed; the JSON, the table's re-check row and the sweep read them."""
    res = provision(ProvisionRequest(goal="cost", rps=70, families=("splitwise-hh",)))
    fr = res.family("splitwise-hh")
    rows = res.to_json()["evaluated"]
    failed = [r for r in rows if r["recheck"] == "failed"]
    passed = [r for r in rows if r["recheck"] == "passed"]
    assert failed and len(passed) == 1
    assert passed[0]["prompt_machines"] == fr.row["prompt_machines"]
    assert max(r["cost_usd_per_h"] for r in failed) <= fr.row["cost_usd_per_h"]
    assert min(r["cost_usd_per_h"] for r in failed) < fr.row["cost_usd_per_h"]   # cheaper, and not the answer
    best = res.best.iloc[0]
    assert best["recheck_binding_slo"] == fr.verification["binding"]
    assert best["recheck_min_margin"] == pytest.approx(fr.verification["min_margin"])


def test_a_design_the_recheck_rejected_at_a_load_is_rejected_above_it():
    """Goal throughput scores designs at loads above those its re-check tries: the Pareto
    rated the answer 7P+2T (14.73 req/s) at 16.39, a load where it had failed the re-check."""
    import reports

    res = provision(ProvisionRequest(goal="throughput", cost_budget_usd_per_h=342, families=("splitwise-hh",),
                                     duration_s=30))
    fr = res.family("splitwise-hh")
    assert fr.feasible
    obj = res.to_json()
    front = reports.pareto(reports.evaluated_frame(obj))
    answer = front[(front.prompt_machines == fr.row["prompt_machines"])
                   & (front.token_machines == fr.row["token_machines"])]
    assert len(answer) == 1 and answer.throughput_rps.iloc[0] == pytest.approx(fr.sustainable_rps)
    assert front.throughput_rps.max() <= fr.sustainable_rps * (1 + 1e-9)


def test_a_custom_family_found_only_at_its_largest_design_gets_its_counts_searched():
    """When every optuna trial failed, the family's largest design (10 machines, $380/h)
    was the answer as it stood; the counts of its hardware are searched now."""
    res = provision(ProvisionRequest(goal="cost", rps=7, families=("baseline-custom",),
                                     prompt_machine_types=("dgx-h100",), power_cap_range=(0.4, 1.0), duration_s=20,
                                     max_machines=10, n_trials=1, verify=False))
    fr = res.family("baseline-custom")
    assert not fr.bayes.trials.feasible.any()   # the fallback this test is about, not a trial, found it
    assert fr.feasible and fr.row["prompt_machines"] < 10


def test_a_budget_that_buys_nothing_says_so():
    res = provision(ProvisionRequest(goal="throughput", cost_budget_usd_per_h=50.0,
                                     families=("splitwise-hh",), **QUICK))
    fr = res.family("splitwise-hh")
    assert not fr.feasible and "budget" in fr.reason and fr.row is None


@pytest.mark.parametrize("kwargs,match", [
    (dict(goal="cost"), "needs rps"),
    (dict(goal="cost", rps=0), "rps must be a finite number > 0"),
    (dict(goal="throughput"), "exactly one budget"),
    (dict(goal="throughput", power_budget_kw=10, cost_budget_usd_per_h=10), "exactly one budget"),
    (dict(goal="throughput", power_budget_kw=-1), "power_budget_kw must be a finite number > 0"),
    (dict(goal="speed", rps=1), "goal must be one of"),
    (dict(goal="cost", rps=1, families=("splitwise-xx",)), "did you mean 'splitwise-"),
    (dict(goal="cost", rps=1, searcher="grid"), "searcher must be one of"),
    (dict(goal="cost", rps=1, seed=-1), "seed must be an integer >= 0"),
    (dict(goal="cost", rps=1, max_machines=1.5), r"max_machines must be an integer in \[1, 100000\]"),
])
def test_request_validation(kwargs, match):
    with pytest.raises(ProvisionerError, match=match):
        ProvisionRequest(**kwargs)


def test_an_slo_no_machine_meets_is_an_error():
    with pytest.raises(ProvisionerError, match="no machine can meet the SLO"):
        provision(ProvisionRequest(goal="cost", rps=5, families=("baseline-a100",), slo_scale=0.5, **QUICK))


def test_capacity_bound_is_infeasible_without_options():
    from provisioner.search import Demand
    tr = LoadScaledTraces("coding", 30.0, 0).at(5.0)
    with pytest.raises(ProvisionerError):
        capacity_bound([], None, Demand.from_trace(tr), goal="cost", rps=5.0)


def test_exhaustive_simulates_every_cell_and_agrees():
    ex = provision(ProvisionRequest(goal="cost", rps=8, families=("splitwise-hh",), searcher="exhaustive",
                                    max_machines=6, **QUICK))
    auto = provision(ProvisionRequest(goal="cost", rps=8, families=("splitwise-hh",), max_machines=6, **QUICK))
    assert ex.family("splitwise-hh").evaluations == 36
    assert len(ex.evaluated) == 36
    assert _cost(ex) == _cost(auto)


def test_an_infeasible_answer_advises_what_its_goal_can_relax():
    """Goal throughput lowers the load itself and is bounded by a budget: its failed re-check
    said 'relax with more machines, ... or a lower load', advice for the cost and power goals."""
    from provisioner.search import relax_advice

    throughput = ProvisionRequest(goal="throughput", power_budget_kw=70.0, families=("baseline-h100",))
    assert relax_advice(throughput) == "raise the budget or loosen the SLO (slo_scale)"
    for goal in ("cost", "power"):
        advice = relax_advice(ProvisionRequest(goal=goal, rps=10.0, families=("baseline-h100",)))
        assert "more machines (max_machines)" in advice and "lower load" in advice


def test_the_cli_says_a_reasons_parameters_as_its_flags():
    """The reasons of the same infeasible question: the library names max_machines and
    slo_scale, the CLI's table and --json say --max-machines and --slo-scale (as before)."""
    import contextlib
    import io
    import json

    from provisioner.cli import run

    args = ["--goal", "cost", "--rps", "12", "--design", "splitwise-hh", "--max-machines", "2", "--duration", "30",
            "--no-verify"]
    shown = []
    for extra in ([], ["--json"]):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            assert run(args + extra) == 0
        shown.append(out.getvalue())
    reason = json.loads(shown[1])["best"][0]["reason"]
    expected = "relax with more machines (--max-machines), a looser SLO (--slo-scale) or a lower load"
    assert reason.endswith(expected), reason
    assert expected in " ".join(shown[0].split()), shown[0]   # the table wraps long lines
