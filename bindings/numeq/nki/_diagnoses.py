"""Diagnoses a failing kernel's own run gives (``numeq.compare(run, op, platform)``): whether its
exact math (``Run.exact()``) already fails (an algorithm mistake, not precision), and if not, which
of its narrow tiles, widened to fp32, makes the failure go away (precision the kernel chose to lose,
with the line), or that the kernel's formulation loses precision even in fp32 (cancellation).

Each diagnosis is an experiment on the kernel itself, not a model of a mistake numeq knows: the
kernel runs again on the same inputs with one tile (or every narrow tile) allocated in fp32
(``Run.rerun(widen=)``, the precision flow's one switch), and the same check judges the new output.
So it is right for any kernel, not only for the mistakes numeq models at the op level.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from .machine.precision import NARROW

__all__ = ["RunDiagnoses", "from_run", "rounded_like"]

# A diagnosis is reported when it removes at least this share of the failing elements (the op
# level's kDiagnosisThreshold, cases/include/numeq/cases/diagnosis.hpp).
THRESHOLD = 0.5


def _narrow_tiles(run: Any) -> list[Any]:
    """The on-chip narrow tiles that rounded a value (precision-flow sites), by allocation line."""
    seen: dict[str, Any] = {}
    for s in run.sites.values():
        if s.format in NARROW and s.on_chip and s.kind in ("narrowing", "accumulation") and s.tile != "<input>":
            if s.tile not in seen or s.kind == "accumulation":
                seen[s.tile] = s
    return list(seen.values())


def _describe(site: Any) -> str:
    if site.kind == "accumulation":
        return (f"the {site.format} tile allocated at {site.tile}, a running sum of {site.length} terms added at "
                f"{site.where}")
    return f"the {site.format} tile allocated at {site.tile}, written at {site.where}"


def _formulation(run: Any, widen: frozenset) -> tuple[str, str]:
    """What the kernel's formulation loses, from a rerun (narrow tiles widened) that watches every
    add, subtract and write, and the exact dataflow watched the same way: ("overflow", the first
    line that stores Inf the exact math does not) or ("cancellation", the add / subtract line whose
    results came out smallest against its operands); ("", "") when neither shows."""
    watched = run.rerun(widen=widen, watch=True).watched
    exact_overflow = run.exact_watched()["overflow"]
    for line, count in watched["overflow"].items():
        if line not in exact_overflow:
            return "overflow", (f"; the first overflow is at {line}: {count} value(s) there are Inf in the run, "
                                "finite in the kernel's exact math")
    lines = watched["cancellation"]
    if lines:
        line, factor = max(lines.items(), key=lambda kv: kv[1])
        if factor >= 16:
            return "cancellation", (f"; it cancels most at {line}: results up to {factor:.3g} times smaller than "
                                    f"its operands, about {np.log2(factor):.0f} of fp32's 24 significant bits "
                                    "lost there")
    return "", ""


def rounded_like(exact: Any, outputs: Any) -> Any:
    """``Run.exact()``'s float64 outputs rounded once, to nearest even, into the dtypes of the run's
    own outputs (the structure of both the same): the kernel's math on a platform that loses only
    the output format's rounding."""
    if isinstance(outputs, np.ndarray):
        return np.asarray(exact).astype(outputs.dtype) if outputs.dtype.kind == "f" or outputs.dtype.kind == "V" \
            else np.asarray(exact)
    if isinstance(outputs, (list, tuple)):
        return type(outputs)(rounded_like(e, o) for e, o in zip(exact, outputs))
    if isinstance(outputs, dict):
        return {k: rounded_like(exact[k], o) for k, o in outputs.items()}
    return exact


@dataclass
class RunDiagnoses:
    """What the kernel's own run says about a failing check: ``found`` (diagnoses, strongest first)
    and ``exact_fails``: how many elements the kernel's exact math (``Run.exact()`` rounded once into
    the output's format) fails by the same check (None: not measured: the exact dataflow could not
    be followed)."""

    found: list
    exact_fails: int | None
    failing: int
    narrow_tiles: int = 0  # the run's on-chip tiles narrower than fp32 that rounded a value


def from_run(run: Any, judge: Callable[..., dict], diagnosis: Callable[..., Any]) -> RunDiagnoses:
    """The run's diagnoses of a failing check. ``judge(outputs, worst)``: the check of one output
    (its ``failures`` and ``worst`` elements); ``diagnosis(kind, explains, detail, evidence)`` makes
    one ``numeq.Diagnosis``.

    First the split no rerun of the hardware can make: the kernel's exact math (``Run.exact()``),
    judged by the same check. Where it fails, the mistake is in what the kernel computes
    (``kernel_arithmetic``: a mask, a formula, a scale, a missing tile), whatever its precision.
    Where it passes, precision was lost: the kernel runs again once per narrow tile and once with
    all widened, and the tile whose widening removes the failure names itself with its line
    (``narrow_running_sum`` / ``narrow_tile`` / ``narrow_tiles``); failing even with every tile in
    fp32, the kernel's formulation loses what the platform need not (``kernel_cancellation``)."""
    if run.rerun is None or not run.completed:
        return RunDiagnoses([], None, 0)
    base = int(judge(run.outputs)["failures"])
    if base == 0:
        return RunDiagnoses([], None, 0)
    tiles = _narrow_tiles(run)
    found = []
    try:
        exact = judge(rounded_like(run.exact(), run.outputs), 3)
    except (ValueError, NotImplementedError):  # a bitcast, a run that stops without its roundings
        exact = None
    exact_fails = None if exact is None else int(exact["failures"])
    if exact_fails is not None and exact_fails / base >= THRESHOLD:
        worst = "; ".join(f"[{','.join(str(i) for i in w['index'])}] the kernel's exact math gives {w['got']:.7g}, "
                          f"the op's exact result is {w['exact']:.7g}" for w in exact["worst"][:2])
        found.append(diagnosis(
            "kernel_arithmetic", exact_fails / base,
            f"the kernel's own math, with no rounding anywhere (Run.exact(), rounded once into its output format), "
            f"fails on {exact_fails} of the {base} elements: what it computes differs from the op (a mask, an index, "
            f"a formula, a missing tile or a scale), whatever its precision ({worst})",
            "exact: the kernel's dataflow on the same inputs without the hardware's roundings, judged by the "
            f"same check ({base} -> {exact_fails} failing)"))
        return RunDiagnoses(found, exact_fails, base, len(tiles))
    seen: dict[frozenset, int] = {}

    def left_with(widen: frozenset) -> int:  # each widening run once (one tile is also "all of them")
        if widen not in seen:
            seen[widen] = int(judge(run.rerun(widen=widen).outputs)["failures"])
        return seen[widen]

    for site in tiles:
        left = left_with(frozenset({site.tile}))
        share = (base - left) / base
        if share >= THRESHOLD:
            found.append(diagnosis(
                "narrow_tile" if site.kind != "accumulation" else "narrow_running_sum", share,
                f"{_describe(site)}: in fp32 it makes {base - left} of the {base} failing elements pass",
                f"rerun: the kernel again on the same inputs with that tile in fp32, judged by the same check "
                f"({base} -> {left} failing)"))
    everything = frozenset(s.tile for s in tiles)
    left = left_with(everything) if everything else base
    if everything and not found and (base - left) / base >= THRESHOLD:
        found.append(diagnosis(
            "narrow_tiles", (base - left) / base,
            f"no one narrow tile explains the failure, all {len(tiles)} together do: in fp32 "
            f"({', '.join(sorted(everything))}) they make {base - left} of the {base} failing elements pass",
            f"rerun: the kernel with every narrow tile in fp32, judged by the same check ({base} -> {left} failing)"))
    if left / base >= THRESHOLD:
        if exact_fails is None:
            widened = f"with its {len(tiles)} narrow tile(s) in fp32" if tiles else "(every tile of it is fp32)"
            found.append(diagnosis(
                "kernel_arithmetic", left / base,
                f"the kernel {widened} still fails on {left} of the {base} elements: its arithmetic differs from "
                "the op's (a mask, an index, a formula, a missing tile or a scale), not only its precision",
                "rerun: the kernel with every narrow tile in fp32, judged by the same check"
                if tiles else "the run: no narrow tile to widen"))
        else:
            widened = f"with its {len(tiles)} narrow tile(s) in fp32" if tiles else "in fp32 throughout (no narrow tile)"
            kind, where = _formulation(run, everything)
            if kind == "overflow":
                found.append(diagnosis(
                    "kernel_overflow", left / base,
                    f"the kernel's own math is the op's (Run.exact() passes the check), yet {widened} it fails on "
                    f"{left} of the {base} elements: an intermediate leaves its format's range where the exact math "
                    f"does not (exp of scores with no maximum subtracted, squares of large values){where}",
                    f"exact: the kernel's dataflow without roundings passes ({exact_fails} failing); watch: the "
                    "rerun's and the exact dataflow's Inf values, line by line"))
            else:
                found.append(diagnosis(
                    "kernel_cancellation", left / base,
                    f"the kernel's own math is the op's (Run.exact() passes the check), yet {widened} it fails on "
                    f"{left} of the {base} elements: its formulation loses precision the platform need not lose (a "
                    f"difference of nearly equal values: a one-pass variance E[x^2] - E[x]^2, a sum of large terms "
                    f"that cancel), not a narrow tile{where}",
                    f"exact: the kernel's dataflow without roundings passes ({exact_fails} failing); rerun: with "
                    f"every narrow tile in fp32 it fails ({base} -> {left} failing); watch: each add and subtract's "
                    "cancellation measured in that rerun"))
    found.sort(key=lambda d: -d.explains)
    return RunDiagnoses(found, exact_fails, base, len(tiles))
