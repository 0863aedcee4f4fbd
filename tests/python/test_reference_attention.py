"""numeq.reference.attention against the independent mpmath oracle of composite_oracle.py."""

from __future__ import annotations

import numpy as np
import pytest

import numeq
import numeq.reference as ref
from composite_oracle import F, INF, MODES, NAN, OUTS, _as, _check, _draw, want_attention
from conftest import SPECS, assert_same_floats, round_oracle


# ---------------------------------------------------------------------------------------------
# attention
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("in_fmt", ["fp32", "bf16", "fp16"])
@pytest.mark.parametrize("d", [3, 4])
def test_attention_random_every_mode_and_output(in_fmt, d):
    rng = np.random.default_rng(300 + d + len(in_fmt))
    q = _draw(rng, in_fmt, (2, 3, d), sigma=1.5)
    k = _draw(rng, in_fmt, (2, 5, d), sigma=1.5)
    v = _draw(rng, in_fmt, (2, 5, 2), sigma=2.0, spread=2)
    k[0, 3] = k[0, 1]  # two keys of equal score
    for out in OUTS:
        want = want_attention(q, k, v, out)
        for mode in MODES:
            got = ref.attention(_as(q, in_fmt), _as(k, in_fmt), _as(v, in_fmt), out=out, rounding=mode)
            _check(got, want[mode], f"{in_fmt} d={d} ->{out} {mode}")


def test_attention_causal_masks_scale_and_broadcasting():
    rng = np.random.default_rng(41)
    d = 5
    q = _draw(rng, "bf16", (2, 1, 4, d), sigma=1.0)
    k = _draw(rng, "bf16", (1, 3, 6, d), sigma=1.0)
    v = _draw(rng, "bf16", (3, 6, 3), sigma=2.0)
    bool_mask = rng.random((4, 6)) < 0.7
    bool_mask[:, 0] = True
    float_mask = numeq.round(rng.standard_normal((2, 1, 1, 6)), "bf16")
    float_mask[0, 0, 0, 2] = -INF
    qs, ks = q[:, :, :3], k[..., :3, :]  # Lq == Lk
    vs = v[:, :3]
    cases = [
        ("causal Lq<Lk", dict(q=q, k=k, v=v, causal=True)),
        ("causal Lq==Lk", dict(q=qs, k=ks, v=vs, causal=True)),
        ("bool mask", dict(q=q, k=k, v=v, mask=bool_mask)),
        ("float mask", dict(q=q, k=k, v=v, mask=float_mask)),
        ("float mask causal scale", dict(q=q, k=k, v=v, mask=float_mask, causal=True, scale=0.375)),
        ("scale", dict(q=q, k=k, v=v, scale=-1.25)),
        ("scale 0", dict(q=q, k=k, v=v, scale=0.0)),
        ("large scale", dict(q=q, k=k, v=v, scale=3000.0)),
    ]
    modes = ["nearest_even", "toward_zero", "upward", "downward"]
    for name, kw in cases:
        qq, kk, vv = kw.pop("q"), kw.pop("k"), kw.pop("v")
        for out in ("bf16", "fp32"):
            want = want_attention(qq, kk, vv, out, modes=modes, **kw)
            for mode in modes:
                got = ref.attention(_as(qq, "bf16"), _as(kk, "bf16"), _as(vv, "bf16"), out=out, rounding=mode, **kw)
                assert got.shape == (2, 3) + qq.shape[-2:-1] + (3,)
                _check(got, want[mode], f"{name} ->{out} {mode}")


def test_attention_causal_alignment_is_top_left():
    # Lq = 2 < Lk = 4: query 0 sees key 0 only, query 1 keys 0 and 1 (PyTorch is_causal).
    q = np.float32([[1.0, 0.0], [0.0, 1.0]])
    k = np.float32([[1.0, 0.0], [0.0, 1.0], [5.0, 5.0], [5.0, 5.0]])
    v = np.float32([[1.0], [3.0], [100.0], [NAN]])  # keys 2 and 3 are never read
    got = ref.attention(q, k, v, causal=True, out="fp32")
    assert got[0, 0] == 1.0
    want = want_attention(q, k, v, "fp32", causal=True)
    _check(got, want["nearest_even"], "top-left")
    assert 1.0 < got[1, 0] < 3.0


@pytest.mark.parametrize("mode", MODES)
def test_attention_exact_results_in_every_mode(mode):
    rng = np.random.default_rng(51)
    q = _draw(rng, "fp32", (3, 3))
    k = _draw(rng, "fp32", (5, 3))
    v = np.float32([[0.1, -7.0]] * 5)  # constant columns
    v[:, 0] = np.float32(0.1)
    for out in OUTS:
        got = ref.attention(q.astype(np.float32), k.astype(np.float32), v, out=out, rounding=mode)
        col0 = round_oracle(F(float(np.float32(0.1))), SPECS[out], mode)
        assert_same_floats(got, [[col0, -7.0]] * 3, f"constant v {out}")
    # groups of equal scores with equal means: keys 0, 1 score 1, key 2 score 0; column [1, 3, 2] -> 2
    q1 = np.float32([[1.0, 0.0]])
    k1 = np.float32([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    v1 = np.float32([[1.0, 1.0, 5.0], [3.0, -1.0, 5.0], [2.0, 0.0, 5.0]])
    for out in OUTS:
        got = ref.attention(q1, k1, v1, out=out, rounding=mode)
        assert_same_floats(got, [[2.0, 0.0, 5.0]], f"equal group means {out}")
        assert_same_floats(ref.attention(q1, k1, v1, scale=2.5, out=out, rounding=mode), [[2.0, 0.0, 5.0]],
                           f"scale {out}")
    # against the oracle, which finds the same exact cases on its own
    want = want_attention(q1, k1, v1, "bf16", modes=[mode])
    _check(ref.attention(q1, k1, v1, out="bf16", rounding=mode), want[mode], "oracle exact")


def test_attention_huge_score_spreads():
    # scores 1e4 apart: the lower keys' weights are e^-10000; the result sits a hair off v_top.
    q = np.float32([[100.0, 0.0], [0.0, 0.0], [30.0, -30.0]])
    k = np.float32([[100.0, 0.0], [0.0, 1.0], [100.0, 0.0], [-100.0, 50.0]])
    v = np.float32([[1.0, 0.5, -2.0], [5.0, 0.5, -3.0], [1.0, 0.5, -2.0], [-8.0, 0.25, 7.0]])
    for scale in (None, 1.0, 0.001):
        for out in ("fp32", "bf16", "fp16"):
            want = want_attention(q, k, v, out, scale=scale)
            for mode in MODES:
                _check(ref.attention(q, k, v, scale=scale, out=out, rounding=mode), want[mode],
                       f"scale={scale} {out} {mode}")
    got = ref.attention(q, k, v, scale=1.0, out="fp32", rounding="upward")
    assert got[0, 0] == np.nextafter(np.float32(1.0), np.float32(2.0))
    got = ref.attention(q, k, v, scale=1.0, out="fp32", rounding="downward")
    # column 1: the far keys' v are 0.5 (no effect) and 0.25 (pulls below 0.5)
    assert got[0, 0] == 1.0 and got[0, 1] == np.nextafter(np.float32(0.5), np.float32(0))


def test_attention_specials():
    q = np.float32([[1.0, 0.5], [0.25, -1.0], [NAN, 0.0], [INF, 0.0]])
    k = np.float32([[1.0, 1.0], [0.5, -0.5], [NAN, INF], [2.0, 1.0]])
    v = np.float32([[1.0, INF, 2.0], [2.0, -INF, NAN], [NAN, NAN, NAN], [4.0, INF, 1.0]])
    mask = np.array([[True, True, False, True]] * 4)
    got = ref.attention(q, k, v, mask=mask)
    # key 2 is masked out: its NaN k and v are never read
    assert np.isfinite(got[:2, 0]).all()
    assert np.isnan(got[:2, 1]).all()  # +Inf and -Inf meet
    assert np.isnan(got[:2, 2]).all()  # NaN v in a taking-part key
    assert np.isnan(got[2:]).all()  # NaN / Inf in q
    _check(got, want_attention(q, k, v, "fp32", mask=mask)["nearest_even"], "specials")
    only_inf = ref.attention(q[:2], k[[0, 3]], np.float32([[1.0, INF], [2.0, INF]]))
    assert only_inf[0, 1] == INF and only_inf[1, 1] == INF
    # every key masked out: NaN row; NaN / +Inf mask entries: NaN row; -Inf: excluded
    fm = np.array([[-INF, -INF, -INF, -INF], [0.0, NAN, -INF, 0.0], [0.0, INF, -INF, 0.0], [0.0, -INF, -INF, 1.0]])
    got = ref.attention(np.float32([[1.0, 0.5]] * 4), k, np.float32([[1.0], [2.0], [3.0], [4.0]]), mask=fm)
    assert np.isnan(got[:3]).all() and np.isfinite(got[3]).all()
    assert np.isnan(ref.attention(q[:1], k[:2], v[:2, :1], mask=np.array([[False, False]]))).all()
    # a mean of values summing to 0 is +0 in every mode
    for mode in MODES:
        z = ref.attention(np.float32([[1.0, 0.0]]), np.float32([[1.0, 0.0], [1.0, 0.0]]),
                          np.float32([[1.5], [-1.5]]), out="bf16", rounding=mode)
        assert_same_floats(z, [[0.0]], f"zero mean {mode}")
    # NaN into e4m3fn (has NaN) is fine
    assert np.isnan(ref.attention(q[2:3], k[:2], v[:2, :1], out="e4m3fn")).all()


def test_attention_overflow():
    q = np.float32([[1.0, 0.5], [0.25, -1.0]])
    k = np.float32([[1.0, 1.0], [0.5, -0.5], [2.0, 1.0]])
    v = np.float32([[1e5, -3e5, 60000.0], [2e5, -1e5, 65504.0], [7e4, -7e4, 65504.0]])
    for out in ("fp16", "e4m3fn"):
        vv = v if out == "fp16" else v / np.float32(128)
        for overflow in ("ieee", "saturate"):
            want = want_attention(q, k, vv, out, overflow=overflow)
            for mode in MODES:
                _check(ref.attention(q, k, vv, out=out, rounding=mode, overflow=overflow), want[mode],
                       f"{out} {overflow} {mode}")


def test_attention_broadcast_variants():
    rng = np.random.default_rng(71)
    q = _draw(rng, "fp16", (3, 2, 4, 3), sigma=1.0)  # batch (3, 2)
    k = _draw(rng, "fp16", (5, 3), sigma=1.0)  # no batch dimensions
    v = _draw(rng, "fp16", (2, 5, 2), sigma=2.0)  # batch (2,)
    mask_1d = np.array([True, False, True, True, True])  # (Lk,)
    mask_row = np.where(rng.random((4, 1)) < 0.5, 0.0, -0.5) + np.zeros((4, 5))  # (Lq, Lk)
    cases = [
        ("plain", {}),
        ("1-D bool mask", dict(mask=mask_1d)),
        ("bool mask causal", dict(mask=mask_1d, causal=True)),
        ("float mask causal", dict(mask=mask_row, causal=True, scale=0.5)),
    ]
    for name, kw in cases:
        want = want_attention(q, k, v, "fp16", modes=["nearest_even", "odd"], **kw)
        for mode in ("nearest_even", "odd"):
            got = ref.attention(_as(q, "fp16"), _as(k, "fp16"), _as(v, "fp16"), out="fp16", rounding=mode, **kw)
            assert got.shape == (3, 2, 4, 2)
            _check(got, want[mode], f"{name} {mode}")
    # float64 arrays named as fp16 values
    want = want_attention(q, k, v, "bf16", modes=["upward"])
    _check(ref.attention(q, k, v, in_fmt="fp16", out="bf16", rounding="upward"), want["upward"], "in_fmt")
    # the smallest shapes
    one = ref.attention(np.float32([[2.0]]), np.float32([[3.0]]), np.float32([[-1.5]]), out="bf16", rounding="upward")
    assert_same_floats(one, [[-1.5]], "1x1x1")


def test_attention_scores_far_apart_are_still_certified():
    # Scores 1e5 (and 1e400) apart: the results are within e^-100000 of v of the top key, far below
    # 2^-65536, as softmax rows with such spreads are (test_softmax_ties_next_to_representable_values).
    q, k, v = np.float32([[1.0, 0.0]]), np.float32([[1.0, 0.0], [0.0, 0.0]]), np.float32([[1.0], [2.0]])
    for mode in MODES:
        want = want_attention(q, k, v, "fp32", scale=1e5, modes=[mode])[mode]
        _check(ref.attention(q, k, v, scale=1e5, out="fp32", rounding=mode), want, f"scale 1e5 {mode}")
    assert ref.attention(q, k, v, scale=1e5, out="fp32", rounding="upward")[0, 0] == np.nextafter(np.float32(1), 2)
    qd, kd, vd = np.array([[1e200]]), np.array([[1e200], [2e200]]), np.array([[1.0], [2.0]])
    for mode in ("nearest_even", "upward", "downward"):
        want = want_attention(qd, kd, vd, "fp32", modes=[mode])[mode]
        _check(ref.attention(qd, kd, vd, out="fp32", rounding=mode), want, f"fp64 1e400 {mode}")
