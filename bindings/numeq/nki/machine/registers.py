"""The engines' accumulator registers: one fp32 register per partition lane on the Vector engine and
one on the Scalar engine, driven by ``reduce_cmd`` (nki.isa docs: the Vector engine's are shared by
exponential, range_select, select_reduce, tensor_scalar_reduce and tensor_scalar_cumulative; the
Scalar engine's by activation, activation_reduce and activate2; they persist across
instructions).
"""

from __future__ import annotations

import enum
import weakref
from typing import Any

import numpy as np

from . import arithmetic as _numerics
from .context import Context

__all__ = ["Accumulator", "Cmd", "accumulate", "command", "fold", "vector_accumulator"]


class Cmd(enum.IntEnum):
    """``nisa.reduce_cmd`` (isa's constants), read by name: ``idle`` leaves the accumulator
    registers (their value is undefined after it: the docs say idle may still modify them),
    ``reset`` sets the operator's identity, ``reduce`` accumulates onto them, ``reset_reduce``
    resets then accumulates, ``load_reduce`` loads an initial value then accumulates."""

    idle = 0
    reset = 1
    reduce = 2
    reset_reduce = 3
    load_reduce = 4


def command(value: Any, parameter: str = "reduce_cmd") -> Cmd:
    """A ``reduce_cmd`` given as isa's constant (its name), an enum member or its number."""
    if isinstance(value, Cmd):
        return value
    name = getattr(value, "name", value)
    if isinstance(name, str) and name in Cmd.__members__:
        return Cmd[name]
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool) and 0 <= value <= 4:
        return Cmd(int(value))
    raise ValueError(f"{parameter}: expected a nisa.reduce_cmd ({', '.join(Cmd.__members__)}), got {value!r}")


class Accumulator:
    """One fp32 register per partition lane, undefined until an instruction resets or loads it
    (nki.isa docs: the accumulators are shared by exponential, range_select, select_reduce,
    tensor_scalar_reduce and tensor_scalar_cumulative, and persist across instructions)."""

    def __init__(self, partitions: int) -> None:
        self.values = np.zeros(partitions, dtype=_numerics.compute_dtype)
        self.defined = np.zeros(partitions, dtype=bool)


# Per run, the Vector engine's and the Scalar engine's registers (activation, activation_reduce and
# activate2 share the Scalar engine's; nki.isa docs).
_registers: "weakref.WeakKeyDictionary[Context, dict[str, Accumulator]]" = weakref.WeakKeyDictionary()

_IDENTITY = {"add": 0.0, "subtract": 0.0, "multiply": 1.0, "maximum": -np.inf, "minimum": np.inf}


def vector_accumulator(ctx: Context, engine: str = "vector") -> Accumulator:
    """The accumulator registers of ``engine`` ("vector" or "scalar") in this run."""
    engines = _registers.setdefault(ctx, {})
    if engine not in engines:
        engines[engine] = Accumulator(int(ctx.target["partitions"]))
    return engines[engine]


def fold(ctx: Context, op: str, start: np.ndarray, x: np.ndarray) -> np.ndarray:
    """``start`` [P] combined with every element of x [P, F] by ``op`` in fp32, as a register
    accumulating the stream: sums in the platform's ``vector_reduce_order`` (sequential: one add
    per element in order; pairwise: the register plus the plan's sum), products in order, max /
    min (order-free)."""
    if x.shape[1] == 0:
        return start
    if op == "add" and ctx.assumptions["vector_reduce_order"] != "sequential":
        return np.add(start, _numerics.reduce_fp32(x, "add", ctx.sum_platform()), dtype=_numerics.compute_dtype)
    if op in ("add", "multiply"):
        ufunc = np.add if op == "add" else np.multiply
        with np.errstate(all="ignore"):
            return ufunc.accumulate(np.concatenate([start[:, None], x], axis=1), axis=1, dtype=_numerics.compute_dtype)[:, -1]
    f = np.maximum if op == "maximum" else np.minimum
    return f(start, f.reduce(x, axis=1))


def accumulate(ctx: Context, instruction: str, rows: np.ndarray, cmd: Cmd, op: str, x: np.ndarray,
               init: np.ndarray | None = None, engine: str = "vector") -> np.ndarray | None:
    """Run ``cmd`` on ``engine``'s accumulator lanes ``rows`` with the fp32 results x [P, F]: the
    registers' new values [P], or None for ``idle`` (after which the Vector engine's are undefined;
    the Scalar engine's idle leaves them as they are, activation's pseudocode)."""
    acc = vector_accumulator(ctx, engine)
    if cmd == Cmd.idle:
        if engine == "vector":
            acc.defined[rows] = False
        return None
    if cmd in (Cmd.reset, Cmd.reset_reduce):
        start = np.full(len(rows), _IDENTITY[op], dtype=_numerics.compute_dtype)
    elif cmd == Cmd.load_reduce:
        if init is None:
            raise TypeError(f"{instruction}: reduce_cmd=load_reduce needs the initial value "
                            "(reduce_init / imm1)")
        start = init.reshape(-1).astype(_numerics.compute_dtype)
    else:
        if not acc.defined[rows].all():
            ctx.find("accumulator_undefined", "error", f"{instruction} continues (reduce_cmd=reduce) the {engine} "
                     "engine's accumulator, which no instruction has reset or loaded since it was last undefined",
                     "documented: nki.isa.select_reduce / tensor_scalar_reduce docstrings (registers are reset by "
                     "reset_reduce or load_reduce; idle may still modify them)")
        start = np.where(acc.defined[rows], acc.values[rows], np.float32(np.nan)).astype(_numerics.compute_dtype)
    result = start if cmd == Cmd.reset else fold(ctx, op, start, x)
    acc.values[rows] = result
    acc.defined[rows] = True
    return result


