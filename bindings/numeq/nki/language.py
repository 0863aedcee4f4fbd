"""``nki.language`` on numeq: dtypes, memories, tensor allocation, loops, SPMD ids, tile sizes, the
ALU and activation identifiers (``nl.add``, ``nl.exp`` ...), and the older interface's tile
operations (``nl.load``, ``nl.store``, ``nl.matmul``, ``nl.arange`` ..., from the front).
"""

from __future__ import annotations

import copy as _copy
import dataclasses as _dataclasses
import functools as _functools
import operator
import types as _types
from typing import Any

import numpy as np

from .machine import placement as _placement
from .machine import rules as _rules
from .machine.context import assigned_name, current
from .machine.context import where as _where  # the kernel's line; nl.where is the older interface's select
from .machine.dtypes import DTYPES, DType, dtype_of
from .machine.precision import allocated
from .machine.memory import MEMORIES, Allocation, Memory, Tensor, ds
from . import isa as _isa
from .instructions.path import language_functions as _language_functions
from .instructions.access import memory_name as _memory_name
from .machine import arithmetic as _numerics
from .machine.context import Unsupported as _Unsupported, active as _active
from .machine.targets import DEFAULT_TARGET as _DEFAULT_TARGET, target as _target
from .placeholders import placeholders_of as _placeholders_of
from .instructions.registers import VirtualRegister as _VirtualRegister, new_register as _new_register
from .instructions.registers import register_value as _register_value
from .compiler import no_reorder  # nl.no_reorder: program order, what numeq runs anyway

__all__ = ["ndarray", "zeros", "ds", "affine_range", "sequential_range", "static_range", "program_id",
           "num_programs", "program_ndim", "tile_size", "sbuf", "psum", "hbm", "shared_hbm", "private_hbm"]

# --- dtypes and memories -------------------------------------------------------------------------
float32, tfloat32, bfloat16, float16 = (DTYPES[n] for n in ("float32", "tfloat32", "bfloat16", "float16"))
float8_e4m3, float8_e4m3fn, float8_e5m2 = (DTYPES[n] for n in ("float8_e4m3", "float8_e4m3fn", "float8_e5m2"))
int8, uint8, int16, uint16, int32, uint32 = (DTYPES[n] for n in ("int8", "uint8", "int16", "uint16", "int32", "uint32"))
bool_ = DTYPES["bool"]
fp32, bf16, fp16, tf32 = float32, bfloat16, float16, tfloat32
# Trainium3's MX dtypes: the packed x4 data and the e8m0 scale (machine.dtypes).
float8_e5m2_x4, float8_e4m3fn_x4, float4_e2m1fn_x4, float8_e8m0fnu = (
    DTYPES[n] for n in ("float8_e5m2_x4", "float8_e4m3fn_x4", "float4_e2m1fn_x4", "float8_e8m0fnu"))

# nki.language.dtypes (also nki.dtype): the dtypes as a submodule, as AWS's package lays them out.
dtypes = _types.ModuleType("nki.language.dtypes", "NKI's dtypes.")
for _d in DTYPES.values():
    setattr(dtypes, _d.name, _d)

# The types kernels annotate with and test against (nki.language API reference: nl.NkiTensor, the
# MemoryRegion of nl.sbuf ..., a dtype; nl.tensor and nl.dtype are the spellings AWS's own kernels use).
NkiTensor = tensor = Tensor
MemoryRegion = Memory
dtype = DType


class NKIObject:
    """AWS's base class for kernel dataclasses and configuration objects (nki.language API
    reference: ``NKIObject(**kwargs)``): keyword arguments become attributes.

    A subclass is a data class with or without ``@dataclass`` (NKI language guide, "Class
    Support": "In NKI all classes are similar to Python data classes ... The @dataclass decorator
    is optional"; the default initializer takes every field, ``__init__(self, x=None, y=False)``,
    then calls ``__post_init__``). Its fields are its annotated names and its plain class
    attributes (nki-library's ``class SectionParams(nl.NKIObject): section_idx = None``, built
    with keywords), each defaulting to None unless given a value. ``@dataclass`` (frozen or not)
    writes its own initializer over these fields; a class with its own ``__init__`` keeps it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        fields = _nki_fields(type(self))
        if not fields and not args:  # NKIObject itself, or a subclass without fields
            for key, value in kwargs.items():
                setattr(self, key, value)
            return
        name = type(self).__name__
        if len(args) > len(fields):
            raise TypeError(f"{name}() takes {len(fields)} positional arguments ({', '.join(fields)}), got {len(args)}")
        values = dict(zip(fields, args))
        for key, value in kwargs.items():
            if key not in fields:
                raise TypeError(f"{name}() got an unexpected keyword argument {key!r}; its fields: {', '.join(fields)}")
            if key in values:
                raise TypeError(f"{name}() got multiple values for argument {key!r}")
            values[key] = value
        for field_name in fields:
            if field_name in values:
                setattr(self, field_name, values[field_name])
                continue
            default = getattr(type(self), field_name, None)
            if isinstance(default, _dataclasses.Field):
                default = default.default_factory() if default.default_factory is not _dataclasses.MISSING \
                    else None if default.default is _dataclasses.MISSING else default.default
            setattr(self, field_name, default)
        post = getattr(self, "__post_init__", None)
        if post is not None:
            post()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        own = cls.__dict__
        annotations = own.get("__annotations__")
        if annotations is None:
            annotations = {}
            cls.__annotations__ = annotations
        for name, value in list(own.items()):
            if name.startswith("__") or name in annotations or callable(value) or \
                    isinstance(value, (staticmethod, classmethod, property, _types.MemberDescriptorType)):
                continue
            annotations[name] = Any  # a plain class attribute is a field, as the NKI compiler reads it
            if isinstance(value, (list, dict, set)):  # each instance its own copy (dataclasses' rule)
                setattr(cls, name, _dataclasses.field(default_factory=_functools.partial(_copy.copy, value)))
        for name in annotations:
            if not hasattr(cls, name):
                setattr(cls, name, None)  # the NKI initializer's default (a later @dataclass sees a default)


def _nki_fields(cls: type) -> tuple[str, ...]:
    """A subclass's fields, the base classes' first (as a dataclass orders them)."""
    names: dict[str, None] = {}
    for klass in reversed(cls.__mro__):
        if klass is NKIObject or not issubclass(klass, NKIObject):
            continue
        for name, hint in klass.__dict__.get("__annotations__", {}).items():
            if "ClassVar" not in str(hint):
                names[name] = None
    return tuple(names)


sbuf, psum, hbm, shared_hbm, private_hbm = (MEMORIES[n] for n in ("sbuf", "psum", "hbm", "shared_hbm", "private_hbm"))


def is_hbm(buffer: Any) -> bool:
    return not _memory(buffer).on_chip


def is_on_chip(buffer: Any) -> bool:
    return _memory(buffer).on_chip


def is_psum(buffer: Any) -> bool:
    return _memory(buffer).name == "psum"


def is_sbuf(buffer: Any) -> bool:
    return _memory(buffer).name == "sbuf"


def _memory(buffer: Any) -> Any:
    return MEMORIES[_memory_name(buffer)]


def _shape(shape: Any) -> tuple[int, ...]:
    if isinstance(shape, (int, np.integer)):
        return (int(shape),)
    try:
        dims = tuple(operator.index(getattr(s, "size", s)) if not isinstance(s, (int, np.integer)) else int(s)
                     for s in shape)
    except TypeError:
        raise TypeError(f"shape: expected a tuple of ints, got {shape!r}") from None
    if any(d < 0 for d in dims):
        raise ValueError(f"shape: dimensions must be non-negative, got {dims}")
    return dims


def ndarray(shape: Any, dtype: Any, buffer: Any = None, name: str = "", address: Any = None, **kwargs: Any) -> Tensor:
    """A new tensor in ``buffer`` (nl.sbuf by default; nl.psum, nl.hbm, nl.shared_hbm): its contents
    start undefined (reading them before a write is a finding). ``address=(partition_offset,
    free_offset)`` places it (machine.placement.place_at)."""
    # lazy_initialization= (the older interface's creation functions, nki-samples' kernels): when the
    # compiler fills a tile (eagerly or at its first use), not what it holds: no effect on values.
    kwargs.pop("lazy_initialization", None)
    if kwargs:
        raise current().unsupported(f"nl.ndarray's keyword(s) {', '.join(sorted(kwargs))}")
    ctx = current()
    memory = _memory(buffer)
    if memory.on_chip and isinstance(shape, (tuple, list)) and not all(type(s) is int for s in shape):
        # The older interface's nl.par_dim after block dims (nl.ndarray((4, nl.par_dim(128), 512))).
        marked = [i for i, s in enumerate(shape) if getattr(s, "_nki_par_dim", False)]
        if marked and marked != [0]:
            return FRONT["index_expressions"].par_dim_ndarray(tuple(shape), marked, dtype, memory,
                                                               _placement.direct(buffer), name)
    line = _where()
    d = allocated(ctx, line, dtype_of(dtype))  # fp32 where the precision flow widens this line
    if memory.name == "shared_hbm" and ctx.grid:
        # SPMD: every program's n-th shared_hbm tensor allocated at one line is the same tensor (the
        # kernel's output, visible to all programs; nki.language docs), whichever program reaches
        # the line first (machine.cores: a program may run ahead of program 0 past a rendezvous).
        shared = ctx.shared_at(line, _shape(shape), d)
        if shared is not None:
            return shared.whole()
    b = ctx.allocate(Allocation(_shape(shape), d, memory, name or assigned_name(), line))
    if memory.name == "shared_hbm" and ctx.grid:
        ctx.shared_allocated(line, b)
    if _placement.direct(buffer) is not None:  # nki.compiler's direct allocation
        _placement.place(ctx, b, buffer, 0)
    elif address is not None:
        _placement.place_at(ctx, b, address)

    t = b.whole()
    if b.memory.on_chip:
        _rules.check_on_chip(ctx, t)
    return t


def zeros(shape: Any, dtype: Any, buffer: Any = None, name: str = "", **kwargs: Any) -> Tensor:
    """A new tensor filled with zeros (a memset on the Vector engine)."""
    t = ndarray(shape, dtype, buffer=buffer, name=name, **kwargs)
    _isa.memset(t, 0)
    return t


def full(shape: Any, fill_value: Any, dtype: Any, buffer: Any = None, name: str = "", **kwargs: Any) -> Tensor:
    t = ndarray(shape, dtype, buffer=buffer, name=name, **kwargs)
    _isa.memset(t, fill_value)
    return t


def ones(shape: Any, dtype: Any, buffer: Any = None, name: str = "", **kwargs: Any) -> Tensor:
    return full(shape, 1, dtype, buffer=buffer, name=name, **kwargs)


def zeros_like(a: Tensor, dtype: Any = None, buffer: Any = None, name: str = "") -> Tensor:
    return zeros(a.shape, dtype or a.dtype, buffer=buffer or a.buffer, name=name)


def ndarray_like(a: Tensor, dtype: Any = None, buffer: Any = None, name: str = "") -> Tensor:
    return ndarray(a.shape, dtype or a.dtype, buffer=buffer or a.buffer, name=name)


# --- random numbers and constants ----------------------------------------------------------------
def random_seed(seed: Any, **kwargs: Any) -> None:
    """Seed the generator of ``rand`` / ``dropout`` from a [1, 1] 32-bit tile (nisa.set_rng_seed)."""
    _isa.set_rng_seed(seed, **kwargs)  # mask=: the instruction's (a constant mask runs it or not)


def dropout(x: Tensor, rate: Any, dtype: Any = None, **kwargs: Any) -> Tensor:
    """x with each element zeroed with probability ``rate`` (a number or a (P, 1) tile), in a new
    tile (nisa.dropout)."""
    if dtype is not None:
        kwargs["dtype"] = dtype
    return _isa.dropout(x, rate, **kwargs)  # mask=: the instruction's


def shared_constant(constant: Any, dtype: Any = None) -> Tensor:
    """A shared-HBM tensor holding ``constant`` (a numpy array, or the path of a ``.npy`` file), as
    the compiler embeds it in the binary and loads it before the kernel runs (nki.language API
    reference: "Create a tensor in shared HBM initialized with constant data"). Its dtype is the
    array's NKI dtype (float32, float16, bfloat16, int32 ... as the docs list); the same values in
    every program of an SPMD grid. ``dtype`` (SDK 2.26's ``shared_constant(constant, dtype=None)``):
    the values rounded into it (to nearest even; integers exact or saturated)."""
    ctx = current()
    if isinstance(constant, (str, bytes)) or hasattr(constant, "__fspath__"):
        try:
            array = np.load(constant, allow_pickle=False)
        except (OSError, ValueError) as e:
            raise ValueError(f"constant: cannot read the .npy file {constant!r} ({e})") from None
    else:
        array = np.asarray(constant)
    if array.dtype == np.float64:
        raise ValueError("constant: float64 is not an NKI dtype; give a float32 (or narrower) array")
    if dtype is None:
        d = dtype_of(array.dtype, "constant")
        data = np.array(array, dtype=np.dtype(d.storage), copy=True, order="C")  # the kernel's own copy
    else:
        d = dtype_of(dtype)
        data = np.ascontiguousarray(_numerics.cast_into(np.asarray(array, dtype=np.float64), d))
    line = _where()
    return ctx.allocate(Allocation(tuple(array.shape), d, MEMORIES["shared_hbm"], assigned_name() or "constant", line,
                                   data=data)).whole()


# --- loops ---------------------------------------------------------------------------------------
class _Loop:
    """An ``nl.*_range`` loop: a range whose iteration the trace records (``Instruction.iteration``:
    the indices of the enclosing loops, outermost first; ``Instruction.loops``: each one's
    (instance, kind), kind "affine", "sequential", "static" or "range")."""

    __slots__ = ("range", "unrolled", "kind")

    def __init__(self, r: range, unrolled: bool = False, kind: str = "range") -> None:
        self.range = r
        self.unrolled = unrolled  # static_range: the tracer runs the body once per index
        self.kind = kind

    def __iter__(self) -> Any:
        ctx = current()
        indices = ctx.loop_indices
        depth = len(indices)
        indices.append(0)
        ctx.loops.append((next(ctx.loop_ids), self.kind))
        if self.unrolled:
            ctx.unrolled.add(depth)
        # affine_range declares its iterations independent (the compiler may reorder them): the
        # hazard check runs them backwards once to confirm a dependence it found.
        order = reversed(self.range) if self.kind == "affine" and ctx.reverse_affine else self.range
        try:
            for i in order:
                indices[depth] = i
                yield i
        finally:
            del indices[depth:]
            del ctx.loops[depth:]
            ctx.unrolled.discard(depth)

    def __len__(self) -> int:
        return len(self.range)

    def __getitem__(self, i: Any) -> Any:
        return self.range[i]

    def __repr__(self) -> str:
        return repr(self.range)


def _range(*args: Any, unrolled: bool = False, kind: str = "range", **kwargs: Any) -> _Loop:
    kwargs.pop("multi_buffer", None)
    kwargs.pop("directive", None)
    if kwargs:
        raise current().unsupported(f"the loop keyword(s) {', '.join(sorted(kwargs))}")
    return _Loop(range(*(operator.index(a) for a in args)), unrolled, kind)


def affine_range(*args: Any, **kwargs: Any) -> _Loop:
    """Iterations without loop-carried dependences (the compiler may run them in any order;
    numeq runs them in order: results that depend on the order are the kernel's bug, which
    ``Run.hazards()`` reports)."""
    return _range(*args, kind="affine", **kwargs)


def sequential_range(*args: Any, **kwargs: Any) -> _Loop:
    return _range(*args, kind="sequential", **kwargs)


def static_range(*args: Any, **kwargs: Any) -> _Loop:
    """A loop the compiler unrolls: its body is traced once per index (the other nl loops' bodies
    are traced once, for every iteration)."""
    return _range(*args, unrolled=True, kind="static", **kwargs)


def dynamic_range(start: Any, stop: Any = None, step: int = 1) -> Any:
    """A loop whose bounds the device reads at run time (nki.language.dynamic_range docs: start and
    stop may be VirtualRegisters, step is a compile-time positive int; it yields integer values from
    start to stop). With int bounds numeq runs it as any other loop; a register bound is read when
    the loop starts (assumption ``register_loop_bound``: or the stop again before each iteration)."""
    if isinstance(step, bool) or not isinstance(step, (int, np.integer)) or step <= 0:
        raise ValueError(f"step: nl.dynamic_range takes a compile-time positive int step, got {step!r}")
    for name, v in (("start", start), ("stop", stop)):
        if v is not None and not isinstance(v, (int, np.integer, _VirtualRegister)):
            raise TypeError(f"{name}: nl.dynamic_range takes an int or a VirtualRegister, got {type(v).__name__}")
    if stop is None:
        start, stop = 0, start
    if isinstance(start, _VirtualRegister) or isinstance(stop, _VirtualRegister):
        return _DynamicLoop(start, stop, int(step))
    return _Loop(range(start, stop, step))


class _DynamicLoop:
    """A loop over registers' bounds (``nl.dynamic_range``, ``nl.fori_loop``): read when iteration
    starts (or the stop before each test: ``register_loop_bound``), each index recorded as
    ``_Loop``'s are (``Context.loop_indices``)."""

    __slots__ = ("start", "stop", "step")

    def __init__(self, start: Any, stop: Any, step: int) -> None:
        self.start, self.stop, self.step = start, stop, step

    def __iter__(self) -> Any:
        ctx = current()
        again = isinstance(self.stop, _VirtualRegister) and ctx.assumptions["register_loop_bound"] == "each_iteration"
        i = _register_value(ctx, self.start, "start")
        stop = _register_value(ctx, self.stop, "stop")
        indices = ctx.loop_indices
        depth = len(indices)
        indices.append(0)
        ctx.loops.append((next(ctx.loop_ids), "dynamic"))
        line, iterations = _where(), 0
        try:
            while i < stop:
                indices[depth] = i
                yield i
                iterations += 1
                i += self.step
                if again:
                    stop = _register_value(ctx, self.stop, "stop")
        finally:
            del indices[depth:]
            del ctx.loops[depth:]
            _dynamic_loop(ctx, line, iterations)

    def __len__(self) -> int:
        raise TypeError("nl.dynamic_range with a VirtualRegister bound has no length before it runs")

    def __repr__(self) -> str:
        return f"dynamic_range({self.start!r}, {self.stop!r}, {self.step})"


def fori_loop(lower: Any, upper: Any, body_fun: Any, step: int = 1) -> None:
    """``body_fun(i)`` for i from lower to upper (exclusive) by step (nki.language.fori_loop docs:
    lower and upper ints or VirtualRegisters, step a compile-time positive int; the body receives i
    as a VirtualRegister passed by value, so writing it does not change the loop; returns None).
    Register bounds are read as ``nl.dynamic_range``'s (``register_loop_bound``)."""
    if isinstance(step, bool) or not isinstance(step, (int, np.integer)) or step <= 0:
        raise ValueError(f"step: nl.fori_loop takes a compile-time positive int step, got {step!r}")
    for name, v in (("lower", lower), ("upper", upper)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer, _VirtualRegister)):
            raise TypeError(f"{name}: nl.fori_loop takes an int or a VirtualRegister, got {type(v).__name__}")
    if not callable(body_fun):
        raise TypeError(f"body_fun: nl.fori_loop takes a callable (i: VirtualRegister) -> None, got {body_fun!r}")
    ctx = current()
    for i in _DynamicLoop(lower, upper, int(step)):
        body_fun(_new_register(ctx, i, "i"))


def while_loop(init: Any, body_fun: Any) -> None:
    """While the condition register is nonzero, tested before each iteration (nki.language.while_loop
    docs: ``r = init; while r != 0: r = body_fun(r)``): the body receives the current condition as a
    VirtualRegister passed by value and returns the next condition register; returns None. The
    iterations are recorded as loop indices 0, 1, ... (``Context.loop_indices``)."""
    if not isinstance(init, _VirtualRegister):
        raise TypeError(f"init: nl.while_loop takes the initial condition register (a VirtualRegister), got "
                        f"{type(init).__name__}")
    if not callable(body_fun):
        raise TypeError(f"body_fun: nl.while_loop takes a callable (r: VirtualRegister) -> VirtualRegister, got "
                        f"{body_fun!r}")
    ctx = current()
    condition = _register_value(ctx, init, "init")
    indices = ctx.loop_indices
    depth = len(indices)
    indices.append(0)
    ctx.loops.append((next(ctx.loop_ids), "dynamic"))
    line, count = _where(), 0
    try:
        while condition != 0:
            indices[depth] = count
            nxt = body_fun(_new_register(ctx, condition, "r"))
            if not isinstance(nxt, _VirtualRegister):
                raise TypeError(f"body_fun: nl.while_loop's body returns the next condition register (a "
                                f"VirtualRegister), got {type(nxt).__name__}")
            condition = _register_value(ctx, nxt, "the condition body_fun returned")
            count += 1
    finally:
        del indices[depth:]
        del ctx.loops[depth:]
        _dynamic_loop(ctx, line, count)


def _dynamic_loop(ctx: Any, line: str, iterations: int) -> None:
    """A dynamic loop ended: under a grid, its run records it (machine.cores: core_divergence)."""
    if ctx.cores is not None and len(ctx.cores.programs) > 1:
        ctx.cores.dynamic_loop(line, iterations)


# --- SPMD ----------------------------------------------------------------------------------------
def program_id(axis: int = 0) -> int:
    """This program's index along grid ``axis`` (0 without a grid)."""
    ctx = current()
    axis = operator.index(axis)
    if not ctx.grid:
        return 0
    if not 0 <= axis < len(ctx.grid):
        raise ValueError(f"axis: program_id({axis}) of a grid with {len(ctx.grid)} axes")
    return ctx.program[axis]


def num_programs(axes: Any = None) -> Any:
    """The grid's size along ``axes`` (an int or a tuple; None: every axis' product)."""
    ctx = current()
    grid = ctx.grid or (1,)
    if axes is None:
        return int(np.prod(grid))
    if isinstance(axes, (tuple, list)):
        return tuple(grid[a] if a < len(grid) else 1 for a in axes)
    return grid[axes] if axes < len(grid) else 1


class SpmdDim(int):
    """A dimension of the older interface's SPMD launch grid that names how its programs spread
    over physical NeuronCores (``kernel[nl.nc(2), 2]``, ``kernel[nl.spmd_dim(nl.nc(2), 2), 2]`` or
    ``kernel[nl.nc(2) * 2, 2]``: neuronxcc.nki.language nc / spmd_dim docs). Its value is the
    dimension's size; ``cores`` is the NeuronCores it spreads over. Which core runs a program changes
    no value (each program computes alone), so numeq runs them in grid order."""

    cores: int

    def __new__(cls, size: int, cores: int) -> "SpmdDim":
        d = super().__new__(cls, size)
        d.cores = cores
        return d

    def __mul__(self, other: Any) -> "SpmdDim":
        return SpmdDim(int(self) * operator.index(other), self.cores)

    __rmul__ = __mul__

    def __repr__(self) -> str:
        return f"spmd_dim({int(self)}, cores={self.cores})"


def nc(cores: int) -> SpmdDim:
    """A launch-grid dimension of ``cores`` programs, one per physical NeuronCore."""
    cores = operator.index(cores)
    if cores < 1:
        raise ValueError(f"cores: nl.nc takes a positive number of NeuronCores, got {cores}")
    return SpmdDim(cores, cores)


def spmd_dim(*dims: Any) -> SpmdDim:
    """A launch-grid dimension of the product of ``dims`` (``nl.nc(n)`` among them names the cores)."""
    if not dims:
        raise TypeError("dims: nl.spmd_dim takes at least one dimension (nl.nc(n) or an int)")
    size, cores = 1, 1
    for d in dims:
        size *= operator.index(d)
        cores *= getattr(d, "cores", 1)
    return SpmdDim(size, cores)


def program_ndim() -> int:
    return len(current().grid)


# --- tile sizes ----------------------------------------------------------------------------------
class _TileSize:
    """``nl.tile_size``: the target's tile limits (from the review's target table)."""

    def _t(self) -> Any:
        return current().target if _active() else _target(_DEFAULT_TARGET)

    @property
    def pmax(self) -> int:
        return int(self._t()["partitions"])

    @property
    def psum_fmax(self) -> int:
        return int(self._t()["psum_bank_bytes"]) // 4

    @property
    def gemm_stationary_fmax(self) -> int:
        return int(self._t()["matmul_stationary_free"])

    @property
    def gemm_moving_fmax(self) -> int:
        return int(self._t()["gemm_moving_fmax"])

    @property
    def bn_stats_fmax(self) -> int:
        return int(self._t()["bn_stats_free"])

    @property
    def psum_num_banks(self) -> int:
        return int(self._t()["psum_banks"])

    @property
    def psum_bank_fmax(self) -> int:
        return int(self._t()["psum_bank_bytes"]) // 4

    @property
    def psum_bank_fmax_bytes(self) -> int:
        return int(self._t()["psum_bank_bytes"])

    @property
    def sbuf_size_bytes(self) -> int:
        return int(self._t()["sbuf_partition_bytes"]) * int(self._t()["partitions"])

    @property
    def sbuf_fmax_bytes(self) -> int:
        # The usable part of a partition is not published (FACTS.md s3): numeq counts all of it.
        return int(self._t()["sbuf_partition_bytes"])

    @property
    def sbuf_fmax(self) -> int:
        return self.sbuf_fmax_bytes // 4

    @property
    def total_available_sbuf_size(self) -> int:
        return self.sbuf_fmax_bytes

    def __getattr__(self, name: str) -> Any:
        # psum_min_align, sbuf_min_align: named by NKI without values (nki.language.tile_size docs).
        if name.startswith("_"):
            raise AttributeError(name)
        raise _Unsupported(f"numeq.nki does not know nl.tile_size.{name} (its value is not documented)")


tile_size = _TileSize()


# --- ALU operators and activation functions ------------------------------------------------------
class Operator:
    """An ALU operator or activation function identifier (``nl.add``, ``nl.exp``): passed to
    nisa instructions as ``op=``, and callable as the older interface's tile operation."""

    def __init__(self, name: str, arity: int) -> None:
        self.op_name = name
        self.__name__ = name
        self.arity = arity

    def __repr__(self) -> str:
        return f"nl.{self.op_name}"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return FRONT["tiles"].apply(self, *args, **kwargs)


_BINARY = ("add", "subtract", "multiply", "divide", "maximum", "minimum", "power", "equal", "not_equal", "greater",
           "greater_equal", "less", "less_equal", "logical_and", "logical_or", "logical_xor", "bitwise_and",
           "bitwise_or", "bitwise_xor", "left_shift", "right_shift", "mod", "abs_max", "abs_min", "fmod")
_UNARY = ("exp", "log", "tanh", "sigmoid", "silu", "gelu", "gelu_apprx_tanh", "rsqrt", "sqrt", "reciprocal",
          "softplus", "relu", "copy", "identity", "square", "abs", "negative", "sign", "exp2",
          # documented identifiers the ALU and the function model may not compute yet: they exist
          # (kernels keep them in tables), an instruction using one says whether numeq has it.
          "invert", "logical_not", "ceil", "floor", "trunc", "gelu_apprx_sigmoid", "gelu_dx",
          "gelu_apprx_sigmoid_dx", "silu_dx", "mish", "erf", "erf_dx", "sin", "cos", "tan", "arctan")
for _n in _BINARY:
    globals()[_n] = Operator(_n, 2)
for _n in _UNARY:
    globals()[_n] = Operator(_n, 1)
bypass = Operator("bypass", 2)
average = Operator("average", 2)  # tensor_partition_reduce's mean across partitions
prelu = Operator("prelu", 2)  # nki.language API reference: an ALU identifier

# The older interface's tile operations and index expressions (front.tiles, front.index_expressions),
# given by front.install(): this module imports nothing of the front.
FRONT: dict[str, Any] = {}


# nki.language functions that are rows of the instruction table (nl.rand, nl.shared_identity_matrix);
# the older tile functions' rows (nl.sin ...) are called by the front's nl.sin(x, dtype=, mask=).
globals().update(_language_functions(public=True))

# Documented names numeq does not compute yet: they exist, calling one raises (placeholders).
globals().update((_n, _v) for _n, _v in _placeholders_of("nki.language").items() if _n not in globals())


def __getattr__(name: str) -> Any:
    # Older-interface names live in the front. ``nl.bool`` (AWS's kernels' spelling of nl.bool_) is
    # served here so that this module's own code keeps Python's bool. Any other name is not NKI's.
    tiles = FRONT.get("tiles")
    if tiles is not None and name in tiles.__all__:
        return getattr(tiles, name)
    if name == "bool":
        return bool_
    if name == "range":
        # nl.range: not in the SDK 2.32 API reference, whose affine_range / sequential_range /
        # static_range are each "an alias for Python's range()" ("Prefer using range() directly");
        # nki-library (2026) loops with nl.range(n). The loop as those aliases run it, traced as
        # range. Served here so that this module's own code keeps Python's range.
        return _range
    raise AttributeError(f"module 'nki.language' has no attribute {name!r} (numeq.nki: not a documented NKI name; "
                         "see docs/nki.md's table of NKI names)")
