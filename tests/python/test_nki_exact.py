"""``Run.exact()``: a kernel's own math on its inputs (its dataflow without the hardware's roundings),
and the split it gives a failing check: an algorithm mistake (the exact math already fails) or
precision lost (the exact math passes; the narrow tile, or the formulation, is named).

Oracles: exact rational sums (``fractions``), numpy float64 formulas of the kernels' math, and the
op's exact result (numeq.reference, MPFR). The kernels are written here as a porter would write them:
each correct one beside the mistake it is known for."""

from __future__ import annotations

from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

import numeq
from nki_support import example, matmul_summing_k_tiles, source_line
from numeq import nki
from numeq.nki.machine import arithmetic

nl, nisa = nki.language, nki.isa
EPS = 1e-5
U64 = 2.0 ** -53


def test_a_matmul_s_exact_math_is_the_exact_product_whatever_its_running_sum_s_dtype():
    rng = np.random.default_rng(3)
    K, M, N = 512, 32, 16
    a_t = rng.standard_normal((K, M)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((K, N)).astype(ml_dtypes.bfloat16)
    A, B = a_t.astype(np.float64), b.astype(np.float64)
    wide = nki.run(matmul_summing_k_tiles(nl.float32), a_t, b)
    narrow = nki.run(matmul_summing_k_tiles(nl.bfloat16), a_t, b)
    e_wide, e_narrow = wide.exact(), narrow.exact()
    assert e_wide.dtype == np.float64 and e_wide.shape == (M, N)
    # The oracle: each product and sum in exact rationals. Four K tiles: four dot products rounded
    # once each to binary64 and four binary64 additions, so within 8 * 2^-53 of sum |a b|.
    magnitude = np.abs(A).T @ np.abs(B)
    for i, j in [(0, 0), (5, 3), (M - 1, N - 1), (17, 11)]:
        exact = sum(Fraction(float(A[k, i])) * Fraction(float(B[k, j])) for k in range(K))
        assert abs(Fraction(float(e_wide[i, j])) - exact) <= Fraction(8 * U64 * magnitude[i, j]), (i, j)
    assert np.max(np.abs(e_wide - e_narrow)) <= 8 * U64 * magnitude.max()
    # ... while the runs differ by what bf16 loses (fp32 would lose 4 orders of magnitude less)
    assert np.max(np.abs(narrow.outputs - e_narrow)) > 1e-3 * np.max(np.abs(e_narrow))
    assert np.max(np.abs(wide.outputs - e_wide)) < 1e-5 * np.max(np.abs(e_wide))


def test_exact_math_of_the_softmax_and_layernorm_examples_is_their_formula_in_float64():
    softmax = example("softmax")
    (x,) = softmax.inputs()
    e = nki.run(softmax.softmax, x).exact()
    X = x.astype(np.float64)
    ref = np.exp(X - X.max(axis=1, keepdims=True))
    ref /= ref.sum(axis=1, keepdims=True)
    assert np.max(np.abs(e - ref)) < 1e-13 * np.max(ref)

    layernorm = example("layernorm")
    x, g, b = layernorm.inputs()
    run = nki.run(layernorm.layernorm, x, g, b)
    X = x.astype(np.float64)
    ref = (X - X.mean(1, keepdims=True)) / np.sqrt(X.var(1, keepdims=True) + layernorm.EPS)
    ref = ref * g.astype(np.float64) + b.astype(np.float64)
    assert np.max(np.abs(run.exact() - ref)) < 1e-12 * np.max(np.abs(ref))
    # the run's own fp32 output is 10^5 times further
    assert np.max(np.abs(run.outputs - ref)) > 1e-9 * np.max(np.abs(ref))


def test_the_exact_dataflow_leaves_no_trace_in_later_runs():
    softmax = example("softmax")
    (x,) = softmax.inputs()
    first = nki.run(softmax.softmax, x)
    first.exact()
    assert arithmetic.EXACT is False and arithmetic.compute_dtype is np.float32
    again = nki.run(softmax.softmax, x)
    assert again.outputs.dtype == np.float32 and np.array_equal(first.outputs.view(np.uint32),
                                                                again.outputs.view(np.uint32))


def test_a_bitcast_float_tile_is_refused_by_name():
    @nki.jit
    def sign_bits(x):
        out = nl.ndarray(x.shape, nl.int32, buffer=nl.shared_hbm)
        t = nl.ndarray(x.shape, nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        nisa.dma_copy(dst=out, src=t.view(nl.int32))
        return out

    run = nki.run(sign_bits, np.ones((128, 4), np.float32))
    with pytest.raises(NotImplementedError, match="bits of the float tile t"):
        run.exact()


# --- the split of a failing check --------------------------------------------------------------

def _row_kernel(variance: str = "two_pass", divisor_less: int = 0):
    """layernorm of x [128, D] fp32 without gamma / beta; ``variance``: two_pass (x - mean)^2, or
    one_pass E[x^2] - E[x]^2 (the cancellation); ``divisor_less``: 1 divides by D - 1 (unbiased)."""

    @nki.jit
    def layernorm_rows(x):
        P, D = x.shape
        out = nl.ndarray((P, D), nl.float32, buffer=nl.shared_hbm)
        xt = nl.ndarray((P, D), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=xt, src=x)
        total = nl.ndarray((P, 1), nl.float32, buffer=nl.sbuf)
        nisa.tensor_reduce(dst=total, op=nl.add, data=xt, axis=1)
        mean = nl.ndarray((P, 1), nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=mean, data=total, op0=nl.multiply, operand0=1.0 / D)
        var = nl.ndarray((P, 1), nl.float32, buffer=nl.sbuf)
        squares = nl.ndarray((P, D), nl.float32, buffer=nl.sbuf)
        if variance == "one_pass":
            nisa.tensor_tensor(dst=squares, data1=xt, data2=xt, op=nl.multiply)
            ex2 = nl.ndarray((P, 1), nl.float32, buffer=nl.sbuf)
            nisa.tensor_reduce(dst=ex2, op=nl.add, data=squares, axis=1)
            nisa.tensor_scalar(dst=ex2, data=ex2, op0=nl.multiply, operand0=1.0 / D)
            m2 = nl.ndarray((P, 1), nl.float32, buffer=nl.sbuf)
            nisa.tensor_tensor(dst=m2, data1=mean, data2=mean, op=nl.multiply)
            nisa.tensor_tensor(dst=var, data1=ex2, data2=m2, op=nl.subtract)  # ONE-PASS
        else:
            centred = nl.ndarray((P, D), nl.float32, buffer=nl.sbuf)
            nisa.tensor_scalar(dst=centred, data=xt, op0=nl.subtract, operand0=mean)
            nisa.tensor_tensor(dst=squares, data1=centred, data2=centred, op=nl.multiply)
            nisa.tensor_reduce(dst=var, op=nl.add, data=squares, axis=1)
            nisa.tensor_scalar(dst=var, data=var, op0=nl.multiply, operand0=1.0 / (D - divisor_less))
        rstd = nl.ndarray((P, 1), nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=rstd, op=nl.rsqrt, data=var, bias=EPS)
        y = nl.ndarray((P, D), nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=y, data=xt, op0=nl.subtract, operand0=mean, op1=nl.multiply, operand1=rstd)
        nisa.dma_copy(dst=out, src=y)
        return out

    return layernorm_rows


def _layernorm64(x: np.ndarray, divisor_less: int = 0) -> np.ndarray:
    X = x.astype(np.float64)
    c = X - X.mean(axis=1, keepdims=True)
    return c / np.sqrt((c * c).sum(axis=1, keepdims=True) / (X.shape[1] - divisor_less) + EPS)


def test_a_correct_layernorm_passes_and_its_exact_math_is_the_formula():
    x = np.random.default_rng(4).standard_normal((128, 512)).astype(np.float32)
    run = nki.run(_row_kernel(), x)
    assert np.max(np.abs(run.exact() - _layernorm64(x))) < 1e-12
    assert numeq.compare(run, numeq.ops.layernorm(x, eps=EPS, in_fmt="fp32", out="fp32"), run.platform).passed


def test_an_unbiased_variance_is_an_algorithm_mistake_named_by_its_model():
    x = np.random.default_rng(5).standard_normal((128, 512)).astype(np.float32)
    run = nki.run(_row_kernel(divisor_less=1), x)
    # the oracle: the kernel's exact math is the D-1 formula, not the op's
    assert np.max(np.abs(run.exact() - _layernorm64(x, divisor_less=1))) < 1e-12
    v = numeq.compare(run, numeq.ops.layernorm(x, eps=EPS, in_fmt="fp32", out="fp32"), run.platform)
    kinds = [d.kind for d in v.diagnoses]
    assert not v.passed and kinds[0] == "unbiased_variance", v.message
    assert "kernel_arithmetic" in kinds and not any(k.startswith("narrow_") for k in kinds), kinds
    arithmetic = v.diagnoses[kinds.index("kernel_arithmetic")]
    assert "Run.exact()" in arithmetic.detail and arithmetic.explains >= 0.9


def test_a_one_pass_variance_is_precision_lost_by_its_formulation_not_eps():
    # rows far from zero: E[x^2] and E[x]^2 agree in their first five digits and cancel in fp32
    x = (300.0 + np.random.default_rng(6).standard_normal((128, 512))).astype(np.float32)
    kernel = _row_kernel("one_pass")
    run = nki.run(kernel, x)
    assert np.max(np.abs(run.exact() - _layernorm64(x))) < 1e-7  # the kernel's math is layernorm's
    assert np.max(np.abs(run.outputs - _layernorm64(x))) > 1e-2  # its fp32 arithmetic is not
    v = numeq.compare(run, numeq.ops.layernorm(x, eps=EPS, in_fmt="fp32", out="fp32"), run.platform)
    kinds = [d.kind for d in v.diagnoses]
    assert not v.passed and kinds[0] == "kernel_cancellation", v.message
    assert source_line(kernel, "ONE-PASS") in v.diagnoses[0].detail
    assert "kernel_arithmetic" not in kinds
    # a model of an algorithm mistake (wrong_eps, unbiased_variance), if any fits, comes after
    for k in ("wrong_eps", "unbiased_variance"):
        assert k not in kinds or kinds.index(k) > 0


def _softmax_rows(exp_dtype, subtract_max: bool = True):
    """softmax over x [128, D] fp32: exp (of x less its row maximum, or of x itself: the mistake)
    written into a tile of ``exp_dtype`` (bf16: the mistake), summed, times the sum's reciprocal."""

    @nki.jit
    def softmax_rows(x):
        P, D = x.shape
        out = nl.ndarray((P, D), nl.float32, buffer=nl.shared_hbm)
        xt = nl.ndarray((P, D), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=xt, src=x)
        top = nl.ndarray((P, 1), nl.float32, buffer=nl.sbuf)
        nisa.tensor_reduce(dst=top, op=nl.maximum, data=xt, axis=1, negate=True)
        e = nl.ndarray((P, D), exp_dtype, buffer=nl.sbuf)  # EXP-TILE
        nisa.activation(dst=e, op=nl.exp, data=xt, bias=top if subtract_max else None)  # EXP
        total = nl.ndarray((P, 1), nl.float32, buffer=nl.sbuf)
        nisa.tensor_reduce(dst=total, op=nl.add, data=e, axis=1)
        inv = nl.ndarray((P, 1), nl.float32, buffer=nl.sbuf)
        nisa.reciprocal(dst=inv, data=total)
        y = nl.ndarray((P, D), nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=y, data=e, op0=nl.multiply, operand0=inv)
        nisa.dma_copy(dst=out, src=y)
        return out

    return softmax_rows


def _softmax64(x: np.ndarray) -> np.ndarray:
    X = x.astype(np.float64)
    ref = np.exp(X - X.max(1, keepdims=True))
    return ref / ref.sum(1, keepdims=True)


def test_a_softmax_writing_exp_into_a_bf16_tile_names_that_tile_not_the_max():
    kernel = _softmax_rows(nl.bfloat16)
    x = (3 * np.random.default_rng(8).standard_normal((128, 256))).astype(np.float32)
    run = nki.run(kernel, x)
    assert np.max(np.abs(run.exact() - _softmax64(x))) < 1e-14
    v = numeq.compare(run, numeq.ops.softmax(x, in_fmt="fp32", out="fp32"), run.platform)
    kinds = [d.kind for d in v.diagnoses]
    assert not v.passed and kinds[0] == "narrow_tile", v.message
    assert source_line(kernel, "EXP-TILE") in v.diagnoses[0].detail
    assert "missing_max_subtraction" not in kinds[:1] and "kernel_arithmetic" not in kinds


def test_a_softmax_without_its_max_subtracted_overflows_and_says_so():
    kernel = _softmax_rows(nl.float32, subtract_max=False)
    # scores up to ~100: exp overflows fp32 (its largest finite value is e^88.7), not binary64
    x = (30 * np.random.default_rng(9).standard_normal((128, 64))).astype(np.float32)
    run = nki.run(kernel, x)
    assert np.max(np.abs(run.exact() - _softmax64(x))) < 1e-14
    assert not np.isfinite(run.outputs).all()
    v = numeq.compare(run, numeq.ops.softmax(x, in_fmt="fp32", out="fp32"), run.platform)
    kinds = [d.kind for d in v.diagnoses]
    assert not v.passed and "kernel_overflow" in kinds and "kernel_arithmetic" not in kinds, v.message
    assert kinds[0] in ("missing_max_subtraction", "kernel_overflow"), kinds
    assert source_line(kernel, "op=nl.exp", unique=True) in v.diagnoses[kinds.index("kernel_overflow")].detail


def test_a_gather_moves_the_exact_values_of_the_rows_its_index_tile_names():
    @nki.jit
    def gather_rows(data, idx):
        n, m = data.shape
        out = nl.ndarray((idx.shape[0], m), data.dtype, buffer=nl.shared_hbm)
        idx_tile = nl.ndarray((idx.shape[0], 1), nl.int32, buffer=nl.sbuf)
        nisa.dma_copy(dst=idx_tile, src=idx)
        rows = nl.ndarray((idx.shape[0], m), data.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=rows, src=data.ap([[m, idx.shape[0]], [1, m]], vector_offset=idx_tile, indirect_dim=0))
        nisa.dma_copy(dst=out, src=rows)
        return out

    data = np.random.default_rng(10).standard_normal((128, 64)).astype(ml_dtypes.bfloat16)
    idx = np.random.default_rng(11).integers(0, 128, size=(32, 1)).astype(np.int32)
    run = nki.run(gather_rows, data, idx)
    expected = data.astype(np.float64)[idx[:, 0]]  # numpy's indexing
    assert np.array_equal(run.outputs.astype(np.float64), expected)
    assert run.exact().dtype == np.float64 and np.array_equal(run.exact(), expected)


def test_a_kernel_that_writes_its_input_is_followed_from_the_input_it_was_given():
    @nki.jit
    def add_one_in_place(x):
        t = nl.ndarray(x.shape, nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        nisa.tensor_scalar(dst=t, data=t, op0=nl.add, operand0=0.1)
        nisa.dma_copy(dst=x, src=t)
        return x

    x = np.zeros((128, 8), np.float32)
    run = nki.run(add_one_in_place, x)
    assert np.all(x == np.float32(0.1))  # written back once, as AWS's simulator does
    assert np.all(run.exact() == 0.1)  # 0 + 0.1 with 0.1 as the kernel wrote it (binary64), not 0.1 + 0.1
    assert np.all(x == np.float32(0.1))  # the rerun left the caller's array alone


@pytest.mark.parametrize("name", sorted(arithmetic._BINARY64))
def test_the_exact_dataflow_s_functions_are_within_a_few_ulps_of_mpfr(name):
    # The binary64 library functions Run.exact() uses, against MPFR's correctly rounded binary64
    # (numeq.reference, certified), over arguments from far below 0 to far above (sigmoid's tail at
    # -30, where 0.5 (1 + tanh(x / 2)) would keep no correct digit, included).
    x = np.concatenate([np.linspace(-30, 30, 2001), -np.geomspace(1e-6, 700, 300), np.geomspace(1e-6, 700, 300)])
    if name in ("log", "sqrt", "rsqrt"):
        x = np.abs(x) + 1e-300
    if name in ("tan",):
        x = x[np.abs(x) < 1.5]
    if name in ("exp", "exp2", "softplus"):
        x = x[x < 700]
    with np.errstate(all="ignore"):
        got = arithmetic._BINARY64[name](x)
    ref = getattr(numeq.reference, name)(x, in_fmt="fp64", out="fp64")
    finite = np.isfinite(ref) & (ref != 0)
    ulps = np.abs(got[finite] - ref[finite]) / np.spacing(np.abs(ref[finite]))
    assert np.max(ulps) <= 4, (name, float(np.max(ulps)), x[finite][np.argmax(ulps)])
