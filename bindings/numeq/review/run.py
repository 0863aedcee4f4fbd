"""One port review: the manifest's outputs, tiling and performance evidence through the three
checks, their findings gathered into the rubric.

Example::

    review = numeq.review.review("examples/reviews/correct-port/manifest.toml")
    print(review.markdown())
    review.write("review-out")          # review.md and review.html
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import correctness as _correctness
from . import performance as _performance
from . import tiling as _tiling
from .findings import CRITERIA, ReviewFinding, criterion_status
from .manifest import Manifest, ManifestError, load
from ..nki.machine.targets import Target, target

__all__ = ["Review", "review"]


@dataclass
class Review:
    """The review of one port: the ``manifest``, the ``target`` table, the ``correctness`` part
    (``numeq.review.correctness.Correctness``), ``memory`` (SBUF/PSUM use per buffer) and
    ``performance`` (the numbers behind the performance findings; None without evidence), and
    every ``findings``. ``rubric()`` is the table a reviewer signs; ``passed`` when no criterion
    fails."""

    manifest: Manifest
    target: Target
    correctness: _correctness.Correctness
    memory: dict[str, Any] | None
    performance: dict[str, Any] | None
    findings: list[ReviewFinding] = field(default_factory=list)
    run: Any = None  # the kernel's numeq.nki.Run, for a review of the kernel itself (review_kernel)
    precision: list = field(default_factory=list)  # its precision flow (numeq.nki Run.precision rows)
    beside_trace: list = field(default_factory=list)  # the performance evidence beside the trace's estimate

    def rubric(self) -> list[dict[str, str]]:
        """One row per criterion: ``criterion``, ``asks``, ``result`` ("pass", "fail" or "not
        assessed"), ``finding`` (the deciding findings in words) and ``evidence``."""
        rows = []
        for name, asks in CRITERIA.items():
            mine = [f for f in self.findings if f.criterion == name]
            result = criterion_status(self.findings, name)
            deciding = [f for f in mine if f.status == "fail"] or [f for f in mine if f.status in ("pass", "warn")]
            warn = [f for f in mine if f.status == "warn"]
            text = "; ".join(f.message for f in deciding[:3])
            if len(deciding) > 3:
                text += f"; and {len(deciding) - 3} more"
            if result == "pass" and warn:
                text += f" ({len(warn)} warning{'s' if len(warn) > 1 else ''}: see above)"
            if result == "not assessed":
                text = "; ".join(f.message for f in mine) or "no evidence in the manifest"
            parts: list[str] = []
            for f in deciding:
                for e in f.evidence.split("; "):
                    if e and e not in parts:
                        parts.append(e)
            evidence = "; ".join(parts)
            rows.append({"criterion": name, "asks": asks, "result": result, "finding": text, "evidence": evidence})
        return rows

    @property
    def passed(self) -> bool:
        return all(r["result"] != "fail" for r in self.rubric())

    def markdown(self) -> str:
        from .report import markdown
        return markdown(self)

    def html(self) -> str:
        from .report import html
        return html(self)

    def write(self, out: str | os.PathLike) -> dict[str, Path | None]:
        """Write ``review.md`` and ``review.html`` into the folder ``out`` (created if missing). The
        HTML page draws its plots with matplotlib (the ``reports`` extra): without it only the
        Markdown is written, and ``paths["html"]`` is None."""
        folder = Path(out)
        folder.mkdir(parents=True, exist_ok=True)
        paths: dict[str, Path | None] = {"md": folder / "review.md", "html": folder / "review.html"}
        paths["md"].write_text(self.markdown(), encoding="utf-8")
        try:
            page = self.html()
        except ImportError:  # matplotlib missing: the Markdown alone (the CLI says how to get the page)
            paths["html"] = None
            return paths
        paths["html"].write_text(page, encoding="utf-8")
        return paths


def review(manifest: str | os.PathLike | Manifest, *, allow_outside: bool = False) -> Review:
    """Review the port ``manifest`` describes (a path to its TOML, or a loaded ``Manifest``). The
    files a manifest names must lie in its folder (or below) unless ``allow_outside`` (a manifest
    comes from a port's author). A ``[kernel]`` is the author's Python code: the review runs it."""
    m = manifest if isinstance(manifest, Manifest) else load(manifest, allow_outside=allow_outside)
    if m.kernel is not None:  # the kernel itself: numeq runs it (review.kernel)
        from .kernel import reviewed, run_manifest_kernel

        try:
            return reviewed(m, run_manifest_kernel(m))
        except ValueError as e:
            if isinstance(e, ManifestError):
                raise
            raise ManifestError(f"{m.path}:{m.kernel.line}: kernel: {e}") from None
    t = target(m.target)
    c = _correctness.check(m)
    findings, memory, performance = described_parts(m, t)
    return Review(m, t, c, memory, performance, list(c.findings) + findings)


def described_parts(m: Manifest, t: Target) -> tuple[list[ReviewFinding], dict[str, Any] | None, dict[str, Any] | None]:
    """The parts of a review the manifest describes: its [tiling] against the target's rules (the
    findings and the memory use) and its [performance] evidence (the findings and the numbers)."""
    findings: list[ReviewFinding] = []
    memory = None
    if m.tiling is not None:
        findings += _tiling.check(m.tiling, t)
        memory = _tiling.memory_use(m.tiling, t)
    performance = None
    if m.performance is not None:
        try:
            perf_findings, performance = _performance.assess(m.performance, t, dtype=m.in_fmt, base_dir=m.base)
        except ValueError as e:  # an unreadable profile: the manifest's evidence is bad input
            raise ManifestError(f"{m.path}:{m.performance.line}: performance: {e}") from None
        findings += perf_findings
    return findings, memory, performance
