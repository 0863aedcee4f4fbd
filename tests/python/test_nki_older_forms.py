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


def test_nonzero_with_count_on_a_tile_written_in_partition_0_only():
    # As nki-library's find_nonzero_indices_with_count does: one row loaded into partition 0, the
    # instruction's other cores read unwritten partitions (their results are never read).
    @nki.jit
    def k(x):
        T = x.shape[-1]
        src = nl.ndarray((128, T), nl.float32, buffer=nl.sbuf)
        res = nl.ndarray((128, T + 1), nl.int32, buffer=nl.sbuf)
        out = nl.ndarray((1, T + 1), nl.int32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=src[0, :], src=x[...])
        nisa.nonzero_with_count(dst=res, src=src, index_offset=0, padding_val=-1)
        nisa.dma_copy(dst=out[0, :], src=res[0, :])
        return out

    x = np.zeros((1, 64), np.float32)
    x[0, [3, 10, 11, 63]] = [1.0, -2.0, 0.5, 7.0]
    r = nki.run(k, x)
    assert not r.errors, r.errors
    want = np.full(65, -1)
    want[:4] = [3, 10, 11, 63]
    want[64] = 4
    assert np.array_equal(r.outputs[0], want)


def test_a_dma_may_write_any_partition_a_compute_engine_may_not_start_anywhere():
    @nki.jit
    def k(x):
        t = nl.ndarray((128, 8), nl.float32, buffer=nl.sbuf)
        nisa.memset(t, 0.0)
        nisa.dma_copy(dst=t[5:6, :], src=x)  # one row at partition 5: a DMA, allowed
        out = nl.ndarray((128, 8), nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=t)
        return out

    @nki.jit
    def compute(x):
        t = nl.ndarray((128, 8), nl.float32, buffer=nl.sbuf)
        nisa.memset(t, 0.0)
        nisa.tensor_scalar(dst=t[5:6, :], data=t[5:6, :], op0=nl.add, operand0=1.0)  # an engine at 5
        return x

    x = np.arange(8, dtype=np.float32).reshape(1, 8)
    r = nki.run(k, x)
    assert not r.findings or "partition_start" not in [f.rule for f in r.findings]
    assert np.array_equal(r.outputs[5], x[0]) and not r.outputs[[0, 6]].any()
    assert "partition_start" in [f.rule for f in nki.run(compute, x).errors]


def test_a_constant_mask_runs_an_instruction_or_skips_it_and_loop_reduce_accumulates_into_its_target():
    # As nki-samples' flash attention backward writes them: mask = (i_q * 128 >= i_k * 128), a
    # Python bool per tile pair, and dq[...] = nl.loop_reduce(x, op=np.add, loop_indices=(k,)).
    @nki.jit
    def k(a):
        out = nl.ndarray((128, 16), nl.float32, buffer=nl.shared_hbm)
        acc = nl.zeros((128, 16), nl.float32, buffer=nl.sbuf)
        for i in nl.affine_range(4):
            mask = i * 128 <= 2 * 128  # tiles 0, 1, 2 in, tile 3 out
            t = nl.load(a[i])
            doubled = nl.multiply(t, 2.0, mask=mask)
            acc[...] = nl.loop_reduce(doubled, op=np.add, loop_indices=(i,), mask=mask)
        nl.store(out, value=acc)
        return out

    a = RNG.standard_normal((4, 128, 16)).astype(np.float32)
    want = np.zeros((128, 16), np.float32)
    for i in range(3):
        want = want + np.float32(2) * a[i]
    r = nki.run(k, a)
    assert not r.errors and np.array_equal(r.outputs, want)


def test_a_masked_dma_copy_of_a_last_tile_reaching_past_its_tensor():
    # As nki-samples' adaptive pooling writes it: tiles of 128 rows over 200 rows, the last one
    # reaching past the end, masked to the rows that exist (a slice, not nl.arange).
    @nki.jit
    def k(a):
        n, f = a.shape
        out = nl.ndarray((n, f), a.dtype, buffer=nl.shared_hbm)
        i_p = nl.arange(128)[:, None]
        for t in nl.affine_range((n + 127) // 128):
            tile = nl.ndarray((128, f), a.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=tile, src=a[t * 128:(t + 1) * 128, :], mask=(t * 128 + i_p < n))
            nisa.dma_copy(dst=out[t * 128:(t + 1) * 128, :], src=tile, mask=(t * 128 + i_p < n))
        return out

    a = RNG.standard_normal((200, 16)).astype(np.float32)
    r = nki.run(k, a)
    assert not r.errors and np.array_equal(r.outputs, a)


def test_a_narrow_float_scalar_is_a_value():
    import ml_dtypes

    @nki.jit
    def k():
        t = nl.full((4, 4), fill_value=nl.finfo(nl.bfloat16).min, dtype=nl.bfloat16)
        out = nl.ndarray((4, 4), nl.bfloat16, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=t)
        return out

    assert (nki.run(k).outputs == ml_dtypes.finfo(ml_dtypes.bfloat16).min).all()


def test_tile_functions_that_are_not_one_activation():
    # nl.floor / ceil / trunc exactly, nl.cos / tan / sin (range-reduced) / arctan correctly rounded
    # to fp32 (oracle: numpy in float64, rounded once; exact for these inputs' float32 results
    # where float64's own error is far below half an fp32 ulp).
    x = np.concatenate([np.linspace(-9.5, 9.5, 126), [0.5, -0.5]]).astype(np.float32).reshape(128, 1)

    def kernel(name):
        @nki.jit
        def k(a):
            out = nl.ndarray(a.shape, nl.float32, buffer=nl.shared_hbm)
            nl.store(out, value=getattr(nl, name)(nl.load(a)))
            return out
        return k

    for name, f in (("floor", np.floor), ("ceil", np.ceil), ("trunc", np.trunc)):
        assert np.array_equal(nki.run(kernel(name), x).outputs, f(x)), name
    for name, f in (("cos", np.cos), ("sin", np.sin), ("arctan", np.arctan)):
        got = nki.run(kernel(name), x).outputs
        assert np.array_equal(got, f(x.astype(np.float64)).astype(np.float32)), name


def test_pending_psum_chains_computed_early_give_the_same_bits(monkeypatch):
    # A bound on the operand bytes pending matmul chains keep (machine.psum.PENDING_BYTES_LIMIT):
    # a chain computed early, its later matmuls added one by one, gives the same values.
    import ml_dtypes
    from numeq.nki.machine import psum

    @nki.jit
    def k(a_t, b):
        K, M = a_t.shape
        out = nl.ndarray((M, b.shape[1]), nl.float32, buffer=nl.shared_hbm)
        acc = nl.ndarray((M, b.shape[1]), nl.float32, buffer=nl.psum)
        for i in nl.affine_range(K // 128):
            at = nl.ndarray((128, M), a_t.dtype, buffer=nl.sbuf)
            bt = nl.ndarray((128, b.shape[1]), b.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=at, src=a_t[i * 128:(i + 1) * 128, :])
            nisa.dma_copy(dst=bt, src=b[i * 128:(i + 1) * 128, :])
            nisa.nc_matmul(acc, at, bt)
        o = nl.ndarray(acc.shape, nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=o, src=acc)
        nisa.dma_copy(dst=out, src=o)
        return out

    a_t = RNG.standard_normal((1024, 128)).astype(ml_dtypes.bfloat16)
    b = RNG.standard_normal((1024, 256)).astype(ml_dtypes.bfloat16)
    whole = nki.run(k, a_t, b).outputs
    monkeypatch.setattr(psum, "PENDING_BYTES_LIMIT", 3 * 128 * 384 * 2)  # settles every few matmuls
    pieces = nki.run(k, a_t, b).outputs
    assert np.array_equal(whole.view(np.uint32), pieces.view(np.uint32))
