"""``neuron_dtypes`` on numeq: the numpy dtype helpers AWS's NKI test suites import
(``static_cast``, ``sizeinbytes``, ``finfo``, ``is_float_type``, the narrow dtypes), installed under
that name by ``numeq.nki.installed()`` / ``pytest --numeq-nki`` so that nki-library's tests run
unchanged. AWS's package is not published; each helper does what its name and its callers say,
with numeq's casts:

- ``static_cast(x, dtype)``: C++'s ``static_cast`` per element. Into a float format, IEEE
  round-to-nearest-even with IEEE overflow (Inf, or NaN where the format has none): numeq.cast. Into
  an integer type from floats, truncation toward zero (values outside the type are refused, not
  wrapped: C++ leaves them undefined); from integers, modular wrap-around.
- into a packed Trainium3 dtype (``float8_e4m3fn_x4`` ...): each value cast into the element format
  as above, every four along the last axis packed into one word (machine.packed's layout).
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np

from .. import _casts
from .machine import packed as _packed
from .machine.dtypes import DTYPES, DType

__all__ = ["bfloat16", "finfo", "float8_e4m3", "float8_e4m3fn", "float8_e5m2", "is_float_type", "sizeinbytes",
           "static_cast"]

bfloat16, float8_e4m3, float8_e4m3fn, float8_e5m2 = (ml_dtypes.bfloat16, ml_dtypes.float8_e4m3,
                                                     ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2)
float8_e5m2_x4, float8_e4m3fn_x4, float4_e2m1fn_x4 = (DTYPES[n] for n in (
    "float8_e5m2_x4", "float8_e4m3fn_x4", "float4_e2m1fn_x4"))

# numpy dtype -> numeq format of the float dtypes NKI has (float32 is fp32, not tf32).
_FORMAT = {np.dtype(d.storage): d.format for d in reversed(DTYPES.values()) if d.kind == "float"}
_FORMAT[np.dtype(np.float64)] = "fp64"


def _dtype(dtype: Any, parameter: str = "dtype") -> np.dtype:
    if getattr(dtype, "packed", False):
        raise TypeError(f"{parameter}: {dtype} is a packed Trainium3 dtype (four values per element), which has no "
                        "numpy type of its own; static_cast packs into it, sizeinbytes measures it")
    try:
        return dtype.dtype if isinstance(dtype, DType) else np.dtype(dtype)
    except TypeError:
        raise TypeError(f"{parameter}: expected a numpy or ml_dtypes dtype, got {dtype!r}") from None


def is_float_type(dtype: Any) -> bool:
    """Whether ``dtype`` is a floating-point type (numpy's and ml_dtypes' narrow floats)."""
    d = _dtype(dtype)
    return d.kind == "f" or d in _FORMAT


def sizeinbytes(dtype: Any) -> int:
    """Bytes per element (per packed word for the Trainium3 x4 dtypes)."""
    if getattr(dtype, "packed", False):
        return dtype.itemsize
    return _dtype(dtype).itemsize


def finfo(dtype: Any) -> Any:
    """The float type's limits (ml_dtypes.finfo, which knows numpy's types and the narrow ones)."""
    return ml_dtypes.finfo(_dtype(dtype))


def static_cast(x: Any, dtype: Any) -> np.ndarray:
    """``x`` converted element by element as C++'s static_cast (see the module doc)."""
    a = np.asarray(x)
    if getattr(dtype, "packed", False):
        fmt = _packed.element_format(dtype)
        if a.ndim == 0 or a.shape[-1] % 4:
            raise ValueError(f"x: {dtype} packs four values along the last axis; x has shape {a.shape}")
        values = np.asarray(_casts.cast(a, fmt)).astype(_packed.ELEMENT_TYPES[fmt], copy=False)  # (exact)
        words = _packed.pack(values.view(np.uint8), dtype)
        return words.view(dtype.dtype)  # the word, marked as the packed dtype (DType.dtype)
    to = _dtype(dtype)
    if to in _FORMAT:
        return _casts.cast(a, _FORMAT[to])
    if to.kind in "iu":
        if a.dtype.kind in "iub":
            return a.astype(to)
        values = np.trunc(a.astype(np.float64))
        info = np.iinfo(to)
        bad = ~np.isfinite(values) | (values < info.min) | (values > info.max)
        if bad.any():
            raise ValueError(f"x: {int(bad.sum())} values (first {a.reshape(-1)[np.argmax(bad.reshape(-1))]!r}) are "
                             f"NaN, infinite or outside {to} [{info.min}, {info.max}]: static_cast leaves them undefined")
        return values.astype(to)
    if to == np.dtype(np.bool_):
        return a.astype(np.bool_)
    raise TypeError(f"dtype: static_cast takes a float or integer dtype, got {to}")
