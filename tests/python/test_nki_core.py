"""numeq.nki's core: tensors and views, casts, the matmul path (PE plan per instruction, PSUM
accumulation and its deferred chains), the limits found as kernels run, the entry points.

Oracles: ml_dtypes conversions (single roundings from float32), numpy float32 loops (IEEE binary32
additions in a stated order), mpmath (correctly rounded functions), numpy for view semantics, and
the documented examples of NKI's docs (indexing, access patterns).
"""

from __future__ import annotations

import sys

import ml_dtypes
import mpmath
import numpy as np
import pytest

import numeq
from nki_support import source_line
from numeq import nki

nl, nisa = nki.language, nki.isa


# --- dtypes ----------------------------------------------------------------------------------------

def test_dtypes_print_and_compare_as_nki_names():
    assert str(nl.bfloat16) == "bfloat16" and repr(nl.float8_e4m3) == "float8_e4m3"
    assert nl.float32 == "float32" and nl.float32 == np.float32 and nl.bfloat16 == ml_dtypes.bfloat16
    assert nl.bfloat16 != nl.float16 and nl.bool_ == "bool"
    # Trainium's float8_e4m3 is the IEEE-like e4m3 (max 240), not OCP e4m3fn (448).
    assert nki.machine.dtypes.storage_dtype(nl.float8_e4m3) == np.dtype(ml_dtypes.float8_e4m3)
    assert float(ml_dtypes.finfo(nki.machine.dtypes.storage_dtype(nl.float8_e4m3)).max) == 240.0
    with pytest.raises(ValueError, match="valid: float32"):
        nl.ndarray  # noqa: B018 - touching the name is fine outside a run
        nki.machine.dtypes.dtype_of("float9")


# --- casts -----------------------------------------------------------------------------------------

@nki.jit
def _copy_to(a, dtype):
    t = nl.ndarray(a.shape, a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=a)
    o = nl.ndarray(a.shape, dtype, buffer=nl.sbuf)
    nisa.tensor_copy(dst=o, src=t)
    out = nl.ndarray(a.shape, dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=o)
    return out


@pytest.mark.parametrize("dtype,np_type", [(nl.bfloat16, ml_dtypes.bfloat16), (nl.float16, np.float16),
                                           (nl.float8_e4m3, ml_dtypes.float8_e4m3),
                                           (nl.float8_e5m2, ml_dtypes.float8_e5m2)])
def test_tensor_copy_rounds_to_nearest_even_like_ml_dtypes(dtype, np_type):
    # fp32 -> narrower: one rounding to nearest even, overflow to Inf (data-types.rst); ml_dtypes
    # converts float32 with one rounding, so it is an oracle here.
    rng = np.random.default_rng(1)
    info = ml_dtypes.finfo(np_type)
    # Every fp32 significand pattern at random, exponents from below the subnormals to past the
    # largest value of the target format, both signs; and the specials.
    significand = (rng.integers(0, 2**23, 128 * 512) | 2**23).astype(np.float64) / 2**23
    exponent = rng.integers(int(np.log2(float(info.smallest_subnormal))) - 3, min(int(info.maxexp) + 2, 128), 128 * 512)
    x = (np.ldexp(significand, exponent) * rng.choice([-1.0, 1.0], 128 * 512)).astype(np.float32)
    x[:4] = [np.inf, -np.inf, 0.0, -0.0]
    x = x.reshape(128, 512)
    got = nki.simulate(_copy_to)(x, dtype)
    with np.errstate(over="ignore"):
        want = x.astype(np_type)
    assert got.dtype == np.dtype(np_type)
    np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))


def test_same_dtype_copy_keeps_the_bits():
    x = np.array([np.nan, -0.0, np.inf, 1.0] * 32, dtype=np.float32).reshape(128, 1)
    x.view(np.uint32)[0, 0] = 0x7FC00123  # a NaN payload
    got = nki.simulate(_copy_to)(x, nl.float32)
    np.testing.assert_array_equal(got.view(np.uint32), x.view(np.uint32))


# --- views -----------------------------------------------------------------------------------------

def test_integer_indices_follow_nki_rules_and_ap_addresses_storage():
    shapes = {}

    @nki.jit
    def k(a):
        t = nl.ndarray((64, 64, 64), nl.float32, buffer=nl.sbuf)
        shapes["sbuf"] = [t[0, 0, 10].shape, t[:, 0].shape, t[:, 0, 10].shape, t[0, ..., :].shape]
        shapes["hbm"] = [a[0].shape, a[0, 1].shape]
        s = nl.ndarray((16, 16), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=s, src=a)
        out = nl.ndarray((16, 8), nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=s[:, 3:5].ap([[16, 16], [1, 8]], offset=8))  # storage, not the view
        return out

    a = np.arange(256, dtype=np.float32).reshape(16, 16)
    out = nki.simulate(k)(a)
    # nki.language tensor docs: t(64,64,64)[0,0,10] -> (1,1); t[:,0] -> (64,64); t[:,0,10] -> (64,1);
    # t[0,...,:] -> (1,64,64); HBM drops integer-indexed axes as numpy does.
    assert shapes["sbuf"] == [(1, 1), (64, 64), (64, 1), (1, 64, 64)]
    assert shapes["hbm"] == [(16,), (1,)]
    np.testing.assert_array_equal(out, a[:, 8:16])  # docs: t(16,16).ap([[16,16],[1,8]], offset=8) is t[:, 8:16]


def test_an_index_out_of_bounds_is_a_finding_at_its_line():
    @nki.jit
    def k(a):
        t = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a[0:128, 0:65])
        return a

    r = nki.run(k, np.zeros((128, 64), np.float32))
    assert not r.completed
    assert [(f.rule, f.where) for f in r.errors] == [("index_bounds", source_line(k, "a[0:128, 0:65]"))]


# --- reads before writes, outputs ------------------------------------------------------------------

def test_an_output_stored_from_unwritten_memory_names_the_tile_and_line():
    @nki.jit
    def k(a):
        t = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf, name="scratch")
        nisa.dma_copy(dst=t[:, 0:32], src=a[:, 0:32])
        u = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=u, data=t, op0=nl.multiply, operand0=2.0)
        out = nl.ndarray((128, 64), nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=u)
        return out

    r = nki.run(k, np.ones((128, 64), np.float32))
    # tensor_scalar computes on the unwritten half (no error: its results stay undefined, as AWS's
    # kernels compute on padding); the store leaves half the output undefined, a partly written
    # output (its caller must read the rest), naming where the undefined values came from.
    assert r.errors == []
    (f,) = [f for f in r.findings if f.rule == "output_partly_written"]
    assert f.where == source_line(k, "out = nl.ndarray")
    assert "4096 of 8192" in f.message and "scratch" in f.message and source_line(k, "nisa.tensor_scalar") in f.message
    assert np.isnan(r.outputs[:, 32:]).all() and (r.outputs[:, :32] == 2).all()


def test_bytes_nothing_wrote_read_as_zero_bits_on_every_run():
    # On-chip tiles start uninitialised (numeq skips zeroing them); bytes nothing wrote must still
    # read as the same bits every run. The memset tile freed first leaves 7.0s in the memory the
    # next tiles are likely to get.
    @nki.jit
    def k(a):
        junk = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=junk, value=7.0)
        del junk
        t = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf, name="half")
        nisa.dma_copy(dst=t[:, 0:32], src=a[:, 0:32])
        out = nl.ndarray((128, 64), nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=t)
        return out

    for _ in range(3):
        r = nki.run(k, np.ones((128, 64), np.float32))
        assert r.errors == [] and "output_partly_written" in [f.rule for f in r.findings]
        assert (r.outputs[:, :32] == 1).all() and (r.outputs[:, 32:].view(np.uint32) == 0).all()


def test_an_output_nothing_wrote_is_a_finding():
    @nki.jit
    def k(a):
        return nl.ndarray((4, 4), nl.float32, buffer=nl.shared_hbm)

    r = nki.run(k, np.zeros((4, 4), np.float32))
    assert [f.rule for f in r.errors] == ["output_unwritten"]


# --- matmul: the PE plan, PSUM, and the deferred chains --------------------------------------------

def _float32_column(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """One nc_matmul under the default assumptions, written independently: exact products (bf16
    products are exact in fp32), added in fp32 down the column from 0, k = 0, 1, ..."""
    acc = np.zeros((a.shape[1], b.shape[1]), np.float32)
    for k in range(a.shape[0]):
        acc = acc + np.outer(a[k].astype(np.float32), b[k].astype(np.float32)).astype(np.float32)
    return acc


@nki.jit
def _chain(a_t, b, tiles):
    # K cut into the given tile sizes (not all equal), accumulated into one PSUM tile.
    M, N = a_t.shape[1], b.shape[1]
    acc = nl.ndarray((M, N), nl.float32, buffer=nl.psum)
    k0 = 0
    for size in tiles:
        at = nl.ndarray((size, M), a_t.dtype, buffer=nl.sbuf)
        bt = nl.ndarray((size, N), b.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=at, src=a_t[k0:k0 + size, :])
        nisa.dma_copy(dst=bt, src=b[k0:k0 + size, :])
        nisa.nc_matmul(acc, at, bt)
        k0 += size
    o = nl.ndarray((M, N), nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=o, src=acc)
    out = nl.ndarray((M, N), nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=o)
    return out


@pytest.mark.parametrize("tiles", [(128,), (128, 128, 128), (128, 64, 128), (32, 128, 96)])
def test_psum_accumulation_is_fp32_in_program_order(tiles):
    rng = np.random.default_rng(2)
    K = sum(tiles)
    a_t = rng.standard_normal((K, 64)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((K, 96)).astype(ml_dtypes.bfloat16)
    got = nki.simulate(_chain)(a_t, b, tiles)
    want, k0 = None, 0
    for size in tiles:
        tile = _float32_column(a_t[k0:k0 + size], b[k0:k0 + size])
        want = tile if want is None else want + tile  # psum += tile, binary32 to nearest even
        k0 += size
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("order", ["mnk", "kmn", "nmk_reused"])
def test_tiled_matmul_gives_the_op_level_emulation_bit_for_bit(order):
    rng = np.random.default_rng(3)
    K, M, N = 384, 256, 1024
    a = rng.standard_normal((M, K)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((K, N)).astype(ml_dtypes.bfloat16)

    @nki.jit
    def mm(a_t, b):
        out = nl.ndarray((M, N), nl.bfloat16, buffer=nl.shared_hbm)
        mt, nt, kt = M // 128, N // 512, K // 128

        def load(k, m, n):
            at = nl.ndarray((128, 128), a_t.dtype, buffer=nl.sbuf)
            bt = nl.ndarray((128, 512), b.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=at, src=a_t[k * 128:(k + 1) * 128, m * 128:(m + 1) * 128])
            nisa.dma_copy(dst=bt, src=b[k * 128:(k + 1) * 128, n * 512:(n + 1) * 512])
            return at, bt

        def store(acc, m, n):
            o = nl.ndarray((128, 512), nl.bfloat16, buffer=nl.sbuf)
            nisa.tensor_copy(dst=o, src=acc)
            nisa.dma_copy(dst=out[m * 128:(m + 1) * 128, n * 512:(n + 1) * 512], src=o)

        if order == "mnk":
            for m in nl.affine_range(mt):
                for n in nl.affine_range(nt):
                    acc = nl.ndarray((128, 512), nl.float32, buffer=nl.psum)
                    for k in nl.affine_range(kt):
                        nisa.nc_matmul(acc, *load(k, m, n))
                    store(acc, m, n)
        elif order == "kmn":  # PSUM tiles held across the k loop
            accs = {(m, n): nl.ndarray((128, 512), nl.float32, buffer=nl.psum) for m in range(mt) for n in range(nt)}
            for k in nl.affine_range(kt):
                for m in nl.affine_range(mt):
                    for n in nl.affine_range(nt):
                        nisa.nc_matmul(accs[m, n], *load(k, m, n))
            for (m, n), acc in accs.items():
                store(acc, m, n)
        else:  # one PSUM tile reused for every output tile; accumulate= states each write
            acc = nl.ndarray((128, 512), nl.float32, buffer=nl.psum)
            for n in nl.affine_range(nt):
                for m in nl.affine_range(mt):
                    for k in nl.affine_range(kt):
                        nisa.nc_matmul(acc, *load(k, m, n), accumulate=k > 0)
                    store(acc, m, n)
        return out

    r = nki.run(mm, np.ascontiguousarray(a.T), b)
    assert r.errors == [] and {f.rule for f in r.warnings} <= {"dma_small"} and r.platform == "trainium.trn2"
    np.testing.assert_array_equal(r.outputs.astype(np.float64), numeq.matmul(a, b, platform=r.platform, out="bf16"))
    # And the independent oracle: within the platform's own bound of the exact product.
    op = numeq.ops.matmul(a, b, in_fmt="bf16", out="bf16")
    exact = numeq.reference.matmul(a, b, out="fp64")
    assert np.all(np.abs(r.outputs.astype(np.float64) - exact) <= op.bound(r.platform))


def test_psum_tile_reuse_without_accumulate_keyword_rests_on_a_named_assumption():
    # The documented auto mode: the first matmul write to a PSUM location overwrites, later ones
    # add, so a tile reused for a second output (no accumulate=) adds onto the first output's sums;
    # the alternative 'after_read' starts afresh after the evacuation.
    rng = np.random.default_rng(4)
    a_t = rng.standard_normal((128, 256)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((128, 64)).astype(ml_dtypes.bfloat16)

    @nki.jit
    def k(a_t, b):
        acc = nl.ndarray((128, 64), nl.float32, buffer=nl.psum)
        out = nl.ndarray((256, 64), nl.float32, buffer=nl.shared_hbm)
        for m in range(2):
            at = nl.ndarray((128, 128), a_t.dtype, buffer=nl.sbuf)
            bt = nl.ndarray((128, 64), b.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=at, src=a_t[:, m * 128:(m + 1) * 128])
            nisa.dma_copy(dst=bt, src=b)
            nisa.nc_matmul(acc, at, bt)
            o = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf)
            nisa.tensor_copy(dst=o, src=acc)
            nisa.dma_copy(dst=out[m * 128:(m + 1) * 128, :], src=o)
        return out

    first = _float32_column(a_t[:, :128], b)
    second = _float32_column(a_t[:, 128:], b)
    default = nki.run(k, a_t, b)
    assert default.assumptions["matmul_accumulate"] == "first_write"
    np.testing.assert_array_equal(default.outputs[128:], first + second)
    fresh = nki.run(k, a_t, b, assume={"matmul_accumulate": "after_read"})
    np.testing.assert_array_equal(fresh.outputs[128:], second)
    # Either way the run says the answer rests on the assumption, at the matmul's line (once: the
    # first write of the tile is plain).
    for run in (default, fresh):
        (w,) = [f for f in run.warnings if f.rule == "accumulate_after_read"]
        assert w.where == source_line(k.func, "nisa.nc_matmul(acc, at, bt)") and w.count == 1


def test_fp8_double_row_contracts_256_rows_in_pairs():
    rng = np.random.default_rng(5)
    K, M, N = 512, 64, 128
    a = rng.standard_normal((M, K)).astype(ml_dtypes.float8_e4m3)
    b = rng.standard_normal((K, N)).astype(ml_dtypes.float8_e4m3)

    @nki.jit
    def k(a_t, b):
        acc = nl.ndarray((M, N), nl.float32, buffer=nl.psum)
        for i in nl.affine_range(K // 256):
            at = nl.ndarray((128, 2, M), a_t.dtype, buffer=nl.sbuf)
            bt = nl.ndarray((128, 2, N), b.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=at, src=a_t[i * 256:(i + 1) * 256, :].reshape((128, 2, M)))
            nisa.dma_copy(dst=bt, src=b[i * 256:(i + 1) * 256, :].reshape((128, 2, N)))
            nisa.nc_matmul(acc, at, bt, perf_mode=nisa.matmul_perf_mode.double_row)
        o = nl.ndarray((M, N), nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=o, src=acc)
        out = nl.ndarray((M, N), nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=o)
        return out

    r = nki.run(k, np.ascontiguousarray(a.T), b)
    assert "fp8_double_row=on" in r.platform
    np.testing.assert_array_equal(r.outputs, numeq.matmul(a, b, platform=r.platform, out="fp32"))
    on_trn1 = nki.run(k, np.ascontiguousarray(a.T), b, target="trn1")
    assert [f.rule for f in on_trn1.errors] == ["matmul_perf_mode"]


@pytest.mark.parametrize("acc_dtype", ["float32", "bfloat16"])
def test_psum_groups_summed_in_sbuf_are_stated_by_the_platform(acc_dtype):
    rng = np.random.default_rng(6)
    K, M, N, G = 1024, 128, 256, 2
    a = rng.standard_normal((M, K)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((K, N)).astype(ml_dtypes.bfloat16)

    @nki.jit
    def k(a_t, b):
        acc = nl.ndarray((M, N), acc_dtype, buffer=nl.sbuf)
        for g in nl.affine_range(K // (128 * G)):
            ps = nl.ndarray((M, N), nl.float32, buffer=nl.psum)
            for kk in nl.affine_range(G):
                i = g * G + kk
                at = nl.ndarray((128, M), a_t.dtype, buffer=nl.sbuf)
                bt = nl.ndarray((128, N), b.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=at, src=a_t[i * 128:(i + 1) * 128, :])
                nisa.dma_copy(dst=bt, src=b[i * 128:(i + 1) * 128, :])
                nisa.nc_matmul(ps, at, bt)
            if g == 0:
                nisa.tensor_copy(dst=acc, src=ps)
            else:
                nisa.tensor_tensor(dst=acc, data1=acc, data2=ps, op=nl.add)
        out = nl.ndarray((M, N), nl.bfloat16, buffer=nl.shared_hbm)
        o = nl.ndarray((M, N), nl.bfloat16, buffer=nl.sbuf)
        nisa.tensor_copy(dst=o, src=acc)
        nisa.dma_copy(dst=out, src=o)
        return out

    r = nki.run(k, np.ascontiguousarray(a.T), b)
    want = "trainium.trn2[psum_group=2]" if acc_dtype == "float32" else \
        "trainium.trn2[psum_group=2,group_accumulator=bf16]"
    assert r.kernel_platform == want and r.platform == "trainium.trn2[psum_group=2]"
    assert [f.rule for f in r.findings if f.rule == "narrow_accumulator"] == ([] if acc_dtype == "float32" else
                                                                               ["narrow_accumulator"])
    np.testing.assert_array_equal(r.outputs.astype(np.float64),
                                  numeq.matmul(a, b, platform=r.kernel_platform, out="bf16"))
    # Independent check of the bf16 accumulator's two roundings: groups summed in numpy float32,
    # each running sum rounded to bf16 by ml_dtypes.
    groups = [_float32_column(np.ascontiguousarray(a.T)[i * 128:(i + 1) * 128], b[i * 128:(i + 1) * 128])
              for i in range(K // 128)]
    sums = [groups[i] + groups[i + 1] for i in range(0, len(groups), 2)]
    acc = sums[0].astype(acc_dtype if acc_dtype == "float32" else ml_dtypes.bfloat16)
    for s in sums[1:]:
        acc = (acc.astype(np.float32) + s).astype(acc.dtype)
    np.testing.assert_array_equal(r.outputs, acc.astype(ml_dtypes.bfloat16))


# --- Vector / Scalar arithmetic --------------------------------------------------------------------

def test_tensor_reduce_adds_in_fp32_in_sequence():
    rng = np.random.default_rng(7)
    x = (rng.standard_normal((128, 300)) * np.exp2(rng.integers(-20, 20, (128, 300)))).astype(np.float32)

    @nki.jit
    def k(a):
        t = nl.ndarray(a.shape, a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a)
        s = nl.ndarray((128, 1), nl.float32, buffer=nl.sbuf)
        nisa.tensor_reduce(dst=s, op=nl.add, data=t, axis=1)
        out = nl.ndarray((128, 1), nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=s)
        return out

    want = x[:, 0].copy()
    for i in range(1, x.shape[1]):
        want = want + x[:, i]  # binary32, the documented sequential order (vector_reduce_order)
    np.testing.assert_array_equal(nki.simulate(k)(x)[:, 0], want)


def test_activation_is_correctly_rounded_fp32_of_scale_x_plus_bias():
    rng = np.random.default_rng(8)
    x = rng.uniform(-10, 10, (128, 16)).astype(np.float32)
    bias = rng.uniform(-1, 1, (128, 1)).astype(np.float32)

    @nki.jit
    def k(a, bias):
        t = nl.ndarray(a.shape, a.dtype, buffer=nl.sbuf)
        bt = nl.ndarray(bias.shape, bias.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a)
        nisa.dma_copy(dst=bt, src=bias)
        y = nl.ndarray(a.shape, nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=y, op=nl.exp, data=t, bias=bt, scale=0.5)
        out = nl.ndarray(a.shape, nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=y)
        return out

    got = nki.simulate(k)(x, bias)
    arg = (x * np.float32(0.5)) + bias  # assumption activation_affine=rounded: binary32 steps
    with mpmath.workprec(80):  # (not mp.prec: later tests' mpmath oracles keep their precision)
        want = np.array([[float(np.float32(float(mpmath.exp(mpmath.mpf(float(v)))))) for v in row] for row in arg],
                        dtype=np.float32)
    # mpmath at 80 bits then one rounding to binary32: correctly rounded except at near-ties, which
    # these random arguments are far from (checked: the double before rounding is not a tie).
    np.testing.assert_array_equal(got, want)


# --- limits ----------------------------------------------------------------------------------------

def test_psum_over_eight_banks_and_matmul_into_sbuf_are_found():
    @nki.jit
    def k(a):
        t = nl.ndarray((128, 128), a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a)
        tiles = [nl.ndarray((128, 512), nl.float32, buffer=nl.psum) for _ in range(9)]
        for p in tiles:
            nisa.memset(dst=p, value=0.0)
        keep = nl.ndarray((128, 512), nl.float32, buffer=nl.sbuf)
        for p in tiles:  # all nine written before any is read: live together
            nisa.tensor_copy(dst=keep, src=p)
        s = nl.ndarray((128, 128), nl.float32, buffer=nl.sbuf)
        nisa.nc_matmul(s, t, t)
        return a

    r = nki.run(k, np.ones((128, 128), ml_dtypes.bfloat16))
    rules = {f.rule: f for f in r.errors}
    assert set(rules) == {"psum_capacity", "matmul_output_memory"}
    assert rules["psum_capacity"].where == source_line(k, "tiles = ")
    assert "18432 B" in rules["psum_capacity"].message and "9 banks" in rules["psum_capacity"].message
    assert rules["matmul_output_memory"].where == source_line(k, "nisa.nc_matmul(s, t, t)")


def test_129_partitions_stop_the_kernel_at_the_allocation():
    @nki.jit
    def k(a):
        nl.ndarray((129, 4), nl.float32, buffer=nl.sbuf)
        return a

    r = nki.run(k, np.zeros(4, np.float32))
    assert [(f.rule, f.where) for f in r.errors] == [("partition_dim", source_line(k, "(129, 4)"))]
    assert not r.completed


# --- entry points ----------------------------------------------------------------------------------

def test_installed_resolves_nki_modules_and_restores_them():
    before = {name: sys.modules.get(name) for name in ("nki", "nki.language", "neuronxcc.nki.isa")}
    with nki.installed(target="trn1") as runs:
        import nki as aws_nki  # noqa: F811 - the name kernels import
        import nki.isa as aws_isa
        import nki.language as aws_nl
        from neuronxcc.nki import language as old_nl

        assert aws_nl is nl and old_nl is nl and aws_isa is nisa

        @aws_nki.jit
        def add_one(a):
            out = aws_nl.ndarray(a.shape, a.dtype, buffer=aws_nl.shared_hbm)
            t = aws_nl.ndarray((aws_nl.tile_size.pmax, a.shape[1]), a.dtype, buffer=aws_nl.sbuf)
            i = aws_nl.program_id(0) * aws_nl.num_programs(1) + aws_nl.program_id(1)
            rows = slice(i * 128, (i + 1) * 128)
            aws_isa.dma_copy(dst=t, src=a[rows, :])
            aws_isa.tensor_scalar(dst=t, data=t, op0=aws_nl.add, operand0=1.0)
            aws_isa.dma_copy(dst=out[rows, :], src=t)
            return out

        x = np.arange(4 * 128 * 8, dtype=np.float32).reshape(512, 8)
        np.testing.assert_array_equal(add_one[2, 2](x), x + 1)
        assert runs[-1].target == "trn1" and len(runs) == 1
    assert {name: sys.modules.get(name) for name in before} == before


def test_unimplemented_names_exist_and_raise_unsupported_with_the_kernel_line_when_called():
    @nki.jit
    def k(a):
        nisa.builtin_custom_op(a)
        return a

    @nki.jit
    def k2(a):
        nl.atomic_rmw(a, value=a, op=nl.add)
        return a

    with pytest.raises(nki.Unsupported, match=r"test_nki_core.py:\d+: .*nki.isa.builtin_custom_op"):
        nki.simulate(k)(np.zeros(1, np.float32))
    with pytest.raises(nki.Unsupported, match=r"test_nki_core.py:\d+: .*nki.language.atomic_rmw"):
        nki.simulate(k2)(np.zeros(1, np.float32))
    # A name NKI does not document is not there, as on AWS's package: hasattr is False.
    assert not hasattr(nl, "no_such_function") and not hasattr(nisa, "no_such_instruction")
    with pytest.raises(AttributeError, match="no attribute 'no_such_function'"):
        nl.no_such_function  # noqa: B018


def test_bad_assumptions_and_targets_name_the_valid_choices():
    with pytest.raises(ValueError, match="assume: trn2 has no assumption 'pe_ordr'; valid: pe_order"):
        nki.run(_copy_to, np.zeros((1, 1), np.float32), nl.float32, assume={"pe_ordr": "pairwise"})
    with pytest.raises(ValueError, match="valid: first_write, after_read, always, never"):
        nki.run(_copy_to, np.zeros((1, 1), np.float32), nl.float32, assume={"matmul_accumulate": "sometimes"})
    with pytest.raises(ValueError, match="valid: trn2, trn3, trn1, inf2"):
        nki.run(_copy_to, np.zeros((1, 1), np.float32), nl.float32, target="trn9")
    with pytest.raises(TypeError, match="masked arrays"):
        nki.run(_copy_to, np.ma.masked_array(np.zeros((1, 1), np.float32)), nl.float32)


def test_every_run_shows_every_assumption():
    r = nki.run(_copy_to, np.zeros((128, 1), np.float32), nl.float32)
    table = nki.assumptions_of("trn2")
    assert set(r.assumptions) == set(table)
    assert {"pe_order", "psum_rounding", "matmul_accumulate", "activation_affine"} <= set(r.assumptions)
    assert all(r.assumptions[k] == v["alternatives"][0] for k, v in table.items())


@pytest.mark.parametrize("op0,op1,reverse0,reverse1", [("multiply", "multiply", False, False),
                                                       ("multiply", "add", False, False),
                                                       ("subtract", "multiply", True, False),
                                                       ("add", "subtract", False, True)])
def test_tensor_scalar_fused_is_one_rounding_of_the_exact_value(op0, op1, reverse0, reverse1):
    # Assumption tensor_scalar_fusion=fused: (x op0 a) op1 b rounded once. Oracle: the exact value
    # as a fraction, rounded to fp32 (nearest even) by integer arithmetic.
    from fractions import Fraction

    def to_fp32(q: Fraction) -> float:
        if q == 0:
            return 0.0
        e = max(abs(q).numerator.bit_length() - abs(q).denominator.bit_length(), -126)
        while abs(q) >= Fraction(2) ** (e + 1):
            e += 1
        while e > -126 and abs(q) < Fraction(2) ** e:
            e -= 1
        m = abs(q) * Fraction(2) ** (23 - e)  # 24 significant bits above the point
        n, rem = divmod(m.numerator, m.denominator)
        if 2 * rem > m.denominator or (2 * rem == m.denominator and n % 2):
            n += 1
        return float((1 if q > 0 else -1) * n * Fraction(2) ** (e - 23))

    rng = np.random.default_rng(12)
    x = (rng.standard_normal((128, 8)) * np.exp2(rng.integers(-30, 30, (128, 8)))).astype(np.float32)
    # x = a = 1 + 2^-23, b = 1 - 2^-24: x * a * b = 1 + 3 * 2^-24 - 2^-70, which binary64 rounds to
    # the fp32 midpoint 1 + 3 * 2^-24 (then to 1 + 2^-22): only a single rounding gives 1 + 2^-23.
    a, b = np.float32(1 + 2.0 ** -23), np.float32(1 - 2.0 ** -24)
    x[0, 0] = a

    @nki.jit
    def k(t):
        s = nl.ndarray(t.shape, t.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=s, src=t)
        nisa.tensor_scalar(dst=s, data=s, op0=getattr(nl, op0), operand0=float(a), reverse0=reverse0,
                           op1=getattr(nl, op1), operand1=float(b), reverse1=reverse1)
        out = nl.ndarray(t.shape, t.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=s)
        return out

    got = nki.simulate(k, assume={"tensor_scalar_fusion": "fused"})(x)
    f = {"multiply": lambda p, q: p * q, "add": lambda p, q: p + q, "subtract": lambda p, q: p - q}
    for v, g in zip(x.ravel().tolist(), got.ravel().tolist()):
        first = f[op0](Fraction(float(a)), Fraction(v)) if reverse0 else f[op0](Fraction(v), Fraction(float(a)))
        exact = f[op1](Fraction(float(b)), first) if reverse1 else f[op1](first, Fraction(float(b)))
        assert g == to_fp32(exact), (v, g, to_fp32(exact))


def test_two_programs_writing_the_same_hbm_elements_are_a_race():
    # nki-library's cascaded_max test helper: each logical core zeroes the whole output, then stores
    # its half. The cores run at once on the hardware; numeq runs them one after another.
    @nki.jit
    def k(a):
        out = nl.ndarray((256, 64), nl.float32, buffer=nl.shared_hbm)
        pid = nl.program_id(0)
        zero = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=zero, value=0.0)
        for i in range(2):
            nisa.dma_copy(dst=out[128 * i:128 * (i + 1), :], src=zero)  # <zero all>
        t = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a[128 * pid:128 * (pid + 1), :])
        nisa.dma_copy(dst=out[128 * pid:128 * (pid + 1), :], src=t)  # <own half>
        return out

    a = np.arange(1, 256 * 64 + 1, dtype=np.float32).reshape(256, 64)  # no zeros: every zeroed element changes
    r = nki.run(k[2], a)
    (f,) = r.errors
    assert (f.rule, f.where) == ("shared_hbm_race", source_line(k, "<zero all>"))
    assert "program (1,) writes 8192 elements of out that program (0,) wrote other values" in f.message

    @nki.jit
    def halves(a):  # each program writes only its own rows: no race
        out = nl.ndarray((256, 64), nl.float32, buffer=nl.shared_hbm)
        pid = nl.program_id(0)
        t = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a[128 * pid:128 * (pid + 1), :])
        nisa.dma_copy(dst=out[128 * pid:128 * (pid + 1), :], src=t)
        return out

    r = nki.run(halves[2], a)
    assert r.errors == [] and np.array_equal(r.outputs, a)
