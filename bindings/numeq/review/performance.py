"""The performance part of a port review: a roofline of each neuron-profile summary against the
target's table, and the claimed speedup against repeated timings (median ratio after outlier
removal, with a bootstrap interval).

What the inputs are, and where that is written down
----------------------------------------------------

neuron-profile summaries (``neuron-profile view -n file.neff -s profile.ntff
--output-format summary-json``):

- Shape. nki-library's benchmark harness (aws-neuron/nki-library,
  ``test/utils/metrics_collector.py``, ``_parse_ntff_json``) reads the file as
  ``{"n_<hash>": {...}}``, a dict keyed by the profile's bucket name whose single value is the
  summary, and takes the first value. The ``--output-format json`` form carries the same
  summary as ``{"summary": [{...}], "instruction": [...], ...}`` (aws-neuron-sdk
  ``tools/profiler/neuron-profile-user-guide.rst``, "JSON"). Neither shape is specified
  formally, so ``load_profile`` accepts the flat summary dict, a dict whose single value holds
  it, a ``"summary"`` entry (a dict or a list of one dict) and a list of one dict; several
  candidate summaries are refused as ambiguous.
- Fields. AWS documents ``total_time`` in seconds (the user guide's example prints
  ``total_time 0.017`` for "17 ms"), ``event_count``, ``nc_idx`` and ``nd_idx``; nki-library
  reads ``total_time`` (as seconds), ``hardware_flops``, ``transpose_flops`` (its MFU subtracts
  them: the Tensor Engine executes transposes as matmuls) and ``mbu_estimated_percent``. The
  other names are those of the profiler's summary table as public scripts and notes reprint it
  (not an AWS reference): ``model_flops``, ``hbm_read_bytes``, ``hbm_write_bytes`` (bytes),
  ``{tensor,vector,scalar,gpsimd}_engine_active_time_percent``, ``dma_active_time_percent``,
  ``mfu_estimated_percent``, ``mm_arithmetic_intensity`` (FLOP/byte) and
  ``peak_flops_bandwidth_ratio`` (the tool's ridge point, FLOP/byte). Everything else
  (``event_count``, ``nc_idx``, ``instance_type``, ``hfu_estimated_percent``, ...) is kept in
  ``ProfileSummary.extra``. Newer tools (Neuron Explorer) write Parquet instead; not read here.
- Percent fields. nki-library multiplies ``mbu_estimated_percent`` by 100 before recording it
  as a percent, so the JSON carries a fraction of 1 despite the name; the summary-text view
  prints the same values with a "%" sign. Not documented either way, so ``load_profile`` takes
  ``percent_scale``: "fraction", "percent", or "auto" (the default): a file whose percent
  fields are all <= 1 is read as fractions, one with any value above 1 as percents. The
  choice is recorded in ``ProfileSummary.percent_scale`` and in the evidence of the profile's
  verdict: a kernel under 1% everywhere, written in percent, would be read 100x too busy.
- The summary carries no peak FLOP/s or bandwidth; its ``peak_flops_bandwidth_ratio`` is the
  only hardware figure, and where present it is the roofline's ridge point (the profile wins
  over the table), the bandwidth then derived as the table's peak / that ratio.

Thresholds: nki_perf_guide (aws-neuron-sdk ``nki/guides/nki_perf_guide.rst``, in the target
tables as ``compute_bound_active_percent`` = 90 and ``memory_bound_mbu_percent`` = 60): an
engine active >= 90% of the time is the bottleneck; MBU >= 60% is memory-bound.

Repeated timings: nki-library's ``_iqr_filtered_average`` (same file) computes Q1 and Q3 with
``np.percentile`` (linear interpolation between order statistics: Hyndman-Fan type 7, equal to
Python's ``statistics.quantiles(method="inclusive")``), the median, QCD = IQR / median (it
records QCD x 100), and keeps the samples within [Q1 - 1.5 IQR, Q3 + 1.5 IQR], once, from the
quartiles of all samples. ``timing_stats`` does the same and reports QCD as a ratio (and x 100
as ``qcd_percent``). KernelBench calls a speedup above 2x "highly unlikely" without scrutiny;
such claims and measurements are flagged.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

import numpy as np

from ..nki.machine import targets as _targets
from .findings import ReviewFinding
from .model import Performance

__all__ = ["FAR_BELOW_ATTAINABLE", "IQR_FENCE", "MIN_SAMPLES", "NOISY_QCD", "SCRUTINY_SPEEDUP", "ProfileSummary",
           "assess", "load_profile", "profile_verdict", "roofline", "speedup", "timing_stats"]

# A series whose middle half spans more than 10% of its median (QCD > 0.1; for normal noise
# IQR = 1.349 sigma, so a coefficient of variation of about 7.4%) cannot resolve speedups of
# that order run to run; the interval still says what the timings support, the flag says why
# it is wide.
NOISY_QCD = 0.1
# Fewer samples than this per series: quartiles and a bootstrap of the median mean little.
MIN_SAMPLES = 5
# KernelBench: a speedup above 2x is "highly unlikely" without scrutiny.
SCRUTINY_SPEEDUP = 2.0
# A kernel below this fraction of its attainable (roofline) FLOP/s is far from the hardware.
FAR_BELOW_ATTAINABLE = 0.10
# Tukey's fences, as nki-library uses them.
IQR_FENCE = 1.5

_MEASURED = "measured: neuron-profile summary"
_KERNELBENCH = "KernelBench (a > 2x speedup is 'highly unlikely' without scrutiny)"
_NKI_LIBRARY = "nki-library test/utils/metrics_collector.py (1.5 IQR fences, QCD = IQR / median)"

_ENGINES = ("tensor", "vector", "scalar", "gpsimd")
_PERCENT_FIELDS = tuple(f"{e}_engine_active_time_percent" for e in _ENGINES) + (
    "dma_active_time_percent", "mfu_estimated_percent", "mbu_estimated_percent")
_COUNT_FIELDS = ("hardware_flops", "transpose_flops", "model_flops", "hbm_read_bytes", "hbm_write_bytes",
                 "mm_arithmetic_intensity", "peak_flops_bandwidth_ratio")
_UNIT_SECONDS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}


@dataclass(frozen=True)
class ProfileSummary:
    """One neuron-profile summary: ``total_time`` in seconds, FLOP and byte counts, engine
    activity and MFU/MBU in percent (0-100, whatever ``percent_scale`` the file used), the
    tool's arithmetic intensity and ridge point; None where the file lacks the field. ``key``:
    the bucket name the summary sat under, if any; ``extra``: every other field, unchanged."""

    path: str
    total_time: float
    hardware_flops: float | None = None
    transpose_flops: float | None = None
    model_flops: float | None = None
    hbm_read_bytes: float | None = None
    hbm_write_bytes: float | None = None
    tensor_engine_active_time_percent: float | None = None
    vector_engine_active_time_percent: float | None = None
    scalar_engine_active_time_percent: float | None = None
    gpsimd_engine_active_time_percent: float | None = None
    dma_active_time_percent: float | None = None
    mfu_estimated_percent: float | None = None
    mbu_estimated_percent: float | None = None
    mm_arithmetic_intensity: float | None = None
    peak_flops_bandwidth_ratio: float | None = None
    percent_scale: str = "none"
    key: str | None = None
    extra: dict = field(default_factory=dict)

    @property
    def hbm_bytes(self) -> float | None:
        """HBM bytes read plus written; None if either count is missing."""
        if self.hbm_read_bytes is None or self.hbm_write_bytes is None:
            return None
        return self.hbm_read_bytes + self.hbm_write_bytes

    def to_dict(self) -> dict:
        return asdict(self)


# ---------------------------------------------------------------------------------------------
# Loading a summary
# ---------------------------------------------------------------------------------------------
def _find_summary(data: Any, path: str, where: str = "top level") -> tuple[dict, str | None]:
    """The summary dict inside ``data`` and the key it sat under (see the module docstring)."""
    if isinstance(data, list):
        if len(data) == 1:
            return _find_summary(data[0], path, f"{where}[0]")
        raise ValueError(f"{path}: {where}: expected one profile summary, found a list of {len(data)} entries")
    if not isinstance(data, dict):
        raise ValueError(f"{path}: {where}: expected a JSON object holding a neuron-profile summary, "
                         f"found {type(data).__name__}")
    if "total_time" in data:
        return data, None
    if "summary" in data:
        return _find_summary(data["summary"], path, f"{where}.summary")
    if len(data) == 1:
        (key, value), = data.items()
        if isinstance(value, (dict, list)):
            inner, inner_key = _find_summary(value, path, f"{where}[{key!r}]")
            return inner, inner_key if inner_key is not None else str(key)
    keys = ", ".join(repr(k) for k in list(data)[:8])
    raise ValueError(f"{path}: {where}: field 'total_time': missing; expected a neuron-profile summary "
                     f"(summary-json: {{\"n_<hash>\": {{\"total_time\": ...}}}}), found keys: {keys or 'none'}")


def _number(path: str, summary: dict, name: str, *, positive: bool = False) -> float | None:
    if name not in summary or summary[name] is None:
        return None
    v = summary[name]
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ValueError(f"{path}: field {name!r}: expected a number, found {type(v).__name__} {v!r:.40}")
    try:
        x = float(v)
    except OverflowError:
        raise ValueError(f"{path}: field {name!r}: {v!r:.40} is out of range") from None
    if not math.isfinite(x):
        raise ValueError(f"{path}: field {name!r}: {x} is not finite")
    if x < 0:
        raise ValueError(f"{path}: field {name!r}: {x} is negative; it must be >= 0")
    if positive and x == 0:
        raise ValueError(f"{path}: field {name!r}: is 0; it must be > 0")
    return x


def load_profile(path: str | os.PathLike, *, percent_scale: str = "auto") -> ProfileSummary:
    """Read a neuron-profile summary-json file. ``percent_scale``: "fraction" (the percent
    fields hold fractions of 1, as nki-library reads ``mbu_estimated_percent``), "percent", or
    "auto" (fractions unless some percent field exceeds 1). Raises ValueError naming the file
    and the field for anything else than a well-formed summary."""
    if percent_scale not in ("auto", "fraction", "percent"):
        raise ValueError(f"percent_scale: {percent_scale!r} is not one of auto, fraction, percent")
    p = os.fspath(path)
    try:
        with open(p, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise ValueError(f"{p}: cannot read the neuron-profile summary: {e.strerror or e}") from None
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise ValueError(f"{p}: not UTF-8 text (byte {e.start}): not a neuron-profile summary-json file") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"{p}: malformed JSON at line {e.lineno} column {e.colno}: {e.msg}") from None
    except ValueError as e:  # e.g. an integer literal longer than Python's digit limit
        raise ValueError(f"{p}: malformed JSON: {e}") from None
    except RecursionError:
        raise ValueError(f"{p}: JSON nested too deeply to be a neuron-profile summary") from None
    try:
        summary, key = _find_summary(data, p)
    except RecursionError:
        raise ValueError(f"{p}: JSON nested too deeply to be a neuron-profile summary") from None

    values: dict[str, float | None] = {"total_time": _number(p, summary, "total_time", positive=True)}
    if values["total_time"] is None:  # a JSON null: the run's time is the one field a summary must carry
        raise ValueError(f"{p}: field 'total_time': null; it must be the run's time in seconds (> 0)")
    for name in _COUNT_FIELDS:
        values[name] = _number(p, summary, name)
    raw_pct = {name: _number(p, summary, name) for name in _PERCENT_FIELDS}
    present = {k: v for k, v in raw_pct.items() if v is not None}
    scale = percent_scale
    if scale == "auto":
        scale = "none" if not present else ("percent" if any(v > 1.0 for v in present.values()) else "fraction")
    factor = 100.0 if scale == "fraction" else 1.0
    for name, v in raw_pct.items():
        if v is not None:
            pct = v * factor
            limit = 1.0 if scale == "fraction" else 100.0
            if pct > 100.0:
                raise ValueError(f"{p}: field {name!r}: {v} exceeds {limit:g} ({scale} scale)")
            values[name] = pct
        else:
            values[name] = None
    extra = {k: v for k, v in summary.items() if k not in values}
    return ProfileSummary(path=p, percent_scale=scale, key=key, extra=extra, **values)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------
# Roofline
# ---------------------------------------------------------------------------------------------
def _q(value: float | None, unit: str, evidence: str) -> dict:
    return {"value": value, "unit": unit, "evidence": evidence}


def _resolve_target(t: str | _targets.Target) -> _targets.Target:
    return t if isinstance(t, _targets.Target) else _targets.target(t)


def profile_verdict(summary: ProfileSummary, target: str | _targets.Target) -> dict | None:
    """The profile's own verdict by the nki_perf_guide thresholds: compute-bound when an engine
    is active at least ``compute_bound_active_percent`` of the time, memory-bound when MBU is at
    least ``memory_bound_mbu_percent``; None when the summary has neither field."""
    t = _resolve_target(target)
    active = {e: getattr(summary, f"{e}_engine_active_time_percent") for e in _ENGINES}
    active = {e: v for e, v in active.items() if v is not None}
    mbu = summary.mbu_estimated_percent
    if not active and mbu is None:
        return None
    c_spec, m_spec = t.spec("compute_bound_active_percent"), t.spec("memory_bound_mbu_percent")
    busiest = max(active, key=active.get) if active else None
    compute = busiest is not None and active[busiest] >= c_spec.value
    memory = mbu is not None and mbu >= m_spec.value
    parts = []
    if compute:
        parts.append(f"compute-bound ({busiest} engine active {active[busiest]:.1f}% >= {c_spec.value:g}%)")
    if memory:
        parts.append(f"memory-bound (MBU {mbu:.1f}% >= {m_spec.value:g}%)")
    if not parts:
        why = []
        if busiest is not None:
            why.append(f"busiest engine {busiest} {active[busiest]:.1f}% < {c_spec.value:g}%")
        if mbu is not None:
            why.append(f"MBU {mbu:.1f}% < {m_spec.value:g}%")
        parts.append("neither compute- nor memory-bound by the profile (" + "; ".join(why) +
                     "): latency, dependencies or instruction overhead dominate")
    return {"verdict": "; ".join(parts), "compute_bound": compute, "memory_bound": memory,
            "busiest_engine": busiest, "engine_active_percent": active, "mbu_percent": mbu,
            "mfu_percent": summary.mfu_estimated_percent, "dma_active_percent": summary.dma_active_time_percent,
            "evidence": f"{_MEASURED} (percent fields read as {summary.percent_scale}); thresholds {c_spec.cite()}"}


def roofline(summary: ProfileSummary, target: str | _targets.Target, dtype: str) -> dict:
    """The roofline point of one profile on ``target`` for Tensor Engine inputs of ``dtype``:
    achieved FLOP/s and HBM bytes/s, arithmetic intensity, ridge point, the bound, the
    attainable FLOP/s = min(peak, AI x bandwidth) and the achieved fraction of it; each a dict
    (value, unit, evidence). ``hardware_flops`` counts what the Tensor Engine executed,
    transposes included (``useful_flops_per_s`` leaves them out, as nki-library's MFU does)."""
    t = _resolve_target(target)
    peak = _targets.peak_flops(t, dtype)
    bw_spec = t.spec("hbm_bytes_per_s")
    notes: list[str] = []
    T = summary.total_time
    out: dict[str, Any] = {"target": t.name, "dtype": dtype, "path": summary.path,
                           "total_time": _q(T, "s", _MEASURED),
                           "peak_flops": _q(peak.value, "FLOP/s", peak.cite())}
    if summary.peak_flops_bandwidth_ratio:
        ridge = summary.peak_flops_bandwidth_ratio
        bw = peak.value / ridge
        out["ridge_source"] = "profile"
        out["ridge"] = _q(ridge, "FLOP/B", f"{_MEASURED} (peak_flops_bandwidth_ratio)")
        out["bandwidth"] = _q(bw, "B/s", f"derived: {peak.cite()} / the profile's peak_flops_bandwidth_ratio")
        rel = abs(bw / bw_spec.value - 1.0)
        if rel > 0.25:
            notes.append(f"the profile's ridge point implies {bw / 1e9:.0f} GB/s for {dtype}, the table's per-core "
                         f"share is {bw_spec.value / 1e9:.0f} GB/s ({bw_spec.evidence}); the profile's ratio may be "
                         f"for another input type")
    else:
        bw = bw_spec.value
        ridge = peak.value / bw
        out["ridge_source"] = "table"
        out["bandwidth"] = _q(bw, "B/s", bw_spec.cite())
        out["ridge"] = _q(ridge, "FLOP/B", f"derived: peak / bandwidth ({peak.cite()}; {bw_spec.cite()})")
    flops, nbytes = summary.hardware_flops, summary.hbm_bytes
    out["achieved_flops_per_s"] = _q(None if flops is None else flops / T, "FLOP/s",
                                     f"{_MEASURED} (hardware_flops / total_time)")
    useful = None if flops is None else max(flops - (summary.transpose_flops or 0.0), 0.0) / T
    out["useful_flops_per_s"] = _q(useful, "FLOP/s", f"{_MEASURED} ((hardware_flops - transpose_flops) / total_time)")
    out["achieved_bytes_per_s"] = _q(None if nbytes is None else nbytes / T, "B/s",
                                     f"{_MEASURED} ((hbm_read_bytes + hbm_write_bytes) / total_time)")
    out["bandwidth_fraction"] = _q(None if nbytes is None else nbytes / T / bw, "1",
                                   "derived: achieved bytes/s / bandwidth")
    ai = attainable = fraction = None
    bound = None
    if flops is None or nbytes is None:
        notes.append("roofline not assessed: the profile lacks " +
                     " and ".join(n for n, v in (("hardware_flops", flops), ("hbm_read_bytes / hbm_write_bytes", nbytes))
                                  if v is None))
    elif nbytes == 0 and flops == 0:
        notes.append("no roofline point: the summary counts neither FLOPs nor HBM bytes")
    else:
        ai = math.inf if nbytes == 0 else flops / nbytes
        bound = "compute" if ai >= ridge else "memory"
        attainable = peak.value if math.isinf(ai) else min(peak.value, ai * bw)
        fraction = (flops / T) / attainable if attainable > 0 else None
    out["arithmetic_intensity"] = _q(ai, "FLOP/B", f"{_MEASURED} (hardware_flops / HBM bytes)")
    if summary.mm_arithmetic_intensity is not None:
        out["profile_arithmetic_intensity"] = _q(summary.mm_arithmetic_intensity, "FLOP/B",
                                                 f"{_MEASURED} (mm_arithmetic_intensity)")
    out["bound"] = bound
    out["attainable_flops_per_s"] = _q(attainable, "FLOP/s", "derived: min(peak, arithmetic intensity x bandwidth)")
    out["fraction_of_attainable"] = _q(fraction, "1", "derived: achieved FLOP/s / attainable FLOP/s")
    out["profile_verdict"] = profile_verdict(summary, t)
    out["notes"] = notes
    return out


# ---------------------------------------------------------------------------------------------
# Timing statistics
# ---------------------------------------------------------------------------------------------
def _samples(samples: Sequence[float], name: str) -> np.ndarray:
    try:
        x = np.asarray(samples, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{name}: expected a sequence of timings (numbers), got {samples!r:.60}") from None
    if x.ndim != 1 or x.size == 0:
        raise ValueError(f"{name}: expected a non-empty one-dimensional sequence of timings, got shape {x.shape}")
    if not np.all(np.isfinite(x)) or np.any(x <= 0):
        bad = x[~(np.isfinite(x) & (x > 0))][0]
        raise ValueError(f"{name}: every timing must be finite and > 0; found {bad}")
    return x


def timing_stats(samples: Sequence[float], *, name: str = "samples") -> dict:
    """nki-library's statistics of one timing series: n, median, Q1, Q3 (linear interpolation,
    ``np.percentile``'s default), IQR, QCD = IQR / median (and x 100), the 1.5 IQR fences, the
    samples kept and the outliers removed, and the median and QCD of those kept."""
    x = _samples(samples, name)
    q1, med, q3 = (float(v) for v in np.percentile(x, [25.0, 50.0, 75.0]))
    iqr = q3 - q1
    lo, hi = q1 - IQR_FENCE * iqr, q3 + IQR_FENCE * iqr
    keep = (x >= lo) & (x <= hi)
    kept, outliers = x[keep], x[~keep]
    kq1, kmed, kq3 = (float(v) for v in np.percentile(kept, [25.0, 50.0, 75.0]))
    return {"n": int(x.size), "median": med, "q1": q1, "q3": q3, "iqr": iqr, "qcd": iqr / med,
            "qcd_percent": 100.0 * iqr / med, "lower_fence": lo, "upper_fence": hi,
            "outlier_count": int(outliers.size), "outliers": outliers.tolist(), "kept": kept.tolist(),
            "n_kept": int(kept.size), "median_kept": kmed, "qcd_kept": (kq3 - kq1) / kmed,
            "samples": x.tolist(), "method": "linear (Hyndman-Fan 7, np.percentile default)",
            "evidence": _NKI_LIBRARY}


def _bootstrap_medians(x: np.ndarray, rng: np.random.Generator, resamples: int) -> np.ndarray:
    out = np.empty(resamples)
    block = max(1, 2_000_000 // x.size)  # bound the index array's memory
    for s in range(0, resamples, block):
        r = min(block, resamples - s)
        out[s:s + r] = np.median(x[rng.integers(0, x.size, size=(r, x.size))], axis=1)
    return out


_PLOT_QUANTILES = (0.005, 0.025, 0.05, 0.25, 0.5, 0.75, 0.95, 0.975, 0.995)


def speedup(baseline: Sequence[float], candidate: Sequence[float], claimed: float | None, *,
            confidence: float = 0.95, resamples: int = 10000, seed: int = 0,
            noise_qcd: float = NOISY_QCD, min_samples: int = MIN_SAMPLES) -> dict:
    """The speedup baseline / candidate the timings support: the ratio of the medians after
    outlier removal, and a percentile bootstrap interval at ``confidence`` (each series
    resampled independently, ``resamples`` times, ``numpy.random.default_rng(seed)``).
    ``verdict``: "demonstrated" (the interval's lower end reaches the claim), "not demonstrated"
    (the claim lies inside the interval: ``chance``, the share of bootstrap ratios that reach it,
    says how likely the timings make it), "not supported" (above the interval), "no claim", or
    "not assessed" (a series has fewer than ``min_samples`` timings). ``flags``: noisy series (QCD > ``noise_qcd``),
    outliers removed, a speedup above 2x (claimed or measured) needing scrutiny."""
    if not (isinstance(confidence, (int, float)) and 0.0 < confidence < 1.0):
        raise ValueError(f"confidence: {confidence!r} must lie strictly between 0 and 1 (e.g. 0.95)")
    if isinstance(resamples, bool) or not isinstance(resamples, (int, np.integer)) or resamples < 100:
        raise ValueError(f"resamples: {resamples!r} must be an integer >= 100")
    if claimed is not None and (isinstance(claimed, bool) or not isinstance(claimed, (int, float))
                                or not math.isfinite(claimed) or claimed <= 0):
        raise ValueError(f"claimed: {claimed!r} must be a finite speedup > 0 (baseline time / candidate time) or None")
    b = timing_stats(baseline, name="baseline")
    c = timing_stats(candidate, name="candidate")
    ratio = b["median_kept"] / c["median_kept"]
    out: dict[str, Any] = {"claimed": claimed, "ratio": ratio, "confidence": confidence, "baseline": b,
                           "candidate": c, "resamples": int(resamples), "seed": seed, "interval": None,
                           "bootstrap_quantiles": None, "bootstrap_histogram": None, "flags": []}
    flags: list[dict] = out["flags"]
    for label, s in (("baseline", b), ("candidate", c)):
        if s["qcd"] > noise_qcd:
            flags.append({"flag": "noisy", "series": label, "qcd": s["qcd"],
                          "message": f"{label} timings are noisy: QCD {s['qcd']:.3f} > {noise_qcd:g}"})
        if s["outlier_count"]:
            flags.append({"flag": "outliers", "series": label, "count": s["outlier_count"],
                          "message": f"{s['outlier_count']} of {s['n']} {label} timings outside the 1.5 IQR "
                                     f"fences [{s['lower_fence']:.6g}, {s['upper_fence']:.6g}] removed"})
    large = [v for v in (claimed, ratio) if v is not None and v > SCRUTINY_SPEEDUP]
    if large:
        flags.append({"flag": "scrutiny", "value": max(large),
                      "message": f"a speedup above {SCRUTINY_SPEEDUP:g}x ({max(large):.2f}x) needs scrutiny: "
                                 f"{_KERNELBENCH}"})
    small = [lbl for lbl, s in (("baseline", b), ("candidate", c)) if s["n_kept"] < min_samples]
    if small:
        out["verdict"] = "not assessed"
        out["reason"] = (f"fewer than {min_samples} timings (after outlier removal) in: {', '.join(small)}; "
                         f"a median's interval needs more")
        return out
    rng = np.random.default_rng(seed)
    mb = _bootstrap_medians(np.asarray(b["kept"]), rng, int(resamples))
    mc = _bootstrap_medians(np.asarray(c["kept"]), rng, int(resamples))
    ratios = mb / mc
    alpha = 1.0 - confidence
    lo, hi = (float(v) for v in np.quantile(ratios, [alpha / 2.0, 1.0 - alpha / 2.0]))
    out["interval"] = (lo, hi)
    out["bootstrap_quantiles"] = {str(p): float(v) for p, v in zip(_PLOT_QUANTILES, np.quantile(ratios, _PLOT_QUANTILES))}
    counts, edges = np.histogram(ratios, bins=40)
    out["bootstrap_histogram"] = {"counts": counts.tolist(), "edges": edges.tolist()}
    if claimed is None:
        out["verdict"] = "no claim"
        return out
    # The chance the ratio reaches the claim, as the bootstrap distribution of the medians' ratio
    # puts it (a claim is a lower bound on the speedup: the timings must show at least that much).
    out["chance"] = float(np.mean(ratios >= claimed))
    if claimed > hi:
        out["verdict"] = "not supported"
    elif claimed <= lo:
        out["verdict"] = "demonstrated"
    else:
        out["verdict"] = "not demonstrated"
    return out


# ---------------------------------------------------------------------------------------------
# The review's findings
# ---------------------------------------------------------------------------------------------
_CRIT = "performance_claim"


def _claim_findings(perf: Performance, sp: dict, subject: str) -> list[ReviewFinding]:
    f: list[ReviewFinding] = []
    ev = f"measured: {sp['baseline']['n']} + {sp['candidate']['n']} timings; {_NKI_LIBRARY}; percentile bootstrap"
    lvl = f"{100 * sp['confidence']:g}%"
    v = sp["verdict"]
    if v == "not assessed":
        msg = f"speedup not assessed: {sp['reason']} (median ratio {sp['ratio']:.3f})"
        f.append(ReviewFinding(_CRIT, "info", "claimed_speedup", subject, msg, ev))
    else:
        lo, hi = sp["interval"]
        body = f"median ratio {sp['ratio']:.3f}x, {lvl} interval [{lo:.3f}, {hi:.3f}]"
        if v == "no claim":
            f.append(ReviewFinding(_CRIT, "info", "claimed_speedup", subject, f"no speedup claimed; the timings show {body}", ev))
        elif v == "demonstrated":
            f.append(ReviewFinding(_CRIT, "pass", "claimed_speedup", subject,
                             f"claimed {perf.claimed_speedup:g}x is demonstrated: the interval's lower end {lo:.3f}x "
                             f"reaches it; {body}", ev))
        elif v == "not supported":
            f.append(ReviewFinding(_CRIT, "fail", "claimed_speedup", subject,
                             f"claimed {perf.claimed_speedup:g}x is not supported by the evidence: {body} (the ratio "
                             f"reaches it in {sp['chance']:.1%} of the bootstrap resamples)", ev))
        else:
            f.append(ReviewFinding(_CRIT, "fail", "claimed_speedup", subject,
                             f"claimed {perf.claimed_speedup:g}x is not demonstrated: it lies inside the interval, "
                             f"and the ratio reaches it in {sp['chance']:.1%} of the bootstrap resamples; {body}", ev))
    for fl in sp["flags"]:
        if fl["flag"] == "noisy":
            f.append(ReviewFinding(_CRIT, "warn", "timing_noise", f"{subject}: {fl['series']}", fl["message"] +
                             f" (the middle half of the runs spans more than {100 * NOISY_QCD:g}% of the median)",
                             _NKI_LIBRARY))
        elif fl["flag"] == "outliers":
            f.append(ReviewFinding(_CRIT, "info", "timing_outliers", f"{subject}: {fl['series']}", fl["message"], _NKI_LIBRARY))
        else:
            f.append(ReviewFinding(_CRIT, "warn", "large_speedup", subject, fl["message"], f"documented: {_KERNELBENCH}"))
    return f


def _profile_findings(label: str, path: str, r: dict) -> list[ReviewFinding]:
    subject = f"profile {label} ({path})"
    f: list[ReviewFinding] = []
    frac = r["fraction_of_attainable"]["value"]
    if r["bound"] is None:
        f.append(ReviewFinding(_CRIT, "info", "roofline", subject, "; ".join(r["notes"]) or "no roofline point", _MEASURED))
    else:
        ach, att = r["achieved_flops_per_s"]["value"], r["attainable_flops_per_s"]["value"]
        ai = r["arithmetic_intensity"]["value"]
        msg = (f"{r['bound']}-bound by the roofline (arithmetic intensity {ai:.4g} FLOP/B, ridge "
               f"{r['ridge']['value']:.4g} FLOP/B from the {r['ridge_source']}); achieved {ach / 1e12:.4g} TFLOP/s of "
               f"{att / 1e12:.4g} attainable ({100 * frac:.1f}%) on {r['target']} {r['dtype']}")
        if r["notes"]:
            msg += "; " + "; ".join(r["notes"])
        status = "warn" if frac < FAR_BELOW_ATTAINABLE else "info"
        if status == "warn":
            msg += f"; below {100 * FAR_BELOW_ATTAINABLE:g}% of attainable"
        ev = (f"{_MEASURED}; peak {r['peak_flops']['evidence']}; bandwidth {r['bandwidth']['evidence']}")
        f.append(ReviewFinding(_CRIT, status, "roofline", subject, msg, ev))
    pv = r["profile_verdict"]
    if pv is not None:
        f.append(ReviewFinding(_CRIT, "info", "profile_bound", subject, pv["verdict"], pv["evidence"]))
    return f


def assess(perf: Performance, target: str | _targets.Target, *, dtype: str,
           base_dir: str | os.PathLike = ".") -> tuple[list[ReviewFinding], dict]:
    """Review the performance evidence: the claimed speedup against the timings, a roofline of
    each profile (paths relative to ``base_dir``), and, with a baseline and a candidate profile,
    their time ratio against the timings' interval. Returns the findings (criterion
    "performance_claim") and every number the report and its plots use. A profile that cannot
    be read raises ValueError naming the file and field."""
    if not isinstance(perf, Performance):
        raise ValueError(f"perf: expected numeq.review.model.Performance, got {type(perf).__name__}")
    t = _resolve_target(target)
    _targets.peak_flops(t, dtype)  # validates dtype before anything is read
    findings: list[ReviewFinding] = []
    data: dict[str, Any] = {"target": t.name, "dtype": dtype, "claimed_speedup": perf.claimed_speedup,
                            "timings": None, "profiles": {}}
    sp = None
    tm = perf.timings
    if tm is None:
        msg = ("no timings supplied: the claimed speedup "
               f"{perf.claimed_speedup:g}x is not assessed" if perf.claimed_speedup is not None
               else "no timings and no claimed speedup: not assessed")
        findings.append(ReviewFinding(_CRIT, "info", "claimed_speedup", "timings", msg, "measured: nothing supplied"))
    else:
        if tm.unit not in _UNIT_SECONDS:
            raise ValueError(f"timings.unit: {tm.unit!r} is not one of {', '.join(_UNIT_SECONDS)}")
        sp = speedup(tm.baseline, tm.candidate, perf.claimed_speedup, confidence=perf.confidence)
        subject = f"timings {tm.baseline_label} / {tm.candidate_label}"
        findings += _claim_findings(perf, sp, subject)
        data["timings"] = {"unit": tm.unit, "baseline_label": tm.baseline_label,
                           "candidate_label": tm.candidate_label, "speedup": sp}
    base = os.fspath(base_dir)
    for p in perf.profiles:
        path = p.path if os.path.isabs(p.path) else os.path.join(base, p.path)
        s = load_profile(path)
        r = roofline(s, t, dtype)
        label = p.label
        while label in data["profiles"]:  # two profiles of one label: keep both
            label += "'"
        data["profiles"][label] = {"summary": s.to_dict(), "roofline": r}
        findings += _profile_findings(label, p.path, r)  # the manifest's path, as the author wrote it
    profs = data["profiles"]
    if "baseline" in profs and "candidate" in profs:
        pr = profs["baseline"]["summary"]["total_time"] / profs["candidate"]["summary"]["total_time"]
        data["profile_ratio"] = pr
        msg = f"the profiles' total_time ratio baseline / candidate is {pr:.3f}x (one profiled run each)"
        if sp is not None and sp["interval"] is not None:
            lo, hi = sp["interval"]
            where = "inside" if lo <= pr <= hi else "outside"
            msg += f", {where} the timings' interval [{lo:.3f}, {hi:.3f}]"
        findings.append(ReviewFinding(_CRIT, "info", "profile_ratio", "profiles baseline / candidate", msg, _MEASURED))
    return findings, data
