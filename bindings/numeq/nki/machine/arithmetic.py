"""The arithmetic of NeuronCore instructions, each through numeq's one implementation of it:

- casts into a destination dtype: numeq's one rounding kernel (``numeq.cast`` / ``numeq.round``),
  nearest even by default, stochastic as the target's ``output_rounding`` assumption
  (data-types.rst, rounding-modes.rst: RNE, overflow to Inf; FACTS.md s3);
- Vector, Scalar and GpSimd arithmetic: fp32 (nki.isa docs: "performs the computation in fp32,
  casts the output"); + - * / sqrt and comparisons are IEEE operations, which numpy's float32
  ufuncs compute correctly rounded, the same values the rounding kernel gives;
- free-axis sums: the Trainium platform's sum plan (``numeq.sum``; its ``vector_reduce_order``);
- activation functions: the platform's function model, fp32 correctly rounded (``numeq.reference``,
  certified by MPFR) within the ``scalar_activation_ulps`` budget the platform states;
- one nc_matmul: the Trainium platform's PE-array plan for one tile of K (``numeq.matmul``), then
  PSUM's fp32 accumulation (exact sum rounded once with ``psum_rounding``).

``Run.exact()`` runs the same kernel with none of the hardware's roundings (``EXACT``): tiles hold
binary64 values, casts keep them, sums and dot products are the exact sum rounded once to binary64
(numeq's exact accumulator), functions within an ulp or two of binary64 (numpy's exp, log, tanh ...;
MPFR's correct rounding for the rest), and ALU operations are binary64 operations
(``compute_dtype``). Every operation is then within a few units of binary64's roundoff (2^-53) of
its exact value, 2^28 times finer than fp32's: the kernel's own math, not its platform's.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

import numpy as np

from ... import _casts, _core
import importlib

_platforms = importlib.import_module("numeq.machines")
from ... import reference as _reference
from .dtypes import DType

__all__ = ["accumulate_fp32", "cast_into", "fp32_values", "matmul_tile", "reduce_fp32", "function_fp32",
           "language_function_fp32", "sin_outside_range", "EXACT", "compute_dtype", "exact_mode"]

# The kernel's exact dataflow is being computed (``exact_mode``; ``modes`` sets it around a run from
# its ``Context.exact``), and the dtype engines compute in: fp32, or binary64 in that mode.
EXACT = False
compute_dtype: Any = np.float32
# A diagnostic rerun's watch (``watch``): "cancellation": kernel line -> the largest factor by which
# an add or subtract there came out smaller than its operands (relative errors grow by it);
# "overflow": kernel line -> how many Inf values instructions there wrote, in the order first seen.
WATCH: dict | None = None


def watch(lines: dict | None) -> dict | None:
    """Watch cancellation and overflow into ``lines`` (None: stop); returns the watch it replaces."""
    global WATCH
    was, WATCH = WATCH, lines
    return was


@contextlib.contextmanager
def modes(exact: bool, watched: dict | None) -> Iterator[None]:
    """The exact dataflow and the watch on for a run (``_run._execute``), as they were after."""
    was_exact, was_watch = exact_mode(exact), watch(watched)
    try:
        yield
    finally:
        exact_mode(was_exact)
        watch(was_watch)


def exact_mode(on: bool) -> bool:
    """Switch the exact dataflow on or off; returns the mode it replaces."""
    global EXACT, compute_dtype
    was, EXACT = EXACT, bool(on)
    compute_dtype = np.float64 if EXACT else np.float32
    return was


def fp32_values(data: np.ndarray, dtype: DType) -> np.ndarray:
    """The values of ``data`` (stored as ``dtype``) widened to fp32: exact for every float dtype
    NKI has; integers convert to nearest (the engines compute in fp32, nki.isa docs)."""
    if data.dtype == np.float32:
        return data
    if EXACT and dtype.kind == "float":
        return data.astype(np.float64, copy=False)  # binary64 values (or a kernel input's: exact)
    if dtype.format == "bf16":  # the high half of the fp32 pattern: a shift, not ml_dtypes' per-element cast
        return (data.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
    return data.astype(np.float32)


def cast_into(values: np.ndarray, dtype: DType, rounding: str = "nearest_even", seed: int = 0) -> np.ndarray:
    """``values`` (float32 or float64) cast into ``dtype``'s storage: floats through numeq's
    rounding kernel (overflow to Inf, FACTS.md s3); integers rounded to nearest even and saturated,
    as AWS documents its 2.32 simulator matching the hardware (nki_simulator.rst); a NaN gives 0,
    which nothing documents."""
    if EXACT and dtype.kind == "float":
        return np.asarray(values, dtype=np.float64)  # the exact dataflow keeps every value
    if dtype.kind == "int":
        info = np.iinfo(dtype.storage)
        v = np.nan_to_num(np.rint(np.asarray(values, dtype=np.float64)), nan=0.0, posinf=info.max, neginf=info.min)
        return np.clip(v, info.min, info.max).astype(dtype.storage)
    if dtype.format == "fp32" and values.dtype == np.float32 and rounding == "nearest_even":
        return values
    keywords = {"rounding": rounding}
    if rounding == "stochastic":
        keywords["seed"] = seed
    if dtype.format == "tf32":
        return np.asarray(_casts.round(values, "tf32", **keywords), dtype=np.float64).astype(np.float32)
    return np.asarray(_casts.cast(values, dtype.format, **keywords))


def sum_rounded(terms: list, rounding: str = "nearest_even") -> np.ndarray:
    """The exact sum of ``terms`` (binary64 arrays or scalars, broadcast together, each an exact
    value) rounded once to fp32: numeq's exact reference sum and its rounding kernel."""
    shape = np.broadcast_shapes(*(np.shape(t) for t in terms))
    stacked = np.stack([np.broadcast_to(np.asarray(t, dtype=np.float64), shape) for t in terms])
    if EXACT:
        return np.asarray(_reference.sum(stacked, axis=0, in_fmt="fp64", out="fp64"), dtype=np.float64)
    return np.asarray(_reference.sum(stacked, axis=0, out="fp32", rounding=rounding), dtype=np.float64).astype(np.float32)


def split_times(t: np.ndarray, b: Any) -> list:
    """``t * b`` as two binary64 terms whose sum is exact, for ``t`` with at most 48 significant
    bits (a product of two fp32 values) and ``b`` an fp32 value: Veltkamp's split of t into 26 + 27
    bits, each half times b within binary64's 53 (Dekker, Numer. Math. 18, 1971)."""
    t = np.asarray(t, dtype=np.float64)
    with np.errstate(all="ignore"):
        c = t * 134217729.0  # 2^27 + 1
        hi = np.where(np.isfinite(c), c - (c - t), t)
    return [hi * b, (t - hi) * b]


def accumulate_fp32(old: np.ndarray, new: np.ndarray, rounding: str) -> np.ndarray:
    """PSUM's ``old + new`` in fp32: the exact sum rounded once. Nearest even is IEEE binary32
    addition, which numpy's float32 add computes; other roundings go through ``sum_rounded``."""
    if EXACT:
        return np.add(old, new, dtype=np.float64)  # one binary64 addition: the exact sum rounded once
    if rounding == "nearest_even":
        return np.add(old, new, dtype=np.float32)
    return sum_rounded([old, new], rounding)


def matmul_tile(stationary: np.ndarray | list, moving: np.ndarray | list, in_fmt: str, platform: str) -> np.ndarray:
    """stationary[K, M]^T @ moving[K, N] as the platform's PE array computes it: fp32 [M, N].
    Either operand may be a list of row blocks along K (a PSUM chain's tiles, in order). The
    blocks are read in place where the plan is fp32 chains (every Trainium PE plan): a chain is
    one call, and concatenating, transposing and widening its operands cost as much as computing
    it."""
    blocks_s = stationary if isinstance(stationary, list) else [stationary]
    blocks_m = moving if isinstance(moving, list) else [moving]
    if EXACT:  # the exact dot products rounded once to binary64
        a = np.swapaxes(np.concatenate([np.asarray(b, dtype=np.float64) for b in blocks_s], axis=0), 0, 1)
        b = np.concatenate([np.asarray(b, dtype=np.float64) for b in blocks_m], axis=0)
        return np.asarray(_reference.matmul(np.ascontiguousarray(a), np.ascontiguousarray(b), in_fmt="fp64",
                                            out="fp64"), dtype=np.float64)
    r = _core.core_matmul_row_blocks(blocks_s, blocks_m, platform, in_fmt, "fp32")
    if r is None:
        a = np.ascontiguousarray(np.swapaxes(np.concatenate(blocks_s, axis=0), 0, 1))
        b = np.ascontiguousarray(np.concatenate(blocks_m, axis=0))
        r = _platforms.matmul(a, b, platform=platform, in_fmt=in_fmt, out="fp32")
    return np.asarray(r, dtype=np.float64).astype(np.float32)


def reduce_fp32(x: np.ndarray, op: str, platform: str) -> np.ndarray:
    """Reduce fp32 ``x`` along its last axis with ALU ``op``: sums by the platform's sum plan
    (``vector_reduce_order``), max / min exactly (order-free), products in sequence."""
    if x.shape[-1] == 0:
        raise ValueError("reduce: empty free axis")
    if op == "add" and EXACT:
        flat = np.ascontiguousarray(x.reshape(-1, x.shape[-1]), dtype=np.float64)
        return np.asarray(_reference.sum(flat, axis=-1, in_fmt="fp64", out="fp64"), dtype=np.float64).reshape(x.shape[:-1])
    if op == "add":
        flat = np.ascontiguousarray(x.reshape(-1, x.shape[-1]))
        s = _platforms.sum(flat, axis=-1, platform=platform, fmt="fp32")
        return np.asarray(s, dtype=np.float64).astype(np.float32).reshape(x.shape[:-1])
    if op == "maximum":
        return np.max(x, axis=-1)
    if op == "minimum":
        return np.min(x, axis=-1)
    if op == "multiply":
        acc = x[..., 0].copy()
        for i in range(1, x.shape[-1]):
            acc = np.multiply(acc, x[..., i], dtype=compute_dtype)
        return acc
    if op in ("abs_max", "absmax"):
        return np.max(np.abs(x), axis=-1)
    raise ValueError(f"op: tensor_reduce takes add, maximum, minimum, multiply or abs_max, not {op!r}")


# Activation functions by NKI name -> numeq's certified reference function (fp32 correctly
# rounded: the platform's function model, FACTS.md s3 "correctly rounded fp32 plus an error budget").
# The names are the NKI API reference's activation table ("Accepted op by Scalar Engine",
# nki.api.shared); gelu_apprx_sigmoid is x * sigmoid(1.702 x), the form of nki-library's torch
# references (moe_cte_torch_utils.py: ``x * torch.sigmoid(1.702 * x)``).
_CERTIFIED = {"exp": "exp", "log": "log", "tanh": "tanh", "sigmoid": "sigmoid", "silu": "silu",
              "gelu": "gelu", "gelu_apprx_tanh": "gelu_tanh", "rsqrt": "rsqrt", "sqrt": "sqrt",
              "reciprocal": "reciprocal", "softplus": "softplus", "exp2": "exp2",
              "erf": "erf", "erf_dx": "erf_dx", "sin": "sin", "arctan": "atan", "mish": "mish",
              "gelu_apprx_sigmoid": "gelu_sigmoid", "gelu_dx": "gelu_dx", "silu_dx": "silu_dx",
              "gelu_apprx_sigmoid_dx": "gelu_sigmoid_dx"}

# nl.cos / nl.tan are nki.language tile functions ("Similar to numpy.cos"), not in the activation
# table: their references, for the tile functions (which, as nl.sin, reduce the argument first).
_LANGUAGE_ONLY = {"cos": "cos", "tan": "tan"}

# The documented valid range of sin as the activation function, read in fp32: [-PI, PI] with PI
# the fp32 nearest pi (3.1415927 > pi), so that every fp32 value the docs' range holds is inside.
SIN_RANGE = float(np.float32(np.pi))


def _exact_fp32(name: str, x: np.ndarray) -> np.ndarray | None:
    """Functions that are one IEEE operation (or none) in fp32."""
    if name in ("copy", "identity"):
        return x
    if name == "relu":
        return np.maximum(x, x.dtype.type(0))
    if name == "square":
        return np.multiply(x, x, dtype=x.dtype)
    if name == "abs":
        return np.abs(x)
    if name == "negative":
        return np.negative(x)
    if name == "sign":
        return np.sign(x).astype(x.dtype)
    return None


def function_names() -> tuple[str, ...]:
    return tuple(_CERTIFIED) + ("copy", "identity", "relu", "square", "abs", "negative", "sign")


def sigmoid64(x: np.ndarray) -> np.ndarray:
    """1 / (1 + exp(-x)) in binary64: a few ulps everywhere (0.5 (1 + tanh(x / 2)) cancels for x
    far below 0, where sigmoid is tiny)."""
    return 1.0 / (1.0 + np.exp(-x))


# The exact dataflow's functions that binary64 library arithmetic computes within a few ulps of
# binary64 (numpy's ufuncs, the C library's exp, log, tanh ...; the others a few operations on
# them, none cancelling): as good as correct rounding against any NeuronCore format (2^-50 against
# fp32's 2^-24), and a thousand times faster than MPFR, which attention kernels' millions of exps
# need. tests/python/test_nki_exact.py holds each to MPFR's correctly rounded values.
_BINARY64 = {
    "exp": np.exp, "log": np.log, "tanh": np.tanh, "sqrt": np.sqrt, "sin": np.sin, "cos": np.cos,
    "tan": np.tan, "atan": np.arctan, "exp2": np.exp2, "reciprocal": lambda x: 1.0 / x,
    "rsqrt": lambda x: 1.0 / np.sqrt(x), "sigmoid": sigmoid64, "silu": lambda x: x * sigmoid64(x),
    "softplus": lambda x: np.logaddexp(0.0, x),
}


def _certified(reference: str, x: np.ndarray) -> np.ndarray:
    if EXACT:  # binary64 library arithmetic where it is within an ulp or two, else MPFR's correct rounding
        x = np.asarray(x, dtype=np.float64)
        fast = _BINARY64.get(reference)
        if fast is not None:
            with np.errstate(all="ignore"):
                return np.asarray(fast(x), dtype=np.float64).reshape(x.shape)
        if reference == "gelu_tanh":
            y = _reference.gelu(x, approximate="tanh", in_fmt="fp64", out="fp64")
        else:
            y = getattr(_reference, reference)(x, in_fmt="fp64", out="fp64")
        return np.asarray(y, dtype=np.float64).reshape(x.shape)
    if reference == "gelu_tanh":
        y = _reference.gelu(x, approximate="tanh", in_fmt="fp32", out="fp32")
    else:
        y = getattr(_reference, reference)(x, in_fmt="fp32", out="fp32")
    return np.asarray(y, dtype=np.float64).astype(np.float32).reshape(x.shape)


def sin_outside_range(x: np.ndarray) -> np.ndarray:
    """The cubic the Scalar engine's sin extrapolates beyond [-PI, PI] (assumption
    activation_sin_outside = documented_cubic): sin's Taylor cubic at +-pi, -u + u^3/6 with
    u = x - pi (x > PI) or x + pi (x < -PI), evaluated in binary64 and rounded once to fp32. The
    docs fix one value, "sin(9.0) returns ~27.65" (nki.api.shared, note under the activation table);
    this cubic gives 27.652 there, and matches sin to third order where the range ends."""
    xd = x.astype(np.float64)
    u = np.where(xd > 0, xd - np.pi, xd + np.pi)
    return (-u + u * u * u / 6).astype(compute_dtype)


def _sin_outside_assumption() -> str:
    from .context import active, current
    if active():
        return current().assumptions.get("activation_sin_outside", "documented_cubic")
    return "documented_cubic"


def function_fp32(name: str, x: np.ndarray, sin_outside: str | None = None) -> np.ndarray:
    """f(x) for fp32 ``x``: exact where f is one IEEE operation, else correctly rounded to fp32.
    ``sin`` beyond its documented range [-PI, PI]: assumption activation_sin_outside
    (``sin_outside``; default: the running kernel's value, else documented_cubic)."""
    exact = _exact_fp32(name, x)
    if exact is not None:
        return exact
    if name not in _CERTIFIED:
        raise KeyError(name)
    y = _certified(_CERTIFIED[name], x)
    if name == "sin":
        outside = np.abs(x) > SIN_RANGE
        if outside.any() and (sin_outside or _sin_outside_assumption()) == "documented_cubic":
            y = np.where(outside, sin_outside_range(x), y).astype(compute_dtype)
    return y


def language_function_fp32(name: str, x: np.ndarray) -> np.ndarray:
    """The nki.language tile functions' values: sin, cos, tan and arctan of any argument (nl.sin
    "applies additional instructions to perform range reduction before the activation, so it stays
    accurate over the full input domain"), correctly rounded to fp32; ceil, floor, trunc exactly;
    every other name as the activation function."""
    refs = {"sin": "sin", "arctan": "atan", **_LANGUAGE_ONLY}
    if name in refs:
        return _certified(refs[name], x)
    if name in ("ceil", "floor", "trunc"):
        return getattr(np, name)(x).astype(compute_dtype)
    return function_fp32(name, x)


def exact_bn_stats(x: np.ndarray) -> np.ndarray:
    """bn_stats' (count, mean, variance * count) of each half of each row [P, n] -> [P, 6] as the
    kernel's exact dataflow computes them (``EXACT``): the mean from the exact sum, M2 the exact sum
    of squared deviations from it, each rounded once to binary64 (the mean's rounding moves M2 by
    n * (mean error)^2 only: M2 is smallest at the true mean)."""
    x = np.asarray(x, dtype=np.float64)
    out = np.zeros((x.shape[0], 6), dtype=np.float64)
    for half in (0, 1):
        part = np.ascontiguousarray(x[:, half::2])
        n = part.shape[1]
        if n == 0:
            continue
        mean = np.asarray(_reference.sum(part, axis=-1, in_fmt="fp64", out="fp64"), dtype=np.float64) / n
        deviation = part - mean[:, None]
        m2 = np.asarray(_reference.sum(np.ascontiguousarray(deviation * deviation), axis=-1, in_fmt="fp64",
                                       out="fp64"), dtype=np.float64)
        out[:, 3 * half:3 * half + 3] = np.stack([np.full(len(mean), float(n)), mean, m2], axis=1)
    return out


def exact_bn_aggr(stats: np.ndarray) -> np.ndarray:
    """bn_aggr's (mean, population variance) of the (count, mean, M2) triples of each row, as the
    exact dataflow computes them: mean = sum n_i mean_i / n, variance = (sum M2_i + sum n_i (mean_i -
    mean)^2) / n, whatever order the hardware merges in (``bn_aggr_merge`` is a rounding order)."""
    t = np.asarray(stats, dtype=np.float64).reshape(stats.shape[0], -1, 3)
    n, means, m2 = t[..., 0], t[..., 1], t[..., 2]
    total = n.sum(axis=1)

    def exact_sum(terms: np.ndarray) -> np.ndarray:
        return np.asarray(_reference.sum(np.ascontiguousarray(terms), axis=-1, in_fmt="fp64", out="fp64"),
                          dtype=np.float64)

    with np.errstate(all="ignore"):
        mean = exact_sum(n * means) / total
        spread = means - mean[:, None]
        variance = (exact_sum(m2) + exact_sum(n * spread * spread)) / total
    return np.stack([mean, variance], axis=1)
