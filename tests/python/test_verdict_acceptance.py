"""Acceptance of the verdict ladder (numeq.compare), the fast version of
benchmarks/bench_verdict.py: planted bugs fail, correct outputs pass bit-exact on every platform,
and a Trainium variant's output is explained by a variant whose emulation equals it bit for bit.

Oracles: the planted bugs (numeq.bugs, whose values tests/python/test_bugs.py checks) are wrong
outputs built independently of the verdict (numpy float32 implementations of the wrong algorithms,
or a platform's emulation on wrong inputs, plans or parameters: a dropped K tile, a transposed
operand, a doubled scale, a bf16 accumulator); "bit-exact" and "explained by" are checked by comparing
bits here, not by trusting the verdict's counts. The sweep over every op, generator and variant is
marked ``long`` (``pytest -m long``; NUMEQ_LONG_TESTS=1 runs it at a larger size).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest

import numeq

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import bench_verdict as bench  # noqa: E402

LONG = os.environ.get("NUMEQ_LONG_TESTS") == "1"


def same_bits(x: np.ndarray, y: np.ndarray) -> bool:
    """Equal element for element, zero signs alike, NaN matching NaN."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if x.shape != y.shape:
        return False
    both_nan = np.isnan(x) & np.isnan(y)
    return bool(np.all(both_nan | ((x == y) & (np.signbit(x) == np.signbit(y)))))


# One platform per bug (the sweep over every applicable platform is the benchmark's).
BUGS = [
    ("bf16 accumulator in fp8 GEMM (K=1024)", "nvidia.b200"),
    ("bf16 accumulator in bf16 GEMM (K=1024)", "nvidia.h100"),
    ("bf16 accumulator in sum (K=1024)", "cuda_core.fp32"),
    ("dropped K tile (last 128 of 512)", "trainium.trn2"),
    ("transposed operand (square b)", "nvidia.a100"),
    ("wrong fp8 scale (scale_a x2)", "nvidia.h100"),
    ("softmax without max subtraction", "trainium.trn1"),
    ("one-pass variance layernorm", "nvidia.h100"),
    ("flash attention without rescale", "nvidia.h100"),
    ("missing output cast (fp32 for bf16)", "trainium.trn2"),
]


@pytest.mark.parametrize("bug, platform", BUGS, ids=[b for b, _ in BUGS])
def test_planted_bug_fails(bug, platform):
    _, rows = bench.BUGS[bug]
    k = None
    if bug.startswith("flash attention"):  # two key blocks of 64: the least that shows the bug
        rows, k = 128, 128
    for seed in (0,):
        op, wrong = bench.planted(bug, platform, rows, seed, k)
        reference = op.reference()
        # The bug changes the output (an oracle independent of the verdict): it must not pass.
        assert not same_bits(wrong, op.emulate(platform)) and not same_bits(wrong, reference)
        verdict = numeq.compare(wrong, op, platform)
        assert not verdict.passed, f"{bug} on {platform} (seed {seed}) not caught:\n{verdict}"
        assert verdict.tier in ("deterministic", "violation")
        assert verdict.failures > 0
        if bug.startswith("missing output cast"):
            assert verdict.not_in_format > 0 and bench.NOT_IN_FORMAT in verdict.diagnosis, str(verdict)


# The fp8 paths that align products to 13 fraction bits and truncate (nvidia.h100, nvidia.ada,
# nvidia.h100.fp8_promoted: an e8m13 accumulator) have a worst-case bound of about half the result at
# K = 1024, which admits a bf16 accumulator; the data-driven probabilistic bound (the truncation's
# mean taken from the data, core/bound.hpp) tracks the hardware's real error and catches it.
@pytest.mark.parametrize("platform", ["nvidia.h100", "nvidia.ada", "nvidia.h100.fp8_promoted"])
def test_bf16_accumulator_in_fp8_gemm_on_hopper(platform):
    op, wrong = bench.planted("bf16 accumulator in fp8 GEMM (K=1024)", platform, 16, 0)
    assert not same_bits(wrong, op.emulate(platform))
    assert not numeq.compare(wrong, op, platform).passed


def test_bf16_accumulator_plan_is_bf16():
    """The planted fp8 bug's plan: the accumulator casts are bf16, the output cast fp32 as before."""
    plan = numeq.plan("nvidia.h100", op="matmul", in_fmt="e4m3fn", out="fp32").to_dict()
    bug = numeq.bugs.bf16_accumulator_plan(plan)
    assert bug["output"] == plan["output"]
    fused = bug["reduction"]["fused"]
    assert fused["c_format"] == "bf16" and fused["output"]["format"] == "bf16"
    a = numeq.ops.generate("normal", (8, 1024), "e4m3fn", seed=3)
    b = numeq.ops.generate("normal", (1024, 8), "e4m3fn", seed=4)
    wrong = numeq.matmul(a, b, plan=bug, in_fmt="e4m3fn")
    # Every partial sum kept in bf16: the results are bf16 values, unlike the fp32 GEMM's.
    assert np.array_equal(numeq.round(wrong, "bf16"), wrong)
    assert not np.array_equal(wrong, numeq.matmul(a, b, platform="nvidia.h100", in_fmt="e4m3fn"))


def _ops(n: int = 256):
    yield numeq.ops.matmul(*(numeq.ops.generate("normal", s, "bf16", seed=i) for i, s in
                             enumerate(((4, 300), (300, 8)))), in_fmt="bf16", out="fp32")
    yield numeq.ops.matmul(*(numeq.ops.generate("normal", s, "fp16", seed=i) for i, s in
                             enumerate(((4, 300), (300, 8)))), in_fmt="fp16", out="fp32")
    yield numeq.ops.softmax(numeq.ops.generate("normal", (4, 64), "bf16", seed=5), in_fmt="bf16")
    yield numeq.ops.sum(numeq.ops.generate("lognormal", (4, n), "bf16", seed=6), in_fmt="bf16", out="fp32")


@pytest.mark.parametrize("platform", numeq.platforms())
def test_correct_output_is_bit_exact_on_every_platform(platform):
    judged = 0
    for op in _ops():
        try:
            output = op.emulate(platform)
        except ValueError:  # the platform has no plan for this op's formats
            continue
        verdict = numeq.compare(output, op, platform)
        assert verdict.passed and verdict.tier == "bit_exact", str(verdict)
        assert verdict.bit_exact == verdict.elements == output.size
        judged += 1
    assert judged > 0, f"{platform}: no op of the set applies"


@pytest.mark.parametrize("platform", ["trainium.trn1", "trainium.trn2"])
def test_trainium_variant_is_explained_by_its_emulation(platform):
    a = numeq.ops.generate("normal", (8, 300), "bf16", seed=11)
    b = numeq.ops.generate("normal", (300, 12), "bf16", seed=12)
    op = numeq.ops.matmul(a, b, in_fmt="bf16", out="fp32")
    default = op.emulate(platform)
    differing = 0
    for variant in bench.assumption_variants(platform):
        output = op.emulate(variant)
        verdict = numeq.compare(output, op, platform)
        assert verdict.passed, f"{variant}: {verdict}"
        if same_bits(output, default):
            assert verdict.tier == "bit_exact", f"{variant}: {verdict}"
            continue
        differing += 1
        assert verdict.tier == "variant", f"{variant}: {verdict}"
        # The oracle: the named variant, re-emulated by that name, equals the output bit for bit.
        assert same_bits(op.emulate(verdict.explained_by), output), f"{variant} explained by {verdict.explained_by}"
    assert differing > 0, f"{platform}: no assumption variant changes a bf16 GEMM"


# A variant's special values may differ from the default's (pairwise order adds +inf and -inf
# partial sums into NaN where sequential order stays at +inf): the ladder searches the variants
# then too, and names the one that computed the output.
def test_variant_with_other_special_values_is_explained():
    a = numeq.ops.generate("near_overflow", (4, 256), "bf16", seed=0)
    b = numeq.ops.generate("near_overflow", (256, 64), "bf16", seed=1)
    op = numeq.ops.matmul(a, b, in_fmt="bf16", out="fp32")
    output = op.emulate("trainium.trn2[pe_order=pairwise]")
    assert not same_bits(output, op.emulate("trainium.trn2"))
    verdict = numeq.compare(output, op, "trainium.trn2")
    assert verdict.tier == "variant", str(verdict)
    assert same_bits(op.emulate(verdict.explained_by), output)


@pytest.mark.long
def test_sweep_has_no_false_alarm_and_catches_every_bug():
    generators = numeq.ops.generators() if LONG else ["normal", "outlier_channels"]
    platforms = numeq.platforms()
    tallies = bench.false_alarms(10**6 if LONG else 10**4, 0, generators, platforms, lambda _: None)
    alarms = [a for t in tallies.values() for a in t.alarms]
    assert not alarms, alarms[0]
    rows, _ = bench.planted_bugs(3 if LONG else 1, 1, 0, platforms, lambda _: None)
    uncaught = [r for r in rows if r.failed < r.checks]
    assert not uncaught, [(r.bug, r.platform) for r in uncaught]
