"""The rule book (``RULES``: one id per NeuronCore limit, shared by runs and manifest reviews) and
the checks a run makes as each instruction runs. Every number comes from the target table
(``machine.targets``: each value with its evidence and source); each finding says what breaks
it, with the kernel's line and the numbers involved.

Errors: the hardware or the compiler rejects it, or it computes garbage. Warnings: it runs, slowly.
"""

from __future__ import annotations

import inspect

from typing import Any, NamedTuple

import numpy as np

from .context import Context, KernelFault, where
from .memory import WRITER_OTHER
from .targets import start_partitions
from .psum import settle as compute_pending
from . import placement as _placement

__all__ = ["RULES", "Rule", "review_status", "check_on_chip", "check_read", "check_matmul", "check_dma", "capacity", "check_engine_access"]

class Rule(NamedTuple):
    """One limit of the NeuronCore, as both a kernel's run and a manifest review check it:
    ``severity`` ("error": the hardware or compiler rejects it or it computes garbage; a review's
    "fail". "warning": it runs, slowly; a review's "warn"), ``meaning``, and ``checked_by``
    (``run``: numeq.nki as the kernel runs; ``manifest``: ``numeq review MANIFEST``'s tiling
    check). A finding cites the target value its numbers come from (``Target.spec(key).cite()``)."""

    severity: str
    meaning: str
    checked_by: tuple[str, ...] = ("run", "manifest")


_RUN, _MANIFEST = ("run",), ("manifest",)
_MATMUL_DOC = "nki.isa.nc_matmul docstring"
_SPILL_DOC = ("documented: nki_perf_guide.rst, Opt #2 (\"compiler generated spilling\": spill_save_bytes / "
              "spill_reload_bytes)")

# The one rule book: rule id -> Rule. One id per limit, used by runs and manifest reviews alike
# (docs/nki.md's table of rules is this one).
RULES: dict[str, Rule] = {
    "partition_dim": Rule("error", "an SBUF/PSUM tile's partition dimension (dim 0) exceeds the target's partitions"),
    "partition_start": Rule("error", "a partial-partition access starts where the hardware cannot (over 64 partitions "
                                     "at 0; 33-64 at 0 or 64; up to 32 at 0, 32, 64 or 96)"),
    "matmul_contraction": Rule("error", "nc_matmul contracts more rows of K than one instruction takes, or K differs "
                                        "between its operands"),
    "matmul_stationary_free": Rule("error", "nc_matmul's stationary free size (M) exceeds the limit"),
    "matmul_moving_free": Rule("error", "nc_matmul's moving free size (N) exceeds the limit"),
    "matmul_dtype": Rule("error", "nc_matmul input dtypes the Tensor Engine does not take, or mixes"),
    "matmul_perf_mode": Rule("error", "nc_matmul asks for a performance mode (double_row) the target lacks, or on "
                                      "inputs the mode does not take (fp8 only)"),
    "matmul_output_memory": Rule("error", "an nc_matmul result is not written to an fp32 PSUM tile"),
    "matmul_psum_bank": Rule("error", "an nc_matmul result does not fit one 2 KiB fp32 PSUM bank"),
    "psum_capacity": Rule("error", "live PSUM per partition exceeds its 8 banks (16 KiB)"),
    "sbuf_capacity": Rule("error", "live SBUF per partition exceeds what the target holds"),
    "dma_memory": Rule("error", "nisa.dma_copy reads or writes PSUM in a kernel of the current interface (nki.*): its "
                                "DMA moves HBM and SBUF, and NKI 0.3.0 removed reading PSUM", _RUN),
    "dma_hwdge_cast": Rule("error", "a hardware-DGE transfer (dge_mode=hwdge) between different element types: it "
                                    "moves raw bytes, and the compiler refuses it since NKI 0.3.0", _RUN),
    "simulation_only": Rule("warning", "an nki.language function documented to work in simulation but to fail when "
                                       "compiled for Trainium hardware (nl.mod, nl.fmod, nl.divide)", _RUN),
    "removed_keyword": Rule("error", "a keyword the current compiler refuses (nki.jit(platform_target=), NKI 0.3.0)",
                            _RUN),
    "kernel_signature": Rule("error", "a kernel of the current interface whose signature has a keyword-only separator "
                                      "(*) or that is passed a list: the compiler refuses both since NKI 0.3.0", _RUN),
    "sbuf_spill": Rule("warning", "live SBUF per partition exceeds what the target holds, while each instruction's "
                                  "own tiles fit: the compiler spills tiles to device memory and reloads them", _RUN),
    "bn_stats_free": Rule("error", "bn_stats reads more elements per partition than one instruction takes (512)"),
    "engine_access": Rule("error", "an engine reads or writes a memory it cannot reach (GpSimd and PSUM; the Tensor "
                                   "Engine reads SBUF only), or both tensor_tensor operands are in PSUM", _RUN),
    "read_uninitialised": Rule("error", "an instruction reads bytes no instruction wrote", _RUN),
    "accumulate_non_matmul": Rule("error", "nc_matmul accumulates into PSUM that holds a non-matmul result", _RUN),
    "index_bounds": Rule("error", "an index or access pattern reaches outside the tensor", _RUN),
    "shape_mismatch": Rule("error", "an instruction's operands do not have the shapes it needs", _RUN),
    "output_unwritten": Rule("error", "a kernel output no instruction wrote", _RUN),
    "shared_hbm_race": Rule("error", "two SPMD programs (logical cores) write the same HBM elements with nothing "
                                     "ordering them", _RUN),
    "allocation_address": Rule("error", "a direct allocation (nki.compiler) places a tile where the memory cannot hold "
                                        "it: past a partition's usable bytes, across a PSUM bank, at a start partition "
                                        "the ISA forbids", _RUN),
    "allocation_conflict": Rule("error", "a directly allocated tile is read after another tile placed on overlapping "
                                         "bytes was written (a lifetime conflict: the hardware reads the other's values)",
                                _RUN),
    "indirect_index": Rule("error", "the indices of an indirect DMA are not integers in an on-chip tile", _RUN),
    "narrow_accumulator": Rule("warning", "PSUM groups of nc_matmul results summed into a bf16 / fp16 SBUF tile: a "
                               "running sum narrower than the fp32 the Tensor Engine accumulates in", _RUN),
    "mask_python_logic": Rule("warning", "an older-interface mask combined with Python's and / or / if, which keeps "
                              "one of its operands", _RUN),
    "psum_operand_staged": Rule("warning", "an older-interface nc_matmul operand in PSUM, which the compiler copies "
                                "to SBUF first (an extra copy)", _RUN),
    "operator_generation": Rule("warning", "an ALU operator the current docs give to a newer NeuronCore than the "
                                "target (older docs list it for every generation)", _RUN),
    "output_partly_written": Rule("warning", "a kernel output holds elements no instruction wrote (its caller must "
                                  "read only the part written)", _RUN),
    "instruction_constraint": Rule("error", "an operand breaks a documented limit of its instruction (dtype, size, "
                                            "operator, value, memory)", _RUN),
    "matmul_tile": Rule("error", "nc_matmul's tile_position / tile_size name no PE tile: one set without the "
                                 "other, a size the array is not split into (128, 64, 32), a start not a multiple "
                                 "of its size or past the array, or column tiling with double_row", _RUN),
    "mx_dtype": Rule("error", "an MX instruction's operand of a dtype it does not take (quantize_mx: bf16 / fp16 in, "
                              "fp8 x4 out, uint8 / float8_e8m0fnu scales; nc_matmul_mx: x4 inputs, fp32 / bf16 "
                              "PSUM out), or a packed x4 tile read or written as values by another instruction", _RUN),
    "mx_layout": Rule("error", "an MX instruction's data or scale tile breaks the documented MX layout: partitions a "
                               "multiple of 32 up to 128, four values per x4 element, one scale per 8 partitions x 4 "
                               "values placed in its quadrant's first partitions (offset 0, 4, 8 or 12)", _RUN),
    "mx_range": Rule("warning", "an MX value whose result rests on what the documentation leaves open: a non-finite "
                                "quantize_mx input, or an nc_matmul_mx operand whose dequantized value leaves fp32's "
                                "normal range", _RUN),
    "core_deadlock": Rule("error", "a logical core waits at a core_barrier or sendrecv its partner never reaches (it "
                                   "ended, or waits elsewhere): both cores' lines", _RUN),
    "sendrecv_pairing": Rule("error", "two cores' sendrecv on one pipe do not pair: one receives from a core that does "
                                      "not send to it, or a src the receiver's dst does not match in dtype or shape",
                             _RUN),
    "collective_mismatch": Rule("error", "the ranks of a replica group meet at different collectives (another "
                                         "operation, operator, dim, shapes or dtypes): each rank's line", _RUN),
    "core_divergence": Rule("warning", "the two logical cores meet at core_barriers on different lines, or their "
                                       "dynamic loops run differently: their control flow differs, which the LNC "
                                       "guide calls undefined", _RUN),
    "target_generation": Rule("error", "the instruction needs a newer NeuronCore than the target has", _RUN),
    "accumulator_undefined": Rule("error", "an instruction continues a Vector-engine accumulator that was never reset "
                                           "or that an idle instruction left undefined", _RUN),
    "activation_range": Rule("error", "an activation function's input lies outside its documented valid range (the "
                                      "Scalar engine's polynomial gives garbage there)", _RUN),
    "dma_small": Rule("warning", "a DMA moves fewer bytes per partition than the efficiency threshold"),
    "matmul_fp32": Rule("warning", "nc_matmul on fp32 inputs runs at a quarter of the bf16 rate"),
    "partial_partitions": Rule("warning", "an instruction or DMA uses fewer than all partitions"),
    "accumulate_after_read": Rule("warning", "nc_matmul without accumulate= writes a PSUM tile whose matmul result was "
                                             "already read: whether it starts a new sum rests on the matmul_accumulate "
                                             "assumption", _RUN),
    "psum_gpsimd": Rule("warning", "GpSimd reads PSUM, which it cannot access: an extra copy through SBUF (use "
                        "Vector or Scalar)",
                        _RUN),
    # What only a manifest states (a run sees the instructions themselves).
    "buffer_valid": Rule("error", "a manifest buffer is malformed (memory, dtype, shape) or named twice", _MANIFEST),
    "matmul_operands": Rule("error", "a manifest matmul names a buffer that does not exist, or reads its inputs from "
                                     "outside SBUF", _MANIFEST),
    "stage_operands": Rule("error", "a manifest stage names a buffer that does not exist, or an engine's operand in a "
                                    "memory it cannot reach", _MANIFEST),
    "stage_free_size": Rule("error", "a Vector/Scalar/GpSimd stage's free size exceeds its memory's limit", _MANIFEST),
    "dma_buffer": Rule("error", "a manifest DMA names a buffer that does not exist", _MANIFEST),
    "dma_partitions": Rule("error", "a manifest DMA spans more partitions than SBUF/PSUM have", _MANIFEST),
    "dma_stride": Rule("warning", "a DMA's innermost stride exceeds the 16 B that keeps full access bandwidth",
                       _MANIFEST),
    "engine_port_sharing": Rule("warning", "two engines that share an SBUF or PSUM port on NeuronCore-v2 run "
                                           "concurrently", _MANIFEST),
}


def review_status(rule: str) -> str:
    """A broken rule's status in a manifest review: "fail" for an error, "warn" for a warning."""
    return "fail" if RULES[rule].severity == "error" else "warn"


def _cite(ctx: Context, key: str) -> str:
    text = ctx.cites.get(key)
    if text is None:
        text = ctx.cites[key] = ctx.target.spec(key).cite()
    return text


def check_on_chip(ctx: Context, t: Any) -> None:
    """Partition-axis rules for an SBUF / PSUM view. Where a partial-partition access may start is
    a compute engine's rule (the engines read 32-partition quadrants; FACTS.md s3): a DMA, which
    moves bytes to any partition (the DMA docs state no such rule; AWS's kernels write single rows
    at any partition), is not held to it. ``t.checked``: True once every rule held, "dma" once the
    rules a DMA keeps held."""
    dma = ctx.engine == "dma"
    if t.checked is True or (dma and t.checked) or not t.base.memory.on_chip:
        return
    first, count, _ = t.partitions()
    limit = ctx.limits["partitions"]
    if t.base.shape and t.base.shape[0] > limit:
        raise KernelFault(ctx.find("partition_dim", "error",
                                   f"{t.name} has {t.base.shape[0]} partitions (dim 0); the target has {limit}",
                                   _cite(ctx, "partitions")))
    if t.shape and t.shape[0] > limit:
        # A view (a reshape, an access pattern) whose dim 0 spans more rows than there are
        # partitions: an instruction reads dim 0 as the partition axis.
        raise KernelFault(ctx.find("partition_dim", "error",
                                   f"a view of {t.name} has {t.shape[0]} rows on its partition axis (dim 0); the "
                                   f"target has {limit} partitions", _cite(ctx, "partitions")))
    if dma:
        t.checked = "dma"
        return
    t.checked = True
    if count < limit and first not in start_partitions(count):
        ctx.find("partition_start", "error",
                 f"{t.name}: an access of {count} partitions starts at partition {first}; it may start at "
                 f"{', '.join(map(str, start_partitions(count)))}", _cite(ctx, "partitions"))


def check_read(ctx: Context, t: Any, settle: bool = True, rows: bool = False) -> None:
    """A read of bytes no instruction wrote names the tile (its values read as NaN here). Every read
    of stored values passes here, so pending PSUM matmul chains are computed first.

    ``rows``: the instruction computes each partition from the same partition of its operands (the
    Vector and Scalar engines' elementwise and free-axis work). Then unwritten elements are no
    error: what they compute stays undefined in the destination (``undefined``: elementwise
    where the instruction is, else the whole partition), as AWS's kernels compute on the rows
    and columns a masked load left out of a tile and never store them (the 0.1.0 rmsnorm and
    layernorm examples; nki-samples' allocated fused linear). The finding is made where undefined
    values reach something else (``unread_finding``)."""
    if t.base.placed is not None:
        _placement.before_read(ctx, t)
    if settle and t.base.id in ctx.pending:
        compute_pending(ctx, t.base)
    if t.base.complete or t.mask.min() == t.base.full:
        return
    written = (t.mask == t.base.full).reshape(t.shape[0], -1) if t.ndim else (t.mask == t.base.full).reshape(1, 1)
    if rows and t.ndim:
        undefined(ctx, t, ~written)
        return
    unread_finding(ctx, t, int(np.count_nonzero(~written)))


def undefined(ctx: Context, t: Any, elements: np.ndarray) -> None:
    """Operand ``t``'s ``elements`` (a (partitions, free) mask) were never written: the running
    instruction's results from them stay undefined (``ctx.undefined``, which ``access.write``
    applies to the destination; (partitions, 1): whole partitions). The first such read is kept
    (``ctx.undefined_from``: line, what it read, whether the tile was wholly unwritten) so the
    finding, if the values reach something, can name it."""
    if ctx.undefined_from is None:
        count = int(np.count_nonzero(elements))
        never = count == t.size and not t.base.dirty  # the tile: no instruction wrote any of it
        ctx.undefined_from = t.base.undefined_from or (ctx.at or where(), _unread_message(t, count), never)
    u = ctx.undefined
    if u is None:
        ctx.undefined = elements
    elif u.shape == elements.shape:
        ctx.undefined = u | elements
    elif u.shape[0] == elements.shape[0]:
        ctx.undefined = (u.any(axis=1) | elements.any(axis=1))[:, None]
    else:
        unread_finding(ctx, t, int(np.count_nonzero(elements)))


def undefined_origin(ctx: Context, t: Any, count: int) -> tuple:
    """Where undefined values came from: (this line, what it read of ``t``, False: ``t`` was written
    in part), as ``Allocation.undefined_from`` keeps it."""
    return (ctx.at or where(), _unread_message(t, count), False)


_UNDEFINED_SOURCE = "documented: tile contents start undefined (nki.language.ndarray docs; AWS's simulator fills NaN)"


def undefined_since(origin: tuple) -> str:
    """Where undefined values came from, in words: the first read of unwritten bytes (``origin``:
    line, what it read)."""
    return f"undefined since {origin[0]}, which {origin[1].replace('reads', 'read', 1)}"


def _unread_message(t: Any, unwritten: int) -> str:
    return (f"reads {unwritten} of {t.size} elements of {t.name} ({t.base.memory}, allocated at {t.base.line}) that "
            "no instruction wrote")


def unread_finding(ctx: Context, t: Any, unwritten: int) -> None:
    """The read_uninitialised finding, here; for values computed from unwritten ones
    (``Allocation.undefined_from``) it names that first read too, and is made there when the tile
    read was wholly unwritten (the likely mistake: a tile never written)."""
    origin = t.base.undefined_from
    if origin is None:
        message, at = _unread_message(t, unwritten), None
    else:
        if origin[2]:  # the tile read first was never written at all
            undefined_reach(ctx, origin, t.name)
            return
        message, at = f"{_unread_message(t, unwritten)}: {undefined_since(origin)}", None
    ctx.find("read_uninitialised", "error", message,
             _UNDEFINED_SOURCE, at=at)


def undefined_reach(ctx: Context, origin: tuple, reached: str) -> None:
    """Values computed from a tile no instruction wrote reach ``reached``: the read_uninitialised
    finding at that tile's first read (``origin``: line, what it read)."""
    line, first, _ = origin
    ctx.find("read_uninitialised", "error", f"{first}; the undefined values reach {reached}, at {ctx.at or where()}",
             _UNDEFINED_SOURCE, at=line)


def undefined_mixed(ctx: Context, dst: Any, count: int, partitions: int) -> None:
    """The running instruction combines, in each of ``partitions`` partitions, elements no
    instruction wrote (``count``) with written ones into ``dst``: read_uninitialised here."""
    origin = ctx.undefined_from
    since = "" if origin is None else f": {undefined_since(origin)}"
    ctx.find("read_uninitialised", "error", f"combines {count} element{'s' if count != 1 else ''} no instruction wrote "
             f"with written ones of the same partition ({partitions} partition{'s' if partitions != 1 else ''}) into "
             f"{dst.name}{since}",
             _UNDEFINED_SOURCE)


def off_chip(ctx: Context, t: Any, engine: str, parameter: str) -> None:
    """A compute engine reads only SBUF and PSUM; HBM moves through DMA."""
    ctx.find("engine_access", "error", f"the {engine} engine reads {parameter} ({t.name}) from {t.base.memory}; "
             "compute engines read SBUF and PSUM, HBM moves by DMA",
             "documented: NKI architecture guides (engines access SBUF/PSUM; DMA moves HBM data)")


def check_engine_access(ctx: Context, engine: str, tensors: list, name: str, staged: tuple = ()) -> None:
    """GpSimd cannot access PSUM (nki.isa docs: "GpSimd Engine cannot access PSUM"). ``staged``: the
    operands the older interface's compiler moves to SBUF first, as nl.store's docs say it does for
    a PSUM tile ("an extra copy will be performed"): AWS's own value-returning kernels pass a PSUM
    tile to GpSimd instructions (nki-samples' flash attention, affine_select); for them the extra
    copy is a warning (psum_gpsimd), not an error."""
    if engine == "gpsimd":
        for t in tensors:
            if t.base.memory.name == "psum":
                if any(t is s for s in staged):
                    ctx.find("psum_gpsimd", "warning", f"{name} on GpSimd reads {t.name} from PSUM, which GpSimd cannot "
                             "access: the compiler copies it to SBUF first (an extra copy)",
                             "documented: nki.isa docs (GpSimd cannot access PSUM); nl.store docs (a PSUM tile is "
                             "copied to SBUF first)")
                    continue
                ctx.find("engine_access", "error", f"{name} on GpSimd reaches {t.name} in PSUM, which GpSimd cannot "
                         "access", "documented: NKI architecture guides (GpSimd engine has no PSUM access)")


def check_matmul(ctx: Context, dst: Any, stationary: Any, moving: Any, k: int, m: int, n: int,
                 double_row: bool, staged: bool = False, transpose: bool = False) -> None:
    """The Tensor Engine's limits. ``staged``: the older interface's value-returning form, whose
    compiler copies a PSUM operand to SBUF first (as nl.store's docs say it does for a PSUM tile):
    AWS's own kernels pass nc_transpose's PSUM result straight to nc_matmul (nki-samples' flash
    attention backward); there a PSUM operand is a warning (psum_operand_staged), not an error.
    ``transpose``: transpose mode, which writes the transposed tile's own dtype (its caller checks it)."""
    tgt, lim = ctx.target, ctx.limits
    if double_row and "matmul_contraction_double_row" not in tgt:
        raise KernelFault(ctx.find("matmul_perf_mode", "error", f"nc_matmul perf_mode=double_row: {ctx.target.name} "
                                   f"({ctx.target.core}) has no double_row mode (NeuronCore-v3 and later)",
                                   _cite(ctx, "matmul_contraction")))
    kmax = int(tgt["matmul_contraction_double_row"]) if double_row else lim["matmul_contraction"]
    if k > kmax:
        # The hardware rejects it and numeq's PE plan has no such tile: the run stops here.
        what = "in fp8 double_row mode" if double_row else f"for {stationary.dtype} inputs"
        raise KernelFault(ctx.find("matmul_contraction", "error", f"nc_matmul contracts K = {k} rows; one instruction "
                                   f"takes at most {kmax} {what}",
                                   _cite(ctx, "matmul_contraction_double_row" if double_row else "matmul_contraction")))
    if m > lim["matmul_stationary_free"]:
        ctx.find("matmul_stationary_free", "error", f"nc_matmul stationary free size M = {m} exceeds "
                 f"{int(tgt['matmul_stationary_free'])}", _cite(ctx, "matmul_stationary_free"))
    # NeuronCore-v4: a bf16 dst takes twice the fp32 free size (the whole PSUM either way).
    moving_key = "matmul_moving_free_bf16" if dst.dtype.format == "bf16" and "matmul_moving_free_bf16" in tgt \
        else "matmul_moving_free"
    if n > int(tgt[moving_key]):
        ctx.find("matmul_moving_free", "error", f"nc_matmul moving free size N = {n} exceeds {int(tgt[moving_key])}"
                 f"{' with a ' + str(dst.dtype) + ' dst' if moving_key != 'matmul_moving_free' else ''}",
                 _cite(ctx, moving_key))
    for name, operand in (("stationary", stationary), ("moving", moving)):
        if staged and operand.base.memory.name == "psum":
            ctx.find("psum_operand_staged", "warning", f"nc_matmul reads its {name} operand {operand.name} from PSUM; "
                     "the compiler copies it to SBUF first (an extra copy)",
                     "documented: nki.isa.nc_matmul docstring (both inputs in SBUF); nl.store docs (a PSUM tile is "
                     "copied to SBUF first)")
        elif operand.base.memory.name != "sbuf":
            ctx.find("engine_access", "error", f"nc_matmul reads its {name} operand {operand.name} from "
                     f"{operand.base.memory}; the Tensor Engine reads both operands from SBUF",
                     "documented: nki.isa.nc_matmul docstring (both inputs in SBUF)")
    if dst.base.memory.name != "psum":
        ctx.find("matmul_output_memory", "error", f"nc_matmul writes {dst.name} in {dst.base.memory}; the Tensor "
                 "Engine writes its result to PSUM", _cite(ctx, "psum_bank_bytes"))
    else:
        # nc_matmul docstring: "The dst tile must be a float32 tile in NeuronCore-v2 and NeuronCore-v3.
        # Starting NeuronCore-v4, dst can either be a float32 or bfloat16 tile"; how much PSUM one
        # result may span is the target's matmul_result_bytes.
        v4 = tgt.generation >= 4
        if not transpose and dst.dtype.format != "fp32" and not (v4 and dst.dtype.format == "bf16"):
            ctx.find("matmul_output_memory", "error", f"nc_matmul writes {dst.name} of {dst.dtype}; {tgt.core} writes "
                     f"matmul results to {'fp32 or bf16' if v4 else 'fp32'} PSUM tiles",
                     f"documented: {_MATMUL_DOC} (Data types)")
        nbytes = dst.free_size() * dst.dtype.itemsize
        most = lim["matmul_result_bytes"]
        if nbytes > most:
            where = f"one {most} B PSUM bank" if most == lim["psum_bank_bytes"] else f"the whole {most} B PSUM partition"
            ctx.find("matmul_psum_bank", "error", f"nc_matmul result {dst.name}: {dst.free_size()} x {dst.dtype} = "
                     f"{nbytes} B per partition exceeds {where}", _cite(ctx, "matmul_result_bytes"))
    formats = {stationary.dtype.format, moving.dtype.format}
    allowed = {"fp32", "tf32", "bf16", "fp16", "e4m3", "e5m2"} | ({"e4m3fn"} if tgt.generation >= 4 else set())
    wide = formats & {"fp32", "tf32"}
    # nki.isa.nc_matmul: the two inputs may differ, except that fp32 / tf32 pair only with each other,
    # and (NeuronCore-v4) "float8_e4m3 (legacy) and float8_e4m3fn cannot be mixed in the same matmul".
    if formats - allowed or (wide and formats - {"fp32", "tf32"}) or {"e4m3", "e4m3fn"} <= formats:
        takes = "fp8 (e4m3, e5m2" + (", e4m3fn; never e4m3 with e4m3fn" if "e4m3fn" in allowed else "") + ")"
        finding = ctx.find("matmul_dtype", "error", f"nc_matmul inputs {stationary.dtype} x {moving.dtype}: the Tensor "
                           f"Engine of {tgt.core} takes {takes}, bf16, fp16, tf32 or fp32, fp32/tf32 only with each "
                           "other", f"documented: {_MATMUL_DOC} (Data types); data-types.rst (FACTS.md s3)")
        if formats - allowed or {"e4m3", "e4m3fn"} <= formats:  # no PE plan takes it: the run stops here
            raise KernelFault(finding)
    if "fp32" in formats:
        ctx.find("matmul_fp32", "warning", lambda: f"nc_matmul on {stationary.dtype} x {moving.dtype}: fp32 inputs run "
                 f"at {ctx.target['fp32_matmul_rate']:g}x the bf16 rate", _cite(ctx, "fp32_matmul_rate"))


def check_accumulate(ctx: Context, dst: Any, adds: np.ndarray) -> None:
    """nc_matmul docstring (Neuron 2.32): "On NeuronCore-v2 and NeuronCore-v3, matmul accumulating
    into a PSUM location that was value-initialized by a non-matmul instruction (e.g., memset,
    tensor_copy) is not supported and is undefined behavior on hardware"; NeuronCore-v4 is not
    named, and its PSUM adds into what it holds (trainium3_arch.rst, BF16 Matmul Results in PSUM)."""
    if ctx.target.generation >= 4:
        return
    if dst.base.holds_other and dst.base.tracks_writer and np.any(adds & (dst.writer == WRITER_OTHER)):
        ctx.find("accumulate_non_matmul", "error", f"nc_matmul accumulates into {dst.name}, whose PSUM holds the "
                 f"result of a non-matmul instruction: undefined on {ctx.target.core}",
                 "documented: nki.isa.nc_matmul docstring (Accumulation mode: matmul accumulating into PSUM "
                 "value-initialized by a non-matmul instruction is undefined on NeuronCore-v2 and -v3)")


def accumulate_after_read(ctx: Context, dst: Any) -> None:
    ctx.find("accumulate_after_read", "warning", f"nc_matmul writes {dst.name} again after its result was read, without "
             f"accumulate=: under matmul_accumulate={ctx.assumptions['matmul_accumulate']} it "
             + ("adds onto the old sums" if ctx.assumptions["matmul_accumulate"] == "first_write" else "starts afresh")
             + "; state accumulate=False (or True) to make it explicit",
             "documented: nki.isa.nc_matmul docstring (accumulate=None: the first write to a PSUM location "
             "overwrites, later writes accumulate); assumption matmul_accumulate")


# The Scalar engine's valid input ranges (nki.language activation function docs; FACTS.md s3):
# |x| within [low, high]; outside, "the output is invalid" (piecewise polynomials, no range reduction).
ACTIVATION_RANGES: dict[str, tuple[float, float]] = {
    "log": (2.0 ** -64, 2.0 ** 64), "sqrt": (2.0 ** -116, 2.0 ** 118), "rsqrt": (2.0 ** -87, 2.0 ** 97),
    "reciprocal": (2.0 ** -42, 2.0 ** 42),
    # [-PI, PI] and [-PI/2, PI/2] (nki.api.shared's activation table), read in fp32: PI the fp32
    # nearest pi (above pi), so the fp32 value nearest each end is inside.
    "sin": (0.0, float(np.float32(np.pi))), "arctan": (0.0, float(np.float32(np.pi / 2))),
}
# Ranges of magnitudes that hold arguments of either sign (+-[low, high]); the others take x >= low.
_SIGNED_RANGES = ("reciprocal", "sin", "arctan")


def check_activation_range(ctx: Context, function: str, x: np.ndarray) -> None:
    """numeq computes f correctly rounded everywhere; the hardware does not outside the range."""
    if function not in ACTIVATION_RANGES:
        return
    low, high = ACTIVATION_RANGES[function]
    magnitude = np.abs(x)
    signed = function in _SIGNED_RANGES
    bad = (magnitude < low) | (magnitude > high) | ((x < 0) if not signed else False)
    bad &= ~np.isnan(x)
    if bad.any():
        worst = float(x.reshape(-1)[int(np.argmax(bad.reshape(-1)))])
        valid = f"[{-high:g}, {high:g}]" if signed and low == 0 else f"{'+-' if signed else ''}[{low:g}, {high:g}]"
        gives = ("numeq gives what assumption activation_sin_outside says (the documented cubic by default)"
                 if function == "sin" else "numeq gives the correctly rounded value, the hardware does not")
        ctx.find("activation_range", "error", f"activation {function} on {int(np.count_nonzero(bad))} inputs outside "
                 f"its valid range (e.g. {worst:g}; valid: {valid}): {gives}",
                 "documented: nki.language activation function docs (valid input ranges)")


def check_dma(ctx: Context, dst: Any, src: Any) -> None:
    on_chip = dst if dst.base.memory.on_chip else src
    first, count, _ = on_chip.partitions() if on_chip.base.memory.on_chip else (0, 1, 1)
    per_partition = on_chip.size * on_chip.dtype.itemsize // max(count, 1)
    if per_partition < ctx.limits["dma_small_bytes"]:
        ctx.find("dma_small", "warning",
                 lambda: f"dma moves {per_partition} B per partition ({src.name} -> {dst.name}); below "
                         f"{ctx.limits['dma_small_bytes']} B a transfer is dominated by its fixed cost (at least "
                         f"{int(ctx.target['dma_recommended_bytes'])} B recommended)",
                 _cite(ctx, "dma_overhead_bytes"))


# What NKI 0.3.0 (Neuron 2.29) changed for the current interface's compiler, and still holds.
_NKI_030 = "documented: release-notes/components/nki.rst, NKI 0.3.0 (Neuron 2.29), breaking changes"


def check_dma_interface(ctx: Context, dst: Any, src: Any, dge_mode: Any) -> None:
    """What the current compiler refuses of a ``dma_copy``: a PSUM operand in a kernel written in
    the current interface (nki.isa.dma_copy docstring, Memory types: "Both src and dst tiles can be
    in HBM or SBUF"; NKI 0.3.0: "No longer supports reading directly from PSUM"), and a hardware-DGE
    transfer between element types (NKI 0.3.0: "Enforces matching source and destination element
    types when using dge_mode=dge_mode.hwdge"; the migration guide: the hardware DGE "moves raw
    bytes ... no type casting occurs")."""
    if ctx.language == "current":
        for name, t in (("src", src), ("dst", dst)):
            if t.base.memory.name == "psum":
                ctx.find("dma_memory", "error", f"dma_copy {name} {t.name} is in PSUM; the current interface's DMA "
                         "moves HBM and SBUF (copy PSUM to SBUF with nisa.tensor_copy first)",
                         f"documented: nki.isa.dma_copy docstring (Memory types); {_NKI_030[len('documented: '):]}")
    if getattr(dge_mode, "name", dge_mode) == "hwdge" and dst.dtype != src.dtype:
        ctx.find("dma_hwdge_cast", "error", f"dma_copy with dge_mode=hwdge from {src.dtype} to {dst.dtype}: the "
                 "hardware DGE moves raw bytes and casts nothing (use dge_mode=swdge to cast, or .view() to "
                 "reinterpret)", f"{_NKI_030}; nki migration guide, NKI 0.3.0")


def check_kernel_signature(ctx: Context, fn: Any, args: tuple, kwargs: dict, at: str) -> None:
    """What the current compiler refuses of a top-level kernel's Python (nki migration guide, NKI
    0.3.0 "Language restrictions": it "does not support the * separator in kernel function
    signatures" and "does not support list as a kernel argument type. Convert list arguments to
    tuples"), in a kernel of the current interface."""
    if ctx.language != "current":
        return
    source = "documented: nki migration guide, NKI 0.3.0 (Language restrictions)"
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        params = ()
    starred = [p.name for p in params if p.kind == p.KEYWORD_ONLY]
    if starred:
        ctx.find("kernel_signature", "error", f"{fn.__name__}: keyword-only parameters ({', '.join(starred)}) after a * "
                 "separator; the current compiler does not take the separator: move them, with their defaults, to "
                 "the end of the signature", source, at=at)
    lists = [str(i) for i, a in enumerate(args) if isinstance(a, list)] + [n for n, a in kwargs.items()
                                                                            if isinstance(a, list)]
    if lists:
        ctx.find("kernel_signature", "error", f"{fn.__name__}: argument(s) {', '.join(lists)} passed as a list; the "
                 "current compiler does not take a list kernel argument: pass a tuple", source, at=at)


def check_simulation_only(ctx: Context, name: str) -> None:
    """An ``nki.language`` function of the current interface that AWS's release notes list as
    working in simulation but failing on hardware. A warning: the notes of NKI 0.5.0 and 0.6.0
    neither repeat the issue nor say it was fixed."""
    if ctx.language == "current":
        what = "Division" if name == "divide" else "Modulo operations"
        ctx.find("simulation_only", "warning", f"nl.{name}: {what} are not available as hardware instructions; the "
                 "call works in simulation and fails when compiled for Trainium hardware",
                 "documented: release-notes/components/nki.rst, NKI 0.3.0 and 0.4.0 known issues")


def check_partitions_used(ctx: Context, name: str, t: Any) -> None:
    if t.base.memory.on_chip:
        _, count, _ = t.partitions()
        if count < ctx.limits["partitions"]:
            ctx.find("partial_partitions", "warning", lambda: f"{name} uses {count} of {ctx.limits['partitions']} "
                     "partitions", _cite(ctx, "partitions"))


def live_use(lives: list, memory: str, bank: int, by_bank: bool,
             from_first_access: bool = True) -> list[tuple[int, int, Any]]:
    """The bytes per partition live in ``memory`` (sbuf or psum) as the run went: (step, live bytes
    after the change, the buffer allocated or freed there), in step order. A buffer is live from
    its first access (``from_first_access``; else its allocation: assumption ``tile_liveness``)
    to its last use, the instruction at either end included (PSUM: whole banks of ``bank`` bytes
    per buffer when ``by_bank``, assumption ``psum_allocation``); one never used takes no memory."""
    events = []
    for b in lives:
        if b.memory.name != memory or b.first_use is None:
            continue
        size = b.partition_bytes
        if memory == "psum" and by_bank:
            size = -(-size // bank) * bank
        # At one step, what an instruction starts using is counted before what it last used is freed
        # (from its first access) or after (from its allocation, made after that step's instruction).
        events.append((b.first_use, 0, size, b) if from_first_access else (b.alloc_step, 1, size, b))
        events.append((b.last_use, 1 if from_first_access else 0, -size, b))
    events.sort(key=lambda e: (e[0], e[1]))
    out, live = [], 0
    for step, _, size, b in events:
        live += size
        out.append((step, live, b))
    return out


def spillable(lives: Any) -> dict[int, Any]:
    """The automatically allocated SBUF tiles some instruction used, by id: what the compiler may
    spill (a direct allocation's Life counts no bytes: machine.placement)."""
    return {life.id: life for life in lives
            if life.memory.name == "sbuf" and life.first_use is not None and life.partition_bytes > 0}


def working_set(trace: list, lives: Any) -> tuple[int, Any]:
    """(bytes per partition, instruction) of the instruction whose own automatically allocated
    SBUF tiles take the most: what no spilling can make room for."""
    tiles = spillable(lives)
    best, where = 0, None
    for ins in trace:
        touched = {p if type(p) is int else p[0] for p in (*ins.writes, *ins.reads)}
        size = sum(tiles[b].partition_bytes for b in touched if b in tiles)
        if size > best:
            best, where = size, ins
    return best, where


def capacity(ctx: Context) -> None:
    """Peak live SBUF and PSUM per partition over the run (``live_use``). Past SBUF, the compiler
    spills (assumption ``sbuf_overflow``: an ``sbuf_spill`` warning, the transfers in
    Run.schedule()) unless one instruction's own tiles exceed it."""
    lives: dict[tuple, list] = {}
    for life in ctx.lives:
        lives.setdefault(life.program, []).append(life)
    if len(lives) > 1:  # each logical core (grid program) has its own SBUF and PSUM
        trace: dict[tuple, list] = {}
        for ins in ctx.trace:
            trace.setdefault(ins.program, []).append(ins)
        for p in sorted(lives):
            _capacity(ctx, lives[p], trace.get(p, []))
        return
    _capacity(ctx, ctx.lives, ctx.trace)


def _capacity(ctx: Context, lives: list, trace: list) -> None:
    """``capacity`` for one program's tiles and instructions."""
    bank = int(ctx.target["psum_bank_bytes"])
    by_bank = ctx.assumptions["psum_allocation"] == "bank"
    first = ctx.assumptions["tile_liveness"] == "first_access"
    for memory, limit_key in (("sbuf", "sbuf_partition_bytes"), ("psum", "psum_partition_bytes")):
        peak, peak_buffer = 0, None
        for _, live, b in live_use(lives, memory, bank, by_bank, first):
            if live > peak:
                peak, peak_buffer = live, b
        limit = int(ctx.target[limit_key])
        if peak <= limit:
            continue
        unit = f" ({peak // bank} banks)" if memory == "psum" else ""
        live = (f"live {memory.upper()} reaches {peak} B per partition{unit} when {peak_buffer.name} "
                f"{'is first used' if first else 'is allocated'}; the target holds {limit} B (assumption tile_liveness)")
        if memory == "sbuf" and ctx.assumptions["sbuf_overflow"] != "error":
            most, ins = working_set(trace, lives)
            if most <= limit:
                ctx.find("sbuf_spill", "warning", f"{live}: the compiler spills tiles to device memory and reloads "
                         "them (Run.schedule() counts the transfers; assumption sbuf_overflow)",
                         f"{_SPILL_DOC}; {_cite(ctx, limit_key)}", at=peak_buffer.line)
                continue
            ctx.find("sbuf_capacity", "error", f"{ins.name} at {ins.where} uses {most} B per partition of SBUF tiles at "
                     f"once; the target holds {limit} B, and no spill makes room for one instruction's operands "
                     f"({live})", _cite(ctx, limit_key), at=ins.where)
            continue
        ctx.find(f"{memory}_capacity", "error", live, _cite(ctx, limit_key), at=peak_buffer.line)
