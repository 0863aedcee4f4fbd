"""The extension's array intake (numeq::widen behind _core's to_xarray_widened and
first_not_in_format): float16, every ml_dtypes format numeq knows and integer arrays are read in
place and widened to float64 in C++, in_fmt checked in place. Every result must be the one the
same call gives on ``x.astype(np.float64)`` (ml_dtypes' and numpy's own conversion: the oracle of
the decode, independent of numeq's), bit for bit; errors name the parameter and the first bad
element as before; byte-swapped, non-contiguous and masked inputs keep their old paths."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import numeq
from conftest import ML_DTYPES
from numeq import _arrays

# The dtypes the intake reads by their bit patterns (numeq format -> dtype), and the integers.
PATTERN_DTYPES = ML_DTYPES
INTEGER_DTYPES = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64]
DTYPES = list(PATTERN_DTYPES.values()) + INTEGER_DTYPES
FORMATS = numeq.formats()
# A platform with a matmul plan per input format (tests the platforms' own plans); other formats
# go through cuda_core.fp32's fp32 plan with the format as in_fmt (the check and the decode).
MATMUL_PLATFORM = {"fp32": "cuda_core.fp32", "bf16": "nvidia.h100", "fp16": "nvidia.h100", "tf32": "nvidia.h100",
                   "e4m3fn": "nvidia.h100", "e5m2": "nvidia.h100", "e4m3": "trainium.trn2"}
SUM_PLATFORM = {"fp32": "cuda_core.fp32", "bf16": "trainium.trn2", "fp16": "trainium.trn2"}


def _wide(x: np.ndarray) -> np.ndarray:
    """x.astype(np.float64): numpy's and ml_dtypes' own conversion (ml_dtypes warns on NaN)."""
    with np.errstate(invalid="ignore"):
        return x.astype(np.float64)


def _name(dtype) -> str:
    return np.dtype(dtype).name


def _own(dtype) -> str:
    """The format numeq takes an array's values to be of (in_fmt=None)."""
    return _arrays._FORMAT_OF_DTYPE.get(np.dtype(dtype), "fp64")


def test_every_ml_dtypes_format_is_covered():
    wanted = {name for name in _arrays._NUMPY_TYPES if name not in ("fp32", "fp64")}
    assert set(PATTERN_DTYPES) == wanted


def _patterns(dtype) -> np.ndarray:
    """Every bit pattern of a 1- or 2-byte dtype, as that dtype (ml_dtypes' fp6 / fp4 hold their
    pattern in the low bits of a byte: only those)."""
    dt = np.dtype(dtype)
    bits = dt.itemsize * 8
    if dt in _arrays._FORMAT_OF_DTYPE:
        bits = numeq.format_info(_arrays._FORMAT_OF_DTYPE[dt])["bits"]
    return np.arange(1 << bits, dtype=np.uint16 if dt.itemsize == 2 else np.uint8).view(dt)


def _pool(dtype, rng) -> np.ndarray:
    """Values of a dtype to build test arrays from: every pattern (1 byte), 3000 random ones and
    the specials (2 bytes), edges and random values (wider integers, those float64 holds)."""
    dt = np.dtype(dtype)
    if dt.itemsize <= 2:
        p = _patterns(dtype)
        return p if dt.itemsize == 1 else np.concatenate([p[:64], p[-64:], rng.choice(p, 3000)])
    info = np.iinfo(dt)
    edges = [info.min, info.max, 0, 1, info.max // 2, 2**24 + 1, 2**31 - 1]
    if dt.itemsize == 8:
        edges += [2**53, 2**60, 2**53 - 1] + ([-(2**53), -(2**62)] if dt.kind == "i" else [])
    rand = rng.integers(info.min // 2**8 if dt.kind == "i" else 0, info.max // 2**8, 2000, dtype=dt, endpoint=True)
    pool = np.concatenate([np.array(edges, dtype=dt), rand, rand >> 20])
    with np.errstate(invalid="ignore"):  # 64-bit: the values float64 holds (the others: their own test)
        return pool[pool.astype(np.float64).astype(dt) == pool]


def _in_format(v: np.ndarray, fmt: str) -> np.ndarray:
    """Which float64 values are values of fmt: kept exactly (NaN as NaN, the sign of zero) by a
    round trip through fmt's ml_dtypes / numpy type (numeq.round for tf32); integers by range."""
    info = numeq.format_info(fmt)
    with np.errstate(invalid="ignore", over="ignore"):
        if info["kind"] == "integer":
            return np.isfinite(v) & (v == np.floor(v)) & (v >= info["min"]) & (v <= info["max"])
        if fmt == "tf32":
            back = numeq.round(np.where(np.isnan(v), 0.0, v), fmt)
            back = np.where(np.isnan(v), np.nan, back)
        else:
            back = _wide(v.astype(_arrays._NUMPY_TYPES[fmt]))
    return ((back == v) & (np.signbit(back) == np.signbit(v))) | (np.isnan(v) & np.isnan(back))


def _outcome(call):
    """('ok', result) or ('error', type, message): what a call gives, to compare two calls."""
    try:
        return ("ok", call())
    except (ValueError, TypeError) as e:
        return ("error", type(e).__name__, str(e))


def _same(a, b) -> bool:
    if a[0] != b[0]:
        return False
    if a[0] == "error":
        return a == b
    x, y = np.asarray(a[1]), np.asarray(b[1])
    return x.shape == y.shape and x.dtype == y.dtype and bool(
        np.all((x == y) & (np.signbit(x) == np.signbit(y)) | (np.isnan(x) & np.isnan(y))))


def _arrays_of(dtype, fmt: str | None, rng, shapes):
    """Arrays of dtype whose values are values of fmt (None: any), of the given shapes; None when
    the dtype holds no value of fmt."""
    pool = _pool(dtype, rng)
    if fmt is not None:
        pool = pool[_in_format(_wide(pool), fmt)]
    if pool.size == 0:
        return None
    return [rng.choice(pool, int(np.prod(s))).reshape(s) for s in shapes]


@pytest.mark.parametrize("dtype", DTYPES, ids=_name)
def test_matmul_and_sum_as_on_float64(dtype):
    """Every format as in_fmt (and None): matmul and sum on the dtype's array give what they give
    on its float64 copy, results or errors."""
    rng = np.random.default_rng(sum(map(ord, _name(dtype))))
    succeeded = 0
    for fmt in [None] + FORMATS:
        arrays = _arrays_of(dtype, fmt, rng, [(4, 8), (8, 3), (5, 7)])
        if arrays is None:
            continue
        a, b, x = arrays
        wide = [_wide(v) for v in arrays]
        fmt64 = fmt or _own(dtype)
        platform = MATMUL_PLATFORM.get(fmt64, "cuda_core.fp32")
        got = _outcome(lambda: numeq.matmul(a, b, platform=platform, in_fmt=fmt))
        want = _outcome(lambda: numeq.matmul(wide[0], wide[1], platform=platform, in_fmt=fmt64))
        assert _same(got, want), (fmt, platform, got, want)
        succeeded += got[0] == "ok"
        if fmt not in MATMUL_PLATFORM:  # the fp32 plan, checking the inputs against fmt
            got = _outcome(lambda: numeq.matmul(a, b, plan=numeq.plan("cuda_core.fp32", "matmul", "fp32"), in_fmt=fmt))
            want = _outcome(lambda: numeq.matmul(wide[0], wide[1], plan=numeq.plan("cuda_core.fp32", "matmul", "fp32"),
                                                 in_fmt=fmt64))
            assert _same(got, want), (fmt, got, want)
            succeeded += got[0] == "ok"
        platform = SUM_PLATFORM.get(fmt64, "numpy")
        got = _outcome(lambda: numeq.sum(x, platform=platform, fmt=fmt))
        want = _outcome(lambda: numeq.sum(wide[2], platform=platform, fmt=fmt64))
        assert _same(got, want), (fmt, platform, got, want)
        succeeded += got[0] == "ok"
    assert succeeded >= 10  # most calls compute (the rest: formats the plans refuse, on both sides)


@pytest.mark.parametrize("dtype", DTYPES, ids=_name)
def test_compare_and_ops_as_on_float64(dtype):
    """numeq.compare judges a device output of the dtype as its float64 copy; numeq.ops builds
    the same op from the dtype's arrays."""
    rng = np.random.default_rng(7)
    a = numeq.round(rng.standard_normal((6, 16)), "bf16")
    b = numeq.round(rng.standard_normal((16, 5)), "bf16")
    op = numeq.ops.matmul(a, b, in_fmt="bf16", out="fp32")
    exact = op.emulate("nvidia.h100")
    with np.errstate(invalid="ignore", over="ignore"):
        scaled = exact * (16 if np.dtype(dtype).kind in "iu" else 1)
        actual = (np.abs(scaled) if np.dtype(dtype).kind == "u" else scaled).astype(dtype)
    for platform in ("nvidia.h100", "trainium.trn2"):
        got = numeq.compare(actual, op, platform, worst=3)
        want = numeq.compare(_wide(actual), op, platform, worst=3)
        assert repr(got) == repr(want)
    x, y = _arrays_of(dtype, "bf16", rng, [(4, 16), (16, 3)])
    got = numeq.ops.matmul(x, y, in_fmt="bf16").emulate("nvidia.h100")
    want = numeq.ops.matmul(_wide(x), _wide(y), in_fmt="bf16").emulate("nvidia.h100")
    assert _same(("ok", got), ("ok", want))


@pytest.mark.parametrize("dtype", [d for d in DTYPES if np.dtype(d).itemsize <= 2], ids=_name)
def test_every_pattern_decodes_as_ml_dtypes(dtype):
    """Every bit pattern: x @ [[1]] in fp32 is x itself for every value the dtype holds (each is an
    fp32 value), so the result of the dtype's array must be its astype(float64), NaN as NaN; the
    sign of zero, which a sum from +0 drops, is seen by a check against fnuz formats (no -0)."""
    x = _patterns(dtype).reshape(-1, 1)
    want = _wide(x)
    got = numeq.matmul(x, np.ones((1, 1), dtype=np.float32), platform="cuda_core.fp32", in_fmt="fp32")
    same = (got == want) | (np.isnan(got) & np.isnan(want))
    assert bool(np.all(same)), np.flatnonzero(~same)[:5]
    # Zeros: each accepted by e4m3fnuz exactly when +0 (the float64 copy says which is which).
    for i in np.flatnonzero(want.reshape(-1) == 0):
        row = x[i:i + 1]
        got = _outcome(lambda: numeq.matmul(row, np.ones((1, 1), dtype=np.float32),
                                            plan=numeq.plan("cuda_core.fp32", "matmul", "fp32"), in_fmt="e4m3fnuz"))
        assert (got[0] == "ok") == (not np.signbit(want.reshape(-1)[i])), (i, got)


@pytest.mark.parametrize("dtype", DTYPES, ids=_name)
def test_in_fmt_errors_name_the_parameter_and_first_bad_element(dtype):
    rng = np.random.default_rng(3)
    fmt = "e2m1fn" if np.dtype(dtype).kind in "iu" else "int8"
    good = _arrays_of(dtype, fmt, rng, [(40,)])[0]
    pool = _pool(dtype, rng)
    bad = pool[~_in_format(_wide(pool), fmt)][:1]
    for k in (0, 17, 39):
        x = good.copy()
        x[k] = bad[0]
        x2 = x.reshape(5, 8)
        for name, call in (("a", lambda v: numeq.matmul(v, v.T.copy(), platform="cuda_core.fp32", in_fmt=fmt)),
                           ("b", lambda v: numeq.matmul(np.ones((2, 5), dtype=v.dtype), v, platform="cuda_core.fp32",
                                                        in_fmt=fmt))):
            got = _outcome(lambda: call(x2))
            want = _outcome(lambda: call(_wide(x2)))
            assert got[0] == "error" and got == want, (got, want)
            assert got[2].startswith(f"{name}: element {k} (C order)"), got


@pytest.mark.parametrize("dtype", [np.int64, np.uint64], ids=_name)
def test_64_bit_integers_beyond_2_53(dtype):
    x = np.array([[1, 2**60, 2**53 + 2], [3, 4, 2**53]], dtype=dtype)  # exact in float64: accepted
    assert _same(("ok", numeq.sum(x, platform="numpy")), ("ok", numeq.sum(_wide(x), platform="numpy")))
    x[1, 1] = 2**53 + 1
    for call in (lambda: numeq.sum(x, platform="numpy"), lambda: numeq.sum(x, platform="numpy", fmt="fp64"),
                 lambda: numeq.matmul(x, np.ones((3, 1)), platform="cuda_core.fp32", in_fmt="fp32")):
        with pytest.raises(ValueError, match=r"^x: 64-bit integers beyond 2\^53 are not exact as floats|"
                                             r"^a: 64-bit integers beyond 2\^53 are not exact as floats"):
            call()
    with pytest.raises(ValueError, match=r"^actual: .* beyond 2\^53 are not exact in float64"):
        numeq.compare(x[1, 1:2].copy(), numeq.ops.sum(np.ones((1, 4)), in_fmt="fp32"), "nvidia.h100")


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn, np.int16, np.int32],
                         ids=_name)
def test_other_layouts_keep_their_paths(dtype):
    """Byte-swapped (numpy's own dtypes), non-contiguous, Fortran-ordered and masked arrays."""
    rng = np.random.default_rng(11)
    a, b = _arrays_of(dtype, "bf16", rng, [(12, 10), (10, 6)])
    want = numeq.matmul(_wide(a), _wide(b), platform="nvidia.h100", in_fmt="bf16")
    forms = [(np.asfortranarray(a), b), (np.repeat(a, 2, axis=1)[:, ::2], b), (a, b.T.copy().T)]
    if np.dtype(dtype).kind in "iuf":
        swapped = np.dtype(dtype).newbyteorder()
        forms.append((a.astype(swapped), b.astype(swapped)))
    for x, y in forms:
        got = numeq.matmul(x, y, platform="nvidia.h100", in_fmt="bf16")
        assert _same(("ok", got), ("ok", want))
    with pytest.raises(TypeError, match="^a: masked arrays are not supported"):
        numeq.matmul(np.ma.masked_array(a, mask=np.zeros(a.shape, bool)), b, platform="nvidia.h100", in_fmt="bf16")


def test_large_arrays_on_threads():
    """Arrays above the threading threshold (2^16 elements): decode and check split across
    threads give the serial answer; the first bad element is the first in C order."""
    rng = np.random.default_rng(5)
    x = numeq.round(rng.standard_normal((300, 300)), "bf16").astype(ml_dtypes.bfloat16)
    for fmt in (None, "bf16", "fp32"):
        got = numeq.sum(x, platform="trainium.trn2", fmt=fmt)
        want = numeq.sum(_wide(x), platform="trainium.trn2", fmt=fmt or "bf16")
        assert _same(("ok", got), ("ok", want))
    y = x.astype(np.float16)
    y.reshape(-1)[[80000, 2000]] = np.float16(1 + 2**-10)  # fp16 values bf16 does not hold
    with pytest.raises(ValueError, match=r"^x: element 2000 \(C order\)"):
        numeq.sum(y, platform="trainium.trn2", fmt="bf16")
