"""Generated patterns, selects and predicated copies: ``iota`` and ``affine_select`` (GpSimd, int32
affine index arithmetic: the causal mask), ``range_select`` and ``select_reduce`` (Vector, with the
accumulator's max reduction), ``tensor_copy_predicated``, ``nc_stream_shuffle`` (cross-partition
moves within 32-partition quadrants) and ``dropout`` where its result is deterministic.

A select moves a value, it computes nothing: the chosen element goes through fp32 and is cast
into dst's dtype (a bit copy where the documentation says so); indices and affine values are exact
integers.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .machine import rules as _rules
from .machine.alu import op_name
from .machine.context import Context, KernelFault, current
from .instructions.access import as_tensor, cost_elementwise, new_tile, read, write
from .instructions.operands import (FP32_MIN, REQUIRED, Cmd, Form, accumulate, alu_fn, bind, command, constraint, destination,
                        doc, flat, generation, lanes, per_partition, raw, reduce_name, shape_fault, write_where)
from .machine.memory import Tensor

__all__ = ["iota", "affine_select", "range_select", "select_reduce", "tensor_copy_predicated", "nc_stream_shuffle",
           "dropout"]

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


def iota(*args: Any, **kwargs: Any) -> Any:
    """dst[p, w, z, y, x] = offset + p * channel_multiplier + w*step_w + z*step_z + y*step_y +
    x*step_x on the GpSimd engine, in int32 arithmetic, cast into dst's dtype (one rounding; nki.isa
    iota docstring). dst in SBUF; the pattern's element count equals dst's free size. Older form
    ``iota(expr, dtype)`` evaluates an affine expression of ``nl.arange`` indices into a new tile."""
    ctx = current()
    if "dst" not in kwargs and (not args or not isinstance(args[0], Tensor)):
        rest = dict(kwargs)
        expr = args[0] if args else rest.pop("expr", None)
        dtype = args[1] if len(args) > 1 else rest.pop("dtype", None)
        if rest.pop("mask", None) is not None:
            raise ctx.unsupported("nisa.iota(mask=) (the older interface's instruction masks)")
        rest.pop("name", None)
        if expr is None or dtype is None or len(args) > 2 or rest:
            raise TypeError("iota: expected nisa.iota(dst, pattern, offset=0, channel_multiplier=0) or the older "
                            "nisa.iota(expr, dtype)")
        values = _int32(ctx, _expression(ctx, expr, "iota").astype(np.int64), "iota")
        dst = new_tile(values.shape, dtype)
    else:
        _, v, _ = bind("iota", args, kwargs, [
            Form("current", (("dst", "tensor", REQUIRED), ("pattern", "list", REQUIRED), ("offset", "int", 0),
                             ("channel_multiplier", "int", 0)), 4)])
        dst = as_tensor(v["dst"], "dst")
        values = _affine(ctx, "iota", v["pattern"], v["offset"], v["channel_multiplier"], dst)
    _memory_sbuf(ctx, "iota", dst, "dst")
    _rules.check_engine_access(ctx, "gpsimd", [dst], "iota")
    write(ctx, dst, values.astype(np.float64).reshape(dst.shape))
    ctx.issue("gpsimd", "iota", [dst], [], cycles=_GPSIMD_START + dst.free_size())
    return dst


def _memory_sbuf(ctx: Context, instruction: str, t: Tensor, parameter: str) -> None:
    if t.base.memory.name != "sbuf" and t.base.memory.name != "psum":  # PSUM: engine_access says it
        constraint(ctx, instruction, f"{parameter} {t.name} is in {t.base.memory}; the instruction takes SBUF")


_COMPARE = ("equal", "not_equal", "greater", "greater_equal", "less", "less_equal")


def affine_select(*args: Any, **kwargs: Any) -> Any:
    """dst = on_true_tile where cmp_op(offset + p * channel_multiplier + sum_k i_k * step_k, 0),
    else on_false_value, on the GpSimd engine: the affine value in int32 arithmetic as iota's, the
    comparison exact (nki.isa affine_select docstring; the typical causal mask). on_true_tile of
    dst's dtype is copied bit for bit, another dtype goes through fp32; on_false_value is an fp32
    value cast into dst's dtype. Both tiles in SBUF. Accepted forms: the current argument order
    (dst, pattern, channel_multiplier, on_true_tile, on_false_value, cmp_op, offset), 0.2.0's
    (dst, pattern, offset, channel_multiplier, on_true_tile, on_false_value, cmp_op) and the older
    ``affine_select(pred, on_true_tile, on_false_value)`` with an affine predicate of ``nl.arange``
    indices (out = pred > 0 ? on_true : on_false) returning a new tile."""
    ctx = current()
    form, v, dtype = bind("affine_select", args, kwargs, [
        Form("current", (("dst", "tensor", REQUIRED), ("pattern", "list", REQUIRED),
                         ("channel_multiplier", "int", REQUIRED), ("on_true_tile", "tensor", REQUIRED),
                         ("on_false_value", "value", REQUIRED), ("cmp_op", "op", "equal"), ("offset", "int", 0)), 7),
        Form("0.2.0", (("dst", "tensor", REQUIRED), ("pattern", "list", REQUIRED), ("offset", "int", REQUIRED),
                       ("channel_multiplier", "int", REQUIRED), ("on_true_tile", "tensor", REQUIRED),
                       ("on_false_value", "value", REQUIRED), ("cmp_op", "op", "equal")), 7),
        Form("0.1.0", (("pred", "any", REQUIRED), ("on_true_tile", "tensor", REQUIRED),
                       ("on_false_value", "value", REQUIRED)), 3, returns=True)])
    on_true = as_tensor(v["on_true_tile"], "on_true_tile")
    if isinstance(v["on_false_value"], Tensor):
        raise TypeError("on_false_value: affine_select takes an fp32 scalar, not a tile")
    dst = destination(v, form, on_true.shape, dtype, on_true.dtype)
    _memory_sbuf(ctx, "affine_select", dst, "dst")
    _memory_sbuf(ctx, "affine_select", on_true, "on_true_tile")
    _rules.check_engine_access(ctx, "gpsimd", [dst, on_true], "affine_select")
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
        if cmp not in _COMPARE:
            constraint(ctx, "affine_select", f"cmp_op {cmp} is not a comparison ({', '.join(_COMPARE)})")
            raise ctx.unsupported(f"nisa.affine_select with cmp_op={cmp}")
        affine = _affine(ctx, "affine_select", v["pattern"], v["offset"], v["channel_multiplier"], dst)
        chosen = getattr(np, cmp)(affine, 0)
    _select_into(ctx, dst, on_true, chosen, np.float32(v["on_false_value"]), "on_true_tile", "gpsimd")
    ctx.issue("gpsimd", "affine_select", [dst], [on_true], cycles=_GPSIMD_START + dst.free_size(),
              kept=int(np.count_nonzero(chosen)))
    return dst


def _select_into(ctx: Context, dst: Tensor, on_true: Tensor, chosen: np.ndarray, on_false: np.ndarray,
                 parameter: str, engine: str) -> None:
    """dst = chosen ? on_true : on_false (on_false: a scalar or [P, 1] fp32): bits where the
    dtypes agree, else through fp32."""
    chosen = chosen.reshape(dst.shape[0], -1)
    if dst.dtype == on_true.dtype:
        from .machine.arithmetic import cast_into

        bits = flat(raw(ctx, on_true, parameter, engine))
        fill = cast_into(np.broadcast_to(np.asarray(on_false, dtype=np.float32), bits.shape).copy(), dst.dtype)
        write(ctx, dst, None, bits=np.where(chosen, bits, fill).reshape(dst.shape))
    else:
        x = flat(read(ctx, on_true, parameter, engine, rows=True))
        write(ctx, dst, np.where(chosen, x, on_false).astype(np.float32).reshape(dst.shape))


def _reduce_out(ctx: Context, instruction: str, cmd: Cmd, rows: np.ndarray, selected: np.ndarray,
                reduce_res: Any, reduce_op: Any) -> list:
    """The select instructions' max reduction through the Vector accumulator; reduce_res [P, 1]
    receives the registers (not with ``idle``, which performs no reduction)."""
    op = reduce_name(reduce_op, "reduce_op")
    if op != "maximum":
        constraint(ctx, instruction, f"reduce_op {op}: only the max reduction is supported")
        raise ctx.unsupported(f"nisa.{instruction} with reduce_op={op}")
    acc = accumulate(ctx, instruction, rows, cmd, op, selected)
    if reduce_res is None:
        return []
    res = as_tensor(reduce_res, "reduce_res")
    if acc is None:
        constraint(ctx, instruction, f"reduce_res {res.name} is given with reduce_cmd=idle, which performs no "
                   "reduction: it is left unwritten")
        return []
    if res.shape[0] != selected.shape[0] or res.free_size() != 1:
        raise shape_fault(ctx, instruction, f"reduce_res {res.name} has shape {res.shape}; it takes one element per "
                                            f"partition for {selected.shape[0]} partitions")
    write(ctx, res, acc.reshape(-1, 1))
    return [res]


def range_select(*args: Any, **kwargs: Any) -> Any:
    """On the Vector engine (NeuronCore-v3+): idx = range_start + (flattened free index) in fp32,
    keep = comp_op0(idx, bound0) & comp_op1(idx, bound1), dst = keep ? on_true_tile : on_false_value
    (which must be FP32_MIN, -3.4028235e38, stored as -inf in narrower float dtypes), and the max of
    each partition's fp32 selected values through the Vector accumulator (``reduce_cmd``) into
    ``reduce_res`` (nki.isa range_select docstring). bound0 / bound1: (P, 1) fp32 tiles."""
    ctx = current()
    body = (("on_true_tile", "tensor", REQUIRED), ("comp_op0", "op", REQUIRED), ("comp_op1", "op", REQUIRED),
            ("bound0", "value", REQUIRED), ("bound1", "value", REQUIRED))
    form, v, dtype = bind("range_select", args, kwargs, [
        Form("current", (("dst", "tensor", REQUIRED),) + body + (
            ("reduce_cmd", "any", Cmd.reset_reduce), ("reduce_res", "tensor?", None),
            ("reduce_op", "op", "maximum"), ("range_start", "int", 0), ("on_false_value", "value", FP32_MIN)), 11),
        Form("0.1.0", body + (("reduce_cmd", "any", Cmd.idle), ("reduce_res", "tensor?", None),
                              ("reduce_op", "op", "maximum"), ("range_start", "int", 0),
                              ("on_false_value", "value", FP32_MIN)), 0, returns=True)])
    generation(ctx, "range_select", 3)
    on_true = as_tensor(v["on_true_tile"], "on_true_tile")
    if not on_true.dtype.is_float or on_true.dtype.format == "tf32":
        constraint(ctx, "range_select", f"on_true_tile {on_true.name} is {on_true.dtype}; it takes a float dtype")
    x = flat(read(ctx, on_true, "on_true_tile", rows=True))
    p, f = x.shape
    b0 = per_partition(ctx, v["bound0"], p, "range_select", "bound0")
    b1 = per_partition(ctx, v["bound1"], p, "range_select", "bound1")
    start = int(v["range_start"])
    if start < -(2 ** 24) or start + f - 1 > 2 ** 24:
        constraint(ctx, "range_select", f"range_start + index reaches {start}..{start + f - 1}; it must stay within "
                   "2^24 (exact in fp32)")
    ops = []
    for name in ("comp_op0", "comp_op1"):
        o = op_name(v[name], name)
        if o not in _COMPARE or o == "not_equal":
            constraint(ctx, "range_select", f"{name} {o} is not one of equal, less, less_equal, greater, greater_equal")
        ops.append(alu_fn(o, name))
    fill = np.float32(v["on_false_value"])
    if fill != FP32_MIN:
        constraint(ctx, "range_select", f"on_false_value {float(fill)!r}: the hardware fills FP32_MIN "
                   "(-3.4028235e+38) only")
    idx = (start + np.arange(f, dtype=np.int64)).astype(np.float32)[None, :]
    keep = (ops[0](idx, b0) != 0) & (ops[1](idx, b1) != 0)
    selected = np.where(keep, x, fill).astype(np.float32)
    dst = destination(v, form, on_true.shape, dtype, on_true.dtype)
    if dst.shape[0] != p or dst.free_size() != f:
        raise shape_fault(ctx, "range_select", f"dst {dst.shape} and on_true_tile {on_true.shape} differ")
    write(ctx, dst, selected.reshape(dst.shape))
    cmd = command(v["reduce_cmd"])
    outs = _reduce_out(ctx, "range_select", cmd, lanes(on_true), selected, v["reduce_res"], v["reduce_op"])
    ctx.issue("vector", "range_select", [dst] + outs, [on_true], cycles=cost_elementwise(on_true),
              reduce_cmd=cmd.name)
    return dst


def select_reduce(*args: Any, **kwargs: Any) -> Any:
    """dst = predicate ? on_true : on_false on the Vector engine (``reverse_pred`` inverts it; a
    nonzero predicate element is true), on_false a number or a (P, 1) tile; with reduce_cmd other
    than idle, the max of each partition's fp32 results through the Vector accumulator into
    ``reduce_res`` (nki.isa select_reduce docstring). predicate: int8, uint8, int16 or uint16."""
    ctx = current()
    _, v, _ = bind("select_reduce", args, kwargs, [
        Form("current", (("dst", "tensor", REQUIRED), ("predicate", "tensor", REQUIRED),
                         ("on_true", "tensor", REQUIRED), ("on_false", "value", REQUIRED),
                         ("reduce_res", "tensor?", None), ("reduce_cmd", "any", Cmd.idle),
                         ("reduce_op", "op", "maximum"), ("reverse_pred", "any", False)), 8)])
    dst, pred_t, on_true = (as_tensor(v[n], n) for n in ("dst", "predicate", "on_true"))
    if pred_t.dtype.name not in ("int8", "uint8", "int16", "uint16"):
        constraint(ctx, "select_reduce", f"predicate {pred_t.name} is {pred_t.dtype}; it takes int8, uint8, int16 or "
                   "uint16")
    if on_true.dtype.name in ("tfloat32", "int32", "uint32"):
        constraint(ctx, "select_reduce", f"on_true {on_true.name} is {on_true.dtype}; any dtype but tfloat32, int32 "
                   "and uint32")
    if pred_t.base.memory.name == "psum" and on_true.base.memory.name == "psum":
        ctx.find("engine_access", "error", f"select_reduce reads both {on_true.name} and {pred_t.name} from PSUM; at "
                 "most one may be in PSUM", doc("select_reduce"))
    x = flat(read(ctx, on_true, "on_true", rows=True))
    pred = flat(raw(ctx, pred_t, "predicate")) != 0
    if pred.shape != x.shape or dst.shape[0] != x.shape[0] or dst.free_size() != x.shape[1]:
        raise shape_fault(ctx, "select_reduce", f"predicate {pred_t.shape}, on_true {on_true.shape} and dst "
                                                f"{dst.shape} differ in partitions or elements per partition")
    if v["reverse_pred"]:
        pred = ~pred
    fill = per_partition(ctx, v["on_false"], x.shape[0], "select_reduce", "on_false")
    selected = np.where(pred, x, fill).astype(np.float32)
    write(ctx, dst, selected.reshape(dst.shape))
    cmd = command(v["reduce_cmd"])
    outs = _reduce_out(ctx, "select_reduce", cmd, lanes(on_true), selected, v["reduce_res"], v["reduce_op"])
    ctx.issue("vector", "select_reduce", [dst] + outs, [pred_t, on_true], cycles=cost_elementwise(on_true),
              reduce_cmd=cmd.name)
    return dst


def tensor_copy_predicated(*args: Any, **kwargs: Any) -> Any:
    """dst = src where predicate (nonzero; ``reverse_pred``: where zero) on the Vector engine; dst
    elsewhere unmodified (nki.isa tensor_copy_predicated docstring). src a tile of dst's dtype
    (copied bit for bit) or a number (cast into dst's dtype); predicate uint8, uint16 or uint32."""
    ctx = current()
    _, v, _ = bind("tensor_copy_predicated", args, kwargs, [
        Form("current", (("dst", "tensor", REQUIRED), ("src", "value", REQUIRED), ("predicate", "tensor", REQUIRED),
                         ("reverse_pred", "any", False)), 4)])
    dst, pred_t = as_tensor(v["dst"], "dst"), as_tensor(v["predicate"], "predicate")
    src = v["src"]
    if pred_t.dtype.name not in ("uint8", "uint16", "uint32"):
        constraint(ctx, "tensor_copy_predicated", f"predicate {pred_t.name} is {pred_t.dtype}; it takes uint8, uint16 "
                   "or uint32")
    pred = flat(raw(ctx, pred_t, "predicate")) != 0
    if pred.shape[0] != dst.shape[0] or pred.shape[1] != dst.free_size():
        raise shape_fault(ctx, "tensor_copy_predicated", f"predicate {pred_t.shape} and dst {dst.shape} differ")
    if v["reverse_pred"]:
        pred = ~pred
    srcs = [pred_t]
    if isinstance(src, Tensor):
        srcs.insert(0, src)
        if src.base.memory.name == "psum" and pred_t.base.memory.name == "psum":
            ctx.find("engine_access", "error", f"tensor_copy_predicated reads both {src.name} and {pred_t.name} from "
                     "PSUM; at most one may be in PSUM", doc("tensor_copy_predicated"))
        if src.size != dst.size or src.shape[0] != dst.shape[0]:
            raise shape_fault(ctx, "tensor_copy_predicated", f"src {src.shape} and dst {dst.shape} differ")
        if src.dtype != dst.dtype:
            constraint(ctx, "tensor_copy_predicated", f"src {src.name} is {src.dtype} and dst {dst.name} {dst.dtype}; "
                       "they must share a dtype")
            write_where(ctx, dst, pred, values=read(ctx, src, "src").reshape(dst.shape))
        else:
            write_where(ctx, dst, pred, bits=raw(ctx, src, "src").reshape(dst.shape))
        mixed = (src.base.memory.name == "psum") != (pred_t.base.memory.name == "psum")
    else:
        write_where(ctx, dst, pred, values=np.full(dst.shape, np.float32(src), dtype=np.float32))
        mixed = pred_t.base.memory.name == "psum"
    n = dst.free_size()
    ctx.issue("vector", "tensor_copy_predicated", [dst], srcs, cycles=max(64, n) if mixed else max(64, 2 * n),
              copied=int(np.count_nonzero(pred)))
    return dst


def nc_stream_shuffle(*args: Any, **kwargs: Any) -> Any:
    """Within each 32-partition quadrant, dst partition i = src partition shuffle_mask[i] of the
    same quadrant (255: dst partition i unmodified), bit for bit, on the Vector engine; the same
    mask for every quadrant; in place allowed (nki.isa nc_stream_shuffle docstring). Positional
    arguments are read in the current order (dst, src, shuffle_mask); 0.1.0's (src, dst, ...) order
    cannot be told from it by the arguments' kinds, and its examples pass keywords."""
    ctx = current()
    _, v, _ = bind("nc_stream_shuffle", args, kwargs, [
        Form("current", (("dst", "tensor", REQUIRED), ("src", "tensor", REQUIRED), ("shuffle_mask", "list", REQUIRED)),
             3)])
    dst, src = as_tensor(v["dst"], "dst"), as_tensor(v["src"], "src")
    mask = [int(m) for m in v["shuffle_mask"]]
    if len(mask) != 32 or any(not (0 <= m < 32 or m == 255) for m in mask):
        constraint(ctx, "nc_stream_shuffle", f"shuffle_mask {mask}: it takes 32 entries, each 0..31 or 255")
        raise shape_fault(ctx, "nc_stream_shuffle", "shuffle_mask must have 32 entries in 0..31 or 255")
    if src.dtype != dst.dtype:
        constraint(ctx, "nc_stream_shuffle", f"src {src.name} is {src.dtype} and dst {dst.name} {dst.dtype}; they must "
                   "share a dtype")
    if src.free_size() != dst.free_size():
        raise shape_fault(ctx, "nc_stream_shuffle", f"src {src.shape} and dst {dst.shape} differ in elements per "
                                                    "partition")
    sp, dp = src.shape[0], dst.shape[0]
    active = -(-max(sp, dp) // 32) * 32
    from .machine.targets import start_partitions

    for t, name in ((src, "src"), (dst, "dst")):
        first = t.partitions()[0]
        if first not in start_partitions(active):
            ctx.find("partition_start", "error", f"nc_stream_shuffle: {name} {t.name} starts at partition {first}; "
                     f"with {active} active partitions it may start at {', '.join(map(str, start_partitions(active)))}",
                     doc("nc_stream_shuffle"))
    source = np.full(dp, -1)
    for q in range(active // 32):
        for i, m in enumerate(mask):
            d, s = q * 32 + i, q * 32 + m
            if m == 255 or d >= dp:
                continue
            if s >= sp:
                raise KernelFault(ctx.find("index_bounds", "error", f"nc_stream_shuffle: dst partition {d} copies src "
                                           f"partition {s}, outside {src.name}'s {sp} partitions",
                                           doc("nc_stream_shuffle")))
            source[d] = s
    chosen = np.repeat((source >= 0)[:, None], dst.free_size(), axis=1)
    rows = np.maximum(source, 0)
    if src.dtype == dst.dtype:  # read before any write: in place is allowed
        write_where(ctx, dst, chosen, bits=flat(raw(ctx, src, "src"))[rows].reshape(dst.shape))
    else:
        write_where(ctx, dst, chosen, values=flat(read(ctx, src, "src"))[rows].reshape(dst.shape))
    ctx.issue("vector", "nc_stream_shuffle", [dst], [src], cycles=cost_elementwise(src), moved=int((source >= 0).sum()))
    return dst


def dropout(*args: Any, **kwargs: Any) -> Any:
    """dst = data with each element replaced by 0 with probability ``prob`` (a number or a (P, 1)
    tile), on the Vector engine, without rescaling (nki.isa dropout docstring). Only its
    deterministic cases run: prob 0 (every element kept) and prob 1 (every element zeroed), each
    documented; between them the result depends on the engine's random generator, which is not
    documented, and the call raises Unsupported."""
    ctx = current()
    form, v, dtype = bind("dropout", args, kwargs, [
        Form("current", (("dst", "tensor", REQUIRED), ("data", "tensor", REQUIRED), ("prob", "value", REQUIRED)), 3),
        Form("0.1.0", (("data", "tensor", REQUIRED), ("prob", "value", REQUIRED)), 2, returns=True)])
    data = as_tensor(v["data"], "data")
    x = flat(read(ctx, data, "data", rows=True))
    prob = per_partition(ctx, v["prob"], x.shape[0], "dropout", "prob")
    if not np.all((prob == 0) | (prob == 1)):
        raise ctx.unsupported("nisa.dropout with a drop probability other than 0 or 1 (the Vector engine's random "
                              "generator is not documented, so which elements it drops cannot be emulated)")
    dst = destination(v, form, data.shape, dtype, data.dtype)
    if dst.dtype != data.dtype and (not form.returns or data.dtype.kind == "int"):
        constraint(ctx, "dropout", f"dst {dst.name} is {dst.dtype} and data {data.name} {data.dtype}; the output "
                   "keeps data's dtype")
    if dst.shape[0] != x.shape[0] or dst.free_size() != x.shape[1]:
        raise shape_fault(ctx, "dropout", f"dst {dst.shape} and data {data.shape} differ")
    if dst.dtype == data.dtype:  # kept elements keep their bits; dropped ones are +0
        bits = flat(data.data)
        write(ctx, dst, None, bits=np.where(prob == 1, np.zeros((), dtype=bits.dtype), bits).reshape(dst.shape))
    else:
        write(ctx, dst, np.where(prob == 1, np.float32(0), x).astype(np.float32).reshape(dst.shape))
    ctx.issue("vector", "dropout", [dst], [data], cycles=cost_elementwise(data))
    return dst
