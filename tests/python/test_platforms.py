"""Machine models from Python: numeq.platforms / plan / sum / dot / matmul.

Oracles: numpy's own np.sum (the numpy platform must reproduce it bit for bit), and for
cuda_core.fp32 a sequential fma chain computed here with exact fractions, rounded to float32 by
hand (round to nearest, ties to even) once per step.
"""

from __future__ import annotations

import json
from fractions import Fraction

import numpy as np
import pytest

import numeq

rng = np.random.default_rng(2026)


def _data(kind: str, n: int, dtype=np.float32) -> np.ndarray:
    if kind == "random":
        return rng.standard_normal(n).astype(dtype)
    if kind == "positive":
        return rng.random(n).astype(dtype)
    x = (rng.standard_normal(n) * 1e4).astype(dtype)  # cancellation-heavy: pairs that nearly cancel
    h = n // 2
    x[h:2 * h] = -x[:h] * dtype(1.0000001)
    return x


def _same(a, b) -> bool:
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    return a.shape == b.shape and bool(np.all((a == b) | (np.isnan(a) & np.isnan(b)))) and bool(
        np.all(np.signbit(a) == np.signbit(b)))


@pytest.mark.parametrize("kind", ["random", "positive", "cancel"])
def test_numpy_sum_every_length_up_to_5000(kind):
    lengths = range(1, 5001)
    bad = []
    for n in lengths:
        x = _data(kind, n)
        got = numeq.sum(x, platform="numpy")
        if not _same(got, np.sum(x)):
            bad.append(n)
    assert not bad, f"lengths where numeq differs from np.sum: {bad[:20]}"


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_numpy_sum_long_random_lengths(dtype):
    for n in [int(v) for v in rng.integers(5000, 10**6, size=6)] + [10**6]:
        for kind in ("random", "positive", "cancel"):
            x = _data(kind, n, dtype)
            assert _same(numeq.sum(x, platform="numpy"), np.sum(x)), (kind, n, dtype)


def test_numpy_sum_along_axes_and_zero_signs():
    x = rng.standard_normal((37, 300)).astype(np.float32)
    assert _same(numeq.sum(x, axis=1, platform="numpy"), np.sum(x, axis=1))
    # Across rows (a strided axis) numpy adds whole rows in order: a sequential plan from +0.
    rows = {"name": "numpy strided sum", "initial": 0.0, "output": {"format": "fp32"},
            "reduction": {"kind": "sequential", "arithmetic": {"accumulate": {"format": "fp32"}}}}
    assert _same(numeq.sum(x, axis=0, plan=rows), np.sum(x, axis=0))
    for n in (1, 7, 9, 200):
        z = -np.zeros(n, dtype=np.float32)
        assert _same(numeq.sum(z, platform="numpy"), np.sum(z))


def _round_f32(q: Fraction) -> Fraction:
    """q rounded to the nearest float32 (ties to even), exactly: numpy float32 of a Fraction via
    float64 could round twice, so round by hand on the 24-bit grid."""
    if q == 0:
        return Fraction(0)
    sign = -1 if q < 0 else 1
    m = abs(q)
    e = m.numerator.bit_length() - m.denominator.bit_length()
    if Fraction(2) ** e > m:
        e -= 1
    e = max(e, -126)
    ulp = Fraction(2) ** (e - 23)
    k, r = divmod(m, ulp)
    if r * 2 > ulp or (r * 2 == ulp and k % 2 == 1):
        k += 1
    return sign * k * ulp


def test_cuda_core_fp32_is_an_fma_chain():
    for n in (1, 5, 64, 257):
        a = rng.standard_normal(n).astype(np.float32)
        b = rng.standard_normal(n).astype(np.float32)
        c = np.float32(rng.standard_normal())
        acc = Fraction(0)
        for x, y in zip(a, b):
            acc = _round_f32(acc + Fraction(float(x)) * Fraction(float(y)))
        want = _round_f32(acc + Fraction(float(c)))
        got = numeq.dot(a, b, c=c, platform="cuda_core.fp32")
        assert float(got) == float(want), n


def test_matmul_batches_and_c():
    a = rng.standard_normal((2, 5, 7)).astype(np.float32)
    b = rng.standard_normal((7, 3)).astype(np.float32)
    c = rng.standard_normal(3).astype(np.float32)
    got = numeq.matmul(a, b, c=c, platform="cuda_core.fp32")
    assert got.shape == (2, 5, 3)
    for t in range(2):
        for m in range(5):
            for n in range(3):
                want = numeq.dot(a[t, m], b[:, n], c=c[n], platform="cuda_core.fp32")
                assert float(got[t, m, n]) == float(want)


def test_plans_are_data():
    p = numeq.plan("numpy", op="sum", in_fmt="fp32", out="fp32")
    assert "pairwise(leaf 128" in str(p)
    assert numeq.Plan.from_json(p.to_json()) == p
    d = p.to_dict()
    d["reduction"]["size"] = 64
    q = numeq.Plan(d)
    assert q != p
    x = rng.standard_normal(1000).astype(np.float32)
    assert _same(numeq.sum(x, plan=p), np.sum(x))
    s = numeq.plan("cuda_core.fp32", op="matmul", in_fmt="fp32", split_k=4, split_mode="parallel")
    assert "split(4 parallel" in str(s)


def test_platforms_and_evidence():
    names = numeq.platforms()
    for name in ("numpy", "cuda_core.fp32"):
        assert name in names
        text = numeq.platform_evidence(name)
        assert any(k in text for k in ("measured", "documented", "assumed"))
    profile = json.loads(numeq.platform_json("cuda_core.fp32"))
    profile["name"] = "team.kernel"
    assert numeq.load_platform(profile) == "team.kernel"
    assert "team.kernel" in numeq.platforms()


def test_errors_name_the_argument():
    x = np.ones(4, dtype=np.float32)
    with pytest.raises(ValueError, match=r"^platform: unknown platform 'nvidia\.x1'.*numpy"):
        numeq.sum(x, platform="nvidia.x1")
    with pytest.raises(ValueError, match=r"^in_fmt: platform numpy has no matmul"):
        numeq.matmul(np.ones((2, 2), np.float32), np.ones((2, 2), np.float32), platform="numpy")
    with pytest.raises(ValueError, match=r"^b: "):
        numeq.matmul(np.ones((2, 3), np.float32), np.ones((2, 2), np.float32), platform="cuda_core.fp32")
    with pytest.raises(ValueError, match=r"^platform, plan: give exactly one"):
        numeq.sum(x)
    with pytest.raises(ValueError, match=r"^profile\.plans\[0\]\.op: unknown operation"):
        numeq.load_platform({"name": "bad", "plans": [{"op": "conv", "in_fmt": "fp32", "out": "fp32", "plan": {}}]})
    with pytest.raises(ValueError, match=r"^plan\.reduction\.size: expected a positive integer"):
        numeq.Plan({"reduction": {"kind": "lanes", "size": 0, "arithmetic": {"accumulate": {"format": "fp32"}}},
                    "output": {"format": "fp32"}})
    with pytest.raises(ValueError, match=r"^split_k: "):
        numeq.plan("cuda_core.fp32", split_k=0)


def _vectors(gpu: str, fmt: str, rows: int = 300):
    from pathlib import Path
    d = Path(__file__).resolve().parents[1] / "data" / "tensor-core-vectors" / gpu / fmt

    def hex_rows(name):
        lines = (d / name).read_text().split("\n")[:rows]
        return np.array([[int(w, 16) for w in line.split()] for line in lines], dtype=np.uint32).view(np.float32)

    def bin_rows(name):
        lines = (d / name).read_text().split()[:rows]
        return np.array([int(w, 2) for w in lines], dtype=np.uint32).view(np.float32)

    return (hex_rows(f"a_{gpu}_{fmt}.txt"), hex_rows(f"b_{gpu}_{fmt}.txt"), bin_rows(f"c_{gpu}_fp32.txt"),
            {out: bin_rows(f"d_{gpu}_{out}.txt") for out in ("fp32", "fp16") if (d / f"d_{gpu}_{out}.txt").exists()})


@pytest.mark.parametrize("gpu,fmt,platform,in_fmt", [
    ("V100", "fp16", "nvidia.v100", "fp16"), ("A100", "bf16", "nvidia.a100", "bf16"),
    ("A100", "tf32", "nvidia.a100", "tf32"), ("H100", "bf16", "nvidia.h100", "bf16"),
    ("H100", "fp16", "nvidia.h200", "fp16"), ("H100", "E4M3", "nvidia.h100", "e4m3fn"),
])
def test_measured_tensor_core_rows_from_python(gpu, fmt, platform, in_fmt):
    """The GPU-measured vectors (tests/data, Khattak & Mikaitis) through the public API."""
    a, b, c, d = _vectors(gpu, fmt)
    if in_fmt.startswith("e"):
        c = np.zeros_like(c)  # the fp8 fp32-output rows were captured from a zeroed accumulator
    got = numeq.dot(a, b, c=c, platform=platform, in_fmt=in_fmt, out="fp32")
    assert _same(got, d["fp32"])
    if "fp16" in d and not in_fmt.startswith("e"):
        c16 = numeq.round(c, "fp16")
        got16 = numeq.dot(a, b, c=c16, platform=platform, in_fmt=in_fmt, out="fp16")
        assert _same(got16, d["fp16"])


def test_h100_mma_sync_fp8_to_fp16_rows():
    a, b, c, d = _vectors("H100", "E5M2")
    got = numeq.dot(a, b, c=numeq.round(c, "fp16"), platform="nvidia.h100.mma_sync", in_fmt="e5m2", out="fp16")
    assert _same(got, d["fp16"])


@pytest.mark.parametrize("fmt,in_fmt", [("fp16", "fp16"), ("bf16", "bf16"), ("tf32", "tf32"), ("E4M3", "e4m3fn"),
                                        ("E5M2", "e5m2")])
def test_b200_rows_from_python(fmt, in_fmt):
    """Every row of every B200 set (fp8: mma.sync.m16n8k32 with the row's c; an fp16 accumulator
    got c through __float2half) through nvidia.b200, against the GPU's d."""
    a, b, c, d = _vectors("B200", fmt, rows=5000)
    assert set(d) == ({"fp32", "fp16"} if fmt in ("fp16", "E4M3", "E5M2") else {"fp32"})
    for out, want in d.items():
        got = numeq.dot(a, b, c=numeq.round(c, "fp16") if out == "fp16" else c, platform="nvidia.b200",
                        in_fmt=in_fmt, out=out)
        same = (got == want) & (np.signbit(got) == np.signbit(want))
        assert got.shape == (5000,) and int(np.count_nonzero(same)) == 5000, f"{fmt} -> {out}"


@pytest.mark.parametrize("mode", ["serial", "parallel"])
def test_split_k_adds_c_in_the_arithmetic_of_the_plan_it_splits(mode):
    # A bf16 fma chain with c added last, cut in two along K. c is added in the arithmetic of the
    # reduction's outermost addition: a serial split's running partial goes on in the bf16 chain,
    # so c is added in bf16; a parallel split's partials meet in its fp32 combine, so c is added in
    # fp32. The plan and its JSON agree. Oracle: ml_dtypes' bfloat16 rounding of exact float64 sums
    # (a product of two bf16 values has 16 bits, a bf16 sum at most 8 + the exponent gap).
    import ml_dtypes

    def bf16(v):
        return float(ml_dtypes.bfloat16(v))

    cast = {"format": "bf16", "rounding": "nearest_even", "overflow": "ieee", "subnormals": "keep"}
    fp32 = dict(cast, format="fp32")
    chain = {"kind": "sequential", "start_from_zero": True, "arithmetic": {"accumulate": cast, "product": "fma"}}
    split = {"kind": "split", "size": 2, "split_mode": mode, "through": fp32, "children": [chain]}
    if mode == "parallel":
        split["children"].append({"kind": "sequential", "arithmetic": {"accumulate": fp32, "product": "fma"}})
    plan = numeq.Plan({"name": "bf16 chain, c last", "c_placement": "last", "output": fp32, "reduction": split})
    assert numeq.Plan.from_json(plan.to_json()) == plan
    differs_from_fp32_c = 0
    for trial in range(200):
        n = 2 + trial % 31
        a = np.array([bf16(v) for v in rng.standard_normal(n)])
        b = np.array([bf16(v) for v in rng.standard_normal(n)])
        c = float(np.float32(rng.standard_normal() * 8))
        parts = [range(0, (n + 1) // 2), range((n + 1) // 2, n)]  # larger part first
        acc = 0.0
        partials = []
        for part in parts:
            if mode == "parallel":
                acc = 0.0
            for k in part:
                exact = acc + a[k] * b[k]
                assert Fraction(exact) == Fraction(acc) + Fraction(a[k]) * Fraction(b[k])
                acc = bf16(exact)
            acc = float(np.float32(acc))  # through fp32: exact for a bf16 value
            partials.append(acc)
        if mode == "serial":
            want = bf16(acc + c)  # c in the chain's bf16
        else:
            want = float(np.float32(float(np.float32(partials[0] + partials[1])) + c))
        differs_from_fp32_c += want != float(np.float32(acc + c))
        for p in (plan, numeq.Plan.from_json(plan.to_json())):
            got = numeq.dot(a, b, c=c, plan=p, in_fmt="bf16")
            assert float(got) == want, (trial, mode)
    if mode == "serial":
        assert differs_from_fp32_c > 100  # the test tells a bf16 c addition from an fp32 one


def test_profile_text_edge_cases_are_clear_errors_or_load() -> None:
    # Found by an independent probe: deep JSON holding an escaped NUL raised RecursionError; a
    # leading byte-order mark made JSON text look like a file path (and slipped past the NUL check).
    deep = '{"name": "x", "a": ' + "[" * 50000 + "]" * 50000 + ', "b": "\\u0000"}'
    for call in (lambda: numeq.load_platform(text=deep), lambda: numeq.load_platform(deep)):
        with pytest.raises(ValueError, match="JSON nested too deeply"):
            call()
    with pytest.raises(ValueError, match=r"source\.name: contains a NUL"):
        numeq.load_platform('\ufeff{"name": "bad\\u0000name", "plans": []}')
    profile = json.loads(numeq.platform_json("numpy"))
    profile["name"] = "probe.bom_profile"
    assert numeq.load_platform("\ufeff" + json.dumps(profile)) == "probe.bom_profile"
