"""The shortcut that skips checking inputs against in_fmt when the array's own format lies inside
it (numeq._reference_functions._holds_every_value), against the definition itself: every bit
pattern of every format of at most 16 bits decoded and cast into every other format, kept exactly
(NaN as NaN, the sign of zero kept) if and only if the predicate says so. fp32 / tf32 / fp64
inner formats: their extreme and special values."""

from __future__ import annotations

import numpy as np
import pytest

import numeq
from numeq._reference_functions import _holds_every_value

FORMATS = [f for f in numeq.formats() if numeq.format_info(f)["kind"] == "floating"]


def _values(fmt: str) -> np.ndarray:
    info = numeq.format_info(fmt)
    if info["storage_bits"] <= 16:
        return numeq.decode(np.arange(1 << info["bits"], dtype=np.uint64).astype(
            np.uint8 if info["storage_bits"] <= 8 else np.uint16), fmt)
    # wider formats: the values that decide (extremes, subnormals, specials, full precision)
    eps = info["epsilon"]
    v = [0.0, -0.0, info["max"], -info["max"], info["min_normal"], info["min_subnormal"], 1 + eps, -(1 + eps),
         info["min_normal"] * (1 + eps), np.inf, -np.inf, np.nan]
    return np.array([x for x in v if np.isnan(x) or numeq.round(np.array([x]), fmt)[0] == x or np.isinf(x)])


def _kept(values: np.ndarray, outer: str) -> bool:
    try:
        r = numeq.round(values, outer)
    except ValueError:  # a NaN or Inf the outer format cannot hold: not kept
        return False
    same = (r == values) & (np.signbit(r) == np.signbit(values))
    return bool(np.all(same | (np.isnan(r) & np.isnan(values))))


@pytest.mark.parametrize("inner", FORMATS)
def test_predicate_is_the_definition(inner):
    values = _values(inner)
    for outer in FORMATS:
        assert _holds_every_value(inner, outer) == _kept(values, outer), (inner, outer)


def test_checked_inputs_still_refused():
    # in_fmt narrower than the array's format: the values are still checked
    with pytest.raises(ValueError, match="not exactly representable"):
        numeq.matmul(np.array([[1 + 2**-10]], dtype=np.float16), np.ones((1, 1), np.float16), platform="nvidia.h100",
                     in_fmt="bf16")


@pytest.mark.parametrize("dtype,in_fmt", [("bfloat16", "bf16"), ("float16", "fp32"), ("float8_e4m3fn", "bf16"),
                                          ("float16", "fp16")])
def test_arrays_inside_in_fmt_skip_the_check_and_agree(dtype, in_fmt):
    # An array whose own format lies inside in_fmt is taken as it is: the same result as its
    # float64 values with the check.
    import ml_dtypes

    dt = getattr(ml_dtypes, dtype, None) or np.dtype(dtype)
    x = np.random.default_rng(0).standard_normal((4, 32)).astype(np.float32).astype(dt)
    y = np.random.default_rng(1).standard_normal((32, 3)).astype(np.float32).astype(dt)
    got = numeq.matmul(x, y, platform="cuda_core.fp32", in_fmt=in_fmt)
    want = numeq.matmul(x.astype(np.float64), y.astype(np.float64), platform="cuda_core.fp32", in_fmt=in_fmt)
    np.testing.assert_array_equal(got, want)
    assert numeq.reference.exp(x, in_fmt=in_fmt).shape == x.shape
