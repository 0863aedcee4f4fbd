"""Verdicts: a device's output judged against an operation's exact result and a platform's
bit-exact emulation and bound (numeq.ops)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import _core
from ._arrays import _array, _check_int, _check_str
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
    emulation), of elements within the bound, and of violations; the worst elements; the bound as
    tolerances; a one-line diagnosis. ``bool(verdict)`` is ``passed``."""

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

    def __bool__(self) -> bool:
        return self.passed

    def __str__(self) -> str:
        lines = [f"{'PASS' if self.passed else 'FAIL'}: {self.diagnosis}",
                 f"  elements {self.elements}, bit-exact {self.bit_exact}, within bound {self.within_bound}, "
                 f"violations {self.violations}; worst error/bound {self.worst_error_over_bound:.3g}, "
                 f"max {self.max_ulps:.3g} ulps from the reference",
                 f"  bound as tolerance: max {self.tolerance.max_ulps:.3g} ulps, rtol={self.tolerance.rtol:.3g} "
                 f"atol={self.tolerance.atol:.3g}"]
        for w in self.worst:
            lines.append(f"  {'!' if w.violation else ' '} {w.index}: got {w.got!r}, emulated {w.emulated!r}, "
                         f"reference {w.reference!r}, bound {w.bound:.3g}, error {w.error:.3g}, {w.ulps:+.3g} ulps")
        return "\n".join(lines)


def compare(actual: Any, op: Op, platform: str, *, kind: str = "deterministic", lam: float = 6.0,
            worst: int = 5) -> Verdict:
    """Judge ``actual`` (a device's output, of the op's result shape) against ``op`` on ``platform``:
    it passes when every element lies within the platform's bound of the exact result."""
    if not isinstance(op, Op):
        raise TypeError(f"op: expected a numeq.ops.Op (numeq.ops.matmul(...), ...), got {type(op).__name__}")
    _check_str(platform, "platform")
    kind, lam = _kind(kind, lam)
    worst = _check_int(worst, "worst", 0, 2**31 - 1)
    a = _array(actual, "actual")
    if a.dtype.kind not in "fiu" and a.dtype.names is None:
        try:
            a = a.astype(np.float64)  # ml_dtypes arrays
        except (TypeError, ValueError) as exc:
            raise TypeError(f"actual: expected a numeric array, got dtype {a.dtype}") from exc
    values = np.asarray(a, dtype=np.float64, order="C")  # keeps a 0-d result 0-d (ascontiguousarray would not)
    d = _core.cases_compare(values, op._op, platform, kind, lam, int(worst))
    return Verdict(
        passed=bool(d["passed"]),
        elements=int(d["elements"]),
        bit_exact=int(d["bit_exact"]),
        within_bound=int(d["within_bound"]),
        violations=int(d["violations"]),
        worst_error_over_bound=float(d["worst_error_over_bound"]),
        max_ulps=float(d["max_ulps"]),
        failure_probability=float(d["failure_probability"]),
        diagnosis=str(d["diagnosis"]),
        tolerance=Tolerance(**d["tolerance"]),
        worst=[WorstElement(**w) for w in d["worst"]],
    )
