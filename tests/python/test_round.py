"""numeq.round against an exact-rational oracle (conftest.round_oracle): every deterministic rounding
mode, both overflow modes, the subnormal policies, signed zeros, layouts, threads, stochastic
rounding statistics and the peer-bug regressions of FACTS.md s1."""

from __future__ import annotations

import math
import zlib
from fractions import Fraction

import numpy as np
import pytest

import numeq

from conftest import (
    DETERMINISTIC_ROUNDINGS,
    FLOAT_FORMATS,
    SPECS,
    assert_same_floats,
    max_finite,
    neighbours,
    random_doubles,
    round_oracle,
    same_float,
)

OVERFLOWS = ["ieee", "saturate"]


def oracle_array(x: np.ndarray, spec, **kw) -> np.ndarray:
    return np.array([round_oracle(float(v), spec, **kw) for v in np.ravel(x)]).reshape(np.shape(x))


# ---------------------------------------------------------------------------------------------
# Random doubles, every format, every deterministic mode, both overflow modes
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("overflow", OVERFLOWS)
@pytest.mark.parametrize("rounding", DETERMINISTIC_ROUNDINGS)
@pytest.mark.parametrize("name", FLOAT_FORMATS)
def test_random_doubles_match_oracle(name, rounding, overflow):
    spec = SPECS[name]
    rng = np.random.default_rng(zlib.crc32(repr((name, rounding, overflow)).encode()))
    x = random_doubles(rng, spec, 300)
    got = numeq.round(x, name, rounding=rounding, overflow=overflow)
    assert got.dtype == np.float64 and got.shape == x.shape
    assert_same_floats(got, oracle_array(x, spec, rounding=rounding, overflow=overflow),
                       f"{name} {rounding} {overflow}")


@pytest.mark.parametrize("rounding", DETERMINISTIC_ROUNDINGS)
@pytest.mark.parametrize("name", ["bf16", "fp16", "e4m3fn", "e5m2", "e4m3fnuz", "e2m1fn"])
def test_random_float32_inputs_match_oracle(name, rounding):
    spec = SPECS[name]
    rng = np.random.default_rng(7)
    with np.errstate(over="ignore"):  # bf16's overflow region lies beyond float32 (-> +-inf)
        x = random_doubles(rng, spec, 300).astype(np.float32)
    got = numeq.round(x, name, rounding=rounding)
    assert_same_floats(got, oracle_array(x.astype(np.float64), spec, rounding=rounding), f"{name} {rounding}")


# ---------------------------------------------------------------------------------------------
# Overflow thresholds (OFP8 s5.2 "round, then compare with the maximum"; IEEE 754 s7.4)
# ---------------------------------------------------------------------------------------------
def threshold_values(spec) -> list[float]:
    mx = max_finite(spec)
    _, up = neighbours(mx, spec)  # the next grid point above max (2^emax * 2 for IEEE-like)
    ulp = up - mx
    points = [mx - ulp / 2, mx, mx + ulp / 2, mx + ulp, 2 * mx]
    out = []
    for p in points:
        f = float(p)
        out += [np.nextafter(f, -np.inf), f, np.nextafter(f, np.inf)]
    return out


# the thresholds named in FACTS.md s1, in addition to each format's own
NAMED_THRESHOLDS = {
    "e4m3fn": [448.0, 464.0, 465.0, 464.0 + 2**-20, 480.0],
    "e4m3": [240.0, 248.0, 256.0],
    "e4m3fnuz": [240.0, 248.0],
    "e5m2": [57344.0, 61440.0],
    "e5m2fnuz": [57344.0, 61440.0],
    "fp16": [65504.0, 65520.0],
    "bf16": [(2 - 2**-8) * 2.0**127],
}


@pytest.mark.parametrize("overflow", OVERFLOWS)
@pytest.mark.parametrize("rounding", DETERMINISTIC_ROUNDINGS)
@pytest.mark.parametrize("name", FLOAT_FORMATS)
def test_overflow_thresholds(name, rounding, overflow):
    spec = SPECS[name]
    pos = threshold_values(spec) + NAMED_THRESHOLDS.get(name, []) + [math.inf]
    x = np.array(pos + ([-v for v in pos] if spec.signed else []))
    got = numeq.round(x, name, rounding=rounding, overflow=overflow)
    assert_same_floats(got, oracle_array(x, spec, rounding=rounding, overflow=overflow),
                       f"{name} {rounding} {overflow}")


@pytest.mark.parametrize("name", ["e4m3fn", "e4m3", "e5m2", "fp16", "bf16", "e4m3fnuz"])
def test_directed_overflow_rules(name):
    """Spelled out (independently of the oracle): toward_zero and odd never overflow to Inf/NaN,
    upward only for positives, downward only for negatives, saturate never."""
    spec = SPECS[name]
    mx = float(max_finite(spec))
    big = mx * 4
    r = lambda v, mode, ov="ieee": numeq.round(v, name, rounding=mode, overflow=ov)  # noqa: E731
    for v in (big, -big):
        assert abs(r(v, "toward_zero")) == mx
        assert abs(r(v, "odd")) == mx
        assert abs(r(v, "nearest_even", "saturate")) == mx
        assert not math.isfinite(r(v, "nearest_even"))
    assert not math.isfinite(r(big, "upward")) and r(-big, "upward") == -mx
    assert r(big, "downward") == mx and not math.isfinite(r(-big, "downward"))


# ---------------------------------------------------------------------------------------------
# Regression cases from FACTS.md s1 (peer bugs)
# ---------------------------------------------------------------------------------------------
def test_ml_dtypes_double_rounding_case():
    # ml_dtypes PR 401: -431.99999999999994 -> e4m3fn must be -416 (single rounding), not -448.
    x = -431.99999999999994
    # just inside the midpoint 432 between 416 and 448: single rounding gives 416; rounding to
    # float32 first gives exactly -432, a tie that goes to even (-448)
    assert -Fraction(432) < Fraction(x) < -Fraction(432) + Fraction(1, 2**40)
    assert float(np.float32(x)) == -432.0
    want = round_oracle(x, SPECS["e4m3fn"])
    assert want == -416.0
    assert numeq.round(x, "e4m3fn") == -416.0
    assert numeq.round(np.array([x]), "e4m3fn")[0] == -416.0
    assert numeq.encode(x, "e4m3fn") == 0xFD  # S.1111.101 = -1.625 * 2^8


def test_e4m3fn_464_tie_and_overflow():
    assert numeq.round(464.0, "e4m3fn") == 448.0  # tie: rounds to 448 (even), then <= max
    assert math.isnan(numeq.round(464.0 + 2**-20, "e4m3fn"))  # Universal rounded this to 448
    assert numeq.round(464.0 + 2**-20, "e4m3fn", overflow="saturate") == 448.0
    assert math.isnan(numeq.round(-(464.0 + 2**-20), "e4m3fn"))
    assert numeq.encode(464.0 + 2**-20, "e4m3fn") == 0x7F
    assert numeq.encode(-(464.0 + 2**-20), "e4m3fn") & 0x7F == 0x7F


def test_e4m3_never_yields_480():
    # CPFloat's e4m3 preset admits 480; IEEE-like e4m3 has max 240, 256 and above overflow.
    x = np.linspace(0, 1000, 100_001)
    for mode in DETERMINISTIC_ROUNDINGS:
        for ov in OVERFLOWS:
            v = numeq.round(x, "e4m3", rounding=mode, overflow=ov)
            finite = v[np.isfinite(v)]
            assert finite.max() <= 240.0 and 480.0 not in v
    assert numeq.round(247.99, "e4m3") == 240.0
    assert numeq.round(248.0, "e4m3") == math.inf  # tie to even (256) -> overflow
    assert numeq.round(1e9, "e4m3", overflow="saturate") == 240.0


def test_nearest_even_is_not_ties_away_and_ieee_does_not_saturate():
    # QPyTorch's "nearest" is ties-away and always saturates; numeq's nearest_even is neither.
    assert numeq.round(1.0625, "e4m3fn") == 1.0  # tie between 1 and 1.125 -> even
    assert numeq.round(1.0625, "e4m3fn", rounding="nearest_away") == 1.125
    assert numeq.round(1.1875, "e4m3fn") == 1.25
    assert numeq.round(-1.0625, "e4m3fn") == -1.0
    assert math.isnan(numeq.round(500.0, "e4m3fn"))
    assert numeq.round(1e6, "e5m2") == math.inf


# ---------------------------------------------------------------------------------------------
# Subnormal policies
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("rounding", DETERMINISTIC_ROUNDINGS)
@pytest.mark.parametrize("name", ["fp32", "bf16", "fp16", "e4m3fn", "e5m2", "e4m3fnuz", "e3m2fn"])
def test_flush_outputs(name, rounding):
    spec = SPECS[name]
    rng = np.random.default_rng(11)
    x = random_doubles(rng, spec, 200)
    tiny = 2.0**spec.emin
    x = np.concatenate([x, [tiny, -tiny, tiny * 0.999, -tiny * 0.999, tiny * (1 - 2.0**-(spec.m + 2))]])
    for mode in ("flush_outputs", "flush_both"):  # float64 inputs here are never subnormal
        got = numeq.round(x, name, rounding=rounding, subnormals=mode)
        assert_same_floats(got, oracle_array(x, spec, rounding=rounding, subnormals="flush_outputs"),
                           f"{name} {rounding} {mode}")
        nz = got[(got != 0) & np.isfinite(got)]
        assert np.all(np.abs(nz) >= tiny)


def test_flush_outputs_is_judged_after_rounding():
    # just below fp16's min normal but rounding up to it: kept (FTZ after rounding)
    tiny = 2.0**-14
    assert numeq.round(tiny * (1 - 2.0**-13), "fp16", subnormals="flush_outputs") == tiny
    assert numeq.round(tiny * (1 - 2.0**-9), "fp16", subnormals="flush_outputs") == 0.0
    assert math.copysign(1, numeq.round(-tiny / 2, "fp16", subnormals="flush_outputs")) < 0


def flush_input_oracle(x: np.ndarray) -> np.ndarray:
    """DAZ reference: inputs subnormal in their own format (x.dtype) read as signed zero."""
    tiny = np.finfo(x.dtype).tiny
    return np.where((x != 0) & (np.abs(x) < tiny), np.copysign(0.0, x), x).astype(x.dtype)


@pytest.mark.parametrize("rounding", DETERMINISTIC_ROUNDINGS)
@pytest.mark.parametrize("name", ["fp32", "bf16", "tf32", "fp16", "e4m3fn"])
def test_flush_inputs_float32(name, rounding):
    spec = SPECS[name]
    rng = np.random.default_rng(12)
    sub = (rng.integers(1, 1 << 23, size=300, dtype=np.uint32)).view(np.float32)  # fp32 subnormals
    sub = np.concatenate([sub, -sub[:100], np.float32([2.0**-149, -(2.0**-149), 2.0**-126, 1.0])])
    x = sub.astype(np.float32)
    for mode, flush_out in (("flush_inputs", False), ("flush_both", True)):
        got = numeq.round(x, name, rounding=rounding, subnormals=mode)
        want = oracle_array(flush_input_oracle(x).astype(np.float64), spec, rounding=rounding,
                            subnormals="flush_outputs" if flush_out else "keep")
        assert_same_floats(got, want, f"{name} {rounding} {mode}")
    # keep: float32 subnormals are values like any other
    got = numeq.round(x, name, rounding=rounding)
    assert_same_floats(got, oracle_array(x.astype(np.float64), spec, rounding=rounding), f"{name} keep")


def test_flush_inputs_distinguishes_float32_and_float64_sources():
    x32 = np.float32([2.0**-149, -(2.0**-140)])  # float32 subnormals
    x64 = x32.astype(np.float64)  # the same values are normal doubles
    # upward: a non-flushed tiny positive input rounds up to bf16's smallest subnormal
    assert numeq.round(x32, "bf16", rounding="upward", subnormals="flush_inputs")[0] == 0.0
    assert numeq.round(x64, "bf16", rounding="upward", subnormals="flush_inputs")[0] == 2.0**-133
    assert numeq.round(x32, "bf16", rounding="upward")[0] == 2.0**-133
    r = numeq.round(x32, "bf16", rounding="downward", subnormals="flush_inputs")
    assert r[1] == 0.0 and math.copysign(1, r[1]) < 0  # flushed to -0, not rounded down to -min
    # float64 subnormals are flushed for float64 inputs
    d = np.array([5e-324, -5e-324, 2.0**-1030])
    assert numeq.round(d, "fp32", rounding="upward")[0] == 2.0**-149
    got = numeq.round(d, "fp32", rounding="upward", subnormals="flush_inputs")
    assert got[0] == 0.0 and got[1] == 0.0 and math.copysign(1, got[1]) < 0 and got[2] == 0.0


def test_flush_inputs_does_not_flush_target_subnormals():
    # 2^-20 is normal in float32 but subnormal in fp16: flush_inputs keeps it, flush_outputs doesn't
    x = np.float32([2.0**-20])
    assert numeq.round(x, "fp16", subnormals="flush_inputs")[0] == 2.0**-20
    assert numeq.round(x, "fp16", subnormals="flush_outputs")[0] == 0.0
    assert numeq.round(x, "fp16", subnormals="flush_both")[0] == 0.0


def test_flush_inputs_from_ml_dtypes_source():
    import ml_dtypes

    b = np.array([2.0**-130, 2.0**-120], dtype=np.float32).astype(ml_dtypes.bfloat16)  # bf16 subnormal, normal
    got = numeq.round(b, "fp32", subnormals="flush_inputs")
    assert got[0] == 0.0 and got[1] == 2.0**-120
    assert numeq.round(b, "fp32")[0] == 2.0**-130


# ---------------------------------------------------------------------------------------------
# Signed zeros, scalars, layouts
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", FLOAT_FORMATS)
def test_signed_zeros(name):
    spec = SPECS[name]
    x = np.array([0.0, -0.0, -1e-300, 1e-300])
    got = numeq.round(x, name)
    assert_same_floats(got, oracle_array(x, spec), name)
    if spec.has_negative_zero:
        assert math.copysign(1, got[1]) < 0 and math.copysign(1, got[2]) < 0
    elif spec.has_zero:  # fnuz: no -0
        assert math.copysign(1, got[1]) > 0 and math.copysign(1, got[2]) > 0
        assert numeq.encode(-0.0, name) == 0


def test_scalar_in_scalar_out():
    v = numeq.round(1.1, "bf16")
    assert type(v) is float and v == round_oracle(1.1, SPECS["bf16"])
    assert type(numeq.round(np.float32(1.1), "bf16")) is float
    assert type(numeq.round(3, "fp16")) is float and numeq.round(3, "fp16") == 3.0
    assert type(numeq.encode(1.0, "fp16")) is int and numeq.encode(1.0, "fp16") == 0x3C00
    zero_d = numeq.round(np.array(1.1), "bf16")
    assert isinstance(zero_d, np.ndarray) and zero_d.shape == ()
    lst = numeq.round([1.0, 1.1], "bf16")
    assert isinstance(lst, np.ndarray) and lst.shape == (2,)
    assert math.isnan(numeq.round(float("nan"), "fp16"))


@pytest.mark.parametrize("rounding", DETERMINISTIC_ROUNDINGS + ["stochastic"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_strided_inputs_match_contiguous_copies(dtype, rounding):
    rng = np.random.default_rng(5)
    base = (rng.standard_normal((60, 70)) * 100).astype(dtype)
    views = {
        "step3": base.ravel()[::3],
        "T": base.T,
        "reversed": base.ravel()[::-1],
        "2d-slice": base[5:50:2, ::-3],
        "broadcast": np.broadcast_to(base[0], (4, 70)),
        "3d": base.reshape(6, 10, 70).transpose(2, 0, 1)[::2],
    }
    for label, v in views.items():
        assert not v.flags.c_contiguous or label == "broadcast"
        c = np.ascontiguousarray(v)
        for fn in (numeq.round, numeq.encode):
            a = fn(v, "e4m3fn", rounding=rounding, seed=3)
            b = fn(c, "e4m3fn", rounding=rounding, seed=3)
            assert a.shape == v.shape
            np.testing.assert_array_equal(a, b, err_msg=f"{label} {fn.__name__}")


@pytest.mark.parametrize("rounding", DETERMINISTIC_ROUNDINGS + ["stochastic"])
def test_results_independent_of_thread_count(rounding, restore_threads):
    rng = np.random.default_rng(6)
    x = (rng.standard_normal(1_000_000) * 50).astype(np.float32)
    results = []
    for n in (1, 2, 4):
        numeq.set_num_threads(n)
        assert numeq.num_threads() == n
        results.append((numeq.encode(x, "e4m3fn", rounding=rounding, seed=9),
                        numeq.encode(x[::-1], "bf16", rounding=rounding, seed=9)))
    for r in results[1:]:
        np.testing.assert_array_equal(r[0], results[0][0])
        np.testing.assert_array_equal(r[1], results[0][1])


# ---------------------------------------------------------------------------------------------
# Stochastic rounding
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", FLOAT_FORMATS)
def test_stochastic_results_are_neighbours(name):
    spec = SPECS[name]
    rng = np.random.default_rng(21)
    x = random_doubles(rng, spec, 400)
    x = x[np.abs(x) < float(max_finite(spec))]
    got = numeq.round(x, name, rounding="stochastic", seed=4)
    for v, g in zip(x, got):
        a = Fraction(abs(float(v)))
        if a == 0:
            continue
        down, up = neighbours(a, spec)
        if not spec.has_zero and down == 0:
            down = Fraction(2) ** spec.emin
        cands = {float(down), float(up)} if a != down else {float(down)}
        if up > max_finite(spec):
            cands.discard(float(up))
            cands.add(math.inf if spec.has_inf else math.nan)
        assert any(same_float(abs(g), c) for c in cands), (v, g, cands)
        assert (g < 0) == (v < 0) or g == 0


@pytest.mark.parametrize(
    "name,x",
    [("e4m3fn", 1.0 + 0.3 * 0.125), ("bf16", 3.0 + 0.77 * 2**-6), ("fp16", 2.0**-24 * 0.1),
     ("e2m1fn", 2.5), ("e5m2", -(1.0 + 0.01 * 0.25)), ("tf32", 1.0 + 0.5 * 2**-10)],
)
def test_stochastic_mean_over_indices(name, x):
    """E[round(x)] = x: the mean of 10^6 draws is within 6 sigma (+ the 2^-32 draw resolution)."""
    spec = SPECS[name]
    n = 1_000_000
    down, up = neighbours(abs(Fraction(x)), spec)
    p = float((abs(Fraction(x)) - down) / (up - down))
    got = numeq.round(np.full(n, x), name, rounding="stochastic", seed=123)
    assert set(np.abs(np.unique(got))) <= {float(down), float(up)}
    gap = float(up - down)
    sigma = gap * math.sqrt(p * (1 - p) / n)
    assert abs(got.mean() - x) <= 6 * sigma + gap * 2.0**-32, (got.mean(), x, sigma)


def test_stochastic_mean_over_seeds():
    spec = SPECS["e4m3fn"]
    rng = np.random.default_rng(8)
    x = rng.uniform(-8, 8, size=40)
    seeds = 1500
    acc = np.zeros_like(x)
    for s in range(seeds):
        acc += numeq.round(x, "e4m3fn", rounding="stochastic", seed=s)
    mean = acc / seeds
    for v, m in zip(x, mean):
        down, up = neighbours(abs(Fraction(float(v))), spec)
        gap = float(up - down)
        p = float((abs(Fraction(float(v))) - down) / (up - down))
        sigma = gap * math.sqrt(max(p * (1 - p), 1e-12) / seeds)
        assert abs(m - v) <= 6 * sigma + gap * 2.0**-32 + 1e-12, (v, m, sigma)


def test_stochastic_seed_reproducible_and_seed_dependent():
    x = np.linspace(1, 2, 10_001)
    a = numeq.round(x, "e4m3fn", rounding="stochastic", seed=1)
    np.testing.assert_array_equal(a, numeq.round(x, "e4m3fn", rounding="stochastic", seed=1))
    assert not np.array_equal(a, numeq.round(x, "e4m3fn", rounding="stochastic", seed=2))


def test_stochastic_exact_values_stay():
    x = np.array([1.0, 1.125, -448.0, 2.0**-9, 0.0])
    np.testing.assert_array_equal(numeq.round(np.repeat(x, 1000), "e4m3fn", rounding="stochastic"), np.repeat(x, 1000))


@pytest.mark.parametrize("bits,frac", [(1, 0.4), (1, 0.75), (2, 0.3), (3, 0.9), (8, 0.123), (64, 0.6)])
def test_random_bits(bits, frac):
    """With R random bits, P(round away) = floor(frac * 2^R) / 2^R (numeq's documented rule)."""
    n = 1_000_000
    x = 1.0 + frac * 0.125  # e4m3fn: grid spacing 0.125 in [1, 2)
    f = Fraction(x) - 1
    p = float(Fraction(math.floor(f / Fraction(1, 8) * 2**bits), 2**bits))
    got = numeq.round(np.full(n, x), "e4m3fn", rounding="stochastic", random_bits=bits, seed=5)
    ups = np.count_nonzero(got == 1.125) / n
    assert np.all((got == 1.0) | (got == 1.125))
    if p == 0:
        assert ups == 0
    else:
        assert abs(ups - p) <= 6 * math.sqrt(p * (1 - p) / n) + 1e-12, (ups, p)


def test_stochastic_overflow_follows_overflow_mode():
    x = np.full(10_000, 460.0)  # between 448 and 480 (the next e4m3fn grid point): overflow when rounded up
    got = numeq.round(x, "e4m3fn", rounding="stochastic")
    assert set(np.unique(got[~np.isnan(got)])) == {448.0}
    assert 0 < np.isnan(got).sum() < x.size
    sat = numeq.round(x, "e4m3fn", rounding="stochastic", overflow="saturate")
    assert np.all(sat == 448.0)


def test_flush_inputs_from_float16_source():
    h = np.array([2.0**-20, -(2.0**-24), 2.0**-14], dtype=np.float16)  # two fp16 subnormals, min normal
    got = numeq.round(h, "fp32", subnormals="flush_inputs")
    assert got[0] == 0.0 and got[1] == 0.0 and math.copysign(1, got[1]) < 0 and got[2] == 2.0**-14
    np.testing.assert_array_equal(numeq.round(h, "fp32"), h.astype(np.float64))
