"""Exact and certified reference results (``numeq.reference``).

Exact reductions (sum, dot, matmul) and correctly rounded functions (exp, exp2, log, tanh,
sigmoid, gelu, silu, softplus, sqrt, rsqrt, reciprocal: MPFR in a Ziv loop).

Every function takes numpy or ml_dtypes arrays, an input format ``in_fmt`` (default: the array's
own: float32 -> fp32, float64 -> fp64, ml_dtypes bfloat16 -> bf16, ...; values must be exactly
representable in it) and an output cast (``out`` format, ``rounding``, ``overflow``,
``subnormals``, ``seed``, ``random_bits`` as in ``numeq.round``), and returns float64 values of
the exact result rounded once into ``out``. The ``*_exact`` variants return the exact result as
a double-double ``(hi, lo)``: hi is the exact value rounded to nearest float64, lo the rest to
nearest.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import _core
from ._arrays import _check_seed, _check_str
from ._reference_functions import _input_values
from ._reference_functions import (
    exp,
    exp2,
    gelu,
    log,
    reciprocal,
    rsqrt,
    sigmoid,
    silu,
    softplus,
    sqrt,
    tanh,
)

__all__ = [
    "dot", "dot_exact", "exp", "exp2", "gelu", "log", "matmul", "matmul_exact", "reciprocal", "rsqrt",
    "sigmoid", "silu", "softplus", "sqrt", "sum", "sum_exact", "tanh",
]


def _values(x: Any, in_fmt: str | None, parameter: str) -> np.ndarray:
    """C-contiguous float64 values of x, checked to lie in in_fmt (the functions' own helper)."""
    return _input_values(x, in_fmt, "keep", parameter)[0]


def _out(out: str, rounding: str, overflow: str, subnormals: str, seed: Any, random_bits: Any) -> tuple:
    for value, parameter in ((out, "out"), (rounding, "rounding"), (overflow, "overflow"), (subnormals, "subnormals")):
        _check_str(value, parameter)
    seed, random_bits = _check_seed(seed, random_bits)
    names = list(_core.formats())
    if out not in names:
        raise ValueError(f"out: unknown format {out!r}; valid formats: {', '.join(names)}")
    return out, rounding, overflow, subnormals, seed, random_bits


def _axis(axis: Any) -> int:
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)):
        raise TypeError(f"axis: expected an integer, got {type(axis).__name__}")
    return int(axis)


def sum(  # noqa: A001 - mirrors numpy.sum
    x: Any, axis: int = -1, *, in_fmt: str | None = None, out: str = "fp32", rounding: str = "nearest_even",
    overflow: str = "ieee", subnormals: str = "keep", seed: int = 0, random_bits: int = 32,
) -> np.ndarray:
    """Exact sum of x along ``axis``, rounded once into ``out``."""
    cast = _out(out, rounding, overflow, subnormals, seed, random_bits)
    return _core.reference_sum(_values(x, in_fmt, "x"), _axis(axis), *cast, False)


def sum_exact(x: Any, axis: int = -1, *, in_fmt: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Exact sum of x along ``axis`` as a double-double (hi, lo)."""
    return _core.reference_sum(_values(x, in_fmt, "x"), _axis(axis), "fp64", "nearest_even", "ieee", "keep", 0, 32, True)


def dot(
    a: Any, b: Any, *, in_fmt: str | None = None, out: str = "fp32", rounding: str = "nearest_even",
    overflow: str = "ieee", subnormals: str = "keep", seed: int = 0, random_bits: int = 32,
) -> np.ndarray:
    """Exact dot product of two 1-D arrays, rounded once into ``out`` (a 0-d array)."""
    cast = _out(out, rounding, overflow, subnormals, seed, random_bits)
    return _core.reference_dot(_values(a, in_fmt, "a"), _values(b, in_fmt, "b"), *cast, False)


def dot_exact(a: Any, b: Any, *, in_fmt: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Exact dot product as a double-double (hi, lo)."""
    return _core.reference_dot(_values(a, in_fmt, "a"), _values(b, in_fmt, "b"), "fp64", "nearest_even", "ieee",
                               "keep", 0, 32, True)


def matmul(
    a: Any, b: Any, c: Any = None, *, in_fmt: str | None = None, c_fmt: str | None = None, out: str = "fp32",
    rounding: str = "nearest_even", overflow: str = "ieee", subnormals: str = "keep", seed: int = 0,
    random_bits: int = 32,
) -> np.ndarray:
    """Exact a[..., M, K] @ b[..., K, N] (+ c, broadcast and added exactly), rounded once into ``out``.

    Batch dimensions broadcast as in numpy.matmul. ``in_fmt`` checks a and b; ``c_fmt`` checks c.
    """
    cast = _out(out, rounding, overflow, subnormals, seed, random_bits)
    cv = None if c is None else _values(c, c_fmt, "c")
    return _core.reference_matmul(_values(a, in_fmt, "a"), _values(b, in_fmt, "b"), cv, *cast, False)


def matmul_exact(
    a: Any, b: Any, c: Any = None, *, in_fmt: str | None = None, c_fmt: str | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Exact a @ b (+ c) as a double-double (hi, lo)."""
    cv = None if c is None else _values(c, c_fmt, "c")
    return _core.reference_matmul(_values(a, in_fmt, "a"), _values(b, in_fmt, "b"), cv, "fp64", "nearest_even",
                                  "ieee", "keep", 0, 32, True)
