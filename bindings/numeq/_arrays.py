"""Array-level Python API over numeq._core: dtype handling, scalars, ml_dtypes interop."""

from __future__ import annotations

import functools

import contextlib
from typing import Any, Iterator, Mapping, Sequence

import numpy as np

from . import _core

try:  # ml_dtypes is a dependency, but keep the core usable without it.
    import ml_dtypes as _ml
except ImportError:  # pragma: no cover
    _ml = None

# numeq format name -> numpy dtype that stores it natively (for cast() outputs and ml_dtypes inputs).
_NUMPY_TYPES: dict[str, Any] = {"fp64": np.float64, "fp32": np.float32, "fp16": np.float16}
if _ml is not None:
    _NUMPY_TYPES.update(
        {
            "bf16": _ml.bfloat16,
            "e4m3fn": _ml.float8_e4m3fn,
            "e4m3": _ml.float8_e4m3,
            "e4m3fnuz": _ml.float8_e4m3fnuz,
            "e5m2": _ml.float8_e5m2,
            "e5m2fnuz": _ml.float8_e5m2fnuz,
            "e8m0fnu": _ml.float8_e8m0fnu,
            "e3m2fn": _ml.float6_e3m2fn,
            "e2m3fn": _ml.float6_e2m3fn,
            "e2m1fn": _ml.float4_e2m1fn,
        }
    )
_FORMAT_OF_DTYPE = {np.dtype(t): name for name, t in _NUMPY_TYPES.items()}
# The extension reads arrays of these dtypes as bit patterns of their formats, in place (its
# array intake: one pass to float64, checks in place); it knows them by their type numbers.
for _dtype, _name in _FORMAT_OF_DTYPE.items():
    if _name not in ("fp32", "fp64"):
        _core.register_dtype(_dtype, _name)
# Each dtype the extension's intake reads in place -> the format its values are taken to be of
# (integers: their values, as fp64; int64 / uint64 checked to be exact there).
_INTAKE: dict[np.dtype, str] = {
    **_FORMAT_OF_DTYPE,
    **{np.dtype(t): "fp64" for t in (np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64)},
}
_BITS_DTYPE = {8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}


def formats() -> list[str]:
    """Names of every supported format (floating formats first, then integers).

    Example::

        >>> names = numeq.formats()
        >>> "bf16" in names, "e4m3fn" in names, names[-3:]
        (True, True, ['int8', 'uint8', 'int32'])
    """
    return list(_core.formats())


def format_info(name: str) -> dict[str, Any]:
    """Parameters, extreme values and special encodings of a format.

    ``name``: a name of ``formats()``. The dict holds the format's parameters (``bits``,
    ``exponent_bits``, ``mantissa_bits``, ``bias``, ``emin``, ``emax``), extreme values (``max``,
    ``min_normal``, ``min_subnormal``, ``epsilon``, ``unit_roundoff``) and special encodings
    (``has_inf``, ``has_nan``, ``nan_bits``, ``inf_bits``, ...).

    Example::

        >>> info = numeq.format_info("e4m3fn")
        >>> info["kind"], info["max"]
        ('floating', 448.0)
        >>> sorted(info)
        ['bias', 'bits', 'emax', 'emin', 'epsilon', 'exponent_bits', 'has_inf', 'has_nan', 'has_negative_zero', 'has_subnormals', 'has_zero', 'inf_bits', 'kind', 'mantissa_bits', 'max', 'max_bits', 'min_normal', 'min_subnormal', 'name', 'nan_bits', 'precision', 'signed', 'specials', 'storage_bits', 'storage_shift', 'unit_roundoff']
    """
    _check_str(name, "name")
    return dict(_core.format_info(name))


# The formats are fixed when the extension is built: their names and parameters are read once.
FORMAT_NAMES: frozenset[str] = frozenset(_core.formats())


@functools.lru_cache(maxsize=None)
def _info(name: str) -> dict[str, Any]:
    """format_info for the package's own reads (shared: never modified)."""
    return dict(_core.format_info(name))


# ---------------------------------------------------------------------------------------------
# Argument validation. Every public function sends its scalar and array arguments through these
# few checks before anything reaches the extension, so that bad input raises TypeError (wrong
# kind of value) or ValueError (right kind, bad value) with a message that starts with the
# parameter's name, never pybind11's "incompatible function arguments" or a numpy internal error.
# ---------------------------------------------------------------------------------------------

# Ranges of the C++ integer types the extension's parameters have (pybind11 refuses anything
# outside them with a signature dump, so they are checked here first).
INT32 = (-(2**31), 2**31 - 1)
INT64 = (-(2**63), 2**63 - 1)
UINT64 = (0, 2**64 - 1)
SIZE = (0, 2**63 - 1)  # std::size_t counts, kept within ptrdiff_t (numpy's index type)


def _check_str(value: Any, parameter: str, choices: Sequence[str] | None = None) -> str:
    """value, checked to be a str (without NUL characters, which C++ would cut the name at) and,
    when ``choices`` are given, one of them."""
    if not isinstance(value, str):
        raise TypeError(f"{parameter}: expected a string, got {type(value).__name__} {_short(value)}")
    if "\0" in value:
        raise ValueError(f"{parameter}: contains a NUL character: {value!r}")
    if choices is not None and value not in choices:
        raise ValueError(f"{parameter}: unknown value {value!r}; valid: {', '.join(choices)}")
    return value


def _check_int(value: Any, parameter: str, lo: int | None = INT64[0], hi: int | None = INT64[1]) -> int:
    """int(value) for a Python or numpy integer in [lo, hi]; bool, floats (even integral ones) and
    strings are refused: an integer parameter never rounds or parses its argument."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{parameter}: expected an integer, got {type(value).__name__} {_short(value)}")
    v = int(value)
    if (lo is not None and v < lo) or (hi is not None and v > hi):
        lo_text = "-inf" if lo is None else str(lo)
        hi_text = "inf" if hi is None else str(hi)
        raise ValueError(f"{parameter}: must be an integer in [{lo_text}, {hi_text}], got {v}")
    return v


def _check_bool(value: Any, parameter: str) -> bool:
    """bool(value) for True / False (Python or numpy); "yes", 1 and 0.5 are refused."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{parameter}: expected True or False, got {type(value).__name__} {_short(value)}")
    return bool(value)


def _check_real(value: Any, parameter: str, *, finite: bool = False) -> float:
    """float(value) for a real number (Python or numpy int or float, not bool, not complex)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{parameter}: expected a real number, got {type(value).__name__} {_short(value)}")
    try:
        v = float(value)
    except OverflowError:
        raise ValueError(f"{parameter}: {value} is beyond the float64 range") from None
    if finite and not np.isfinite(v):
        raise ValueError(f"{parameter}: expected a finite number, got {v!r}")
    return v


def _check_format(value: Any, parameter: str) -> str:
    """A format name numeq knows (the message lists them)."""
    _check_str(value, parameter)
    if value not in FORMAT_NAMES:
        raise ValueError(f"{parameter}: unknown format {value!r}; valid: {', '.join(_core.formats())}")
    return value


@contextlib.contextmanager
def _renamed(prefixes: Mapping[str, str]) -> Iterator[None]:
    """Re-raises a ValueError / TypeError whose message starts with ``old:`` as ``new:``, for the
    lower layers that name a parameter differently (the extension's "fmt" is this function's "out")."""
    try:
        yield
    except (ValueError, TypeError) as e:
        message = str(e)
        for old, new in prefixes.items():
            if message.startswith(old + ":"):
                raise type(e)(new + message[len(old):]) from None
        raise


@contextlib.contextmanager
def _sized(parameter: str) -> Iterator[None]:
    """Names the parameter in a MemoryError raised by the extension (a size inside it too large)."""
    try:
        yield
    except MemoryError as e:
        raise MemoryError(f"{parameter}: {e}") from None


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _array(x: Any, parameter: str) -> np.ndarray:
    """The one array intake: np.asarray(x) for numbers (any integer, float or ml_dtypes dtype, or
    bool), refusing what numpy would turn into something else: ragged nested sequences, object,
    string, bytes, complex, datetime, structured and masked arrays."""
    if isinstance(x, np.ma.MaskedArray):
        raise TypeError(f"{parameter}: masked arrays are not supported (numeq would ignore the mask); "
                        "pass the values to use, e.g. x.filled(...) or x.compressed()")
    if x is None:
        raise TypeError(f"{parameter}: expected an array or a number, got None")
    if isinstance(x, (str, bytes)):
        raise TypeError(f"{parameter}: expected an array or a number, got {type(x).__name__} {_short(x)}")
    try:
        a = np.asarray(x)
    except ValueError as e:  # numpy >= 1.24: "setting an array element with a sequence ... inhomogeneous"
        raise ValueError(f"{parameter}: not a rectangular array of numbers (ragged nested sequences?): {e}") from None
    except (TypeError, OverflowError) as e:
        raise TypeError(f"{parameter}: cannot be read as an array of numbers: {e}") from None
    dt = a.dtype
    if dt.names is not None or dt.kind == "V" and dt not in _FORMAT_OF_DTYPE:
        raise TypeError(f"{parameter}: structured / void arrays are not supported (dtype {dt}); pass one field")
    if dt.kind == "O":
        raise TypeError(f"{parameter}: expected an array of numbers, got Python objects (dtype object: ragged "
                        "nested sequences, None, or integers beyond 64 bits?)")
    if dt.kind in "USmMc":
        what = {"U": "strings", "S": "bytes", "m": "timedeltas", "M": "datetimes", "c": "complex numbers"}[dt.kind]
        raise TypeError(f"{parameter}: expected real numbers, got {what} (dtype {dt})")
    return a


def _as_source(x: Any, parameter: str = "x") -> tuple[np.ndarray, str, bool]:
    """(array whose elements are fp32/fp64 values or bit patterns, source format, was_scalar)."""
    a = _native(_array(x, parameter))
    scalar = a.ndim == 0 and not isinstance(x, np.ndarray)
    dt = a.dtype
    if dt in _FORMAT_OF_DTYPE:
        name = _FORMAT_OF_DTYPE[dt]
        if name in ("fp32", "fp64"):
            return a, name, scalar
        bits = _core.format_info(name)["storage_bits"]
        return a.view(_BITS_DTYPE[bits]), name, scalar
    if dt.kind in "iub":
        f = a.astype(np.float64)
        with np.errstate(invalid="ignore"):  # 2**63 - 1 -> 2**63.0 does not fit back: that is the check
            exact = dt.itemsize < 8 or dt.kind == "b" or np.array_equal(f.astype(dt), a)
        if not exact:
            raise ValueError(f"{parameter}: 64-bit integers beyond 2^53 are not exact as floats")
        return f, "fp64", scalar
    if dt.kind == "f":  # long double and other float widths: go through float64 exactly if possible
        f = a.astype(np.float64)
        if not np.array_equal(f, a, equal_nan=True):
            raise ValueError(f"{parameter}: {dt} values are not exact in float64")
        return f, "fp64", scalar
    raise TypeError(
        f"{parameter}: expected a numeric array (float32, float64, float16, ml_dtypes, integers), "
        f"got dtype {dt}"
    )


def _native(a: np.ndarray) -> np.ndarray:
    """The same values in native byte order (the C++ engines read memory as it lies)."""
    if a.dtype.kind in "iuf" and not a.dtype.isnative:
        return a.astype(a.dtype.newbyteorder("="))
    return a


def _int64_array(value: Any, parameter: str) -> np.ndarray:
    """int64 copy of an integer-valued argument (zero points, codes): integer dtypes, or floats
    that hold integers; values beyond int64 are refused, never wrapped."""
    a = _native(_array(value, parameter))
    if a.dtype.kind == "f" or a.dtype in _FORMAT_OF_DTYPE:
        f = a.astype(np.float64)
        if not (np.all(np.isfinite(f)) and np.array_equal(f, np.round(f))):
            raise ValueError(f"{parameter}: must be integers, got {_short(value)}")
        if f.size and (f.min() < -(2.0**63) or f.max() >= 2.0**63):  # float comparisons, exact at 2^63
            raise ValueError(f"{parameter}: beyond the 64-bit integer range")
        return f.astype(np.int64)
    if a.dtype.kind not in "iub":
        raise ValueError(f"{parameter}: must be integers, got dtype {a.dtype}")
    if a.dtype == np.uint64 and a.size and a.max() > INT64[1]:
        raise ValueError(f"{parameter}: beyond the 64-bit integer range")
    return a.astype(np.int64)


def _real_array(value: Any, parameter: str) -> np.ndarray:
    """float64 copy of a real-valued argument (scales, element values); TypeError otherwise."""
    a = _array(value, parameter)
    if a.dtype.kind not in "iufb" and a.dtype not in _FORMAT_OF_DTYPE:
        raise TypeError(f"{parameter}: expected real numbers, got dtype {a.dtype}")
    return _native(a).astype(np.float64)


def _check_seed(seed: Any, random_bits: Any) -> tuple[int, int]:
    return _check_int(seed, "seed", *UINT64), _check_int(random_bits, "random_bits", 1, 64)


def _result(values: np.ndarray, scalar: bool) -> Any:
    return float(values) if scalar and values.dtype.kind == "f" else (int(values) if scalar else values)


def _cast(x, fmt, rounding, overflow, subnormals, seed, random_bits, want_values, want_bits):
    for value, parameter in ((fmt, "fmt"), (rounding, "rounding"), (overflow, "overflow"), (subnormals, "subnormals")):
        _check_str(value, parameter)
    seed, random_bits = _check_seed(seed, random_bits)
    a, source, scalar = _as_source(x)
    values, bits = _core.cast(a, source, fmt, rounding, overflow, subnormals, seed, random_bits, want_values, want_bits)
    return values, bits, scalar


def round(  # noqa: A001 - the public name is part of numeq's contract
    x: Any,
    fmt: str,
    *,
    rounding: str = "nearest_even",
    overflow: str = "ieee",
    subnormals: str = "keep",
    seed: int = 0,
    random_bits: int = 32,
) -> Any:
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
    values, _, scalar = _cast(x, fmt, rounding, overflow, subnormals, seed, random_bits, True, False)
    return _result(values, scalar)


def encode(
    x: Any,
    fmt: str,
    *,
    rounding: str = "nearest_even",
    overflow: str = "ieee",
    subnormals: str = "keep",
    seed: int = 0,
    random_bits: int = 32,
) -> Any:
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
    _, bits, scalar = _cast(x, fmt, rounding, overflow, subnormals, seed, random_bits, False, True)
    return _result(bits, scalar)


def cast(
    x: Any,
    fmt: str,
    *,
    rounding: str = "nearest_even",
    overflow: str = "ieee",
    subnormals: str = "keep",
    seed: int = 0,
    random_bits: int = 32,
) -> np.ndarray:
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
    _, bits, _ = _cast(x, fmt, rounding, overflow, subnormals, seed, random_bits, False, True)
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


def _quant_layout(x: np.ndarray, scale: Any, axis: int | None, block_size: int | None, parameter: str = "scale"):
    """Broadcast scale to x's rank per the QuantGroups layout; returns (scale, axis, block)."""
    s = _real_array(scale, parameter)
    rank = x.ndim
    if axis is None and block_size is None:
        if s.size != 1:
            raise ValueError(f"{parameter}: per-tensor quantisation takes one scale; pass axis= for per-channel")
        return s.reshape((1,) * rank), 0, 1
    ax = -1 if axis is None else _check_int(axis, "axis")
    if not -rank <= ax < rank:
        raise ValueError(f"axis: {ax} is out of range for an array of rank {rank}")
    ax %= rank
    block = 1 if block_size is None else _check_int(block_size, "block_size", 1, SIZE[1])
    if x.shape[ax] % block:
        raise ValueError(f"block_size: {block} does not divide axis {ax} of length {x.shape[ax]}")
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
    for value, parameter in ((fmt, "fmt"), (range, "range"), (rounding, "rounding")):
        _check_str(value, parameter)
    seed, random_bits = _check_seed(seed, random_bits)
    a, source, scalar = _as_source(x)
    s, ax, block = _quant_layout(a, scale, axis, block_size)
    zp = _zero_points(zero_point, s.shape)
    out = _core.quantize(a, source, fmt, s, zp, ax, block, range, rounding,
                         seed, random_bits)
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
        ax = (-1 if axis is None else _check_int(axis, "axis"))
        if not -rank <= ax < rank:
            raise ValueError(f"axis: {ax} is out of range for an array of rank {rank}")
        ax %= rank
        block = 1 if block_size is None else _check_int(block_size, "block_size", 1, SIZE[1])
        if a.shape[ax] % block:
            raise ValueError(f"block_size: {block} does not divide axis {ax} of length {a.shape[ax]}")
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
    s6.3; scale_rounding unused). element = round(x / scale) exactly, into ``fmt``.

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
    for value, parameter in ((fmt, "fmt"), (scale_fmt, "scale_fmt"), (scale_rounding, "scale_rounding"),
                             (rounding, "rounding"), (overflow, "overflow"), (subnormals, "subnormals")):
        _check_str(value, parameter)
    seed, random_bits = _check_seed(seed, random_bits)
    _check_str(scale_rule, "scale_rule")
    a, source, _ = _as_source(x)
    values, _, scales = _core.block_quantize(a, source, fmt, _block_extents(block), scale_fmt, scale_rounding,
                                             rounding, overflow, subnormals, seed, random_bits, scale_rule)
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


