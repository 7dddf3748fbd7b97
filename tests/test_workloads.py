"""Tests for :mod:`workloads`: shipped traces, CSV readers, arrival processes."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workloads import (WORKLOAD_NAMES, Trace, TraceFormatError, UnknownWorkloadError,
                       azure_trace, gamma_arrivals, make_workload, poisson_arrivals,
                       read_trace_csv, replay_arrivals)

CANONICAL = "arrival_s,prompt_tokens,output_tokens"
AZURE = "TIMESTAMP,ContextTokens,GeneratedTokens"
SPLITWISE = ("request_id,request_type,application_id,arrival_timestamp,batch_size,"
             "prompt_size,token_size")


def _write(tmp_path: Path, text: str, name: str = "trace.csv") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


# --- shipped traces: counts and medians from workloads/data/SOURCE.md -----------------

@pytest.mark.parametrize("name, n, prompt_median, output_median, minutes", [
    ("coding", 8_819, 1_469, 13, 57),
    ("conversation", 19_366, 1_020, 129, 58),
])
def test_shipped_trace_matches_source_md(name, n, prompt_median, output_median, minutes):
    trace = azure_trace(name)
    assert trace.name == name
    assert len(trace) == n
    assert np.median(trace.prompt_tokens) == prompt_median
    assert np.median(trace.output_tokens) == output_median
    assert trace.arrival_s[0] == 0.0
    assert np.all(np.diff(trace.arrival_s) >= 0)
    assert trace.arrival_s[-1] / 60 == pytest.approx(minutes, abs=1)
    assert trace.arrival_s.dtype == np.float64 and trace.prompt_tokens.dtype == np.int64


def test_shipped_names_and_aliases():
    assert WORKLOAD_NAMES == ("coding", "conversation")
    assert azure_trace("code") is azure_trace("coding")
    assert azure_trace("conv") is azure_trace("conversation")


def test_unknown_shipped_name_lists_the_names():
    with pytest.raises(UnknownWorkloadError, match="coding, conversation") as info:
        azure_trace("chat")
    assert isinstance(info.value, ValueError)
    assert "\n" not in str(info.value)


def test_shipped_data_travels_with_its_attribution():
    data = resources.files("workloads").joinpath("data")
    source_md = data.joinpath("SOURCE.md").read_text()
    assert "CC-BY 4.0" in source_md and "Splitwise" in source_md
    assert data.joinpath("code.csv").is_file() and data.joinpath("conv.csv").is_file()


def test_shipped_trace_arrays_are_read_only():
    trace = azure_trace("coding")
    with pytest.raises(ValueError):
        trace.prompt_tokens[0] = 1


def test_azure_timestamps_keep_sub_microsecond_digits():
    trace = azure_trace("coding")
    # code.csv rows 1-2: 18:17:03.9799600 and 18:17:04.0319600
    assert trace.arrival_s[1] == pytest.approx(0.052, abs=1e-9)


# --- the three CSV formats ----------------------------------------------------------

def test_reads_canonical_and_sorts_unsorted_rows(tmp_path):
    path = _write(tmp_path, f"{CANONICAL}\n2.5,100,7\n0.5,30,2\n\n1.0,40,1\n")
    trace = read_trace_csv(path)
    assert trace.name == "trace"
    np.testing.assert_array_equal(trace.arrival_s, [0.5, 1.0, 2.5])
    np.testing.assert_array_equal(trace.prompt_tokens, [30, 40, 100])
    np.testing.assert_array_equal(trace.output_tokens, [2, 1, 7])


def test_reads_azure_format(tmp_path):
    path = _write(tmp_path, f"{AZURE}\n2023-11-16 18:17:03.9799600,4808,10\n"
                            f"2023-11-16 18:17:05.0319601,3180,8\n")
    trace = read_trace_csv(path)
    np.testing.assert_allclose(trace.arrival_s, [0.0, 1.0520001], rtol=0, atol=1e-9)
    np.testing.assert_array_equal(trace.prompt_tokens, [4808, 3180])
    np.testing.assert_array_equal(trace.output_tokens, [10, 8])


def test_reads_splitwisesim_format(tmp_path):
    path = _write(tmp_path, f"{SPLITWISE}\n0,2,0,0.25,1,1500,20\n1,2,0,0.75,1,900,3\n")
    trace = read_trace_csv(path)
    np.testing.assert_array_equal(trace.arrival_s, [0.25, 0.75])
    np.testing.assert_array_equal(trace.prompt_tokens, [1500, 900])
    np.testing.assert_array_equal(trace.output_tokens, [20, 3])


def test_header_match_ignores_case_space_and_bom(tmp_path):
    path = tmp_path / "bom.csv"
    path.write_bytes(b"\xef\xbb\xbf Arrival_S , prompt_tokens,output_tokens\r\n0,1,1\r\n")
    assert len(read_trace_csv(path)) == 1


def test_to_frame_round_trips_through_csv(tmp_path):
    trace = make_workload("conversation", 5, duration_s=20, seed=3)
    path = tmp_path / "round.csv"
    trace.to_frame().to_csv(path, index=False)
    again = read_trace_csv(path)
    np.testing.assert_array_equal(again.arrival_s, trace.arrival_s)
    np.testing.assert_array_equal(again.prompt_tokens, trace.prompt_tokens)
    np.testing.assert_array_equal(again.output_tokens, trace.output_tokens)


# --- malformed files: one line, naming file, line and column ---------------------------

@pytest.mark.parametrize("text, line, column, words", [
    (f"{CANONICAL}\n0.5,10,2\n1.0,abc,3\n", 3, "prompt_tokens", "'abc' is not"),
    (f"{CANONICAL}\n0.5,10,2\n\n1.0,10,0\n", 4, "output_tokens", "'0' tokens"),
    (f"{CANONICAL}\n0.5,10.5,2\n", 2, "prompt_tokens", "whole numbers"),
    (f"{CANONICAL}\n-1.0,10,2\n", 2, "arrival_s", "negative time"),
    # the naive stamp was read as UTC: 1 s after the first on paper, 5 h before it
    (f"{AZURE}\n2023-11-16T18:17:03+05:00,10,2\n2023-11-16 18:17:04,10,2\n", 3, "TIMESTAMP",
     "has no time zone where the first timestamp has one"),
    (f"{CANONICAL}\n0.5,,2\n", 2, "prompt_tokens", "empty value"),
    (f"{AZURE}\n2023-11-16 18:17:03.9799600,4808,10\nyesterday,1,1\n", 3, "TIMESTAMP",
     "unparseable timestamp 'yesterday'"),
    (f"{SPLITWISE}\n0,2,0,0.25,4,1500,20\n", 2, "batch_size", "batch_size 1"),
])
def test_bad_cell_message_names_line_and_column(tmp_path, text, line, column, words):
    path = _write(tmp_path, text, "bad.csv")
    with pytest.raises(TraceFormatError) as info:
        read_trace_csv(path)
    message = str(info.value)
    assert "\n" not in message
    assert f"'{path}'" in message
    assert f"line {line}, column '{column}'" in message
    assert words in message


@pytest.mark.parametrize("text, words", [
    ("", "trace has no requests"),
    (f"{CANONICAL}\n", "trace has no requests"),
    (f"{CANONICAL}\n\n\n", "trace has no requests"),
    ("time,prompt,output\n1,2,3\n", "line 1: unknown header 'time,prompt,output'"),
    (f"{CANONICAL}\n1,2,3\n1,2,3,4\n", "line 3: 4 fields but the header has 3"),
])
def test_bad_file_message_is_one_line(tmp_path, text, words):
    path = _write(tmp_path, text, "bad.csv")
    with pytest.raises(TraceFormatError) as info:
        read_trace_csv(path)
    message = str(info.value)
    assert "\n" not in message and "bad.csv" in message
    assert words in message


def test_unknown_header_lists_accepted_headers(tmp_path):
    with pytest.raises(TraceFormatError) as info:
        read_trace_csv(_write(tmp_path, "a,b\n1,2\n"))
    for header in (CANONICAL, AZURE, SPLITWISE):
        assert header in str(info.value)


def test_missing_file_is_a_one_line_trace_format_error(tmp_path):
    missing = tmp_path / "x.csv"
    with pytest.raises(TraceFormatError, match=r"^cannot read trace '.*x\.csv': no such file$"):
        read_trace_csv(missing)
    with pytest.raises(TraceFormatError, match="no such file"):
        make_workload(str(missing), 10)


# --- make_workload -------------------------------------------------------------------

def test_default_provisioning_workload_has_8400_requests():
    trace = make_workload("coding", 70, duration_s=120)
    assert len(trace) == 8_400
    assert trace.rate_rps == 70.0 and trace.duration_s == 120.0
    assert trace.name == "coding"


@pytest.mark.parametrize("arrival", ["poisson", "gamma"])
def test_realized_rate_equals_requested(arrival):
    trace = make_workload("conversation", 37.5, duration_s=80, arrival=arrival, seed=1)
    assert len(trace) == 3_000
    assert trace.rate_rps == 37.5
    # one unit-rate stream divided by the rate: the count is exact, the span is random
    assert trace.arrival_s[0] == 0 and 0.8 * 80 < trace.arrival_s[-1] < 1.2 * 80
    assert np.all(np.diff(trace.arrival_s) >= 0)


@pytest.mark.parametrize("arrival", ["poisson", "gamma", "replay"])
def test_same_seed_reproduces_trace_bitwise(arrival):
    first = make_workload("coding", 20, duration_s=30, arrival=arrival, seed=7)
    again = make_workload("coding", 20, duration_s=30, arrival=arrival, seed=7)
    for field in ("arrival_s", "prompt_tokens", "output_tokens"):
        assert getattr(first, field).tobytes() == getattr(again, field).tobytes()


@pytest.mark.parametrize("arrival", ["poisson", "gamma"])
def test_different_seeds_differ(arrival):
    first = make_workload("coding", 20, duration_s=30, arrival=arrival, seed=7)
    other = make_workload("coding", 20, duration_s=30, arrival=arrival, seed=8)
    assert not np.array_equal(first.arrival_s, other.arrival_s)
    assert not np.array_equal(first.prompt_tokens, other.prompt_tokens)


def test_sizes_are_drawn_as_pairs_from_the_trace():
    base = azure_trace("conversation")
    pairs = set(zip(base.prompt_tokens.tolist(), base.output_tokens.tolist()))
    trace = make_workload("conversation", 50, duration_s=60, seed=2)
    assert set(zip(trace.prompt_tokens.tolist(), trace.output_tokens.tolist())) <= pairs


def test_switching_poisson_to_gamma_keeps_the_sizes():
    poisson = make_workload("coding", 10, duration_s=60, arrival="poisson", seed=4)
    gamma = make_workload("coding", 10, duration_s=60, arrival="gamma", seed=4)
    np.testing.assert_array_equal(poisson.prompt_tokens, gamma.prompt_tokens)


def test_workload_from_csv_path(tmp_path):
    path = _write(tmp_path, f"{SPLITWISE}\n0,2,0,0.0,1,100,5\n1,2,0,1.0,1,200,9\n", "mine.csv")
    trace = make_workload(path, 4, duration_s=10)
    assert trace.name == "mine" and len(trace) == 40
    assert set(trace.prompt_tokens.tolist()) <= {100, 200}


def test_unknown_workload_lists_names():
    with pytest.raises(UnknownWorkloadError, match="coding, conversation") as info:
        make_workload("codng", 10)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("kwargs, parameter", [
    (dict(rps=0), "rps"),
    (dict(rps=-3.0), "rps"),
    (dict(rps=float("nan")), "rps"),
    (dict(rps=10, duration_s=0), "duration_s"),
    (dict(rps=10, duration_s=float("inf")), "duration_s"),
    (dict(rps=10, cv=0), "cv"),
    (dict(rps=10, arrival="uniform"), "arrival"),
])
def test_bad_parameters_raise_one_line_value_error(kwargs, parameter):
    with pytest.raises(ValueError) as info:
        make_workload("coding", **kwargs)
    message = str(info.value)
    assert message.startswith(f"{parameter} must be") and "\n" not in message


def test_too_few_requests_is_refused():
    with pytest.raises(ValueError, match="too few requests"):
        make_workload("coding", 0.1, duration_s=4)


# --- arrival processes -----------------------------------------------------------------

@pytest.mark.parametrize("cv", [0.5, 2.0, 4.0])
def test_gamma_gap_cv_is_close_to_requested(cv):
    arrivals = gamma_arrivals(1_000.0, 200.0, cv, np.random.default_rng(0))
    gaps = np.diff(arrivals)
    assert arrivals.size == 200_000
    assert gaps.std() / gaps.mean() == pytest.approx(cv, rel=0.05)


def test_poisson_gaps_have_unit_cv():
    gaps = np.diff(poisson_arrivals(1_000.0, 200.0, 0))
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, rel=0.02)


def test_replay_scales_uniform_base_exactly_and_wraps():
    base = np.arange(10) * 0.5  # 2 req/s
    arrivals = replay_arrivals(base, rps=4.0, duration_s=10.0)
    np.testing.assert_allclose(arrivals, np.arange(40) * 0.25, rtol=0, atol=1e-12)


def test_replay_at_own_rate_reproduces_the_trace():
    base = azure_trace("coding")
    trace = make_workload("coding", base.rate_rps, duration_s=base.duration_s,
                          arrival="replay")
    assert len(trace) == len(base)
    np.testing.assert_allclose(trace.arrival_s, base.arrival_s, rtol=1e-12, atol=1e-9)
    np.testing.assert_array_equal(trace.prompt_tokens, base.prompt_tokens)
    np.testing.assert_array_equal(trace.output_tokens, base.output_tokens)


def test_replay_keeps_sizes_in_order_and_mean_rate_when_wrapping():
    base = azure_trace("coding")
    m = len(base)
    trace = make_workload("coding", 10.0, duration_s=1_200, arrival="replay")
    assert m < len(trace) < 2 * m and trace.arrival_s[-1] < 1_200
    order = np.arange(len(trace)) % m
    np.testing.assert_array_equal(trace.prompt_tokens, base.prompt_tokens[order])
    np.testing.assert_array_equal(trace.output_tokens, base.output_tokens[order])
    # one full copy of the base lasts m / rps seconds: mean rate exactly rps
    assert trace.arrival_s[m] - trace.arrival_s[0] == pytest.approx(m / 10.0)
    assert (m - 1) / (trace.arrival_s[m - 1] - trace.arrival_s[0]) == pytest.approx(10.0)
    assert np.all(np.diff(trace.arrival_s) >= 0)
    # the window holds every request of the wrapped stream that arrives before its end
    longer = make_workload("coding", 10.0, duration_s=2_400, arrival="replay")
    assert longer.arrival_s[len(trace)] >= 1_200
    np.testing.assert_array_equal(longer.arrival_s[:len(trace)], trace.arrival_s)


def test_replay_refuses_a_base_without_a_rate():
    with pytest.raises(ValueError, match="same time"):
        replay_arrivals(np.zeros(5), 1.0, 10.0)


@settings(max_examples=200, deadline=None)
@given(rps=st.floats(min_value=0.1, max_value=200, exclude_min=True),
       duration_s=st.floats(min_value=1, max_value=300),
       seed=st.integers(min_value=0, max_value=2**32 - 1))
def test_poisson_arrivals_property(rps, duration_s, seed):
    n = round(rps * duration_s)
    if n == 0:
        with pytest.raises(ValueError, match="too few requests"):
            poisson_arrivals(rps, duration_s, seed)
        return
    arrivals = poisson_arrivals(rps, duration_s, seed)
    assert arrivals.shape == (n,)
    assert np.all(np.diff(arrivals) >= 0)
    assert arrivals[0] >= 0 and arrivals[-1] < duration_s


@settings(max_examples=100, deadline=None)
@given(rps=st.floats(min_value=1, max_value=200),
       duration_s=st.floats(min_value=1, max_value=300),
       cv=st.floats(min_value=0.1, max_value=5))
def test_gamma_arrivals_property(rps, duration_s, cv):
    arrivals = gamma_arrivals(rps, duration_s, cv, 0)
    assert arrivals.shape == (round(rps * duration_s),)
    assert np.all(np.diff(arrivals) >= 0)
    assert arrivals[0] >= 0 and arrivals[-1] < duration_s


# --- the Trace container ---------------------------------------------------------------

def test_trace_infers_window_from_mean_gap():
    trace = Trace(np.array([0.0, 1.0, 2.0, 3.0]), [1, 2, 3, 4], [5, 6, 7, 8], "t")
    assert trace.duration_s == 4.0 and trace.rate_rps == 1.0 and len(trace) == 4


def test_trace_copies_its_inputs():
    arrivals = np.array([0.0, 1.0])
    Trace(arrivals, [1, 1], [1, 1], "t")
    arrivals[0] = 5.0  # still writable, and the trace did not alias it


@pytest.mark.parametrize("arrival_s, prompt, output, words", [
    ([1.0, 0.5], [1, 1], [1, 1], "not sorted"),
    ([-1.0, 0.5], [1, 1], [1, 1], ">= 0"),
    ([0.0, 0.5], [1, 0], [1, 1], "at least 1 token"),
    ([0.0, 0.5], [1, 1], [1], "shape"),
    ([0.0, 0.5], [1.5, 1], [1, 1], "whole numbers"),
    ([], [], [], "no requests"),
])
def test_trace_validation(arrival_s, prompt, output, words):
    with pytest.raises(TraceFormatError, match=words):
        Trace(np.array(arrival_s), np.array(prompt), np.array(output), "t")


def test_head_and_with_arrivals():
    trace = make_workload("coding", 10, duration_s=60, seed=5)
    head = trace.head(30.0)
    assert head.duration_s == 30.0 and np.all(head.arrival_s < 30.0)
    assert len(head) == np.count_nonzero(trace.arrival_s < 30.0)
    np.testing.assert_array_equal(head.prompt_tokens, trace.prompt_tokens[:len(head)])
    shifted = trace.with_arrivals(trace.arrival_s + 1.0)
    np.testing.assert_array_equal(shifted.arrival_s, trace.arrival_s + 1.0)
    np.testing.assert_array_equal(shifted.output_tokens, trace.output_tokens)
    assert shifted.duration_s == trace.duration_s
    frame = trace.to_frame()
    assert list(frame.columns) == ["arrival_s", "prompt_tokens", "output_tokens"]
    assert len(frame) == len(trace)


def test_package_docstring_example_runs():
    import doctest

    import workloads

    assert doctest.testmod(workloads).failed == 0


def test_a_token_count_past_int64_is_named_as_given():
    """1e30 tokens was cast to int64's minimum and reported as '-9223372036854775808'."""
    for tokens in ([1e30, 2], np.array([2 ** 63 + 5, 2], dtype=np.uint64)):
        with pytest.raises(TraceFormatError, match=r"prompt_tokens\[0\] = 1e\+30|prompt_tokens\[0\] = 9.223e\+18"):
            Trace([0.0, 1.0], tokens, [1, 1], "x")
