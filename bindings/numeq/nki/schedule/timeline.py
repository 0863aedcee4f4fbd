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

Every constant the schedule used is in ``Schedule.parameters`` (name -> ``Spec``), and
``Run.schedule(assume={name: value})`` changes any of them.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field, replace
from typing import Any

from ..machine.targets import ENGINE_CLOCKS, Spec, Target
from .graph import Graph

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
    per kernel line, largest first), ``start`` / ``finish`` (seconds, per trace index),
    ``parameters`` (what the model read: name -> ``Spec``)."""

    time_s: float
    active: dict[str, float]
    bound_by: str
    critical_path: list[int]
    by_line: list[tuple[str, float]]
    start: list[float] = field(repr=False)
    finish: list[float] = field(repr=False)
    engine: list[str] = field(repr=False)
    parameters: dict[str, Spec] = field(repr=False, default_factory=dict)

    def __str__(self) -> str:
        lines = [f"predicted time {self.time_s * 1e6:.2f} us, bound by {self.bound_by}",
                 "active: " + ", ".join(f"{k} {v:.0%}" for k, v in sorted(self.active.items(), key=lambda kv: -kv[1])),
                 "critical path by line:"]
        lines += [f"  {where:40s} {t * 1e6:10.2f} us  {t / self.time_s:6.1%}" for where, t in self.by_line[:10]]
        return "\n".join(lines)


def _duration(ins: Any, p: dict[str, float]) -> tuple[float, int]:
    """(seconds, DMA engines it takes) of one instruction."""
    if ins.engine == "dma":
        parts = ins.partitions or int(p["dma_engines"] * p["dma_partitions_per_engine"])
        engines = max(1, min(int(p["dma_engines"]), -(-parts // int(p["dma_partitions_per_engine"]))))
        rate = engines * p["dma_engine_bytes_per_s"]
        if any(op[1] in _HBM for op in ins.dst) or any(op[1] in _HBM for op in ins.srcs):
            rate = min(rate, p["hbm_bytes_per_s"])  # HBM delivers no more than the core's share
        return p["dma_fixed_s"] + ins.bytes / rate, engines
    clock = ENGINE_CLOCKS.get(ins.engine)
    if clock is None:
        raise ValueError(f"the schedule has no engine {ins.engine!r} (instruction {ins.name} at {ins.where}); it "
                         f"models {', '.join(ENGINE_CLOCKS)} and dma")
    return ins.cycles / p[clock], 0


def schedule(g: Graph, target: Target, assume: dict[str, float] | None = None) -> Schedule:
    """List-schedule graph ``g`` on ``target`` (``assume``: parameter -> value, replacing the
    target's; names in ``PARAMETERS``)."""
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
    n = len(trace)
    start, finish = [0.0] * n, [0.0] * n
    engine_free: dict[str, tuple[float, int]] = {}  # engine -> (free at, the instruction it finished)
    dma_free = [(0.0, -1)] * int(p["dma_engines"])  # a heap of the DMA engines' (free at, last instruction)
    busy: dict[str, list[tuple[float, float]]] = {}
    waits_for = [-1] * n  # what determined each start: an instruction, or -1 (its engine was free)
    sem = p["semaphore_s"]
    for i, ins in enumerate(trace):
        seconds, engines = _duration(ins, p)
        ready, why = 0.0, -1
        for j in g.predecessors(i):
            t = finish[j] + (sem if trace[j].engine != ins.engine or ins.engine == "dma" else 0.0)
            if t > ready:
                ready, why = t, j
        if engines:
            taken = [heapq.heappop(dma_free) for _ in range(engines)]
            free, last = taken[-1]
        else:
            free, last = engine_free.get(ins.engine, (0.0, -1))
        if free > ready:
            ready, why = free, last
        start[i], finish[i], waits_for[i] = ready, ready + seconds, why
        if engines:
            for _ in taken:
                heapq.heappush(dma_free, (finish[i], i))
        else:
            engine_free[ins.engine] = (finish[i], i)
        busy.setdefault(ins.engine, []).append((ready, finish[i]))
    time_s = max(finish, default=0.0)
    active = {e: (_union(iv) / time_s if time_s > 0 else 0.0) for e, iv in busy.items()}
    path: list[int] = []
    if n:
        i = max(range(n), key=lambda k: finish[k])
        while i >= 0:
            path.append(i)
            i = waits_for[i]
        path.reverse()
    per_line: dict[str, float] = {}
    per_engine: dict[str, float] = {}
    for i in path:
        t = finish[i] - start[i]
        per_line[trace[i].where] = per_line.get(trace[i].where, 0.0) + t
        per_engine[trace[i].engine] = per_engine.get(trace[i].engine, 0.0) + t
    bound_by = max(per_engine, key=per_engine.get) if per_engine else "nothing"
    by_line = sorted(per_line.items(), key=lambda kv: -kv[1])
    return Schedule(time_s, active, bound_by, path, by_line, start, finish, [ins.engine for ins in trace], specs)


def _union(intervals: list[tuple[float, float]]) -> float:
    """The length of the union of ``intervals``."""
    total, end = 0.0, float("-inf")
    for a, b in sorted(intervals):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total
