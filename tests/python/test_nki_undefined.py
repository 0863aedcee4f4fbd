"""Undefined values in numeq.nki: what instructions compute from bytes no instruction wrote.
Computing on them is no error (AWS's kernels compute on the padding a masked load leaves); they
stay undefined, elementwise, per matmul row / column, through transposes and partition shuffles, and
are an error where they reach something else.

Oracles: numpy for the defined values; the positions that stay undefined follow from each
instruction's documented data flow (nki.isa docstrings), counted here independently.
"""

from __future__ import annotations

import numpy as np
import pytest

from nki_support import source_line
from numeq import nki

nl, nisa = nki.language, nki.isa
RNG = np.random.default_rng(11)


def _padded_matmul(store_all: bool):
    @nki.jit
    def k(w, x):
        out = nl.ndarray((128, 512), nl.float32, buffer=nl.shared_hbm)
        i_p, i_f = nl.mgrid[0:128, 0:512]
        xs = nl.load(x[i_p, i_f], mask=(i_f < 384))  # <masked load>
        e = nl.multiply(xs, 2.0)  # computes on the 128 columns nothing wrote
        acc = nl.ndarray((1, nl.par_dim(128), 512), nl.float32, buffer=nl.psum)
        acc[0] += nisa.nc_matmul(nl.load(w), e)  # a fresh PSUM tile: the first += overwrites
        acc[0] += nisa.nc_matmul(nl.load(w), e)
        res = nl.copy(acc[0])
        if store_all:
            nl.store(out, res)  # <store all>
        else:
            nl.store(out[i_p, i_f], res, mask=(i_f < 384))
        return out
    return k


def test_results_of_unwritten_columns_stay_undefined_and_unstored_they_are_no_error():
    w = RNG.integers(-3, 4, (128, 128)).astype(np.float32)
    x = RNG.integers(-3, 4, (128, 512)).astype(np.float32)
    k = _padded_matmul(store_all=False)
    r = nki.run(k, w, x)
    assert r.errors == []  # (warnings: fp32 matmuls)
    assert np.array_equal(r.outputs[:, :384], 4 * (w.T @ x)[:, :384])  # small integers: exact in fp32


def test_undefined_results_stored_leave_the_output_partly_written_naming_their_first_read():
    w = np.ones((128, 128), np.float32)
    k = _padded_matmul(store_all=True)
    r = nki.run(k, w, np.ones((128, 512), np.float32))
    assert r.errors == []
    (f,) = [f for f in r.findings if f.rule == "output_partly_written"]
    assert "16384 of 65536" in f.message and source_line(k, "nl.multiply(xs") in f.message


def test_undefined_results_reaching_a_reduction_across_what_was_written_are_an_error():
    @nki.jit
    def k(x):
        out = nl.ndarray((128, 1), nl.float32, buffer=nl.shared_hbm)
        i_p, i_f = nl.mgrid[0:128, 0:512]
        xs = nl.load(x[i_p, i_f], mask=(i_f < 384))
        nl.store(out, nl.sum(nl.exp(xs), axis=1))  # <sum>
        return out

    r = nki.run(k, np.zeros((128, 512), np.float32))
    (f,) = r.errors
    assert (f.rule, f.where) == ("read_uninitialised", source_line(k, "<sum>"))


def test_a_never_written_tile_is_an_error_at_its_first_read_only_if_its_results_are_used():
    def kernel(use: bool):
        @nki.jit
        def k(a):
            out = nl.ndarray((128, 64), nl.float32, buffer=nl.shared_hbm)
            t = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf, name="forgotten")
            u = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf)
            nisa.activation(dst=u, op=nl.exp, data=t)  # <first read>
            v = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf)
            nisa.dma_copy(dst=v, src=a)
            nisa.dma_copy(dst=out, src=u if use else v)
            return out
        return k

    unused = nki.run(kernel(False), np.ones((128, 64), np.float32))
    assert unused.findings == []
    k = kernel(True)
    (f,) = nki.run(k, np.ones((128, 64), np.float32)).errors  # stored: the forgotten tile is the mistake
    assert (f.rule, f.where) == ("read_uninitialised", source_line(k, "<first read>"))
    assert "forgotten" in f.message and "8192 of 8192" in f.message


def test_accumulating_onto_a_never_written_psum_tile_rests_on_the_accumulate_assumption():
    @nki.jit
    def k(w, x):
        out = nl.ndarray((128, 512), nl.float32, buffer=nl.shared_hbm)
        acc = nl.ndarray((nl.par_dim(128), 512), nl.float32, buffer=nl.psum)
        acc += nisa.nc_matmul(nl.load(w), nl.load(x))  # <+=>
        nl.store(out, nl.copy(acc))
        return out

    w = RNG.integers(-3, 4, (128, 128)).astype(np.float32)
    x = RNG.integers(-3, 4, (128, 512)).astype(np.float32)
    r = nki.run(k, w, x)
    assert r.errors == [] and np.array_equal(r.outputs, w.T @ x)
    always = nki.run(k, w, x, assume={"matmul_accumulate": "always"})
    assert [(f.rule, f.where) for f in always.errors] == [("read_uninitialised", source_line(k, "<+=>"))]


def _transposed_in_sbuf(x, ident, columns):
    """A (64, 128) tile of which only ``columns`` are written (from x's columns in turn), transposed
    by the Tensor Engine into PSUM and copied to a (128, 64) SBUF tile: rows ``columns`` defined."""
    t = nl.ndarray((64, 128), nl.float32, buffer=nl.sbuf)
    for i, c in enumerate(columns):
        nisa.dma_copy(dst=t[:, c:c + 1], src=x[:, i:i + 1])
    eye = nl.ndarray((64, 64), nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=eye, src=ident)
    p = nl.ndarray((128, 64), nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=p, stationary=t, moving=eye, is_transpose=True)
    s = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=s, src=p)
    return s


def test_a_transpose_carries_unwritten_columns_to_rows_and_a_shuffle_reads_only_the_partitions_it_moves():
    # nki-library's find_nonzero_indices pattern: 8 of 128 columns written, transposed by the Tensor
    # Engine (rows 0, 16, ... defined), and a stream shuffle that moves partition 16 of each quadrant
    # to partition 0 (others unchanged) before the defined partitions are stored.
    @nki.jit
    def k(x, ident):
        out = nl.ndarray((4, 64), nl.float32, buffer=nl.shared_hbm)
        s = _transposed_in_sbuf(x, ident, range(0, 128, 16))
        nisa.nc_stream_shuffle(dst=s, src=s, shuffle_mask=[16] + [255] * 31)
        for q in range(4):
            nisa.dma_copy(dst=out[q:q + 1, :], src=s[32 * q:32 * q + 1, :])  # partition 32q: moved from 32q + 16
        return out

    x = RNG.standard_normal((64, 8)).astype(np.float32)
    r = nki.run(k, x, np.eye(64, dtype=np.float32), target="trn2")
    assert r.errors == []
    # partition 32q + 16 of the transpose is column 32q + 16 of t: x's column 2q + 1
    assert np.array_equal(r.outputs, np.stack([x[:, 2 * q + 1] for q in range(4)]))


def test_storing_a_transposed_row_nothing_wrote_leaves_the_output_partly_written():
    @nki.jit
    def k(x, ident):
        out = nl.ndarray((2, 64), nl.float32, buffer=nl.shared_hbm)
        s = _transposed_in_sbuf(x, ident, [0])
        nisa.dma_copy(dst=out, src=s[0:2, :])  # row 1 is column 1 of t: nothing wrote it
        return out

    x = RNG.standard_normal((64, 1)).astype(np.float32)
    r = nki.run(k, x, np.eye(64, dtype=np.float32), target="trn2")
    assert r.errors == []
    (w,) = [f for f in r.findings if f.rule == "output_partly_written"]
    assert "64 of 128 elements" in w.message
    assert np.array_equal(r.outputs[0], x[:, 0])


def test_part_of_a_never_written_tile_computed_and_stored_names_its_first_read():
    # A view of a tile no instruction ever wrote counts as the tile: the likely mistake is the
    # missing write, named at the first read, not a partly written output.
    @nki.jit
    def k(a):
        out = nl.ndarray((128, 32), nl.float32, buffer=nl.shared_hbm)
        t = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf, name="never")
        u = nl.ndarray((128, 32), nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=u, data=t[:, 0:32], op0=nl.multiply, operand0=2.0)  # <first read>
        nisa.dma_copy(dst=out, src=u)
        return out

    (f,) = nki.run(k, np.zeros((1, 1), np.float32)).errors
    assert (f.rule, f.where) == ("read_uninitialised", source_line(k, "<first read>")) and "never" in f.message


def test_findings_name_result_tiles_after_the_variables_they_are_assigned_to():
    @nki.jit
    def k(a):
        out = nl.ndarray((128, 1), nl.float32, buffer=nl.shared_hbm)
        i_p, i_f = nl.mgrid[0:128, 0:512]
        padded = nl.load(a[i_p, i_f], mask=(i_f < 384))
        total = nl.sum(padded, axis=1)  # <sum>
        nl.store(out, total)
        return out

    (f,) = nki.run(k, np.ones((128, 512), np.float32)).errors
    assert f.where == source_line(k, "<sum>")
    assert "into total" in f.message and "elements of padded" in f.message
