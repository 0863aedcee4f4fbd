"""Quantisation: integer codes (quantize, dequantize, quant_params) and block-scaled floats
(block_quantize, mx_quantize, block_dequantize), each exact and rounded once."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from . import _core
from ._arrays import (SIZE, _array, _as_source, _check_format, _check_int, _check_str, _int64_array, _native,
                      _real_array, _renamed, _result, _short, format_info, formats)
from ._cast_keywords import check_cast_keywords


def _groups(shape: tuple[int, ...], axis: int | None, block_size: int | None) -> tuple[int, int]:
    """(axis, block) of a QuantGroups layout over an array of this shape: axis checked and made
    non-negative (default the last), block dividing that axis (default 1: per channel)."""
    rank = len(shape)
    ax = -1 if axis is None else _check_int(axis, "axis")
    if rank == 0:  # the wording of numeq::axis_index (formats/shape.hpp)
        raise ValueError("axis: x of shape () has no axis")
    if not -rank <= ax < rank:
        raise ValueError(f"axis: {ax} is out of range for x of shape {tuple(shape)} (valid: {-rank} .. {rank - 1})")
    ax %= rank
    block = 1 if block_size is None else _check_int(block_size, "block_size", 1, SIZE[1])
    if shape[ax] % block:
        raise ValueError(f"block_size: {block} does not divide axis {ax} of length {shape[ax]}")
    return ax, block


def _quant_layout(x: np.ndarray, scale: Any, axis: int | None, block_size: int | None, parameter: str = "scale"):
    """Broadcast scale to x's rank per the QuantGroups layout; returns (scale, axis, block)."""
    s = _real_array(scale, parameter)
    rank = x.ndim
    if axis is None and block_size is None:
        if s.size != 1:
            raise ValueError(f"{parameter}: per-tensor quantisation takes one scale; pass axis= for per-channel")
        return s.reshape((1,) * rank), 0, 1
    ax, block = _groups(x.shape, axis, block_size)
    if block_size is None:  # per channel: one scale per index along axis
        if s.ndim == 1 and s.size == x.shape[ax]:
            shape = [1] * rank
            shape[ax] = s.size
            s = s.reshape(shape)
        elif s.size == 1:
            s = s.reshape((1,) * rank)
    else:
        want = list(x.shape)
        want[ax] //= block
        if s.ndim != rank:
            if s.size == 1:
                s = s.reshape((1,) * rank)
            else:
                raise ValueError(f"{parameter}: per-block scales need shape {tuple(want)}, got {s.shape}")
    return s, ax, block


def _zero_points(zero_point: Any, scale_shape: tuple[int, ...]) -> np.ndarray:
    """zero_point laid out like the scales: a scalar, one per channel (1-D) or the scales' shape."""
    zp = _int64_array(zero_point, "zero_point")
    if zp.ndim == 1 and zp.size > 1 and zp.size == int(np.prod(scale_shape)):
        zp = zp.reshape(scale_shape)
    try:
        return np.ascontiguousarray(np.broadcast_to(zp, scale_shape))
    except ValueError:
        raise ValueError(f"zero_point: shape {zp.shape} does not match the scales' shape {scale_shape}") from None


def quantize(
    x: Any,
    fmt: str = "int8",
    *,
    scale: Any,
    zero_point: Any = 0,
    axis: int | None = None,
    block_size: int | None = None,
    range: str = "full",  # noqa: A002
    rounding: str = "nearest_even",
    seed: int = 0,
    random_bits: int = 32,
) -> np.ndarray:
    """q = clamp(round(x / scale) + zero_point) in int8/uint8/int32 (int64 array of codes).

    Per tensor (scalar scale), per channel (``axis=a``, one scale per index along a) or per block
    (``block_size=N`` along ``axis``, default last: scale shape = x.shape with that axis / N).
    ``range="symmetric"`` drops the lowest code (int8 [-127, 127], uint8 [1, 255]). x / scale is
    exact and rounded once.

    ``fmt``: "int8", "uint8" or "int32"; ``range``: "full" or "symmetric"; ``rounding``: one of
    ``numeq.ROUNDINGS`` (``seed``, ``random_bits``: as ``numeq.round``, for "stochastic").

    Example::

        >>> x = np.array([-1.0, 0.0, 0.26, 1.0])
        >>> numeq.quantize(x, "int8", scale=1 / 127)
        array([-127,    0,   33,  127])
        >>> numeq.quantize(x, "uint8", scale=1 / 127, zero_point=128, range="symmetric")
        array([  1, 128, 161, 255])
    """
    for value, parameter in ((fmt, "fmt"), (range, "range")):
        _check_str(value, parameter)
    cast = check_cast_keywords(rounding, seed=seed, random_bits=random_bits)
    a, source, scalar = _as_source(x)
    s, ax, block = _quant_layout(a, scale, axis, block_size)
    zp = _zero_points(zero_point, s.shape)
    out = _core.quantize(a, source, fmt, s, zp, ax, block, range, cast.rounding, cast.seed, cast.random_bits)
    return _result(out, scalar)


def dequantize(
    q: Any,
    *,
    scale: Any,
    zero_point: Any = 0,
    axis: int | None = None,
    block_size: int | None = None,
    out: str = "fp64",
    rounding: str = "nearest_even",
    fmt: str | None = None,
) -> np.ndarray:
    """(q - zero_point) * scale, exact, rounded once into ``out`` (float64 values).

    ``q``: integer codes (an integer array). ``fmt`` (int8, uint8, int32): the integer format the
    codes belong to; every code must lie in its range (ValueError naming ``q`` otherwise). Without
    ``fmt`` the codes must be int64 values (a uint64 code above 2^63 - 1 is refused, never wrapped).

    ``axis``, ``block_size``: the groups the scales (and zero points) belong to, as ``quantize``;
    ``out``: the output format; ``rounding``: one of ``numeq.ROUNDINGS``.

    Example::

        >>> numeq.dequantize(np.array([-127, 0, 33, 127]), scale=0.5, out="fp32")
        array([-63.5,   0. ,  16.5,  63.5])
        >>> numeq.dequantize(np.array([1, 2]), scale=0.1, out="bf16")
        array([0.10009766, 0.20019531])
    """
    a = _native(_array(q, "q"))
    if a.dtype.kind not in "iu":
        raise TypeError(f"q: expected integer codes, got dtype {a.dtype}")
    _check_str(out, "out")
    _check_str(rounding, "rounding")
    if fmt is not None:
        _check_format(fmt, "fmt")
        info = format_info(fmt)
        if info["kind"] != "integer":
            integers = [n for n in formats() if format_info(n)["kind"] == "integer"]
            raise ValueError(f"fmt: {fmt!r} is not an integer format; codes belong to one of {', '.join(integers)}")
        low, high = int(info["min"]), int(info["max"])
    else:
        fmt, low, high = "int64", -(2**63), 2**63 - 1
    if a.size:
        lo, hi = int(a.min()), int(a.max())  # Python ints: no wraparound in the comparison
        if lo < low or hi > high:
            bad = lo if lo < low else hi
            i = int(np.flatnonzero(a.reshape(-1) == bad)[0])
            raise ValueError(f"q: element {i} (C order) = {bad} is not a code of {fmt}: codes are integers in "
                             f"[{low}, {high}]")
    s, ax, block = _quant_layout(a, scale, axis, block_size)
    with _renamed({"codes": "q, zero_point"}):  # q - zero_point beyond int64
        return _core.dequantize(a.astype(np.int64), s, _zero_points(zero_point, s.shape), ax, block, out, rounding)


def quant_params(
    x: Any,
    fmt: str = "int8",
    *,
    axis: int | None = None,
    block_size: int | None = None,
    range: str = "full",  # noqa: A002
) -> tuple[np.ndarray, np.ndarray]:
    """(scale, zero_point) from the data, in the layout quantize() takes.

    Over each group's range widened to include 0: symmetric: scale = amax / ((qmax - qmin) / 2)
    (127 for int8 and uint8), zero point the middle code (0 for int8, 128 for uint8); full: scale =
    (max - min) / (qmax - qmin), zero_point = qmin - round(min / scale). The range and quotient
    are exact and the scale is rounded once to fp32.

    ``x``: the data; ``fmt``: "int8", "uint8" or "int32"; ``axis``, ``block_size``: the groups, as
    ``quantize`` (None: one scale for the tensor); ``range``: "full" or "symmetric".

    Example::

        >>> x = np.array([[-1.0, 0.5], [2.0, 4.0]])
        >>> scale, zero_point = numeq.quant_params(x, "int8", range="symmetric")
        >>> scale, zero_point
        (array(0.03149606), array(0))
        >>> numeq.quant_params(x, "uint8", axis=0)
        (array([0.00588235, 0.01568628]), array([170,   0]))
    """
    _check_str(fmt, "fmt")
    _check_str(range, "range")
    a, source, _ = _as_source(x)
    rank = a.ndim
    if axis is None and block_size is None:
        shape = [1] * rank
        ax, block = 0, 1
    else:
        ax, block = _groups(a.shape, axis, block_size)
        shape = [1] * rank if block_size is None else list(a.shape)
        shape[ax] = a.shape[ax] // block
    scale, zp = _core.quant_params(a, source, fmt, shape, ax, block, range)
    if axis is not None and block_size is None:  # per channel: 1-D, as quantize takes it
        return scale.reshape(-1), zp.reshape(-1)
    if axis is None and block_size is None:
        return scale.reshape(()), zp.reshape(())
    return scale, zp


def block_quantize(
    x: Any,
    fmt: str = "e4m3fn",
    *,
    block: Sequence[int] = (32,),
    scale_fmt: str = "e8m0fnu",
    scale_rounding: str = "nearest_even",
    rounding: str = "nearest_even",
    overflow: str = "saturate",
    subnormals: str = "keep",
    seed: int = 0,
    random_bits: int = 32,
    scale_rule: str = "quotient",
) -> tuple[np.ndarray, np.ndarray]:
    """Block-scaled quantisation: (element values as float64, scales as float64).

    One scale per block over the last ``len(block)`` axes: ``block=(32,)`` with e8m0fnu scales is
    OCP MX (see mx_quantize); ``(128,)`` / ``(128, 128)`` with fp32 scales is DeepSeek-V3's
    activation / weight scheme. ``scale_rule="quotient"``: scale = round(amax / max(fmt),
    scale_fmt, scale_rounding); ``"ocp"``: scale = 2^(floor(log2 amax) - emax(fmt)) (OCP MX v1.0
    s6.3; scale_rounding unused); ``"ocp_headroom"``: twice that, 2^(floor(log2 amax) - emax(fmt) + 1),
    whose quotients never clip (AWS's NeuronCore-v4 quantize_mx). element = round(x / scale) exactly,
    into ``fmt``.

    ``rounding`` (``numeq.ROUNDINGS``), ``overflow`` (``numeq.OVERFLOWS``; default "saturate"),
    ``subnormals`` (``numeq.SUBNORMALS``), ``seed``, ``random_bits``: how the elements are rounded
    into ``fmt``, as ``numeq.round``. ``scale_rounding``: one of ``numeq.ROUNDINGS``.

    Example::

        >>> x = np.linspace(-1, 1, 64).reshape(2, 32)
        >>> elements, scales = numeq.block_quantize(x, "e4m3fn", block=(32,), scale_fmt="fp32")
        >>> elements.shape, scales.shape
        ((2, 32), (2, 1))
        >>> bool(np.all(np.abs(elements) <= 448))
        True
    """
    for value, parameter in ((fmt, "fmt"), (scale_fmt, "scale_fmt"), (scale_rounding, "scale_rounding")):
        _check_str(value, parameter)
    cast = check_cast_keywords(rounding, overflow, subnormals, seed, random_bits)
    _check_str(scale_rule, "scale_rule")
    a, source, _ = _as_source(x)
    values, _, scales = _core.block_quantize(a, source, fmt, _block_extents(block), scale_fmt, scale_rounding,
                                             *cast, scale_rule)
    return values, scales


def _block_extents(block: Any) -> list[int]:
    if isinstance(block, (int, np.integer, bool, np.bool_)):
        return [_check_int(block, "block", 1, SIZE[1])]
    if not isinstance(block, (list, tuple)) or not block:
        raise TypeError(f"block: expected a positive integer or a non-empty sequence of them, got {_short(block)}")
    return [_check_int(b, "block", 1, SIZE[1]) for b in block]


def mx_quantize(x: Any, fmt: str = "e4m3fn", *, scale_rule: str = "ocp", scale_rounding: str | None = None,
                **kwargs: Any):
    """OCP MX: blocks of 32 along the last axis, one e8m0fnu scale each (see block_quantize).

    ``scale_rule="ocp"`` (default) is the spec's (OCP MX v1.0 s6.3): shared_exp =
    floor(log2(amax)) - emax_elem, elements beyond max(fmt) saturate. ``scale_rule="quotient"``
    rounds amax / max(fmt) into e8m0 by ``scale_rounding`` (default nearest_even, as ml_dtypes;
    "upward" as CUDA/CUTLASS), which never clips but may lose a bit of precision per block.

    ``x``: the data; ``fmt``: the element format (e4m3fn, e5m2, e3m2fn, e2m3fn, e2m1fn); other
    keywords (``rounding``, ``overflow``, ...) as ``block_quantize``.

    Example::

        >>> x = np.linspace(-1, 1, 64).reshape(2, 32)
        >>> elements, scales = numeq.mx_quantize(x, "e4m3fn")
        >>> scales
        array([[0.00390625],
               [0.00390625]])
        >>> elements[0, :3]
        array([-256., -240., -240.])
    """
    _check_str(scale_rule, "scale_rule")
    if scale_rule == "ocp" and scale_rounding is not None:
        raise ValueError("scale_rounding: applies to scale_rule='quotient' only; the OCP rule (scale_rule='ocp', "
                         "the default) rounds no quotient")
    with _renamed({"block": "x (MX blocks of 32 along the last axis)"}):  # a shape the fixed blocks do not fit is x's
        return block_quantize(x, fmt, block=(32,), scale_fmt="e8m0fnu",
                              scale_rounding="nearest_even" if scale_rounding is None else scale_rounding,
                              scale_rule=scale_rule, **kwargs)


def block_dequantize(
    values: Any, scales: Any, *, block: Sequence[int] = (32,), out: str = "fp64", rounding: str = "nearest_even"
) -> np.ndarray:
    """element * scale per block, rounded once into ``out`` (float64 values).

    ``values``, ``scales``: block_quantize's two arrays; ``block``: the block shape they were made
    with; ``out``: the output format; ``rounding``: one of ``numeq.ROUNDINGS``.

    Example::

        >>> x = np.linspace(-1, 1, 64).reshape(2, 32)
        >>> elements, scales = numeq.block_quantize(x, "e4m3fn", block=(32,), scale_fmt="fp32")
        >>> y = numeq.block_dequantize(elements, scales, block=(32,))
        >>> y.shape
        (2, 32)
        >>> x[0, :3]
        array([-1.        , -0.96825397, -0.93650794])
        >>> y[0, :3]
        array([-1.00000004, -1.00000004, -0.92857147])
    """
    v = _real_array(values, "values")
    _check_str(out, "out")
    _check_str(rounding, "rounding")
    return _core.block_dequantize(v, _real_array(scales, "scales"), _block_extents(block), out, rounding)

