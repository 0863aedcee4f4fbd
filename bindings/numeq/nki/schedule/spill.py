"""What the compiler adds when a run's tiles do not fit SBUF: spills.

A kernel's automatically allocated tiles are placed by the compiler, and where the tiles live at
one time take more SBUF than a partition holds, the compiler spills: it saves tiles to device
memory and reloads them before their next use. AWS's performance guide names both transfers
(nki_perf_guide.rst, "Opt #2. Fuse operations to minimize intermediate data spilling": "compiler
generated spilling", ``spill_save_bytes`` / ``spill_reload_bytes`` in the profile's summary,
"oversized block size might be causing spills"), and its kernel-optimization tutorial runs on trn2
a matmul whose tiles, live in program order, take 322 KiB per partition of the 224 KiB there are
(the blocked-free-dimensions version).

Which tiles the compiler spills, and when, is not documented. The model here (assumption
``sbuf_overflow``: "save_reload") is the textbook one, Belady's: where the tiles an instruction
needs do not fit, the resident tile whose next use lies furthest ahead leaves first. A tile
leaving is saved when it is still to be used and holds bytes written since it was last saved, and
it is reloaded at its next use. (Alternative "reload_inputs": a tile holding an unchanged copy of
an HBM tensor the kernel never writes is loaded again from there, with no save.) A tile is live
from its first access to its last use (or from its allocation: assumption ``tile_liveness``);
directly allocated tiles are where the kernel put them and never move. One instruction's own
operands must all be in SBUF at once: where they alone exceed it, nothing can be spilled to make
room (the ``sbuf_capacity`` error).

In the timeline a save waits for the last instruction that touched its tile, a reload for its
save, and the instruction for its reloads. A reload is issued where its tile left SBUF, and the
space it lands in is not waited for: the compiler is taken to issue reloads ahead of their use,
as its profiles show (the tutorial's blocked version keeps the Tensor engine 99.5% busy while its
DMA engines are 95.7% busy), so that spills cost DMA time, not a stall per reload.
"""

from __future__ import annotations

import heapq
from bisect import bisect_right
from dataclasses import dataclass
from typing import Any, Iterable

from ..machine.rules import spillable
from .graph import _buffer

__all__ = ["Transfer", "spills"]


@dataclass(frozen=True)
class Transfer:
    """One spill transfer: ``kind`` "save" (SBUF to device memory) or "reload" (back), of the
    tile ``buffer`` (its id; ``name``, and ``line`` where the kernel allocated it), ``bytes``
    over ``partitions``; made for trace index ``at`` (a save: where its tile leaves SBUF; a reload:
    the instruction that needs it back), issued among the DMA transfers just before trace index
    ``issued`` (a reload: where its tile left SBUF), after the trace indices ``after`` and the
    transfers ``after_transfers`` (indices into the spill list)."""

    kind: str
    buffer: int
    name: str
    line: str
    bytes: int
    partitions: int
    at: int
    issued: int
    after: tuple[int, ...]
    after_transfers: tuple[int, ...]


def _sbuf_uses(trace: list, tiles: dict[int, Any]) -> list[tuple[tuple[int, ...], frozenset[int]]]:
    """Per instruction: the spillable SBUF tiles it touches, and those it writes."""
    out = []
    for ins in trace:
        written = frozenset(b for b in map(_buffer, ins.writes) if b in tiles)
        touched = tuple(dict.fromkeys(b for b in map(_buffer, (*ins.writes, *ins.reads)) if b in tiles))
        out.append((touched, written))
    return out


def spills(trace: list, lives: Iterable, capacity: int, from_first_access: bool = True,
           reload_inputs: bool = False) -> list[Transfer]:
    """The save and reload transfers that fit a run's live SBUF tiles into ``capacity`` bytes per
    partition (the module's model), in the order they are made. ``reload_inputs``: a tile holding
    an unchanged copy of an HBM tensor the kernel never writes is loaded again from there, with no
    save (assumption ``sbuf_overflow``: "reload_inputs"; the documented spill saves every tile)."""
    tiles = spillable(lives)
    uses_of: dict[int, list[int]] = {}
    per_instruction = _sbuf_uses(trace, tiles)
    for i, (touched, _) in enumerate(per_instruction):
        for b in touched:
            uses_of.setdefault(b, []).append(i)
    arrive: dict[int, list[int]] = {}
    for b, uses in uses_of.items():
        # Life.alloc_step: the trace's length when the kernel declared it (the next instruction's index).
        if not from_first_access and tiles[b].alloc_step < uses[0]:
            arrive.setdefault(tiles[b].alloc_step, []).append(b)
    # HBM tensors no instruction writes: a tile copied from one needs no save.
    life_of = {life.id: life for life in lives}
    written_hbm = {b for ins in trace for b in map(_buffer, ins.writes)
                   if b in life_of and not life_of[b].memory.on_chip}

    def copy_of_hbm(ins: Any) -> bool:
        if not reload_inputs or ins.engine != "dma":
            return False
        read = [life_of.get(b) for b in map(_buffer, ins.reads)]
        return bool(read) and all(r is not None and not r.memory.on_chip and r.id not in written_hbm for r in read)

    transfers: list[Transfer] = []
    resident: set[int] = set()
    used = 0
    furthest: list[tuple[int, int]] = []  # (-next use, tile), stale entries skipped
    holds: set[int] = set()  # tiles holding bytes (written at least once)
    dirty: set[int] = set()  # tiles whose bytes device memory lacks
    last_touch: dict[int, int] = {}
    saved_by: dict[int, int] = {}  # tile -> its last save (a transfer index)
    left_at: dict[int, int] = {}  # tile -> the trace index where it last left SBUF

    def next_use(b: int, i: int) -> int | None:
        uses = uses_of[b]
        k = bisect_right(uses, i)
        return uses[k] if k < len(uses) else None

    def bring(b: int, i: int) -> None:
        nonlocal used
        resident.add(b)
        used += tiles[b].partition_bytes
        n = uses_of[b][0] if i < uses_of[b][0] else next_use(b, i - 1)
        if n is not None:
            heapq.heappush(furthest, (-n, b))

    for i, (touched, written) in enumerate(per_instruction):
        ins = trace[i]
        for b in arrive.get(i, ()):  # declared here, first used later (tile_liveness "allocation")
            bring(b, i)
        need = [b for b in touched if b not in resident]
        want = sum(tiles[b].partition_bytes for b in need)
        while used + want > capacity and furthest:
            neg, b = heapq.heappop(furthest)
            if b not in resident or b in touched or next_use(b, i - 1) != -neg:
                continue  # stale, or needed now
            resident.discard(b)
            used -= tiles[b].partition_bytes
            left_at[b] = i
            if b in dirty:
                dirty.discard(b)
                saved_by[b] = len(transfers)
                transfers.append(_transfer("save", tiles[b], i, i, (last_touch[b],), ()))
        for b in need:
            if b in holds:  # it was spilled: back from its save
                save = saved_by.get(b)
                transfers.append(_transfer("reload", tiles[b], i, left_at[b], (), () if save is None else (save,)))
            bring(b, i)
        for b in touched:
            last_touch[b] = i
            if b in written:
                holds.add(b)
                if copy_of_hbm(ins):
                    dirty.discard(b)
                else:
                    dirty.add(b)
            n = next_use(b, i)
            if n is None:
                resident.discard(b)
                used -= tiles[b].partition_bytes
            else:
                heapq.heappush(furthest, (-n, b))
    return transfers


def _transfer(kind: str, life: Any, at: int, issued: int, after: tuple, after_transfers: tuple) -> Transfer:
    partitions = life.shape[0] if life.shape else 1
    return Transfer(kind, life.id, life.name, life.line, life.partition_bytes * partitions, partitions, at, issued,
                    after, after_transfers)
