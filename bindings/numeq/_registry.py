"""The op registry as Python reads it: the C++ table of cases/registry.hpp, one row per operation
(its inputs, parameters, default output, catalogue setup, planted bugs, one-line doc), and the one
call that builds a registered op from its arguments (``build``). numeq.ops, numeq.catalogue,
numeq.bugs, the tolerance tables and the review manifest read their operations from here; nothing
in Python restates the table."""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from . import _core
from ._arrays import _array, _check_bool, _check_int, _check_real, _check_str
from ._op import Op, _c64, _out
from .machines import _axes, _layout
from .machines import _float64_values as _values

__all__ = ["CatalogueSpec", "InputSpec", "OpSpec", "ParamSpec", "build", "call", "catalogue_params", "spec",
           "specs"]


@dataclass(frozen=True)
class InputSpec:
    """One input of a registered op: ``name``, ``shape`` (in words), ``required``, ``role``
    (``values``: values of in_fmt; ``own``: reals of their own format; ``mask``: an attention mask;
    ``codes``: integer codes), ``catalogue_shape`` (how the catalogue draws it: -1 is K, i the
    problem's i-th other dimension; empty: not drawn), ``layout`` (the op reads its memory layout)
    and ``doc``."""

    name: str
    shape: str
    required: bool
    role: str
    catalogue_shape: tuple[int, ...]
    layout: bool
    doc: str


@dataclass(frozen=True)
class ParamSpec:
    """One parameter of a registered op: ``name``, ``type`` (integer, real, boolean, text, axes),
    ``default`` (None: none), ``choices`` (a text parameter's valid names; empty: any) and ``doc``."""

    name: str
    type: str
    default: Any
    choices: tuple[str, ...]
    doc: str


@dataclass(frozen=True)
class CatalogueSpec:
    """How the catalogue draws a registered op: input ``formats``, default ``out`` ("": the input
    format), other dimensions ``shape`` (and ``table_shape`` for numeq tolerances), what K means
    (``k_meaning``), whether K is a reduction length (``reduces``; False: a row width), and the
    input ``generators`` that draw a meaningful problem of it."""

    formats: tuple[str, ...]
    out: str
    shape: tuple[int, ...]
    table_shape: tuple[int, ...]
    k_meaning: str
    reduces: bool
    generators: tuple[str, ...]


@dataclass(frozen=True)
class OpSpec:
    """A registered op: ``name``, ``doc`` (one line), ``family`` (matmul, reduction,
    normalisation, attention or function), ``inputs`` and ``params`` (in order),
    ``format_keywords`` (whether it takes in_fmt, out and rounding), ``default_out`` ("": the input
    format), ``catalogue`` (None: not in the catalogue) and ``bugs`` (numeq.bugs' names that apply).

    Example::

        >>> s = numeq.ops.spec("rmsnorm")
        >>> [i.name for i in s.inputs], [p.name for p in s.params]
        (['x', 'gamma', 'beta'], ['eps', 'compute'])
    """

    name: str
    doc: str
    family: str
    inputs: tuple[InputSpec, ...]
    params: tuple[ParamSpec, ...]
    format_keywords: bool
    default_out: str
    catalogue: CatalogueSpec | None
    bugs: tuple[str, ...]

    def required(self) -> tuple[str, ...]:
        """The names of the inputs it needs.

        >>> numeq.ops.spec("attention").required()
        ('q', 'k', 'v')
        """
        return tuple(i.name for i in self.inputs if i.required)

    def optional(self) -> tuple[str, ...]:
        """The names of the inputs it may take.

        >>> numeq.ops.spec("matmul").optional()
        ('c',)
        """
        return tuple(i.name for i in self.inputs if not i.required)


def _read(row: dict) -> OpSpec:
    cat = row["catalogue"]
    return OpSpec(
        row["name"], row["doc"], row["family"],
        tuple(InputSpec(i["name"], i["shape"], i["required"], i["role"], tuple(i["catalogue_shape"]), i["layout"],
                        i["doc"]) for i in row["inputs"]),
        tuple(ParamSpec(p["name"], p["type"], p["default"], tuple(p["choices"]), p["doc"]) for p in row["params"]),
        row["format_keywords"], row["default_out"],
        None if cat is None else CatalogueSpec(tuple(cat["formats"]), cat["out"], tuple(cat["shape"]),
                                               tuple(cat["table_shape"]), cat["k_meaning"], cat["reduces"],
                                               tuple(cat["generators"])),
        tuple(row["bugs"]))


_SPECS: dict[str, OpSpec] = {s.name: s for s in map(_read, _core.op_registry())}


def specs() -> tuple[OpSpec, ...]:
    """Every registered op's row, in the registry's order.

    Example::

        >>> [s.name for s in numeq.ops.specs()][:4]
        ['matmul', 'scaled_fp8_matmul', 'int8_matmul', 'sum']
    """
    return tuple(_SPECS.values())


def spec(name: str) -> OpSpec:
    """The registered op called ``name`` (one of ``[s.name for s in numeq.ops.specs()]``).

    Example::

        >>> numeq.ops.spec("matmul").catalogue.formats
        ('fp32', 'bf16', 'fp16', 'e4m3fn', 'e4m3', 'e5m2')
    """
    _check_str(name, "name")
    if name not in _SPECS:
        raise ValueError(f"name: unknown operation {name!r}; valid: {', '.join(_SPECS)}")
    return _SPECS[name]


def catalogue_params(name: str, dims: tuple[int, ...], k: int) -> dict[str, Any]:
    """The parameters (and scalar inputs) the catalogue builds ``name`` with at other dimensions
    ``dims`` and reduction length ``k``."""
    return dict(_core.op_catalogue_params(name, list(dims), int(k)))


def build(name: str, inputs: dict[str, np.ndarray | None], params: dict[str, Any], in_fmt: str, out: str | None,
          rounding: str = "nearest_even", layouts: dict[str, tuple[list[int], bool]] | None = None) -> Op:
    """The registered op ``name`` from float64 ``inputs`` by name (None: left out), ``params`` by
    name (the rest take the registry's defaults), ``in_fmt``, ``out`` (None: an op without an output
    cast, as int8_matmul) and ``rounding``: the one
    crossing into C++ every op of numeq.ops makes."""
    return Op(_core.op_build(name, {k: None if v is None else _c64(v) for k, v in inputs.items()}, layouts or {},
                             params, in_fmt, out, rounding))


def _integer_codes(x: Any, name: str) -> np.ndarray:
    """Integer codes (int8 or uint8 values) as float64."""
    v = _array(x, name)
    if v.dtype.kind not in "iuf":
        raise TypeError(f"{name}: expected an integer array, got dtype {v.dtype}")
    if v.dtype.kind == "f" and not (np.all(np.isfinite(v)) and np.array_equal(v, np.round(v))):
        raise ValueError(f"{name}: expected integer codes, got non-integral values")
    lo, hi = (int(v.min()), int(v.max())) if v.size else (0, 0)
    if lo < -128 or hi > 255 or (lo < 0 and hi > 127):
        raise ValueError(f"{name}: expected int8 codes [-128, 127] or uint8 codes [0, 255], got values in [{lo}, {hi}]")
    return _c64(v)


def _param(p: ParamSpec, value: Any) -> Any:
    """``value`` checked as parameter ``p`` takes it (the error names the parameter)."""
    if value is None and p.default is None:
        return None
    if p.type == "integer":
        return _check_int(value, p.name)
    if p.type == "real":
        return _check_real(value, p.name)
    if p.type == "boolean":
        return _check_bool(value, p.name)
    if p.type == "axes":  # None: every axis (C++ reads none so); an int stays one axis
        if value is None:
            return None
        axes = _axes(value, 0)
        return int(value) if axes is None else axes
    return _check_str(value, p.name, p.choices or None)


def call(s: OpSpec, arguments: dict[str, Any]) -> Op:
    """Build ``s`` from a function's bound ``arguments`` (its inputs, params, and in_fmt, out,
    rounding where it takes them): each input read by its role, each parameter checked by its type."""
    in_fmt = arguments.get("in_fmt")
    inputs: dict[str, np.ndarray | None] = {}
    layouts: dict[str, tuple[list[int], bool]] = {}
    found: dict[str, str] = {}
    for i in s.inputs:
        x = arguments.get(i.name)
        if x is None:
            inputs[i.name] = None
            continue
        if i.role == "values":
            inputs[i.name], found[i.name] = _values(x, in_fmt, i.name)
        elif i.role == "codes":
            inputs[i.name] = _integer_codes(x, i.name)
        else:
            inputs[i.name] = _values(x, None, i.name)[0]
        if i.layout:
            layouts[i.name] = _layout(x)
    if in_fmt is None and len(set(found.values())) > 1:
        held = ", ".join(f"{n} {f}" for n, f in found.items())
        raise ValueError(f"in_fmt: the inputs hold values of different formats ({held}); pass in_fmt (the format "
                         "all are values of)")
    fmt = in_fmt if in_fmt is not None else next(iter(found.values()), "fp32")
    params = {p.name: _param(p, arguments.get(p.name, p.default)) for p in s.params}
    if not s.format_keywords:
        return build(s.name, inputs, params, fmt, None, "nearest_even", layouts)
    rounding = _check_str(arguments.get("rounding", "nearest_even"), "rounding")
    return build(s.name, inputs, params, fmt, _out(arguments.get("out"), s.default_out or fmt), rounding, layouts)


def signature(s: OpSpec) -> inspect.Signature:
    """The Python signature of ``s``'s function in numeq.ops: required inputs positional, the
    optional inputs and parameters keyword-only, then in_fmt, out and rounding."""
    P = inspect.Parameter
    ps = [P(i.name, P.POSITIONAL_OR_KEYWORD) for i in s.inputs if i.required]
    ps += [P(i.name, P.KEYWORD_ONLY, default=None) for i in s.inputs if not i.required]
    ps += [P(p.name, P.KEYWORD_ONLY, default=p.default) for p in s.params]
    if s.format_keywords:
        ps += [P("in_fmt", P.KEYWORD_ONLY, default=None),
               P("out", P.KEYWORD_ONLY, default=s.default_out or None),
               P("rounding", P.KEYWORD_ONLY, default="nearest_even")]
    return inspect.Signature(ps)


def docstring(s: OpSpec) -> str:
    """The docstring of ``s``'s function in numeq.ops, from its registry row."""
    lines = [s.doc + ".", ""]
    lines += [f"``{i.name}``: {i.shape}, {i.doc}{'' if i.required else ' (optional)'}." for i in s.inputs]
    for p in s.params:
        choices = f" (one of {', '.join(p.choices)})" if p.choices else ""
        lines.append(f"``{p.name}``: {p.doc}{choices}; default {p.default!r}.")
    if s.format_keywords:
        lines.append("``in_fmt``: the format of the inputs' values (default: their dtype's); ``out``: the output "
                     f"format (default: {s.default_out or 'in_fmt'}); ``rounding``: how the reference rounds into "
                     "it, one of ``numeq.ROUNDINGS``.")
    lines += ["", "Example::", ""]
    if s.family == "function":
        lines += [f"    >>> op = numeq.ops.{s.name}(np.array([0.5, 2.0], dtype=np.float32))",
                  "    >>> op.reference().shape", "    (2,)"]
    elif s.catalogue is not None:
        dims = tuple(1 for _ in s.catalogue.shape)
        lines += [f"    >>> p = numeq.catalogue.Problem({s.name!r}, {s.catalogue.formats[0]!r}, "
                  f"numeq.catalogue.out_for({s.name!r}, {s.catalogue.formats[0]!r}), k=8, shape={dims!r})",
                  "    >>> op = numeq.catalogue.build(p, \"normal\", seed=0).op",
                  "    >>> numeq.compare(op.emulate(\"nvidia.h100\"), op, \"nvidia.h100\").passed", "    True"]
    else:
        lines += [f"    >>> numeq.ops.spec({s.name!r}).doc", f"    {s.doc!r}"]
    lines += ["    >>> numeq.compare(op.emulate(\"trainium.trn2\"), op, \"trainium.trn2\").tier" , "    'bit_exact'"] \
        if s.family == "function" else []
    return "\n".join(lines) + "\n"


def function(s: OpSpec) -> Callable[..., Op]:
    """numeq.ops' function for ``s``, its signature and docstring read from the row."""
    sig = signature(s)

    def op(*args: Any, **kwargs: Any) -> Op:
        try:
            bound = sig.bind(*args, **kwargs)
        except TypeError as e:
            raise TypeError(f"numeq.ops.{s.name}: {e}") from None
        bound.apply_defaults()
        return call(s, bound.arguments)

    op.__name__ = op.__qualname__ = s.name
    op.__signature__ = sig  # type: ignore[attr-defined]
    op.__doc__ = docstring(s)
    op.__module__ = "numeq.ops"
    return op
