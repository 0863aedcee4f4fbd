"""numeq.ops.sum_of_squares: an op added to the registry with no Python of its own (its emulation,
its registry row, these tests). Checked against exact fractions (the exact result), numpy's fp32
sum in numpy's own order (the numpy platform, bit for bit), and the catalogue, bugs and manifest
that read the registry."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

import numeq
import numeq.bugs
import numeq.catalogue
from numeq.review import manifest


@pytest.mark.parametrize("fmt", ["bf16", "fp16"])
def test_exact_result_is_the_exact_sum_of_squares(fmt):
    x = numeq.ops.generate("normal", (4, 300), fmt, seed=2)
    op = numeq.ops.sum_of_squares(x, in_fmt=fmt, out="fp64")
    for row, hi in zip(x.tolist(), op.exact()[0].tolist()):
        assert hi == float(sum(Fraction(v) ** 2 for v in row))


@pytest.mark.parametrize("fmt,dtype", [("fp16", np.float16), ("bf16", None)])
def test_numpy_platform_is_numpys_fp32_sum_of_squares(fmt, dtype):
    import ml_dtypes
    x = numeq.ops.generate("normal", (8, 1000), fmt, seed=5).astype(dtype or ml_dtypes.bfloat16)
    squares = x.astype(np.float32) ** 2  # exact: 2 p <= 24 bits, within fp32's range
    device = np.sum(squares, axis=-1, dtype=np.float32)
    op = numeq.ops.sum_of_squares(x, out="fp32")
    assert numeq.compare(device, op, "numpy").tier == "bit_exact"
    assert np.all(np.abs(op.emulate("nvidia.h100") - op.reference()) <= op.bound("nvidia.h100"))


def test_fp32_squares_round_and_the_bound_holds_them():
    # fp32 inputs: each square rounds into fp32 (numpy's x * x), the plan sums the rounded squares;
    # the exact result is the exact squares' sum, and the bound covers both roundings.
    x = np.random.default_rng(1).standard_normal((8, 1000)).astype(np.float32)
    op = numeq.ops.sum_of_squares(x, out="fp32")
    assert numeq.compare(np.sum(x * x, axis=-1, dtype=np.float32), op, "numpy").tier == "bit_exact"
    exact = np.array([float(sum(Fraction(float(v)) ** 2 for v in row)) for row in x.tolist()])
    assert np.array_equal(op.exact()[0], exact)
    for platform in ("numpy", "nvidia.h100", "trainium.trn2"):
        error = np.abs(op.emulate(platform) - exact)
        assert np.all(error <= op.bound(platform))
        assert np.max(error / op.bound(platform)) > 1e-3  # the bound is not vacuous


def test_a_square_past_fp32_is_inf_in_the_emulation_and_the_reference():
    x = numeq.round(np.array([[2.0 ** 70, 1.0]]), "bf16")
    op = numeq.ops.sum_of_squares(x, in_fmt="bf16", out="fp32")
    assert np.isinf(op.emulate("numpy")[0]) and np.isinf(op.reference()[0])


def test_catalogue_bugs_and_manifest_know_it():
    p = numeq.catalogue.Problem("sum_of_squares", "bf16", "fp32", k=1024)
    built = numeq.catalogue.build(p, "normal", seed=0)
    assert numeq.compare(built.op.emulate("trainium.trn2"), built.op, "trainium.trn2").tier == "bit_exact"
    assert [b.name for b in numeq.bugs.for_problem(p, "trainium.trn2")] == ["dropped_k_tile"]
    dropped = numeq.bugs.by_name("dropped_k_tile").output(built, p, "trainium.trn2")
    assert not numeq.compare(dropped, built.op, "trainium.trn2").passed
    assert "sum_of_squares" in manifest.OPERATIONS


def test_a_dropped_tile_is_named_by_the_verdict():
    # numeq.bugs' dropped_k_tile on a sum of squares: the verdict names the mistake that reproduces it.
    p = numeq.catalogue.Problem("sum_of_squares", "bf16", "fp32", k=1000)
    built = numeq.catalogue.build(p, "normal", seed=3)
    wrong = numeq.bugs.by_name("dropped_k_tile").output(built, p, "trainium.trn2")
    v = numeq.compare(wrong, built.op, "trainium.trn2")
    assert not v.passed and v.diagnoses and v.diagnoses[0].kind == "missing_k_tile"
    assert "the last K tile (terms 896..999" in v.diagnoses[0].detail
