"""Fitting models to hardware evidence: a generic tensor core whose steps per fusion, fraction
bits and structure are unknown is fitted to the GPU-measured vectors (tests/data/tensor-core-vectors, Khattak &
Mikaitis); Trainium probes tell every candidate apart and fitting recovers the alternative that
produced synthetic outputs; profiles written by fit load back; bad input names the file."""

from __future__ import annotations

import ast
import json

import numpy as np
import pytest

import numeq
from test_platforms import _vectors

SETS = [("V100", "fp16", "nvidia.v100", "fp16"), ("A100", "fp16", "nvidia.a100", "fp16"),
        ("A100", "bf16", "nvidia.a100", "bf16"), ("A100", "tf32", "nvidia.a100", "tf32"),
        ("H100", "fp16", "nvidia.h100", "fp16"), ("H100", "bf16", "nvidia.h100", "bf16"),
        ("H100", "tf32", "nvidia.h100", "tf32"), ("H100", "E4M3", "nvidia.h100", "e4m3fn"),
        ("H100", "E5M2", "nvidia.h100", "e5m2"), ("B200", "fp16", "nvidia.b200", "fp16"),
        ("B200", "bf16", "nvidia.b200", "bf16"), ("B200", "tf32", "nvidia.b200", "tf32")]


def _params(label: str) -> dict[str, str]:
    return dict(part.split("=", 1) for part in label.split(","))


@pytest.mark.parametrize("gpu,fmt,platform,in_fmt", SETS)
def test_generic_tensor_core_fit_recovers_each_gpu(gpu, fmt, platform, in_fmt):
    a, b, c, d = _vectors(gpu, fmt, rows=5000)
    if in_fmt.startswith("e"):
        c = np.zeros_like(c)  # the fp8 fp32-output rows were captured from a zeroed accumulator
    k = a.shape[1]
    cands = numeq.tensor_core_candidates(in_fmt, "fp32", n=(2, 4, 8, 16, 32), fraction_bits=range(12, 28),
                                         structure="chain")
    result = numeq.fit_platform(cands, (a, b, c), d["fp32"], in_fmt=in_fmt)
    assert result.total == 5000 and result.explaining, result.summary()
    step = numeq.plan(platform, "dot", in_fmt, "fp32").to_dict()["reduction"]["fused"]
    profile = (f"n={step['n']},F={step['fraction_bits']},step={step['output']['format']} "
               f"{step['output']['rounding']},structure=chain")
    # The built-in profile (from the published models) is among the fitted models ...
    assert profile in result.explaining, result.summary()
    # ... and the data settle F and the step's output rounding uniquely; n only from below, since
    # each row holds one instruction of K products: every n < K is rejected.
    found = [_params(label) for label in result.explaining]
    assert {p["F"] for p in found} == {str(step["fraction_bits"])}
    assert {p["step"] for p in found} == {f"{step['output']['format']} {step['output']['rounding']}"}
    assert min(int(p["n"]) for p in found) == k
    assert all(result.matches[label] < 5000 for label in cands if int(_params(label)["n"]) < k)


def test_fit_reports_rows_no_candidate_explains():
    # fp8 inputs with fp16 output (mma.sync): no model of one step per instruction explains them
    # (FACTS.md s2), whether c enters the step or is added after it; two interleaved halves do.
    a, b, c, d = _vectors("H100", "E4M3", rows=2000)
    inputs = (a, b, numeq.round(c, "fp16"))
    result = numeq.fit_platform(numeq.tensor_core_candidates("e4m3fn", "fp16", n=(16, 32), fraction_bits=range(20, 27),
                                                    structure=("chain", "c_last")),
                       inputs, d["fp16"], in_fmt="e4m3fn", out="fp16")
    assert result.explaining == []
    assert 0 < result.unexplained.size < 2000
    assert "explained by no candidate" in result.summary()
    halves = numeq.fit_platform(numeq.tensor_core_candidates("e4m3fn", "fp16", n=(16, 32), fraction_bits=(25,),
                                                    structure="halves"),
                       inputs, d["fp16"], in_fmt="e4m3fn", out="fp16")
    assert halves.explaining == ["n=16,F=25,step=fp16 nearest_even,structure=halves"], halves.summary()


def _b200_fp8_fit(fmt: str, in_fmt: str, out: str, rows: int):
    """The default candidate grid fitted to a B200 fp8 set (mma.sync.m16n8k32 with the row's c;
    an fp16 accumulator got c through __float2half), and the label of nvidia.b200's own plan
    in that grid (the grid's plan must be the built-in one, bit for bit of its JSON)."""
    a, b, c, d = _vectors("B200", fmt, rows=rows)
    cands = numeq.tensor_core_candidates(in_fmt, out)
    result = numeq.fit_platform(cands, (a, b, numeq.round(c, "fp16") if out == "fp16" else c), d[out], in_fmt=in_fmt, out=out)
    builtin = numeq.plan("nvidia.b200", "dot", in_fmt, out).to_dict()
    step = builtin["reduction"]["children"][0]["children"][0]["fused"]
    label = f"n={step['n']},F={step['fraction_bits']},step={step['output']['format']} {step['output']['rounding']}," \
            "structure=halves"
    mine = cands[label].to_dict()
    assert {k: v for k, v in mine.items() if k != "name"} == {k: v for k, v in builtin.items() if k != "name"}
    return result, label


@pytest.mark.parametrize("fmt,in_fmt", [("E4M3", "e4m3fn"), ("E5M2", "e5m2")])
@pytest.mark.parametrize("out", ["fp32", "fp16"])
def test_default_grid_recovers_b200_fp8(fmt, in_fmt, out):
    # The B200 fp8 rows (Khattak & Mikaitis data): the default grid finds nvidia.b200's model.
    result, builtin = _b200_fp8_fit(fmt, in_fmt, out, rows=500)
    assert builtin in result.explaining, result.summary()
    found = [_params(label) for label in result.explaining]
    if out == "fp16":
        # The fp16 accumulator shows the grouping: two interleaved steps of 16, rounded to nearest.
        assert {(p["n"], p["step"], p["structure"]) for p in found} == {("16", "fp16 nearest_even", "halves")}
    else:
        # c is added after the products; the only other survivor is one step of all 32 products
        # with c inside and a wide F rounded once to nearest (the rows' products' sums are fp32
        # values: the full sets below reject it).
        assert all(p["structure"] != "chain" or (p["n"] == "32" and p["step"] == "fp32 nearest_even") for p in found)


@pytest.mark.long
def test_default_grid_settles_b200_fp8_on_every_row():
    # All 5000 rows of the four sets. e5m2 row 3935 (a products' sum of 25 bits) settles that the
    # products are summed toward zero before c is added to nearest; the fp16 sets settle the two
    # interleaved halves of 16; F is bounded from below only.
    explaining = {}
    for fmt, in_fmt in (("E4M3", "e4m3fn"), ("E5M2", "e5m2")):
        for out in ("fp32", "fp16"):
            result, builtin = _b200_fp8_fit(fmt, in_fmt, out, rows=5000)
            assert builtin in result.explaining, result.summary()
            explaining[fmt, out] = [_params(label) for label in result.explaining]
            # The grid before B200 (c in the first step, F <= 27) explains none of the four sets.
            assert not [p for p in explaining[fmt, out] if p["structure"] == "chain" and int(p["F"]) <= 27]
    assert all(p["structure"] != "chain" and p["step"] == "fp32 toward_zero" for p in explaining["E5M2", "fp32"])
    common = set.intersection(*({(p["n"], int(p["F"]), p["structure"]) for p in found} for found in explaining.values()))
    assert common == {("16", F, "halves") for F in range(23, 33)}


@pytest.fixture(scope="module")
def trn1_probes():
    return numeq.probes("trainium.trn1", in_fmt="bf16", m=32, n=32, k=512)


def test_trainium_probes_tell_every_alternative_apart(trn1_probes):
    p = trn1_probes
    names = {name for label in p.candidates for name in _params(label)}
    assert names == {"pe_order", "products", "pe_rounding", "accumulator_bits", "psum_rounding"}
    assert len(p.candidates) == 120  # 3 x 2 x 2 x 6 x 2, less the 24 fused + bf16-product pairs
    assert p.indistinct == []
    assert p.a.shape == (32, 512) and p.b.shape == (512, 32)


@pytest.mark.parametrize("which", [0, 37, 119])
def test_trainium_fit_recovers_the_alternative_that_produced_the_data(trn1_probes, which):
    p = trn1_probes
    label = list(p.candidates)[which]
    result = numeq.fit_platform(p.candidates, (p.a, p.b), p.expected[label], op="matmul", in_fmt="bf16")
    assert result.explaining == [label]
    assert result.unexplained.size == 0


def test_fp8_double_row_is_settled_by_probes():
    cands = numeq.assumption_candidates("trainium.trn2", in_fmt="e4m3", names=["fp8_double_row", "psum_rounding"])
    assert len(cands) == 4
    p = numeq.probes("trainium.trn2", in_fmt="e4m3", m=16, n=16, k=512, candidates=cands)
    assert p.indistinct == []
    label = "fp8_double_row=on,psum_rounding=nearest_even"
    assert numeq.fit_platform(cands, (p.a, p.b), p.expected[label], op="matmul", in_fmt="e4m3").explaining == [label]


def test_probe_files_and_kernel(tmp_path):
    cands = numeq.assumption_candidates("trainium.trn1", in_fmt="bf16", names=["pe_order"])
    p = numeq.probes("trainium.trn1", in_fmt="bf16", m=8, n=8, k=256, candidates=cands)
    d = p.write(tmp_path)
    a_t, b = np.load(d / "a_t.npy"), np.load(d / "b.npy")
    assert a_t.shape == (256, 8) and b.shape == (256, 8) and a_t.dtype == np.float32
    np.testing.assert_array_equal(a_t.T.astype(np.float64), p.a)
    tree = ast.parse((d / "probe_kernel.py").read_text())  # valid Python
    source = (d / "probe_kernel.py").read_text()
    assert "nisa.nc_matmul" in source and "nl.psum" in source and "sequential_range" in source
    assert tree.body
    names = json.loads((d / "candidates.json").read_text())
    assert {v["label"] for v in names.values()} == set(cands)
    # The measured file goes straight back into fit (here: a candidate's own output).
    measured = np.load(d / "expected" / "1.npy")
    np.save(d / "d.npy", measured)
    result = numeq.fit_platform(cands, (d / "a.npy", d / "b.npy"), d / "d.npy", op="matmul", in_fmt="bf16")
    assert result.explaining == [names["1"]["label"]]


def test_fit_writes_a_loadable_profile(tmp_path, trn1_probes):
    p = trn1_probes
    label = list(p.candidates)[5]
    out = tmp_path / "fitted.json"
    numeq.fit_platform(p.candidates, (p.a, p.b), p.expected[label], op="matmul", in_fmt="bf16", write=out)
    name = numeq.load_platform(out)
    assert name == "trainium.trn1.fitted"
    fitted = {a["name"]: a["value"] for a in numeq.platform_assumptions(name)}
    assert {k: fitted[k] for k in _params(label)} == _params(label)
    got = numeq.matmul(p.a, p.b, platform=name, in_fmt="bf16", out="fp32")
    np.testing.assert_array_equal(got, p.expected[label])
    assert "numeq.fit_platform: reproduces 1024/1024" in numeq.platform_evidence(name)
    # A fitted plan (not a platform) becomes a profile of its own.
    a, b, c, d = _vectors("H100", "bf16", rows=500)
    out2 = tmp_path / "tc.json"
    numeq.fit_platform(numeq.tensor_core_candidates("bf16", n=(16,), fraction_bits=(24, 25)), (a, b, c), d["fp32"],
              in_fmt="bf16", write=out2)
    fitted = numeq.load_platform(out2)
    got = numeq.dot(a, b, c=c, platform=fitted, in_fmt="bf16", out="fp32")
    np.testing.assert_array_equal(got, d["fp32"].astype(np.float64))


def test_bad_input_names_the_file(tmp_path):
    cands = {"seq": "trainium.trn1"}
    a = np.ones((4, 128), dtype=np.float32)
    b = np.ones((128, 3), dtype=np.float32)
    np.save(tmp_path / "d.npy", np.zeros((4, 4), dtype=np.float32))
    with pytest.raises(ValueError, match=r"d\.npy holds shape \(4, 4\).*shape \(4, 3\)"):
        numeq.fit_platform(cands, (a, b), tmp_path / "d.npy", op="matmul", in_fmt="bf16")
    (tmp_path / "bad.npy").write_text("not an array")
    with pytest.raises(ValueError, match=r"outputs: cannot read .*bad\.npy"):
        numeq.fit_platform(cands, (a, b), tmp_path / "bad.npy", op="matmul", in_fmt="bf16")
    with pytest.raises(ValueError, match="candidates: empty"):
        numeq.fit_platform({}, (a, b), np.zeros((4, 3)), op="matmul", in_fmt="bf16")
    with pytest.raises(ValueError, match="op: unknown operation 'conv'"):
        numeq.fit_platform(cands, (a, b), np.zeros((4, 3)), op="conv")
    with pytest.raises(ValueError, match="names: trainium.trn1 has no assumption 'colour'"):
        numeq.assumption_candidates("trainium.trn1", names=["colour"])
    with pytest.raises(ValueError, match="has no assumptions"):
        numeq.assumption_candidates("nvidia.h100")
    with pytest.raises(ValueError, match="k: the probe kernel contracts whole 128-row tiles"):
        numeq.probes("trainium.trn1", k=100, candidates={"x": "trainium.trn1"})
    with pytest.raises(ValueError, match="at most 128 x 512"):
        numeq.probes("trainium.trn1", m=200, candidates={"x": "trainium.trn1"})
    with pytest.raises(ValueError, match=r"^structure: unknown 'pairs'; valid: chain, c_last, halves$"):
        numeq.tensor_core_candidates("e4m3fn", structure=("chain", "pairs"))
    with pytest.raises(ValueError, match=r"^n: must be an integer in \[1, "):
        numeq.tensor_core_candidates("e4m3fn", n=(0,))


def test_sum_probes_settle_the_vector_engine_order(tmp_path):
    cands = numeq.assumption_candidates("trainium.trn2", op="sum", in_fmt="fp32", out="fp32")
    assert set(cands) == {"vector_reduce_order=sequential", "vector_reduce_order=pairwise"}
    p = numeq.probes("trainium.trn2", op="sum", in_fmt="fp32", m=16, k=1000)
    assert p.b is None and p.indistinct == []
    d = p.write(tmp_path)
    assert "nisa.tensor_reduce" in (d / "probe_kernel.py").read_text()
    ast.parse((d / "probe_kernel.py").read_text())
    x = np.load(d / "x.npy")
    # What the device would give if it added in order: a float32 loop, not numeq.
    seq = np.zeros(x.shape[0], dtype=np.float32)
    for j in range(x.shape[1]):
        seq = (seq + x[:, j]).astype(np.float32)
    np.save(d / "d.npy", seq)
    result = numeq.fit_platform(cands, (d / "x.npy",), d / "d.npy", op="sum", in_fmt="fp32")
    assert result.explaining == ["vector_reduce_order=sequential"]
    with pytest.raises(ValueError, match=r"inputs: expected \(x,\)"):
        numeq.fit_platform(cands, (x, x), seq, op="sum", in_fmt="fp32")


def test_the_old_names_warn_and_give_the_same_results():
    """numeq.fit (now fit_platform) and numeq.tolerances.fit (now fit_tolerance) stay one release
    as aliases that warn (issue 33: one meaning per name)."""
    x = numeq.round(np.random.default_rng(3).standard_normal((4, 64)), "fp32")
    measured = np.sum(x.astype(np.float32), axis=-1, dtype=np.float32).astype(np.float64)
    new = numeq.fit_platform({"numpy": "numpy"}, (x,), measured, op="sum", in_fmt="fp32")
    with pytest.warns(DeprecationWarning, match="fit_platform"):
        old = numeq.fit({"numpy": "numpy"}, (x,), measured, op="sum", in_fmt="fp32")
    assert old.explaining == new.explaining and old.matches == new.matches
    b = numeq.catalogue.build(numeq.catalogue.Problem("sum", "bf16", "fp32", k=64, shape=(4,)), "normal", 0)
    reqs = [numeq.tolerances.requirement(b, "numpy")]
    with pytest.warns(DeprecationWarning, match="fit_tolerance"):
        assert numeq.tolerances.fit(reqs, "fp32") == numeq.tolerances.fit_tolerance(reqs, "fp32")
