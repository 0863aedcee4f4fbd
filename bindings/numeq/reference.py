"""Exact and certified reference results (``numeq.reference``).

Exact reductions (sum, dot, matmul), correctly rounded functions (exp, exp2, log, tanh, sigmoid,
gelu, silu, softplus, sqrt, rsqrt, reciprocal; erf, erf_dx, sin, cos, tan, atan, mish, gelu_sigmoid,
gelu_dx, silu_dx, gelu_sigmoid_dx) and composite operations (softmax, log_softmax,
layernorm, rmsnorm, attention), each output element correctly rounded (MPFR intervals in a Ziv
loop; references/composite.hpp documents the definitions and special values).

Every function takes numpy or ml_dtypes arrays, an input format ``in_fmt`` (default: the array's
own: float32 -> fp32, float64 -> fp64, ml_dtypes bfloat16 -> bf16, ...; values must be exactly
representable in it) and an output cast (``out`` format, ``rounding``, ``overflow``,
``subnormals``, ``seed``, ``random_bits`` as in ``numeq.round``), and returns float64 values of
the exact result rounded once into ``out``. The ``*_exact`` variants return the exact result as
a double-double ``(hi, lo)``: hi is the exact value rounded to nearest float64, lo the rest to
nearest.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from . import _core
from ._arrays import _FORMAT_OF_DTYPE, _array, _check_bool, _check_format, _check_int, _check_real, _renamed
from ._arrays import format_info
from ._reference_functions import _input_values, _reference
from ._reference_functions import (
    atan,
    cos,
    erf,
    erf_dx,
    exp,
    exp2,
    gelu,
    gelu_dx,
    gelu_sigmoid,
    gelu_sigmoid_dx,
    log,
    mish,
    reciprocal,
    rsqrt,
    sigmoid,
    silu,
    silu_dx,
    sin,
    softplus,
    sqrt,
    tan,
    tanh,
)

if TYPE_CHECKING:
    from ._cast_keywords import CastKeywords

__all__ = [
    "atan", "attention", "cos", "dot", "dot_exact", "erf", "erf_dx", "exp", "exp2", "gelu", "gelu_dx",
    "gelu_sigmoid", "gelu_sigmoid_dx", "layernorm", "log", "log_softmax", "matmul", "matmul_exact", "mish",
    "reciprocal", "rmsnorm", "rsqrt", "sigmoid", "silu", "silu_dx", "sin", "softmax", "softplus", "sqrt", "sum",
    "sum_exact", "tan", "tanh",
]


def _values(x: Any, in_fmt: str | None, parameter: str, fmt_parameter: str = "in_fmt") -> np.ndarray:
    """C-contiguous float64 values of x, checked to lie in in_fmt (the functions' own helper). A 0-d
    input stays 0-d (the reductions and normalisations then report that it has no axis)."""
    values = _input_values(x, in_fmt, "keep", parameter, fmt_parameter)[0]
    return values.reshape(()) if values.ndim == 0 else values


def _out(out: str, cast: CastKeywords) -> tuple:
    """(out, *cast): the extension's cast arguments, out checked to be a floating format."""
    _check_format(out, "out")
    if format_info(out)["kind"] == "integer":
        floating = [n for n in _core.formats() if format_info(n)["kind"] == "floating"]
        raise ValueError(f"out: {out!r} is an integer format; references round into floating formats: "
                         f"{', '.join(floating)} (quantize the result with numeq.quantize)")
    return (out, *cast)


# The long accumulator's range error concerns the products of a and b (and c): name them.
_RANGE = {"long accumulator": "a, b"}


def _axis(axis: Any) -> int:
    return _check_int(axis, "axis")


@_reference
def sum(  # noqa: A001 - mirrors numpy.sum
    x: Any, axis: int = -1, *, in_fmt: str | None = None, out: str = "fp32", cast: CastKeywords,
) -> np.ndarray:
    """Exact sum of x along ``axis``, rounded once into ``out``.

    {keywords}

    Example::

        >>> x = np.array([[1.0, 2.0**-30, -1.0], [0.1, 0.2, 0.3]])
        >>> numeq.reference.sum(x)                 # exact, then one rounding into fp32
        array([9.31322575e-10, 6.00000024e-01])
        >>> numeq.reference.sum(x, out="fp64")
        array([9.31322575e-10, 6.00000000e-01])
    """
    cast = _out(out, cast)
    return _core.reference_sum(_values(x, in_fmt, "x"), _axis(axis), *cast, False)


def sum_exact(x: Any, axis: int = -1, *, in_fmt: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Exact sum of x along ``axis`` as a double-double (hi, lo).

    ``in_fmt``: the format of x's values (default: the array's own).

    Example::

        >>> hi, lo = numeq.reference.sum_exact(np.array([1.0, 2.0**-60, -1.0, 2.0**-100]))
        >>> hi, lo
        (array(8.67361738e-19), array(0.))
    """
    return _core.reference_sum(_values(x, in_fmt, "x"), _axis(axis), "fp64", "nearest_even", "ieee", "keep", 0, 32, True)


@_reference
def dot(
    a: Any, b: Any, *, in_fmt: str | None = None, out: str = "fp32", cast: CastKeywords,
) -> np.ndarray:
    """Exact dot product of two 1-D arrays, rounded once into ``out`` (a 0-d array).

    ``a``, ``b``: 1-D arrays of equal length. {keywords}

    Example::

        >>> numeq.reference.dot(np.array([1.0, 2.0**-30]), np.array([1.0, 1.0]))
        array(1.)
        >>> float(numeq.reference.dot(np.array([1.0, 2.0**-30]), np.array([1.0, 1.0]), out="fp64"))
        1.0000000009313226
    """
    cast = _out(out, cast)
    with _renamed(_RANGE):
        return _core.reference_dot(_values(a, in_fmt, "a"), _values(b, in_fmt, "b"), *cast, False)


def dot_exact(a: Any, b: Any, *, in_fmt: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Exact dot product as a double-double (hi, lo).

    ``a``, ``b``: 1-D arrays of equal length; ``in_fmt``: the format of their values (default: the
    arrays' own).

    Example::

        >>> numeq.reference.dot_exact(np.array([1.0, 2.0**-60]), np.array([1.0, 1.0]))
        (array(1.), array(8.67361738e-19))
    """
    with _renamed(_RANGE):
        return _core.reference_dot(_values(a, in_fmt, "a"), _values(b, in_fmt, "b"), "fp64", "nearest_even", "ieee",
                                   "keep", 0, 32, True)


@_reference
def matmul(
    a: Any, b: Any, c: Any = None, *, in_fmt: str | None = None, c_fmt: str | None = None, out: str = "fp32",
    cast: CastKeywords,
) -> np.ndarray:
    """Exact a[..., M, K] @ b[..., K, N] (+ c, broadcast and added exactly), rounded once into ``out``.

    Batch dimensions broadcast as in numpy.matmul. ``in_fmt`` checks a and b; ``c_fmt`` checks c.

    {keywords}

    Example::

        >>> a = np.array([[1.0, 2.0**-8]])            # 1 + 2^-8: a tie between two bf16 values
        >>> numeq.reference.matmul(a, np.ones((2, 1)))
        array([[1.00390625]])
        >>> numeq.reference.matmul(a, np.ones((2, 1)), out="bf16")
        array([[1.]])
        >>> numeq.reference.matmul(a, np.ones((2, 1)), c=np.ones(1), out="fp64")
        array([[2.00390625]])
    """
    cast = _out(out, cast)
    cv = None if c is None else _values(c, c_fmt, "c", "c_fmt")
    if c_fmt is not None:
        _check_format(c_fmt, "c_fmt")
    with _renamed(_RANGE):
        return _core.reference_matmul(_values(a, in_fmt, "a"), _values(b, in_fmt, "b"), cv, *cast, False)


def matmul_exact(
    a: Any, b: Any, c: Any = None, *, in_fmt: str | None = None, c_fmt: str | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Exact a @ b (+ c) as a double-double (hi, lo).

    ``in_fmt``: the format of a's and b's values, ``c_fmt``: of c's (default: the arrays' own).

    Example::

        >>> hi, lo = numeq.reference.matmul_exact(np.array([[1.0, 2.0**-60]]), np.ones((2, 1)))
        >>> hi, lo
        (array([[1.]]), array([[8.67361738e-19]]))
    """
    cv = None if c is None else _values(c, c_fmt, "c", "c_fmt")
    if c_fmt is not None:
        _check_format(c_fmt, "c_fmt")
    with _renamed(_RANGE):
        return _core.reference_matmul(_values(a, in_fmt, "a"), _values(b, in_fmt, "b"), cv, "fp64", "nearest_even",
                                      "ieee", "keep", 0, 32, True)


@_reference
def softmax(
    x: Any, axis: int = -1, *, in_fmt: str | None = None, out: str = "fp32", cast: CastKeywords,
) -> np.ndarray:
    """softmax(x) along ``axis``, every element correctly rounded into ``out``.

    NaN or +Inf in a row makes the row NaN; -Inf entries take no part (their result is +0).

    {keywords}

    Example::

        >>> numeq.reference.softmax(np.array([0.0, np.log(3.0)]))
        array([0.25, 0.75])
        >>> numeq.reference.softmax(np.array([[1.0, 1.0, -np.inf]]))
        array([[0.5, 0.5, 0. ]])
    """
    cast = _out(out, cast)
    return _core.reference_softmax(_values(x, in_fmt, "x"), _axis(axis), False, *cast)


@_reference
def log_softmax(
    x: Any, axis: int = -1, *, in_fmt: str | None = None, out: str = "fp32", cast: CastKeywords,
) -> np.ndarray:
    """log_softmax(x) = x - log(sum(exp(x))) along ``axis``, every element correctly rounded into ``out``.

    {keywords}

    Example::

        >>> numeq.reference.log_softmax(np.array([0.0, 0.0]))
        array([-0.69314718, -0.69314718])
    """
    cast = _out(out, cast)
    return _core.reference_softmax(_values(x, in_fmt, "x"), _axis(axis), True, *cast)


def _eps(eps: Any) -> float:
    return _check_real(eps, "eps")


def _affine(v: Any, parameter: str) -> np.ndarray | None:
    """gamma / beta values in their own dtype's format (they need not share x's in_fmt)."""
    return None if v is None else _values(v, None, parameter)


@_reference
def layernorm(
    x: Any, gamma: Any = None, beta: Any = None, *, eps: float = 1e-5, in_fmt: str | None = None,
    out: str = "fp32", cast: CastKeywords,
) -> np.ndarray:
    """(x - mean) / sqrt(var + eps) * gamma + beta over the last axis (biased variance, as
    torch.nn.functional.layer_norm), every element correctly rounded into ``out``.

    gamma and beta have shape (n,), n = x.shape[-1]; eps >= 0 is used exactly as the float64 given.

    {keywords}

    Example::

        >>> numeq.reference.layernorm(np.array([[1.0, 3.0]]), eps=0.0)
        array([[-1.,  1.]])
        >>> numeq.reference.layernorm(np.array([[1.0, 3.0]]), gamma=np.array([2.0, 2.0]), beta=np.array([1.0, 1.0]), eps=0.0)
        array([[-1.,  3.]])
    """
    cast = _out(out, cast)
    return _core.reference_norm(_values(x, in_fmt, "x"), _affine(gamma, "gamma"), _affine(beta, "beta"), _eps(eps),
                                True, *cast)


@_reference
def rmsnorm(
    x: Any, gamma: Any = None, beta: Any = None, *, eps: float = 1e-6, in_fmt: str | None = None,
    out: str = "fp32", cast: CastKeywords,
) -> np.ndarray:
    """x / sqrt(mean(x^2) + eps) * gamma + beta over the last axis, every element correctly rounded
    into ``out``. gamma and beta have shape (n,); eps >= 0 is used exactly as the float64 given.

    {keywords}

    Example::

        >>> numeq.reference.rmsnorm(np.array([[3.0, 4.0]]), eps=0.0, out="fp64")
        array([[0.84852814, 1.13137085]])
    """
    cast = _out(out, cast)
    return _core.reference_norm(_values(x, in_fmt, "x"), _affine(gamma, "gamma"), _affine(beta, "beta"), _eps(eps),
                                False, *cast)


def _attention_scores_shape(q: np.ndarray, k: np.ndarray) -> tuple[int, ...] | None:
    """(..., Lq, Lk): the shape of q @ k^T with the batch dimensions broadcast (as far as they do);
    None when q or k has fewer than two dimensions (the operation reports that)."""
    if np.ndim(q) < 2 or np.ndim(k) < 2:
        return None
    try:
        batch = np.broadcast_shapes(q.shape[:-2], k.shape[:-2])
    except ValueError:
        batch = q.shape[:-2]  # the operation reports the mismatch itself
    return batch + (q.shape[-2], k.shape[-2])


def _attention_mask(mask: Any, scores: tuple[int, ...] | None) -> np.ndarray:
    """The one reading of an attention mask (numeq.reference.attention and numeq.ops.attention):
    boolean as torch's scaled_dot_product_attention (True: the key takes part, additive 0; False:
    it does not, additive -inf), or additive reals; broadcast to the score shape (..., Lq, Lk) as
    C-order float64 values."""
    m = _array(mask, "mask")
    if m.dtype == np.bool_:
        m = np.where(m, 0.0, -np.inf)
    elif not (np.issubdtype(m.dtype, np.floating) or np.issubdtype(m.dtype, np.integer)) and m.dtype not in _FORMAT_OF_DTYPE:
        raise TypeError(f"mask: expected a boolean or real array, got dtype {m.dtype}")
    else:
        m = _values(m, None, "mask")
    if scores is None:
        return np.asarray(m, dtype=np.float64, order="C")
    try:
        return np.asarray(np.broadcast_to(m, scores), dtype=np.float64, order="C")
    except ValueError:
        raise ValueError(f"mask: shape {m.shape} does not broadcast to the score shape {scores} (..., Lq, Lk)") from None


@_reference
def attention(
    q: Any, k: Any, v: Any, *, mask: Any = None, causal: bool = False, scale: float | None = None,
    in_fmt: str | None = None, out: str = "fp32", cast: CastKeywords,
) -> np.ndarray:
    """softmax(q @ k^T * scale + mask) @ v, every element correctly rounded into ``out``.

    q[..., Lq, d], k[..., Lk, d], v[..., Lk, dv]; batch dimensions broadcast as in numpy.
    ``scale`` defaults to exactly 1/sqrt(d) (the real number). ``mask`` broadcasts to
    (..., Lq, Lk): boolean (True: the key takes part, as torch's scaled_dot_product_attention) or
    additive floats (-inf excludes a key). ``causal=True`` lets query i see keys j <= i (top-left
    aligned, as torch's is_causal). Excluded keys take no part at all; a query with none is NaN.

    Cost: a double-precision fast path with proven bounds decides nearly every element of an
    output of up to 32 bits (fp32 at sequence 2048, head dim 64: about 10x numpy's float64
    attention); ``out="fp64"`` asks for more than double arithmetic can certify and takes the MPFR
    loop (about a millisecond per element at sequence 2048).

    {keywords}

    Example::

        >>> rng = np.random.default_rng(0)
        >>> q, k, v = (rng.standard_normal((2, 4, 8)).astype(np.float32) for _ in range(3))
        >>> numeq.reference.attention(q, k, v).shape
        (2, 4, 8)
        >>> out = numeq.reference.attention(q, k, v, causal=True)
        >>> bool(np.allclose(out[:, 0], v[:, 0]))     # the first query sees only the first key
        True
    """
    cast = _out(out, cast)
    causal = _check_bool(causal, "causal")
    if scale is not None:
        scale = _check_real(scale, "scale")
    qv, kv, vv = _values(q, in_fmt, "q"), _values(k, in_fmt, "k"), _values(v, in_fmt, "v")
    for a, name, what in ((qv, "q", "(..., Lq, d)"), (kv, "k", "(..., Lk, d)"), (vv, "v", "(..., Lk, dv)")):
        if a.ndim < 2:
            raise ValueError(f"{name}: expected shape {what}, got {a.shape}")
    if kv.shape[-1] != qv.shape[-1]:
        raise ValueError(f"k: the last dimension (d) must equal q's: q {qv.shape}, k {kv.shape}")
    if vv.shape[-2] != kv.shape[-2]:
        raise ValueError(f"v: the second-to-last dimension (Lk) must equal k's: k {kv.shape}, v {vv.shape}")
    try:
        batch = np.broadcast_shapes(qv.shape[:-2], kv.shape[:-2])
    except ValueError:
        raise ValueError(f"k: batch dimensions {kv.shape[:-2]} do not broadcast with q's {qv.shape[:-2]}") from None
    try:
        batch = np.broadcast_shapes(batch, vv.shape[:-2])
    except ValueError:
        raise ValueError(f"v: batch dimensions {vv.shape[:-2]} do not broadcast with q's and k's {batch}") from None
    scores = batch + (qv.shape[-2], kv.shape[-2])
    mv = None if mask is None else _attention_mask(mask, scores)

    def full(a: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(np.broadcast_to(a, batch + a.shape[-2:]), dtype=np.float64)

    return _core.reference_attention(full(qv), full(kv), full(vv), mv, bool(causal), scale, *cast)
