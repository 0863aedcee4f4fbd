"""The bad-input matrix of test_bad_inputs.py: its rows (every public entry point and the kind of
each argument), the bad values of each kind, and one case run and judged (run_case). The worker
subprocess of test_bad_inputs.py runs the cases; test_bad_input_cases.py reuses the base inputs."""

from __future__ import annotations

import json
import math
import re
import warnings
from typing import Any, Callable

import numpy as np

import numeq

ERRORS = (TypeError, ValueError, MemoryError)

# ---------------------------------------------------------------------------------------------
# Base inputs: small, valid, exactly representable in every format they are used with.
# ---------------------------------------------------------------------------------------------
X = np.array([[0.5, -1.0, 2.0, 0.25], [1.5, 0.75, -0.5, 4.0]])  # values of every format here
A = np.array([[1.0, 2.0, -0.5], [0.25, -1.0, 3.0]])
B = np.array([[0.5, 1.0], [-2.0, 0.75], [1.0, 1.5]])
V1 = np.array([1.0, -0.5, 2.0, 0.25])
Q3 = np.array([[[0.5, -1.0], [0.25, 1.0], [1.0, 0.5]]])  # attention q/k/v [1, 3, 2]
CODES = np.array([[1, -2, 3, 4], [0, 5, -6, 7]], dtype=np.int8)


def _profile() -> dict:
    p = json.loads(numeq.platform_json("numpy"))
    p["name"] = "bad_inputs.profile"
    return p


def _op() -> Any:
    return numeq.ops.matmul(A, B, in_fmt="bf16", out="fp32")


def _sum_fn(x):
    return np.sum(x)


# A row: (function, base keyword arguments, {parameter: kind}). Kinds:
#   array  real values;  codes  integer codes / bit patterns;  int  a C++ integer;  optint  an
#   integer or None;  str  a name (choices);  optstr  a name or None;  bool;  real;  optreal;
#   ints  an integer or sequence of integers.  Parameters not listed take no bad values here.
Row = tuple[Callable[..., Any], dict[str, Any], dict[str, str]]
CAST_KW = {"rounding": "str", "overflow": "str", "subnormals": "str", "seed": "int", "random_bits": "int"}
REF_OUT = {"in_fmt": "optstr", "out": "str", **CAST_KW}


def _rows() -> dict[str, Row]:
    r: dict[str, Row] = {}
    for name in ("round", "encode", "cast"):
        r[name] = (getattr(numeq, name), {"x": X, "fmt": "bf16"}, {"x": "array", "fmt": "str", **CAST_KW})
    r["decode"] = (numeq.decode, {"bits": np.array([0x3F80, 0xC000], dtype=np.uint16), "fmt": "bf16"},
                   {"bits": "codes", "fmt": "str"})
    r["formats"] = (numeq.formats, {}, {})
    r["format_info"] = (numeq.format_info, {"name": "bf16"}, {"name": "str"})
    r["quantize"] = (numeq.quantize, {"x": X, "fmt": "int8", "scale": 0.5, "zero_point": 1},
                     {"x": "array", "fmt": "str", "scale": "array", "zero_point": "codes", "axis": "optint",
                      "block_size": "optint", "range": "str", "rounding": "str", "seed": "int",
                      "random_bits": "int"})
    r["dequantize"] = (numeq.dequantize, {"q": CODES, "scale": 0.5, "zero_point": 1},
                       {"q": "codes", "scale": "array", "zero_point": "codes", "axis": "optint",
                        "block_size": "optint", "out": "str", "rounding": "str", "fmt": "optstr"})
    r["quant_params"] = (numeq.quant_params, {"x": X, "fmt": "int8"},
                         {"x": "array", "fmt": "str", "axis": "optint", "block_size": "optint", "range": "str"})
    r["block_quantize"] = (numeq.block_quantize, {"x": X, "fmt": "e4m3fn", "block": (4,)},
                           {"x": "array", "fmt": "str", "block": "ints", "scale_fmt": "str",
                            "scale_rounding": "str", "scale_rule": "str", **CAST_KW})
    r["mx_quantize"] = (numeq.mx_quantize, {"x": np.tile(X, (1, 8)), "fmt": "e4m3fn"},
                        {"x": "array", "fmt": "str", "scale_rounding": "optstr", "scale_rule": "str"})
    r["block_dequantize"] = (numeq.block_dequantize, {"values": X, "scales": np.array([[2.0], [0.5]]),
                                                       "block": (4,)},
                             {"values": "array", "scales": "array", "block": "ints", "out": "str",
                              "rounding": "str"})
    r["num_threads"] = (numeq.num_threads, {}, {})
    r["set_num_threads"] = (numeq.set_num_threads, {"n": 2}, {"n": "int"})
    r["platforms"] = (numeq.platforms, {}, {})
    for name in ("platform_json", "platform_evidence", "platform_assumptions"):
        r[name] = (getattr(numeq, name), {"name": "nvidia.h100"}, {"name": "str"})
    r["load_platform"] = (lambda source: numeq.load_platform(source), {"source": "__profile__"},
                          {"source": "str"})
    r["tolerance"] = (numeq.tolerance, {"op": "sum", "in_fmt": "bf16", "out": "fp32", "platforms": "numpy", "k": 8,
                                        "shape": (2,), "seeds": (0,)},
                      {"in_fmt": "str", "out": "optstr", "platforms": "str", "k": "int",
                       "inputs": "str", "kind": "str", "failure_probability": "real", "lam": "optreal",
                       "seeds": "ints", "margin": "real"})
    r["plan"] = (numeq.plan, {"platform": "nvidia.h100", "op": "matmul", "in_fmt": "bf16", "out": "fp32",
                              "split_k": 2},
                 {"platform": "str", "op": "str", "in_fmt": "str", "out": "str", "split_k": "int",
                  "split_mode": "str"})
    r["Plan"] = (numeq.Plan, {"text": "__plan__"}, {"text": "str"})
    r["sum"] = (numeq.sum, {"x": X.astype(np.float32), "platform": "numpy"},
                {"x": "array", "axis": "optint", "platform": "str", "fmt": "optstr"})
    r["numpy_reduction"] = (numeq.numpy_reduction, {"x": X.astype(np.float32), "axis": 0},
                            {"x": "array", "axis": "optint", "in_fmt": "optstr", "compute": "optstr",
                             "bufsize": "optint"})
    for name in ("dot", "matmul"):
        a, b = (X, X) if name == "dot" else (A, B)
        r[name] = (getattr(numeq, name), {"a": a, "b": b, "platform": "nvidia.h100", "in_fmt": "bf16"},
                   {"a": "array", "b": "array", "c": "array", "platform": "str", "in_fmt": "optstr", "out": "str"})
    r["assumption_candidates"] = (numeq.assumption_candidates, {"platform": "trainium.trn1", "in_fmt": "bf16"},
                                  {"platform": "str", "op": "str", "in_fmt": "str", "out": "str"})
    r["tensor_core_candidates"] = (numeq.tensor_core_candidates, {"in_fmt": "bf16", "n": (4,), "fraction_bits": (24,)},
                                   {"in_fmt": "str", "out": "str", "n": "ints", "fraction_bits": "ints",
                                    "structure": "str"})
    x32 = X.astype(np.float32)
    r["fit_platform"] = (numeq.fit_platform, {"candidates": {"numpy": "numpy"}, "inputs": (x32,), "outputs": np.sum(x32, axis=-1),
                            "op": "sum"},
                {"outputs": "array", "op": "str", "in_fmt": "optstr", "out": "str"})
    r["probes"] = (numeq.probes, {"platform": "trainium.trn1", "m": 2, "n": 2, "k": 128,
                                  "candidates": {"default": "trainium.trn1"}},
                   {"platform": "str", "op": "str", "in_fmt": "str", "out": "str", "m": "int", "n": "int",
                    "k": "int", "seed": "int"})
    r["reveal_order"] = (numeq.reveal_order, {"fn": _sum_fn, "n": 8, "fmt": "fp32", "dtype": np.float64},
                         {"n": "int", "fmt": "str", "kind": "optstr", "in_fmt": "optstr", "out_fmt": "optstr",
                          "product": "str"})
    r["compare"] = (numeq.compare, {"actual": "__reference__", "op": "__op__", "platform": "nvidia.h100"},
                    {"actual": "array", "platform": "str", "accept": "str", "failure_probability": "real",
                     "variants": "bool", "worst": "int"})
    r["compare_port"] = (numeq.compare_port, {"gpu_output": "__reference__", "trainium_output": "__reference__",
                                              "op": "__op__", "gpu_platform": "nvidia.h100",
                                              "trainium_platform": "trainium.trn2"},
                         {"gpu_output": "array", "trainium_output": "array", "gpu_platform": "str",
                          "trainium_platform": "str", "accept": "str", "failure_probability": "real",
                          "variants": "bool", "worst": "int"})

    ref = numeq.reference
    r["reference.sum"] = (ref.sum, {"x": X}, {"x": "array", "axis": "int", **REF_OUT})
    r["reference.sum_exact"] = (ref.sum_exact, {"x": X}, {"x": "array", "axis": "int", "in_fmt": "optstr"})
    r["reference.dot"] = (ref.dot, {"a": V1, "b": V1}, {"a": "array", "b": "array", **REF_OUT})
    r["reference.dot_exact"] = (ref.dot_exact, {"a": V1, "b": V1}, {"a": "array", "b": "array", "in_fmt": "optstr"})
    r["reference.matmul"] = (ref.matmul, {"a": A, "b": B},
                             {"a": "array", "b": "array", "c": "array", "c_fmt": "optstr", **REF_OUT})
    r["reference.matmul_exact"] = (ref.matmul_exact, {"a": A, "b": B},
                                   {"a": "array", "b": "array", "c": "array", "in_fmt": "optstr", "c_fmt": "optstr"})
    for name in ("softmax", "log_softmax"):
        r[f"reference.{name}"] = (getattr(ref, name), {"x": X}, {"x": "array", "axis": "int", **REF_OUT})
    for name in ("layernorm", "rmsnorm"):
        r[f"reference.{name}"] = (getattr(ref, name), {"x": X},
                                  {"x": "array", "gamma": "array", "beta": "array", "eps": "real", **REF_OUT})
    r["reference.attention"] = (ref.attention, {"q": Q3, "k": Q3, "v": Q3},
                                {"q": "array", "k": "array", "v": "array", "mask": "array", "causal": "bool",
                                 "scale": "optreal", **REF_OUT})
    for name in ("exp", "exp2", "log", "tanh", "sigmoid", "silu", "softplus", "sqrt", "rsqrt", "reciprocal",
                 "erf", "erf_dx", "sin", "cos", "tan", "atan", "mish", "gelu_sigmoid", "gelu_dx", "silu_dx",
                 "gelu_sigmoid_dx"):
        r[f"reference.{name}"] = (getattr(ref, name), {"x": X}, {"x": "array", **REF_OUT})
    r["reference.gelu"] = (ref.gelu, {"x": X}, {"x": "array", "approximate": "str", **REF_OUT})

    ops = numeq.ops
    # ops' out=None means the operation's default output format.
    r["ops.matmul"] = (ops.matmul, {"a": A, "b": B, "in_fmt": "bf16"},
                       {"a": "array", "b": "array", "c": "array", "in_fmt": "optstr", "out": "optstr",
                        "rounding": "str"})
    for name in ("sum", "mean", "max"):
        r[f"ops.{name}"] = (getattr(ops, name), {"x": X},
                            {"x": "array", "axis": "optint", "in_fmt": "optstr", "out": "optstr", "rounding": "str",
                             "compute": "str"})
    r["ops.function"] = (ops.function, {"name": "exp", "x": X},
                         {"name": "str", "x": "array", "in_fmt": "optstr", "out": "optstr", "rounding": "str"})
    for name in (s.name for s in ops.specs() if s.family == "function"):  # every elementwise row of the registry
        r[f"ops.{name}"] = (getattr(ops, name), {"x": X},
                            {"x": "array", "in_fmt": "optstr", "out": "optstr", "rounding": "str"})
    for name in ("softmax", "log_softmax"):
        r[f"ops.{name}"] = (getattr(ops, name), {"x": X},
                            {"x": "array", "axis": "int", "in_fmt": "optstr", "out": "optstr", "rounding": "str",
                             "variant": "str", "block": "int", "compute": "str",
                             **({"reciprocal": "bool"} if name == "softmax" else {})})
    r["ops.layernorm"] = (ops.layernorm, {"x": X},
                          {"x": "array", "gamma": "array", "beta": "array", "eps": "real", "in_fmt": "optstr",
                           "out": "optstr", "rounding": "str", "variant": "str", "compute": "str"})
    r["ops.rmsnorm"] = (ops.rmsnorm, {"x": X},
                        {"x": "array", "gamma": "array", "beta": "array", "eps": "real", "in_fmt": "optstr",
                         "out": "optstr", "rounding": "str", "compute": "str"})
    r["ops.attention"] = (ops.attention, {"q": Q3, "k": Q3, "v": Q3},
                          {"q": "array", "k": "array", "v": "array", "mask": "array", "causal": "bool",
                           "scale": "optreal", "in_fmt": "optstr", "out": "optstr", "rounding": "str",
                           "variant": "str", "block_rows": "int", "block_cols": "int", "cast_p": "bool"})
    r["ops.scaled_fp8_matmul"] = (ops.scaled_fp8_matmul, {"a": A, "b": B, "scale_a": 0.5, "scale_b": 2.0,
                                                          "in_fmt": "e4m3fn"},
                                  {"a": "array", "b": "array", "scale_a": "array", "scale_b": "array",
                                   "scaling": "str", "in_fmt": "optstr", "out": "optstr"})
    r["ops.int8_matmul"] = (ops.int8_matmul, {"a": np.array([[1, -2, 3]], dtype=np.int8),
                                              "b": np.array([[1], [2], [-3]], dtype=np.int8)},
                            {"a": "codes", "b": "codes", "overflow": "str"})
    r["ops.cast"] = (ops.cast, {"x": X, "out": "bf16"},
                     {"x": "array", "out": "str", "in_fmt": "optstr", "rounding": "str", "overflow": "str",
                      "subnormals": "str", "seed": "int"})
    r["ops.quantize"] = (ops.quantize, {"x": X, "fmt": "int8", "scale": 0.5, "zero_point": 1},
                         {"x": "array", "fmt": "str", "scale": "array", "zero_point": "codes", "axis": "int",
                          "block": "int", "in_fmt": "optstr", "rounding": "str", "range": "str", "seed": "int"})
    r["ops.dequantize"] = (ops.dequantize, {"codes": CODES, "fmt": "int8", "scale": 0.5, "zero_point": 1},
                           {"codes": "codes", "fmt": "str", "scale": "array", "zero_point": "codes", "axis": "int",
                            "block": "int", "out": "str"})
    # Every other registry row (an op added to the C++ registry with no Python of its own) is
    # fuzzed from its row: inputs by role, parameters by type, the format keywords.
    kind_of = {"integer": "int", "real": "real", "boolean": "bool", "text": "str", "axes": "optint"}
    for spec in ops.specs():
        if f"ops.{spec.name}" in r:
            continue
        good = {i.name: (np.array([[1, -2, 3]], dtype=np.int8) if i.role == "codes" else X)
                for i in spec.inputs if i.required}
        kinds = {i.name: ("codes" if i.role == "codes" else "array") for i in spec.inputs}
        kinds.update({p.name: ("opt" if p.default is None else "") + kind_of[p.type] for p in spec.params})
        if spec.format_keywords:
            kinds.update({"in_fmt": "optstr", "out": "optstr", "rounding": "str"})
            if spec.catalogue is not None:  # X's values are values of every catalogue format
                good["in_fmt"] = spec.catalogue.formats[0]
        r[f"ops.{spec.name}"] = (getattr(ops, spec.name), good, kinds)
    r["ops.generate"] = (ops.generate, {"generator": "normal", "shape": (2, 3)},
                         {"generator": "str", "shape": "ints", "fmt": "str", "seed": "int", "scale": "real"})
    r["ops.generators"] = (ops.generators, {}, {})
    r["ops.spec"] = (ops.spec, {"name": "rmsnorm"}, {"name": "str"})
    r["ops.specs"] = (ops.specs, {}, {})
    r["Op.exact"] = (lambda: _op().exact(), {}, {})
    r["Op.reference"] = (lambda: _op().reference(), {}, {})
    for method in ("emulation", "bound", "tolerance"):
        r[f"Op.{method}"] = ((lambda m: lambda platform, kind="deterministic", lam=6.0:
                              getattr(_op(), m)(platform, kind=kind, lam=lam))(method),
                             {"platform": "nvidia.h100"}, {"platform": "str", "kind": "str", "lam": "real"})
    r["Op.emulate"] = (lambda platform: _op().emulate(platform), {"platform": "nvidia.h100"}, {"platform": "str"})
    r["Op.variants"] = (lambda platform: _op().variants(platform), {"platform": "nvidia.h100"}, {"platform": "str"})
    r["Op.cross_bound"] = (lambda platform_a, platform_b, kind="deterministic", lam=6.0:
                           _op().cross_bound(platform_a, platform_b, kind, lam),
                           {"platform_a": "nvidia.h100", "platform_b": "nvidia.a100"},
                           {"platform_a": "str", "platform_b": "str", "kind": "str", "lam": "real"})
    return r


# Public names that take no arguments of their own or are result types (built by numeq, not by
# callers); every other public callable needs a row.
NOT_ROWS = {
    "fit": "deprecated name of numeq.fit_platform (one release; it calls fit_platform, which has a row)",
    "FitResult": "result type of numeq.fit_platform",
    "Probes": "result type of numeq.probes",
    "RevealResult": "result type of numeq.reveal_order",
    "Verdict": "result type of numeq.compare",
    "PortVerdict": "result type of numeq.compare_port",
    "ops.Op": "built by the numeq.ops constructors (its methods have rows)",
    "ops.Tolerance": "result type of Op.tolerance",
    "ops.Emulation": "result type of Op.emulation",
    "ops.OpSpec": "result type of numeq.ops.spec (a registry row)",
    "Tolerance": "result type of numeq.tolerance and Op.tolerance",
}


def _public_callables() -> list[str]:
    names = []
    for prefix, module in (("", numeq), ("reference.", numeq.reference), ("ops.", numeq.ops)):
        for n in module.__all__:
            obj = getattr(module, n)
            if callable(obj) and not isinstance(obj, type(numeq)):
                names.append(prefix + n)
    return names


# ---------------------------------------------------------------------------------------------
# Bad values per kind. Each: (label, value or a function of the base value, must_raise).
# ---------------------------------------------------------------------------------------------
def _neg_stride(a: np.ndarray) -> np.ndarray:
    return np.asarray(a)[..., ::-1] if np.ndim(a) else a


def _non_contiguous(a: np.ndarray) -> np.ndarray:
    a = np.asarray(a)
    if a.ndim == 0:
        return a
    wide = np.repeat(a, 2, axis=-1)
    return wide[..., ::2]


def _masked(a):
    return np.ma.masked_array(a, mask=np.zeros(np.shape(a), dtype=bool))


def _structured(a):
    a = np.asarray(a)
    out = np.zeros(a.shape, dtype=[("v", a.dtype)])
    out["v"] = a
    return out


ARRAY_BAD: list[tuple[str, Callable[[Any], Any], bool]] = [
    ("nan", lambda a: np.full(np.shape(a), np.nan, dtype=np.asarray(a).dtype if np.asarray(a).dtype.kind == "f"
                              else np.float64), False),
    ("inf", lambda a: np.where(np.arange(np.size(a)).reshape(np.shape(a)) % 2, np.inf, -np.inf), False),
    ("empty", lambda a: np.zeros(np.shape(a)[:-1] + (0,)) if np.ndim(a) else np.zeros(0), False),
    ("0-d", lambda a: np.float64(1.0), False),
    ("huge", lambda a: np.full(np.shape(a), 1.7e308), False),
    ("negative_stride", _neg_stride, False),
    ("non_contiguous", _non_contiguous, False),
    ("strings", lambda a: np.full(np.shape(a), "1.0"), True),
    ("objects", lambda a: np.array([1.0, None, 2.0], dtype=object), True),
    ("ragged", lambda a: [[1.0, 2.0], [3.0]], True),
    ("complex", lambda a: np.asarray(a, dtype=np.complex128) + 1j, True),
    ("masked", _masked, True),
    ("datetime", lambda a: np.array(["2024-01-01"], dtype="datetime64[D]"), True),
    ("structured", _structured, True),
    ("wrong_shape", lambda a: np.ones((3, 5, 7)), False),
    ("stacked", lambda a: np.stack([np.asarray(a, dtype=np.float64)] * 2), False),
    ("int_beyond_2_53", lambda a: np.full(np.shape(a), 2**63 + 1, dtype=np.uint64), False),
    ("none", lambda a: None, False),
]
CODES_BAD: list[tuple[str, Callable[[Any], Any], bool]] = [
    (label, f, must) for label, f, must in ARRAY_BAD if label not in ("nan", "inf", "huge")
] + [
    ("nan", lambda a: np.full(np.shape(a), np.nan), True),
    ("floats", lambda a: np.asarray(a, dtype=np.float64) + 0.5, True),
    ("uint64_max", lambda a: np.full(np.shape(a), 2**64 - 1, dtype=np.uint64), False),
    ("int64_min", lambda a: np.full(np.shape(a), -(2**63), dtype=np.int64), False),
]
INT_BAD: list[tuple[str, Any, bool]] = [
    ("2**63", 2**63, False),
    ("2**64", 2**64, False),
    ("-2**63-1", -(2**63) - 1, False),
    ("2**31", 2**31, False),
    ("2**40", 2**40, False),
    ("-1", -1, False),
    ("2.5", 2.5, True),
    ("0.5", 0.5, True),
    ("float_integral", 2.0, True),
    ("True", True, True),
    ("str", "1", True),
    ("complex", 1j, True),
    ("array", np.array([1]), True),
    ("none", None, False),
    ("numpy_int", "__numpy_int__", False),
]
STR_BAD: list[tuple[str, Any, bool]] = [
    ("unknown", "nope", True),
    ("nul", "__nul__", True),
    ("int", 5, True),
    ("bytes", b"fp32", True),
    ("empty", "", True),
    ("array", np.array([]), True),
    ("none", None, False),
]
BOOL_BAD: list[tuple[str, Any, bool]] = [
    ("str", "yes", True),
    ("int", 2, True),
    ("float", 0.5, True),
    ("none", None, True),
    ("array", np.array([True]), True),
    ("numpy_bool", np.True_, False),
]
REAL_BAD: list[tuple[str, Any, bool]] = [
    ("str", "1", True),
    ("complex", 1j, True),
    ("bool", True, True),
    ("nan", math.nan, False),
    ("inf", math.inf, False),
    ("-inf", -math.inf, False),
    ("negative", -1.0, False),
    ("int_beyond_float", 10**400, False),
    ("array", np.ones(3), True),
    ("none", None, False),
]
INTS_BAD: list[tuple[str, Any, bool]] = [
    ("2**64", (2**64,), False),
    ("huge", (10**10, 10**10), False),
    ("2**40", (2**40,), False),
    ("zero", (0,), False),
    ("negative", (-1,), True),
    ("float", (2.5,), True),
    ("bool", (True,), True),
    ("str", "4", True),
    ("empty", (), False),
    ("none", None, False),
]
KINDS = {"array": ARRAY_BAD, "codes": CODES_BAD, "int": INT_BAD, "optint": INT_BAD, "str": STR_BAD,
         "optstr": STR_BAD, "bool": BOOL_BAD, "real": REAL_BAD, "optreal": REAL_BAD, "ints": INTS_BAD}

# Parameters whose None means "not given" (a valid value).
OPTIONAL = {"optint", "optstr", "optreal"}
ARRAY_OPTIONAL = {"c", "mask", "gamma", "beta"}


def _edges() -> dict[str, tuple[Callable[[], Any], Callable[[], Any]]]:
    """Valid inputs at the edges (no terms, signed zeros), each with numpy's answer: the result
    must equal it, or the call must raise a documented error naming a parameter."""
    k0a, k0b = A[:, :0], B[:0, :]
    zeros = np.zeros((2, 2))
    e32 = np.zeros((2, 0), dtype=np.float32)
    nz32 = np.array([-0.0, -0.0], dtype=np.float32)
    return {
        "matmul K=0": (lambda: numeq.matmul(k0a, k0b, platform="nvidia.h100", in_fmt="bf16"), lambda: zeros),
        "matmul K=0 numpy": (lambda: numeq.matmul(k0a.astype(np.float32), k0b.astype(np.float32), platform="numpy",
                                                  in_fmt="fp32"), lambda: zeros),
        "reference.matmul K=0": (lambda: numeq.reference.matmul(k0a, k0b), lambda: zeros),
        "ops.matmul K=0": (lambda: numeq.ops.matmul(k0a, k0b, in_fmt="bf16").reference(), lambda: zeros),
        "reference.dot K=0": (lambda: numeq.reference.dot(np.zeros(0), np.zeros(0)), lambda: np.float64(0.0)),
        "reference.sum empty": (lambda: numeq.reference.sum(e32), lambda: np.sum(e32, axis=-1)),
        "sum empty numpy": (lambda: numeq.sum(e32, platform="numpy"), lambda: np.sum(e32, axis=-1)),
        # IEEE 754-2019 s6.3: an exact sum of zeros of one sign has that sign (numpy's sum starts
        # from +0, so it is the oracle for the numpy platform only).
        "reference.sum -0": (lambda: numeq.reference.sum(nz32), lambda: np.float64(-0.0)),
        "sum -0 numpy": (lambda: numeq.sum(nz32, platform="numpy"), lambda: np.sum(nz32)),
        "ops.sum -0": (lambda: numeq.ops.sum(nz32).reference(), lambda: np.float64(-0.0)),
    }


def _cases() -> list[tuple[str, str, str]]:
    out = []
    for row, (_, _, params) in _rows().items():
        out.append((row, "", "base"))
        for param, kind in params.items():
            for label, _, _ in KINDS[kind]:
                out.append((row, param, label))
    out.extend(("edge", name, "oracle") for name in _edges())
    return out


# Rows another change fixes: strict xfails, they pass once it lands (none pending now).
XFAIL: dict[tuple[str, str, str], str] = {}


# ---------------------------------------------------------------------------------------------
# One case
# ---------------------------------------------------------------------------------------------
def _resolve(row: str, kwargs: dict) -> dict:
    kw = dict(kwargs)
    for k, v in kw.items():
        if isinstance(v, str) and v == "__profile__":
            kw[k] = _profile()
        elif isinstance(v, str) and v == "__plan__":
            kw[k] = numeq.plan("nvidia.h100").to_json()
        elif isinstance(v, str) and v == "__op__":
            kw[k] = _op()
        elif isinstance(v, str) and v == "__reference__":
            kw[k] = _op().reference()
    return kw


def _digest(result: Any) -> list:
    """The comparable content of a result: arrays, numbers, strings (nested)."""
    if isinstance(result, np.ndarray) or isinstance(result, (float, int, np.generic)):
        return [np.asarray(result, dtype=np.float64) if np.asarray(result).dtype.kind in "fiub"
                else np.asarray(result).astype(np.float64)]
    if isinstance(result, (tuple, list)):
        return [d for item in result for d in _digest(item)]
    if isinstance(result, dict):
        return [d for k in sorted(result, key=str) for d in ([str(k)] + _digest(result[k]))]
    if isinstance(result, str) or result is None:
        return [result]
    if isinstance(result, numeq.Plan):
        return [result.to_json()]
    if isinstance(result, numeq.ops.Op):
        return _digest(result.reference())
    if isinstance(result, numeq.Verdict):
        return [result.passed, result.elements, result.bit_exact, result.violations]
    if hasattr(result, "__dataclass_fields__"):
        return [d for f in result.__dataclass_fields__ for d in _digest(getattr(result, f))]
    if isinstance(result, numeq.FitResult):
        return _digest(result.matches)
    if isinstance(result, numeq.Probes):
        return _digest(result.expected)
    if isinstance(result, numeq.RevealResult):
        return [result.tree]
    return [repr(type(result))]


def _same(x: list, y: list) -> bool:
    if len(x) != len(y):
        return False
    for a, b in zip(x, y):
        if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
            a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
            if a.shape != b.shape:
                return False
            same = (a == b) & (np.signbit(a) == np.signbit(b)) | (np.isnan(a) & np.isnan(b))
            if not np.all(same):
                return False
        elif a != b:
            return False
    return True


_PREFIX = re.compile(r"^([^:]*):")


def _names(message: str, param: str) -> bool:
    """The message starts with the parameter's name: "param:", "a, b:", "param[3]:", or a JSON
    path into it ("plan.reduction.size:" for plan / text / source)."""
    m = _PREFIX.match(message)
    if not m:
        return False
    head = m.group(1)
    words = re.findall(r"[A-Za-z_][A-Za-z_0-9]*", head)
    aliases = {param, *{"text": ["plan", "profile", "JSON"], "source": ["profile", "JSON", "plan"]}.get(param, [])}
    return bool(aliases & set(words[:3]))


def _value_for(row: str, param: str, kind: str, label: str, base_kwargs: dict) -> tuple[Any, bool, str]:
    """(bad value, must_raise, how a result is checked: "" none, "same" equals the base call's
    on a C-ordered copy)."""
    table = KINDS[kind]
    entry = next(e for e in table if e[0] == label)
    _, make, must = entry
    base = base_kwargs.get(param)
    if kind in ("array", "codes"):
        if base is None:
            base = X if kind == "array" else CODES
        value = make(base)
        check = "copy" if label in ("negative_stride", "non_contiguous") and np.ndim(value) else ""
        if label == "none" and param not in ARRAY_OPTIONAL:
            must = True
        return value, must, check
    if label == "numpy_int":
        if isinstance(base, int):
            return np.int64(base), False, "same"
        return np.int64(1), False, ""
    if label == "nul":
        text = base if isinstance(base, str) and not base.startswith("__") else "fp32"
        return text + "\x00junk", True, ""
    if label == "none" and kind not in OPTIONAL and kind != "bool":
        must = True
    return make, must, ""


def run_case(row: str, param: str, label: str) -> str:
    """'ok' or why not."""
    if row == "edge":
        call, oracle = _edges()[param]
        outcome = _attempt(lambda: call(), {}, row)
        if isinstance(outcome, tuple):
            return "ok" if _PREFIX.match(outcome[1]) else f"{outcome[0]} naming no parameter: {outcome[1][:300]}"
        if isinstance(outcome, str):
            return outcome
        return "ok" if _same(outcome, [np.asarray(oracle(), dtype=np.float64)]) else (
            f"result {outcome} differs from numpy's {oracle()!r}")
    fn, base_kwargs, params = _rows()[row]
    kwargs = _resolve(row, base_kwargs)
    if label == "base":
        try:
            fn(**kwargs)
        except Exception as e:  # noqa: BLE001 - a base call must simply work
            return f"base call raised {type(e).__name__}: {e}"
        return "ok"
    kind = params[param]
    value, must_raise, check = _value_for(row, param, kind, label, kwargs)
    call = dict(kwargs)
    call[param] = value
    # A shape that conflicts with another argument may be reported under either's name.
    named = set(params) | {param} if label in ("empty", "0-d", "wrong_shape", "stacked") else {param}
    outcome = _attempt(fn, call, row)
    if isinstance(outcome, str):
        return outcome
    if isinstance(outcome, tuple):  # a documented error
        if not any(_names(outcome[1], n) for n in named):
            return f"{outcome[0]} not naming {param!r}: {outcome[1][:300]}"
        return "ok"
    if must_raise:
        return f"accepted {label} for {param}"
    if check == "copy":
        call[param] = np.array(value, order="C")  # numpy's C-ordered copy of the same values
        if not _same_outcome(outcome, _attempt(fn, call, row)):
            return f"{label} view of {param} gives a different result from a C-ordered copy"
    if check == "same":
        call[param] = int(value)
        if not _same_outcome(outcome, _attempt(fn, call, row)):
            return f"numpy integer {param} gives a different result from the same Python int"
    return "ok"


def _attempt(fn: Callable[..., Any], call: dict, row: str) -> Any:
    """The digest of fn(**call) (a list), a documented error as (type name, message), or a str
    saying what else happened. Lazy results (an Op's reference) are computed here too."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # a numpy warning is not a documented error either
            return _digest(fn(**call))
    except ERRORS as e:
        return (type(e).__name__, str(e))
    except Exception as e:  # noqa: BLE001 - every other type is the failure this matrix looks for
        return f"undocumented {type(e).__name__}: {str(e)[:300]}"
    finally:
        if row == "set_num_threads":
            numeq.set_num_threads(0)


def _same_outcome(x: Any, y: Any) -> bool:
    if isinstance(x, list) and isinstance(y, list):
        return _same(x, y)
    return type(x) is type(y) and x == y
