"""Where a run loses precision (``Run.precision``): each narrowing (an instruction rounding the fp32
values it computed into a narrower destination), each accumulation (a PSUM matmul chain, an SBUF
tile accumulated into, ``acc = acc + part``), each activation (with its function model), and each
assumption the output depends on.

A narrowing or an accumulation into a narrow tile (on chip, or the kernel's HBM output) is ranked
by its measured share of the output's error: the kernel runs again with that tile allocated in fp32
(the switch: ``Context.widen`` holds the allocation lines to widen, ``allocated`` applies it), and
the share is how much of the output's distance from its target that one tile accounts for,
(E - E_widened) / E; ``alone`` is the error its rounding causes by itself (every other narrow
tile widened), which two roundings in a row (a bf16 tile stored to a bf16 output) need. The target is the exact result where the caller gives it (a review knows the
op), else the run with every narrow tile widened. PSUM chains, free-axis sums and activations
compute in fp32 (nothing narrower to widen): against an exact result, what remains with every
narrow tile widened is their share, one site's alone or a row for them together. Assumptions are
measured by running each alternative: the number of output elements whose bits change.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import numpy as np
from .dtypes import dtype_of
from .arithmetic import fp32_values
import json
from ... import _core
from .arithmetic import _CERTIFIED

__all__ = ["NARROW", "PrecisionRow", "Site", "allocated", "flow", "record_write", "record_issue"]

# Formats narrower than the fp32 every engine computes in (their tiles can be widened).
NARROW = frozenset({"bf16", "fp16", "tf32", "e4m3", "e4m3fn", "e5m2"})


def allocated(ctx: Any, line: str, dtype: Any) -> Any:
    """The dtype a tile allocated at ``line`` gets: its own, or fp32 when the precision flow widens
    that line (``Context.widen``, the one switch every allocation goes through)."""
    if ctx.widen and line in ctx.widen and dtype.format in NARROW:
        return dtype_of("float32")
    return dtype


@dataclass
class Site:
    """One place precision is lost, keyed by the tile it lands in (``tile``: its allocation line)."""

    kind: str  # narrowing, accumulation (a tile added into: its narrowings are its steps), activation
    where: str  # the instruction's file:LINE (the accumulating one for an accumulation)
    format: str
    length: int = 0  # accumulation: terms per element; narrowing: elements rounded; activation: elements
    tile: str = ""
    on_chip: bool = True  # a narrowing into HBM is the output format's own rounding: not widened
    lines: set = field(default_factory=set)
    detail: str = ""
    steps: dict = field(default_factory=dict)  # buffer id -> accumulating writes into it


@dataclass
class PrecisionRow:
    """A row of ``Run.precision``: ``where`` "file.py:LINE", ``kind`` (narrowing, accumulation,
    activation, assumption), ``format``, ``length``, ``share`` of the output's error (the part
    widening this one tile removes; None where not measured), ``detail``, and ``alone`` (the error
    this tile's rounding causes by itself, every other narrow tile widened; None where not
    measured). Two roundings in a row (a bf16 tile stored to a bf16 output) each have a small
    ``share`` (widening one leaves the other) and a large ``alone``."""

    where: str
    kind: str
    format: str
    length: int
    share: float | None
    detail: str = ""
    alone: float | None = None

    def __str__(self) -> str:
        share = "-" if self.share is None else f"{self.share:.1%}"
        alone = "" if self.alone is None else f" (alone {self.alone:.1%})"
        return f"{self.where}: {self.kind} {self.format} x{self.length}: share {share}{alone}; {self.detail}"


def record_write(ctx: Any, dst: Any, values: np.ndarray, bits: np.ndarray) -> None:
    """``access.write`` cast fp32 ``values`` into dst's ``bits``: remember how many changed (the
    instruction's issue classifies it)."""
    if dst.dtype.format not in NARROW:
        return
    v = np.asarray(values)
    if dst.dtype.format == "bf16" and v.dtype == np.float32:
        # bf16 keeps the high half of the fp32 pattern: a value changes iff its low half is not 0
        # (one pass; a NaN with payload bits there counts as rounded, which moves no value).
        changed = int(np.count_nonzero(np.ascontiguousarray(v).view(np.uint32) & np.uint32(0xFFFF)))
    else:
        back = fp32_values(bits, dst.dtype)
        v = v.astype(np.float32).reshape(back.shape)
        changed = int(np.count_nonzero(back != v))
        if changed and np.isnan(v).any():  # a NaN stays a NaN: not a rounding
            changed -= int(np.count_nonzero(np.isnan(back) & np.isnan(v)))
    if changed:
        ctx.rounded.append((dst, changed))


def record_issue(ctx: Any, name: str, where: str, dst: list, srcs: list, detail: dict, sums: bool = False) -> None:
    """Classify what the instruction just issued lost (``Context.issue``; ``sums``: it added along
    the free axis in fp32, as its row in the instruction table says)."""
    sites = ctx.sites
    for t, changed in ctx.rounded:
        key = (t.base.line, "tile")
        site = sites.get(key)
        if site is None:
            site = sites[key] = Site("narrowing", where, t.dtype.format, tile=t.base.line, on_chip=t.base.memory.on_chip)
            if not site.on_chip:
                site.detail = f"into {t.name} in HBM: the output's own format"
        if any(s.base is t.base for s in srcs):  # acc = acc + x: the tile accumulates
            if site.kind != "accumulation":
                site.kind, site.where = "accumulation", where
            site.steps[t.base.id] = site.steps.get(t.base.id, 0) + 1
            site.length = max(site.steps.values()) + 1  # the steps' terms and the value first written
        elif site.kind == "narrowing":
            site.length += changed
        site.lines.add(where)
    ctx.rounded = []
    if srcs and sums:
        key = (where, "sum")
        site = sites.get(key)
        if site is None:
            site = sites[key] = Site("accumulation", where, "fp32 (free-axis sum)",
                                     detail=f"{name}: a free-axis sum by the platform's sum plan (vector_reduce_order)")
        site.length = max(site.length, srcs[0].free_size())
        site.lines.add(where)
    if "function" in detail:
        key = (where, "activation")
        site = sites.get(key)
        if site is None:
            site = sites[key] = Site("activation", where, "fp32", detail=_function_model(ctx, detail["function"]))
        site.length += dst[0].size if dst else 0
        site.lines.add(where)


def _psum_chains(trace: list) -> list[Site]:
    """The PSUM accumulation chains of a run, read from its trace: per nc_matmul line, the longest
    chain's K (its nc_matmuls' K summed from the one that overwrote the PSUM tile)."""
    sites: dict[str, Site] = {}
    running: dict = {}  # PSUM (buffer id, offset) -> K summed so far in its chain
    for ins in trace:
        if "psum" not in ins.detail:  # a PE-array matmul into PSUM records where it accumulates
            continue
        d = ins.detail
        key = d.get("psum")
        k = int(d.get("k", 0))
        running[key] = running.get(key, 0) + k if d.get("accumulate") == "accumulate" else k
        site = sites.get(ins.where)
        if site is None:
            site = sites[ins.where] = Site("accumulation", ins.where, "fp32 (PSUM)", detail="nc_matmul chain into PSUM")
        site.length = max(site.length, running[key])
        site.lines.add(ins.where)
    return list(sites.values())


def _function_model(ctx: Any, function: str) -> str:
    """What the platform says of activation ``function``: its ulp budget and evidence (the
    platform's function models), or that it is one IEEE operation or none."""
    models = getattr(ctx, "_function_models", None)
    if models is None:
        platform = json.loads(_core.core_platform_json(ctx.target.platform))
        models = ctx._function_models = {f["function"]: f for f in platform.get("functions", [])}
    model = models.get(_CERTIFIED.get(function, function))
    if model is None:
        return f"{function}: one IEEE fp32 operation (or none): correctly rounded, no budget"
    return (f"{function}: correctly rounded fp32 within {model['ulps']:g} ulps ({model['evidence']}: "
            f"{model['source']})")


def _arrays(outputs: Any) -> list:
    """The output arrays, in order (a kernel returns one, a tuple or list, or a dict of them)."""
    if isinstance(outputs, np.ndarray):
        return [outputs]
    if isinstance(outputs, (tuple, list)):
        return [a for x in outputs for a in _arrays(x)]
    if isinstance(outputs, dict):
        return [a for x in outputs.values() for a in _arrays(x)]
    return []


def _flat(outputs: Any) -> np.ndarray:
    """Every output element as float64, in order."""
    parts = [np.asarray(a, dtype=np.float64).reshape(-1) for a in _arrays(outputs)]
    return np.concatenate(parts) if parts else np.zeros(0)


def _distance(x: np.ndarray, y: np.ndarray) -> float:
    finite = np.isfinite(x) & np.isfinite(y)
    return float(np.linalg.norm((x - y)[finite]))


def _bits(outputs: Any) -> list:
    """Each output array's elements as unsigned integers of their size (bit patterns)."""
    return [np.ascontiguousarray(a).view(np.dtype(f"u{a.dtype.itemsize}")) for a in _arrays(outputs)]


def flow(run: Any, rerun: Callable[..., Any], alternatives: dict[str, list],
         reference: np.ndarray | None = None, unread: Mapping[str, list] | None = None) -> list[PrecisionRow]:
    """The precision-flow rows of ``run`` (largest share first; unmeasured rows after, assumptions
    last). ``rerun(widen=..., assume=...)`` runs the kernel again; ``alternatives``: assumption ->
    its other values; ``unread``: the same for assumptions the run never read (named in the row of
    those that change nothing, without a rerun); ``reference``: the exact result (then shares are of the output's distance
    from it, and what no widening removes is the fp32 arithmetic's row)."""
    sites = list(run.sites.values()) + _psum_chains(run.trace)
    # The tiles that rounded a value (rows), and every narrow tile the kernel allocated, on chip or
    # its HBM output (widened together: a tile whose writes changed nothing may round a wider value).
    measured = sorted({s.tile for s in sites
                       if s.kind in ("narrowing", "accumulation") and s.format in NARROW and s.tile != "<input>"})
    narrow = frozenset(life.line for life in run.lives if life.format in NARROW and life.line != "<input>")
    rows: list[PrecisionRow] = []
    base = _flat(run.outputs)
    target = None
    if reference is not None:
        target = np.asarray(reference, dtype=np.float64).reshape(-1)
        if target.shape != base.shape:
            raise ValueError(f"reference: {target.size} elements; the run's outputs have {base.size}")
    # A tile the kernel cannot run widened (an fp8 operand of a double_row matmul, which takes fp8
    # only) is left narrow, and its row says why: the run with it widened stops.
    stops: dict[Any, str] = {}
    widened = rerun(widen=narrow) if narrow else None
    if widened is not None and not widened.completed:
        for tile in sorted(narrow):
            if not rerun(widen=frozenset({tile})).completed:
                stops[tile] = "widening it stops the run (the kernel's instructions take only its format there)"
        narrow = narrow - frozenset(stops)
        measured = [t for t in measured if t not in stops]
        widened = rerun(widen=narrow) if narrow else None
    wide = _flat(widened.outputs) if widened is not None else base
    if target is None:
        target = wide
    total, left = _distance(base, target), _distance(wide, target)
    share_of: dict[Any, tuple[float, float | None]] = {}
    for tile in measured:
        one = _distance(_flat(rerun(widen=frozenset({tile})).outputs), target)
        kept = _distance(_flat(rerun(widen=narrow - {tile}).outputs), target)
        share_of[tile] = (0.0, 0.0) if total == 0 else (max(0.0, (total - one) / total), max(0.0, (kept - left) / total))
    fp32 = [s for s in sites if s.format not in NARROW]
    rest = None
    if reference is not None and total > 0:
        rest = left / total  # what widening every narrow tile leaves: the fp32 arithmetic
        if len(fp32) == 1:  # one fp32 site: the rest is its share
            share_of[("fp32", fp32[0].where)] = (rest, None)
            rest = None
    for s in sites:
        share, alone = share_of.get(s.tile if s.format in NARROW else ("fp32", s.where), (None, None))
        lines = sorted(s.lines - {s.where})
        detail = s.detail or (f"into the tile allocated at {s.tile}" + (f"; also {', '.join(lines)}" if lines else ""))
        if s.tile in stops:
            detail += f"; {stops[s.tile]}"

        if share is not None and alone is not None and alone - share > 0.25:
            detail += (f"; widening it alone removes {share:.0%} (another narrow tile rounds its values again), "
                       f"by itself it causes {alone:.0%}")
        rows.append(PrecisionRow(s.where, s.kind, s.format, s.length, share, detail, alone))
    if rest is not None:
        where = ", ".join(sorted({s.where for s in fp32})) or "no recorded site"
        rows.append(PrecisionRow("<fp32 arithmetic>", "accumulation" if fp32 else "narrowing", "fp32", len(fp32), rest,
                                 f"what widening every narrow tile leaves: the fp32 arithmetic at {where} together"))
    # Largest share first, as documented; what a tile causes alone breaks ties (two roundings in a
    # row: widening one leaves the other, so each has a small share and a large ``alone``).
    rows.sort(key=lambda r: (r.share is None, -(r.share or 0.0), -(r.alone or 0.0)))
    base_bits = _bits(run.outputs)
    n = sum(b.size for b in base_bits)
    unchanged: list[str] = []
    for name, values in alternatives.items():
        for value in values:
            other = rerun(assume={name: value})
            if not other.completed:
                rows.append(PrecisionRow("<assumption>", "assumption", name, n, None, f"{name}={value}: the run stops"))
                continue
            changed = sum(int(np.count_nonzero(a != b)) for a, b in zip(base_bits, _bits(other.outputs)))
            if changed == 0:
                unchanged.append(f"{name}={value}")
                continue
            rows.append(PrecisionRow("<assumption>", "assumption", name, n, None,
                                     f"changing {name} to {value} changes {changed} of {n} output elements"))
    unread = unread or {}
    if unchanged or unread:  # one row for every alternative that changes nothing (a review lists dozens)
        text = f"change none of the {n} output elements"
        if unchanged:
            text += f": {', '.join(unchanged)}"
        if unread:
            text += f"{'; and' if unchanged else ':'} every alternative of the assumptions this run never read: " \
                    f"{', '.join(unread)}"
        count = len(unchanged) + sum(len(v) for v in unread.values())
        rows.append(PrecisionRow("<assumption>", "assumption", f"{count} alternatives", n, None, text))
    return rows
