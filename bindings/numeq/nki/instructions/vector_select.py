"""The Vector engine's selects, searches and moves: ``range_select``, ``select_reduce``,
``tensor_copy_predicated``, ``nc_stream_shuffle`` (cross-partition moves within 32-partition
quadrants), ``max8``, ``nc_find_index8``,
``nc_match_replace8``: rows of the instruction table. A select moves a value, it computes
nothing: the chosen element goes through fp32 and is cast into dst's dtype (a bit copy where the
documentation says so).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..machine import arithmetic as _numerics

from ..machine.alu import COMPARISONS, op_name
from ..machine.dtypes import FP32_MIN
from ..machine.context import Context, KernelFault
from ..machine.memory import Tensor
from ..machine.registers import Cmd, accumulate, command
from .access import as_tensor, cost_elementwise, leave_undefined, read, read_partly, write
from .forms import Form
from .operands import (accumulator_out, alu_fn, constraint, destination, doc, flat, lanes, per_partition, raw, reduce_name,
                       shape_fault, write_where)
from .path import Call
from .table import instruction
from ..machine.targets import start_partitions


def _reduce_out(ctx: Context, instruction: str, cmd: Cmd, rows: np.ndarray, selected: np.ndarray,
                reduce_res: Any, reduce_op: Any) -> list:
    """The select instructions' max reduction through the Vector accumulator; reduce_res [P, 1]
    receives the registers (not with ``idle``, which performs no reduction)."""
    op = reduce_name(reduce_op, "reduce_op")
    if op != "maximum":
        constraint(ctx, instruction, f"reduce_op {op}: only the max reduction is supported")
        raise ctx.unsupported(f"nisa.{instruction} with reduce_op={op}")
    acc = accumulate(ctx, instruction, rows, cmd, op, selected)
    return accumulator_out(ctx, instruction, reduce_res, acc, selected.shape[0])


@instruction("range_select", engine="vector", since=3, forms=[
    Form("current", "dst: tensor, on_true_tile: tensor, comp_op0: op, comp_op1: op, bound0: value, bound1: value,"
                     "reduce_cmd = reduce_cmd.reset_reduce, reduce_res: tensor? = None,"
                     "reduce_op: op = 'maximum', range_start: int = 0, on_false_value: value = fp32.min"),
    Form("0.1.0", "*, on_true_tile: tensor, comp_op0: op, comp_op1: op, bound0: value, bound1: value,"
                     "reduce_cmd = reduce_cmd.idle, reduce_res: tensor? = None, reduce_op: op = 'maximum',"
                     "range_start: int = 0, on_false_value: value = fp32.min", returns=True)])
def range_select(c: Call) -> Any:
    """On the Vector engine (NeuronCore-v3+): idx = range_start + (flattened free index) in fp32,
    keep = comp_op0(idx, bound0) & comp_op1(idx, bound1), dst = keep ? on_true_tile : on_false_value
    (which must be FP32_MIN, -3.4028235e38, stored as -inf in narrower float dtypes), and the max of
    each partition's fp32 selected values through the Vector accumulator (``reduce_cmd``) into
    ``reduce_res`` (nki.isa range_select docstring). bound0 / bound1: (P, 1) fp32 tiles."""
    ctx, form, v, dtype = c.ctx, c.form, c.args, c.dtype
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
        if o not in COMPARISONS or o == "not_equal":
            constraint(ctx, "range_select", f"{name} {o} is not one of equal, less, less_equal, greater, greater_equal")
        ops.append(alu_fn(o, name))
    fill = np.float32(v["on_false_value"])
    if fill != FP32_MIN:
        constraint(ctx, "range_select", f"on_false_value {float(fill)!r}: the hardware fills FP32_MIN "
                   "(-3.4028235e+38) only")
    idx = (start + np.arange(f, dtype=np.int64)).astype(np.float32)[None, :]
    keep = (ops[0](idx, b0) != 0) & (ops[1](idx, b1) != 0)
    selected = np.where(keep, x, fill).astype(_numerics.compute_dtype)
    dst = destination(v, form, on_true.shape, dtype, on_true.dtype)
    if dst.shape[0] != p or dst.free_size() != f:
        raise shape_fault(ctx, "range_select", f"dst {dst.shape} and on_true_tile {on_true.shape} differ")
    write(ctx, dst, selected.reshape(dst.shape))
    cmd = command(v["reduce_cmd"])
    outs = _reduce_out(ctx, "range_select", cmd, lanes(on_true), selected, v["reduce_res"], v["reduce_op"])
    c.issue([dst] + outs, [on_true], cycles=cost_elementwise(on_true),
              reduce_cmd=cmd.name)
    return dst


@instruction("select_reduce", engine="vector", one_psum=("on_true", "predicate"), forms=[
    Form("current", "dst: tensor, predicate: tensor, on_true: tensor, on_false: value,"
                     "reduce_res: tensor? = None, reduce_cmd = reduce_cmd.idle, reduce_op: op = 'maximum',"
                     "reverse_pred = False")])
def select_reduce(c: Call) -> Any:
    """dst = predicate ? on_true : on_false on the Vector engine (``reverse_pred`` inverts it; a
    nonzero predicate element is true), on_false a number or a (P, 1) tile; with reduce_cmd other
    than idle, the max of each partition's fp32 results through the Vector accumulator into
    ``reduce_res`` (nki.isa select_reduce docstring). predicate: int8, uint8, int16 or uint16."""
    ctx, v = c.ctx, c.args
    dst, pred_t, on_true = (as_tensor(v[n], n) for n in ("dst", "predicate", "on_true"))
    # bool_ is "Boolean (True or False) stored as a byte" (nki.language dtypes): a uint8 to the engine.
    if pred_t.dtype.name not in ("int8", "uint8", "int16", "uint16", "bool"):
        constraint(ctx, "select_reduce", f"predicate {pred_t.name} is {pred_t.dtype}; it takes int8, uint8, int16 or "
                   "uint16")
    if on_true.dtype.name in ("tfloat32", "int32", "uint32"):
        constraint(ctx, "select_reduce", f"on_true {on_true.name} is {on_true.dtype}; any dtype but tfloat32, int32 "
                   "and uint32")
    x = flat(read(ctx, on_true, "on_true", rows=True))
    pred = flat(raw(ctx, pred_t, "predicate")) != 0
    if pred.shape != x.shape or dst.shape[0] != x.shape[0] or dst.free_size() != x.shape[1]:
        raise shape_fault(ctx, "select_reduce", f"predicate {pred_t.shape}, on_true {on_true.shape} and dst "
                                                f"{dst.shape} differ in partitions or elements per partition")
    if v["reverse_pred"]:
        pred = ~pred
    fill = per_partition(ctx, v["on_false"], x.shape[0], "select_reduce", "on_false")
    selected = np.where(pred, x, fill).astype(_numerics.compute_dtype)
    write(ctx, dst, selected.reshape(dst.shape))
    cmd = command(v["reduce_cmd"])
    outs = _reduce_out(ctx, "select_reduce", cmd, lanes(on_true), selected, v["reduce_res"], v["reduce_op"])
    c.issue([dst] + outs, [pred_t, on_true], cycles=cost_elementwise(on_true),
              reduce_cmd=cmd.name)
    return dst


@instruction("tensor_copy_predicated", engine="vector", one_psum=("src", "predicate"), mask="elements", forms=[
    Form("current", "dst: tensor, src: value, predicate: tensor, reverse_pred = False")])
def tensor_copy_predicated(c: Call) -> Any:
    """dst = src where predicate (nonzero; ``reverse_pred``: where zero) on the Vector engine; dst
    elsewhere unmodified (nki.isa tensor_copy_predicated docstring). src a tile of dst's dtype
    (copied bit for bit) or a number (cast into dst's dtype); predicate uint8, uint16 or uint32."""
    ctx, v = c.ctx, c.args
    dst, pred_t = as_tensor(v["dst"], "dst"), as_tensor(v["predicate"], "predicate")
    src = v["src"]
    # bool_ is "Boolean (True or False) stored as a byte" (nki.language dtypes): a uint8 to the engine.
    if pred_t.dtype.name not in ("uint8", "uint16", "uint32", "bool"):
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
        write_where(ctx, dst, pred, values=np.full(dst.shape, _numerics.compute_dtype(src), dtype=_numerics.compute_dtype))
        mixed = pred_t.base.memory.name == "psum"
    n = dst.free_size()
    c.issue([dst], srcs, cycles=max(64, n) if mixed else max(64, 2 * n),
              copied=int(np.count_nonzero(pred)))
    return dst


@instruction("where", engine="vector", module="nki.language", public=False, source="nki.language API reference",
             forms=[Form("current", "dst: tensor, condition: tensor, x: value")])
def where(c: Call) -> Any:
    """``nl.where``'s selection (the front's nl.where first writes ``y`` into dst): dst = x where
    the condition is nonzero, else dst unchanged, on the Vector engine as a predicated copy
    (nisa.tensor_copy_predicated's semantics); unlike that instruction it takes any condition
    dtype (the docs' float 1.0 / 0.0) and values broadcast to dst (the compiler's casts and
    broadcasts)."""
    ctx, v = c.ctx, c.args
    dst, condition, x = as_tensor(v["dst"], "dst"), as_tensor(v["condition"], "condition"), v["x"]
    p = read(ctx, condition, "condition")
    old = read(ctx, dst, "dst")
    srcs = [condition]
    if isinstance(x, Tensor):
        values = read(ctx, x, "x")
        srcs.append(x)
    else:
        values = _numerics.compute_dtype(x)
    write(ctx, dst, np.where(np.broadcast_to(p, dst.shape) != 0, np.broadcast_to(values, dst.shape), old))
    c.issue([dst], srcs, cycles=cost_elementwise(dst))
    return dst


@instruction("nc_stream_shuffle", engine="vector", forms=[
    Form("current", "dst: tensor, src: tensor, shuffle_mask: list")])
def nc_stream_shuffle(c: Call) -> Any:
    """Within each 32-partition quadrant, dst partition i = src partition shuffle_mask[i] of the
    same quadrant (255: dst partition i unmodified), bit for bit, on the Vector engine; the same
    mask for every quadrant; in place allowed (nki.isa nc_stream_shuffle docstring). Positional
    arguments are read in the current order (dst, src, shuffle_mask); 0.1.0's (src, dst, ...) order
    cannot be told from it by the arguments' kinds, and its examples pass keywords."""
    ctx, v = c.ctx, c.args
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
    if ctx.bounding:  # Run.bound(): which src partition each dst partition copies (-1: none)
        ctx.bound_note = source
    # Only the partitions the mask names are read: others may hold nothing (nki-library's
    # find_nonzero_indices shuffles the partitions its GpSimd cores wrote); what a chosen one held
    # undefined stays undefined in dst. Read before any write: in place is allowed.
    values, undefined = read_partly(ctx, src, "src")
    if src.dtype == dst.dtype:
        write_where(ctx, dst, chosen, bits=flat(src.data)[rows].reshape(dst.shape))
    else:
        write_where(ctx, dst, chosen, values=flat(values)[rows].reshape(dst.shape))
    if undefined is not None:
        per_row = undefined if undefined.shape[1] == dst.free_size() else undefined.any(axis=1, keepdims=True)
        leave_undefined(ctx, dst, chosen & per_row[rows])
    c.issue([dst], [src], cycles=cost_elementwise(src), moved=int((source >= 0).sum()))
    return dst


_SEARCH_FREE = (8, 16384)  # elements per partition max8 / nc_find_index8 read (nki.isa docstrings)


def _search_input(ctx: Context, instruction: str, t: Tensor, parameter: str) -> np.ndarray:
    if t.ndim > 3:
        constraint(ctx, instruction, f"{parameter} {t.name} has {t.ndim} dimensions; it takes up to 3")
    n = t.free_size()
    if not _SEARCH_FREE[0] <= n <= _SEARCH_FREE[1]:
        constraint(ctx, instruction, f"{parameter} {t.name} has {n} elements per partition; it takes "
                   f"{_SEARCH_FREE[0]} to {_SEARCH_FREE[1]}")
    return flat(read(ctx, t, parameter, rows=True))


def _eight(ctx: Context, instruction: str, t: Tensor, parameter: str, partitions: int) -> None:
    if t.shape[0] != partitions or t.free_size() != 8:
        raise shape_fault(ctx, instruction, f"{parameter} {t.name} has shape {t.shape}; it takes 8 elements per "
                                            f"partition for {partitions} partitions")


@instruction("max8", engine="vector", mask="rows", forms=[
    Form("current", "dst: tensor, src: tensor"),
    Form("0.1.0", "*, src: tensor", returns=True)])
def max8(c: Call) -> Any:
    """dst[P, 8] = the 8 largest fp32 values of each partition of src, in descending order, on the
    Vector engine (nki.isa max8 docstring; src up to 3-D with 8..16384 elements per partition).
    A NaN's rank is not documented: numeq ranks it above every number. Older form
    ``max8(src=)`` returns a new tile."""
    ctx, form, v, dtype = c.ctx, c.form, c.args, c.dtype
    src = as_tensor(v["src"], "src")
    x = _search_input(ctx, "max8", src, "src")
    if x.shape[1] < 8:
        raise shape_fault(ctx, "max8", f"src {src.name} has {x.shape[1]} elements per partition; 8 are needed")
    dst = destination(v, form, (x.shape[0], 8), dtype, src.dtype)
    _eight(ctx, "max8", dst, "dst", x.shape[0])
    top = np.sort(x, axis=1, kind="stable")[:, ::-1][:, :8]  # ascending sort puts NaN last: reversed, first
    write(ctx, dst, np.ascontiguousarray(top))
    c.issue([dst], [src], cycles=x.shape[1])
    return dst


def _index_dtype(ctx: Context, instruction: str, t: Tensor, parameter: str) -> None:
    if t.dtype.name not in ("uint16", "uint32"):
        constraint(ctx, instruction, f"{parameter} {t.name} is {t.dtype}; indices are uint16 or uint32")


def _write_indices(ctx: Context, t: Tensor, idx: np.ndarray, found: np.ndarray) -> None:
    """Indices into dst, a missing one as the all-ones sentinel of dst's integer width (0xFFFF,
    0xFFFFFFFF: nki.isa nc_find_index8 docstring)."""
    if t.dtype.name in ("uint16", "uint32"):
        sentinel = np.iinfo(t.dtype.storage).max
        write(ctx, t, None, bits=np.where(found, idx, sentinel).astype(t.dtype.storage).reshape(t.shape))
    else:
        write(ctx, t, np.where(found, idx, -1).astype(np.float64).reshape(t.shape))


def _matches(x: np.ndarray, vals: np.ndarray, order: range) -> tuple[np.ndarray, np.ndarray]:
    """For each column j of vals (taken in ``order``), the first position of x equal to vals[:, j]
    that no earlier column claimed: (indices [P, 8], found [P, 8])."""
    claimed = np.zeros(x.shape, dtype=bool)
    idx = np.zeros(vals.shape, dtype=np.int64)
    found = np.zeros(vals.shape, dtype=bool)
    rows = np.arange(x.shape[0])
    for j in order:
        m = (x == vals[:, j:j + 1]) & ~claimed
        first = np.argmax(m, axis=1)
        hit = m[rows, first]
        idx[:, j], found[:, j] = first, hit
        claimed[rows[hit], first[hit]] = True
    return idx, found


@instruction("nc_find_index8", engine="vector", forms=[
    Form("current", "dst: tensor, data: tensor, vals: tensor"),
    Form("0.1.0", "*, data: tensor, vals: tensor", returns=True)])
def nc_find_index8(c: Call) -> Any:
    """dst[P, 8] = the index of the first occurrence in each partition of data of each of that
    partition's 8 vals, compared as fp32 values; a value not present gives the all-ones sentinel;
    repeated vals take successive occurrences, paired with the columns in ascending order (nki.isa
    nc_find_index8 docstring). dst uint32 (the older form's default) or uint16."""
    ctx, form, v, dtype = c.ctx, c.form, c.args, c.dtype
    data, vals_t = as_tensor(v["data"], "data"), as_tensor(v["vals"], "vals")
    x = _search_input(ctx, "nc_find_index8", data, "data")
    _eight(ctx, "nc_find_index8", vals_t, "vals", x.shape[0])
    vals = flat(read(ctx, vals_t, "vals", rows=True))
    dst = destination(v, form, (x.shape[0], 8), dtype, "uint32")
    _eight(ctx, "nc_find_index8", dst, "dst", x.shape[0])
    _index_dtype(ctx, "nc_find_index8", dst, "dst")
    idx, found = _matches(x, vals, range(8))
    _write_indices(ctx, dst, idx, found)
    c.issue([dst], [data, vals_t], cycles=x.shape[1])
    return dst


@instruction("nc_match_replace8", engine="vector", mask="elements", forms=[
    Form("current", "dst: tensor, data: tensor, vals: tensor, imm: value, dst_idx: tensor? = None"),
    Form("0.1.0", "*, data: tensor, vals: tensor, imm: value, dst_idx: tensor? = None", returns=True)])
def nc_match_replace8(c: Call) -> Any:
    """dst = data with the first occurrence of each of the 8 vals of each partition replaced by
    ``imm`` (fp32 compare; values through fp32 into dst's dtype), on the Vector engine; repeated
    vals are taken in reverse order (column 7 first), each claiming the next occurrence;
    ``dst_idx`` [P, 8] receives the matched positions (nki.isa nc_match_replace8 docstring). A
    value not present leaves data unchanged and gives nc_find_index8's all-ones sentinel in
    dst_idx (not documented for this instruction). Matches are found in data as given (a replaced
    element is not matched again)."""
    ctx, form, v, dtype = c.ctx, c.form, c.args, c.dtype
    data, vals_t = as_tensor(v["data"], "data"), as_tensor(v["vals"], "vals")
    if isinstance(v["imm"], Tensor):
        raise TypeError("imm: nc_match_replace8 takes an fp32 scalar, not a tile")
    x = flat(read(ctx, data, "data", rows=True))
    _eight(ctx, "nc_match_replace8", vals_t, "vals", x.shape[0])
    vals = flat(read(ctx, vals_t, "vals", rows=True))
    idx, found = _matches(x, vals, range(7, -1, -1))
    out = x.copy()
    rows = np.repeat(np.arange(x.shape[0])[:, None], 8, axis=1)
    out[rows[found], idx[found]] = np.float32(v["imm"])
    dst = destination(v, form, data.shape, dtype, data.dtype)
    if dst.shape[0] != x.shape[0] or dst.free_size() != x.shape[1]:
        raise shape_fault(ctx, "nc_match_replace8", f"dst {dst.shape} and data {data.shape} differ")
    write(ctx, dst, out.reshape(dst.shape))
    outs = [dst]
    if v["dst_idx"] is not None:
        dst_idx = as_tensor(v["dst_idx"], "dst_idx")
        _eight(ctx, "nc_match_replace8", dst_idx, "dst_idx", x.shape[0])
        _index_dtype(ctx, "nc_match_replace8", dst_idx, "dst_idx")
        _write_indices(ctx, dst_idx, idx, found)
        outs.append(dst_idx)
    c.issue(outs, [data, vals_t], cycles=max(64, x.shape[1]),
              replaced=int(found.sum()))
    return dst
