"""The GpSimd engine's gathers: ``nc_n_gather`` (each partition gathers from its own flattened free
elements), ``local_gather`` (each of the eight GpSimd cores gathers within its 16 partitions) and
``sequence_bounds`` (where each segment of a row of segment IDs starts and ends): rows of the
instruction table. A gather moves stored bits and computes nothing; an element whose index lies
outside its source, or whose source element no instruction wrote, is left unwritten in the
destination (its value is undefined: a later read of it is a finding too).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..machine import rules as _rules
from ..machine.arithmetic import fp32_values
from ..machine.context import Context
from ..machine.memory import Tensor
from .access import as_tensor, cost_elementwise, read, settled, write
from .forms import Form
from .operands import constraint, destination, doc, flat, raw, shape_fault
from .path import Call
from .table import instruction

_GPSIMD_START = 150  # GpSimd instruction start-up, about 150 cycles (SDK 2.26 iota / local_gather docstrings)
_CORES, _CORE_PARTITIONS = 8, 16  # nki.isa.local_gather docstring: eight cores, 16 partitions each
_ELEM_PER_IDX = (1, 2, 4, 8, 16, 32)


def _partitions(t: Tensor) -> int:
    return t.shape[0] if t.ndim else 1


def _in_sbuf(ctx: Context, name: str, t: Tensor, parameter: str) -> None:
    """Operands of the gathers are in SBUF (their docstrings; PSUM is engine_access's finding)."""
    if t.base.memory.name not in ("sbuf", "psum"):
        constraint(ctx, name, f"{parameter} {t.name} is in {t.base.memory.name}; it must be in SBUF")


def _indices(ctx: Context, t: Tensor, parameter: str) -> np.ndarray:
    """The index tile's values as int64 [P, K] (the stored integers; a float tile, already a
    dtype finding, gives its integral values, any other value reading as -1: out of range)."""
    if t.dtype.kind == "int":
        return flat(raw(ctx, t, parameter, "gpsimd")).astype(np.int64)
    x = flat(read(ctx, t, parameter, "gpsimd")).astype(np.float64)
    ok = np.isfinite(x) & (x == np.trunc(x))
    return np.where(ok, x, -1).astype(np.int64)


def _source(ctx: Context, t: Tensor) -> tuple[np.ndarray, np.ndarray | None]:
    """(the stored bits of gather source ``t`` as [P, F], which of them were written: None where
    all were). Only the elements gathered must be written (``_gathered``), not the whole tile."""
    _rules.check_on_chip(ctx, t)
    settled(ctx, t)
    bits = flat(t.data)
    if t.base.complete or t.mask.min() == t.base.full:
        return bits, None
    return bits, flat(t.mask == t.base.full)


def _gathered(ctx: Context, t: Tensor, written: np.ndarray | None, taken: np.ndarray,
              inside: np.ndarray) -> np.ndarray:
    """Which gathered elements are defined: index inside the source and the source element
    written (``taken``: the written mask gathered as the bits were). An unwritten one moves as a
    DMA moves it: undefined in dst (an error only where it reaches something; rules.check_read),
    the read here kept as where it came from."""
    if written is None:
        return inside
    unread = inside & ~taken
    if unread.any() and ctx.undefined_from is None:
        ctx.undefined_from = _rules.undefined_origin(ctx, t, int(np.count_nonzero(unread)))
    return inside & taken


def _write_gathered(ctx: Context, dst: Tensor, bits: np.ndarray, src_dtype: Any, defined: np.ndarray) -> None:
    """dst = gathered ``bits`` (``src_dtype``'s storage); another dst dtype (already a finding)
    through fp32. Elements not ``defined`` are left unwritten: their values are undefined."""
    if dst.dtype == src_dtype:
        write(ctx, dst, None, bits=np.ascontiguousarray(bits).reshape(dst.shape))
    else:
        write(ctx, dst, fp32_values(np.ascontiguousarray(bits), src_dtype).reshape(dst.shape))
    if not defined.all():
        dst.mask[~defined.reshape(dst.shape)] = 0
        dst.base.complete = False
        if dst.base.undefined_from is None:
            dst.base.undefined_from = ctx.undefined_from


def _bounds_finding(ctx: Context, name: str, index: Tensor, bad: np.ndarray, first: tuple, limit: int,
                    what: str) -> None:
    p, value = first
    ctx.find("index_bounds", "error", f"{name}: index tile {index.name} reaches outside {what} in "
             f"{int(np.count_nonzero(bad))} gathered element(s) (first: partition {p}, element {value}; valid "
             f"0..{limit - 1}); those elements are left undefined", doc(name))


@instruction("nc_n_gather", engine="gpsimd", forms=[
    Form("current", "dst: tensor, data: tensor, indices: tensor")])
def nc_n_gather(c: Call) -> Any:
    """dst[p, j] = data[p, indices[p, j]] on the GpSimd engine, the free dims of ``data``, ``indices``
    and ``dst`` each flattened (row-major) and every partition gathering from its own (nki.isa
    nc_n_gather docstring). The bits move unchanged: dst has data's dtype, indices are uint32,
    all three in SBUF with the same partitions (at most 128), dst as many elements per partition
    as indices. An index outside ``[0, data.size / data.shape[0])`` (the docstring's range) is an
    index_bounds finding and leaves its element of dst undefined (unwritten). Cost estimate: the
    engine's 150-cycle start plus one cycle per gathered element (numeq's estimate: the current
    docstring gives none; ``groups`` in the trace is its n = ceil(elements per partition / 512))."""
    ctx, v = c.ctx, c.args
    dst, data, indices = as_tensor(v["dst"], "dst"), as_tensor(v["data"], "data"), as_tensor(v["indices"], "indices")
    for t, parameter in ((dst, "dst"), (data, "data"), (indices, "indices")):
        _in_sbuf(ctx, "nc_n_gather", t, parameter)
    _rules.check_engine_access(ctx, "gpsimd", [dst, data, indices], "nc_n_gather")
    if dst.dtype != data.dtype:
        constraint(ctx, "nc_n_gather", f"dst {dst.name} is {dst.dtype} and data {data.name} {data.dtype}; dst must "
                                       "have data's dtype")
    if indices.dtype.name != "uint32":
        constraint(ctx, "nc_n_gather", f"indices {indices.name} is {indices.dtype}; it must be uint32")
    p = _partitions(data)
    if _partitions(indices) != p or _partitions(dst) != p:
        raise shape_fault(ctx, "nc_n_gather", f"data {data.name} {data.shape}, indices {indices.name} "
                                              f"{indices.shape} and dst {dst.name} {dst.shape} must have the same "
                                              "partition dimension")
    if dst.free_size() != indices.free_size():
        raise shape_fault(ctx, "nc_n_gather", f"dst {dst.name} {dst.shape} holds {dst.free_size()} elements per "
                                              f"partition; indices {indices.name} {indices.shape} holds "
                                              f"{indices.free_size()}")
    idx = _indices(ctx, indices, "indices")
    bits, written = _source(ctx, data)
    f = data.free_size()
    inside = (idx >= 0) & (idx < f)
    if not inside.all():
        r, j = np.argwhere(~inside)[0]
        _bounds_finding(ctx, "nc_n_gather", indices, ~inside, (int(r), int(idx[r, j])), f,
                        f"data {data.name}'s {f} elements per partition")
    safe = np.where(inside, idx, 0)
    out = np.take_along_axis(bits, safe, axis=1)
    taken = None if written is None else np.take_along_axis(written, safe, axis=1)
    _write_gathered(ctx, dst, out, data.dtype, _gathered(ctx, data, written, taken, inside))
    k = indices.free_size()
    c.issue([dst], [data, indices], cycles=_GPSIMD_START + k, groups=-(-k // 512))
    return dst


def _local_gather_cycles(valid: int, n: int, itemsize: int) -> int:
    """SDK 2.26 local_gather docstring's estimate: 150 + valid * n / C, with
    C = ((28 + t * n) / (t * n)) / min(4 / dtype_size, n) and t = 4."""
    t = 4
    per = ((28 + t * n) / (t * n)) / min(4 / itemsize, n)
    return int(_GPSIMD_START + valid * n / per)


def _core_aligned(ctx: Context, t: Tensor, parameter: str) -> None:
    """Each 16 partitions of the operand are one GpSimd core's (partitions 16k .. 16k+15)."""
    if not t.base.memory.on_chip:
        return
    first, count, step = t.partitions()
    if first % _CORE_PARTITIONS or (count > 1 and step != 1):
        constraint(ctx, "local_gather", f"{parameter} {t.name} starts at partition {first} with step {step}; each "
                                        f"{_CORE_PARTITIONS} partitions of it must be one GpSimd core's (partitions "
                                        "16k to 16k+15)")


@instruction("local_gather", engine="gpsimd", forms=[
    Form("current", "dst: tensor, src_buffer: tensor, index: tensor, num_elem_per_idx: int = 1,"
                     "num_valid_indices: int? = None"),
    Form("0.1.0", "src_buffer: tensor, index: tensor, num_elem_per_idx: int = 1, num_valid_indices: int? = None",
         returns=True)])
def local_gather(c: Call) -> Any:
    """On the GpSimd engine, each of its eight cores takes its 16 partitions g of ``index`` and
    ``src_buffer`` (partitions 16g .. 16g+15), flattens the indices partition first
    (``index[g].flatten(order='F')``: index[0, 0], index[1, 0], ... index[15, 0], index[0, 1], ...;
    an index tile of several free dims has them flattened row-major first, numeq's reading), keeps
    the first ``num_valid_indices`` and, for every partition p of the group and every kept index k,
    copies ``num_elem_per_idx`` elements of src_buffer's partition p starting at element index[k]
    of its flattened free dims: dst[p, k, e] = src_flat[p, indices_1d[k] + e] (nki.isa local_gather
    docstring and its NumPy equivalent, the SDK's test_nki_isa_local_gather.py, which passes
    ``index * num_elem_per_idx`` to the kernel: an index counts elements, not groups of
    num_elem_per_idx). dst holds P x num_valid_indices x num_elem_per_idx elements of src_buffer's
    dtype (no cast), the older form's new tile has that shape. Checked as documented: index uint16,
    src_buffer's and index's partitions equal and a multiple of 16, num_elem_per_idx in
    {1, 2, 4, 8, 16, 32}, num_valid_indices at most each core's index count and at most 4096.
    Undocumented, numeq's choices: num_valid_indices None or 0 means every index of the slice (the
    NumPy equivalent's ``if num_valid_indices``); an element past src_buffer's partition
    ("out-of-bound index access is undefined") is an index_bounds finding and stays undefined
    (unwritten); operands whose 16-partition groups are not the cores' are a finding. Cost: SDK
    2.26's estimate, 150 + (num_valid_indices * num_elem_per_idx) / C cycles."""
    ctx, v = c.ctx, c.args
    src, index = as_tensor(v["src_buffer"], "src_buffer"), as_tensor(v["index"], "index")
    n = int(v["num_elem_per_idx"])
    if n < 1:
        raise shape_fault(ctx, "local_gather", f"num_elem_per_idx {n}: it must be one of 1, 2, 4, 8, 16, 32")
    if n not in _ELEM_PER_IDX:
        constraint(ctx, "local_gather", f"num_elem_per_idx {n} is not one of 1, 2, 4, 8, 16, 32")
    p = _partitions(src)
    if _partitions(index) != p:
        raise shape_fault(ctx, "local_gather", f"src_buffer {src.name} {src.shape} and index {index.name} "
                                               f"{index.shape} must have the same partition dimension")
    if p % _CORE_PARTITIONS:
        raise shape_fault(ctx, "local_gather", f"src_buffer {src.name} has {p} partitions; it must be a multiple of 16 "
                                               "(one GpSimd core per 16 partitions)")
    per_core = _CORE_PARTITIONS * index.free_size()
    valid = v["num_valid_indices"]
    valid = per_core if not valid else int(valid)
    if valid < 0 or valid > per_core:
        raise shape_fault(ctx, "local_gather", f"num_valid_indices {valid}: each core's 16 partitions of index "
                                               f"{index.name} {index.shape} hold {per_core} indices")
    if valid > 4096:
        constraint(ctx, "local_gather", f"num_valid_indices {valid}: at most 4096 indices per core")
    dst = destination(v, c.form, (p, valid, n), c.dtype, src.dtype)
    for t, parameter in ((dst, "dst"), (src, "src_buffer"), (index, "index")):
        _in_sbuf(ctx, "local_gather", t, parameter)
        _core_aligned(ctx, t, parameter)
    _rules.check_engine_access(ctx, "gpsimd", [dst, src, index], "local_gather")
    if dst.dtype != src.dtype:
        constraint(ctx, "local_gather", f"dst {dst.name} is {dst.dtype} and src_buffer {src.name} {src.dtype}; the "
                                        "gather keeps src_buffer's dtype (no casting)")
    if index.dtype.name != "uint16":
        constraint(ctx, "local_gather", f"index {index.name} is {index.dtype}; it must be uint16")
    if _partitions(dst) != p or dst.free_size() != valid * n:
        raise shape_fault(ctx, "local_gather", f"dst {dst.name} {dst.shape} must have {p} partitions of "
                                               f"{valid} x {n} = {valid * n} elements")
    idx = _indices(ctx, index, "index")
    bits, written = _source(ctx, src)
    f = src.free_size()
    out = np.zeros((p, valid * n), dtype=bits.dtype)
    taken = None if written is None else np.zeros((p, valid * n), dtype=bool)
    inside = np.zeros((p, valid * n), dtype=bool)
    step = np.arange(n, dtype=np.int64)
    for g in range(p // _CORE_PARTITIONS):
        rows = slice(g * _CORE_PARTITIONS, (g + 1) * _CORE_PARTITIONS)
        indices_1d = idx[rows].flatten(order="F")[:valid]
        elements = (indices_1d[:, None] + step).reshape(-1)
        ok = (elements >= 0) & (elements < f)
        safe = np.where(ok, elements, 0)
        out[rows] = bits[rows][:, safe]
        inside[rows] = ok
        if taken is not None:
            taken[rows] = written[rows][:, safe]
    if not inside.all():
        r, j = np.argwhere(~inside)[0]
        g0 = r - r % _CORE_PARTITIONS
        start = int(idx[g0:g0 + _CORE_PARTITIONS].flatten(order="F")[j // n])
        _bounds_finding(ctx, "local_gather", index, ~inside, (int(r), start + int(j % n)), f,
                        f"src_buffer {src.name}'s {f} elements per partition (num_elem_per_idx {n}); out-of-bound "
                        "access is undefined")
    _write_gathered(ctx, dst, out, src.dtype, _gathered(ctx, src, written, taken, inside))
    c.issue([dst], [src, index], cycles=_local_gather_cycles(valid, n, src.dtype.itemsize),
            num_elem_per_idx=n, num_valid_indices=valid)
    return dst


_BOUNDS_DTYPES = ("float32", "int32")


@instruction("sequence_bounds", engine="gpsimd", forms=[
    Form("current", "dst: tensor, segment_ids: tensor"),
    Form("0.1.0", "*, segment_ids: tensor", returns=True)])
def sequence_bounds(c: Call) -> Any:
    """For each element i of a row of ``segment_ids`` [1, n], the [start, end) of the run of equal
    IDs holding it, on the GpSimd engine: dst[0, 0, i] = the run's first index, dst[0, 1, i] = one
    past its last; a padding element (ID 0) gets start n and end -1 (nki.isa sequence_bounds
    docstring and its NumPy equivalent, which compares neighbours: a segment is a run of equal
    consecutive IDs; n is segment_ids' free size, its free dims flattened row-major). dst
    [1, 2, n] (any shape of 1 partition and 2n elements: the starts, then the ends); both tiles
    float32 or int32, in SBUF; IDs non-negative integers. A segment_ids of more partitions (the
    docstring: the partition dimension must be 1) is a finding; numeq then bounds each partition
    as a row of its own, as the NumPy equivalent's apply_along_axis does. Older form
    ``sequence_bounds(segment_ids=, dtype=None)`` returns a new tile [P, 2, n] of ``dtype``
    (default: segment_ids' dtype). Cost estimate: max(64, n) cycles (numeq's; none documented)."""
    ctx, v = c.ctx, c.args
    seg = as_tensor(v["segment_ids"], "segment_ids")
    p, n = _partitions(seg), seg.free_size()
    dst = destination(v, c.form, (p, 2, n), c.dtype, seg.dtype)
    for t, parameter in ((dst, "dst"), (seg, "segment_ids")):
        _in_sbuf(ctx, "sequence_bounds", t, parameter)
        if t.dtype.name not in _BOUNDS_DTYPES:
            constraint(ctx, "sequence_bounds", f"{parameter} {t.name} is {t.dtype}; it must be float32 or int32")
    _rules.check_engine_access(ctx, "gpsimd", [dst, seg], "sequence_bounds")
    if p != 1:
        constraint(ctx, "sequence_bounds", f"segment_ids {seg.name} {seg.shape} has {p} partitions; the partition "
                                           "dimension must be 1")
    if _partitions(dst) != p or dst.free_size() != 2 * n:
        raise shape_fault(ctx, "sequence_bounds", f"dst {dst.name} {dst.shape} must have segment_ids' {p} "
                                                  f"partition(s) of 2 x {n} elements (start and end per element)")
    if seg.dtype.kind == "int":
        ids = flat(raw(ctx, seg, "segment_ids", "gpsimd")).astype(np.float64)
    else:
        ids = flat(read(ctx, seg, "segment_ids", "gpsimd")).astype(np.float64)
    with np.errstate(invalid="ignore"):
        bad = ~(np.isfinite(ids) & (ids >= 0) & (ids == np.trunc(ids)))
    if bad.any():
        constraint(ctx, "sequence_bounds", f"segment_ids {seg.name} holds {int(np.count_nonzero(bad))} value(s) that "
                                           f"are not non-negative integers (first: {ids[bad][0]!r})")
    pos = np.arange(n, dtype=np.int64)
    first = np.ones_like(ids, dtype=bool)
    last = np.ones_like(ids, dtype=bool)
    first[:, 1:] = ids[:, 1:] != ids[:, :-1]
    last[:, :-1] = ids[:, :-1] != ids[:, 1:]
    starts = np.maximum.accumulate(np.where(first, pos, 0), axis=1)
    ends = np.minimum.accumulate(np.where(last, pos + 1, n)[:, ::-1], axis=1)[:, ::-1]
    pad = ids == 0
    starts = np.where(pad, n, starts)
    ends = np.where(pad, -1, ends)
    write(ctx, dst, np.stack([starts, ends], axis=1).astype(np.float64).reshape(dst.shape))
    c.issue([dst], [seg], cycles=cost_elementwise(seg))
    return dst
