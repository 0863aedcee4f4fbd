"""What the instructions' semantics share: the older form's destination, per-partition operands,
partial writes and the findings their documented limits raise.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ..machine import arithmetic as _arithmetic
from ..machine.alu import ALU, alu_table, op_name
from ..machine.context import Context, KernelFault, current
from ..machine.memory import Tensor
from ..machine.psum import settle
from .access import as_tensor, new_tile, read, write
from .forms import Form

__all__ = ["constraint", "per_partition", "flat", "alu_fn", "reduce_name", "lanes",
           "write_where", "raw", "destination", "doc"]


def destination(vals: dict, form: Form, shape: tuple, dtype: Any, default_dtype: Any) -> Tensor:
    """The dst of the current form, or the older form's new SBUF tile of ``shape``."""
    if form.returns:
        return new_tile(tuple(int(s) for s in shape), dtype if dtype is not None else default_dtype)
    return as_tensor(vals["dst"], "dst")


# --- findings ------------------------------------------------------------------------------------

def doc(instruction: str) -> str:
    return f"documented: nki.isa.{instruction} docstring"


def constraint(ctx: Context, instruction: str, message: str, source: str | None = None) -> None:
    """An operand outside what the instruction documents (a dtype, a size, an operator, a value)."""
    ctx.find("instruction_constraint", "error", f"{instruction}: {message}", source or doc(instruction))


def shape_fault(ctx: Context, instruction: str, message: str) -> KernelFault:
    return KernelFault(ctx.find("shape_mismatch", "error", f"{instruction}: {message}", doc(instruction)))


# --- operands ------------------------------------------------------------------------------------

def accumulator_out(ctx: Context, instruction: str, reduce_res: Any, acc: np.ndarray | None, partitions: int,
                    negate: bool = False) -> list:
    """Write the Vector accumulator's registers ``acc`` [P] (None: ``idle`` performed no reduction)
    into ``reduce_res`` [P, 1] (negated with ``negate``): [the tile written], or [] when there is
    none to write (no reduce_res; idle, a constraint finding that leaves it unwritten)."""
    if reduce_res is None:
        return []
    res = as_tensor(reduce_res, "reduce_res")
    if acc is None:
        constraint(ctx, instruction, f"reduce_res {res.name} is given with reduce_cmd=idle, which performs no "
                   "reduction: it is left unwritten")
        return []
    if res.shape[0] != partitions or res.free_size() != 1:
        raise shape_fault(ctx, instruction, f"reduce_res {res.name} has shape {res.shape}; it takes one element per "
                                            f"partition for {partitions} partitions")
    write(ctx, res, (np.negative(acc) if negate else acc).reshape(-1, 1))
    return [res]


def flat(x: np.ndarray) -> np.ndarray:
    """A tile's values as [partitions, free elements] (instructions see the free axes flattened)."""
    return x.reshape(x.shape[0], -1) if x.ndim else x.reshape(1, 1)


def raw(ctx: Context, t: Any, parameter: str, engine: str = "vector") -> np.ndarray:
    """The stored data of operand ``t`` (bit-exact instructions), after the same checks ``read``
    makes (partitions, engine access, unwritten bytes)."""
    return read(ctx, as_tensor(t, parameter), parameter, engine, bits=True)


def per_partition(ctx: Context, x: Any, partitions: int, instruction: str, parameter: str,
                  engine: str = "vector") -> np.ndarray:
    """A scalar operand or a (P, 1) tile as fp32 [P, 1] (broadcast along the free axis)."""
    if isinstance(x, Tensor):
        v = flat(read(ctx, x, parameter, engine))
        if v.shape != (partitions, 1):
            raise shape_fault(ctx, instruction, f"{parameter} {x.name} has shape {x.shape}; it takes one element per "
                                                f"partition for {partitions} partitions")
        return v
    if x is None or isinstance(x, bool) or not isinstance(x, (int, float, np.number)):
        raise TypeError(f"{parameter}: expected a number or a ({partitions}, 1) tile, got {x!r}")
    if _arithmetic.EXACT:  # the kernel's constant as it wrote it (the engines' fp32 immediate rounds it)
        return np.full((partitions, 1), x, dtype=np.float64)
    return np.full((partitions, 1), np.float32(x), dtype=np.float32)


def alu_fn(op: Any, parameter: str) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """The fp32 ALU function of operator ``op`` (``machine.alu.ALU``)."""
    name = op_name(op, parameter)
    table = alu_table()
    f = table.get(name) or table.get(_REDUCE_ALIASES.get(name, ""))
    if f is None:
        raise current().unsupported(f"the ALU operator {name!r} given as {parameter} (known: {', '.join(ALU)})")
    return f


_REDUCE_ALIASES = {"max": "maximum", "amax": "maximum", "maximum": "maximum", "min": "minimum", "amin": "minimum",
                   "minimum": "minimum", "add": "add", "sum": "add", "multiply": "multiply", "mult": "multiply",
                   "prod": "multiply", "subtract": "subtract", "average": "average", "mean": "average",
                   "bitwise_or": "bitwise_or", "bitwise_and": "bitwise_and"}


def reduce_name(op: Any, parameter: str) -> str:
    """A reduction operator's canonical name (``np.max``, ``nl.maximum`` -> ``maximum``)."""
    name = op_name(op, parameter)
    return _REDUCE_ALIASES.get(name, name)


def lanes(t: Tensor) -> np.ndarray:
    """The absolute partitions (accumulator lanes) a view's rows use (an off-chip operand, which
    an engine cannot read, is given the first lanes)."""
    if not t.base.memory.on_chip:
        return np.arange(t.shape[0] if t.ndim else 1) % int(current().target["partitions"])
    first, count, step = t.partitions()
    return first + np.arange(count) * step


# --- writes --------------------------------------------------------------------------------------

def write_where(ctx: Context, dst: Tensor, chosen: np.ndarray, values: np.ndarray | None = None,
                bits: np.ndarray | None = None) -> None:
    """Write ``values`` (or ``bits``) into the elements of dst where ``chosen``; the others keep
    their data, written mask and PSUM writer (a predicated write leaves them unmodified)."""
    chosen = np.broadcast_to(chosen.reshape(dst.shape) if chosen.size == dst.size else chosen, dst.shape)
    if dst.base.id in ctx.pending:  # a pending matmul chain there: its values are what stays
        settle(ctx, dst.base)
    old_mask = dst.mask.copy()  # first: made now, the mask zeroes bytes nothing wrote (Allocation.mask)
    old_data = dst.data.copy()
    old_writer = None if dst.writer is None else dst.writer.copy()
    if values is not None:
        values = np.where(chosen, np.asarray(values).reshape(dst.shape), 0).astype(np.asarray(values).dtype)
    write(ctx, dst, values, bits=bits)
    keep = ~chosen
    dst.data[keep] = old_data[keep]
    dst.mask[keep] = old_mask[keep]
    if keep.any() and (old_mask[keep] != dst.base.full).any():
        dst.base.complete = False  # elements left unwritten stay unwritten
    if old_writer is not None:
        dst.writer[keep] = old_writer[keep]
        dst.base.writer_all = None
