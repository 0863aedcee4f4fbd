"""Diagnoses a failing kernel's own run gives (``numeq.compare(run, op, platform)``): which of its
narrow tiles, widened to fp32, makes the failure go away (precision the kernel chose to lose, with
the line), or that widening every one of them leaves it (the kernel's arithmetic differs from the
op's: an algorithm mistake, not precision).

Each diagnosis is an experiment on the kernel itself, not a model of a mistake numeq knows: the
kernel runs again on the same inputs with one tile (or every narrow tile) allocated in fp32
(``Run.rerun(widen=)``, the precision flow's one switch), and the same check judges the new output.
So it is right for any kernel, not only for the mistakes numeq models at the op level.
"""

from __future__ import annotations

from typing import Any, Callable

from .machine.precision import NARROW

__all__ = ["from_run"]

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


def from_run(run: Any, failures: Callable[[Any], int], diagnosis: Callable[..., Any]) -> list:
    """The run's diagnoses of a failing check, strongest first. ``failures(outputs)``: how many
    elements of an output the check fails; ``diagnosis(kind, explains, detail, evidence)`` makes
    one ``numeq.Diagnosis``. Runs the kernel again once per narrow tile and once with all widened."""
    if run.rerun is None or not run.completed:
        return []
    base = failures(run.outputs)
    if base == 0:
        return []
    tiles = _narrow_tiles(run)
    seen: dict[frozenset, int] = {}

    def left_with(widen: frozenset) -> int:  # each widening run once (one tile is also "all of them")
        if widen not in seen:
            seen[widen] = failures(run.rerun(widen=widen).outputs)
        return seen[widen]

    found = []
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
        widened = f"with its {len(tiles)} narrow tile(s) in fp32" if tiles else "(it keeps every tile in fp32)"
        found.append(diagnosis(
            "kernel_arithmetic", left / base,
            f"the kernel {widened} still fails on {left} of the {base} elements: its arithmetic differs from the "
            "op's (a mask, an index, a formula, a missing tile or a scale), not only its precision",
            "rerun: the kernel with every narrow tile in fp32, judged by the same check"
            if tiles else "the run: no narrow tile to widen"))
    found.sort(key=lambda d: -d.explains)
    return found
