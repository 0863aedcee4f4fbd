"""How kernels index tensors: integers, slices, ``nl.ds``, ``...`` and ``.ap()`` access patterns,
each checked against the tensor's bounds (an index out of bounds is a finding and stops the
instruction: numpy would clip a slice silently). Index expressions of the older interface
(``nl.arange`` / ``nl.mgrid``) are read by the front (``front.tiles``) into the same views.
"""

from __future__ import annotations

import operator
from typing import Any, Sequence

import numpy as np
from .context import current
from .dtypes import dtype_of

__all__ = ["Gather", "access_pattern", "assign", "index_dim_map", "normalise", "out_of_bounds"]


class Gather:
    """An index the older interface may give that no strided view expresses (the front gives its views)."""

    def view(self, t: Any) -> Any:  # pragma: no cover - overridden
        raise NotImplementedError


_BOUNDS_SOURCE = "documented: NKI tensors are indexed within their shape (nki.language docs)"


class PatternOutside(Exception):
    """An access pattern that reaches outside its buffer (``access_pattern``): the caller makes a
    view no instruction may use (``memory.OutsideBuffer``); building one is no error (a kernel may
    build it and guard its use), using it is."""

    def __init__(self, message: str, shape: tuple, dtype: Any) -> None:
        super().__init__(message)
        self.message, self.shape, self.dtype = message, shape, dtype


def out_of_bounds(t: Any, message: str) -> Exception:
    return current().fail("index_bounds", f"{t.name}: {message}", source=_BOUNDS_SOURCE)


# The older interface's front gives these when it is installed (``front.install``): an index
# expression (``nl.arange`` / ``nl.mgrid``) read into a view, and ``t[key] = value``. The machine
# room imports nothing above it.
FRONT: dict[str, Any] = {}


def _legacy_index(key: Any, shape: tuple, t: Any) -> Any:
    return FRONT["index"](key, shape, t)


def normalise(key: Any, shape: tuple[int, ...], t: Any) -> Any:
    """``key`` as a tuple of ints and slices inside ``shape`` (checked), or a Gather."""
    if not isinstance(key, tuple):
        key = (key,)
    if any(getattr(k, "_nki_index_expr", False) for k in key):
        return _legacy_index(key, shape, t)
    out: list[Any] = []
    dim = 0
    ellipsis_seen = False
    for k in key:
        if k is Ellipsis:
            if ellipsis_seen:
                raise out_of_bounds(t, "an index may hold one '...'")
            ellipsis_seen = True
            fill = len(shape) - (len(key) - 1 - sum(1 for x in key if x is None))
            out.extend([slice(None)] * fill)
            dim += fill
            continue
        if k is None:
            out.append(None)
            continue
        if dim >= len(shape):
            raise out_of_bounds(t, f"too many indices for shape {shape}")
        n = shape[dim]
        if isinstance(k, slice):
            start, stop, step = k.start, k.stop, k.step
            step = 1 if step is None else operator.index(step)
            if step <= 0:
                raise out_of_bounds(t, f"slice step must be positive, got {step} on axis {dim}")
            # A negative start / stop counts from the end (NkiTensor.__getitem__: "negative
            # indices"); what then lies outside the axis is out of bounds, never clipped.
            start = 0 if start is None else _from_end(operator.index(start), n)
            stop = n if stop is None else _from_end(operator.index(stop), n)
            if 0 <= start <= n < stop and "mgrid" in FRONT and all(isinstance(x, (slice, int)) for x in key):
                # A tile reaching past the end of its tensor (the last tile of a size no tile divides):
                # the older interface takes it under a mask that keeps inside (nki.api.shared.rst,
                # masks); as the same index written with nl.mgrid, its use is checked there (_Clipped).
                return _legacy_index(_as_grid(key, shape), shape, t)
            if start < 0 or stop > n or start > stop:
                raise out_of_bounds(t, f"slice {start}:{stop} of axis {dim} (size {n}) is out of bounds")
            out.append(slice(start, stop, step))
        elif hasattr(k, "start") and hasattr(k, "size") and not isinstance(k, np.ndarray):
            start, size, step = operator.index(k.start), operator.index(k.size), operator.index(getattr(k, "step", 1) or 1)
            last = start + (size - 1) * step
            if start < 0 or size < 0 or (size and last >= n):
                raise out_of_bounds(t, f"ds({start}, {size}) of axis {dim} (size {n}) is out of bounds")
            out.append(slice(start, start + size * step, step) if size else slice(start, start))
        else:
            try:
                i = operator.index(k)
            except TypeError:
                raise TypeError(f"{t.name}: index {k!r} on axis {dim} is not an int, slice, nl.ds or '...'") from None
            if i < -n or i >= n:
                raise out_of_bounds(t, f"index {i} of axis {dim} (size {n}) is out of bounds")
            i = _from_end(i, n)
            out.append(i)
        dim += 1
    return _keep_dims(out, t)


def _from_end(i: int, n: int) -> int:
    return i + n if i < 0 else i


def index_dim_map(index: tuple, shape: tuple[int, ...]) -> tuple[dict[int, int], list[int]]:
    """For a normalised index: (old dim -> its dim in the view, for the dims the view keeps; the
    old dims the index narrows: an int, or a slice short of the whole axis)."""
    mapping: dict[int, int] = {}
    narrowed: list[int] = []
    old = new = 0
    for k in index:
        if k is None:
            new += 1
            continue
        if isinstance(k, slice):
            if (k.start, k.stop, k.step) != (0, shape[old], 1):
                narrowed.append(old)
            mapping[old] = new
            new += 1
        else:
            narrowed.append(old)
        old += 1
    for d in range(old, len(shape)):
        mapping[d] = new + d - old
    return mapping, narrowed


def _as_grid(key: tuple, shape: tuple) -> tuple:
    """A key of slices and ints as the older interface's index expressions: one nl.mgrid axis per
    slice (ints stay; an open slice runs to the axis's end)."""
    slices = [slice(0 if k.start is None else k.start, shape[d] if k.stop is None else k.stop, k.step)
              for d, k in enumerate(key) if isinstance(k, slice)]
    grid = FRONT["mgrid"][tuple(slices)]
    axes = iter(grid if isinstance(grid, tuple) else (grid,))
    return tuple(next(axes) if isinstance(k, slice) else k for k in key)


def _keep_dims(index: list, t: Any) -> tuple:
    """NKI's rule for integer indices (nki.language tensor docs, 0.5.0+): on SBUF / PSUM an integer
    on dim 0 keeps the partition axis at size 1, and integers on free axes drop them unless the view
    would fall below 2-D, when the last integer-indexed axis stays at size 1; on HBM integers drop
    axes as numpy's do, down to 1-D."""
    positions = [i for i, k in enumerate(index) if isinstance(k, int)]
    if not positions:
        return tuple(index)  # slices only: every axis stays
    on_chip = t.base.memory.on_chip
    if on_chip and index and isinstance(index[0], int):
        index[0] = slice(index[0], index[0] + 1)
        positions = positions[1:]
    kept = sum(1 for k in index if not isinstance(k, int)) + (len(t.shape) - sum(1 for k in index if k is not None))
    floor = 2 if on_chip else 1
    while kept < floor and positions:
        i = positions.pop()
        index[i] = slice(index[i], index[i] + 1)
        kept += 1
    return tuple(index)


def access_pattern(t: Any, pattern: Sequence[Sequence[int]] | None = None, offset: int | None = None, *args: Any,
                   **kwargs: Any) -> Any:
    """``t.ap(pattern=[[step, count], ...], offset=None, dtype=None)`` (nki.language tensor docs,
    0.5.0+): element [i0, .., ik] is storage[offset + sum(i_j * step_j)] of the underlying buffer,
    whatever view ``t`` is; ``offset`` None inherits the view's storage offset, an int counts from
    the buffer's start; ``dtype`` reads the storage as another dtype (steps and counts in its
    elements). On SBUF / PSUM the first pair addresses partitions: its step must be the storage's
    elements per partition."""
    if pattern is None:
        pattern = kwargs.pop("ap", None)
    if args:
        raise TypeError("ap: takes pattern and offset positionally; the rest by keyword")
    vector_offset, scalar_offset = kwargs.pop("vector_offset", None), kwargs.pop("scalar_offset", None)
    indirect_dim = kwargs.pop("indirect_dim", 0)
    dtype = kwargs.pop("dtype", None)
    if kwargs:
        raise TypeError(f"ap: unknown keyword(s) {', '.join(sorted(kwargs))}; valid: pattern, offset, dtype, "
                        "scalar_offset, vector_offset, indirect_dim")
    if pattern is None:
        raise TypeError("ap: needs pattern=[[step, count], ...]")
    pairs = [(operator.index(p[0]), operator.index(p[1])) for p in pattern]
    base = t.base
    whole = base.whole() if dtype is None else base.whole().view(dtype) if base.shape else base.whole()
    d = t.dtype if dtype is None else dtype_of(dtype)
    ratio = base.dtype.itemsize / d.itemsize
    flat_n = int(base.data.size * ratio)
    start = int(t.element_offset() * ratio) if offset is None else operator.index(offset)
    if vector_offset is not None or scalar_offset is not None:
        if t.indirection is not None:
            raise ValueError(f"ap: {t.name} is already an indirect view; indirect views cannot be re-indirected "
                             "(scalar_offset / vector_offset)")
        # Indirect addressing (nki.isa.dma_copy docs): addresses chosen at run time, their bounds
        # checked when the DMA runs (machine.indirect).
        # dtype=: the view read as that dtype (steps, counts and the indirect dim's stride in its
        # elements), as a pattern without indirection reads it.
        source = t if dtype is None or d == t.dtype else t.view(d)
        return FRONT["indirect_pattern"](source, pairs, start, vector_offset=vector_offset,
                                         scalar_offset=scalar_offset, indirect_dim=indirect_dim)
    lo = start + sum(min(0, s * (c - 1)) for s, c in pairs)
    hi = start + sum(max(0, s * (c - 1)) for s, c in pairs)
    if any(c <= 0 for _, c in pairs):
        raise out_of_bounds(t, f"access pattern {[list(p) for p in pairs]}: every count must be positive")
    if base.memory.on_chip and base.shape and len(pairs) > 1:
        per_partition = int(np.prod(base.shape[1:], dtype=np.int64) * ratio)
        if pairs[0][0] != per_partition and pairs[0][1] > 1:
            raise out_of_bounds(t, f"access pattern {[list(p) for p in pairs]}: on {base.memory} the first pair "
                                   f"addresses partitions, so its step must be {per_partition} (the elements per "
                                   "partition)")
    if lo < 0 or hi >= flat_n:
        # Checked where an instruction uses it: nki-library's output_projection_tkg builds the pattern
        # of an index one past the last before the `if` that skips its nc_matmul.
        raise PatternOutside(f"access pattern {[list(p) for p in pairs]} at offset {start} reaches elements "
                             f"{lo}..{hi} of a buffer of {flat_n}", tuple(c for _, c in pairs), d)
    shape = tuple(c for _, c in pairs)

    def strided(a: np.ndarray) -> np.ndarray:
        flat = a.reshape(-1)
        return np.lib.stride_tricks.as_strided(flat[start:], shape=shape,
                                               strides=tuple(s * a.itemsize for s, _ in pairs), writeable=True)

    # A plain view, of the class the allocation's whole view has (memory.Tensor: this module serves
    # its indexing, so it does not import it).
    return type(whole)(base, strided(whole.data), strided(whole.mask),
                       None if whole.writer is None else strided(whole.writer), d)


def assign(t: Any, key: Any, value: Any) -> None:
    """``t[key] = value`` (the older interface writes tiles by assignment): a copy through the
    Vector engine's rules (same dtype: bits; otherwise through fp32)."""
    FRONT["assign"](t, key, value)
