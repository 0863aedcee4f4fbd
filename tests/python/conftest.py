"""Shared oracles for the numeq Python tests.

Everything here is written from the published format definitions (FACTS.md section 1: OCP OFP8
rev 1.0, OCP MX v1.0, IEEE 754, the ml_dtypes README), never from numeq's own tables: the tests
compare numeq against these exact-rational (fractions.Fraction) models.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

import numeq


# ---------------------------------------------------------------------------------------------
# Format definitions, transcribed from FACTS.md s1 (and OCP MX v1.0 s5.3 for FP6/FP4).
# specials: "ieee" (all-ones exponent = Inf/NaN), "fn" (no Inf, all-ones magnitude = NaN),
# "fnuz" (no Inf, no -0, 0x80 = NaN), "finite" (no Inf, no NaN).
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Spec:
    name: str
    e: int  # exponent bits
    m: int  # fraction bits
    bias: int
    specials: str
    signed: bool = True
    has_zero: bool = True  # False: exponent field 0 is a normal value (E8M0)
    shift: int = 0  # tf32 lives in the top 19 bits of an fp32 pattern

    @property
    def nbits(self) -> int:
        return int(self.signed) + self.e + self.m

    @property
    def emin(self) -> int:  # exponent of the smallest normal
        return (1 if self.has_zero else 0) - self.bias

    @property
    def sign_bit(self) -> int:
        return (1 << (self.e + self.m)) if self.signed else 0

    @property
    def has_nan(self) -> bool:
        return self.specials != "finite"

    @property
    def has_inf(self) -> bool:
        return self.specials == "ieee"

    @property
    def has_negative_zero(self) -> bool:
        return self.signed and self.has_zero and self.specials != "fnuz"


SPECS = {
    s.name: s
    for s in [
        Spec("fp32", 8, 23, 127, "ieee"),
        Spec("tf32", 8, 10, 127, "ieee", shift=13),
        Spec("bf16", 8, 7, 127, "ieee"),
        Spec("fp16", 5, 10, 15, "ieee"),
        Spec("e4m3fn", 4, 3, 7, "fn"),
        Spec("e4m3", 4, 3, 7, "ieee"),
        Spec("e4m3fnuz", 4, 3, 8, "fnuz"),
        Spec("e5m2", 5, 2, 15, "ieee"),
        Spec("e5m2fnuz", 5, 2, 16, "fnuz"),
        Spec("e8m0fnu", 8, 0, 127, "fn", signed=False, has_zero=False),
        Spec("e3m2fn", 3, 2, 3, "finite"),
        Spec("e2m3fn", 2, 3, 1, "finite"),
        Spec("e2m1fn", 2, 1, 1, "finite"),
    ]
}
FLOAT_FORMATS = list(SPECS)
SMALL_FORMATS = [n for n, s in SPECS.items() if s.nbits <= 16]  # exhaustively enumerable

# numeq format -> the ml_dtypes / numpy dtype that implements the same format.
ML_DTYPES = {
    "bf16": ml_dtypes.bfloat16,
    "fp16": np.float16,
    "e4m3fn": ml_dtypes.float8_e4m3fn,
    "e4m3": ml_dtypes.float8_e4m3,
    "e4m3fnuz": ml_dtypes.float8_e4m3fnuz,
    "e5m2": ml_dtypes.float8_e5m2,
    "e5m2fnuz": ml_dtypes.float8_e5m2fnuz,
    "e8m0fnu": ml_dtypes.float8_e8m0fnu,
    "e3m2fn": ml_dtypes.float6_e3m2fn,
    "e2m3fn": ml_dtypes.float6_e2m3fn,
    "e2m1fn": ml_dtypes.float4_e2m1fn,
}
BITS_DTYPE = {8: np.uint8, 16: np.uint16, 32: np.uint32}

DETERMINISTIC_ROUNDINGS = ["nearest_even", "nearest_away", "toward_zero", "upward", "downward", "odd"]
INF = float("inf")
NAN = float("nan")


# ---------------------------------------------------------------------------------------------
# Decoder: bit pattern -> exact value (Fraction), or +-inf / nan as floats, or signed zero.
# ---------------------------------------------------------------------------------------------
def decode_oracle(spec: Spec, pattern: int):
    """Value of a bit pattern as a Fraction (finite non-zero), a float (+-0.0, +-inf, nan)."""
    b = pattern >> spec.shift
    assert b << spec.shift == pattern, "pattern has bits below the format's storage placement"
    negative = bool(b & spec.sign_bit)
    mag = b & ((1 << (spec.e + spec.m)) - 1)
    field, frac = mag >> spec.m, mag & ((1 << spec.m) - 1)
    top = (1 << spec.e) - 1
    if spec.specials == "ieee" and field == top:
        return NAN if frac else (-INF if negative else INF)
    if spec.specials == "fn" and mag == (1 << (spec.e + spec.m)) - 1:
        return NAN
    if spec.specials == "fnuz" and negative and mag == 0:
        return NAN
    if spec.has_zero and field == 0:
        if frac == 0:
            return -0.0 if negative else 0.0
        v = Fraction(frac, 1 << spec.m) * Fraction(2) ** spec.emin
    else:
        v = (1 + Fraction(frac, 1 << spec.m)) * Fraction(2) ** (field - spec.bias)
    return -v if negative else v


def as_float(v) -> float:
    return float(v)  # Fraction -> float is exact for every value of these formats


@functools.lru_cache(maxsize=None)
def max_finite(spec: Spec) -> Fraction:
    """Largest finite value: the largest magnitude pattern that the special rules leave finite."""
    full = (1 << (spec.e + spec.m)) - 1
    mag = {"ieee": full - (1 << spec.m), "fn": full - 1, "fnuz": full, "finite": full}[spec.specials]
    v = decode_oracle(spec, mag << spec.shift)
    assert isinstance(v, Fraction)
    return v


def _ulp_exponent(a: Fraction, spec: Spec) -> int:
    """Exponent of the quantum (last kept place) for magnitude a > 0 in spec (unbounded above)."""
    e = a.numerator.bit_length() - a.denominator.bit_length()
    if Fraction(2) ** e > a:
        e -= 1
    assert Fraction(2) ** e <= a < Fraction(2) ** (e + 1)
    return max(e, spec.emin) - spec.m


def neighbours(a: Fraction, spec: Spec) -> tuple[Fraction, Fraction]:
    """(down, up): the grid points of spec's precision bracketing a > 0 (ignores the max)."""
    q = Fraction(2) ** _ulp_exponent(a, spec)
    n = math.floor(a / q)
    return n * q, (n + 1) * q


def round_oracle(x, spec: Spec, rounding: str = "nearest_even", overflow: str = "ieee",
                 subnormals: str = "keep", negative_zero: bool = False) -> float:
    """x (a Fraction, or a float incl. +-0, +-inf, nan) rounded into spec; returns a float.

    Rules (FACTS.md s1): round to precision first with gradual underflow, then compare with
    the maximum; saturate -> +-max; ieee -> Inf (or NaN for formats without Inf), except the
    IEEE 754 s7.4 directed cases (toward_zero and round-to-odd never overflow, upward only for
    positives, downward only for negatives). Formats without NaN (FP6/FP4) always saturate.
    flush_outputs: a result below the smallest normal becomes signed zero. (Input flushing
    depends on the source format and is applied by the caller.)
    """
    if isinstance(x, float):
        if math.isnan(x):
            return NAN
        if math.isinf(x):
            if not spec.signed and x < 0:
                return NAN
            if overflow == "saturate" or not spec.has_nan:
                return math.copysign(float(max_finite(spec)), x)
            return x if spec.has_inf else NAN
        if x == 0:
            negative_zero = math.copysign(1.0, x) < 0
        x = Fraction(x)
    if x == 0:
        if not spec.has_zero:
            return NAN
        return -0.0 if (negative_zero and spec.has_negative_zero) else 0.0
    negative = x < 0
    if negative and not spec.signed:
        return NAN
    a = abs(x)
    q = Fraction(2) ** _ulp_exponent(a, spec)
    n = math.floor(a / q)
    frac = a / q - n
    if frac:
        up = {
            "nearest_even": frac > Fraction(1, 2) or (frac == Fraction(1, 2) and n % 2 == 1),
            "nearest_away": frac >= Fraction(1, 2),
            "toward_zero": False,
            "upward": not negative,
            "downward": negative,
            "odd": n % 2 == 0,
        }[rounding]
        n += int(up)
    r = n * q
    if r == 0 and not spec.has_zero:  # E8M0 holds no zero: the encoding 0 is 2^-127
        r = Fraction(2) ** spec.emin
    mx = max_finite(spec)
    if r > mx:
        to_max = (overflow == "saturate" or not spec.has_nan
                  or rounding in ("toward_zero", "odd")
                  or (rounding == "upward" and negative)
                  or (rounding == "downward" and not negative))
        if to_max:
            r = mx
        else:
            return (-INF if negative else INF) if spec.has_inf else NAN
    if subnormals in ("flush_outputs", "flush_both") and spec.has_zero and 0 < r < Fraction(2) ** spec.emin:
        r = Fraction(0)
    if r == 0:
        return -0.0 if (negative and spec.has_negative_zero) else 0.0
    return float(-r if negative else r)


def encode_oracle(value: float, spec: Spec) -> int:
    """Bit pattern of an exactly representable value (or +-inf/nan) in spec (canonical NaN not
    modelled: callers compare NaN-ness separately)."""
    if math.isnan(value):
        raise ValueError("NaN has several encodings")
    negative = math.copysign(1.0, value) < 0
    sign = spec.sign_bit if negative else 0
    if math.isinf(value):
        return (sign | (((1 << spec.e) - 1) << spec.m)) << spec.shift
    if value == 0:
        return sign << spec.shift
    a = Fraction(abs(value))
    for p in range(1 << (spec.e + spec.m)):
        if decode_oracle(spec, p << spec.shift) == a:
            return (sign | p) << spec.shift
    raise AssertionError(f"{value} is not a value of {spec.name}")


def same_float(a: float, b: float) -> bool:
    """Equal as floats incl. the sign of zero; NaN equals NaN."""
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)


def assert_same_floats(got, want, context=""):
    got = np.asarray(got, dtype=np.float64).ravel()
    want = np.asarray(want, dtype=np.float64).ravel()
    assert got.shape == want.shape
    ok = (got == want) & (np.signbit(got) == np.signbit(want))
    ok |= np.isnan(got) & np.isnan(want)
    if not ok.all():
        bad = np.nonzero(~ok)[0]
        raise AssertionError(
            f"{context}: {bad.size} mismatches; first: "
            + ", ".join(f"[{i}] got {got[i]!r} want {want[i]!r}" for i in bad[:5])
        )


# ---------------------------------------------------------------------------------------------
# Fixtures
# ---------------------------------------------------------------------------------------------
@pytest.fixture
def restore_threads():
    yield
    numeq.set_num_threads(0)  # back to the default (NUMEQ_NUM_THREADS or hardware)


def random_doubles(rng: np.random.Generator, spec: Spec, n: int) -> np.ndarray:
    """Doubles spread over spec's whole range (subnormals, normals, overflow region), both signs,
    with random 52-bit significands, plus exact grid points and midpoints of spec."""
    mx = float(max_finite(spec))
    lo = spec.emin - spec.m - 3
    hi = math.floor(math.log2(mx)) + 2
    exps = rng.integers(lo, hi + 1, size=n)
    mant = rng.random(n) + 1.0
    x = np.ldexp(mant, exps)
    # a third of them land exactly on grid points or midpoints (ties) of spec
    k = n // 3
    step = np.ldexp(1.0, np.maximum(exps[:k], spec.emin) - spec.m - 1)  # half a quantum
    x[:k] = np.floor(x[:k] / step) * step
    sign = rng.choice([-1.0, 1.0], size=n) if spec.signed else np.ones(n)
    return x * sign
