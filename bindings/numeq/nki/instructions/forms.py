"""An instruction's argument forms, one per NKI API generation, and the one binder that matches a
call against them.

The current interface passes the destination first (``bn_stats(dst, data)``), the older one
returns a new tile (``stats = bn_stats(data, dtype=...)``) and some instructions changed their
order between releases (``affine_select``'s ``offset``, ``dma_compute``'s ``scales``). A call is
matched against each form in turn, with the kinds of its parameters (a tensor, an operator, a
scalar or a tensor) telling the forms apart, as a reader of the kernel would.
"""

from __future__ import annotations

import ast
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..machine.context import current, where
from ..machine.dtypes import FP32_MIN
from ..machine.memory import Tensor
from ..machine.registers import Cmd

__all__ = ["REQUIRED", "Form", "bind"]

REQUIRED = object()


# Defaults a signature may name that are not Python literals.
_NAMED_DEFAULTS: dict[str, Any] = {f"reduce_cmd.{c.name}": c for c in Cmd}
_NAMED_DEFAULTS["fp32.min"] = FP32_MIN
KINDS = ("tensor", "op", "value", "int", "list", "any")


@dataclass(frozen=True, init=False)
class Form:
    """One argument form of an instruction: ``label`` (which release) and its signature, written
    as a Python signature with kinds for annotations: ``"dst: tensor, data: tensor, *, scale:
    value = 1.0"``. Kinds: ``tensor``, ``op`` (an ALU operator or activation function), ``value`` (a
    number or a tensor), ``int``, ``list``, ``any``; a trailing ``?`` also takes None. Parameters
    before ``*`` may come positionally. ``returns``: the form returns a new tile (the older
    interface: no dst). ``params`` holds (name, kind, default) with ``REQUIRED`` for no default."""

    label: str
    params: tuple
    positional: int
    returns: bool

    def __init__(self, label: str, signature: str, returns: bool = False) -> None:
        params, positional = _parse(signature)
        object.__setattr__(self, "label", label)
        object.__setattr__(self, "params", params)
        object.__setattr__(self, "positional", positional)
        object.__setattr__(self, "returns", returns)


def _parse(signature: str) -> tuple[tuple, int]:
    """(params, how many may be positional) of a signature string (see ``Form``)."""
    params, positional = [], None
    for part in (p.strip() for p in signature.split(",")):
        if not part:  # an instruction of no arguments (ncc.rank_id)
            continue
        if part == "*":
            positional = len(params)
            continue
        head, eq, default_text = part.partition("=")
        name, _, kind = (x.strip() for x in head.partition(":"))
        kind = kind or "any"
        if kind.rstrip("?") not in KINDS:
            raise ValueError(f"signature {signature!r}: {name} has kind {kind!r}; valid: {', '.join(KINDS)}")
        default: Any = REQUIRED
        if eq:
            text = default_text.strip()
            default = _NAMED_DEFAULTS[text] if text in _NAMED_DEFAULTS else ast.literal_eval(text)
        params.append((name, kind, default))
    return tuple(params), len(params) if positional is None else positional


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
        # numpy and ml_dtypes scalars (nl.finfo(nl.bfloat16).min is an ml_dtypes.bfloat16) count.
        return (isinstance(v, (Tensor, int, float, np.number))
                or (isinstance(v, np.generic) and not isinstance(v, (np.bool_, np.flexible)))) \
            and not isinstance(v, (bool, np.bool_))
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
            kind = kind.rstrip("?")
            return None, f"{n} is not {'an' if kind[0] in 'aeiou' else 'a'} {kind}"
    return vals, ""


def _signature(shown: str, form: Form) -> str:
    """How a call of ``form`` reads: ``nisa.iota(dst, pattern, offset=0, channel_multiplier=0)``."""
    parts = []
    for i, (n, _, default) in enumerate(form.params):
        if i == form.positional:
            parts.append("*")
        if default is REQUIRED:
            parts.append(n)
        else:
            named = next((text for text, v in _NAMED_DEFAULTS.items() if v is default), None)
            parts.append(f"{n}={named or repr(default)}")
    return f"{shown}({', '.join(parts)})"


def _stale_dtype(shown: str) -> None:
    warnings.warn(f"{where()}: {shown}(dtype=) is a keyword of an earlier NKI release; numeq.nki writes the "
                  "destination's dtype", DeprecationWarning, stacklevel=4)


# (instruction, the keywords' names, the arguments' types) -> (form, its parameter names, its defaults):
# a call of the same shape as one seen binds without trying the forms again (``_fits`` reads types only).
_BOUND: dict[tuple, tuple[Form, tuple, dict]] = {}


def bind(name: str, args: tuple, kwargs: dict, forms: list[Form], shown: str = "") -> tuple[Form, dict, Any]:
    """Match a call against ``forms`` (first match wins): (the form, its arguments by name, the
    ``dtype=`` keyword). ``mask=`` (the older interface's predicate) is not implemented; ``name=``
    labels the instruction and changes nothing. ``shown``: how messages write it (``nisa.<name>``)."""
    shown = shown or f"nisa.{name}"
    dtype = None
    if "name" in kwargs or "dtype" in kwargs or "mask" in kwargs:
        kwargs = dict(kwargs)
        kwargs.pop("name", None)
        dtype = kwargs.pop("dtype", None)
        if kwargs.pop("mask", None) is not None:
            raise current().unsupported(f"{shown}(mask=) (the older interface's instruction masks)")
    key = (shown, tuple(kwargs), tuple(map(type, args)), tuple(map(type, kwargs.values())))
    bound = _BOUND.get(key)
    if bound is not None:
        form, names, defaults = bound
        vals = dict(defaults)
        vals.update(zip(names, args))
        vals.update(kwargs)
        if dtype is not None and not form.returns:
            _stale_dtype(shown)
        return form, vals, dtype
    reasons = []
    for form in forms:
        vals, why = _try(form, args, kwargs)
        if vals is not None:
            _BOUND[key] = (form, tuple(p[0] for p in form.params),
                           {p[0]: p[2] for p in form.params if p[2] is not REQUIRED})
            if dtype is not None and not form.returns:
                _stale_dtype(shown)
            return form, vals, dtype
        reasons.append(why)
    unknown = [r for r in reasons if r.startswith("unknown keyword")]
    if len(unknown) == len(forms):
        raise current().unsupported(f"{shown}'s keyword {unknown[0].split()[-1]!r}")
    tried = "; or ".join(f"{_signature(shown, f)} ({f.label}: {r})" for f, r in zip(forms, reasons))
    raise TypeError(f"{where()}: {shown}: the call matches no form: expected {tried}")
