"""Search and DMA instructions: the Vector engine's top-8 family (``max8``, ``nc_find_index8``,
``nc_match_replace8``), GpSimd's ``nonzero_with_count``, and the DMA engines' ``dma_transpose``
and ``dma_compute``. Comparisons are exact on fp32 values (the engines widen their inputs to
fp32, nki.isa docs); indices are exact integers; a transpose moves bits.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .machine import rules as _rules
from .machine.context import Context, current
from .instructions.access import as_tensor, cost_elementwise, read, write
from .instructions.operands import REQUIRED, Form, alu_fn, bind, constraint, destination, flat, generation, raw, reduce_name, \
    shape_fault
from .machine.memory import Tensor

__all__ = ["max8", "nc_find_index8", "nc_match_replace8", "nonzero_with_count", "dma_transpose", "dma_compute"]

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


def max8(*args: Any, **kwargs: Any) -> Any:
    """dst[P, 8] = the 8 largest fp32 values of each partition of src, in descending order, on the
    Vector engine (nki.isa max8 docstring; src up to 3-D with 8..16384 elements per partition).
    A NaN's rank is not documented: numeq ranks it above every number. Older form
    ``max8(src=)`` returns a new tile."""
    ctx = current()
    form, v, dtype = bind("max8", args, kwargs, [
        Form("current", (("dst", "tensor", REQUIRED), ("src", "tensor", REQUIRED)), 2),
        Form("0.1.0", (("src", "tensor", REQUIRED),), 0, returns=True)])
    src = as_tensor(v["src"], "src")
    x = _search_input(ctx, "max8", src, "src")
    if x.shape[1] < 8:
        raise shape_fault(ctx, "max8", f"src {src.name} has {x.shape[1]} elements per partition; 8 are needed")
    dst = destination(v, form, (x.shape[0], 8), dtype, src.dtype)
    _eight(ctx, "max8", dst, "dst", x.shape[0])
    top = np.sort(x, axis=1, kind="stable")[:, ::-1][:, :8]  # ascending sort puts NaN last: reversed, first
    write(ctx, dst, np.ascontiguousarray(top))
    ctx.issue("vector", "max8", [dst], [src], cycles=x.shape[1])
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


def nc_find_index8(*args: Any, **kwargs: Any) -> Any:
    """dst[P, 8] = the index of the first occurrence in each partition of data of each of that
    partition's 8 vals, compared as fp32 values; a value not present gives the all-ones sentinel;
    repeated vals take successive occurrences, paired with the columns in ascending order (nki.isa
    nc_find_index8 docstring). dst uint32 (the older form's default) or uint16."""
    ctx = current()
    form, v, dtype = bind("nc_find_index8", args, kwargs, [
        Form("current", (("dst", "tensor", REQUIRED), ("data", "tensor", REQUIRED), ("vals", "tensor", REQUIRED)), 3),
        Form("0.1.0", (("data", "tensor", REQUIRED), ("vals", "tensor", REQUIRED)), 0, returns=True)])
    data, vals_t = as_tensor(v["data"], "data"), as_tensor(v["vals"], "vals")
    x = _search_input(ctx, "nc_find_index8", data, "data")
    _eight(ctx, "nc_find_index8", vals_t, "vals", x.shape[0])
    vals = flat(read(ctx, vals_t, "vals", rows=True))
    dst = destination(v, form, (x.shape[0], 8), dtype, "uint32")
    _eight(ctx, "nc_find_index8", dst, "dst", x.shape[0])
    _index_dtype(ctx, "nc_find_index8", dst, "dst")
    idx, found = _matches(x, vals, range(8))
    _write_indices(ctx, dst, idx, found)
    ctx.issue("vector", "nc_find_index8", [dst], [data, vals_t], cycles=x.shape[1])
    return dst


def nc_match_replace8(*args: Any, **kwargs: Any) -> Any:
    """dst = data with the first occurrence of each of the 8 vals of each partition replaced by
    ``imm`` (fp32 compare; values through fp32 into dst's dtype), on the Vector engine; repeated
    vals are taken in reverse order (column 7 first), each claiming the next occurrence;
    ``dst_idx`` [P, 8] receives the matched positions (nki.isa nc_match_replace8 docstring). A
    value not present leaves data unchanged and gives nc_find_index8's all-ones sentinel in
    dst_idx (not documented for this instruction). Matches are found in data as given (a replaced
    element is not matched again)."""
    ctx = current()
    tail = (("vals", "tensor", REQUIRED), ("imm", "value", REQUIRED), ("dst_idx", "tensor?", None))
    form, v, dtype = bind("nc_match_replace8", args, kwargs, [
        Form("current", (("dst", "tensor", REQUIRED), ("data", "tensor", REQUIRED)) + tail, 5),
        Form("0.1.0", (("data", "tensor", REQUIRED),) + tail, 0, returns=True)])
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
    ctx.issue("vector", "nc_match_replace8", outs, [data, vals_t], cycles=max(64, x.shape[1]),
              replaced=int(found.sum()))
    return dst


def nonzero_with_count(*args: Any, **kwargs: Any) -> Any:
    """On the GpSimd engine (NeuronCore-v3+), each of its 8 cores reads its first partition (16k,
    k = 0..7) of src [P, T] and writes its first partition of dst [P, T + 1]: the positions of the
    nonzero elements plus ``index_offset``, then ``padding_val`` up to T, then their count; every
    other partition of dst is left unmodified (nki.isa nonzero_with_count docstring). src fp32 or
    int32, dst int32, both in SBUF; partitions are physical (a view starting at partition 16 is
    core 1's)."""
    ctx = current()
    _, v, _ = bind("nonzero_with_count", args, kwargs, [
        Form("current", (("dst", "tensor", REQUIRED), ("src", "tensor", REQUIRED), ("index_offset", "int", 0),
                         ("padding_val", "int", -1)), 4)])
    generation(ctx, "nonzero_with_count", 3)
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
    s_first, _, s_step = src.partitions()
    d_first, _, d_step = dst.partitions()
    cores = 0
    for r in range(src.shape[0]):
        ps, pd = s_first + r * s_step, d_first + r * d_step
        if ps % 16 or pd % 16:
            continue
        row = src[r:r + 1]
        x = flat(raw(ctx, row, "src", "gpsimd") if src.dtype.kind == "int" else read(ctx, row, "src", "gpsimd"))[0]
        hits = np.flatnonzero(x != 0).astype(np.int64) + int(v["index_offset"])
        out = np.full(t + 1, int(v["padding_val"]), dtype=np.int64)
        out[:hits.size] = hits
        out[t] = hits.size
        write(ctx, dst[r:r + 1], out.astype(np.float64).reshape(dst[r:r + 1].shape))
        cores += 1
    ctx.issue("gpsimd", "nonzero_with_count", [dst], [src], cycles=cost_elementwise(src), cores=cores)
    return dst


# --- DMA ---------------------------------------------------------------------------------------------

_TRANSPOSE_AXES = {2: (1, 0), 3: (2, 1, 0), 4: (3, 1, 2, 0)}


def dma_transpose(*args: Any, **kwargs: Any) -> Any:
    """dst = src permuted by the DMA engines: 2-D (1, 0), 3-D (2, 1, 0), 4-D (3, 1, 2, 0), the only
    permutations ``axes`` may name; bits move unchanged (src and dst share a dtype); dst in SBUF,
    src in HBM or SBUF (nki.isa dma_transpose docstring). With ``dge_mode=hwdge`` the hardware DGE's
    limits are checked (2-byte dtype, src.shape[-1] <= 128, src.shape[0] rules). Older form
    ``dma_transpose(src, axes=)`` returns a new SBUF tile."""
    ctx = current()
    form, v, dtype = bind("dma_transpose", args, kwargs, [
        Form("current", (("dst", "tensor", REQUIRED), ("src", "tensor", REQUIRED), ("axes", "any", None),
                         ("priority", "any", None), ("dge_mode", "any", "unknown"),
                         ("oob_mode", "any", "error")), 6),
        Form("0.1.0", (("src", "tensor", REQUIRED), ("axes", "any", None)), 1, returns=True)])
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
    ctx.issue("dma", "dma_transpose", [dst], [src], nbytes=src.size * src.dtype.itemsize, axes=perm)
    return dst


def dma_compute(*args: Any, **kwargs: Any) -> Any:
    """dst = srcs[0] * scales[0] + srcs[1] * scales[1] + ... in fp32 inside the DMA engines, cast
    into dst's dtype (nki.isa dma_compute docstring: only ``nl.add``, every scale 1.0, at most 16
    srcs of equal element counts, HBM or SBUF). More than two srcs are added in the order of
    assumption ``dma_compute_order`` (``sequential``: in list order; ``pairwise``: neighbours level
    by level). Accepts the current order (dst, srcs, reduce_op, scales) and 0.2.0's
    (dst, srcs, scales, reduce_op)."""
    ctx = current()
    form, v, _ = bind("dma_compute", args, kwargs, [
        Form("current", (("dst", "tensor", REQUIRED), ("srcs", "list", REQUIRED), ("reduce_op", "op", REQUIRED),
                         ("scales", "list?", None), ("unique_indices", "any", True), ("oob_mode", "any", "error")),
             6),
        Form("0.2.0", (("dst", "tensor", REQUIRED), ("srcs", "list", REQUIRED), ("scales", "list?", REQUIRED),
                       ("reduce_op", "op", REQUIRED)), 4)])
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
        terms = [np.multiply(read(ctx, s, f"srcs[{i}]", "dma").reshape(-1), np.float32(c), dtype=np.float32)
                 for i, (s, c) in enumerate(zip(srcs, scales))]
        order = ctx.assumptions["dma_compute_order"]
        while len(terms) > 1:
            if order == "pairwise":
                terms = [f(terms[i], terms[i + 1]) if i + 1 < len(terms) else terms[i] for i in range(0, len(terms), 2)]
            else:
                terms = [f(terms[0], terms[1])] + terms[2:]
    write(ctx, dst, terms[0].reshape(dst.shape))
    _rules.check_dma(ctx, dst, srcs[0])
    ctx.issue("dma", "dma_compute", [dst], srcs, nbytes=sum(s.size * s.dtype.itemsize for s in srcs),
              flops=dst.size * (len(srcs) - 1), order=order, sources=len(srcs))
    return dst
