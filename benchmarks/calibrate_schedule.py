"""Run.schedule() against public profiles: AWS's kernel-optimization tutorial profiles four
versions of a matrix-multiply kernel (4096 x 8192 @ 8192 x 8192, fp32 inputs, trn2) and states
each engine's active time. This script takes the kernels from a checkout of aws-neuron-sdk (the
tutorial's code blocks, unmodified), runs each on numeq without values, schedules it and prints
the predicted active fractions beside the published ones, and whether the versions come out in
the order the tutorial's profiles give (each faster than the one before).

    python3 benchmarks/calibrate_schedule.py --sdk PATH/TO/aws-neuron-sdk [--shape 4096 8192 8192]
        [--assume NAME=VALUE ...]

The published figures below are quoted with their source; nothing of the kernels is kept here.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
import types
from pathlib import Path

import numpy as np

import numeq.nki
from numeq.nki.schedule import PARAMETERS

TUTORIAL = "nki/guides/tutorials/kernel-optimization.rst"
# Engine active time per kernel version, as the tutorial's profile summaries state them (the text
# after each version's profile images): tiled, hoisted loads, blocked free dimensions, blocked K.
PUBLISHED = [
    ("tiled", {"dma": 0.9993, "tensor": 0.8728}),
    ("hoisted loads", {"dma": 0.9973, "tensor": 0.9985}),
    ("blocked free dimensions", {"dma": 0.9570, "tensor": 0.9952}),
    ("blocked free and K dimensions", {"dma": 0.2154, "tensor": 0.9950, "vector": 0.1055}),
]


def code_blocks(text: str) -> list[str]:
    """The ``.. code-block:: python`` bodies of an rst text, dedented, in order."""
    lines = text.splitlines()
    blocks, i = [], 0
    while i < len(lines):
        m = re.match(r"^(\s*)\.\. code-block:: python", lines[i])
        i += 1
        if not m:
            continue
        indent, body = len(m.group(1)), []
        while i < len(lines) and (not lines[i].strip() or len(lines[i]) - len(lines[i].lstrip()) > indent):
            body.append(lines[i])
            i += 1
        used = [line for line in body if line.strip()]
        if used:
            cut = min(len(line) - len(line.lstrip()) for line in used)
            blocks.append("\n".join(line[cut:] for line in body))
    return blocks


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sdk", required=True, help="a checkout of github.com/aws-neuron/aws-neuron-sdk")
    p.add_argument("--shape", type=int, nargs=3, default=[4096, 8192, 8192], metavar=("M", "K", "N"))
    p.add_argument("--assume", nargs="*", default=[], metavar="NAME=VALUE",
                   help="schedule parameters, or the run's assumptions (sbuf_overflow=reload_inputs ...)")
    args = p.parse_args()
    path = Path(args.sdk) / TUTORIAL
    if not path.is_file():
        print(f"--sdk: {path} not found", file=sys.stderr)
        return 2
    kernels = [b for b in code_blocks(path.read_text()) if "def matrix_multiply_kernel" in b]
    # The first kernel is one tile (the tutorial's starting point); the profiled versions follow.
    kernels = kernels[1:1 + len(PUBLISHED)]
    if len(kernels) != len(PUBLISHED):
        print(f"{path}: expected {len(PUBLISHED) + 1} matrix_multiply_kernel blocks", file=sys.stderr)
        return 2
    given = dict(a.split("=", 1) for a in args.assume)
    # Schedule parameters (numeq.nki.schedule.PARAMETERS) are numbers; the rest are the run's
    # assumptions (sbuf_overflow, tile_liveness ...), given to numeq.nki.run.
    assume = {k: float(v) for k, v in given.items() if k in PARAMETERS}
    run_assume = {k: v for k, v in given.items() if k not in PARAMETERS}
    M, K, N = args.shape
    lhs_t, rhs = np.zeros((K, M), np.float32), np.zeros((K, N), np.float32)
    print("| version | instructions | trace s | predicted ms | bound by | spilled GiB | engine: predicted (published) "
          "| max error |")
    print("|---|---|---|---|---|---|---|---|")
    times, worst = [], 0.0
    for n, (source, (name, published)) in enumerate(zip(kernels, PUBLISHED)):
        module = types.ModuleType(f"kernel_optimization_{n}")
        with numeq.nki.installed():
            exec(compile(source, f"kernel-optimization.rst:{name}", "exec"), module.__dict__)
        start = time.perf_counter()
        run = numeq.nki.run(module.matrix_multiply_kernel, lhs_t, rhs, values=False, assume=run_assume)
        traced = time.perf_counter() - start
        s = run.schedule(assume=assume)
        errors = {e: abs(s.active.get(e, 0.0) - v) for e, v in published.items()}
        worst = max(worst, *errors.values())
        times.append(s.time_s)
        cells = ", ".join(f"{e} {s.active.get(e, 0.0):.1%} ({v:.1%})" for e, v in published.items())
        spilled = f"{s.spill_bytes / 2 ** 30:.2f}" if s.spills else "0"
        print(f"| {name} | {len(run.trace)} | {traced:.1f} | {s.time_s * 1e3:.2f} | {s.bound_by} | {spilled} | {cells} | "
              f"{max(errors.values()) * 100:.1f} points |")
    ordered = all(a > b for a, b in zip(times, times[1:]))
    print(f"\nlargest error {worst * 100:.1f} points (goal: 15); versions ordered as the profiles order them: {ordered}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
