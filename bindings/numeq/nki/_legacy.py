"""The older NKI interface (``neuronxcc.nki``, "Beta 1"): tiles as values. ``nl.load`` /
``nl.store`` move tiles between HBM and SBUF, ``nl.matmul`` and the tile operations (``nl.exp(t)``,
``nl.add(a, b)``, ``nl.sum(t, axis=)`` ...) return new tiles, ``psum[...] += nl.matmul(...)``
accumulates. Each is the same instruction the current interface has (``isa``), so the numerics
and the checks are the same.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._context import current
from ._tensor import Tensor

__all__ = ["apply", "load", "store", "index", "assign"]


def _isa():
    from . import isa

    return isa


def load(src: Tensor, dtype: Any = None, mask: Any = None, **kwargs: Any) -> Tensor:
    """A new SBUF tile holding ``src`` (a DMA; ``dtype`` casts through fp32)."""
    from ._engine import new_tile

    if mask is not None:
        raise current().unsupported("nl.load(mask=)")
    t = new_tile(src.shape, dtype or src.dtype)
    _isa().dma_copy(dst=t, src=src)
    return t


def store(dst: Tensor, value: Any, mask: Any = None, **kwargs: Any) -> None:
    """HBM ``dst`` = tile ``value`` (a DMA)."""
    if mask is not None:
        raise current().unsupported("nl.store(mask=)")
    _isa().dma_copy(dst=dst, src=value)


def apply(op: Any, *args: Any, dtype: Any = None, **kwargs: Any) -> Tensor:
    """``nl.exp(t)``, ``nl.add(a, b)``: an activation (unary) or a tensor_tensor / tensor_scalar
    (binary) whose result is a new SBUF tile."""
    isa = _isa()
    if op.arity == 1:
        (x,) = args
        return isa.activation(op=op, data=x, dtype=dtype, **kwargs)
    x, y = args
    if isinstance(x, Tensor) and isinstance(y, Tensor):
        return isa.tensor_tensor(data1=x, data2=y, op=op, dtype=dtype, **kwargs)
    if isinstance(x, Tensor):
        return isa.tensor_scalar(data=x, op0=op, operand0=y, dtype=dtype, **kwargs)
    return isa.tensor_scalar(data=y, op0=op, operand0=x, reverse0=True, dtype=dtype, **kwargs)


def index(key: tuple, shape: tuple, t: Tensor) -> Any:
    raise current().unsupported("nl.arange / nl.mgrid index expressions")


def assign(t: Tensor, key: Any, value: Any) -> None:
    raise current().unsupported("tile assignment t[...] = value")
