"""Block-scaled quantisation (OCP MX, DeepSeek-V3 tiles/blocks, NVFP4-like) against an exact oracle:
scale = round(amax / max(fmt)) into scale_fmt (the "quotient" rule) or, for OCP MX by default,
2^(floor(log2 amax) - emax_elem) (OCP MX v1.0 s6.3); element = round(x / scale) into fmt
(saturating), both computed from exact rationals and rounded once (conftest.round_oracle)."""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
import pytest

import numeq

from conftest import SPECS, assert_same_floats, max_finite, neighbours, round_oracle


def block_slices(shape, block):
    lead = len(shape) - len(block)
    ranges = [range(n) for n in shape[:lead]] + [range(n // b) for n, b in zip(shape[lead:], block)]
    for idx in itertools.product(*ranges):
        sl = tuple(slice(i, i + 1) for i in idx[:lead]) + tuple(
            slice(i * b, (i + 1) * b) for i, b in zip(idx[lead:], block))
        yield idx, sl


def floor_log2(q: Fraction) -> int:
    """floor(log2 q) for a positive rational, exactly."""
    e = q.numerator.bit_length() - q.denominator.bit_length()
    return e if Fraction(2) ** e <= q else e - 1


def ocp_scale(amax: float, fmt: str) -> float:
    """OCP MX v1.0 s6.3: shared_exp = floor(log2(amax)) - emax_elem, emax_elem the exponent of the
    element format's largest normal (from the spec's max_finite); X = 2^shared_exp, clamped to E8M0's
    range 2^-127 .. 2^127."""
    shared = floor_log2(Fraction(amax)) - floor_log2(Fraction(max_finite(SPECS[fmt])))
    return float(Fraction(2) ** min(max(shared, -127), 127))


def block_oracle(x, fmt, block, scale_fmt, scale_rounding="nearest_even", rounding="nearest_even",
                 overflow="saturate", scale_rule="quotient"):
    spec, sspec = SPECS[fmt], SPECS[scale_fmt]
    lead = x.ndim - len(block)
    sshape = x.shape[:lead] + tuple(n // b for n, b in zip(x.shape[lead:], block))
    scales = np.empty(sshape)
    elems = np.empty(x.shape)
    mx = max_finite(spec)
    for idx, sl in block_slices(x.shape, block):
        blk = x[sl]
        amax = float(np.max(np.abs(blk)))
        if amax == 0:
            s = 1.0  # an all-zero block: numeq documents scale 1
        elif scale_rule == "ocp":
            s = ocp_scale(amax, fmt)
        elif scale_rule == "ocp_headroom":  # AWS's quantize_mx: 2^(floor(log2 amax) - (emax - 1))
            s = min(2 * ocp_scale(amax, fmt), 2.0 ** 127)
        else:
            s = round_oracle(Fraction(amax) / mx, sspec, rounding=scale_rounding, overflow="saturate")
        scales[idx] = s
        out = np.empty(blk.shape)
        for j, v in np.ndenumerate(blk):
            v = float(v)
            out[j] = round_oracle(v, spec) if v == 0 else round_oracle(
                Fraction(v) / Fraction(s), spec, rounding=rounding, overflow=overflow)
        elems[sl] = out
    return elems, scales


def varied_blocks(rng, shape, block_len):
    """Normal data with a different magnitude per block (incl. tiny, huge, an all-zero block)."""
    x = rng.standard_normal(shape)
    mags = 2.0 ** rng.integers(-30, 30, size=x.size // block_len)
    x = (x.reshape(-1, block_len) * mags[:, None]).reshape(shape)
    x.reshape(-1, block_len)[0] = 0.0
    x.reshape(-1, block_len)[1, 3] = -0.0
    return x


MX_ELEMENTS = ["e4m3fn", "e5m2", "e3m2fn", "e2m3fn", "e2m1fn"]


@pytest.mark.parametrize("scale_rounding", ["nearest_even", "upward"])
@pytest.mark.parametrize("fmt", MX_ELEMENTS)
def test_mx_matches_oracle(fmt, scale_rounding):
    rng = np.random.default_rng(1)
    x = varied_blocks(rng, (6, 128), 32)
    values, scales = numeq.mx_quantize(x, fmt, scale_rule="quotient", scale_rounding=scale_rounding)
    assert values.shape == x.shape and scales.shape == (6, 4)
    want_v, want_s = block_oracle(x, fmt, (32,), "e8m0fnu", scale_rounding)
    assert_same_floats(scales, want_s, f"{fmt} scales")
    assert_same_floats(values, want_v, f"{fmt} elements")
    # scales are powers of two (E8M0)
    m, _ = np.frexp(scales)
    assert np.all(m == 0.5)
    # the same through block_quantize
    v2, s2 = numeq.block_quantize(x, fmt, block=(32,), scale_fmt="e8m0fnu", scale_rounding=scale_rounding)
    np.testing.assert_array_equal(v2, values)
    np.testing.assert_array_equal(s2, scales)


@pytest.mark.parametrize("block", [(32,), (16,), (8, 32)])
@pytest.mark.parametrize("fmt", MX_ELEMENTS)
def test_mx_default_is_the_ocp_rule(fmt, block):
    # OCP MX v1.0 s6.3 transcribed with Fractions (ocp_scale); mx_quantize's default, and the same
    # rule through block_quantize(scale_rule="ocp") for other block sizes.
    rng = np.random.default_rng(11)
    shape = (4, 2 * block[-1]) if len(block) == 1 else (2 * block[0], 2 * block[1])
    x = varied_blocks(rng, shape, block[-1]) if len(block) == 1 else rng.standard_normal(shape) * 3
    if block == (32,):
        values, scales = numeq.mx_quantize(x, fmt)
    else:
        values, scales = numeq.block_quantize(x, fmt, block=block, scale_fmt="e8m0fnu", scale_rule="ocp")
    want_v, want_s = block_oracle(x, fmt, block, "e8m0fnu", scale_rule="ocp")
    assert_same_floats(scales, want_s, f"{fmt} scales")
    assert_same_floats(values, want_v, f"{fmt} elements")


@pytest.mark.parametrize("block", [(32,), (8, 4)])
@pytest.mark.parametrize("fmt", ["e4m3fn", "e5m2"])
def test_the_headroom_rule_is_twice_the_spec_scale_and_never_clips(fmt, block):
    # nki.isa.quantize_mx: "a block scale that is two times larger, reserving additional range for
    # rounding the largest values in each group without saturation" (the (8, 4) block is its group).
    rng = np.random.default_rng(12)
    shape = (4, 64) if len(block) == 1 else (16, 8)
    x = varied_blocks(rng, shape, 32) if len(block) == 1 else rng.standard_normal(shape) * 5
    values, scales = numeq.block_quantize(x, fmt, block=block, scale_fmt="e8m0fnu", scale_rule="ocp_headroom")
    want_v, want_s = block_oracle(x, fmt, block, "e8m0fnu", scale_rule="ocp_headroom")
    assert_same_floats(scales, want_s, f"{fmt} scales")
    assert_same_floats(values, want_v, f"{fmt} elements")
    assert np.all(np.abs(values) < max_finite(SPECS[fmt]))
    # amax = 1.9 * 2^k in e4m3fn: the spec's quotient 486.4 clips to 448, the doubled one rounds to 240.
    one = np.zeros(32)
    one[3] = 1.9 * 2.0 ** -5
    v_spec, s_spec = numeq.mx_quantize(one, "e4m3fn")
    v_aws, s_aws = numeq.block_quantize(one, "e4m3fn", block=(32,), scale_fmt="e8m0fnu", scale_rule="ocp_headroom")
    assert (v_spec[0, 3] if v_spec.ndim > 1 else v_spec[3]) == 448 and float(s_aws.ravel()[0]) == 2 * float(s_spec.ravel()[0])
    assert (v_aws[0, 3] if v_aws.ndim > 1 else v_aws[3]) == 240


@pytest.mark.parametrize("fmt", MX_ELEMENTS)
def test_mx_amax_just_above_a_power_of_two_is_not_clipped(fmt):
    # amax 1.2: the spec's scale 2^(0 - emax_elem) keeps 1.2 / scale within the element range up to
    # the element rounding; the old default (amax / max rounded to nearest) clipped it (e4m3fn: 0.875).
    x = np.zeros(32)
    x[0], x[7] = 1.2, -0.25
    values, scales = numeq.mx_quantize(x, fmt)
    assert scales[0] == ocp_scale(1.2, fmt)
    assert values[0] == round_oracle(Fraction(1.2) / Fraction(scales[0]), SPECS[fmt])
    assert values[0] * scales[0] >= 1.0


def test_mx_scale_rounding_needs_the_quotient_rule():
    with pytest.raises(ValueError, match="scale_rounding"):
        numeq.mx_quantize(np.ones(32), scale_rounding="upward")
    with pytest.raises(ValueError, match="scale_rule"):
        numeq.mx_quantize(np.ones(32), scale_rule="floor")


@pytest.mark.parametrize("fmt", MX_ELEMENTS)
def test_upward_scale_never_saturates_and_bounds_error(fmt):
    spec = SPECS[fmt]
    mx = max_finite(spec)
    rng = np.random.default_rng(2)
    x = varied_blocks(rng, (8, 96), 32)
    values, scales = numeq.mx_quantize(x, fmt, scale_rule="quotient", scale_rounding="upward")
    s_full = np.repeat(scales, 32, axis=-1)
    for v, e, s in zip(x.ravel(), values.ravel(), s_full.ravel()):
        q = Fraction(float(v)) / Fraction(float(s))
        assert abs(q) <= mx  # amax / scale <= max(fmt) when the scale is rounded up
        if q != 0:
            down, up = neighbours(abs(q), spec)
            err = abs(Fraction(float(v)) - Fraction(float(e)) * Fraction(float(s)))
            assert err <= Fraction(float(s)) * (up - down) / 2


def test_nearest_scale_can_saturate_but_stays_bounded():
    # amax / 448 = 1.4 * 2^k rounds down to 2^k under nearest: amax / scale = 627 > 448 saturates
    x = np.zeros((1, 32))
    x[0, 0] = 448 * 1.4
    x[0, 1] = 1.0
    values, scales = numeq.mx_quantize(x, "e4m3fn", scale_rule="quotient")
    assert scales[0, 0] == 1.0 and values[0, 0] == 448.0
    values, scales = numeq.mx_quantize(x, "e4m3fn", scale_rule="quotient", scale_rounding="upward")
    assert scales[0, 0] == 2.0 and values[0, 0] == round_oracle(Fraction(448 * 1.4) / 2, SPECS["e4m3fn"])


@pytest.mark.parametrize("shape,block", [((4, 256), (128,)), ((256, 256), (128, 128))])
def test_deepseek_fp32_scales(shape, block):
    rng = np.random.default_rng(3)
    x = rng.standard_normal(shape) * np.exp(rng.uniform(-6, 6, size=shape))
    x = x.astype(np.float32)
    values, scales = numeq.block_quantize(x, "e4m3fn", block=block, scale_fmt="fp32")
    want_v, want_s = block_oracle(x.astype(np.float64), "e4m3fn", block, "fp32")
    assert scales.shape == want_s.shape
    assert_same_floats(scales, want_s, "scales")
    assert_same_floats(values, want_v, "elements")
    # reconstruction: every element within half an element-ulp times the scale
    spec = SPECS["e4m3fn"]
    recon = numeq.block_dequantize(values, scales, block=block)
    for (idx, sl) in block_slices(shape, block):
        s = Fraction(float(scales[idx]))
        for v, r in zip(x[sl].ravel(), recon[sl].ravel()):
            q = abs(Fraction(float(v))) / s
            if q == 0:
                assert r == 0
                continue
            if q > max_finite(spec):  # nearest-rounded fp32 scale: |x| / s may exceed 448 by < 2^-24
                assert q <= max_finite(spec) * (1 + Fraction(1, 2**23))
                continue
            down, up = neighbours(q, spec)
            assert abs(Fraction(float(v)) - Fraction(float(r))) <= s * (up - down) / 2


def test_nvfp4_like_e4m3_scales():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((3, 64)) * 5
    values, scales = numeq.block_quantize(x, "e2m1fn", block=(16,), scale_fmt="e4m3fn")
    want_v, want_s = block_oracle(x, "e2m1fn", (16,), "e4m3fn")
    assert_same_floats(scales, want_s, "scales")
    assert_same_floats(values, want_v, "elements")


@pytest.mark.parametrize("rounding", ["toward_zero", "nearest_away", "upward"])
def test_element_rounding_modes(rounding):
    rng = np.random.default_rng(5)
    x = varied_blocks(rng, (2, 64), 32)
    values, scales = numeq.mx_quantize(x, "e4m3fn", rounding=rounding)
    want_v, want_s = block_oracle(x, "e4m3fn", (32,), "e8m0fnu", rounding=rounding, scale_rule="ocp")
    assert_same_floats(values, want_v, rounding)


def test_block_dequantize_is_exact_product_rounded_once():
    rng = np.random.default_rng(6)
    x = varied_blocks(rng, (4, 64), 32)
    values, scales = numeq.mx_quantize(x, "e5m2")
    got = numeq.block_dequantize(values, scales)
    s_full = np.repeat(scales, 32, axis=-1)
    want = [float(Fraction(float(e)) * Fraction(float(s))) if e != 0 else float(e) * float(s)  # keeps -0
            for e, s in zip(values.ravel(), s_full.ravel())]
    assert_same_floats(got, np.array(want).reshape(x.shape), "fp64")
    got32 = numeq.block_dequantize(values, scales, out="bf16", rounding="toward_zero")
    want32 = [round_oracle(Fraction(float(e)) * Fraction(float(s)), SPECS["bf16"], rounding="toward_zero")
              if e != 0 else float(e) * float(s) for e, s in zip(values.ravel(), s_full.ravel())]
    assert_same_floats(got32, np.array(want32).reshape(x.shape), "bf16")


def test_block_errors():
    with pytest.raises(ValueError, match="block"):
        numeq.mx_quantize(np.ones((2, 48)))
    with pytest.raises(ValueError, match="block"):
        numeq.block_quantize(np.ones((100, 128)), block=(128, 128), scale_fmt="fp32")
    with pytest.raises(ValueError, match="finite"):
        numeq.mx_quantize(np.array([np.nan] + [1.0] * 31))
    with pytest.raises(ValueError, match="scale_fmt"):
        numeq.block_quantize(np.ones(32), scale_fmt="int8")
    with pytest.raises(ValueError, match="scale"):
        numeq.block_dequantize(np.ones((2, 64)), np.ones((2, 3)))


def test_strided_inputs_match_contiguous_copies():
    rng = np.random.default_rng(7)
    base = rng.standard_normal((64, 96)).astype(np.float32)
    for v in (base.T, base[::2, ::-1], base[:, 32:64].T[::-1]):
        c = np.ascontiguousarray(v)
        for a, b in zip(numeq.mx_quantize(v, "e4m3fn"), numeq.mx_quantize(c, "e4m3fn")):
            np.testing.assert_array_equal(a, b)
