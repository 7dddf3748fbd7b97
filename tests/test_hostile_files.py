"""Files a careless or hostile user gives the provisioner: each is read right (a BOM,
UTF-16 from PowerShell) or refused in one line naming the file and the fix, exit 2."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from test_hostile_input import assert_one_line_error, cli


def test_a_rate_profile_with_a_field_past_the_csv_limit_is_one_line(tmp_path):
    """csv.Error (a field over 131,072 characters) was an internal error (exit 1)."""
    profile = tmp_path / "rate.csv"
    profile.write_text("time_s,rps\n0,5\n600," + "1" * 200_000 + "\n")
    assert_one_line_error(*cli("autoscale", "--profile", profile, "--design", "baseline-a100"),
                          f"{profile}: not a valid CSV file", "field larger than field limit")


def test_a_latency_profile_of_times_under_a_microsecond_is_refused(tmp_path):
    """1e-12 ms per pass hung the simulation: its clock stopped advancing (past Ctrl-C and SIGTERM)."""
    profile = tmp_path / "fast.csv"
    profile.write_text("model,hardware,tensor_parallel,prompt_size,batch_size,token_size,prompt_time_ms,token_time_ms\n"
                       "llama2-70b,a100-80gb,8,512,1,128,1e-12,1e-12\n"
                       "llama2-70b,a100-80gb,8,1024,2,128,1e-12,1e-12\n")
    assert_one_line_error(*cli("simulate", "--design", "baseline-a100", "--machines", "4", "--rps", "2",
                               "--duration", "20", "--model", "llama2-70b", "--latency-profile", profile),
                          f"--latency-profile '{profile}', line 2, column prompt_time_ms", "1e-12 ms is shorter than",
                          "at least 0.001 ms")


@pytest.mark.parametrize("encode", [lambda text: b"\xef\xbb\xbf" + text.encode(),   # Notepad's UTF-8
                                    lambda text: text.encode("utf-16")],            # PowerShell 5's `>`
                         ids=["utf-8-bom", "utf-16"])
def test_a_result_saved_with_a_bom_or_as_utf16_is_read(tmp_path, encode):
    """`provision --json > r.json` in Windows PowerShell writes UTF-16: it was 'not a UTF-8 JSON
    text file', and a UTF-8 BOM 'not valid JSON', for report and --from-result alike."""
    code, out, err = cli("--goal", "cost", "--rps", "5", "--design", "splitwise-hh", "--duration", "20",
                         "--no-verify", "--json")
    assert code == 0, err
    saved = tmp_path / "r.json"
    saved.write_bytes(encode(out))
    code, rescored, err = cli("simulate", "--from-result", saved, "--json")
    assert code == 0, err
    assert json.loads(rescored)["design"] == json.loads(out)["winner"]["design"]
    code, _, err = cli("report", saved, "--out", tmp_path / "r.html")
    assert code == 0 and (tmp_path / "r.html").stat().st_size > 0, err


TRACE_CSV = "arrival_s,prompt_tokens,output_tokens\r\n0.0,500,100\r\n1.5,\"800\",200\r\n\r\n3.0,64,8\r\n"
PROFILE_CSV = "time_s,rps\r\n0,2\r\n600,4\r\n"
SAVED_AS = {"utf-8-bom": lambda text: b"\xef\xbb\xbf" + text.encode(),   # Excel's CSV UTF-8, Notepad
            "utf-16": lambda text: text.encode("utf-16"),                  # PowerShell 5's `>`: a BOM, then LE
            "utf-16-be": lambda text: b"\xfe\xff" + text.encode("utf-16-be")}


@pytest.mark.parametrize("saved_as", SAVED_AS)
def test_a_trace_and_a_rate_profile_saved_with_a_bom_or_as_utf16_are_read(tmp_path, saved_as):
    """Both were refused as 'not UTF-8 text' while a result JSON so saved was read."""
    from workloads import read_profile_csv, read_trace_csv

    trace, profile = tmp_path / "t.csv", tmp_path / "rate.csv"
    trace.write_bytes(SAVED_AS[saved_as](TRACE_CSV))
    profile.write_bytes(SAVED_AS[saved_as](PROFILE_CSV))
    plain = tmp_path / "plain.csv"
    plain.write_text(TRACE_CSV, newline="")
    read, expected = read_trace_csv(trace), read_trace_csv(plain)
    assert read.arrival_s.tolist() == expected.arrival_s.tolist() == [0.0, 1.5, 3.0]
    assert read.prompt_tokens.tolist() == [500, 800, 64] and read.output_tokens.tolist() == [100, 200, 8]
    rate = read_profile_csv(profile)
    assert rate.start_s.tolist() == [0.0, 600.0] and rate.rps.tolist() == [2.0, 4.0]
    code, out, err = cli("simulate", "--design", "baseline-a100", "--machines", "2", "--workload", trace, "--json")
    assert code == 0, err
    assert json.loads(out)["requests"] == 3


def test_one_decoding_rule_under_both_public_names():
    """Moved to the lowest package so perfmodels and hardware_catalog may use it; workloads
    still exports it, the same function, not a second copy that could drift."""
    import hardware_catalog
    import workloads

    assert workloads.decode_text is hardware_catalog.decode_text
    assert hardware_catalog.decode_text("time_s".encode("utf-16-le")) == "time_s"   # no BOM: the zero bytes


LATIN_1 = "caf\xe9"   # a Latin-1 byte (0xe9) that UTF-8 cannot start a character with


def test_a_trace_in_another_encoding_is_one_line_naming_it_and_utf8(tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_bytes(TRACE_CSV.replace("arrival_s", f"arrival_s,{LATIN_1}", 1).encode("latin-1"))
    assert_one_line_error(*cli("simulate", "--design", "baseline-a100", "--machines", "2", "--workload", trace),
                          f"cannot read trace '{trace}': not UTF-8 or UTF-16 text; save it as a UTF-8 CSV file")


def test_a_rate_profile_in_another_encoding_is_one_line_naming_it_and_utf8(tmp_path):
    profile = tmp_path / "rate.csv"
    profile.write_bytes(f"time_s,rps\n0,2\n600,4\n# {LATIN_1}\n".encode("cp1252"))   # Windows' own
    assert_one_line_error(*cli("autoscale", "--profile", profile, "--design", "baseline-a100"),
                          f"{profile}: not UTF-8 or UTF-16 text; save it as a UTF-8 CSV file with header time_s,rps")


LATENCY_PROFILE_CSV = ("model,hardware,tensor_parallel,prompt_size,batch_size,token_size,prompt_time_ms,token_time_ms\r\n"
                       "llama2-70b,h100-80gb,8,512,1,128,53.8,30.5\r\n\r\n"
                       "llama2-70b,h100-80gb,8,1024,1,128,77.9,29.7\r\n")


@pytest.mark.parametrize("saved_as", SAVED_AS)
def test_a_latency_profile_saved_with_a_bom_or_as_utf16_is_read(tmp_path, saved_as):
    """UTF-16 was 'not a UTF-8 text CSV file' (--latency-profile, perf calibrate/plot --profile)."""
    from hardware_catalog import load_catalog
    from perfmodels import read_profile
    plain, saved = tmp_path / "plain.csv", tmp_path / "saved.csv"
    plain.write_text(LATENCY_PROFILE_CSV, newline="")
    saved.write_bytes(SAVED_AS[saved_as](LATENCY_PROFILE_CSV))
    read = read_profile(saved, load_catalog()).frame()
    assert read.equals(read_profile(plain, load_catalog()).frame()) and read.prompt_time_ms.tolist() == [53.8, 77.9]
    # an error names the line an editor shows, the BOM and the blank line notwithstanding
    saved.write_bytes(SAVED_AS[saved_as](LATENCY_PROFILE_CSV.replace("77.9", "fast")))
    assert_one_line_error(*cli("simulate", "--design", "baseline-h100", "--machines", "2", "--latency-profile", saved),
                          f"--latency-profile '{saved}', line 4, column prompt_time_ms")


def test_a_latency_profile_in_another_encoding_is_one_line_naming_it_and_utf8(tmp_path):
    profile = tmp_path / "p.csv"
    profile.write_bytes(LATENCY_PROFILE_CSV.replace("\r\n\r\n", f"\r\n# {LATIN_1}\r\n").encode("latin-1"))
    assert_one_line_error(*cli("simulate", "--design", "baseline-h100", "--machines", "2", "--latency-profile", profile),
                          f"--latency-profile '{profile}': not UTF-8 or UTF-16 text; save it as a UTF-8 CSV file")


POINTS_CSV = "model,hardware,tensor_parallel,prompt_size,batch_size,power_cap\r\nllama2-70b,h100-80gb,8,512,4,\r\n" \
             "llama2-70b,dgx-a100,8,1024,2,0.5\r\n"


@pytest.mark.parametrize("saved_as", SAVED_AS)
def test_perf_predict_points_saved_with_a_bom_or_as_utf16_are_read(tmp_path, saved_as):
    """UTF-16 `--points` was 'not a UTF-8 text CSV file'."""
    plain, saved = tmp_path / "plain.csv", tmp_path / "saved.csv"
    plain.write_text(POINTS_CSV, newline="")
    saved.write_bytes(SAVED_AS[saved_as](POINTS_CSV))
    for points in (plain, saved):
        code, _, err = cli("perf", "predict", "--points", points, "--out", tmp_path / f"out-{points.stem}.csv")
        assert code == 0, err
    out = (tmp_path / "out-saved.csv").read_text()
    assert out == (tmp_path / "out-plain.csv").read_text() and out.startswith("model,hardware,"), out
    saved.write_bytes(SAVED_AS[saved_as](POINTS_CSV.replace(",0.5", ",5")))
    assert_one_line_error(*cli("perf", "predict", "--points", saved, "--out", tmp_path / "bad.csv"),
                          f"--points '{saved}': line 3, column power_cap: must be a fraction of rated power")


def test_perf_predict_points_in_another_encoding_are_one_line_naming_them_and_utf8(tmp_path):
    points = tmp_path / "p.csv"
    points.write_bytes(POINTS_CSV.replace("power_cap", f"power_cap,{LATIN_1}").encode("cp1252"))
    assert_one_line_error(*cli("perf", "predict", "--points", points, "--out", tmp_path / "o.csv"),
                          f"--points '{points}': not UTF-8 or UTF-16 text; save it as a UTF-8 CSV file")
    assert not (tmp_path / "o.csv").exists()


def _shipped_calibration() -> str:
    from perfmodels import DEFAULT_CALIBRATION_PATH
    return DEFAULT_CALIBRATION_PATH.read_text(encoding="utf-8")


@pytest.mark.parametrize("content, needle", [
    (lambda text: ("# caf\xe9\n" + text).encode("latin-1"), "is not UTF-8 or UTF-16 text; save it as UTF-8"),
    (lambda text: ("meta = 5\n" + text[text.index("[gpu."):]).encode(), "'meta' must be a table"),  # AttributeError
    (lambda text: text.replace("compute_efficiency = ", "compute_efficiency = 0 #", 1).encode(),  # NaN latencies
     "compute_efficiency is a fraction of the peak, so > 0 and <= 1 (got 0)"),
    (lambda text: text.replace("memory_efficiency = ", "memory_efficiency = -1 #", 1).encode(),
     "memory_efficiency is a fraction of the peak"),
    (lambda text: text.replace("decode_seq_overhead_s = ", "decode_seq_overhead_s = -1 #", 1).encode(),
     "decode_seq_overhead_s is a time or size, so >= 0 (got -1)"),
], ids=["latin-1", "meta-not-a-table", "zero-efficiency", "negative-efficiency", "negative-overhead"])
def test_a_calibration_file_that_cannot_be_used_is_one_line_naming_it(tmp_path, content, needle):
    from perfmodels import LatencyModel, PerfModelError
    path = tmp_path / "cal.toml"
    path.write_bytes(content(_shipped_calibration()))
    with pytest.raises(PerfModelError, match=f"^calibration '{path}'") as caught:
        LatencyModel(calibration=path)
    assert needle in str(caught.value) and "\n" not in str(caught.value)


# A TOML file as an editor may save it; "cr": classic Mac line ends, which every TOML reader
# read (text mode) before it read bytes, and still does.
TOML_SAVED_AS = {**SAVED_AS, "cr": lambda text: text.replace("\n", "\r").encode()}


@pytest.mark.parametrize("saved_as", TOML_SAVED_AS)
def test_a_calibration_saved_with_a_bom_or_as_utf16_reads_as_without(tmp_path, saved_as):
    """A UTF-16 calibration was refused as 'not UTF-8 text' while a trace so saved was read."""
    from perfmodels import LatencyModel, load_calibration
    path = tmp_path / "cal.toml"
    path.write_bytes(TOML_SAVED_AS[saved_as](_shipped_calibration()))
    assert load_calibration(path) == load_calibration()
    saved = LatencyModel(calibration=path).prefill_time_s("llama2-70b", "a100-80gb", 8, 512)
    assert saved == LatencyModel().prefill_time_s("llama2-70b", "a100-80gb", 8, 512)


@pytest.mark.parametrize("saved_as", SAVED_AS)
def test_a_calibration_syntax_error_names_the_editors_line_and_column_whatever_the_encoding(tmp_path, saved_as):
    """The BOM is dropped before TOML reads the text: it is no column of line 1."""
    from perfmodels import PerfModelError, load_calibration
    body = 'x = [1,\n"a" = 2\n'
    errors = []
    for name, encode in (("plain", str.encode), (saved_as, SAVED_AS[saved_as])):
        (tmp_path / name).mkdir()
        (tmp_path / name / "cal.toml").write_bytes(encode(body))
        with pytest.raises(PerfModelError) as caught:
            load_calibration(tmp_path / name / "cal.toml")
        errors.append(str(caught.value).replace(str(tmp_path / name), "DIR"))
    assert errors[0] == errors[1] and "(at line 2, column 5)" in errors[0], errors


def test_a_trace_spanning_too_little_time_for_a_rate_names_the_trace_not_duration(tmp_path):
    """Arrivals 1e-320 s apart: the rate overflowed to inf and the error blamed --duration, not given."""
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n1e-320,100,10\n0,100,10\n")
    line = assert_one_line_error(*cli("simulate", "--design", "baseline-a100", "--machines", "4", "--workload", trace),
                                 f"trace '{trace}' spans 1e-320 s between its first and last arrival, too short to "
                                 f"have a rate")
    assert "--duration" not in line


def test_a_negative_zero_in_an_inventory_is_zero(tmp_path):
    """`inter_node_latency_ms = -0.0` was planned and printed as '-0 ms'."""
    shipped = Path(__file__).resolve().parents[1] / "hardware_catalog" / "data" / "inventories"
    inventory = tmp_path / "inv.toml"
    inventory.write_text((shipped / "thunderserve-32gpu.toml").read_text().replace(
        "inter_node_latency_ms = 0.5", "inter_node_latency_ms = -0.0"))
    code, out, err = cli("cloud", "--inventory", inventory, "--workload", "coding", "--rps", "2", "--duration", "30")
    assert code == 0, err
    assert "40 Gbps per node pair, 0 ms;" in out and "-0 ms" not in out, out


def _catalog_copy(tmp_path) -> Path:
    import shutil
    shutil.copytree(Path(__file__).resolve().parents[1] / "hardware_catalog" / "data", tmp_path / "catalog")
    return tmp_path / "catalog"


@pytest.mark.parametrize("saved_as", TOML_SAVED_AS)
def test_a_catalog_file_saved_with_a_bom_or_as_utf16_reads_as_without(tmp_path, saved_as):
    """Every other TOML the tool reads took a BOM; a catalog entry so saved was 'not valid TOML',
    and one in UTF-16 too."""
    from hardware_catalog import load_catalog
    root = _catalog_copy(tmp_path)
    gpu = root / "gpus" / "h100-80gb.toml"
    gpu.write_bytes(TOML_SAVED_AS[saved_as](gpu.read_text(encoding="utf-8")))
    assert load_catalog(root).gpu("h100-80gb") == load_catalog().gpu("h100-80gb")


def test_a_catalog_file_in_another_encoding_is_one_line_naming_it_and_utf8(tmp_path):
    from hardware_catalog import CatalogValidationError, load_catalog
    root = _catalog_copy(tmp_path)
    gpu = root / "gpus" / "h100-80gb.toml"
    gpu.write_bytes(f"# {LATIN_1}\n".encode("latin-1") + gpu.read_bytes())
    with pytest.raises(CatalogValidationError) as caught:
        load_catalog(root)
    assert str(caught.value) == "gpus/h100-80gb.toml: not UTF-8 or UTF-16 text; save it as a UTF-8 TOML file"


SPEC_TOML = '# a small sweep\nrps = [5, 10]\nfamilies = ["baseline-a100"]\nduration_s = 3\nverify = false\n'


@pytest.mark.parametrize("saved_as", TOML_SAVED_AS)
def test_a_sweep_spec_saved_with_a_bom_or_as_utf16_reads_as_without(tmp_path, saved_as):
    """A UTF-16 spec was refused as "cannot read it ('utf-8' codec can't decode byte 0xff ...)"."""
    from provisioner.sweep import load_sweep_spec
    plain, saved = tmp_path / "plain.toml", tmp_path / "saved.toml"
    plain.write_text(SPEC_TOML)
    saved.write_bytes(TOML_SAVED_AS[saved_as](SPEC_TOML))
    questions = load_sweep_spec(saved).questions
    assert questions == load_sweep_spec(plain).questions and [q.request.rps for q in questions] == [5.0, 10.0]


@pytest.mark.parametrize("saved_as", SAVED_AS)
def test_a_sweep_spec_syntax_error_names_the_editors_line_and_column_whatever_the_encoding(tmp_path, saved_as):
    errors = []
    for name, encode in (("plain", str.encode), (saved_as, SAVED_AS[saved_as])):
        (tmp_path / name).mkdir()
        spec = tmp_path / name / "spec.toml"
        spec.write_bytes(encode('rps = [5]\nfamilies = ["baseline-a100",\n  x]\n'))
        line = assert_one_line_error(*cli("sweep", spec, "--out", tmp_path / name / "out"))
        errors.append(line.replace(str(tmp_path / name), "DIR"))
    assert errors[0] == errors[1] and "(at line 3, column 3)" in errors[0], errors


def test_a_sweep_spec_in_another_encoding_is_one_line_naming_it_and_utf8(tmp_path):
    spec = tmp_path / "spec.toml"
    spec.write_bytes(f"# {LATIN_1}\n{SPEC_TOML}".encode("cp1252"))
    assert_one_line_error(*cli("sweep", spec, "--out", tmp_path / "out"),
                          f"'{spec}': not UTF-8 or UTF-16 text; save it as a UTF-8 TOML file")
    assert not (tmp_path / "out").exists()


def _shipped_inventory() -> str:
    shipped = Path(__file__).resolve().parents[1] / "hardware_catalog" / "data" / "inventories"
    return (shipped / "thunderserve-32gpu.toml").read_text(encoding="utf-8")


@pytest.mark.parametrize("saved_as", TOML_SAVED_AS)
def test_an_inventory_saved_with_a_bom_or_as_utf16_reads_as_without(tmp_path, saved_as):
    from provisioner.cloud import load_inventory
    inventory = tmp_path / "inv.toml"
    inventory.write_bytes(TOML_SAVED_AS[saved_as](_shipped_inventory()))
    assert load_inventory(inventory) == load_inventory("thunderserve-32gpu")


@pytest.mark.parametrize("saved_as", SAVED_AS)
@pytest.mark.parametrize("body, line, field", [
    ('[[nodes]]\ntype = "a40-8x"\ntype = "a6000-4x"\n', 3, " type:"),   # tomllib's line, the key on it
    ('[[nodes]]\ntype = "a40-8x"\ncount = -1\n', 3, " nodes[1].count:"),  # the inventory's own line lookup
])
def test_an_inventory_error_names_the_editors_line_whatever_the_encoding(tmp_path, saved_as, body, line, field):
    inventory = tmp_path / "inv.toml"
    inventory.write_bytes(SAVED_AS[saved_as](body))
    assert_one_line_error(*cli("cloud", "--inventory", inventory, "--rps", "1", "--json"),
                          f"{inventory}:{line}:{field}")


def test_an_inventory_in_another_encoding_is_one_line_naming_it_and_utf8(tmp_path):
    inventory = tmp_path / "inv.toml"
    inventory.write_bytes(f"# {LATIN_1}\n{_shipped_inventory()}".encode("latin-1"))
    assert_one_line_error(*cli("cloud", "--inventory", inventory, "--rps", "1"),
                          f"--inventory: '{inventory}' is not UTF-8 or UTF-16 text; save it as a UTF-8 TOML file")


NEAR_ZERO_PROFILE = ("model,hardware,tensor_parallel,prompt_size,batch_size,token_size,prompt_time_ms,token_time_ms\n"
                     "llama2-70b,a100-80gb,8,2,1,128,1.0,0.001\n"
                     "llama2-70b,a100-80gb,8,3,1,128,1.1,0.001999999999999\n")


@pytest.mark.parametrize("engine", ["fluid", "des"])
def test_a_latency_profile_extrapolated_to_near_zero_is_refused_when_loaded(tmp_path, engine):
    """Every cell is above the 1-us floor, but SplitwiseSim's rule extrapolates the decode of
    one request from the two knots (2 and 3 batch tokens) to 1e-15 ms: steps of 1e-18 s, which
    a clock of doubles at 0.2 s cannot add. The fluid engine looped for ever there, past
    SIGTERM, then stopped mid-run when its clock stopped; the discrete-event engine had no
    guard and gave meaningless results. The model is now refused when built, before either
    engine runs.

    The fluid engine's guard ("the fluid simulator's clock stopped ...", `provisioner/sim/
    _fluid.py`) stays as a backstop, but no --latency-profile reaches it any more (sub-us
    lookups are refused at load, or use the roofline beyond the last knot), so no test here
    drives it through the CLI."""
    profile = tmp_path / "extrapolated.csv"
    profile.write_text(NEAR_ZERO_PROFILE)
    line = assert_one_line_error(*cli("simulate", "--design", "baseline-a100", "--machines", "4", "--rps", "2",
                                      "--duration", "60", "--model", "llama2-70b", "--latency-profile", profile,
                                      "--latency-interp", "splitwisesim", "--engine", engine))
    assert line == (f"error: --latency-profile '{profile}': llama2-70b on a100-80gb TP 8: the splitwisesim rule "
                    f"extrapolates a decode iteration of 1 request to 1e-15 ms (under 1 us); give measurements at "
                    f"smaller prompt_size x batch_size (down to 1) or use --latency-interp grid")


@pytest.mark.parametrize("engine", ["fluid", "des"])
def test_a_window_of_ages_at_a_tiny_rate_is_refused_before_either_engine_runs(engine):
    """30 Poisson arrivals over 3e16 s: at 1e15 s and later doubles are 0.125 s or more apart,
    so a 45-ms iteration leaves the clock where it was. The fluid engine stopped there on its
    guard, blaming the latency model ("the fluid simulator's clock stopped at 2.25092e+15 s
    ..."); the discrete-event engine printed a table of 0-ms TTFT, TBT and E2E, exit 0.
    Arrivals past 2**32 s (136 years) are refused by both, naming the flags."""
    line = assert_one_line_error(*cli("simulate", "--design", "baseline-a100", "--machines", "2", "--model",
                                      "llama2-70b", "--workload", "coding", "--rps", "1e-15", "--duration", "3e16",
                                      "--engine", engine))
    assert line == ("error: the trace's last request arrives at 2.56e+16 s (8.11e+08 years): past 4.29e+09 s "
                    "(136 years) the simulators' clock cannot time a GPU pass; give a shorter --duration or a "
                    "higher --rps, or arrival times in seconds from the trace's start")


@pytest.mark.parametrize("make, why", [
    (lambda p: p.mkdir(), "is a directory"),
    (lambda p: None, "does not exist"),
    (lambda p: p.write_text("{not json"), "is not valid JSON (line 1, column 2: Expecting property name"),
    (lambda p: p.write_bytes(bytes(range(128, 256))), "is not a JSON text file (UTF-8 or UTF-16)"),
    (lambda p: p.write_text("[" * 100_000), "nesting thousands deep"),
    (lambda p: p.write_text(" \n"), "is empty"),
], ids=["directory", "missing", "not-json", "binary", "deep", "empty"])
def test_report_and_from_result_read_a_saved_answer_alike(tmp_path, make, why):
    """One reader for both (they were two, each with its own words and checks: --from-result
    said "cannot read 'd' (Is a directory)" where report said "is a directory")."""
    saved = tmp_path / "r.json"
    make(saved)
    fix = "give the file saved with `provision ... --json > result.json`"
    report = assert_one_line_error(*cli("report", saved, "--out", tmp_path / "r.html"), why, fix)
    rescore = assert_one_line_error(*cli("simulate", "--from-result", saved), why, fix)
    assert report.replace(f"result file '{saved}'", "X") == rescore.replace(f"--from-result '{saved}'", "X")
    assert not (tmp_path / "r.html").exists()


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes")
@pytest.mark.parametrize("command", [["simulate", "--from-result"], ["report"]])
def test_a_saved_answer_is_read_from_a_pipe(tmp_path, command):
    """`--from-result <(provision ... --json)` and `... | provision report /dev/stdin` read a
    pipe; the one reader of both refused every file that is not a regular one."""
    import threading

    code, saved, err = cli("--goal", "cost", "--rps", "2", "--design", "baseline-h100", "--duration", "30",
                           "--no-verify", "--json")
    assert code == 0, err
    pipe = tmp_path / "answer.pipe"
    os.mkfifo(pipe)
    writer = threading.Thread(target=pipe.write_text, args=(saved,))
    writer.start()
    out = ["--out", tmp_path / "r.html"] if command == ["report"] else ["--json"]
    code, printed, err = cli(*command, pipe, *out)
    writer.join(30)
    assert code == 0, err
    if command == ["report"]:
        assert (tmp_path / "r.html").stat().st_size > 0
    else:
        assert json.loads(printed)["design"] == json.loads(saved)["winner"]["design"]


def test_a_file_name_too_long_for_the_file_system_is_one_line(tmp_path):
    """A 300-byte name was an internal error ("OSError: File name too long ... this is a
    bug") on every output flag and on --study and --profile: an output's checks name the
    flag and the part, any other path the backstop."""
    long = "a" * 300
    question = ("--goal", "cost", "--rps", "5", "--design", "baseline-h100", "--model", "llama2-70b",
                "--duration", "20", "--no-verify")
    line = assert_one_line_error(*cli(*question, "--report", tmp_path / long / "x.html"))
    assert line == (f"error: --report: '{'a' * 40}...' is a name of 300 bytes, over the 255 a file system allows; "
                    f"give a shorter name")
    assert_one_line_error(*cli(*question, "--study", tmp_path / f"{long}.db"),
                          "bytes): File name too long; give a shorter file name (at most 255 bytes a name)")
    assert_one_line_error(*cli("autoscale", "--profile", tmp_path / f"{long}.csv", "--design", "baseline-h100"),
                          "bytes): File name too long")


def test_an_output_named_dash_is_refused_not_written_as_a_file(tmp_path):
    """`perf predict --out -` wrote a file named '-' ("wrote 1 rows to -"), where the usual
    convention reads standard output."""
    points = tmp_path / "points.csv"
    points.write_text("model,hardware,tensor_parallel,prompt_size,batch_size\nllama2-70b,a100-80gb,8,100,1\n")
    line = assert_one_line_error(*cli("perf", "predict", "--points", points, "--out", "-", cwd=tmp_path))
    assert line == "error: --out '-': give a file name, or /dev/stdout for standard output"
    assert not (tmp_path / "-").exists()


def test_long_paths_and_dash_for_sweep_out_and_temporary_names(tmp_path):
    """Helper 68: `sweep --out` had neither check (a 300-byte name reached the backstop,
    `--out -` made a directory named '-'); a path of short names longer than PATH_MAX was
    told to shorten its names; a 249-byte name, which the file system allows, failed as its
    temporary file's name grew past 255 bytes."""
    spec = tmp_path / "s.toml"
    spec.write_text('rps = [5]\nfamilies = ["baseline-h100"]\nduration_s = 10\nverify = false\n')
    line = assert_one_line_error(*cli("sweep", spec, "--out", tmp_path / ("a" * 300)))
    assert line.startswith("error: --out: 'aaaa") and "is a name of 300 bytes" in line
    assert_one_line_error(*cli("sweep", spec, "--out", "-", cwd=tmp_path),
                          "--out '-': give a directory (a sweep writes three files there)")
    assert not (tmp_path / "-").exists()
    deep = tmp_path.joinpath(*["b" * 200] * 25, "x.csv")
    points = tmp_path / "points.csv"
    points.write_text("model,hardware,tensor_parallel,prompt_size,batch_size\nllama2-70b,a100-80gb,8,100,1\n")
    assert_one_line_error(*cli("perf", "predict", "--points", points, "--out", deep), "--out: a path of ",
                          "bytes, over the 4,096 this system allows; give a shorter path")
    name = tmp_path / ("c" * 245 + ".csv")
    code, out, err = cli("perf", "predict", "--points", points, "--out", name)
    assert code == 0 and name.read_text().startswith("model,hardware"), err



@pytest.fixture(scope="module")
def two_family_answer():
    """`provision --json` on splitwise-hh and baseline-h100 (its text)."""
    code, out, err = cli("--goal", "cost", "--rps", "5", "--design", "splitwise-hh", "--design", "baseline-h100",
                         "--model", "llama2-70b", "--duration", "20", "--no-verify", "--json")
    assert code == 0, err
    return out


@pytest.mark.parametrize("family, key, value, why", [
    ("splitwise-hh", "prompt_machines", 2.5, "key 'prompt_machines' is 2.5, not an integer"),   # ran as 2
    ("splitwise-hh", "prompt_machines", True, "key 'prompt_machines' is True, not an integer"),   # ran as 1
    ("splitwise-hh", "prompt_machines", "4", "key 'prompt_machines' is '4', not an integer"),
    ("splitwise-hh", "token_machines", None, "lacks key 'token_machines'"),   # was "(got 0)"
    ("baseline-h100", "token_machines", 5, "baseline-h100 has one pool of mixed machines: token_machines must be "
                                           "0 (got 5)"),   # billed 13 machines for 8
    ("baseline-h100", "prompt_machine", "dgx-a100", "baseline-h100 runs dgx-h100 machines, not dgx-a100 "
                                                    "(prompt_machine)"),
])
def test_a_hand_edited_design_is_refused_not_coerced(tmp_path, two_family_answer, family, key, value, why):
    """Helper 70: --from-result read a design's values with int() and bool() and never
    checked it against its family: 2.5 machines ran as 2, a baseline's five token machines
    were billed, an H100 family ran A100 machines under its name."""
    answer = json.loads(two_family_answer)
    design = next(b["design"] for b in answer["best"] if b["design"]["family"] == family)
    if value is None:
        del design[key]
    else:
        design[key] = value
    saved = tmp_path / "edited.json"
    saved.write_text(json.dumps(answer))
    assert_one_line_error(*cli("simulate", "--from-result", saved, "--family", family),
                          f"result JSON design of {family} ", why, "give the output of `provision --json`")


@pytest.mark.parametrize("url", ["sqlite+pysqlite:///runs.db", "SQLite:///runs.db"])
def test_a_study_url_naming_a_driver_is_the_same_file(tmp_path, url):
    """`sqlite+pysqlite:///f.db` passed the checks `sqlite:///f.db` gets: the report
    replaced the study database after the search, and another application's database was
    taken over."""
    r = cli("--goal", "cost", "--rps", "5", "--duration", "20", "--design", "splitwise-hh", "--no-verify",
            "--study", url, "--report", "runs.db", cwd=tmp_path)
    assert_one_line_error(*r, "--report 'runs.db' is also the --study database")
    assert list(tmp_path.iterdir()) == []


def test_an_output_keeps_the_mode_of_the_file_it_replaces_and_the_umask(tmp_path):
    """Every output was chmod 0644: a private file overwritten with --force became
    world-readable, and a new file ignored the umask."""
    from provisioner.files import write_output

    old = tmp_path / "private.csv"
    old.write_text("x\n")
    old.chmod(0o600)
    write_output(old, "y\n", force=True)
    assert old.read_text() == "y\n" and (old.stat().st_mode & 0o777) == 0o600
    mask = os.umask(0o077)
    try:
        write_output(tmp_path / "new.csv", "z\n")
    finally:
        os.umask(mask)
    assert (tmp_path / "new.csv").stat().st_mode & 0o777 == 0o600


def test_an_output_ending_in_a_slash_is_no_file(tmp_path):
    from provisioner import ProvisionerError
    from provisioner.files import write_output

    with pytest.raises(ProvisionerError, match="ends in '/' but is no folder"):
        write_output(str(tmp_path / "outdir") + "/", "x")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("args", [["--goal", "cost", "--rps", "5", "--report", "outdir/"],
                                  ["perf", "predict", "--points", "p.csv", "--out=pp.csv/"],
                                  ["simulate", "--design", "baseline-h100", "--machines", "1", "--timeline", "t/"]])
def test_an_output_file_typed_with_a_trailing_slash_is_refused(tmp_path, args):
    """The slash meant a folder; click's Path dropped it and the page was written as a
    file named 'outdir' (exit 0)."""
    flag = next(a for a in args if a.startswith("--") and a.split("=")[0] in ("--report", "--out", "--timeline"))
    assert_one_line_error(*cli(*args, cwd=tmp_path), f"{flag.split('=')[0]} '", "ends in '/' but is no folder")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("args, needle", [
    (["simulate", "--design", "splitwise-hh", "--prompt-machines", "2", "--token-machines", "1", "--workload",
      "/dev/zero"], "cannot read trace '/dev/zero': it is a device, not a file"),
    (["cloud", "--inventory", "/dev/zero", "--rps", "1"], "--inventory: cannot read '/dev/zero' (it is a device"),
    (["simulate", "--from-result", "/dev/zero"], "--from-result '/dev/zero' cannot be read (it is a device"),
    (["sweep", "/dev/zero", "--out", "zz"], "'/dev/zero': cannot read it (it is a device"),
    (["autoscale", "--profile", "/dev/zero", "--design", "baseline-h100"], "cannot read the rate profile (it is a device"),
    (["simulate", "--design", "splitwise-hh", "--prompt-machines", "2", "--token-machines", "1", "--model", "llama2-70b",
      "--latency-profile", "/dev/zero"], "--latency-profile '/dev/zero': cannot read it (it is a device"),
    (["perf", "predict", "--points", "/dev/zero", "--out", "o.csv"], "--points '/dev/zero': cannot read it (it is a device"),
    (["report", "/dev/zero", "--out", "o.html"], "cannot be read (it is a device"),
])
def test_an_endless_device_as_an_input_is_one_line(tmp_path, args, needle):
    """/dev/zero was read until memory ran out, then called 'out of memory while simulating'."""
    assert_one_line_error(*cli(*args, cwd=tmp_path), needle)
    assert list(tmp_path.iterdir()) == []


def test_perf_predict_reads_its_points_from_a_pipe(tmp_path):
    """--points /dev/stdin or <(...) was 'no such file', where every other input reads a pipe."""
    read, write = os.pipe()
    os.write(write, b"model,hardware,tensor_parallel,prompt_size,batch_size\nllama2-70b,h100-80gb,8,1000,1\n")
    os.close(write)
    try:
        code, _, err = cli("perf", "predict", "--points", f"/dev/fd/{read}", "--out", "o.csv", cwd=tmp_path)
    finally:
        os.close(read)
    assert code == 0, err
    assert (tmp_path / "o.csv").read_text().splitlines()[1].startswith("llama2-70b,h100-80gb,8,1000,1,")


def test_a_report_refused_at_the_end_still_prints_the_answer(tmp_path, monkeypatch):
    """A file made at the --report path during the run is kept without --force; the answer
    was lost with it (exit 2, nothing on stdout), after a search of maybe minutes."""
    import reports
    from provisioner import ProvisionerError

    def made_meanwhile(obj, path, **kw):
        raise ProvisionerError(f"--report '{path}' exists; pass --force to overwrite it")

    monkeypatch.setattr(reports, "write_report", made_meanwhile)
    code, out, err = cli("--goal", "cost", "--rps", "5", "--duration", "20", "--design", "splitwise-hh", "--no-verify",
                         "--json", "--report", "r.html", cwd=tmp_path)
    assert code == 2 and "exists; pass --force" in err
    assert json.loads(out)["winner"]["design"]["family"] == "splitwise-hh"


def test_a_trace_from_a_named_pipe_is_read_once_and_hashed_as_read(tmp_path):
    """The trace was opened a second time to hash it: a named pipe never finished, and a
    `<(...)` pipe recorded the SHA-256 of nothing."""
    import hashlib
    import threading

    body = ("arrival_s,prompt_tokens,output_tokens\n" + "".join(f"{i * 0.5},{100 + i},{5 + i % 3}\n"
                                                               for i in range(40))).encode()
    fifo = tmp_path / "trace.csv"
    os.mkfifo(fifo)
    writer = threading.Thread(target=lambda: fifo.write_bytes(body), daemon=True)
    writer.start()
    code, out, err = cli("simulate", "--design", "baseline-h100", "--machines", "2", "--workload", fifo, "--json")
    writer.join(timeout=5)
    assert code == 0, err
    assert json.loads(out)["workload_sha256"] == hashlib.sha256(body).hexdigest()
