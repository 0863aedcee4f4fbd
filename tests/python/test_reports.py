"""The default tolerance tables in reports/ are what ``numeq tolerances`` computes: a few of their
problems are computed again here with the configuration the file records and compared row by row
(counts exactly, figures to 1e-12 relative), and the files agree with each other."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest

from numeq import tolerance_table
from numeq.catalogue import Problem

REPORTS = Path(__file__).resolve().parents[2] / "reports"
TABLE = REPORTS / "tolerances.json"


def load() -> dict:
    if not TABLE.exists():
        pytest.fail(f"{TABLE} is missing: run `python3 -m numeq tolerances` from the repository root")
    return json.loads(TABLE.read_text())


def config_of(meta: dict) -> tolerance_table.SweepConfig:
    c = dict(meta["config"])
    c["shapes"] = {k: tuple(v) for k, v in c["shapes"].items()}
    for key in ("ops", "formats", "ks", "gpus", "others", "inputs"):
        c[key] = tuple(c[key])
    return tolerance_table.SweepConfig(**c)


def same(a, b, path: str = "") -> None:
    if isinstance(a, dict):
        assert isinstance(b, dict) and set(a) == set(b), f"{path}: keys {sorted(set(a) ^ set(b))}"
        for k in a:
            same(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b), f"{path}: lengths"
        for i, (x, y) in enumerate(zip(a, b)):
            same(x, y, f"{path}[{i}]")
    elif isinstance(a, float) or isinstance(b, float):
        x, y = float(a), float(b)
        assert (math.isnan(x) and math.isnan(y)) or x == y or abs(x - y) <= 1e-12 * max(abs(x), abs(y)), \
            f"{path}: {x!r} != {y!r}"
    else:
        assert a == b, f"{path}: {a!r} != {b!r}"


def json_clean(rows: list[dict]) -> list[dict]:
    # As render_json writes them (non-finite numbers as strings), without the timings.
    data = json.loads(tolerance_table.render_json(rows, {}))["rows"]
    return [{k: v for k, v in r.items() if k != "elapsed_s"} for r in data]


@pytest.mark.parametrize("op,fmt,k", [("sum", "bf16", 128), ("matmul", "bf16", 128), ("rmsnorm", "fp16", 128)])
def test_reports_regenerate(op: str, fmt: str, k: int) -> None:
    data = load()
    config = config_of(data["meta"])
    problem = next(p for p in tolerance_table.problems(config) if (p.op, p.in_fmt, p.k) == (op, fmt, k))
    assert isinstance(problem, Problem)
    stored = [{kk: v for kk, v in r.items() if kk != "elapsed_s"} for r in data["rows"] if r["problem"] == problem.text()]
    assert stored, f"no rows of {problem.text()} in {TABLE}"
    fresh = json_clean(tolerance_table.run_problem(problem, config))
    same(stored, fresh, problem.text())


def test_report_files_agree() -> None:
    data = load()
    rows = data["rows"]
    assert data["meta"]["rows"] == len(rows) > 0
    assert all(r["false_alarms"]["numeq"] == 0 for r in rows), "numeq's tolerance false-alarmed on held-out draws"
    # Where torch's default passes every correct held-out output, it catches no planted bug that
    # numeq's tolerance lets through (where it fails correct outputs too, its catches say nothing).
    looser = [(r["problem"], r["platform"], r["against"]) for r in rows
              if r["false_alarms"]["torch"] == 0 and r["detection"]["torch"][0] > r["detection"]["numeq"][0]]
    assert not looser, f"{len(looser)} rows where torch's default catches more planted bugs: {looser[:5]}"
    with open(REPORTS / "tolerances.csv", newline="") as f:
        table = list(csv.DictReader(f))
    assert [r["problem"] for r in table] == [r["problem"] for r in rows]
    markdown = (REPORTS / "tolerances.md").read_text()
    assert markdown.count("\n| ") == len(rows) + 1  # header and one line per row
    html = (REPORTS / "tolerances.html").read_text()
    assert "<svg" in html and rows[0]["problem"].split("(")[0] in html
