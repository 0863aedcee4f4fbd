"""The NKI kernels of the kernel-based port reviews (``numeq review`` runs them; see docs/reviews.md):
the out-projection GEMM out[M, N] = a_t.T @ b of examples/reviews, fp32 output.

- ``matmul_port``: K in tiles of ``k_tile`` rows accumulated in one PSUM tile per output tile:
  correct at 128; at 256 (the ``limit`` review) twice the 128 partitions one nc_matmul contracts.
- ``matmul_bf16_total``: each K tile's product added into a bf16 SBUF tile (the mistake: the
  running sum rounded to bf16 at every step; the output is still fp32).
"""

import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def matmul_port(a_t, b, k_tile=128):
    K, M = a_t.shape
    N = b.shape[1]
    out = nl.ndarray((M, N), nl.float32, buffer=nl.shared_hbm)
    acc = nl.ndarray((M, N), nl.float32, buffer=nl.psum)
    for k in nl.affine_range(K // k_tile):
        at = nl.ndarray((k_tile, M), a_t.dtype, buffer=nl.sbuf)
        bt = nl.ndarray((k_tile, N), b.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=at, src=a_t[k * k_tile:(k + 1) * k_tile, :])
        nisa.dma_copy(dst=bt, src=b[k * k_tile:(k + 1) * k_tile, :])
        nisa.nc_matmul(acc, at, bt)
    res = nl.ndarray((M, N), nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=res, src=acc)
    nisa.dma_copy(dst=out, src=res)
    return out


@nki.jit
def matmul_bf16_total(a_t, b):
    K, M = a_t.shape
    N = b.shape[1]
    out = nl.ndarray((M, N), nl.float32, buffer=nl.shared_hbm)
    total = nl.ndarray((M, N), nl.bfloat16, buffer=nl.sbuf)
    for k in nl.sequential_range(K // 128):
        part = nl.ndarray((M, N), nl.float32, buffer=nl.psum)
        at = nl.ndarray((128, M), a_t.dtype, buffer=nl.sbuf)
        bt = nl.ndarray((128, N), b.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=at, src=a_t[k * 128:(k + 1) * 128, :])
        nisa.dma_copy(dst=bt, src=b[k * 128:(k + 1) * 128, :])
        nisa.nc_matmul(part, at, bt)
        if k == 0:
            nisa.tensor_copy(dst=total, src=part)
        else:
            nisa.tensor_tensor(dst=total, data1=total, data2=part, op=nl.add)
    res = nl.ndarray((M, N), nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=res, src=total)
    nisa.dma_copy(dst=out, src=res)
    return out
