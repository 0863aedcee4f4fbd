#!/usr/bin/env python3
"""Platform emulation speed: bit-exact nvidia.h100 bf16 matmul and cuda_core.fp32 matmul against
numpy's float32 matmul (BLAS sgemm: the speed of light, not bit-exact), and the Trainium plans
(trainium.trn2, trainium.trn1) against the tensor-core model, in one script.

    python benchmarks/bench_platforms.py [--sizes 256,512,1024] [--repeat 3]

Inputs: standard normal values rounded to bf16 (for the tensor-core model and Trainium) or float32.
Reported: best of --repeat runs in seconds and the ratios to numpy. Targets (issue: machine models):
cuda_core.fp32 within 4x of numpy float32 matmul, the tensor-core model within 20x.

The second table: Trainium beside nvidia.h100 on the same bf16 inputs, the values alone
(``numeq.matmul``) and the emulation a check takes (``op.emulation``: values and deterministic
bound, each run on a fresh op), with the trn/h100 ratios (issue target: Trainium plans within
1.5x of the tensor-core model's time).
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
    trainium = [p for p in ("trainium.trn2", "trainium.trn1") if p in platforms]
    if "nvidia.h100" not in platforms or not trainium:
        return
    print()
    head = f"{'n':>6} {'h100 s':>9}" + "".join(f" {p.split('.')[-1] + ' s':>9} {'/h100':>6}" for p in trainium)
    print(f"{'bf16 in, fp32 out; values: numeq.matmul':<{len(head)}} | emulation: values + deterministic bound")
    print(head + " |" + head[6:])
    for n in sizes:
        ab = numeq.round(rng.standard_normal((n, n)), "bf16").astype(np.float32)
        bb = numeq.round(rng.standard_normal((n, n)), "bf16").astype(np.float32)

        def values(p: str) -> float:
            return best_of(lambda: numeq.matmul(ab, bb, platform=p, in_fmt="bf16"), args.repeat)

        def emulation(p: str) -> float:
            # A fresh op per run: an op keeps its emulation once computed.
            return best_of(lambda: numeq.ops.matmul(ab, bb, in_fmt="bf16", out="fp32").emulation(p), args.repeat)

        line = f"{n:>6}"
        for timer in (values, emulation):
            # Interleaved per platform pair, so that load on the machine falls on both alike.
            t_h = timer("nvidia.h100")
            line += f" {t_h:>9.4f}" if timer is values else f" | {t_h:>9.4f}"
            for p in trainium:
                t_p = timer(p)
                line += f" {t_p:>9.4f} {t_p / t_h:>5.2f}x"
        print(line, flush=True)
    print("target: Trainium plans <= 1.5x the tensor-core model's time")


if __name__ == "__main__":
    main()
