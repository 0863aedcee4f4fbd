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

from .context import KernelFault, Unsupported, current, where
from .dtypes import storage_dtype
from .memory import Tensor, _remap
from .tensor_views import _fault, _indirect_rule, _what
from .views import Gather, index_dim_map, normalise

__all__ = ["Indirect", "dynamic_select", "gather", "held", "indirect_index", "indirect_pattern", "scatter",
           "vector_select"]

_SOURCE = "documented: nki.isa.dma_copy docs (indirect addressing; oob_mode)"
_SOURCE_SELECT = "documented: nki.language NkiTensor.select / vector_select docstrings"


class Indirect(Tensor):
    """A view addressed at run time (see the module doc): ``addr`` the storage element of each
    element, ``index`` the tile whose values chose them, ``layout`` the static pattern (a read-only
    array that only says where: its pointer and strides are the view's offset and strides with the
    index at 0, never read), ``why`` what put an element out of bounds where the index did."""

    __slots__ = ("addr", "index", "layout", "why")

    def _geometry(self) -> np.ndarray:
        return self.data if self.layout is None else self.layout

    def _apply(self, f, dim_map: dict | None = None, values=None) -> "Indirect":
        """The same view ``f`` of the layout, and of the addresses and the copied elements (by
        ``values`` where it differs: a merge of dims copies those arrays, never the storage)."""
        g = f if values is None else values
        view = Indirect(self.base, g(self.data), None, None, self.dtype)
        view.addr, view.index, view.why = g(self.addr), self.index, self.why
        view.layout = None if self.layout is None else f(self.layout)
        view.indirection = _remap(self.indirection, dim_map)
        view.checked = False
        return view

    def __getitem__(self, key: Any) -> Tensor:
        index = normalise(key, self.shape, self)
        if isinstance(index, Gather):
            raise current().unsupported("an index expression on an indirect view (index the tensor once, with the "
                                        "index tile)")
        mapping, narrowed = index_dim_map(index, self.shape)
        _indirect_rule(self, "indexing", narrowed, f"index {key!r}")
        return self._apply(lambda a: a[index], mapping)


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


def _layout(t: Any, start: int, shape: tuple[int, ...], strides: Sequence[int]) -> np.ndarray:
    """A read-only array whose pointer is element ``start`` of ``t``'s buffer and whose strides are
    ``strides`` (elements): where a static pattern lies, for strides / offset / get_pattern. It may
    reach past the buffer (an index may be what keeps an access inside), so it is never read."""
    item = t.data.itemsize
    holder = type("_Layout", (), {})()
    holder.__array_interface__ = {"shape": tuple(shape), "typestr": f"|u{item}", "version": 3,
                                  "data": (t.base.address + start * item, True),
                                  "strides": tuple(s * item for s in strides)}
    holder.keep = t.base.data
    return np.asarray(holder)


def _addresses(start: int, shape: tuple[int, ...], strides: Sequence[int]) -> np.ndarray:
    """The storage element of each element of the pattern (int64, ``shape``)."""
    addr = np.full(shape, start, np.int64)
    for axis, (count, step) in enumerate(zip(shape, strides)):
        addr += (np.arange(count, dtype=np.int64) * step).reshape((count,) + (1,) * (len(shape) - axis - 1))
    return addr


def _make(t: Any, addr: np.ndarray, index: Any, dims: tuple[int, ...] = (), layout: np.ndarray | None = None,
          why: str | None = None) -> Indirect:
    base = t.base
    if base.memory.on_chip:
        raise current().unsupported(f"indirect addressing of {base.memory} tensor {t.name} (the tensor indexed "
                                    "by an index tile must be in HBM; nki.isa.dma_copy docs)")
    flat = _flat(base, t.dtype)
    inside = (addr >= 0) & (addr < flat.size)
    view = Indirect(base, _elements(flat, addr, inside), None, None, t.dtype)
    view.addr, view.index, view.layout, view.why = addr, index, layout, why
    view.indirection = (dims, index)
    view.checked = False
    return view


def _static(t: Any, method: str) -> tuple[int, tuple[int, ...]]:
    """(offset, strides) of plain view ``t`` in elements of its buffer, for a select by an index."""
    if t.indirection is not None:
        raise ValueError(f"{method}: {_what(t)} is already an indirect view; only one dynamic select per tensor "
                         "(is_indirect() guards)")
    if t.data.itemsize != t.base.data.itemsize:
        raise current().unsupported(f"{method} of a view read as another dtype's size ({t.name} as {t.dtype})")
    return t.element_offset(), t.strides


def dynamic_select(t: Any, dim: int, index: Any) -> Tensor:
    """``t.select(dim, index)`` with an index chosen at run time (NkiTensor.select: "dynamic indirect
    selection where the index is resolved at runtime"): ``index`` a (1, 1) SBUF tile or a
    VirtualRegister, read now (the instruction that takes the view follows). The view is
    ``t[:, .., i]`` (dim removed) at the value i. On HBM an Indirect view, its addresses checked
    when the DMA runs (an i outside dim's size puts every element out of bounds: oob_mode decides);
    on SBUF / PSUM (dim must not be 0) a view of the element i selects, which compute engines read
    and write as any view (an i outside the dim is an index_bounds finding now)."""
    ctx = current()
    offset, strides = _static(t, "select")
    if dim == 0 and t.base.memory.on_chip:
        raise _fault("partition_dim", "select", f"select: a dynamic select of dim 0 of {_what(t)}: on SBUF / "
                                                "PSUM dim 0 is the partition dim, which a dynamic select may not "
                                                "address")
    i = _scalar_index(ctx, index, "select index")
    n = t.shape[dim]
    key = (slice(None),) * dim
    if t.base.memory.on_chip:
        if not 0 <= i < n:
            raise _fault("index_bounds", "select", f"{t.name}: select(dim={dim}, index) read index {i} from "
                                                   f"{getattr(index, 'name', index)}; dim {dim} has size {n}")
        view = t[key + (i,)]
        view.indirection = ((), index)
        return view
    static = t[key + (0,)]  # the pattern with the index at 0: shape, strides and offset of the view
    addr = _addresses(static.element_offset(), static.shape, static.strides)
    why = None
    if 0 <= i < n:
        addr += i * strides[dim]
    else:
        addr[...] = -1
        why = f"select(dim={dim}) read index {i}; dim {dim} of {t.name} has size {n}"
    layout = _layout(t, static.element_offset(), static.shape, static.strides)
    return _make(t, addr, index, (), layout, why)


def _scalar_index(ctx: Any, index: Any, parameter: str) -> int:
    """The one value of a (1, 1) index tile, or a VirtualRegister's value."""
    if isinstance(index, Tensor):
        values = _index_values(ctx, index, parameter).reshape(-1)
        if values.size != 1:
            raise KernelFault(ctx.find("shape_mismatch", "error", f"{parameter} {index.name} holds {values.size} "
                                       f"values (shape {index.shape}); a dynamic select takes one (a (1, 1) tile)",
                                       _SOURCE_SELECT))
        return int(values[0])
    if not callable(getattr(index, "runtime_value", None)):  # a VirtualRegister (instructions.registers)
        raise TypeError(f"select: index must be an int, a (1, 1) SBUF tile or a VirtualRegister, got "
                        f"{type(index).__name__}")
    return int(index.runtime_value(ctx, parameter))


def vector_select(t: Any, vector_offset: Any) -> Indirect:
    """``t.vector_select(0, vector_offset)`` (NkiTensor.vector_select): partition p of the view is
    element vector_offset[p] of dim 0 of HBM tensor ``t`` (the rest of the dims as ``t``'s); the
    view has vector_offset.shape[0] partitions and is indirect in dim 0. An index outside dim 0's
    size puts that partition's elements out of bounds (oob_mode decides when the DMA runs)."""
    ctx = current()
    if t.base.memory.on_chip:
        raise ValueError(f"vector_select: {_what(t)} is on chip; vector_select is supported on HBM tensors only")
    offset, strides = _static(t, "vector_select")
    if not isinstance(vector_offset, Tensor):
        raise TypeError(f"vector_offset: expected an SBUF tile of indices, got {type(vector_offset).__name__}")
    idx = _index_values(ctx, vector_offset, "vector_offset")
    if vector_offset.ndim != 2 or vector_offset.shape[1] != 1:
        raise KernelFault(ctx.find("shape_mismatch", "error", f"vector_offset {vector_offset.name} has shape "
                                   f"{vector_offset.shape}; it takes (num_partitions, 1)", _SOURCE_SELECT))
    idx = idx.reshape(-1)
    shape = (idx.size,) + t.shape[1:]
    addr = _addresses(offset, shape, (0,) + strides[1:])
    n = t.shape[0]
    inside = (idx >= 0) & (idx < n)
    addr += (np.where(inside, idx, 0) * strides[0]).reshape((idx.size,) + (1,) * (len(shape) - 1))
    why = None
    if not inside.all():
        addr[~inside] = -1
        bad = int(np.flatnonzero(~inside)[0])
        why = f"vector_offset[{bad}] is {int(idx[bad])}; dim 0 of {t.name} has size {n}"
    return _make(t, addr, vector_offset, (0,), _layout(t, offset, shape, strides), why)


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
            if not callable(getattr(scalar_offset, "runtime_value", None)):  # instructions.registers
                raise TypeError(f"scalar_offset: expected a 1x1 SBUF tile or a VirtualRegister, got "
                                f"{type(scalar_offset).__name__}")
            offset = int(scalar_offset.runtime_value(ctx, "scalar_offset"))
        addr += offset * stride
        index = scalar_offset
    steps = [step for step, _ in pairs]
    if vector_offset is not None and steps:
        steps[0] = stride  # the partition's index scales by the indirect dim's stride, not the pattern's step
    dims = (0,) if vector_offset is not None else ()
    layout = _layout(t, start, shape, steps) if t.data.itemsize == t.base.data.itemsize else None
    return _make(t, addr, index, dims, layout)


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
    return _make(t, np.ascontiguousarray(np.broadcast_to(addr, shape)), index, (0,) if index is not None else ())


def _inside(ctx: Any, view: Indirect, oob_mode: Any) -> np.ndarray:
    """Which elements' addresses lie inside the buffer; an out-of-bounds one with oob_mode error
    (the default) stops the run with a finding naming the first."""
    n = _flat(view.base, view.dtype).size
    inside = (view.addr >= 0) & (view.addr < n)
    mode = str(getattr(oob_mode, "name", oob_mode) or "error")
    if mode not in ("error", "skip"):
        raise ValueError(f"oob_mode: {oob_mode!r}; valid: nisa.oob_mode.error, nisa.oob_mode.skip")
    if mode == "error" and not inside.all():
        bad = view.addr[~inside]
        why = f"; {view.why}" if view.why else ""
        raise KernelFault(ctx.find("index_bounds", "error", f"indirect access of {view.name}: element {int(bad[0])} "
                                   f"is outside its {n} elements ({bad.size} such; "
                                   f"{'register' if hasattr(view.index, 'runtime_value') else 'index tile'} "
                                   f"{getattr(view.index, 'name', view.index)}{why}); "
                                   "oob_mode=nisa.oob_mode.skip skips them", _SOURCE))
    return inside


def gather(ctx: Any, view: Indirect, oob_mode: Any) -> tuple[np.ndarray, np.ndarray]:
    """(the stored elements at the view's addresses, which of them are in bounds)."""
    inside = _inside(ctx, view, oob_mode)
    return _elements(_flat(view.base, view.dtype), view.addr, inside), inside


def held(view: Indirect) -> np.ndarray:
    """What the view's addresses hold now (zero out of bounds): ``data`` is what they held when the
    view was made, before the instruction that takes it wrote them (a scatter)."""
    flat = _flat(view.base, view.dtype)
    return _elements(flat, view.addr, (view.addr >= 0) & (view.addr < flat.size))


def _flat(base: Any, dtype: Any, array: str = "data") -> np.ndarray:
    """The buffer's storage (or its written-bytes mask) as one run of elements of ``dtype``, which
    an indirect view's addresses count (``.ap(dtype=)`` reads the storage as another dtype)."""
    whole = getattr(base, array).reshape(-1)
    storage = storage_dtype(dtype)
    if base.data.dtype == np.float64:  # Run.exact()'s binary64 values, one element per element
        if dtype.kind != "float" or storage.itemsize != storage_dtype(base.dtype).itemsize:
            raise Unsupported(f"{where()}: Run.exact() cannot follow the kernel here: it reads the float tensor "
                              f"{base.name} ({base.dtype}) as {dtype}, and the exact dataflow keeps values, not the "
                              "hardware's bit patterns")
        return whole
    if array == "mask":
        storage = np.dtype(f"u{storage.itemsize}")
    return whole if whole.dtype == storage else whole.view(storage)


def _elements(flat: np.ndarray, addr: np.ndarray, inside: np.ndarray) -> np.ndarray:
    """The elements of ``flat`` at ``addr`` where ``inside``, zero elsewhere."""
    data = np.zeros(addr.shape, flat.dtype)
    data[inside] = flat[addr[inside]]
    return data


def scatter(ctx: Any, view: Indirect, bits: np.ndarray, oob_mode: Any, combine: Any = None) -> None:
    """Store ``bits`` (of the buffer's storage dtype, the view's shape) at the view's addresses in
    element order; with ``combine(old bits, new)`` -> the bits to store (a read-modify-write;
    ``bits`` are then whatever ``combine`` takes), applied one element at a time where addresses
    repeat, so a repeated row accumulates."""
    inside = _inside(ctx, view, oob_mode)
    base = view.base
    flat = _flat(base, view.dtype)
    addr, bits = view.addr[inside], np.asarray(bits).reshape(view.addr.shape)[inside]
    if combine is None:
        flat[addr] = bits  # a repeated address keeps the last element's bits (element order)
    elif np.unique(addr).size == addr.size:
        flat[addr] = combine(flat[addr], bits)
    else:
        for a, b in zip(addr.tolist(), bits):
            flat[a] = combine(flat[a:a + 1], np.asarray([b]))[0]
    if not base.complete:
        mask = _flat(base, view.dtype, "mask")
        mask[addr] = np.iinfo(mask.dtype).max
    base.dirty = True
