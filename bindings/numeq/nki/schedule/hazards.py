"""Hazards: orderings a kernel leaves to the hardware that its documents forbid, found on the run's
dependency graph (``schedule.graph``), each a finding naming both lines.

Loop-carried dependences in ``affine_range``. The loop declares its iterations independent: "the
recommended iterator type when the loop does not have loop-carried dependency (Note, associative
reductions are not considered loop carried dependencies in this context)" (aws-neuron-sdk
nki/guides/tutorials/matrix_multiplication.rst); the compiler may reorder or overlap them. A value
one iteration writes and another reads (a read-after-write edge between two iterations of one
affine loop) is such a dependence, unless both instructions are steps of one associative reduction
into the same bytes (matmuls accumulating into a PSUM tile, ``acc = acc + x`` and the like, and
the write that starts it). Each one found is confirmed by running the kernel again with every
affine_range loop's iterations last to first: an error where that changes an output, a warning
where the values happen to agree.

This is the older interface's contract (neuronxcc.nki; the nki.* namespace through NKI 0.2.0). From
NKI 0.3.0 the current interface's ``affine_range`` is "an alias for Python's range() function"
that unrolls the loop (nki.language.affine_range docstring, Neuron 2.29 on; the language guide:
the compiler "will respect the sequential order of operations" and reorders only what has no data
dependence), so a kernel whose file imports ``nki`` (``Run.language`` "current") has no such
hazard. A kernel whose language numeq cannot tell is held to the older contract.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..machine.context import Finding
from .graph import Graph, _buffer, region

__all__ = ["hazards"]

_SOURCE_AFFINE = ("documented: aws-neuron-sdk nki/guides/tutorials/matrix_multiplication.rst (affine_range: no "
                  "loop-carried dependency; associative reductions excepted), nki.language.affine_range")
# ALU operators whose repeated application to an accumulator gives the same result in any order.
_ASSOCIATIVE = frozenset({"add", "maximum", "minimum", "multiply", "max", "min", "bitwise_and", "bitwise_or",
                          "bitwise_xor", "logical_and", "logical_or"})


def _operator_names(ins: Any) -> set[str]:
    names = set()
    for key in ("op", "op0", "op1"):
        op = ins.detail.get(key)
        if op is not None:
            names.add(getattr(op, "__name__", None) or str(op))
    return names


def _accumulates(ins: Any, buffer: int, life_of: dict) -> bool:
    """Whether ``ins`` adds into bytes of ``buffer`` it also holds: a matmul accumulating into
    PSUM, or an associative ALU operator whose destination is one of its sources."""
    if ins.name == "nc_matmul":
        return ins.detail.get("accumulate") == "accumulate"
    names = _operator_names(ins)
    if not names or not names <= _ASSOCIATIVE:
        return False
    life = life_of.get(buffer)
    if life is None:
        return False
    written = [region(p, life) for p in ins.writes if _buffer(p) == buffer]
    read = [region(p, life) for p in ins.reads if _buffer(p) == buffer]
    return any(w == r for w in written for r in read)


def _reduction_step(before: Any, after: Any, buffer: int, life_of: dict) -> bool:
    """Whether the edge before -> after is one associative reduction going on: ``after`` adds
    into the bytes, and ``before`` is a step of the same reduction or the write that starts it
    (the same instruction, at the same line)."""
    return _accumulates(after, buffer, life_of) and before.name == after.name and (
        _accumulates(before, buffer, life_of) or before.where == after.where or before.name == "nc_matmul")


def _carried(g: Graph, life_of: dict) -> dict[tuple, list]:
    """(writer line, reader line, buffer) -> [(writer iteration, reader iteration), ...] of the
    read-after-write edges between iterations of one affine_range loop."""
    found: dict[tuple, list] = {}
    trace = g.instructions
    for e in g.edges:
        if e.kind != "raw":
            continue
        a, b = trace[e.before], trace[e.after]
        depth = 0
        for (la, ka), (lb, _) in zip(a.loops, b.loops):
            if la != lb:
                break
            depth += 1
            if ka == "affine" and a.iteration[depth - 1] != b.iteration[depth - 1]:
                buffer = _buffer_of(e, a, b)
                if buffer is not None and _reduction_step(a, b, buffer, life_of):
                    break
                found.setdefault((a.where, b.where, e.buffer), []).append((a.iteration[:depth], b.iteration[:depth]))
                break
    return found


def _buffer_of(e: Any, a: Any, b: Any) -> int | None:
    """The id of the buffer named by edge ``e`` that ``a`` writes and ``b`` reads."""
    written = {_buffer(p) for p in a.writes}
    for p in b.reads:
        if _buffer(p) in written:
            return _buffer(p)
    return None


def _bits(outputs: Any) -> list:
    arrays = outputs if isinstance(outputs, (list, tuple)) else [outputs]
    return [np.ascontiguousarray(x).view(np.dtype(f"u{x.dtype.itemsize}")) for x in arrays if isinstance(x, np.ndarray)]


def hazards(run: Any, g: Graph) -> list[Finding]:
    """The hazards of ``run`` (a completed ``numeq.nki.Run``) on its graph ``g``."""
    if getattr(run, "language", None) == "current":  # affine_range is range (see the module doc)
        return []
    life_of = {life.id: life for life in run.lives}
    carried = _carried(g, life_of)
    if not carried:
        return []
    changed = None
    unconfirmed = "the run could not be repeated in another order"
    if not run.values:
        unconfirmed = "a run without values (values=False) cannot compare outputs"
    elif run.completed:
        backwards = run.rerun(reverse_affine=True)
        if backwards.completed:
            mine, theirs = _bits(run.outputs), _bits(backwards.outputs)
            changed = sum(int(np.count_nonzero(x != y)) for x, y in zip(mine, theirs) if x.shape == y.shape)
            total = sum(x.size for x in mine)
    out = []
    for (wrote, reads, buffer), pairs in carried.items():
        (first_w, first_r) = pairs[0]
        message = (f"an iteration of an affine_range loop reads {buffer} at {reads} that another iteration wrote at "
                   f"{wrote} (iteration {first_w[-1]} writes, {first_r[-1]} reads"
                   f"{f'; {len(pairs)} such pairs' if len(pairs) > 1 else ''}): affine_range declares its iterations "
                   "independent and the compiler may reorder them; use sequential_range or static_range")
        if changed:
            severity = "error"
            message += f". Confirmed: with the iterations run last to first, {changed} of {total} output elements change"
        else:
            severity = "warning"
            message += (". Run last to first the outputs do not change" if changed == 0 else
                        f". Not confirmed: {unconfirmed}")
        out.append(Finding("loop_carried_dependency", severity, reads, message, _SOURCE_AFFINE, len(pairs)))
    return out
