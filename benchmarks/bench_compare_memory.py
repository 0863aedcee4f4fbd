#!/usr/bin/env python3
"""Memory added by numeq.compare: peak resident set size while judging an n^3 bf16 matmul on
nvidia.h100 (fp32 output), relative to the inputs plus the output.

    python benchmarks/bench_compare_memory.py [--sizes 1024,2048] [--phases]

Each size runs in a fresh process: the inputs (bf16), the op (which holds a and b as float64) and
a device output (float32, numpy's matmul: within the bound) are built first, the allocator is
trimmed, and the peak RSS (resource.getrusage ru_maxrss) reached during compare() minus the RSS
just before it is what compare adds. "inputs" counts a and b as the op holds them (float64),
"output" the float64 result; the issue's target is at most 4x inputs plus output. --phases also
measures op.emulate, op.exact and op.reference alone. No timing is asserted; times are printed.
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import json
import os
import resource
import subprocess
import sys
import time

MIB = 1 << 20


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def peak_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB


def trim() -> None:
    libc = ctypes.util.find_library("c")
    if libc:
        try:
            ctypes.CDLL(libc).malloc_trim(0)
        except AttributeError:
            pass


def child(n: int, phase: str) -> dict:
    import ml_dtypes
    import numpy as np

    import numeq

    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((n, n)).astype(ml_dtypes.bfloat16)
    op = numeq.ops.matmul(a, b, out="fp32")
    device = a.astype(np.float32) @ b.astype(np.float32)
    trim()
    before = rss_bytes()
    setup_peak = peak_bytes()
    t0 = time.perf_counter()
    if phase == "compare":
        verdict = numeq.compare(device, op, "nvidia.h100")
        note = f"passed={verdict.passed} bit_exact={verdict.bit_exact}"
    elif phase == "emulate":
        op._op.emulate("nvidia.h100", "deterministic", 6.0)
        note = ""
    elif phase == "exact":
        op._op.exact()
        note = ""
    else:
        op._op.reference()
        note = ""
    seconds = time.perf_counter() - t0
    if peak_bytes() <= setup_peak:  # never rose above the setup's own peak: an upper bound only
        note += " (at most: the setup's peak was higher)"
    return {"n": n, "phase": phase, "added": max(0, peak_bytes() - before), "seconds": seconds, "note": note}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1024,2048")
    ap.add_argument("--phases", action="store_true", help="also measure emulate, exact and reference alone")
    ap.add_argument("--child", nargs=2, metavar=("N", "PHASE"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(int(args.child[0]), args.child[1])))
        return
    phases = ["compare"] + (["emulate", "exact", "reference"] if args.phases else [])
    print(f"{'n':>6} {'phase':>10} {'added MiB':>10} {'inputs MiB':>10} {'output MiB':>10} "
          f"{'added/(in+out)':>15} {'target MiB':>10} {'seconds':>8}")
    for n in (int(s) for s in args.sizes.split(",")):
        inputs = 2 * n * n * 8  # a and b as float64 in the op
        output = n * n * 8
        for phase in phases:
            out = subprocess.run([sys.executable, __file__, "--child", str(n), phase], capture_output=True,
                                 text=True, check=True)
            r = json.loads(out.stdout.strip().splitlines()[-1])
            print(f"{n:>6} {phase:>10} {r['added'] / MIB:>10.1f} {inputs / MIB:>10.1f} {output / MIB:>10.1f} "
                  f"{r['added'] / (inputs + output):>15.2f} {(4 * inputs + output) / MIB:>10.1f} "
                  f"{r['seconds']:>8.1f}  {r['note']}", flush=True)


if __name__ == "__main__":
    main()
