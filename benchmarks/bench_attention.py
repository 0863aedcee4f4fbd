#!/usr/bin/env python3
"""Certified attention beside numpy: the reference and a whole check, in one process.

    python benchmarks/bench_attention.py [--seqs 256 512 1024 2048] [--d 64] [--repeat 3]

Inputs: q, k, v of shape (1, seq, d), standard normal values rounded into bf16, held in float64
arrays. Timed, each the best of --repeat runs:

- numpy: float64 attention, softmax(q k^T / sqrt(d)) v with the row maximum subtracted (not
  exact: every step rounds; the speed of light);
- reference: `numeq.reference.attention(q, k, v, in_fmt="bf16")`, every element correctly rounded
  into fp32 (the fast path's enclosures, MPFR where they round apart);
- check: `numeq.compare(actual, op, "nvidia.h100")` of a fresh op on the H100 emulation's output
  (the exact value as enclosures, the reference from them, the platform's emulation and its
  bound): what a test pays.

Goals (issue 32): at sequence 2048, head dim 64, the reference within 20x numpy and the check
within 40x.
"""

from __future__ import annotations

import argparse

import numpy as np

import numeq
from timing import best_of


def numpy_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    s = q @ k.swapaxes(-1, -2) / np.sqrt(q.shape[-1])
    s -= s.max(axis=-1, keepdims=True)
    p = np.exp(s)
    p /= p.sum(axis=-1, keepdims=True)
    return p @ v


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seqs", type=int, nargs="+", default=[256, 512, 1024, 2048])
    parser.add_argument("--d", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    print("| seq | d | numpy ms | reference s | reference / numpy | check s | check / numpy | verdict |")
    print("|---|---|---|---|---|---|---|---|")
    for seq in args.seqs:
        q, k, v = (numeq.round(rng.standard_normal((1, seq, args.d)), "bf16") for _ in range(3))
        t_numpy = best_of(lambda: numpy_attention(q, k, v), max(args.repeat, 5))
        t_reference = best_of(lambda: numeq.reference.attention(q, k, v, in_fmt="bf16"), args.repeat)
        actual = numeq.ops.attention(q, k, v, in_fmt="bf16", out="fp32").emulate("nvidia.h100")
        verdicts = []

        def check() -> None:
            op = numeq.ops.attention(q, k, v, in_fmt="bf16", out="fp32")  # fresh: nothing kept
            verdicts.append(numeq.compare(actual, op, "nvidia.h100"))

        t_check = best_of(check, args.repeat)
        t_numpy = min(t_numpy, best_of(lambda: numpy_attention(q, k, v), max(args.repeat, 5)))
        print(f"| {seq} | {args.d} | {t_numpy * 1e3:.1f} | {t_reference:.3f} | {t_reference / t_numpy:.1f}x | "
              f"{t_check:.3f} | {t_check / t_numpy:.1f}x | {verdicts[-1].tier} |", flush=True)


if __name__ == "__main__":
    main()
