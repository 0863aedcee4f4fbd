"""Python's operators on the older interface's tiles (nki.language 0.1.0: ``a + b``, ``x * 2.0``,
``1.0 / x``, ``-x``, comparisons; ``+=`` writes in place, into PSUM as matmul accumulation), put on
``Tensor`` by ``install()`` (``front.install``); the arithmetic is ``tiles``'.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ..instructions import access as _engine
from ..machine import arithmetic as _numerics
from ..machine import psum as _psum
from ..machine import rules as _rules
from ..machine.context import KernelFault, current
from ..machine.memory import WRITER_MATMUL, WRITER_NONE, Tensor
from . import masks as _masks
from .index_expressions import _Clipped, _fresh, _retarget
from .tiles import _binary, _isa, _tile, broadcast_to, expand_dims, static_cast

__all__ = ["install"]


def _adds(ctx: Any, dst: Tensor) -> Any:
    """Where ``dst += matmul`` adds: everywhere, except PSUM no instruction wrote yet, which the
    accumulation group's first matmul overwrites (the documented auto mode of nki.isa.nc_matmul,
    assumption ``matmul_accumulate``; nki-samples' allocated fused linear accumulates into an
    nl.ndarray PSUM tile it never zeroes). Under ``always`` it adds there too."""
    if ctx.assumptions["matmul_accumulate"] == "always":
        return np.bool_(True)
    if dst.base.writer_all is not None and dst.base.covered_by(dst):
        return np.bool_(dst.base.writer_all != WRITER_NONE)
    return dst.writer != WRITER_NONE


def _accumulate(ctx: Any, dst: Tensor, tile: Tensor) -> None:
    """``psum += nisa.nc_matmul(...)``: the Tensor Engine writes its result into ``dst`` with
    accumulate, PSUM adding in fp32 (the exact sum rounded once, ``psum_rounding``); the trace's
    nc_matmul then names dst."""
    if isinstance(dst, _Clipped):
        raise dst.fault()
    if dst.size != tile.size:
        raise KernelFault(ctx.find("shape_mismatch", "error", f"{dst.name}{list(dst.shape)} += a matmul result of "
                                   f"shape {tile.shape}", "documented: nki.isa.nc_matmul docstring"))
    adds = _adds(ctx, dst)
    if ctx.radii is not None and not ctx.bounding:  # Run.bound(): the radii follow the write
        from ..instructions.bounds import accumulated

        accumulated(ctx, dst, tile, adds, lambda: _accumulate(ctx, dst, tile))
        return
    some, every = (bool(adds), bool(adds)) if adds.ndim == 0 else (bool(adds.any()), bool(adds.all()))
    undefined = _engine.unwritten_operand(ctx, tile, settle=False)  # results the matmul left undefined
    if some:
        _rules.check_accumulate(ctx, dst, adds if adds.ndim else np.ones(dst.shape, dtype=bool))
        undefined = _engine.summed_undefined(ctx, dst, adds, undefined)
    if dst.shape == tile.shape and (every or not some) and _psum.transfer(ctx, tile, dst, adds=every):
        # The matmul joins dst's pending chain (computed when dst is read, machine.psum).
        _engine.before_write(ctx, dst)
        _engine.mark_written(ctx, dst, WRITER_MATMUL)
    else:
        _engine.settled(ctx, tile)
        new = _numerics.fp32_values(tile.data, tile.dtype).reshape(dst.shape)
        if some:
            old = _numerics.fp32_values(_engine.settled(ctx, dst).data, dst.dtype)
            summed = _numerics.accumulate_fp32(old, new, ctx.assumptions["psum_rounding"])
            new = summed if every else np.where(adds, summed, new)
        _engine.write(ctx, dst, new, WRITER_MATMUL)
    if undefined is not None:
        _engine.leave_undefined(ctx, dst, undefined)
    chain = getattr(ctx, "psum_chain", None)
    if chain is not None:
        key = (dst.base.id, dst.element_offset())
        chain[key] = chain.get(key, 0) + 1
        chain.pop((tile.base.id, 0), None)
    ctx.trace[-1].detail["accumulate"] = "accumulate"
    _retarget(ctx, tile, dst)


def install() -> None:
    """Tiles take Python's operators (nki.language 0.1.0: ``a + b``, ``x * 2.0``, ``1.0 / x``,
    ``-x``, comparisons; ``+=`` writes in place, into PSUM as matmul accumulation)."""

    def binary(name: str, reflected: bool = False) -> Callable:
        def f(self: Tensor, other: Any) -> Any:
            if not isinstance(other, (Tensor, int, float, np.number, bool, np.bool_)):
                return NotImplemented
            return _binary(name, other, self) if reflected else _binary(name, self, other)
        return f

    def inplace(name: str) -> Callable:
        def f(self: Tensor, other: Any) -> Any:
            if other is _masks.NOTHING:  # t += an instruction masked out entirely: nothing changes
                return self
            if not isinstance(other, (Tensor, int, float, np.number, bool, np.bool_)):
                return NotImplemented
            ctx = current()
            if name == "add" and self.base.memory.name == "psum" and _fresh(ctx, other, "nc_matmul"):
                _accumulate(ctx, self, other)
            else:
                _binary(name, self, other, out=self)
            return self
        return f

    for dunder, name in (("add", "add"), ("sub", "subtract"), ("mul", "multiply"), ("truediv", "divide"),
                         ("pow", "power")):
        setattr(Tensor, f"__{dunder}__", binary(name))
        setattr(Tensor, f"__r{dunder}__", binary(name, True))
        setattr(Tensor, f"__i{dunder}__", inplace(name))
    for dunder, name in (("lt", "less"), ("le", "less_equal"), ("gt", "greater"), ("ge", "greater_equal"),
                         ("eq", "equal"), ("ne", "not_equal")):
        setattr(Tensor, f"__{dunder}__", binary(name))
    Tensor.__neg__ = lambda self: _unary("negative", self)  # type: ignore[assignment]
    # The 0.1.0 tensor class's methods (nki.tensor: broadcast_to, expand_dims, astype).
    Tensor.broadcast_to = lambda self, shape: broadcast_to(self, shape=shape)  # type: ignore[attr-defined]
    Tensor.expand_dims = lambda self, axis: expand_dims(self, axis)  # type: ignore[attr-defined]
    Tensor.astype = lambda self, dtype: static_cast(self, dtype)  # type: ignore[attr-defined]
    Tensor.__hash__ = object.__hash__  # type: ignore[assignment]
    Tensor.__array_ufunc__ = None  # numpy scalars defer to the tile's operators


def _unary(name: str, x: Tensor) -> Tensor:
    x = _tile(x, "x")
    return _isa().activation(op=name, data=x)
