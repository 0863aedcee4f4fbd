"""The Vector engine's statistics, scans and fused arithmetic (``bn_stats``, ``bn_aggr``,
``tensor_tensor_scan``, ``tensor_scalar_cumulative``, ``tensor_scalar_reduce``,
``scalar_tensor_tensor``): rows of the instruction table. All compute in fp32 (nki.isa docs: inputs
cast to fp32, results cast to dst's dtype), one IEEE operation at a time (numpy float32 ufuncs,
correctly rounded), in the order each instruction's documentation states; where it states none,
the order is a named assumption.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ... import _core
from ..machine import arithmetic as _numerics
from ..machine.alu import alu, op_name
from ..machine.memory import Tensor
from ..machine.registers import Cmd, accumulate, command, vector_accumulator
from .access import as_tensor, cost_elementwise, read, write
from .forms import Form
from .operands import (accumulator_out, alu_fn, constraint, destination, flat, lanes, per_partition, reduce_name,
                       shape_fault)
from .path import Call
from .table import instruction




@instruction("bn_stats", engine="vector", mask="rows", forms=[
    Form("current", "dst: tensor, data: tensor"),
    Form("0.1.0", "data: tensor", returns=True)])
def bn_stats(c: Call) -> Any:
    """dst[P, 6] = (count, mean, variance * count) of the even-position elements of each
    partition, then the same of the odd-position ones, on the Vector engine in fp32 (nki.isa
    bn_stats docstring). At most ``nl.tile_size.bn_stats_fmax`` (512) elements per partition.
    Within the instruction the statistics follow Welford's update (the hardware's order is not
    documented; the operation catalogue's layernorm assumes the same, so a kernel and the op-level
    emulation agree). Older form ``bn_stats(data, dtype=)`` returns a new tile."""
    ctx, form, v, dtype = c.ctx, c.form, c.args, c.dtype
    data = as_tensor(v["data"], "data")
    x = flat(read(ctx, data, "data", rows=True))
    limit = int(ctx.target["bn_stats_free"])
    if x.shape[1] > limit:
        ctx.find("bn_stats_free", "error", f"bn_stats reads {x.shape[1]} elements per partition of {data.name}; one "
                 f"instruction takes at most {limit} (nl.tile_size.bn_stats_fmax)",
                 ctx.target.spec("bn_stats_free").cite())
    dst = destination(v, form, (x.shape[0], 6), dtype, data.dtype)
    if dst.shape[0] != x.shape[0] or dst.free_size() != 6:
        raise shape_fault(ctx, "bn_stats", f"dst {dst.name} has shape {dst.shape}; it takes 6 elements per partition "
                                           f"for {x.shape[0]} partitions")
    # Welford's update over each half in fp32: numeq's one implementation (cases/bn_stats.hpp), the
    # operation catalogue's layernorm bn_stats variant computes with the same.
    write(ctx, dst, _numerics.exact_bn_stats(x) if _numerics.EXACT else _core.cases_bn_stats(x))
    c.issue([dst], [data], flops=5 * x.size, cycles=cost_elementwise(data))
    return dst


@instruction("bn_aggr", engine="vector", mask="rows", assumptions=("bn_aggr_merge",), forms=[
    Form("current", "dst: tensor, data: tensor"),
    Form("0.1.0", "data: tensor", returns=True)])
def bn_aggr(c: Call) -> Any:
    """dst[P, 2] = (mean, population variance) of each partition, merging the (count, mean,
    variance * count) triples of one or more ``bn_stats`` results in order, on the Vector engine
    in fp32 (nki.isa bn_aggr docstring). The merge formula is not documented: the platform's
    ``bn_aggr_merge`` assumption (``chan``: Chan-Golub-LeVeque updates; ``naive``: E[x^2] - mean^2).
    Older form ``bn_aggr(data, dtype=)`` returns a new tile."""
    ctx, form, v, dtype = c.ctx, c.form, c.args, c.dtype
    data = as_tensor(v["data"], "data")
    x = flat(read(ctx, data, "data", rows=True))
    if x.shape[1] == 0 or x.shape[1] % 3:
        raise shape_fault(ctx, "bn_aggr", f"data {data.name} holds {x.shape[1]} elements per partition; bn_stats "
                                          "triples (count, mean, variance * count) make a multiple of 3")
    dst = destination(v, form, (x.shape[0], 2), dtype, data.dtype)
    if dst.shape[0] != x.shape[0] or dst.free_size() != 2:
        raise shape_fault(ctx, "bn_aggr", f"dst {dst.name} has shape {dst.shape}; it takes 2 elements per partition "
                                          f"for {x.shape[0]} partitions")
    merge = ctx.assumptions["bn_aggr_merge"]
    # The triples merged in order in fp32 (cases/bn_stats.hpp: chan, Chan-Golub-LeVeque's pairwise
    # update; naive, E[x^2] - mean^2), numeq's one implementation of both.
    write(ctx, dst, _numerics.exact_bn_aggr(x) if _numerics.EXACT else _core.cases_bn_aggr(x, merge))
    n = x.shape[1]
    c.issue([dst], [data], flops=4 * n * x.shape[0], cycles=max(64, 13 * (n // 3)),
              merge=merge)
    return dst


@instruction("tensor_tensor_scan", engine="vector", one_psum=("data0", "data1"), assumptions=("scan_carry",),
             sums=("op0", "op1"), forms=[
    Form("current", "dst: tensor, data0: tensor, data1: tensor, initial: value, op0: op, op1: op,"
                     "reverse0 = False, reverse1 = False"),
    Form("0.1.0", "data0: tensor, data1: tensor, initial: value, op0: op, op1: op, reverse0 = False,"
                     "reverse1 = False", returns=True)])
def tensor_tensor_scan(c: Call) -> Any:
    """Per partition, along the flattened free axis: r[0] = op1(op0(data0[0], initial), data1[0]),
    r[i] = op1(op0(data0[i], r[i-1]), data1[i]) on the Vector engine in fp32; ``reverse0`` makes
    data0 op0's rhs, ``reverse1`` makes data1 op1's lhs (nki.isa tensor_tensor_scan docstring).
    ``initial``: a number or a (P, 1) tile. The carry r[i-1]: assumption ``scan_carry`` (``fp32``;
    ``dtype``: rounded to data0's dtype each step, as the docstring's numpy pseudocode stores it).
    Older form without dst returns a new tile."""
    ctx, form, v, dtype = c.ctx, c.form, c.args, c.dtype
    d0, d1 = as_tensor(v["data0"], "data0"), as_tensor(v["data1"], "data1")
    x0, x1 = flat(read(ctx, d0, "data0", rows=True)), flat(read(ctx, d1, "data1", rows=True))
    if x0.shape != x1.shape:
        raise shape_fault(ctx, "tensor_tensor_scan", f"data0 {d0.shape} and data1 {d1.shape} differ in partitions or "
                                                     "elements per partition")
    r = per_partition(ctx, v["initial"], x0.shape[0], "tensor_tensor_scan", "initial")[:, 0]
    f0, f1 = alu_fn(v["op0"], "op0"), alu_fn(v["op1"], "op1")
    carry = ctx.assumptions["scan_carry"]
    out = np.empty_like(x0)
    with np.errstate(all="ignore"):
        for i in range(x0.shape[1]):
            t = f0(r, x0[:, i]) if v["reverse0"] else f0(x0[:, i], r)
            r = f1(x1[:, i], t) if v["reverse1"] else f1(t, x1[:, i])
            if carry == "dtype" and d0.dtype.format != "fp32":
                r = _numerics.fp32_values(_numerics.cast_into(r, d0.dtype), d0.dtype)
            out[:, i] = r
    dst = destination(v, form, d0.shape, dtype, d0.dtype)
    write(ctx, dst, out)
    c.issue([dst], [d0, d1], flops=2 * x0.size,
              cycles=max(64, 2 * x0.shape[1]), op0=op_name(v["op0"]), op1=op_name(v["op1"]), carry=carry)
    return dst


_CUMULATIVE_OPS = ("add", "subtract", "multiply", "maximum", "minimum")


@instruction("tensor_scalar_cumulative", engine="vector", sums="op1", forms=[
    Form("current", "dst: tensor, src: tensor, op0: op, op1: op, imm0: value, imm1: value? = None,"
                     "reduce_cmd = reduce_cmd.reset_reduce")])
def tensor_scalar_cumulative(c: Call) -> Any:
    """An inclusive scan per partition along the flattened free axis, on the Vector engine in fp32
    (nki.isa tensor_scalar_cumulative docstring): reg = op1(op0(src[i], imm0), reg); dst[i] = reg.
    The register is the Vector accumulator: ``reduce_cmd`` reset_reduce starts it at op1's identity
    (0, 1, -inf, +inf), ``reduce`` continues it, ``load_reduce`` starts it at ``imm1``."""
    ctx, v = c.ctx, c.args
    src, dst = as_tensor(v["src"], "src"), as_tensor(v["dst"], "dst")
    for t, p in ((src, "src"), (dst, "dst")):
        if t.dtype.name in ("int32", "uint32", "tfloat32"):
            constraint(ctx, "tensor_scalar_cumulative", f"{p} {t.name} is {t.dtype}; the instruction takes bf16, fp16, "
                       "fp32, fp8, uint8, uint16, int8 or int16")
    op1 = reduce_name(v["op1"], "op1")
    if op1 not in _CUMULATIVE_OPS:
        constraint(ctx, "tensor_scalar_cumulative", f"op1 {op1} is not one of add, subtract, multiply, max, min")
        raise ctx.unsupported(f"nisa.tensor_scalar_cumulative with op1={op1}")
    x = flat(read(ctx, src, "src", rows=True))
    imm0 = per_partition(ctx, v["imm0"], x.shape[0], "tensor_scalar_cumulative", "imm0")
    f0, f1 = alu_fn(v["op0"], "op0"), alu_fn(op1, "op1")
    with np.errstate(all="ignore"):
        t = f0(x, imm0)
    cmd = command(v["reduce_cmd"])
    if cmd not in (Cmd.reset_reduce, Cmd.reduce, Cmd.load_reduce):
        constraint(ctx, "tensor_scalar_cumulative", f"reduce_cmd {cmd.name}: the instruction takes reset_reduce, "
                   "reduce or load_reduce")
        raise ctx.unsupported(f"nisa.tensor_scalar_cumulative with reduce_cmd={cmd.name}")
    rows = lanes(src)
    init = None if v["imm1"] is None else per_partition(ctx, v["imm1"], x.shape[0], "tensor_scalar_cumulative", "imm1")
    # The register's starting value, through the shared accumulator (an empty stream leaves it).
    reg = accumulate(ctx, "tensor_scalar_cumulative", rows, Cmd.reset if cmd == Cmd.reset_reduce
                     else cmd, op1, t[:, :0], init)
    out = np.empty_like(t)
    with np.errstate(all="ignore"):
        for i in range(t.shape[1]):
            reg = f1(t[:, i], reg)
            out[:, i] = reg
    vector_accumulator(ctx).values[rows] = reg
    write(ctx, dst, out)
    c.issue([dst], [src], flops=2 * x.size, cycles=cost_elementwise(src),
              op0=op_name(v["op0"]), op1=op1)
    return dst


@instruction("scalar_tensor_tensor", engine="vector", one_psum=("data", "operand1"), mask="elements", forms=[
    Form("current", "dst: tensor, data: tensor, op0: op, operand0: value, op1: op, operand1: tensor,"
                     "reverse0 = False, reverse1 = False"),
    Form("0.1.0", "*, data: tensor, op0: op, operand0: value, op1: op, operand1: tensor, reverse0 = False,"
                     "reverse1 = False", returns=True)])
def scalar_tensor_tensor(c: Call) -> Any:
    """dst = (data op0 operand0) op1 operand1 on the Vector engine: two fp32 operations back to
    back, the first result rounded to fp32 (nki.isa scalar_tensor_tensor docstring: equivalent to
    a tensor_scalar then a tensor_tensor). ``operand0``: a number or a (P, 1) tile; ``operand1``: a
    tile of data's size; ``reverse0`` / ``reverse1`` swap an operator's operands."""
    ctx, form, v, dtype = c.ctx, c.form, c.args, c.dtype
    data, operand1 = as_tensor(v["data"], "data"), as_tensor(v["operand1"], "operand1")
    x = flat(read(ctx, data, "data", rows=True))
    y = flat(read(ctx, operand1, "operand1", rows=True))
    if y.shape != x.shape:
        raise shape_fault(ctx, "scalar_tensor_tensor", f"operand1 {operand1.shape} and data {data.shape} differ in "
                                                       "partitions or elements per partition")
    a = per_partition(ctx, v["operand0"], x.shape[0], "scalar_tensor_tensor", "operand0")
    f0, f1 = alu_fn(v["op0"], "op0"), alu_fn(v["op1"], "op1")
    with np.errstate(all="ignore"):
        t = f0(a, x) if v["reverse0"] else f0(x, a)
        r = f1(y, t) if v["reverse1"] else f1(t, y)
    dst = destination(v, form, data.shape, dtype, data.dtype)
    write(ctx, dst, r)
    n = x.shape[1]
    fast = (data.dtype.name == operand1.dtype.name == "bfloat16" and op_name(v["op0"]) == "subtract"
            and op_name(v["op1"]) == "multiply" and n % 2 == 0)
    c.issue([dst], [data, operand1], flops=2 * x.size,
              cycles=n if fast else 2 * n, op0=op_name(v["op0"]), op1=op_name(v["op1"]))
    return dst


_REDUCE_OPS = ("add", "multiply", "maximum", "minimum")


@instruction("tensor_scalar_reduce", engine="vector", assumptions=("vector_reduce_order",), sums="reduce_op", forms=[
    Form("current", "dst: tensor, data: tensor, op0: op, operand0: value?, reduce_op: op,"
                     "reduce_res: tensor? = None, reverse0 = False, reduce_cmd = reduce_cmd.reset_reduce,"
                     "reduce_init: value? = None, reduce_res_negate = False"),
    Form("0.1.0", "*, data: tensor, op0: op, operand0: value?, reduce_op: op, reduce_res: tensor,"
                     "reverse0 = False", returns=True)])
def tensor_scalar_reduce(c: Call) -> Any:
    """dst = data op0 operand0 (fp32, as tensor_scalar with one operator) on the Vector engine, and
    the fp32 results reduced over every free axis by ``reduce_op`` (add, multiply, max, min) through
    the Vector accumulator (``reduce_cmd``: reset_reduce, reduce, load_reduce with ``reduce_init``)
    into ``reduce_res`` [P, 1] (negated if ``reduce_res_negate``; None keeps it in the accumulator)
    (nki.isa tensor_scalar_reduce docstring). The reduction reads the fp32 results before dst's cast."""
    ctx, form, v, dtype = c.ctx, c.form, c.args, c.dtype
    data = as_tensor(v["data"], "data")
    x = flat(read(ctx, data, "data", rows=True))
    if v["reverse0"]:
        constraint(ctx, "tensor_scalar_reduce", "reverse0=True is documented as not supported yet")
    a = per_partition(ctx, v["operand0"] if v["operand0"] is not None else 0.0, x.shape[0], "tensor_scalar_reduce",
                      "operand0")
    f0 = alu_fn(v["op0"], "op0")
    with np.errstate(all="ignore"):
        t = f0(a, x) if v["reverse0"] else f0(x, a)
    op = reduce_name(v["reduce_op"], "reduce_op")
    if op not in _REDUCE_OPS:
        constraint(ctx, "tensor_scalar_reduce", f"reduce_op {op} is not one of add, multiply, max, min")
        raise ctx.unsupported(f"nisa.tensor_scalar_reduce with reduce_op={op}")
    cmd = command(v.get("reduce_cmd", Cmd.reset_reduce))
    if cmd not in (Cmd.reset_reduce, Cmd.reduce, Cmd.load_reduce):
        constraint(ctx, "tensor_scalar_reduce", f"reduce_cmd {cmd.name}: it takes reset_reduce, reduce or load_reduce")
    init = None if v.get("reduce_init") is None else per_partition(ctx, v["reduce_init"], x.shape[0],
                                                               "tensor_scalar_reduce", "reduce_init")
    acc = accumulate(ctx, "tensor_scalar_reduce", lanes(data), cmd, op, t, init)
    dst = destination(v, form, data.shape, dtype, data.dtype)
    write(ctx, dst, t)
    outs = [dst] + accumulator_out(ctx, "tensor_scalar_reduce", v["reduce_res"], acc, x.shape[0],
                                   bool(v.get("reduce_res_negate")))
    c.issue(outs, [data], flops=2 * x.size, cycles=cost_elementwise(data) + 64,
              op0=op_name(v["op0"]), reduce_op=op, reduce_cmd=cmd.name)
    return dst


@instruction("exponential", engine="vector", since=4, assumptions=("vector_reduce_order",), forms=[
    Form("current", "dst: tensor, src: tensor, max_value: value? = 0.0, reduce_res: tensor? = None,"
                     "reduce_cmd = reduce_cmd.idle, reduce_init: value? = 0.0")])
def exponential(c: Call) -> Any:
    """dst = exp(src - max_value) on the Vector engine, NeuronCore-v4 and newer (nki.isa.exponential
    docstring; trainium3_arch.rst, "Fast Exponential Evaluation"): "in float32 precision
    internally", the subtraction one fp32 rounding, exp by the platform's function model (fp32,
    correctly rounded, as activation's: the Vector engine's accuracy is not published).
    ``max_value`` a number or a (P, 1) tile. ``reduce_cmd`` drives the Vector accumulator shared with
    tensor_scalar_reduce and the selects (reset_reduce, reduce, load_reduce from ``reduce_init``;
    idle leaves it undefined), adding each result ("accumulator += dst[i]", read as the fp32
    result before dst's cast, as tensor_scalar_reduce's); ``reduce_res`` [P, 1] receives it."""
    ctx, v = c.ctx, c.args
    src, dst = as_tensor(v["src"], "src"), as_tensor(v["dst"], "dst")
    x = flat(read(ctx, src, "src", rows=True))
    if dst.shape[0] != src.shape[0] or dst.size != src.size:
        raise shape_fault(ctx, "exponential", f"dst {dst.name} {dst.shape} and src {src.name} {src.shape} differ in "
                                              "partitions or elements per partition")
    m = per_partition(ctx, 0.0 if v["max_value"] is None else v["max_value"], x.shape[0], "exponential", "max_value")
    y = _numerics.function_fp32("exp", alu("subtract", x, m))  # the one ALU path: fp32 (binary64 in Run.exact)
    cmd = command(v["reduce_cmd"])
    if cmd == Cmd.reset:
        constraint(ctx, "exponential", "reduce_cmd reset: it takes idle, reset_reduce, reduce or load_reduce")
    init = v["reduce_init"]
    if cmd != Cmd.load_reduce and (isinstance(init, Tensor) or init not in (None, 0.0, 0)):
        constraint(ctx, "exponential", f"reduce_init={init!r} with reduce_cmd {cmd.name}: it is 0.0 unless "
                                       "reduce_cmd is load_reduce")
    loaded = per_partition(ctx, init, x.shape[0], "exponential", "reduce_init") if cmd == Cmd.load_reduce else None
    acc = accumulate(ctx, "exponential", lanes(src), cmd, "add", y, loaded)
    write(ctx, dst, y.reshape(dst.shape) if y.shape != dst.shape else y)
    outs = [dst] + accumulator_out(ctx, "exponential", v["reduce_res"], acc, x.shape[0])
    srcs = [src] + ([v["max_value"]] if isinstance(v["max_value"], Tensor) else [])
    c.issue(outs, srcs, flops=2 * x.size, cycles=cost_elementwise(src), function="exp", reduce_cmd=cmd.name)
    return dst
