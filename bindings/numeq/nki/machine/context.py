"""The state of one kernel run: the target and its assumptions, the findings, the trace, the live
allocations, the SPMD program id. Every instruction goes through ``Context.issue`` (which records
it and finds the kernel's line), every limit through ``Context.find``.
"""

from __future__ import annotations

import linecache
import os
import re
import sys
from dataclasses import asdict, dataclass, field
from typing import Any, Iterator

import contextlib
import gc
import itertools

import numpy as np
from .precision import record_issue

__all__ = ["Context", "Finding", "Instruction", "KernelFault", "TooLarge", "Unsupported", "current", "running", "where"]

# numeq.nki's own folder: frames there are numeq's, the first frame outside it is the kernel's.
_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Unsupported(NotImplementedError):
    """An NKI name or keyword numeq does not implement; the message names it and the kernel's line."""


class TooLarge(ValueError):
    """A tensor refused before it is made: it exceeds what the target holds (the message names the
    tensor, its shape, its bytes and the limit with its source). On-chip tiles beyond SBUF or PSUM are
    ``KernelFault`` (the rule book's capacity rules); this is an HBM tensor beyond the chip's HBM,
    or a grid beyond what numeq runs."""


class KernelFault(RuntimeError):
    """The kernel did something the hardware rejects: ``finding`` holds the (first) finding,
    ``findings`` every error finding. Raised inside a run where numeq cannot compute past it (an
    index out of bounds, shapes that do not match), and by ``simulate`` and kernel calls under
    ``installed()`` for any error finding, as AWS's simulator raises on what it checks."""

    def __init__(self, finding: "Finding", findings: "list[Finding] | None" = None) -> None:
        self.finding = finding
        self.findings = findings or [finding]
        super().__init__("\n".join(f"{f.where}: [{f.rule}] {f.message}" for f in self.findings))


@dataclass
class Finding:
    """One limit a kernel breaks: ``rule``, ``severity`` ("error": the hardware or compiler rejects
    it or it computes garbage; "warning": it runs, slowly), ``where`` ("file.py:LINE" of the
    kernel), ``message`` (with the numbers involved), ``source`` (the rule's evidence: documented,
    derived or assumed, and where from) and ``count`` (how many times it fired at that line)."""

    rule: str
    severity: str
    where: str
    message: str
    source: str
    count: int = 1

    def to_dict(self) -> dict:
        return asdict(self)

    def __str__(self) -> str:
        times = f" (x{self.count})" if self.count > 1 else ""
        return f"{self.where}: {self.severity}: [{self.rule}] {self.message}{times}"


@dataclass(slots=True)
class Instruction:
    """One traced instruction: ``index``, ``engine`` (tensor, vector, scalar, gpsimd, dma),
    ``name``, ``where``, ``dst`` / ``srcs`` (per operand: name, memory, shape, dtype), ``bytes``
    moved, ``flops``, ``cycles`` (the SDK 2.26 docstrings' estimate; 0 for DMA) and ``detail``."""

    index: int
    engine: str
    name: str
    where: str
    dst: list = field(default_factory=list)
    srcs: list = field(default_factory=list)
    bytes: int = 0
    flops: int = 0
    cycles: int = 0
    detail: dict = field(default_factory=dict)
    partitions: int = 0  # partitions of the first on-chip operand (destination first)
    iteration: tuple = ()  # the indices of the enclosing nl.*_range loops, outermost first
    # Where each operand lies (Tensor.placement: buffer id, byte offset, shape, byte strides; the
    # buffer id alone for the whole buffer), destinations then sources: what the dependency graph
    # (numeq.nki.schedule) reads.
    writes: tuple = ()
    reads: tuple = ()
    loops: tuple = ()  # the enclosing loops' (instance, kind), as ``iteration`` (language._Loop)
    program: tuple = ()  # the grid program (logical core) that ran it (machine.cores)

    @property
    def instruction(self) -> str:
        """The instruction's NKI name (``name``)."""
        return self.name

    def to_dict(self) -> dict:
        return {"instruction": self.name, **asdict(self)}


_BASENAMES: dict[str, str | None] = {}  # a code file -> its base name, or None inside numeq.nki


def _basename(filename: str) -> str | None:
    if filename not in _BASENAMES:
        _BASENAMES[filename] = None if filename.startswith(_PACKAGE_DIR) else os.path.basename(filename)
    return _BASENAMES[filename]


_ASSIGNED = re.compile(r"^\s*([A-Za-z_]\w*)\s*(?::[^=]*)?=[^=]")
_NAMES: dict[tuple[str, int], str] = {}


def assigned_name() -> str:
    """The variable the kernel's current line assigns (``acc = nl.ndarray(...)`` gives "acc"), or
    "" (findings then name the tile by its memory and number)."""
    return site()[1]


def _assigned_at(filename: str, lineno: int) -> str:
    key = (filename, lineno)
    name = _NAMES.get(key)
    if name is None:
        m = _ASSIGNED.match(linecache.getline(filename, lineno))
        name = _NAMES[key] = m.group(1) if m else ""
    return name


def site() -> tuple[str, str]:
    """(the kernel's "file.py:LINE", the variable that line assigns or ""): ``where`` and
    ``assigned_name`` in one walk of the stack (a result tile is named after its variable)."""
    text, f = _kernel_frame(sys._getframe(1))
    return text, ("" if f is None else _assigned_at(f.f_code.co_filename, f.f_lineno))  # the frame's own line


_WHERE: dict[tuple[str, int], str] = {}  # (base name, line) -> "file.py:LINE", made once per line


def _line_text(name: str, lineno: int) -> str:
    key = (name, lineno)
    text = _WHERE.get(key)
    if text is None:
        text = _WHERE[key] = f"{name}:{lineno}"
    return text


def _kernel_frame(f: Any) -> tuple[str, Any]:
    """("file.py:LINE", frame) of the first frame from ``f`` outward that is the kernel's (outside
    numeq.nki); ("<kernel>:0", None) when there is none: the one walk of the stack."""
    while f is not None:
        filename = f.f_code.co_filename
        name = _BASENAMES[filename] if filename in _BASENAMES else _basename(filename)
        if name is not None:
            return _line_text(name, f.f_lineno), f
        f = f.f_back
    return "<kernel>:0", None


def kernel_line(frame: Any) -> str | None:
    """The "file.py:LINE" of ``frame`` when it is the kernel's (outside numeq.nki), else None: an
    instruction called straight from the kernel knows its line without walking the stack. Looked up
    by file name: code objects compare equal across files (CPython leaves co_filename out of
    code equality), so two identical kernels in two files must not share an entry."""
    filename = frame.f_code.co_filename
    name = _BASENAMES[filename] if filename in _BASENAMES else _basename(filename)
    return None if name is None else _line_text(name, frame.f_lineno)


def where() -> str:
    """The kernel's "file.py:LINE" that called into numeq.nki (the first frame outside it)."""
    return _kernel_frame(sys._getframe(1))[0]


class ReadAssumptions(dict):
    """The run's assumption values (a dict), with the names read so far in ``read``."""

    def __init__(self, values: dict) -> None:
        super().__init__(values)
        self.read: set[str] = set()

    def __getitem__(self, name: str) -> str:
        self.read.add(name)
        return super().__getitem__(name)

    def get(self, name: str, default: Any = None) -> Any:
        self.read.add(name)
        return super().get(name, default)


class Context:
    """One kernel run (see the module doc)."""

    def __init__(self, target: Any, assumptions: dict, grid: tuple[int, ...] = ()) -> None:
        self.target = target
        # The limits every instruction reads, as plain numbers (the target table's values).
        self.limits = {key: int(target[key]) for key in ("partitions", "matmul_contraction", "matmul_stationary_free",
                                                         "matmul_moving_free", "psum_bank_bytes",
                                                         "matmul_result_bytes")}
        # Below this a DMA is overhead-bound (FACTS.md s3: < 256 B per partition; the target table's).
        self.limits["dma_small_bytes"] = int(target["dma_overhead_bytes"])
        # name -> value (every assumption, defaults filled in), recording which the run reads: an
        # assumption the run never read cannot have changed its outputs (the precision flow sweeps
        # only the others).
        self.assumptions = ReadAssumptions(assumptions)
        # Whether results are stored rounding to nearest even (the instruction path's fast case).
        self.nearest_output = assumptions["output_rounding"] == "nearest_even"
        self.cites: dict[str, str] = {}  # target key -> its source, as findings cite it (_rules._cite)
        self.loop_indices: list[int] = []  # the running nl.*_range loops' current indices (language._Loop)
        self.loops: list[tuple[int, str]] = []  # the same loops' (instance, kind), at the same depths
        self.loop_ids = itertools.count(1)
        self.reverse_affine = False  # run affine_range iterations last to first (the hazard check's rerun)
        # The NKI language the kernel's file imports: "current" (nki.*), "older" (neuronxcc.nki.*)
        # or None (front.namespace); the rules only one compiler applies read it.
        self.language: str | None = None
        self.unrolled: set[int] = set()  # depths in loop_indices of loops traced once per index (static_range)
        # The precision flow (machine.precision): where values were rounded, and the tiles to allocate in
        # fp32 instead (by allocation line) when the kernel runs again to measure a share.
        self.sites: dict = {}
        self.rounded: list = []
        self.widen: frozenset = frozenset()
        # Run.exact(): the kernel's dataflow without the hardware's roundings (machine.arithmetic.EXACT).
        self.exact = False
        # values=False (numeq.nki.run): trace and check, compute nothing (access.read gives zeros,
        # access.write and PSUM chains store nothing); the schedule's input at production shapes.
        self.values = True
        self.watch: dict | None = None  # a diagnostic rerun's watch (machine.arithmetic.WATCH)
        # Run.bound(): each buffer's radii by id (instructions.bounds), and whether a bound rule's
        # instruction is running (a write outside one cannot be followed).
        self.radii: dict | None = None
        self.bounding = False
        # Run.bound(): what an instruction's semantics computed that its bound rule reads (a select's
        # chosen elements, iota's integers)
        self.bound_note: Any = None
        self.findings: list[Finding] = []
        self.at: str | None = None  # the kernel's line of the instruction running, when it called it directly
        self.engine: str | None = None  # the engine of the instruction running (the rules that differ by engine)
        self._finding_at: dict[tuple[str, str], Finding] = {}
        self.trace: list[Instruction] = []
        self.lives: list = []  # every allocation's Life (the capacity rules), not its arrays
        self.grid = grid
        self.program = tuple(0 for _ in grid)
        # Collective ranks (numeq.nki.run(ranks=R)): each rank a launch of the kernel with its own HBM,
        # SBUF and PSUM; ``rank`` the running one. 0 ranks: no collective group (one launch).
        self.ranks = 0
        self.rank = 0
        self.step = 0
        # Allocation ids (PSUM chains are keyed on them, unnamed tiles are named by them) count from 1
        # in each run, so that the same kernel on the same inputs traces the same in any process.
        self.ids = itertools.count(1)
        # (PSUM buffer id, element offset) -> nc_matmuls in the current accumulation chain there, and
        # the (chain length, SBUF accumulator format) of each PSUM group added into SBUF: the run's
        # platform reads them (psum_group, group_accumulator).
        self.psum_chain: dict[tuple[int, int], int] = {}
        self.psum_groups: list[tuple[int, str, str]] = []  # (group length, accumulator format, line)
        self.bf16_psum_chain: str | None = None  # the first line adding matmuls into a bf16 PSUM tile (v4)
        self.pending: dict[int, dict] = {}
        self.pending_bytes = 0  # the operand bytes pending chains keep (machine.psum.PENDING_BYTES_LIMIT)
        self.placed: Any = None  # direct allocation's physical tiles (machine.placement.Physical)
        self.cores: Any = None  # the grid's programs and their rendezvous (machine.cores.Cores), while it runs
        # The running instruction's operands' unwritten elements, and the first such read (rules.undefined).
        self.undefined: Any = None
        self.undefined_from: Any = None
        self.pinned: dict[int, set] = {}
        # Partitions of the current instruction's operands no instruction wrote (_rules.check_read).
        self._shared: dict[str, list] = {}
        self._shared_seen: dict[tuple, int] = {}  # PSUM buffer id -> its matmul chains not yet computed (machine.psum)

    # --- findings ------------------------------------------------------------------------------
    def find(self, rule: str, severity: str, message: Any, source: str, at: str | None = None) -> Finding:
        """Record a finding at the kernel's line (``at``); ``message`` may be a callable giving
        the text, made only the first time the rule fires at that line (hot warnings)."""
        at = at or self.at or where()
        key = (rule, at)
        f = self._finding_at.get(key)
        if f is not None:
            f.count += 1
            return f
        f = Finding(rule, severity, at, message() if callable(message) else message, source)
        self._finding_at[key] = f
        self.findings.append(f)
        return f

    def fail(self, rule: str, message: str, source: str) -> Exception:
        return KernelFault(self.find(rule, "error", message, source))

    def unsupported(self, what: str) -> Unsupported:
        return Unsupported(f"{where()}: numeq.nki does not implement {what}; see docs/nki.md's table of NKI names")

    # --- the trace -----------------------------------------------------------------------------
    def issue(self, engine: str, name: str, dst: list, srcs: list, nbytes: int = 0, flops: int = 0,
              cycles: int = 0, sums: bool = False, detail: dict | None = None) -> Instruction:
        """Record an instruction (``sums``: it adds along the free axis in fp32, a precision-flow
        site; the instruction table's row says when; ``detail``: what else the trace keeps)."""
        if detail is None:
            detail = {}
        self.undefined = self.undefined_from = None  # the instruction is done: its undefined results are written
        self.step = step = self.step + 1
        operands = []
        placed = []
        partitions = 0
        for group in (dst, srcs):
            described = []
            where_ = []
            for t in group:
                base = t.base
                # A whole buffer (most operands) by its id alone.
                where_.append(base.id if t.data is base.data and t.indirection is None else t.placement())
                life = base.life
                if life.first_use is None:
                    life.first_use = step
                life.last_use = step
                if not partitions and base.memory.on_chip:
                    partitions = t.partitions()[1]
                described.append((base.name, base.memory.name, t.data.shape, t.dtype.name))
            operands.append(described)
            placed.append(tuple(where_))
        at = self.at or where()
        ins = Instruction(step, engine, name, at, operands[0], operands[1], int(nbytes), int(flops), int(cycles),
                          detail, partitions, tuple(self.loop_indices), placed[0], placed[1], tuple(self.loops),
                          self.core_id)
        if self.rounded or sums or "function" in detail:
            record_issue(self, name, at, dst, srcs, detail, sums)
        self.trace.append(ins)
        return ins

    @property
    def core_id(self) -> tuple:
        """The running program's identity: its grid index, after its rank where there are ranks
        (what owns tiles and traced instructions: each rank and each core has its own)."""
        return (self.rank, *self.program) if self.ranks else self.program

    def shared_allocated(self, line: str, buffer: Any) -> None:
        """A program allocated shared_hbm ``buffer`` at ``line``, the first of its rank to make its
        n-th there."""
        self._shared.setdefault((self.rank, line), []).append(buffer)

    def shared_at(self, line: str, shape: tuple, dtype: Any) -> Any:
        """The shared_hbm buffer another program of this rank made as its n-th allocation at
        ``line`` that this program's n-th there is, or None (this program is the first; or the
        shapes differ, and each program keeps its own). Ranks share no HBM."""
        count = self._shared_seen.get((self.core_id, line), 0)
        self._shared_seen[(self.core_id, line)] = count + 1
        made = self._shared.get((self.rank, line), [])
        if count < len(made) and made[count].shape == shape and made[count].dtype == dtype:
            return made[count]
        return None

    def allocate(self, buffer: Any) -> Any:
        buffer.life.alloc_step = self.step
        buffer.life.program = self.core_id
        self.lives.append(buffer.life)
        return buffer


def _operand(t: Any) -> tuple:
    return (t.base.name, t.base.memory.name, tuple(t.shape), t.dtype.name)


_stack: list[Context] = []


def current() -> Context:
    if not _stack:
        raise RuntimeError("numeq.nki: NKI calls run inside a kernel run: call the kernel through "
                           "numeq.nki.simulate(kernel)(...) or numeq.nki.run(kernel, ...), or inside "
                           "numeq.nki.installed()")
    return _stack[-1]


def active() -> bool:
    return bool(_stack)


@contextlib.contextmanager
def running(ctx: Context) -> Iterator[Context]:
    # The cyclic garbage collector paused while a kernel runs: a run makes tens of thousands of
    # short-lived objects (tiles, views, trace records; freed by reference counting, no cycles
    # among them), and the collector's passes over the growing trace cost a 2048^3 matmul kernel
    # 3% of its time. It resumes, as it was, when the run ends.
    # Floating-point exceptions are values, not warnings, on the engines (Inf, NaN): numpy's are
    # ignored for the run once, not per instruction (an errstate block costs a small instruction
    # a tenth of its time).
    collecting = gc.isenabled()
    gc.disable()
    floating = np.seterr(all="ignore")
    _stack.append(ctx)
    try:
        yield ctx
    finally:
        _stack.pop()
        np.seterr(**floating)
        if collecting:
            gc.enable()
