"""The probabilistic bound follows the hardware: it holds, it is below the deterministic bound on
tensor cores, and it catches an accumulation done in bf16 where the platform accumulates wider.

Oracle: numeq's exact reference (hi + lo, tested against MPFR and fractions in
test_reference_exact.py) and the emulation (tested against GPU-measured vectors in the C++
suite). ``NUMEQ_LONG_TESTS=1`` runs the long sweep (at least 10^6 elements checked).
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

import numeq

LONG = os.environ.get("NUMEQ_LONG_TESTS") == "1"
GENERATORS = numeq.ops.generators()


def matmul_formats(platform: str, out: str = "fp32") -> list[str]:
    d = json.loads(numeq.platform_json(platform))
    return [p["in_fmt"] for p in d["plans"] if p["op"] == "matmul" and p["out"] == out]


def error(values: np.ndarray, op: numeq.ops.Op) -> np.ndarray:
    hi, lo = op.exact()
    return np.abs((values - hi) - lo)


def within(err: np.ndarray, bound: np.ndarray) -> np.ndarray:
    # The error is formed in binary64 (two subtractions): 2^-50 relative covers their rounding.
    return err <= bound * (1 + 2.0**-50)


CASES = [(p, f) for p in numeq.platforms() for f in matmul_formats(p)]


@pytest.mark.parametrize("platform,fmt", CASES)
def test_probabilistic_bound_holds(platform: str, fmt: str) -> None:
    # Every generator, K that cuts steps and chunks unevenly, with and without c.
    ks = (1, 33, 300, 1024) + ((2048,) if LONG else ())
    rounds = 3 if LONG else 1
    m, n = (32, 32) if LONG else (6, 5)
    checked = 0
    for r in range(rounds):
        for gi, gen in enumerate(GENERATORS):
            K = ks[(gi + r) % len(ks)]
            seed = 1000 * r + 10 * gi
            a = numeq.ops.generate(gen, (m, K), fmt, seed=seed)
            b = numeq.ops.generate(gen, (K, n), fmt, seed=seed + 1)
            c = numeq.ops.generate("normal", (m, n), "fp32", seed=seed + 2) if (gi + r) % 2 else None
            op = numeq.ops.matmul(a, b, c=c, in_fmt=fmt, out="fp32")
            e = op.emulation(platform, kind="probabilistic", failure_probability=1e-6)
            assert e.failure_probability <= 1e-6
            finite = np.isfinite(e.bound)
            err = error(e.values, op)
            bad = finite & ~within(err, e.bound)
            assert not bad.any(), (f"{platform} {fmt} {gen} K={K}: {int(bad.sum())} elements above the bound, "
                                   f"worst error/bound {np.max(err[finite] / e.bound[finite]):.3g}")
            checked += int(finite.sum())
    if LONG:
        print(f"{platform} {fmt}: {checked} elements checked")
    assert checked > 0


def test_long_sweep_counts() -> None:
    # Long K (8192) on every platform and format; with the sweep above, over 10^6 elements.
    if not LONG:
        pytest.skip("set NUMEQ_LONG_TESTS=1")
    total = 0
    for platform, fmt in CASES:
        for gi, gen in enumerate(GENERATORS[:4]):
            K = (128, 1024, 8192)[gi % 3]
            a = numeq.ops.generate(gen, (16, K), fmt, seed=7 + gi)
            b = numeq.ops.generate(gen, (K, 16), fmt, seed=8 + gi)
            op = numeq.ops.matmul(a, b, in_fmt=fmt, out="fp32")
            e = op.emulation(platform, kind="probabilistic", failure_probability=1e-6)
            finite = np.isfinite(e.bound)
            assert within(error(e.values, op), e.bound)[finite].all(), (platform, fmt, gen, K)
            total += int(finite.sum())
    print(f"checked {total} elements")
    assert total >= 4 * 10**4  # plus the parametrised sweep above (about 9.7 * 10^5 in the long run)


SPLIT_K = [("nvidia.h100", "e4m3fn"), ("nvidia.ada", "e5m2"), ("nvidia.a100", "bf16"), ("cuda_core.fp32", "fp32"),
           ("trainium.trn2", "bf16")]


@pytest.mark.parametrize("platform,fmt", SPLIT_K)
@pytest.mark.parametrize("split", ["split_k=3,split_mode=serial", "split_k=4,split_mode=parallel",
                                   "split_k=16,split_mode=serial"])
def test_split_k_probabilistic_bound_holds_and_is_tight(platform: str, fmt: str, split: str) -> None:
    # A split-K variant's bound walks the split (each part, the partial through its cast, the
    # combine) over the element's data: it holds, and the worst observed error comes within 10x
    # of its own element's bound (the deterministic walk alone is 10^2-10^4 times looser on fp8).
    a = numeq.ops.generate("uniform", (8, 2000), fmt, seed=5)
    b = numeq.ops.generate("normal", (2000, 8), fmt, seed=6)
    c = numeq.ops.generate("normal", (8, 8), "fp32", seed=7) if "serial" in split else None
    op = numeq.ops.matmul(a, b, c=c, in_fmt=fmt, out="fp32")
    e = op.emulation(f"{platform}[{split}]", kind="probabilistic", failure_probability=1e-6)
    err = error(e.values, op)
    assert within(err, e.bound).all(), np.max(err / e.bound)
    erred = err > 0
    assert erred.any()
    near = float(np.min(e.bound[erred] / err[erred]))
    assert near <= 10, f"{platform}[{split}] {fmt}: the closest element's bound is {near:.1f}x its error"


TENSOR_CORES = [(p, f) for p, f in CASES if p.startswith("nvidia.")]


@pytest.mark.parametrize("platform,fmt", TENSOR_CORES)
def test_probabilistic_below_deterministic_at_1024(platform: str, fmt: str) -> None:
    # "Never silently deterministic": every element's probabilistic bound is strictly smaller.
    a = numeq.ops.generate("normal", (4, 1024), fmt, seed=3)
    b = numeq.ops.generate("normal", (1024, 4), fmt, seed=4)
    op = numeq.ops.matmul(a, b, in_fmt=fmt, out="fp32")
    det = op.bound(platform)
    prob = op.bound(platform, kind="probabilistic")
    assert (prob < det).all(), np.max(prob / det)


def accumulate_in(platform: str, fmt: str, accumulate: str, rounding: str | None = None) -> dict:
    """The platform's plan with its fused steps' accumulator (the step output) in another format."""
    d = numeq.plan(platform, "matmul", fmt, "fp32").to_dict()
    fused = d["reduction"]["fused"]
    fused["output"]["format"] = accumulate
    if rounding:
        fused["output"]["rounding"] = rounding
    return d


def detection(platform: str, fmt: str, bug_plan: dict, gen: str, K: int = 1024) -> tuple[float, float]:
    a = numeq.ops.generate(gen, (32, K), fmt, seed=11)
    b = numeq.ops.generate(gen, (K, 32), fmt, seed=12)
    op = numeq.ops.matmul(a, b, in_fmt=fmt, out="fp32")
    buggy = numeq.matmul(a, b, plan=bug_plan, in_fmt=fmt)
    err = error(buggy, op)
    prob = op.bound(platform, kind="probabilistic", failure_probability=1e-6)
    det = op.bound(platform)
    # The correct emulation stays within the bound (else the detection would mean nothing).
    assert within(error(op.emulate(platform), op), prob).all()
    return float(np.mean(err > prob)), float(np.mean(err > det))


@pytest.mark.parametrize("platform", ["nvidia.h100", "nvidia.ada"])
@pytest.mark.parametrize("gen", ["normal", "uniform"])
def test_planted_bug_fp8_bf16_accumulation(platform: str, gen: str) -> None:
    # e4m3fn GEMM, K = 1024, fp32 out, accumulated in bf16 (truncating, as the platform's own
    # e8m13 accumulator): most elements leave the probabilistic bound; the deterministic bound
    # misses it entirely.
    prob, det = detection(platform, "e4m3fn", accumulate_in(platform, "e4m3fn", "bf16"), gen)
    print(f"{platform} e4m3fn {gen}: bf16 truncating accumulation detected on {prob:.1%} "
          f"(deterministic bound: {det:.1%})")
    assert prob > 0.9
    # bf16 accumulation rounded to nearest: smaller errors (zero-mean), caught less often.
    prob_rn, det_rn = detection(platform, "e4m3fn", accumulate_in(platform, "e4m3fn", "bf16", "nearest_even"), gen)
    print(f"{platform} e4m3fn {gen}: bf16 nearest accumulation detected on {prob_rn:.1%} "
          f"(deterministic bound: {det_rn:.1%})")
    assert prob_rn > 0.5


@pytest.mark.parametrize("platform", ["nvidia.h100", "nvidia.ada"])
def test_planted_bug_bf16_gemm_bf16_accumulation(platform: str) -> None:
    for rounding in (None, "nearest_even"):
        prob, det = detection(platform, "bf16", accumulate_in(platform, "bf16", "bf16", rounding), "normal")
        print(f"{platform} bf16 gemm, bf16 accumulation ({rounding or 'toward_zero'}): detected on {prob:.1%} "
              f"(deterministic bound: {det:.1%})")
        assert prob > 0.95
