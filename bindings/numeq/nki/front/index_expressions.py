"""Where a tile of the older NKI interface (NKI 0.1.0) lies: index expressions of ``nl.arange`` /
``nl.mgrid`` (affine in the grid position: ``k*128 + i_p``, ``2*i_f + 1``) and the strided views
they select, ``nl.par_dim`` block tensors, ``mask=`` predicates and the instructions they restrict,
and the trace's bookkeeping when a result is written where the kernel assigns it (SDK 2.26
nki.language docstrings; nki.api.shared.rst: NKI API Masking; programming_model.rst: tiles).
"""

from __future__ import annotations

import builtins
import math
import operator
from typing import Any, Callable, Sequence

import numpy as np

from ..instructions import access as _engine
from ..machine import indirect as _indirect
from ..machine import placement as _placement
from ..machine import precision as _precision
from ..machine import rules as _rules
from ..machine.context import KernelFault, _operand as _trace_operand, active, assigned_name, current, where as _line
from ..machine.dtypes import dtype_of
from ..machine.views import Gather, out_of_bounds
from ..machine.memory import WRITER_OTHER, Allocation, Tensor
from .. import language

__all__ = ["IndexExpr", "Predicate", "Grid", "arange", "mgrid", "par_dim", "index"]

_bmin, _bmax, _ball = builtins.min, builtins.max, builtins.all
_INDEX_SOURCE = "documented: NKI tensors are indexed within their shape (nki.language docs)"

# --- index expressions -------------------------------------------------------------------------
class IndexExpr:
    """An affine index over a grid (``nl.arange`` / ``nl.mgrid`` and arithmetic on them): at grid
    position k the value is ``const + sum(coefs[a] * k[a])``; ``shape`` is the grid (1 on axes the
    expression does not vary along). Broadcasts as numpy's index arrays do (right-aligned)."""

    _nki_index_expr = True
    __slots__ = ("const", "coefs", "shape")

    def __init__(self, const: int, coefs: Sequence[int], shape: Sequence[int]) -> None:
        self.shape = tuple(int(n) for n in shape)
        self.coefs = tuple(int(c) if n > 1 else 0 for c, n in zip(coefs, self.shape))
        self.const = int(const)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def aligned(self, ndim: int) -> "IndexExpr":
        pad = ndim - self.ndim
        return IndexExpr(self.const, (0,) * pad + self.coefs, (1,) * pad + self.shape)

    def values(self) -> np.ndarray:
        """The index at every grid position (int64, of ``shape``)."""
        v = np.full(self.shape, self.const, dtype=np.int64)
        for a, (c, n) in enumerate(zip(self.coefs, self.shape)):
            if c:
                v = v + c * np.arange(n, dtype=np.int64).reshape([n if i == a else 1 for i in range(self.ndim)])
        return v

    def _combine(self, other: Any, sign: int) -> "IndexExpr":
        if isinstance(other, IndexExpr):
            try:
                shape = np.broadcast_shapes(self.shape, other.shape)
            except ValueError:
                raise ValueError(f"index expressions of shapes {self.shape} and {other.shape} do not broadcast") from None
            a, b = self.aligned(len(shape)), other.aligned(len(shape))
            return IndexExpr(a.const + sign * b.const, [x + sign * y for x, y in zip(a.coefs, b.coefs)], shape)
        return IndexExpr(self.const + sign * operator.index(other), self.coefs, self.shape)

    def __add__(self, other: Any) -> "IndexExpr":
        return self._combine(other, 1) if _is_index(other) else NotImplemented

    __radd__ = __add__

    def __sub__(self, other: Any) -> "IndexExpr":
        return self._combine(other, -1) if _is_index(other) else NotImplemented

    def __rsub__(self, other: Any) -> "IndexExpr":
        return (-self)._combine(other, 1) if _is_index(other) else NotImplemented

    def __neg__(self) -> "IndexExpr":
        return IndexExpr(-self.const, [-c for c in self.coefs], self.shape)

    def __mul__(self, other: Any) -> "IndexExpr":
        if isinstance(other, IndexExpr):
            raise TypeError("the product of two index expressions is not affine (NKI index expressions are affine "
                            "in nl.arange)")
        if not _is_index(other):
            return NotImplemented
        k = operator.index(other)
        return IndexExpr(self.const * k, [c * k for c in self.coefs], self.shape)

    __rmul__ = __mul__

    def __getitem__(self, key: Any) -> "IndexExpr":
        """``[:, None]`` / ``[None, :]``: place the expression's axes in a larger grid."""
        key = key if isinstance(key, tuple) else (key,)
        coefs, shape, axis = [], [], 0
        for k in key:
            if k is None:
                coefs.append(0)
                shape.append(1)
            elif isinstance(k, slice) and k == slice(None):
                if axis >= self.ndim:
                    raise IndexError(f"index expression of {self.ndim} axes indexed with {key}")
                coefs.append(self.coefs[axis])
                shape.append(self.shape[axis])
                axis += 1
            else:
                raise IndexError(f"index expressions take ':' and None (e.g. nl.arange(n)[:, None]), not {k!r}")
        if axis != self.ndim:
            raise IndexError(f"index expression of {self.ndim} axes indexed with {key}")
        return IndexExpr(self.const, coefs, shape)

    def _compare(self, other: Any, f: Callable) -> "Predicate":
        if isinstance(other, IndexExpr):
            return Predicate(f(self.values(), other.values()))
        if _is_index(other):
            return Predicate(f(self.values(), operator.index(other)))
        return NotImplemented

    def __lt__(self, o: Any) -> "Predicate":
        return self._compare(o, np.less)

    def __le__(self, o: Any) -> "Predicate":
        return self._compare(o, np.less_equal)

    def __gt__(self, o: Any) -> "Predicate":
        return self._compare(o, np.greater)

    def __ge__(self, o: Any) -> "Predicate":
        return self._compare(o, np.greater_equal)

    def __eq__(self, o: Any) -> Any:  # type: ignore[override]
        return self._compare(o, np.equal)

    def __ne__(self, o: Any) -> Any:  # type: ignore[override]
        return self._compare(o, np.not_equal)

    __hash__ = object.__hash__

    def __repr__(self) -> str:
        terms = [f"{c}*k{a}" for a, c in enumerate(self.coefs) if c]
        return f"IndexExpr({' + '.join(terms + [str(self.const)])}, grid {self.shape})"


def _is_index(x: Any) -> bool:
    if isinstance(x, IndexExpr):
        return True
    if isinstance(x, (bool, np.bool_)):
        return False
    try:
        operator.index(x)
        return True
    except TypeError:
        return False


class Predicate:
    """A mask: a comparison of index expressions (``i_p < 64``), combined with ``&`` / ``|`` /
    ``~``; ``array`` holds it at every grid position (nki.api.shared.rst, NKI API Masking)."""

    _nki_index_expr = True
    __slots__ = ("array",)

    def __init__(self, array: np.ndarray) -> None:
        self.array = np.asarray(array, dtype=bool)

    def _join(self, other: Any, f: Callable) -> "Predicate":
        if isinstance(other, (bool, np.bool_)):  # a constant (a Python comparison of tile indices)
            return Predicate(f(self.array, bool(other)))
        if not isinstance(other, Predicate):
            return NotImplemented
        return Predicate(f(self.array, other.array))

    def __and__(self, other: Any) -> "Predicate":
        return self._join(other, np.logical_and)

    def __or__(self, other: Any) -> "Predicate":
        return self._join(other, np.logical_or)

    __rand__, __ror__ = __and__, __or__

    def __invert__(self) -> "Predicate":
        return Predicate(~self.array)

    def __bool__(self) -> bool:
        # Python's ``and`` / ``or`` / ``if`` ask a mask for one truth value. Like any Python object it
        # is true, so ``(a < n) and (b < m)`` is (b < m) alone: what an NKI kernel written so computes
        # (AWS's own nc_match_replace8 example is). Said as a warning: & and | combine masks.
        if not active():
            return True
        current().find("mask_python_logic", "warning", "a mask used in Python's and / or / if is true: "
                       "'x and y' keeps y alone; combine masks with & and |",
                       "documented: nki.api.shared.rst (masks are predicates of index expressions, combined "
                       "with & and |)")
        return True

    def __repr__(self) -> str:
        return f"Predicate({int(self.array.sum())} of {self.array.size} positions, grid {self.array.shape})"


class Grid(tuple):
    """``nl.mgrid[0:128, 0:512]``: one dense IndexExpr per axis; unpacks, indexes a tensor as a
    whole, and names its axes ``.p`` (partition), ``.x``, ``.y``, ``.z``."""

    _nki_index_expr = True

    def _axis(self, i: int) -> IndexExpr:
        if i >= len(self):
            raise AttributeError(f"a grid of {len(self)} axes has no axis {i}")
        return self[i]

    p = property(lambda self: self._axis(0))
    x = property(lambda self: self._axis(1))
    y = property(lambda self: self._axis(2))
    z = property(lambda self: self._axis(3))


def arange(*args: Any) -> IndexExpr:
    """``nl.arange(stop)`` / ``nl.arange(start, stop)``: the indices of [start, stop) as a 1-D
    expression (``[:, None]`` puts it on the partition axis, ``[None, :]`` on the free axis)."""
    if len(args) not in (1, 2):
        raise TypeError(f"arange: takes (stop) or (start, stop), got {len(args)} arguments")
    start, stop = (0, args[0]) if len(args) == 1 else args
    start, stop = operator.index(start), operator.index(stop)
    if stop < start:
        raise ValueError(f"arange: stop {stop} is below start {start}")
    return IndexExpr(start, (1,), (stop - start,))


class _MGrid:
    """``nl.mgrid[start:stop[:step], ...]`` as numpy's mgrid (integer steps only)."""

    def __getitem__(self, key: Any) -> Any:
        key = key if isinstance(key, tuple) else (key,)
        shape, starts, steps = [], [], []
        for k in key:
            if not isinstance(k, slice) or k.stop is None:
                raise TypeError(f"mgrid: each axis is start:stop[:step], got {k!r}")
            start, stop, step = operator.index(k.start or 0), operator.index(k.stop), operator.index(k.step or 1)
            if step <= 0:
                raise ValueError(f"mgrid: step must be positive, got {step}")
            shape.append(len(range(start, stop, step)))
            starts.append(start)
            steps.append(step)
        axes = [IndexExpr(s, [st if i == a else 0 for i in range(len(shape))], shape)
                for a, (s, st) in enumerate(zip(starts, steps))]
        return axes[0] if len(axes) == 1 else Grid(axes)


mgrid = _MGrid()


class par_dim:  # noqa: N801 - NKI's spelling
    """``nl.par_dim(n)`` in a shape: the partition dimension, where it is not the first
    (``nl.ndarray((4, nl.par_dim(128), 512))``: 4 blocks of [128, 512] tiles)."""

    __slots__ = ("size",)
    _nki_par_dim = True  # language.ndarray recognises it by this mark

    def __init__(self, size: int) -> None:
        self.size = operator.index(size)

    def __index__(self) -> int:
        return self.size

    def __repr__(self) -> str:
        return f"par_dim({self.size})"


class _BlockTensor(Tensor):
    """An on-chip tensor with block dims before its partition dim (stored partition-first);
    integers on the block dims give a tile."""

    __slots__ = ("blocks",)

    def __getitem__(self, key: Any) -> Tensor:
        key = key if isinstance(key, tuple) else (key,)
        lead: list[int] = []
        while len(lead) < _bmin(self.blocks, len(key)) and _is_index(key[len(lead)]) \
                and not isinstance(key[len(lead)], IndexExpr):
            i = operator.index(key[len(lead)])
            if not 0 <= i < self.shape[len(lead)]:
                raise out_of_bounds(self, f"block index {i} of axis {len(lead)} (size {self.shape[len(lead)]}) is out "
                                          "of bounds")
            lead.append(i)
        if not lead:
            return Tensor.__getitem__(self, key)
        at = tuple(lead)
        tile = Tensor(self.base, self.data[at], self.mask[at], None if self.writer is None else self.writer[at],
                      self.dtype)
        if len(lead) < self.blocks:
            tile = _block(tile, self.blocks - len(lead))
        rest = key[len(lead):]
        return tile[rest] if rest else tile


def _block(t: Tensor, blocks: int) -> _BlockTensor:
    b = _BlockTensor(t.base, t.data, t.mask, t.writer, t.dtype)
    b.blocks = blocks
    return b


def par_dim_ndarray(dims: tuple, marked: list[int], dtype: Any, memory: Any, placement: Any, name: str) -> Tensor:
    """``nl.ndarray`` of a shape with ``nl.par_dim`` after block dims (SBUF / PSUM): the partition
    dim is stored first, so each block is a tile of whole partitions (the capacity and partition
    checks then see the real layout); the view puts the dims back in the kernel's order.
    ``placement``: a direct allocation of the blocks (machine.placement), or None."""
    if len(marked) > 1:
        raise ValueError(f"shape: one nl.par_dim per shape, got {dims}")
    j, sizes = marked[0], language._shape(dims)
    ctx = current()
    line = _line()
    b = ctx.allocate(Allocation((sizes[j],) + sizes[:j] + sizes[j + 1:], _precision.allocated(ctx, line, dtype_of(dtype)),
                                memory, name or assigned_name(), line,
                                tiles=math.prod(sizes[:j]) if placement else 1))
    if placement is not None:  # nki.compiler's direct allocation
        _placement.place(ctx, b, placement, j)
    _rules.check_on_chip(ctx, b.whole())
    perm = list(range(1, j + 1)) + [0] + list(range(j + 1, len(sizes)))
    return _block(b.whole()._apply(lambda a: a.transpose(perm)), j)


class _View(Gather):
    """The view an index expression key selects (``views.normalise`` hands it the tensor)."""

    def __init__(self, f: Callable, grid: tuple, valid: tuple | None, message: str, line: str) -> None:
        self.f, self.grid, self.valid, self.message, self.line = f, grid, valid, message, line

    def view(self, t: Tensor) -> Tensor:
        v = t._apply(self.f)
        if self.valid is None:
            return v
        c = _Clipped(v.base, v.data, v.mask, v.writer, v.dtype)
        c.grid, c.valid, c.message, c.line = self.grid, self.valid, self.message, self.line
        return c


class _Clipped(Tensor):
    """A tile index reaching outside its tensor: ``data`` is the part inside (``valid``, a box of
    the tile's grid); legal only under a mask that keeps to that part (nki.api.shared.rst: masks
    for tiles that do not divide a tensor). Anything else raises the index_bounds finding at the
    line of the index."""

    __slots__ = ("grid", "valid", "message", "line")

    def fault(self) -> KernelFault:
        return KernelFault(current().find("index_bounds", "error", f"{self.name}: {self.message}", _INDEX_SOURCE,
                                          at=self.line))


def index(key: tuple, shape: tuple, t: Tensor) -> Gather:
    """The view of ``t`` that an index of ``nl.arange`` / ``nl.mgrid`` expressions and integers
    selects: grid axis a of the result runs along the tensor dim whose expression varies with it
    (a positive step: a numpy slice, so writes land in ``t``); dims the key leaves out follow."""
    ctx = current()
    items: list = []
    for k in key:
        items.extend(k) if isinstance(k, Grid) else items.append(k)
    if any(isinstance(k, Predicate) for k in items):
        raise ctx.unsupported("operand masking (a tile indexed by a predicate, t[i_f <= 64])")
    if len(items) > len(shape):
        raise out_of_bounds(t, f"{len(items)} indices for a tensor of shape {shape}")
    if any(isinstance(k, Tensor) for k in items):
        return _IndirectKey(items)
    for d, k in enumerate(items):
        if not _is_index(k):
            raise TypeError(f"{t.name}: index {k!r} on axis {d}: nl.arange / nl.mgrid expressions index together "
                            "with integers only; slices and nl.ds do not mix with them (nki.language 0.1.0: basic "
                            "and advanced indexing cannot be mixed)")
    exprs = [k for k in items if isinstance(k, IndexExpr)]
    try:
        grid = tuple(np.broadcast_shapes(*(e.shape for e in exprs)))
    except ValueError:
        raise ValueError(f"{t.name}: index expressions of shapes {[e.shape for e in exprs]} do not broadcast") from None
    nd = len(grid)
    picks: list = []
    axis_of: list[int] = []
    valid = [slice(0, n) for n in grid]
    clipped: list[str] = []
    for d, k in enumerate(items):
        size = shape[d]
        e = k.aligned(nd) if isinstance(k, IndexExpr) else IndexExpr(operator.index(k), (0,) * nd, (1,) * nd)
        varying = [a for a in range(nd) if e.coefs[a]]
        if not varying:
            if not 0 <= e.const < size:
                raise out_of_bounds(t, f"index {e.const} of axis {d} (size {size}) is out of bounds")
            picks.append(e.const)
            continue
        a, step = varying[0], e.coefs[varying[0]]
        if len(varying) > 1 or step < 0 or a in axis_of:
            return _affine_view(items, grid, shape, t)
        n = grid[a]
        last = e.const + step * (n - 1)
        if e.const < 0 or last >= size:
            # the positions inside: const + step*k in [0, size)
            lo = _bmin(n, 0 if e.const >= 0 else (-e.const + step - 1) // step)
            hi = _bmin(n - 1, (size - 1 - e.const) // step) if e.const < size else -1
            clipped.append(f"index {e.const}..{last} (step {step}) of axis {d} (size {size}) is out of bounds")
            valid[a] = slice(lo, _bmax(lo, hi + 1))
        picks.append((a, e.const, step))
        axis_of.append(a)
    missing = [a for a in range(nd) if a not in axis_of]
    if any(grid[a] > 1 for a in missing):
        return _affine_view(items, grid, shape, t)
    order = sorted(range(len(axis_of)), key=lambda i: axis_of[i])
    rest = len(shape) - len(items)
    box = tuple(valid)

    def f(arr: np.ndarray) -> np.ndarray:
        idx = []
        for p in picks:
            if isinstance(p, int):
                idx.append(p)
            else:
                a, c, s = p
                k0, k1 = box[a].start, box[a].stop
                idx.append(slice(c + s * k0, c + s * (k1 - 1) + 1, s) if k1 > k0 else slice(0, 0))
        v = arr[tuple(idx)].transpose(order + [len(order) + i for i in range(rest)])
        return np.expand_dims(v, tuple(missing)) if missing else v

    tail = tuple(shape[len(items):])
    message = "; ".join(clipped)
    return _View(f, grid + tail, (box + tuple(slice(0, n) for n in tail)) if clipped else None, message, _line())


class _IndirectKey(Gather):
    """``t[idx_tile, i_f]``: an SBUF tile of indices where an index expression would stand (the
    older interface's indirect load and store; machine.indirect): the tile's values index that
    axis, one per partition of the grid, the index expressions the others."""

    def __init__(self, items: list) -> None:
        self.items = items

    def view(self, t: Tensor) -> Tensor:
        exprs = [k for k in self.items if isinstance(k, IndexExpr)]
        tail = t.shape[len(self.items):]  # axes the key leaves out follow whole, as new grid axes
        nd = _bmax([e.ndim for e in exprs] + [2]) + len(tail)
        values: list = []
        for k in self.items:
            if isinstance(k, Tensor):
                values.append(np.zeros((k.shape[0],) + (1,) * (nd - 1), np.int64))  # its extent; values later
            elif isinstance(k, IndexExpr):
                values.append(k.aligned(nd - len(tail)).values().reshape(k.aligned(nd - len(tail)).shape
                                                                         + (1,) * len(tail)))
            elif _is_index(k):
                values.append(np.full((1,) * nd, operator.index(k), np.int64))  # noqa: E501
            else:
                raise TypeError(f"{t.name}: index {k!r}: with an index tile, the other axes take nl.arange / "
                                "nl.mgrid expressions or integers")
        for j, n in enumerate(tail):
            axis = nd - len(tail) + j
            values.append(np.arange(n, dtype=np.int64).reshape([n if a == axis else 1 for a in range(nd)]))
        return _indirect.indirect_index(t, self.items + [None] * len(tail), values)


def _affine_view(items: list, grid: tuple, shape: tuple, t: Tensor) -> "_View":
    """Any affine key as one strided view: grid position k is the element at sum over tensor axes d
    of (const_d + sum_a coef_da k_a) * stride_d, so grid axis a steps sum_d coef_da stride_d bytes
    (an axis split in two, ``t[i_p, i_f1 * 4 + i_f2]``; a transposing or reversing or repeating
    index; writes land in ``t``). Every position must lie inside the tensor."""
    nd = len(grid)
    exprs = [k.aligned(nd) if isinstance(k, IndexExpr) else IndexExpr(operator.index(k), (0,) * nd, (1,) * nd)
             for k in items]
    for d, e in enumerate(exprs):
        low = e.const + sum(min(0, c * (n - 1)) for c, n in zip(e.coefs, grid))
        high = e.const + sum(max(0, c * (n - 1)) for c, n in zip(e.coefs, grid))
        if low < 0 or high >= shape[d]:
            raise current().unsupported(f"the index expression {e!r} on axis {d} (size {shape[d]}) of {t.name}, "
                                        f"reaching {low}..{high}: an index combining grid axes must stay inside "
                                        "the tensor")
    tail = tuple(shape[len(items):])

    def f(arr: np.ndarray) -> np.ndarray:
        start = arr[tuple(slice(e.const, e.const + 1) for e in exprs)]  # a view at the first element
        steps = tuple(sum(e.coefs[a] * arr.strides[d] for d, e in enumerate(exprs)) for a in range(nd))
        return np.lib.stride_tricks.as_strided(start, shape=grid + tail, strides=steps + arr.strides[len(items):])

    return _View(f, grid + tail, None, "", _line())


# --- masks -------------------------------------------------------------------------------------
def _mask_array(mask: Any, shape: tuple) -> np.ndarray:
    if isinstance(mask, (bool, np.bool_)):
        return np.full(shape, bool(mask))
    if not isinstance(mask, Predicate):
        raise TypeError(f"mask: expected a predicate of index expressions such as (i_p < 64) & (i_f < 256), got "
                        f"{type(mask).__name__}")
    try:
        return np.broadcast_to(mask.array, shape)
    except ValueError:
        raise ValueError(f"mask: a predicate over a grid of shape {mask.array.shape} does not fit a tile of shape "
                         f"{shape}") from None


def _bbox(m: np.ndarray) -> tuple | None:
    """The smallest box holding every True of ``m`` (None: none)."""
    if not m.any():
        return None
    box = []
    for a in range(m.ndim):
        hit = np.flatnonzero(m.any(axis=tuple(i for i in range(m.ndim) if i != a)))
        box.append(slice(int(hit[0]), int(hit[-1]) + 1))
    return tuple(box)


def _sub(x: Any, box: tuple) -> Any:
    """Operand ``x`` (aligned right to the tile's grid, broadcasting where it has size 1) cut to
    ``box`` of the grid; a clipped index must hold the box."""
    if not isinstance(x, Tensor):
        return x
    tail = box[len(box) - x.ndim:] if x.ndim else ()
    if isinstance(x, _Clipped):
        if any(b.start < v.start or b.stop > v.stop for b, v in zip(tail, x.valid)):
            raise x.fault()
        tail = tuple(slice(b.start - v.start, b.stop - v.start) for b, v in zip(tail, x.valid))
    cut = tuple(slice(None) if n == 1 else b for b, n in zip(tail, x.shape))
    return Tensor._apply(x, lambda a: a[cut])


def _grid_shape(x: Tensor) -> tuple:
    return x.grid if isinstance(x, _Clipped) else tuple(x.shape)


def _masked(mask: Any, dst: Tensor, operands: list, run: Callable) -> None:
    """Run ``run(dst, operands)`` on the elements ``mask`` holds: a box mask cuts every operand
    to the box; another mask runs the box around it and writes dst only where the mask holds."""
    shape = _grid_shape(dst)
    if mask is None:
        for x in [dst] + operands:
            if isinstance(x, _Clipped):
                raise x.fault()
        run(dst, operands)
        return
    m = _mask_array(mask, shape)
    box = _bbox(m)
    if box is None:
        return  # the mask holds nowhere: no instruction
    d, ops = _sub(dst, box), [_sub(x, box) for x in operands]
    keep = m[box]
    if keep.all():
        run(d, ops)
        return
    ctx = current()
    scratch = Allocation(d.shape, d.dtype, d.base.memory, d.name, _line()).whole()
    saved = []
    for o in ops:  # masked-out operand elements never reach dst: the instruction may read them
        if isinstance(o, Tensor) and o.shape == keep.shape:
            saved.append((o, o.mask.copy()))
            np.copyto(o.mask, o.base.full, where=~keep)
    try:
        run(scratch, ops)
    finally:
        for o, mk in saved:
            o.mask[...] = mk
    _engine.settled(ctx, scratch)
    _engine.before_write(ctx, d)
    d.data[keep] = scratch.data[keep]
    d.mask[keep] = scratch.mask[keep]
    d.base.complete = False  # masked-out elements of d stay as they were
    if d.writer is not None:
        d.writer[keep] = scratch.writer[keep] if scratch.writer is not None else WRITER_OTHER
        d.base.writer_all = None
    _retarget(ctx, scratch, d)


# --- the trace: results written where the kernel puts them -----------------------------------------
def _fresh(ctx: Any, t: Any, name: str | None = None) -> bool:
    """``t`` is the whole result tile the last instruction allocated and wrote, used nowhere else."""
    if not isinstance(t, Tensor) or not ctx.trace or not ctx.lives or ctx.lives[-1] is not t.base.life:
        return False
    ins = ctx.trace[-1]
    return (name is None or ins.name == name) and t.base.life.first_use == ctx.step and t.shape == t.base.shape \
        and t.element_offset() == 0 and any(o[0] == t.base.name for o in ins.dst)


def _retarget(ctx: Any, temp: Tensor, dst: Tensor) -> None:
    """The last instruction wrote ``dst`` (the compiler places a result where it is assigned): the
    trace names dst, and the temporary tile never takes memory unless the kernel uses it again."""
    ins = ctx.trace[-1]
    ins.dst = [_trace_operand(dst) if o[0] == temp.base.name else o for o in ins.dst]
    # ... and the dependency graph reads dst's bytes as written (Instruction.writes).
    temp_id = temp.base.id
    ins.writes = tuple(dst.placement() if (p if type(p) is int else p[0]) == temp_id else p for p in ins.writes)
    if "psum" in ins.detail:
        ins.detail["psum"] = (dst.base.id, dst.element_offset())
    temp.base.life.first_use = temp.base.life.last_use = None
    if dst.base.life.first_use is None:
        dst.base.life.first_use = ctx.step
    dst.base.life.last_use = ctx.step
    dst.base.dirty = True


def _same_view(a: Tensor, b: Tensor) -> bool:
    return a.base is b.base and a.data.__array_interface__["data"][0] == b.data.__array_interface__["data"][0] \
        and a.size == b.size and a.data.strides[-1:] == b.data.strides[-1:]
