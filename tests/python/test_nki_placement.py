"""numeq.nki's direct allocation (the older interface's ``nki.compiler.sbuf`` / ``psum`` ``alloc`` and
``mod_alloc``; the current ``nl.ndarray(address=)``).

Oracles: SDK 2.26's NKI Direct Allocation Developer Guide (its modulo-allocation table: blocks 0 and
2 at byte 0, 1 and 3 at byte 1024; its lifetime-conflict examples, an overlap at bytes 1024-2048
and eight logical tiles on two physical ones; its limits: 192 KiB - 16 KiB usable SBUF on
NeuronCore-v2, a PSUM tile within one 2 KiB bank), reproduced as conflicts or their absence, and
numpy / ml_dtypes for values.
"""

from __future__ import annotations

import functools

import ml_dtypes
import numpy as np
import pytest

from nki_support import errors, source_line
from numeq import nki

nl, nisa, ncc = nki.language, nki.isa, nki.compiler
bf16 = ml_dtypes.bfloat16
RNG = np.random.default_rng(7)


def _rules(r: nki.Run) -> set:
    return {f.rule for f in r.findings}


# --- modulo allocation: the guide's table, seen as which blocks share bytes ----------------------
def test_modulo_allocation_puts_every_other_block_on_the_same_bytes():
    @nki.jit
    def k(a):
        out = nl.ndarray((128, 512), nl.float32, buffer=nl.shared_hbm)
        t = nl.ndarray((4, nl.par_dim(128), 512), nl.bfloat16,
                       buffer=ncc.sbuf.mod_alloc(base_addr=0, num_free_tiles=(2,)))
        t[0] = nl.load(a[0])
        t[1] = nl.load(a[1])
        x = nl.copy(t[0], dtype=nl.float32)  # block 1 lies at byte 1024: block 0 is intact
        t[2] = nl.load(a[2])  # <block 2>
        y = nl.add(x, t[0])  # <reads block 0>
        nl.store(out, y)
        return out

    a = RNG.standard_normal((4, 128, 512)).astype(bf16)
    r = nki.run(k, a)
    (f,) = r.findings
    assert (f.rule, f.severity, f.where) == ("allocation_conflict", "error", source_line(k, "<reads block 0>"))
    assert "t[0]" in f.message and "t[2]" in f.message and source_line(k, "<block 2>") in f.message
    assert "bytes 0:1024" in f.message
    # numeq keeps the logical tiles apart: the values are the kernel's intent, the finding its hazard
    assert np.array_equal(r.outputs, 2 * a[0].astype(np.float32))


def test_two_tensors_on_partly_overlapping_bytes_conflict_only_where_they_overlap():
    # The guide's "#3 Lifetime Conflicts": t0's tiles lie at bytes [0, 2048), t1's at [1024, 3072).
    @nki.jit
    def k(a):
        out = nl.ndarray((2, 128, 512), nl.float32, buffer=nl.shared_hbm)
        t0 = nl.ndarray((4, nl.par_dim(128), 512), nl.bfloat16,
                        buffer=ncc.sbuf.mod_alloc(base_addr=0, num_free_tiles=(2,)))
        t1 = nl.ndarray((4, nl.par_dim(128), 512), nl.bfloat16,
                        buffer=ncc.sbuf.mod_alloc(base_addr=1024, num_free_tiles=(2,)))
        t0[0] = nl.load(a[0])
        t0[1] = nl.load(a[1])
        t1[0] = nl.load(a[2])  # <t1 block 0>
        nl.store(out[0], nl.copy(t0[0], dtype=nl.float32))  # bytes 0-1024: untouched by t1
        nl.store(out[1], nl.copy(t0[1], dtype=nl.float32))  # <t0 block 1>
        return out

    r = nki.run(k, RNG.standard_normal((3, 128, 512)).astype(bf16))
    assert [(f.rule, f.where) for f in r.findings] == [("allocation_conflict", source_line(k, "<t0 block 1>"))]
    assert "t1[0]" in r.findings[0].message and source_line(k, "<t1 block 0>") in r.findings[0].message


def test_the_guides_eight_tiles_on_two_conflict_and_its_correct_way_does_not():
    @nki.jit
    def wrong(a):
        out = nl.ndarray((8, 128, 512), nl.float32, buffer=nl.shared_hbm)
        t1 = nl.ndarray((8, nl.par_dim(128), 512), nl.float32,
                        buffer=ncc.sbuf.mod_alloc(base_addr=0, num_free_tiles=(2,)))
        for i in nl.affine_range(8):
            t1[i] = nl.load(a[i])
        for i in nl.affine_range(8):
            nl.store(out[i], nl.exp(t1[i]))  # <wrong>
        return out

    @nki.jit
    def right(a):
        out = nl.ndarray((8, 128, 512), nl.float32, buffer=nl.shared_hbm)
        for i in nl.affine_range(4):
            t1 = nl.ndarray((2, nl.par_dim(128), 512), nl.float32,
                            buffer=ncc.sbuf.mod_alloc(base_addr=0, num_free_tiles=(2,)))
            for j in nl.affine_range(2):
                t1[j] = nl.load(a[2 * i + j])
                nl.store(out[2 * i + j], nl.copy(t1[j]))
        return out

    a = RNG.standard_normal((8, 128, 512)).astype(np.float32)
    bad = nki.run(wrong, a)
    assert errors(bad, "allocation_conflict") and {f.where for f in bad.errors} == {source_line(wrong, "<wrong>")}
    good = nki.run(right, a)
    assert good.findings == [] and np.array_equal(good.outputs, a)


# --- where a placement may put a tile ---------------------------------------------------------------
@pytest.mark.parametrize("target, usable", [("trn1", (192 - 16) * 1024), ("trn2", (224 - 16) * 1024)])
def test_an_sbuf_tile_past_the_usable_bytes_is_refused(target, usable):
    def kernel(base):
        def k(a):
            out = nl.ndarray((128, 512), nl.float32, buffer=nl.shared_hbm)
            t = nl.ndarray((nl.par_dim(128), 512), nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=base))
            t[...] = nl.load(a)
            nl.store(out, t)
            return out
        return k

    a = RNG.standard_normal((128, 512)).astype(np.float32)
    fits = nki.run(kernel(usable - 2048), a, target=target)
    assert fits.findings == [] and np.array_equal(fits.outputs, a)
    with pytest.raises(nki.KernelFault, match=rf"\[allocation_address\] .*placed at byte {usable - 2047}; "
                                              rf"{target}'s SBUF partition offers bytes 0 to {usable}"):
        nki.simulate(kernel(usable - 2047), target=target)(a)


def test_a_psum_tile_must_lie_in_one_bank_of_the_eight():
    def kernel(shape, **alloc):
        def k(a):
            p = nl.ndarray(shape, nl.float32, buffer=ncc.psum.mod_alloc(**alloc))
            return a
        return k

    a = np.zeros((128, 4), np.float32)
    with pytest.raises(nki.KernelFault, match=r"\[allocation_address\] .*4096 B per partition crosses a bank"):
        nki.simulate(kernel((nl.par_dim(128), 1024), base_bank=0))(a)
    with pytest.raises(nki.KernelFault, match=r"\[allocation_address\] p\[1\]: placed at bank 8"):
        nki.simulate(kernel((2, nl.par_dim(128), 512), base_bank=7, num_bank_tiles=(2,)))(a)
    assert nki.run(kernel((2, nl.par_dim(128), 512), base_bank=6, num_bank_tiles=(2,)), a).findings == []


def test_an_allocation_function_is_called_with_the_documented_parameter_names():
    # nki-samples' allocated attention binds its bank map with functools.partial ahead of idx.
    def bank_of(bank_map, idx, pdim_size, fdim_size):
        assert (pdim_size, fdim_size) == (128, 2048)
        return (bank_map[idx], 0, 0)

    @nki.jit
    def k(x, y):
        out = nl.ndarray((128, 512), nl.float32, buffer=nl.shared_hbm)
        p = nl.ndarray((2, nl.par_dim(128), 512), nl.float32,
                       buffer=ncc.psum.alloc(functools.partial(bank_of, bank_map={(0,): 3, (1,): 3})))
        xs, ys = nl.load(x), nl.load(y)
        p[0] = nisa.nc_matmul(xs, ys)
        p[1] = nisa.nc_matmul(xs, ys)  # <block 1>
        nl.store(out, nl.copy(p[0]))  # <reads block 0>
        return out

    r = nki.run(k, np.eye(128, dtype=np.float32), np.ones((128, 512), np.float32))
    assert [(f.rule, f.where) for f in r.errors] == [("allocation_conflict", source_line(k, "<reads block 0>"))]
    with pytest.raises(nki.KernelFault, match=r"\[allocation_address\] .*start partition 32; it may start at 0, 64"):
        @nki.jit
        def k2(a):
            t = nl.ndarray((nl.par_dim(64), 8), nl.float32, buffer=ncc.sbuf.alloc(lambda idx, p, f: (32, 0)))
            return a
        nki.simulate(k2)(np.zeros((1, 1), np.float32))


def test_an_affine_loop_body_places_its_tensors_once_a_static_loop_per_index():
    # The tracer runs an affine_range body once: a Python address counter advances once (nki-samples'
    # allocated attention); static_range unrolls, so 200 x 2 KiB walks off the end of SBUF.
    def kernel(loop):
        def k(a):
            out = nl.ndarray((200, 128, 512), nl.float32, buffer=nl.shared_hbm)
            address = 0
            for i in loop(200):
                t = nl.ndarray((nl.par_dim(128), 512), nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=address))
                address += 2048
                t[...] = nl.load(a)
                nl.store(out[i], t)
            return out
        return k

    a = RNG.standard_normal((128, 512)).astype(np.float32)
    r = nki.run(kernel(nl.affine_range), a)
    assert r.findings == [] and np.array_equal(r.outputs, np.broadcast_to(a, (200, 128, 512)))
    with pytest.raises(nki.KernelFault, match=r"\[allocation_address\]"):
        nki.simulate(kernel(nl.static_range))(a)


def test_the_current_generations_address_places_a_tensor_and_its_conflicts_are_found():
    # nl.ndarray(..., address=(partition_offset, free_offset)) (nki.language.ndarray docs), as
    # nki-library's ModularAllocator places its buffers: two tensors at overlapping bytes.
    @nki.jit
    def k(a):
        out = nl.ndarray((128, 512), nl.float32, buffer=nl.shared_hbm)
        x = nl.ndarray((128, 512), nl.float32, buffer=nl.sbuf, address=(0, 0))
        y = nl.ndarray((128, 512), nl.float32, buffer=nl.sbuf, address=(0, 1024))  # bytes 1024..3072
        nisa.dma_copy(dst=x, src=a)
        nisa.dma_copy(dst=y, src=a)  # <y written>
        nisa.dma_copy(dst=out, src=x)  # <x read>
        return out

    a = RNG.standard_normal((128, 512)).astype(np.float32)
    r = nki.run(k, a)
    (f,) = r.errors
    assert (f.rule, f.where) == ("allocation_conflict", source_line(k, "<x read>"))
    assert "after y was written at" in f.message and "bytes 1024:2048" in f.message

    @nki.jit
    def apart(a):
        out = nl.ndarray((128, 512), nl.float32, buffer=nl.shared_hbm)
        x = nl.ndarray((128, 512), nl.float32, buffer=nl.sbuf, address=(0, 0))
        y = nl.ndarray((128, 512), nl.float32, buffer=nl.sbuf, address=(0, 2048))
        nisa.dma_copy(dst=x, src=a)
        nisa.dma_copy(dst=y, src=a)
        nisa.dma_copy(dst=out, src=x)
        return out

    r = nki.run(apart, a)
    assert r.findings == [] and np.array_equal(r.outputs, a)

    def placed_at(address):
        def kernel(a):
            nl.ndarray((64, 512), nl.float32, buffer=nl.sbuf, address=address)
            return a
        return kernel

    with pytest.raises(nki.KernelFault, match=r"\[allocation_address\] .*placed at partition 32; it may start at 0, 64"):
        nki.simulate(placed_at((32, 0)))(a)
    with pytest.raises(nki.KernelFault, match=r"\[allocation_address\] .*2048 B per partition placed at byte 211968"):
        nki.simulate(placed_at((0, (224 - 16) * 1024 - 1024)), target="trn2")(a)
    with pytest.raises(TypeError, match=r"address: nl.ndarray takes \(partition_offset, free_offset\)"):
        nki.simulate(placed_at((0,)))(a)
