"""numeq.review.performance against independent oracles: Python's ``statistics`` module and a
hand-rolled Hyndman-Fan type 7 quantile for the quartiles, roofline numbers worked by hand from
FACTS s3's table (typed here, not read from numeq's tables), synthetic timing series with a
known true speedup (the bootstrap interval's coverage over seeded experiments), injected
outliers, and a fuzz of the profile loader (only ValueError may escape).

``NUMEQ_LONG_TESTS=1``: the coverage check with 10000 resamples over 1000 experiments and a
longer fuzz.
"""

from __future__ import annotations

import json
import math
import os
import random
import statistics

import numpy as np
import pytest

from numeq.review import performance as P
from numeq.review.findings import ReviewFinding
from numeq.review.model import Performance, Profile, Timings

LONG = os.environ.get("NUMEQ_LONG_TESTS") == "1"

# FACTS s3 table, typed by hand: trn1 (NeuronCore-v2) 92 TFLOPS bf16, 23 fp32, HBM 820 GB/s per
# chip of 2 cores; trn2 (NeuronCore-v3) 79 bf16, 158 fp8, HBM 2.9 TB/s per chip of 8 cores.
TRN1_BF16 = 92e12
TRN1_FP32 = 23e12
TRN1_BW = 820e9 / 2
TRN2_FP8 = 158e12
TRN2_BW = 2.9e12 / 8


def close(a, b, rel=1e-12):
    return math.isclose(a, b, rel_tol=rel, abs_tol=0.0)


def write(tmp_path, obj, name="p.json"):
    f = tmp_path / name
    f.write_text(obj if isinstance(obj, str) else json.dumps(obj))
    return f


# ---------------------------------------------------------------------------------------------
# Quartiles, QCD, outliers
# ---------------------------------------------------------------------------------------------
def type7(xs, p):
    """Hyndman-Fan type 7 from its definition: h = (n - 1) p, interpolate x[floor h], x[ceil h]."""
    s = sorted(xs)
    h = (len(s) - 1) * p
    lo = math.floor(h)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (h - lo) * (s[hi] - s[lo])


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 7, 10, 31, 100])
def test_quartiles_match_statistics_inclusive_and_type7(n):
    rng = random.Random(n)
    xs = [rng.lognormvariate(0.0, 0.3) for _ in range(n)]
    st = P.timing_stats(xs)
    assert close(st["q1"], type7(xs, 0.25)) and close(st["q3"], type7(xs, 0.75))
    assert close(st["median"], statistics.median(xs))
    if n >= 2:
        q1, q2, q3 = statistics.quantiles(xs, n=4, method="inclusive")
        assert close(st["q1"], q1) and close(st["median"], q2) and close(st["q3"], q3)
    iqr = type7(xs, 0.75) - type7(xs, 0.25)
    assert close(st["iqr"], iqr, 1e-9) or st["iqr"] == iqr
    assert close(st["qcd"], iqr / statistics.median(xs), 1e-9)
    assert close(st["qcd_percent"], 100 * iqr / statistics.median(xs), 1e-9)


def test_outlier_fences_by_hand():
    # 1..8 and a spike: type 7 quartiles of 9 values are x[2] and x[6] (0-based) = 3 and 7, IQR 4,
    # fences 3 - 6 = -3 and 7 + 6 = 13: 13 is kept (inclusive), 13.5 is not.
    keep = P.timing_stats([1, 2, 3, 4, 5, 6, 7, 8, 13])
    assert (keep["q1"], keep["q3"], keep["upper_fence"], keep["outlier_count"]) == (3.0, 7.0, 13.0, 0)
    drop = P.timing_stats([1, 2, 3, 4, 5, 6, 7, 8, 13.5])
    assert drop["outliers"] == [13.5] and drop["n_kept"] == 8
    assert drop["median_kept"] == statistics.median([1, 2, 3, 4, 5, 6, 7, 8])


def test_ten_x_spike_is_removed():
    rng = np.random.default_rng(7)
    xs = list(1.0 * np.exp(rng.normal(0.0, 0.03, 40)))
    xs[17] = 10.0 * statistics.median(xs)
    st = P.timing_stats(xs)
    assert st["outlier_count"] >= 1 and xs[17] in st["outliers"]
    assert xs[17] not in st["kept"]
    assert close(st["median_kept"], statistics.median(st["kept"]))
    sp = P.speedup(xs, [0.5 * x for x in xs if x != xs[17]], None, resamples=500)
    assert any(f["flag"] == "outliers" and f["series"] == "baseline" for f in sp["flags"])


@pytest.mark.parametrize("bad", [[], [1.0, -1.0], [1.0, 0.0], [1.0, float("nan")], [1.0, float("inf")],
                                 [[1.0, 2.0]], ["a", "b"]])
def test_timing_stats_rejects_bad_samples(bad):
    with pytest.raises(ValueError, match="samples"):
        P.timing_stats(bad)


# ---------------------------------------------------------------------------------------------
# Speedup and its interval
# ---------------------------------------------------------------------------------------------
def series(seed, n=30, sigma=0.05):
    rng = np.random.default_rng(seed)
    base = 1.0e-3 * np.exp(rng.normal(0.0, sigma, n))  # lognormal around 1.0 ms: median 1.0 ms
    cand = 0.5e-3 * np.exp(rng.normal(0.0, sigma, n))  # around 0.5 ms: true ratio of medians 2.0
    return base, cand


def test_claim_verdicts_on_a_known_ratio():
    b, c = series(1)
    # A claim passes only when the interval's lower end reaches it: the true ratio itself lies
    # inside the interval and is not demonstrated (the ratio reaches it about half the time).
    inside = P.speedup(b, c, 2.0)
    assert inside["verdict"] == "not demonstrated" and 0.2 < inside["chance"] < 0.8, inside["chance"]
    assert P.speedup(b, c, 2.5)["verdict"] == "not supported" and P.speedup(b, c, 2.5)["chance"] < 0.01
    assert P.speedup(b, c, 1.5)["verdict"] == "demonstrated" and P.speedup(b, c, 1.5)["chance"] > 0.99
    # The chance falls as the claim rises; at the measured ratio it is about one half.
    ratio = inside["ratio"]
    chances = [P.speedup(b, c, ratio * f)["chance"] for f in (0.98, 1.0, 1.02)]
    assert chances[0] > chances[1] > chances[2] and abs(chances[1] - 0.5) < 0.1, chances
    sp = P.speedup(b, c, None)
    assert sp["verdict"] == "no claim"
    lo, hi = sp["interval"]
    assert lo < 2.0 < hi and hi - lo < 0.2
    assert close(sp["ratio"], statistics.median(sp["baseline"]["kept"]) / statistics.median(sp["candidate"]["kept"]))
    q = sp["bootstrap_quantiles"]
    assert close(q["0.025"], lo) and close(q["0.975"], hi)
    assert sum(sp["bootstrap_histogram"]["counts"]) == 10000


def test_seeded_and_deterministic():
    b, c = series(2)
    assert P.speedup(b, c, 2.0, seed=3)["interval"] == P.speedup(b, c, 2.0, seed=3)["interval"]
    assert P.speedup(b, c, 2.0, seed=3)["interval"] != P.speedup(b, c, 2.0, seed=4)["interval"]


def test_bootstrap_interval_coverage():
    """Over seeded experiments with a true ratio of medians of 2.0 the 95% interval contains 2.0
    in roughly 95% of them (binomial sd for 200 experiments: 1.5%)."""
    experiments, resamples = (1000, 10000) if LONG else (200, 1000)
    hits = 0
    for e in range(experiments):
        b, c = series(10_000 + e, n=20, sigma=0.1)
        lo, hi = P.speedup(b, c, None, resamples=resamples, seed=e)["interval"]
        hits += lo <= 2.0 <= hi
    assert 0.90 <= hits / experiments <= 0.99, hits / experiments


def test_flags_noise_few_samples_and_scrutiny():
    b, c = series(5, sigma=0.3)  # lognormal sigma 0.3: QCD = 2 sinh(0.6745 * 0.3) ~ 0.41
    sp = P.speedup(b, c, 2.0)
    noisy = {f["series"] for f in sp["flags"] if f["flag"] == "noisy"}
    assert noisy == {"baseline", "candidate"}
    assert any(f["flag"] == "scrutiny" for f in P.speedup(*series(6), 2.5)["flags"])
    quiet = P.speedup([1.0, 1.01, 0.99, 1.0, 1.02, 0.98], [0.9, 0.91, 0.89, 0.9, 0.92, 0.88], 1.1)
    assert not [f for f in quiet["flags"] if f["flag"] in ("noisy", "scrutiny")]
    few = P.speedup([1.0, 1.1, 0.9, 1.0], [0.5, 0.55, 0.45, 0.5], 2.0)
    assert few["verdict"] == "not assessed" and few["interval"] is None and "fewer than 5" in few["reason"]


@pytest.mark.parametrize("kw,match", [({"confidence": 1.0}, "confidence"), ({"confidence": 0}, "confidence"),
                                      ({"resamples": 10}, "resamples"), ({"resamples": 1.5e3}, "resamples")])
def test_speedup_rejects_bad_parameters(kw, match):
    with pytest.raises(ValueError, match=match):
        P.speedup([1.0] * 5, [0.5] * 5, 2.0, **kw)


@pytest.mark.parametrize("claim", [0.0, -1.0, float("nan"), float("inf"), True, "2"])
def test_speedup_rejects_bad_claims(claim):
    with pytest.raises(ValueError, match="claimed"):
        P.speedup([1.0] * 5, [0.5] * 5, claim)


# ---------------------------------------------------------------------------------------------
# Roofline, worked by hand
# ---------------------------------------------------------------------------------------------
def profile(tmp_path, name="p.json", **fields):
    s = {"total_time": 1e-3}
    s.update(fields)
    return P.load_profile(write(tmp_path, {"n_0123abcd": s}, name))


def test_roofline_compute_bound_trn1_bf16(tmp_path):
    s = profile(tmp_path, hardware_flops=4.6e10, hbm_read_bytes=6e7, hbm_write_bytes=4e7)
    r = P.roofline(s, "trn1", "bf16")
    # 4.6e10 FLOP in 1 ms = 46 TFLOP/s; 1e8 B in 1 ms = 100 GB/s; AI = 460 FLOP/B
    assert close(r["achieved_flops_per_s"]["value"], 46e12)
    assert close(r["achieved_bytes_per_s"]["value"], 1e11)
    assert close(r["arithmetic_intensity"]["value"], 460.0)
    assert close(r["ridge"]["value"], TRN1_BF16 / TRN1_BW)  # 224.39 FLOP/B
    assert r["bound"] == "compute" and r["ridge_source"] == "table"
    assert close(r["attainable_flops_per_s"]["value"], TRN1_BF16)
    assert close(r["fraction_of_attainable"]["value"], 46e12 / 92e12)
    assert close(r["bandwidth_fraction"]["value"], 1e11 / TRN1_BW)
    assert r["peak_flops"]["evidence"].startswith("documented:")
    assert r["bandwidth"]["evidence"].startswith("assumed:")
    assert r["achieved_flops_per_s"]["evidence"].startswith("measured: neuron-profile summary")


def test_roofline_memory_bound_trn1_fp32_and_transposes(tmp_path):
    s = profile(tmp_path, hardware_flops=1e9, transpose_flops=2e8, hbm_read_bytes=1e8, hbm_write_bytes=0)
    r = P.roofline(s, "trn1", "fp32")
    # AI = 10 FLOP/B < ridge 23e12 / 410e9 = 56.1: memory-bound; attainable = 10 x 410 GB/s
    assert r["bound"] == "memory"
    assert close(r["ridge"]["value"], TRN1_FP32 / TRN1_BW)
    assert close(r["attainable_flops_per_s"]["value"], 10 * TRN1_BW)
    assert close(r["fraction_of_attainable"]["value"], 1e12 / (10 * TRN1_BW))
    assert close(r["useful_flops_per_s"]["value"], 0.8e12)


def test_roofline_uses_the_profiles_ridge_point(tmp_path):
    s = profile(tmp_path, hardware_flops=1e10, hbm_read_bytes=5e7, hbm_write_bytes=5e7,
                peak_flops_bandwidth_ratio=223.78, mm_arithmetic_intensity=73.09)
    r = P.roofline(s, "trn1", "bf16")
    assert r["ridge_source"] == "profile" and r["ridge"]["value"] == 223.78
    assert close(r["bandwidth"]["value"], TRN1_BF16 / 223.78)
    assert r["notes"] == []  # 411 GB/s: within 25% of the per-core share
    assert r["bound"] == "memory"  # AI 100 < 223.78
    assert close(r["attainable_flops_per_s"]["value"], 100 * TRN1_BF16 / 223.78)
    assert r["profile_arithmetic_intensity"]["value"] == 73.09
    # the same ratio read for fp32 implies 103 GB/s: the roofline says so
    assert P.roofline(s, "trn1", "fp32")["notes"]


def test_roofline_trn2_fp8(tmp_path):
    s = profile(tmp_path, total_time=2e-3, hardware_flops=3.16e10, hbm_read_bytes=1e6, hbm_write_bytes=1e6)
    r = P.roofline(s, "trn2", "e4m3")
    assert close(r["ridge"]["value"], TRN2_FP8 / TRN2_BW)
    assert r["bound"] == "compute"
    assert close(r["fraction_of_attainable"]["value"], (3.16e10 / 2e-3) / TRN2_FP8)


def test_roofline_without_counts_has_no_point(tmp_path):
    r = P.roofline(profile(tmp_path), "trn2", "bf16")
    assert r["bound"] is None and r["fraction_of_attainable"]["value"] is None and r["notes"]
    with pytest.raises(ValueError, match="dtype"):
        P.roofline(profile(tmp_path), "trn2", "int4")
    with pytest.raises(ValueError, match="target"):
        P.roofline(profile(tmp_path), "trn9", "bf16")


def test_profile_verdict_thresholds(tmp_path):
    # fractions (nki-library's reading of summary-json): tensor 0.95 >= 90%, MBU 0.2 < 60%
    v = P.roofline(profile(tmp_path, tensor_engine_active_time_percent=0.95, vector_engine_active_time_percent=0.4,
                           mbu_estimated_percent=0.2), "trn1", "bf16")["profile_verdict"]
    assert v["compute_bound"] and not v["memory_bound"] and v["busiest_engine"] == "tensor"
    # percents: MBU 65 >= 60, engines below 90
    s = profile(tmp_path, tensor_engine_active_time_percent=21.21, mbu_estimated_percent=65.0)
    assert s.percent_scale == "percent" and s.mbu_estimated_percent == 65.0
    v = P.roofline(s, "trn2", "bf16")["profile_verdict"]
    assert v["memory_bound"] and not v["compute_bound"]
    v = P.roofline(profile(tmp_path, tensor_engine_active_time_percent=0.5, mbu_estimated_percent=0.3),
                   "trn2", "bf16")["profile_verdict"]
    assert not v["memory_bound"] and not v["compute_bound"] and "neither" in v["verdict"]
    assert P.roofline(profile(tmp_path), "trn2", "bf16")["profile_verdict"] is None


# ---------------------------------------------------------------------------------------------
# load_profile: shapes, validation, fuzz
# ---------------------------------------------------------------------------------------------
SUMMARY = {"total_time": 0.017, "hardware_flops": 6.36e11, "transpose_flops": 1.1e11, "hbm_read_bytes": 4.29e9,
           "hbm_write_bytes": 2.9e9, "tensor_engine_active_time_percent": 0.2121, "mbu_estimated_percent": 0.3199,
           "event_count": 539986, "instance_type": "trn1.2xlarge"}


@pytest.mark.parametrize("wrap", [lambda s: s, lambda s: {"n_fdc71a0b": s}, lambda s: {"summary": [s]},
                                  lambda s: {"summary": s, "instruction": []}, lambda s: [s],
                                  lambda s: {"n_x": {"summary": [s]}}])
def test_load_profile_shapes(tmp_path, wrap):
    s = P.load_profile(write(tmp_path, wrap(dict(SUMMARY))))
    assert s.total_time == 0.017 and s.hardware_flops == 6.36e11 and s.hbm_bytes == 4.29e9 + 2.9e9
    assert s.percent_scale == "fraction" and close(s.tensor_engine_active_time_percent, 21.21)
    assert s.extra == {"event_count": 539986, "instance_type": "trn1.2xlarge"}
    assert s.vector_engine_active_time_percent is None


def test_load_profile_percent_scale_override(tmp_path):
    f = write(tmp_path, {"total_time": 1.0, "mbu_estimated_percent": 0.5})
    assert P.load_profile(f, percent_scale="percent").mbu_estimated_percent == 0.5
    assert P.load_profile(f).mbu_estimated_percent == 50.0
    with pytest.raises(ValueError, match="percent_scale"):
        P.load_profile(f, percent_scale="per-mille")


@pytest.mark.parametrize("obj,field", [
    ({"total_time": -1.0}, "total_time"), ({"total_time": 0}, "total_time"), ({"hardware_flops": 1}, "total_time"),
    ({"total_time": "0.017"}, "total_time"), ({"total_time": True}, "total_time"), ({"total_time": None}, "total_time"),
    ({"total_time": 1, "hbm_read_bytes": -5}, "hbm_read_bytes"), ({"total_time": 1, "hardware_flops": [1]}, "hardware_flops"),
    ({"total_time": 1, "mbu_estimated_percent": 120.0}, "mbu_estimated_percent"),
    ({"a": {"total_time": 1}, "b": {"total_time": 2}}, "total_time"), ([{"total_time": 1}, {"total_time": 2}], "list"),
    ("NaN", "JSON object"), ('{"total_time": NaN}', "total_time"), ('{"total_time": 1e400}', "total_time"),
    ("[1, 2", "malformed"), ("", "malformed"), ("42", "found int")])
def test_load_profile_errors_name_file_and_field(tmp_path, obj, field):
    f = write(tmp_path, obj)
    with pytest.raises(ValueError) as e:
        P.load_profile(f)
    assert str(f) in str(e.value) and field in str(e.value)


def test_load_profile_missing_and_binary_files(tmp_path):
    with pytest.raises(ValueError, match="cannot read"):
        P.load_profile(tmp_path / "absent.json")
    f = tmp_path / "bin.json"
    f.write_bytes(b"\xff\xfe\x00{")
    with pytest.raises(ValueError, match="UTF-8"):
        P.load_profile(f)


def mutations(rng, text):
    """Byte-level mutations of a valid summary, plus random JSON values in its fields."""
    b = bytearray(text.encode())
    k = rng.randrange(6)
    if k == 0:
        return bytes(b[: rng.randrange(len(b))])
    if k == 1:
        for _ in range(rng.randint(1, 4)):
            b[rng.randrange(len(b))] = rng.randrange(256)
        return bytes(b)
    if k == 2:
        i = rng.randrange(len(b))
        return bytes(b[:i] + bytes(rng.choice(b'{}[]",:-0e.9aN ') for _ in range(rng.randint(1, 5))) + b[i:])
    if k == 3:
        return ("[" * rng.randint(1, 3000) + "{}" + "]" * rng.randint(0, 3000)).encode()
    values = [None, True, -1, 0, 1e308, -0.0, "x", [], {}, [1.5], {"total_time": 1}, 10 ** 30, 2 ** 70]
    obj = dict(SUMMARY)
    for _ in range(rng.randint(1, 4)):
        obj[rng.choice(list(obj) + ["dma_active_time_percent", "peak_flops_bandwidth_ratio"])] = rng.choice(values)
    wrap = rng.choice([lambda s: s, lambda s: {"n": s}, lambda s: [s], lambda s: {"summary": s}, lambda s: [s, s]])
    return json.dumps(wrap(obj)).encode()


def test_load_profile_fuzz_only_value_errors(tmp_path):
    rng = random.Random(20240611)
    base = json.dumps({"n_fdc71a0b": SUMMARY})
    runs = 20000 if LONG else 1500
    loaded = refused = 0
    f = tmp_path / "fuzz.json"
    for _ in range(runs):
        f.write_bytes(mutations(rng, base))
        try:
            s = P.load_profile(f)
        except ValueError as e:
            assert str(f) in str(e)
            refused += 1
        else:
            assert s.total_time > 0 and all(
                v is None or (math.isfinite(v) and 0 <= v <= 100) for v in
                (getattr(s, n) for n in P._PERCENT_FIELDS))
            loaded += 1
    assert loaded > 0 and refused > 0 and loaded + refused == runs


# ---------------------------------------------------------------------------------------------
# assess: the findings
# ---------------------------------------------------------------------------------------------
def perf_case(tmp_path, claim, profiles=True, n=30):
    b, c = series(11, n=n)
    (tmp_path / "prof").mkdir(exist_ok=True)
    write(tmp_path / "prof", {"n_b": {"total_time": 1.0e-3, "hardware_flops": 4.6e9, "hbm_read_bytes": 1e6,
                                      "hbm_write_bytes": 1e6, "tensor_engine_active_time_percent": 0.3}}, "b.json")
    write(tmp_path / "prof", {"n_c": {"total_time": 0.5e-3, "hardware_flops": 4.6e9, "hbm_read_bytes": 1e6,
                                      "hbm_write_bytes": 1e6}}, "c.json")
    profs = (Profile("baseline", "prof/b.json"), Profile("candidate", "prof/c.json")) if profiles else ()
    t = Timings(tuple(b * 1e3), tuple(c * 1e3), unit="ms")
    return Performance(claimed_speedup=claim, timings=t, profiles=profs)


def by_rule(findings, rule):
    return [f for f in findings if f.rule == rule]


def test_assess_claim_pass_and_fail(tmp_path):
    ok, data = P.assess(perf_case(tmp_path, 2.0), "trn1", dtype="bf16", base_dir=tmp_path)
    assert all(isinstance(f, ReviewFinding) and f.criterion == "performance_claim" for f in ok)
    # 2.0x is the true ratio: inside the interval, not demonstrated
    (inside,) = by_rule(ok, "claimed_speedup")
    assert inside.status == "fail" and "not demonstrated" in inside.message and "bootstrap resamples" in inside.message
    bad, _ = P.assess(perf_case(tmp_path, 2.5), "trn1", dtype="bf16", base_dir=tmp_path)
    assert [f.status for f in by_rule(bad, "claimed_speedup")] == ["fail"]
    low, _ = P.assess(perf_case(tmp_path, 1.2), "trn1", dtype="bf16", base_dir=tmp_path)
    assert [f.status for f in by_rule(low, "claimed_speedup")] == ["pass"]
    assert "demonstrated" in by_rule(low, "claimed_speedup")[0].message
    sp = data["timings"]["speedup"]
    assert data["timings"]["unit"] == "ms" and len(sp["baseline"]["samples"]) == 30
    assert sp["bootstrap_quantiles"] and sp["interval"][0] < 2.0 < sp["interval"][1]
    # profiles: 4.6e9 FLOP in 1 ms = 4.6 TFLOP/s of 92 attainable (AI 2300): 5% -> warn
    roof = by_rule(ok, "roofline")
    assert [f.status for f in roof] == ["warn", "info"]
    assert close(data["profiles"]["baseline"]["roofline"]["fraction_of_attainable"]["value"], 4.6e12 / TRN1_BF16)
    assert close(data["profile_ratio"], 2.0) and "inside" in by_rule(ok, "profile_ratio")[0].message
    assert len(by_rule(ok, "profile_bound")) == 1  # only the baseline carries engine activity


def test_assess_missing_evidence_is_info(tmp_path):
    f, data = P.assess(Performance(claimed_speedup=2.0), "trn2", dtype="bf16", base_dir=tmp_path)
    assert [x.status for x in f] == ["info"] and "not assessed" in f[0].message and data["timings"] is None
    f, _ = P.assess(Performance(), "trn2", dtype="bf16", base_dir=tmp_path)
    assert [x.status for x in f] == ["info"]
    f, _ = P.assess(perf_case(tmp_path, None, profiles=False), "trn2", dtype="bf16", base_dir=tmp_path)
    assert [x.status for x in by_rule(f, "claimed_speedup")] == ["info"] and "no speedup claimed" in f[0].message
    f, _ = P.assess(perf_case(tmp_path, 2.0, profiles=False, n=4), "trn2", dtype="bf16", base_dir=tmp_path)
    assert [x.status for x in by_rule(f, "claimed_speedup")] == ["info"]


def test_assess_bad_inputs(tmp_path):
    with pytest.raises(ValueError, match="absent.json"):
        P.assess(Performance(profiles=(Profile("baseline", "absent.json"),)), "trn1", dtype="bf16", base_dir=tmp_path)
    with pytest.raises(ValueError, match="unit"):
        P.assess(Performance(timings=Timings((1.0,) * 5, (1.0,) * 5, unit="min")), "trn1", dtype="bf16")
    with pytest.raises(ValueError, match="dtype"):
        P.assess(Performance(), "trn1", dtype="fp64")


def test_assess_keeps_two_profiles_of_one_label(tmp_path):
    perf = perf_case(tmp_path, 2.0)
    twice = Performance(claimed_speedup=2.0, timings=perf.timings,
                        profiles=(Profile("baseline", "prof/b.json"), Profile("baseline", "prof/c.json")))
    f, data = P.assess(twice, "trn1", dtype="bf16", base_dir=tmp_path)
    assert len(data["profiles"]) == 2 and len(by_rule(f, "roofline")) == 2
