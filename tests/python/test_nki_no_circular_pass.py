"""The documented test pattern judges a kernel by what the hardware owes it, not by the kernel's
own precision choices (issue: "no circular pass"). A kernel that adds each K tile's PSUM result
into a bf16 SBUF tile is caught by ``assert_equivalent(run.outputs, op, run.platform)``; the fp32
version of the same kernel passes bit for bit; a test that means the bf16 accumulator opts in by
name (``run.kernel_platform``). Oracles: numpy float32 sums of the exact products and ml_dtypes'
bf16 rounding, independent of numeq's platforms."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import numeq
from numeq import nki
from nki_support import example, matmul_summing_k_tiles
from numeq.testing import assert_equivalent

nl, nisa = nki.language, nki.isa
K, M, N = 2048, 128, 256


def _inputs():
    rng = np.random.default_rng(42)
    a = rng.standard_normal((M, K)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((K, N)).astype(ml_dtypes.bfloat16)
    return a, b


def _tile_sums(a, b):
    """Each K tile's product in float64 (exact for bf16 x bf16 products summed over 128 terms
    to well within float64), then rounded to float32: the PSUM values up to the PE order."""
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    return [(a64[:, k:k + 128] @ b64[k:k + 128]).astype(np.float32) for k in range(0, K, 128)]


def test_a_bf16_running_sum_fails_the_documented_pattern():
    a, b = _inputs()
    run = nki.run(matmul_summing_k_tiles(nl.bfloat16), np.ascontiguousarray(a.T), b)
    op = numeq.ops.matmul(a, b, out="fp32")
    assert "group_accumulator" not in run.platform
    with pytest.raises(AssertionError):
        assert_equivalent(run.outputs, op, run.platform)
    (narrow,) = [f for f in run.findings if f.rule == "narrow_accumulator"]
    assert "bf16" in narrow.message and narrow.severity == "warning"
    # The kernel did what its trace says: independent of numeq, a bf16 running sum of the tiles
    # lands far from the fp32 one, and numeq's kernel_platform reproduces the run bit for bit.
    acc = np.zeros((M, N), ml_dtypes.bfloat16)
    for t in _tile_sums(a, b):
        acc = (acc.astype(np.float32) + t).astype(ml_dtypes.bfloat16)
    exact = a.astype(np.float64) @ b.astype(np.float64)
    assert np.max(np.abs(run.outputs - exact)) > 0.5 * np.max(np.abs(acc.astype(np.float64) - exact))
    assert_equivalent(run.outputs, op, run.kernel_platform, accept="bit_exact")


def test_the_same_kernel_accumulating_in_fp32_passes_bit_for_bit():
    a, b = _inputs()
    run = nki.run(matmul_summing_k_tiles(nl.float32), np.ascontiguousarray(a.T), b)
    assert run.platform == run.kernel_platform
    assert not [f for f in run.findings if f.rule == "narrow_accumulator"]
    assert_equivalent(run.outputs, numeq.ops.matmul(a, b, out="fp32"), run.platform, accept="bit_exact")
    acc = np.zeros((M, N), np.float32)
    for t in _tile_sums(a, b):
        acc = acc + t
    exact = a.astype(np.float64) @ b.astype(np.float64)
    # within float32 summation's own error of the independent float32 running sum
    assert np.max(np.abs(run.outputs - acc)) <= 1e-4 * np.max(np.abs(exact))


def test_a_split_k_variant_does_not_explain_a_runs_bf16_group_sums():
    # The PSUM-group matmul with a bf16 accumulator (groups of 2 K tiles, 8 groups; AWS's fully
    # optimised tutorial matmul has the same shape): its bf16 running sum of 8 fp32 group sums is
    # exactly a split-K by 8 reduced in the bf16 output format, a variant the search names for GPU
    # outputs. For a run, whose trace fixes how it sums, that is the kernel's choice: not a pass.
    m = example("matmul_psum_groups")
    a, b = m.inputs(k=2048)
    run = nki.run(m.matmul_psum_groups, np.ascontiguousarray(a.T), b, group=m.GROUP,
                  accumulator=m.ACCUMULATORS["bfloat16"][0])
    # independent of numeq: each group's float64 product rounded to fp32, summed into bf16 by ml_dtypes
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    acc = None
    for k in range(0, 2048, 256):
        part = (a64[:, k:k + 256] @ b64[k:k + 256]).astype(np.float32)
        acc = part.astype(ml_dtypes.bfloat16) if acc is None else (acc.astype(np.float32) + part).astype(
            ml_dtypes.bfloat16)
    assert np.max(np.abs(run.outputs.astype(np.float64) - acc.astype(np.float64))) <= 2 ** -6 * np.max(np.abs(acc))
    op = numeq.ops.matmul(a, b, out="bf16")
    v = numeq.compare(run, op, run.platform)
    assert not v.passed and v.explained_by is None, v.message
    first = v.diagnoses[0]
    assert first.kind == "narrow_running_sum" and "bf16" in first.detail, v.message
    with pytest.raises(AssertionError, match="narrow_running_sum"):
        assert_equivalent(run, op, run.platform)
