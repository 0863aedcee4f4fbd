"""Certified elementwise functions: f(x) correctly rounded into ``out`` (numeq._core.reference_function).

Every function takes an array of any numeric dtype (float32, float64, float16, ml_dtypes, integers)
or a scalar and returns float64 values of the rounded results (NaN where the output format gives
NaN), a float for a scalar input. The value is exact f(x) rounded once into ``out`` under the given
rounding / overflow / subnormal policy; the C++ side certifies it with Ziv's loop over MPFR
intervals (references/functions.hpp documents the definitions and the special values).

``in_fmt`` names the format the inputs are values of (default: the array's own: float32 -> fp32,
float64 -> fp64, ml_dtypes bfloat16 -> bf16, integers -> fp64). When given, every value must be
exactly representable in it (ValueError otherwise). ``subnormals="flush_inputs"`` / ``"flush_both"``
read inputs that are subnormal in ``in_fmt`` as signed zeros (DAZ); ``"flush_outputs"`` /
``"flush_both"`` flush subnormal results (FTZ).
"""

from __future__ import annotations

from typing import Any, Callable

import functools

import numpy as np

from . import _core
from ._arrays import _FORMAT_OF_DTYPE, FORMAT_NAMES, _as_source, _check_format, _check_str, _info, _renamed, _sized
from ._cast_keywords import CastKeywords, takes_cast_keywords

GELU_APPROXIMATIONS = ("none", "tanh")


@functools.lru_cache(maxsize=None)
def _holds_every_value(inner: str, outer: str) -> bool:
    """Whether every value of format ``inner`` (NaN, infinities and -0 included) is a value of
    ``outer``: then arrays of ``inner`` need no check against ``outer``. Both binary floating
    formats: ``outer`` has at least ``inner``'s precision, its largest finite value, a quantum at
    most ``inner``'s smallest (values below ``outer``'s normal range land on its subnormal grid),
    and every special value ``inner`` has."""
    if inner == outer:
        return True
    a, b = _info(inner), _info(outer)
    if a["kind"] != "floating" or b["kind"] != "floating":
        return False
    smallest_a = a["min_subnormal"] if a["has_subnormals"] else a["min_normal"]
    grid_b = b["min_subnormal"] if b["has_subnormals"] else b["min_normal"]
    smallest_ok = smallest_a >= grid_b and (b["has_subnormals"] or smallest_a >= b["min_normal"])
    specials_ok = all(b[k] or not a[k] for k in ("has_inf", "has_nan", "has_negative_zero"))
    signs_ok = b["signed"] or not a["signed"]
    return (b["precision"] >= a["precision"] and b["max"] >= a["max"] and smallest_ok and specials_ok and signs_ok)


def _input_values(x: Any, in_fmt: str | None, subnormals: str, parameter: str = "x",
                  fmt_parameter: str = "in_fmt") -> tuple[np.ndarray, bool]:
    """C-contiguous float64 values of x (checked to lie in in_fmt, inputs flushed as asked), and
    whether x was a scalar. Shared by every numeq.reference function. A copy too large for memory
    is a MemoryError naming the parameter."""
    with _sized(parameter):
        return _input_values_of(x, in_fmt, subnormals, parameter, fmt_parameter)


def _input_values_of(x: Any, in_fmt: str | None, subnormals: str, parameter: str,
                     fmt_parameter: str) -> tuple[np.ndarray, bool]:
    if (subnormals == "keep" and type(x) is np.ndarray and x.ndim > 0 and x.dtype in _FORMAT_OF_DTYPE
            and x.dtype != np.float64 and x.flags.c_contiguous and x.flags.aligned and x.dtype.isnative
            and (in_fmt is None or (isinstance(in_fmt, str) and in_fmt in FORMAT_NAMES))):
        # float32, float16 and ml_dtypes arrays: checked in place and widened in one multi-threaded
        # pass by the extension (numpy's astype runs on one thread); a failed check takes the path
        # below, which names the element.
        own = _FORMAT_OF_DTYPE[x.dtype]
        if (in_fmt is None or _holds_every_value(own, in_fmt)
                or (_info(in_fmt)["kind"] == "floating" and int(_core.first_not_in_format(x, in_fmt)) < 0)):
            return _core.as_float64(x, parameter), False
    a, source, scalar = _as_source(x, parameter)
    if source in ("fp32", "fp64"):
        values = np.asarray(a, dtype=np.float64)
    else:  # ml_dtypes arrays arrive as bit patterns of their format
        values = np.asarray(_core.decode(a, source), dtype=np.float64)
    fmt = source
    if in_fmt is not None:
        _check_format(in_fmt, fmt_parameter)
        info = _info(in_fmt)
        if source in FORMAT_NAMES and _holds_every_value(source, in_fmt):
            ok = True  # the array's own format lies inside in_fmt: nothing to check
        elif info["kind"] == "integer":
            finite = np.isfinite(values)
            ok = finite & (values == np.floor(np.where(finite, values, 0))) & (values >= info["min"]) & (values <= info["max"])
        else:
            values = np.ascontiguousarray(values, dtype=np.float64)
            first = int(_core.first_not_in_format(values, in_fmt))  # one pass in the extension
            ok = first < 0
        if ok is not True and not np.all(ok):
            i = first if info["kind"] != "integer" else int(np.flatnonzero(~np.asarray(ok).reshape(-1))[0])
            v = values.reshape(-1)[i]
            raise ValueError(f"{parameter}: element {i} (C order) = {v!r} is not exactly representable in "
                             f"{fmt_parameter} '{in_fmt}'; round the inputs first (numeq.round(x, '{in_fmt}'))")
        fmt = in_fmt
    if subnormals in ("flush_inputs", "flush_both"):
        info = _info(fmt)
        if info["kind"] == "floating":
            tiny = info["min_normal"]
            with np.errstate(invalid="ignore"):
                sub = (values != 0) & (np.abs(values) < tiny)
            values = np.where(sub, np.copysign(0.0, values), values)
    return np.asarray(values, dtype=np.float64, order="C"), scalar  # a 0-d array stays 0-d


def _apply(name: str, x: Any, in_fmt: str | None, out: str, cast: CastKeywords) -> Any:
    _check_str(out, "out")
    values, scalar = _input_values(x, in_fmt, cast.subnormals)
    with _renamed({"fmt": "out"}):  # the core names the format parameter "fmt"; here it is "out"
        result = _core.reference_function(name, values, out, *cast)
    return float(np.asarray(result).reshape(-1)[0]) if scalar else result


# f(2.0) into fp32 (the default) and into bf16: the docstrings' examples (tests/python/test_help.py runs them).
_EXAMPLES = {
    "exp": (7.389056205749512, 7.375),
    "exp2": (4.0, 4.0),
    "log": (0.6931471824645996, 0.69140625),
    "tanh": (0.9640275835990906, 0.96484375),
    "sigmoid": (0.8807970881462097, 0.87890625),
    "silu": (1.7615941762924194, 1.7578125),
    "softplus": (2.1269280910491943, 2.125),
    "sqrt": (1.4142135381698608, 1.4140625),
    "rsqrt": (0.7071067690849304, 0.70703125),
    "reciprocal": (0.5, 0.5),
"erf": (0.9953222870826721, 0.99609375),
    "erf_dx": (0.02066698484122753, 0.0206298828125),
    "sin": (0.9092974066734314, 0.91015625),
    "cos": (-0.416146844625473, -0.416015625),
    "tan": (-2.185039758682251, -2.1875),
    "atan": (1.1071487665176392, 1.109375),
    "mish": (1.9439589977264404, 1.9453125),
    "gelu_sigmoid": (1.935658574104309, 1.9375),
    "gelu_dx": (1.0852317810058594, 1.0859375),
    "silu_dx": (1.0907841920852661, 1.09375),
    "gelu_sigmoid_dx": (1.0738153457641602, 1.0703125),
}


def _doc(name: str, summary: str) -> str:
    fp32, bf16 = _EXAMPLES[name]
    return (
        f"{summary}, correctly rounded into ``out``; float64 values.\n\n"
        "Keywords: in_fmt (format of the inputs; default the array's own), out, rounding, overflow,\n"
        "subnormals, seed, random_bits (as numeq.round).\n\n"
        "``x``: an array of any numeric dtype or a scalar (a scalar gives a float); ``out``: a name of\n"
        "``numeq.formats()``; ``rounding`` (``numeq.ROUNDINGS``), ``overflow`` (``numeq.OVERFLOWS``),\n"
        "``subnormals`` (``numeq.SUBNORMALS``).\n\n"
        "Example::\n\n"
        f"    >>> numeq.reference.{name}(2.0)                # fp32 by default\n"
        f"    {fp32!r}\n"
        f"    >>> numeq.reference.{name}(2.0, out=\"bf16\")\n"
        f"    {bf16!r}\n"
        f"    >>> numeq.reference.{name}(np.array([0.5, 2.0], dtype=np.float32)).shape\n"
        "    (2,)\n"
    )


def _make(name: str, summary: str):
    def f(x: Any, *, in_fmt: str | None = None, out: str = "fp32", cast: CastKeywords) -> Any:
        return _apply(name, x, in_fmt, out, cast)

    f.__name__ = f.__qualname__ = name
    f.__doc__ = _doc(name, summary)
    return takes_cast_keywords(f)


exp = _make("exp", "e^x")
exp2 = _make("exp2", "2^x")
log = _make("log", "ln x (log(+-0) = -Inf, log(x < 0) = NaN)")
tanh = _make("tanh", "tanh x")
sigmoid = _make("sigmoid", "1 / (1 + e^-x)")
silu = _make("silu", "x * sigmoid(x)")
softplus = _make("softplus", "log(1 + e^x)")
sqrt = _make("sqrt", "sqrt x (sqrt(-0) = -0)")
rsqrt = _make("rsqrt", "1 / sqrt x (IEEE 754-2019 rSqrt: rsqrt(+-0) = +-Inf)")
reciprocal = _make("reciprocal", "1 / x")
# NKI's remaining activation functions (the NKI API reference's activation table), each the
# mathematical function rounded once (references/functions.hpp states them and their specials).
erf = _make("erf", "erf x = 2/sqrt(pi) int_0^x e^-t^2 dt")
erf_dx = _make("erf_dx", "erf'(x) = 2/sqrt(pi) e^-x^2")
sin = _make("sin", "sin x (radians, any range; sin(+-Inf) = NaN)")
cos = _make("cos", "cos x (radians, any range; cos(+-Inf) = NaN)")
tan = _make("tan", "tan x (radians, any range; tan(+-Inf) = NaN)")
atan = _make("atan", "arctan x in (-pi/2, pi/2) (atan(+-Inf) = +-pi/2 rounded)")
mish = _make("mish", "x * tanh(softplus(x))")
gelu_sigmoid = _make("gelu_sigmoid", "x * sigmoid(1.702 x), 1.702 exactly (NKI's gelu_apprx_sigmoid)")
gelu_dx = _make("gelu_dx", "gelu'(x) = Phi(x) + x phi(x) (the erf GELU's derivative)")
silu_dx = _make("silu_dx", "silu'(x) = s + x s (1 - s), s = sigmoid(x)")
gelu_sigmoid_dx = _make("gelu_sigmoid_dx", "gelu_sigmoid'(x) = silu_dx(1.702 x)")


# What the docstring of every numeq.reference function that rounds into ``out`` says of its
# keywords (the "{keywords}" in it): one text for all of them.
_KEYWORDS_DOC = """``in_fmt``: the format of the inputs' values (default: the array's own; when given, every value
    must lie in it); ``out``: the output format; ``rounding`` (``numeq.ROUNDINGS``), ``overflow``
    (``numeq.OVERFLOWS``), ``subnormals`` (``numeq.SUBNORMALS``), ``seed``, ``random_bits``: as
    ``numeq.round``."""


def _reference(body: Callable[..., Any]) -> Callable[..., Any]:
    """A numeq.reference function from ``body(..., *, in_fmt, out, cast)``: the cast keywords
    taken (takes_cast_keywords) and "{keywords}" in its docstring filled in."""
    body.__doc__ = (body.__doc__ or "").replace("{keywords}", _KEYWORDS_DOC)
    return takes_cast_keywords(body)


@_reference
def gelu(x: Any, approximate: str = "none", *, in_fmt: str | None = None, out: str = "fp32", cast: CastKeywords) -> Any:
    """GELU correctly rounded into ``out``; float64 values.

    approximate="none": x/2 (1 + erf(x / sqrt 2)); "tanh": x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
    with 0.044715 exactly (PyTorch's names). Other keywords as numeq.round, plus in_fmt.

    ``x``: an array or a scalar; ``approximate``: "none" or "tanh". {keywords}

    Example::

        >>> numeq.reference.gelu(1.0, out="fp64")
        0.8413447460685429
        >>> numeq.reference.gelu(1.0, "tanh", out="fp64")
        0.8411919906082767
        >>> numeq.reference.gelu(np.array([1.0, -1.0]), out="bf16")
        array([ 0.83984375, -0.15820312])
    """
    _check_str(approximate, "approximate")
    if approximate not in GELU_APPROXIMATIONS:
        raise ValueError(f"approximate: must be one of {', '.join(GELU_APPROXIMATIONS)}; got '{approximate}'")
    name = "gelu" if approximate == "none" else "gelu_tanh"
    return _apply(name, x, in_fmt, out, cast)


__all__ = [
    "atan",
    "cos",
    "erf",
    "erf_dx",
    "exp",
    "exp2",
    "gelu",
    "gelu_dx",
    "gelu_sigmoid",
    "gelu_sigmoid_dx",
    "log",
    "mish",
    "reciprocal",
    "rsqrt",
    "sigmoid",
    "silu",
    "silu_dx",
    "sin",
    "softplus",
    "sqrt",
    "tan",
    "tanh",
]
