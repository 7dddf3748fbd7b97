"""The one trace generator (`workloads.TraceGenerator`) and trace replay.

Every path that simulates draws its trace here: the search (nested across rates, which
its bisection relies on), verification, `provision simulate`, the report. A CSV trace is
replayed request by request by default; `--rps` rescales its time and `--duration` cuts a
window from its first arrival.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from workloads import RateProfile, Trace, TraceGenerator, WorkloadError, azure_trace, make_workload, read_trace_csv

ROOT = Path(__file__).resolve().parents[1]
SPLITWISE_TRACES = ROOT.parent / "shared" / "validation" / "splitwise_sim_llama" / "traces"
PROVISION = str(Path(sys.executable).with_name("provision"))
HEADER = "request_id,request_type,application_id,arrival_timestamp,batch_size,prompt_size,token_size"


def _write_trace(path: Path, arrival_s, prompt, output) -> Path:
    rows = [f"{i},2,0,{float(a)!r},1,{int(p)},{int(o)}" for i, (a, p, o) in enumerate(zip(arrival_s, prompt, output))]
    path.write_text("\n".join([HEADER, *rows]) + "\n")
    return path


@pytest.fixture
def small_trace(tmp_path):
    rng = np.random.default_rng(11)
    arrival = 0.25 + np.cumsum(rng.exponential(0.1, 300))     # ~10 req/s over ~30 s, first at 0.25 s
    return _write_trace(tmp_path / "mine.csv", arrival, rng.integers(10, 3000, 300), rng.integers(1, 300, 300))


# --- nested across rates: the same requests sooner, plus more ------------------------------

@pytest.mark.parametrize("arrival", ["poisson", "gamma", "replay"])
def test_a_higher_load_is_the_same_requests_sooner_plus_more(arrival):
    gen = TraceGenerator("conversation", 60.0, 5, arrival=arrival)
    lo, hi = gen.at(4.0), gen.at(9.0)
    assert len(hi) > len(lo)
    np.testing.assert_allclose(hi.arrival_s[:len(lo)], lo.arrival_s * 4.0 / 9.0, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(hi.prompt_tokens[:len(lo)], lo.prompt_tokens)
    np.testing.assert_array_equal(hi.output_tokens[:len(lo)], lo.output_tokens)


def test_make_workload_is_the_generators_trace():
    gen = TraceGenerator("coding", 30.0, 3)
    again = make_workload("coding", 8.0, duration_s=30.0, seed=3)
    assert gen.at(8.0).arrival_s.tobytes() == again.arrival_s.tobytes()
    assert gen.at(8.0).prompt_tokens.tobytes() == again.prompt_tokens.tobytes()


def test_gamma_is_burstier_than_poisson_with_the_same_sizes():
    poisson = TraceGenerator("coding", 600.0, 2, arrival="poisson").at(20.0)
    gamma = TraceGenerator("coding", 600.0, 2, arrival="gamma", cv=3.0).at(20.0)
    np.testing.assert_array_equal(poisson.prompt_tokens, gamma.prompt_tokens)
    cv = lambda t: np.diff(t.arrival_s).std() / np.diff(t.arrival_s).mean()   # noqa: E731
    assert cv(poisson) == pytest.approx(1.0, abs=0.1) and cv(gamma) == pytest.approx(3.0, rel=0.2)


# --- replay ---------------------------------------------------------------------------------

def test_a_csv_path_is_replayed_request_by_request(small_trace):
    src = read_trace_csv(small_trace)
    gen = TraceGenerator(small_trace, None)
    assert gen.arrival == "replay" and len(gen.sha256) == 64
    trace = gen.at()
    assert len(trace) == len(src) == 300
    np.testing.assert_array_equal(trace.arrival_s, src.arrival_s - src.arrival_s[0])
    np.testing.assert_array_equal(trace.prompt_tokens, src.prompt_tokens)
    assert trace.rate_rps == pytest.approx(gen.native_rps)
    assert not gen.rescaled(None) and not gen.rescaled(gen.native_rps)


def test_replay_rps_rescales_time_and_duration_cuts_a_window(small_trace):
    src = read_trace_csv(small_trace)
    native = TraceGenerator(small_trace, None).native_rps
    whole = TraceGenerator(small_trace, None, rps=2 * native)
    fast = whole.at(2 * native)
    assert whole.rescaled(2 * native) and len(fast) == len(src)      # the whole file, twice as fast
    np.testing.assert_allclose(fast.arrival_s, (src.arrival_s - src.arrival_s[0]) / 2, rtol=1e-12)
    window = TraceGenerator(small_trace, 10.0).at()                   # own rate, first 10 s
    assert len(window) == np.count_nonzero(src.arrival_s - src.arrival_s[0] < 10.0)
    np.testing.assert_array_equal(window.prompt_tokens, src.prompt_tokens[:len(window)])
    wrapped = TraceGenerator(small_trace, 100.0).at()                 # longer than the file: wraps
    assert len(src) < len(wrapped) and wrapped.arrival_s[-1] < 100.0
    np.testing.assert_array_equal(wrapped.prompt_tokens, src.prompt_tokens[np.arange(len(wrapped)) % len(src)])


def test_the_busiest_window_of_a_replay_is_its_burst_not_its_first_window(tmp_path):
    """A file quiet for 60 s (a request every 6 s), busy for 60 s (every 0.5 s), then quiet:
    at its own rate a 60-s window from its start holds 10 requests, the busiest one (from
    the first busy request, at 60 s) 120. Drawn arrivals have no busiest part."""
    arrival = np.concatenate([6.0 * np.arange(10), 60 + 0.5 * np.arange(120), 120 + 6.0 * np.arange(10)])
    path = _write_trace(tmp_path / "bursty.csv", arrival, 100 + np.arange(140), np.full(140, 50))
    gen = TraceGenerator(path, 60.0)
    own = gen.native_rps
    busiest, start_s = gen.busiest_window(own)
    assert (len(gen.at(own)), len(busiest), start_s) == (10, 120, 60.0)
    np.testing.assert_allclose(busiest.arrival_s, arrival[10:130] - 60.0, atol=1e-9)
    np.testing.assert_array_equal(busiest.prompt_tokens, 110 + np.arange(120))
    assert busiest.duration_s == 60.0 and busiest.rate_rps == 2.0
    # with a profile, the day's own busiest window as the day plays it: a 100-s day at the
    # file's rate plays its first 100 s, whose busiest 60 s are its last, from 40 s (3 quiet
    # requests and the 80 of the burst the day plays), not in the burst it never plays whole;
    # a window starting later is cut short by the day's end (from 42 s it was 58 s long, and
    # one starting at the day's last request would have read 1 request over 0.5 s as 2 req/s)
    short = RateProfile(np.array([0.0]), np.array([own]), 100.0, "short")
    early, start_s = gen.busiest_window(own, short)
    assert (len(early), start_s) == (83, 40.0) and early.duration_s == 60.0 and early.rate_rps == 83 / 60
    day = gen.with_profile(short)
    np.testing.assert_allclose(early.arrival_s, day.arrival_s[7:90] - 40.0, atol=1e-9)
    assert early.arrival_s[0] == pytest.approx(2.0)   # the day's last window starts between two requests
    # a day shorter than the window is one window, the day: its rate the one it carries
    # (over 60 s a 30-s day's 10 requests would read 1/6 req/s)
    brief = RateProfile(np.array([0.0]), np.array([own]), 30.0, "brief")
    whole, start_s = gen.busiest_window(own, brief)
    assert (len(whole), start_s, whole.duration_s) == (5, 0.0, 30.0)
    # the day's last window holds a request in the day's last instant (with_profile pins late
    # ones just before its end), which a window cut a relative 1e-12 short of the end missed
    late = np.array([0.0, 1.0, 2.0, 15.0, 16.0, 17.0, np.nextafter(20.0, 0.0)])
    late_day = Trace(late, np.full(7, 100), np.full(7, 10), "late", 20.0)
    last, start_s = TraceGenerator(late_day, 10.0).busiest_window(
        1.0, RateProfile(np.array([0.0]), np.array([0.35]), 20.0, "d"), day=late_day)
    assert (len(last), start_s) == (4, 10.0)
    np.testing.assert_array_equal(early.prompt_tokens, day.prompt_tokens[7:90])
    # at the day's rate, not the one given: a 100-s day at twice the file's rate plays the
    # burst from 30 s, twice as fast: its 120 requests, the 10 quiet ones after it, and the
    # wrapped file's first (at 87.6 s)
    fast = RateProfile(np.array([0.0]), np.array([2 * own]), 100.0, "fast")
    burst, start_s = gen.busiest_window(own, fast)
    assert (len(burst), start_s) == (131, 30.0)
    # drawn arrivals: the first window, as `at`
    drawn = TraceGenerator("coding", 60.0, 1)
    trace, start_s = drawn.busiest_window(5.0)
    assert start_s == 0.0 and trace.arrival_s.tobytes() == drawn.at(5.0).arrival_s.tobytes()


def test_the_busiest_window_by_tokens_is_where_the_work_is(tmp_path):
    """30 requests a second apart with 10-token prompts and 500-token outputs, then 10
    three seconds apart with 5,000-token prompts and 5-token outputs: the busiest 30 s by
    requests and by output tokens start at the first request, by prompt tokens where they
    reach the last long prompt; at the file's rate and over a day that plays it as recorded
    alike."""
    arrival = np.concatenate([np.arange(30.0), 30 + 3.0 * np.arange(10)])
    path = _write_trace(tmp_path / "two_halves.csv", arrival, np.r_[np.full(30, 10), np.full(10, 5000)],
                        np.r_[np.full(30, 500), np.full(10, 5)])
    gen = TraceGenerator(path, 30.0)
    own = gen.native_rps
    day = RateProfile(np.array([0.0]), np.array([own]), 58.0, "as recorded")
    for profile in (None, day):
        starts = {by: gen.busiest_window(own, profile, by=by)[1]
                  for by in ("requests", "prompt_tokens", "output_tokens")}
        assert starts == pytest.approx({"requests": 0.0, "prompt_tokens": 28.0, "output_tokens": 0.0})
    # the earliest window holding all ten long prompts (the last at 57 s) and two short ones
    long, _ = gen.busiest_window(own, by="prompt_tokens")
    np.testing.assert_array_equal(long.prompt_tokens, np.r_[10, 10, np.full(10, 5000)])
    # a day ending a microsecond after its one long prompt (at 9 s): the busiest window by
    # prompt tokens is the day's last 5 s, not one cut to the microsecond (1e6 req/s)
    ten = _write_trace(tmp_path / "tail.csv", np.arange(10.0), np.r_[np.full(9, 100), 60000], np.full(10, 10))
    tail_gen = TraceGenerator(ten, 5.0)
    day = RateProfile(np.array([0.0]), np.array([tail_gen.native_rps]), 9.000001, "ends at the long prompt")
    last, start_s = tail_gen.busiest_window(1.0, day, by="prompt_tokens")
    assert start_s == pytest.approx(4.000001) and last.duration_s == 5.0 and len(last) == 5
    assert last.rate_rps == pytest.approx(1.0)
    with pytest.raises(WorkloadError) as info:
        gen.busiest_window(own, by="tokens")
    assert str(info.value) == "by must be one of requests, prompt_tokens, output_tokens (got 'tokens')"


def test_replay_of_a_shipped_name_rescales_the_azure_trace():
    base = azure_trace("coding")
    trace = TraceGenerator("coding", 120.0, arrival="replay").at(70.0)
    np.testing.assert_array_equal(trace.prompt_tokens, base.prompt_tokens[:len(trace)])
    assert len(trace) == pytest.approx(8400, rel=0.15)


def test_to_json_rebuilds_the_trace_and_refuses_a_changed_file(small_trace):
    gen = TraceGenerator(small_trace, 20.0, 4, rps=15.0)
    obj = json.loads(json.dumps(gen.to_json(15.0)))
    assert obj["rescaled"] is True and obj["arrival"] == "replay"
    again = TraceGenerator.from_json(obj).at(obj["rps"])
    assert again.arrival_s.tobytes() == gen.at(15.0).arrival_s.tobytes()
    small_trace.write_text(small_trace.read_text().replace(",1,", ",1,1", 1))
    with pytest.raises(WorkloadError, match="SHA-256") as info:
        TraceGenerator.from_json(obj)
    assert "\n" not in str(info.value)


def test_a_saved_question_without_an_arrival_key_takes_the_workloads_default(small_trace):
    """A hand-written question with no 'arrival' (every result the tool writes records one):
    its CSV was rebuilt as Poisson draws of the file's sizes, where the CLI and
    TraceGenerator() replay a CSV by default."""
    question = {"workload": str(small_trace), "duration_s": 20.0, "seed": 4}
    gen = TraceGenerator.from_json(question)
    assert gen.arrival == "replay"
    assert gen.at(15.0).arrival_s.tobytes() == TraceGenerator(small_trace, 20.0, 4).at(15.0).arrival_s.tobytes()
    assert TraceGenerator.from_json({"workload": "coding", "seed": 4}).arrival == "poisson"   # a shipped name


def test_a_recorded_cv_of_zero_is_refused_not_replaced():
    """A result's `cv: 0` was read as 2.0 (`or`): a re-score on another trace than the answer's."""
    with pytest.raises(WorkloadError, match="cv must be"):
        TraceGenerator.from_json({"workload": "coding", "arrival": "gamma", "cv": 0})
    assert TraceGenerator.from_json({"workload": "coding", "arrival": "gamma", "cv": None}).cv == 2.0


@pytest.mark.parametrize("kwargs, words", [
    (dict(arrival="uniform"), "arrival must be one of replay, poisson, gamma"),
    (dict(duration_s=0.0, arrival="poisson"), "duration_s must be"),
    (dict(seed=-1), "seed must be an integer >= 0"),
    (dict(seed=2**70), r"seed must be an integer below 2\*\*63"),   # was drawn with (a result JSON's question)
    (dict(cv=0.0, arrival="gamma"), "cv must be"),
])
def test_bad_generator_parameters_are_one_line_workload_errors(kwargs, words):
    with pytest.raises(WorkloadError, match=words) as info:
        TraceGenerator("coding", **{"duration_s": 60.0, **kwargs})
    assert "\n" not in str(info.value)


def test_a_trace_without_a_rate_cannot_be_replayed(tmp_path):
    path = _write_trace(tmp_path / "one.csv", [1.0], [100], [10])
    with pytest.raises(WorkloadError, match="two or more distinct times"):
        TraceGenerator(path, None)


# --- no window given: one rule for the CLI and the Python API -------------------------------
# A replay is the user's own requests: all of them; drawn arrivals: 120 s. The API once
# defaulted to 120 s for a replay too, and wrapped a 60-s file round to twice its requests.

@pytest.fixture
def minute_trace(tmp_path):
    """A 60-s file of 600 requests (10 req/s), shorter than the 120-s default window."""
    rng = np.random.default_rng(23)
    arrival = np.sort(rng.uniform(0.0, 60.0, 600))
    return _write_trace(tmp_path / "minute.csv", arrival, rng.integers(50, 1500, 600), rng.integers(2, 200, 600))


def test_a_replay_without_a_window_is_the_whole_file_in_the_api_as_in_the_cli(cli, minute_trace):
    from provisioner import SLO, make_design, simulate
    from provisioner.results import latency_json

    typed = json.loads(cli("simulate", "--design", "baseline-h100", "--machines", "2", "--model", "llama2-70b",
                           "--workload", minute_trace, "--json"))
    trace = make_workload(minute_trace, None)
    assert len(trace) == len(TraceGenerator(minute_trace).at()) == typed["requests"] == 600
    row = simulate(make_design("baseline-h100", machines=2), trace, "llama2-70b", slo=SLO()).iloc[0]
    assert latency_json(row) == {k: typed[k] for k in latency_json(row)}     # the same percentiles, exactly
    assert typed["trace"]["duration_s"] == trace.duration_s == pytest.approx(60.0, rel=0.01)


def test_a_searched_replay_without_a_window_is_the_same_question_in_the_api_and_the_cli(cli, minute_trace):
    from provisioner.search import ProvisionRequest, provision

    typed = json.loads(cli("--goal", "cost", "--workload", minute_trace, "--design", "baseline-h100", "--model",
                           "llama2-70b", "--no-verify", "--json"))
    request = ProvisionRequest(goal="cost", workload=str(minute_trace), families=("baseline-h100",),
                               model="llama2-70b", verify=False)
    api = provision(request).to_json()
    assert api["question"]["duration_s"] == typed["question"]["duration_s"] == request.duration_s
    (mine,), (theirs,) = api["best"], typed["best"]
    assert mine["requests"] == theirs["requests"] == 600
    assert (mine["design"], mine["ttft_ms"], mine["tbt_ms"], mine["e2e_ms"]) == \
        (theirs["design"], theirs["ttft_ms"], theirs["tbt_ms"], theirs["e2e_ms"])


def test_drawn_arrivals_without_a_window_still_run_120_s(cli):
    from provisioner.search import ProvisionRequest

    assert len(make_workload("coding", 10)) == 1200 and make_workload("coding", 10).duration_s == 120.0
    assert TraceGenerator("conversation", arrival="gamma").duration_s == 120.0
    assert ProvisionRequest(goal="cost", rps=5, verify=False).duration_s == 120.0
    typed = json.loads(cli("simulate", "--design", "baseline-h100", "--machines", "2", "--model", "llama2-70b",
                           "--workload", "coding", "--rps", "10", "--json"))
    assert typed["requests"] == 1200 and typed["trace"]["duration_s"] == 120.0
    searched = json.loads(cli("--goal", "cost", "--rps", "2", "--design", "baseline-h100", "--model", "llama2-70b",
                              "--no-verify", "--json"))
    assert searched["question"]["duration_s"] == 120.0 and searched["best"][0]["requests"] == 240


def test_a_result_saved_with_an_explicit_window_reruns_on_that_window(cli, minute_trace, tmp_path):
    """A window the user gave is recorded and kept: 90 s of the 60-s file wraps it round,
    and the re-score does too, however the default changes."""
    text = cli("--goal", "cost", "--workload", minute_trace, "--duration", "90", "--design", "baseline-h100",
               "--model", "llama2-70b", "--no-verify", "--json")
    (tmp_path / "result.json").write_text(text)
    (best,) = json.loads(text)["best"]
    again = json.loads(cli("simulate", "--from-result", tmp_path / "result.json", "--json"))
    assert best["trace"]["duration_s"] == again["trace"]["duration_s"] == 90.0
    assert again["requests"] == best["requests"] > 600
    assert (again["ttft_ms"], again["tbt_ms"], again["e2e_ms"]) == (best["ttft_ms"], best["tbt_ms"], best["e2e_ms"])


def test_cloud_still_asks_for_duration_before_planning_a_long_replay_whole(tmp_path):
    """`provision cloud` simulates the window at every rate it tries: a replay over 1,200 s
    taken whole needs the user's word, now that the generator, not the CLI, decides it."""
    path = _write_trace(tmp_path / "day.csv", np.arange(0.0, 1300.0, 10.0), np.full(130, 500), np.full(130, 50))
    proc = subprocess.run([PROVISION, "cloud", "--inventory", "thunderserve-32gpu", "--workload", str(path)],
                          capture_output=True, text=True, timeout=300)   # --goal throughput: its own 0.1 req/s
    assert proc.returncode == 2 and proc.stdout == "" and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith("error: --workload: the replayed window is 1,300 s long")
    assert "give --duration, e.g. --duration 120, or --duration 1300 to keep it whole" in proc.stderr


# --- the shared SplitwiseSim traces, through the CLI ----------------------------------------

def _data_rows(path: Path) -> int:
    lines = path.read_text().splitlines()
    return sum(1 for line in lines[1:] if line.strip())


@pytest.mark.skipif(not SPLITWISE_TRACES.is_dir(), reason=f"{SPLITWISE_TRACES} (shared validation data) absent")
def test_simulate_replays_each_splitwisesim_trace_exactly_and_reproducibly(cli):
    paths = sorted(SPLITWISE_TRACES.glob("*.csv"))
    assert len(paths) >= 6
    for path in paths:
        args = ["simulate", "--design", "splitwise-hh", "--prompt-machines", "12", "--token-machines", "4",
                "--model", "llama2-70b", "--workload", str(path), "--json"]
        first, again = cli(*args), cli(*args)
        assert first == again                                   # byte-identical output
        obj = json.loads(first)
        assert obj["requests"] == _data_rows(path)
        assert obj["trace"]["arrival"] == "replay" and obj["trace"]["rescaled"] is False
        assert obj["workload_sha256"] == obj["trace"]["workload_sha256"] and len(obj["workload_sha256"]) == 64
        assert obj["rps"] == pytest.approx(obj["requests"] / 120.0, rel=0.01)
    # and as typed, in two processes
    args[args.index("--workload") + 1] = str(paths[-1])
    runs = [subprocess.run([PROVISION, *args], capture_output=True, timeout=300) for _ in range(2)]
    assert runs[0].returncode == 0, runs[0].stderr
    assert runs[0].stdout == runs[1].stdout and json.loads(runs[0].stdout)["requests"] == _data_rows(paths[-1])


def test_simulate_says_when_a_replay_is_rescaled(cli, small_trace):
    obj = json.loads(cli("simulate", "--design", "splitwise-hh", "--prompt-machines", "2", "--token-machines", "1",
                         "--model", "llama2-70b", "--workload", str(small_trace), "--rps", "20", "--duration", "5",
                         "--json"))
    assert obj["rps"] == 20.0 and obj["trace"]["rescaled"] is True and obj["trace"]["duration_s"] == 5.0
    assert obj["requests"] == len(TraceGenerator(small_trace, 5.0).at(20.0))
    text = cli("simulate", "--design", "splitwise-hh", "--prompt-machines", "2", "--token-machines", "1",
               "--model", "llama2-70b", "--workload", str(small_trace), "--rps", "20", "--duration", "5")
    assert "time-scaled from its own" in " ".join(text.split()) and "to 20 req/s" in " ".join(text.split())
