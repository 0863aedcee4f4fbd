"""numeq.nki speed (issue 30), side by side in one process:

1. a tiled bf16 matmul kernel (M = N = K = S, 128 x 512 output tiles, 128-row K tiles into PSUM,
   each output tile cast to bf16) run on numeq.nki, beside numeq's op-level trainium.trn2 emulation
   of the same matmul and numpy's float32 matmul of the same values (goal: the kernel within 3x of
   the op-level emulation);
2. a causal flash-attention forward kernel (query tiles of 128, key blocks of 128 up to the diagonal,
   online softmax, head dim 128) at sequence 4096 (goal: within one minute on two cores), beside
   numpy computing the same attention in float32;
3. the fixed cost of one small instruction (tensor_copy / tensor_tensor / tensor_scalar of a
   [128, 4] fp32 tile; goal: at most 20 us), beside numpy's own cost of the same arithmetic;
4. the schedule (issue 43) of the tiled matmul kernel: the run, its graph, hazards and schedule
   (goal: at most 30% more than the run), and the run without values (goal: 10x faster).

    python3 benchmarks/bench_nki.py [--size 1024 2048] [--repeat 3] [--seq 4096]
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


MASKED = -3.0e38  # an fp32 score no real score reaches; exp(MASKED - m) is 0


def _transposed(src, rows, cols, dtype):
    flipped = nl.ndarray((cols, rows), dtype, buffer=nl.psum)
    nisa.nc_transpose(dst=flipped, data=src)
    back = nl.ndarray((cols, rows), dtype, buffer=nl.sbuf)
    nisa.tensor_copy(dst=back, src=flipped)
    return back


@nki.jit
def causal_attention(q, k, v):
    """softmax(q k^T / sqrt(d) + causal mask) v for q, k, v [L, d] bf16 (L a multiple of 128,
    d <= 128): FlashAttention-2's forward (arXiv:2307.08691, Algorithm 1) per 128-query tile."""
    L, d = q.shape
    T = 128
    scale = 1.0 / float(np.sqrt(d))
    out = nl.ndarray((L, d), nl.float32, buffer=nl.shared_hbm)
    for i in nl.affine_range(L // T):
        q_sb = nl.ndarray((T, d), q.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=q_sb, src=q[i * T:(i + 1) * T, :])
        q_t = _transposed(q_sb, T, d, q.dtype)
        m = nl.ndarray((T, 1), nl.float32, buffer=nl.sbuf)
        l = nl.ndarray((T, 1), nl.float32, buffer=nl.sbuf)
        o = nl.ndarray((T, d), nl.float32, buffer=nl.sbuf)
        for j in nl.sequential_range(i + 1):  # key blocks up to the diagonal
            k_sb = nl.ndarray((T, d), k.dtype, buffer=nl.sbuf)
            v_sb = nl.ndarray((T, d), v.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=k_sb, src=k[j * T:(j + 1) * T, :])
            nisa.dma_copy(dst=v_sb, src=v[j * T:(j + 1) * T, :])
            k_t = _transposed(k_sb, T, d, k.dtype)
            s_ps = nl.ndarray((T, T), nl.float32, buffer=nl.psum)
            nisa.nc_matmul(s_ps, q_t, k_t)
            s = nl.ndarray((T, T), nl.float32, buffer=nl.sbuf)
            nisa.tensor_scalar(dst=s, data=s_ps, op0=nl.multiply, operand0=scale)
            if j == i:  # the diagonal block: keep key t <= query p
                nisa.affine_select(dst=s, pattern=[[-1, T]], channel_multiplier=1, on_true_tile=s,
                                   on_false_value=MASKED, cmp_op=nl.greater_equal, offset=0)
            m_new = nl.ndarray((T, 1), nl.float32, buffer=nl.sbuf)
            nisa.tensor_reduce(dst=m_new, op=nl.maximum, data=s, axis=1)
            if j > 0:
                nisa.tensor_tensor(dst=m_new, data1=m_new, data2=m, op=nl.maximum)
            neg_m = nl.ndarray((T, 1), nl.float32, buffer=nl.sbuf)
            nisa.tensor_scalar(dst=neg_m, data=m_new, op0=nl.multiply, operand0=-1.0)
            p = nl.ndarray((T, T), nl.float32, buffer=nl.sbuf)
            rowsum = nl.ndarray((T, 1), nl.float32, buffer=nl.sbuf)
            nisa.activation(dst=p, op=nl.exp, data=s, bias=neg_m, reduce_op=nl.add, reduce_res=rowsum,
                            reduce_cmd=nisa.reduce_cmd.reset_reduce)
            p_lo = nl.ndarray((T, T), v.dtype, buffer=nl.sbuf)
            nisa.tensor_copy(dst=p_lo, src=p)
            p_t = _transposed(p_lo, T, T, v.dtype)
            pv = nl.ndarray((T, d), nl.float32, buffer=nl.psum)
            nisa.nc_matmul(pv, p_t, v_sb)
            if j == 0:
                nisa.tensor_copy(dst=l, src=rowsum)
                nisa.tensor_copy(dst=o, src=pv)
            else:
                a = nl.ndarray((T, 1), nl.float32, buffer=nl.sbuf)
                nisa.activation(dst=a, op=nl.exp, data=m, bias=neg_m)
                nisa.tensor_tensor(dst=l, data1=l, data2=a, op=nl.multiply)
                nisa.tensor_tensor(dst=l, data1=l, data2=rowsum, op=nl.add)
                nisa.tensor_scalar(dst=o, data=o, op0=nl.multiply, operand0=a)
                nisa.tensor_tensor(dst=o, data1=pv, data2=o, op=nl.add)
            nisa.tensor_copy(dst=m, src=m_new)
        y = nl.ndarray((T, d), nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=y, data=o, op0=nl.divide, operand0=l)
        nisa.dma_copy(dst=out[i * T:(i + 1) * T, :], src=y)
    return out


def attention_row(seq: int, d: int = 128) -> None:
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal((seq, d)).astype(ml_dtypes.bfloat16) for _ in range(3))

    def numpy_attention():
        s = (q.astype(np.float32) @ k.astype(np.float32).T) / np.float32(np.sqrt(d))
        s[np.triu_indices(seq, 1)] = -np.inf
        e = np.exp(s - s.max(axis=1, keepdims=True))
        return (e / e.sum(axis=1, keepdims=True)) @ v.astype(np.float32)

    t_np = _best(numpy_attention, 1)
    t = time.perf_counter()
    r = nki.run(causal_attention, q, k, v)
    t_kernel = time.perf_counter() - t
    err = float(np.max(np.abs(r.outputs - numpy_attention())))
    print(f"| {seq} | {d} | {len(r.trace)} | {t_np:.2f} | {t_kernel:.1f} | {t_kernel / t_np:.0f}x | "
          f"{len(r.errors)} | {err:.1e} |")


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


def schedule_rows(size: int, repeat: int) -> None:
    rng = np.random.default_rng(0)
    a = rng.standard_normal((size, size)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((size, size)).astype(ml_dtypes.bfloat16)
    a_t = np.ascontiguousarray(a.T)
    runs = []
    t_run = _best(lambda: runs.append(nki.run(tiled_matmul, a_t, b)), repeat)
    r = runs[-1]
    # The graph is made once per run and kept (Run._graph): dropped before each timing.
    t_graph = _best(lambda: (setattr(r, "_graph", None), r.hazards(), r.schedule()), repeat)
    bare = []
    t_bare = _best(lambda: bare.append(nki.run(tiled_matmul, a_t, b, values=False)), repeat)
    print(f"| {size} | {len(r.trace)} | {t_run:.3f} | {t_graph:.3f} | {t_graph / t_run:.0%} | {t_bare:.3f} | "
          f"{t_run / t_bare:.1f}x | {r.schedule().time_s * 1e6:.1f} |")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", type=int, nargs="+", default=[1024, 2048])
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--seq", type=int, nargs="*", default=[4096])
    args = p.parse_args()
    print("| S | instructions | numpy fp32 s | op-level trn2 s | kernel s | kernel/op-level | kernel/numpy | bit-exact |")
    print("|---|---|---|---|---|---|---|---|")
    for s in args.size:
        matmul_rows(s, args.repeat)
    print("\n| seq | head dim | instructions | numpy fp32 s | kernel s | kernel/numpy | errors | max diff to numpy |")
    print("|---|---|---|---|---|---|---|---|")
    for seq in args.seq:
        attention_row(seq)
    print("\n| instruction | numeq.nki us | numpy add us |\n|---|---|---|")
    fixed_cost(args.repeat)
    print("\n| S | instructions | run s | hazards + schedule s | added | values=False s | speedup | predicted us |")
    print("|---|---|---|---|---|---|---|---|")
    for s in args.size:
        schedule_rows(s, args.repeat)


if __name__ == "__main__":
    main()
