#!/usr/bin/env python3
"""How tight numeq's bounds are against the emulation's own error, for every platform's matmul.

    python benchmarks/bench_bound_tightness.py [--ks 128,1024,8192] [--m 16] [--n 16]
                                               [--generators normal,uniform_pos,uniform,lognormal]
                                               [--platforms nvidia.h100,...] [--out fp32]

For every platform (numeq.platforms()), every input format its matmul takes with the chosen
output format (fp32 by default), every K and every generator: a [m, K] @ [K, n] product of seeded
inputs rounded to the format, its exact value (numeq's exact reference, hi + lo), the platform's
emulation and both bounds (kind="deterministic", and kind="probabilistic" at lambda = 6, whose
per-element failure probability is printed as fail).

The statistic, per element i: the error and each bound divided by the element's scale
s_i = sum_k |a_ik b_kj| (positive whenever any product is; it does not blow up where the exact value
cancels to about zero, unlike a ratio to |exact_i|). Columns, over the m * n elements:
  err    max_i |emulated_i - exact_i| / s_i      the worst error observed
  det    max_i deterministic_bound_i / s_i
  prob   max_i probabilistic_bound_i / s_i
  ratio  prob / err: the largest normalised bound over the largest normalised error (they may
         come from different elements: with lognormal data s_i says little of how many
         roundings an element has, so this column mixes elements)
  near   min_i probabilistic_bound_i / error_i over the elements with an error: how close the
         worst observed error comes to its own element's bound, the bound's tightness
         ("exact" where every element of the emulation is exact: no error to compare with)
  med    median_i probabilistic_bound_i / |exact_i| (the user-facing relative allowance)
The target: the bound within 10x of the worst observed error (near <= 10) for every platform and
format; rows above are marked *, a violated bound (error above it anywhere) !.

Generators: normal (N(0,1)), uniform (U(-1,1): mixed signs), uniform_pos (|U(-1,1)|: positive, the
worst case for truncation toward zero), lognormal (mixed signs and scales), and any other
numeq.ops.generators() name.
"""

from __future__ import annotations

import argparse
import json
import math
import time

import numpy as np

import numeq


def matmul_formats(platform: str, out: str) -> list[str]:
    """The input formats of the platform's matmul plans with this output format."""
    d = json.loads(numeq.platform_json(platform))
    return [p["in_fmt"] for p in d["plans"] if p["op"] == "matmul" and p["out"] == out]


def inputs(gen: str, shape: tuple[int, int], fmt: str, seed: int) -> np.ndarray:
    if gen == "uniform_pos":
        return np.abs(numeq.ops.generate("uniform", shape, fmt, seed=seed))
    return numeq.ops.generate(gen, shape, fmt, seed=seed)


def row(platform: str, fmt: str, K: int, gen: str, m: int, n: int, out: str, seed: int) -> dict:
    a = inputs(gen, (m, K), fmt, seed)
    b = inputs(gen, (K, n), fmt, seed + 1)
    op = numeq.ops.matmul(a, b, in_fmt=fmt, out=out)
    hi, lo = op.exact()
    det = op.emulation(platform, kind="deterministic")
    prob = op.emulation(platform, kind="probabilistic")
    with np.errstate(all="ignore"):
        err = np.abs((det.values - hi) - lo)
        scale = np.abs(a) @ np.abs(b)
        ok = scale > 0
        e = float(np.max(err[ok] / scale[ok])) if ok.any() else 0.0
        d = float(np.max(det.bound[ok] / scale[ok])) if ok.any() else 0.0
        p = float(np.max(prob.bound[ok] / scale[ok])) if ok.any() else 0.0
        nz = np.abs(hi) > 0
        med = float(np.median(prob.bound[nz] / np.abs(hi[nz]))) if nz.any() else math.nan
        # Per element: how close the observed error comes to the element's own bound.
        erred = err > 0
        near = float(np.min(prob.bound[erred] / err[erred])) if erred.any() else math.inf
    violated = int(np.sum(err > prob.bound))
    return dict(err=e, det=d, prob=p, ratio=(p / e if e > 0 else math.inf), near=near, med=med,
                fail=prob.failure_probability, violated=violated)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ks", default="128,1024,8192")
    ap.add_argument("--m", type=int, default=16)
    ap.add_argument("--n", type=int, default=16)
    ap.add_argument("--generators", default="normal,uniform_pos,uniform,lognormal")
    ap.add_argument("--platforms", default=",".join(numeq.platforms()))
    ap.add_argument("--out", default="fp32")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    ks = [int(k) for k in args.ks.split(",")]
    gens = args.generators.split(",")
    t0 = time.perf_counter()
    print(f"matmul [{args.m}, K] @ [K, {args.n}] -> {args.out}; statistics over elements, "
          "per-element scale s_i = sum_k |a_ik b_kj|")
    print(f"{'platform':26s} {'in':7s} {'K':>5s} {'generator':11s} {'err':>9s} {'det':>9s} {'prob':>9s} "
          f"{'ratio':>7s} {'near':>7s} {'med':>9s} {'fail':>8s}")
    above = []
    for platform in args.platforms.split(","):
        fmts = matmul_formats(platform, args.out)
        if not fmts:
            print(f"{platform:26s} (no matmul with {args.out} output)")
            continue
        for fmt in fmts:
            for K in ks:
                for gen in gens:
                    r = row(platform, fmt, K, gen, args.m, args.n, args.out, args.seed)
                    ratio = "exact" if math.isinf(r["ratio"]) else f"{r['ratio']:.1f}"
                    near = "exact" if math.isinf(r["near"]) else f"{r['near']:.1f}"
                    mark = "*" if r["near"] > 10 and not math.isinf(r["near"]) else " "
                    if r["violated"]:
                        mark = "!"
                    if mark != " ":
                        above.append((platform, fmt, K, gen, ratio, near, r["violated"]))
                    print(f"{platform:26s} {fmt:7s} {K:5d} {gen:11s} {r['err']:9.2e} {r['det']:9.2e} {r['prob']:9.2e} "
                          f"{ratio:>7s} {near:>6s}{mark} {r['med']:9.2e} {r['fail']:8.1e}", flush=True)
    print(f"\n{len(above)} rows above 10x (*) or violated (!); {time.perf_counter() - t0:.0f} s")
    for a in above:
        print("  ", *a)


if __name__ == "__main__":
    main()
