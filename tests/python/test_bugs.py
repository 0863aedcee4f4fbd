"""numeq.bugs: every planted bug, on small catalogue problems of each op it applies to, on
nvidia.h100, trainium.trn2 and cuda_core.fp32 where they have the op.

For each: the output has the op's result shape, differs from the correct emulation, and the verdict
ladder (numeq.compare) does not pass it, at a size where the bug is visible. The bug's values are
checked against oracles computed here, independently of numeq.bugs: numpy (with ml_dtypes for the
roundings) for the one-pass variance, plain softmax, flash attention without rescaling, a bf16
sequential sum and the integer GEMMs; the correct op (numeq.ops) on inputs the test edits itself for
the dropped K tile and the transposed operand; the fp32 result and ml_dtypes' cast for the missing
output cast. Then the refusals: applies() where the bug cannot be planted, by_name and output.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import numeq
from numeq.catalogue import Built, Problem, build

PLATFORMS = ("nvidia.h100", "trainium.trn2", "cuda_core.fp32")
DTYPES = {"bf16": ml_dtypes.bfloat16, "fp16": np.float16, "fp32": np.float32}

# (bug, problem, generator): sizes where the bug is visible (K = 1024 for the accumulators, as
# benchmarks/bench_verdict.py; inputs whose exp overflows fp32 for softmax without max subtraction).
CASES = [
    ("bf16_accumulator", Problem("matmul", "e4m3fn", "fp32", 1024, (8, 16)), "normal"),
    ("bf16_accumulator", Problem("matmul", "bf16", "fp32", 1024, (8, 16)), "normal"),
    ("bf16_sum_accumulator", Problem("sum", "bf16", "fp32", 1024, (8,)), "normal"),
    ("dropped_k_tile", Problem("matmul", "bf16", "fp32", 300, (8, 16)), "normal"),  # a partial last tile
    ("dropped_k_tile", Problem("scaled_fp8_matmul", "e4m3fn", "fp32", 256, (8, 16)), "normal"),
    ("dropped_k_tile", Problem("int8_matmul", "int8", "int32", 256, (8, 16)), "normal"),
    ("dropped_k_tile", Problem("sum", "fp32", "fp32", 200, (8,)), "normal"),
    ("dropped_k_tile", Problem("sum_of_squares", "bf16", "fp32", 200, (8,)), "normal"),
    ("dropped_k_tile", Problem("mean", "fp32", "fp32", 200, (8,)), "normal"),
    ("transposed_operand", Problem("matmul", "bf16", "fp32", 32, (8, 32)), "normal"),
    ("transposed_operand", Problem("scaled_fp8_matmul", "e4m3fn", "fp32", 16, (8, 16)), "normal"),
    ("transposed_operand", Problem("int8_matmul", "int8", "int32", 32, (8, 32)), "normal"),
    ("wrong_fp8_scale", Problem("scaled_fp8_matmul", "e4m3fn", "fp32", 64, (8, 16)), "normal"),
    ("wrong_fp8_scale", Problem("scaled_fp8_matmul", "e5m2", "fp32", 64, (8, 16)), "normal"),
    ("softmax_without_max", Problem("softmax", "bf16", "bf16", 64, (8,)), "near_overflow"),
    ("softmax_without_max", Problem("softmax", "fp32", "fp32", 64, (8,)), "near_overflow"),
    ("softmax_without_max", Problem("log_softmax", "fp32", "fp32", 64, (8,)), "near_overflow"),
    ("flash_without_rescale", Problem("attention", "bf16", "bf16", 128, (1, 64, 16)), "normal"),
    ("missing_output_cast", Problem("softmax", "bf16", "bf16", 64, (8,)), "normal"),
    ("missing_output_cast", Problem("layernorm", "bf16", "bf16", 64, (8,)), "normal"),
    ("missing_output_cast", Problem("gelu", "fp16", "fp16", 64, (8,)), "normal"),
    ("missing_output_cast", Problem("matmul", "bf16", "bf16", 64, (8, 16)), "normal"),
]


def _same(x: np.ndarray, y: np.ndarray) -> bool:
    return x.shape == y.shape and bool(np.array_equal(x, y, equal_nan=True))


def _planted(bug: str, problem: Problem, generator: str):
    """(platform, built, wrong output, correct emulation) for each platform the bug applies to."""
    b = numeq.bugs.by_name(bug)
    found = [p for p in PLATFORMS if b.applies(problem, p)]
    assert found, f"{bug} applies to {problem.text()} on none of {PLATFORMS}"
    built = build(problem, generator, seed=5)
    for platform in found:
        yield platform, built, b.output(built, problem, platform), built.op.emulate(platform)


def test_every_bug_has_a_case():
    # one_pass_variance is visible only where the mean is large against the spread, which no
    # catalogue generator draws: its tests below build their own inputs.
    assert {b.name for b in numeq.bugs.BUGS} == {c[0] for c in CASES} | {"one_pass_variance"}
    covered = {(c[0], c[1].op) for c in CASES} | {("one_pass_variance", "layernorm")}
    for b in numeq.bugs.BUGS:  # every op of every bug but the elementwise and norm ones for the cast
        ops = [op for op in b.ops if b.name != "missing_output_cast" or op in ("softmax", "matmul")]
        assert all((b.name, op) in covered for op in ops), b.name


@pytest.mark.parametrize("bug, problem, generator", CASES, ids=[f"{c[0]}-{c[1].op}-{c[1].in_fmt}" for c in CASES])
def test_bug_is_wrong_and_caught(bug, problem, generator):
    for platform, built, wrong, correct in _planted(bug, problem, generator):
        assert wrong.shape == correct.shape == built.op.reference().shape
        assert wrong.dtype == np.float64
        assert not _same(wrong, correct), f"{bug} on {platform}: the bug's output is the correct one"
        # The full ladder (variants searched) on one platform of attention: its variant search is slow.
        full = problem.op != "attention" or platform == "cuda_core.fp32"
        verdict = numeq.compare(wrong, built.op, platform, variants=full)
        assert not verdict.passed, f"{bug} on {platform} not caught:\n{verdict}"


def _ml_round(x: np.ndarray, fmt: str) -> np.ndarray:
    """x (float64) correctly rounded into fmt by ml_dtypes / numpy casts, as float64."""
    with np.errstate(over="ignore", invalid="ignore"):
        return np.asarray(x, dtype=np.float64).astype(DTYPES[fmt]).astype(np.float64)


# ---------------------------------------------------------------------------------------------
# Oracles for the bugs' values
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("problem", [c[1] for c in CASES if c[0] == "dropped_k_tile"], ids=lambda p: p.op)
def test_dropped_k_tile_is_the_op_on_zeroed_inputs(problem):
    start = 128 * ((problem.k - 1) // 128)  # 300 -> 256: the partial tail; 256 -> 128
    for platform, built, wrong, _ in _planted("dropped_k_tile", problem, "normal"):
        x = {n: v.copy() for n, v in built.inputs.items()}
        if problem.op in ("sum", "sum_of_squares", "mean"):  # the mean still divides by all K
            x["x"][:, start:] = 0
            expected = getattr(numeq.ops, problem.op)(x["x"], in_fmt=problem.in_fmt, out=problem.out)
        elif problem.op == "int8_matmul":
            expected = None  # exact: numpy's integer GEMM over the first tiles
            assert np.array_equal(wrong, x["a"][:, :start].astype(np.int64) @ x["b"][:start].astype(np.int64))
        else:
            x["a"][:, start:] = 0
            x["b"][start:] = 0
            if problem.op == "matmul":
                expected = numeq.ops.matmul(x["a"], x["b"], in_fmt=problem.in_fmt, out=problem.out)
            else:
                expected = numeq.ops.scaled_fp8_matmul(x["a"], x["b"], built.params["scale_a"],
                                                       built.params["scale_b"], in_fmt=problem.in_fmt)
        if expected is not None:
            assert _same(wrong, expected.emulate(platform)), platform


@pytest.mark.parametrize("problem", [c[1] for c in CASES if c[0] == "transposed_operand"], ids=lambda p: p.op)
def test_transposed_operand_is_a_times_b_transposed(problem):
    for platform, built, wrong, _ in _planted("transposed_operand", problem, "normal"):
        a, b = built.inputs["a"], built.inputs["b"]
        if problem.op == "int8_matmul":
            assert np.array_equal(wrong, a.astype(np.int64) @ b.T.astype(np.int64))
        elif problem.op == "matmul":
            assert _same(wrong, numeq.ops.matmul(a, b.T.copy(), in_fmt=problem.in_fmt).emulate(platform))
        else:
            p = built.params
            op = numeq.ops.scaled_fp8_matmul(a, b.T.copy(), p["scale_a"], p["scale_b"], in_fmt=problem.in_fmt)
            assert _same(wrong, op.emulate(platform))


def test_wrong_fp8_scale_doubles_the_result():
    # Per-tensor scales are powers of two applied to the fp32 result: doubling scale_a doubles it.
    problem = Problem("scaled_fp8_matmul", "e4m3fn", "fp32", 64, (8, 16))
    for platform, _, wrong, correct in _planted("wrong_fp8_scale", problem, "normal"):
        assert np.array_equal(wrong, 2 * correct), platform


@pytest.mark.parametrize("fmt", ["bf16", "fp32"])
@pytest.mark.parametrize("generator", ["near_overflow", "normal"])
def test_softmax_without_max_is_numpy_plain_softmax(fmt, generator):
    problem = Problem("softmax", fmt, fmt, 64, (8,))
    for platform, built, wrong, _ in _planted("softmax_without_max", problem, generator):
        x = built.inputs["x"].astype(np.float32)
        with np.errstate(over="ignore", invalid="ignore"):
            e = np.exp(x)
            expected = _ml_round(e / e.sum(axis=-1, keepdims=True, dtype=np.float32), fmt)
        # The same rows are Inf / Inf; elsewhere the platform's exp and its order of the 64-term sum
        # may differ from numpy's by tens of fp32 ulps (2^-16 relative covers 64 terms' 2^-24 each
        # with room), then one rounding into fmt: one ulp of bf16 apart, or 2^-16 in fp32.
        assert np.array_equal(np.isnan(wrong), np.isnan(expected)), platform
        ok = ~np.isnan(expected)
        ulp = 2.0 ** (-7 if fmt == "bf16" else -16)
        assert np.all(np.abs(wrong[ok] - expected[ok]) <= ulp * np.abs(expected[ok]) + 1e-38), platform
        if generator == "near_overflow":
            assert np.isnan(wrong).any()


def test_one_pass_variance_reproduced_exactly():
    # Data where every fp32 sum of the one-pass formula is exact in any order (integers near 1000,
    # K = 16: the sum of squares stays below 2^24), so the oracle computes each fp32 operation as a
    # float64 operation cast to float32 (exact for +, -, *, /, sqrt of fp32 values: 53 >= 2 * 24 + 2).
    rng = np.random.default_rng(0)
    x = 1000.0 + rng.integers(-8, 9, size=(6, 16)).astype(np.float64)
    problem = Problem("layernorm", "fp32", "fp32", 16, (6,))
    built = Built(numeq.ops.layernorm(x, in_fmt="fp32", out="fp32"), {"x": x}, {"eps": 1e-5, "variant": "two_pass"})
    f32 = lambda v: np.asarray(v, dtype=np.float64).astype(np.float32).astype(np.float64)  # noqa: E731
    mean = x.sum(axis=-1, keepdims=True) / 16
    mean_sq = (x * x).sum(axis=-1, keepdims=True) / 16
    var = f32(mean_sq - f32(mean * mean))
    expected = f32((x - mean) / f32(np.sqrt(f32(var + f32(1e-5)))))
    for platform in PLATFORMS:
        wrong = numeq.bugs.by_name("one_pass_variance").output(built, problem, platform)
        assert np.array_equal(wrong, expected), platform
        assert not np.array_equal(wrong, built.op.emulate(platform))


@pytest.mark.parametrize("platform", PLATFORMS)
def test_one_pass_variance_caught_on_a_large_mean(platform):
    # Mean 1000, spread 1 (benchmarks/bench_verdict.py): E[x^2] - E[x]^2 cancels in fp32.
    x = numeq.round(numeq.ops.generate("normal", (8, 512), "fp32", seed=1) + 1000.0, "fp32")
    problem = Problem("layernorm", "fp32", "fp32", 512, (8,))
    built = Built(numeq.ops.layernorm(x, in_fmt="fp32", out="fp32"), {"x": x}, {"eps": 1e-5, "variant": "two_pass"})
    wrong = numeq.bugs.by_name("one_pass_variance").output(built, problem, platform)
    assert wrong.shape == x.shape and not np.array_equal(wrong, built.op.emulate(platform))
    assert not numeq.compare(wrong, built.op, platform).passed


def test_flash_without_rescale_against_float64():
    # The bug's denominator: each key block's exps taken against the running maximum at that block,
    # never rescaled; the numerator is the correct one. Computed in float64 here; the bug's output
    # (fp32, P rounded to bf16, then bf16) lies within a few bf16 ulps of it, and far from the
    # correct attention.
    problem = Problem("attention", "bf16", "bf16", 128, (1, 64, 16))
    for platform, built, wrong, correct in _planted("flash_without_rescale", problem, "normal"):
        q, k, v = (built.inputs[n][0] for n in ("q", "k", "v"))
        s = q @ k.T / np.sqrt(q.shape[-1])
        m_final = s.max(axis=-1, keepdims=True)
        numerator = np.exp(s - m_final) @ v  # the output accumulator is rescaled: correct
        bug_total = np.zeros((s.shape[0], 1))
        m = np.full((s.shape[0], 1), -np.inf)
        for j in range(0, s.shape[1], 64):
            m = np.maximum(m, s[:, j:j + 64].max(axis=-1, keepdims=True))
            bug_total += np.exp(s[:, j:j + 64] - m).sum(axis=-1, keepdims=True)  # never rescaled
        expected = numerator / bug_total
        scale = np.abs(expected).max()
        assert np.max(np.abs(wrong[0] - expected)) <= 2.0**-6 * scale, platform
        assert np.max(np.abs(correct[0] - expected)) > 8 * np.max(np.abs(wrong[0] - expected)), platform


@pytest.mark.parametrize("problem", [c[1] for c in CASES if c[0] == "missing_output_cast"], ids=lambda p: p.op)
def test_missing_output_cast_is_the_fp32_result(problem):
    for platform, built, wrong, correct in _planted("missing_output_cast", problem, "normal"):
        # values of fp32 that the output format does not hold, whose cast (ml_dtypes') is the correct output
        assert np.array_equal(_ml_round(wrong, "fp32"), wrong), platform
        assert not np.array_equal(_ml_round(wrong, problem.out), wrong), platform
        assert np.array_equal(_ml_round(wrong, problem.out), correct), platform
        verdict = numeq.compare(wrong, built.op, platform)
        assert verdict.not_in_format > 0, platform


def test_bf16_sum_accumulator_is_a_bf16_sequential_sum():
    # trainium.trn2 sums sequentially: the bug rounds each partial sum into bf16 (ml_dtypes), the
    # two bf16 values' sum exact in float64.
    problem = Problem("sum", "bf16", "fp32", 1024, (8,))
    built = build(problem, "normal", seed=5)
    wrong = numeq.bugs.by_name("bf16_sum_accumulator").output(built, problem, "trainium.trn2")
    acc = np.zeros(8)
    for i in range(problem.k):
        acc = _ml_round(acc + built.inputs["x"][:, i], "bf16")
    assert np.array_equal(wrong, acc)


@pytest.mark.parametrize("platform", ["nvidia.h100", "trainium.trn2"])
def test_bf16_accumulator_output_is_bf16_values(platform):
    problem = Problem("matmul", "bf16", "fp32", 1024, (8, 16))
    built = build(problem, "normal", seed=5)
    wrong = numeq.bugs.by_name("bf16_accumulator").output(built, problem, platform)
    # Every partial sum is kept in bf16, the last one too: the results are bf16 values (ml_dtypes),
    # unlike the correct fp32 GEMM's.
    assert np.array_equal(_ml_round(wrong, "bf16"), wrong)
    assert not np.array_equal(_ml_round(built.op.emulate(platform), "bf16"), built.op.emulate(platform))


def test_bf16_accumulator_plan_edit():
    plan = numeq.plan("nvidia.h100", op="matmul", in_fmt="e4m3fn", out="fp32").to_dict()
    bug = numeq.bugs.bf16_accumulator_plan(plan)
    assert bug["output"] == plan["output"]
    fused = bug["reduction"]["fused"]
    assert fused["c_format"] == "bf16" and fused["output"]["format"] == "bf16"
    with pytest.raises(TypeError, match="plan"):
        numeq.bugs.bf16_accumulator_plan("nvidia.h100")


# ---------------------------------------------------------------------------------------------
# Where a bug does not apply, and refusals
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("bug, problem, platform", [
    ("dropped_k_tile", Problem("matmul", "bf16", "fp32", 128), "nvidia.h100"),      # one tile of 128
    ("dropped_k_tile", Problem("sum", "fp32", "fp32", 100), "trainium.trn2"),
    ("missing_output_cast", Problem("softmax", "fp32", "fp32", 256), "nvidia.h100"),  # nothing to cast into
    ("missing_output_cast", Problem("matmul", "bf16", "fp32", 256), "trainium.trn2"),
    ("missing_output_cast", Problem("int8_matmul", "int8", "int32", 256), "nvidia.h100"),
    ("transposed_operand", Problem("matmul", "bf16", "fp32", 256), "nvidia.h100"),    # K != N
    ("flash_without_rescale", Problem("attention", "bf16", "bf16", 64), "nvidia.h100"),  # one key block
    ("bf16_accumulator", Problem("matmul", "e4m3fn", "fp32", 256), "trainium.trn2"),  # no fp8 GEMM there
    ("bf16_accumulator", Problem("matmul", "bf16", "fp32", 256), "numpy"),            # numpy has no GEMM model
    ("bf16_sum_accumulator", Problem("sum", "fp32", "fp32", 256), "numpy"),
    ("wrong_fp8_scale", Problem("matmul", "e4m3fn", "fp32", 256), "nvidia.h100"),     # not a scaled GEMM
    ("softmax_without_max", Problem("layernorm", "bf16", "bf16", 256), "nvidia.h100"),
    ("one_pass_variance", Problem("rmsnorm", "bf16", "bf16", 256), "nvidia.h100"),
])
def test_does_not_apply(bug, problem, platform):
    b = numeq.bugs.by_name(bug)
    assert not b.applies(problem, platform)
    assert b not in numeq.bugs.for_problem(problem, platform)
    reason = b.why_not(problem, platform)
    assert isinstance(reason, str) and reason
    with pytest.raises(ValueError, match=r"^problem: .*the bugs that apply"):
        b.output(build(problem, "normal", 0), problem, platform)


def test_bf16_accumulator_needs_an_accumulator_wider_than_bf16():
    # v100's fp16 -> fp16 tensor-core GEMM accumulates in fp16: there is no fp32 accumulator to narrow.
    plan = numeq.plan("nvidia.v100", op="matmul", in_fmt="fp16", out="fp16").to_dict()
    assert numeq.bugs.bf16_accumulator_plan(plan) == plan
    assert not numeq.bugs.by_name("bf16_accumulator").applies(Problem("matmul", "fp16", "fp16", 256), "nvidia.v100")


def test_by_name_refuses_unknown_names():
    with pytest.raises(ValueError, match=r"^name: unknown value 'dropped_tile'; valid: .*dropped_k_tile"):
        numeq.bugs.by_name("dropped_tile")
    with pytest.raises(TypeError, match="name"):
        numeq.bugs.by_name(3)
    with pytest.raises(ValueError, match="name"):
        numeq.bugs.Bug("made_up", "a bug numeq does not know")


def test_bad_arguments_are_refused():
    b = numeq.bugs.by_name("dropped_k_tile")
    problem = Problem("matmul", "bf16", "fp32", 256, (4, 8))
    built = build(problem, "normal", 0)
    with pytest.raises(ValueError, match=r"^platform: unknown platform 'nvidia.h1000'; valid: .*nvidia.h100"):
        b.applies(problem, "nvidia.h1000")
    with pytest.raises(TypeError, match="^problem"):
        b.applies("matmul", "nvidia.h100")
    with pytest.raises(TypeError, match="^built"):
        b.output(built.inputs, problem, "nvidia.h100")
    other = build(Problem("matmul", "bf16", "fp32", 512, (4, 8)), "normal", 0)
    with pytest.raises(ValueError, match="^built: K = 512"):
        b.output(other, problem, "nvidia.h100")
    with pytest.raises(ValueError, match="^built: inputs"):
        b.output(build(Problem("sum", "bf16", "fp32", 256), "normal", 0), problem, "nvidia.h100")


def test_for_problem_lists_the_bugs_that_apply():
    p = Problem("softmax", "bf16", "bf16", 256)
    assert [b.name for b in numeq.bugs.for_problem(p, "nvidia.h100")] == ["softmax_without_max", "missing_output_cast"]
    assert numeq.bugs.for_problem(Problem("rmsnorm", "fp32", "fp32", 256), "nvidia.h100") == []
