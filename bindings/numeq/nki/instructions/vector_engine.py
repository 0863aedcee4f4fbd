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
from ..machine.alu import INTEGER_NATIVE, alu, bitvec_alu, integer_alu, into_integer, is_bitvec, is_unary, op_name
from ..machine.context import KernelFault, where
from ..machine.memory import WRITER_MEMSET, WRITER_OTHER, Tensor
from .access import as_tensor, cost_elementwise, new_tile, read, write
from .forms import Form
from .operands import constraint, shape_fault
from .path import Call
from .table import instruction

_ELEMENTWISE_ENGINES = ("vector", "scalar", "gpsimd")
# The operator pairs (op0, op1) NeuronCore-v3's Scalar engine runs tensor_scalar with.
_SCALAR_V3_OPERATORS = {("multiply", "add"), ("multiply",), ("add",)}


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
    if eng == "scalar" and ctx.target.generation == 2 and ctx.language == "current":
        # The current docstring: "On NeuronCore v2, tensor_copy is not supported on the Scalar
        # Engine. Instead, use nisa.activation with op=nl.copy" (SDK 2.26's: it copies through fp32).
        constraint(ctx, "tensor_copy", "NeuronCore-v2's Scalar engine does not run tensor_copy in the current "
                   "interface; use nisa.activation(op=nl.copy)")
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


@instruction("tensor_tensor", engine="unknown", one_psum=("data1", "data2"), engines=_ELEMENTWISE_ENGINES,
             mask="elements", assumptions=("integer_overflow",), forms=[
    Form("current", "dst: tensor, data1: tensor, data2: tensor, op: op"),
    Form("0.1.0", "data1: tensor, data2: tensor, op: op", returns=True)])
def tensor_tensor(c: Call) -> Any:
    """dst = data1 <op> data2, elementwise (nki.isa.tensor_tensor). data1, data2 and dst have "the
    same partition axis size and the same number of elements per partition". Arithmetic operators
    compute in fp32 and cast into dst, except where data1, data2 and dst are all int32 / uint32 on
    GpSimd: native integer arithmetic, exact (``machine.alu.integer_alu``; a result outside dst's
    range as assumption ``integer_overflow`` says). Without ``engine=`` such tiles run on GpSimd
    unless one is in PSUM (then the Vector engine, in fp32), ``nl.power`` runs on GpSimd, the rest
    on the Vector engine. Bitvec operators act on the integer tiles' bit patterns."""
    ctx, vals, dst = c.ctx, c.args, c.args.get("dst")
    d1, d2 = as_tensor(vals["data1"], "data1"), as_tensor(vals["data2"], "data2")
    op = op_name(vals["op"])  # once: the ALU, the PSUM-group pattern and the trace read it
    if dst is None:
        dst = new_tile(d1.shape, c.dtype or d1.dtype)
    dst = as_tensor(dst, "dst")
    _same_elements(ctx, d1, d2, dst)
    if is_unary(op):  # computed on data1 (data2 unread but for the checks)
        constraint(ctx, "tensor_tensor", f"op {op} takes one operand; tensor_tensor takes a binary operator (a unary "
                   "one goes to tensor_scalar with operand0=None, or activation)")
    eng = c.engine if c.engine != "unknown" else _tensor_tensor_engine(op, d1, d2, dst)
    _rules.check_engine_access(ctx, eng, [d1, d2, dst], "tensor_tensor")
    if is_bitvec(op) and _integer(ctx, "tensor_tensor", op, (("data1", d1), ("data2", d2), ("dst", dst))):
        x, y = _patterns(ctx, d1, "data1", eng), _patterns(ctx, d2, "data2", eng)
        if y.shape != x.shape and y.size == x.size:
            y = y.reshape(x.shape)
        bits = 8 * max(d1.dtype.itemsize, d2.dtype.itemsize)
        _shift_counts(ctx, "tensor_tensor", op, y, bits)
        _write_integers(ctx, dst, bitvec_alu(op, x, y, bits), "wrap")
    elif eng == "gpsimd" and op in INTEGER_NATIVE and all(t.dtype.name in _INT32 for t in (d1, d2, dst)):
        x, y = _integers(ctx, d1, "data1", eng), _integers(ctx, d2, "data2", eng)
        if y.shape != x.shape and y.size == x.size:
            y = y.reshape(x.shape)
        _write_integers(ctx, dst, integer_alu(op, x, y), ctx.assumptions["integer_overflow"])
    else:
        x, y = read(ctx, d1, "data1", eng, rows=True), read(ctx, d2, "data2", eng, rows=True)
        if y.shape != x.shape and y.size == x.size:
            y = y.reshape(x.shape)
        result = alu(op, x, y)
        _group_sum(ctx, op, dst, d1, d2)
        write(ctx, dst, result)
    c.issue([dst], [d1, d2], flops=dst.size, cycles=cost_elementwise(dst), engine=eng, op=op)
    return dst


_INT32 = ("int32", "uint32")


def _tensor_tensor_engine(op: str, d1: Tensor, d2: Tensor, dst: Tensor) -> str:
    """The engine of a tensor_tensor without ``engine=`` (nki.isa.tensor_tensor docstring): int32 /
    uint32 tiles "default to GpSimd Engine, which uses native integer arithmetic", falling back to
    the Vector engine "when any operand resides in PSUM"; nl.power "runs on the GpSimd engine";
    everything else on the Vector engine."""
    if op in ("power", "pow"):
        return "gpsimd"
    if d1.dtype.kind != "int":  # float data: the Vector engine (the common case, decided at once)
        return "vector"
    tiles = (d1, d2, dst)
    if not is_bitvec(op) and all(t.dtype.name in _INT32 for t in tiles) \
            and not any(t.base.memory.name == "psum" for t in tiles):
        return "gpsimd"
    return "vector"


def _same_elements(ctx: Any, d1: Tensor, d2: Tensor, dst: Tensor) -> None:
    """"The two tiles must have the same partition axis size and the same number of elements per
    partition" (nki.isa.tensor_tensor docstring), and dst, the elementwise result, as well. The
    older interface's tile operators (``a + b`` of numeq's front, which broadcasts as numpy does)
    call it with broadcastable operands: the check is for the kernel's own calls."""
    if ctx.at is None or d1.shape == d2.shape == dst.shape:  # equal shapes: the same layout at once
        return

    def layout(t: Tensor) -> tuple[int, int]:
        return (t.shape[0] if t.ndim else 1), t.free_size()
    (p1, f1), (p2, f2), (pd, fd) = layout(d1), layout(d2), layout(dst)
    if (p1, f1) != (p2, f2):
        raise shape_fault(ctx, "tensor_tensor", f"data1 {d1.name} {list(d1.shape)} ({p1} partitions x {f1} elements) "
                                                f"and data2 {d2.name} {list(d2.shape)} ({p2} x {f2}) differ; the two "
                                                "tiles have the same partition axis size and the same number of "
                                                "elements per partition (tensor_scalar broadcasts a [P, 1] operand)")
    if (pd, fd) != (p1, f1):
        raise shape_fault(ctx, "tensor_tensor", f"dst {dst.name} {list(dst.shape)} ({pd} partitions x {fd} elements) "
                                                f"does not hold the elementwise result of data1 {d1.name} "
                                                f"{list(d1.shape)} and data2 {d2.name} {list(d2.shape)} ({p1} x {f1})")


def _integer(ctx: Any, instruction: str, op: str, tiles: tuple) -> bool:
    """Whether every tile of a bitvec operation is of an integer dtype; where one is not, a finding
    (nki.api.shared.rst: bitvec operators "expect integer data types and treat input elements as
    bit patterns"; numeq then acts on the tiles' fp32 values as integers, as before)."""
    floats = [f"{p} {t.name} is {t.dtype}" for p, t in tiles if isinstance(t, Tensor) and t.dtype.kind != "int"]
    if floats:
        constraint(ctx, instruction, f"the bitvec operator {op} takes integer tiles; {', '.join(floats)}",
                   "documented: nki.isa docs, supported math operators (bitvec operators: integer dtypes, bit "
                   "patterns)")
    return not floats


def _integers(ctx: Any, t: Tensor, parameter: str, eng: str) -> np.ndarray:
    """An integer tile's stored integers as int64 (after the checks ``read`` makes)."""
    read(ctx, t, parameter, eng, rows=True)
    return t.data.astype(np.int64)


def _patterns(ctx: Any, t: Tensor, parameter: str, eng: str) -> np.ndarray:
    """An integer tile's stored bit patterns as non-negative int64 ("bit patterns without any data
    type casting": an int8 -1 is 0xff), after the checks ``read`` makes."""
    read(ctx, t, parameter, eng, rows=True)
    data = t.data
    return data.view(np.dtype(f"u{data.dtype.itemsize}")).astype(np.int64)


def _shift_counts(ctx: Any, instruction: str, op: str, counts: Any, bits: int) -> None:
    """Shift counts outside 0..bits-1 (a negative count read as its pattern): nothing documents
    the result."""
    if op not in ("left_shift", "right_shift", "logical_shift_right", "arith_shift_right"):
        return
    counts = np.asarray(counts, dtype=np.int64)
    if counts.size and (counts.min() < 0 or counts.max() >= bits):
        constraint(ctx, instruction, f"{op} by {int(counts.min())}..{int(counts.max())} bits of {bits}-bit patterns: counts outside "
                   f"0..{bits - 1} have no documented result (numeq shifts every bit out)",
                   "documented: nki.language left_shift / right_shift (no result stated for such counts)")


def _write_integers(ctx: Any, dst: Tensor, values: np.ndarray, overflow: str) -> None:
    """Exact integer results into dst: its integers (low bits kept, or saturated), or, into a
    float dst, the values cast as any other write."""
    if dst.dtype.kind == "int":
        if values.shape != dst.shape and values.size == dst.size:
            values = values.reshape(dst.shape)
        write(ctx, dst, None, bits=into_integer(values, dst.dtype, overflow))
    else:
        write(ctx, dst, np.asarray(values, dtype=np.float64))


def _group_sum(ctx: Any, op: str, dst: Tensor, d1: Tensor, d2: Tensor) -> None:
    """Record the PSUM-group pattern: an SBUF accumulator += a PSUM tile of chained matmuls (the
    run's platform then states psum_group and the accumulator's dtype)."""
    if op != "add" or dst.base.memory.name != "sbuf":
        return
    for acc, group in ((d1, d2), (d2, d1)):
        if group.base.memory.name == "psum" and acc.base is dst.base and acc.element_offset() == dst.element_offset():
            length = ctx.psum_chain.get((group.base.id, group.element_offset()))
            if length:
                ctx.psum_groups.append((length, dst.dtype.format, ctx.at or where()))


def scalar_operand(ctx: Any, operand: Any, shape: tuple, eng: str) -> Any:
    """A tensor_scalar operand: a Python / numpy scalar, or a [P, 1] tensor broadcast along the
    free axis (a per-partition scalar); None (a unary operator's) reads as 0."""
    if isinstance(operand, Tensor):
        v = read(ctx, operand, "operand", eng, rows=True)
        return v.reshape(v.shape[0], *([1] * (len(shape) - 1))) if v.ndim else v
    # An immediate is an fp32 value on the engines; the exact dataflow keeps the kernel's constant.
    return _numerics.compute_dtype(0 if operand is None else operand)


def _integer_operand(ctx: Any, operand: Any, shape: tuple, eng: str, parameter: str) -> Any:
    """A bitvec tensor_scalar operand as integers: an int, or a [P, 1] integer tile's stored
    integers broadcast along the free axis."""
    if isinstance(operand, Tensor):
        if operand.dtype.kind != "int":
            constraint(ctx, "tensor_scalar", f"the bitvec {parameter} {operand.name} is {operand.dtype}; bitvec "
                       "operators take integer data", _BITVEC_SOURCE)
            v = read(ctx, operand, parameter, eng, rows=True).astype(np.int64)
        else:
            v = _integers(ctx, operand, parameter, eng)
        return v.reshape(v.shape[0], *([1] * (len(shape) - 1))) if v.ndim else v
    if operand is None:
        return np.int64(0)
    if isinstance(operand, (float, np.floating)) and not float(operand).is_integer():
        constraint(ctx, "tensor_scalar", f"the bitvec {parameter} {operand!r} is not an integer", _BITVEC_SOURCE)
    return np.int64(int(operand))


_BITVEC_SOURCE = ("documented: nki.isa.tensor_scalar docstring (bitvec operators: Vector Engine, integer "
                  "input/output types, bit patterns)")


@instruction("tensor_scalar", engine="vector", engines=_ELEMENTWISE_ENGINES, mask="elements",
             assumptions=("tensor_scalar_fusion",), forms=[
    Form("current", "dst: tensor, data: tensor, op0: op, operand0: value?, reverse0 = False, op1: op? = None,"
                     "operand1: value? = None, reverse1 = False"),
    Form("0.1.0", "data: tensor, op0: op, operand0: value?, reverse0 = False, op1: op? = None,"
                     "operand1: value? = None, reverse1 = False", returns=True)])
def tensor_scalar(c: Call) -> Any:
    """dst = (data op0 operand0) op1 operand1, in fp32; ``reverse0`` / ``reverse1`` swap an
    operator's operands. Between the two operators the value is rounded to fp32 (assumption
    ``tensor_scalar_fusion``: ``rounded``, or ``fused``: one rounding of the exact result where
    both operators are + - or *). A unary operator (nl.abs ...) takes operand None or 0. Bitvec
    operators (both or neither, on the Vector engine) act on integer tiles' bit patterns and
    integer operands (nki.isa.tensor_scalar docstring)."""
    ctx, vals, dst = c.ctx, c.args, c.args.get("dst")
    data = as_tensor(vals["data"], "data")
    eng = c.engine
    ops = [op_name(vals["op0"], "op0")] + ([] if vals["op1"] is None else [op_name(vals["op1"], "op1")])
    for i, name in enumerate(ops):
        operand = vals[f"operand{i}"]
        if is_unary(name) and operand is not None and (isinstance(operand, Tensor) or operand != 0):
            constraint(ctx, "tensor_scalar", f"op{i} {name} takes one operand; operand{i} must be None or 0, got "
                       f"{operand.name if isinstance(operand, Tensor) else operand!r}")
        elif operand is None and not is_unary(name):
            raise TypeError(f"operand{i}: tensor_scalar's op{i} {name} takes an operand (a number or a "
                            f"[{data.shape[0] if data.ndim else 1}, 1] tile)")
    # nki.isa.tensor_scalar docstring: "The Scalar Engine on trn2 only supports some operator
    # combinations" (multiply then add, multiply alone, add alone); NeuronCore-v4's Scalar engine
    # takes tensor_scalar as the Vector engine does (trainium3_arch.rst, Performance mode).
    if eng == "scalar" and ctx.target.generation == 3 and tuple(ops) not in _SCALAR_V3_OPERATORS:
        constraint(ctx, "tensor_scalar", f"op0 {ops[0]}{', op1 ' + ops[1] if len(ops) > 1 else ''} on the Scalar "
                   f"engine: {ctx.target.core}'s takes op0 multiply with op1 add or none, or op0 add alone")
    bitvec = [is_bitvec(name) for name in ops]
    if dst is None:
        dst = new_tile(data.shape, c.dtype or data.dtype)
    dst = as_tensor(dst, "dst")
    if any(bitvec):
        if not all(bitvec):
            constraint(ctx, "tensor_scalar", f"op0 {ops[0]} and op1 {ops[1]} mix a bitvec and an arithmetic "
                       "operator; both must be of one type", _BITVEC_SOURCE)
        if eng != "vector":
            constraint(ctx, "tensor_scalar", f"bitvec operators run on the Vector engine, not {eng}", _BITVEC_SOURCE)
    if all(bitvec) and _integer(ctx, "tensor_scalar", ops[0], (("data", data), ("dst", dst))):
        # Patterns of data's width; an operand (an int, or a tile's integers) taken modulo 2^width.
        x = _patterns(ctx, data, "data", eng)
        bits = 8 * data.dtype.itemsize
        r = x
        for i, name in enumerate(ops):
            operand = _integer_operand(ctx, vals[f"operand{i}"], x.shape, eng, f"operand{i}")
            lhs, rhs = (operand, r) if vals[f"reverse{i}"] else (r, operand)
            _shift_counts(ctx, "tensor_scalar", name, rhs, bits)
            r = bitvec_alu(name, lhs, rhs, bits)
        _write_integers(ctx, dst, np.broadcast_to(r, x.shape), "wrap")
    else:
        x = read(ctx, data, "data", eng, rows=True)
        first = scalar_operand(ctx, vals["operand0"], x.shape, eng)
        r = alu(vals["op0"], first, x) if vals["reverse0"] else alu(vals["op0"], x, first)
        if vals["op1"] is not None:
            second = scalar_operand(ctx, vals["operand1"], x.shape, eng)
            if ctx.assumptions["tensor_scalar_fusion"] == "fused":
                r = _fused_two(vals, x, first, second, r)
            else:
                r = alu(vals["op1"], second, r) if vals["reverse1"] else alu(vals["op1"], r, second)
        write(ctx, dst, r)
    c.issue([dst], [data], flops=dst.size * (2 if vals["op1"] is not None else 1),
              cycles=cost_elementwise(dst), op0=ops[0], op1=ops[1] if len(ops) > 1 else None)
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