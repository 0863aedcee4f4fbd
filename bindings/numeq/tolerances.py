"""Tolerances as a function of the problem, not of one data set.

``numeq.tolerance(op, in_fmt, out, platforms, k=...)`` gives the tolerance that a platform's output
(or the difference between two platforms' outputs) needs for a catalogue problem, from numeq's
bound over draws of an input family: in ulps of the output, as per-element ``rtol``/``atol``
(``|x - y| <= atol + rtol * |y|``), and in the max-normalised form Neuron's tests use
(``|x - y| <= max_rtol * max|y|``). Each figure says which tier of the verdict ladder it comes from.

How it holds beyond the draws it was computed on. The tolerance is the smallest that covers the
*bound* (not the observed error) of every element of every calibration draw, with the bound's
computed part taken ``margin`` (default 2) times; the roundings into the output format, bounded
alike for any draw, are taken once. A fresh draw from the
same family is exchangeable with the calibration draws, so its own bound-derived requirement exceeds
the largest of D calibration draws' with probability at most 1 / (D + 1); and a correct output's
error lies below its bound (always for the deterministic bound; but for the stated failure
probability for the probabilistic one), typically several times below (benchmarks/README.md,
bench_bound_tightness: the worst observed error comes within 3x to 14x of the bound). The table of
``numeq tolerances`` checks held-out seeds and reports their false alarms, which must be 0.
"""

from __future__ import annotations

import warnings

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from . import _core, ops
from ._arrays import _check_int, _check_real, _check_str, _renamed
from ._op import Tolerance, _tier
from .catalogue import Built, Problem, out_for

__all__ = ["DEFAULT_MARGIN", "Requirement", "Tolerance", "fit", "requirement", "tier_of", "tolerance", "ulp_of"]


def ulp_of(values: np.ndarray, fmt: str) -> np.ndarray:
    """The spacing of ``fmt``'s values at each |value| (its ulp; the subnormal spacing below the
    normal range; 1 for integer formats): the unit the ``ulps`` figures count in.

    ``values``: float64 array; ``fmt``: a format name of ``numeq.formats()``.

    >>> numeq.tolerances.ulp_of(np.array([1.0, 3.0, 0.0]), "bf16").tolist()
    [0.0078125, 0.015625, 9.183549615799121e-41]
    """
    _check_str(fmt, "fmt")
    v = np.asarray(values, dtype=np.float64)
    # C++'s cases::ulp_of, the one the tolerance fit and cases::tolerance use.
    return _core.cases_ulp_of(np.ascontiguousarray(v.ravel()), fmt).reshape(v.shape)


@dataclass(frozen=True)
class Requirement:
    """What one draw requires: per element the allowance ``need`` (the bound on
    |judged - expected|) and the ``expected`` values it is measured against, with the ``judged``
    output of a correct device. Elements whose bound is not finite (an overflow, a non-finite
    input) are left out and counted in ``unbounded``; ``failure_probability``: of the bound, per
    check (0 for a worst-case bound). ``computed``: the part of ``need`` from the computation
    before the output cast (the platform's bound less its output cast's own rounding; both
    platforms' in the cross form), the part ``fit_tolerance``'s margin multiplies; None: all of
    ``need``.

    Example::

        >>> b = numeq.catalogue.build(numeq.catalogue.Problem("sum", "fp32", "fp32", k=32, shape=(3,)), "normal", 0)
        >>> r = numeq.tolerances.requirement(b, "numpy", kind="deterministic")
        >>> r.need.shape, r.unbounded, r.failure_probability
        ((3,), 0, 0.0)
    """

    need: np.ndarray
    expected: np.ndarray
    judged: np.ndarray
    unbounded: int
    failure_probability: float
    computed: np.ndarray | None = None


def _per_element_failure(failure_probability: float, n: int) -> float:
    # The check's failure probability spread over its n elements (a union bound).
    return failure_probability / max(1, n)


def requirement(built: Built, platform: str, against: str = "exact", *, kind: str = "probabilistic",
                failure_probability: float = 1e-6, lam: float | None = None) -> Requirement:
    """One draw's requirement. ``against="exact"``: the platform's output ``judged`` against the
    op's correctly rounded reference ``expected`` (the allowance is the platform's bound plus the
    reference's own distance to the exact result). Otherwise ``against`` names a second platform:
    its output is ``judged`` against ``platform``'s output (``expected``), with the sum of both
    bounds.

    ``built``: a ``numeq.catalogue.build`` result; ``platform``, ``against``: names of
    ``numeq.platforms()`` (``against`` may be ``"exact"``); ``kind``: ``"deterministic"`` or
    ``"probabilistic"``; ``failure_probability``: per check (all elements together); ``lam``:
    Higham and Mary's lambda in its place (None: the failure probability decides).

    >>> b = numeq.catalogue.build(numeq.catalogue.Problem("sum", "bf16", "fp32", k=256, shape=(8,)), "normal", 0)
    >>> r = numeq.tolerances.requirement(b, "trainium.trn2")
    >>> bool(np.all(np.abs(r.judged - r.expected) <= r.need))
    True
    """
    _check_str(platform, "platform")
    _check_str(against, "against")
    _check_str(kind, "kind", ops.KINDS)
    fp = _check_real(failure_probability, "failure_probability", finite=True)
    if kind == "probabilistic" and lam is None and not 0 < fp < 1:
        raise ValueError(f"failure_probability: {fp!r} is not in (0, 1); the probabilistic bound fails with at most "
                         "this probability per check")
    op = built.op
    n = int(np.asarray(op.reference()).size)
    per = _per_element_failure(fp, n) if kind == "probabilistic" and lam is None else 0.0
    how = {"kind": kind, "failure_probability": per}
    if lam is not None:
        how["lam"] = _check_real(lam, "lam", finite=True)
    emu = op.emulation(platform, **how)
    other = op.emulation(against, **how) if against != "exact" else None
    # The arithmetic (allowances, the reference's own error, what is left out) is C++'s
    # cases::requirement (family_tolerance.hpp), shared with C++ users.
    need, expected, judged, unbounded, probability, computed = _core.cases_requirement(
        op._op, np.ascontiguousarray(emu.values, dtype=np.float64), np.ascontiguousarray(emu.bound, dtype=np.float64),
        emu.failure_probability, None if other is None else np.ascontiguousarray(other.values, dtype=np.float64),
        None if other is None else np.ascontiguousarray(other.bound, dtype=np.float64),
        0.0 if other is None else other.failure_probability)
    return Requirement(need, expected, judged, int(unbounded), float(probability) if kind == "probabilistic" else 0.0,
                       computed)


# How far the tolerance sits above the largest computed need of the calibration draws. Parts of
# the need are computed exactly from the data (tf32 and other input casts: numeq's bound
# evaluates their contribution, it does not bound it), so for those a correct output's error
# reaches its need, and a fresh draw's need exceeds the largest of D draws' with probability
# 1 / (D + 1). The factor covers that draw-to-draw spread; the table's held-out draws measure
# whether it does (40 of 1785 rows false-alarmed at 1.0 with one calibration draw: fp32 GEMMs
# with tf32 inputs, worst 1.06x). The roundings into the output format are bounded alike for any
# draw, so the factor leaves them as they are (Requirement.computed): doubled, they let a bf16
# norm's unbiased variance (a 1.3-2% error at D = 24-40) through, where torch's default catches it.
DEFAULT_MARGIN = 2.0


def fit_tolerance(requirements: Sequence[Requirement], out: str, margin: float = DEFAULT_MARGIN) -> dict[str, float]:
    """The three forms covering every element of every requirement: ``ulps``, ``rtol``/``atol``
    (numeq's least-allowance fit, ``cases::tolerance``, over all draws' elements together, each
    element's need taken at the worst position in its binade; ``atol_rel``, the atol over the
    smallest draw's max|expected|, its form at any input scale) and ``max_rtol`` (the largest
    need / max|expected| of any draw).

    ``requirements``: from ``requirement``; ``out``: the output format; ``margin``: each
    element's computed part is multiplied by it, the output roundings are not
    (``DEFAULT_MARGIN``: why).

    >>> b = numeq.catalogue.build(numeq.catalogue.Problem("sum", "bf16", "fp32", k=64, shape=(4,)), "normal", 0)
    >>> sorted(numeq.tolerances.fit_tolerance([numeq.tolerances.requirement(b, "numpy")], "fp32"))
    ['atol', 'atol_rel', 'max_rtol', 'rtol', 'ulps']
    """
    m = _check_real(margin, "margin", finite=True)
    if m < 1:
        raise ValueError(f"margin: {m!r} is below 1 (the tolerance would not cover the calibration draws' own needs)")
    # C++'s cases::fit_tolerance (family_tolerance.hpp), the one implementation.
    draws = [(np.ascontiguousarray(r.need, dtype=np.float64), np.ascontiguousarray(r.expected, dtype=np.float64),
              None if r.computed is None else np.ascontiguousarray(r.computed, dtype=np.float64))
             for r in requirements]
    # atol_rel: the atol over the smallest draw's max|expected| (so every draw is covered);
    # atol_rel * max|y| is the absolute term at any input scale.
    return {k: float(v) for k, v in _core.cases_fit_tolerance(draws, out, m).items()}


def _platform_pair(platforms: Any) -> tuple[str, str]:
    if isinstance(platforms, str):
        return platforms, "exact"
    if isinstance(platforms, (tuple, list)) and len(platforms) in (1, 2) and all(isinstance(p, str) for p in platforms):
        return (platforms[0], "exact") if len(platforms) == 1 else (platforms[0], platforms[1])
    raise TypeError(f"platforms: expected a platform name or a (gpu_platform, trainium_platform) pair of names, got "
                    f"{platforms!r}")


def tolerance(op: str, in_fmt: str, out: str | None, platforms: Any, *, k: int, shape: Sequence[int] | None = None,
              inputs: str | Sequence[str] = "normal", kind: str = "probabilistic", failure_probability: float = 1e-6,
              lam: float | None = None, seeds: Sequence[int] = (0, 1), data: Any = None,
              margin: float = DEFAULT_MARGIN) -> Tolerance:
    """The tolerance of a catalogue problem for a platform or between two platforms.

    ``op``: a catalogue op (``numeq.catalogue.OPS``); ``in_fmt``: its input format
    (``numeq.catalogue.formats_for(op)``); ``out``: the output format (None: the catalogue's,
    ``numeq.catalogue.out_for``); ``platforms``: one platform name (its output against the exact
    result, correctly rounded) or a pair ``(gpu, trainium)`` (the second's output against the
    first's); ``k``: the reduction length (``numeq.catalogue.k_meaning(op)``); ``shape``: the other
    dimensions (default ``numeq.catalogue.default_shape(op)``); ``inputs``: a generator of
    ``numeq.ops.generators()``, a list of them, or ``"all"``; ``kind``: ``"probabilistic"`` (the
    default tier; fails with at most ``failure_probability`` per check, or per element at Higham
    and Mary's ``lam`` when given) or ``"deterministic"``;
    ``seeds``: the calibration draws per generator (default: those of ``numeq tolerances``' rows,
    so a row of the table and this call with its arguments give the same numbers); ``data``: an
    ``Op`` built on your own inputs
    (``numeq.ops.*``) to take the tolerance for those inputs instead of drawing; ``margin``: the
    factor above the calibration draws' largest need (``numeq.tolerances.DEFAULT_MARGIN``, 2: why
    there; 1 with ``data=`` gives the bound of exactly those inputs).

    >>> t = numeq.tolerance("matmul", "bf16", None, ("nvidia.h100", "trainium.trn2"), k=1024, shape=(4, 4))
    >>> t.against, t.tier, t.ulps >= 1
    ('trainium.trn2', 'probabilistic', True)
    >>> numeq.tolerance("softmax", "bf16", None, "trainium.trn2", k=256).tier   # its bound cannot fail
    'deterministic'

    """
    platform, against = _platform_pair(platforms)
    out = out_for(op, in_fmt) if out is None else out
    problem = Problem(op, in_fmt, out, _check_int(k, "k", 1, 1 << 24), tuple(shape) if shape else ())
    if isinstance(inputs, str):
        # "all": every generator that draws a meaningful problem of the op (its registry row's)
        gens = ops.spec(op).catalogue.generators if inputs == "all" else (inputs,)
    elif isinstance(inputs, (list, tuple)):
        gens = tuple(inputs)
    else:
        raise TypeError(f"inputs: expected a generator name, a list of them or 'all', got {type(inputs).__name__}; "
                        f"valid generators: {', '.join(ops.generators())}")
    for g in gens:
        _check_str(g, "inputs", ops.generators())
    if not gens and data is None:
        raise ValueError(f"inputs: no generator given; name at least one (valid: {', '.join(ops.generators())}, "
                         "or 'all'), or pass data=")
    if not isinstance(seeds, (list, tuple, range)):
        raise TypeError(f"seeds: expected a sequence of non-negative integers, got {type(seeds).__name__}")
    seeds = tuple(_check_int(s, "seeds", 0, (1 << 62)) for s in seeds)
    if not seeds and data is None:
        raise ValueError("seeds: at least one calibration seed is needed (or pass data=)")
    _check_str(kind, "kind", ops.KINDS)
    fp = _check_real(failure_probability, "failure_probability", finite=True)
    if kind == "probabilistic" and lam is None and not 0 < fp < 1:
        raise ValueError(f"failure_probability: {fp!r} is not in (0, 1); the probabilistic bound fails with at most "
                         "this probability per check")
    lam = None if lam is None else _check_real(lam, "lam", finite=True)
    m = _check_real(margin, "margin", finite=True)
    if m < 1:
        raise ValueError(f"margin: {m!r} is below 1 (the tolerance would not cover the calibration draws' own needs)")
    # Every draw, its emulations, requirements and the fit: one call into C++ (cases::family_tolerance
    # over the registry's catalogue draws, cases/registry.hpp).
    with _renamed({"platform": "platforms", "against": "platforms"}):
        if data is not None:
            if not isinstance(data, ops.Op):
                raise TypeError(f"data: expected a numeq.ops.Op built on your inputs, got {type(data).__name__}")
            gens = ("data",)
            f = _core.cases_family_tolerance_of(data._op, platform, against, kind, fp, lam, m)
        else:
            f = _core.cases_family_tolerance(op, in_fmt, out, list(problem.shape), problem.k, list(gens), list(seeds),
                                             platform, against, kind, fp, lam, m)
    return Tolerance(problem=problem.text(), platform=platform, against=against, inputs=gens, draws=f["draws"],
                     ulps=f["ulps"], rtol=f["rtol"], atol=f["atol"], max_rtol=f["max_rtol"], tier=f["tier"],
                     failure_probability=f["failure_probability"], unbounded=f["unbounded"], atol_rel=f["atol_rel"],
                     max_abs=f["max_abs"], rtol_only=f["rtol_only"], atol_only=f["atol_only"])


def tier_of(kind: str, failure_probability: float) -> str:
    """The verdict ladder's tier a bound of ``kind`` (``"probabilistic"`` or ``"deterministic"``)
    whose ``failure_probability`` per check is given is: ``"probabilistic"`` only where it may
    fail (an op whose probabilistic bound is its worst-case one, softmax's for one, is
    ``"deterministic"``).

    >>> numeq.tolerances.tier_of("probabilistic", 0.0), numeq.tolerances.tier_of("probabilistic", 1e-7)
    ('deterministic', 'probabilistic')
    """
    return _tier(kind, failure_probability)

def fit(requirements: Sequence[Requirement], out: str, margin: float = DEFAULT_MARGIN) -> dict[str, float]:
    """Deprecated name of ``fit_tolerance`` (one release): "fit" also meant fitting a platform
    (``numeq.fit_platform``). Warns, then calls ``fit_tolerance``."""
    warnings.warn("numeq.tolerances.fit is deprecated: use numeq.tolerances.fit_tolerance (the same function)",
                  DeprecationWarning, stacklevel=2)
    return fit_tolerance(requirements, out, margin)


fit.__deprecated_name_of__ = "fit_tolerance"  # type: ignore[attr-defined]


def _deprecated_name(module: str, name: str) -> Any:
    """numeq's and numeq.tolerances' names kept one release: ProblemTolerance, the name
    numeq.tolerance's result had, is numeq.Tolerance (warns). Anything else: AttributeError."""
    if name == "ProblemTolerance":
        warnings.warn(f"{module}.ProblemTolerance is deprecated: use numeq.Tolerance (the same type, which "
                      "numeq.tolerance and Op.tolerance both return)", DeprecationWarning, stacklevel=3)
        return Tolerance
    raise AttributeError(f"module {module!r} has no attribute {name!r}")


def __getattr__(name: str) -> Any:
    return _deprecated_name("numeq.tolerances", name)
