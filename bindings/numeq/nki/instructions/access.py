"""What every instruction shares: reading operands (with the poison and access checks), writing a
destination (the cast into its dtype with the target's output rounding, the written mask, PSUM's
writer codes), resolving the destination of the older value-returning form, and recording the
instruction in the trace with its cost estimate.

Costs (SDK 2.26 nki.isa docstrings, removed later [doc, dated]; FACTS.md s3): most Vector / Scalar /
GpSimd instructions take about max(64, N) cycles for N elements per partition; nc_matmul about
max(min(64, N_stationary), N_moving) cycles, 4x for fp32 inputs. Estimates, not latencies.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..machine import arithmetic as _numerics
from ..machine import precision as _precision
from ..machine import placement as _placement
from ..machine import psum as _psum
from ..machine import rules as _rules
from ..machine.context import Context, KernelFault, Unsupported, current, where
from ..machine.dtypes import dtype_of
from ..machine.memory import MEMORIES, WRITER_MATMUL, WRITER_OTHER, WRITER_READ, Allocation, OutsideBuffer, Tensor
from ..machine.context import site, where as _where

__all__ = ["read", "write", "new_tile", "cost_elementwise", "as_tensor", "same_shape"]

def as_tensor(x: Any, parameter: str) -> Tensor:
    if isinstance(x, Tensor):
        return x
    raise TypeError(f"{parameter}: expected an NKI tensor (nl.ndarray or a view of one), got {type(x).__name__}")


_F32 = np.dtype(np.float32)


def read(ctx: Context, t: Any, parameter: str, engine: str = "vector", rows: bool = False,
         bits: bool = False) -> np.ndarray:
    """The fp32 values of operand ``t`` (checked: partitions, engine access, poison; ``rows``: the
    instruction works partition by partition, see ``_rules.check_read``); zeros in a run without
    values (``numeq.nki.run(values=False)``), after the same checks. ``bits``: its stored data
    instead, after the same checks (what bit-exact instructions and the MX instructions, which
    alone read a packed x4 tile, take)."""
    if type(t) is Tensor and t.checked is True and not bits:
        # The common case, decided at once: an on-chip view already checked, of an SBUF tile every
        # byte of which is written and no matmul chain is pending in (what the checks below pass).
        base = t.base
        if base.complete and not base.tracks_writer and base.placed is None and base.id not in ctx.pending:
            if not ctx.values:
                return _zeros(t.shape)
            data = t.data
            return data if data.dtype is _F32 else _values(ctx, t, parameter)
    t = as_tensor(t, parameter)
    if type(t) is OutsideBuffer:  # an access pattern past its buffer, read: the error it deferred
        raise t.fault()
    if not t.base.memory.on_chip and engine != "dma":
        _rules.off_chip(ctx, t, engine, parameter)
    _rules.check_on_chip(ctx, t)
    _rules.check_read(ctx, t, rows=rows)
    if engine == "gpsimd" and t.base.memory.name == "psum":
        _rules.check_engine_access(ctx, engine, [t], parameter)
    if t.base.tracks_writer and engine != "tensor":
        evacuated(t)
    if bits:
        return t.data
    if not ctx.values:
        return _zeros(t.shape)
    values = _values(ctx, t, parameter)
    if not t.base.complete and t.mask.min() != t.base.full:
        values = np.where(t.mask == t.base.full, values, np.float32(np.nan))
    return values


def _values(ctx: Context, t: Any, parameter: str) -> np.ndarray:
    """fp32 values of a tile whose storage is not fp32; a packed MX tile has none an engine reads."""
    if t.dtype.kind == "packed":
        raise packed_fault(ctx, t, parameter)
    return _numerics.fp32_values(t.data, t.dtype)


def packed_fault(ctx: Context, t: Any, parameter: str) -> KernelFault:
    """An instruction other than the MX ones reads or writes values of a packed x4 tile."""
    return KernelFault(ctx.find("mx_dtype", "error", f"{parameter} {t.name} is {t.dtype}, four MX values packed in "
                                "each element, which only nc_matmul_mx reads and quantize_mx writes (dma_copy and "
                                "a copy into the same dtype move its bits)",
                                "documented: nki.language API reference (\"custom data type for nki.isa.nc_matmul_mx "
                                "on NeuronCore-v4\"); nki.isa.quantize_mx and nc_matmul_mx docstrings"))


def _zeros(shape: tuple) -> np.ndarray:
    """What a run without values computes on: one read-only array of zeros per shape."""
    zeros = _ZEROS.get(shape)
    if zeros is None:
        zeros = _ZEROS[shape] = np.zeros(shape, _F32)
        zeros.flags.writeable = False
    return zeros


_ZEROS: dict[tuple, np.ndarray] = {}


def output_rounding(ctx: Context) -> str:
    return ctx.assumptions["output_rounding"]


def write(ctx: Context, dst: Any, values: np.ndarray, writer: int = WRITER_OTHER, *, bits: np.ndarray | None = None,
          rounding: str | None = None) -> None:
    """Store fp32 (or float64) ``values`` into ``dst``: cast into its dtype with ``rounding``
    (default: the target's output rounding; or store ``bits`` already of dst's storage dtype),
    note a narrowing for the precision flow, mark the bytes written, record PSUM's writer."""
    if type(dst) is OutsideBuffer:  # an access pattern past its buffer, written: the error it deferred
        raise dst.fault()
    if _numerics.WATCH is not None:
        _watch_overflow(ctx, dst, values, bits, rounding)
    base = dst.base
    if not ctx.values:  # the bookkeeping of a write, no bytes
        _rules.check_on_chip(ctx, dst)
        before_write(ctx, dst)
        mark_written(ctx, dst, writer)
        if ctx.undefined is not None:
            leave_undefined(ctx, dst, ctx.undefined)
        return
    if (dst.checked is True and not base.tracks_writer and base.placed is None and ctx.undefined is None
            and (base.complete or (dst.data is base.data and base._mask is None))
            and base.id not in ctx.pending and base.id not in ctx.pinned):
        # The common cases, decided at once (what the path below does for them): into a checked
        # SBUF tile wholly written before, or written whole now, with nothing pending in it, either
        # bits of its own dtype or fp32 values into an fp32 tile (no cast, no narrowing).
        if bits is not None:
            fast = bits.shape == dst.shape
        else:
            fast = (rounding is None and type(values) is np.ndarray and values.dtype is _F32
                    and dst.dtype.format == "fp32" and values.shape == dst.shape and ctx.nearest_output)
            bits = values if fast else None
        if fast:
            dst.data[...] = bits
            base._uninitialised = False
            base.complete = True
            base.dirty = True
            return
    _rules.check_on_chip(ctx, dst)
    before_write(ctx, dst)
    if bits is None:
        if dst.dtype.kind == "packed":
            raise packed_fault(ctx, dst, "dst")
        values = np.asarray(values)
        if values.shape != dst.shape:
            values = same_shape(ctx, dst, values)
        bits = _numerics.cast_into(values, dst.dtype, rounding or output_rounding(ctx), seed=ctx.step)
        if dst.dtype.format in _precision.NARROW and not ctx.exact:
            _precision.record_write(ctx, dst, values, bits)
    elif bits.shape != dst.shape:
        bits = same_shape(ctx, dst, bits)
    dst.data[...] = bits
    mark_written(ctx, dst, writer)
    if ctx.undefined is not None:
        leave_undefined(ctx, dst, ctx.undefined)


def _watch_overflow(ctx: Context, dst: Any, values: Any, bits: Any, rounding: str | None) -> None:
    """A diagnostic rerun's watch: Inf values this write stores (computed, or made by the cast into
    dst's dtype), counted at the kernel's line (machine.arithmetic.WATCH["overflow"])."""
    if bits is not None or values is None or dst.dtype.kind != "float":
        return
    v = np.asarray(values)
    if v.dtype.kind != "f":
        return
    stored = np.asarray(_numerics.cast_into(v, dst.dtype, rounding or output_rounding(ctx)), dtype=np.float64)
    count = int(np.count_nonzero(np.isinf(stored)))
    if count:
        line = ctx.at or _where()
        lines = _numerics.WATCH["overflow"]
        lines[line] = lines.get(line, 0) + count


def read_partly(ctx: Context, t: Any, parameter: str, engine: str = "vector") -> tuple:
    """``read`` of an operand whose results do not follow its elements one for one (a transpose):
    (its fp32 values, NaN where nothing wrote; those elements as a (partitions, free) mask or
    None). The caller maps the mask onto its results and calls ``leave_undefined``."""
    saved, ctx.undefined = ctx.undefined, None
    try:
        values = read(ctx, t, parameter, engine, rows=True)
        return values, ctx.undefined
    finally:
        ctx.undefined = saved


def unwritten_operand(ctx: Context, t: Any, settle: bool = True) -> Any:
    """Operand ``t``'s unwritten elements as a (partitions, free) mask, None when every one is
    written (checked as ``_rules.check_read`` checks an elementwise operand; the caller maps them
    to its results and calls ``leave_undefined``)."""
    saved, ctx.undefined = ctx.undefined, None
    try:
        _rules.check_read(ctx, t, settle=settle, rows=True)
        return ctx.undefined
    finally:
        ctx.undefined = saved


def summed_undefined(ctx: Context, dst: Any, adds: Any, undefined: Any) -> Any:
    """The undefined results of a sum into PSUM ``dst``: ``undefined`` (of the addend, or None) and
    dst's own unwritten elements where it ``adds`` onto them (a sum onto undefined values stays
    undefined; elements it overwrites start afresh). A (partitions, free) mask, or None."""
    carried = unwritten_operand(ctx, dst, settle=False)  # adding onto a pending chain extends it
    if carried is None:
        return undefined
    carried = carried & (adds.reshape(carried.shape) if adds.ndim else adds)
    return carried if undefined is None else undefined | carried.reshape(undefined.shape)


def leave_undefined(ctx: Context, dst: Any, undefined: np.ndarray) -> None:
    """Results computed from unwritten operand elements stay unwritten in ``dst`` (``undefined``:
    (partitions, free) elementwise, or (partitions, 1) whole partitions; _rules.undefined)."""
    if not undefined.any():
        return
    origin = ctx.undefined_from
    if not dst.base.memory.on_chip and origin is not None and origin[2]:
        # Results of a tile nothing wrote stored to HBM: the likely mistake is that tile (its first
        # read is named). Undefined padding stored so stays undefined there (an output holding it
        # is output_partly_written: its caller reads the rest, as AWS's masked examples do).
        _rules.undefined_reach(ctx, origin, dst.name)
        return
    if undefined.size == dst.size:
        dst.mask[undefined.reshape(dst.shape)] = 0
    elif dst.ndim and len(undefined) == dst.shape[0]:
        rows = undefined.any(axis=1)
        mixed = rows & ~undefined.all(axis=1)
        if undefined.shape[1] > 1 and mixed.any():
            # A reduction over partitions holding written and unwritten elements: the undefined
            # ones reach the written ones' result (the rows a masked load left out entirely are
            # fine; AWS's examples reduce those and never store them).
            _rules.undefined_mixed(ctx, dst, int(undefined[mixed].sum()), int(mixed.sum()))
            return
        dst.mask[rows] = 0
    else:
        _rules.unread_finding(ctx, dst, int(undefined.sum()))
        return
    dst.base.complete = False
    if dst.base.undefined_from is None:
        dst.base.undefined_from = ctx.undefined_from


def before_write(ctx: Context, dst: Any) -> None:
    """What must happen before any instruction changes dst's bytes: a pending matmul chain in it
    is computed, and so is one that reads it (it keeps the operand by reference, _psum). A
    first write to part of a tile made uninitialised zeroes the rest (Allocation.mask)."""
    if ctx.radii is not None and not ctx.bounding:
        raise Unsupported(f"{where()}: Run.bound() cannot follow a write no instruction makes (the older "
                          f"interface's tile assignment into {dst.name}); write it with an nki.isa instruction")
    base = dst.base
    if base._uninitialised:
        if not base.covered_by(dst):
            base.data[...] = 0
        base._uninitialised = False
    if dst.base.id in ctx.pending:
        _psum.settle(ctx, dst.base)
    if dst.base.id in ctx.pinned:
        _psum.release(ctx, dst.base)
    if base.placed is not None:
        _placement.written(ctx, dst)


def settled(ctx: Context, src: Any) -> Any:
    """``src`` with any pending matmul chain in it computed (before its bytes are read directly)."""
    if src.base.id in ctx.pending:
        _psum.settle(ctx, src.base)
    return src


def mark_written(ctx: Context, dst: Any, writer: int = WRITER_OTHER) -> None:
    """dst's bytes are written (by ``writer``, in PSUM)."""
    base = dst.base
    whole = base.covered_by(dst)
    if not base.complete:
        if not whole:
            dst.mask[...] = base.full
        else:
            base.complete = True
            if base._mask is not None:  # a mask once made stays exact (views hold it)
                base._mask[...] = base.full
    base.dirty = True
    if base.placed is not None:
        _placement.written(ctx, dst)
    if base.tracks_writer:
        if not whole or (base._writer is not None and base.writer_all != writer):
            dst.writer[...] = writer
        base.writer_all = writer if whole or base.writer_all == writer else None
        if writer == WRITER_OTHER:
            base.holds_other = True


def evacuated(t: Any) -> None:
    """An instruction other than a matmul read PSUM view ``t``: its matmul results become
    WRITER_READ (the ``after_read`` accumulation rule reads them)."""
    base = t.base
    if base.writer_all is None:
        np.copyto(t.writer, WRITER_READ, where=t.writer == WRITER_MATMUL)
    elif base.writer_all == WRITER_MATMUL:
        whole = base.covered_by(t)
        if not whole or base._writer is not None:
            t.writer[...] = WRITER_READ
        base.writer_all = WRITER_READ if whole else None


def same_shape(ctx: Context, dst: Tensor, values: np.ndarray) -> np.ndarray:
    """``values`` laid out as ``dst``: the same shape, or the same partitions and free size
    (instructions see a tile as partitions x a flat free axis)."""
    if values.shape == dst.shape:
        return values
    if values.size == dst.size and values.ndim and dst.ndim and values.shape[0] == dst.shape[0]:
        return values.reshape(dst.shape)
    try:
        return np.broadcast_to(values, dst.shape)
    except ValueError:
        raise KernelFault(ctx.find("shape_mismatch", "error", f"result of shape {values.shape} does not fit the "
                                   f"destination {dst.name} of shape {dst.shape}",
                                   "documented: nki.isa instructions write a destination of the result's shape")) from None


def memory_name(buffer: Any) -> str:
    """The memory a ``buffer=`` names (nl.sbuf, nl.psum, "sbuf", ...; None: SBUF)."""
    if buffer is None:
        return "sbuf"
    name = getattr(buffer, "name", buffer)
    if name not in MEMORIES:
        raise ValueError(f"buffer: unknown memory {buffer!r}; valid: nl.{', nl.'.join(MEMORIES)}")
    return name


def new_tile(shape: tuple, dtype: Any, memory: str = "sbuf", name: str = "") -> Tensor:
    """A fresh tile (the older interface's value-returning instructions allocate their result). On
    SBUF / PSUM at least 2-D: the partition axis and one free axis, so a reduction of every free axis
    is (P, 1), not (P,) (NKI language guide: "SBUF and PSUM tensors are always at least 2-D")."""
    shape = tuple(int(s) for s in shape)
    if len(shape) < 2 and MEMORIES[memory].on_chip:
        shape = shape + (1,) * (2 - len(shape))
    ctx = current()
    line, assigned = site()
    d = _precision.allocated(ctx, line, dtype_of(dtype))
    b = ctx.allocate(Allocation(shape, d, MEMORIES[memory], name or assigned, line))
    return b.whole()


def cost_elementwise(t: Tensor) -> int:
    """max(64, N) cycles for N elements per partition (SDK 2.26 docstrings)."""
    return max(64, t.free_size())
