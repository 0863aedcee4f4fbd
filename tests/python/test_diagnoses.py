"""Verdict.diagnoses on kernel mistakes planted the way users make them (issue 32, section 1):
textbook numpy / ml_dtypes code, and NKI kernels run on numeq.nki. The oracle is the planted
mistake itself, written here and never through numeq's diagnosis code; the verdict must name it
first. Correct outputs get no diagnosis."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import numeq
import numeq.nki
from nki_support import matmul_summing_k_tiles

bf16 = ml_dtypes.bfloat16
nl, nisa = numeq.nki.language, numeq.nki.isa


def _first(verdict, kind: str, at_least: float = 0.99):
    assert not verdict.passed, verdict.message
    assert verdict.diagnoses, verdict.message
    first = verdict.diagnoses[0]
    assert first.kind == kind and first.explains >= at_least, verdict.message
    assert "diagnoses (each tested on the data" in verdict.message
    return first


def _gemm(m=64, k=512, n=96, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((m, k)).astype(bf16)
    b = rng.standard_normal((k, n)).astype(bf16)
    return a, b, numeq.ops.matmul(a, b, in_fmt="bf16", out="fp32")


def test_textbook_bf16_accumulator_in_ml_dtypes_arithmetic() -> None:
    a, b, op = _gemm()
    acc = np.zeros((a.shape[0], b.shape[1]), bf16)
    for k in range(a.shape[1]):
        acc = acc + np.outer(a[:, k], b[k, :])  # ml_dtypes: the product and the sum round to bf16
    first = _first(numeq.compare(acc, op, "nvidia.h100"), "narrow_accumulator")
    assert "products rounded to bf16" in first.detail and "bit for bit" in first.evidence


@numeq.nki.jit
def _one_tile_short(a_t, b):
    # The loop stops one K tile short (range(K // 128 - 1)).
    K, M = a_t.shape
    N = b.shape[1]
    out = nl.ndarray((M, N), nl.float32, buffer=nl.shared_hbm)
    acc = nl.ndarray((M, N), nl.float32, buffer=nl.psum)
    for k in nl.affine_range(K // 128 - 1):
        at = nl.ndarray((128, M), a_t.dtype, buffer=nl.sbuf)
        bt = nl.ndarray((128, N), b.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=at, src=a_t[k * 128:(k + 1) * 128, :])
        nisa.dma_copy(dst=bt, src=b[k * 128:(k + 1) * 128, :])
        nisa.nc_matmul(acc, at, bt)
    res = nl.ndarray((M, N), nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=res, src=acc)
    nisa.dma_copy(dst=out, src=res)
    return out


def test_nki_k_tiles_summed_in_a_bf16_tile() -> None:
    a, b, op = _gemm(m=128, k=512, n=256)
    run = numeq.nki.run(matmul_summing_k_tiles(nl.bfloat16), np.ascontiguousarray(a.T), b)
    first = _first(numeq.compare(run.outputs, op, "trainium.trn2"), "narrow_accumulator")
    assert "128 K terms" in first.detail and "bf16" in first.detail


def test_nki_loop_one_k_tile_short() -> None:
    a, b, op = _gemm(m=128, k=512, n=256)
    run = numeq.nki.run(_one_tile_short, np.ascontiguousarray(a.T), b)
    first = _first(numeq.compare(run.outputs, op, "trainium.trn2"), "missing_k_tile")
    assert "the last K tile (rows 384..511" in first.detail


def test_off_by_one_row_index() -> None:
    a, b, op = _gemm()
    good = numeq.matmul(a, b, platform="nvidia.h100", in_fmt="bf16", out="fp32")
    shifted = good.copy()
    shifted[:-1] = good[1:]  # out[i] = c[i + 1]
    _first(numeq.compare(shifted, op, "nvidia.h100"), "shifted_tile")


def test_rmsnorm_with_eps_added_after_the_rsqrt() -> None:
    rng = np.random.default_rng(3)
    x = rng.standard_normal((32, 256)).astype(np.float32)
    eps = 1e-2
    op = numeq.ops.rmsnorm(x, eps=eps, in_fmt="fp32", out="fp32")
    ms = np.mean(x.astype(np.float32) ** 2, axis=-1, keepdims=True)
    wrong = (x * (1.0 / np.sqrt(ms) + eps)).astype(np.float32)  # rsqrt(mean(x^2)) + eps
    first = _first(numeq.compare(wrong, op, "trainium.trn2"), "row_scale")
    assert "constant factor" in first.detail and "32 rows" in first.detail


def test_rmsnorm_with_another_eps() -> None:
    # eps = 1e-3 where the op (and the GPU kernel) use 1e-6: rows of small magnitude change most.
    rng = np.random.default_rng(7)
    x = (rng.standard_normal((32, 256)) * np.logspace(-1.7, 0.6, 32)[:, None]).astype(np.float32)
    op = numeq.ops.rmsnorm(x, eps=1e-6, in_fmt="fp32", out="fp32")
    ms = np.mean(x.astype(np.float64) ** 2, axis=-1, keepdims=True)
    wrong = (x / np.sqrt(ms + 1e-3)).astype(np.float32)
    first = _first(numeq.compare(wrong, op, "trainium.trn2"), "wrong_eps")
    assert "eps = 0.001 where the op's eps is 1e-06" in first.detail


def test_int8_gemm_with_a_wrapping_int16_accumulator() -> None:
    rng = np.random.default_rng(4)
    a = rng.integers(-128, 128, (32, 512)).astype(np.int8)
    b = rng.integers(-128, 128, (512, 16)).astype(np.int8)
    acc = np.zeros((32, 16), np.int16)
    with np.errstate(over="ignore"):
        for k in range(512):
            acc = (acc + np.outer(a[:, k].astype(np.int16), b[k, :].astype(np.int16))).astype(np.int16)
    v = numeq.compare(acc.astype(np.int32), numeq.ops.int8_matmul(a, b), "trainium.trn2")
    first = _first(v, "integer_wrap", 0.9)
    assert "2^16 = 65536" in first.detail
    assert " ulps" not in v.message and v.integer_output


def test_fp8_inputs_quantised_with_the_wrong_range() -> None:
    # The kernel quantised with OCP e4m3fn (max 448); Trainium's e4m3 saturates at 240.
    rng = np.random.default_rng(5)
    a = rng.standard_normal((128, 128)) * 20
    b = rng.standard_normal((128, 128)) * 20
    a[59, 3], b[10, 59], b[77, 79] = 400.0, 300.0, -350.0
    a8, b8 = (numeq.round(x, "e4m3", overflow="saturate") for x in (a, b))
    wide = [x.astype(ml_dtypes.float8_e4m3fn).astype(np.float64) for x in (a, b)]
    kernel = numeq.round(wide[0] @ wide[1], "fp32")
    v = numeq.compare(kernel, numeq.ops.matmul(a8, b8, in_fmt="e4m3", out="fp32"), "trainium.trn2")
    first = _first(v, "input_range")
    assert "rows of a 59 and columns of b 59, 79" in first.detail and "e4m3fn (max 448)" in first.detail
    assert v.concentration == f"all {v.failures} failures lie in row 59 and columns 59, 79"


def test_softmax_without_the_max_overflows() -> None:
    rng = np.random.default_rng(6)
    x = (rng.standard_normal((8, 64)) * 40).astype(np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        e = np.exp(x.astype(np.float32))
        plain = (e / e.sum(axis=-1, keepdims=True)).astype(np.float32)
    assert np.isnan(plain).any()
    v = numeq.compare(plain, numeq.ops.softmax(x, in_fmt="fp32", out="fp32"), "trainium.trn2")
    first = _first(v, "missing_max_subtraction")
    assert "the row's maximum never subtracted" in first.detail
    (special,) = [d for d in v.diagnoses if d.kind == "special_values"]
    assert "the exact result is finite there" in special.detail


@pytest.mark.parametrize("platform", ["trainium.trn2", "nvidia.h100"])
def test_correct_outputs_get_no_diagnosis(platform: str) -> None:
    a, b, op = _gemm()
    other = "nvidia.a100" if platform == "nvidia.h100" else "nvidia.h100"
    out = numeq.matmul(a, b, platform=other, in_fmt="bf16", out="fp32")
    strict = numeq.compare(out, op, platform, accept="bit_exact")
    assert not strict.passed and strict.diagnoses == ()
    assert numeq.compare(out, op, platform).diagnoses == ()


def test_a_transposed_operand_and_a_tile_added_twice() -> None:
    # b [K, K] read as b^T (a square weight loaded with the wrong stride), and a loop that adds
    # K tile 2 twice (its range overlapping the next), each written in numpy here.
    rng = np.random.default_rng(8)
    a = rng.standard_normal((32, 256)).astype(bf16)
    b = rng.standard_normal((256, 256)).astype(bf16)
    op = numeq.ops.matmul(a, b, in_fmt="bf16", out="fp32")
    transposed = numeq.matmul(a, np.ascontiguousarray(b.T), platform="nvidia.h100", in_fmt="bf16", out="fp32")
    _first(numeq.compare(transposed, op, "nvidia.h100"), "transposed_tile")
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    twice = (a64 @ b64 + a64[:, 128:192] @ b64[128:192, :]).astype(np.float32)  # K tile 2 of 64 again
    first = _first(numeq.compare(twice, op, "nvidia.h100"), "extra_k_tile", 0.9)
    assert "K tile 2 (rows 128..191 of K, tiles of 64)" in first.detail


@pytest.mark.parametrize("op_name", ["softmax", "layernorm", "rmsnorm"])
def test_correct_row_ops_get_no_diagnosis(op_name: str) -> None:
    # Another platform's correct output, failing only a bit-exact check: the softmax and norm
    # models (tried within their bounds too) must not claim it.
    x = np.random.default_rng(12).standard_normal((16, 128)).astype(np.float32)
    op = numeq.ops.softmax(x, in_fmt="fp32", out="fp32") if op_name == "softmax" else \
        getattr(numeq.ops, op_name)(x, eps=1e-5, in_fmt="fp32", out="fp32")
    strict = numeq.compare(op.emulate("nvidia.h100"), op, "trainium.trn2", accept="bit_exact")
    assert not strict.passed and strict.diagnoses == (), strict.message


def test_a_layernorm_with_the_unbiased_variance_is_named() -> None:
    # torch.var's default divides by n - 1: the porter's layernorm, in numpy float64, rounded once.
    rng = np.random.default_rng(3)
    x = rng.standard_normal((32, 512)).astype(np.float32)
    gamma = rng.standard_normal(512).astype(np.float32)
    beta = rng.standard_normal(512).astype(np.float32)
    x64 = x.astype(np.float64)
    mean = x64.mean(axis=-1, keepdims=True)
    var = x64.var(axis=-1, keepdims=True, ddof=1)
    out = ((x64 - mean) / np.sqrt(var + 1e-5) * gamma + beta).astype(np.float32)
    op = numeq.ops.layernorm(x, gamma=gamma, beta=beta, eps=1e-5, out="fp32")
    first = _first(numeq.compare(out, op, "trainium.trn2"), "unbiased_variance", at_least=0.9)
    assert "n - 1 = 511" in first.detail
