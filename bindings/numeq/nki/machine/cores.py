"""A grid's programs (SPMD programs, or the logical cores of ``kernel[2]``) run one at a time,
each switching out only where it must wait for another: a rendezvous (``core_barrier``, a
``sendrecv`` pipe group). Program 0 runs until it waits or ends, then the lowest program that can
go on, and so on: one deterministic interleaving, the same on every run, in which each program sees
the others' writes exactly where a rendezvous orders them. Where every program left waits on a
rendezvous that cannot complete, the run stops with a ``core_deadlock`` finding naming each
program's line.

A run first takes the programs one after another in its own thread, which gives the same order
while no program waits; the first program to reach a rendezvous its partners have not reached
stops that attempt (``NeedsTurns``), and the run starts again with each program in its own thread
(a kernel is a plain function: only a thread can be paused inside it). The threads take turns,
never two at once, so the run's state is touched by one program at a time. What belongs to a program (its grid index, its loops, the line and engine of its running
instruction) is swapped with the turn. AWS's simulator runs LNC=2 as two free-running threads
(nki_simulator.rst: "one interleaving", no race detection); numeq's order is fixed, and the races a
free order would show are findings (``shared_hbm_race``) from each write's and read's barrier epoch.
"""

from __future__ import annotations

import threading
from typing import Any, Callable

import numpy as np

from .context import KernelFault

__all__ = ["Cores", "NeedsTurns", "Rendezvous"]


class _Abandoned(BaseException):
    """A waiting program's thread told to end: the run stopped elsewhere."""


class NeedsTurns(BaseException):
    """A program run in sequence reached a rendezvous its partners have not: the run starts again
    with the programs in turns (a BaseException, so that a kernel's ``except Exception`` lets it
    through)."""


class Rendezvous:
    """One meeting point: who must arrive (``parties``), who has (program -> what it brought), and
    where each was (program -> its line)."""

    __slots__ = ("kind", "parties", "arrived", "lines")

    def __init__(self, kind: str, parties: frozenset) -> None:
        self.kind, self.parties = kind, parties
        self.arrived: dict[tuple, Any] = {}
        self.lines: dict[tuple, str] = {}

    @property
    def complete(self) -> bool:
        return self.parties <= set(self.arrived)


class _Program:
    __slots__ = ("index", "thread", "loop_indices", "loops", "unrolled", "at", "engine", "waiting", "done",
                 "result", "error", "epoch", "meetings", "dynamic")

    def __init__(self, index: tuple) -> None:
        self.index = index
        self.thread: threading.Thread | None = None
        self.loop_indices: list = []
        self.loops: list = []
        self.unrolled: set = set()
        self.at: str | None = None
        self.engine: str | None = None
        self.waiting: Rendezvous | None = None
        self.done = False
        self.result: Any = None
        self.error: BaseException | None = None
        self.epoch = 0  # the core_barriers this program has passed
        self.meetings: dict[tuple, int] = {}  # (kind, key) -> how many such rendezvous it has reached
        self.dynamic: list[tuple[str, int]] = []  # its dynamic loops' (line, iterations), in order


class Cores:
    """The programs of one run (``ctx.grid``) and their turns. ``run(body)`` calls ``body()`` once
    per program, each in its turn with ``ctx.program`` set, and returns program 0's result (the
    kernel's outputs: every program returns the same shared tensors)."""

    def __init__(self, ctx: Any, turns: bool = True) -> None:
        self.ctx = ctx
        # False: the programs one after another in this thread (a program's rendezvous that cannot
        # complete raises NeedsTurns); True: one thread each, in turns.
        self.turns = turns
        grid = list(np.ndindex(*ctx.grid)) if ctx.grid else [()]
        # With collective ranks, every rank runs every program of the grid: (rank, *grid index).
        ids = [(r, *p) for r in range(ctx.ranks) for p in grid] if ctx.ranks else grid
        self.programs = [_Program(p) for p in ids]
        self.by_index = {p.index: p for p in self.programs}
        self._turn: _Program | None = None
        self._cond = threading.Condition()
        self._abandon = False
        self.meetings: dict[tuple, Rendezvous] = {}
        ctx.cores = self

    # --- the turns -------------------------------------------------------------------------------
    def run(self, body: Callable[[], Any]) -> Any:
        if len(self.programs) == 1 or not self.turns:  # in sequence, in this thread
            for p in self.programs:
                self._enter(p)
                p.result = body()
                p.done = True
            return next((q.result for q in self.programs if q.result is not None), None)
        try:
            while True:
                p = next((q for q in self.programs if not q.done and (q.thread is None or q.waiting is None
                                                                     or q.waiting.complete)), None)
                if p is None:
                    if all(q.done for q in self.programs):
                        break
                    raise self._deadlock()
                if p.thread is None:
                    p.thread = threading.Thread(target=self._program, args=(p, body), daemon=True,
                                                name=f"numeq.nki program {p.index}")
                    self._give(p, start=True)
                else:
                    self._give(p)
                if p.error is not None:
                    raise p.error
        finally:
            self._end_waiting()
        return next((q.result for q in self.programs if q.result is not None), None)

    def result_of_rank(self, rank: int) -> Any:
        """What the programs of collective rank ``rank`` returned (the first that returned any)."""
        return next((q.result for q in self.programs if q.index[0] == rank and q.result is not None), None)

    def _program(self, p: _Program, body: Callable[[], Any]) -> None:
        np.seterr(all="ignore")  # numpy's error state is per thread (the run's: machine.context.running)
        with self._cond:
            while self._turn is not p:
                self._cond.wait()
        self._enter(p)
        try:
            p.result = body()
        except _Abandoned:
            pass
        except BaseException as e:  # noqa: BLE001 - handed to the run's thread, raised there
            p.error = e
        finally:
            p.done = True
            self._leave(p)

    def _give(self, p: _Program, start: bool = False) -> None:
        """Hand the turn to ``p`` and wait until it hands it back (it waits, or it ended)."""
        with self._cond:
            self._turn = p
            if start:
                p.thread.start()
            self._cond.notify_all()
            while self._turn is not None:
                self._cond.wait()

    def _enter(self, p: _Program) -> None:
        ctx = self.ctx
        if ctx.ranks:
            ctx.rank, ctx.program = p.index[0], p.index[1:]
        else:
            ctx.program = p.index
        ctx.loop_indices, ctx.loops, ctx.unrolled = p.loop_indices, p.loops, p.unrolled
        ctx.at, ctx.engine = p.at, p.engine

    def _leave(self, p: _Program) -> None:
        p.at, p.engine = self.ctx.at, self.ctx.engine
        with self._cond:
            self._turn = None
            self._cond.notify_all()

    def _end_waiting(self) -> None:
        """The run is over (finished, stopped, deadlocked): every thread still waiting ends."""
        self._abandon = True
        for p in self.programs:
            if p.thread is not None and not p.done:
                self._give(p)

    # --- control flow that differs between cores -------------------------------------------------
    def dynamic_loop(self, line: str, iterations: int) -> None:
        """The running program finished a dynamic loop (a register-bounded nl.dynamic_range,
        fori_loop or while_loop) at ``line`` after ``iterations``."""
        self.current.dynamic.append((line, iterations))

    def check_divergence(self) -> None:
        """"If you use dynamic control flow, and this control-flow is different on the different
        cores, then the behavior is undefined" (nki/get-started/about/lnc.rst): the cores of a
        launch whose dynamic loops ran differently are a ``core_divergence`` finding at the first
        loop where they differ."""
        by_launch: dict[Any, list[_Program]] = {}
        for p in self.programs:
            by_launch.setdefault(p.index[0] if self.ctx.ranks else None, []).append(p)
        for programs in by_launch.values():
            first = programs[0]
            for other in programs[1:]:
                if other.dynamic == first.dynamic:
                    continue
                k = next((i for i, (a, b) in enumerate(zip(first.dynamic, other.dynamic)) if a != b),
                         min(len(first.dynamic), len(other.dynamic)))
                def loop(p: _Program) -> str:
                    return (f"program {p.index}: {p.dynamic[k][1]} iterations at {p.dynamic[k][0]}"
                            if k < len(p.dynamic) else f"program {p.index}: no such loop")
                line = (first.dynamic[k] if k < len(first.dynamic) else other.dynamic[k])[0]
                self.ctx.find("core_divergence", "warning", f"the cores' dynamic control flow differs ({loop(first)}; "
                              f"{loop(other)})", "documented: nki/get-started/about/lnc.rst (\"if ... this "
                              "control-flow is different on the different cores, then the behavior is undefined\")",
                              at=line)

    # --- rendezvous ------------------------------------------------------------------------------
    @property
    def current(self) -> _Program:
        return self.by_index[self.ctx.core_id]

    def id_of(self, program: tuple, rank: int | None = None) -> tuple:
        """The identity of grid program ``program`` of ``rank`` (default: the running one's)."""
        if not self.ctx.ranks:
            return tuple(program)
        return (self.ctx.rank if rank is None else rank, *program)

    def meet(self, kind: str, key: Any, parties: frozenset, brought: Any, line: str) -> Rendezvous:
        """The current program arrives at the ``key``-th rendezvous of ``kind`` with ``parties``
        (program indices) bringing ``brought``; returns it once every party has arrived (the last
        to arrive goes on at once; the others wait for their turn)."""
        me = self.current
        count = me.meetings.get((kind, key), 0)
        me.meetings[(kind, key)] = count + 1
        r = self.meetings.setdefault((kind, key, count), Rendezvous(kind, parties))
        r.arrived[me.index], r.lines[me.index] = brought, line
        if r.complete or len(self.programs) == 1:
            return r
        if not self.turns:
            raise NeedsTurns()
        me.waiting = r
        self._leave(me)
        with self._cond:
            while self._turn is not me:
                self._cond.wait()
        self._enter(me)
        me.waiting = None
        if self._abandon:
            raise _Abandoned()
        return r

    def _deadlock(self) -> KernelFault:
        """Every program left waits on a rendezvous that cannot complete: a finding naming where
        each program is."""
        def where_is(q: _Program) -> str:
            if q.done:
                last = next((ins.where for ins in reversed(self.ctx.trace) if ins.program == q.index), None)
                return f"program {q.index} ended " + (f"(its last instruction at {last})" if last else
                                                      "(it ran no instruction)")
            return f"program {q.index} waits at {q.waiting.kind} at {q.waiting.lines[q.index]}"

        waiting = [q for q in self.programs if not q.done]
        first = waiting[0]
        missing = sorted(first.waiting.parties - set(first.waiting.arrived))
        others = "; ".join(where_is(q) for q in self.programs if q is not first)
        return KernelFault(self.ctx.find(
            "core_deadlock", "error", f"program {first.index} waits at {first.waiting.kind} for program"
            f"{'s' if len(missing) > 1 else ''} {', '.join(str(i) for i in missing)}, which never arrive"
            f"{'' if len(missing) > 1 else 's'}: {others}", "documented: nki.isa.core_barrier (\"a synchronization point where all specified "
            "NeuronCores must reach before any can proceed\") and nki.isa.sendrecv (\"all operations in the group "
            "must complete before any can proceed\")", at=first.waiting.lines[first.index]))
