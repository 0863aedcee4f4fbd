"""The dependency graph of a run: which instruction must wait for which, read from the trace.

Every traced instruction records where its operands lie (``Instruction.writes`` / ``reads``: the
buffer, byte offset, shape and byte strides of each view; ``machine.memory.Tensor.placement``).
Two instructions depend on each other where one writes bytes the other reads or writes, in
program order: read after write (``raw``: the value flows), write after read (``war``: the
reader must finish before the bytes change) and write after write (``waw``: the last write wins).
The NeuronCore's engines run their instruction streams in parallel and the compiler inserts
semaphores for exactly these orderings (NKI architecture guides: "engines ... execute
asynchronously", synchronised by semaphores), so they are what a schedule must keep.

Regions are compared per partition on chip (dim 0 of SBUF and PSUM is the partition axis: a
view is its partitions, first, count and step, times the hull of its free bytes within a
partition) and as a byte hull in HBM. A hull is conservative: two views interleaved within it
(even and odd columns) are taken to overlap, which can add an ordering the hardware would not
need, never drop one it needs. A view addressed at run time (gather, scatter) is its whole buffer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable

__all__ = ["Edge", "Graph", "Region", "graph", "region"]

KINDS = ("raw", "war", "waw")


@dataclass(frozen=True)
class Region:
    """Bytes of one buffer: ``buffer`` (its id), partitions ``first``, ``count``, ``step`` (HBM:
    0, 1, 1) and, within each, bytes ``[lo, hi)`` of its storage; ``dense``: every byte of that
    range is the view's (False: a hull, with gaps of other bytes in it)."""

    buffer: int
    first: int
    count: int
    step: int
    lo: int
    hi: int
    dense: bool = True

    def overlaps(self, other: "Region") -> bool:
        """Whether the two may share a byte (hulls compared: gaps are not looked into)."""
        if self.buffer != other.buffer or self.hi <= other.lo or other.hi <= self.lo:
            return False
        a_end = self.first + (self.count - 1) * self.step
        b_end = other.first + (other.count - 1) * other.step
        if a_end < other.first or b_end < self.first:
            return False
        if self.step == 1 and other.step == 1:
            return True
        # Two progressions of at most 128 partitions: compared as sets.
        return bool(set(range(self.first, a_end + 1, self.step)) & set(range(other.first, b_end + 1, other.step)))

    def covers(self, other: "Region") -> bool:
        """Whether every byte of ``other`` lies in this region."""
        if self.buffer != other.buffer or other.lo < self.lo or other.hi > self.hi:
            return False
        if self.step == 1:
            return self.first <= other.first and other.first + (other.count - 1) * other.step <= \
                self.first + self.count - 1
        mine = set(range(self.first, self.first + self.count * self.step, self.step))
        return all(p in mine for p in range(other.first, other.first + other.count * other.step, other.step))

    def minus(self, other: "Region") -> list["Region"]:
        """This region without the bytes of ``other``: exact where both are rectangles (one
        partition step), else this region whole unless ``other`` covers it; a hull with gaps
        (``other.dense`` False) takes nothing away, since it may not hold the bytes it spans."""
        if not other.dense or not self.overlaps(other):
            return [self]
        if other.covers(self):
            return []
        if self.step != 1 or other.step != 1:
            return [self]
        a0, a1, b0, b1 = self.first, self.first + self.count, other.first, other.first + other.count
        p0, p1, lo, hi = max(a0, b0), min(a1, b1), max(self.lo, other.lo), min(self.hi, other.hi)
        parts = []
        if a0 < p0:
            parts.append(Region(self.buffer, a0, p0 - a0, 1, self.lo, self.hi))
        if p1 < a1:
            parts.append(Region(self.buffer, p1, a1 - p1, 1, self.lo, self.hi))
        if self.lo < lo:
            parts.append(Region(self.buffer, p0, p1 - p0, 1, self.lo, lo))
        if hi < self.hi:
            parts.append(Region(self.buffer, p0, p1 - p0, 1, hi, self.hi))
        return parts


def _hull(offset: int, shape: tuple, strides: tuple, itemsize: int) -> tuple[int, int]:
    lo = hi = offset
    for n, s in zip(shape, strides):
        if n == 0:
            return offset, offset
        if s < 0:
            lo += (n - 1) * s
        else:
            hi += (n - 1) * s
    return lo, hi + itemsize


def region(placement: Any, life: Any) -> Region:
    """The region of a traced operand (``Instruction.writes`` / ``reads`` entry) of the buffer
    whose ``machine.memory.Life`` is ``life``."""
    if type(placement) is int:
        offset, shape, strides = 0, life.shape, life.strides
    else:
        _, offset, shape, strides = placement
    itemsize = life.itemsize
    lo, hi = _hull(offset, shape, strides, itemsize)
    row = life.row
    if not life.memory.on_chip or not row or not life.shape:
        return Region(life.id, 0, 1, 1, lo, hi, hi - lo == math.prod(shape) * itemsize)
    if shape and strides[0] % row == 0:
        first = offset // row
        f_lo, f_hi = _hull(offset - first * row, shape[1:], strides[1:], itemsize)
        if 0 <= f_lo and f_hi <= row:
            count, step = shape[0], strides[0] // row
            dense = f_hi - f_lo == math.prod(shape[1:]) * itemsize
            if count <= 1 or step == 0:
                return Region(life.id, first, 1, 1, f_lo, f_hi, dense)
            if step < 0:
                first, step = first + (count - 1) * step, -step
            return Region(life.id, first, count, step, f_lo, f_hi, dense)
    if hi <= lo:
        return Region(life.id, lo // row, 1, 1, 0, 0)
    # A view whose free axes cross partitions (a reshape across dim 0): every partition it
    # reaches, whole.
    first, last = lo // row, (hi - 1) // row
    return Region(life.id, first, last - first + 1, 1, 0, row, False)


@dataclass(frozen=True)
class Edge:
    """``after`` (a trace index) waits for ``before``: ``kind`` "raw", "war" or "waw", on the
    buffer named ``buffer``."""

    before: int
    after: int
    kind: str
    buffer: str


class Graph:
    """The run's instructions (``instructions``, the trace) and the orderings between them
    (``edges``); ``predecessors(i)`` / ``successors(i)`` by trace index."""

    def __init__(self, instructions: list, edges: list[Edge]) -> None:
        self.instructions = instructions
        self.edges = edges
        self._before: list[list[int]] = [[] for _ in instructions]
        self._after: list[list[int]] = [[] for _ in instructions]
        for e in edges:
            self._before[e.after].append(e.before)
            self._after[e.before].append(e.after)

    def predecessors(self, i: int) -> list[int]:
        """The trace indices instruction ``i`` waits for."""
        return self._before[i]

    def successors(self, i: int) -> list[int]:
        return self._after[i]

    def between(self, i: int, j: int) -> list[Edge]:
        """The edges from ``i`` to ``j``."""
        return [e for e in self.edges if e.before == i and e.after == j]

    def __len__(self) -> int:
        return len(self.instructions)

    def __repr__(self) -> str:
        counts = {k: sum(e.kind == k for e in self.edges) for k in KINDS}
        return (f"<Graph of {len(self.instructions)} instructions, "
                + ", ".join(f"{n} {k}" for k, n in counts.items()) + ">")


def graph(trace: list, lives: Iterable) -> Graph:
    """The dependency graph of ``trace`` (a run's instructions, in program order) over the
    buffers of ``lives`` (the run's allocations)."""
    life_of: dict[int, Any] = {life.id: life for life in lives}
    # Per buffer: the writes whose bytes no later write has covered, and the reads since.
    writes: dict[int, list[tuple[Region, int]]] = {}
    reads: dict[int, list[tuple[Region, int]]] = {}
    edges: list[Edge] = []
    seen: set[tuple[int, int, str]] = set()

    def add(before: int, after: int, kind: str, buffer: int) -> None:
        if before != after and (before, after, kind) not in seen:
            seen.add((before, after, kind))
            edges.append(Edge(before, after, kind, life_of[buffer].name))

    def placed(p: Any) -> Region:
        life = life_of.get(_buffer(p))
        if life is None:  # a scratch buffer the run did not register: its placement's byte hull
            life = life_of[_buffer(p)] = _Unregistered(p)
        return region(p, life)

    for i, ins in enumerate(trace):
        placed_reads = [placed(p) for p in ins.reads]
        placed_writes = [placed(p) for p in ins.writes]
        for r in placed_reads:
            for w, j in writes.get(r.buffer, ()):
                if w.overlaps(r):
                    add(j, i, "raw", r.buffer)
        for r in placed_writes:
            for w, j in writes.get(r.buffer, ()):
                if w.overlaps(r):
                    add(j, i, "waw", r.buffer)
            for q, j in reads.get(r.buffer, ()):
                if q.overlaps(r):
                    add(j, i, "war", r.buffer)
        for r in placed_reads:
            reads.setdefault(r.buffer, []).append((r, i))
        for r in placed_writes:
            # A write ends the part of an earlier write it overwrites (no later access needs that
            # one for those bytes), and the reads of those bytes have been ordered before it.
            writes[r.buffer] = [(part, j) for w, j in writes.get(r.buffer, ()) for part in w.minus(r)] + [(r, i)]
            if r.buffer in reads:
                reads[r.buffer] = [(part, j) for q, j in reads[r.buffer] for part in q.minus(r)]
    return Graph(trace, edges)


def _buffer(placement: Any) -> int:
    return placement if type(placement) is int else placement[0]


class _Unregistered:
    """A buffer the run's lives do not hold, read as HBM bytes (a byte hull, no partitions)."""

    class memory:
        on_chip = False

    def __init__(self, placement: Any) -> None:
        self.id = _buffer(placement)
        self.name = f"buffer {self.id}"
        _, _, self.shape, self.strides = placement if type(placement) is not int else (0, 0, (), ())
        self.itemsize = min((abs(s) for s in self.strides if s), default=1)
        self.row = 0
