"""What orders a grid's programs' accesses to shared HBM: each element's last writer and reader,
and how many core_barriers each had passed then (its epoch). An access to elements another
program wrote (or, for a write, read) in an epoch this program has not left is unordered on the
hardware, where the programs run at once: the ``shared_hbm_race`` finding (the rule book's,
``machine.rules``), named at the later access's line.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .context import Context

__all__ = ["program_reads", "program_writes"]


def _epoch(ctx: Context) -> int:
    """The core_barriers the running program has passed (machine.cores; 0 without them)."""
    return ctx.cores.current.epoch if ctx.cores is not None and len(ctx.cores.programs) > 1 else 0


def _hbm_owners(ctx: Context, t: Any) -> Any:
    """(the program that last wrote each element of HBM view ``t``, the barrier epoch it wrote in),
    as views of the buffer's records, or None where they are not kept (one program, private HBM,
    a view of another element size or with negative strides)."""
    base = t.base
    if math.prod(ctx.grid) < 2 or base.memory.name == "private_hbm" or t.data.itemsize != base.data.itemsize:
        return None  # (an empty grid is one program)
    if base.program_access is None:
        # Per element: the last writer, its epoch, the last reader, its epoch (-1: none yet).
        base.program_access = np.full((base.data.size, 4), -1, np.int32)
        base.program_access[:, 1::2] = 0
    item = base.data.itemsize
    offset = (t.data.__array_interface__["data"][0] - base.address) // item
    if offset < 0 or any(s < 0 for s in t.data.strides):
        return None
    records = base.program_access
    view = np.lib.stride_tricks.as_strided(records[offset:], shape=(*t.data.shape, 4),
                                           strides=(*(s // item * 16 for s in t.data.strides), 4))
    return view[..., 0], view[..., 1], view[..., 2], view[..., 3]


_RACE_SOURCE = ("documented: nki.language shared_hbm (visible to every program of the SPMD grid); NKI SPMD and "
                "logical NeuronCore guides; nki.isa.core_barrier (what orders two cores' accesses to shared HBM)")


def program_writes(ctx: Context, dst: Any) -> Any:
    """A DMA of an SPMD program (or logical core) is about to write HBM ``dst``. Returns what to call
    once it has: elements another program wrote with no core_barrier between the two writes, now
    holding other bits, are the ``shared_hbm_race`` finding. numeq runs the programs in turns
    (machine.cores); the hardware runs them at once (nki.language docs: shared_hbm is visible to
    every program; NKI's SPMD and LNC guides), so which write lands last is a race unless a
    barrier orders them (nki-library's cascaded_max test helper zeroes the whole output on each
    core, then each core stores its half). Programs writing the same bits (every program storing
    one result) race to no effect: no finding."""
    owners = _hbm_owners(ctx, dst)
    if owners is None:
        return None
    view, epochs, readers, read_epochs = owners
    me, epoch = int(np.ravel_multi_index(ctx.program, ctx.grid)), _epoch(ctx)
    # Another program's write or read with no barrier since (a barrier passed since orders them).
    wrote = (view >= 0) & (view != me) & (epochs >= epoch)
    read = (readers >= 0) & (readers != me) & (read_epochs >= epoch)
    clash = wrote | read
    before = dst.data[clash].copy() if clash.any() else None
    item = dst.base.data.itemsize

    def written() -> None:
        if before is not None:
            after = dst.data[clash]
            unsigned = np.dtype(f"u{item}")
            changed = before.view(unsigned) != after.view(unsigned)
            if changed.any():
                was_write = wrote[clash][changed]
                other = int((view if was_write[0] else readers)[clash][changed][0])
                other = tuple(int(i) for i in np.unravel_index(other, ctx.grid))
                what = ("wrote other values into" if was_write[0] else
                        "read before, so that on the hardware its read may see this write or not")
                ctx.find("shared_hbm_race", "error", f"program {tuple(int(i) for i in ctx.program)} writes "
                         f"{int(changed.sum())} elements of {dst.base.name} that program {other} {what}, with no "
                         "core_barrier between: the programs run at once on the hardware (numeq runs them in turns "
                         "and keeps this program's)", _RACE_SOURCE)
        view[...] = me
        epochs[...] = epoch

    return written


def program_reads(ctx: Context, src: Any) -> None:
    """A DMA of an SPMD program (or logical core) reads HBM ``src``: elements another program wrote
    with no core_barrier between its write and this read are the ``shared_hbm_race`` finding (on
    the hardware the read may come first and see what the element held before)."""
    owners = _hbm_owners(ctx, src) if src.base.memory.name == "shared_hbm" else None
    if owners is None:
        return
    view, epochs, readers, read_epochs = owners
    me, epoch = int(np.ravel_multi_index(ctx.program, ctx.grid)), _epoch(ctx)
    clash = (view >= 0) & (view != me) & (epochs >= epoch)
    readers[...] = me
    read_epochs[...] = epoch
    if clash.any():
        other = np.unravel_index(int(view[clash][0]), ctx.grid)
        ctx.find("shared_hbm_race", "error", f"program {tuple(int(i) for i in ctx.program)} reads {int(clash.sum())} "
                 f"elements of {src.base.name} that program {tuple(int(i) for i in other)} wrote with no core_barrier "
                 "between the write and the read: on the hardware the read may come first", _RACE_SOURCE)
