"""Integer quantisation: quantize / dequantize / quant_params against exact-rational oracles.

q = clamp(round(x / scale) + zero_point, qmin, qmax) with x / scale an exact rational (no float
division), rounded once; x' = (q - zero_point) * scale exact, rounded once into ``out``.
"""

from __future__ import annotations

import math
import zlib
from fractions import Fraction

import numpy as np
import pytest

import numeq

from conftest import DETERMINISTIC_ROUNDINGS, SPECS, assert_same_floats, round_oracle

RANGES = {"int8": (-128, 127), "uint8": (0, 255), "int32": (-(2**31), 2**31 - 1)}
FMTS = list(RANGES)


def qrange(fmt, rng_name):
    lo, hi = RANGES[fmt]
    return (lo + 1 if rng_name == "symmetric" else lo), hi


def round_int(v: Fraction, mode: str) -> int:
    f, c = math.floor(v), math.ceil(v)
    if f == c:
        return f
    if mode == "nearest_even":
        return round(v)  # Fraction.__round__ is half-to-even
    if mode == "nearest_away":
        return int(math.copysign(math.floor(abs(v) + Fraction(1, 2)), v))
    if mode == "toward_zero":
        return int(v)
    if mode == "upward":
        return c
    if mode == "downward":
        return f
    if mode == "odd":
        return f if f % 2 else c
    raise ValueError(mode)


def quantize_oracle(x: float, scale: float, zp: int, fmt: str, rng_name: str, mode: str) -> int:
    lo, hi = qrange(fmt, rng_name)
    if math.isinf(x):
        return hi if x > 0 else lo
    n = round_int(Fraction(x) / Fraction(scale), mode)
    return min(max(n + zp, lo), hi)


def random_values(rng, n, scale, qspan):
    """Values whose x/scale spreads over and beyond the code range, with exact ties mixed in."""
    k = rng.integers(-2 * qspan, 2 * qspan, size=n)
    x = (k + rng.choice([0.0, 0.5, 0.25, rng.random()], size=n)) * scale
    x[: n // 10] = rng.standard_normal(n // 10) * scale * 3  # small, fractional
    return x


SCALES = [0.1, 1 / 3, 2.0**-7, 0.0173, 3.0, 1e-3 * (1 + 2**-40)]


@pytest.mark.parametrize("mode", DETERMINISTIC_ROUNDINGS)
@pytest.mark.parametrize("rng_name", ["full", "symmetric"])
@pytest.mark.parametrize("fmt", FMTS)
def test_per_tensor_matches_oracle(fmt, rng_name, mode):
    rng = np.random.default_rng(zlib.crc32(repr((fmt, rng_name, mode)).encode()))
    lo, hi = qrange(fmt, rng_name)
    qspan = min(hi - lo, 600)
    for scale in SCALES:
        zp = int(rng.integers(lo, hi + 1)) if fmt != "int32" else int(rng.integers(-1000, 1000))
        x = random_values(rng, 250, scale, qspan)
        if fmt == "int32":
            x = np.concatenate([x, [3e9 * scale, -3e9 * scale, 1e300, -1e300]])
        x = np.concatenate([x, [np.inf, -np.inf, 0.0, -0.0]])
        got = numeq.quantize(x, fmt, scale=scale, zero_point=zp, range=rng_name, rounding=mode)
        assert got.dtype == np.int64 and got.shape == x.shape
        want = [quantize_oracle(float(v), scale, zp, fmt, rng_name, mode) for v in x]
        np.testing.assert_array_equal(got, want, err_msg=f"scale={scale!r} zp={zp}")


def test_quotient_is_exact_not_float_division():
    # x / s in float64 rounds to exactly 51.0, but the exact quotient of the two doubles is
    # 51 - 3.1e-15: downward / toward_zero must give 50 (float division would give 51)
    x, s = 32.670195592860225, 0.6405920704482397
    assert x / s == 51.0 and 50 < Fraction(x) / Fraction(s) < 51
    assert numeq.quantize(x, scale=s, rounding="downward") == 50
    assert numeq.quantize(x, scale=s, rounding="toward_zero") == 50
    assert numeq.quantize(x, scale=s, rounding="upward") == 51
    assert numeq.quantize(x, scale=s, rounding="odd") == 51
    assert numeq.quantize(-x, scale=s, rounding="upward") == -50
    assert isinstance(numeq.quantize(x, scale=s), int)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_per_channel(axis, dtype):
    rng = np.random.default_rng(4)
    x = (rng.standard_normal((5, 7)) * 20).astype(dtype)
    n = x.shape[axis]
    scales = rng.uniform(0.05, 0.5, size=n)
    zps = np.full(n, 3)  # a scalar zero point (per-channel zero-point arrays: next test)
    got = numeq.quantize(x, "int8", scale=scales, zero_point=3, axis=axis)
    want = np.empty(x.shape, dtype=np.int64)
    for idx in np.ndindex(x.shape):
        c = idx[axis]
        want[idx] = quantize_oracle(float(x[idx]), scales[c], int(zps[c]), "int8", "full", "nearest_even")
    np.testing.assert_array_equal(got, want)
    back = numeq.dequantize(got, scale=scales, zero_point=3, axis=axis)
    for idx in np.ndindex(x.shape):
        c = idx[axis]
        assert back[idx] == float((Fraction(int(got[idx])) - int(zps[c])) * Fraction(scales[c]))


@pytest.mark.parametrize(
    "axis",
    [0, 1, -1],
)
def test_per_channel_zero_point_array(axis):
    rng = np.random.default_rng(14)
    x = rng.standard_normal((5, 7)) * 20
    n = x.shape[axis]
    scales = rng.uniform(0.05, 0.5, size=n)
    zps = rng.integers(-10, 10, size=n)
    got = numeq.quantize(x, "int8", scale=scales, zero_point=zps, axis=axis)
    want = np.empty(x.shape, dtype=np.int64)
    for idx in np.ndindex(x.shape):
        c = idx[axis]
        want[idx] = quantize_oracle(float(x[idx]), scales[c], int(zps[c]), "int8", "full", "nearest_even")
    np.testing.assert_array_equal(got, want)
    back = numeq.dequantize(got, scale=scales, zero_point=zps, axis=axis)
    for idx in np.ndindex(x.shape):
        c = idx[axis]
        assert back[idx] == float((Fraction(int(got[idx])) - int(zps[c])) * Fraction(scales[c]))


@pytest.mark.parametrize("fmt", FMTS)
@pytest.mark.parametrize("shape,axis,block", [((3, 8), -1, 4), ((6, 4), 0, 3), ((2, 3, 8), 2, 2), ((4, 6), 1, 6)])
def test_per_block(fmt, shape, axis, block):
    rng = np.random.default_rng(5)
    x = rng.standard_normal(shape) * 10
    sshape = list(shape)
    sshape[axis] //= block
    scales = rng.uniform(0.01, 0.2, size=sshape)
    lo, hi = RANGES[fmt]
    zps = rng.integers(max(lo, -5), min(hi, 5) + 1, size=sshape)
    got = numeq.quantize(x, fmt, scale=scales, zero_point=zps, axis=axis, block_size=block, rounding="nearest_away")
    ax = axis % len(shape)
    want = np.empty(shape, dtype=np.int64)
    for idx in np.ndindex(shape):
        sidx = list(idx)
        sidx[ax] //= block
        sidx = tuple(sidx)
        want[idx] = quantize_oracle(float(x[idx]), scales[sidx], int(zps[sidx]), fmt, "full", "nearest_away")
    np.testing.assert_array_equal(got, want)
    back = numeq.dequantize(got, scale=scales, zero_point=zps, axis=axis, block_size=block)
    for idx in np.ndindex(shape):
        sidx = list(idx)
        sidx[ax] //= block
        sidx = tuple(sidx)
        assert back[idx] == float((Fraction(int(got[idx])) - int(zps[sidx])) * Fraction(scales[sidx]))


def test_clamping_and_ranges():
    x = np.array([-1e6, -128.4, -127.6, -0.4, 0.4, 127.4, 127.6, 1e6, np.inf, -np.inf])
    np.testing.assert_array_equal(numeq.quantize(x, "int8", scale=1.0), [-128, -128, -128, 0, 0, 127, 127, 127, 127, -128])
    np.testing.assert_array_equal(numeq.quantize(x, "int8", scale=1.0, range="symmetric"),
                                  [-127, -127, -127, 0, 0, 127, 127, 127, 127, -127])
    np.testing.assert_array_equal(numeq.quantize(x, "uint8", scale=1.0, zero_point=128),
                                  [0, 0, 0, 128, 128, 255, 255, 255, 255, 0])
    np.testing.assert_array_equal(numeq.quantize(x, "uint8", scale=1.0, zero_point=128, range="symmetric"),
                                  [1, 1, 1, 128, 128, 255, 255, 255, 255, 1])
    big = np.array([2.0**40, -(2.0**40)])
    np.testing.assert_array_equal(numeq.quantize(big, "int32", scale=1.0), [2**31 - 1, -(2**31)])
    np.testing.assert_array_equal(numeq.quantize(big, "int32", scale=1.0, range="symmetric"), [2**31 - 1, -(2**31) + 1])


@pytest.mark.parametrize("v", [3.3, -0.75, 126.9, -127.999])
def test_stochastic_quantize_mean(v):
    """E[q] = x / scale for in-range values: the mean of 10^6 draws is within 6 sigma."""
    n = 1_000_000
    q = numeq.quantize(np.full(n, v), "int8", scale=1.0, rounding="stochastic", seed=17)
    f = math.floor(v)
    assert set(np.unique(q)) <= {f, f + 1}
    p = v - f
    sigma = math.sqrt(p * (1 - p) / n)
    assert abs(q.mean() - v) <= 6 * sigma + 2.0**-32
    # and a different seed gives a different (equally unbiased) sequence
    q2 = numeq.quantize(np.full(n, v), "int8", scale=1.0, rounding="stochastic", seed=18)
    assert not np.array_equal(q, q2)


@pytest.mark.parametrize("out,rounding", [("fp64", "nearest_even"), ("fp32", "nearest_even"), ("fp32", "toward_zero"),
                                          ("bf16", "upward"), ("fp16", "downward"), ("e4m3fn", "nearest_away")])
def test_dequantize_matches_oracle(out, rounding):
    rng = np.random.default_rng(9)
    q = rng.integers(-128, 128, size=500)
    for scale in SCALES:
        zp = int(rng.integers(-20, 20))
        got = numeq.dequantize(q, scale=scale, zero_point=zp, out=out, rounding=rounding)
        assert got.dtype == np.float64
        exact = [(Fraction(int(k)) - zp) * Fraction(scale) for k in q]
        if out == "fp64":
            want = [float(e) for e in exact]  # Fraction -> float is correctly rounded (ties to even)
        else:
            want = [round_oracle(e, SPECS[out], rounding=rounding) if e != 0 else 0.0 for e in exact]
        assert_same_floats(got, want, f"{out} {rounding} scale={scale!r}")


# ---------------------------------------------------------------------------------------------
# quant_params
# ---------------------------------------------------------------------------------------------
def fp32_nearest(q: Fraction) -> float:
    return round_oracle(q, SPECS["fp32"])


def params_oracle(values: np.ndarray, fmt: str, rng_name: str) -> tuple[float, int]:
    qmin, qmax = qrange(fmt, rng_name)
    lo = min(float(values.min()), 0.0)
    hi = max(float(values.max()), 0.0)
    if rng_name == "symmetric":
        span = Fraction(max(-lo, hi))
        steps = Fraction(qmax - qmin, 2)  # int8: 127, uint8: 127 around 128, int32: 2^31 - 1
    else:
        span = Fraction(hi) - Fraction(lo)
        steps = Fraction(qmax - qmin)
    if span == 0:
        return 1.0, (0 if fmt != "uint8" else 128) if rng_name == "symmetric" else qmin
    scale = fp32_nearest(span / steps)
    if rng_name == "symmetric":
        return scale, (qmin + qmax + 1) // 2
    zp = qmin - round(Fraction(lo) / Fraction(scale))
    return scale, min(max(zp, qmin), qmax)


@pytest.mark.parametrize(
    "fmt,rng_name",
    [(f, r) for f in FMTS for r in ("full", "symmetric")],
)
def test_quant_params_per_tensor(fmt, rng_name):
    rng = np.random.default_rng(10)
    for trial in range(20):
        x = rng.standard_normal(100) * rng.uniform(0.01, 100) + rng.uniform(-5, 5) * (trial % 3)
        if trial == 0:
            x = np.abs(x)  # all positive: range widened to include 0
        scale, zp = numeq.quant_params(x, fmt, range=rng_name)
        assert scale.shape == () and zp.shape == ()
        ws, wz = params_oracle(x, fmt, rng_name)
        assert float(scale) == ws and int(zp) == wz, (trial, float(scale), ws, int(zp), wz)
        assert float(np.float32(scale)) == float(scale)  # stored as fp32
        # the parameters cover the data: nothing clips by more than rounding (plus, for int32's
        # 2^32 codes, the fp32 rounding of the scale: up to 2^-24 relative of the extreme value)
        q = numeq.quantize(x, fmt, scale=scale, zero_point=zp, range=rng_name)
        back = numeq.dequantize(q, scale=scale, zero_point=zp)
        slack = 2.0**-23 * np.max(np.abs(x)) if fmt == "int32" else 1e-6 * float(scale)
        assert np.all(np.abs(back - x) <= 0.5 * float(scale) + slack), np.max(np.abs(back - x)) / float(scale)


def test_quant_params_int32_full_range_negative_heavy():
    x = np.array([-3.0, 1.0])
    scale, zp = numeq.quant_params(x, "int32")
    ws, wz = params_oracle(x, "int32", "full")
    assert float(scale) == ws
    assert int(zp) == wz  # 1073741824; numeq gives 0, and -3 then dequantizes to -2
    q = numeq.quantize(x, "int32", scale=scale, zero_point=zp)
    np.testing.assert_allclose(numeq.dequantize(q, scale=scale, zero_point=zp), x, atol=float(scale))


def test_quant_params_zero_maps_to_a_code():
    x = np.array([-1.3, 0.0, 2.9, 0.7])
    scale, zp = numeq.quant_params(x, "uint8")
    assert numeq.dequantize(numeq.quantize(0.0, "uint8", scale=scale, zero_point=zp), scale=scale, zero_point=zp) == 0
    assert numeq.quant_params(np.zeros(5), "int8")[0] == 1.0


@pytest.mark.parametrize("axis", [0, 1])
def test_quant_params_per_channel_and_block(axis):
    rng = np.random.default_rng(11)
    x = rng.standard_normal((4, 8)) * rng.uniform(0.1, 10, size=(4, 1))
    scale, zp = numeq.quant_params(x, "int8", axis=axis, range="symmetric")
    assert scale.shape == (x.shape[axis],) and zp.shape == (x.shape[axis],)
    for c in range(x.shape[axis]):
        ws, wz = params_oracle(np.take(x, c, axis=axis), "int8", "symmetric")
        assert scale[c] == ws and zp[c] == wz
    # per block of 4 along the last axis
    scale, zp = numeq.quant_params(x, "uint8", block_size=4)
    assert scale.shape == (4, 2)
    for i in range(4):
        for b in range(2):
            ws, wz = params_oracle(x[i, 4 * b:4 * b + 4], "uint8", "full")
            assert scale[i, b] == ws and zp[i, b] == wz
    q = numeq.quantize(x, "uint8", scale=scale, zero_point=zp, block_size=4)
    assert q.min() >= 0 and q.max() <= 255


def test_quant_params_rejects_non_finite():
    with pytest.raises(ValueError):
        numeq.quant_params(np.array([1.0, np.inf]))


def test_strided_inputs_match_contiguous_copies():
    rng = np.random.default_rng(15)
    base = rng.standard_normal((40, 30)) * 50
    for v in (base.T, base[::3, ::-2], base.ravel()[::-1]):
        c = np.ascontiguousarray(v)
        for mode in ("nearest_even", "stochastic"):
            np.testing.assert_array_equal(numeq.quantize(v, scale=0.7, rounding=mode, seed=2),
                                          numeq.quantize(c, scale=0.7, rounding=mode, seed=2))
        s, z = numeq.quant_params(v, "uint8", axis=0)
        s2, z2 = numeq.quant_params(c, "uint8", axis=0)
        np.testing.assert_array_equal(s, s2)
        np.testing.assert_array_equal(z, z2)
