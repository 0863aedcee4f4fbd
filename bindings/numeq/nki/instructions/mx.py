"""NeuronCore-v4's MX instructions: ``quantize_mx`` (Vector engine: bf16 / fp16 into MXFP8 values
and E8M0 scales) and ``nc_matmul_mx`` (Tensor Engine: MXFP8 / MXFP4 operands dequantized inside the
matmul), rows of the instruction table, and the one reader and writer of the scales' quadrant
layout they share.

The layout (nki.isa.quantize_mx and nc_matmul_mx docstrings; trainium3_arch.rst "Quad-MXFP8/MXFP4
Matmul Performance"; the mxfp-matmul deep dive): a data tile [P, F] of an x4 dtype holds 4F values
per partition, value j of element f being value 4f + j of the unpacked row; a scaling group is 8
partitions x the 4 values of one element, 32 values along the contraction axis. Its scale sits in
the quadrant (32 partitions) the group comes from: group j (0..3) of quadrant q at partition
32q + j of the scale tile, column f; a data tile of at most 32 partitions keeps its P/8 scale rows
at the scale tile's first partitions. The scale tile may start 0, 4, 8 or 12 partitions into a
quadrant, so that up to four tensors' scales share one tile ("packing scale values", the deep dive).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ... import _quantize
from ..machine import arithmetic as _numerics
from ..machine import packed as _packed
from ..machine import rules as _rules
from ..machine.context import KernelFault, Unsupported, where
from ..machine.memory import Tensor
from .access import as_tensor, cost_elementwise, read, write
from .forms import Form
from .operands import constraint, doc, flat, shape_fault
from .path import Call
from .table import instruction
from .tensor_engine import accumulation, chain_step, check_tile_fit, pe_tile, tile_cycles, tile_detail, write_matmul_result

_ARCH = "documented: aws-neuron-sdk nki/guides/architecture/trainium3_arch.rst (Quad-MXFP8/MXFP4 Matmul Performance)"
_SCALE_OFFSETS = (0, 4, 8, 12)  # "Quantize-MX and Matmul-MX support writing/reading scales at an offset of 0, 4,
#                                  8, or 12 within each [quadrant]" (mxfp-matmul deep dive, Packing Scale Values)
_SCALE_DTYPES = ("uint8", "float8_e8m0fnu")
_E8M0_NAN = 0xFF  # OCP MX v1.0: the E8M0 encoding 0xFF is NaN


def _layout(ctx: Any, instruction_name: str, message: str) -> KernelFault:
    return KernelFault(ctx.find("mx_layout", "error", f"{instruction_name}: {message}",
                                f"{doc(instruction_name)}; {_ARCH}"))


def _dtype_fault(ctx: Any, instruction_name: str, message: str) -> KernelFault:
    return KernelFault(ctx.find("mx_dtype", "error", f"{instruction_name}: {message}", doc(instruction_name)))


def _in_sbuf(ctx: Any, instruction_name: str, tiles: tuple) -> None:
    for t, parameter in tiles:
        if t.base.memory.name != "sbuf":
            constraint(ctx, instruction_name, f"{parameter} {t.name} is in {t.base.memory}; it must be an SBUF tile")


def _scale_views(ctx: Any, scale: Tensor, partitions: int, free: int, instruction_name: str,
                 parameter: str) -> list[Tensor]:
    """The views of ``scale`` holding the scales of a data tile of ``partitions`` partitions and
    ``free`` x4 elements per partition, one per quadrant the data spans (the module doc's layout),
    each [rows, free]. Checked: the scale tile starts 0, 4, 8 or 12 partitions into a quadrant, holds
    the rows, and has the data's free size. A scale view is exempt from the partition-start rule
    of compute engines: the documented MX layout places it there."""
    if scale.dtype.name not in _SCALE_DTYPES:
        raise _dtype_fault(ctx, instruction_name, f"{parameter} {scale.name} is {scale.dtype}; scales are uint8 or "
                                                  "float8_e8m0fnu")
    limit = ctx.limits["partitions"]
    if scale.base.shape and scale.base.shape[0] > limit:
        _rules.check_on_chip(ctx, scale)  # the partition_dim error
    first, _, _ = scale.partitions()
    if first % 32 not in _SCALE_OFFSETS:
        raise _layout(ctx, instruction_name, f"{parameter} {scale.name} starts at partition {first}, "
                                             f"{first % 32} into its quadrant; scales are read and written at an offset "
                                             f"of {', '.join(map(str, _SCALE_OFFSETS))} within each quadrant")
    if scale.free_size() != free:
        raise _layout(ctx, instruction_name, f"{parameter} {scale.name} has {scale.free_size()} elements per partition; "
                                             f"one scale per x4 element of the data's {free}")
    groups = partitions // 8
    spans = [(0, groups)] if partitions <= 32 else [(32 * q, 32 * q + 4) for q in range(partitions // 32)]
    rows_needed = spans[-1][1]
    if scale.shape[0] < rows_needed:
        raise _layout(ctx, instruction_name, f"{parameter} {scale.name} has {scale.shape[0]} partitions; the scales of "
                                             f"{partitions} data partitions lie at its partitions "
                                             f"{', '.join(f'{a}..{b - 1}' for a, b in spans)}"
                                             + (" (a data tile over 32 partitions needs a scale tile spanning its "
                                                "quadrants)" if partitions > 32 else ""))
    views = []
    for a, b in spans:
        v = scale[a:b]
        v.checked = True  # the documented MX placement (the partition_start rule is the engines' general one)
        views.append(v)
    return views


def _data_shape(ctx: Any, instruction_name: str, t: Tensor, parameter: str) -> tuple[int, int]:
    """(partitions, elements per partition) of an MX data tile: partitions a multiple of 32, at
    most 128 (both instructions' Tile size)."""
    p = t.shape[0] if t.shape else 1
    if p % 32 or p > ctx.limits["partitions"]:
        raise _layout(ctx, instruction_name, f"{parameter} {t.name} spans {p} partitions; MX data spans a multiple of "
                                             f"32 partitions, at most {ctx.limits['partitions']}")
    return p, t.free_size()


# --- quantize_mx ---------------------------------------------------------------------------------

@instruction("quantize_mx", engine="vector", since=4, assumptions=("mx_scale", "mx_conversion"), forms=[
    Form("current", "dst: tensor, src: tensor, dst_scale: tensor")])
def quantize_mx(c: Call) -> Any:
    """dst (float8_e5m2_x4 / float8_e4m3fn_x4) and dst_scale (uint8 / float8_e8m0fnu) <- src
    (bf16 / fp16) on the Vector engine, NeuronCore-v4 and newer (nki.isa.quantize_mx docstring):
    for each group of 8 partitions x 4 values, the scale X = 2^(floor(log2 amax) - (E_max - 1))
    (assumption ``mx_scale``; 2^-127 for an all-zero group), each value x / X (exact: X is a power of
    two) rounded into the element format (assumption ``mx_conversion``), four values packed per
    element of dst, the scale's E8M0 byte placed as the module doc's layout says. A group holding
    NaN or Inf has no documented result: an ``mx_range`` finding, and numeq writes the NaN scale
    (0xFF) and NaN values (an OCP MX NaN scale makes every value of its block NaN)."""
    ctx, v = c.ctx, c.args
    if ctx.exact:  # as a bitcast view: Run.exact() keeps values, and an x4 word holds fp8 bit patterns
        raise Unsupported(f"{where()}: Run.exact() cannot follow quantize_mx: its x4 words hold fp8 bit patterns, "
                          "and the exact dataflow keeps values")
    src, dst, scale = as_tensor(v["src"], "src"), as_tensor(v["dst"], "dst"), as_tensor(v["dst_scale"], "dst_scale")
    _in_sbuf(ctx, "quantize_mx", ((src, "src"), (dst, "dst"), (scale, "dst_scale")))
    if src.dtype.format not in ("bf16", "fp16"):
        raise _dtype_fault(ctx, "quantize_mx", f"src {src.name} is {src.dtype}; it quantizes float16 or bfloat16")
    if dst.dtype.name not in ("float8_e5m2_x4", "float8_e4m3fn_x4"):
        raise _dtype_fault(ctx, "quantize_mx", f"dst {dst.name} is {dst.dtype}; it writes float8_e5m2_x4 or "
                                               "float8_e4m3fn_x4" + (" (\"Quantize-MX does not support an FP4 output\", "
                                               "the mxfp-matmul deep dive)" if dst.dtype.name == "float4_e2m1fn_x4"
                                               else ""))
    p, f = _data_shape(ctx, "quantize_mx", src, "src")
    if f % 4:
        raise _layout(ctx, "quantize_mx", f"src {src.name} has {f} elements per partition; a multiple of 4 (groups of "
                                          "8 partitions x 4 values)")
    if (dst.shape[0] if dst.shape else 1) != p or dst.free_size() * 4 != f:
        raise shape_fault(ctx, "quantize_mx", f"dst {dst.name} {dst.shape} holds {dst.free_size()} x4 elements on "
                                              f"{dst.shape[0] if dst.shape else 1} partitions; src {src.name} "
                                              f"{src.shape} needs {f // 4} on {p} (a quarter of its free size)")
    views = _scale_views(ctx, scale, p, f // 4, "quantize_mx", "dst_scale")
    x = flat(read(ctx, src, "src"))  # a group spans 8 partitions: an unwritten element is an error, not one row's
    if ctx.values:
        bits, scale_bytes = _quantize_groups(ctx, x, _packed.element_format(dst.dtype))
        write(ctx, dst, None, bits=_packed.pack(bits, dst.dtype).reshape(dst.shape))
        storage = np.dtype(scale.dtype.storage)
        for q, view in enumerate(views):
            rows = scale_bytes[4 * q:4 * q + view.shape[0]] if p > 32 else scale_bytes
            write(ctx, view, None, bits=rows.reshape(view.shape).view(storage))
    else:
        write(ctx, dst, None)
        for view in views:
            write(ctx, view, None)
    # "four input elements per partition, per cycle (i.e., 4x Vector performance mode)": the output's
    # elements per partition, as any elementwise instruction's (trainium3_arch.rst, MX data-type Quantization).
    c.issue([dst, scale], [src], flops=2 * p * f, cycles=cost_elementwise(dst))
    return dst


def _quantize_groups(ctx: Any, x: np.ndarray, fmt: str) -> tuple[np.ndarray, np.ndarray]:
    """(values' bit patterns [P, F] uint8, scale bytes [P/8, F/4] uint8) of src values ``x`` [P, F],
    through numeq's block quantizer (one rounding per value) with groups of 8 x 4."""
    finite = np.isfinite(x)
    groups = (x.shape[0] // 8, 8, x.shape[1] // 4, 4)
    bad = (~finite).reshape(groups).any(axis=(1, 3))
    if bad.any():
        ctx.find("mx_range", "warning", f"quantize_mx: {int(bad.sum())} groups of src hold NaN or Inf, whose scale and "
                 "values the documentation does not give; numeq writes the E8M0 NaN scale (0xFF) and NaN values",
                 "nki.isa.quantize_mx docstring (silent on non-finite input); OCP MX v1.0 (a NaN scale makes every "
                 "value of its block NaN)")
    conversion = ctx.assumptions["mx_conversion"]
    values, scales = _quantize.block_quantize(
        np.where(finite, x, 0).astype(np.float64), fmt, block=(8, 4), scale_fmt="e8m0fnu",
        scale_rule="ocp_headroom" if ctx.assumptions["mx_scale"] == "documented" else "ocp",
        overflow="ieee" if conversion == "ieee_overflow" else "saturate",
        subnormals="flush_outputs" if conversion == "flush_subnormals" else "keep")
    # An all-zero group: "the block scale is set to X = 2^-127, the minimum value representable by
    # float8_e8m0fnu" (numeq's quantizer writes 1 there). A group with a nonzero value keeps one: its
    # largest quotient lies at 2^(E_max - 1) or above.
    scales = np.where((values.reshape(groups) == 0).all(axis=(1, 3)), 2.0 ** -127, scales)
    scale_bytes = (np.frexp(scales)[1] - 1 + 127).astype(np.uint8)  # a power of two 2^e: byte e + 127
    bits = values.astype(_packed.ELEMENT_TYPES[fmt]).view(np.uint8)
    if bad.any():
        scale_bytes[bad] = _E8M0_NAN
        nan = np.array(np.nan).astype(_packed.ELEMENT_TYPES[fmt]).view(np.uint8)
        bits[np.repeat(np.repeat(bad, 8, axis=0), 4, axis=1)] = nan
    return bits, scale_bytes


# --- nc_matmul_mx --------------------------------------------------------------------------------

@instruction("nc_matmul_mx", engine="tensor", since=4,
             assumptions=("matmul_accumulate", "psum_rounding", "mx_pe_add"), forms=[
    Form("current", "dst: tensor, stationary: tensor, moving: tensor, stationary_scale: tensor, "
                    "moving_scale: tensor, tile_position = None, tile_size = None, accumulate = None")])
def nc_matmul_mx(c: Call) -> Any:
    """dst[M, N] (PSUM, fp32 or bf16) <- the MX matmul of stationary [K, M] and moving [K, N] (x4
    dtypes: 4K values of the contraction axis each), each value times its group's scale 2^(s - 127)
    (nki.isa.nc_matmul_mx docstring), computed through the Trainium platform's MX plan
    (``trainium.trn3[mx=on]``: four products per PE, assumption ``mx_pe_add``; the column and PSUM
    as nc_matmul's) on the dequantized operands, which the plan reads as fp32 (exact unless one
    leaves fp32's normal range: an ``mx_range`` finding). PSUM accumulation, ``accumulate=`` and
    the bf16 PSUM destination as nc_matmul's. ``tile_position`` / ``tile_size``: row tiling only
    ("column_size must be 128", "start_column must be 0")."""
    ctx, v = c.ctx, c.args
    st, mv = as_tensor(v["stationary"], "stationary"), as_tensor(v["moving"], "moving")
    st_scale, mv_scale = as_tensor(v["stationary_scale"], "stationary_scale"), as_tensor(v["moving_scale"], "moving_scale")
    dst = as_tensor(v["dst"], "dst")
    _in_sbuf(ctx, "nc_matmul_mx", ((st, "stationary"), (mv, "moving"), (st_scale, "stationary_scale"),
                                   (mv_scale, "moving_scale")))
    for t, parameter in ((st, "stationary"), (mv, "moving")):
        if not t.dtype.packed:
            raise _dtype_fault(ctx, "nc_matmul_mx", f"{parameter} {t.name} is {t.dtype}; it takes float8_e5m2_x4, "
                                                    "float8_e4m3fn_x4 or float4_e2m1fn_x4")
    if dst.base.memory.name != "psum" or dst.dtype.format not in ("fp32", "bf16"):
        raise KernelFault(ctx.find("matmul_output_memory", "error", f"nc_matmul_mx writes {dst.name}, {dst.dtype} in "
                                   f"{dst.base.memory}; it writes a float32 or bfloat16 PSUM tile", doc("nc_matmul_mx")))
    kp, m = _data_shape(ctx, "nc_matmul_mx", st, "stationary")
    if (mv.shape[0] if mv.shape else 1) != kp:
        raise shape_fault(ctx, "nc_matmul_mx", f"stationary {st.name} spans {kp} partitions and moving {mv.name} "
                                               f"{mv.shape[0] if mv.shape else 1}: their partition sizes are identical")
    n = mv.free_size()
    if m % 2 or m > ctx.limits["matmul_stationary_free"]:
        ctx.find("matmul_stationary_free", "error", f"nc_matmul_mx stationary {st.name} has free size M = {m}; it is "
                 f"even and at most {ctx.limits['matmul_stationary_free']}", doc("nc_matmul_mx"))
    most = "matmul_moving_free_bf16" if dst.dtype.format == "bf16" else "matmul_moving_free"
    if n > int(ctx.target[most]):
        ctx.find("matmul_moving_free", "error", f"nc_matmul_mx moving {mv.name} has free size N = {n}; at most "
                 f"{int(ctx.target[most])} with a {dst.dtype} dst (the whole PSUM)", ctx.target.spec(most).cite())
    if dst.shape[0] != m or dst.free_size() != n:
        raise shape_fault(ctx, "nc_matmul_mx", f"the result [{m}, {n}] does not fit dst {dst.name} {dst.shape}")
    tile = pe_tile(ctx, v["tile_position"], v["tile_size"], False)
    if tile is not None and (tile[1] or tile[3] != ctx.limits["matmul_stationary_free"]):
        ctx.find("matmul_tile", "error", f"nc_matmul_mx tile_position={tuple(v['tile_position'])!r}, "
                 f"tile_size={tuple(v['tile_size'])!r}: nc_matmul_mx supports only row tiling (start_column 0, "
                 "column_size 128)", f"{doc('nc_matmul_mx')} (Tiling Mode)")
    check_tile_fit(ctx, tile, st, mv, m)
    a = _dequantized(ctx, st, st_scale, kp, m, "stationary")
    b = _dequantized(ctx, mv, mv_scale, kp, n, "moving")
    k = 4 * kp
    adds, mode = accumulation(ctx, dst, v["accumulate"])
    result = (_numerics.matmul_tile(a, b, "fp32", ctx.mx_platform(k)).reshape(dst.shape) if ctx.values
              else np.zeros(dst.shape, np.float32))
    write_matmul_result(ctx, dst, result, adds)
    key = chain_step(ctx, dst, mode)
    # 4x the throughput of a bf16 matmul: the same cycles for four times the contraction (trainium3_arch.rst).
    cycles = max(min(64, m), n)
    c.issue([dst], [st, mv, st_scale, mv_scale], flops=2 * k * m * n, cycles=tile_cycles(cycles, tile), k=k, m=m,
            n=n, accumulate=mode, psum=key, in_fmt=f"{st.dtype.format}*{mv.dtype.format}", mx=True,
            **tile_detail(tile, cycles))
    return dst


def _dequantized(ctx: Any, data: Tensor, scale: Tensor, kp: int, free: int, parameter: str) -> np.ndarray:
    """An nc_matmul_mx operand as the plan reads it: [4 kp, free], row 4k + j holding value j of
    partition k's elements times its group's scale (fp32; binary64 in Run.exact)."""
    views = _scale_views(ctx, scale, kp, free, "nc_matmul_mx", f"{parameter}_scale")
    words = read(ctx, data, parameter, "tensor", bits=True).reshape(kp, free)
    scale_bytes = np.concatenate([read(ctx, view, f"{parameter}_scale", "tensor", bits=True).reshape(-1, free)
                                  .view(np.uint8) for view in views], axis=0)
    if not ctx.values:
        return np.zeros((4 * kp, free), np.float32)
    values = _packed.unpack_values(words, data.dtype).reshape(kp, free, 4).astype(np.float64)
    factor = np.where(scale_bytes == _E8M0_NAN, np.nan, np.ldexp(1.0, scale_bytes.astype(np.int64) - 127))
    dequantized = values * np.repeat(factor, 8, axis=0)[:, :, None]  # exact in binary64
    magnitude = np.abs(dequantized)
    outside = (magnitude > np.finfo(np.float32).max) | ((magnitude < np.finfo(np.float32).tiny) & (magnitude > 0))
    if outside.any():
        ctx.find("mx_range", "warning", f"nc_matmul_mx: {int(outside.sum())} values of {parameter} {data.name} times "
                 f"their scales leave fp32's normal range (first {float(dequantized[outside][0])!r}); where the "
                 "hardware applies the scales is not documented, so their products rest on numeq's choice: the "
                 "dequantized value rounded into fp32", f"{doc('nc_matmul_mx')}; {_ARCH}")
    out = dequantized.transpose(0, 2, 1).reshape(4 * kp, free)
    return out if _numerics.EXACT else out.astype(np.float32)
