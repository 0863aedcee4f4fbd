"""The fast paths of numeq.reference.softmax, log_softmax, layernorm and rmsnorm (double enclosures
rounded outward, Ziv's test, the MPFR loop for what they cannot decide) against the MPFR path
alone (NUMEQ_FUNCTIONS=mpfr, in a second process): the same bits on rows of every kind (wide
spreads that underflow, constant and nearly constant rows, single entries, -Inf entries, large
magnitudes, signed zeros, affine parameters that make results cross zero), inputs bf16 / fp16 /
fp32, outputs bf16 / fp16 / fp32 in every rounding mode, stochastic included. Attention's fast
path likewise, on long, causal and masked rows."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np

import numeq

ROUNDINGS = ("nearest_even", "nearest_away", "toward_zero", "upward", "downward", "odd", "stochastic")


def _rows() -> dict[str, tuple[np.ndarray, str]]:
    rng = np.random.default_rng(7)
    rows = {}
    for fmt in ("bf16", "fp16", "fp32"):
        rows[f"normal_{fmt}"] = (numeq.round(rng.standard_normal((24, 64)) * 3, fmt), fmt)
        wide = numeq.round(rng.uniform(-60, 10, (12, 40)), fmt)
        wide[:, 0] = -np.inf
        rows[f"wide_{fmt}"] = (wide, fmt)
        rows[f"const_{fmt}"] = (np.full((3, 17), 0.5), fmt)
        rows[f"single_{fmt}"] = (numeq.round(rng.standard_normal((5, 1)), fmt), fmt)
        # Nearly constant rows: cancellation in n Q - S^2 and in x - mean.
        near = 1.5 + numeq.round(rng.integers(-3, 4, (6, 33)) * 2.0**-6, fmt)
        rows[f"near_{fmt}"] = (numeq.round(near, fmt), fmt)
        zeros = numeq.round(rng.standard_normal((6, 16)), fmt)
        zeros[:, ::3] = 0.0
        zeros[0] = -0.0
        rows[f"zeros_{fmt}"] = (zeros, fmt)
    rows["large_fp32"] = (numeq.round(rng.standard_normal((8, 32)) * 1e4, "fp32"), "fp32")
    return rows


def _affine(n: int, fmt: str) -> tuple[np.ndarray, np.ndarray]:
    """gamma and beta for rows of length n: values of fmt, zeros among gamma, and beta = -gamma/2 on
    every third column so that results cross zero."""
    rng = np.random.default_rng(n)
    gamma = numeq.round(rng.standard_normal(n), fmt)
    gamma[::5] = 0.0
    beta = numeq.round(rng.standard_normal(n), fmt)
    beta[::3] = -gamma[::3] / 2
    return gamma, beta


OPS = ("softmax", "log_softmax", "layernorm", "rmsnorm")


def _run(op: str, x: np.ndarray, fmt: str, out: str, rounding: str, affine: bool) -> np.ndarray:
    kw = dict(in_fmt=fmt, out=out, rounding=rounding, seed=3)
    if op in ("softmax", "log_softmax"):
        return getattr(numeq.reference, op)(x, **kw)
    gamma, beta = _affine(x.shape[-1], fmt) if affine else (None, None)
    return getattr(numeq.reference, op)(x, gamma, beta, eps=2.0**-17, **kw)


# The MPFR path in a second process: this file's own _rows/_affine/_run, loaded by path.
_SCRIPT = """
import importlib.util, sys, numpy as np
spec = importlib.util.spec_from_file_location("fast_paths", sys.argv[3])
m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
data = np.load(sys.argv[1])
out = {}
for key in data.files:
    name, fmt = key.rsplit("@", 1)
    for op in m.OPS:
        for o in ("bf16", "fp16", "fp32"):
            for r in m.ROUNDINGS:
                for affine in ((False, True) if op in ("layernorm", "rmsnorm") else (False,)):
                    out[f"{key}|{op}|{o}|{r}|{affine}"] = m._run(op, data[key], fmt, o, r, affine)
np.savez(sys.argv[2], **out)
"""


def test_fast_path_equals_the_mpfr_path(tmp_path: Path) -> None:
    rows = _rows()
    np.savez(tmp_path / "in.npz", **{f"{k}@{fmt}": x for k, (x, fmt) in rows.items()})
    env = dict(os.environ, NUMEQ_FUNCTIONS="mpfr", PYTHONPATH=str(Path(numeq.__file__).parents[1]))
    subprocess.run([sys.executable, "-c", _SCRIPT, str(tmp_path / "in.npz"), str(tmp_path / "mpfr.npz"), __file__],
                   env=env, check=True, timeout=600)
    checked = 0
    with np.load(tmp_path / "mpfr.npz") as want:
        for key, (x, fmt) in rows.items():
            for op in OPS:
                for o in ("bf16", "fp16", "fp32"):
                    for r in ROUNDINGS:
                        for affine in ((False, True) if op in ("layernorm", "rmsnorm") else (False,)):
                            got = _run(op, x, fmt, o, r, affine)
                            w = want[f"{key}@{fmt}|{op}|{o}|{r}|{affine}"]
                            same = (got == w) & (np.signbit(got) == np.signbit(w)) | (np.isnan(got) & np.isnan(w))
                            assert same.all(), (key, op, o, r, affine, np.argwhere(~same)[:3])
                            checked += got.size
    assert checked > 500_000


def _attention_cases() -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray, str, dict]]:
    """q, k, v, their format and keywords: long rows as real attention has them (d = 64), causal
    and masked rows, a given scale, constant and zero value columns, scores far apart."""
    rng = np.random.default_rng(11)
    cases = {}
    for fmt in ("bf16", "fp16", "fp32"):
        q, k, v = (numeq.round(rng.standard_normal((2, 48, 64)), fmt) for _ in range(3))
        cases[f"plain_{fmt}"] = (q, k, v, fmt, {})
        cases[f"causal_{fmt}"] = (q, k, v, fmt, {"causal": True})
        mask = rng.random((2, 48, 48)) > 0.3
        cases[f"mask_{fmt}"] = (q, k, v, fmt, {"mask": mask})
        v2 = v.copy()
        v2[..., 0] = 0.75
        v2[..., 1] = 0.0
        cases[f"columns_{fmt}"] = (q, k, v2, fmt, {"scale": 0.25})
        wide = numeq.round(rng.standard_normal((1, 8, 16)) * 6, fmt)
        cases[f"wide_{fmt}"] = (wide, wide, numeq.round(rng.standard_normal((1, 8, 5)), fmt), fmt, {"scale": 3.0})
    return cases


def _run_attention(case: tuple, out: str, rounding: str) -> np.ndarray:
    q, k, v, fmt, kw = case
    return numeq.reference.attention(q, k, v, in_fmt=fmt, out=out, rounding=rounding, seed=5, **kw)


_ATTENTION_SCRIPT = """
import importlib.util, sys, numpy as np
spec = importlib.util.spec_from_file_location("fast_paths", sys.argv[2])
m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
out = {}
for key, case in m._attention_cases().items():
    for o in ("bf16", "fp16", "fp32"):
        for r in m.ROUNDINGS:
            out[f"{key}|{o}|{r}"] = m._run_attention(case, o, r)
np.savez(sys.argv[1], **out)
"""


def test_attention_fast_path_equals_the_mpfr_path(tmp_path: Path) -> None:
    """Attention's fast path (compensated scores and sums, the vectorised exp) against the MPFR
    path alone: the same bits in every output format and rounding mode."""
    env = dict(os.environ, NUMEQ_FUNCTIONS="mpfr", PYTHONPATH=str(Path(numeq.__file__).parents[1]))
    subprocess.run([sys.executable, "-c", _ATTENTION_SCRIPT, str(tmp_path / "mpfr.npz"), __file__],
                   env=env, check=True, timeout=900)
    checked = 0
    with np.load(tmp_path / "mpfr.npz") as want:
        for key, case in _attention_cases().items():
            for o in ("bf16", "fp16", "fp32"):
                for r in ROUNDINGS:
                    got = _run_attention(case, o, r)
                    w = want[f"{key}|{o}|{r}"]
                    same = (got == w) & (np.signbit(got) == np.signbit(w)) | (np.isnan(got) & np.isnan(w))
                    assert same.all(), (key, o, r, np.argwhere(~same)[:3])
                    checked += got.size
    assert checked > 300_000
