"""numeq.ops and numeq.compare: the catalogue object, its bounds and verdicts.

Oracles independent of the code under test: numpy's own sum / mean / max (bit for bit), exact
rational arithmetic (fractions.Fraction) for the exact results and the bounds, ml_dtypes for
bf16 rounding in planted bugs."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import ml_dtypes
import numpy as np
import pytest

import numeq


def _exact_matmul(a: np.ndarray, b: np.ndarray) -> list[list[Fraction]]:
    fa = [[Fraction(float(v)) for v in row] for row in a]
    fb = [[Fraction(float(v)) for v in row] for row in b]
    return [[sum((fa[i][k] * fb[k][j] for k in range(a.shape[1])), Fraction(0)) for j in range(b.shape[1])]
            for i in range(a.shape[0])]


@pytest.mark.parametrize("platform,in_fmt", [("cuda_core.fp32", "fp32"), ("nvidia.h100", "bf16"),
                                             ("nvidia.a100", "fp16"), ("trainium.trn1", "bf16"),
                                             ("nvidia.h100", "e4m3fn")])
@pytest.mark.parametrize("generator", ["normal", "lognormal", "cancellation", "subnormal_rich"])
def test_matmul_bound_holds_against_fractions(platform: str, in_fmt: str, generator: str) -> None:
    a = numeq.ops.generate(generator, (6, 40), in_fmt, seed=1)
    b = numeq.ops.generate(generator, (40, 5), in_fmt, seed=2)
    op = numeq.ops.matmul(a, b, in_fmt=in_fmt, out="fp32")
    em = op.emulation(platform)
    exact = _exact_matmul(a, b)
    for i in range(6):
        for j in range(5):
            assert abs(Fraction(float(em.values[i, j])) - exact[i][j]) <= Fraction(float(em.bound[i, j])), (i, j)
    hi, lo = op.exact()
    for i in range(6):
        for j in range(5):
            assert Fraction(float(hi[i, j])) + Fraction(float(lo[i, j])) == exact[i][j]
    verdict = numeq.compare(em.values, op, platform)
    assert verdict and verdict.bit_exact == verdict.elements == 30


@pytest.mark.parametrize("n", [1, 7, 128, 1000, 4099])
def test_reductions_match_numpy_bit_for_bit(n: int) -> None:
    x = numeq.ops.generate("lognormal", (5, n), "fp32", seed=n).astype(np.float32)
    assert np.array_equal(numeq.ops.sum(x).emulate("numpy"), np.sum(x, axis=-1))
    assert np.array_equal(numeq.ops.mean(x).emulate("numpy"), np.mean(x, axis=-1))
    assert np.array_equal(numeq.ops.max(x).emulate("numpy"), np.max(x, axis=-1))
    for op, got in ((numeq.ops.sum(x), np.sum(x, axis=-1)), (numeq.ops.mean(x), np.mean(x, axis=-1))):
        v = numeq.compare(got, op, "numpy")
        assert v.passed and v.bit_exact == 5, str(v)
    # A more accurate result (float64 sum, rounded once) is not numpy's but lies within its bound.
    better = np.sum(x.astype(np.float64), axis=-1).astype(np.float32)
    assert numeq.compare(better, numeq.ops.sum(x), "numpy").passed


def test_sum_bound_holds_against_fractions_on_cancellation() -> None:
    x = numeq.ops.generate("cancellation", (4, 301), "fp32", seed=3)
    op = numeq.ops.sum(x, in_fmt="fp32")
    for platform in ("numpy", "cuda_core.fp32", "trainium.trn1", "trainium.trn1[vector_reduce_order=pairwise]"):
        em = op.emulation(platform)
        for i in range(4):
            exact = sum((Fraction(float(v)) for v in x[i]), Fraction(0))
            assert abs(Fraction(float(em.values[i])) - exact) <= Fraction(float(em.bound[i])), platform


def test_planted_bf16_accumulation_fails_the_verdict() -> None:
    a = numeq.ops.generate("uniform", (16, 512), "bf16", seed=4)
    b = numeq.ops.generate("uniform", (512, 16), "bf16", seed=5)
    op = numeq.ops.matmul(a, b, in_fmt="bf16", out="fp32")
    # The bug: a running sum kept in bf16 (ml_dtypes rounds each partial sum).
    acc = np.zeros((16, 16), dtype=ml_dtypes.bfloat16)
    for k in range(512):
        acc = (acc.astype(np.float32) + np.outer(a[:, k], b[k, :]).astype(np.float32)).astype(ml_dtypes.bfloat16)
    verdict = numeq.compare(acc.astype(np.float64), op, "nvidia.h100", worst=3)
    assert not verdict and verdict.violations > 200
    assert len(verdict.worst) == 3 and all(w.violation for w in verdict.worst)
    assert "beyond" in verdict.diagnosis and "FAIL" in str(verdict)
    # The transposed operand.
    sq_a = numeq.ops.generate("normal", (32, 32), "bf16", seed=6)
    sq_b = numeq.ops.generate("normal", (32, 32), "bf16", seed=7)
    wrong = numeq.matmul(sq_a, sq_b.T.copy(), platform="nvidia.h100", in_fmt="bf16")
    assert numeq.compare(wrong, numeq.ops.matmul(sq_a, sq_b, in_fmt="bf16"), "nvidia.h100").violations > 900


def test_tolerance_covers_the_error_in_assert_close_form() -> None:
    a = numeq.ops.generate("outlier_channels", (32, 256), "bf16", seed=8)
    b = numeq.ops.generate("normal", (256, 24), "bf16", seed=9)
    op = numeq.ops.matmul(a, b, in_fmt="bf16", out="bf16")
    for platform in ("nvidia.h100", "trainium.trn2"):
        tol = op.tolerance(platform)
        hi, _ = op.exact()
        np.testing.assert_allclose(op.emulate(platform), hi, rtol=tol.rtol, atol=tol.atol * (1 + 1e-12))
        assert np.all(op.bound(platform) <= tol.atol + tol.rtol * np.abs(op.reference()) * (1 + 1e-12))
        assert tol.ulps >= 0.5  # the bf16 output cast alone is half an ulp


def test_cross_platform_bound_covers_the_difference() -> None:
    a = numeq.ops.generate("normal", (8, 2048), "bf16", seed=10)
    b = numeq.ops.generate("normal", (2048, 8), "bf16", seed=11)
    op = numeq.ops.matmul(a, b, in_fmt="bf16")
    d = np.abs(op.emulate("nvidia.h100") - op.emulate("trainium.trn1"))
    assert np.all(d <= op.cross_bound("nvidia.h100", "trainium.trn1"))


def test_probabilistic_bound_is_smaller_and_states_its_probability() -> None:
    a = numeq.ops.generate("normal", (8, 4096), "fp32", seed=12)
    b = numeq.ops.generate("normal", (4096, 8), "fp32", seed=13)
    op = numeq.ops.matmul(a, b, in_fmt="fp32")
    det = op.emulation("cuda_core.fp32")
    prob = op.emulation("cuda_core.fp32", kind="probabilistic", lam=6.0)
    assert det.failure_probability == 0
    assert 0 < prob.failure_probability < 1e-3
    assert np.all(prob.bound < det.bound)
    np.testing.assert_array_equal(prob.values, det.values)


def test_generators_are_seeded_values_of_their_format() -> None:
    assert set(numeq.ops.generators()) >= {"normal", "uniform", "lognormal", "outlier_channels", "cancellation",
                                          "near_overflow", "subnormal_rich", "small_integers"}
    for g in numeq.ops.generators():
        x = numeq.ops.generate(g, (4, 64), "e4m3fn", seed=3)
        assert np.array_equal(numeq.round(x, "e4m3fn"), x)
        assert np.array_equal(x, numeq.ops.generate(g, (4, 64), "e4m3fn", seed=3))
        assert not np.array_equal(x, numeq.ops.generate(g, (4, 64), "e4m3fn", seed=4))


def test_bad_input_names_the_argument() -> None:
    x = np.ones((4, 8), np.float32)
    op = numeq.ops.matmul(x, x.T.copy())
    with pytest.raises(ValueError, match="kind"):
        op.bound("cuda_core.fp32", kind="worst")
    with pytest.raises(ValueError, match="lam"):
        op.bound("cuda_core.fp32", kind="probabilistic", lam=-1)
    with pytest.raises(ValueError, match="platform"):
        op.emulate("nvidia.h900")
    with pytest.raises(ValueError, match="actual: shape"):
        numeq.compare(np.zeros((4, 5)), op, "cuda_core.fp32")
    with pytest.raises(TypeError, match="op"):
        numeq.compare(np.zeros((4, 4)), "matmul", "cuda_core.fp32")
    with pytest.raises(ValueError, match="inner dimensions"):
        numeq.ops.matmul(x, x)
    with pytest.raises(ValueError, match="a: element"):
        numeq.ops.matmul(np.full((2, 2), 0.1), np.ones((2, 2)), in_fmt="bf16")
    with pytest.raises(ValueError, match="axis"):
        numeq.ops.sum(x, axis=5)
    with pytest.raises(ValueError, match="generator"):
        numeq.ops.generate("gaussian", (2, 2))
    with pytest.raises(ValueError, match="e4m3fn"):
        numeq.ops.matmul(numeq.ops.generate("normal", (2, 4), "e4m3fn"), numeq.ops.generate("normal", (4, 2), "e4m3fn"),
                         in_fmt="e4m3fn").emulate("nvidia.a100")


def _numpy_softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


@pytest.mark.parametrize("generator", ["normal", "lognormal", "outlier_channels", "uniform"])
def test_numpy_float32_kernels_pass_on_the_numpy_platform(generator: str) -> None:
    """numpy itself as the device: float32 softmax, layernorm, rmsnorm and exp computed by numpy
    lie within the numpy platform's bounds (its exp is within the documented ulp budget)."""
    x = numeq.ops.generate(generator, (8, 512), "fp32", seed=14).astype(np.float32)
    g = numeq.ops.generate("uniform", (512,), "fp32", seed=15).astype(np.float32)
    with np.errstate(over="ignore"):  # lognormal reaches exp's overflow: Inf on both sides
        e = np.exp(x)
    checks = [
        (e, numeq.ops.exp(x)),
        (_numpy_softmax(x), numeq.ops.softmax(x)),
        (x - x.max(axis=-1, keepdims=True) - np.log(np.exp(x - x.max(axis=-1, keepdims=True)).sum(axis=-1, keepdims=True)),
         numeq.ops.log_softmax(x)),
        ((x - x.mean(-1, keepdims=True)) / np.sqrt(((x - x.mean(-1, keepdims=True)) ** 2).mean(-1, keepdims=True)
                                                   + np.float32(1e-5)) * g,
         numeq.ops.layernorm(x, gamma=g, eps=1e-5)),
    ]
    for got, op in checks:
        assert got.dtype == np.float32
        v = numeq.compare(got, op, "numpy")
        assert v.passed, f"{op.signature}: {v}"


def test_composite_ops_against_mpmath_free_identities() -> None:
    x = numeq.ops.generate("normal", (4, 96), "bf16", seed=16)
    op = numeq.ops.softmax(x, in_fmt="bf16", out="fp32", variant="online", block=32)
    hi, lo = op.exact()
    assert np.all(lo == 0)
    np.testing.assert_allclose(hi.sum(axis=-1), 1.0, rtol=1e-14)  # softmax sums to one exactly
    for platform in ("nvidia.h100", "trainium.trn1", "trainium.trn1[scalar_activation_ulps=16]"):
        em = op.emulation(platform)
        assert np.all(np.abs(em.values - hi) <= em.bound * (1 + 1e-12) + np.abs(hi) * 2.0**-52)
    # A larger ulp budget gives a larger bound on the same data.
    assert np.all(op.bound("trainium.trn1[scalar_activation_ulps=16]") >= op.bound("trainium.trn1"))


def test_planted_one_pass_variance_in_bf16_fails() -> None:
    x = (numeq.ops.generate("normal", (8, 1024), "bf16", seed=17) + 8.0).astype(ml_dtypes.bfloat16)
    op = numeq.ops.layernorm(x, eps=1e-5, out="bf16")
    xb = x.astype(ml_dtypes.bfloat16)
    n = x.shape[-1]
    s = np.zeros(8, dtype=ml_dtypes.bfloat16)
    s2 = np.zeros(8, dtype=ml_dtypes.bfloat16)
    for k in range(n):  # the textbook one-pass variance, running sums in bf16
        v = xb[:, k].astype(np.float32)
        s = (s.astype(np.float32) + v).astype(ml_dtypes.bfloat16)
        s2 = (s2.astype(np.float32) + v * v).astype(ml_dtypes.bfloat16)
    mean = s.astype(np.float32) / n
    var = np.maximum(s2.astype(np.float32) / n - mean * mean, 0)
    got = ((xb.astype(np.float32) - mean[:, None]) / np.sqrt(var[:, None] + 1e-5)).astype(ml_dtypes.bfloat16)
    v = numeq.compare(got, op, "nvidia.h100")
    assert not v.passed and v.violations > 1000


def test_composite_bad_input() -> None:
    x = np.ones((2, 8), np.float32)
    with pytest.raises(ValueError, match="variant"):
        numeq.ops.softmax(x, variant="fast")
    with pytest.raises(ValueError, match="block"):
        numeq.ops.softmax(x, variant="online", block=3).emulate("numpy")
    with pytest.raises(ValueError, match="gamma"):
        numeq.ops.layernorm(x, gamma=np.ones(3, np.float32))
    with pytest.raises(ValueError, match="function"):
        numeq.ops.function("erfinv", x)
    with pytest.raises(ValueError, match="bn_stats|bn_aggr|assumption"):
        numeq.ops.layernorm(x, variant="bn_stats").emulate("nvidia.h100")


@pytest.mark.parametrize("variant", ["naive", "flash"])
def test_attention_through_the_catalogue(variant: str) -> None:
    q = numeq.ops.generate("normal", (2, 64, 32), "bf16", seed=20)
    k = numeq.ops.generate("normal", (2, 64, 32), "bf16", seed=21)
    v = numeq.ops.generate("uniform", (2, 64, 16), "bf16", seed=22)
    op = numeq.ops.attention(q, k, v, causal=True, in_fmt="bf16", out="fp32", variant=variant, block_rows=16,
                             block_cols=32)
    for platform in ("nvidia.h100", "trainium.trn1"):
        assert numeq.compare(op.emulate(platform), op, platform).bit_exact == 2 * 64 * 16
        assert numeq.compare(op.reference(), op, platform).passed  # the correctly rounded result is explained
    wrong = numeq.ops.attention(q, k[:, ::-1].copy(), v, causal=True, in_fmt="bf16", out="fp32")
    assert not numeq.compare(wrong.emulate("nvidia.h100"), op, "nvidia.h100").passed
    with pytest.raises(ValueError, match="block"):
        numeq.ops.attention(q, k, v, in_fmt="bf16", variant="flash", block_rows=24).emulate("nvidia.h100")


@pytest.mark.parametrize("scaling,shape_a,shape_b", [("per_tensor", (1,), (1,)), ("per_channel", (8,), (4,)),
                                                     ("blockwise", (8, 2), (2, 1)), ("mx", (8, 8), (8, 4))])
def test_scaled_fp8_matmul_bound_against_fractions(scaling: str, shape_a: tuple, shape_b: tuple) -> None:
    a = numeq.ops.generate("normal", (8, 256), "e4m3fn", seed=23)
    b = numeq.ops.generate("normal", (256, 4), "e4m3fn", seed=24)
    rng = np.random.default_rng(25)
    sa = rng.uniform(0.5, 2.0, shape_a).astype(np.float32).astype(np.float64)
    sb = rng.uniform(0.5, 2.0, shape_b).astype(np.float32).astype(np.float64)
    if scaling == "mx":
        sa, sb = 2.0 ** np.round(np.log2(sa)), 2.0 ** np.round(np.log2(sb))
    op = numeq.ops.scaled_fp8_matmul(a, b, sa, sb, scaling=scaling, in_fmt="e4m3fn")
    em = op.emulation("nvidia.h100")

    def scale(s: np.ndarray, i: int, k: int, j: int | None) -> Fraction:
        if scaling == "per_tensor":
            return Fraction(float(s.reshape(-1)[0]))
        if scaling == "per_channel":
            return Fraction(float(s.reshape(-1)[i if j is None else j]))
        if scaling == "blockwise":
            return Fraction(float(s[i, k // 128] if j is None else s[k // 128, j // 128]))
        return Fraction(float(s[i, k // 32] if j is None else s[k // 32, j]))

    for i in range(8):
        for j in range(4):
            exact = sum((Fraction(float(a[i, kk])) * scale(sa, i, kk, None) * Fraction(float(b[kk, j])) *
                         scale(sb, kk, kk, j) for kk in range(256)), Fraction(0))
            assert abs(Fraction(float(em.values[i, j])) - exact) <= Fraction(float(em.bound[i, j]))
    assert not numeq.compare(em.values * 2, op, "nvidia.h100").passed


def test_int8_matmul_is_exact_and_overflow_is_an_error() -> None:
    rng = np.random.default_rng(26)
    a = rng.integers(-128, 128, (16, 300)).astype(np.int8)
    b = rng.integers(-128, 128, (300, 8)).astype(np.int8)
    op = numeq.ops.int8_matmul(a, b)
    np.testing.assert_array_equal(op.emulate("nvidia.h100"), a.astype(np.int64) @ b.astype(np.int64))
    assert np.all(op.bound("nvidia.h100") == 0)
    big_a = np.full((1, 140000), 127, np.int8)
    big_b = np.full((140000, 1), 127, np.int8)
    with pytest.raises(ValueError, match="int32|overflow"):
        numeq.ops.int8_matmul(big_a, big_b).emulate("nvidia.h100")
    wrapped = numeq.ops.int8_matmul(big_a, big_b, overflow="wrap").emulate("nvidia.h100")
    assert wrapped[0, 0] == float(np.int64(140000 * 127 * 127).astype(np.int32))


@pytest.mark.parametrize("fmt,dtype", [("bf16", ml_dtypes.bfloat16), ("e4m3fn", ml_dtypes.float8_e4m3fn),
                                       ("e5m2", ml_dtypes.float8_e5m2)])
def test_cast_op_matches_ml_dtypes_and_bounds_stochastic(fmt: str, dtype: Any) -> None:
    x = numeq.ops.generate("lognormal", (4, 256), "fp32", seed=27).astype(np.float32)
    x = np.clip(x, -float(ml_dtypes.finfo(dtype).max), float(ml_dtypes.finfo(dtype).max)).astype(np.float32)
    op = numeq.ops.cast(x, fmt)
    np.testing.assert_array_equal(op.emulate("numpy"), x.astype(dtype).astype(np.float64))
    assert numeq.compare(x.astype(dtype).astype(np.float64), op, "numpy").bit_exact == x.size
    sto = numeq.ops.cast(x, fmt, rounding="stochastic", seed=3)
    em = sto.emulation("numpy")
    assert np.all(np.abs(em.values - x) <= em.bound)
    # Stochastic rounding may round either way: the nearest-even result is explained by its bound too.
    assert numeq.compare(x.astype(dtype).astype(np.float64), sto, "numpy").passed


def test_quantize_and_dequantize_ops_against_numpy() -> None:
    x = numeq.ops.generate("normal", (16, 64), "fp32", seed=28).astype(np.float32)
    scale = (np.abs(x).max(axis=1, keepdims=True) / 127).astype(np.float32)
    op = numeq.ops.quantize(x, "int8", scale=scale, axis=0, range="symmetric")
    codes = op.emulate("numpy")
    # numpy: x / scale in float64 is correctly rounded, and no quotient here sits on a tie.
    expect = np.clip(np.round(x.astype(np.float64) / scale.astype(np.float64)), -127, 127)
    np.testing.assert_array_equal(codes, expect)
    v = numeq.compare(expect, op, "numpy")
    assert v.passed and v.bit_exact == x.size
    assert not numeq.compare(expect + 1, op, "numpy").passed  # off by one code
    deq = numeq.ops.dequantize(codes.astype(np.int8), "int8", scale=scale, axis=0, out="fp32")
    np.testing.assert_array_equal(deq.emulate("numpy"), (codes * scale.astype(np.float64)).astype(np.float32))
    with pytest.raises(ValueError, match="scale"):
        numeq.ops.quantize(x, "int8", scale=np.zeros((16, 1), np.float32), axis=0)


@pytest.mark.parametrize("rounding", ["nearest_even", "toward_zero", "upward"])
def test_int8_matmul_requantized_against_fractions(rounding: str) -> None:
    rng = np.random.default_rng(29)
    a = rng.integers(-128, 128, (8, 200)).astype(np.int8)
    b = rng.integers(-128, 128, (200, 6)).astype(np.int8)
    m = 0.0009765625 * 1.3  # not an fp32 value: the epilogue's fp32 multiplier differs from it
    op = numeq.ops.int8_matmul(a, b, requantize=dict(multiplier=m, zero_point=3, rounding=rounding))
    acc = a.astype(np.int64) @ b.astype(np.int64)
    em = op.emulation("nvidia.h100")
    ref = op.reference()
    for i in range(8):
        for j in range(6):
            exact = min(max(Fraction(int(acc[i, j])) * Fraction(m) + 3, Fraction(-128)), Fraction(127))
            assert abs(Fraction(float(em.values[i, j])) - exact) <= Fraction(float(em.bound[i, j]))
            x = Fraction(int(acc[i, j])) * Fraction(m)
            code = {"nearest_even": round(x), "toward_zero": int(x), "upward": -((-x.numerator) // x.denominator)}[rounding]
            assert ref[i, j] == min(max(code + 3, -128), 127)
    assert numeq.compare(em.values, op, "nvidia.h100").passed
    with pytest.raises(ValueError, match="rounding"):
        numeq.ops.int8_matmul(a, b, requantize=dict(multiplier=m, rounding="stochastic"))
    with pytest.raises(ValueError, match="requantize"):
        numeq.ops.int8_matmul(a, b, requantize=dict(scale=m))


def test_reductions_of_vectors_give_scalars() -> None:
    x = numeq.ops.generate("lognormal", (1000,), "fp32", seed=30).astype(np.float32)
    for op, got in ((numeq.ops.sum(x), np.sum(x)), (numeq.ops.mean(x), np.mean(x)), (numeq.ops.max(x), np.max(x))):
        assert op.emulate("numpy").shape == ()
        v = numeq.compare(got, op, "numpy")
        assert v.passed and v.bit_exact == 1, str(v)
