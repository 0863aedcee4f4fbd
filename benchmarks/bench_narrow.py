#!/usr/bin/env python3
"""Narrow-accumulator matmuls: numeq's plan beside APyTypes computing the same arithmetic, in one
process (issue 18, goal 4).

APyTypes' floating-point matmul rounds each product into the accumulator's format and adds the
products in order, rounding every sum to nearest even; numeq's plan states the same (a
sequential reduction from +0, products rounded, the accumulator's format: tests/python/
test_apytypes.py checks the bits). Each row: the best of --repeat runs of each, their ratio
(numeq / APyTypes: below 1 is faster), and whether the results are bit-identical.

    python3 benchmarks/bench_narrow.py [--sizes 128,256,512] [--formats bf16,fp16,e5m2] [--repeat 3]

Nothing here asserts on time.
"""

from __future__ import annotations

import argparse

import numpy as np

import numeq
from timing import best_of  # benchmarks/timing.py

BITS = {"bf16": (8, 7), "fp16": (5, 10), "e4m3": (4, 3), "e5m2": (5, 2)}


def plan(fmt: str) -> numeq.Plan:
    cast = {"format": fmt, "overflow": "ieee", "rounding": "nearest_even", "subnormals": "keep"}
    return numeq.Plan({"c_placement": "last", "name": f"sequential {fmt}", "output": cast,
                       "reduction": {"kind": "sequential", "start_from_zero": True,
                                     "arithmetic": {"accumulate": cast, "product": "rounded", "product_cast": cast}}})




def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="128,256,512")
    p.add_argument("--formats", default="bf16,fp16,e5m2")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--threads", type=int, default=0, help="numeq's threads (0: its default)")
    args = p.parse_args()
    numeq.set_num_threads(args.threads)
    import apytypes as apy

    rng = np.random.default_rng(0)
    print(f"threads: numeq {numeq.num_threads()}\n")
    print("| format | n^3 | numeq ms | APyTypes ms | numeq / APyTypes | bit-identical |")
    print("|---|---|---|---|---|---|")
    for fmt in args.formats.split(","):
        e, m = BITS[fmt]
        pl = plan(fmt)
        for n in (int(s) for s in args.sizes.split(",")):
            a, b = numeq.round(rng.standard_normal((n, n)), fmt), numeq.round(rng.standard_normal((n, n)), fmt)
            A = apy.APyFloatArray.from_float(a, exp_bits=e, man_bits=m)
            B = apy.APyFloatArray.from_float(b, exp_bits=e, man_bits=m)
            tn = best_of(lambda: numeq.matmul(a, b, plan=pl, in_fmt=fmt, out=fmt), args.repeat)
            ta = best_of(lambda: A @ B, args.repeat)
            d, c = numeq.matmul(a, b, plan=pl, in_fmt=fmt, out=fmt), (A @ B).to_numpy()
            same = bool(np.all((d == c) | (np.isnan(d) & np.isnan(c))))
            print(f"| {fmt} | {n} | {tn * 1e3:.1f} | {ta * 1e3:.1f} | {tn / ta:.2f} | {same} |", flush=True)


if __name__ == "__main__":
    main()
