#!/usr/bin/env python3
"""Cast throughput: numeq.encode and numeq.round vs ml_dtypes ``astype`` vs a plain copy of the same bytes.

    python benchmarks/bench_casts.py [--log2n 26] [--repeat 5]

2^log2n float32 values (standard normal, fixed seed) are converted to bf16, e4m3fn and e5m2:
numeq nearest-even with overflow "ieee" (the work ml_dtypes does), numeq saturating (e4m3fn, the
OFP8 mode ml_dtypes lacks), numeq stochastic rounding, numeq.round's float64 values of the
nearest-even cast, and ml_dtypes ``x.astype(dtype)``; numeq single-threaded
(set_num_threads(1)) and with every thread (set_num_threads(0)). Before timing,
numeq's and ml_dtypes' results are checked to be bit-identical, so both sides do the same work.
Reported: best of --repeat runs, in ns per element, and the ratios ml_dtypes / numeq,
numeq / copy and stochastic / nearest. (OPENBLAS_CORETYPE, if set, does not affect astype.)
"""

from __future__ import annotations

import argparse
import os
import platform
import sys

import ml_dtypes
import numpy as np

import numeq
from timing import best_of  # benchmarks/timing.py

TARGETS = [("bf16", ml_dtypes.bfloat16, np.uint16), ("e4m3fn", ml_dtypes.float8_e4m3fn, np.uint8),
           ("e5m2", ml_dtypes.float8_e5m2, np.uint8)]




def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--log2n", type=int, default=26, help="number of elements = 2^log2n (default 26)")
    parser.add_argument("--repeat", type=int, default=5, help="runs per measurement; the best is kept (default 5)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    n = 1 << args.log2n
    x = np.random.default_rng(args.seed).standard_normal(n, dtype=np.float32)

    numeq.set_num_threads(0)
    all_threads = numeq.num_threads()
    print(f"numeq {numeq.__version__}, ml_dtypes {ml_dtypes.__version__}, numpy {np.__version__}, "
          f"Python {platform.python_version()}, {platform.machine()}, os.cpu_count()={os.cpu_count()}, "
          f"numeq threads (all)={all_threads}, n=2^{args.log2n}={n}, best of {args.repeat}")

    # Equal work: numeq (nearest_even, overflow ieee) == ml_dtypes astype, bit for bit.
    for name, dtype, bits in TARGETS:
        a = numeq.encode(x, name)
        b = x.astype(dtype).view(bits)
        if not np.array_equal(a, b):
            print(f"MISMATCH {name}: {np.count_nonzero(a != b)} elements differ", file=sys.stderr)
            return 1
    print("check: numeq.encode == ml_dtypes astype on all elements for bf16, e4m3fn, e5m2")

    def ns(seconds: float) -> float:
        return seconds / n * 1e9

    copy_ns = ns(best_of(x.copy, args.repeat))
    rows = []
    for name, dtype, _ in TARGETS:
        ml_ns = ns(best_of(lambda: x.astype(dtype), args.repeat))
        variants = [("nearest", numeq.encode, dict()), ("nearest, values", numeq.round, dict())]
        if name == "e4m3fn":
            variants.append(("nearest saturate", numeq.encode, dict(overflow="saturate")))
        variants.append(("stochastic", numeq.encode, dict(rounding="stochastic", seed=1)))
        for label, cast, kw in variants:
            times = {}
            for threads in (1, 0):
                numeq.set_num_threads(threads)
                times[threads] = ns(best_of(lambda: cast(x, name, **kw), args.repeat))
            numeq.set_num_threads(0)
            rows.append((name, label, ml_ns, times[1], times[0]))

    nearest = {(r[0]): r for r in rows if r[1] == "nearest"}
    head = (f"{'format':8} {'numeq mode':17} {'ml_dtypes':>9} {'numeq 1T':>9} {'numeq ' + str(all_threads) + 'T':>9} "
            f"{'ml/nq 1T':>9} {'ml/nq ' + str(all_threads) + 'T':>9} {'nq1T/copy':>9} {'stoch/near':>10}")
    print(f"\nns per element (copy of the float32 input: {copy_ns:.3f} ns/element)\n")
    print(head)
    print("-" * len(head))
    for name, label, ml_ns, t1, tall in rows:
        ml_col = f"{ml_ns:9.3f}" if label == "nearest" else f"{'':9}"
        sr = f"{t1 / nearest[name][3]:10.2f}" if label == "stochastic" else f"{'':10}"
        print(f"{name:8} {label:17} {ml_col} {t1:9.3f} {tall:9.3f} {ml_ns / t1:9.2f} {ml_ns / tall:9.2f} "
              f"{t1 / copy_ns:9.2f} {sr}")
    print("\nml_dtypes column: x.astype(dtype) (nearest-even, non-saturating; ml_dtypes has no saturating mode);"
          "\nml/nq ratios > 1: numeq faster. numeq rows: numeq.encode (bit patterns, as astype gives), 'values':"
          "\nnumeq.round (float64 values: 8 bytes written per element, astype 1 or 2; copy: float32 x.copy())."
          "\nstoch/near: single-threaded stochastic / nearest time.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
