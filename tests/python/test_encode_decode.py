"""decode / encode of every bit pattern against an independent Fraction decoder and ml_dtypes."""

from __future__ import annotations

import math

import numpy as np
import pytest

import numeq

from conftest import (
    BITS_DTYPE,
    ML_DTYPES,
    SMALL_FORMATS,
    SPECS,
    as_float,
    assert_same_floats,
    decode_oracle,
)


def all_patterns(name: str) -> np.ndarray:
    spec = SPECS[name]
    storage = 8 if spec.nbits <= 8 else 16
    return np.arange(1 << spec.nbits, dtype=np.uint64).astype(BITS_DTYPE[storage])


@pytest.mark.parametrize("name", SMALL_FORMATS)
def test_decode_every_pattern_matches_fraction_decoder(name):
    spec = SPECS[name]
    patterns = all_patterns(name)
    got = numeq.decode(patterns, name)
    assert got.dtype == np.float64 and got.shape == patterns.shape
    want = np.array([as_float(decode_oracle(spec, int(p))) for p in patterns])
    assert_same_floats(got, want, name)


@pytest.mark.parametrize("name", [n for n in SMALL_FORMATS if n in ML_DTYPES])
def test_decode_every_pattern_matches_ml_dtypes(name):
    patterns = all_patterns(name)
    got = numeq.decode(patterns, name)
    with np.errstate(invalid="ignore"):
        want = patterns.view(ML_DTYPES[name]).astype(np.float64)
    assert_same_floats(got, want, name)


@pytest.mark.parametrize("name", SMALL_FORMATS)
def test_encode_inverts_decode(name):
    spec = SPECS[name]
    patterns = all_patterns(name)
    values = np.array([as_float(decode_oracle(spec, int(p))) for p in patterns])
    finite_or_inf = ~np.isnan(values)
    bits = numeq.encode(values[finite_or_inf], name)
    assert bits.dtype == patterns.dtype
    np.testing.assert_array_equal(bits, patterns[finite_or_inf])
    if spec.specials == "fnuz":  # no -0: -0.0 encodes as +0
        assert numeq.encode(-0.0, name) == 0
    if spec.has_nan:  # NaN in gives a NaN pattern
        nan_bits = numeq.encode(np.array([np.nan, -np.nan]), name)
        for b in nan_bits:
            assert math.isnan(decode_oracle(spec, int(b)))


@pytest.mark.parametrize("name", SMALL_FORMATS)
def test_encode_of_float32_values_inverts_decode(name):
    """Same through the float32 source path (every value of these formats is exact in fp32)."""
    spec = SPECS[name]
    patterns = all_patterns(name)
    values = np.array([as_float(decode_oracle(spec, int(p))) for p in patterns])
    keep = ~np.isnan(values)
    np.testing.assert_array_equal(numeq.encode(values[keep].astype(np.float32), name), patterns[keep])


@pytest.mark.parametrize(
    "name,dtype",
    [("fp32", np.uint32), ("tf32", np.uint32), ("bf16", np.uint16), ("fp16", np.uint16)]
    + [(n, np.uint8) for n in SPECS if SPECS[n].nbits <= 8],
)
def test_encode_dtype(name, dtype):
    x = np.linspace(-3, 3, 11)
    assert numeq.encode(x, name).dtype == dtype
    assert numeq.encode(x.astype(np.float32), name).dtype == dtype
    assert isinstance(numeq.encode(1.0, name), int)


def test_tf32_patterns_are_fp32_patterns_with_13_zero_low_bits():
    # Every tf32 pattern: the 19 information bits placed at the top of an fp32 word.
    patterns = (np.arange(1 << 19, dtype=np.uint32) << np.uint32(13)).astype(np.uint32)
    got = numeq.decode(patterns, "tf32")
    with np.errstate(invalid="ignore"):
        want = patterns.view(np.float32).astype(np.float64)
    assert_same_floats(got, want, "tf32 decode")
    # encode of any fp32 value into tf32 leaves the 13 low bits zero and is a fp32 value
    rng = np.random.default_rng(1)
    x = rng.integers(0, 1 << 32, size=200_000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    bits = numeq.encode(x, "tf32")
    assert bits.dtype == np.uint32
    assert not np.any(bits & np.uint32(0x1FFF))
    # decode(encode(x)) == round(x) as an fp32 pattern viewed as float32
    with np.errstate(invalid="ignore"):
        assert_same_floats(numeq.round(x, "tf32"), bits.view(np.float32).astype(np.float64), "tf32 round")
    # tf32 values encode to themselves
    finite = ~np.isnan(want)
    np.testing.assert_array_equal(numeq.encode(want[finite], "tf32"), patterns[finite])


def test_tf32_pattern_with_low_bits_is_rejected():
    with pytest.raises(ValueError):
        numeq.decode(np.array([0x3F800001], dtype=np.uint32), "tf32")


def test_decode_fp32_patterns_match_numpy_view():
    rng = np.random.default_rng(2)
    p = rng.integers(0, 1 << 32, size=100_000, dtype=np.uint64).astype(np.uint32)
    p[:6] = [0, 0x80000000, 0x7F800000, 0xFF800000, 0x00000001, 0x7F7FFFFF]
    with np.errstate(invalid="ignore"):
        assert_same_floats(numeq.decode(p, "fp32"), p.view(np.float32).astype(np.float64), "fp32")


@pytest.mark.parametrize("name", [n for n in SPECS if SPECS[n].nbits < 8])
def test_decode_rejects_bits_outside_narrow_patterns(name):
    with pytest.raises(ValueError):
        numeq.decode(np.array([1 << SPECS[name].nbits], dtype=np.uint8), name)


def test_decode_int8_accepts_signed_and_unsigned_bit_arrays():
    signed = np.arange(-128, 128, dtype=np.int8)
    np.testing.assert_array_equal(numeq.decode(signed, "int8"), signed.astype(np.float64))
    unsigned = signed.view(np.uint8)  # the same two's complement patterns
    np.testing.assert_array_equal(numeq.decode(unsigned, "int8"), signed.astype(np.float64))
    np.testing.assert_array_equal(numeq.decode(unsigned, "uint8"), unsigned.astype(np.float64))
    i32 = np.array([-(2**31), -1, 0, 1, 2**31 - 1], dtype=np.int32)
    np.testing.assert_array_equal(numeq.decode(i32, "int32"), i32.astype(np.float64))
    np.testing.assert_array_equal(numeq.decode(i32.view(np.uint32), "int32"), i32.astype(np.float64))


def test_decode_int8_rejects_out_of_range():
    with pytest.raises(ValueError):
        numeq.decode(np.array([256], dtype=np.int16), "int8")
    with pytest.raises(ValueError):
        numeq.decode(np.array([-129], dtype=np.int16), "int8")
    with pytest.raises(ValueError):
        numeq.decode(np.array([256], dtype=np.uint16), "uint8")


def test_decode_scalar_returns_float():
    v = numeq.decode(0x7E, "e4m3fn")
    assert isinstance(v, float) and v == 448.0
    assert math.isnan(numeq.decode(0x80, "e4m3fnuz"))
    assert numeq.decode(0x80, "e4m3fn") == 0.0 and math.copysign(1, numeq.decode(0x80, "e4m3fn")) < 0


def test_decode_strided_patterns():
    p = np.arange(256, dtype=np.uint8)
    assert_same_floats(numeq.decode(p[::3], "e5m2"), numeq.decode(p.copy()[::3].copy(), "e5m2"), "strided")
    p2 = p.reshape(16, 16)
    assert_same_floats(numeq.decode(p2.T, "e5m2"), numeq.decode(np.ascontiguousarray(p2.T), "e5m2"), "T")
    want = np.array([as_float(decode_oracle(SPECS["e5m2"], int(b))) for b in p[::-1]])
    assert_same_floats(numeq.decode(p[::-1], "e5m2"), want, "reversed")
