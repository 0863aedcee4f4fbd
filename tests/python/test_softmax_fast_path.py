"""numeq.reference.softmax's fast path (a double enclosure with outward rounding, Ziv's test, the
MPFR loop for what it cannot decide) against the MPFR path alone (NUMEQ_FUNCTIONS=mpfr, in a
second process): the same bits on rows of every kind (wide spreads that underflow, constant
rows, single entries, -Inf entries, large magnitudes), inputs bf16 / fp16 / fp32, outputs bf16 /
fp16 / fp32 in every rounding mode, stochastic included."""

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
    rows["large_fp32"] = (numeq.round(rng.standard_normal((8, 32)) * 1e4, "fp32"), "fp32")
    return rows


_SCRIPT = """
import sys, numpy as np, numeq
data = np.load(sys.argv[1])
out = {}
for key in data.files:
    name, fmt = key.rsplit("@", 1)
    for o in ("bf16", "fp16", "fp32"):
        for r in %r:
            out[f"{key}|{o}|{r}"] = numeq.reference.softmax(data[key], in_fmt=fmt, out=o, rounding=r, seed=3)
np.savez(sys.argv[2], **out)
""" % (ROUNDINGS,)


def test_fast_path_equals_the_mpfr_path(tmp_path: Path) -> None:
    rows = _rows()
    np.savez(tmp_path / "in.npz", **{f"{k}@{fmt}": x for k, (x, fmt) in rows.items()})
    env = dict(os.environ, NUMEQ_FUNCTIONS="mpfr", PYTHONPATH=str(Path(numeq.__file__).parents[1]))
    subprocess.run([sys.executable, "-c", _SCRIPT, str(tmp_path / "in.npz"), str(tmp_path / "mpfr.npz")], env=env,
                   check=True, timeout=600)
    checked = 0
    with np.load(tmp_path / "mpfr.npz") as want:
        for key, (x, fmt) in rows.items():
            for o in ("bf16", "fp16", "fp32"):
                for r in ROUNDINGS:
                    got = numeq.reference.softmax(x, in_fmt=fmt, out=o, rounding=r, seed=3)
                    w = want[f"{key}@{fmt}|{o}|{r}"]
                    same = (got == w) & (np.signbit(got) == np.signbit(w)) | (np.isnan(got) & np.isnan(w))
                    assert same.all(), (key, o, r, np.argwhere(~same)[:3])
                    checked += got.size
    assert checked > 100_000
