"""The quantised operations of the catalogue (scaled fp8 and int8 matmuls, casts, quantisation and
dequantisation); numeq.ops re-exports them."""

from __future__ import annotations

from typing import Any

import numpy as np

from . import _core, _registry
from ._registry import _integer_codes
from ._arrays import (INT32, INT64, SIZE, _array, _check_format, _check_int, _check_real, _check_str,
                      _int64_array, _real_array, _renamed)
from ._cast_keywords import check_cast_keywords
from ._op import Op, _c64, _out
from .machines import _float64_values as _values  # the catalogue takes float64 values

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
        return _registry.build("scaled_fp8_matmul", {"a": av, "b": bv, "scale_a": sa, "scale_b": sb},
                               {"scaling": scaling}, fa, _out(out, "fp32"))


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
    a64 = _integer_codes(a, "a")
    b64 = _integer_codes(b, "b")
    if requantize is None:
        return _registry.build("int8_matmul", {"a": a64, "b": b64}, {"overflow": overflow}, "int8", None)
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
    cast = check_cast_keywords(rounding, overflow, subnormals, seed)  # the op draws no random_bits
    return Op(_core.cases_cast(_c64(values), f, out, cast.rounding, cast.overflow, cast.subnormals, cast.seed))


def _quant(quantize_: bool, x: Any, fmt: str, scale: Any, zero_point: Any, axis: int, block: int, in_fmt: str | None,
           rounding: str, range_: str, seed: int, out: str) -> Op:
    _check_str(fmt, "fmt")
    cast = check_cast_keywords(rounding, seed=seed)
    for value, name in ((range_, "range"), (out, "out")):
        _check_str(value, name)
    axis = _check_int(axis, "axis", *INT32)
    block = _check_int(block, "block", *SIZE)
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
        return Op(_core.cases_quantize(quantize_, _c64(values), f, fmt, s, z, axis, block, cast.rounding, range_, cast.seed, out))


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
