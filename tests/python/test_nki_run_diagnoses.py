"""A failing kernel judged through its run (``numeq.compare(run, op, platform)``,
``assert_equivalent(run, ...)``): the run itself says whether precision or arithmetic is at fault.
The kernel runs again with a narrow tile in fp32; the tile whose widening makes the check pass is
named first, with its lines; a kernel that still fails with every narrow tile widened gets
``kernel_arithmetic``, after the op-level model that reproduces its mistake bit for bit. The kernels
here are mistakes written as a porter would; the oracles are the op's exact result (numeq.reference,
checked against numpy float64 sums) and the lines of this file."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import numeq
from nki_support import matmul_summing_k_tiles, source_line
from numeq import nki
from numeq.testing import assert_equivalent

nl, nisa = nki.language, nki.isa
RNG = np.random.default_rng(7)
M, N = 128, 256


def _operands(k: int):
    a = RNG.standard_normal((M, k)).astype(ml_dtypes.bfloat16)
    b = RNG.standard_normal((k, N)).astype(ml_dtypes.bfloat16)
    return a, b


def test_a_bf16_running_sum_is_named_first_with_its_line():
    a, b = _operands(2048)
    kernel = matmul_summing_k_tiles(nl.bfloat16)
    run = nki.run(kernel, np.ascontiguousarray(a.T), b)
    op = numeq.ops.matmul(a, b, out="fp32")
    v = numeq.compare(run, op, run.platform)
    assert not v.passed
    first = v.diagnoses[0]
    assert first.kind == "narrow_running_sum" and first.explains >= 0.9, v.message
    assert source_line(kernel, "RUNNING-SUM") in first.detail and "bf16" in first.detail
    assert "kernel_arithmetic" not in [d.kind for d in v.diagnoses]
    with pytest.raises(AssertionError, match="narrow_running_sum"):
        assert_equivalent(run, op, run.platform)


def test_a_k_loop_one_tile_short_is_arithmetic_and_the_missing_tile_is_named():
    a, b = _operands(512)
    run = nki.run(matmul_summing_k_tiles(nl.float32, lambda n: n - 1), np.ascontiguousarray(a.T), b)
    op = numeq.ops.matmul(a, b, out="fp32")
    # the oracle: numpy float64 of the first three K tiles, far from the op's exact result
    short = a.astype(np.float64)[:, :384] @ b.astype(np.float64)[:384]
    assert np.max(np.abs(run.outputs - short)) < 1e-3 * np.max(np.abs(short))
    v = numeq.compare(run, op, run.platform)
    kinds = [d.kind for d in v.diagnoses]
    assert kinds[0] == "missing_k_tile", v.message
    assert "kernel_arithmetic" in kinds and not any(k.startswith("narrow_") for k in kinds), kinds


def test_a_sum_over_a_bf16_copy_of_fp32_data_names_the_copy():
    @nki.jit
    def row_sums(x):
        out = nl.ndarray((128, 1), nl.float32, buffer=nl.shared_hbm)
        t = nl.ndarray((128, 512), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        low = nl.ndarray((128, 512), nl.bfloat16, buffer=nl.sbuf)
        nisa.tensor_copy(dst=low, src=t)  # NARROW-COPY
        s = nl.ndarray((128, 1), nl.float32, buffer=nl.sbuf)
        nisa.tensor_reduce(dst=s, op=nl.add, data=low, axis=1)
        nisa.dma_copy(dst=out, src=s)
        return out

    x = RNG.standard_normal((128, 512)).astype(np.float32)
    run = nki.run(row_sums, x)
    op = numeq.ops.sum(x[:, None, :], axis=-1, out="fp32")  # [128, 1], as the kernel writes it
    v = numeq.compare(run, op, run.platform)
    assert not v.passed and v.diagnoses[0].kind == "narrow_tile", v.message
    assert source_line(row_sums, "NARROW-COPY") in v.diagnoses[0].detail


def test_a_passing_run_and_a_stopped_one():
    a, b = _operands(256)
    run = nki.run(matmul_summing_k_tiles(nl.float32), np.ascontiguousarray(a.T), b)
    v = assert_equivalent(run, numeq.ops.matmul(a, b, out="fp32"), run.platform, accept="bit_exact")
    assert v.passed and not v.diagnoses

    @nki.jit
    def reads_past_its_input(x):
        out = nl.ndarray((128, 4), nl.float32, buffer=nl.shared_hbm)
        t = nl.ndarray((128, 4), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x[0:128, 4:8])
        nisa.dma_copy(dst=out, src=t)
        return out

    stopped = nki.run(reads_past_its_input, np.ones((128, 4), np.float32))
    with pytest.raises(ValueError, match="did not complete"):
        numeq.compare(stopped, numeq.ops.sum(np.ones((128, 4)), axis=-1), "trainium.trn2")
