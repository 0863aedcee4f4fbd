"""The older interface's ``mask=`` on nki.isa instructions (nki.api.shared.rst, masking: a
predicate of the index expressions that index the operands; the instruction computes only the
elements it holds). Used as the compiler does with the masks public kernels write, a box of the
operand grid (``(i_p < rows)``, ``(j * F + i_f < d)``): every operand is cut to the box, the
instruction runs on the cut operands, and its result lies in the box of a tile of the full grid,
the rest unwritten (reading it later is a finding). A mask that is no box raises Unsupported.

An instruction either keeps its operand's shape (elementwise: the result's box is the mask's) or
reduces the free axes (``rows``: bn_stats, tensor_reduce, ...; the result keeps the box's
partitions and its own free shape).
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ..machine.context import current
from ..instructions.access import new_tile
from .index_expressions import Predicate, _Clipped, _bbox, _grid_shape, _mask_array, _retarget
from ..machine.memory import Tensor

__all__ = ["NOTHING", "masked_call"]


class _Nothing:
    """The result of a value-returning instruction whose mask holds nowhere: assigning it
    (``t[key] = nisa.op(..., mask=m)``) writes nothing, as the compiler emits no instruction."""

    def __repr__(self) -> str:
        return "<the result of an instruction whose mask= holds nowhere>"


NOTHING = _Nothing()


def masked_call(fn: Callable, rows: bool, args: tuple, kwargs: dict) -> Any:
    """``fn(*args, **kwargs)`` under the ``mask=`` among ``kwargs`` (``rows``: the instruction's result
    reduces the free axes): the operands cut to the mask's box, the result placed in it."""
    kwargs = dict(kwargs)
    mask = kwargs.pop("mask")
    ctx = current()
    name = f"nisa.{fn.__name__}(mask=)"
    if "dst" in kwargs and rows:
        raise ctx.unsupported(f"{name} in the destination-passing form of a reduction")
    # An elementwise instruction with dst= (the older interface's dma_copy has only that form: nki-samples'
    # pooling kernels mask it): dst and the operands are cut to the box and it writes the box in place.
    tensors = [x for x in list(args) + list(kwargs.values()) if isinstance(x, Tensor) and x.ndim]
    if not tensors:
        raise ctx.unsupported(f"{name} without a tensor operand")
    # The mask is over the grid of the operand it applies to (nc_match_replace8's data, not its
    # dst_idx): the first operand whose grid it fits.
    for i, t in enumerate(tensors):
        grid = _grid_shape(t)
        try:
            m = _mask_array(mask, grid)
            break
        except ValueError:
            if i == len(tensors) - 1:
                raise
    box = _bbox(m)
    if box is None:
        return NOTHING  # the mask holds nowhere: no instruction, and nothing to assign
    if not m[box].all():
        raise ctx.unsupported(f"{name} with a mask that is not a box of the operand grid")
    originals: list[Tensor] = []

    def cut_to_box(x: Any) -> Any:
        if isinstance(x, Predicate):  # a predicate over the grid (affine_select's pred): its box
            return Predicate(np.broadcast_to(x.array, grid)[tuple(box)])
        if not isinstance(x, Tensor) or not x.ndim:
            return x
        g = tuple(_grid_shape(x))
        if g[0] not in (grid[0], 1):
            raise ctx.unsupported(f"{name} on an operand of {g[0]} partitions under a mask over {grid[0]}")
        # Explicit slices of x's grid: the box where x spans the grid, all of a dim it broadcasts.
        key = [box[0] if g[0] == grid[0] else slice(0, 1)]
        key += list(box[1:]) if g[1:] == tuple(grid[1:]) else [slice(0, n) for n in g[1:]]
        if isinstance(x, _Clipped):  # an index reaching outside its tensor: the box must keep inside
            if any(k.start < v.start or k.stop > v.stop for k, v in zip(key, x.valid)):
                raise x.fault()
            key = [slice(k.start - v.start, k.stop - v.start) for k, v in zip(key, x.valid)]
        originals.append(x)
        return Tensor._apply(x, lambda a: a[tuple(key)])

    result = fn(*[cut_to_box(a) for a in args], **{k: cut_to_box(v) for k, v in kwargs.items()})
    if not isinstance(result, Tensor):
        return result
    for original in originals:  # a destination passed first: its box was written
        if result.base is original.base:
            return original
    # The value-returning form: the result placed in the box of a tile of the full grid.
    if result.shape[0] != box[0].stop - box[0].start:
        raise ctx.unsupported(f"{name} on an instruction whose result does not follow its operand's partitions")
    full = (grid[0],) + (tuple(result.shape[1:]) if rows else tuple(grid[1:]))
    place = (box[0],) + ((slice(None),) * (len(full) - 1) if rows else tuple(box[1:]))
    out = new_tile(full, result.dtype, result.base.memory.name)
    _ = out.base.mask  # made first: it zeroes the uninitialised bytes (Allocation.mask), before the copy
    target = out[place]
    target.data[...] = result.data.reshape(target.shape)
    target.mask[...] = result.mask.reshape(target.shape)
    out.base.dirty = True
    _retarget(ctx, result, out)
    return out
