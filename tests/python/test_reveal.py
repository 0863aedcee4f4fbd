"""numeq.reveal_order: FPRev order discovery from Python.

Oracles: numpy's own np.sum (the revealed plan must reproduce it bit for bit), sums written here
in orders known by construction, and numpy's documented pairwise order for the tree shape.
"""

from __future__ import annotations

import numpy as np
import pytest

import numeq

rng = np.random.default_rng(5)


def _same(a, b) -> bool:
    a = np.float64(a)
    b = np.float64(b)
    return bool(a == b and np.signbit(a) == np.signbit(b)) or bool(np.isnan(a) and np.isnan(b))


def _numpy_tree(lo: int, hi: int) -> str:
    """numpy's float32 pairwise_sum order (loops_utils.h.src), written out: blocks of <= 128 use 8
    lanes (fewer than 8 terms: in order), larger ranges split at n/2 rounded down to a multiple of 8."""
    n = hi - lo
    if n < 8:
        t = str(lo)
        for k in range(lo + 1, hi):
            t = f"({t} {k})"
        return t
    if n <= 128:
        body = n - n % 8
        lanes = []
        for j in range(8):
            t = str(lo + j)
            for i in range(lo + j + 8, lo + body, 8):
                t = f"({t} {i})"
            lanes.append(t)
        while len(lanes) > 1:
            lanes = [f"({lanes[i]} {lanes[i + 1]})" for i in range(0, len(lanes), 2)]
        t = lanes[0]
        for k in range(lo + body, hi):
            t = f"({t} {k})"
        return t
    half = n // 2
    half -= half % 8
    return f"({_numpy_tree(lo, lo + half)} {_numpy_tree(lo + half, hi)})"


LENGTHS = list(range(1, 131)) + [255, 256, 257, 1000, 1024]


def test_numpy_float32_sum_order_is_revealed():
    calls = {}
    for n in LENGTHS:
        r = numeq.reveal_order(np.sum, n, "fp32")
        assert r.kind == "sum"
        assert r.tree == _numpy_tree(0, n), n
        assert r.reproduces, (n, r.notes)
        calls[n] = r.calls
        for _ in range(3):
            x = rng.standard_normal(n).astype(np.float32)
            assert _same(numeq.sum(x, plan=r.plan), np.sum(x)), n
    # Far fewer calls than BasicFPRev's n(n-1)/2 (about (n/2) log2 n probes plus the checks).
    assert calls[1024] < 6000, calls[1024]
    print(f"\nreveal_order(np.sum, 1024): {calls[1024]} calls")


def test_result_object_and_shape():
    r = numeq.reveal_order(np.sum, 1000)
    assert r.shape.startswith("numpy pairwise")
    assert r.compact_plan is not None and "pairwise(leaf 128" in str(r.compact_plan)
    x = rng.standard_normal(1000).astype(np.float32)
    assert _same(numeq.sum(x, plan=r.compact_plan), np.sum(x))
    assert r.big == 2.0 ** 127 and r.unit > 0
    assert "calls=" in repr(r)
    p = r.plan.to_dict()
    assert p["reduction"]["kind"] == "group"
    assert numeq.Plan(r.plan.to_json()) == r.plan


def test_known_orders_and_dot_products():
    def seq(x):
        acc = np.float32(0)
        for v in x:
            acc = np.float32(acc + v)
        return acc

    r = numeq.reveal_order(seq, 20)
    assert r.shape == "sequential"
    assert r.calls < 19 + 40 + 10

    def rev(x):
        return seq(x[::-1])

    r = numeq.reveal_order(rev, 12)
    t = "(10 11)"  # the tree text orders children by their smallest term
    for k in range(9, -1, -1):
        t = f"({k} {t})"
    assert r.tree == t
    assert r.reproduces

    def dot_fma(a, b):  # a sequential fp32 chain, products rounded to fp32 (no fma)
        acc = np.float32(0)
        for x, y in zip(a, b):
            acc = np.float32(acc + np.float32(x * y))
        return acc

    r = numeq.reveal_order(dot_fma, 16, "fp32", product="rounded")
    assert r.kind == "dot" and r.shape == "sequential"
    a = rng.standard_normal(16).astype(np.float32)
    b = rng.standard_normal(16).astype(np.float32)
    assert _same(numeq.dot(a, b, plan=r.plan), dot_fma(a, b))
    r2 = numeq.reveal_order(lambda a, b: np.dot(a, b), 33, kind="dot")
    assert r2.kind == "dot" and r2.calls > 0


def test_errors_are_clear():
    with pytest.raises(ValueError, match=r"^n: expected at least 1 term, got 0"):
        numeq.reveal_order(np.sum, 0)
    with pytest.raises(ValueError, match=r"^fmt: unknown format 'fp33'; valid: .*fp32"):
        numeq.reveal_order(np.sum, 4, "fp33")
    with pytest.raises(ValueError, match=r"^kind: unknown kind 'prod'; valid: sum, dot"):
        numeq.reveal_order(np.sum, 4, kind="prod")
    with pytest.raises(ValueError, match=r"^kind: fn has 3 required positional parameters"):
        numeq.reveal_order(lambda a, b, c: 0.0, 4)
    with pytest.raises(ValueError, match=r"^fn: does not behave like a sum"):
        numeq.reveal_order(np.max, 8)
    with pytest.raises(ValueError, match=r"^fn: does not behave like a sum"):
        numeq.reveal_order(np.prod, 8)
    g = np.random.default_rng(1)
    with pytest.raises(ValueError, match=r"^fn: is not deterministic"):
        numeq.reveal_order(lambda x: np.sum(g.permutation(x)), 64)
    with pytest.raises(ValueError, match=r"^n: 300 terms are too many to count exactly in bf16"):
        numeq.reveal_order(np.sum, 300, "bf16")
    with pytest.raises(ValueError, match=r"^fn: expected a scalar result"):
        numeq.reveal_order(lambda x: x, 4)


def test_narrow_inputs_and_outputs():
    def f32_sum_to_f16(x):  # float16 inputs summed in float32, the result rounded to float16
        acc = np.float32(0)
        for v in x:
            acc = np.float32(acc + np.float32(v))
        return np.float16(acc)

    r = numeq.reveal_order(f32_sum_to_f16, 50, "fp32", in_fmt="fp16", out_fmt="fp16")
    assert r.shape == "sequential" and r.reproduces, r.notes
    with pytest.raises(ValueError, match=r"^out_fmt: unknown format"):
        numeq.reveal_order(np.sum, 4, out_fmt="fp7")
