#!/usr/bin/env python3
"""The input dtype's share of an emulation: numeq.matmul on the same bf16 values held as float32,
float64, float16, ml_dtypes bfloat16 and (scaled to integers) int8, with and without
``in_fmt="bf16"``, each time over the float32 call without in_fmt (issue target: every dtype
within 1.2x of the fastest path).

    python benchmarks/bench_dtypes.py [--size 512] [--repeat 3] [--platforms cuda_core.fp32,nvidia.h100]

The float32 path without in_fmt needs no check (every float32 is an fp32 value); with
in_fmt="bf16" the extension checks it in place. Other dtypes are widened to float64 first.
Nothing here asserts on time.
"""

from __future__ import annotations

import argparse

import ml_dtypes
import numpy as np

import numeq
from timing import best_of  # benchmarks/timing.py


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", type=int, default=512)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--platforms", default="cuda_core.fp32,nvidia.h100")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    n = args.size
    a = numeq.round(rng.standard_normal((n, n)), "bf16")
    b = numeq.round(rng.standard_normal((n, n)), "bf16")
    forms = {
        "float32": (a.astype(np.float32), b.astype(np.float32)),
        "float64": (a, b),
        "float16": (a.astype(np.float16), b.astype(np.float16)),
        "ml_dtypes bfloat16": (a.astype(ml_dtypes.bfloat16), b.astype(ml_dtypes.bfloat16)),
    }
    print(f"numeq.matmul {n}^3, best of {args.repeat}; times in ms, ratio to float32 without in_fmt\n")
    print("| platform | input | in_fmt | ms | ratio |\n|---|---|---|---|---|")
    for platform in args.platforms.split(","):
        # A platform without an fp32 plan (the tensor cores) takes bf16 as the base format.
        own = "fp32" if platform.startswith("cuda_core") else "bf16"
        base = best_of(lambda: numeq.matmul(*forms["float32"], platform=platform,
                                            in_fmt=None if own == "fp32" else "bf16"), args.repeat)
        rows = [(name, fmt) for name in forms for fmt in ("bf16",)]
        rows += [("float16", None), ("ml_dtypes bfloat16", None)] if own == "fp32" else []
        for name, fmt in [("float32", None if own == "fp32" else "bf16")] + rows:
            x, y = forms[name]
            t = best_of(lambda: numeq.matmul(x, y, platform=platform, in_fmt=fmt), args.repeat)
            print(f"| {platform} | {name} | {fmt or '(own)'} | {1e3 * t:.1f} | {t / base:.2f}x |", flush=True)
        if own == "bf16":
            ia = np.clip(np.round(a * 16), -127, 127).astype(np.int8)
            ib = np.clip(np.round(b * 16), -127, 127).astype(np.int8)
            t = best_of(lambda: numeq.matmul(ia, ib, platform=platform, in_fmt="bf16"), args.repeat)
            print(f"| {platform} | int8 | bf16 | {1e3 * t:.1f} | {t / base:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
