"""numeq.nki's gathers: nisa.nc_n_gather, nisa.local_gather, nisa.sequence_bounds and the older
interface's nl.gather_flattened and nl.load_transpose2d. Each oracle is written here from the
docstring it tests (nki.isa / nki.language API reference; local_gather's and sequence_bounds'
NumPy equivalents), in plain numpy or Python loops, never by calling numeq; comparisons are
bit for bit (a gather moves stored bits).
"""

from __future__ import annotations

import itertools

import ml_dtypes
import numpy as np
import pytest

from nki_support import errors, hbm, line_finder, sbuf
from numeq import nki

nl, nisa = nki.language, nki.isa
line_of = line_finder(__file__)

rng = np.random.default_rng(20250611)


def bits(a):
    """The stored bits of an array (bit-exact comparison, NaN included)."""
    a = np.ascontiguousarray(a)
    return a.view(f"u{a.dtype.itemsize}")


def bit_equal(a, b):
    return a.shape == b.shape and a.dtype == b.dtype and np.array_equal(bits(a), bits(b))


# --- nc_n_gather -------------------------------------------------------------------------------------

def n_gather_oracle(data, indices):
    """nki.isa.nc_n_gather docstring: per partition, the free dims of data flattened, element j of
    dst the element indices[p, j] of that flattened row; dst has indices' shape."""
    d = data.reshape(data.shape[0], -1)
    i = indices.reshape(indices.shape[0], -1).astype(np.int64)
    out = np.empty(i.shape, data.dtype)
    for p in range(i.shape[0]):
        for j in range(i.shape[1]):
            out[p, j] = d[p, i[p, j]]
    return out.reshape(indices.shape)


def test_nc_n_gather_every_index_tuple_exhaustive():
    """Every tuple of 3 indices into 4 elements (64 partitions, one tuple each), free dims
    (2, 2) flattened row-major, for four dtypes."""
    idx = np.array(list(itertools.product(range(4), repeat=3)), dtype=np.uint32).reshape(64, 3)
    datas = [rng.standard_normal((64, 2, 2)).astype(np.float32),
             rng.standard_normal((64, 2, 2)).astype(ml_dtypes.bfloat16),
             rng.integers(-2 ** 31, 2 ** 31 - 1, (64, 2, 2), dtype=np.int64).astype(np.int32),
             rng.integers(0, 255, (64, 2, 2)).astype(np.uint8)]
    datas[0][3, 1, 1] = np.nan  # bits move unchanged

    @nki.jit
    def gathers(idx, a, b, c, d):
        ti, outs = sbuf(idx), []
        for x in (a, b, c, d):
            o = nl.ndarray((64, 3), x.dtype, buffer=nl.sbuf)
            nisa.nc_n_gather(o, sbuf(x), ti)
            outs.append(hbm(o))
        return outs

    r = nki.run(gathers, idx, *datas)
    assert r.errors == []
    for x, out in zip(datas, r.outputs):
        assert bit_equal(out, n_gather_oracle(x, idx))
    ins = [i for i in r.trace if i.name == "nc_n_gather"]
    assert len(ins) == 4 and {i.engine for i in ins} == {"gpsimd"}


def test_nc_n_gather_shapes():
    """dst takes indices' free shape; data's free dims of any rank are flattened."""
    data = rng.standard_normal((7, 3, 5, 2)).astype(np.float32)
    idx = rng.integers(0, 30, (7, 4, 6)).astype(np.uint32)

    @nki.jit
    def k(data, idx):
        o = nl.ndarray((7, 4, 6), nl.float32, buffer=nl.sbuf)
        nisa.nc_n_gather(dst=o, data=sbuf(data), indices=sbuf(idx))
        flat = nl.ndarray((7, 24), nl.float32, buffer=nl.sbuf)  # same element count per partition
        nisa.nc_n_gather(flat, sbuf(data), sbuf(idx))
        return hbm(o), hbm(flat)

    r = nki.run(k, data, idx)
    assert r.errors == []
    assert bit_equal(r.outputs[0], n_gather_oracle(data, idx))
    assert bit_equal(r.outputs[1], n_gather_oracle(data, idx).reshape(7, 24))


def test_nc_n_gather_out_of_range_index():
    data = rng.standard_normal((4, 8)).astype(np.float32)
    idx = np.tile(np.arange(5, dtype=np.uint32), (4, 1))
    idx[2, 3] = 8  # one past the end

    @nki.jit
    def k(data, idx):
        o = nl.ndarray((4, 5), nl.float32, buffer=nl.sbuf)
        nisa.nc_n_gather(o, sbuf(data), sbuf(idx))  # <n_gather oob>
        return (hbm(o),)

    r = nki.run(k, data, idx)
    (f,) = errors(r, "index_bounds")
    assert f.where == line_of("<n_gather oob>") and "partition 2, element 8" in f.message and "nc_n_gather" in f.message
    # the element is undefined: stored, it leaves the output's element undefined
    (w,) = errors(r, "output_partly_written")
    assert "1 of 20 elements" in w.message
    out = r.outputs[0]
    ok = np.ones((4, 5), bool)
    ok[2, 3] = False
    assert np.array_equal(out[ok], n_gather_oracle(data, np.where(ok, idx, 0))[ok])


def test_nc_n_gather_documented_limits():
    data = rng.standard_normal((4, 8)).astype(np.float32)
    idx = rng.integers(0, 8, (4, 3))

    @nki.jit
    def wrong_dtypes(data, i32, u32):
        o = nl.ndarray((4, 3), nl.float32, buffer=nl.sbuf)
        nisa.nc_n_gather(o, sbuf(data), sbuf(i32))  # <int32 indices>
        b = nl.ndarray((4, 3), nl.bfloat16, buffer=nl.sbuf)
        nisa.nc_n_gather(b, sbuf(data), sbuf(u32))  # <bf16 dst>
        return hbm(o), hbm(b)

    r = nki.run(wrong_dtypes, data, idx.astype(np.int32), idx.astype(np.uint32))
    found = errors(r, "instruction_constraint")
    assert sorted(f.where for f in found) == sorted([line_of("<int32 indices>"), line_of("<bf16 dst>")])
    assert any("indices" in f.message and "uint32" in f.message for f in found)
    assert any("dst" in f.message and "data's dtype" in f.message for f in found)
    assert bit_equal(r.outputs[0], n_gather_oracle(data, idx))  # still computed

    @nki.jit
    def partitions(data, idx):
        o = nl.ndarray((4, 3), nl.float32, buffer=nl.sbuf)
        nisa.nc_n_gather(o, sbuf(data), sbuf(idx)[0:2])  # <partitions>
        return (hbm(o),)

    r = nki.run(partitions, data, idx.astype(np.uint32))
    (f,) = errors(r, "shape_mismatch")
    assert f.where == line_of("<partitions>") and "partition dimension" in f.message

    @nki.jit
    def sizes(data, idx):
        o = nl.ndarray((4, 4), nl.float32, buffer=nl.sbuf)
        nisa.nc_n_gather(o, sbuf(data), sbuf(idx))  # <sizes>
        return (hbm(o),)

    (f,) = errors(nki.run(sizes, data, idx.astype(np.uint32)), "shape_mismatch")
    assert f.where == line_of("<sizes>") and "indices" in f.message

    @nki.jit
    def in_psum(data, idx):
        p = nl.ndarray((4, 8), nl.float32, buffer=nl.psum)
        nisa.tensor_copy(p, sbuf(data))
        o = nl.ndarray((4, 3), nl.float32, buffer=nl.sbuf)
        nisa.nc_n_gather(o, p, sbuf(idx))  # <psum>
        return (hbm(o),)

    (f,) = errors(nki.run(in_psum, data, idx.astype(np.uint32)), "engine_access")
    assert f.where == line_of("<psum>")


def test_nc_n_gather_reads_only_gathered_elements():
    """A data tile written in part: gathering its written elements is no finding; gathering an
    unwritten one leaves that element undefined (moved as a DMA moves it), an error where it
    reaches something: here a reduction adding it to the written ones of its partition."""
    data = rng.standard_normal((2, 8)).astype(np.float32)

    @nki.jit
    def k(data, good, bad):
        t = nl.ndarray((2, 16), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t[:, 0:8], src=data)
        o = nl.ndarray((2, 4), nl.float32, buffer=nl.sbuf)
        nisa.nc_n_gather(o, t, sbuf(good))
        p = nl.ndarray((2, 4), nl.float32, buffer=nl.sbuf)
        nisa.nc_n_gather(p, t, sbuf(bad))  # <unwritten>
        s = nl.ndarray((2, 1), nl.float32, buffer=nl.sbuf)
        nisa.tensor_reduce(dst=s, op=nl.add, data=p, axis=1)  # <sum>
        return hbm(o), hbm(p)

    good = np.array([[7, 0, 3, 3], [1, 2, 6, 5]], np.uint32)
    bad = np.array([[7, 9, 0, 0], [1, 1, 1, 1]], np.uint32)
    r = nki.run(k, data, good, bad)
    (f,) = errors(r, "read_uninitialised")
    assert f.where == line_of("<sum>") and "1 element no instruction wrote" in f.message
    assert line_of("<unwritten>") in f.message  # where the undefined element came from
    (w,) = errors(r, "output_partly_written")
    assert "1 of 8 elements" in w.message
    assert bit_equal(r.outputs[0], n_gather_oracle(data, good))
    defined = bad < 8
    assert bit_equal(r.outputs[1][defined], n_gather_oracle(data, np.where(defined, bad, 0))[defined])


# --- local_gather ------------------------------------------------------------------------------------

def local_gather_oracle(src, index, n, valid=None):
    """nki.isa.local_gather docstring and its NumPy equivalent: each 16-partition group's indices
    flattened partition first (index[0, 0], index[1, 0], ..., index[15, 0], index[0, 1], ...), the
    first ``valid`` kept; every partition p of the group copies n elements of its own flattened row
    from each index: out[p, k, e] = src[p, indices_1d[k] + e]."""
    P = src.shape[0]
    s = src.reshape(P, -1)
    idx = index.reshape(P, -1).astype(np.int64)
    valid = valid or 16 * idx.shape[1]
    out = np.empty((P, valid, n), src.dtype)
    for g in range(P // 16):
        indices_1d = [int(idx[16 * g + r, c]) for c in range(idx.shape[1]) for r in range(16)][:valid]
        for p in range(16 * g, 16 * g + 16):
            for k, i in enumerate(indices_1d):
                for e in range(n):
                    out[p, k, e] = s[p, i + e]
    return out


@pytest.mark.parametrize("n", [1, 2, 4, 8, 16, 32])
def test_local_gather_every_elements_per_index(n):
    """Each documented num_elem_per_idx, 32 partitions (two cores with different indices), every
    start a multiple of n (the docstring's example passes index * num_elem_per_idx), the default
    num_valid_indices and a smaller one, both forms."""
    F = 4 * n * 4
    src = rng.standard_normal((32, F)).astype(np.float32)
    index = (rng.integers(0, F // n, (32, 3)) * n).astype(np.uint16)

    @nki.jit
    def k(src, index):
        ts, ti = sbuf(src), sbuf(index)
        a = nl.ndarray((32, 48 * n), nl.float32, buffer=nl.sbuf)
        nisa.local_gather(a, ts, ti, n)
        b = nl.ndarray((32, 20, n), nl.float32, buffer=nl.sbuf)
        nisa.local_gather(dst=b, src_buffer=ts, index=ti, num_elem_per_idx=n, num_valid_indices=20)
        c = nisa.local_gather(ts, ti, n, 20)
        return hbm(a), hbm(b), hbm(c)

    r = nki.run(k, src, index)
    assert r.errors == []
    a, b, c = r.outputs
    assert bit_equal(a, local_gather_oracle(src, index, n).reshape(32, 48 * n))
    assert bit_equal(b, local_gather_oracle(src, index, n, 20))
    assert bit_equal(c, b)  # the older form's new tile: (P, num_valid_indices, num_elem_per_idx)


def test_local_gather_every_index_exhaustive():
    """One core, every start 0..F-1 at some position of the partition-first order, several
    dtypes (bits unchanged), 128 partitions (eight cores, each its own indices)."""
    F = 40
    index = np.stack([rng.permutation(F)[:32].reshape(16, 2) for _ in range(8)]).reshape(128, 2)
    index[:16] = np.arange(32).reshape(2, 16).T  # core 0: starts 0..31 in order
    index = index.astype(np.uint16)
    srcs = [rng.standard_normal((128, 4, 11)).astype(np.float32),
            rng.standard_normal((128, 44)).astype(ml_dtypes.bfloat16),
            rng.integers(-128, 127, (128, 44)).astype(np.int8)]

    @nki.jit
    def k(index, a, b, c):
        ti, outs = sbuf(index), []
        for x in (a, b, c):
            o = nl.ndarray((128, 32, 4), x.dtype, buffer=nl.sbuf)
            nisa.local_gather(o, sbuf(x), ti, num_elem_per_idx=4)
            outs.append(hbm(o))
        return outs

    r = nki.run(k, index, *srcs)
    assert r.errors == []
    for x, out in zip(srcs, r.outputs):
        assert bit_equal(out, local_gather_oracle(x, index, 4))
    assert np.array_equal(r.outputs[0][0, :, 0], srcs[0].reshape(128, -1)[0, :32])  # core 0 in order
    ins = [i for i in r.trace if i.name == "local_gather"]
    assert {i.engine for i in ins} == {"gpsimd"}
    # SDK 2.26's estimate: 150 + valid * n / C, C = ((28 + 4n) / 4n) / min(4 / dtype_size, n)
    assert [i.cycles for i in ins] == [int(150 + 128 / ((28 + 16) / 16 / min(4 / s, 4))) for s in (4, 2, 1)]


def test_local_gather_docstring_example_shapes():
    """The docstring's example: src (128, 512, 4), index (128, 4) replicated from 16 partitions,
    num_elem_per_idx 4, num_valid_indices 64, the result as (128, 4, 16, 4)."""
    src = (rng.random((128, 512, 4)) * 100).astype(np.float32)
    per_core = rng.integers(0, 512, (16, 4))
    index = np.tile(per_core, (8, 1)).astype(np.uint16)

    @nki.jit
    def k(src, index_hw):
        o = nl.ndarray((128, 4, 16, 4), nl.float32, buffer=nl.sbuf)
        nisa.local_gather(o, sbuf(src), sbuf(index_hw), 4, 64)
        return (hbm(o),)

    r = nki.run(k, src, (index.astype(np.int64) * 4).astype(np.uint16))
    assert r.errors == []
    # the NumPy equivalent in its own terms: np.take of the (16, 512, 4) slices along axis 1
    expect = np.empty((128, 64, 4), np.float32)
    for g in range(8):
        expect[16 * g:16 * g + 16] = np.take(src[16 * g:16 * g + 16], index[16 * g:16 * g + 16].flatten(order="F"),
                                             axis=1)
    assert bit_equal(r.outputs[0], expect.reshape(128, 4, 16, 4))


def test_local_gather_documented_limits():
    src = rng.standard_normal((16, 64)).astype(np.float32)
    index = rng.integers(0, 16, (16, 2)).astype(np.uint16)

    @nki.jit
    def soft(src, index, i32):
        ts, ti = sbuf(src), sbuf(index)
        a = nl.ndarray((16, 96), nl.float32, buffer=nl.sbuf)
        nisa.local_gather(a, ts, ti, 3)  # <n 3>
        b = nl.ndarray((16, 32), nl.bfloat16, buffer=nl.sbuf)
        nisa.local_gather(b, ts, ti)  # <dtype>
        c = nl.ndarray((16, 32), nl.float32, buffer=nl.sbuf)
        nisa.local_gather(c, ts, sbuf(i32))  # <index int32>
        return hbm(a), hbm(c)

    r = nki.run(soft, src, index, index.astype(np.int32))
    found = {f.where: f.message for f in errors(r, "instruction_constraint")}
    assert "num_elem_per_idx 3" in found[line_of("<n 3>")]
    assert "no casting" in found[line_of("<dtype>")]
    assert "uint16" in found[line_of("<index int32>")]
    assert bit_equal(r.outputs[0], local_gather_oracle(src, index, 3).reshape(16, 96))

    many = np.tile(np.arange(257, dtype=np.uint16) % 60, (16, 1))  # 16 * 257 = 4112 indices per core

    @nki.jit
    def too_many(src, many):
        o = nl.ndarray((16, 4112), nl.float32, buffer=nl.sbuf)
        nisa.local_gather(o, sbuf(src), sbuf(many))  # <4096>
        return (hbm(o),)

    (f,) = errors(nki.run(too_many, src, many), "instruction_constraint")
    assert f.where == line_of("<4096>") and "4096" in f.message

    def fault(kernel, *arrays):
        r = nki.run(kernel, *arrays)
        (f,) = errors(r, "shape_mismatch")
        return f

    @nki.jit
    def valid_too_big(src, index):
        o = nl.ndarray((16, 33), nl.float32, buffer=nl.sbuf)
        nisa.local_gather(o, sbuf(src), sbuf(index), 1, 33)  # <33 valid>
        return (hbm(o),)

    f = fault(valid_too_big, src, index)
    assert f.where == line_of("<33 valid>") and "num_valid_indices 33" in f.message

    @nki.jit
    def eight_partitions(src, index):
        o = nl.ndarray((8, 16), nl.float32, buffer=nl.sbuf)
        nisa.local_gather(o, sbuf(src)[0:8], sbuf(index)[0:8])  # <8 partitions>
        return (hbm(o),)

    f = fault(eight_partitions, src, index)
    assert f.where == line_of("<8 partitions>") and "multiple of 16" in f.message

    @nki.jit
    def mismatch(src, index):
        idx = nl.ndarray((32, 2), nl.uint16, buffer=nl.sbuf)
        nisa.memset(idx, 0)
        o = nl.ndarray((16, 32), nl.float32, buffer=nl.sbuf)
        nisa.local_gather(o, sbuf(src), idx)  # <mismatch>
        return (hbm(o),)

    f = fault(mismatch, src, index)
    assert f.where == line_of("<mismatch>") and "same partition dimension" in f.message

    @nki.jit
    def dst_size(src, index):
        o = nl.ndarray((16, 31), nl.float32, buffer=nl.sbuf)
        nisa.local_gather(o, sbuf(src), sbuf(index))  # <dst size>
        return (hbm(o),)

    f = fault(dst_size, src, index)
    assert f.where == line_of("<dst size>") and "32" in f.message


def test_local_gather_out_of_bound_is_undefined():
    src = rng.standard_normal((16, 10)).astype(np.float32)
    index = np.zeros((16, 1), np.uint16)
    index[5, 0] = 8  # with 4 elements per index: elements 8..11 of 10

    @nki.jit
    def k(src, index):
        o = nl.ndarray((16, 16, 4), nl.float32, buffer=nl.sbuf)
        nisa.local_gather(o, sbuf(src), sbuf(index), 4)  # <local oob>
        return (hbm(o),)

    r = nki.run(k, src, index)
    (f,) = errors(r, "index_bounds")
    assert f.where == line_of("<local oob>") and "undefined" in f.message and "element 10" in f.message
    out = r.outputs[0]
    # every partition's slot 5 (index 8): elements 8, 9 gathered, 10 and 11 undefined
    assert np.array_equal(out[:, 5, :2], src[:, 8:10]) and np.array_equal(out[:, 0, :], src[:, 0:4])


def test_local_gather_groups_are_the_cores():
    """An operand whose 16-partition groups are not cores' (a view from partition 8) is a finding."""
    src = rng.standard_normal((32, 8)).astype(np.float32)
    index = np.zeros((32, 1), np.uint16)

    @nki.jit
    def k(src, index):
        o = nl.ndarray((16, 16), nl.float32, buffer=nl.sbuf)
        nisa.local_gather(o, sbuf(src)[8:24], sbuf(index)[16:32])  # <unaligned>
        return (hbm(o),)

    r = nki.run(k, src, index)
    found = [f for f in errors(r, "instruction_constraint") if "GpSimd core" in f.message]
    assert len(found) == 1 and found[0].where == line_of("<unaligned>") and "src_buffer" in found[0].message


# --- sequence_bounds ---------------------------------------------------------------------------------

def bounds_oracle(ids):
    """nki.isa.sequence_bounds docstring: for each element, [start, end) of the run of equal IDs
    holding it (its NumPy equivalent compares neighbours); padding (ID 0): start n, end -1."""
    n = len(ids)
    starts, ends = [], []
    for i, s in enumerate(ids):
        if s == 0:
            starts.append(n)
            ends.append(-1)
            continue
        a = i
        while a > 0 and ids[a - 1] == s:
            a -= 1
        b = i
        while b + 1 < n and ids[b + 1] == s:
            b += 1
        starts.append(a)
        ends.append(b + 1)
    return [starts, ends]


def test_sequence_bounds_docstring_example():
    ids = np.array([[0, 1, 1, 2, 2, 2, 0, 3, 3]], np.int32)

    @nki.jit
    def k(ids):
        o = nl.ndarray((1, 2, 9), nl.int32, buffer=nl.sbuf)
        nisa.sequence_bounds(o, sbuf(ids))
        return hbm(o), hbm(nisa.sequence_bounds(segment_ids=sbuf(ids)))

    r = nki.run(k, ids)
    assert r.errors == []
    expect = [[[9, 1, 1, 3, 3, 3, 9, 7, 7], [-1, 3, 3, 6, 6, 6, -1, 9, 9]]]
    assert r.outputs[0].tolist() == expect and r.outputs[1].tolist() == expect
    assert r.outputs[1].dtype == np.int32
    assert {i.engine for i in r.trace if i.name == "sequence_bounds"} == {"gpsimd"}


def test_sequence_bounds_every_short_sequence_exhaustive():
    """Every sequence of length 1..5 over IDs {0, 1, 2} (363 of them), int32 and float32 IDs into
    int32 and float32 destinations, both forms (the older one's dtype=)."""
    seqs = [s for n in range(1, 6) for s in itertools.product((0, 1, 2), repeat=n)]

    @nki.jit
    def k():
        outs = []
        for s in seqs:
            n = len(s)
            t = nl.ndarray((1, n), nl.int32, buffer=nl.sbuf)
            f = nl.ndarray((1, n), nl.float32, buffer=nl.sbuf)
            for j, x in enumerate(s):
                nisa.memset(t[0:1, j:j + 1], x)
                nisa.memset(f[0:1, j:j + 1], float(x))
            a = nl.ndarray((1, 2, n), nl.float32, buffer=nl.sbuf)
            nisa.sequence_bounds(dst=a, segment_ids=t)
            b = nisa.sequence_bounds(segment_ids=f, dtype=nl.int32)
            outs += [hbm(a), hbm(b)]
        return outs

    r = nki.run(k)
    assert r.errors == [] and len(seqs) == 363
    for s, a, b in zip(seqs, r.outputs[0::2], r.outputs[1::2]):
        expect = [bounds_oracle(list(s))]
        assert a.dtype == np.float32 and a.tolist() == expect
        assert b.dtype == np.int32 and b.tolist() == expect


def test_sequence_bounds_repeated_ids_and_flattened_free_dims():
    """IDs that come back after another segment start a new run (neighbours compared); a 2-D free
    shape is one sequence, row-major."""
    ids = np.array([[[3, 3, 1, 3], [0, 5, 5, 5]]], np.float32)

    @nki.jit
    def k(ids):
        o = nl.ndarray((1, 16), nl.float32, buffer=nl.sbuf)
        nisa.sequence_bounds(o, sbuf(ids))
        return (hbm(o),)

    r = nki.run(k, ids)
    assert r.errors == []
    assert r.outputs[0].reshape(2, 8).tolist() == bounds_oracle(ids.reshape(-1).tolist())
    assert r.outputs[0].reshape(2, 8).tolist() == [[0, 0, 2, 3, 8, 5, 5, 5], [2, 2, 3, 4, -1, 8, 8, 8]]


def test_sequence_bounds_documented_limits():
    @nki.jit
    def k(two, neg, frac, bf):
        a = nl.ndarray((2, 2, 3), nl.float32, buffer=nl.sbuf)
        nisa.sequence_bounds(a, sbuf(two))  # <two partitions>
        b = nl.ndarray((1, 2, 3), nl.int32, buffer=nl.sbuf)
        nisa.sequence_bounds(b, sbuf(neg))  # <negative>
        c = nl.ndarray((1, 2, 3), nl.float32, buffer=nl.sbuf)
        nisa.sequence_bounds(c, sbuf(frac))  # <fraction>
        d = nl.ndarray((1, 2, 3), nl.float32, buffer=nl.sbuf)
        nisa.sequence_bounds(d, sbuf(bf))  # <bf16>
        return (hbm(a),)

    two = np.array([[1, 1, 0], [2, 3, 3]], np.float32)
    r = nki.run(k, two, np.array([[1, -1, 1]], np.int32), np.array([[1, 1.5, 1.5]], np.float32),
                np.ones((1, 3), ml_dtypes.bfloat16))
    found = {f.where: f.message for f in errors(r, "instruction_constraint")}
    assert "partition dimension must be 1" in found[line_of("<two partitions>")]
    assert "non-negative integers" in found[line_of("<negative>")]
    assert "non-negative integers" in found[line_of("<fraction>")]
    assert "float32 or int32" in found[line_of("<bf16>")]
    # each partition bounded as a row of its own (the NumPy equivalent's apply_along_axis)
    assert r.outputs[0].tolist() == [bounds_oracle([1, 1, 0]), bounds_oracle([2, 3, 3])]

    @nki.jit
    def wrong_dst(ids):
        o = nl.ndarray((1, 5), nl.float32, buffer=nl.sbuf)
        nisa.sequence_bounds(o, sbuf(ids))  # <dst shape>
        return (hbm(o),)

    (f,) = errors(nki.run(wrong_dst, np.ones((1, 3), np.float32)), "shape_mismatch")
    assert f.where == line_of("<dst shape>")


# --- nl.gather_flattened, nl.load_transpose2d ---------------------------------------------------------

def test_gather_flattened_docstring_example():
    """SDK 2.26's nl.gather_flattened docstring: data (2, 2, 2), indices (2, 2, 2) -> the values
    it lists."""
    data = np.arange(1, 9, dtype=np.float32).reshape(2, 2, 2)
    idx = np.array([[[0, 1], [1, 3]], [[3, 3], [1, 0]]], np.uint32)

    @nki.jit
    def k(data, idx):
        out = nl.gather_flattened(nl.load(data), nl.load(idx))
        o = nl.ndarray(out.shape, out.dtype, buffer=nl.shared_hbm)
        nl.store(o, out)
        return (o,)

    r = nki.run(k, data, idx)
    assert r.errors == []
    assert r.outputs[0].tolist() == [[[1., 2.], [2., 4.]], [[8., 8.], [6., 5.]]]
    assert [i.name for i in r.trace if i.engine == "gpsimd"] == ["nc_n_gather"]


def test_gather_flattened_dtype_and_axis():
    data = rng.standard_normal((8, 3, 7)).astype(np.float32)
    idx = rng.integers(0, 21, (8, 12)).astype(np.uint32)

    @nki.jit
    def k(data, idx):
        g = nl.gather_flattened(data=nl.load(data), indices=nl.load(idx), dtype=nl.bfloat16)
        o = nl.ndarray(g.shape, g.dtype, buffer=nl.shared_hbm)
        nl.store(o, g)
        return (o,)

    r = nki.run(k, data, idx)
    assert r.errors == []
    expect = np.take_along_axis(data.reshape(8, -1), idx.astype(np.int64), axis=1)
    assert bit_equal(r.outputs[0], expect.astype(ml_dtypes.bfloat16))  # one rounding, to nearest even

    @nki.jit
    def axis1(data, idx):
        return nl.gather_flattened(nl.load(data), nl.load(idx), axis=1)

    with pytest.raises(nki.Unsupported, match="axis=1"):
        nki.run(axis1, data, idx)

    @nki.jit
    def out_of_range(data, idx):
        g = nl.gather_flattened(nl.load(data), nl.load(idx))  # <nl oob>
        o = nl.ndarray(g.shape, g.dtype, buffer=nl.shared_hbm)
        nl.store(o, g)
        return (o,)

    bad = idx.copy()
    bad[0, 0] = 21
    (f,) = errors(nki.run(out_of_range, data, bad), "index_bounds")
    assert f.where == line_of("<nl oob>")


@pytest.mark.parametrize("dtype", [np.float32, ml_dtypes.bfloat16, np.int32, np.uint8])
def test_load_transpose2d(dtype):
    src = (rng.standard_normal((40, 96)) * 50).astype(dtype)

    @nki.jit
    def k(src):
        t = nl.load_transpose2d(src)
        o = nl.ndarray(t.shape, t.dtype, buffer=nl.shared_hbm)
        nl.store(o, t)
        return (o,)

    r = nki.run(k, src)
    assert r.errors == []
    assert bit_equal(r.outputs[0], np.ascontiguousarray(src.T))
    assert [i.name for i in r.trace if i.engine == "dma"][:2] == ["dma_transpose", "dma_copy"]


def test_load_transpose2d_dtype_and_limits():
    src = rng.standard_normal((24, 64)).astype(np.float32)

    @nki.jit
    def cast(src):
        t = nl.load_transpose2d(src, dtype=nl.bfloat16)
        o = nl.ndarray(t.shape, t.dtype, buffer=nl.shared_hbm)
        nl.store(o, t)
        return (o,)

    r = nki.run(cast, src)
    assert r.errors == []
    assert bit_equal(r.outputs[0], np.ascontiguousarray(src.T).astype(ml_dtypes.bfloat16))

    @nki.jit
    def from_sbuf(src):
        t = nl.load_transpose2d(nl.load(src))  # <from sbuf>
        o = nl.ndarray(t.shape, t.dtype, buffer=nl.shared_hbm)
        nl.store(o, t)
        return (o,)

    r = nki.run(from_sbuf, src)
    (f,) = errors(r, "instruction_constraint")
    assert f.where == line_of("<from sbuf>") and "HBM" in f.message
    assert bit_equal(r.outputs[0], np.ascontiguousarray(src.T))

    @nki.jit
    def three_d(src):
        return nl.load_transpose2d(src)  # <3-D>

    (f,) = errors(nki.run(three_d, np.ones((2, 3, 4), np.float32)), "shape_mismatch")
    assert f.where == line_of("<3-D>") and "2-D" in f.message


def test_rows_and_names_are_implemented():
    from numeq.nki.instructions.table import INSTRUCTIONS

    for name in ("nc_n_gather", "local_gather", "sequence_bounds"):
        assert INSTRUCTIONS[name].implemented and INSTRUCTIONS[name].engine == "gpsimd"
    for name in ("gather_flattened", "load_transpose2d"):
        assert not getattr(getattr(nl, name), "_numeq_placeholder", False)
