"""numeq.nki's instructions beyond the core set, part two: generated patterns, selects, shuffles,
top-8 search, nonzero_with_count, DMA transposes and computes. The kernels (both interfaces) and
the oracles are written as test_nki_isa.py, part one (the rest), says in its docstring.
"""

from __future__ import annotations

import itertools

import ml_dtypes
import numpy as np
import pytest

from nki_support import F32_MIN, errors, f32, hbm, line_finder, sbuf
from numeq import nki

nl, nisa = nki.language, nki.isa
line_of = line_finder(__file__)

rng = np.random.default_rng(20240601)


OPS64 = {"add": np.add, "subtract": np.subtract, "multiply": np.multiply, "maximum": np.maximum,
         "minimum": np.minimum, "divide": np.divide}


def op64(name, x, y):
    """One fp32 ALU operation: the binary64 result rounded to fp32."""
    with np.errstate(all="ignore"):
        return f32(OPS64[name](np.asarray(x, np.float64), np.asarray(y, np.float64)))


def seq_reduce(op, start, x):
    r = start
    for j in range(x.shape[1]):
        r = op64(op, r, x[:, j])
    return r


# --- iota / affine_select ----------------------------------------------------------------------------

def affine_oracle(P, pattern, offset, mult):
    """The docstring's nested loops, in Python integers: [P][flattened free] values."""
    pattern = list(pattern) + [[0, 1]] * (4 - len(pattern))
    (sw, nw), (sz, nz), (sy, ny), (sx, nx) = pattern
    return [[offset + c * mult + w * sw + z * sz + y * sy + x * sx
             for w in range(nw) for z in range(nz) for y in range(ny) for x in range(nx)] for c in range(P)]


PATTERN_CASES = [(P, pat) for P in (1, 2, 3)
                 for dims in (1, 2, 3, 4)
                 for pat in itertools.product(*[[(s, n) for s in (-2, 0, 3) for n in (1, 2)]] * dims)
                 if dims < 3 or all(n == 2 for _, n in pat[:1])][::7]


def test_iota_small_patterns_exhaustive():
    """Every sampled pattern of up to 4 dims, steps -2 / 0 / 3, sizes 1 / 2, three offsets and
    channel multipliers, int32 and fp32 destinations, in one kernel."""
    cases = [(P, [list(p) for p in pat], off, mult) for P, pat in PATTERN_CASES for off, mult in ((0, 0), (5, -3), (-7, 4))]

    @nki.jit
    def iotas():
        outs = []
        for P, pat, off, mult in cases:
            F = int(np.prod([n for _, n in pat]))
            a = nl.ndarray((P, F), nl.int32, buffer=nl.sbuf)
            nisa.iota(a, pat, off, mult)
            b = nl.ndarray((P, F), nl.float32, buffer=nl.sbuf)
            nisa.iota(dst=b, pattern=pat, offset=off, channel_multiplier=mult)
            outs += [hbm(a), hbm(b)]
        return outs

    r = nki.run(iotas)
    assert r.errors == [] and len(cases) > 100
    for (P, pat, off, mult), a, b in zip(cases, r.outputs[0::2], r.outputs[1::2]):
        expect = affine_oracle(P, pat, off, mult)
        assert a.tolist() == expect and b.tolist() == [[float(v) for v in row] for row in expect]
    assert {i.engine for i in r.trace if i.name == "iota"} == {"gpsimd"}
    assert [i.cycles for i in r.trace if i.name == "iota"][:2] == [150 + 1, 150 + 1]


def test_iota_rounding_wrap_and_older_form():
    @nki.jit
    def big():
        b = nl.ndarray((2, 3), nl.bfloat16, buffer=nl.sbuf)
        nisa.iota(b, [[1001, 3]], 16_000_000, 7)  # exact in fp32, rounded once into bf16
        w = nl.ndarray((1, 2), nl.int32, buffer=nl.sbuf)
        nisa.iota(w, [[1, 2]], 2 ** 31 - 1)  # <iota-wrap>
        e = nisa.iota(5 + nl.arange(128)[:, None] * 2 + nl.arange(4)[None, :], nl.int32)  # the older form
        n = nisa.iota(np.arange(3)[None, :] * -7, dtype=nl.float32)  # any integer array
        return hbm(b), hbm(w), hbm(e), hbm(n)

    r = nki.run(big)
    b, w, e, n = r.outputs
    expect = np.array(affine_oracle(2, [[1001, 3]], 16_000_000, 7), dtype=np.float32)
    assert np.array_equal(b, expect.astype(ml_dtypes.bfloat16))
    assert w.tolist() == [[2 ** 31 - 1, -(2 ** 31)]]
    (f,) = errors(r, "instruction_constraint")
    assert f.where == line_of("<iota-wrap>") and "int32" in f.message
    assert e.tolist() == [[5 + 2 * p + x for x in range(4)] for p in range(128)]
    assert n.tolist() == [[0.0, -7.0, -14.0]]


CMP = {"equal": lambda v: v == 0, "not_equal": lambda v: v != 0, "greater": lambda v: v > 0,
       "greater_equal": lambda v: v >= 0, "less": lambda v: v < 0, "less_equal": lambda v: v <= 0}


def test_affine_select_exhaustive_small_both_orders():
    cases = [(P, F, step, mult, off, cmp) for P in (1, 2, 3) for F in (1, 2, 4) for step in (-1, 1)
             for mult in (-1, 0, 1) for off in (-2, 0, 1) for cmp in CMP]
    x = f32(rng.standard_normal((3, 4)) + 10)

    @nki.jit
    def selects(x):
        tx = sbuf(x)
        outs = []
        for i, (P, F, step, mult, off, cmp) in enumerate(cases):
            d = nl.ndarray((P, F), nl.float32, buffer=nl.sbuf)
            if i % 2:  # the current order: (dst, pattern, channel_multiplier, on_true_tile, on_false_value, cmp_op, offset)
                nisa.affine_select(d, [[step, F]], mult, tx[0:P, 0:F], -1.5, getattr(nl, cmp), off)
            else:  # 0.2.0's: (dst, pattern, offset, channel_multiplier, on_true_tile, on_false_value, cmp_op)
                nisa.affine_select(d, [[step, F]], off, mult, tx[0:P, 0:F], -1.5, getattr(nl, cmp))
            outs.append(hbm(d))
        return outs

    r = nki.run(selects, x)
    assert r.errors == [] and len(cases) == 972
    for (P, F, step, mult, off, cmp), out in zip(cases, r.outputs):
        v = affine_oracle(P, [[step, F]], off, mult)
        assert out.tolist() == [[float(x[p, i]) if CMP[cmp](v[p][i]) else -1.5 for i in range(F)] for p in range(P)]


def test_causal_mask_bits_and_older_form():
    s = rng.standard_normal((128, 128)).astype(ml_dtypes.bfloat16)
    s[3, 1] = np.array(np.nan, dtype=ml_dtypes.bfloat16)  # a NaN kept bit for bit

    @nki.jit
    def causal(s):
        t = sbuf(s)
        m = nl.ndarray(s.shape, nl.bfloat16, buffer=nl.sbuf)
        # keep key i <= query p: p * 1 + i * (-1) >= 0
        nisa.affine_select(dst=m, pattern=[[-1, 128]], channel_multiplier=1, on_true_tile=t,
                           on_false_value=F32_MIN, cmp_op=nl.greater_equal)
        ix, iy = nl.mgrid[0:128, 0:128]
        old = nisa.affine_select(pred=(iy < ix), on_true_tile=t[ix, iy], on_false_value=F32_MIN, dtype=nl.float32)
        return hbm(m), hbm(old)

    m, old = nki.run(causal, s).outputs
    keep = np.tril(np.ones((128, 128), bool))
    fill = np.float32(F32_MIN).astype(ml_dtypes.bfloat16)  # FP32_MIN into bf16: -inf
    assert np.isneginf(np.float32(fill))
    assert np.array_equal(m.view(np.uint16), np.where(keep, s, fill).view(np.uint16))
    strict = np.tril(np.ones((128, 128), bool), -1)
    assert np.array_equal(old, np.where(strict, s.astype(np.float32), np.float32(F32_MIN)), equal_nan=True)


def test_affine_select_in_psum_is_a_finding():
    @nki.jit
    def bad(x):
        p = nl.ndarray(x.shape, nl.float32, buffer=nl.psum)
        nisa.affine_select(p, [[1, 8]], 0, sbuf(x), 0.0)  # <affine-psum>
        o = nl.ndarray(x.shape, nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=o, src=p)
        return hbm(o)

    r = nki.run(bad, np.ones((4, 8), np.float32))
    assert line_of("<affine-psum>") in {f.where for f in errors(r, "engine_access")}


# --- range_select / select_reduce / predicated copy / shuffle / dropout ----------------------------------

@pytest.mark.parametrize("dtype", [np.float32, ml_dtypes.bfloat16])
def test_range_select(dtype):
    x = rng.standard_normal((6, 20)).astype(np.float32)
    b0 = f32(rng.integers(0, 30, (6, 1)))
    b1 = f32(b0 + rng.integers(-2, 6, (6, 1)))

    @nki.jit
    def rs(x, b0, b1):
        tx, t0, t1 = sbuf(x), sbuf(b0), sbuf(b1)
        d = nl.ndarray(x.shape, dtype, buffer=nl.sbuf)
        red = nl.ndarray((6, 1), nl.float32, buffer=nl.sbuf)
        nisa.range_select(dst=d, on_true_tile=tx, comp_op0=nl.greater_equal, comp_op1=nl.less, bound0=t0, bound1=t1,
                          reduce_res=red, range_start=7)
        return hbm(d), hbm(red)

    d, red = nki.run(rs, x, b0, b1).outputs
    idx = 7 + np.arange(20, dtype=np.float64)[None, :]
    keep = (idx >= b0) & (idx < b1)
    sel = np.where(keep, x, np.float32(F32_MIN)).astype(np.float32)
    assert np.array_equal(d, sel.astype(dtype))
    assert np.array_equal(red[:, 0], sel.max(axis=1))  # a row with nothing kept: FP32_MIN, not -inf
    assert (~keep).all(axis=1).any()


def test_range_select_limits():
    @nki.jit
    def rs(x):
        tx = sbuf(x)
        b = nl.ndarray((2, 1), nl.float32, buffer=nl.sbuf)
        nisa.memset(b, 1.0)
        d = nl.ndarray(x.shape, nl.float32, buffer=nl.sbuf)
        nisa.range_select(d, tx, nl.greater, nl.less, b, b, on_false_value=0.0)  # <rs-fill>
        return hbm(d)

    r = nki.run(rs, np.ones((2, 4), np.float32), target="trn1")
    assert [f.where for f in errors(r, "target_generation")] == [line_of("<rs-fill>")]
    assert [f.where for f in errors(r, "instruction_constraint")] == [line_of("<rs-fill>")]


def test_select_reduce_and_chained_max():
    x = f32(rng.standard_normal((5, 16)))
    y = f32(rng.standard_normal((5, 16)))
    pred = rng.integers(0, 3, (5, 16)).astype(np.uint8)
    pred[2] = 0
    fill = f32(rng.standard_normal((5, 1)))

    @nki.jit
    def sr(x, y, pred, fill):
        tx, ty, tp, tf = sbuf(x), sbuf(y), sbuf(pred), sbuf(fill)
        d = nl.ndarray(x.shape, nl.float32, buffer=nl.sbuf)
        red = nl.ndarray((5, 1), nl.float32, buffer=nl.sbuf)
        nisa.select_reduce(d, tp, tx, tf, reduce_cmd=nisa.reduce_cmd.reset_reduce)
        e = nl.ndarray(x.shape, nl.bfloat16, buffer=nl.sbuf)
        nisa.select_reduce(dst=e, predicate=tp, on_true=ty, on_false=F32_MIN, reduce_res=red,
                           reduce_cmd=nisa.reduce_cmd.reduce, reduce_op=nl.maximum, reverse_pred=True)
        return hbm(d), hbm(e), hbm(red)

    d, e, red = nki.run(sr, x, y, pred, fill).outputs
    first = np.where(pred != 0, x, fill)
    second = np.where(pred == 0, y, np.float32(F32_MIN))
    assert np.array_equal(d, first)
    assert np.array_equal(e, second.astype(ml_dtypes.bfloat16))
    assert np.array_equal(red[:, 0], np.maximum(first.max(axis=1), second.max(axis=1)))


def test_tensor_copy_predicated_leaves_the_rest():
    src = rng.standard_normal((4, 10)).astype(ml_dtypes.bfloat16)
    src[0, 0] = np.array(np.nan, dtype=ml_dtypes.bfloat16)
    pred = (rng.random((4, 10)) < 0.5).astype(np.uint16)
    pred[0, 0] = 1

    @nki.jit
    def cp(src, pred):
        ts, tp = sbuf(src), sbuf(pred)
        d = nl.ndarray(src.shape, nl.bfloat16, buffer=nl.sbuf)
        nisa.memset(d, 7.0)
        nisa.tensor_copy_predicated(d, ts, tp)
        e = nl.ndarray(src.shape, nl.bfloat16, buffer=nl.sbuf)
        nisa.memset(e, -1.0)
        nisa.tensor_copy_predicated(dst=e, src=2.5, predicate=tp, reverse_pred=True)
        u = nl.ndarray(src.shape, nl.bfloat16, buffer=nl.sbuf)  # never fully written
        nisa.tensor_copy_predicated(dst=u, src=ts, predicate=tp)
        out_u = nl.ndarray(src.shape, nl.bfloat16, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out_u, src=u)  # <cp-unwritten>
        return hbm(d), hbm(e), out_u

    r = nki.run(cp, src, pred)
    d, e, u = r.outputs
    seven = np.array(7.0, dtype=ml_dtypes.bfloat16)
    assert np.array_equal(d.view(np.uint16), np.where(pred != 0, src, seven).view(np.uint16))
    assert np.array_equal(e, np.where(pred == 0, np.float32(2.5), np.float32(-1)).astype(ml_dtypes.bfloat16))
    # u's unselected elements were never written: the output holds them undefined
    assert errors(r, "read_uninitialised") == []
    (w,) = errors(r, "output_partly_written")
    assert f"{int(np.count_nonzero(pred == 0))} of {pred.size} elements" in w.message


def shuffle_oracle(src, dst, mask):
    out = dst.copy()
    active = -(-max(len(src), len(dst)) // 32) * 32
    for q in range(active // 32):
        for i, m in enumerate(mask):
            if m != 255 and q * 32 + i < len(dst):
                out[q * 32 + i] = src[q * 32 + m]
    return out


def test_nc_stream_shuffle():
    masks = [[(i - 1) % 32 for i in range(32)], [0] * 32, list(rng.permutation(32)),
             [int(v) if v < 32 else 255 for v in rng.integers(0, 40, 32)]]
    x = f32(rng.standard_normal((128, 6)))

    @nki.jit
    def shuffles(x):
        tx = sbuf(x)
        outs = []
        for mask in masks:
            for P in (32, 64, 128):
                d = nl.ndarray((P, 6), nl.float32, buffer=nl.sbuf)
                nisa.memset(d, -3.0)
                nisa.nc_stream_shuffle(d, tx[0:P], mask)
                outs.append(hbm(d))
        one = nl.ndarray((32, 6), nl.float32, buffer=nl.sbuf)
        nisa.nc_stream_shuffle(src=tx[0:1], dst=one, shuffle_mask=[0] * 32)  # broadcast one partition
        t = sbuf(x)
        nisa.nc_stream_shuffle(src=t[0:32], dst=t[0:32], shuffle_mask=masks[0])  # in place
        return outs + [hbm(one), hbm(t)]

    r = nki.run(shuffles, x)
    assert r.errors == []
    outs = iter(r.outputs)
    for mask in masks:
        for P in (32, 64, 128):
            assert np.array_equal(next(outs), shuffle_oracle(x[0:P], np.full((P, 6), -3, np.float32), mask))
    assert np.array_equal(next(outs), np.repeat(x[0:1], 32, axis=0))
    t = next(outs)
    assert np.array_equal(t[0:32], x[[31] + list(range(31))]) and np.array_equal(t[32:], x[32:])


def test_dropout_documented_cases_are_exact():
    x = rng.standard_normal((4, 8)).astype(ml_dtypes.bfloat16)
    prob = np.array([[0], [1], [1], [0]], np.float32)

    @nki.jit
    def drop(x, prob):
        tx = sbuf(x)
        d = nl.ndarray(x.shape, nl.bfloat16, buffer=nl.sbuf)
        nisa.dropout(d, tx, sbuf(prob))
        return hbm(d), hbm(nisa.dropout(tx, 0.0)), hbm(nisa.dropout(tx, 1.0))

    d, keep, zero = nki.run(drop, x, prob).outputs
    assert np.array_equal(d.view(np.uint16), np.where(prob == 1, np.zeros((), ml_dtypes.bfloat16), x).view(np.uint16))
    assert np.array_equal(keep.view(np.uint16), x.view(np.uint16)) and not zero.view(np.uint16).any()


def test_older_forms_of_reductions_and_selects():
    """The 0.1.0 value-returning forms: keyword arguments, a new tile returned."""
    x = f32(rng.standard_normal((4, 24)))
    b0, b1 = np.full((4, 1), 3.0, np.float32), np.full((4, 1), 9.0, np.float32)
    vals = x[:, [5, 1, 1, 7, 0, 2, 9, 5]].copy()

    @nki.jit
    def old(x_tensor, b0_tensor, b1_tensor, vals_tensor):
        x, b0, b1, vals = nl.load(x_tensor), nl.load(b0_tensor), nl.load(b1_tensor), nl.load(vals_tensor)
        red = nl.ndarray((4, 1), nl.float32, buffer=nl.sbuf)
        t = nisa.tensor_scalar_reduce(data=x, op0=np.multiply, operand0=-2.0, reduce_op=np.add, reduce_res=red)
        rmax = nl.ndarray((4, 1), nl.float32, buffer=nl.sbuf)
        s = nisa.range_select(on_true_tile=x, comp_op0=np.greater_equal, comp_op1=np.less, bound0=b0, bound1=b1,
                              reduce_cmd=nisa.reduce_cmd.reset_reduce, reduce_res=rmax, reduce_op=np.max,
                              range_start=2, on_false_value=F32_MIN, dtype=nl.float32)
        m = nisa.nc_match_replace8(data=x, vals=vals, imm=0.5)
        return hbm(t), hbm(red), hbm(s), hbm(rmax), hbm(m)

    t, red, s, rmax, m = nki.run(old, x, b0, b1, vals).outputs
    assert np.array_equal(t, op64("multiply", x, np.float32(-2.0)))
    assert np.array_equal(red[:, 0], seq_reduce("add", np.zeros(4, np.float32), t))
    idx = 2 + np.arange(24)
    sel = np.where((idx >= 3) & (idx < 9), x, np.float32(F32_MIN))
    assert np.array_equal(s, sel) and np.array_equal(rmax[:, 0], sel.max(axis=1))
    expect = x.copy()
    for p in range(4):
        for j in {5, 1, 7, 0, 2, 9}:
            expect[p, j] = 0.5
    assert np.array_equal(m, expect)


# --- top-8 family, nonzero_with_count ---------------------------------------------------------------

def test_max8_find_index8_match_replace8():
    x = f32(rng.integers(-20, 20, (6, 2, 30)))  # many repeats
    vals = np.stack([x.reshape(6, -1)[p, rng.integers(0, 60, 8)] for p in range(6)]).astype(np.float32)
    vals[0, 3] = 1000.0  # not present

    @nki.jit
    def top(x, vals):
        tx, tv = sbuf(x), sbuf(vals)
        m = nl.ndarray((6, 8), nl.float32, buffer=nl.sbuf)
        nisa.max8(m, tx)
        i32 = nl.ndarray((6, 8), nl.uint32, buffer=nl.sbuf)
        nisa.nc_find_index8(dst=i32, data=tx, vals=tv)
        i16 = nisa.nc_find_index8(data=tx, vals=tv, dtype=nl.uint16)
        rep = nl.ndarray(x.shape, nl.float32, buffer=nl.sbuf)
        ridx = nl.ndarray((6, 8), nl.uint32, buffer=nl.sbuf)
        nisa.nc_match_replace8(rep, tx, tv, -99.0, dst_idx=ridx)
        return hbm(m), hbm(i32), hbm(i16), hbm(rep), hbm(ridx), hbm(nisa.max8(src=tx))

    r = nki.run(top, x, vals)
    assert r.errors == []
    m, i32, i16, rep, ridx, m_old = r.outputs
    flat = x.reshape(6, -1)
    assert np.array_equal(m, -np.sort(-flat, axis=1)[:, :8]) and np.array_equal(m_old, m)
    for p in range(6):
        claimed, expect = set(), []
        for v in vals[p]:  # ascending columns: successive occurrences of a repeated value
            hits = [i for i in range(60) if flat[p, i] == v and i not in claimed]
            expect.append(hits[0] if hits else None)
            claimed |= set(hits[:1])
        assert i32[p].tolist() == [0xFFFFFFFF if e is None else e for e in expect]
        assert i16[p].tolist() == [0xFFFF if e is None else e for e in expect]
        claimed, rexpect = set(), [None] * 8
        for j in range(7, -1, -1):  # nc_match_replace8: reverse order
            hits = [i for i in range(60) if flat[p, i] == vals[p, j] and i not in claimed]
            rexpect[j] = hits[0] if hits else None
            claimed |= set(hits[:1])
        assert ridx[p].tolist() == [0xFFFFFFFF if e is None else e for e in rexpect]
        assert rep.reshape(6, -1)[p].tolist() == [-99.0 if i in claimed else float(flat[p, i]) for i in range(60)]


def test_match_replace8_documented_example():
    data = np.array([[1, 2, 3, 4, 8, 8, 8, 8, 8, 8, 8]], np.float32)
    vals = np.array([[3] + [8] * 7], np.float32)

    @nki.jit
    def ex(data, vals):
        d = nl.ndarray(data.shape, nl.float32, buffer=nl.sbuf)
        idx = nl.ndarray((1, 8), nl.uint32, buffer=nl.sbuf)
        nisa.nc_match_replace8(dst=d, data=sbuf(data), vals=sbuf(vals), imm=0.0, dst_idx=idx)
        return hbm(idx)

    assert nki.run(ex, data, vals).outputs.tolist() == [[2, 10, 9, 8, 7, 6, 5, 4]]  # the docstring's example


def test_search_size_limits():
    @nki.jit
    def small(x):
        m = nl.ndarray((2, 8), nl.float32, buffer=nl.sbuf)
        nisa.max8(m, sbuf(x))  # <max8-size>
        return hbm(m)

    r = nki.run(small, np.ones((2, 16385), np.float32))
    assert [f.where for f in errors(r, "instruction_constraint")] == [line_of("<max8-size>")]
    assert errors(nki.run(small, np.ones((2, 16384), np.float32)), "instruction_constraint") == []


def test_nonzero_with_count():
    x = (rng.random((128, 12)) < 0.4) * rng.integers(1, 9, (128, 12))
    x[0] = [0, 1, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0]  # the docstring's example, padded
    x = x.astype(np.int32)

    @nki.jit
    def nz(x, xf):
        d = nl.ndarray((128, 13), nl.int32, buffer=nl.sbuf)
        nisa.memset(d, 4)
        nisa.nonzero_with_count(dst=d, src=sbuf(x), index_offset=16, padding_val=-1)
        f = nl.ndarray((16, 13), nl.int32, buffer=nl.sbuf)
        nisa.memset(f, 4)
        nisa.nonzero_with_count(f, sbuf(xf)[16:32], 0, -7)  # core 1's first partition
        return hbm(d), hbm(f)

    r = nki.run(nz, x, x.astype(np.float32))
    d, f = r.outputs
    for p in range(128):
        if p % 16:
            assert d[p].tolist() == [4] * 13
        else:
            hits = [i + 16 for i in range(12) if x[p, i] != 0]
            assert d[p].tolist() == hits + [-1] * (12 - len(hits)) + [len(hits)]
    assert d[0].tolist() == [17, 18, 21] + [-1] * 9 + [3]
    hits = [i for i in range(12) if x[16, i] != 0]
    assert f[0].tolist() == hits + [-7] * (12 - len(hits)) + [len(hits)] and f[1:].tolist() == [[4] * 13] * 15
    assert errors(r, "partition_start")  # a 16-partition view at 16 breaks the start rule (0/32/64/96)


# --- DMA ---------------------------------------------------------------------------------------------

def test_dma_transpose_shapes_and_older_form():
    a2 = rng.standard_normal((16, 40)).astype(ml_dtypes.bfloat16)
    a3 = rng.standard_normal((4, 8, 20)).astype(np.float16)
    a4 = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)

    @nki.jit
    def tr(a2, a3, a4):
        d2 = nl.ndarray((40, 16), a2.dtype, buffer=nl.sbuf)
        nisa.dma_transpose(d2, a2)  # straight from HBM
        d3 = nl.ndarray((20, 8, 4), a3.dtype, buffer=nl.sbuf)
        nisa.dma_transpose(dst=d3, src=sbuf(a3), axes=(2, 1, 0), dge_mode=nisa.dge_mode.hwdge)
        d4 = nisa.dma_transpose(a4)
        return hbm(d2), hbm(d3), hbm(d4)

    r = nki.run(tr, a2, a3, a4)
    d2, d3, d4 = r.outputs
    assert np.array_equal(d2.view(np.uint16), a2.T.view(np.uint16))
    assert np.array_equal(d3.view(np.uint16), np.transpose(a3, (2, 1, 0)).view(np.uint16))
    assert np.array_equal(d4, np.transpose(a4, (3, 1, 2, 0)))
    assert errors(r, "instruction_constraint") == []

    @nki.jit
    def hw(a):
        d = nl.ndarray((a.shape[1], a.shape[0]), a.dtype, buffer=nl.sbuf)
        nisa.dma_transpose(d, a, dge_mode=nisa.dge_mode.hwdge)  # <hwdge>
        return hbm(d)

    r = nki.run(hw, np.ones((8, 100), np.float32))  # 4-byte dtype; 2-D src needs 16 rows
    (f,) = errors(r, "instruction_constraint")
    assert f.where == line_of("<hwdge>") and f.count == 2
    assert errors(nki.run(hw, np.ones((16, 100), np.float16)), "instruction_constraint") == []

    @nki.jit
    def axes(a):
        d = nl.ndarray((a.shape[0], a.shape[2], a.shape[1]), a.dtype, buffer=nl.sbuf)
        nisa.dma_transpose(d, a, axes=(0, 2, 1))
        return hbm(d)

    with pytest.raises(nki.Unsupported, match="axes"):
        nki.run(axes, np.ones((2, 3, 4), np.float32))


def test_dma_compute(monkeypatch):
    from numeq.nki.machine.assumptions import ASSUMPTIONS, Assumption

    monkeypatch.setitem(ASSUMPTIONS, "dma_compute_order", Assumption("dma_compute_order", ("sequential", "pairwise"),
                                                                     "order", "test"))
    xs = [f32(rng.standard_normal((4, 6)) * 10.0 ** k) for k in range(5)]

    @nki.jit
    def dc(a, b, c, d, e):
        out = nl.ndarray(a.shape, nl.bfloat16, buffer=nl.shared_hbm)
        nisa.dma_compute(out, [a, sbuf(b)], nl.add)
        acc = nl.ndarray(a.shape, nl.float32, buffer=nl.sbuf)
        nisa.dma_compute(dst=acc, srcs=[a, b, c, d, e], reduce_op=nl.add, scales=[1.0] * 5)
        old = nl.ndarray(a.shape, nl.float32, buffer=nl.sbuf)
        nisa.dma_compute(old, [a, b, c], None, nl.add)  # 0.2.0's order: scales before reduce_op
        return out, hbm(acc), hbm(old)

    for order in ("sequential", "pairwise"):
        out, acc, old = nki.run(dc, *xs, assume={"dma_compute_order": order}).outputs
        assert np.array_equal(out, op64("add", xs[0], xs[1]).astype(ml_dtypes.bfloat16))
        if order == "sequential":
            s = xs[0]
            for x in xs[1:]:
                s = op64("add", s, x)
            s3 = op64("add", op64("add", xs[0], xs[1]), xs[2])
        else:
            s = op64("add", op64("add", op64("add", xs[0], xs[1]), op64("add", xs[2], xs[3])), xs[4])
            s3 = op64("add", op64("add", xs[0], xs[1]), xs[2])
        assert np.array_equal(acc, s) and np.array_equal(old, s3)

    @nki.jit
    def scaled(a):
        d = nl.ndarray(a.shape, nl.float32, buffer=nl.sbuf)
        nisa.dma_compute(d, [a] * 17, nl.add, scales=[2.0] * 17)  # <dma-compute>
        return hbm(d)

    r = nki.run(scaled, xs[0])
    (f,) = errors(r, "instruction_constraint")
    assert f.where == line_of("<dma-compute>") and "17 srcs" in f.message and f.count == 2  # and the scales
