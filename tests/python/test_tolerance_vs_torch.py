"""numeq's tolerances are never looser than torch's default where that default catches a mistake.

A tolerance that lets through a mistake that ``torch.testing.assert_close``'s default catches on
the same data is not defensible (issue: "no tolerance lets through a mistake that torch's default
catches on the same draws"). For norms, softmax and means in bf16 and fp16, the mistakes porters
make are written here in numpy and ml_dtypes, independently of numeq (an unbiased or one-pass
variance, eps outside the square root, exp or a running sum kept in the narrow format, a mean over
K - 1). On draws numeq did not calibrate on, every draw torch's default fails, numeq's tolerance
fails too; and the correct fp32 implementations pass numeq's tolerance on every draw (no false
alarm).

Oracles: numeq's exact reference rounded once (tested against MPFR elsewhere); the mistakes and
correct implementations in numpy; torch's documented defaults (torch.testing.assert_close:
bfloat16 rtol 1.6e-2, atol 1e-5; float16 rtol 1e-3, atol 1e-5), restated here so that torch need
not be installed.
"""

from __future__ import annotations

from typing import Callable

import ml_dtypes
import numpy as np
import pytest

import numeq
from numeq.catalogue import Problem, build, out_for

TORCH_DEFAULT = {"bf16": (1.6e-2, 1e-5), "fp16": (1e-3, 1e-5)}
DTYPE = {"bf16": ml_dtypes.bfloat16, "fp16": np.float16}
F32 = np.float32


def _mean(x: np.ndarray) -> np.ndarray:
    return x.mean(-1, keepdims=True, dtype=F32)


def layernorm(x, *, unbiased=False, one_pass=False, eps_outside=False, eps=1e-5):
    m = _mean(x)
    if one_pass:
        v = _mean(x * x) - m * m
    else:
        v = ((x - m) ** 2).sum(-1, keepdims=True, dtype=F32) / F32(x.shape[-1] - 1 if unbiased else x.shape[-1])
    return (x - m) / (np.sqrt(v) + F32(eps)) if eps_outside else (x - m) / np.sqrt(v + F32(eps))


def rmsnorm(x, *, unbiased=False, eps_outside=False, eps=1e-6):
    ms = (x * x).sum(-1, keepdims=True, dtype=F32) / F32(x.shape[-1] - 1 if unbiased else x.shape[-1])
    return x / (np.sqrt(ms) + F32(eps)) if eps_outside else x / np.sqrt(ms + F32(eps))


def softmax(x, *, narrow=None, narrow_sum=None):
    e = np.exp(x - x.max(-1, keepdims=True))
    if narrow is not None:
        e = e.astype(narrow).astype(F32)
    s = e.sum(-1, keepdims=True, dtype=F32)
    if narrow_sum is not None:
        s = _running_sum(e, narrow_sum)
    return e / s


def _running_sum(x: np.ndarray, narrow) -> np.ndarray:
    acc = np.zeros(x.shape[:-1] + (1,), dtype=F32)
    for k in range(x.shape[-1]):
        acc = (acc + x[..., k:k + 1]).astype(narrow).astype(F32)
    return acc


def mean(x, *, narrow=None, minus_one=False):
    s = _running_sum(x, narrow) if narrow is not None else x.sum(-1, keepdims=True, dtype=F32)
    return (s / F32(x.shape[-1] - 1 if minus_one else x.shape[-1]))[..., 0]


# (op, the correct implementation, {mistake: implementation}); `n` is the format's numpy type.
CASES: list[tuple[str, Callable, dict[str, Callable]]] = [
    ("layernorm", lambda x, n: layernorm(x), {
        "unbiased variance": lambda x, n: layernorm(x, unbiased=True),
        "one-pass variance": lambda x, n: layernorm(x, one_pass=True),
        "eps outside the square root": lambda x, n: layernorm(x, eps_outside=True)}),
    ("rmsnorm", lambda x, n: rmsnorm(x), {
        "mean square over K - 1": lambda x, n: rmsnorm(x, unbiased=True),
        "eps outside the square root": lambda x, n: rmsnorm(x, eps_outside=True)}),
    ("softmax", lambda x, n: softmax(x), {
        "exp kept in the narrow format": lambda x, n: softmax(x, narrow=n),
        "a running sum in the narrow format": lambda x, n: softmax(x, narrow_sum=n)}),
    ("mean", lambda x, n: mean(x), {
        "a running sum in the narrow format": lambda x, n: mean(x, narrow=n),
        "divided by K - 1": lambda x, n: mean(x, minus_one=True)}),
]


def _fails(x: np.ndarray, y: np.ndarray, rtol: float, atol: float) -> bool:
    return bool(np.any(np.abs(x - y) > atol + rtol * np.abs(y)))


@pytest.mark.parametrize("platforms", ["trainium.trn2", ("nvidia.h100", "trainium.trn2")], ids=["trn2", "h100-trn2"])
@pytest.mark.parametrize("fmt", ["bf16", "fp16"])
@pytest.mark.parametrize("op,correct,mistakes", CASES, ids=[c[0] for c in CASES])
def test_numeq_catches_what_torchs_default_catches(op, correct, mistakes, fmt, platforms) -> None:
    narrow = DTYPE[fmt]
    torch_rtol, torch_atol = TORCH_DEFAULT[fmt]
    out = out_for(op, fmt)
    missed: list[str] = []
    caught = {name: 0 for name in mistakes}
    for k in (16, 24, 32, 40, 64, 128):
        t = numeq.tolerance(op, fmt, None, platforms, k=k)
        for seed in range(200, 206):  # numeq calibrates on seeds 0 and 1
            b = build(Problem(op, fmt, out, k, (64,)), "normal", seed)
            x = np.asarray(b.inputs["x"], dtype=F32)  # the format's values, exactly
            y = np.asarray(b.op.reference(), dtype=np.float64)

            def rounded(v: np.ndarray) -> np.ndarray:
                return np.asarray(v).astype(narrow).astype(np.float64).reshape(y.shape)

            ok = rounded(correct(x, narrow))
            assert not _fails(ok, y, t.rtol, t.atol), (
                f"{op} {fmt} k={k} seed {seed}: the correct fp32 implementation fails rtol={t.rtol:.4g} atol={t.atol:.3g}")
            for name, wrong in mistakes.items():
                w = rounded(wrong(x, narrow))
                by_numeq = _fails(w, y, t.rtol, t.atol)
                caught[name] += by_numeq
                if _fails(w, y, torch_rtol, torch_atol) and not by_numeq:
                    missed.append(f"{name} at k={k} seed {seed} (numeq rtol={t.rtol:.4g} atol={t.atol:.3g})")
    assert not missed, f"{op} {fmt}: torch's default catches, numeq's tolerance does not: " + "; ".join(missed)
    # The comparison is not empty: numeq catches most of these mistakes on most draws.
    assert sum(caught.values()) >= 6, caught
