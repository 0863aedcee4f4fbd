#!/usr/bin/env python3
"""Thread scaling: each kernel above 256^3 (or 1M elements) timed on one thread and on N threads
(numeq.set_num_threads), in one process; the table gives both times and the speedup.

    python benchmarks/bench_threads.py [--threads 2] [--repeat 3] [--size 512] [--only NAME,...]

Kernels: the bit-exact matmul emulations (cuda_core.fp32 from float32, nvidia.h100, nvidia.b200
and trainium.trn2 from bf16 values, each with its deterministic bound), the exact matmul
(numeq.reference.matmul_exact, bf16 values), a narrow accumulator (a sequential bf16 plan, the
platform's own step with a bf16 accumulator), a cast (fp32 -> bf16 of 2^24 values), the certified
references of exp and softmax into bf16, the check of a softmax (numeq.compare) and its
enclosed exact value. Inputs: standard normal values, rounded as each kernel needs. Every figure
is the best of --repeat runs. Nothing is asserted on time: on a machine shared with other work
the speedup reads low; read it beside `uptime`.
"""

from __future__ import annotations

import argparse
import os
from typing import Any, Callable

import numpy as np

import numeq
from bench_narrow import plan as narrow_plan  # benchmarks/bench_narrow.py: a sequential plan
from timing import best_of  # benchmarks/timing.py


def kernels(n: int) -> dict[str, Callable[[], Any]]:
    rng = np.random.default_rng(0)
    a32 = rng.standard_normal((n, n)).astype(np.float32)
    b32 = rng.standard_normal((n, n)).astype(np.float32)
    abf = numeq.round(a32, "bf16").astype(np.float32)
    bbf = numeq.round(b32, "bf16").astype(np.float32)
    # A bf16-accumulator plan: products rounded to bf16, added in order into bf16 (the narrow path).
    narrow = narrow_plan("bf16")
    x = numeq.round(rng.standard_normal((n * 2, 2048)), "bf16")
    big = rng.standard_normal(1 << 24).astype(np.float32)
    ex = numeq.round(rng.standard_normal(1 << 20) * 4, "bf16")

    def check() -> Any:
        op = numeq.ops.softmax(x, in_fmt="bf16", out="bf16")
        return numeq.compare(emulated, op, "nvidia.h100")

    emulated = numeq.ops.softmax(x, in_fmt="bf16", out="bf16").emulation("nvidia.h100").values
    return {
        f"matmul {n}^3 cuda_core.fp32 (fp32)": lambda: numeq.matmul(a32, b32, platform="cuda_core.fp32"),
        f"matmul {n}^3 nvidia.h100 (bf16)": lambda: numeq.matmul(abf, bbf, platform="nvidia.h100", in_fmt="bf16"),
        f"matmul {n}^3 nvidia.b200 (bf16)": lambda: numeq.matmul(abf, bbf, platform="nvidia.b200", in_fmt="bf16"),
        f"matmul {n}^3 trainium.trn2 (bf16)": lambda: numeq.matmul(abf, bbf, platform="trainium.trn2", in_fmt="bf16"),
        f"bound {n}^3 nvidia.h100 (bf16)": lambda: numeq.ops.matmul(abf, bbf, in_fmt="bf16").emulation("nvidia.h100"),
        f"exact matmul {n}^3 (bf16)": lambda: numeq.reference.matmul_exact(abf, bbf, in_fmt="bf16"),
        f"bf16 accumulator {n // 2}^3": lambda: numeq.matmul(abf[: n // 2, : n // 2], bbf[: n // 2, : n // 2],
                                                          plan=narrow, in_fmt="bf16", out="bf16"),
        "cast 2^24 fp32 -> bf16": lambda: numeq.round(big, "bf16"),
        "reference exp 2^20 bf16 -> bf16": lambda: numeq.reference.exp(ex, in_fmt="bf16", out="bf16"),
        f"reference softmax {2 * n}x2048 bf16": lambda: numeq.reference.softmax(x, in_fmt="bf16", out="bf16"),
        f"compare softmax {2 * n}x2048 bf16 nvidia.h100": check,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=2, help="the many-thread count (default 2)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--size", type=int, default=512, help="matmul size n (n^3); softmax rows 2n x 2048")
    ap.add_argument("--only", default="", help="comma-separated substrings of kernel names")
    args = ap.parse_args()
    ks = kernels(args.size)
    wanted = [w for w in args.only.split(",") if w]
    print(f"numeq, numpy {np.__version__}, cpu_count {os.cpu_count()}, best of {args.repeat}, "
          f"load average {os.getloadavg()[0]:.1f}\n")
    print(f"| kernel | 1 thread ms | {args.threads} threads ms | speedup |")
    print("|---|---|---|---|")
    for name, fn in ks.items():
        if wanted and not any(w in name for w in wanted):
            continue
        times = []
        for t in (1, args.threads):
            numeq.set_num_threads(t)
            fn()  # warm: caches, plans, pages
            times.append(best_of(fn, args.repeat))
        numeq.set_num_threads(0)
        print(f"| {name} | {1e3 * times[0]:.1f} | {1e3 * times[1]:.1f} | {times[0] / times[1]:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
