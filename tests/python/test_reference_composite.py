"""numeq.reference composite operations (softmax, log_softmax, layernorm, rmsnorm) against an
independent mpmath oracle (composite_oracle.py describes it); attention is in
test_reference_attention.py."""

from __future__ import annotations

import math

import numpy as np
import pytest

import numeq
import numeq.reference as ref
from composite_oracle import INF, MODES, NAN, OUTS, _as, _check, _draw, want_attention, want_norm, want_softmax
from conftest import assert_same_floats


# ---------------------------------------------------------------------------------------------
# Oracle self-checks (the oracle on its own: softmax sums to 1, layernorm has mean 0 ...)
# ---------------------------------------------------------------------------------------------
def test_oracle_self_consistency():
    rng = np.random.default_rng(11)
    x = _draw(rng, "fp32", (3, 7))
    sm = want_softmax(x, -1, "fp32", ["nearest_even"])["nearest_even"]
    assert np.allclose(sm.sum(axis=-1), 1.0, rtol=0, atol=1e-6)
    lsm = want_softmax(x, -1, "fp32", ["nearest_even"], log=True)["nearest_even"]
    assert np.allclose(np.exp(lsm).sum(axis=-1), 1.0, atol=1e-6)
    down = want_softmax(x, -1, "fp32", ["downward", "upward"])
    assert np.all(down["downward"] <= down["upward"]) and np.all(down["downward"] < down["upward"])
    ln = want_norm(x, None, None, 0.0, "fp32", rms=False, modes=["nearest_even"])["nearest_even"]
    assert np.allclose(ln.mean(axis=-1), 0, atol=1e-6) and np.allclose(ln.var(axis=-1), 1, atol=1e-5)
    rms = want_norm(x, None, None, 0.0, "fp32", rms=True, modes=["nearest_even"])["nearest_even"]
    assert np.allclose((rms**2).mean(axis=-1), 1, atol=1e-5)
    q, k, v = _draw(rng, "fp32", (2, 3)), _draw(rng, "fp32", (4, 3)), _draw(rng, "fp32", (4, 2))
    att = want_attention(q, k, v, "fp32", modes=["nearest_even"])["nearest_even"]
    s = q @ k.T / math.sqrt(3)
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    assert np.allclose(att, (p / p.sum(axis=-1, keepdims=True)) @ v, rtol=1e-6, atol=1e-6)
    # The tiny-correction forms keep their side of the representable value.
    tie = want_softmax(np.array([[5.0, 5.0, -1e4]]), -1, "fp32", ["downward", "upward"])
    assert tie["upward"][0, 0] == 0.5 and tie["downward"][0, 0] == np.nextafter(np.float32(0.5), np.float32(0))
    assert tie["upward"][0, 2] == 2.0**-149 and tie["downward"][0, 2] == 0.0


# ---------------------------------------------------------------------------------------------
# softmax / log_softmax
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log_softmax"])
@pytest.mark.parametrize("in_fmt", ["fp32", "bf16", "fp16"])
def test_softmax_random_rows_every_mode_and_output(log, in_fmt):
    rng = np.random.default_rng(100 + 7 * log + len(in_fmt))
    x = _draw(rng, in_fmt, (4, 9), sigma=4.0, spread=2)
    x[1, 3] = x[1, 5]  # a tie
    x[2, :] = x[2, 0]  # a constant row: 1/9 (softmax), -log 9 (log_softmax)
    f = ref.log_softmax if log else ref.softmax
    for out in OUTS:
        want = want_softmax(x, -1, out, log=log)
        for mode in MODES:
            got = f(_as(x, in_fmt), out=out, rounding=mode)
            _check(got, want[mode], f"{in_fmt}->{out} {mode}")
    # The same values as float64 with in_fmt named explicitly
    got = f(np.asarray(x, dtype=np.float64), in_fmt=in_fmt, out="bf16", rounding="upward")
    _check(got, want_softmax(x, -1, "bf16", ["upward"], log=log)["upward"], "in_fmt keyword")


@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log_softmax"])
def test_softmax_axes(log):
    rng = np.random.default_rng(5)
    x = _draw(rng, "bf16", (3, 4, 5), sigma=2.0)
    f = ref.log_softmax if log else ref.softmax
    for axis in (0, 1, 2, -1, -2, -3):
        want = want_softmax(x, axis, "bf16", ["nearest_even", "toward_zero"], log=log)
        for mode in ("nearest_even", "toward_zero"):
            _check(f(_as(x, "bf16"), axis=axis, out="bf16", rounding=mode), want[mode], f"axis {axis} {mode}")
    assert f(_as(x, "bf16")).shape == x.shape


def test_softmax_huge_spreads_underflow_and_subnormals():
    rows = {
        # fp16: subnormals are below 6.1e-5 (e^-9.7), the smallest is 6e-8 (e^-16.6)
        "fp16": [[0.0, -10.0, -12.0, -16.5, -17.0, -1e4, -INF, -9.75],
                 [3.0, 3.0, -7.0, -20.0, -1e4, -3e4, 2.5, -14.0]],
        # bf16: the subnormal range is e^-87.3 .. e^-103.3
        "bf16": [[0.0, -88.5, -95.0, -100.0, -103.25, -1e4, -104.0, -87.0],
                 [60000.0, 50000.0, 60000.0, -60000.0, 59900.0, 59912.0, 59999.0, 59950.0]],
        # fp32: e^-104 .. e^-1e4 (subnormal or underflowing) next to 1
        "fp32": [[0.0, -104.0, -1e4, -88.0, -200.0, -100.0, 1e-3, -1e-3],
                 [1e30, -1e30, 1e30, 0.0, 1e30 - 2**76, 3e38, 3.3e38, -3e38]],
    }
    for out, rs in rows.items():
        x = numeq.round(np.array(rs), "fp32")
        for log in (False, True):
            f = ref.log_softmax if log else ref.softmax
            want = want_softmax(x, -1, out, log=log)
            for mode in MODES:
                _check(f(x.astype(np.float32), out=out, rounding=mode), want[mode], f"{out} log={log} {mode}")
            want = want_softmax(x, -1, out, ["nearest_even", "upward"], log=log, subnormals="flush_outputs")
            for mode in ("nearest_even", "upward"):
                got = f(x.astype(np.float32), out=out, rounding=mode, subnormals="flush_outputs")
                _check(got, want[mode], f"{out} log={log} {mode} flush_outputs")


def test_softmax_ties_next_to_representable_values():
    # p = 1/2 - e^-10000: below 1/2 by far less than any ulp; the side matters for directed modes.
    rows = [[5.0, 5.0, -1e4], [0.0, 0.0, 0.0, -1e4], [1.0, -1e4, -1e4, 1.0]]
    for row in rows:
        r = np.array([row], dtype=np.float32)
        for out in OUTS:
            for log in (False, True):
                f = ref.log_softmax if log else ref.softmax
                want = want_softmax(r, -1, out, log=log)
                for mode in MODES:
                    _check(f(r, out=out, rounding=mode), want[mode], f"{row} {out} log={log} {mode}")
    got = ref.softmax(np.float32([[5.0, 5.0, -1e4]]), out="fp32", rounding="downward")
    assert got[0, 0] == np.nextafter(np.float32(0.5), np.float32(0))
    assert ref.softmax(np.float32([[5.0, 5.0, -1e4]]), out="fp32", rounding="upward")[0, 0] == 0.5
    # log_softmax of the maximum of [0, -1e4]: -e^-10000, a negative zero to nearest
    got = ref.log_softmax(np.float32([0.0, -1e4]), out="fp32")
    assert got[0] == 0 and math.copysign(1.0, got[0]) < 0 and got[1] == -1e4


@pytest.mark.parametrize("mode", MODES)
def test_softmax_exact_results_in_every_mode(mode):
    for out in OUTS:
        c = ref.softmax(np.full((2, 4), 3.25, dtype=np.float32), out=out, rounding=mode)
        assert_same_floats(c, np.full((2, 4), 0.25), f"constant row {out}")
        r = ref.softmax(np.float32([7.0, -INF, 7.0, 7.0, -INF, 7.0]), out=out, rounding=mode)
        assert_same_floats(r, [0.25, 0.0, 0.25, 0.25, 0.0, 0.25], f"-inf entries {out}")
        one = ref.softmax(np.float32([-INF, -2.5, -INF]), out=out, rounding=mode)
        assert_same_floats(one, [0.0, 1.0, 0.0], f"single finite {out}")
        ls = ref.log_softmax(np.float32([-INF, -2.5, -INF]), out=out, rounding=mode)
        assert_same_floats(ls, [-INF if out != "e4m3fn" else NAN, 0.0, -INF if out != "e4m3fn" else NAN],
                           f"log single finite {out}")
        half = ref.softmax(np.float32([[1e-3, 1e-3]]), out=out, rounding=mode)
        assert_same_floats(half, [[0.5, 0.5]], f"pair {out}")


def test_softmax_specials():
    x = np.array([[1.0, NAN, 2.0], [1.0, INF, 2.0], [-INF, -INF, -INF], [-INF, 0.0, 1.0], [INF, -INF, 0.0]])
    got = ref.softmax(x.astype(np.float32))
    want = want_softmax(x, -1, "fp32")["nearest_even"]
    assert np.isnan(got[:3]).all() and np.isnan(got[4]).all()
    assert got[3, 0] == 0 and math.copysign(1.0, got[3, 0]) > 0
    _check(got, want, "specials")
    lgot = ref.log_softmax(x.astype(np.float32))
    assert np.isnan(lgot[:3]).all() and lgot[3, 0] == -INF and np.isnan(lgot[4]).all()
    _check(lgot, want_softmax(x, -1, "fp32", log=True)["nearest_even"], "log specials")
    # NaN into e4m3fn (which has NaN) is fine; -Inf there is NaN under ieee overflow, -448 saturated
    assert np.isnan(ref.log_softmax(np.float32([-INF, 1.0]), out="e4m3fn")[0])
    assert ref.log_softmax(np.float32([-INF, 1.0]), out="e4m3fn", overflow="saturate")[0] == -448.0


def test_log_softmax_overflow():
    x = np.float32([[0.0, -70000.0, -65504.0, -65519.0, -65521.0], [2.0, -1000.0, -1e6, 1.0, -240.0]])
    for out in ("fp16", "e4m3fn", "bf16"):
        for overflow in ("ieee", "saturate"):
            want = want_softmax(x, -1, out, log=True, overflow=overflow)
            for mode in MODES:
                got = ref.log_softmax(x, out=out, rounding=mode, overflow=overflow)
                _check(got, want[mode], f"{out} {overflow} {mode}")
    assert ref.log_softmax(np.float32([0.0, -70000.0]), out="fp16")[1] == -INF
    assert ref.log_softmax(np.float32([0.0, -70000.0]), out="fp16", rounding="toward_zero")[1] == -65504.0


# ---------------------------------------------------------------------------------------------
# layernorm / rmsnorm
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("rms", [False, True], ids=["layernorm", "rmsnorm"])
@pytest.mark.parametrize("in_fmt", ["fp32", "bf16", "fp16"])
def test_norm_random_rows_every_mode_and_output(rms, in_fmt):
    rng = np.random.default_rng(200 + 3 * rms + len(in_fmt))
    n = 7
    x = _draw(rng, in_fmt, (3, n), sigma=2.0, spread=3)
    gamma = _draw(rng, in_fmt, (n,), sigma=1.5)
    beta = _draw(rng, in_fmt, (n,), sigma=0.5)
    f = ref.rmsnorm if rms else ref.layernorm
    eps = 1e-6 if rms else 1e-5
    for out in OUTS:
        want = want_norm(x, None, None, eps, out, rms)
        wgb = want_norm(x, gamma, beta, eps, out, rms)
        for mode in MODES:
            _check(f(_as(x, in_fmt), out=out, rounding=mode), want[mode], f"{in_fmt}->{out} {mode}")
            got = f(_as(x, in_fmt), _as(gamma, in_fmt), _as(beta, in_fmt), out=out, rounding=mode)
            _check(got, wgb[mode], f"{in_fmt}->{out} {mode} gamma/beta")
    # gamma only, a 3-D x (normalised over the last axis), a different eps
    x3 = _draw(rng, in_fmt, (2, 2, n))
    w = want_norm(x3, gamma, None, 0.25, "bf16", rms, ["downward", "odd"])
    for mode in ("downward", "odd"):
        _check(f(_as(x3, in_fmt), _as(gamma, in_fmt), eps=0.25, out="bf16", rounding=mode), w[mode], "3-D")


@pytest.mark.parametrize("rms", [False, True], ids=["layernorm", "rmsnorm"])
def test_norm_cancellation_heavy_rows(rms):
    rng = np.random.default_rng(31)
    # 1000 + a few ulps of noise (ulp(1000) = 2^-14 in fp32): the mean cancels almost everything
    noise = rng.integers(-6, 7, size=(4, 12)) * 2.0**-14
    x = numeq.round(1000.0 + noise, "fp32")
    x[3] = numeq.round(1000.0 + np.arange(12) * 2.0**-14, "fp32")
    f = ref.rmsnorm if rms else ref.layernorm
    for eps in (0.0, 1e-5, 1e-12):
        for out in ("fp32", "bf16", "fp16"):
            want = want_norm(x, None, None, eps, out, rms)
            for mode in MODES:
                _check(f(x.astype(np.float32), eps=eps, out=out, rounding=mode), want[mode],
                       f"eps={eps} {out} {mode}")


@pytest.mark.parametrize("mode", MODES)
def test_norm_exact_results_in_every_mode(mode):
    for out in OUTS:
        assert_same_floats(ref.layernorm(np.float32([-1.0, 1.0]), eps=0.0, out=out, rounding=mode), [-1.0, 1.0],
                           f"[-1, 1] {out}")
        # n = 2 and eps = 0: always +-1 (the radicand is (a - b)^2)
        assert_same_floats(ref.layernorm(np.float32([[3.5, -0.125], [7.0, 9.0]]), eps=0.0, out=out, rounding=mode),
                           [[1.0, -1.0], [-1.0, 1.0]], f"pairs {out}")
        # mean 1, var 2, eps 2: (x - 1) / 2
        assert_same_floats(ref.layernorm(np.float32([0.0, 0.0, 3.0]), eps=2.0, out=out, rounding=mode),
                           [-0.5, -0.5, 1.0], f"[0, 0, 3] eps 2 {out}")
        # rmsnorm of a one-hot row of 9: 1 / sqrt(1/9) = 3; with gamma and beta
        x9 = np.zeros(9, dtype=np.float32)
        x9[4] = 0.75
        g9 = np.full(9, 0.5, dtype=np.float32)
        b9 = np.full(9, 0.25, dtype=np.float32)
        assert_same_floats(ref.rmsnorm(x9, eps=0.0, out=out, rounding=mode), [0.0] * 4 + [3.0] + [0.0] * 4,
                           f"one-hot {out}")
        assert_same_floats(ref.rmsnorm(x9, g9, b9, eps=0.0, out=out, rounding=mode),
                           [0.25] * 4 + [1.75] + [0.25] * 4, f"one-hot affine {out}")
        assert_same_floats(ref.rmsnorm(np.float32([2.0, -2.0, 2.0, 2.0]), eps=0.0, out=out, rounding=mode),
                           [1.0, -1.0, 1.0, 1.0], f"rms +-2 {out}")
        # a result that cancels to zero with beta: +0 in every mode
        assert_same_floats(ref.layernorm(np.float32([-1.0, 1.0]), None, np.float32([1.0, -1.0]), eps=0.0,
                                         out=out, rounding=mode), [0.0, 0.0], f"beta cancels {out}")


def test_norm_specials_and_zero_signs():
    nan_row = ref.layernorm(np.float32([[1.0, NAN, 2.0], [1.0, INF, 2.0], [1.0, 2.0, -INF]]))
    assert np.isnan(nan_row).all()
    assert np.isnan(ref.rmsnorm(np.float32([[INF, 1.0], [NAN, 0.0]]))).all()
    # zero radicand: 0/0
    assert np.isnan(ref.layernorm(np.float32([2.5, 2.5, 2.5]), eps=0.0)).all()
    assert np.isnan(ref.rmsnorm(np.float32([0.0, -0.0]), eps=0.0)).all()
    # constant row with eps > 0: +0 everywhere (gamma 1)
    z = ref.layernorm(np.float32([2.5, 2.5]), eps=1e-5)
    assert_same_floats(z, [0.0, 0.0], "constant row")
    # the normalised middle element of [1, 2, 3] is exactly +0
    x = np.float32([1.0, 2.0, 3.0])
    got = ref.layernorm(x, np.float32([1.0, INF, 1.0]), eps=0.0)
    assert np.isnan(got[1]) and np.isfinite(got[[0, 2]]).all()
    got = ref.layernorm(x, np.float32([INF, 1.0, -INF]), eps=0.0)
    assert_same_floats(got, [-INF, 0.0, -INF], "infinite gamma")
    got = ref.layernorm(x, np.float32([INF, 1.0, INF]), np.float32([-INF, 2.0, INF]), eps=0.0)
    assert_same_floats(got, [-INF, 2.0, INF], "infinite gamma and beta")
    got = ref.layernorm(x, np.float32([-INF, -3.0, 1.0]), np.float32([-INF, -0.0, NAN]), eps=0.0)
    assert_same_floats(got, [NAN, -0.0, NAN], "opposite infinities, zero signs, NaN beta")
    got = ref.layernorm(x, np.float32([NAN, -3.0, 2.0]), np.float32([0.0, 0.0, -INF]), eps=0.0)
    assert_same_floats(got, [NAN, 0.0, -INF], "NaN gamma, +0 sum, infinite beta")
    # +0 * negative gamma: -0 without beta
    got = ref.layernorm(x, np.float32([1.0, -3.0, 1.0]), eps=0.0)
    assert math.copysign(1.0, got[1]) < 0 and got[1] == 0
    # rmsnorm keeps the product sign: -0 for x = -0 and a positive gamma
    got = ref.rmsnorm(np.float32([-0.0, 3.0, 0.0, 4.0]), np.float32([2.0, 1.0, -2.0, 1.0]), eps=0.0)
    assert math.copysign(1.0, got[0]) < 0 and math.copysign(1.0, got[2]) < 0 and got[0] == 0 == got[2]
    got = ref.rmsnorm(np.float32([-0.0, 3.0]), np.float32([2.0, 1.0]), np.float32([-0.0, 0.0]), eps=0.0)
    assert math.copysign(1.0, got[0]) < 0
    got = ref.rmsnorm(np.float32([-0.0, 3.0]), np.float32([2.0, 1.0]), np.float32([0.0, 0.0]), eps=0.0)
    assert math.copysign(1.0, got[0]) > 0
    # every special case above against the oracle too (same rules restated)
    cases = [
        (x, [INF, 1.0, -INF], None, False), (x, [INF, 1.0, INF], [-INF, 2.0, INF], False),
        (x, [-INF, -3.0, 1.0], [-INF, -0.0, NAN], False), (x, [1.0, -3.0, 1.0], None, False),
        (np.float32([-0.0, 3.0, 0.0, 4.0]), [2.0, 1.0, -2.0, 1.0], None, True),
        (np.float32([-0.0, 3.0, 0.0, 4.0]), [2.0, 1.0, -2.0, 1.0], [-0.0, -0.0, -0.0, 0.0], True),
        (np.float32([-0.0, 0.0, 2.0, -2.0]), [2.0, -1.0, 1.0, 1.0], [-0.0, -0.0, 0.0, 0.0], False),
    ]
    for xs, g, b, rms in cases:
        g32 = np.float32(g)
        b32 = None if b is None else np.float32(b)
        f = ref.rmsnorm if rms else ref.layernorm
        eps = 0.0 if np.any(xs != 0) else 0.25
        want = want_norm(xs, g32, b32, eps, "bf16", rms)
        for mode in MODES:
            _check(f(xs, g32, b32, eps=eps, out="bf16", rounding=mode), want[mode], f"special {xs} {g} {b} {mode}")


def test_layernorm_zero_signs_of_x_minus_mean():
    # x_i - mean for zeros, as round-to-nearest arithmetic signs it (composite.hpp): (-0) - (+0) = -0,
    # (+0) - (+0) = +0, and (-0) - (-0) = +0 for a row of -0 entries, whose mean is -0.
    assert_same_floats(ref.layernorm(np.float32([-0.0, 0.0, -0.0]), eps=1e-5), [-0.0, 0.0, -0.0], "mixed zeros")
    assert_same_floats(ref.layernorm(np.float32([-0.0, 1.0, -1.0]), eps=0.0)[:1], [-0.0], "-0 with mean +0")
    assert_same_floats(ref.layernorm(np.float32([-0.0, -0.0]), eps=1e-5), [0.0, 0.0], "row of -0")
    assert_same_floats(ref.layernorm(np.float32([-0.0, -0.0]), np.float32([-1.0, 2.0]), eps=1e-5), [-0.0, 0.0],
                       "row of -0, gamma")
    x = np.float32([-0.0, -0.0, -0.0])
    g, b = np.float32([2.0, -1.0, 1.0]), np.float32([-0.0, -0.0, 0.5])
    want = want_norm(x, g, b, 0.25, "bf16", False)
    for mode in MODES:
        _check(ref.layernorm(x, g, b, eps=0.25, out="bf16", rounding=mode), want[mode], f"row of -0 affine {mode}")


def test_norm_overflow():
    x = np.float32([[1.0, 2.0, 3.0, 5.0], [-4.0, 0.5, 0.25, 8.0]])
    gamma = np.float32([1e5, -7e4, 6e4, 65504.0])
    beta = np.float32([0.0, -100.0, 0.5, 1e4])
    for rms in (False, True):
        f = ref.rmsnorm if rms else ref.layernorm
        for out in ("fp16", "e4m3fn"):
            g = gamma if out == "fp16" else gamma / np.float32(256)
            for overflow in ("ieee", "saturate"):
                want = want_norm(x, g, beta, 1e-5, out, rms, overflow=overflow)
                for mode in MODES:
                    _check(f(x, g, beta, eps=1e-5, out=out, rounding=mode, overflow=overflow), want[mode],
                           f"rms={rms} {out} {overflow} {mode}")


def _structured_rows(rng, fmt, n, count):
    """Rows of softmax inputs of many shapes: plain, spread, ties, -inf, huge range, a tie at the
    maximum next to far smaller entries, subnormal-range results."""
    rows = []
    for r in range(count):
        kind = r % 7
        x = _draw(rng, fmt, (n,), sigma=2.0)
        if kind == 1:
            x = _draw(rng, fmt, (n,), sigma=2.0, spread=9)
        elif kind == 2:
            x = rng.choice(x[: 1 + r % 3], size=n)
        elif kind == 3:
            x = np.where(rng.random(n) < 0.3, -INF, x)
        elif kind == 4:
            big = {"fp32": 1e37, "bf16": 1e37, "fp16": 6e4}[fmt]
            x = numeq.round(rng.uniform(-big, big, n), fmt)
        elif kind == 5:
            x = -np.abs(_draw(rng, fmt, (n,), sigma=4000.0 if fmt != "fp16" else 3000.0))
            x[0] = x[-1] = numeq.round(rng.standard_normal(), fmt)
        elif kind == 6:
            lo, hi = (8, 18) if fmt == "fp16" else (80, 110)
            x = -np.abs(numeq.round(rng.uniform(lo, hi, n), fmt))
            x[0] = 0.0
        rows.append(np.asarray(x, dtype=np.float64))
    return np.array(rows)


@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log_softmax"])
@pytest.mark.parametrize("in_fmt", ["fp32", "bf16", "fp16"])
def test_softmax_structured_rows(log, in_fmt):
    rng = np.random.default_rng(400 + 5 * log + len(in_fmt))
    f = ref.log_softmax if log else ref.softmax
    for n in (1, 2, 3, 5, 8, 13, 16):
        x = _structured_rows(rng, in_fmt, n, 7)
        for out in OUTS:
            want = want_softmax(x, -1, out, log=log)
            for mode in MODES:
                _check(f(_as(x, in_fmt), out=out, rounding=mode), want[mode], f"n={n} {in_fmt}->{out} {mode}")


def test_fp64_inputs():
    rng = np.random.default_rng(81)
    x = rng.standard_normal((3, 6)) * 4
    x[1] = 1000.0 + rng.standard_normal(6) * 1e-9  # cancellation at double precision
    x[2, :3] = [1e300, -1e300, 1e300]
    modes = ["nearest_even", "toward_zero", "upward", "downward", "odd"]
    for out in ("fp32", "bf16"):
        for log in (False, True):
            f = ref.log_softmax if log else ref.softmax
            want = want_softmax(x, -1, out, modes, log=log)
            for mode in modes:
                _check(f(x, out=out, rounding=mode), want[mode], f"fp64 log={log} {out} {mode}")
        g = rng.standard_normal(6)
        for rms in (False, True):
            f = ref.rmsnorm if rms else ref.layernorm
            want = want_norm(x[:2], g, None, 1e-5, out, rms, modes)
            for mode in modes:
                _check(f(x[:2], g, eps=1e-5, out=out, rounding=mode), want[mode], f"fp64 rms={rms} {out} {mode}")
        q, k, v = rng.standard_normal((3, 4)), rng.standard_normal((5, 4)), rng.standard_normal((5, 2))
        want = want_attention(q, k, v, out, modes=modes)
        for mode in modes:
            _check(ref.attention(q, k, v, out=out, rounding=mode), want[mode], f"fp64 attention {out} {mode}")


def test_non_contiguous_and_other_dtypes():
    rng = np.random.default_rng(91)
    base = _draw(rng, "bf16", (6, 10), sigma=2.0).astype(np.float32)
    views = {"transposed": base.T, "strided": base[:, ::2], "reversed": base[::-1, ::-3]}
    for name, x in views.items():
        assert not x.flags.c_contiguous
        want = want_softmax(x, 0, "bf16", ["nearest_even", "downward"])
        for mode in ("nearest_even", "downward"):
            _check(ref.softmax(x, axis=0, out="bf16", rounding=mode), want[mode], f"softmax {name} {mode}")
        g = np.ascontiguousarray(base[0, : x.shape[-1]])[::-1]
        want = want_norm(x, g, None, 1e-5, "bf16", False, ["upward"])
        _check(ref.layernorm(x, g, out="bf16", rounding="upward"), want["upward"], f"layernorm {name}")
    q, k, v = base[:3, ::2], base[::-1, 1::2], base[::-1, :6:3]
    want = want_attention(q, k, v, "fp32", modes=["toward_zero"])
    _check(ref.attention(q, k, v, out="fp32", rounding="toward_zero"), want["toward_zero"], "attention views")
    # integers (exact as float64) and big-endian floats
    xi = np.array([[1, 2, 3, -4], [0, 0, 7, 7]], dtype=np.int32)
    _check(ref.softmax(xi, out="fp32"), want_softmax(xi, -1, "fp32", ["nearest_even"])["nearest_even"], "int32")
    xb = base[:2].astype(">f4")
    _check(ref.log_softmax(xb, out="fp16", rounding="odd"),
           want_softmax(base[:2], -1, "fp16", ["odd"], log=True)["odd"], "big-endian")


# ---------------------------------------------------------------------------------------------
# stochastic rounding
# ---------------------------------------------------------------------------------------------
def test_stochastic_reproducible_and_one_of_the_two_neighbours(restore_threads):
    rng = np.random.default_rng(61)
    x = _draw(rng, "fp32", (6, 12), sigma=3.0)
    gamma = _draw(rng, "fp32", (12,))
    q, k, v = _draw(rng, "fp32", (2, 3, 4)), _draw(rng, "fp32", (2, 5, 4)), _draw(rng, "fp32", (2, 5, 3))
    calls = [
        ("softmax", lambda **kw: ref.softmax(x.astype(np.float32), **kw),
         lambda modes: want_softmax(x, -1, "bf16", modes)),
        ("log_softmax", lambda **kw: ref.log_softmax(x.astype(np.float32), **kw),
         lambda modes: want_softmax(x, -1, "bf16", modes, log=True)),
        ("layernorm", lambda **kw: ref.layernorm(x.astype(np.float32), gamma.astype(np.float32), **kw),
         lambda modes: want_norm(x, gamma, None, 1e-5, "bf16", False, modes)),
        ("rmsnorm", lambda **kw: ref.rmsnorm(x.astype(np.float32), gamma.astype(np.float32), **kw),
         lambda modes: want_norm(x, gamma, None, 1e-6, "bf16", True, modes)),
        ("attention", lambda **kw: ref.attention(q.astype(np.float32), k.astype(np.float32), v.astype(np.float32),
                                                 **kw),
         lambda modes: want_attention(q, k, v, "bf16", modes=modes)),
    ]
    for name, call, oracle in calls:
        want = oracle(["downward", "upward"])
        lo, hi = want["downward"], want["upward"]
        numeq.set_num_threads(1)
        a = call(out="bf16", rounding="stochastic", seed=7)
        numeq.set_num_threads(0)
        b = call(out="bf16", rounding="stochastic", seed=7)
        assert np.array_equal(a, b, equal_nan=True), name
        c = call(out="bf16", rounding="stochastic", seed=8, random_bits=12)
        d = call(out="bf16", rounding="stochastic", seed=8, random_bits=12)
        assert np.array_equal(c, d, equal_nan=True), name
        for got in (a, c):
            assert got.dtype == np.float64 and got.shape == lo.shape
            ok = (got == lo) | (got == hi)
            assert ok.all(), (name, got[~ok], lo[~ok], hi[~ok])
        inexact = lo != hi
        assert inexact.sum() >= 10, name
        # both neighbours occur, and another seed changes some results
        assert (a[inexact] == lo[inexact]).any() and (a[inexact] == hi[inexact]).any(), name
        e = call(out="bf16", rounding="stochastic", seed=123456789)
        assert not np.array_equal(a, e), name


# ---------------------------------------------------------------------------------------------
# errors
# ---------------------------------------------------------------------------------------------
def test_errors_name_the_argument():
    x = np.ones((2, 3), dtype=np.float32)
    q, k, v = np.ones((2, 4)), np.ones((5, 4)), np.ones((5, 3))
    with pytest.raises(ValueError, match="eps"):
        ref.layernorm(x, eps=-1e-5)
    with pytest.raises(ValueError, match="eps"):
        ref.rmsnorm(x, eps=-1.0)
    with pytest.raises(ValueError, match="mask"):
        ref.attention(q, k, v, mask=np.ones((3, 5), dtype=bool))
    with pytest.raises(ValueError, match="mask"):
        ref.attention(q, k, v, mask=np.zeros((2, 4)))
    with pytest.raises(ValueError, match=r"\bk\b"):
        ref.attention(q, np.ones((5, 3)), v)
    with pytest.raises(ValueError, match=r"\bv\b"):
        ref.attention(q, k, np.ones((4, 3)))
    with pytest.raises(ValueError, match="out"):
        ref.softmax(x, out="fp42")
    with pytest.raises(ValueError, match="out"):
        ref.attention(q, k, v, out="nope")
    with pytest.raises(ValueError, match="gamma"):
        ref.layernorm(x, np.ones(4, dtype=np.float32))
    with pytest.raises(ValueError, match="gamma"):
        ref.rmsnorm(x, np.ones((2, 3), dtype=np.float32))
    with pytest.raises(ValueError, match="axis"):
        ref.softmax(x, axis=2)
    with pytest.raises(ValueError, match="axis"):
        ref.log_softmax(x, axis=-3)
    with pytest.raises(ValueError, match="rounding"):
        ref.softmax(x, rounding="sideways")
    with pytest.raises(ValueError, match="in_fmt"):
        ref.softmax(np.array([0.1, 0.2]), in_fmt="bf16")
    with pytest.raises(ValueError, match="overflow"):
        ref.layernorm(x, overflow="wrap")
    with pytest.raises(ValueError, match="subnormals"):
        ref.rmsnorm(x, subnormals="never")
    with pytest.raises(ValueError, match="random_bits"):
        ref.attention(q, k, v, rounding="stochastic", random_bits=0)
    with pytest.raises(ValueError, match="beta"):
        ref.layernorm(x, None, np.ones(4, dtype=np.float32))
    with pytest.raises(ValueError, match="eps"):
        ref.layernorm(x, eps=math.nan)
    with pytest.raises(ValueError, match="scale"):
        ref.attention(q, k, v, scale=math.inf)
    with pytest.raises(ValueError, match=r"\bq\b"):
        ref.attention(np.ones(4), k, v)
    with pytest.raises(ValueError):  # batch dimensions that do not broadcast
        ref.attention(np.ones((2, 2, 4)), np.ones((3, 5, 4)), np.ones((3, 5, 3)))
    with pytest.raises(TypeError, match="mask"):
        ref.attention(q, k, v, mask=np.array([["a"] * 5] * 2))
    with pytest.raises(TypeError, match=r"\bx\b"):
        ref.softmax(np.array(["a", "b"]))
    # NaN into a format without NaN names the first such element (C order)
    with pytest.raises(ValueError, match="element 2"):
        ref.softmax(np.float32([[1.0, 2.0], [NAN, 1.0]]), out="e2m1fn")
    with pytest.raises(ValueError, match="element 2"):
        ref.layernorm(np.float32([[1.0, 2.0], [3.0, 3.0]]), eps=0.0, out="e2m1fn")


def test_integer_out_format_is_refused_naming_out():
    # out must be a floating format (composite.hpp); the keyword is called out, as for the
    # certified functions (numeq.reference.exp(..., out="int8") names "out").
    x = np.ones((2, 3), dtype=np.float32)
    for call in (lambda: ref.softmax(x, out="int8"), lambda: ref.layernorm(x, out="uint8"),
                 lambda: ref.attention(x, x, x, out="int32")):
        with pytest.raises(ValueError, match=r"\bout\b"):
            call()
