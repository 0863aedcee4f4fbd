"""The command line: ``python -m numeq formats`` in its three output styles."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys

import pytest

FLOATING = ["fp32", "tf32", "bf16", "fp16", "e4m3fn", "e4m3", "e4m3fnuz", "e5m2", "e5m2fnuz", "e8m0fnu",
            "e3m2fn", "e2m3fn", "e2m1fn"]
INTEGERS = ["int8", "uint8", "int32"]
# max finite per FACTS.md s1 (and OCP MX v1.0 for FP6/FP4)
MAX_FINITE = {"fp16": 65504.0, "e4m3fn": 448.0, "e4m3": 240.0, "e4m3fnuz": 240.0, "e5m2": 57344.0,
              "e5m2fnuz": 57344.0, "e3m2fn": 28.0, "e2m3fn": 7.5, "e2m1fn": 6.0}


def run_cli(*args: str) -> str:
    r = subprocess.run([sys.executable, "-m", "numeq", *args], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""
    return r.stdout


def test_markdown_table():
    out = run_cli("formats")
    floating_table, integer_table = out.split("\n\n")[:2]  # floating formats, then integers
    rows = {}
    for line in floating_table.splitlines():
        if line.startswith("|") and not line.startswith("|---"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            rows[cells[0]] = cells
    header = rows.pop("format")
    assert "max finite" in header
    col = header.index("max finite")
    for name in FLOATING:
        assert name in rows, f"no row for {name}"
    for name, mx in MAX_FINITE.items():
        assert float(rows[name][col]) == mx, (name, rows[name][col])
    for name in INTEGERS:
        assert f"| {name} |" in integer_table
    assert "| int8 | 8 | yes | -128 | 127 |" in integer_table


def test_default_style_is_markdown():
    assert run_cli("formats") == run_cli("formats", "--as", "markdown")


def test_json():
    rows = json.loads(run_cli("formats", "--as", "json"))
    by_name = {r["format"]: r for r in rows}
    assert set(FLOATING + INTEGERS) <= set(by_name)
    for name, mx in MAX_FINITE.items():
        assert by_name[name]["max"] == mx
    assert by_name["bf16"]["max_bits"] == "0x7F7F"
    assert by_name["e4m3fn"]["nan_bits"] == "0x7F" and by_name["e4m3fn"]["inf_bits"] == "-"
    assert by_name["int8"]["min"] == -128 and by_name["uint8"]["max"] == 255 and by_name["int32"]["max"] == 2**31 - 1
    assert by_name["e4m3fnuz"]["negative_zero"] is False and by_name["e5m2"]["negative_zero"] is True


def test_csv():
    rows = list(csv.DictReader(io.StringIO(run_cli("formats", "--as", "csv"))))
    by_name = {r["format"]: r for r in rows}
    assert set(FLOATING + INTEGERS) <= set(by_name)
    for name, mx in MAX_FINITE.items():
        assert float(by_name[name]["max"]) == mx
    assert float(by_name["e4m3fn"]["min_subnormal"]) == 2.0**-9
    assert by_name["e8m0fnu"]["min_subnormal"] == ""  # no subnormals


def test_platforms_list_and_report():
    listing = run_cli("platforms")
    assert "trainium.trn1" in listing and "nvidia.h100" in listing and "assumptions)" in listing
    report = run_cli("platforms", "trainium.trn1[pe_order=pairwise]")
    assert report.startswith("trainium.trn1[pe_order=pairwise]\n")
    assert "assumption  pe_order = pairwise  (alternatives: sequential, pairwise, fused)" in report
    assert "documented  matmul: one nc_matmul contracts at most 128 rows" in report
    r = subprocess.run([sys.executable, "-m", "numeq", "platforms", "trainium.trn1[pe_order=zigzag]"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "valid: sequential, pairwise, fused" in r.stderr


def test_no_command_prints_help():
    assert "formats" in run_cli()


@pytest.mark.parametrize("args", [["formats", "--as", "xml"], ["nonsense"]])
def test_bad_arguments_exit_nonzero(args):
    r = subprocess.run([sys.executable, "-m", "numeq", *args], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "usage" in r.stderr
