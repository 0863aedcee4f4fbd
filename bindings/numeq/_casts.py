"""Casts between formats: numeq.round, encode, cast (one rounding into a format, under the cast
keywords) and decode (bit patterns back to values)."""

from __future__ import annotations

from typing import Any

import numpy as np

from . import _core
from ._arrays import _BITS_DTYPE, _NUMPY_TYPES, _array, _as_source, _check_format, _check_str, _native, _result, _sized
from ._cast_keywords import CastKeywords, takes_cast_keywords


def _cast(x: Any, fmt: str, cast: CastKeywords, want_values: bool, want_bits: bool):
    """(values, bits, was_scalar) of x cast into fmt: the one call behind round, encode and cast."""
    _check_str(fmt, "fmt")
    a, source, scalar = _as_source(x)
    with _sized("x"):
        values, bits = _core.cast(a, source, fmt, *cast, want_values, want_bits)
    return values, bits, scalar


@takes_cast_keywords
def round(x: Any, fmt: str, *, cast: CastKeywords) -> Any:  # noqa: A001 - the public name is part of numeq's contract
    """x rounded into ``fmt``; float64 values (NaN where the format gives NaN).

    Stochastic rounding draws element i's bits from (seed, i), i the C-order index, so results
    do not depend on threads or layout. ``subnormals="flush_inputs"`` flushes inputs that are
    subnormal in x's own format (float32 for float32 arrays, bf16 for ml_dtypes bfloat16, ...).

    ``x``: an array (any numeric dtype: float16/32/64, ml_dtypes, integers), a scalar or a list;
    ``fmt``: a name of ``numeq.formats()``. ``rounding``: one of ``numeq.ROUNDINGS`` ("nearest_even",
    "nearest_away", "toward_zero", "upward", "downward", "odd", "stochastic"); ``overflow``: one of
    ``numeq.OVERFLOWS`` ("ieee": Inf, or NaN where the format has no Inf; "saturate": the largest finite
    value), judged after rounding; ``subnormals``: one of ``numeq.SUBNORMALS`` ("keep",
    "flush_outputs", "flush_inputs", "flush_both"); ``seed`` and ``random_bits`` (1 to 64): the key of
    stochastic rounding and how many random bits it compares with the discarded ones.

    Example::

        >>> x = np.array([1.0, 1 + 2**-8, 1 + 3 * 2**-8])   # two ties between bf16 neighbours
        >>> numeq.round(x, "bf16")
        array([1.      , 1.      , 1.015625])
        >>> numeq.round(x, "bf16", rounding="upward")
        array([1.       , 1.0078125, 1.015625 ])
        >>> numeq.round(465.0, "e4m3fn"), numeq.round(465.0, "e4m3fn", overflow="saturate")
        (nan, 448.0)
    """
    values, _, scalar = _cast(x, fmt, cast, True, False)
    return _result(values, scalar)


@takes_cast_keywords
def encode(x: Any, fmt: str, *, cast: CastKeywords) -> Any:
    """Bit patterns of x in ``fmt``: uint8 for 8-bit (and 6/4-bit) formats, uint16, uint32.

    ``rounding`` (``numeq.ROUNDINGS``), ``overflow`` (``numeq.OVERFLOWS``), ``subnormals``
    (``numeq.SUBNORMALS``), ``seed``, ``random_bits``: as ``numeq.round``; ``fmt``: a name of
    ``numeq.formats()``.

    Example::

        >>> numeq.encode([1.0, -2.0, 0.1], "bf16")
        array([16256, 49152, 15821], dtype=uint16)
        >>> numeq.encode(448.0, "e4m3fn")
        126
    """
    _, bits, scalar = _cast(x, fmt, cast, False, True)
    return _result(bits, scalar)


@takes_cast_keywords
def cast(x: Any, fmt: str, *, cast: CastKeywords) -> np.ndarray:
    """x cast into ``fmt`` as an array of that dtype (numpy or ml_dtypes), where one exists.

    ``rounding`` (``numeq.ROUNDINGS``), ``overflow`` (``numeq.OVERFLOWS``), ``subnormals``
    (``numeq.SUBNORMALS``), ``seed``, ``random_bits``: as ``numeq.round``; ``fmt``: a format with a
    numpy or ml_dtypes dtype (fp64, fp32, fp16, bf16, the fp8 formats, ...).

    Example::

        >>> y = numeq.cast([1.0, 0.1, 1e6], "fp16")
        >>> y.dtype, y.tolist()
        (dtype('float16'), [1.0, 0.0999755859375, inf])
        >>> numeq.cast([0.1], "bf16").dtype
        dtype(bfloat16)
    """
    _check_str(fmt, "fmt")
    if fmt not in _NUMPY_TYPES:
        have = ", ".join(_NUMPY_TYPES)
        raise ValueError(f"fmt: '{fmt}' has no numpy/ml_dtypes dtype; formats with one: {have}")
    _, bits, _ = _cast(x, fmt, cast, False, True)
    return np.asarray(bits).view(_NUMPY_TYPES[fmt])


def decode(bits: Any, fmt: str) -> Any:
    """Values (float64) of bit patterns of ``fmt``; integer formats read two's complement.

    ``bits``: unsigned integers (an array or a scalar) holding bit patterns of ``fmt``, a name
    of ``numeq.formats()``.

    Example::

        >>> numeq.decode(np.array([0x3F80, 0xC000], dtype=np.uint16), "bf16")
        array([ 1., -2.])
        >>> numeq.decode(0x7E, "e4m3fn")
        448.0
    """
    _check_format(fmt, "fmt")
    a = _native(_array(bits, "bits"))
    scalar = a.ndim == 0 and not isinstance(bits, np.ndarray)
    if a.dtype.kind not in "iu":
        raise TypeError(f"bits: expected an integer array of bit patterns, got dtype {a.dtype}")
    info = _core.format_info(fmt)
    width = info["storage_bits"]
    if a.dtype.kind == "i" or a.dtype.itemsize * 8 > width:
        lo = -(1 << (width - 1)) if a.dtype.kind == "i" else 0
        if a.size and (a.min() < lo or a.max() >= (1 << width)):
            raise ValueError(f"bits: values must fit in {width} bits for format {fmt}")
        a = a.astype(_BITS_DTYPE[width])  # two's complement wrap of negative patterns
    return _result(_core.decode(a, fmt), scalar)

