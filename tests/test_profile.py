"""Rate profiles: the CSV format (one-line errors naming file, line and column), the
built-in diurnal day, and time rescaling in the one trace generator."""

from __future__ import annotations

import numpy as np
import pytest

from workloads import ProfileFormatError, RateProfile, TraceGenerator, diurnal_profile, read_profile_csv


def write(tmp_path, text, name="rate.csv"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_csv_steps_and_last_step_as_long_as_the_gap_before_it(tmp_path):
    p = read_profile_csv(write(tmp_path, "time_s,rps\n100,2\n400,6\n1000,3\n"))
    assert p.start_s.tolist() == [0, 300, 900]            # shifted to start at 0
    assert p.rps.tolist() == [2, 6, 3]
    assert p.end_s == 1500                               # 900 + (900 - 300)
    assert p.expected_requests == pytest.approx(2 * 300 + 6 * 600 + 3 * 600)
    assert p.peak_rps == 6
    assert read_profile_csv(write(tmp_path, "time_s,rps\n0,5\n"), duration_s=60).expected_requests == 300


@pytest.mark.parametrize("text, where", [
    ("t,rps\n0,1\n", ":1: header"),
    ("time_s,rps\n0,1\n10,-1\n", ":3: column 2 (rps)"),
    ("time_s,rps\n0,1\nten,1\n", ":3: column 1 (time_s)"),
    ("time_s,rps\n0,1\n50,2\n50,3\n", ":4: column 1 (time_s)"),
    ("time_s,rps\n0,1\n10\n", ":3: 1 fields"),
    ("time_s,rps\n0,0\n10,0\n", "column 2 (rps) is 0 on every row"),
    ("time_s,rps\n0,4\n", "one row has no length"),
    ("time_s,rps\n0,1\n1e308,2\n", ":3: column 1 (time_s)"),   # its last step's end overflowed (numpy warnings)
    ("", "empty file"),
])
def test_bad_csv_is_one_line_naming_file_line_and_column(tmp_path, text, where):
    path = write(tmp_path, text)
    with pytest.raises(ProfileFormatError) as err:
        read_profile_csv(path)
    message = str(err.value)
    assert str(path) in message and where in message and "\n" not in message


def test_diurnal_day_peaks_at_14h_at_three_times_the_trough():
    p = diurnal_profile(9.0)
    assert p.duration_s == 86400 and p.peak_rps == pytest.approx(9.0)
    assert p.rps.min() == pytest.approx(3.0)
    assert p.mean_rps == pytest.approx(6.0, rel=1e-3)     # (peak + trough) / 2 of a cosine
    assert 13.5 <= p.start_s[np.argmax(p.rps)] / 3600 <= 14.0
    assert 1.5 <= p.start_s[np.argmin(p.rps)] / 3600 <= 2.0


def test_cumulative_and_its_inverse_agree():
    p = RateProfile(np.array([0.0, 10.0, 20.0]), np.array([2.0, 0.0, 5.0]), 30.0)
    u = np.array([0.0, 5.0, 19.9, 20.0, 35.0, 69.9])
    t = p.time_at(u)
    assert np.allclose(p.cumulative(t), u)
    assert p.time_at(np.array([20.0]))[0] >= 10.0            # a zero-rate step is skipped, not entered


@pytest.mark.parametrize("arrival", ["poisson", "gamma"])
def test_trace_follows_the_profile_and_is_reproducible(arrival):
    profile = RateProfile(np.array([0.0, 600.0]), np.array([2.0, 8.0]), 1200.0)
    gen = TraceGenerator("coding", 120, seed=4, arrival=arrival)
    trace = gen.with_profile(profile)
    counts = np.histogram(trace.arrival_s, bins=[0, 600, 1200])[0]
    assert counts[0] == pytest.approx(1200, rel=0.15) and counts[1] == pytest.approx(4800, rel=0.1)
    assert trace.duration_s == 1200 and trace.arrival_s.max() < 1200
    again = TraceGenerator("coding", 120, seed=4, arrival=arrival).with_profile(profile)
    assert np.array_equal(again.arrival_s, trace.arrival_s)
    assert np.array_equal(again.prompt_tokens, trace.prompt_tokens)


def test_constant_profile_holds_the_constant_rate_requests():
    """The profile only moves the generator's requests in time: a constant profile at
    rate r places them where the trace at r does (same sizes, same order)."""
    gen = TraceGenerator("conversation", 100, seed=1)
    flat = gen.with_profile(RateProfile(np.array([0.0]), np.array([5.0]), 100.0))
    fixed = gen.at(5.0)
    k = min(len(flat), len(fixed))
    assert np.allclose(flat.arrival_s[:k], fixed.arrival_s[:k])
    assert np.array_equal(flat.prompt_tokens[:k], fixed.prompt_tokens[:k])


def test_replayed_file_keeps_its_requests_in_order(tmp_path):
    trace_csv = write(tmp_path, "arrival_s,prompt_tokens,output_tokens\n" +
                      "".join(f"{i * 0.5},{100 + i},{10 + i}\n" for i in range(40)), "trace.csv")
    gen = TraceGenerator(str(trace_csv), 20, arrival="replay")
    trace = gen.with_profile(RateProfile(np.array([0.0, 10.0]), np.array([1.0, 4.0]), 20.0))
    assert len(trace) == 50                                  # 10 + 40 requests: the file once, then wrapped
    assert trace.prompt_tokens[:40].tolist() == list(range(100, 140))
    assert np.all(np.diff(trace.arrival_s[10:40]) == pytest.approx(0.25))   # its own gaps at rate 4
