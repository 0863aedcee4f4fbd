"""``Run.bound()``: a per-element bound on |outputs - the kernel's exact dataflow|, walked over the
run instruction by instruction (the instruction table's bound column: ``RULES``).

Every element of every tile carries a radius: how far its stored value may lie from the value the
kernel's exact math gives it (kernel inputs: 0). Each instruction's rule computes its destination's
radius from its operands' (their stored values and radii) in two parts:

- *propagated*: how far the operation can move its operands' distances, by its own bound on the box
  [value - radius, value + radius]: a sum adds radii; a product |x| r_y + |y| r_x + r_x r_y; a dot
  product the same summed over K; a monotone function the larger of its moves to the box's ends;
  max / min the larger radius; data movement moves radii with the data;
- *local*: how far the instruction's own result lies from its exact math on the operands it read,
  measured on the run (the stored result against the exact sum, product, dot product or function of
  the stored operands: binary64, or numeq's exact accumulator), with binary64's own error as slack.
  A constant the kernel wrote (a Python float) enters as the engine's fp32 immediate at radius
  |fp32(c) - c|, since the exact dataflow uses c itself.

The bound is rigorous by the triangle inequality, and tight: its local parts are the run's actual
rounding errors, so it overstates only where errors of opposite signs cancel. An instruction without
a rule stops ``Run.bound()`` naming it and its line, as does any other write no instruction makes.
The older interface's two such writes are followed (``placed``, ``accumulated``): a fresh result
assigned into a tile moves its radii with its bits, and ``psum += matmul`` adds them as PSUM adds.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ... import reference as _reference
from ..machine import arithmetic as _numerics
from ..machine import psum as _psum
from ..machine.alu import alu, op_name
from ..machine.context import Unsupported, where
from ..machine.dtypes import storage_dtype
from ..machine.indirect import Indirect, held
from ..machine.memory import Tensor

__all__ = ["RULES", "radius_view", "walk"]

SLACK = 2.0 ** -50  # binary64's own error in a local measurement, relative (a few ulps)


def _refuse(what: str) -> Unsupported:
    return Unsupported(f"{where()}: Run.bound() has no bound model for {what} yet (docs/nki.md lists the "
                       "instructions it walks)")


def radius_view(ctx: Any, t: Any) -> np.ndarray:
    """The radii of view ``t``'s elements: a writable view of its buffer's radius array, laid out as
    ``t.data`` lies in the buffer's storage."""
    # a Tensor (or the older interface's block tensor, a strided view of its buffer too); an
    # indirect view's radii are at its addresses (_indirect_addresses)
    if not isinstance(t, Tensor) or isinstance(t, Indirect) or not isinstance(getattr(t, "data", None), np.ndarray):
        raise _refuse(f"a view that is not a plain strided view ({type(t).__name__} {getattr(t, 'name', '')})")
    base = t.base
    r = ctx.radii.get(base.id)
    if r is None:
        r = ctx.radii[base.id] = np.zeros(base.data.shape, dtype=np.float64)
    data, whole = t.data, base.data
    item = whole.itemsize
    start = data.__array_interface__["data"][0] - whole.__array_interface__["data"][0]
    if (data.itemsize != item or start < 0 or start % item or any(s < 0 or s % item for s in data.strides)
            or not np.shares_memory(data, whole)):
        raise _refuse(f"a view of {t.name} that is not a plain strided view of its buffer")
    return np.lib.stride_tricks.as_strided(r.reshape(-1)[start // item:], data.shape,
                                           tuple(s // item * 8 for s in data.strides), writeable=True)


def _indirect_addresses(ctx: Any, t: Any) -> tuple[np.ndarray, np.ndarray]:
    """(the flat radii of an indirect view's buffer, the view's element addresses into them): a
    gather reads radii where it reads values, a scatter writes them where it writes values."""
    if type(t) is not Indirect:
        raise _refuse(f"an out-of-buffer view ({type(t).__name__} {getattr(t, 'name', '')})")
    base = t.base
    if storage_dtype(t.dtype).itemsize != storage_dtype(base.dtype).itemsize:
        raise _refuse(f"an indirect view of {base.name} read as {t.dtype} (another element size)")
    r = ctx.radii.get(base.id)
    if r is None:
        r = ctx.radii[base.id] = np.zeros(base.data.shape, dtype=np.float64)
    flat = r.reshape(-1)
    if not ((t.addr >= 0) & (t.addr < flat.size)).all():
        raise _refuse(f"an indirect access of {base.name} with elements out of bounds (oob_mode=skip)")
    return flat, t.addr


def _radii_of(ctx: Any, t: Any) -> np.ndarray:
    """A copy of view ``t``'s radii, in its shape (a gather's at its addresses)."""
    if not isinstance(t, Indirect):
        return radius_view(ctx, t).copy()
    flat, addr = _indirect_addresses(ctx, t)
    return flat[addr].reshape(t.shape)


def _set_radii(ctx: Any, t: Any, r: np.ndarray) -> None:
    """Store ``r`` as view ``t``'s radii (a scatter's at its addresses, a repeated address keeping
    the last element's, as its values do)."""
    if not isinstance(t, Indirect):
        radius_view(ctx, t)[...] = np.broadcast_to(r, t.shape)
        return
    flat, addr = _indirect_addresses(ctx, t)
    flat[addr.reshape(-1)] = np.broadcast_to(r, t.shape).reshape(-1)


def _stored(t: Any) -> np.ndarray:
    if type(t) is Indirect:  # what its addresses hold now (a scatter wrote them)
        return np.asarray(_numerics.fp32_values(held(t), t.dtype), dtype=np.float64)
    return np.asarray(_numerics.fp32_values(t.data, t.dtype), dtype=np.float64)


def _settled(ctx: Any, t: Any) -> None:
    if t.base.id in ctx.pending:
        _psum.settle(ctx, t.base)


def walk(ctx: Any, name: str, call: Any, semantics: Callable) -> Any:
    """Run one instruction with its bound rule: its operands' values and radii read first, the
    destination's radii set after."""
    rule = RULES.get(name)
    if rule is None:
        raise _refuse(f"nisa.{name}")
    before = {}
    for key, v in call.args.items():
        if isinstance(v, Tensor):
            _settled(ctx, v)
            before[key] = (_stored(v), _radii_of(ctx, v))
    ctx.bounding = True
    try:
        result = semantics(call)
    finally:
        ctx.bounding = False
    dst = call.args.get("dst") if isinstance(call.args.get("dst"), Tensor) else result
    if not isinstance(dst, Tensor):
        raise _refuse(f"nisa.{name} without one destination tile")
    _settled(ctx, dst)
    radius = rule(ctx, call, before, _stored(dst))
    if radius is None:  # an instruction made of another (activation_reduce): its radii are set
        return result
    for t, r in ([(dst, radius)] if isinstance(radius, np.ndarray) else radius):
        t = dst if t is None else t
        _set_radii(ctx, t, r)
    return result


# --- the older interface's writes that no instruction makes ----------------------------------------

def placed(ctx: Any, view: Any, value: Any, write: Callable[[], Any]) -> None:
    """``view[...] = value`` where the compiler places a fresh result (the same dtype and memory):
    ``write()`` copies the bits, and the radii move with them."""
    _settled(ctx, value)
    r = _radii_of(ctx, value).reshape(view.shape)
    ctx.bounding = True
    try:
        write()
    finally:
        ctx.bounding = False
    written = value.mask.reshape(view.shape) == value.base.full
    radius_view(ctx, view)[written] = r[written]


def accumulated(ctx: Any, dst: Any, tile: Any, adds: Any, write: Callable[[], Any]) -> None:
    """``psum += matmul`` (the older interface): ``write()`` adds the matmul's result into ``dst``
    (in fp32, where ``adds``; elsewhere it overwrites), and dst's radii become the sum's: the old
    radii plus the matmul's, and the stored sum's distance from the exact sum of the stored terms."""
    _settled(ctx, tile)
    _settled(ctx, dst)
    old, r_old = _stored(dst), radius_view(ctx, dst).copy()
    new_tile, r_tile = _stored(tile).reshape(dst.shape), _radii_of(ctx, tile).reshape(dst.shape)
    ctx.bounding = True
    try:
        write()
    finally:
        ctx.bounding = False
    _settled(ctx, dst)
    y = _stored(dst)
    adds = np.broadcast_to(np.asarray(adds, dtype=bool), dst.shape)
    radius_view(ctx, dst)[...] = np.where(adds, r_old + r_tile + _local(y, old + new_tile), r_tile + _local(y, new_tile, 0.0))


# --- the rules: (ctx, call, operands before, the destination's stored values) -> its radii -------

def _fit(a: np.ndarray, y: np.ndarray) -> np.ndarray:
    """An operand's values or radii in the destination's shape: the same elements reshaped, or an
    operand the instruction broadcasts (a [1, F] row over the partitions, numpy's rules) repeated."""
    if a.size == y.size:
        return a.reshape(y.shape)
    try:
        return np.broadcast_to(a, y.shape)
    except ValueError:
        raise _refuse(f"an operand of shape {a.shape} broadcast to {y.shape} otherwise than numpy does") from None


def _local(y: np.ndarray, exact: np.ndarray, slack: float = SLACK) -> np.ndarray:
    """The stored result's distance from the exact result of the operands it read, with ``slack``
    for binary64's error in computing that result (0 where it is the operands themselves: a copy)."""
    with np.errstate(invalid="ignore"):
        d = np.abs(y - exact) + slack * np.abs(exact)
    return np.where(np.isnan(d), np.inf, d)


def _moved(ctx: Any, call: Any, before: dict, y: np.ndarray) -> np.ndarray:
    # dma_copy / tensor_copy: the radii move with the values; a cast into dst's dtype is local.
    if call.args.get("dst_rmw_op") is not None:
        raise _refuse("nisa.dma_copy with dst_rmw_op")
    x, r = before["src"]
    return _fit(r, y) + _local(y, _fit(x, y), 0.0)


def _memset(ctx: Any, call: Any, before: dict, y: np.ndarray) -> np.ndarray:
    return _local(y, np.full(y.shape, float(call.args["value"])), 0.0)


def _transpose(ctx: Any, call: Any, before: dict, y: np.ndarray) -> np.ndarray:
    x, r = before["data"]
    if x.ndim != 2:
        raise _refuse("nisa.nc_transpose of a tile that is not 2-D")
    return r.T.reshape(y.shape) + _local(y, x.T.reshape(y.shape), 0.0)


def _binary(name: str, x: np.ndarray, rx: np.ndarray, y: np.ndarray, ry: np.ndarray) -> tuple:
    """(exact value of x <name> y in binary64, its propagated radius) for the stored operands."""
    with np.errstate(all="ignore"):
        if name in ("add", "subtract"):
            return (x + y if name == "add" else x - y), rx + ry
        if name == "multiply":
            return x * y, np.abs(x) * ry + np.abs(y) * rx + rx * ry
        if name in ("maximum", "max", "minimum", "min"):
            # only an operand that can be the larger (smaller) one on the box counts
            big = name in ("maximum", "max")
            sign = 1.0 if big else -1.0
            x_out = sign * (x - y) > rx + ry  # x wins whatever the distances
            y_out = sign * (y - x) > rx + ry
            radius = np.where(x_out, rx, np.where(y_out, ry, np.maximum(rx, ry)))
            return (np.maximum(x, y) if big else np.minimum(x, y)), radius
        if name in _COMPARE:
            # 1.0 or 0.0: the same for every point of the boxes where they do not meet (radius 0),
            # else either (radius 1); two exact operands compare exactly
            exact = _COMPARE[name](x, y).astype(np.float64)
            apart = (np.abs(x - y) > rx + ry) | ((rx == 0) & (ry == 0))
            return exact, np.where(apart, 0.0, 1.0)
        if name == "divide":
            q = x / y
            room = np.abs(y) - ry
            return q, np.where(room > 0, (rx + np.abs(q) * ry) / np.where(room > 0, room, 1.0), np.inf)
    raise _refuse(f"the ALU operator {name}")


_COMPARE = {"equal": np.equal, "not_equal": np.not_equal, "greater": np.greater, "greater_equal": np.greater_equal,
            "less": np.less, "less_equal": np.less_equal}


def _iota(ctx: Any, call: Any, before: dict, y: np.ndarray) -> np.ndarray:
    # exact integers (int32 arithmetic), cast into dst's dtype: the cast is local
    values, ctx.bound_note = ctx.bound_note, None
    if values is None:
        raise _refuse("nisa.iota in this form")
    return _local(y, np.asarray(values, dtype=np.float64).reshape(y.shape), 0.0)


def _scalar(ctx: Any, operand: Any, before: dict, key: str, like: np.ndarray) -> tuple:
    """An operand as (stored values, radii): a tile's from before the instruction; a constant as the
    engine's fp32 immediate, at the distance from the constant the kernel wrote."""
    if isinstance(operand, Tensor):
        v, r = before[key]
        return v.reshape(v.shape[0], *([1] * (like.ndim - 1))), r.reshape(v.shape[0], *([1] * (like.ndim - 1)))
    c = float(0 if operand is None else operand)
    hw = float(np.float32(c))
    return np.float64(hw), np.float64(abs(hw - c))


def _tensor_tensor(ctx: Any, call: Any, before: dict, y: np.ndarray) -> np.ndarray:
    (x1, r1), (x2, r2) = before["data1"], before["data2"]
    exact, prop = _binary(op_name(call.args["op"]), _fit(x1, y), _fit(r1, y),
                          _fit(x2, y), _fit(r2, y))
    return prop + _local(y, exact)


def _tensor_scalar(ctx: Any, call: Any, before: dict, y: np.ndarray) -> np.ndarray:
    v = call.args
    x, r = before["data"]
    x, r = _fit(x, y), _fit(r, y)
    steps = [("op0", "operand0", "reverse0"), ("op1", "operand1", "reverse1")]
    value, radius = x, r
    for op_key, operand_key, reverse_key in steps:
        if v.get(op_key) is None:
            continue
        name = op_name(v[op_key])
        s, rs = _scalar(ctx, v[operand_key], before, operand_key, y)
        a, ra, b, rb = (s, rs, value, radius) if v.get(reverse_key) else (value, radius, s, rs)
        exact, prop = _binary(name, *np.broadcast_arrays(a, ra, b, rb))
        stored = np.asarray(alu(name, np.asarray(a, np.float32), np.asarray(b, np.float32)), dtype=np.float64)
        value, radius = stored, prop + _local(stored, exact)  # the engine's fp32 intermediate
    return radius + _local(y, value)


# The functions, each with how far it can move a value a at distance r: a monotone one (increasing,
# or decreasing: rsqrt, reciprocal) by the larger move to the box's two ends, where the box lies in
# its domain (else unbounded); square by 2|a| r + r^2; abs by r.
def _monotone(f: Callable, inside: Callable) -> Callable:
    def move(a: np.ndarray, r: np.ndarray) -> np.ndarray:
        lo, hi = a - r, a + r
        fa = f(a)
        moved = np.maximum(np.abs(f(hi) - fa), np.abs(f(lo) - fa)) * (1 + SLACK) + SLACK * np.abs(fa)
        return np.where(inside(lo, hi), moved, np.inf)
    return move


_ANY = lambda lo, hi: np.ones(np.shape(lo), dtype=bool)  # noqa: E731
_POSITIVE = lambda lo, hi: lo > 0  # noqa: E731
_FUNCTIONS: dict[str, tuple[Callable, Callable]] = {
    "exp": (np.exp, _monotone(np.exp, _ANY)), "exp2": (np.exp2, _monotone(np.exp2, _ANY)),
    "tanh": (np.tanh, _monotone(np.tanh, _ANY)), "sigmoid": (_numerics.sigmoid64, _monotone(_numerics.sigmoid64, _ANY)),
    "arctan": (np.arctan, _monotone(np.arctan, _ANY)), "log": (np.log, _monotone(np.log, _POSITIVE)),
    "sqrt": (np.sqrt, _monotone(np.sqrt, lambda lo, hi: lo >= 0)),
    "rsqrt": (lambda t: 1 / np.sqrt(t), _monotone(lambda t: 1 / np.sqrt(t), _POSITIVE)),
    "reciprocal": (lambda t: 1 / t, _monotone(lambda t: 1 / t, lambda lo, hi: (lo > 0) | (hi < 0))),
    "relu": (lambda t: np.maximum(t, 0.0), lambda a, r: r),
    "softplus": (lambda t: np.logaddexp(0.0, t), _monotone(lambda t: np.logaddexp(0.0, t), _ANY)),
    "copy": (lambda t: t, lambda a, r: r), "identity": (lambda t: t, lambda a, r: r),
    "negative": (np.negative, lambda a, r: r), "abs": (np.abs, lambda a, r: r),
    "square": (np.square, lambda a, r: (2 * np.abs(a) * r + r * r) * (1 + SLACK)),
}


def _activation(ctx: Any, call: Any, before: dict, y: np.ndarray) -> Any:
    v = call.args
    name = op_name(v["op"])
    if name not in _FUNCTIONS:
        raise _refuse(f"the activation function {name}")
    f, move = _FUNCTIONS[name]
    x, r = before["data"]
    x, r = _fit(x, y), _fit(r, y)
    s, rs = _scalar(ctx, v.get("scale", 1.0), before, "scale", y)
    b, rb = _scalar(ctx, v.get("bias"), before, "bias", y)
    with np.errstate(all="ignore"):
        arg, r_arg = _binary("multiply", *np.broadcast_arrays(x, r, s, rs))
        arg, r_add = _binary("add", *np.broadcast_arrays(arg, r_arg, b, rb))
        r_arg = r_add + SLACK * np.abs(arg)
        fa = f(arg)
        moved = move(arg, r_arg)
    moved = np.where(np.isnan(moved), np.inf, moved)
    # the engine computes the argument in fp32 and f of it within its model: both are local
    radius = moved + _local(y, fa)
    if v.get("reduce_res") is None:
        return radius
    # reduce_res: the registers, reset and summed in this instruction (reset_reduce): the sum of the
    # elements' moves plus the registers' distance from the exact sum of f over the stored operands
    from ..machine.registers import Cmd, command
    if v.get("reduce_op") is not None and op_name(v["reduce_op"]) != "add" or \
            command("idle" if v.get("reduce_cmd") is None else v["reduce_cmd"]) != Cmd.reset_reduce:
        raise _refuse("nisa.activation's registers over several instructions (reduce_cmd other than "
                      "reset_reduce)")
    red = v["reduce_res"]
    _settled(ctx, red)
    rows = fa.reshape(fa.shape[0], -1)
    exact, summed = _reduced("add", rows, moved.reshape(rows.shape), "nisa.activation")
    got = _stored(red).reshape(-1)
    return [(call.args["dst"] if isinstance(call.args.get("dst"), Tensor) else None, radius),
            (red, (summed + _local(got, exact)).reshape(red.shape))]


def _reciprocal(ctx: Any, call: Any, before: dict, y: np.ndarray) -> np.ndarray:
    f, move = _FUNCTIONS["reciprocal"]
    x, r = before["data"]
    x, r = _fit(x, y), _fit(r, y)
    with np.errstate(all="ignore"):
        fa, moved = f(x), move(x, r)
    return np.where(np.isnan(moved), np.inf, moved) + _local(y, fa)


def _reduced(name: str, values: np.ndarray, radii: np.ndarray, what: str) -> tuple[np.ndarray, np.ndarray]:
    """(the exact reduction of ``values`` over the last axis, how far its boxes can move it) for
    ``name`` add (numeq's exact sum, rounded once to binary64; the radii add) or maximum / minimum
    (|max x^ - max x| <= the largest radius among the elements that can be the maximum on their
    boxes: x^_i + r_i >= max_j (x^_j - r_j); the minimum likewise). ``what`` names the instruction
    in a refusal."""
    if name == "add":
        exact = np.asarray(_reference.sum(np.ascontiguousarray(values), axis=-1, in_fmt="fp64", out="fp64"))
        return exact, radii.sum(axis=-1) * (1 + SLACK)
    if name in ("maximum", "max", "minimum", "min"):
        sign = 1.0 if name in ("maximum", "max") else -1.0
        signed = sign * values
        floor = (signed - radii).max(axis=-1, keepdims=True)
        return sign * signed.max(axis=-1), np.where(signed + radii >= floor, radii, 0.0).max(axis=-1)
    raise _refuse(f"{what} with op {name}")


def _tensor_reduce(ctx: Any, call: Any, before: dict, y: np.ndarray) -> np.ndarray:
    v = call.args
    name = op_name(v["op"])
    x, r = before["data"]
    axis = v["axis"]
    axes = tuple(a % x.ndim for a in (axis if isinstance(axis, (tuple, list)) else (axis,)))
    if any(a == 0 for a in axes):
        raise _refuse("nisa.tensor_reduce over the partition axis")
    keep = [a for a in range(x.ndim) if a not in axes]
    moved = np.transpose(x, keep + list(axes)).reshape(*[x.shape[a] for a in keep], -1)
    radii = np.transpose(r, keep + list(axes)).reshape(moved.shape)
    exact, prop = _reduced(name, moved, radii, "nisa.tensor_reduce")
    if v.get("negate"):
        exact = -exact
    return prop.reshape(y.shape) + _local(y, exact.reshape(y.shape))


def _nc_matmul(ctx: Any, call: Any, before: dict, y: np.ndarray) -> np.ndarray:
    v = call.args
    if v.get("tile_position") is not None or v.get("perf_mode") or v.get("is_transpose"):
        raise _refuse("nisa.nc_matmul with tile_position, perf_mode or is_transpose")
    (a, ra), (b, rb) = before["stationary"], before["moving"]
    if a.ndim != 2 or b.ndim != 2:
        raise _refuse("nisa.nc_matmul of operands that are not 2-D")
    k = a.shape[0]
    tile = np.asarray(_reference.matmul(np.ascontiguousarray(a.T), np.ascontiguousarray(b), in_fmt="fp64",
                                        out="fp64")).reshape(y.shape)
    with np.errstate(all="ignore"):
        prop = (np.abs(a).T @ rb + ra.T @ np.abs(b) + ra.T @ rb).reshape(y.shape) * (1 + (k + 2) * SLACK)
    mode = ctx.trace[-1].detail.get("accumulate")
    if mode == "accumulate":
        old, r_old = before.get("dst", (None, None))
        if old is None:
            raise _refuse("nisa.nc_matmul accumulating into a tile it was not given")
        return r_old.reshape(y.shape) + prop + _local(y, old.reshape(y.shape) + tile)
    if mode != "overwrite":
        raise _refuse("nisa.nc_matmul accumulating into part of its destination")
    return prop + _local(y, tile)


def _affine_select(ctx: Any, call: Any, before: dict, y: np.ndarray) -> np.ndarray:
    # dst = on_true where the (exact, integer) predicate holds, else the constant: the selection is the
    # exact dataflow's too; the semantics left it in ctx.bound_note
    chosen, ctx.bound_note = ctx.bound_note, None
    if chosen is None:
        raise _refuse("nisa.affine_select in this form")
    x, r = before["on_true_tile"]
    fill = float(call.args["on_false_value"])
    chosen = chosen.reshape(y.shape)
    return np.where(chosen, _fit(r, y) + _local(y, _fit(x, y), 0.0),
                    _local(y, np.full(y.shape, fill), 0.0))


def _bn_stats(ctx: Any, call: Any, before: dict, y: np.ndarray) -> np.ndarray:
    # (count, mean, M2) of each half: the mean moves by the average radius; M2 = sum (x - mean)^2
    # by at most 2 sum |x - mean| r + sum r^2 (the mean's own move cancels: sum (x - mean) = 0)
    x, r = before["data"]
    x, r = x.reshape(x.shape[0], -1), r.reshape(r.shape[0], -1)
    exact = _numerics.exact_bn_stats(x)
    radius = np.zeros_like(exact)
    for half in (0, 1):
        xs, rs = x[:, half::2], r[:, half::2]
        if xs.shape[1] == 0:
            continue
        mean = exact[:, 3 * half + 1:3 * half + 2]
        radius[:, 3 * half + 1] = rs.mean(axis=1) * (1 + SLACK)
        radius[:, 3 * half + 2] = (2 * (np.abs(xs - mean) * rs).sum(axis=1) + (rs * rs).sum(axis=1)) * (1 + SLACK)
    radius = radius + _local(y.reshape(exact.shape), exact)
    # the counts are exact (bn_aggr reads them as weights): radius 0 where stored as counted
    radius[:, [0, 3]] = np.where(y.reshape(exact.shape)[:, [0, 3]] == exact[:, [0, 3]], 0.0, np.inf)
    return radius.reshape(y.shape)


def _bn_aggr(ctx: Any, call: Any, before: dict, y: np.ndarray) -> np.ndarray:
    # (mean, variance) of the (count, mean, M2) triples: mean = sum n_i mean_i / N moves by
    # sum n_i r_i / N; variance = (sum M2_i + sum n_i (mean_i - mean)^2) / N by (sum r_M2_i +
    # 2 sum n_i |mean_i - mean| D_i + sum n_i D_i^2) / N, D_i = r_mean_i + the mean's move
    x, r = before["data"]
    t, rt = x.reshape(x.shape[0], -1, 3), r.reshape(r.shape[0], -1, 3)
    if np.any(rt[..., 0] > 0):
        raise _refuse("nisa.bn_aggr of counts that are not exact")
    exact = _numerics.exact_bn_aggr(x.reshape(x.shape[0], -1))
    n, means = t[..., 0], t[..., 1]
    total = n.sum(axis=1)
    with np.errstate(all="ignore"):
        r_mean = (n * rt[..., 1]).sum(axis=1) / total
        spread = np.abs(means - exact[:, :1])
        d = rt[..., 1] + r_mean[:, None]
        r_var = (rt[..., 2].sum(axis=1) + 2 * (n * spread * d).sum(axis=1) + (n * d * d).sum(axis=1)) / total
    radius = np.stack([r_mean, r_var], axis=1) * (1 + SLACK)
    return radius.reshape(y.shape) + _local(y, exact.reshape(y.shape))


def _tensor_tensor_scan(ctx: Any, call: Any, before: dict, y: np.ndarray) -> np.ndarray:
    # r[i] = op1(op0(data0[i], r[i-1]), data1[i]) per partition. Two parts, as for any instruction:
    # - propagated: the recurrence replayed in binary64 on the stored operands (the same ALU
    #   functions), each step's box radius carried from the operands' and the previous step's, plus
    #   binary64's own rounding of that step (SLACK): how far that replay lies from the exact
    #   dataflow;
    # - local: the stored results against that replay, measured as a whole. The engine's fp32 carry
    #   (and a narrow carry under scan_carry=dtype) rounds at every step, with errors of both signs
    #   that partly cancel; measured step by step and summed in absolute value they overstated a
    #   512-step cumulative sum's error 10.8x, measured at once they are the run's actual error.
    v = call.args
    name0, name1 = op_name(v["op0"]), op_name(v["op1"])
    (x0, r0), (x1, r1) = before["data0"], before["data1"]
    x0, r0, x1, r1 = (a.reshape(a.shape[0], -1) for a in (x0, r0, x1, r1))
    if isinstance(v["initial"], Tensor):
        carry, rc = (a.reshape(-1) for a in before["initial"])
    else:
        c0 = float(v["initial"])
        carry, rc = np.full(x0.shape[0], float(np.float32(c0))), np.full(x0.shape[0], abs(float(np.float32(c0)) - c0))
    radius, carries = np.empty_like(x0), np.empty_like(x0)
    with np.errstate(all="ignore"):
        for i in range(x0.shape[1]):
            a, ra, b, rb = (carry, rc, x0[:, i], r0[:, i]) if v["reverse0"] else (x0[:, i], r0[:, i], carry, rc)
            t, prop = _binary(name0, a, ra, b, rb)
            rt = prop + SLACK * np.abs(t)
            a, ra, b, rb = (x1[:, i], r1[:, i], t, rt) if v["reverse1"] else (t, rt, x1[:, i], r1[:, i])
            carry, prop = _binary(name1, a, ra, b, rb)
            rc = prop + SLACK * np.abs(carry)
            radius[:, i], carries[:, i] = rc, carry
    # the stored results against the binary64 replay: every rounding of the run's carries and the
    # cast into dst's dtype, at once
    return radius.reshape(y.shape) + _local(y, carries.reshape(y.shape))


def _registers(ctx: Any, engine: str) -> dict:
    """The Vector (or Scalar) engine's accumulator registers as the bound follows them: per lane the
    value an instruction left and its radius (NaN: not followed, as after an instruction that
    changes them without recording them)."""
    key = ("registers", engine)
    if key not in ctx.radii:
        p = int(ctx.target["partitions"])
        ctx.radii[key] = {"value": np.full(p, np.nan), "radius": np.full(p, np.nan)}
    return ctx.radii[key]


def _forget_registers(ctx: Any, engine: str, rows: np.ndarray) -> None:
    """An instruction changed the registers at ``rows`` without recording their radii."""
    _registers(ctx, engine)["radius"][rows] = np.nan


def _tensor_scalar_cumulative(ctx: Any, call: Any, before: dict, y: np.ndarray) -> np.ndarray:
    # reg = op1(op0(src[i], imm0), reg), dst[i] = reg, per partition along the flattened free axis:
    # a scan, bounded as tensor_tensor_scan's (a binary64 replay walked step by step, the stored
    # results measured against it at once). The register starts at op1's identity (reset_reduce),
    # at imm1 (load_reduce), or where the last instruction that recorded it left it (reduce: its
    # value and radius); the registers it leaves are recorded for the next.
    from ..machine.registers import _IDENTITY, Cmd, command, vector_accumulator
    from .operands import lanes

    v = call.args
    cmd = command(v["reduce_cmd"])
    rows = lanes(v["src"])
    if cmd not in (Cmd.reset_reduce, Cmd.load_reduce, Cmd.reduce):
        raise _refuse(f"nisa.tensor_scalar_cumulative with reduce_cmd={cmd.name}")
    x, r = before["src"]
    x, r = x.reshape(x.shape[0], -1), r.reshape(x.shape[0], -1)
    name0, name1 = op_name(v["op0"]), op_name(v["op1"])
    s, rs = _scalar(ctx, v["imm0"], before, "imm0", x)
    registers = _registers(ctx, "vector")
    if cmd == Cmd.reduce:
        reg, rreg = registers["value"][rows].copy(), registers["radius"][rows].copy()
        if np.isnan(rreg).any():
            raise _refuse("nisa.tensor_scalar_cumulative continuing a register an instruction Run.bound() did not "
                          "follow left (reduce_cmd=reduce)")
    elif cmd == Cmd.load_reduce and v.get("imm1") is not None:
        reg, rreg = (np.broadcast_to(a, (x.shape[0], 1))[:, 0].astype(np.float64)
                     for a in _scalar(ctx, v["imm1"], before, "imm1", x))
    else:
        reg, rreg = np.full(x.shape[0], _IDENTITY[name1]), np.zeros(x.shape[0])
    radius, replay = np.empty_like(x), np.empty_like(x)
    with np.errstate(all="ignore"):
        t, rt = _binary(name0, *np.broadcast_arrays(x, r, s, rs))
        rt = rt + SLACK * np.abs(t)
        for i in range(x.shape[1]):
            reg, prop = _binary(name1, t[:, i], rt[:, i], reg, rreg)
            rreg = prop + SLACK * np.nan_to_num(np.abs(reg), posinf=0.0)
            radius[:, i], replay[:, i] = rreg, reg
    # the registers as the engine left them, and their distance from the replay's last step
    left = np.asarray(vector_accumulator(ctx).values[rows], dtype=np.float64)
    registers["value"][rows], registers["radius"][rows] = left, rreg + _local(left, reg)
    return radius.reshape(y.shape) + _local(y, replay.reshape(y.shape))


def _dma_transpose(ctx: Any, call: Any, before: dict, y: np.ndarray) -> np.ndarray:
    # the bits move (dma_engine._TRANSPOSE_AXES: the one permutation per rank), radii with them
    from .dma_engine import _TRANSPOSE_AXES

    x, r = before["src"]
    perm = _TRANSPOSE_AXES[x.ndim]
    return _fit(np.transpose(r, perm), y) + _local(y, _fit(np.transpose(x, perm), y), 0.0)


def _stream_shuffle(ctx: Any, call: Any, before: dict, y: np.ndarray) -> np.ndarray:
    # dst partition d = src partition source[d] (the semantics' note), bit for bit; -1 leaves d
    source, ctx.bound_note = ctx.bound_note, None
    if source is None:
        raise _refuse("nisa.nc_stream_shuffle in this form")
    (x, r), (_, r_old) = before["src"], before["dst"]
    x, r, r_old = x.reshape(x.shape[0], -1), r.reshape(r.shape[0], -1), r_old.reshape(r_old.shape[0], -1)
    rows = np.maximum(source, 0)
    moved = _fit(r[rows], y) + _local(y, _fit(x[rows], y), 0.0)
    return np.where(_fit((source >= 0)[:, None], y), moved, _fit(r_old, y))


def _constant(ctx: Any, call: Any, before: dict, y: np.ndarray) -> np.ndarray:
    # shared_identity_matrix: 0 and 1, exact in every dtype
    return np.zeros(y.shape)


def _rand(ctx: Any, call: Any, before: dict, y: np.ndarray) -> np.ndarray:
    # the generator's draws are the exact dataflow's values too (the same generator runs); only
    # their cast into the tile's dtype is local
    draws, ctx.bound_note = ctx.bound_note, None
    if draws is None:
        raise _refuse("nki.language.rand in this form")
    return _local(y, _fit(np.asarray(draws, dtype=np.float64), y), 0.0)


def _partition_reduce(ctx: Any, call: Any, before: dict, y: np.ndarray) -> np.ndarray:
    # dst[1, F] = op over the partitions: a sum moves by the radii's sum, a maximum by the largest
    # radius among the partitions that can be the largest; average = sum / P (one more rounding)
    name = op_name(call.args["op"])
    x, r = before["data"]
    x, r = x.reshape(x.shape[0], -1), r.reshape(r.shape[0], -1)
    if name not in ("add", "average", "maximum"):
        raise _refuse(f"nisa.tensor_partition_reduce with op={name}")
    exact, prop = _reduced("add" if name == "average" else name, x.T, r.T, "nisa.tensor_partition_reduce")
    if name == "average":
        exact, prop = exact / x.shape[0], prop / x.shape[0]
    return _fit(prop, y) + _local(y, _fit(exact, y))


def _max8(ctx: Any, call: Any, before: dict, y: np.ndarray) -> np.ndarray:
    # dst[p, k] = the k-th largest of partition p (k < 8): an order statistic moves by at most the
    # largest radius among the elements that can reach the top 8 on their boxes (each above the 8th
    # largest of the boxes' lower ends); the stored values are the sorted elements themselves
    x, r = before["src"]
    x, r = x.reshape(x.shape[0], -1), r.reshape(r.shape[0], -1)
    if np.isnan(x).any():
        raise _refuse("nisa.max8 of NaN values (their rank is not documented)")
    top = np.sort(x, axis=1)[:, ::-1][:, :8]
    eighth = np.sort(x - r, axis=1)[:, ::-1][:, 7:8]
    reach = np.where(x + r >= eighth, r, 0.0).max(axis=1, keepdims=True)
    return _fit(np.broadcast_to(reach, top.shape), y) + _local(y, _fit(top, y), 0.0)


def _chosen(pred: np.ndarray, rp: np.ndarray, a: np.ndarray, ra: np.ndarray, b: np.ndarray, rb: np.ndarray,
            y: np.ndarray) -> np.ndarray:
    """y = a where pred else b: the chosen operand's radius plus the store's own distance from it;
    where the predicate itself is uncertain (radius > 0: a comparison whose boxes meet), the exact
    dataflow may choose the other operand, so the larger of the two distances."""
    pred = _fit(pred, y) != 0
    a, ra, b, rb = _fit(a, y), _fit(ra, y), _fit(b, y), _fit(rb, y)
    with np.errstate(invalid="ignore"):
        on_a, on_b = ra + np.abs(y - a), rb + np.abs(y - b)
    chosen = np.where(pred, on_a, on_b)
    return np.where(_fit(rp, y) == 0, chosen, np.maximum(on_a, on_b))


def _copy_predicated(ctx: Any, call: Any, before: dict, y: np.ndarray) -> np.ndarray:
    # dst = src where predicate (reverse_pred: where zero), else dst as it was
    v = call.args
    p, rp = before["predicate"]
    p = (p != 0) != bool(v.get("reverse_pred"))
    a, ra = _scalar(ctx, v["src"], before, "src", y) if not isinstance(v["src"], Tensor) else before["src"]
    old, r_old = before["dst"]
    return _chosen(p, rp, a, ra, old, r_old, y)


def _where(ctx: Any, call: Any, before: dict, y: np.ndarray) -> np.ndarray:
    # nl.where's selection: dst = x where the condition is nonzero, else dst as it was
    v = call.args
    c, rc = before["condition"]
    a, ra = before["x"] if isinstance(v["x"], Tensor) else _scalar(ctx, v["x"], before, "x", y)
    old, r_old = before["dst"]
    return _chosen(c != 0, rc, a, ra, old, r_old, y)


def _select_reduce(ctx: Any, call: Any, before: dict, y: np.ndarray) -> np.ndarray:
    # dst = on_true where predicate (reverse_pred: where zero), else on_false
    from ..machine.registers import Cmd, command

    from .operands import lanes

    v = call.args
    if command(v["reduce_cmd"]) != Cmd.idle:
        raise _refuse("nisa.select_reduce with its reduction into the registers (reduce_cmd other than idle)")
    _forget_registers(ctx, "vector", lanes(v["on_true"]))  # idle leaves the Vector registers undefined
    p, rp = before["predicate"]
    p = (p != 0) != bool(v.get("reverse_pred"))
    a, ra = before["on_true"]
    x = a.reshape(a.shape[0], -1)
    b, rb = _scalar(ctx, v["on_false"], before, "on_false", x)
    return _chosen(p, rp, a, ra, np.broadcast_to(b, x.shape), np.broadcast_to(rb, x.shape), y)


def _tensor_scalar_reduce(ctx: Any, call: Any, before: dict, y: np.ndarray) -> Any:
    # dst = data op0 operand0 (fp32, cast into dst's dtype), and reduce_res the reduce_op of those
    # fp32 results over the free axes, the registers reset in the instruction (reset_reduce)
    from ..machine.registers import Cmd, command

    v = call.args
    x, r = before["data"]
    x, r = x.reshape(x.shape[0], -1), r.reshape(r.shape[0], -1)
    a, ra = _scalar(ctx, v.get("operand0"), before, "operand0", x)
    name0 = op_name(v["op0"])
    with np.errstate(all="ignore"):
        exact, prop = _binary(name0, *np.broadcast_arrays(x, r, a, ra))
        t32 = np.asarray(alu(name0, x.astype(np.float32), np.broadcast_to(a, x.shape).astype(np.float32)),
                         dtype=np.float64)  # the engine's fp32 results, which the reduction reads
    radius = _fit(prop, y) + _local(y, _fit(exact, y))
    from .operands import lanes

    _forget_registers(ctx, "vector", lanes(v["data"]))  # its registers are not recorded for the next
    if v.get("reduce_res") is None:
        return radius
    if command(v.get("reduce_cmd", Cmd.reset_reduce)) != Cmd.reset_reduce:
        raise _refuse("nisa.tensor_scalar_reduce's registers over several instructions (reduce_cmd other than "
                      "reset_reduce)")
    rt = prop + _local(t32, exact)
    total, r_total = _reduced(op_name(v["reduce_op"]), t32, rt, "nisa.tensor_scalar_reduce")
    if v.get("reduce_res_negate"):
        total = -total
    red = v["reduce_res"]
    _settled(ctx, red)
    got = _stored(red).reshape(-1)
    return [(call.args["dst"] if isinstance(call.args.get("dst"), Tensor) else None, radius),
            (red, (r_total + _local(got, total)).reshape(red.shape))]


def _range_select(ctx: Any, call: Any, before: dict, y: np.ndarray) -> Any:
    # dst = on_true where comp_op0(idx, bound0) and comp_op1(idx, bound1), else FP32_MIN (the exact
    # dataflow's fill too); idx = range_start + the free index, an exact integer. reduce_res: the
    # max of the fp32 selected values, the registers reset in the instruction.
    from ..machine.registers import Cmd, command

    v = call.args
    x, r = before["on_true_tile"]
    x, r = x.reshape(x.shape[0], -1), r.reshape(r.shape[0], -1)
    idx = np.broadcast_to((int(v["range_start"]) + np.arange(x.shape[1], dtype=np.float64))[None, :], x.shape)
    keep, uncertain = np.ones(x.shape, dtype=bool), np.zeros(x.shape, dtype=bool)
    for op_key, bound_key in (("comp_op0", "bound0"), ("comp_op1", "bound1")):
        b, rb = _scalar(ctx, v[bound_key], before, bound_key, x)
        holds, rk = _binary(op_name(v[op_key]), *np.broadcast_arrays(idx, np.zeros(x.shape), b, rb))
        keep &= holds != 0
        uncertain |= rk > 0
    fill = float(np.float32(v["on_false_value"]))
    pred_radius = uncertain.astype(np.float64)
    from .operands import lanes

    _forget_registers(ctx, "vector", lanes(v["on_true_tile"]))  # its registers are not recorded for the next
    radius = _chosen(keep, pred_radius, x, r, np.full(x.shape, fill), np.zeros(x.shape), y)
    if v.get("reduce_res") is None or command(v["reduce_cmd"]) == Cmd.idle:
        return radius
    if command(v["reduce_cmd"]) != Cmd.reset_reduce:
        raise _refuse("nisa.range_select's registers over several instructions (reduce_cmd other than reset_reduce)")
    selected = np.where(keep, x, fill)  # the fp32 values the registers reduce, before dst's cast
    r_sel = _chosen(keep, pred_radius, x, r, np.full(x.shape, fill), np.zeros(x.shape), selected)
    top, r_top = _reduced("maximum", selected, r_sel, "nisa.range_select")
    red = v["reduce_res"]
    _settled(ctx, red)
    got = _stored(red).reshape(-1)
    return [(call.args["dst"] if isinstance(call.args.get("dst"), Tensor) else None, radius),
            (red, (r_top + _local(got, top, 0.0)).reshape(red.shape))]


def _dropout(ctx: Any, call: Any, before: dict, y: np.ndarray) -> np.ndarray:
    # dst = 0 where the generator's draw u < prob, else data: the same draws in the exact dataflow;
    # where prob's own distance (an fp32 immediate, a rounded tile) reaches u, either may happen
    draws, ctx.bound_note = ctx.bound_note, None
    if draws is None:
        raise _refuse("nisa.dropout in this form")
    x, r = before["data"]
    x, r = x.reshape(x.shape[0], -1), r.reshape(r.shape[0], -1)
    p, rp = _scalar(ctx, call.args["prob"], before, "prob", x)
    u = np.asarray(draws, dtype=np.float64).reshape(x.shape)
    kept = ~(u < p)
    uncertain = np.abs(u - p) <= rp
    zero = np.zeros(x.shape)
    return _chosen(kept, uncertain.astype(np.float64), x, r, zero, zero, y)


def _n_gather(ctx: Any, call: Any, before: dict, y: np.ndarray) -> np.ndarray:
    # dst[p, j] = data[p, indices[p, j]] over each partition's flattened free elements: the radii
    # move with the bits, where the indices themselves are exact
    x, r = before["data"]
    idx, r_idx = before["indices"]
    x, r = x.reshape(x.shape[0], -1), r.reshape(r.shape[0], -1)
    idx, r_idx = idx.reshape(idx.shape[0], -1), r_idx.reshape(r_idx.shape[0], -1)
    if (r_idx > 0).any():
        raise _refuse("nisa.nc_n_gather with indices that carry a distance from the exact dataflow")
    k = idx.astype(np.int64)
    if ((k < 0) | (k >= x.shape[1])).any():
        raise _refuse("nisa.nc_n_gather with indices out of bounds")
    return _fit(np.take_along_axis(r, k, axis=1), y) + _local(y, _fit(np.take_along_axis(x, k, axis=1), y), 0.0)


RULES: dict[str, Callable[..., Any]] = {
    "tensor_tensor_scan": _tensor_tensor_scan,
    "tensor_scalar_cumulative": _tensor_scalar_cumulative,
    "dma_transpose": _dma_transpose,
    "nc_stream_shuffle": _stream_shuffle,
    "shared_identity_matrix": _constant,
    "rand": _rand,
    "tensor_partition_reduce": _partition_reduce,
    "max8": _max8,
    "nc_n_gather": _n_gather,
    "dropout": _dropout,
    "range_select": _range_select,
    "tensor_scalar_reduce": _tensor_scalar_reduce,
    "tensor_copy_predicated": _copy_predicated,
    "where": _where,
    "select_reduce": _select_reduce,
    "activation_reduce": lambda ctx, call, before, y: None,  # activation's rule ran for it
    "affine_select": _affine_select,
    "iota": _iota,
    "bn_stats": _bn_stats,
    "bn_aggr": _bn_aggr,
    "dma_copy": _moved,
    "tensor_copy": _moved,
    "memset": _memset,
    "nc_transpose": _transpose,
    "tensor_tensor": _tensor_tensor,
    "tensor_scalar": _tensor_scalar,
    "activation": _activation,
    "reciprocal": _reciprocal,
    "tensor_reduce": _tensor_reduce,
    "nc_matmul": _nc_matmul,
}
