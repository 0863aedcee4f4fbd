"""NkiTensor's view API (nki.language API reference, class NkiTensor; the NKI language guide's
"Tensor Values" and "Tensor Indexing"; the NKI Access Patterns deep-dive) on numeq's tensors.

Each view method is judged against numpy's view of the same storage: a kernel fills a tensor, reads
it through the view (a DMA out) and writes through the view (a DMA in), and the buffer read back
must be what numpy's equivalent view reads and writes. The docstrings' examples run as kernels of
their own, and each documented constraint is planted and must be refused naming its parameter.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np
import pytest

from nki_support import source_line
from numeq import nki

nl, nisa = nki.language, nki.isa
RNG = np.random.default_rng(7)
MEMORIES = {"sbuf": nl.sbuf, "hbm": nl.shared_hbm}


def _view_roundtrip(shape: tuple, memory: str, view: Callable, np_view: Callable, write: bool = True):
    """(what the view reads, the buffer after a write through it), and numpy's (the same view of an
    array holding the same values, and that array after the same write)."""
    x = np.arange(math.prod(shape), dtype=np.float32).reshape(shape)
    want_read = np.array(np_view(x))
    y = -1.0 - np.arange(want_read.size, dtype=np.float32).reshape(want_read.shape)

    @nki.jit
    def kernel(x, y):
        t = nl.ndarray(shape, nl.float32, buffer=MEMORIES[memory])
        nisa.dma_copy(dst=t, src=x)
        v = view(t)
        assert v.shape == want_read.shape
        read = nl.ndarray(v.shape, nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=read, src=v)
        if write:
            nisa.dma_copy(dst=v, src=y)
        after = nl.ndarray(shape, nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=after, src=t)
        return read, after

    read, after = nki.simulate(kernel)(x, y)
    want_after = x.copy()
    if write:
        np_view(want_after)[...] = y
    return read, after, want_read, want_after


VIEWS = [  # (name, shape, memory, the view, numpy's view of the same storage)
    ("permute", (16, 4, 8), "sbuf", lambda t: t.permute((0, 2, 1)), lambda a: a.transpose(0, 2, 1)),
    ("permute_hbm", (4, 6, 5), "hbm", lambda t: t.permute((2, 0, 1)), lambda a: a.transpose(2, 0, 1)),
    ("permute_varargs", (4, 6, 5), "hbm", lambda t: t.permute(1, 0, 2), lambda a: a.transpose(1, 0, 2)),
    ("expand_dim", (16, 12), "sbuf", lambda t: t.expand_dim(1), lambda a: a[:, None, :]),
    ("expand_dim_last", (16, 12), "sbuf", lambda t: t.expand_dim(2), lambda a: a[:, :, None]),
    ("expand_dim_hbm_0", (6, 12), "hbm", lambda t: t.expand_dim(0), lambda a: a[None]),
    ("squeeze_dim", (16, 1, 12), "sbuf", lambda t: t.squeeze_dim(1), lambda a: a[:, 0, :]),
    ("squeeze_dim_hbm_0", (1, 6, 12), "hbm", lambda t: t.squeeze_dim(0), lambda a: a[0]),
    ("reshape_dim", (16, 24), "sbuf", lambda t: t.reshape_dim(1, (4, 6)), lambda a: a.reshape(16, 4, 6)),
    ("reshape_dim_infer", (16, 24), "sbuf", lambda t: t.reshape_dim(1, [-1, 3, 2]), lambda a: a.reshape(16, 4, 3, 2)),
    ("reshape_dim_strided", (16, 24), "sbuf", lambda t: t[:, ::2].reshape_dim(1, (3, 4)),
     lambda a: a[:, ::2].reshape(16, 3, 4)),
    ("reshape_dim_trivial_0", (16, 24), "sbuf", lambda t: t.reshape_dim(0, (16,)), lambda a: a),
    ("reshape_dim_hbm_0", (12, 5), "hbm", lambda t: t.reshape_dim(0, (3, 4)), lambda a: a.reshape(3, 4, 5)),
    ("flatten_dims", (16, 2, 3, 4), "sbuf", lambda t: t.flatten_dims(1, 2), lambda a: a.reshape(16, 6, 4)),
    ("flatten_dims_sliced", (16, 4, 6), "sbuf", lambda t: t[:, 1:3, :].flatten_dims(1, 2),
     lambda a: a[:, 1:3, :].reshape(16, 12)),
    ("flatten_dims_hbm_0", (3, 4, 5), "hbm", lambda t: t.flatten_dims(0, 1), lambda a: a.reshape(12, 5)),
    ("reshape_keyword", (16, 4, 6), "sbuf", lambda t: t.reshape(shape=(16, 24)), lambda a: a.reshape(16, 24)),
    ("reshape_tuple", (16, 4, 6), "sbuf", lambda t: t.reshape((16, 2, 12)), lambda a: a.reshape(16, 2, 12)),
    ("reshape_positional", (16, 4, 6), "sbuf", lambda t: t.reshape(16, 3, 8), lambda a: a.reshape(16, 3, 8)),
    ("reshape_list", (16, 4, 6), "sbuf", lambda t: t.reshape([16, 24]), lambda a: a.reshape(16, 24)),
    ("reshape_partition_rows", (16, 8, 6), "sbuf", lambda t: t[2:6].reshape((4, 48)),
     lambda a: a[2:6].reshape(4, 48)),
    ("reshape_hbm", (2, 3, 4, 5), "hbm", lambda t: t.reshape(shape=(6, 4, 5)), lambda a: a.reshape(6, 4, 5)),
    ("rearrange", (16, 24), "sbuf", lambda t: t.rearrange(("b", ("h", "w")), ("b", "w", "h"), {"h": 4}),
     lambda a: a.reshape(16, 4, 6).transpose(0, 2, 1)),
    ("rearrange_hbm_merge", (2, 3, 4), "hbm", lambda t: t.rearrange(("a", "b", "c"), ("c", ("a", "b"))),
     lambda a: a.transpose(2, 0, 1).reshape(4, 6)),
    ("rearrange_split_hbm", (6, 4), "hbm", lambda t: t.rearrange((("a", "b"), "c"), ("b", "a", "c"), {"a": 2}),
     lambda a: a.reshape(2, 3, 4).transpose(1, 0, 2)),
    ("flatten_dims_stepped", (4, 6, 8), "hbm", lambda t: t[:, :, ::2].flatten_dims(1, 2),
     lambda a: a[:, :, ::2].reshape(4, 24)),
    ("slice", (16, 64), "sbuf", lambda t: t.slice(1, 8, 24), lambda a: a[:, 8:24]),
    ("slice_step", (16, 64), "sbuf", lambda t: t.slice(dim=1, start=0, end=64, step=2), lambda a: a[:, 0:64:2]),
    ("slice_partitions", (16, 64), "sbuf", lambda t: t.slice(0, 4, 12), lambda a: a[4:12]),
    ("slice_chain", (16, 64), "sbuf", lambda t: t.slice(0, 0, 16).slice(1, 0, 64, 2).slice(0, 0, 8).slice(1, 0, 16),
     lambda a: a[0:16, 0:64:2][0:8, 0:16]),
    ("select", (16, 8, 12), "sbuf", lambda t: t.select(1, 3), lambda a: a[:, 3, :]),
    ("select_keeps_2d", (16, 8), "sbuf", lambda t: t.select(1, 5), lambda a: a[:, 5:6]),
    ("select_hbm_0", (4, 6, 8), "hbm", lambda t: t.select(0, 2), lambda a: a[2]),
    ("getitem_negative", (16, 8, 12), "sbuf", lambda t: t[:, -1, -4:], lambda a: a[:, -1, -4:]),
    ("getitem_negative_hbm", (6, 8), "hbm", lambda t: t[-2], lambda a: a[-2]),
    ("composition", (16, 4, 16), "sbuf", lambda t: t[0:8, :, :].permute((0, 2, 1))[:, 0, :],
     lambda a: a[0:8].transpose(0, 2, 1)[:, 0, :]),
]


@pytest.mark.parametrize("name,shape,memory,view,np_view", VIEWS, ids=[v[0] for v in VIEWS])
def test_view_reads_and_writes_the_storage_numpy_does(name: str, shape: tuple, memory: str, view: Callable,
                                                      np_view: Callable) -> None:
    read, after, want_read, want_after = _view_roundtrip(shape, memory, view, np_view)
    assert np.array_equal(read, want_read)
    assert np.array_equal(after, want_after)


def test_broadcast_repeats_a_size_1_dim_with_stride_0() -> None:
    read, _, want, _ = _view_roundtrip((16, 1, 12), "sbuf", lambda t: t.broadcast(1, 5),
                                       lambda a: np.broadcast_to(a, (16, 5, 12)), write=False)
    assert np.array_equal(read, want)


def _inside(body: Callable, *arrays: np.ndarray) -> Any:
    """Run ``body`` (given the kernel's HBM inputs) inside a kernel; its return value comes back."""
    seen: dict = {}

    @nki.jit
    def kernel(*args):
        seen["value"] = body(*args)
        out = nl.ndarray((1, 1), nl.float32, buffer=nl.shared_hbm)
        one = nl.ndarray((1, 1), nl.float32, buffer=nl.sbuf)
        nisa.memset(one, 0.0)
        nisa.dma_copy(dst=out, src=one)
        return out

    nki.simulate(kernel)(*(arrays or (np.zeros((1, 1), np.float32),)))
    return seen["value"]


# --- layout attributes ----------------------------------------------------------------------------
def test_strides_offset_and_pattern_are_numpy_s_in_elements() -> None:
    def body(_):
        t = nl.ndarray((16, 4, 8), nl.float32, buffer=nl.sbuf)
        out = []
        x = np.zeros((16, 4, 8), np.float32)
        for view, np_view in ((lambda a: a, lambda a: a), (lambda a: a[2:10, 1:3, ::2], lambda a: a[2:10, 1:3, ::2]),
                              (lambda a: a.permute((0, 2, 1)), lambda a: a.transpose(0, 2, 1)),
                              (lambda a: a[:, 3, :], lambda a: a[:, 3, :])):
            v, w = view(t), np_view(x)
            offset = (w.__array_interface__["data"][0] - x.__array_interface__["data"][0]) // 4
            out.append((v.strides, tuple(s // 4 for s in w.strides), v.offset, offset, v.get_pattern(),
                        [[s // 4, n] for s, n in zip(w.strides, w.shape)]))
        return out

    for strides, want_strides, offset, want_offset, pattern, want_pattern in _inside(body):
        assert strides == want_strides and offset == want_offset and pattern == want_pattern


def test_language_guide_anatomy_of_a_tensor() -> None:
    def body(_):
        t = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
        assert t.shape == (128, 64) and t.strides == (64, 1) and t.offset == 0
        assert t.dtype == nl.float32 and t.buffer == nl.sbuf and t.ndim == 2 and t.size == 128 * 64
        u = t.slice(dim=1, start=8, end=24)  # the NKI Access Patterns deep-dive's example
        assert u.get_pattern() == [[64, 128], [1, 16]] and u.offset == 8
        v = t.ap(pattern=[[64, 128], [1, 16]], offset=8)
        assert v.get_pattern() == u.get_pattern() and v.offset == u.offset
        pattern = t.get_pattern()
        pattern[0][1] = 64
        assert t.ap(pattern=pattern).shape == (64, 64) and t.get_pattern()[0][1] == 128  # a copy
        g = nl.ndarray((64, 64, 64), dtype=nl.float32, buffer=nl.sbuf)
        assert g[0, 0, 10].shape == (1, 1) and g[:, 0].shape == (64, 64) and g[:, 0, 10].shape == (64, 1)
        assert g[0, ..., :].shape == (1, 64, 64) and g[:, :, ::2].shape == (64, 64, 32)
        h = nl.ndarray((4, 128, 32), dtype=nl.float32, buffer=nl.shared_hbm)
        assert h[0, :, :].shape == (128, 32)
        return True

    assert _inside(body)


def test_is_contiguous_as_documented() -> None:
    def body(_):
        s = nl.ndarray((128, 4, 6), nl.float32, buffer=nl.sbuf)
        h = nl.ndarray((8, 4, 6), nl.float32, buffer=nl.shared_hbm)
        return {
            "fresh": s.is_contiguous(), "fresh_hbm": h.is_contiguous(),
            "partition_slice": s[0:64:2].is_contiguous(),  # the partition dim is not counted on chip
            "free_prefix": s[:, 0:2, :].is_contiguous(),  # per partition: 2 x 6 dense
            "free_gap": s[:, :, 0:3].is_contiguous(),
            "hbm_rows": h[2:5].is_contiguous(), "hbm_gap": h[:, 0:2, :].is_contiguous(),
            "permuted": s.permute((0, 2, 1)).is_contiguous(),
            "size_1_dim": s[:, 1:2, :].is_contiguous(),
            "reshaped": s.reshape((128, 24)).is_contiguous(),
        }

    got = _inside(body)
    assert got == {"fresh": True, "fresh_hbm": True, "partition_slice": True, "free_prefix": True,
                   "free_gap": False, "hbm_rows": True, "hbm_gap": False, "permuted": False,
                   "size_1_dim": True, "reshaped": True}


def test_docstring_examples_shapes() -> None:
    def body(_):
        t = nl.ndarray((128, 4, 8), dtype=nl.float32, buffer=nl.sbuf)
        shapes = [t.permute((0, 2, 1)).shape]
        shapes.append(nl.ndarray((128, 1, 64), dtype=nl.float32, buffer=nl.sbuf).broadcast(1, 8).shape)
        shapes.append(nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf).expand_dim(1).shape)
        shapes.append(nl.ndarray((128, 1, 64), dtype=nl.float32, buffer=nl.sbuf).squeeze_dim(1).shape)
        r = nl.ndarray((128, 24), dtype=nl.float32, buffer=nl.sbuf)
        shapes += [r.reshape_dim(1, (4, 6)).shape, r.reshape_dim(1, (4, -1)).shape]
        shapes.append(nl.ndarray((128, 2, 3, 4), dtype=nl.float32, buffer=nl.sbuf).flatten_dims(1, 2).shape)
        q = nl.ndarray((128, 4, 6), dtype=nl.float32, buffer=nl.sbuf)
        shapes += [q.reshape((128, 24)).shape, q.reshape((128, 2, 12)).shape]
        shapes.append(r.rearrange(('b', ('h', 'w')), ('b', 'w', 'h'), {'h': 4}).shape)
        s = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
        shapes += [s.slice(1, 8, 24, 1).shape, s.slice(1, 0, 64, 2).shape]
        shapes.append(nl.ndarray((128, 8, 64), dtype=nl.float32, buffer=nl.sbuf).select(1, 3).shape)
        shapes += [s.view(nl.uint8).shape, s.view(nl.int32).shape]
        shapes.append(nl.ndarray((128, 256), dtype=nl.uint8, buffer=nl.sbuf).view(nl.float32).shape)
        shapes.append(s.reinterpret_cast(nl.bfloat16).shape)
        u = t[0:64, :, :].permute((0, 2, 1))[:, 0, :]
        shapes.append(u.shape)
        return shapes

    assert _inside(body) == [(128, 8, 4), (128, 8, 64), (128, 1, 64), (128, 64), (128, 4, 6), (128, 4, 6),
                             (128, 6, 4), (128, 24), (128, 2, 12), (128, 6, 4), (128, 16), (128, 32), (128, 64),
                             (128, 256), (128, 64), (128, 64), (128, 128), (64, 4)]


def test_views_share_storage_writes_land_in_the_buffer() -> None:
    """The language guide's "Views share storage": memset through a reshape is read through a slice."""
    @nki.jit
    def kernel(x):
        t = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        u = t.reshape((128, 8, 8))
        nisa.memset(dst=u[:, 2:4, :], value=1.0)
        v = t[:, 16:32]
        out = nl.ndarray((128, 16), nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=v)
        return out

    x = RNG.standard_normal((128, 64)).astype(np.float32)
    assert (nki.simulate(kernel)(x) == 1.0).all()


def test_views_of_a_written_tile_keep_its_written_mask() -> None:
    """A view of part of a tile reads as written where the tile was written, unwritten elsewhere."""
    @nki.jit
    def kernel(x):
        t = nl.ndarray((16, 4, 8), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t.permute((0, 2, 1))[:, :, 0:2], src=x)
        out = nl.ndarray((16, 2, 8), nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=t.slice(1, 0, 2))
        bad = nl.ndarray((16, 8), nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=bad, src=t.select(1, 3))  # never written
        return out, bad

    x = RNG.standard_normal((16, 8, 2)).astype(np.float32)
    r = nki.run(kernel, x)
    # out is whole (the written part of t); bad holds only what nothing wrote
    assert [(f.rule, f.message.split(" holds")[0]) for f in r.errors] == [("output_unwritten", "output bad")]
    assert np.array_equal(r.outputs[0], x.transpose(0, 2, 1))


# --- dynamic select and vector_select ---------------------------------------------------------------
def test_dynamic_select_on_hbm_reads_and_writes_the_chosen_slice() -> None:
    """The deep-dive's scalar_dynamic_select: A.select(0, batch_idx) with batch_idx set to 3."""
    @nki.jit
    def kernel(A, which):
        batch_idx = nl.ndarray((1, 1), nl.int32, buffer=nl.sbuf)
        nisa.dma_copy(dst=batch_idx, src=which)
        src = A.select(0, batch_idx)
        assert src.shape == (128, 512) and src.is_indirect() and not A.is_indirect()
        assert src.strides == (512, 1) and src.get_pattern() == [[512, 128], [1, 512]]
        result = nl.ndarray((128, 512), A.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(src=src, dst=result[...])
        dst = nl.ndarray((4, 128, 512), A.dtype, buffer=nl.shared_hbm)
        zero = nl.ndarray((128, 512), A.dtype, buffer=nl.sbuf)
        nisa.memset(zero, 0.0)
        for b in range(4):
            nisa.dma_copy(dst=dst[b], src=zero)
        cols = dst.select(0, batch_idx)[:, 0:256]  # a static slice of a dim the index did not choose
        tile = nl.ndarray((128, 256), A.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=tile, src=src[:, 256:512])
        nisa.dma_copy(dst=cols, src=tile)
        return result, dst

    A = RNG.standard_normal((4, 128, 512)).astype(np.float32)
    for which in range(4):
        result, dst = nki.simulate(kernel)(A, np.array([[which]], np.int32))
        assert np.array_equal(result, A[which])
        want = np.zeros_like(A)
        want[which, :, 0:256] = A[which, :, 256:512]
        assert np.array_equal(dst, want)


def test_dynamic_select_out_of_range_is_index_bounds_or_skipped() -> None:
    def kernel_for(oob):
        @nki.jit
        def kernel(A, which):
            idx = nl.ndarray((1, 1), nl.int32, buffer=nl.sbuf)
            nisa.dma_copy(dst=idx, src=which)
            dst = nl.ndarray((8, 16), A.dtype, buffer=nl.sbuf)
            nisa.memset(dst, -5.0)
            if oob is None:
                nisa.dma_copy(dst=dst, src=A.select(1, idx))
            else:
                nisa.dma_copy(dst=dst, src=A.select(1, idx), oob_mode=oob)
            out = nl.ndarray((8, 16), A.dtype, buffer=nl.shared_hbm)
            nisa.dma_copy(dst=out, src=dst)
            return out
        return kernel

    A = RNG.standard_normal((8, 3, 16)).astype(np.float32)
    assert np.array_equal(nki.simulate(kernel_for(None))(A, np.array([[2]], np.int32)), A[:, 2])
    with pytest.raises(nki.KernelFault, match=r"\[index_bounds\].*select\(dim=1\) read index 3"):
        nki.simulate(kernel_for(None))(A, np.array([[3]], np.int32))
    out = nki.simulate(kernel_for(nisa.oob_mode.skip))(A, np.array([[3]], np.int32))
    assert (out == -5.0).all()


def test_dynamic_select_on_sbuf_is_a_view_compute_engines_write() -> None:
    @nki.jit
    def kernel(x, which):
        idx = nl.ndarray((1, 1), nl.int32, buffer=nl.sbuf)
        nisa.dma_copy(dst=idx, src=which)
        t = nl.ndarray((16, 4, 8), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        v = t.select(1, idx)
        assert v.shape == (16, 8) and v.is_indirect()
        nisa.memset(dst=v, value=7.0)
        out = nl.ndarray((16, 4, 8), nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=t)
        return out

    x = RNG.standard_normal((16, 4, 8)).astype(np.float32)
    out = nki.simulate(kernel)(x, np.array([[2]], np.int32))
    want = x.copy()
    want[:, 2] = 7.0
    assert np.array_equal(out, want)
    with pytest.raises(nki.KernelFault, match=r"\[index_bounds\].*index 4"):
        nki.simulate(kernel)(x, np.array([[4]], np.int32))


def test_dynamic_select_by_a_register() -> None:
    @nki.jit
    def kernel(A):
        reg = nisa.register_alloc()
        nisa.register_move(reg, 2)
        out = nl.ndarray((8, 16), A.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=A.select(0, reg))
        return out

    A = RNG.standard_normal((4, 8, 16)).astype(np.float32)
    assert np.array_equal(nki.simulate(kernel)(A), A[2])


def test_vector_select_gathers_rows_per_partition() -> None:
    """The deep-dive's gather_rows: offsets from iota (0, 2, 4, ...), partition p reads row offsets[p]."""
    @nki.jit
    def gather_rows(A):
        offsets = nl.ndarray((64, 1), nl.int32, nl.sbuf)
        nisa.iota(offsets, [[1, 1]], 0, 2)
        src = A.vector_select(0, offsets)
        assert src.shape == (64, 512) and src.is_indirect()
        assert src.get_pattern() == [[512, 64], [1, 512]]
        result = nl.ndarray((64, 512), nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(src=src, dst=result[...])
        cols = nl.ndarray((64, 128), nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(src=src.slice(1, 128, 256), dst=cols)  # a free dim sliced after the gather
        return result, cols

    A = RNG.standard_normal((128, 512)).astype(np.float32)
    result, cols = nki.simulate(gather_rows)(A)
    assert np.array_equal(result, A[0:128:2]) and np.array_equal(cols, A[0:128:2, 128:256])


def test_vector_select_docstring_shape_and_scatter() -> None:
    @nki.jit
    def kernel(data, rows, src):
        idx = nl.ndarray((128, 1), nl.int32, buffer=nl.sbuf)
        nisa.dma_copy(dst=idx, src=rows)
        hbm_t = nl.ndarray((64, 128, 8), dtype=nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=hbm_t, src=data)
        view = hbm_t.vector_select(0, idx)
        assert view.shape == (128, 128, 8)
        s = nl.ndarray((128, 128, 8), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=s, src=src)
        nisa.dma_copy(dst=view.permute((0, 2, 1)), src=s.permute((0, 2, 1)))  # dim 0 stays: allowed
        return hbm_t

    data = RNG.standard_normal((64, 128, 8)).astype(np.float32)
    rows = RNG.permutation(64)[:32].repeat(4).reshape(128, 1).astype(np.int32)
    # each row four times: the last partition writing a row keeps it (element order)
    src = RNG.standard_normal((128, 128, 8)).astype(np.float32)
    want = data.copy()
    for p in range(128):
        want[rows[p, 0]] = src[p]
    assert np.array_equal(nki.simulate(kernel)(data, rows, src), want)


# --- constraints, planted ----------------------------------------------------------------------------
def _refused(body: Callable, error: Any, match: str) -> None:
    with pytest.raises(error, match=match):
        _inside(body)


SBUF = lambda shape=(16, 4, 8): nl.ndarray(shape, nl.float32, buffer=nl.sbuf)  # noqa: E731
HBM = lambda shape=(4, 6, 8): nl.ndarray(shape, nl.float32, buffer=nl.shared_hbm)  # noqa: E731

PLANTS = [  # (name, body, error, what the message names)
    ("permute_not_a_permutation", lambda _: SBUF().permute((0, 1, 1)), ValueError, r"dims=\(0, 1, 1\).*permutation"),
    ("permute_short", lambda _: HBM().permute((1, 0)), ValueError, r"dims=\(1, 0\) is not a permutation of range\(3\)"),
    ("permute_partition", lambda _: SBUF().permute((1, 0, 2)), nki.KernelFault, r"\[partition_dim\] permute: dims="),
    ("broadcast_not_1", lambda _: SBUF().broadcast(1, 3), ValueError, r"broadcast: dim 1 .* has size 4"),
    ("broadcast_partition", lambda _: SBUF((1, 8)).broadcast(0, 16), nki.KernelFault,
     r"\[partition_dim\] broadcast: dim=0"),
    ("broadcast_size", lambda _: SBUF((16, 1)).broadcast(1, 0), ValueError, r"broadcast: size=0"),
    ("expand_dim_partition", lambda _: SBUF().expand_dim(0), nki.KernelFault, r"\[partition_dim\] expand_dim: dim=0"),
    ("expand_dim_range", lambda _: SBUF().expand_dim(4), ValueError, r"expand_dim: dim=4 is not a dimension"),
    ("squeeze_not_1", lambda _: SBUF().squeeze_dim(2), ValueError, r"squeeze_dim: dim 2 .* has size 8"),
    ("squeeze_partition", lambda _: SBUF((1, 8)).squeeze_dim(0), nki.KernelFault, r"\[partition_dim\] squeeze_dim"),
    ("reshape_dim_product", lambda _: SBUF().reshape_dim(2, (3, 3)), ValueError, r"shape=\(3, 3\) has product 9"),
    ("reshape_dim_two_inferred", lambda _: SBUF().reshape_dim(2, (-1, -1)), ValueError, r"more than one -1"),
    ("reshape_dim_not_divisible", lambda _: SBUF().reshape_dim(2, (3, -1)), ValueError, r"not a multiple of 3"),
    ("reshape_dim_zero", lambda _: SBUF().reshape_dim(2, (0, 8)), ValueError, r"shape=\(0, 8\) holds 0"),
    ("reshape_dim_partition", lambda _: SBUF().reshape_dim(0, (4, 4)), nki.KernelFault,
     r"\[partition_dim\] reshape_dim: shape=\(4, 4\) splits dim 0"),
    ("flatten_not_contiguous", lambda _: SBUF().permute((0, 2, 1)).flatten_dims(1, 2), ValueError,
     r"flatten_dims: dims 1..2 .* not contiguous"),
    ("flatten_gap", lambda _: HBM()[:, 0:3, :].flatten_dims(0, 1), ValueError, r"dim 0's stride 48 is not dim 1's"),
    ("flatten_partition", lambda _: SBUF().flatten_dims(0, 1), nki.KernelFault, r"\[partition_dim\] flatten_dims"),
    ("flatten_order", lambda _: SBUF().flatten_dims(2, 1), ValueError, r"start_dim=2 is after end_dim=1"),
    ("reshape_product", lambda _: SBUF().reshape((16, 30)), ValueError, r"reshape: shape=\(16, 30\) holds 480"),
    ("reshape_partition", lambda _: SBUF().reshape((32, 16)), nki.KernelFault,
     r"\[partition_dim\] reshape: shape=\(32, 16\) changes dim 0 from 16 to 32"),
    ("reshape_layout", lambda _: SBUF().permute((0, 2, 1)).reshape((16, 32)), ValueError,
     r"cannot be viewed as shape=\(16, 32\) without copying"),
    ("reshape_hbm_layout", lambda _: HBM()[:, 0:3, :].reshape((12, 8)), ValueError, r"without copying"),
    ("reshape_minus_one", lambda _: HBM().reshape((4, -1)), ValueError, r"shape=\(4, -1\): sizes are positive"),
    ("reshape_keyword", lambda _: HBM().reshape(size=(4, 48)), TypeError, r"unknown keyword\(s\) size"),
    ("reshape_twice", lambda _: HBM().reshape((4, 48), shape=(4, 48)), TypeError, r"give shape once"),
    ("rearrange_names", lambda _: SBUF((16, 24)).rearrange(("b", "c"), ("b", "d")), ValueError,
     r"dst_pattern=\('b', 'd'\) names"),
    ("rearrange_partition", lambda _: SBUF((16, 24)).rearrange(("b", "c"), ("c", "b")), nki.KernelFault,
     r"\[partition_dim\] rearrange"),
    ("rearrange_sizes", lambda _: SBUF((16, 24)).rearrange(("b", ("h", "w")), ("b", "h", "w"), {"h": 5}),
     ValueError, r"not a multiple of 5"),
    ("rearrange_merge_gap", lambda _: HBM((2, 3, 4)).rearrange(("a", "b", "c"), (("a", "c"), "b")), ValueError,
     r"rearrange: dims 0..1 .* not contiguous"),
    ("rearrange_count", lambda _: SBUF((16, 24)).rearrange(("b",), ("b",)), ValueError, r"names 1 dims"),
    ("slice_end", lambda _: SBUF().slice(2, 0, 9), nki.KernelFault, r"\[index_bounds\].*slice\(dim=2, start=0, end=9\)"),
    ("slice_empty", lambda _: SBUF().slice(2, 3, 3), nki.KernelFault, r"\[index_bounds\].*0 <= start < end <= 8"),
    ("slice_negative", lambda _: SBUF().slice(2, -1, 3), nki.KernelFault, r"\[index_bounds\]"),
    ("slice_step", lambda _: SBUF().slice(2, 0, 8, 0), ValueError, r"slice: step=0"),
    ("slice_dim_type", lambda _: SBUF().slice(1.0, 0, 2), TypeError, r"slice: dim must be an int"),
    ("select_bounds", lambda _: SBUF().select(1, 4), nki.KernelFault, r"\[index_bounds\].*select\(dim=1, index=4\)"),
    ("select_negative", lambda _: HBM().select(0, -1), nki.KernelFault, r"\[index_bounds\]"),
    ("select_dim", lambda _: HBM().select(3, 0), ValueError, r"select: dim=3 is not a dimension"),
    ("getitem_bounds", lambda _: SBUF()[:, -5], nki.KernelFault, r"\[index_bounds\].*index -5 of axis 1"),
    ("view_strided", lambda _: SBUF()[:, :, ::2].view(nl.bfloat16), ValueError, r"view: dtype=bfloat16: the last dim"),
    ("view_contract", lambda _: nl.ndarray((16, 6), nl.uint8, buffer=nl.sbuf).view(nl.float32), ValueError,
     r"view: cannot read"),
]


@pytest.mark.parametrize("name,body,error,match", PLANTS, ids=[p[0] for p in PLANTS])
def test_constraint_is_refused_naming_its_parameter(name: str, body: Callable, error: Any, match: str) -> None:
    _refused(body, error, match)


def _idx(value: int = 1, shape: tuple = (1, 1)):
    t = nl.ndarray(shape, nl.int32, buffer=nl.sbuf)
    nisa.memset(t, value)
    return t


INDIRECT_PLANTS = [
    ("select_twice", lambda _: HBM().select(0, _idx()).select(0, _idx()), ValueError,
     r"select: .* already an indirect view; only one dynamic select"),
    ("vector_after_select", lambda _: HBM((4, 6, 8)).select(0, _idx()).vector_select(0, _idx(0, (6, 1))), ValueError,
     r"vector_select: .* already an indirect view"),
    ("select_after_vector", lambda _: HBM().vector_select(0, _idx(0, (16, 1))).select(1, _idx()), ValueError,
     r"select: .* already an indirect view"),
    ("ap_after_vector", lambda _: HBM().vector_select(0, _idx(0, (16, 1))).ap([[8, 1]], scalar_offset=_idx()),
     ValueError, r"ap: .* cannot be re-indirected"),
    ("dynamic_partition", lambda _: SBUF().select(0, _idx()), nki.KernelFault,
     r"\[partition_dim\] select: a dynamic select of dim 0"),
    ("dynamic_two_values", lambda _: HBM().select(0, _idx(0, (1, 2))), nki.KernelFault,
     r"\[shape_mismatch\] select index .* holds 2 values"),
    ("vector_dim", lambda _: HBM().vector_select(1, _idx(0, (16, 1))), ValueError, r"vector_select: dim=1"),
    ("vector_on_sbuf", lambda _: SBUF().vector_select(0, _idx(0, (16, 1))), ValueError,
     r"vector_select: .* on chip; .* HBM tensors only"),
    ("vector_offset_shape", lambda _: HBM().vector_select(0, _idx(0, (16, 2))), nki.KernelFault,
     r"\[shape_mismatch\] vector_offset .* takes \(num_partitions, 1\)"),
    ("vector_slice_dim_0", lambda _: HBM().vector_select(0, _idx(0, (16, 1))).slice(0, 0, 8), ValueError,
     r"slice: dim=0: dim 0 of the indirect view"),
    ("vector_index_dim_0", lambda _: HBM().vector_select(0, _idx(0, (16, 1)))[0:8], ValueError,
     r"indexing: .* dim 0 of the indirect view"),
    ("vector_select_static_dim_0", lambda _: HBM().vector_select(0, _idx(0, (16, 1))).select(0, 1), ValueError,
     r"select: dim=0: dim 0 of the indirect view"),
    ("vector_permute", lambda _: HBM().vector_select(0, _idx(0, (16, 1))).permute((1, 0, 2)), ValueError,
     r"permute: dims=\(1, 0, 2\) moves dim 0"),
    ("vector_expand_0", lambda _: HBM().vector_select(0, _idx(0, (16, 1))).expand_dim(0), ValueError,
     r"expand_dim: dim=0"),
    ("vector_reshape_0", lambda _: HBM().vector_select(0, _idx(0, (16, 1))).reshape((8, 96)), ValueError,
     r"reshape: shape=\(8, 96\) changes dim 0 of the indirect view"),
    ("vector_reshape_dim_0", lambda _: HBM().vector_select(0, _idx(0, (16, 1))).reshape_dim(0, (16,)), ValueError,
     r"reshape_dim: dim=0"),
    ("vector_flatten_0", lambda _: HBM().vector_select(0, _idx(0, (16, 1))).flatten_dims(0, 1), ValueError,
     r"flatten_dims: start_dim=0"),
    ("view_after_select", lambda _: HBM().select(0, _idx()).view(nl.int32), ValueError,
     r"view: .* indirect view"),
    ("indirect_generation", lambda _: SBUF((16, 8)).indirect(_idx(0, (16, 2))), nki.KernelFault,
     r"\[target_generation\] .*Tensor Indirection is available on NeuronCore-v4"),
    ("indirect_index_shape", lambda _: SBUF((16, 8)).indirect(_idx(0, (8, 2))), nki.KernelFault,
     r"\[shape_mismatch\] indirect: index .* P == 16"),
    ("indirect_num_elem", lambda _: SBUF((16, 8)).indirect(_idx(0, (16, 2)), num_elem=33), ValueError,
     r"indirect: num_elem=33"),
]


@pytest.mark.parametrize("name,body,error,match", INDIRECT_PLANTS, ids=[p[0] for p in INDIRECT_PLANTS])
def test_indirect_view_constraint_is_refused(name: str, body: Callable, error: Any, match: str) -> None:
    _refused(body, error, match)


def test_indirect_views_allow_what_the_docs_allow() -> None:
    def body(_):
        v = HBM((4, 6, 8)).vector_select(0, _idx(0, (16, 1)))
        out = [v.shape, v.permute((0, 2, 1)).shape, v.expand_dim(1).shape, v.reshape_dim(2, (2, 4)).shape,
               v.flatten_dims(1, 2).shape, v.reshape((16, 48)).shape, v[:, 1:3, ::2].shape, v.select(1, 2).shape]
        out.append(all(w.is_indirect() for w in (v.permute((0, 2, 1)), v[:, 1], v.reshape((16, 48)))))
        s = HBM((4, 6, 8)).select(1, _idx(2))
        out += [s.shape, s[1:3].shape, s.permute((1, 0)).shape, s.is_indirect()]
        return out

    assert _inside(body) == [(16, 6, 8), (16, 8, 6), (16, 1, 6, 8), (16, 6, 2, 4), (16, 48), (16, 48),
                             (16, 2, 4), (16, 8), True, (4, 8), (2, 8), (8, 4), True]


def test_views_outside_a_kernel_run_raise_python_errors() -> None:
    """A tensor made outside a run (an allocation numeq makes for a caller) refuses the same way, with
    Python's errors in place of findings."""
    from numeq.nki.machine.memory import MEMORIES, Allocation
    from numeq.nki.machine.dtypes import dtype_of

    t = Allocation((16, 4, 8), dtype_of("float32"), MEMORIES["sbuf"], "t", "<test>").whole()
    assert t.permute((0, 2, 1)).shape == (16, 8, 4) and t.reshape(shape=(16, 32)).strides == (32, 1)
    with pytest.raises(ValueError, match=r"reshape: shape=\(32, 16\) changes dim 0"):
        t.reshape((32, 16))
    with pytest.raises(IndexError, match=r"slice\(dim=1, start=2, end=9\)"):
        t.slice(1, 2, 9)


def test_an_access_pattern_past_its_buffer_is_an_error_where_an_instruction_uses_it() -> None:
    # nki-library's output_projection_tkg builds w_sbuf.ap(...) for an index one past the last and
    # skips its nc_matmul with an `if`: building the pattern is no error; reading, writing or
    # viewing it is, at the line that built it.
    def kernel(use):
        @nki.jit
        def k(w):
            out = nl.ndarray((2, 8), nl.float32, buffer=nl.shared_hbm)
            t = nl.ndarray((4, 8), nl.float32, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=w)
            u = nl.ndarray((2, 8), nl.float32, buffer=nl.sbuf)
            for i in range(3):
                v = t.ap(pattern=[[8, 2], [1, 8]], offset=i * 16)  # PAST-THE-END at i == 2 (32 elements)
                if i < 2 or use == "read":
                    nisa.dma_copy(dst=u, src=v)
                if i == 2 and use == "write":
                    nisa.dma_copy(dst=v, src=u)
                if i == 2 and use == "view":
                    v.reshape((16,))
            nisa.dma_copy(dst=out, src=u)
            return out
        return k

    w = np.arange(32, dtype=np.float32).reshape(4, 8)
    guarded = nki.run(kernel("none"), w)
    assert guarded.completed and not guarded.errors, guarded.errors
    np.testing.assert_array_equal(guarded.outputs, w[2:])  # the last pattern read, i == 1: partitions 2, 3
    for use in ("read", "write", "view"):
        k = kernel(use)
        r = nki.run(k, w)
        assert not r.completed, use
        (f,) = r.errors
        assert f.rule == "index_bounds" and f.where == source_line(k, "PAST-THE-END"), (use, f)
        assert "reaches elements 32..47 of a buffer of 32" in f.message
