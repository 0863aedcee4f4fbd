#!/usr/bin/env python3
"""The input dtype's share of an emulation: numeq.matmul on the same values held as float32,
float64, float16, ml_dtypes bfloat16 / float8_e4m3fn and (scaled to integers) int8 and int32, with
in_fmt given and left to the dtype, each over the float32 call that computes the same thing (the
same values as float32, the same plan, the same in_fmt: the dtype's own where it is left out)
(issue target: every dtype within 1.2x of the float32 path).

    python benchmarks/bench_dtypes.py [--sizes 512,1024] [--repeat 3] [--platforms cuda_core.fp32,nvidia.h100]

float32 arrays without in_fmt need no check (every float32 is an fp32 value); with in_fmt the
extension checks them in place. Every other dtype is read in place by the extension too, decoded
to float64 in one pass. cuda_core.fp32 has no e4m3fn plan: its e4m3fn rows run its fp32 plan with
in_fmt checked. Nothing here asserts on time.
"""

from __future__ import annotations

import argparse

import ml_dtypes
import numpy as np

import numeq
from timing import best_of  # benchmarks/timing.py

OWN = {"float32": "fp32", "float64": "fp64", "float16": "fp16", "bfloat16": "bf16", "float8_e4m3fn": "e4m3fn",
       "int8": "fp64", "int32": "fp64"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="512,1024")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--platforms", default="cuda_core.fp32,nvidia.h100")
    args = ap.parse_args()
    print(f"numeq.matmul n^3, best of {args.repeat} (each row interleaved with its float32 call); times in ms; "
          "ratio: the row over the float32 call with the same values, plan and in_fmt; vs first: over the "
          "platform's first row (float32 bf16 values, no check on cuda_core.fp32)\n")
    print("| platform | n | input | in_fmt | float32 ms | ms | ratio | vs first |\n|---|---|---|---|---|---|---|---|")
    for n in (int(s) for s in args.sizes.split(",")):
        rng = np.random.default_rng(0)
        # Values of both bf16 and fp16 (fp16 first: its subnormals then stay on its grid).
        a, b = (numeq.round(numeq.round(rng.standard_normal((n, n)), "fp16"), "bf16") for _ in range(2))
        a8 = numeq.round(rng.standard_normal((n, n)), "e4m3fn", overflow="saturate")
        b8 = numeq.round(rng.standard_normal((n, n)), "e4m3fn", overflow="saturate")
        # Integers that are bf16 values: a * 16 (int8), a * 1024 rounded to 8 significant bits (int32).
        i8 = [np.clip(np.round(x * 16), -127, 127).astype(np.int8) for x in (a, b)]
        i32 = [numeq.round(np.round(x * 1024), "bf16").astype(np.int32) for x in (a, b)]
        for platform in args.platforms.split(","):
            # A platform without an fp32 plan (the tensor cores) takes bf16 as the base format.
            own = "fp32" if platform.startswith("cuda_core") else "bf16"
            has_fp8 = platform != "cuda_core.fp32"
            rows = [("float32", (a, b), None if own == "fp32" else "bf16"), ("float32", (a, b), "bf16"),
                    ("float64", (a, b), "bf16"), ("float16", (a, b), "bf16"), ("float16", (a, b), None),
                    ("bfloat16", (a, b), "bf16"), ("bfloat16", (a, b), None),
                    ("float8_e4m3fn", (a8, b8), "e4m3fn"), ("float8_e4m3fn", (a8, b8), None),
                    ("int8", i8, "bf16"), ("int32", i32, "bf16")]
            first = None
            for name, (x, y), fmt in rows:
                if name.startswith("float8") and not has_fp8:
                    kwargs = {"plan": numeq.plan(platform, "matmul", "fp32")}
                    base_fmt = fmt  # the plan is fixed: the float32 call checks what the row checks
                else:
                    kwargs = {"platform": platform}
                    base_fmt = fmt or OWN[name]  # the same plan: the float32 call names the dtype's format
                dtype = getattr(ml_dtypes, name, None) or np.dtype(name)
                xs, ys = (x if x.dtype == dtype else x.astype(dtype)), (y if y.dtype == dtype else y.astype(dtype))
                x32, y32 = x.astype(np.float32), y.astype(np.float32)
                base_fmt = None if base_fmt == "fp32" else base_fmt
                t_base = t_row = float("inf")
                for _ in range(args.repeat):
                    t_base = min(t_base, best_of(lambda: numeq.matmul(x32, y32, in_fmt=base_fmt, **kwargs), 1))
                    t_row = min(t_row, best_of(lambda: numeq.matmul(xs, ys, in_fmt=fmt, **kwargs), 1))
                first = first or t_row
                label = name if "plan" not in kwargs else f"{name} (fp32 plan)"
                print(f"| {platform} | {n} | {label} | {fmt or '(own)'} | {1e3 * t_base:.1f} | {1e3 * t_row:.1f} | "
                      f"{t_row / t_base:.2f}x | {t_row / first:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
