"""``Run.bound()``: per element, a bound on |outputs - the kernel's exact dataflow|, walked over the
run. Never violated (against ``Run.exact()``, itself checked against exact rationals and numpy
float64 elsewhere) on random kernels and inputs, and tight: within 10x of the observed error on the
example kernels (matmuls, softmax, layernorm, rmsnorm, sum of squares, causal flash attention). An
instruction it cannot walk is refused by name and line."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from nki_support import example, matmul_summing_k_tiles, source_line
from numeq import nki

nl, nisa = nki.language, nki.isa

# Run.exact() lies within a few units of binary64's roundoff of the exact dataflow per operation:
# the check allows that much on top of the bound.
EXACT_SLACK = 2.0 ** -40


def _violations(run) -> tuple[int, float]:
    out, bound, exact = run.outputs.astype(np.float64), run.bound(), run.exact()
    err = np.abs(out - exact)
    bad = int(np.count_nonzero(err > bound + EXACT_SLACK * np.abs(exact)))
    return bad, float(np.max(bound) / max(np.max(err), 1e-300))


def _pipeline(steps: list, out_dtype) -> object:
    """A row-wise kernel: x [128, D] through ``steps`` (each writing a fresh tile of its dtype)."""

    @nki.jit
    def kernel(x):
        P, D = x.shape
        t = nl.ndarray((P, D), x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        first = t
        for kind, dtype, a, b in steps:
            cols = 1 if kind == "reduce" else D
            u = nl.ndarray((P, cols), dtype, buffer=nl.sbuf)
            if kind == "scalar":
                nisa.tensor_scalar(dst=u, data=t, op0=a, operand0=b, op1=nl.multiply, operand1=0.75)
            elif kind == "activation":
                nisa.activation(dst=u, op=a, data=t, scale=b, bias=0.125)
            elif kind == "tensor":
                nisa.tensor_tensor(dst=u, data1=t, data2=first, op=a)
            else:
                nisa.tensor_reduce(dst=u, op=a, data=t, axis=1)
            t = u
        out = nl.ndarray(t.shape, out_dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=t)
        return out

    return kernel


def _random_steps(rng) -> list:
    dtypes = [nl.float32, nl.float32, nl.bfloat16]
    steps = []
    for _ in range(rng.integers(2, 5)):
        kind = ["scalar", "activation", "tensor"][rng.integers(0, 3)]
        dtype = dtypes[rng.integers(0, 3)]
        if kind == "scalar":
            steps.append((kind, dtype, [nl.add, nl.subtract, nl.multiply][rng.integers(0, 3)], float(rng.normal())))
        elif kind == "activation":  # bounded arguments: scale 0.5 keeps exp finite after a few steps
            steps.append((kind, dtype, [nl.exp, nl.tanh, nl.sigmoid, nl.copy, nl.square, nl.abs][rng.integers(0, 6)],
                          0.5))
        else:
            steps.append((kind, dtype, [nl.add, nl.multiply, nl.maximum, nl.subtract][rng.integers(0, 4)], None))
    if rng.integers(0, 2):
        steps.append(("reduce", nl.float32, [nl.add, nl.maximum][rng.integers(0, 2)], None))
    return steps


@pytest.mark.parametrize("seed", range(24))
def test_the_bound_is_never_violated_on_random_row_kernels(seed):
    rng = np.random.default_rng(seed)
    steps = _random_steps(rng)
    dtype = [np.float32, ml_dtypes.bfloat16][rng.integers(0, 2)]
    x = rng.standard_normal((128, int(rng.integers(8, 300)))).astype(dtype)
    run = nki.run(_pipeline(steps, [nl.float32, nl.bfloat16][rng.integers(0, 2)]), x)
    bad, _ = _violations(run)
    assert bad == 0, steps


@pytest.mark.parametrize("seed", range(8))
def test_the_bound_is_never_violated_on_random_matmul_kernels(seed):
    rng = np.random.default_rng(100 + seed)
    k = 128 * int(rng.integers(1, 9))
    m, n = int(rng.integers(1, 129)), int(rng.integers(1, 513))
    dtype = [np.float32, ml_dtypes.bfloat16][rng.integers(0, 2)]
    a_t = rng.standard_normal((k, m)).astype(dtype)
    b = rng.standard_normal((k, n)).astype(dtype)
    acc = [nl.float32, nl.bfloat16, nl.float16][rng.integers(0, 3)]
    bad, _ = _violations(nki.run(matmul_summing_k_tiles(acc), a_t, b))
    assert bad == 0


@pytest.mark.parametrize("name", ["matmul_basic", "matmul_mnk", "matmul_kouter", "softmax", "layernorm", "rmsnorm",
                                  "sum_of_squares", "flash_attention"])
def test_on_the_example_kernels_the_bound_is_within_10x_of_the_error(name):
    m = example(name)
    run = nki.run(getattr(m, name), *m.inputs())
    bad, ratio = _violations(run)
    assert bad == 0 and 1 <= ratio <= 10, ratio


def test_a_bf16_running_sum_s_bound_is_the_bf16_error_not_fp32_s():
    rng = np.random.default_rng(3)
    a_t = rng.standard_normal((1024, 64)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((1024, 32)).astype(ml_dtypes.bfloat16)
    wide, narrow = (nki.run(matmul_summing_k_tiles(acc), a_t, b) for acc in (nl.float32, nl.bfloat16))
    for run in (wide, narrow):
        bad, ratio = _violations(run)
        assert bad == 0 and ratio <= 10
    assert np.max(narrow.bound()) > 100 * np.max(wide.bound())


def test_a_mask_from_iota_and_a_comparison_is_walked():
    # keep x where its column index is below a per-partition threshold tile: iota's exact integers,
    # a comparison (0 or 1, exact where the operands' boxes do not meet), a product
    @nki.jit
    def masked(x, limit):
        P, D = x.shape
        xt = nl.ndarray((P, D), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=xt, src=x)
        lim = nl.ndarray((P, 1), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=lim, src=limit)
        cols = nl.ndarray((P, D), nl.float32, buffer=nl.sbuf)
        nisa.iota(cols, [[1, D]], 0, 0)
        keep = nl.ndarray((P, D), nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=keep, data=cols, op0=nl.less, operand0=lim)
        y = nl.ndarray((P, D), nl.bfloat16, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=y, data1=xt, data2=keep, op=nl.multiply)
        out = nl.ndarray((P, D), nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=y)
        return out

    rng = np.random.default_rng(12)
    x = rng.standard_normal((128, 64)).astype(np.float32)
    limit = rng.integers(0, 65, size=(128, 1)).astype(np.float32)
    run = nki.run(masked, x, limit)
    expected = np.where(np.arange(64)[None, :] < limit, x.astype(np.float64), 0.0)  # numpy's mask
    assert np.array_equal(run.exact(), expected)
    bad, ratio = _violations(run)
    assert bad == 0 and ratio <= 10
    assert np.all(run.bound()[expected == 0] == 0)  # masked elements: exact zeros, radius 0


def test_an_instruction_it_cannot_walk_is_named_with_its_line():
    @nki.jit
    def running_max(x):
        t = nl.ndarray(x.shape, nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        u = nl.ndarray(x.shape, nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar_reduce(dst=u, data=t, op0=nl.add, operand0=0.0, reduce_op=nl.maximum)
        # the register the instruction above left (not recorded), continued: not followed
        nisa.tensor_scalar_cumulative(u, t, nl.add, nl.maximum, 0.0, reduce_cmd=nisa.reduce_cmd.reduce)  # CUMULATIVE
        out = nl.ndarray(x.shape, nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=u)
        return out

    run = nki.run(running_max, np.ones((128, 8), np.float32))
    line = source_line(running_max, "# CUMULATIVE")
    with pytest.raises(nki.Unsupported,
                       match=rf"{line}: Run.bound\(\) has no bound model for nisa\.tensor_scalar_cumulative "
                             r"continuing a register an instruction Run.bound\(\) did not follow"):
        run.bound()


def test_the_older_interface_s_writes_are_followed():
    # psum += nl.matmul(...) over K tiles, nl.copy out of PSUM, nl.store (examples/legacy_matmul.py),
    # and a fresh result assigned into a tile (t[...] = nl.exp(...)): the radii follow both writes.
    legacy = example("legacy_matmul")
    bad, ratio = _violations(nki.run(legacy.legacy_matmul, *legacy.inputs()))
    assert bad == 0 and ratio <= 1.5, ratio

    @nki.jit
    def assigned(x):
        P, D = x.shape
        t = nl.load(x)
        e = nl.ndarray((P, D), nl.float32, buffer=nl.sbuf)
        e[...] = nl.exp(t)
        s = nl.ndarray((P, D), nl.bfloat16, buffer=nl.sbuf)
        s[...] = nl.multiply(e, 0.75, dtype=nl.bfloat16)
        out = nl.ndarray((P, D), nl.bfloat16, buffer=nl.shared_hbm)
        nl.store(out, value=s)
        return out

    x = np.random.default_rng(4).standard_normal((128, 64)).astype(np.float32)
    bad, ratio = _violations(nki.run(assigned, x))
    assert bad == 0 and ratio <= 2, ratio


def test_a_scan_s_bound_holds_and_stays_near_its_error():
    m = example("cumsum")  # tensor_tensor_scan: 512 sequential fp32 additions per row
    bad, ratio = _violations(nki.run(m.cumsum, *m.inputs()))
    # The carry's 512 signed roundings are measured at once against a binary64 replay, not summed
    # in absolute value (that was 10.8x)
    assert bad == 0 and 1 <= ratio <= 1.5, ratio


def _scan_kernel(op0, op1, carry_dtype, scale: float):
    """data0 = scale * x rounded to carry_dtype (a tile with radii), data1 = x; a scan over them."""

    @nki.jit
    def scan(x):
        P, D = x.shape
        out = nl.ndarray((P, D), nl.float32, buffer=nl.shared_hbm)
        t = nl.ndarray((P, D), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        d0 = nl.ndarray((P, D), carry_dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=d0, data=t, op0=nl.multiply, operand0=scale)
        r = nl.ndarray((P, D), nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor_scan(dst=r, data0=d0, data1=t, initial=0.3, op0=op0, op1=op1)
        nisa.dma_copy(dst=out, src=r)
        return out

    return scan


@pytest.mark.parametrize("ops", [("multiply", "add"), ("add", "add"), ("maximum", "add"), ("add", "maximum"),
                                 ("multiply", "subtract")])
@pytest.mark.parametrize("carry", ["float32", "bfloat16"])
@pytest.mark.parametrize("scan_carry", ["fp32", "dtype"])
def test_a_scan_s_bound_holds_for_other_recurrences_and_narrow_carries(ops, carry, scan_carry):
    # A linear recurrence (an exponential moving average: r = 0.9 r + x), sums, running maxima, with
    # data0 rounded to bf16 on the way in (radii from upstream) and, under scan_carry=dtype, the
    # carry rounded to data0's dtype at every step: never violated, and close where nothing cancels.
    rng = np.random.default_rng(hash(ops + (carry, scan_carry)) % 2**32)
    x = rng.standard_normal((128, 96)).astype(np.float32)
    scale = 0.9 if ops[0] == "multiply" else 0.37
    kernel = _scan_kernel(getattr(nl, ops[0]), getattr(nl, ops[1]), getattr(nl, carry), scale)
    run = nki.run(kernel, x, assume={"scan_carry": scan_carry})
    bad, ratio = _violations(run)
    assert bad == 0, (ops, carry, scan_carry)
    assert ratio < 50, ratio


@pytest.mark.parametrize("ops", [("add", "add"), ("multiply", "add"), ("add", "maximum"), ("multiply", "multiply"),
                                 ("subtract", "minimum")])
@pytest.mark.parametrize("src_dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("load", [False, True])
def test_a_cumulative_s_bound_holds(ops, src_dtype, load):
    # tensor_scalar_cumulative: reg = op1(op0(src, imm0), reg) from op1's identity or from imm1
    # (load_reduce), over a bf16 source with radii from its rounding: never violated.
    rng = np.random.default_rng(hash(ops + (src_dtype, load)) % 2**32)
    x = (0.3 + 0.02 * rng.standard_normal((128, 64)) if ops[1] == "multiply" else rng.standard_normal((128, 64)))
    imm0 = 1.01 if ops[0] == "multiply" else 0.1

    @nki.jit
    def cumulative(x):
        P, D = x.shape
        t = nl.ndarray((P, D), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        src = nl.ndarray((P, D), getattr(nl, src_dtype), buffer=nl.sbuf)
        nisa.tensor_scalar(dst=src, data=t, op0=nl.multiply, operand0=1.3)
        u = nl.ndarray((P, D), nl.float32, buffer=nl.sbuf)
        if load:
            nisa.tensor_scalar_cumulative(u, src, getattr(nl, ops[0]), getattr(nl, ops[1]), imm0, imm1=0.7,
                                          reduce_cmd=nisa.reduce_cmd.load_reduce)
        else:
            nisa.tensor_scalar_cumulative(u, src, getattr(nl, ops[0]), getattr(nl, ops[1]), imm0)
        out = nl.ndarray((P, D), nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=u)
        return out

    bad, ratio = _violations(nki.run(cumulative, x.astype(np.float32)))
    assert bad == 0, (ops, src_dtype, load)
    assert ratio < 50, ratio


def test_gathers_and_scatters_move_radii_with_the_values():
    # Rows rounded to bf16 (radii from the rounding), stored to HBM, gathered back by an index tile
    # and scattered into the output at other rows: the radii travel with the values, so the bound
    # is the rounding's and is never violated.
    import ml_dtypes

    @nki.jit
    def gather_scatter(x, idx, where):
        n, m = x.shape
        k = idx.shape[0]
        t = nl.ndarray((n, m), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        narrow = nl.ndarray((n, m), nl.bfloat16, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=narrow, data=t, op0=nl.multiply, operand0=1.1)
        stash = nl.ndarray((n, m), nl.bfloat16, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=stash, src=narrow)
        idx_tile = nl.ndarray((k, 1), nl.int32, buffer=nl.sbuf)
        nisa.dma_copy(dst=idx_tile, src=idx)
        rows = nl.ndarray((k, m), nl.bfloat16, buffer=nl.sbuf)
        nisa.dma_copy(dst=rows, src=stash.ap([[m, k], [1, m]], vector_offset=idx_tile, indirect_dim=0))
        wide = nl.ndarray((k, m), nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=wide, data=rows, op0=nl.multiply, operand0=3.0)
        out = nl.ndarray((n, m), nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=t)
        where_tile = nl.ndarray((k, 1), nl.int32, buffer=nl.sbuf)
        nisa.dma_copy(dst=where_tile, src=where)
        nisa.dma_copy(dst=out.ap([[m, k], [1, m]], vector_offset=where_tile, indirect_dim=0), src=wide)
        return out

    rng = np.random.default_rng(12)
    x = rng.standard_normal((128, 48)).astype(np.float32)
    idx = rng.integers(0, 128, size=(32, 1)).astype(np.int32)
    where_rows = rng.permutation(128)[:32].reshape(32, 1).astype(np.int32)
    run = nki.run(gather_scatter, x, idx, where_rows)
    exact = run.exact()
    expected = x.astype(np.float64).copy()
    expected[where_rows[:, 0]] = 3.3 * x.astype(np.float64)[idx[:, 0]]  # numpy's indexing
    assert np.allclose(exact, expected, rtol=1e-15, atol=0)
    bad, ratio = _violations(run)
    assert bad == 0 and ratio <= 1.5, ratio
    bound = run.bound()
    untouched = np.setdiff1d(np.arange(128), where_rows[:, 0])
    assert np.all(bound[untouched] == 0)  # copied rows carry no error
    assert np.all(bound[where_rows[:, 0]] > 0)


def _narrow_tile(x):
    """x loaded and scaled into a bf16 tile: values with radii from the rounding."""
    P, D = x.shape
    t = nl.ndarray((P, D), nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    n = nl.ndarray((P, D), nl.bfloat16, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=n, data=t, op0=nl.multiply, operand0=1.1)
    return n


@nki.jit
def _moved_and_reduced(x):
    n = _narrow_tile(x)  # [128, 32] bf16
    tr = nl.ndarray((32, 128), nl.bfloat16, buffer=nl.sbuf)
    nisa.dma_transpose(dst=tr, src=n)
    sh = nl.ndarray((32, 128), nl.bfloat16, buffer=nl.sbuf)
    nisa.memset(dst=sh, value=0.0)
    nisa.nc_stream_shuffle(dst=sh, src=tr, shuffle_mask=[(7 * i + 3) % 32 if i % 5 else 255 for i in range(32)])
    wide = nl.ndarray((32, 128), nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=wide, src=sh)
    total = nl.ndarray((1, 128), nl.float32, buffer=nl.sbuf)
    nisa.tensor_partition_reduce(dst=total, op=nl.add, data=wide)
    top = nl.ndarray((1, 128), nl.float32, buffer=nl.sbuf)
    nisa.tensor_partition_reduce(dst=top, op=nl.maximum, data=wide)
    out = nl.ndarray((3, 128), nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out[0:1, :], src=total)
    nisa.dma_copy(dst=out[1:2, :], src=top)
    nisa.dma_copy(dst=out[2:3, :], src=wide[5:6, :])
    return out


@nki.jit
def _random_and_identity(x):
    n = _narrow_tile(x)  # [128, 32]
    r = nl.rand((128, 32), dtype=nl.bfloat16)
    prod = nl.ndarray((128, 32), nl.float32, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=prod, data1=n, data2=r, op=nl.multiply)
    eye = nl.shared_identity_matrix(128, dtype=nl.float32)
    ps = nl.ndarray((128, 32), nl.float32, buffer=nl.psum)
    nisa.nc_matmul(ps, eye, prod)  # eye^T @ prod: prod again, through the PE array
    res = nl.ndarray((128, 32), nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=res, src=ps)
    out = nl.ndarray((128, 32), nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=res)
    return out


@pytest.mark.parametrize("kernel", [_moved_and_reduced, _random_and_identity], ids=["moved", "random"])
def test_transposes_shuffles_partition_reductions_random_tiles_and_identities_are_bounded(kernel):
    # dma_transpose and nc_stream_shuffle move radii with the bits, tensor_partition_reduce sums or
    # takes the largest over partitions, nl.rand's draws and the identity are exact values: never
    # violated, and close to the error (the bf16 rounding dominates).
    x = np.random.default_rng(7).standard_normal((128, 32)).astype(np.float32)
    run = nki.run(kernel, x)
    bad, ratio = _violations(run)
    assert bad == 0 and 1 <= ratio <= 3, ratio
    if kernel is _moved_and_reduced:  # the exact dataflow against numpy's indexing and reductions
        tr = (1.1 * x.astype(np.float64)).T
        mask = [(7 * i + 3) % 32 if i % 5 else 255 for i in range(32)]
        wide = np.stack([tr[m] if m != 255 else np.zeros(128) for m in mask])
        expected = np.stack([wide.sum(axis=0), wide.max(axis=0), wide[5]])
        assert np.allclose(run.exact(), expected, rtol=1e-14, atol=1e-14)


def test_max8_s_bound_holds_on_near_ties():
    # The 8 largest of each partition after a bf16 rounding, with near ties (values 2^-9 apart) so
    # that the rounding reorders elements: an order statistic moves by at most the largest radius
    # of the elements that can reach the top 8; never violated, against numpy's sort of the exact values.
    @nki.jit
    def top8(x):
        n = _narrow_tile(x)
        t = nl.ndarray((128, 8), nl.float32, buffer=nl.sbuf)
        nisa.max8(dst=t, src=n)
        out = nl.ndarray((128, 8), nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=t)
        return out

    rng = np.random.default_rng(8)
    x = (1 + rng.integers(0, 64, size=(128, 40)) * 2.0 ** -9 + rng.standard_normal((128, 40)) * 1e-4).astype(np.float32)
    run = nki.run(top8, x)
    assert np.allclose(run.exact(), np.sort(1.1 * x.astype(np.float64), axis=1)[:, ::-1][:, :8], rtol=1e-14)
    bad, ratio = _violations(run)
    assert bad == 0 and ratio <= 4, ratio


@nki.jit
def _selections(x):
    n = _narrow_tile(x)  # bf16(1.1 x): values near 1.0 round across it
    pred = nl.ndarray((128, 32), nl.uint8, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=pred, data=n, op0=nl.greater, operand0=1.0)
    kept = nl.ndarray((128, 32), nl.bfloat16, buffer=nl.sbuf)
    nisa.memset(dst=kept, value=-3.0)
    nisa.tensor_copy_predicated(dst=kept, src=n, predicate=pred)
    chosen = nl.ndarray((128, 32), nl.float32, buffer=nl.sbuf)
    nisa.select_reduce(dst=chosen, predicate=pred, on_true=kept, on_false=0.5)
    flipped = nl.ndarray((128, 32), nl.float32, buffer=nl.sbuf)
    nisa.select_reduce(dst=flipped, predicate=pred, on_true=n, on_false=0.25, reverse_pred=True)
    both = nl.where(pred, chosen, flipped)  # n > 1 ? n : n; each through two selections on one predicate
    out = nl.ndarray((128, 64), nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out[:, 0:32], src=chosen)  # n > 1 ? n : 0.5
    nisa.dma_copy(dst=out[:, 32:64], src=both)
    return out


@pytest.mark.parametrize("spread", [1e-2, 1e-3])
def test_predicated_copies_and_selections_are_bounded_where_the_predicate_is_uncertain(spread):
    # tensor_copy_predicated, select_reduce and nl.where on a predicate from a comparison of
    # rounded values near its threshold: where the comparison's boxes meet, the exact dataflow may
    # choose the other operand, and the bound takes the larger distance; never violated.
    rng = np.random.default_rng(int(1 / spread))
    x = (1 / 1.1 + spread * rng.standard_normal((128, 32))).astype(np.float32)
    run = nki.run(_selections, x)
    out, bound, exact = run.outputs.astype(np.float64), run.bound(), run.exact()
    assert np.all(np.abs(out - exact) <= bound + 1e-15 * np.abs(exact))
    # some elements were chosen the other way by the rounding: their error is large, and bounded
    assert np.max(np.abs(out - exact)[:, :32]) > 0.1 and np.all(np.isfinite(bound))


@pytest.mark.parametrize("reduce_op", ["add", "maximum", "minimum"])
@pytest.mark.parametrize("dst_dtype", ["float32", "bfloat16"])
def test_tensor_scalar_reduce_s_results_and_reduction_are_bounded(reduce_op, dst_dtype):
    # dst = n * 1.3 (cast into dst's dtype) and reduce_res = the reduce_op of the fp32 products over
    # each row, negated: never violated, against numpy's reductions of the exact values.
    @nki.jit
    def scaled_sums(x):
        n = _narrow_tile(x)
        d = nl.ndarray((128, 32), getattr(nl, dst_dtype), buffer=nl.sbuf)
        s = nl.ndarray((128, 1), nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar_reduce(dst=d, data=n, op0=nl.multiply, operand0=1.3, reduce_op=getattr(nl, reduce_op),
                                  reduce_res=s, reduce_res_negate=True)
        out = nl.ndarray((128, 33), nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out[:, 0:32], src=d)
        nisa.dma_copy(dst=out[:, 32:33], src=s)
        return out

    x = np.random.default_rng(9).standard_normal((128, 32)).astype(np.float32)
    run = nki.run(scaled_sums, x)
    exact = 1.3 * 1.1 * x.astype(np.float64)
    reduced = {"add": exact.sum(axis=1), "maximum": exact.max(axis=1), "minimum": exact.min(axis=1)}[reduce_op]
    assert np.allclose(run.exact()[:, 32], -reduced, rtol=1e-12, atol=1e-12)
    bad, ratio = _violations(run)
    assert bad == 0 and ratio <= 4, ratio


@pytest.mark.parametrize("near", [False, True])
def test_range_select_and_its_max_are_bounded(near):
    # on_true rounded to bf16 (radii), kept where lo <= idx < hi with per-partition bounds; the
    # bounds are exact, or (near) themselves rounded values close to an index, so the comparison is
    # uncertain where the rounding moves a bound across it: never violated.
    @nki.jit
    def windowed(x, lo, hi):
        n = _narrow_tile(x)
        bounds = []
        for src in (lo, hi):
            t = nl.ndarray((128, 1), nl.float32, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=src)
            b = nl.ndarray((128, 1), nl.float32, buffer=nl.sbuf)
            if near:
                nb = nl.ndarray((128, 1), nl.bfloat16, buffer=nl.sbuf)
                nisa.tensor_scalar(dst=nb, data=t, op0=nl.multiply, operand0=1.1)
                nisa.tensor_copy(dst=b, src=nb)
            else:
                nisa.tensor_copy(dst=b, src=t)
            bounds.append(b)
        d = nl.ndarray((128, 32), nl.float32, buffer=nl.sbuf)
        top = nl.ndarray((128, 1), nl.float32, buffer=nl.sbuf)
        nisa.range_select(dst=d, on_true_tile=n, comp_op0=nl.greater_equal, comp_op1=nl.less, bound0=bounds[0],
                          bound1=bounds[1], reduce_cmd=nisa.reduce_cmd.reset_reduce, reduce_res=top)
        out = nl.ndarray((128, 33), nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out[:, 0:32], src=d)
        nisa.dma_copy(dst=out[:, 32:33], src=top)
        return out

    rng = np.random.default_rng(5 + near)
    x = rng.standard_normal((128, 32)).astype(np.float32)
    lo = rng.integers(0, 12, size=(128, 1)).astype(np.float32)
    hi = lo + rng.integers(4, 20, size=(128, 1)).astype(np.float32)
    if near:  # 1.1 * (k / 1.1 +- tiny): the rounded bound lands on either side of the index k
        lo, hi = (lo / 1.1 + rng.choice([-1e-4, 1e-4], size=lo.shape)).astype(np.float32), (hi / 1.1).astype(np.float32)
    run = nki.run(windowed, x, lo, hi)
    out, bound, exact = run.outputs.astype(np.float64), run.bound(), run.exact()
    finite = np.isfinite(exact) & (np.abs(exact) < 1e38)  # FP32_MIN fills: equal, radius 0 where certain
    assert np.all(np.abs(out - exact)[finite] <= bound[finite] + 1e-15 * np.abs(exact[finite]))
    assert np.all(out[~finite] == exact[~finite]) or near


def test_a_cumulative_continues_the_register_the_last_one_left():
    # Two halves of a row's running sum, the second continuing the Vector registers the first left
    # (reduce_cmd=reduce): the registers' value and radius carry over; never violated, tight, and
    # the exact dataflow is numpy's cumulative sum of the whole row.
    @nki.jit
    def halves(x):
        n = _narrow_tile(x)  # [128, 32]
        first = nl.ndarray((128, 16), nl.float32, buffer=nl.sbuf)
        second = nl.ndarray((128, 16), nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar_cumulative(first, n[:, 0:16], nl.multiply, nl.add, 1.0)
        nisa.tensor_scalar_cumulative(second, n[:, 16:32], nl.multiply, nl.add, 1.0,
                                      reduce_cmd=nisa.reduce_cmd.reduce)
        out = nl.ndarray((128, 32), nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out[:, 0:16], src=first)
        nisa.dma_copy(dst=out[:, 16:32], src=second)
        return out

    x = np.random.default_rng(13).standard_normal((128, 32)).astype(np.float32)
    run = nki.run(halves, x)
    assert np.allclose(run.exact(), np.cumsum(1.1 * x.astype(np.float64), axis=1), rtol=1e-13, atol=1e-13)
    bad, ratio = _violations(run)
    assert bad == 0 and ratio <= 2, ratio


def test_dropout_keeps_the_radii_of_what_it_keeps():
    # dropout with the generator's draws (the same in the exact dataflow) on a bf16-rounded tile:
    # dropped elements are exact zeros, kept ones keep their radii; never violated.
    @nki.jit
    def dropped(x):
        n = _narrow_tile(x)
        d = nl.ndarray((128, 32), nl.bfloat16, buffer=nl.sbuf)
        nisa.dropout(dst=d, data=n, prob=0.3)
        out = nl.ndarray((128, 32), nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=d)
        return out

    x = np.random.default_rng(14).standard_normal((128, 32)).astype(np.float32)
    run = nki.run(dropped, x)
    out, bound = run.outputs.astype(np.float64), run.bound()
    assert 0.2 < np.mean(out == 0) < 0.4  # about prob of them dropped
    assert np.all(bound[out == 0] == 0)
    bad, ratio = _violations(run)
    assert bad == 0 and ratio <= 2, ratio


def test_nc_n_gather_moves_radii_with_the_gathered_elements():
    # Each partition gathers its own elements by an index tile: the radii of a bf16 rounding travel
    # with them (never violated, tight; the exact dataflow is numpy's take_along_axis).
    @nki.jit
    def gathered(x, idx):
        n = _narrow_tile(x)
        i = nl.ndarray((128, 16), nl.uint32, buffer=nl.sbuf)
        nisa.dma_copy(dst=i, src=idx)
        g = nl.ndarray((128, 16), nl.bfloat16, buffer=nl.sbuf)
        nisa.nc_n_gather(dst=g, data=n, indices=i)
        out = nl.ndarray((128, 16), nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=g)
        return out

    rng = np.random.default_rng(15)
    x = rng.standard_normal((128, 32)).astype(np.float32)
    idx = rng.integers(0, 32, size=(128, 16)).astype(np.uint32)
    run = nki.run(gathered, x, idx)
    assert np.allclose(run.exact(), np.take_along_axis(1.1 * x.astype(np.float64), idx.astype(np.int64), axis=1),
                       rtol=1e-15)
    bad, ratio = _violations(run)
    assert bad == 0 and ratio <= 1.5, ratio
