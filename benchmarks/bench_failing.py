#!/usr/bin/env python3
"""A failing check against a passing one (issue 32, section 3): numeq.compare on the same op and
shape, once with the platform's own output (passes) and once with a planted mistake (fails: the
ladder, the variant search, the probabilistic walk where it must, the diagnoses), side by side in
one process. Goal: a failing check at most 3x the passing one.

    python benchmarks/bench_failing.py [--quick] [--repeats 3]

Rows (the mistake in brackets):
* matmul bf16 1024^3 on nvidia.h100 and trainium.trn2 [one 128 x 128 output tile off by 1%];
* the same [the last 128-row K tile never accumulated: every element fails, diagnosed];
* matmul e4m3 512^3 on trainium.trn2 [inputs quantised as OCP e4m3fn, max 448, where Trainium's
  e4m3 saturates at 240: one row and two columns fail];
* layernorm 1024 x 4096 fp32 on trainium.trn2 [one row's output scaled by 1.01].

Each figure is the best of ``--repeats`` runs, each on a fresh op (an op keeps its exact result:
a second compare on the same op would not pay for it). Nothing here asserts on time.
"""

from __future__ import annotations

import argparse
from typing import Any, Callable

import ml_dtypes
import numpy as np

import numeq
from timing import best_of


def _gemm(n: int, platform: str, mistake: str) -> tuple[Callable[[], Any], np.ndarray, np.ndarray]:
    rng = np.random.default_rng(n)
    a = rng.standard_normal((n, n)).astype(ml_dtypes.bfloat16).astype(np.float32)
    b = rng.standard_normal((n, n)).astype(ml_dtypes.bfloat16).astype(np.float32)
    good = numeq.matmul(a, b, platform=platform, in_fmt="bf16", out="fp32")
    if mistake == "tile":
        bad = good.copy()
        bad[128:256, n // 2:n // 2 + 128] *= np.float32(1.01)
    else:
        short = a.copy()
        short[:, n - 128:] = 0
        bad = numeq.matmul(short, b, platform=platform, in_fmt="bf16", out="fp32")
    return (lambda: numeq.ops.matmul(a, b, in_fmt="bf16", out="fp32")), good, bad


def _fp8(n: int) -> tuple[Callable[[], Any], np.ndarray, np.ndarray]:
    rng = np.random.default_rng(8)
    a, b = rng.standard_normal((n, n)) * 20, rng.standard_normal((n, n)) * 20
    a[59, 3], b[10, 59], b[77, 79] = 400.0, 300.0, -350.0
    a8, b8 = (numeq.round(x, "e4m3", overflow="saturate") for x in (a, b))
    wide = [x.astype(ml_dtypes.float8_e4m3fn).astype(np.float64) for x in (a, b)]
    good = numeq.matmul(a8, b8, platform="trainium.trn2", in_fmt="e4m3", out="fp32")
    return (lambda: numeq.ops.matmul(a8, b8, in_fmt="e4m3", out="fp32")), good, numeq.round(wide[0] @ wide[1], "fp32")


def _layernorm(rows: int, cols: int) -> tuple[Callable[[], Any], np.ndarray, np.ndarray]:
    x = np.random.default_rng(3).standard_normal((rows, cols)).astype(np.float32)
    make = lambda: numeq.ops.layernorm(x, in_fmt="fp32", out="fp32")  # noqa: E731
    good = make().emulate("trainium.trn2")
    bad = good.copy()
    bad[rows // 3] = (bad[rows // 3] * 1.01).astype(np.float32)
    return make, good, bad


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="256^3 GEMMs, a 256 x 1024 layernorm")
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    n = 256 if args.quick else 1024
    rows: list[tuple[str, str, Callable, np.ndarray, np.ndarray]] = []
    for platform in ("nvidia.h100", "trainium.trn2"):
        for mistake in ("tile", "missing"):
            make, good, bad = _gemm(n, platform, mistake)
            what = "one tile off by 1%" if mistake == "tile" else "last K tile missing"
            rows.append((f"matmul bf16 {n}^3", f"{platform} [{what}]", make, good, bad))
    make, good, bad = _fp8(256 if args.quick else 512)
    rows.append((f"matmul e4m3 {256 if args.quick else 512}^3", "trainium.trn2 [e4m3fn inputs]", make, good, bad))
    r, c = (256, 1024) if args.quick else (1024, 4096)
    make, good, bad = _layernorm(r, c)
    rows.append((f"layernorm {r} x {c} fp32", "trainium.trn2 [one row x1.01]", make, good, bad))

    print("| check | platform [mistake] | pass (s) | fail (s) | fail / pass | failing verdict |")
    print("|---|---|---|---|---|---|")
    for name, platform, make, good, bad in rows:
        plat = platform.split(" [")[0]
        ok = numeq.compare(good, make(), plat)
        assert ok.passed, ok.message
        verdict = numeq.compare(bad, make(), plat)
        t_pass = best_of(lambda: numeq.compare(good, make(), plat), args.repeats)
        t_fail = best_of(lambda: numeq.compare(bad, make(), plat), args.repeats)
        said = verdict.tier + (f", {verdict.diagnoses[0].kind}" if verdict.diagnoses else "")
        print(f"| {name} | {platform} | {t_pass:.3f} | {t_fail:.3f} | {t_fail / t_pass:.1f}x | {said} |")


if __name__ == "__main__":
    main()
