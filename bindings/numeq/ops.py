"""The operation catalogue: an operation on given inputs, from which come the exact reference,
any platform's bit-exact emulation, and the per-element bound derived from the same machine model.

    op = numeq.ops.matmul(a, b, out="fp32")          # a, b: bf16 values (ml_dtypes or float arrays + in_fmt)
    op.reference()                                   # exact result, correctly rounded into out
    op.emulate("nvidia.h100")                        # the H100's result, bit for bit
    op.bound("nvidia.h100")                          # |emulated - exact| <= bound, per element
    op.tolerance("nvidia.h100")                      # the bound as ulps and as an (rtol, atol) pair
    numeq.compare(device_output, op, "trainium.trn1")  # a Verdict

Platforms are named as in ``numeq.platforms()``; Trainium assumptions select with
``"trainium.trn1[pe_order=pairwise]"``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import _core
from ._arrays import (INT32, INT64, SIZE, UINT64, _array, _check_bool, _check_format, _check_int, _check_real,
                      _check_str, _int64_array, _real_array, _renamed)
from .platforms import _axes, _layout
from .platforms import _float64_values as _values  # the catalogue takes float64 values
from .reference import _attention_mask, _attention_scores_shape

__all__ = ["Emulation", "Op", "Tolerance", "attention", "cast", "dequantize", "quantize", "function", "int8_matmul", "scaled_fp8_matmul", "generate", "generators", "layernorm", "log_softmax", "matmul",
           "max", "mean", "rmsnorm", "softmax", "sum"] + ["exp", "tanh", "sigmoid", "gelu", "gelu_tanh", "silu",
                                                          "rsqrt", "reciprocal"]

KINDS = ("deterministic", "probabilistic")


@dataclass(frozen=True)
class Tolerance:
    """A bound as tolerances: ``max_abs`` (largest bound), ``max_ulps`` (largest bound in ulps of the
    output format), and the (rtol, atol) pair of ``|x - ref| <= atol + rtol*|ref|`` that covers every
    element's bound with the least total allowance on the given data; ``rtol_only`` / ``atol_only``
    are the one-parameter forms.

    Example::

        >>> x = numeq.round(np.random.default_rng(0).standard_normal((4, 64)), "bf16")
        >>> t = numeq.ops.sum(x, in_fmt="bf16", out="fp32").tolerance("trainium.trn2")
        >>> t.max_abs > 0, t.max_ulps > 0
        (True, True)
        >>> bool(t.atol_only >= t.max_abs)
        True
    """

    max_abs: float
    max_ulps: float
    rtol: float
    atol: float
    rtol_only: float
    atol_only: float


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
        """The platform's bound as tolerances against this op's reference.

        ``platform``, ``kind``, ``lam``: as ``bound``.

        Example::

            >>> x = numeq.round(np.random.default_rng(0).standard_normal((4, 64)), "bf16")
            >>> t = numeq.ops.sum(x, in_fmt="bf16", out="fp32").tolerance("trainium.trn2")
            >>> bool(t.max_abs > 0)
            True
        """
        bound = self.bound(platform, kind, lam)
        return Tolerance(**_core.cases_tolerance(bound, self.reference(), self.out))

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


def matmul(a: Any, b: Any, *, c: Any = None, in_fmt: str | None = None, out: str = "fp32",
           rounding: str = "nearest_even") -> Op:
    """a[..., M, K] @ b[..., K, N] (+ c: a bias of shape [N] or anything that broadcasts to the
    result). ``in_fmt``: the format of a's and b's values (default: their dtype's); ``out``: the
    output format, ``rounding``: how the reference rounds into it (one of ``numeq.ROUNDINGS``).

    ``c``: values of the result's format (fp32 by default).

    Example::

        >>> rng = np.random.default_rng(0)
        >>> a = numeq.round(rng.standard_normal((4, 64)), "bf16")
        >>> b = numeq.round(rng.standard_normal((64, 2)), "bf16")
        >>> op = numeq.ops.matmul(a, b, in_fmt="bf16", out="fp32")
        >>> op.signature, op.reference().shape
        ('a[4,64] bf16 @ b[64,2] bf16 -> fp32', (4, 2))
        >>> numeq.compare(op.emulate("nvidia.h100"), op, "nvidia.h100").tier
        'bit_exact'
    """
    if in_fmt is None:
        for x, name in ((a, "a"), (b, "b")):
            if _array(x, name).dtype.kind in "iu":
                raise TypeError(f"{name}: integer arrays: for an integer GEMM (int8 / uint8 codes, int32 accumulation) "
                                "use numeq.ops.int8_matmul; for integers as values of a floating format pass in_fmt")
    av, fa = _values(a, in_fmt, "a")
    bv, fb = _values(b, in_fmt, "b")
    if in_fmt is None and fa != fb:
        raise ValueError(f"in_fmt: a holds {fa} values and b {fb}; pass in_fmt (the format both are values of)")
    cv = None if c is None else np.ascontiguousarray(_values(c, None, "c")[0], dtype=np.float64)
    _check_str(rounding, "rounding")
    return Op(_core.cases_matmul(np.ascontiguousarray(av, dtype=np.float64), np.ascontiguousarray(bv, dtype=np.float64),
                                 cv, fa, _out(out, "fp32"), rounding))


def _reduce(kind: str, x: Any, axis: Any, in_fmt: str | None, out: str | None, rounding: str, compute: str) -> Op:
    values, f = _values(x, in_fmt, "x")
    axes = _axes(axis, np.ndim(values))
    _check_str(compute, "compute")
    _check_str(rounding, "rounding")
    strides, buffered = _layout(x)  # numpy's order follows x's own layout (numeq.numpy_reduction)
    return Op(_core.cases_reduce(kind, np.ascontiguousarray(values, dtype=np.float64),
                                 [int(axis)] if axes is None else axes, strides, buffered, f, _out(out, f),
                                 rounding, compute))


def sum(x: Any, *, axis: Any = -1, in_fmt: str | None = None, out: str | None = None,  # noqa: A001
        rounding: str = "nearest_even", compute: str = "fp32") -> Op:
    """x summed over ``axis`` (an int, a tuple of ints, or None: every axis), as the platform's sum
    plan for ``compute`` sums it (inputs widen exactly), then cast into ``out`` (default: x's
    format). Over several axes each element's terms are taken in C order of the axes; the numpy
    platform follows x's memory layout as np.sum does (pass the array itself, not a copy).

    ``in_fmt``: the format of x's values (default: its dtype's); ``out``: the output format
    (default: in_fmt); ``rounding``: how the reference rounds into ``out``, one of ``numeq.ROUNDINGS``. ``compute``: the format the platform computes in.

    Example::

        >>> x = numeq.round(np.random.default_rng(0).standard_normal((4, 64)), "bf16")
        >>> op = numeq.ops.sum(x, in_fmt="bf16", out="fp32")
        >>> op.signature
        'sum(x[4,64] bf16, axis=1) in fp32 -> fp32'
        >>> numeq.compare(x.astype(np.float32).sum(axis=-1), op, "numpy").passed
        True
    """
    return _reduce("sum", x, axis, in_fmt, out, rounding, compute)


def mean(x: Any, *, axis: Any = -1, in_fmt: str | None = None, out: str | None = None,
         rounding: str = "nearest_even", compute: str = "fp32") -> Op:
    """The sum divided by the length, as numpy forms it (a float64 quotient cast into ``compute``);
    ``axis`` as for sum. np.mean of float16 sums in float32: compute="fp32" (the default).

    ``in_fmt``: the format of x's values (default: its dtype's); ``out``: the output format
    (default: in_fmt); ``rounding``: how the reference rounds into ``out``, one of ``numeq.ROUNDINGS``.

    Example::

        >>> x = numeq.round(np.random.default_rng(0).standard_normal((4, 64)), "bf16")
        >>> op = numeq.ops.mean(x.astype(np.float32))
        >>> numeq.compare(np.mean(x.astype(np.float32), axis=-1), op, "numpy").tier
        'bit_exact'
    """
    return _reduce("mean", x, axis, in_fmt, out, rounding, compute)


def max(x: Any, *, axis: int = -1, in_fmt: str | None = None, out: str | None = None,  # noqa: A001
        rounding: str = "nearest_even", compute: str = "fp32") -> Op:
    """The largest element along ``axis`` (exact; NaN propagates).

    ``in_fmt``: the format of x's values (default: its dtype's); ``out``: the output format
    (default: in_fmt); ``rounding``: how the reference rounds into ``out``, one of ``numeq.ROUNDINGS``. ``compute``: the format the platform computes in.

    Example::

        >>> op = numeq.ops.max(np.array([[1.0, 3.0, 2.0]], dtype=np.float32))
        >>> op.reference()
        array([3.])
    """
    return _reduce("max", x, axis, in_fmt, out, rounding, compute)


def function(name: str, x: Any, *, in_fmt: str | None = None, out: str | None = None,
             rounding: str = "nearest_even") -> Op:
    """f(x) elementwise as the platform's function model computes it (correctly rounded in fp32 then
    cast, or within the platform's documented / assumed ulp budget: the bound carries it).

    ``name``: ``exp``, ``exp2``, ``log``, ``tanh``, ``sigmoid``, ``gelu``, ``gelu_tanh``, ``silu``,
    ``softplus``, ``sqrt``, ``rsqrt`` or ``reciprocal``. ``in_fmt``: the format of x's values (default: its dtype's); ``out``: the output format
    (default: in_fmt); ``rounding``: how the reference rounds into ``out``, one of ``numeq.ROUNDINGS``.

    Example::

        >>> op = numeq.ops.function("exp", np.array([0.0, 1.0], dtype=np.float32))
        >>> op.reference()
        array([1.        , 2.71828175])
        >>> numeq.compare(op.emulate("trainium.trn2"), op, "trainium.trn2").tier
        'bit_exact'
    """
    _check_str(name, "name")
    values, f = _values(x, in_fmt, "x")
    _check_str(rounding, "rounding")
    with _renamed({"function": "name"}):
        return Op(_core.cases_function(name, _c64(values), f, _out(out, f), rounding))


def _function(name: str) -> Any:
    def op(x: Any, *, in_fmt: str | None = None, out: str | None = None, rounding: str = "nearest_even") -> Op:
        return function(name, x, in_fmt=in_fmt, out=out, rounding=rounding)
    op.__name__ = op.__qualname__ = name
    op.__doc__ = (
        f"{name}(x) elementwise: numeq.ops.function('{name}', x, ...).\n\n"
        "``in_fmt``: the format of x's values (default: its dtype's); ``out``: the output format (default:\n"
        "in_fmt); ``rounding``: how the reference rounds into ``out``, one of ``numeq.ROUNDINGS``.\n\n"
        "Example::\n\n"
        f"    >>> op = numeq.ops.{name}(np.array([0.5, 2.0], dtype=np.float32))\n"
        "    >>> op.reference().shape\n"
        "    (2,)\n"
        "    >>> numeq.compare(op.emulate(\"trainium.trn2\"), op, \"trainium.trn2\").tier\n"
        "    'bit_exact'\n"
    )
    return op


exp = _function("exp")
tanh = _function("tanh")
sigmoid = _function("sigmoid")
gelu = _function("gelu")
gelu_tanh = _function("gelu_tanh")
silu = _function("silu")
rsqrt = _function("rsqrt")
reciprocal = _function("reciprocal")


def _softmax(x: Any, axis: int, in_fmt: str | None, out: str | None, rounding: str, variant: str, block: int,
             compute: str, log: bool) -> Op:
    axis = _check_int(axis, "axis")
    block = _check_int(block, "block", *SIZE)
    _check_str(variant, "variant")
    _check_str(compute, "compute")
    _check_str(rounding, "rounding")
    values, f = _values(x, in_fmt, "x")
    return Op(_core.cases_softmax(np.ascontiguousarray(values, dtype=np.float64), int(axis), f, _out(out, f), rounding,
                                  variant, int(block), compute, log))


def softmax(x: Any, *, axis: int = -1, in_fmt: str | None = None, out: str | None = None,
            rounding: str = "nearest_even", variant: str = "max_subtracted", block: int = 0,
            compute: str = "fp32") -> Op:
    """Softmax along ``axis`` computed in ``compute``: variant ``plain`` (no max subtraction),
    ``max_subtracted`` or ``online`` (blocks of ``block`` elements, as flash attention).

    ``in_fmt``: the format of x's values (default: its dtype's); ``out``: the output format
    (default: in_fmt); ``rounding``: how the reference rounds into ``out``, one of ``numeq.ROUNDINGS``. ``compute``: the format the platform computes in. ``block``: the online variant's block length.

    Example::

        >>> x = numeq.round(np.random.default_rng(0).standard_normal((4, 64)), "bf16")
        >>> op = numeq.ops.softmax(x, in_fmt="bf16", out="fp32")
        >>> op.reference().shape, bool(np.allclose(op.reference().sum(axis=-1), 1))
        ((4, 64), True)
        >>> numeq.compare(op.emulate("nvidia.h100"), op, "nvidia.h100").tier
        'bit_exact'
    """
    return _softmax(x, axis, in_fmt, out, rounding, variant, block, compute, False)


def log_softmax(x: Any, *, axis: int = -1, in_fmt: str | None = None, out: str | None = None,
                rounding: str = "nearest_even", variant: str = "max_subtracted", block: int = 0,
                compute: str = "fp32") -> Op:
    """Log-softmax along ``axis``; variants as softmax.

    ``variant``: ``plain``, ``max_subtracted`` or ``online`` (blocks of ``block`` elements). ``in_fmt``: the format of x's values (default: its dtype's); ``out``: the output format
    (default: in_fmt); ``rounding``: how the reference rounds into ``out``, one of ``numeq.ROUNDINGS``. ``compute``: the format the platform computes in.

    Example::

        >>> x = numeq.round(np.random.default_rng(0).standard_normal((4, 64)), "bf16")
        >>> op = numeq.ops.log_softmax(x, in_fmt="bf16", out="fp32")
        >>> bool(np.all(op.reference() < 0))
        True
    """
    return _softmax(x, axis, in_fmt, out, rounding, variant, block, compute, True)


def _norm(centred: bool, x: Any, gamma: Any, beta: Any, eps: float, in_fmt: str | None, out: str | None,
          rounding: str, variant: str, compute: str) -> Op:
    values, f = _values(x, in_fmt, "x")
    g = None if gamma is None else np.ascontiguousarray(_values(gamma, None, "gamma")[0], dtype=np.float64)
    b = None if beta is None else np.ascontiguousarray(_values(beta, None, "beta")[0], dtype=np.float64)
    eps = _check_real(eps, "eps")
    _check_str(variant, "variant")
    _check_str(compute, "compute")
    _check_str(rounding, "rounding")
    return Op(_core.cases_norm(centred, np.ascontiguousarray(values, dtype=np.float64), g, b, float(eps), f,
                               _out(out, f), rounding, variant, compute))


def layernorm(x: Any, *, gamma: Any = None, beta: Any = None, eps: float = 1e-5, in_fmt: str | None = None,
              out: str | None = None, rounding: str = "nearest_even", variant: str = "two_pass",
              compute: str = "fp32") -> Op:
    """Layernorm over the last axis: variant ``two_pass``, ``welford`` or ``bn_stats`` (Trainium's
    bn_stats/bn_aggr: even/odd statistics over chunks of 512, merged per the platform's
    bn_aggr_merge assumption).

    ``x``: [..., n]; ``gamma``, ``beta``: [n] (or None); ``eps``: added to the variance. ``in_fmt``: the format of x's values (default: its dtype's); ``out``: the output format
    (default: in_fmt); ``rounding``: how the reference rounds into ``out``, one of ``numeq.ROUNDINGS``. ``compute``: the format the platform computes in.

    Example::

        >>> x = numeq.round(np.random.default_rng(0).standard_normal((4, 64)), "bf16")
        >>> op = numeq.ops.layernorm(x, in_fmt="bf16", out="fp32")
        >>> op.reference().shape
        (4, 64)
        >>> numeq.compare(op.emulate("nvidia.h100"), op, "nvidia.h100").tier
        'bit_exact'
    """
    return _norm(True, x, gamma, beta, eps, in_fmt, out, rounding, variant, compute)


def rmsnorm(x: Any, *, gamma: Any = None, beta: Any = None, eps: float = 1e-6, in_fmt: str | None = None,
            out: str | None = None, rounding: str = "nearest_even", compute: str = "fp32") -> Op:
    """RMSNorm over the last axis: x * rsqrt(mean(x^2) + eps) (* gamma) (+ beta).

    ``gamma``, ``beta``: [n] (or None); ``eps``: added to mean(x^2). ``in_fmt``: the format of x's values (default: its dtype's); ``out``: the output format
    (default: in_fmt); ``rounding``: how the reference rounds into ``out``, one of ``numeq.ROUNDINGS``. ``compute``: the format the platform computes in.

    Example::

        >>> x = numeq.round(np.random.default_rng(0).standard_normal((4, 64)), "bf16")
        >>> op = numeq.ops.rmsnorm(x, in_fmt="bf16", out="fp32")
        >>> op.reference().shape
        (4, 64)
    """
    return _norm(False, x, gamma, beta, eps, in_fmt, out, rounding, "two_pass", compute)


def attention(q: Any, k: Any, v: Any, *, mask: Any = None, causal: bool = False, scale: float | None = None,
              in_fmt: str | None = None, out: str | None = None, rounding: str = "nearest_even",
              variant: str = "naive", block_rows: int = 64, block_cols: int = 64, cast_p: bool = True) -> Op:
    """Scaled dot-product attention softmax(scale Q K^T + mask) V, q[..., Lq, d], k[..., Lk, d],
    v[..., Lk, dv] with equal batch dimensions; ``variant``: ``naive`` (S, softmax, P cast to in_fmt,
    P V) or ``flash`` (FlashAttention-2 blocks of ``block_rows`` x ``block_cols`` with online
    rescaling); ``cast_p=False`` models a kernel that keeps P in fp32. ``mask`` broadcasts to
    [..., Lq, Lk]: boolean as torch's scaled_dot_product_attention (True: the key takes part;
    False: it does not, an additive -inf) or additive reals (-inf excludes a key); the same
    conversion as numeq.reference.attention (numeq.reference._attention_mask).

    ``causal``: query i sees keys j <= i; ``scale``: default 1/sqrt(d). ``in_fmt``: the format of q's, k's and v's values (default: its dtype's); ``out``: the output format
    (default: in_fmt); ``rounding``: how the reference rounds into ``out``, one of ``numeq.ROUNDINGS``.

    Example::

        >>> rng = np.random.default_rng(0)
        >>> q, k, v = (numeq.round(rng.standard_normal((1, 8, 16)), "bf16") for _ in range(3))
        >>> op = numeq.ops.attention(q, k, v, causal=True, in_fmt="bf16", out="fp32")
        >>> op.reference().shape
        (1, 8, 16)
        >>> numeq.compare(op.emulate("nvidia.h100"), op, "nvidia.h100").tier
        'bit_exact'
    """
    qv, fq = _values(q, in_fmt, "q")
    kv, fk = _values(k, in_fmt, "k")
    vv, fv = _values(v, in_fmt, "v")
    if in_fmt is None and not fq == fk == fv:
        raise ValueError(f"in_fmt: q, k, v hold {fq}, {fk} and {fv} values; pass in_fmt (the format all are values of)")
    m = None if mask is None else _attention_mask(mask, _attention_scores_shape(qv, kv))
    scale = None if scale is None else _check_real(scale, "scale")
    block_rows = _check_int(block_rows, "block_rows", *SIZE)
    block_cols = _check_int(block_cols, "block_cols", *SIZE)
    causal = _check_bool(causal, "causal")
    cast_p = _check_bool(cast_p, "cast_p")
    _check_str(variant, "variant")
    _check_str(rounding, "rounding")
    return Op(_core.cases_attention(*(np.ascontiguousarray(t, dtype=np.float64) for t in (qv, kv, vv)), m, bool(causal),
                                    None if scale is None else float(scale), fq, _out(out, fq), rounding, variant,
                                    int(block_rows), int(block_cols), bool(cast_p)))


def scaled_fp8_matmul(a: Any, b: Any, scale_a: Any, scale_b: Any, *, scaling: str = "per_tensor",
                      in_fmt: str | None = None, out: str = "fp32") -> Op:
    """(a * scale_a) @ (b * scale_b) for fp8 a[M, K], b[K, N] with fp32 scales laid out per
    ``scaling``: ``per_tensor`` (one each), ``per_channel`` (scale_a [M], scale_b [N]),
    ``blockwise`` (DeepSeek-V3: scale_a [M, K/128], scale_b [K/128, ceil(N/128)], applied at each
    fp32 promotion), ``mx`` (OCP MX: power-of-two scales per 32 along K: [M, K/32], [K/32, N]).

    ``in_fmt``: the fp8 format of a's and b's values (e4m3fn, e5m2, ...; default their dtype's);
    ``out``: the output format.

    Example::

        >>> rng = np.random.default_rng(0)
        >>> a = numeq.round(rng.standard_normal((4, 64)), "e4m3fn")
        >>> b = numeq.round(rng.standard_normal((64, 2)), "e4m3fn")
        >>> op = numeq.ops.scaled_fp8_matmul(a, b, 0.5, 2.0, in_fmt="e4m3fn")
        >>> op.reference().shape
        (4, 2)
        >>> numeq.compare(op.emulate("nvidia.h100"), op, "nvidia.h100").tier
        'bit_exact'
    """
    av, fa = _values(a, in_fmt, "a")
    bv, fb = _values(b, in_fmt, "b")
    if in_fmt is None and fa != fb:
        raise ValueError(f"in_fmt: a holds {fa} values and b {fb}; pass in_fmt (the format both are values of)")
    _check_str(scaling, "scaling")
    sa = np.ascontiguousarray(_real_array(scale_a, "scale_a"), dtype=np.float64)
    sb = np.ascontiguousarray(_real_array(scale_b, "scale_b"), dtype=np.float64)
    for s, name in ((sa, "scale_a"), (sb, "scale_b")):
        if not np.all(np.isfinite(s) & (np.abs(s) <= np.finfo(np.float32).max)):
            raise ValueError(f"{name}: scales are fp32 values: finite and at most {np.finfo(np.float32).max:g} in "
                             "magnitude")
    with _renamed({"long accumulator": "a, b, scale_a, scale_b"}):
        return Op(_core.cases_scaled_fp8_matmul(np.ascontiguousarray(av, dtype=np.float64),
                                                np.ascontiguousarray(bv, dtype=np.float64), sa, sb, fa, scaling,
                                                _out(out, "fp32")))


def int8_matmul(a: Any, b: Any, *, overflow: str = "error", requantize: dict[str, Any] | None = None) -> Op:
    """Integer a[M, K] @ b[K, N] (int8 / uint8 codes) accumulated in int32, exactly; a partial sum
    outside int32 is an error naming the element (``overflow="wrap"``: two's complement wraparound).
    ``requantize=dict(multiplier=..., zero_point=0, out="int8", rounding="nearest_even", range="full")``
    adds the int8 epilogue: fp32(fp32(acc) * fp32(multiplier)) rounded, zero point added, clamped;
    its exact result is clamp(acc * multiplier + zero_point) with the multiplier as given.

    Example::

        >>> a = np.array([[100, -100], [127, 127]], dtype=np.int8)
        >>> b = np.array([[2, 1], [1, 2]], dtype=np.int8)
        >>> numeq.ops.int8_matmul(a, b).reference()
        array([[ 100., -100.],
               [ 381.,  381.]])
    """
    _check_str(overflow, "overflow")
    av = _array(a, "a")
    bv = _array(b, "b")
    for x, name in ((av, "a"), (bv, "b")):
        if x.dtype.kind not in "iuf":
            raise TypeError(f"{name}: expected an integer array, got dtype {x.dtype}")
        if x.dtype.kind == "f" and not (np.all(np.isfinite(x)) and np.array_equal(x, np.round(x))):
            raise ValueError(f"{name}: expected integer codes, got non-integral values")
        lo, hi = (int(x.min()), int(x.max())) if x.size else (0, 0)
        if lo < -128 or hi > 255 or (lo < 0 and hi > 127):
            raise ValueError(f"{name}: expected int8 codes [-128, 127] or uint8 codes [0, 255], got values in "
                             f"[{lo}, {hi}]")
    a64 = np.ascontiguousarray(av, dtype=np.float64)
    b64 = np.ascontiguousarray(bv, dtype=np.float64)
    if requantize is None:
        return Op(_core.cases_int8_matmul(a64, b64, overflow))
    if not isinstance(requantize, dict):
        raise TypeError(f"requantize: expected a dict (multiplier, zero_point, out, rounding, range), got "
                        f"{type(requantize).__name__}")
    known = {"multiplier", "zero_point", "out", "rounding", "range"}
    unknown = set(requantize) - known
    if unknown or "multiplier" not in requantize:
        raise ValueError(f"requantize: needs 'multiplier' and takes {', '.join(sorted(known))}; got {sorted(requantize)}")
    return Op(_core.cases_int8_matmul_requantized(
        a64, b64, overflow, _check_real(requantize["multiplier"], "requantize['multiplier']"),
        _check_int(requantize.get("zero_point", 0), "requantize['zero_point']", *INT64),
        _check_str(requantize.get("out", "int8"), "requantize['out']"),
        _check_str(requantize.get("rounding", "nearest_even"), "requantize['rounding']"),
        _check_str(requantize.get("range", "full"), "requantize['range']")))


def cast(x: Any, out: str, *, in_fmt: str | None = None, rounding: str = "nearest_even", overflow: str = "ieee",
         subnormals: str = "keep", seed: int = 0) -> Op:
    """x cast into ``out`` (every rounding, stochastic included; overflow and subnormal policies):
    the exact result is x, the bound the cast's own rounding.

    ``in_fmt``: the format of x's values (default: its dtype's); ``subnormals``: one of
    ``numeq.SUBNORMALS``; ``seed``: stochastic rounding's key; ``rounding``: one of
    ``numeq.ROUNDINGS``; ``overflow``: one of ``numeq.OVERFLOWS``.

    Example::

        >>> op = numeq.ops.cast(np.array([0.1, 1000.0], dtype=np.float32), "e4m3fn", overflow="saturate")
        >>> op.reference()
        array([1.015625e-01, 4.480000e+02])
    """
    _out(_check_str(out, "out"), "")
    values, f = _values(x, in_fmt, "x")
    seed = _check_int(seed, "seed", *UINT64)
    for value, name in ((rounding, "rounding"), (overflow, "overflow"), (subnormals, "subnormals")):
        _check_str(value, name)
    return Op(_core.cases_cast(_c64(values), f, out, rounding, overflow, subnormals, seed))


def _quant(quantize_: bool, x: Any, fmt: str, scale: Any, zero_point: Any, axis: int, block: int, in_fmt: str | None,
           rounding: str, range_: str, seed: int, out: str) -> Op:
    for value, name in ((fmt, "fmt"), (rounding, "rounding"), (range_, "range"), (out, "out")):
        _check_str(value, name)
    axis = _check_int(axis, "axis", *INT32)
    block = _check_int(block, "block", *SIZE)
    seed = _check_int(seed, "seed", *UINT64)
    if quantize_:
        values, f = _values(x, in_fmt, "x")
    else:
        values, f = _codes(x, fmt), fmt
    s = _real_array(scale, "scale")
    s = _c64(np.broadcast_to(s, (1,) * values.ndim) if s.ndim == 0 else s)
    zp = _int64_array(zero_point, "zero_point")
    try:
        z = np.asarray(np.broadcast_to(zp, s.shape), dtype=np.int64, order="C")
    except ValueError:
        raise ValueError(f"zero_point: shape {zp.shape} does not broadcast to the scales' shape {s.shape}") from None
    if not quantize_:
        _check_format(out, "out")
    with _renamed({"block_size": "block"}):
        return Op(_core.cases_quantize(quantize_, _c64(values), f, fmt, s, z, axis, block, rounding, range_, seed, out))


def _codes(codes: Any, fmt: str) -> np.ndarray:
    """Integer codes as float64 values: integer arrays, or floats holding integers (the C++ op checks
    that every code is an integer within fmt's range and names ``codes`` otherwise)."""
    c = _array(codes, "codes")
    if c.dtype.kind not in "iuf":
        raise TypeError(f"codes: expected integer codes of {fmt} (an integer array, or floats holding integers), "
                        f"got dtype {c.dtype}")
    return _c64(c)


def quantize(x: Any, fmt: str = "int8", *, scale: Any, zero_point: Any = 0, axis: int = 0, block: int = 1,
             in_fmt: str | None = None, rounding: str = "nearest_even", range: str = "full",  # noqa: A002
             seed: int = 0) -> Op:
    """Integer codes clamp(round(x / scale) + zero_point) per tensor (scalar scale), per channel
    along ``axis`` or per ``block`` of elements along it (scale and zero_point of x's rank); the exact
    result is the real clamp(x / scale + zero_point, qmin, qmax), the bound the rounding's
    (``rounding``: one of ``numeq.ROUNDINGS``).

    ``fmt``: "int8", "uint8" or "int32"; ``in_fmt``: the format of x's values (default: its
    dtype's); ``range``: "full" or "symmetric"; ``seed``: stochastic rounding's key.

    Example::

        >>> op = numeq.ops.quantize(np.array([-1.0, 0.26, 1.0], dtype=np.float32), "int8", scale=1 / 127)
        >>> op.reference()
        array([-127.,   33.,  127.])
    """
    return _quant(True, x, fmt, scale, zero_point, axis, block, in_fmt, rounding, range, seed, "fp64")


def dequantize(codes: Any, fmt: str = "int8", *, scale: Any, zero_point: Any = 0, axis: int = 0, block: int = 1,
               out: str = "fp32") -> Op:
    """(codes - zero_point) * scale rounded into ``out``; groups as quantize. ``codes``: integers within
    ``fmt``'s range (int8 [-128, 127], uint8 [0, 255], int32), as an integer array or as floats that
    hold such integers exactly; anything else (300 or 0.5 for int8, 2^64 - 1) is a ValueError naming
    ``codes``, the format and its range.

    ``axis``, ``block``: the groups of ``scale`` and ``zero_point``, as ``quantize``.

    Example::

        >>> op = numeq.ops.dequantize(np.array([-127, 0, 33], dtype=np.int8), "int8", scale=0.5)
        >>> op.reference()
        array([-63.5,   0. ,  16.5])
    """
    return _quant(False, codes, fmt, scale, zero_point, axis, block, None, "nearest_even", "full", 0, out)


def generators() -> list[str]:
    """Names of the seeded input generators.

    Example::

        >>> numeq.ops.generators()
        ['normal', 'uniform', 'lognormal', 'outlier_channels', 'cancellation', 'near_overflow', 'subnormal_rich', 'small_integers']
    """
    return list(_core.cases_generators())


def generate(generator: str, shape: Any, fmt: str = "fp32", *, seed: int = 0, scale: float = 1.0) -> np.ndarray:
    """Seeded inputs: float64 values of ``fmt`` drawn from ``generator`` (normal, uniform, lognormal,
    outlier_channels, cancellation, near_overflow, subnormal_rich, small_integers).

    ``shape``: the array's shape; ``seed``: the same seed gives the same values; ``scale``: a factor
    on the generator's values.

    Example::

        >>> x = numeq.ops.generate("normal", (2, 3), "bf16", seed=1)
        >>> x.shape, bool(np.all(numeq.round(x, "bf16") == x))
        ((2, 3), True)
    """
    _check_str(generator, "generator")
    _check_str(fmt, "fmt")
    if isinstance(shape, (int, np.integer, bool, np.bool_)):
        shape = (shape,)
    if not isinstance(shape, (tuple, list)):
        raise TypeError(f"shape: expected an integer or a sequence of integers, got {type(shape).__name__}")
    dims = [_check_int(d, "shape", *SIZE) for d in shape]
    if math.prod(dims) > SIZE[1] // 8:
        raise MemoryError(f"shape: {tuple(dims)} holds more float64 values than any memory")
    seed = _check_int(seed, "seed", *UINT64)
    scale = _check_real(scale, "scale")
    try:
        return _core.cases_generate(generator, seed, scale, fmt, dims)
    except MemoryError:
        raise MemoryError(f"shape: {tuple(dims)} needs more memory than this machine has") from None
