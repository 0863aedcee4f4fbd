"""numeq.formats() and numeq.format_info() against the published constants (FACTS.md s1 table;
OCP MX v1.0 s5.3 for FP6/FP4)."""

from __future__ import annotations

import pytest

import numeq

from conftest import SPECS, decode_oracle, max_finite

# name: (bits incl. sign, exponent bits, mantissa bits, bias, max finite, min normal, min subnormal)
# Values as published: FACTS.md s1 (OFP8 rev 1.0, ml_dtypes README, IEEE 754) and OCP MX v1.0
# (E3M2: max 28, min normal 0.25, min subnormal 0.0625; E2M3: 7.5, 1, 0.125; E2M1: 6, 1, 0.5).
PUBLISHED = {
    "fp32": (32, 8, 23, 127, 3.4028234663852886e38, 2.0**-126, 2.0**-149),
    "tf32": (19, 8, 10, 127, (2 - 2.0**-10) * 2.0**127, 2.0**-126, 2.0**-136),
    "bf16": (16, 8, 7, 127, 3.3895313892515355e38, 2.0**-126, 2.0**-133),
    "fp16": (16, 5, 10, 15, 65504.0, 2.0**-14, 2.0**-24),
    "e4m3fn": (8, 4, 3, 7, 448.0, 2.0**-6, 2.0**-9),
    "e4m3": (8, 4, 3, 7, 240.0, 2.0**-6, 2.0**-9),
    "e4m3fnuz": (8, 4, 3, 8, 240.0, 2.0**-7, 2.0**-10),
    "e5m2": (8, 5, 2, 15, 57344.0, 2.0**-14, 2.0**-16),
    "e5m2fnuz": (8, 5, 2, 16, 57344.0, 2.0**-15, 2.0**-17),
    "e8m0fnu": (8, 8, 0, 127, 2.0**127, 2.0**-127, None),
    "e3m2fn": (6, 3, 2, 3, 28.0, 0.25, 0.0625),
    "e2m3fn": (6, 2, 3, 1, 7.5, 1.0, 0.125),
    "e2m1fn": (4, 2, 1, 1, 6.0, 1.0, 0.5),
}
INTEGERS = {"int8": (8, True, -128, 127), "uint8": (8, False, 0, 255), "int32": (32, True, -(2**31), 2**31 - 1)}
REQUIRED = list(PUBLISHED) + list(INTEGERS)


def test_formats_lists_every_required_format():
    names = numeq.formats()
    assert isinstance(names, list) and all(isinstance(n, str) for n in names)
    missing = [n for n in REQUIRED if n not in names]
    assert not missing, f"formats() lacks {missing}"
    assert len(set(names)) == len(names), "duplicate names"


def test_floating_formats_come_before_integers():
    names = numeq.formats()
    kinds = [numeq.format_info(n)["kind"] for n in names]
    assert kinds == sorted(kinds, key=lambda k: k != "floating")


@pytest.mark.parametrize("name", list(PUBLISHED))
def test_format_info_matches_published_constants(name):
    bits, e, m, bias, mx, mn, msub = PUBLISHED[name]
    info = numeq.format_info(name)
    assert info["name"] == name
    assert info["kind"] == "floating"
    assert info["bits"] == bits
    assert info["exponent_bits"] == e
    assert info["mantissa_bits"] == m
    assert info["precision"] == m + 1
    assert info["bias"] == bias
    assert info["max"] == mx
    assert info["min_normal"] == mn
    if msub is None:  # E8M0: no zero, no subnormals
        assert info["has_subnormals"] is False
        assert info["has_zero"] is False
    else:
        assert info["has_subnormals"] is True
        assert info["min_subnormal"] == msub
    assert info["epsilon"] == 2.0**-m
    assert info["unit_roundoff"] == 2.0 ** -(m + 1)
    assert info["storage_bits"] == (32 if name == "tf32" else 8 if bits <= 8 else bits)


@pytest.mark.parametrize("name", list(PUBLISHED))
def test_format_info_special_values(name):
    spec = SPECS[name]
    info = numeq.format_info(name)
    assert info["has_inf"] == (spec.specials == "ieee")
    assert info["has_nan"] == (spec.specials != "finite")
    assert info["has_negative_zero"] == spec.has_negative_zero
    assert info["signed"] == spec.signed
    # The encodings it reports, read back through the independent decoder.
    assert decode_oracle(spec, info["max_bits"]) == max_finite(spec)
    if spec.has_inf:
        assert decode_oracle(spec, info["inf_bits"]) == float("inf")
    else:
        assert info["inf_bits"] is None
    if spec.has_nan:
        v = decode_oracle(spec, info["nan_bits"])
        assert v != v
    else:
        assert info["nan_bits"] is None


def test_fp8_nan_encodings_are_the_published_ones():
    # OFP8: E4M3 NaN only S.1111.111; fnuz NaN only 0x80; E8M0 NaN 0xFF.
    assert numeq.format_info("e4m3fn")["nan_bits"] == 0x7F
    assert numeq.format_info("e4m3fnuz")["nan_bits"] == 0x80
    assert numeq.format_info("e5m2fnuz")["nan_bits"] == 0x80
    assert numeq.format_info("e8m0fnu")["nan_bits"] == 0xFF
    assert numeq.format_info("e5m2")["inf_bits"] == 0x7C
    assert numeq.format_info("e4m3")["inf_bits"] == 0x78
    assert numeq.format_info("bf16")["max_bits"] == 0x7F7F


@pytest.mark.parametrize("name", list(INTEGERS))
def test_integer_format_info(name):
    bits, signed, lo, hi = INTEGERS[name]
    info = numeq.format_info(name)
    assert info["kind"] == "integer"
    assert info["bits"] == bits
    assert info["signed"] == signed
    assert info["min"] == lo
    assert info["max"] == hi


def test_format_info_returns_a_fresh_dict():
    a = numeq.format_info("fp16")
    a["max"] = 0
    assert numeq.format_info("fp16")["max"] == 65504.0
