"""``nki.collectives``: collective communication between ranks, rows of the instruction table
(module ``nki.collectives``). A rank is one launch of the kernel with its own HBM, SBUF and PSUM
(``numeq.nki.run(kernel, ..., ranks=R)``); the ranks of a replica group meet at each collective,
as the grid's programs meet at a core_barrier (``machine.cores``): a rank that never calls it is a
``core_deadlock``, ranks that call different collectives, or with different shapes, dtypes or
operators, a ``collective_mismatch`` naming each rank's line.

The API reference (nki.collectives) gives what each collective moves, not how a reduction is
ordered or how precisely it adds: both are assumptions (``collective_order``,
``collective_accumulator``). With their defaults an all-reduce of R ranks adds the ranks' values in
fp32, in the group's order, and rounds once into the destination: the Trainium platform's sum plan
over the R values (``numeq.sum(..., platform="trainium.trn2")``), whose bound it therefore has.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..machine import arithmetic as _numerics
from ..machine.alu import op_name
from ..machine.context import KernelFault, where
from ..machine.memory import Tensor
from .access import as_tensor, read, write
from .forms import Form
from .operands import constraint
from .path import Call
from .table import instruction

_DOC = "documented: nki.collectives API reference ({0})"
_OPS = ("add", "minimum", "maximum")  # "nl.add, nl.minimum, or nl.maximum"


class ReplicaGroup:
    """The ranks that meet in a collective: ``ReplicaGroup([[0, 1], [2, 3]])``, a list of groups,
    each a list of ranks ("Sub-groups represented by lists of ranks should not have any overlap").
    ``nki.collectives.ReplicaGroup`` is this and ``nl.NKIObject``, as NKI declares it."""

    def __init__(self, groups: Any) -> None:
        try:
            parsed = [[int(r) for r in g] for g in groups]
        except (TypeError, ValueError):
            raise TypeError(f"ReplicaGroup: expected a list of groups, each a list of rank ids, got {groups!r}") from None
        seen: set[int] = set()
        for g in parsed:
            if not g or len(set(g)) != len(g) or seen & set(g) or any(r < 0 for r in g):
                raise ValueError(f"ReplicaGroup: {groups!r}: each group is a non-empty list of distinct ranks (from "
                                 "0), and groups do not overlap")
            seen |= set(g)
        self.groups = parsed

    def group_of(self, rank: int) -> list[int] | None:
        return next((g for g in self.groups if rank in g), None)

    def __repr__(self) -> str:
        return f"ReplicaGroup({self.groups!r})"


def _tensors(ctx: Any, name: str, values: Any, parameter: str) -> list[Tensor]:
    if isinstance(values, Tensor):
        values = [values]
    if not isinstance(values, (list, tuple)) or not values:
        raise TypeError(f"{where()}: ncc.{name}: {parameter} is a list of tensors, got {values!r}")
    return [as_tensor(v, parameter) for v in values]


def _memory_rule(ctx: Any, name: str, tensors: list[Tensor], hbm_only: bool) -> None:
    """"Tensors can reside on either HBM or SBUF. However, mixing memory spaces is not supported ...
    Coalesced collective communication (multiple tensors) is only supported when tensors are on
    HBM" (all_to_all and collective_permute: HBM only)."""
    on_chip = {t.base.memory.on_chip for t in tensors}
    if len(on_chip) > 1:
        constraint(ctx, name, "srcs and dsts mix HBM and SBUF tensors; all must be on HBM or all on SBUF",
                   _DOC.format(name))
    elif True in on_chip and hbm_only:
        constraint(ctx, name, "its tensors are on SBUF; it takes HBM tensors only", _DOC.format(name))
    elif True in on_chip and len(tensors) > 2:
        constraint(ctx, name, "coalesced srcs / dsts (several tensors) on SBUF; coalescing takes HBM tensors",
                   _DOC.format(name))


def _meet(c: Call, name: str, ranks: list[int], brought: dict) -> dict:
    """Meet the ranks ``ranks`` at this collective; what each rank brought, by rank."""
    ctx = c.ctx
    if len(ctx.cores.programs) > max(ctx.ranks, 1):
        raise ctx.unsupported(f"ncc.{name} in a kernel launched on several logical cores per rank (numeq runs "
                              "collectives with one core per rank)")
    launched = max(ctx.ranks, 1)
    missing = [r for r in ranks if r >= launched]
    line = ctx.at or where()
    if missing:
        raise KernelFault(ctx.find("core_deadlock", "error", f"ncc.{name}: the group {ranks} names ranks {missing} "
                                   f"that were not launched (ranks={launched}): they never arrive", _DOC.format(name),
                                   at=line))
    parties = frozenset(ctx.cores.id_of(ctx.program, rank=r) for r in ranks)
    met = ctx.cores.meet("collective", tuple(ranks), parties, brought, line)
    first = met.arrived[ctx.cores.id_of(ctx.program, rank=ranks[0])]
    differ = [r for r in ranks if met.arrived[ctx.cores.id_of(ctx.program, rank=r)]["what"] != first["what"]]
    if differ:
        lines = "; ".join(f"rank {r}: {met.arrived[ctx.cores.id_of(ctx.program, rank=r)]['what']} at "
                          f"{met.lines[ctx.cores.id_of(ctx.program, rank=r)]}" for r in ranks)
        raise KernelFault(ctx.find("collective_mismatch", "error", f"the ranks of group {ranks} meet at different "
                                   f"collectives: {lines}", _DOC.format(name), at=line))
    return {r: met.arrived[ctx.cores.id_of(ctx.program, rank=r)] for r in ranks}


def _payload(ctx: Any, srcs: list[Tensor], what: tuple, values: bool) -> dict:
    """What a rank brings: each src as it is now, its fp32 values (``values``: a reduction) or its
    stored bits (data movement)."""
    if values:
        return {"what": what, "values": [np.array(read(ctx, t, "srcs", "dma"), copy=True) for t in srcs]}
    return {"what": what, "bits": [read(ctx, t, "srcs", "dma", bits=True).copy() for t in srcs]}


def _reduce(ctx: Any, parts: list[np.ndarray], op: str, dtype: Any) -> np.ndarray:
    """The ranks' values reduced with ALU ``op``: max / min exactly; add in the order and precision
    of assumptions ``collective_order`` (group_order: ((v0 + v1) + v2) ...; pairwise: neighbours
    first) and ``collective_accumulator`` (fp32: each sum rounded to fp32; dtype: each partial sum
    also rounded into the tensors' dtype)."""
    if op != "add":
        f = np.maximum if op == "maximum" else np.minimum
        out = parts[0]
        for p in parts[1:]:
            out = f(out, p)
        return out
    narrow = ctx.assumptions["collective_accumulator"] == "dtype" and dtype.format != "fp32"

    def add(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        s = _numerics.accumulate_fp32(a, b, "nearest_even")
        return _numerics.fp32_values(_numerics.cast_into(s, dtype), dtype) if narrow else s

    if ctx.assumptions["collective_order"] == "pairwise":
        level = list(parts)
        while len(level) > 1:
            level = [add(level[i], level[i + 1]) if i + 1 < len(level) else level[i] for i in range(0, len(level), 2)]
        return level[0]
    out = parts[0]
    for p in parts[1:]:
        out = add(out, p)
    return out


def _shape_of(t: Tensor) -> tuple:
    return (tuple(t.shape), str(t.dtype))


def _group(c: Call, name: str) -> list[int]:
    ctx, group = c.ctx, c.args["replica_group"]
    if not isinstance(group, ReplicaGroup):
        raise TypeError(f"{where()}: ncc.{name}: replica_group is an nki.collectives.ReplicaGroup, got {group!r}")
    ranks = group.group_of(ctx.rank)
    if ranks is None:
        raise KernelFault(ctx.find("instruction_constraint", "error", f"ncc.{name}: rank {ctx.rank} is in no group of "
                                   f"{group!r}", _DOC.format(name)))
    return ranks


def _op(c: Call, name: str) -> str:
    op = op_name(c.args["op"])
    if op not in _OPS:
        raise KernelFault(c.ctx.find("instruction_constraint", "error", f"ncc.{name}: op {op!r}; it reduces with "
                                     "nl.add, nl.minimum or nl.maximum", _DOC.format(name)))
    return op


def _dim(c: Call, name: str, tensors: list[Tensor]) -> int:
    """collective_dim: "Currently only 0 is supported" (all_gather on SBUF: 0 or 1)."""
    dim = c.args["collective_dim"]
    on_chip = tensors[0].base.memory.on_chip
    allowed = (0, 1) if name == "all_gather" and on_chip else (0,)
    if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)) or int(dim) not in allowed:
        raise KernelFault(c.ctx.find("instruction_constraint", "error", f"ncc.{name}: collective_dim={dim!r}; "
                                     f"supported: {', '.join(map(str, allowed))}", _DOC.format(name)))
    return int(dim)


def _issue(c: Call, name: str, dsts: list[Tensor], srcs: list[Tensor], ranks: list[int]) -> None:
    c.issue(dsts, srcs, nbytes=sum(t.size * t.dtype.itemsize for t in srcs), engine="dma", collective=name,
            group=tuple(ranks))


def _operands(c: Call, name: str, hbm_only: bool) -> tuple[list[Tensor], list[Tensor]]:
    """(srcs, dsts) of a collective: lists of tensors, one dst per src, in one memory space."""
    ctx = c.ctx
    srcs, dsts = _tensors(ctx, name, c.args["srcs"], "srcs"), _tensors(ctx, name, c.args["dsts"], "dsts")
    if len(srcs) != len(dsts):
        raise KernelFault(ctx.find("shape_mismatch", "error", f"ncc.{name}: {len(srcs)} srcs and {len(dsts)} dsts; "
                                   "one dst per src", _DOC.format(name)))
    _memory_rule(ctx, name, srcs + dsts, hbm_only=hbm_only)
    return srcs, dsts


@instruction("all_reduce", engine="dma", module="nki.collectives",
             assumptions=("collective_order", "collective_accumulator"),
             forms=[Form("current", "srcs, dsts, replica_group, op, priority = None")])
def all_reduce(c: Call) -> None:
    """Every rank of the group gets, in each dst, the reduction (``op``) of the group's srcs."""
    ctx, name = c.ctx, "all_reduce"
    srcs, dsts = _operands(c, name, hbm_only=False)
    ranks, op = _group(c, name), _op(c, name)
    for s, d in zip(srcs, dsts):
        if s.shape != d.shape:
            raise KernelFault(ctx.find("shape_mismatch", "error", f"ncc.all_reduce: src {s.name} {s.shape} and dst "
                                       f"{d.name} {d.shape}", _DOC.format(name)))
    met = _meet(c, name, ranks, _payload(ctx, srcs, (name, op, [_shape_of(t) for t in srcs]), True))
    for i, d in enumerate(dsts):
        write(ctx, d, _reduce(ctx, [met[r]["values"][i] for r in ranks], op, srcs[i].dtype).reshape(d.shape))
    _issue(c, name, dsts, srcs, ranks)


@instruction("reduce_scatter", engine="dma", module="nki.collectives",
             assumptions=("collective_order", "collective_accumulator"),
             forms=[Form("current", "srcs, dsts, replica_group, collective_dim, op, priority = None")])
def reduce_scatter(c: Call) -> None:
    """The group's srcs reduced (``op``), then split along ``collective_dim`` into one chunk per
    rank: the rank at position i of the group gets chunk i."""
    ctx, name = c.ctx, "reduce_scatter"
    srcs, dsts = _operands(c, name, hbm_only=False)
    ranks, op, dim = _group(c, name), _op(c, name), _dim(c, name, srcs)
    n = len(ranks)
    for s, d in zip(srcs, dsts):
        if s.shape[dim] % n or s.shape[:dim] + (s.shape[dim] // n,) + s.shape[dim + 1:] != d.shape:
            raise KernelFault(ctx.find("shape_mismatch", "error", f"ncc.reduce_scatter: src {s.name} {s.shape} split "
                                       f"{n} ways along dim {dim} does not give dst {d.name} {d.shape}",
                                       _DOC.format(name)))
    met = _meet(c, name, ranks, _payload(ctx, srcs, (name, op, dim, [_shape_of(t) for t in srcs]), True))
    position = ranks.index(ctx.rank)
    for i, d in enumerate(dsts):
        total = _reduce(ctx, [met[r]["values"][i] for r in ranks], op, srcs[i].dtype)
        write(ctx, d, np.split(total, n, axis=dim)[position].reshape(d.shape))
    _issue(c, name, dsts, srcs, ranks)


@instruction("all_gather", engine="dma", module="nki.collectives",
             forms=[Form("current", "srcs, dsts, replica_group, collective_dim, priority = None")])
def all_gather(c: Call) -> None:
    """Every rank of the group gets, in each dst, the group's srcs concatenated along
    ``collective_dim`` in the group's order (their bits: one dtype)."""
    ctx, name = c.ctx, "all_gather"
    srcs, dsts = _operands(c, name, hbm_only=False)
    ranks, dim = _group(c, name), _dim(c, name, srcs)
    _same_dtypes(ctx, name, srcs, dsts)
    met = _meet(c, name, ranks, _payload(ctx, srcs, (name, dim, [_shape_of(t) for t in srcs]), False))
    for i, d in enumerate(dsts):
        _write_bits(ctx, name, d, np.concatenate([met[r]["bits"][i] for r in ranks], axis=dim))
    _issue(c, name, dsts, srcs, ranks)


@instruction("all_to_all", engine="dma", module="nki.collectives",
             forms=[Form("current", "srcs, dsts, replica_group, collective_dim, priority = None")])
def all_to_all(c: Call) -> None:
    """Each rank's src split along ``collective_dim`` into one chunk per rank of the group; the rank
    at position j gets chunk j of every rank's, concatenated in the group's order."""
    ctx, name = c.ctx, "all_to_all"
    srcs, dsts = _operands(c, name, hbm_only=True)
    ranks, dim = _group(c, name), _dim(c, name, srcs)
    _same_dtypes(ctx, name, srcs, dsts)
    n = len(ranks)
    for s in srcs:
        if s.shape[dim] % n:
            raise KernelFault(ctx.find("shape_mismatch", "error", f"ncc.all_to_all: src {s.name} {s.shape} does not "
                                       f"split {n} ways along dim {dim}", _DOC.format(name)))
    met = _meet(c, name, ranks, _payload(ctx, srcs, (name, dim, [_shape_of(t) for t in srcs]), False))
    position = ranks.index(ctx.rank)
    for i, d in enumerate(dsts):
        _write_bits(ctx, name, d, np.concatenate([np.split(met[r]["bits"][i], n, axis=dim)[position] for r in ranks],
                                                 axis=dim))
    _issue(c, name, dsts, srcs, ranks)


@instruction("collective_permute", engine="dma", module="nki.collectives",
             forms=[Form("current", "srcs, dsts, source_target_pairs, priority = None")])
def collective_permute(c: Call) -> None:
    """Each ``(source, target)`` pair sends the source rank's src into the target rank's dst; a rank
    no pair targets keeps its dst. Every rank named in a pair meets here."""
    ctx, name = c.ctx, "collective_permute"
    srcs, dsts = _operands(c, name, hbm_only=True)
    if len(srcs) != 1:  # "each list parameter must contain exactly one tensor"
        constraint(ctx, name, f"{len(srcs)} srcs; coalescing is not supported: one tensor each", _DOC.format(name))
    _same_dtypes(ctx, name, srcs, dsts)
    try:
        pairs = [(int(a), int(b)) for a, b in c.args["source_target_pairs"]]
    except (TypeError, ValueError):
        raise TypeError(f"{where()}: ncc.collective_permute: source_target_pairs is a list of (source, target) rank "
                        f"pairs, got {c.args['source_target_pairs']!r}") from None
    ranks = sorted({r for pair in pairs for r in pair})
    if ctx.rank not in ranks:
        raise KernelFault(ctx.find("instruction_constraint", "error", f"ncc.collective_permute: rank {ctx.rank} is in "
                                   f"no pair of {pairs}", _DOC.format(name)))
    met = _meet(c, name, ranks, _payload(ctx, srcs, (name, tuple(pairs), [_shape_of(t) for t in srcs]), False))
    sources = [a for a, b in pairs if b == ctx.rank]
    if len(sources) > 1:
        raise KernelFault(ctx.find("instruction_constraint", "error", f"ncc.collective_permute: rank {ctx.rank} is the "
                                   f"target of ranks {sources}", _DOC.format(name)))
    if sources:
        _write_bits(ctx, name, dsts[0], met[sources[0]]["bits"][0])
    _issue(c, name, dsts, srcs, ranks)


@instruction("rank_id", engine="dma", module="nki.collectives", forms=[Form("current", "")])
def rank_id(c: Call) -> Any:
    """The rank's id in the collective group, in a register (as ``scalar_offset=`` reads it)."""
    from .registers import VirtualRegister

    return VirtualRegister(c.ctx.rank, frozen=True)


def _same_dtypes(ctx: Any, name: str, srcs: list[Tensor], dsts: list[Tensor]) -> None:
    for s, d in zip(srcs, dsts):
        if s.dtype != d.dtype:
            constraint(ctx, name, f"src {s.name} is {s.dtype} and dst {d.name} {d.dtype}; it moves data, one dtype",
                       _DOC.format(name))


def _write_bits(ctx: Any, name: str, dst: Tensor, bits: np.ndarray) -> None:
    if bits.size != dst.size:
        raise KernelFault(ctx.find("shape_mismatch", "error", f"ncc.{name}: the gathered data has {bits.size} elements; "
                                   f"dst {dst.name} {dst.shape} holds {dst.size}", _DOC.format(name)))
    write(ctx, dst, None, bits=bits.reshape(dst.shape).astype(dst.data.dtype, copy=False))
