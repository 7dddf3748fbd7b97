"""Tests of `provision perf predict|calibrate|plot`, run as a user types them.

The commands run in a subprocess through the installed `provision` script (CONTRACTS.md,
command 3); the pure functions behind them (`predict_points`, `perf_plot_data`) are
checked in-process against `perfmodels` so the numbers, not the pixels, are tested.
"""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import perfmodels
from perfmodels import LatencyModel, calibrate, load_calibration, shipped_profile
from perfmodels import predict_points
from reports import PANELS, perf_plot_data

PROVISION = shutil.which("provision") or os.path.join(os.path.dirname(sys.executable), "provision")
CONTRACT_COLUMNS = ["model", "hardware", "tensor_parallel", "prompt_size", "batch_size"]
PACKAGE_CALIBRATION = Path(perfmodels.__file__).parent / "data" / "calibration.toml"

POINTS = """model,hardware,tensor_parallel,prompt_size,batch_size,power_cap
bloom-176b,h100-80gb,8,1500,1,1
bloom-176b,dgx-a100,8,512,16,0.5
llama2-70b,a100-80gb,4,2048,4,1.0
llama2-70b,h200-141gb,8,128,32,0.7
bloom-176b,h100-80gb,2,1500,8,
"""


def provision(*args, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([PROVISION, *map(str, args)], cwd=cwd, capture_output=True, text=True, timeout=300)


def assert_user_error(r: subprocess.CompletedProcess, *needles: str) -> str:
    """Exit 2, one line on stderr starting with `error:`, no traceback."""
    assert "Traceback" not in r.stderr + r.stdout, r.stderr
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


@pytest.fixture
def points_csv(tmp_path) -> Path:
    path = tmp_path / "points.csv"
    path.write_text(POINTS)
    return path


# --- predict ---------------------------------------------------------------------------


def test_predict_writes_the_contract_columns_and_the_model_values(tmp_path, points_csv):
    r = provision("perf", "predict", "--points", points_csv, "--out", "out.csv", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    out = pd.read_csv(tmp_path / "out.csv")
    assert list(out.columns) == [*CONTRACT_COLUMNS, "power_cap", "prompt_time_ms", "token_time_ms"]
    assert list(out.hardware) == ["h100-80gb", "dgx-a100", "a100-80gb", "h200-141gb", "h100-80gb"]
    assert list(out.power_cap) == [1.0, 0.5, 1.0, 0.7, 1.0]  # an empty cell is uncapped
    model = LatencyModel()
    gpu = out.hardware.replace({"dgx-a100": "a100-80gb"})
    for i, row in out.iterrows():
        args = (row.model, gpu[i], row.tensor_parallel)
        assert row.prompt_time_ms == pytest.approx(
            1e3 * model.prefill_time_s(*args, row.prompt_size, row.batch_size, row.power_cap), rel=1e-12)
        assert row.token_time_ms == pytest.approx(
            1e3 * model.decode_time_s(*args, row.batch_size, row.prompt_size, row.power_cap), rel=1e-12)
    # One warning line each: h200-141gb borrows h100-80gb's constants; BLOOM's 352 GB of
    # weights do not fit on 2 H100s (line 6), so that row is an extrapolation.
    warnings = r.stderr.strip().splitlines()
    assert len(warnings) == 2 and all(ln.startswith("warning: ") for ln in warnings), r.stderr
    assert "h200-141gb" in warnings[0] and "borrowed" in warnings[0]
    assert "line 6" in warnings[1] and "HBM" in warnings[1]


def test_predict_without_power_cap_column(tmp_path):
    (tmp_path / "p.csv").write_text("model,hardware,tensor_parallel,prompt_size,batch_size\n"
                                    "llama2-70b,h100-80gb,8,512,1\n")
    r = provision("perf", "predict", "--points", "p.csv", "--out", "o.csv", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""  # calibrated GPU, fits in memory: nothing to warn about
    out = pd.read_csv(tmp_path / "o.csv")
    assert list(out.columns) == [*CONTRACT_COLUMNS, "prompt_time_ms", "token_time_ms"]


def _edit(text: str, old: str, new: str) -> str:
    assert old in text
    return text.replace(old, new, 1)


@pytest.mark.parametrize("edit,needles", [
    (lambda t: _edit(t, ",batch_size,", ","), ["missing column batch_size", "model, hardware, tensor_parallel"]),
    (lambda t: _edit(t, "dgx-a100", "h100"), ["line 3", "hardware", "unknown", "did you mean", "h100-80gb"]),
    (lambda t: _edit(t, "bloom-176b,h100-80gb,8", "bloom,h100-80gb,8"), ["line 2", "model", "bloom-176b"]),
    (lambda t: _edit(t, ",0.5\n", ",1.5\n"), ["line 3", "power_cap", "[0.28, 1]"]),
    (lambda t: _edit(t, ",2048,", ",-2048,"), ["line 4", "prompt_size"]),
    (lambda t: _edit(t, ",128,32,", ",128,many,"), ["line 5", "batch_size", "'many' is not a number"]),
    (lambda t: _edit(t, "a100-80gb,4,", "a100-80gb,3,"), ["line 4", "tensor_parallel", "1, 2, 4 or 8"]),
    (lambda t: t + "llama-30b,a6000-4x,8,512,1,1\n", ["line 7", "tensor_parallel", "4 GPUs"]),
], ids=["missing column", "unknown hardware", "unknown model", "power cap 1.5", "negative tokens",
        "non-numeric", "tp 3", "tp above machine"])
def test_predict_bad_points_are_one_line_errors(tmp_path, points_csv, edit, needles):
    points_csv.write_text(edit(POINTS))
    r = provision("perf", "predict", "--points", points_csv, "--out", "out.csv", cwd=tmp_path)
    assert_user_error(r, *needles)
    assert not (tmp_path / "out.csv").exists()


def test_predict_refuses_to_overwrite_without_force(tmp_path, points_csv):
    (tmp_path / "out.csv").write_text("keep me\n")
    r = provision("perf", "predict", "--points", points_csv, "--out", "out.csv", cwd=tmp_path)
    assert_user_error(r, "exists; pass --force")
    assert (tmp_path / "out.csv").read_text() == "keep me\n"
    r = provision("perf", "predict", "--points", points_csv, "--out", "out.csv", "--force", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert len(pd.read_csv(tmp_path / "out.csv")) == 5


def test_predict_points_groups_by_model_and_gpu():
    points = pd.DataFrame(dict(model=["llama2-70b", "bloom-176b", "llama2-70b"], gpu=["h100-80gb"] * 3,
                               tensor_parallel=[8, 8, 4], prompt_size=[512, 1500, 128], batch_size=[1, 2, 64],
                               power_cap=[1.0, 1.0, 0.5]), index=[10, 11, 12])
    out = predict_points(points)
    assert list(out.index) == [10, 11, 12]
    m = LatencyModel()
    assert out.loc[12, "prompt_time_ms"] == pytest.approx(1e3 * m.prefill_time_s("llama2-70b", "h100-80gb", 4, 128, 64, 0.5))
    assert out.loc[11, "token_time_ms"] == pytest.approx(1e3 * m.decode_time_s("bloom-176b", "h100-80gb", 8, 2, 1500))


# --- calibrate -------------------------------------------------------------------------


def test_calibrate_prints_mape_per_gpu_and_the_exclusion(tmp_path):
    before = PACKAGE_CALIBRATION.read_bytes()
    (tmp_path / "tmp").mkdir()
    r = provision("perf", "calibrate", "--out", "tmp/cal.toml", cwd=tmp_path)
    assert r.returncode == 0 and "warning" not in r.stderr, r.stderr
    for gpu in ("a100-80gb", "h100-80gb"):
        for phase in ("prompt_time", "token_time"):
            assert re.search(rf"MAPE {gpu} {phase}: held-out \d+\.\d\d%, train \d+\.\d\d%", r.stdout), r.stdout
    assert "excluded 10 artifact rows where batch_size == 64 and tensor_parallel == 2" in r.stdout
    saved = load_calibration(tmp_path / "tmp" / "cal.toml")
    shipped = load_calibration()
    assert saved.per_gpu.keys() == shipped.per_gpu.keys()
    for gpu in saved.per_gpu:
        assert saved.per_gpu[gpu].compute_efficiency == pytest.approx(shipped.per_gpu[gpu].compute_efficiency, rel=0.01)
    assert PACKAGE_CALIBRATION.read_bytes() == before  # the package's default was not touched
    # An existing file that is not the package's own needs --force.
    assert_user_error(provision("perf", "calibrate", "--out", "tmp/cal.toml", cwd=tmp_path), "--force")


def test_calibrate_warns_of_a_poor_fit_it_saves(tmp_path):
    """Helper 70: H100 rows relabelled a40 fit at 200% MAPE and were saved with exit 0 and no
    word; the shipped profile (2-8%) raises no warning (above: its stderr is empty)."""
    rows = perfmodels.shipped_profile()
    rows = rows[rows.hardware == "h100-80gb"].assign(hardware="a40")
    rows.to_csv(tmp_path / "a40.csv", index=False)
    r = provision("perf", "calibrate", "--profile", "a40.csv", "--out", "cal.toml", cwd=tmp_path)
    assert r.returncode == 0 and (tmp_path / "cal.toml").exists(), r.stderr
    warning = [line for line in r.stderr.splitlines() if line.startswith("warning: the fit of a40 ")]
    assert len(warning) == 1 and "over 25%): check the profile's units and hardware names; --max-mape N refuses" \
        in warning[0], r.stderr


def test_calibrate_max_mape_fails_and_saves_nothing(tmp_path):
    r = provision("perf", "calibrate", "--out", "cal.toml", "--max-mape", "1", cwd=tmp_path)
    assert_user_error(r, "--max-mape", "not saved")
    assert not (tmp_path / "cal.toml").exists()


def test_calibrate_bad_profile_is_a_one_line_error(tmp_path, points_csv):
    r = provision("perf", "calibrate", "--profile", points_csv, "--out", "cal.toml", cwd=tmp_path)
    assert_user_error(r, "--profile", "missing columns", "token_time_ms")


PROFILE_HEADER = "model,hardware,tensor_parallel,prompt_size,batch_size,token_size,prompt_time_ms,token_time_ms\n"
TWO_POINTS = "llama2-70b,h100-80gb,8,512,1,128,53.8,30.5\nllama2-70b,h100-80gb,8,1024,1,128,77.9,29.7\n"


def _run_in_process(capsys, monkeypatch, tmp_path, *args) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of `provision ARGS` in this process (no interpreter start-up)."""
    from provisioner.cli import run
    monkeypatch.chdir(tmp_path)
    code = run([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def test_calibrate_refuses_a_short_profile_row_naming_the_flag(tmp_path, capsys, monkeypatch):
    # was padded with an empty cell and fitted; --latency-profile refused it: one reader now
    (tmp_path / "p.csv").write_text(PROFILE_HEADER + TWO_POINTS.replace(",53.8,", ","))
    code, _, err = _run_in_process(capsys, monkeypatch, tmp_path, "perf", "calibrate", "--profile", "p.csv",
                                   "--out", "x.toml")
    assert code == 2 and err.strip() == ("error: --profile 'p.csv', line 2: 7 fields but the header has 8; "
                                         "fix the commas on that line"), err
    assert not (tmp_path / "x.toml").exists()


def test_plot_of_the_profile_model_says_why_it_asks_for_a_held_out_split(tmp_path, capsys, monkeypatch):
    # named --holdout with no word on why a plot of the grid model holds anything out
    (tmp_path / "p.csv").write_text(PROFILE_HEADER + TWO_POINTS)
    code, _, err = _run_in_process(capsys, monkeypatch, tmp_path, "perf", "plot", "--profile", "p.csv",
                                   "--latency-interp", "grid", "--out", "x.html")
    assert code == 2 and err.strip() == (
        "error: --holdout 0.2 leaves no held-out points for h100-80gb; use --holdout 0.26 or more (a fraction of its "
        "2 configuration points that rounds to at least one) (--latency-interp grid draws the roofline where the "
        "profile does not cover a point, fitted on a held-out split as `perf plot` draws it)"), err
    assert not (tmp_path / "x.html").exists()
    # a bad flag of its own says nothing of the split
    code, _, err = _run_in_process(capsys, monkeypatch, tmp_path, "perf", "plot", "--profile", "p.csv",
                                   "--latency-interp", "grid", "--seed", "-1", "--out", "x.html")
    assert code == 2 and err.strip() == "error: --seed must be a whole number in [0, 2**63) (got -1)", err


def test_calibrate_takes_splitwisesims_header(tmp_path, capsys, monkeypatch):
    # prompt_time / token_time: --latency-profile took them, --profile said "missing columns"
    header = PROFILE_HEADER.replace("prompt_time_ms,token_time_ms", "prompt_time,token_time")
    (tmp_path / "p.csv").write_text(header + TWO_POINTS)
    code, out, err = _run_in_process(capsys, monkeypatch, tmp_path, "perf", "calibrate", "--profile", "p.csv",
                                     "--holdout", "0.5", "--out", "x.toml")
    assert code == 0, err
    assert "MAPE h100-80gb prompt_time: held-out" in out and (tmp_path / "x.toml").exists()


def test_a_directory_given_as_input_is_called_one(tmp_path):
    (tmp_path / "in.csv").mkdir()   # was "no such file"
    assert_user_error(provision("perf", "predict", "--points", "in.csv", "--out", "o.csv", cwd=tmp_path),
                      "--points 'in.csv': is a directory")
    assert_user_error(provision("perf", "calibrate", "--profile", "in.csv", "--out", "c.toml", cwd=tmp_path),
                      "--profile 'in.csv': is a directory")


@pytest.mark.parametrize("command", ["calibrate", "plot"])
def test_a_negative_seed_is_a_one_line_error(tmp_path, command):
    # was an internal error (numpy's "expected non-negative integer"), exit 1
    r = provision("perf", command, "--seed", "-1", "--out", "out.html" if command == "plot" else "cal.toml",
                  cwd=tmp_path)
    assert_user_error(r, "--seed must be a whole number")
    assert list(tmp_path.iterdir()) == []


def test_refreshing_the_default_from_some_gpus_keeps_the_others(tmp_path, monkeypatch):
    # In-process on a copy of the package's file: the default --out is overwritten without
    # --force, but a profile of the H100 alone must not drop the A100's constants.
    from typer.testing import CliRunner

    import perfmodels
    from provisioner.cli import get_app

    default = tmp_path / "calibration.toml"
    default.write_bytes(PACKAGE_CALIBRATION.read_bytes())
    monkeypatch.setattr(perfmodels, "DEFAULT_CALIBRATION_PATH", default.resolve())
    profile = shipped_profile()
    profile[profile.hardware == "h100-80gb"].to_csv(tmp_path / "h100.csv", index=False)
    r = CliRunner().invoke(get_app(), ["perf", "calibrate", "--profile", str(tmp_path / "h100.csv")])
    assert r.exit_code == 0, r.output
    assert "kept the constants of a100-80gb" in r.output
    cal, shipped = load_calibration(default), load_calibration()
    assert cal.per_gpu["a100-80gb"] == shipped.per_gpu["a100-80gb"]
    assert cal.per_gpu["h100-80gb"].compute_efficiency == pytest.approx(
        shipped.per_gpu["h100-80gb"].compute_efficiency, rel=0.1)
    assert cal.borrowed == shipped.borrowed
    assert set(cal.holdout_mape_pct) == set(shipped.holdout_mape_pct)
    assert "kept from the previous file" in cal.source


def test_refreshing_the_default_keeps_a_borrowing_added_by_hand(tmp_path, monkeypatch):
    """README: a GPU without profiles is added to [borrowed]; a refit of its lender rebuilt
    [borrowed] from the package's defaults and dropped the line (the GPU then had no constants)."""
    from typer.testing import CliRunner

    import perfmodels
    from provisioner.cli import get_app

    default = tmp_path / "calibration.toml"
    text = PACKAGE_CALIBRATION.read_text()
    text = text.replace('"a40" = "a100-80gb"', '"a40" = "h100-80gb"')
    default.write_text(text.replace("[borrowed]\n", '[borrowed]\n"h20" = "h100-80gb"\n', 1))
    monkeypatch.setattr(perfmodels, "DEFAULT_CALIBRATION_PATH", default.resolve())
    assert load_calibration(default).borrowed["h20"] == "h100-80gb"
    r = CliRunner().invoke(get_app(), ["perf", "calibrate"])
    assert r.exit_code == 0, r.output
    cal = load_calibration(default)
    assert cal.borrowed["h20"] == "h100-80gb"
    assert cal.borrowed["a40"] == "h100-80gb"   # the file's choice, not the default lender
    assert {g: t for g, t in cal.borrowed.items() if g not in ("h20", "a40")} == \
        {g: t for g, t in load_calibration().borrowed.items() if g != "a40"}


# --- plot ------------------------------------------------------------------------------


def test_plot_writes_a_self_contained_html(tmp_path):
    r = provision("perf", "plot", "--out", "perf.html", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    html = (tmp_path / "perf.html").read_text()
    assert len(html.encode()) > 1_000_000  # plotly.js is inlined
    assert "plotly" in html
    assert not re.search(r"<script[^>]*\bsrc=[\"'][^\"']*cdn\.", html)
    assert_user_error(provision("perf", "plot", "--out", "perf.html", cwd=tmp_path), "exists; pass --force")
    # the same plot is the same bytes (was: plotly's random div id)
    assert provision("perf", "plot", "--out", "perf.html", "--force", cwd=tmp_path).returncode == 0
    assert (tmp_path / "perf.html").read_text() == html


@pytest.fixture(scope="module")
def plot_data():
    report = calibrate()
    return report, perf_plot_data(report)


def test_plot_data_measured_points_are_profile_medians(plot_data):
    _, data = plot_data
    profile = shipped_profile()
    measured = data[data.kind == "measured"]
    assert set(measured.panel) == set(PANELS)
    assert set(measured.gpu) == {"a100-80gb", "h100-80gb"} and set(measured.tp) == {2, 4, 8}
    p = measured[(measured.panel == "prefill_vs_batch") & (measured.gpu == "h100-80gb") & (measured.tp == 4)
                 & (measured.batch_size == 16)]
    rows = profile[(profile.hardware == "h100-80gb") & (profile.tensor_parallel == 4)
                   & (profile.prompt_size == 512) & (profile.batch_size == 16)]
    assert len(p) == 1 and p.time_ms.iloc[0] == pytest.approx(rows.prompt_time_ms.median())
    # Decode is compared at the mean context of the generation: prompt + output / 2.
    d = measured[measured.panel == "decode_vs_context"]
    assert np.all(d.x == d.context_tokens)
    assert np.all(d.reps >= 5)


def test_plot_data_marks_held_out_and_excluded_points(plot_data):
    report, data = plot_data
    measured = data[data.kind == "measured"]
    key = ["gpu", "tp", "prompt_size", "batch_size", "context_tokens"]
    held = measured[measured.split == "held-out"].drop_duplicates(key)
    expected = report.mape[(report.mape.split == "held-out") & (report.mape.phase == "prompt_time")]
    assert held.groupby("gpu").size().to_dict() == dict(zip(expected.gpu, expected.points))
    excluded = measured[measured.split == "excluded"]
    assert len(excluded) and np.all((excluded.batch_size == 64) & (excluded.tp == 2))


def test_plot_data_model_curves_are_the_latency_model(plot_data):
    report, data = plot_data
    model = LatencyModel(report.calibration)
    curves = data[data.kind == "model"]
    for panel in PANELS:
        c = curves[(curves.panel == panel) & (curves.gpu == "a100-80gb") & (curves.tp == 8)]
        assert len(c) > 5 and np.all(np.diff(c.time_ms.to_numpy()) >= 0)  # x ascending, time monotone
        if panel.startswith("prefill"):
            t = model.prefill_time_s("llama2-70b", "a100-80gb", 8, c.prompt_size.to_numpy(), c.batch_size.to_numpy())
        else:
            t = model.decode_time_s("llama2-70b", "a100-80gb", 8, c.batch_size.to_numpy(), c.context_tokens.to_numpy())
        assert c.time_ms.to_numpy() == pytest.approx(1e3 * t)


def test_predict_keeps_the_inputs_own_times_beside_the_prediction(tmp_path):
    """A --points file with measured times of its own: they are kept as input_<name>, not
    replaced by the prediction without a word (a hostile-input review found them dropped)."""
    (tmp_path / "p.csv").write_text("model,hardware,tensor_parallel,prompt_size,batch_size,prompt_time_ms\n"
                                    "llama2-70b,h100-80gb,8,512,1,5\n")
    r = provision("perf", "predict", "--points", "p.csv", "--out", "o.csv", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    out = pd.read_csv(tmp_path / "o.csv")
    assert list(out.columns) == [*CONTRACT_COLUMNS, "input_prompt_time_ms", "prompt_time_ms", "token_time_ms"]
    assert out.input_prompt_time_ms.iloc[0] == 5 and out.prompt_time_ms.iloc[0] != 5
    assert "kept as input_prompt_time_ms" in r.stdout
    # with input_prompt_time_ms too, the renamed column would replace it: refused
    (tmp_path / "p.csv").write_text("model,hardware,tensor_parallel,prompt_size,batch_size,input_prompt_time_ms,"
                                    "prompt_time_ms\nllama2-70b,h100-80gb,8,512,1,3,5\n")
    r = provision("perf", "predict", "--points", "p.csv", "--out", "o2.csv", cwd=tmp_path)
    assert r.returncode == 2 and "rename one of the two columns" in r.stderr and r.stderr.count("\n") == 1, r.stderr
    assert not (tmp_path / "o2.csv").exists()
