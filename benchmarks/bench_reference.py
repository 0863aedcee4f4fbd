#!/usr/bin/env python3
"""Exact matmul throughput: numeq.reference.matmul vs numpy float64 matmul vs a naive
arbitrary-precision dot-product loop, in one process.

    python benchmarks/bench_reference.py [--sizes 256 512 1024] [--naive-elements 16]

Inputs are standard normal values rounded into bf16 and e4m3fn. numpy's float64 matmul is not
exact (it rounds every partial sum): it is the speed of light. The naive loop (mpmath at 2400
bits, exact for these inputs) is timed on --naive-elements output elements and extrapolated to
the whole matrix. Reported: seconds and the ratios numeq / numpy and naive / numeq.
"""

from __future__ import annotations

import argparse
import time

import mpmath
import numpy as np

import numeq


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[256, 512, 1024])
    parser.add_argument("--naive-elements", type=int, default=16)
    args = parser.parse_args()
    numeq.set_num_threads(0)
    print(f"numeq {numeq.__version__}, numpy {np.__version__}, numeq threads {numeq.num_threads()}")
    print(f"{'fmt':8} {'n':>5} {'numeq s':>9} {'numpy s':>9} {'naive s (extrap.)':>18} {'numeq/numpy':>12} {'naive/numeq':>12}")
    rng = np.random.default_rng(0)
    mpmath.mp.prec = 2400
    for fmt in ("bf16", "e4m3fn"):
        for n in args.sizes:
            a = numeq.round(rng.standard_normal((n, n)), fmt)
            b = numeq.round(rng.standard_normal((n, n)), fmt)
            t_numeq, _ = timed(lambda: numeq.reference.matmul(a, b, in_fmt=fmt, out="fp32"))
            t_numpy = min(timed(lambda: a @ b)[0] for _ in range(3))
            cols = [[mpmath.mpf(float(v)) for v in b[:, j]] for j in range(args.naive_elements)]
            row = [mpmath.mpf(float(v)) for v in a[0]]
            t0 = time.perf_counter()
            for j in range(args.naive_elements):
                s = mpmath.mpf(0)
                for x, y in zip(row, cols[j]):
                    s += x * y
            t_naive = (time.perf_counter() - t0) / args.naive_elements * n * n
            print(f"{fmt:8} {n:5d} {t_numeq:9.3f} {t_numpy:9.4f} {t_naive:18.1f} {t_numeq / t_numpy:12.1f} "
                  f"{t_naive / t_numeq:12.1f}")


if __name__ == "__main__":
    main()
