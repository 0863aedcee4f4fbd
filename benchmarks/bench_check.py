#!/usr/bin/env python3
"""The cost of a check: numeq.compare side by side with numpy computing the same op, in one process.

    python benchmarks/bench_check.py [--quick] [--repeats 3] [--threads N] [--only matmul|norm|fixed]

Rows:
* matmul: a bf16 GEMM (float32 arrays holding bf16 values, in_fmt="bf16", out fp32) at 512^3 and
  1024^3 on nvidia.h100, trainium.trn2 and cuda_core.fp32, and on cuda_core.fp32 an fp32 GEMM from
  float32 arrays; the peer is numpy float32 ``a @ b``.
* softmax, log_softmax, layernorm, rmsnorm on 1024 x 4096 bf16 values (out bf16) on nvidia.h100;
  the peer is numpy float64 computing the same op.

The device output judged is the platform's own emulation (a correct device: tier bit_exact), made
beforehand from another op. Every figure is the best of ``--repeats`` runs, each on a fresh op
(an op keeps its exact result and reference: a second compare on the same op would not pay for
them).

Columns: ``compare`` the whole check on a fresh op; ``peer`` numpy; ``ratio`` compare / peer.
The phases, each timed around its own Python call on a fresh op: ``emulate`` (op.emulation:
values and deterministic bound), ``exact`` (the exact values a check measures against: op.exact()
for most ops, the enclosure within 2^-40 for softmax, log_softmax and the norms), ``reference`` (op.reference() after
exact: what the reference adds once the exact value is known), ``tolerance`` (the (rtol, atol) fit
of the bound against the reference), and ``verdict`` (compare on the op whose exact value and
reference are already kept, less emulate and tolerance: the ladder's own passes).

``--quick``: 128^3 and 256^3 matmuls, 256 x 1024 rows for the others. Nothing here asserts on time.

A last table gives the fixed cost of one call: numeq.matmul on a 4x8x4 problem beside numpy's a @ b.
"""

from __future__ import annotations

import argparse
import time
from typing import Any, Callable

import numpy as np

import numeq
from timing import best_of  # benchmarks/timing.py
from numeq import _core




def phases(repeats: int, make: Callable[[], numeq.ops.Op], platform: str, actual: np.ndarray) -> dict[str, float]:
    """compare on a fresh op, and its parts on another fresh op; best of repeats each."""
    names = ("compare", "emulate", "exact", "reference", "tolerance", "kept")
    t = dict.fromkeys(names, float("inf"))

    def timed(name: str, fn: Callable[[], Any]) -> Any:
        t0 = time.perf_counter()
        r = fn()
        t[name] = min(t[name], time.perf_counter() - t0)
        return r

    for _ in range(repeats):
        op = make()
        timed("compare", lambda: numeq.compare(actual, op, platform))
        op = make()
        bound = timed("emulate", lambda: op.emulation(platform)).bound
        timed("exact", op._op.check_exact)
        ref = timed("reference", op.reference)
        timed("tolerance", lambda: _core.cases_tolerance(bound, ref, op.out))
        # compare on an op that keeps its exact value and reference: emulation, ladder, tolerance.
        timed("kept", lambda: numeq.compare(actual, op, platform))
    t["verdict"] = max(0.0, t["kept"] - t["emulate"] - t["tolerance"])
    return t


def softmax64(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def log_softmax64(x: np.ndarray) -> np.ndarray:
    s = x - x.max(axis=-1, keepdims=True)
    return s - np.log(np.exp(s).sum(axis=-1, keepdims=True))


def layernorm64(x: np.ndarray) -> np.ndarray:
    m = x.mean(axis=-1, keepdims=True)
    v = ((x - m) ** 2).mean(axis=-1, keepdims=True)
    return (x - m) / np.sqrt(v + 1e-5)


def rmsnorm64(x: np.ndarray) -> np.ndarray:
    return x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + 1e-6)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small sizes")
    ap.add_argument("--repeats", type=int, default=3, help="best of this many runs (default 3)")
    ap.add_argument("--threads", type=int, default=0, help="numeq threads (0: numeq's default)")
    ap.add_argument("--norm-repeats", type=int, default=0,
                    help="repeats of the softmax and norm rows (default: --repeats)")
    ap.add_argument("--only", choices=("matmul", "norm", "fixed"), default=None, help="one group of rows")
    args = ap.parse_args()
    if args.threads:
        numeq.set_num_threads(args.threads)
    rng = np.random.default_rng(0)
    sizes = (128, 256) if args.quick else (512, 1024)
    rows, cols = (256, 1024) if args.quick else (1024, 4096)
    cols_phase = ("emulate", "exact", "reference", "tolerance", "verdict")
    print(f"numeq {numeq.__file__}; threads {numeq.num_threads()}; best of {args.repeats}; times in ms\n")
    print("| check | compare | peer | ratio | " + " | ".join(cols_phase) + " |")
    print("|---" * (4 + len(cols_phase)) + "|")

    def row(name: str, t: dict[str, float], peer: float) -> None:
        cells = [f"{1e3 * t['compare']:.1f}", f"{1e3 * peer:.2f}", f"{t['compare'] / peer:.0f}x"]
        cells += [f"{1e3 * t[c]:.1f}" for c in cols_phase]
        print(f"| {name} | " + " | ".join(cells) + " |", flush=True)

    if args.only in (None, "matmul"):
        for n in sizes:
            a32 = rng.standard_normal((n, n)).astype(np.float32)
            b32 = rng.standard_normal((n, n)).astype(np.float32)
            abf = numeq.round(a32, "bf16").astype(np.float32)
            bbf = numeq.round(b32, "bf16").astype(np.float32)
            for platform, fmt, a, b in (("nvidia.h100", "bf16", abf, bbf), ("trainium.trn2", "bf16", abf, bbf),
                                        ("cuda_core.fp32", "bf16", abf, bbf), ("cuda_core.fp32", "fp32", a32, b32)):
                def make(a=a, b=b, fmt=fmt) -> numeq.ops.Op:
                    return numeq.ops.matmul(a, b, in_fmt=fmt, out="fp32")
                actual = make().emulate(platform)
                peer = best_of(lambda a=a, b=b: a @ b, args.repeats)
                row(f"matmul {n}^3 {fmt} {platform}", phases(args.repeats, make, platform, actual), peer)

    if args.only in (None, "norm"):
        x = numeq.round(rng.standard_normal((rows, cols)), "bf16")
        platform = "nvidia.h100"
        for name, build, peer_fn in (
            ("softmax", lambda: numeq.ops.softmax(x, in_fmt="bf16", out="bf16"), softmax64),
            ("log_softmax", lambda: numeq.ops.log_softmax(x, in_fmt="bf16", out="bf16"), log_softmax64),
            ("layernorm", lambda: numeq.ops.layernorm(x, in_fmt="bf16", out="bf16"), layernorm64),
            ("rmsnorm", lambda: numeq.ops.rmsnorm(x, in_fmt="bf16", out="bf16"), rmsnorm64),
        ):
            actual = build().emulate(platform)
            peer = best_of(lambda f=peer_fn: f(x), args.repeats)
            row(f"{name} {rows}x{cols} bf16 {platform}", phases(args.norm_repeats or args.repeats, build, platform, actual), peer)

    if args.only in (None, "fixed"):
        # The fixed cost of one call: a 4x8x4 matmul emulated (numeq.matmul) beside numpy's a @ b,
        # from float32 arrays and from float32 arrays said to hold bf16 values (checked).
        a = numeq.round(rng.standard_normal((4, 8)), "bf16").astype(np.float32)
        b = numeq.round(rng.standard_normal((8, 4)), "bf16").astype(np.float32)
        calls = 20000

        def per_call(fn: Callable[[], Any]) -> float:
            return best_of(lambda: [fn() for _ in range(calls)], args.repeats) / calls

        peer = per_call(lambda: a @ b)
        print("\n| fixed cost of one call (4x8x4 matmul) | us | numpy a @ b us | ratio |\n|---|---|---|---|")
        for name, fn in (("numeq.matmul, float32, nvidia.h100", lambda: numeq.matmul(a, b, platform="nvidia.h100")),
                         ("numeq.matmul, float32 in_fmt=bf16, nvidia.h100",
                          lambda: numeq.matmul(a, b, platform="nvidia.h100", in_fmt="bf16"))):
            t = per_call(fn)
            print(f"| {name} | {1e6 * t:.1f} | {1e6 * peer:.2f} | {t / peer:.0f}x |", flush=True)


if __name__ == "__main__":
    main()
