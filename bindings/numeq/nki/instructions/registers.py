"""The engine sequencers' registers as rows of the instruction table: ``register_alloc``,
``register_move``, ``register_load``, ``register_store``, and ``VirtualRegister``, the handle a
kernel holds (nki.isa API reference).

A register holds a 32-bit integer ("64x 32-bit registers per engine sequencer in NeuronCore
v2-v4", register_alloc docs), read as a signed int32 where it bounds a loop (``nl.fori_loop``,
``nl.dynamic_range``), conditions one (``nl.while_loop``, ``while reg:``) or offsets an indirect
DMA (``t.ap(scalar_offset=reg)``). The register file is the run's: its values live on the run's
``Context`` (attribute ``register_file``, a list: a register is a slot of it), so a register made
in one run is refused in another. What the documentation leaves open is named:

- ``register_overflow``: a value that does not fit where it goes (an immediate outside int32, a
  uint32 element at or above 2^31, a value too wide for the integer tile register_store writes);
- ``register_unwritten``: reading a register ``register_alloc()`` left uninitialised;
- ``register_float``: what register_load / register_store do with a float tile;
- ``register_loop_bound`` (read by ``nl.fori_loop`` / ``nl.dynamic_range``): when a register bound
  is read.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..machine import arithmetic as _numerics
from ..machine.context import Context, KernelFault, Unsupported, assigned_name, current, where
from ..machine.memory import Tensor
from .access import as_tensor, settled, write
from .forms import Form
from .operands import constraint, doc
from .path import Call, call
from .table import instruction

__all__ = ["VirtualRegister", "read_register", "write_register", "register_value", "new_register"]

_INT32_MIN, _INT32_MAX = -(1 << 31), (1 << 31) - 1
_OVERFLOW = ("register_overflow",)


def _file(ctx: Context) -> list:
    """The run's register file: one slot per register, its int32 value or None (never written)."""
    return ctx.__dict__.setdefault("register_file", [])


class VirtualRegister:
    """A register of an engine sequencer holding a 32-bit integer (nki.isa.VirtualRegister):
    allocated by ``nisa.register_alloc()``, written by ``register_move`` / ``register_load``, read
    by ``register_store``, ``register_move``, ``t.ap(scalar_offset=)``, the bounds of
    ``nl.fori_loop`` / ``nl.dynamic_range``, the condition of ``nl.while_loop`` and ``while reg:``
    (its truth: nonzero; nki.isa.VirtualRegister docs). ``VirtualRegister(state, frozen)`` makes one
    directly: ``state`` an int initial value or None; ``frozen`` refuses writes."""

    __slots__ = ("slot", "file", "name", "frozen")

    def __init__(self, state: Any = None, frozen: bool = False) -> None:
        ctx = current()
        file = _file(ctx)
        self.file, self.slot, self.frozen = file, len(file), bool(frozen)
        file.append(None)
        self.name = assigned_name() or f"register{self.slot}"
        if state is not None:
            file[self.slot] = _immediate(ctx, state, "state", "VirtualRegister")

    def __bool__(self) -> bool:
        # ``while reg:`` (the VirtualRegister docs' dynamic while loop): the register's value now.
        return read_register(current(), self, "the condition") != 0

    def __index__(self) -> int:
        raise TypeError(f"{self.name}: a VirtualRegister's value is the device's at run time, not a Python int; "
                        "store it to a tile (nisa.register_store) or loop over it (nl.dynamic_range, nl.fori_loop)")

    __int__ = __index__

    def runtime_value(self, ctx: Context, parameter: str) -> int:
        """The register's value now, for the machine room's runtime addressing (machine.indirect
        reads a register through this method: it imports nothing from the instruction layer)."""
        return read_register(ctx, self, parameter)

    def __repr__(self) -> str:
        return f"VirtualRegister({self.name})"


def new_register(ctx: Context, value: int, name: str = "") -> VirtualRegister:
    """A register holding ``value`` (an int32), as a loop passes its index or condition by value."""
    reg = VirtualRegister.__new__(VirtualRegister)
    file = _file(ctx)
    reg.file, reg.slot, reg.frozen = file, len(file), False
    reg.name = name or f"register{reg.slot}"
    file.append(int(value))
    return reg


def _register(ctx: Context, reg: Any, parameter: str) -> VirtualRegister:
    if not isinstance(reg, VirtualRegister):
        raise TypeError(f"{parameter}: expected a VirtualRegister (nisa.register_alloc()), got {type(reg).__name__}")
    if reg.file is not ctx.__dict__.get("register_file"):
        raise ValueError(f"{parameter}: register {reg.name} belongs to another kernel run")
    return reg


def _fits(ctx: Context, value: int, lo: int, hi: int, what: str, instruction_name: str) -> int:
    """``value`` where it fits [lo, hi]; else its low bits in that range (two's complement), or an
    error that stops the run (assumption ``register_overflow``)."""
    if lo <= value <= hi:
        return value
    if ctx.assumptions["register_overflow"] == "error":
        raise KernelFault(ctx.find("instruction_constraint", "error", f"{instruction_name}: {what} {value} does not fit "
                                   f"[{lo}, {hi}] (assumption register_overflow=error)", doc(instruction_name)))
    span = hi - lo + 1
    return (value - lo) % span + lo


def _immediate(ctx: Context, x: Any, parameter: str, instruction_name: str) -> int:
    """A compile-time integer into a register's signed 32 bits."""
    if isinstance(x, bool) or not isinstance(x, (int, np.integer)):
        raise TypeError(f"{parameter}: nisa.{instruction_name} takes a compile-time integer here, got {x!r}")
    return _fits(ctx, int(x), _INT32_MIN, _INT32_MAX, f"{parameter}", instruction_name)


def read_register(ctx: Context, reg: Any, parameter: str) -> int:
    """The int32 value of register ``reg``. One no instruction wrote is an error that stops the
    run, or reads 0 (assumption ``register_unwritten``)."""
    reg = _register(ctx, reg, parameter)
    value = reg.file[reg.slot]
    if value is None:
        if ctx.assumptions["register_unwritten"] == "zero":
            return 0
        raise KernelFault(ctx.find("read_uninitialised", "error", f"{parameter}: register {reg.name} is read before "
                                   "any instruction wrote it (nisa.register_alloc() without a value allocates an "
                                   "uninitialized register)", "documented: nki.isa.register_alloc docstring"))
    return value


def register_value(ctx: Context, x: Any, parameter: str) -> int:
    """An int or a register's value (a loop bound)."""
    if isinstance(x, VirtualRegister):
        return read_register(ctx, x, parameter)
    if isinstance(x, bool) or not isinstance(x, (int, np.integer)):
        raise TypeError(f"{parameter}: expected an int or a VirtualRegister, got {x!r}")
    return int(x)


def write_register(ctx: Context, reg: Any, value: int, parameter: str = "dst") -> None:
    reg = _register(ctx, reg, parameter)
    if reg.frozen:
        raise TypeError(f"{parameter}: register {reg.name} is frozen (VirtualRegister(frozen=True))")
    reg.file[reg.slot] = int(value)


def _one_element(ctx: Context, t: Tensor, parameter: str, name: str) -> None:
    """register_load / register_store's tensor: exactly one element (shape [1] or [1, 1]) in HBM
    or SBUF (their docstrings)."""
    if t.size != 1:
        raise KernelFault(ctx.find("instruction_constraint", "error", f"{name}: {parameter} {t.name} has shape "
                                   f"{t.shape}; it takes exactly one element (shape [1] or [1, 1])", doc(name)))
    if tuple(t.shape) not in ((1,), (1, 1)):
        constraint(ctx, name, f"{parameter} {t.name} has shape {t.shape}; it takes shape [1] or [1, 1]")
    if t.base.memory.name == "psum":
        constraint(ctx, name, f"{parameter} {t.name} is in PSUM; it takes a tensor in HBM or SBUF")
    if t.dtype.itemsize > 4:
        constraint(ctx, name, f"{parameter} {t.name} is {t.dtype}; a register holds up to 32 bits")


# --- the instructions ----------------------------------------------------------------------------

@instruction("register_alloc", engine="unknown", assumptions=_OVERFLOW, forms=[Form("current", "x: any = None")])
def register_alloc(c: Call) -> VirtualRegister:
    """A new register: uninitialised (x None) or holding the immediate integer x (nki.isa
    register_alloc docs). The compiler places it on an engine sequencer; numeq traces it on no
    engine."""
    x = c.args["x"]
    if isinstance(x, Tensor):
        # A one-element tile: the register starts with its value. Not in the docstring (None or an
        # int), but AWS's own nki-library allocates registers so (moe_tkg: register_alloc(t[0, 0])):
        # register_alloc, then register_load of the tile.
        reg = call("register_alloc")
        call("register_load", reg, x)
        return reg
    if x is not None and (isinstance(x, bool) or not isinstance(x, (int, np.integer))):
        raise TypeError(f"x: nisa.register_alloc takes None (an uninitialized register) or an int (its initial value), "
                        f"got {type(x).__name__}; load a tile's value with nisa.register_load")
    reg = VirtualRegister.__new__(VirtualRegister)
    file = _file(c.ctx)
    reg.file, reg.slot, reg.frozen = file, len(file), False
    file.append(None if x is None else _immediate(c.ctx, x, "x", "register_alloc"))
    reg.name = assigned_name() or f"register{reg.slot}"
    c.issue([], [], register=reg.name, value=file[reg.slot])
    return reg


@instruction("register_move", engine="unknown", assumptions=_OVERFLOW, forms=[Form("current", "dst: any, src: any")])
def register_move(c: Call) -> None:
    """dst = src: a compile-time integer or another register's value (nki.isa.register_move docs);
    it touches no memory."""
    ctx, dst, src = c.ctx, c.args["dst"], c.args["src"]
    _register(ctx, dst, "dst")
    value = read_register(ctx, src, "src") if isinstance(src, VirtualRegister) else _immediate(
        ctx, src, "src", "register_move")
    write_register(ctx, dst, value)
    c.issue([], [], register=dst.name, value=value)


@instruction("register_load", engine="unknown", assumptions=_OVERFLOW + ("register_float",), forms=[
    Form("current", "dst: any, src: tensor")])
def register_load(c: Call) -> None:
    """dst = the one element of tensor src (HBM or SBUF, shape [1] or [1, 1]; nki.isa.register_load
    docs): an integer element's value (into int32 by ``register_overflow``); a float element's by
    assumption ``register_float``."""
    ctx, dst, src = c.ctx, c.args["dst"], as_tensor(c.args["src"], "src")
    if not ctx.values:
        raise Unsupported(f"{where()}: numeq.nki.run(values=False) cannot follow register_load of {src.name}: the "
                          "kernel's control flow reads a tile's value, which a run without values does not compute; "
                          "run it with values=True")
    _register(ctx, dst, "dst")
    _one_element(ctx, src, "src", "register_load")
    settled(ctx, src)
    if not src.base.complete and (src.mask != src.base.full).any():
        raise KernelFault(ctx.find("read_uninitialised", "error", f"register_load: src {src.name} is read before any "
                                   "instruction wrote it", "documented: tile contents start undefined "
                                   "(nki.language.ndarray docs)"))
    element = np.ascontiguousarray(src.data).reshape(-1)[:1]
    if src.dtype.kind == "int":
        value = _fits(ctx, int(element[0]), _INT32_MIN, _INT32_MAX, f"src {src.name}'s value", "register_load")
    elif ctx.assumptions["register_float"] == "bits":
        if element.dtype == np.float64:  # only Run.exact()'s tiles hold binary64
            raise Unsupported(f"{where()}: Run.exact() cannot follow the kernel here: register_load reads the bits "
                              f"of the float tile {src.name} (assumption register_float=bits), and the exact "
                              "dataflow keeps values, not the hardware's bit patterns")
        word = int(element.view(np.dtype(f"u{element.itemsize}"))[0])
        value = word - (1 << 32) if word > _INT32_MAX else word
    else:
        x = float(_numerics.fp32_values(element, src.dtype)[0])
        if not np.isfinite(x):
            raise KernelFault(ctx.find("instruction_constraint", "error", f"register_load: src {src.name} holds {x}, "
                                       "which no integer register holds (assumption register_float=truncate)",
                                       doc("register_load")))
        value = _fits(ctx, int(x), _INT32_MIN, _INT32_MAX, f"src {src.name}'s value", "register_load")
    write_register(ctx, dst, value)
    c.issue([], [src], nbytes=src.dtype.itemsize, register=dst.name, value=value)


@instruction("register_store", engine="unknown", assumptions=_OVERFLOW + ("register_float",), forms=[
    Form("current", "dst: tensor, src: any")])
def register_store(c: Call) -> None:
    """dst's one element (HBM or SBUF, shape [1] or [1, 1]) = register src's value
    (nki.isa.register_store docs): into an integer dtype as that value (``register_overflow`` where
    it does not fit), into a float dtype by assumption ``register_float``."""
    ctx, dst, src = c.ctx, as_tensor(c.args["dst"], "dst"), c.args["src"]
    value = read_register(ctx, src, "src")
    _one_element(ctx, dst, "dst", "register_store")
    d = dst.dtype
    if d.kind == "int":
        info = np.iinfo(d.storage)
        bits = np.asarray(_fits(ctx, value, int(info.min), int(info.max), f"register {src.name}'s value",
                                "register_store"), d.storage)
        write(ctx, dst, None, bits=bits.reshape(dst.shape))
    elif ctx.assumptions["register_float"] == "bits":
        word = np.asarray(value & ((1 << (8 * d.itemsize)) - 1), np.dtype(f"u{d.itemsize}"))
        write(ctx, dst, None, bits=word.view(d.storage).reshape(dst.shape))
    else:
        write(ctx, dst, np.full(dst.shape, float(value), np.float64))
    c.issue([dst], [], nbytes=d.itemsize, register=src.name, value=value)
