"""numeq.nki's instructions beyond the core set (statistics, scans, fused arithmetic, partition
reductions, the argument forms; test_nki_isa_select.py has the selects, searches and DMA ones), run
through kernels written as public NKI kernels are (current interface: ``nl.ndarray(...,
buffer=nl.sbuf)``, ``nisa.dma_copy(dst=, src=)``, destination first; and the older value-returning
forms).

Oracles are written here (and in test_nki_isa_select.py) from each instruction's documented
semantics, independently of numeq:
float64 numpy with an explicit rounding to fp32 after every operation where the instruction
computes in fp32 (for + - * / of fp32 values the binary64 result rounded to fp32 is the correctly
rounded fp32 result: binary64 has more than 2 * 24 + 2 bits, so the double rounding is innocuous),
plain Python integer loops for index arithmetic, ml_dtypes for casts of exact fp32 values.
"""

from __future__ import annotations

import warnings

import ml_dtypes
import numpy as np
import pytest

import numeq
from nki_support import errors, f32, hbm, line_finder, sbuf
from numeq import nki

nl, nisa = nki.language, nki.isa
line_of = line_finder(__file__)

rng = np.random.default_rng(20240601)


# --- bn_stats / bn_aggr ------------------------------------------------------------------------------

def welford_fp32(row):
    """(count, mean, M2) of one row, Welford's update with each operation rounded to fp32."""
    mean = m2 = np.float32(0)
    for k, x in enumerate(row, start=1):
        delta = f32(np.float64(x) - np.float64(mean))
        mean = f32(np.float64(mean) + np.float64(f32(np.float64(delta) / k)))
        m2 = f32(np.float64(m2) + np.float64(f32(np.float64(delta) * np.float64(f32(np.float64(x) - np.float64(mean))))))
    return len(row), mean, m2


def chan_fp32(triples):
    """Chan-Golub-LeVeque merge, in order, each operation rounded to fp32; variance = M2 / n."""
    na, mean, m2 = triples[0]
    for nb, mb, m2b in triples[1:]:
        nn = na + nb
        delta = f32(np.float64(mb) - np.float64(mean))
        mean = f32(np.float64(mean) + np.float64(f32(np.float64(delta) * np.float64(f32(nb / nn)))))
        weight = f32(np.float64(f32(na * nb)) / nn)
        sq = f32(np.float64(delta) * np.float64(delta))
        m2 = f32(np.float64(f32(np.float64(m2) + np.float64(m2b))) + np.float64(f32(np.float64(sq) * np.float64(weight))))
        na = nn
    return mean, f32(np.float64(m2) / na)


def naive_fp32(triples):
    """Mean of means and E[x^2] - mean^2, each operation rounded to fp32."""
    total = sum(t[0] for t in triples)
    s = q = None
    for n, mean, m2 in triples:
        ds = f32(np.float64(mean) * n)
        dq = f32(np.float64(m2) + np.float64(f32(np.float64(f32(np.float64(mean) * np.float64(mean))) * n)))
        s = ds if s is None else f32(np.float64(s) + np.float64(ds))
        q = dq if q is None else f32(np.float64(q) + np.float64(dq))
    mean = f32(np.float64(s) / total)
    return mean, f32(np.float64(f32(np.float64(q) / total)) - np.float64(f32(np.float64(mean) * np.float64(mean))))


def stats_and_mean_var(t):
    """bn_stats over chunks of bn_stats_fmax of SBUF tile ``t`` into one stats tile, then bn_aggr
    (the SDK's example): the (stats, [mean, variance]) tiles."""
    P, F = t.shape
    fmax = nl.tile_size.bn_stats_fmax
    n = (F + fmax - 1) // fmax
    stats = nl.ndarray((P, 6 * n), nl.float32, buffer=nl.sbuf)
    for i in nl.affine_range(n):
        nisa.bn_stats(dst=stats[:, i * 6:(i + 1) * 6], data=t[:, i * fmax:min(F, (i + 1) * fmax)])
    mv = nl.ndarray((P, 2), nl.float32, buffer=nl.sbuf)
    nisa.bn_aggr(dst=mv, data=stats)
    return stats, mv


@nki.jit
def stats_kernel(a):
    stats, mv = stats_and_mean_var(sbuf(a))
    return hbm(stats), hbm(mv)


@pytest.mark.parametrize("merge", ["chan", "naive"])
@pytest.mark.parametrize("free", [1, 2, 7, 512, 1025])
def test_bn_stats_bn_aggr_step_by_step(merge, free):
    a = (rng.standard_normal((4, free)) * 5 + 3).astype(np.float32)
    r = nki.run(stats_kernel, a, assume={"bn_aggr_merge": merge})
    assert r.errors == []
    stats, mv = r.outputs
    for p in range(a.shape[0]):
        row_triples = []
        for c in range(0, free, 512):
            chunk = a[p, c:c + 512]
            for parity in (0, 1):
                n, mean, m2 = welford_fp32(chunk[parity::2])
                row_triples.append((n, mean, m2))
        flat = [v for t in row_triples for v in t]
        assert stats[p].tolist() == [float(v) for v in flat]
        mean, var = (chan_fp32 if merge == "chan" else naive_fp32)(row_triples)
        assert mv[p].tolist() == [float(mean), float(var)]
    # and near the exact statistics (population variance), far inside fp32's error for n <= 1025
    exact_mean, exact_var = a.astype(np.float64).mean(1), a.astype(np.float64).var(1)
    assert np.allclose(mv[:, 0], exact_mean, rtol=1e-5, atol=1e-5)
    assert np.allclose(mv[:, 1], exact_var, rtol=1e-4)


def test_bn_aggr_merges_given_triples():
    # triples not from bn_stats: counts of different sizes, means far apart (the merge formula shows)
    counts = np.array([[3, 7, 5, 11, 13, 6]], dtype=np.float32).repeat(8, axis=0)
    means = f32(rng.standard_normal((8, 6)) * 1e3)
    m2s = f32(np.abs(rng.standard_normal((8, 6))) * counts)
    data = np.stack([counts, means, m2s], axis=2).reshape(8, 18).astype(np.float32)

    @nki.jit
    def aggr(d):
        mv = nl.ndarray((d.shape[0], 2), nl.float32, buffer=nl.sbuf)
        nisa.bn_aggr(mv, sbuf(d))
        return hbm(mv)

    for merge, oracle in (("chan", chan_fp32), ("naive", naive_fp32)):
        out = nki.run(aggr, data, assume={"bn_aggr_merge": merge}).outputs
        for p in range(8):
            triples = [(int(counts[p, i]), means[p, i], m2s[p, i]) for i in range(6)]
            assert out[p].tolist() == [float(v) for v in oracle(triples)]


def test_bn_stats_kernel_is_the_catalogue_layernorm():
    """A layernorm kernel on bn_stats / bn_aggr gives the operation catalogue's bn_stats layernorm
    on the run's platform bit for bit (one model of the merge)."""
    eps = 1e-5

    @nki.jit
    def layernorm(a):
        P, F = a.shape
        t = sbuf(a)
        _, mv = stats_and_mean_var(t)
        rstd = nl.ndarray((P, 1), nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=rstd, op=nl.rsqrt, data=mv[:, 1:2], bias=eps)
        y = nl.ndarray((P, F), nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=y, data=t, op0=nl.subtract, operand0=mv[:, 0:1], op1=nl.multiply, operand1=rstd)
        return hbm(y)

    for merge in ("chan", "naive"):
        a = (rng.standard_normal((8, 1100)) * 3 + 2).astype(np.float32)
        r = nki.run(layernorm, a, assume={"bn_aggr_merge": merge})
        op = numeq.ops.layernorm(a, eps=eps, in_fmt="fp32", out="fp32", variant="bn_stats")
        assert np.array_equal(np.asarray(op.emulate(r.platform)), r.outputs.astype(np.float64))


def test_bn_stats_older_form_and_limit():
    @nki.jit
    def old(a):
        out = nl.ndarray((a.shape[0], 2), nl.float32, buffer=nl.shared_hbm)
        t = nl.load(a)
        stats = nisa.bn_stats(t, dtype=nl.float32)
        mv = nisa.bn_aggr(stats)
        nl.store(out, mv)
        return out

    a = rng.standard_normal((3, 40)).astype(np.float32)
    out = nki.run(old, a).outputs
    for p in range(3):
        even, odd = welford_fp32(a[p, 0::2]), welford_fp32(a[p, 1::2])
        assert out[p].tolist() == [float(v) for v in chan_fp32([even, odd])]

    @nki.jit
    def too_wide(a):
        st = nl.ndarray((a.shape[0], 6), nl.float32, buffer=nl.sbuf)
        nisa.bn_stats(dst=st, data=sbuf(a))  # <bn513>
        return hbm(st)

    r = nki.run(too_wide, np.ones((2, 513), np.float32))
    (f,) = errors(r, "bn_stats_free")
    assert f.where == line_of("<bn513>") and "513" in f.message and "512" in f.message
    assert errors(nki.run(too_wide, np.ones((2, 512), np.float32)), "bn_stats_free") == []


# --- scans and fused arithmetic --------------------------------------------------------------------

OPS64 = {"add": np.add, "subtract": np.subtract, "multiply": np.multiply, "maximum": np.maximum,
         "minimum": np.minimum, "divide": np.divide}


def op64(name, x, y):
    """One fp32 ALU operation: the binary64 result rounded to fp32."""
    with np.errstate(all="ignore"):
        return f32(OPS64[name](np.asarray(x, np.float64), np.asarray(y, np.float64)))


@pytest.mark.parametrize("op0,op1,reverse0,reverse1", [
    ("multiply", "add", False, False), ("subtract", "multiply", True, False), ("add", "subtract", False, True),
    ("maximum", "add", True, True), ("divide", "add", False, False)])
def test_tensor_tensor_scan(op0, op1, reverse0, reverse1):
    a = f32(rng.uniform(0.5, 1.0, (5, 37)))
    b = f32(rng.standard_normal((5, 37)))
    init = f32(rng.standard_normal((5, 1)))

    @nki.jit
    def scan(a, b, init):
        ta, tb, ti = sbuf(a), sbuf(b), sbuf(init)
        c = nl.ndarray(a.shape, nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor_scan(c, ta, tb, ti, getattr(nl, op0), getattr(nl, op1), reverse0, reverse1)
        d = nl.ndarray(a.shape, nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor_scan(dst=d, data0=ta, data1=tb, initial=1.5, op0=getattr(nl, op0), op1=getattr(nl, op1),
                                reverse0=reverse0, reverse1=reverse1)
        return hbm(c), hbm(d)

    c, d = nki.run(scan, a, b, init).outputs
    for out, start in ((c, init[:, 0]), (d, np.full(5, 1.5, np.float32))):
        r = start
        for i in range(a.shape[1]):
            t = op64(op0, r, a[:, i]) if reverse0 else op64(op0, a[:, i], r)
            r = op64(op1, b[:, i], t) if reverse1 else op64(op1, t, b[:, i])
            assert np.array_equal(out[:, i], r, equal_nan=True)


def test_tensor_tensor_scan_chained_older_form_and_carry():
    """The SDK example: two halves, the second starting from the first's last column; and the
    ``scan_carry`` alternative ``dtype`` (the carry rounded to data0's dtype)."""

    @nki.jit
    def halves(a_tensor, b_tensor):
        out = nl.ndarray(a_tensor.shape, nl.float32, buffer=nl.shared_hbm)
        a, b = nl.load(a_tensor), nl.load(b_tensor)
        h = a_tensor.shape[1] // 2
        c1 = nisa.tensor_tensor_scan(a[:, 0:h], b[:, 0:h], initial=0, op0=np.multiply, op1=np.add,
                                     dtype=nl.float32)
        c2 = nisa.tensor_tensor_scan(a[:, h:2 * h], b[:, h:2 * h], initial=c1[:, h - 1:h], op0=np.multiply,
                                     op1=np.add, dtype=nl.float32)
        nl.store(out[:, 0:h], c1)
        nl.store(out[:, h:2 * h], c2)
        return out

    a = rng.random((4, 64)).astype(np.float32)
    b = rng.random((4, 64)).astype(np.float32)
    out = nki.run(halves, a, b).outputs
    r = np.zeros(4, np.float32)
    for i in range(64):
        r = op64("add", op64("multiply", a[:, i], r), b[:, i])
        assert np.array_equal(out[:, i], r)

    ab, bb = a.astype(ml_dtypes.bfloat16), b.astype(ml_dtypes.bfloat16)

    @nki.jit
    def bf16_scan(a, b):
        c = nl.ndarray(a.shape, nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor_scan(c, sbuf(a), sbuf(b), 0.0, nl.multiply, nl.add)
        return hbm(c)

    for carry in ("fp32", "dtype"):
        out = nki.run(bf16_scan, ab, bb, assume={"scan_carry": carry}).outputs
        r = np.zeros(4, np.float32)
        for i in range(64):
            r = op64("add", op64("multiply", ab[:, i].astype(np.float32), r), bb[:, i].astype(np.float32))
            if carry == "dtype":
                r = r.astype(ml_dtypes.bfloat16).astype(np.float32)
            assert np.array_equal(out[:, i], r)


def test_scalar_tensor_tensor_both_forms():
    x = f32(rng.standard_normal((6, 3, 5)))
    y = f32(rng.standard_normal((6, 3, 5)))
    s = f32(rng.standard_normal((6, 1)))

    @nki.jit
    def stt(x, y, s):
        tx, ty, ts = sbuf(x), sbuf(y), sbuf(s)
        d1 = nl.ndarray(x.shape, nl.bfloat16, buffer=nl.sbuf)
        nisa.scalar_tensor_tensor(d1, tx, nl.subtract, ts, nl.multiply, ty)
        d2 = nl.ndarray(x.shape, nl.float32, buffer=nl.sbuf)
        nisa.scalar_tensor_tensor(dst=d2, data=tx, op0=nl.subtract, operand0=0.75, op1=nl.divide, operand1=ty,
                                  reverse0=True, reverse1=True)
        d3 = nisa.scalar_tensor_tensor(data=tx, op0=np.add, operand0=ts, op1=np.maximum, operand1=ty)
        return hbm(d1), hbm(d2), hbm(d3)

    d1, d2, d3 = nki.run(stt, x, y, s).outputs
    s3 = s[:, :, None]
    assert np.array_equal(d1, op64("multiply", op64("subtract", x, s3), y).astype(ml_dtypes.bfloat16))
    assert np.array_equal(d2, op64("divide", y, op64("subtract", np.float32(0.75), x)))
    assert np.array_equal(d3, op64("maximum", op64("add", x, s3), y))


def seq_reduce(op, start, x):
    r = start
    for j in range(x.shape[1]):
        r = op64(op, r, x[:, j])
    return r


def test_tensor_scalar_reduce_accumulator_commands():
    x = f32(rng.standard_normal((4, 2, 33)))
    y = f32(rng.standard_normal((4, 50)))
    init = f32(rng.standard_normal((4, 1)))

    @nki.jit
    def tsr(x, y, init):
        tx, ty, ti = sbuf(x), sbuf(y), sbuf(init)
        d = nl.ndarray(x.shape, nl.bfloat16, buffer=nl.sbuf)
        r1 = nl.ndarray((4, 1), nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar_reduce(d, tx, nl.multiply, 3.0, nl.add, r1)
        e = nl.ndarray(y.shape, nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar_reduce(dst=e, data=ty, op0=nl.add, operand0=ti, reduce_op=nl.add, reduce_res=None,
                                  reduce_cmd=nisa.reduce_cmd.reduce)
        r4 = nl.ndarray((4, 1), nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar_reduce(dst=e, data=ty, op0=nl.multiply, operand0=ti, reduce_op=nl.add, reduce_res=r4,
                                  reduce_cmd=nisa.reduce_cmd.reduce)
        r2 = nl.ndarray((4, 1), nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar_reduce(dst=e, data=ty, op0=nl.subtract, operand0=1.0, reduce_op=nl.maximum,
                                  reduce_res=r2, reduce_cmd=nisa.reduce_cmd.load_reduce, reduce_init=ti,
                                  reduce_res_negate=True)
        r3 = nl.ndarray((4, 1), nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar_reduce(dst=e, data=ty, op0=nl.multiply, operand0=0.5, reduce_op=np.min, reduce_res=r3)
        return hbm(d), hbm(r1), hbm(r2), hbm(r3), hbm(r4), hbm(e)

    r = nki.run(tsr, x, y, init)
    assert r.errors == []
    d, r1, r2, r3, r4, e = r.outputs
    t = op64("multiply", x, np.float32(3.0)).reshape(4, -1)
    assert np.array_equal(d, t.reshape(x.shape).astype(ml_dtypes.bfloat16))
    # reset_reduce: the register starts at add's identity 0, then adds the fp32 results in order
    first = seq_reduce("add", np.zeros(4, np.float32), t)
    assert np.array_equal(r1[:, 0], first)
    # reduce: the next calls continue the same registers (reduce_res=None keeps them there)
    chained = seq_reduce("add", seq_reduce("add", first, op64("add", y, init)), op64("multiply", y, init))
    assert np.array_equal(r4[:, 0], chained)
    # load_reduce from reduce_init, max; the written result negated; then reset with min
    assert np.array_equal(r2[:, 0], -seq_reduce("maximum", init[:, 0], op64("subtract", y, np.float32(1.0))))
    assert np.array_equal(r3[:, 0], op64("multiply", y, np.float32(0.5)).min(axis=1))
    assert np.array_equal(e, op64("multiply", y, np.float32(0.5)))


def test_accumulator_continued_before_reset_is_a_finding():
    @nki.jit
    def cont(x):
        tx = sbuf(x)
        e = nl.ndarray(x.shape, nl.float32, buffer=nl.sbuf)
        r = nl.ndarray((x.shape[0], 1), nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar_reduce(e, tx, nl.add, 1.0, nl.add, r, reduce_cmd=nisa.reduce_cmd.reduce)  # <acc-undef>
        return hbm(r)

    r = nki.run(cont, np.ones((2, 8), np.float32))
    (f,) = errors(r, "accumulator_undefined")
    assert f.where == line_of("<acc-undef>")


def test_tensor_scalar_cumulative():
    x = f32(rng.standard_normal((3, 2, 9)))
    imm0 = f32(rng.standard_normal((3, 1)))

    @nki.jit
    def cum(x, imm0):
        tx, ti = sbuf(x), sbuf(imm0)
        outs = []
        for op1, cmd, imm1 in ((nl.add, nisa.reduce_cmd.reset_reduce, None),
                               (nl.subtract, nisa.reduce_cmd.reset_reduce, None),
                               (nl.multiply, nisa.reduce_cmd.load_reduce, 2.0),
                               (nl.multiply, nisa.reduce_cmd.reduce, None),
                               (nl.maximum, nisa.reduce_cmd.reset_reduce, None)):
            d = nl.ndarray(x.shape, nl.float32, buffer=nl.sbuf)
            nisa.tensor_scalar_cumulative(dst=d, src=tx, op0=nl.multiply, op1=op1, imm0=ti, imm1=imm1,
                                          reduce_cmd=cmd)
            outs.append(hbm(d))
        return tuple(outs)

    outs = nki.run(cum, x, imm0).outputs
    t = op64("multiply", x.reshape(3, -1), imm0)
    reg = None
    for out, (op1, start) in zip(outs, (("add", 0.0), ("subtract", 0.0), ("multiply", 2.0), ("multiply", None),
                                        ("maximum", -np.inf))):
        reg = np.full(3, start, np.float32) if start is not None else reg  # reduce: continues the register
        expect = []
        for i in range(t.shape[1]):
            reg = op64(op1, t[:, i], reg)  # reg = op1(op0(x[i], imm0), reg), as the docstring writes it
            expect.append(reg)
        assert np.array_equal(out.reshape(3, -1), np.stack(expect, axis=1))


def test_tensor_partition_reduce():
    x = f32(rng.standard_normal((7, 3, 4)) * np.logspace(0, 6, 7)[:, None, None])
    bits = rng.integers(-2 ** 31, 2 ** 31, (5, 6), dtype=np.int64).astype(np.int32)

    @nki.jit
    def preduce(x, bits):
        tx, tb = sbuf(x), sbuf(bits)
        outs = []
        for op in (nl.add, nl.maximum, "average"):
            d = nl.ndarray((1, 3, 4), nl.float32, buffer=nl.sbuf)
            nisa.tensor_partition_reduce(d, op, tx)
            outs.append(hbm(d))
        for op in (nl.bitwise_or, nl.bitwise_and):
            d = nl.ndarray((1, 6), nl.int32, buffer=nl.sbuf)
            nisa.tensor_partition_reduce(dst=d, op=op, data=tb)
            outs.append(hbm(d))
        outs.append(hbm(nisa.tensor_partition_reduce(np.add, tx)))  # the older form
        return tuple(outs)

    for order in ("sequential", "pairwise"):
        add, mx, avg, bor, band, old = nki.run(preduce, x, bits, assume={"partition_reduce_order": order}).outputs
        if order == "sequential":
            s = x[0]
            for p in range(1, 7):
                s = op64("add", s, x[p])
        else:  # ((x0 + x1) + (x2 + x3)) + ((x4 + x5) + x6)
            s = op64("add", op64("add", op64("add", x[0], x[1]), op64("add", x[2], x[3])),
                     op64("add", op64("add", x[4], x[5]), x[6]))
        assert np.array_equal(add[0], s) and np.array_equal(old[0], s)
        assert np.array_equal(avg[0], op64("divide", s, np.float32(7)))
        assert np.array_equal(mx[0], x.max(axis=0))
        assert bor[0].tolist() == [int(np.bitwise_or.reduce(bits[:, j])) for j in range(6)]
        assert band[0].tolist() == [int(np.bitwise_and.reduce(bits[:, j])) for j in range(6)]


def test_gpsimd_reading_psum_is_a_finding():
    @nki.jit
    def from_psum(x):
        p = nl.ndarray(x.shape, nl.float32, buffer=nl.psum)
        nisa.tensor_copy(dst=p, src=sbuf(x))
        d = nl.ndarray((1, x.shape[1]), nl.float32, buffer=nl.sbuf)
        nisa.tensor_partition_reduce(d, nl.add, p)  # <gpsimd-psum>
        return hbm(d)

    r = nki.run(from_psum, np.ones((4, 8), np.float32))
    assert line_of("<gpsimd-psum>") in {f.where for f in errors(r, "engine_access")}


def test_activation_reduce_reuses_activation():
    x = f32(rng.standard_normal((4, 40)))

    @nki.jit
    def act(x):
        tx = sbuf(x)
        y = nl.ndarray(x.shape, nl.float32, buffer=nl.sbuf)
        s = nl.ndarray((4, 1), nl.float32, buffer=nl.sbuf)
        nisa.activation_reduce(y, nl.square, tx, nl.add, s, bias=0.25, scale=2.0)
        s2 = nl.ndarray((4, 1), nl.float32, buffer=nl.sbuf)
        y2 = nisa.activation_reduce(nl.copy, tx, reduce_op=np.add, reduce_res=s2)
        return hbm(y), hbm(s), hbm(y2), hbm(s2)

    r = nki.run(act, x)
    y, s, y2, s2 = r.outputs
    arg = op64("add", op64("multiply", x, np.float32(2.0)), np.float32(0.25))
    assert np.array_equal(y, op64("multiply", arg, arg))
    assert np.array_equal(s[:, 0], seq_reduce("add", y[:, 0], y[:, 1:]))
    assert np.array_equal(y2, x) and np.array_equal(s2[:, 0], seq_reduce("add", x[:, 0], x[:, 1:]))
    ins = [i for i in r.trace if i.name == "activation_reduce"]
    assert len(ins) == 2 and ins[0].cycles == 64 + 64 and ins[0].engine == "scalar"


# --- the calls themselves --------------------------------------------------------------------------

def test_bad_calls_name_the_problem():
    @nki.jit
    def unknown_keyword(a):
        st = nl.ndarray((a.shape[0], 6), nl.float32, buffer=nl.sbuf)
        nisa.bn_stats(dst=st, data=sbuf(a), fast=True)
        return hbm(st)

    with pytest.raises(nki.Unsupported, match="bn_stats's keyword 'fast'"):
        nki.run(unknown_keyword, np.ones((2, 8), np.float32))

    @nki.jit
    def wrong_kinds(a):
        t = sbuf(a)
        nisa.tensor_tensor_scan(t, t, nl.add, nl.add, nl.add)
        return hbm(t)

    with pytest.raises(TypeError, match=r"tensor_tensor_scan.*nisa.tensor_tensor_scan\(dst, data0, data1, initial"):
        nki.run(wrong_kinds, np.ones((2, 8), np.float32))

    @nki.jit
    def masked(a):  # a triangle is no box of the grid: numeq does not implement it
        i_p, i_f = nl.arange(2)[:, None], nl.arange(8)[None, :]
        return hbm(nisa.bn_stats(nl.load(a), mask=(i_f < i_p + 4)))

    with pytest.raises(nki.Unsupported, match=r"bn_stats\(mask=\) with a mask that is not a box"):
        nki.run(masked, np.ones((2, 8), np.float32))

    @nki.jit
    def masked_iota(a):  # coordinates depend on the grid: a predicate mask= stays unimplemented there
        i_f = nl.arange(8)[None, :]
        return hbm(nisa.iota(i_f, dtype=nl.float32, mask=(i_f < 4)))

    with pytest.raises(nki.Unsupported, match="iota"):
        nki.run(masked_iota, np.ones((2, 8), np.float32))

    @nki.jit
    def stale_dtype(a):
        st = nl.ndarray((a.shape[0], 6), nl.float32, buffer=nl.sbuf)
        nisa.bn_stats(st, sbuf(a), dtype=nl.float32)
        return hbm(st)

    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        nki.run(stale_dtype, np.ones((2, 8), np.float32))
    assert any("dtype" in str(x.message) for x in w)
