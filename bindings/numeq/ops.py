"""The operation catalogue: an operation on given inputs, from which come the exact reference,
any platform's bit-exact emulation, and the per-element bound derived from the same machine model.

    op = numeq.ops.matmul(a, b, out="fp32")          # a, b: bf16 values (ml_dtypes or float arrays + in_fmt)
    op.reference()                                   # exact result, correctly rounded into out
    op.emulate("nvidia.h100")                        # the H100's result, bit for bit
    op.bound("nvidia.h100")                          # |emulated - exact| <= bound, per element
    op.tolerance("nvidia.h100")                      # the bound as ulps and as an (rtol, atol) pair
    numeq.compare(device_output, op, "trainium.trn1")  # a Verdict

Platforms are named as in ``numeq.platforms()``; Trainium assumptions select with
``"trainium.trn1[pe_order=pairwise]"``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from . import _core, _registry
from ._registry import OpSpec, spec, specs  # noqa: F401 (re-exported: the registry's rows)
from ._arrays import SIZE, UINT64, _array, _check_bool, _check_int, _check_real, _check_str, _renamed
from ._op import KINDS, Emulation, Op, Tolerance, _c64, _out  # noqa: F401 (KINDS, Emulation, Tolerance: re-exported)
from ._ops_quantized import cast, dequantize, int8_matmul, quantize, scaled_fp8_matmul  # noqa: F401 (re-exported)
from .machines import _axes, _layout
from .machines import _float64_values as _values  # the catalogue takes float64 values
from .reference import _attention_mask, _attention_scores_shape

__all__ = ["Emulation", "Op", "OpSpec", "Tolerance", "attention", "cast", "dequantize", "quantize", "function",
           "int8_matmul", "scaled_fp8_matmul", "generate", "generators", "layernorm", "log_softmax", "matmul", "max",
           "mean", "rmsnorm", "softmax", "spec", "specs", "sum"]


# The elementwise functions: the registry's rows of family "function".
_FUNCTIONS = tuple(s.name for s in specs() if s.family == "function")

# What the docstring of every catalogue op over x says of its format keywords ("{formats}" in it)
# and of ``compute`` ("{compute}"): one text for all of them.
_DOC_TEXTS = {
    "{formats}": ("``in_fmt``: the format of x's values (default: its dtype's); ``out``: the output format "
                  "(default: in_fmt); ``rounding``: how the reference rounds into ``out``, one of "
                  "``numeq.ROUNDINGS``."),
    "{compute}": "``compute``: the format the platform computes in.",
    "{functions}": ", ".join(f"``{name}``" for name in _FUNCTIONS),
}


def _documented(op: Any) -> Any:
    """A catalogue op with the shared texts of ``_DOC_TEXTS`` filled into its docstring (none under
    ``python -OO``)."""
    for key, text in _DOC_TEXTS.items():
        op.__doc__ = op.__doc__ and op.__doc__.replace(key, text)
    return op


def matmul(a: Any, b: Any, *, c: Any = None, in_fmt: str | None = None, out: str = "fp32",
           rounding: str = "nearest_even") -> Op:
    """a[..., M, K] @ b[..., K, N] (+ c: a bias of shape [N] or anything that broadcasts to the
    result). ``in_fmt``: the format of a's and b's values (default: their dtype's); ``out``: the
    output format, ``rounding``: how the reference rounds into it (one of ``numeq.ROUNDINGS``).

    ``c``: values of the result's format (fp32 by default).

    Example::

        >>> rng = np.random.default_rng(0)
        >>> a = numeq.round(rng.standard_normal((4, 64)), "bf16")
        >>> b = numeq.round(rng.standard_normal((64, 2)), "bf16")
        >>> op = numeq.ops.matmul(a, b, in_fmt="bf16", out="fp32")
        >>> op.signature, op.reference().shape
        ('a[4,64] bf16 @ b[64,2] bf16 -> fp32', (4, 2))
        >>> numeq.compare(op.emulate("nvidia.h100"), op, "nvidia.h100").tier
        'bit_exact'
    """
    if in_fmt is None:
        for x, name in ((a, "a"), (b, "b")):
            if _array(x, name).dtype.kind in "iu":
                raise TypeError(f"{name}: integer arrays: for an integer GEMM (int8 / uint8 codes, int32 accumulation) "
                                "use numeq.ops.int8_matmul; for integers as values of a floating format pass in_fmt")
    av, fa = _values(a, in_fmt, "a")
    bv, fb = _values(b, in_fmt, "b")
    if in_fmt is None and fa != fb:
        raise ValueError(f"in_fmt: a holds {fa} values and b {fb}; pass in_fmt (the format both are values of)")
    cv = None if c is None else _values(c, None, "c")[0]
    _check_str(rounding, "rounding")
    return _registry.build("matmul", {"a": av, "b": bv, "c": cv}, {}, fa, _out(out, "fp32"), rounding)


def _reduce(kind: str, x: Any, axis: Any, in_fmt: str | None, out: str | None, rounding: str, compute: str) -> Op:
    # numpy's order follows x's own layout (numeq.numpy_reduction): the row reads it (InputSpec.layout)
    return _registry.call(_registry.spec(kind), {"x": x, "axis": axis, "in_fmt": in_fmt, "out": out,
                                                 "rounding": rounding, "compute": compute})


@_documented
def sum(x: Any, *, axis: Any = -1, in_fmt: str | None = None, out: str | None = None,  # noqa: A001
        rounding: str = "nearest_even", compute: str = "fp32") -> Op:
    """x summed over ``axis`` (an int, a tuple of ints, or None: every axis), as the platform's sum
    plan for ``compute`` sums it (inputs widen exactly), then cast into ``out`` (default: x's
    format). Over several axes each element's terms are taken in C order of the axes; the numpy
    platform follows x's memory layout as np.sum does (pass the array itself, not a copy).

    {formats} {compute}

    Example::

        >>> x = numeq.round(np.random.default_rng(0).standard_normal((4, 64)), "bf16")
        >>> op = numeq.ops.sum(x, in_fmt="bf16", out="fp32")
        >>> op.signature
        'sum(x[4,64] bf16, axis=1) in fp32 -> fp32'
        >>> numeq.compare(x.astype(np.float32).sum(axis=-1), op, "numpy").passed
        True
    """
    return _reduce("sum", x, axis, in_fmt, out, rounding, compute)


@_documented
def mean(x: Any, *, axis: Any = -1, in_fmt: str | None = None, out: str | None = None,
         rounding: str = "nearest_even", compute: str = "fp32") -> Op:
    """The sum divided by the length, as numpy forms it (a float64 quotient cast into ``compute``);
    ``axis`` as for sum. np.mean of float16 sums in float32: compute="fp32" (the default).

    {formats}

    Example::

        >>> x = numeq.round(np.random.default_rng(0).standard_normal((4, 64)), "bf16")
        >>> op = numeq.ops.mean(x.astype(np.float32))
        >>> numeq.compare(np.mean(x.astype(np.float32), axis=-1), op, "numpy").tier
        'bit_exact'
    """
    return _reduce("mean", x, axis, in_fmt, out, rounding, compute)


@_documented
def max(x: Any, *, axis: int = -1, in_fmt: str | None = None, out: str | None = None,  # noqa: A001
        rounding: str = "nearest_even", compute: str = "fp32") -> Op:
    """The largest element along ``axis`` (exact; NaN propagates).

    {formats} {compute}

    Example::

        >>> op = numeq.ops.max(np.array([[1.0, 3.0, 2.0]], dtype=np.float32))
        >>> op.reference()
        array([3.])
    """
    return _reduce("max", x, axis, in_fmt, out, rounding, compute)


@_documented
def function(name: str, x: Any, *, in_fmt: str | None = None, out: str | None = None,
             rounding: str = "nearest_even") -> Op:
    """f(x) elementwise as the platform's function model computes it (correctly rounded in fp32 then
    cast, or within the platform's documented / assumed ulp budget: the bound carries it).

    ``name``: one of {functions}. {formats}

    Example::

        >>> op = numeq.ops.function("exp", np.array([0.0, 1.0], dtype=np.float32))
        >>> op.reference()
        array([1.        , 2.71828175])
        >>> numeq.compare(op.emulate("trainium.trn2"), op, "trainium.trn2").tier
        'bit_exact'
    """
    _check_str(name, "name")
    if name not in _FUNCTIONS:
        raise ValueError(f"name: unknown function {name!r}; valid: {', '.join(_FUNCTIONS)}")
    return _registry.call(_registry.spec(name), {"x": x, "in_fmt": in_fmt, "out": out, "rounding": rounding})




def _softmax(x: Any, axis: int, in_fmt: str | None, out: str | None, rounding: str, variant: str, block: int,
             compute: str, log: bool, reciprocal: bool = False) -> Op:
    block = _check_int(block, "block", *SIZE)
    arguments = {"x": x, "axis": axis, "in_fmt": in_fmt, "out": out, "rounding": rounding, "variant": variant,
                 "block": block, "compute": compute}
    if not log:
        arguments["reciprocal"] = reciprocal
    return _registry.call(_registry.spec("log_softmax" if log else "softmax"), arguments)


@_documented
def softmax(x: Any, *, axis: int = -1, in_fmt: str | None = None, out: str | None = None,
            rounding: str = "nearest_even", variant: str = "max_subtracted", block: int = 0,
            compute: str = "fp32", reciprocal: bool = False) -> Op:
    """Softmax along ``axis`` computed in ``compute``: variant ``plain`` (no max subtraction),
    ``max_subtracted`` or ``online`` (blocks of ``block`` elements, as flash attention).

    {formats} {compute} ``block``: the online variant's block length. ``reciprocal``: each
    numerator times the rounded reciprocal of the sum (NKI's reciprocal then tensor_scalar
    multiply) instead of one division.

    Example::

        >>> x = numeq.round(np.random.default_rng(0).standard_normal((4, 64)), "bf16")
        >>> op = numeq.ops.softmax(x, in_fmt="bf16", out="fp32")
        >>> op.reference().shape, bool(np.allclose(op.reference().sum(axis=-1), 1))
        ((4, 64), True)
        >>> numeq.compare(op.emulate("nvidia.h100"), op, "nvidia.h100").tier
        'bit_exact'
    """
    return _softmax(x, axis, in_fmt, out, rounding, variant, block, compute, False, reciprocal)


@_documented
def log_softmax(x: Any, *, axis: int = -1, in_fmt: str | None = None, out: str | None = None,
                rounding: str = "nearest_even", variant: str = "max_subtracted", block: int = 0,
                compute: str = "fp32") -> Op:
    """Log-softmax along ``axis``; variants as softmax.

    ``variant``: ``plain``, ``max_subtracted`` or ``online`` (blocks of ``block`` elements). {formats} {compute}

    Example::

        >>> x = numeq.round(np.random.default_rng(0).standard_normal((4, 64)), "bf16")
        >>> op = numeq.ops.log_softmax(x, in_fmt="bf16", out="fp32")
        >>> bool(np.all(op.reference() < 0))
        True
    """
    return _softmax(x, axis, in_fmt, out, rounding, variant, block, compute, True)


def _norm(centred: bool, x: Any, gamma: Any, beta: Any, eps: float, in_fmt: str | None, out: str | None,
          rounding: str, variant: str, compute: str) -> Op:
    arguments = {"x": x, "gamma": gamma, "beta": beta, "eps": eps, "in_fmt": in_fmt, "out": out,
                 "rounding": rounding, "compute": compute}
    if centred:
        arguments["variant"] = variant
    return _registry.call(_registry.spec("layernorm" if centred else "rmsnorm"), arguments)


@_documented
def layernorm(x: Any, *, gamma: Any = None, beta: Any = None, eps: float = 1e-5, in_fmt: str | None = None,
              out: str | None = None, rounding: str = "nearest_even", variant: str = "two_pass",
              compute: str = "fp32") -> Op:
    """Layernorm over the last axis: variant ``two_pass``, ``welford`` or ``bn_stats`` (Trainium's
    bn_stats/bn_aggr: even/odd statistics over chunks of 512, merged per the platform's
    bn_aggr_merge assumption).

    ``x``: [..., n]; ``gamma``, ``beta``: [n] (or None); ``eps``: added to the variance. {formats} {compute}

    Example::

        >>> x = numeq.round(np.random.default_rng(0).standard_normal((4, 64)), "bf16")
        >>> op = numeq.ops.layernorm(x, in_fmt="bf16", out="fp32")
        >>> y = op.reference()                  # each row: mean 0, standard deviation 1
        >>> y.shape, bool(np.allclose(y.mean(axis=-1), 0, atol=1e-6)), bool(np.allclose(y.std(axis=-1), 1, atol=1e-4))
        ((4, 64), True, True)
        >>> numeq.compare(op.emulate("nvidia.h100"), op, "nvidia.h100").tier
        'bit_exact'
    """
    return _norm(True, x, gamma, beta, eps, in_fmt, out, rounding, variant, compute)


@_documented
def rmsnorm(x: Any, *, gamma: Any = None, beta: Any = None, eps: float = 1e-6, in_fmt: str | None = None,
            out: str | None = None, rounding: str = "nearest_even", compute: str = "fp32") -> Op:
    """RMSNorm over the last axis: x * rsqrt(mean(x^2) + eps) (* gamma) (+ beta).

    ``gamma``, ``beta``: [n] (or None); ``eps``: added to mean(x^2). {formats} {compute}

    Example::

        >>> x = numeq.ops.generate("normal", (4, 64), "bf16", seed=0)
        >>> op = numeq.ops.rmsnorm(x, gamma=np.full(64, 2.0), in_fmt="bf16", out="fp32")
        >>> np.sqrt(np.mean(op.reference() ** 2, axis=-1)).round(4)    # each row's RMS: gamma's 2
        array([2., 2., 2., 2.])
    """
    return _norm(False, x, gamma, beta, eps, in_fmt, out, rounding, "two_pass", compute)


def attention(q: Any, k: Any, v: Any, *, mask: Any = None, causal: bool = False, scale: float | None = None,
              in_fmt: str | None = None, out: str | None = None, rounding: str = "nearest_even",
              variant: str = "naive", block_rows: int = 64, block_cols: int = 64, cast_p: bool = True) -> Op:
    """Scaled dot-product attention softmax(scale Q K^T + mask) V, q[..., Lq, d], k[..., Lk, d],
    v[..., Lk, dv] with equal batch dimensions; ``variant``: ``naive`` (S, softmax, P cast to in_fmt,
    P V) or ``flash`` (FlashAttention-2 blocks of ``block_rows`` x ``block_cols`` with online
    rescaling); ``cast_p=False`` models a kernel that keeps P in fp32. ``mask`` broadcasts to
    [..., Lq, Lk]: boolean as torch's scaled_dot_product_attention (True: the key takes part;
    False: it does not, an additive -inf) or additive reals (-inf excludes a key); the same
    conversion as numeq.reference.attention (numeq.reference._attention_mask).

    ``causal``: query i sees keys j <= i; ``scale``: default 1/sqrt(d). ``in_fmt``: the format of q's, k's and v's values (default: its dtype's); ``out``: the output format
    (default: in_fmt); ``rounding``: how the reference rounds into ``out``, one of ``numeq.ROUNDINGS``.

    Example::

        >>> rng = np.random.default_rng(0)
        >>> q, k, v = (numeq.round(rng.standard_normal((1, 8, 16)), "bf16") for _ in range(3))
        >>> op = numeq.ops.attention(q, k, v, causal=True, in_fmt="bf16", out="fp32")
        >>> op.reference().shape
        (1, 8, 16)
        >>> numeq.compare(op.emulate("nvidia.h100"), op, "nvidia.h100").tier
        'bit_exact'
    """
    qv, fq = _values(q, in_fmt, "q")
    kv, fk = _values(k, in_fmt, "k")
    vv, fv = _values(v, in_fmt, "v")
    if in_fmt is None and not fq == fk == fv:
        raise ValueError(f"in_fmt: q, k, v hold {fq}, {fk} and {fv} values; pass in_fmt (the format all are values of)")
    m = None if mask is None else _attention_mask(mask, _attention_scores_shape(qv, kv))
    scale = None if scale is None else _check_real(scale, "scale")
    block_rows = _check_int(block_rows, "block_rows", *SIZE)
    block_cols = _check_int(block_cols, "block_cols", *SIZE)
    causal = _check_bool(causal, "causal")
    cast_p = _check_bool(cast_p, "cast_p")
    _check_str(variant, "variant")
    _check_str(rounding, "rounding")
    return _registry.build("attention", {"q": qv, "k": kv, "v": vv, "mask": m},
                           {"causal": causal, "scale": scale, "variant": variant, "block_rows": block_rows,
                            "block_cols": block_cols, "cast_p": cast_p}, fq, _out(out, fq), rounding)


def generators() -> list[str]:
    """Names of the seeded input generators.

    Example::

        >>> numeq.ops.generators()
        ['normal', 'uniform', 'lognormal', 'outlier_channels', 'cancellation', 'near_overflow', 'subnormal_rich', 'small_integers']
    """
    return list(_core.cases_generators())


def generate(generator: str, shape: Any, fmt: str = "fp32", *, seed: int = 0, scale: float = 1.0) -> np.ndarray:
    """Seeded inputs: float64 values of ``fmt`` drawn from ``generator`` (normal, uniform, lognormal,
    outlier_channels, cancellation, near_overflow, subnormal_rich, small_integers).

    ``shape``: the array's shape; ``seed``: the same seed gives the same values; ``scale``: a factor
    on the generator's values.

    Example::

        >>> x = numeq.ops.generate("normal", (2, 3), "bf16", seed=1)
        >>> x.shape, bool(np.all(numeq.round(x, "bf16") == x))
        ((2, 3), True)
    """
    _check_str(generator, "generator")
    _check_str(fmt, "fmt")
    if isinstance(shape, (int, np.integer, bool, np.bool_)):
        shape = (shape,)
    if not isinstance(shape, (tuple, list)):
        raise TypeError(f"shape: expected an integer or a sequence of integers, got {type(shape).__name__}")
    dims = [_check_int(d, "shape", *SIZE) for d in shape]
    if math.prod(dims) > SIZE[1] // 8:
        raise MemoryError(f"shape: {tuple(dims)} holds more float64 values than any memory")
    seed = _check_int(seed, "seed", *UINT64)
    scale = _check_real(scale, "scale")
    try:
        return _core.cases_generate(generator, seed, scale, fmt, dims)
    except MemoryError:
        raise MemoryError(f"shape: {tuple(dims)} needs more memory than this machine has") from None


# Every registered op without a function written above gets one here, its signature and docstring
# read from its registry row (numeq._registry.function): an op added to the C++ registry is a
# numeq.ops function with no Python written for it.
for _spec in specs():
    if _spec.name not in globals():
        globals()[_spec.name] = _registry.function(_spec)
        __all__.append(_spec.name)
del _spec


def __getattr__(name: str) -> Any:
    # A misspelt op: the error lists the registered ones, closest first.
    import difflib

    names = [s.name for s in specs()]
    close = difflib.get_close_matches(name, names, n=3)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    raise AttributeError(f"module 'numeq.ops' has no attribute {name!r}{hint} (the registered ops: "
                         f"{', '.join(names)})")
