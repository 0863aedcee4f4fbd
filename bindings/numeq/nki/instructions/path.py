"""The one path every instruction takes: bind the call to one of the row's argument forms (the
older interface's ``mask=`` by the row's mask kind), resolve its engine, check the target has it,
run the row's semantics, then trace it with its cost and its precision-flow sites. The semantics
read operands and write destinations through ``access`` (checks, casts, narrowing records) and
report what they did through ``Call.issue``.
"""

from __future__ import annotations

import sys
from typing import Any, Callable

import numpy as np

from ..machine.alu import op_name
from ..machine.context import Instruction, KernelFault, Unsupported, active, current, kernel_line, where
from ..machine.engines import engine_name
from ..machine.memory import OutsideBuffer, Tensor
from .forms import Form, bind
from .operands import destination, doc
from .table import INSTRUCTIONS, InstructionSpec, key
from . import bounds as _bounds

__all__ = ["Call", "entry", "language_functions", "module_functions", "public_functions"]

_SUM_OPERATORS = frozenset({"add", "average", "sum", "mean"})


class Call:
    """One instruction call bound to its row: ``ctx`` (the run), ``spec`` (the row), ``form`` (the
    argument form it matched), ``args`` (its arguments by name), ``dtype`` (the older form's
    ``dtype=``) and ``engine`` (the engine it runs on)."""

    __slots__ = ("ctx", "spec", "form", "args", "dtype", "engine")

    def __init__(self, ctx: Any, spec: InstructionSpec, form: Form, args: dict, dtype: Any, engine: str) -> None:
        self.ctx, self.spec, self.form, self.args, self.dtype, self.engine = ctx, spec, form, args, dtype, engine

    def destination(self, shape: tuple, default_dtype: Any) -> Tensor:
        """``dst`` of the current form, or the older form's new SBUF tile of ``shape``."""
        return destination(self.args, self.form, shape, self.dtype, default_dtype)

    def issue(self, outs: list, srcs: list, *, nbytes: int = 0, flops: int = 0, cycles: int = 0,
              engine: str | None = None, name: str | None = None, **detail: Any) -> Instruction:
        """Record the instruction in the trace (its engine and name from the row; an add through the
        row's ``sums`` parameter is a free-axis sum site of the precision flow)."""
        sums = self.spec.sums
        if sums:
            names = (sums,) if isinstance(sums, str) else sums
            sums = sums == "always" or any(_is_sum(self.args.get(p)) for p in names)
        return self.ctx.issue(engine or self.engine, name or key(self.spec), outs, srcs, nbytes, flops, cycles,
                              bool(sums), detail)


def _is_sum(op: Any) -> bool:
    if op is None:
        return False
    try:
        return op_name(op) in _SUM_OPERATORS
    except TypeError:
        return False


# The older interface's ``mask=`` (front.masks), given by ``front.install()``: the machinery below
# the front only knows that a row takes it.
MASKED: dict[str, Callable] = {}


def _one_psum_operand(ctx: Any, spec: InstructionSpec, values: dict) -> None:
    """The row's operands of which at most one may be in PSUM (nki.isa docstrings of the
    instructions that read two tiles: one may be in PSUM)."""
    in_psum = [values[p] for p in spec.one_psum
               if isinstance(values.get(p), Tensor) and values[p].base.memory.name == "psum"]
    if len(in_psum) > 1:
        ctx.find("engine_access", "error", f"{spec.name} reads {' and '.join(t.name for t in in_psum)} from PSUM; at "
                 "most one operand may be in PSUM", spec.source or doc(spec.name))


def _unsupported_entry(spec: InstructionSpec) -> Callable:
    """The public function of a row numeq does not implement: importable, raising when called."""

    def instruction(*args: Any, **kwargs: Any) -> Any:
        raise _unsupported_call(spec)

    return instruction


def _unsupported_call(spec: InstructionSpec) -> Exception:
    """What calling a row without semantics raises: a target_generation finding where the target is
    older than the instruction (a documented fact, said before what numeq lacks), else Unsupported."""
    if active() and spec.since > 2 and current().target.generation < spec.since:
        ctx = current()
        return KernelFault(ctx.find("target_generation", "error", f"{spec.name} is available on NeuronCore-v"
                                    f"{spec.since} and newer; the target {ctx.target.name} is {ctx.target.core}",
                                    spec.source))
    return Unsupported(f"{where() if active() else '<kernel>'}: numeq.nki does not implement {spec.module}.{spec.name} "
                       f"({spec.source}); see docs/nki.md's table of NKI names")


def entry(spec: InstructionSpec) -> Callable:
    """The public ``nki.isa`` function of row ``spec``."""
    if not spec.implemented:
        instruction = _unsupported_entry(spec)
        instruction.__name__ = instruction.__qualname__ = spec.name
        instruction.__module__ = "numeq." + spec.module
        return instruction
    semantics, forms, name, default_engine = spec.semantics, list(spec.forms), spec.name, spec.engine
    shown = spec.qualified
    takes_engine, takes_mask, since, one_psum = bool(spec.engines), spec.mask != "none", spec.since, spec.one_psum

    def instruction(*args: Any, **kwargs: Any) -> Any:
        ctx = current()
        eng = default_engine
        if kwargs:
            mask = kwargs.get("mask")
            if isinstance(mask, (bool, np.bool_)):
                # A constant mask (the older interface's mask= of a Python comparison, as AWS's kernels
                # write per-tile causal masks): True computes every element, False none (no instruction).
                if not mask:
                    return MASKED["nothing"]
                kwargs = {k: v for k, v in kwargs.items() if k != "mask"}
            elif takes_mask and mask is not None:
                return MASKED["call"](instruction, spec.mask == "rows", args, kwargs)
            if takes_engine and "engine" in kwargs:
                eng = engine_name(kwargs.pop("engine"), default_engine)
                if eng not in spec.engines:
                    raise ValueError(f"engine: {shown} runs on {', '.join(spec.engines)}, not {eng}")
        form, values, dtype = bind(name, args, kwargs, forms, shown)
        clipped = MASKED.get("clipped")
        for v in values.values():
            # A tile reaching past its tensor, used without a mask to keep inside, or an access
            # pattern built past its buffer: an error where an instruction uses it.
            if type(v) is clipped or type(v) is OutsideBuffer:
                raise v.fault()
        if one_psum:
            _one_psum_operand(ctx, spec, values)
        ctx.at = kernel_line(sys._getframe(1))  # None when numeq itself called it (the front)
        outer, ctx.engine = ctx.engine, eng
        try:
            if since > 2 and ctx.target.generation < since:
                ctx.find("target_generation", "error", f"{name} is available on NeuronCore-v{since} and newer; the "
                         f"target {ctx.target.name} is {ctx.target.core}", spec.source or doc(name))
            call = Call(ctx, spec, form, values, dtype, eng)
            return semantics(call) if ctx.radii is None else _bounds.walk(ctx, name, call, semantics)
        finally:
            ctx.at = None
            ctx.engine = outer

    instruction.__name__ = instruction.__qualname__ = name
    instruction.__doc__ = spec.doc or semantics.__doc__
    instruction.__module__ = "numeq." + spec.module
    return instruction


_PUBLIC: dict[str, Callable] = {}


def public_functions() -> dict[str, Callable]:
    """``nki.isa``'s instruction functions, one per row of the table (made once, when the engine
    modules have registered their rows: ``nki.isa`` imports them first)."""
    if not _PUBLIC:
        _PUBLIC.update((name, entry(spec)) for name, spec in sorted(INSTRUCTIONS.items()) if spec.module == "nki.isa")
    return _PUBLIC


def language_functions(public: bool = False) -> dict[str, Callable]:
    """The ``nki.language`` functions that are rows of the table, by their names (``rand``);
    ``public``: only those the language module exports as they are."""
    return {spec.name: entry(spec) for spec in INSTRUCTIONS.values()
            if spec.module == "nki.language" and (spec.public or not public)}


def module_functions(module: str) -> dict[str, Callable]:
    """The functions of NKI module ``module`` (``nki.collectives``) that are rows of the table."""
    return {spec.name: entry(spec) for spec in INSTRUCTIONS.values() if spec.module == module}


def call(name: str, *args: Any, **kwargs: Any) -> Any:
    """Instruction ``name`` called as a kernel calls it (an instruction defined as another with more
    arguments: activation_reduce as activation)."""
    return _PUBLIC[name](*args, **kwargs)
