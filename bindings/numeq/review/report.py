"""A port review as Markdown and as one self-contained HTML page.

Both render the same parts in the same order: the verdict at a glance, (1) correctness, (2) tiling
and memory, (3) performance, (4) the rubric table, then the target values the rules used with
their evidence. The HTML adds plots drawn with matplotlib's SVG backend and inlined (no
JavaScript, no network, no other file; the same review gives the same bytes), with the page style
and SVG handling of the tolerance report (``numeq.report_html``).
"""

from __future__ import annotations

import html as _html_text
import math
import textwrap
from typing import Any

import numpy as np

from .. import __version__
from ..report_html import _CSS, _esc, _figure
from .findings import ReviewFinding
from .model import FORMAT_BYTES as _BYTES

__all__ = ["html", "markdown"]

_PARTS = (("correctness", "1. Correctness", ("preserved_behaviour", "numerical_standard", "assumptions")),
          ("tiling", "2. Tiling and memory", ("tiling_limits", "memory_hierarchy")),
          ("performance", "3. Performance", ("performance_claim",)))
_OUTPUTS = {"gpu": "GPU kernel", "nki": "NKI kernel", "simulator": "NKI simulator"}
_MARK = {"pass": "PASS", "fail": "FAIL", "warn": "WARN", "info": "INFO", "not assessed": "NOT ASSESSED"}


def _md_text(x: Any) -> str:
    """Text for Markdown outside code: HTML's special characters escaped (Markdown passes raw HTML
    through, and names and messages come from the port's author: a tensor named ``<script>`` stays
    text)."""
    return _html_text.escape(str(x), quote=False)


def _md_cell(x: Any) -> str:
    return _md_text(x).replace("|", "\\|").replace("\n", " ")


def _md_table(headers: list[str], rows: list[list[Any]]) -> str:
    out = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    out += ["| " + " | ".join(_md_cell(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def _num(x: Any, digits: int = 3) -> str:
    if x is None:
        return "-"
    if isinstance(x, bool):
        return str(x)
    if isinstance(x, (int, np.integer)):
        return str(int(x))
    if isinstance(x, (float, np.floating)):
        x = float(x)
        if math.isnan(x) or math.isinf(x):
            return str(x)
        return f"{x:.{digits}g}"
    return str(x)


def _findings(review: Any, criteria: tuple[str, ...]) -> list[ReviewFinding]:
    return [f for f in review.findings if f.criterion in criteria]


def _verdict_rows(review: Any) -> list[list[Any]]:
    c = review.correctness
    rows = []
    for name, v in c.verdicts.items():
        rows.append([_OUTPUTS[name], c.platforms[name], v.tier, v.explained_by or "-", f"{v.bit_exact} / {v.elements}",
                     v.failures, _num(v.worst_error_over_bound), "pass" if v.passed else "fail"])
    return rows


_VERDICT_HEADERS = ["output", "judged against", "tier", "explained by", "bit-exact elements", "failures",
                    "worst error / bound", "result"]


def _head(review: Any) -> list[tuple[str, str]]:
    m = review.manifest
    # A kernel reviewed from Python (review_kernel, numeq review FILE.py::KERNEL) has no manifest file.
    named = [("manifest", m.path.name)] if m.path.suffix == ".toml" else []
    if m.kernel is not None:
        named.append(("kernel", f"{m.kernel.file.name}::{m.kernel.function}"))
    return named + [("operation", review.correctness.signature),
            ("GPU platform", m.gpu_platform), ("Trainium platform (kernel's plan)", review.correctness.platforms.get(
                "nki", m.trainium_platform)),
            ("target", f"{review.target.name} ({review.target.core})"),
            ("accept", f"{m.accept}, failure probability {m.failure_probability:g}"),
            ("numeq version", __version__)]


def _glance(review: Any) -> str:
    rubric = review.rubric()
    failed = [r["criterion"] for r in rubric if r["result"] == "fail"]
    assessed = [r for r in rubric if r["result"] != "not assessed"]
    if failed:
        return (f"FAIL: {len(failed)} of {len(assessed)} assessed criteria fail "
                f"({', '.join(failed)}).")
    return f"PASS: all {len(assessed)} assessed criteria pass" + (
        f"; {len(rubric) - len(assessed)} not assessed." if len(assessed) < len(rubric) else ".")


def _perf_rows(perf: dict[str, Any] | None) -> list[list[Any]]:
    """The performance numbers as (quantity, value) rows: every scalar of the assessment's dict,
    nested dicts flattened with dotted names, arrays summarised by their length. A profile's fields
    numeq does not use (its summary's ``extra``) stay out: a report copies no file's contents
    beyond the fields it judges by."""
    rows: list[list[Any]] = []

    def walk(prefix: str, d: Any) -> None:
        if isinstance(d, dict):
            for k, v in d.items():
                if k == "extra" and prefix.endswith(".summary"):
                    continue
                walk(f"{prefix}.{k}" if prefix else str(k), v)
        elif isinstance(d, (list, tuple, np.ndarray)):
            if len(d) <= 4 and all(isinstance(x, (int, float, str, np.floating, np.integer)) for x in d):
                rows.append([prefix, ", ".join(_num(x) for x in d)])
            else:
                rows.append([prefix, f"{len(d)} values"])
        else:
            rows.append([prefix, _num(d)])

    walk("", perf or {})
    return rows


def _assessed_md(review: Any, part: tuple, assessed: bool, after: list[str]) -> list[str]:
    """Markdown of a part the manifest may leave out ([tiling], [performance]): its heading, then its
    findings as a table (and ``after``), or that it was not assessed."""
    key, title, criteria = part
    out = [f"## {title}", ""]
    if not assessed:
        return out + [f"Not assessed: the manifest has no [{key}].", ""]
    rows = [[_MARK[f.status], f.rule, f.subject, f.message, f.evidence] for f in _findings(review, criteria)]
    return out + [_md_table(["result", "rule", "subject", "finding", "evidence"], rows), ""] + after


_PRECISION_HEADERS = ["where", "kind", "format", "length", "share", "alone", "detail"]
_PRECISION_TEXT = ("Where the kernel loses precision, by line, ranked by the share of the output's error (its "
                   "distance from the exact result) each accounts for, measured: share, the kernel run again with "
                   "that tile in fp32; alone, with every other narrow tile in fp32. Assumptions with the output "
                   "elements each alternative changes.")


_BESIDE_HEADERS = ["quantity", "the trace's estimate", "the evidence", "evidence / estimate", "evidence from"]
_BESIDE_TEXT = ("The performance evidence beside the kernel's trace: its lower bound on run time (the busiest "
                "engine at documented rates) and each engine's estimated busy time (an estimate from the "
                "per-instruction costs AWS documents).")


def _percent(x: float | None) -> str:
    return "-" if x is None else f"{x:.1%}"


def _precision_rows(review: Any) -> list[list]:
    return [[r.where, r.kind, r.format, r.length, _percent(r.share), _percent(r.alone), r.detail]
            for r in review.precision]


def _wrapped(text: str, width: int = 100) -> str:
    """``text`` with each line past ``width`` broken at spaces, continuations indented (a code
    block in Markdown does not wrap: a wide line runs off the page)."""
    out: list[str] = []
    for line in text.splitlines():
        out += textwrap.wrap(line, width, subsequent_indent="    ", break_long_words=False,
                             break_on_hyphens=False) or [line]
    return "\n".join(out)


_SCHEDULE_TEXT = ("The trace's dependency graph list-scheduled over the engines and DMA engines (Run.schedule()): "
                  "the predicted time, each engine's active share, and the kernel lines on the critical path. "
                  "Clocks and DMA rates are documented; the DMA fixed cost, the HBM share per core and the "
                  "semaphore latency are named assumptions (docs/nki.md, \"The schedule\").")


def _kernel_md(review: Any) -> list[str]:
    """The sections a review of the kernel itself adds: its trace summed up, its precision flow."""
    if review.run is None:
        return []
    out = ["## The kernel's trace (numeq ran it)", "", "```", _wrapped(str(review.run.summary())), "```", ""]
    if review.run.completed:
        out += ["## The kernel's timeline (numeq's schedule of its trace)", "", _SCHEDULE_TEXT, "", "```",
                _wrapped(str(review.run.schedule())), "```", ""]
    if review.precision:
        out += ["## Precision flow", "", _PRECISION_TEXT, ""]
        out += [_md_table(_PRECISION_HEADERS, _precision_rows(review)), ""]
    return out


def markdown(review: Any) -> str:
    """The review as Markdown."""
    m = review.manifest
    out = [f"# Port review: {_md_text(m.name)}", ""]
    if m.description:
        out += [_md_text(m.description), ""]
    out += [_md_table(["", ""], [[k, v] for k, v in _head(review)]), "", f"**Verdict: {_glance(review)}**", ""]
    c = review.correctness
    out += ["## 1. Correctness", "", f"Kernel plan: `{c.plan}`", ""]
    out += [f"- {_md_text(n)}" for n in c.notes] + [""]
    out += [_md_table(_VERDICT_HEADERS, _verdict_rows(review)), ""]
    for f in _findings(review, _PARTS[0][2]):
        out.append(f"- **{_MARK[f.status]}** ({f.criterion}, {_md_text(f.subject)}): {_md_text(f.message)}")
    out.append("")
    memory = [_memory_md(review.memory), ""] if m.tiling is not None and review.memory else []
    out += _assessed_md(review, _PARTS[1], m.tiling is not None or review.run is not None, memory)
    out += _kernel_md(review)
    beside = [_BESIDE_TEXT, "", _md_table(_BESIDE_HEADERS, review.beside_trace), ""] if review.beside_trace else []
    out += _assessed_md(review, _PARTS[2], m.performance is not None, beside)
    out += ["## 4. Rubric", ""]
    out += [_md_table(["criterion", "result", "finding", "evidence"],
                      [[r["criterion"], _MARK[r["result"]], r["finding"], r["evidence"]] for r in review.rubric()]), ""]
    out += [f"## Target {review.target.name}: the values the rules used", ""]
    out += [_md_table(["value", "", "unit", "meaning", "evidence", "source"],
                      [[r["name"], _num(r["value"], 4), r["unit"], r["meaning"], r["evidence"], r["source"]]
                       for r in review.target.rows()]), ""]
    return "\n".join(out)


def _memory_md(mem: dict[str, Any]) -> str:
    rows = []
    for where in ("sbuf", "psum"):
        for name, size in mem.get(where, []):
            rows.append([where.upper(), name, size])
    text = _md_table(["memory", "buffer", "bytes per partition (all copies)"], rows)
    caps = [f"{k}: {_num(v)}" for k, v in mem.items() if k not in ("sbuf", "psum")]
    return text + ("\n\n" + "; ".join(caps) if caps else "")


# --- HTML -----------------------------------------------------------------------------------------

_EXTRA_CSS = """
.pass { color: #060; font-weight: bold; } .fail { color: #b00; font-weight: bold; }
.warn { color: #a60; font-weight: bold; } .info { color: #333; } .na { color: #666; font-style: italic; }
td.finding { min-width: 24em; max-width: 60em; }
pre { white-space: pre-wrap; overflow-wrap: anywhere; max-width: 100%; }
"""


def _h_table(headers: list[str], rows: list[list[Any]], caption: str = "") -> str:
    head = "".join(f"<th>{_esc(h)}</th>" for h in headers)
    body = ""
    for r in rows:
        cells = []
        for c in r:
            if isinstance(c, tuple):  # (text, css class)
                cells.append(f'<td class="{c[1]}">{_esc(c[0])}</td>')
            else:
                cells.append(f"<td>{_esc(c)}</td>")
        body += "<tr>" + "".join(cells) + "</tr>"
    cap = f"<caption>{_esc(caption)}</caption>" if caption else ""
    return f"<table>{cap}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _status_cell(status: str) -> tuple[str, str]:
    return (_MARK[status], {"not assessed": "na"}.get(status, status))


def _findings_html(findings: list[ReviewFinding]) -> str:
    if not findings:
        return "<p>No findings.</p>"
    rows = [[_status_cell(f.status), f.rule, f.subject, (f.message, "finding"), f.evidence] for f in findings]
    return _h_table(["result", "rule", "subject", "finding", "evidence"], rows)


def _error_plot(review: Any) -> str:
    """Per output, |output - exact| / bound over the output matrix: a bug shows as a tile."""
    from matplotlib.figure import Figure

    errors = review.correctness.errors
    if not errors:
        return ""
    fig = Figure(figsize=(3.6 * len(errors), 3.0))
    axes = fig.subplots(1, len(errors), squeeze=False).ravel()
    for ax, (name, r) in zip(axes, errors.items()):
        r2 = np.asarray(r, dtype=np.float64)
        r2 = r2.reshape(-1, r2.shape[-1]) if r2.ndim >= 2 else r2.reshape(1, -1)
        shown = np.log10(np.clip(np.where(np.isfinite(r2), r2, 1e6), 1e-3, 1e6))
        im = ax.imshow(shown, aspect="auto", cmap="viridis", vmin=-3, vmax=6, interpolation="nearest")
        ax.set_title(f"{_OUTPUTS[name]}: log10(error / bound)")
        ax.set_xlabel("column")
        ax.set_ylabel("row")
        bad = int((r2 > 1).sum())
        ax.text(0.02, 0.02, f"{bad} above 1", transform=ax.transAxes, color="white", fontsize=7)
    fig.colorbar(im, ax=list(axes), shrink=0.8)
    return _figure(fig, "Each element's error against the exact result divided by its probabilistic bound "
                        "(log10; above 0 = beyond the bound). A kernel bug shows as a block of output tiles; "
                        "a correct kernel stays below 0 everywhere.", "error over bound per output element")


def _memory_plot(review: Any) -> str:
    """SBUF in KiB per partition against its capacity; PSUM in banks (every copy of a buffer takes
    whole banks of 2 KiB: a matmul writes one bank) against the 8 a partition has."""
    from matplotlib.figure import Figure

    mem = review.memory
    if not mem:
        return ""
    t = review.target
    bank = t["psum_bank_bytes"]
    fig = Figure(figsize=(7.2, 2.6))
    axes = fig.subplots(1, 2).ravel()
    psum_banks = {b.name: -(-b.bytes_per_partition // int(bank)) * b.bufs for b in review.manifest.tiling.buffers
                  if b.memory == "psum" and b.dtype in _BYTES and b.partition_dim < len(b.shape)}
    panels = (("sbuf", [(n, v / 1024) for n, v in mem.get("sbuf", [])], t["sbuf_partition_bytes"] / 1024,
               "KiB per partition"),
              ("psum", [(n, psum_banks.get(n, 0)) for n, _ in mem.get("psum", [])], t["psum_banks"],
               "PSUM banks per partition (2 KiB each)"))
    for ax, (where, items, cap, unit) in zip(axes, panels):
        left = 0.0
        for i, (name, size) in enumerate(items):
            ax.barh([0], [size], left=[left], color=f"C{i % 10}", edgecolor="black", linewidth=0.4)
            if size / max(cap, 1) > 0.06:
                ax.text(left + size / 2, 0, name, ha="center", va="center", fontsize=6)
            left += size
        ax.axvline(cap, color="red", linewidth=1.2)
        ax.text(cap, 0.45, " capacity", color="red", fontsize=6, va="center")
        ax.set_yticks([])
        ax.set_xlabel(unit)
        ax.set_title(f"{where.upper()}: {left:.3g} of {cap:.3g} used" + (" (over-subscribed)" if left > cap else ""))
        ax.set_xlim(0, max(left, cap) * 1.1 or 1)
    fig.subplots_adjust(left=0.04, right=0.98, bottom=0.22, top=0.85, wspace=0.15)
    return _figure(fig, "Per-partition memory of every buffer (all copies) against the target's capacity (red): SBUF "
                        "in KiB, PSUM in whole banks.", "SBUF and PSUM use per partition")


def _live_plot(review: Any) -> str:
    """The kernel's live SBUF and PSUM per partition over its instructions (numeq ran it), each
    against the target's capacity, and its place on the target's roofline."""
    from matplotlib.figure import Figure

    s = review.run.summary()
    fig = Figure(figsize=(7.2, 2.6))
    axes = fig.subplots(1, 3).ravel()
    for ax, name in zip(axes, ("sbuf", "psum")):
        use = s.memory[name]
        steps = [0] + [step for step, _ in use["curve"]] + [len(review.run.trace)]
        live = [0] + [v for _, v in use["curve"]] + [0]
        ax.step(steps, [v / 1024 for v in live], where="post", color="C0", linewidth=0.9)
        ax.axhline(use["limit"] / 1024, color="red", linewidth=1.2)
        ax.set_ylim(0, max(use["limit"], use["peak"]) / 1024 * 1.1)
        ax.set_xlabel("instruction")
        ax.set_title(f"{name.upper()}: peak {use['peak'] / 1024:.3g} of {use['limit'] / 1024:.3g} KiB")
    ax = axes[2]
    ridge = s.ridge
    xs = [ridge / 100, ridge, ridge * 100]
    ax.loglog(xs, [min(s.peak_flops, x * s.hbm_bytes_per_s) for x in xs], color="black", linewidth=1)
    if s.flops and s.intensity != float("inf"):
        ax.plot([s.intensity], [s.attainable_flops], "o", color="C3")
        ax.annotate(s.regime, (s.intensity, s.attainable_flops), fontsize=6, xytext=(4, -8), textcoords="offset points")
    ax.set_xlabel("FLOP per HBM byte")
    ax.set_title("roofline (estimate)")
    fig.subplots_adjust(left=0.06, right=0.98, bottom=0.2, top=0.85, wspace=0.35)
    return _figure(fig, "Live SBUF and PSUM per partition (KiB) over the kernel's instructions, a buffer live from its "
                        "allocation to its last use, against the target's capacity (red); the kernel on the target's "
                        "roofline (its Tensor FLOPs over its HBM bytes; an estimate).", "The kernel's memory and roofline")


def _timeline_plot(review: Any) -> str:
    """Each engine's busy time over the predicted run (Run.schedule()), one row per engine."""
    from matplotlib.figure import Figure

    s = review.run.schedule()
    if s.time_s <= 0:
        return ""
    busy: dict[str, list[tuple[float, float]]] = {}
    for i, engine in enumerate(s.engine):
        busy.setdefault(engine, []).append((s.start[i], s.finish[i]))
    engines = sorted(busy)
    fig = Figure(figsize=(7.5, 0.5 + 0.45 * len(engines)))
    ax = fig.subplots()
    for row, engine in enumerate(engines):
        merged: list[list[float]] = []
        for a, b in sorted(busy[engine]):  # the union, so that a long kernel draws few bars
            if merged and a <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], b)
            else:
                merged.append([a, b])
        ax.broken_barh([(a * 1e6, (b - a) * 1e6) for a, b in merged], (row - 0.35, 0.7))
    ax.set_yticks(range(len(engines)), [f"{e} {s.active.get(e, 0):.0%}" for e in engines])
    ax.set_xlabel("predicted time (us)")
    ax.set_xlim(0, s.time_s * 1e6)
    return _figure(fig, f"Each engine's busy time in numeq's schedule of the trace (predicted {s.time_s * 1e6:.3g} us, "
                        f"bound by {s.bound_by}).", "predicted engine timeline")


def _performance_plots(review: Any) -> str:
    """The timings (every sample, the kept ones and the medians), the bootstrap distribution of the
    speedup with its interval and the claim, and each profile on the target's roofline."""
    from matplotlib.figure import Figure

    perf = review.performance or {}
    parts = []
    sp = (perf.get("timings") or {}).get("speedup")
    if sp and sp.get("baseline") and sp.get("candidate"):
        fig = Figure(figsize=(7.2, 2.8))
        ax1, ax2 = fig.subplots(1, 2)
        unit = perf["timings"].get("unit", "")
        for i, series in enumerate(("baseline", "candidate")):
            st = sp[series]
            samples = np.asarray(st.get("samples", []), dtype=float)
            kept = np.asarray(st.get("kept", []), dtype=float)
            jitter = np.linspace(-0.15, 0.15, max(1, samples.size))
            out = ~np.isin(samples, kept)
            ax1.scatter(i + jitter[~out], samples[~out], s=6, color=f"C{i}", label=f"{series} (kept)")
            ax1.scatter(i + jitter[out], samples[out], s=14, marker="x", color="red",
                        label="outliers (1.5 IQR)" if i == 0 else None)
            ax1.hlines(st.get("median_kept"), i - 0.3, i + 0.3, color="black", linewidth=1.2)
        ax1.set_xticks([0, 1], [perf["timings"].get("baseline_label", "baseline")[:28],
                                perf["timings"].get("candidate_label", "candidate")[:28]], fontsize=6)
        ax1.set_ylabel(f"time ({unit})")
        ax1.set_yscale("log")
        ax1.set_title("Repeated timings (median of the kept: black)")
        ax1.legend(fontsize=6)
        hist = sp.get("bootstrap_histogram") or {}
        if hist.get("counts"):
            edges = np.asarray(hist["edges"], dtype=float)
            ax2.stairs(np.asarray(hist["counts"], dtype=float), edges, fill=True, color="C2", alpha=0.6)
        lo, hi = sp.get("interval") or (None, None)
        if lo is not None:
            ax2.axvspan(lo, hi, color="C2", alpha=0.2, label=f"{int(100 * sp.get('confidence', 0.95))}% interval")
        if sp.get("ratio") is not None:
            ax2.axvline(sp["ratio"], color="black", linewidth=1, label=f"median ratio {sp['ratio']:.3g}x")
        if sp.get("claimed") is not None:
            ax2.axvline(sp["claimed"], color="red", linewidth=1.5, linestyle="--", label=f"claimed {sp['claimed']:g}x")
            lo_x, hi_x = ax2.get_xlim()
            ax2.set_xlim(min(lo_x, sp["claimed"] * 0.95), max(hi_x, sp["claimed"] * 1.05))
        ax2.set_xlabel("speedup (baseline / candidate median)")
        ax2.set_title(f"Bootstrap of the speedup: {sp.get('verdict', '')}")
        ax2.legend(fontsize=6)
        fig.subplots_adjust(left=0.08, right=0.98, bottom=0.2, top=0.88, wspace=0.3)
        parts.append(_figure(fig, "Left: every timing, outliers beyond 1.5 IQR crossed out (nki-library's rule). "
                                  "Right: the bootstrap distribution of the median ratio with its interval; a claim "
                                  "outside the interval is not supported by the evidence.",
                             "timings and the bootstrap interval of the speedup"))
    # A profile that lacks the fields of a roofline point (FLOPs, HBM bytes) is not drawn: its
    # findings say what it lacks.
    placed = ("arithmetic_intensity", "achieved_flops_per_s", "fraction_of_attainable", "peak_flops", "bandwidth")
    roofs = [(label, p["roofline"]) for label, p in (perf.get("profiles") or {}).items()
             if isinstance(p, dict) and isinstance(p.get("roofline"), dict)
             and all((p["roofline"].get(k) or {}).get("value") is not None for k in placed)]
    if roofs:
        fig = Figure(figsize=(4.2, 3.0))
        ax = fig.subplots()
        r0 = roofs[0][1]
        peak, bw = r0["peak_flops"]["value"], r0["bandwidth"]["value"]
        ai = np.logspace(-1, 4, 200)
        ax.plot(ai, np.minimum(peak, ai * bw), color="black", linewidth=1.2,
                label=f"{review.target.name} roofline ({r0.get('dtype', '')})")
        for i, (label, r) in enumerate(roofs):
            x, y = r["arithmetic_intensity"]["value"], r["achieved_flops_per_s"]["value"]
            ax.scatter([x], [y], color=f"C{i + 3}", zorder=3,
                       label=f"{label}: {100 * r['fraction_of_attainable']['value']:.2g}% of attainable")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("arithmetic intensity (FLOP / HBM byte)")
        ax.set_ylabel("FLOP/s")
        ax.set_title("Roofline (Tensor Engine peak, HBM bandwidth)")
        ax.legend(fontsize=6)
        fig.subplots_adjust(left=0.16, right=0.97, bottom=0.15, top=0.9)
        parts.append(_figure(fig, "Each profile's achieved FLOP/s against the target's roofline: the Tensor "
                                  "Engine's documented peak for the input type and the HBM bandwidth per core "
                                  "(an assumed share of the chip's).", "roofline"))
    return "".join(parts)


def html(review: Any) -> str:
    """The review as one self-contained HTML page."""
    try:
        import matplotlib
    except ImportError as e:
        raise ImportError("the HTML review draws its plots with matplotlib, which is not installed: "
                          "pip install 'numeq[reports]' (or matplotlib>=3.7)") from e
    m = review.manifest
    c = review.correctness
    with matplotlib.rc_context({"svg.hashsalt": "numeq-review", "svg.fonttype": "none", "font.size": 7,
                                "font.family": "DejaVu Sans"}):
        glance_class = "alarm" if not review.passed else "ok"
        parts = ["<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">",
                 f"<title>Port review: {_esc(m.name)}</title><style>{_CSS}{_EXTRA_CSS}</style></head><body>",
                 f"<header><h1>Port review: {_esc(m.name)}</h1>",
                 f"<p>{_esc(m.description)}</p>" if m.description else "",
                 '<dl class="meta">' + "".join(f"<dt>{_esc(k)}</dt><dd>{_esc(v)}</dd>" for k, v in _head(review))
                 + "</dl>", f'<p class="{glance_class}">{_esc(_glance(review))}</p></header>',
                 '<section id="correctness"><h2>1. Correctness</h2>',
                 f"<p>Kernel plan: <code>{_esc(c.plan)}</code></p><ul>"
                 + "".join(f"<li>{_esc(n)}</li>" for n in c.notes) + "</ul>",
                 _h_table(_VERDICT_HEADERS, _verdict_rows(review), "Each output through the verdict ladder"),
                 _findings_html(_findings(review, _PARTS[0][2])), _error_plot(review), "</section>",
                 '<section id="tiling"><h2>2. Tiling and memory</h2>']
        if m.tiling is None and review.run is None:
            parts.append('<p class="na">Not assessed: the manifest has no [tiling].</p>')
        elif m.tiling is None:
            parts.append(_findings_html(_findings(review, _PARTS[1][2])))
        else:
            parts += [_findings_html(_findings(review, _PARTS[1][2])), _memory_plot(review)]
        if review.run is not None:
            parts.append(f"<h3>The kernel's trace (numeq ran it)</h3><pre>{_esc(str(review.run.summary()))}</pre>")
            parts.append(_live_plot(review))
            if review.run.completed:
                parts.append(f"<h3>The kernel's timeline</h3><p>{_esc(_SCHEDULE_TEXT)}</p>"
                             f"<pre>{_esc(str(review.run.schedule()))}</pre>")
                parts.append(_timeline_plot(review))
            if review.precision:
                parts.append("<h3>Precision flow</h3>")
                parts.append(_h_table(_PRECISION_HEADERS, _precision_rows(review), _PRECISION_TEXT))
        parts.append('</section><section id="performance"><h2>3. Performance</h2>')
        if m.performance is None:
            parts.append('<p class="na">Not assessed: the manifest has no [performance].</p>')
        else:
            parts.append(_findings_html(_findings(review, _PARTS[2][2])))
            if review.beside_trace:
                parts.append(_h_table(_BESIDE_HEADERS, review.beside_trace, _BESIDE_TEXT))
            parts += [_performance_plots(review),
                      _h_table(["quantity", "value"], _perf_rows(review.performance), "The numbers behind it")]
        parts.append('</section><section id="rubric"><h2>4. Rubric</h2>')
        parts.append(_h_table(["criterion", "asks", "result", "finding", "evidence"],
                              [[r["criterion"], r["asks"], _status_cell(r["result"]), (r["finding"], "finding"),
                                r["evidence"]] for r in review.rubric()]))
        parts.append(f'</section><section id="target"><h2>Target {_esc(review.target.name)}: the values the rules '
                     "used</h2>")
        parts.append(_h_table(["value", "", "unit", "meaning", "evidence", "source"],
                              [[r["name"], _num(r["value"], 4), r["unit"], r["meaning"], r["evidence"], r["source"]]
                               for r in review.target.rows()]))
        parts.append("</section></body></html>\n")
    return "".join(parts)
