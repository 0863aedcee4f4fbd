"""numeq.nki speed (issue 30), side by side in one process:

1. a tiled bf16 matmul kernel (M = N = K = S, 128 x 512 output tiles, 128-row K tiles into PSUM,
   each output tile cast to bf16) run on numeq.nki, beside numeq's op-level trainium.trn2 emulation
   of the same matmul and numpy's float32 matmul of the same values (goal: the kernel within 3x of
   the op-level emulation);
2. the fixed cost of one small instruction (tensor_copy / tensor_tensor / tensor_scalar of a
   [128, 4] fp32 tile; goal: at most 20 us), beside numpy's own cost of the same arithmetic.

    python3 benchmarks/bench_nki.py [--size 2048] [--repeat 3]
"""

from __future__ import annotations

import argparse
import time

import ml_dtypes
import numpy as np

import numeq
from numeq import nki

nl, nisa = nki.language, nki.isa


@nki.jit
def tiled_matmul(a_t, b):
    K, M = a_t.shape
    _, N = b.shape
    out = nl.ndarray((M, N), nl.bfloat16, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // 128):
        for n in nl.affine_range(N // 512):
            acc = nl.ndarray((128, 512), nl.float32, buffer=nl.psum)
            for k in nl.affine_range(K // 128):
                at = nl.ndarray((128, 128), a_t.dtype, buffer=nl.sbuf)
                bt = nl.ndarray((128, 512), b.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=at, src=a_t[k * 128:(k + 1) * 128, m * 128:(m + 1) * 128])
                nisa.dma_copy(dst=bt, src=b[k * 128:(k + 1) * 128, n * 512:(n + 1) * 512])
                nisa.nc_matmul(acc, at, bt)
            o = nl.ndarray((128, 512), nl.bfloat16, buffer=nl.sbuf)
            nisa.tensor_copy(dst=o, src=acc)
            nisa.dma_copy(dst=out[m * 128:(m + 1) * 128, n * 512:(n + 1) * 512], src=o)
    return out


def _best(f, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        f()
        times.append(time.perf_counter() - t)
    return min(times)


def matmul_rows(size: int, repeat: int) -> None:
    rng = np.random.default_rng(0)
    a = rng.standard_normal((size, size)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((size, size)).astype(ml_dtypes.bfloat16)
    a_t = np.ascontiguousarray(a.T)
    a32, b32 = a.astype(np.float32), b.astype(np.float32)
    t_np = _best(lambda: a32 @ b32, repeat)
    t_op = _best(lambda: numeq.matmul(a, b, platform="trainium.trn2", out="bf16"), repeat)
    runs = []
    t_kernel = _best(lambda: runs.append(nki.run(tiled_matmul, a_t, b)), repeat)
    same = np.array_equal(runs[-1].outputs.astype(np.float64), numeq.matmul(a, b, platform=runs[-1].platform, out="bf16"))
    print(f"| {size} | {len(runs[-1].trace)} | {t_np:.3f} | {t_op:.3f} | {t_kernel:.3f} | {t_kernel / t_op:.2f}x | "
          f"{t_kernel / t_np:.1f}x | {same} |")


def fixed_cost(repeat: int, n: int = 2000) -> None:
    timings: dict[str, float] = {}

    @nki.jit
    def kernel(a):
        t = nl.ndarray((128, 4), nl.float32, buffer=nl.sbuf)
        u = nl.ndarray((128, 4), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a)
        nisa.dma_copy(dst=u, src=a)
        for name, step in (("tensor_copy", lambda: nisa.tensor_copy(dst=u, src=t)),
                           ("tensor_tensor", lambda: nisa.tensor_tensor(dst=u, data1=t, data2=u, op=nl.add)),
                           ("tensor_scalar", lambda: nisa.tensor_scalar(dst=u, data=t, op0=nl.multiply, operand0=2.0))):
            def loop(step=step):
                for _ in range(n):
                    step()
            timings[name] = _best(loop, repeat) / n
        return a

    nki.run(kernel, np.ones((128, 4), np.float32))
    x = np.ones((128, 4), np.float32)
    y = np.empty_like(x)
    t_np = _best(lambda: [np.add(x, x, out=y) for _ in range(n)], repeat) / n
    for name, t in timings.items():
        print(f"| {name} | {t * 1e6:.1f} | {t_np * 1e6:.2f} |")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", type=int, nargs="+", default=[1024, 2048])
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args()
    print("| S | instructions | numpy fp32 s | op-level trn2 s | kernel s | kernel/op-level | kernel/numpy | bit-exact |")
    print("|---|---|---|---|---|---|---|---|")
    for s in args.size:
        matmul_rows(s, args.repeat)
    print("\n| instruction | numeq.nki us | numpy add us |\n|---|---|---|")
    fixed_cost(args.repeat)


if __name__ == "__main__":
    main()
