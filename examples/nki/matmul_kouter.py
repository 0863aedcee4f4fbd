"""Tiled matmul, K outermost: every output tile keeps its own PSUM tile for the whole K loop
(M/128 x N/512 tiles of one 2 KiB bank each: at most 8 banks), each K tile of a_t and b is loaded
once and multiplied into all of them; the PSUM tiles are evacuated after the last K tile. Each
output element still sees its K tiles in order, so the result equals the m-n-k order's bit for bit.

Run: ``python3 examples/nki/matmul_kouter.py``.
"""

from __future__ import annotations

import numpy as np

import numeq.nki
from _common import check_matmul, matmul_inputs

with numeq.nki.installed():
    import nki
    import nki.isa as nisa
    import nki.language as nl


@nki.jit
def matmul_kouter(a_t, b):
    """out[M, N] = a_t.T @ b, fp32; a_t [K, M], b [K, N]; (M / 128) * (N / 512) <= 8 PSUM banks."""
    K, M = a_t.shape
    _, N = b.shape
    TK, TM, TN = nl.tile_size.pmax, nl.tile_size.gemm_stationary_fmax, nl.tile_size.gemm_moving_fmax
    out = nl.ndarray((M, N), nl.float32, buffer=nl.shared_hbm)
    accs = [[nl.ndarray((TM, TN), nl.float32, buffer=nl.psum) for _ in range(N // TN)] for _ in range(M // TM)]
    for k in nl.sequential_range(K // TK):
        a_tile = nl.ndarray((TK, M), a_t.dtype, buffer=nl.sbuf)
        b_tile = nl.ndarray((TK, N), b.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=a_tile, src=a_t[k * TK:(k + 1) * TK, :])
        nisa.dma_copy(dst=b_tile, src=b[k * TK:(k + 1) * TK, :])
        for m in nl.affine_range(M // TM):
            for n in nl.affine_range(N // TN):
                nisa.nc_matmul(accs[m][n], a_tile[:, m * TM:(m + 1) * TM], b_tile[:, n * TN:(n + 1) * TN])
    for m in nl.affine_range(M // TM):
        for n in nl.affine_range(N // TN):
            res = nl.ndarray((TM, TN), nl.float32, buffer=nl.sbuf)
            nisa.tensor_copy(dst=res, src=accs[m][n])
            nisa.dma_copy(dst=out[m * TM:(m + 1) * TM, n * TN:(n + 1) * TN], src=res)
    return out


def inputs(seed: int = 0, m: int = 256, k: int = 384, n: int = 1024) -> tuple[np.ndarray, np.ndarray]:
    """a [M, K] and b [K, N] of bf16 values (standard normal, rounded)."""
    return matmul_inputs(seed, m, k, n)


if __name__ == "__main__":
    check_matmul(matmul_kouter, *inputs())
