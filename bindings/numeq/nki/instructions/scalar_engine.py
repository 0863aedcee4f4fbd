"""The Scalar (activation) engine's instructions: ``activation``, ``activation_reduce`` and
NeuronCore-v4's ``activate2``: rows of the instruction table. Functions by the platform's function model (fp32 correctly rounded; the
``scalar_activation_ulps`` budget bounds the hardware's difference).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..machine import arithmetic as _numerics
from ..machine import rules as _rules
from ..machine.alu import alu, op_name
from ..machine.context import KernelFault
from ..machine.memory import Tensor
from ..machine.registers import Cmd, accumulate, command, vector_accumulator
from .access import as_tensor, cost_elementwise, new_tile, read, write
from .forms import Form
from .operands import constraint, lanes, reduce_name
from .path import Call, call
from .table import instruction
from .vector_engine import scalar_operand


@instruction("activation", engine="scalar", mask="elements", assumptions=("activation_affine",),
             sums="reduce_op", forms=[
    Form("current", "dst: tensor, op: op, data: tensor, *, bias: value? = None, scale: value = 1.0,"
                     "reduce_op: op? = None, reduce_res: tensor? = None, reduce_cmd = None"),
    Form("0.1.0", "op: op, data: tensor, *, bias: value? = None, scale: value = 1.0, reduce_op: op? = None,"
                     "reduce_res: tensor? = None, reduce_cmd = None", returns=True)])
def activation(c: Call) -> Any:
    """dst = f(data * scale + bias) on the Scalar engine: ``scale`` a number or a [P, 1] tensor,
    ``bias`` a [P, 1] tensor; f by the platform's function model (fp32 correctly rounded; the
    ``scalar_activation_ulps`` budget bounds the hardware's difference). Between ``data * scale``
    and ``+ bias``: assumption ``activation_affine`` (``rounded``: each rounded to fp32; ``fused``:
    one rounding). ``reduce_cmd`` drives the Scalar engine's per-partition registers (reset, reduce:
add each partition's results, reset_reduce; idle by default) and ``reduce_res`` receives them."""
    ctx, vals, dst = c.ctx, c.args, c.args.get("dst")
    scale, bias = vals["scale"], vals["bias"]
    reduce_op, reduce_res, reduce_cmd = vals["reduce_op"], vals["reduce_res"], vals["reduce_cmd"]
    data = as_tensor(vals["data"], "data")
    fname = op_name(vals["op"])
    x = read(ctx, data, "data", "scalar", rows=True)
    s = scalar_operand(ctx, scale, x.shape, "scalar")
    b = scalar_operand(ctx, bias, x.shape, "scalar") if bias is not None else None
    if ctx.assumptions["activation_affine"] == "fused" and b is not None:
        # x * scale is exact in binary64 (fp32 operands); one rounding of it plus the bias.
        arg = _numerics.sum_rounded([x.astype(np.float64) * np.asarray(s, dtype=np.float64), b]).reshape(x.shape)
    else:
        arg = x if (np.isscalar(s) and s == 1.0) else alu("multiply", x, s)
        if b is not None:
            arg = alu("add", arg, b)
    y = _function(ctx, fname, arg)
    if dst is None:
        dst = new_tile(data.shape, c.dtype or data.dtype)
    dst = as_tensor(dst, "dst")
    write(ctx, dst, y)
    srcs = [data]
    outs = [dst]
    if reduce_op is not None or reduce_res is not None or reduce_cmd not in (None, "idle"):
        outs += _scalar_registers(ctx, dst, y, reduce_op, reduce_res, reduce_cmd)
    reduce = {"reduce": op_name(reduce_op)} if reduce_op is not None else {}
    c.issue(outs, srcs, flops=dst.size, cycles=cost_elementwise(dst), function=fname,
              **reduce)
    return dst

def _function(ctx: Any, fname: str, arg: np.ndarray) -> np.ndarray:
    """Activation function ``fname`` of fp32 ``arg`` by the platform's function model, its
    documented valid range checked first (activation_range)."""
    _rules.check_activation_range(ctx, fname, arg)
    try:
        return _numerics.function_fp32(fname, arg)
    except KeyError:
        raise ctx.unsupported(f"the activation function {fname!r} (known: {', '.join(_numerics.function_names())})") \
            from None


def _scalar_registers(ctx: Any, dst: Tensor, y: np.ndarray, reduce_op: Any, reduce_res: Any, reduce_cmd: Any) -> list:
    """activation's reduction (nki.isa.activation pseudocode): reset / reset_reduce zero the
    Scalar engine's per-partition fp32 registers, reduce / reset_reduce add each partition's
    results to them (sums in the platform's vector_reduce_order), and reduce_res, if given,
    receives the registers [P, 1]. The registers persist across activation instructions."""
    op = op_name(reduce_op) if reduce_op is not None else "add"
    if op != "add":
        raise ctx.unsupported(f"activation's reduce_op {op!r} (the docs take nl.add)")
    cmd = command("idle" if reduce_cmd is None else reduce_cmd)
    rows = lanes(dst)
    accumulate(ctx, "activation", rows, cmd, op, y.reshape(y.shape[0], -1), engine="scalar")
    if reduce_res is None:
        return []
    return _registers_out(ctx, reduce_res, rows, "activation")


@instruction("activation_reduce", engine="scalar", assumptions=("activation_affine",), sums="reduce_op", forms=[
    Form("current", "dst: tensor, op: op, data: tensor, reduce_op: op, reduce_res: tensor, bias: value? = None,"
                     "scale: value = 1.0"),
    Form("0.1.0", "op: op, data: tensor, *, reduce_op: op, reduce_res: tensor, bias: value? = None,"
                     "scale: value = 1.0", returns=True)])
def activation_reduce(c: Call) -> Any:
    """dst = op(data * scale + bias) on the Scalar engine and reduce_res[P, 1] = reduce_op of each
    partition's fp32 results (nki.isa activation_reduce docstring: activation with
    reduce_cmd=reset_reduce); the arithmetic is ``isa.activation``'s. On NeuronCore-v2 reduce_op
    must be add."""
    ctx, form, v, dtype = c.ctx, c.form, c.args, c.dtype
    op = reduce_name(v["reduce_op"], "reduce_op")
    if ctx.target.generation == 2 and op != "add":
        constraint(ctx, "activation_reduce", f"reduce_op {op}: NeuronCore-v2 reduces with add only")
    data = as_tensor(v["data"], "data")
    common = dict(op=v["op"], data=data, bias=v["bias"], scale=v["scale"], reduce_op=op,
                  reduce_res=v["reduce_res"], reduce_cmd="reset_reduce")
    dst = call("activation", **common, dtype=dtype) if form.returns else call("activation", dst=v["dst"], **common)
    ins = ctx.trace[-1]
    ins.name = "activation_reduce"
    ins.cycles += 64  # max(MIN_II, N) + MIN_II (SDK 2.26 activation_reduce docstring)
    return dst


# activate2's tensor-scalar stage: "The tensor-scalar stage supports six (op0, op1) combinations".
_ACTIVATE2_PAIRS = {("multiply", "add"), ("multiply", "subtract"), ("multiply", "bypass"), ("add", "bypass"),
                    ("subtract", "bypass"), ("bypass", "bypass")}
_ACTIVATE2_REDUCE = {"add": ("add", False), "maximum": ("maximum", False), "minimum": ("minimum", False),
                     "abs_max": ("maximum", True), "abs_min": ("minimum", True)}


@instruction("activate2", engine="scalar", since=4, assumptions=("vector_reduce_order",), forms=[
    Form("current", "dst: tensor, op: op, data: tensor, imm0: value?, imm1: value?, op0: op?, op1: op?,"
                    "relu_param: value = 0.0, reverse0 = False, reverse1 = False, reduce_op: op? = None,"
                    "reduce_res: tensor? = None, reduce_cmd = reduce_cmd.idle")])
def activate2(c: Call) -> Any:
    """dst = op((data <op0> imm0) <op1> imm1) on the Scalar engine, NeuronCore-v4 and newer
    (nki.isa.activate2 docstring), "math in float32 precision": each tensor-scalar step one fp32
    operation (``reverse0`` / ``reverse1``: the immediate on the left), ``op`` by the platform's
    function model, then the Scalar engine's accumulator registers (shared with ``activation``)
    driven by ``reduce_cmd`` with ``reduce_op`` (add, maximum, minimum, and abs_max / abs_min: the
    maximum / minimum of the results' magnitudes), ``reduce_res`` [P, 1] receiving them. The
    docstring's constraints (the six (op0, op1) pairs, op1 and the reverses needing their op) are
    ``instruction_constraint`` errors; ``relu_param`` feeds parameterized functions, which numeq's
    function model does not have (a nonzero one is refused)."""
    ctx, v = c.ctx, c.args
    data, dst = as_tensor(v["data"], "data"), as_tensor(v["dst"], "dst")
    op0 = "bypass" if v["op0"] is None else op_name(v["op0"])
    op1 = "bypass" if v["op1"] is None else op_name(v["op1"])
    if v["op1"] is not None and v["op0"] is None:
        constraint(ctx, "activate2", "op1 is set without op0 (\"op1 requires op0 to be set\")")
    for flag, which, given in (("reverse0", "op0", v["op0"]), ("reverse1", "op1", v["op1"])):
        if v[flag] and given is None:
            constraint(ctx, "activate2", f"{flag}=True without {which} (\"{flag} requires {which} to be set\")")
    if (op0, op1) not in _ACTIVATE2_PAIRS:
        constraint(ctx, "activate2", f"(op0, op1) = ({op0}, {op1}); the tensor-scalar stage takes "
                                     + ", ".join(f"({a}, {b})" for a, b in sorted(_ACTIVATE2_PAIRS)))
    if data.shape[0] != dst.shape[0] or data.free_size() != dst.free_size():
        constraint(ctx, "activate2", f"data {data.name} {data.shape} and dst {dst.name} {dst.shape}: the same "
                                     "partitions and elements per partition")
    relu = v["relu_param"]
    if isinstance(relu, Tensor) or float(relu) != 0.0:
        raise ctx.unsupported("activate2's relu_param (parameterized activation functions)")
    x = read(ctx, data, "data", "scalar", rows=True)
    t = x
    for op, imm, reverse in ((op0, v["imm0"], v["reverse0"]), (op1, v["imm1"], v["reverse1"])):
        if op == "bypass":
            continue
        k = scalar_operand(ctx, imm, x.shape, "scalar")
        t = alu(op, k, t) if reverse else alu(op, t, k)
    fname = op_name(v["op"])
    y = _function(ctx, fname, t)
    write(ctx, dst, y.reshape(dst.shape) if y.shape != dst.shape else y)
    outs = [dst]
    cmd = command(v["reduce_cmd"])
    if v["reduce_op"] is not None or v["reduce_res"] is not None or cmd != Cmd.idle:
        name = op_name(v["reduce_op"]) if v["reduce_op"] is not None else "add"
        if name not in _ACTIVATE2_REDUCE:
            raise KernelFault(ctx.find("instruction_constraint", "error", f"activate2: reduce_op {name}; supported: "
                                       f"{', '.join(_ACTIVATE2_REDUCE)}", "documented: nki.isa.activate2 docstring"))
        op, magnitude = _ACTIVATE2_REDUCE[name]
        values = y.reshape(y.shape[0], -1)
        accumulate(ctx, "activate2", lanes(dst), cmd, op, np.abs(values) if magnitude else values, engine="scalar")
        if v["reduce_res"] is not None:
            outs += _registers_out(ctx, v["reduce_res"], lanes(dst), "activate2")
    c.issue(outs, [data], flops=3 * dst.size, cycles=cost_elementwise(dst), function=fname)
    return dst


def _registers_out(ctx: Any, reduce_res: Any, rows: np.ndarray, instruction: str) -> list:
    """The Scalar engine's registers of lanes ``rows`` into ``reduce_res`` [P, 1]."""
    red = as_tensor(reduce_res, "reduce_res")
    acc = vector_accumulator(ctx, "scalar")
    if not acc.defined[rows].all():
        ctx.find("accumulator_undefined", "error", f"{instruction} writes reduce_res from the Scalar engine's "
                 "registers, which no instruction has reset (reduce_cmd=reset_reduce)",
                 f"documented: nki.isa.{instruction} docstring (reduce_cmd defaults to idle; reduce_res receives the "
                 "registers)")
    regs = np.where(acc.defined[rows], acc.values[rows], np.float32(np.nan)).astype(_numerics.compute_dtype)
    write(ctx, red, regs.reshape(-1, 1))
    return [red]


# --- nki.language's tile functions that are not one activation -------------------------------------
def _language_function(c: Call) -> Tensor:
    """dst = nl.<name>(x): the value correctly rounded to fp32 (machine.arithmetic's
    language_function_fp32, numeq's certified references), cast into dst; on the Scalar engine as
    an instruction sequence AWS does not document (nl.sin docs: it "applies additional instructions
    to perform range reduction before the activation, so it stays accurate over the full input
    domain"). The older interface's ``nl.sin(x, dtype=, mask=)`` (front.tiles) calls it."""
    ctx, dst, x = c.ctx, as_tensor(c.args["dst"], "dst"), as_tensor(c.args["x"], "x")
    write(ctx, dst, _numerics.language_function_fp32(c.spec.name, read(ctx, x, "x", "scalar", rows=True)))
    c.issue([dst], [x], flops=dst.size, cycles=cost_elementwise(dst), function=c.spec.name)
    return dst


for _name in ("sin", "cos", "tan", "arctan", "ceil", "floor", "trunc"):
    instruction(_name, engine="scalar", module="nki.language", public=False, source="nki.language API reference",
                forms=[Form("current", "dst: tensor, x: tensor")])(_language_function)
