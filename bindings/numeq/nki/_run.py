"""Running a kernel: ``run`` (outputs, findings, trace, the op-level platform), ``simulate`` (AWS's
spelling: outputs only) and ``jit`` (the ``@nki.jit`` decorator: a kernel callable directly inside
a run, with numpy arrays under ``installed()``, and over an SPMD grid as ``kernel[g0, g1]``).

The target's assumptions (``machine.assumptions``) are every undocumented behaviour the
instructions rest on; each is named, has alternatives, and is switchable per run with
``assume={name: value}``.
"""

from __future__ import annotations

import functools
import inspect
import json
import math
import os
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

import importlib

_platforms = importlib.import_module("numeq.machines")
from .machine.assumptions import ASSUMPTIONS, assumptions_of, chosen as _chosen, \
    platform_assumptions as _platform_assumptions
from .machine.targets import DEFAULT_TARGET, target as _target, target_from_environment
from .machine import rules as _rules
from .machine import arithmetic as _numerics
from .machine.cores import Cores, NeedsTurns
from .machine.context import Context, Finding, Instruction, KernelFault, running, active
from ._summary import TraceSummary
from .front.namespace import language_of
from .machine.dtypes import dtype_of
from .machine.memory import MEMORIES, Allocation, Tensor
from ._launch import MAX_PROGRAMS, check_grid, check_ranks, rank_arguments, replaced

__all__ = ["Run", "jit", "run", "simulate", "simulate_kernel", "ASSUMPTIONS", "assumptions_of", "MAX_PROGRAMS"]

def check_kernel(fn: Any, name: str = "") -> None:
    """A kernel is a plain function that returns its outputs: a generator function (a ``def`` with
    ``yield``) or a coroutine function runs nothing when called, so it is refused (TypeError naming
    ``kernel``), as is a kernel that is not callable."""
    label = name or getattr(fn, "__name__", repr(fn))
    if not callable(fn):
        raise TypeError(f"kernel: {label} is a {type(fn).__name__}, not a function; valid: an @nki.jit kernel or "
                        "a function")
    kind = ("a generator function (its body holds yield)" if inspect.isgeneratorfunction(fn)
            else "an async generator function" if inspect.isasyncgenfunction(fn)
            else "a coroutine function (async def)" if inspect.iscoroutinefunction(fn) else "")
    if kind:
        raise TypeError(f"kernel: {label} is {kind}: calling it runs none of its body; an NKI kernel is a plain "
                        "function (def, no yield, no async) that returns its outputs")

@dataclass
class Run:
    """What running a kernel gave: ``outputs`` (numpy / ml_dtypes arrays: the kernel's return value,
    or the HBM outputs it wrote), ``findings`` (the limits it broke), ``trace`` (every instruction),
    ``platform`` (the op-level platform of the target on the kernel's tiling, for ``numeq.compare``
    and ``numeq.testing``: what the hardware owes the kernel, never the kernel's own narrower
    precision choices), ``kernel_platform`` (the same with those choices, such as a bf16
    accumulator of PSUM groups: what the kernel's dataflow amounts to, bit for bit; each choice
    is also a finding), ``target`` and ``assumptions`` (name -> value, every one shown)."""

    outputs: Any
    findings: list[Finding]
    trace: list[Instruction]
    platform: str
    target: str
    assumptions: dict[str, str]
    completed: bool = True
    sites: dict = field(default_factory=dict, repr=False)  # where precision was lost (machine.precision.Site)
    rerun: Any = field(default=None, repr=False, compare=False)  # rerun(widen=, assume=) -> Run
    lives: list = field(default_factory=list, repr=False)  # every allocation's Life (memory use over time)
    kernel_platform: str = ""  # the platform with the kernel's own narrower precision choices (group_accumulator)
    released: bool = field(default=False, repr=False, compare=False)  # release() dropped the bulky parts
    # A rerun with watch=True: "cancellation" (kernel line -> the largest factor an add / subtract
    # there came out smaller than its operands) and "overflow" (kernel line -> Inf values written
    # there, in order): what the run's kernel_cancellation / kernel_overflow diagnoses read.
    watched: dict = field(default_factory=dict, repr=False, compare=False)
    radii: Any = field(default=None, repr=False, compare=False)  # a rerun with bound=True: its outputs' radii
    # The assumptions the run read (the others cannot have changed its outputs).
    assumptions_read: frozenset = field(default=frozenset(), repr=False, compare=False)
    values: bool = True  # False: numeq.nki.run(values=False) traced and checked, computed nothing
    # The NKI language the kernel's file imports: "current" (nki.*), "older" (neuronxcc.nki.*) or
    # None (front.namespace.language_of); the rules and hazards only one compiler applies read it.
    language: str | None = None
    # Collective ranks (numeq.nki.run(ranks=R)): R launches of the kernel meeting at nki.collectives;
    # ``outputs`` then holds each rank's, in rank order. 0: one launch.
    ranks: int = 0
    _graph: Any = field(default=None, repr=False, compare=False)  # graph(), made once

    def _needs_values(self, what: str) -> None:
        if not self.values:
            raise ValueError(f"{what}: this run computed no values (numeq.nki.run(values=False)); run the kernel "
                             "with values=True")

    def release(self) -> None:
        """Drop what is bulky (the outputs, the trace, the precision sites, the allocations' lives and
        the rerun, which holds the inputs), keeping the findings, target, platform, assumptions and
        whether it completed. ``installed()`` releases a block's earlier runs as each kernel call
        starts, so that a session-long block (``pytest --numeq-nki``) holds one whole run at a time."""
        self.outputs, self.trace, self.sites, self.lives, self.rerun, self._graph = None, [], {}, [], None, None
        self.__dict__.pop("precision", None)
        self.__dict__.pop("_exact", None)
        self.__dict__.pop("_exact_watched", None)
        self.__dict__.pop("_bound", None)
        self.released = True

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "error"]

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "warning"]

    def engines(self) -> dict[str, dict]:
        """Per engine: instructions, FLOPs, bytes and estimated cycles."""
        out: dict[str, dict] = {}
        for ins in self.trace:
            e = out.setdefault(ins.engine, {"instructions": 0, "flops": 0, "bytes": 0, "cycles": 0})
            e["instructions"] += 1
            e["flops"] += ins.flops
            e["bytes"] += ins.bytes
            e["cycles"] += ins.cycles
        return out

    def precision_flow(self, assumptions: bool | list = True, reference: Any = None) -> list:
        """Every place the run loses precision (``machine.precision``), largest measured share of the
        output's error first: narrowings, accumulations, activations, then (``assumptions``: True
        for all, or a list of names) each assumption's alternatives with the output elements they
        change. ``reference``: the exact result (its shares are then of the output's distance from
        it, the fp32 arithmetic's included). Runs the kernel again once per narrow tile and once
        per alternative."""
        from .machine.precision import flow

        self._needs_values("precision_flow")
        if self.released:
            raise ValueError("precision: this run was released (installed() keeps the latest kernel call's run "
                             "whole); run the kernel with numeq.nki.run for a run of your own")
        if self.rerun is None or not self.completed:
            raise ValueError("precision: the run did not complete (or was not made by numeq.nki.run)")
        table = assumptions_of(self.target)
        names = list(table) if assumptions is True else list(assumptions or [])
        unknown = [n for n in names if n not in table]
        if unknown:
            raise ValueError(f"assumptions: unknown {unknown}; valid: {', '.join(table)}")
        # An assumption the run never read cannot change its outputs: no rerun for it.
        others = {n: [v for v in table[n]["alternatives"] if v != self.assumptions[n]] for n in names}
        alternatives = {n: v for n, v in others.items() if n in self.assumptions_read}
        unread = {n: v for n, v in others.items() if n not in self.assumptions_read}
        return flow(self, self.rerun, alternatives, reference, unread)

    def _experiment(self, what: str, **how: Any) -> "Run":
        """The kernel run again ``how`` (rerun's keywords), for ``what`` (the method asking)."""
        if self.released:
            raise ValueError(f"{what}: this run was released (installed() keeps the latest kernel call's run "
                             "whole); run the kernel with numeq.nki.run for a run of your own")
        if self.rerun is None or not self.completed:
            raise ValueError(f"{what}: the run did not complete (or was not made by numeq.nki.run)")
        self._needs_values(what)
        return self.rerun(**how)

    def exact(self) -> Any:
        """The kernel's own math on its inputs: the same kernel run again with none of the hardware's
        roundings (machine.arithmetic: tiles hold binary64 values, casts keep them, sums and dot
        products are exact sums rounded once to binary64, functions within an ulp or two of binary64
        (numpy's exp, log, tanh ...; MPFR for the rest), ALU operations binary64 operations, the
        kernel's constants as it wrote them). Its
        outputs, as float64 arrays in the structure of ``outputs``: each within a few units of
        binary64's roundoff (2^-53) of the exact dataflow per operation on its path, where fp32's is
        2^-24. Against a reference, the difference says what the kernel computes (a mask, a formula,
        a scale, a missing tile) apart from how precisely; ``outputs - exact()`` is the precision the
        run lost. Computed once, on first use."""
        if "_exact" not in self.__dict__:
            r = self._experiment("exact", exact=True, watch=True)
            if not r.completed:
                raise ValueError("exact: the kernel did not complete without the hardware's roundings: "
                                 + "; ".join(str(f) for f in r.errors[:3]))
            self.__dict__["_exact"], self.__dict__["_exact_watched"] = r.outputs, r.watched
        return self.__dict__["_exact"]

    def exact_watched(self) -> dict:
        """What ``exact()``'s run watched: "overflow" (kernel line -> Inf values its exact dataflow
        stored there: a mask's -Inf, not an overflow) and "cancellation" (empty: it rounds nothing)."""
        self.exact()
        return self.__dict__["_exact_watched"]

    def bound(self) -> Any:
        """Per element, a bound on |outputs - the kernel's exact dataflow| (``exact()`` is that dataflow
        within binary64's roundoff), as float64 arrays in the structure of ``outputs``: the kernel run
        again with every element's radius walked instruction by instruction (instructions.bounds:
        each instruction's propagated distance plus its own measured rounding). Rigorous, and tight:
        it overstates only where rounding errors of opposite signs cancel. The instructions it
        walks are ``instructions.bounds.RULES`` (docs/nki.md lists them); any other raises
        ``numeq.nki.Unsupported`` naming it and its line. Computed once, on first use."""
        if "_bound" not in self.__dict__:
            self.__dict__["_bound"] = self._experiment("bound", bound=True).radii
        return self.__dict__["_bound"]

    @functools.cached_property
    def precision(self) -> list:
        """``precision_flow()``: the rows (``where``, ``kind``, ``format``, ``length``, ``share``,
        ``detail``), largest share first, assumptions last (computed once, on first use)."""
        return self.precision_flow()

    def graph(self) -> Any:
        """The run's dependency graph (``numeq.nki.schedule.Graph``): which instruction waits for
        which, read after write, write after read and write after write on the bytes each touches.

        Example::

            >>> g = run.graph()
            >>> [(e.before, e.after, e.kind) for e in g.edges][:2]
            [(0, 2, 'raw'), (1, 2, 'raw')]
        """
        from .schedule import graph

        if self.released:
            raise ValueError("this run was released: its trace is gone; run the kernel with numeq.nki.run")
        if self._graph is None:
            self._graph = graph(self.trace, self.lives)
        return self._graph

    def schedule(self, assume: dict | None = None) -> Any:
        """The run's predicted timeline (``numeq.nki.schedule.Schedule``): the dependency graph
        list-scheduled over the target's engines and DMA engines: ``time_s``, ``active`` (engine ->
        busy fraction), ``bound_by``, ``critical_path`` and ``by_line`` (file:line -> seconds on
        the critical path, largest first). ``assume``: the model's parameters changed by name
        (``numeq.nki.schedule.PARAMETERS``; each is a row of the target table with its evidence).
        Where the run's live tiles overflow SBUF, the compiler's spills (``spills``, assumption
        ``sbuf_overflow``) are transfers of the timeline."""
        from .schedule import schedule, spills

        g = self.graph()
        tgt = _target(self.target)
        spilled = []
        overflow = self.assumptions["sbuf_overflow"]
        # Only a run whose live tiles overflowed SBUF (its sbuf_spill finding) has spills to place.
        if overflow != "error" and any(f.rule == "sbuf_spill" for f in self.findings):
            spilled = spills(g.instructions, self.lives, int(tgt["sbuf_partition_bytes"]),
                             self.assumptions["tile_liveness"] == "first_access", overflow == "reload_inputs")
        return schedule(g, tgt, assume, spilled)

    def hazards(self) -> list[Finding]:
        """What the kernel leaves to the hardware's ordering and the documents forbid, found on its
        dependency graph (``numeq.nki.schedule.hazards``), each a finding naming both lines: a
        value that flows between iterations of an ``affine_range`` loop (declared independent;
        associative reductions excepted), confirmed by running those iterations last to first
        (error when that changes an output, warning when it does not)."""
        from .schedule.hazards import hazards

        if self.released or self.rerun is None:
            raise ValueError("this run was released: its trace is gone; run the kernel with numeq.nki.run")
        return hazards(self, self.graph())

    def summary(self) -> "TraceSummary":
        """The trace summed up (``_summary``): per engine instructions, FLOPs, bytes, cycles and an
        estimated busy time; per DMA queue the transfer sizes; arithmetic intensity, the roofline
        regime, the bounding engine and the estimate's lower bound on run time. ``str()`` renders
        it with the findings."""
        from ._summary import summarise

        return summarise(self.trace, _target(self.target), self.platform, self.findings, self.lives,
                         self.assumptions["psum_allocation"] == "bank",
                         self.assumptions["tile_liveness"] == "first_access")


class _RunContext(Context):
    """A Context that knows the Trainium platform the target runs."""

    def __init__(self, target_name: str, assume: dict | None, grid: tuple = ()) -> None:
        table = _chosen(target_name, assume)
        super().__init__(_target(target_name), {k: v["value"] for k, v in table.items()}, grid)
        self.table = table
        self.platform_names = {a["name"] for a in _platform_assumptions(self.target.platform)}
        self._tile_platforms: dict = {}

    def _platform(self, extra: dict[str, Any]) -> str:
        chosen = [f"{k}={self.table[k]['value']}" for k in self.table
                  if k in self.platform_names and self.table[k]["value"] != self.table[k]["alternatives"][0]]
        chosen += [f"{k}={v}" for k, v in extra.items()]
        return self.target.platform + (f"[{','.join(chosen)}]" if chosen else "")

    def tile_platform(self, k: int, double_row: bool, fmt: str) -> str:
        """The platform of one nc_matmul of ``fmt`` operands: the kernel's assumptions, its K as the
        one tile."""
        key = (k, double_row)
        if key not in self._tile_platforms:
            # The instruction's K as the plan's tile (the platform's default tile needs no option).
            extra: dict[str, Any] = {} if k == (256 if double_row else 128) else {"k_tile": k}
            if double_row and self.assumptions["fp8_double_row"] != "on":
                extra = {"fp8_double_row": "on", **extra}
            self._tile_platforms[key] = self._platform(extra)
        self.assumptions.read.update(_plan_assumptions(self.target.platform, "matmul", fmt))
        return self._tile_platforms[key]

    def mx_platform(self, k: int) -> str:
        """The platform of one nc_matmul_mx contracting ``k`` values of K (4 per partition): the
        kernel's assumptions, the MX plan (``mx=on``), its K as the one tile."""
        key = ("mx", k)
        if key not in self._tile_platforms:
            self._tile_platforms[key] = self._platform({"mx": "on", **({} if k == 512 else {"k_tile": k})})
        self.assumptions.read.update(_plan_assumptions(self.target.platform, "matmul", "fp32", "mx=on"))
        return self._tile_platforms[key]

    def sum_platform(self) -> str:
        self.assumptions.read.update(_plan_assumptions(self.target.platform, "sum", "fp32"))
        return self._platform({})


_PLAN_ASSUMPTIONS: dict[tuple[str, str, str, str], frozenset] = {}


def _plan_assumptions(platform: str, op: str, fmt: str, options: str = "") -> frozenset:
    """The platform assumptions an ``op`` plan of ``platform`` for ``fmt`` inputs reads: those with
    an alternative that changes one of those plans (a run that uses the plan has read them; the
    precision flow sweeps only what a run read). A format with no plan of its own (e4m3fn values
    through trn2's e4m3 plan) reads what any ``op`` plan reads. ``options``: kernel options the
    plans are built with ("mx=on": the MX matmul's). Worked out once per platform, op, format and
    options."""
    key = (platform, op, fmt, options)
    if key not in _PLAN_ASSUMPTIONS:
        def plans(choice: str) -> list:
            chosen = ",".join(c for c in (options, choice) if c)
            name = f"{platform}[{chosen}]" if chosen else platform
            entries = [e for e in json.loads(_platforms.platform_json(name))["plans"] if e["op"] == op]
            own = [e for e in entries if e["in_fmt"] == fmt]
            return [(e["in_fmt"], e["out"], e["plan"] | {"name": ""}) for e in (own or entries)]

        base = plans("")
        _PLAN_ASSUMPTIONS[key] = frozenset(
            a["name"] for a in _platform_assumptions(platform)
            if any(plans(f"{a['name']}={v}") != base for v in a["alternatives"] if v != a["value"]))
    return _PLAN_ASSUMPTIONS[key]



def _kernel_arguments(ctx: Context, fn: Callable, args: tuple, kwargs: dict) -> tuple[tuple, dict, list]:
    """numpy arrays become HBM tensors (written: they are the kernel's inputs); other values pass.
    Returns the arguments and (array, tensor) pairs, so that inputs the kernel writes are updated
    in place, as AWS's simulator does."""
    tensors: list = []

    def wrap(x: Any, name: str) -> Any:
        if isinstance(x, np.generic):  # a numpy scalar is a value, as a Python number is
            return x
        if isinstance(x, np.ndarray) or (not isinstance(x, type) and hasattr(x, "__array__") and hasattr(x, "dtype")
                                         and hasattr(x, "shape")):  # a dtype class (np.float16) passes as itself
            arr = np.asarray(x)
            if isinstance(x, np.ma.MaskedArray):
                raise TypeError(f"{name}: masked arrays are not kernel inputs; pass a plain array")
            d = dtype_of(arr.dtype, name)
            data = np.array(arr, dtype=d.storage, copy=True, order="C")
            # AWS's simulator wraps each array "with buffer=nl.hbm (or shared_hbm for LNC2)" (nki_simulator.rst,
            # Execution); AWS's trn3 MX kernels assert their inputs' buffer == nl.hbm. A grid's programs share them.
            memory = MEMORIES["shared_hbm"] if math.prod(ctx.grid) > 1 else MEMORIES["hbm"]
            t = ctx.allocate(Allocation(arr.shape, d, memory, name, "<input>", data=data)).whole()
            tensors.append((x, t))
            return t
        return x

    try:
        names = list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        names = []
    new_args = tuple(wrap(a, names[i] if i < len(names) else f"arg{i}") for i, a in enumerate(args))
    new_kwargs = {k: wrap(v, k) for k, v in kwargs.items()}
    return new_args, new_kwargs, tensors


def _outputs(ctx: Context, x: Any) -> Any:
    """The kernel's return value with its tensors copied out as arrays (a module function, not a
    recursive closure: a closure that names itself is a reference cycle, which kept the run's
    context and its tensors alive after the run until the garbage collector's next pass)."""
    return _each_tensor(x, lambda t: _output(ctx, t))


def _each_tensor(x: Any, f: Callable) -> Any:
    """``x`` (the kernel's return value) with ``f`` of each tensor in place of it, the structure
    (tuples, lists, dicts) kept. A module function, not a recursive closure (see ``_outputs``)."""
    if isinstance(x, Tensor):
        return f(x)
    if isinstance(x, (tuple, list)):
        return type(x)(_each_tensor(v, f) for v in x)
    if isinstance(x, dict):
        return {k: _each_tensor(v, f) for k, v in x.items()}
    return x


def _output(ctx: Context, x: Tensor) -> np.ndarray:
    """One returned tensor copied out as an array, its unwritten elements a finding."""
    if not x.base.complete and not np.all(x.mask == x.base.full):
        # Nothing written is an error; a part written (a scatter, a masked store: AWS's own
        # examples return such outputs, their callers reading the part written) is a warning.
        # Elements a DMA stored from undefined ones are undefined too (access.leave_undefined).
        unwritten = int(np.count_nonzero(x.mask != x.base.full))
        rule, severity = ("output_unwritten", "error") if unwritten == x.size else ("output_partly_written",
                                                                                  "warning")
        origin = x.base.undefined_from
        since = "" if origin is None else f"; some were stored from values {_rules.undefined_since(origin)}"
        ctx.find(rule, severity, f"output {x.name} holds {unwritten} of {x.size} elements no instruction wrote "
                 f"(they hold whatever the memory held){since}", "documented: tensors start undefined "
                 "(nki.language.ndarray docs)", at=x.base.line)
    return np.array(x.data, copy=True)


def _radii(ctx: Context, x: Any) -> Any:
    """The radii of the kernel's returned tensors (Run.bound()), in the structure of its outputs."""
    from .instructions.bounds import radius_view

    return _each_tensor(x, lambda t: radius_view(ctx, t).copy())


def _execute(fn: Callable, args: tuple, kwargs: dict, target: str, assume: dict | None, grid: tuple,
             widen: frozenset = frozenset(), exact: bool = False, watch: bool = False, bound: bool = False,
             reverse_affine: bool = False, values: bool = True, removed: tuple = (), ranks: int = 0,
             turns: bool = False) -> Run:
    grid = check_grid(grid)
    ctx = _RunContext(target, assume, grid)
    ctx.reverse_affine = reverse_affine
    ctx.language = language_of(fn)
    code = getattr(fn, "__code__", None)
    def_line = f"{os.path.basename(code.co_filename)}:{code.co_firstlineno}" if code is not None else None
    if removed and ctx.language == "current":  # nki.jit keywords NKI 0.3.0 made an error
        ctx.find("removed_keyword", "error", f"nki.jit({removed[0]}=...): NKI 0.3.0 raises an error on it; the target "
                 "comes from NEURON_PLATFORM_TARGET_OVERRIDE", "documented: release-notes/components/nki.rst, NKI 0.3.0 "
                 "(deprecated and removed APIs); nki migration guide, NKI 0.3.0", at=def_line)
    _rules.check_kernel_signature(ctx, fn, args, kwargs, def_line)
    ctx.values = values
    ctx.widen = widen
    ctx.exact = exact
    ctx.watch = {"cancellation": {}, "overflow": {}} if watch else None
    ctx.radii = {} if bound else None
    completed = True
    result: Any = None
    ctx.ranks = ranks
    try:
        with running(ctx), _numerics.modes(ctx.exact, ctx.watch):
            # Each collective rank gets its own copies of the inputs (its own HBM), or its own value of
            # a per_rank argument.
            per_rank_arguments = []
            for r in range(max(ranks, 1)):
                ctx.rank = r
                per_rank_arguments.append(_kernel_arguments(ctx, fn, *rank_arguments(args, kwargs, r, ranks)))
            ctx.rank = 0
            inputs = [pair for _, _, pairs in per_rank_arguments for pair in pairs]

            def program() -> Any:
                a, k, _ = per_rank_arguments[ctx.rank]
                r = fn(*a, **k)
                if inspect.isgenerator(r) or inspect.iscoroutine(r) or inspect.isasyncgen(r):
                    r.close()  # never started: closing runs nothing
                    raise TypeError(f"kernel: {getattr(fn, '__name__', fn)} returned a {type(r).__name__} without "
                                    "running its body; an NKI kernel is a plain function that returns its outputs")
                return r

            cores = Cores(ctx, turns)
            try:
                # The grid's programs in turns, each switching out only at a rendezvous (machine.cores).
                result = cores.run(program)
            except KernelFault:
                completed = False
            from .machine.psum import settle_all

            settle_all(ctx)
            _rules.capacity(ctx)
            if completed:
                cores.check_divergence()
            ctx.cores = None  # (the run's context and its programs refer to each other: not past the run)
            if ranks:  # the outputs of each rank, in rank order
                results = [cores.result_of_rank(r) for r in range(ranks)]
                outputs = [_outputs(ctx, x) for x in results] if completed and values else None
                radii = [_radii(ctx, x) for x in results] if completed and bound else None
            else:
                outputs = _outputs(ctx, result) if completed and values else None
                radii = _radii(ctx, result) if completed and bound else None
            # Inputs the kernel wrote are copied back, as AWS's simulator does (an array every rank got:
            # the first rank's); a rerun starts from their values before this run (kept here), so the
            # kernel's experiments see the same inputs.
            before: dict[int, np.ndarray] = {}
            for array, t in inputs:
                if id(array) in before:
                    continue
                if t.base.dirty and isinstance(array, np.ndarray) and array.flags.writeable and array.dtype == t.data.dtype:
                    before[id(array)] = array.copy()
                    array[...] = t.data
            if before:
                args = tuple(replaced(a, before) for a in args)
                kwargs = {k: replaced(v, before) for k, v in kwargs.items()}
    except NeedsTurns:
        # A program waited for another (machine.cores): the run again, its programs in turns.
        return _execute(fn, args, kwargs, target, assume, grid, widen, exact, watch, bound, reverse_affine, values,
                        removed, ranks, turns=True)

    def rerun(widen: frozenset = frozenset(), assume: dict | None = None, exact: bool = False,
              watch: bool = False, bound: bool = False, reverse_affine: bool = False) -> Run:
        """The same kernel on the same inputs again (``widen``: tiles, by allocation line, made
        fp32; ``assume``: assumptions changed; ``exact``: without the hardware's roundings;
        ``watch``: each line's cancellation and overflow recorded in ``Run.watched``;
        ``reverse_affine``: every affine_range loop's iterations last to first): the precision
        flow's experiments, ``Run.exact()``, the run's diagnoses and its hazard check."""
        return _execute(fn, args, kwargs, target, {**(base_assume or {}), **(assume or {})}, grid, widen, exact,
                        watch, bound, reverse_affine, values, ranks=ranks, turns=turns)

    base_assume = assume
    read = frozenset(ctx.assumptions.read)  # before _platforms_of, which names every platform assumption
    platform, kernel_platform = _platforms_of(ctx)
    return Run(outputs, ctx.findings, ctx.trace, platform, target, {k: v["value"] for k, v in ctx.table.items()},
               completed, ctx.sites, rerun, ctx.lives, kernel_platform=kernel_platform, watched=ctx.watch or {},
               values=values, language=ctx.language,
               radii=radii, assumptions_read=read, ranks=ranks)


def _platforms_of(ctx: _RunContext) -> tuple[str, str]:
    """(``Run.platform``, ``Run.kernel_platform``): the op-level platform of the target on the
    kernel's tiling (its K tile, its PSUM groups), and the same with the precision the kernel chose
    below the hardware's (a bf16 / fp16 SBUF accumulator of PSUM groups: ``group_accumulator``),
    which is reported as a ``narrow_accumulator`` finding at the line that adds into it, never taken
    as the standard a test judges the kernel by."""
    extra = _kernel_tiling(ctx)
    platform = ctx._platform(extra)
    if ctx.bf16_psum_chain is not None:
        # NeuronCore-v4's bf16 PSUM (trainium3_arch.rst, "BF16 Matmul Results in PSUM"): each K tile's
        # fp32 result added to the upcast PSUM value and rounded back, the op-level platform's
        # accumulator of one-tile groups.
        kernel_platform = platform if ctx.psum_groups else \
            ctx._platform({**extra, "psum_group": 1, "group_accumulator": "bf16"})
        ctx.find("narrow_accumulator", "warning", "the kernel accumulates its matmuls in a bf16 PSUM tile: a running "
                 "sum rounded to bf16 after every K tile, where an fp32 PSUM tile keeps fp32; judged against "
                 f"{platform} (Run.platform); {kernel_platform} (Run.kernel_platform) reproduces this kernel's choice",
                 "documented: aws-neuron-sdk nki/guides/architecture/trainium3_arch.rst (BF16 Matmul Results in PSUM)",
                 at=ctx.bf16_psum_chain)
        if not ctx.psum_groups:
            return platform, kernel_platform
    formats = {fmt for _, fmt, _ in ctx.psum_groups}
    narrow = formats & {"bf16", "fp16"}
    if not narrow:
        return platform, platform
    # One platform holds one accumulator format: mixed ones keep fp32 (each narrow one is a finding).
    kernel_platform = ctx._platform({**extra, "group_accumulator": min(narrow)}) if len(formats) == 1 else platform
    for fmt_seen in sorted(narrow):
        line = next(at for _, f, at in ctx.psum_groups if f == fmt_seen)
        ctx.find("narrow_accumulator", "warning", f"the kernel adds its PSUM groups into a {fmt_seen} SBUF tile: a "
                 f"running sum rounded to {fmt_seen} after every group, where the Tensor Engine accumulates in fp32; "
                 f"judged against {platform} (Run.platform); {kernel_platform} (Run.kernel_platform) reproduces "
                 "this kernel's choice", "documented: nki.isa.nc_matmul (PSUM accumulates in fp32); the "
                 "accumulator's dtype is the kernel's tile", at=line)
    return platform, kernel_platform


def _kernel_tiling(ctx: _RunContext) -> dict[str, Any]:
    """The platform options the kernel's tiling amounts to: the K tile its nc_matmuls contract
    (``k_tile``) when every instruction but an output tile's last contracts the same K, and the
    PSUM groups' length (``psum_group``) when it adds them into an SBUF accumulator."""
    # The PE-array matmuls: the instructions whose trace record says where in PSUM they accumulate.
    matmuls = [ins for ins in ctx.trace if "psum" in ins.detail]
    ks = [ins.detail["k"] for ins in matmuls]
    extra: dict[str, Any] = {}
    double = any(ins.detail.get("double_row") for ins in matmuls)
    mx = any(ins.detail.get("mx") for ins in matmuls)  # MX matmuls (a kernel mixing them with nc_matmul
    if mx:                                              # is judged on the MX plan)
        extra["mx"] = "on"
    elif double and ctx.assumptions["fp8_double_row"] != "on":
        extra["fp8_double_row"] = "on"
    if ks:
        full = max(ks)
        default = 512 if mx else 256 if double else 128
        if full != default:
            extra["k_tile"] = full
    if ctx.psum_groups:
        # The kernel adds PSUM groups into an SBUF accumulator: the groups' length (all but an
        # output tile's last are full).
        extra["psum_group"] = max(length for length, _, _ in ctx.psum_groups)
    return extra


def _defaults(target: str | None, assume: dict | None) -> tuple[str, dict | None]:
    """The target and assumptions of a run: as given, else those of the enclosing ``installed()``
    block (or the pytest option) when it names one, else the one AWS's environment variables name
    (NEURON_PLATFORM_TARGET_OVERRIDE, NKI_NC_VERSION: ``targets.target_from_environment``, read at
    each run, as nki-library's harness sets NKI_NC_VERSION per test), else trn2; every assumption
    at its default unless given."""
    from . import _install

    settings = _install.settings()
    if target is None:
        target = (settings or {}).get("target") or target_from_environment() or DEFAULT_TARGET
    if assume is None and settings:
        assume = settings["assume"]
    return target, assume


def run(kernel: Any, *arrays: Any, target: str | None = None, assume: dict | None = None, grid: Any = None,
        values: bool = True, ranks: int | None = None, **kernel_kwargs: Any) -> Run:
    """Run ``kernel`` on numpy arrays: every instruction computed by numeq's NeuronCore model, the
    target's limits checked, the trace recorded. Returns a ``Run``. ``target``: trn1, inf2 or trn2
    (default: the enclosing ``installed()``'s, else trn2); ``assume``: {assumption: value}.
    ``values=False``: trace, check and schedule without computing any value (``Run.outputs`` is
    None; ``Run.graph()``, ``Run.schedule()`` and the findings are the run's), for production
    shapes; a kernel whose control flow reads a tile's value (register_load) is refused.
    ``ranks=R``: R collective ranks, each a launch of the kernel (with its grid) with its own HBM,
    meeting at ``nki.collectives`` (``per_rank([...])`` gives each its own argument; ``Run.outputs``
    is then a list, one per rank)."""
    fn = getattr(kernel, "func", kernel)
    check_kernel(fn)
    if not isinstance(values, bool):
        if "values" not in inspect.signature(fn).parameters:
            raise TypeError(f"values: True or False (compute the kernel's values or not), got {type(values).__name__}")
        kernel_kwargs["values"], values = values, True  # the kernel's own parameter of that name
    return _run_kernel(kernel, arrays, kernel_kwargs, target, assume, grid, values, check_ranks(ranks))


def _run_kernel(kernel: Any, arrays: tuple, kernel_kwargs: dict, target: str | None, assume: dict | None,
                grid: Any = None, values: bool = True, ranks: int = 0) -> Run:
    """``run`` with the kernel's own keywords apart (an @nki.jit call passes them all to the kernel)."""
    fn = getattr(kernel, "func", kernel)
    check_kernel(fn)
    target, assume = _defaults(target, assume)
    if grid is None:
        grid = getattr(kernel, "grid", None)
    return _execute(fn, arrays, kernel_kwargs, target, assume, check_grid(grid), values=values,
                    removed=tuple(k for k in ("platform_target",) if k in getattr(kernel, "options", {})), ranks=ranks)


def _outputs_or_fault(r: Run) -> Any:
    """The outputs of a run with no error finding; else KernelFault naming every error (AWS's
    simulator raises on the hardware rules it checks; numeq checks more)."""
    if r.errors:
        raise KernelFault(r.errors[0], r.errors)
    return r.outputs


def simulate(kernel: Any, target: str | None = None, assume: dict | None = None) -> Callable:
    """``simulate(kernel)(*arrays)``: the kernel's outputs (AWS's spelling); any error finding
    raises ``KernelFault`` (use ``run`` to get the outputs and findings of a faulty kernel)."""
    def call(*arrays: Any, **kwargs: Any) -> Any:
        return _outputs_or_fault(run(kernel, *arrays, target=target, assume=assume, **kwargs))
    return call


def simulate_kernel(kernel: Any, *arrays: Any, **kwargs: Any) -> Any:
    """AWS's older spelling: ``simulate_kernel(kernel, *arrays)``."""
    return simulate(kernel)(*arrays, **kwargs)


class Kernel:
    """An ``@nki.jit`` kernel: inside a run it is a plain call (helpers are nested kernels); with
    numpy arrays under ``installed()`` it runs the kernel on numeq; ``kernel[g0, g1]`` sets its
    SPMD grid."""

    def __init__(self, func: Callable, grid: tuple = (), options: dict | None = None) -> None:
        self.func = func
        self.grid = grid
        self.options = options or {}
        functools.update_wrapper(self, func)

    def __getitem__(self, grid: Any) -> "Kernel":
        return Kernel(self.func, check_grid(grid), self.options)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if active():
            return self.func(*args, **kwargs)
        from . import _install

        settings = _install.settings()
        if settings is None:
            raise RuntimeError(f"{self.func.__name__}: an @nki.jit kernel runs on numeq through "
                               "numeq.nki.simulate(kernel)(...), numeq.nki.run(kernel, ...) or inside "
                               "numeq.nki.installed()")
        runs = settings["runs"]
        if runs and isinstance(runs[-1], Run):
            runs[-1].release()  # the block keeps every call's findings, the latest call's run whole
        r = _run_kernel(self, args, kwargs, settings["target"], settings["assume"])
        if settings.get("hazards") and r.completed:
            r.findings.extend(r.hazards())  # installed(hazards=True), pytest --numeq-nki-hazards
        runs.append(r)
        return _outputs_or_fault(r)


def jit(func: Callable | None = None, *, mode: str | None = None, platform_target: str | None = None,
        **options: Any) -> Any:
    """``@nki.jit`` (also ``@nki.jit(mode=...)``, ``platform_target=`` of earlier releases)."""
    if platform_target is not None:
        import warnings

        warnings.warn("nki.jit(platform_target=) is a keyword of an earlier NKI release; numeq.nki takes the target "
                      "from run(target=) / installed(target=)", DeprecationWarning, stacklevel=2)
        options = dict(options, platform_target=platform_target)  # a kernel of the current interface: a finding
    if func is None:
        return lambda f: Kernel(f, (), dict(options, mode=mode))
    return Kernel(func, (), dict(options, mode=mode))
