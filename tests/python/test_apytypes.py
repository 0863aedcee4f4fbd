"""Narrow-accumulator plans against APyTypes (a peer nobody here wrote): its floating-point matmul
rounds each product into the accumulator's format and adds them in order, rounding each sum to
nearest even; numeq's plan stating that arithmetic (a sequential reduction from +0, products
rounded, the accumulator's format) gives the same bits. Formats bf16, fp16 and the IEEE-like
8-bit e4m3 / e5m2 (APyTypes' floats have IEEE Inf and NaN), accumulators of the operands' format
and wider ones (APyFloatAccumulatorContext), inputs near overflow and in the subnormal range."""

from __future__ import annotations

import numpy as np
import pytest

import numeq

apy = pytest.importorskip("apytypes")

BITS = {"bf16": (8, 7), "fp16": (5, 10), "e4m3": (4, 3), "e5m2": (5, 2), "fp32": (8, 23)}


def _plan(acc: str, out: str) -> dict:
    cast = {"format": acc, "overflow": "ieee", "rounding": "nearest_even", "subnormals": "keep"}
    return {"c_placement": "last", "name": f"sequential {acc}", "output": dict(cast, format=out),
            "reduction": {"kind": "sequential", "start_from_zero": True,
                          "arithmetic": {"accumulate": cast, "product": "rounded", "product_cast": cast}}}


def _apy(x: np.ndarray, fmt: str):
    e, m = BITS[fmt]
    return apy.APyFloatArray.from_float(x, exp_bits=e, man_bits=m)


def _same(d: np.ndarray, c: np.ndarray) -> bool:
    return bool(np.all((d == c) | (np.isnan(d) & np.isnan(c))))


@pytest.mark.parametrize("fmt", ["bf16", "fp16", "e4m3", "e5m2"])
@pytest.mark.parametrize("scale", [1.0, "large", "tiny"])
@pytest.mark.parametrize("k", [1, 7, 64, 300])
def test_accumulator_of_the_operands_format(fmt, scale, k):
    rng = np.random.default_rng(k * 31 + len(fmt))
    info = numeq.format_info(fmt)
    s = {1.0: 1.0, "large": np.sqrt(info["max"]) / 4, "tiny": np.sqrt(info["min_normal"])}[scale]
    a = numeq.round(rng.standard_normal((9, k)) * s, fmt)
    b = numeq.round(rng.standard_normal((k, 5)) * s, fmt)
    want = (_apy(a, fmt) @ _apy(b, fmt)).to_numpy()
    got = numeq.matmul(a, b, plan=_plan(fmt, fmt), in_fmt=fmt, out=fmt)
    assert _same(got, want), np.argwhere(~((got == want) | (np.isnan(got) & np.isnan(want))))[:5]


@pytest.mark.parametrize("fmt", ["bf16", "fp16"])
def test_wider_accumulator(fmt):
    # APyFloatAccumulatorContext(8, 23): products and sums in fp32, the result in fp32.
    rng = np.random.default_rng(3)
    a, b = numeq.round(rng.standard_normal((8, 200)), fmt), numeq.round(rng.standard_normal((200, 8)), fmt)
    with apy.APyFloatAccumulatorContext(exp_bits=8, man_bits=23):
        c = _apy(a, fmt) @ _apy(b, fmt)
    assert (c.exp_bits, c.man_bits) == (8, 23)
    assert _same(numeq.matmul(a, b, plan=_plan("fp32", "fp32"), in_fmt=fmt, out="fp32"), c.to_numpy())
