"""The DMA engines' instructions: ``dma_copy``, ``dma_transpose`` and ``dma_compute``: rows of the
instruction table. A DMA moves bytes; a dtype change goes through fp32 (nki.isa.dma_copy docs).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..machine import arithmetic as _numerics
from ..machine import races as _races
from ..machine import rules as _rules
from ..machine.context import KernelFault
from .access import as_tensor, new_tile, read, write
from .forms import Form
from .operands import (alu_fn, constraint, destination, raw, reduce_name, shape_fault)
from .path import Call
from .table import instruction
from ..machine.alu import alu
from ..machine.indirect import Indirect, gather, scatter
from .operands import write_where


@instruction("dma_copy", engine="dma", mask="elements", assumptions=("dma_cast_rounding",), forms=[
    Form("current", "dst: tensor, src: tensor, *, dst_rmw_op: op? = None, oob_mode = None, dge_mode = None,"
                     "engine = None")])
def dma_copy(c: Call) -> Any:
    """dst = src through a DMA engine; a dtype change goes through fp32 (nki.isa.dma_copy docs:
    DMA casts via fp32), rounding to nearest even (assumption ``dma_cast_rounding``).
    ``dst_rmw_op=nl.add`` accumulates: dst = dst + src in fp32."""
    ctx, dst, src, dst_rmw_op = c.ctx, c.args["dst"], c.args["src"], c.args["dst_rmw_op"]
    queue = c.args["engine"]  # the engine whose queue issues the transfer
    dst, src = as_tensor(dst, "dst"), as_tensor(src, "src")
    _rules.check_dma_interface(ctx, dst, src, c.args["dge_mode"])
    if isinstance(src, Indirect) or isinstance(dst, Indirect):
        _indirect_copy(c, dst, src, dst_rmw_op)
        c.issue([dst], [src], nbytes=src.size * src.dtype.itemsize,
                  queue="dma" if queue is None else str(getattr(queue, "name", queue)), indirect=True)
        return dst
    _rules.check_on_chip(ctx, src)
    # Element i of src lands in element i of dst: unwritten ones leave theirs undefined (a kernel
    # output so is output_partly_written; anything else reading them later, read_uninitialised).
    _rules.check_read(ctx, src, rows=True)
    if dst.size != src.size:
        raise KernelFault(ctx.find("shape_mismatch", "error", f"dma_copy: {src.name} {src.shape} -> {dst.name} "
                                   f"{dst.shape} differ in size", "documented: nki.isa.dma_copy docstring"))
    _rules.check_dma(ctx, dst, src)
    if not src.base.memory.on_chip:
        _races.program_reads(ctx, src)  # another core's elements read with no barrier between
    # Another program's elements overwritten (an accumulating DMA adds, whatever the order: no race).
    raced = _races.program_writes(ctx, dst) if not dst.base.memory.on_chip and dst_rmw_op is None else None
    if dst_rmw_op is not None:
        values = alu(dst_rmw_op, read(ctx, dst, "dst"), read(ctx, src, "src").reshape(dst.shape), "dst_rmw_op")
        write(ctx, dst, values)
    elif dst.dtype == src.dtype or not ctx.values:  # (values=False: write stores no bytes)
        write(ctx, dst, None, bits=src.data.reshape(dst.shape) if src.shape != dst.shape else src.data)
    else:
        write(ctx, dst, _numerics.fp32_values(src.data, src.dtype).reshape(dst.shape),
              rounding=ctx.assumptions["dma_cast_rounding"])
    if raced is not None:
        raced()
    c.issue([dst], [src], nbytes=src.size * src.dtype.itemsize,
              queue="dma" if queue is None else str(getattr(queue, "name", queue)))
    return dst


def _indirect_copy(c: Call, dst: Any, src: Any, dst_rmw_op: Any) -> None:
    """A gather (src addressed by an index tile) or a scatter (dst so addressed): machine.indirect.
    Elements out of bounds are an error finding, or not transferred with oob_mode=skip (the rest
    of dst keeps its contents); a dtype change goes through fp32 (dma_cast_rounding);
    ``dst_rmw_op`` combines with what dst holds, element by element, in fp32."""
    ctx, oob = c.ctx, c.args["oob_mode"]
    if isinstance(src, Indirect) and isinstance(dst, Indirect):
        raise ctx.unsupported("dma_copy with both src and dst addressed indirectly")
    if dst.size != src.size:
        raise KernelFault(ctx.find("shape_mismatch", "error", f"dma_copy: {src.name} {src.shape} -> {dst.name} "
                                   f"{dst.shape} differ in size", "documented: nki.isa.dma_copy docstring"))
    rounding = ctx.assumptions["dma_cast_rounding"]

    def into_dst(values: np.ndarray) -> np.ndarray:  # fp32 values -> dst's storage bits
        return _numerics.cast_into(values, dst.dtype, rounding)

    if isinstance(src, Indirect):
        bits, inside = gather(ctx, src, oob)
        bits, inside = bits.reshape(dst.shape), inside.reshape(dst.shape)
        if dst_rmw_op is not None:
            values = alu(dst_rmw_op, read(ctx, dst, "dst"), _numerics.fp32_values(bits, src.dtype), "dst_rmw_op")
            bits = into_dst(values)
        elif dst.dtype != src.dtype:
            bits = into_dst(_numerics.fp32_values(bits, src.dtype))
        if inside.all():
            write(ctx, dst, None, bits=bits)
        else:
            write_where(ctx, dst, inside, bits=bits)
        return
    _rules.check_read(ctx, src)
    if dst_rmw_op is None:
        bits = src.data if dst.dtype == src.dtype else into_dst(read(ctx, src, "src"))
        scatter(ctx, dst, bits, oob)
        return
    new = read(ctx, src, "src")

    def combine(old_bits: np.ndarray, values: np.ndarray) -> np.ndarray:  # dst = dst <op> src, in fp32
        return into_dst(alu(dst_rmw_op, _numerics.fp32_values(old_bits, dst.dtype), values, "dst_rmw_op"))

    scatter(ctx, dst, new, oob, combine)


_TRANSPOSE_AXES = {2: (1, 0), 3: (2, 1, 0), 4: (3, 1, 2, 0)}


@instruction("dma_transpose", engine="dma", forms=[
    Form("current", "dst: tensor, src: tensor, axes = None, priority = None, dge_mode = 'unknown',"
                     "oob_mode = 'error'"),
    Form("0.1.0", "src: tensor, *, axes = None, dge_mode = 'unknown'", returns=True)])
def dma_transpose(c: Call) -> Any:
    """dst = src permuted by the DMA engines: 2-D (1, 0), 3-D (2, 1, 0), 4-D (3, 1, 2, 0), the only
    permutations ``axes`` may name; bits move unchanged (src and dst share a dtype); dst in SBUF,
    src in HBM or SBUF (nki.isa dma_transpose docstring). With ``dge_mode=hwdge`` the hardware DGE's
    limits are checked (2-byte dtype, src.shape[-1] <= 128, src.shape[0] rules). Older form
    ``dma_transpose(src, axes=)`` returns a new SBUF tile."""
    ctx, form, v, dtype = c.ctx, c.form, c.args, c.dtype
    src = as_tensor(v["src"], "src")
    if src.ndim not in _TRANSPOSE_AXES:
        raise shape_fault(ctx, "dma_transpose", f"src {src.name} has {src.ndim} dimensions; it takes 2, 3 or 4")
    perm = _TRANSPOSE_AXES[src.ndim]
    if v["axes"] is not None and tuple(int(a) for a in v["axes"]) != perm:
        constraint(ctx, "dma_transpose", f"axes {tuple(v['axes'])}: a {src.ndim}-D transpose supports {perm} only")
        raise ctx.unsupported(f"nisa.dma_transpose with axes={tuple(v['axes'])}")
    if src.base.memory.name == "psum":
        constraint(ctx, "dma_transpose", f"src {src.name} is in PSUM; it takes HBM or SBUF")
    shape = tuple(src.shape[a] for a in perm)
    dst = destination(v, form, shape, dtype, src.dtype)
    if dst.base.memory.name != "sbuf":
        constraint(ctx, "dma_transpose", f"dst {dst.name} is in {dst.base.memory}; it must be in SBUF")
    mode = getattr(v.get("dge_mode"), "name", v.get("dge_mode"))
    if mode == "hwdge":
        s = src.shape
        if src.dtype.itemsize != 2:
            constraint(ctx, "dma_transpose", f"hwdge: src is {src.dtype}; the hardware DGE transposes 2-byte dtypes")
        if s[-1] > 128:
            constraint(ctx, "dma_transpose", f"hwdge: src.shape[-1] = {s[-1]} exceeds 128")
        if (src.ndim == 2 and s[0] != 16) or (src.ndim > 2 and (s[0] not in (1, 2, 4, 8, 16) or (s[0] * s[-2]) % 16)):
            constraint(ctx, "dma_transpose", f"hwdge: src shape {s}: 2-D needs shape[0] == 16; 3-D / 4-D need shape[0] "
                       "in {1, 2, 4, 8, 16} and shape[0] * shape[-2] a multiple of 16")
    if dst.size != src.size:
        raise shape_fault(ctx, "dma_transpose", f"dst {dst.shape} does not hold the transpose of src {src.shape} "
                                                f"({shape})")
    _rules.check_dma(ctx, dst, src)
    if dst.dtype == src.dtype:
        bits = np.ascontiguousarray(np.transpose(raw(ctx, src, "src", "dma"), perm))
        write(ctx, dst, None, bits=bits.reshape(dst.shape))
    else:
        constraint(ctx, "dma_transpose", f"src {src.name} is {src.dtype} and dst {dst.name} {dst.dtype}; they must "
                   "share a dtype")
        write(ctx, dst, np.transpose(read(ctx, src, "src", "dma"), perm).reshape(dst.shape))
    c.issue([dst], [src], nbytes=src.size * src.dtype.itemsize, axes=perm)
    return dst


@instruction("dma_compute", engine="dma", assumptions=("dma_compute_order",), sums="always", forms=[
    Form("current", "dst: tensor, srcs: list, reduce_op: op, scales: list? = None, unique_indices = True,"
                     "oob_mode = 'error'"),
    Form("0.2.0", "dst: tensor, srcs: list, scales: list?, reduce_op: op")])
def dma_compute(c: Call) -> Any:
    """dst = srcs[0] * scales[0] + srcs[1] * scales[1] + ... in fp32 inside the DMA engines, cast
    into dst's dtype (nki.isa dma_compute docstring: only ``nl.add``, every scale 1.0, at most 16
    srcs of equal element counts, HBM or SBUF). More than two srcs are added in the order of
    assumption ``dma_compute_order`` (``sequential``: in list order; ``pairwise``: neighbours level
    by level). Accepts the current order (dst, srcs, reduce_op, scales) and 0.2.0's
    (dst, srcs, scales, reduce_op)."""
    ctx, v = c.ctx, c.args
    dst = as_tensor(v["dst"], "dst")
    srcs = [as_tensor(s, f"srcs[{i}]") for i, s in enumerate(v["srcs"])]
    if not srcs:
        raise TypeError("srcs: dma_compute needs at least one source tensor")
    if len(srcs) > 16:
        constraint(ctx, "dma_compute", f"{len(srcs)} srcs; at most 16")
    op = reduce_name(v["reduce_op"], "reduce_op")
    if op != "add":
        constraint(ctx, "dma_compute", f"reduce_op {op}: only nl.add is supported")
    scales = [1.0] * len(srcs) if v["scales"] is None else [float(s) for s in v["scales"]]
    if len(scales) != len(srcs):
        raise shape_fault(ctx, "dma_compute", f"{len(scales)} scales for {len(srcs)} srcs")
    if any(s != 1.0 for s in scales):
        constraint(ctx, "dma_compute", f"scales {scales}: every scale must be 1.0")
    for t in [dst] + srcs:
        if t.size != dst.size:
            raise shape_fault(ctx, "dma_compute", f"{t.name} has {t.size} elements and dst {dst.name} {dst.size}; "
                                                  "element counts must match")
        if t.base.memory.name == "psum":
            constraint(ctx, "dma_compute", f"{t.name} is in PSUM; the DMA engines compute on HBM and SBUF")
    f = alu_fn(op, "reduce_op")
    with np.errstate(all="ignore"):
        terms = [np.multiply(read(ctx, s, f"srcs[{i}]", "dma").reshape(-1), _numerics.compute_dtype(c), dtype=_numerics.compute_dtype)
                 for i, (s, c) in enumerate(zip(srcs, scales))]
        order = ctx.assumptions["dma_compute_order"]
        while len(terms) > 1:
            if order == "pairwise":
                terms = [f(terms[i], terms[i + 1]) if i + 1 < len(terms) else terms[i] for i in range(0, len(terms), 2)]
            else:
                terms = [f(terms[0], terms[1])] + terms[2:]
    write(ctx, dst, terms[0].reshape(dst.shape))
    _rules.check_dma(ctx, dst, srcs[0])
    c.issue([dst], srcs, nbytes=sum(s.size * s.dtype.itemsize for s in srcs),
              flops=dst.size * (len(srcs) - 1), order=order, sources=len(srcs))
    return dst


@instruction("shared_identity_matrix", engine="dma", module="nki.language", source="nki.language API reference",
             forms=[Form("current", "n: int, dtype: any? = None, dst: tensor? = None", returns=True)])
def shared_identity_matrix(c: Call) -> Any:
    """An n x n identity matrix (1 on the diagonal, exact in every dtype) in a new SBUF tile, or
    written into ``dst`` (nki.language.shared_identity_matrix docs; the compiler keeps one per dtype
    and loads it as a constant: one DMA here)."""
    ctx, v = c.ctx, c.args
    n = v["n"]
    t = as_tensor(v["dst"], "dst") if v["dst"] is not None else new_tile((n, n), v["dtype"] or c.dtype or "uint8")
    if tuple(t.shape) != (n, n):
        raise ValueError(f"dst: shared_identity_matrix({n}) writes an ({n}, {n}) tile, got {t.shape}")
    write(ctx, t, np.eye(n, dtype=np.float32))
    c.issue([t], [], nbytes=n * n * t.dtype.itemsize)
    return t
