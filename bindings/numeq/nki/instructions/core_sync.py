"""What two logical cores meet at (LNC=2, ``kernel[2]``): ``core_barrier`` and ``sendrecv``, rows of
the instruction table. Each is a rendezvous of the grid's programs (``machine.cores``): a program
arriving first waits, in numeq's fixed order of turns, until its partner arrives; a partner that
never does is a ``core_deadlock``. Both instructions are "only allowed in NeuronCore-v3 or newer when
LNC (Logical NeuronCore) is enabled" (their docstrings), between cores 0 and 1.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..machine.context import KernelFault, where
from ..machine import rules as _rules
from .access import as_tensor, leave_undefined, unwritten_operand, write
from .forms import Form
from .operands import constraint, doc, shape_fault
from .path import Call
from .table import instruction

_CORES = ((0,), (1,))  # LNC=2: "Currently only cores=(0, 1) is supported"
_LNC = ("documented: nki.isa.{0} docstring (\"only allowed in NeuronCore-v3 or newer when LNC (Logical "
        "NeuronCore) is enabled\"); nki/get-started/about/lnc.rst (kernel[2])")
# nki.isa.sendrecv, dma_engine=gpsimd_dma: "restricts the data size per partition to not exceed 1024
# bytes for 32-bit types, 512 bytes for 16-bit types, 256 bytes for 8-bit types".
_GPSIMD_DMA_BYTES = {4: 1024, 2: 512, 1: 256}


def _lnc2(ctx: Any, name: str) -> bool:
    """The run is two logical cores (a grid of 2); else the instruction's constraint finding."""
    if tuple(ctx.grid) == (2,):
        return True
    constraint(ctx, name, f"the kernel runs as {'one core' if not ctx.grid else f'grid {tuple(ctx.grid)}'}; {name} "
                          "synchronizes the two logical cores of an LNC=2 launch (kernel[2])", _LNC.format(name))
    return False


def _line(ctx: Any) -> str:
    return ctx.at or where()


@instruction("core_barrier", engine="gpsimd", engines=("gpsimd", "vector", "scalar", "tensor", "dma"), since=3,
             forms=[Form("current", "data: tensor, cores")])
def core_barrier(c: Call) -> Any:
    """Every core of ``cores`` ((0, 1)) waits here until all have arrived ("a synchronization point
    where all specified NeuronCores must reach before any can proceed"); ``data``, the shared HBM
    tensor the cores synchronize on, is not changed. The k-th barrier of one core meets the k-th of
    the other; at different lines the cores' control flow differs (``core_divergence``: "the
    behavior is undefined", lnc.rst). Each core's passed barriers order its shared-HBM accesses
    before them against the other core's after (``shared_hbm_race``)."""
    ctx, v = c.ctx, c.args
    data = as_tensor(v["data"], "data")
    if data.base.memory.name != "shared_hbm":
        constraint(ctx, "core_barrier", f"data {data.name} is in {data.base.memory}; it is the shared data the cores "
                                        "synchronize on, \"must be data in shared HBM\"")
    cores = v["cores"]
    if not isinstance(cores, (tuple, list)) or sorted(int(x) for x in cores) != [0, 1]:
        constraint(ctx, "core_barrier", f"cores={cores!r}; \"only (0, 1) is supported when LNC2 is enabled\"")
    meeting = None
    if _lnc2(ctx, "core_barrier"):
        line = _line(ctx)
        met = ctx.cores.meet("core_barrier", ctx.rank, frozenset(ctx.cores.id_of(p) for p in _CORES), None, line)
        if len(set(met.lines.values())) > 1 and list(met.arrived)[-1] == ctx.core_id:  # once: by the last to arrive
            ctx.find("core_divergence", "warning", "the cores meet at core_barriers on different lines (" +
                     "; ".join(f"program {p}: {w}" for p, w in sorted(met.lines.items())) + "): their control flow "
                     "differs", "documented: nki/get-started/about/lnc.rst (\"if ... this control-flow is different "
                     "on the different cores, then the behavior is undefined\")", at=line)
        ctx.cores.current.epoch += 1
        meeting = (ctx.rank, ctx.cores.current.epoch)  # the k-th barrier of this rank's cores
    c.issue([], [data], cycles=64, barrier=meeting)
    return None


@instruction("sendrecv", engine="dma", since=3, forms=[
    Form("current", "src: tensor, dst: tensor, send_to_rank, recv_from_rank, pipe_id, dma_engine = None")])
def sendrecv(c: Call) -> Any:
    """This core's ``src`` goes to core ``send_to_rank``'s ``dst`` while ``dst`` receives core
    ``recv_from_rank``'s ``src`` (nki.isa.sendrecv): both tiles in SBUF, one dtype, one shape; ranks
    0 or 1; the operations of one ``pipe_id`` complete together (the k-th of each core on that pipe
    meet). The cores must pair: a core receiving from one that does not send to it, or a src that
    is not the receiver's dst's dtype and shape, is ``sendrecv_pairing``, naming both lines.
    ``dma_engine=nisa.dma_engine.gpsimd_dma`` limits the bytes per partition (1024 / 512 / 256 for
    32 / 16 / 8-bit types)."""
    ctx, v = c.ctx, c.args
    src, dst = as_tensor(v["src"], "src"), as_tensor(v["dst"], "dst")
    for t, parameter in ((src, "src"), (dst, "dst")):
        if t.base.memory.name != "sbuf":
            constraint(ctx, "sendrecv", f"{parameter} {t.name} is in {t.base.memory}; src and dst \"must both be in "
                                        "SBUF\"")
    if src.dtype != dst.dtype:
        constraint(ctx, "sendrecv", f"src {src.name} is {src.dtype} and dst {dst.name} {dst.dtype}; they \"must have "
                                    "the same data type\"")
    if src.shape[0] != dst.shape[0] or src.free_size() != dst.free_size():
        raise shape_fault(ctx, "sendrecv", f"src {src.name} {src.shape} and dst {dst.name} {dst.shape}: they have the "
                                           "same partition size and elements per partition")
    ranks = {}
    for parameter in ("send_to_rank", "recv_from_rank"):
        r = v[parameter]
        if isinstance(r, (bool, np.bool_)) or not isinstance(r, (int, np.integer)) or int(r) not in (0, 1):
            raise KernelFault(ctx.find("instruction_constraint", "error", f"sendrecv: {parameter}={r!r}; ranks "
                                       "\"must be either 0 or 1\"", doc("sendrecv")))
        ranks[parameter] = int(r)
    mode = getattr(v["dma_engine"], "name", v["dma_engine"])
    if mode == "gpsimd_dma":
        most = _GPSIMD_DMA_BYTES.get(src.dtype.itemsize)
        per_partition = src.free_size() * src.dtype.itemsize
        if most is not None and per_partition > most:
            constraint(ctx, "sendrecv", f"dma_engine=gpsimd_dma moves {per_partition} B per partition of "
                                        f"{8 * src.dtype.itemsize}-bit {src.dtype}; at most {most}")
    # What is sent: src as it is now, its unwritten elements left undefined in the receiver's dst (a
    # DMA moves them; nki-library's rmsnorm_mx_quantize_tkg sends whole scale tiles, 28 of each
    # quadrant's 32 partitions never written).
    _rules.check_on_chip(ctx, src)
    unwritten = unwritten_operand(ctx, src)
    bits = src.data.copy()
    if _lnc2(ctx, "sendrecv"):
        line = _line(ctx)
        me = ctx.program[0]
        met = ctx.cores.meet("sendrecv", (ctx.rank, v["pipe_id"]), frozenset(ctx.cores.id_of(p) for p in _CORES),
                             (bits, unwritten, src.dtype, (src.shape[0], src.free_size()), ranks["send_to_rank"]), line)
        partner = ranks["recv_from_rank"]
        their = ctx.cores.id_of((partner,))
        their_bits, their_unwritten, their_dtype, their_shape, their_target = met.arrived[their]
        both = f"program {me} at {line}, program {partner} at {met.lines[their]}"
        if their_target != me:
            raise KernelFault(ctx.find("sendrecv_pairing", "error", f"sendrecv pipe {v['pipe_id']!r}: program {me} "
                                       f"receives from {partner}, which sends to {their_target} ({both})",
                                       doc("sendrecv"), at=line))
        if their_dtype != dst.dtype or their_shape != (dst.shape[0], dst.free_size()):
            raise KernelFault(ctx.find("sendrecv_pairing", "error", f"sendrecv pipe {v['pipe_id']!r}: program "
                                       f"{partner} sends {their_dtype} {their_shape} into program {me}'s dst "
                                       f"{dst.name}, {dst.dtype} {(dst.shape[0], dst.free_size())} ({both})",
                                       doc("sendrecv"), at=line))
        write(ctx, dst, None, bits=their_bits.reshape(dst.shape))
        if their_unwritten is not None:
            leave_undefined(ctx, dst, their_unwritten.reshape(dst.shape))
    c.issue([dst], [src], nbytes=src.size * src.dtype.itemsize, engine="gpsimd" if mode == "gpsimd_dma" else "dma",
            pipe=v["pipe_id"])
    return None
