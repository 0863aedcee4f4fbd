"""numeq.reference functions (bindings/numeq/_reference_functions.py) against mpmath.

mpmath evaluates each function at 400 bits; conftest's exact Fraction oracle rounds that value
(round-to-nearest only: 400 bits are far beyond any nearest-rounding boundary distance of these
functions at bf16/fp32 arguments, apart from exact values, which mpmath returns exactly).
"""

from __future__ import annotations

import math
from fractions import Fraction

import ml_dtypes
import mpmath
import numpy as np
import pytest

import numeq
from numeq import _reference_functions as rf
from conftest import SPECS, round_oracle, same_float

mpmath.mp.prec = 400

C = mpmath.mpf(44715) / 10**6


def _mp(name: str, x: float):
    v = mpmath.mpf(x)
    if name == "exp":
        return mpmath.exp(v)
    if name == "exp2":
        return mpmath.power(2, v)
    if name == "log":
        return mpmath.log(v)
    if name == "tanh":
        return mpmath.tanh(v)
    if name == "sigmoid":
        return 1 / (1 + mpmath.exp(-v))
    if name == "silu":
        return v / (1 + mpmath.exp(-v))
    if name == "softplus":
        return mpmath.log1p(mpmath.exp(v)) if v < 0 else v + mpmath.log1p(mpmath.exp(-v))
    if name == "sqrt":
        return mpmath.sqrt(v)
    if name == "rsqrt":
        return 1 / mpmath.sqrt(v)
    if name == "reciprocal":
        return 1 / v
    if name == "gelu":
        return v / 2 * mpmath.erfc(-v / mpmath.sqrt(2))
    if name == "gelu_tanh":
        y = mpmath.sqrt(2 / mpmath.pi) * (v + C * v**3)
        return v / (1 + mpmath.exp(-2 * y))
    if name in _ACTIVATIONS:
        return _ACTIVATIONS[name](v)
    raise AssertionError(name)


def _silu_dx(v):
    s = 1 / (1 + mpmath.exp(-v))
    return s + v * s * (1 - s)


K = mpmath.mpf(1702) / 1000
# The functions NKI's activation table adds (references/functions.hpp), from their definitions.
_ACTIVATIONS = {
    "erf": mpmath.erf,
    "erf_dx": lambda v: 2 / mpmath.sqrt(mpmath.pi) * mpmath.exp(-v * v),
    "sin": mpmath.sin,
    "cos": mpmath.cos,
    "tan": mpmath.tan,
    "atan": mpmath.atan,
    "mish": lambda v: v * mpmath.tanh(mpmath.log1p(mpmath.exp(v))),
    "gelu_sigmoid": lambda v: v / (1 + mpmath.exp(-K * v)),
    "gelu_dx": lambda v: mpmath.ncdf(v) + v * mpmath.npdf(v),
    "silu_dx": _silu_dx,
    "gelu_sigmoid_dx": lambda v: _silu_dx(K * v),
}


def _want(name: str, x: float, out: str) -> float:
    v = _mp(name, x)
    if v == 0:
        return math.copysign(0.0, x) if name in ("tanh", "gelu", "gelu_tanh", "silu", "sqrt", "erf", "sin", "tan",
                                                 "atan", "mish", "gelu_sigmoid") else 0.0
    man, exp = mpmath.mpf(abs(v)).man_exp  # man_exp carries no sign: put it back below
    # Far outside every format's range (gelu(-2e4) is about -1e-77000000), any value of the same
    # sign rounds alike: stand-ins keep the Fraction arithmetic small.
    if int(exp) + int(man).bit_length() < -2000:
        man, exp = 1, -2000
    elif int(exp) > 2000:
        man, exp = 1, 2000
    exact = Fraction(int(man)) * Fraction(2) ** int(exp)
    return round_oracle(-exact if v < 0 else exact, SPECS[out])


def _call(name, x, **kw):
    if name == "gelu_tanh":
        return rf.gelu(x, approximate="tanh", **kw)
    return getattr(rf, name)(x, **kw)


def _finite_domain(name: str, xs: np.ndarray) -> np.ndarray:
    xs = xs[np.isfinite(xs)]
    if name in ("log", "rsqrt"):
        xs = xs[xs > 0]
    if name == "sqrt":
        xs = xs[xs >= 0]
    if name == "reciprocal":
        xs = xs[xs != 0]
    # Keep mpmath's work bounded: huge arguments only matter to exp-like tails.
    return xs[np.abs(xs) < 1e6]


ALL_BF16 = numeq.decode(np.arange(1 << 16, dtype=np.uint16), "bf16")  # float64 values, NaNs included


@pytest.mark.parametrize("name", ["exp", "tanh"])
def test_every_bf16_input(name):
    xs = _finite_domain(name, ALL_BF16.astype(np.float64))
    got = _call(name, xs.astype(ml_dtypes.bfloat16), out="bf16")
    for x, g in zip(xs.tolist(), got.tolist()):
        assert same_float(g, _want(name, x, "bf16")), (name, x, g)


NAMES = ["exp", "exp2", "log", "tanh", "sigmoid", "gelu", "gelu_tanh", "silu", "softplus", "sqrt", "rsqrt",
         "reciprocal"] + list(_ACTIVATIONS)


@pytest.mark.parametrize("name", NAMES)
def test_fp32_sample(name):
    rng = np.random.default_rng(7)
    xs = rng.integers(0, 1 << 32, 400, dtype=np.uint64).astype(np.uint32).view(np.float32)
    xs = np.concatenate([xs, rng.normal(0, 8, 200).astype(np.float32), np.float32([0, 1, 2, 0.5, -3])])
    xs = _finite_domain(name, xs.astype(np.float64)).astype(np.float32)
    got = _call(name, xs)  # float32 -> in_fmt fp32, out fp32
    for x, g in zip(xs.astype(np.float64).tolist(), got.tolist()):
        assert same_float(g, _want(name, x, "fp32")), (name, x, g)


def test_scalars_specials_and_keywords():
    assert rf.exp(0.0) == 1.0
    assert math.isinf(rf.log(0.0)) and rf.log(0.0) < 0
    assert math.isnan(rf.sqrt(-1.0))
    assert rf.rsqrt(-0.0) == -math.inf
    assert rf.sigmoid(-math.inf) == 0.0
    assert rf.exp(100.0, out="bf16", overflow="saturate") == float(ml_dtypes.finfo(ml_dtypes.bfloat16).max)
    assert rf.exp(1.0, out="bf16", rounding="toward_zero") == 2.703125
    assert rf.exp(1.0, out="bf16", rounding="upward") == 2.71875
    x = np.linspace(-4, 4, 64)
    a = rf.gelu(x, approximate="tanh", out="bf16", rounding="stochastic", seed=3)
    b = rf.gelu(x, approximate="tanh", out="bf16", rounding="stochastic", seed=3)
    assert np.array_equal(a, b) and a.dtype == np.float64 and a.shape == x.shape


def test_errors():
    with pytest.raises(ValueError, match="approximate"):
        rf.gelu(np.ones(2), approximate="fast")
    with pytest.raises(TypeError, match="x"):
        rf.exp(np.array(["a"]))
    with pytest.raises(ValueError, match="in_fmt"):
        rf.exp(np.array([0.1]), in_fmt="bf16")
    assert rf.exp(np.array([0.5]), in_fmt="bf16").shape == (1,)
    with pytest.raises(ValueError, match="element 1"):
        rf.log(np.array([1.0, -1.0]), out="e2m1fn")
    with pytest.raises(ValueError, match="out"):
        rf.exp(np.ones(2), out="nope")
    with pytest.raises(ValueError, match="rounding"):
        rf.exp(np.ones(2), rounding="nope")


@pytest.mark.parametrize("name", ["erf", "sin", "mish", "silu_dx"])
def test_every_bf16_input_activations(name):
    xs = _finite_domain(name, ALL_BF16.astype(np.float64))
    got = _call(name, xs.astype(ml_dtypes.bfloat16), out="bf16")
    for x, g in zip(xs.tolist(), got.tolist()):
        assert same_float(g, _want(name, x, "bf16")), (name, x, g)


def test_activation_specials():
    inf, nan = math.inf, math.nan
    assert rf.erf(inf) == 1.0 and rf.erf(-inf) == -1.0 and rf.erf_dx(-inf) == 0.0
    assert all(math.isnan(getattr(rf, n)(inf)) for n in ("sin", "cos", "tan"))
    assert rf.atan(-inf) == -float(np.float32(math.pi / 2)) and rf.atan(inf, out="fp64") == math.pi / 2
    assert rf.cos(-0.0) == 1.0 and math.copysign(1, rf.sin(-0.0)) < 0 and math.copysign(1, rf.mish(-0.0)) < 0
    for n in ("gelu_dx", "silu_dx", "gelu_sigmoid_dx"):
        assert getattr(rf, n)(0.0) == 0.5 and getattr(rf, n)(inf) == 1.0
        assert getattr(rf, n)(-inf) == 0.0 and math.copysign(1, getattr(rf, n)(-inf)) < 0
    assert rf.mish(inf) == inf and rf.gelu_sigmoid(-inf) == 0.0 and math.isnan(rf.erf(nan))
    # Tails of the derivatives: on the right side of 1 and of 0 in directed modes (far beyond
    # MPFR's exponent range for e^-x^2 at 1e30).
    assert rf.gelu_dx(1e30, rounding="upward") > 1.0 and rf.gelu_dx(1e30, rounding="downward") == 1.0
    assert rf.silu_dx(-1e30, rounding="downward") < 0 and rf.silu_dx(-1e30) == 0.0
    assert rf.gelu_sigmoid_dx(3e38, rounding="toward_zero") == 1.0
