"""Indirect DMA (gather and scatter by an index tile), in both interfaces, against numpy's fancy
indexing: rows chosen at run time, out-of-bounds indices refused or skipped as oob_mode says, a
read-modify-write scatter accumulating repeated rows element by element."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from numeq import nki

nl, nisa = nki.language, nki.isa
RNG = np.random.default_rng(41)


def _gather_kernel(oob_mode=None):
    @nki.jit
    def k(data, indices):
        P, F = indices.shape[0], data.shape[1]
        idx = nl.ndarray((P, 1), nl.int32, buffer=nl.sbuf)
        nisa.dma_copy(dst=idx, src=indices)
        dst = nl.ndarray((P, F), data.dtype, buffer=nl.sbuf)
        nisa.memset(dst, -1.0)
        src = data.ap(pattern=[[F, P], [1, F]], vector_offset=idx, indirect_dim=0)
        if oob_mode is None:
            nisa.dma_copy(dst=dst, src=src)
        else:
            nisa.dma_copy(dst=dst, src=src, oob_mode=oob_mode)
        out = nl.ndarray((P, F), data.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=dst)
        return out
    return k


def test_vector_indirection_gathers_rows():
    data = RNG.standard_normal((256, 64)).astype(np.float32)
    indices = RNG.integers(0, 256, (128, 1)).astype(np.int32)
    r = nki.run(_gather_kernel(), data, indices)
    assert not r.errors and np.array_equal(r.outputs, data[indices[:, 0]])
    assert any(i.detail.get("indirect") for i in r.trace)


def test_out_of_bounds_rows_are_an_error_or_skipped():
    data = RNG.standard_normal((64, 16)).astype(np.float32)
    indices = np.array([[0], [63], [64], [-1], [5], [1000], [2], [7]], np.int32)
    with pytest.raises(nki.KernelFault, match=r"\[index_bounds\] indirect access"):
        nki.simulate(_gather_kernel())(data, indices)
    out = nki.run(_gather_kernel(nisa.oob_mode.skip), data, indices).outputs
    inside = (indices[:, 0] >= 0) & (indices[:, 0] < 64)
    assert np.array_equal(out[inside], data[indices[inside, 0]])
    assert (out[~inside] == -1).all()  # skipped rows keep what dst held


def test_older_interface_index_tile_gathers_and_scatters():
    @nki.jit
    def gather(data, indices):
        out = nl.ndarray((64, 32), data.dtype, buffer=nl.shared_hbm)
        i_p, i_f = nl.arange(64)[:, None], nl.arange(32)[None, :]
        idx = nl.load(indices[i_p])
        nl.store(out, value=nl.load(data[idx[i_p, 0], i_f]))
        return out

    @nki.jit
    def scatter(values, indices):
        out = nl.ndarray((128, 32), values.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.zeros((128, 32), values.dtype))
        i_p, i_f = nl.arange(64)[:, None], nl.arange(32)[None, :]
        idx = nl.load(indices[i_p])
        nl.store(out[idx, i_f], value=nl.load(values))
        return out

    data = RNG.standard_normal((128, 32)).astype(np.float32)
    indices = RNG.permutation(128)[:64].astype(np.int32).reshape(64, 1)
    assert np.array_equal(nki.run(gather, data, indices).outputs, data[indices[:, 0]])
    values = RNG.standard_normal((64, 32)).astype(np.float32)
    want = np.zeros((128, 32), np.float32)
    want[indices[:, 0]] = values
    assert np.array_equal(nki.run(scatter, values, indices).outputs, want)


def test_read_modify_write_scatter_accumulates_repeated_rows_in_order():
    @nki.jit
    def k(values, indices, base):
        out = nl.ndarray(base.shape, base.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=base)
        P, F = values.shape
        idx = nl.ndarray((P, 1), nl.int32, buffer=nl.sbuf)
        nisa.dma_copy(dst=idx, src=indices)
        v = nl.ndarray((P, F), values.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=v, src=values)
        nisa.dma_copy(dst=out.ap(pattern=[[F, P], [1, F]], vector_offset=idx, indirect_dim=0), src=v,
                      dst_rmw_op=nl.add)
        return out

    values = RNG.standard_normal((16, 8)).astype(np.float32)
    indices = np.array([[3], [1], [3], [0], [3], [2], [1], [7], [6], [5], [4], [3], [2], [1], [0], [7]], np.int32)
    base = RNG.standard_normal((8, 8)).astype(np.float32)
    want = base.copy()
    for p in range(16):  # in partition order, each add rounded to fp32 (np.add.at's order)
        want[indices[p, 0]] = want[indices[p, 0]] + values[p]
    got = nki.run(k, values, indices, base).outputs
    assert np.array_equal(got, want)


def test_scalar_indirection_offsets_every_partition_alike():
    @nki.jit
    def k(data, start):
        s = nl.ndarray((1, 1), nl.int32, buffer=nl.sbuf)
        nisa.dma_copy(dst=s, src=start)
        dst = nl.ndarray((4, 16), data.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=dst, src=data.ap(pattern=[[16, 4], [1, 16]], scalar_offset=s, indirect_dim=0))
        out = nl.ndarray((4, 16), data.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=dst)
        return out

    data = RNG.standard_normal((32, 16)).astype(np.float32)
    got = nki.run(k, data, np.array([[9]], np.int32)).outputs
    assert np.array_equal(got, data[9:13])


def test_an_indirect_pattern_reads_the_storage_as_the_dtype_it_names():
    # nki-library's TensorView: .ap(pattern, offset, scalar_offset=, indirect_dim=, dtype=). Here
    # uint32 words read as bf16 pairs: steps, counts and the indirect dim's stride in bf16 elements.
    @nki.jit
    def k(data, start):
        s = nl.ndarray((1, 1), nl.int32, buffer=nl.sbuf)
        nisa.dma_copy(dst=s, src=start)
        dst = nl.ndarray((4, 16), nl.bfloat16, buffer=nl.sbuf)
        nisa.dma_copy(dst=dst, src=data.ap(pattern=[[16, 4], [1, 16]], offset=0, scalar_offset=s, indirect_dim=0,
                                           dtype=nl.bfloat16))
        out = nl.ndarray((4, 16), nl.bfloat16, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=dst)
        return out

    values = RNG.standard_normal((32, 16)).astype(ml_dtypes.bfloat16)
    words = values.view(np.uint32)  # (32, 8): two bf16 per word
    got = nki.run(k, words, np.array([[9]], np.int32)).outputs
    assert np.array_equal(got.view(np.uint16), values[9:13].view(np.uint16))


def test_float_indices_are_refused():
    @nki.jit
    def k(data, indices):
        idx = nl.ndarray((4, 1), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=idx, src=indices)
        dst = nl.ndarray((4, 16), data.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=dst, src=data.ap(pattern=[[16, 4], [1, 16]], vector_offset=idx, indirect_dim=0))
        return data

    r = nki.run(k, np.zeros((8, 16), np.float32), np.zeros((4, 1), np.float32))
    assert "indirect_index" in [f.rule for f in r.errors]
