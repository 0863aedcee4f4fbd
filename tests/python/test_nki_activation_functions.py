"""NKI's activation functions beyond exp / tanh / gelu ... (the NKI API reference's activation table:
erf, erf_dx, sin, arctan, mish, gelu_apprx_sigmoid, gelu_dx, silu_dx, gelu_apprx_sigmoid_dx) run by
nisa.activation on numeq, against oracles written here with mpmath (400 bits, rounded once to fp32
by conftest's exact Fraction oracle): the platform's function model is each function correctly
rounded to fp32. Also: sin's documented behaviour beyond [-PI, PI] (assumption
activation_sin_outside), the documented ranges of sin and arctan (rule activation_range), and the
kernel run agreeing bit for bit with the operation catalogue's emulation on the run's platform.
"""

from __future__ import annotations

import json
import math
from fractions import Fraction

import mpmath
import numpy as np
import pytest

import numeq
from conftest import SPECS, round_oracle, same_float
from nki_support import errors, hbm, sbuf
from numeq import nki
from numeq.nki.machine import arithmetic

nl, nisa = nki.language, nki.isa

mpmath.mp.prec = 400
K = mpmath.mpf(1702) / 1000  # gelu_apprx_sigmoid's constant (nki-library: x * torch.sigmoid(1.702 * x))


def _sigmoid(v):
    return 1 / (1 + mpmath.exp(-v))


def _silu_dx(v):
    s = _sigmoid(v)
    return s + v * s * (1 - s)


ORACLES = {
    "erf": mpmath.erf,
    "erf_dx": lambda v: 2 / mpmath.sqrt(mpmath.pi) * mpmath.exp(-v * v),
    "sin": mpmath.sin,
    "arctan": mpmath.atan,
    "mish": lambda v: v * mpmath.tanh(mpmath.log1p(mpmath.exp(v))),
    "gelu_apprx_sigmoid": lambda v: v * _sigmoid(K * v),
    "gelu_dx": lambda v: mpmath.ncdf(v) + v * mpmath.npdf(v),
    "silu_dx": _silu_dx,
    "gelu_apprx_sigmoid_dx": lambda v: _silu_dx(K * v),
}
# The catalogue's name of each (numeq.ops, numeq.reference).
REFERENCE = {"erf": "erf", "erf_dx": "erf_dx", "sin": "sin", "arctan": "atan", "mish": "mish",
             "gelu_apprx_sigmoid": "gelu_sigmoid", "gelu_dx": "gelu_dx", "silu_dx": "silu_dx",
             "gelu_apprx_sigmoid_dx": "gelu_sigmoid_dx"}


def want_fp32(name: str, x: float) -> float:
    v = ORACLES[name](mpmath.mpf(x))
    if v == 0:
        return math.copysign(0.0, x)
    man, exp = mpmath.mpf(abs(v)).man_exp
    exact = Fraction(int(man)) * Fraction(2) ** int(exp)
    return round_oracle(-exact if v < 0 else exact, SPECS["fp32"])


def inputs(name: str, n: int = 96) -> np.ndarray:
    """fp32 arguments inside the function's documented range: dense normals, tails, exact points."""
    rng = np.random.default_rng(sum(map(ord, name)))
    if name == "sin":
        xs = rng.uniform(-np.pi, np.pi, n)
        extra = [0.0, -0.0, 1e-30, -1e-30, 1.0, arithmetic.SIN_RANGE, -arithmetic.SIN_RANGE, 1.5707964]
    elif name == "arctan":
        xs = rng.uniform(-np.pi / 2, np.pi / 2, n)
        extra = [0.0, -0.0, 1e-30, 1.0, -1.0, float(np.float32(np.pi / 2)), -float(np.float32(np.pi / 2))]
    else:
        xs = np.concatenate([rng.normal(0, 3, n - 16), rng.uniform(-40, 40, 16)])
        extra = [0.0, -0.0, 1e-30, -1e-30, 1.0, -1.0, -0.7517916, -1.2784645, 9.0, -9.0, 30.0, -30.0, 1e4, -1e4]
    return np.concatenate([xs, extra]).astype(np.float32).reshape(-1, 1)


@nki.jit
def _activation(a, op):
    y = nl.ndarray(a.shape, nl.float32, buffer=nl.sbuf)
    nisa.activation(dst=y, op=op, data=sbuf(a))
    return hbm(y)


def _run(name: str, a: np.ndarray, **kwargs):
    return nki.run(_activation, a, getattr(nl, name), **kwargs)


@pytest.mark.parametrize("name", list(ORACLES))
def test_activation_is_the_certified_function(name):
    a = inputs(name)
    r = _run(name, a)
    assert not errors(r, "activation_range")
    got = r.outputs.reshape(-1)
    for x, g in zip(a.reshape(-1).astype(np.float64).tolist(), got.astype(np.float64).tolist()):
        assert same_float(g, want_fp32(name, x)), (name, x, g)


@pytest.mark.parametrize("name", list(ORACLES))
def test_kernel_run_is_the_catalogue_emulation(name):
    """The law tying the levels: the kernel gives the op-level emulation on the run's platform."""
    a = inputs(name, 64)
    r = _run(name, a)
    op = getattr(numeq.ops, REFERENCE[name])(a.reshape(-1), in_fmt="fp32", out="fp32")
    assert np.array_equal(np.asarray(op.emulate(r.platform)), r.outputs.reshape(-1).astype(np.float64))


def test_every_activation_name_is_computed():
    for name in ORACLES:
        assert name in arithmetic.function_names()
    # The platform models each with the scalar_activation_ulps budget (assumed), as exp and tanh.
    for platform in ("trainium.trn1", "trainium.trn2"):
        models = {f["function"]: f for f in json.loads(numeq.machines.platform_json(platform))["functions"]}
        for ref in REFERENCE.values():
            assert ref in numeq.reference.__all__
            assert models[ref]["model"] == "ulp_budget" and models[ref]["ulps"] == models["exp"]["ulps"]


def test_sin_beyond_its_range_is_the_documented_cubic():
    """nki.api.shared: "nki.isa.activation(op=nl.sin) extrapolates a cubic outside [-PI, PI] and
    sin(9.0) returns ~27.65 (not ~0.41)"; the cubic is sin's Taylor cubic at +-pi (assumption
    activation_sin_outside = documented_cubic, the default)."""
    a = np.float32([[9.0], [-9.0], [3.2], [-3.2], [2.0]])
    r = _run("sin", a)
    got = r.outputs.reshape(-1)
    assert abs(float(got[0]) - 27.65) < 0.01 and float(got[1]) == -float(got[0])
    u = np.float64(np.float32(3.2)) - np.pi
    assert float(got[2]) == float(np.float32(-u + u ** 3 / 6))
    assert float(got[4]) == want_fp32("sin", 2.0)  # inside the range: the certified value
    found = errors(r, "activation_range")
    assert len(found) == 1 and "4 inputs" in found[0].message and "activation_sin_outside" in found[0].message
    # true_sin: sin correctly rounded everywhere; the range is still a finding.
    r2 = _run("sin", a, assume={"activation_sin_outside": "true_sin"})
    for x, g in zip(a.reshape(-1).tolist(), r2.outputs.reshape(-1).tolist()):
        assert same_float(g, want_fp32("sin", x))
    assert errors(r2, "activation_range")


def test_sin_cubic_without_a_kernel():
    x = np.float32([9.0, -4.0, 0.5])
    y = arithmetic.function_fp32("sin", x)
    assert abs(float(y[0]) - 27.652597) < 1e-5 and float(y[2]) == want_fp32("sin", 0.5)
    t = arithmetic.function_fp32("sin", x, sin_outside="true_sin")
    assert float(t[0]) == want_fp32("sin", 9.0)


def test_arctan_outside_its_documented_range_is_a_finding():
    a = np.float32([[1.0], [2.0], [-100.0]])
    r = _run("arctan", a)
    found = errors(r, "activation_range")
    assert len(found) == 1 and "2 inputs" in found[0].message
    for x, g in zip(a.reshape(-1).tolist(), r.outputs.reshape(-1).tolist()):
        assert same_float(g, want_fp32("arctan", x))  # numeq's value: arctan correctly rounded


def test_older_interface_tile_functions():
    @nki.jit
    def k(a):
        out = nl.ndarray(a.shape, nl.float32, buffer=nl.shared_hbm)
        t = nl.load(a)
        nl.store(out, nl.mish(nl.erf(t)))
        return out

    a = np.float32([[0.5, -1.5, 3.0]])
    got = nki.run(k, a).outputs.reshape(-1)
    for x, g in zip(a.reshape(-1).tolist(), got.tolist()):
        e = want_fp32("erf", x)
        assert same_float(g, want_fp32("mish", e))


def test_language_functions_cos_tan_and_rounding():
    x = np.float32([0.0, 1.0, -2.5, 9.0, 100.0])
    for name, f in (("cos", mpmath.cos), ("tan", mpmath.tan), ("sin", mpmath.sin), ("arctan", mpmath.atan)):
        got = arithmetic.language_function_fp32(name, x)
        for v, g in zip(x.tolist(), got.tolist()):
            m = f(mpmath.mpf(v))
            want = 0.0 if m == 0 else float(np.float32(float(mpmath.mpf(m))))  # 400 bits -> double -> fp32
            assert g == want or abs(g - want) <= abs(want) * 2 ** -24, (name, v, g, want)
    y = np.float32([3.2, -3.7, -3.2, 0.5, -0.5])
    assert arithmetic.language_function_fp32("ceil", y).tolist() == [4.0, -3.0, -3.0, 1.0, -0.0]
    assert arithmetic.language_function_fp32("floor", y).tolist() == [3.0, -4.0, -4.0, 0.0, -1.0]
    assert arithmetic.language_function_fp32("trunc", y).tolist() == [3.0, -3.0, -3.0, 0.0, -0.0]
