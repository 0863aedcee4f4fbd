"""The Trainium platforms from Python: the default plan against a float32 loop written from the
documented structure (tiles of 128 rows of K, each column summed in fp32 from 0, the tile added
into an fp32 PSUM in program order), the bf16-products assumption against ml_dtypes, and the
assumption syntax and its errors."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import numeq


def _bf16_values(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return rng.standard_normal(shape).astype(ml_dtypes.bfloat16).astype(np.float32)


def _documented_matmul(a: np.ndarray, b: np.ndarray, *, bf16_products: bool, tile: int = 128,
                       group: int | None = None) -> np.ndarray:
    """The oracle: numpy float32 scalar arithmetic (IEEE round to nearest even). bf16 x bf16
    products are exact in float32, so acc + a*b in float32 is the fma the plan states. ``group``:
    that many K tiles per PSUM tile, each group's sum added into an fp32 accumulator."""
    m, k = a.shape
    n = b.shape[1]
    out = np.zeros((m, n), dtype=np.float32)
    for i in range(m):
        for j in range(n):
            psum, sbuf = None, None
            for t, k0 in enumerate(range(0, k, tile)):
                acc = np.float32(0)
                for kk in range(k0, min(k, k0 + tile)):
                    p = np.float32(a[i, kk] * b[kk, j])
                    if bf16_products:
                        p = np.float32(p.astype(ml_dtypes.bfloat16))
                    acc = np.float32(acc + p)
                psum = acc if psum is None or (group and t % group == 0) else np.float32(psum + acc)
                if group and (t % group == group - 1 or k0 + tile >= k):
                    sbuf = psum if sbuf is None else np.float32(sbuf + psum)
            out[i, j] = sbuf if group else psum
    return out.astype(np.float64)


@pytest.mark.parametrize("platform", ["trainium.trn1", "trainium.trn2", "trainium.inf2"])
@pytest.mark.parametrize("k", [1, 100, 128, 129, 300])
def test_default_plan_is_the_documented_structure(platform, k):
    rng = np.random.default_rng(k)
    a, b = _bf16_values(rng, (3, k)), _bf16_values(rng, (k, 5))
    got = numeq.matmul(a, b, platform=platform, in_fmt="bf16", out="fp32")
    np.testing.assert_array_equal(got, _documented_matmul(a, b, bf16_products=False))


@pytest.mark.parametrize("platform", ["trainium.trn1", "trainium.trn2"])
@pytest.mark.parametrize("tile,group", [(64, None), (32, None), (100, None), (1, None), (128, 2), (32, 3), (64, 1)])
def test_kernel_k_tile_and_psum_group(platform, tile, group):
    # The kernel's own tiling: K cut into tiles of `tile` rows (the last takes the rest) and, with
    # a PSUM group, every `group` tiles summed in PSUM and the groups added in fp32 in SBUF.
    rng = np.random.default_rng(tile * 7 + (group or 0))
    a, b = _bf16_values(rng, (3, 300)), _bf16_values(rng, (300, 4))
    options = f"k_tile={tile}" + (f",psum_group={group}" if group else "")
    got = numeq.matmul(a, b, platform=f"{platform}[{options}]", in_fmt="bf16", out="fp32")
    np.testing.assert_array_equal(got, _documented_matmul(a, b, bf16_products=False, tile=tile, group=group))
    assert numeq.plan(f"{platform}[{options}]").name.startswith(f"{platform}[{options}] ")


def test_kernel_options_keep_through_variants():
    # A kernel with 64-row tiles whose array adds pairwise is the named variant of the kernel's
    # platform, options kept; the default tiling does not explain it.
    rng = np.random.default_rng(5)
    a, b = _bf16_values(rng, (8, 300)), _bf16_values(rng, (300, 4))
    op = numeq.ops.matmul(a, b, in_fmt="bf16", out="fp32")
    d = numeq.matmul(a, b, platform="trainium.trn2[pe_order=pairwise,k_tile=64]", in_fmt="bf16")
    v = numeq.compare(d, op, "trainium.trn2[k_tile=64]")
    assert (v.tier, v.explained_by) == ("variant", "trainium.trn2[pe_order=pairwise,k_tile=64]")
    assert numeq.compare(d, op, "trainium.trn2").tier not in ("bit_exact", "variant")


@pytest.mark.parametrize("name,match", [
    ("trainium.trn2[k_tile=129]", "k_tile=129 exceeds the 128 rows"),
    ("trainium.trn1[k_tile=0]", "k_tile=0 is not an integer in 1 .. 65536"),
    ("trainium.trn1[k_tile=-4]", "k_tile=-4 is not an integer"),
    ("trainium.trn2[fp8_double_row=on,k_tile=3]", "k_tile=3 is odd"),
    ("trainium.trn2[fp8_double_row=on,k_tile=258]", "exceeds the 256 rows"),
    ("trainium.trn2[psum_group=x]", "psum_group=x is not an integer"),
    ("trainium.trn2[tile=64]", "kernel options: k_tile, psum_group"),
])
def test_kernel_option_errors(name, match):
    with pytest.raises(ValueError, match=match):
        numeq.plan(name)


def test_double_row_k_tile_of_256_keeps_only_fp8():
    p = numeq.plan("trainium.trn2[fp8_double_row=on,k_tile=256]", in_fmt="e4m3")
    assert p.to_dict()["reduction"]["size"] == 256
    with pytest.raises(ValueError, match="in_fmt"):
        numeq.plan("trainium.trn2[fp8_double_row=on,k_tile=256]", in_fmt="bf16")


def test_bf16_products_assumption_against_ml_dtypes():
    rng = np.random.default_rng(1)
    a, b = _bf16_values(rng, (4, 260)), _bf16_values(rng, (260, 4))
    got = numeq.matmul(a, b, platform="trainium.trn1[products=bf16]", in_fmt="bf16", out="fp32")
    np.testing.assert_array_equal(got, _documented_matmul(a, b, bf16_products=True))
    # ... and the assumption matters on these inputs.
    assert not np.array_equal(got, numeq.matmul(a, b, platform="trainium.trn1", in_fmt="bf16", out="fp32"))


def test_vector_engine_sum_orders():
    x = np.random.default_rng(2).standard_normal(777).astype(np.float32)
    seq = np.float32(0)
    for v in x:
        seq = np.float32(seq + v)
    assert numeq.sum(x, platform="trainium.trn2", fmt="fp32") == float(seq)
    level = list(x)
    while len(level) > 1:
        nxt = [np.float32(level[i] + level[i + 1]) for i in range(0, len(level) - 1, 2)]
        if len(level) % 2:
            nxt.append(level[-1])
        level = nxt
    assert numeq.sum(x, platform="trainium.trn2[vector_reduce_order=pairwise]", fmt="fp32") == float(level[0])


def test_assumptions_are_listed_and_reported():
    names = [a["name"] for a in numeq.platform_assumptions("trainium.trn2")]
    for expected in ("pe_order", "products", "pe_rounding", "accumulator_bits", "fp8_double_row", "output_rounding",
                     "vector_reduce_order", "bn_aggr_merge", "scalar_activation_ulps"):
        assert expected in names
    chosen = {a["name"]: a["value"] for a in numeq.platform_assumptions("trainium.trn1[pe_order=fused]")}
    assert chosen["pe_order"] == "fused"
    for a in numeq.platform_assumptions("trainium.trn1"):
        assert a["value"] == a["alternatives"][0]
        assert a["meaning"] and a["source"]
    report = numeq.platform_evidence("trainium.trn1[accumulator_bits=25]")
    assert "assumption  accumulator_bits = 25" in report
    assert numeq.platform_assumptions("nvidia.h100") == []
    assert "trainium.trn1" in numeq.platforms() and "trainium.trn2" in numeq.platforms()


def test_assumption_errors_name_the_choices():
    a = np.ones((2, 4), dtype=np.float32)
    with pytest.raises(ValueError, match="valid: sequential, pairwise, fused"):
        numeq.matmul(a, a.T, platform="trainium.trn1[pe_order=diagonal]", in_fmt="bf16", out="fp32")
    with pytest.raises(ValueError, match="has no assumption 'colour'"):
        numeq.plan("trainium.trn2[colour=blue]")
    with pytest.raises(ValueError, match="in_fmt: platform trainium.trn1 has no matmul for e4m3fn"):
        numeq.plan("trainium.trn1", in_fmt="e4m3fn")
    with pytest.raises(ValueError, match="cannot be combined"):
        numeq.plan("trainium.trn1[pe_order=fused,products=bf16]")
