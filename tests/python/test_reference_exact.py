"""numeq.reference sum / dot / matmul against exact rational arithmetic (fractions.Fraction)
rounded by conftest's round_oracle, written from the format definitions."""

from __future__ import annotations

from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

import numeq
from conftest import SPECS, assert_same_floats, round_oracle


def _draw(rng: np.random.Generator, fmt: str, shape, spread: int = 6) -> np.ndarray:
    x = rng.standard_normal(shape) * np.exp2(rng.integers(-spread, spread + 1, size=shape))
    return numeq.round(x, fmt)


def _exact_matmul(a: np.ndarray, b: np.ndarray) -> list[list[Fraction]]:
    return [[sum((Fraction(float(a[m, k])) * Fraction(float(b[k, n])) for k in range(a.shape[1])), Fraction(0))
             for n in range(b.shape[1])] for m in range(a.shape[0])]


@pytest.mark.parametrize("in_fmt", ["bf16", "fp16", "e4m3fn", "e5m2", "fp32"])
@pytest.mark.parametrize("out", ["fp32", "bf16", "fp16"])
@pytest.mark.parametrize("rounding", ["nearest_even", "toward_zero", "upward"])
def test_matmul_equals_exact_rational_rounded_once(in_fmt: str, out: str, rounding: str) -> None:
    rng = np.random.default_rng(hash((in_fmt, out, rounding)) % 2**32)
    a = _draw(rng, in_fmt, (6, 33))
    b = _draw(rng, in_fmt, (33, 5))
    got = numeq.reference.matmul(a, b, in_fmt=in_fmt, out=out, rounding=rounding)
    exact = _exact_matmul(a, b)
    want = [[round_oracle(v, SPECS[out], rounding) for v in row] for row in exact]
    assert_same_floats(got, want, f"{in_fmt} -> {out} {rounding}")


@pytest.mark.parametrize("in_fmt", ["bf16", "e4m3fn"])
@pytest.mark.parametrize("bias", [False, True])
def test_sliced_matmul_with_wide_rows_equals_exact_rationals(in_fmt: str, bias: bool) -> None:
    """The error-free GEMM paths: most rows and columns one slice (a single dgemm gives their exact
    value), a few with tiny entries spanning many more bits (extra slices, summed exactly), one
    row with Inf and one all-zero column (the long-accumulator loop), and a bias with bits far
    below the products' (a double-double sum)."""
    rng = np.random.default_rng(7 + bias)
    a = _draw(rng, in_fmt, (10, 260), spread=2)
    b = _draw(rng, in_fmt, (260, 9), spread=2)
    tiny = -40 if in_fmt == "bf16" else -6
    a[1, ::7] = numeq.round(a[1, ::7] * 2.0**tiny, in_fmt)
    b[::5, 2] = numeq.round(b[::5, 2] * 2.0**tiny, in_fmt)
    a[3, 11] = np.inf
    b[:, 4] = 0.0
    c = _draw(rng, "fp32", (10, 9)) * np.where(rng.random((10, 9)) < 0.5, 2.0**-70, 1.0) if bias else None
    hi, lo = numeq.reference.matmul_exact(a, b, c)
    got = numeq.reference.matmul(a, b, c, out="bf16", rounding="toward_zero")
    finite = np.isfinite(a).all(axis=1)
    for m in range(a.shape[0]):
        for n in range(b.shape[1]):
            if not finite[m]:
                assert np.isinf(hi[m, n]) or np.isnan(hi[m, n])
                continue
            exact = sum((Fraction(float(a[m, k])) * Fraction(float(b[k, n])) for k in range(a.shape[1])), Fraction(0))
            if c is not None:
                exact += Fraction(float(c[m, n]))
            assert hi[m, n] == float(exact), (m, n)
            assert lo[m, n] == float(exact - Fraction(float(hi[m, n]))), (m, n)
            assert_same_floats([got[m, n]], [round_oracle(exact, SPECS["bf16"], "toward_zero")], f"({m}, {n})")


def test_ml_dtypes_inputs_default_to_their_own_format() -> None:
    rng = np.random.default_rng(1)
    a = _draw(rng, "bf16", (4, 8)).astype(ml_dtypes.bfloat16)
    b = _draw(rng, "bf16", (8, 3)).astype(ml_dtypes.bfloat16)
    got = numeq.reference.matmul(a, b, out="bf16")
    exact = _exact_matmul(a.astype(np.float64), b.astype(np.float64))
    assert_same_floats(got, [[round_oracle(v, SPECS["bf16"]) for v in row] for row in exact], "ml_dtypes bf16")


def test_sum_dot_and_bias() -> None:
    rng = np.random.default_rng(2)
    x = _draw(rng, "fp32", (3, 40), spread=40)
    got = numeq.reference.sum(x, axis=1, out="bf16")
    want = [round_oracle(sum((Fraction(float(v)) for v in row), Fraction(0)), SPECS["bf16"]) for row in x]
    assert_same_floats(got, want, "sum")
    got0 = numeq.reference.sum(x, axis=0, out="fp16")
    want0 = [round_oracle(sum((Fraction(float(v)) for v in col), Fraction(0)), SPECS["fp16"]) for col in x.T]
    assert_same_floats(got0, want0, "sum axis 0")
    u, v = x[0], x[1]
    d = numeq.reference.dot(u, v, out="fp32")
    assert d.shape == ()
    assert_same_floats(d, [round_oracle(sum((Fraction(float(p)) * Fraction(float(q)) for p, q in zip(u, v)),
                                            Fraction(0)), SPECS["fp32"])], "dot")
    a = _draw(rng, "bf16", (2, 3, 4))
    b = _draw(rng, "bf16", (4, 5))
    c = _draw(rng, "fp32", (5,))
    got = numeq.reference.matmul(a, b, c, out="fp32")
    assert got.shape == (2, 3, 5)
    for i in range(2):
        exact = _exact_matmul(a[i], b)
        want = [[round_oracle(v + Fraction(float(c[n])), SPECS["fp32"]) for n, v in enumerate(row)] for row in exact]
        assert_same_floats(got[i], want, "batched with bias")


def test_exact_variants_are_double_doubles_of_the_exact_value() -> None:
    rng = np.random.default_rng(3)
    a = _draw(rng, "fp32", (3, 50), spread=30)
    b = _draw(rng, "fp32", (50, 2), spread=30)
    hi, lo = numeq.reference.matmul_exact(a, b)
    exact = _exact_matmul(a, b)
    for m in range(3):
        for n in range(2):
            assert hi[m, n] == float(exact[m][n])  # Fraction -> float rounds to nearest
            assert lo[m, n] == float(exact[m][n] - Fraction(float(hi[m, n])))


def test_stochastic_results_do_not_depend_on_threads(restore_threads) -> None:
    rng = np.random.default_rng(4)
    a = _draw(rng, "bf16", (40, 200))
    b = _draw(rng, "bf16", (200, 40))
    numeq.set_num_threads(1)
    one = numeq.reference.matmul(a, b, out="bf16", rounding="stochastic", seed=9)
    numeq.set_num_threads(0)
    many = numeq.reference.matmul(a, b, out="bf16", rounding="stochastic", seed=9)
    assert np.array_equal(one, many)


def test_errors_name_the_argument() -> None:
    a = np.ones((2, 3))
    with pytest.raises(ValueError, match="inner dimensions"):
        numeq.reference.matmul(a, np.ones((4, 2)))
    with pytest.raises(ValueError, match="in_fmt"):
        numeq.reference.matmul(a * 0.1, np.ones((3, 2)), in_fmt="bf16")
    with pytest.raises(ValueError, match="out"):
        numeq.reference.matmul(a, np.ones((3, 2)), out="fp42")
    with pytest.raises(ValueError, match="rounding"):
        numeq.reference.sum(a, rounding="sideways")
    with pytest.raises(ValueError, match="axis"):
        numeq.reference.sum(a, axis=5)
    with pytest.raises(TypeError, match="x"):
        numeq.reference.sum(np.array(["a", "b"]))
    with pytest.raises(ValueError, match="c:"):
        numeq.reference.matmul(a, np.ones((3, 2)), np.ones(3))
    with pytest.raises(ValueError, match="equal length"):
        numeq.reference.dot(np.ones(3), np.ones(4))
