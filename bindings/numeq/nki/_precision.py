"""Where a run loses precision (``Run.precision``): each narrowing (an instruction rounding the fp32
values it computed into a narrower destination), each accumulation (a PSUM matmul chain, an SBUF
tile accumulated into, ``acc = acc + part``), each activation (with its function model), and each
assumption the output depends on.

A narrowing or an accumulation into a narrow tile is ranked by its measured share of the output's
error: the kernel runs again with that tile allocated in fp32 (the switch: ``Context.widen`` holds
the allocation lines to widen), and the share is how much of the distance between the run's output
and the output of a run with every such tile widened that this one tile accounts for,
(E - E_widened) / E. PSUM chains and activations already compute in fp32: they are listed with
their format and length, no share (nothing narrower to widen). Assumptions are measured by running
each alternative: the number of output elements whose bits change.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

__all__ = ["NARROW", "PrecisionRow", "Site", "flow", "record_write", "record_issue"]

# Formats narrower than the fp32 every engine computes in (their tiles can be widened).
NARROW = frozenset({"bf16", "fp16", "tf32", "e4m3", "e4m3fn", "e5m2"})


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
    activation, assumption), ``format``, ``length``, ``share`` of the output's error (None where
    not measured) and ``detail``."""

    where: str
    kind: str
    format: str
    length: int
    share: float | None
    detail: str = ""

    def __str__(self) -> str:
        share = "-" if self.share is None else f"{self.share:.1%}"
        return f"{self.where}: {self.kind} {self.format} x{self.length}: share {share}; {self.detail}"


def record_write(ctx: Any, dst: Any, values: np.ndarray, bits: np.ndarray) -> None:
    """``_engine.write`` cast fp32 ``values`` into dst's ``bits``: remember how many changed (the
    instruction's issue classifies it)."""
    if dst.dtype.format not in NARROW:
        return
    v = np.asarray(values)
    if dst.dtype.format == "bf16" and v.dtype == np.float32:
        # bf16 keeps the high half of the fp32 pattern: a value changes iff its low half is not 0
        # (one pass; a NaN with payload bits there counts as rounded, which moves no value).
        changed = int(np.count_nonzero(np.ascontiguousarray(v).view(np.uint32) & np.uint32(0xFFFF)))
    else:
        from ._numerics import fp32_values

        back = fp32_values(bits, dst.dtype)
        v = v.astype(np.float32).reshape(back.shape)
        changed = int(np.count_nonzero(back != v))
        if changed and np.isnan(v).any():  # a NaN stays a NaN: not a rounding
            changed -= int(np.count_nonzero(np.isnan(back) & np.isnan(v)))
    if changed:
        ctx.rounded.append((dst, changed))


def record_issue(ctx: Any, name: str, where: str, dst: list, srcs: list, detail: dict) -> None:
    """Classify what the instruction just issued lost (``Context.issue``)."""
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
    if srcs and (detail.get("reduce") == "add" or (name == "tensor_reduce" and detail.get("op") == "add")):
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
        if ins.name != "nc_matmul":
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
        import json

        from .. import _core

        platform = json.loads(_core.core_platform_json(ctx.target.platform))
        models = ctx._function_models = {f["function"]: f for f in platform.get("functions", [])}
    from ._numerics import _CERTIFIED

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


def flow(run: Any, rerun: Callable[..., Any], alternatives: dict[str, list]) -> list[PrecisionRow]:
    """The precision-flow rows of ``run`` (largest share first; unmeasured rows after, assumptions
    last). ``rerun(widen=..., assume=...)`` runs the kernel again; ``alternatives``: assumption ->
    its other values."""
    sites = list(run.sites.values()) + _psum_chains(run.trace)
    widenable = sorted({s.tile for s in sites
                        if s.kind in ("narrowing", "accumulation") and s.format in NARROW and s.on_chip})
    rows: list[PrecisionRow] = []
    share_of: dict[str, float] = {}
    if widenable:
        base = _flat(run.outputs)
        wide = _flat(rerun(widen=frozenset(widenable)).outputs)
        total = _distance(base, wide)
        for tile in widenable:
            one = _flat(rerun(widen=frozenset({tile})).outputs)
            share_of[tile] = 0.0 if total == 0 else max(0.0, (total - _distance(one, wide)) / total)
    for s in sites:
        share = share_of.get(s.tile) if s.on_chip and s.kind != "activation" and s.format in NARROW else None
        lines = sorted(s.lines - {s.where})
        detail = s.detail or (f"into the tile allocated at {s.tile}" + (f"; also {', '.join(lines)}" if lines else ""))
        rows.append(PrecisionRow(s.where, s.kind, s.format, s.length, share, detail))
    rows.sort(key=lambda r: (r.share is None, -(r.share or 0.0)))
    base_bits = _bits(run.outputs)
    n = sum(b.size for b in base_bits)
    for name, values in alternatives.items():
        for value in values:
            other = rerun(assume={name: value})
            if not other.completed:
                rows.append(PrecisionRow("<assumption>", "assumption", name, n, None, f"{name}={value}: the run stops"))
                continue
            changed = sum(int(np.count_nonzero(a != b)) for a, b in zip(base_bits, _bits(other.outputs)))
            rows.append(PrecisionRow("<assumption>", "assumption", name, n, None,
                                     f"changing {name} to {value} changes {changed} of {n} output elements"))
    return rows
