"""Tiled matmul, loop order n-m-k with one PSUM tile for the whole kernel: each output tile's K
tiles accumulate into it, it is evacuated to SBUF, and the next output tile starts over in the
same bank. Reuse needs the first matmul of each output tile to overwrite what the last one left:
``accumulate=(k > 0)`` says so (nki.isa.nc_matmul, 0.3.0+); without it the first write of a reused
tile is the compiler's inference (the ``matmul_accumulate`` assumption).

Run: ``python3 examples/nki/matmul_nmk.py``.
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
def matmul_nmk(a_t, b):
    """out[M, N] = a_t.T @ b, fp32; a_t [K, M], b [K, N]; one PSUM bank reused."""
    K, M = a_t.shape
    _, N = b.shape
    TK, TM, TN = nl.tile_size.pmax, nl.tile_size.gemm_stationary_fmax, nl.tile_size.gemm_moving_fmax
    out = nl.ndarray((M, N), nl.float32, buffer=nl.shared_hbm)
    acc = nl.ndarray((TM, TN), nl.float32, buffer=nl.psum)
    res = nl.ndarray((TM, TN), nl.float32, buffer=nl.sbuf)
    for n in nl.sequential_range(N // TN):
        for m in nl.sequential_range(M // TM):
            for k in nl.sequential_range(K // TK):
                a_tile = nl.ndarray((TK, TM), a_t.dtype, buffer=nl.sbuf)
                b_tile = nl.ndarray((TK, TN), b.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=a_tile, src=a_t[k * TK:(k + 1) * TK, m * TM:(m + 1) * TM])
                nisa.dma_copy(dst=b_tile, src=b[k * TK:(k + 1) * TK, n * TN:(n + 1) * TN])
                nisa.nc_matmul(acc, a_tile, b_tile, accumulate=(k > 0))
            nisa.tensor_copy(dst=res, src=acc)
            nisa.dma_copy(dst=out[m * TM:(m + 1) * TM, n * TN:(n + 1) * TN], src=res)
    return out


def inputs(seed: int = 0, m: int = 256, k: int = 384, n: int = 1024) -> tuple[np.ndarray, np.ndarray]:
    """a [M, K] and b [K, N] of bf16 values (standard normal, rounded)."""
    return matmul_inputs(seed, m, k, n)


if __name__ == "__main__":
    check_matmul(matmul_nmk, *inputs())
