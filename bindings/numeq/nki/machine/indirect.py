"""Indirect DMA operands: HBM elements chosen at run time by index values held in an on-chip tile
(gather and scatter).

Two interfaces make one: the current ``t.ap(pattern, vector_offset=idx, indirect_dim=d)`` /
``scalar_offset=`` (nki.isa.dma_copy docs, "Indirect addressing (gather/scatter)": vector
indirection gives each partition its own offset, ``idx`` an SBUF tensor of shape (P, 1); scalar
indirection one offset for all; the offset scales by the stride of dimension ``indirect_dim`` of the
tensor ``.ap()`` is called on, which must be in HBM), and the older ``t[idx_tile, i_f]`` (an SBUF
tile of row indices where an index expression would stand; nki.language load/store examples).

An ``Indirect`` is a view whose element i is the buffer's storage element ``addr[i]``. The addresses
are fixed when the view is made (the index tile is read then: the instruction that takes the view
follows at once). ``data`` holds the elements in bounds at that moment, so shape, dtype and size read
as any view's; the DMA instructions read and write it through ``gather`` and ``scatter``, which
apply ``oob_mode`` ("error": a finding; "skip": out-of-bounds elements are not transferred,
nki.isa.dma_copy docs) to addresses outside the buffer.
"""

from __future__ import annotations

import operator
from typing import Any, Sequence

import numpy as np

from .context import KernelFault, current
from .memory import Tensor

__all__ = ["Indirect", "gather", "indirect_index", "indirect_pattern", "scatter"]

_SOURCE = "documented: nki.isa.dma_copy docs (indirect addressing; oob_mode)"


class Indirect(Tensor):
    """A view addressed at run time (see the module doc): ``addr`` the storage element of each
    element, ``index`` the tile whose values chose them."""

    __slots__ = ("addr", "index")

    def __getitem__(self, key: Any) -> Tensor:
        raise current().unsupported("indexing an indirect view again (index the tensor once, with the index tile)")


def _index_values(ctx: Any, t: Any, parameter: str) -> np.ndarray:
    """The int64 values of index tile ``t`` (an on-chip integer tile, read as the DMA reads it)."""
    if not isinstance(t, Tensor):
        raise TypeError(f"{parameter}: expected an SBUF tile of indices, got {type(t).__name__}")
    if not t.base.memory.on_chip:
        ctx.find("indirect_index", "error", f"{parameter} {t.name} is in {t.base.memory}; indices are read from SBUF",
                 _SOURCE)
    if t.dtype.kind != "int":
        ctx.find("indirect_index", "error", f"{parameter} {t.name} is {t.dtype}; indices are integers", _SOURCE)
    if not t.base.complete and (t.mask != t.base.full).any():
        raise KernelFault(ctx.find("read_uninitialised", "error", f"{parameter} {t.name}: indices read before "
                                   "they are written", _SOURCE))
    return np.asarray(t.data).astype(np.int64)


def _make(t: Any, addr: np.ndarray, index: Any) -> Indirect:
    base = t.base
    if base.memory.on_chip:
        raise current().unsupported(f"indirect addressing of {base.memory} tensor {t.name} (the tensor indexed "
                                    "by an index tile must be in HBM; nki.isa.dma_copy docs)")
    flat = base.data.reshape(-1)
    inside = (addr >= 0) & (addr < flat.size)
    data = np.zeros(addr.shape, flat.dtype)
    data[inside] = flat[addr[inside]]
    view = Indirect(base, data, None, None, t.dtype)
    view.addr, view.index = addr, index
    view.checked = False
    return view


def indirect_pattern(t: Any, pairs: Sequence[tuple[int, int]], start: int, *, vector_offset: Any = None,
                     scalar_offset: Any = None, indirect_dim: int = 0) -> Indirect:
    """``t.ap(pattern, offset, vector_offset= | scalar_offset=, indirect_dim=)``: with a scalar
    offset s, element [i0, ..] is storage element start + sum(i_j * step_j) + s * stride(indirect_dim);
    with a vector offset the partition's index takes the place of the partition step: start +
    idx[i0] * stride(indirect_dim) + sum over the free pairs (the docs' gather
    ``data.ap([[F, P], [1, F]], vector_offset=idx)`` reads row idx[p] into partition p)."""
    ctx = current()
    if (vector_offset is None) == (scalar_offset is None):
        raise TypeError("ap: vector_offset and scalar_offset are mutually exclusive, and indirection needs one")
    dim = operator.index(indirect_dim)
    if not 0 <= dim < t.ndim:
        raise ValueError(f"indirect_dim: {dim} is not a dimension of {t.name} of shape {t.shape}")
    stride = t.data.strides[dim] // t.data.itemsize
    shape = tuple(c for _, c in pairs)
    addr = np.full(shape, start, np.int64)
    for axis, (step, count) in enumerate(pairs):
        if axis == 0 and vector_offset is not None:
            continue  # the partition's own index replaces the partition step
        addr += (np.arange(count, dtype=np.int64) * step).reshape((count,) + (1,) * (len(pairs) - axis - 1))
    if vector_offset is not None:
        idx = _index_values(ctx, vector_offset, "vector_offset").reshape(-1)
        if idx.size != shape[0]:
            raise KernelFault(ctx.find("shape_mismatch", "error", f"vector_offset {vector_offset.name} holds "
                                       f"{idx.size} indices for {shape[0]} partitions; it takes one per partition",
                                       _SOURCE))
        addr += (idx * stride).reshape((shape[0],) + (1,) * (len(shape) - 1))
        index = vector_offset
    else:
        if isinstance(scalar_offset, Tensor):
            idx = _index_values(ctx, scalar_offset, "scalar_offset").reshape(-1)
            if idx.size != 1:
                raise KernelFault(ctx.find("shape_mismatch", "error", f"scalar_offset {scalar_offset.name} holds "
                                           f"{idx.size} values; it takes one (a 1x1 tile)", _SOURCE))
            offset = int(idx[0])
        else:
            # A VirtualRegister from nisa.register_alloc() (dma_copy docs: "either a 1x1 SBUF tensor or a
            # VirtualRegister"): its value now, as a tile's is read now.
            from ..instructions.registers import VirtualRegister, scalar_offset_value
            if not isinstance(scalar_offset, VirtualRegister):
                raise TypeError(f"scalar_offset: expected a 1x1 SBUF tile or a VirtualRegister, got "
                                f"{type(scalar_offset).__name__}")
            offset = scalar_offset_value(ctx, scalar_offset)
        addr += offset * stride
        index = scalar_offset
    return _make(t, addr, index)


def indirect_index(t: Any, items: list, grid_values: list) -> Indirect:
    """The older ``t[idx_tile, i_f]``: ``items`` the key (an index tile, or index values already laid
    over the grid: ``grid_values[d]`` an int64 array for item d); the tile's values index its
    tensor axis, one per partition of the grid."""
    ctx = current()
    if len(items) > t.ndim:
        raise TypeError(f"{t.name}: {len(items)} indices for a tensor of shape {t.shape}")
    offset = (t.data.__array_interface__["data"][0] - t.base.address) // t.data.itemsize
    strides = [s // t.data.itemsize for s in t.data.strides]
    shape = np.broadcast_shapes(*(v.shape for v in grid_values if v is not None))
    addr = np.full(shape, offset, np.int64)
    index = None
    for d, (k, v) in enumerate(zip(items, grid_values)):
        if isinstance(k, Tensor):
            idx = _index_values(ctx, k, f"index of axis {d}").reshape(-1)
            if idx.size != shape[0]:
                raise KernelFault(ctx.find("shape_mismatch", "error", f"{t.name}: index tile {k.name} holds "
                                           f"{idx.size} indices for {shape[0]} partitions", _SOURCE))
            v = idx.reshape((shape[0],) + (1,) * (len(shape) - 1))
            index = k
        addr = addr + v * strides[d]
    return _make(t, np.ascontiguousarray(np.broadcast_to(addr, shape)), index)


def _inside(ctx: Any, view: Indirect, oob_mode: Any) -> np.ndarray:
    """Which elements' addresses lie inside the buffer; an out-of-bounds one with oob_mode error
    (the default) stops the run with a finding naming the first."""
    n = view.base.data.size
    inside = (view.addr >= 0) & (view.addr < n)
    mode = str(getattr(oob_mode, "name", oob_mode) or "error")
    if mode not in ("error", "skip"):
        raise ValueError(f"oob_mode: {oob_mode!r}; valid: nisa.oob_mode.error, nisa.oob_mode.skip")
    if mode == "error" and not inside.all():
        bad = view.addr[~inside]
        raise KernelFault(ctx.find("index_bounds", "error", f"indirect access of {view.name}: element {int(bad[0])} "
                                   f"is outside its {n} elements ({bad.size} such; index tile {view.index.name}); "
                                   "oob_mode=nisa.oob_mode.skip skips them", _SOURCE))
    return inside


def gather(ctx: Any, view: Indirect, oob_mode: Any) -> tuple[np.ndarray, np.ndarray]:
    """(the stored elements at the view's addresses, which of them are in bounds)."""
    inside = _inside(ctx, view, oob_mode)
    flat = view.base.data.reshape(-1)
    data = np.zeros(view.addr.shape, flat.dtype)
    data[inside] = flat[view.addr[inside]]
    return data, inside


def scatter(ctx: Any, view: Indirect, bits: np.ndarray, oob_mode: Any, combine: Any = None) -> None:
    """Store ``bits`` (of the buffer's storage dtype, the view's shape) at the view's addresses in
    element order; with ``combine(old bits, new)`` -> the bits to store (a read-modify-write;
    ``bits`` are then whatever ``combine`` takes), applied one element at a time where addresses
    repeat, so a repeated row accumulates."""
    inside = _inside(ctx, view, oob_mode)
    base = view.base
    flat = base.data.reshape(-1)
    addr, bits = view.addr[inside], np.asarray(bits).reshape(view.addr.shape)[inside]
    if combine is None:
        flat[addr] = bits  # a repeated address keeps the last element's bits (element order)
    elif np.unique(addr).size == addr.size:
        flat[addr] = combine(flat[addr], bits)
    else:
        for a, b in zip(addr.tolist(), bits):
            flat[a] = combine(flat[a:a + 1], np.asarray([b]))[0]
    if not base.complete:
        base.mask.reshape(-1)[addr] = base.full
    base.dirty = True
