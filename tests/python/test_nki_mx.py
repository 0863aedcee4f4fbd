"""Trainium3's MX: the packed x4 dtypes, quantize_mx and nc_matmul_mx.

Oracles, each written here from the documentation it quotes, none calling numeq's quantizer or plan
evaluator: the packing of AWS's MX tutorial (fp8 values as the bytes of a little-endian uint32, two
fp4 values per byte, the first in the low nibble) checked exhaustively with ml_dtypes; quantize_mx's
documented scale X = 2^(floor(log2 amax) - (E_max - 1)) worked out with Fractions, each value x / X
rounded by ml_dtypes (round to nearest even, exact: X is a power of two); the OCP alternative as
AWS's own golden states it (the OCP scale, np.clip to the format's max, then the cast); the scale
placement (group j of quadrant q at partition 32q + j); nc_matmul_mx's documented PE (four products
per processing element, "four pairs of MX multiplications and also accumulation of the four
multiplication results") under the platform's default assumptions, summed exactly with Fractions and
rounded once to fp32, the column then adding in fp32 from partition 0 (numpy float32, round to
nearest even), PSUM adding tiles in fp32.
"""

from __future__ import annotations

from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

import numeq
from numeq import nki
from nki_support import source_line
from numeq.nki.machine import packed

nl, nisa = nki.language, nki.isa
rng = np.random.default_rng(44)
ELEMENTS = {"float8_e5m2_x4": ml_dtypes.float8_e5m2, "float8_e4m3fn_x4": ml_dtypes.float8_e4m3fn,
            "float4_e2m1fn_x4": ml_dtypes.float4_e2m1fn}
E_MAX = {"float8_e5m2_x4": 15, "float8_e4m3fn_x4": 8}  # nki.isa.quantize_mx: "8 for float8_e4m3fn and 15 for float8_e5m2"


# --- the packed dtypes ---------------------------------------------------------------------------

@pytest.mark.parametrize("name", list(ELEMENTS))
def test_every_value_packs_where_aws_tutorial_puts_it(name):
    d = getattr(nl, name)
    fp4 = name.startswith("float4")
    codes = np.arange(16 if fp4 else 256, dtype=np.uint8)
    for j in range(4):  # every code at every position j of a word, the other three varied
        bits = rng.integers(0, 16 if fp4 else 256, (len(codes), 4), dtype=np.uint8)
        bits[:, j] = codes
        words = packed.pack(bits, d)
        assert words.dtype == (np.uint16 if fp4 else np.uint32)
        if fp4:  # two values per byte, the first in the low nibble; bytes little-endian
            want = sum(bits[:, i].astype(np.uint32) << (4 * i) for i in range(4)).astype(np.uint16)
        else:
            want = np.ascontiguousarray(bits).view("<u4").reshape(-1)
        assert np.array_equal(words.reshape(-1), want)
        assert np.array_equal(packed.unpack_bits(words, d), bits)
        values = packed.unpack_values(words, d)
        assert np.array_equal(values[:, j], codes.view(ELEMENTS[name]).astype(np.float32), equal_nan=True)
    assert d.itemsize == (2 if fp4 else 4) and str(d) == name and d.packed
    # An array made with the dtype (nki-library's tests make their MX outputs so) stays that dtype.
    made = np.zeros((2, 3), dtype=d)
    assert made.dtype == d.storage and nki.machine.dtypes.dtype_of(made.dtype) is d
    assert nki.machine.dtypes.dtype_of(np.zeros(3, d.storage).dtype) is not d


def test_the_scale_dtype_is_e8m0():
    codes = np.arange(256, dtype=np.uint8)
    want = [2.0 ** (int(c) - 127) if c < 255 else np.nan for c in codes]  # OCP MX v1.0: 2^(bits - 127), 0xFF NaN
    got = codes.view(nl.float8_e8m0fnu.storage).astype(np.float64)
    np.testing.assert_array_equal(got, want)


# --- kernels -------------------------------------------------------------------------------------

def scatter_scales(scales: np.ndarray) -> np.ndarray:
    """Scales [P/8, F] in a [P, F] tile as the MX instructions read them: row 4q + j at partition
    32q + j (P over 32), else rows 0 .. P/8 - 1."""
    p = scales.shape[0] * 8
    out = np.zeros((p, scales.shape[1]), np.uint8)
    for i in range(scales.shape[0]):
        out[32 * (i // 4) + i % 4 if p > 32 else i] = scales[i]
    return out


def gather_scales(tile: np.ndarray, p: int) -> np.ndarray:
    return tile[:p // 8] if p <= 32 else np.stack([tile[32 * (i // 4) + i % 4] for i in range(p // 8)])


@nki.jit
def quantize(x, dst_dtype):
    data = nl.ndarray((x.shape[0], x.shape[1] // 4), dtype=dst_dtype, buffer=nl.shared_hbm)
    scales = nl.ndarray((x.shape[0], x.shape[1] // 4), dtype=nl.uint8, buffer=nl.shared_hbm)
    src = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=src, src=x)
    q = nl.ndarray(data.shape, dtype=dst_dtype, buffer=nl.sbuf)
    s = nl.ndarray(scales.shape, dtype=nl.uint8, buffer=nl.sbuf)
    nisa.memset(dst=s, value=0)
    nisa.quantize_mx(dst=q, src=src, dst_scale=s)
    nisa.dma_copy(dst=data, src=q)
    nisa.dma_copy(dst=scales, src=s)
    return data, scales


def documented_quantize(x: np.ndarray, name: str, rule: str = "documented") -> tuple[np.ndarray, np.ndarray]:
    """(values [P, F] as float, scale bytes [P/8, F/4]) by the documented rule (or, ``rule="ocp"``,
    by AWS's golden: the OCP scale, clip to +-max, cast)."""
    p, f = x.shape
    element = ELEMENTS[name]
    top = float(ml_dtypes.finfo(element).max)
    values = np.empty((p, f))
    scale_bytes = np.empty((p // 8, f // 4), np.uint8)
    for g in range(p // 8):
        for h in range(f // 4):
            block = x[8 * g:8 * g + 8, 4 * h:4 * h + 4].astype(np.float64)
            amax = Fraction(float(np.abs(block).max()))
            if amax == 0:
                e = -127  # "the block scale is set to X = 2^-127"
            else:
                e = amax.numerator.bit_length() - amax.denominator.bit_length()
                e = e if Fraction(2) ** e <= amax else e - 1  # floor(log2 amax)
                e -= E_MAX[name] - 1 if rule == "documented" else E_MAX[name]
            scale_bytes[g, h] = e + 127
            quotient = block / 2.0 ** e  # exact
            if rule == "ocp":
                quotient = np.clip(quotient, -top, top)
            values[8 * g:8 * g + 8, 4 * h:4 * h + 4] = quotient.astype(element).astype(np.float64)
    return values, scale_bytes


@pytest.mark.parametrize("name", ["float8_e4m3fn_x4", "float8_e5m2_x4"])
@pytest.mark.parametrize("p", [32, 64, 128])
@pytest.mark.parametrize("src_dtype", [ml_dtypes.bfloat16, np.float16])
def test_quantize_mx_is_the_documented_rule_bit_for_bit(name, p, src_dtype):
    x = (rng.standard_normal((p, 64)) * np.exp2(rng.integers(-6, 6, (p, 1)))).astype(src_dtype)
    x[8:16, 4:8] = 0  # an all-zero group
    x[0, 0] = 1.9 * 2.0 ** -3  # and the group amax 1.9 * 2^k (its value rounds to 1.875 * 2^k in e4m3fn)
    run = nki.run(quantize, x, getattr(nl, name), target="trn3")
    assert run.errors == []
    data, scale_tile = run.outputs
    values, scale_bytes = documented_quantize(x, name)
    np.testing.assert_array_equal(gather_scales(scale_tile, p), scale_bytes)
    np.testing.assert_array_equal(packed.unpack_values(data, getattr(nl, name)), values)
    # Only the documented partitions hold scales (the rest keep the memset's zeros).
    untouched = np.ones(p, bool)
    untouched[[32 * (i // 4) + i % 4 if p > 32 else i for i in range(p // 8)]] = False
    assert not scale_tile[untouched].any()
    assert {"mx_scale", "mx_conversion"} <= set(run.assumptions)


def test_one_group_tells_the_documented_scale_from_aws_golden():
    # amax = 1.9 * 2^k in e4m3fn: the documented scale 2^(k - 7) takes 1.9 * 2^7 = 243.2 to 240; the
    # OCP scale 2^(k - 8) of AWS's golden gives 486.4, clipped to 448. Dequantized: 1.875 vs 1.75 * 2^k.
    x = np.zeros((32, 4), ml_dtypes.bfloat16)
    x[5, 2] = ml_dtypes.bfloat16(1.9 * 2.0 ** 4)
    k = float(x[5, 2]) / 1.9 / 16  # bf16 rounds 1.9 * 16: k is how far; the rule is what is compared
    for rule, want_value in (("documented", 240.0), ("ocp", 448.0)):
        run = nki.run(quantize, x, nl.float8_e4m3fn_x4, target="trn3", assume={"mx_scale": rule})
        data, scales = run.outputs
        got = packed.unpack_values(data, nl.float8_e4m3fn_x4)[5, 2]
        assert got == want_value, rule
        values, scale_bytes = documented_quantize(x, "float8_e4m3fn_x4", rule)
        assert scales[0, 0] == scale_bytes[0, 0] and got == values[5, 2]
    assert k > 0


def test_a_non_finite_group_is_a_finding_and_nan():
    x = rng.standard_normal((32, 8)).astype(ml_dtypes.bfloat16)
    x[9, 5] = np.inf
    run = nki.run(quantize, x, nl.float8_e5m2_x4, target="trn3")
    (f,) = [f for f in run.findings if f.rule == "mx_range"]
    assert f.severity == "warning" and "1 groups" in f.message
    data, scales = run.outputs
    assert scales[1, 1] == 0xFF and np.isnan(packed.unpack_values(data, nl.float8_e5m2_x4)[8:16, 4:8]).all()
    values, scale_bytes = documented_quantize(np.where(np.isinf(x.astype(np.float64)), 0, x), "float8_e5m2_x4")
    keep = np.ones((4, 2), bool)
    keep[1, 1] = False
    assert np.array_equal(scales[:4][keep], scale_bytes[keep])


def _kernel_with(body):
    """A trn3 kernel quantizing x and running ``body(nisa, nl, q, s, src)``: the findings."""
    @nki.jit
    def k(x):
        src = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=src, src=x)
        body(src)
        return x

    return k


@pytest.mark.parametrize("case, rule", [
    ("fp4_out", "mx_dtype"), ("fp32_src", "mx_dtype"), ("48_partitions", "mx_layout"),
    ("scale_offset_2", "mx_layout"), ("narrow_scale", "mx_layout"), ("dst_too_wide", "shape_mismatch")])
def test_quantize_mx_refuses_what_its_documentation_refuses(case, rule):
    p = 48 if case == "48_partitions" else 64
    dtype = np.float32 if case == "fp32_src" else ml_dtypes.bfloat16

    def body(src):
        out_dtype = nl.float4_e2m1fn_x4 if case == "fp4_out" else nl.float8_e5m2_x4
        q = nl.ndarray((src.shape[0], 16 if case != "dst_too_wide" else 32), dtype=out_dtype, buffer=nl.sbuf)
        s = nl.ndarray((128, 16), dtype=nl.uint8, buffer=nl.sbuf)
        scale = s[2:, :] if case == "scale_offset_2" else s[0:16, :] if case == "narrow_scale" else s
        nisa.quantize_mx(dst=q, src=src, dst_scale=scale)  # CALL

    k = _kernel_with(body)
    run = nki.run(k, rng.standard_normal((p, 64)).astype(dtype), target="trn3")
    assert rule in {f.rule for f in run.errors}, run.findings
    assert next(f for f in run.errors if f.rule == rule).where.endswith(source_line(body, "# CALL").split(":")[-1])


def test_mx_instructions_are_trn3_only_and_x4_tiles_hold_no_values():
    def body(src):
        q = nl.ndarray((32, 4), dtype=nl.float8_e5m2_x4, buffer=nl.sbuf)
        s = nl.ndarray((4, 4), dtype=nl.uint8, buffer=nl.sbuf)
        nisa.quantize_mx(dst=q, src=src, dst_scale=s)  # CALL
        f = nl.ndarray((32, 4), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=f, src=q)  # COPY

    x = rng.standard_normal((32, 16)).astype(ml_dtypes.bfloat16)
    on_trn2 = nki.run(_kernel_with(body), x, target="trn2")
    assert any(f.rule == "target_generation" and "quantize_mx" in f.message for f in on_trn2.errors)
    on_trn3 = nki.run(_kernel_with(body), x, target="trn3")
    (f,) = on_trn3.errors
    assert f.rule == "mx_dtype" and "float8_e5m2_x4" in f.message and f.where == source_line(body, "# COPY")


# --- nc_matmul_mx --------------------------------------------------------------------------------

def mx_operand(p: int, free: int, name: str, spread: int = 6) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(words [p, free], scale bytes [p/8, free], dequantized values [4p, free] in the contraction
    order: row 4k + j is value j of partition k)."""
    element = ELEMENTS[name]
    finite = np.array([v for v in np.arange(256 if not name.startswith("float4") else 16, dtype=np.uint8)
                       .view(element).astype(np.float64) if np.isfinite(v)])
    values = rng.choice(finite, (p, free, 4))
    scale_bytes = rng.integers(127 - spread, 127 + spread, (p // 8, free)).astype(np.uint8)
    bits = values.astype(element).view(np.uint8).reshape(p, 4 * free)
    words = packed.pack(bits, getattr(nl, name))
    dequantized = values * np.exp2(np.repeat(scale_bytes.astype(np.int64) - 127, 8, axis=0))[:, :, None]
    return words, scale_bytes, dequantized.transpose(0, 2, 1).reshape(4 * p, free)


def fp32_of(x: Fraction) -> np.float32:
    """x rounded to the nearest fp32 (ties to even; normal range), from the exact value."""
    if x == 0:
        return np.float32(0)
    sign, x = (-1 if x < 0 else 1), abs(x)
    e = x.numerator.bit_length() - x.denominator.bit_length()
    e = e if Fraction(2) ** e <= x else e - 1
    scaled = x / Fraction(2) ** (e - 23)  # 24 significant bits before the point
    whole, rest = divmod(scaled.numerator, scaled.denominator)
    if 2 * rest > scaled.denominator or (2 * rest == scaled.denominator and whole % 2):
        whole += 1
    return np.float32(sign * whole * 2.0 ** (e - 23))


def documented_pe(a: np.ndarray, b: np.ndarray, k_tile: int = 512) -> np.ndarray:
    """a [K, M]^T b [K, N] by the documented MX PE: per partition the exact sum of its four products
    rounded once to fp32, added down the column in fp32 from 0; per instruction (k_tile values of K)
    a tile, the tiles added in fp32 (PSUM)."""
    k, m = a.shape
    out = np.zeros((m, b.shape[1]), np.float32)
    for i in range(m):
        for j in range(b.shape[1]):
            psum = None
            for t in range(0, k, k_tile):
                column = np.float32(0)
                for r in range(t, min(t + k_tile, k), 4):
                    quad = sum(Fraction(float(a[r + q, i])) * Fraction(float(b[r + q, j])) for q in range(4))
                    column = np.float32(column + fp32_of(quad))
                psum = column if psum is None else np.float32(psum + column)
            out[i, j] = psum
    return out


def mx_matmul_kernel(tiles: int, dst_dtype=nl.float32):
    """stationary [tiles * kp, M] and moving [tiles * kp, N] (x4), scales scattered per tile: the
    tiles accumulated in one PSUM tile."""
    @nki.jit
    def k(st, st_scale, mv, mv_scale, dtype):
        kp = st.shape[0] // tiles
        st_x4 = st.ap(dtype=dtype, pattern=[[st.shape[1], st.shape[0]], [1, st.shape[1]]], offset=0)
        mv_x4 = mv.ap(dtype=dtype, pattern=[[mv.shape[1], mv.shape[0]], [1, mv.shape[1]]], offset=0)
        m, n = st_x4.shape[1], mv_x4.shape[1]
        out = nl.ndarray((m, n), dtype=nl.float32, buffer=nl.shared_hbm)
        acc = nl.ndarray((m, n), dtype=dst_dtype, buffer=nl.psum)
        for t in range(tiles):
            a = nl.ndarray((kp, m), dtype=dtype, buffer=nl.sbuf)
            b = nl.ndarray((kp, n), dtype=dtype, buffer=nl.sbuf)
            ks = st_scale.shape[0] // tiles  # the scale tiles as the caller lays them out
            sa = nl.ndarray((ks, m), dtype=nl.uint8, buffer=nl.sbuf)
            sb = nl.ndarray((ks, n), dtype=nl.uint8, buffer=nl.sbuf)
            nisa.dma_copy(dst=a, src=st_x4[t * kp:(t + 1) * kp, :])
            nisa.dma_copy(dst=b, src=mv_x4[t * kp:(t + 1) * kp, :])
            nisa.dma_copy(dst=sa, src=st_scale[t * ks:(t + 1) * ks, :])
            nisa.dma_copy(dst=sb, src=mv_scale[t * ks:(t + 1) * ks, :])
            nisa.nc_matmul_mx(dst=acc, stationary=a, moving=b, stationary_scale=sa, moving_scale=sb)
        o = nl.ndarray((m, n), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=o, src=acc)
        nisa.dma_copy(dst=out, src=o)
        return out

    return k


def operands(tiles: int, kp: int, m: int, n: int, st_name: str, mv_name: str):
    parts = [(mx_operand(kp, m, st_name), mx_operand(kp, n, mv_name)) for _ in range(tiles)]
    st = np.concatenate([p[0][0] for p in parts])
    mv = np.concatenate([p[1][0] for p in parts])
    st_scale = np.concatenate([scatter_scales(p[0][1]) for p in parts])
    mv_scale = np.concatenate([scatter_scales(p[1][1]) for p in parts])
    a = np.concatenate([p[0][2] for p in parts])
    b = np.concatenate([p[1][2] for p in parts])
    return st, st_scale, mv, mv_scale, a, b


@pytest.mark.parametrize("st_name, mv_name, kp", [
    ("float8_e5m2_x4", "float8_e5m2_x4", 128), ("float8_e4m3fn_x4", "float8_e4m3fn_x4", 64),
    ("float4_e2m1fn_x4", "float4_e2m1fn_x4", 96), ("float4_e2m1fn_x4", "float8_e5m2_x4", 32)])
def test_nc_matmul_mx_is_the_documented_pe_bit_for_bit(st_name, mv_name, kp):
    st, st_scale, mv, mv_scale, a, b = operands(1, kp, 4, 6, st_name, mv_name)
    if st_name == mv_name:
        run = nki.run(mx_matmul_kernel(1), st, st_scale, mv, mv_scale, getattr(nl, st_name), target="trn3")
    else:  # "Multiplying an MXFP8 matrix with an MXFP4 matrix is also allowed" (trainium3_arch.rst)
        run = nki.run(_mixed_kernel(), st, st_scale, mv, mv_scale, target="trn3")
    assert run.errors == [], run.findings
    np.testing.assert_array_equal(run.outputs, documented_pe(a, b))
    assert run.platform == "trainium.trn3[mx=on" + ("" if kp == 128 else f",k_tile={4 * kp}") + "]"
    assert "mx_pe_add" in run.assumptions


def _mixed_kernel():
    @nki.jit
    def k(st, st_scale, mv, mv_scale):
        st_x4 = st.ap(dtype=nl.float4_e2m1fn_x4, pattern=[[st.shape[1], st.shape[0]], [1, st.shape[1]]], offset=0)
        mv_x4 = mv.ap(dtype=nl.float8_e5m2_x4, pattern=[[mv.shape[1], mv.shape[0]], [1, mv.shape[1]]], offset=0)
        kp, m, n = st_x4.shape[0], st_x4.shape[1], mv_x4.shape[1]
        a = nl.ndarray((kp, m), dtype=nl.float4_e2m1fn_x4, buffer=nl.sbuf)
        b = nl.ndarray((kp, n), dtype=nl.float8_e5m2_x4, buffer=nl.sbuf)
        sa = nl.ndarray(st_scale.shape, dtype=nl.uint8, buffer=nl.sbuf)
        sb = nl.ndarray(mv_scale.shape, dtype=nl.uint8, buffer=nl.sbuf)
        for dst, src in ((a, st_x4), (b, mv_x4), (sa, st_scale), (sb, mv_scale)):
            nisa.dma_copy(dst=dst, src=src)
        acc = nl.ndarray((m, n), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul_mx(dst=acc, stationary=a, moving=b, stationary_scale=sa, moving_scale=sb)
        out = nl.ndarray((m, n), dtype=nl.float32, buffer=nl.shared_hbm)
        o = nl.ndarray((m, n), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=o, src=acc)
        nisa.dma_copy(dst=out, src=o)
        return out

    return k


@pytest.mark.parametrize("dst_dtype", [nl.float32, nl.bfloat16])
def test_a_chain_of_mx_matmuls_accumulates_in_psum_as_numeq_matmul_does(dst_dtype):
    # Two nc_matmul_mx into one PSUM tile (K = 1024 values). fp32 PSUM: the documented PE per tile,
    # tiles added in fp32; and the consistency law: the kernel equals numeq.matmul of the dequantized
    # operands on Run.platform. bf16 PSUM (NeuronCore-v4): each tile's fp32 result rounded to bf16 as it
    # is written, the second added in fp32 and rounded again (trainium3_arch.rst, BF16 Matmul Results in PSUM).
    st, st_scale, mv, mv_scale, a, b = operands(2, 128, 4, 6, "float8_e4m3fn_x4", "float8_e4m3fn_x4")
    run = nki.run(mx_matmul_kernel(2, dst_dtype), st, st_scale, mv, mv_scale, nl.float8_e4m3fn_x4, target="trn3")
    if dst_dtype == nl.float32:
        assert run.errors == [] and "narrow_accumulator" not in {f.rule for f in run.findings}
        np.testing.assert_array_equal(run.outputs, documented_pe(a, b))
        law = numeq.matmul(np.ascontiguousarray(a.T), b, platform=run.platform, in_fmt="fp32", out="fp32")
        np.testing.assert_array_equal(run.outputs, law)
    else:
        first = documented_pe(a[:512], b[:512]).astype(ml_dtypes.bfloat16).astype(np.float32)
        second = documented_pe(a[512:], b[512:])
        np.testing.assert_array_equal(run.outputs, (first + second).astype(ml_dtypes.bfloat16).astype(np.float32))
        assert "narrow_accumulator" in {f.rule for f in run.findings}


def test_the_pe_add_is_a_switchable_assumption():
    # One PE's products 2^24, 1, -2^24, 1 (e5m2 values 2^12 and 1, scales 2^0): their exact sum 2 is
    # what a fused PE adds; one by one in fp32, 2^24 + 1 rounds to 2^24 and the sum is 1.
    kp, m, n = 32, 2, 2
    values_a = np.ones((kp, m, 4))
    values_b = np.ones((kp, n, 4))
    values_a[0, 0] = [2.0 ** 12, 1, -(2.0 ** 12), 1]
    values_b[0, 0] = [2.0 ** 12, 1, 2.0 ** 12, 1]
    words = [packed.pack(v.astype(ml_dtypes.float8_e5m2).view(np.uint8).reshape(kp, -1), nl.float8_e5m2_x4)
             for v in (values_a, values_b)]
    scales = [scatter_scales(np.full((kp // 8, f), 127, np.uint8)) for f in (m, n)]
    got = {}
    for how in ("fused", "sequential"):
        run = nki.run(mx_matmul_kernel(1), words[0], scales[0], words[1], scales[1], nl.float8_e5m2_x4,
                      target="trn3", assume={"mx_pe_add": how})
        got[how] = float(run.outputs[0, 0])
    others = 4 * (kp - 1)  # the other partitions' products, all 1
    assert got == {"fused": 2 + others, "sequential": 1 + others}


def test_scales_left_contiguous_are_a_layout_error_and_misplaced_ones_are_caught():
    # AWS's tutorial spreads HBM-contiguous scales across quadrants (load_scales_scattered); a kernel
    # that loads the 16 rows of a 128-partition operand's scales as they lie breaks the layout.
    st, st_scale, mv, mv_scale, a, b = operands(1, 128, 4, 6, "float8_e5m2_x4", "float8_e5m2_x4")
    contiguous = [gather_scales(s, 128) for s in (st_scale, mv_scale)]
    run = nki.run(mx_matmul_kernel(1), st, contiguous[0], mv, contiguous[1], nl.float8_e5m2_x4, target="trn3")
    assert "mx_layout" in {f.rule for f in run.errors}
    # The same rows placed at partitions 0..15 of a full tile: the layout holds, the values do not.
    misplaced = [np.concatenate([c, np.full((112, c.shape[1]), 127, np.uint8)]) for c in contiguous]
    run = nki.run(mx_matmul_kernel(1), st, misplaced[0], mv, misplaced[1], nl.float8_e5m2_x4, target="trn3")
    assert run.errors == []
    exact = a.T @ b
    assert not np.allclose(run.outputs, exact, rtol=5e-2, atol=5e-2)  # AWS's tutorial tolerance rejects it


def test_the_mx_plan_bounds_the_kernel():
    # The op-level bound of the MX plan (the same plan the kernel ran) holds against the exact product.
    st, st_scale, mv, mv_scale, a, b = operands(1, 128, 8, 8, "float8_e5m2_x4", "float8_e5m2_x4")
    run = nki.run(mx_matmul_kernel(1), st, st_scale, mv, mv_scale, nl.float8_e5m2_x4, target="trn3")
    op = numeq.ops.matmul(np.ascontiguousarray(a.T), b, in_fmt="fp32", out="fp32")
    bound = op.bound(run.platform)
    exact = np.array([[float(sum(Fraction(float(x)) * Fraction(float(y)) for x, y in zip(a[:, i], b[:, j])))
                       for j in range(b.shape[1])] for i in range(a.shape[1])])
    assert np.all(np.abs(run.outputs - exact) <= bound)
    assert np.all(bound <= 512 * 2.0 ** -24 * (np.abs(a.T) @ np.abs(b)))  # no looser than the textbook n u sum|ab|


def test_the_exact_dataflow_runs_mx_matmuls_and_refuses_quantize_mx():
    # Run.exact(): the dequantized operands' exact product (rounded once to binary64); quantize_mx writes
    # fp8 bit patterns, which an exact dataflow of values cannot hold (as a bitcast view).
    st, st_scale, mv, mv_scale, a, b = operands(1, 64, 3, 5, "float8_e5m2_x4", "float8_e5m2_x4")
    run = nki.run(mx_matmul_kernel(1), st, st_scale, mv, mv_scale, nl.float8_e5m2_x4, target="trn3")
    exact = np.array([[float(sum(Fraction(float(x)) * Fraction(float(y)) for x, y in zip(a[:, i], b[:, j])))
                       for j in range(b.shape[1])] for i in range(a.shape[1])])
    np.testing.assert_array_equal(np.asarray(run.exact(), dtype=np.float64), exact)
    x = rng.standard_normal((32, 8)).astype(ml_dtypes.bfloat16)
    with pytest.raises(nki.Unsupported, match="quantize_mx"):
        nki.run(quantize, x, nl.float8_e5m2_x4, target="trn3").exact()
