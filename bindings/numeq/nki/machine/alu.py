"""The ALU operators of the Vector / Scalar / GpSimd engines (``nl.add``, ``nl.maximum``,
``nl.greater`` ...), each on fp32 values: the engines compute in fp32 and cast the result (nki.isa
docs). Arithmetic is IEEE binary32 (numpy's float32 ufuncs, correctly rounded); comparisons and
logical operators give 1.0 or 0.0; bitwise operators act on the integer values of integer operands.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
from .context import current

__all__ = ["ALU", "COMPARISONS", "alu", "op_name"]

_f32 = np.float32


def _cmp(f: Callable) -> Callable:
    return lambda x, y: f(x, y).astype(np.float32)


def _logical(f: Callable) -> Callable:
    return lambda x, y: f(x != 0, y != 0).astype(np.float32)


def _bitwise(f: Callable) -> Callable:
    def g(x: np.ndarray, y: np.ndarray) -> np.ndarray:
        return f(np.asarray(x).astype(np.int64), np.asarray(y).astype(np.int64)).astype(np.float32)
    return g


def _power(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    # pow is not one IEEE operation: binary64 pow rounded to fp32 (assumption alu_power).
    with np.errstate(all="ignore"):
        return np.power(x.astype(np.float64), y.astype(np.float64)).astype(np.float32)


ALU: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "add": lambda x, y: np.add(x, y, dtype=_f32),
    "subtract": lambda x, y: np.subtract(x, y, dtype=_f32),
    "multiply": lambda x, y: np.multiply(x, y, dtype=_f32),
    "divide": lambda x, y: np.divide(x, y, dtype=_f32),
    "maximum": lambda x, y: np.maximum(x, y, dtype=_f32),
    "minimum": lambda x, y: np.minimum(x, y, dtype=_f32),
    "max": lambda x, y: np.maximum(x, y, dtype=_f32),
    "min": lambda x, y: np.minimum(x, y, dtype=_f32),
    "abs_max": lambda x, y: np.maximum(np.abs(x), np.abs(y), dtype=_f32),
    "power": _power,
    "pow": _power,
    "mod": lambda x, y: np.fmod(x, y, dtype=_f32),
    "bypass": lambda x, y: x,
    "equal": _cmp(np.equal),
    "not_equal": _cmp(np.not_equal),
    "greater": _cmp(np.greater),
    "greater_equal": _cmp(np.greater_equal),
    "less": _cmp(np.less),
    "less_equal": _cmp(np.less_equal),
    "logical_and": _logical(np.logical_and),
    "logical_or": _logical(np.logical_or),
    "logical_xor": _logical(np.logical_xor),
    "bitwise_and": _bitwise(np.bitwise_and),
    "bitwise_or": _bitwise(np.bitwise_or),
    "bitwise_xor": _bitwise(np.bitwise_xor),
    "left_shift": _bitwise(np.left_shift),
    "right_shift": _bitwise(np.right_shift),
    "arith_shift_right": _bitwise(np.right_shift),
    "logical_shift_right": _bitwise(np.right_shift),
}


# The comparison operators (1.0 or 0.0): what affine_select and range_select compare with.
COMPARISONS = ("equal", "not_equal", "greater", "greater_equal", "less", "less_equal")


# numpy functions the older interface passes as operators (np.max, np.amax, np.sum ...; 0.1.0 docs).
_NUMPY_NAMES = {"max": "maximum", "amax": "maximum", "min": "minimum", "amin": "minimum", "sum": "add",
                "prod": "multiply", "true_divide": "divide", "absolute": "abs"}


def op_name(op: Any, parameter: str = "op") -> str:
    """The name of an ALU operator given as ``nl.add`` (an Operator), ``np.add`` / ``np.max`` or a string."""
    name = getattr(op, "op_name", None) or getattr(op, "__name__", None) or op
    if not isinstance(name, str):
        raise TypeError(f"{parameter}: expected an ALU operator such as nl.add, got {op!r}")
    return _NUMPY_NAMES.get(name, name)


def alu(op: Any, x: np.ndarray, y: Any, parameter: str = "op") -> np.ndarray:
    """x <op> y in fp32 (y broadcasts)."""
    name = op_name(op, parameter)
    f = ALU.get(name)
    if f is None:
        raise current().unsupported(f"the ALU operator {name!r} (known: {', '.join(ALU)})")
    # Inside a run numpy's floating-point warnings are off (context.running).
    return f(x if isinstance(x, np.ndarray) else np.asarray(x, dtype=np.float32),
             y if isinstance(y, np.ndarray) else np.asarray(y, dtype=np.float32))
