"""NkiTensor's view methods (nki.language API reference, class NkiTensor; the NKI language guide's
"Tensor Values"): ``permute``, ``broadcast``, ``expand_dim``, ``squeeze_dim``, ``reshape_dim``,
``flatten_dims``, ``reshape``, ``rearrange``, ``slice``, ``select`` (static, and dynamic by an index
tile or register), ``vector_select`` and ``indirect``, each a new view of the same storage (a numpy
view of the buffer's data, mask and PSUM writer codes, so writes through it land in the buffer).

Each method checks the constraints its docstring lists, and reports a broken one naming the
parameter: a partition-dim rule of SBUF / PSUM (dim 0 is the partition axis: "Most view operations
cannot modify this dimension") is a ``partition_dim`` finding that stops the run (``KernelFault``),
an index outside the tensor an ``index_bounds`` finding, as indexing reports it; an argument that
names no valid view (not a permutation, sizes whose product differs, a layout that is not
contiguous where the method needs it) is a ``ValueError``, a wrong type a ``TypeError``.

An indirect view (``is_indirect()``: made by a dynamic ``select``, ``vector_select`` or ``.ap()``
with ``scalar_offset`` / ``vector_offset``) carries ``indirection`` = (the view dims whose address
an index chose, the index): those dims may not be sliced, selected, permuted away from dim 0 or
reshaped, and a view that is indirect may not be made indirect again (docs: "Indirect views cannot
be re-indirected, and the dimension that participates in the indirection cannot be further sliced
or selected").
"""

from __future__ import annotations

import math
import operator
from typing import Any, Sequence

import numpy as np

from . import context as _context

__all__ = ["broadcast", "expand_dim", "flatten_dims", "indirect", "permute", "rearrange", "reshape",
           "reshape_dim", "select", "slice_dim", "squeeze_dim", "vector_select"]


def _source(method: str) -> str:
    return f"documented: nki.language NkiTensor.{method} docstring (Constraints)"


def _what(t: Any) -> str:
    return f"{t.name} of shape {t.shape} ({t.base.memory})"


def _fault(rule: str, method: str, message: str) -> Exception:
    """A finding that stops the run (inside one); outside a run, the matching Python error."""
    if _context.active():
        return _context.current().fail(rule, message, _source(method))
    return (IndexError if rule == "index_bounds" else ValueError)(message)


def _partition_rule(t: Any, method: str, message: str) -> None:
    """An SBUF / PSUM view whose partition axis (dim 0) the method would move, split, merge or drop."""
    if t.base.memory.on_chip:
        raise _fault("partition_dim", method, f"{method}: {message} of {_what(t)}: on SBUF / PSUM dim 0 is the "
                                              "partition dim, which view operations keep in place")


def _participating(t: Any) -> tuple[int, ...]:
    return () if t.indirection is None else t.indirection[0]


def _indirect_rule(t: Any, method: str, dims: Sequence[int], message: str) -> None:
    """Refuse an operation on the dims of an indirect view that an index chose."""
    hit = [d for d in dims if d in _participating(t)]
    if hit:
        raise ValueError(f"{method}: {message}: dim {hit[0]} of the indirect view {_what(t)} is addressed by its "
                         "index (is_indirect()); that dimension cannot be sliced, selected or moved")


def _int(value: Any, method: str, parameter: str) -> int:
    if isinstance(value, bool):
        raise TypeError(f"{method}: {parameter} must be an int, got {value!r}")
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{method}: {parameter} must be an int, got {type(value).__name__} {value!r}") from None


def _dim(t: Any, dim: Any, method: str, parameter: str = "dim", extra: int = 0) -> int:
    """A dimension of ``t`` (``extra``: positions past the last, as expand_dim's insertion point)."""
    d = _int(dim, method, parameter)
    if not 0 <= d < t.ndim + extra:
        raise ValueError(f"{method}: {parameter}={d} is not a dimension of {_what(t)}; valid: 0..{t.ndim + extra - 1}")
    return d


def _sizes(shape: Any, method: str, parameter: str = "shape") -> tuple[int, ...]:
    if isinstance(shape, (str, bytes)) or not hasattr(shape, "__iter__"):
        raise TypeError(f"{method}: {parameter} must be a tuple of ints, got {shape!r}")
    return tuple(_int(s, method, parameter) for s in shape)


# --- reordering and shaping ---------------------------------------------------------------------
def permute(t: Any, dims: Any, method: str = "permute") -> Any:
    """Dims in the order ``dims`` (a permutation of range(ndim)); on SBUF / PSUM, and after
    vector_select, dims[0] must be 0."""
    dims = _sizes(dims, method, "dims")
    if sorted(dims) != list(range(t.ndim)):
        raise ValueError(f"{method}: dims={dims} is not a permutation of range({t.ndim}) for {_what(t)}")
    if dims and dims[0] != 0:
        _partition_rule(t, method, f"dims={dims} moves dim {dims[0]} to dim 0")
        _indirect_rule(t, method, [0], f"dims={dims} moves dim 0")
    return t._apply(lambda a: a.transpose(dims), {d: dims.index(d) for d in range(t.ndim)})


def broadcast(t: Any, dim: Any, size: Any) -> Any:
    """Size-1 dim ``dim`` repeated ``size`` times (stride 0); not dim 0 on SBUF / PSUM."""
    dim = _dim(t, dim, "broadcast")
    size = _int(size, "broadcast", "size")
    if size < 1:
        raise ValueError(f"broadcast: size={size} must be at least 1")
    if t.shape[dim] != 1:
        raise ValueError(f"broadcast: dim {dim} of {_what(t)} has size {t.shape[dim]}; only a size-1 dim broadcasts")
    if dim == 0:
        _partition_rule(t, "broadcast", "dim=0 broadcasts dim 0")
    _indirect_rule(t, "broadcast", [dim], f"dim={dim}")

    def f(a: np.ndarray) -> np.ndarray:
        shape, strides = list(a.shape), list(a.strides)
        shape[dim], strides[dim] = size, 0
        return np.lib.stride_tricks.as_strided(a, tuple(shape), tuple(strides), writeable=True)

    return t._apply(f)


def expand_dim(t: Any, dim: Any) -> Any:
    """A new size-1 dim at position ``dim`` (0..ndim); not 0 on SBUF / PSUM or after vector_select."""
    dim = _dim(t, dim, "expand_dim", extra=1)
    if dim == 0:
        _partition_rule(t, "expand_dim", "dim=0 inserts a dim before dim 0")
        _indirect_rule(t, "expand_dim", [0], "dim=0 inserts a dim before it")
    return t._apply(lambda a: np.expand_dims(a, dim), {d: d + (d >= dim) for d in range(t.ndim)})


def squeeze_dim(t: Any, dim: Any) -> Any:
    """Size-1 dim ``dim`` removed; not dim 0 on SBUF / PSUM or after vector_select."""
    dim = _dim(t, dim, "squeeze_dim")
    if t.shape[dim] != 1:
        raise ValueError(f"squeeze_dim: dim {dim} of {_what(t)} has size {t.shape[dim]}; only a size-1 dim is removed")
    if dim == 0:
        _partition_rule(t, "squeeze_dim", "dim=0 removes dim 0")
    _indirect_rule(t, "squeeze_dim", [dim], f"dim={dim}")
    return t._apply(lambda a: np.squeeze(a, axis=dim), {d: d - (d > dim) for d in range(t.ndim) if d != dim})


def _infer(sizes: tuple[int, ...], total: int, method: str, parameter: str, what: str) -> tuple[int, ...]:
    """``sizes`` with its one -1 inferred so that the product is ``total``."""
    if sizes.count(-1) > 1:
        raise ValueError(f"{method}: {parameter}={sizes} holds more than one -1; one size may be inferred")
    bad = [s for s in sizes if s < 1 and s != -1]
    if bad:
        raise ValueError(f"{method}: {parameter}={sizes} holds {bad[0]}; sizes are positive (one may be -1)")
    known = math.prod(s for s in sizes if s != -1)
    if -1 in sizes:
        if total % known:
            raise ValueError(f"{method}: {parameter}={sizes}: {what} of size {total} is not a multiple of {known}, so "
                             "-1 cannot be inferred")
        sizes = tuple(total // known if s == -1 else s for s in sizes)
    if math.prod(sizes) != total:
        raise ValueError(f"{method}: {parameter}={sizes} has product {math.prod(sizes)}; {what} has size {total}")
    return sizes


def _split(a: np.ndarray, dim: int, sizes: tuple[int, ...]) -> np.ndarray:
    """Dim ``dim`` of ``a`` split into ``sizes`` (row-major: the last varies fastest); always a view."""
    s = a.strides[dim]
    inner = [s * math.prod(sizes[j + 1:]) for j in range(len(sizes))]
    return np.lib.stride_tricks.as_strided(a, a.shape[:dim] + sizes + a.shape[dim + 1:],
                                           a.strides[:dim] + tuple(inner) + a.strides[dim + 1:], writeable=True)


def reshape_dim(t: Any, dim: Any, shape: Any, method: str = "reshape_dim") -> Any:
    """Dim ``dim`` split into ``shape`` (one -1 inferred; the product must be shape[dim]); dim 0 of
    SBUF / PSUM only into one dim, and not after vector_select."""
    dim = _dim(t, dim, method)
    sizes = _infer(_sizes(shape, method), t.shape[dim], method, "shape", f"dim {dim} of {_what(t)}")
    if dim == 0 and len(sizes) != 1:
        _partition_rule(t, method, f"shape={sizes} splits dim 0")
    _indirect_rule(t, method, [dim], f"dim={dim}")
    k = len(sizes)
    return t._apply(lambda a: _split(a, dim, sizes), {d: d if d <= dim else d + k - 1 for d in range(t.ndim)})


def flatten_dims(t: Any, start_dim: Any, end_dim: Any, method: str = "flatten_dims") -> Any:
    """Dims start_dim..end_dim (inclusive) merged into one; they must be contiguous in memory;
    start_dim > 0 on SBUF / PSUM and after vector_select."""
    start = _dim(t, start_dim, method, "start_dim")
    end = _dim(t, end_dim, method, "end_dim")
    if start > end:
        raise ValueError(f"{method}: start_dim={start} is after end_dim={end}")
    if start == end:
        return t._apply(lambda a: a)
    if start == 0:
        _partition_rule(t, method, f"start_dim=0 merges dim 0 with dims 1..{end}")
    _indirect_rule(t, method, range(start, end + 1), f"start_dim={start}, end_dim={end}")
    strides = t.strides
    live = [d for d in range(start, end + 1) if t.shape[d] != 1]
    for outer, inner in zip(live, live[1:]):
        if strides[outer] != strides[inner] * t.shape[inner]:
            raise ValueError(f"{method}: dims {start}..{end} of {_what(t)} are not contiguous in memory (strides "
                             f"{strides}): dim {outer}'s stride {strides[outer]} is not dim {inner}'s "
                             f"{strides[inner]} x {t.shape[inner]}; a permute or a stepped slice separates them")
    merged = math.prod(t.shape[start:end + 1])
    last = live[-1] if live else end

    def f(a: np.ndarray) -> np.ndarray:
        return np.lib.stride_tricks.as_strided(a, a.shape[:start] + (merged,) + a.shape[end + 1:],
                                               a.strides[:start] + (a.strides[last],) + a.strides[end + 1:],
                                               writeable=True)

    mapping = {d: d if d <= start else d - (end - start) for d in range(t.ndim) if not start < d <= end}
    return t._apply(f, mapping, values=lambda a: a.reshape(t.shape[:start] + (merged,) + t.shape[end + 1:]))


def reshape(t: Any, args: tuple, kwargs: dict) -> Any:
    """``t.reshape(shape)`` (AWS's keyword ``shape=``, a tuple, or the sizes positionally): the same
    elements in another shape, as a view of the current layout (no copy); the product must stay;
    on SBUF / PSUM (and after vector_select) shape[0] must equal t.shape[0]."""
    if kwargs:
        unknown = sorted(set(kwargs) - {"shape"})
        if unknown:
            raise TypeError(f"reshape: unknown keyword(s) {', '.join(unknown)}; it takes shape")
        if args:
            raise TypeError("reshape: give shape once (reshape(shape=(...)) or reshape((...)))")
        args = (kwargs["shape"],)
    if len(args) == 1 and not isinstance(args[0], (int, np.integer)):
        args = tuple(args[0]) if hasattr(args[0], "__iter__") else args
    shape = _sizes(args, "reshape")
    if any(s < 1 for s in shape):
        raise ValueError(f"reshape: shape={shape}: sizes are positive (NkiTensor.reshape infers none; reshape_dim "
                         "infers one -1)")
    if math.prod(shape) != t.size:
        raise ValueError(f"reshape: shape={shape} holds {math.prod(shape)} elements; {_what(t)} holds {t.size}")
    if t.ndim and (not shape or shape[0] != t.shape[0]):
        _partition_rule(t, "reshape", f"shape={shape} changes dim 0 from {t.shape[0]} to "
                                      f"{shape[0] if shape else '()'}")
        if 0 in _participating(t):
            raise ValueError(f"reshape: shape={shape} changes dim 0 of the indirect view {_what(t)} (vector_select's "
                             "partition dim); shape[0] must stay")

    def f(a: np.ndarray) -> np.ndarray:
        v = a.view()
        try:
            v.shape = shape
        except (AttributeError, ValueError):
            raise ValueError(f"reshape: {_what(t)} with strides {t.strides} cannot be viewed as shape={shape} "
                             "without copying (a permute or a stepped slice makes the layout incompatible)") from None
        return v

    return t._apply(f, {0: 0} if shape and t.ndim else {}, values=lambda a: a.reshape(shape))


def rearrange(t: Any, src_pattern: Any, dst_pattern: Any, fixed_sizes: dict | None = None) -> Any:
    """einops-style: ``src_pattern`` names each dim (a tuple of names splits it), ``dst_pattern``
    orders the names (a tuple of names merges them); ``fixed_sizes`` gives split sizes, one per
    group inferred. Made of reshape_dim, permute and flatten_dims, whose constraints apply."""
    fixed = dict(fixed_sizes or {})
    src = list(src_pattern)
    if len(src) != t.ndim:
        raise ValueError(f"rearrange: src_pattern={tuple(src_pattern)} names {len(src)} dims; {_what(t)} has {t.ndim}")

    def group(entry: Any, parameter: str) -> tuple[str, ...]:
        names = (entry,) if isinstance(entry, str) else tuple(entry) if isinstance(entry, (tuple, list)) else None
        if not names or not all(isinstance(n, str) for n in names):
            raise TypeError(f"rearrange: {parameter} entry {entry!r} is neither a name nor a non-empty tuple of names")
        return names

    groups = [group(e, "src_pattern") for e in src]
    names = [n for g in groups for n in g]
    if len(set(names)) != len(names):
        raise ValueError(f"rearrange: src_pattern={tuple(src_pattern)} names a dim twice")
    unknown = sorted(set(fixed) - set(names))
    if unknown:
        raise ValueError(f"rearrange: fixed_sizes names {', '.join(unknown)}, which src_pattern does not")
    view = t
    for d in reversed(range(len(groups))):  # split from the last dim, so earlier dims keep their index
        g = groups[d]
        sizes = tuple(_int(fixed.get(n, -1), "rearrange", f"fixed_sizes[{n!r}]") for n in g)
        sizes = _infer(sizes, t.shape[d], "rearrange", f"sizes of {g}", f"dim {d} of {_what(t)}")
        if len(g) > 1:
            view = reshape_dim(view, d, sizes, "rearrange")
    dst_groups = [group(e, "dst_pattern") for e in dst_pattern]
    order = [n for g in dst_groups for n in g]
    if sorted(order) != sorted(names):
        raise ValueError(f"rearrange: dst_pattern={tuple(dst_pattern)} names {sorted(order)}; src_pattern names "
                         f"{sorted(names)}; each must appear once in both")
    view = permute(view, tuple(names.index(n) for n in order), "rearrange")
    position = len(order)
    for g in reversed(dst_groups):  # merge from the last group, so earlier dims keep their index
        position -= len(g)
        if len(g) > 1:
            view = flatten_dims(view, position, position + len(g) - 1, "rearrange")
    return view


# --- slicing and selecting ------------------------------------------------------------------------
def slice_dim(t: Any, dim: Any, start: Any, end: Any, step: Any = 1) -> Any:
    """Elements start..end-1 (every step-th) of dim ``dim``; 0 <= start < end <= shape[dim], step >= 1."""
    dim = _dim(t, dim, "slice")
    start, end, step = (_int(v, "slice", p) for v, p in ((start, "start"), (end, "end"), (step, "step")))
    if step < 1:
        raise ValueError(f"slice: step={step} must be at least 1")
    n = t.shape[dim]
    if not 0 <= start < end <= n:
        raise _fault("index_bounds", "slice", f"{t.name}: slice(dim={dim}, start={start}, end={end}) needs "
                                              f"0 <= start < end <= {n} (dim {dim}'s size)")
    _indirect_rule(t, "slice", [dim], f"dim={dim}")
    key = (slice(None),) * dim + (slice(start, end, step),)
    return t._apply(lambda a: a[key])


def select(t: Any, dim: Any, index: Any) -> Any:
    """Static (an int): the element ``index`` of dim ``dim``, as ``t[:, index]`` indexes (the dim is
    removed; SBUF / PSUM keep dim 0 and two dims, as indexing does). Dynamic (an index tile or a
    register): the element chosen at run time, see ``machine.indirect.dynamic_select``."""
    if isinstance(index, (int, np.integer)) and not isinstance(index, bool):
        dim = _dim(t, dim, "select")
        i, n = int(index), t.shape[dim]
        if not 0 <= i < n:
            raise _fault("index_bounds", "select", f"{t.name}: select(dim={dim}, index={i}) needs 0 <= index < {n} "
                                                   f"(dim {dim}'s size)")
        _indirect_rule(t, "select", [dim], f"dim={dim}")
        return t[(slice(None),) * dim + (i,)]
    from . import indirect as _indirect
    return _indirect.dynamic_select(t, _dim(t, dim, "select"), index)


def vector_select(t: Any, dim: Any, vector_offset: Any) -> Any:
    """Partition p reads element vector_offset[p] of dim 0 (an HBM tensor; dim must be 0); see
    ``machine.indirect.vector_select``."""
    d = _int(dim, "vector_select", "dim")
    if d != 0:
        raise ValueError(f"vector_select: dim={d}; vector_select addresses dim 0 only")
    from . import indirect as _indirect
    return _indirect.vector_select(t, vector_offset)


def indirect(t: Any, index: Any, num_elem: Any = None) -> Any:
    """Tensor Indirection (docs: "Available on NeuronCore-v4 (Trn3) and later"): the arguments are
    checked, then a target before NeuronCore-v4 refuses it as ``target_generation``; on trn3 numeq
    does not compute it yet (``Unsupported``)."""
    from .memory import Tensor
    if not isinstance(index, Tensor):
        raise TypeError(f"indirect: index must be an SBUF tensor of offsets, got {type(index).__name__}")
    if index.base.memory.name != "sbuf":
        raise ValueError(f"indirect: index {index.name} is in {index.base.memory}; it must be an SBUF tensor")
    if index.ndim != 2 or not t.ndim or index.shape[0] != t.shape[0]:
        raise _fault("shape_mismatch", "indirect", f"indirect: index {index.name} has shape {index.shape}; it takes "
                                                   f"(P, K) with P == {t.shape[0] if t.ndim else '?'} ({t.name}'s "
                                                   "dim 0)")
    n = index.size if num_elem is None else _int(num_elem, "indirect", "num_elem")
    if not 1 <= n <= index.size:
        raise ValueError(f"indirect: num_elem={n}; index {index.name} holds {index.size} offsets")
    ctx = _context.current()
    if ctx.target.generation < 4:
        raise _context.KernelFault(ctx.find("target_generation", "error", f"{t.name}.indirect(): Tensor Indirection "
                                            f"is available on NeuronCore-v4 (Trn3) and later; the target "
                                            f"{ctx.target.name} is {ctx.target.core}", _source("indirect")))
    raise ctx.unsupported("NkiTensor.indirect (Tensor Indirection)")
