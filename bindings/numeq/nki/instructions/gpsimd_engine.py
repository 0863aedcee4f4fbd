"""The GpSimd engine's instructions: ``iota`` and ``affine_select`` (int32 affine index arithmetic:
the causal mask), ``tensor_partition_reduce`` (across partitions) and ``nonzero_with_count``:
rows of the instruction table. Indices and affine values are exact integers; a select moves a
value, computing nothing.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..machine import rules as _rules
from ..machine.alu import COMPARISONS, op_name
from ..machine.context import Context
from ..machine.memory import Tensor
from .access import as_tensor, cost_elementwise, new_tile, read, settled, write
from .forms import Form
from .operands import (constraint, destination, flat, raw, reduce_name, shape_fault, write_where)
from .path import Call
from .table import instruction
from ..machine.arithmetic import cast_into, fp32_values



def _pairwise_rows(x: np.ndarray, f: Any) -> np.ndarray:
    """Neighbouring rows combined level by level (an odd last row goes up unchanged)."""
    while x.shape[0] > 1:
        half = x.shape[0] // 2
        combined = f(x[0:2 * half:2], x[1:2 * half:2])
        x = np.concatenate([combined, x[2 * half:]], axis=0) if x.shape[0] % 2 else combined
    return x[0]


@instruction("tensor_partition_reduce", engine="gpsimd", assumptions=("partition_reduce_order",), sums="op", forms=[
    Form("current", "dst: tensor, op: op, data: tensor"),
    Form("0.1.0", "op: op, data: tensor", returns=True)])
def tensor_partition_reduce(c: Call) -> Any:
    """dst[1, F] = op over the partitions of data[P, F] on the GpSimd engine (nki.isa
    tensor_partition_reduce docstring; the one-partition result is the 2.26 example's shape):
    ``add`` / ``average`` in fp32 in the order of assumption ``partition_reduce_order``
    (``sequential``: partition 0, 1, 2, ... one add each; ``pairwise``: neighbours level by level),
    ``average`` the sum divided by P (one fp32 division); ``maximum`` exactly; ``bitwise_or`` /
    ``bitwise_and`` on the stored integer bits. Older form ``tensor_partition_reduce(op, data)``."""
    ctx, form, v, dtype = c.ctx, c.form, c.args, c.dtype
    data = as_tensor(v["data"], "data")
    op = reduce_name(v["op"], "op")
    if op not in ("add", "average", "maximum", "bitwise_or", "bitwise_and"):
        constraint(ctx, "tensor_partition_reduce", f"op {op} is not one of add, average, max, bitwise_or, bitwise_and")
        raise ctx.unsupported(f"nisa.tensor_partition_reduce with op={op}")
    dst = destination(v, form, (1,) + tuple(data.shape[1:]), dtype, data.dtype)
    _rules.check_engine_access(ctx, "gpsimd", [dst, data], "tensor_partition_reduce",
                               staged=(data,) if form.returns else ())
    # A PSUM data of the older form reaches GpSimd through the compiler's copy (check_engine_access).
    reader = "vector" if form.returns and data.base.memory.name == "psum" else "gpsimd"
    if dst.shape[0] != 1 or dst.free_size() != data.free_size():
        raise shape_fault(ctx, "tensor_partition_reduce", f"dst {dst.name} has shape {dst.shape}; the reduction of "
                                                          f"{data.name} {data.shape} is one partition of "
                                                          f"{data.free_size()} elements")
    order = ctx.assumptions["partition_reduce_order"]
    if op.startswith("bitwise"):
        if data.dtype.kind != "int":
            constraint(ctx, "tensor_partition_reduce", f"{op} works on integer bits; data {data.name} is {data.dtype}",
                       "documented: nki.language ALU operators (bitvec operators take integer dtypes)")
            raise ctx.unsupported(f"nisa.tensor_partition_reduce({op}) of {data.dtype} data")
        bits = flat(raw(ctx, data, "data", reader))
        f = np.bitwise_or if op == "bitwise_or" else np.bitwise_and
        r = f.reduce(bits, axis=0)
        if dst.dtype == data.dtype:
            write(ctx, dst, None, bits=r.reshape(1, -1))
        else:
            write(ctx, dst, r.astype(np.float64).reshape(1, -1))
    else:
        x = flat(read(ctx, data, "data", reader))
        with np.errstate(all="ignore"):
            if op == "maximum":
                r = np.max(x, axis=0)
            elif order == "pairwise":
                r = _pairwise_rows(x, lambda a, b: np.add(a, b, dtype=x.dtype))
            else:
                r = np.add.accumulate(x, axis=0, dtype=x.dtype)[-1]
            if op == "average":
                r = np.divide(r, x.dtype.type(x.shape[0]), dtype=x.dtype)
        write(ctx, dst, r.reshape(1, -1))
    c.issue([dst], [data], flops=data.size,
              cycles=cost_elementwise(data), op=op, order=order)
    return dst


_GPSIMD_START = 150  # GpSimd instruction start-up, about 150 cycles (SDK 2.26 iota / affine_select docstrings)


_INT32 = (-(2 ** 31), 2 ** 31 - 1)


def _int32(ctx: Context, values: np.ndarray, instruction: str) -> np.ndarray:
    """int64 affine values as the engine's int32 arithmetic holds them (two's complement wrap,
    reported: a wrapped index is almost certainly the kernel's bug)."""
    if values.size and (values.min() < _INT32[0] or values.max() > _INT32[1]):
        constraint(ctx, instruction, f"affine values reach {int(values.min())}..{int(values.max())}, outside int32; "
                   "the engine's int32 arithmetic wraps them")
        values = (values + 2 ** 31) % 2 ** 32 - 2 ** 31
    return values


def _affine(ctx: Context, instruction: str, pattern: Any, offset: Any, multiplier: Any, dst: Tensor) -> np.ndarray:
    """offset + p * channel_multiplier + sum_k i_k * step_k over dst's partitions p and the
    pattern's [[step, num], ...] (outermost first, up to 4), as int64 [P, F] wrapped to int32
    (nki.isa iota / affine_select docstrings)."""
    try:
        pairs = [(int(step), int(num)) for step, num in pattern]
    except (TypeError, ValueError):
        raise TypeError(f"pattern: expected [[step, num], ...] (up to 4 pairs of ints), got {pattern!r}") from None
    if not 1 <= len(pairs) <= 4:
        constraint(ctx, instruction, f"pattern has {len(pairs)} [step, num] pairs; it takes 1 to 4")
    if any(num < 1 for _, num in pairs):
        raise shape_fault(ctx, instruction, f"pattern {pattern}: every num must be at least 1")
    count = int(np.prod([num for _, num in pairs]))
    if count != dst.free_size():
        raise shape_fault(ctx, instruction, f"pattern {pattern} generates {count} elements per partition; dst "
                                            f"{dst.name} {dst.shape} holds {dst.free_size()}")
    v = np.full(count, int(offset), dtype=np.int64)
    stride = count
    for step, num in pairs:
        stride //= num
        v += (np.arange(count, dtype=np.int64) // stride % num) * step
    p = np.arange(dst.shape[0], dtype=np.int64)[:, None] * int(multiplier)
    return _int32(ctx, v[None, :] + p, instruction)


def _expression(ctx: Context, expr: Any, instruction: str) -> np.ndarray:
    """The values of an older-interface affine expression of ``nl.arange`` / ``nl.mgrid`` indices
    (an index expression's ``values()``, a predicate's ``array``, or anything numpy reads), at
    least 2-D [partitions, free]."""
    try:
        if callable(getattr(expr, "values", None)):
            v = np.asarray(expr.values())
        elif isinstance(getattr(expr, "array", None), np.ndarray):
            v = expr.array
        else:
            v = np.asarray(expr)
    except Exception:  # noqa: BLE001 - any failure means numeq cannot read this expression
        v = None
    if v is None or v.dtype.kind not in "biu":
        raise ctx.unsupported(f"nisa.{instruction} on {type(expr).__name__} (an nl.arange affine expression "
                              "numeq cannot evaluate)")
    return v.reshape((1,) * max(0, 2 - v.ndim) + v.shape) if v.ndim < 2 else v


@instruction("iota", engine="gpsimd", forms=[
    Form("current", "dst: tensor, pattern: list, offset: int = 0, channel_multiplier: int = 0"),
    Form("0.1.0", "expr, dtype = None", returns=True)])
def iota(c: Call) -> Any:
    """dst[p, w, z, y, x] = offset + p * channel_multiplier + w*step_w + z*step_z + y*step_y +
    x*step_x on the GpSimd engine, in int32 arithmetic, cast into dst's dtype (one rounding; nki.isa
    iota docstring). dst in SBUF; the pattern's element count equals dst's free size. Older form
    ``iota(expr, dtype)`` evaluates an affine expression of ``nl.arange`` indices into a new tile."""
    ctx, v = c.ctx, c.args
    if c.form.returns:
        dtype = v["dtype"] if v["dtype"] is not None else c.dtype
        if dtype is None:
            raise TypeError("iota: expected nisa.iota(dst, pattern, offset=0, channel_multiplier=0) or the older "
                            "nisa.iota(expr, dtype)")
        values = _int32(ctx, _expression(ctx, v["expr"], "iota").astype(np.int64), "iota")
        dst = new_tile(values.shape, dtype)
    else:
        dst = as_tensor(v["dst"], "dst")
        values = _affine(ctx, "iota", v["pattern"], v["offset"], v["channel_multiplier"], dst)
    _memory_sbuf(ctx, "iota", dst, "dst")
    _rules.check_engine_access(ctx, "gpsimd", [dst], "iota")
    if ctx.radii is not None:  # Run.bound(): the exact integers (instructions.bounds)
        ctx.bound_note = values
    write(ctx, dst, values.astype(np.float64).reshape(dst.shape))
    c.issue([dst], [], cycles=_GPSIMD_START + dst.free_size())
    return dst


def _memory_sbuf(ctx: Context, instruction: str, t: Tensor, parameter: str) -> None:
    if t.base.memory.name != "sbuf" and t.base.memory.name != "psum":  # PSUM: engine_access says it
        constraint(ctx, instruction, f"{parameter} {t.name} is in {t.base.memory}; the instruction takes SBUF")




@instruction("affine_select", engine="gpsimd", mask="elements", forms=[
    Form("current", "dst: tensor, pattern: list, channel_multiplier: int, on_true_tile: tensor,"
                     "on_false_value: value, cmp_op: op = 'equal', offset: int = 0"),
    Form("0.2.0", "dst: tensor, pattern: list, offset: int, channel_multiplier: int, on_true_tile: tensor,"
                     "on_false_value: value, cmp_op: op = 'equal'"),
    Form("0.1.0", "pred, on_true_tile: tensor, on_false_value: value", returns=True)])
def affine_select(c: Call) -> Any:
    """dst = on_true_tile where cmp_op(offset + p * channel_multiplier + sum_k i_k * step_k, 0),
    else on_false_value, on the GpSimd engine: the affine value in int32 arithmetic as iota's, the
    comparison exact (nki.isa affine_select docstring; the typical causal mask). on_true_tile of
    dst's dtype is copied bit for bit, another dtype goes through fp32; on_false_value is an fp32
    value cast into dst's dtype. Both tiles in SBUF. Accepted forms: the current argument order
    (dst, pattern, channel_multiplier, on_true_tile, on_false_value, cmp_op, offset), 0.2.0's
    (dst, pattern, offset, channel_multiplier, on_true_tile, on_false_value, cmp_op) and the older
    ``affine_select(pred, on_true_tile, on_false_value)`` with an affine predicate of ``nl.arange``
    indices (out = pred > 0 ? on_true : on_false) returning a new tile."""
    ctx, form, v, dtype = c.ctx, c.form, c.args, c.dtype
    on_true = as_tensor(v["on_true_tile"], "on_true_tile")
    if isinstance(v["on_false_value"], Tensor):
        raise TypeError("on_false_value: affine_select takes an fp32 scalar, not a tile")
    dst = destination(v, form, on_true.shape, dtype, on_true.dtype)
    _memory_sbuf(ctx, "affine_select", dst, "dst")
    _memory_sbuf(ctx, "affine_select", on_true, "on_true_tile")
    _rules.check_engine_access(ctx, "gpsimd", [dst, on_true], "affine_select",
                               staged=(on_true,) if form.returns else ())
    if form.returns:
        pred = _expression(ctx, v["pred"], "affine_select")
        try:
            chosen = np.broadcast_to(pred != 0, on_true.shape) if pred.ndim == on_true.ndim else \
                np.broadcast_to(pred != 0, (on_true.shape[0], on_true.free_size()))
        except ValueError:
            raise shape_fault(ctx, "affine_select", f"predicate of shape {pred.shape} does not cover on_true_tile "
                                                    f"{on_true.shape}") from None
        chosen = flat(np.ascontiguousarray(chosen))
    else:
        if on_true.shape[0] != dst.shape[0] or on_true.free_size() != dst.free_size():
            raise shape_fault(ctx, "affine_select", f"on_true_tile {on_true.shape} and dst {dst.shape} differ in "
                                                    "partitions or elements per partition")
        cmp = op_name(v["cmp_op"], "cmp_op")
        if cmp not in COMPARISONS:
            constraint(ctx, "affine_select", f"cmp_op {cmp} is not a comparison ({', '.join(COMPARISONS)})")
            raise ctx.unsupported(f"nisa.affine_select with cmp_op={cmp}")
        affine = _affine(ctx, "affine_select", v["pattern"], v["offset"], v["channel_multiplier"], dst)
        chosen = getattr(np, cmp)(affine, 0)
    # A PSUM on_true of the older form reaches GpSimd through the compiler's copy (check_engine_access).
    staged = form.returns and on_true.base.memory.name == "psum"
    _select_into(ctx, dst, on_true, chosen, np.float32(v["on_false_value"]), "on_true_tile",
                 "vector" if staged else "gpsimd")
    c.issue([dst], [on_true], cycles=_GPSIMD_START + dst.free_size(),
              kept=int(np.count_nonzero(chosen)))
    return dst


def _select_into(ctx: Context, dst: Tensor, on_true: Tensor, chosen: np.ndarray, on_false: np.ndarray,
                 parameter: str, engine: str) -> None:
    """dst = chosen ? on_true : on_false (on_false: a scalar or [P, 1] fp32): bits where the
    dtypes agree, else through fp32."""
    chosen = chosen.reshape(dst.shape[0], -1)
    if ctx.radii is not None:  # Run.bound(): which elements took on_true (instructions.bounds)
        ctx.bound_note = chosen
    if dst.dtype == on_true.dtype:
        bits = flat(raw(ctx, on_true, parameter, engine))
        fill = cast_into(np.broadcast_to(np.asarray(on_false, dtype=np.float32), bits.shape).copy(), dst.dtype)
        write(ctx, dst, None, bits=np.where(chosen, bits, fill).reshape(dst.shape))
    else:
        x = flat(read(ctx, on_true, parameter, engine, rows=True))
        write(ctx, dst, np.where(chosen, x, on_false).astype(x.dtype).reshape(dst.shape))


@instruction("nonzero_with_count", engine="gpsimd", since=3, forms=[
    Form("current", "dst: tensor, src: tensor, index_offset: int = 0, padding_val: int = -1")])
def nonzero_with_count(c: Call) -> Any:
    """On the GpSimd engine (NeuronCore-v3+), each of its 8 cores reads its first partition (16k,
    k = 0..7) of src [P, T] and writes its first partition of dst [P, T + 1]: the positions of the
    nonzero elements plus ``index_offset``, then ``padding_val`` up to T, then their count; every
    other partition of dst is left unmodified (nki.isa nonzero_with_count docstring). src fp32 or
    int32, dst int32, both in SBUF; partitions are physical (a view starting at partition 16 is
    core 1's)."""
    ctx, v = c.ctx, c.args
    dst, src = as_tensor(v["dst"], "dst"), as_tensor(v["src"], "src")
    _rules.check_engine_access(ctx, "gpsimd", [dst, src], "nonzero_with_count")
    if src.dtype.name not in ("float32", "int32"):
        constraint(ctx, "nonzero_with_count", f"src {src.name} is {src.dtype}; it takes float32 or int32")
    if dst.dtype.name != "int32":
        constraint(ctx, "nonzero_with_count", f"dst {dst.name} is {dst.dtype}; it takes int32")
    t = src.free_size()
    if dst.shape[0] != src.shape[0] or dst.free_size() != t + 1:
        raise shape_fault(ctx, "nonzero_with_count", f"dst {dst.shape} must have src's {src.shape[0]} partitions and "
                                                     f"{t + 1} elements per partition (src's {t} plus the count)")
    # Each core reads and writes its own first partition: the instruction's own per-core access,
    # held to no partial-partition start rule; the views as wholes are the kernel's.
    _rules.check_on_chip(ctx, src)
    _rules.check_on_chip(ctx, dst)
    s_first, _, s_step = src.partitions()
    d_first, _, d_step = dst.partitions()
    bits = flat(settled(ctx, src).data)
    values = bits if src.dtype.kind == "int" else fp32_values(bits, src.dtype)
    written = (np.ones(src.shape[0], bool) if src.base.complete
               else (flat(src.mask) == src.base.full).all(axis=1))
    out = np.zeros((dst.shape[0], t + 1), np.float64)
    chosen = np.zeros((dst.shape[0], t + 1), bool)
    garbage = []
    cores = 0
    for r in range(src.shape[0]):
        ps, pd = s_first + r * s_step, d_first + r * d_step
        if ps % 16 or pd % 16:
            continue
        cores += 1
        if not written[r]:
            garbage.append(r)  # a core reading an unwritten partition writes garbage: dst's row stays unwritten
            continue
        hits = np.flatnonzero(values[r] != 0).astype(np.int64) + int(v["index_offset"])
        out[r] = int(v["padding_val"])
        out[r, :hits.size] = hits
        out[r, t] = hits.size
        chosen[r] = True
    write_where(ctx, dst, chosen, values=out.reshape(dst.shape))
    if garbage:
        dst.mask[garbage] = 0
        dst.base.complete = False
    c.issue([dst], [src], cycles=cost_elementwise(src), cores=cores)
    return dst
