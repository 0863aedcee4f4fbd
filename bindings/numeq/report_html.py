"""The tolerance tables of ``numeq tolerances`` as one self-contained HTML page with plots.

``render(rows, meta)`` turns the sweep's rows (one dict per problem x platform x comparison) into a
single HTML document: a header, a summary (false alarms, totals, planted bugs), the plots and the
table of every row. The plots are drawn with matplotlib (its SVG backend, no GUI) and inlined as
``<svg>`` elements, so the page needs no JavaScript, no network and no other file; the same input
gives the same bytes (fixed SVG hash salt, text kept as text, no date in the metadata).

A row may come from an older run: any key may be missing or None (shown as "-"), and numbers may
be inf or NaN (shown as text).

Example::

    >>> from numeq import report_html
    >>> page = report_html.render([{"problem": "sum(x[64,128] bf16) -> fp32", "platform": "numpy"}],
    ...                           {"title": "tolerances"})
    >>> page.startswith("<!DOCTYPE html>"), "sum(x[64,128] bf16) -&gt; fp32" in page
    (True, True)
"""

from __future__ import annotations

import html
import io
import math
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

__all__ = ["render", "write"]

# Panels per figure: small multiples stay legible at the page's width.
K_PANELS = 12
HIST_PANELS = 24
BAR_ROWS = 40
COLUMNS = 4
# The tolerance schemes a row is judged under, in the order the tables show them; others follow sorted.
SCHEMES = ("numeq", "torch", "rtol_2e-2")
SCHEME_TEXT = {"numeq": "numeq", "torch": "torch.testing defaults", "rtol_2e-2": "rtol=2e-2"}

_CSS = """
body { font-family: sans-serif; margin: 1.5em; color: #111; background: #fff; }
h1 { font-size: 1.5em; } h2 { margin-top: 1.6em; border-bottom: 1px solid #ccc; }
dl.meta { display: grid; grid-template-columns: max-content auto; gap: 0.2em 1em; }
dl.meta dt { font-weight: bold; } dl.meta dd { margin: 0; font-family: monospace; }
table { border-collapse: collapse; margin: 0.8em 0; font-size: 0.75em; }
th, td { border: 1px solid #bbb; padding: 0.2em 0.4em; vertical-align: top; text-align: left; }
th { background: #eee; }
td.num { text-align: right; font-family: monospace; white-space: nowrap; }
td.problem { font-family: monospace; min-width: 14em; }
td.wide { min-width: 14em; max-width: 28em; }
.alarm { background: #fdd; border: 2px solid #c00; padding: 0.5em; font-weight: bold; }
.ok { background: #dfd; border: 1px solid #090; padding: 0.5em; }
figure { margin: 1em 0; } figcaption { font-size: 0.9em; max-width: 70em; }
figure svg { max-width: 100%; height: auto; }
.tag { font-size: 0.85em; color: #555; }
"""

_HOW_TO_READ = (
    "Each row judges one operation (its formats and reduction length K) computed by one platform, "
    "either against the exact result (against = exact) or against another platform's output (the "
    "cross-platform form, e.g. a GPU against Trainium). The tolerance is numeq's error bound for that "
    "platform, in three forms: ulps of the output format; atol + rtol*|ref| per element (the atol "
    "calibrated on the row's input family at unit scale; at any other scale use atol_rel*max|ref|, "
    "assert_close_kwargs(reference=ref)); and Neuron's max-normalised max_rtol*max|ref|. A probabilistic "
    "tolerance fails a correct output with at most the "
    "stated probability per check; a deterministic one never does. Observed is the worst error over every "
    "seed and input generator, and its ratio to the tolerance (at most 1 when the tolerance holds). False "
    "alarms count correct outputs a scheme rejected; detection counts planted bugs a scheme caught "
    "(caught/planted), for numeq's tolerance, torch.testing's defaults and a flat rtol of 2e-2. "
    "Assumptions are the platform model's undocumented choices, tagged with their evidence.")


# --- values -----------------------------------------------------------------------------------------

def _esc(x: Any) -> str:
    return html.escape(str(x), quote=True)


def _get(d: Any, *keys: Any) -> Any:
    """d[k0][k1]... or None where any level is missing, None or not indexable."""
    for k in keys:
        if d is None:
            return None
        try:
            d = d[k]
        except (KeyError, IndexError, TypeError):
            return None
    return d


def _real(x: Any) -> float | None:
    """x as a float, or None if it is not a number (bools are not numbers here)."""
    if isinstance(x, bool) or x is None:
        return None
    try:
        return float(x)
    except (TypeError, ValueError, OverflowError):
        return None


def _num(x: Any, digits: int = 3) -> str:
    """A number as short text: '-' for missing, 'NaN' / 'inf' / '-inf' as words, ints whole."""
    if x is None:
        return "-"
    if isinstance(x, bool):
        return str(x)
    if isinstance(x, int):
        return str(x)
    v = _real(x)
    if v is None:
        return str(x)
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    if v == int(v) and abs(v) < 1e15:
        return str(int(v))
    return f"{v:.{digits}g}"


def _int(x: Any) -> int:
    """x as a count for a total: 0 unless it is a finite whole number."""
    v = _real(x)
    return int(v) if v is not None and math.isfinite(v) else 0


def _pair(x: Any) -> tuple[int, int] | None:
    """[caught, planted] as two ints, or None."""
    if isinstance(x, (list, tuple)) and len(x) == 2:
        return _int(x[0]), _int(x[1])
    return None


def _pair_text(x: Any) -> str:
    p = _pair(x)
    return "-" if p is None else f"{p[0]}/{p[1]}"


def _schemes(rows: list[dict]) -> list[str]:
    seen = {k for r in rows for part in ("false_alarms", "detection")
            if isinstance(r.get(part), dict) for k in r[part]}
    return list(SCHEMES) + sorted(str(s) for s in seen - set(SCHEMES))


def _rows(rows: Any) -> list[dict]:
    if not isinstance(rows, (list, tuple)):
        raise TypeError(f"rows: expected a list of dicts (the rows of numeq tolerances), got {type(rows).__name__}")
    for i, r in enumerate(rows):
        if not isinstance(r, dict):
            raise TypeError(f"rows: row {i} is a {type(r).__name__}, expected a dict")
    return list(rows)


# --- tables -----------------------------------------------------------------------------------------

def _table(headers: list[str], body: list[list[tuple[str, str]]], caption: str) -> str:
    """An HTML table; body cells are (css class, already escaped html)."""
    out = [f"<table><caption>{_esc(caption)}</caption><thead><tr>"]
    out += [f"<th>{_esc(h)}</th>" for h in headers]
    out.append("</tr></thead><tbody>")
    for cells in body:
        out.append("<tr>" + "".join(f'<td class="{c}">{v}</td>' if c else f"<td>{v}</td>" for c, v in cells)
                   + "</tr>")
    out.append("</tbody></table>")
    return "".join(out)


def _tier(r: dict) -> str:
    tier = r.get("tier")
    p = r.get("failure_probability")
    text = _esc(tier if tier is not None else "-")
    if p is not None:
        text += f'<br><span class="tag">p = {_esc(_num(p))}</span>'
    return text


def _tolerance(r: dict) -> str:
    t = r.get("tolerance")
    return (f"{_esc(_num(_get(t, 'ulps')))} ulps<br>rtol {_esc(_num(_get(t, 'rtol')))}, "
            f"atol {_esc(_num(_get(t, 'atol')))} (= {_esc(_num(_get(t, 'atol_rel')))} max|ref|)"
            f"<br>max_rtol {_esc(_num(_get(t, 'max_rtol')))}")


def _observed(r: dict) -> str:
    o = r.get("observed")
    return (f"{_esc(_num(_get(o, 'max_abs')))} abs<br>{_esc(_num(_get(o, 'max_ulps')))} ulps<br>"
            f"ratio {_esc(_num(_get(o, 'max_over_tolerance')))}")


def _assumptions(r: dict) -> str:
    items = r.get("assumptions")
    if not isinstance(items, list) or not items:
        return "-"
    out = []
    for a in items:
        if not isinstance(a, dict):
            out.append(_esc(a))
            continue
        out.append(f"{_esc(_get(a, 'platform') or '-')}: {_esc(_get(a, 'name') or '-')} = "
                   f"{_esc(_num(_get(a, 'value')))} <span class=\"tag\">[{_esc(_get(a, 'evidence') or '-')}]</span>")
    return "<br>".join(out)


def _bugs(r: dict) -> str:
    b = r.get("bugs")
    if not isinstance(b, dict) or not b:
        return "-"
    return "<br>".join(f"{_esc(k)} {_esc(_pair_text(v))}" for k, v in sorted(b.items(), key=lambda kv: str(kv[0])))


def _main_table(rows: list[dict], schemes: list[str]) -> str:
    names = " / ".join(SCHEME_TEXT.get(s, s) for s in schemes)
    headers = ["problem", "platform", "against", "tier", "tolerance", "observed worst", "checks (elements)",
               f"false alarms ({names})", f"detection, caught/planted ({names})", "numeq per planted bug",
               "assumptions [evidence]", "rubric"]
    body = []
    for r in rows:
        body.append([
            ("problem", _esc(r.get("problem") if r.get("problem") is not None else "-")),
            ("", _esc(r.get("platform") if r.get("platform") is not None else "-")),
            ("", _esc(r.get("against") if r.get("against") is not None else "-")),
            ("", _tier(r)), ("num", _tolerance(r)), ("num", _observed(r)),
            ("num", f"{_esc(_num(r.get('checks')))}<br>({_esc(_num(r.get('elements')))})"),
            ("num", " / ".join(_esc(_num(_get(r, "false_alarms", s))) for s in schemes)),
            ("num", " / ".join(_esc(_pair_text(_get(r, "detection", s))) for s in schemes)),
            ("", _bugs(r)), ("wide", _assumptions(r)),
            ("wide", _esc(r.get("rubric") if r.get("rubric") is not None else "-"))])
    return _table(headers, body, f"Every row ({len(rows)}): the tolerance, the worst observed error, "
                                 "false alarms and detection per scheme")


def _summary(rows: list[dict], schemes: list[str]) -> str:
    alarms = [r for r in rows if _int(_get(r, "false_alarms", "numeq")) > 0]
    out = []
    if alarms:
        out.append(f'<p class="alarm">{len(alarms)} row(s) where numeq\'s tolerance rejected a correct output '
                   "(a false alarm): the tolerance is wrong there and must not be used as it stands.</p>")
    else:
        out.append('<p class="ok">No false alarms under numeq\'s tolerances: every correct output passed.</p>')
    body = [[("problem", _esc(r.get("problem") or "-")), ("", _esc(r.get("platform") or "-")),
             ("", _esc(r.get("against") or "-")), ("num", _esc(_num(_get(r, "false_alarms", "numeq")))),
             ("num", _esc(_num(r.get("checks"))))] for r in alarms]
    if not body:
        body = [[("", "none"), ("", "-"), ("", "-"), ("num", "0"), ("num", "-")]]
    out.append(_table(["problem", "platform", "against", "false alarms (numeq)", "checks"], body,
                      "Rows where numeq's tolerance rejected a correct output (there must be none)"))

    checks = sum(_int(r.get("checks")) for r in rows)
    elements = sum(_int(r.get("elements")) for r in rows)
    body = []
    for s in schemes:
        fa = sum(_int(_get(r, "false_alarms", s)) for r in rows)
        pairs = [p for p in (_pair(_get(r, "detection", s)) for r in rows) if p is not None]
        caught, planted = sum(p[0] for p in pairs), sum(p[1] for p in pairs)
        rate = f"{100.0 * caught / planted:.1f}%" if planted else "-"
        body.append([("", _esc(SCHEME_TEXT.get(s, s))), ("num", str(fa)), ("num", f"{caught}/{planted}"),
                     ("num", rate)])
    out.append(f"<p>{len(rows)} rows, {checks} checks, {elements} elements checked.</p>")
    out.append(_table(["tolerance scheme", "false alarms", "planted bugs caught", "detection rate"], body,
                      "Totals over every row, per tolerance scheme"))

    per_bug: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for r in rows:
        b = r.get("bugs")
        if isinstance(b, dict):
            for name, v in b.items():
                p = _pair(v)
                if p is not None:
                    per_bug[str(name)][0] += p[0]
                    per_bug[str(name)][1] += p[1]
    body = [[("", _esc(name)), ("num", f"{c}/{n}"), ("num", f"{100.0 * c / n:.1f}%" if n else "-")]
            for name, (c, n) in sorted(per_bug.items())] or [[("", "none"), ("num", "-"), ("num", "-")]]
    out.append(_table(["planted bug", "caught by numeq", "rate"], body,
                      "Planted bugs: numeq's catches over every row"))
    return "".join(out)


# --- plots ------------------------------------------------------------------------------------------

def _key(t: tuple) -> tuple:
    return tuple("" if x is None else str(x) for x in t)


def _svg(fig: Any, alt: str) -> str:
    """The figure as an inline <svg> with a <title>: no XML prologue, DOCTYPE, namespaces or metadata
    (each names a URL; HTML puts inline svg into the SVG namespace by itself)."""
    buf = io.StringIO()
    fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None, "Format": None, "Type": None})
    s = buf.getvalue()
    s = s[s.index("<svg"):]
    s = re.sub(r'\s+xmlns(:\w+)?="[^"]*"', "", s, count=2)
    s = re.sub(r"<metadata>.*?</metadata>\s*", "", s, flags=re.S)
    head_end = s.index(">") + 1
    return s[:head_end].replace("<svg", '<svg role="img"', 1) + f"<title>{_esc(alt)}</title>" + s[head_end:]


def _figure(fig: Any, caption: str, alt: str) -> str:
    return (f'<figure aria-label="{_esc(alt)}">{_svg(fig, alt)}'
            f"<figcaption>{_esc(caption)}</figcaption></figure>")


def _panels_figure(fig: Any, caption: str, alt: str, panels: list[str]) -> str:
    """A figure of small multiples: its caption and alt text end by naming each panel's group."""
    names = "; ".join(panels)
    return _figure(fig, f"{caption} Panels: {names}.", f"{alt} for {len(panels)} groups: {names}")


def _grid(n: int, row_height: float, gap: float, top: float = 0.65, bottom: float = 0.6,
          sharey: bool = False) -> tuple[Any, Any]:
    """A figure of n panels, COLUMNS wide. Fixed margins in inches (``gap`` between rows for titles
    and tick labels, ``top`` above the first row, ``bottom`` below the last): constrained layout would
    cost more than the drawing."""
    from matplotlib.figure import Figure

    ncols = min(COLUMNS, n)
    nrows = -(-n // ncols)
    width, height = 3.4 * ncols, row_height * nrows + top + bottom - gap
    fig = Figure(figsize=(width, height))
    axes = fig.subplots(nrows, ncols, squeeze=False, sharey=sharey).ravel()
    axes_height = (height - top - bottom - gap * (nrows - 1)) / nrows
    fig.subplots_adjust(left=0.6 / width, right=1 - 0.1 / width, bottom=bottom / height, top=1 - top / height,
                        wspace=0.75 / (3.4 - 0.75), hspace=gap / axes_height)
    for ax in axes[n:]:
        ax.set_axis_off()
    return fig, axes


def _plain_log(ax: Any, axis: str) -> None:
    """A log axis with major ticks only, labelled as plain numbers (mathtext labels and minor ticks are
    most of the drawing time of a small panel)."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullLocator

    a = ax.xaxis if axis == "x" else ax.yaxis
    a.set_major_locator(LogLocator(base=2 if axis == "x" else 10, numticks=6))
    a.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    a.set_minor_locator(NullLocator())


def _chunks(items: list, size: int) -> list[list]:
    return [items[i:i + size] for i in range(0, len(items), size)]


def _colours(rows: list[dict]) -> dict[str, str]:
    platforms = sorted({str(r.get("platform")) for r in rows})
    return {p: f"C{i % 10}" for i, p in enumerate(platforms)}


def _positive(x: Any) -> float | None:
    v = _real(x)
    return v if v is not None and math.isfinite(v) and v > 0 else None


def _k_plots(rows: list[dict]) -> list[str]:
    from matplotlib.lines import Line2D

    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        if _positive(r.get("k")) is not None:
            groups[(r.get("op"), r.get("in_fmt"), r.get("out"), r.get("against"))].append(r)
    keys = sorted((g for g in groups if len({_real(r.get("k")) for r in groups[g]}) >= 2), key=_key)
    colours = _colours(rows)
    figures = []
    for n, chunk in enumerate(_chunks(keys, K_PANELS)):
        fig, axes = _grid(len(chunk), 2.5, 0.85, top=0.9, bottom=0.45)
        drawn: set[str] = set()
        for ax, g in zip(axes, chunk):
            by_platform: dict[str, list[dict]] = defaultdict(list)
            for r in groups[g]:
                by_platform[str(r.get("platform"))].append(r)
            for platform, rs in sorted(by_platform.items()):
                rs = sorted(rs, key=lambda r: _real(r.get("k")))
                for field, key, style in (("tolerance", "ulps", "-o"), ("observed", "max_ulps", "--x")):
                    pts = [(_real(r.get("k")), _positive(_get(r, field, key))) for r in rs]
                    pts = [(k, y) for k, y in pts if y is not None]
                    if pts:
                        ax.plot([k for k, _ in pts], [y for _, y in pts], style, color=colours[platform],
                                markersize=4)
                        drawn.add(platform)
            ax.set_xscale("log", base=2)
            _plain_log(ax, "x")
            if ax.has_data():
                ax.set_yscale("log")
                _plain_log(ax, "y")
            op, in_fmt, out, against = _key(g)
            ax.set_title(f"{op} {in_fmt}->{out}\nvs {against}", fontsize=8, y=1.02)
            ax.set_xlabel("K", fontsize=7)
            ax.set_ylabel("ulps", fontsize=7)
            ax.tick_params(labelsize=6)
        # one legend for the figure (a legend per panel costs more than the panel)
        handles = [Line2D([], [], color="k", marker="o", markersize=4, label="tolerance"),
                   Line2D([], [], color="k", marker="x", markersize=4, linestyle="--", label="observed worst")]
        handles += [Line2D([], [], color=colours[p], linewidth=3, label=p) for p in sorted(drawn)]
        fig.legend(handles=handles, loc="upper center", ncol=min(len(handles), 6), fontsize=7, frameon=False)
        figures.append(_panels_figure(
            fig, f"Figure K{n + 1}: tolerance (solid, o) and worst observed error (dashed, x) in ulps of the output "
                 "against K, one colour per platform, log-log; zero or non-finite values are not drawn.",
            "Tolerance and observed error in ulps against K", [" ".join(_key(g)) for g in chunk]))
    return figures


def _bin_labels(edges: list[float]) -> list[str]:
    labels = []
    for lo, hi in zip(edges[:-1], edges[1:]):
        labels.append(f">={_num(lo)}" if hi >= 1e300 else f"{_num(lo)}-{_num(hi)}")
    return labels


def _histogram(r: dict) -> tuple[list[float], list[float]] | None:
    h = r.get("error_ulps_histogram")
    edges, counts = _get(h, "edges"), _get(h, "counts")
    if not isinstance(edges, list) or not isinstance(counts, list) or len(edges) != len(counts) + 1 or not counts:
        return None
    e, c = [_real(x) for x in edges], [_real(x) for x in counts]
    if any(x is None for x in e + c):
        return None
    return e, c


def _hist_plots(rows: list[dict], cross: bool, label: str) -> list[str]:
    # One panel per (op, in_fmt, out, platform, against): the row at the largest K with a histogram.
    best: dict[tuple, dict] = {}
    for r in rows:
        if (r.get("against") not in (None, "exact")) != cross or _histogram(r) is None:
            continue
        g = (r.get("op"), r.get("in_fmt"), r.get("out"), r.get("platform"), r.get("against"))
        k = _real(r.get("k"))
        k = k if k is not None and math.isfinite(k) else -1.0
        if g not in best or k > (_real(best[g].get("k")) or -1.0):
            best[g] = r
    keys = sorted(best, key=_key)
    colours = _colours(rows)
    figures = []
    for n, chunk in enumerate(_chunks(keys, HIST_PANELS)):
        # Fractions of the elements on one shared log axis, labelled on the first column only; bins
        # labelled under the last panel of each column when every panel has the same edges (the
        # sweep's case): tick labels are most of the drawing time.
        hists = [_histogram(best[g]) for g in chunk]
        same_edges = all(h[0] == hists[0][0] for h in hists)
        fig, axes = _grid(len(chunk), 2.1 if same_edges else 2.5, 0.55 if same_edges else 0.95, bottom=0.75,
                          sharey=True)
        ncols = min(COLUMNS, len(chunk))
        positive = False
        for i, (ax, g, (edges, counts)) in enumerate(zip(axes, chunk, hists)):
            r = best[g]
            total = sum(c for c in counts if math.isfinite(c) and c > 0)
            positive = positive or total > 0
            xs = list(range(len(counts)))
            ax.bar(xs, [c / total if total and math.isfinite(c) and c > 0 else 0 for c in counts],
                   color=colours[str(r.get("platform"))], width=0.85)
            bottom = not same_edges or i + ncols >= len(chunk)
            if bottom:
                ax.set_xticks(xs, _bin_labels(edges), rotation=45, fontsize=5)
            else:
                ax.set_xticks([])
            if bottom:
                ax.set_xlabel("|error| in ulps of the output", fontsize=6)
            op, in_fmt, out, platform, against = _key(g)
            # a fixed title position: placing it above the tick labels measures every panel
            ax.set_title(f"{op} {in_fmt}->{out} K={_num(r.get('k'))}\n{platform} vs {against}", fontsize=7, y=1.02)
            if i % ncols == 0:
                ax.set_ylabel("fraction of elements", fontsize=6)
            ax.tick_params(axis="y", labelsize=6, labelleft=i % ncols == 0)
        if positive:
            axes[0].set_yscale("log")
            _plain_log(axes[0], "y")
        what = "|platform - against|" if cross else "|output - exact|"
        figures.append(_panels_figure(
            fig, f"Figure {label}{n + 1}: histograms of {what} in ulps of the output format over every element "
                 "checked, at each group's largest K, as fractions of the elements (log axis; the last bin is "
                 "open).",
            f"Error histograms in ulps ({what})", [f"{g[0]} {g[1]} {g[3]} vs {g[4]}" for g in _key_list(chunk)]))
    return figures


def _key_list(keys: list[tuple]) -> list[tuple]:
    return [_key(g) for g in keys]


def _cross_bars(rows: list[dict]) -> list[str]:
    cross = [r for r in rows if r.get("against") not in (None, "exact")]
    cross.sort(key=lambda r: _key((r.get("op"), r.get("in_fmt"), r.get("out"), r.get("platform"), r.get("against")))
               + (_real(r.get("k")) if _positive(r.get("k")) else 0.0,))
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter, NullLocator

    figures = []
    colours = _colours(rows)
    for n, chunk in enumerate(_chunks(cross, BAR_ROWS)):
        height = 0.9 + 0.2 * len(chunk)
        fig = Figure(figsize=(11, height))
        ax = fig.subplots()
        fig.subplots_adjust(left=0.45, right=0.94, bottom=0.6 / height, top=1 - 0.2 / height)
        ys = list(range(len(chunk)))[::-1]
        raw = [_get(r, "observed", "max_ulps") for r in chunk]
        values = [v if v is not None and math.isfinite(v) and v > 0 else 0.0 for v in map(_real, raw)]
        ax.barh(ys, values, color=[colours[str(r.get("platform"))] for r in chunk], height=0.7)
        for y, v, text in zip(ys, values, raw):  # the value itself beside its bar (inf and NaN have none)
            ax.text(v, y, f" {_num(text)}", va="center", fontsize=6)
        labels = [f"{r.get('problem') or '-'}  {r.get('platform') or '-'} vs {r.get('against')}" for r in chunk]
        ax.set_yticks(ys, labels, fontsize=6)
        ax.set_xscale("symlog", linthresh=1.0)
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xlim(left=0)
        ax.set_xlabel("worst observed |platform - against| in ulps of the output (symmetric log: linear below 1)",
                      fontsize=7)
        ax.tick_params(axis="x", labelsize=6)
        figures.append(_figure(
            fig, f"Figure X{n + 1}: worst observed difference between two platforms' outputs, in ulps of the "
                 f"output format, per cross-platform row ({len(chunk)} rows), its value written beside the bar (zero, inf, "
                 f"NaN and missing values have no bar).",
            f"Bar chart of the worst observed cross-platform difference in ulps for {len(chunk)} rows"))
    return figures


def _plots(rows: list[dict]) -> str:
    try:
        import matplotlib
    except ImportError as e:
        raise ImportError("the HTML report draws its plots with matplotlib, which is not installed: "
                          "pip install 'numeq[reports]' (or matplotlib>=3.7)") from e

    with matplotlib.rc_context({"svg.hashsalt": "numeq-report", "svg.fonttype": "none", "font.size": 7,
                                "font.family": "DejaVu Sans"}):
        parts = ['<section id="plots-k"><h2>Tolerance and observed error against K</h2>']
        figs = _k_plots(rows)
        parts += figs or ["<p>No group has rows at two or more K.</p>"]
        parts.append('</section><section id="plots-hist"><h2>Error histograms (against the exact result)</h2>')
        figs = _hist_plots(rows, cross=False, label="H")
        parts += figs or ["<p>No row against the exact result has a histogram.</p>"]
        parts.append('</section><section id="plots-cross"><h2>Cross-platform differences '
                     "(e.g. GPU against Trainium)</h2>")
        figs = _hist_plots(rows, cross=True, label="C") + _cross_bars(rows)
        parts += figs or ["<p>No cross-platform rows.</p>"]
        parts.append("</section>")
    return "".join(parts)


# --- the page ---------------------------------------------------------------------------------------

def _header(meta: dict, n_rows: int) -> str:
    title = meta.get("title") or "numeq tolerances"
    items = [("command", meta.get("command")), ("numeq version", meta.get("numeq_version")),
             ("seeds", ", ".join(_num(s) for s in meta["seeds"]) if isinstance(meta.get("seeds"), list) else meta.get("seeds")),
             ("generators", ", ".join(str(g) for g in meta["generators"])
              if isinstance(meta.get("generators"), list) else meta.get("generators")),
             ("elapsed", None if meta.get("elapsed_s") is None else f"{_num(meta.get('elapsed_s'))} s"),
             ("rows", meta.get("rows") if meta.get("rows") is not None else n_rows)]
    dl = "".join(f"<dt>{_esc(k)}</dt><dd>{_esc('-' if v is None else v)}</dd>" for k, v in items)
    return f"<header><h1>{_esc(title)}</h1><dl class=\"meta\">{dl}</dl></header>"


def render(rows: list[dict], meta: dict) -> str:
    """The rows of ``numeq tolerances`` as one self-contained HTML page (a str): header, how to read it,
    summary tables, inline SVG plots and the table of every row. The same input gives the same bytes.

    ``rows``: the sweep's rows, dicts with the keys "problem", "op", "in_fmt", "out", "k", "platform",
    "against", "tier", "failure_probability", "tolerance", "observed", "checks", "elements",
    "false_alarms", "detection", "bugs", "assumptions", "rubric", "error_ulps_histogram" (any may be
    missing or None; numbers may be inf or NaN). ``meta``: the run's "title", "command",
    "numeq_version", "seeds", "generators", "elapsed_s" and "rows" (any may be missing; None for none).
    Rows that are not dicts, or a meta that is neither a dict nor None, raise TypeError.

    Example::

        >>> from numeq import report_html
        >>> page = report_html.render([], {"title": "empty"})
        >>> page.count("<table")
        4
    """
    rows = _rows(rows)
    if meta is None:
        meta = {}
    if not isinstance(meta, dict):
        raise TypeError(f"meta: expected a dict (title, command, numeq_version, seeds, generators, elapsed_s, "
                        f"rows) or None, got {type(meta).__name__}")
    schemes = _schemes(rows)
    title = meta.get("title") or "numeq tolerances"
    return "".join([
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">",
        f"<title>{_esc(title)}</title><style>{_CSS}</style></head><body>",
        _header(meta, len(rows)),
        f'<section id="how"><h2>How to read this report</h2><p>{_esc(_HOW_TO_READ)}</p></section>',
        f'<section id="summary"><h2>Summary</h2>{_summary(rows, schemes)}</section>',
        _plots(rows),
        f'<section id="rows"><h2>Every row</h2>{_main_table(rows, schemes)}</section>',
        "</body></html>\n"])


def write(rows: list[dict], meta: dict, path: str | Path) -> Path:
    """Write ``render(rows, meta)`` to ``path`` (UTF-8) and return the path.

    ``rows``, ``meta``: as ``render``; ``path``: the file to write (its folder must exist).

    Example::

        >>> import tempfile, pathlib
        >>> from numeq import report_html
        >>> p = report_html.write([], {}, pathlib.Path(tempfile.mkdtemp()) / "report.html")
        >>> p.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
        True
    """
    path = Path(path)
    path.write_text(render(rows, meta), encoding="utf-8")
    return path
