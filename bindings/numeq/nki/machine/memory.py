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
# per Inferentia2 chip; trainium2.rst: 96 GiB per Trainium2 chip). A larger HBM tensor is refused
# before numeq allocates it (TooLarge).
HBM_CHIP_BYTES = {"trn1": 32 * 2 ** 30, "inf2": 32 * 2 ** 30, "trn2": 96 * 2 ** 30}
_HBM_SOURCE = {"trn1": "about-neuron/arch/neuron-hardware/trainium.rst",
               "inf2": "about-neuron/arch/neuron-hardware/inferentia2.rst",
               "trn2": "about-neuron/arch/neuron-hardware/trainium2.rst"}
# On chip: each memory's bytes per partition in the target table.
_PER_PARTITION = {"sbuf": "sbuf_partition_bytes", "psum": "psum_partition_bytes"}


def _size(n: int) -> str:
    for unit, scale in (("TiB", 2 ** 40), ("GiB", 2 ** 30), ("MiB", 2 ** 20), ("KiB", 2 ** 10)):
        if n >= scale:
            return f"{n / scale:.4g} {unit}"
    return f"{n} B"


def refuse_oversized(ctx: Any, shape: tuple, dtype: DType, memory: "Memory", name: str, line: str) -> None:
    """Refuse, before any array is made, an allocation no target memory holds: an SBUF / PSUM tile
    whose bytes per partition exceed the memory's (``KernelFault``, the rule book's sbuf_capacity /
    psum_capacity), or whose partition dim exceeds the partitions while the tile exceeds the whole
    memory (partition_dim); an HBM tensor beyond the chip's HBM (``TooLarge``, naming ``shape``)."""
    tgt = ctx.target if ctx is not None else _target(DEFAULT_TARGET)
    what = f"{memory.name} tensor {name + ' ' if name else ''}of shape {shape} ({dtype})"
    at = line if line and not line.startswith("<") else None
    if memory.on_chip:
        key = _PER_PARTITION[memory.name]
        limit = int(tgt[key])
        partitions = int(tgt["partitions"])
        per_partition = math.prod(shape[1:]) * dtype.itemsize if shape else dtype.itemsize
        if per_partition > limit:
            message = (f"{what} takes {per_partition} B per partition; {tgt.name}'s {memory.name.upper()} holds "
                       f"{limit} B per partition (refused before allocation)")
            if ctx is None:
                raise _context.TooLarge(f"shape: {message}")
            raise _context.KernelFault(ctx.find(f"{memory.name}_capacity", "error", message,
                                                tgt.spec(key).cite(), at=at))
        if shape and shape[0] > partitions and shape[0] * per_partition > partitions * limit:
            message = f"{name or what} has {shape[0]} partitions (dim 0); the target has {partitions}"
            if ctx is None:
                raise _context.TooLarge(f"shape: {message}")
            raise _context.KernelFault(ctx.find("partition_dim", "error", message, tgt.spec("partitions").cite(),
                                                at=at))
        return
    limit = HBM_CHIP_BYTES.get(tgt.name)
    nbytes = math.prod(shape) * dtype.itemsize
    if limit is not None and nbytes > limit:
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
    """What the capacity rules and the precision flow need of an allocation, kept after its arrays
    are freed: its memory, name, line, format, bytes per partition, and the steps it was allocated
    at and last used."""

    __slots__ = ("memory", "name", "line", "format", "partition_bytes", "alloc_step", "first_use", "last_use")

    def __init__(self, buffer: "Allocation", partition_bytes: int) -> None:
        self.memory = buffer.memory
        self.name = buffer.name
        self.line = buffer.line
        self.format = buffer.dtype.format  # the precision flow widens every narrow allocation
        self.partition_bytes = partition_bytes
        self.alloc_step = 0
        self.first_use: int | None = None
        self.last_use: int | None = None


_STORAGE: dict[str, tuple] = {}


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
                 data: np.ndarray | None = None) -> None:
        ctx = _context._stack[-1] if _context._stack else None
        self.id = next(ctx.ids if ctx is not None else _ids)
        self.shape = shape = shape if type(shape) is tuple and all(type(s) is int for s in shape) else \
            tuple(int(s) for s in shape)
        self.dtype = dtype
        self.memory = memory
        self.name = name or f"{memory.name}_{self.id}"
        self.line = line
        st, self._mask_type, self.full = _storage(dtype)
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
            refuse_oversized(ctx, shape, dtype, memory, name, line)
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

    __slots__ = ("base", "data", "shape", "_mask", "_writer", "dtype", "checked", "_parts", "_offset")

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

    # --- views -------------------------------------------------------------------------------
    def _apply(self, f) -> "Tensor":
        return Tensor(self.base, f(self.data), None if self._mask is None else f(self._mask),
                      None if self._writer is None else f(self._writer), self.dtype)

    def __getitem__(self, key: Any) -> "Tensor":
        index = _indexing.normalise(key, self.shape, self)
        if isinstance(index, _indexing.Gather):
            return index.view(self)
        return self._apply(lambda a: a[index])

    def __setitem__(self, key: Any, value: Any) -> None:
        _indexing.assign(self, key, value)

    def ap(self, pattern: Sequence[Sequence[int]] | None = None, offset: int | None = None, *args: Any,
           **kwargs: Any) -> "Tensor":
        """An access pattern over the buffer's storage: ``pattern`` = [[step, count], ...]
        outermost first, steps in elements; ``offset`` None starts at this view's first element, an
        int at that element of the buffer (see ``views.access_pattern``)."""
        return access_pattern(self, pattern, offset, *args, **kwargs)

    def reshape(self, *shape: Any) -> "Tensor":
        """The same elements in another shape (the view must be contiguous, as NKI's is)."""
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        shape = tuple(operator.index(s) for s in shape)

        def reshaped(a: np.ndarray) -> np.ndarray:
            v = a.view()
            try:
                v.shape = shape
            except (AttributeError, ValueError) as e:
                raise ValueError(f"reshape: cannot view {self.name} of shape {self.shape} as {shape} without "
                                 f"copying ({e})") from None
            return v

        return self._apply(reshaped)

    def view(self, dtype: Any) -> "Tensor":
        """The same bytes read as ``dtype`` (a bitcast; the last axis scales by the itemsizes)."""
        d = dtype_of(dtype, "dtype")
        st = storage_dtype(d)
        mask_type = np.dtype(f"u{st.itemsize}")
        try:
            data = self.data.view(st)
            mask = None if self._mask is None else self._mask.view(mask_type)
        except ValueError as e:
            raise ValueError(f"view: cannot read {self.name} of shape {self.shape} as {d} ({e})") from None
        writer = None if self._writer is None else self._writer.view(mask_type)
        return Tensor(self.base, data, mask, writer, d)

    def bitcast(self, dtype: Any) -> "Tensor":
        return self.view(dtype)

    # --- where the view lies -------------------------------------------------------------------
    def element_offset(self) -> int:
        """The element offset of this view's first element from its buffer's start."""
        if self._offset is None:
            if self.data is self.base.data:
                self._offset = 0
            else:
                self._offset = (self.data.__array_interface__["data"][0] - self.base.address) // self.base.data.itemsize
        return self._offset

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
                first = (self.data.__array_interface__["data"][0] - base.address) // row if row else 0
            if self.data.ndim == 0:
                self._parts = (first, 1, 1)
            else:
                self._parts = (first, self.data.shape[0], self.data.strides[0] // row if row else 0)
        return self._parts

    @property
    def strides(self) -> tuple[int, ...]:
        """Strides in elements (NKI's NkiTensor.strides)."""
        return tuple(s // self.data.itemsize for s in self.data.strides)

    @property
    def offset(self) -> int:
        """Elements from the buffer's start to this view's first element."""
        return self.element_offset()

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    def get_pattern(self) -> list[list[int]]:
        return [[s, n] for s, n in zip(self.strides, self.shape)]

    def is_contiguous(self) -> bool:
        return bool(self.data.flags.c_contiguous)

    def free_size(self) -> int:
        return math.prod(self.data.shape[1:]) if self.data.ndim else 1

    # Arithmetic and in-place operators belong to the older interface (tiles as values); the
    # language module installs them.
