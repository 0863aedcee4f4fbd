"""Order discovery: the summation tree of a black-box sum or dot product, as a numeq plan.

``numeq.reveal_order(fn, n, fmt="fp32")`` follows FPRev (Xie, Gao, Wang, Xue, "Revealing
Floating-Point Accumulation Orders in Software/Hardware Implementations", USENIX ATC 2025,
arXiv:2411.00442): every term is a small unit except +M at term i and -M at term j, with M so
large that it absorbs any count of units in ``fmt``; n minus the returned count of units is the
number of leaves of the subtree where i and j first meet, and from those counts the tree is
rebuilt with about (n/2) log2 n calls for a balanced tree (n - 1 for a sequential loop). The C++
implementation (core/reveal.hpp) says what it finds and what it refuses.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable

import numpy as np

from . import _core
from ._arrays import _NUMPY_TYPES, SIZE, _check_format, _check_int, _check_str
from .machines import Plan

_KINDS = ("sum", "dot")
_PRODUCTS = ("fma", "rounded")


class RevealResult:
    """What ``reveal_order`` found: ``plan`` (a Plan whose reduction is the tree as group / term
    nodes), ``calls`` (calls of fn, every check included), ``tree`` (nested parentheses of term
    indices), ``shape`` (a compact plan with the same tree, e.g. "sequential", or None) and
    ``compact_plan``, ``big`` and ``unit`` (the probe's M and unit), ``multi_term_nodes`` and
    ``absorbing_nodes`` (fused nodes; absorbing: fn truncates the other terms there),
    ``reproduces`` (the plan gave fn's values on random inputs) and ``notes``.

    ``kind``, ``d``: what ``reveal_order`` passes in (the probe's kind, "sum" or "dot", and the
    extension's findings); read the attributes above.

    Example::

        >>> r = numeq.reveal_order(lambda x: sum(x[::-1], np.float32(0)), 4)   # the last term first
        >>> r.tree, r.shape, r.reproduces
        ('(0 (1 (2 3)))', None, True)
        >>> print(r.plan)
        revealed sum order of 4 terms (fp32): group(fp32 nearest_even fma: 0 (1 (2 3))), c last, out fp32 nearest_even
    """

    __slots__ = ("kind", "plan", "calls", "tree", "shape", "compact_plan", "big", "unit", "multi_term_nodes",
                 "absorbing_nodes", "reproduces", "notes")

    def __init__(self, kind: str, d: dict) -> None:
        self.kind = kind
        self.plan = Plan(d["plan"])
        self.calls = int(d["calls"])
        self.tree = str(d["tree"])
        self.shape = str(d["shape"]) or None
        self.compact_plan = Plan(d["compact"]) if d["compact"] is not None else None
        self.big = float(d["big"])
        self.unit = float(d["unit"])
        self.multi_term_nodes = int(d["multi_term_nodes"])
        self.absorbing_nodes = int(d["absorbing_nodes"])
        self.reproduces = bool(d["reproduces"])
        self.notes = list(d["notes"])

    def __repr__(self) -> str:
        tree = self.tree if len(self.tree) <= 80 else self.tree[:77] + "..."
        shape = f", shape={self.shape!r}" if self.shape else ""
        return f"RevealResult({self.kind}, calls={self.calls}{shape}, tree={tree})"


def _kind_of(fn: Callable[..., Any]) -> str:
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        raise ValueError("kind: cannot read fn's signature to tell a sum (one array) from a dot product (two); "
                         "pass kind='sum' or kind='dot'") from None
    parameters = signature.parameters.values()
    if any(p.kind is p.VAR_POSITIONAL for p in parameters):
        raise ValueError("kind: fn takes *args, so its arity does not say whether it sums one array or dots two; "
                         "pass kind='sum' or kind='dot'")
    required = [p for p in parameters
                if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty]
    if len(required) == 1:
        return "sum"
    if len(required) == 2:
        return "dot"
    raise ValueError(f"kind: fn has {len(required)} required positional parameters; a sum takes one array and a "
                     "dot product two: pass kind='sum' or kind='dot'")


def _scalar(out: Any) -> float:
    try:
        a = np.asarray(out, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(f"fn: expected a number as the result (the sum), got {type(out).__name__} "
                        f"{out!r:.60}") from None
    if a.size != 1:
        raise ValueError(f"fn: expected a scalar result (the sum), got an array of shape {a.shape}")
    return float(a.astype(np.float64).reshape(()))


def reveal_order(fn: Callable[..., Any], n: int, fmt: str = "fp32", *, kind: str | None = None,
                 in_fmt: str | None = None, out_fmt: str | None = None, product: str = "fma",
                 dtype: Any = None) -> RevealResult:
    """The summation tree of ``fn`` over ``n`` terms, as a plan (``result.plan``), with the number
    of calls it took (``result.calls``).

    ``fn(x)`` sums a 1-d array of n values, or ``fn(a, b)`` returns the dot product of two (the
    probe's +-M go into a and b, units elsewhere). ``kind`` ("sum" or "dot") says which; by
    default it is read from fn's arity (one required positional parameter: sum; two: dot).
    ``fmt``: the format fn accumulates in (M and the unit are chosen for it; the plan adds in it,
    round to nearest even). ``in_fmt``: the format of the inputs, x or a and b (default fmt).
    ``out_fmt``: the format of fn's result when it rounds the fmt sum once more (default fmt).
    ``product``
    (dot): how the plan forms products, "fma" (exact) or "rounded" (into fmt first). ``dtype``:
    the dtype of the arrays fn receives (default: in_fmt's numpy / ml_dtypes type, float64
    holding its values where there is none).

    Raises ValueError, never a wrong tree, when fn is not deterministic, does not behave like a
    sum, or gives counts no tree explains; and for n < 1, too many terms for fmt, or an unknown
    fmt (the message lists the valid ones).

    ``n``: the number of terms; ``fmt``: a name of ``numeq.formats()``; ``kind``: "sum", "dot" or
    None (from fn's arity).

    Example::

        >>> def sequential(x):
        ...     s = np.float32(0)
        ...     for v in x:
        ...         s = np.float32(s + v)
        ...     return s
        >>> r = numeq.reveal_order(sequential, 8)
        >>> r.shape, r.tree
        ('sequential', '(((((((0 1) 2) 3) 4) 5) 6) 7)')
        >>> r.reproduces
        True
    """
    if not callable(fn):
        raise TypeError(f"fn: expected a callable, got {type(fn).__name__}")
    _check_str(fmt, "fmt")
    for value, parameter in ((in_fmt, "in_fmt"), (out_fmt, "out_fmt")):
        if value is not None:
            _check_format(value, parameter)
    _check_str(product, "product")
    if product not in _PRODUCTS:
        raise ValueError(f"product: unknown product mode {product!r}; valid: {', '.join(_PRODUCTS)}")
    n = _check_int(n, "n", None, SIZE[1])
    if n < 1:
        raise ValueError(f"n: expected at least 1 term, got {n}")
    if kind is None:
        kind = _kind_of(fn)
    elif _check_str(kind, "kind") not in _KINDS:
        raise ValueError(f"kind: unknown kind {kind!r}; valid: {', '.join(_KINDS)} (or None: from fn's arity)")
    _check_format(fmt, "fmt")
    if dtype is None:
        dtype = _NUMPY_TYPES.get(in_fmt or fmt, np.float64)
    try:
        dtype = np.dtype(dtype)
    except TypeError as e:
        raise TypeError(f"dtype: not a numpy dtype: {e}") from None
    if dtype.kind not in "fV" or dtype.kind == "V" and dtype not in _NUMPY_TYPES.values():
        raise TypeError(f"dtype: expected a floating dtype (numpy or ml_dtypes), got {dtype}")

    if kind == "sum":
        def call(x: np.ndarray) -> float:
            return _scalar(fn(x.astype(dtype)))
    else:
        def call(a: np.ndarray, b: np.ndarray) -> float:  # type: ignore[misc]
            return _scalar(fn(a.astype(dtype), b.astype(dtype)))

    d = _core.core_reveal(call, int(n), kind == "dot", fmt, in_fmt or "", out_fmt or "", product)
    return RevealResult(kind, d)
