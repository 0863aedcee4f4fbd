"""PE tiling: nc_matmul(tile_position=(start_row, start_column), tile_size=(row_size, column_size)).

Sources: nki.isa.nc_matmul, "Tiling mode" ("Row tiling mode slices the 128 PE rows into 2x 64 row
tiles (NeuronCore-v2 or newer), or 4x 32 row tiles (NeuronCore-v3 or newer). Column tiling mode
slices the 128 PE columns in the same fashion"; "The stationary tile size must not exceed the chosen
tile_size"; "The start_row must be a multiple of row_size ... and must not exceed 128"; "tile_position
and tile_size must both be set"; "double_row performance mode cannot be combined with Tensor Engine
column tiling mode"), its "Tile size" section (partition sizes at most row_size, stationary's free size
at most column_size when tiling mode is on), and SDK 2.26's "PE tiling" list.

Oracles: float64 numpy's product rounded once to fp32 on inputs whose every partial sum is an fp32
number (any order of adds gives it); numeq.matmul on the run's platform (bit for bit, inputs of any
size); the same kernel without tiling (the documentation gives tiles no other values); planted
violations of each documented rule.
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

import numeq
from nki_support import errors, f32, hbm, line_finder, sbuf
from numeq import nki

nl, nisa = nki.language, nki.isa
rng = np.random.default_rng(77)
line_of = line_finder(__file__)
BF16 = ml_dtypes.bfloat16


def one_matmul(position=None, size=None, **extra):
    """dst[M, N] <- s[K, M]^T @ m[K, N], with the tile arguments given only where set."""
    tile = {} if position is None and size is None else {"tile_position": position, "tile_size": size}

    def kernel(s, m):
        d = nl.ndarray((s.shape[-1], m.shape[-1]), nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=d, stationary=sbuf(s), moving=sbuf(m), **tile, **extra)  # <one-matmul>
        o = nl.ndarray(d.shape, nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=o, src=d)
        return hbm(o)
    return kernel


def small_integers(shape, dtype=BF16, bound=8) -> np.ndarray:
    return rng.integers(-bound, bound + 1, shape).astype(dtype)


def exact(a, b) -> np.ndarray:
    """a^T @ b in float64, rounded once to fp32."""
    return f32(np.asarray(a, np.float64).T @ np.asarray(b, np.float64))


def matmuls(r):
    return [i for i in r.trace if i.name == "nc_matmul"]


TRN2_TILES = [((r, c), (rs, cs)) for rs in (32, 64, 128) for cs in (32, 64, 128)
              for r in range(0, 128, rs) for c in range(0, 128, cs)]


@pytest.mark.parametrize("position,size", TRN2_TILES, ids=[f"{p}-{s}" for p, s in TRN2_TILES])
def test_every_trn2_tile_computes_the_product(position, size):
    # K and M as large as the tile holds; small integers: every partial sum is an fp32 number.
    k, m = size
    a, b = small_integers((k, m)), small_integers((k, 96))
    r = nki.run(one_matmul(position, size), a, b)
    assert r.errors == [], r.errors
    np.testing.assert_array_equal(r.outputs, exact(a, b))
    (mm,) = matmuls(r)
    assert mm.detail["tile_position"] == position and mm.detail["tile_size"] == size


@pytest.mark.parametrize("dtype", [np.float32, BF16, np.float16, ml_dtypes.float8_e4m3])
def test_a_tiled_matmul_is_the_platforms_matmul_bit_for_bit(dtype):
    # Random values, so the order and rounding of the adds show: numeq.matmul on the run's platform
    # (the instruction's K as its tile) and the untiled kernel give the same bits.
    k, m, n = 64, 32, 200
    a = rng.standard_normal((k, m)).astype(dtype)
    b = rng.standard_normal((k, n)).astype(dtype)
    tiled = nki.run(one_matmul((64, 96), (64, 32)), a, b)
    whole = nki.run(one_matmul(), a, b)
    assert tiled.errors == [] and tiled.platform == whole.platform and "k_tile=64" in tiled.platform
    np.testing.assert_array_equal(tiled.outputs, numeq.matmul(np.ascontiguousarray(a.T), b, platform=tiled.platform,
                                                              out="fp32"))
    np.testing.assert_array_equal(tiled.outputs.view(np.uint32), whole.outputs.view(np.uint32))
    bound = np.abs(np.asarray(a, np.float64).T) @ np.abs(np.asarray(b, np.float64)) * k * 2.0 ** -23
    assert (np.abs(tiled.outputs - np.asarray(a, np.float64).T @ np.asarray(b, np.float64)) <= bound).all()


def test_aws_example_batched_matmuls_on_four_64x64_tiles():
    # AWS's nc_matmul example 3 in the current interface: 16 [64, 64]^T @ [64, 512] matmuls, each on
    # one of the four 64 x 64 tiles, the tile chosen by (i % 2, j % 2).
    g = (rng.random((16, 64, 64)) * 100).astype(np.float32)
    h = (rng.random((16, 64, 512)) * 100).astype(np.float32)

    def kernel(g, h, tiled=True):
        out = nl.ndarray((16, 64, 512), nl.float32, buffer=nl.shared_hbm)
        for i in nl.affine_range(4):
            for j in nl.affine_range(4):
                gt, ht = sbuf(g[i * 4 + j]), sbuf(h[i * 4 + j])
                p = nl.ndarray((64, 512), nl.float32, buffer=nl.psum)
                tile = dict(tile_position=((i % 2) * 64, (j % 2) * 64), tile_size=(64, 64)) if tiled else {}
                nisa.nc_matmul(dst=p, stationary=gt, moving=ht, **tile)
                o = nl.ndarray((64, 512), nl.float32, buffer=nl.sbuf)
                nisa.tensor_copy(dst=o, src=p)
                nisa.dma_copy(dst=out[i * 4 + j], src=o)
        return out

    r = nki.run(kernel, g, h)
    assert r.errors == []
    for t in range(16):
        np.testing.assert_array_equal(r.outputs[t], numeq.matmul(np.ascontiguousarray(g[t].T), h[t],
                                                                  platform=r.platform, out="fp32"))
    np.testing.assert_array_equal(r.outputs, nki.run(kernel, g, h, tiled=False).outputs)
    np.testing.assert_allclose(r.outputs, np.matmul(g.transpose(0, 2, 1).astype(np.float64), h), rtol=1e-5)
    positions = [mm.detail["tile_position"] for mm in matmuls(r)]
    assert positions[:4] == [(0, 0), (0, 64), (0, 0), (0, 64)] and positions[4:6] == [(64, 0), (64, 64)]


def test_a_k_loop_on_a_row_tile_is_one_psum_chain():
    # K = 256 in four instructions of 64 rows, each on a 64-row tile, accumulating into one PSUM
    # tile: the platform's matmul over the whole K with a K tile of 64, as the untiled loop.
    K, M, N = 256, 64, 128
    a = rng.standard_normal((K, M)).astype(BF16)
    b = rng.standard_normal((K, N)).astype(BF16)

    def kernel(a, b, tiled=True, explicit=False):
        acc = nl.ndarray((M, N), nl.float32, buffer=nl.psum)
        for i in nl.affine_range(K // 64):
            tile = dict(tile_position=((i % 2) * 64, 0), tile_size=(64, 128)) if tiled else {}
            flag = dict(accumulate=i > 0) if explicit else {}
            nisa.nc_matmul(dst=acc, stationary=sbuf(a[i * 64:(i + 1) * 64]), moving=sbuf(b[i * 64:(i + 1) * 64]),
                           **tile, **flag)
        o = nl.ndarray((M, N), nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=o, src=acc)
        return hbm(o)

    r = nki.run(kernel, a, b)
    assert r.errors == [] and "k_tile=64" in r.platform
    want = numeq.matmul(np.ascontiguousarray(a.T), b, platform=r.platform, out="fp32")
    np.testing.assert_array_equal(r.outputs, want)
    np.testing.assert_array_equal(nki.run(kernel, a, b, explicit=True).outputs, want)
    np.testing.assert_array_equal(nki.run(kernel, a, b, tiled=False).outputs, want)
    assert [mm.detail["accumulate"] for mm in matmuls(r)] == ["overwrite"] + ["accumulate"] * 3


def test_the_full_array_as_a_tile_and_the_empty_default_are_the_untiled_matmul():
    a, b = small_integers((128, 128)), small_integers((128, 64))
    full = nki.run(one_matmul((0, 0), (128, 128)), a, b)
    default = nki.run(one_matmul((), ()), a, b)
    for r in (full, default):
        assert r.errors == []
        np.testing.assert_array_equal(r.outputs, exact(a, b))
    assert matmuls(full)[0].cycles == matmuls(default)[0].cycles == 64  # max(min(64, M), N)
    assert "tile_size" not in matmuls(default)[0].detail


def test_a_tile_counts_its_share_of_the_arrays_cycles():
    # The SDK 2.26 estimate max(min(64, M), N) (4x for fp32) is one instruction's time; a tile holds
    # rows * columns / 128^2 of the array, and tiles run side by side: four 64 x 64 tiles count one
    # whole-array matmul's cycles.
    for dtype, scale in ((BF16, 1), (np.float32, 4)):
        a, b = small_integers((64, 64), dtype), small_integers((64, 300), dtype)
        r = nki.run(one_matmul((64, 0), (64, 64)), a, b)
        (mm,) = matmuls(r)
        assert mm.detail["tile_cycles"] == 300 * scale
        assert mm.cycles == math.ceil(300 * scale * 64 * 64 / 128 ** 2) and mm.flops == 2 * 64 * 64 * 300
    a, b = small_integers((32, 32)), small_integers((32, 3))
    (mm,) = matmuls(nki.run(one_matmul((96, 32), (32, 32)), a, b))
    assert mm.detail["tile_cycles"] == 32 and mm.cycles == 2  # ceil(32 / 16)


def test_transpose_mode_on_a_tile_passes_the_bits_and_counts_its_share():
    s = rng.standard_normal((64, 32)).astype(np.float32)
    s[3, 5], s[7, 1] = np.nan, np.inf

    def kernel(s, i):
        d = nl.ndarray((32, 64), nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=d, stationary=sbuf(s), moving=sbuf(i), is_transpose=True, tile_position=(64, 32),
                       tile_size=(64, 32))
        o = nl.ndarray(d.shape, d.dtype, buffer=nl.sbuf)
        nisa.tensor_copy(dst=o, src=d)
        return hbm(o)

    r = nki.run(kernel, s, np.eye(64, dtype=np.float32))
    assert r.errors == []
    np.testing.assert_array_equal(r.outputs.view(np.uint32), np.ascontiguousarray(s.T).view(np.uint32))
    (mm,) = matmuls(r)
    assert mm.detail["transpose"] is True and mm.detail["tile_cycles"] == 128 and mm.cycles == 16


# --- the documented constraints, each planted ----------------------------------------------------------

def only_one(s, m):
    d = nl.ndarray((s.shape[1], m.shape[1]), nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=d, stationary=sbuf(s), moving=sbuf(m), tile_position=(0, 64))  # <only-position>
    return hbm(d)


def test_tile_position_without_tile_size_is_refused():
    a, b = small_integers((64, 64)), small_integers((64, 8))
    r = nki.run(only_one, a, b)
    assert not r.completed
    (f,) = errors(r, "matmul_tile")
    assert f.where == line_of("<only-position>") and "without tile_size" in f.message
    assert "nki.isa.nc_matmul docstring" in f.source and "must both be set" in f.source


@pytest.mark.parametrize("position,size,words", [
    ((0, 0), (48, 128), "row_size 48"),
    ((0, 0), (128, 16), "column_size 16"),
    ((0, 0), (256, 128), "row_size 256"),
    ((32, 0), (64, 128), "start_row 32"),
    ((0, 96), (128, 64), "start_column 96"),
    ((128, 0), (64, 128), "start_row 128"),
    ((0, 128), (128, 32), "start_column 128"),
    ((-64, 0), (64, 128), "start_row -64"),
])
def test_a_tile_the_array_is_not_split_into_is_an_error(position, size, words):
    a, b = small_integers((32, 32)), small_integers((32, 8))
    r = nki.run(one_matmul(position, size), a, b)
    (f,) = errors(r, "matmul_tile")
    assert words in f.message and f.where == line_of("<one-matmul>")
    assert "nki.isa.nc_matmul docstring (Tiling mode" in f.source
    assert [e.rule for e in r.errors] == ["matmul_tile"]


@pytest.mark.parametrize("position,size", [((0.0, 0), (64, 128)), ((0, 0), (64,)), ((0, 0), 64),
                                           ((True, 0), (64, 128)), ((0, 0), ("64", 128))])
def test_tile_arguments_that_are_no_pair_of_integers_stop_the_run(position, size):
    a, b = small_integers((32, 32)), small_integers((32, 8))
    r = nki.run(one_matmul(position, size), a, b)
    assert not r.completed
    (f,) = errors(r, "matmul_tile")
    assert "a pair of integers" in f.message


def test_operands_larger_than_the_tile_are_errors_naming_them():
    # K (the partition size of stationary and moving) within row_size; stationary's M within
    # column_size.
    s, m = small_integers((128, 64)), small_integers((128, 8))
    r = nki.run(one_matmul((0, 0), (64, 128)), s, m)
    (f,) = errors(r, "matmul_contraction")
    assert "128 partitions" in f.message and "64 rows" in f.message and "stationary" in f.message \
        and "moving" in f.message and "row_size" in f.source
    s, m = small_integers((64, 128)), small_integers((64, 8))
    r = nki.run(one_matmul((0, 64), (64, 64)), s, m)
    (f,) = errors(r, "matmul_stationary_free")
    assert "M = 128" in f.message and "64 columns" in f.message and "stationary" in f.message
    assert "column_size" in f.source
    assert [e.rule for e in r.errors] == ["matmul_stationary_free"]


def test_neuronCore_v2_has_64_row_and_column_tiles_not_32():
    a, b = small_integers((64, 64)), small_integers((64, 16))
    r = nki.run(one_matmul((64, 64), (64, 64)), a, b, target="trn1")
    assert r.errors == []
    np.testing.assert_array_equal(r.outputs, exact(a, b))
    for size in ((32, 128), (128, 32), (32, 32)):
        a, b = small_integers((32, 32)), small_integers((32, 16))
        r = nki.run(one_matmul((0, 0), size, ), a, b, target="trn1")
        (f,) = errors(r, "target_generation")
        assert "NeuronCore-v3 and newer" in f.message and "trn1" in f.message and "4x 32 row tiles" in f.source
        assert [e.rule for e in r.errors] == ["target_generation"]
        assert nki.run(one_matmul((0, 0), size), a, b, target="trn2").errors == []


def test_double_row_takes_row_tiles_not_column_tiles():
    # fp8 double_row: stationary [K/2, 2, M], moving [K/2, 2, N]; a row tile bounds the partitions.
    a = rng.standard_normal((64, 2, 32)).astype(ml_dtypes.float8_e4m3)
    b = rng.standard_normal((64, 2, 40)).astype(ml_dtypes.float8_e4m3)
    double = nisa.matmul_perf_mode.double_row
    r = nki.run(one_matmul((64, 0), (64, 128), perf_mode=double), a, b)
    assert r.errors == [] and "fp8_double_row=on" in r.platform
    np.testing.assert_array_equal(r.outputs, numeq.matmul(a.reshape(128, 32).T.copy(), b.reshape(128, 40),
                                                          platform=r.platform, out="fp32"))
    np.testing.assert_array_equal(r.outputs, nki.run(one_matmul(perf_mode=double), a, b).outputs)
    r = nki.run(one_matmul((0, 64), (128, 64), perf_mode=double), a, b)
    (f,) = errors(r, "matmul_tile")
    assert "double_row" in f.message and "column tiling" in f.source
    r = nki.run(one_matmul((0, 0), (32, 128), perf_mode=double), a, b)
    assert "64 partitions" in errors(r, "matmul_contraction")[0].message


def test_column_tiling_under_the_row_only_assumption_is_an_error():
    # The docstring's :param: lines ("start_column must be 0", "column_size must be 128") against its
    # Tiling mode section: assumption matmul_column_tiling, supported by default.
    a, b = small_integers((64, 64)), small_integers((64, 16))
    assert nki.run(one_matmul((0, 64), (64, 64)), a, b).errors == []
    r = nki.run(one_matmul((0, 64), (64, 64)), a, b, assume={"matmul_column_tiling": "row_only"})
    (f,) = errors(r, "matmul_tile")
    assert "row_only" in f.message and "start_column must be 0" in f.source
    np.testing.assert_array_equal(r.outputs, exact(a, b))  # the values stand; only the check changes
    rows = nki.run(one_matmul((64, 0), (64, 128)), a, b, assume={"matmul_column_tiling": "row_only"})
    assert rows.errors == [] and rows.assumptions["matmul_column_tiling"] == "row_only"
    assert nki.assumptions_of("trn2")["matmul_column_tiling"]["value"] == "supported"


def test_the_rule_book_names_matmul_tile():
    rule = nki.RULES["matmul_tile"]
    assert rule.severity == "error" and rule.checked_by == ("run",)
