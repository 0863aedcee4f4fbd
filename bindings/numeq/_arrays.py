"""The formats and the argument intake under numeq's Python API: format names and numpy / ml_dtypes
dtypes, the checks every public function sends its arguments through, and the one array intake.

The functions over it live in their own modules: casts (_casts.py), quantisation (_quantize.py),
the cast keywords they share (_cast_keywords.py)."""

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


def _format_name_error(parameter: str, value: Any) -> ValueError:
    """The one error for a name that is not a format numeq knows; it lists the valid names."""
    return ValueError(f"{parameter}: unknown format {value!r}; valid: {', '.join(_core.formats())}")


def _check_format(value: Any, parameter: str) -> str:
    """A format name numeq knows (the message lists them)."""
    _check_str(value, parameter)
    if value not in FORMAT_NAMES:
        raise _format_name_error(parameter, value)
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
    """(array whose elements are fp32/fp64 values or bit patterns, source format, was_scalar).
    A copy too large for memory (a broadcast view of 10^12 elements) is a MemoryError naming the
    parameter."""
    with _sized(parameter):
        return _source_of(x, parameter)


def _source_of(x: Any, parameter: str) -> tuple[np.ndarray, str, bool]:
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
    with _sized(parameter):
        return _int64_of(value, parameter)


def _int64_of(value: Any, parameter: str) -> np.ndarray:
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
    with _sized(parameter):
        return _native(a).astype(np.float64)


def _result(values: np.ndarray, scalar: bool) -> Any:
    return float(values) if scalar and values.dtype.kind == "f" else (int(values) if scalar else values)
