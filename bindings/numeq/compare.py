"""Verdicts: a device's output judged against an operation's exact result and a platform's
bit-exact emulation and bound (numeq.ops)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import _core
from ._arrays import _FORMAT_OF_DTYPE, _array, _check_int, _check_str
from .ops import Op, Tolerance, _kind

__all__ = ["Verdict", "WorstElement", "compare"]


@dataclass(frozen=True)
class WorstElement:
    """One element of the output: where it is, what the device gave, what the platform's
    emulation and the exact reference say, the bound, the error |got - exact| and the
    difference from the reference in ulps of the output format."""

    index: tuple[int, ...]
    got: float
    emulated: float
    reference: float
    exact: float
    bound: float
    error: float
    ulps: float
    violation: bool


@dataclass(frozen=True)
class Verdict:
    """The outcome of ``numeq.compare``: ``passed`` when no element lies beyond the platform's bound
    (and every special value is the platform's own); counts of bit-exact elements (equal to the
    emulation), of elements within the bound, and of violations, of which ``special_mismatches``
    (NaN or +-Inf, or an infinite bound, where the device's value is not the platform's own) and
    ``not_in_format`` (values the op's output format does not hold); the worst elements (violations
    first, special values and foreign values before the rest, then by error / bound, descending);
    the bound as tolerances; a one-line diagnosis. ``bool(verdict)`` is ``passed``."""

    passed: bool
    elements: int
    bit_exact: int
    within_bound: int
    violations: int
    worst_error_over_bound: float
    max_ulps: float
    failure_probability: float
    diagnosis: str
    tolerance: Tolerance
    worst: list[WorstElement] = field(default_factory=list)
    special_mismatches: int = 0
    not_in_format: int = 0

    def __bool__(self) -> bool:
        return self.passed

    def __str__(self) -> str:
        lines = [f"{'PASS' if self.passed else 'FAIL'}: {self.diagnosis}",
                 f"  elements {self.elements}, bit-exact {self.bit_exact}, within bound {self.within_bound}, "
                 f"violations {self.violations} (special values {self.special_mismatches}, outside the output "
                 f"format {self.not_in_format}); worst error/bound {self.worst_error_over_bound:.3g}, "
                 f"max {self.max_ulps:.3g} ulps from the reference",
                 f"  bound as tolerance: max {self.tolerance.max_ulps:.3g} ulps, rtol={self.tolerance.rtol:.3g} "
                 f"atol={self.tolerance.atol:.3g}"]
        for w in self.worst:
            lines.append(f"  {'!' if w.violation else ' '} {w.index}: got {w.got!r}, emulated {w.emulated!r}, "
                         f"reference {w.reference!r}, bound {w.bound:.3g}, error {w.error:.3g}, {w.ulps:+.3g} ulps")
        return "\n".join(lines)


def _actual_values(actual: Any) -> np.ndarray:
    """C-order float64 values of a device's output, or TypeError / ValueError naming ``actual``.

    Accepted: real float arrays (float16/32/64, and wider floats whose values float64 holds),
    ml_dtypes arrays (bfloat16, float8_*, ...), integer arrays (their values, when float64 holds
    them exactly: an integer output is judged as the number it is, and it passes only where the
    op's output format holds that number), Python scalars and (nested) lists of reals. Refused:
    complex values (the imaginary part would be dropped), booleans, strings, bytes, datetimes and
    timedeltas, objects, structured arrays and masked arrays (the mask would be dropped)."""
    accepted = ("accepted: real float or integer numpy arrays, ml_dtypes arrays, Python scalars or lists of "
                "real numbers")
    if isinstance(actual, np.ma.MaskedArray):
        raise TypeError(f"actual: masked arrays are not accepted (the mask would be dropped); pass the data "
                        f"with masked elements filled or compare the unmasked part; {accepted}")
    if isinstance(actual, (str, bytes, complex, bool, np.bool_)):
        raise TypeError(f"actual: expected real values, got {type(actual).__name__}; {accepted}")
    try:
        a = np.asarray(actual)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"actual: cannot be read as an array of reals ({exc}); {accepted}") from None
    dt = a.dtype
    if dt.names is not None or dt.kind not in "fiuV" or (dt.kind == "V" and dt not in _FORMAT_OF_DTYPE):
        what = {"c": "complex", "b": "boolean", "U": "string", "S": "bytes", "M": "datetime", "m": "timedelta",
                "O": "object", "V": "structured or void"}.get(dt.kind, str(dt))
        raise TypeError(f"actual: expected real values, got {what} dtype {dt}; {accepted}")
    if dt.kind in "iu":
        values = a.astype(np.float64)
        with np.errstate(invalid="ignore"):
            if dt.itemsize >= 8 and not np.array_equal(values.astype(dt), a):
                raise ValueError(f"actual: {dt} values beyond 2^53 are not exact in float64; {accepted}")
        return np.asarray(values, order="C")
    if dt == np.float32:
        return np.asarray(a, order="C")  # widened in C++ in one pass: no float64 copy here
    values = np.asarray(a.astype(np.float64), order="C")  # keeps a 0-d result 0-d
    if dt.kind == "f" and dt.itemsize > 8 and not np.array_equal(values, a, equal_nan=True):
        raise ValueError(f"actual: {dt} values are not exact in float64; {accepted}")
    return values


def compare(actual: Any, op: Op, platform: str, *, kind: str = "deterministic", lam: float = 6.0,
            worst: int = 5) -> Verdict:
    """Judge ``actual`` (a device's output, of the op's result shape) against ``op`` on ``platform``:
    it passes when every element equals the platform's emulation or lies within its bound of the
    exact result. Where the emulation is NaN or +-Inf, or its bound is infinite, only the platform's
    own special value passes (NaN matches any NaN); a value the op's output format does not hold
    (fp32 results against a bf16 op) never passes, and the diagnosis says so. ``actual``: see
    ``_actual_values`` (real arrays, ml_dtypes, integers judged as their values, scalars, lists)."""
    if not isinstance(op, Op):
        raise TypeError(f"op: expected a numeq.ops.Op (numeq.ops.matmul(...), ...), got {type(op).__name__}")
    _check_str(platform, "platform")
    kind, lam = _kind(kind, lam)
    worst = _check_int(worst, "worst", 0, 2**31 - 1)
    values = _actual_values(actual)
    d = _core.cases_compare(values, op._op, platform, kind, lam, int(worst))
    return Verdict(
        passed=bool(d["passed"]),
        elements=int(d["elements"]),
        bit_exact=int(d["bit_exact"]),
        within_bound=int(d["within_bound"]),
        violations=int(d["violations"]),
        special_mismatches=int(d["special_mismatches"]),
        not_in_format=int(d["not_in_format"]),
        worst_error_over_bound=float(d["worst_error_over_bound"]),
        max_ulps=float(d["max_ulps"]),
        failure_probability=float(d["failure_probability"]),
        diagnosis=str(d["diagnosis"]),
        tolerance=Tolerance(**d["tolerance"]),
        worst=[WorstElement(**w) for w in d["worst"]],
    )
