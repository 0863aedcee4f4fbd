"""``nki.isa`` on numeq: NeuronCore instructions, each computed the way numeq's Trainium model says
the engine computes it (``_numerics``), its operands checked against the target's limits
(``_rules``) and recorded in the run's trace (``_engine``).

Current interface (destination first): ``nisa.nc_matmul(dst, stationary, moving)``,
``nisa.dma_copy(dst=, src=)``, ``nisa.tensor_copy(dst, src)``, ... The older value-returning form
(``res = nisa.nc_matmul(stationary, moving)``) is accepted too: the instruction allocates its
result (PSUM for the Tensor Engine, SBUF otherwise) and returns it.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from .machine import arithmetic as _numerics
from .machine import psum as _psum
from .machine import rules as _rules
from .machine.alu import alu, op_name
from .machine.context import KernelFault, current
from .instructions.access import Engine, as_tensor, cost_elementwise, engine_name, mark_written, new_tile, read, write
from .machine.memory import WRITER_MATMUL, WRITER_MEMSET, WRITER_OTHER, WRITER_READ, Tensor

__all__ = [
    "dge_mode", "get_nc_version", "matmul_perf_mode", "nc_version", "oob_mode", "reduce_cmd",
    "activation", "dma_copy", "engine", "memset", "nc_matmul", "nc_transpose", "reciprocal", "tensor_copy",
    "tensor_reduce", "tensor_scalar", "tensor_tensor", "iota",
]


class engine:  # noqa: N801 - NKI's spelling (nisa.engine.vector, ...)
    tensor = Engine("tensor")
    vector = Engine("vector")
    scalar = Engine("scalar")
    activation = Engine("scalar")
    gpsimd = Engine("gpsimd")
    pool = Engine("gpsimd")
    sync = Engine("dma")
    dma = Engine("dma")
    unknown = Engine("unknown")


class matmul_perf_mode:  # noqa: N801 - nisa.matmul_perf_mode (0.2.0+)
    none = "none"
    double_row = "double_row"


class oob_mode:  # noqa: N801
    error = "error"
    skip = "skip"


class dge_mode:  # noqa: N801
    unknown, swdge, hwdge, none = "unknown", "swdge", "hwdge", "none"


class reduce_cmd:  # noqa: N801
    idle, reset, reduce, reset_reduce, load_reduce = "idle", "reset", "reduce", "reset_reduce", "load_reduce"


class nc_version:  # noqa: N801
    gen2, gen3, gen4 = 2, 3, 4


def get_nc_version() -> int:
    """The current target's NeuronCore generation (nc_version.gen2 for trn1/inf2, gen3 for trn2)."""
    return current().target.generation


# Older releases' engine constants.
tensor_engine, vector_engine, scalar_engine, gpsimd_engine, unknown_engine = (
    engine.tensor, engine.vector, engine.scalar, engine.gpsimd, engine.unknown)


def _stale(keyword: str, meaning: str) -> None:
    from .machine.context import where

    warnings.warn(f"{where()}: {keyword} is a keyword of an earlier NKI release; numeq.nki reads it as {meaning}",
                  DeprecationWarning, stacklevel=3)


def _extra(name: str, kwargs: dict) -> None:
    if kwargs:
        raise current().unsupported(f"nisa.{name}'s keyword(s) {', '.join(sorted(kwargs))}")


# --- data movement ------------------------------------------------------------------------------

def dma_copy(dst: Any = None, src: Any = None, *, dst_rmw_op: Any = None, oob_mode: Any = None, dge_mode: Any = None,
             mask: Any = None, name: str = "", **kwargs: Any) -> Any:
    """dst = src through a DMA engine; a dtype change goes through fp32 (nki.isa.dma_copy docs:
    DMA casts via fp32), rounding to nearest even (assumption ``dma_cast_rounding``).
    ``dst_rmw_op=nl.add`` accumulates: dst = dst + src in fp32."""
    ctx = current()
    queue = kwargs.pop("engine", None)  # the engine whose queue issues the transfer
    _extra("dma_copy", kwargs)
    if mask is not None:
        raise ctx.unsupported("nisa.dma_copy(mask=)")
    dst, src = as_tensor(dst, "dst"), as_tensor(src, "src")
    _rules.check_on_chip(ctx, src)
    _rules.check_read(ctx, src)
    if dst.size != src.size:
        raise KernelFault(ctx.find("shape_mismatch", "error", f"dma_copy: {src.name} {src.shape} -> {dst.name} "
                                   f"{dst.shape} differ in size", "documented: nki.isa.dma_copy docstring"))
    _rules.check_dma(ctx, dst, src)
    if dst_rmw_op is not None:
        values = alu(dst_rmw_op, read(ctx, dst, "dst"), read(ctx, src, "src").reshape(dst.shape), "dst_rmw_op")
        write(ctx, dst, values)
    elif dst.dtype == src.dtype:
        write(ctx, dst, None, bits=src.data.reshape(dst.shape) if src.shape != dst.shape else src.data)
    else:
        write(ctx, dst, _numerics.fp32_values(src.data, src.dtype).reshape(dst.shape),
              rounding=ctx.assumptions["dma_cast_rounding"])
    ctx.issue("dma", "dma_copy", [dst], [src], nbytes=src.size * src.dtype.itemsize,
              queue="dma" if queue is None else str(getattr(queue, "name", queue)))
    return dst


def tensor_copy(*args: Any, engine: Any = None, dtype: Any = None, name: str = "", mask: Any = None,
                **kwargs: Any) -> Any:
    """dst = src on an engine: the same dtype copies the bits; another dtype casts through fp32
    with the output rounding (nki.isa.tensor_copy docs). Older form: ``tensor_copy(src, dtype=)``
    returns a new SBUF tile."""
    ctx = current()
    dst, src = kwargs.pop("dst", None), kwargs.pop("src", None)
    _extra("tensor_copy", kwargs)
    pos = list(args)
    if dst is None and src is None and len(pos) == 1:
        src = pos.pop()
    if src is None and pos:
        if dst is None:
            dst = pos.pop(0)
        src = pos.pop(0) if pos else None
    if pos or src is None:
        raise TypeError("tensor_copy: expected tensor_copy(dst, src) (or the older tensor_copy(src, dtype=))")
    src = as_tensor(src, "src")
    if dst is None:
        dst = new_tile(src.shape, dtype or src.dtype)
    elif dtype is not None:
        _stale("tensor_copy(dtype=)", "the destination's dtype")
    if mask is not None:
        raise ctx.unsupported("nisa.tensor_copy(mask=)")
    dst = as_tensor(dst, "dst")
    eng = engine_name(engine, "vector")
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
    ctx.issue(eng, "tensor_copy", [dst], [src], cycles=cost_elementwise(dst))
    return dst


def memset(dst: Any = None, value: Any = 0, dtype: Any = None, engine: Any = None, *, shape: Any = None,
           name: str = "", **kwargs: Any) -> Any:
    """Every element of dst = value, cast into dst's dtype (nearest even: assumption
    ``memset_cast``). Older form ``memset(shape=, value=, dtype=)`` returns a new SBUF tile."""
    ctx = current()
    _extra("memset", kwargs)
    if dst is None or not isinstance(dst, Tensor):
        if shape is None and dst is not None:
            shape = dst
        dst = new_tile(tuple(shape), dtype or "float32")
    eng = engine_name(engine, "vector")
    code = WRITER_MEMSET if float(value) == 0.0 else WRITER_OTHER
    if dst.dtype.kind == "int":
        write(ctx, dst, np.full(dst.shape, float(value)), code)
    else:
        # The value as an exact double, rounded once into dst's dtype (assumption memset_rounding).
        rounded = _numerics.cast_into(np.full(dst.shape, float(value)), dst.dtype, ctx.assumptions["memset_rounding"])
        write(ctx, dst, None, code, bits=rounded)
    ctx.issue(eng, "memset", [dst], [], cycles=cost_elementwise(dst))
    return dst


# --- Tensor Engine -------------------------------------------------------------------------------

def _double_row(perf_mode: Any) -> bool:
    name = getattr(perf_mode, "name", perf_mode)
    return name is not None and "double_row" in str(name)


def nc_matmul(*args: Any, is_stationary_onezero: bool = False, is_moving_onezero: bool = False,
              is_transpose: bool = False, tile_position: Any = None, tile_size: Any = None, perf_mode: Any = None,
              accumulate: Any = None, name: str = "", **kwargs: Any) -> Any:
    """dst[M, N] (PSUM, fp32) <- stationary[K, M]^T @ moving[K, N]: the Trainium platform's PE-array
    plan for one tile of K, then PSUM accumulation in fp32 (``accumulate``: True adds, False
    overwrites, None: the target's ``matmul_accumulate`` assumption). Older form
    ``nc_matmul(stationary, moving)`` returns a new PSUM tile."""
    ctx = current()
    dst, stationary, moving = kwargs.pop("dst", None), kwargs.pop("stationary", None), kwargs.pop("moving", None)
    _extra("nc_matmul", kwargs)
    pos = list(args)
    if dst is None and len(pos) == 3:
        dst = pos.pop(0)
    if stationary is None and pos:
        stationary = pos.pop(0)
    if moving is None and pos:
        moving = pos.pop(0)
    if pos or stationary is None or moving is None:
        raise TypeError("nc_matmul: expected nc_matmul(dst, stationary, moving)")
    stationary, moving = as_tensor(stationary, "stationary"), as_tensor(moving, "moving")
    if tile_position or tile_size:
        raise ctx.unsupported("nisa.nc_matmul(tile_position=, tile_size=) (PE tiling)")
    if is_transpose:
        return nc_transpose(dst, moving, engine=engine.tensor) if dst is not None else nc_transpose(moving)
    double_row = _double_row(perf_mode)
    k, m, n = _matmul_sizes(ctx, stationary, moving, double_row)
    legacy = dst is None
    if legacy:
        dst = new_tile((m, n), "float32", "psum")
    dst = as_tensor(dst, "dst")
    _rules.check_on_chip(ctx, stationary)  # the partition rules first: K rows are partitions
    _rules.check_on_chip(ctx, moving)
    _rules.check_matmul(ctx, dst, stationary, moving, k, m, n, double_row)
    # double_row (nki.isa.nc_matmul): stationary [128, 2, M], moving [128, 2, N] contract over the
    # partition and the first free axis, einsum('kli,klj->ij'); row (k, l) of the flattened K is
    # 2k + l, so each PE's two products are neighbours, as the platform's double_row plan pairs them.
    fmt = _matmul_format(stationary.dtype.format, moving.dtype.format)
    a = _matmul_operand(ctx, stationary, "stationary", fmt).reshape(k, m)
    b = _matmul_operand(ctx, moving, "moving", fmt).reshape(k, n)
    if double_row and not {stationary.dtype.format, moving.dtype.format} <= {"e4m3", "e5m2", "e4m3fn"}:
        raise KernelFault(ctx.find("matmul_perf_mode", "error", f"nc_matmul perf_mode=double_row on {stationary.dtype} x "
                                   f"{moving.dtype}: double_row takes fp8 inputs only",
                                   "documented: nki.isa.nc_matmul docstring (perf_mode=double_row: FP8 only)"))
    if double_row and fmt not in ("e4m3", "e5m2"):
        raise ctx.unsupported(f"nc_matmul double_row on {stationary.dtype} x {moving.dtype} (numeq's double_row "
                              "plan takes two fp8 operands of one format)")
    if a.shape[1] * b.shape[1] != dst.size or dst.shape[0] != m:
        raise KernelFault(ctx.find("shape_mismatch", "error", f"nc_matmul result [{m}, {n}] does not fit {dst.name} "
                                   f"{dst.shape}", "documented: nki.isa.nc_matmul docstring"))
    adds = _accumulating(ctx, dst, accumulate)
    some, every = (bool(adds), bool(adds)) if adds.ndim == 0 else (bool(adds.any()), bool(adds.all()))
    if some:
        _rules.check_accumulate(ctx, dst, adds)
        _rules.check_read(ctx, dst, settle=False)  # poison only: adding onto a pending chain extends it
    mode = "accumulate" if every else "overwrite" if not some else "mixed"
    if mode != "mixed" and dst.dtype.format == "fp32":
        # Computed when the PSUM tile is read (_psum: the chain in one call of the platform plan).
        _psum.defer(ctx, dst, (a, stationary), (b, moving), fmt, k, double_row, mode == "accumulate")
        mark_written(ctx, dst, WRITER_MATMUL)
    else:
        tile = _numerics.matmul_tile(a, b, fmt, ctx.tile_platform(k, double_row)).reshape(dst.shape)
        if adds.any():
            old = _numerics.fp32_values(dst.data, dst.dtype)
            summed = _numerics.accumulate_fp32(old, tile, ctx.assumptions["psum_rounding"])
            tile = summed if adds.all() else np.where(adds, summed, tile)
        write(ctx, dst, tile, WRITER_MATMUL)
    key = (dst.base.id, dst.element_offset())
    ctx.psum_chain[key] = ctx.psum_chain.get(key, 0) + 1 if mode == "accumulate" else 1
    cycles = max(min(64, m), n) * (4 if "fp32" in (stationary.dtype.format, moving.dtype.format) else 1)
    ctx.issue("tensor", "nc_matmul", [dst], [stationary, moving], flops=2 * k * m * n, cycles=cycles,
              k=k, m=m, n=n, accumulate=mode, psum=(dst.base.id, dst.element_offset()),
              in_fmt=fmt, double_row=double_row)
    return dst


def _matmul_operand(ctx: Any, t: Tensor, parameter: str, fmt: str) -> np.ndarray:
    """An nc_matmul operand's values: its stored array where it is all written and of the
    instruction's format (numeq's matmul reads bf16 / fp8 arrays in place), else fp32 values (NaN
    where nothing wrote)."""
    if t.dtype.format == fmt:
        _rules.check_on_chip(ctx, t)
        _rules.check_read(ctx, t)
        if t.base.complete or t.mask.min() == t.base.full:
            return t.data
    return read(ctx, t, parameter, "tensor")


def _matmul_sizes(ctx: Any, stationary: Tensor, moving: Tensor, double_row: bool) -> tuple[int, int, int]:
    """(K, M, N) of one nc_matmul; double_row contracts the partition and the first free axis."""
    if not double_row:
        if stationary.shape[0] != moving.shape[0]:
            raise KernelFault(ctx.find("shape_mismatch", "error", f"nc_matmul: stationary has {stationary.shape[0]} "
                                       f"rows of K (partitions) and moving {moving.shape[0]}",
                                       "documented: nki.isa.nc_matmul docstring"))
        return stationary.shape[0], stationary.free_size(), moving.free_size()
    if stationary.ndim < 3 or moving.ndim < 3 or stationary.shape[1] != 2 or moving.shape[1] != 2 \
            or stationary.shape[0] != moving.shape[0]:
        raise KernelFault(ctx.find("shape_mismatch", "error", f"nc_matmul double_row takes stationary [K/2, 2, M] and "
                                   f"moving [K/2, 2, N]; got {stationary.shape} and {moving.shape}",
                                   "documented: nki.isa.nc_matmul docstring (perf_mode=double_row)"))
    return 2 * stationary.shape[0], stationary.free_size() // 2, moving.free_size() // 2


def _matmul_format(a: str, b: str) -> str:
    """The format the PE plan reads both operands in: theirs when they agree; for a mix, one that
    holds both exactly (e4m3 x e5m2: fp16; any other mix: fp32, whose products of these inputs
    are exact)."""
    if a == b:
        return a
    if {a, b} <= {"e4m3", "e5m2"}:
        return "fp16"
    return "fp32"


def _accumulating(ctx: Any, dst: Tensor, accumulate: Any) -> np.ndarray:
    """Which elements of dst the matmul adds into (the rest it overwrites): as ``accumulate=``
    states, else by the ``matmul_accumulate`` assumption. Its default, ``first_write``, is the
    documented auto mode (nki.isa.nc_matmul, accumulate=None): the first matmul write to a PSUM
    location overwrites, later ones add. ``after_read`` also overwrites a location whose matmul
    result another instruction has read since (a tile reused after its evacuation)."""
    rule = ctx.assumptions["matmul_accumulate"] if accumulate is None else ("always" if accumulate else "never")
    if rule == "always":
        return np.bool_(True)
    if rule == "never" or not dst.base.tracks_writer:
        return np.bool_(False)
    low = high = dst.base.writer_all
    if low is None:
        w = dst.writer
        low, high = w.min(), w.max()
    if accumulate is None and low <= WRITER_READ <= high and (low == high or (w == WRITER_READ).any()):
        # The answer turns on the assumption: the tile was evacuated and is written again with no
        # accumulate= to say whether this starts a new sum (AWS's simulator warns here too).
        _rules.accumulate_after_read(ctx, dst)
    if low == high:  # one writer for the whole tile (the common case): one answer, a scalar
        return np.bool_(low == WRITER_MATMUL) if rule == "after_read" else np.bool_(low & 1)
    if rule == "after_read":
        return w == WRITER_MATMUL
    return (w & 1).astype(bool)  # MATMUL or READ: holds a matmul result


def nc_transpose(*args: Any, engine: Any = None, name: str = "", **kwargs: Any) -> Any:
    """dst[F, P] = data[P, F]: on the Tensor Engine (a matmul with an identity into PSUM:
    bit-accurate from NeuronCore-v3; on v2 through fp32 products, nki.isa docs) or the Vector
    engine (32 x 32 blocks)."""
    ctx = current()
    dst, data = kwargs.pop("dst", None), kwargs.pop("data", None)
    _extra("nc_transpose", kwargs)
    pos = list(args)
    if data is None:
        data = pos.pop() if pos else None
    if dst is None and pos:
        dst = pos.pop()
    data = as_tensor(data, "data")
    eng = engine_name(engine, "tensor")
    values = read(ctx, data, "data", eng).reshape(data.shape[0], data.free_size())
    if dst is None:
        dst = new_tile((values.shape[1], values.shape[0]), data.dtype if eng != "tensor" else data.dtype,
                       "psum" if eng == "tensor" else "sbuf")
    dst = as_tensor(dst, "dst")
    if eng == "tensor" and dst.base.memory.name != "psum":
        ctx.find("matmul_output_memory", "error", f"nc_transpose on the Tensor Engine writes {dst.name} in "
                 f"{dst.base.memory}; its result goes to PSUM", "documented: nki.isa.nc_transpose docstring")
    if dst.dtype == data.dtype:
        write(ctx, dst, None, bits=np.ascontiguousarray(data.data.reshape(values.shape).T))
    else:
        write(ctx, dst, values.T)
    ctx.issue(eng, "nc_transpose", [dst], [data], cycles=max(64, values.shape[0]))
    return dst


# --- Vector / Scalar / GpSimd ------------------------------------------------------------------

def tensor_tensor(*args: Any, engine: Any = None, dtype: Any = None, name: str = "", **kwargs: Any) -> Any:
    """dst = data1 <op> data2, elementwise in fp32, cast into dst (nki.isa.tensor_tensor)."""
    ctx = current()
    pos = list(args)
    if "dst" not in kwargs and len(pos) >= 3 and all(isinstance(p, Tensor) for p in pos[:3]):
        kwargs["dst"] = pos.pop(0)
    dst = kwargs.pop("dst", None)
    names = ["data1", "data2", "op"]
    vals = {n: kwargs.pop(n) if n in kwargs else (pos.pop(0) if pos else None) for n in names}
    _extra("tensor_tensor", kwargs)
    d1, d2 = as_tensor(vals["data1"], "data1"), as_tensor(vals["data2"], "data2")
    eng = engine_name(engine, "vector")
    if d1.base.memory.name == "psum" and d2.base.memory.name == "psum":
        ctx.find("engine_access", "error", f"tensor_tensor reads both {d1.name} and {d2.name} from PSUM; at most one "
                 "operand may be in PSUM", "documented: nki.isa.tensor_tensor docstring")
    _rules.check_engine_access(ctx, eng, [d1, d2] + ([dst] if isinstance(dst, Tensor) else []), "tensor_tensor")
    x, y = read(ctx, d1, "data1", eng, rows=True), read(ctx, d2, "data2", eng, rows=True)
    if y.shape != x.shape and y.size == x.size:
        y = y.reshape(x.shape)
    result = alu(vals["op"], x, y)
    if dst is None:
        dst = new_tile(d1.shape, dtype or d1.dtype)
    dst = as_tensor(dst, "dst")
    _group_sum(ctx, op_name(vals["op"]), dst, d1, d2)
    write(ctx, dst, result)
    ctx.issue(eng, "tensor_tensor", [dst], [d1, d2], flops=dst.size, cycles=cost_elementwise(dst),
              op=op_name(vals["op"]))
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


def _operand(ctx: Any, operand: Any, shape: tuple, eng: str) -> Any:
    """A tensor_scalar operand: a Python / numpy scalar, or a [P, 1] tensor broadcast along the
    free axis (a per-partition scalar)."""
    if isinstance(operand, Tensor):
        v = read(ctx, operand, "operand", eng, rows=True)
        return v.reshape(v.shape[0], *([1] * (len(shape) - 1))) if v.ndim else v
    return np.float32(operand)


def tensor_scalar(*args: Any, engine: Any = None, dtype: Any = None, name: str = "", **kwargs: Any) -> Any:
    """dst = (data op0 operand0) op1 operand1, in fp32; ``reverse0`` / ``reverse1`` swap an
    operator's operands. Between the two operators the value is rounded to fp32 (assumption
    ``tensor_scalar_fusion``: ``rounded``, or ``fused``: one rounding of the exact result where
    both operators are + - or *)."""
    ctx = current()
    pos = list(args)
    if "dst" not in kwargs and len(pos) >= 2 and isinstance(pos[0], Tensor) and isinstance(pos[1], Tensor):
        kwargs["dst"] = pos.pop(0)
    dst = kwargs.pop("dst", None)
    names = ["data", "op0", "operand0", "reverse0", "op1", "operand1", "reverse1"]
    vals = {n: kwargs.pop(n) if n in kwargs else (pos.pop(0) if pos else None) for n in names}
    _extra("tensor_scalar", kwargs)
    data = as_tensor(vals["data"], "data")
    eng = engine_name(engine, "vector")
    x = read(ctx, data, "data", eng, rows=True)
    first = _operand(ctx, vals["operand0"], x.shape, eng)
    r = alu(vals["op0"], first, x) if vals["reverse0"] else alu(vals["op0"], x, first)
    if vals["op1"] is not None:
        second = _operand(ctx, vals["operand1"], x.shape, eng)
        if ctx.assumptions["tensor_scalar_fusion"] == "fused":
            r = _fused_two(vals, x, first, second, r)
        else:
            r = alu(vals["op1"], second, r) if vals["reverse1"] else alu(vals["op1"], r, second)
    if dst is None:
        dst = new_tile(data.shape, dtype or data.dtype)
    dst = as_tensor(dst, "dst")
    write(ctx, dst, r)
    ctx.issue(eng, "tensor_scalar", [dst], [data], flops=dst.size * (2 if vals["op1"] is not None else 1),
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


def tensor_reduce(*args: Any, negate: bool = False, keepdims: bool = False, engine: Any = None, dtype: Any = None,
                  name: str = "", **kwargs: Any) -> Any:
    """dst = reduce(op, data, axis) over free axes, in fp32: sums in the platform's order
    (``vector_reduce_order``), max / min exactly; ``negate`` negates the result."""
    ctx = current()
    pos = list(args)
    if "dst" not in kwargs and pos and isinstance(pos[0], Tensor):
        kwargs["dst"] = pos.pop(0)
    dst = kwargs.pop("dst", None)
    vals = {n: kwargs.pop(n) if n in kwargs else (pos.pop(0) if pos else None) for n in ("op", "data", "axis")}
    _extra("tensor_reduce", kwargs)
    data = as_tensor(vals["data"], "data")
    eng = engine_name(engine, "vector")
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
        dst = new_tile(r.shape if r.ndim else (1,), dtype or data.dtype)
    dst = as_tensor(dst, "dst")
    write(ctx, dst, r)
    ctx.issue(eng, "tensor_reduce", [dst], [data], flops=data.size, cycles=cost_elementwise(data),
              op=op_name(vals["op"]))
    return dst


def activation(*args: Any, bias: Any = None, scale: Any = 1.0, reduce_op: Any = None, reduce_res: Any = None,
               reduce_cmd: Any = None, dtype: Any = None, name: str = "", **kwargs: Any) -> Any:
    """dst = f(data * scale + bias) on the Scalar engine: ``scale`` a number or a [P, 1] tensor,
    ``bias`` a [P, 1] tensor; f by the platform's function model (fp32 correctly rounded; the
    ``scalar_activation_ulps`` budget bounds the hardware's difference). Between ``data * scale``
    and ``+ bias``: assumption ``activation_affine`` (``rounded``: each rounded to fp32; ``fused``:
    one rounding). ``reduce_cmd`` drives the Scalar engine's per-partition registers (reset, reduce:
add each partition's results, reset_reduce; idle by default) and ``reduce_res`` receives them."""
    ctx = current()
    pos = list(args)
    if "dst" not in kwargs and pos and isinstance(pos[0], Tensor):
        kwargs["dst"] = pos.pop(0)
    dst = kwargs.pop("dst", None)
    vals = {n: kwargs.pop(n) if n in kwargs else (pos.pop(0) if pos else None) for n in ("op", "data")}
    _extra("activation", kwargs)
    data = as_tensor(vals["data"], "data")
    fname = op_name(vals["op"])
    x = read(ctx, data, "data", "scalar", rows=True)
    s = _operand(ctx, scale, x.shape, "scalar")
    b = _operand(ctx, bias, x.shape, "scalar") if bias is not None else None
    if ctx.assumptions["activation_affine"] == "fused" and b is not None:
        # x * scale is exact in binary64 (fp32 operands); one rounding of it plus the bias.
        arg = _numerics.sum_rounded([x.astype(np.float64) * np.asarray(s, dtype=np.float64), b]).reshape(x.shape)
    else:
        arg = x if (np.isscalar(s) and s == 1.0) else alu("multiply", x, s)
        if b is not None:
            arg = alu("add", arg, b)
    _rules.check_activation_range(ctx, fname, arg)
    try:
        y = _numerics.function_fp32(fname, arg)
    except KeyError:
        raise ctx.unsupported(f"the activation function {fname!r} (known: {', '.join(_numerics.function_names())})") \
            from None
    if dst is None:
        dst = new_tile(data.shape, dtype or data.dtype)
    dst = as_tensor(dst, "dst")
    write(ctx, dst, y)
    srcs = [data]
    outs = [dst]
    if reduce_op is not None or reduce_res is not None or reduce_cmd not in (None, "idle"):
        outs += _scalar_registers(ctx, dst, y, reduce_op, reduce_res, reduce_cmd)
    reduce = {"reduce": op_name(reduce_op)} if reduce_op is not None else {}
    ctx.issue("scalar", "activation", outs, srcs, flops=dst.size, cycles=cost_elementwise(dst), function=fname,
              **reduce)
    return dst


def _scalar_registers(ctx: Any, dst: Tensor, y: np.ndarray, reduce_op: Any, reduce_res: Any, reduce_cmd: Any) -> list:
    """activation's reduction (nki.isa.activation pseudocode): reset / reset_reduce zero the
    Scalar engine's per-partition fp32 registers, reduce / reset_reduce add each partition's
    results to them (sums in the platform's vector_reduce_order), and reduce_res, if given,
    receives the registers [P, 1]. The registers persist across activation instructions."""
    from .instructions.operands import accumulate, command, lanes, vector_accumulator

    op = op_name(reduce_op) if reduce_op is not None else "add"
    if op != "add":
        raise ctx.unsupported(f"activation's reduce_op {op!r} (the docs take nl.add)")
    cmd = command("idle" if reduce_cmd is None else reduce_cmd)
    rows = lanes(dst)
    accumulate(ctx, "activation", rows, cmd, op, y.reshape(y.shape[0], -1), engine="scalar")
    if reduce_res is None:
        return []
    red = as_tensor(reduce_res, "reduce_res")
    acc = vector_accumulator(ctx, "scalar")
    if not acc.defined[rows].all():
        ctx.find("accumulator_undefined", "error", "activation writes reduce_res from the Scalar engine's registers, "
                 "which no activation has reset (reduce_cmd=reset_reduce, or activation_reduce)",
                 "documented: nki.isa.activation docstring (reduce_cmd defaults to idle; reduce_res receives the "
                 "registers)")
    regs = np.where(acc.defined[rows], acc.values[rows], np.float32(np.nan)).astype(np.float32)
    write(ctx, red, regs.reshape(-1, 1))
    return [red]


def reciprocal(*args: Any, dtype: Any = None, name: str = "", **kwargs: Any) -> Any:
    """dst = 1 / data in fp32 (the Vector engine's reciprocal: correctly rounded here; the
    hardware's error is the platform's function budget)."""
    ctx = current()
    pos = list(args)
    dst = kwargs.pop("dst", None)
    if dst is None and len(pos) == 2:
        dst = pos.pop(0)
    data = as_tensor(kwargs.pop("data", None) or pos.pop(0), "data")
    _extra("reciprocal", kwargs)
    x = read(ctx, data, "data", rows=True)
    y = _numerics.function_fp32("reciprocal", x)
    if dst is None:
        dst = new_tile(data.shape, dtype or data.dtype)
    dst = as_tensor(dst, "dst")
    write(ctx, dst, y)
    ctx.issue("vector", "reciprocal", [dst], [data], flops=dst.size, cycles=cost_elementwise(dst))
    return dst


def iota(*args: Any, dtype: Any = None, **kwargs: Any) -> Any:
    raise current().unsupported("nisa.iota")


from ._isa_extra import *  # noqa: E402,F401,F403 - the instructions beyond the core set
from . import _isa_extra as _extra_module  # noqa: E402

__all__ += list(_extra_module.__all__)

# The older interface's mask= (a box of the operand grid, _legacy_mask): on the instructions that
# compute each element from the same element (or partition) of their operands, and on those that
# reduce the free axes (rows=True). Instructions whose result depends on element coordinates
# (iota, affine_select) or that read other partitions keep raising Unsupported for mask=.
from .front.masks import accepting_mask as _accepting_mask  # noqa: E402

for _name in ("tensor_copy", "tensor_tensor", "tensor_scalar", "activation", "reciprocal", "scalar_tensor_tensor",
              "tensor_copy_predicated"):
    globals()[_name] = _accepting_mask(globals()[_name])
for _name in ("tensor_reduce", "bn_stats", "bn_aggr", "max8"):
    globals()[_name] = _accepting_mask(globals()[_name], rows=True)
del _name


def __getattr__(name: str) -> Any:
    # An ISA name numeq does not implement: say so, with the kernel's line, never an AttributeError
    # from inside numeq.
    if name.startswith("_"):
        raise AttributeError(name)
    from .machine.context import Unsupported, active, where

    raise Unsupported(f"{where() if active() else '<import>'}: numeq.nki does not implement nki.isa.{name}; see the "
                      "README's table of NKI names")
