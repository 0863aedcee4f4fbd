"""The Vector engine's elementwise instructions and free-axis reductions (``tensor_copy``,
``memset``, ``tensor_tensor``, ``tensor_scalar``, ``tensor_reduce``, ``reciprocal``): rows of the
instruction table. The engines compute in fp32 and cast the result into dst's dtype (nki.isa docs);
+ - * / and comparisons are IEEE fp32 operations (``machine.alu``), free-axis sums follow the
platform's ``vector_reduce_order``. Where ``engine=`` is given the same arithmetic runs on GpSimd
or the Scalar engine.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..machine import arithmetic as _numerics
from ..machine import rules as _rules
from ..machine.alu import alu, op_name
from ..machine.context import KernelFault
from ..machine.memory import WRITER_MEMSET, WRITER_OTHER, Tensor
from .access import as_tensor, cost_elementwise, new_tile, read, write
from .forms import Form
from .path import Call
from .table import instruction

_ELEMENTWISE_ENGINES = ("vector", "scalar", "gpsimd")


@instruction("tensor_copy", engine="vector", engines=_ELEMENTWISE_ENGINES, mask="elements", forms=[
    Form("current", "dst: tensor, src: tensor"),
    Form("0.1.0", "src: tensor", returns=True)])
def tensor_copy(c: Call) -> Any:
    """dst = src on an engine: the same dtype copies the bits; another dtype casts through fp32
    with the output rounding (nki.isa.tensor_copy docs). Older form: ``tensor_copy(src, dtype=)``
    returns a new SBUF tile."""
    ctx, dst, src = c.ctx, c.args.get("dst"), c.args["src"]
    src = as_tensor(src, "src")
    if dst is None:
        dst = new_tile(src.shape, c.dtype or src.dtype)
    dst = as_tensor(dst, "dst")
    eng = c.engine
    _rules.check_engine_access(ctx, eng, [dst, src], "tensor_copy")
    if eng == "gpsimd" and src.base.memory.name == "psum":
        ctx.find("psum_gpsimd", "warning", f"tensor_copy on GpSimd evacuates {src.name} from PSUM",
                 "documented: NKI architecture guides (GpSimd has no PSUM port)")
    values = read(ctx, src, "src", eng, rows=True)
    if dst.dtype == src.dtype and not (eng == "scalar" and ctx.target.generation == 2):
        write(ctx, dst, None, bits=src.data)
    else:  # ScalarE on NeuronCore-v2 goes through fp32 even for the same dtype (nki.isa docs)
        write(ctx, dst, values)
    _rules.check_partitions_used(ctx, "tensor_copy", dst)
    c.issue([dst], [src], cycles=cost_elementwise(dst))
    return dst


@instruction("memset", engine="vector", engines=_ELEMENTWISE_ENGINES, assumptions=("memset_rounding",), forms=[
    Form("current", "dst: tensor, value: value = 0, dtype = None"),
    Form("0.1.0", "shape, value: value = 0, dtype = None", returns=True)])
def memset(c: Call) -> Any:
    """Every element of dst = value, cast into dst's dtype (nearest even: assumption
    ``memset_cast``). Older form ``memset(shape=, value=, dtype=)`` returns a new SBUF tile."""
    ctx, value = c.ctx, c.args["value"]
    if c.form.returns:
        dst = new_tile(tuple(c.args["shape"]), c.args["dtype"] or c.dtype or "float32")
    else:
        dst = c.args["dst"]
    code = WRITER_MEMSET if float(value) == 0.0 else WRITER_OTHER
    if dst.dtype.kind == "int":
        write(ctx, dst, np.full(dst.shape, float(value)), code)
    else:
        # The value as an exact double, rounded once into dst's dtype (assumption memset_rounding).
        rounded = _numerics.cast_into(np.full(dst.shape, float(value)), dst.dtype, ctx.assumptions["memset_rounding"])
        write(ctx, dst, None, code, bits=rounded)
    c.issue([dst], [], cycles=cost_elementwise(dst))
    return dst


@instruction("tensor_tensor", engine="vector", one_psum=("data1", "data2"), engines=_ELEMENTWISE_ENGINES,
             mask="elements", forms=[
    Form("current", "dst: tensor, data1: tensor, data2: tensor, op: op"),
    Form("0.1.0", "data1: tensor, data2: tensor, op: op", returns=True)])
def tensor_tensor(c: Call) -> Any:
    """dst = data1 <op> data2, elementwise in fp32, cast into dst (nki.isa.tensor_tensor)."""
    ctx, vals, dst, op = c.ctx, c.args, c.args.get("dst"), c.args["op"]
    d1, d2 = as_tensor(vals["data1"], "data1"), as_tensor(vals["data2"], "data2")
    eng = c.engine
    _rules.check_engine_access(ctx, eng, [d1, d2] + ([dst] if isinstance(dst, Tensor) else []), "tensor_tensor")
    x, y = read(ctx, d1, "data1", eng, rows=True), read(ctx, d2, "data2", eng, rows=True)
    if y.shape != x.shape and y.size == x.size:
        y = y.reshape(x.shape)
    op = op_name(op)  # once: the ALU, the PSUM-group pattern and the trace read it
    result = alu(op, x, y)
    if dst is None:
        dst = new_tile(d1.shape, c.dtype or d1.dtype)
    dst = as_tensor(dst, "dst")
    _group_sum(ctx, op, dst, d1, d2)
    write(ctx, dst, result)
    c.issue([dst], [d1, d2], flops=dst.size, cycles=cost_elementwise(dst), op=op)
    return dst


def _group_sum(ctx: Any, op: str, dst: Tensor, d1: Tensor, d2: Tensor) -> None:
    """Record the PSUM-group pattern: an SBUF accumulator += a PSUM tile of chained matmuls (the
    run's platform then states psum_group and the accumulator's dtype)."""
    if op != "add" or dst.base.memory.name != "sbuf":
        return
    for acc, group in ((d1, d2), (d2, d1)):
        if group.base.memory.name == "psum" and acc.base is dst.base and acc.element_offset() == dst.element_offset():
            length = ctx.psum_chain.get((group.base.id, group.element_offset()))
            if length:
                ctx.psum_groups.append((length, dst.dtype.format))


def scalar_operand(ctx: Any, operand: Any, shape: tuple, eng: str) -> Any:
    """A tensor_scalar operand: a Python / numpy scalar, or a [P, 1] tensor broadcast along the
    free axis (a per-partition scalar)."""
    if isinstance(operand, Tensor):
        v = read(ctx, operand, "operand", eng, rows=True)
        return v.reshape(v.shape[0], *([1] * (len(shape) - 1))) if v.ndim else v
    return np.float32(operand)


@instruction("tensor_scalar", engine="vector", engines=_ELEMENTWISE_ENGINES, mask="elements",
             assumptions=("tensor_scalar_fusion",), forms=[
    Form("current", "dst: tensor, data: tensor, op0: op, operand0: value, reverse0 = False, op1: op? = None,"
                     "operand1: value? = None, reverse1 = False"),
    Form("0.1.0", "data: tensor, op0: op, operand0: value, reverse0 = False, op1: op? = None,"
                     "operand1: value? = None, reverse1 = False", returns=True)])
def tensor_scalar(c: Call) -> Any:
    """dst = (data op0 operand0) op1 operand1, in fp32; ``reverse0`` / ``reverse1`` swap an
    operator's operands. Between the two operators the value is rounded to fp32 (assumption
    ``tensor_scalar_fusion``: ``rounded``, or ``fused``: one rounding of the exact result where
    both operators are + - or *)."""
    ctx, vals, dst = c.ctx, c.args, c.args.get("dst")
    data = as_tensor(vals["data"], "data")
    eng = c.engine
    x = read(ctx, data, "data", eng, rows=True)
    first = scalar_operand(ctx, vals["operand0"], x.shape, eng)
    r = alu(vals["op0"], first, x) if vals["reverse0"] else alu(vals["op0"], x, first)
    if vals["op1"] is not None:
        second = scalar_operand(ctx, vals["operand1"], x.shape, eng)
        if ctx.assumptions["tensor_scalar_fusion"] == "fused":
            r = _fused_two(vals, x, first, second, r)
        else:
            r = alu(vals["op1"], second, r) if vals["reverse1"] else alu(vals["op1"], r, second)
    if dst is None:
        dst = new_tile(data.shape, c.dtype or data.dtype)
    dst = as_tensor(dst, "dst")
    write(ctx, dst, r)
    c.issue([dst], [data], flops=dst.size * (2 if vals["op1"] is not None else 1),
              cycles=cost_elementwise(dst), op0=op_name(vals["op0"]),
              op1=None if vals["op1"] is None else op_name(vals["op1"]))
    return dst

def _fused_two(vals: dict, x: np.ndarray, a: Any, b: Any, rounded: np.ndarray) -> np.ndarray:
    """(x op0 a) op1 b with one rounding, where both operators are add, subtract or multiply: the
    exact value as binary64 terms (a product of fp32 values is exact in binary64; a product of
    three is split first), rounded once by ``sum_rounded``. Other operators keep the rounded
    step (``rounded`` is x op0 a in fp32)."""
    ops = (op_name(vals["op0"]), op_name(vals["op1"]))
    if not set(ops) <= {"add", "subtract", "multiply"}:
        return alu(vals["op1"], b, rounded) if vals["reverse1"] else alu(vals["op1"], rounded, b)
    x64, a64, b64 = (np.asarray(v, dtype=np.float64) for v in (x, a, b))
    first = {"multiply": [x64 * a64], "add": [x64, a64],
             "subtract": [a64, -x64] if vals["reverse0"] else [x64, -a64]}[ops[0]]
    if ops[1] == "multiply":
        terms = [term for t in first for term in _numerics.split_times(t, b64)]
    elif ops[1] == "add":
        terms = first + [b64]
    else:
        terms = [-t for t in first] + [b64] if vals["reverse1"] else first + [-b64]
    return _numerics.sum_rounded(terms)


@instruction("tensor_reduce", engine="vector", engines=_ELEMENTWISE_ENGINES, mask="rows",
             assumptions=("vector_reduce_order",), sums="op", forms=[
    Form("current", "dst: tensor, op: op, data: tensor, axis, *, negate = False, keepdims = False"),
    Form("0.1.0", "op: op, data: tensor, axis, *, negate = False, keepdims = False", returns=True)])
def tensor_reduce(c: Call) -> Any:
    """dst = reduce(op, data, axis) over free axes, in fp32: sums in the platform's order
    (``vector_reduce_order``), max / min exactly; ``negate`` negates the result."""
    ctx, vals, dst, negate, keepdims = c.ctx, c.args, c.args.get("dst"), c.args["negate"], c.args["keepdims"]
    data = as_tensor(vals["data"], "data")
    eng = c.engine
    x = read(ctx, data, "data", eng, rows=True)
    axes = vals["axis"]
    axes = tuple(a % x.ndim for a in ((axes,) if isinstance(axes, int) else tuple(axes)))
    if 0 in axes:
        raise KernelFault(ctx.find("shape_mismatch", "error", "tensor_reduce reduces free axes only; axis 0 is the "
                                   "partition axis (use tensor_partition_reduce or a matmul)",
                                   "documented: nki.isa.tensor_reduce docstring"))
    kept = [i for i in range(x.ndim) if i not in axes]
    moved = np.transpose(x, kept + list(axes)).reshape([x.shape[i] for i in kept] + [-1])
    r = _numerics.reduce_fp32(moved, op_name(vals["op"]), ctx.sum_platform())
    if negate:
        r = np.negative(r)
    if keepdims:
        r = r.reshape([1 if i in axes else x.shape[i] for i in range(x.ndim)])
    if dst is None:
        dst = new_tile(r.shape if r.ndim else (1,), c.dtype or data.dtype)
    dst = as_tensor(dst, "dst")
    write(ctx, dst, r)
    c.issue([dst], [data], flops=data.size, cycles=cost_elementwise(data),
              op=op_name(vals["op"]))
    return dst


@instruction("reciprocal", engine="vector", mask="elements", forms=[
    Form("current", "dst: tensor, data: tensor"),
    Form("0.1.0", "data: tensor", returns=True)])
def reciprocal(c: Call) -> Any:
    """dst = 1 / data in fp32 (the Vector engine's reciprocal: correctly rounded here; the
    hardware's error is the platform's function budget)."""
    ctx, dst, data = c.ctx, c.args.get("dst"), c.args["data"]
    x = read(ctx, data, "data", rows=True)
    y = _numerics.function_fp32("reciprocal", x)
    if dst is None:
        dst = new_tile(data.shape, c.dtype or data.dtype)
    dst = as_tensor(dst, "dst")
    write(ctx, dst, y)
    c.issue([dst], [data], flops=dst.size, cycles=cost_elementwise(dst))
    return dst