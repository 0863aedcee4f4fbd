"""Silent wrong results of compare, the op catalogue and the references, each against an oracle
independent of numeq: numpy / ml_dtypes arithmetic, Fractions, and the IEEE 754 rules written out."""

from __future__ import annotations

import ctypes
import ctypes.util
import datetime
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

import numeq

# ---- compare: special values (NaN, +-Inf, infinite bounds) must be the platform's own ----


def test_overflowed_exp_must_be_inf_on_the_device() -> None:
    x = np.array([100.0, 1.0], dtype=np.float32)
    with np.errstate(over="ignore"):
        device = np.exp(x)  # numpy's float32 exp: inf, e
    assert np.isinf(device[0])
    op = numeq.ops.exp(x)
    assert numeq.compare(device, op, "trainium.trn1").passed
    wrong = device.copy()
    wrong[0] = 0.0
    v = numeq.compare(wrong, op, "trainium.trn1")
    assert not v.passed and v.violations == 1 and v.special_mismatches == 1
    assert "special value differs" in v.diagnosis
    assert v.worst[0].index == (0,) and v.worst[0].violation


def test_reciprocal_of_zero_sign_of_inf() -> None:
    x = np.array([0.0, -0.0, 2.0], dtype=np.float32)
    with np.errstate(divide="ignore"):
        device = np.float32(1) / x  # +inf, -inf, 0.5
    op = numeq.ops.reciprocal(x)
    assert numeq.compare(device, op, "nvidia.h100").passed
    flipped = device.copy()
    flipped[0] = -np.inf
    v = numeq.compare(flipped, op, "nvidia.h100")
    assert not v.passed and v.special_mismatches == 1 and "special value differs" in v.diagnosis
    finite = device.copy()
    finite[1] = np.finfo(np.float32).min  # a finite value where the platform gives -inf
    assert not numeq.compare(finite, op, "nvidia.h100").passed


def test_nan_matches_any_nan_and_only_nan() -> None:
    x = np.array([np.nan, 1.0], dtype=np.float32)
    op = numeq.ops.exp(x)
    other_nan = np.array([np.float32(np.nan), np.exp(np.float32(1.0))], dtype=np.float32)
    other_nan.view(np.uint32)[0] |= 0x1234  # another payload
    assert np.isnan(other_nan[0])
    assert numeq.compare(other_nan, op, "nvidia.h100").passed
    v = numeq.compare(np.array([0.0, other_nan[1]]), op, "nvidia.h100")
    assert not v.passed and v.special_mismatches == 1


# ---- compare: what actual may be ----


@pytest.mark.parametrize("actual,word", [
    (np.array([1.0 + 2.0j]), "complex"),
    (np.array(["1.0"]), "string"),
    (np.array([b"1"]), "bytes"),
    (np.array([np.datetime64("2024-01-01")]), "datetime"),
    (np.array([np.timedelta64(1, "s")]), "timedelta"),
    (np.array([(1.0, 2.0)], dtype=[("a", "f8"), ("b", "f8")]), "structured"),
    (np.array([True]), "boolean"),
    (np.array([datetime.date(2024, 1, 1)], dtype=object), "object"),
    (1.0 + 0.5j, "complex"),
    ("1.0", "str"),
])
def test_compare_refuses_what_is_not_real(actual, word) -> None:
    op = numeq.ops.exp(np.array([0.0], dtype=np.float32))
    with pytest.raises(TypeError, match="actual") as e:
        numeq.compare(actual, op, "nvidia.h100")
    assert word in str(e.value) and "ml_dtypes" in str(e.value)


def test_compare_refuses_masked_arrays() -> None:
    op = numeq.ops.exp(np.array([0.0, 1.0], dtype=np.float32))
    masked = np.ma.masked_array(np.array([1.0, 99.0]), mask=[False, True])
    with pytest.raises(TypeError, match="actual: masked"):
        numeq.compare(masked, op, "nvidia.h100")


def test_compare_accepts_reals_in_every_documented_form() -> None:
    x = np.array([0.0, 0.5], dtype=np.float32)
    device = np.exp(x).astype(np.float32)
    op = numeq.ops.exp(x)
    for actual in (device, device.astype(np.float64), [float(v) for v in device]):
        assert numeq.compare(actual, op, "nvidia.h100").passed
    # integers are judged as the numbers they are
    ints = np.array([3, -2, 0], dtype=np.int64)
    cast = numeq.ops.cast(ints.astype(np.float64), "fp32", in_fmt="fp64")
    assert numeq.compare(ints, cast, "nvidia.h100").passed
    assert not numeq.compare(np.array([3, -2, 1]), cast, "nvidia.h100").passed
    with pytest.raises(ValueError, match="actual"):
        numeq.compare(np.array([2**60 + 1, 0, 0], dtype=np.int64), cast, "nvidia.h100")
    # ml_dtypes
    b = np.array([1.5, -2.0], dtype=ml_dtypes.bfloat16)
    assert numeq.compare(b, numeq.ops.cast(b, "bf16"), "nvidia.h100").passed


def test_fp32_values_against_a_bf16_op_are_named_in_the_diagnosis() -> None:
    rng = np.random.default_rng(0)
    a = rng.standard_normal((4, 32)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((32, 3)).astype(ml_dtypes.bfloat16)
    op = numeq.ops.matmul(a, b, out="bf16")
    fp32_result = a.astype(np.float32) @ b.astype(np.float32)  # a kernel that forgot the bf16 cast
    not_bf16 = fp32_result.astype(ml_dtypes.bfloat16).astype(np.float32) != fp32_result  # ml_dtypes' oracle
    assert not_bf16.any()
    v = numeq.compare(fp32_result, op, "nvidia.h100")
    assert not v.passed
    assert v.not_in_format == int(not_bf16.sum())
    assert "not values of the output format bf16" in v.diagnosis
    assert numeq.compare(fp32_result.astype(ml_dtypes.bfloat16), op, "nvidia.h100").violations < v.violations


# ---- Verdict.worst: ranked by error / bound ----


def test_worst_ranks_by_error_over_bound() -> None:
    rng = np.random.default_rng(1)
    a = rng.integers(-8, 9, size=(6, 16)).astype(np.float32)
    b = rng.integers(-8, 9, size=(16, 5)).astype(np.float32)
    exact = a.astype(np.float64) @ b.astype(np.float64)  # small integers: float64 matmul is exact
    op = numeq.ops.matmul(a, b, out="fp32")
    platform = "nvidia.h100"
    # The verdict ranks by the bound of its probabilistic tier: the walker's, at the check's failure
    # probability shared over the elements (1e-6 per check by default).
    bound = op.bound(platform, kind="probabilistic", failure_probability=1e-6 / exact.size)
    got = exact.copy()
    # Errors of several sizes relative to the bound (the bound may be 0: then an error is infinitely
    # large against it) at scattered places, largest ratio last in index order.
    places = [(0, 1), (2, 3), (3, 0), (5, 4), (1, 2)]
    sizes = [3.0, 50.0, 7.0, 1000.0, 20.0]
    for (i, j), k in zip(places, sizes):
        got[i, j] = exact[i, j] + k * max(bound[i, j], np.spacing(np.float32(max(abs(exact[i, j]), 1.0))))
    got = got.astype(np.float32).astype(np.float64)
    v = numeq.compare(got, op, platform, worst=len(places))
    with np.errstate(divide="ignore", invalid="ignore"):
        err = np.abs(got - exact)
        ratio = np.where(bound > 0, err / bound, np.where(err > 0, np.inf, 0.0))
    violated = err > bound
    order = sorted(((not violated[p], -ratio[p], p) for p in np.ndindex(got.shape)))[: len(places)]
    assert [w.index for w in v.worst] == [p for _, _, p in order]
    assert all(w.violation for w in v.worst[: int(violated.sum())])


def test_special_mismatches_rank_first() -> None:
    x = np.array([1.0, 100.0, 2.0, 3.0], dtype=np.float32)
    with np.errstate(over="ignore"):
        device = np.exp(x)  # float32 values: every one a value of the output format
    device[0] *= np.float32(1.5)  # a large finite error
    device[1] = 7.0  # where the platform gives inf
    device[3] *= np.float32(1.01)
    v = numeq.compare(device, numeq.ops.exp(x), "nvidia.h100", worst=3)
    assert [w.index for w in v.worst] == [(1,), (0,), (3,)]


# ---- attention: one reading of a boolean mask (torch's) ----


def test_bool_mask_means_the_same_in_ops_and_reference() -> None:
    rng = np.random.default_rng(2)
    q, k, v = (rng.standard_normal(s).astype(np.float32) for s in ((2, 4, 8), (2, 6, 8), (2, 6, 8)))
    mask = rng.random((2, 4, 6)) < 0.6
    mask[..., 0] = True
    additive = np.where(mask, 0.0, -np.inf)
    ref = numeq.reference.attention(q, k, v, mask=mask, out="fp64")
    assert np.array_equal(ref, numeq.reference.attention(q, k, v, mask=additive, out="fp64"))
    op = numeq.ops.attention(q, k, v, mask=mask, out="fp32")
    np.testing.assert_array_equal(op.reference(), numeq.reference.attention(q, k, v, mask=mask))
    # numpy in float64, as torch's scaled_dot_product_attention defines a bool mask
    s = q.astype(np.float64) @ np.swapaxes(k, -1, -2).astype(np.float64) / np.sqrt(8.0)
    s = np.where(mask, s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    want = (p / p.sum(-1, keepdims=True)) @ v.astype(np.float64)
    np.testing.assert_allclose(ref, want, rtol=1e-12, atol=1e-14)
    assert numeq.compare(want.astype(np.float32), op, "nvidia.h100").passed


# ---- dequantize: codes are integers of the format ----


@pytest.mark.parametrize("code", [300, -129, 0.5, 2**64 - 1])
def test_ops_dequantize_refuses_non_codes(code) -> None:
    codes = np.array([code, 1], dtype=np.uint64 if code == 2**64 - 1 else None)
    with pytest.raises(ValueError, match=r"codes: element 0 .* int8: codes are integers in \[-128, 127\]"):
        numeq.ops.dequantize(codes, "int8", scale=0.5)


def test_dequantize_refuses_wrapping_codes() -> None:
    with pytest.raises(ValueError, match="q: element 0"):
        numeq.dequantize(np.array([2**64 - 1, 0], dtype=np.uint64), scale=0.5)
    with pytest.raises(ValueError, match=r"q: element 1 .* int8"):
        numeq.dequantize(np.array([1, 300]), scale=0.5, fmt="int8")
    with pytest.raises(ValueError, match="fmt"):
        numeq.dequantize(np.array([1]), scale=0.5, fmt="fp32")
    with pytest.raises(ValueError, match="codes"):
        numeq.dequantize(np.array([np.iinfo(np.int64).min]), scale=0.5, zero_point=1)


def test_int32_codes_dequantize_exactly() -> None:
    # (c - z) * s for int32 codes has up to 57 significant bits: the op's exact value must hold them.
    codes = np.array([2**31 - 1, -(2**31), 123456789], dtype=np.int64)
    scale = float(np.float32(1.0000001))
    op = numeq.ops.dequantize(codes, "int32", scale=scale, out="fp32")
    hi, lo = op.exact()
    for c, h, l in zip(codes, hi, lo):
        assert Fraction(h) + Fraction(l) == Fraction(int(c)) * Fraction(scale)
    want = (codes.astype(np.longdouble) * np.longdouble(scale)).astype(np.float32)  # 64-bit significand: exact
    np.testing.assert_array_equal(op.reference(), want.astype(np.float64))


# ---- 0-d stays 0-d ----


def test_zero_d_inputs_stay_zero_d() -> None:
    x0 = np.array(0.75, dtype=np.float32)
    r = numeq.reference.exp(x0)
    assert isinstance(r, np.ndarray) and r.shape == ()
    assert r == numeq.reference.exp(np.array([0.75], dtype=np.float32))[0]
    assert isinstance(numeq.reference.exp(0.75), float)
    assert numeq.reference.gelu(x0).shape == ()
    op = numeq.ops.exp(x0)
    hi, lo = op.exact()
    for a in (op.reference(), op.emulate("nvidia.h100"), op.bound("nvidia.h100"), hi, lo):
        assert a.shape == ()
    assert numeq.ops.cast(x0, "bf16").reference().shape == ()
    assert numeq.ops.dequantize(np.array(3), "int8", scale=0.5).reference().shape == ()
    assert numeq.compare(np.float32(np.exp(np.float32(0.75))), op, "nvidia.h100").elements == 1


# ---- the sign of an exact zero sum (IEEE 754-2019 s6.3) ----

ROUNDINGS = ["nearest_even", "nearest_away", "toward_zero", "upward", "downward", "odd"]


def ieee_zero_sum_sign(terms: list[float], rounding: str) -> float:
    """IEEE 754 s6.3 written out: x + x keeps x's sign (all -0: -0, all +0: +0); an exact zero sum
    of operands of opposite signs is +0, or -0 under roundTowardNegative."""
    if all(t == 0 and np.signbit(t) for t in terms):
        return -0.0
    if all(t == 0 and not np.signbit(t) for t in terms):
        return 0.0
    return -0.0 if rounding == "downward" else 0.0


CASES = [[-0.0, 0.0], [0.0, -0.0], [-0.0, -0.0], [0.0, 0.0], [1.5, -1.5], [-0.0, 2.0, -2.0],
         [-0.0, -0.0, -0.0], [0.0, -0.0, 0.0], [0.25, -0.0, -0.25, 0.0]]


@pytest.mark.parametrize("rounding", ROUNDINGS)
@pytest.mark.parametrize("terms", CASES)
def test_exact_zero_sum_sign(terms, rounding) -> None:
    want = ieee_zero_sum_sign(terms, rounding)
    for out in ("fp32", "bf16", "fp64"):
        got = numeq.reference.sum(np.array(terms), rounding=rounding, out=out)
        assert got == 0 and np.signbit(got) == np.signbit(want), (terms, rounding, out, got)
    hi, lo = numeq.reference.sum_exact(np.array(terms))
    assert hi == 0 and np.signbit(hi) == np.signbit(ieee_zero_sum_sign(terms, "nearest_even"))


_FE = {"nearest_even": 0x000, "downward": 0x400, "upward": 0x800, "toward_zero": 0xC00}  # x86 <fenv.h>


@pytest.mark.skipif(ctypes.util.find_library("m") is None or np.dtype(np.intp).itemsize != 8,
                    reason="needs libm's fesetround")
@pytest.mark.parametrize("rounding", list(_FE))
def test_exact_zero_sum_sign_matches_the_host_fpu(rounding) -> None:
    # numpy's float64 addition in the host's rounding direction: the hardware's IEEE 754 answer for
    # two operands (x86 fenv values; skipped if fesetround refuses them).
    libm = ctypes.CDLL(ctypes.util.find_library("m"))
    if libm.fesetround(_FE[rounding]) != 0:
        libm.fesetround(0)
        pytest.skip("fesetround refused the x86 rounding constants")
    try:
        pairs = [(a, b) for a in (0.0, -0.0, 1.5, -1.5) for b in (0.0, -0.0, 1.5, -1.5)]
        host = [float(np.add(np.array([a]), np.array([b]))[0]) for a, b in pairs]
    finally:
        libm.fesetround(0)
    for (a, b), h in zip(pairs, host):
        if h != 0:
            continue
        got = numeq.reference.sum(np.array([a, b]), rounding=rounding, out="fp64")
        assert got == 0 and np.signbit(got) == np.signbit(h), (a, b, rounding)


# ---- the exact matmul in row blocks (the memory of compare) ----


def test_exact_matmul_in_row_blocks_against_fractions() -> None:
    # fp32 values over a wide exponent range need about ten slices, so that a block holds about
    # twenty rows of 256 and each 40-row matrix spans several blocks; a NaN row, an Inf column
    # and exactly cancelling elements take the plain long-accumulator path (b read in place).
    # Every row, on a sample of columns (and the special ones).
    rng = np.random.default_rng(5)
    M, K, N = 40, 8, 256
    a = (rng.standard_normal((2, M, K)) * 2.0 ** rng.integers(-110, 110, (2, M, K))).astype(np.float32)
    b = (rng.standard_normal((K, N)) * 2.0 ** rng.integers(-110, 110, (K, N))).astype(np.float32)
    a[0, 3, 2] = np.nan
    b[5, 7] = np.inf
    a[1, 5] = 0
    a[1, 5, :2] = [1.0, 1.0]
    b[:2, 9] = [np.float32(3.0), np.float32(-3.0)]  # a[1, 5] . b[:, 9] = 0 exactly
    hi, lo = numeq.reference.matmul_exact(a, b)
    rounded = numeq.reference.matmul(a, b, out="fp32", rounding="downward")
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        special = np.matmul(a64, b64)  # NaN / Inf where they propagate
    for t in range(2):
        for m in range(M):
            for n in sorted(set(rng.choice(N, 48, replace=False)) | {0, 7, 9, N - 1}):
                if not np.isfinite(special[t, m, n]):
                    assert np.isnan(hi[t, m, n]) == np.isnan(special[t, m, n])
                    continue
                exact = builtins_sum(Fraction(float(x)) * Fraction(float(y)) for x, y in zip(a64[t, m], b64[:, n]))
                assert hi[t, m, n] == float(exact), (t, m, n)
                assert lo[t, m, n] == float(exact - Fraction(float(hi[t, m, n]))), (t, m, n)
                if exact == 0:
                    assert np.signbit(rounded[t, m, n]), (t, m, n)  # rounding downward: -0
    assert hi[1, 5, 9] == 0 and rounded[1, 5, 9] == 0


def builtins_sum(terms):
    total = Fraction(0)
    for x in terms:
        total += x
    return total
