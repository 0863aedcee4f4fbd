"""The mpmath oracle of numeq.reference's composite operations (softmax, log_softmax, layernorm,
rmsnorm, attention) for test_reference_composite.py and test_reference_attention.py.


The oracle follows the definitions of references/composite.hpp on the exact input values
(fractions.Fraction for everything rational) and evaluates only the transcendental parts (exp,
log, sqrt, 1/sqrt(d)) with mpmath interval arithmetic (mpmath.iv, outward rounded), in a loop that
doubles the precision (256 .. 16384 bits) until both ends of every element's enclosure round
alike. Each element is written as a + e: a an exact rational, e an interval, so that results
extremely close to a representable number (softmax 1/2 - e^-10000, log_softmax -e^-10000) keep
their side of it: the interval endpoints are made exact Fractions (conftest's round_oracle then
rounds them like test_reference_functions._want does), magnitudes below 2^-3000 replaced by
+-2^-3000, which lies in the same rounding cell next to a (every rounding boundary here is a
multiple of 2^-1076, and a is such a multiple or a rational with a small denominator).

Results that are exactly representable are detected exactly (constant softmax rows, one finite
log_softmax entry, a rational square root in layernorm / rmsnorm, attention whose groups of
equal-score keys share one mean of v) and rounded from the exact rational, so every deterministic
mode (not only nearest) is checked bit for bit, zero signs included.
"""

from __future__ import annotations

import contextlib
import math
from fractions import Fraction
from math import isqrt

import ml_dtypes
import mpmath
import numpy as np
from mpmath import iv
from mpmath.libmp import from_man_exp

import numeq
from conftest import SPECS, assert_same_floats, round_oracle, same_float

mpmath.mp.prec = 400

MODES = ["nearest_even", "nearest_away", "toward_zero", "upward", "downward", "odd"]
OUTS = ["fp32", "bf16", "fp16", "e4m3fn"]
PRECISIONS = (256, 512, 1024, 2048, 4096, 8192, 16384)
TINY_LOG2 = -3000  # |e| below 2^-3000: replaced by +-2^-3001 (same rounding cell next to a)
INF = math.inf
NAN = math.nan
F = Fraction


# ---------------------------------------------------------------------------------------------
# Interval helpers
# ---------------------------------------------------------------------------------------------
@contextlib.contextmanager
def _ivprec(p: int):
    old = iv.prec
    iv.prec = p
    try:
        yield
    finally:
        iv.prec = old


def _ivq(q: Fraction):
    """An interval holding the rational q (a point when q is dyadic)."""
    n, d = q.numerator, q.denominator
    if d & (d - 1) == 0:
        return iv.mpf(mpmath.mp.make_mpf(from_man_exp(n, -(d.bit_length() - 1))))
    return iv.mpf(n) / iv.mpf(d)


def _raw_fraction(raw) -> Fraction:
    sign, man, exp, bc = raw
    if man == 0:
        assert raw == (0, 0, 0, 0), f"non-finite interval endpoint {raw}"
        return F(0)
    if exp + bc <= TINY_LOG2:  # |v| < 2^(exp + bc)
        v = F(1, 1 << -(TINY_LOG2 - 1))
    elif exp >= 0:
        v = F(man << exp)
    else:
        v = F(man, 1 << -exp)
    return -v if sign else v


def _ends(x) -> tuple[Fraction, Fraction]:
    lo, hi = x._mpi_
    return _raw_fraction(lo), _raw_fraction(hi)


def _upper_mpf(x):
    return mpmath.mp.make_mpf(x._mpi_[1])


def _log1p(t):
    """Enclosure of log(1 + t) for an interval t >= 0, tight in relative terms even for tiny t:
    t - t^2/2 <= log1p(t) <= t."""
    sign, man, exp, bc = t._mpi_[1]
    if exp + bc < -(iv.prec // 2):
        lower = (t.a - t.a * t.a / 2).a
        return iv.mpf([lower, t.b])
    return iv.log(1 + t)


# ---------------------------------------------------------------------------------------------
# Element descriptors: a float (NaN, +-Inf, signed zero: rounded as such), a Fraction (exact,
# non-zero), or (a, e) with a a Fraction and e an interval (the value is a + e, irrational).
# ---------------------------------------------------------------------------------------------
def _round_elem(elem, spec, mode, overflow, subnormals):
    if isinstance(elem, float):
        return round_oracle(elem, spec, mode, overflow, subnormals)
    if isinstance(elem, Fraction):
        assert elem != 0
        return round_oracle(elem, spec, mode, overflow, subnormals)
    a, (lo, hi) = elem
    r1 = round_oracle(a + lo, spec, mode, overflow, subnormals)
    r2 = round_oracle(a + hi, spec, mode, overflow, subnormals)
    return r1 if same_float(r1, r2) else None


def _freeze(elems):
    """Interval parts -> exact Fraction endpoints (done while the precision is set)."""
    return [(e[0], _ends(e[1])) if isinstance(e, tuple) else e for e in elems]


def _decide_rows(row_fn, nrows, out, modes, overflow="ieee", subnormals="keep"):
    """{mode: [[float]]}: row_fn(r, precision) -> element descriptors of row r, rounded."""
    spec = SPECS[out]
    result = {m: [] for m in modes}
    for r in range(nrows):
        for p in PRECISIONS:
            with _ivprec(p):
                elems = _freeze(row_fn(r, p))
            rows = {m: [_round_elem(e, spec, m, overflow, subnormals) for e in elems] for m in modes}
            if all(v is not None for row in rows.values() for v in row):
                break
        else:
            raise AssertionError(f"oracle: row {r} undecided at {PRECISIONS[-1]} bits")
        for m in modes:
            result[m].append(rows[m])
    return result


# ---------------------------------------------------------------------------------------------
# The oracles, row by row, from composite.hpp's definitions
# ---------------------------------------------------------------------------------------------
def _softmax_row(xs: list[float], log: bool) -> list:
    n = len(xs)
    if any(math.isnan(x) or x == INF for x in xs):
        return [NAN] * n
    finite = [x for x in xs if x != -INF]
    if not finite:
        return [NAN] * n
    xmax = max(finite)
    m = finite.count(xmax)
    others = [x for x in finite if x != xmax]
    out = []
    if not others:
        for x in xs:
            if x == -INF:
                out.append(0.0 if not log else -INF)
            elif not log:
                out.append(F(1, m))
            elif m == 1:
                out.append(0.0)  # x - log(e^x): +0
            else:
                out.append((F(0), -iv.log(m)))
        return out
    terms = {x: iv.exp(_ivq(F(x) - F(xmax))) for x in set(others)}
    t = sum((terms[x] for x in others), iv.mpf(0))
    if log:
        big_l = _log1p(t / m) if m == 1 else iv.log(m) + _log1p(t / m)
        return [-INF if x == -INF else (F(x) - F(xmax), -big_l) for x in xs]
    den = m + t
    u = t / (m * den)  # 1/m - 1/(m + t)
    for x in xs:
        if x == -INF:
            out.append(0.0)
        elif x == xmax:
            out.append((F(1, m), -u))
        else:
            out.append((F(0), terms[x] / den))
    return out


def _norm_row(xs, gs, bs, eps: float, rms: bool) -> list:
    n = len(xs)
    if any(not math.isfinite(x) for x in xs):
        return [NAN] * n
    xq = [F(x) for x in xs]
    s = sum(xq, F(0))
    q = sum((x * x for x in xq), F(0))
    if rms:
        radicand = n * q + n * n * F(eps)
        nums = [n * x for x in xq]
    else:
        radicand = n * q - s * s + n * n * F(eps)
        nums = [n * x - s for x in xq]
    if radicand == 0:
        return [NAN] * n
    rn, rd = isqrt(radicand.numerator), isqrt(radicand.denominator)
    root = F(rn, rd) if (rn * rn == radicand.numerator and rd * rd == radicand.denominator) else None
    inv_root = None if root is not None else 1 / iv.sqrt(_ivq(radicand))
    out = []
    for i in range(n):
        g = 1.0 if gs is None else float(gs[i])
        b = None if bs is None else float(bs[i])
        if math.isnan(g) or (b is not None and math.isnan(b)):
            out.append(NAN)
            continue
        num = nums[i]
        # t = num / root * g: a float (Inf, NaN, signed zero), a Fraction, or an interval
        if num == 0:
            # Round-to-nearest signs (composite.hpp): rmsnorm's x_i * gamma_i keeps x_i's sign;
            # layernorm's x_i - mean is +0 for equal values, except (-0) - (+0) = -0, the mean of
            # a row being -0 only when every entry is -0 (then (-0) - (-0) = +0).
            negative_x = xs[i] == 0 and math.copysign(1.0, xs[i]) < 0
            if rms:
                zero_negative = negative_x
            else:
                zero_negative = negative_x and not all(v == 0 and math.copysign(1.0, v) < 0 for v in xs)
            if math.isinf(g):
                out.append(NAN)
                continue
            t = -0.0 if zero_negative != (math.copysign(1.0, g) < 0) else 0.0
        elif math.isinf(g):
            t = INF if (num < 0) == (g < 0) else -INF
        elif g == 0:
            t = -0.0 if (num < 0) != (math.copysign(1.0, g) < 0) else 0.0
        elif root is not None:
            t = num * F(g) / root
        else:
            t = _ivq(num * F(g)) * inv_root
        if b is None:
            out.append((F(0), t) if not isinstance(t, (float, Fraction)) else t)
        elif math.isinf(b):
            out.append(NAN if (isinstance(t, float) and math.isinf(t) and t != b) else b)
        elif isinstance(t, float) and math.isinf(t):
            out.append(t)
        elif isinstance(t, float):  # signed zero
            if b == 0:
                both_negative = math.copysign(1.0, t) < 0 and math.copysign(1.0, b) < 0
                out.append(-0.0 if both_negative else 0.0)
            else:
                out.append(F(b))
        elif isinstance(t, Fraction):
            total = t + F(b)
            out.append(0.0 if total == 0 else total)
        else:
            out.append((F(b), t))
    return out


def _attention_row(qi, keys, values, mask_row, causal: bool, i: int, scale) -> list:
    """Row i (one query) of attention: element c for every column of values."""
    lk, dv, d = len(keys), len(values[0]), len(qi)
    taking = [j for j in range(lk) if not (causal and j > i) and mask_row[j] != -INF]
    nan_row = [NAN] * dv
    if not taking or any(not math.isfinite(x) for x in qi):
        return nan_row
    for j in taking:
        if any(not math.isfinite(x) for x in keys[j]) or math.isnan(mask_row[j]) or mask_row[j] == INF:
            return nan_row
    dots = {j: sum((F(a) * F(b) for a, b in zip(qi, keys[j])), F(0)) for j in taking}
    rd = isqrt(d)
    rational = scale is not None or rd * rd == d
    if scale is not None:
        score = {j: F(scale) * dots[j] + F(mask_row[j]) for j in taking}
    elif rational:
        score = {j: dots[j] / rd + F(mask_row[j]) for j in taking}
    # Keys of equal scores: the exact score when it is rational; (dot, mask) otherwise (dot/sqrt d
    # + m is then equal for two keys only when both parts are).
    key = {j: score[j] if rational else (dots[j], F(mask_row[j])) for j in taking}
    groups: dict = {}
    for j in taking:
        groups.setdefault(key[j], []).append(j)
    inv_sqrt_d = None if rational else 1 / iv.sqrt(iv.mpf(d))

    def score_iv(g):
        if rational:
            return _ivq(g)
        return _ivq(g[0]) * inv_sqrt_d + _ivq(g[1])

    top = max(groups, key=lambda g: _upper_mpf(score_iv(g)))

    def diff_iv(g):  # score(g) - score(top)
        if rational:
            return _ivq(g - top)
        return _ivq(g[0] - top[0]) * inv_sqrt_d + _ivq(g[1] - top[1])

    weights = {g: iv.exp(diff_iv(g)) for g in groups if g != top}
    out = []
    for c in range(dv):
        col = [float(values[j][c]) for j in taking]
        if any(math.isnan(x) for x in col):
            out.append(NAN)
            continue
        infs = {x for x in col if math.isinf(x)}
        if infs:
            out.append(NAN if len(infs) == 2 else infs.pop())
            continue
        sums = {g: sum((F(float(values[j][c])) for j in js), F(0)) for g, js in groups.items()}
        r = sums[top] / len(groups[top])
        diffs = {g: sums[g] - len(groups[g]) * r for g in groups if g != top}
        if all(v == 0 for v in diffs.values()):
            if r == 0:  # round-to-nearest sum of the values: -0 only when every one is -0
                out.append(-0.0 if all(math.copysign(1.0, x) < 0 for x in col) else 0.0)
            else:
                out.append(r)
            continue
        num = sum((weights[g] * _ivq(v) for g, v in diffs.items() if v != 0), iv.mpf(0))
        den = len(groups[top]) + sum((len(groups[g]) * weights[g] for g in weights), iv.mpf(0))
        out.append((r, num / den))
    return out


# ---------------------------------------------------------------------------------------------
# Whole-array oracles
# ---------------------------------------------------------------------------------------------
def _values(x) -> np.ndarray:
    return np.asarray(x).astype(np.float64)


def want_softmax(x, axis, out, modes=MODES, log=False, overflow="ieee", subnormals="keep"):
    xv = np.moveaxis(_values(x), axis, -1)
    rows = xv.reshape(-1, xv.shape[-1]).tolist()
    got = _decide_rows(lambda r, p: _softmax_row(rows[r], log), len(rows), out, modes, overflow, subnormals)
    return {m: np.moveaxis(np.array(v, dtype=np.float64).reshape(xv.shape), -1, axis) for m, v in got.items()}


def want_norm(x, gamma, beta, eps, out, rms, modes=MODES, overflow="ieee", subnormals="keep"):
    xv = _values(x)
    rows = xv.reshape(-1, xv.shape[-1]).tolist()
    gs = None if gamma is None else _values(gamma).tolist()
    bs = None if beta is None else _values(beta).tolist()
    got = _decide_rows(lambda r, p: _norm_row(rows[r], gs, bs, eps, rms), len(rows), out, modes, overflow,
                       subnormals)
    return {m: np.array(v, dtype=np.float64).reshape(xv.shape) for m, v in got.items()}


def want_attention(q, k, v, out, mask=None, causal=False, scale=None, modes=MODES, overflow="ieee",
                   subnormals="keep"):
    q, k, v = _values(q), _values(k), _values(v)
    lq, lk, dv = q.shape[-2], k.shape[-2], v.shape[-1]
    batch = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    qb = np.broadcast_to(q, batch + q.shape[-2:]).reshape(-1, lq, q.shape[-1])
    kb = np.broadcast_to(k, batch + k.shape[-2:]).reshape(-1, lk, k.shape[-1])
    vb = np.broadcast_to(v, batch + v.shape[-2:]).reshape(-1, lk, dv)
    if mask is None:
        mb = np.zeros((qb.shape[0], lq, lk))
    else:
        mask = np.asarray(mask)
        if mask.dtype == np.bool_:
            mask = np.where(mask, 0.0, -INF)
        mb = np.broadcast_to(mask.astype(np.float64), batch + (lq, lk)).reshape(-1, lq, lk)
    rows = [(b, i) for b in range(qb.shape[0]) for i in range(lq)]
    qs, ks, vs, ms = qb.tolist(), kb.tolist(), vb.tolist(), mb.tolist()

    def row(r, p):
        b, i = rows[r]
        return _attention_row(qs[b][i], ks[b], vs[b], ms[b][i], causal, i, scale)

    got = _decide_rows(row, len(rows), out, modes, overflow, subnormals)
    return {m: np.array(val, dtype=np.float64).reshape(batch + (lq, dv)) for m, val in got.items()}


# ---------------------------------------------------------------------------------------------
# Inputs
# ---------------------------------------------------------------------------------------------
DTYPES = {"fp32": np.float32, "bf16": ml_dtypes.bfloat16, "fp16": np.float16, "fp64": np.float64}


def _draw(rng, fmt, shape, sigma=3.0, spread=0):
    x = rng.standard_normal(shape) * sigma
    if spread:
        x = x * np.exp2(rng.integers(-spread, spread + 1, size=shape))
    return numeq.round(x, fmt)


def _as(x, fmt):
    """Values of fmt as that format's own array type (ml_dtypes for bf16)."""
    return np.asarray(x, dtype=np.float64).astype(DTYPES[fmt])


def _check(got, want, context):
    assert isinstance(got, np.ndarray) and got.dtype == np.float64, type(got)
    assert got.shape == want.shape, (got.shape, want.shape)
    assert_same_floats(got, want, context)
