#!/usr/bin/env python3
"""Exact matmul throughput: numeq.reference.matmul_exact and numeq.reference.matmul beside numpy's
float64 matmul, and a naive arbitrary-precision dot-product loop, in one process.

    python benchmarks/bench_reference.py [--sizes 256 512 1024] [--repeat 7] [--naive-elements 16]

Inputs are standard normal values rounded into bf16 and e4m3fn, held in float64 arrays. numpy's
float64 `a @ b` is not exact (it rounds every partial sum): it is the speed of light. Timed, each
the best of --repeat runs:

- numpy: `a @ b`;
- exact: `numeq.reference.matmul_exact(a, b)`, the exact result as a double-double (hi, lo);
- fp32: `numeq.reference.matmul(a, b, out="fp32")`, the exact result rounded once;
- fp32+in_fmt: the same with `in_fmt` given, which first checks that every input is a value of
  the format (the Python-side validation, included to show its cost).

numpy is timed before and after numeq (its best time counts); --repeat runs at 512, up to four
times as many at smaller sizes, at least 3 at larger ones.

numeq's dgemm and numpy's come from two BLAS libraries whose idle threads spin for a while after
each call; every timed phase therefore starts after a pause (--pause seconds) so that one library's
spinning threads do not slow the other's. The naive loop (mpmath at 2400 bits, exact for these
inputs) is timed on --naive-elements output elements and extrapolated to the whole matrix.
Goals (issue 18): exact GEMM within 10x numpy for bf16 and within 5x for e4m3fn.
"""

from __future__ import annotations

import argparse
import time

import mpmath
import numpy as np

import numeq
from timing import best_of


def naive_seconds(a: np.ndarray, b: np.ndarray, elements: int) -> float:
    n = a.shape[0]
    mpmath.mp.prec = 2400
    cols = [[mpmath.mpf(float(v)) for v in b[:, j]] for j in range(elements)]
    row = [mpmath.mpf(float(v)) for v in a[0]]
    t0 = time.perf_counter()
    for j in range(elements):
        s = mpmath.mpf(0)
        for x, y in zip(row, cols[j]):
            s += x * y
    return (time.perf_counter() - t0) / elements * n * n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[256, 512, 1024])
    parser.add_argument("--repeat", type=int, default=8)
    parser.add_argument("--pause", type=float, default=0.3)
    parser.add_argument("--naive-elements", type=int, default=16)
    args = parser.parse_args()
    numeq.set_num_threads(0)
    print(f"numeq {numeq.__version__}, numpy {np.__version__}, numeq threads {numeq.num_threads()}; "
          f"times in ms, best of {args.repeat}; ratios to numpy float64 a @ b")
    print(f"{'fmt':7} {'n':>5} {'numpy':>8} {'exact':>8} {'fp32':>8} {'fp32+in_fmt':>11} {'exact/np':>9} "
          f"{'fp32/np':>8} {'+in_fmt/np':>10} {'goal':>5} {'naive/exact':>11}")
    rng = np.random.default_rng(0)
    for fmt, goal in (("bf16", 10.0), ("e4m3fn", 5.0)):
        for n in args.sizes:
            a = numeq.round(rng.standard_normal((n, n)), fmt)
            b = numeq.round(rng.standard_normal((n, n)), fmt)
            # Many more runs for the sub-millisecond sizes, whose best time is the least disturbed.
            repeat = max(3, round(args.repeat * min(4.0, (512 / n) ** 2)))

            def phase(fn):
                time.sleep(args.pause)
                fn()  # warm: first-call allocations, thread start-up
                return best_of(fn, repeat)

            t_numpy = phase(lambda: a @ b)
            t_exact = phase(lambda: numeq.reference.matmul_exact(a, b))
            t_fp32 = phase(lambda: numeq.reference.matmul(a, b, out="fp32"))
            t_in_fmt = phase(lambda: numeq.reference.matmul(a, b, in_fmt=fmt, out="fp32"))
            t_numpy = min(t_numpy, phase(lambda: a @ b))
            naive = naive_seconds(a, b, args.naive_elements) if args.naive_elements > 0 else float("nan")
            worst = max(t_exact, t_fp32) / t_numpy
            print(f"{fmt:7} {n:5d} {t_numpy * 1e3:8.2f} {t_exact * 1e3:8.2f} {t_fp32 * 1e3:8.2f} {t_in_fmt * 1e3:11.2f} "
                  f"{t_exact / t_numpy:9.1f} {t_fp32 / t_numpy:8.1f} {t_in_fmt / t_numpy:10.1f} "
                  f"{'met' if worst <= goal else 'MISS':>5} {naive / t_exact:11.0f}", flush=True)


if __name__ == "__main__":
    main()
