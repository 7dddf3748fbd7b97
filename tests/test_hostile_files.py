"""Files a careless or hostile user gives the provisioner: each is read right (a BOM,
UTF-16 from PowerShell) or refused in one line naming the file and the fix, exit 2."""

from __future__ import annotations

from test_hostile_input import assert_one_line_error, cli


def test_a_rate_profile_with_a_field_past_the_csv_limit_is_one_line(tmp_path):
    """csv.Error (a field over 131,072 characters) was an internal error (exit 1)."""
    profile = tmp_path / "rate.csv"
    profile.write_text("time_s,rps\n0,5\n600," + "1" * 200_000 + "\n")
    assert_one_line_error(*cli("autoscale", "--profile", profile, "--design", "baseline-a100"),
                          f"{profile}: not a valid CSV file", "field larger than field limit")
