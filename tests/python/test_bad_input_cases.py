"""The bad inputs reported in issue 14 and found by the bad-input matrix and the property
harness, one test each (test_bad_inputs.py covers their classes): a documented error naming the
parameter; and special values that are valid input, against ml_dtypes."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

import numeq
from bad_input_matrix import A, B, CODES, Q3, X, _profile


# ---------------------------------------------------------------------------------------------
# The cases issue 14 reported, one by one (the matrix covers their classes)
# ---------------------------------------------------------------------------------------------
_A2 = np.ones((2, 2))
_HUGE_VIEW = np.broadcast_to(np.float32(1.5), (10**6, 10**6))
REPORTED = [
    ("reference.sum axis=2**63", lambda: numeq.reference.sum(X, axis=2**63), ValueError, "axis:"),
    ("round seed=2**64", lambda: numeq.round(X, "bf16", rounding="stochastic", seed=2**64), ValueError, "seed:"),
    ("plan split_k=2**64", lambda: numeq.plan("nvidia.h100", split_k=2**64), ValueError, "split_k:"),
    ("set_num_threads(2.5)", lambda: numeq.set_num_threads(2.5), TypeError, "n:"),
    ("set_num_threads(-1)", lambda: numeq.set_num_threads(-1), ValueError, "n:"),
    ("decode(x, 'nope')", lambda: numeq.decode(np.uint8(1), "nope"), ValueError, "fmt:"),
    ("ops.matmul out='nope'", lambda: numeq.ops.matmul(A, B, out="nope"), ValueError, "out:"),
    ("ops.sum out='nope'", lambda: numeq.ops.sum(X, out="nope"), ValueError, "out:"),
    ("reference.matmul c_fmt", lambda: numeq.reference.matmul(A, B, c=np.ones(2), c_fmt="nope"), ValueError, "c_fmt:"),
    ("NUL in a name", lambda: numeq.round(X, "bf16\x00x"), ValueError, "fmt:"),
    ("ragged list", lambda: numeq.round([[1.0, 2.0], [3.0]], "bf16"), ValueError, "x:"),
    ("string scale", lambda: numeq.quantize(X, scale="0.5"), TypeError, "scale:"),
    ("fit([1], ...)", lambda: numeq.fit_platform([1], (X.astype(np.float32),), np.zeros(2), op="sum"), TypeError, "candidates"),
    ("non-broadcasting c", lambda: numeq.matmul(A, B, c=np.ones(3), platform="nvidia.h100", in_fmt="bf16"),
     ValueError, "c:"),
    ("load_platform of a missing file", lambda: numeq.load_platform("no-such-profile.json"), ValueError, "source:"),
    ("load_platform text= not JSON", lambda: numeq.load_platform(text="{"), ValueError, ""),
    ("load_platform two sources", lambda: numeq.load_platform("{}", text="{}"), TypeError, "source, path, text:"),
    ("int arrays to ops.matmul", lambda: numeq.ops.matmul(_A2.astype(np.int8), _A2.astype(np.int8)), TypeError,
     "int8_matmul"),
    ("axis=0.5", lambda: numeq.reference.softmax(X, axis=0.5), TypeError, "axis:"),
    ("causal='yes' (reference)", lambda: numeq.reference.attention(Q3, Q3, Q3, causal="yes"), TypeError, "causal:"),
    ("causal='yes' (ops)", lambda: numeq.ops.attention(Q3, Q3, Q3, causal="yes"), TypeError, "causal:"),
    ("zero point 0.5 (ops)", lambda: numeq.ops.quantize(X, scale=1.0, zero_point=0.5), ValueError, "zero_point:"),
    ("zero point 0.5", lambda: numeq.quantize(X, scale=1.0, zero_point=0.5), ValueError, "zero_point:"),
    ("masked array", lambda: numeq.round(np.ma.masked_array(X, mask=X > 1), "bf16"), TypeError, "x:"),
    ("generate 10**10 values", lambda: numeq.ops.generate("normal", (10**10, 10**10)), MemoryError, "shape:"),
    # A broadcast view of 10^12 elements costs nothing until numeq copies it (issue 32: the
    # MemoryError named no parameter).
    ("a view too large to copy (round)", lambda: numeq.round(_HUGE_VIEW, "bf16"), MemoryError, "x:"),
    ("a view too large to copy (ops.matmul)", lambda: numeq.ops.matmul(_HUGE_VIEW, _A2), MemoryError, "a:"),
    ("a view too large to copy (matmul b)", lambda: numeq.matmul(_A2, _HUGE_VIEW, platform="nvidia.h100"),
     MemoryError, "b:"),
    ("a view too large to copy (softmax)", lambda: numeq.reference.softmax(_HUGE_VIEW), MemoryError, "x:"),
    # Found by a new-user trial (issue 32): an attention op was built on mismatched shapes and
    # failed only at its first use.
    ("ops.attention k of another d", lambda: numeq.ops.attention(Q3, Q3[..., :1], Q3), ValueError, "k:"),
    ("ops.attention v of another Lk", lambda: numeq.ops.attention(Q3, Q3, Q3[:, :2]), ValueError, "v:"),
    ("a view too large to copy (attention v)",
     lambda: numeq.ops.attention(Q3, Q3, np.broadcast_to(np.float64(1.5), (1, 3, 10**12))),
     MemoryError, "v:"),
]


# Found while building the matrix and the property harness (each was a raw or missing error).
REPORTED += [
    ("reveal_order fn returning a str", lambda: numeq.reveal_order(lambda x: "a", 8), TypeError, "fn:"),
    ("int8_matmul codes beyond int8/uint8", lambda: numeq.ops.int8_matmul(np.full((2, 2), 1000), _A2.astype(np.int8)),
     ValueError, "a:"),
    ("int8_matmul infinite codes", lambda: numeq.ops.int8_matmul(np.full((2, 2), np.inf), _A2.astype(np.int8)),
     ValueError, "a:"),
    ("Probes.write(5)", lambda: numeq.probes("trainium.trn1", m=2, n=2, k=128,
                                             candidates={"d": "trainium.trn1"}).write(5), TypeError, "directory:"),
    ("platform_json names its parameter", lambda: numeq.platform_json("nope"), ValueError, "name:"),
    ("ops.function names its parameter", lambda: numeq.ops.function("nope", X), ValueError, "name:"),
    ("ops.quantize block beyond the axis", lambda: numeq.ops.quantize(X, scale=np.ones((1, 1)), block=2**31),
     ValueError, "block:"),
    ("reference.dot of products beyond the accumulator", lambda: numeq.reference.dot(np.full(2, 1e308),
                                                                                     np.full(2, 1e308)),
     ValueError, "a, b:"),
    ("scaled_fp8_matmul scale beyond fp32", lambda: numeq.ops.scaled_fp8_matmul(A, B, 1e300, 1.0, in_fmt="e4m3fn"),
     ValueError, "scale_a:"),
    ("JSON number overflow in a plan", lambda: numeq.Plan('{"name": 1e999}'), ValueError, "plan:"),
    ("NUL inside a profile dict", lambda: numeq.load_platform({**_profile(), "name": "a\x00b"}), ValueError,
     "source.name:"),
    ("NUL escaped in profile text", lambda: numeq.load_platform(json.dumps({**_profile(), "name": "a\x00b"})),
     ValueError, "source.name:"),
    ("an array for a format name", lambda: numeq.matmul(A.astype(np.float32), B.astype(np.float32), platform="numpy",
                                                        in_fmt=np.array([])), TypeError, "in_fmt:"),
    ("zero point 2^63 as a float", lambda: numeq.ops.dequantize(CODES, scale=1.0, zero_point=np.array(2.0**63)),
     ValueError, "zero_point:"),
    ("an integer out defaulted from in_fmt", lambda: numeq.ops.reciprocal(0, in_fmt="int8"), ValueError,
     "out (default: in_fmt):"),
    ("dot with a c of higher rank", lambda: numeq.dot(X, X, c=np.ones((2, 2)), platform="nvidia.h100", in_fmt="bf16"),
     ValueError, "c:"),
    ("dot with an empty c", lambda: numeq.dot(X, X, c=np.empty((0, 1)), platform="nvidia.h100", in_fmt="bf16"),
     ValueError, "c:"),
    ("a C++ message quoting part of a UTF-8 sequence", lambda: numeq.Plan("\x80"), ValueError, "plan"),
    ("matmul with an empty c of higher rank", lambda: numeq.matmul(A, B, c=np.empty((0, 1, 1)), platform="nvidia.h100",
                                                                   in_fmt="bf16"), ValueError, "c:"),
    ("tensor_core_candidates n beyond a step", lambda: numeq.tensor_core_candidates("bf16", n=(2**31 - 1,)),
     ValueError, "n:"),
    ("probes beyond any memory", lambda: numeq.probes("trainium.trn1", m=2, n=2, k=2**62,
                                                      candidates={"d": "trainium.trn1"}), MemoryError, "m, n, k:"),
]


@pytest.mark.parametrize("label,call,error,text", REPORTED, ids=[r[0] for r in REPORTED])
def test_reported(label, call, error, text):
    try:
        with pytest.raises(error) as e:
            call()
    finally:
        numeq.set_num_threads(0)
    assert text in str(e.value), str(e.value)


_PERMUTE = """
import json, resource, sys
resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
import numeq
plan = json.loads(numeq.plan("nvidia.h100.mma_sync", in_fmt="e4m3fn", out="fp16").to_json())
def permutes(node):
    if isinstance(node, dict):
        if node.get("kind") == "permute":
            yield node
        for v in node.values():
            yield from permutes(v)
    elif isinstance(node, list):
        for v in node:
            yield from permutes(v)
next(permutes(plan))["size"] = 10**10
try:
    numeq.Plan(plan)
except (ValueError, MemoryError) as e:
    print(type(e).__name__, e)
"""


def test_permute_of_ten_billion_is_a_clear_error():
    """A permute node of 10^10 terms (the plan's own size, not memory the caller has) must give a
    ValueError or a MemoryError naming the plan, never a bare std::bad_alloc or a crash; run
    under a 2 GiB address-space limit so that it cannot take the machine's memory."""
    out = subprocess.run([sys.executable, "-c", _PERMUTE], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.startswith(("ValueError plan", "MemoryError plan")), out.stdout


# ---------------------------------------------------------------------------------------------
# Valid special values with an independent oracle (ml_dtypes' casts)
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", ["bf16", "fp16", "e5m2", "e4m3fn", "e4m3fnuz", "e5m2fnuz"])
def test_special_values_cast_like_ml_dtypes(fmt):
    import ml_dtypes

    dtype = {"bf16": ml_dtypes.bfloat16, "fp16": np.float16, "e5m2": ml_dtypes.float8_e5m2,
             "e4m3fn": ml_dtypes.float8_e4m3fn, "e4m3fnuz": ml_dtypes.float8_e4m3fnuz,
             "e5m2fnuz": ml_dtypes.float8_e5m2fnuz}[fmt]
    # NaN, +-Inf, +-0: exact in float32, so ml_dtypes' float32 -> fmt cast is the oracle.
    x = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0], dtype=np.float32)
    want = x.astype(dtype).astype(np.float64)
    got = numeq.round(x, fmt)
    same = (got == want) & (np.signbit(got) == np.signbit(want)) | (np.isnan(got) & np.isnan(want))
    assert same.all(), (fmt, got, want)
    assert np.isnan(numeq.round(float("nan"), fmt))
