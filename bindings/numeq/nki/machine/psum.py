"""PSUM accumulation chains, computed when they are read.

A K loop of nc_matmuls into one PSUM tile (the first overwriting, the rest adding) is, by the
platform's definition, the Trainium matmul plan over the concatenated K: tiles of the instruction's
K reduced by the PE plan and added into PSUM in program order (``chunked(k_tile, column,
sequential(psum))``). So numeq keeps each tile's operands and computes the chain in one call of the
platform's matmul when something reads the PSUM tile (an evacuation, an accumulation onto values
already there, the end of the run): the same values as instruction by instruction, at the op-level
emulation's speed. A chain whose tiles differ in K (other than a shorter last tile), in format or
in mode, or that starts by adding onto values already in PSUM, is computed instruction by
instruction.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import arithmetic as _numerics

__all__ = ["defer", "release", "settle", "settle_all", "transfer"]


# The operand bytes pending chains may keep alive in one run before they are all computed (an
# implementation bound, not a hardware figure: a chain computed early gives the same values, its
# later matmuls then added onto them one by one), so that a long K loop cannot hold every operand
# tile it loaded.
PENDING_BYTES_LIMIT = 1 << 30


class _Chain:
    __slots__ = ("view", "ops", "init", "nbytes")

    def __init__(self, view: Any, init: np.ndarray | None) -> None:
        self.view = view
        self.ops: list[tuple] = []  # (stationary values [K, M], moving values [K, N], format, K, double_row)
        self.init = init
        self.nbytes = 0  # the operand bytes its ops keep


def _key(t: Any) -> tuple:
    return (t.element_offset(), t.shape, t.data.strides)


def defer(ctx: Any, dst: Any, a: tuple, b: tuple, fmt: str, k: int, double_row: bool, adds: bool) -> None:
    """Add one nc_matmul (``adds``: onto what dst holds; else overwriting it) to dst's chain.
    ``a`` and ``b`` are (values, operand tensor): values that are the operand's own storage are kept
    by reference and the operand's buffer pinned, so that a write to it first computes the chain
    (``release``); kernels mostly allocate a fresh tile per load, so nothing is copied."""
    _add(ctx, dst, _keep(ctx, dst, *a), _keep(ctx, dst, *b), fmt, k, double_row, adds)


def _add(ctx: Any, dst: Any, a: np.ndarray, b: np.ndarray, fmt: str, k: int, double_row: bool, adds: bool) -> None:
    chains = ctx.pending.setdefault(dst.base.id, {})
    key = _key(dst)
    if (len(chains) > 1 or (chains and key not in chains)) and \
            any(other != key and np.may_share_memory(c.view.data, dst.data) for other, c in chains.items()):
        settle(ctx, dst.base)
        chains = ctx.pending.setdefault(dst.base.id, {})
    chain = chains.get(key)
    if not adds or chain is None:
        if chain is not None:
            _forget(ctx, chain)
        init = _numerics.fp32_values(dst.data, dst.dtype).copy() if adds else None
        chain = chains[key] = _Chain(dst, init)
    chain.ops.append((a, b, fmt, k, double_row))
    chain.nbytes += a.nbytes + b.nbytes
    ctx.pending_bytes += a.nbytes + b.nbytes
    if ctx.pending_bytes > PENDING_BYTES_LIMIT:
        settle_all(ctx)


def _forget(ctx: Any, chain: _Chain) -> None:
    ctx.pending_bytes -= chain.nbytes


def _keep(ctx: Any, dst: Any, values: np.ndarray, operand: Any) -> np.ndarray:
    if values is operand.data or np.may_share_memory(values, operand.data):
        ctx.pinned.setdefault(operand.base.id, set()).add(dst.base.id)
    return values


def transfer(ctx: Any, tile: Any, dst: Any, adds: bool = True) -> bool:
    """``dst += tile`` where ``tile`` holds one pending nc_matmul and nothing else (the older
    interface's ``psum += nisa.nc_matmul(...)``): the matmul joins dst's chain as an accumulating
    write (``adds``; else it starts the chain), as the Tensor Engine writes it. False (nothing
    done) when tile is not such a tile."""
    chains = ctx.pending.get(tile.base.id)
    if not chains or len(chains) != 1 or dst.dtype.format != "fp32":
        return False
    chain = next(iter(chains.values()))
    if chain.init is not None or len(chain.ops) != 1 or chain.view.size != tile.base.data.size:
        return False
    del ctx.pending[tile.base.id]
    _forget(ctx, chain)
    for pins in ctx.pinned.values():  # the operands tile's chain kept by reference now feed dst's
        if tile.base.id in pins:
            pins.add(dst.base.id)
    _add(ctx, dst, *chain.ops[0], adds=adds)
    return True


def release(ctx: Any, operand_base: Any) -> None:
    """``operand_base`` is about to change: compute the pending chains that read it."""
    for psum_id in ctx.pinned.pop(operand_base.id, ()):
        chains = ctx.pending.get(psum_id)
        if chains:
            settle(ctx, next(iter(chains.values())).view.base)


def _uniform(ops: list[tuple]) -> bool:
    first = ops[0]
    return all(op[2] == first[2] and op[4] == first[4] for op in ops) and \
        all(op[3] == first[3] for op in ops[:-1]) and ops[-1][3] <= first[3]


def _compute(ctx: Any, chain: _Chain) -> np.ndarray:
    ops = chain.ops
    if chain.init is None and _uniform(ops):
        return _numerics.matmul_tile([op[0] for op in ops], [op[1] for op in ops], ops[0][2],
                                     ctx.tile_platform(ops[0][3], ops[0][4], ops[0][2]))
    values = chain.init
    for a, b, fmt, k, double_row in ops:
        tile = _numerics.matmul_tile(a, b, fmt, ctx.tile_platform(k, double_row, fmt))
        values = tile if values is None else _numerics.accumulate_fp32(values, tile, ctx.assumptions["psum_rounding"])
    return values


def settle(ctx: Any, base: Any) -> None:
    """Compute the pending chains of PSUM buffer ``base`` into its data."""
    chains = ctx.pending.pop(base.id, None)
    if not chains:
        return
    for chain in chains.values():
        _forget(ctx, chain)
        if not ctx.values:
            continue
        values = _compute(ctx, chain).reshape(chain.view.shape)
        chain.view.data[...] = _numerics.cast_into(values, chain.view.dtype)


def settle_all(ctx: Any) -> None:
    for chains in list(ctx.pending.values()):
        settle(ctx, next(iter(chains.values())).view.base)
