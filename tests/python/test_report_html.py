"""The HTML report of ``numeq tolerances`` (numeq.report_html): one self-contained page whose tables
and inline SVG plots hold every row, the same bytes for the same rows, robust to rows from older runs,
and a page headless Chromium renders (its DOM holds the tables and plots; its screenshot is not blank
and shows the plots' colours).

The rows are made here from real numeq results (emulations, exact results, bounds) of two catalogue
problems at two K on two platforms plus their cross-platform form; ulps are computed here from the
output format's parameters (numeq.format_info), independently of numeq's own ulp code."""

from __future__ import annotations

import html.parser
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import time
import zlib

import numpy as np
import pytest

import numeq
from numeq import catalogue, report_html

PLATFORMS = ("nvidia.h100", "trainium.trn2")
SEEDS = (0, 1)
EDGES = [0, 0.5, 1, 2, 4, 8, 16, 1e300]
# torch.testing.assert_close's defaults per output dtype (torch/testing/_comparison.py: bf16 1.6e-2 /
# 1e-5, fp32 1.3e-6 / 1e-5).
TORCH = {"bf16": (1.6e-2, 1e-5), "fp32": (1.3e-6, 1e-5)}
PROBLEMS = (("matmul", "bf16", "fp32"), ("softmax", "bf16", "bf16"))
KS = (64, 256)


def _ulp(y: np.ndarray, fmt: str) -> np.ndarray:
    """The spacing of fmt's values at |y|: 2**(e - mantissa_bits), e the binade of y, at least emin."""
    info = numeq.format_info(fmt)
    _, e = np.frexp(np.abs(y))
    e = np.where(y == 0, info["emin"], np.maximum(e - 1, info["emin"]))
    return np.ldexp(1.0, (e - info["mantissa_bits"]).astype(np.int32))


def _passes(got: np.ndarray, ref: np.ndarray, bound: np.ndarray | None, rtol: float = 0.0, atol: float = 0.0,
            lo: np.ndarray | float = 0.0) -> bool:
    """|got - (ref + lo)| <= bound, or <= atol + rtol*|ref| without a bound."""
    err = np.abs((got - ref) - lo)
    return bool(np.all(err <= (bound if bound is not None else atol + rtol * np.abs(ref))))


def _bugs(got: np.ndarray, ulp: np.ndarray) -> dict[str, np.ndarray]:
    """Two planted bugs on a correct output: one element off by 64 ulps, every element scaled by 1 + 2**-6."""
    one = got.copy()
    one.flat[got.size // 2] += 64 * ulp.flat[got.size // 2]
    return {"one_element_64_ulps": one, "scaled_1+2^-6": got * (1 + 2.0**-6)}


_BUILT: dict[tuple, object] = {}


def _op(problem: catalogue.Problem, seed: int):
    """The built op, once per (problem, seed): an Op caches its emulations and bounds."""
    if (problem, seed) not in _BUILT:
        _BUILT[problem, seed] = catalogue.build(problem, "normal", seed).op
    return _BUILT[problem, seed]


def _row(problem: catalogue.Problem, platform: str, against: str) -> dict:
    """One row of the report's schema from the problem's real emulations over SEEDS."""
    t0 = time.perf_counter()
    out = problem.out
    errs, bounds, alarms, caught, per_bug = [], [], {}, {}, {}
    schemes = ("numeq", "torch", "rtol_2e-2")
    p_fail = 0.0
    for seed in SEEDS:
        op = _op(problem, seed)
        got = op.emulate(platform)
        if against == "exact":
            # numeq's bound is on the distance to the exact result hi + lo; torch and rtol=2e-2
            # compare with the reference (the exact result rounded into the output format)
            hi, lo = op.exact()
            ref, err = op.reference(), np.abs((got - hi) - lo)
            bound = op.bound(platform, kind="probabilistic")
            p_fail = op.emulation(platform, kind="probabilistic").failure_probability
        else:
            ref = hi = op.emulate(against)
            lo = 0.0
            err = np.abs(got - ref)
            bound = op.cross_bound(platform, against, kind="probabilistic")
            # the cross bound fails when either platform's bound does: at most the sum (a union bound)
            p_fail = sum(op.emulation(q, kind="probabilistic").failure_probability for q in (platform, against))
        ulp = _ulp(ref, out)
        errs.append(err / ulp)
        bounds.append((bound, err, ref, ulp))
        rtol, atol = TORCH[out]
        judge = {"numeq": lambda x: _passes(x, hi, bound, lo=lo), "torch": lambda x: _passes(x, ref, None, rtol, atol),
                 "rtol_2e-2": lambda x: _passes(x, ref, None, 2e-2)}
        for s in schemes:
            alarms[s] = alarms.get(s, 0) + (not judge[s](got))
        for name, bad in _bugs(got, ulp).items():
            for s in schemes:
                c = caught.setdefault(s, [0, 0])
                c[0] += not judge[s](bad)
                c[1] += 1
            b = per_bug.setdefault(name, [0, 0])
            b[0] += not judge["numeq"](bad)
            b[1] += 1
    ulps = np.concatenate([e.ravel() for e in errs])
    bound_all = np.concatenate([b[0].ravel() for b in bounds])
    err_all = np.concatenate([b[1].ravel() for b in bounds])
    ref_all = np.concatenate([np.abs(b[2]).ravel() for b in bounds])
    ulp_all = np.concatenate([b[3].ravel() for b in bounds])
    nz = ref_all > 0
    counts, _ = np.histogram(ulps, EDGES)
    assumptions = [{"platform": p, "name": a["name"], "value": a["value"], "evidence": "assumed"}
                   for p in sorted({platform, against} - {"exact"}) for a in numeq.platform_assumptions(p)][:3]
    tol_ulps = float(np.max(bound_all / ulp_all))
    return {
        "problem": problem.text(), "op": problem.op, "in_fmt": problem.in_fmt, "out": out, "k": problem.k,
        "shape": list(problem.shape), "platform": platform, "against": against,
        "tier": "probabilistic", "failure_probability": p_fail,
        "tolerance": {"ulps": tol_ulps, "rtol": float(np.max(bound_all[nz] / ref_all[nz])),
                      "atol": float(np.max(bound_all[~nz])) if np.any(~nz) else 0.0,
                      "max_rtol": float(np.max(bound_all) / np.max(ref_all))},
        "observed": {"max_abs": float(np.max(err_all)), "max_ulps": float(np.max(ulps)),
                     "max_over_tolerance": float(np.max(err_all / bound_all))},
        "checks": len(SEEDS), "elements": int(ulps.size), "false_alarms": alarms, "detection": caught,
        "bugs": per_bug, "assumptions": assumptions,
        "rubric": f"Accept {problem.text()} on {platform} when every element is within {tol_ulps:.3g} ulps "
                  f"of {'the exact result' if against == 'exact' else against}.",
        "error_ulps_histogram": {"edges": EDGES, "counts": [int(c) for c in counts]},
        "elapsed_s": time.perf_counter() - t0,
    }


@pytest.fixture(scope="module")
def rows() -> list[dict]:
    out = []
    for op, in_fmt, fmt_out in PROBLEMS:
        for k in KS:
            problem = catalogue.Problem(op, in_fmt, fmt_out, k=k)
            out += [_row(problem, p, "exact") for p in PLATFORMS]
            out.append(_row(problem, PLATFORMS[0], PLATFORMS[1]))
    return out


META = {"title": "numeq tolerances <test>", "command": "numeq tolerances --ops matmul,softmax",
        "numeq_version": numeq.__version__, "seeds": list(SEEDS), "generators": ["normal"], "elapsed_s": 1.5,
        "rows": 12}


@pytest.fixture(scope="module")
def page(rows) -> str:
    return report_html.render(rows, META)


# The report's figures for these rows: K plots for (matmul, softmax) x (exact, cross) = 4 panels, one
# figure; histograms at the largest K for 2 ops x 2 platforms against exact, one figure; cross
# histograms (2 panels) and the cross bar chart: 4 <svg>. Tables: false alarms, totals, planted bugs,
# every row.
N_SVG, N_TABLES = 4, 4


class _Page(html.parser.HTMLParser):
    """Counts start tags, collects text and checks that every non-void element is closed in order."""

    VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.counts: dict[str, int] = {}
        self.stack: list[str] = []
        self.errors: list[str] = []
        self.text: list[str] = []
        self.svg_titles = 0

    def handle_starttag(self, tag, attrs):
        self.counts[tag] = self.counts.get(tag, 0) + 1
        if tag == "title" and "svg" in self.stack:
            self.svg_titles += 1
        if tag not in self.VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag, attrs):
        self.counts[tag] = self.counts.get(tag, 0) + 1

    def handle_endtag(self, tag):
        if tag in self.VOID:
            return
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes {self.stack[-1:] or 'nothing'}")
            return
        self.stack.pop()

    def handle_data(self, data):
        self.text.append(data)


def _parse(page: str) -> _Page:
    p = _Page()
    p.feed(page)
    p.close()
    return p


def test_rows_are_real(rows):
    # The helper's rows hold what numeq computes: the tolerance holds on every correct output.
    assert len(rows) == 12
    for r in rows:
        assert r["false_alarms"]["numeq"] == 0, r["problem"]
        assert 0 <= r["observed"]["max_over_tolerance"] <= 1, r["problem"]
        assert sum(r["error_ulps_histogram"]["counts"]) == r["elements"]


def test_page_structure(rows, page):
    for bad in ("http://", "https://", "<script", "<link", "@import", "<img", "<iframe"):
        assert bad not in page, bad
    assert re.findall(r"url\((?!#)", page) == []  # only references inside the page (clip paths)
    assert re.findall(r"(?:src|href)=\"(?!#)", page) == []
    p = _parse(page)
    assert p.errors == [] and p.stack == []
    assert p.counts.get("table") == N_TABLES
    assert p.counts.get("svg") == N_SVG
    assert p.counts.get("figure") == N_SVG and p.counts.get("figcaption") == N_SVG
    assert p.svg_titles == N_SVG  # alt text inside every plot
    text = "".join(p.text)
    assert "numeq tolerances <test>" in text  # escaped in the page, the same text once parsed
    for r in rows:
        assert r["problem"] in text and r["platform"] in text and r["rubric"] in text
    # every platform and op appears in some plot (matplotlib writes text as <text> with fonttype none)
    for name in PLATFORMS + ("matmul", "softmax"):
        assert name in text
    assert report_html.render(rows, META) == page  # byte for byte


def test_false_alarm_rows_are_shown(rows, page):
    bad = dict(rows[0], false_alarms={"numeq": 2, "torch": 0, "rtol_2e-2": 0}, problem="alarm <row>")
    alarmed = report_html.render([bad] + rows[1:], META)
    assert 'class="alarm"' in alarmed and "alarm &lt;row&gt;" in alarmed
    assert 'class="alarm"' not in page


def test_missing_none_inf_nan(rows, tmp_path):
    nan, inf = float("nan"), float("inf")
    odd = [
        {},
        {"problem": None, "platform": None, "tolerance": None, "observed": {"max_ulps": nan}, "k": None},
        {"problem": "p1", "op": "sum", "in_fmt": "bf16", "out": "fp32", "k": 128, "platform": "numpy",
         "against": "exact", "tolerance": {"ulps": inf, "rtol": nan, "atol": -inf, "max_rtol": None},
         "observed": {"max_abs": inf, "max_ulps": nan, "max_over_tolerance": inf}, "checks": nan,
         "false_alarms": {"numeq": None}, "detection": {"numeq": [1]}, "bugs": {"b": None},
         "assumptions": [None, {"name": "x"}], "error_ulps_histogram": {"edges": [0, 1, inf], "counts": [nan, 1]}},
        {"problem": "p2", "op": "sum", "in_fmt": "bf16", "out": "fp32", "k": 1024, "platform": "numpy",
         "against": "nvidia.h100", "observed": {"max_ulps": inf},
         "error_ulps_histogram": {"edges": [0, 1], "counts": [0]}},
    ]
    page = report_html.render(odd, {"seeds": None, "title": None})
    p = _parse(page)
    assert p.errors == []
    text = "".join(p.text)
    assert "NaN" in text and "inf" in text and "-inf" in text and "-" in text
    assert "p1" in text and "p2" in text
    assert report_html.render(odd, {}) == report_html.render(odd, {})
    # an empty sweep still gives a page with its tables and no plots
    empty = _parse(report_html.render([], None))
    assert empty.counts.get("table") == N_TABLES and "svg" not in empty.counts
    path = report_html.write(rows[:3], META, tmp_path / "r.html")
    assert path.read_text(encoding="utf-8") == report_html.render(rows[:3], META)


def test_bad_arguments_name_the_parameter():
    for rows, meta, word in (({"problem": "p"}, {}, "rows"), ([{}, None], {}, "row 1"), ([{}], "title", "meta")):
        with pytest.raises(TypeError, match=word):
            report_html.render(rows, meta)


def test_same_bytes_in_another_process(rows, page, tmp_path):
    # Another interpreter with another string-hash seed (set and dict orders of str keys): the same page.
    src = tmp_path / "rows.json"
    src.write_text(json.dumps({"rows": rows, "meta": META}), encoding="utf-8")
    code = ("import json, sys; from numeq import report_html; d = json.load(open(sys.argv[1])); "
            "sys.stdout.write(report_html.render(d['rows'], d['meta']))")
    env = dict(os.environ, PYTHONHASHSEED="12345")
    out = subprocess.run([sys.executable, "-c", code, str(src)], capture_output=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr.decode()[-2000:]
    assert out.stdout.decode("utf-8") == page


def test_panels_split_into_figures(rows):
    # More groups than one figure holds: the histograms spread over several figures, none lost.
    many = [dict(rows[0], op=f"op{i:02d}", problem=f"problem {i}") for i in range(report_html.HIST_PANELS + 1)]
    p = _parse(report_html.render(many, META))
    assert p.counts.get("svg") == 2  # no K plot (one K), two histogram figures, no cross rows
    text = "".join(p.text)
    assert all(f"op{i:02d}" in text for i in range(len(many)))


# --- headless Chromium ------------------------------------------------------------------------------

def _png_pixels(data: bytes) -> np.ndarray:
    """The pixels of an 8-bit RGB or RGBA non-interlaced PNG (what Chromium writes) as (H, W, C) uint8.
    The filters are undone along anti-diagonals: pixel (r, c) needs (r, c-1), (r-1, c) and (r-1, c-1),
    all on earlier diagonals, so each diagonal is one vectorised step whatever the rows' filters."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, ihdr = 8, [], None
    while pos < len(data):
        (length,), kind = struct.unpack(">I", data[pos:pos + 4]), data[pos + 4:pos + 8]
        body = data[pos + 8:pos + 8 + length]
        assert zlib.crc32(kind + body) == struct.unpack(">I", data[pos + 8 + length:pos + 12 + length])[0]
        if kind == b"IHDR":
            ihdr = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat.append(body)
        pos += 12 + length
    assert ihdr is not None, "no IHDR"
    width, height, depth, colour, _, _, interlace = ihdr
    assert depth == 8 and colour in (2, 6) and interlace == 0, ihdr
    bpp = 3 if colour == 2 else 4
    raw = np.frombuffer(zlib.decompress(b"".join(idat)), dtype=np.uint8)
    assert raw.size == height * (1 + width * bpp)
    raw = raw.reshape(height, 1 + width * bpp)
    filters, x = raw[:, 0], raw[:, 1:].reshape(height, width, bpp).astype(np.int32)
    assert np.all(filters <= 4)
    out = np.zeros((height + 1, width + 1, bpp), dtype=np.int32)  # a zero row above and column to the left
    for d in range(height + width - 1):
        r = np.arange(max(0, d - width + 1), min(height, d + 1))
        c = d - r
        a, b, cc = out[r + 1, c], out[r, c + 1], out[r, c]
        p = a + b - cc
        pa, pb, pc = np.abs(p - a), np.abs(p - b), np.abs(p - cc)
        paeth = np.where((pa <= pb) & (pa <= pc), a, np.where(pb <= pc, b, cc))
        f = filters[r][:, None]
        pred = np.select([f == 1, f == 2, f == 3, f == 4], [a, b, (a + b) // 2, paeth], 0)
        out[r + 1, c + 1] = (x[r, c] + pred) & 0xFF
    return out[1:, 1:].astype(np.uint8)


def _chromium() -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    assert exe, "chromium is not on PATH: `bash .ci/setup` installs it (Debian package chromium)"
    return exe


def test_chromium_renders_tables_and_plots(rows, page, tmp_path):
    exe = _chromium()
    path = tmp_path / "report.html"
    path.write_text(page, encoding="utf-8")
    png = tmp_path / "shot.png"
    common = [exe, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={tmp_path / 'profile'}"]
    # stderr carries harmless warnings (no D-Bus in a container): only the exit status and the outputs count
    shot = subprocess.run(common + [f"--screenshot={png}", "--window-size=1400,3000", path.as_uri()],
                          capture_output=True, timeout=60)
    assert shot.returncode == 0, shot.stderr[-2000:]
    pixels = _png_pixels(png.read_bytes())
    assert pixels.shape[:2] == (3000, 1400)
    rgb = pixels[..., :3].astype(np.int32)
    differs = np.any(rgb != rgb[0, 0], axis=-1).mean()
    assert differs > 0.01, f"only {differs:.2%} of the screenshot differs from its first pixel"
    # the plots drew: pixels of matplotlib's first two cycle colours (#1f77b4, #ff7f0e), which the
    # page's own CSS does not use, one per platform
    for colour in ((0x1F, 0x77, 0xB4), (0xFF, 0x7F, 0x0E)):
        near = np.all(np.abs(rgb - np.array(colour)) <= 8, axis=-1).sum()
        assert near > 200, f"{near} pixels of {colour}: a plot did not render"

    dom = subprocess.run(common + ["--dump-dom", path.as_uri()], capture_output=True, timeout=60, text=True)
    assert dom.returncode == 0, dom.stderr[-2000:]
    p = _parse(dom.stdout)
    assert p.counts.get("table") == N_TABLES and p.counts.get("svg") == N_SVG
    assert p.counts.get("path", 0) > 50  # the plots' lines, bars and axes survive in the DOM
    text = "".join(p.text)
    assert all(r["problem"] in text for r in rows)


def test_png_decoder():
    # The decoder above against a PNG whose pixels are known: made here with zlib, every filter type.
    rng = np.random.default_rng(0)
    img = rng.integers(0, 256, (9, 7, 4), dtype=np.int32)
    lines, prev = [], np.zeros((7, 4), dtype=np.int32)
    for i, row in enumerate(img):
        f = i % 5
        left = np.vstack([np.zeros((1, 4), np.int32), row[:-1]])
        upleft = np.vstack([np.zeros((1, 4), np.int32), prev[:-1]])
        p = left + prev - upleft
        pa, pb, pc = np.abs(p - left), np.abs(p - prev), np.abs(p - upleft)
        paeth = np.where((pa <= pb) & (pa <= pc), left, np.where(pb <= pc, prev, upleft))
        pred = [0, left, prev, (left + prev) // 2, paeth][f]
        lines.append(bytes([f]) + ((row - pred) & 0xFF).astype(np.uint8).tobytes())
        prev = row

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    data = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 7, 9, 8, 6, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(b"".join(lines))) + chunk(b"IEND", b""))
    assert np.array_equal(_png_pixels(data), img.astype(np.uint8))
