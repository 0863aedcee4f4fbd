"""The older NKI interface (``neuronxcc.nki``, NKI 0.1.0, "Beta 1"): tiles as values.

``nl.load`` / ``nl.store`` move tiles between HBM and SBUF, ``nl.matmul`` and the tile operations
(``nl.exp(t)``, ``nl.add(a, b)``, ``a * 2.0``, ``nl.sum(t, axis=1)`` ...) return new tiles,
``t[idx] = value`` writes a tile into a tensor and ``psum += nisa.nc_matmul(...)`` accumulates in
PSUM. Tensors are indexed by affine expressions of ``nl.arange`` / ``nl.mgrid`` (``k*128 + i_p``),
which become strided views of the tensor, and ``mask=`` predicates (``(i_p < 64) & (i_f < 256)``)
restrict an instruction to the elements they hold. Every operation is the current interface's
instruction (``isa``), so the numerics and the checks are the same (SDK 2.26 nki.language /
nki.isa docstrings, nki.api.shared.rst: masking, type promotion).
"""

from __future__ import annotations

import builtins
import operator
from typing import Any, Callable

import ml_dtypes
import numpy as np

from ..instructions import access as _engine
from ..machine import arithmetic as _numerics
from ..machine import rules as _rules
from ..machine.context import KernelFault, current
from ..machine.dtypes import DTYPES, DType, dtype_of
from ..machine.targets import start_partitions
from .index_expressions import (Grid, IndexExpr, Predicate, _bbox, _Clipped, _fresh, _grid_shape, _is_index,
                            _mask_array, _masked, _retarget, _same_view, _sub, arange, index,
                            mgrid, par_dim)
from ..machine.memory import Tensor
from .. import isa
from ..instructions.path import language_functions
from ..machine.alu import op_name
from .. import language
from . import masks as _masks

__all__ = ["IndexExpr", "Predicate", "Grid", "arange", "mgrid", "par_dim", "load", "store", "copy", "transpose",
           "matmul", "empty_like", "sum", "max", "min", "mean", "prod", "var", "all", "where", "static_cast",
           "broadcast_to", "expand_dims", "device_print", "bfp16", "finfo", "promote", "apply", "index", "assign",
           "gather_flattened", "load_transpose2d", "loop_reduce"]

_ball = builtins.all


def _isa():
    return isa


def assign(t: Tensor, key: Any, value: Any) -> None:
    """``t[key] = value``: a copy into the view (the same dtype: the bits; otherwise through fp32
    with the output rounding); a scalar is a memset. A result the last instruction just made is
    written there directly, as the compiler places it."""
    ctx = current()
    if value is _masks.NOTHING:  # an instruction whose mask holds nowhere: nothing is written
        return
    if isinstance(value, LoopReduction):
        value.into(t[key])
        return
    view = t[key]
    if isinstance(view, _Clipped):
        raise view.fault()
    isa = _isa()
    if isinstance(value, Tensor):
        if isinstance(value, _Clipped):
            raise value.fault()
        if _same_view(view, value):
            return  # t[key] += x: already written in place
        if value.size != view.size:
            raise KernelFault(ctx.find("shape_mismatch", "error", f"assigning a tile of shape {value.shape} to "
                                       f"{t.name}{list(view.shape)}", "documented: a tile is assigned to a view of "
                                       "its shape (nki.language 0.1.0)"))
        if value.dtype == view.dtype and value.base.memory is view.base.memory and _fresh(ctx, value):
            if ctx.radii is not None and not ctx.bounding:  # Run.bound(): the radii move with the bits
                from ..instructions.bounds import placed

                placed(ctx, view, value, lambda: assign(t, key, value))
                return
            _rules.check_on_chip(ctx, view)
            _engine.settled(ctx, value)
            _engine.before_write(ctx, view)
            if value.base.complete:
                view.data[...] = value.data.reshape(view.shape)
                view.mask[...] = value.mask.reshape(view.shape)
                written = None
            else:
                # A result written in part (an instruction under mask=): only its written elements
                # land in the view; the rest keeps what the view held, as the compiler writes a
                # masked instruction's result straight into the destination.
                written = value.mask.reshape(view.shape) == value.base.full
                view.data[written] = value.data.reshape(view.shape)[written]
                view.mask[written] = value.base.full
            if view.writer is not None and value.writer is not None:
                if written is None:
                    view.writer[...] = value.writer.reshape(view.shape)
                else:
                    view.writer[written] = value.writer.reshape(view.shape)[written]
                view.base.writer_all = None
            if ctx.trace[-1].name == "nc_matmul":
                ctx.psum_chain[(view.base.id, view.element_offset())] = 1
            _retarget(ctx, value, view)
        elif view.base.memory.on_chip and value.base.memory.on_chip:
            isa.tensor_copy(dst=view, src=value)
        else:
            isa.dma_copy(dst=view, src=value)
    elif isinstance(value, (int, float, np.number, bool, np.bool_)):
        if not view.base.memory.on_chip:
            raise TypeError(f"{t.name}: a scalar is written to SBUF / PSUM (memset); HBM tensors are written with "
                            "nl.store")
        first, count, _ = view.partitions()
        if count < current().limits["partitions"] and first not in start_partitions(count):
            # No compute engine starts an access of `count` partitions there (FACTS s3: quadrant
            # starts), so the compiler cannot memset it; a DMA reaches any partition: the value is
            # written as a constant moved by DMA (the SDK's gather_flattened example fills
            # indices[i, j] element by element). Floats go through fp32 (dma_cast_rounding).
            fill = np.full(view.shape, value, dtype=view.dtype.storage if view.dtype.kind == "int" else np.float32)
            isa.dma_copy(dst=view, src=language.shared_constant(fill))
        else:
            isa.memset(view, value)
    else:
        raise TypeError(f"{t.name}[...] = value: expected a tile or a number, got {type(value).__name__}")


# --- type promotion (nki.api.shared.rst, NKI Type Promotion) -----------------------------------------
_FLOAT_BITS = {"fp32": (8, 23), "tf32": (8, 10), "bf16": (8, 7), "fp16": (5, 10), "e4m3": (4, 3),
               "e4m3fn": (4, 3), "e5m2": (5, 2)}


def _scalar_dtype(x: Any) -> DType:
    """Weakly typed scalars: bool -> uint8, int -> int32, float -> float32; typed numpy scalars
    keep their dtype (where NKI has it)."""
    if isinstance(x, (bool, np.bool_)):
        return DTYPES["uint8"]
    if isinstance(x, np.generic):
        try:
            return dtype_of(x.dtype)
        except (TypeError, ValueError):
            pass
    if isinstance(x, (int, np.integer)):
        return DTYPES["int32"]
    if isinstance(x, (float, np.floating)):
        return DTYPES["float32"]
    raise TypeError(f"expected a tile or a number, got {type(x).__name__}")


def promote(a: Any, b: Any) -> DType:
    """The dtype of an arithmetic result on operands (tiles, dtypes or scalars) ``a`` and ``b``."""
    da = a.dtype if isinstance(a, Tensor) else a if isinstance(a, DType) else _scalar_dtype(a)
    db = b.dtype if isinstance(b, Tensor) else b if isinstance(b, DType) else _scalar_dtype(b)
    da = DTYPES["uint8"] if da.name == "bool" and db.name != "bool" else da
    db = DTYPES["uint8"] if db.name == "bool" and da.name != "bool" else db
    if da == db:
        return da
    if da.is_float != db.is_float:
        return da if da.is_float else db
    if da.is_float:
        (ea, ma), (eb, mb) = _FLOAT_BITS[da.format], _FLOAT_BITS[db.format]
        if ea >= eb and ma >= mb:
            return da
        if eb >= ea and mb >= ma:
            return db
        # neither holds the other: (fp16, bf16) -> fp32; (e4m3, e5m2) -> bf16 (the docs' widened types)
        return DTYPES["bfloat16"] if da.itemsize == db.itemsize == 1 else DTYPES["float32"]
    ia, ib = np.iinfo(da.storage), np.iinfo(db.storage)
    bits_a, bits_b = da.itemsize * 8, db.itemsize * 8
    if (ia.min < 0) == (ib.min < 0):
        return da if bits_a >= bits_b else db
    signed, unsigned = (bits_a, bits_b) if ia.min < 0 else (bits_b, bits_a)
    if signed > unsigned:
        return DTYPES[f"int{signed}"]
    wide = 2 * unsigned
    return DTYPES[f"int{wide}"] if wide <= 32 else DTYPES["float32"]  # (i32, u32) -> fp32: no int64 on the hardware


# --- tiles as values ----------------------------------------------------------------------------
_BOOL_OPS = frozenset({"equal", "not_equal", "greater", "greater_equal", "less", "less_equal", "logical_and",
                       "logical_or", "logical_xor"})


def _new(shape: tuple, dtype: Any, memory: str = "sbuf") -> Tensor:
    return _engine.new_tile(tuple(shape), dtype, memory)


def _dtype(dtype: Any, default: DType) -> DType:
    return default if dtype is None else dtype_of(dtype, "dtype")


def _no_keywords(name: str, kwargs: dict) -> None:
    if kwargs:
        raise current().unsupported(f"{name}'s keyword(s) {', '.join(sorted(kwargs))}")


def load(src: Any, *, mask: Any = None, dtype: Any = None, **kwargs: Any) -> Tensor:
    """A new SBUF tile holding ``src`` (one DMA; ``dtype`` casts through fp32, as DMA casts do);
    under ``mask`` only the elements it holds are loaded (the rest of the tile stays unwritten)."""
    _no_keywords("nl.load", kwargs)
    src = _engine.as_tensor(src, "src")
    out = _new(_grid_shape(src), _dtype(dtype, src.dtype))
    _masked(mask, out, [src], lambda o, s: _isa().dma_copy(dst=o, src=s[0]))
    return out


def store(dst: Any, value: Any, *, mask: Any = None, **kwargs: Any) -> None:
    """HBM ``dst`` = tile ``value`` (one DMA); a PSUM tile is first copied to SBUF (nl.store
    docstring: "an extra copy will be performed")."""
    _no_keywords("nl.store", kwargs)
    dst = _engine.as_tensor(dst, "dst")
    if isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool):
        # A number stored is every element of dst set to it ("effectively a memset": the SDK's
        # nl.store example NKI_EXAMPLE_16): staged in an SBUF tile of dst's shape and dtype.
        staged = _new(_grid_shape(dst), dst.dtype)
        _isa().memset(staged, value)
        value = staged
    value = _engine.as_tensor(value, "value")
    grid = _grid_shape(dst)
    if value.base.memory.name == "psum":
        staged = _new(_grid_shape(value), value.dtype)
        _masked(mask if _grid_shape(value) == grid else None, staged, [value],
                lambda o, s: _isa().tensor_copy(dst=o, src=s[0]))
        value = staged
    if tuple(value.shape) != grid:
        if value.size != int(np.prod(grid)) or isinstance(value, _Clipped):
            raise KernelFault(current().find("shape_mismatch", "error", f"nl.store: a tile of shape {value.shape} "
                                             f"into {dst.name}{list(grid)}", "documented: nki.language.store"))
        value = value.reshape(grid)
    _masked(mask, dst, [value], lambda o, s: _isa().dma_copy(dst=o, src=s[0]))


_LANGUAGE_DOC = "documented: nki.language.{} docstring"


def load_transpose2d(src: Any, dtype: Any = None, *, mask: Any = None, **kwargs: Any) -> Tensor:
    """``nl.load_transpose2d``: HBM ``src`` [N, M] 2D-transposed into a new SBUF tile [M, N] (one
    dma_transpose; nki.language.load_transpose2d docstring: "Load a tensor from device memory (HBM)
    and 2D-transpose the data before storing into on-chip memory (SBUF)"). ``dtype`` (default:
    src's) casts as ``nl.load(dtype=)`` does, through fp32 in a DMA: dma_transpose moves bits
    unchanged, so the transposed tile is then copied by dma_copy into a tile of ``dtype``
    (numeq's reading: the docstring names the cast, not the engine making it). ``src`` not in HBM
    or not 2-D is a finding; M is the new tile's partition dimension (at most 128, SDK 2.26's note)."""
    _no_keywords("nl.load_transpose2d", kwargs)
    if mask is not None:
        raise current().unsupported("nl.load_transpose2d(mask=)")
    src = _tile(src, "src")
    ctx = current()
    source = _LANGUAGE_DOC.format("load_transpose2d")
    if src.ndim != 2:
        raise KernelFault(ctx.find("shape_mismatch", "error", f"nl.load_transpose2d: src {src.name} has shape "
                                   f"{src.shape}; it takes a 2-D tensor", source))
    if src.base.memory.on_chip:
        ctx.find("instruction_constraint", "error", f"nl.load_transpose2d: src {src.name} is in "
                 f"{src.base.memory.name}; it loads from device memory (HBM)", source)
    out = _new((src.shape[1], src.shape[0]), src.dtype)
    _isa().dma_transpose(dst=out, src=src)
    d = _dtype(dtype, src.dtype)
    if d == src.dtype:
        return out
    cast = _new(out.shape, d)
    _isa().dma_copy(dst=cast, src=out)
    return cast


def gather_flattened(data: Any, indices: Any, axis: Any = 0, dtype: Any = None, *, mask: Any = None,
                     **kwargs: Any) -> Tensor:
    """``nl.gather_flattened``: a new SBUF tile of ``indices``' shape, element j of partition p
    holding element indices[p, j] of data's partition p, data's free dims flattened (one
    nc_n_gather on the GpSimd engine: its checks, uint32 indices, out-of-range ones a finding;
    nki.language.gather_flattened docstring: "using the index value to select from the free
    dimension of data"; SDK 2.26's: the NumPy take_along_axis of the flattened tiles). ``dtype``
    (default: data's) is a tensor_copy of the gathered tile into that dtype. ``axis``: the
    docstring documents only the gather along the flattened free dimension, which ``axis=0`` (the
    default) is taken to name; numeq refuses any other."""
    _no_keywords("nl.gather_flattened", kwargs)
    if mask is not None:
        raise current().unsupported("nl.gather_flattened(mask=)")
    if axis != 0:
        raise current().unsupported(f"nl.gather_flattened(axis={axis!r}) (only the gather along the flattened free "
                                    "dimension, axis=0, is documented)")
    data, indices = _tile(data, "data"), _tile(indices, "indices")
    out = _new(tuple(indices.shape), data.dtype)
    _isa().nc_n_gather(dst=out, data=data, indices=indices)
    d = _dtype(dtype, data.dtype)
    if d == data.dtype:
        return out
    return _isa().tensor_copy(out, dtype=d)


class LoopReduction:
    """``nl.loop_reduce(x, op, loop_indices)``: SDK 2.26 nki.language docs: "The destination tile is
    also the rhs input to op", so ``t[...] = nl.loop_reduce(a, op=np.add, loop_indices=[k])`` is
    ``t[...] = nisa.tensor_tensor(data1=t[...], data2=a, op=np.add)``. The destination is where
    the result is assigned; the reduction is computed there, in the loop's order. (``loop_indices``
    tells the compiler which loops it may reorder: numeq runs them in order.)"""

    def __init__(self, x: Tensor, op: Any, dtype: Any, mask: Any) -> None:
        self.x, self.op, self.dtype, self.mask = x, op, dtype, mask

    def into(self, dst: Tensor) -> None:
        kwargs = {} if self.mask is None else {"mask": self.mask}
        result = _isa().tensor_tensor(data1=dst, data2=self.x, op=self.op, dtype=self.dtype or dst.dtype, **kwargs)
        assign(dst, (...,), result)  # a mask holding nowhere gave NOTHING: nothing is written

    def __repr__(self) -> str:
        return "<nl.loop_reduce result: assign it into its accumulator, t[...] = nl.loop_reduce(...)>"


def loop_reduce(x: Any, op: Any, loop_indices: Any, *, dtype: Any = None, mask: Any = None,
                **kwargs: Any) -> LoopReduction:
    """A reduction across loop iterations into the tile the result is assigned to (``LoopReduction``)."""
    _no_keywords("nl.loop_reduce", kwargs)
    if not isinstance(loop_indices, (list, tuple)):
        raise TypeError(f"loop_indices: nl.loop_reduce takes a list of loop indices, got {loop_indices!r}")
    return LoopReduction(_engine.as_tensor(x, "x"), op, dtype, mask)


def copy(src: Any, *, mask: Any = None, dtype: Any = None, **kwargs: Any) -> Tensor:
    """A new SBUF tile with ``src``'s values (tensor_copy: the same dtype copies the bits)."""
    _no_keywords("nl.copy", kwargs)
    src = _engine.as_tensor(src, "src")
    out = _new(_grid_shape(src), _dtype(dtype, src.dtype))
    _masked(mask, out, [src], lambda o, s: _isa().tensor_copy(dst=o, src=s[0]))
    return out


def transpose(x: Any, *, dtype: Any = None, mask: Any = None, **kwargs: Any) -> Tensor:
    """``x`` [P, F] as [F, P]: nc_transpose on the Tensor Engine (its result is in PSUM); with
    ``dtype`` copied into an SBUF tile of that dtype."""
    _no_keywords("nl.transpose", kwargs)
    if mask is not None:
        raise current().unsupported("nl.transpose(mask=)")
    x = _tile(x, "x")
    if x.ndim != 2:
        raise ValueError(f"x: nl.transpose takes a 2-D tile, got shape {x.shape}")
    t = _isa().nc_transpose(x)
    return t if dtype is None else _isa().tensor_copy(t, dtype=dtype_of(dtype))


def matmul(x: Any, y: Any, *, transpose_x: bool = False, mask: Any = None, **kwargs: Any) -> Tensor:
    """``x @ y`` (or ``x.T @ y`` with ``transpose_x``) as nc_matmul(x.T, y): a new PSUM fp32 tile.
    Without ``transpose_x`` x is transposed first, as the compiler does (nl.matmul docstring):
    nc_transpose on the Tensor Engine, then a copy into SBUF, where the PE reads its operands."""
    _no_keywords("nl.matmul", kwargs)
    if mask is not None:
        raise current().unsupported("nl.matmul(mask=) (operand masking)")
    x, y = _tile(x, "x"), _tile(y, "y")
    isa = _isa()
    if not transpose_x:
        if x.ndim != 2 or y.ndim < 2 or x.shape[1] != y.shape[0]:
            raise KernelFault(current().find("shape_mismatch", "error", f"nl.matmul: x {x.shape} @ y {y.shape}: x's "
                                             "free size must be y's partition size", "documented: nki.language.matmul"))
        x = isa.tensor_copy(isa.nc_transpose(x))
    return isa.nc_matmul(x, y)


def _tile(x: Any, parameter: str) -> Tensor:
    t = _engine.as_tensor(x, parameter)
    if isinstance(t, _Clipped):
        raise t.fault()
    return t


def _per_partition(t: Tensor, shape: tuple) -> bool:
    return t.ndim == len(shape) and t.shape[0] == shape[0] and _ball(n == 1 for n in t.shape[1:]) \
        and int(np.prod(shape[1:])) > 1


def _binary(op: Any, x: Any, y: Any, dtype: Any = None, mask: Any = None, out: Tensor | None = None) -> Tensor:
    """x <op> y for tiles (broadcasting as numpy's) and numbers: tensor_tensor, or tensor_scalar
    where one side is a number or a per-partition [P, 1] tile; in fp32, cast to ``dtype`` or the
    promoted dtype (comparisons: bool)."""
    name = op_name(op)
    tiles = [t for t in (x, y) if isinstance(t, Tensor)]
    if not tiles:
        raise TypeError(f"nl.{name}: needs at least one tile operand, got {type(x).__name__} and {type(y).__name__}")
    for v in (x, y):
        if not isinstance(v, Tensor):
            _scalar_dtype(v)  # a number (raises a TypeError naming the type otherwise)
    try:
        shape = tuple(np.broadcast_shapes(*(_grid_shape(t) for t in tiles)))
    except ValueError:
        raise ValueError(f"nl.{name}: tiles of shapes {[_grid_shape(t) for t in tiles]} do not broadcast") from None
    if out is None:
        out = _new(shape, _dtype(dtype, DTYPES["bool"] if name in _BOOL_OPS else promote(x, y)))
    isa = _isa()

    def run(o: Tensor, ops: list) -> None:
        a, b = ops
        if isinstance(a, Tensor) and isinstance(b, Tensor):
            if _per_partition(b, o.shape) and a.shape == o.shape:
                isa.tensor_scalar(dst=o, data=a, op0=name, operand0=b)
            elif _per_partition(a, o.shape) and b.shape == o.shape:
                isa.tensor_scalar(dst=o, data=b, op0=name, operand0=a, reverse0=True)
            else:
                isa.tensor_tensor(dst=o, data1=a, data2=b, op=name)
        elif isinstance(a, Tensor):
            isa.tensor_scalar(dst=o, data=a, op0=name, operand0=b)
        else:
            isa.tensor_scalar(dst=o, data=b, op0=name, operand0=a, reverse0=True)

    _masked(mask, out, [x, y], run)
    return out


def apply(op: Any, *args: Any, dtype: Any = None, mask: Any = None, **kwargs: Any) -> Tensor:
    """``nl.exp(t)``, ``nl.add(a, b)`` ...: a unary function is an activation on the Scalar
    engine, a binary operator a tensor_tensor / tensor_scalar; the result is a new SBUF tile of
    ``dtype`` (default: the input's, the promoted one, or bool for comparisons)."""
    name = op.op_name
    _no_keywords(f"nl.{name}", kwargs)
    if len(args) != op.arity:
        raise TypeError(f"nl.{name}: takes {op.arity} operand(s), got {len(args)}")
    if name in _SIMULATION_ONLY:
        _rules.check_simulation_only(current(), name)
    if op.arity == 2:
        return _binary(op, args[0], args[1], dtype, mask)
    if name == "copy":
        return copy(args[0], mask=mask, dtype=dtype)
    x = _engine.as_tensor(args[0], "x")
    out = _new(_grid_shape(x), _dtype(dtype, x.dtype))
    if name in _TILE_FUNCTIONS:
        _masked(mask, out, [x], lambda o, s: _tile_function(name, o, s[0]))
    elif name in _BITVEC_UNARY:  # an ALU operator, not an activation: the Vector engine's tensor_scalar
        _masked(mask, out, [x], lambda o, s: _isa().tensor_scalar(dst=o, data=s[0], op0=op, operand0=None))
    else:
        _masked(mask, out, [x], lambda o, s: _isa().activation(dst=o, op=op, data=s[0]))
    return out


# nki.language's tile functions that are not one activation: sin / arctan with range reduction
# ("applies additional instructions to perform range reduction before the activation, so it stays
# accurate over the full input domain": nl.sin docs), cos, tan, and the exact ceil / floor / trunc.
_TILE_FUNCTIONS = frozenset({"sin", "cos", "tan", "arctan", "ceil", "floor", "trunc"})
# The functions AWS's release notes say work in simulation only (machine.rules.check_simulation_only).
_SIMULATION_ONLY = frozenset({"mod", "fmod", "divide"})
_BITVEC_UNARY = frozenset({"invert", "logical_not"})


def _tile_function(name: str, dst: Tensor, x: Tensor) -> None:
    """dst = nl.<name>(x): the table's row of that language function (instructions.scalar_engine)."""
    _LANGUAGE_ROWS[name](dst=dst, x=x)


_LANGUAGE_ROWS = language_functions()


# --- reductions ----------------------------------------------------------------------------------
def _axes(axis: Any, ndim: int, fname: str) -> tuple[int, ...]:
    """``axis``: an int or a list of free dims. The docs list the last free dims ([1], [1, 2], ...
    nki.language); the older tutorials reduce others of an index-expression view (nki-samples'
    average_pool2d: ``nl.sum(in_tile[i0, p*i1+i2, p*i3+i4], axis=[2, 4])``), which ``_reduce``
    reads through a view with the reduced dims moved last (an access pattern may order a tile's
    free dims as it likes)."""
    raw = [axis] if _is_index(axis) else list(axis) if isinstance(axis, (tuple, list)) else None
    if not raw:
        raise TypeError(f"axis: nl.{fname} takes an int or a list of ints, got {axis!r}")
    axes = sorted(operator.index(a) % ndim if -ndim <= operator.index(a) < ndim else ndim for a in raw)
    if len(set(axes)) != len(axes) or axes[-1] >= ndim or 0 in axes:
        raise ValueError(f"axis: nl.{fname} reduces free dims of a {ndim}-D tile (1 to {ndim - 1}, each once; the "
                         f"partition dim 0 is not one), got {axis!r}")
    return tuple(axes)


def _reduce(op: str, x: Any, axis: Any, dtype: Any, mask: Any, keepdims: bool, fname: str) -> Tensor:
    """tensor_reduce over the free dims ``axis`` (the reduced dims read last; sums in the platform's order, fp32)."""
    x = _engine.as_tensor(x, "x")
    grid = _grid_shape(x)
    axes = _axes(axis, len(grid), fname)
    kept = [i for i in range(len(grid)) if keepdims or i not in axes]
    if len(kept) < 2 and x.base.memory.on_chip and axes:
        # An on-chip tile keeps a free axis: reducing [P, F] over F gives [P, 1] (AWS's 0.1.0
        # rmsnorm example multiplies a [128, F] tile by nl.sum(..., axis=[1]) of it).
        kept = sorted(kept + [axes[-1]])
    out = _new(tuple(1 if i in axes else grid[i] for i in kept), _dtype(dtype, x.dtype))
    if mask is None:
        xs, os_ = _tile(x, "x"), out
    else:
        m = _mask_array(mask, grid)
        box = _bbox(m)
        if box is None:
            return out
        if not m[box].all():
            raise current().unsupported(f"nl.{fname}(mask=) with a mask that is not a box of the tile")
        xs = _sub(x, box)
        cut = tuple(slice(None) if i in axes else box[i] for i in kept)
        os_ = Tensor._apply(out, lambda a: a[cut])
    trailing = tuple(range(len(grid) - len(axes), len(grid)))
    if axes != trailing:  # the reduced dims moved last, the others kept in order (see _axes)
        perm = [i for i in range(len(grid)) if i not in axes] + list(axes)
        xs = Tensor._apply(xs, lambda a: a.transpose(perm))
        if keepdims:
            os_ = Tensor._apply(os_, lambda a: a.transpose(perm))
        axes = trailing
    _isa().tensor_reduce(dst=os_, op=op, data=xs, axis=axes, keepdims=keepdims)
    return out


def _reduction(op: str, fname: str) -> Callable:
    def reduce(x: Any, axis: Any, *, dtype: Any = None, mask: Any = None, keepdims: bool = False,
               **kwargs: Any) -> Tensor:
        _no_keywords(f"nl.{fname}", kwargs)
        return _reduce(op, x, axis, dtype, mask, keepdims, fname)

    reduce.__name__ = reduce.__qualname__ = fname
    reduce.__doc__ = (f"``nl.{fname}(x, axis, dtype=None, mask=None, keepdims=False)``: tensor_reduce({op}) over the "
                      "free dims ``axis`` (read with them last); the reduced dims are removed unless ``keepdims`` (an "
                      "on-chip tile keeps one: [P, F] gives [P, 1]).")
    reduce.op_name = op  # type: ignore[attr-defined] - also an op identifier: nisa.tensor_reduce(op=nl.max)
    return reduce


def _divide(s: Tensor, n: int, dtype: DType) -> Tensor:
    out = _new(s.shape, dtype)
    _isa().tensor_scalar(dst=out, data=s, op0="divide", operand0=float(n))
    return out


def _mean(x: Any, axis: Any, *, dtype: Any = None, mask: Any = None, keepdims: bool = False,
          **kwargs: Any) -> Tensor:
    """``nl.mean``: the fp32 sum (tensor_reduce) divided by the count in fp32 (tensor_scalar); the
    docs do not give the lowering: this is the mean's definition, one rounding per step. Integer
    inputs give fp32 (nl.mean docstring)."""
    _no_keywords("nl.mean", kwargs)
    if mask is not None:
        raise current().unsupported("nl.mean(mask=)")
    x = _tile(x, "x")
    axes = _axes(axis, x.ndim, "mean")
    s = _reduce("add", x, axis, DTYPES["float32"], None, keepdims, "mean")
    return _divide(s, int(np.prod([x.shape[a] for a in axes])), _dtype(dtype, x.dtype if x.dtype.is_float
                                                                       else DTYPES["float32"]))


def _var(x: Any, axis: Any, *, dtype: Any = None, mask: Any = None, **kwargs: Any) -> Tensor:
    """``nl.var``: the population variance (numpy's, ddof=0) in two passes, each step an fp32
    instruction: mean, x - mean, its square, their mean (the docs do not give the lowering)."""
    _no_keywords("nl.var", kwargs)
    if mask is not None:
        raise current().unsupported("nl.var(mask=)")
    x = _tile(x, "x")
    axes = _axes(axis, x.ndim, "var")
    n = int(np.prod([x.shape[a] for a in axes]))
    f32 = DTYPES["float32"]
    mean_k = _divide(_reduce("add", x, axis, f32, None, True, "var"), n, f32)
    diff = _binary("subtract", x, mean_k, f32)
    sq = _binary("multiply", diff, diff, f32)
    return _divide(_reduce("add", sq, axis, f32, None, False, "var"), n,
                   _dtype(dtype, x.dtype if x.dtype.is_float else f32))


def _all(x: Any, axis: Any, *, dtype: Any = DTYPES["bool"], mask: Any = None, **kwargs: Any) -> Tensor:
    """``nl.all``: (x != 0), then its minimum over ``axis`` (bool by default)."""
    _no_keywords("nl.all", kwargs)
    nonzero = _binary("not_equal", x, 0, DTYPES["bool"], mask)
    return _reduce("minimum", nonzero, axis, dtype, mask, False, "all")


# --- other tile operations -------------------------------------------------------------------------
def where(*args: Any, dtype: Any = None, mask: Any = None, **kwargs: Any) -> Any:
    """``nl.where(condition, x, y)``: x where ``condition`` is nonzero, else y: y copied (or
    memset) into a new tile, then x copied over it where the condition holds (the Vector engine's
    predicated copy, whose semantics nisa.tensor_copy_predicated documents: dst = src where the
    predicate holds, else unchanged)."""
    names = ("condition", "x", "y")
    vals = dict(zip(names, args))
    vals.update({n: kwargs.pop(n) for n in names if n in kwargs})
    _no_keywords("nl.where", kwargs)
    if len(args) > 3 or len(vals) != 3:
        raise TypeError("nl.where: takes (condition, x, y)")
    condition, x, y = vals["condition"], vals["x"], vals["y"]
    condition = _engine.as_tensor(condition, "condition")
    tiles = [condition] + [t for t in (x, y) if isinstance(t, Tensor)]
    shape = tuple(np.broadcast_shapes(*(_grid_shape(t) for t in tiles)))
    out = _new(shape, _dtype(dtype, promote(x, y)))
    isa = _isa()
    if isinstance(y, Tensor):
        _masked(mask, out, [y], lambda o, s: isa.tensor_copy(dst=o, src=s[0]))
    else:
        _masked(mask, out, [], lambda o, s: isa.memset(o, y))
    _masked(mask, out, [condition, x], lambda o, s: _LANGUAGE_ROWS["where"](dst=o, condition=s[0], x=s[1]))
    return out


def static_cast(input_data: Any, dtype: Any) -> Any:
    """``input_data`` (a tile: a tensor_copy into a new tile; a number: that value) in ``dtype``,
    rounded to nearest even (integers: rounded and saturated)."""
    d = dtype_of(dtype)
    if isinstance(input_data, Tensor):
        return _isa().tensor_copy(_tile(input_data, "input_data"), dtype=d)
    return _numerics.cast_into(np.asarray([input_data], dtype=np.float64), d)[0]


def broadcast_to(x: Any = None, shape: Any = None, dtype: Any = None, *, src: Any = None, **kwargs: Any) -> Tensor:
    """``x`` repeated to ``shape`` by numpy's rules (along the partition dim too): ``x`` itself
    when the shape and dtype are its own, else a copy into a new SBUF tile of ``dtype`` (default:
    x's). nki.language.broadcast_to(x, shape, dtype=None); the older interface's keyword ``src=``
    is taken for ``x``."""
    _no_keywords("nl.broadcast_to", kwargs)
    if x is None:
        x = src
    elif src is not None:
        raise TypeError("nl.broadcast_to: give the tile once (x, or the older keyword src=)")
    if x is None or shape is None:
        raise TypeError("nl.broadcast_to(x, shape, dtype=None): x and shape are required")
    src = _tile(x, "x")
    shape = tuple(operator.index(n) for n in shape)
    out_dtype = src.dtype if dtype is None else dtype_of(dtype)
    if tuple(src.shape) == shape and out_dtype == src.dtype:
        return src
    try:
        ok = tuple(np.broadcast_shapes(src.shape, shape)) == shape
    except ValueError:
        ok = False
    if not ok:
        raise ValueError(f"shape: a tile of shape {src.shape} does not broadcast to {shape}")
    out = _new(shape, out_dtype)
    _isa().tensor_copy(dst=out, src=src)
    return out


def expand_dims(data: Any, axis: Any) -> Tensor:
    """A view of ``data`` with new size-1 axes at ``axis`` (after its last axis only, as the
    nki.language docs allow)."""
    data = _tile(data, "data")
    raw = [operator.index(axis)] if _is_index(axis) else [operator.index(a) for a in axis]
    ndim = data.ndim + len(raw)
    axes = tuple(sorted(a % ndim if -ndim <= a < ndim else ndim for a in raw))
    if any(a < data.ndim or a >= ndim for a in axes) or len(set(axes)) != len(axes):
        raise ValueError(f"axis: nl.expand_dims adds axes after the last of a {data.ndim}-D tile "
                         f"({list(range(data.ndim, ndim))}), got {axis!r}")
    return Tensor._apply(data, lambda a: np.expand_dims(a, axes))


def device_print(prefix: str, x: Any, *, mask: Any = None, **kwargs: Any) -> None:
    """Print ``prefix`` and the values of ``x`` (elements no instruction wrote print as nan)."""
    _no_keywords("nl.device_print", kwargs)
    if mask is not None:
        raise current().unsupported("nl.device_print(mask=)")
    if isinstance(x, Tensor):
        v = _numerics.fp32_values(_engine.settled(current(), x).data, x.dtype)
        v = np.where(x.mask == x.base.full, v, np.float32(np.nan))
        print(prefix, v)
    else:
        print(prefix, x)


def empty_like(a: Any, dtype: Any = None, *, buffer: Any = None, name: str = "", **kwargs: Any) -> Tensor:
    """A new tensor of ``a``'s shape and dtype (or ``dtype``) in ``buffer`` (default: SBUF, as the
    0.1.0 docs say); its contents start undefined."""
    a = _engine.as_tensor(a, "a")
    return language.ndarray(a.shape, dtype or a.dtype, buffer=buffer, name=name, **kwargs)


def finfo(dtype: Any) -> Any:
    """Machine limits of a float dtype (ml_dtypes' finfo; tfloat32 has no numpy type)."""
    d = dtype_of(dtype)
    if d.kind != "float" or d.format == "tf32":
        raise ValueError(f"dtype: finfo takes float8 / bfloat16 / float16 / float32, got {d}")
    return ml_dtypes.finfo(d.storage)


def _bits(value: int, storage: Any) -> float:
    return float(np.array(value, dtype=f"u{np.dtype(storage).itemsize}").view(storage))


class _BFP16:
    """``nl.bfp16``: bfloat16 constants (nki.language 0.1.0)."""

    @property
    def min(self) -> float:
        """Bit pattern 0xff80 (nl.bfp16.min docstring), which bfloat16 reads as -inf."""
        return _bits(0xFF80, ml_dtypes.bfloat16)


bfp16 = _BFP16()


class _FP32(DType):
    """``nl.fp32``: float32 (numeq's alias) that also holds 0.1.0's constants: ``nl.fp32.min``."""

    def __eq__(self, other: object) -> bool:
        return DTYPES["float32"] == other

    __hash__ = DType.__hash__

    @property
    def min(self) -> float:
        """Bit pattern 0xff7fffff (nl.fp32.min docstring): the most negative finite float32."""
        return _bits(0xFF7FFFFF, np.float32)


def _install_language() -> None:
    """nl.fp32 holds nl.fp32.min (the language module's own name, extended here)."""
    f32 = DTYPES["float32"]
    language.fp32 = _FP32(f32.name, f32.format, f32.storage, f32.kind)


sum = _reduction("add", "sum")  # noqa: A001 - NKI's names
max = _reduction("maximum", "max")  # noqa: A001
min = _reduction("minimum", "min")  # noqa: A001
prod = _reduction("multiply", "prod")
mean, var, all = _mean, _var, _all  # noqa: A001
