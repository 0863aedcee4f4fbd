"""Bad input to every public function: a documented error that names the parameter, or the
correct result; never a crash, a raw pybind11 / numpy / C++ message, or a silently wrong value.

The matrix is every public entry point (ROWS; a new public function without a row fails
test_every_public_function_has_a_row) times every argument it takes, times the bad values of
that argument's kind: for arrays NaN, Inf, empty, 0-d, huge values, negative strides,
non-contiguous views, wrong dtypes (strings, objects, ragged lists, datetimes, structured),
complex, masked, wrong shapes and integers beyond 2^53; for integers values beyond the C++ types,
floats, bools and strings; for strings unknown names, NUL bytes and non-strings; for flags and
reals non-bools, non-numbers.

Expected, per case:
  * a raise of TypeError, ValueError or MemoryError whose message starts with the parameter's
    name (``"axis: ..."``; a JSON path such as ``"plan.reduction.size: ..."`` names the plan);
  * or a result, where the input is valid: a view with negative or non-unit strides must give
    the result of the same values in a fresh C-ordered copy (numpy's), and a numpy integer the
    result of the same Python int.
Values that no function may take (complex, masked, strings, bools or floats for integers,
unknown names) must raise.

The matrix runs in a worker subprocess (under a 6 GiB address-space limit, so a size taken from
an argument fails as an allocation, not by exhausting the machine): a crash or a hang of one case
is that case's failure and the worker restarts after it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bad_input_matrix import NOT_ROWS, XFAIL, _cases, _public_callables, _rows, run_case


# ---------------------------------------------------------------------------------------------
# Worker (a subprocess, so that a crash is a failed case) and the pytest side
# ---------------------------------------------------------------------------------------------
def _worker(start: int, progress: str) -> None:
    import resource

    limit = 6 << 30
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    cases = _cases()
    with open(progress, "a", buffering=1) as out:
        for i in range(start, len(cases)):
            out.write(json.dumps({"start": i}) + "\n")
            try:
                outcome = run_case(*cases[i])
            except Exception as e:  # noqa: BLE001 - a failure of the checker itself
                outcome = f"checker raised {type(e).__name__}: {e}"
            out.write(json.dumps({"done": i, "outcome": outcome}) + "\n")


CASE_TIMEOUT_S = 120


def _run_matrix(progress: Path) -> dict[int, str]:
    results: dict[int, str] = {}
    n = len(_cases())
    start = 0
    env = dict(os.environ)
    while start < n:
        proc = subprocess.Popen([sys.executable, __file__, "--worker", str(start), str(progress)], env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        current, last_change = None, time.monotonic()
        seen = 0
        while True:
            finished = proc.poll() is not None
            # Complete lines only: the worker may be half-way through writing the last one.
            text = progress.read_text() if progress.exists() else ""
            lines = text[:text.rfind("\n") + 1].splitlines()
            for line in lines[seen:]:
                rec = json.loads(line)
                if "start" in rec:
                    current = rec["start"]
                else:
                    results[rec["done"]] = rec["outcome"]
                    current = None
                last_change = time.monotonic()
            seen = len(lines)
            if finished:
                break
            if time.monotonic() - last_change > CASE_TIMEOUT_S:
                proc.kill()
                proc.wait()
                if current is not None:
                    results[current] = f"hang: no result after {CASE_TIMEOUT_S} s"
                break
            time.sleep(0.05)
        if current is not None and current not in results:
            err = proc.stderr.read().decode(errors="replace")[-500:] if proc.stderr else ""
            results[current] = f"crash: worker exited with {proc.returncode}: {err}"
        if proc.stderr:
            proc.stderr.close()
        done = [i for i in results]
        start = max(done) + 1 if done else n
        if current is None and proc.returncode not in (0, None) and start < n and start not in results:
            results[start] = f"crash: worker exited with {proc.returncode} before case {start}"
            start += 1
        progress.unlink(missing_ok=True)
    return results


@pytest.fixture(scope="module")
def matrix(tmp_path_factory) -> dict[tuple[str, str, str], str]:
    progress = tmp_path_factory.mktemp("bad_inputs") / "progress.jsonl"
    results = _run_matrix(progress)
    return {case: results.get(i, "no result") for i, case in enumerate(_cases())}


def _params():
    for case in _cases():
        row, param, label = case
        reason = XFAIL.get(case) or XFAIL.get((row, param, "*")) or XFAIL.get((row, "*", label))
        marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
        yield pytest.param(case, id=f"{row}-{param or 'base'}-{label}", marks=marks)


@pytest.mark.parametrize("case", list(_params()))
def test_bad_input(matrix, case):
    outcome = matrix[case]
    assert outcome == "ok", outcome


def test_every_public_function_has_a_row():
    rows = set(_rows())
    missing = [n for n in _public_callables() if n not in rows and n not in NOT_ROWS]
    assert not missing, f"public functions without a row in the bad-input matrix: {missing}"


def test_every_parameter_has_a_column():
    """Every keyword of a row's function is either in its kinds or deliberately left out."""
    import inspect

    left_out = {"fn", "op", "candidates", "inputs", "write", "dtype", "names", "step_output", "requantize",
                "plan", "kwargs", "self", "data", "shape"}
    missing = []
    for row, (fn, _, params) in _rows().items():
        if getattr(fn, "__name__", "") == "<lambda>":
            continue
        try:
            sig = inspect.signature(fn)
        except (TypeError, ValueError):
            continue
        for name in sig.parameters:
            if name not in params and name not in left_out:
                missing.append(f"{row}:{name}")
    assert not missing, f"parameters the matrix does not vary: {missing}"


if __name__ == "__main__" and len(sys.argv) == 4 and sys.argv[1] == "--worker":
    _worker(int(sys.argv[2]), sys.argv[3])
