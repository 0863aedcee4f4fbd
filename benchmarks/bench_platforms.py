#!/usr/bin/env python3
"""Platform emulation speed: bit-exact nvidia.h100 bf16 matmul and cuda_core.fp32 matmul against
numpy's float32 matmul (BLAS sgemm: the speed of light, not bit-exact), in one script.

    python benchmarks/bench_platforms.py [--sizes 256,512,1024] [--repeat 3]

Inputs: standard normal values rounded to bf16 (for the tensor-core model) or float32. Reported:
best of --repeat runs in seconds and the ratios to numpy. Targets (issue: machine models):
cuda_core.fp32 within 4x of numpy float32 matmul, the tensor-core model within 20x.
"""

from __future__ import annotations

import argparse
import os

import numpy as np

import numeq
from timing import best_of  # benchmarks/timing.py




def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="256,512,1024")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    rng = np.random.default_rng(0)
    print(f"numeq {numeq.__version__}, numpy {np.__version__}, threads {numeq.num_threads()}, "
          f"cpu_count {os.cpu_count()}, best of {args.repeat}")
    print(f"{'n':>6} {'numpy f32 s':>12} {'cuda_core s':>12} {'ratio':>7} {'h100 bf16 s':>12} {'ratio':>7}")
    platforms = numeq.platforms()
    for n in sizes:
        a = rng.standard_normal((n, n)).astype(np.float32)
        b = rng.standard_normal((n, n)).astype(np.float32)
        ab = numeq.round(a, "bf16").astype(np.float32)
        bb = numeq.round(b, "bf16").astype(np.float32)
        t_np = best_of(lambda: a @ b, max(args.repeat, 5))
        t_cc = best_of(lambda: numeq.matmul(a, b, platform="cuda_core.fp32"), args.repeat)
        line = f"{n:>6} {t_np:>12.4f} {t_cc:>12.4f} {t_cc / t_np:>6.1f}x"
        if "nvidia.h100" in platforms:
            t_tc = best_of(lambda: numeq.matmul(ab, bb, platform="nvidia.h100", in_fmt="bf16"), args.repeat)
            line += f" {t_tc:>12.4f} {t_tc / t_np:>6.1f}x"
        print(line, flush=True)
    print("targets: cuda_core.fp32 <= 4x numpy float32 matmul; tensor-core model <= 20x")


if __name__ == "__main__":
    main()
