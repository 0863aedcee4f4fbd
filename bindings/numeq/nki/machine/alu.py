"""The ALU operators of the Vector / Scalar / GpSimd engines (``nl.add``, ``nl.maximum``,
``nl.bitwise_and`` ...): the table of supported math operators (nki.api.shared.rst, "Supported
Math Operators for NKI ISA", ``tbl-aluop``) in its two categories.

- *arithmetic* operators "accept any valid NKI data type and convert input elements into float32
  before performing the operators" (ibid.): ``ALU``, each on fp32 values. Arithmetic is IEEE
  binary32 (numpy's float32 ufuncs, correctly rounded); comparisons and logical operators give 1.0
  or 0.0. The exception: ``tensor_tensor`` with int32 / uint32 tiles on GpSimd, which "uses native
  integer arithmetic" (nki.isa.tensor_tensor docstring): ``integer_alu``, exact in Python's
  integers, narrowed into the destination by assumption ``integer_overflow``.
- *bitvec* operators "expect integer data types and treat input elements as bit patterns"
  (ibid.): ``bitvec_alu`` on the stored integers, the result's low bits kept. ``right_shift`` is
  the logical shift (the table: "Logical Shift Right ``nki.language.right_shift``", "Arithmetic
  Shift Right Not supported"). Given float tiles, ``ALU``'s fp32 versions act on the integer
  values of the operands (what numeq did before; the instructions report the dtype).

Unary operators (``nl.abs``, ``nl.square``, ``nl.relu``, ``nl.rsqrt``, ``nl.reciprocal``,
``nl.invert``, and ``nl.logical_not`` of the SDK 2.26 table) take one operand; tensor_scalar passes
``operand0`` None or 0 with them (nki.isa.tensor_scalar docstring).
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
from .context import current, where as _where
from . import arithmetic as _arithmetic

__all__ = ["ALU", "BITVEC", "COMPARISONS", "INTEGER_NATIVE", "UNARY", "alu", "bitvec_alu", "integer_alu",
           "alu_table", "into_integer", "is_bitvec", "is_unary", "op_name"]

def _cmp(f: Callable) -> Callable:
    return lambda x, y: f(x, y).astype(np.float32)


def _logical(f: Callable) -> Callable:
    return lambda x, y: f(x != 0, y != 0).astype(np.float32)


def _bitwise(f: Callable) -> Callable:
    def g(x: np.ndarray, y: np.ndarray) -> np.ndarray:
        return f(np.asarray(x).astype(np.int64), np.asarray(y).astype(np.int64)).astype(np.float32)
    return g


def _table(ft: Any) -> dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]]:
    """The ALU's operators computing in ``ft``: fp32 as the engines do, or binary64 for the
    kernel's exact dataflow (``Run.exact()``, machine.arithmetic.EXACT)."""

    def power(x: np.ndarray, y: np.ndarray) -> np.ndarray:
        # pow is not one IEEE operation: binary64 pow rounded to fp32 (assumption alu_power).
        with np.errstate(all="ignore"):
            return np.power(np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)).astype(ft)

    def abs_max(x: np.ndarray, y: np.ndarray) -> np.ndarray:
        # nl.abs_max: "returns the original (signed) value of whichever input has the larger absolute
        # value", "each element is x if |x| > |y|, else y" (a tie gives y).
        return np.where(np.abs(x) > np.abs(y), x, y).astype(ft)

    def abs_min(x: np.ndarray, y: np.ndarray) -> np.ndarray:
        # nl.abs_min: "each element is x if |x| < |y|, else y".
        return np.where(np.abs(x) < np.abs(y), x, y).astype(ft)

    def function(name: str) -> Callable:
        # rsqrt / reciprocal as ALU operators: fp32 correctly rounded (machine.arithmetic's function model).
        def f(x: np.ndarray, y: Any) -> np.ndarray:
            from .arithmetic import function_fp32
            return function_fp32(name, np.asarray(x, dtype=ft))
        return f

    return {
        "add": lambda x, y: np.add(x, y, dtype=ft),
        "subtract": lambda x, y: np.subtract(x, y, dtype=ft),
        "multiply": lambda x, y: np.multiply(x, y, dtype=ft),
        "divide": lambda x, y: np.divide(x, y, dtype=ft),
        "maximum": lambda x, y: np.maximum(x, y, dtype=ft),
        "minimum": lambda x, y: np.minimum(x, y, dtype=ft),
        "max": lambda x, y: np.maximum(x, y, dtype=ft),
        "min": lambda x, y: np.minimum(x, y, dtype=ft),
        "abs_max": abs_max,
        "abs_min": abs_min,
        "power": power,
        "pow": power,
        # nl.mod: "equivalent to the Python modulus x % y and has the same sign as the divisor y";
        # nl.fmod: "The remainder has the same sign as the dividend x" (nki.language docs).
        "mod": lambda x, y: np.mod(x, y, dtype=ft),
        "fmod": lambda x, y: np.fmod(x, y, dtype=ft),
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
        # Unary operators (the second operand is ignored).
        "abs": lambda x, y: np.abs(x).astype(ft),
        "square": lambda x, y: np.multiply(x, x, dtype=ft),
        "relu": lambda x, y: np.maximum(x, ft(0), dtype=ft),
        "rsqrt": function("rsqrt"),
        "reciprocal": function("reciprocal"),
        "logical_not": lambda x, y: (np.asarray(x) == 0).astype(np.float32),
        "invert": lambda x, y: np.invert(np.asarray(x).astype(np.int64)).astype(np.float32),
    }


def _watching(f: Callable) -> Callable:
    """``f`` (add or subtract) that also records, for the kernel line running it, how many times
    smaller than its operands its results came out (the largest operand over the largest result,
    per call: the factor by which the operands' relative errors grow against the result's scale;
    one element that happens to cancel, as x - mean does near the mean, does not count), in
    machine.arithmetic.WATCH."""

    def watched(x: Any, y: Any) -> np.ndarray:
        r = f(x, y)
        with np.errstate(all="ignore"):
            big = max(float(np.max(np.abs(x), initial=0.0)), float(np.max(np.abs(y), initial=0.0)))
            result = np.abs(np.asarray(r, dtype=np.float64))
            top = float(np.max(result[np.isfinite(result)], initial=0.0))
        if top > 0 and np.isfinite(big):
            line = current().at or _where()
            lines = _arithmetic.WATCH["cancellation"]
            lines[line] = max(lines.get(line, 0.0), big / top)
        return r

    return watched


ALU = _table(np.float32)
_ALU_EXACT = _table(np.float64)
_ALU_WATCHED = {**ALU, **{name: _watching(ALU[name]) for name in ("add", "subtract")}}


def alu_table() -> dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]]:
    """The ALU's operators as the running kernel computes them (binary64 for ``Run.exact()``; with
    cancellation recorded for a diagnostic rerun)."""
    return _ALU_EXACT if _arithmetic.EXACT else ALU if _arithmetic.WATCH is None else _ALU_WATCHED


# The bitvec operators (tbl-aluop's first group): integer bit patterns.
BITVEC = frozenset({"bitwise_and", "bitwise_or", "bitwise_xor", "invert", "left_shift", "right_shift",
                    "logical_shift_right", "arith_shift_right"})
# Operators of one operand.
UNARY = frozenset({"abs", "square", "relu", "rsqrt", "reciprocal", "logical_not", "invert"})
# The arithmetic operators GpSimd's native integer arithmetic computes exactly (``integer_alu``);
# the others (divide, power, mod, rsqrt, reciprocal) stay fp32 operations.
INTEGER_NATIVE = frozenset({"add", "subtract", "multiply", "maximum", "minimum", "max", "min", "abs_max", "abs_min",
                            "bypass", "equal", "not_equal", "greater", "greater_equal", "less", "less_equal",
                            "logical_and", "logical_or", "logical_xor", "abs", "square", "relu", "logical_not"})
# Operators nki.language documents as "Available only on NeuronCore-v4 (trn3) and newer".
SINCE_V4 = frozenset({"abs_max", "abs_min"})

# The comparison operators (1.0 or 0.0): what affine_select and range_select compare with.
COMPARISONS = ("equal", "not_equal", "greater", "greater_equal", "less", "less_equal")


# numpy functions the older interface passes as operators (np.max, np.amax, np.sum ...; 0.1.0 docs).
_NUMPY_NAMES = {"max": "maximum", "amax": "maximum", "min": "minimum", "amin": "minimum", "sum": "add",
                "prod": "multiply", "true_divide": "divide", "absolute": "abs", "remainder": "mod"}


def op_name(op: Any, parameter: str = "op") -> str:
    """The name of an ALU operator given as ``nl.add`` (an Operator), ``np.add`` / ``np.max`` or a string."""
    name = getattr(op, "op_name", None) or getattr(op, "__name__", None) or op
    if not isinstance(name, str):
        raise TypeError(f"{parameter}: expected an ALU operator such as nl.add, got {op!r}")
    return _NUMPY_NAMES.get(name, name)


def is_bitvec(name: str) -> bool:
    return name in BITVEC


def is_unary(name: str) -> bool:
    return name in UNARY


def _since(name: str) -> None:
    if name in SINCE_V4:
        ctx = current()
        if ctx.target.generation < 4:
            # A warning, not an error: the documents disagree. The current nki.language.abs_max /
            # abs_min docstrings say "Available only on NeuronCore-v4 (trn3) and newer"; SDK 2.26's
            # operator table (nki.api.shared.rst) lists both without a generation.
            ctx.find("operator_generation", "warning", f"the ALU operator {name} is documented for NeuronCore-v4 "
                     f"(trn3) and newer by the current docs; the target {ctx.target.name} is {ctx.target.core}",
                     f"documented: nki.language.{name} docstring (\"Available only on NeuronCore-v4 (trn3) and "
                     "newer\"); SDK 2.26 nki.api.shared.rst lists it without a generation")


def alu(op: Any, x: np.ndarray, y: Any, parameter: str = "op") -> np.ndarray:
    """x <op> y in fp32 (y broadcasts)."""
    name = op_name(op, parameter)
    f = alu_table().get(name)
    if f is None:
        raise current().unsupported(f"the ALU operator {name!r} (known: {', '.join(ALU)})")
    if name in SINCE_V4:
        _since(name)
    # Inside a run numpy's floating-point warnings are off (context.running).
    ft = _arithmetic.compute_dtype
    return f(x if isinstance(x, np.ndarray) else np.asarray(x, dtype=ft),
             y if isinstance(y, np.ndarray) else np.asarray(y, dtype=ft))


# --- integers ----------------------------------------------------------------------------------

_INT64 = (-(2 ** 63), 2 ** 63 - 1)


def _exact_product(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """x * y of int64 arrays, exactly: int64 where it cannot overflow, else Python integers."""
    bound = (int(np.abs(x).max(initial=0)) if x.size else 0) * (int(np.abs(y).max(initial=0)) if y.size else 0)
    if bound <= _INT64[1]:
        return np.multiply(x, y, dtype=np.int64)
    return np.multiply(x.astype(object), y.astype(object))


def integer_alu(op: Any, x: np.ndarray, y: Any, parameter: str = "op") -> np.ndarray:
    """x <op> y on integer values (int64 arrays; y broadcasts), exactly: the native integer
    arithmetic of GpSimd (``INTEGER_NATIVE``). Comparisons and logical operators give 1 or 0. The
    result is an int64 array, or Python integers where a product leaves int64's range."""
    name = op_name(op, parameter)
    if name not in INTEGER_NATIVE:
        raise ValueError(f"{parameter}: {name} has no native integer form (those: {', '.join(sorted(INTEGER_NATIVE))})")
    if name in SINCE_V4:
        _since(name)
    x = np.asarray(x, dtype=np.int64)
    y = np.asarray(0 if y is None else y, dtype=np.int64)
    if name == "add":
        return np.add(x, y, dtype=np.int64)
    if name == "subtract":
        return np.subtract(x, y, dtype=np.int64)
    if name == "multiply":
        return _exact_product(x, y)
    if name in ("maximum", "max"):
        return np.maximum(x, y)
    if name in ("minimum", "min"):
        return np.minimum(x, y)
    if name == "abs_max":
        return np.where(np.abs(x) > np.abs(y), x, y)
    if name == "abs_min":
        return np.where(np.abs(x) < np.abs(y), x, y)
    if name == "bypass":
        return x
    if name in COMPARISONS:
        return getattr(np, name)(x, y).astype(np.int64)
    if name.startswith("logical_") and name != "logical_not":
        return getattr(np, name)(x != 0, y != 0).astype(np.int64)
    if name == "abs":
        return np.abs(x)
    if name == "square":
        return _exact_product(x, x)
    if name == "relu":
        return np.maximum(x, 0)
    return (x == 0).astype(np.int64)  # logical_not


def bitvec_alu(op: Any, x: Any, y: Any, bits: int, parameter: str = "op") -> np.ndarray:
    """x <op> y on ``bits``-wide bit patterns (int64 arrays or ints; each taken modulo 2^bits, so a
    negative int is its two's complement pattern): the result's pattern, as a non-negative int64
    below 2^bits. ``right_shift`` shifts zeros in (the logical shift); a shift count is y's value,
    and one below 0 or of ``bits`` or more shifts every bit out (the instructions report such
    counts: nothing documents them)."""
    name = op_name(op, parameter)
    mask = np.int64((1 << bits) - 1)
    x = np.bitwise_and(np.asarray(x, dtype=np.int64), mask)
    raw = np.asarray(0 if y is None else y, dtype=np.int64)
    y = np.bitwise_and(raw, mask)
    if name == "bitwise_and":
        return np.bitwise_and(x, y)
    if name == "bitwise_or":
        return np.bitwise_or(x, y)
    if name == "bitwise_xor":
        return np.bitwise_xor(x, y)
    if name == "invert":
        return np.bitwise_xor(x, mask)  # "Implemented as XOR with all-ones" (nki.language.invert)
    count = np.clip(raw, 0, 63)
    wide = (raw < 0) | (raw >= bits)
    if name == "left_shift":
        r = np.bitwise_and(np.left_shift(x, count), mask)
    elif name in ("right_shift", "logical_shift_right"):
        r = np.right_shift(x, count)
    elif name == "arith_shift_right":
        signed = np.where(x >> (bits - 1) != 0, x - (np.int64(1) << bits), x)
        return np.bitwise_and(np.right_shift(signed, count), mask)
    else:
        raise ValueError(f"{parameter}: {name} is not a bitvec operator (those: {', '.join(sorted(BITVEC))})")
    return np.where(wide, np.int64(0), r)


def into_integer(values: np.ndarray, dtype: Any, overflow: str = "wrap") -> np.ndarray:
    """Exact integer ``values`` (int64 or Python integers) stored as integer ``dtype`` (a DType):
    ``wrap`` keeps the low bits (two's complement), ``saturate`` clips to the dtype's range."""
    storage = np.dtype(dtype.storage)
    info = np.iinfo(storage)
    if overflow == "saturate":
        clipped = np.clip(values, info.min, info.max)
        return np.asarray(clipped.astype(np.int64) if clipped.dtype == object else clipped).astype(storage)
    if values.dtype == object:
        mask = (1 << (8 * storage.itemsize)) - 1
        values = np.asarray([int(v) & mask for v in values.reshape(-1)], dtype=np.uint64).reshape(values.shape)
    return values.astype(np.uint64 if values.dtype == np.uint64 else np.int64).astype(storage)
