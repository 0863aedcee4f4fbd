"""numeq.encode against ml_dtypes (the de-facto reference implementation of these formats).

float32 inputs: ml_dtypes rounds once, so numeq must agree bit for bit (nearest_even, overflow
"ieee"). The default run checks a deterministic subset of the 2^32 float32 patterns (every k-th
pattern plus every pattern at or next to a rounding boundary); ``-m long`` checks all of them.
float64 inputs: ml_dtypes rounds twice (through float32; FACTS.md s1, ml_dtypes PR 401), so
there the exact Fraction oracle decides.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import numeq

from conftest import (
    ML_DTYPES,
    SPECS,
    as_float,
    assert_same_floats,
    decode_oracle,
    max_finite,
    round_oracle,
)

ML_FORMATS = list(ML_DTYPES)
NO_NAN = {"e3m2fn", "e2m3fn", "e2m1fn"}
CHUNK = 1 << 24


def bits_dtype(name):
    return np.uint16 if name in ("bf16", "fp16") else np.uint8


def compare_with_ml_dtypes(patterns: np.ndarray, name: str) -> None:
    """numeq.encode(x) == x.astype(ml dtype) for the float32 values with these bit patterns."""
    spec = SPECS[name]
    x = patterns.view(np.float32)
    nan = np.isnan(x)
    finite_x = x[~nan] if nan.any() else x
    got = numeq.encode(finite_x, name)
    with np.errstate(over="ignore", invalid="ignore"):
        want = finite_x.astype(ML_DTYPES[name]).view(bits_dtype(name))
    if not np.array_equal(got, want):
        bad = np.nonzero(got != want)[0]
        i = bad[0]
        raise AssertionError(
            f"{name}: {bad.size} of {finite_x.size} differ; first: x=0x{finite_x[i:i+1].view(np.uint32)[0]:08X} "
            f"({float(finite_x[i])!r}) numeq 0x{int(got[i]):X} ml_dtypes 0x{int(want[i]):X}"
        )
    if not nan.any() or name in NO_NAN:
        return
    xn = x[nan]
    got = numeq.encode(xn, name)
    with np.errstate(invalid="ignore"):
        want = xn.astype(ML_DTYPES[name])
    # every NaN input gives a NaN (payloads may differ: numeq canonicalises)
    assert np.isnan(numeq.decode(got, name)).all(), f"{name}: NaN input gave a non-NaN"
    assert np.isnan(want.astype(np.float32)).all()
    if spec.specials in ("ieee", "fn") and spec.signed:  # the format keeps the sign of NaN
        sign = np.uint16(spec.sign_bit) if bits_dtype(name) == np.uint16 else np.uint8(spec.sign_bit)
        np.testing.assert_array_equal(got & sign, want.view(bits_dtype(name)) & sign)


def subset_patterns(k: int = 131) -> np.ndarray:
    """Every k-th float32 pattern, plus (for each count s of discarded low bits, 13..23, which
    covers fp16/bf16/fp8/fp6/fp4 normals and a range of subnormal shifts) every high part with
    low part 0, 1, half-1, half, half+1 and all ones."""
    parts = [np.arange(0, 1 << 32, k, dtype=np.uint64)]
    for s in range(13, 24):
        hi = np.arange(1 << (32 - s), dtype=np.uint64) << np.uint64(s)
        half = 1 << (s - 1)
        for low in (0, 1, half - 1, half, half + 1, (1 << s) - 1):
            parts.append(hi | np.uint64(low))
    return np.concatenate(parts).astype(np.uint32)  # a few duplicates: harmless


@pytest.fixture(scope="module")
def subset():
    return subset_patterns()


@pytest.mark.parametrize("name", ML_FORMATS)
def test_float32_subset_bit_exact_vs_ml_dtypes(name, subset):
    assert subset.size > 19_000_000
    compare_with_ml_dtypes(subset, name)


@pytest.mark.long
@pytest.mark.parametrize("name", ML_FORMATS)
def test_all_float32_patterns_bit_exact_vs_ml_dtypes(name):
    for start in range(0, 1 << 32, CHUNK):
        compare_with_ml_dtypes(np.arange(start, start + CHUNK, dtype=np.uint64).astype(np.uint32), name)


@pytest.mark.parametrize("name", sorted(NO_NAN))
def test_nan_into_format_without_nan_raises(name):
    with pytest.raises(ValueError, match="NaN"):
        numeq.encode(np.array([1.0, np.nan], dtype=np.float32), name)
    with pytest.raises(ValueError, match="NaN"):
        numeq.round(float("nan"), name)
    # +-Inf saturate in these formats (OCP MX: FP6/FP4 saturate)
    mx = float(max_finite(SPECS[name]))
    np.testing.assert_array_equal(numeq.round(np.array([np.inf, -np.inf]), name), [mx, -mx])


# ---------------------------------------------------------------------------------------------
# float64 inputs at the rounding boundaries: Fraction oracle decides
# ---------------------------------------------------------------------------------------------
def boundary_doubles(name: str) -> np.ndarray:
    """Midpoints between consecutive representable values (and past the maximum), each +-1 ulp."""
    spec = SPECS[name]
    vals = sorted({decode_oracle(spec, p) for p in range(1 << (spec.e + spec.m))
                   if not isinstance(decode_oracle(spec, p), float)})
    mx = vals[-1]
    vals = [v for v in vals if v > 0]
    if spec.has_zero:
        vals = [0] + vals
    mids = [(a + b) / 2 for a, b in zip(vals, vals[1:])]
    ulp_top = vals[-1] - vals[-2]
    mids += [mx + ulp_top / 2, mx + ulp_top, mx + 3 * ulp_top / 2]
    out = []
    for m in mids:
        f = float(m)
        assert f == m  # midpoints of these formats are exact doubles
        out += [np.nextafter(f, -np.inf), f, np.nextafter(f, np.inf)]
    x = np.array(out)
    if x.size > 3000:  # bf16, fp16: every 16th midpoint (and all near zero and the maximum)
        idx = np.arange(x.size) // 3
        x = x[(idx % 16 == 0) | (idx < 300) | (idx > idx[-1] - 300)]
    return np.concatenate([x, -x]) if spec.signed else x


@pytest.mark.parametrize("name", ML_FORMATS)
def test_float64_boundaries_match_fraction_oracle(name):
    spec = SPECS[name]
    x = boundary_doubles(name)
    want = np.array([round_oracle(float(v), spec) for v in x])
    assert_same_floats(numeq.round(x, name), want, f"{name} float64")
    # where ml_dtypes agrees with the exact oracle numeq agrees with both; where it does not
    # (double rounding through float32), numeq sides with the exact oracle (checked above).
    with np.errstate(over="ignore", invalid="ignore"):
        ml = x.astype(ML_DTYPES[name]).astype(np.float64)
    with np.errstate(over="ignore"):
        x32_exact = x.astype(np.float32).astype(np.float64) == x
    # on doubles that float32 holds exactly ml_dtypes cannot double-round: all three agree
    assert_same_floats(ml[x32_exact], want[x32_exact], f"{name} ml_dtypes on fp32-exact doubles")


def test_ml_dtypes_double_rounding_is_not_copied():
    # FACTS.md s1: ml_dtypes gives -448 here (double rounding); numeq must give -416.
    x = np.array([-431.99999999999994])
    assert numeq.round(x, "e4m3fn")[0] == -416.0 == round_oracle(float(x[0]), SPECS["e4m3fn"])


# ---------------------------------------------------------------------------------------------
# cast() returns ml_dtypes arrays; ml_dtypes arrays are accepted as inputs
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ML_FORMATS)
def test_cast_returns_ml_dtypes_array(name):
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((64, 33)) * 30).astype(np.float32)
    if name == "e8m0fnu":
        x = np.abs(x) + np.float32(2.0**-100)
    out = numeq.cast(x, name)
    assert out.dtype == np.dtype(ML_DTYPES[name]) and out.shape == x.shape
    with np.errstate(over="ignore"):
        want = x.astype(ML_DTYPES[name])
    np.testing.assert_array_equal(out.view(bits_dtype(name)), want.view(bits_dtype(name)))


@pytest.mark.parametrize(
    "source,target",
    [(s, t) for s in ["bf16", "fp16", "e5m2", "e4m3fn"]
     for t in ["e4m3fn", "e5m2", "e2m1fn", "e4m3fnuz", "fp16", "bf16"] if s != t],
)
def test_ml_dtypes_arrays_as_sources(source, target):
    """Every pattern of a 16/8-bit source format as an ml_dtypes array, rounded into target:
    equals rounding the exact value (float64) once, and equals ml_dtypes' own astype."""
    spec = SPECS[source]
    pats = np.arange(1 << spec.nbits, dtype=np.uint32).astype(bits_dtype(source))
    src = pats.view(ML_DTYPES[source])
    with np.errstate(invalid="ignore"):
        vals = src.astype(np.float64)
    keep = ~np.isnan(vals) if target in NO_NAN else np.ones(vals.shape, bool)
    got = numeq.encode(src[keep], target)
    np.testing.assert_array_equal(got, numeq.encode(vals[keep], target))
    if not (target == "bf16" and source == "fp16"):  # both are single roundings of exact values
        with np.errstate(over="ignore", invalid="ignore"):
            want = src[keep].astype(ML_DTYPES[target]).view(bits_dtype(target))
        finite = ~np.isnan(vals[keep])
        np.testing.assert_array_equal(got[finite], want[finite])


def test_cast_without_dtype_raises():
    with pytest.raises(ValueError, match="dtype"):
        numeq.cast(np.ones(3), "tf32")
    assert math.isnan(as_float(decode_oracle(SPECS["e4m3fn"], 0x7F)))
