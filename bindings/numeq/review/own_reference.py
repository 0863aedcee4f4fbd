"""A review against the author's own reference: a function (numpy, torch, ...) that says what the
kernel should compute, beside numeq's catalogue operation.

``numeq review FILE.py::KERNEL ... --reference REF.py::FUNC`` (``review_kernel(reference=FUNC)``)
calls FUNC with the operation's inputs by role (``x``, ``gamma``, ``a``, ``b`` ...: float64 arrays
of their values, as keywords) and those of the operation's parameters its signature names (``eps``,
``causal`` ...), and reads its result as float64 values of the operation's output shape. Rounded once
into the output format, it is the author's definition of the right answer, so the review says:

- whether numeq's operation is that definition (every element within one ulp of the output format:
  two float64 computations of one value round to the same or adjacent values); where it is not, the
  other verdicts judge by numeq's operation and say nothing of the author's;
- whether the kernel's own math (``Run.exact()``: its dataflow without the hardware's roundings) is
  that definition: a difference is a mistake in the algorithm, whatever the precision; agreement
  leaves only precision, which the precision flow accounts for;
- how far the kernel's output lies from it, in ulps of the output format.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable

import numpy as np

from ..verdicts import _in_shape
from .findings import ReviewFinding

__all__ = ["call_reference", "reference_findings"]


def call_reference(fn: Callable, inputs: dict[str, np.ndarray], params: dict[str, Any], shape: tuple) -> np.ndarray:
    """FUNC's result on the operation's inputs (keywords by role) and the parameters it names, as
    float64 values of ``shape`` (an output differing only by axes of length 1 is read in it)."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        raise ValueError(f"reference: {fn!r} is not a function numeq can call with keywords") from None
    takes_any = any(p.kind is p.VAR_KEYWORD for p in signature.parameters.values())
    names = set(signature.parameters)
    missing = [n for n in inputs if n not in names and not takes_any]
    if missing:
        raise ValueError(f"reference: {getattr(fn, '__name__', fn)} takes ({', '.join(signature.parameters)}); it is "
                         f"called with the operation's inputs by role: {', '.join(inputs)} (no parameter "
                         f"{', '.join(missing)})")
    kwargs = {k: np.asarray(v, dtype=np.float64) for k, v in inputs.items()}
    kwargs.update({k: v for k, v in params.items() if k in names or takes_any})
    try:
        result = fn(**kwargs)
    except Exception as e:  # the author's code: its failure is said as theirs, not as numeq's traceback
        raise ValueError(f"reference: {getattr(fn, '__name__', fn)} raised {type(e).__name__}: {e}") from e
    if hasattr(result, "detach"):  # a torch tensor: its host values
        result = result.detach().cpu()
    try:
        values = np.asarray(result, dtype=np.float64)
    except (TypeError, ValueError) as e:
        raise ValueError(f"reference: {getattr(fn, '__name__', fn)} returned {type(result).__name__}, not an array of "
                         f"numbers ({e})") from None
    values = _in_shape(values, tuple(shape))
    if values.shape != tuple(shape):
        raise ValueError(f"reference: {getattr(fn, '__name__', fn)} returned shape {values.shape}; the operation's "
                         f"output is {tuple(shape)}")
    return values


def _apart(x: np.ndarray, y: np.ndarray, out: str) -> np.ndarray:
    """Per element, |x - y| in ulps of ``out`` at y (both values of ``out``); NaN matches NaN, an
    infinity itself; any other mismatch of special values is infinitely apart."""
    from ..tolerances import ulp_of

    with np.errstate(invalid="ignore", over="ignore"):
        d = np.abs(x - y) / ulp_of(y, out)
    same = (x == y) | (np.isnan(x) & np.isnan(y))
    return np.where(same, 0.0, np.where(np.isfinite(d), d, np.inf))


def _worst(d: np.ndarray) -> tuple[int, ...]:
    """The index of the largest distance."""
    return tuple(int(j) for j in np.unravel_index(int(np.argmax(d)), d.shape))


def reference_findings(name: str, mine: np.ndarray, op: Any, out: str, run: Any) -> tuple[list[ReviewFinding], list[str]]:
    """The findings of the author's reference ``mine`` (float64, the op's shape) named ``name``:
    against numeq's operation ``op``, against the kernel's own math (``run.exact()``) and against
    its output; and notes. Every comparison is in the output format ``out``, rounded once."""
    from .. import round as _round

    evidence = f"the author's reference {name}"
    theirs = np.asarray(_round(mine, out), dtype=np.float64)
    findings: list[ReviewFinding] = []
    notes: list[str] = []
    n = theirs.size
    numeq_ref = np.asarray(op.reference(), dtype=np.float64).reshape(theirs.shape)
    d = _apart(theirs, numeq_ref, out)
    off = int(np.count_nonzero(d > 1))
    if off == 0:
        findings.append(ReviewFinding("preserved_behaviour", "pass", "own_reference", name,
                                      f"your reference {name} is numeq's {op.signature}: all {n} elements, rounded "
                                      f"into {out}, within one ulp", evidence))
    else:
        i = _worst(d)
        findings.append(ReviewFinding("preserved_behaviour", "warn", "own_reference", name,
                                      f"your reference {name} and numeq's {op.signature} differ at {off} of {n} "
                                      f"elements beyond one ulp of {out} (worst at {i}: yours {theirs[i]:.9g}, "
                                      f"numeq's {numeq_ref[i]:.9g}): the other verdicts judge by numeq's operation; "
                                      "check --op and its --param", evidence))
    if run is None or not run.completed:
        return findings, notes
    from ..nki import Unsupported

    try:
        exact = np.asarray(run.exact(), dtype=np.float64).reshape(theirs.shape)
    except (ValueError, Unsupported) as e:  # what Run.exact() does not follow, by line
        notes.append(f"the kernel's own math could not be judged against your reference: {e}")
        return findings, notes
    kernel_math = np.asarray(_round(exact, out), dtype=np.float64)
    d = _apart(kernel_math, theirs, out)
    off = int(np.count_nonzero(d > 1))
    if off:
        i = _worst(d)
        findings.append(ReviewFinding("preserved_behaviour", "fail", "own_reference_math", name,
                                      f"the kernel's own math (its dataflow without the hardware's roundings) differs "
                                      f"from your reference {name} at {off} of {n} elements beyond one ulp of {out} "
                                      f"(worst at {i}: the kernel's math {kernel_math[i]:.9g}, yours {theirs[i]:.9g}): "
                                      "a difference in the algorithm, whatever the precision",
                                      f"{evidence}; numeq.nki Run.exact()"))
    else:
        findings.append(ReviewFinding("preserved_behaviour", "pass", "own_reference_math", name,
                                      f"the kernel's own math is your reference {name} on all {n} elements (rounded "
                                      f"into {out}, within one ulp): what its output loses beyond that is precision "
                                      "(the precision flow below)", f"{evidence}; numeq.nki Run.exact()"))
    got = np.asarray(run.outputs, dtype=np.float64).reshape(theirs.shape)
    d = _apart(got, theirs, out)
    finite = d[np.isfinite(d)]
    notes.append(f"the kernel's output against your reference {name}: largest {float(finite.max()) if finite.size else 0:.3g} "
                 f"ulps of {out} (at {_worst(d)}), median {float(np.median(finite)) if finite.size else 0:.3g}; "
                 f"{int(np.count_nonzero(~np.isfinite(d)))} special values differ")
    return findings, notes
