"""The older interface as AWS's public kernels write it (nki-samples' flash attention and the SDK's
examples): reductions keep tiles 2-D, masks on affine_select, an instruction masked out entirely
writes nothing, PSUM tiles given to GpSimd instructions are staged, creation keywords that only
steer the compiler; oracles are numpy."""

from __future__ import annotations

import numpy as np

from numeq import nki

nl, nisa = nki.language, nki.isa
RNG = np.random.default_rng(5)


def test_a_reduction_of_the_free_axes_is_a_p_by_1_tile_and_broadcasts_as_one():
    @nki.jit
    def k(a, m):
        out = nl.ndarray((128, 1), nl.float32, buffer=nl.shared_hbm)
        row_max = nisa.tensor_reduce(np.max, nl.load(a), axis=(1,))
        prev = nl.load(m)
        nl.store(out, value=nl.maximum(prev, row_max))
        return out

    a = RNG.standard_normal((128, 64)).astype(np.float32)
    m = RNG.standard_normal((128, 1)).astype(np.float32)
    r = nki.run(k, a, m)
    assert not r.errors and np.array_equal(r.outputs, np.maximum(m, a.max(axis=1, keepdims=True)))


def test_affine_select_under_a_mask_and_a_mask_holding_nowhere():
    @nki.jit
    def k(a):
        out = nl.ndarray((128, 128), nl.float32, buffer=nl.shared_hbm)
        i_p, i_f = nl.arange(128)[:, None], nl.arange(128)[None, :]
        t = nl.load(a)
        res = nl.full((128, 128), 7.0, dtype=nl.float32)
        # keep the causal part (i_f <= i_p) of the left half only
        res[i_p, i_f] = nisa.affine_select(pred=(i_p - i_f >= 0), on_true_tile=t, on_false_value=-1.0,
                                           mask=(i_f < 64))
        res[i_p, i_f] = nisa.affine_select(pred=(i_p - i_f >= 0), on_true_tile=t, on_false_value=-2.0,
                                           mask=(i_f < 0))  # holds nowhere: nothing written
        nl.store(out, value=res)
        return out

    a = RNG.standard_normal((128, 128)).astype(np.float32)
    got = nki.run(k, a).outputs
    p, f = np.mgrid[0:128, 0:128]
    want = np.where(f < 64, np.where(p >= f, a, -1.0), 7.0).astype(np.float32)
    assert np.array_equal(got, want)


def test_a_psum_tile_given_to_a_gpsimd_instruction_is_staged_with_a_warning():
    @nki.jit
    def k(a, b):
        out = nl.ndarray((128, 128), nl.float32, buffer=nl.shared_hbm)
        i_p, i_f = nl.arange(128)[:, None], nl.arange(128)[None, :]
        ps = nl.zeros((128, 128), nl.float32, buffer=nl.psum)
        ps[...] += nisa.nc_matmul(nl.load(a), nl.load(b))
        nl.store(out, value=nisa.affine_select(pred=(i_p - i_f >= 0), on_true_tile=ps, on_false_value=0.0))
        return out

    a = (RNG.integers(-3, 4, (128, 128))).astype(np.float32)
    b = (RNG.integers(-3, 4, (128, 128))).astype(np.float32)
    r = nki.run(k, a, b)
    assert not r.errors and "psum_gpsimd" in [f.rule for f in r.warnings]
    assert np.array_equal(r.outputs, np.tril(a.T.astype(np.float64) @ b).astype(np.float32))


def test_lazy_initialization_changes_no_value():
    @nki.jit
    def k():
        out = nl.ndarray((128, 4), nl.float32, buffer=nl.shared_hbm)
        nl.store(out, value=nl.full((128, 4), 3.0, dtype=nl.float32, lazy_initialization=False))
        return out

    assert (nki.run(k).outputs == 3.0).all()
