"""A timeline of a run: its dependency graph list-scheduled over the NeuronCore's engines and DMA
engines, with each instruction's estimated cost.

The model, each part a row of the target table (``machine.targets``) with its evidence:

- The Tensor, Vector, Scalar and GpSimd engines each run their own instruction stream in program
  order, in parallel with each other (NKI architecture guides); an instruction takes its traced
  ``cycles`` (the SDK 2.26 docstrings' formulas) at its engine's clock.
- A DMA transfer is split into packets, one per DMA engine per group of partitions, and runs on up
  to 16 engines in parallel, each moving ``dma_engine_bytes_per_s`` (nki-dma-overview); it costs a
  fixed ``dma_fixed_s`` before its bytes move (the DMA guides: small transfers are bound by a fixed
  cost; its size is an assumption), and a transfer to or from HBM moves at most ``hbm_bytes_per_s``
  (the core's share of the chip's bandwidth, an assumption). A transfer takes the DMA engines that
  are free first.
- An instruction starts when its engine (or its DMA engines) is free and every instruction it
  depends on (``schedule.graph``: read after write, write after read, write after write) has
  finished, plus ``semaphore_s`` where that one ran on another engine.
- Each logical core of a grid (LNC=2's two cores) has its own engines and DMA engines. A
  core_barrier waits on its engine for each other core's last instruction before that core's
  barrier of the same meeting; a sendrecv orders the cores only through its data (its partner's
  source is read when it arrives).

Every constant the schedule used is in ``Schedule.parameters`` (name -> ``Spec``), and
``Run.schedule(assume={name: value})`` changes any of them.
"""

from __future__ import annotations

import bisect
import heapq
from dataclasses import dataclass, field, replace
from typing import Any, Sequence

from ..machine.targets import ENGINE_CLOCKS, Spec, Target
from .graph import Graph
from .spill import Transfer

__all__ = ["Schedule", "PARAMETERS", "schedule"]

_HBM = frozenset({"hbm", "shared_hbm", "private_hbm"})
# The target rows the schedule reads.
PARAMETERS = ("tensor_clock_hz", "vector_clock_hz", "scalar_clock_hz", "gpsimd_clock_hz", "dma_engines",
              "dma_engine_bytes_per_s", "dma_partitions_per_engine", "dma_fixed_s", "hbm_bytes_per_s", "semaphore_s")


@dataclass
class Schedule:
    """The predicted timeline of a run: ``time_s`` (the kernel's time), ``active`` (engine or
    "dma" -> the fraction of ``time_s`` it is busy; "dma": some DMA engine is), ``bound_by`` (the
    engine busiest on the critical path), ``critical_path`` (trace indices, first to last: each
    waits for the one before it), ``by_line`` ([(file:line, seconds)] of the critical path's time
    per kernel line, largest first; a spill's time under its tile's line), ``start`` / ``finish``
    / ``engine`` (per node: the trace's indices, then ``spills``' from ``len(trace)`` on),
    ``parameters`` (what the model read: name -> ``Spec``), ``spills`` (the compiler's save and
    reload transfers where the run's tiles overflow SBUF: ``schedule.spill``)."""

    time_s: float
    active: dict[str, float]
    bound_by: str
    critical_path: list[int]
    by_line: list[tuple[str, float]]
    start: list[float] = field(repr=False)
    finish: list[float] = field(repr=False)
    engine: list[str] = field(repr=False)
    parameters: dict[str, Spec] = field(repr=False, default_factory=dict)
    spills: list[Transfer] = field(repr=False, default_factory=list)

    @property
    def spill_bytes(self) -> int:
        """The bytes the compiler's spills move (saves and reloads)."""
        return sum(t.bytes for t in self.spills)

    def __str__(self) -> str:
        lines = [f"predicted time {self.time_s * 1e6:.2f} us, bound by {self.bound_by}",
                 "active: " + ", ".join(f"{k} {v:.0%}" for k, v in sorted(self.active.items(), key=lambda kv: -kv[1])),
                 "critical path by line:"]
        lines += [f"  {where:40s} {t * 1e6:10.2f} us  {t / self.time_s:6.1%}" for where, t in self.by_line[:10]]
        if self.spills:
            saves = sum(t.kind == "save" for t in self.spills)
            lines.append(f"spills (the compiler's, where live tiles overflow SBUF): {saves} saves, "
                         f"{len(self.spills) - saves} reloads, {self.spill_bytes / 2 ** 20:.1f} MiB")
        return "\n".join(lines)


def _transfer_duration(nbytes: int, partitions: int, hbm: bool, p: dict[str, float]) -> tuple[float, int]:
    """(seconds, DMA engines it takes) of one DMA transfer."""
    parts = partitions or int(p["dma_engines"] * p["dma_partitions_per_engine"])
    engines = max(1, min(int(p["dma_engines"]), -(-parts // int(p["dma_partitions_per_engine"]))))
    rate = engines * p["dma_engine_bytes_per_s"]
    if hbm:
        rate = min(rate, p["hbm_bytes_per_s"])  # HBM delivers no more than the core's share
    return p["dma_fixed_s"] + nbytes / rate, engines


def _duration(ins: Any, p: dict[str, float]) -> tuple[float, int]:
    """(seconds, DMA engines it takes) of one instruction."""
    if ins.engine == "dma":
        hbm = any(op[1] in _HBM for op in ins.dst) or any(op[1] in _HBM for op in ins.srcs)
        return _transfer_duration(ins.bytes, ins.partitions, hbm, p)
    clock = ENGINE_CLOCKS.get(ins.engine)
    if clock is None:
        raise ValueError(f"the schedule has no engine {ins.engine!r} (instruction {ins.name} at {ins.where}); it "
                         f"models {', '.join(ENGINE_CLOCKS)} and dma")
    return ins.cycles / p[clock], 0


def schedule(g: Graph, target: Target, assume: dict[str, float] | None = None,
             spilled: Sequence[Transfer] = ()) -> Schedule:
    """List-schedule graph ``g`` on ``target`` (``assume``: parameter -> value, replacing the
    target's; names in ``PARAMETERS``), with the compiler's spill transfers ``spilled``
    (``schedule.spill``) as DMA transfers before the instructions they are made for."""
    specs = {name: target.spec(name) for name in PARAMETERS}
    for name, value in (assume or {}).items():
        if name not in specs:
            raise ValueError(f"assume: the schedule has no parameter {name!r}; valid: {', '.join(PARAMETERS)}")
        try:
            v = float(value)
        except (TypeError, ValueError):
            raise ValueError(f"assume: {name} must be a number, got {value!r}") from None
        if not v >= 0 or v == float("inf") or (v == 0 and name not in ("dma_fixed_s", "semaphore_s")):
            raise ValueError(f"assume: {name} must be a finite number above 0, got {value!r}")
        specs[name] = replace(specs[name], value=v, evidence="assumed", source="given to Run.schedule(assume=)")
    p = {k: s.value for k, s in specs.items()}
    trace = g.instructions
    n, m = len(trace), len(spilled)
    # Nodes: the trace's instructions (0 .. n-1), then the spill transfers (n ..), each issued
    # just before the instruction Transfer.issued; an instruction waits for the reloads it needs.
    start, finish = [0.0] * (n + m), [0.0] * (n + m)
    engine_of = [ins.engine for ins in trace] + ["dma"] * m
    issued_at: dict[int, list[int]] = {}
    needs: dict[int, list[int]] = {}
    for k, t in sorted(enumerate(spilled), key=lambda kt: kt[1].issued):
        issued_at.setdefault(t.issued, []).append(n + k)
        if t.kind == "reload":
            needs.setdefault(t.at, []).append(n + k)
    waits_across = _barrier_waits(trace)
    engine_free: dict[tuple, tuple[float, int]] = {}  # (core, engine) -> (free at, the node it finished)
    # Each logical core (grid program) has its own engines and DMA engines (LNC=2 runs on two physical
    # cores: nki/get-started/about/lnc.rst); a heap per core of its DMA engines' (free at, last node).
    dma_free: dict[tuple, list] = {}
    core_of = [ins.program for ins in trace] + [()] * m
    busy: dict[str, list[tuple[float, float]]] = {}
    waits_for = [-1] * (n + m)  # what determined each start: a node, or -1 (its engine was free)
    sem = p["semaphore_s"]

    # The compiler's spill transfers run on their own DMA queue (nki_perf_guide.rst, Opt #4:
    # "qSyncSpillReload0"), generated "by analyzing SBUF usage": here each takes the first gap of
    # the DMA engines' time, at or after it is ready, long enough for it, while the kernel's own
    # transfers keep their queue's order and step over the spills placed before them.
    dma_starts: list[float] = []  # every DMA transfer's (start, finish), sorted by start
    dma_spans: list[tuple[float, float]] = []
    spill_spans: list[tuple[float, float, int]] = []  # the spills' (start, finish, node), sorted by start

    def ready_after(node: int, engine: str, preds: Any) -> tuple[float, int]:
        ready, why = 0.0, -1
        for j in preds:
            t = finish[j] + (sem if engine_of[j] != engine or engine == "dma" or core_of[j] != core_of[node] else 0.0)
            if t > ready:
                ready, why = t, j
        return ready, why

    def record(node: int, engine: str, at: float, seconds: float, why: int) -> None:
        start[node], finish[node], waits_for[node] = at, at + seconds, why
        busy.setdefault(engine, []).append((at, at + seconds))
        if engine == "dma" and m:  # (only spills look for gaps)
            k = bisect.bisect_right(dma_starts, at)
            dma_starts.insert(k, at)
            dma_spans.insert(k, (at, at + seconds))

    def place(node: int, engine: str, seconds: float, engines: int, preds: Any) -> None:
        ready, why = ready_after(node, engine, preds)
        core = core_of[node]
        if engines:
            pool = dma_free.setdefault(core, [(0.0, -1)] * int(p["dma_engines"]))
            taken = [heapq.heappop(pool) for _ in range(engines)]
            free, last = taken[-1]
        else:
            free, last = engine_free.get((core, engine), (0.0, -1))
        if free > ready:
            ready, why = free, last
        if engines and spill_spans:  # step over the spills in the way
            k = max(0, bisect.bisect_left(spill_spans, (ready, ready, -1)) - 1)
            while k < len(spill_spans) and spill_spans[k][0] < ready + seconds:
                if spill_spans[k][1] > ready:
                    ready, why = spill_spans[k][1], spill_spans[k][2]
                k += 1
        record(node, engine, ready, seconds, why)
        if engines:
            for _ in taken:
                heapq.heappush(pool, (finish[node], node))
        else:
            engine_free[(core, engine)] = (finish[node], node)

    def place_spill(node: int, seconds: float, preds: Any) -> None:
        at, why = ready_after(node, "dma", preds)
        k = bisect.bisect_right(dma_starts, at)
        # The transfers started before ``at`` that may still run (the 64 latest: transfers are of
        # like lengths, so an earlier one has ended), then the first gap long enough.
        for back in range(max(0, k - 64), k):
            at = max(at, dma_spans[back][1])
        while k < len(dma_spans) and dma_spans[k][0] < at + seconds:
            at = max(at, dma_spans[k][1])
            k += 1
        record(node, "dma", at, seconds, why)
        bisect.insort(spill_spans, (at, at + seconds, node))

    for i, ins in enumerate(trace):
        for node in issued_at.get(i, ()):
            t = spilled[node - n]
            seconds, _ = _transfer_duration(t.bytes, t.partitions, True, p)
            place_spill(node, seconds, [*t.after, *(n + k for k in t.after_transfers)])
        seconds, engines = _duration(ins, p)
        place(i, ins.engine, seconds, engines, [*g.predecessors(i), *needs.get(i, ()), *waits_across.get(i, ())])
    time_s = max(finish, default=0.0)
    active = {e: (_union(iv) / time_s if time_s > 0 else 0.0) for e, iv in busy.items()}
    path: list[int] = []
    if n:
        i = max(range(n + m), key=lambda k: finish[k])
        while i >= 0:
            path.append(i)
            i = waits_for[i]
        path.reverse()
    per_line: dict[str, float] = {}
    per_engine: dict[str, float] = {}
    for i in path:
        t = finish[i] - start[i]
        where = trace[i].where if i < n else f"{spilled[i - n].line} ({spilled[i - n].kind} of {spilled[i - n].name})"
        per_line[where] = per_line.get(where, 0.0) + t
        per_engine[engine_of[i]] = per_engine.get(engine_of[i], 0.0) + t
    bound_by = max(per_engine, key=per_engine.get) if per_engine else "nothing"
    by_line = sorted(per_line.items(), key=lambda kv: -kv[1])
    return Schedule(time_s, active, bound_by, path, by_line, start, finish, engine_of, specs, list(spilled))


def _barrier_waits(trace: Sequence) -> dict[int, list[int]]:
    """For each core_barrier of a run on several cores, the instructions it waits for on the other
    cores: each other core's last instruction before its own barrier of the same meeting ("all
    specified NeuronCores must reach before any can proceed", nki.isa.core_barrier). Cores run in
    turns (machine.cores), so every such instruction precedes the barrier in the trace."""
    meetings: dict[tuple, list[tuple[int, int]]] = {}  # meeting -> (barrier, its core's instruction before it)
    last: dict[tuple, int] = {}  # core -> its latest instruction so far (one pass)
    for i, ins in enumerate(trace):
        if ins.name == "core_barrier" and ins.detail.get("barrier"):
            meetings.setdefault(ins.detail["barrier"], []).append((i, last.get(ins.program, -1)))
        last[ins.program] = i
    waits: dict[int, list[int]] = {}
    for nodes in meetings.values():
        for i, _ in nodes:
            waits[i] = [before for j, before in nodes if j != i and before >= 0]
    return waits


def _union(intervals: list[tuple[float, float]]) -> float:
    """The length of the union of ``intervals``."""
    total, end = 0.0, float("-inf")
    for a, b in sorted(intervals):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total
