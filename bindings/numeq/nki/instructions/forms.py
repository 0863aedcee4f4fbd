"""An instruction's argument forms, one per NKI API generation, and the one binder that matches a
call against them.

The current interface passes the destination first (``bn_stats(dst, data)``), the older one
returns a new tile (``stats = bn_stats(data, dtype=...)``) and some instructions changed their
order between releases (``affine_select``'s ``offset``, ``dma_compute``'s ``scales``). A call is
matched against each form in turn, with the kinds of its parameters (a tensor, an operator, a
scalar or a tensor) telling the forms apart, as a reader of the kernel would.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..machine.context import current, where
from ..machine.memory import Tensor

__all__ = ["REQUIRED", "Form", "bind"]

REQUIRED = object()


@dataclass(frozen=True)
class Form:
    """One argument form of an instruction: ``label`` (which release), ``params`` as (name, kind,
    default) with kinds ``tensor``, ``op``, ``value`` (a number or a tensor), ``int``, ``list``,
    ``any`` (a trailing ``?`` also takes None), how many may come ``positional``ly, and whether
    the form ``returns`` a new tile (the older interface: no dst)."""

    label: str
    params: tuple
    positional: int
    returns: bool = False


def _fits(kind: str, v: Any) -> bool:
    if kind.endswith("?"):
        if v is None:
            return True
        kind = kind[:-1]
    if kind == "any":
        return True
    if kind == "tensor":
        return isinstance(v, Tensor)
    if kind == "op":
        return v is not None and not isinstance(v, (Tensor, bool, int, float, np.number, list, tuple, np.ndarray))
    if kind == "value":
        return isinstance(v, (Tensor, int, float, np.number)) and not isinstance(v, bool)
    if kind == "int":
        return isinstance(v, (int, np.integer)) and not isinstance(v, bool)
    if kind == "list":
        return isinstance(v, (list, tuple))
    raise AssertionError(kind)


def _try(form: Form, args: tuple, kwargs: dict) -> tuple[dict | None, str]:
    names = [p[0] for p in form.params]
    if len(args) > form.positional:
        return None, f"takes at most {form.positional} positional arguments"
    vals = dict(zip(names, args))
    for k, v in kwargs.items():
        if k not in names:
            return None, f"unknown keyword {k}"
        if k in vals:
            return None, f"{k} given twice"
        vals[k] = v
    for n, kind, default in form.params:
        if n not in vals:
            if default is REQUIRED:
                return None, f"missing {n}"
            vals[n] = default
        elif not _fits(kind, vals[n]):
            return None, f"{n} is not a {kind.rstrip('?')}"
    return vals, ""


def _signature(name: str, form: Form) -> str:
    parts = []
    for i, (n, _, default) in enumerate(form.params):
        if i == form.positional:
            parts.append("*")
        parts.append(n if default is REQUIRED else f"{n}=reduce_cmd.{default.name}" if hasattr(default, "name")
                     else f"{n}={default!r}")
    return f"nisa.{name}({', '.join(parts)})"


def bind(name: str, args: tuple, kwargs: dict, forms: list[Form]) -> tuple[Form, dict, Any]:
    """Match a call against ``forms`` (first match wins): (the form, its arguments by name, the
    ``dtype=`` keyword). ``mask=`` (the older interface's predicate) is not implemented; ``name=``
    labels the instruction and changes nothing."""
    kwargs = dict(kwargs)
    kwargs.pop("name", None)
    dtype = kwargs.pop("dtype", None)
    if kwargs.pop("mask", None) is not None:
        raise current().unsupported(f"nisa.{name}(mask=) (the older interface's instruction masks)")
    reasons = []
    for form in forms:
        vals, why = _try(form, args, kwargs)
        if vals is not None:
            if dtype is not None and not form.returns:
                warnings.warn(f"{where()}: nisa.{name}(dtype=) is a keyword of an earlier NKI release; numeq.nki "
                              "writes the destination's dtype", DeprecationWarning, stacklevel=3)
            return form, vals, dtype
        reasons.append(why)
    unknown = [r for r in reasons if r.startswith("unknown keyword")]
    if len(unknown) == len(forms):
        raise current().unsupported(f"nisa.{name}'s keyword {unknown[0].split()[-1]!r}")
    tried = "; or ".join(f"{_signature(name, f)} ({f.label}: {r})" for f, r in zip(forms, reasons))
    raise TypeError(f"{name}: the call matches no form of nisa.{name}: expected {tried}")
