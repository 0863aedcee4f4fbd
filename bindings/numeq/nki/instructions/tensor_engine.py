"""The Tensor Engine's instructions: ``nc_matmul`` (the PE array and PSUM accumulation, and its
transpose mode) and ``nc_transpose``: rows of the instruction table. One nc_matmul computes
through the Trainium platform's PE-array plan for its tile of K, then PSUM's fp32 accumulation; a
K loop of them into one PSUM tile is computed when the tile is read (``machine.psum``), the same
values at the op-level emulation's speed.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..machine import arithmetic as _numerics
from ..machine import psum as _psum
from ..machine import rules as _rules
from ..machine.context import KernelFault, where
from ..machine.memory import WRITER_MATMUL, WRITER_READ, Tensor
from .access import (as_tensor, leave_undefined, mark_written, new_tile, read, read_partly, summed_undefined,
                     unwritten_operand, write)
from .forms import Form
from .path import Call
from .table import instruction


@instruction("nc_matmul", engine="tensor", assumptions=("matmul_accumulate", "psum_rounding", "matmul_column_tiling"),
             forms=[
    Form("current", "dst: tensor, stationary: tensor, moving: tensor, *, is_stationary_onezero = False,"
                     "is_moving_onezero = False, is_transpose = False, tile_position = None, tile_size = None,"
                     "perf_mode = None, accumulate = None"),
    Form("0.1.0", "stationary: tensor, moving: tensor, *, is_stationary_onezero = False,"
                     "is_moving_onezero = False, is_transpose = False, tile_position = None, tile_size = None,"
                     "perf_mode = None, accumulate = None", returns=True)])
def nc_matmul(c: Call) -> Any:
    """dst[M, N] (PSUM, fp32) <- stationary[K, M]^T @ moving[K, N]: the Trainium platform's PE-array
    plan for one tile of K, then PSUM accumulation in fp32 (``accumulate``: True adds, False
    overwrites, None: the target's ``matmul_accumulate`` assumption). ``is_transpose=True``: from
    NeuronCore-v3 the transpose mode (``_transpose_mode``: stationary's bits transposed through an
    identity moving tile); on NeuronCore-v2, which has no transpose mode, the same matmul as
    without it. Older form ``nc_matmul(stationary, moving)`` returns a new PSUM tile.

    ``tile_position=(start_row, start_column)``, ``tile_size=(row_size, column_size)``: PE tiling
    (``pe_tile``), several small matmuls side by side on the 128 x 128 PE array. A tiled matmul
    computes the values of the same matmul on the whole array: the platform's plan for its K, then
    PSUM, through the path (and the PSUM chains) any nc_matmul takes; the documentation offers
    tiling for throughput and says nothing of other values. Its trace row keeps the tile and
    counts the Tensor Engine's cycles by the share of the array the tile holds (``tile_cycles``)."""
    ctx, v = c.ctx, c.args
    dst, stationary, moving = v.get("dst"), v["stationary"], v["moving"]
    tile_position, tile_size, perf_mode, accumulate = v["tile_position"], v["tile_size"], v["perf_mode"], v["accumulate"]
    is_transpose = v["is_transpose"]
    stationary, moving = as_tensor(stationary, "stationary"), as_tensor(moving, "moving")
    double_row = _double_row(perf_mode)
    tile = pe_tile(ctx, tile_position, tile_size, double_row)
    if is_transpose and ctx.target.generation >= 3:
        return _transpose_mode(c, dst, stationary, moving, accumulate, double_row, tile)
    # NeuronCore-v2 has no transpose mode: is_transpose=True only labels the instruction for the
    # profiler, and the PE array computes stationary^T @ moving as any matmul (nki.isa.nc_matmul).
    k, m, n = _matmul_sizes(ctx, stationary, moving, double_row)
    if dst is None:  # the older form: a new PSUM tile
        dst = new_tile((m, n), "float32", "psum")
    dst = as_tensor(dst, "dst")
    _rules.check_on_chip(ctx, stationary)  # the partition rules first: K rows are partitions
    _rules.check_on_chip(ctx, moving)
    _rules.check_matmul(ctx, dst, stationary, moving, k, m, n, double_row, staged=c.form.returns)
    check_tile_fit(ctx, tile, stationary, moving, m)
    # double_row (nki.isa.nc_matmul): stationary [128, 2, M], moving [128, 2, N] contract over the
    # partition and the first free axis, einsum('kli,klj->ij'); row (k, l) of the flattened K is
    # 2k + l, so each PE's two products are neighbours, as the platform's double_row plan pairs them.
    fmt = _matmul_format(stationary.dtype.format, moving.dtype.format)
    a, rows_undefined = _matmul_operand(ctx, stationary, "stationary", fmt, m)
    b, columns_undefined = _matmul_operand(ctx, moving, "moving", fmt, n)
    a, b = a.reshape(k, m), b.reshape(k, n)
    if double_row and not {stationary.dtype.format, moving.dtype.format} <= {"e4m3", "e5m2", "e4m3fn"}:
        raise KernelFault(ctx.find("matmul_perf_mode", "error", f"nc_matmul perf_mode=double_row on {stationary.dtype} x "
                                   f"{moving.dtype}: double_row takes fp8 inputs only",
                                   ctx.target.spec("matmul_contraction_double_row").cite()))
    if double_row and fmt not in ("e4m3", "e5m2", "e4m3fn"):
        raise ctx.unsupported(f"nc_matmul double_row on {stationary.dtype} x {moving.dtype} (numeq's double_row "
                              "plan takes two fp8 operands of one format)")
    if a.shape[1] * b.shape[1] != dst.size or dst.shape[0] != m:
        raise KernelFault(ctx.find("shape_mismatch", "error", f"nc_matmul result [{m}, {n}] does not fit {dst.name} "
                                   f"{dst.shape}", "documented: nki.isa.nc_matmul docstring"))
    adds, mode = accumulation(ctx, dst, accumulate)
    undefined = result_undefined(rows_undefined, columns_undefined, m, n)
    if mode != "overwrite":
        undefined = summed_undefined(ctx, dst, adds, undefined)
    if mode != "mixed" and dst.dtype.format == "fp32":
        # Computed when the PSUM tile is read (machine.psum: the chain in one call of the platform plan).
        _psum.defer(ctx, dst, (a, stationary), (b, moving), fmt, k, double_row, mode == "accumulate")
        mark_written(ctx, dst, WRITER_MATMUL)
    else:  # a mixed write, or (NeuronCore-v4) a bf16 PSUM tile
        result = (_numerics.matmul_tile(a, b, fmt, ctx.tile_platform(k, double_row, fmt)).reshape(dst.shape)
                  if ctx.values else np.zeros(dst.shape, np.float32))
        write_matmul_result(ctx, dst, result, adds)
    if undefined is not None:
        leave_undefined(ctx, dst, undefined)
    key = chain_step(ctx, dst, mode)
    cycles = max(min(64, m), n) * (4 if "fp32" in (stationary.dtype.format, moving.dtype.format) else 1)
    c.issue([dst], [stationary, moving], flops=2 * k * m * n, cycles=tile_cycles(cycles, tile),
              k=k, m=m, n=n, accumulate=mode, psum=key,
              in_fmt=fmt, double_row=double_row, **({"transpose": True} if is_transpose else {}),
              **tile_detail(tile, cycles))
    return dst


def accumulation(ctx: Any, dst: Tensor, accumulate: Any) -> tuple[np.ndarray, str]:
    """(which elements of PSUM tile ``dst`` a matmul adds into, its mode: "accumulate",
    "overwrite" or "mixed"), the accumulation rules checked where it adds (``_accumulating``)."""
    adds = _accumulating(ctx, dst, accumulate)
    some, every = (bool(adds), bool(adds)) if adds.ndim == 0 else (bool(adds.any()), bool(adds.all()))
    if some:
        _rules.check_accumulate(ctx, dst, adds)
    return adds, "accumulate" if every else "overwrite" if not some else "mixed"


def chain_step(ctx: Any, dst: Tensor, mode: str) -> tuple[int, int]:
    """Count a matmul into the accumulation chain at ``dst`` (the run's platform reads the chains'
    lengths); returns the chain's key, (PSUM buffer id, element offset)."""
    key = (dst.base.id, dst.element_offset())
    ctx.psum_chain[key] = ctx.psum_chain.get(key, 0) + 1 if mode == "accumulate" else 1
    return key


def write_matmul_result(ctx: Any, dst: Tensor, result: np.ndarray, adds: np.ndarray) -> None:
    """One matmul's fp32 ``result`` into PSUM tile ``dst``: overwriting, or added where ``adds``
    (PSUM's fp32 addition, ``psum_rounding``). A bf16 dst (NeuronCore-v4, trainium3_arch.rst "BF16
    Matmul Results in PSUM"): the fp32 result is rounded to bf16 as it is written; an accumulation
    upcasts the PSUM value to fp32, adds in fp32 and rounds the sum to bf16."""
    if adds.any():
        if dst.dtype.format != "fp32" and ctx.bf16_psum_chain is None:  # a kernel's choice: every K
            ctx.bf16_psum_chain = ctx.at or where()                      # tile's sum rounded to bf16
        old = _numerics.fp32_values(dst.data, dst.dtype)
        summed = _numerics.accumulate_fp32(old, result, ctx.assumptions["psum_rounding"])
        result = summed if adds.all() else np.where(adds, summed, result)
    write(ctx, dst, result, WRITER_MATMUL)


# PE tiling (nki.isa.nc_matmul docstring, "Tiling mode"; SDK 2.26's nc_matmul, "PE tiling").
_TILING = "documented: nki.isa.nc_matmul docstring (Tiling mode"
_TILE_SIZES = ("Row tiling mode slices the 128 PE rows into 2x 64 row tiles (NeuronCore-v2 or newer), or 4x 32 row "
               "tiles (NeuronCore-v3 or newer). Column tiling mode slices the 128 PE columns in the same fashion")
_TILE_BOTH = "tile_position and tile_size must both be set to enable tiling mode"
_TILE_START = ("The start_row must be a multiple of row_size specified in tile_size and must not exceed 128. "
               "Similarly, the start_column must be a multiple of column_size and must not exceed 128")
_TILE_VALUES = "The values in tile_position and tile_size tuples can be integers or affine expressions"


def pe_tile(ctx: Any, tile_position: Any, tile_size: Any, double_row: bool) -> tuple[int, int, int, int] | None:
    """The PE tile of one nc_matmul, ``(start_row, start_column, row_size, column_size)``, or None
    for the whole array (neither argument set: None, or the current signature's default ``()``).
    The docstring's rules, each a finding naming the parameter:

    - both set, each a pair of integers (else ``matmul_tile``, and the run stops: there is no tile);
    - each size 128, 64 or 32: 2x 64 from NeuronCore-v2, 4x 32 from NeuronCore-v3 (a size the
      array is not split into: ``matmul_tile``; 32 on NeuronCore-v2: ``target_generation``), rows
      and columns "in the same fashion", set independently;
    - each start a multiple of its size, and the tile inside the 128 x 128 array ("must not exceed
      128" read as the tile's last row or column: a start of 128 names no PE; ``matmul_tile``);
    - column tiling (a column size under 128) not with ``perf_mode=double_row`` (``matmul_tile``);
    - under assumption ``matmul_column_tiling=row_only`` (the docstring's :param: lines) a column
      size other than 128 or a start column other than 0 is ``matmul_tile``.

    Not checked, the documentation being silent: where the operands and dst lie relative to the
    tile (nki-library's column-tiled kernels write dst from partition start_column; AWS's example
    loads each operand at partition 0 whatever its row tile), and the v4 tensor-indirection rule
    (``tile_position`` (0, 0) with ``.indirect()``: numeq has no NeuronCore-v4 target)."""
    unset_position = tile_position is None or (isinstance(tile_position, (tuple, list)) and not tile_position)
    unset_size = tile_size is None or (isinstance(tile_size, (tuple, list)) and not tile_size)
    if unset_position and unset_size:
        return None
    if unset_position or unset_size:
        given, missing = ("tile_size", "tile_position") if unset_position else ("tile_position", "tile_size")
        raise KernelFault(ctx.find("matmul_tile", "error", f"nc_matmul: {given}={tile_size if unset_position else tile_position!r} "
                                   f"without {missing}=: {_TILE_BOTH}", f"{_TILING}: \"{_TILE_BOTH}\")"))
    start_row, start_column = _pair(ctx, tile_position, "tile_position")
    rows, columns = _pair(ctx, tile_size, "tile_size")
    full = {"row": ctx.limits["matmul_contraction"], "column": ctx.limits["matmul_stationary_free"]}
    for axis, start, size in (("row", start_row, rows), ("column", start_column, columns)):
        array = full[axis]
        if size not in (array, array // 2, array // 4):
            ctx.find("matmul_tile", "error", f"nc_matmul tile_size={tuple(tile_size)!r}: {axis}_size {size}; the "
                     f"{array} PE {axis}s split into tiles of {array}, {array // 2} or {array // 4}",
                     f"{_TILING}: \"{_TILE_SIZES}\")")
            continue
        if size == array // 4 and ctx.target.generation < 3:
            ctx.find("target_generation", "error", f"nc_matmul tile_size={tuple(tile_size)!r}: {axis} tiles of "
                     f"{size} are NeuronCore-v3 and newer; the target {ctx.target.name} is {ctx.target.core} "
                     f"(tiles of {array // 2} or {array})", f"{_TILING}: \"{_TILE_SIZES}\"; SDK 2.26: \"Both the "
                     "row and column sizes in tile_size cannot be 32 for NeuronCore-v2\")")
        if start % size or start < 0 or start + size > array:
            ctx.find("matmul_tile", "error", f"nc_matmul tile_position={tuple(tile_position)!r}: start_{axis} "
                     f"{start} with {axis}_size {size}; a start is a multiple of its size and the tile lies in the "
                     f"{array} PE {axis}s (starts {', '.join(map(str, range(0, array, size)))})",
                     f"{_TILING}: \"{_TILE_START}\")")
    if columns < full["column"] and double_row:
        ctx.find("matmul_tile", "error", f"nc_matmul perf_mode=double_row with tile_size={tuple(tile_size)!r}: "
                 "double_row cannot be combined with column tiling", f"{_TILING}: \"double_row performance mode "
                 "cannot be combined with Tensor Engine column tiling mode\"; Trainium2 architecture guide)")
    if (columns != full["column"] or start_column) and ctx.assumptions["matmul_column_tiling"] == "row_only":
        ctx.find("matmul_tile", "error", f"nc_matmul tile_position={tuple(tile_position)!r}, "
                 f"tile_size={tuple(tile_size)!r}: column tiling, which assumption matmul_column_tiling=row_only "
                 "refuses", "documented: nki.isa.nc_matmul docstring (:param tile_position: \"start_column must be "
                 "0\"; :param tile_size: \"column_size must be 128\"); assumption matmul_column_tiling")
    return start_row, start_column, rows, columns


def _pair(ctx: Any, value: Any, parameter: str) -> tuple[int, int]:
    """``value`` as two ints: a tuple or list of two integers (Python or numpy; not bool)."""
    if isinstance(value, (tuple, list)) and len(value) == 2 and \
            all(isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_)) for v in value):
        return int(value[0]), int(value[1])
    raise KernelFault(ctx.find("matmul_tile", "error", f"nc_matmul {parameter}={value!r}: a pair of integers "
                               f"({'start_row, start_column' if parameter == 'tile_position' else 'row_size, column_size'})",
                               f"{_TILING}: \"{_TILE_VALUES}\")"))


def check_tile_fit(ctx: Any, tile: tuple | None, stationary: Tensor, moving: Tensor, m: int) -> None:
    """The operands fit the PE tile: the partition size of stationary and moving (rows of K; in
    double_row each partition is one PE row of two products) at most row_size, stationary's free
    size M at most column_size (``matmul_contraction``, ``matmul_stationary_free``, as the whole
    array's limits are: the tile is one instruction's array). Past the whole array's limits
    ``check_matmul`` has spoken already, and a size the array is not split into ``pe_tile``."""
    if tile is None:
        return
    _, _, rows, columns = tile
    partitions, most_rows, most_columns = stationary.shape[0], ctx.limits["matmul_contraction"], \
        ctx.limits["matmul_stationary_free"]
    if rows not in (most_rows, most_rows // 2, most_rows // 4):  # no tile of the array: pe_tile said so
        rows = most_rows
    if columns not in (most_columns, most_columns // 2, most_columns // 4):
        columns = most_columns
    if rows < partitions <= most_rows:
        ctx.find("matmul_contraction", "error", f"nc_matmul tile_size=({rows}, {columns}): stationary {stationary.name} "
                 f"and moving {moving.name} span {partitions} partitions (K); the PE tile has {rows} rows",
                 f"{_TILING}: the partition dimension sizes of the stationary and moving tiles \"must not exceed ... "
                 "row_size specified in tile_size when tiling mode is on\")")
    if columns < m <= most_columns:
        ctx.find("matmul_stationary_free", "error", f"nc_matmul tile_size=({rows}, {columns}): stationary "
                 f"{stationary.name} has free size M = {m}; the PE tile has {columns} columns",
                 f"{_TILING}: \"The free dimension size of stationary must not exceed ... column_size in tile_size "
                 "when tiling mode is on\"; \"The stationary tile size must not exceed the chosen tile_size\")")


def tile_cycles(cycles: int, tile: tuple | None) -> int:
    """The Tensor Engine cycles a trace row counts for an nc_matmul: the instruction's estimate
    (SDK 2.26: max(min(64, M), N), 4x fp32) on the whole array; on a PE tile, that estimate times
    the tile's share of the array, rounded up. Tiles exist to run side by side (nki.isa.nc_matmul:
    "allow multiple nc_matmul instructions ... to run in parallel"), so a full set of tiles counts
    one whole-array matmul's time; the engine's summed cycles stay the lower bound the run summary
    takes them for (an array left part empty runs longer than they say). The unscaled estimate is
    the row's ``tile_cycles``. How tiles overlap is not documented."""
    if tile is None:
        return cycles
    _, _, rows, columns = tile
    return -(-cycles * rows * columns // (128 * 128))


def tile_detail(tile: tuple | None, cycles: int) -> dict:
    if tile is None:
        return {}
    start_row, start_column, rows, columns = tile
    return {"tile_position": (start_row, start_column), "tile_size": (rows, columns), "tile_cycles": cycles}


_TRANSPOSE_SOURCE = ("documented: nki.isa.nc_matmul docstring (transpose mode: the tile to transpose is the "
                     "stationary tile, an identity matrix the moving tile; bit-accurate from NeuronCore-v3) and "
                     "nki.isa.nc_transpose docstring (dst has data's dtype)")


def _transpose_mode(c: Call, dst: Any, stationary: Tensor, moving: Tensor, accumulate: Any, double_row: bool,
                    tile: tuple | None = None) -> Any:
    """nc_matmul(is_transpose=True) on NeuronCore-v3 and later: the Tensor Engine's transpose mode.
    dst[M, N] = stationary[K, M]^T @ moving[K, N] with moving an identity (the documented use;
    the first N columns of the K x K identity: N = K transposes the whole tile), computed as
    "bit-accurate data transpose, which can transpose tensors with NaN/Inf values properly": each
    element of dst holds the bits of its element of stationary. dst is a PSUM tile of stationary's
    dtype (nc_transpose: "The output dst tile must have the same data type as that of data"; the
    Trainium2 guide: "FP16/BF16 PSUM output for FP16/BF16 transpose"). The operands are checked as
    any nc_matmul's (SBUF inputs, a PSUM dst, sizes, input dtypes). A transpose overwrites dst:
    it sums nothing (``accumulate=True`` is refused)."""
    ctx = c.ctx
    if double_row:
        raise ctx.unsupported("nc_matmul(is_transpose=True, perf_mode=double_row)")
    if accumulate:
        raise ctx.unsupported("nc_matmul(is_transpose=True, accumulate=True) (transpose mode moves data; what "
                              "adding it into PSUM does is not documented)")
    k, m, n = _matmul_sizes(ctx, stationary, moving, False)
    if dst is None:  # the older form: a new PSUM tile of the transposed tile's dtype
        dst = new_tile((m, n), stationary.dtype, "psum")
    dst = as_tensor(dst, "dst")
    _rules.check_on_chip(ctx, stationary)
    _rules.check_on_chip(ctx, moving)
    _rules.check_matmul(ctx, dst, stationary, moving, k, m, n, False, transpose=True)
    check_tile_fit(ctx, tile, stationary, moving, m)
    if dst.dtype != stationary.dtype:
        raise KernelFault(ctx.find("matmul_output_memory", "error", f"nc_matmul(is_transpose=True) writes {dst.name} "
                                   f"of {dst.dtype}; transpose mode writes the transposed tile's dtype, "
                                   f"{stationary.dtype} (stationary {stationary.name})", _TRANSPOSE_SOURCE))
    if dst.shape[0] != m or dst.free_size() != n:
        raise KernelFault(ctx.find("shape_mismatch", "error", f"nc_matmul(is_transpose=True): the transpose of "
                                   f"stationary {stationary.name} {list(stationary.shape)} through moving {moving.name} "
                                   f"{list(moving.shape)} is [{m}, {n}]; dst {dst.name} is {list(dst.shape)}",
                                   _TRANSPOSE_SOURCE))
    ident = read(ctx, moving, "moving", "tensor").reshape(k, n)
    if n > k or not np.array_equal(ident, np.eye(k, n, dtype=np.float32)):
        raise KernelFault(ctx.find("instruction_constraint", "error", f"nc_matmul(is_transpose=True): moving "
                                   f"{moving.name} {list(moving.shape)} is not an identity matrix (the first {n} "
                                   f"columns of the {k} x {k} identity); transpose mode passes stationary's elements "
                                   "through, which the documentation states for an identity moving tile only",
                                   _TRANSPOSE_SOURCE))
    undefined = unwritten_operand(ctx, stationary)  # the checks before its bits move
    bits = np.ascontiguousarray(stationary.data.reshape(k, m).T[:, :n] if n < k else
                                stationary.data.reshape(k, m).T)
    write(ctx, dst, None, WRITER_MATMUL, bits=bits.reshape(dst.shape))
    if undefined is not None:  # stationary's unwritten elements, transposed
        leave_undefined(ctx, dst, np.ascontiguousarray(undefined.reshape(k, m).T[:, :n]))
    ctx.psum_chain.pop((dst.base.id, dst.element_offset()), None)  # a transpose starts no sum
    # Transpose mode takes half the cycles of an fp32 matmul (Trainium2 guide: "2x speedup in FP32
    # transpose"); it computes no FLOPs (the profiler counts transposes apart).
    cycles = max(min(64, m), n) * (2 if "fp32" in (stationary.dtype.format, moving.dtype.format) else 1)
    c.issue([dst], [stationary, moving], cycles=tile_cycles(cycles, tile), k=k, m=m, n=n, transpose=True,
            **tile_detail(tile, cycles))
    return dst


def _double_row(perf_mode: Any) -> bool:
    name = getattr(perf_mode, "name", perf_mode)
    return name is not None and "double_row" in str(name)


def _matmul_operand(ctx: Any, t: Tensor, parameter: str, fmt: str, outputs: int) -> tuple:
    """An nc_matmul operand's values (its stored array where it is of the instruction's format:
    numeq's matmul reads bf16 / fp8 arrays in place; else fp32 values), and which of the
    ``outputs`` result rows (stationary) or columns (moving) hold an unwritten element of it, or
    None: the PE array computes result [m, n] from stationary column m and moving column n only,
    so those results are undefined and the rest are not (AWS's kernels multiply the columns a
    masked load left out and never store them)."""
    if not t.base.memory.on_chip:
        _rules.off_chip(ctx, t, "tensor", parameter)
    _rules.check_on_chip(ctx, t)
    bad = unwritten_operand(ctx, t)
    if bad is not None:
        bad = bad.reshape(bad.shape[0], -1, outputs).any(axis=(0, 1))  # double_row: [K/2, 2, M]
    return (t.data if t.dtype.format == fmt else _numerics.fp32_values(t.data, t.dtype)), bad


def result_undefined(rows: Any, columns: Any, m: int, n: int) -> Any:
    """The [M, N] results of undefined stationary rows and moving columns (None: none)."""
    if rows is None and columns is None:
        return None
    out = np.zeros((m, n), dtype=bool)
    if rows is not None:
        out[rows, :] = True
    if columns is not None:
        out[:, columns] = True
    return out


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
    if {a, b} <= {"e4m3", "e5m2", "e4m3fn"}:  # every fp8 value is an fp16 value (e4m3fn: max 448, 2^-9)
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
    return (w & 1).astype(bool)


@instruction("nc_transpose", engine="tensor", engines=("tensor", "vector"), forms=[
    Form("current", "dst: tensor, data: tensor"),
    Form("0.1.0", "data: tensor", returns=True)])
def nc_transpose(c: Call) -> Any:
    """dst[F, P] = data[P, F]: on the Tensor Engine (a matmul with an identity into PSUM:
    bit-accurate from NeuronCore-v3; on v2 through fp32 products, nki.isa docs) or the Vector
    engine (32 x 32 blocks)."""
    return _transpose(c, c.args.get("dst"), as_tensor(c.args["data"], "data"), c.engine)


def _transpose(c: Call, dst: Any, data: Tensor, eng: str) -> Any:
    """dst = data transposed on engine ``eng`` (nc_transpose, and nc_matmul(is_transpose=True))."""
    ctx = c.ctx
    values, undefined = read_partly(ctx, data, "data", eng)
    values = values.reshape(data.shape[0], data.free_size())
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
    if undefined is not None:  # data's unwritten elements, transposed
        leave_undefined(ctx, dst, np.ascontiguousarray(undefined.reshape(values.shape).T))
    c.issue([dst], [data], cycles=max(64, values.shape[0]), engine=eng)
    return dst