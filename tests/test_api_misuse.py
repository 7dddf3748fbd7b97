"""The Python API misused as a notebook would: each wrong argument is one project-error line
naming the parameter and the fix, never a numpy/pandas TypeError or a silent answer."""

from __future__ import annotations

import pytest

from perfmodels import PerfModelError
from provisioner import ProvisionerError


def one_line(exc_info) -> str:
    message = str(exc_info.value)
    assert "\n" not in message
    return message


# --------------------------------------------------------------------------- provisioner.cloud.plan_cloud
@pytest.fixture(scope="module")
def cloud_question():
    from perfmodels import LatencyModel
    from provisioner.cloud import load_inventory
    from workloads import TraceGenerator

    perf = LatencyModel()
    inventory = load_inventory("thunderserve-32gpu", perf.catalog)
    traces = TraceGenerator("coding", 30.0, 0, arrival="poisson", rps=4.0)
    return inventory, perf.llm("llama-30b"), perf, traces


@pytest.mark.parametrize("given, needle", [
    (dict(goal="latency"), "goal must be one of rps, throughput, cost"),   # was answered as goal 'latency'
    (dict(rps=None), r"goal 'rps' needs rps \(the load to plan for\)"),   # was a TypeError from rps * duration_s
    (dict(rps="4"), "rps must be a finite number > 0"),
    (dict(rps=-4.0), "rps must be a finite number > 0"),        # was 'arrival_s is not sorted ascending'
    (dict(goal="throughput"), "goal throughput finds the rate itself: drop rps"),
    (dict(target=2.0), r"target must be a finite number in \(0, 1\]"),   # was planned for 200% attainment
    (dict(engine="DES"), "engine must be one of fluid, des"),   # was refused after the search, 9 s in
    (dict(seed="x"), "seed must be an integer"),                # numpy's SeedSequence TypeError
    (dict(without="no-such-node"), "no node 'no-such-node'"),   # was answered with a 'replan_skipped'
    (dict(traces="coding"), "traces must be a workloads.TraceGenerator"),   # was an AttributeError
    (dict(inventory="thunderserve-32gpu"), "inventory must be an Inventory: load_inventory"),
    (dict(llm=None), "model must be a catalog model name"),     # was an AttributeError in the physics
])
def test_plan_cloud_refuses_a_bad_argument_before_any_search(cloud_question, given, needle):
    from provisioner.cloud import plan_cloud

    inventory, llm, perf, traces = cloud_question
    args = dict(inventory=inventory, llm=llm, perf=perf, traces=traces, rps=4.0)
    args.update(given)
    with pytest.raises((ProvisionerError, PerfModelError), match=needle) as exc_info:
        plan_cloud(args.pop("inventory"), args.pop("llm"), args.pop("perf"), args.pop("traces"), **args)
    one_line(exc_info)


def test_plan_cloud_takes_the_models_name(cloud_question):
    """README passes perf.llm('llama-30b'); the name itself is the same question."""
    from provisioner.cloud import check_question

    inventory, llm, perf, traces = cloud_question
    named = check_question(inventory, "llama-30b", perf, traces, goal="rps", rps=4.0, seed=0, target=0.99,
                           engine="des", rescore_engine="des", without=None, new_mix=None)
    assert named == llm


# --------------------------------------------------------------------------- make_design and grid
@pytest.mark.parametrize("call, needle", [
    (lambda p: p.make_design("baseline-a100", 10, 5), "has one pool of machines: give machines=N, not token_machines"),
    (lambda p: p.make_design("baseline-a100", 10, machines=20), "give machines or prompt_machines, not both"),
    (lambda p: p.make_design("splitwise-hh", machines=30), "give prompt_machines and token_machines, not machines"),
    (lambda p: p.make_design("splitwise-hh", 20, 5, machines=30), "not machines"),
    (lambda p: p.grid("baseline-a100", range(1, 3), range(1, 5)), "drop token_counts"),
])
def test_a_count_the_family_has_no_pool_for_is_refused_not_dropped(call, needle):
    import provisioner

    with pytest.raises(ProvisionerError, match=needle) as exc_info:
        call(provisioner)
    one_line(exc_info)


def test_one_pool_families_still_take_their_count_either_way():
    import provisioner

    assert provisioner.make_design("baseline-a100", 10).prompt_machines == 10
    assert provisioner.make_design("baseline-a100", machines=10, token_machines=0).prompt_machines == 10
    assert provisioner.make_design("splitwiser-h100", machines=4).token_machines == 0
    assert len(provisioner.grid("baseline-a100", range(1, 4))) == 3
    assert len(provisioner.grid("baseline-a100", range(1, 4), [0])) == 3
    assert len(provisioner.grid("splitwise-hh", range(1, 4), range(1, 3))) == 6


# --------------------------------------------------------------------------- SLO
@pytest.mark.parametrize("given, needle", [
    (dict(ttft=("a", 1, 1)), "SLO ttft limits must be three slowdowns > 0"),   # numpy's isfinite TypeError
    (dict(tbt=None), "SLO tbt limits must be three"),                             # len()'s TypeError
    (dict(e2e=2.0), "SLO e2e limits must be three"),
    (dict(ttft=(10**400, 1, 1)), "SLO ttft limits must be three"),
    (dict(ttft=(True, True, True)), "SLO ttft limits must be three"),             # was taken as 1.0
    (dict(reference_machine=5), "reference_machine must be a catalog machine name"),
])
def test_slo_refuses_limits_that_are_not_three_numbers(given, needle):
    from provisioner import SLO

    with pytest.raises(ProvisionerError, match=needle) as exc_info:
        SLO(**given)
    one_line(exc_info)


def test_slo_limits_given_as_a_list_or_array_are_the_same_slo():
    """An array made SLO == SLO raise numpy's 'truth value is ambiguous'; a list made it unhashable."""
    import numpy as np

    from provisioner import SLO

    as_array, as_list = SLO(ttft=np.array([2.0, 3.0, 6.0])), SLO(ttft=[2, 3, 6])
    assert as_array == SLO() == as_list and hash(as_list) == hash(SLO())
    assert as_list.ttft == (2.0, 3.0, 6.0) and type(as_array.ttft[0]) is float


@pytest.mark.parametrize("factor", ["2", None, float("nan"), 0])
def test_slo_scaled_refuses_a_factor_that_is_not_a_number(factor):
    from provisioner import SLO

    with pytest.raises(ProvisionerError, match="factor must be a finite number > 0"):
        SLO().scaled(factor)


# --------------------------------------------------------------------------- simulate
@pytest.fixture(scope="module")
def small_trace():
    from workloads import make_workload

    return make_workload("coding", 10, duration_s=10)


def test_simulate_refuses_an_empty_selection_of_a_table(small_trace):
    """A filter that kept no row was numpy's 'zero-size array to reduction operation maximum'."""
    from provisioner import DesignBatch, grid, simulate

    table = grid("splitwise-hh", [2, 3], [1]).to_frame()
    with pytest.raises(ProvisionerError, match="designs is empty") as exc_info:
        simulate(DesignBatch.from_frame(table[table.prompt_machines > 10]), small_trace)
    one_line(exc_info)
    with pytest.raises(ProvisionerError, match="designs is empty"):
        simulate([], small_trace)


def test_simulate_names_from_frame_for_a_table_of_designs(small_trace):
    """Iterating the table gave its column names: 'designs must hold Design objects (got 'family')'."""
    from provisioner import grid, simulate

    with pytest.raises(ProvisionerError, match=r"designs is a table: give DesignBatch.from_frame\(table\)"):
        simulate(grid("splitwise-hh", [2], [1]).to_frame(), small_trace)


@pytest.mark.parametrize("given", [dict(requests=()), dict(requests={}), dict(timelines=())])
def test_simulate_refuses_an_output_list_that_is_not_a_list_before_running(given, small_trace, monkeypatch):
    """A tuple was an AttributeError ('no attribute extend') once the whole run was done."""
    import provisioner.sim as sim
    from provisioner import make_design

    monkeypatch.setattr(sim, "_run", lambda *a, **k: pytest.fail("simulated before the check"))
    name = next(iter(given))
    with pytest.raises(ProvisionerError, match=f"^{name} must be a list"):
        sim.simulate(make_design("splitwise-hh", 2, 1), small_trace, **given)


# --------------------------------------------------------------------------- provision, perfmodels, workloads
def test_provision_refuses_a_question_that_is_not_a_request():
    from provisioner import provision

    with pytest.raises(ProvisionerError, match=r"request must be a ProvisionRequest, e.g. provision\(Provision"):
        provision({"goal": "cost", "rps": 70})   # was an AttributeError from inside the search
    with pytest.raises(ProvisionerError, match="perf must be a perfmodels.LatencyModel"):
        from provisioner import ProvisionRequest
        provision(ProvisionRequest(goal="cost", rps=5, families=("splitwise-hh",), verify=False), perf="roofline")


@pytest.mark.parametrize("outputs, needle", [
    ([0], "output_tokens must be >= 1"),          # was an E2E of the TTFT alone
    ([-3], "output_tokens must be >= 1"),
    ([float("nan")], "output_tokens must be >= 1"),
    ([1, 2, 3], r"must have one shape or broadcast to one \(got prompt_tokens \(2,\), output_tokens \(3,\)\)"),
])
def test_solo_request_s_refuses_outputs_no_request_has(outputs, needle):
    from perfmodels import LatencyModel

    with pytest.raises(PerfModelError, match=needle):
        LatencyModel().solo_request_s("llama2-70b", "h100-80gb", 8, [512, 1024][:max(1, len(outputs) - 1)], outputs)


@pytest.mark.parametrize("window", [-1, "3"])
def test_trace_head_raises_the_packages_error(window):
    """Trace.head raised a plain ValueError, which `except WorkloadError` (and the CLI) missed."""
    from workloads import WorkloadError, make_workload

    with pytest.raises(WorkloadError, match="duration_s must be a finite number of seconds > 0"):
        make_workload("coding", 5, duration_s=10).head(window)


# --------------------------------------------------------------------------- workloads
@pytest.mark.parametrize("call, needle", [
    (lambda w: w.RateProfile([0.0], [1.0], "10"), "end_s must be a number of seconds"),   # math.isfinite's TypeError
    (lambda w: w.RateProfile(["a"], [1.0], 10.0), "start_s must be numbers"),              # numpy's ValueError
    (lambda w: w.diurnal_profile("5"), "needs a peak rate peak_rps > 0, got '5'"),          # math.isfinite's TypeError
    (lambda w: w.diurnal_profile(5, "86400"), "needs a duration_s of at least one step, 900 s, got '86400'"),
    (lambda w: w.diurnal_profile(5, step_s=0), "step_s must be a number of seconds > 0"),   # np.arange's ZeroDivisionError
    (lambda w: w.TraceGenerator.from_json({}), "JSON needs a 'workload' key"),            # was a KeyError
    (lambda w: w.TraceGenerator.from_json("coding"), "JSON needs a 'workload' key"),
    (lambda w: w.TraceGenerator("coding", 10).with_profile(5), "profile must be a workloads.RateProfile"),
    (lambda w: w.poisson_arrivals(1, 10, rng="a"), "rng must be an integer seed >= 0"),   # numpy's SeedSequence TypeError
    (lambda w: w.gamma_arrivals(1, 10, 2.0, rng=-1), "rng must be an integer seed >= 0"),
    (lambda w: w.replay_arrivals(["a", "b"], 1, 10), "base_arrival_s must be arrival times in seconds"),
    (lambda w: w.Trace([0.0], [1], [1], name=5), "a trace's name must be a string"),     # was accepted
])
def test_workloads_refuse_a_bad_argument_in_one_line(call, needle):
    import workloads

    with pytest.raises(workloads.WorkloadError, match=needle) as exc_info:
        call(workloads)
    one_line(exc_info)


def test_the_arrival_generators_still_take_every_seed_numpy_takes():
    import numpy as np

    from workloads import gamma_arrivals, poisson_arrivals

    same = poisson_arrivals(2, 10, rng=7), poisson_arrivals(2, 10, rng=np.random.default_rng(7))
    assert np.array_equal(*same) and len(same[0]) == 20
    assert len(gamma_arrivals(2, 10, 2.0, rng=np.random.SeedSequence(3))) == 20
    assert len(poisson_arrivals(2, 10, rng=None)) == 20


# --------------------------------------------------------------------------- perfmodels memory and latency
@pytest.fixture(scope="module")
def bloom_on_h100():
    from perfmodels import LatencyModel

    perf = LatencyModel()
    return perf.llm("bloom-176b"), perf.gpu("h100-80gb")


@pytest.mark.parametrize("call, needle", [
    (lambda m, llm, gpu: m.kv_cache_bytes(llm, -5), r"tokens must be finite and >= 0 \(got -5\)"),   # was -20 MB
    (lambda m, llm, gpu: m.kv_cache_bytes(llm, "5"), "tokens must be a number or an array of numbers"),
    (lambda m, llm, gpu: m.kv_capacity_tokens(llm, gpu, 3), r"tp must be 1, 2, 4 or 8 \(got 3\)"),   # was answered
    (lambda m, llm, gpu: m.kv_capacity_tokens(llm, gpu, 8, hbm_utilization=2.0),
     r"hbm_utilization must be a fraction in \(0, 1\]"),                                # was twice the HBM
    (lambda m, llm, gpu: m.kv_capacity_tokens("bloom-176b", gpu, 8), r"llm must be a catalog LLM.*LatencyModel\(\).llm"),
    (lambda m, llm, gpu: m.kv_capacity_tokens(llm, "h100-80gb", 8), r"gpu must be a catalog GPU.*LatencyModel\(\).gpu"),
    (lambda m, llm, gpu: m.weight_bytes_per_gpu("bloom-176b", 8), "llm must be a catalog LLM"),   # AttributeError
    (lambda m, llm, gpu: m.max_decode_batch(llm, gpu, 6, 2048), "tp must be 1, 2, 4 or 8"),
    (lambda m, llm, gpu: m.fits_in_memory(llm, gpu, 8, hbm_utilization=0), "hbm_utilization must be a fraction"),
    (lambda m, llm, gpu: m.colocated_kv_capacity_tokens(llm, gpu, 8, -1), "prefill_tokens must be finite and >= 0"),
])
def test_memory_helpers_refuse_a_bad_argument_in_one_line(bloom_on_h100, call, needle):
    import perfmodels

    with pytest.raises(PerfModelError, match=needle) as exc_info:
        call(perfmodels, *bloom_on_h100)
    one_line(exc_info)


def test_memory_helpers_still_take_arrays_and_every_tp_degree(bloom_on_h100):
    import numpy as np

    from perfmodels import TP_DEGREES, kv_cache_bytes, kv_capacity_tokens

    llm, gpu = bloom_on_h100
    assert list(kv_cache_bytes(llm, [0, 2])) == [0.0, 2 * llm.kv_bytes_per_token]
    capacity = kv_capacity_tokens(llm, gpu, np.array(TP_DEGREES))
    assert capacity.shape == (4,) and capacity[-1] > 0 and np.all(np.diff(capacity) >= 0)
    assert kv_capacity_tokens(llm, gpu, 8, hbm_utilization=1.0) > kv_capacity_tokens(llm, gpu, 8)


@pytest.mark.parametrize("call, needle", [
    (lambda p: p.prefill_time_s("bloom-176b", "h100-80gb", 8, "512"), "prompt_tokens must be a number"),   # was 512
    (lambda p: p.prefill_time_s("bloom-176b", "h100-80gb", 8, 512, ["4"]), "batch_size must be a number"),
    (lambda p: p.decode_time_s("bloom-176b", "h100-80gb", 8, 4, "512"), "context_tokens must be a number"),
    (lambda p: p.decode_time_s("bloom-176b", "h100-80gb", "8", 4, 512), "tensor_parallel must be a number"),
    (lambda p: p.solo_request_s("bloom-176b", "h100-80gb", 8, 512, "8"), "output_tokens must be a number"),
])
def test_latencies_refuse_token_counts_given_as_strings(call, needle):
    from perfmodels import LatencyModel

    with pytest.raises(PerfModelError, match=needle):
        call(LatencyModel())


def test_a_calibration_path_is_read_when_the_model_is_built(tmp_path):
    """A path was stored as is and failed at the first latency ('str' has no attribute 'for_gpu')."""
    from perfmodels import DEFAULT_CALIBRATION_PATH, LatencyModel

    with pytest.raises(PerfModelError, match="cannot read calibration '/nonexist.toml'"):
        LatencyModel(calibration="/nonexist.toml")
    shipped = DEFAULT_CALIBRATION_PATH.read_text()
    for text, needle in [("x = 1", "has no \\[gpu"),
                         (shipped.replace("memory_efficiency = 0.92", 'memory_efficiency = "fast" #'),
                          "gpu 'a100-80gb' memory_efficiency must be a finite number"),
                         (shipped.replace('"a40" = "a100-80gb"', '"a40" = "a99"'), r"\[borrowed\] 'a40' = 'a99'")]:
        path = tmp_path / "cal.toml"
        path.write_text(text)
        with pytest.raises(PerfModelError, match=f"calibration '{path}'.*{needle}") as exc_info:
            LatencyModel(calibration=path)
        one_line(exc_info)
    with pytest.raises(PerfModelError, match="calibration must be a perfmodels.Calibration or the path"):
        LatencyModel(calibration=5)
    from_path = LatencyModel(calibration=str(DEFAULT_CALIBRATION_PATH))
    assert from_path.prefill_time_s("bloom-176b", "h100-80gb", 8, 512) == \
        LatencyModel().prefill_time_s("bloom-176b", "h100-80gb", 8, 512)


def test_unservable_requests_are_judged_by_one_replica_of_a_machine_wider_than_tp_8(bloom_on_h100):
    """A replica spans at most 8 GPUs: a 16-GPU machine holds no longer a request than an 8-GPU one."""
    import dataclasses

    from perfmodels import LatencyModel, kv_capacity_tokens
    from provisioner.sim import unservable_reason

    shipped = LatencyModel().catalog
    wide = dataclasses.replace(shipped.machine("dgx-h100"), name="dgx-h100-16", gpus_per_machine=16)
    perf = LatencyModel(catalog=dataclasses.replace(shipped, machines={**shipped.machines, wide.name: wide}))
    llm, gpu = bloom_on_h100
    fits_tp8 = int(kv_capacity_tokens(llm, gpu, 8))
    assert unservable_reason([fits_tp8 - 10], [5], llm, perf, [wide.name]) is None
    assert f"holds at most {fits_tp8:,} tokens" in unservable_reason([fits_tp8 + 10], [5], llm, perf, [wide.name])


# --------------------------------------------------------------------------- ProvisionRequest
@pytest.mark.parametrize("given, needle", [
    # were ignored: the named families fix their machines
    (dict(families=("splitwise-hh",), prompt_machine_types=("dgx-h100",)),
     r"prompt_machine_types sets the machines of a custom family .*none of which families names"),
    (dict(families=("baseline-h100",), token_machine_types=("dgx-h100",)), "or drop token_machine_types"),
    # only splitwise-custom has a token pool
    (dict(families=("baseline-custom",), prompt_machine_types=("dgx-h100",), token_machine_types=("dgx-a100",)),
     "token_machine_types sets the token pool of splitwise-custom; baseline-custom has one pool"),
])
def test_provision_request_refuses_machine_types_no_family_uses(given, needle):
    from provisioner import ProvisionRequest

    with pytest.raises(ProvisionerError, match=needle) as exc_info:
        ProvisionRequest(goal="cost", rps=5, duration_s=10, verify=False, **given)
    one_line(exc_info)


def test_provision_request_keeps_its_sequences_as_tuples_of_plain_values():
    """A numpy power_cap_range was kept as an array: the request could not be hashed."""
    import numpy as np

    from provisioner import ProvisionRequest

    request = ProvisionRequest(goal="cost", rps=5, duration_s=10, verify=False, families=["splitwise-custom"],
                               prompt_machine_types=["dgx-h100"], power_cap_range=np.array([0.5, 1.0]),
                               prompt_batch_caps=[np.int64(2048)])
    assert request.power_cap_range == (0.5, 1.0) and type(request.power_cap_range[0]) is float
    assert request.prompt_machine_types == ("dgx-h100",) and request.prompt_batch_caps == (2048,)
    assert hash(request) == hash(request.replace(power_cap_range=(0.5, 1.0)))


# --------------------------------------------------------------------------- provisioner.cloud helpers
@pytest.mark.parametrize("answer", [{}, {"replicas": []}, [], None])
def test_replan_rows_refuses_an_answer_that_was_not_replanned(answer):
    """{} was a KeyError 'replan' (and [] a TypeError on list indices)."""
    from provisioner.cloud import replan_changes, replan_rows

    for call in (replan_rows, replan_changes):
        with pytest.raises(ProvisionerError, match="answer must be a re-planned answer of plan_cloud") as exc_info:
            call(answer)
        one_line(exc_info)


def test_load_inventory_takes_no_catalog_as_the_shipped_one_and_refuses_a_non_catalog():
    """None said "nodes[1].type: 'NoneType' object has no attribute 'machine'"."""
    from perfmodels import LatencyModel
    from provisioner.cloud import load_inventory

    shipped = load_inventory("thunderserve-32gpu", LatencyModel().catalog)
    assert load_inventory("thunderserve-32gpu", None) == shipped == load_inventory("thunderserve-32gpu")
    with pytest.raises(ProvisionerError, match="catalog must be a hardware_catalog.Catalog, e.g. perf.catalog") \
            as exc_info:
        load_inventory("thunderserve-32gpu", "dgx")
    one_line(exc_info)
