"""numeq.nki's older interface (neuronxcc.nki, NKI 0.1.0): index expressions, par_dim blocks, masks,
tiles as values, operators and type promotion, PSUM accumulation by ``+=``.

Oracles: numpy slicing for views, numpy float64 rounded once (ml_dtypes / numpy casts) where that
is the exact result, the op-level numeq.matmul on the run's platform for the tiled matmul (the
kernel computes through per-instruction PE plans and its own PSUM accumulation), the type table
the 0.1.0 docs print (nki.api.shared.rst, "NKI Type Promotion"), mpmath for exp.
"""

from __future__ import annotations

import ml_dtypes
import mpmath
import numpy as np
import pytest

import numeq
from nki_support import run_named, source_line, store_each
from numeq import nki

nl, nisa = nki.language, nki.isa
bf16 = ml_dtypes.bfloat16
RNG = np.random.default_rng(20240)


# --- the tiled matmul of the 0.1.0 tutorial -------------------------------------------------------
def test_tiled_matmul_matches_the_op_level_platform_bit_for_bit():
    with nki.installed() as runs:
        import neuronxcc.nki as onki
        import neuronxcc.nki.isa as onisa
        import neuronxcc.nki.language as onl

        @onki.jit
        def matmul_kernel(lhsT, rhs):
            K, M = lhsT.shape
            _, N = rhs.shape
            result = onl.ndarray((M, N), dtype=onl.bfloat16, buffer=onl.shared_hbm)
            i_lhsT = onl.mgrid[0:128, 0:128]
            i_rhs = onl.mgrid[0:128, 0:512]
            i_res_p, i_res_f = onl.mgrid[0:128, 0:512]
            for m in onl.affine_range(M // 128):
                for n in onl.affine_range(N // 512):
                    psum = onl.zeros((128, 512), onl.float32, buffer=onl.psum)
                    for k in onl.affine_range(K // 128):
                        a = onl.load(lhsT[k * 128 + i_lhsT.p, m * 128 + i_lhsT.x])
                        b = onl.load(rhs[k * 128 + i_rhs.p, n * 512 + i_rhs.x])
                        psum += onisa.nc_matmul(a, b)
                    onl.store(result[m * 128 + i_res_p, n * 512 + i_res_f], value=onl.copy(psum, dtype=onl.bfloat16))
            return result

        K, M, N = 384, 256, 512
        a = RNG.standard_normal((M, K)).astype(bf16)
        b = RNG.standard_normal((K, N)).astype(bf16)
        out = matmul_kernel(np.ascontiguousarray(a.T), b)
    run = runs[0]
    assert run.completed and not run.errors
    expected = numeq.matmul(a, b, platform=run.platform, out="bf16")
    assert np.array_equal(np.asarray(expected, dtype=np.float64).astype(bf16).view(np.uint16), out.view(np.uint16))
    mms = [i for i in run.trace if i.name == "nc_matmul"]
    assert len(mms) == 2 * 3 and all(i.dst[0][1] == "psum" and i.detail["accumulate"] == "accumulate" for i in mms)
    # the PE wrote the kernel's PSUM tile: no temporary tile took PSUM
    assert {i.dst[0][0] for i in mms} <= {i.dst[0][0] for i in run.trace if i.name == "memset"}


def test_nl_matmul_transposes_x_on_the_tensor_engine():
    def kernel(x, y):
        out = nl.ndarray((64, 256), nl.float32, buffer=nl.shared_hbm)
        psum = nl.zeros((64, 256), nl.float32, buffer=nl.psum)
        for k in nl.affine_range(2):
            xt = nl.load(x[0:64, k * 128:(k + 1) * 128])
            yt = nl.load(y[k * 128:(k + 1) * 128, 0:256])
            psum += nl.matmul(xt, yt)
        nl.store(out, psum)
        return out

    x = RNG.integers(-8, 8, (64, 256)).astype(bf16)
    y = RNG.integers(-8, 8, (256, 256)).astype(bf16)
    r = nki.run(kernel, x, y)
    assert r.completed and not r.errors
    # small integers: every product and sum is exact, so x @ y in float64 is the result
    assert np.array_equal(r.outputs, x.astype(np.float64) @ y.astype(np.float64))
    names = [i.name for i in r.trace]
    assert names.count("nc_transpose") == 2 and names.count("nc_matmul") == 2
    assert [i.engine for i in r.trace if i.name == "nc_transpose"] == ["tensor", "tensor"]


# --- index expressions ------------------------------------------------------------------------------
def test_arange_affine_indices_are_strided_views():
    def kernel(a):
        out = nl.ndarray((64, 128), a.dtype, buffer=nl.shared_hbm)
        i_p = nl.arange(32)[:, None]
        i_f = nl.arange(128)[None, :]
        for k in nl.affine_range(2):
            t = nl.load(a[k * 32 + i_p, 2 * i_f + 1])
            nl.store(out[k * 32 + i_p, i_f], value=t)
        return out

    a = RNG.standard_normal((64, 300)).astype(np.float32)
    r = nki.run(kernel, a)
    assert r.completed and np.array_equal(r.outputs, a[:, 1:256:2])


def test_mgrid_unpacking_attributes_and_whole_grid_key():
    def kernel(a):
        out = nl.ndarray((3, 128, 64), a.dtype, buffer=nl.shared_hbm)
        g = nl.mgrid[0:128, 0:64]
        i_p, i_f = nl.mgrid[0:128, 0:64]
        nl.store(out[0, g.p, g.x], value=nl.load(a[g.p, 64 + g.x]))
        nl.store(out[1, i_p, i_f], value=nl.load(a[nl.mgrid[0:128, 0:64]]))
        sb = nl.ndarray((128, 128), a.dtype, buffer=nl.sbuf)
        sb[i_p, 2 * i_f] = nl.load(a[i_p, i_f])        # writes land in sb's even columns
        sb[i_p, 2 * i_f + 1] = nl.load(a[i_p, 64 + i_f])
        nl.store(out[2, i_p, i_f], value=nl.copy(sb[i_p, 2 * i_f + 1]))
        return out

    a = RNG.standard_normal((128, 128)).astype(np.float32)
    r = nki.run(kernel, a)
    assert r.completed and not r.errors
    assert np.array_equal(r.outputs[0], a[:, 64:])
    assert np.array_equal(r.outputs[1], a[:, :64])
    assert np.array_equal(r.outputs[2], a[:, 64:])


def test_index_expression_algebra_against_numpy():
    with nki.installed():
        i = nl.arange(3, 9)
        assert np.array_equal(i.values(), np.arange(3, 9))
        e = 5 + 2 * nl.arange(4)[:, None] - nl.arange(6)[None, :] * 3
        ref = 5 + 2 * np.arange(4)[:, None] - np.arange(6)[None, :] * 3
        assert e.shape == (4, 6) and np.array_equal(e.values(), ref)
        p, x = nl.mgrid[0:8:2, 1:4]
        rp, rx = np.mgrid[0:8:2, 1:4]
        assert np.array_equal(p.values(), rp) and np.array_equal(x.values(), rx)
        m = (nl.arange(4)[:, None] < 2) & (nl.arange(6)[None, :] >= 3)
        assert np.array_equal(m.array, (np.arange(4)[:, None] < 2) & (np.arange(6)[None, :] >= 3))
        with pytest.raises(TypeError, match="not affine"):
            nl.arange(4) * nl.arange(4)

    # Python's `and` keeps one operand (a mask is true, as any object): a warning says so.
    def kernel(a):
        i_p, i_f = nl.arange(4)[:, None], nl.arange(6)[None, :]
        out = nl.ndarray((4, 6), nl.float32, buffer=nl.shared_hbm)
        nl.store(out, value=nl.zeros((4, 6), nl.float32))
        nl.store(out, value=nl.load(a), mask=((i_p < 2) and (i_f < 3)))
        return out

    r = nki.run(kernel, np.ones((4, 6), np.float32))
    assert "mask_python_logic" in [f.rule for f in r.warnings]
    assert np.array_equal(r.outputs, np.broadcast_to(np.arange(6) < 3, (4, 6)).astype(np.float32))


def test_out_of_bounds_arange_index_is_a_finding_at_its_line():
    def kernel(a):
        out = nl.ndarray((128, 64), a.dtype, buffer=nl.shared_hbm)
        i_p = nl.arange(128)[:, None]
        i_f = nl.arange(64)[None, :]
        t = nl.load(a[i_p, 32 + i_f])  # OOB-HERE
        nl.store(out[i_p, i_f], value=t)
        return out

    r = nki.run(kernel, np.zeros((128, 64), np.float32))
    assert not r.completed
    (f,) = r.errors
    assert f.rule == "index_bounds" and f.where == source_line(kernel, "OOB-HERE")
    assert "32..95" in f.message and "size 64" in f.message


def test_mask_that_misses_the_out_of_bounds_part_is_a_finding():
    def kernel(a):
        out = nl.ndarray((100, 8), a.dtype, buffer=nl.shared_hbm)
        i_p = nl.arange(128)[:, None]
        i_f = nl.arange(8)[None, :]
        t = nl.load(a[i_p, i_f], mask=(i_p < 101))  # MASK-HERE
        nl.store(out[i_p, i_f], value=t, mask=(i_p < 100))
        return out

    r = nki.run(kernel, np.zeros((100, 8), np.float32))
    assert not r.completed and [f.rule for f in r.errors] == ["index_bounds"]
    assert r.errors[0].where == source_line(kernel, "MASK-HERE")


# --- par_dim blocks ----------------------------------------------------------------------------------
def test_par_dim_block_tensor_is_stored_partition_first():
    def kernel(a):
        out = nl.ndarray((4, 128, 2048), a.dtype, buffer=nl.shared_hbm)
        # 4 x 2048 fp32 = 32 KiB per partition (stored as 4 x [128, 2048] it would be 1 MiB)
        blocks = nl.ndarray((4, nl.par_dim(128), 2048), dtype=a.dtype, buffer=nl.sbuf)
        i_p, i_f = nl.mgrid[0:128, 0:2048]
        for b in nl.affine_range(4):
            blocks[b, i_p, i_f] = nl.load(a[b, i_p, i_f])
        for b in nl.affine_range(4):
            tile = blocks[b]
            assert tile.shape == (128, 2048) and tile.partitions() == (0, 128, 1)
            nl.store(out[b], value=blocks[3 - b] * 1.0)
        assert blocks.base.shape == (128, 4, 2048)
        return out

    a = RNG.standard_normal((4, 128, 2048)).astype(np.float32)
    r = nki.run(kernel, a)
    assert r.completed and not r.errors, r.summary()
    assert np.array_equal(r.outputs, a[::-1])


# --- operators and type promotion ----------------------------------------------------------------------
PROMOTION_TABLE = [  # nki.api.shared.rst (SDK 2.26), "NKI Type Promotion", every example it prints
    (np.int32, np.float16, "float16"), (np.uint16, "tfloat32", "tfloat32"), (np.float32, "tfloat32", "float32"),
    (np.float32, "bfloat16", "float32"), (np.float16, "bfloat16", "float32"), ("float8_e4m3", np.float16, "float16"),
    ("float8_e4m3", "bfloat16", "bfloat16"), ("float8_e4m3", "float8_e5m2", "bfloat16"), (np.int16, np.int32, "int32"),
    (np.uint8, np.uint16, "uint16"), (np.uint16, np.int32, "int32"), (np.int8, np.uint8, "int16"),
    (np.int8, np.uint16, "int32"), (np.int32, np.uint32, "float32"),
]


@pytest.mark.parametrize("a,b,expected", PROMOTION_TABLE)
def test_promotion_table(a, b, expected):
    from numeq.nki.machine.dtypes import dtype_of

    assert nki.front.tiles.promote(dtype_of(a), dtype_of(b)).name == expected
    assert nki.front.tiles.promote(dtype_of(b), dtype_of(a)).name == expected


def test_weak_scalars():
    from numeq.nki.machine.dtypes import dtype_of

    promote = nki.front.tiles.promote
    assert promote(dtype_of(np.int8), 2).name == "int32"
    assert promote(dtype_of(np.float16), 1.2).name == "float32"
    assert promote(dtype_of(np.float16), np.float16(2)).name == "float16"
    assert promote(dtype_of(np.uint8), True).name == "uint8"


def _rounded(x: np.ndarray, dtype) -> np.ndarray:
    return x.astype(np.float32).astype(dtype) if dtype != np.float32 else x.astype(np.float32)


def test_tile_operators_values_and_dtypes():
    x = (RNG.standard_normal((128, 64)) * 4).astype(bf16)
    y = (RNG.standard_normal((128, 64)) * 4).astype(np.float16)
    s = (RNG.standard_normal((128, 1)) + 3).astype(np.float32)
    got = {}

    def kernel(x, y, s):
        xt, yt, st = nl.load(x), nl.load(y), nl.load(s)
        res = {"add": xt + yt, "rsub": 3.0 - xt, "mul2": xt * 2.0, "recip": 1.0 / yt, "neg": -yt,
               "div_pp": xt / st, "gt": xt > yt, "le_s": yt <= 0.5, "inplace": nl.copy(xt)}
        res["inplace"] *= st
        outs = []
        for k, v in res.items():
            got[k] = (v.dtype.name, v.shape)
            o = nl.ndarray(v.shape, v.dtype, buffer=nl.shared_hbm, name=k)
            nl.store(o, v)
            outs.append(o)
        return outs

    r = nki.run(kernel, x, y, s)
    assert r.completed and not r.errors
    out = dict(zip(got, r.outputs))
    X, Y, S = x.astype(np.float64), y.astype(np.float64), s.astype(np.float64)
    expect = {"add": (X + Y, "float32"), "rsub": (3.0 - X, "float32"), "mul2": (X * 2.0, "float32"),
              "recip": (1.0 / Y, "float32"), "neg": (-Y, "float16"), "div_pp": (X / S, "float32"),
              "gt": (X > Y, "bool"), "le_s": (Y <= 0.5, "bool"), "inplace": (X * S, "bfloat16")}
    for k, (ref, dt) in expect.items():
        assert got[k][0] == dt, k
        if dt == "bool":
            assert np.array_equal(out[k].astype(bool), ref), k
        else:
            # one IEEE op in fp32, then the cast: float64 rounded to fp32, then to the result dtype
            want = ref.astype(np.float32).astype({"float32": np.float32, "float16": np.float16,
                                                  "bfloat16": bf16}[dt])
            assert np.array_equal(out[k].astype(np.float64), want.astype(np.float64)), k


def test_explicit_dtype_and_int_promotion():
    def kernel(a, b):
        at, bt = nl.load(a), nl.load(b)
        s = nl.add(at, bt, dtype=nl.bfloat16)
        o = nl.ndarray(s.shape, s.dtype, buffer=nl.shared_hbm)
        nl.store(o, s)
        return o

    a = RNG.standard_normal((128, 32)).astype(bf16)
    b = RNG.standard_normal((128, 32)).astype(np.float16)
    r = nki.run(kernel, a, b)
    ref = (a.astype(np.float64) + b.astype(np.float64)).astype(np.float32).astype(bf16)
    assert r.outputs.dtype == bf16 and np.array_equal(r.outputs.view(np.uint16), ref.view(np.uint16))

    def ints(a):
        t = nl.load(a) + 3
        o = nl.ndarray(t.shape, t.dtype, buffer=nl.shared_hbm)
        nl.store(o, t)
        return o

    a8 = RNG.integers(-128, 128, (128, 16)).astype(np.int8)
    r = nki.run(ints, a8)
    assert r.outputs.dtype == np.int32 and np.array_equal(r.outputs, a8.astype(np.int32) + 3)


# --- masks --------------------------------------------------------------------------------------------
def test_masked_load_store_of_a_partial_tile():
    def kernel(a):
        P, F = a.shape
        out = nl.ndarray((P, F), a.dtype, buffer=nl.shared_hbm)
        i_f = nl.arange(F)[None, :]
        for t in nl.affine_range((P + 127) // 128):
            i_p = t * 128 + nl.arange(128)[:, None]
            tile = nl.load(a[i_p, i_f], mask=(i_p < P))
            nl.store(out[i_p, i_f], value=nl.exp(tile, mask=(i_p < P)), mask=(i_p < P))
        return out

    a = RNG.standard_normal((200, 16)).astype(np.float32)
    r = nki.run(kernel, a)
    assert r.completed and not r.errors
    with mpmath.workprec(80):
        ref = np.array([float(mpmath.exp(mpmath.mpf(float(v)))) for v in a.ravel()]).reshape(a.shape)
    assert np.array_equal(r.outputs, ref.astype(np.float32))
    # the second tile's instructions shrink to its 72 rows
    assert [i.dst[0][2] for i in r.trace if i.name == "dma_copy"][-1] == (72, 16)


def test_box_mask_computes_only_its_box():
    def kernel(a):
        out = nl.ndarray((128, 512), a.dtype, buffer=nl.shared_hbm)
        i_p, i_f = nl.arange(128)[:, None], nl.arange(512)[None, :]
        t = nl.load(a)
        sq = nl.square(t, mask=((i_p < 64) & (i_f < 256)))
        nl.store(out[i_p, i_f], value=sq, mask=((i_p < 64) & (i_f < 256)))
        return out

    a = RNG.standard_normal((128, 512)).astype(np.float32)
    r = nki.run(kernel, a)
    assert np.array_equal(r.outputs[:64, :256], (a[:64, :256].astype(np.float64) ** 2).astype(np.float32))
    assert next(i for i in r.trace if i.name == "activation").dst[0][2] == (64, 256)
    assert not r.errors and [f.rule for f in r.warnings] == ["output_partly_written"]  # it wrote only the box


def test_mask_that_is_not_a_box():
    def kernel(a):
        out = nl.ndarray((64, 64), a.dtype, buffer=nl.shared_hbm)
        i_p, i_f = nl.arange(64)[:, None], nl.arange(64)[None, :]
        tri = i_f <= i_p
        t = nl.load(a)
        nl.store(out, value=nl.copy(t, mask=tri), mask=tri)
        return out

    a = RNG.standard_normal((64, 64)).astype(np.float32)
    r = nki.run(kernel, a)
    assert r.completed and not r.errors and "output_partly_written" in [f.rule for f in r.warnings]
    low = np.tril(np.ones((64, 64), bool))
    assert np.array_equal(r.outputs[low], a[low])
    assert "read_uninitialised" not in [f.rule for f in r.findings]


# --- reductions and other tile operations --------------------------------------------------------------
def test_reductions_on_integer_valued_data_are_exact():
    x = RNG.integers(-20, 20, (128, 4, 16)).astype(np.float32)

    def tiles(a):
        t = nl.load(a)
        return {"sum": nl.sum(t, axis=2), "sum12": nl.sum(t, axis=[1, 2], keepdims=True), "max": nl.max(t, axis=2),
                "min": nl.min(t, axis=[1, 2]), "prod": nl.prod(nl.load(a[:, 0, 0:4]) * 0.5, axis=1),
                "mean": nl.mean(t, axis=[1, 2]), "var": nl.var(t, axis=2), "all": nl.all(t, axis=2)}

    out = run_named(tiles, x)
    X = x.astype(np.float64)
    assert np.array_equal(out["sum"], X.sum(axis=2))
    assert out["sum12"].shape == (128, 1, 1) and np.array_equal(out["sum12"], X.sum(axis=(1, 2), keepdims=True))
    # Over every free axis an on-chip tile keeps one: [P, 1] (AWS's 0.1.0 rmsnorm example multiplies
    # a [128, F] tile by nl.sum(tile, axis=[1])).
    assert np.array_equal(out["max"], X.max(axis=2)) and np.array_equal(out["min"], X.min(axis=(1, 2))[:, None])
    assert np.array_equal(out["prod"], np.prod(X[:, 0, 0:4] * 0.5, axis=1)[:, None])
    assert np.array_equal(out["mean"], X.mean(axis=(1, 2))[:, None])  # sums exact, n = 64: one exact division
    assert np.array_equal(out["var"], X.var(axis=2))  # n = 16: every step exact
    assert out["all"].dtype == np.uint8 and np.array_equal(out["all"].astype(bool), (X != 0).all(axis=2))


def test_free_dims_that_are_not_the_last_reduce_through_a_reordered_view():
    # nki-samples' average_pool2d tutorial: a 5-D index-expression view of a [P, H, W] tile, summed
    # over the two in-window dims [2, 4] (the docs list trailing dims; an access pattern may order
    # the free dims as it likes, so the compiler reads the view with the reduced dims last).
    x = RNG.integers(-20, 20, (128, 6, 8)).astype(np.float32)

    def tiles(a):
        t = nl.load(a)
        i0, i1, i2, i3, i4 = nl.mgrid[0:128, 0:3, 0:2, 0:4, 0:2]
        window = t[i0, 2 * i1 + i2, 2 * i3 + i4]
        return {"pool": nl.sum(window, axis=[2, 4]), "kept": nl.max(window, axis=[1, 3], keepdims=True),
                "middle": nl.sum(t, axis=1)}

    out = run_named(tiles, x)
    w = x.astype(np.float64).reshape(128, 3, 2, 4, 2)
    assert np.array_equal(out["pool"], w.sum(axis=(2, 4)))
    assert out["kept"].shape == (128, 1, 2, 1, 2) and np.array_equal(out["kept"], w.max(axis=(1, 3), keepdims=True))
    assert np.array_equal(out["middle"], x.astype(np.float64).sum(axis=1))


@pytest.mark.parametrize("axis", [0, [1, 1], 3, [0, 2]])
def test_axis_names_free_dims_each_once(axis):
    def kernel(a):
        nl.sum(nl.load(a), axis=axis)

    with pytest.raises(ValueError, match=r"axis: nl.sum reduces free dims of a 3-D tile \(1 to 2, each once"):
        nki.run(kernel, np.zeros((128, 4, 8), np.float32))


def test_where_broadcast_expand_static_cast_and_constants(capsys):
    x = RNG.standard_normal((128, 32)).astype(np.float32)
    shapes = {}

    def kernel(a):
        t = nl.load(a)
        w = nl.where(t > 0.0, t, 0.0)
        row = nl.load(a[0:1, 0:32])
        b = nl.broadcast_to(row, shape=(128, 32))
        e = nl.expand_dims(t, 2)
        shapes["e"] = e.shape
        c = nl.static_cast(t, nl.bfloat16)
        nl.device_print("w=", w)
        return store_each((w, b, c))

    r = nki.run(kernel, x)
    assert r.completed and not r.errors
    w, b, c = r.outputs
    assert np.array_equal(w, np.where(x > 0, x, 0.0)) and np.array_equal(b, np.broadcast_to(x[0:1], (128, 32)))
    assert shapes["e"] == (128, 32, 1)
    assert c.dtype == bf16 and np.array_equal(c.view(np.uint16), x.astype(bf16).view(np.uint16))
    assert capsys.readouterr().out.startswith("w=")
    with nki.installed():
        assert nl.fp32.min == float(np.float32(-3.4028235e38)) and nl.fp32 == np.float32
        assert nl.bfp16.min == -np.inf
        assert nl.finfo(nl.bfloat16).max == float(ml_dtypes.finfo(bf16).max)
        assert nl.static_cast(1.0 + 2 ** -9, nl.bfloat16) == 1.0 and nl.static_cast(300.7, nl.int8) == 127


def test_unsupported_names():
    def kernel(a):
        nl.softmax(nl.load(a), axis=1)

    with pytest.raises(nki.Unsupported, match="softmax"):
        nki.run(kernel, np.zeros((128, 8), np.float32))


# --- the older nisa keyword forms ------------------------------------------------------------------------
def test_value_returning_isa_forms_with_older_keywords():
    x = RNG.standard_normal((128, 8)).astype(np.float32)

    def tiles(a):
        t = nl.load(a)
        neg_max = nisa.tensor_reduce(nl.max, data=t, axis=(1,), negate=True, keepdims=True)
        return {"neg_max": neg_max,
                "exp": nisa.activation(np.exp, data=t, bias=neg_max, scale=1.0),
                "ts": nisa.tensor_scalar(data=t, op0=np.subtract, operand0=1.5, op1=np.multiply, operand1=3.0),
                "tt": nisa.tensor_tensor(t, t, np.multiply),
                "copy": nisa.tensor_copy(t, dtype=nl.bfloat16),
                "memset": nisa.memset((128, 8), 0.1, nl.bfloat16),
                "recip": nisa.reciprocal(t),
                "transpose": nisa.tensor_copy(nisa.nc_transpose(t))}

    out = run_named(tiles, x)
    X = x.astype(np.float64)
    assert np.array_equal(out["neg_max"], -X.max(axis=1, keepdims=True))
    arg = (x + out["neg_max"]).astype(np.float32)  # one fp32 addition
    with mpmath.workprec(80):
        want_exp = np.array([float(mpmath.exp(mpmath.mpf(float(v)))) for v in arg.ravel()])
    assert np.array_equal(out["exp"], want_exp.reshape(arg.shape).astype(np.float32))
    assert np.array_equal(out["ts"], ((X - 1.5).astype(np.float32).astype(np.float64) * 3.0).astype(np.float32))
    assert np.array_equal(out["tt"], (X * X).astype(np.float32))
    assert np.array_equal(out["copy"].view(np.uint16), x.astype(bf16).view(np.uint16))
    assert np.array_equal(out["memset"].astype(np.float64), np.full((128, 8), float(bf16(0.1))))
    assert np.array_equal(out["recip"], (1.0 / X).astype(np.float32))
    assert np.array_equal(out["transpose"], x.T)


def test_tensor_reduce_takes_numpy_max():
    def kernel(a):
        t = nl.load(a)
        return nisa.tensor_reduce(np.max, data=t, axis=(1,), negate=True)

    nki.run(kernel, np.ones((128, 8), np.float32))


def test_psum_groups_added_into_a_bf16_sbuf_accumulator():
    def kernel(lhsT, rhs):
        K, M = lhsT.shape
        out = nl.ndarray((M, 512), nl.bfloat16, buffer=nl.shared_hbm)
        i_a, i_b = nl.mgrid[0:128, 0:128], nl.mgrid[0:128, 0:512]
        acc = nl.zeros((nl.par_dim(128), 512), nl.bfloat16, buffer=nl.sbuf)
        for g in nl.sequential_range(K // 256):  # groups of two K tiles, each summed in PSUM
            psum = nl.zeros((128, 512), nl.float32, buffer=nl.psum)
            for k in nl.affine_range(2):
                row = (2 * g + k) * 128
                psum[...] += nisa.nc_matmul(nl.load(lhsT[row + i_a.p, i_a.x]), nl.load(rhs[row + i_b.p, i_b.x]))
            acc[i_b.p, i_b.x] += psum
        nl.store(out, acc)
        return out

    a = RNG.standard_normal((128, 768)).astype(bf16)
    b = RNG.standard_normal((768, 512)).astype(bf16)
    r = nki.run(kernel, np.ascontiguousarray(a.T), b)
    assert r.completed and not r.errors
    # The hardware's standard keeps the tiling and accumulates in fp32; the kernel's bf16 running
    # sum is its own choice: a finding at the line that adds into it, and kernel_platform's option.
    assert r.platform == "trainium.trn2[psum_group=2]"
    assert r.kernel_platform == "trainium.trn2[psum_group=2,group_accumulator=bf16]"
    (narrow,) = [f for f in r.findings if f.rule == "narrow_accumulator"]
    assert narrow.severity == "warning" and narrow.where == source_line(kernel, "acc[i_b.p, i_b.x] += psum") and "bf16" in narrow.message
    expected = numeq.matmul(a, b, platform=r.kernel_platform, out="bf16")
    assert np.array_equal(np.asarray(expected, dtype=np.float64).astype(bf16).view(np.uint16),
                          r.outputs.view(np.uint16))


def test_assigning_a_matmul_result_keeps_its_values():
    # res[...] = nisa.nc_matmul(...) (the older interface's assignment): the value is the matmul's
    # (numeq computes PSUM chains when read; the assignment reads it). Oracle: numpy float32
    # sequential sums of the exact bf16 products.
    rng = np.random.default_rng(11)
    a_t = rng.standard_normal((128, 128)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((128, 512)).astype(ml_dtypes.bfloat16)
    with nki.installed():
        import neuronxcc.nki.isa as oisa
        import neuronxcc.nki.language as onl

        def kernel(a_t, b):
            out = onl.ndarray((128, 512), onl.float32, buffer=onl.shared_hbm)
            res = onl.ndarray((128, 512), onl.float32, buffer=onl.psum)
            res[...] = oisa.nc_matmul(onl.load(a_t), onl.load(b))
            onl.store(out, res)
            return out

        got = nki.simulate(kernel)(a_t, b)
    want = np.zeros((128, 512), np.float32)
    for k in range(128):
        want = want + np.outer(a_t[k].astype(np.float32), b[k].astype(np.float32))
    np.testing.assert_array_equal(got, want)


# --- mask= on nki.isa instructions ----------------------------------------------------------------
@pytest.mark.parametrize("row_masks", [True, False], ids=["rows masked", "rows left undefined"])
def test_instruction_masks_compute_only_the_box(row_masks):
    # The older layernorm's pattern: rows not a multiple of 128 and a free size not a multiple of
    # bn_stats' 512, each instruction masked to the valid rows and columns. Oracle: numpy float64
    # row statistics of the valid elements; a masked-out element that leaked in (a padding row or
    # column) would move a mean by far more than fp32 arithmetic does, and reading one unwritten
    # would be a read_uninitialised finding. Without row masks (AWS's 0.1.0 layernorm v2), the rows
    # the load left out go through the partition-wise instructions undefined and are never stored.
    rows, d, fmax = 100, 700, 512
    a = RNG.standard_normal((rows, d)).astype(np.float32) * 3 + 1

    @nki.jit
    def stats(a):
        mean_out = nl.ndarray((rows, 1), nl.float32, buffer=nl.shared_hbm)
        var_out = nl.ndarray((rows, 1), nl.float32, buffer=nl.shared_hbm)
        centred_out = nl.ndarray((rows, d), nl.float32, buffer=nl.shared_hbm)
        i_p = nl.arange(128)[:, None]
        i_f = nl.arange(fmax)[None, :]
        i_d = nl.arange(d)[None, :]
        x = nl.load(a[i_p, i_d], mask=(i_p < rows))
        chunks = (d + fmax - 1) // fmax
        st = nl.ndarray((128, 6 * chunks), nl.float32, buffer=nl.sbuf)
        for j in nl.static_range(chunks):
            free = j * fmax + i_f < d
            st[i_p, j * 6 + nl.arange(6)[None, :]] = nisa.bn_stats(x[i_p, j * fmax + i_f],
                                                                 mask=(free & (i_p < rows)) if row_masks else free)
        mv = nisa.bn_aggr(st, mask=(i_p < rows)) if row_masks else nisa.bn_aggr(st)
        mean = nisa.tensor_copy(mv[i_p, 0], mask=(i_p < rows))
        centred = nisa.tensor_scalar(x, nl.subtract, mean, mask=(i_p < rows))
        nl.store(mean_out[i_p, 0], value=mean, mask=(i_p < rows))
        nl.store(var_out[i_p, 0], value=mv[i_p, 1], mask=(i_p < rows))
        nl.store(centred_out[i_p, i_d], value=centred, mask=(i_p < rows))
        return mean_out, var_out, centred_out

    r = nki.run(stats, a)
    assert not r.errors, [f.message for f in r.errors]
    mean, var, centred = r.outputs
    x64 = a.astype(np.float64)
    np.testing.assert_allclose(mean[:, 0], x64.mean(axis=1), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(var[:, 0], x64.var(axis=1), rtol=1e-4)
    np.testing.assert_allclose(centred, x64 - mean.astype(np.float64), rtol=1e-6, atol=1e-6)


# --- index expressions that combine grid axes -------------------------------------------------------
def test_index_expressions_combining_grid_axes_are_strided_views():
    # The 0.1.0 transpose2D pattern (a free axis read as [f1, f2] and written as [f2, f1]), a
    # reversing index and a grid axis no tensor axis runs along (a repeat); oracle: numpy.
    p, f1, f2 = 16, 3, 5
    a = RNG.standard_normal((p, f1 * f2)).astype(np.float32)

    @nki.jit
    def shuffles(a):
        i_p = nl.arange(p)[:, None, None]
        i_1 = nl.arange(f1)[None, :, None]
        i_2 = nl.arange(f2)[None, None, :]
        t = nl.load(a)
        swapped = nl.ndarray((p, f1 * f2), nl.float32, buffer=nl.sbuf)
        swapped[i_p, i_2 * f1 + i_1] = nl.copy(t[i_p, i_1 * f2 + i_2])
        i_q, i_f = nl.arange(p)[:, None], nl.arange(f1 * f2)[None, :]
        reversed_ = nl.copy(t[i_q, f1 * f2 - 1 - i_f])
        repeated = nl.copy(t[i_p, i_1 * 0 + i_2])  # [p, f1, f2]: each row's first f2 values f1 times
        out = nl.ndarray((p, f1 * f2), nl.float32, buffer=nl.shared_hbm)
        back = nl.ndarray((p, f1 * f2), nl.float32, buffer=nl.shared_hbm)
        rep = nl.ndarray((p, f1, f2), nl.float32, buffer=nl.shared_hbm)
        nl.store(out, value=swapped)
        nl.store(back, value=reversed_)
        nl.store(rep, value=repeated)
        return out, back, rep

    out, back, rep = nki.run(shuffles, a).outputs
    assert np.array_equal(out, a.reshape(p, f1, f2).transpose(0, 2, 1).reshape(p, f1 * f2))
    assert np.array_equal(back, a[:, ::-1])
    assert np.array_equal(rep, np.broadcast_to(a[:, None, :f2], (p, f1, f2)))

    @nki.jit
    def outside(a):
        i_p = nl.arange(p)[:, None, None]
        i_1 = nl.arange(f1)[None, :, None]
        i_2 = nl.arange(f2)[None, None, :]
        return nl.copy(nl.load(a)[i_p, i_1 * f2 + i_2 + 1])

    with pytest.raises(nki.Unsupported, match="must stay inside"):
        nki.run(outside, a)


def test_a_number_assigned_to_elements_at_any_partition_is_written_by_dma_where_no_engine_starts():
    # The SDK's gather_flattened example fills indices[i, j] = j * 5 element by element: one
    # partition starting at partition i, which no compute engine can start at for i not in
    # 0/32/64/96 (a memset there would be partition_start); the compiler moves the constant by DMA.
    @nki.jit
    def k():
        out = nl.ndarray((40, 10), nl.uint32, buffer=nl.shared_hbm)
        t = nl.zeros((40, 10), dtype=nl.uint32)
        for i in nl.static_range(40):
            for j in nl.static_range(10):
                t[i, j] = j * 5 + i
        nl.store(out, t)
        return out

    r = nki.run(k)
    assert r.errors == []
    assert np.array_equal(r.outputs, np.arange(10)[None, :] * 5 + np.arange(40)[:, None])
    engines = {ins.engine for ins in r.trace if ins.name in ("memset", "dma_copy") and ins.dst[0][0] == "t"}
    assert engines == {"vector", "dma"}  # rows 0 and 32 by memset, the others by DMA
