"""Bad input: the right exception type, a message that names the problem, and no crash."""

from __future__ import annotations

import random

import numpy as np
import pytest

import numeq

FLOATING = ["fp32", "tf32", "bf16", "fp16", "e4m3fn", "e4m3", "e4m3fnuz", "e5m2", "e5m2fnuz", "e8m0fnu",
            "e3m2fn", "e2m3fn", "e2m1fn"]


def test_unknown_format_lists_valid_names():
    for call in (lambda: numeq.round(1.0, "fp9"), lambda: numeq.encode(1.0, "fp9"),
                 lambda: numeq.decode(1, "fp9"), lambda: numeq.format_info("fp9"),
                 lambda: numeq.block_quantize(np.ones(32), "fp9")):
        with pytest.raises(ValueError) as e:
            call()
        msg = str(e.value)
        assert "fp9" in msg
        for name in FLOATING + ["int8", "uint8", "int32"]:
            assert name in msg, (name, msg)


@pytest.mark.parametrize(
    "kw,valid",
    [("rounding", ["nearest_even", "nearest_away", "toward_zero", "upward", "downward", "odd", "stochastic"]),
     ("overflow", ["ieee", "saturate"]),
     ("subnormals", ["keep", "flush_outputs", "flush_inputs", "flush_both"])],
)
def test_unknown_mode_lists_valid_names(kw, valid):
    with pytest.raises(ValueError) as e:
        numeq.round(np.ones(3), "bf16", **{kw: "bogus"})
    msg = str(e.value)
    assert kw in msg and "bogus" in msg
    for name in valid:
        assert name in msg
    assert set(valid) == set(getattr(numeq, {"rounding": "ROUNDINGS", "overflow": "OVERFLOWS",
                                            "subnormals": "SUBNORMALS"}[kw]))


def test_unknown_quantize_range_and_rounding():
    with pytest.raises(ValueError, match="full.*symmetric"):
        numeq.quantize(np.ones(3), scale=1.0, range="asymmetric")
    with pytest.raises(ValueError, match="nearest_even"):
        numeq.quantize(np.ones(3), scale=1.0, rounding="bankers")


@pytest.mark.parametrize("fmt", ["int8", "uint8", "int32"])
def test_float_into_integer_format_points_to_quantize(fmt):
    for fn in (numeq.round, numeq.encode):
        with pytest.raises(ValueError, match="quantize"):
            fn(np.ones(3), fmt)


def test_quantize_into_floating_format_rejected():
    with pytest.raises(ValueError, match="integer format"):
        numeq.quantize(np.ones(3), "e4m3fn", scale=1.0)


@pytest.mark.parametrize("scale", [0.0, -1.0, np.nan, np.inf, [1.0, 0.0, 2.0]])
def test_bad_scale(scale):
    axis = 0 if isinstance(scale, list) else None
    with pytest.raises(ValueError, match="scale"):
        numeq.quantize(np.ones(3), scale=scale, axis=axis)
    with pytest.raises(ValueError, match="scale"):
        numeq.dequantize(np.ones(3, dtype=np.int8), scale=scale, axis=axis)


def test_block_size_not_dividing():
    with pytest.raises(ValueError, match="block_size"):
        numeq.quantize(np.ones((2, 10)), scale=np.ones((2, 3)), block_size=3)
    with pytest.raises(ValueError, match="block_size"):
        numeq.quant_params(np.ones((2, 10)), block_size=4)
    with pytest.raises(ValueError, match="block_size"):
        numeq.dequantize(np.ones((2, 10), dtype=np.int8), scale=np.ones((2, 3)), block_size=3)
    with pytest.raises(ValueError, match="block_size"):
        numeq.quantize(np.ones(4), scale=1.0, block_size=0)


def test_block_not_dividing():
    with pytest.raises(ValueError, match="block"):
        numeq.block_quantize(np.ones((2, 33)))
    with pytest.raises(ValueError, match="block"):
        numeq.block_quantize(np.ones((3, 128)), block=(2, 128), scale_fmt="fp32")
    with pytest.raises(ValueError, match="block"):
        numeq.block_quantize(np.ones(64), block=(32, 2))  # more block axes than x has
    with pytest.raises(ValueError, match="block"):
        numeq.block_quantize(np.ones(64), block=(0,))


def test_zero_point_errors():
    with pytest.raises(ValueError, match="zero_point"):
        numeq.quantize(np.ones(3), scale=1.0, zero_point=0.5)
    with pytest.raises(ValueError, match="zero_point"):
        numeq.quantize(np.ones(3), "int8", scale=1.0, zero_point=200)


def test_random_bits_range():
    for bad in (0, 65, -1):
        with pytest.raises(ValueError, match="random_bits"):
            numeq.round(np.ones(3), "bf16", rounding="stochastic", random_bits=bad)


@pytest.mark.parametrize(
    "x",
    [np.array(["a", "b"]), np.array([1.0, None], dtype=object), np.array([b"x"]),
     np.array([1 + 2j]), np.array([1 + 2j], dtype=np.complex64), 1 + 2j, "1.0",
     np.array(["2020-01-01"], dtype="datetime64[D]")],
)
def test_non_numeric_inputs_raise_type_error(x):
    for call in (lambda: numeq.round(x, "bf16"), lambda: numeq.encode(x, "e4m3fn"),
                 lambda: numeq.quantize(x, scale=1.0), lambda: numeq.block_quantize(x)):
        with pytest.raises(TypeError):
            call()


def test_non_integer_bits_raise_type_error():
    with pytest.raises(TypeError):
        numeq.decode(np.array([1.0]), "bf16")
    with pytest.raises(TypeError):
        numeq.dequantize(np.array([1.5]), scale=1.0)


def test_non_string_names_raise_type_error():
    with pytest.raises(TypeError):
        numeq.round(1.0, 16)
    with pytest.raises(TypeError):
        numeq.round(1.0, "bf16", rounding=None)
    with pytest.raises(TypeError):
        numeq.format_info(None)


def test_nan_into_e2m1fn():
    with pytest.raises(ValueError, match="NaN"):
        numeq.round(np.array([0.5, np.nan]), "e2m1fn")
    with pytest.raises(ValueError, match="NaN"):
        numeq.encode(np.float32("nan"), "e2m1fn")
    with pytest.raises(ValueError, match="NaN"):
        numeq.quantize(np.array([np.nan]), scale=1.0)


def test_int64_beyond_2_53():
    with pytest.raises(ValueError, match="2\\^53"):
        numeq.round(np.array([2**53 + 1], dtype=np.int64), "fp32")
    assert numeq.round(np.array([2**60], dtype=np.int64), "fp32")[0] == 2.0**60


@pytest.mark.parametrize("x", [np.array([2**63 - 1], dtype=np.int64), np.array([2**64 - 1], dtype=np.uint64)])
def test_int64_extremes_without_warning(x):
    with pytest.raises(ValueError, match="2\\^53"):
        numeq.round(x, "fp32")


def test_fuzz_only_value_and_type_errors():
    """A few hundred random (mostly bad) calls: each returns or raises ValueError/TypeError."""
    rnd = random.Random(1234)
    names = FLOATING + ["int8", "uint8", "int32", "fp64", "", "E4M3", "bf16 ", None, 3]
    modes = ["nearest_even", "stochastic", "odd", "up", "", None]
    arrays = [
        np.ones(0), np.ones((0, 3)), np.array(1.5), np.arange(7.0), np.full(5, np.nan), np.full(4, -np.inf),
        np.ones((3, 32), dtype=np.float32), np.array([1, 2, 3], dtype=np.int16), np.array([True, False]),
        np.array(["x"]), np.array([1 + 1j]), np.array([None], dtype=object), np.ones((2, 2, 2))[:, ::2],
        np.array([1e300, -1e-300]), np.ones(3, dtype=np.float16), np.ones(4, dtype=np.longdouble) / 3,
        np.array([2**63 - 1], dtype=np.int64), np.array([2**64 - 1], dtype=np.uint64), [1.0, "a"], [[1.0], [2.0, 3.0]],
    ]
    scales = [1.0, 0.0, -2.0, np.nan, [1.0, 2.0], np.ones((3, 1)), "s", None, 1e-320]
    calls = 0
    outcomes = {"ok": 0, "ValueError": 0, "TypeError": 0}
    for _ in range(600):
        x = rnd.choice(arrays)
        op = rnd.randrange(8)
        try:
            if op == 0:
                numeq.round(x, rnd.choice(names), rounding=rnd.choice(modes), overflow=rnd.choice(["ieee", "x"]),
                            subnormals=rnd.choice(["keep", "flush_both", "y"]), random_bits=rnd.choice([32, 0, 64, 99]))
            elif op == 1:
                numeq.encode(x, rnd.choice(names), rounding=rnd.choice(modes))
            elif op == 2:
                numeq.decode(x, rnd.choice(names))
            elif op == 3:
                numeq.quantize(x, rnd.choice(names), scale=rnd.choice(scales), axis=rnd.choice([None, 0, 1, 5, -9]),
                               block_size=rnd.choice([None, 1, 2, 0, -1]), range=rnd.choice(["full", "symmetric", "z"]),
                               rounding=rnd.choice(modes))
            elif op == 4:
                numeq.dequantize(x, scale=rnd.choice(scales), zero_point=rnd.choice([0, 3, 0.5, 1000]),
                                 axis=rnd.choice([None, 0, -1, 3]), out=rnd.choice(names),
                                 rounding=rnd.choice(modes))
            elif op == 5:
                numeq.quant_params(x, rnd.choice(names), axis=rnd.choice([None, 0, 2]),
                                   block_size=rnd.choice([None, 2, 3]), range=rnd.choice(["full", "symmetric", "?"]))
            elif op == 6:
                numeq.block_quantize(x, rnd.choice(names), block=rnd.choice([(32,), (2,), (1, 1), (), (0,), 4]),
                                     scale_fmt=rnd.choice(["e8m0fnu", "fp32", "int8", "e2m1fn", "x"]),
                                     scale_rounding=rnd.choice(modes), rounding=rnd.choice(modes),
                                     overflow=rnd.choice(["saturate", "ieee", "q"]))
            else:
                numeq.block_dequantize(x, rnd.choice([np.ones(1), np.ones((3, 1)), np.array(2.0), np.ones(0)]),
                                       block=rnd.choice([(32,), (1,), (2, 2)]), out=rnd.choice(names),
                                       rounding=rnd.choice(modes))
            outcomes["ok"] += 1
        except ValueError:
            outcomes["ValueError"] += 1
        except TypeError:
            outcomes["TypeError"] += 1
        calls += 1
    assert calls == 600
    assert outcomes["ValueError"] > 100 and outcomes["TypeError"] > 10 and outcomes["ok"] > 10, outcomes
