"""Direct allocation: where the older interface's ``nki.compiler`` placements put each logical tile
of a tensor (``ncc.sbuf.alloc`` / ``mod_alloc``, ``ncc.psum.alloc`` / ``mod_alloc``), whether the
memory holds it there, and the hazard a placement adds.

A tensor declared ``(B..., par_dim(P), F...)`` has one logical tile (P partitions x the F bytes) per
block index; the placement gives each its physical location, ``(start_partition, byte_addr)`` in
SBUF and ``(bank_id, start_partition, byte_addr)`` in PSUM. Modulo allocation is the documented
formula (SDK 2.26 ``nki/test/test_sbuf_modulo_alloc.py`` / ``test_psum_modulo_alloc.py``,
NKI_EXAMPLE_0, which the API reference quotes): block index ``i`` modulo the tile counts,
linearised row-major, times the tile size, plus the base; empty counts are all ones.

numeq keeps every logical tile's values apart. What the hardware would do differently is exactly a
*lifetime conflict* (SDK 2.26 NKI Direct Allocation Developer Guide, "#3. Lifetime Conflicts": tiles
on overlapping addresses that must be alive together; "the lifetime checks in the current release
are in-complete" and such a kernel "generates incorrect results numerically"): a tile read (or
accumulated into) after another tile on overlapping bytes was written since its own last write.
On the hardware that read sees the other tile's values; numeq reports it, with both lines
(``allocation_conflict``). Where the placement puts a tile outside the memory (past the partition's
bytes less the compiler's reserve, across a PSUM bank, at a start partition the ISA forbids) is
``allocation_address``.
"""

from __future__ import annotations

import inspect
import math
import operator
from typing import Any

import numpy as np

from .context import KernelFault, where
from .targets import start_partitions

__all__ = ["direct", "place", "place_at", "physical", "before_read", "written"]

_GUIDE = "documented: SDK 2.26 NKI Direct Allocation Developer Guide (nki_direct_allocation_guide.rst)"
_SBUF_ALLOC = "documented: SDK 2.26 nki.compiler.sbuf.alloc / mod_alloc API reference"
_PSUM_ALLOC = "documented: SDK 2.26 nki.compiler.psum.alloc / mod_alloc API reference"


def _modulo(base: int, counts: tuple, scale: int, index: tuple) -> int:
    """The documented modulo allocation: ``index`` modulo ``counts`` (empty: all ones), linearised
    row-major, times ``scale``, plus ``base``."""
    linear = 0
    for i, n in zip(index, counts or (1,) * len(index)):
        linear = linear * n + i % n
    return base + linear * scale


def _call(func: Any, index: tuple, pdim: int, fdim: int) -> Any:
    """An allocation function called as the documented parameters name them (``idx``,
    ``pdim_size``, ``fdim_size``: AWS's kernels bind others with functools.partial, e.g. nki-samples'
    allocated attention's ``partial(psum_addr, bank_map=...)`` of ``psum_addr(bank_map, idx, pdim_size,
    fdim_size)``), else by position."""
    try:
        inspect.signature(func).bind(idx=index, pdim_size=pdim, fdim_size=fdim)
    except (TypeError, ValueError):
        return func(index, pdim, fdim)
    return func(idx=index, pdim_size=pdim, fdim_size=fdim)


def _address(placement: Any, index: tuple, pdim: int, fdim: int) -> tuple:
    """A logical tile's physical location: (start_partition, byte_addr) in SBUF,
    (bank_id, start_partition, byte_addr) in PSUM."""
    a = placement.arguments
    if placement.how == "alloc":
        got = _call(a["func"], index, pdim, fdim)
        want = 2 if placement.name == "sbuf" else 3
        try:
            got = tuple(operator.index(v) for v in got)
        except TypeError:
            got = None
        if got is None or len(got) != want:
            what = "(start_partition, byte_addr)" if want == 2 else "(bank_id, start_partition, byte_addr)"
            raise TypeError(f"func: ncc.{placement.name}.alloc's function must return {what} as ints for block "
                            f"{index}; it returned {got!r}")
        return got
    if placement.name == "sbuf":
        return (_modulo(a["base_partition"], a["num_par_tiles"], pdim, index),
                _modulo(a["base_addr"], a["num_free_tiles"], fdim, index))
    return (_modulo(a["base_bank"], a["num_bank_tiles"], 1, index),
            _modulo(a["base_partition"], a["num_par_tiles"], pdim, index),
            _modulo(a["base_addr"], a["num_free_tiles"], fdim, index))


class Placed:
    """A direct allocation's physical layout: the logical tiles (``blocks``, the dims before the
    partition dim), each tile's physical extent, and each tile's last write (step, line)."""

    __slots__ = ("blocks", "tile_bytes", "extents", "last_write")

    def __init__(self, blocks: tuple, tile_bytes: int, extents: list) -> None:
        self.blocks = blocks
        self.tile_bytes = tile_bytes
        self.extents = extents
        self.last_write: list = [None] * len(extents)


def _fault(ctx: Any, message: str, source: str, line: str) -> KernelFault:
    return KernelFault(ctx.find("allocation_address", "error", message, source, at=line))


def _check_arguments(placement: Any, blocks: tuple, name: str) -> None:
    """mod_alloc's tile counts: empty or one per block dim (documented)."""
    for key in ("num_par_tiles", "num_free_tiles", "num_bank_tiles"):
        counts = placement.arguments.get(key, ())
        if counts and (len(counts) != len(blocks) or any(operator.index(n) < 1 for n in counts)):
            raise ValueError(f"{key}: {placement!r} for {name} with block dims {blocks} takes () or {len(blocks)} "
                             f"positive counts (one per block dim), got {counts}")


def direct(buffer: Any) -> Any:
    """``buffer`` when it is a direct allocation (nki.compiler's ``alloc`` / ``mod_alloc``
    placement), else None (a memory, or ``auto_alloc``: the compiler places the tensor)."""
    return buffer if getattr(buffer, "how", "auto_alloc") != "auto_alloc" else None


def place(ctx: Any, allocation: Any, placement: Any, nblock: int) -> None:
    """Record where ``placement`` puts each logical tile of ``allocation`` (stored partition first:
    (P, blocks..., free...); ``nblock`` block dims), checking each location against the memory."""
    shape = allocation.shape
    phys = physical(ctx)
    # The tracer runs an affine_range / sequential_range body once for all its iterations: a
    # placement computed in Python there (nki-samples' allocated attention advances cur_addr per
    # tensor inside its loop) is made once, at the first iteration, and holds for every one.
    # numeq runs the body per iteration, so later iterations take the first one's addresses.
    # (The current generation unrolls every loop but dynamic_range: NKI language guide,
    # "Specialization"; its ``address=`` placements, ``place_at``, are made per iteration.)
    indices = ctx.loop_indices
    here = (allocation.line, tuple(indices))
    occurrence = phys.counts[here] = phys.counts.get(here, -1) + 1  # the n-th placement at this line
    key = (allocation.line, tuple(i for d, i in enumerate(indices) if d in ctx.unrolled), occurrence, shape,
           allocation.dtype.itemsize)
    first = phys.lines.get(key)
    if first is not None and any(i for d, i in enumerate(indices) if d not in ctx.unrolled):
        allocation.placed = Placed(first.blocks, first.tile_bytes, first.extents)
        allocation.life.partition_bytes = 0
        return
    blocks = tuple(shape[1:1 + nblock])
    pdim = shape[0] if shape else 1
    tile_bytes = math.prod(shape[1 + nblock:]) * allocation.dtype.itemsize
    _check_arguments(placement, blocks, allocation.name)
    memory = placement.name
    line = allocation.line
    tgt = ctx.target
    partitions = int(tgt["partitions"])
    extents = []
    if memory == "sbuf":
        usable = int(tgt["sbuf_partition_bytes"]) - int(tgt["sbuf_compiler_reserved_bytes"])
        source = f"{_SBUF_ALLOC}; {tgt.spec('sbuf_compiler_reserved_bytes').cite()}"
    else:
        bank_bytes = int(tgt["psum_bank_bytes"])
        banks = int(tgt["psum_banks"])
        if tile_bytes > bank_bytes:
            raise _fault(ctx, f"{allocation.name}: a PSUM tile of {tile_bytes} B per partition crosses a bank "
                         f"({bank_bytes} B); a directly allocated PSUM tile lies in one bank", _GUIDE, line)
    for index in np.ndindex(*blocks):
        where_ = _address(placement, tuple(int(i) for i in index), pdim, tile_bytes)
        start = where_[-2]
        if start not in start_partitions(pdim) or start + pdim > partitions:
            raise _fault(ctx, f"{allocation.name}[{', '.join(map(str, index))}]: a tile of {pdim} partitions placed at "
                         f"start partition {start}; it may start at {', '.join(map(str, start_partitions(pdim)))}",
                         _SBUF_ALLOC if memory == "sbuf" else _PSUM_ALLOC, line)
        if memory == "sbuf":
            addr = where_[1]
            if addr < 0 or addr + tile_bytes > usable:
                raise _fault(ctx, f"{allocation.name}[{', '.join(map(str, index))}]: {tile_bytes} B per partition placed "
                             f"at byte {addr}; {tgt.name}'s SBUF partition offers bytes 0 to {usable} to a kernel",
                             source, line)
            extents.append(("sbuf", start, start + pdim, addr, addr + tile_bytes))
        else:
            bank, addr = where_[0], where_[2]
            if not 0 <= bank < banks or addr != 0 or start != 0:
                raise _fault(ctx, f"{allocation.name}[{', '.join(map(str, index))}]: placed at bank {bank}, partition "
                             f"{start}, byte {addr}; PSUM has banks 0 to {banks - 1}, and a tile starts at partition 0, "
                             "byte 0 of its bank", _PSUM_ALLOC, line)
            extents.append(("psum", start, start + pdim, bank * bank_bytes, bank * bank_bytes + tile_bytes))
    allocation.placed = phys.lines[key] = Placed(blocks, tile_bytes, extents)
    allocation.life.partition_bytes = 0  # its bytes are where the kernel put them, not in the live sum
    phys.add(extents)


def place_at(ctx: Any, allocation: Any, address: Any) -> None:
    """The current generation's ``nl.ndarray(..., address=(partition_offset, free_offset))``
    (nki.language.ndarray docs): the tensor placed at that partition and byte offset, checked as
    a direct allocation's tile (SBUF: within the partition's bytes less the compiler's reserve;
    PSUM: within the partition's PSUM), its lifetime conflicts found the same way."""
    try:
        partition, offset = (operator.index(a) for a in address)
    except (TypeError, ValueError):
        raise TypeError(f"address: nl.ndarray takes (partition_offset, free_offset) as two ints, got {address!r}") \
            from None
    shape, tgt, line, name = allocation.shape, ctx.target, allocation.line, allocation.name
    memory = allocation.memory.name
    if memory not in ("sbuf", "psum"):
        raise ValueError(f"address: a {memory} tensor has no on-chip address; address= places SBUF and PSUM tensors")
    pdim = shape[0] if shape else 1
    nbytes = math.prod(shape[1:]) * allocation.dtype.itemsize
    if memory == "sbuf":
        limit = int(tgt["sbuf_partition_bytes"]) - int(tgt["sbuf_compiler_reserved_bytes"])
        source = f"documented: nki.language.ndarray (address=); {tgt.spec('sbuf_compiler_reserved_bytes').cite()}"
    else:
        limit = int(tgt["psum_partition_bytes"])
        source = f"documented: nki.language.ndarray (address=); {tgt.spec('psum_partition_bytes').cite()}"
    if partition not in start_partitions(pdim) or partition + pdim > int(tgt["partitions"]):
        raise _fault(ctx, f"{name}: a tensor of {pdim} partitions placed at partition {partition}; it may start at "
                     f"{', '.join(map(str, start_partitions(pdim)))}", source, line)
    if offset < 0 or offset + nbytes > limit:
        raise _fault(ctx, f"{name}: {nbytes} B per partition placed at byte {offset}; {tgt.name}'s {memory.upper()} "
                     f"partition offers bytes 0 to {limit} to a kernel", source, line)
    extents = [(memory, partition, partition + pdim, offset, offset + nbytes)]
    allocation.placed = Placed((), nbytes, extents)
    allocation.life.partition_bytes = 0
    physical(ctx).add(extents)


class Physical:
    """One run's physical tiles: for each extent (memory, first partition, end partition, first
    byte, end byte) the logical tile that wrote it last (allocation id, its name, step, line),
    and which extents overlap which. Allocations in a loop reuse their extents, so this stays
    as small as the kernel's address plan, however long the run."""

    __slots__ = ("last", "overlaps", "extents", "lines", "counts")

    def __init__(self) -> None:
        self.last: dict = {}
        self.overlaps: dict = {}
        self.extents: set = set()
        self.lines: dict = {}  # (line, unrolled indices, occurrence, shape, itemsize) -> its first Placed
        self.counts: dict = {}  # (line, loop indices) -> placements made there so far

    def add(self, extents: list) -> None:
        new = set(extents) - self.extents
        if new:
            self.extents |= new
            self.overlaps.clear()

    def overlapping(self, extent: tuple) -> list:
        found = self.overlaps.get(extent)
        if found is None:
            memory, p0, p1, b0, b1 = extent
            found = self.overlaps[extent] = [e for e in self.extents if e[0] == memory and e[1] < p1 and p0 < e[2]
                                             and e[3] < b1 and b0 < e[4]]
        return found


def physical(ctx: Any) -> Physical:
    if ctx.placed is None:
        ctx.placed = Physical()
    return ctx.placed


def _tiles_of(t: Any) -> range:
    """The logical tiles view ``t`` touches (by its bytes' place in the partition-first storage)."""
    base, placed = t.base, t.base.placed
    if not placed.blocks:
        return range(1)
    g = t._geometry()
    start = g.__array_interface__["data"][0] - base.address
    pstride = base.data.strides[0] if base.data.ndim else base.data.nbytes
    low = high = start
    for n, s in zip(g.shape, g.strides):
        if n == 0:
            return range(0)
        if s > 0:
            high += (n - 1) * s
        else:
            low += (n - 1) * s
    high += g.itemsize
    if low < 0 or high > base.data.nbytes:
        return range(len(placed.extents))  # a copy (an indirect view): every tile, conservatively
    p_low, in_low = divmod(low, pstride)
    p_high, in_high = divmod(high - 1, pstride)
    if p_high != p_low and in_high < in_low:
        return range(len(placed.extents))
    # tile_bytes count the dtype's bytes; Run.exact()'s binary64 storage is wider by its itemsize ratio
    tile = (placed.tile_bytes or 1) * (base.data.itemsize // base.dtype.itemsize)
    return range(in_low // tile, in_high // tile + 1)


def written(ctx: Any, t: Any) -> None:
    """View ``t`` of a direct allocation is written now: its tiles take their physical bytes."""
    base, placed = t.base, t.base.placed
    last = physical(ctx).last
    line = None
    for tile in _tiles_of(t):
        if line is None:
            line = ctx.at or where()
        placed.last_write[tile] = record = (ctx.step, line, base.id, tile, base.name, placed.blocks)
        last[placed.extents[tile]] = record


def before_read(ctx: Any, t: Any) -> None:
    """View ``t`` of a direct allocation is read (or accumulated into): a tile whose physical bytes
    another tile wrote since its own last write is a lifetime conflict."""
    base, placed = t.base, t.base.placed
    phys = physical(ctx)
    for tile in _tiles_of(t):
        own = placed.last_write[tile]
        if own is None:
            continue  # never written: the read_uninitialised rule's
        extent = placed.extents[tile]
        for other in phys.overlapping(extent):
            theirs = phys.last.get(other)
            if theirs is not None and theirs[0] > own[0] and (theirs[2] != base.id or theirs[3] != tile):
                _conflict(ctx, own, theirs, extent, other)
                return


def _name(record: tuple) -> str:
    _, _, _, tile, name, blocks = record
    return f"{name}[{', '.join(map(str, np.unravel_index(tile, blocks)))}]" if blocks else name


def _conflict(ctx: Any, own: tuple, theirs: tuple, extent: tuple, other: tuple) -> None:
    # The bytes both tiles hold (the read tile's extent and the other's overlap there).
    memory = extent[0]
    p0, p1 = max(extent[1], other[1]), min(extent[2], other[2])
    b0, b1 = max(extent[3], other[3]), min(extent[4], other[4])
    ctx.find("allocation_conflict", "error",
             f"reads {_name(own)} (written at {own[1]}) after {_name(theirs)} was written at {theirs[1]} on the same "
             f"physical bytes ({memory.upper()} partitions {p0}:{p1}, bytes {b0}:{b1}); on the hardware the read "
             "sees the other tile's values (a lifetime conflict of the direct allocation)", _GUIDE)
