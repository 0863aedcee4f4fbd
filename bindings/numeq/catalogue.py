"""The operation catalogue as problems: an op, its formats, its reduction length K and its other
dimensions, built into a ``numeq.ops.Op`` from any input generator and seed.

One place says how each catalogue op is set up for a sweep (the tolerance tables of
``numeq.tolerances``, the planted bugs of ``numeq.bugs``, the benchmarks), so that every table and
every bug sees the same inputs for the same (problem, generator, seed).

Example::

    >>> p = numeq.catalogue.Problem("matmul", "bf16", "fp32", k=256)
    >>> built = numeq.catalogue.build(p, "normal", seed=0)
    >>> built.op.signature
    'a[64,256] bf16 @ b[256,64] bf16 -> fp32'
    >>> sorted(built.inputs)
    ['a', 'b']
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import _core, _registry, ops
from ._arrays import _check_int, _check_str

__all__ = ["OPS", "Built", "Problem", "build", "default_shape", "formats_for", "k_meaning", "op_for", "out_for",
           "refusal"]

# The catalogue's ops: the registry's rows with a catalogue setup (cases/registry.hpp), in its order.
_SPEC: dict[str, Any] = {s.name: s for s in ops.specs() if s.catalogue is not None}
OPS: tuple[str, ...] = tuple(_SPEC)


def _check_op(op: Any) -> str:
    _check_str(op, "op")
    if op not in _SPEC:
        raise ValueError(f"op: unknown catalogue op {op!r}; valid: {', '.join(OPS)}")
    return op


def formats_for(op: str) -> tuple[str, ...]:
    """The input formats the catalogue builds ``op`` for.

    >>> numeq.catalogue.formats_for("scaled_fp8_matmul")
    ('e4m3fn', 'e4m3', 'e5m2')
    """
    return _SPEC[_check_op(op)].catalogue.formats


def out_for(op: str, in_fmt: str) -> str:
    """The output format the catalogue gives ``op`` on inputs of ``in_fmt`` by default: fp32 for the
    matmuls and sum, int32 for int8_matmul, ``in_fmt`` for the rest.

    >>> numeq.catalogue.out_for("softmax", "bf16"), numeq.catalogue.out_for("matmul", "bf16")
    ('bf16', 'fp32')
    """
    out = _SPEC[_check_op(op)].catalogue.out
    return out or in_fmt


def default_shape(op: str) -> tuple[int, ...]:
    """The dimensions other than K a problem of ``op`` has unless told otherwise.

    >>> numeq.catalogue.default_shape("attention")
    (1, 64, 64)
    """
    return _SPEC[_check_op(op)].catalogue.shape


def k_meaning(op: str) -> str:
    """What K is for ``op``, in words.

    >>> numeq.catalogue.k_meaning("sum")
    'the summed length: x[R, K] summed over K, shape (R,)'
    """
    return _SPEC[_check_op(op)].catalogue.k_meaning


@dataclass(frozen=True)
class Problem:
    """One catalogue op at one size: ``op`` (one of ``OPS``), ``in_fmt`` (one of
    ``formats_for(op)``), ``out`` (the output format), ``k`` (the reduction length: see
    ``k_meaning``) and ``shape`` (the other dimensions; default ``default_shape(op)``).

    Example::

        >>> numeq.catalogue.Problem("softmax", "bf16", "bf16", k=1024).text()
        'softmax(x[64,1024] bf16) -> bf16'
    """

    op: str
    in_fmt: str
    out: str
    k: int
    shape: tuple[int, ...] = field(default=())

    def __post_init__(self) -> None:
        _check_op(self.op)
        _check_str(self.in_fmt, "in_fmt")
        if self.in_fmt not in formats_for(self.op):
            raise ValueError(f"in_fmt: the catalogue builds {self.op} for {', '.join(formats_for(self.op))}, "
                             f"not {self.in_fmt!r}")
        _check_str(self.out, "out")
        _check_int(self.k, "k", 1, 1 << 24)
        shape = tuple(self.shape) if self.shape else default_shape(self.op)
        if len(shape) != len(default_shape(self.op)):
            raise ValueError(f"shape: {self.op} takes {len(default_shape(self.op))} dimensions besides K "
                             f"({k_meaning(self.op)}), got {shape!r}")
        for d in shape:
            _check_int(d, "shape", 1, 1 << 20)
        object.__setattr__(self, "shape", tuple(int(d) for d in shape))

    def text(self) -> str:
        """The problem in one line, with its dimensions.

        >>> numeq.catalogue.Problem("matmul", "e4m3fn", "fp32", k=8192).text()
        'matmul(a[64,8192], b[8192,64] e4m3fn) -> fp32'
        """
        drawn = [(i.name, _dims(i.catalogue_shape, self.shape, self.k)) for i in _SPEC[self.op].inputs
                 if i.catalogue_shape]
        return f"{self.op}({', '.join(f'{n}[{_text(d)}]' for n, d in drawn)} {self.in_fmt}) -> {self.out}"


@dataclass(frozen=True)
class Built:
    """A problem built from one generator and seed: the ``op`` (a ``numeq.ops.Op``), its
    ``inputs`` by name (float64 values of in_fmt; int8 codes for int8_matmul) and the ``params``
    the op was built with (scales, eps, variant).

    Example::

        >>> b = numeq.catalogue.build(numeq.catalogue.Problem("scaled_fp8_matmul", "e4m3fn", "fp32", k=32),
        ...                           "uniform", seed=3)
        >>> b.params, b.inputs["a"].shape
        ({'scale_a': 0.5, 'scale_b': 0.125}, (64, 32))
    """

    op: Any
    inputs: dict[str, np.ndarray]
    params: dict[str, Any]


def op_for(problem: Problem, inputs: dict[str, np.ndarray], params: dict[str, Any] | None = None,
           out: str | None = None) -> Any:
    """``problem``'s op on given ``inputs`` (by name, as ``Built.inputs``) with ``params`` (as
    ``Built.params``: scales, eps, variant; None: the catalogue's) and output format ``out``
    (None: the problem's): what ``build`` makes of drawn inputs, and what ``numeq.bugs`` makes of
    edited ones (a tile zeroed, a scale doubled, another variant).

    >>> p = numeq.catalogue.Problem("sum", "fp32", "fp32", k=4, shape=(1,))
    >>> numeq.catalogue.op_for(p, {"x": np.array([[1.0, 2.0, 3.0, 4.0]])}).reference().tolist()
    [10.0]
    """
    p = problem
    s = _SPEC[p.op]
    # call reads each input and parameter by name; the catalogue's params (scaled_fp8_matmul's
    # scales are scalar inputs) give way to the caller's.
    arguments = {**inputs, **_registry.catalogue_params(p.op, p.shape, p.k), **(params or {})}
    if s.format_keywords:
        arguments.update(in_fmt=p.in_fmt, out=p.out if out is None else out)
    return _registry.call(s, arguments)


def _dims(catalogue_shape: tuple[int, ...], shape: tuple[int, ...], k: int) -> tuple[int, ...]:
    """An input's dimensions from the registry's catalogue_shape: -1 is K, i the problem's i-th."""
    return tuple(k if d < 0 else shape[d] for d in catalogue_shape)


def _text(dims: tuple[int, ...]) -> str:
    return ",".join(map(str, dims))


def build(problem: Problem, generator: str, seed: int) -> Built:
    """``problem``'s op on inputs drawn from ``generator`` (one of ``numeq.ops.generators()``) with
    ``seed`` (input i of the op draws with seed + i): the same inputs for the same arguments, in
    every process.

    >>> b = numeq.catalogue.build(numeq.catalogue.Problem("sum", "bf16", "fp32", k=8, shape=(2,)), "normal", 1)
    >>> b.inputs["x"].shape
    (2, 8)
    """
    p = problem
    _check_str(generator, "generator")
    seed = _check_int(seed, "seed", 0, (1 << 63) - 1)
    s, k, f = p.shape, p.k, p.in_fmt

    # The draw is C++'s (cases::catalogue_inputs, the one the tolerance fits draw): input i from
    # seed + i; integer codes come back as int8.
    drawn = _core.op_catalogue_inputs(p.op, f, list(s), k, generator, seed)
    codes = {i.name for i in _SPEC[p.op].inputs if i.role == "codes"}
    inputs = {name: (v.astype(np.int8) if name in codes else v) for name, v in drawn.items()}
    params = _registry.catalogue_params(p.op, s, k)
    return Built(op_for(p, inputs, params), inputs, params)


@functools.lru_cache(maxsize=1024)
def refusal(problem: Problem, platform: str, out: str | None = None) -> str | None:
    """None when ``platform`` emulates ``problem``'s op (with output format ``out``; None: the
    problem's), else numeq's refusal, in words. Tried on the problem's K with every other dimension
    1 (one query row block for attention), which is all a platform's support depends on: cheap, and
    kept per (problem, platform, out).

    >>> numeq.catalogue.refusal(numeq.catalogue.Problem("matmul", "bf16", "fp32", k=64), "trainium.trn2") is None
    True
    >>> numeq.catalogue.refusal(numeq.catalogue.Problem("matmul", "e4m3fn", "fp32", k=64), "numpy")[:6]
    'in_fmt'
    """
    s = problem.shape
    # Every dimension 1 but a query axis (attention's Lq: its flash blocks divide it).
    small = (1, s[1], s[2]) if problem.op == "attention" else tuple(1 for _ in s)
    tiny = Problem(problem.op, problem.in_fmt, problem.out, problem.k, small)
    try:
        built = build(tiny, "normal", 0)
        (built.op if out is None else op_for(tiny, built.inputs, built.params, out)).emulate(platform)
    except (ValueError, NotImplementedError) as exc:
        return str(exc)
    return None
