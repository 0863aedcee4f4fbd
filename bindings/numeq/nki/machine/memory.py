"""Tensors of the NeuronCore model: an allocation (``Allocation``) in one memory and the views kernels
take of it (``Tensor``: slices, ``nl.ds``, ``.ap()`` access patterns, ``.reshape``, ``.view``).

Every buffer carries, beside its data, a mask of the bytes some instruction wrote: contents start
undefined on the hardware (AWS's simulator fills NaN), so a read of bytes nothing wrote is a finding
that names the tile, never a silent NaN. The mask has the data's itemsize, so every view (a slice,
an access pattern, a bitcast) applies to both arrays with the same byte strides. PSUM buffers also
record what wrote each element (a matmul, a memset, another instruction): the matmul accumulation
rules read it.
"""

from __future__ import annotations

import itertools
import math
import operator
from typing import Any, Sequence

import numpy as np

from .dtypes import DType, dtype_of, storage_dtype
from . import context as _context
from . import views as _indexing
from .views import access_pattern
from . import tensor_views as _tensor_views
from .targets import DEFAULT_TARGET, target as _target

__all__ = ["Allocation", "Memory", "Tensor", "MEMORIES", "ds", "DynSlice", "WRITER_NONE", "WRITER_MATMUL",
           "WRITER_MEMSET", "WRITER_OTHER", "WRITER_READ"]


class Memory:
    """A memory of the NeuronCore (``nl.sbuf``, ``nl.psum``, ``nl.hbm``, ``nl.shared_hbm``,
    ``nl.private_hbm``); prints as NKI's name."""

    def __init__(self, name: str, on_chip: bool) -> None:
        self.name = name
        self.on_chip = on_chip

    def __repr__(self) -> str:
        return self.name

    __str__ = __repr__


MEMORIES = {m.name: m for m in (Memory("sbuf", True), Memory("psum", True), Memory("shared_hbm", False),
                                Memory("private_hbm", False))}
MEMORIES["hbm"] = MEMORIES["private_hbm"]  # nl.hbm is an alias of private_hbm (nki.language 0.3.0+)

# What last wrote a PSUM element (the accumulation rules of nc_matmul read it).
# WRITER_READ: a matmul result another instruction has read since (evacuated). Bit 0 set: the
# element holds a matmul result.
WRITER_NONE, WRITER_MATMUL, WRITER_MEMSET, WRITER_OTHER, WRITER_READ = 0, 1, 2, 4, 5

_ids = itertools.count(1)  # allocations made outside a run (a run numbers its own: Context.ids)

# HBM per chip, by target: the most one HBM tensor can hold (documented: AWS's Neuron hardware pages,
# about-neuron/arch/neuron-hardware/trainium.rst: 32 GiB per Trainium chip; inferentia2.rst: 32 GiB
# per Inferentia2 chip; trainium2.rst: 96 GiB per Trainium2 chip; trainium3.rst: 144 GiB). A larger HBM tensor is refused
# before numeq allocates it (TooLarge).
HBM_CHIP_BYTES = {"trn1": 32 * 2 ** 30, "inf2": 32 * 2 ** 30, "trn2": 96 * 2 ** 30, "trn3": 144 * 2 ** 30}
_HBM_SOURCE = {"trn1": "about-neuron/arch/neuron-hardware/trainium.rst",
               "inf2": "about-neuron/arch/neuron-hardware/inferentia2.rst",
               "trn2": "about-neuron/arch/neuron-hardware/trainium2.rst",
               "trn3": "about-neuron/arch/neuron-hardware/trainium3.rst (144 GiB of device memory)"}
# On chip: each memory's bytes per partition in the target table.
_PER_PARTITION = {"sbuf": "sbuf_partition_bytes", "psum": "psum_partition_bytes"}


def _size(n: int) -> str:
    for unit, scale in (("TiB", 2 ** 40), ("GiB", 2 ** 30), ("MiB", 2 ** 20), ("KiB", 2 ** 10)):
        if n >= scale:
            return f"{n / scale:.4g} {unit}"
    return f"{n} B"


def refuse_oversized(ctx: Any, shape: tuple, dtype: DType, memory: "Memory", name: str, line: str,
                     tiles: int = 1) -> None:
    """Refuse, before any array is made, an allocation no target memory holds: an SBUF / PSUM tile
    whose bytes per partition exceed the memory's (``KernelFault``, the rule book's sbuf_capacity /
    psum_capacity), or whose partition dim exceeds the partitions while the tile exceeds the whole
    memory (partition_dim); an HBM tensor beyond the chip's HBM (``TooLarge``, naming ``shape``).
    ``tiles``: a direct allocation's logical tiles, placed by the kernel (machine.placement): one
    of them must fit, not all at once."""
    tgt = ctx.target if ctx is not None else _target(DEFAULT_TARGET)
    at = line if line and not line.startswith("<") else None
    if memory.on_chip:
        key = _PER_PARTITION[memory.name]
        limit = int(tgt[key])
        partitions = int(tgt["partitions"])
        per_partition = (math.prod(shape[1:]) * dtype.itemsize if shape else dtype.itemsize) // tiles
        if per_partition > limit:
            what = f"{memory.name} tensor {name + ' ' if name else ''}of shape {shape} ({dtype})"
            message = (f"{what} takes {per_partition} B per partition; {tgt.name}'s {memory.name.upper()} holds "
                       f"{limit} B per partition (refused before allocation)")
            if ctx is None:
                raise _context.TooLarge(f"shape: {message}")
            raise _context.KernelFault(ctx.find(f"{memory.name}_capacity", "error", message,
                                                tgt.spec(key).cite(), at=at))
        if shape and shape[0] > partitions and shape[0] * per_partition > partitions * limit:
            what = f"{memory.name} tensor {name + ' ' if name else ''}of shape {shape} ({dtype})"
            message = f"{name or what} has {shape[0]} partitions (dim 0); the target has {partitions}"
            if ctx is None:
                raise _context.TooLarge(f"shape: {message}")
            raise _context.KernelFault(ctx.find("partition_dim", "error", message, tgt.spec("partitions").cite(),
                                                at=at))
        return
    limit = HBM_CHIP_BYTES.get(tgt.name)
    nbytes = math.prod(shape) * dtype.itemsize
    if limit is not None and nbytes > limit:
        what = f"{memory.name} tensor {name + ' ' if name else ''}of shape {shape} ({dtype})"
        raise _context.TooLarge(f"shape: {what} takes {_size(nbytes)} ({nbytes} B); {tgt.name}'s HBM holds {_size(limit)} "
                       f"per chip (documented: {_HBM_SOURCE[tgt.name]}); a tensor of at most {limit} B fits")



class DynSlice:
    """``nl.ds(start, size, step=1)``: ``size`` elements from ``start``."""

    __slots__ = ("start", "size", "step")

    def __init__(self, start: int, size: int, step: int = 1) -> None:
        self.start, self.size, self.step = operator.index(start), operator.index(size), operator.index(step)

    def __repr__(self) -> str:
        return f"ds({self.start}, {self.size})"


def ds(start: int, size: int, step: int = 1) -> DynSlice:
    """A dynamic slice: ``size`` elements from ``start`` (``nl.ds``)."""
    return DynSlice(start, size, step)


class Life:
    """What the capacity rules, the precision flow and the dependency graph need of an allocation,
    kept after its arrays are freed: its id, memory, name, line, format, bytes per partition, its
    storage's bytes per row (``row``: dim 0's stride; the trace's byte offsets are in storage
    bytes; ``shape`` and ``strides`` the storage's own), and the steps it was allocated at and last
    used."""

    __slots__ = ("id", "memory", "name", "line", "format", "partition_bytes", "row", "shape", "strides", "itemsize",
                 "alloc_step", "first_use", "last_use", "program")

    def __init__(self, buffer: "Allocation", partition_bytes: int) -> None:
        self.id = buffer.id
        data = buffer.data
        self.row = data.strides[0] if data.ndim else data.itemsize
        # Its storage's shape, strides and element size (the whole buffer's placement).
        self.shape, self.strides, self.itemsize = data.shape, data.strides, data.itemsize
        self.memory = buffer.memory
        self.name = buffer.name
        self.line = buffer.line
        self.format = buffer.dtype.format  # the precision flow widens every narrow allocation
        self.partition_bytes = partition_bytes
        self.alloc_step = 0
        self.program: tuple = ()  # the grid program (logical core) that allocated it: each has its SBUF and PSUM
        self.first_use: int | None = None
        self.last_use: int | None = None


_STORAGE: dict[str, tuple] = {}


_EXACT_STORAGE = (np.dtype(np.float64), np.dtype(np.uint64), np.uint64(np.iinfo(np.uint64).max))


def _storage(dtype: DType) -> tuple:
    """(storage dtype, mask dtype of the same itemsize, the mask's all-written value)."""
    if dtype.name not in _STORAGE:
        st = storage_dtype(dtype)
        mask_type = np.dtype(f"u{st.itemsize}")
        _STORAGE[dtype.name] = (st, mask_type, mask_type.type(np.iinfo(mask_type).max))
    return _STORAGE[dtype.name]


class Allocation:
    """One allocation: its memory, dtype, shape, name, the kernel line that made it, the data and
    the written-bytes mask (and, in PSUM, each element's last writer).

    The mask is made when first asked for: a tile written whole by its first instruction (most
    are) never needs one. Until then ``complete`` says everything (True: every byte written;
    False: none is); once made, the mask array is kept for the buffer's life (views hold it)."""

    def __init__(self, shape: Sequence[int], dtype: DType, memory: Memory, name: str, line: str,
                 data: np.ndarray | None = None, tiles: int = 1) -> None:
        ctx = _context._stack[-1] if _context._stack else None
        self.id = next(ctx.ids if ctx is not None else _ids)
        self.shape = shape = shape if type(shape) is tuple and all(type(s) is int for s in shape) else \
            tuple(int(s) for s in shape)
        self.dtype = dtype
        self.memory = memory
        self.name = name or f"{memory.name}_{self.id}"
        self.line = line
        st, self._mask_type, self.full = _storage(dtype)
        if ctx is not None and ctx.exact and dtype.kind == "float":
            # Run.exact(): float tiles hold binary64 values (the kernel's dtype is kept: its branches,
            # limits and byte counts are the same; only the roundings are gone).
            st, self._mask_type, self.full = _EXACT_STORAGE
            if data is not None:
                data = data.astype(np.float64)
        # On chip, uninitialised: tiles are made by the thousand and nearly all are written whole
        # by their first instruction, and zeroing fresh pages cost the 2048^3 matmul kernel a
        # tenth of its time. Such bytes are never seen: they are unwritten until an instruction
        # writes them, and the first look at an unwritten buffer's mask zeroes them (Allocation.mask),
        # (and a first write to part of it zeroes the rest, access.before_write), so that bits
        # copied from it are the same on every run. HBM tensors (outputs) start zero.
        given = data is not None
        if not given:
            # Nothing is made before the target could hold it (an SBUF tile of 2**40 bytes per
            # partition is a finding, not numpy's "Unable to allocate" or a host swapped to a halt).
            refuse_oversized(ctx, shape, dtype, memory, name, line, tiles)
            try:
                data = (np.empty if memory.on_chip else np.zeros)(shape, dtype=st)
            except MemoryError:
                raise MemoryError(f"numeq cannot hold the {memory.name} tensor {self.name} of shape {shape} "
                                  f"({dtype}, {_size(math.prod(shape) * st.itemsize)}) in this host's memory") from None
            self.data = data
            self._uninitialised = memory.on_chip
        else:
            self.data = data
            self._uninitialised = False
        self._mask: np.ndarray | None = None
        # complete: every byte written (reads skip the mask).
        self.complete = given
        self._address: int | None = None
        # PSUM: what last wrote each element. While one code holds for every element, writer_all
        # says it and no array exists (most PSUM tiles are written whole by their matmuls and read
        # whole); the array is made when parts differ (or when asked for) and kept from then on.
        self.tracks_writer = memory.name == "psum"
        self._writer: np.ndarray | None = None
        self.writer_all: int | None = WRITER_NONE
        self.life = Life(self, math.prod(shape[1:]) * dtype.itemsize if shape else dtype.itemsize)
        self.dirty = False  # some instruction wrote it (kernel inputs written are copied back)
        self.holds_other = False  # PSUM: some element holds a non-matmul result (WRITER_OTHER)
        self.placed: Any = None  # a direct allocation's physical tiles (machine.placement.Placed)
        # (line, message, whole) of the first read of unwritten bytes whose results this tile holds
        # (rules.undefined): the read_uninitialised finding names it if they reach something.
        self.undefined_from: Any = None
        # HBM under SPMD: per element the program that last wrote it and the core_barriers it had
        # passed then, the same of its last reader (machine.races)
        self.program_access: Any = None

    @property
    def mask(self) -> np.ndarray:
        """The written-bytes mask (made now if it was not: all written or none, as ``complete``)."""
        if self._mask is None:
            if self._uninitialised and not self.complete:
                self.data[...] = 0
            self._uninitialised = False
            self._mask = np.full(self.shape, self.full if self.complete else 0, dtype=self._mask_type)
        return self._mask

    @property
    def writer(self) -> np.ndarray | None:
        """PSUM: each element's last writer (made now from writer_all if there is no array yet)."""
        if not self.tracks_writer:
            return None
        if self._writer is None:
            self._writer = np.full(self.shape, self.writer_all, dtype=self._mask_type)
        return self._writer

    def covered_by(self, t: "Tensor") -> bool:
        """Whether view ``t`` is every byte of this buffer, in storage order."""
        return t.data.nbytes == self.data.nbytes and t.data.flags.c_contiguous

    @property
    def address(self) -> int:
        """The data's first byte."""
        if self._address is None:
            self._address = self.data.__array_interface__["data"][0]
        return self._address

    @property
    def partition_bytes(self) -> int:
        """Bytes each partition holds (SBUF, PSUM: dim 0 is the partition axis)."""
        return self.life.partition_bytes

    def whole(self) -> "Tensor":
        return Tensor(self, self.data, self._mask, self._writer, self.dtype)


class Tensor:
    """A view of a buffer, as NKI kernels hold it: ``shape``, ``dtype``, ``buffer`` (the memory),
    ``name``; indexing, ``.ap()``, ``.reshape`` and ``.view`` give further views."""

    __slots__ = ("base", "data", "shape", "_mask", "_writer", "dtype", "checked", "_parts", "_offset", "indirection")

    def __init__(self, base: Allocation, data: np.ndarray, mask: np.ndarray | None, writer: np.ndarray | None,
                 dtype: DType) -> None:
        self.base = base
        self.data = data
        self.shape: tuple[int, ...] = data.shape  # a view's shape never changes (views are new Tensors)
        self._mask = mask  # None: taken from the buffer's mask when asked for (Allocation.mask)
        self._writer = writer  # None: taken from the buffer's when asked for (Allocation.writer)
        self.dtype = dtype
        self.checked = False  # the partition rules hold for this view (_rules.check_on_chip)
        self._parts: tuple[int, int, int] | None = None
        self._offset: int | None = None
        # None: addressed statically; else (the dims an index chose, the index): is_indirect()
        self.indirection: tuple[tuple[int, ...], Any] | None = None

    # --- what kernels read -------------------------------------------------------------------
    @property
    def ndim(self) -> int:
        return self.data.ndim

    @property
    def buffer(self) -> Memory:
        return self.base.memory

    @property
    def name(self) -> str:
        return self.base.name

    @property
    def size(self) -> int:
        return int(self.data.size)

    def __len__(self) -> int:
        return self.data.shape[0]

    def __repr__(self) -> str:
        return f"Tensor({self.base.name}, shape={self.shape}, dtype={self.dtype}, buffer={self.base.memory})"

    @property
    def mask(self) -> np.ndarray:
        """This view of the buffer's written-bytes mask: the same bytes as ``data``, read as
        unsigned integers of its itemsize."""
        if self._mask is None:
            self._mask = self._same_bytes(self.base.mask)
        return self._mask

    @property
    def writer(self) -> np.ndarray | None:
        """PSUM: this view of the buffer's writer codes (laid out as the mask); None elsewhere."""
        if self._writer is None and self.base.tracks_writer:
            self._writer = self._same_bytes(self.base.writer)
        return self._writer

    def _same_bytes(self, whole: np.ndarray) -> np.ndarray:
        """The elements of ``whole`` (an array laid out as the buffer's data, of its itemsize) at
        this view's bytes, read as unsigned integers of the view's itemsize."""
        base, data = self.base, self.data
        if data is base.data:
            return whole
        return np.ndarray(data.shape, np.dtype(f"u{data.itemsize}"), whole,
                          data.__array_interface__["data"][0] - base.address, data.strides)

    # --- views (nki.language NkiTensor: each shares this view's storage) -------------------------
    def _apply(self, f, dim_map: dict | None = None, values=None) -> "Tensor":
        """The view ``f`` makes of data, mask and writer codes (numpy views: writes land in the
        buffer). ``dim_map`` (old dim -> new dim) carries an indirect view's indexed dims; ``values``
        is for the arrays of an Indirect view that hold values rather than storage (its override)."""
        v = Tensor(self.base, f(self.data), None if self._mask is None else f(self._mask),
                   None if self._writer is None else f(self._writer), self.dtype)
        if self.indirection is not None:
            v.indirection = _remap(self.indirection, dim_map)
        return v

    def __getitem__(self, key: Any) -> "Tensor":
        index = _indexing.normalise(key, self.shape, self)
        if isinstance(index, _indexing.Gather):
            return index.view(self)
        if self.indirection is None:
            return self._apply(lambda a: a[index])
        mapping, narrowed = _indexing.index_dim_map(index, self.shape)
        _tensor_views._indirect_rule(self, "indexing", narrowed, f"index {key!r}")
        return self._apply(lambda a: a[index], mapping)

    def __setitem__(self, key: Any, value: Any) -> None:
        _indexing.assign(self, key, value)

    def ap(self, pattern: Sequence[Sequence[int]] | None = None, offset: int | None = None, *args: Any,
           **kwargs: Any) -> "Tensor":
        """An access pattern over the buffer's storage: ``pattern`` = [[step, count], ...]
        outermost first, steps in elements; ``offset`` None starts at this view's first element, an
        int at that element of the buffer (see ``views.access_pattern``)."""
        try:
            return access_pattern(self, pattern, offset, *args, **kwargs)
        except _indexing.PatternOutside as e:
            return OutsideBuffer(self.base, e.shape, e.dtype, e.message, _context.where())

    def reshape(self, *args: Any, **kwargs: Any) -> "Tensor":
        """``reshape(shape)`` / ``reshape(shape=...)`` (AWS's keyword) / ``reshape(n0, n1, ...)``: the
        same elements in another shape, a view of the current layout (see ``tensor_views.reshape``)."""
        return _tensor_views.reshape(self, args, kwargs)

    def permute(self, *dims: Any, **kwargs: Any) -> "Tensor":
        """Dims reordered: ``permute((0, 2, 1))`` (or ``dims=``, or the dims positionally)."""
        if kwargs:
            if dims or set(kwargs) != {"dims"}:
                raise TypeError(f"permute: takes dims once; got {sorted(kwargs)}")
            dims = (kwargs["dims"],)
        if len(dims) == 1 and hasattr(dims[0], "__iter__"):
            dims = tuple(dims[0])
        return _tensor_views.permute(self, dims)

    def broadcast(self, dim: int, size: int) -> "Tensor":
        """Size-1 dim ``dim`` repeated ``size`` times (stride 0)."""
        return _tensor_views.broadcast(self, dim, size)

    def expand_dim(self, dim: int) -> "Tensor":
        """A new size-1 dim at position ``dim``."""
        return _tensor_views.expand_dim(self, dim)

    def squeeze_dim(self, dim: int) -> "Tensor":
        """Size-1 dim ``dim`` removed."""
        return _tensor_views.squeeze_dim(self, dim)

    def reshape_dim(self, dim: int, shape: Sequence[int]) -> "Tensor":
        """Dim ``dim`` split into ``shape`` (one -1 inferred)."""
        return _tensor_views.reshape_dim(self, dim, shape)

    def flatten_dims(self, start_dim: int, end_dim: int) -> "Tensor":
        """Dims start_dim..end_dim (inclusive, contiguous in memory) merged into one."""
        return _tensor_views.flatten_dims(self, start_dim, end_dim)

    def rearrange(self, src_pattern: Any, dst_pattern: Any, fixed_sizes: dict | None = None) -> "Tensor":
        """einops-style split, reorder and merge (``(('b', ('h', 'w')), ('b', 'w', 'h'), {'h': 4})``)."""
        return _tensor_views.rearrange(self, src_pattern, dst_pattern, fixed_sizes)

    def slice(self, dim: int, start: int, end: int, step: int = 1) -> "Tensor":
        """Elements start..end-1 (every step-th) of dim ``dim``."""
        return _tensor_views.slice_dim(self, dim, start, end, step)

    def select(self, dim: int, index: Any) -> "Tensor":
        """Element ``index`` of dim ``dim`` (an int), or the one an index tile / register holds at
        run time (an indirect view)."""
        return _tensor_views.select(self, dim, index)

    def vector_select(self, dim: int, vector_offset: Any) -> "Tensor":
        """Partition p of the result is element vector_offset[p] of dim 0 (an HBM gather view)."""
        return _tensor_views.vector_select(self, dim, vector_offset)

    def indirect(self, index: Any, num_elem: int | None = None) -> "Tensor":
        """Tensor Indirection (NeuronCore-v4 and later: a target_generation finding on numeq's targets)."""
        return _tensor_views.indirect(self, index, num_elem)

    def view(self, dtype: Any) -> "Tensor":
        """The same bytes read as ``dtype`` (a bitcast; the last axis scales by the itemsizes; it
        must be contiguous, and the view not indirect)."""
        d = dtype_of(dtype, "dtype")
        if self.indirection is not None:
            raise ValueError(f"view: {self.name} is an indirect view (dynamic select / vector_select / .ap() with an "
                             "offset tile); view(dtype) is not supported after one")
        if self.data.dtype == np.float64:  # only Run.exact()'s tiles hold binary64
            raise _context.Unsupported(f"{_context.where()}: Run.exact() cannot follow the kernel here: it reads the "
                                       f"bits of the float tile {self.name} as {d} (view / bitcast), and the exact "
                                       "dataflow keeps values, not the hardware's bit patterns")
        st = storage_dtype(d)
        mask_type = np.dtype(f"u{st.itemsize}")
        if st.itemsize != self.data.itemsize and self.ndim and self.shape[-1] != 1 and self.strides[-1] != 1:
            raise ValueError(f"view: dtype={d}: the last dim of {self.name} (shape {self.shape}, strides "
                             f"{self.strides}) is not contiguous; a bitcast to another size needs it contiguous")
        try:
            data = self.data.view(st)
            mask = None if self._mask is None else self._mask.view(mask_type)
        except ValueError as e:
            raise ValueError(f"view: cannot read {self.name} of shape {self.shape} as dtype={d} ({e})") from None
        writer = None if self._writer is None else self._writer.view(mask_type)
        return Tensor(self.base, data, mask, writer, d)

    reinterpret_cast = view

    def bitcast(self, dtype: Any) -> "Tensor":
        return self.view(dtype)

    # --- where the view lies -------------------------------------------------------------------
    def element_offset(self) -> int:
        """The element offset of this view's first element from its buffer's start."""
        if self._offset is None:
            g = self._geometry()
            if g is self.base.data:
                self._offset = 0
            else:
                self._offset = (g.__array_interface__["data"][0] - self.base.address) // self.base.data.itemsize
        return self._offset

    def placement(self) -> tuple:
        """(buffer id, byte offset, shape, strides in bytes): where in its buffer's storage this
        view lies, as the dependency graph reads it. A view addressed at run time (gather,
        scatter) is placed as its whole buffer."""
        base = self.base
        if self.indirection is not None:
            data = base.data
            return (base.id, 0, data.shape, data.strides)
        data = self._geometry()
        if data is base.data:
            return (base.id, 0, data.shape, data.strides)
        return (base.id, self.element_offset() * base.data.itemsize, data.shape, data.strides)

    def partitions(self) -> tuple[int, int, int]:
        """(first partition, count, step) this on-chip view touches (dim 0 is the partition axis)."""
        if self._parts is None:
            base = self.base
            if not base.shape:
                self._parts = (0, 1, 1)
                return self._parts
            row = base.data.strides[0] if base.data.ndim else base.data.itemsize
            if self.data is base.data:
                first = 0
            else:
                delta = self.data.__array_interface__["data"][0] - base.address
                first = delta // row if row else 0
                if self._offset is None and self._geometry() is self.data:
                    self._offset = delta // base.data.itemsize  # read once, for element_offset too
            if self.data.ndim == 0:
                self._parts = (first, 1, 1)
            else:
                self._parts = (first, self.data.shape[0], self.data.strides[0] // row if row else 0)
        return self._parts

    def _geometry(self) -> np.ndarray:
        """The array whose pointer and strides are this view's place in the buffer (its data; an
        Indirect view's data is a copy, and its layout says where the static pattern lies)."""
        return self.data

    @property
    def strides(self) -> tuple[int, ...]:
        """Strides in elements of the view's dtype (NkiTensor.strides: element [i0, ..] lies at
        offset + sum(strides[k] * i_k) of the storage)."""
        g = self._geometry()
        return tuple(s // g.itemsize for s in g.strides)

    @property
    def offset(self) -> int:
        """Elements (of the view's dtype) from the storage's start to the view's first element."""
        g = self._geometry()
        if g is self.base.data:
            return 0
        return (g.__array_interface__["data"][0] - self.base.address) // g.itemsize

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    def get_pattern(self) -> list[list[int]]:
        """The view as ``[[stride, count], ...]``, one pair per dim in order (what ``.ap()`` takes)."""
        return [[s, n] for s, n in zip(self.strides, self.shape)]

    def is_contiguous(self) -> bool:
        """Whether each dim of size above 1 has the stride of the product of the sizes inside it
        (row-major, no gaps); on SBUF / PSUM dim 0, the partition dim, is not counted."""
        strides, shape = self.strides, self.shape
        first = 1 if self.base.memory.on_chip else 0
        return all(shape[d] == 1 or strides[d] == math.prod(shape[d + 1:]) for d in range(first, len(shape)))

    def is_indirect(self) -> bool:
        """Whether an index chose this view's addresses (a dynamic select, vector_select, or
        ``.ap()`` with scalar_offset / vector_offset)."""
        return self.indirection is not None

    def free_size(self) -> int:
        return math.prod(self.data.shape[1:]) if self.data.ndim else 1

    # Arithmetic and in-place operators belong to the older interface (tiles as values); the
    # language module installs them.


def _remap(indirection: tuple, dim_map: dict | None) -> tuple:
    """An indirect view's (dims, index) after a view maps its dims (None: unchanged)."""
    dims, index = indirection
    if dim_map is None:
        return indirection
    return tuple(dim_map[d] for d in dims if dim_map.get(d) is not None), index


class OutsideBuffer(Tensor):
    """A view an access pattern made past its buffer's ends (``Tensor.ap``): legal to build, an
    index_bounds error (at the line that built it) where an instruction reads or writes it or a
    further view is taken of it. Its values are none of the buffer's: zeros, not stored."""

    __slots__ = ("message", "line")

    def __init__(self, base: Allocation, shape: tuple, dtype: DType, message: str, line: str) -> None:
        storage = np.dtype(dtype.storage)
        super().__init__(base, np.broadcast_to(np.zeros((), storage), shape),
                         np.broadcast_to(np.zeros((), np.dtype(f"u{storage.itemsize}")), shape), None, dtype)
        self.message, self.line = message, line

    def fault(self) -> Exception:
        return _context.KernelFault(_context.current().find("index_bounds", "error", f"{self.name}: {self.message}",
                                                            _indexing._BOUNDS_SOURCE, at=self.line))

    def _refused(self, *args: Any, **kwargs: Any) -> Any:
        raise self.fault()


for _method in ("_apply", "__getitem__", "__setitem__", "ap", "reshape", "permute", "broadcast", "expand_dim",
                "squeeze_dim", "reshape_dim", "flatten_dims", "rearrange", "slice", "select", "vector_select",
                "indirect", "view", "bitcast"):
    setattr(OutsideBuffer, _method, OutsideBuffer._refused)
