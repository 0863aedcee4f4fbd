"""The Op object and what it returns (Tolerance, Emulation): numeq.ops re-exports them; the
factories that build an Op are in ops.py and _ops_quantized.py."""

from __future__ import annotations

import math
import warnings
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from . import _core
from ._arrays import _check_format, _check_real, _check_str

KINDS = ("deterministic", "probabilistic")


def _tier(kind: str, failure_probability: float) -> str:
    # The verdict ladder's tier of a bound (numeq.tolerances.tier_of says why).
    return "probabilistic" if kind == "probabilistic" and failure_probability > 0 else "deterministic"


@dataclass(frozen=True)
class Tolerance:
    """numeq's one tolerance: how far an output may lie from what it is compared with, derived from
    numeq's bound, in every form a rubric or a test cites. ``numeq.tolerance`` makes one for a
    problem over draws of an input family; ``Op.tolerance`` for one op's own inputs.

    What it is of: ``problem`` (its text: the problem, or the op's signature), ``platform`` (whose
    output is judged), ``against`` ("exact": the correctly rounded reference; or a second
    platform's output), ``inputs`` (the generators drawn; ("data",) for given inputs), ``draws``,
    ``tier`` ("probabilistic" or "deterministic": the verdict ladder's tier the bound is),
    ``failure_probability`` (per check; 0 when deterministic), ``unbounded`` (elements left out:
    no finite bound).

    Its forms, each covering every element:
      ``ulps``       in ulps of the output format at the expected value;
      ``rtol``, ``atol``  ``|x - y| <= atol + rtol |y|``, the pair with the least total allowance;
      ``atol_rel``   ``atol`` over the data's max|y|: the absolute term at any input scale;
      ``max_rtol``   ``|x - y| <= max_rtol max|y|`` (Neuron's max-normalised form);
      ``max_abs``    the largest allowance; ``rtol_only``, ``atol_only``: one parameter alone.

    Example::

        >>> x = numeq.round(np.random.default_rng(0).standard_normal((4, 64)), "bf16")
        >>> t = numeq.ops.sum(x, in_fmt="bf16", out="fp32").tolerance("trainium.trn2")
        >>> t.max_abs > 0, t.ulps > 0, t.against, t.inputs
        (True, True, 'exact', ('data',))
        >>> bool(t.atol_only >= t.max_abs)
        True
        >>> numeq.tolerance("softmax", "bf16", None, "trainium.trn2", k=256).tier
        'deterministic'
    """

    problem: str
    platform: str
    against: str
    inputs: tuple[str, ...]
    draws: int
    ulps: float
    rtol: float
    atol: float
    max_rtol: float
    tier: str
    failure_probability: float
    unbounded: int
    atol_rel: float = 0.0
    max_abs: float = 0.0
    rtol_only: float = 0.0
    atol_only: float = 0.0

    @property
    def max_ulps(self) -> float:
        """Deprecated name of ``ulps`` (one release): Op.tolerance's Tolerance called it so."""
        warnings.warn("Tolerance.max_ulps is deprecated: use Tolerance.ulps (the same value)", DeprecationWarning,
                      stacklevel=2)
        return self.ulps

    def assert_close_kwargs(self, reference: Any = None) -> dict[str, float]:
        """``rtol`` and ``atol`` as keyword arguments of ``numpy.testing.assert_allclose`` and
        ``torch.testing.assert_close``: the calibrated atol, or, given the ``reference`` the
        output is compared with (the expected values), the atol for those inputs' scale
        (``atol_rel * max|reference|``): an atol calibrated on N(0, 1) inputs fails correct
        outputs of inputs scaled by 4 (and is loose for inputs scaled by 1/4).

        >>> t = numeq.tolerance("sum", "bf16", "fp32", "numpy", k=64)
        >>> t.assert_close_kwargs()["rtol"] >= 0
        True
        >>> t.assert_close_kwargs(reference=np.array([4.0, -8.0]))["atol"] == t.atol_rel * 8.0
        True
        """
        if reference is None:
            return {"rtol": self.rtol, "atol": self.atol}
        ref = np.asarray(reference, dtype=np.float64)
        finite = np.abs(ref[np.isfinite(ref)])
        if finite.size == 0:
            raise ValueError("reference: holds no finite value to scale the atol by")
        return {"rtol": self.rtol, "atol": self.atol_rel * float(finite.max())}

    def to_dict(self) -> dict[str, Any]:
        """The fields as a JSON-able dict.

        >>> sorted(numeq.tolerance("sum", "fp32", "fp32", "numpy", k=64).to_dict())[:3]
        ['against', 'atol', 'atol_only']
        """
        d = asdict(self)
        d["inputs"] = list(self.inputs)
        return d


def _tolerance_of_bound(forms: dict, *, problem: str, platform: str, tier: str,
                        failure_probability: float) -> Tolerance:
    """The Tolerance of one bound on one op's inputs, from cases::tolerance's forms (the C++
    extension's dict): Op.tolerance's, and a Verdict's ``tolerance``."""
    top = forms["max_reference"]
    return Tolerance(problem=problem, platform=platform, against="exact", inputs=("data",), draws=1,
                     ulps=forms["max_ulps"], rtol=forms["rtol"], atol=forms["atol"],
                     max_rtol=forms["max_abs"] / top if top > 0 else math.inf, tier=tier,
                     failure_probability=failure_probability, unbounded=int(forms["unbounded"]),
                     atol_rel=forms["atol"] / top if top > 0 else 0.0, max_abs=forms["max_abs"],
                     rtol_only=forms["rtol_only"], atol_only=forms["atol_only"])


@dataclass(frozen=True)
class Emulation:
    """A platform's result (float64 values of the output format) and the bound on each element's
    distance to the exact result; ``failure_probability`` is 0 for deterministic bounds.

    ``values``, ``bound``: arrays of the op's result shape.

    Example::

        >>> x = numeq.round(np.random.default_rng(0).standard_normal((4, 64)), "bf16")
        >>> e = numeq.ops.sum(x, in_fmt="bf16", out="fp32").emulation("trainium.trn2")
        >>> e.values.shape, e.bound.shape, e.failure_probability
        ((4,), (4,), 0.0)
    """

    values: np.ndarray
    bound: np.ndarray
    failure_probability: float


def _kind(kind: str, lam: float) -> tuple[str, float]:
    _check_str(kind, "kind")
    if kind not in KINDS:
        raise ValueError(f"kind: unknown bound kind '{kind}'; valid: {', '.join(KINDS)}")
    lam = _check_real(lam, "lam", finite=True)
    if lam <= 0:
        raise ValueError(f"lam: expected a positive finite number, got {lam!r}")
    return kind, lam


def _failure(p: float) -> float:
    p = _check_real(p, "failure_probability", finite=True)
    if not 0 <= p < 1:
        raise ValueError(f"failure_probability: expected a number in [0, 1) (0: lam decides), got {p!r}")
    return p


class Op:
    """An operation of the catalogue on given inputs (build one with numeq.ops.matmul, sum, ...).

    ``core_op``: the compiled operation (internal: build an Op through the catalogue's functions).
    ``name``, ``signature``, ``out``; ``exact()``, ``reference()``, ``emulate(platform)``,
    ``emulation(platform, ...)``, ``bound(platform, ...)``, ``tolerance(platform, ...)``,
    ``cross_bound(platform_a, platform_b, ...)``.

    Example::

        >>> x = numeq.round(np.random.default_rng(0).standard_normal((4, 64)), "bf16")
        >>> op = numeq.ops.sum(x, in_fmt="bf16", out="fp32")
        >>> op.name, op.signature, op.out
        ('sum', 'sum(x[4,64] bf16, axis=1) in fp32 -> fp32', 'fp32')
        >>> got = op.emulate("trainium.trn2")
        >>> exact = op.exact()[0]
        >>> bool(np.all(np.abs(got - exact) <= op.bound("trainium.trn2")))
        True
    """

    def __init__(self, core_op: Any) -> None:
        self._op = core_op
        self._cache: dict[tuple[str, str, float], Emulation] = {}

    @property
    def name(self) -> str:
        return self._op.name

    @property
    def signature(self) -> str:
        """e.g. ``a[64,128] bf16 @ b[128,32] bf16 -> fp32``."""
        return self._op.signature

    @property
    def out(self) -> str:
        """The output format: the reference is rounded into it."""
        return self._op.out_format

    def __repr__(self) -> str:
        return f"numeq.ops.Op({self.signature})"

    def exact(self) -> tuple[np.ndarray, np.ndarray]:
        """The exact result as a double-double (hi, lo): hi + lo is exact (for MPFR-certified
        operations hi is the correctly rounded binary64 value and lo is 0).

        Example::

            >>> op = numeq.ops.sum(np.array([1.0, 2.0**-60], dtype=np.float64), in_fmt="fp64", out="fp32")
            >>> op.exact()
            (array(1.), array(8.67361738e-19))
        """
        hi, lo, _ = self._op.exact()
        return hi, lo

    def reference(self) -> np.ndarray:
        """The exact result rounded correctly into the output format (float64 values).

        Example::

            >>> op = numeq.ops.sum(np.array([1.0, 2.0**-30], dtype=np.float64), in_fmt="fp64", out="fp32")
            >>> op.reference()
            array(1.)
        """
        return self._op.reference()

    def emulation(self, platform: str, *, kind: str = "deterministic", lam: float = 6.0,
                  failure_probability: float = 0.0) -> Emulation:
        """The platform's result and its bound, from one pass (cached per platform and kind).
        With ``kind="probabilistic"`` and ``failure_probability`` > 0, lambda is chosen as the
        smallest whose per-element failure probability is at most that (``lam`` is then unused).

        ``platform``: a name of ``numeq.platforms()``; ``kind``: "deterministic" or "probabilistic";
        ``lam``: Higham and Mary's lambda for the probabilistic bound.

        Example::

            >>> x = numeq.round(np.random.default_rng(0).standard_normal((4, 64)), "bf16")
            >>> op = numeq.ops.sum(x, in_fmt="bf16", out="fp32")
            >>> e = op.emulation("trainium.trn2", kind="probabilistic", failure_probability=1e-6)
            >>> e.values.shape, 0 < e.failure_probability <= 1e-6
            ((4,), True)
        """
        _check_str(platform, "platform")
        key = (platform, *_kind(kind, lam), _failure(failure_probability))
        if key not in self._cache:
            values, bound, probability = self._op.emulate(platform, key[1], key[2], key[3])
            self._cache[key] = Emulation(values, bound, probability)
        return self._cache[key]

    def emulate(self, platform: str) -> np.ndarray:
        """The platform's result, bit for bit, as float64 values.

        ``platform``: a name of ``numeq.platforms()``, optionally with ``[...]`` assumptions.

        Example::

            >>> x = numeq.round(np.random.default_rng(0).standard_normal((4, 64)), "bf16")
            >>> op = numeq.ops.sum(x, in_fmt="bf16", out="fp32")
            >>> bool(np.array_equal(op.emulate("trainium.trn2"), numeq.sum(x.astype(np.float32), platform="trainium.trn2")))
            True
        """
        return self.emulation(platform).values

    def bound(self, platform: str, kind: str = "deterministic", lam: float = 6.0,
              failure_probability: float = 0.0) -> np.ndarray:
        """Per element: |emulated - exact| <= bound. ``kind="probabilistic"`` uses Higham and Mary's
        bound with parameter ``lam`` and, for dot and matmul plans it models, the data-driven bound
        (core/README.md); it fails with probability at most
        ``emulation(platform, kind=..., lam=...).failure_probability`` per element.
        ``failure_probability`` > 0 chooses lambda for that probability instead of ``lam``.

        ``platform``: a name of ``numeq.platforms()``; ``kind``: "deterministic" or "probabilistic".

        Example::

            >>> x = numeq.round(np.random.default_rng(0).standard_normal((4, 64)), "bf16")
            >>> op = numeq.ops.sum(x, in_fmt="bf16", out="fp32")
            >>> det = op.bound("trainium.trn2")
            >>> prob = op.bound("trainium.trn2", kind="probabilistic")
            >>> det.shape, bool(np.all(prob <= det))
            ((4,), True)
        """
        return self.emulation(platform, kind=kind, lam=lam, failure_probability=failure_probability).bound

    def tolerance(self, platform: str, kind: str = "deterministic", lam: float = 6.0) -> Tolerance:
        """The platform's bound as a ``Tolerance`` against this op's reference, on these inputs
        (``inputs == ("data",)``, one draw, no margin).

        ``platform``, ``kind``, ``lam``: as ``bound``.

        Example::

            >>> x = numeq.round(np.random.default_rng(0).standard_normal((4, 64)), "bf16")
            >>> t = numeq.ops.sum(x, in_fmt="bf16", out="fp32").tolerance("trainium.trn2")
            >>> bool(t.max_abs > 0), t.tier
            (True, 'deterministic')
        """
        e = self.emulation(platform, kind=kind, lam=lam)
        return _tolerance_of_bound(_core.cases_tolerance(e.bound, self.reference(), self.out), problem=self.signature,
                                   platform=platform, tier=_tier(kind, e.failure_probability),
                                   failure_probability=e.failure_probability)

    def variants(self, platform: str) -> list[str]:
        """The named variants of ``platform`` that ``numeq.compare`` searches for this op, in the
        order it tries them (the platform itself not among them): combinations of the platform's
        assumptions that change what the op reads, sibling instruction paths, a Trainium kernel's
        K tiles and PSUM groups, split-K. Each is a platform name ``numeq.compare`` and
        ``emulate`` take; a verdict of tier ``variant`` names one of them.

        ``platform``: a name of ``numeq.platforms()``.

        Example::

            >>> rng = np.random.default_rng(0)
            >>> a = numeq.round(rng.standard_normal((4, 256)), "bf16")
            >>> b = numeq.round(rng.standard_normal((256, 4)), "bf16")
            >>> op = numeq.ops.matmul(a, b, in_fmt="bf16", out="fp32")
            >>> v = op.variants("trainium.trn2")
            >>> "trainium.trn2[k_tile=64]" in v, len(v) > 10
            (True, True)
        """
        _check_str(platform, "platform")
        return list(_core.cases_platform_variants(self._op, platform))

    def cross_bound(self, platform_a: str, platform_b: str, kind: str = "deterministic", lam: float = 6.0,
                    failure_probability: float = 0.0) -> np.ndarray:
        """Per element: |result on platform_a - result on platform_b| <= this (bound_a + bound_b).

        ``platform_a``, ``platform_b``: names of ``numeq.platforms()``; ``kind``, ``lam``,
        ``failure_probability``: as ``bound``.

        Example::

            >>> x = numeq.round(np.random.default_rng(0).standard_normal((4, 64)), "bf16")
            >>> op = numeq.ops.sum(x, in_fmt="bf16", out="fp32")
            >>> diff = np.abs(op.emulate("nvidia.h100") - op.emulate("trainium.trn2"))
            >>> bool(np.all(diff <= op.cross_bound("nvidia.h100", "trainium.trn2")))
            True
        """
        _check_str(platform_a, "platform_a")
        _check_str(platform_b, "platform_b")
        kind, lam = _kind(kind, lam)
        return _core.cases_cross_bound(self._op, platform_a, platform_b, kind, lam, _failure(failure_probability))


def _c64(x: Any) -> np.ndarray:
    """C-order float64 values of x, 0-d kept 0-d (np.ascontiguousarray makes a 0-d array 1-d)."""
    return np.asarray(x, dtype=np.float64, order="C")


def _out(out: str | None, default: str) -> str:
    """The output format: ``out``, or the default (the inputs' format). The catalogue's results
    are floating values: an integer format is refused here, under the name the caller knows."""
    name = "out" if out is not None else "out (default: in_fmt)"
    fmt = default if out is None else _check_format(out, "out")
    if _core.format_info(fmt)["kind"] == "integer":
        raise ValueError(f"{name}: {fmt!r} is an integer format; this operation's result is floating (pass out=, "
                         "e.g. 'fp32'; integer results come from numeq.ops.quantize)")
    return fmt


# Their public home is numeq.ops (help(), pickling, reprs name it).
for _cls in (Tolerance, Emulation, Op):
    _cls.__module__ = "numeq.ops"
